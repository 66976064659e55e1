//! The output source: the pipeline's JSONL files (and its input files), counted and inspected.
//!
//! Each file is followed by the same [`Follower`] as the logs, set to end lines at `\n` only,
//! so a record is a complete line and work grows with new bytes only. The globs are evaluated
//! again every few seconds, so partitions that appear later are picked up. Per-file counts
//! live here and are copied into the model after each batch; a truncated or replaced file is
//! counted again from its start, never on top of what it held before.

mod lookup;
pub mod record;
mod scan;

use crate::clock;
use crate::config::{identity, OutputConfig};
use crate::model::{InputFile, OutputFile, OutputStats, Run, DEFAULT_PARTITION};
use crate::state::StateDir;
use crate::tail::{Follower, Position, TailStats, Tailed};
use record::Inspector;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes read from one file per model update.
const BATCH_BYTES: u64 = 8 * 1024 * 1024;
/// How often the globs are evaluated again, and how often once no file has changed and none
/// has appeared for `QUIET_AFTER`: a run between partitions, or finished.
const GLOB_EVERY: Duration = Duration::from_secs(2);
const GLOB_EVERY_QUIET: Duration = Duration::from_secs(10);
const QUIET_AFTER: Duration = Duration::from_secs(60);
/// A file unchanged for this many polls in a row (30 s at the default 250 ms) is looked at
/// only every `QUIET_EVERY` polls (1 s) until it changes again.
const QUIET_POLLS: u32 = 120;
const QUIET_EVERY: u32 = 4;
const SNAPSHOT: &str = "outputs.json";

