//! SGLang's scheduler stats lines, every release from 0.2.15 (`tp_worker.py`, then
//! `scheduler.py`, `scheduler_metrics_mixin.py`, `metrics_reporter.py`):
//!
//! ```text
//! Decode batch, #running-req: 233, #token: 370959, token usage: 0.82, cuda graph: True, gen throughput (token/s): 4594.01, #queue-req: 317,
//! Decode batch. #running-req: 233, #full token: 290000, full token usage: 0.71, #swa token: 1000, swa token usage: 0.40, gen throughput (token/s): 1302.40, #queue-req: 0,
//! Prefill batch. #new-seq: 5, #new-token: 1234, #cached-token: 4096, token usage: 0.31, #running-req: 228, #queue-req: 312,
//! Prefill batch. #new-seq: 5, #new-token: 1234, #cached-token: 4096, token usage: 0.31, #unbootstrapped-req: 0, #queue-req: 3, #transferring-req: 1,
//! ```
//!
//! (`.` after the batch word before 0.4.7, `,` after; PD-disaggregated prefill in 0.4.8–0.5.1
//! prints no `#running-req`.) The data-parallel rank is the prefix's `DPn`.

use super::fields::{Fields, Reading, Value};
use super::prefix::Prefix;
use super::{Pools, Rank, ServerReport};

/// `None`: not a stats line; `Some(None)`: one whose figures cannot all be read.
pub fn report(p: &Prefix<'_>) -> Option<Option<ServerReport>> {
    let m = p.message;
    let (decode, rest) = if let Some(rest) = m.strip_prefix(b"Decode batch") {
        (true, rest)
    } else if let Some(rest) = m.strip_prefix(b"Prefill batch") {
        (false, rest)
    } else {
        return None;
    };
    let (mixed, rest) = separator(rest)?;
    let fields = Fields::new(rest);
    if !(fields.has(b"#running-req") || fields.has(b"#new-seq") || mixed.is_some()) {
        return None;
    }
    let mut r = Reading::default();
    let running = match mixed {
        Some(m) => r.take(Fields::new(m).number(b"#running-req")),
        None => r.take(fields.number(b"#running-req")),
    };
    let queued = r.take(fields.number(b"#queue-req"));
    let generation = if decode {
        r.take(fields.number(b"gen throughput (token/s)"))
    } else {
        None
    };
    // 0.4.9 printed a hybrid model's pools inside one field: `token usage: full=0.22, swa=0.41`.
    let inline = fields
        .raw(b"token usage")
        .is_some_and(|v| v.starts_with(b"full="));
    let pools = if inline {
        Pools {
            full: r.ratio(inline_pool(rest, b"full="), false),
            swa: r.ratio(inline_pool(rest, b"swa="), false),
            mamba: None,
        }
    } else {
        Pools {
            full: r.ratio(fields.number(b"full token usage"), false),
            swa: r.ratio(fields.number(b"swa token usage"), false),
            mamba: r.ratio(fields.number(b"mamba usage"), false),
        }
    };
    // SGLang's own `token_usage` is the fullest pool where a hybrid model prints several;
    // until 0.5.5 (whose lines end every field with `, `) a mamba model's was its full
    // attention pool alone, the mamba state slots apart.
    let mamba_apart = pools.mamba.is_some() && rest.trim_ascii_end().ends_with(b",");
    let kv = if inline {
        None
    } else {
        r.ratio(fields.number(b"token usage"), false)
    }
    .or(if mamba_apart { pools.full } else { None })
    .or_else(|| pools.iter().map(|(_, v)| v).reduce(f64::max));
    let kv_tokens = match fields.raw(b"#token") {
        Some(v) if v.starts_with(b"full=") => None,
        _ => match r.take(fields.number(b"#token")) {
            Some(t) => Some(t),
            None => r.take(fields.number(b"#full token")),
        },
    };
    if r.bad || (decode && running.is_none()) {
        return Some(None);
    }
    Some(Some(ServerReport {
        running,
        queued,
        generation_tokens_per_second: generation,
        kv_cache_usage: kv,
        kv_tokens: kv_tokens.filter(|_| pools.swa.is_none() && pools.mamba.is_none()),
        pools,
        preemptions: None,
        decode,
        rank: Rank::Of(p.dp_rank.unwrap_or(0)),
    }))
}

/// What follows the batch word: `.` (≤ 0.5.3), ` [12345],` (0.5.4's iteration counter), `,`;
/// 0.2.x's mixed prefill puts `(mixed #running-req: 20)` before its `.`.
fn separator(rest: &[u8]) -> Option<(Option<&[u8]>, &[u8])> {
    let (mixed, rest) = match rest.strip_prefix(b"(mixed ") {
        Some(inner) => {
            let close = memchr::memchr(b')', inner)?;
            (Some(&inner[..close]), &inner[close + 1..])
        }
        None => (None, rest),
    };
    let rest = match rest.strip_prefix(b" [") {
        Some(counter) => {
            let close = memchr::memchr(b']', counter)?;
            crate::parse::number::parse_u64(&counter[..close])?;
            &counter[close + 1..]
        }
        None => rest,
    };
    let rest = rest
        .strip_prefix(b".")
        .or_else(|| rest.strip_prefix(b","))?;
    Some((mixed, rest))
}

/// `full=0.22` among 0.4.9's `token usage: full=0.22, swa=0.41` (after the `token usage`
/// field, where `#token: full=…` holds token counts).
fn inline_pool(text: &[u8], key: &[u8]) -> Value {
    let Some(at) = memchr::memmem::find(text, b"token usage: ") else {
        return Value::Absent;
    };
    let after = &text[at + 13..];
    let end = memchr::memmem::find(after, b": ")
        .and_then(|colon| memchr::memrchr(b',', &after[..colon]))
        .unwrap_or(after.len());
    for piece in after[..end].split(|&b| b == b',') {
        if let Some(v) = piece.trim_ascii().strip_prefix(key) {
            return match crate::parse::number::parse_f64(v) {
                Some(v) => Value::Number(v),
                None => Value::Bad,
            };
        }
    }
    Value::Absent
}
