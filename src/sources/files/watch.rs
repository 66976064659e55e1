//! Noticing which output files changed without looking at each one, so that the work of a
//! poll grows with what changed rather than with the number of files: a run folder may hold
//! ten thousand finished shards beside the few being written.
//!
//! The folders the globs match in are watched with inotify where the kernel reports changes
//! made to them. One watch per folder (never per file) tells which of its files were written,
//! and which names came, went or were renamed (then the globs are evaluated again). Where the
//! kernel cannot tell (NFS, CIFS, FUSE, Lustre and other network or user-space file systems,
//! whose writers may be on another node; overlay mounts, whose lower layers change beneath
//! them), or inotify is refused (out of watches or instances), a folder is polled instead: its
//! files are looked at every poll as before, and a change of the folder's own modification
//! time (an entry created, removed or renamed) evaluates the globs again. What inotify might
//! still miss (a lost event queue) is caught by the source's slow sweep of every file.

use super::FileWatch;
use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What a folder watch asks to be told: a file in it written, closed after writing or given
/// new attributes (a `touch`), an entry created, removed or renamed, the folder itself gone.
const MASK: u32 = libc::IN_MODIFY
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;
/// Events that change a folder's listing: the globs are evaluated again.
const LISTING: u32 = libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MOVED_TO;
/// The size of `struct inotify_event` before its name.
const HEADER: usize = 16;

/// File systems whose changes inotify does not report, by `statfs`'s `f_type`: network and
/// cluster file systems (a writer on another node), FUSE (its daemon decides), overlayfs.
const UNREPORTED: [(i64, &str); 14] = [
    (0x6969, "NFS"),
    (0x517B, "SMB"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x6573_5546, "FUSE"),
    (0x00C3_6400, "Ceph"),
    (0x0BD0_0BD0, "Lustre"),
    (0x4750_4653, "GPFS"),
    (0x0102_1997, "9p"),
    (0x5346_414F, "AFS"),
    (0x7375_7245, "Coda"),
    (0x1983_0326, "BeeGFS"),
    (0x794C_7630, "overlayfs"),
    (0x0000_6B41_4653, "kAFS"),
];

/// How a folder is watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Watched(i32),
    /// Polled; its modification time and inode when last looked at.
    Polled(Option<(SystemTime, u64)>),
}

/// What the folders said since the last look.
#[derive(Debug, Default)]
pub(super) struct Changes {
    /// Files an event named (written, created, renamed over, removed).
    pub(super) files: Vec<PathBuf>,
    /// A folder gained, lost or renamed an entry: evaluate the globs again.
    pub(super) listing: bool,
    /// Events may have been lost (the queue overflowed, a watch ended): look at every file.
    pub(super) lost: bool,
}

pub(super) struct Watcher {
    inotify: Option<OwnedFd>,
    mode: FileWatch,
    dirs: HashMap<PathBuf, Dir>,
    by_wd: HashMap<i32, PathBuf>,
    buf: Vec<u8>,
    /// Said once: why a folder is polled rather than watched, by reason.
    said: std::collections::BTreeSet<String>,
    /// A folder began to be watched or polled since the last look. The globs that found it ran
    /// before: an entry made in it between the two (a partition folder created with its
    /// files) was seen by neither, so the next look says the listing changed.
    fresh: bool,
}

impl Watcher {
    pub(super) fn new(mode: FileWatch) -> Watcher {
        let inotify = match mode {
            FileWatch::Poll => None,
            FileWatch::Auto | FileWatch::Inotify => {
                // SAFETY: a plain syscall; the descriptor it returns is owned below.
                let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
                if fd < 0 {
                    let e = io::Error::last_os_error();
                    crate::fd_limit::note(&e);
                    tracing::warn!(
                        "cannot start inotify ({e}); output folders are polled instead \
                         (raise fs.inotify.max_user_instances, or set file_watch = \"poll\")"
                    );
                    None
                } else {
                    // SAFETY: `fd` was just returned to us by the kernel and nothing else owns it.
                    Some(unsafe { OwnedFd::from_raw_fd(fd) })
                }
            }
        };
        Watcher {
            inotify,
            mode,
            dirs: HashMap::new(),
            by_wd: HashMap::new(),
            buf: vec![0; 64 * 1024],
            said: Default::default(),
            fresh: false,
        }
    }

