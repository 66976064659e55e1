//! Taking the stacks: py-spy (`py-spy dump --pid N --json`) as a child process under a
//! deadline and a size cap, the process's state from `/proc` first, and the source lines and
//! connections that make the dump readable.
//!
//! py-spy runs as a program, not as a library: its crate brings a DWARF unwinder and an ELF
//! reader into the sidecar for a call made once per alert, and a child can be killed at its
//! deadline, where a library call that hangs on a process in D state cannot. A dump costs
//! tens of milliseconds (docs/alerts.md#stacks).

use super::read::{summarize, verdict};
use super::targets::Target;
use super::{Captures, Frame, ProcessStacks, Thread, Verdict, Wait};
use crate::model::stacks::{Capture, TakeStacks};
use crate::model::{Run, Seconds};
use crate::procfs::Procfs;
use crate::sources::discovery::sockets;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What reading another process's stack needs, said wherever it is refused.
pub const PTRACE_HINT: &str = "reading another process's stack needs ptrace rights: run the sidecar as the process's own user with kernel.yama.ptrace_scope at 0 or 1 (a non-child needs 0 there, or CAP_SYS_PTRACE), as root, or with CAP_SYS_PTRACE (docs/deploy.md#stacks)";

/// How stacks are taken.
#[derive(Debug, Clone)]
pub struct Tool {
    /// py-spy, as found at start; why not, where it was not.
    pub program: Result<PathBuf, String>,
    pub deadline: Duration,
    /// The most bytes of one process's dump that are read.
    pub cap: usize,
}

impl Tool {
    /// `configured` is a path (with a `/`) or a name looked up in `PATH`.
    pub fn new(configured: &str, deadline: Duration, cap: usize) -> Tool {
        Tool {
            program: find(configured, std::env::var_os("PATH").as_deref()),
            deadline,
            cap,
        }
    }
}

fn find(configured: &str, path: Option<&std::ffi::OsStr>) -> Result<PathBuf, String> {
    let runnable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if configured.contains('/') {
        let p = PathBuf::from(configured);
        return if runnable(&p) {
            Ok(p)
        } else {
            Err(format!("stacks_py_spy {configured} is not an executable file: install py-spy (pip install py-spy) or point stacks_py_spy at it"))
        };
    }
    path.into_iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(configured))
        .find(|p| runnable(p))
        .ok_or_else(|| format!("{configured} is not on PATH: install py-spy (pip install py-spy) or set stacks_py_spy to its path"))
}

impl TakeStacks for Tool {
    fn prepare(&self, run: &Run) -> Option<Capture> {
        let targets = super::targets::of(run);
        if targets.is_empty() {
            return None;
        }
        let tool = self.clone();
        Some(Box::new(move |why, now| all(&tool, &targets, why, now)))
    }
}

/// Every target at once, each on a thread of its own under the deadline: the whole capture
/// takes about the slowest one.
pub fn all(tool: &Tool, targets: &[Target], reason: &str, now: Seconds) -> Captures {
    let processes = std::thread::scope(|scope| {
        let handles: Vec<_> = targets
            .iter()
            .map(|t| scope.spawn(move || one(tool, t, now)))
            .collect();
        handles
            .into_iter()
            .zip(targets)
            .map(|(h, t)| {
                h.join().unwrap_or_else(|_| {
                    failed(
                        t,
                        now,
                        "the capture panicked (a bug: please report it)".into(),
                    )
                })
            })
            .collect()
    });
    Captures {
        at: now,
        reason: reason.to_owned(),
        processes,
    }
}

fn failed(t: &Target, now: Seconds, note: String) -> ProcessStacks {
    ProcessStacks {
        summary: format!("{} (pid {}): no stacks: {note}", t.role, t.pid),
        role: t.role.clone(),
        pid: t.pid,
        at: now,
        took_ms: 0,
        wait: Wait::Unknown,
        verdict: Verdict::Unknown,
        note: Some(note),
        connections: Vec::new(),
        threads: Vec::new(),
    }
}

