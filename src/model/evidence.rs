//! Evidence that the pipeline works, and how long it has been missing.
//!
//! A stall is the absence of evidence, not the absence of progress lines. Evidence is:
//!
//! - a progress line (or the partition's header: work on it began then);
//! - a write to the partition's output files;
//! - before the partition's first progress line only, and only within the time its first
//!   report may take ([`Run::first_report_due`]), the inference server generating (running
//!   requests with generation throughput above zero). A driver that prints its first line
//!   after 50 completions of 10k-token answers is silent for many minutes while it works.
//!
//! Between partitions, the run itself needs evidence: see [`Run::run_stall_seconds`].

use super::{PartitionView, Run, Seconds};

/// Margin over what the run has shown a first report takes.
const FIRST_REPORT_MARGIN: f64 = 1.5;
/// How long the server's generation stands in for a first report when nothing bounds it (no
/// `max_tokens` announced and no earlier partition to learn from).
pub const FIRST_REPORT_DEFAULT: f64 = 30.0 * 60.0;

/// The evidence for one active partition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidence {
    /// The latest evidence of any kind.
    pub at: Seconds,
    /// The latest progress line, or the header when none came yet.
    pub log_at: Seconds,
    /// The latest write to the partition's output files.
    pub outputs_at: Option<Seconds>,
    /// The first write seen after the latest progress line: how long the outputs have gone
    /// on while the log is silent is `outputs_at` minus this.
    pub outputs_since: Option<Seconds>,
    /// When the first progress line is due, while none has arrived.
    pub first_report_due: Option<Seconds>,
    /// Whether the server's generation counted (before the first report).
    pub server_counted: bool,
}

impl Run {
    /// The evidence for `v`, when it is an active partition of the log.
    pub fn evidence(&self, v: &PartitionView<'_>, now: Seconds) -> Option<Evidence> {
        let p = v.log.filter(|p| p.active)?;
        let log_at = p.last_progress_at.or(p.started_at)?;
        // Output files written before this partition began are someone else's leftovers.
        let outputs_at = v
            .last_write
            .filter(|w| p.started_at.is_none_or(|s| *w >= s));
        let first_report_due = match p.last_progress_at {
            None => Some(log_at + self.first_report_window(v)),
            Some(_) => None,
        };
        let server_at = first_report_due
            .filter(|due| now <= *due)
            .and(self.server.generating_at);
        let at = [Some(log_at), outputs_at, server_at]
            .into_iter()
            .flatten()
            .fold(log_at, f64::max);
        let outputs_since = self
            .outputs
            .resumed
            .get(v.name)
            .copied()
            .filter(|r| *r > log_at);
        Some(Evidence {
            at,
            log_at,
            outputs_at,
            outputs_since,
            first_report_due,
            server_counted: server_at.is_some_and(|s| s >= at),
        })
    }

    /// Seconds without evidence of work, for an active partition: what
    /// `pulse_partition_stall_seconds` and the status view show.
    pub fn stall_seconds(&self, v: &PartitionView<'_>, now: Seconds) -> Option<f64> {
        Some((now - self.evidence(v, now)?.at).max(0.0))
    }

    /// How long the first progress line of `v` may take: 1.5× the longest header-to-first-line
    /// time of the earlier partitions (scaled by their `max_tokens` to this one's), or 1.5× the
    /// time one answer of `max_tokens` takes at the server's per-stream rate, whichever is
    /// longer; [`FIRST_REPORT_DEFAULT`] when neither is known.
    pub fn first_report_window(&self, v: &PartitionView<'_>) -> f64 {
        let max_tokens = v.log.and_then(|p| p.max_tokens).map(|t| t as f64);
        let learned = self
            .partitions
            .iter()
            .filter(|(name, _)| name.as_str() != v.name)
            .filter_map(|(_, q)| {
                let took = q.first_progress_at? - q.started_at?;
                let scale = match (max_tokens, q.max_tokens) {
                    (Some(here), Some(there)) if there > 0 => here / there as f64,
                    _ => 1.0,
                };
                Some(took.max(0.0) * scale)
            })
            .reduce(f64::max);
        let figures = self.server_figures();
        let per_stream = (|| {
            let rate =
                figures.generation_tokens_per_second? / figures.running.filter(|r| *r > 0.0)?;
            (rate > 0.0).then_some(max_tokens? / rate)
        })();
        match learned.into_iter().chain(per_stream).reduce(f64::max) {
            Some(window) => FIRST_REPORT_MARGIN * window,
            None => FIRST_REPORT_DEFAULT,
        }
    }

