//! Log line → progress event.
//!
//! Parsers work on raw bytes, not `&str`: a log may hold invalid UTF-8 (a crashed writer, a
//! binary dump in a traceback) and we must not pay for validating every line on the hot path.
//! Events borrow from the line, so matching a line allocates nothing.

pub mod ansi;
mod detect;
pub mod envelope;
pub mod library;
pub(crate) mod number;
mod regex_format;
mod run_inference;
pub mod server;
mod tqdm;

pub use detect::Detect;
pub use regex_format::{RegexFormat, RegexFormatError};
pub use run_inference::RunInference;
pub use server::{
    Pools, Rank, RequestLine, ServerEvent, ServerLine, ServerLog, ServerRead, ServerReport, Stamp,
};
pub use tqdm::Tqdm;

use std::fmt;
use std::str::FromStr;

/// What one log line says about the run.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    /// `Model: /shared/kimi-k2.5-int4`
    Model(&'a str),
    /// `Processing: B1_glaive (SHORT)`: the partition that the following progress lines belong to.
    Partition {
        name: &'a str,
        mode: Option<&'a str>,
    },
    /// `B1_glaive: 10000 prompts`
    Planned {
        name: &'a str,
        planned: u64,
    },
    /// `Running 10000 requests (concurrency=150, max_tokens=10240)...`
    Running {
        requests: u64,
        concurrency: Option<u64>,
        max_tokens: Option<u64>,
    },
    Progress(Progress<'a>),
    /// A progress bar that tracks queueing, not work (vLLM's `Adding requests`): recognised,
    /// and changes nothing.
    Queued,
    /// The driver says the whole run is done (`All partitions complete.`).
    RunComplete,
    /// A data-generation library says a stage of its work is done (a datatrove task, a
    /// distilabel step, a Curator call): the run is over if its driver ends with nothing said
    /// after ([`library`]).
    StageDone,
    /// A library's line that shows it at work, with no figure in it.
    Working,
    /// A line that looks like progress but cannot be read exactly (a count with a suffix we do
    /// not know, numbers that contradict each other). It changes no figure and is counted in
    /// `pulse_log_lines_unparsed_total`: a confident wrong number is worse than none.
    Unparsed,
    /// A line of the inference server's own log.
    Server(ServerRead),
}

/// Whether a log whose first line is `line` is a run beginning rather than one continuing (a
/// rotated log's new file, which begins with more progress): a header (`Model:`,
/// `Processing:`, `N prompts`, `Running N requests`, and the seed driver's preamble before
/// them, `Loading tokenizer from …` and `Vocab size: N`) or a report of nothing done yet (a tqdm
/// bar at 0). What a new run in the same folder is told by (docs/many-nodes.md#run-ids); a
/// line neither format reads is no beginning.
pub fn starts_a_run(line: &[u8]) -> bool {
    let mut plain = Vec::new();
    let line = ansi::strip(line, &mut plain);
    let event = RunInference
        .parse(line)
        .or_else(|| Tqdm::default().parse(line));
    if run_inference::is_preamble(line) {
        return true;
    }
    match event {
        Some(Event::Model(_) | Event::Partition { .. } | Event::Planned { .. }) => true,
        Some(Event::Running { .. }) => true,
        Some(Event::Progress(p)) => p.completed == Some(0),
        _ => false,
    }
}

/// A progress report. `partition` is set only by formats that name it on the line itself
/// (tqdm's description, a regex `partition` group); otherwise the line belongs to the
/// partition of the log's latest `Partition` event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress<'a> {
    pub partition: Option<&'a str>,
    pub completed: Option<u64>,
    pub planned: Option<u64>,
    pub errors: Option<u64>,
    pub requests_per_second: Option<f64>,
    pub avg_completion_tokens: Option<f64>,
    pub eta_seconds: Option<f64>,
    /// Output tokens per second as the pipeline reports them (a tqdm postfix such as vLLM's
    /// `output: 11765.43 toks/s`).
    pub tokens_per_second: Option<f64>,
}

/// The built-in log formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// Found from the log's first recognisable lines ([`Detect`]).
    #[default]
    Auto,
    RunInference,
    Tqdm,
    Regex,
    /// Inference server logs (`--server-log`).
    Sglang,
    Vllm,
    /// A data-generation library's own lines (datatrove, Curator, distilabel): found, never
    /// guessed, from a line only a library writes.
    Library,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::RunInference => "run_inference",
            Format::Tqdm => "tqdm",
            Format::Regex => "regex",
            Format::Sglang => "sglang",
            Format::Vllm => "vllm",
            Format::Library => "library",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Format::Auto),
            "run_inference" => Ok(Format::RunInference),
            "tqdm" => Ok(Format::Tqdm),
            "regex" => Ok(Format::Regex),
            "sglang" => Ok(Format::Sglang),
            "vllm" => Ok(Format::Vllm),
            "library" => Ok(Format::Library),
            other => Err(format!(
                "unknown log format {other:?}; expected auto, run_inference, tqdm, library or regex (sglang or vllm for server logs)"
            )),
        }
    }
}

