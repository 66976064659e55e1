//! Splitting bytes into lines across reads.

use super::{Open, TailStats};
use memchr::memchr2_iter;

/// Splits `chunk` into lines, joining the held partial line to the first piece.
pub(super) fn split<F: FnMut(&[u8])>(
    chunk: &[u8],
    open: &mut Open,
    max_line: usize,
    stats: &mut TailStats,
    on_line: &mut F,
) {
    let mut start = 0;
    for end in memchr2_iter(b'\n', b'\r', chunk) {
        let piece = &chunk[start..end];
        start = end + 1;
        if open.discarding {
            open.discarding = false;
        } else if !open.partial.is_empty() {
            if open.partial.len() + piece.len() > max_line {
                stats.oversized_lines += 1;
            } else {
                open.partial.extend_from_slice(piece);
                on_line(&open.partial);
            }
            open.partial.clear();
        } else if piece.len() > max_line {
            stats.oversized_lines += 1;
        } else if !piece.is_empty() {
            on_line(piece);
        }
    }
    let rest = &chunk[start..];
    if open.discarding || rest.is_empty() {
        return;
    }
    if open.partial.len() + rest.len() > max_line {
        stats.oversized_lines += 1;
        open.discarding = true;
        open.partial = Vec::new();
    } else {
        open.partial.extend_from_slice(rest);
    }
}
