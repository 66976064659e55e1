//! What the pipeline actually wrote: per output file counts, summed per partition, and the
//! reconciliation of those counts with what the log claims.

use super::records::{Facts, RecentRecords, TokenHistogram, TRUNCATED};
use super::window::Window;
use super::{Partition, Run, Seconds, DEFAULT_PARTITION};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A gap between log and outputs up to this many requests is normal (writes lag the log).
pub const MISMATCH_MIN_GAP: f64 = 50.0;

/// Output files last written this long before the run began are left from an earlier one.
pub const PREVIOUS_MARGIN: Seconds = 60.0;

/// Distinct finish reasons kept per file; the rest are counted as `other`, so a pipeline that
/// writes free text there cannot explode the label set.
pub const MAX_REASONS: usize = 16;

/// Counts over the records of one file, or summed over a partition's files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputStats {
    pub records: u64,
    pub bytes: u64,
    pub invalid: u64,
    pub empty: u64,
    pub errors: u64,
    pub tokens: u64,
    /// Records longer than the cap: counted as records, not inspected.
    pub oversized: u64,
    pub finish_reasons: BTreeMap<String, u64>,
    /// The last records' flags, for rates over recent records.
    #[serde(default)]
    pub recent: RecentRecords,
    /// Records whose id an earlier record of the partition already had.
    #[serde(default)]
    pub duplicates: u64,
    /// Records checked against an incomplete set of ids (past the node's identity cap): each
    /// counts as distinct, so the distinct count is at most this much too high.
    #[serde(default)]
    pub unchecked: u64,
    /// The first duplicates' ids, for the notice.
    #[serde(default)]
    pub duplicate_examples: Vec<String>,
    /// Records lacking each required field.
    #[serde(default)]
    pub missing: BTreeMap<String, u64>,
    /// The first records lacking a required field, by their line in the file.
    #[serde(default)]
    pub missing_examples: Vec<u64>,
    #[serde(default)]
    pub token_histogram: TokenHistogram,
}

/// Examples kept per file for a notice.
const EXAMPLES: usize = 5;

fn keep_first<T: Clone>(into: &mut Vec<T>, from: &[T]) {
    let room = EXAMPLES.saturating_sub(into.len());
    into.extend(from.iter().take(room).cloned());
}

impl OutputStats {
    /// One complete record of `len` bytes (without its newline).
    pub fn add(&mut self, facts: &Facts, len: usize) {
        self.records += 1;
        self.bytes += len as u64 + 1;
        self.invalid += u64::from(facts.invalid);
        self.empty += u64::from(facts.empty);
        self.errors += u64::from(facts.error);
        self.tokens = self.tokens.saturating_add(facts.tokens.unwrap_or(0));
        if let Some(tokens) = facts.tokens {
            self.token_histogram.observe(tokens);
        }
        self.recent.push(facts);
        if let Some(reason) = &facts.finish_reason {
            // Known reasons (nearly every record's) are counted without allocating a key.
            if let Some(n) = self.finish_reasons.get_mut(reason) {
                *n += 1;
            } else {
                let key = if self.finish_reasons.len() < MAX_REASONS {
                    reason.as_str()
                } else {
                    "other"
                };
                *self.finish_reasons.entry(key.to_owned()).or_default() += 1;
            }
        }
    }

    /// Records that were counted, not inspected: `bytes` with their newlines.
    pub fn add_plain(&mut self, records: u64, bytes: u64) {
        self.records += records;
        self.bytes += bytes;
        self.recent.push_clean(records);
    }

    /// Counts for a file whose records must have `required`: each field's count starts at 0,
    /// so that its series exists before the first record lacks it.
    pub fn expecting(required: &[String]) -> OutputStats {
        OutputStats {
            missing: required.iter().map(|f| (f.clone(), 0)).collect(),
            ..OutputStats::default()
        }
    }

    /// A record whose id was seen before in its partition.
    pub fn add_duplicate(&mut self, id: impl FnOnce() -> Option<String>) {
        self.duplicates += 1;
        if self.duplicate_examples.len() < EXAMPLES {
            self.duplicate_examples.extend(id());
        }
    }

    /// The required fields (by their pointers) the last record added lacks: `missing` bit i
    /// for `required[i]`.
    pub fn add_missing(&mut self, missing: u32, required: &[String]) {
        if missing == 0 {
            return;
        }
        for (i, field) in required.iter().enumerate() {
            if missing & (1 << i) != 0 {
                *self.missing.entry(field.clone()).or_default() += 1;
            }
        }
        if self.missing_examples.len() < EXAMPLES {
            self.missing_examples.push(self.records);
        }
    }

    /// Records that are not duplicates: the partition's distinct responses.
    pub fn distinct(&self) -> u64 {
        self.records.saturating_sub(self.duplicates)
    }

