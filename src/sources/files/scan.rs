//! A JSON reader for one record: it accepts exactly what `serde_json::Value` accepts and
//! hands out values where they lie, without decoding strings nobody asked for.
//!
//! serde_json's rules, as `Value` applies them (serde_json 1.0 `de.rs` and `read.rs`):
//! the whole line is UTF-8; whitespace is space, tab, `\n` and `\r`; no byte below 0x20
//! inside a string; escapes are `\" \\ \/ \b \f \n \r \t \uXXXX`, with a `\u` leading
//! surrogate followed at once by a `\u` trailing one, and no trailing surrogate alone;
//! numbers are `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?` and must be finite; at most
//! 127 arrays and objects nested; no trailing commas; nothing after the value but whitespace.
//! Number ranges are left to serde_json itself: only numbers with an exponent or a long
//! integer part can be out of range, and those are rare enough to hand over.

use std::borrow::Cow;

/// serde_json's recursion limit: the 128th nested container is an error.
const MAX_DEPTH: u8 = 128;

pub struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    depth: u8,
}

/// One value's first token.
pub enum Token<'a> {
    Null,
    Bool(bool),
    /// A number's text, checked against the grammar (and the range, where it can be out of it).
    Number(&'a [u8]),
    /// A string's raw bytes between its quotes, and whether they hold an escape.
    Str {
        raw: &'a [u8],
        escaped: bool,
    },
    /// An opened object: read its members with [`Scan::next_key`], then [`Scan::leave`].
    Object,
    /// An opened array: read its elements with [`Scan::next_element`], then [`Scan::leave`].
    Array,
}

/// An object key, raw.
pub struct Key<'a> {
    raw: &'a [u8],
    escaped: bool,
}

impl<'a> Key<'a> {
    /// The key's bytes, decoded where it holds an escape (rare: keys are names).
    pub fn bytes(&self) -> Cow<'a, [u8]> {
        if self.escaped {
            Cow::Owned(decode(self.raw, true).into_owned().into_bytes())
        } else {
            Cow::Borrowed(self.raw)
        }
    }
}

impl<'a> Scan<'a> {
    /// `None` when `line` is not UTF-8.
    pub fn new(line: &'a [u8]) -> Option<Scan<'a>> {
        simdutf8::basic::from_utf8(line).ok()?;
        Some(Scan {
            b: line,
            i: 0,
            depth: 0,
        })
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// The first byte of the next value, without reading it.
    pub fn peek_value(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    /// Where the reader stands in the line.
    pub fn offset(&self) -> usize {
        self.i
    }

    /// The bytes read since `start`, an earlier [`Scan::offset`].
    pub fn since(&self, start: usize) -> &'a [u8] {
        &self.b[start..self.i]
    }

    /// Nothing but whitespace is left.
    pub fn end(&mut self) -> Option<()> {
        self.ws();
        (self.i == self.b.len()).then_some(())
    }

    /// Reads the next value's first token (all of it, unless it opens a container).
    pub fn token(&mut self) -> Option<Token<'a>> {
        self.ws();
        let token = match *self.b.get(self.i)? {
            b'{' => {
                self.enter()?;
                Token::Object
            }
            b'[' => {
                self.enter()?;
                Token::Array
            }
            b'"' => {
                let (raw, escaped) = self.string()?;
                Token::Str { raw, escaped }
            }
            b't' => self.literal(b"true", Token::Bool(true))?,
            b'f' => self.literal(b"false", Token::Bool(false))?,
            b'n' => self.literal(b"null", Token::Null)?,
            b'-' | b'0'..=b'9' => Token::Number(self.number()?),
            _ => return None,
        };
        Some(token)
    }

    /// Reads a value no pointer looks into: checked, not kept.
    pub fn skip_value(&mut self) -> Option<()> {
        match self.token()? {
            Token::Object => {
                let mut first = true;
                while self.next_key(first)?.is_some() {
                    first = false;
                    self.skip_value()?;
                }
                self.leave();
            }
            Token::Array => {
                let mut first = true;
                while self.next_element(first)? {
                    first = false;
                    self.skip_value()?;
                }
                self.leave();
            }
            _ => {}
        }
        Some(())
    }

    /// In an object: the next member's key, with its `:` read, or `Some(None)` at the `}`.
    /// `first` is whether no member was read yet.
    pub fn next_key(&mut self, first: bool) -> Option<Option<Key<'a>>> {
        self.ws();
        match *self.b.get(self.i)? {
            b'}' => {
                self.i += 1;
                return Some(None);
            }
            b',' if !first => {
                self.i += 1;
                self.ws();
            }
            _ if first => {}
            _ => return None,
        }
        if self.b.get(self.i) != Some(&b'"') {
            return None;
        }
        let (raw, escaped) = self.string()?;
        self.ws();
        if self.b.get(self.i) != Some(&b':') {
            return None;
        }
        self.i += 1;
        Some(Some(Key { raw, escaped }))
    }

