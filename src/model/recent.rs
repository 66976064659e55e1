//! The last lines of the logs: what an engineer would `tail` before deciding anything.

use std::collections::VecDeque;

/// How many lines the alert email and status view show.
pub const RECENT_LINES: usize = 20;
/// A line longer than this is cut in the excerpt; the excerpt is for reading, not parsing.
const MAX_EXCERPT_BYTES: usize = 512;

/// A ring of the last [`RECENT_LINES`] lines. Buffers are reused, so keeping it costs a copy
/// per line and no allocation once warm.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct RecentLines {
    lines: VecDeque<String>,
}

impl RecentLines {
    pub fn push(&mut self, line: &[u8]) {
        let mut slot = if self.lines.len() == RECENT_LINES {
            self.lines.pop_front().unwrap_or_default()
        } else {
            String::new()
        };
        slot.clear();
        let cut = &line[..line.len().min(MAX_EXCERPT_BYTES)];
        match std::str::from_utf8(cut) {
            Ok(s) => slot.push_str(s),
            Err(_) => slot.push_str(&String::from_utf8_lossy(cut)),
        }
        self.lines.push_back(slot);
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(String::as_str)
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
