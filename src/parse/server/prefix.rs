//! The prefix each engine's logger puts before a message: when, which rank, how severe.
//!
//! ```text
//! [2026-08-28 22:30:08 TP0] …                     SGLang, one scheduler
//! [2026-08-28 22:30:08.123 DP1 TP4 EP4] …         SGLang, DP attention (milliseconds in newer releases)
//! [2026-08-28 22:30:08] …                         SGLang, the HTTP server and tokenizer manager
//! (APIServer pid=3402897) INFO 08-17 02:59:34 [loggers.py:310] …   vLLM ≥ 0.10
//! INFO 08-17 02:59:34 [loggers.py:310] …          vLLM 0.8 – 0.9
//! INFO 08-17 02:59:34 metrics.py:351] …           vLLM ≤ 0.7
//! ```
//!
//! vLLM prints no year: [`Stamp::resolve`] takes it from a reference time (the file's mtime at
//! start-up, the clock after), the latest year that does not put the line more than a day after
//! it. Times are the node's local time; the caller gives its UTC offset.

use super::super::number::parse_u64;

/// A line's own time, as printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// `None` for vLLM's `MM-DD HH:MM:SS`.
    pub year: Option<i64>,
    /// `None` for SGLang ≤ 0.3.0's `HH:MM:SS`.
    pub date: Option<(u8, u8)>,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
    pub millis: u16,
}

impl Stamp {
    /// Seconds since the epoch, for a node `utc_offset` seconds east of UTC; a year-less stamp
    /// takes the year that puts it closest before `reference` (plus a day of slack for clocks).
    pub fn resolve(&self, reference: f64, utc_offset: i64) -> f64 {
        let local = reference as i64 + utc_offset;
        let today = local.div_euclid(86_400);
        let time =
            i64::from(self.hour) * 3600 + i64::from(self.minute) * 60 + i64::from(self.second);
        let at = |days: i64| {
            (days * 86_400 + time - utc_offset) as f64 + f64::from(self.millis) / 1000.0
        };
        let ahead = |t: f64| t > reference + 86_400.0;
        match (self.year, self.date) {
            (Some(year), Some((month, day))) => at(days_from_civil(year, month, day)),
            (None, Some((month, day))) => {
                let year = civil_year(today);
                let this_year = at(days_from_civil(year, month, day));
                if ahead(this_year) {
                    at(days_from_civil(year - 1, month, day))
                } else {
                    this_year
                }
            }
            // A time alone is today's, or yesterday's when that would be ahead of the
            // reference (a minute of slack for clocks).
            _ => {
                if at(today) > reference + 60.0 {
                    at(today - 1)
                } else {
                    at(today)
                }
            }
        }
    }
}

/// Howard Hinnant's `days_from_civil`: days since 1970-01-01 of a proleptic Gregorian date.
pub(crate) fn days_from_civil(year: i64, month: u8, day: u8) -> i64 {
    let (m, d) = (i64::from(month), i64::from(day));
    let y = if m <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The year of a day counted from 1970-01-01.
fn civil_year(days: i64) -> i64 {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    yoe + era * 400 + i64::from(month <= 2)
}

/// What comes before a message.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Prefix<'a> {
    pub stamp: Option<Stamp>,
    /// SGLang's `DPn`: the data-parallel rank whose scheduler printed the line.
    pub dp_rank: Option<u32>,
    /// vLLM's `INFO`, `WARNING`, `ERROR`…; SGLang prints no level.
    pub level: Option<&'a [u8]>,
    /// Whether a logger's prefix was found: a line without one is a continuation (a
    /// traceback's frames, a banner) or another program's output.
    pub found: bool,
    /// The message after the prefix (the whole line when none was found).
    pub message: &'a [u8],
}

/// Splits a line into its logger prefix and message.
pub fn split(line: &[u8]) -> Prefix<'_> {
    let line = process_tag(line);
    if let Some(p) = sglang(line) {
        return p;
    }
    if let Some(p) = vllm(line) {
        return p;
    }
    Prefix {
        message: line,
        ..Prefix::default()
    }
}

/// vLLM ≥ 0.10 tags each process's lines: `(APIServer pid=3402897) `, `(EngineCore_DP0 pid=12) `.
fn process_tag(line: &[u8]) -> &[u8] {
    let Some(rest) = line.strip_prefix(b"(") else {
        return line;
    };
    let Some(close) = memchr::memchr(b')', rest) else {
        return line;
    };
    let inside = &rest[..close];
    match memchr::memmem::find(inside, b" pid=") {
        Some(at) if parse_u64(&inside[at + 5..]).is_some() => rest[close + 1..]
            .strip_prefix(b" ")
            .unwrap_or(&rest[close + 1..]),
        _ => line,
    }
}

