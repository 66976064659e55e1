//! Splitting bytes into lines across reads.

use super::{Open, TailStats, Tailed};
use memchr::memchr2_iter;

/// Splits `chunk` into lines, joining the held partial line to the first piece.
pub(super) fn split<F: FnMut(Tailed<'_>)>(
    chunk: &[u8],
    open: &mut Open,
    max_line: usize,
    split_cr: bool,
    stats: &mut TailStats,
    on_line: &mut F,
) {
    let mut start = 0;
    // Without `\r` as a terminator, searching for `\n` twice costs the same as once.
    let cr = if split_cr { b'\r' } else { b'\n' };
    for end in memchr2_iter(b'\n', cr, chunk) {
        let piece = &chunk[start..end];
        start = end + 1;
        if open.discarding {
            open.discarding = false;
        } else if !open.partial.is_empty() {
            if open.partial.len() + piece.len() > max_line {
                stats.oversized_lines += 1;
                on_line(Tailed::Oversized);
            } else {
                open.partial.extend_from_slice(piece);
                on_line(Tailed::Line(&open.partial));
            }
            open.partial.clear();
        } else if piece.len() > max_line {
            stats.oversized_lines += 1;
            on_line(Tailed::Oversized);
        } else if !piece.is_empty() {
            on_line(Tailed::Line(piece));
        }
    }
    let rest = &chunk[start..];
    if open.discarding || rest.is_empty() {
        return;
    }
    if open.partial.len() + rest.len() > max_line {
        stats.oversized_lines += 1;
        on_line(Tailed::Oversized);
        open.discarding = true;
        open.partial = Vec::new();
    } else {
        open.partial.extend_from_slice(rest);
    }
}
