//! ANSI escape sequences, removed before a line is parsed or kept.
//!
//! vLLM and SGLang colour their log prefixes, tqdm colours its bar (`colour=`) and moves the
//! cursor between nested bars (`ESC[A`); none of that is text a person or a parser wants.

/// `line` without its escape sequences: borrowed as is when it has none (the common case,
/// one `memchr`), else written into `buf`.
pub fn strip<'a>(line: &'a [u8], buf: &'a mut Vec<u8>) -> &'a [u8] {
    let Some(first) = memchr::memchr(0x1b, line) else {
        return line;
    };
    buf.clear();
    buf.extend_from_slice(&line[..first]);
    let mut i = first;
    while i < line.len() {
        if line[i] != 0x1b {
            let next = memchr::memchr(0x1b, &line[i..]).map_or(line.len(), |n| i + n);
            buf.extend_from_slice(&line[i..next]);
            i = next;
            continue;
        }
        i += 1;
        match line.get(i) {
            // CSI: `ESC [`, parameter and intermediate bytes, one final byte in 0x40..=0x7e.
            Some(b'[') => {
                i += 1;
                while i < line.len() && !(0x40..=0x7e).contains(&line[i]) {
                    i += 1;
                }
                i += 1;
            }
            // OSC: `ESC ]` up to BEL or `ESC \`.
            Some(b']') => {
                i += 1;
                while i < line.len() && line[i] != 0x07 && !line[i..].starts_with(b"\x1b\\") {
                    i += 1;
                }
                i += if line[i..].starts_with(b"\x1b\\") {
                    2
                } else {
                    1
                };
            }
            // Any other escape is two bytes (`ESC 7`, `ESC M`, ...).
            Some(_) => i += 1,
            None => {}
        }
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::strip;

    fn stripped(line: &[u8]) -> String {
        let mut buf = Vec::new();
        String::from_utf8_lossy(strip(line, &mut buf)).into_owned()
    }

    #[test]
    fn colours_cursor_moves_and_titles_go() {
        assert_eq!(stripped(b"plain"), "plain");
        assert_eq!(
            stripped("col:   2%|\x1b[32m▏         \x1b[0m| 1/50".as_bytes()),
            "col:   2%|▏         | 1/50"
        );
        assert_eq!(stripped(b"\x1b[Ainner: 25%"), "inner: 25%");
        assert_eq!(
            stripped(b"\x1b[32mINFO\x1b[0m 08-17 02:59:34 [loggers.py:310] x"),
            "INFO 08-17 02:59:34 [loggers.py:310] x"
        );
        assert_eq!(stripped(b"\x1b]0;title\x07after"), "after");
        assert_eq!(stripped(b"\x1b]0;title\x1b\\after"), "after");
        assert_eq!(stripped(b"a\x1b7b\x1b8c"), "abc");
    }

    #[test]
    fn cut_sequences_end_the_line_without_a_panic() {
        assert_eq!(stripped(b"text\x1b"), "text");
        assert_eq!(stripped(b"text\x1b[3"), "text");
        assert_eq!(stripped(b"text\x1b]0;ti"), "text");
    }
}
