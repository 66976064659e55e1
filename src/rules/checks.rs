//! Each built-in rule as one function, registered in [`super::table::TABLE`] with everything
//! else about it. Every check is pure: the model, the rule's settings and `now` in, the
//! conditions that hold out.

use super::stall::{judge_stall, stall_cause, Stall};
use super::{AlertName, Cause, Condition, History, RuleConfig, Rules, RATE_WINDOW};
use crate::human::human;
use crate::model::stacks::Captures;
use crate::model::{GpuPids, OutputStats, PartitionView, RecentCounts, Run, Seconds};

/// Fewer requests than this in the window is too small a sample to alarm on.
const MIN_SAMPLE: u64 = 50;

/// What every check looks at.
pub struct Judged<'a> {
    pub run: &'a Run,
    /// The last stacks the alert engine took of the run's processes.
    pub stacks: Option<&'a Captures>,
    /// The partitions of this run (another run's leftover files raise nothing: they are shown
    /// apart, not judged).
    pub views: Vec<PartitionView<'a>>,
    pub rules: &'a Rules,
    pub history: &'a History,
    pub now: Seconds,
}

fn condition(
    alert: AlertName,
    partition: Option<&str>,
    summary: String,
    details: String,
) -> Condition {
    Condition {
        alert,
        partition: partition.map(str::to_owned),
        summary,
        details,
        cause: None,
        began_at: None,
        wait_at_most: None,
    }
}

pub(super) fn stalled(j: &Judged<'_>, rule: RuleConfig) -> Vec<Condition> {
    let (run, now, stall_after) = (j.run, j.now, rule.threshold);
    // A run stopped at its budget is done, though its log never finished a partition.
    if run.budget_reached(&j.views) {
        return Vec::new();
    }
    let mut out: Vec<Condition> = j
        .views
        .iter()
        // A partition at its plan or budget is done, whatever its log's last line said.
        .filter(|v| !v.reached_plan())
        .filter_map(|v| match judge_stall(run, v, stall_after, now)? {
            Stall::Stalled { seconds, threshold } => {
                let (cause, why) = stall_cause(run, j.stacks, now - seconds, now);
                Some(condition(
                    AlertName::Stalled,
                    Some(v.name),
                    format!("no progress for {} ({})", human(seconds), cause.label()),
                    format!(
                        "{} has shown no evidence of work (no progress line, no output written{}) for {} (threshold {}). Likely cause: {}. {why}",
                        v.name,
                        if v.log.is_some_and(|p| p.last_progress_at.is_none()) { ", the server not generating" } else { "" },
                        human(seconds),
                        human(threshold),
                        cause.label()
                    ),
                ).began(now - seconds).caused(cause))
            }
            Stall::LogSilent { .. } => None,
        })
        .collect();
    if run.any_active() {
        return out;
    }
    if let Some(seconds) = run
        .run_stall_seconds(&j.views, now)
        .filter(|s| *s > stall_after)
    {
        // The server's evidence names it here too: a tied or configured server that is down,
        // crashed, hung (its health unanswered, or requests held and nothing generated), asleep
        // or busy is what the run waits on, not a driver idle between partitions.
        let (cause, why) = match stall_cause(run, j.stacks, now - seconds, now) {
            found @ (
                Cause::DriverGone
                | Cause::ServerCrashed
                | Cause::ServerDown
                | Cause::ServerAsleep
                | Cause::ServerHung
                | Cause::ServerBusyNothingWritten
                | Cause::DriverDeadlocked
                | Cause::DriverStopped,
                _,
            ) => found,
            _ => (
                Cause::DriverIdleBetweenPartitions,
                "No partition is active and none has started, although work is left (partitions below their plan, or the driver still running).".to_owned(),
            ),
        };
        out.push(condition(
            AlertName::Stalled,
            None,
            format!("no work for {} ({})", human(seconds), cause.label()),
            format!(
                "The run is unfinished but nothing has shown work for {} (threshold {}). Likely cause: {}. {why}",
                human(seconds),
                human(stall_after),
                cause.label()
            ),
        ).began(now - seconds).caused(cause));
    }
    out
}

