//! The run's recent past at a fixed resolution: what a person judging a run looks at (when
//! throughput fell, whether progress is linear, what the GPUs did meanwhile), and what the page,
//! the terminal view and the alert emails draw.
//!
//! One point per `resolution` seconds per series, at most `span` seconds of them: a series is a
//! ring of at most span / resolution points of 8 bytes (a `u32` Unix second and an `f32`), so
//! the memory is bounded by the number of series, not by the run's length. A point is placed
//! at the time its value held (the backlog at its log's mtime), never all at "now"; a restart
//! leaves a gap, not a line drawn across it. Pure: every function takes `now`.

use super::{Run, Seconds};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// A number as JSON writes it: finite values as Rust's `Debug` prints them (the shortest text
/// that reads back the same, `1200.0` rather than `1200`, as serde_json writes floats),
/// anything else as null.
struct Json<T>(T);

impl<T: std::fmt::Debug + Into<f64> + Copy> std::fmt::Display for Json<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.into().is_finite() {
            write!(f, "{:?}", self.0)
        } else {
            f.write_str("null")
        }
    }
}

pub const DEFAULT_RESOLUTION: f64 = 30.0;
pub const DEFAULT_SPAN: f64 = 48.0 * 3600.0;

/// Alert transitions kept at most; older ones are dropped first.
const MARKS: usize = 1000;

/// One series: (Unix second, value) points, oldest first, one per resolution bucket.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Series(VecDeque<(u32, f32)>);

impl Series {
    /// Records `value` at `t`: the bucket's latest value wins; points older than the span go.
    fn record(&mut self, t: Seconds, value: f64, resolution: f64, span: f64) {
        if !value.is_finite() || !t.is_finite() || t < 0.0 {
            return;
        }
        let bucket = ((t / resolution).floor() * resolution) as u32;
        match self.0.back_mut() {
            Some(last) if last.0 == bucket => last.1 = value as f32,
            // Out of order (an older backlog after newer points): the series stays sorted.
            Some(last) if last.0 > bucket => {}
            _ => self.0.push_back((bucket, value as f32)),
        }
        let oldest = t - span;
        while self.0.front().is_some_and(|p| f64::from(p.0) < oldest) {
            self.0.pop_front();
        }
    }

    pub fn points(&self) -> impl Iterator<Item = (u32, f32)> + '_ {
        self.0.iter().copied()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The points from `since` on, one per `step` seconds at most (the latest of each step).
    pub fn since(&self, since: f64, step: f64) -> Vec<(u32, f32)> {
        let mut out: Vec<(u32, f32)> = Vec::new();
        // Sorted by time: `/status` asks for the last hour every poll, so skip to it.
        let first = self.0.partition_point(|(t, _)| f64::from(*t) < since);
        for (t, v) in self.0.range(first..).copied() {
            let bucket = (f64::from(t) / step).floor();
            match out.last_mut() {
                Some(last) if (f64::from(last.0) / step).floor() == bucket => *last = (t, v),
                _ => out.push((t, v)),
            }
        }
        out
    }
}

/// An alert beginning or ending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    pub t: u32,
    pub alert: String,
    pub partition: Option<String>,
    pub firing: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct History {
    pub resolution: f64,
    pub span: f64,
    /// Run-wide: `completed`, `tokens_per_second`.
    pub run: BTreeMap<String, Series>,
    /// Per partition: `completed`, `tokens_per_second`.
    pub partitions: BTreeMap<String, BTreeMap<String, Series>>,
    /// Per GPU index: `utilization`, `memory_used_bytes`.
    pub gpus: BTreeMap<u32, BTreeMap<String, Series>>,
    /// The inference server: `running`, `queued`, `generation_tokens_per_second`.
    pub server: BTreeMap<String, Series>,
    pub marks: VecDeque<Mark>,
    /// Whether the backlog's points have been placed (at the first sample).
    #[serde(default)]
    backlog_placed: bool,
}

impl Default for History {
    fn default() -> History {
        History::new(DEFAULT_RESOLUTION, DEFAULT_SPAN)
    }
}

impl History {
    pub fn new(resolution: f64, span: f64) -> History {
        History {
            resolution,
            span,
            run: BTreeMap::new(),
            partitions: BTreeMap::new(),
            gpus: BTreeMap::new(),
            server: BTreeMap::new(),
            marks: VecDeque::new(),
            backlog_placed: false,
        }
    }

