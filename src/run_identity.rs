//! Which run this node's series belong to, and the node's part in it (docs/many-nodes.md).
//!
//! One sidecar runs per node; a run can span nodes (SGLang's `--nnodes`, vLLM's Ray workers)
//! and a fleet runs many. The run's name and id are exported once per node
//! (`pulse_run_info`) rather than as a label on every series: PromQL joins them by
//! `instance`, as dcgm-exporter's users join GPUs to jobs.

use crate::stable_hash;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The node's part in its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The node whose driver writes the progress log: the run's progress is read here.
    Driver,
    /// An inference server's rank 0 (the one serving HTTP) without the driver.
    Server,
    /// A server rank above 0 or a Ray worker: its GPUs and its server log, no HTTP of its own.
    Worker,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Driver => "driver",
            Role::Server => "server",
            Role::Worker => "worker",
        }
    }

    /// Whether the node holds the run's progress: its logs, outputs and driver process. A
    /// server or worker seeing the run folder on a shared file system leaves them to the
    /// driver's node, or every run-wide sum would count them twice.
    pub fn follows_progress(self) -> bool {
        self == Role::Driver
    }

    /// Whether the node probes an inference server's HTTP that discovery finds: a worker's
    /// server rank serves none (SGLang's ranks above 0 answer 404 or nothing), so a failing
    /// URL there is not a server down.
    pub fn probes_server(self) -> bool {
        self != Role::Worker
    }
}

/// The run's name and this node's role: what every alert and notification carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLabel {
    pub run: String,
    pub role: Role,
}

/// Folder names that say what a folder holds rather than which run it is: a log in
/// `synth_100k/logs/` names the run `synth_100k`.
const GENERIC: &[&str] = &["logs", "log", "output", "outputs", "out"];

/// The run's name: the one given, else the run folder's, else the first progress log's
/// folder (its parent where that folder's name is generic). `None`: no run on this node.
pub fn name(given: Option<&str>, run_dir: Option<&Path>, logs: &[PathBuf]) -> Option<String> {
    if let Some(name) = given {
        return Some(name.to_owned());
    }
    let folder_name = |dir: &Path| {
        let dir = crate::paths::normalize(dir);
        let mut named = dir.as_path();
        while named
            .file_name()
            .is_some_and(|n| GENERIC.contains(&n.to_string_lossy().as_ref()))
        {
            named = named.parent()?;
        }
        named.file_name().map(|n| n.to_string_lossy().into_owned())
    };
    match run_dir {
        Some(dir) => folder_name(dir),
        None => logs
            .first()
            .and_then(|log| folder_name(log.parent().unwrap_or(Path::new(".")))),
    }
}

/// The node's role: the one given, else the one discovery read from the command lines, else
/// what the node watches (a progress log: the driver; a server: the server; only GPUs: a worker).
pub fn role(
    given: Option<Role>,
    discovered: Option<Role>,
    has_logs: bool,
    has_server: bool,
) -> Role {
    given.or(discovered).unwrap_or(if has_logs {
        Role::Driver
    } else if has_server {
        Role::Server
    } else {
        Role::Worker
    })
}

/// How much of a log's start identifies it: its first line, or this much of an endless one
/// (tqdm's `\r` frames count as lines).
const HEAD: usize = 4096;

/// The run on the wire: its label, and the logs its id is read from (the run's progress
/// logs; on a worker, those its run folder holds, which it does not follow). Plain data: the
/// id is read by [`crate::sources::run_id`], as any input is.
#[derive(Debug, Clone, PartialEq)]
pub struct RunIdentity {
    pub label: RunLabel,
    pub logs: Vec<PathBuf>,
}

impl RunIdentity {
    pub fn new(label: RunLabel, logs: Vec<PathBuf>) -> RunIdentity {
        RunIdentity { label, logs }
    }

    /// The id before any log has a whole first line: the name's alone.
    pub fn named_id(&self) -> String {
        named_id(&self.label.run)
    }

    fn named(&self) -> u64 {
        named(&self.label.run)
    }

    /// The first log's inode and first line, once one has a whole first line.
    pub fn head(&self) -> Option<(u64, Vec<u8>)> {
        let mut sorted = self.logs.clone();
        sorted.sort();
        sorted.iter().find_map(|log| log_identity(log))
    }