    /// Records that finished at their token limit.
    pub fn truncated(&self) -> u64 {
        TRUNCATED
            .iter()
            .filter_map(|r| self.finish_reasons.get(*r))
            .sum()
    }

    pub fn add_oversized(&mut self) {
        self.records += 1;
        self.oversized += 1;
    }

    fn merge(&mut self, other: &OutputStats) {
        self.records += other.records;
        self.bytes += other.bytes;
        self.invalid += other.invalid;
        self.empty += other.empty;
        self.errors += other.errors;
        self.tokens = self.tokens.saturating_add(other.tokens);
        self.oversized += other.oversized;
        for (reason, n) in &other.finish_reasons {
            *self.finish_reasons.entry(reason.clone()).or_default() += n;
        }
        self.duplicates += other.duplicates;
        self.unchecked += other.unchecked;
        for (field, n) in &other.missing {
            *self.missing.entry(field.clone()).or_default() += n;
        }
        keep_first(&mut self.duplicate_examples, &other.duplicate_examples);
        keep_first(&mut self.missing_examples, &other.missing_examples);
        self.token_histogram.merge(&other.token_histogram);
        self.recent.merge(&other.recent);
    }
}

/// The output source's facts in the run: the output and input files it follows, what is
/// derived from them alone (the totals, the token and record windows, where each partition's
/// pass and resumption began), and how it holds them. None of it is in a snapshot: the
/// output source keeps its own, and reads the files again at start-up.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// Output files by path.
    pub(super) files: Arc<BTreeMap<String, OutputFile>>,
    /// Goes up with every change to `files` made through [`Outputs::set_file`].
    pub(super) generation: u64,
    /// `files` summed per partition, as of [`Outputs::refresh_totals`]: with ten thousand
    /// files, summing them at every scrape and every rule round is most of an idle sidecar's
    /// work, and they change only when a file does.
    pub(super) totals: OutputTotals,
    /// Input files (planned requests) by path.
    pub(super) inputs: Arc<BTreeMap<String, InputFile>>,
    /// Cumulative output tokens per partition over time.
    pub(super) tokens: Arc<BTreeMap<String, Window>>,
    /// Cumulative output records per partition over time: the rate a run whose log reports
    /// none (a library's) works at.
    pub(super) records: Arc<BTreeMap<String, Window>>,
    /// The log lines read when the output tokens were last noted in full.
    pub(super) lines_at_note: u64,
    /// Output and input paths refused now for being no regular file (a FIFO, a socket).
    pub(super) refused: std::collections::BTreeSet<String>,
    /// How the output source holds and watches its files, as of its last pass.
    pub(super) held: OutputFiles,
    /// Per partition, the first output write seen after its latest progress line.
    pub(super) resumed: BTreeMap<String, Seconds>,
    /// Per partition, what its output files held when the driver's latest pass over it began.
    pub(super) passes: BTreeMap<String, PassMark>,
    /// Record ids remembered on the node, against `identity_cap`.
    pub(super) identities_stored: usize,
}

impl Outputs {
    /// Records a file's counts, so that the totals per partition are known to be out of date.
    pub(super) fn set_file(&mut self, path: String, file: OutputFile) {
        Arc::make_mut(&mut self.files).insert(path, file);
        self.generation += 1;
    }

    /// Sums `files` per partition again if they changed since.
    pub(super) fn refresh_totals(&mut self) {
        let key = self.key();
        if self.totals.key != key {
            let by_partition = sum_outputs(&self.files)
                .into_iter()
                .map(|(p, totals)| (p.to_owned(), totals))
                .collect();
            self.totals = OutputTotals { key, by_partition };
        }
    }

    /// What the totals were summed from: the generation, and the number of files. Only the
    /// output source refreshes the totals, and it changes `files` through
    /// [`Outputs::set_file`] alone; a model whose files were set directly (a test's) is never
    /// refreshed, and its views sum the files each time.
    fn key(&self) -> (u64, usize) {
        (self.generation, self.files.len())
    }

    /// The output files summed per partition: the totals where they are up to date.
    fn summed(&self) -> BTreeMap<&str, (OutputStats, Option<Seconds>)> {
        if self.totals.key == self.key() {
            let totals = self.totals.by_partition.iter();
            totals
                .map(|(p, (s, l))| (p.as_str(), (s.clone(), *l)))
                .collect()
        } else {
            sum_outputs(&self.files)
        }
    }

    /// The input files' planned requests summed per partition.
    fn input_lines(&self) -> BTreeMap<&str, u64> {
        let mut inputs: BTreeMap<&str, u64> = BTreeMap::new();
        for file in self.inputs.values() {
            *inputs.entry(&file.partition).or_default() += file.lines;
        }
        inputs
    }

    /// Whether `path` is refused now for being no regular file (a FIFO, a socket).
    pub(super) fn refuse(&mut self, path: String, refused: bool) {
        if refused {
            self.refused.insert(path);
        } else {
            self.refused.remove(&path);
        }
    }

