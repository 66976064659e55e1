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
/// How often the globs are evaluated again.
const GLOB_EVERY: Duration = Duration::from_secs(2);
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
        if self.last_glob.is_none_or(|t| t.elapsed() >= GLOB_EVERY) {
            self.discover();
            self.last_glob = Some(Instant::now());
        }
        let mut all_up = true;
        let now = clock::now();
        for (path, file) in &mut self.files {
            all_up &= file.poll(path, &self.inspectors, &self.run);
        }
        let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
        run.note_output_tokens(now);
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
    /// Reads the file to its end in batches; returns whether it is readable.
    fn poll(&mut self, path: &Path, inspectors: &[Option<Inspector>], run: &Mutex<Run>) -> bool {
        let inspect = match self.kind {
            Kind::Output(i) => inspectors[i].as_ref(),
            Kind::Input => None,
        };
        loop {
            let stats = &mut self.stats;
            let result = self.follower.poll(BATCH_BYTES, |tailed| match tailed {
                Tailed::Line(line) => match inspect {
                    Some(inspector) => stats.add(&inspector.inspect(line), line.len()),
                    None => stats.add(&record::Facts::default(), line.len()),
                },
                Tailed::Counted { lines, bytes } => stats.add_plain(lines, bytes),
                Tailed::Oversized => stats.add_oversized(),
                Tailed::Reset => *stats = OutputStats::default(),
            });
            let polled = match result {
                Ok(polled) => polled,
                Err(e) => {
                    self.report(e.to_string());
                    return false;
                }
            };
            self.publish(path, run);
            if !polled.more {
                if self.problem.take().is_some() {
                    tracing::info!("reading {} again", path.display());
                }
                return true;
            }
        }
    }

    fn publish(&self, path: &Path, run: &Mutex<Run>) {
        let key = path.display().to_string();
        let last_write = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .map(clock::unix_seconds);
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

/// The files a glob matches now; unreadable directories are skipped.
fn expand(glob: &str) -> Vec<PathBuf> {
    match glob::glob(glob) {
        Ok(paths) => paths
            .filter_map(Result::ok)
            .filter(|p| p.is_file())
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
