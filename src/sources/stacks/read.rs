//! Reading a process's stacks: what each thread waits on, where in the process's own code,
//! in one line; and what that says of a stall's cause. Pure: threads in, words out.

use super::{Frame, ProcessStacks, Thread, Verdict, Wait};
use crate::model::stacks::short_file;
use std::collections::BTreeMap;

/// One thread, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading<'a> {
    pub wait: Wait,
    /// What it does, in words: "blocked on a lock (`l.acquire()`)".
    pub what: String,
    /// The frame a person looks at: the innermost of the program's own code, else the
    /// innermost outside the standard library, else the innermost.
    pub at: Option<&'a Frame>,
}

/// Where py-spy's file lives: the standard library, an installed package, or the program.
fn is_python(file: &str) -> bool {
    file.ends_with(".py") || file.starts_with('<')
}

fn is_stdlib(file: &str) -> bool {
    file.starts_with("<frozen") || (file.contains("/lib/python3") && !is_package(file))
}

fn is_package(file: &str) -> bool {
    file.contains("-packages/")
}

/// The top-level package a file belongs to: `vllm` for `…/site-packages/vllm/v1/engine/core.py`.
fn package(file: &str) -> Option<&str> {
    let rest = &file[file.find("-packages/")? + "-packages/".len()..];
    rest.split('/').next()
}

/// The last part of a qualified name: `BaseEventLoop._run_once` → `_run_once`.
fn bare(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

const COLLECTIVES: &[&str] = &[
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "barrier",
    "all_to_all",
    "all_to_all_single",
    "send",
    "recv",
];

/// The standard library's waits: a thread's innermost frames in these files are it waiting.
const SYNC: &[&str] = &[
    "/threading.py",
    "/queue.py",
    "/concurrent/futures/_base.py",
    "/multiprocessing/synchronize.py",
];

const NETWORK: &[&str] = &[
    "/socket.py",
    "/ssl.py",
    "/http/client.py",
    "urllib3/",
    "requests/",
    "httpx/",
    "httpcore/",
    "aiohttp/",
    "zmq/",
    "grpc/",
];

/// Reads one thread, innermost frame first.
pub fn thread(t: &Thread) -> Reading<'_> {
    let python: Vec<&Frame> = t.frames.iter().filter(|f| is_python(&f.file)).collect();
    // A server's processes run a package's code (`vllm serve`, a spawned EngineCore whose
    // only frame of its own is multiprocessing's `<string>`): the package that runs the
    // thread is that of its outermost package frame.
    let runner = python
        .iter()
        .rev()
        .find(|f| is_package(&f.file))
        .and_then(|f| package(&f.file));
    let at = python
        .iter()
        .find(|f| !is_stdlib(&f.file) && !is_package(&f.file) && !f.file.starts_with('<'))
        .or_else(|| runner.and_then(|r| python.iter().find(|f| package(&f.file) == Some(r))))
        .or_else(|| python.iter().find(|f| !is_stdlib(&f.file)))
        .or(python.first())
        .copied();
    let code = at.and_then(|f| f.code.as_deref()).map(str::trim);
    let quoted = code.map(|c| format!(" (`{c}`)")).unwrap_or_default();
    let (wait, what) = classify(t, &python, code);
    // A wait on vLLM's message queue is shown where it was called from, not inside the queue.
    let at = match python
        .iter()
        .rposition(|f| f.file.ends_with("device_communicators/shm_broadcast.py"))
    {
        Some(last) if what.contains("MessageQueue") => python[last + 1..]
            .iter()
            .find(|f| !is_stdlib(&f.file))
            .copied()
            .or(at),
        _ => at,
    };
    let what = match wait {
        Wait::Lock | Wait::Join | Wait::Sleep | Wait::Network | Wait::Running => {
            format!("{what}{quoted}")
        }
        _ => what,
    };
    Reading { wait, what, at }
}

