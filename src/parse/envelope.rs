//! Envelopes: what wraps a log's lines before any format can read them (docs/formats.md#envelopes).
//!
//! A program that logs as JSON (vLLM's `json` formatter, python-json-logger, structlog) writes
//! one object a line with the text in `message`, `msg` or `event`; a container's log file on a
//! Kubernetes node is in the CRI format (`2026-12-04T15:00:00.123456789Z stderr F text`, `P`
//! for a line the runtime cut) and Docker's json-file one object a line
//! (`{"log":"text\n","stream":"stderr","time":"…"}`, a cut line without its `\n`). Every
//! parser reads the text inside: the envelope is taken off first, once per log, and the
//! envelope's time becomes the line's.
//!
//! `auto` decides from the log's first line whether it is a container's file (every line is
//! then wrapped); otherwise a line that is a JSON log object is unwrapped and any other is
//! text, as a JSON-logging program's uncaught traceback (printed by Python, not its logger)
//! is. A line whose envelope cannot be read is [`Piece::Unreadable`]: it changes no figure.

use serde::Deserialize;
use std::borrow::Cow;

/// How a log's lines are wrapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Envelope {
    /// Found from the log itself.
    #[default]
    Auto,
    /// Not wrapped: every line is text, a JSON object too.
    Plain,
    /// JSON log objects, one a line; lines that are not JSON objects are text.
    Json,
    /// The CRI container log format (containerd, CRI-O: `/var/log/pods/…`).
    Cri,
    /// Docker's json-file log driver.
    Docker,
}

impl Envelope {
    pub fn is_auto(&self) -> bool {
        *self == Envelope::Auto
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Envelope::Auto => "auto",
            Envelope::Plain => "plain",
            Envelope::Json => "json",
            Envelope::Cri => "cri",
            Envelope::Docker => "docker",
        }
    }
}

impl std::fmt::Display for Envelope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Envelope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Envelope::Auto),
            "plain" => Ok(Envelope::Plain),
            "json" => Ok(Envelope::Json),
            "cri" => Ok(Envelope::Cri),
            "docker" => Ok(Envelope::Docker),
            other => Err(format!(
                "unknown log envelope {other:?}; expected auto, plain, json, cri or docker"
            )),
        }
    }
}

/// One line of text out of an envelope, or word that an envelope could not be read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Piece<'a> {
    /// The text, and the envelope's time for it (seconds since the epoch) when it has one.
    Text(&'a [u8], Option<f64>),
    /// A line that should have been wrapped and whose envelope cannot be read.
    Unreadable,
}

/// Takes the envelopes off one log's lines, line after line (a cut line is joined to the rest
/// of it from the next record).
#[derive(Debug, Clone, Default)]
pub struct Unwrap {
    setting: Envelope,
    /// What the log was found (or set) to be; `None` while `auto` has seen no line.
    chosen: Option<Envelope>,
    /// A JSON log object was met (said once, to name the envelope).
    json_seen: bool,
    /// The text of a cut record so far, waiting for the rest of its line.
    held: [Vec<u8>; 2],
    /// The record being read was cut (CRI `P`, a json-file `log` without its `\n`): its last
    /// piece of text is held, not handed out.
    cut: [bool; 2],
    /// The stream of the record being read (stdout 0, stderr 1): a container's two streams
    /// interleave whole records, so each holds its own cut line.
    stream: usize,
    /// The current CRI record's time, for the pieces a `\r` split off it.
    record_at: Option<f64>,
}

impl Unwrap {
    pub fn new(setting: Envelope) -> Unwrap {
        Unwrap {
            setting,
            chosen: (setting != Envelope::Auto).then_some(setting),
            ..Unwrap::default()
        }
    }

    /// The envelope found or set; `auto` on plain text says `plain`, or `json` once a JSON
    /// log object was met.
    pub fn chosen(&self) -> Option<Envelope> {
        match self.chosen {
            Some(Envelope::Plain) if self.json_seen => Some(Envelope::Json),
            chosen => chosen,
        }
    }

    /// Continues with an envelope found before (restored from a snapshot).
    pub fn assume(&mut self, envelope: Envelope) {
        if self.setting == Envelope::Auto && self.chosen.is_none() {
            self.chosen = Some(match envelope {
                Envelope::Json => Envelope::Plain,
                other => other,
            });
            self.json_seen = envelope == Envelope::Json;
        }
    }

