//! One log to follow, as the configuration validated it.

use crate::parse::envelope::Envelope;
use crate::parse::{Format, Parser};
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct LogConfig {
    pub path: PathBuf,
    pub parser: Parser,
    /// An inference server's log (`server_logs`), not a progress log.
    pub server: bool,
    /// What wraps its lines.
    pub envelope: Envelope,
    /// As configured, for the effective configuration's TOML.
    pub format: Format,
    pub regex: Option<String>,
    pub unit_divisor: Option<u32>,
}

impl LogConfig {
    /// A log read with `parser` (for configurations built in code, such as the demo's).
    pub fn new(path: PathBuf, parser: Parser) -> LogConfig {
        let (format, regex) = match &parser {
            Parser::Auto(_) => (Format::Auto, None),
            Parser::Server(p) => (p.format().unwrap_or_default(), None),
            Parser::RunInference(_) => (Format::RunInference, None),
            Parser::Tqdm(_) => (Format::Tqdm, None),
            Parser::Regex(r) => (Format::Regex, Some(r.pattern().to_owned())),
        };
        LogConfig {
            server: matches!(parser, Parser::Server(_)),
            envelope: Envelope::Auto,
            path,
            parser,
            format,
            regex,
            unit_divisor: None,
        }
    }
}
