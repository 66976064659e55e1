//! The `tqdm` format: progress bars as tqdm draws them into a log.
//!
//! ```text
//! B1_glaive:  45%|████▌     | 4500/10000 [01:23<01:42, 54.2it/s]
//! B1_glaive:   0%|          | 0/10000 [00:00<?, ?it/s]
//! slow:  10%|#         | 10/100 [00:18<02:45, 1.85s/it]
//! B2: 4500it [01:23, 54.2it/s]
//! ```
//!
//! tqdm separates frames with `\r`, which the tailer already splits on, so each frame arrives
//! here as a line of its own. The description before the bar, if any, names the partition.

use super::number::{clock_seconds, leading_decimal, leading_digits, parse_f64, parse_u64, trim};
use super::{Event, Progress};

#[derive(Debug, Clone, Default)]
pub struct Tqdm;

impl Tqdm {
    pub fn parse<'a>(&self, line: &'a [u8]) -> Option<Event<'a>> {
        match memchr::memmem::find(line, b"%|") {
            Some(pct) => with_bar(line, pct),
            None => without_total(line),
        }
        .map(Event::Progress)
    }
}

fn with_bar(line: &[u8], pct: usize) -> Option<Progress<'_>> {
    let head = &line[..pct];
    // The percentage is the number right before `%|`; the description is what precedes it.
    let digits = head.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let desc = description(&head[..head.len() - digits]);
    let after_bar_start = &line[pct + 2..];
    let close = memchr::memchr(b'|', after_bar_start)?;
    let stats = trim(&after_bar_start[close + 1..]);
    let (completed, rest) = leading_digits(stats);
    let rest = rest.strip_prefix(b"/")?;
    let (planned, rest) = leading_digits(rest);
    let mut p = Progress {
        partition: desc,
        completed: Some(parse_u64(completed)?),
        planned: Some(parse_u64(planned)?),
        ..Progress::default()
    };
    bracket(trim(rest), &mut p);
    Some(p)
}

/// `desc: 4500it [01:23, 54.2it/s]`: tqdm without a known total.
fn without_total(line: &[u8]) -> Option<Progress<'_>> {
    let open = memchr::memmem::find(line, b" [")?;
    let head = trim(&line[..open]);
    let word_start = head
        .iter()
        .rposition(|b| b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    let (count, unit) = leading_digits(&head[word_start..]);
    if unit.is_empty() || !unit.iter().all(u8::is_ascii_alphabetic) {
        return None;
    }
    let mut p = Progress {
        partition: description(&head[..word_start]),
        completed: Some(parse_u64(count)?),
        ..Progress::default()
    };
    bracket(&line[open + 1..], &mut p);
    // Without the rate bracket this is just a line that ends in a word and a bracket.
    p.requests_per_second.map(|_| p)
}

/// `B1_glaive: ` → `Some("B1_glaive")`; whitespace or nothing → `None`.
fn description(s: &[u8]) -> Option<&str> {
    let s = trim(s);
    let s = trim(s.strip_suffix(b":").unwrap_or(s));
    std::str::from_utf8(s).ok().filter(|d| !d.is_empty())
}

/// `[01:23<01:42, 54.2it/s]` or `[01:23, 54.2it/s, loss=0.3]`: remaining time and rate.
fn bracket(s: &[u8], p: &mut Progress<'_>) {
    let Some(inner) = s
        .strip_prefix(b"[")
        .and_then(|s| s.split(|&b| b == b']').next())
    else {
        return;
    };
    let mut fields = inner.split(|&b| b == b',');
    if let Some(times) = fields.next() {
        if let Some(lt) = memchr::memchr(b'<', times) {
            p.eta_seconds = clock_seconds(trim(&times[lt + 1..]));
        }
    }
    if let Some(rate) = fields.next() {
        p.requests_per_second = rate_per_second(trim(rate));
    }
}

/// `54.2it/s` → 54.2; `1.85s/it` → 1/1.85; `?it/s` → unknown.
fn rate_per_second(s: &[u8]) -> Option<f64> {
    let (num, unit) = leading_decimal(s);
    let v = parse_f64(num)?;
    if unit.starts_with(b"s/") {
        (v > 0.0).then(|| 1.0 / v)
    } else if unit.ends_with(b"/s") {
        Some(v)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(line: &str) -> Progress<'_> {
        match Tqdm.parse(line.as_bytes()) {
            Some(Event::Progress(p)) => p,
            other => panic!("{line:?} → {other:?}"),
        }
    }

    #[test]
    fn unicode_bar_with_description() {
        let p = progress("B1_glaive:  45%|████▌     | 4500/10000 [01:23<01:42, 54.2it/s]");
        assert_eq!(p.partition, Some("B1_glaive"));
        assert_eq!((p.completed, p.planned), (Some(4500), Some(10000)));
        assert_eq!(p.eta_seconds, Some(102.0));
        assert_eq!(p.requests_per_second, Some(54.2));
    }

    #[test]
    fn ascii_bar_slow_rate() {
        let p = progress("slow:  10%|#         | 10/100 [00:18<02:45,  1.85s/it]");
        assert_eq!(p.partition, Some("slow"));
        assert_eq!(p.eta_seconds, Some(165.0));
        let rps = p.requests_per_second.unwrap();
        assert!((rps - 1.0 / 1.85).abs() < 1e-9);
    }

    #[test]
    fn start_frame_has_unknown_rate() {
        let p = progress("  0%|          | 0/10000 [00:00<?, ?it/s]");
        assert_eq!(p.partition, None);
        assert_eq!(p.completed, Some(0));
        assert_eq!(p.eta_seconds, None);
        assert_eq!(p.requests_per_second, None);
    }

    #[test]
    fn postfix_and_hours() {
        let p = progress("gen: 100%|██████████| 10/10 [1:00:05<00:00, 2.00req/s, err=0]");
        assert_eq!(p.completed, Some(10));
        assert_eq!(p.eta_seconds, Some(0.0));
        assert_eq!(p.requests_per_second, Some(2.0));
    }

    #[test]
    fn unknown_total() {
        let p = progress("B2: 4500it [01:23, 54.2it/s]");
        assert_eq!(p.partition, Some("B2"));
        assert_eq!((p.completed, p.planned), (Some(4500), None));
        assert_eq!(p.requests_per_second, Some(54.2));
    }

    #[test]
    fn non_bars() {
        assert_eq!(Tqdm.parse(b"loading 100% done"), None);
        assert_eq!(Tqdm.parse(b"see [docs] for more"), None);
        assert_eq!(Tqdm.parse(b"x%|no numbers|"), None);
        assert_eq!(Tqdm.parse(b""), None);
    }
}
