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
use std::path::{Path, PathBuf};

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
    pub(super) fn id(&self) -> FileId {
        FileId {
            dev: self.dev,
            ino: self.ino,
        }
    }

    /// Whether `file` is the file this position was taken in, and still holds what we read.
    pub(super) fn matches(&self, file: &File) -> bool {
        let Ok(meta) = file.metadata() else {
            return false;
        };
        FileId::of(&meta) == self.id()
            && meta.len() >= self.offset
            && head(file).is_ok_and(|h| h.starts_with(&self.head))
            && bytes_match(file, self.offset, &self.before)
    }

    pub(super) fn reopen(&self, file: File, gzip: bool) -> Open {
        let mut open = Open::new(file, self.id(), gzip);
        open.offset = self.offset;
        open.before = self.before.clone();
        open.discarding = self.discarding;
        open
    }
}

/// What a restart found of the files a snapshot listed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resumed {
    /// The current file is still at the path and reading continues in place.
    pub in_place: bool,
    /// Files being drained again, where they were found, and the byte they resume at.
    pub draining: Vec<(PathBuf, u64)>,
    /// Files that exist nowhere in the log's folder any more (deleted, or moved elsewhere):
    /// whatever was written to them after the saved offset cannot be read.
    pub lost: Vec<Position>,
}

impl Follower {
    /// Where to resume the current file after a restart: the start of its unfinished line.
    pub fn position(&self) -> Option<Position> {
        match &self.current {
            Some(open) => position_of(open),
            None => self.closed.clone(),
        }
    }

    /// Where to resume each rotated-away file still being drained, oldest first.
    pub fn draining_positions(&self) -> Vec<Position> {
        self.draining.iter().filter_map(position_of).collect()
    }

    /// Continues from a snapshot's positions: each draining file is found again by identity
    /// (at the path or at a sibling name) and drained first, in order; then the current file
    /// continues in place if it is still at the path. If it is not, it was rotated while we were
    /// down: found at a sibling name (`app.log.1`), its unread rest is drained too, and the file
    /// now at the path is read from its beginning.
    pub fn resume(&mut self, current: Option<&Position>, draining: &[Position]) -> Resumed {
        let mut resumed = Resumed::default();
        if self.drain_rotated {
            for position in draining {
                self.resume_draining(position, &mut resumed);
            }
        }
        let Some(position) = current else {
            return resumed;
        };
        if let Ok(file) = super::open_nonblocking(&self.path) {
            if position.matches(&file) {
                self.current = Some(position.reopen(file, self.gzip));
                resumed.in_place = true;
                return resumed;
            }
        }
        if self.drain_rotated {
            let before = resumed.draining.len();
            self.resume_draining(position, &mut resumed);
            if resumed.draining.len() > before {
                self.stats.rotations += 1;
                self.switches += 1;
            }
        }
        resumed
    }

    fn resume_draining(&mut self, position: &Position, resumed: &mut Resumed) {
        let already = |open: &Open| open.id == position.id();
        if self.draining.iter().any(already) {
            return;
        }
        match self.find(position) {
            Some((path, open)) => {
                resumed.draining.push((path, position.offset));
                self.draining.push(open);
            }
            None => resumed.lost.push(position.clone()),
        }
    }

    /// The file `position` was taken in, anywhere in the log's folder (the path included).
    fn find(&self, position: &Position) -> Option<(PathBuf, Open)> {
        let dir = self.path.parent()?;
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        std::fs::read_dir(dir).ok()?.flatten().find_map(|entry| {
            let meta = entry.metadata().ok()?;
            if meta.ino() != position.ino || meta.dev() != position.dev {
                return None;
            }
            let file = super::open_nonblocking(&entry.path()).ok()?;
            position
                .matches(&file)
                .then(|| (entry.path(), position.reopen(file, self.gzip)))
        })
    }
}