    /// The points one series can hold: the bound on its memory.
    pub fn points_per_series(&self) -> usize {
        (self.span / self.resolution).ceil() as usize + 1
    }

    /// A restored history under this resolution and span: kept if they match, else started
    /// afresh (points at another resolution would be misread).
    pub fn restored(saved: History, resolution: f64, span: f64) -> History {
        if saved.resolution == resolution && saved.span == span {
            History {
                backlog_placed: true,
                ..saved
            }
        } else {
            History::new(resolution, span)
        }
    }

    fn put(
        map: &mut BTreeMap<String, Series>,
        name: &str,
        t: f64,
        v: Option<f64>,
        res: f64,
        span: f64,
    ) {
        if let Some(v) = v {
            map.entry(name.to_owned())
                .or_default()
                .record(t, v, res, span);
        }
    }

    /// Records the model as it is at `now`. The first sample also places each partition's
    /// backlog at its last progress (the log's mtime for lines read at start).
    pub fn sample(&mut self, run: &Run, now: Seconds) {
        let (res, span) = (self.resolution, self.span);
        if !self.backlog_placed {
            self.backlog_placed = true;
            for (name, p) in run.partitions.iter() {
                if let Some(at) = p.last_progress_at.filter(|at| *at < now - res) {
                    let series = self.partitions.entry(name.clone()).or_default();
                    Self::put(series, "completed", at, Some(p.completed as f64), res, span);
                }
            }
        }
        let mut completed = 0.0;
        let mut tps = Vec::new();
        for (name, p) in run.partitions.iter() {
            completed += p.completed as f64;
            let rate = p.completion_tokens_per_second(now);
            tps.extend(rate);
            // A finished partition's value no longer changes: its last point says it all.
            let series = self.partitions.entry(name.clone()).or_default();
            let unchanged = series
                .get("completed")
                .and_then(|s| s.0.back())
                .is_some_and(|(_, v)| *v == p.completed as f32);
            if p.active || !unchanged {
                Self::put(
                    series,
                    "completed",
                    now,
                    Some(p.completed as f64),
                    res,
                    span,
                );
                Self::put(series, "tokens_per_second", now, rate, res, span);
            }
        }
        if !run.partitions.is_empty() {
            Self::put(&mut self.run, "completed", now, Some(completed), res, span);
            let total = (!tps.is_empty()).then(|| tps.iter().sum());
            Self::put(&mut self.run, "tokens_per_second", now, total, res, span);
        }
        if let Some(reading) = run.gpu.reading() {
            for g in &reading.devices {
                let series = self.gpus.entry(g.index).or_default();
                Self::put(series, "utilization", now, g.utilization, res, span);
                let used = g.memory_used_bytes.map(|b| b as f64);
                Self::put(series, "memory_used_bytes", now, used, res, span);
            }
        }
        if let Some(server) = &run.server.state {
            let s = &mut self.server;
            Self::put(s, "running", now, server.running_requests, res, span);
            Self::put(s, "queued", now, server.queued_requests, res, span);
            let gen = server.generation_tokens_per_second;
            Self::put(s, "generation_tokens_per_second", now, gen, res, span);
        }
        self.forget_before(now - span);
    }

    /// An alert's transition, at `t`.
    pub fn mark(&mut self, t: Seconds, alert: &str, partition: Option<&str>, firing: bool) {
        if self.marks.len() >= MARKS {
            self.marks.pop_front();
        }
        self.marks.push_back(Mark {
            t: t.max(0.0) as u32,
            alert: alert.to_owned(),
            partition: partition.map(str::to_owned),
            firing,
        });
    }

    fn forget_before(&mut self, oldest: f64) {
        self.marks.retain(|m| f64::from(m.t) >= oldest);
        for series in self.partitions.values_mut() {
            for s in series.values_mut() {
                while s.0.front().is_some_and(|p| f64::from(p.0) < oldest) {
                    s.0.pop_front();
                }
            }
            series.retain(|_, s| !s.is_empty());
        }
        self.partitions.retain(|_, series| !series.is_empty());
    }

