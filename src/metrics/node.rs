//! GPU, driver-process and inference-server families.

use super::{family, gauge, info};
use crate::gpu::GpuSample;
use crate::model::Run;
use crate::parse::{RequestLine, ServerEvent};
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::fmt;

type GpuGauge = fn(&GpuSample) -> Option<f64>;

/// Gauges with `gpu` and `uuid` labels.
const GPU_GAUGES: &[(&str, &str, GpuGauge)] = &[
    (
        "pulse_gpu_utilization_ratio",
        "Fraction of time a kernel ran on the GPU over the last sample period (0-1).",
        |g| g.utilization,
    ),
    (
        "pulse_gpu_memory_utilization_ratio",
        "Fraction of time GPU memory was read or written (0-1).",
        |g| g.memory_utilization,
    ),
    ("pulse_gpu_memory_used_bytes", "GPU memory in use.", |g| {
        g.memory_used_bytes.map(|b| b as f64)
    }),
    (
        "pulse_gpu_memory_total_bytes",
        "GPU memory installed.",
        |g| g.memory_total_bytes.map(|b| b as f64),
    ),
    (
        "pulse_gpu_temperature_celsius",
        "GPU die temperature.",
        |g| g.temperature_celsius,
    ),
    ("pulse_gpu_power_watts", "GPU power draw.", |g| {
        g.power_watts
    }),
    (
        "pulse_gpu_power_limit_watts",
        "GPU enforced power limit.",
        |g| g.power_limit_watts,
    ),
    ("pulse_gpu_sm_clock_hertz", "GPU SM clock.", |g| {
        g.sm_clock_hertz
    }),
];

pub(super) fn encode(run: &Run, enc: &mut DescriptorEncoder) -> fmt::Result {
    if let Some(reading) = &run.gpus {
        gauge(
            enc,
            "pulse_gpus",
            "GPUs visible.",
            reading.devices.len() as f64,
        )?;
        let driver = reading.driver_version.clone().unwrap_or_default();
        info(
            enc,
            "pulse_gpu",
            "What NVML says about each GPU.",
            reading
                .devices
                .iter()
                .map(|g| {
                    [
                        ("gpu", g.index.to_string()),
                        ("uuid", g.uuid.clone()),
                        ("name", g.name.clone()),
                        ("pci_bus_id", g.pci_bus_id.clone()),
                        ("driver_version", driver.clone()),
                    ]
                })
                .collect(),
        )?;
        let ids: Vec<(String, &str)> = reading
            .devices
            .iter()
            .map(|g| (g.index.to_string(), g.uuid.as_str()))
            .collect();
        gauge(
            enc,
            "pulse_gpu_last_sample_timestamp_seconds",
            "When the GPUs were last read: the time their exported figures are true.",
            reading.at,
        )?;
        family(
            enc,
            "pulse_gpu_up",
            "1 while the GPU can be read, 0 when NVML says it is lost or every query of it fails.",
            MetricType::Gauge,
            reading.devices.iter().zip(&ids).map(|(g, (index, uuid))| {
                (
                    [("gpu", index.as_str()), ("uuid", *uuid)],
                    ConstGauge::new(if g.failing { 0.0 } else { 1.0 }),
                )
            }),
        )?;
        // A reading past the sampler's deadline is not exported as if it were true now: the
        // gauges disappear, and pulse_gpu_last_sample_timestamp_seconds says when they held.
        let fresh = run.gpu_hung_since.is_none();
        for (name, help, value) in GPU_GAUGES {
            family(
                enc,
                name,
                help,
                MetricType::Gauge,
                reading
                    .devices
                    .iter()
                    .zip(&ids)
                    .filter(|(g, _)| fresh && !g.failing)
                    .filter_map(|(g, (index, uuid))| {
                        Some((
                            [("gpu", index.as_str()), ("uuid", *uuid)],
                            ConstGauge::new(value(g)?),
                        ))
                    }),
            )?;
        }
        family(
            enc,
            "pulse_gpu_xid_errors",
            "Critical XID errors NVML reported for the GPU since the sidecar started, by code (the documented critical codes; any other as xid=\"other\").",
            MetricType::Counter,
            ids.iter().flat_map(|(index, uuid)| {
                let mut codes: Vec<(&str, u64)> = run
                    .xid_errors
                    .iter()
                    .filter(|((u, _), _)| u == uuid)
                    .map(|((_, xid), n)| (xid.as_str(), *n))
                    .collect();
                // A GPU without errors still has its series, at 0, so rate() works from the start.
                if codes.is_empty() {
                    codes.push(("other", 0));
                }
                codes.into_iter().map(move |(xid, n)| {
                    (
                        [
                            ("gpu", index.clone()),
                            ("uuid", (*uuid).to_owned()),
                            ("xid", xid.to_owned()),
                        ],
                        ConstCounter::new(n),
                    )
                })
            }),
        )?;
        family(
            enc,
            "pulse_gpu_process_memory_used_bytes",
            "GPU memory used per process (with gpu_processes = true); role is server, driver or other when the server or driver is known.",
            MetricType::Gauge,
            reading
                .devices
                .iter()
                .zip(&ids)
                .flat_map(|(g, (index, uuid))| {
                    g.processes.iter().map(move |p| {
                        (
                            [
                                ("gpu", index.clone()),
                                ("uuid", (*uuid).to_owned()),
                                ("pid", p.pid.to_string()),
                                ("process", p.name.clone()),
                                ("role", p.role.clone().unwrap_or_default()),
                            ],
                            ConstGauge::new(p.used_bytes as f64),
                        )
                    })
                }),
        )?;
    }
    if let Some(process) = &run.process {
        gauge(
            enc,
            "pulse_pipeline_process_up",
            "1 while the pipeline's driver process runs.",
            if process.up { 1.0 } else { 0.0 },
        )?;
    }
    if let Some(server) = &run.server {
        if let Some(up) = server.up {
            gauge(
                enc,
                "pulse_server_up",
                "1 while the inference server's health check passes.",
                if up { 1.0 } else { 0.0 },
            )?;
        }
    }
    let server_log = run.logs.iter().any(|l| l.server);
    if run.server.is_some() || server_log {
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
    if let Some(total) = run.server.as_ref().and_then(|s| s.preemptions_total) {
        family(
            enc,
            "pulse_server_preemptions",
            "Requests the inference server preempted (vLLM) or retracted (SGLang) for lack of KV cache, by its own counter.",
            MetricType::Counter,
            [([("", ""); 0], ConstCounter::new(total))],
        )?;
    }
    if server_log {
        let pools = run.server_log.pools();
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
                    ConstCounter::new(run.server_log.request_line_count(k)),
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
                    ConstCounter::new(run.server_log.event_count(e)),
                )
            }),
        )?;
    }
    Ok(())
}
