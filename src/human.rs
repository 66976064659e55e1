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

#[cfg(test)]
mod tests {
    use super::*;

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
