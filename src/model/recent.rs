//! The last lines of the logs: what an engineer would `tail` before deciding anything.

use std::borrow::Cow;
use std::collections::VecDeque;

/// How many lines the alert email and status view show.
pub const RECENT_LINES: usize = 20;
/// A line longer than this is cut in the excerpt; the excerpt is for reading, not parsing.
const MAX_EXCERPT_BYTES: usize = 512;

/// A ring of the last [`RECENT_LINES`] lines. Lines are kept as bytes and decoded only when
/// read, and buffers are reused, so keeping it costs one short copy per line.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct RecentLines {
    lines: VecDeque<Vec<u8>>,
}

impl RecentLines {
    pub fn push(&mut self, line: &[u8]) {
        let mut slot = if self.lines.len() == RECENT_LINES {
            self.lines.pop_front().unwrap_or_default()
        } else {
            Vec::new()
        };
        slot.clear();
        slot.extend_from_slice(&line[..line.len().min(MAX_EXCERPT_BYTES)]);
        self.lines.push_back(slot);
    }

    /// The lines, oldest first; invalid UTF-8 shows as U+FFFD.
    pub fn iter(&self) -> impl Iterator<Item = Cow<'_, str>> {
        self.lines.iter().map(|l| String::from_utf8_lossy(l))
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_lines_in_order() {
        let mut r = RecentLines::default();
        for i in 0..50 {
            r.push(format!("line {i}").as_bytes());
        }
        let got: Vec<_> = r.iter().collect();
        assert_eq!(got.len(), RECENT_LINES);
        assert_eq!(got[0], "line 30");
        assert_eq!(got[RECENT_LINES - 1], "line 49");
    }

    #[test]
    fn invalid_utf8_and_long_lines_are_kept_readable() {
        let mut r = RecentLines::default();
        r.push(b"bad \xff byte");
        r.push(&[b'x'; 4096]);
        let got: Vec<_> = r.iter().collect();
        assert_eq!(got[0], "bad \u{fffd} byte");
        assert_eq!(got[1].len(), MAX_EXCERPT_BYTES);
    }
}
