//! Where the model's facts come from: the progress and server logs, the pipeline's output and
//! input files, the GPUs, the driver process and the server, what `--run-dir` discovers, the
//! run's id and the stacks of a stuck run. Each runs at the edge (its own thread or task) and
//! tells the model what it read; none imports a sink (`tests/it/layout.rs` holds it to that).
//!
//! What every source has in common is here: a thread that polls its inputs on an interval,
//! saves its snapshot now and then, and stops when told. File reads are blocking, so sources
//! run on plain threads rather than the async runtime.

pub mod discovery;
pub mod files;
pub mod gpu;
pub mod log;
pub mod probe;
pub mod run_id;
pub mod slurm;
pub mod stacks;

use crate::collectors::Collector;
use crate::model::Run;
use crate::state::StateDir;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub trait Source: Send + 'static {
    /// Reads every input to its current end once.
    fn poll(&mut self);
    /// [`Source::poll`], giving up early once `stopping()` says the sidecar stops: a long
    /// read (a backlog on a file system that hangs) must not keep it from saving its state.
    fn poll_unless(&mut self, stopping: &dyn Fn() -> bool) {
        let _ = stopping;
        self.poll();
    }
    /// Saves what a restart needs, if a state directory is configured.
    fn save_snapshot(&mut self);
}

/// A count of the inputs not read once yet, which `/-/ready` and the alert engine wait on.
/// Inputs register themselves ([`FirstRead::of`]); nobody counts them by hand.
#[derive(Debug, Clone, Default)]
pub struct Unread(Arc<AtomicUsize>);

impl Unread {
    /// The counter itself, for those that wait on it.
    pub fn counter(&self) -> Arc<AtomicUsize> {
        self.0.clone()
    }
}

/// One input's first read, registered in every count that waits for it; [`FirstRead::done`]
/// takes it out of them, once.
#[derive(Debug)]
pub struct FirstRead(Vec<Arc<AtomicUsize>>);

impl FirstRead {
    pub fn of(waiting: &[&Unread]) -> FirstRead {
        FirstRead(
            waiting
                .iter()
                .map(|u| {
                    u.0.fetch_add(1, Ordering::AcqRel);
                    u.0.clone()
                })
                .collect(),
        )
    }

    pub fn done(&mut self) {
        for counter in self.0.drain(..) {
            counter.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Polls `source` every `interval` until `stop` receives a message or its sender is dropped,
/// saving a snapshot every `snapshot_every` and once more at the end.
pub fn run_until(
    mut source: Box<dyn Source>,
    interval: Duration,
    snapshot_every: Duration,
    stop: Receiver<()>,
    mut first_read: FirstRead,
) {
    let mut last_snapshot: Option<Instant> = None;
    let stopping = || {
        matches!(
            stop.try_recv(),
            Ok(()) | Err(std::sync::mpsc::TryRecvError::Disconnected)
        )
    };
    loop {
        source.poll_unless(&stopping);
        // Once: it takes itself out of the counts it was in.
        first_read.done();
        if last_snapshot.is_none_or(|t| t.elapsed() >= snapshot_every) {
            source.save_snapshot();
            last_snapshot = Some(Instant::now());
        }
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => continue,
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    source.save_snapshot();
}

/// What every source is built from (Vector's `SourceConfig::build(cx)`): the model it tells
/// and the state directory it resumes from.
pub struct Context {
    pub run: Arc<Mutex<Run>>,
    pub state: Option<StateDir>,
}

/// A source's section with what `--run-dir`'s discovery hands it while the sidecar runs (the
/// log source a `Receiver<LogConfig>`), `None` without a run folder. The section is the
/// configuration's and cloned from it; the feed is a channel's receiving end, which is not,
/// so the sidecar attaches it here (`app/sidecar/registry.rs`). Typed by the source's
/// `SourceConfig` impl: a feed handed to the wrong source does not compile.
pub struct Following<S, F> {
    pub settings: S,
    pub found: Option<F>,
}

/// Who waits for a source's first read before acting on what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Awaited {
    /// `/-/ready` and the alert engine, which must never judge half the evidence.
    ByAll,
    /// `/-/ready` only: the GPUs' first read may hang with a GPU fallen off the bus.
    ByReadiness,
    /// Nothing: the run's id, whose log may be on a mount that hangs.
    ByNothing,
}

/// A future a task source runs on the async runtime.
pub type Round<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A source of requests rather than reads (the probes): a task on the async runtime.
pub trait Task: Send + 'static {
    /// One round, to its end (`run --once`).
    fn round(&mut self) -> Round<'_>;
    /// A round every `interval` until the task is aborted; `first_read` is done after the
    /// first.
    fn run_every(self: Box<Self>, interval: Duration, first_read: FirstRead) -> Round<'static>;
}

/// How a source runs.
pub enum Runs {
    /// Blocking reads, on a thread of its own.
    Thread(Box<dyn Source>),
    /// Requests, as a task on the async runtime.
    Task(Box<dyn Task>),
}

/// One source, built: its name (its thread's), the collectors whose families it feeds (a
/// source whose collectors are all off does not run), how often it reads, who waits for its
/// first read, and the source itself.
pub struct Built {
    pub name: &'static str,
    pub collectors: &'static [Collector],
    pub interval: Duration,
    pub awaited: Awaited,
    pub runs: Runs,
}

/// One source's section of the configuration, which builds the source: the registry
/// (`app/sidecar/registry.rs`) has one per source, and the sidecar loops over it.
pub trait SourceConfig {
    /// The source, or `None` where the section asks for nothing (GPUs off, no run to name).
    fn build(self: Box<Self>, cx: &mut Context) -> anyhow::Result<Option<Built>>;
}