    /// Watches `dir` (once); returns whether inotify reports its changes. Otherwise it is
    /// polled. Looks at the file system: never call it under a lock others need.
    pub(super) fn watch(&mut self, dir: &Path) -> bool {
        if let Some(state) = self.dirs.get(dir) {
            return matches!(state, Dir::Watched(_));
        }
        let state = match self.try_watch(dir) {
            Ok(wd) => {
                self.by_wd.insert(wd, dir.to_owned());
                Dir::Watched(wd)
            }
            Err(why) => {
                if let Some(why) = why {
                    if self.said.insert(why.clone()) {
                        tracing::info!(
                            dir = %dir.display(),
                            "{} is polled for changes: {why}",
                            dir.display()
                        );
                    }
                }
                Dir::Polled(dir_stamp(dir))
            }
        };
        self.dirs.insert(dir.to_owned(), state);
        self.fresh = true;
        matches!(state, Dir::Watched(_))
    }

    /// A watch on `dir`, or why there is none (`None`: polling was asked for).
    fn try_watch(&self, dir: &Path) -> Result<i32, Option<String>> {
        let fd = self.inotify.as_ref().ok_or(None)?;
        if self.mode == FileWatch::Auto {
            if let Some(fs) = unreported_fs(dir) {
                return Err(Some(format!(
                    "it is on {fs}, whose changes inotify does not report (set file_watch = \"inotify\" to watch it anyway)"
                )));
            }
        }
        let c = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| Some("a NUL in its name".to_owned()))?;
        // SAFETY: a valid descriptor and a NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), MASK) };
        if wd < 0 {
            let e = io::Error::last_os_error();
            let why = match e.raw_os_error() {
                Some(libc::ENOSPC) => {
                    "out of inotify watches (raise fs.inotify.max_user_watches)".to_owned()
                }
                _ => format!("inotify refused it: {e}"),
            };
            return Err(Some(why));
        }
        Ok(wd)
    }

    /// Whether any folder is polled: then the files in it are looked at every poll.
    pub(super) fn counts(&self) -> (usize, usize) {
        let watched = self.by_wd.len();
        (watched, self.dirs.len() - watched)
    }

    /// What changed since the last call: the events inotify queued, and the polled folders
    /// whose modification time moved. `at` is told each polled folder before it is looked at
    /// (one on a hung mount does not return, and must be named).
    pub(super) fn changes(&mut self, at: &mut dyn FnMut(&Path)) -> Changes {
        let mut changes = Changes {
            listing: std::mem::take(&mut self.fresh),
            ..Changes::default()
        };
        self.read_events(&mut changes);
        for (dir, state) in &mut self.dirs {
            let Dir::Polled(stamp) = state else { continue };
            at(dir);
            let now = dir_stamp(dir);
            if now != *stamp {
                *stamp = now;
                changes.listing = true;
            }
        }
        changes
    }

    fn read_events(&mut self, changes: &mut Changes) {
        let Some(fd) = &self.inotify else { return };
        loop {
            // SAFETY: reading into a buffer we own, of its length.
            let n =
                unsafe { libc::read(fd.as_raw_fd(), self.buf.as_mut_ptr().cast(), self.buf.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => return,
                    io::ErrorKind::Interrupted => continue,
                    _ => {
                        tracing::warn!("reading inotify events failed: {e}; looking at every file");
                        changes.lost = true;
                        return;
                    }
                }
            }
            let n = n as usize;
            if n == 0 {
                return;
            }
            let mut at = 0;
            while at + HEADER <= n {
                let field = |i: usize| {
                    let b = &self.buf[at + i..at + i + 4];
                    [b[0], b[1], b[2], b[3]]
                };
                let wd = i32::from_ne_bytes(field(0));
                let mask = u32::from_ne_bytes(field(4));
                let len = u32::from_ne_bytes(field(12)) as usize;
                let name = &self.buf[(at + HEADER).min(n)..(at + HEADER + len).min(n)];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                at += HEADER + len;
                if mask & libc::IN_Q_OVERFLOW != 0 {
                    changes.lost = true;
                    changes.listing = true;
                    continue;
                }
                if mask & libc::IN_IGNORED != 0 {
                    // The folder is gone (or was renamed away): the globs find its successor.
                    if let Some(dir) = self.by_wd.remove(&wd) {
                        self.dirs.remove(&dir);
                    }
                    changes.lost = true;
                    changes.listing = true;
                    continue;
                }
                if mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF) != 0 {
                    changes.listing = true;
                    continue;
                }
                if mask & LISTING != 0 {
                    changes.listing = true;
                }
                if let (Some(dir), false) = (self.by_wd.get(&wd), name.is_empty()) {
                    changes
                        .files
                        .push(dir.join(std::ffi::OsStr::from_bytes(name)));
                }
            }
            if n < self.buf.len() - 4096 {
                return;
            }
        }
    }
}

