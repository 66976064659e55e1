//! The Prometheus exposition: the model encoded at scrape time, with the names of the contract
//! in `docs/metrics.md`.
//!
//! A custom `Collector` rather than registered metric objects: the model is the one source of
//! truth, and a scrape reads it under a short lock. No file or NVML call happens here.

mod alerts;
mod gpu;
mod partitions;
pub mod process;
mod server;
mod slurm;
mod sources;
mod web;

use crate::collectors::Collectors;
use crate::lock::{Locked, Published};
use crate::model::{AlertView, Run};
use crate::sinks::metrics::process::ProcessStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::{Arc, Mutex};

/// `Content-Type` of the OpenMetrics text exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of the classic Prometheus text exposition.
pub const TEXT_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The two exposition formats we serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposition {
    OpenMetrics,
    Text,
}

impl Exposition {
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Exposition::Text => TEXT_CONTENT_TYPE,
        }
    }
}

/// Reads the model (and the clock and `/proc/self`) on every scrape.
#[derive(Debug)]
struct RunCollector {
    run: Arc<Mutex<Run>>,
    /// What the alert engine publishes.
    alerts: Published<AlertView>,
    revision: &'static str,
    web: Option<Arc<crate::sinks::web_config::Counters>>,
    /// The sidecar's own `process_*` and HTTP server families (`disable_exporter_metrics`).
    exporter: bool,
}

/// The registry holding our collector; encode it with [`encode`].
pub fn registry(run: Arc<Mutex<Run>>) -> Registry {
    registry_with_web(run, Published::default(), None, true)
}

/// [`registry`], with the web config's counters when one is served, and without the
/// exporter's own families unless `exporter`.
pub fn registry_with_web(
    run: Arc<Mutex<Run>>,
    alerts: Published<AlertView>,
    web: Option<Arc<crate::sinks::web_config::Counters>>,
    exporter: bool,
) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(RunCollector {
        run,
        alerts,
        revision: env!("PULSE_GIT_REVISION"),
        web,
        exporter,
    }));
    registry
}

/// Encodes the registry in the requested format.
pub fn encode(registry: &Registry, format: Exposition) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let result = match format {
        Exposition::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, registry),
        Exposition::Text => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, registry)
        }
    };
    // Writing into a String cannot fail; our collector only fails if it does.
    result.expect("encoding into a String");
    out
}

impl Collector for RunCollector {
    fn encode(&self, enc: DescriptorEncoder) -> fmt::Result {
        let now = crate::clock::now();
        let mut enc = Out {
            enc,
            on: Collectors::all(),
        };
        // Snapshots: the alert engine's as published, and a copy of the run taken under its
        // lock (the output files and the history are shared, not copied), so that no source
        // waits while the exposition is written.
        let alerts = self.alerts.get();
        let run = self.run.locked().clone();
        enc.on = run.collectors_on();
        partitions::encode(&run, now, &mut enc)?;
        gpu::encode(&run, &mut enc)?;
        server::encode(&run, &mut enc)?;
        slurm::encode(&run, &mut enc)?;
        sources::encode(&run, now, &mut enc)?;
        alerts::encode(&alerts, &mut enc)?;
        if let (Some(label), id) = (run.identity().clone(), run.run_id().clone()) {
            let id = id.map_or_else(|| crate::run_identity::named_id(&label.run), |(id, _)| id);
            let labels = [
                ("run", label.run.as_str()),
                ("run_id", id.as_str()),
                ("role", label.role.as_str()),
            ];
            family(
                &mut enc,
                "pulse_run_info",
                "The run this node belongs to and its part in it (docs/many-nodes.md); always 1. Join by instance: sum by (run) (X * on (instance) group_left (run) pulse_run_info).",
                MetricType::Gauge,
                [(labels, ConstGauge::new(1i64))],
            )?;
        }
        let version = env!("CARGO_PKG_VERSION");
        let labels = [
            ("version", version),
            ("revision", self.revision),
            ("build_date", env!("PULSE_BUILD_DATE")),
        ];
        family(
            &mut enc,
            "pulse_build_info",
            "The sidecar's version, the commit it was built from and the build date; always 1.",
            MetricType::Gauge,
            [(labels, ConstGauge::new(1i64))],
        )?;
        if !self.exporter {
            return Ok(());
        }
        if let Some(web) = &self.web {
            web::encode(web, &mut enc)?;
        }
        encode_process(&ProcessStats::read(), &mut enc)
    }
}

