//! vLLM's periodic stats line, V0 (`engine/metrics.py`) and V1 (`v1/metrics/loggers.py`):
//!
//! ```text
//! Engine 000: Avg prompt throughput: 5.7 tokens/s, Avg generation throughput: 1.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, Preemptions: 2, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%
//! 2 Engines Aggregated: Avg prompt throughput: …
//! Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 52.3 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 4.1%, CPU KV cache usage: 0.0%.
//! ```
//!
//! The device word is the platform's (`GPU` on CUDA and ROCm, `CPU`, `XPU`, `NPU`, `TPU`); V0
//! also prints `CPU KV cache usage` for its swap space, after the device's, so the first
//! `… KV cache usage` field is the one read.

use super::fields::{Fields, Reading};
use super::prefix::Prefix;
use super::{Rank, ServerReport};
use crate::parse::number::parse_u64;

/// `None`: not a stats line; `Some(None)`: one whose figures cannot all be read.
pub fn report(p: &Prefix<'_>) -> Option<Option<ServerReport>> {
    let (rank, stats) = engine(p.message)?;
    let fields = Fields::new(stats);
    if !fields.has(b"Avg generation throughput") {
        return None;
    }
    let mut r = Reading::default();
    let generation = r.take(fields.number(b"Avg generation throughput"));
    let running = r.take(fields.number(b"Running"));
    let queued = match r.take(fields.number(b"Waiting")) {
        Some(w) => Some(w),
        None => r.take(fields.number(b"Pending")),
    };
    let kv = fields
        .name_ending(b" KV cache usage")
        .and_then(|name| r.ratio(fields.number(name), true));
    let preemptions = r.take(fields.number(b"Preemptions"));
    let preemptions = match preemptions {
        Some(p) if p.fract() == 0.0 && p >= 0.0 => Some(p as u64),
        Some(_) => {
            r.bad = true;
            None
        }
        None => None,
    };
    if r.bad || generation.is_none() {
        return Some(None);
    }
    Some(Some(ServerReport {
        running,
        queued,
        generation_tokens_per_second: generation,
        kv_cache_usage: kv,
        preemptions,
        decode: true,
        rank,
        ..ServerReport::default()
    }))
}

/// `Engine 001: …` (V1, one line per engine), `2 Engines Aggregated: …` (0.33), or the
/// stats alone (V0, and V1 before 0.9).
fn engine(message: &[u8]) -> Option<(Rank, &[u8])> {
    if let Some(rest) = message.strip_prefix(b"Engine ") {
        let colon = memchr::memchr(b':', rest)?;
        let n = parse_u64(&rest[..colon])?;
        return Some((Rank::Of(u32::try_from(n).ok()?), &rest[colon + 1..]));
    }
    if let Some(at) = memchr::memmem::find(message, b" Engines Aggregated:") {
        parse_u64(&message[..at])?;
        return Some((Rank::Aggregated, &message[at + 20..]));
    }
    Some((Rank::Of(0), message))
}