/// A folder as the kernel is asked about it: the folder of a relative file name (`x.jsonl`)
/// is the empty path, which names the files as the globs do, and is `.` to the kernel.
fn syscall_path(dir: &Path) -> &Path {
    if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    }
}

/// A folder's modification time and inode: either moves when an entry is created, removed or
/// renamed in it, or the folder is replaced.
fn dir_stamp(dir: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(syscall_path(dir)).ok()?;
    Some((meta.modified().ok()?, meta.ino()))
}

/// The name of `dir`'s file system when inotify does not report its changes.
fn unreported_fs(dir: &Path) -> Option<&'static str> {
    let c = CString::new(syscall_path(dir).as_os_str().as_bytes()).ok()?;
    // SAFETY: zeroed memory is a valid `statfs`, which the call fills in.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a pointer to a `statfs` we own.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    let kind = st.f_type as i64;
    UNREPORTED
        .iter()
        .find(|(magic, _)| *magic == kind)
        .map(|&(_, name)| name)
}

/// The folders to watch for `globs`, which matched `files`: each glob's fixed part and every
/// folder its folder patterns match (`prepared` and each `prepared/*` of
/// `prepared/*/raw.jsonl`, so a file in a partition folder that held none yet is told), each
/// file's folder, and, for a glob whose fixed part does not exist yet, the nearest folder above
/// it that does (its creation changes that folder's listing).
pub(super) fn folders<'a>(
    globs: impl Iterator<Item = &'a str>,
    files: impl Iterator<Item = &'a Path>,
) -> Vec<PathBuf> {
    let mut out = std::collections::BTreeSet::new();
    for glob in globs {
        let fixed = base(glob);
        if !syscall_path(&fixed).is_dir() {
            let existing = fixed.ancestors().skip(1).find(|a| syscall_path(a).is_dir());
            out.extend(existing.map(Path::to_owned));
            continue;
        }
        out.insert(fixed.clone());
        // The folder patterns between the fixed part and the file name, one level at a time.
        let rest = Path::new(glob)
            .strip_prefix(&fixed)
            .unwrap_or(Path::new(glob));
        let levels: Vec<_> = rest.components().collect();
        let mut pattern = fixed.clone();
        for level in levels.iter().take(levels.len().saturating_sub(1)) {
            pattern.push(level);
            let Some(text) = pattern.to_str() else { break };
            let Ok(paths) = glob::glob(text) else { break };
            out.extend(paths.flatten().filter(|p| p.is_dir()));
        }
    }
    for file in files {
        out.extend(file.parent().map(Path::to_owned));
    }
    out.into_iter().collect()
}

