//! Each followed log on a thread of its own ([`crate::deadline`]), so that a file-system call
//! that does not return (a hung NFS or Lustre mount, a FUSE file system that stops answering)
//! holds back that log alone. The log source asks each worker to poll and waits a moment for
//! the answers; a worker that makes no progress for [`HUNG_AFTER`] is reported hung, and its
//! answer, whenever the call returns, is taken as any other: nothing read is lost or read
//! twice.

use super::followed::{FollowedLog, Polled};
use crate::deadline::{self, Waited};
use crate::model::Run;
use crate::state::LogPosition;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A log whose read has not returned for [`crate::model::HUNG_AFTER`] is reported hung:
/// `pulse_collector_up` 0, the path named in the sidecar's log, `/status` and the stall's cause.
const HUNG_AFTER: Duration = Duration::from_secs(crate::model::HUNG_AFTER as u64);

pub(super) struct Worker {
    pub(super) path: String,
    worker: deadline::Worker<(), Polled>,
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
        let worker =
            deadline::Worker::start(format!("log {index}"), HUNG_AFTER, move |(), progress| {
                log.poll(index, &run, &positions, || progress.made())
            })?;
        Ok(Worker {
            path,
            worker,
            last: Polled {
                ok: false,
                switches: 0,
            },
            hung: false,
        })
    }

    /// Asks for a poll, unless one is still in flight.
    pub(super) fn ask(&mut self) {
        self.worker.ask(());
    }

    pub(super) fn busy(&self) -> bool {
        self.worker.busy()
    }

    /// Waits until `deadline` for the poll in flight; true once it has answered.
    pub(super) fn answered_by(&mut self, deadline: Instant) -> bool {
        match self.worker.wait_until(deadline) {
            Waited::Idle => true,
            Waited::Done(polled) => {
                self.last = polled;
                true
            }
            Waited::Pending | Waited::Hung { .. } => false,
            // The thread is gone (it panicked): this log is not read any more.
            Waited::Gone => {
                self.last.ok = false;
                true
            }
        }
    }

    /// Whether the poll in flight has made no progress for [`HUNG_AFTER`].
    pub(super) fn stuck(&self) -> bool {
        self.worker.hung_since().is_some()
    }
}
