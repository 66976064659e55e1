//! Property tests of every parser, on stable Rust with `cargo test` (proptest: maintained,
//! shrinks a failure to a small input, and needs no nightly as cargo-fuzz does).
//!
//! The inputs are real lines (the tqdm and server samples in `tests/testdata`, the
//! run_inference shapes of the seed) mutated at random: numbers swapped for huge, negative,
//! non-finite or malformed ones, bytes inserted, lines cut. Pure garbage alone would rarely get
//! past a parser's first check; mutated real lines reach its corners.
//!
//! The seed is fixed, so CI runs the same cases every time; `PROPTEST_CASES` runs more and
//! `PROPTEST_SEED` others.

use crate::common;
use crate::common::proptest_config as config;
use pipeline_pulse::app::config::RawConfig;
use pipeline_pulse::model::Run;
use pipeline_pulse::parse::{
    Detect, Event, Format, Parser, RegexFormat, RunInference, ServerLine, ServerLog, ServerRead,
    Tqdm,
};
use pipeline_pulse::sinks::metrics::{self, Exposition};
use pipeline_pulse::sources::files::record::{Inspector, Pointers, MAX_RECORD_TOKENS};
use pipeline_pulse::tail::{Follower, Tailed};
use proptest::prelude::*;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// Cases per property, unless `PROPTEST_CASES` says otherwise.
const CASES: u32 = 512;

const RUN_INFERENCE: &[&str] = &[
    "Model: /shared/kimi-k2.5-int4",
    "Processing: B1_glaive (SHORT)",
    "B1_glaive: 10000 prompts",
    "Running 10000 requests (concurrency=150, max_tokens=10240)...",
    "  50/10000 (0 err) 1.1 req/s avg_comp=217tok ETA=2.4h",
    "  150/10000 (0 err) 0.7 req/s avg_comp=298tok ETA=2.8h",
    "9000/10000 (12 err) 14.25 req/s ETA=35m",
    "\t5/5 (0 err) 3.0req/s avg_comp=1024.5tok ETA=0s",
    "Processing: B3_longform (LONG)",
    "Traceback (most recent call last):",
];

/// Every real line we have: the run_inference shapes and the testdata samples, split on
/// `\n` and `\r` as the follower splits them.
fn real_lines() -> &'static [Vec<u8>] {
    static LINES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    LINES.get_or_init(|| {
        let mut lines: Vec<Vec<u8>> = RUN_INFERENCE
            .iter()
            .map(|l| l.as_bytes().to_vec())
            .collect();
        for dir in ["tests/testdata/tqdm", "tests/testdata/server"] {
            let mut files: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
                .collect();
            files.sort();
            for file in files {
                let bytes = std::fs::read(&file).unwrap();
                lines.extend(
                    bytes
                        .split(|b| *b == b'\n' || *b == b'\r')
                        .filter(|l| !l.is_empty())
                        .map(<[u8]>::to_vec),
                );
            }
        }
        lines
    })
}

/// Numbers as logs never print them, and some they do.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..100_000).prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        Just("99999999999999999999999999".to_owned()),
        Just("-3".to_owned()),
        Just("1e308".to_owned()),
        Just("1e999".to_owned()),
        Just("nan".to_owned()),
        Just("inf".to_owned()),
        Just("-inf".to_owned()),
        Just("0.0000001".to_owned()),
        Just("1.5.2".to_owned()),
        Just("".to_owned()),
        Just("12k".to_owned()),
        Just("3.2G".to_owned()),
        (0.0f64..1e7).prop_map(|f| format!("{f:.2}")),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the n-th run of digits with this text.
    Number(usize, String),
    Insert(usize, u8),
    Cut(usize),
    Repeat(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), number()).prop_map(|(i, n)| Mutation::Number(i, n)),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => any::<usize>().prop_map(Mutation::Cut),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Repeat(a, b)),
    ]
}

fn mutate(mut line: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = line.len().max(1);
        match m {
            Mutation::Number(i, text) => {
                let runs: Vec<(usize, usize)> = digit_runs(&line);
                if let Some(&(start, end)) = runs.get(i % runs.len().max(1)) {
                    line.splice(start..end, text.bytes());
                }
            }
            Mutation::Insert(i, b) => line.insert(i % (line.len() + 1), *b),
            Mutation::Cut(i) => line.truncate(i % len),
            Mutation::Repeat(a, b) => {
                let (a, b) = (a % len, b % len);
                let (a, b) = (a.min(b), a.max(b).min(line.len()));
                let piece = line[a..b].to_vec();
                line.splice(b..b, piece);
            }
        }
    }
    line
}

