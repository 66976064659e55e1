//! The driver process's and the inference server's families: its health, its own figures
//! (from its metrics and its log, ranks combined) and what its log said.

use super::Out;
use super::{family, gauge};
use crate::model::Run;
use crate::parse::{RequestLine, ServerEvent};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::fmt;

pub(super) fn encode(run: &Run, enc: &mut Out) -> fmt::Result {
    if let Some(process) = &run.process() {
        gauge(
            enc,
            "pulse_pipeline_process_up",
            "1 while the pipeline's driver process runs.",
            if process.up { 1.0 } else { 0.0 },
        )?;
    }
    if let Some(server) = &run.server() {
        if let Some(up) = server.up {
            gauge(
                enc,
                "pulse_server_up",
                "1 while the inference server's health check passes.",
                // A front end that answers with its engine dead is not up.
                if up && run.engine_dead().is_none() {
                    1.0
                } else {
                    0.0
                },
            )?;
        }
    }
    let server_log = run.logs().iter().any(|l| l.server);
    if run.server().is_some() || server_log {
        let figures = run.server_figures();
        let gauges = [
            (
                "pulse_server_running_requests",
                "Requests the inference server is running, from its metrics, else its log.",
                figures.running,
            ),
            (
                "pulse_server_queued_requests",
                "Requests waiting in the inference server's queue, from its metrics, else its log.",
                figures.queued,
            ),
            (
                "pulse_server_generation_tokens_per_second",
                "Tokens the inference server generates per second, from its metrics, else its log.",
                figures.generation_tokens_per_second,
            ),
            (
                "pulse_server_kv_cache_usage_ratio",
                "KV cache in use on the inference server (0-1), from its metrics, else its log.",
                figures.kv_cache_usage,
            ),
            (
                "pulse_server_kv_cache_usage_max_ratio",
                "KV cache in use on the inference server's fullest rank (0-1): one full rank stalls its requests.",
                figures.kv_cache_usage_max,
            ),
            (
                "pulse_server_last_report_timestamp_seconds",
                "When the inference server last reported figures (the log line's own time, else a scrape).",
                figures.last_report_at,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                gauge(enc, name, help, v)?;
            }
        }
    }
    let from_metrics = run.server().as_ref().and_then(|s| s.preemptions_total);
    let from_log = run.server_log().preemptions().map(|(n, _)| n as f64);
    if let Some(total) = from_metrics.or(from_log) {
        family(
            enc,
            "pulse_server_preemptions",
            "Requests the inference server preempted (vLLM) or retracted (SGLang) for lack of KV cache: its own counter, else its log's count (vLLM V0 warns only at the 1st, 51st, 101st...: then an estimate, a lower bound).",
            MetricType::Counter,
            [([("", ""); 0], ConstCounter::new(total))],
        )?;
    }
    let sleep_known = run.server().as_ref().is_some_and(|s| s.asleep.is_some())
        || run.server_log().asleep.is_some();
    if sleep_known {
        gauge(
            enc,
            "pulse_server_asleep",
            "1 while the inference server's engine is put to sleep (vLLM's sleep mode: vllm:engine_sleep_state, else its log): asleep, not hung, idle or down.",
            if run.server_asleep() { 1.0 } else { 0.0 },
        )?;
    }
    if server_log {
        let pools = run.server_log().pools();
        if !run.server_down() && !pools.is_empty() {
            family(
                enc,
                "pulse_server_kv_cache_pool_usage_ratio",
                "KV cache in use per pool of a hybrid model (full attention, sliding window, mamba), from the server's log.",
                MetricType::Gauge,
                pools
                    .into_iter()
                    .map(|(pool, usage)| ([("pool", pool)], ConstGauge::new(usage))),
            )?;
        }
        family(
            enc,
            "pulse_server_log_request_lines",
            "Lines of the inference server's log about single requests (its access log, request logging), kept out of its tail and of the evidence.",
            MetricType::Counter,
            RequestLine::ALL.into_iter().map(|k| {
                (
                    [("kind", k.as_str())],
                    ConstCounter::new(run.server_log().request_line_count(k)),
                )
            }),
        )?;
        family(
            enc,
            "pulse_server_log_events",
            "Lines of the inference server's log an engineer looks for, by event.",
            MetricType::Counter,
            ServerEvent::ALL.into_iter().map(|e| {
                (
                    [("event", e.as_str())],
                    ConstCounter::new(run.server_log().event_count(e)),
                )
            }),
        )?;
    }
    Ok(())
}