pub(super) fn log_silent(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    let stall_after = j.rules.get(AlertName::Stalled).threshold;
    j.views
        .iter()
        .filter_map(|v| match judge_stall(j.run, v, stall_after, j.now)? {
            Stall::LogSilent { seconds } => Some(condition(
                AlertName::LogSilent,
                Some(v.name),
                format!("no progress line for {}, outputs still growing", human(seconds)),
                format!(
                    "{} has printed no progress for {} while its output files keep growing: the pipeline works, but its log is stuck or buffered (a redirected stdout without flush?).",
                    v.name,
                    human(seconds)
                ),
            ).began(j.now - seconds)),
            Stall::Stalled { .. } => None,
        })
        .collect()
}

pub(super) fn server_hung(j: &Judged<'_>, rule: RuleConfig) -> Vec<Condition> {
    let (run, threshold) = (j.run, rule.threshold);
    if run.server_starting(j.now) {
        return Vec::new();
    }
    let figures = run.server_figures();
    // A log's last report may be stale (SGLang prints nothing once idle): it is believed
    // while the client waits for results, that is while a partition is active.
    let believed = run
        .server()
        .as_ref()
        .is_some_and(|s| s.running_requests.is_some())
        || run.working();
    run.server_stuck_seconds(j.now)
        .filter(|s| *s > threshold && believed)
        .map(|stuck| {
            condition(
                AlertName::ServerHung,
                None,
                format!(
                    "{:.0} requests running, no tokens generated for {}",
                    figures.running.unwrap_or(0.0),
                    human(stuck)
                ),
                format!(
                    "The inference server holds {:.0} running requests but has generated nothing for {} (threshold {}): it is wedged (a stuck collective, a dead worker). Its health check may still pass.",
                    figures.running.unwrap_or(0.0),
                    human(stuck),
                    human(threshold)
                ),
            )
            .caused(Cause::ServerHung)
        })
        .into_iter()
        .collect()
}

// A finished run's driver that exits, or a server stopped or GPUs idle after it, are the
// run's end, not incidents.

pub(super) fn process_exited(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    let Some(process) = &j.run.process() else {
        return Vec::new();
    };
    if process.up || j.run.finished(&j.views) {
        return Vec::new();
    }
    vec![condition(
        AlertName::ProcessExited,
        None,
        "the pipeline's driver process is not running".into(),
        format!(
            "No process matches the configured driver (it has exited {} time(s) since the sidecar started).",
            process.exits
        ),
    ).caused(Cause::DriverGone)]
}

pub(super) fn server_down(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    let Some(server) = &j.run.server() else {
        return Vec::new();
    };
    let dead = j.run.engine_dead();
    if (server.up != Some(false) && dead.is_none())
        || j.run.finished(&j.views)
        || j.run.server_starting(j.now)
    {
        return Vec::new();
    }
    let probe = server
        .error
        .clone()
        .unwrap_or_else(|| "The health check failed.".into());
    let said = j
        .run
        .server_log()
        .last_words()
        .map(|w| format!(" Its log said last: {w}"))
        .unwrap_or_default();
    let (cause, summary, description) = match (j.run.server_log().crashed(), dead) {
        (_, Some(dead)) => (
            Cause::ServerCrashed,
            "the inference server's engine crashed behind its live API".into(),
            format!("The server's front end still runs, but {dead}: nothing it accepts is served, and its gauges are frozen where they were (not exported).{said} {probe}"),
        ),
        (_, None) if server.hung => (
            Cause::ServerHung,
            "the inference server's HTTP process is hung".into(),
            format!("{probe}. Its process lives (the kernel accepts connections for a stopped or wedged process), so the requests it holds wait."),
        ),
        (Some(fatal), None) => (
            Cause::ServerCrashed,
            format!(
                "the inference server crashed ({})",
                fatal.event.replace('_', " ")
            ),
            format!("Its log ends in: {}. {probe}", fatal.text),
        ),
        (None, None) => (
            Cause::ServerDown,
            "the inference server's health check fails".into(),
            probe,
        ),
    };
    vec![condition(AlertName::ServerDown, None, summary, description).caused(cause)]
}