pub(super) fn position_of(open: &Open) -> Option<Position> {
    // Inside a gzip member the raw offset says nothing of where the lines stand.
    if let Some(inflate) = &open.inflate {
        if !inflate.at_member_boundary() || !open.partial.is_empty() || open.discarding {
            return None;
        }
    }
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
        assert!(again.resume(Some(&pos), &[]).in_place);
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
        assert!(!again.resume(Some(&pos), &[]).in_place);
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
        assert!(!again.resume(Some(&pos), &[]).in_place);
        assert_eq!(lines(&mut again), ["c", "d"]);
        assert_eq!(again.stats().rotations, 1);
    }

    /// A rename rotation with the writer's descriptor still on the old file: `log` holds
    /// `a`, is renamed to `log.1`, and a new `log` holds `new`; the follower has switched.
    fn rotated_and_switched(path: &std::path::Path) -> (Follower, std::fs::File) {
        append(path, b"a\n");
        let mut f = Follower::new(path, 1024);
        assert_eq!(lines(&mut f), ["a"]);
        let writer = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        std::fs::rename(path, path.with_extension("1")).unwrap();
        append(path, b"new\n");
        let switches = f.switches();
        assert_eq!(lines(&mut f), ["new"]);
        assert_eq!(f.switches(), switches + 1, "the switch is announced");
        (f, writer)
    }

    #[test]
    fn a_restart_while_draining_drains_the_rotated_file_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let (f, mut writer) = rotated_and_switched(&path);
        let (current, draining) = (f.position(), f.draining_positions());
        assert_eq!(draining.len(), 1);
        drop(f);
        writer.write_all(b"late\n").unwrap();
        append(&path, b"newer\n");
        let mut again = Follower::new(&path, 1024);
        let resumed = again.resume(current.as_ref(), &draining);
        assert!(resumed.in_place);
        assert_eq!(resumed.draining, [(path.with_extension("1"), 2)]);
        assert_eq!(lines(&mut again), ["late", "newer"]);
    }

    #[test]
    fn a_restart_while_the_path_is_missing_keeps_the_rotated_file_in_its_positions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        append(&path, b"a\n");
        let mut f = Follower::new(&path, 1024);
        assert_eq!(lines(&mut f), ["a"]);
        let saved = f.position();
        drop(f);
        std::fs::rename(&path, path.with_extension("1")).unwrap();
        append(&path.with_extension("1"), b"b\n");
        // Restarted while `log` does not exist: the old file is found and drained...
        let mut second = Follower::new(&path, 1024);
        let resumed = second.resume(saved.as_ref(), &[]);
        assert!(!resumed.in_place);
        assert_eq!(lines(&mut second), ["b"]);
        assert_eq!(second.position(), None);
        // ...and its position is what a snapshot keeps, so a third start resumes it too.
        let draining = second.draining_positions();
        assert_eq!(draining.len(), 1);
        assert_eq!(second.stats().rotations, 1);
        drop(second);
        append(&path.with_extension("1"), b"c\n");
        append(&path, b"d\n");
        let mut third = Follower::new(&path, 1024);
        third.resume(None, &draining);
        assert_eq!(lines(&mut third), ["c", "d"]);
    }

    #[test]
    fn a_drained_file_back_at_the_path_is_not_read_twice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let (f, _writer) = rotated_and_switched(&path);
        let draining = f.draining_positions();
        drop(f);
        // The new file is removed and the old one renamed back.
        std::fs::remove_file(&path).unwrap();
        std::fs::rename(path.with_extension("1"), &path).unwrap();
        append(&path, b"b\n");
        let mut again = Follower::new(&path, 1024);
        again.resume(None, &draining);
        assert_eq!(lines(&mut again), ["b"]);
        assert_eq!(again.draining_positions(), []);
        assert!(again.position().is_some());
    }

    #[test]
    fn a_rotated_file_gone_from_the_folder_is_reported_lost() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let (f, _writer) = rotated_and_switched(&path);
        let (current, draining) = (f.position(), f.draining_positions());
        drop(f);
        std::fs::remove_file(path.with_extension("1")).unwrap();
        let mut again = Follower::new(&path, 1024);
        let resumed = again.resume(current.as_ref(), &draining);
        assert!(resumed.in_place);
        assert_eq!(resumed.lost, draining);
        append(&path, b"next\n");
        assert_eq!(lines(&mut again), ["next"]);
    }

    #[test]
    fn a_path_only_follower_forgets_a_replaced_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        append(&path, b"a\n");
        let mut f = Follower::new(&path, 1024).path_only();
        assert_eq!(lines(&mut f), ["a"]);
        let mut writer = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::fs::rename(&path, path.with_extension("old")).unwrap();
        append(&path, b"b\n");
        writer.write_all(b"stale\n").unwrap();
        assert_eq!(lines(&mut f), ["b"]);
        assert_eq!(f.draining_positions(), []);
    }
}
