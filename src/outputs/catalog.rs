//! Which files the output source follows: the globs, what they matched, and the saved
//! positions waiting for their files. Nothing here touches the file system: the globs are
//! expanded (and the found files identified) by a reader outside this lock, so a hung mount
//! holds no lock that another reader, a snapshot or the model needs.

use super::file::{Followed, Kind, SavedFile};
use super::identity::Identities;
use super::record::Inspector;
use crate::config::OutputConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the globs are evaluated again, and how often once no file has changed and none
/// has appeared for `QUIET_AFTER`: a run between partitions, or finished.
const GLOB_EVERY: Duration = Duration::from_secs(2);
const GLOB_EVERY_QUIET: Duration = Duration::from_secs(10);
const QUIET_AFTER: Duration = Duration::from_secs(60);

/// A file a glob matched, with its device and inode when it could be read.
pub(super) struct Found {
    pub(super) path: PathBuf,
    pub(super) kind: Kind,
    pub(super) id: Option<(u64, u64)>,
}

/// A followed file, with what it was found as: its kind, and its device and inode to tell a
/// second spelling of it (neither needs the file's lock, which a stuck reader may hold).
pub(super) struct Entry {
    pub(super) file: Arc<Mutex<Followed>>,
    kind: Kind,
    id: Option<(u64, u64)>,
}

pub(super) struct Catalog {
    outputs: Vec<OutputConfig>,
    /// Per `[[outputs]]` entry, its pointers compiled once; `None` where `inspect = false`.
    inspectors: Vec<Option<Arc<Inspector>>>,
    inputs: Vec<String>,
    max_record_bytes: usize,
    /// Every inspected output's ids, by partition; locked per record, never across I/O.
    ids: Arc<Mutex<Identities>>,
    pub(super) files: BTreeMap<PathBuf, Entry>,
    last_glob: Option<Instant>,
    /// When a file last changed or appeared.
    pub(super) last_change: Instant,
    /// Saved positions not yet matched to a file the globs found.
    saved: BTreeMap<String, SavedFile>,
    /// Files a second glob matched, already said once.
    overlaps: BTreeSet<(PathBuf, Kind)>,
    /// Output and input globs that discovery finds while the sidecar runs.
    additions: Option<(mpsc::Receiver<OutputConfig>, mpsc::Receiver<String>)>,
}

impl Catalog {
    pub(super) fn new(
        outputs: &[OutputConfig],
        inputs: &[String],
        max_record_bytes: usize,
        identity_cap: usize,
        saved: BTreeMap<String, SavedFile>,
    ) -> Catalog {
        Catalog {
            outputs: outputs.to_vec(),
            inspectors: outputs.iter().map(inspector).collect(),
            inputs: inputs.to_vec(),
            max_record_bytes,
            ids: Arc::new(Mutex::new(Identities::new(identity_cap))),
            files: BTreeMap::new(),
            last_glob: None,
            last_change: Instant::now(),
            saved,
            overlaps: BTreeSet::new(),
            additions: None,
        }
    }

    pub(super) fn set_additions(
        &mut self,
        outputs: mpsc::Receiver<OutputConfig>,
        inputs: mpsc::Receiver<String>,
    ) {
        self.additions = Some((outputs, inputs));
    }

    pub(super) fn is_empty(&self) -> bool {
        self.outputs.is_empty() && self.inputs.is_empty()
    }

    /// Takes the globs discovery found since; true when there were any.
    pub(super) fn take_additions(&mut self) -> bool {
        let Some((outputs, inputs)) = &self.additions else {
            return false;
        };
        let mut added = false;
        while let Ok(output) = outputs.try_recv() {
            tracing::info!(glob = %output.glob, "following the discovered outputs {}", output.glob);
            self.inspectors.push(inspector(&output));
            self.outputs.push(output);
            added = true;
        }
        while let Ok(glob) = inputs.try_recv() {
            tracing::info!(glob = %glob, "following the discovered inputs {glob}");
            self.inputs.push(glob);
            added = true;
        }
        if added {
            self.last_glob = None;
        }
        added
    }