pub(super) fn gpu_hung(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    let Some(since) = j.run.gpu_hung_since() else {
        return Vec::new();
    };
    let last = j
        .run
        .gpu()
        .reading()
        .as_ref()
        .map_or("no reading yet".to_owned(), |g| {
            format!("the last reading is {} old", human(j.now - g.at))
        });
    vec![condition(
        AlertName::GpuHung,
        None,
        format!("an NVML call has not returned for {}", human(j.now - since)),
        format!("The GPU sampler is past its deadline ({last}): NVML is wedged, as it is when a GPU falls off the bus or the driver hangs. GPU figures are not exported until it answers; check dmesg for XID errors and nvidia-smi."),
    )]
}

pub(super) fn gpu_lost(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    let Some(gpus) = &j.run.gpu().reading() else {
        return Vec::new();
    };
    let lost: Vec<_> = gpus.devices.iter().filter(|g| g.lost).collect();
    if lost.is_empty() {
        return Vec::new();
    }
    let each: Vec<String> = lost
        .iter()
        .map(|g| {
            let xid = j
                .run
                .gpu()
                .last_xid()
                .get(&g.uuid)
                .map_or("no XID seen".to_owned(), |x| format!("last XID {x}"));
            let procs = if gpus.pids == GpuPids::NotRead {
                "its processes are not read (gpu_processes is off)".to_owned()
            } else if g.processes.is_empty() {
                "no processes recorded".to_owned()
            } else {
                let list: Vec<String> = g
                    .processes
                    .iter()
                    .map(|p| match p.name.as_str() {
                        "" => format!("pid {}", p.pid),
                        name => format!("pid {} {name}", p.pid),
                    })
                    .collect();
                format!("processes on it: {}", list.join(", "))
            };
            format!(
                "GPU {} ({}, PCI {}): {xid}; {procs}.",
                g.index, g.uuid, g.pci_bus_id
            )
        })
        .collect();
    let indexes: Vec<String> = lost.iter().map(|g| g.index.to_string()).collect();
    vec![condition(
        AlertName::GpuLost,
        None,
        format!("GPU {} lost", indexes.join(", ")),
        format!(
            "NVML says the GPU is lost (fallen off the bus) or every query of it fails. {} A lost GPU needs a reset or a reboot; the work on it is gone.",
            each.join(" ")
        ),
    )]
}

pub(super) fn gpus_idle(j: &Judged<'_>, rule: RuleConfig) -> Vec<Condition> {
    let (Some(gpus), threshold) = (&j.run.gpu().reading(), rule.threshold) else {
        return Vec::new();
    };
    // An engine put to sleep has let go of its GPUs on purpose.
    if j.run.budget_reached(&j.views) || j.run.server_asleep() {
        return Vec::new();
    }
    // A lost GPU's figures are its last ones, and a stale reading's are old: neither says
    // the GPUs are idle now.
    let readable: Vec<_> = gpus.devices.iter().filter(|g| !g.failing).collect();
    let idle = j.run.gpu_hung_since().is_none()
        && !readable.is_empty()
        && readable
            .iter()
            .all(|g| g.utilization.is_some_and(|u| u < threshold));
    if !(j.run.working() && idle) {
        return Vec::new();
    }
    vec![condition(
        AlertName::GpusIdle,
        None,
        format!(
            "all {} GPUs under {:.0}% while a partition is active",
            gpus.devices.len(),
            threshold * 100.0
        ),
        "Every GPU is idle although the log says a partition is being processed.".into(),
    )]
}

pub(super) fn gpu_missing(j: &Judged<'_>, rule: RuleConfig) -> Vec<Condition> {
    let Some(gpus) = &j.run.gpu().reading() else {
        return Vec::new();
    };
    let expected = match rule.threshold as usize {
        0 => j.history.max_gpus,
        configured => configured,
    };
    if gpus.devices.len() >= expected {
        return Vec::new();
    }
    vec![condition(
        AlertName::GpuMissing,
        None,
        format!("{} of {expected} GPUs visible", gpus.devices.len()),
        "NVML lists fewer GPUs than expected: one may have fallen off the bus (check dmesg for XID 79).".into(),
    )]
}