/// `[YYYY-MM-DD HH:MM:SS(.mmm)( TAG)*] message`, `[HH:MM:SS TAG] message` (≤ 0.3.0). Tags are
/// `DPn`, `PPn`, `ATTN_CPn`, `MOE_DPn`, `TPn`, `EPn`; 0.3.6 printed `DP-1` on every server
/// without data parallelism, which is no rank.
fn sglang(line: &[u8]) -> Option<Prefix<'_>> {
    let rest = line.strip_prefix(b"[")?;
    let close = memchr::memchr(b']', rest)?;
    let inside = &rest[..close];
    let mut words = inside
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty())
        .peekable();
    let date = match words.peek() {
        Some(w) if w.contains(&b'-') => {
            let (year, month, day) = date3(words.next()?, b'-')?;
            Some((
                year as i64,
                u8::try_from(month).ok()?,
                u8::try_from(day).ok()?,
            ))
        }
        _ => None,
    };
    let (hour, minute, second, millis) = clock(words.next()?)?;
    let mut dp_rank = None;
    for tag in words {
        let letters = tag
            .iter()
            .take_while(|b| b.is_ascii_uppercase() || **b == b'_')
            .count();
        if letters == 0 {
            return None;
        }
        let number = &tag[letters..];
        if number == b"-1" {
            continue;
        }
        let rank = parse_u64(number)?;
        if &tag[..letters] == b"DP" {
            dp_rank = Some(u32::try_from(rank).ok()?);
        }
    }
    let message = &rest[close + 1..];
    Some(Prefix {
        stamp: Some(Stamp {
            year: date.map(|d| d.0),
            date: date.map(|d| (d.1, d.2)),
            hour,
            minute,
            second,
            millis,
        }),
        dp_rank,
        level: None,
        found: true,
        message: message.strip_prefix(b" ").unwrap_or(message),
    })
}

/// `LEVEL MM-DD HH:MM:SS(.mmm) [file.py:123] message` or `LEVEL MM-DD HH:MM:SS file.py:123] message`.
fn vllm(line: &[u8]) -> Option<Prefix<'_>> {
    let space = memchr::memchr(b' ', line)?;
    let level = &line[..space];
    if !matches!(
        level,
        b"DEBUG" | b"INFO" | b"WARNING" | b"WARN" | b"ERROR" | b"CRITICAL"
    ) {
        return None;
    }
    let rest = &line[space + 1..];
    let space = memchr::memchr(b' ', rest)?;
    let (month, day) = date2(&rest[..space])?;
    let rest = &rest[space + 1..];
    let space = memchr::memchr(b' ', rest)?;
    let (hour, minute, second, millis) = clock(&rest[..space])?;
    let rest = &rest[space + 1..];
    // The logger's `[file.py:123]` (or `file.py:123]`), then the message.
    let close = memchr::memchr(b']', rest)?;
    let site = rest[..close].strip_prefix(b"[").unwrap_or(&rest[..close]);
    let colon = memchr::memrchr(b':', site)?;
    parse_u64(&site[colon + 1..])?;
    let message = &rest[close + 1..];
    Some(Prefix {
        stamp: Some(Stamp {
            year: None,
            date: Some((month, day)),
            hour,
            minute,
            second,
            millis,
        }),
        dp_rank: None,
        level: Some(level),
        found: true,
        message: message.strip_prefix(b" ").unwrap_or(message),
    })
}

/// `2026-08-28`.
fn date3(s: &[u8], sep: u8) -> Option<(u64, u64, u64)> {
    let mut parts = s.split(|&b| b == sep);
    let y = parse_u64(parts.next()?)?;
    let m = parse_u64(parts.next()?)?;
    let d = parse_u64(parts.next()?)?;
    (parts.next().is_none() && (1..=12).contains(&m) && (1..=31).contains(&d) && y < 10_000)
        .then_some((y, m, d))
}

/// `08-17`.
fn date2(s: &[u8]) -> Option<(u8, u8)> {
    let (m, d) = (s.get(..2)?, s.get(3..)?);
    if s.len() != 5 || s[2] != b'-' {
        return None;
    }
    let (m, d) = (parse_u64(m)?, parse_u64(d)?);
    ((1..=12).contains(&m) && (1..=31).contains(&d)).then_some((m as u8, d as u8))
}

