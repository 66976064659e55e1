//! One partition of a run: its counts as the pipeline reported them, and the rates, ETA and
//! restarts we derive from how those counts move.

use super::Seconds;
use crate::parse::Progress;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Rates are computed over this much recent history: long enough to smooth the pipeline's
/// bursty reporting, short enough to show a slowdown within minutes.
const WINDOW_SECONDS: f64 = 600.0;
/// Bounds memory for pipelines that report very often.
const WINDOW_POINTS: usize = 512;
/// Below this span a rate is noise (and with `--once` every point has the same time).
const MIN_SPAN_SECONDS: f64 = 1.0;

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
    /// When the logged ETA was read, so the fallback ETA can count down between reports.
    logged_eta_at: Option<Seconds>,
    /// When `completed` last increased.
    pub last_progress_at: Option<Seconds>,
    /// When the partition was (last) announced or first reported.
    pub started_at: Option<Seconds>,
    pub active: bool,
    pub restarts: u64,
    window: VecDeque<Point>,
    /// Set by a repeated header: the next count starts afresh and is not a second restart.
    restarted: bool,
    announced: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Point {
    at: Seconds,
    completed: u64,
    /// Cumulative completion tokens implied by the log (completed × average), when known.
    tokens: Option<f64>,
}

impl Partition {
    /// A `Processing:` header. A second one for the same partition means the pipeline began it again.
    pub(super) fn announce(&mut self, now: Seconds) {
        if self.announced {
            self.restarts += 1;
            self.restarted = true;
            self.window.clear();
        }
        self.announced = true;
        self.started_at = Some(now);
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
        let first = self.window.is_empty() && self.last_progress_at.is_none();
        if self.restarted || completed < self.completed {
            // Progress never goes backwards: the pipeline started over. A repeated header
            // already counted this restart.
            if !self.restarted {
                self.restarts += 1;
            }
            self.restarted = false;
            self.window.clear();
        } else if completed == self.completed && !first {
            return;
        }
        self.last_progress_at = Some(now);
        self.completed = completed;
        self.push(now);
    }

    fn push(&mut self, now: Seconds) {
        let tokens = self
            .avg_completion_tokens
            .map(|avg| avg * self.completed as f64);
        let point = Point {
            at: now,
            completed: self.completed,
            tokens,
        };
        // Lines read in one poll share a time (a whole log at start-up does): only the last of
        // them is a point, or a backlog would look like a burst of speed.
        match self.window.back_mut() {
            Some(last) if last.at >= now => *last = point,
            _ => self.window.push_back(point),
        }
        while self.window.len() > WINDOW_POINTS
            || self
                .window
                .front()
                .is_some_and(|p| now - p.at > WINDOW_SECONDS && self.window.len() > 2)
        {
            self.window.pop_front();
        }
    }

    /// completed / planned, when planned is known and non-zero.
    pub fn progress_ratio(&self) -> Option<f64> {
        match self.planned {
            Some(planned) if planned > 0 => Some((self.completed as f64 / planned as f64).min(1.0)),
            _ => None,
        }
    }

    /// The span from the oldest point in the window to `now`: a stall stretches it, so rates
    /// fall while nothing happens instead of freezing at their last value.
    fn span(&self, now: Seconds) -> Option<(Point, Point, f64)> {
        let (first, last) = (*self.window.front()?, *self.window.back()?);
        let span = now.max(last.at) - first.at;
        (self.window.len() >= 2 && span >= MIN_SPAN_SECONDS).then_some((first, last, span))
    }

    /// Requests per second over the recent window, as we measured it.
    pub fn measured_rate(&self, now: Seconds) -> Option<f64> {
        let (first, last, span) = self.span(now)?;
        Some((last.completed - first.completed) as f64 / span)
    }

    /// Completion tokens per second over the recent window, from the logged averages.
    pub fn completion_tokens_per_second(&self, now: Seconds) -> Option<f64> {
        let (first, last, span) = self.span(now)?;
        Some(((last.tokens? - first.tokens?) / span).max(0.0))
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
                let eta = self.logged_eta_seconds?;
                Some((eta - (now - self.logged_eta_at?).max(0.0)).max(0.0))
            }
        }
    }

    /// Seconds since progress (or since the partition began, if it has made none), while active.
    pub fn stall_seconds(&self, now: Seconds) -> Option<f64> {
        if !self.active {
            return None;
        }
        let since = self.last_progress_at.or(self.started_at)?;
        Some((now - since).max(0.0))
    }
}
