//! Inference server logs: the figures SGLang and vLLM print about themselves, and the lines an
//! engineer looks for.
//!
//! ```text
//! [2026-08-28 22:30:08 TP0] Decode batch, #running-req: 233, #token: 370959, token usage: 0.82, cuda graph: True, gen throughput (token/s): 4594.01, #queue-req: 317,
//! [2026-08-28 22:30:08 DP0 TP0] Decode batch. #running-req: 233, #token: 370959, token usage: 0.82, gen throughput (token/s): 4594.01, #queue-req: 317
//! [2026-08-28 22:30:01 TP0] Prefill batch, #new-seq: 5, #new-token: 1234, #cached-token: 4096, token usage: 0.31, #running-req: 228, #queue-req: 312,
//! (APIServer pid=3402897) INFO 08-17 02:59:34 [loggers.py:310] Engine 000: Avg prompt throughput: 5.7 tokens/s, Avg generation throughput: 1.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%
//! INFO 08-17 02:59:34 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 52.3 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 4.1%, CPU KV cache usage: 0.0%.
//! ```
//!
//! SGLang prints a decode line every 40 decode steps whether or not `/metrics` is enabled; vLLM
//! prints its line every 10 s, and stops once both throughputs have been 0 for two intervals:
//! a silent vLLM log means idle, not hung. Fields are found by name, so optional ones
//! (`accept len`, `#full token`, `swa token usage`) and reordered ones do not matter.

use super::number::{leading_decimal, parse_f64, trim};
use super::Format;

/// What a report line says about the server. Every figure is optional: a prefill line has no
/// throughput, older releases lack fields.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerReport {
    pub running: Option<f64>,
    pub queued: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    /// KV cache in use, 0-1.
    pub kv_cache_usage: Option<f64>,
    /// A decode line (SGLang) or a stats line (vLLM): the server is generating or says it
    /// is not. A prefill line is only a report of admissions.
    pub decode: bool,
}

/// The lines worth counting, exported as `pulse_server_log_events_total{event}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ServerEvent {
    /// SGLang: "KV cache pool is full. Retract requests."
    Retract,
    /// vLLM: a sequence group preempted for lack of KV cache.
    Preemption,
    /// SGLang's health check found no response.
    HealthCheckFailed,
    Traceback,
    /// CUDA out of memory.
    Oom,
}

impl ServerEvent {
    pub const ALL: [ServerEvent; 5] = [
        ServerEvent::Retract,
        ServerEvent::Preemption,
        ServerEvent::HealthCheckFailed,
        ServerEvent::Traceback,
        ServerEvent::Oom,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ServerEvent::Retract => "retract",
            ServerEvent::Preemption => "preemption",
            ServerEvent::HealthCheckFailed => "health_check_failed",
            ServerEvent::Traceback => "traceback",
            ServerEvent::Oom => "oom",
        }
    }

    /// Whether the server is gone after it: the cause of a stall is then *server crashed*.
    pub fn is_fatal(self) -> bool {
        matches!(
            self,
            ServerEvent::HealthCheckFailed | ServerEvent::Traceback | ServerEvent::Oom
        )
    }
}

/// One server log line, read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServerLine {
    Report(ServerReport),
    Event(ServerEvent),
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

    pub fn parse(&mut self, line: &[u8]) -> Option<ServerLine> {
        if let Some(event) = event(line) {
            return Some(ServerLine::Event(event));
        }
        let (format, report) = match self.format {
            Some(Format::Sglang) => (Format::Sglang, sglang(line)?),
            Some(Format::Vllm) => (Format::Vllm, vllm(line)?),
            _ => match sglang(line) {
                Some(r) => (Format::Sglang, r),
                None => (Format::Vllm, vllm(line)?),
            },
        };
        self.format = Some(format);
        Some(ServerLine::Report(report))
    }
}

fn find(line: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(line, needle)
}

fn event(line: &[u8]) -> Option<ServerEvent> {
    if find(line, b"Traceback (most recent call last)").is_some() {
        Some(ServerEvent::Traceback)
    } else if find(line, b"CUDA out of memory").is_some()
        || find(line, b"OutOfMemoryError").is_some()
    {
        Some(ServerEvent::Oom)
    } else if find(line, b"KV cache pool is full").is_some() {
        Some(ServerEvent::Retract)
    } else if find(line, b"is preempted by").is_some() {
        Some(ServerEvent::Preemption)
    } else if find(line, b"Health check failed").is_some()
        || find(line, b"health check failed").is_some()
    {
        Some(ServerEvent::HealthCheckFailed)
    } else {
        None
    }
}

/// The number after `name` (and its `:`), up to the next field.
fn field(line: &[u8], name: &[u8]) -> Option<f64> {
    let at = find(line, name)? + name.len();
    let rest = trim(line[at..].strip_prefix(b":")?);
    let (num, _) = leading_decimal(rest);
    parse_f64(num)
}

/// `Decode batch, #running-req: …` or `Prefill batch, #new-seq: …` (`.` instead of `,` in
/// older releases).
fn sglang(line: &[u8]) -> Option<ServerReport> {
    let decode = if find(line, b"Decode batch").is_some() {
        true
    } else if find(line, b"Prefill batch").is_some() {
        false
    } else {
        return None;
    };
    let report = ServerReport {
        running: field(line, b"#running-req"),
        queued: field(line, b"#queue-req"),
        generation_tokens_per_second: decode
            .then(|| field(line, b"gen throughput (token/s)"))
            .flatten(),
        kv_cache_usage: field(line, b" token usage").filter(|u| (0.0..=1.0).contains(u)),
        decode,
    };
    // A line that names a batch but holds none of its figures is not a report.
    (report.running.is_some() || report.generation_tokens_per_second.is_some()).then_some(report)
}

