//! The built-in rules: a model snapshot and `now` in, the conditions that hold out. Pure.

mod alert_name;
mod cause;
mod checks;
#[cfg(test)]
mod claims;
mod stall;
mod table;

use crate::model::stacks::Captures;
use crate::model::{Run, Seconds};
pub use alert_name::{AlertName, Condition};
pub use cause::{Cause, UnknownCause};
use checks::Judged;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
pub use table::{Rule, Severity, ThresholdKind, TABLE};

/// Requests (or records) the error and empty-response rates look back over.
pub const RATE_WINDOW: u64 = 200;
/// The recent throughput is averaged over this long, by default (`[rules.ThroughputDrop]
/// window`).
const THROUGHPUT_RECENT: f64 = 15.0 * 60.0;
/// ThroughputDrop needs this much history before it judges, by default (`history`).
const THROUGHPUT_MIN_HISTORY: f64 = 30.0 * 60.0;

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
    /// ThroughputDrop: the recent average's window and the history needed, in seconds.
    pub window_seconds: f64,
    pub history_seconds: f64,
}

/// Every rule's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules(pub BTreeMap<AlertName, RuleConfig>);

impl Default for Rules {
    fn default() -> Rules {
        Rules(
            TABLE
                .iter()
                .map(|rule| {
                    let config = RuleConfig {
                        enabled: true,
                        threshold: rule.threshold,
                        for_seconds: rule.for_seconds,
                        window_seconds: THROUGHPUT_RECENT,
                        history_seconds: THROUGHPUT_MIN_HISTORY,
                    };
                    (rule.alert, config)
                })
                .collect(),
        )
    }
}

impl Rules {
    pub fn get(&self, alert: AlertName) -> RuleConfig {
        self.0.get(&alert).copied().unwrap_or(RuleConfig {
            enabled: false,
            threshold: 0.0,
            for_seconds: 0.0,
            window_seconds: THROUGHPUT_RECENT,
            history_seconds: THROUGHPUT_MIN_HISTORY,
        })
    }
}

/// What the rules remember between evaluations: throughput over the run, the most GPUs seen. Kept with the alert state, so it survives restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// (time, run tok/s), one sample a minute at most.
    throughput: VecDeque<(Seconds, f64)>,
    pub max_gpus: usize,
}

/// A week of one-minute samples.
const THROUGHPUT_SAMPLES: usize = 7 * 24 * 60;

impl History {
    pub fn record(&mut self, run: &Run, now: Seconds) {
        let working = run.working();
        if let Some(gpus) = &run.gpu().reading() {
            self.max_gpus = self.max_gpus.max(gpus.devices.len());
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

    /// (mean over the last `window` seconds, median over the run), once there is `history`
    /// seconds of it.
    fn throughput(&self, now: Seconds, window: f64, history: f64) -> Option<(f64, f64)> {
        let first = self.throughput.front()?.0;
        if now - first < history {
            return None;
        }
        let recent: Vec<f64> = self
            .throughput
            .iter()
            .filter(|(t, _)| now - t <= window)
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

/// Every condition that holds now: each enabled rule of [`TABLE`], in its order. `stacks`:
/// the last the alert engine took of the run's processes, which may name a stall's cause.
pub fn evaluate(
    run: &Run,
    stacks: Option<&Captures>,
    rules: &Rules,
    history: &History,
    now: Seconds,
) -> Vec<Condition> {
    let judged = Judged {
        run,
        stacks,
        views: run.current_views(),
        rules,
        history,
        now,
    };
    let mut conditions: Vec<Condition> = TABLE
        .iter()
        .filter_map(|rule| {
            let config = rules.get(rule.alert);
            config.enabled.then(|| (rule.check)(&judged, config))
        })
        .flatten()
        .collect();
    if checks::run_finished(run, &judged.views) {
        finished(&mut conditions);
    }
    conditions
}

/// Whether the run is finished as the rules judge it: after it no page of any kind is sent,
/// and no action runs.
pub fn run_finished(run: &Run) -> bool {
    checks::run_finished(run, &run.current_views())
}

/// Finished means finished for every rule: once the run is done no new page of any kind is
/// sent for it (what its records say is the `RunFinished` notice's and the dataset card's to
/// tell); the findings that still hold are listed in the notice, and any alert still firing
/// resolves.
fn finished(conditions: &mut Vec<Condition>) {
    let ends = |a: AlertName| matches!(a, AlertName::PartitionFinished | AlertName::RunFinished);
    let held: Vec<String> = conditions
        .iter()
        .filter(|c| !ends(c.alert))
        .map(|c| match &c.partition {
            Some(p) => format!("- {} on {p}: {}", c.alert, c.summary),
            None => format!("- {}: {}", c.alert, c.summary),
        })
        .collect();
    conditions.retain(|c| ends(c.alert));
    if held.is_empty() {
        return;
    }
    if let Some(notice) = conditions
        .iter_mut()
        .find(|c| c.alert == AlertName::RunFinished)
    {
        notice.details = format!(
            "{}\nHeld when the run finished (not paged):\n{}",
            notice.details,
            held.join("\n")
        );
    }
}

#[cfg(test)]
mod tests;