    /// The start of a cut line, which the next record completes: a tqdm frame still being
    /// drawn, read before its end arrives.
    pub fn pending(&self) -> Option<&[u8]> {
        (0..2)
            .rev()
            .find(|&i| self.cut[i] && !self.held[i].is_empty())
            .map(|i| self.held[i].as_slice())
    }

    /// Hands `out` the text lines of `raw` (one line as the log file holds it, without its
    /// terminator): none while a cut line waits for its end, several where an object's text
    /// holds several lines. `utc_offset` reads times written without a zone (local time).
    pub fn lines(&mut self, raw: &[u8], utc_offset: i64, out: &mut dyn FnMut(Piece<'_>)) {
        if self.chosen.is_none() {
            self.chosen = Some(if cri_header(raw).is_some() {
                Envelope::Cri
            } else if raw.starts_with(b"{\"log\":") && docker(raw).is_some() {
                Envelope::Docker
            } else {
                Envelope::Plain
            });
        }
        match (self.setting, self.chosen) {
            (_, Some(Envelope::Cri)) => self.cri(raw, out),
            (_, Some(Envelope::Docker)) => match docker(raw) {
                Some(record) => {
                    let at = record
                        .time
                        .as_deref()
                        .and_then(|t| timestamp(t, utc_offset));
                    let whole = record.log.ends_with('\n');
                    self.stream = usize::from(record.stream.as_deref() == Some("stderr"));
                    self.text(record.log.as_bytes(), at, !whole, out);
                }
                None => out(Piece::Unreadable),
            },
            (Envelope::Plain, _) => out(Piece::Text(raw, None)),
            _ if raw.trim_ascii_start().starts_with(b"{") => match json_log(raw) {
                Some(JsonText::Log { lines, at }) => {
                    self.json_seen = true;
                    let at = at.and_then(|t| t.seconds(utc_offset));
                    for text in lines {
                        self.text(text.as_bytes(), at, false, out);
                    }
                }
                Some(JsonText::Other) => out(Piece::Text(raw, None)),
                None if self.setting == Envelope::Json || self.json_seen => out(Piece::Unreadable),
                None => out(Piece::Text(raw, None)),
            },
            _ => out(Piece::Text(raw, None)),
        }
    }

    /// A CRI line: `TIME STREAM TAG CONTENT`. The follower splits lines at `\r` too (tqdm's
    /// frames), so a line without the header is the rest of the record before it.
    fn cri(&mut self, raw: &[u8], out: &mut dyn FnMut(Piece<'_>)) {
        let Some((at, stream, cut, content)) = cri_header(raw) else {
            // A `\r` inside the record ended the piece before: that piece was whole.
            if self.cut[self.stream] {
                self.flush(out);
                self.held[self.stream].extend_from_slice(raw);
            } else {
                out(Piece::Text(raw, self.record_at));
            }
            return;
        };
        let at = match at {
            Some(at) => at,
            None => {
                out(Piece::Unreadable);
                return;
            }
        };
        self.record_at = Some(at);
        self.stream = stream;
        self.text(content, Some(at), cut, out);
    }

    /// One record's text: the held start of a cut line goes before its first line; each line
    /// (ended by `\n` or `\r`) is handed out; with `cut`, the last is held for the next record.
    fn text(&mut self, text: &[u8], at: Option<f64>, cut: bool, out: &mut dyn FnMut(Piece<'_>)) {
        let text = text.strip_suffix(b"\n").unwrap_or(text);
        let mut pieces = text.split(|&b| b == b'\n' || b == b'\r').peekable();
        while let Some(piece) = pieces.next() {
            let last = pieces.peek().is_none();
            if !self.held[self.stream].is_empty() {
                self.held[self.stream].extend_from_slice(piece);
                if last && cut {
                    break;
                }
                out(Piece::Text(&self.held[self.stream], at));
                self.held[self.stream].clear();
                continue;
            }
            if last && cut {
                self.held[self.stream].extend_from_slice(piece);
                break;
            }
            if !piece.is_empty() {
                out(Piece::Text(piece, at));
            }
        }
        self.cut[self.stream] = cut;
    }

    /// Hands out the held start of a line as a whole line.
    fn flush(&mut self, out: &mut dyn FnMut(Piece<'_>)) {
        if !self.held[self.stream].is_empty() {
            out(Piece::Text(&self.held[self.stream], self.record_at));
            self.held[self.stream].clear();
        }
    }
}

/// The text lines of the start of a log (`head`, read whole), its envelope found as `auto`
/// finds it: what discovery and `check-config` look at.
pub fn texts(head: &[u8], out: &mut dyn FnMut(&[u8])) {
    let mut unwrap = Unwrap::new(Envelope::Auto);
    for line in head.split(|&b| b == b'\n' || b == b'\r') {
        if line.is_empty() {
            continue;
        }
        unwrap.lines(line, crate::clock::utc_offset(), &mut |piece| {
            if let Piece::Text(text, _) = piece {
                out(text)
            }
        });
    }
}

/// The CRI header of `line`: its time (`None` when unreadable), whether the record was cut
/// (`P`), and its content. `None` when the line has no CRI header.
fn cri_header(line: &[u8]) -> Option<(Option<f64>, usize, bool, &[u8])> {
    // `2026-12-04T15:00:00` at least, then the rest of the stamp up to a space.
    if line.len() < 20 || line[4] != b'-' || line[10] != b'T' || !line[0].is_ascii_digit() {
        return None;
    }
    let space = memchr::memchr(b' ', line)?;
    let rest = &line[space + 1..];
    let (stream, rest) = match rest.strip_prefix(b"stdout ") {
        Some(rest) => (0, rest),
        None => (1, rest.strip_prefix(b"stderr ")?),
    };
    let tag_end = memchr::memchr(b' ', rest).unwrap_or(rest.len());
    let cut = match &rest[..tag_end] {
        b"F" => false,
        b"P" => true,
        // Tags are `:`-separated; `P` marks a partial line.
        tags if tags.split(|&b| b == b':').all(|t| t.len() == 1) => {
            tags.split(|&b| b == b':').any(|t| t == b"P")
        }
        _ => return None,
    };
    let content = rest.get(tag_end + 1..).unwrap_or_default();
    let at = std::str::from_utf8(&line[..space])
        .ok()
        .and_then(|t| timestamp(t, 0));
    Some((at, stream, cut, content))
}

/// A Docker json-file record.
#[derive(Deserialize)]
struct DockerRecord<'a> {
    #[serde(borrow)]
    log: Cow<'a, str>,
    #[serde(borrow, default)]
    time: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    stream: Option<Cow<'a, str>>,
}

fn docker(line: &[u8]) -> Option<DockerRecord<'_>> {
    serde_json::from_slice(line).ok()
}

/// What a JSON line holds.
enum JsonText<'a> {
    /// A log object: its text (the message, then an exception's and a stack's text), and its
    /// time.
    Log {
        lines: Vec<Cow<'a, str>>,
        at: Option<When<'a>>,
    },
    /// A JSON object that is not a log record (no message): text as it is.
    Other,
}

/// A log object's time: a text stamp, or seconds since the epoch.
enum When<'a> {
    Text(Cow<'a, str>),
    Number(f64),
}

impl When<'_> {
    fn seconds(&self, utc_offset: i64) -> Option<f64> {
        match self {
            When::Text(t) => timestamp(t, utc_offset),
            // Seconds (`created`), or milliseconds where a logger counts them.
            When::Number(n) if (1e9..1e11).contains(n) => Some(*n),
            When::Number(n) if (1e12..1e14).contains(n) => Some(n / 1000.0),
            When::Number(_) => None,
        }
    }
}

