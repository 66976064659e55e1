//! Paths as the sidecar compares them: one spelling per file, and one file however it is
//! spelled. The ground floor: every layer that names files uses it, and it uses nothing.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The path as the kernel would resolve it from here, without touching the disk: absolute,
/// `.` and repeated slashes gone. `..` stays, since it cannot be removed without following
/// symlinks; the inode check below catches what spelling does not.
pub fn normalize(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// A glob as one spelling: its literal folder (the components before the first wildcard)
/// resolved on disk where it exists, so `prepared/x/../*/raw.jsonl` and `prepared/*/raw.jsonl`
/// are one glob (and a symlinked folder is its target); [`normalize`]d where it does not.
pub fn normalize_glob(glob: &str) -> PathBuf {
    let path = normalize(Path::new(glob));
    let wild = |c: &std::path::Component<'_>| {
        c.as_os_str()
            .to_string_lossy()
            .contains(['*', '?', '[', '{'])
    };
    let components: Vec<_> = path.components().collect();
    let literal = components.iter().take_while(|c| !wild(c)).count();
    // The last literal component may be the file itself: only folders are resolved.
    let folder = literal.min(components.len().saturating_sub(1));
    let base: PathBuf = components[..folder].iter().collect();
    match std::fs::canonicalize(&base) {
        Ok(resolved) => components[folder..].iter().fold(resolved, |p, c| p.join(c)),
        Err(_) => path,
    }
}

/// The file's identity where it exists: two spellings or a symlink of one file agree on it.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The same file: the same path once normalised, or the same device and inode.
pub fn same_file(a: &Path, b: &Path) -> bool {
    normalize(a) == normalize(b) || identity(a).is_some_and(|id| Some(id) == identity(b))
}
