//! One followed output or input file: its follower, its counts, and how they reach the model.
//!
//! A file lives behind a mutex of its own, held by the reader that polls it: a reader stuck in
//! a call on it (a hung mount) holds that file alone, and the next reader passes it by.

use super::identity::{Identities, Seen, Slot};
use super::record::{self, Inspector};
use super::table::{self, TableFormat};
use crate::clock;
use crate::lock::Locked;
use crate::model::{InputFile, OutputFile, OutputStats, Run};
use crate::tail::{Follower, Position, TailStats, Tailed};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Bytes read from one file per model update.
const BATCH_BYTES: u64 = 8 * 1024 * 1024;
/// A file unchanged for this many polls in a row (30 s at the default 250 ms) is looked at
/// only every `QUIET_EVERY` polls (1 s) until it changes again.
const QUIET_POLLS: u32 = 120;
const QUIET_EVERY: u32 = 4;
/// A file last written longer ago than this is closed once read: a writer that pauses longer
/// costs one `open` when it writes again, while a folder of finished shards holds nothing.
const KEEP_OPEN: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(super) enum Kind {
    /// An output file; the index of its `[[outputs]]` entry.
    Output(usize),
    /// An input file: its lines are planned requests.
    Input,
}

impl Kind {
    pub(super) fn key(self) -> String {
        match self {
            Kind::Output(i) => format!("outputs[{i}]"),
            Kind::Input => "inputs".to_owned(),
        }
    }

    pub(super) fn noun(self) -> &'static str {
        match self {
            Kind::Output(_) => "output file",
            Kind::Input => "input file",
        }
    }
}

/// What a restart needs of one file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SavedFile {
    pub(super) kind: Kind,
    pub(super) partition: String,
    pub(super) stats: OutputStats,
    pub(super) tail: TailStats,
    pub(super) position: Option<Position>,
}

pub(super) struct Followed {
    follower: Follower,
    kind: Kind,
    partition: String,
    /// Compiled pointers for an inspected output; `None` when records are only counted.
    inspector: Option<Arc<Inspector>>,
    /// The partition's ids, and this file's place among them, for an inspected output.
    ids: Option<(Arc<Mutex<Identities>>, Slot)>,
    stats: OutputStats,
    /// A saved position to continue from, taken up at the first poll (it opens the file).
    resume: Option<SavedFile>,
    /// The last problem reported for this file, so a lasting one is logged once, and whether
    /// it was said (a want of descriptors is said for all files at once, by `fd_limit`).
    problem: Option<(String, bool)>,
    /// The modification time last copied into the model (`Some(None)` when it had none).
    published: Option<Option<std::time::SystemTime>>,
    /// Polls in a row that found nothing new.
    unchanged: u32,
    /// A columnar file (parquet, Arrow), counted from its metadata instead of its lines.
    table: Option<Table>,
}

/// How a columnar file was last found: its identity, size and modification time when it was
/// read, and whether that read failed.
struct Table {
    format: TableFormat,
    seen: Option<TableSeen>,
    failed: bool,
}

type TableSeen = (u64, u64, u64, Option<std::time::SystemTime>);

/// What one poll of a file found.
pub(super) struct Polled {
    /// The file could be read.
    pub(super) up: bool,
    /// Anything about it changed.
    pub(super) touched: bool,
}

impl Followed {
    pub(super) fn new(
        path: &Path,
        kind: Kind,
        partition: String,
        inspector: Option<Arc<Inspector>>,
        ids: Option<&Arc<Mutex<Identities>>>,
        max_record_bytes: usize,
        resume: Option<SavedFile>,
    ) -> Followed {
        let table = TableFormat::of(path).map(|format| Table {
            format,
            seen: None,
            failed: false,
        });
        // Its records have no lines to inspect; its count is read again from the file.
        let (inspector, resume) = match table {
            Some(_) => (None, None),
            None => (inspector, resume),
        };
        let mut follower = Follower::new(path, max_record_bytes).path_only();
        if path.extension().is_some_and(|e| e == "gz") {
            follower = follower.gzip();
        }
        let follower = if inspector.is_some() {
            follower.newline_only()
        } else {
            follower.count_only()
        };
        let ids = ids.filter(|_| inspector.is_some()).map(|ids| {
            let slot = lock(ids).register(&partition);
            (ids.clone(), slot)
        });
        // Ids are not saved: an inspected file is read again from its start.
        let resume = resume.filter(|_| ids.is_none());
        let stats = OutputStats::expecting(inspector.as_ref().map_or(&[], |i| i.required_fields()));
        Followed {
            follower,
            kind,
            partition,
            inspector,
            ids,
            stats,
            resume,
            problem: None,
            published: None,
            unchanged: 0,
            table,
        }
    }