/// `Avg prompt throughput: … Avg generation throughput: 1.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%`
/// (V0: `Pending:` instead of `Waiting:`).
fn vllm(line: &[u8]) -> Option<ServerReport> {
    let generation = field(line, b"Avg generation throughput")?;
    Some(ServerReport {
        running: field(line, b"Running"),
        queued: field(line, b"Waiting").or_else(|| field(line, b"Pending")),
        generation_tokens_per_second: Some(generation),
        kv_cache_usage: field(line, b"GPU KV cache usage")
            .map(|p| p / 100.0)
            .filter(|u| (0.0..=1.0).contains(u)),
        decode: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(line: &str) -> ServerReport {
        match ServerLog::default().parse(line.as_bytes()) {
            Some(ServerLine::Report(r)) => r,
            other => panic!("{line:?} → {other:?}"),
        }
    }

    #[test]
    fn sglang_decode_lines_of_every_release() {
        for line in [
            "[2026-08-28 22:30:08 TP0] Decode batch, #running-req: 233, #token: 370959, token usage: 0.82, cuda graph: True, gen throughput (token/s): 4594.01, #queue-req: 317, ",
            "[2026-08-28 22:30:08 DP0 TP0] Decode batch. #running-req: 233, #token: 370959, token usage: 0.82, gen throughput (token/s): 4594.01, #queue-req: 317",
            "[2026-08-28 22:30:08 TP0 EP0] Decode batch, #running-req: 233, #full token: 370959, full token usage: 0.82, swa token usage: 0.10, accept len: 1.73, gen throughput (token/s): 4594.01, #queue-req: 317, ",
        ] {
            let r = report(line);
            assert_eq!(r.running, Some(233.0), "{line}");
            assert_eq!(r.queued, Some(317.0), "{line}");
            assert_eq!(r.generation_tokens_per_second, Some(4594.01), "{line}");
            assert_eq!(r.kv_cache_usage, Some(0.82), "{line}");
            assert!(r.decode);
        }
        let p = report("[2026-08-28 22:30:01 TP0] Prefill batch, #new-seq: 5, #new-token: 1234, #cached-token: 4096, token usage: 0.31, #running-req: 228, #queue-req: 312, ");
        assert_eq!(
            (p.running, p.queued, p.kv_cache_usage),
            (Some(228.0), Some(312.0), Some(0.31))
        );
        assert_eq!(p.generation_tokens_per_second, None);
        assert!(!p.decode);
    }

    #[test]
    fn vllm_stats_lines_v1_and_v0() {
        let r = report("(APIServer pid=3402897) INFO 08-17 02:59:34 [loggers.py:310] Engine 000: Avg prompt throughput: 5.7 tokens/s, Avg generation throughput: 1.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%");
        assert_eq!(r.running, Some(1.0));
        assert_eq!(r.queued, Some(0.0));
        assert_eq!(r.generation_tokens_per_second, Some(1.5));
        assert_eq!(r.kv_cache_usage, Some(0.01));
        let r = report("INFO 08-17 02:59:34 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 52.3 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 4.1%, CPU KV cache usage: 0.0%.");
        assert_eq!((r.running, r.queued), (Some(3.0), Some(2.0)));
        assert!((r.kv_cache_usage.unwrap() - 0.041).abs() < 1e-12);
    }

    #[test]
    fn events_and_the_format_found() {
        let mut log = ServerLog::default();
        let event = |log: &mut ServerLog, line: &str| match log.parse(line.as_bytes()) {
            Some(ServerLine::Event(e)) => e,
            other => panic!("{line:?} → {other:?}"),
        };
        assert_eq!(
            event(&mut log, "[2026-08-28 22:31:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.7"),
            ServerEvent::Retract
        );
        assert_eq!(
            event(&mut log, "WARNING 08-17 03:00:00 scheduler.py:1089] Sequence group 12 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space."),
            ServerEvent::Preemption
        );
        assert_eq!(event(&mut log, "[2026-08-28 22:40:00] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds."), ServerEvent::HealthCheckFailed);
        assert_eq!(
            event(&mut log, "Traceback (most recent call last):"),
            ServerEvent::Traceback
        );
        assert_eq!(
            event(
                &mut log,
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
            ),
            ServerEvent::Oom
        );
        assert_eq!(log.format(), None);
        assert!(log
            .parse(b"INFO: 127.0.0.1:5000 - \"POST /generate HTTP/1.1\" 200 OK")
            .is_none());
        report("[2026-08-28 22:30:08 TP0] Decode batch, #running-req: 1, gen throughput (token/s): 1.0, #queue-req: 0, ");
        let mut log = ServerLog::default();
        log.parse(b"[x TP0] Decode batch, #running-req: 1, gen throughput (token/s): 1.0, #queue-req: 0, ");
        assert_eq!(log.format(), Some(Format::Sglang));
        // Decided: a vLLM line in an SGLang log is text.
        assert!(log
            .parse(b"Avg generation throughput: 1.5 tokens/s, Running: 1 reqs")
            .is_none());
    }
}
