//! Small byte-level number helpers shared by the parsers.

/// Strips ASCII whitespace from both ends.
pub fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

/// Parses a run of ASCII digits. Rejects empty input, signs and overflow.
#[inline]
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u64::from(b - b'0');
    }
    Some(v)
}

/// Parses a decimal number such as `1.1` or `217`. Rejects `NaN`, `inf` and friends, which
/// `f64::from_str` would accept but no progress log means.
///
/// Short numbers (all a log prints) take a fast path that is still exact: the digits form an
/// integer below 2^53 and the divisor a power of ten below 10^19, both exact in an `f64`, so
/// IEEE division rounds the quotient correctly, as `from_str` does.
#[inline]
pub fn parse_f64(s: &[u8]) -> Option<f64> {
    let mut mantissa: u64 = 0;
    let mut digits = 0u32;
    let mut scale: Option<u32> = None;
    for &b in s {
        match b {
            b'0'..=b'9' => {
                mantissa = mantissa * 10 + u64::from(b - b'0');
                digits += 1;
                if let Some(k) = scale.as_mut() {
                    *k += 1;
                }
                if digits > 15 {
                    return std::str::from_utf8(s).ok()?.parse().ok();
                }
            }
            b'.' if scale.is_none() => scale = Some(0),
            _ => return None,
        }
    }
    if digits == 0 {
        return None;
    }
    Some(mantissa as f64 / POW10[scale.unwrap_or(0) as usize])
}

/// Exact powers of ten; `powi` is a library call that cost a sixth of the ingest time.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// Splits off the leading run of ASCII digits: `b"217tok"` → (`b"217"`, `b"tok"`).
#[inline]
pub fn leading_digits(s: &[u8]) -> (&[u8], &[u8]) {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    s.split_at(n)
}

/// Splits off a leading decimal number: `b"1.1 req/s"` → (`b"1.1"`, `b" req/s"`).
#[inline]
pub fn leading_decimal(s: &[u8]) -> (&[u8], &[u8]) {
    let n = s
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b'.')
        .count();
    s.split_at(n)
}

/// `MM:SS`, `H:MM:SS` (hours past 24 too), optionally preceded by days as `Nd, ` or as
/// Python's `timedelta` prints them (`1 day, `, `3 days, `).
pub fn clock_seconds(s: &[u8]) -> Option<f64> {
    let (days, clock) = match s.iter().position(|&b| b == b'd') {
        Some(i) => {
            let days = parse_u64(trim(&s[..i]))?;
            let rest = &s[i + 1..];
            let rest = rest
                .strip_prefix(b"ays")
                .or_else(|| rest.strip_prefix(b"ay"))
                .unwrap_or(rest);
            let rest = trim(rest);
            (days, rest.strip_prefix(b",").map(trim).unwrap_or(rest))
        }
        None => (0, s),
    };
    let mut total: u64 = 0;
    let mut parts = 0;
    for part in clock.split(|&b| b == b':') {
        total = total.checked_mul(60)?.checked_add(parse_u64(part)?)?;
        parts += 1;
    }
    if !(2..=3).contains(&parts) {
        return None;
    }
    Some((days * 86400 + total) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers() {
        assert_eq!(parse_u64(b"10000"), Some(10000));
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"1a"), None);
        assert_eq!(parse_u64(b"99999999999999999999"), None);
    }

    #[test]
    fn decimals() {
        assert_eq!(parse_f64(b"1.1"), Some(1.1));
        assert_eq!(parse_f64(b"217"), Some(217.0));
        assert_eq!(parse_f64(b"NaN"), None);
        assert_eq!(parse_f64(b"inf"), None);
        assert_eq!(parse_f64(b"1.2.3"), None);
        assert_eq!(parse_f64(b"."), None);
        assert_eq!(parse_f64(b"5."), Some(5.0));
        assert_eq!(parse_f64(b".5"), Some(0.5));
        // The fast path agrees with the standard library, digit for digit.
        for text in [
            "0.1",
            "2.4",
            "1024.5",
            "14.25",
            "0.7",
            "123456.789",
            "9.999999",
            "1234567890123.45678",
        ] {
            assert_eq!(parse_f64(text.as_bytes()), text.parse().ok(), "{text}");
        }
    }

    #[test]
    fn clocks() {
        assert_eq!(clock_seconds(b"01:23"), Some(83.0));
        assert_eq!(clock_seconds(b"2:00:00"), Some(7200.0));
        assert_eq!(clock_seconds(b"1d, 02:00:00"), Some(93600.0));
        assert_eq!(clock_seconds(b"1 day, 2:03:04"), Some(93784.0));
        assert_eq!(clock_seconds(b"3 days, 0:00:01"), Some(259201.0));
        assert_eq!(clock_seconds(b"291:16:15"), Some(1048575.0));
        assert_eq!(clock_seconds(b"1 dag, 0:00:01"), None);
        assert_eq!(clock_seconds(b"12"), None);
        assert_eq!(clock_seconds(b"1:2:3:4"), None);
    }
}
