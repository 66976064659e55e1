//! One JSONL record → the facts we count. Pure: bytes in, facts out.
//!
//! Fields are found with JSON pointers, several per fact, tried in order, so one default
//! configuration reads SGLang `/generate` records, OpenAI-style responses and flat records.

use super::lookup::{Found, Lookup, Want};
pub use super::Pointers;
pub use crate::model::Facts;
use std::ops::Range;

/// The pointers of a [`Pointers`] (and an output's required fields), compiled once into one
/// [`Lookup`] that resolves them all in a single pass over each record.
#[derive(Debug)]
pub struct Inspector {
    lookup: Lookup,
    /// Where each fact's pointers sit among the lookup's, in order.
    tokens: Range<usize>,
    finish_reason: Range<usize>,
    text: Range<usize>,
    error: Range<usize>,
    status: Range<usize>,
    result_type: Range<usize>,
    id: Range<usize>,
    prompt: Range<usize>,
    required: Range<usize>,
    /// The required fields' pointers, by their bit in [`Facts::missing`].
    required_fields: Vec<String>,
}

/// Ids a response carries for itself, not for its prompt: a re-run gets new ones, so they
/// cannot tell a duplicate (an OpenAI `chatcmpl-` id at `/id`, a batch line's `batch_req_`).
const RESPONSE_IDS: [&[u8]; 4] = [b"\"chatcmpl-", b"\"cmpl-", b"\"batch_req_", b"\"msg_"];

impl Inspector {
    pub fn new(pointers: &Pointers) -> Inspector {
        Inspector::with_required(pointers, &[])
    }

    /// An inspector that also checks that every record has each of `required`, not empty.
    pub fn with_required(pointers: &Pointers, required: &[String]) -> Inspector {
        // Token counts, finish reasons and result types are read from strings; texts and
        // errors only need to know whether there is anything in them; an identity is hashed
        // from the value as written.
        let lists = [
            (&pointers.tokens, Want::Text),
            (&pointers.finish_reason, Want::Text),
            (&pointers.text, Want::Presence),
            (&pointers.error, Want::Presence),
            (&pointers.status, Want::Text),
            (&pointers.result_type, Want::Text),
            (&pointers.id, Want::Raw),
            (&pointers.prompt, Want::Raw),
            (&required.to_vec(), Want::Presence),
        ];
        let all: Vec<(&str, Want)> = lists
            .iter()
            .flat_map(|(list, want)| list.iter().map(|p| (p.as_str(), *want)))
            .collect();
        let mut ranges = lists.iter().scan(0, |start, (list, _)| {
            let range = *start..*start + list.len();
            *start = range.end;
            Some(range)
        });
        let mut next = || ranges.next().expect("one range per list");
        Inspector {
            tokens: next(),
            finish_reason: next(),
            text: next(),
            error: next(),
            status: next(),
            result_type: next(),
            id: next(),
            prompt: next(),
            required: next(),
            required_fields: required.to_vec(),
            lookup: Lookup::new(&all),
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
        let error = first(&self.error).is_some_and(is_set)
            || first(&self.status).is_some_and(|s| !is_success(s))
            || first(&self.result_type).is_some_and(|t| !is_succeeded(t));
        // Texts are strings, and nulls and empty lists where a text could be (Anthropic's
        // `content: []`); anything else is a container holding the texts (`/response` of a
        // batch line), not one.
        let mut texts = found[self.text.clone()]
            .iter()
            .flatten()
            .filter(|t| {
                matches!(
                    t,
                    Found::Str { .. } | Found::Null | Found::Container { empty: true }
                )
            })
            .peekable();
        let has_text = texts.peek().is_some();
        let all_empty = texts.all(|t| match t {
            Found::Str { blank, .. } => *blank,
            _ => true,
        });
        let missing = found[self.required.clone()]
            .iter()
            .enumerate()
            .filter(|(_, f)| !f.as_ref().is_some_and(is_present))
            .fold(0u32, |bits, (i, _)| bits | 1 << i);
        Facts {
            invalid: false,
            tokens: first(&self.tokens).and_then(tokens),
            finish_reason: first(&self.finish_reason).and_then(reason),
            error,
            empty: has_text && all_empty && !error,
            identity: self.identity(&found),
            missing,
        }
    }

    pub fn required_fields(&self) -> &[String] {
        &self.required_fields
    }

    /// The record's id as written (its prompt's hash when it has no id), for the examples a
    /// notice names; `None` when it has neither.
    pub fn id_text(&self, line: &[u8]) -> Option<String> {
        let found = self.lookup.find(line)?;
        if let Some(raw) = self.id_raw(&found) {
            let text = String::from_utf8_lossy(raw);
            return Some(text.trim_matches('"').chars().take(80).collect());
        }
        self.identity(&found).map(|h| format!("prompt {h:016x}"))
    }

    fn id_raw<'a>(&self, found: &[Option<Found<'a>>]) -> Option<&'a [u8]> {
        found[self.id.clone()]
            .iter()
            .flatten()
            .find_map(|f| match f {
                Found::Raw(raw)
                    if !is_blank_id(raw) && !RESPONSE_IDS.iter().any(|p| raw.starts_with(p)) =>
                {
                    Some(*raw)
                }
                _ => None,
            })
    }

    fn identity(&self, found: &[Option<Found<'_>>]) -> Option<u64> {
        if let Some(raw) = self.id_raw(found) {
            return Some(hash(b'i', raw));
        }
        found[self.prompt.clone()]
            .iter()
            .flatten()
            .find_map(|f| match f {
                Found::Raw(raw) if !is_blank_id(raw) => Some(hash(b'p', raw)),
                _ => None,
            })
    }
}

