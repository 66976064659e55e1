//! The web config's guards: reloads, refused TLS handshakes and refused credentials. Only
//! with a web config; without one there is nothing to count.

use super::Out;
use super::{family, gauge};
use crate::sinks::web_config::Counters;
use prometheus_client::encoding::EncodeMetric;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;
use std::fmt;
use std::sync::atomic::Ordering;

pub(super) fn encode(web: &Counters, enc: &mut Out) -> fmt::Result {
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    family(
        enc,
        "pulse_web_config_reloads",
        "Times the web config or a file it names changed and was read again, by result; a failure keeps the last good config.",
        MetricType::Counter,
        [
            ([("result", "success")], ConstCounter::new(get(&web.reloads_ok))),
            ([("result", "failure")], ConstCounter::new(get(&web.reloads_failed))),
        ],
    )?;
    gauge(
        enc,
        "pulse_web_config_last_reload_successful",
        "1 if the web config in use is the one on disk, 0 if the last change could not be loaded.",
        if web.last_reload_failed.load(Ordering::Relaxed) {
            0.0
        } else {
            1.0
        },
    )?;
    counter(
        enc,
        "pulse_http_tls_handshake_failures",
        "TLS handshakes that failed or timed out: untrusted clients, missing client certificates, scanners.",
        get(&web.handshakes_failed),
    )?;
    counter(
        enc,
        "pulse_http_unauthorized",
        "Requests answered 401 for missing or wrong basic-auth credentials.",
        get(&web.unauthorized),
    )
}

/// A counter with no labels (`_total` is appended).
fn counter(enc: &mut Out, name: &str, help: &str, value: u64) -> fmt::Result {
    match enc.descriptor(name, help, MetricType::Counter)? {
        Some(metric) => ConstCounter::new(value).encode(metric),
        None => Ok(()),
    }
}
