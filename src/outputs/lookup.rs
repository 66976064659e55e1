//! Resolves a fixed set of JSON pointers in one pass over a record, without building the
//! document. Values no pointer goes into are walked without being kept, and a string a pointer
//! ends at is looked at where it lies. Building a `serde_json::Value` per record and
//! splitting every pointer for every record was about half of inspection's time
//! (BENCHMARKS.md, output files).
//!
//! The answers are those of `serde_json::Value::pointer` on the parsed record, duplicate keys
//! included (the last one wins).

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// Kept strings longer than this are cut to it.
const MAX_KEPT: usize = 1024;

/// Where values no pointer goes into are walked: serde_json's `IgnoredAny` would be faster, but
/// it skips more leniently than it parses (lone surrogates, numbers out of range, nesting
/// depth), and a record must be invalid exactly when `serde_json::Value` says so.
static NOWHERE: Node = Node {
    ends: Vec::new(),
    under: Vec::new(),
    children: Vec::new(),
};

/// What a pointer found, reduced to what inspection asks of it.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F64(f64),
    Str {
        empty: bool,
        /// Empty after trimming whitespace.
        blank: bool,
        /// The string trimmed of whitespace, when its pointer asked for it to be kept; cut to
        /// `MAX_KEPT` bytes.
        text: Option<String>,
        /// Whether `text` was cut.
        cut: bool,
    },
    /// An array or an object, and whether it has no members.
    Container {
        empty: bool,
    },
}

/// The pointers, merged into a tree of reference tokens.
#[derive(Debug)]
pub struct Lookup {
    root: Node,
    /// Per pointer: whether a string it finds is kept whole.
    keep: Vec<bool>,
}

#[derive(Debug, Default)]
struct Node {
    /// The pointers that end here.
    ends: Vec<usize>,
    /// Every pointer that ends here or below: reset on entering, so the last duplicate wins.
    under: Vec<usize>,
    children: Vec<Child>,
}

#[derive(Debug)]
struct Child {
    token: String,
    /// The token as an array index, where it is one.
    index: Option<usize>,
    node: Node,
}

impl Lookup {
    /// `pointers` as (pointer, keep the strings it finds). A string that is not a JSON pointer
    /// (neither empty nor starting with `/`) never resolves, as with `Value::pointer`.
    pub fn new(pointers: &[(&str, bool)]) -> Lookup {
        let mut root = Node::default();
        for (i, (pointer, _)) in pointers.iter().enumerate() {
            let tokens: Vec<String> = match pointer.strip_prefix('/') {
                None if pointer.is_empty() => Vec::new(),
                None => continue,
                Some(rest) => rest
                    .split('/')
                    .map(|t| t.replace("~1", "/").replace("~0", "~"))
                    .collect(),
            };
            let mut node = &mut root;
            node.under.push(i);
            for token in tokens {
                let at = match node.children.iter().position(|c| c.token == token) {
                    Some(at) => at,
                    None => {
                        node.children.push(Child {
                            index: array_index(&token),
                            token,
                            node: Node::default(),
                        });
                        node.children.len() - 1
                    }
                };
                node = &mut node.children[at].node;
                node.under.push(i);
            }
            node.ends.push(i);
        }
        Lookup {
            root,
            keep: pointers.iter().map(|(_, keep)| *keep).collect(),
        }
    }

    /// What each pointer found, by index, when `line` is one JSON object; `None` when it is
    /// not JSON, or JSON but not an object.
    pub fn find(&self, line: &[u8]) -> Option<Vec<Option<Found>>> {
        // JSON is UTF-8 throughout, also in the strings the walk skips; checked once for the
        // whole line, which also spares serde_json checking each string it reads.
        let line = std::str::from_utf8(line).ok()?;
        let mut found = vec![None; self.keep.len()];
        let mut de = serde_json::Deserializer::from_str(line);
        let walk = Walk {
            node: &self.root,
            found: &mut found,
            keep: &self.keep,
        };
        let is_object = walk.deserialize(&mut de).ok()?;
        de.end().ok()?;
        is_object.then_some(found)
    }
}

