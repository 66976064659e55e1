//! The one place that reads the wall clock. The model and the rules take `now` as an argument;
//! only the edges (sources, scrape, alert loop) call this.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in seconds.
pub fn now() -> f64 {
    unix_seconds(SystemTime::now())
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
