//! Will the run finish in time, and what will it cost: its deadline and budgets, the ETA with
//! its band, and GPU time. Pure: the model and `now` in, the projection out.

use super::{GpuReading, PartitionView, Run, Seconds};
use serde::{Deserialize, Serialize};

/// When the run must be done.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Deadline {
    /// A moment (Unix seconds).
    At(Seconds),
    /// Seconds after the run began (its progress log's first line).
    AfterStart(Seconds),
}

/// What the run is held to, from the configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub deadline: Option<Deadline>,
    /// The run stops at this many distinct records, or completion tokens.
    pub budget_records: Option<u64>,
    pub budget_tokens: Option<u64>,
    /// Records each partition stops at (`[[partitions]]`).
    pub partition_budgets: std::collections::BTreeMap<String, u64>,
    /// The price of one GPU-hour.
    pub gpu_hour_price: Option<f64>,
}

/// The band's windows are this many history points long (10 minutes at the default 30 s).
pub const BAND_WINDOW_POINTS: f64 = 20.0;
/// The band looks back over this many windows (an hour at the default resolution).
pub const BAND_WINDOWS: usize = 6;
/// A GPU reading older than this says nothing of the time since: the sampler was stuck.
const GPU_GAP: Seconds = 300.0;

/// The run's figures as a whole, now and at its projected end.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Projection {
    /// Distinct records where the outputs are followed, else the log's counts.
    pub completed: u64,
    pub planned: u64,
    /// What progress aims at: the plan, or a budget before it.
    pub target: u64,
    /// Requests per second now: the active partitions' rates.
    pub rate: Option<f64>,
    /// Completion tokens per second now, over the active partitions.
    pub tokens_per_second: Option<f64>,
    pub eta_seconds: Option<f64>,
    /// The ETA at the fastest and the slowest of the recent rates.
    pub eta_band: Option<(f64, f64)>,
    pub deadline: Option<Seconds>,
    /// A budget is reached: the run stops there.
    pub budget_reached: bool,
    pub gpu_hours: f64,
    pub gpu_hours_projected: Option<f64>,
    pub cost: Option<f64>,
    pub cost_projected: Option<f64>,
}

impl Run {
    /// Counts GPU time from a new reading: the GPUs held since the last one, while a partition
    /// is being processed (idle time between runs is not the run's).
    pub fn take_gpus(&mut self, reading: GpuReading) {
        let work = self.working();
        self.gpu.take(reading, work, GPU_GAP);
    }

    /// The deadline as a moment, once it is known (one relative to the start needs a start).
    pub fn deadline_at(&self) -> Option<Seconds> {
        match self.plan.deadline? {
            Deadline::At(t) => Some(t),
            Deadline::AfterStart(s) => Some(self.began_at()? + s),
        }
    }

