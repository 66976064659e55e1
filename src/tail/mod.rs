//! A file follower that keeps its promises: every line once, whole, in order.
//!
//! Built the way mtail, Vector and Fluent Bit build theirs (`docs/architecture.md` says why),
//! not on inotify:
//!
//! - it polls `stat` (works on NFS, where no change events arrive) and reads new bytes with
//!   `pread` from an offset it keeps;
//! - it splits on `\n` and `\r` (tqdm separates frames with `\r`) and holds an unfinished last
//!   line until its terminator arrives, so a line cut by the writer's buffer is never split;
//! - it knows a file by (device, inode): a new identity under the path is a rotation, and the old
//!   file is drained to its end, and kept a little longer, because writers often append to the
//!   renamed file for a moment before they reopen; its position is saved with the current
//!   file's, so a restart in the middle of a rotation drains it too;
//! - a file shorter than our offset, or whose bytes just before our offset changed, was
//!   truncated (copytruncate, even when the writer refills it past our offset before we look):
//!   read again from the start;
//! - a line longer than the cap is dropped and counted, so one runaway line cannot take memory.
//!
//! Empty lines (and the empty piece between `\r` and `\n`) are not lines.

mod inflate;
mod position;
mod split;

pub use position::{Position, Resumed};

use split::{split, Mode};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bytes read per `pread` while catching up.
const CHUNK: usize = 256 * 1024;
/// The read buffer of a follower that is not behind: a sidecar follows dozens of files that
/// are mostly idle, and a full-size buffer each would be most of its memory.
const SMALL_CHUNK: usize = 16 * 1024;
/// A rotated-away file is dropped after this many polls without new bytes, and no sooner than
/// `DRAIN_GRACE` after its last new byte: a writer slow to reopen (a process paused by the
/// scheduler, a fast poll interval) must not lose what it still appends. Fluent Bit's
/// `Rotate_Wait` defaults to the same 5 s.
const DRAIN_IDLE_POLLS: u32 = 8;
const DRAIN_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
#[error("cannot read {path}: {source}")]
pub struct TailError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// What a follower has seen happen to its file, exported as `pulse_tail_*`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TailStats {
    pub rotations: u64,
    pub truncations: u64,
    pub oversized_lines: u64,
    pub bytes: u64,
    /// Times the path was found to be no regular file (a FIFO, a socket, a device): refused,
    /// never opened, counted once each time it becomes one.
    #[serde(default)]
    pub refused: u64,
}

/// What a poll finds, in file order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tailed<'a> {
    /// A complete line, without its terminator.
    Line(&'a [u8]),
    /// Complete lines that were only counted ([`Follower::count_only`]): how many, and their
    /// bytes with their terminators.
    Counted { lines: u64, bytes: u64 },
    /// A line longer than the cap was dropped.
    Oversized,
    /// The file was truncated or replaced: what was read from the path before is gone from it,
    /// and what follows is read from the new content's first byte. `replaced`: another file
    /// is at the path now (renamed, or removed and created anew), not the same one rewritten.
    Reset { replaced: bool },
}

/// The result of one poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Polled {
    /// The path exists (or a file we still hold is being read).
    pub present: bool,
    /// The byte budget ran out before the end of the file: poll again.
    pub more: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(meta: &std::fs::Metadata) -> FileId {
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

#[derive(Debug)]
struct Open {
    file: File,
    id: FileId,
    offset: u64,
    /// The last bytes before `offset`, to notice the file was rewritten under us.
    before: Vec<u8>,
    /// The unfinished last line, waiting for its terminator.
    partial: Vec<u8>,
    /// Inside an oversized line: skip bytes until its terminator.
    discarding: bool,
    /// A gzip file's inflater: lines are split from what it inflates.
    inflate: Option<inflate::Inflate>,
    idle_polls: u32,
    /// When the polls without new bytes began.
    idle_since: Instant,
}

/// Follows one path across rotations and truncations.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    max_line: usize,
    current: Option<Open>,
    /// Files renamed away from the path that may still receive a few writes.
    draining: Vec<Open>,
    stats: TailStats,
    /// Which bytes end a line, and whether lines are handed out or only counted.
    mode: Mode,
    /// Whether a file renamed away is drained (logs) or forgotten (outputs, whose counts are of
    /// what the path holds).
    drain_rotated: bool,
    /// Counts the changes of which files are read (a rotation, the file appearing), so the
    /// owner can save a snapshot at once instead of waiting for its interval.
    switches: u64,
    buf: Vec<u8>,
    /// The current file's identity, size and modification time at the last poll: while they
    /// stay the same (and nothing is being drained or caught up on), a poll is one `stat`.
    seen: Option<(FileId, u64, Option<std::time::SystemTime>)>,
    /// The last poll stopped at its byte budget.
    behind: bool,
    /// The path is no regular file now.
    refusing: bool,
    /// Where the current file stands while it is closed ([`Follower::close`]): reopened there
    /// when the file is seen to change.
    closed: Option<Position>,
    /// The file is gzip: its bytes are inflated before they are split into lines.
    gzip: bool,
}