    /// A new run began: nothing of the run before's passes and resumptions is this one's (its
    /// files stay, as an earlier run's).
    pub(super) fn new_run(&mut self) {
        self.passes.clear();
        self.resumed.clear();
    }

    /// Time moves on in the token and record windows, with the totals last noted.
    fn repeat_windows(&mut self, now: Seconds) {
        for window in Arc::make_mut(&mut self.tokens).values_mut() {
            window.repeat(now);
        }
        for window in Arc::make_mut(&mut self.records).values_mut() {
            window.repeat(now);
        }
    }

    /// Sums the files' tokens and records per partition: what the windows note.
    fn sum_windows(&self) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
        let mut totals: BTreeMap<String, u64> = BTreeMap::new();
        let mut records: BTreeMap<String, u64> = BTreeMap::new();
        for file in self.files.values() {
            let total = totals.entry(file.partition.clone()).or_default();
            *total = total.saturating_add(file.stats.tokens);
            let count = records.entry(file.partition.clone()).or_default();
            *count = count.saturating_add(file.stats.records);
        }
        (totals, records)
    }

    /// Notes `counts` in `windows` at `now`; a partition with no files left has no window.
    fn push_windows(
        windows: &mut Arc<BTreeMap<String, Window>>,
        counts: BTreeMap<String, u64>,
        now: Seconds,
    ) {
        Arc::make_mut(windows).retain(|p, _| counts.contains_key(p));
        for (partition, count) in counts {
            let window = Arc::make_mut(windows).entry(partition).or_default();
            window.push(now, count as f64);
        }
    }
}

/// How the output source holds and watches its files (`docs/formats.md`, many files).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputFiles {
    /// Output and input files followed.
    pub followed: usize,
    /// Of them, those holding a descriptor now.
    pub open: usize,
    /// Folders whose changes inotify reports, and folders polled instead.
    pub watched_folders: usize,
    pub polled_folders: usize,
}

/// The output files summed per partition (their stats and latest write), and what they were
/// summed from.
#[derive(Debug, Clone, Default)]
pub struct OutputTotals {
    key: (u64, usize),
    by_partition: BTreeMap<String, (OutputStats, Option<Seconds>)>,
}

/// The output files summed per partition.
fn sum_outputs(
    files: &BTreeMap<String, OutputFile>,
) -> BTreeMap<&str, (OutputStats, Option<Seconds>)> {
    let mut outputs: BTreeMap<&str, (OutputStats, Option<Seconds>)> = BTreeMap::new();
    for file in files.values() {
        let (stats, last) = outputs.entry(&file.partition).or_default();
        stats.merge(&file.stats);
        *last = match (*last, file.last_write) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    outputs
}

/// One output file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OutputFile {
    pub partition: String,
    pub stats: OutputStats,
    /// The file's modification time.
    pub last_write: Option<Seconds>,
}

/// One input file whose lines are the planned requests.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InputFile {
    pub partition: String,
    pub lines: u64,
}

/// What a partition's output files held when the driver's latest pass over it began (its
/// latest restart, or when the sidecar first saw it), so that records an earlier pass wrote
/// are not taken for a mismatch and duplicates are notified once per pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassMark {
    /// The log's restarts of the partition when the pass began.
    pub restarts: u64,
    pub records: u64,
    pub duplicates: u64,
}

/// Everything known about one partition, from the log, the outputs and the inputs.
#[derive(Debug, Clone)]
pub struct PartitionView<'a> {
    pub name: &'a str,
    pub log: Option<&'a Partition>,
    pub outputs: Option<OutputStats>,
    pub last_write: Option<Seconds>,
    pub input_lines: Option<u64>,
    /// Output files left from an earlier run: see [`Run::views`]. Shown apart, and left out of
    /// the run's totals and alerts.
    pub previous: bool,
    output_tokens: Option<&'a Window>,
    output_records: Option<&'a Window>,
    pub pass: Option<PassMark>,
    /// The records the partition stops at, where the configuration gives a budget.
    pub budget: Option<u64>,
}

