//! The state directory: what the sidecar keeps across its own restarts.
//!
//! A snapshot holds the model and, for each log, the tail position it corresponds to, so a
//! sidecar killed with SIGKILL resumes exactly where its last snapshot stood: the lines after
//! that position are read again and applied to the model as it was then, so none is counted
//! twice and none is missed. Snapshots are written atomically (temp file, fsync, rename), and
//! a corrupt or unreadable one is reported and ignored: the logs are then read from the start.

use crate::model::Run;
use crate::tail::{Position, TailStats};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Bumped when the snapshot's shape changes incompatibly; other versions are ignored.
const VERSION: u32 = 1;
const SNAPSHOT: &str = "snapshot.json";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    pub version: u32,
    pub saved_at: f64,
    pub run: Run,
    pub logs: Vec<LogPosition>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogPosition {
    pub path: String,
    /// The file at the path; `None` while the path is missing.
    pub position: Option<Position>,
    /// Files rotated away from the path that are still being drained, oldest first.
    #[serde(default)]
    pub draining: Vec<Position>,
    pub stats: TailStats,
}

#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Creates the directory if needed.
    pub fn open(dir: &Path) -> io::Result<StateDir> {
        fs::create_dir_all(dir)?;
        Ok(StateDir {
            dir: dir.to_owned(),
        })
    }

    pub fn snapshot_path(&self) -> PathBuf {
        self.dir.join(SNAPSHOT)
    }

    /// A file of the state directory, for sources that keep their own snapshot.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The last log snapshot, if there is a usable one. Problems are logged, never fatal.
    pub fn load(&self) -> Option<Snapshot> {
        let s: Snapshot = self.load_json(SNAPSHOT)?;
        if s.version != VERSION {
            tracing::warn!(
                path = %self.snapshot_path().display(),
                "ignoring the snapshot {}: version {} is not {VERSION}; reading the logs from the start",
                self.snapshot_path().display(),
                s.version
            );
            return None;
        }
        Some(s)
    }

    /// Writes the log snapshot atomically.
    pub fn save(&self, snapshot: &Snapshot) -> io::Result<()> {
        self.save_json(SNAPSHOT, snapshot)
    }

    /// Reads the state file `name`. Missing is `None`; unreadable or corrupt is logged and
    /// `None` too: a state file never stops the sidecar, it only saves it work.
    pub fn load_json<T: DeserializeOwned>(&self, name: &str) -> Option<T> {
        let path = self.path(name);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(
                    path = %path.display(),
                    "cannot read the state file {}: {e}; starting afresh without it",
                    path.display()
                );
                return None;
            }
        };
        serde_json::from_slice(&bytes)
            .map_err(|e| {
                tracing::warn!(
                    path = %path.display(),
                    "ignoring the corrupt snapshot {}: {e}; starting afresh",
                    path.display()
                )
            })
            .ok()
    }

    /// Writes the state file `name` atomically, streaming the JSON into it (a large value is
    /// never held twice in memory, once as a value and once as its text).
    pub fn save_json<T: Serialize>(&self, name: &str, value: &T) -> io::Result<()> {
        write_atomic_with(&self.path(name), |f| {
            let mut out = io::BufWriter::new(f);
            serde_json::to_writer(&mut out, value).map_err(io::Error::other)?;
            out.flush()
        })
    }
}

impl Snapshot {
    pub fn new(run: Run, logs: Vec<LogPosition>, saved_at: f64) -> Snapshot {
        Snapshot {
            version: VERSION,
            saved_at,
            run,
            logs,
        }
    }
}

/// Replaces `path` with `bytes` so that a reader (or a crash) sees the old file or the new one,
/// never a mix: write a temp file beside it, fsync, rename over, fsync the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |mut f| f.write_all(bytes))
}

/// [`write_atomic`], with `write` filling the temp file.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&File) -> io::Result<()>,
) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let f = File::create(&tmp)?;
        write(&f)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        // Makes the rename itself durable; some filesystems refuse to open a directory.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(&dir.path().join("nested/state")).unwrap();
        assert!(state.load().is_none());
        let mut run = Run::new(&["a.log".into()]);
        run.logs_mut()[0].lines = 42;
        let snap = Snapshot::new(
            run,
            vec![LogPosition {
                path: "a.log".into(),
                position: None,
                draining: Vec::new(),
                stats: TailStats {
                    rotations: 2,
                    ..TailStats::default()
                },
            }],
            1.5,
        );
        state.save(&snap).unwrap();
        let back = state.load().unwrap();
        assert_eq!(back.run.logs()[0].lines, 42);
        assert_eq!(back.logs[0].stats.rotations, 2);

        fs::write(state.snapshot_path(), b"{\"version\":1,\"run\":").unwrap();
        assert!(state.load().is_none(), "a torn snapshot is ignored");
        fs::write(state.snapshot_path(), b"\xff\xfe garbage").unwrap();
        assert!(state.load().is_none());
    }
}