/// The encoder of one scrape, and the collectors whose families it writes: a family of a
/// collector switched off is left out here, whatever the model holds (a snapshot may hold
/// figures a collector read before it was switched off).
pub(super) struct Out<'a> {
    enc: DescriptorEncoder<'a>,
    on: Collectors,
}

impl Out<'_> {
    /// A family's descriptor, or `None` when its collector is off.
    pub(super) fn descriptor<'s>(
        &'s mut self,
        name: &'s str,
        help: &'s str,
        metric_type: MetricType,
    ) -> Result<Option<MetricEncoder<'s>>, fmt::Error> {
        // Every collector on (the default): nothing to look up on the scrape path.
        if self.on != Collectors::all() {
            let exposed = match metric_type {
                MetricType::Counter => format!("{name}_total"),
                MetricType::Info => format!("{name}_info"),
                _ => name.to_owned(),
            };
            if !self.on.exports(&exposed) {
                return Ok(None);
            }
        }
        self.enc
            .encode_descriptor(name, help, None, metric_type)
            .map(Some)
    }
}

/// One family of labelled samples. Families with no samples are left out.
pub(super) fn family<L, M, I>(
    enc: &mut Out,
    name: &str,
    help: &str,
    metric_type: MetricType,
    samples: I,
) -> fmt::Result
where
    L: EncodeLabelSet,
    M: EncodeMetric,
    I: IntoIterator<Item = (L, M)>,
{
    let mut samples = samples.into_iter().peekable();
    if samples.peek().is_none() {
        return Ok(());
    }
    let Some(mut metric) = enc.descriptor(name, help, metric_type)? else {
        return Ok(());
    };
    for (labels, value) in samples {
        value.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// An unlabelled gauge.
pub(super) fn gauge(enc: &mut Out, name: &str, help: &str, value: f64) -> fmt::Result {
    let Some(metric) = enc.descriptor(name, help, MetricType::Gauge)? else {
        return Ok(());
    };
    ConstGauge::new(value).encode(metric)
}

/// An info family: one sample of value 1 per label set, named `<name>_info`.
pub(super) fn info<L: EncodeLabelSet>(
    enc: &mut Out,
    name: &str,
    help: &str,
    label_sets: Vec<L>,
) -> fmt::Result {
    if label_sets.is_empty() {
        return Ok(());
    }
    let Some(mut metric) = enc.descriptor(name, help, MetricType::Info)? else {
        return Ok(());
    };
    for labels in &label_sets {
        metric.encode_info(labels)?;
    }
    Ok(())
}

fn encode_process(p: &ProcessStats, enc: &mut Out) -> fmt::Result {
    if let Some(cpu) = p.cpu_seconds {
        if let Some(metric) = enc.descriptor(
            "process_cpu_seconds",
            "User and system CPU time spent in seconds.",
            MetricType::Counter,
        )? {
            ConstCounter::new(cpu).encode(metric)?;
        }
    }
    let gauges = [
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            p.resident_memory_bytes,
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            p.virtual_memory_bytes,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            p.open_fds,
        ),
        (
            "process_max_fds",
            "Maximum number of open file descriptors.",
            p.max_fds,
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            p.start_time_seconds,
        ),
    ];
    for (name, help, value) in gauges {
        if let Some(v) = value {
            gauge(enc, name, help, v)?;
        }
    }
    Ok(())
}