    /// The run's id: its name hashed with the first progress log's inode and first line, so
    /// the same across restarts of the sidecar and on every node that sees the run folder
    /// (a shared file system gives them all the same inode), and new for the next run in the
    /// same folder (a new log file, or the same one rewritten with other first lines). Until a
    /// log has a whole first line, the name's alone (`None`).
    pub fn id(&self) -> Option<String> {
        self.head().map(|head| self.id_of(&head))
    }

    pub fn id_of(&self, (ino, head): &(u64, Vec<u8>)) -> String {
        let bytes = ino.to_le_bytes().into_iter().chain(head.iter().copied());
        short(stable_hash::extend(self.named(), bytes))
    }
}

/// The id of the run `name` before its log has a whole first line.
pub fn named_id(name: &str) -> String {
    short(named(name))
}

fn named(name: &str) -> u64 {
    stable_hash::extend(stable_hash::EMPTY, name.bytes())
}

fn short(h: u64) -> String {
    format!("{:012x}", h >> 16)
}

/// A log's inode and its first line, once it has a whole one. Only a regular file: opening a
/// FIFO would wait for a writer (and O_NONBLOCK keeps one swapped in after the check from it).
fn log_identity(path: &Path) -> Option<(u64, Vec<u8>)> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let metadata = file.metadata().ok()?;
    if !metadata.is_file() {
        return None;
    }
    let ino = metadata.ino();
    let mut head = Vec::with_capacity(HEAD);
    file.take(HEAD as u64).read_to_end(&mut head).ok()?;
    match head.iter().position(|b| *b == b'\n' || *b == b'\r') {
        Some(end) => Some((ino, head[..end].to_vec())),
        None if head.len() == HEAD => Some((ino, head)),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_named_for_its_folder_not_for_a_generic_one() {
        let logs = [PathBuf::from("/data/synth_100k/logs/inference_all.log")];
        assert_eq!(name(None, None, &logs).as_deref(), Some("synth_100k"));
        assert_eq!(
            name(None, Some(Path::new("/data/run7/")), &logs).as_deref(),
            Some("run7")
        );
        assert_eq!(
            name(Some("kimi-sft"), Some(Path::new("/data/run7")), &logs).as_deref(),
            Some("kimi-sft")
        );
        assert_eq!(
            name(None, None, &[PathBuf::from("/r/out/logs/p.log")]).as_deref(),
            Some("r")
        );
        assert_eq!(name(None, None, &[]), None, "no log, no folder: no run");
    }

    #[test]
    fn a_role_given_wins_then_discovery_then_what_is_watched() {
        assert_eq!(
            role(Some(Role::Worker), Some(Role::Driver), true, true),
            Role::Worker
        );
        assert_eq!(role(None, Some(Role::Worker), true, false), Role::Worker);
        assert_eq!(role(None, None, true, true), Role::Driver);
        assert_eq!(role(None, None, false, true), Role::Server);
        assert_eq!(role(None, None, false, false), Role::Worker);
    }

    fn identity(run: &str, logs: &[PathBuf]) -> RunIdentity {
        let label = RunLabel {
            run: run.into(),
            role: Role::Driver,
        };
        RunIdentity::new(label, logs.to_vec())
    }

    #[test]
    fn a_fifo_gives_no_id_and_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("progress.log");
        let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        assert_eq!(
            identity("a", std::slice::from_ref(&fifo)).id(),
            None,
            "the name's alone"
        );
    }

    #[test]
    fn the_id_is_the_same_for_the_same_log_and_new_for_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("progress.log");
        let before = identity("a", std::slice::from_ref(&log));
        assert_eq!(before.id(), None, "no log yet: the name's");
        assert_eq!(before.named_id(), identity("a", &[]).named_id());
        std::fs::write(&log, "Model: m").unwrap();
        assert_eq!(before.id(), None, "no whole first line yet");
        std::fs::write(&log, "Model: m\n 3/10").unwrap();
        let id = before.id().expect("a whole first line identifies the log");
        assert_ne!(id, before.named_id());
        assert_eq!(id.len(), 12);
        std::fs::write(&log, "Model: m\n 9/10\n").unwrap();
        assert_eq!(
            before.id().as_ref(),
            Some(&id),
            "the log grown: the same run"
        );
        assert_ne!(
            identity("b", std::slice::from_ref(&log)).id().as_ref(),
            Some(&id)
        );
        // The next run: a new file where the old one was.
        let other = dir.path().join("keep");
        std::fs::write(&other, "").unwrap();
        std::fs::remove_file(&log).unwrap();
        std::fs::write(&log, "Model: m2\n").unwrap();
        assert_ne!(before.id().as_ref(), Some(&id));
    }
}