fn digit_runs(line: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < line.len() {
        if line[i].is_ascii_digit() {
            let start = i;
            while i < line.len() && (line[i].is_ascii_digit() || line[i] == b'.') {
                i += 1;
            }
            runs.push((start, i));
        } else {
            i += 1;
        }
    }
    runs
}

/// A real line, mutated, or now and then raw bytes.
fn log_line() -> impl Strategy<Value = Vec<u8>> {
    let n = real_lines().len();
    prop_oneof![
        9 => (0..n, prop::collection::vec(mutation(), 0..4))
            .prop_map(|(i, m)| mutate(real_lines()[i].clone(), &m)),
        1 => prop::collection::vec(any::<u8>(), 0..200),
    ]
}

fn parsers() -> Vec<Parser> {
    vec![
        Parser::Auto(Detect::default()),
        Parser::RunInference(RunInference),
        Parser::Tqdm(Tqdm::default()),
        Parser::Regex(
            RegexFormat::new(r"(?P<partition>\w+): (?P<completed>\S+)/(?P<planned>\S+) eta (?P<eta>\S+) (?P<rps>\S+)").unwrap(),
        ),
        Parser::Server(ServerLog::new(Format::Auto)),
        Parser::Server(ServerLog::new(Format::Sglang)),
        Parser::Server(ServerLog::new(Format::Vllm)),
    ]
}

fn finite_non_negative(what: &str, v: Option<f64>, line: &[u8]) -> Result<(), TestCaseError> {
    if let Some(v) = v {
        prop_assert!(
            v.is_finite() && v >= 0.0,
            "{what} = {v} from {:?}",
            String::from_utf8_lossy(line)
        );
    }
    Ok(())
}

fn check_event(event: &Event<'_>, line: &[u8]) -> Result<(), TestCaseError> {
    match event {
        Event::Progress(p) => {
            finite_non_negative("requests_per_second", p.requests_per_second, line)?;
            finite_non_negative("avg_completion_tokens", p.avg_completion_tokens, line)?;
            finite_non_negative("eta_seconds", p.eta_seconds, line)?;
            finite_non_negative("tokens_per_second", p.tokens_per_second, line)?;
        }
        Event::Server(ServerRead {
            line: ServerLine::Report(r),
            ..
        }) => {
            finite_non_negative("running", r.running, line)?;
            finite_non_negative("queued", r.queued, line)?;
            finite_non_negative("generation tok/s", r.generation_tokens_per_second, line)?;
            finite_non_negative("kv_cache_usage", r.kv_cache_usage, line)?;
        }
        _ => {}
    }
    Ok(())
}

