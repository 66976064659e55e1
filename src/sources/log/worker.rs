//! Each followed log on a thread of its own, so that a file-system call that does not return
//! (a hung NFS or Lustre mount, a FUSE file system that stops answering) holds back that log
//! alone. The log source asks each worker to poll and waits a moment for the answers; a worker
//! that makes no progress for [`HUNG_AFTER`] is reported hung, and its answer, whenever the
//! call returns, is taken as any other: nothing read is lost or read twice.

use super::followed::{FollowedLog, Polled};
use crate::model::Run;
use crate::state::LogPosition;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// A log whose read has not returned for [`crate::model::HUNG_AFTER`] is reported hung:
/// `pulse_collector_up` 0, the path named in the sidecar's log, `/status` and the stall's cause.
const HUNG_AFTER: Duration = Duration::from_secs(crate::model::HUNG_AFTER as u64);

pub(super) struct Worker {
    pub(super) path: String,
    polls: mpsc::Sender<()>,
    answers: mpsc::Receiver<Polled>,
    /// When the poll in flight was asked for; `None` when the worker is idle.
    asked: Option<Instant>,
    /// Milliseconds after `started` of the worker's latest progress (a batch read).
    progress: Arc<AtomicU64>,
    started: Instant,
    /// The latest answer.
    pub(super) last: Polled,
    /// Reported hung, and not answered since.
    pub(super) hung: bool,
}

impl Worker {
    /// Starts `log`'s thread; it polls when asked, until the source drops it.
    pub(super) fn start(
        mut log: FollowedLog,
        index: usize,
        run: Arc<Mutex<Run>>,
        positions: Arc<Mutex<Vec<LogPosition>>>,
    ) -> std::io::Result<Worker> {
        let path = log.follower.path().display().to_string();
        let (polls, asked) = mpsc::channel::<()>();
        let (answer, answers) = mpsc::channel();
        let progress = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let made = progress.clone();
        let clock = crate::clock::carried();
        std::thread::Builder::new()
            .name(format!("log {index}"))
            .spawn(move || {
                crate::clock::enter(clock);
                while asked.recv().is_ok() {
                    let polled = log.poll(index, &run, &positions, || {
                        made.store(started.elapsed().as_millis() as u64, Ordering::Release)
                    });
                    if answer.send(polled).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Worker {
            path,
            polls,
            answers,
            asked: None,
            progress,
            started,
            last: Polled {
                ok: false,
                switches: 0,
            },
            hung: false,
        })
    }

    /// Asks for a poll, unless one is still in flight.
    pub(super) fn ask(&mut self) {
        if self.asked.is_none() && self.polls.send(()).is_ok() {
            self.progress
                .store(self.started.elapsed().as_millis() as u64, Ordering::Release);
            self.asked = Some(Instant::now());
        }
    }

    pub(super) fn busy(&self) -> bool {
        self.asked.is_some()
    }

    /// Waits until `deadline` for the poll in flight; true once it has answered.
    pub(super) fn answered_by(&mut self, deadline: Instant) -> bool {
        if self.asked.is_none() {
            return true;
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.answers.recv_timeout(wait) {
            Ok(polled) => {
                self.last = polled;
                self.asked = None;
                true
            }
            Err(mpsc::RecvTimeoutError::Timeout) => false,
            // The thread is gone (it panicked): this log is not read any more.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.last.ok = false;
                self.asked = None;
                true
            }
        }
    }

    /// Whether the poll in flight has made no progress for [`HUNG_AFTER`].
    pub(super) fn stuck(&self) -> bool {
        self.asked.is_some() && {
            let last = Duration::from_millis(self.progress.load(Ordering::Acquire));
            self.started.elapsed().saturating_sub(last) >= HUNG_AFTER
        }
    }
}