fn classify(t: &Thread, python: &[&Frame], code: Option<&str>) -> (Wait, String) {
    for f in &t.frames {
        let name = bare(&f.name);
        if (f.file.contains("torch/distributed/") || f.file.contains("vllm/distributed/"))
            && COLLECTIVES.contains(&name)
        {
            return (Wait::Collective, format!("in torch.distributed `{name}`"));
        }
        if name == "synchronize" && f.file.contains("torch/cuda") {
            return (Wait::CudaSync, "in a CUDA synchronize".into());
        }
    }
    if let Some(inner) = python.first() {
        let (file, name) = (inner.file.as_str(), bare(&inner.name));
        let in_asyncio = python.iter().any(|f| f.file.contains("/asyncio/"));
        if (file.ends_with("/selectors.py") || name == "_run_once") && in_asyncio {
            return (Wait::EventLoop, "asyncio event loop waiting for I/O".into());
        }
        // uvloop's loop runs in C: a loop at rest shows uvloop's `run`, or asyncio's runner
        // under it, as its innermost Python frame.
        let uvloop = python.iter().any(|f| f.file.contains("/uvloop/"));
        if uvloop && (file.contains("/uvloop/") || file.ends_with("/asyncio/runners.py")) {
            return (Wait::EventLoop, "uvloop event loop waiting for I/O".into());
        }
        // vLLM's processes talk through shared-memory queues: the engine waits there on its
        // workers' answers, a worker on the engine's next call.
        if python.iter().any(|f| {
            f.file.ends_with("device_communicators/shm_broadcast.py")
                && matches!(bare(&f.name), "dequeue" | "acquire_read")
        }) {
            return (
                Wait::Collective,
                "waiting on the engine's shared-memory message queue (`MessageQueue.dequeue`)"
                    .into(),
            );
        }
        // The outermost frame of the synchronisation modules is the call the program made.
        if let Some(call) = python
            .iter()
            .take_while(|f| SYNC.iter().any(|m| f.file.ends_with(m)))
            .last()
        {
            let name = bare(&call.name);
            return match (short_file(&call.file), name) {
                (_, "join" | "_wait_for_tstate_lock") => {
                    (Wait::Join, "waiting for a thread to end".into())
                }
                ("queue.py", _) => (Wait::Join, "waiting on a queue".into()),
                ("concurrent/futures/_base.py", _) => (Wait::Join, "waiting for a future".into()),
                _ => {
                    let what = call.name.split('.').next().unwrap_or("lock").to_lowercase();
                    let a = if what.starts_with(['a', 'e', 'i', 'o', 'u']) {
                        "an"
                    } else {
                        "a"
                    };
                    (
                        Wait::Lock,
                        format!("waiting on {a} {what} (`{}`)", call.name),
                    )
                }
            };
        }
        if NETWORK.iter().any(|n| file.contains(n)) || file.ends_with("/selectors.py") {
            return (Wait::Network, "waiting on the network".into());
        }
    }
    if t.frames
        .iter()
        .any(|f| f.file.contains("/tokenizers/") || short_file(&f.file).contains("tokenization_"))
    {
        return (Wait::Tokenizer, "tokenizing".into());
    }
    if let Some(code) = code {
        let lower = code.to_lowercase();
        if lower.contains(".acquire(") || (lower.starts_with("with ") && lower.contains("lock")) {
            return (Wait::Lock, "blocked on a lock".into());
        }
        if lower.contains(".join(") && !lower.contains("\".join(") && !lower.contains("'.join(") {
            return (Wait::Join, "waiting for a thread to end".into());
        }
        if lower.contains("sleep(") {
            return (Wait::Sleep, "sleeping".into());
        }
        if [".recv(", ".read(", "urlopen(", ".recv_into("]
            .iter()
            .any(|c| lower.contains(c))
        {
            return (Wait::Network, "waiting on the network".into());
        }
    }
    if t.active {
        return (Wait::Running, "running".into());
    }
    (Wait::Unknown, "idle".into())
}

/// `in `send_request` (driver.py:88)`.
fn place(f: &Frame) -> String {
    format!(
        "in `{}` ({}:{})",
        bare(&f.name),
        short_file(&f.file),
        f.line
    )
}

