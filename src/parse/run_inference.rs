//! The `run_inference` format: what `run_inference.py`-style drivers print (`docs/formats.md`).
//!
//! ```text
//! Loading tokenizer from /shared/kimi-k2.5-int4...
//! Vocab size: 163840
//! Model: /shared/kimi-k2.5-int4
//! Processing: B1_glaive (SHORT)
//! B1_glaive: 10000 prompts
//! Running 10000 requests (concurrency=150, max_tokens=10240)...
//!   50/10000 (0 err) 1.1 req/s avg_comp=217tok ETA=2.4h
//! ```
//!
//! Progress lines are by far the most common, so they are tried first and rejected on their
//! first byte when they cannot be one. The `NAME: N prompts` form is tried whenever no keyword
//! form matched, whatever the name's first byte.

use super::number::{leading_decimal, leading_digits, parse_f64, parse_u64, trim};
use super::{parse_eta, Event, Progress};

#[derive(Debug, Clone, Default)]
pub struct RunInference;

impl RunInference {
    pub fn parse<'a>(&self, line: &'a [u8]) -> Option<Event<'a>> {
        let body = without_logger_prefix(line.trim_ascii_start());
        let keyword = match body.first()? {
            b'0'..=b'9' => canonical(body)
                .or_else(|| progress(body))
                .map(Event::Progress),
            b'M' => body
                .strip_prefix(b"Model:")
                .and_then(|rest| utf8(trim(rest)))
                .filter(|m| !m.is_empty())
                .map(Event::Model),
            b'P' => body.strip_prefix(b"Processing:").and_then(processing),
            b'R' => body.strip_prefix(b"Running ").and_then(running),
            b'A' => {
                (body.trim_ascii_end() == b"All partitions complete.").then_some(Event::RunComplete)
            }
            _ => None,
        };
        // A partition may be named anything, `M1_metamath` or `7B_eval` too: the first byte
        // only says which keyword form to try first, never that `NAME: N prompts` cannot match.
        keyword.or_else(|| planned(body))
    }
}

/// Whether `line` is the seed driver's preamble, printed before its `Model:` header as the
/// first lines of every run: `Loading tokenizer from MODEL...`, `Vocab size: N`. It changes no
/// figure; it tells a run beginning ([`super::starts_a_run`]).
pub fn is_preamble(line: &[u8]) -> bool {
    let body = without_logger_prefix(line.trim_ascii_start()).trim_ascii_end();
    let loading = body
        .strip_prefix(b"Loading tokenizer from ")
        .is_some_and(|model| !trim(model).is_empty());
    let vocab = body
        .strip_prefix(b"Vocab size:")
        .map(trim)
        .is_some_and(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit));
    loading || vocab
}

/// Python's logging levels, as `%(levelname)s` prints them.
const LEVELS: [&[u8]; 5] = [b"INFO", b"WARNING", b"ERROR", b"DEBUG", b"CRITICAL"];