/// The part of a glob before its first pattern character, as a folder: `/d/prepared/*/x.jsonl`
/// is `/d/prepared`; a glob without one is its file's folder; a relative glob's may be the
/// empty path (the working folder, as its files' folders are named).
fn base(glob: &str) -> PathBuf {
    let mut base = PathBuf::new();
    let path = Path::new(glob);
    let mut components = path.components().peekable();
    while let Some(c) = components.next() {
        let text = c.as_os_str().to_string_lossy();
        if text.contains(['*', '?', '[']) || components.peek().is_none() {
            break;
        }
        base.push(c);
    }
    base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_is_the_fixed_folder() {
        assert_eq!(base("/d/prepared/*/x.jsonl"), Path::new("/d/prepared"));
        assert_eq!(base("/d/prepared/B1/x.jsonl"), Path::new("/d/prepared/B1"));
        assert_eq!(base("x-*.jsonl"), Path::new(""));
        assert_eq!(base("/d/p[0-9]/x.jsonl"), Path::new("/d"));
    }

    #[test]
    fn folders_are_the_fixed_part_and_every_folder_the_patterns_match() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("prepared/B1/sub")).unwrap();
        std::fs::create_dir_all(d.join("prepared/B2/sub")).unwrap();
        std::fs::create_dir_all(d.join("prepared/B3")).unwrap();
        let glob = format!("{}/prepared/*/sub/x.jsonl", d.display());
        // No file yet: the partition folders are watched all the same.
        let got = folders([glob.as_str()].into_iter(), std::iter::empty());
        assert_eq!(
            got,
            vec![
                d.join("prepared"),
                d.join("prepared/B1"),
                d.join("prepared/B1/sub"),
                d.join("prepared/B2"),
                d.join("prepared/B2/sub"),
                d.join("prepared/B3"),
            ]
        );
        // A glob whose fixed part is not there yet: the nearest folder above it.
        let later = format!("{}/later/run/*/x.jsonl", d.display());
        let got = folders([later.as_str()].into_iter(), std::iter::empty());
        assert_eq!(got, vec![d.to_owned()]);
    }

    #[test]
    fn inotify_names_the_written_file_and_a_new_one_changes_the_listing() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a.jsonl"), "{}\n").unwrap();
        let mut w = Watcher::new(FileWatch::Inotify);
        assert!(
            w.watch(d),
            "inotify is available on the test machine's tmp folder"
        );
        let first = w.changes(&mut |_| {});
        assert!(first.files.is_empty());
        assert!(
            first.listing,
            "a folder new to the watch may hold what the globs missed"
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(d.join("a.jsonl"))
            .unwrap();
        std::io::Write::write_all(&mut f, b"{}\n").unwrap();
        let changes = w.changes(&mut |_| {});
        assert!(changes.files.contains(&d.join("a.jsonl")), "{changes:?}");
        assert!(!changes.listing);
        std::fs::write(d.join("b.jsonl"), "{}\n").unwrap();
        let changes = w.changes(&mut |_| {});
        assert!(changes.listing);
        assert!(changes.files.contains(&d.join("b.jsonl")));
    }

    #[test]
    fn a_polled_folder_says_its_listing_changed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut w = Watcher::new(FileWatch::Poll);
        assert!(!w.watch(d));
        assert_eq!(w.counts(), (0, 1));
        let mut looked = Vec::new();
        assert!(w.changes(&mut |p| looked.push(p.to_owned())).listing);
        assert_eq!(looked, [d.to_owned()]);
        assert!(!w.changes(&mut |_| {}).listing);
        // A folder's mtime has a coarse clock on some file systems: set it apart explicitly.
        std::fs::write(d.join("new.jsonl"), "").unwrap();
        let later = SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::open(d).unwrap().set_modified(later).unwrap();
        assert!(w.changes(&mut |_| {}).listing);
        assert!(!w.changes(&mut |_| {}).listing);
    }
}