impl Open {
    fn new(file: File, id: FileId, gzip: bool) -> Open {
        Open {
            file,
            id,
            offset: 0,
            before: Vec::new(),
            partial: Vec::new(),
            discarding: false,
            inflate: gzip.then(inflate::Inflate::new),
            idle_polls: 0,
            idle_since: Instant::now(),
        }
    }

    /// Reads the file again from its first byte.
    fn restart(&mut self) {
        self.offset = 0;
        self.before.clear();
        self.partial.clear();
        self.discarding = false;
        if self.inflate.is_some() {
            self.inflate = Some(inflate::Inflate::new());
        }
    }
}

impl Follower {
    /// Follows `path` from its beginning. Lines longer than `max_line` bytes are dropped.
    pub fn new(path: impl Into<PathBuf>, max_line: usize) -> Follower {
        Follower {
            path: path.into(),
            max_line: max_line.max(1),
            current: None,
            draining: Vec::new(),
            stats: TailStats::default(),
            mode: Mode::Lines,
            drain_rotated: true,
            switches: 0,
            buf: Vec::new(),
            seen: None,
            behind: false,
            refusing: false,
            closed: None,
            gzip: false,
        }
    }

    /// Reads the file as a gzip stream (`.jsonl.gz`), inflating what its writer has flushed
    /// and splitting that into lines. Its place is kept (to close it, or across a restart)
    /// only between gzip members, where reading can start again; elsewhere it stays open, and
    /// a restart counts it again from its start.
    pub fn gzip(mut self) -> Follower {
        self.gzip = true;
        self
    }

    /// Ends lines at `\n` only: for JSONL, where a bare `\r` never ends a record.
    pub fn newline_only(mut self) -> Follower {
        self.mode = Mode::NewlineOnly;
        self
    }

    /// From now on ends lines at `\n` only: a container runtime's log, whose records keep a
    /// program's `\r` inside them, found to be one after its first lines were read.
    pub fn end_lines_at_newlines(&mut self) {
        if self.mode == Mode::Lines {
            self.mode = Mode::NewlineOnly;
        }
    }

    /// Ends lines at `\n` only and counts them instead of handing each out: what an output
    /// file is read for when it is not inspected. Oversized lines are still reported one by one.
    pub fn count_only(mut self) -> Follower {
        self.mode = Mode::Count;
        self
    }

    /// Follows only the file at the path: one renamed away or replaced is no longer read, not
    /// even its last writes. For output files, whose counts are of the file the path names
    /// (a rewritten file renamed over the old one holds every record again).
    pub fn path_only(mut self) -> Follower {
        self.drain_rotated = false;
        self
    }

    /// The current file's unfinished last line, if any. tqdm ends each frame only when it draws
    /// the next, so the latest frame of a bar waits here.
    pub fn pending(&self) -> Option<&[u8]> {
        let open = self.current.as_ref()?;
        (!open.discarding && !open.partial.is_empty()).then_some(open.partial.as_slice())
    }

    /// Goes up whenever the set of files being read changes; a snapshot taken after it moved
    /// records the change.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current file's modification time, as of the last poll.
    pub fn modified(&self) -> Option<std::time::SystemTime> {
        self.seen.and_then(|s| s.2)
    }

    pub fn stats(&self) -> TailStats {
        self.stats
    }

    /// Continues counting from `stats` (restored from a snapshot).
    pub fn set_stats(&mut self, stats: TailStats) {
        self.stats = stats;
    }

