//! The Prometheus exposition: the model encoded at scrape time with the DESIGN §5 names.
//!
//! A custom `Collector` rather than registered metric objects: the model is the one source of
//! truth, and a scrape reads it under a short lock. No file or NVML call happens here.

use crate::model::{Run, Seconds};
use crate::process_metrics::ProcessStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
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
    revision: &'static str,
}

/// The registry holding our collector; encode it with [`encode`].
pub fn registry(run: Arc<Mutex<Run>>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(RunCollector {
        run,
        revision: env!("PULSE_GIT_REVISION"),
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
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let now = crate::clock::now();
        {
            let run = self.run.lock().unwrap_or_else(|e| e.into_inner());
            encode_run(&run, now, &mut enc)?;
        }
        let version = env!("CARGO_PKG_VERSION");
        let labels = [("version", version), ("revision", self.revision)];
        family(
            &mut enc,
            "pulse_build_info",
            "The sidecar's version; always 1.",
            MetricType::Gauge,
            [(labels, ConstGauge::new(1i64))],
        )?;
        encode_process(&ProcessStats::read(), &mut enc)
    }
}

/// One family of labelled samples. Families with no samples are left out.
fn family<L, M, I>(
    enc: &mut DescriptorEncoder,
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
    let mut metric = enc.encode_descriptor(name, help, None, metric_type)?;
    for (labels, value) in samples {
        value.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// An unlabelled gauge.
fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> fmt::Result {
    let metric = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

/// An info family: one sample of value 1 per label set, named `<name>_info`.
fn info<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label_sets: Vec<L>,
) -> fmt::Result {
    if label_sets.is_empty() {
        return Ok(());
    }
    let mut metric = enc.encode_descriptor(name, help, None, MetricType::Info)?;
    for labels in &label_sets {
        metric.encode_info(labels)?;
    }
    Ok(())
}

fn encode_run(run: &Run, now: Seconds, enc: &mut DescriptorEncoder) -> fmt::Result {
    let parts: Vec<_> = run.partitions.iter().collect();
    // A gauge per partition, for the partitions where `value` is known.
    let per_partition =
        |enc: &mut DescriptorEncoder,
         name: &str,
         help: &str,
         value: &dyn Fn(&crate::model::Partition) -> Option<f64>| {
            family(
                enc,
                name,
                help,
                MetricType::Gauge,
                parts.iter().filter_map(|(n, p)| {
                    Some(([("partition", n.as_str())], ConstGauge::new(value(p)?)))
                }),
            )
        };
    per_partition(
        enc,
        "pulse_partition_requests_completed",
        "Completed requests as the pipeline last reported them.",
        &|p| Some(p.completed as f64),
    )?;
    per_partition(
        enc,
        "pulse_partition_requests_planned",
        "Planned requests of the partition.",
        &|p| p.planned.map(|v| v as f64),
    )?;
    per_partition(
        enc,
        "pulse_partition_request_errors",
        "Failed requests as the pipeline last reported them.",
        &|p| p.errors.map(|v| v as f64),
    )?;
    per_partition(
        enc,
        "pulse_partition_progress_ratio",
        "Completed over planned requests (0-1).",
        &|p| p.progress_ratio(),
    )?;
    per_partition(
        enc,
        "pulse_partition_requests_per_second",
        "Request rate as the pipeline reported it.",
        &|p| p.requests_per_second,
    )?;
    per_partition(
        enc,
        "pulse_partition_completion_tokens_avg",
        "Average completion tokens per request as reported.",
        &|p| p.avg_completion_tokens,
    )?;
    per_partition(
        enc,
        "pulse_partition_completion_tokens_per_second",
        "Completion tokens per second over the recent window.",
        &|p| p.completion_tokens_per_second(now),
    )?;
    per_partition(
        enc,
        "pulse_partition_eta_seconds",
        "Remaining time from the recent rate, else from the logged ETA.",
        &|p| p.eta_seconds(now),
    )?;
    per_partition(
        enc,
        "pulse_partition_logged_eta_seconds",
        "ETA as the pipeline printed it.",
        &|p| p.logged_eta_seconds,
    )?;
    per_partition(
        enc,
        "pulse_partition_last_progress_timestamp_seconds",
        "When the completed count last increased.",
        &|p| p.last_progress_at,
    )?;
    per_partition(
        enc,
        "pulse_partition_active",
        "1 for a partition being processed now.",
        &|p| Some(if p.active { 1.0 } else { 0.0 }),
    )?;
    per_partition(
        enc,
        "pulse_partition_stall_seconds",
        "Seconds since progress, for active partitions.",
        &|p| p.stall_seconds(now),
    )?;
    family(
        enc,
        "pulse_pipeline_restarts",
        "Times the pipeline began a partition again (count went backwards or partition re-announced).",
        MetricType::Counter,
        parts
            .iter()
            .map(|(n, p)| ([("partition", n.as_str())], ConstCounter::new(p.restarts))),
    )?;
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    info(
        enc,
        "pulse_partition",
        "What the log says about each partition.",
        parts
            .iter()
            .map(|(n, p)| {
                [
                    ("partition", n.to_string()),
                    ("mode", p.mode.clone().unwrap_or_default()),
                    ("concurrency", opt(p.concurrency)),
                    ("max_tokens", opt(p.max_tokens)),
                ]
            })
            .collect(),
    )?;
    info(
        enc,
        "pulse_pipeline",
        "What the log says about the run.",
        run.model_name
            .iter()
            .map(|m| [("model", m.as_str())])
            .collect(),
    )?;
    encode_logs(run, enc)?;
    let collectors: Vec<_> = run.collectors.iter().collect();
    family(
        enc,
        "pulse_collector_up",
        "1 where the source works.",
        MetricType::Gauge,
        collectors
            .iter()
            .map(|(c, s)| ([("collector", **c)], ConstGauge::new(i64::from(s.up)))),
    )?;
    family(
        enc,
        "pulse_collector_duration_seconds",
        "How long the source's latest collection took.",
        MetricType::Gauge,
        collectors
            .iter()
            .map(|(c, s)| ([("collector", **c)], ConstGauge::new(s.duration_seconds))),
    )
}

fn encode_logs(run: &Run, enc: &mut DescriptorEncoder) -> fmt::Result {
    let counter = |enc: &mut DescriptorEncoder,
                   name: &str,
                   help: &str,
                   value: &dyn Fn(&crate::model::LogStats) -> u64| {
        family(
            enc,
            name,
            help,
            MetricType::Counter,
            run.logs
                .iter()
                .map(|l| ([("path", l.path.as_str())], ConstCounter::new(value(l)))),
        )
    };
    counter(enc, "pulse_log_lines", "Lines read from the log.", &|l| {
        l.lines
    })?;
    counter(
        enc,
        "pulse_log_lines_matched",
        "Lines the log format recognised.",
        &|l| l.matched,
    )?;
    counter(
        enc,
        "pulse_tail_rotations",
        "Times the log was replaced under its path (rename rotation, delete and recreate).",
        &|l| l.rotations,
    )?;
    counter(
        enc,
        "pulse_tail_truncations",
        "Times the log shrank under the read offset (copytruncate).",
        &|l| l.truncations,
    )?;
    counter(
        enc,
        "pulse_tail_oversized_lines",
        "Lines dropped for exceeding max_line_bytes.",
        &|l| l.oversized,
    )
}

fn encode_process(p: &ProcessStats, enc: &mut DescriptorEncoder) -> fmt::Result {
    if let Some(cpu) = p.cpu_seconds {
        let metric = enc.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time spent in seconds.",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(cpu).encode(metric)?;
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
