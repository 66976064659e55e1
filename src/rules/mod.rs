//! The built-in rules: a model snapshot and `now` in, the conditions that hold out. Pure.

mod alert_name;

use crate::human::human;
use crate::model::{PartitionView, Run, Seconds};
pub use alert_name::{AlertName, Condition};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Requests (or records) the error and empty-response rates look back over.
pub const RATE_WINDOW: u64 = 200;
/// Fewer requests than this in the window is too small a sample to alarm on.
const MIN_SAMPLE: u64 = 50;
/// The recent throughput is averaged over this long.
const THROUGHPUT_RECENT: f64 = 15.0 * 60.0;
/// ThroughputDrop needs this much history before it judges.
const THROUGHPUT_MIN_HISTORY: f64 = 30.0 * 60.0;
/// A stall is also judged against the pipeline's own rhythm: this many median gaps.
const STALL_GAPS: f64 = 5.0;

/// One rule's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuleConfig {
    pub enabled: bool,
    /// Stalled: seconds; GpusIdle, ErrorRateHigh, EmptyResponses, LogOutputMismatch: a ratio;
    /// ThroughputDrop: a fraction of the median; GpuMissing: the GPUs expected (0: the most
    /// seen). Unused by the others.
    pub threshold: f64,
    /// How long the condition must hold before it fires.
    pub for_seconds: f64,
}

/// Every rule's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules(pub BTreeMap<AlertName, RuleConfig>);

impl Default for Rules {
    fn default() -> Rules {
        let rule = |threshold: f64, for_seconds: f64| RuleConfig {
            enabled: true,
            threshold,
            for_seconds,
        };
        Rules(BTreeMap::from([
            (AlertName::Stalled, rule(600.0, 0.0)),
            // Judged against the Stalled threshold: the same silence, with the outputs moving.
            (AlertName::LogSilent, rule(0.0, 0.0)),
            (AlertName::ServerHung, rule(300.0, 0.0)),
            (AlertName::ProcessExited, rule(0.0, 60.0)),
            (AlertName::ServerDown, rule(0.0, 120.0)),
            (AlertName::GpusIdle, rule(0.05, 600.0)),
            (AlertName::GpuMissing, rule(0.0, 60.0)),
            (AlertName::GpuLost, rule(0.0, 0.0)),
            (AlertName::GpuHung, rule(0.0, 0.0)),
            (AlertName::ErrorRateHigh, rule(0.05, 60.0)),
            (AlertName::EmptyResponses, rule(0.02, 60.0)),
            (AlertName::ThroughputDrop, rule(0.5, 0.0)),
            (AlertName::LogOutputMismatch, rule(0.02, 600.0)),
            (AlertName::PartitionFinished, rule(0.0, 0.0)),
            (AlertName::RunFinished, rule(0.0, 300.0)),
        ]))
    }
}

impl Rules {
    pub fn get(&self, alert: AlertName) -> RuleConfig {
        self.0.get(&alert).copied().unwrap_or(RuleConfig {
            enabled: false,
            threshold: 0.0,
            for_seconds: 0.0,
        })
    }
}

/// What the rules remember between evaluations: throughput over the run, the most GPUs seen,
/// GPU time spent. Kept with the alert state, so it survives restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// (time, run tok/s), one sample a minute at most.
    throughput: VecDeque<(Seconds, f64)>,
    pub max_gpus: usize,
    pub gpu_seconds: f64,
    last_at: Option<Seconds>,
}

/// A week of one-minute samples.
const THROUGHPUT_SAMPLES: usize = 7 * 24 * 60;

impl History {
    pub fn record(&mut self, run: &Run, now: Seconds) {
        let dt = self.last_at.map_or(0.0, |l| (now - l).clamp(0.0, 300.0));
        self.last_at = Some(now);
        let working = run.any_active();
        if let Some(gpus) = &run.gpus {
            self.max_gpus = self.max_gpus.max(gpus.devices.len());
            if working {
                self.gpu_seconds += gpus.devices.len() as f64 * dt;
            }
        }
        if !working {
            return;
        }
        let tps: f64 = run
            .current_views()
            .iter()
            .filter_map(|v| v.completion_tokens_per_second(now))
            .sum();
        if self.throughput.back().is_none_or(|(t, _)| now - t >= 60.0) {
            if self.throughput.len() == THROUGHPUT_SAMPLES {
                self.throughput.pop_front();
            }
            self.throughput.push_back((now, tps));
        }
    }

