//! The output source: the pipeline's JSONL files (and its input files), counted and inspected.
//!
//! Each file is followed by the same [`Follower`](crate::tail::Follower) as the logs, set to
//! end lines at `\n` only, so a record is a complete line and work grows with new bytes only.
//! The globs are evaluated again every few seconds, so partitions that appear later are picked
//! up. Per-file counts live here and are copied into the model after each batch; a truncated
//! or replaced file is counted again from its start, never on top of what it held before.
//!
//! The files are read on a reader thread ([`reader`]) that this source waits for; a reader
//! stuck in a call that does not return is left behind, and a new one reads the other files.
//!
//! A run folder may hold thousands of files (sharded outputs) of which a few are written at a
//! time, so the work and the descriptors grow with those: only files written in the last
//! minute stay open (at most `max_open_files`), the others are closed and reopened where they
//! were when they grow, and which files changed is learnt from inotify on their folders
//! ([`watch`]) where the kernel reports it.

mod catalog;
mod file;
mod identity;
mod lookup;
mod pointers;
mod reader;
pub mod record;
mod scan;
mod spec;
mod table;
mod watch;

pub use spec::{FileWatch, OutputConfig, OutputLimits, Pointers};

use crate::deadline::Waited;
use crate::lock::Locked;
use crate::model::{Run, DEFAULT_PARTITION};
use crate::sources::{Awaited, Built, Context, Following, Runs, SourceConfig};
use crate::state::StateDir;
use catalog::Catalog;
use file::SavedFile;
use reader::{Reader, Shared};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex, TryLockError};
use std::time::Duration;

/// A reader that has made no progress for this long is left behind and a new one started: a
/// file or glob whose call has not returned for this long holds back the others no longer.
/// (It is reported hung later, at [`crate::model::HUNG_AFTER`].)
const STALLED_AFTER: Duration = Duration::from_secs(2);
/// How often a waiting source looks whether its reader is stalled, or the sidecar stops.
const CHECK_EVERY: Duration = Duration::from_millis(100);
const SNAPSHOT: &str = "outputs.json";

pub struct OutputSource {
    shared: Arc<Shared>,
    /// `None` until the first poll, or after the reader thread died.
    reader: Option<Reader>,
    state: Option<StateDir>,
    /// The snapshot as last saved: a file held by a reader (one stuck on it, maybe) keeps the
    /// entry it had, the last position it completed.
    snapshot: BTreeMap<String, SavedFile>,
    /// The readers' change count the snapshot was saved at: an unchanged run is not written
    /// again (ten thousand positions are a few megabytes).
    saved_at: u64,
}

impl OutputSource {
    /// The source of these outputs and inputs.
    pub fn new(
        outputs: &[OutputConfig],
        inputs: &[String],
        limits: OutputLimits,
        run: Arc<Mutex<Run>>,
        state: Option<StateDir>,
    ) -> OutputSource {
        let saved = state
            .as_ref()
            .and_then(|s| s.load_json(SNAPSHOT))
            .unwrap_or_default();
        if !outputs.is_empty() || !inputs.is_empty() {
            let mut run = run.locked();
            run.expect_collector(crate::collectors::Collector::Outputs);
        }
        let catalog = Catalog::new(
            outputs,
            inputs,
            limits.max_record_bytes,
            limits.identity_cap,
            saved,
        );
        let shared = Shared::new(catalog, run, limits.max_open_files, limits.file_watch);
        OutputSource {
            shared: Arc::new(shared),
            reader: None,
            state,
            snapshot: BTreeMap::new(),
            saved_at: 0,
        }
    }

    /// Takes the globs discovery finds later, at each poll.
    pub fn with_additions(
        self,
        outputs: mpsc::Receiver<OutputConfig>,
        inputs: mpsc::Receiver<String>,
    ) -> OutputSource {
        self.shared.catalog().set_additions(outputs, inputs);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.shared.catalog().is_empty()
    }

    /// Finds new files, then reads every file to its current end once.
    pub fn poll(&mut self) {
        self.poll_unless(&|| false);
    }