/// The message of a line a driver wrote through Python's `logging`: `2026-12-04 19:03:44,620
/// INFO Processing: B1` (`%(asctime)s %(levelname)s`, with ` - ` or `:` between, a logger's
/// name after the level), or `INFO:root:Processing: B1` (`basicConfig`'s default). Any other
/// line is returned whole: the prefix must be one of these exactly, so a progress line that
/// begins with digits is never cut.
#[inline]
fn without_logger_prefix(line: &[u8]) -> &[u8] {
    let mut rest = line;
    // `YYYY-MM-DD HH:MM:SS[,mmm]`
    let stamped = rest.len() > 20
        && rest[4] == b'-'
        && rest[7] == b'-'
        && rest[10] == b' '
        && rest[13] == b':'
        && rest[16] == b':'
        && rest[..4].iter().all(u8::is_ascii_digit);
    if stamped {
        let mut end = 19;
        if matches!(rest.get(end), Some(b',' | b'.')) {
            end += 1 + rest[end + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
        }
        rest = rest[end..]
            .trim_ascii_start()
            .strip_prefix(b"- ")
            .unwrap_or(&rest[end..])
            .trim_ascii_start();
    }
    let Some(level) = LEVELS.iter().find(|l| rest.starts_with(l)) else {
        return line;
    };
    let after = &rest[level.len()..];
    match after.first() {
        // `INFO:root:message`
        Some(b':') => {
            let after = &after[1..];
            match memchr::memchr(b':', after) {
                Some(colon) if !after[..colon].contains(&b' ') => &after[colon + 1..],
                _ => after,
            }
        }
        // `… INFO message`, `… INFO - message`, `… INFO name: message`
        Some(b' ') if stamped => {
            let after = after.trim_ascii_start();
            after.strip_prefix(b"- ").unwrap_or(after)
        }
        _ => line,
    }
}

fn utf8(s: &[u8]) -> Option<&str> {
    std::str::from_utf8(s).ok()
}

/// The progress line as the driver prints it, `50/10000 (0 err) 1.1 req/s avg_comp=217tok
/// ETA=2.4h`, read in one pass. Nearly every line of a long log is one, and cutting it into
/// tokens first was most of a line's cost. Any other shape (a part missing, other spacing, a
/// clock ETA) is left to [`progress`], which reads every variant; where this one answers, the
/// two agree (a property test checks).
fn canonical(body: &[u8]) -> Option<Progress<'_>> {
    let (completed, rest) = integer(body)?;
    let (planned, rest) = integer(literal(rest, b"/")?)?;
    let (errors, rest) = integer(literal(rest, b" (")?)?;
    let rest = literal(rest, b" err) ")?;
    // The general reading takes a rate only from a token that starts with a digit.
    if !rest.first()?.is_ascii_digit() {
        return None;
    }
    let (requests_per_second, rest) = decimal(rest)?;
    let (avg_completion_tokens, rest) = decimal(literal(rest, b" req/s avg_comp=")?)?;
    let (eta, rest) = decimal(literal(rest, b"tok ETA=")?)?;
    let unit = match rest {
        b"s" => 1.0,
        b"m" => 60.0,
        b"h" => 3600.0,
        b"d" => 86400.0,
        _ => return None,
    };
    Some(Progress {
        completed: Some(completed),
        planned: Some(planned),
        errors: Some(errors),
        requests_per_second: Some(requests_per_second),
        avg_completion_tokens: Some(avg_completion_tokens),
        eta_seconds: Some(eta * unit),
        ..Progress::default()
    })
}

/// `rest` after `word`: compared as an array, inline, where `strip_prefix` calls `memcmp`.
#[inline]
fn literal<'a, const N: usize>(rest: &'a [u8], word: &[u8; N]) -> Option<&'a [u8]> {
    (rest.first_chunk::<N>()? == word).then(|| &rest[N..])
}

#[inline]
fn integer(s: &[u8]) -> Option<(u64, &[u8])> {
    let (digits, rest) = leading_digits(s);
    Some((parse_u64(digits)?, rest))
}

#[inline]
fn decimal(s: &[u8]) -> Option<(f64, &[u8])> {
    let (digits, rest) = leading_decimal(s);
    Some((parse_f64(digits)?, rest))
}