pub(super) fn error_rate_high(j: &Judged<'_>, rule: RuleConfig) -> Vec<Condition> {
    let threshold = rule.threshold;
    j.views
        .iter()
        .filter_map(|v| {
            let (rate, n) = error_rate(v).filter(|(rate, _)| *rate > threshold)?;
            Some(condition(
                AlertName::ErrorRateHigh,
                Some(v.name),
                format!("{:.1}% of the last {n} requests failed", rate * 100.0),
                format!("The error rate is over {:.1}%.", threshold * 100.0),
            ))
        })
        .collect()
}

pub(super) fn empty_responses(j: &Judged<'_>, rule: RuleConfig) -> Vec<Condition> {
    let threshold = rule.threshold;
    j.views
        .iter()
        .filter_map(|v| {
            let recent = v.outputs.as_ref()?.recent.counts();
            let (n, empty) = (recent.records, recent.empty);
            let rate = empty as f64 / n.max(1) as f64;
            (n >= MIN_SAMPLE && rate > threshold).then(|| {
                condition(
                    AlertName::EmptyResponses,
                    Some(v.name),
                    format!("{empty} of the last {n} records have an empty response"),
                    format!("Over {:.1}% of recent records are empty: a capture bug or a server returning nothing.", threshold * 100.0),
                )
            })
        })
        .collect()
}

/// The recent records of a partition that carry a flag, over the rule's threshold.
fn recent_share(
    v: &PartitionView<'_>,
    threshold: f64,
    flagged: fn(&RecentCounts) -> u64,
) -> Option<(u64, u64)> {
    let recent = v.outputs.as_ref()?.recent.counts();
    let (n, flagged) = (recent.records, flagged(&recent));
    (n >= MIN_SAMPLE && flagged as f64 / n as f64 > threshold).then_some((flagged, n))
}

/// "p50 310, p90 2.1k, p99 10240 tokens (1040 records)": how long the answers are.
pub fn token_distribution(o: &OutputStats) -> String {
    let h = &o.token_histogram;
    let q = |q: f64| h.quantile(q).map_or("?".to_owned(), |t| format!("{t:.0}"));
    format!(
        "p50 {}, p90 {}, p99 {} tokens ({} records with a count)",
        q(0.5),
        q(0.9),
        q(0.99),
        h.count()
    )
}

pub(super) fn truncation_high(j: &Judged<'_>, rule: RuleConfig) -> Vec<Condition> {
    j.views
        .iter()
        .filter_map(|v| {
            let (cut, n) = recent_share(v, rule.threshold, |r| r.truncated)?;
            let limit = v
                .log
                .and_then(|p| p.max_tokens)
                .map_or(String::new(), |m| format!(" (max_tokens {m})"));
            Some(condition(
                AlertName::TruncationHigh,
                Some(v.name),
                format!("{cut} of the last {n} responses stopped at the token limit{limit}"),
                format!(
                    "Over {:.0}% of recent records finished with `length` (or `max_tokens`){limit}: answers cut off are rarely usable for training. A budget too small for the model, or a prompt template that makes it ramble. Completion tokens per record: {}.",
                    rule.threshold * 100.0,
                    token_distribution(v.outputs.as_ref()?)
                ),
            ))
        })
        .collect()
}

pub(super) fn missing_fields(j: &Judged<'_>, rule: RuleConfig) -> Vec<Condition> {
    j.views
        .iter()
        .filter_map(|v| {
            let (lacking, n) = recent_share(v, rule.threshold, |r| r.missing)?;
            let o = v.outputs.as_ref()?;
            let fields: Vec<String> = o
                .missing
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(f, n)| format!("{f} ({n})"))
                .collect();
            let examples: Vec<String> = o.missing_examples.iter().map(u64::to_string).collect();
            Some(condition(
                AlertName::MissingFields,
                Some(v.name),
                format!("{lacking} of the last {n} records lack a required field"),
                format!(
                    "Over {:.0}% of recent records lack a required field or hold it empty: {}. The first such records are lines {} of their files. A capture that saves half of each answer.",
                    rule.threshold * 100.0,
                    fields.join(", "),
                    examples.join(", ")
                ),
            ))
        })
        .collect()
}

