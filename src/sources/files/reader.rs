//! The thread that reads the output and input files, and how one stuck in a call that does
//! not return (a hung NFS, Lustre or FUSE mount) is left behind.
//!
//! A pass evaluates the globs when due, then reads every followed file to its end, one after
//! another, each under its own lock. The output source waits for the pass; when the reader has
//! made no progress for a while, the source leaves it behind and starts a new reader, which
//! passes by the file (or the glob) the old one is stuck on: one hung file holds back no other.
//! The old reader, once its call returns, finishes that file (nothing read is lost or counted
//! twice), sees it was left behind and ends. Threads: one, plus one per call that does not
//! return.
//!
//! A pass reads only what changed: the files inotify named, the files in folders it cannot
//! watch (polled, as before), and those with a problem; a file written in the last minute
//! keeps its descriptor, any other is closed once read (and so are the least recent beyond
//! `max_open_files`). Every file is looked at once every [`SWEEP_EVERY`] whatever was said.

use super::catalog::{expand, Catalog, Entry, Files};
use super::watch::{self, Watcher};
use super::FileWatch;
use crate::clock;
use crate::collectors::Collector;
use crate::deadline::{self, Waited};
use crate::lock::Locked;
use crate::model::{OutputFiles, Run};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

/// Every file is looked at this often even in a watched folder: the net for a change inotify
/// does not report (a write through `mmap`, a lost event queue that went unnoticed).
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// What every reader shares.
pub(super) struct Shared {
    pub(super) catalog: Mutex<Catalog>,
    pub(super) run: Arc<Mutex<Run>>,
    /// Locked by the reader that looks at the folders; a reader stuck in a folder's `stat`
    /// holds it, and the next one reads every file as a polled one until it is back.
    watcher: Mutex<Watcher>,
    /// Files holding a descriptor now, and how many may.
    open_files: AtomicUsize,
    max_open: usize,
    /// When every file was last looked at.
    last_sweep: Mutex<Option<Instant>>,
    /// The files the last pass left hot (open, or with a problem): the next looks at them.
    hot: Mutex<Vec<PathBuf>>,
    /// Goes up with every pass that changed a count or found a file: the snapshot is written
    /// only when it moved.
    pub(super) changes: AtomicU64,
    /// Raised each time a stuck reader is left behind: a reader that sees it raised ends.
    generation: AtomicU64,
    /// A reader is evaluating the globs: the next one does not, so that a glob over a hung
    /// mount holds one thread, not one per pass.
    globbing: AtomicBool,
}

impl Shared {
    pub(super) fn new(
        catalog: Catalog,
        run: Arc<Mutex<Run>>,
        max_open: usize,
        watch: FileWatch,
    ) -> Shared {
        Shared {
            catalog: Mutex::new(catalog),
            run,
            watcher: Mutex::new(Watcher::new(watch)),
            open_files: AtomicUsize::new(0),
            max_open,
            last_sweep: Mutex::new(None),
            hot: Mutex::new(Vec::new()),
            changes: AtomicU64::new(1),
            generation: AtomicU64::new(0),
            globbing: AtomicBool::new(false),
        }
    }

    pub(super) fn catalog(&self) -> std::sync::MutexGuard<'_, Catalog> {
        self.catalog.locked()
    }

    fn left_behind(&self, generation: u64) -> bool {
        self.generation.load(Ordering::Acquire) != generation
    }
}

/// The handle on one reader thread.
pub(super) struct Reader {
    worker: deadline::Worker<(), bool>,
    /// The file or glob it is in, or was in last.
    at: Arc<Mutex<String>>,
}

/// Where a pass is, for the source to tell a stuck reader.
struct Progress<'a> {
    made: &'a deadline::Progress,
    at: &'a Mutex<String>,
}

impl Progress<'_> {
    fn made(&self) {
        self.made.made();
    }

    fn at(&self, path: &str) {
        path.clone_into(&mut self.at.locked());
        self.made();
    }
}

impl Reader {
    /// Starts a reader, hung once it makes no progress for `stalled_after`; any reader before
    /// it is left behind.
    pub(super) fn start(shared: &Arc<Shared>, stalled_after: Duration) -> std::io::Result<Reader> {
        let generation = shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
        // The one left behind may have taken the hot files with it: look at every file.
        *shared.last_sweep.locked() = None;
        let at = Arc::new(Mutex::new(String::new()));
        let place = at.clone();
        let shared = shared.clone();
        let worker = deadline::Worker::start(
            format!("outputs {generation}"),
            stalled_after,
            move |(), made| pass(&shared, generation, &Progress { made, at: &place }),
        )?;
        Ok(Reader { worker, at })
    }