/// Every sample of an exposition: no NaN, no infinity, and no negative value except where
/// the metric is a difference.
fn check_exposition(text: &str) -> Result<(), TestCaseError> {
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let value = line.rsplit(' ').next().unwrap_or("");
        let v: f64 = value
            .parse()
            .map_err(|_| TestCaseError::fail(format!("unreadable sample {line:?}")))?;
        prop_assert!(v.is_finite(), "non-finite sample {line:?}");
        let difference = line.starts_with("pulse_partition_log_output_gap");
        prop_assert!(v >= 0.0 || difference, "negative sample {line:?}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(CASES * 4))]

    /// No line panics a parser, and every figure a parser gives is finite and not negative.
    #[test]
    fn parsers_never_panic_and_give_only_finite_figures(line in log_line()) {
        for mut parser in parsers() {
            if let Some(event) = parser.parse(&line) {
                check_event(&event, &line)?;
            }
        }
    }

    /// The Accept header negotiation takes any text.
    #[test]
    fn any_accept_header_negotiates(accept in ".{0,200}") {
        let _ = pipeline_pulse::sinks::http::negotiate(Some(&accept));
    }

    /// A scraped exposition of any shape: the reader never panics and returns what it read.
    #[test]
    fn any_exposition_is_read_without_panic(
        lines in prop::collection::vec(
            prop_oneof![
                "[a-z_:]{1,30}(\\{[a-z]+=\"[^\"]{0,10}\"\\})? [-+0-9.eEnaINF]{0,12}( [0-9]{0,13})?",
                ".{0,80}",
            ],
            0..30,
        )
    ) {
        let text = lines.join("\n");
        let names = ["sglang:num_running_reqs", "vllm:num_requests_running", "x"];
        use pipeline_pulse::sources::probe::exposition::{combine, first_of, Combine};
        for how in [Combine::Sum, Combine::Mean, Combine::Max] {
            let _ = first_of(&text, &names, how);
            for name in names {
                let _ = combine(&text, name, how);
            }
        }
        for (name, _, _) in pipeline_pulse::sources::probe::exposition::samples(&text) {
            prop_assert!(text.contains(name));
        }
    }
}

proptest! {
    #![proptest_config(config(CASES))]

    /// Lines of every format through the model and out as an exposition: no NaN, infinity or
    /// negative count can come out, in either exposition format.
    #[test]
    fn the_model_and_its_exposition_stay_finite(
        lines in prop::collection::vec((0usize..7, log_line(), 0.0f64..120.0), 1..60)
    ) {
        let paths: Vec<String> = (0..7).map(|i| format!("/log{i}")).collect();
        let mut run = Run::new(&paths);
        for i in 0..paths.len() {
            run.set_server_log(i, i >= 4);
        }
        let mut parsers = parsers();
        let mut now = 1_700_000_000.0;
        for (log, line, gap) in &lines {
            now += gap;
            let event = parsers[*log].parse(line);
            run.ingest(*log, line, event, now);
        }
        let registry = metrics::registry(Arc::new(Mutex::new(run)));
        check_exposition(&metrics::encode(&registry, Exposition::Text))?;
        let open = metrics::encode(&registry, Exposition::OpenMetrics);
        prop_assert!(open.ends_with("# EOF\n"));
        check_exposition(open.trim_end_matches("# EOF\n"))?;
    }

    /// JSONL records: the inspector calls a record invalid exactly when serde_json does not
    /// read it as an object, and reads the token count the first pointer finds.
    #[test]
    fn records_are_invalid_exactly_when_serde_json_says_so(
        value in json_value(),
        mutations in prop::collection::vec((any::<usize>(), any::<u8>(), any::<bool>()), 0..3),
    ) {
        let mut bytes = serde_json::to_vec(&value).unwrap();
        for (at, byte, insert) in &mutations {
            let at = at % (bytes.len() + 1);
            if *insert || at == bytes.len() {
                bytes.insert(at, *byte);
            } else {
                bytes.remove(at);
            }
        }
        let facts = Inspector::new(&Pointers::default()).inspect(&bytes);
        let parsed = serde_json::from_slice::<serde_json::Value>(&bytes).ok();
        let object = parsed.as_ref().is_some_and(|v| v.is_object());
        prop_assert_eq!(facts.invalid, !object, "{:?}", String::from_utf8_lossy(&bytes));
        if let Some(v) = parsed.filter(|v| v.is_object()) {
            let first = Pointers::default()
                .tokens
                .iter()
                .find_map(|p| v.pointer(p).cloned());
            let expected = token_count(first.as_ref());
            prop_assert_eq!(facts.tokens, expected, "{}", String::from_utf8_lossy(&bytes));
        }
    }

    /// Records as writers other than serde_json write them (Python's `ensure_ascii`, escaped
    /// slashes, whitespace between tokens, numbers with exponents, long strings across the
    /// reader's 64-byte blocks), then mutated, or spliced with pieces of broken JSON: the
    /// inspector calls a record invalid exactly when serde_json does, and reads the same
    /// facts from it.
    #[test]
    fn records_in_any_style_are_read_as_serde_json_reads_them(
        value in json_value(),
        seed in any::<u64>(),
        splices in prop::collection::vec((any::<prop::sample::Index>(), broken_json()), 0..3),
    ) {
        let mut bytes = styled_json(&value, seed).into_bytes();
        for (at, piece) in &splices {
            let at = at.index(bytes.len() + 1);
            bytes.splice(at..at, piece.bytes());
        }
        let facts = Inspector::new(&Pointers::default()).inspect(&bytes);
        let parsed = serde_json::from_slice::<serde_json::Value>(&bytes).ok();
        let parsed = parsed.filter(serde_json::Value::is_object);
        let text = String::from_utf8_lossy(&bytes);
        prop_assert_eq!(facts.invalid, parsed.is_none(), "{}", text);
        if let Some(v) = parsed {
            let first = |list: &[String]| list.iter().find_map(|p| v.pointer(p).cloned());
            let pointers = Pointers::default();
            prop_assert_eq!(facts.tokens, token_count(first(&pointers.tokens).as_ref()), "{}", text);
            let reason = first(&pointers.finish_reason);
            let reason = reason.as_ref().and_then(|r| r.as_str()).map(str::trim);
            prop_assert_eq!(
                facts.finish_reason.is_some(),
                reason.is_some_and(|r| !r.is_empty()),
                "{}", text
            );
        }
    }

    /// Any JSON pointer (escapes, indexes, the root) finds in a record what serde_json's
    /// `Value::pointer` finds there.
    #[test]
    fn any_pointer_finds_what_serde_json_finds(
        value in json_value(),
        pointer in prop_oneof![
            Just(String::new()),
            "(/([a-z_]{1,10}|[0-9]{1,2}|~[01]|[a-z~/]{0,4})){1,4}",
        ],
    ) {
        let pointers = Pointers {
            tokens: vec![pointer.clone()],
            ..Pointers::default()
        };
        let bytes = serde_json::to_vec(&value).unwrap();
        let facts = Inspector::new(&pointers).inspect(&bytes);
        let expected = token_count(value.is_object().then(|| value.pointer(&pointer)).flatten());
        prop_assert_eq!(facts.tokens, expected, "{} at {:?}", value, pointer);
    }

    /// Any TOML document built from the real keys and values of any type: validation returns
    /// a config or an error naming a key, and never panics.
    #[test]
    fn any_config_validates_or_names_a_key(doc in toml_doc()) {
        match toml::from_str::<RawConfig>(&doc) {
            Ok(raw) => {
                if let Ok(config) = raw.validate() {
                    // What check-config prints reads back as the same configuration.
                    let again: RawConfig = toml::from_str(&config.to_toml()).unwrap();
                    prop_assert!(again.validate().is_ok(), "{doc}");
                }
            }
            Err(e) => prop_assert!(!e.message().is_empty()),
        }
    }
}

proptest! {
    #![proptest_config(config(CASES / 4))]

    /// The follower gives the same lines whichever byte a write stops at.
    #[test]
    fn a_line_split_at_any_byte_reads_the_same(
        picks in prop::collection::vec((0..real_lines().len(), prop_oneof![Just(b"\n".to_vec()), Just(b"\r".to_vec()), Just(b"\r\n".to_vec())]), 1..8),
        split in any::<prop::sample::Index>(),
    ) {
        let mut text = Vec::new();
        for (i, end) in &picks {
            text.extend_from_slice(&real_lines()[*i]);
            text.extend_from_slice(end);
        }
        let at = split.index(text.len() + 1);
        let whole = read_in_writes(&[&text[..]]);
        let split = read_in_writes(&[&text[..at], &text[at..]]);
        prop_assert_eq!(&split, &whole, "split at byte {}", at);
        let mut parser = Parser::Auto(Detect::default());
        let mut again = Parser::Auto(Detect::default());
        for (a, b) in whole.iter().zip(&split) {
            prop_assert_eq!(parser.parse(a), again.parse(b));
        }
    }
}

/// The lines a follower hands out when the file is written in these pieces, polled after
/// each, and the last line's terminator is followed by nothing more.
fn read_in_writes(pieces: &[&[u8]]) -> Vec<Vec<u8>> {
    let dir = common::temp_dir();
    let path = dir.path().join("split.log");
    std::fs::write(&path, b"").unwrap();
    let mut follower = Follower::new(&path, 1 << 20);
    let mut lines = Vec::new();
    let mut poll = |follower: &mut Follower| {
        follower
            .poll(u64::MAX, |t| {
                if let Tailed::Line(l) = t {
                    lines.push(l.to_vec());
                }
            })
            .unwrap();
    };
    poll(&mut follower);
    for piece in pieces {
        append(&path, piece);
        poll(&mut follower);
    }
    lines
}

fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

/// What a token count field holds, read as serde_json reads it: the oracle for the inspector.
fn token_count(v: Option<&serde_json::Value>) -> Option<u64> {
    let float = |f: f64| (f >= 0.0 && f.is_finite()).then(|| f.round() as u64);
    match v? {
        serde_json::Value::Number(n) => n.as_u64().or_else(|| float(n.as_f64()?)),
        serde_json::Value::String(s) => float(s.parse().ok()?),
        _ => None,
    }
    .filter(|n| *n <= MAX_RECORD_TOKENS)
}

/// `value` written the way some writer might: each string character escaped or not (as
/// `\uXXXX`, surrogate pairs for what is past the BMP, or its short escape), and whitespace
/// between tokens, chosen by `seed`.
fn styled_json(value: &serde_json::Value, seed: u64) -> String {
    use serde_json::Value;
    use std::fmt::Write;
    fn write(v: &Value, next: &mut impl FnMut(u64) -> u64, out: &mut String) {
        let space = |next: &mut dyn FnMut(u64) -> u64, out: &mut String| {
            for _ in 0..[0, 0, 0, 1, 3][next(5) as usize] {
                out.push([' ', '\t', '\n', '\r'][next(4) as usize]);
            }
        };
        space(next, out);
        match v {
            Value::String(s) => {
                out.push('"');
                // Long strings, to cross block boundaries.
                let repeat = if next(8) == 0 {
                    1 + next(40) as usize
                } else {
                    1
                };
                for c in s.repeat(repeat).chars() {
                    match (c, next(3)) {
                        ('"', _) => out.push_str("\\\""),
                        ('\\', _) => out.push_str("\\\\"),
                        ('/', 0) => out.push_str("\\/"),
                        (c, 0) => {
                            let mut units = [0u16; 2];
                            for unit in c.encode_utf16(&mut units) {
                                let _ = write!(out, "\\u{unit:04x}");
                            }
                        }
                        (c, _) => out.push(c),
                    }
                }
                out.push('"');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, next, out);
                }
                space(next, out);
                out.push(']');
            }
            Value::Object(members) => {
                out.push('{');
                for (i, (key, item)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(&Value::String(key.clone()), next, out);
                    space(next, out);
                    out.push(':');
                    write(item, next, out);
                }
                space(next, out);
                out.push('}');
            }
            Value::Number(n) if n.is_f64() && next(2) == 0 => {
                let _ = write!(out, "{:e}", n.as_f64().unwrap_or_default());
            }
            other => out.push_str(&other.to_string()),
        }
        space(next, out);
    }
    let mut state = seed;
    let mut next = |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let mut out = String::new();
    write(value, &mut next, &mut out);
    out
}

