//! The one place that reads the wall clock. The model and the rules take `now` as an argument;
//! only the edges (sources, scrape, alert loop) call this.
//!
//! A test may inject a clock of its own on its thread ([`Injected`]): `now` there, and on the
//! threads its sources start ([`carried`], [`enter`]), is the test's, which it moves step by
//! step, so that no test waits on wall time (docs/testing.md#stepped-in-process). Only the
//! in-process harness injects one; the sidecar never does.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

thread_local! {
    static INJECTED: RefCell<Option<Injected>> = const { RefCell::new(None) };
}

/// Unix time in seconds: the wall clock's, or the injected clock's on a thread that has one.
pub fn now() -> f64 {
    INJECTED
        .with(|i| i.borrow().as_ref().map(Injected::now))
        .unwrap_or_else(|| unix_seconds(SystemTime::now()))
}

/// A clock that a test moves: shared by the threads that entered it, so a source's worker
/// thread reads the same moment as the test that steps it.
#[derive(Debug, Clone)]
pub struct Injected(Arc<AtomicU64>);

impl Injected {
    /// A clock at `at` (Unix seconds), entered on this thread.
    pub fn at(at: f64) -> Injected {
        let clock = Injected(Arc::new(AtomicU64::new(at.to_bits())));
        enter(Some(clock.clone()));
        clock
    }

    pub fn now(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Acquire))
    }

    /// Moves the clock on by `by`, for every thread that entered it.
    pub fn advance(&self, by: Duration) {
        let next = self.now() + by.as_secs_f64();
        self.0.store(next.to_bits(), Ordering::Release);
    }
}

/// This thread's injected clock, if any: what a thread it starts should [`enter`], so that
/// a source's worker keeps the clock of the test that steps it.
pub fn carried() -> Option<Injected> {
    INJECTED.with(|i| i.borrow().clone())
}

/// Makes `clock` this thread's (`None`: the wall clock).
pub fn enter(clock: Option<Injected>) {
    INJECTED.with(|i| *i.borrow_mut() = clock);
}

/// A `SystemTime` as Unix seconds (0 for times before the epoch).
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The node's offset from UTC now, in seconds east: log lines print local time.
pub fn utc_offset() -> i64 {
    let t = now() as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which outlives the call; a zeroed `tm` is a
    // valid value of the plain C struct.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return 0;
        }
        tm.tm_gmtoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_injected_clock_is_the_threads_that_enter_it_and_moves_only_when_stepped() {
        let clock = Injected::at(1000.0);
        assert_eq!(now(), 1000.0);
        let carried = carried();
        let there = std::thread::spawn(move || {
            let wall = now();
            enter(carried);
            (wall, now())
        });
        clock.advance(Duration::from_millis(1500));
        assert_eq!(now(), 1001.5);
        let (wall, entered) = there.join().unwrap();
        assert!(
            wall > 1_600_000_000.0,
            "a thread that enters nothing: {wall}"
        );
        assert!(entered == 1000.0 || entered == 1001.5, "{entered}");
        enter(None);
        assert!(now() > 1_600_000_000.0);
    }
}