/// `22:30:08` or `22:30:08.123` (also `,123`).
fn clock(s: &[u8]) -> Option<(u8, u8, u8, u16)> {
    let (hms, frac) = match s.iter().position(|&b| b == b'.' || b == b',') {
        Some(at) => (&s[..at], Some(&s[at + 1..])),
        None => (s, None),
    };
    if hms.len() != 8 || hms[2] != b':' || hms[5] != b':' {
        return None;
    }
    let h = parse_u64(&hms[..2])?;
    let m = parse_u64(&hms[3..5])?;
    let sec = parse_u64(&hms[6..])?;
    if h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let millis = match frac {
        None => 0,
        Some(f) if !f.is_empty() && f.len() <= 6 => {
            let digits = parse_u64(f)?;
            // Scaled to milliseconds whatever the precision printed.
            (digits as f64 * 10f64.powi(3 - f.len() as i32)).floor() as u16
        }
        Some(_) => return None,
    };
    Some((h as u8, m as u8, sec as u8, millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_prefixes_with_ranks_and_milliseconds() {
        let p = split(b"[2026-08-28 22:30:08 DP1 TP4 EP4] Decode batch, #running-req: 75");
        assert_eq!(p.dp_rank, Some(1));
        assert_eq!(p.message, b"Decode batch, #running-req: 75");
        assert!(p.found);
        let s = p.stamp.unwrap();
        assert_eq!((s.year, s.date, s.hour), (Some(2026), Some((8, 28)), 22));
        assert_eq!(s.resolve(0.0, 0), 1_787_956_208.0);
        let p = split(b"[2026-08-28 22:30:08.250 TP0] x");
        assert_eq!(p.dp_rank, None);
        assert_eq!(
            p.stamp.unwrap().resolve(0.0, 3600),
            1_787_956_208.25 - 3600.0
        );
        assert!(split(b"[2026-08-28 22:30:08] Health check failed.").found);
        // Not a prefix: a bracket that holds something else.
        assert!(!split(b"[rank0]: Traceback (most recent call last):").found);
        assert!(!split(b"[2026-08-28 nonsense TP0] x").found);
        // 0.3.6's `DP-1` is no rank; 0.5.10's tags carry underscores.
        let p = split(b"[2024-11-20 10:00:01 DP-1 TP0] Decode batch. #running-req: 33");
        assert!(p.found && p.dp_rank.is_none());
        let p = split(b"[2026-01-01 10:00:01 DP2 PP0 ATTN_CP0 MOE_DP1 TP4 EP4] m");
        assert_eq!(p.dp_rank, Some(2));
        // ≤ 0.3.0 prints the time alone: today's, or yesterday's if that is ahead.
        let p = split(b"[10:00:03 TP0] Decode batch.");
        let noon = 1_787_918_400.0; // 2026-08-28 12:00:00 UTC
        assert_eq!(p.stamp.unwrap().resolve(noon, 0), noon - 7197.0);
        let p = split(b"[23:00:00 TP0] Decode batch.");
        assert_eq!(p.stamp.unwrap().resolve(noon, 0), noon - 13.0 * 3600.0);
    }

    #[test]
    fn vllm_prefixes_of_every_release() {
        for line in [
            &b"(APIServer pid=3402897) INFO 08-17 02:59:34 [loggers.py:310] Engine 000: x"[..],
            b"INFO 08-17 02:59:34 [loggers.py:310] Engine 000: x",
            b"(EngineCore_DP0 pid=12) INFO 08-17 02:59:34 [core.py:1] Engine 000: x",
        ] {
            let p = split(line);
            assert!(p.found, "{}", String::from_utf8_lossy(line));
            assert_eq!(p.message, b"Engine 000: x");
            assert_eq!(p.level, Some(&b"INFO"[..]));
        }
        let p = split(b"WARNING 08-17 03:00:00 scheduler.py:1089] Sequence group 12 is preempted");
        assert_eq!(p.message, b"Sequence group 12 is preempted");
        assert_eq!(p.level, Some(&b"WARNING"[..]));
        // uvicorn's access log is no logger prefix of vLLM's.
        let p =
            split(b"(APIServer pid=9) INFO:     127.0.0.1:53650 - \"GET /health HTTP/1.1\" 200 OK");
        assert!(!p.found);
        assert!(p.message.starts_with(b"INFO:"));
    }

    #[test]
    fn year_less_stamps_take_the_reference_year() {
        let stamp = split(b"INFO 12-31 23:59:50 [x.py:1] m").stamp.unwrap();
        // 2027-01-01 00:00:10 UTC: the line is from the last day of 2026.
        let reference = 1_798_761_610.0;
        assert_eq!(stamp.resolve(reference, 0), reference - 20.0);
        let stamp = split(b"INFO 01-01 00:00:05 [x.py:1] m").stamp.unwrap();
        assert_eq!(stamp.resolve(reference, 0), reference - 5.0);
        // A day ahead of the reference is last year's.
        let stamp = split(b"INFO 06-01 00:00:00 [x.py:1] m").stamp.unwrap();
        let jan = stamp.resolve(reference, 0);
        assert!(jan < reference && reference - jan > 180.0 * 86_400.0);
    }

    #[test]
    fn civil_dates_round_trip() {
        for days in [-1000_i64, 0, 59, 60, 365, 10_957, 20_000, 25_000] {
            let year = civil_year(days);
            assert!(days_from_civil(year, 1, 1) <= days && days < days_from_civil(year + 1, 1, 1));
        }
    }
}
