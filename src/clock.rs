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