/// Pieces that break JSON, or nearly do.
fn broken_json() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("\\ud83d".to_owned()),
        Just("\\ude42".to_owned()),
        Just("\\ud83d\\u0041".to_owned()),
        Just("\\uZZZZ".to_owned()),
        Just("\\u12".to_owned()),
        Just("\\x".to_owned()),
        Just("\\".to_owned()),
        Just("\"".to_owned()),
        Just("\u{1}".to_owned()),
        Just("\t".to_owned()),
        Just(",".to_owned()),
        Just("}".to_owned()),
        Just("]".to_owned()),
        Just("01".to_owned()),
        Just("-".to_owned()),
        Just("1e400".to_owned()),
        Just("2.e".to_owned()),
        Just("9".repeat(400)),
        Just("nul".to_owned()),
        Just("\u{e9}".to_owned()),
        Just("\u{7f}".to_owned()),
    ]
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{json, Value};
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(|n| json!(n)),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "[a-z0-9 .\\-\"\\\\\u{e9}\u{1F600}]{0,12}".prop_map(Value::String),
        number().prop_map(Value::String),
    ];
    let tree = leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("meta_info".to_owned()),
                    Just("completion_tokens".to_owned()),
                    Just("finish_reason".to_owned()),
                    Just("usage".to_owned()),
                    Just("text".to_owned()),
                    Just("error".to_owned()),
                    Just("choices".to_owned()),
                    "[a-z~/]{0,6}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    // Mostly records shaped like SGLang's, so the pointers resolve often.
    prop_oneof![
        tree.clone(),
        (tree.clone(), tree.clone(), tree).prop_map(|(tokens, reason, text)| json!({
            "text": text,
            "meta_info": {"completion_tokens": tokens, "finish_reason": {"type": reason}},
        })),
    ]
}