    /// In an array: whether another element follows (its `,` read), or the `]` was read.
    pub fn next_element(&mut self, first: bool) -> Option<bool> {
        self.ws();
        match *self.b.get(self.i)? {
            b']' => {
                self.i += 1;
                Some(false)
            }
            b',' if !first => {
                self.i += 1;
                Some(true)
            }
            _ => Some(first).filter(|f| *f),
        }
    }

    /// Closes the container [`token`](Scan::token) opened.
    pub fn leave(&mut self) {
        self.depth -= 1;
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        self.i += 1;
        (self.depth < MAX_DEPTH).then_some(())
    }

    fn literal(&mut self, word: &[u8], token: Token<'a>) -> Option<Token<'a>> {
        if !self.b[self.i..].starts_with(word) {
            return None;
        }
        self.i += word.len();
        Some(token)
    }

    /// At a `"`: the string's raw bytes and whether it holds an escape.
    ///
    /// Strings are most of a record's bytes and hold an escape every few dozen bytes (texts
    /// written with `ensure_ascii` are full of `\uXXXX`), so this is inspection's inner loop.
    /// A loop that stopped at each escape spent most of its time on mispredicted branches;
    /// this one classifies 64 bytes at a time into bit masks and finds the escaped bytes and
    /// the closing quote with arithmetic on them (simdjson's method), leaving a branch only
    /// for each `\u`.
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        let start = self.i + 1;
        // Keys and short values end within 16 bytes, with no escape: one compare.
        if let Some(len) = self.b.get(start..start + 16).and_then(short_string) {
            self.i = start + len + 1;
            return Some((&self.b[start..start + len], false));
        }
        let mut base = start;
        // Whether the block's first byte is escaped by a backslash at the end of the last one.
        let mut carry = 0;
        // The `u` of a surrogate pair's second half, checked with the first, in the next block.
        let mut paired = 0;
        let mut any_escape = false;
        let mut padded = [b' '; 64];
        loop {
            let chunk: &[u8; 64] = match self.b.get(base..base + 64) {
                Some(full) => full.try_into().ok()?,
                None => {
                    let rest = self.b.get(base..)?;
                    padded[..rest.len()].copy_from_slice(rest);
                    padded[rest.len()..].fill(b' ');
                    &padded
                }
            };
            let block = Block::of(chunk);
            let escaped = escaped_bits(block.backslash, &mut carry);
            let ends = block.quote & !escaped;
            // The bytes before the closing quote, if it is in this block.
            let inside = ends.wrapping_sub(1) & !ends;
            if block.control & inside != 0 {
                return None;
            }
            let escapes = escaped & inside;
            if escapes != 0 {
                any_escape = true;
                let (mut bad, mut units) = (false, 0u64);
                let mut m = escapes;
                while m != 0 {
                    let k = m.trailing_zeros();
                    let class = ESCAPE[usize::from(chunk[k as usize])];
                    bad |= class == INVALID;
                    units |= u64::from(class == UNIT) << k;
                    m &= m - 1;
                }
                if bad {
                    return None;
                }
                units &= !std::mem::take(&mut paired);
                while units != 0 {
                    let k = units.trailing_zeros() as usize;
                    if escape(&self.b[base + k..])?.1 == 11 {
                        match k + 6 {
                            second @ 0..64 => units &= !(1 << second),
                            second => paired = 1 << (second - 64),
                        }
                    }
                    units &= units - 1;
                }
            }
            if ends != 0 {
                let end = base + ends.trailing_zeros() as usize;
                self.i = end + 1;
                return Some((&self.b[start..end], any_escape));
            }
            base += 64;
            if base >= self.b.len() {
                return None;
            }
        }
    }

