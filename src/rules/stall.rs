//! What counts as a stall, and its likely cause: the judgement `Stalled` and `LogSilent`
//! share, from the partition's evidence of work and what the probes and the server's log say.

use super::Cause;
use crate::human::human;
use crate::model::stacks::{Captures, Verdict};
use crate::model::{PartitionView, Run, Seconds};

/// A partition whose progress lines come this many median gaps late is stalled (when that is
/// longer than the threshold).
const STALL_GAPS: f64 = 5.0;

/// What the evidence says of an active partition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Stall {
    /// No evidence of work for longer than the threshold.
    Stalled { seconds: f64, threshold: f64 },
    /// The log is silent that long, but the output files keep growing.
    LogSilent { seconds: f64 },
}

/// Judges an active partition's evidence against max(`stall_after`, 5× its median gap
/// between progress reports). Before its first report, log silence is expected for as long as
/// the first report may take, so it is not `LogSilent` then.
pub(super) fn judge_stall(
    run: &Run,
    v: &PartitionView<'_>,
    stall_after: f64,
    now: Seconds,
) -> Option<Stall> {
    let e = run.evidence(v, now)?;
    let threshold = v
        .log?
        .median_progress_gap()
        .map_or(stall_after, |gap| stall_after.max(STALL_GAPS * gap));
    let seconds = now - e.at;
    if seconds > threshold {
        return Some(Stall::Stalled { seconds, threshold });
    }
    let silent = now - e.log_at;
    let first_report_late = e.first_report_due.is_none_or(|due| now > due);
    // The outputs went on for at least half the threshold while the log was silent: the last
    // records written just after the last progress line (the driver logs every N completions),
    // or the first ones after a stall, before the line that reports them, are not "still
    // growing".
    let since = e.outputs_since.unwrap_or(e.log_at);
    let outputs_moving = e.outputs_at.is_some_and(|o| o - since >= threshold / 2.0);
    (silent > threshold && outputs_moving && first_report_late)
        .then_some(Stall::LogSilent { seconds: silent })
}

/// The likely cause of a stall that began at `since`, and the evidence for it in words, from
/// what the probes and the server's log say, refined by the driver's stacks where they were
/// taken during it (docs/alerts.md#stacks).
pub(super) fn stall_cause(
    run: &Run,
    stacks: Option<&Captures>,
    since: Seconds,
    now: Seconds,
) -> (Cause, String) {
    let stacks = stacks.and_then(|s| s.driver_verdict(since));
    if let Some((path, since)) = run.hung(now).into_iter().next() {
        return (
            Cause::FileSystemHung,
            format!(
                "The file system under {path} does not answer: a read of it has not returned for {} (a hung NFS, Lustre or FUSE mount). The other files are still read.",
                human(now - since)
            ),
        );
    }
    if run.process().as_ref().is_some_and(|p| !p.up) {
        return (
            Cause::DriverGone,
            "The driver process is not running.".into(),
        );
    }
    match stacks {
        Some((Verdict::Deadlocked, seen)) => return (
            Cause::DriverDeadlocked,
            format!("The driver's threads wait on its own locks and on nothing outside it: {seen}. It will not move again by itself."),
        ),
        Some((Verdict::Stopped, seen)) => return (
            Cause::DriverStopped,
            format!("The driver process is stopped (SIGSTOP, ^Z or a debugger) and runs nothing until it gets SIGCONT: {seen}."),
        ),
        _ => {}
    }
    if let Some(fatal) = run.server_log().crashed() {
        return (
            Cause::ServerCrashed,
            format!(
                "The inference server's log ends in a {}: {} (see its last lines below).",
                fatal.event.replace('_', " "),
                fatal.text
            ),
        );
    }
    // As ServerDown names it: an engine dead behind its live front end is a crash, a health
    // ask with no answer from a port that accepts is a hung HTTP process.
    if let Some(dead) = run.engine_dead() {
        return (
            Cause::ServerCrashed,
            format!("The inference server's front end still runs, but {dead}: nothing it accepts is served."),
        );
    }
    if run.server_down() {
        if let Some(why) = run.server().as_ref().filter(|s| s.hung).map(|s| {
            s.error
                .clone()
                .unwrap_or_else(|| "its health check gets no answer".into())
        }) {
            return (
                Cause::ServerHung,
                format!("The inference server does not answer: {why}. Its process lives, so the requests it holds wait."),
            );
        }
        return (
            Cause::ServerDown,
            "The inference server's health check fails.".into(),
        );
    }
    if run.server_asleep() {
        return (
            Cause::ServerAsleep,
            "The inference server's engine is put to sleep (vLLM's sleep mode): it serves nothing until it is woken up. Nothing is wrong with it; whoever put it to sleep has the run waiting.".into(),
        );
    }
    if let Some(cause) = server_cause(run, stacks, now) {
        return cause;
    }
    driver_cause(stacks)
}