    /// Tokens the run's current partitions wrote, per their outputs.
    fn tokens(views: &[PartitionView<'_>]) -> u64 {
        views
            .iter()
            .filter_map(|v| v.outputs.as_ref().map(|o| o.tokens))
            .sum()
    }

    /// Whether a budget is reached.
    pub fn budget_reached(&self, views: &[PartitionView<'_>]) -> bool {
        let done: u64 = views.iter().filter_map(|v| v.done()).sum();
        self.plan.budget_records.is_some_and(|b| done >= b)
            || self
                .plan
                .budget_tokens
                .is_some_and(|b| Run::tokens(views) >= b)
    }

    /// The run as a whole now, and where it is heading.
    pub fn projection(&self, now: Seconds) -> Projection {
        let mut views = self.current_views();
        // A bar no header named (vLLM's `Processed prompts` of the call in progress) is the
        // `default` partition: beside partitions whose files hold the records, it is the
        // same work seen twice, not more of it (docs/formats.md#vllms-own-batch-tools).
        if views.iter().any(|v| v.outputs.is_some()) {
            views.retain(|v| v.name != super::DEFAULT_PARTITION || v.outputs.is_some());
        }
        let completed: u64 = views.iter().filter_map(|v| v.done()).sum();
        let planned: u64 = views.iter().filter_map(|v| v.planned()).sum();
        // Each partition's plan or budget, and the run's budget before their sum.
        let targets: u64 = views.iter().filter_map(|v| v.target()).sum();
        let target = match self.plan.budget_records {
            Some(budget) if targets == 0 || budget < targets => budget,
            _ => targets,
        };
        let active: Vec<&PartitionView<'_>> = views
            .iter()
            .filter(|v| v.log.is_some_and(|p| p.active))
            .collect();
        // Where the log reports no rate (a library's run), the records reaching the disk are it.
        let rates: Vec<f64> = active
            .iter()
            .filter_map(|v| v.log.and_then(|p| p.rate(now)))
            .chain(
                views
                    .iter()
                    .filter(|v| !v.finished())
                    .filter_map(|v| v.records_per_second(now)),
            )
            .collect();
        let rate = (!rates.is_empty()).then(|| rates.iter().sum::<f64>());
        let tps: Vec<f64> = views
            .iter()
            .filter_map(|v| v.completion_tokens_per_second(now))
            .collect();
        let tokens_per_second = (!tps.is_empty()).then(|| tps.iter().sum::<f64>());
        let budget_reached = self.budget_reached(&views);
        let remaining = target.saturating_sub(completed);
        let finished = budget_reached || (target > 0 && remaining == 0);
        // Without a plan or a budget nothing says what is left: no ETA rather than 0.
        let by_records = if finished {
            Some(0.0)
        } else if target == 0 {
            None
        } else {
            rate.filter(|r| *r > 0.0).map(|r| remaining as f64 / r)
        };
        // A token budget ends the run when the tokens reach it, if that comes first.
        let by_tokens = match (self.plan.budget_tokens, tokens_per_second) {
            (Some(budget), Some(tps)) if tps > 0.0 && !finished => {
                Some(budget.saturating_sub(Run::tokens(&views)) as f64 / tps)
            }
            _ => None,
        };
        let eta_seconds = match (by_records, by_tokens) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let eta_band = match (eta_seconds, rate) {
            (Some(0.0), _) => Some((0.0, 0.0)),
            (Some(eta), Some(now_rate)) if now_rate > 0.0 => self
                .recent_rates(now)
                .map(|(slow, fast)| (slow.min(now_rate), fast.max(now_rate)))
                .map(|(slow, fast)| (eta * now_rate / fast, eta * now_rate / slow)),
            _ => None,
        };
        let gpus = self.gpu.reading().as_ref().map_or(0, |g| g.devices.len()) as f64;
        let gpu_hours = self.gpu.seconds() / 3600.0;
        let gpu_hours_projected = eta_seconds.map(|eta| gpu_hours + gpus * eta / 3600.0);
        let price = self.plan.gpu_hour_price;
        Projection {
            completed,
            planned,
            target,
            rate: if finished { Some(0.0) } else { rate },
            tokens_per_second: if finished {
                Some(0.0)
            } else {
                tokens_per_second
            },
            eta_seconds,
            eta_band,
            deadline: self.deadline_or_job_end().map(|(at, _)| at),
            budget_reached,
            gpu_hours,
            gpu_hours_projected,
            cost: price.map(|p| p * gpu_hours),
            cost_projected: price.zip(gpu_hours_projected).map(|(p, h)| p * h),
        }
    }

    /// (slowest, fastest) rate of the run's last windows of history that saw progress: each
    /// [`BAND_WINDOW_POINTS`] points long, [`BAND_WINDOWS`] of them back. Windows without
    /// progress are left out (a stall is `Stalled`'s to tell), and two are needed.
    fn recent_rates(&self, now: Seconds) -> Option<(f64, f64)> {
        let series = self.history.run.get("completed")?;
        let width = self.history.resolution * BAND_WINDOW_POINTS;
        let at = |t: Seconds| {
            series
                .points()
                .take_while(|(s, _)| f64::from(*s) <= t)
                .last()
                .map(|(_, v)| f64::from(v))
        };
        let rates: Vec<f64> = (0..BAND_WINDOWS)
            .filter_map(|w| {
                let end = now - w as f64 * width;
                let (a, b) = (at(end - width)?, at(end)?);
                (b > a).then(|| (b - a) / width)
            })
            .collect();
        if rates.len() < 2 {
            return None;
        }
        let slow = rates.iter().copied().fold(f64::INFINITY, f64::min);
        let fast = rates.iter().copied().fold(0.0, f64::max);
        Some((slow, fast))
    }
}
