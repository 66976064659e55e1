//! Resolves a fixed set of JSON pointers in one pass over a record, without building the
//! document. Values no pointer goes into are checked and skipped, and a string a pointer ends
//! at is looked at where it lies.
//!
//! The pass is our own reader ([`super::scan`]), not serde_json's: inspection is the slowest
//! thing pulse does to a run's outputs, and serde_json's walk (decoding every string with an
//! escape into a buffer, a visitor call per value) held it under 1 GB/s (BENCHMARKS.md, output
//! files). It accepts exactly what `serde_json::Value` accepts, which the tests check against
//! serde_json itself, and the answers are those of `serde_json::Value::pointer` on the parsed
//! record, duplicate keys included (the last one wins).

use super::scan::{Scan, Token};
use std::borrow::Cow;

/// Kept strings longer than this are cut to it.
const MAX_KEPT: usize = 1024;

/// Where values no pointer goes into are walked.
static NOWHERE: Node = Node {
    ends: Vec::new(),
    under: Vec::new(),
    children: Vec::new(),
};

/// What a pointer found, reduced to what inspection asks of it.
#[derive(Debug, Clone, PartialEq)]
pub enum Found<'a> {
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
        /// `MAX_KEPT` bytes. Borrowed from the record unless it holds an escape.
        text: Option<Cow<'a, str>>,
        /// Whether `text` was cut.
        cut: bool,
    },
    /// An array or an object, and whether it has no members.
    Container {
        empty: bool,
    },
    /// The value as written in the record, for a pointer that asked for it whole (a prompt,
    /// hashed as the record's identity).
    Raw(&'a [u8]),
}

/// What a pointer wants of the value it ends at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Its kind, and for a string whether it is empty.
    Presence,
    /// A string's text too (trimmed, cut to 1 KiB).
    Text,
    /// The value's bytes as written.
    Raw,
}

/// The pointers, merged into a tree of reference tokens.
#[derive(Debug)]
pub struct Lookup {
    root: Node,
    /// Per pointer: what it wants of the value it ends at.
    want: Vec<Want>,
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
    /// `pointers` as (pointer, what it wants). A string that is not a JSON pointer (neither
    /// empty nor starting with `/`) never resolves, as with `Value::pointer`.
    pub fn new(pointers: &[(&str, Want)]) -> Lookup {
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
            want: pointers.iter().map(|(_, want)| *want).collect(),
        }
    }

    /// What each pointer found, by index, when `line` is one JSON object; `None` when it is
    /// not JSON, or JSON but not an object.
    pub fn find<'a>(&self, line: &'a [u8]) -> Option<Vec<Option<Found<'a>>>> {
        let mut scan = Scan::new(line)?;
        let mut found = vec![None; self.want.len()];
        let mut walk = Walk {
            found: &mut found,
            want: &self.want,
            scan: &mut scan,
        };
        // Only an object is a record; whatever else it is, it is invalid, JSON or not.
        if walk.scan.peek_value()? != b'{' {
            return None;
        }
        walk.value(&self.root)?;
        scan.end()?;
        Some(found)
    }
}

/// As `serde_json` reads an array index from a pointer token: no sign, no leading zeros.
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// Walks values with the node of the pointer tree each sits at.
struct Walk<'a, 'b> {
    found: &'a mut [Option<Found<'b>>],
    want: &'a [Want],
    scan: &'a mut Scan<'b>,
}

