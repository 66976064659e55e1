//! One JSONL record → the facts we count. Pure: bytes in, facts out.
//!
//! Fields are found with JSON pointers, several per fact, tried in order, so one default
//! configuration reads SGLang `/generate` records, OpenAI-style responses and flat records.

use super::lookup::{Found, Lookup};
pub use crate::config::Pointers;
pub use crate::model::Facts;
use std::ops::Range;

/// The pointers of a [`Pointers`], compiled once into one [`Lookup`] that resolves them all in
/// a single pass over each record.
#[derive(Debug)]
pub struct Inspector {
    lookup: Lookup,
    /// Where each fact's pointers sit among the lookup's, in order.
    tokens: Range<usize>,
    finish_reason: Range<usize>,
    text: Range<usize>,
    error: Range<usize>,
}

impl Inspector {
    pub fn new(pointers: &Pointers) -> Inspector {
        // Token counts and finish reasons are read from strings too; texts and errors only
        // need to know whether there is anything in them.
        let lists = [
            (&pointers.tokens, true),
            (&pointers.finish_reason, true),
            (&pointers.text, false),
            (&pointers.error, false),
        ];
        let all: Vec<(&str, bool)> = lists
            .iter()
            .flat_map(|(list, keep)| list.iter().map(|p| (p.as_str(), *keep)))
            .collect();
        let mut ranges = lists.iter().scan(0, |start, (list, _)| {
            let range = *start..*start + list.len();
            *start = range.end;
            Some(range)
        });
        let mut next = || ranges.next().expect("one range per list");
        let (tokens, finish_reason, text, error) = (next(), next(), next(), next());
        Inspector {
            lookup: Lookup::new(&all),
            tokens,
            finish_reason,
            text,
            error,
        }
    }

    pub fn inspect(&self, line: &[u8]) -> Facts {
        let Some(found) = self.lookup.find(line) else {
            return Facts {
                invalid: true,
                ..Facts::default()
            };
        };
        let first = |range: &Range<usize>| found[range.clone()].iter().flatten().next();
        let error = first(&self.error).is_some_and(is_set);
        let mut texts = found[self.text.clone()].iter().flatten().peekable();
        let has_text = texts.peek().is_some();
        let all_empty = texts.all(|t| match t {
            Found::Str { blank, .. } => *blank,
            Found::Null => true,
            _ => false,
        });
        Facts {
            invalid: false,
            tokens: first(&self.tokens).and_then(tokens),
            finish_reason: first(&self.finish_reason).and_then(reason),
            error,
            empty: has_text && all_empty && !error,
        }
    }
}

/// An error field counts when it says something: not null, false, 0 or "".
fn is_set(v: &Found) -> bool {
    match v {
        Found::Null => false,
        Found::Bool(b) => *b,
        Found::Str { empty, .. } => !empty,
        Found::U64(n) => *n != 0,
        Found::I64(n) => *n != 0,
        Found::F64(f) => *f != 0.0,
        Found::Container { empty } => !empty,
    }
}

/// Token counts as integers, floats (`217.0`) or strings (`"217"`); negatives are nonsense.
/// More completion tokens than any model writes in one response: a record that claims more
/// is corrupt, and its count would swamp (and once overflowed) the run's total.
pub const MAX_RECORD_TOKENS: u64 = 1_000_000_000;

fn tokens(v: &Found) -> Option<u64> {
    let float = |f: f64| (f >= 0.0 && f.is_finite()).then(|| f.round() as u64);
    let n = match v {
        Found::U64(n) => Some(*n),
        Found::F64(f) => float(*f),
        // A number over a kilobyte long is not a token count.
        Found::Str {
            text: Some(text),
            cut: false,
            ..
        } => float(text.parse().ok()?),
        _ => None,
    };
    n.filter(|n| *n <= MAX_RECORD_TOKENS)
}

