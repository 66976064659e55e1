//! The `name: value` fields of a stats message, found by exact name: `token usage` is not
//! `full token usage`, and optional or reordered fields do not matter.

use super::super::number::{leading_decimal, parse_f64, trim};

/// A field's number: absent, read, or present but not a number we can read exactly (a line
/// that holds one changes no figure).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Absent,
    Number(f64),
    Bad,
}

/// The fields of a message: `a: 1, b: 2.5 tokens/s, c: 3%` (SGLang ends with `, `; vLLM's
/// `KV fetch: 1 waiting, 2 in progress` puts commas inside a field, whose pieces hold no
/// `: ` and are skipped).
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    text: &'a [u8],
}

impl<'a> Fields<'a> {
    pub fn new(text: &'a [u8]) -> Fields<'a> {
        Fields { text }
    }

    fn pairs(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        self.text.split(|&b| b == b',').filter_map(|piece| {
            let at = memchr::memmem::find(piece, b": ")?;
            Some((trim(&piece[..at]), trim(&piece[at + 2..])))
        })
    }

    /// The value of the field named exactly `name`, as a number with an optional unit after
    /// it (`tokens/s`, `reqs`, `%`).
    pub fn number(&self, name: &[u8]) -> Value {
        let Some((_, value)) = self.pairs().find(|(n, _)| *n == name) else {
            return Value::Absent;
        };
        let (digits, unit) = leading_decimal(value);
        match parse_f64(digits) {
            Some(v) if unit.is_empty() || unit.starts_with(b" ") || unit == b"%" => {
                Value::Number(v)
            }
            _ => Value::Bad,
        }
    }

    /// The name of the first field whose name ends with `suffix` (vLLM's `CPU KV cache usage`).
    pub fn name_ending(&self, suffix: &[u8]) -> Option<&'a [u8]> {
        self.pairs().map(|(n, _)| n).find(|n| n.ends_with(suffix))
    }

    /// The value of the field named exactly `name`, as written.
    pub fn raw(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.pairs().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    pub fn has(&self, name: &[u8]) -> bool {
        self.pairs().any(|(n, _)| n == name)
    }
}

/// Numbers read from one message: the first field that cannot be read makes the whole
/// message unreadable.
#[derive(Debug, Default)]
pub struct Reading {
    pub bad: bool,
}

impl Reading {
    pub fn take(&mut self, value: Value) -> Option<f64> {
        match value {
            Value::Absent => None,
            Value::Number(v) => Some(v),
            Value::Bad => {
                self.bad = true;
                None
            }
        }
    }

    /// A ratio printed 0-1 (or as a percentage with `percent`): out of range is unreadable.
    pub fn ratio(&mut self, value: Value, percent: bool) -> Option<f64> {
        let v = self.take(value)? / if percent { 100.0 } else { 1.0 };
        if (0.0..=1.0).contains(&v) {
            Some(v)
        } else {
            self.bad = true;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_names_units_and_bad_values() {
        let f = Fields::new(b"#running-req: 3, full token usage: 0.50, token usage: 0.25, gen throughput (token/s): 12.00, Running: 4 reqs, GPU KV cache usage: 1.5%, cuda graph: True, ");
        assert_eq!(f.number(b"token usage"), Value::Number(0.25));
        assert_eq!(f.number(b"full token usage"), Value::Number(0.5));
        assert_eq!(f.number(b"Running"), Value::Number(4.0));
        assert_eq!(f.number(b"GPU KV cache usage"), Value::Number(1.5));
        assert_eq!(f.number(b"cuda graph"), Value::Bad);
        assert_eq!(f.number(b"#queue-req"), Value::Absent);
        assert_eq!(
            f.name_ending(b"KV cache usage"),
            Some(&b"GPU KV cache usage"[..])
        );
        assert_eq!(Fields::new(b"x: 12abc").number(b"x"), Value::Bad);
        let mut r = Reading::default();
        assert_eq!(r.ratio(Value::Number(150.0), true), None);
        assert!(r.bad);
    }
}