pub(super) fn duplicate_records(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    j.views
        .iter()
        .filter_map(|v| {
            let repeated = v.pass_duplicates();
            let o = v.outputs.as_ref()?;
            (repeated > 0).then(|| {
                condition(
                    AlertName::DuplicateRecords,
                    Some(v.name),
                    format!(
                        "{repeated} records repeat an earlier id: {} distinct of {} records",
                        o.distinct(),
                        o.records
                    ),
                    format!(
                        "The driver wrote prompts again that the partition's files already hold (a restart that re-does its work). They count once in the progress; the files hold {} duplicates in all. First repeated ids: {}.",
                        o.duplicates,
                        o.duplicate_examples.join(", ")
                    ),
                )
            })
        })
        .collect()
}

/// The share of the time left to the deadline that RunLate's `for` may wait at most: a job
/// with minutes left is paged while there are minutes to act, not after its end
/// (docs/alerts.md, RunLate).
const RUN_LATE_WAIT: f64 = 0.25;

pub(super) fn run_late(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    let p = j.run.projection(j.now);
    let (Some(deadline), Some(eta)) = (p.deadline, p.eta_seconds) else {
        return Vec::new();
    };
    let slow_end = p.eta_band.map_or(eta, |b| b.1);
    let late = j.now + slow_end - deadline;
    if late <= 0.0 || run_finished(j.run, &j.views) {
        return Vec::new();
    }
    // Without a deadline of its own, the run's SLURM job's end is its deadline.
    let job = j
        .run
        .deadline_or_job_end()
        .filter(|(_, of_job)| *of_job)
        .and(j.run.slurm().as_ref());
    let (what, act) = match job {
        Some(job) => (
            format!("its SLURM job {}'s time limit", job.env.job_id),
            format!(" To finish: extend the job (`scontrol update JobId={} TimeLimit=…`; above the partition's MaxTime only an operator can) or let it end and resubmit or requeue it (`--open-mode=append` and the sidecar's state directory carry the count on).", job.env.job_id),
        ),
        None => ("the deadline".to_owned(), String::new()),
    };
    let left = (deadline - j.now).max(1.0);
    let remaining = p.target.saturating_sub(p.completed) as f64;
    let rate = p.rate.unwrap_or(0.0);
    // Tokens per record so far, to say the rate needed in the server's own unit.
    let tokens: u64 = j
        .views
        .iter()
        .filter_map(|v| v.outputs.as_ref().map(|o| o.tokens))
        .sum();
    let per_record = (p.completed > 0 && tokens > 0).then(|| tokens as f64 / p.completed as f64);
    let needed_tps = per_record.map_or(String::new(), |t| {
        format!(" ({:.0} tok/s)", remaining / left * t)
    });
    vec![condition(
        AlertName::RunLate,
        None,
        format!(
            "ends about {} at the current rate, {} past {what} {}",
            crate::human::utc_minute(j.now + eta),
            human(late),
            crate::human::utc_minute(deadline)
        ),
        format!(
            "At the slowest of the last hour's rates the run ends {} ({} late); at the current {rate:.2} req/s, {}. {remaining:.0} requests are left and {} until {what}: it needs {:.2} req/s{needed_tps}.{act}",
            crate::human::utc_minute(j.now + slow_end),
            human(late),
            crate::human::utc_minute(j.now + eta),
            human(left),
            remaining / left
        ),
    )
    .waiting_at_most((deadline - j.now).max(0.0) * RUN_LATE_WAIT)]
}

pub(super) fn log_output_mismatch(j: &Judged<'_>, rule: RuleConfig) -> Vec<Condition> {
    let ratio = rule.threshold;
    j.views
        .iter()
        .filter(|v| v.log_output_mismatch_over(crate::model::MISMATCH_MIN_GAP, ratio))
        .map(|v| {
            let records = v.outputs.as_ref().map_or(0, |o| o.records);
            let distinct = v.distinct().unwrap_or(0);
            let distinct = if distinct == records {
                String::new()
            } else {
                format!(" ({distinct} distinct)")
            };
            condition(
                AlertName::LogOutputMismatch,
                Some(v.name),
                format!(
                    "the log says {} completed, the files hold {records}{distinct}",
                    v.completed().unwrap_or(0)
                ),
                format!(
                    "The gap ({}) is over max(50, {:.0}% of planned).",
                    v.log_output_gap().unwrap_or(0),
                    ratio * 100.0
                ),
            )
        })
        .collect()
}