    /// Asks for a pass, unless one is under way.
    pub(super) fn ask(&mut self) {
        self.worker.ask(());
    }

    /// The file or glob the reader is in (or was in last).
    pub(super) fn at(&self) -> String {
        self.at.locked().clone()
    }

    /// Waits up to `wait` for the pass under way to end.
    pub(super) fn wait(&mut self, wait: Duration) -> Waited<bool> {
        self.worker.wait_until(Instant::now() + wait)
    }
}

/// One file or glob a reader is in, in the model's `output_reading` while it is: one stuck
/// there for [`crate::model::HUNG_AFTER`] is reported hung.
struct Reading<'a> {
    run: &'a Mutex<Run>,
    id: u64,
}

/// Numbers the readings, so that a glob that spells a path and the path never share one.
static READINGS: AtomicU64 = AtomicU64::new(0);

impl<'a> Reading<'a> {
    fn at(run: &'a Mutex<Run>, path: String, progress: &Progress) -> Reading<'a> {
        progress.at(&path);
        let id = READINGS.fetch_add(1, Ordering::Relaxed);
        run.locked().reading_began(id, path, clock::now());
        Reading { run, id }
    }

    fn progress(&self) {
        self.run.locked().reading_progressed(self.id, clock::now());
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.run.locked().reading_ended(self.id);
    }
}

/// Evaluates the globs if due, then reads every file that changed (or may have) to its end.
/// Returns false when the reader was left behind on the way (its answer goes to no one).
fn pass(shared: &Shared, generation: u64, progress: &Progress) -> bool {
    let run = &shared.run;
    let changes = folder_changes(shared, progress);
    let listing = changes.as_ref().is_none_or(|c| c.listing);
    let globs = {
        let mut catalog = shared.catalog();
        if catalog.take_additions() {
            let mut run = run.locked();
            run.expect_collector(Collector::Outputs);
        }
        if catalog.is_empty() {
            return true;
        }
        catalog
            .globs_due(listing)
            .filter(|_| !shared.globbing.swap(true, Ordering::AcqRel))
    };
    let started = Instant::now();
    let mut changed = false;
    let globbed = globs.is_some();
    if let Some(globs) = globs {
        let known = shared.catalog().files();
        let mut reading = None;
        let found = expand(&globs, &known, &mut |glob| {
            reading = None;
            reading = Some(Reading::at(run, glob.to_owned(), progress));
        });
        drop((reading, known));
        changed |= shared.catalog().add(found);
        watch_folders(shared, run, progress);
        shared.globbing.store(false, Ordering::Release);
    }
    let files = shared.catalog().files();
    if let Some(changes) = &changes {
        for path in &changes.files {
            if let Some(entry) = files.get(path) {
                entry.slot.dirty.store(true, Ordering::Release);
            }
        }
    }
    let sweep = {
        let mut last = shared.last_sweep.locked();
        let due = changes.as_ref().is_some_and(|c| c.lost)
            || last.is_none_or(|t| t.elapsed() >= SWEEP_EVERY);
        if due {
            *last = Some(Instant::now());
        }
        due
    };
    // Without word from the folders, every file is read as a polled one.
    let blind = changes.is_none();
    let (_, polled_folders) = shared.watcher.try_lock().map_or((0, 1), |w| w.counts());
    let kept = std::mem::take(&mut *shared.hot.locked());
    let every = sweep || blind || globbed || polled_folders > 0;
    let visit = to_visit(&files, changes.as_ref(), &kept, every);
    let mut keep = Vec::new();
    let now = clock::now();
    let mut all_up = true;
    for (path, entry) in visit {
        if shared.left_behind(generation) {
            return false;
        }
        let Some(visited) = visit_file(shared, path, entry, sweep, blind, now, progress) else {
            continue;
        };
        all_up &= visited.up;
        changed |= visited.touched;
        if visited.hot {
            keep.push(path.clone());
        }
    }
    *shared.hot.locked() = keep;
    if shared.left_behind(generation) {
        return false;
    }
    if changed {
        shared.changes.fetch_add(1, Ordering::AcqRel);
    }
    let (watched_folders, polled_folders) = shared
        .watcher
        .try_lock()
        .map_or((0, polled_folders), |w| w.counts());
    let mut run = run.locked();
    run.set_output_files(OutputFiles {
        followed: files.len(),
        open: shared.open_files.load(Ordering::Acquire),
        watched_folders,
        polled_folders,
    });
    run.refresh_output_totals();
    run.note_output_tokens(clock::now(), changed);
    run.set_collector(Collector::Outputs, all_up, started.elapsed().as_secs_f64());
    true
}

/// The files a pass looks at: `every` one when something may have been missed, else only
/// those inotify named and those kept hot by the last pass. An idle pass over ten thousand
/// quiet files touches none of them.
fn to_visit<'f>(
    files: &'f Files,
    changes: Option<&watch::Changes>,
    kept: &[PathBuf],
    every: bool,
) -> Vec<(&'f PathBuf, &'f Entry)> {
    if every {
        return files.iter().collect();
    }
    let named = changes.iter().flat_map(|c| c.files.iter());
    let mut visit: Vec<_> = kept
        .iter()
        .chain(named)
        .filter_map(|p| files.get_key_value(p))
        .collect();
    visit.sort_unstable_by_key(|(p, _)| *p);
    visit.dedup_by_key(|(p, _)| *p);
    visit
}