    fn number(&mut self) -> Option<&'a [u8]> {
        let b = self.b;
        let start = self.i;
        let digits = |mut i: usize| {
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            i
        };
        let mut i = start + usize::from(b[start] == b'-');
        let int = i;
        match b.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => i = digits(i + 1),
            _ => return None,
        }
        // One leading zero only: `01` is no number.
        if b[int] == b'0' && b.get(i).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        let mut in_range = i - int <= 19;
        if b.get(i) == Some(&b'.') {
            let end = digits(i + 1);
            if end == i + 1 {
                return None;
            }
            i = end;
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            let end = digits(i);
            if end == i {
                return None;
            }
            i = end;
            in_range = false;
        }
        self.i = i;
        let text = &b[start..i];
        if !in_range {
            let text = std::str::from_utf8(text).ok()?;
            serde_json::from_str::<serde_json::Number>(text).ok()?;
        }
        Some(text)
    }
}

/// One 64-byte block of a string, as bit masks: bit k for byte k.
struct Block {
    quote: u64,
    backslash: u64,
    /// Bytes below 0x20, which may not appear in a string.
    control: u64,
}

impl Block {
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn of(chunk: &[u8; 64]) -> Block {
        use std::arch::x86_64::*;
        let (mut quote, mut backslash, mut control) = (0u64, 0u64, 0u64);
        for (n, lane) in chunk.chunks_exact(16).enumerate() {
            // SAFETY: SSE2 is part of the x86_64 baseline, and the unaligned 16-byte load
            // reads exactly `lane`.
            let (q, b, c) = unsafe {
                let v = _mm_loadu_si128(lane.as_ptr().cast());
                let q = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
                let b = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
                // Unsigned v <= 0x1f: min(v, 0x1f) == v.
                let c = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
                (
                    _mm_movemask_epi8(q) as u16,
                    _mm_movemask_epi8(b) as u16,
                    _mm_movemask_epi8(c) as u16,
                )
            };
            quote |= u64::from(q) << (16 * n);
            backslash |= u64::from(b) << (16 * n);
            control |= u64::from(c) << (16 * n);
        }
        Block {
            quote,
            backslash,
            control,
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline]
    fn of(chunk: &[u8; 64]) -> Block {
        Block::bytewise(chunk)
    }

    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    fn bytewise(chunk: &[u8; 64]) -> Block {
        let mask = |f: fn(u8) -> bool| {
            chunk
                .iter()
                .enumerate()
                .fold(0u64, |m, (k, &b)| m | (u64::from(f(b)) << k))
        };
        Block {
            quote: mask(|b| b == b'"'),
            backslash: mask(|b| b == b'\\'),
            control: mask(|b| b < 0x20),
        }
    }
}

/// The length of a string that ends within these 16 bytes with no backslash or control
/// character before its quote.
#[cfg(target_arch = "x86_64")]
#[inline]
fn short_string(lane: &[u8]) -> Option<usize> {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86_64 baseline; `lane` is 16 bytes (the caller slices it),
    // so the unaligned load stays within it.
    let (quote, other) = unsafe {
        debug_assert_eq!(lane.len(), 16);
        let v = _mm_loadu_si128(lane.as_ptr().cast());
        let q = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let b = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        let c = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
        (
            _mm_movemask_epi8(q) as u32,
            _mm_movemask_epi8(_mm_or_si128(b, c)) as u32,
        )
    };
    let before = quote.wrapping_sub(1) & !quote;
    (quote != 0 && other & before == 0).then(|| quote.trailing_zeros() as usize)
}

#[cfg(not(target_arch = "x86_64"))]
fn short_string(lane: &[u8]) -> Option<usize> {
    let end = lane
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
    (lane[end] == b'"').then_some(end)
}

/// The bytes escaped by a backslash, given the block's backslashes: in a run of them each
/// second one is escaped, and the byte after a run of odd length. `carry` says whether the
/// block's first byte is escaped, and is set for the next block. simdjson's
/// `find_escaped_branchless`.
fn escaped_bits(backslash: u64, carry: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    let backslash = backslash & !*carry;
    let follows = (backslash << 1) | *carry;
    let odd_starts = backslash & !EVEN & !follows;
    let (even_starts, overflow) = odd_starts.overflowing_add(backslash);
    *carry = u64::from(overflow);
    (EVEN ^ (even_starts << 1)) & follows
}

const INVALID: u8 = 0;
const SIMPLE: u8 = 1;
const UNIT: u8 = 2;

/// What may follow a backslash: one of `"\/bfnrt`, or `u` and four hex digits.
static ESCAPE: [u8; 256] = {
    let mut t = [INVALID; 256];
    let simple = b"\"\\/bfnrt";
    let mut i = 0;
    while i < simple.len() {
        t[simple[i] as usize] = SIMPLE;
        i += 1;
    }
    t[b'u' as usize] = UNIT;
    t
};

/// The escape after a `\`: the character it stands for (a surrogate pair is one) and how many
/// bytes it takes; `None` when serde_json refuses it.
fn escape(rest: &[u8]) -> Option<(char, usize)> {
    let c = match *rest.first()? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let n = hex4(rest.get(1..5)?)?;
            return match n {
                0xDC00..=0xDFFF => None,
                0xD800..=0xDBFF => {
                    if rest.get(5..7)? != b"\\u" {
                        return None;
                    }
                    let low = hex4(rest.get(7..11)?)?;
                    if !(0xDC00..=0xDFFF).contains(&low) {
                        return None;
                    }
                    let c = 0x10000 + ((n - 0xD800) << 10) + (low - 0xDC00);
                    Some((char::from_u32(c)?, 11))
                }
                _ => Some((char::from_u32(n)?, 5)),
            };
        }
        _ => return None,
    };
    Some((c, 1))
}

