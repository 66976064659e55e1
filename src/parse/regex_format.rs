//! The `regex` format: the user's own regex with named groups for whatever their log prints.

use super::number::{parse_f64, parse_u64, trim};
use super::{parse_eta, Event, Progress};
use regex::bytes::{Captures, Regex};

/// The group names we understand. An unknown name is almost always a typo, so it is an error.
pub const GROUPS: [&str; 7] = [
    "completed",
    "planned",
    "errors",
    "rps",
    "avg_tokens",
    "eta",
    "partition",
];

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RegexFormatError {
    #[error("not a valid regex: {0}")]
    Syntax(String),
    #[error("unknown group name {0:?}; expected any of {GROUPS:?}")]
    UnknownGroup(String),
    #[error("has no named group; name at least one of {GROUPS:?}")]
    NoGroup,
}

#[derive(Debug, Clone)]
pub struct RegexFormat {
    regex: Regex,
}

impl RegexFormat {
    pub fn new(pattern: &str) -> Result<Self, RegexFormatError> {
        let regex = Regex::new(pattern).map_err(|e| RegexFormatError::Syntax(e.to_string()))?;
        let mut named = 0;
        for name in regex.capture_names().flatten() {
            if !GROUPS.contains(&name) {
                return Err(RegexFormatError::UnknownGroup(name.to_owned()));
            }
            named += 1;
        }
        if named == 0 {
            return Err(RegexFormatError::NoGroup);
        }
        Ok(RegexFormat { regex })
    }

    pub fn pattern(&self) -> &str {
        self.regex.as_str()
    }

    pub fn parse<'a>(&self, line: &'a [u8]) -> Option<Event<'a>> {
        let caps = self.regex.captures(line)?;
        let group = |name| caps_get(&caps, name);
        let p = Progress {
            tokens_per_second: None,
            partition: group("partition")
                .and_then(|s| std::str::from_utf8(s).ok())
                .filter(|s| !s.is_empty()),
            completed: group("completed").and_then(parse_u64),
            planned: group("planned").and_then(parse_u64),
            errors: group("errors").and_then(parse_u64),
            requests_per_second: group("rps").and_then(parse_f64),
            avg_completion_tokens: group("avg_tokens").and_then(parse_f64),
            eta_seconds: group("eta").and_then(parse_eta),
        };
        Some(Event::Progress(p))
    }
}

fn caps_get<'a>(caps: &Captures<'a>, name: &str) -> Option<&'a [u8]> {
    caps.name(name).map(|m| trim(m.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_groups_fill_progress() {
        let f = RegexFormat::new(
            r"^\[(?P<partition>\w+)\] done (?P<completed>\d+) of (?P<planned>\d+), (?P<errors>\d+) failed, (?P<rps>[\d.]+)/s, eta (?P<eta>\S+)",
        )
        .unwrap();
        let Some(Event::Progress(p)) =
            f.parse(b"[shard3] done 120 of 4000, 2 failed, 3.5/s, eta 18m")
        else {
            panic!()
        };
        assert_eq!(p.partition, Some("shard3"));
        assert_eq!(
            (p.completed, p.planned, p.errors),
            (Some(120), Some(4000), Some(2))
        );
        assert_eq!(p.requests_per_second, Some(3.5));
        assert_eq!(p.eta_seconds, Some(1080.0));
        assert_eq!(p.avg_completion_tokens, None);
        assert_eq!(f.parse(b"unrelated"), None);
    }

    #[test]
    fn subset_of_groups() {
        let f = RegexFormat::new(r"step (?P<completed>\d+)").unwrap();
        let Some(Event::Progress(p)) = f.parse(b"step 7") else {
            panic!()
        };
        assert_eq!(p.completed, Some(7));
        assert_eq!(p.partition, None);
    }

    #[test]
    fn bad_patterns_say_why() {
        assert!(matches!(
            RegexFormat::new("(unclosed"),
            Err(RegexFormatError::Syntax(_))
        ));
        assert_eq!(
            RegexFormat::new(r"(?P<complete>\d+)").unwrap_err(),
            RegexFormatError::UnknownGroup("complete".into())
        );
        assert_eq!(
            RegexFormat::new(r"(\d+)").unwrap_err(),
            RegexFormatError::NoGroup
        );
    }
}
