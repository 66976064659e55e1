//! Figures as people read them, the same in the terminal, on the page and in the emails.

/// 45s, 14m, 2h05m, 3d04h.
pub fn human(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// One character per value, scaled from 0 to the largest: `▁▃▅█`.
pub fn sparkline(values: &[f64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    values
        .iter()
        .map(|v| {
            if !v.is_finite() || max <= 0.0 {
                BARS[0]
            } else {
                BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

/// A Unix time to the second, in UTC (RFC 3339). A time from a log line can be anything: it is
/// clamped rather than overflow `SystemTime`.
pub fn utc(t: f64) -> String {
    let since_epoch = std::time::Duration::try_from_secs_f64(t.max(0.0)).unwrap_or_default();
    let at = std::time::UNIX_EPOCH
        .checked_add(since_epoch)
        .unwrap_or(std::time::UNIX_EPOCH);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A Unix time to the minute, in UTC: "2026-12-02 14:20Z".
pub fn utc_minute(t: f64) -> String {
    let Some(at) =
        std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs_f64(t.max(0.0)))
    else {
        return "?".to_owned();
    };
    let stamp = humantime::format_rfc3339_seconds(at).to_string();
    // "2026-12-02T14:20:05Z" → "2026-12-02 14:20Z".
    format!("{} {}Z", &stamp[..10], &stamp[11..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_minutes() {
        assert_eq!(utc_minute(1_796_220_000.0), "2026-12-02 14:00Z");
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(45.0), "45s");
        assert_eq!(human(840.0), "14m");
        assert_eq!(human(7500.0), "2h05m");
        assert_eq!(human(90000.0), "1d01h");
    }

    #[test]
    fn sparklines_scale_to_the_largest_value() {
        assert_eq!(sparkline(&[0.0, 50.0, 100.0]), "▁▅█");
        assert_eq!(sparkline(&[0.0, 0.0]), "▁▁");
        assert_eq!(sparkline(&[f64::NAN, 1.0]), "▁█");
        assert_eq!(sparkline(&[]), "");
    }
}