/// Finish reasons become label values: short, printable, bounded.
fn reason(v: &Found) -> Option<String> {
    let Found::Str { text: Some(s), .. } = v else {
        return None;
    };
    if s.is_empty() {
        return None;
    }
    Some(
        s.chars()
            .take(32)
            .map(|c| if c.is_ascii_graphic() { c } else { '_' })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(json: &str) -> Facts {
        Inspector::new(&Pointers::default()).inspect(json.as_bytes())
    }

    #[test]
    fn sglang_generate_record() {
        let f = facts(
            r#"{"text":"Hello","meta_info":{"completion_tokens":217,"finish_reason":{"type":"stop","matched":151645}}}"#,
        );
        assert_eq!(f.tokens, Some(217));
        assert_eq!(f.finish_reason.as_deref(), Some("stop"));
        assert!(!f.empty && !f.error && !f.invalid);
    }

    #[test]
    fn an_impossible_token_count_is_no_count() {
        // Found by the fuzzer: two of these overflowed the file's token total.
        let f = facts(r#"{"text":"x","meta_info":{"completion_tokens":18446744073709551615}}"#);
        assert_eq!(f.tokens, None);
        let f = facts(r#"{"text":"x","meta_info":{"completion_tokens":1000000000}}"#);
        assert_eq!(f.tokens, Some(MAX_RECORD_TOKENS));
    }

    #[test]
    fn openai_style_record() {
        let f = facts(
            r#"{"choices":[{"message":{"content":"","reasoning_content":"thinking"},"finish_reason":"length"}],"usage":{"completion_tokens":10240}}"#,
        );
        assert_eq!(f.tokens, Some(10240));
        assert_eq!(f.finish_reason.as_deref(), Some("length"));
        assert!(!f.empty, "reasoning text is text");
        let f = facts(
            r#"{"choices":[{"message":{"content":"","reasoning_content":""},"finish_reason":"stop"}]}"#,
        );
        assert!(f.empty);
    }

    #[test]
    fn flat_record_with_error() {
        let f = facts(r#"{"response":"","error":"Request timed out","completion_tokens":0}"#);
        assert!(f.error);
        assert!(
            !f.empty,
            "an error is counted as an error, not as an empty response"
        );
        let f = facts(r#"{"response":"","error":null}"#);
        assert!(!f.error && f.empty);
    }

    #[test]
    fn odd_token_types() {
        assert_eq!(facts(r#"{"completion_tokens":"217"}"#).tokens, Some(217));
        assert_eq!(facts(r#"{"completion_tokens":217.0}"#).tokens, Some(217));
        assert_eq!(facts(r#"{"completion_tokens":216.6}"#).tokens, Some(217));
        assert_eq!(facts(r#"{"completion_tokens":-3}"#).tokens, None);
        assert_eq!(facts(r#"{"completion_tokens":"lots"}"#).tokens, None);
        assert_eq!(facts(r#"{"completion_tokens":[1]}"#).tokens, None);
    }

    #[test]
    fn not_objects_are_invalid() {
        for bad in [
            "not json",
            "[1,2,3]",
            "\"a string\"",
            "42",
            "{\"open\": ",
            "",
        ] {
            assert!(facts(bad).invalid, "{bad}");
        }
        assert!(
            Inspector::new(&Pointers::default())
                .inspect(b"\xff\xfe{}")
                .invalid
        );
    }

    #[test]
    fn no_text_field_is_not_empty() {
        let f = facts(r#"{"id":"x","meta_info":{"completion_tokens":5}}"#);
        assert!(!f.empty);
    }

    #[test]
    fn reasons_are_safe_label_values() {
        let f = facts(
            r#"{"finish_reason":"weird reason\n with a very long tail that goes on and on"}"#,
        );
        let r = f.finish_reason.unwrap();
        assert!(r.len() <= 32 && !r.contains('\n'), "{r}");
        // An error message several kilobytes long in the finish reason is still a reason.
        let long = format!(r#"{{"finish_reason":"  abort: {}"}}"#, "x".repeat(5000));
        assert_eq!(
            facts(&long).finish_reason.as_deref(),
            Some("abort:_xxxxxxxxxxxxxxxxxxxxxxxxx")
        );
        let long_number = format!(r#"{{"completion_tokens":"{}"}}"#, "9".repeat(2000));
        assert_eq!(facts(&long_number).tokens, None);
    }
}