fn toml_doc() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "listen",
        "poll_interval",
        "max_line_bytes",
        "header_read_timeout",
        "snapshot_interval",
        "max_record_bytes",
        "gpu",
        "gpu_interval",
        "gpu_processes",
        "process_match",
        "pid_file",
        "server_health_url",
        "server_metrics_url",
        "probe_interval",
        "probe_timeout",
        "smtp",
        "email_to",
        "email_from",
        "smtp_timeout",
        "retry_backoff",
        "alert_interval",
        "repeat_interval",
        "stall_after",
        "dashboard_url",
        "hostname",
        "server_logs",
        "server_log_format",
        "inputs",
        "bogus",
    ]);
    let value = prop_oneof![
        prop::sample::select(vec![
            "\"0s\"",
            "\"10ms\"",
            "\"250ms\"",
            "\"5m\"",
            "\"500000000000y\"",
            "\"1000000000000y\"",
            "\"-1s\"",
            "\"often\"",
            "\"127.0.0.1:0\"",
            "\"0.0.0.0:65536\"",
            "\"http://127.0.0.1:0/\"",
            "\"http://[::1]:9/x\"",
            "\"smtp://h:0\"",
            "\"smtp://h:25?tls=none\"",
            "\"file:///tmp/m\"",
            "\"auto\"",
            "\"simulated\"",
            "\"vllm\"",
            "\"a@example.com\"",
            "[\"a@example.com\", \"A@example.com\"]",
            "[\"/a.log\", \"/./a.log\"]",
            "[]",
            "\"\"",
            "true",
            "nan",
            "inf",
            "-inf",
            "1e20",
        ])
        .prop_map(str::to_owned),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("TOML has no NaN payloads", |f| f.is_finite())
            .prop_map(|f| format!("{f:?}")),
    ];
    let rule = prop::sample::select(vec![
        "Stalled",
        "LogSilent",
        "ServerHung",
        "GpusIdle",
        "GpuMissing",
        "ThroughputDrop",
        "RunFinished",
        "Nope",
    ]);
    let rule_key = prop::sample::select(vec!["threshold", "for", "enabled"]);
    (
        prop::collection::btree_map(key, value.clone(), 0..8),
        prop::collection::vec((rule, rule_key, value), 0..4),
    )
        .prop_map(|(top, rules)| {
            let mut doc: String = top.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
            let mut seen = std::collections::BTreeSet::new();
            for (rule, key, value) in rules {
                if seen.insert((rule, key)) {
                    doc.push_str(&format!("[rules.{rule}]\n{key} = {value}\n"));
                }
            }
            doc
        })
}

