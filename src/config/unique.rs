//! Every source is read once. Two keys naming the same file would export its series twice (an
//! exposition with duplicate series, which the formats forbid) and count restarts that never
//! happened, so they are a config error naming both keys.

use super::{ConfigError, RawConfig};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The path as the kernel would resolve it from here, without touching the disk: absolute,
/// `.` and repeated slashes gone. `..` stays, since it cannot be removed without following
/// symlinks; the inode check below catches what spelling does not.
pub fn normalize(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// The file's identity where it exists: two spellings or a symlink of one file agree on it.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The same file: the same path once normalised, or the same device and inode.
pub fn same_file(a: &Path, b: &Path) -> bool {
    normalize(a) == normalize(b) || identity(a).is_some_and(|id| Some(id) == identity(b))
}

pub(super) fn check(raw: &RawConfig) -> Result<(), ConfigError> {
    let files: Vec<(String, &Path)> = raw
        .logs
        .iter()
        .enumerate()
        .map(|(i, l)| (format!("logs[{i}].path"), l.path.as_path()))
        .chain(
            raw.server_logs
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("server_logs[{i}]"), p.as_path())),
        )
        .collect();
    let normal: Vec<PathBuf> = files.iter().map(|(_, p)| normalize(p)).collect();
    for (b, (key_b, path_b)) in files.iter().enumerate() {
        for (a, (key_a, _)) in files.iter().enumerate().take(b) {
            if same_file(&normal[a], &normal[b]) {
                return Err(ConfigError::invalid(
                    key_b.clone(),
                    format!(
                        "{} is the same file as {key_a}; give each file once",
                        path_b.display()
                    ),
                ));
            }
        }
    }
    let globs: Vec<(String, &str)> = raw
        .outputs
        .iter()
        .enumerate()
        .map(|(i, o)| (format!("outputs[{i}].glob"), o.glob.as_str()))
        .chain(
            raw.inputs
                .iter()
                .enumerate()
                .map(|(i, g)| (format!("inputs[{i}]"), g.as_str())),
        )
        .collect();
    let normal_globs: Vec<PathBuf> = globs.iter().map(|(_, g)| normalize(Path::new(g))).collect();
    for (b, (key_b, glob_b)) in globs.iter().enumerate() {
        for (a, (key_a, _)) in globs.iter().enumerate().take(b) {
            if normal_globs[a] == normal_globs[b] {
                return Err(ConfigError::invalid(
                    key_b.clone(),
                    format!("{glob_b:?} is the same glob as {key_a}; give each glob once"),
                ));
            }
        }
    }
    // A log is never also a JSONL output or input: its lines would count as records.
    for ((key, path), normal) in files.iter().zip(&normal) {
        for ((glob_key, glob), normal_glob) in globs.iter().zip(&normal_globs) {
            let matches = glob::Pattern::new(&normal_glob.to_string_lossy())
                .is_ok_and(|p| p.matches_path(normal));
            if matches {
                return Err(ConfigError::invalid(
                    key.clone(),
                    format!(
                        "{} is also matched by {glob_key} ({glob:?}): a file is either a log or an output",
                        path.display()
                    ),
                ));
            }
        }
    }
    let mut seen: Vec<(usize, String)> = Vec::new();
    for (i, to) in raw.email_to.iter().enumerate() {
        let address = to
            .parse::<lettre::message::Mailbox>()
            .map(|m| m.email.to_string())
            .unwrap_or_else(|_| to.trim().to_owned())
            .to_lowercase();
        if let Some((first, _)) = seen.iter().find(|(_, a)| *a == address) {
            return Err(ConfigError::invalid(
                format!("email_to[{i}]"),
                format!("{to:?} is already email_to[{first}]; each recipient gets one email"),
            ));
        }
        seen.push((i, address));
    }
    Ok(())
}