/// The cause the inference server's figures give, where it has any: hung, busy with nothing
/// written, or idle while the client waits.
fn server_cause(
    run: &Run,
    stacks: Option<(Verdict, &str)>,
    now: Seconds,
) -> Option<(Cause, String)> {
    let figures = run.server_figures();
    if run.server().is_none() && figures.running.is_none() {
        return None;
    }
    match (figures.running, figures.queued) {
        (Some(running), queued) if run.server_stuck(now) => {
            let claimed = run
                .server()
                .as_ref()
                .and_then(|s| s.claimed_tokens_per_second)
                .filter(|c| *c > 0.0);
            let held = if running > 0.0 {
                format!("{running:.0} running requests")
            } else {
                format!("{:.0} queued requests and runs none", queued.unwrap_or(0.0))
            };
            Some(match claimed {
                Some(claimed) => (
                    Cause::ServerHung,
                    format!("Its metrics are frozen: the server's /metrics claims {claimed:.0} tok/s and {held}, but its generated-tokens counter stands still: its engine is dead or deadlocked behind a front end that still answers."),
                ),
                None => (
                    Cause::ServerHung,
                    format!("The server holds {held} but generates no tokens: it is wedged (a stuck collective, a dead worker)."),
                ),
            })
        }
        (Some(running), _) if running > 0.0 => Some((
            Cause::ServerBusyNothingWritten,
            format!("The server is running {running:.0} requests{} but nothing reaches the log or the outputs: requests may be hanging on very long generations, or the client lost them.", figures.generation_tokens_per_second.map(|t| format!(" and generating {t:.0} tok/s")).unwrap_or_default()),
        )),
        (Some(_), queued) if queued.unwrap_or(0.0) == 0.0 => Some(match stacks {
            Some((Verdict::WaitingOnServer, seen)) => (
                Cause::RequestsLost,
                format!("The server has nothing to do while the driver waits on the network: {seen}. Its requests went elsewhere or were dropped on the way (a proxy, a closed connection the client did not notice)."),
            ),
            _ => (
                Cause::ServerIdleClientWaiting,
                "The server has nothing to do while the client reports no progress: the client is stuck (a deadlock, a dead worker pool, a lost connection).".into(),
            ),
        }),
        _ => None,
    }
}

/// The cause the driver's stacks give, where nothing else did.
fn driver_cause(stacks: Option<(Verdict, &str)>) -> (Cause, String) {
    match stacks {
        Some((Verdict::WaitingOnServer, seen)) => (
            Cause::DriverWaitingOnServer,
            format!("The driver waits on the network: {seen}. The server does not answer it; --server-metrics-url would show whether it is hung or busy."),
        ),
        Some((Verdict::Busy, seen)) => (
            Cause::DriverBusy,
            format!("The driver runs code but reports no progress: {seen}."),
        ),
        Some((Verdict::Idle, seen)) => (
            Cause::DriverIdle,
            format!("The driver waits with no request outstanding: {seen}."),
        ),
        _ => (
            Cause::Unknown,
            "Configure --process-match and --server-metrics-url to narrow it down.".into(),
        ),
    }
}
