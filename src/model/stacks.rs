//! What the stacks of a stuck run's processes showed: captured by `crate::sources::stacks` when an alert
//! about a stall fires (docs/alerts.md#stacks), kept in the model so that the rules can let the
//! driver's stacks refine a stall's cause, and /status and the emails can show them.

use super::Seconds;
use serde::{Deserialize, Serialize};

/// A capture of the run's processes, prepared while the model is read and taken after, off its
/// lock: the stacks may take seconds, and a scrape must not wait for them.
pub type Capture = Box<dyn FnOnce(&str, Seconds) -> Captures + Send>;

/// How the stacks of a stuck run are taken: the alert engine (a sink) asks when a stall fires,
/// the stacks source answers. The port between them, so that neither imports the other.
pub trait TakeStacks: Send + Sync + std::fmt::Debug {
    /// The capture for the processes the run knows now, given why it is taken and when;
    /// `None` where it knows none.
    fn prepare(&self, run: &super::Run) -> Option<Capture>;
}

/// The driver's role in a capture; the server's processes are `server` or their own titles.
pub const DRIVER: &str = "driver";

/// What a thread, or a process, is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wait {
    /// A thread lock or condition (`Lock.acquire`, `Event.wait`).
    Lock,
    /// Waiting for another thread to end (`Thread.join`) or for a queue to give something.
    Join,
    /// Reading from or writing to the network: a socket, HTTP, ZMQ, gRPC.
    Network,
    /// An asyncio event loop in its selector: every task waits on I/O or a timer.
    EventLoop,
    Sleep,
    /// A torch.distributed collective: every rank must reach it.
    Collective,
    CudaSync,
    Tokenizer,
    /// Running Python code.
    Running,
    /// Stopped (SIGSTOP or a debugger): it runs nothing until continued.
    Stopped,
    /// No stacks, or nothing recognised.
    Unknown,
}

/// What the driver's stacks say of a stall's cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Its threads wait on locks and nothing else: it waits on itself.
    Deadlocked,
    /// A thread reads a connection, or the event loop waits with connections open.
    WaitingOnServer,
    /// It runs code (or computes): slow, not stuck.
    Busy,
    /// An event loop with no connection open: no request is outstanding.
    Idle,
    Stopped,
    Unknown,
}

/// One frame, innermost first in [`Thread::frames`], as py-spy reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// The function (`send_request`, `EpollSelector.select`, a native symbol).
    pub name: String,
    /// Its file as the process names it (a full path); a native frame's library.
    pub file: String,
    pub line: u32,
    /// The source line, read where the file could be read (the innermost few frames only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thread {
    pub id: u64,
    pub name: Option<String>,
    /// Running Python code (py-spy's `active`), not waiting.
    pub active: bool,
    pub frames: Vec<Frame>,
}

/// What one process was found doing, and how the capture went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessStacks {
    /// `driver`, `server`, or the worker's own title (`VLLM::EngineCore`, `sglang::scheduler_TP0`).
    pub role: String,
    pub pid: u32,
    pub at: Seconds,
    /// How long py-spy took.
    pub took_ms: u64,
    /// The line a person reads first.
    pub summary: String,
    pub wait: Wait,
    /// What its stacks say of a stall's cause (the driver's refine the alert's).
    pub verdict: Verdict,
    /// Why there are no stacks, or what they cannot say (a stopped process, no py-spy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Established TCP connections by remote address, most first.
    #[serde(default)]
    pub connections: Vec<(String, usize)>,
    pub threads: Vec<Thread>,
}

/// Every process captured at one moment, for one alert or on demand.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Captures {
    pub at: Seconds,
    /// The alerts that asked for it, or `on demand`.
    pub reason: String,
    pub processes: Vec<ProcessStacks>,
}

impl Captures {
    /// The full dumps as text, in py-spy's own layout, each process under its summary; cut at
    /// `cap` bytes.
    pub fn dump(&self, cap: usize) -> String {
        let mut out = String::new();
        for p in &self.processes {
            out += &format!(
                "Process {} ({}) at {}\n",
                p.pid,
                p.role,
                crate::human::utc(p.at)
            );
            out += &format!("  {}\n", p.summary);
            if let Some(note) = &p.note {
                out += &format!("  note: {note}\n");
            }
            for (to, n) in &p.connections {
                out += &format!("  {n} connection(s) to {to}\n");
            }
            for t in &p.threads {
                let state = if t.active { "active" } else { "idle" };
                out += &format!(
                    "\nThread {} ({state}): {:?}\n",
                    t.id,
                    t.name.as_deref().unwrap_or("")
                );
                for f in &t.frames {
                    out += &format!("    {} ({}:{})\n", f.name, short_file(&f.file), f.line);
                    if let Some(code) = &f.code {
                        out += &format!("        {}\n", code.trim());
                    }
                }
            }
            out += "\n";
        }
        if out.len() > cap {
            let mut end = cap;
            while !out.is_char_boundary(end) {
                end -= 1;
            }
            out.truncate(end);
            out += &format!("\n[cut at {cap} bytes]\n");
        }
        out
    }

    /// The driver's verdict and summary, where they were taken at or after `since`: what a
    /// stall that began then waits on, as far as the driver's stacks tell.
    pub fn driver_verdict(&self, since: Seconds) -> Option<(Verdict, &str)> {
        let p = self
            .processes
            .iter()
            .find(|p| p.role == DRIVER && p.at >= since)?;
        Some((p.verdict, p.summary.as_str()))
    }
}

/// The file as py-spy's text dump shows it: from the package or the standard library's
/// folder on, else the file's name.
pub fn short_file(file: &str) -> &str {
    for marker in ["-packages/", "/lib/python3"] {
        if let Some(at) = file.find(marker) {
            let rest = &file[at + marker.len()..];
            // `/lib/python3.11/x.py`: skip the version folder.
            return match marker {
                "/lib/python3" => rest.split_once('/').map_or(rest, |(_, r)| r),
                _ => rest,
            };
        }
    }
    file.rsplit('/').next().unwrap_or(file)
}
