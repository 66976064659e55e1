//! Splitting bytes into lines across reads.

use super::{Open, TailStats, Tailed};
use memchr::{memchr2_iter, memchr_iter};

/// How lines are found and handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Lines end at `\n` or `\r`, each handed out (progress logs: tqdm frames end at `\r`).
    Lines,
    /// Lines end at `\n` only (JSONL), each handed out.
    NewlineOnly,
    /// Lines end at `\n` only and are only counted: one [`Tailed::Counted`] per chunk.
    Count,
}

/// Splits `chunk` into lines, joining the held partial line to the first piece.
pub(super) fn split<F: FnMut(Tailed<'_>)>(
    chunk: &[u8],
    open: &mut Open,
    max_line: usize,
    mode: Mode,
    stats: &mut TailStats,
    on_line: &mut F,
) {
    let start = match mode {
        Mode::Lines => pieces(
            memchr2_iter(b'\n', b'\r', chunk),
            chunk,
            open,
            max_line,
            stats,
            on_line,
        ),
        // memchr2 with one byte twice is about half as fast as memchr with it once.
        Mode::NewlineOnly => pieces(
            memchr_iter(b'\n', chunk),
            chunk,
            open,
            max_line,
            stats,
            on_line,
        ),
        Mode::Count => count(chunk, open, max_line, stats, on_line),
    };
    hold_rest(&chunk[start..], open, max_line, stats, on_line);
}

/// Hands out each line that ends in `chunk`; returns where the unfinished rest begins.
fn pieces<F: FnMut(Tailed<'_>)>(
    ends: impl Iterator<Item = usize>,
    chunk: &[u8],
    open: &mut Open,
    max_line: usize,
    stats: &mut TailStats,
    on_line: &mut F,
) -> usize {
    let mut start = 0;
    for end in ends {
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
    start
}

/// The counting twin of [`pieces`]: the same lines, the same oversized ones, but the lines
/// are summed instead of handed out, so a record costs a newline search and two additions.
fn count<F: FnMut(Tailed<'_>)>(
    chunk: &[u8],
    open: &mut Open,
    max_line: usize,
    stats: &mut TailStats,
    on_line: &mut F,
) -> usize {
    let mut start = 0;
    let (mut lines, mut bytes) = (0u64, 0u64);
    for end in memchr_iter(b'\n', chunk) {
        let len = end - start;
        start = end + 1;
        if open.discarding {
            open.discarding = false;
            continue;
        }
        let len = len + open.partial.len();
        open.partial.clear();
        if len > max_line {
            stats.oversized_lines += 1;
            on_line(Tailed::Oversized);
        } else if len > 0 {
            lines += 1;
            bytes += len as u64 + 1;
        }
    }
    if lines > 0 {
        on_line(Tailed::Counted { lines, bytes });
    }
    start
}

/// Keeps the unfinished last line for the next read, or starts discarding it when it is
/// already too long.
fn hold_rest<F: FnMut(Tailed<'_>)>(
    rest: &[u8],
    open: &mut Open,
    max_line: usize,
    stats: &mut TailStats,
    on_line: &mut F,
) {
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