    /// `GET /api/history`: the series from `since` on, thinned to one point per `step`
    /// seconds (never finer than the resolution), and the alert marks. Written straight into
    /// the text, not through a JSON value tree: a full history is 700,000 points, and a tree
    /// of them would cost the sidecar a hundred megabytes for the length of one request.
    pub fn view(&self, since: f64, step: f64) -> String {
        use std::fmt::Write;
        let step = step.max(self.resolution);
        let mut out = String::with_capacity(64 * 1024);
        let quote = |s: &str| serde_json::to_string(s).expect("a string serializes");
        let series = |out: &mut String, m: &BTreeMap<String, Series>| {
            out.push('{');
            for (i, (name, s)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}:[", quote(name));
                for (j, (t, v)) in s.since(since, step).into_iter().enumerate() {
                    let sep = if j > 0 { "," } else { "" };
                    let _ = write!(out, "{sep}[{t},{}]", Json(v));
                }
                out.push(']');
            }
            out.push('}');
        };
        let nested =
            |out: &mut String, m: &mut dyn Iterator<Item = (String, &BTreeMap<String, Series>)>| {
                out.push('{');
                for (i, (name, inner)) in m.enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{}:", quote(&name));
                    series(out, inner);
                }
                out.push('}');
            };
        let _ = write!(
            out,
            "{{\"resolution\":{},\"span\":{},\"since\":{},\"step\":{},\"run\":",
            Json(self.resolution),
            Json(self.span),
            Json(since),
            Json(step)
        );
        series(&mut out, &self.run);
        out.push_str(",\"partitions\":");
        nested(
            &mut out,
            &mut self.partitions.iter().map(|(k, v)| (k.clone(), v)),
        );
        out.push_str(",\"gpus\":");
        nested(
            &mut out,
            &mut self.gpus.iter().map(|(k, v)| (k.to_string(), v)),
        );
        out.push_str(",\"server\":");
        series(&mut out, &self.server);
        let marks: Vec<&Mark> = self
            .marks
            .iter()
            .filter(|m| f64::from(m.t) >= since)
            .collect();
        let _ = write!(
            out,
            ",\"marks\":{}}}",
            serde_json::to_string(&marks).expect("marks serialize")
        );
        out
    }

    /// What a picture of the time from `since` on needs: the run's and the GPUs' points from
    /// then, without the partitions and the server.
    pub fn window(&self, since: f64) -> History {
        let trim = |m: &BTreeMap<String, Series>| -> BTreeMap<String, Series> {
            m.iter()
                .map(|(k, s)| {
                    let first = s.0.partition_point(|(t, _)| f64::from(*t) < since);
                    (k.clone(), Series(s.0.range(first..).copied().collect()))
                })
                .collect()
        };
        History {
            run: trim(&self.run),
            gpus: self.gpus.iter().map(|(k, m)| (*k, trim(m))).collect(),
            marks: self
                .marks
                .iter()
                .filter(|m| f64::from(m.t) >= since)
                .cloned()
                .collect(),
            ..History::new(self.resolution, self.span)
        }
    }

    /// The seconds from `since` (or the oldest point, if later) to the newest point.
    pub fn covered_since(&self, since: f64) -> f64 {
        let mut oldest = f64::INFINITY;
        let mut newest = f64::NEG_INFINITY;
        let all = self
            .run
            .values()
            .chain(self.server.values())
            .chain(self.partitions.values().flat_map(|m| m.values()))
            .chain(self.gpus.values().flat_map(|m| m.values()));
        for s in all {
            if let (Some(first), Some(last)) = (s.0.front(), s.0.back()) {
                oldest = oldest.min(f64::from(first.0));
                newest = newest.max(f64::from(last.0));
            }
        }
        (newest - oldest.max(since)).max(0.0)
    }

    /// Every point held, over every series.
    pub fn points(&self) -> usize {
        let count = |m: &BTreeMap<String, Series>| m.values().map(Series::len).sum::<usize>();
        count(&self.run)
            + count(&self.server)
            + self.partitions.values().map(count).sum::<usize>()
            + self.gpus.values().map(count).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{Parser, RunInference};

    fn run_at(completed: u64, t: f64) -> Run {
        let mut run = Run::new(&["log".into()]);
        let mut parser = Parser::RunInference(RunInference);
        for line in [
            "Processing: A".to_owned(),
            "A: 100000 prompts".to_owned(),
            format!("  {completed}/100000 (0 err) 1.0 req/s avg_comp=200tok"),
        ] {
            run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), t);
        }
        run
    }

    #[test]
    fn a_day_of_points_keeps_the_resolution_the_span_and_the_bound() {
        let mut h = History::new(30.0, 6.0 * 3600.0);
        let start = 1_800_000_000.0;
        // A day, sampled every 10 s: three samples per bucket, the latest wins.
        for i in 0..(24u32 * 360) {
            let t = start + f64::from(i) * 10.0;
            let run = run_at(u64::from(i), t);
            h.sample(&run, t);
        }
        let completed = &h.partitions["A"]["completed"];
        assert!(
            completed.len() <= h.points_per_series(),
            "{}",
            completed.len()
        );
        assert_eq!(completed.len(), 6 * 120, "six hours of 30 s buckets");
        let points: Vec<(u32, f32)> = completed.points().collect();
        assert!(
            points.windows(2).all(|w| w[1].0 - w[0].0 == 30),
            "one point per 30 s"
        );
        let end = start + f64::from(24 * 360 - 1) * 10.0;
        assert!(f64::from(points[0].0) >= end - 6.0 * 3600.0);
        // The last bucket holds the latest sample of it.
        assert_eq!(points.last().unwrap().1, (24 * 360 - 1) as f32);
        assert_eq!(h.run["completed"].len(), completed.len());
    }

    #[test]
    fn the_backlog_lands_at_its_time_not_at_now() {
        let mut h = History::default();
        let written = 1_800_000_000.0;
        let run = run_at(500, written);
        h.sample(&run, written + 3600.0);
        let points: Vec<(u32, f32)> = h.partitions["A"]["completed"].points().collect();
        assert_eq!(points[0], ((written / 30.0).floor() as u32 * 30, 500.0));
        assert_eq!(points.len(), 2, "the backlog's time, then now: {points:?}");
    }

    #[test]
    fn a_snapshot_restores_and_a_restart_leaves_a_gap() {
        let mut h = History::new(30.0, 3600.0);
        let t = 1_800_000_000.0;
        h.sample(&run_at(1, t), t);
        h.mark(t, "Stalled", Some("A"), true);
        let json = serde_json::to_string(&h).unwrap();
        let saved: History = serde_json::from_str(&json).unwrap();
        let mut back = History::restored(saved, 30.0, 3600.0);
        assert_eq!(back.run, h.run);
        assert_eq!(back.marks.len(), 1);
        back.sample(&run_at(2, t + 600.0), t + 600.0);
        let pts: Vec<(u32, f32)> = back.run["completed"].points().collect();
        assert_eq!(
            pts.len(),
            2,
            "no points invented across the restart: {pts:?}"
        );
        assert_eq!(pts[1].0 - pts[0].0, 600);
        // Another resolution: started afresh rather than misread.
        let saved: History = serde_json::from_str(&json).unwrap();
        assert!(History::restored(saved, 60.0, 3600.0).run.is_empty());
    }

    #[test]
    fn the_view_is_the_json_serde_would_write() {
        let mut h = History::new(30.0, 3600.0);
        let t = 1_800_000_010.0;
        h.sample(&run_at(7, t), t);
        h.mark(t, "Stalled", Some("A\"B"), true);
        let v: serde_json::Value = serde_json::from_str(&h.view(0.0, 0.0)).unwrap();
        assert_eq!(v["resolution"], serde_json::json!(30.0));
        assert_eq!(v["since"], serde_json::json!(0.0));
        assert_eq!(
            v["run"]["completed"],
            serde_json::json!([[1_800_000_000u32, 7.0]]),
            "at its bucket"
        );
        assert_eq!(
            v["partitions"]["A"]["completed"][0][1],
            serde_json::json!(7.0)
        );
        assert_eq!(v["marks"][0]["partition"], "A\"B");
        let later: serde_json::Value =
            serde_json::from_str(&h.view(1_900_000_000.0, 60.0)).unwrap();
        assert_eq!(later["run"]["completed"], serde_json::json!([]));
        assert_eq!(later["step"], serde_json::json!(60.0));
    }

    #[test]
    fn since_and_step_thin_the_points() {
        let mut s = Series::default();
        for i in 0..10 {
            s.record(f64::from(i) * 30.0, f64::from(i), 30.0, 1e9);
        }
        assert_eq!(s.since(0.0, 30.0).len(), 10);
        assert_eq!(s.since(150.0, 30.0).len(), 5);
        let thinned = s.since(0.0, 120.0);
        assert_eq!(
            thinned.iter().map(|p| p.0).collect::<Vec<_>>(),
            [90, 210, 270]
        );
        s.record(f64::NAN, 1.0, 30.0, 1e9);
        s.record(0.0, 5.0, 30.0, 1e9);
        assert_eq!(
            s.len(),
            10,
            "non-finite and out-of-order points are not recorded"
        );
    }
}