    /// (mean over the last 15 minutes, median over the run), once there is enough history.
    fn throughput(&self, now: Seconds) -> Option<(f64, f64)> {
        let first = self.throughput.front()?.0;
        if now - first < THROUGHPUT_MIN_HISTORY {
            return None;
        }
        let recent: Vec<f64> = self
            .throughput
            .iter()
            .filter(|(t, _)| now - t <= THROUGHPUT_RECENT)
            .map(|(_, v)| *v)
            .collect();
        if recent.is_empty() {
            return None;
        }
        let mut all: Vec<f64> = self.throughput.iter().map(|(_, v)| *v).collect();
        all.sort_by(f64::total_cmp);
        Some((
            recent.iter().sum::<f64>() / recent.len() as f64,
            all[all.len() / 2],
        ))
    }
}

/// Every condition that holds now.
pub fn evaluate(run: &Run, rules: &Rules, history: &History, now: Seconds) -> Vec<Condition> {
    // Another run's leftover files raise nothing: they are shown apart, not judged.
    let views = run.current_views();
    let mut out = Vec::new();
    let on = |a: AlertName| rules.get(a).enabled;
    let mut push = |alert: AlertName, partition: Option<&str>, summary: String, details: String| {
        out.push(Condition {
            alert,
            partition: partition.map(str::to_owned),
            summary,
            details,
        })
    };

    let stall_after = rules.get(AlertName::Stalled).threshold;
    for v in &views {
        match judge_stall(run, v, stall_after, now) {
            Some(Stall::Stalled { seconds, threshold }) if on(AlertName::Stalled) => {
                let (cause, why) = stall_cause(run, now);
                push(
                    AlertName::Stalled,
                    Some(v.name),
                    format!("no progress for {} ({cause})", human(seconds)),
                    format!(
                        "{} has shown no evidence of work (no progress line, no output written{}) for {} (threshold {}). Likely cause: {cause}. {why}",
                        v.name,
                        if v.log.is_some_and(|p| p.last_progress_at.is_none()) { ", the server not generating" } else { "" },
                        human(seconds),
                        human(threshold)
                    ),
                );
            }
            Some(Stall::LogSilent { seconds }) if on(AlertName::LogSilent) => push(
                AlertName::LogSilent,
                Some(v.name),
                format!("no progress line for {}, outputs still growing", human(seconds)),
                format!(
                    "{} has printed no progress for {} while its output files keep growing: the pipeline works, but its log is stuck or buffered (a redirected stdout without flush?).",
                    v.name,
                    human(seconds)
                ),
            ),
            _ => {}
        }
    }
    if on(AlertName::Stalled) && !run.any_active() {
        if let Some(seconds) = run
            .run_stall_seconds(&views, now)
            .filter(|s| *s > stall_after)
        {
            let (cause, why) = match stall_cause(run, now) {
                ("process gone", why) => ("driver gone", why),
                ("server down", why) => ("server down", why),
                _ => (
                    "driver idle between partitions",
                    "No partition is active and none has started, although work is left (partitions below their plan, or the driver still running).".to_owned(),
                ),
            };
            push(
                AlertName::Stalled,
                None,
                format!("no work for {} ({cause})", human(seconds)),
                format!(
                    "The run is unfinished but nothing has shown work for {} (threshold {}). Likely cause: {cause}. {why}",
                    human(seconds),
                    human(stall_after)
                ),
            );
        }
    }
    if on(AlertName::ServerHung) {
        let threshold = rules.get(AlertName::ServerHung).threshold;
        let figures = run.server_figures();
        // A log's last report may be stale (SGLang prints nothing once idle): it is believed
        // while the client waits for results, that is while a partition is active.
        let believed = run
            .server
            .as_ref()
            .is_some_and(|s| s.running_requests.is_some())
            || run.any_active();
        if let Some(stuck) = run
            .server_stuck_seconds(now)
            .filter(|s| *s > threshold && believed)
        {
            push(
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
            );
        }
    }
    // A finished run's driver that exits, or a server stopped or GPUs idle after it, are the
    // run's end, not incidents.
    let finished = run.finished(&views);
    if let (true, Some(process)) = (on(AlertName::ProcessExited), &run.process) {
        if !process.up && !finished {
            push(
                AlertName::ProcessExited,
                None,
                "the pipeline's driver process is not running".into(),
                format!(
                    "No process matches the configured driver (it has exited {} time(s) since the sidecar started).",
                    process.exits
                ),
            );
        }
    }
    if let (true, Some(server)) = (on(AlertName::ServerDown), &run.server) {
        if server.up == Some(false) && !finished {
            let probe = server
                .error
                .clone()
                .unwrap_or_else(|| "The health check failed.".into());
            let (summary, description) = match run.server_log.crashed() {
                Some(fatal) => (
                    format!(
                        "the inference server crashed ({})",
                        fatal.event.replace('_', " ")
                    ),
                    format!("Its log ends in: {}. {probe}", fatal.text),
                ),
                None => ("the inference server's health check fails".into(), probe),
            };
            push(AlertName::ServerDown, None, summary, description);
        }
    }
    if let (Some(since), true) = (run.gpu_hung_since, on(AlertName::GpuHung)) {
        let last = run.gpus.as_ref().map_or("no reading yet".to_owned(), |g| {
            format!("the last reading is {} old", human(now - g.at))
        });
        push(
            AlertName::GpuHung,
            None,
            format!("an NVML call has not returned for {}", human(now - since)),
            format!("The GPU sampler is past its deadline ({last}): NVML is wedged, as it is when a GPU falls off the bus or the driver hangs. GPU figures are not exported until it answers; check dmesg for XID errors and nvidia-smi."),
        );
    }
    if let Some(gpus) = &run.gpus {
        let lost: Vec<_> = gpus.devices.iter().filter(|g| g.lost).collect();
        if on(AlertName::GpuLost) && !lost.is_empty() {
            let each: Vec<String> = lost
                .iter()
                .map(|g| {
                    let xid = run
                        .last_xid
                        .get(&g.uuid)
                        .map_or("no XID seen".to_owned(), |x| format!("last XID {x}"));
                    let procs = if g.processes.is_empty() {
                        "no processes recorded".to_owned()
                    } else {
                        let list: Vec<String> = g
                            .processes
                            .iter()
                            .map(|p| format!("pid {} {}", p.pid, p.name))
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
            push(
                AlertName::GpuLost,
                None,
                format!("GPU {} lost", indexes.join(", ")),
                format!(
                    "NVML says the GPU is lost (fallen off the bus) or every query of it fails. {} A lost GPU needs a reset or a reboot; the work on it is gone.",
                    each.join(" ")
                ),
            );
        }
        let active = run.any_active();
        let threshold = rules.get(AlertName::GpusIdle).threshold;
        // A lost GPU's figures are its last ones, and a stale reading's are old: neither says
        // the GPUs are idle now.
        let readable: Vec<_> = gpus.devices.iter().filter(|g| !g.failing).collect();
        let idle = run.gpu_hung_since.is_none()
            && !readable.is_empty()
            && readable
                .iter()
                .all(|g| g.utilization.is_some_and(|u| u < threshold));
        if on(AlertName::GpusIdle) && active && idle {
            push(
                AlertName::GpusIdle,
                None,
                format!(
                    "all {} GPUs under {:.0}% while a partition is active",
                    gpus.devices.len(),
                    threshold * 100.0
                ),
                "Every GPU is idle although the log says a partition is being processed.".into(),
            );
        }
        let configured = rules.get(AlertName::GpuMissing).threshold as usize;
        let expected = if configured > 0 {
            configured
        } else {
            history.max_gpus
        };
        if on(AlertName::GpuMissing) && gpus.devices.len() < expected {
            push(
                AlertName::GpuMissing,
                None,
                format!("{} of {expected} GPUs visible", gpus.devices.len()),
                "NVML lists fewer GPUs than expected: one may have fallen off the bus (check dmesg for XID 79).".into(),
            );
        }
    }
    for v in &views {
        if on(AlertName::ErrorRateHigh) {
            let threshold = rules.get(AlertName::ErrorRateHigh).threshold;
            if let Some((rate, n)) = error_rate(v).filter(|(rate, _)| *rate > threshold) {
                push(
                    AlertName::ErrorRateHigh,
                    Some(v.name),
                    format!("{:.1}% of the last {n} requests failed", rate * 100.0),
                    format!("The error rate is over {:.1}%.", threshold * 100.0),
                );
            }
        }
        if on(AlertName::EmptyResponses) {
            let threshold = rules.get(AlertName::EmptyResponses).threshold;
            if let Some(o) = &v.outputs {
                let (n, _, empty) = o.recent.counts();
                let rate = empty as f64 / n.max(1) as f64;
                if n >= MIN_SAMPLE && rate > threshold {
                    push(
                        AlertName::EmptyResponses,
                        Some(v.name),
                        format!("{empty} of the last {n} records have an empty response"),
                        format!("Over {:.1}% of recent records are empty: a capture bug or a server returning nothing.", threshold * 100.0),
                    );
                }
            }
        }
        if on(AlertName::LogOutputMismatch) {
            let ratio = rules.get(AlertName::LogOutputMismatch).threshold;
            if v.log_output_mismatch_over(crate::model::MISMATCH_MIN_GAP, ratio) {
                let records = v.outputs.as_ref().map_or(0, |o| o.records);
                push(
                    AlertName::LogOutputMismatch,
                    Some(v.name),
                    format!(
                        "the log says {} completed, the files hold {records}",
                        v.completed().unwrap_or(0)
                    ),
                    format!(
                        "The gap ({}) is over max(50, {:.0}% of planned).",
                        v.log_output_gap().unwrap_or(0),
                        ratio * 100.0
                    ),
                );
            }
        }
        if on(AlertName::PartitionFinished) && v.reached_plan() {
            push(
                AlertName::PartitionFinished,
                Some(v.name),
                format!("{} requests done", v.completed().unwrap_or(0)),
                partition_summary(v),
            );
        }
    }
    if on(AlertName::ThroughputDrop) {
        let fraction = rules.get(AlertName::ThroughputDrop).threshold;
        if let Some((recent, median)) = history.throughput(now) {
            if median > 0.0 && recent < fraction * median {
                push(
                    AlertName::ThroughputDrop,
                    None,
                    format!("{recent:.0} tok/s over 15m, under {:.0}% of the run's median {median:.0} tok/s", fraction * 100.0),
                    "Throughput has collapsed: check the server's queue and the GPUs.".into(),
                );
            }
        }
    }
    if on(AlertName::RunFinished) && run_finished(run, &views) {
        let details: Vec<String> = views.iter().map(partition_summary).collect();
        push(
            AlertName::RunFinished,
            None,
            format!("all {} partitions done", views.len()),
            format!(
                "{}\nWall time {}; GPU time {:.1} GPU-hours.",
                details.join("\n"),
                human(run_wall_time(run).unwrap_or(0.0)),
                history.gpu_seconds / 3600.0
            ),
        );
    }
    out
}

/// What the evidence says of an active partition.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stall {
    /// No evidence of work for longer than the threshold.
    Stalled { seconds: f64, threshold: f64 },
    /// The log is silent that long, but the output files keep growing.
    LogSilent { seconds: f64 },
}

/// Judges an active partition's evidence against max(`stall_after`, 5× its median gap
/// between progress reports). Before its first report, log silence is expected for as long as
/// the first report may take, so it is not `LogSilent` then.
fn judge_stall(run: &Run, v: &PartitionView<'_>, stall_after: f64, now: Seconds) -> Option<Stall> {
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

/// The likely cause of a stall, from what the probes and the server's log say.
fn stall_cause(run: &Run, now: Seconds) -> (&'static str, String) {
    if let Some((path, since)) = run.hung(now).into_iter().next() {
        return (
            "file system hung",
            format!(
                "The file system under {path} does not answer: a read of it has not returned for {} (a hung NFS, Lustre or FUSE mount). The other files are still read.",
                human(now - since)
            ),
        );
    }
    if run.process.as_ref().is_some_and(|p| !p.up) {
        return ("process gone", "The driver process is not running.".into());
    }
    if let Some(fatal) = run.server_log.crashed() {
        return (
            "server crashed",
            format!(
                "The inference server's log ends in a {}: {} (see its last lines below).",
                fatal.event.replace('_', " "),
                fatal.text
            ),
        );
    }
    if run.server_down() {
        return (
            "server down",
            "The inference server's health check fails.".into(),
        );
    }
    let figures = run.server_figures();
    if run.server.is_some() || figures.running.is_some() {
        match (figures.running, figures.queued) {
            (Some(running), queued) if run.server_stuck(now) => {
                let claimed = run
                    .server
                    .as_ref()
                    .and_then(|s| s.claimed_tokens_per_second)
                    .filter(|c| *c > 0.0);
                let held = if running > 0.0 {
                    format!("{running:.0} running requests")
                } else {
                    format!("{:.0} queued requests and runs none", queued.unwrap_or(0.0))
                };
                return match claimed {
                    Some(claimed) => (
                        "server hung (metrics frozen)",
                        format!("The server's /metrics claims {claimed:.0} tok/s and {held}, but its generated-tokens counter stands still: its engine is dead or deadlocked behind a front end that still answers."),
                    ),
                    None => (
                        "server hung",
                        format!("The server holds {held} but generates no tokens: it is wedged (a stuck collective, a dead worker)."),
                    ),
                };
            }
            (Some(running), _) if running > 0.0 => {
                return (
                    "server busy, nothing written",
                    format!("The server is running {running:.0} requests{} but nothing reaches the log or the outputs: requests may be hanging on very long generations, or the client lost them.", figures.generation_tokens_per_second.map(|t| format!(" and generating {t:.0} tok/s")).unwrap_or_default()),
                )
            }
            (Some(_), queued) if queued.unwrap_or(0.0) == 0.0 => {
                return (
                    "server idle, client waiting",
                    "The server has nothing to do while the client reports no progress: the client is stuck (a deadlock, a dead worker pool, a lost connection).".into(),
                )
            }
            _ => {}
        }
    }
    (
        "cause unknown",
        "Configure --process-match and --server-metrics-url to narrow it down.".into(),
    )
}

/// (error rate, requests) over the recent window: the log's counts, else the records.
fn error_rate(v: &PartitionView<'_>) -> Option<(f64, u64)> {
    if let Some(rate) = v.log.and_then(|p| p.recent_error_rate(RATE_WINDOW)) {
        let window = v.log.map_or(0, |p| p.completed.min(RATE_WINDOW));
        return (window >= MIN_SAMPLE).then_some((rate, window));
    }
    let (n, errors, _) = v.outputs.as_ref()?.recent.counts();
    (n >= MIN_SAMPLE).then(|| (errors as f64 / n as f64, n))
}

fn run_finished(run: &Run, views: &[PartitionView<'_>]) -> bool {
    run.finished(views) && !run.any_active()
}

fn run_wall_time(run: &Run) -> Option<f64> {
    let start = run
        .partitions
        .values()
        .filter_map(|p| p.started_at)
        .reduce(f64::min)?;
    let end = run
        .partitions
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
            ", {} records, {} error records, {} empty, {} completion tokens",
            o.records, o.errors, o.empty, o.tokens
        );
    }
    s
}

#[cfg(test)]
mod tests;