    /// What a restart needs to continue where this file stands.
    pub(super) fn saved(&self) -> SavedFile {
        SavedFile {
            kind: self.kind,
            partition: self.partition.clone(),
            stats: self.stats.clone(),
            tail: self.follower.stats(),
            position: self.follower.position(),
        }
    }

    /// Whether this poll looks at the file. A file is looked at (one `stat`) every poll, and
    /// read only when its size, modification time or identity changed. One unchanged for
    /// `QUIET_POLLS` polls is looked at every `QUIET_EVERY`th poll until it changes: a byte
    /// written to a file that was quiet for 30 s is seen within `QUIET_EVERY` poll intervals
    /// (1 s at the default), any other within one.
    pub(super) fn due(&mut self) -> bool {
        if self.unchanged >= QUIET_POLLS && self.problem.is_none() {
            self.unchanged += 1;
            return self.unchanged.is_multiple_of(QUIET_EVERY);
        }
        true
    }

    /// Reads the file to its end in batches, copying each batch into the model; `progress`
    /// is called after each, so a long read is not taken for a hung one.
    pub(super) fn poll(&mut self, path: &Path, run: &Mutex<Run>, progress: &dyn Fn()) -> Polled {
        if self.table.is_some() {
            return self.poll_table(path, run);
        }
        if let Some(saved) = self.resume.take() {
            self.follower.set_stats(saved.tail);
            match &saved.position {
                Some(pos) if self.follower.resume(Some(pos), &[]).in_place => {
                    self.stats = saved.stats
                }
                _ => tracing::info!(
                    path = %path.display(),
                    "{} changed while the sidecar was down; counting it again",
                    path.display()
                ),
            }
        }
        let mut touched = false;
        loop {
            let inspect = self.inspector.as_deref();
            let ids = self.ids.as_ref();
            let stats = &mut self.stats;
            let result = self.follower.poll(BATCH_BYTES, |tailed| {
                touched = true;
                match tailed {
                    Tailed::Line(line) => match inspect {
                        Some(inspector) => add(stats, inspector, ids, line),
                        None => stats.add(&record::Facts::default(), line.len()),
                    },
                    Tailed::Counted { lines, bytes } => stats.add_plain(lines, bytes),
                    Tailed::Oversized => stats.add_oversized(),
                    Tailed::Reset { .. } => {
                        *stats =
                            OutputStats::expecting(inspect.map_or(&[], |i| i.required_fields()));
                        if let Some((ids, slot)) = ids {
                            lock(ids).forget(*slot);
                        }
                    }
                }
            });
            progress();
            let polled = match result {
                Ok(polled) => polled,
                Err(e) => {
                    self.report(path, &e);
                    if self.follower.refusing() {
                        let key = path.display().to_string();
                        run.locked().file_refused(key, true);
                    }
                    return Polled { up: false, touched };
                }
            };
            let modified = self.follower.modified();
            if touched || self.published != Some(modified) {
                self.publish(path, modified, run);
                touched = true;
            }
            if !polled.more {
                if let Some((_, said)) = self.problem.take() {
                    if said {
                        tracing::info!(path = %path.display(), "reading {} again", path.display());
                    }
                    let key = path.display().to_string();
                    run.locked().file_refused(key, false);
                }
                self.unchanged = if touched {
                    0
                } else {
                    self.unchanged.saturating_add(1)
                };
                return Polled { up: true, touched };
            }
        }
    }