/// As `serde_json` reads an array index from a pointer token: no sign, no leading zeros.
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// Walks one value with the node of the tree it sits at. Yields whether it was an object.
struct Walk<'a> {
    node: &'a Node,
    found: &'a mut [Option<Found>],
    keep: &'a [bool],
}

impl Walk<'_> {
    fn put(&mut self, found: impl Fn(usize) -> Found) {
        for &i in &self.node.ends {
            self.found[i] = Some(found(i));
        }
    }

    fn child<'b>(&'b mut self, node: &'b Node) -> Walk<'b> {
        for &i in &node.under {
            self.found[i] = None;
        }
        Walk {
            node,
            found: self.found,
            keep: self.keep,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(mut self) -> Result<bool, E> {
        self.put(|_| Found::Null);
        Ok(false)
    }

    fn visit_bool<E>(mut self, v: bool) -> Result<bool, E> {
        self.put(|_| Found::Bool(v));
        Ok(false)
    }

    fn visit_u64<E>(mut self, v: u64) -> Result<bool, E> {
        self.put(|_| Found::U64(v));
        Ok(false)
    }

    fn visit_i64<E>(mut self, v: i64) -> Result<bool, E> {
        self.put(|_| Found::I64(v));
        Ok(false)
    }

    fn visit_f64<E>(mut self, v: f64) -> Result<bool, E> {
        self.put(|_| Found::F64(v));
        Ok(false)
    }

    fn visit_str<E>(mut self, s: &str) -> Result<bool, E> {
        if !self.node.ends.is_empty() {
            let trimmed = s.trim();
            let cut = trimmed.len() > MAX_KEPT;
            let mut end = trimmed.len().min(MAX_KEPT);
            while !trimmed.is_char_boundary(end) {
                end -= 1;
            }
            let kept = &trimmed[..end];
            let keep = self.keep;
            self.put(|i| Found::Str {
                empty: s.is_empty(),
                blank: trimmed.is_empty(),
                text: keep[i].then(|| kept.to_owned()),
                cut,
            });
        }
        Ok(false)
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<bool, A::Error> {
        let mut empty = true;
        while let Some(at) = map.next_key_seed(Key(&self.node.children))? {
            empty = false;
            match at {
                Some(at) => {
                    let node = &self.node.children[at].node;
                    map.next_value_seed(self.child(node))?;
                }
                None => {
                    map.next_value_seed(self.child(&NOWHERE))?;
                }
            }
        }
        self.put(|_| Found::Container { empty });
        Ok(true)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<bool, A::Error> {
        let mut len = 0;
        loop {
            let child = self.node.children.iter().find(|c| c.index == Some(len));
            let more = match child {
                Some(c) => seq.next_element_seed(self.child(&c.node))?.is_some(),
                None => seq.next_element_seed(self.child(&NOWHERE))?.is_some(),
            };
            if !more {
                break;
            }
            len += 1;
        }
        self.put(|_| Found::Container { empty: len == 0 });
        Ok(false)
    }
}

/// An object key, matched against the tokens of the node's children without allocating.
struct Key<'a>(&'a [Child]);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, key: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|c| c.token == key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// What `Value::pointer` says, reduced the same way: the oracle.
    fn oracle(line: &str, pointers: &[&str]) -> Option<Vec<Option<Found>>> {
        let value: Value = serde_json::from_str(line).ok().filter(Value::is_object)?;
        Some(
            pointers
                .iter()
                .map(|p| {
                    value.pointer(p).map(|v| match v {
                        Value::Null => Found::Null,
                        Value::Bool(b) => Found::Bool(*b),
                        Value::Number(n) => n
                            .as_u64()
                            .map(Found::U64)
                            .or(n.as_i64().map(Found::I64))
                            .unwrap_or(Found::F64(n.as_f64().unwrap())),
                        Value::String(s) => Found::Str {
                            empty: s.is_empty(),
                            blank: s.trim().is_empty(),
                            text: Some(s.trim().to_owned()),
                            cut: false,
                        },
                        Value::Array(a) => Found::Container {
                            empty: a.is_empty(),
                        },
                        Value::Object(o) => Found::Container {
                            empty: o.is_empty(),
                        },
                    })
                })
                .collect(),
        )
    }

    #[test]
    fn agrees_with_value_pointer() {
        let pointers = [
            "",
            "/text",
            "/meta_info/completion_tokens",
            "/meta_info/finish_reason/type",
            "/meta_info/finish_reason",
            "/choices/0/message/content",
            "/choices/1",
            "/choices/01",
            "/a~1b",
            "/m~0n",
            "/arr/2/x",
            "/error",
            "no-slash",
            "/",
        ];
        let lookup = Lookup::new(&pointers.map(|p| (p, true)));
        for line in [
            r#"{"text":"hi","meta_info":{"completion_tokens":217,"finish_reason":{"type":"stop"}}}"#,
            r#"{"meta_info":{"completion_tokens":-3,"finish_reason":"length"}}"#,
            r#"{"meta_info":{"completion_tokens":2.5e3}}"#,
            r#"{"choices":[{"message":{"content":"  \n "}},{"x":1}],"text":""}"#,
            r#"{"choices":[]}"#,
            r#"{"a/b":1,"m~n":[true,false],"arr":[0,1,{"x":null}],"":"root-empty-key"}"#,
            r#"{"error":{},"text":null}"#,
            r#"{"error":[1],"text":"\u00e9\n\"quoted\""}"#,
            r#"{"meta_info":{"completion_tokens":1},"meta_info":{"finish_reason":"dup"}}"#,
            r#"{"choices":{"0":{"message":{"content":"object, not array"}}}}"#,
            r#"{}"#,
            r#"[1,2]"#,
            r#""string""#,
            r#"{"text":"x"} trailing"#,
            r#"{"text":"cut"#,
            "{\"text\":\"\u{1F600}\"}",
            // Where no pointer looks, the record must still be JSON as serde_json parses it.
            r#"{"prompt":"\ud83d","text":"lone surrogate elsewhere"}"#,
            r#"{"x":1e400,"text":"number out of range elsewhere"}"#,
            &format!(
                r#"{{"deep":{}{},"text":"too deep elsewhere"}}"#,
                "[".repeat(200),
                "]".repeat(200)
            ),
            &format!(
                r#"{{"deep":{}{},"text":"deep but fine"}}"#,
                "[".repeat(100),
                "]".repeat(100)
            ),
        ] {
            assert_eq!(
                lookup.find(line.as_bytes()),
                oracle(line, &pointers),
                "{line}"
            );
        }
        assert_eq!(lookup.find(b"{\"text\":\"\xff\"}"), None, "invalid UTF-8");
        assert_eq!(
            lookup.find(b"{\"skipped\":\"\xff\",\"text\":\"a\"}"),
            None,
            "invalid UTF-8 where no pointer looks"
        );
    }

    #[test]
    fn strings_are_kept_trimmed_and_cut_only_when_asked() {
        let long = format!("  {}é", "x".repeat(MAX_KEPT - 1));
        let line = format!(r#"{{"a":"{long}","b":"short"}}"#);
        let lookup = Lookup::new(&[("/a", true), ("/b", false)]);
        let found = lookup.find(line.as_bytes()).unwrap();
        let strings: Vec<_> = found
            .iter()
            .map(|f| match f {
                Some(Found::Str { text, cut, .. }) => (text.clone(), *cut),
                other => panic!("{other:?}"),
            })
            .collect();
        // The cut falls inside the two-byte "é": it is left out whole.
        assert_eq!(
            strings,
            [(Some("x".repeat(MAX_KEPT - 1)), true), (None, false)]
        );
    }
}