    /// Reads what is new, up to about `budget` bytes of the current file, and hands every
    /// complete line (and what else it finds) to `on_line`.
    pub fn poll<F: FnMut(Tailed<'_>)>(
        &mut self,
        budget: u64,
        mut on_line: F,
    ) -> Result<Polled, TailError> {
        self.poll_draining(&mut on_line)?;
        let meta = match std::fs::metadata(&self.path) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(self.error(e)),
        };
        // Opening a FIFO blocks until a writer comes, and reading one, a socket or a device
        // never ends: only regular files are read.
        match meta.as_ref().map(|m| m.file_type()) {
            Some(kind) if !kind.is_file() => {
                if !self.refusing {
                    self.refusing = true;
                    self.stats.refused += 1;
                }
                let what = kind_of(kind);
                return Err(self.error(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("it is {what}, not a regular file; only regular files are read"),
                )));
            }
            _ => self.refusing = false,
        }
        let seen = meta
            .as_ref()
            .map(|m| (FileId::of(m), m.len(), m.modified().ok()));
        if seen.is_some()
            && seen == self.seen
            && self.draining.is_empty()
            && !self.behind
            && (self.current.is_some() || self.closed.is_some())
        {
            return Ok(Polled {
                present: true,
                more: false,
            });
        }
        if let Some(meta) = &meta {
            let id = FileId::of(meta);
            self.reopen(id, &mut on_line)?;
            match &mut self.current {
                Some(open) if open.id == id => {
                    let rewritten = meta.len() > open.offset
                        && !position::bytes_match(&open.file, open.offset, &open.before);
                    if meta.len() < open.offset || rewritten {
                        self.stats.truncations += 1;
                        open.restart();
                        on_line(Tailed::Reset { replaced: false });
                    }
                }
                Some(_) => {
                    // Renamed or deleted and recreated: finish the old file, then switch.
                    let mut old = self.current.take().expect("matched Some");
                    // An old file that cannot be read any more (it was never a file, or its
                    // disk went away) must not keep us from the new one.
                    if self.drain_rotated
                        && self.read_to_end(&mut old, u64::MAX, &mut on_line).is_ok()
                    {
                        old.idle_polls = 0;
                        old.idle_since = Instant::now();
                        self.draining.push(old);
                    }
                    self.stats.rotations += 1;
                    on_line(Tailed::Reset { replaced: true });
                    self.current = self.adopt(id)?;
                    self.switches += 1;
                }
                None => {
                    self.current = self.adopt(id)?;
                    self.switches += u64::from(self.current.is_some());
                }
            }
        }
        let mut more = false;
        if let Some(mut open) = self.current.take() {
            let read = self.read_to_end(&mut open, budget, &mut on_line);
            // Short of the size the `stat` gave after reading something: the rest is read by
            // the next poll (one that read nothing is not asked again at once: a size a file
            // system reports but cannot serve must not spin).
            let short = meta.as_ref().is_some_and(|m| open.offset < m.len());
            self.current = Some(open);
            let read = read?;
            more = read >= budget || (short && read > 0);
        }
        self.behind = more;
        self.seen = seen.filter(|s| self.current.as_ref().is_some_and(|o| o.id == s.0));
        if !more && self.buf.len() > SMALL_CHUNK {
            self.buf = Vec::new();
        }
        Ok(Polled {
            present: meta.is_some() || self.current.is_some(),
            more,
        })
    }

    /// Closes the current file, keeping where it stands, so that a file nobody writes holds no
    /// descriptor (a run folder may hold thousands of finished shards). The next poll that
    /// finds the path changed reopens it at that position, after the identity check a restart
    /// makes: the same file continues where it was, a replaced or rewritten one is read anew
    /// from its start (with a [`Tailed::Reset`]), never on top. A follower that is draining a
    /// rotated file or is behind keeps its files. Returns whether a descriptor was released.
    pub fn close(&mut self) -> bool {
        if !self.draining.is_empty() || self.behind {
            return false;
        }
        let Some(open) = self.current.take() else {
            return false;
        };
        match position::position_of(&open) {
            Some(position) => {
                self.closed = Some(position);
                self.buf = Vec::new();
                true
            }
            None => {
                // Its first bytes could not be read back: keep it open rather than lose the
                // place.
                self.current = Some(open);
                false
            }
        }
    }

    /// Whether the follower holds a descriptor.
    pub fn is_open(&self) -> bool {
        self.current.is_some() || !self.draining.is_empty()
    }

    /// Reopens a closed file now that its path changed (`id` is what is at the path now): in
    /// place when it is the file that was closed and still holds what was read, else counted
    /// anew. An error (out of descriptors) keeps the position for the next poll.
    fn reopen<F: FnMut(Tailed<'_>)>(
        &mut self,
        id: FileId,
        on_line: &mut F,
    ) -> Result<(), TailError> {
        let Some(position) = self.closed.take() else {
            return Ok(());
        };
        let file = match open_nonblocking(&self.path) {
            Ok(file) => Some(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                self.closed = Some(position);
                return Err(self.error(e));
            }
        };
        match file {
            Some(file) if position.matches(&file) => {
                self.current = Some(position.reopen(file, self.gzip));
            }
            _ => {
                let replaced = position.id() != id;
                if replaced {
                    self.stats.rotations += 1;
                    self.switches += 1;
                } else {
                    self.stats.truncations += 1;
                }
                on_line(Tailed::Reset { replaced });
            }
        }
        Ok(())
    }

    /// The file now at the path: one we are draining already (a restart found it before the
    /// path pointed at it again) continues where it is, so nothing is read twice.
    fn adopt(&mut self, id: FileId) -> Result<Option<Open>, TailError> {
        match self.draining.iter().position(|d| d.id == id) {
            Some(i) => Ok(Some(self.draining.remove(i))),
            None => self.open(id),
        }
    }

    /// Opens the path, unless it was replaced again between `stat` and `open` (then the next
    /// poll sees the newer file).
    fn open(&self, expected: FileId) -> Result<Option<Open>, TailError> {
        let file = match open_nonblocking(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.error(e)),
        };
        let id = FileId::of(&file.metadata().map_err(|e| self.error(e))?);
        if id != expected {
            return Ok(None);
        }
        Ok(Some(Open::new(file, id, self.gzip)))
    }

    fn poll_draining<F: FnMut(Tailed<'_>)>(&mut self, on_line: &mut F) -> Result<(), TailError> {
        let mut draining = std::mem::take(&mut self.draining);
        for open in &mut draining {
            if self.read_to_end(open, u64::MAX, on_line)? == 0 {
                open.idle_polls += 1;
            } else {
                open.idle_polls = 0;
                open.idle_since = Instant::now();
            }
        }
        for mut open in draining {
            if open.idle_polls < DRAIN_IDLE_POLLS || open.idle_since.elapsed() < DRAIN_GRACE {
                self.draining.push(open);
            } else if !open.partial.is_empty() && !open.discarding {
                // The writer is gone from this file: its unterminated last line is all there is.
                on_line(Tailed::Line(&open.partial));
                open.partial.clear();
            }
        }
        Ok(())
    }

    /// Reads `open` from its offset to the current end of the file, or until `budget` bytes
    /// were read; returns the bytes read.
    fn read_to_end<F: FnMut(Tailed<'_>)>(
        &mut self,
        open: &mut Open,
        budget: u64,
        on_line: &mut F,
    ) -> Result<u64, TailError> {
        let mut total = 0;
        // A small read first; one that fills the buffer says the file is behind, and it is
        // read in full chunks until it is caught up.
        let mut want = SMALL_CHUNK;
        while total < budget {
            if self.buf.len() < want {
                self.buf.resize(want, 0);
            }
            let n = match open.file.read_at(&mut self.buf, open.offset) {
                Ok(0) => return Ok(total),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.error(e)),
            };
            let short = n < self.buf.len();
            if !short {
                want = CHUNK;
            }
            open.offset += n as u64;
            position::keep_last(&mut open.before, &self.buf[..n]);
            total += n as u64;
            self.stats.bytes += n as u64;
            let (max_line, mode, stats) = (self.max_line, self.mode, &mut self.stats);
            match open.inflate.take() {
                None => split(&self.buf[..n], open, max_line, mode, stats, on_line),
                Some(mut inflate) => {
                    let inflated = inflate.feed(&self.buf[..n], &mut |text| {
                        split(text, open, max_line, mode, stats, on_line)
                    });
                    open.inflate = Some(inflate);
                    inflated.map_err(|why| {
                        self.error(io::Error::new(io::ErrorKind::InvalidData, why))
                    })?;
                }
            }
            // A short read is the end of what the file held when it was read: the lines so far
            // are handed back before another read, which could be one that hangs (a mount
            // that stops answering mid-file).
            if short {
                return Ok(total);
            }
        }
        Ok(total)
    }

    /// Whether the path is refused now for not being a regular file.
    pub fn refusing(&self) -> bool {
        self.refusing
    }

    fn error(&self, source: io::Error) -> TailError {
        TailError {
            path: self.path.clone(),
            source,
        }
    }
}

