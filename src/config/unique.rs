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

/// Each item with the key that names it: `logs[{}].path` with its index.
fn keyed<'a, T: 'a>(
    pattern: &'a str,
    items: impl Iterator<Item = T> + 'a,
) -> impl Iterator<Item = (String, T)> + 'a {
    items
        .enumerate()
        .map(move |(i, item)| (pattern.replace("{}", &i.to_string()), item))
}

/// The first pair `(a, b)`, `a < b`, of `n` items that are the same: `b` is the one to name.
fn repeated(n: usize, same: impl Fn(usize, usize) -> bool) -> Option<(usize, usize)> {
    (0..n).find_map(|b| (0..b).find(|&a| same(a, b)).map(|a| (a, b)))
}

pub(super) fn check(raw: &RawConfig) -> Result<(), ConfigError> {
    let files: Vec<(String, &Path)> =
        keyed("logs[{}].path", raw.logs.iter().map(|l| l.path.as_path()))
            .chain(keyed(
                "server_logs[{}]",
                raw.server_logs.iter().map(PathBuf::as_path),
            ))
            .collect();
    let normal: Vec<PathBuf> = files.iter().map(|(_, p)| normalize(p)).collect();
    if let Some((a, b)) = repeated(normal.len(), |a, b| same_file(&normal[a], &normal[b])) {
        return Err(ConfigError::invalid(
            files[b].0.clone(),
            format!(
                "{} is the same file as {}; give each file once",
                files[b].1.display(),
                files[a].0
            ),
        ));
    }
    let globs: Vec<(String, &str)> = keyed(
        "outputs[{}].glob",
        raw.outputs.iter().map(|o| o.glob.as_str()),
    )
    .chain(keyed("inputs[{}]", raw.inputs.iter().map(String::as_str)))
    .collect();
    let normal_globs: Vec<PathBuf> = globs.iter().map(|(_, g)| normalize_glob(g)).collect();
    if let Some((a, b)) = repeated(globs.len(), |a, b| normal_globs[a] == normal_globs[b]) {
        return Err(ConfigError::invalid(
            globs[b].0.clone(),
            format!(
                "{:?} is the same glob as {}; give each glob once",
                globs[b].1, globs[a].0
            ),
        ));
    }
    // A log is never also a JSONL output or input: its lines would count as records.
    for ((key, path), normal) in files.iter().zip(&normal) {
        // Resolved as the globs' folders are.
        let resolved = std::fs::canonicalize(normal).unwrap_or_else(|_| normal.clone());
        for ((glob_key, glob), normal_glob) in globs.iter().zip(&normal_globs) {
            let matches = glob::Pattern::new(&normal_glob.to_string_lossy())
                .is_ok_and(|p| p.matches_path(normal) || p.matches_path(&resolved));
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
