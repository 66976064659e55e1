//! The process's file descriptors: the soft limit raised to the hard one at start (as Go's
//! runtime does for every Go exporter), and running out of them said once in a while and
//! counted, never once per file per poll.
//!
//! Output files hold descriptors only while they are written (`max_open_files`), so a run
//! folder of thousands of files does not come near the limit; this is the net for what is left
//! (a lower hard limit, other sources, many connections), so that `/metrics` keeps answering.

use crate::lock::Locked;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A run out of descriptors is said at most this often, with how many calls failed since.
const SAY_EVERY: Duration = Duration::from_secs(60);

static EXHAUSTED: AtomicU64 = AtomicU64::new(0);
static SAID: Mutex<Option<(Instant, u64)>> = Mutex::new(None);

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, and says so.
pub fn raise() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a plain syscall filling a struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    let soft = limit.rlim_cur;
    if soft >= limit.rlim_max {
        return;
    }
    let raised = libc::rlimit {
        rlim_cur: limit.rlim_max,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: as above; raising the soft limit up to the hard one needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        let e = io::Error::last_os_error();
        tracing::warn!("cannot raise the open-file limit from {soft}: {e}");
        return;
    }
    tracing::info!(
        "raised the open-file limit (RLIMIT_NOFILE) from {soft} to the hard limit, {}",
        limit.rlim_max
    );
}

/// Whether `e` is a want of file descriptors (EMFILE, ENFILE); if so it is counted and said at
/// most once a minute. The caller then says nothing of it itself.
pub fn note(e: &io::Error) -> bool {
    if !matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
        return false;
    }
    let total = EXHAUSTED.fetch_add(1, Ordering::Relaxed) + 1;
    let mut said = SAID.locked();
    let due = said.is_none_or(|(at, _)| at.elapsed() >= SAY_EVERY);
    if due {
        let since = said.map_or(total, |(_, then)| total - then);
        tracing::warn!(
            failed = since,
            "out of file descriptors ({e}): {since} calls failed since the last such message; \
             lower max_open_files or raise the process's open-file limit (LimitNOFILE=)"
        );
        *said = Some((Instant::now(), total));
    }
    true
}

/// Calls that failed for want of file descriptors since start, for `pulse_fd_exhausted_total`.
pub fn exhausted_total() -> u64 {
    EXHAUSTED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_want_of_descriptors_is_noted() {
        let before = exhausted_total();
        assert!(!note(&io::Error::from_raw_os_error(libc::ENOENT)));
        assert!(note(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(note(&io::Error::from_raw_os_error(libc::ENFILE)));
        assert!(exhausted_total() >= before + 2);
    }
}
