//! A sliding window of (time, cumulative value) points, for rates that follow the recent past.

use super::Seconds;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Rates are computed over this much recent history: long enough to smooth bursty reporting,
/// short enough to show a slowdown within minutes.
const WINDOW_SECONDS: f64 = 600.0;
/// Bounds memory for sources that report very often.
const WINDOW_POINTS: usize = 512;
/// Below this span a rate is noise.
const MIN_SPAN_SECONDS: f64 = 1.0;
/// Points closer than this are merged, so that `WINDOW_POINTS` always spans `WINDOW_SECONDS`
/// however often a source pushes (the output source pushes on every poll).
const MIN_SPACING_SECONDS: f64 = WINDOW_SECONDS / WINDOW_POINTS as f64;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Window {
    points: VecDeque<(Seconds, f64)>,
}

impl Window {
    /// Records that the cumulative value was `value` at `at`.
    pub fn push(&mut self, at: Seconds, value: f64) {
        // Values read in one poll share a time (a whole backlog at start-up does): only the
        // last of them is a point, or a backlog would look like a burst of speed.
        let n = self.points.len();
        let before_last = n.checked_sub(2).map(|i| self.points[i].0);
        match self.points.back_mut() {
            Some(last) if last.0 >= at => *last = (at.max(last.0), value),
            // The newest point moves forward until it is far enough from the one before.
            Some(last) if before_last.is_some_and(|b| last.0 - b < MIN_SPACING_SECONDS) => {
                *last = (at, value)
            }
            _ => self.points.push_back((at, value)),
        }
        while self.points.len() > WINDOW_POINTS
            || (self.points.len() > 2
                && self
                    .points
                    .front()
                    .is_some_and(|p| at - p.0 > WINDOW_SECONDS))
        {
            self.points.pop_front();
        }
    }

    /// Records that the value has not changed by `at`.
    pub fn repeat(&mut self, at: Seconds) {
        if let Some(&(_, value)) = self.points.back() {
            self.push(at, value);
        }
    }

    pub fn clear(&mut self) {
        self.points.clear();
    }

    /// Change per second from the oldest point to `now`. Measuring up to `now` rather than to
    /// the newest point makes a stall lower the rate instead of freezing it. `None` until two
    /// points at least a second apart exist.
    pub fn rate(&self, now: Seconds) -> Option<f64> {
        let (first, last) = (self.points.front()?, self.points.back()?);
        if last.0 - first.0 < MIN_SPAN_SECONDS {
            return None;
        }
        Some((last.1 - first.1) / (now.max(last.0) - first.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_spans_to_now() {
        let mut w = Window::default();
        assert_eq!(w.rate(10.0), None);
        w.push(0.0, 0.0);
        w.push(0.0, 50.0);
        assert_eq!(w.rate(100.0), None, "points at one instant are one point");
        w.push(10.0, 100.0);
        assert_eq!(w.rate(10.0), Some(5.0));
        assert_eq!(w.rate(20.0), Some(2.5));
    }

    #[test]
    fn frequent_pushes_still_span_the_whole_window() {
        let mut w = Window::default();
        // 100 tokens in the first second, then nothing new, pushed every 20 ms for a minute.
        for i in 0..3000 {
            let t = f64::from(i) * 0.02;
            w.push(t, if t < 1.0 { t * 100.0 } else { 100.0 });
        }
        let rate = w.rate(60.0).expect("a rate");
        assert!((rate - 100.0 / 60.0).abs() < 0.01, "{rate}");
        assert!(w.points.len() < 100, "{} points", w.points.len());
    }

    #[test]
    fn old_points_fall_out() {
        let mut w = Window::default();
        for t in 0..2000 {
            w.push(t as f64, t as f64 * 3.0);
        }
        assert!(w.points.len() <= WINDOW_POINTS);
        assert_eq!(w.rate(1999.0), Some(3.0));
    }
}