    /// Reads a columnar file's row count again when the file changed. One that cannot be read
    /// is reported only when it is still the same at the next poll (a writer between two
    /// writes is not a damaged file); its last count stands meanwhile.
    fn poll_table(&mut self, path: &Path, run: &Mutex<Run>) -> Polled {
        use std::os::unix::fs::MetadataExt;
        let Some(table) = self.table.as_mut() else {
            return Polled {
                up: true,
                touched: false,
            };
        };
        let meta = match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() => meta,
            Ok(_) => {
                let e =
                    std::io::Error::other("it is not a regular file; only regular files are read");
                return self.table_problem(path, e.to_string());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Polled {
                    up: true,
                    touched: false,
                }
            }
            Err(e) => {
                return self.table_problem(path, format!("cannot read {}: {e}", path.display()))
            }
        };
        let seen = (meta.dev(), meta.ino(), meta.len(), meta.modified().ok());
        let unchanged = table.seen == Some(seen);
        if unchanged && !table.failed {
            self.unchanged = self.unchanged.saturating_add(1);
            return Polled {
                up: true,
                touched: false,
            };
        }
        table.seen = Some(seen);
        let counted = crate::tail::open_nonblocking(path)
            .map_err(|e| e.to_string())
            .and_then(|file| table::rows(&file, table.format));
        match counted {
            Ok((rows, _whole)) => {
                table.failed = false;
                let mut stats = OutputStats::default();
                stats.add_plain(rows, seen.2);
                let changed =
                    stats.records != self.stats.records || stats.bytes != self.stats.bytes;
                self.stats = stats;
                if let Some((_, said)) = self.problem.take() {
                    if said {
                        tracing::info!(path = %path.display(), "reading {} again", path.display());
                    }
                }
                self.unchanged = if changed {
                    0
                } else {
                    self.unchanged.saturating_add(1)
                };
                self.publish(path, seen.3, run);
                Polled {
                    up: true,
                    touched: changed,
                }
            }
            Err(why) => {
                table.failed = true;
                if unchanged {
                    return self.table_problem(
                        path,
                        format!("{}: {why}; its rows are not counted", path.display()),
                    );
                }
                Polled {
                    up: true,
                    touched: false,
                }
            }
        }
    }

    fn table_problem(&mut self, path: &Path, message: String) -> Polled {
        if self.problem.as_ref().is_none_or(|(m, _)| *m != message) {
            tracing::warn!(path = %path.display(), "{message}");
            self.problem = Some((message, true));
        }
        Polled {
            up: false,
            touched: false,
        }
    }

    fn publish(&mut self, path: &Path, modified: Option<std::time::SystemTime>, run: &Mutex<Run>) {
        self.published = Some(modified);
        let key = path.display().to_string();
        let last_write = modified.map(clock::unix_seconds);
        let stored = self.ids.as_ref().map(|(ids, _)| lock(ids).stored());
        let mut run = run.locked();
        if let Some(stored) = stored {
            run.set_identities_stored(stored);
        }
        match self.kind {
            Kind::Output(_) => {
                run.set_output_file(
                    key,
                    OutputFile {
                        partition: self.partition.clone(),
                        stats: self.stats.clone(),
                        last_write,
                    },
                );
            }
            Kind::Input => {
                run.set_input_file(
                    key,
                    InputFile {
                        partition: self.partition.clone(),
                        lines: self.stats.records,
                    },
                );
            }
        }
    }

    fn report(&mut self, path: &Path, e: &crate::tail::TailError) {
        let quiet = crate::fd_limit::note(&e.source);
        let message = e.to_string();
        if self.problem.as_ref().is_none_or(|(m, _)| *m != message) {
            if !quiet {
                tracing::warn!(path = %path.display(), "{message}");
            }
            self.problem = Some((message, !quiet));
        }
    }

    /// Whether the last poll failed: it is tried again every poll.
    pub(super) fn has_problem(&self) -> bool {
        self.problem.is_some()
    }

    pub(super) fn is_open(&self) -> bool {
        self.table.is_none() && self.follower.is_open()
    }

    /// Closes the file unless it was written within [`KEEP_OPEN`] of `now` (and `full` says
    /// there is room for it). Returns whether a descriptor was released.
    pub(super) fn close_if_quiet(&mut self, now: f64, full: bool) -> bool {
        if self.table.is_some() {
            return false;
        }
        let recent = self
            .follower
            .modified()
            .is_some_and(|m| now - clock::unix_seconds(m) < KEEP_OPEN.as_secs_f64());
        if recent && !full {
            return false;
        }
        self.follower.close()
    }
}

/// One inspected record: its facts, its identity checked against its partition's (the lock
/// is taken per record, never across a read, so a file stuck in a read holds no other file of
/// its partition), and the required fields it lacks.
fn add(
    stats: &mut OutputStats,
    inspector: &Inspector,
    ids: Option<&(Arc<Mutex<Identities>>, Slot)>,
    line: &[u8],
) {
    let facts = inspector.inspect(line);
    stats.add(&facts, line.len());
    stats.add_missing(facts.missing, inspector.required_fields());
    let (Some((ids, slot)), Some(id)) = (ids, facts.identity) else {
        return;
    };
    let seen = lock(ids).check(*slot, id);
    match seen {
        Seen::New => {}
        Seen::Duplicate => stats.add_duplicate(|| inspector.id_text(line)),
        Seen::Unchecked => stats.unchecked += 1,
    }
}

fn lock(ids: &Mutex<Identities>) -> std::sync::MutexGuard<'_, Identities> {
    ids.locked()
}
