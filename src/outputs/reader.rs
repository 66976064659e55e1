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

use super::catalog::{expand, Catalog};
use crate::clock;
use crate::model::Run;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

/// What every reader shares.
pub(super) struct Shared {
    pub(super) catalog: Mutex<Catalog>,
    pub(super) run: Arc<Mutex<Run>>,
    /// Raised each time a stuck reader is left behind: a reader that sees it raised ends.
    generation: AtomicU64,
    /// A reader is evaluating the globs: the next one does not, so that a glob over a hung
    /// mount holds one thread, not one per pass.
    globbing: AtomicBool,
}

impl Shared {
    pub(super) fn new(catalog: Catalog, run: Arc<Mutex<Run>>) -> Shared {
        Shared {
            catalog: Mutex::new(catalog),
            run,
            generation: AtomicU64::new(0),
            globbing: AtomicBool::new(false),
        }
    }

    pub(super) fn catalog(&self) -> std::sync::MutexGuard<'_, Catalog> {
        self.catalog.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn left_behind(&self, generation: u64) -> bool {
        self.generation.load(Ordering::Acquire) != generation
    }
}

/// The handle on one reader thread.
pub(super) struct Reader {
    asks: mpsc::Sender<()>,
    done: mpsc::Receiver<()>,
    /// A pass was asked for and has not ended.
    busy: bool,
    progress: Arc<Progress>,
}

/// Where a reader is and when it last got anywhere, for the source to tell a stuck reader.
struct Progress {
    started: Instant,
    /// Milliseconds after `started` of the latest progress.
    made: AtomicU64,
    /// The file or glob it is in, or was in last.
    at: Mutex<String>,
}

impl Progress {
    fn made(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.made.store(ms, Ordering::Release);
    }

    fn at(&self, path: &str) {
        path.clone_into(&mut self.at.lock().unwrap_or_else(|e| e.into_inner()));
        self.made();
    }
}

pub(super) enum Waited {
    Done,
    Pending,
    /// The thread is gone (it panicked).
    Gone,
}

impl Reader {
    /// Starts a reader; any reader before it is left behind.
    pub(super) fn start(shared: &Arc<Shared>) -> std::io::Result<Reader> {
        let generation = shared.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let (asks, asked) = mpsc::channel::<()>();
        let (finished, done) = mpsc::channel();
        let progress = Arc::new(Progress {
            started: Instant::now(),
            made: AtomicU64::new(0),
            at: Mutex::new(String::new()),
        });
        let made = progress.clone();
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("outputs {generation}"))
            .spawn(move || {
                while asked.recv().is_ok() {
                    if !pass(&shared, generation, &made) || finished.send(()).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Reader {
            asks,
            done,
            busy: false,
            progress,
        })
    }

    /// Asks for a pass, unless one is under way.
    pub(super) fn ask(&mut self) {
        if !self.busy && self.asks.send(()).is_ok() {
            self.progress.made();
            self.busy = true;
        }
    }

    /// The file or glob the reader is in (or was in last).
    pub(super) fn at(&self) -> String {
        self.progress
            .at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits up to `wait` for the pass under way to end.
    pub(super) fn wait(&mut self, wait: Duration) -> Waited {
        if !self.busy {
            return Waited::Done;
        }
        match self.done.recv_timeout(wait) {
            Ok(()) => {
                self.busy = false;
                Waited::Done
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Waited::Pending,
            Err(mpsc::RecvTimeoutError::Disconnected) => Waited::Gone,
        }
    }

    /// Whether the pass under way has made no progress for `after`.
    pub(super) fn stalled(&self, after: Duration) -> bool {
        self.busy && {
            let last = Duration::from_millis(self.progress.made.load(Ordering::Acquire));
            self.progress.started.elapsed().saturating_sub(last) >= after
        }
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
        let mut model = run.lock().unwrap_or_else(|e| e.into_inner());
        model.output_reading.insert(id, (path, clock::now()));
        Reading { run, id }
    }

    fn progress(&self) {
        let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, since)) = run.output_reading.get_mut(&self.id) {
            *since = clock::now();
        }
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
        run.output_reading.remove(&self.id);
    }
}

/// Evaluates the globs if due, then reads every file it can take to its end. Returns false
/// when the reader was left behind on the way and must end.
fn pass(shared: &Shared, generation: u64, progress: &Progress) -> bool {
    let run = &shared.run;
    let globs = {
        let mut catalog = shared.catalog();
        if catalog.take_additions() {
            let mut run = run.lock().unwrap_or_else(|e| e.into_inner());
            run.expect_collector("outputs");
        }
        if catalog.is_empty() {
            return true;
        }
        catalog
            .globs_due()
            .filter(|_| !shared.globbing.swap(true, Ordering::AcqRel))
    };
    let started = Instant::now();
    let mut changed = false;
    if let Some(globs) = globs {
        let mut reading = None;
        let found = expand(&globs, &mut |glob| {
            reading = None;
            reading = Some(Reading::at(run, glob.to_owned(), progress));
        });
        drop(reading);
        changed |= shared.catalog().add(found);
        shared.globbing.store(false, Ordering::Release);
    }
    let entries = shared.catalog().entries();
    let mut all_up = true;
    for (path, file) in entries {
        if shared.left_behind(generation) {
            return false;
        }
        let mut file = match file.try_lock() {
            Ok(file) => file,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            // A reader left behind is stuck on it; it is reported hung from there.
            Err(TryLockError::WouldBlock) => continue,
        };
        if !file.due() {
            continue;
        }
        let reading = Reading::at(run, path.display().to_string(), progress);
        let polled = file.poll(&path, run, &|| {
            reading.progress();
            progress.made();
        });
        drop(reading);
        all_up &= polled.up;
        changed |= polled.touched;
    }
    if shared.left_behind(generation) {
        return false;
    }
    if changed {
        shared.catalog().last_change = Instant::now();
    }
    let mut run = run.lock().unwrap_or_else(|e| e.into_inner());
    run.note_output_tokens(clock::now(), changed);
    run.set_collector("outputs", all_up, started.elapsed().as_secs_f64());
    true
}