/// Opens `path` for reading without waiting for a writer: a FIFO put at the path between our
/// `stat` and this `open` must not block (it then fails the identity check, being another
/// file). On a regular file `O_NONBLOCK` changes nothing.
pub fn open_nonblocking(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

/// What a file that is not regular is, for the message.
fn kind_of(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines(f: &mut Follower) -> Vec<String> {
        let mut out = Vec::new();
        f.poll(u64::MAX, |t| {
            if let Tailed::Line(l) = t {
                out.push(String::from_utf8_lossy(l).into_owned())
            }
        })
        .unwrap();
        out
    }

    fn append(path: &Path, bytes: &[u8]) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(bytes).unwrap();
    }

    /// A `.jsonl.gz` as Python's `gzip` module writes it: compressed bursts appended while the
    /// writer works, the trailer at its close, another member when it is opened to append.
    #[test]
    fn a_growing_gzip_file_gives_its_flushed_lines_and_no_partial_one() {
        use flate2::{write::GzEncoder, Compression};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000.jsonl.gz");
        let mut f = Follower::new(&path, 1024).newline_only().path_only().gzip();
        let record = |i: usize| format!("{{\"id\": {i}}}\n");
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        for i in 0..100 {
            gz.write_all(record(i).as_bytes()).unwrap();
        }
        gz.write_all(b"{\"id\": 100, \"te").unwrap();
        gz.flush().unwrap();
        append(&path, &std::mem::take(gz.get_mut()));
        let got = lines(&mut f);
        assert_eq!(got.len(), 100);
        assert_eq!(got[99], "{\"id\": 99}");
        assert_eq!(f.position(), None, "inside a member no place is kept");
        assert!(!f.close(), "inside a member the file stays open");
        gz.write_all(b"xt\"}\n").unwrap();
        append(&path, &gz.finish().unwrap());
        assert_eq!(lines(&mut f), ["{\"id\": 100, \"text\"}"]);
        assert!(f.close(), "between members the file can be closed");
        let mut more = GzEncoder::new(Vec::new(), Compression::fast());
        more.write_all(record(101).as_bytes()).unwrap();
        append(&path, &more.finish().unwrap());
        assert_eq!(lines(&mut f), ["{\"id\": 101}"]);
    }

    #[test]
    fn a_gzip_name_over_plain_text_is_an_error_that_counts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl.gz");
        append(&path, b"{\"id\": 1}\n");
        let mut f = Follower::new(&path, 1024).newline_only().gzip();
        let mut seen = 0;
        let err = f.poll(u64::MAX, |_| seen += 1).unwrap_err();
        assert_eq!(seen, 0);
        assert!(err.to_string().contains("not gzip"), "{err}");
    }

    #[test]
    fn partial_line_waits_for_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut f = Follower::new(&path, 1024);
        assert_eq!(lines(&mut f), Vec::<String>::new());
        append(&path, b"one\ntw");
        assert_eq!(lines(&mut f), ["one"]);
        append(&path, b"o\r\nthree\rfour\n");
        assert_eq!(lines(&mut f), ["two", "three", "four"]);
        assert_eq!(lines(&mut f), Vec::<String>::new());
    }

    #[test]
    fn missing_file_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("later/log");
        let mut f = Follower::new(&path, 1024);
        assert!(!f.poll(u64::MAX, |_| {}).unwrap().present);
        std::fs::create_dir(dir.path().join("later")).unwrap();
        append(&path, b"hello\n");
        assert_eq!(lines(&mut f), ["hello"]);
    }

    #[test]
    fn truncation_reads_again_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        append(&path, b"aaaaaaaaaa\nbbbbbbbbbb\n");
        let mut f = Follower::new(&path, 1024);
        assert_eq!(lines(&mut f).len(), 2);
        std::fs::write(&path, b"c\n").unwrap();
        assert_eq!(lines(&mut f), ["c"]);
        assert_eq!(f.stats().truncations, 1);
    }

    #[test]
    fn fast_copytruncate_is_noticed_even_when_the_file_regrew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        append(&path, b"aaaa\nbbbb\n");
        let mut f = Follower::new(&path, 1024);
        assert_eq!(lines(&mut f).len(), 2);
        // Truncated and refilled past our offset between two polls.
        std::fs::write(&path, b"cccccc\ndddddd\neeeeee\n").unwrap();
        assert_eq!(lines(&mut f), ["cccccc", "dddddd", "eeeeee"]);
        assert_eq!(f.stats().truncations, 1);
        append(&path, b"ffff\n");
        assert_eq!(lines(&mut f), ["ffff"]);
        assert_eq!(f.stats().truncations, 1);
    }

    /// A followed log renamed to `log.1` by logrotate's `create`, and the writer's descriptor,
    /// which still points at the renamed file.
    fn rotated_with_writer_still_open(path: &Path) -> (Follower, std::fs::File) {
        append(path, b"first\n");
        let mut f = Follower::new(path, 1024);
        assert_eq!(lines(&mut f), ["first"]);
        let writer = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        std::fs::rename(path, path.with_extension("1")).unwrap();
        (f, writer)
    }

    #[test]
    fn rename_rotation_drains_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let (mut f, mut writer) = rotated_with_writer_still_open(&path);
        writer.write_all(b"late\n").unwrap();
        append(&path, b"new\n");
        let mut got = lines(&mut f);
        writer.write_all(b"later still\n").unwrap();
        got.extend(lines(&mut f));
        assert_eq!(got, ["late", "new", "later still"]);
        assert_eq!(f.stats().rotations, 1);
    }

    #[test]
    fn a_writer_slow_to_reopen_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let (mut f, mut writer) = rotated_with_writer_still_open(&path);
        append(&path, b"new\n");
        assert_eq!(lines(&mut f), ["new"]);
        // Many more polls than DRAIN_IDLE_POLLS pass (a fast poll interval) before the writer,
        // still on the renamed file, writes again: well within DRAIN_GRACE, so it is read.
        for _ in 0..4 * DRAIN_IDLE_POLLS {
            assert!(lines(&mut f).is_empty());
        }
        writer.write_all(b"late\n").unwrap();
        assert_eq!(lines(&mut f), ["late"]);
    }

    /// (lines, bytes with terminators, oversized) as a follower reports them.
    fn tally(f: &mut Follower) -> (u64, u64, u64) {
        let (mut lines, mut bytes, mut oversized) = (0, 0, 0);
        f.poll(u64::MAX, |t| match t {
            Tailed::Line(l) => {
                lines += 1;
                bytes += l.len() as u64 + 1;
            }
            Tailed::Counted { lines: n, bytes: b } => {
                lines += n;
                bytes += b;
            }
            Tailed::Oversized => oversized += 1,
            Tailed::Reset { .. } => panic!("nothing was truncated"),
        })
        .unwrap();
        (lines, bytes, oversized)
    }

    #[test]
    fn counting_finds_the_lines_that_splitting_finds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.jsonl");
        let mut split = Follower::new(&path, 40).newline_only();
        let mut count = Follower::new(&path, 40).count_only();
        // Lines of every length around the cap, empty lines, a bare `\r`, lines cut between
        // appends and between reads (appends larger than a read chunk).
        let mut next = crate::testing::numbers(7);
        for _ in 0..60 {
            let mut bytes = Vec::new();
            for _ in 0..next(4000) {
                let len = next(60);
                bytes.extend(std::iter::repeat_n(b'x', len));
                if next(10) == 0 {
                    bytes.push(b'\r');
                }
                bytes.push(b'\n');
            }
            let cut = next(bytes.len() + 1);
            append(&path, &bytes[..cut]);
            assert_eq!(tally(&mut split), tally(&mut count));
            append(&path, &bytes[cut..]);
            assert_eq!(tally(&mut split), tally(&mut count));
        }
        assert_eq!(split.stats(), count.stats());
        assert!(count.stats().oversized_lines > 0);
    }

    #[test]
    fn oversized_line_is_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut f = Follower::new(&path, 8);
        append(&path, b"ok\n0123456789");
        assert_eq!(lines(&mut f), ["ok"]);
        append(&path, b"abcdef\nfine\n0123456789\nend\n");
        assert_eq!(lines(&mut f), ["fine", "end"]);
        assert_eq!(f.stats().oversized_lines, 2);
    }

    /// Counts what a count-only follower (an output file's) reports: records, and resets.
    fn counted(f: &mut Follower) -> (u64, u64) {
        let (mut records, mut resets) = (0, 0);
        f.poll(u64::MAX, |t| match t {
            Tailed::Counted { lines, .. } => records += lines,
            Tailed::Reset { .. } => resets += 1,
            Tailed::Line(_) | Tailed::Oversized => {}
        })
        .unwrap();
        (records, resets)
    }

    #[test]
    fn a_closed_file_is_reopened_where_it_was_and_an_unchanged_one_stays_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-00001.jsonl");
        append(&path, b"{\"a\":1}\n{\"a\":2}\n{\"a\"");
        let mut f = Follower::new(&path, 1024).count_only().path_only();
        assert_eq!(counted(&mut f), (2, 0));
        assert!(f.close(), "a caught-up file closes");
        assert!(!f.is_open());
        // Nothing changed: a poll is a `stat`, and opens nothing.
        assert_eq!(counted(&mut f), (0, 0));
        assert!(!f.is_open());
        // The unfinished record at the close is finished later: counted once, whole.
        append(&path, b":3}\n{\"a\":4}\n");
        assert_eq!(counted(&mut f), (2, 0));
        assert!(f.is_open());
        assert!(f.close());
        assert_eq!(f.stats().rotations + f.stats().truncations, 0);
        // Its position is what a snapshot keeps while it is closed.
        let saved = f.position().expect("a closed file keeps its position");
        let mut restarted = Follower::new(&path, 1024).count_only().path_only();
        assert!(restarted.resume(Some(&saved), &[]).in_place);
        append(&path, b"{\"a\":5}\n");
        assert_eq!(counted(&mut restarted), (1, 0));
    }

    #[test]
    fn a_closed_file_replaced_or_rewritten_is_counted_anew_never_on_top() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("part-00000.jsonl");
        append(&path, b"{}\n{}\n{}\n");
        let mut f = Follower::new(&path, 1024).count_only().path_only();
        assert_eq!(counted(&mut f), (3, 0));
        assert!(f.close());
        // A new file of two records renamed over it.
        let new = dir.path().join("part-00000.jsonl.tmp");
        std::fs::write(&new, b"{}\n{}\n").unwrap();
        std::fs::rename(&new, &path).unwrap();
        assert_eq!(
            counted(&mut f),
            (2, 1),
            "a reset, then the new file's records"
        );
        assert_eq!(f.stats().rotations, 1);
        assert!(f.close());
        // Truncated in place and written again past where we were (same inode).
        std::fs::write(&path, b"[1]\n[2]\n[3]\n[4]\n").unwrap();
        assert_eq!(counted(&mut f), (4, 1));
        assert_eq!(f.stats().truncations, 1);
        assert!(f.close());
        // Removed: the counts stay what the file held, and nothing is opened.
        std::fs::remove_file(&path).unwrap();
        let polled = f.poll(u64::MAX, |_| panic!("nothing to read")).unwrap();
        assert!(!polled.present);
        assert!(!f.is_open());
    }

    #[test]
    fn a_fifo_is_refused_without_being_opened_and_counted_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a plain syscall with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let mut f = Follower::new(&path, 1024);
        for _ in 0..3 {
            let e = f.poll(u64::MAX, |_| {}).unwrap_err();
            assert!(
                e.to_string().contains("it is a FIFO, not a regular file"),
                "{e}"
            );
        }
        assert_eq!(f.stats().refused, 1);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "a line\n").unwrap();
        assert_eq!(lines(&mut f), ["a line"]);
        assert!(!f.refusing());
    }
}