/// A field that is text, or anything else (an object, a number), which is passed by.
#[derive(Default)]
struct Field<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for Field<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Field<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Field(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Field(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Field(Some(Cow::Owned(v))))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Field(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Field(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Field(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Field(None))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Field(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Self::Value, A::Error> {
                while a
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Field(None))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Self::Value, A::Error> {
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(Field(None))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// A time field: text or a number.
#[derive(Default)]
struct TimeField<'a>(Option<When<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for TimeField<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw<'a> {
            Number(f64),
            #[serde(borrow)]
            Text(Cow<'a, str>),
            Other(serde::de::IgnoredAny),
        }
        Ok(TimeField(match Raw::deserialize(d)? {
            Raw::Number(n) => Some(When::Number(n)),
            Raw::Text(t) => Some(When::Text(t)),
            Raw::Other(_) => None,
        }))
    }
}

/// The fields JSON loggers put a record's text and time in: vLLM's and python-json-logger's
/// `message` (with `exc_info`, `stack_info`), structlog's `event` (with `exception`), Go and
/// Node loggers' `msg`; `asctime`, `timestamp`, `time`, `@timestamp`, `ts` or `created`.
#[derive(Deserialize)]
struct JsonLogRecord<'a> {
    #[serde(borrow, default)]
    message: Field<'a>,
    #[serde(borrow, default)]
    msg: Field<'a>,
    #[serde(borrow, default)]
    event: Field<'a>,
    #[serde(borrow, default)]
    exc_info: Field<'a>,
    #[serde(borrow, default)]
    exc_text: Field<'a>,
    #[serde(borrow, default)]
    exception: Field<'a>,
    #[serde(borrow, default)]
    stack_info: Field<'a>,
    #[serde(borrow, default)]
    asctime: TimeField<'a>,
    #[serde(borrow, default)]
    timestamp: TimeField<'a>,
    #[serde(borrow, default)]
    time: TimeField<'a>,
    #[serde(borrow, default, rename = "@timestamp")]
    at_timestamp: TimeField<'a>,
    #[serde(borrow, default)]
    ts: TimeField<'a>,
    #[serde(borrow, default)]
    created: TimeField<'a>,
}

/// `None` when the line is not a JSON object at all.
fn json_log(line: &[u8]) -> Option<JsonText<'_>> {
    let record: JsonLogRecord = serde_json::from_slice(line).ok()?;
    let Some(text) = record.message.0.or(record.msg.0).or(record.event.0) else {
        return Some(JsonText::Other);
    };
    let mut lines = vec![text];
    lines.extend(
        [
            record.exc_info,
            record.exc_text,
            record.exception,
            record.stack_info,
        ]
        .into_iter()
        .filter_map(|f| f.0),
    );
    let at = [
        record.asctime,
        record.timestamp,
        record.time,
        record.at_timestamp,
        record.ts,
        record.created,
    ]
    .into_iter()
    .find_map(|f| f.0);
    Some(JsonText::Log { lines, at })
}

/// Seconds since the epoch of `2026-12-04T15:00:00.123456789Z`, with `T` or a space, a `.` or
/// `,` before the fraction (Python's `asctime`), and `Z`, `±HH:MM`, `±HHMM` or no zone (local
/// time, `utc_offset` seconds east of UTC).
pub fn timestamp(text: &str, utc_offset: i64) -> Option<f64> {
    let b = text.trim().as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = b.get(r)?;
        s.iter()
            .all(u8::is_ascii_digit)
            .then(|| s.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
    };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut i = 19;
    let mut fraction = 0.0;
    if matches!(b.get(i), Some(b'.' | b',')) {
        let start = i + 1;
        let digits = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let kept = digits.min(9);
        fraction = num(start..start + kept)? as f64 / 10f64.powi(kept as i32);
        i = start + digits;
    }
    let offset = match b.get(i..).unwrap_or_default() {
        [] => utc_offset,
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), rest @ ..] => {
            let (h, m) = match rest {
                [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => (two(*h1, *h2)?, two(*m1, *m2)?),
                [h1, h2] => (two(*h1, *h2)?, 0),
                _ => return None,
            };
            let seconds = h * 3600 + m * 60;
            if *sign == b'-' {
                -seconds
            } else {
                seconds
            }
        }
        _ => return None,
    };
    let days = super::server::prefix::days_from_civil(year, month as u8, day as u8);
    let local = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some((local - offset) as f64 + fraction)
}

fn two(a: u8, b: u8) -> Option<i64> {
    (a.is_ascii_digit() && b.is_ascii_digit())
        .then(|| i64::from(a - b'0') * 10 + i64::from(b - b'0'))
}

#[cfg(test)]
mod tests;