    /// Whether the run still has work to do: it is not finished, and its driver runs or a
    /// partition (announced, or planned by its input files) has not reached its plan.
    pub fn unfinished(&self, views: &[PartitionView<'_>]) -> bool {
        !self.finished(views)
            && (self.process.up()
                || views.iter().any(|v| {
                    v.planned()
                        .is_some_and(|planned| v.completed().unwrap_or(0) < planned)
                }))
    }

    /// Whether the run is finished, whether or not its driver still runs (writing a summary,
    /// uploading, a notebook kernel): every partition it knows reached its plan, or its log
    /// says the run is complete. A partition that begins after makes it unfinished again.
    pub fn finished(&self, views: &[PartitionView<'_>]) -> bool {
        Run::complete(views)
            || (self.progress.complete_said && !self.any_active())
            || self.budget_reached(views)
            || self.ended_after_stage_done()
    }

    /// A library's driver ended right after its log said a stage was done (a datatrove
    /// executor's stats, a distilabel step, a Curator call), with nothing of the run said
    /// after and no partition active: a process that is not the sidecar's child leaves no
    /// exit status, so what it said last is the evidence that it ended cleanly.
    pub fn ended_after_stage_done(&self) -> bool {
        self.progress.stage_done && self.process.gone() && !self.any_active()
    }

    /// Whether every partition reached its plan (or the log says it did).
    pub fn complete(views: &[PartitionView<'_>]) -> bool {
        !views.is_empty() && views.iter().all(PartitionView::reached_plan)
    }

    /// The latest evidence of work anywhere in the run: a progress line or header, an output
    /// write, the server generating.
    pub fn last_evidence_at(&self, views: &[PartitionView<'_>]) -> Option<Seconds> {
        let partitions = self
            .partitions
            .values()
            .flat_map(|p| [p.last_progress_at, p.started_at]);
        let outputs = views.iter().map(|v| v.last_write);
        let elsewhere = [self.server.generating_at, self.progress.working_at];
        partitions
            .chain(outputs)
            .chain(elsewhere)
            .flatten()
            .reduce(f64::max)
    }

    /// Seconds without evidence of work anywhere in the run, while the run is unfinished;
    /// `None` once it has nothing left to do. With no partition active, this is how long a
    /// driver has been idle between partitions (an active partition's own evidence is judged
    /// while there is one).
    pub fn run_stall_seconds(&self, views: &[PartitionView<'_>], now: Seconds) -> Option<f64> {
        if !self.unfinished(views) {
            return None;
        }
        Some((now - self.last_evidence_at(views)?).max(0.0))
    }

    /// Whether a partition is being processed now.
    pub fn any_active(&self) -> bool {
        self.partitions.values().any(|p| p.active)
    }

    /// Whether the run is at work now: a partition active, or a library's log at work (its
    /// latest word a working line, not a stage's end) while its driver runs. A library's run
    /// announces no partition, and its waiting on the server is this.
    pub fn working(&self) -> bool {
        self.any_active()
            || (self.progress.working_at.is_some()
                && !self.progress.stage_done
                && !self.process.gone())
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{OutputFile, Run, ServerState};
    use crate::parse::{Parser, RunInference};

    const T0: f64 = 1_780_000_000.0;

    fn feed(run: &mut Run, at: f64, lines: &str) {
        let mut parser = Parser::RunInference(RunInference);
        for line in lines.lines() {
            run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), at);
        }
    }

    fn generating(run: &mut Run, running: f64, tps: f64, at: f64) {
        run.set_server(
            ServerState {
                running_requests: Some(running),
                generation_tokens_per_second: Some(tps),
                checked_at: Some(at),
                ..ServerState::default()
            },
            at,
        );
    }

    #[test]
    fn before_the_first_report_the_server_generating_is_evidence_within_the_window() {
        let mut run = Run::new(&["a.log".into()]);
        feed(
            &mut run,
            T0,
            "Processing: B7_longform (LONG)\nRunning 2000 requests (concurrency=150, max_tokens=32768)...",
        );
        // 150 streams sharing 1300 tok/s: one 32768-token answer takes 3781 s.
        generating(&mut run, 150.0, 1300.0, T0 + 1200.0);
        let views = run.views();
        let window = run.first_report_window(&views[0]);
        assert!((window - 1.5 * 32768.0 / (1300.0 / 150.0)).abs() < 1e-6);
        let e = run.evidence(&views[0], T0 + 1200.0).unwrap();
        assert_eq!(e.at, T0 + 1200.0);
        assert!(e.server_counted);
        // Past the window the server's word no longer counts.
        let late = T0 + window + 1.0;
        generating(&mut run, 150.0, 1300.0, late);
        let views = run.views();
        let e = run.evidence(&views[0], late).unwrap();
        assert_eq!(e.at, T0);
        assert!(!e.server_counted);
    }

    #[test]
    fn after_the_first_report_only_the_log_and_the_outputs_count() {
        let mut run = Run::new(&["a.log".into()]);
        feed(&mut run, T0, "Processing: A\n  50/1000 (0 err) 1.0 req/s");
        generating(&mut run, 150.0, 1300.0, T0 + 900.0);
        run.outputs_mut().insert(
            "a.jsonl".into(),
            OutputFile {
                partition: "A".into(),
                last_write: Some(T0 + 300.0),
                ..OutputFile::default()
            },
        );
        let views = run.views();
        let e = run.evidence(&views[0], T0 + 900.0).unwrap();
        assert_eq!(
            (e.at, e.log_at, e.outputs_at),
            (T0 + 300.0, T0, Some(T0 + 300.0))
        );
        assert_eq!(e.first_report_due, None);
    }

    #[test]
    fn the_first_report_window_is_learned_from_earlier_partitions() {
        let mut run = Run::new(&["a.log".into()]);
        feed(
            &mut run,
            T0,
            "Processing: A\nRunning 10 requests (concurrency=2, max_tokens=1000)...",
        );
        feed(&mut run, T0 + 600.0, "  5/10 (0 err) 1.0 req/s");
        feed(&mut run, T0 + 700.0, "  10/10 (0 err) 1.0 req/s");
        feed(
            &mut run,
            T0 + 700.0,
            "Processing: B\nRunning 10 requests (concurrency=2, max_tokens=4000)...",
        );
        let views = run.views();
        let b = views.iter().find(|v| v.name == "B").unwrap();
        assert_eq!(run.first_report_window(b), 1.5 * 600.0 * 4.0);
    }

    #[test]
    fn between_partitions_the_run_needs_evidence_while_work_is_left() {
        let mut run = Run::new(&["a.log".into()]);
        feed(&mut run, T0, "Processing: B1\n  200/200 (0 err) 1.0 req/s");
        run.inputs_mut().insert(
            "B2/prompts.jsonl".into(),
            crate::model::InputFile {
                partition: "B2".into(),
                lines: 500,
            },
        );
        let views = run.views();
        assert!(run.unfinished(&views));
        assert_eq!(run.run_stall_seconds(&views, T0 + 2400.0), Some(2400.0));
        // Once every partition reached its plan there is nothing to wait for.
        run.inputs_mut().clear();
        let views = run.views();
        assert!(Run::complete(&views));
        assert_eq!(run.run_stall_seconds(&views, T0 + 2400.0), None);
    }
}
