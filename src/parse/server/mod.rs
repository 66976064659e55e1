//! Inference server logs: the figures SGLang and vLLM print about themselves, and the lines an
//! engineer looks for. Which release prints what, and from which file of its source, is in
//! `docs/server-formats.md`; one sample per release family is in `tests/testdata/server/`.
//!
//! A line is split into its logger's prefix ([`prefix`]) and message first: the prefix gives
//! the line's own time and its data-parallel rank, and only the message is read, field by
//! field ([`fields`]). Lines an engine writes about single requests (request logging, uvicorn's
//! access log) are recognised before anything else and never read as the server's own words,
//! whatever a prompt they echo says: a coding prompt that quotes a traceback is not a crash.
//!
//! SGLang prints a decode line every 40 decode steps whether or not `/metrics` is enabled; vLLM
//! prints its line every 10 s, and stops once both throughputs have been 0 for two intervals:
//! a silent vLLM log means idle, not hung.

mod fields;
pub mod prefix;
mod sglang;
mod vllm;

pub use prefix::Stamp;

use super::Format;

/// What a report line says about one rank of the server. Every figure is optional: a prefill
/// line has no throughput, older releases lack fields.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerReport {
    pub running: Option<f64>,
    pub queued: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    /// KV cache in use, 0-1: the engine's own figure (SGLang's `token usage`, the largest of
    /// its pools where a hybrid model prints several).
    pub kv_cache_usage: Option<f64>,
    /// KV tokens in use (SGLang's `#token`): with the usage it gives the pool's size, which
    /// weights the mean over ranks.
    pub kv_tokens: Option<f64>,
    /// A hybrid model's pools: full attention, sliding window, mamba state.
    pub pools: Pools,
    /// Requests preempted since the engine's last line (vLLM ≥ 0.15's `Preemptions: N`).
    pub preemptions: Option<u64>,
    /// A decode line (SGLang) or a stats line (vLLM): the server is generating or says it
    /// is not. A prefill line is only a report of admissions.
    pub decode: bool,
    pub rank: Rank,
}

/// Whose figures a report holds.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Rank {
    /// A data-parallel rank (SGLang's `DPn`) or an engine (vLLM's `Engine 001:`); a server
    /// with one prints rank 0.
    Of(u32),
    /// vLLM ≥ 0.33's `N Engines Aggregated:` line: the sum over all engines already.
    Aggregated,
}

impl Default for Rank {
    fn default() -> Rank {
        Rank::Of(0)
    }
}

/// Usage of each KV pool a hybrid model prints, 0-1.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pools {
    pub full: Option<f64>,
    pub swa: Option<f64>,
    pub mamba: Option<f64>,
}

impl Pools {
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, f64)> {
        [
            ("full", self.full),
            ("swa", self.swa),
            ("mamba", self.mamba),
        ]
        .into_iter()
        .filter_map(|(name, v)| Some((name, v?)))
    }
}

/// The lines worth counting, exported as `pulse_server_log_events_total{event}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ServerEvent {
    /// SGLang: "KV cache pool is full. Retract requests." (≤ 0.4.6: "Decode out of memory
    /// happened.").
    Retract,
    /// vLLM: a sequence group preempted for lack of KV cache (V0's warning; V1's
    /// `Preemptions: N` counts N).
    Preemption,
    /// SGLang's health check found no response.
    HealthCheckFailed,
    Traceback,
    /// CUDA out of memory.
    Oom,
    /// The engine says it is dead: SGLang's watchdog and SIGQUIT, vLLM's engine core that
    /// died, `EngineDeadError`.
    Fatal,
}

impl ServerEvent {
    pub const ALL: [ServerEvent; 6] = [
        ServerEvent::Retract,
        ServerEvent::Preemption,
        ServerEvent::HealthCheckFailed,
        ServerEvent::Traceback,
        ServerEvent::Oom,
        ServerEvent::Fatal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ServerEvent::Retract => "retract",
            ServerEvent::Preemption => "preemption",
            ServerEvent::HealthCheckFailed => "health_check_failed",
            ServerEvent::Traceback => "traceback",
            ServerEvent::Oom => "oom",
            ServerEvent::Fatal => "fatal",
        }
    }

    /// Whether the server is gone after it: the cause of a stall is then *server crashed*.
    /// Lines that say the server died. A failed health check is not one: SGLang fails it when
    /// one forward pass outlasts its 20 s, alive and busy; a hang shows as a silent log.
    pub fn is_fatal(self) -> bool {
        !matches!(
            self,
            ServerEvent::Retract | ServerEvent::Preemption | ServerEvent::HealthCheckFailed
        )
    }
}

