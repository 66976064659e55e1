//! The one reader of `/proc`: every file of it the sidecar reads, under a root that tests
//! move to a fixture tree (`tests/testdata/proc/`), as node_exporter's `--path.procfs` moves
//! its own. What a file says is parsed in [`parse`]; what it means to discovery, the probe or
//! the GPU source is theirs to say.
//!
//! Every read is optional: a process may exit between two reads, and another user's files
//! are not ours to read. A missing answer is `None` (or empty), never an error.

mod parse;

pub use parse::{environ, nspid, parse_stat, Stat};

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A `/proc` to read: the system's, or a folder laid out like it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Procfs {
    root: PathBuf,
}

impl Default for Procfs {
    fn default() -> Procfs {
        Procfs::at(SYSTEM)
    }
}

/// The system's `/proc`.
const SYSTEM: &str = "/proc";

/// A process's arguments, read while it was neither a kernel thread nor a zombie, and its
/// parent then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub args: Vec<String>,
    pub ppid: u32,
}

impl Command {
    /// The arguments joined with spaces, as `ps` shows them.
    pub fn line(&self) -> String {
        self.args.join(" ")
    }
}

/// One open file of a process: its descriptor's number and what the link names
/// (`/data/run/log.txt`, `socket:[12345]`, `pipe:[9]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFile {
    pub fd: String,
    pub target: PathBuf,
}

/// Looks at an empty command line this often before taking the process as exiting.
const EXEC_TRIES: usize = 20;
/// How long apart: a launcher's `execve` takes well under a millisecond.
const EXEC_WAIT: Duration = Duration::from_millis(1);