/// What the folders say changed since the last look; `None` while another reader is stuck
/// looking at one.
fn folder_changes(shared: &Shared, progress: &Progress) -> Option<watch::Changes> {
    match shared.watcher.try_lock() {
        Ok(mut watcher) => {
            let mut reading = None;
            let changes = watcher.changes(&mut |dir| {
                reading = None;
                reading = Some(Reading::at(
                    &shared.run,
                    dir.display().to_string(),
                    progress,
                ));
            });
            Some(changes)
        }
        Err(TryLockError::Poisoned(e)) => Some(e.into_inner().changes(&mut |_| {})),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// What one file's visit did.
struct Visited {
    up: bool,
    touched: bool,
    /// Open or in trouble: looked at again at the next pass.
    hot: bool,
}

/// Looks at one file of a pass: reads it when it is due (swept, named by its folder, polled,
/// or in trouble), and closes it when it has been quiet and descriptors are short. `None` for
/// a file passed by: nothing to read, or a reader left behind is stuck on it (it is reported
/// hung from there).
fn visit_file(
    shared: &Shared,
    path: &std::path::Path,
    entry: &Entry,
    sweep: bool,
    blind: bool,
    now: f64,
    progress: &Progress,
) -> Option<Visited> {
    let slot = &entry.slot;
    let dirty = slot.dirty.swap(false, Ordering::AcqRel);
    let watched = slot.watched.load(Ordering::Acquire) && !blind;
    if !(sweep || dirty || !watched || slot.hot.load(Ordering::Acquire)) {
        return None;
    }
    let mut file = match slot.file.try_lock() {
        Ok(file) => file,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => {
            slot.dirty.fetch_or(dirty, Ordering::AcqRel);
            return None;
        }
    };
    let mut visited = Visited {
        up: true,
        touched: false,
        hot: false,
    };
    let was_open = file.is_open();
    if sweep || dirty || ((!watched || file.has_problem()) && file.due()) {
        let reading = Reading::at(&shared.run, path.display().to_string(), progress);
        let polled = file.poll(path, &shared.run, &|| {
            reading.progress();
            progress.made();
        });
        drop(reading);
        visited.up = polled.up;
        visited.touched = polled.touched;
    }
    let open = file.is_open();
    let count = match (was_open, open) {
        (false, true) => shared.open_files.fetch_add(1, Ordering::AcqRel) + 1,
        (true, false) => shared.open_files.fetch_sub(1, Ordering::AcqRel) - 1,
        _ => shared.open_files.load(Ordering::Acquire),
    };
    if open && file.close_if_quiet(now, count > shared.max_open) {
        shared.open_files.fetch_sub(1, Ordering::AcqRel);
    }
    visited.hot = file.is_open() || file.has_problem();
    slot.hot.store(visited.hot, Ordering::Release);
    Some(visited)
}

/// Watches the folders the globs matched in (each at most once), and marks each file by
/// whether inotify reports its folder's changes. A file whose folder became watched is read
/// once more, for what was written before the watch began.
fn watch_folders(shared: &Shared, run: &Mutex<Run>, progress: &Progress) {
    let (globs, files): (Vec<String>, Arc<Files>) = {
        let catalog = shared.catalog();
        (
            catalog.globs().map(str::to_owned).collect(),
            catalog.files(),
        )
    };
    let Ok(mut watcher) = shared.watcher.try_lock() else {
        return;
    };
    let folders = watch::folders(
        globs.iter().map(String::as_str),
        files.keys().map(|p| p.as_path()),
    );
    for folder in &folders {
        let _reading = Reading::at(run, folder.display().to_string(), progress);
        watcher.watch(folder);
    }
    for (path, entry) in files.iter() {
        let watched = path.parent().is_some_and(|dir| watcher.watch(dir));
        if watched && !entry.slot.watched.swap(true, Ordering::AcqRel) {
            entry.slot.dirty.store(true, Ordering::Release);
        } else if !watched {
            entry.slot.watched.store(false, Ordering::Release);
        }
    }
}