/// A configured parser for one log.
#[derive(Debug, Clone)]
pub enum Parser {
    Auto(Detect),
    RunInference(RunInference),
    Tqdm(Tqdm),
    Regex(RegexFormat),
    /// An inference server's log, SGLang or vLLM.
    Server(ServerLog),
}

impl Parser {
    /// Parses one line (without its terminator or ANSI escapes). `None` means the line is not
    /// one we know, which is normal: tracebacks, warnings and banners pass through unmatched.
    /// Mutable because `auto` learns the format from the lines it sees.
    pub fn parse<'a>(&mut self, line: &'a [u8]) -> Option<Event<'a>> {
        match self {
            Parser::Auto(p) => p.parse(line),
            // A configured format reads a line as a found one does (discovery may hand over a
            // log with the format it sniffed).
            Parser::RunInference(_) => detect::run_inference_line(Tqdm::default(), line),
            Parser::Tqdm(t) => detect::tqdm_line(*t, line),
            Parser::Regex(p) => p.parse(line),
            Parser::Server(p) => p.parse(line).map(|read| match read.line {
                ServerLine::Unreadable => Event::Unparsed,
                _ => Event::Server(read),
            }),
        }
    }

    /// How this log's tqdm frames are read (its `unit_divisor`).
    pub fn tqdm(&self) -> Tqdm {
        match self {
            Parser::Tqdm(t) => *t,
            Parser::Auto(d) => d.tqdm(),
            _ => Tqdm::default(),
        }
    }

    /// The format lines are read in: the configured one, or the one `auto` found (`None`
    /// while it has not decided).
    pub fn format(&self) -> Option<Format> {
        match self {
            Parser::Auto(p) => p.chosen(),
            Parser::RunInference(_) => Some(Format::RunInference),
            Parser::Tqdm(_) => Some(Format::Tqdm),
            Parser::Regex(_) => Some(Format::Regex),
            Parser::Server(p) => p.format(),
        }
    }
}

/// Parses a duration as printed by progress logs: `2.4h`, `35m`, `12s`, `1.5d`, a bare number of
/// seconds, or a clock `01:42` / `1:01:42` as tqdm prints it.
pub fn parse_eta(s: &[u8]) -> Option<f64> {
    let s = number::trim(s);
    if s.is_empty() {
        return None;
    }
    if s.contains(&b':') {
        return number::clock_seconds(s);
    }
    let (digits, unit) = match s.last()? {
        b's' => (&s[..s.len() - 1], 1.0),
        b'm' => (&s[..s.len() - 1], 60.0),
        b'h' => (&s[..s.len() - 1], 3600.0),
        b'd' => (&s[..s.len() - 1], 86400.0),
        _ => (s, 1.0),
    };
    let v = number::parse_f64(digits)?;
    (v >= 0.0).then_some(v * unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_units() {
        assert_eq!(parse_eta(b"2.4h"), Some(2.4 * 3600.0));
        assert_eq!(parse_eta(b"35m"), Some(2100.0));
        assert_eq!(parse_eta(b"12s"), Some(12.0));
        assert_eq!(parse_eta(b"1.5d"), Some(129600.0));
        assert_eq!(parse_eta(b"90"), Some(90.0));
        assert_eq!(parse_eta(b"01:42"), Some(102.0));
        assert_eq!(parse_eta(b"1:01:42"), Some(3702.0));
        assert_eq!(parse_eta(b"?"), None);
        assert_eq!(parse_eta(b"h"), None);
        assert_eq!(parse_eta(b""), None);
        assert_eq!(parse_eta(b"-3s"), None);
    }

    #[test]
    fn format_names_round_trip() {
        for f in [
            Format::Auto,
            Format::RunInference,
            Format::Tqdm,
            Format::Regex,
            Format::Sglang,
            Format::Vllm,
        ] {
            assert_eq!(f.as_str().parse::<Format>(), Ok(f));
        }
        assert!("json"
            .parse::<Format>()
            .unwrap_err()
            .contains("run_inference"));
    }
}
