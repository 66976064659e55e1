//! The GPU families: NVML's (or the simulation's) readings, per GPU and per process.

use super::Out;
use super::{family, gauge, info};
use crate::model::GpuSample;
use crate::model::Run;
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

pub(super) fn encode(run: &Run, enc: &mut Out) -> fmt::Result {
    if let Some(reading) = &run.gpu().reading() {
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
        let fresh = run.gpu_hung_since().is_none();
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
                    .gpu().xid_errors()
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
            "GPU memory used per process (with gpu_processes = true); role is server, driver or other when the server or driver is known and the process is seen in the sidecar's PID namespace.",
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
    Ok(())
}