/// Fuzzed logs, server logs and output files through the real binary: whatever they hold,
/// the exposition passes the real `promtool` and has no sample twice (which the exposition
/// formats forbid and promtool does not catch).
#[test]
fn fuzzed_inputs_through_the_binary_give_an_exposition_promtool_accepts() {
    use proptest::strategy::ValueTree;
    let promtool = common::require_tool("promtool", "prometheus");
    let mut runner = proptest::test_runner::TestRunner::new(config(8));
    let logs = prop::collection::vec(
        (log_line(), prop::sample::select(vec!["\n", "\r", "\r\n"])),
        0..200,
    );
    let records = prop::collection::vec(json_value(), 0..50);
    for round in 0..runner.config().cases {
        let dir = common::temp_dir();
        let mut args: Vec<String> = ["run", "--once", "--gpu", "simulated"]
            .map(str::to_owned)
            .to_vec();
        for (i, flag) in ["--log", "--log", "--server-log"].iter().enumerate() {
            let text: Vec<u8> = logs
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .into_iter()
                .flat_map(|(line, end)| line.into_iter().chain(end.bytes()))
                .collect();
            let path = dir.path().join(format!("log{i}.log"));
            std::fs::write(&path, text).unwrap();
            args.extend([flag.to_string(), path.display().to_string()]);
        }
        for part in ["B1_glaive", "B2 \"quoted\"\\"] {
            let folder = dir.path().join(part);
            std::fs::create_dir(&folder).unwrap();
            let text: String = records
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .iter()
                .map(|v| format!("{v}\n"))
                .collect();
            std::fs::write(folder.join("raw_responses.jsonl"), text).unwrap();
        }
        args.extend([
            "--outputs".to_owned(),
            format!("{}/*/raw_responses.jsonl", dir.path().display()),
        ]);
        let out = std::process::Command::new(common::BIN)
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "round {round}: {stderr}");
        let exposition = String::from_utf8(out.stdout).unwrap();
        let (ok, said) = common::promtool_check_metrics(&promtool, &exposition);
        assert!(
            ok && said.trim().is_empty(),
            "round {round}: promtool said:\n{said}\nabout:\n{exposition}"
        );
        let mut seen = std::collections::BTreeSet::new();
        for line in exposition.lines().filter(|l| !l.starts_with('#')) {
            let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
            assert!(
                seen.insert(series.to_owned()),
                "round {round}: {series} twice"
            );
        }
    }
}