impl PartitionView<'_> {
    /// Planned requests: as the log announced them, else counted from the input files.
    pub fn planned(&self) -> Option<u64> {
        self.log.and_then(|p| p.planned).or(self.input_lines)
    }

    /// Completed requests: as the log reported them, else the records written. A partition
    /// the log only announced or planned (`alpha: 300 prompts`) has reported nothing: its
    /// records are the count, not the log's 0.
    pub fn completed(&self) -> Option<u64> {
        let reported = self.log.filter(|p| p.last_progress_at.is_some());
        reported
            .map(|p| p.completed)
            .or(self.outputs.as_ref().map(|o| o.records))
            .or(self.log.map(|p| p.completed))
    }

    /// Requests per second: as the log reports them, else the rate records reach the disk
    /// (a library's run reports none); 0 once the partition is finished.
    pub fn requests_per_second(&self, now: Seconds) -> Option<f64> {
        if self.finished() {
            return Some(0.0);
        }
        self.log
            .and_then(|p| p.requests_per_second)
            .or_else(|| self.records_per_second(now))
    }

    /// The rate records reach the disk over the recent window, where the log reports no rate
    /// of its own.
    pub fn records_per_second(&self, now: Seconds) -> Option<f64> {
        if self
            .log
            .is_some_and(|p| p.requests_per_second.is_some() || p.rate(now).is_some())
        {
            return None;
        }
        self.output_records
            .and_then(|w| w.rate(now))
            .map(|r| r.max(0.0))
    }

    /// Distinct records written: records less the duplicates of an earlier one's id.
    pub fn distinct(&self) -> Option<u64> {
        self.outputs.as_ref().map(OutputStats::distinct)
    }

    /// The progress the run's totals, ETA and `RunFinished` count: the distinct records when
    /// the outputs are followed (a re-run's repeats are no progress), else the log's count.
    pub fn done(&self) -> Option<u64> {
        self.distinct().or_else(|| self.completed())
    }

    /// Records written before the driver's current pass began, where a resume says so: the
    /// records the files held at a restart seen, or the plan the inputs make beyond what a
    /// resumed driver announced for itself.
    pub fn earlier_pass(&self) -> Option<u64> {
        let at_restart = self
            .pass
            .filter(|m| m.restarts > 0 && m.records > 0)
            .map(|m| m.records);
        let announced_less = match (self.log.and_then(|p| p.planned), self.input_lines) {
            (Some(announced), Some(inputs)) if announced < inputs => Some(inputs - announced),
            _ => None,
        };
        at_restart.max(announced_less)
    }

    /// Duplicates written since the current pass began.
    pub fn pass_duplicates(&self) -> u64 {
        let duplicates = self.outputs.as_ref().map_or(0, |o| o.duplicates);
        duplicates.saturating_sub(self.pass.map_or(0, |m| m.duplicates))
    }

    /// Completion tokens per second: from the records' token counts when they have any, else
    /// from the log's averages.
    pub fn completion_tokens_per_second(&self, now: Seconds) -> Option<f64> {
        // What is generated now: a finished partition generates nothing, whatever its
        // trailing window says.
        if self.finished() {
            return Some(0.0);
        }
        let from_outputs = self
            .output_tokens
            .filter(|_| self.outputs.as_ref().is_some_and(|o| o.tokens > 0))
            .and_then(|w| w.rate(now));
        from_outputs
            .map(|r| r.max(0.0))
            .or_else(|| self.log.and_then(|p| p.completion_tokens_per_second(now)))
    }

    /// Done: it reached its plan (or budget) and stopped there. A partition the driver left
    /// short of it is not (an outer tqdm bar waits on its inner one), and neither is one
    /// counting past it (a bar whose total was wrong is still going).
    pub fn finished(&self) -> bool {
        self.reached_plan() && self.done() <= self.target()
    }

    /// What the partition's progress aims at: its plan, or its budget (`[[partitions]]`)
    /// where that comes first.
    pub fn target(&self) -> Option<u64> {
        match (self.planned(), self.budget) {
            (Some(p), Some(b)) => Some(p.min(b)),
            (p, b) => p.or(b),
        }
    }

    /// Whether the progress reached a known, non-zero plan (or budget).
    pub fn reached_plan(&self) -> bool {
        matches!((self.done(), self.target()), (Some(c), Some(p)) if p > 0 && c >= p)
    }

    /// The log's completed count minus what the outputs say it should be, when both are
    /// known: the distinct records (a first pass, or a re-run seen whole), the records written
    /// since the current pass began (a driver that started over, re-doing prompts or
    /// skipping finished ones), or the distinct records less those an earlier pass wrote (a
    /// resumed driver that announced only what was left). The reading closest to the log is
    /// the one that explains it.
    pub fn log_output_gap(&self) -> Option<i64> {
        let (log, outputs) = (self.log?, self.outputs.as_ref()?);
        let logged = log.completed as i64;
        let mut gaps = vec![logged - outputs.distinct() as i64];
        if let Some(mark) = self.pass.filter(|m| m.restarts > 0) {
            gaps.push(logged - outputs.records.saturating_sub(mark.records) as i64);
        }
        if let Some(earlier) = self.earlier_pass() {
            gaps.push(logged - outputs.distinct().saturating_sub(earlier) as i64);
        }
        gaps.into_iter().min_by_key(|g| g.unsigned_abs())
    }

    /// Whether log and outputs disagree by more than max(50, 2% of planned): the flag the
    /// `LogOutputMismatch` rule watches.
    pub fn log_output_mismatch(&self) -> bool {
        self.log_output_mismatch_over(MISMATCH_MIN_GAP, 0.02)
    }

    /// Whether the gap exceeds max(`min_gap`, `ratio` × planned).
    pub fn log_output_mismatch_over(&self, min_gap: f64, ratio: f64) -> bool {
        let Some(gap) = self.log_output_gap() else {
            return false;
        };
        let allowed = (self.planned().unwrap_or(0) as f64 * ratio).max(min_gap);
        gap.unsigned_abs() as f64 > allowed
    }
}