/// `50/10000 (0 err) 1.1 req/s avg_comp=217tok ETA=2.4h`; every part after the counts is optional.
fn progress(body: &[u8]) -> Option<Progress<'_>> {
    let (completed, rest) = leading_digits(body);
    let rest = rest.strip_prefix(b"/")?;
    let (planned, rest) = leading_digits(rest);
    let mut p = Progress {
        completed: Some(parse_u64(completed)?),
        planned: Some(parse_u64(planned)?),
        ..Progress::default()
    };
    if !rest.is_empty() && !rest[0].is_ascii_whitespace() {
        return None;
    }
    let mut recognised = rest.trim_ascii().is_empty();
    let mut tokens = rest
        .split(u8::is_ascii_whitespace)
        .filter(|t| !t.is_empty());
    while let Some(tok) = tokens.next() {
        if let Some(n) = tok.strip_prefix(b"(") {
            // `(0 err)`
            if let (Some(n), Some(b"err)")) = (parse_u64(n), tokens.next()) {
                p.errors = Some(n);
                recognised = true;
            }
        } else if let Some(v) = tok.strip_prefix(b"avg_comp=") {
            let (num, _unit) = leading_decimal(v);
            p.avg_completion_tokens = parse_f64(num);
            recognised |= p.avg_completion_tokens.is_some();
        } else if let Some(v) = tok.strip_prefix(b"ETA=") {
            p.eta_seconds = parse_eta(v);
            recognised = true;
        } else if tok[0].is_ascii_digit() {
            // `1.1 req/s`, or `1.1req/s` glued together
            let (num, unit) = leading_decimal(tok);
            let unit = if unit.is_empty() {
                tokens.next().unwrap_or_default()
            } else {
                unit
            };
            if unit == b"req/s" {
                p.requests_per_second = parse_f64(num);
                recognised |= p.requests_per_second.is_some();
            }
        }
    }
    recognised.then_some(p)
}

/// ` B1_glaive (SHORT)`
fn processing(rest: &[u8]) -> Option<Event<'_>> {
    let rest = trim(rest);
    let (name, mode) = match rest.iter().position(|&b| b == b'(') {
        Some(open) if rest.ends_with(b")") => (
            trim(&rest[..open]),
            Some(trim(&rest[open + 1..rest.len() - 1])),
        ),
        _ => (rest, None),
    };
    let name = utf8(name).filter(|n| !n.is_empty())?;
    let mode = mode.and_then(utf8).filter(|m| !m.is_empty());
    Some(Event::Partition { name, mode })
}

/// `10000 requests (concurrency=150, max_tokens=10240)...`
fn running(rest: &[u8]) -> Option<Event<'_>> {
    let (requests, rest) = leading_digits(rest);
    let requests = parse_u64(requests)?;
    let rest = rest.strip_prefix(b" requests")?;
    let mut concurrency = None;
    let mut max_tokens = None;
    for part in rest.split(|&b| b == b'(' || b == b',' || b == b')' || b == b' ') {
        if let Some(v) = part.strip_prefix(b"concurrency=") {
            concurrency = parse_u64(leading_digits(v).0);
        } else if let Some(v) = part.strip_prefix(b"max_tokens=") {
            max_tokens = parse_u64(leading_digits(v).0);
        }
    }
    Some(Event::Running {
        requests,
        concurrency,
        max_tokens,
    })
}