/// An id that says nothing: null, an empty string, an empty container.
fn is_blank_id(raw: &[u8]) -> bool {
    matches!(raw, b"null" | b"\"\"" | b"[]" | b"{}")
}

/// SipHash over `bytes`, tagged by what they are. Never written to disk: a restarted
/// sidecar reads the files again, so the hash need not be stable across builds.
fn hash(tag: u8, bytes: &[u8]) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    let mut h = DefaultHasher::new();
    h.write_u8(tag);
    h.write(bytes);
    h.finish()
}

/// A required field is there when it holds something: not null, not an empty string or
/// container.
fn is_present(v: &Found) -> bool {
    match v {
        Found::Null => false,
        Found::Str { blank, .. } => !blank,
        Found::Container { empty } => !empty,
        _ => true,
    }
}

/// An HTTP status of 2xx, as a number or a string.
fn is_success(v: &Found) -> bool {
    match v {
        Found::U64(n) => (200..300).contains(n),
        Found::Str { text: Some(t), .. } => t.starts_with('2') && t.len() == 3,
        _ => false,
    }
}

fn is_succeeded(v: &Found) -> bool {
    matches!(v, Found::Str { text: Some(t), .. } if t == "succeeded")
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
        Found::Raw(raw) => !is_blank_id(raw),
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

    #[test]
    fn a_record_is_known_by_its_prompt_id_not_its_response_id() {
        let a = facts(r#"{"id":"chatcmpl-1","custom_id":"request-3","choices":[]}"#);
        let b = facts(r#"{"id":"chatcmpl-2","custom_id":"request-3","choices":[]}"#);
        let c = facts(r#"{"id":"chatcmpl-3","custom_id":"request-4","choices":[]}"#);
        assert!(a.identity.is_some());
        assert_eq!(
            a.identity, b.identity,
            "the same custom_id, another response"
        );
        assert_ne!(a.identity, c.identity);
        // An OpenAI response's own id says nothing of its prompt: the prompt does.
        let d = facts(r#"{"id":"chatcmpl-9","messages":[{"role":"user","content":"hi"}]}"#);
        let e = facts(r#"{"id":"chatcmpl-8","messages":[{"role":"user","content":"hi"}]}"#);
        assert_eq!(d.identity, e.identity);
        assert!(d.identity.is_some());
        assert_eq!(facts(r#"{"text":"no id, no prompt"}"#).identity, None);
        assert_eq!(facts(r#"{"id":null,"prompt":""}"#).identity, None);
        // A number and a string of it are different ids.
        assert_ne!(
            facts(r#"{"idx":7}"#).identity,
            facts(r#"{"idx":"7"}"#).identity
        );
    }

    #[test]
    fn batch_results_say_their_errors_in_their_status_and_type() {
        assert!(
            facts(r#"{"custom_id":"a","response":{"status_code":500,"body":{}},"error":null}"#)
                .error
        );
        assert!(!facts(r#"{"custom_id":"a","response":{"status_code":200,"body":{"choices":[{"message":{"content":"x"}}]}},"error":null}"#).error);
        for kind in ["errored", "canceled", "expired"] {
            let line = format!(r#"{{"custom_id":"a","result":{{"type":"{kind}"}}}}"#);
            assert!(facts(&line).error, "{kind}");
        }
        let ok = facts(
            r#"{"custom_id":"a","result":{"type":"succeeded","message":{"content":[],"stop_reason":"max_tokens","usage":{"output_tokens":3}}}}"#,
        );
        assert!(!ok.error && ok.empty && ok.truncated());
        assert_eq!(ok.tokens, Some(3));
    }

    #[test]
    fn required_fields_are_bits_of_the_facts() {
        let inspector = Inspector::with_required(
            &Pointers::default(),
            &[
                "/choices/0/message/reasoning_content".into(),
                "/usage".into(),
            ],
        );
        let f = |line: &str| inspector.inspect(line.as_bytes()).missing;
        assert_eq!(
            f(
                r#"{"choices":[{"message":{"content":"a","reasoning_content":"b"}}],"usage":{"x":1}}"#
            ),
            0
        );
        assert_eq!(
            f(
                r#"{"choices":[{"message":{"content":"a","reasoning_content":"  "}}],"usage":{"x":1}}"#
            ),
            0b01,
            "blank is missing"
        );
        assert_eq!(f(r#"{"choices":[{"message":{"content":"a"}}]}"#), 0b11);
        assert_eq!(inspector.required_fields().len(), 2);
    }

    #[test]
    fn a_duplicate_is_named_by_its_id() {
        let inspector = Inspector::new(&Pointers::default());
        assert_eq!(
            inspector
                .id_text(br#"{"custom_id":"request-3","x":1}"#)
                .as_deref(),
            Some("request-3")
        );
        assert_eq!(inspector.id_text(br#"{"idx":17}"#).as_deref(), Some("17"));
        assert!(inspector
            .id_text(br#"{"prompt":"hello"}"#)
            .is_some_and(|t| t.starts_with("prompt ")));
    }
}