impl<'b> Walk<'_, 'b> {
    fn put(&mut self, node: &Node, found: impl Fn(usize) -> Found<'b>) {
        for &i in &node.ends {
            self.found[i] = Some(found(i));
        }
    }

    /// Entering a child forgets what an earlier duplicate of it found.
    fn enter(&mut self, node: &Node) {
        for &i in &node.under {
            self.found[i] = None;
        }
    }

    /// Reads one value; `None` when the record is not JSON.
    fn value(&mut self, node: &Node) -> Option<()> {
        if node.ends.is_empty() && node.children.is_empty() {
            return self.scan.skip_value();
        }
        if node.ends.iter().any(|&i| self.want[i] == Want::Raw) {
            self.scan.peek_value()?;
            let start = self.scan.offset();
            self.read(node)?;
            let raw = self.scan.since(start);
            for &i in &node.ends {
                if self.want[i] == Want::Raw {
                    self.found[i] = Some(Found::Raw(raw));
                }
            }
            return Some(());
        }
        self.read(node)
    }

    fn read(&mut self, node: &Node) -> Option<()> {
        match self.scan.token()? {
            Token::Null => self.put(node, |_| Found::Null),
            Token::Bool(b) => self.put(node, |_| Found::Bool(b)),
            Token::Number(text) => {
                if !node.ends.is_empty() {
                    let n = number(text)?;
                    self.put(node, |_| n.clone());
                }
            }
            Token::Str { raw, escaped } => {
                if !node.ends.is_empty() {
                    self.string(node, raw, escaped);
                }
            }
            Token::Object => {
                let mut empty = true;
                while let Some(key) = self.scan.next_key(empty)? {
                    empty = false;
                    let key = key.bytes();
                    let child = node.children.iter().find(|c| c.token.as_bytes() == &*key);
                    let child = child.map_or(&NOWHERE, |c| &c.node);
                    self.enter(child);
                    self.value(child)?;
                }
                self.scan.leave();
                self.put(node, |_| Found::Container { empty });
            }
            Token::Array => {
                let mut len = 0;
                while self.scan.next_element(len == 0)? {
                    let child = node.children.iter().find(|c| c.index == Some(len));
                    let child = child.map_or(&NOWHERE, |c| &c.node);
                    self.enter(child);
                    self.value(child)?;
                    len += 1;
                }
                self.scan.leave();
                self.put(node, |_| Found::Container { empty: len == 0 });
            }
        }
        Some(())
    }

    /// A string a pointer ends at: kept (trimmed, cut) only for the pointers that asked.
    fn string(&mut self, node: &Node, raw: &'b [u8], escaped: bool) {
        let wants_text = node.ends.iter().any(|&i| self.want[i] == Want::Text);
        if !wants_text {
            let blank = super::scan::is_blank(raw);
            self.put(node, |_| Found::Str {
                empty: raw.is_empty(),
                blank,
                text: None,
                cut: false,
            });
            return;
        }
        let trimmed_cut = |s: &str| {
            let trimmed = s.trim();
            let mut end = trimmed.len().min(MAX_KEPT);
            while !trimmed.is_char_boundary(end) {
                end -= 1;
            }
            (trimmed.len() > MAX_KEPT, trimmed.is_empty(), end)
        };
        let (cut, blank, kept) = match super::scan::decode(raw, escaped) {
            Cow::Borrowed(s) => {
                let (cut, blank, end) = trimmed_cut(s);
                (cut, blank, Cow::Borrowed(&s.trim()[..end]))
            }
            Cow::Owned(s) => {
                let (cut, blank, end) = trimmed_cut(&s);
                (cut, blank, Cow::Owned(s.trim()[..end].to_owned()))
            }
        };
        let want = self.want;
        self.put(node, |i| Found::Str {
            empty: raw.is_empty(),
            blank,
            text: (want[i] == Want::Text).then(|| kept.clone()),
            cut,
        });
    }
}

/// A number a pointer ends at, as `serde_json::Value` holds it. Plain counts (what token
/// fields hold) are read here; anything else is left to serde_json, so a float's last bit
/// and what is out of range are its.
fn number(text: &[u8]) -> Option<Found<'static>> {
    if let Some(n) = crate::parse::number::parse_u64(text) {
        return Some(Found::U64(n));
    }
    let text = std::str::from_utf8(text).ok()?;
    let n: serde_json::Number = serde_json::from_str(text).ok()?;
    Some(match (n.as_u64(), n.as_i64()) {
        (Some(u), _) => Found::U64(u),
        (None, Some(i)) => Found::I64(i),
        _ => Found::F64(n.as_f64()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// What `Value::pointer` says, reduced the same way: the oracle.
    fn oracle(line: &str, pointers: &[&str]) -> Option<Vec<Option<Found<'static>>>> {
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
                            text: Some(Cow::Owned(s.trim().to_owned())),
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
        let lookup = Lookup::new(&pointers.map(|p| (p, Want::Text)));
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
        // serde_json's nesting limit, on either side of it.
        for depth in 125..=128 {
            let line = format!(r#"{{"a":{}{}}}"#, "[".repeat(depth), "]".repeat(depth));
            let want = oracle(&line, &pointers);
            assert_eq!(want.is_some(), depth < 127, "the limit is where we think");
            assert_eq!(lookup.find(line.as_bytes()), want, "{depth} deep");
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
        let lookup = Lookup::new(&[("/a", Want::Text), ("/b", Want::Presence)]);
        let found = lookup.find(line.as_bytes()).unwrap();
        let strings: Vec<_> = found
            .iter()
            .map(|f| match f {
                Some(Found::Str { text, cut, .. }) => (text.as_deref().map(str::to_owned), *cut),
                other => panic!("{other:?}"),
            })
            .collect();
        // The cut falls inside the two-byte "é": it is left out whole.
        assert_eq!(
            strings,
            [(Some("x".repeat(MAX_KEPT - 1)), true), (None, false)]
        );
    }

    #[test]
    fn a_raw_pointer_gets_the_value_as_written() {
        let lookup = Lookup::new(&[("/messages", Want::Raw), ("/messages/0/role", Want::Text)]);
        let line = br#"{"id":1, "messages": [{"role":"user","content":"hi \u00e9"}] ,"x":2}"#;
        let found = lookup.find(line).unwrap();
        assert_eq!(
            found[0],
            Some(Found::Raw(br#"[{"role":"user","content":"hi \u00e9"}]"#))
        );
        assert!(matches!(&found[1], Some(Found::Str { text: Some(t), .. }) if t == "user"));
        // A record that is not JSON after the raw value is still no record.
        assert_eq!(lookup.find(br#"{"messages": [1], }"#), None);
    }
}
