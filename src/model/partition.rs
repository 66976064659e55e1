//! One partition of a run: its counts as the pipeline reported them, and the rates, ETA and
//! restarts we derive from how those counts move.

use super::window::Window;
use std::collections::VecDeque;

/// Reports kept for the stall rhythm and the recent error rate.
const HISTORY: usize = 64;

fn keep<T>(queue: &mut VecDeque<T>, value: T, cap: usize) {
    if queue.len() == cap {
        queue.pop_front();
    }
    queue.push_back(value);
}
use super::Seconds;
use crate::parse::Progress;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Partition {
    pub mode: Option<String>,
    pub concurrency: Option<u64>,
    pub max_tokens: Option<u64>,
    pub completed: u64,
    pub planned: Option<u64>,
    pub errors: Option<u64>,
    pub requests_per_second: Option<f64>,
    pub avg_completion_tokens: Option<f64>,
    pub logged_eta_seconds: Option<f64>,
    /// Output tokens per second as the pipeline last reported them (a tqdm postfix).
    #[serde(default)]
    pub logged_tokens_per_second: Option<f64>,
    /// When the logged ETA was read, so the fallback ETA can count down between reports.
    logged_eta_at: Option<Seconds>,
    /// When `completed` last increased.
    pub last_progress_at: Option<Seconds>,
    /// When the partition was (last) announced or first reported.
    pub started_at: Option<Seconds>,
    /// The first progress report since it was (last) announced: how long a first report takes
    /// is learned from it.
    #[serde(default)]
    pub first_progress_at: Option<Seconds>,
    pub active: bool,
    pub restarts: u64,
    completed_window: Window,
    /// Cumulative completion tokens implied by the log (completed × average), when known.
    tokens_window: Window,
    /// Seconds between recent increases of `completed`, for a stall threshold that fits the
    /// pipeline's own reporting rhythm.
    #[serde(default)]
    gaps: VecDeque<f64>,
    /// Recent (completed, errors) reports, for the error rate over the last requests.
    #[serde(default)]
    error_points: VecDeque<(u64, u64)>,
    /// Set by a repeated header: the next count starts afresh and is not a second restart.
    restarted: bool,
    announced: bool,
}

impl Partition {
    /// A `Processing:` header. A second one for the same partition means the pipeline began it again.
    pub(super) fn announce(&mut self, now: Seconds) {
        if self.announced {
            self.restarts += 1;
            self.restarted = true;
            self.clear_windows();
        }
        self.announced = true;
        self.started_at = Some(now);
        self.first_progress_at = None;
    }

    pub(super) fn progress(&mut self, p: &Progress<'_>, now: Seconds) {
        self.started_at.get_or_insert(now);
        if let Some(planned) = p.planned {
            self.planned = Some(planned);
        }
        if let Some(errors) = p.errors {
            self.errors = Some(errors);
        }
        if let Some(rps) = p.requests_per_second {
            self.requests_per_second = Some(rps);
        }
        if let Some(avg) = p.avg_completion_tokens {
            self.avg_completion_tokens = Some(avg);
        }
        if let Some(tps) = p.tokens_per_second {
            self.logged_tokens_per_second = Some(tps);
        }
        if let Some(eta) = p.eta_seconds {
            self.logged_eta_seconds = Some(eta);
            self.logged_eta_at = Some(now);
        }
        if let Some(completed) = p.completed {
            self.count(completed, now);
        }
        if let (Some(planned), true) = (self.planned, p.completed.is_some()) {
            // A finished partition is no longer being processed, even before the next header.
            self.active = self.completed < planned;
        }
    }

    fn count(&mut self, completed: u64, now: Seconds) {
        let first = self.last_progress_at.is_none();
        let finished = self
            .planned
            .is_some_and(|planned| self.completed >= planned);
        if completed < self.completed && finished && !self.restarted {
            // A count that starts over once the partition reached its plan is a new pass (a
            // nested tqdm bar drawn again for the next outer step, vLLM's bar for the next
            // `generate` call), not a pipeline that lost its work.
            self.clear_windows();
        } else if self.restarted || completed < self.completed {
            // Progress never goes backwards: the pipeline started over. A repeated header
            // already counted this restart.
            if !self.restarted {
                self.restarts += 1;
            }
            self.restarted = false;
            self.clear_windows();
        } else if completed == self.completed && !first {
            return;
        } else if let Some(last) = self.last_progress_at.filter(|last| now > *last) {
            // Lines read in one go (a backlog, stamped with the file's mtime) say nothing about
            // how often the pipeline reports: only gaps in time are gaps.
            keep(&mut self.gaps, now - last, HISTORY);
        } else if let Some(start) = self.started_at.filter(|s| self.announced && now > *s) {
            // The header to the first report is the first gap: a driver that reports every 50
            // completions took that long for its first 50, and will take about as long for the
            // next. Without it a slow reporter would look stalled until its third report.
            if self.first_progress_at.is_none() {
                keep(&mut self.gaps, now - start, HISTORY);
            }
        }
        self.last_progress_at = Some(now);
        self.first_progress_at.get_or_insert(now);
        self.completed = completed;
        self.push(now);
    }