    /// [`OutputSource::poll`], returning early once `stopping()` says so.
    fn poll_unless(&mut self, stopping: &dyn Fn() -> bool) {
        loop {
            let reader = match &mut self.reader {
                Some(reader) => reader,
                None => match Reader::start(&self.shared, STALLED_AFTER) {
                    Ok(reader) => self.reader.insert(reader),
                    Err(e) => {
                        tracing::error!("cannot start a thread to read the output files: {e}");
                        return;
                    }
                },
            };
            reader.ask();
            match reader.wait(CHECK_EVERY) {
                Waited::Idle | Waited::Done(_) => return,
                Waited::Gone => {
                    tracing::error!("the output reader ended unexpectedly; starting another");
                    self.reader = None;
                    return;
                }
                Waited::Pending | Waited::Hung { .. } if stopping() => return,
                Waited::Hung { .. } => {
                    let path = reader.at();
                    tracing::warn!(
                        path = %path,
                        "{path} does not answer for {} s; reading the other output files on a new thread",
                        STALLED_AFTER.as_secs()
                    );
                    self.reader = None;
                }
                Waited::Pending => {}
            }
        }
    }

    /// Saves positions and counts to the state directory, if there is one.
    pub fn save_snapshot(&mut self) {
        let Some(state) = &self.state else {
            return;
        };
        let changes = self
            .shared
            .changes
            .load(std::sync::atomic::Ordering::Acquire);
        if changes == self.saved_at {
            return;
        }
        self.saved_at = changes;
        let files = self.shared.catalog().files();
        for (path, entry) in files.iter() {
            let file = match entry.slot.file.try_lock() {
                Ok(file) => file,
                Err(TryLockError::Poisoned(e)) => e.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            self.snapshot
                .insert(path.display().to_string(), file.saved());
        }
        if let Err(e) = state.save_json(SNAPSHOT, &self.snapshot) {
            let path = state.path(SNAPSHOT);
            tracing::warn!(path = %path.display(), "cannot save {}: {e}", path.display());
        }
    }
}

/// What discovery hands the output files source later: output globs and input files.
pub type Discovered = (mpsc::Receiver<OutputConfig>, mpsc::Receiver<String>);

/// The output files source's section of the configuration: the output globs, the input
/// files, their limits, and how often they are read.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `outputs`; none with the outputs collector off.
    pub outputs: Vec<OutputConfig>,
    /// `inputs`' globs; none with the outputs collector off.
    pub inputs: Vec<String>,
    /// `max_record_bytes`, `identity_cap`, `max_open_files` and `file_watch`.
    pub limits: OutputLimits,
    /// `poll_interval`, as the logs'.
    pub interval: Duration,
}

impl SourceConfig for Following<Settings, Discovered> {
    fn build(self: Box<Self>, cx: &mut Context) -> anyhow::Result<Option<Built>> {
        let Following {
            settings: this,
            found,
        } = *self;
        let mut source = OutputSource::new(
            &this.outputs,
            &this.inputs,
            this.limits,
            cx.run.clone(),
            cx.state.clone(),
        );
        if let Some((outputs, inputs)) = found {
            source = source.with_additions(outputs, inputs);
        }
        Ok(Some(Built {
            name: "output-source",
            collectors: &[crate::collectors::Collector::Outputs],
            interval: this.interval,
            awaited: Awaited::ByAll,
            runs: Runs::Thread(Box::new(source)),
        }))
    }
}

impl crate::sources::Source for OutputSource {
    fn poll(&mut self) {
        OutputSource::poll(self);
    }

    fn poll_unless(&mut self, stopping: &dyn Fn() -> bool) {
        OutputSource::poll_unless(self, stopping);
    }

    fn save_snapshot(&mut self) {
        OutputSource::save_snapshot(self);
    }
}

/// The `partition` setting that names each file's partition by the file's name, without its
/// extensions (`outputs/B1.jsonl` is `B1`), for a folder of one file per partition.
pub const PARTITION_BY_FILE: &str = "{file}";

/// The partition of a file of an output glob whose `partition` setting is `configured`: that
/// name, the file's own name for [`PARTITION_BY_FILE`], else its folder's.
pub fn partition_for(configured: Option<&str>, path: &Path) -> String {
    match configured {
        Some(PARTITION_BY_FILE) => path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('.').next())
            .filter(|n| !n.is_empty())
            .unwrap_or(DEFAULT_PARTITION)
            .to_owned(),
        Some(name) => name.to_owned(),
        None => partition_of(path),
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

    #[test]
    fn a_partition_by_file_is_the_name_without_its_extensions() {
        let by_file = Some(PARTITION_BY_FILE);
        assert_eq!(
            partition_for(by_file, Path::new("/r/outputs/B1.jsonl.gz")),
            "B1"
        );
        assert_eq!(
            partition_for(Some("x"), Path::new("/r/outputs/B1.jsonl")),
            "x"
        );
        assert_eq!(
            partition_for(None, Path::new("/r/outputs/B1.jsonl")),
            "outputs"
        );
    }
}