/// One process: its state, py-spy's dump, its source lines and connections, read.
pub fn one(tool: &Tool, t: &Target, now: Seconds) -> ProcessStacks {
    let Some(state) = Procfs::default().stat(t.pid).map(|s| s.state) else {
        return failed(t, now, "the process is gone".into());
    };
    let program = match &tool.program {
        Ok(p) => p,
        Err(why) => return failed(t, now, why.clone()),
    };
    let stopped = matches!(state, 'T' | 't');
    let started = Instant::now();
    let ran = run(program, t.pid, !matches!(state, 'R' | 'S'), tool);
    let took_ms = started.elapsed().as_millis() as u64;
    let connections = connections(t.pid);
    let mut note = stopped.then(|| {
        format!("the process is stopped (state {state}): it runs nothing until it gets SIGCONT")
    });
    let threads = match ran {
        Ok(out) => match parse(&out) {
            Ok(mut threads) => {
                with_source(t.pid, &mut threads);
                threads
            }
            Err(e) => {
                note = Some(format!("py-spy's dump does not read: {e}"));
                Vec::new()
            }
        },
        Err(Failure::TimedOut) => {
            let why = match state {
                'D' => format!(
                    " (the process is in uninterruptible sleep, waiting in the kernel at `{}`)",
                    wchan(&Procfs::default(), t.pid, t.pid)
                ),
                _ => String::new(),
            };
            note = Some(format!(
                "py-spy did not answer within {:?}{why}",
                tool.deadline
            ));
            Vec::new()
        }
        Err(Failure::TooBig) => {
            note = Some(format!("the dump passed {} bytes and was cut", tool.cap));
            Vec::new()
        }
        Err(Failure::Said(error)) => {
            note = Some(explain(&error, t.pid));
            Vec::new()
        }
    };
    let (summary, wait) = match (&note, threads.is_empty()) {
        (Some(note), true) if !stopped => (
            format!("{} (pid {}): no stacks: {note}", t.role, t.pid),
            Wait::Unknown,
        ),
        _ => summarize(&t.role, t.pid, &threads, &connections, stopped),
    };
    let mut p = ProcessStacks {
        role: t.role.clone(),
        pid: t.pid,
        at: now,
        took_ms,
        summary,
        wait,
        verdict: Verdict::Unknown,
        note,
        connections,
        threads,
    };
    p.verdict = verdict(&p);
    p
}

enum Failure {
    TimedOut,
    TooBig,
    /// py-spy failed, saying this.
    Said(String),
}

/// py-spy on one pid. A process not running nor sleeping (stopped, or in D state) is read
/// without pausing it: py-spy's pause waits on a stopped process forever, and a stopped
/// process holds still anyway.
fn run(program: &Path, pid: u32, nonblocking: bool, tool: &Tool) -> Result<Vec<u8>, Failure> {
    let mut command = Command::new(program);
    command
        .args(["dump", "--json", "--pid", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if nonblocking {
        command.arg("--nonblocking");
    }
    let mut child = command
        .spawn()
        .map_err(|e| Failure::Said(format!("cannot start {}: {e}", program.display())))?;
    let cap = tool.cap;
    let stdout = child.stdout.take().map(|out| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = out.take(cap as u64 + 1).read_to_end(&mut buf);
            buf
        })
    });
    let stderr = child.stderr.take().map(|err| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = err.take(16 * 1024).read_to_end(&mut buf);
            buf
        })
    });
    let deadline = Instant::now() + tool.deadline;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = stdout.and_then(|h| h.join().ok()).unwrap_or_default();
    let err = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    match status {
        None if out.len() > cap => Err(Failure::TooBig),
        None => Err(Failure::TimedOut),
        Some(s) if s.success() && out.len() > cap => Err(Failure::TooBig),
        Some(s) if s.success() => Ok(out),
        Some(s) => {
            let text = String::from_utf8_lossy(&err);
            let said = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("Stack backtrace"))
                .take_while(|l| !l.starts_with("0: ") || l.contains("Caused"))
                .collect::<Vec<_>>()
                .join(" ");
            Err(Failure::Said(if said.is_empty() {
                format!("py-spy exited with {s}")
            } else {
                said
            }))
        }
    }
}

/// py-spy's error, in words a person can act on.
fn explain(error: &str, pid: u32) -> String {
    let lower = error.to_lowercase();
    if lower.contains("permission denied") || lower.contains("operation not permitted") {
        return format!("refused: {PTRACE_HINT}");
    }
    if lower.contains("failed to find python version") || lower.contains("not a python") {
        return format!(
            "not a Python process, and py-spy reads only Python stacks; its threads wait in the kernel at {}",
            thread_waits(pid)
        );
    }
    if lower.contains("no such process") {
        return "the process is gone".into();
    }
    format!("py-spy failed: {error}")
}

/// The kernel function a thread sleeps in, or that it is not seen sleeping.
fn wchan(procfs: &Procfs, pid: u32, tid: u32) -> String {
    procfs
        .wchan(pid, tid)
        .unwrap_or_else(|| "running or not shown".to_owned())
}

