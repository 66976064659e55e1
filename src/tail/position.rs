//! Where a follower stands in its file, kept across sidecar restarts.
//!
//! An inode number alone does not identify a file: filesystems reuse them, and a log replaced
//! under the same name while the sidecar was down must not be resumed at a stale offset. So a
//! position also carries the file's first bytes and the bytes just before the offset, and is
//! trusted only when both still match.

use super::{FileId, Follower, Open};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};

/// Bytes of the file's start kept as its fingerprint.
pub const HEAD_BYTES: usize = 64;
/// Bytes before the offset kept to notice a rewrite.
pub const BEFORE_BYTES: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    pub dev: u64,
    pub ino: u64,
    /// Where the next unread line starts (an unfinished line is read again).
    pub offset: u64,
    pub head: Vec<u8>,
    pub before: Vec<u8>,
    /// The offset is inside an oversized line being skipped.
    pub discarding: bool,
}

/// Reads up to `len` bytes at `offset`.
fn read_exact_at(file: &File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0; len];
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut buf[filled..], offset + filled as u64)? {
            0 => break,
            n => filled += n,
        }
    }
    buf.truncate(filled);
    Ok(buf)
}

pub(super) fn head(file: &File) -> std::io::Result<Vec<u8>> {
    read_exact_at(file, 0, HEAD_BYTES)
}

/// Whether the bytes just before `offset` are still `expected`.
pub(super) fn bytes_match(file: &File, offset: u64, expected: &[u8]) -> bool {
    let len = expected.len() as u64;
    if len == 0 {
        return true;
    }
    if len > offset {
        return false;
    }
    read_exact_at(file, offset - len, expected.len()).is_ok_and(|got| got == expected)
}

/// Keeps the last [`BEFORE_BYTES`] of everything passed in, in order.
pub(super) fn keep_last(before: &mut Vec<u8>, chunk: &[u8]) {
    if chunk.len() >= BEFORE_BYTES {
        before.clear();
        before.extend_from_slice(&chunk[chunk.len() - BEFORE_BYTES..]);
    } else {
        before.extend_from_slice(chunk);
        let excess = before.len().saturating_sub(BEFORE_BYTES);
        before.drain(..excess);
    }
}

impl Position {
    fn id(&self) -> FileId {
        FileId {
            dev: self.dev,
            ino: self.ino,
        }
    }

    /// Whether `file` is the file this position was taken in, and still holds what we read.
    fn matches(&self, file: &File) -> bool {
        let Ok(meta) = file.metadata() else {
            return false;
        };
        FileId::of(&meta) == self.id()
            && meta.len() >= self.offset
            && head(file).is_ok_and(|h| h.starts_with(&self.head))
            && bytes_match(file, self.offset, &self.before)
    }

    fn reopen(&self, file: File) -> Open {
        let mut open = Open::new(file, self.id());
        open.offset = self.offset;
        open.before = self.before.clone();
        open.discarding = self.discarding;
        open
    }
}

impl Follower {
    /// Where to resume after a restart: the start of the unfinished line, if any.
    pub fn position(&self) -> Option<Position> {
        let open = self.current.as_ref()?;
        let offset = if open.discarding {
            open.offset
        } else {
            open.offset - open.partial.len() as u64
        };
        let start = offset.saturating_sub(BEFORE_BYTES as u64);
        Some(Position {
            dev: open.id.dev,
            ino: open.id.ino,
            offset,
            head: head(&open.file).ok()?,
            before: read_exact_at(&open.file, start, (offset - start) as usize).ok()?,
            discarding: open.discarding,
        })
    }

    /// Continues from a saved position. Returns whether the file at the path is the one the
    /// position describes; if not, it will be read from its beginning, and if the old file was
    /// rotated to a sibling name (`app.log.1`), its unread rest is drained first.
    pub fn resume(&mut self, position: &Position) -> bool {
        if let Ok(file) = File::open(&self.path) {
            if position.matches(&file) {
                self.current = Some(position.reopen(file));
                return true;
            }
        }
        if let Some(old) = self.find_rotated(position) {
            self.stats.rotations += 1;
            self.draining.push(old);
        }
        false
    }

    fn find_rotated(&self, position: &Position) -> Option<Open> {
        let dir = self.path.parent()?;
        let dir = if dir.as_os_str().is_empty() {
            std::path::Path::new(".")
        } else {
            dir
        };
        std::fs::read_dir(dir).ok()?.flatten().find_map(|entry| {
            let meta = entry.metadata().ok()?;
            if meta.ino() != position.ino || meta.dev() != position.dev {
                return None;
            }
            let file = File::open(entry.path()).ok()?;
            position.matches(&file).then(|| position.reopen(file))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines(f: &mut Follower) -> Vec<String> {
        let mut out = Vec::new();
        f.poll(u64::MAX, |t| {
            if let crate::tail::Tailed::Line(l) = t {
                out.push(String::from_utf8_lossy(l).into_owned())
            }
        })
        .unwrap();
        out
    }

    fn append(path: &std::path::Path, bytes: &[u8]) {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
    }

    #[test]
    fn keep_last_keeps_the_tail() {
        let mut b = Vec::new();
        keep_last(&mut b, b"abc");
        keep_last(&mut b, &[b'x'; 40]);
        assert_eq!(b, vec![b'x'; BEFORE_BYTES]);
        keep_last(&mut b, b"yz");
        assert_eq!(&b[BEFORE_BYTES - 2..], b"yz");
        assert_eq!(b.len(), BEFORE_BYTES);
    }

    #[test]
    fn resumes_at_the_start_of_the_unfinished_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        append(&path, b"one\ntwo\nthr");
        let mut f = Follower::new(&path, 1024);
        assert_eq!(lines(&mut f), ["one", "two"]);
        let pos = f.position().unwrap();
        assert_eq!(pos.offset, 8);
        append(&path, b"ee\nfour\n");
        let mut again = Follower::new(&path, 1024);
        assert!(again.resume(&pos));
        assert_eq!(lines(&mut again), ["three", "four"]);
    }

    #[test]
    fn a_file_replaced_under_the_same_name_is_read_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        append(&path, b"old line one\nold line two\n");
        let mut f = Follower::new(&path, 1024);
        lines(&mut f);
        let pos = f.position().unwrap();
        drop(f);
        // Same length, same name, maybe even the same inode number: different content.
        std::fs::remove_file(&path).unwrap();
        append(&path, b"new line one\nnew line two\nnew line three\n");
        let mut again = Follower::new(&path, 1024);
        assert!(!again.resume(&pos));
        assert_eq!(lines(&mut again).len(), 3);
    }

    #[test]
    fn a_file_rotated_while_down_is_drained_from_where_we_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        append(&path, b"a\nb\n");
        let mut f = Follower::new(&path, 1024);
        assert_eq!(lines(&mut f), ["a", "b"]);
        let pos = f.position().unwrap();
        drop(f);
        append(&path, b"c\n");
        std::fs::rename(&path, dir.path().join("log.1")).unwrap();
        append(&path, b"d\n");
        let mut again = Follower::new(&path, 1024);
        assert!(!again.resume(&pos));
        assert_eq!(lines(&mut again), ["c", "d"]);
        assert_eq!(again.stats().rotations, 1);
    }
}