/// A line about one request rather than the server: counted apart, kept out of the tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RequestLine {
    /// uvicorn's access log (`"GET /health HTTP/1.1" 200 OK`).
    Access,
    /// The engine's request logging (`Receive: obj=…`, `Received request …`).
    Request,
}

impl RequestLine {
    pub const ALL: [RequestLine; 2] = [RequestLine::Access, RequestLine::Request];

    pub fn as_str(self) -> &'static str {
        match self {
            RequestLine::Access => "access",
            RequestLine::Request => "request",
        }
    }
}

/// One server log line, read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServerLine {
    Report(ServerReport),
    Event(ServerEvent),
    Request(RequestLine),
    /// vLLM V0's preemption warning, printed for the 1st, 51st, 101st… preemption only, with
    /// the engine's running count of them.
    Preempted {
        cumulative: u64,
    },
    /// vLLM's sleep mode: the engine fell asleep (`true`) or woke up.
    Asleep(bool),
    /// A report line whose figures cannot all be read: it changes no figure.
    Unreadable,
}

/// A line read, with its own time when its prefix has one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerRead {
    pub line: ServerLine,
    pub stamp: Option<Stamp>,
}

/// Reads SGLang and vLLM logs; `auto` finds which from the first report line.
#[derive(Debug, Clone, Default)]
pub struct ServerLog {
    /// Forced or found; `None` while `auto` has seen no report.
    format: Option<Format>,
    forced: bool,
}

impl ServerLog {
    /// `format`: `Format::Sglang`, `Format::Vllm`, or `Format::Auto`.
    pub fn new(format: Format) -> ServerLog {
        let forced = matches!(format, Format::Sglang | Format::Vllm);
        ServerLog {
            format: forced.then_some(format),
            forced,
        }
    }

    pub fn format(&self) -> Option<Format> {
        self.format
    }

    /// Continues with a format found before (restored from a snapshot).
    pub fn assume(&mut self, format: Format) {
        if !self.forced && matches!(format, Format::Sglang | Format::Vllm) {
            self.format = Some(format);
        }
    }

    pub fn parse(&mut self, line: &[u8]) -> Option<ServerRead> {
        let p = prefix::split(line);
        let read = |line| {
            Some(ServerRead {
                line,
                stamp: p.stamp,
            })
        };
        if let Some(kind) = request_line(p.message) {
            return read(ServerLine::Request(kind));
        }
        if let Some(asleep) = sleep(p.message) {
            return read(ServerLine::Asleep(asleep));
        }
        if let Some(event) = event(&p) {
            if let (ServerEvent::Preemption, Some(cumulative)) = (event, cumulative(p.message)) {
                return read(ServerLine::Preempted { cumulative });
            }
            return read(ServerLine::Event(event));
        }
        let (format, report) = match self.format {
            Some(Format::Sglang) => (Format::Sglang, sglang::report(&p)?),
            Some(Format::Vllm) => (Format::Vllm, vllm::report(&p)?),
            _ => match sglang::report(&p) {
                Some(r) => (Format::Sglang, r),
                None => (Format::Vllm, vllm::report(&p)?),
            },
        };
        let line = match report {
            Some(report) => {
                self.format = Some(format);
                ServerLine::Report(report)
            }
            None => ServerLine::Unreadable,
        };
        read(line)
    }
}

fn find(line: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(line, needle)
}

/// The messages the engines log per request, by their first words (SGLang's `--log-requests`,
/// vLLM's `--enable-log-requests` and its older default), and uvicorn's access log.
fn request_line(message: &[u8]) -> Option<RequestLine> {
    const REQUEST: [&[u8]; 10] = [
        b"Receive: obj=",
        b"in=GenerateReqInput(",
        b"Finish: obj=",
        b"Received request ",
        b"Generated response ",
        b"Added request ",
        b"Finished request ",
        b"Aborted request ",
        b"Abort request ",
        b"Request ",
    ];
    if REQUEST.iter().any(|w| message.starts_with(w)) {
        // `Request …` alone is too general: vLLM's is `Request <id> …: prompt`/`output`.
        // `Request … failed (engine dead).` is vLLM's word on each request a death took.
        if !message.starts_with(b"Request ")
            || find(message, b"prompt").is_some()
            || find(message, b" failed (engine dead)").is_some()
        {
            return Some(RequestLine::Request);
        }
    }
    access_line(message).then_some(RequestLine::Access)
}