fn hex4(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |n, &d| {
        let v = char::from(d).to_digit(16)?;
        Some(n << 4 | v)
    })
}

/// Whether the string these raw bytes (checked by [`Scan`]) stand for is empty after
/// trimming whitespace, as `str::trim` trims it. Stops at the first other character, which
/// in a response is almost always the first.
pub fn is_blank(raw: &[u8]) -> bool {
    let mut i = 0;
    while i < raw.len() {
        let (c, len) = match raw[i] {
            b'\\' => match escape(&raw[i + 1..]) {
                Some((c, len)) => (c, len + 1),
                None => return false,
            },
            b if b < 0x80 => (char::from(b), 1),
            b => {
                let len = match b {
                    0xC0..=0xDF => 2,
                    0xE0..=0xEF => 3,
                    _ => 4,
                };
                let Some(c) = raw
                    .get(i..i + len)
                    .and_then(|s| std::str::from_utf8(s).ok())
                    .and_then(|s| s.chars().next())
                else {
                    return false;
                };
                (c, len)
            }
        };
        if !c.is_whitespace() {
            return false;
        }
        i += len;
    }
    true
}

/// The string these raw bytes (checked by [`Scan`]) stand for.
pub fn decode(raw: &[u8], escaped: bool) -> Cow<'_, str> {
    let text = String::from_utf8_lossy(raw);
    if !escaped {
        return text;
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = text.as_ref();
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        match escape(&rest.as_bytes()[at + 1..]) {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[at + 1 + len..];
            }
            None => {
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The string as a byte-at-a-time reader ends it: the oracle for the block reader.
    fn string_bytewise(b: &[u8]) -> Option<(usize, bool)> {
        let mut i = 1;
        let mut escaped = false;
        loop {
            match *b.get(i)? {
                b'"' => return Some((i, escaped)),
                b'\\' => {
                    escaped = true;
                    i += 1 + escape(&b[i + 1..])?.1;
                }
                c if c < 0x20 => return None,
                _ => i += 1,
            }
        }
    }

    #[test]
    fn the_block_reader_ends_strings_where_a_bytewise_one_does() {
        let pieces: [&[u8]; 14] = [
            b"a",
            b"xyz ",
            b"\\",
            b"\\\\",
            b"\\\"",
            b"\"",
            b"\\n",
            b"\\u00e9",
            b"\\ud83d\\ude42",
            b"\\ud83d",
            b"\\ude42",
            b"\\x",
            b"\x01",
            "\u{e9}".as_bytes(),
        ];
        let mut next = crate::testing::numbers(1);
        for case in 0..20_000 {
            let mut s = b"\"".to_vec();
            // Long runs of plain bytes put the pieces on and across 64-byte boundaries.
            for _ in 0..next(12) {
                s.extend(std::iter::repeat_n(b'p', next(70)));
                s.extend_from_slice(pieces[next(pieces.len())]);
            }
            if case % 3 != 0 {
                s.push(b'"');
            }
            s.extend_from_slice(b" ,");
            let mut scan = Scan {
                b: &s,
                i: 0,
                depth: 0,
            };
            let got = scan.string().map(|(raw, escaped)| (raw.len() + 1, escaped));
            assert_eq!(
                got,
                string_bytewise(&s),
                "{:?}",
                String::from_utf8_lossy(&s)
            );
            if let Some((end, _)) = got {
                assert_eq!(scan.i, end + 1);
            }
        }
    }

    #[test]
    fn escaped_bits_follow_backslash_runs_across_blocks() {
        for (line, want) in [
            (&b"\\\"x"[..], 0b10u64),
            (b"\\\\\"", 0b010),
            (b"\\\\\\\"", 0b1010),
        ] {
            let mut carry = 0;
            let mut chunk = [b' '; 64];
            chunk[..line.len()].copy_from_slice(line);
            let got = escaped_bits(Block::of(&chunk).backslash, &mut carry);
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(line));
            assert_eq!(carry, 0);
        }
        let mut chunk = [b'x'; 64];
        chunk[63] = b'\\';
        let mut carry = 0;
        assert_eq!(escaped_bits(Block::of(&chunk).backslash, &mut carry), 0);
        assert_eq!(carry, 1, "the next block's first byte is escaped");
        let mut chunk = [b'x'; 64];
        chunk[0] = b'\\';
        assert_eq!(
            escaped_bits(Block::of(&chunk).backslash, &mut carry),
            1,
            "the backslash is what the last block's backslash escapes"
        );
        assert_eq!(carry, 0, "and it escapes nothing itself");
        let text: Vec<u8> = (0..=255u8).cycle().take(64).collect();
        let chunk: &[u8; 64] = text[..].try_into().unwrap();
        let (fast, slow) = (Block::of(chunk), Block::bytewise(chunk));
        assert_eq!(
            (fast.quote, fast.backslash, fast.control),
            (slow.quote, slow.backslash, slow.control)
        );
    }

    #[test]
    fn escapes_decode_as_serde_json_decodes_them() {
        for json in [
            r#""plain""#,
            r#""tab\tnew\nline \"q\" back\\slash \/ \b\f\r""#,
            r#""caf\u00e9 \u00E9 \ud83d\ude42 \u2003""#,
        ] {
            let want: String = serde_json::from_str(json).unwrap();
            let raw = &json.as_bytes()[1..json.len() - 1];
            assert_eq!(decode(raw, raw.contains(&b'\\')), want, "{json}");
        }
    }

    #[test]
    fn blank_is_what_trim_leaves_empty() {
        for (json, blank) in [
            (r#""""#, true),
            (r#""  \n\t\r\f""#, true),
            (r#""\u2003\u00a0 \u3000""#, true),
            ("\"\u{2003}\u{a0}\"", true),
            (r#""  x""#, false),
            (r#""\b""#, false),
            (r#""\u0000""#, false),
            ("\"\u{e9}\"", false),
            (r#""\ud83d\ude42""#, false),
        ] {
            let s: String = serde_json::from_str(json).unwrap();
            assert_eq!(s.trim().is_empty(), blank, "{json}");
            assert_eq!(
                is_blank(&json.as_bytes()[1..json.len() - 1]),
                blank,
                "{json}"
            );
        }
    }
}