pub(super) fn partition_finished(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    j.views
        .iter()
        .filter(|v| v.reached_plan())
        .map(|v| {
            condition(
                AlertName::PartitionFinished,
                Some(v.name),
                // The count that reached the plan: the log's may not have caught up with the
                // files (its last frame not read yet), and a notice must not say less.
                format!("{} requests done", v.done().unwrap_or(0)),
                partition_summary(v),
            )
        })
        .collect()
}

pub(super) fn throughput_drop(j: &Judged<'_>, rule: RuleConfig) -> Vec<Condition> {
    let fraction = rule.threshold;
    let Some((recent, median)) =
        j.history
            .throughput(j.now, rule.window_seconds, rule.history_seconds)
    else {
        return Vec::new();
    };
    if !(median > 0.0 && recent < fraction * median) {
        return Vec::new();
    }
    vec![condition(
        AlertName::ThroughputDrop,
        None,
        format!(
            "{recent:.0} tok/s over {}, under {:.0}% of the run's median {median:.0} tok/s",
            human(rule.window_seconds),
            fraction * 100.0
        ),
        "Throughput has collapsed: check the server's queue and the GPUs.".into(),
    )]
}

pub(super) fn run_finished_notice(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    if !run_finished(j.run, &j.views) {
        return Vec::new();
    }
    let details: Vec<String> = j.views.iter().map(partition_summary).collect();
    let summary = if Run::complete(&j.views) || j.run.complete_said() {
        format!("all {} partitions done", j.views.len())
    } else {
        // No plan to measure against: what the library said and did is the evidence.
        format!(
            "the driver ended after its library said its work was done ({} partitions)",
            j.views.len()
        )
    };
    vec![condition(
        AlertName::RunFinished,
        None,
        summary,
        format!(
            "{}\nWall time {}; GPU time {:.1} GPU-hours.",
            details.join("\n"),
            human(run_wall_time(j.run).unwrap_or(0.0)),
            j.run.gpu_seconds() / 3600.0
        ),
    )]
}

/// A new run in the log's place, once its id is read (the notice says it).
pub(super) fn run_started(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    let (Some(started), Some((id, read_for))) = (&j.run.run_started(), &j.run.run_id()) else {
        return Vec::new();
    };
    if *read_for != j.run.runs_started() {
        return Vec::new();
    }
    let before = started
        .previous_id
        .as_ref()
        .map_or(String::new(), |p| format!(", after run {p}"));
    vec![condition(
        AlertName::RunStarted,
        None,
        format!("a new run began: run id {id}{before}"),
        format!(
            "{} was rewritten or replaced, and now begins with {:?}: a run other than the one it held. Its progress, partitions and end are counted afresh; the earlier run's output files stay as an earlier run's.",
            started.log, started.first_line
        ),
    )]
}

/// (error rate, requests) over the recent window: the log's counts, else the records.
fn error_rate(v: &PartitionView<'_>) -> Option<(f64, u64)> {
    if let Some(rate) = v.log.and_then(|p| p.recent_error_rate(RATE_WINDOW)) {
        let window = v.log.map_or(0, |p| p.completed.min(RATE_WINDOW));
        return (window >= MIN_SAMPLE).then_some((rate, window));
    }
    let recent = v.outputs.as_ref()?.recent.counts();
    let (n, errors) = (recent.records, recent.errors);
    (n >= MIN_SAMPLE).then(|| (errors as f64 / n as f64, n))
}