/// `INFO:     127.0.0.1:53650 - "GET /health HTTP/1.1" 200 OK`, or its message alone as a
/// JSON formatter gives it (`127.0.0.1:53650 - "GET /health HTTP/1.1" 200`).
fn access_line(message: &[u8]) -> bool {
    let rest = match memchr::memchr(b':', message) {
        Some(colon)
            if matches!(
                &message[..colon],
                b"INFO" | b"WARNING" | b"ERROR" | b"DEBUG"
            ) =>
        {
            &message[colon + 1..]
        }
        _ => message,
    };
    let Some(dash) = find(rest, b" - \"") else {
        return false;
    };
    let request = &rest[dash + 4..];
    let Some(close) = find(request, b"\" ") else {
        return false;
    };
    find(&request[..close], b" HTTP/").is_some()
        && request[close + 2..]
            .get(..3)
            .is_some_and(|s| s.iter().all(u8::is_ascii_digit))
}

const TRACEBACK: &[u8] = b"Traceback (most recent call last)";

/// An event is the engine's own message: at the start of the message after its logger's
/// prefix, or a traceback's own lines (no prefix), never words inside another message.
fn event(p: &prefix::Prefix<'_>) -> Option<ServerEvent> {
    let m = p.message.trim_ascii_start();
    let starts = |w: &[u8]| m.starts_with(w);
    let has = |w: &[u8]| find(m, w).is_some();
    // SGLang's `Scheduler hit an exception: Traceback …` puts the traceback after its words.
    if starts(TRACEBACK) || (has(b" hit an exception: ") && has(TRACEBACK)) {
        return Some(ServerEvent::Traceback);
    }
    if has(b"EngineDeadError")
        || (starts(b"Engine core proc ") && has(b"died unexpectedly"))
        || starts(b"Watchdog timeout")
        || starts(b"Scheduler watchdog timeout")
        || starts(b"Received sigquit")
        || starts(b"EngineCore encountered a fatal error")
        || starts(b"Engine core initialization failed")
        || (starts(b"[shutdown] ") && has(b"exited unexpectedly"))
    {
        return Some(ServerEvent::Fatal);
    }
    // An exception's own line (`torch.OutOfMemoryError: CUDA out of memory. …`) or the
    // engine's message about it.
    if has(b"CUDA out of memory") || exception_named(m, b"OutOfMemoryError") {
        return Some(ServerEvent::Oom);
    }
    if starts(b"KV cache pool is full") || starts(b"Decode out of memory happened") {
        return Some(ServerEvent::Retract);
    }
    if starts(b"Sequence group ") && has(b"is preempted by") {
        return Some(ServerEvent::Preemption);
    }
    if starts(b"Health check failed") || starts(b"health check failed") {
        return Some(ServerEvent::HealthCheckFailed);
    }
    None
}

/// vLLM's sleep mode as its executor says it (`v1/executor/abstract.py`): `It took 0.51
/// seconds to fall asleep.`, `It took 0.8 seconds to wake up tags {'weights', 'kv_cache'}.`
/// A partial wake-up (some tags) is still asleep to the engine's gauge; the log cannot tell,
/// so any wake-up wakes it.
fn sleep(message: &[u8]) -> Option<bool> {
    let m = message.trim_ascii();
    if !m.starts_with(b"It took ") {
        return None;
    }
    if m.ends_with(b"seconds to fall asleep.") {
        return Some(true);
    }
    find(m, b" seconds to wake up").map(|_| false)
}

/// `… total_num_cumulative_preemption=51` at the end of V0's warning.
fn cumulative(message: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"total_num_cumulative_preemption=";
    let at = find(message, KEY)? + KEY.len();
    let digits = message[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    crate::parse::number::parse_u64(&message[at..at + digits])
}

/// `pkg.Name: message` at the start of a line, the last line of a traceback.
fn exception_named(m: &[u8], name: &[u8]) -> bool {
    let Some(colon) = find(m, b": ") else {
        return m.ends_with(name);
    };
    let head = &m[..colon];
    head.ends_with(name)
        && head
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
}

#[cfg(test)]
mod tests;