/// Where each thread of a process waits in the kernel, counted: `futex_wait_queue ×8, ep_poll`.
fn thread_waits(pid: u32) -> String {
    let procfs = Procfs::default();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for tid in procfs.threads(pid, 4096) {
        *counts.entry(wchan(&procfs, pid, tid)).or_default() += 1;
    }
    let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    if counts.is_empty() {
        return "places /proc does not show".into();
    }
    counts
        .iter()
        .map(|(w, n)| match n {
            1 => w.clone(),
            n => format!("{w} ×{n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Deserialize)]
struct PyThread {
    thread_id: u64,
    #[serde(default)]
    os_thread_id: Option<u64>,
    #[serde(default)]
    thread_name: Option<String>,
    #[serde(default)]
    active: bool,
    frames: Vec<PyFrame>,
}

#[derive(Deserialize)]
struct PyFrame {
    name: String,
    filename: String,
    #[serde(default)]
    line: i64,
}

/// py-spy's JSON (`dump --json`): a list of threads, each with its frames innermost first.
pub fn parse(json: &[u8]) -> Result<Vec<Thread>, String> {
    let threads: Vec<PyThread> = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    Ok(threads
        .into_iter()
        .map(|t| Thread {
            id: t.os_thread_id.unwrap_or(t.thread_id),
            name: t.thread_name,
            active: t.active,
            frames: t
                .frames
                .into_iter()
                .map(|f| Frame {
                    name: f.name,
                    file: f.filename,
                    line: u32::try_from(f.line).unwrap_or(0),
                    code: None,
                })
                .collect(),
        })
        .collect())
}

/// The innermost frames' source lines, read through the process's own root (a container's
/// files are not ours): at most this many files per capture, each up to 4 MiB.
const SOURCE_FILES: usize = 64;
const SOURCE_FRAMES: usize = 8;

fn with_source(pid: u32, threads: &mut [Thread]) {
    let mut files: BTreeMap<String, Option<Vec<String>>> = BTreeMap::new();
    for t in threads.iter_mut() {
        for f in t.frames.iter_mut().take(SOURCE_FRAMES) {
            if !f.file.ends_with(".py") || f.line == 0 {
                continue;
            }
            if !files.contains_key(&f.file) {
                if files.len() >= SOURCE_FILES {
                    continue;
                }
                files.insert(f.file.clone(), source(pid, &f.file));
            }
            f.code = files[&f.file]
                .as_ref()
                .and_then(|lines| lines.get(f.line as usize - 1))
                .map(|l| l.trim().to_owned());
        }
    }
}

fn source(pid: u32, file: &str) -> Option<Vec<String>> {
    let path = Procfs::default().in_root(pid, file);
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(4 << 20)
        .read_to_string(&mut text)
        .ok()?;
    Some(text.lines().map(str::to_owned).collect())
}

/// The process's established TCP connections, counted by remote address, most first.
fn connections(pid: u32) -> Vec<(String, usize)> {
    let procfs = Procfs::default();
    let files = procfs.open_files(pid).unwrap_or_default();
    let ours = sockets::inodes(files.iter().map(|f| f.target.as_path()));
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for s in sockets::established(&sockets::read_of(&procfs, pid), &ours) {
        *counts
            .entry(std::net::SocketAddr::from(s.remote).to_string())
            .or_default() += 1;
    }
    let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn py_spy_is_found_on_the_path_or_said_missing() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("py-spy");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::ffi::OsString::from(format!("/nonexistent:{}", dir.path().display()));
        assert_eq!(find("py-spy", Some(&path)), Ok(exe.clone()));
        let missing = find("py-spy", Some(std::ffi::OsStr::new("/nonexistent"))).unwrap_err();
        assert!(missing.contains("pip install py-spy"), "{missing}");
        assert_eq!(find(exe.to_str().unwrap(), None), Ok(exe));
        assert!(find("/nonexistent/py-spy", None)
            .unwrap_err()
            .contains("stacks_py_spy"));
    }

    #[test]
    fn errors_are_said_as_what_to_do() {
        assert!(explain("Error: Permission denied (os error 13)", 1).contains("CAP_SYS_PTRACE"));
        assert!(explain(
            "Error: Failed to find python version from target process",
            1
        )
        .starts_with("not a Python process"));
        assert_eq!(
            explain("Error: something else", 1),
            "py-spy failed: Error: something else"
        );
    }
}