/// `B1_glaive: 10000 prompts`
fn planned(body: &[u8]) -> Option<Event<'_>> {
    let colon = memchr::memchr(b':', body)?;
    let name = &body[..colon];
    if name.is_empty() || name.iter().any(u8::is_ascii_whitespace) {
        return None;
    }
    let rest = trim(&body[colon + 1..]);
    let (n, unit) = leading_digits(rest);
    if unit != b" prompts" {
        return None;
    }
    Some(Event::Planned {
        name: utf8(name)?,
        planned: parse_u64(n)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_written_through_python_logging_are_read_after_their_prefix() {
        let r = RunInference;
        for line in [
            "2026-12-04 19:03:44,620 INFO Processing: B1 (SHORT)",
            "2026-12-04 19:03:44,620 - INFO - Processing: B1 (SHORT)",
            "2026-12-04 19:03:44 INFO Processing: B1 (SHORT)",
            "INFO:root:Processing: B1 (SHORT)",
        ] {
            assert_eq!(
                r.parse(line.as_bytes()),
                Some(Event::Partition {
                    name: "B1",
                    mode: Some("SHORT")
                }),
                "{line}"
            );
        }
        assert!(matches!(
            r.parse(b"2026-12-04 19:03:45,001 INFO   10/40 (0 err) 2.0 req/s"),
            Some(Event::Progress(_))
        ));
        // No prefix of that shape: the line is read whole, digits first too.
        assert!(matches!(
            r.parse(b"  10/40 (0 err) 2.0 req/s"),
            Some(Event::Progress(_))
        ));
        assert_eq!(r.parse(b"INFORMATION: Processing: B1"), None);
    }

    fn parse(line: &str) -> Option<Event<'_>> {
        RunInference.parse(line.as_bytes())
    }

    /// Every line of the seed's log, in order.
    #[test]
    fn seed_log() {
        assert_eq!(
            parse("Loading tokenizer from /shared/kimi-k2.5-int4..."),
            None
        );
        assert_eq!(parse("Vocab size: 163840"), None);
        assert_eq!(
            parse("Model: /shared/kimi-k2.5-int4"),
            Some(Event::Model("/shared/kimi-k2.5-int4"))
        );
        assert_eq!(
            parse("============================================================"),
            None
        );
        assert_eq!(
            parse("Processing: B1_glaive (SHORT)"),
            Some(Event::Partition {
                name: "B1_glaive",
                mode: Some("SHORT")
            })
        );
        assert_eq!(
            parse("B1_glaive: 10000 prompts"),
            Some(Event::Planned {
                name: "B1_glaive",
                planned: 10000
            })
        );
        assert_eq!(
            parse("Running 10000 requests (concurrency=150, max_tokens=10240)..."),
            Some(Event::Running {
                requests: 10000,
                concurrency: Some(150),
                max_tokens: Some(10240)
            })
        );
        assert_eq!(
            parse("  50/10000 (0 err) 1.1 req/s avg_comp=217tok ETA=2.4h"),
            Some(Event::Progress(Progress {
                partition: None,
                completed: Some(50),
                planned: Some(10000),
                errors: Some(0),
                requests_per_second: Some(1.1),
                avg_completion_tokens: Some(217.0),
                eta_seconds: Some(2.4 * 3600.0),
                tokens_per_second: None,
            }))
        );
        let Some(Event::Progress(p)) =
            parse("  150/10000 (0 err) 0.7 req/s avg_comp=298tok ETA=2.8h")
        else {
            panic!("not progress")
        };
        assert_eq!((p.completed, p.requests_per_second), (Some(150), Some(0.7)));
    }

    #[test]
    fn the_one_pass_reading_agrees_with_the_general_one() {
        let lines = [
            "50/10000 (0 err) 1.1 req/s avg_comp=217tok ETA=2.4h",
            "48350/22000000 (9 err) 19.5 req/s avg_comp=622tok ETA=312.5h",
            "5/5 (0 err) 3.0 req/s avg_comp=1024.5tok ETA=0s",
            "5/5 (0 err) 3 req/s avg_comp=1tok ETA=7d",
            "5/5 (0 err) 3 req/s avg_comp=1tok ETA=35m",
            "5/5 (0 err) 1234567890123456789 req/s avg_comp=1tok ETA=35m",
        ];
        for line in lines {
            let fast = canonical(line.as_bytes());
            assert!(fast.is_some(), "{line}");
            assert_eq!(fast, progress(line.as_bytes()), "{line}");
        }
        // Lines mutated at random, with the bytes these lines are made of: wherever the
        // one-pass reading answers, it says what the general one says.
        let alphabet = b"0123456789./ ()err req/s avg_comp=tok ETA=smhd:x-+e";
        let mut next = crate::testing::numbers(3);
        let mut answered = 0;
        for _ in 0..50_000 {
            let mut line = lines[next(lines.len())].as_bytes().to_vec();
            for _ in 0..next(3) {
                let at = next(line.len() + 1);
                match next(3) {
                    0 if at < line.len() => {
                        line.remove(at);
                    }
                    1 if at < line.len() => line[at] = alphabet[next(alphabet.len())],
                    _ => line.insert(at, alphabet[next(alphabet.len())]),
                }
            }
            if let Some(fast) = canonical(&line) {
                answered += 1;
                assert_eq!(
                    Some(fast),
                    progress(&line),
                    "{}",
                    String::from_utf8_lossy(&line)
                );
            }
        }
        assert!(
            answered > 5_000,
            "the mutations reach the one-pass reading: {answered}"
        );
        // Shapes it leaves to the general reading.
        for line in [
            "50/10000 (0 err) 1.1 req/s avg_comp=217tok ETA=2.4h ",
            "50/10000 (0 err) 1.1req/s avg_comp=217tok ETA=2.4h",
            "50/10000 (0 err) 1.1 req/s avg_comp=217tok ETA=01:42",
            "50/10000 (0 err) 1.1 req/s avg_comp=217tok ETA=90",
            "50/10000 (0 err) 1.1 req/s ETA=2.4h",
            "50/10000 (0 err) 1.1.1 req/s avg_comp=217tok ETA=2.4h",
            "50/10000  (0 err) 1.1 req/s avg_comp=217tok ETA=2.4h",
        ] {
            assert_eq!(canonical(line.as_bytes()), None, "{line}");
        }
    }

    #[test]
    fn progress_variants() {
        let Some(Event::Progress(p)) = parse("9000/10000 (12 err) 14.25 req/s ETA=35m") else {
            panic!()
        };
        assert_eq!(p.errors, Some(12));
        assert_eq!(p.eta_seconds, Some(2100.0));
        assert_eq!(p.avg_completion_tokens, None);

        let Some(Event::Progress(p)) = parse("\t5/5 (0 err) 3.0req/s avg_comp=1024.5tok ETA=0s")
        else {
            panic!()
        };
        assert_eq!(p.requests_per_second, Some(3.0));
        assert_eq!(p.avg_completion_tokens, Some(1024.5));
        assert_eq!(p.eta_seconds, Some(0.0));

        assert!(matches!(parse("7/10"), Some(Event::Progress(_))));
    }

    #[test]
    fn near_misses_are_not_progress() {
        assert_eq!(parse("3/4 of the shards loaded"), None);
        assert_eq!(parse("12/abc (0 err)"), None);
        assert_eq!(parse("50/10000x (0 err)"), None);
        assert_eq!(parse("Processing:"), None);
        assert_eq!(parse("Traceback (most recent call last):"), None);
        assert_eq!(parse("RuntimeError: CUDA out of memory"), None);
        assert_eq!(parse("Running out of patience"), None);
        assert_eq!(parse("Model:"), None);
        assert_eq!(parse("note: 3 prompts skipped"), None);
        assert_eq!(parse(""), None);
    }

    #[test]
    fn partition_without_mode() {
        assert_eq!(
            parse("Processing: B2_opencodeinstruct"),
            Some(Event::Partition {
                name: "B2_opencodeinstruct",
                mode: None
            })
        );
    }

    #[test]
    fn invalid_utf8_is_unmatched_not_a_crash() {
        assert_eq!(RunInference.parse(b"Processing: \xff\xfe (SHORT)"), None);
        assert_eq!(RunInference.parse(b"\x00\x00\xff"), None);
    }

    /// Every line shape, with partition names that start with each letter and digit: the
    /// keyword forms (`Model:`, `Processing:`, `Running`) share first bytes with names.
    #[test]
    fn partition_names_may_start_with_any_letter_or_digit() {
        let firsts = ('A'..='Z').chain('a'..='z').chain('0'..='9');
        for first in firsts {
            let name = format!("{first}1_set");
            assert_eq!(
                parse(&format!("{name}: 360 prompts")),
                Some(Event::Planned {
                    name: &name,
                    planned: 360
                }),
                "{name}"
            );
            assert_eq!(
                parse(&format!("Processing: {name} (LONG)")),
                Some(Event::Partition {
                    name: &name,
                    mode: Some("LONG")
                }),
                "{name}"
            );
            assert_eq!(
                parse(&format!("Model: /models/{name}")),
                Some(Event::Model(&format!("/models/{name}")))
            );
        }
        assert!(matches!(
            parse("Running 10 requests (concurrency=2, max_tokens=8)..."),
            Some(Event::Running { requests: 10, .. })
        ));
        assert!(matches!(parse("  1/10 (0 err)"), Some(Event::Progress(_))));
        assert_eq!(parse("Model: 10 prompts"), Some(Event::Model("10 prompts")));
        assert_eq!(parse("Models: 10 bananas"), None);
    }
}