impl Procfs {
    pub fn at(root: impl Into<PathBuf>) -> Procfs {
        Procfs { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn of(&self, pid: u32) -> PathBuf {
        self.root.join(pid.to_string())
    }

    /// Every process but the sidecar itself, lowest pid first: the lowest is the one started
    /// first, a driver before its workers.
    pub fn processes(&self) -> Vec<u32> {
        let me = self.own_pid();
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut pids: Vec<u32> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|pid| Some(*pid) != me)
            .collect();
        pids.sort_unstable();
        pids
    }

    /// The sidecar's pid as this `/proc` numbers it: `self` names it (in the namespace the
    /// `/proc` was mounted from); a fixture without `self` holds no sidecar.
    fn own_pid(&self) -> Option<u32> {
        match std::fs::read_link(self.root.join("self")) {
            Ok(link) => link.to_str()?.parse().ok(),
            Err(_) if self.root == Path::new(SYSTEM) => Some(std::process::id()),
            Err(_) => None,
        }
    }

    /// Whether a process of that pid is here, a zombie included.
    pub fn exists(&self, pid: u32) -> bool {
        self.of(pid).exists()
    }

    /// `/proc/PID/stat`, read.
    pub fn stat(&self, pid: u32) -> Option<Stat> {
        parse_stat(&std::fs::read(self.of(pid).join("stat")).ok()?)
    }

    /// Running, not a zombie waiting to be reaped.
    pub fn alive(&self, pid: u32) -> bool {
        self.stat(pid).is_some_and(|s| s.alive())
    }

    /// The process's arguments and parent, or `None` for a kernel thread, a zombie or a
    /// process gone. A command line reads empty not only for a kernel thread but for the
    /// moment a process is inside `execve` (a launcher such as pyenv's shim execs several
    /// times in a row): a scan that met one then missed the server a rescan found. So a
    /// kernel thread is told by its flag, and an empty command line is read again, a
    /// millisecond apart.
    pub fn command(&self, pid: u32) -> Option<Command> {
        let base = self.of(pid);
        command_of(
            || std::fs::read(base.join("cmdline")).ok(),
            || parse_stat(&std::fs::read(base.join("stat")).ok()?),
            || std::thread::sleep(EXEC_WAIT),
        )
    }

    /// The name the process goes by (`/proc/PID/comm`), which it may have given itself
    /// (`sglang::scheduler`, `VLLM::EngineCore`).
    pub fn comm(&self, pid: u32) -> Option<String> {
        std::fs::read_to_string(self.of(pid).join("comm"))
            .ok()
            .map(|s| s.trim().to_owned())
    }

    /// The process's pids from this `/proc`'s namespace down to its own (`status`'s `NSpid`);
    /// `None` where it is not here (or the kernel predates `NSpid`).
    pub fn nspid(&self, pid: u32) -> Option<Vec<u32>> {
        nspid(&std::fs::read_to_string(self.of(pid).join("status")).ok()?)
    }

    /// The process's environment, where it is ours to read (the same user, or root).
    pub fn environ(&self, pid: u32) -> Option<Vec<(String, String)>> {
        Some(environ(&std::fs::read(self.of(pid).join("environ")).ok()?))
    }

    /// The folder the process works in.
    pub fn cwd(&self, pid: u32) -> Option<PathBuf> {
        std::fs::read_link(self.of(pid).join("cwd")).ok()
    }

    /// The process's open files; `None` where its `fd/` is not ours to read.
    pub fn open_files(&self, pid: u32) -> Option<Vec<OpenFile>> {
        let fds = std::fs::read_dir(self.of(pid).join("fd")).ok()?;
        Some(
            fds.flatten()
                .filter_map(|fd| {
                    Some(OpenFile {
                        target: std::fs::read_link(fd.path()).ok()?,
                        fd: fd.file_name().to_string_lossy().into_owned(),
                    })
                })
                .collect(),
        )
    }

    /// What one descriptor of the process names.
    pub fn open_file(&self, pid: u32, fd: u32) -> Option<PathBuf> {
        std::fs::read_link(self.of(pid).join("fd").join(fd.to_string())).ok()
    }

    /// Whether the descriptor is open for writing, from its `fdinfo`'s `flags:`.
    pub fn writable(&self, pid: u32, fd: &str) -> bool {
        std::fs::read_to_string(self.of(pid).join("fdinfo").join(fd))
            .is_ok_and(|info| parse::writable(&info))
    }

    /// The process's threads, at most `limit` of them.
    pub fn threads(&self, pid: u32, limit: usize) -> Vec<u32> {
        std::fs::read_dir(self.of(pid).join("task"))
            .map(|tasks| {
                tasks
                    .flatten()
                    .take(limit)
                    .filter_map(|t| t.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The kernel function a thread sleeps in; `None` while it runs, or where not shown.
    pub fn wchan(&self, pid: u32, tid: u32) -> Option<String> {
        let path = self
            .of(pid)
            .join("task")
            .join(tid.to_string())
            .join("wchan");
        let w = std::fs::read_to_string(path).ok()?;
        let w = w.trim();
        (!w.is_empty() && w != "0").then(|| w.to_owned())
    }

    /// A file as the process sees it, through its own root (a container's files are not the
    /// node's).
    pub fn in_root(&self, pid: u32, file: &str) -> PathBuf {
        self.of(pid).join("root").join(file.trim_start_matches('/'))
    }

    /// The TCP tables (`net/tcp`, `net/tcp6`) of the sidecar's network namespace, or where
    /// `pid` is given, of that process's (a container's own); an unreadable one is left out.
    pub fn tcp_tables(&self, pid: Option<u32>) -> Vec<String> {
        let net = match pid {
            Some(pid) => self.of(pid).join("net"),
            None => self.root.join("net"),
        };
        ["tcp", "tcp6"]
            .iter()
            .filter_map(|table| std::fs::read_to_string(net.join(table)).ok())
            .collect()
    }

    /// The node's name as the kernel has it.
    pub fn hostname(&self) -> Option<String> {
        std::fs::read_to_string(self.root.join("sys/kernel/hostname"))
            .ok()
            .map(|h| h.trim().to_owned())
    }

    /// The PID namespace the sidecar runs in, as `self/ns/pid` names it (`pid:[4026531836]`).
    pub fn pid_namespace(&self) -> Option<PathBuf> {
        std::fs::read_link(self.root.join("self/ns/pid")).ok()
    }

    /// The sidecar's own `stat` line.
    pub fn own_stat(&self) -> Option<String> {
        std::fs::read_to_string(self.root.join("self/stat")).ok()
    }

    /// The sidecar's open descriptors, counted.
    pub fn own_open_fds(&self) -> Option<usize> {
        std::fs::read_dir(self.root.join("self/fd"))
            .ok()
            .map(|d| d.count())
    }

    /// When the node booted, in Unix seconds (`stat`'s `btime`).
    pub fn boot_time(&self) -> Option<f64> {
        parse::boot_time(&std::fs::read_to_string(self.root.join("stat")).ok()?)
    }
}

/// [`Procfs::command`]'s reads, given: the command line, the stat, and the wait between two
/// tries.
fn command_of(
    mut cmdline: impl FnMut() -> Option<Vec<u8>>,
    mut stat: impl FnMut() -> Option<Stat>,
    mut wait: impl FnMut(),
) -> Option<Command> {
    for _ in 0..EXEC_TRIES {
        let stat = stat()?;
        if stat.kernel_thread() || !stat.alive() {
            return None;
        }
        let raw = cmdline()?;
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.is_empty() {
            return Some(Command {
                args,
                ppid: stat.ppid,
            });
        }
        wait();
    }
    None
}

#[cfg(test)]
mod tests;