pub struct OutputSource {
    outputs: Vec<OutputConfig>,
    /// Per `[[outputs]]` entry, its pointers compiled once; `None` where `inspect = false`.
    inspectors: Vec<Option<Inspector>>,
    inputs: Vec<String>,
    max_record_bytes: usize,
    files: BTreeMap<PathBuf, Followed>,
    run: Arc<Mutex<Run>>,
    state: Option<StateDir>,
    last_glob: Option<Instant>,
    /// When a file last changed or appeared.
    last_change: Instant,
    /// Saved positions not yet matched to a file the globs found.
    saved: BTreeMap<String, SavedFile>,
    /// Files a second glob matched, already said once.
    overlaps: BTreeSet<(PathBuf, Kind)>,
    /// Output and input globs that discovery finds while the sidecar runs.
    additions: Option<(mpsc::Receiver<OutputConfig>, mpsc::Receiver<String>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
enum Kind {
    /// An output file; the index of its `[[outputs]]` entry.
    Output(usize),
    /// An input file: its lines are planned requests.
    Input,
}

struct Followed {
    follower: Follower,
    kind: Kind,
    partition: String,
    stats: OutputStats,
    /// The last problem reported for this file, so a lasting one is logged once.
    problem: Option<String>,
    /// The modification time last copied into the model (`Some(None)` when it had none).
    published: Option<Option<std::time::SystemTime>>,
    /// Polls in a row that found nothing new.
    unchanged: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SavedFile {
    kind: Kind,
    partition: String,
    stats: OutputStats,
    tail: TailStats,
    position: Option<Position>,
}

impl OutputSource {
    pub fn new(
        outputs: &[OutputConfig],
        inputs: &[String],
        max_record_bytes: usize,
        run: Arc<Mutex<Run>>,
        state: Option<StateDir>,
    ) -> OutputSource {
        let saved = state
            .as_ref()
            .and_then(|s| s.load_json(SNAPSHOT))
            .unwrap_or_default();
        if !outputs.is_empty() || !inputs.is_empty() {
            let mut run = run.lock().unwrap_or_else(|e| e.into_inner());
            run.expect_collector("outputs");
        }
        OutputSource {
            outputs: outputs.to_vec(),
            inspectors: outputs
                .iter()
                .map(|o| o.inspect.then(|| Inspector::new(&o.pointers)))
                .collect(),
            inputs: inputs.to_vec(),
            max_record_bytes,
            files: BTreeMap::new(),
            run,
            state,
            last_glob: None,
            last_change: Instant::now(),
            saved,
            overlaps: BTreeSet::new(),
            additions: None,
        }
    }

    /// Takes the globs discovery finds later, at each poll.
    pub fn with_additions(
        mut self,
        outputs: mpsc::Receiver<OutputConfig>,
        inputs: mpsc::Receiver<String>,
    ) -> OutputSource {
        self.additions = Some((outputs, inputs));
        self
    }

    fn take_additions(&mut self) {
        let Some((outputs, inputs)) = &self.additions else {
            return;
        };
        let mut added = false;
        while let Ok(output) = outputs.try_recv() {
            tracing::info!("following the discovered outputs {}", output.glob);
            self.inspectors
                .push(output.inspect.then(|| Inspector::new(&output.pointers)));
            self.outputs.push(output);
            added = true;
        }
        while let Ok(glob) = inputs.try_recv() {
            tracing::info!("following the discovered inputs {glob}");
            self.inputs.push(glob);
            added = true;
        }
        if added {
            self.last_glob = None;
            let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
            run.expect_collector("outputs");
        }
    }

    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty() && self.inputs.is_empty()
    }

    /// Finds new files, then reads every file to its current end once.
    pub fn poll(&mut self) {
        self.take_additions();
        if self.is_empty() {
            return;
        }
        let started = Instant::now();
        let glob_every = if self.last_change.elapsed() >= QUIET_AFTER {
            GLOB_EVERY_QUIET
        } else {
            GLOB_EVERY
        };
        let mut changed = false;
        if self.last_glob.is_none_or(|t| t.elapsed() >= glob_every) {
            let known = self.files.len();
            self.discover();
            changed |= self.files.len() != known;
            self.last_glob = Some(Instant::now());
        }
        let mut all_up = true;
        let now = clock::now();
        for (path, file) in &mut self.files {
            // Said before the read, so that a read that never returns is seen from outside.
            let reading = file.due().then(|| {
                let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
                run.output_reading = Some((path.display().to_string(), clock::now()));
            });
            let (up, touched) = file.poll(path, &self.inspectors, &self.run);
            if reading.is_some() {
                self.run
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .output_reading = None;
            }
            all_up &= up;
            changed |= touched;
        }
        if changed {
            self.last_change = Instant::now();
        }
        let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
        run.note_output_tokens(now, changed);
        run.set_collector("outputs", all_up, started.elapsed().as_secs_f64());
    }

    /// Evaluates the globs; files seen for the first time are followed from their start, or
    /// from a saved position.
    fn discover(&mut self) {
        let mut found: Vec<(PathBuf, Kind)> = Vec::new();
        for (i, output) in self.outputs.iter().enumerate() {
            found.extend(
                expand(&output.glob)
                    .into_iter()
                    .map(|p| (p, Kind::Output(i))),
            );
        }
        for glob in &self.inputs {
            found.extend(expand(glob).into_iter().map(|p| (p, Kind::Input)));
        }
        for (path, kind) in found {
            // Said once already: no need to look at the file again every evaluation.
            if self.overlaps.contains(&(path.clone(), kind)) {
                continue;
            }
            let first = match self.files.get(&path) {
                Some(f) if f.kind == kind => continue,
                Some(f) => Some(f.kind.key()),
                None => self.same_file_as(&path),
            };
            if let Some(first) = first {
                if self.overlaps.insert((path.clone(), kind)) {
                    tracing::info!(
                        "{} is also matched by {}; it is followed once, as {first}",
                        path.display(),
                        kind.key()
                    );
                }
                continue;
            }
            let partition = match kind {
                Kind::Output(i) => self.outputs[i].partition.clone(),
                Kind::Input => None,
            }
            .unwrap_or_else(|| partition_of(&path));
            let inspected = match kind {
                Kind::Output(i) => self.inspectors[i].is_some(),
                Kind::Input => false,
            };
            let follower = Follower::new(&path, self.max_record_bytes).path_only();
            let mut follower = if inspected {
                follower.newline_only()
            } else {
                follower.count_only()
            };
            let mut stats = OutputStats::default();
            let key = path.display().to_string();
            if let Some(saved) = self.saved.remove(&key).filter(|s| s.kind == kind) {
                follower.set_stats(saved.tail);
                match &saved.position {
                    Some(pos) if follower.resume(Some(pos), &[]).in_place => stats = saved.stats,
                    _ => tracing::info!(
                        "{key} changed while the sidecar was down; counting it again"
                    ),
                }
            }
            tracing::info!("following {} {key} (partition {partition})", kind.noun());
            self.files.insert(
                path,
                Followed {
                    follower,
                    kind,
                    partition,
                    stats,
                    problem: None,
                    published: None,
                    unchanged: 0,
                },
            );
        }
    }

    /// The entry that follows this file already under another spelling or through a symlink.
    fn same_file_as(&self, path: &Path) -> Option<String> {
        let id = identity(path)?;
        self.files
            .iter()
            .find(|(p, _)| identity(p) == Some(id))
            .map(|(p, f)| format!("{} ({})", f.kind.key(), p.display()))
    }

    /// Saves positions and counts to the state directory, if there is one.
    pub fn save_snapshot(&mut self) {
        let Some(state) = &self.state else {
            return;
        };
        let files: BTreeMap<String, SavedFile> = self
            .files
            .iter()
            .map(|(path, f)| {
                (
                    path.display().to_string(),
                    SavedFile {
                        kind: f.kind,
                        partition: f.partition.clone(),
                        stats: f.stats.clone(),
                        tail: f.follower.stats(),
                        position: f.follower.position(),
                    },
                )
            })
            .collect();
        if let Err(e) = state.save_json(SNAPSHOT, &files) {
            tracing::warn!("cannot save {}: {e}", state.path(SNAPSHOT).display());
        }
    }
}

impl crate::source::Source for OutputSource {
    fn poll(&mut self) {
        OutputSource::poll(self);
    }

    fn save_snapshot(&mut self) {
        OutputSource::save_snapshot(self);
    }
}

impl Kind {
    fn key(self) -> String {
        match self {
            Kind::Output(i) => format!("outputs[{i}]"),
            Kind::Input => "inputs".to_owned(),
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Kind::Output(_) => "output file",
            Kind::Input => "input file",
        }
    }
}

impl Followed {
    /// Reads the file to its end in batches; returns whether it is readable, and whether
    /// anything about it changed.
    ///
    /// A file is looked at (one `stat`) every poll, and read only when its size, modification
    /// time or identity changed. One unchanged for `QUIET_POLLS` polls is looked at every
    /// `QUIET_EVERY`th poll until it changes: a byte written to a file that was quiet for 30 s
    /// is seen within `QUIET_EVERY` poll intervals (1 s at the default), any other within one.
    /// Whether this poll looks at the file (a quiet one is skipped three polls in four).
    fn due(&self) -> bool {
        !(self.unchanged >= QUIET_POLLS
            && self.problem.is_none()
            && !(self.unchanged + 1).is_multiple_of(QUIET_EVERY))
    }

    fn poll(
        &mut self,
        path: &Path,
        inspectors: &[Option<Inspector>],
        run: &Mutex<Run>,
    ) -> (bool, bool) {
        if self.unchanged >= QUIET_POLLS && self.problem.is_none() {
            self.unchanged += 1;
            if !self.unchanged.is_multiple_of(QUIET_EVERY) {
                return (true, false);
            }
        }
        let inspect = match self.kind {
            Kind::Output(i) => inspectors[i].as_ref(),
            Kind::Input => None,
        };
        let mut touched = false;
        loop {
            let stats = &mut self.stats;
            let result = self.follower.poll(BATCH_BYTES, |tailed| {
                touched = true;
                match tailed {
                    Tailed::Line(line) => match inspect {
                        Some(inspector) => stats.add(&inspector.inspect(line), line.len()),
                        None => stats.add(&record::Facts::default(), line.len()),
                    },
                    Tailed::Counted { lines, bytes } => stats.add_plain(lines, bytes),
                    Tailed::Oversized => stats.add_oversized(),
                    Tailed::Reset => *stats = OutputStats::default(),
                }
            });
            let polled = match result {
                Ok(polled) => polled,
                Err(e) => {
                    self.report(e.to_string());
                    if self.follower.refusing() {
                        let key = path.display().to_string();
                        run.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .refused_files
                            .insert(key);
                    }
                    return (false, touched);
                }
            };
            let modified = self.follower.modified();
            if touched || self.published != Some(modified) {
                self.publish(path, modified, run);
                touched = true;
            }
            if !polled.more {
                if self.problem.take().is_some() {
                    tracing::info!("reading {} again", path.display());
                    let key = path.display().to_string();
                    run.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .refused_files
                        .remove(&key);
                }
                self.unchanged = if touched {
                    0
                } else {
                    self.unchanged.saturating_add(1)
                };
                return (true, touched);
            }
        }
    }

    fn publish(&mut self, path: &Path, modified: Option<std::time::SystemTime>, run: &Mutex<Run>) {
        self.published = Some(modified);
        let key = path.display().to_string();
        let last_write = modified.map(clock::unix_seconds);
        let mut run = run.lock().unwrap_or_else(|e| e.into_inner());
        match self.kind {
            Kind::Output(_) => {
                run.outputs.insert(
                    key,
                    OutputFile {
                        partition: self.partition.clone(),
                        stats: self.stats.clone(),
                        last_write,
                    },
                );
            }
            Kind::Input => {
                run.inputs.insert(
                    key,
                    InputFile {
                        partition: self.partition.clone(),
                        lines: self.stats.records,
                    },
                );
            }
        }
    }

    fn report(&mut self, message: String) {
        if self.problem.as_deref() != Some(message.as_str()) {
            tracing::warn!("{message}");
            self.problem = Some(message);
        }
    }
}

/// What a glob matches now but folders; unreadable directories are skipped. A FIFO or socket
/// is matched too, to be refused by its follower with a message (never opened).
fn expand(glob: &str) -> Vec<PathBuf> {
    match glob::glob(glob) {
        Ok(paths) => paths
            .filter_map(Result::ok)
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| !m.is_dir()))
            .collect(),
        Err(_) => Vec::new(), // validated in config; unreachable in practice
    }
}

/// The partition a file belongs to: the name of its folder (`prepared/B1_glaive/raw.jsonl`).
pub fn partition_of(path: &Path) -> String {
    path.parent()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty())
        .unwrap_or(DEFAULT_PARTITION)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_is_the_folder_name() {
        assert_eq!(
            partition_of(Path::new("/data/prepared/B1_glaive/raw_responses.jsonl")),
            "B1_glaive"
        );
        assert_eq!(partition_of(Path::new("raw.jsonl")), DEFAULT_PARTITION);
    }
}
