//! A blocking call on a worker thread of its own, under a deadline: a file-system call on a
//! mount that hangs (NFS, Lustre, FUSE) or an NVML call with a GPU fallen off the bus may not
//! return for minutes, and the thread that asked must go on meanwhile.
//!
//! One call is in flight at a time: a worker asked again while busy ignores it, so a call
//! that hangs holds one thread, never one per round. Its answer, whenever it comes, is taken
//! like any other: nothing is lost or done twice. A call counts as hung once it has made no
//! progress for the worker's `hung_after`; a long call that reports progress (a backlog read
//! batch by batch) does not. Whoever wants to go on without a hung worker drops it and starts
//! another: the old thread ends once its call returns.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// What the call in flight came to by the deadline.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited<T> {
    /// No call was in flight.
    Idle,
    Done(T),
    /// Still under way, and not hung (yet).
    Pending,
    /// Still under way, with no progress since `since` for longer than `hung_after`.
    Hung {
        since: Instant,
    },
    /// The thread is gone (the call panicked): nothing more comes from this worker.
    Gone,
}

/// The call's progress, which it reports as it goes so that a long call is not taken for a
/// hung one.
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    /// Milliseconds after `started` of the latest progress.
    made: AtomicU64,
}

impl Progress {
    /// The call got somewhere.
    pub fn made(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.made.store(ms, Ordering::Release);
    }

    /// When the latest progress was made, rounded down to the millisecond: never later than
    /// it was, so that a deadline computed from it has passed when a wait for it ends.
    fn last(&self) -> Instant {
        self.started + Duration::from_millis(self.made.load(Ordering::Acquire))
    }
}

/// The handle on one worker thread, which makes call `Q` → `T` when asked.
pub struct Worker<Q, T> {
    asks: mpsc::Sender<Q>,
    answers: mpsc::Receiver<T>,
    /// A call was asked for and has not answered.
    busy: bool,
    progress: Arc<Progress>,
    hung_after: Duration,
}

impl<Q: Send + 'static, T: Send + 'static> Worker<Q, T> {
    /// Starts thread `name`, which runs `call` for each ask until the worker is dropped.
    pub fn start(
        name: String,
        hung_after: Duration,
        mut call: impl FnMut(Q, &Progress) -> T + Send + 'static,
    ) -> std::io::Result<Worker<Q, T>> {
        let (asks, asked) = mpsc::channel::<Q>();
        let (answer, answers) = mpsc::channel();
        let progress = Arc::new(Progress {
            started: Instant::now(),
            made: AtomicU64::new(0),
        });
        let made = progress.clone();
        // A stepped test's clock goes with the call (docs/testing.md).
        let clock = crate::clock::carried();
        std::thread::Builder::new().name(name).spawn(move || {
            crate::clock::enter(clock);
            for question in asked {
                if answer.send(call(question, &made)).is_err() {
                    return;
                }
            }
        })?;
        Ok(Worker {
            asks,
            answers,
            busy: false,
            progress,
            hung_after,
        })
    }

    /// Asks for a call, unless one is in flight (or the thread is gone).
    pub fn ask(&mut self, question: Q) {
        if !self.busy && self.asks.send(question).is_ok() {
            self.progress.made();
            self.busy = true;
        }
    }

    /// Whether a call is in flight.
    pub fn busy(&self) -> bool {
        self.busy
    }

    /// When the call in flight counts as hung if it makes no more progress; `None` when idle.
    pub fn hung_at(&self) -> Option<Instant> {
        self.busy.then(|| self.progress.last() + self.hung_after)
    }

    /// Since when the call in flight has made no progress, if that is `hung_after` already.
    pub fn hung_since(&self) -> Option<Instant> {
        let since = self.progress.last();
        (self.busy && since + self.hung_after <= Instant::now()).then_some(since)
    }

    /// Waits until `deadline` at most for the call in flight.
    pub fn wait_until(&mut self, deadline: Instant) -> Waited<T> {
        if !self.busy {
            return Waited::Idle;
        }
        match self
            .answers
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(answer) => {
                self.busy = false;
                Waited::Done(answer)
            }
            Err(mpsc::RecvTimeoutError::Timeout) => match self.hung_since() {
                Some(since) => Waited::Hung { since },
                None => Waited::Pending,
            },
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.busy = false;
                Waited::Gone
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Waited, Worker};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// A worker whose call answers what the test sends it, and blocks until then.
    fn blocking(hung_after: Duration) -> (Worker<u32, u32>, mpsc::Sender<u32>) {
        let (release, released) = mpsc::channel::<u32>();
        let worker = Worker::start("test".into(), hung_after, move |q, _| {
            q + released.recv().unwrap_or(0)
        })
        .unwrap();
        (worker, release)
    }

    #[test]
    fn a_call_that_does_not_return_is_hung_and_its_answer_is_taken_later() {
        let (mut worker, release) = blocking(Duration::ZERO);
        assert_eq!(worker.wait_until(Instant::now()), Waited::Idle);
        worker.ask(1);
        assert!(worker.busy());
        let asked = worker.hung_at().unwrap();
        match worker.wait_until(Instant::now()) {
            Waited::Hung { since } => assert_eq!(since, asked),
            other => panic!("{other:?}"),
        }
        // Asked again while hung: ignored, one call in flight.
        worker.ask(100);
        release.send(10).unwrap();
        let bound = Instant::now() + Duration::from_secs(60);
        assert_eq!(worker.wait_until(bound), Waited::Done(11));
        assert!(!worker.busy());
        worker.ask(2);
        release.send(20).unwrap();
        assert_eq!(worker.wait_until(bound), Waited::Done(22));
    }

    #[test]
    fn a_call_not_hung_yet_is_pending() {
        let (mut worker, release) = blocking(Duration::from_secs(3600));
        worker.ask(1);
        assert_eq!(worker.wait_until(Instant::now()), Waited::Pending);
        assert_eq!(worker.hung_since(), None);
        release.send(1).unwrap();
        let bound = Instant::now() + Duration::from_secs(60);
        assert_eq!(worker.wait_until(bound), Waited::Done(2));
    }

    #[test]
    fn a_call_that_panics_leaves_the_worker_gone() {
        let mut worker = Worker::<(), ()>::start("test".into(), Duration::ZERO, |(), _| {
            panic!("the call failed")
        })
        .unwrap();
        worker.ask(());
        let bound = Instant::now() + Duration::from_secs(60);
        assert_eq!(worker.wait_until(bound), Waited::Gone);
        assert!(!worker.busy());
    }

    #[test]
    fn dropping_a_hung_worker_ends_its_thread_once_the_call_returns() {
        let (ended, end) = mpsc::channel::<()>();
        let (release, released) = mpsc::channel::<()>();
        let mut worker = Worker::start("test".into(), Duration::ZERO, move |(), _| {
            let _ = released.recv();
            let _ = ended.send(());
        })
        .unwrap();
        worker.ask(());
        assert!(matches!(
            worker.wait_until(Instant::now()),
            Waited::Hung { .. }
        ));
        drop(worker);
        release.send(()).unwrap();
        let bound = Duration::from_secs(60);
        assert_eq!(end.recv_timeout(bound), Ok(()));
        // The call, and with it its sender, goes with the thread.
        assert_eq!(
            end.recv_timeout(bound),
            Err(mpsc::RecvTimeoutError::Disconnected)
        );
    }
}
