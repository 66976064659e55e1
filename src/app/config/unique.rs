//! Every source is read once. Two keys naming the same file would export its series twice (an
//! exposition with duplicate series, which the formats forbid) and count restarts that never
//! happened, so they are a config error naming both keys.

use super::{ConfigError, RawConfig};
use crate::paths::{normalize, normalize_glob, same_file};
use std::path::{Path, PathBuf};

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