impl Run {
    /// Every partition that any source knows, in name order.
    ///
    /// A partition whose output files the progress log never announced is *previous*, left by
    /// an earlier run, when either
    /// - the inputs do not plan it either, while the run's names and the folders' agree (some
    ///   partition the log announced or the inputs planned has output files): the trap of
    ///   counting another run's `raw_responses.jsonl` into this run's total; or
    /// - its files were last written before the run began (the first line of the progress
    ///   log, by the log file's birth time), with a minute's margin for clock granularity.
    ///
    /// With no log and no inputs, nothing can be told apart and nothing is previous.
    pub fn views(&self) -> Vec<PartitionView<'_>> {
        let mut outputs = self.outputs.summed();
        let inputs = self.outputs.input_lines();
        let mut names: Vec<&str> = self.partitions.keys().map(String::as_str).collect();
        names.extend(outputs.keys().copied());
        names.extend(inputs.keys().copied());
        names.sort_unstable();
        names.dedup();
        let known = |name: &str| {
            (self.partitions.contains_key(name) && name != DEFAULT_PARTITION)
                || inputs.contains_key(name)
        };
        let names_agree = outputs.keys().any(|name| known(name));
        let began = self.began_at();
        let previous = |name: &str, last_write: Option<Seconds>| {
            let unknown = !known(name) && names_agree;
            let before_run =
                matches!((last_write, began), (Some(w), Some(b)) if w < b - PREVIOUS_MARGIN);
            !self.partitions.contains_key(name)
                && ((unknown && !inputs.contains_key(name)) || before_run)
        };
        names
            .into_iter()
            .map(|name| {
                let (stats, last_write) = match outputs.remove(name) {
                    Some((stats, last)) => (Some(stats), last),
                    None => (None, None),
                };
                PartitionView {
                    name,
                    log: self.partitions.get(name),
                    previous: stats.is_some() && previous(name, last_write),
                    outputs: stats,
                    last_write,
                    input_lines: inputs.get(name).copied(),
                    output_tokens: self.outputs.tokens.get(name),
                    output_records: self.outputs.records.get(name),
                    pass: self.outputs.passes.get(name).copied(),
                    budget: self.plan.partition_budgets.get(name).copied(),
                }
            })
            .collect()
    }

    /// Marks, per partition, the first output write after its latest progress line (the
    /// records that follow a stall come before the line that reports them).
    fn note_outputs_resumed(&mut self) {
        let mut resumed = Vec::new();
        for v in self.views() {
            let (Some(p), Some(write)) = (v.log, v.last_write) else {
                continue;
            };
            let Some(log_at) = p.last_progress_at.or(p.started_at) else {
                continue;
            };
            let known = self
                .outputs
                .resumed
                .get(v.name)
                .is_some_and(|r| *r > log_at);
            if write > log_at && !known {
                resumed.push((v.name.to_owned(), write));
            }
        }
        self.outputs.resumed.extend(resumed);
    }

    /// Marks where each partition's current pass began: at first sight nothing is known to
    /// be earlier; at each restart the log shows, what the files hold then, less what the new
    /// pass already reported (the log line and the records it counts arrive in either order).
    fn note_passes(&mut self) {
        let mut marks = Vec::new();
        for v in self.views() {
            let (Some(p), Some(o)) = (v.log, v.outputs.as_ref()) else {
                continue;
            };
            match v.pass {
                None => marks.push((
                    v.name.to_owned(),
                    PassMark {
                        restarts: p.restarts,
                        ..PassMark::default()
                    },
                )),
                Some(mark) if mark.restarts < p.restarts => {
                    // What the pass reported so far was written in it, not before it.
                    let reported = if p.first_progress_at.is_some() {
                        p.completed
                    } else {
                        0
                    };
                    marks.push((
                        v.name.to_owned(),
                        PassMark {
                            restarts: p.restarts,
                            records: o.records.saturating_sub(reported),
                            duplicates: o.duplicates,
                        },
                    ));
                }
                Some(_) => {}
            }
        }
        self.outputs.passes.extend(marks);
    }

    /// Records a file's counts (the output source's one way in), so that the totals per
    /// partition are known to be out of date.
    pub fn set_output_file(&mut self, path: String, file: OutputFile) {
        self.outputs.set_file(path, file);
    }

    /// Sums the output files per partition again if they changed since; [`Run::views`] then
    /// reads the sums instead of every file. Views are right without it, only slower.
    pub fn refresh_output_totals(&mut self) {
        self.outputs.refresh_totals();
    }

    /// The partitions of this run: [`Run::views`] without the previous ones.
    pub fn current_views(&self) -> Vec<PartitionView<'_>> {
        let mut views = self.views();
        views.retain(|v| !v.previous);
        views
    }

    /// When the run began: the earliest first line of its progress logs, where known.
    pub fn began_at(&self) -> Option<Seconds> {
        self.logs
            .iter()
            .filter(|l| !l.server)
            .filter_map(|l| l.began_at)
            .reduce(f64::min)
    }

    /// Records the current token totals per partition, for the output tok/s window.
    ///
    /// `changed` says whether any output file changed since the last call: when none did (and
    /// no log line arrived, which moves what "resumed" compares with), the totals are the
    /// ones last noted, and only time moves on in their windows.
    pub fn note_output_tokens(&mut self, now: Seconds, changed: bool) {
        let lines: u64 = self.logs.iter().map(|l| l.lines).sum();
        if !changed && lines == self.outputs.lines_at_note {
            self.outputs.repeat_windows(now);
            return;
        }
        self.outputs.lines_at_note = lines;
        let (totals, records) = self.outputs.sum_windows();
        Outputs::push_windows(&mut self.outputs.records, records, now);
        self.note_outputs_resumed();
        self.note_passes();
        Outputs::push_windows(&mut self.outputs.tokens, totals, now);
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunTotals {
    pub completed: u64,
    pub planned: u64,
    pub eta_seconds: Option<f64>,
}

impl RunTotals {
    /// Whole-run figures from the views a caller already has: completed, planned, and the
    /// ETA from the current rate (the one the logged ETAs imply until we have measured one).
    pub fn of(views: &[PartitionView<'_>], now: Seconds) -> RunTotals {
        let views: Vec<&PartitionView<'_>> = views.iter().filter(|v| !v.previous).collect();
        let completed = views.iter().filter_map(|v| v.done()).sum();
        let planned = views.iter().filter_map(|v| v.planned()).sum();
        let rate: f64 = views
            .iter()
            .filter_map(|v| v.log.and_then(|p| p.rate(now)))
            .sum();
        let remaining = views
            .iter()
            .filter_map(|v| Some(v.target()?.saturating_sub(v.done().unwrap_or(0))))
            .sum::<u64>();
        RunTotals {
            completed,
            planned,
            eta_seconds: if remaining == 0 {
                (planned > 0).then_some(0.0)
            } else {
                (rate > 0.0).then(|| remaining as f64 / rate)
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{Parser, RunInference};

    fn facts(tokens: u64, reason: &str) -> Facts {
        Facts {
            tokens: Some(tokens),
            finish_reason: Some(reason.to_owned()),
            ..Facts::default()
        }
    }

    #[test]
    fn counted_records_are_records_without_flags() {
        let mut one_by_one = OutputStats::default();
        let mut counted = OutputStats::default();
        let error = Facts {
            error: true,
            ..Facts::default()
        };
        for n in [3, 150, 0, 1, 900, 7] {
            for _ in 0..5 {
                one_by_one.add(&error, 9);
                counted.add(&error, 9);
            }
            for _ in 0..n {
                one_by_one.add(&Facts::default(), 99);
            }
            counted.add_plain(n, n * 100);
            assert_eq!(one_by_one, counted);
        }
    }

    fn run_with(log_lines: &[&str], records: u64, planned_inputs: Option<u64>) -> Run {
        let mut run = Run::new(&["log".into()]);
        let mut parser = Parser::RunInference(RunInference);
        for line in log_lines {
            run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), 0.0);
        }
        let mut stats = OutputStats::default();
        for _ in 0..records {
            stats.add(&facts(10, "stop"), 100);
        }
        run.outputs_mut().insert(
            "/p/A/raw.jsonl".into(),
            OutputFile {
                partition: "A".into(),
                stats,
                last_write: Some(5.0),
            },
        );
        if let Some(lines) = planned_inputs {
            run.inputs_mut().insert(
                "/p/A/prompts.jsonl".into(),
                InputFile {
                    partition: "A".into(),
                    lines,
                },
            );
        }
        run
    }

    /// A library's script announces its plan (`A: 60 prompts`) and never a count: the records
    /// written are the partition's completed, not the announced partition's 0.
    #[test]
    fn a_partition_only_planned_by_the_log_counts_its_records() {
        let run = run_with(&["A: 60 prompts"], 12, None);
        let views = run.views();
        let a = views.iter().find(|v| v.name == "A").unwrap();
        assert_eq!((a.completed(), a.planned()), (Some(12), Some(60)));
        let run = run_with(&["Processing: A", "  5/60 (0 err) 1.0 req/s"], 12, None);
        let views = run.views();
        let a = views.iter().find(|v| v.name == "A").unwrap();
        assert_eq!(
            a.completed(),
            Some(5),
            "a count the log reported is the log's"
        );
    }

    /// A run whose log reports no rate (a library's) works at the rate its records reach the
    /// disk, and its ETA follows from that where a plan is known.
    #[test]
    fn without_a_logged_rate_the_records_written_are_the_rate() {
        let mut run = run_with(&["A: 100 prompts"], 0, None);
        run.note_output_tokens(0.0, true);
        write(&mut run, 20, 0, 10.0);
        run.note_output_tokens(10.0, true);
        let views = run.views();
        let a = views.iter().find(|v| v.name == "A").unwrap();
        assert_eq!(a.requests_per_second(10.0), Some(2.0));
        let p = run.projection(10.0);
        assert_eq!(p.eta_seconds, Some(40.0));
        // No plan (distilabel keeps none): a rate, and no ETA rather than 0.
        let mut run = run_with(&[], 0, None);
        run.note_output_tokens(0.0, true);
        write(&mut run, 20, 0, 10.0);
        run.note_output_tokens(10.0, true);
        assert_eq!(run.projection(10.0).eta_seconds, None);
        // A rate the log reports is the log's.
        let run = run_with(&["Processing: A", "  5/100 (0 err) 3.0 req/s"], 0, None);
        let views = run.views();
        let a = views.iter().find(|v| v.name == "A").unwrap();
        assert_eq!(a.records_per_second(10.0), None);
        assert_eq!(a.requests_per_second(10.0), Some(3.0));
    }

    /// Partition A's file now holds `records`, of which `duplicates` repeat an earlier id.
    fn write(run: &mut Run, records: u64, duplicates: u64, now: Seconds) {
        let mut stats = OutputStats::default();
        for _ in 0..records {
            stats.add(&facts(10, "stop"), 100);
        }
        for _ in 0..duplicates {
            stats.add_duplicate(|| Some("A-1".into()));
        }
        run.outputs_mut().get_mut("/p/A/raw.jsonl").unwrap().stats = stats;
        run.note_output_tokens(now, true);
    }

    fn log(run: &mut Run, line: &str) {
        let mut parser = Parser::RunInference(RunInference);
        run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), 1.0);
    }

    #[test]
    fn a_restart_that_redoes_prompts_counts_them_once() {
        let mut run = run_with(
            &[
                "Processing: A",
                "A: 800 prompts",
                "  240/800 (0 err) 1.0 req/s",
            ],
            240,
            Some(800),
        );
        write(&mut run, 240, 0, 1.0);
        // The driver starts over and writes the first 240 prompts again, then the rest.
        log(&mut run, "Processing: A");
        log(&mut run, "A: 800 prompts");
        write(&mut run, 240, 0, 2.0);
        log(&mut run, "  100/800 (0 err) 1.0 req/s");
        write(&mut run, 340, 100, 3.0);
        let v = &run.views()[0];
        assert_eq!(
            v.log_output_gap(),
            Some(0),
            "100 written in this pass, as the log says"
        );
        assert_eq!((v.distinct(), v.pass_duplicates()), (Some(240), 100));
        log(&mut run, "  800/800 (0 err) 1.0 req/s");
        write(&mut run, 1040, 240, 4.0);
        let v = &run.views()[0];
        assert_eq!(v.distinct(), Some(800));
        assert_eq!(v.log_output_gap(), Some(0));
        assert!(!v.log_output_mismatch() && v.reached_plan());
        assert_eq!(
            RunTotals::of(&run.views(), 4.0).completed,
            800,
            "distinct, not 1040"
        );
        // The next pass begins with no duplicates of its own.
        log(&mut run, "Processing: A");
        write(&mut run, 1040, 240, 5.0);
        assert_eq!(run.views()[0].pass_duplicates(), 0);
    }

    #[test]
    fn a_resumed_driver_is_no_mismatch() {
        // Announced only what was left: the inputs plan 800, the files hold 240 already.
        let mut run = run_with(&["Processing: A", "A: 560 prompts"], 240, Some(800));
        write(&mut run, 240, 0, 1.0);
        log(&mut run, "  300/560 (0 err) 1.0 req/s");
        write(&mut run, 540, 0, 2.0);
        let v = &run.views()[0];
        assert_eq!(v.earlier_pass(), Some(240));
        assert_eq!(v.log_output_gap(), Some(0));
        assert!(!v.log_output_mismatch());
        // Started over at a lower count, skipping what was done: the records since.
        let mut run = run_with(
            &["Processing: A", "  400/1000 (0 err) 1.0 req/s"],
            400,
            None,
        );
        write(&mut run, 400, 0, 1.0);
        log(&mut run, "  10/600 (0 err) 1.0 req/s");
        write(&mut run, 410, 0, 2.0);
        log(&mut run, "  300/600 (0 err) 1.0 req/s");
        write(&mut run, 700, 0, 3.0);
        let v = &run.views()[0];
        assert_eq!(v.log_output_gap(), Some(0), "{:?}", v.pass);
        assert!(!v.log_output_mismatch());
        // A real gap is still one: the log far ahead of anything the files say.
        log(&mut run, "  590/600 (0 err) 1.0 req/s");
        assert!(run.views()[0].log_output_mismatch());
    }

    #[test]
    fn views_join_log_outputs_and_inputs() {
        let run = run_with(
            &["Processing: A", "  120/1000 (0 err) 1.0 req/s"],
            100,
            Some(900),
        );
        let views = run.views();
        assert_eq!(views.len(), 1);
        let a = &views[0];
        assert_eq!(a.completed(), Some(120));
        assert_eq!(
            a.planned(),
            Some(1000),
            "the log's planned count wins over the inputs'"
        );
        assert_eq!(a.log_output_gap(), Some(20));
        assert_eq!(a.outputs.as_ref().unwrap().bytes, 100 * 101);
        assert_eq!(a.last_write, Some(5.0));
    }

    #[test]
    fn outputs_only_partition_uses_records_and_inputs() {
        let run = run_with(&[], 30, Some(60));
        let a = &run.views()[0];
        assert_eq!(a.completed(), Some(30));
        assert_eq!(a.planned(), Some(60));
        assert_eq!(a.log_output_gap(), None);
        assert!(!a.log_output_mismatch());
        let totals = RunTotals::of(&run.views(), 0.0);
        assert_eq!((totals.completed, totals.planned), (30, 60));
    }

    #[test]
    fn mismatch_needs_more_than_50_or_2_percent() {
        let small = run_with(
            &["Processing: A", "  150/1000 (0 err) 1.0 req/s"],
            100,
            None,
        );
        assert!(
            !small.views()[0].log_output_mismatch(),
            "a gap of 50 is allowed"
        );
        let big = run_with(
            &["Processing: A", "  151/1000 (0 err) 1.0 req/s"],
            100,
            None,
        );
        assert!(big.views()[0].log_output_mismatch());
        let large_run = run_with(
            &["Processing: A", "  5100/100000 (0 err) 1.0 req/s"],
            3100,
            None,
        );
        assert!(
            !large_run.views()[0].log_output_mismatch(),
            "2% of 100000 is 2000"
        );
        let behind = run_with(&["Processing: A", "  10/1000 (0 err) 1.0 req/s"], 100, None);
        assert!(
            behind.views()[0].log_output_mismatch(),
            "outputs ahead of the log also disagree"
        );
    }

    #[test]
    fn output_tokens_per_second_prefer_the_records() {
        let mut run = run_with(
            &["Processing: A", "  10/1000 (0 err) 1.0 req/s avg_comp=5tok"],
            0,
            None,
        );
        run.note_output_tokens(100.0, true);
        let file = run.outputs_mut().get_mut("/p/A/raw.jsonl").unwrap();
        for _ in 0..50 {
            file.stats.add(&facts(20, "stop"), 10);
        }
        run.note_output_tokens(110.0, true);
        assert_eq!(
            run.views()[0].completion_tokens_per_second(110.0),
            Some(100.0)
        );
    }

    #[test]
    fn run_eta_from_the_measured_rates() {
        let mut run = Run::new(&["log".into()]);
        let mut parser = Parser::RunInference(RunInference);
        for (at, line) in [
            (0.0, "Processing: A"),
            (0.0, "  100/1000 (0 err) 1.0 req/s"),
            (100.0, "  300/1000 (0 err) 1.0 req/s"),
        ] {
            run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), at);
        }
        let totals = RunTotals::of(&run.views(), 100.0);
        assert_eq!(totals.eta_seconds, Some(350.0));
    }

    #[test]
    fn run_eta_from_the_logged_eta_before_a_measurement() {
        let mut run = Run::new(&["log".into()]);
        let mut parser = Parser::RunInference(RunInference);
        for line in ["Processing: A", "  100/1000 (0 err) 2.0 req/s ETA=7.5m"] {
            run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), 0.0);
        }
        let eta = |now| RunTotals::of(&run.views(), now).eta_seconds;
        assert_eq!(eta(0.5), Some(449.5), "counted down like the partition's");
        // Stalled past the logged ETA: the run's ETA is unknown, as the partition's is, and
        // the logged 2.0 req/s does not make it look on course.
        assert_eq!(eta(600.0), None);
    }

    #[test]
    fn finish_reasons_are_bounded() {
        let mut stats = OutputStats::default();
        for i in 0..100 {
            stats.add(&facts(1, &format!("reason{i}")), 1);
        }
        assert_eq!(stats.finish_reasons.len(), MAX_REASONS + 1);
        assert_eq!(stats.finish_reasons["other"], 100 - MAX_REASONS as u64);
    }
}