    /// The globs to evaluate now, if it is time to.
    pub(super) fn globs_due(&self) -> Option<Vec<(String, Kind)>> {
        let every = if self.last_change.elapsed() >= QUIET_AFTER {
            GLOB_EVERY_QUIET
        } else {
            GLOB_EVERY
        };
        if self.last_glob.is_some_and(|t| t.elapsed() < every) {
            return None;
        }
        let outputs = self
            .outputs
            .iter()
            .enumerate()
            .map(|(i, o)| (o.glob.clone(), Kind::Output(i)));
        let inputs = self.inputs.iter().map(|g| (g.clone(), Kind::Input));
        Some(outputs.chain(inputs).collect())
    }

    /// Takes what the globs matched: files seen for the first time are followed from their
    /// start, or from a saved position. Returns whether any was new.
    pub(super) fn add(&mut self, found: Vec<Found>) -> bool {
        self.last_glob = Some(Instant::now());
        let known = self.files.len();
        for Found { path, kind, id } in found {
            // Said once already: no need to look at the file again every evaluation.
            if self.overlaps.contains(&(path.clone(), kind)) {
                continue;
            }
            let first = match self.files.get(&path) {
                Some(entry) if entry.kind == kind => continue,
                Some(entry) => Some(entry.kind.key()),
                None => self.same_file_as(id),
            };
            if let Some(first) = first {
                if self.overlaps.insert((path.clone(), kind)) {
                    tracing::info!(
                        path = %path.display(),
                        "{} is also matched by {}; it is followed once, as {first}",
                        path.display(),
                        kind.key()
                    );
                }
                continue;
            }
            let (partition, inspector) = match kind {
                Kind::Output(i) => (
                    self.outputs[i].partition.clone(),
                    self.inspectors[i].clone(),
                ),
                Kind::Input => (None, None),
            };
            let partition = partition.unwrap_or_else(|| super::partition_of(&path));
            let key = path.display().to_string();
            let resume = self.saved.remove(&key).filter(|s| s.kind == kind);
            tracing::info!(
                path = %key,
                partition = %partition,
                "following {} {key} (partition {partition})",
                kind.noun()
            );
            let file = Followed::new(
                &path,
                kind,
                partition,
                inspector,
                Some(&self.ids),
                self.max_record_bytes,
                resume,
            );
            let file = Arc::new(Mutex::new(file));
            self.files.insert(path, Entry { file, kind, id });
        }
        let added = self.files.len() != known;
        if added {
            self.last_change = Instant::now();
        }
        added
    }

    /// The entry that follows this file already under another spelling or through a symlink.
    fn same_file_as(&self, id: Option<(u64, u64)>) -> Option<String> {
        let id = id?;
        self.files
            .iter()
            .find(|(_, entry)| entry.id == Some(id))
            .map(|(p, entry)| format!("{} ({})", entry.kind.key(), p.display()))
    }

    /// The followed files, to be read one by one without this lock.
    pub(super) fn entries(&self) -> Vec<(PathBuf, Arc<Mutex<Followed>>)> {
        self.files
            .iter()
            .map(|(path, entry)| (path.clone(), entry.file.clone()))
            .collect()
    }
}

fn inspector(output: &OutputConfig) -> Option<Arc<Inspector>> {
    output
        .inspect
        .then(|| Arc::new(Inspector::with_required(&output.pointers, &output.required)))
}

/// What the globs match now but folders, each with its identity; unreadable directories are
/// skipped. A FIFO or socket is matched too, to be refused by its follower with a message
/// (never opened). `at` is told each glob before it is evaluated: a glob over a hung mount
/// does not return, and must be named.
pub(super) fn expand(globs: &[(String, Kind)], at: &mut dyn FnMut(&str)) -> Vec<Found> {
    let mut found = Vec::new();
    for (glob, kind) in globs {
        at(glob);
        let Ok(paths) = glob::glob(glob) else {
            continue; // validated in config; unreachable in practice
        };
        for path in paths.filter_map(Result::ok) {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                continue;
            }
            found.push(Found {
                path,
                kind: *kind,
                id: Some((meta.dev(), meta.ino())),
            });
        }
    }
    found
}