/// Finished with nothing left being processed, or stopped at its budget (its driver's cap
/// leaves the last partition short of its plan, so the log never says it is done).
pub(super) fn run_finished(run: &Run, views: &[PartitionView<'_>]) -> bool {
    run.budget_reached(views) || Run::complete(views) || (run.finished(views) && !run.any_active())
}

fn run_wall_time(run: &Run) -> Option<f64> {
    let start = run
        .partitions()
        .values()
        .filter_map(|p| p.started_at)
        .reduce(f64::min)?;
    let end = run
        .partitions()
        .values()
        .filter_map(|p| p.last_progress_at)
        .reduce(f64::max)?;
    Some((end - start).max(0.0))
}

fn partition_summary(v: &PartitionView<'_>) -> String {
    let mut s = format!(
        "{}: {}/{} requests",
        v.name,
        v.completed().unwrap_or(0),
        v.planned().map_or("?".into(), |p| p.to_string())
    );
    if let Some(errors) = v.log.and_then(|p| p.errors) {
        s += &format!(", {errors} errors");
    }
    if let Some(o) = &v.outputs {
        s += &format!(
            ", {} records ({} distinct, {} duplicates), {} error records, {} empty, {} truncated, {} completion tokens",
            o.records,
            o.distinct(),
            o.duplicates,
            o.errors,
            o.empty,
            o.truncated(),
            o.tokens
        );
        if o.token_histogram.count() > 0 {
            s += &format!("; {}", token_distribution(o));
        }
    }
    s
}

/// SLURM ended (or is ending) the run's job before the run finished: told as that, with what is
/// left and what to do, never as a crash (docs/slurm.md).
pub(super) fn slurm_job_ended(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    use crate::model::slurm::Ended;
    let (Some(job), Some(ended)) = (&j.run.slurm(), j.run.job_ended()) else {
        return Vec::new();
    };
    if run_finished(j.run, &j.views) {
        return Vec::new();
    }
    let p = j.run.projection(j.now);
    let state = job.controller.as_ref().map_or_else(
        || "nothing yet".to_owned(),
        |c| match &c.reason {
            Some(reason) => format!("{} (reason {reason})", c.state),
            None => c.state.clone(),
        },
    );
    let id = &job.env.job_id;
    let act = match ended {
        Ended::TimeLimit => format!("Resubmit or requeue it (`scontrol requeue {id}`) to finish what is left, with more time (`--time`)."),
        Ended::Cancelled => "Someone cancelled it (`scancel`): resubmit it to finish what is left.".to_owned(),
        Ended::Requeued => "SLURM runs it again when it can, and the run resumes (`SlurmJobResumed`): nothing to do but watch that it starts.".to_owned(),
        Ended::Preempted => "A job of higher priority took its resources: by the partition's PreemptMode it is requeued or ended; resubmit it if it is not listed again.".to_owned(),
        Ended::NodeFailed => "Its node failed: SLURM requeues it where that is allowed; otherwise resubmit it.".to_owned(),
    };
    vec![condition(
        AlertName::SlurmJobEnded,
        None,
        format!("SLURM job {id} {}", ended.says()),
        format!(
            "The controller says {state}. The run has {} of {} done, {} left. {act}",
            p.completed,
            p.target,
            p.target.saturating_sub(p.completed)
        ),
    )]
}

/// SLURM's warning before the job's end reached the sidecar: the last moment to extend it.
pub(super) fn slurm_job_ending(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    let Some(job) = &j.run.slurm() else {
        return Vec::new();
    };
    if job.warned_at.is_none() || job.ended().is_some() || run_finished(j.run, &j.views) {
        return Vec::new();
    }
    let p = j.run.projection(j.now);
    let id = &job.env.job_id;
    let when = job.end_time().map_or_else(
        || "within minutes".to_owned(),
        |end| format!("at {}", crate::human::utc_minute(end)),
    );
    vec![condition(
        AlertName::SlurmJobEnding,
        None,
        format!("SLURM job {id} ends {when}: its warning signal came"),
        format!(
            "The run has {} of {} done, {} left. Extend the job now if it may (`scontrol update JobId={id} TimeLimit=…`), else it ends at its limit and needs resubmitting or requeueing; the sidecar saves its state when SIGTERM comes.",
            p.completed,
            p.target,
            p.target.saturating_sub(p.completed)
        ),
    )]
}

/// The run's job runs again after a requeue: the same run, carried on.
pub(super) fn slurm_job_resumed(j: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    let Some(job) = &j.run.slurm() else {
        return Vec::new();
    };
    let restarts = job.restarts();
    let running = job.controller.as_ref().is_none_or(|c| c.state == "RUNNING");
    if restarts == 0 || !running || job.ended().is_some() {
        return Vec::new();
    }
    let p = j.run.projection(j.now);
    vec![condition(
        AlertName::SlurmJobResumed,
        None,
        format!(
            "SLURM job {} resumed after {restarts} requeue(s)",
            job.env.job_id
        ),
        format!(
            "The same run goes on from {} of {} done.",
            p.completed, p.target
        ),
    )]
}