/// The one line for a process: its main thread, then the largest group of its other threads
/// that do something, then its connections where they matter.
pub fn summarize(
    role: &str,
    pid: u32,
    threads: &[Thread],
    connections: &[(String, usize)],
    stopped: bool,
) -> (String, Wait) {
    let head = format!("{role} (pid {pid})");
    let stop = if stopped {
        "stopped (SIGSTOP or a debugger), "
    } else {
        ""
    };
    let main_at = threads
        .iter()
        .position(|t| t.name.as_deref() == Some("MainThread"))
        .unwrap_or(0);
    let Some(main) = threads.get(main_at).map(thread) else {
        let wait = if stopped {
            Wait::Stopped
        } else {
            Wait::Unknown
        };
        return (format!("{head}: {stop}no Python stacks"), wait);
    };
    let mut line = format!("{head}: {stop}");
    let lone = threads.len() == 1;
    line += if lone { "" } else { "main thread " };
    line += &main.what;
    if let Some(f) = main.at {
        line += &format!(" {}", place(f));
    }
    // The other threads, grouped by what they do and where.
    let mut groups: BTreeMap<(Wait, String), usize> = BTreeMap::new();
    for (i, t) in threads.iter().enumerate() {
        if i == main_at {
            continue;
        }
        let r = thread(t);
        if r.wait == Wait::Unknown {
            continue;
        }
        let what = match r.at {
            Some(f) => format!("{} {}", r.what, place(f)),
            None => r.what,
        };
        *groups.entry((r.wait, what)).or_default() += 1;
    }
    let busiest = groups
        .iter()
        .max_by_key(|((wait, _), n)| (**n, std::cmp::Reverse(*wait)))
        .map(|((wait, what), n)| (*wait, what.clone(), *n));
    let mut wait = main.wait;
    if let Some((group_wait, what, n)) = &busiest {
        let threads = if *n == 1 { "thread" } else { "threads" };
        line += &format!("; {n} other {threads} {what}");
        // A main thread that only waits for its workers is waiting on what they wait on.
        if matches!(main.wait, Wait::Join | Wait::Unknown | Wait::Lock)
            && matches!(
                group_wait,
                Wait::Network | Wait::Running | Wait::Collective | Wait::CudaSync | Wait::Tokenizer
            )
        {
            wait = *group_wait;
        }
    }
    let waits_on_io = matches!(wait, Wait::Network | Wait::EventLoop);
    if waits_on_io {
        let open: usize = connections.iter().map(|(_, n)| n).sum();
        match connections.first() {
            Some((to, n)) if *n == open => line += &format!("; {open} connection(s) open to {to}"),
            Some((to, n)) => line += &format!("; {open} connection(s) open, {n} of them to {to}"),
            None => line += "; no connection open",
        }
    }
    if wait == Wait::EventLoop {
        line += " (which coroutine awaits what cannot be read from outside the process before Python 3.14)";
    }
    if stopped {
        wait = Wait::Stopped;
    }
    (line, wait)
}

/// What a driver's stacks say of a stall's cause.
pub fn verdict(p: &ProcessStacks) -> Verdict {
    let readings: Vec<Wait> = p.threads.iter().map(|t| thread(t).wait).collect();
    let connected = !p.connections.is_empty();
    if p.wait == Wait::Stopped {
        return Verdict::Stopped;
    }
    if readings.contains(&Wait::Network) || (readings.contains(&Wait::EventLoop) && connected) {
        return Verdict::WaitingOnServer;
    }
    if readings.iter().any(|w| {
        matches!(
            w,
            Wait::Running | Wait::Collective | Wait::CudaSync | Wait::Tokenizer
        )
    }) {
        return Verdict::Busy;
    }
    if readings.contains(&Wait::EventLoop) {
        return Verdict::Idle;
    }
    if matches!(p.wait, Wait::Lock | Wait::Join) {
        return Verdict::Deadlocked;
    }
    Verdict::Unknown
}

#[cfg(test)]
mod tests;
