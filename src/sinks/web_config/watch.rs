//! The web config as it is on disk now: a rotated certificate or a changed password list is
//! served from the next connection on, without a restart.
//!
//! Each connection first looks at the files the config came from (a `stat` each, a few
//! microseconds) and reads them again only if one changed. A change that does not load keeps
//! the last good config and says why, once per change: a certificate half-written by a
//! rotation must not take the endpoint down, and its completion is a change of its own.

use super::{load, Active, Counters};
use crate::lock::Locked;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// What identifies one version of a file: replaced (new inode), rewritten (size or mtime) or
/// gone.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stamp {
    Present {
        dev: u64,
        ino: u64,
        len: u64,
        modified: Option<SystemTime>,
    },
    Missing,
}

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) => Stamp::Present {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            modified: m.modified().ok(),
        },
        Err(_) => Stamp::Missing,
    }
}

pub struct Watched {
    path: PathBuf,
    current: Mutex<Current>,
    counters: Arc<Counters>,
}

struct Current {
    active: Arc<Active>,
    /// The stamps of `active.files` when it was read, or of the last change that failed.
    stamps: Vec<Stamp>,
}

impl Watched {
    /// Starts from a config already loaded (at start-up, where a bad file is a config error).
    pub fn new(path: &Path, active: Arc<Active>) -> Watched {
        let stamps = active.files.iter().map(|f| stamp(f)).collect();
        Watched {
            path: path.to_owned(),
            current: Mutex::new(Current { active, stamps }),
            counters: Arc::new(Counters::default()),
        }
    }

    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// The config to serve the next connection with, read again if a file changed.
    pub fn current(&self) -> Arc<Active> {
        let mut current = self.current.locked();
        let stamps: Vec<Stamp> = current.active.files.iter().map(|f| stamp(f)).collect();
        if stamps == current.stamps {
            return current.active.clone();
        }
        match load(&self.path) {
            Ok(active) => {
                tracing::info!(
                    path = %self.path.display(),
                    "web config {} read again after a change",
                    self.path.display()
                );
                current.stamps = active.files.iter().map(|f| stamp(f)).collect();
                current.active = Arc::new(active);
                Counters::count(&self.counters.reloads_ok);
                self.counters
                    .last_reload_failed
                    .store(false, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(
                    path = %self.path.display(),
                    "web config changed but cannot be used, so the last good one stays: {e}"
                );
                current.stamps = stamps;
                Counters::count(&self.counters.reloads_failed);
                self.counters
                    .last_reload_failed
                    .store(true, Ordering::Relaxed);
            }
        }
        current.active.clone()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
