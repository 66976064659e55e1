//! Which files the output source follows: the globs, what they matched, and the saved
//! positions waiting for their files. Nothing here touches the file system: the globs are
//! expanded (and the found files identified) by a reader outside this lock, so a hung mount
//! holds no lock that another reader, a snapshot or the model needs.
//!
//! The globs are evaluated again when a watched folder's listing changed (an entry created,
//! removed or renamed: inotify says so, or a polled folder's modification time moved), when
//! discovery adds one, and on a slow timer for what neither sees; never by walking every name
//! each poll.

use super::file::{Followed, Kind, SavedFile};
use super::identity::Identities;
use super::record::Inspector;
use super::OutputConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The globs are evaluated at most this often, however often the folders change (a writer
/// starting a new shard every second would otherwise have ten thousand names walked as often).
const GLOB_AT_MOST: Duration = Duration::from_secs(2);
/// And at least this often, for a folder nothing watches yet (a partition folder whose first
/// file has not appeared, a base folder created later).
const GLOB_AT_LEAST: Duration = Duration::from_secs(60);

/// Files named one by one in the log per evaluation of the globs; the rest are summed up in
/// one line (a sharded run folder has thousands).
const SAY_FILES: usize = 20;

/// A file a glob matched, with its device and inode when it could be read.
pub(super) struct Found {
    pub(super) path: PathBuf,
    pub(super) kind: Kind,
    pub(super) id: Option<(u64, u64)>,
}

/// A followed file, with what it was found as: its kind, and its device and inode to tell a
/// second spelling of it (neither needs the file's lock, which a stuck reader may hold).
#[derive(Clone)]
pub(super) struct Entry {
    pub(super) slot: Arc<Slot>,
    kind: Kind,
    id: Option<(u64, u64)>,
}

/// One file and what the reader knows of it without taking its lock.
pub(super) struct Slot {
    pub(super) file: Mutex<Followed>,
    /// inotify named it since its last poll.
    pub(super) dirty: AtomicBool,
    /// Its folder is watched by inotify: it is polled only when named, or by the sweep.
    pub(super) watched: AtomicBool,
    /// Looked at every pass: it holds a descriptor (to be closed once quiet) or had a problem.
    pub(super) hot: AtomicBool,
}

/// The followed files by path; shared with the reader for a pass, copied on write.
pub(super) type Files = BTreeMap<PathBuf, Entry>;

pub(super) struct Catalog {
    outputs: Vec<OutputConfig>,
    /// Per `[[outputs]]` entry, its pointers compiled once; `None` where `inspect = false`.
    inspectors: Vec<Option<Arc<Inspector>>>,
    inputs: Vec<String>,
    max_record_bytes: usize,
    /// Every inspected output's ids, by partition; locked per record, never across I/O.
    ids: Arc<Mutex<Identities>>,
    files: Arc<Files>,
    last_glob: Option<Instant>,
    /// A folder's listing changed since the globs were last evaluated.
    listing_changed: bool,
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
            files: Arc::new(BTreeMap::new()),
            last_glob: None,
            listing_changed: false,
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

    /// The globs to evaluate now, if it is time to: `listing` says a watched folder's entries
    /// changed (kept until the globs are evaluated, at most every [`GLOB_AT_MOST`]).
    pub(super) fn globs_due(&mut self, listing: bool) -> Option<Vec<(String, Kind)>> {
        self.listing_changed |= listing;
        let due = match self.last_glob {
            None => true,
            Some(t) if self.listing_changed => t.elapsed() >= GLOB_AT_MOST,
            Some(t) => t.elapsed() >= GLOB_AT_LEAST,
        };
        if !due {
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
        self.listing_changed = false;
        let known = self.files.len();
        let mut said = 0;
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
            let partition = super::partition_for(partition.as_deref(), &path);
            let key = path.display().to_string();
            let resume = self.saved.remove(&key).filter(|s| s.kind == kind);
            said += 1;
            if said <= SAY_FILES {
                tracing::info!(
                    path = %key,
                    partition = %partition,
                    "following {} {key} (partition {partition})",
                    kind.noun()
                );
            }
            let file = Followed::new(
                &path,
                kind,
                partition,
                inspector,
                Some(&self.ids),
                self.max_record_bytes,
                resume,
            );
            let slot = Arc::new(Slot {
                file: Mutex::new(file),
                dirty: AtomicBool::new(false),
                watched: AtomicBool::new(false),
                hot: AtomicBool::new(true),
            });
            Arc::make_mut(&mut self.files).insert(path, Entry { slot, kind, id });
        }
        if said > SAY_FILES {
            tracing::info!(
                "following {} more output and input files ({} in all); `pipeline-pulse status` lists them by partition",
                said - SAY_FILES,
                self.files.len()
            );
        }
        self.files.len() != known
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
    pub(super) fn files(&self) -> Arc<Files> {
        self.files.clone()
    }

    /// The globs, for the folders to watch.
    pub(super) fn globs(&self) -> impl Iterator<Item = &str> {
        let outputs = self.outputs.iter().map(|o| o.glob.as_str());
        outputs.chain(self.inputs.iter().map(String::as_str))
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
/// does not return, and must be named. A path already followed as the same kind is passed by
/// without a `stat`: ten thousand known shards cost a walk of their names, no more.
pub(super) fn expand(
    globs: &[(String, Kind)],
    known: &Files,
    at: &mut dyn FnMut(&str),
) -> Vec<Found> {
    let mut found = Vec::new();
    for (glob, kind) in globs {
        at(glob);
        let Ok(paths) = glob::glob(glob) else {
            continue; // validated in config; unreachable in practice
        };
        for path in paths.filter_map(Result::ok) {
            if known.get(&path).is_some_and(|e| e.kind == *kind) {
                continue;
            }
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