    fn push(&mut self, now: Seconds) {
        if let Some(errors) = self.errors {
            keep(&mut self.error_points, (self.completed, errors), HISTORY);
        }
        self.completed_window.push(now, self.completed as f64);
        if let Some(avg) = self.avg_completion_tokens {
            self.tokens_window.push(now, avg * self.completed as f64);
        }
    }

    fn clear_windows(&mut self) {
        self.completed_window.clear();
        self.tokens_window.clear();
        self.error_points.clear();
    }

    /// The median time between progress reports (the lower one of an even count), from the
    /// first gap on: the header to the first report counts as one.
    pub fn median_progress_gap(&self) -> Option<f64> {
        if self.gaps.is_empty() {
            return None;
        }
        let mut gaps: Vec<f64> = self.gaps.iter().copied().collect();
        gaps.sort_by(f64::total_cmp);
        Some(gaps[(gaps.len() - 1) / 2])
    }

    /// Errors per request over about the last `requests` requests (fewer early in a
    /// partition), from the pipeline's own counts.
    pub fn recent_error_rate(&self, requests: u64) -> Option<f64> {
        let (completed, errors) = *self.error_points.back()?;
        let base = self
            .error_points
            .iter()
            .rev()
            .find(|(c, _)| completed.saturating_sub(*c) >= requests)
            .or(self.error_points.front())?;
        let done = completed.saturating_sub(base.0);
        (done > 0).then(|| errors.saturating_sub(base.1) as f64 / done as f64)
    }

    /// completed / planned, when planned is known and non-zero.
    pub fn progress_ratio(&self) -> Option<f64> {
        match self.planned {
            Some(planned) if planned > 0 => Some((self.completed as f64 / planned as f64).min(1.0)),
            _ => None,
        }
    }

    /// Requests per second over the recent window, as we measured it.
    pub fn measured_rate(&self, now: Seconds) -> Option<f64> {
        self.completed_window.rate(now)
    }

    /// The rate work is done at: measured, or before there is a measurement, the rate the
    /// pipeline's logged ETA implies while it is still counting down. Not its logged req/s,
    /// which a stalled partition keeps showing forever.
    pub fn rate(&self, now: Seconds) -> Option<f64> {
        self.measured_rate(now).or_else(|| {
            let remaining = self.planned?.saturating_sub(self.completed);
            let eta = self.eta_seconds(now).filter(|e| *e > 0.0)?;
            (self.active && remaining > 0).then(|| remaining as f64 / eta)
        })
    }

    /// Completion tokens per second over the recent window, from the logged averages; else the
    /// rate the pipeline printed itself, while the partition is being processed (a finished or
    /// stalled bar keeps showing its last rate forever).
    pub fn completion_tokens_per_second(&self, now: Seconds) -> Option<f64> {
        self.tokens_window
            .rate(now)
            .map(|r| r.max(0.0))
            .or(self.logged_tokens_per_second.filter(|_| self.active))
    }

    /// Remaining time from the measured rate; falls back to the logged ETA, counted down since
    /// it was printed.
    pub fn eta_seconds(&self, now: Seconds) -> Option<f64> {
        let remaining = self.planned?.saturating_sub(self.completed);
        if remaining == 0 {
            return Some(0.0);
        }
        match self.measured_rate(now) {
            Some(rate) if rate > 0.0 => Some(remaining as f64 / rate),
            _ => {
                // Counted down to nothing with work left: the logged figure no longer says
                // anything, and "0s" would claim the partition is about to finish.
                let left = self.logged_eta_seconds? - (now - self.logged_eta_at?).max(0.0);
                (left > 0.0).then_some(left)
            }
        }
    }
}
