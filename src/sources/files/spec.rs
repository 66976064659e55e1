//! The output and input files to follow, as the configuration validated them.

pub use super::pointers::Pointers;
use serde::{Deserialize, Serialize};

/// How changes to output and input files are noticed (`docs/configuration.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileWatch {
    /// inotify where the kernel reports changes; polling on network, FUSE and overlay mounts.
    #[default]
    Auto,
    /// inotify everywhere it is accepted.
    Inotify,
    /// `stat` every poll, as on a file system that reports nothing.
    Poll,
}

#[derive(Debug, Clone)]
pub struct OutputConfig {
    pub glob: String,
    pub partition: Option<String>,
    pub inspect: bool,
    pub pointers: Pointers,
    pub required: Vec<String>,
}

impl OutputConfig {
    /// Every record of the files `glob` matches, inspected with the default pointers.
    pub fn new(glob: String) -> OutputConfig {
        OutputConfig {
            glob,
            partition: None,
            inspect: true,
            pointers: Pointers::default(),
            required: Vec::new(),
        }
    }
}

/// What bounds the output source's work and memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// Records longer than this are counted, not inspected.
    pub max_record_bytes: usize,
    /// Distinct record ids remembered on this node, over every partition.
    pub identity_cap: usize,
    /// Output and input files holding a descriptor at once.
    pub max_open_files: usize,
    pub file_watch: FileWatch,
}
