//! Per-partition, pipeline and whole-run families: what the log and the output files say.

use super::Out;
use super::{family, info};
use crate::model::{OutputStats, PartitionView, Run, Seconds, TokenHistogram};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::fmt;

type Gauge = fn(&PartitionView<'_>, Seconds) -> Option<f64>;
type Counter = fn(&PartitionView<'_>) -> Option<u64>;

/// Gauges with a `partition` label: name, help, value (absent when unknown).
const GAUGES: &[(&str, &str, Gauge)] = &[
    ("pulse_partition_requests_completed", "Completed requests as the pipeline last reported them (else the output records).", |v, _| v.completed().map(|c| c as f64)),
    ("pulse_partition_requests_planned", "Planned requests, from the log or counted from the input files.", |v, _| v.planned().map(|c| c as f64)),
    ("pulse_partition_request_errors", "Failed requests as the pipeline last reported them.", |v, _| v.log?.errors.map(|e| e as f64)),
    ("pulse_partition_progress_ratio", "Completed over planned requests (0-1).", |v, _| {
        let planned = v.planned().filter(|p| *p > 0)? as f64;
        Some((v.completed()? as f64 / planned).min(1.0))
    }),
    ("pulse_partition_requests_per_second", "Request rate as the pipeline reported it, else the rate its records reach the disk; 0 once the partition is finished.", |v, now| v.requests_per_second(now)),
    ("pulse_partition_completion_tokens_avg", "Average completion tokens per request as reported.", |v, _| v.log?.avg_completion_tokens),
    ("pulse_partition_completion_tokens_per_second", "Completion tokens per second over the recent window (from output token counts when available, else from the log).", |v, now| v.completion_tokens_per_second(now)),
    ("pulse_partition_eta_seconds", "Remaining time from the recent rate, else from the logged ETA.", |v, now| v.log?.eta_seconds(now)),
    ("pulse_partition_logged_eta_seconds", "ETA as the pipeline printed it.", |v, _| v.log?.logged_eta_seconds),
    ("pulse_partition_last_progress_timestamp_seconds", "When the completed count last increased.", |v, _| v.log?.last_progress_at),
    ("pulse_partition_active", "1 for a partition being processed now.", |v, _| v.log.map(|p| if p.active { 1.0 } else { 0.0 })),
    ("pulse_partition_progress_gap_median_seconds", "Median seconds between the partition's recent progress reports (the header to the first report counts as one gap); the Stalled rule waits at least 5 times this.", |v, _| v.log?.median_progress_gap()),
    ("pulse_partition_log_output_gap", "The log's completed count minus what the output files say it should be: their distinct records, or the records of the driver's current pass when it started over or resumed.", |v, _| v.log_output_gap().map(|g| g as f64)),
    ("pulse_output_unique_records", "Distinct records in the output files: the records less those repeating the id of an earlier one of the partition.", |v, _| v.distinct().map(|d| d as f64)),
    ("pulse_output_unique_records_estimated", "1 when the node's identity_cap was reached and records were counted unchecked: the unique count is then an upper bound.", |v, _| v.outputs.as_ref().map(|o| if o.unchecked > 0 { 1.0 } else { 0.0 })),
    ("pulse_output_unique_records_error", "The most the unique count can be too high: records checked against an incomplete set of ids.", |v, _| v.outputs.as_ref().map(|o| o.unchecked as f64)),
    ("pulse_output_bytes", "Bytes of complete records in the output files.", |v, _| v.outputs.as_ref().map(|o| o.bytes as f64)),
    ("pulse_output_last_write_timestamp_seconds", "When an output file of the partition was last modified.", |v, _| v.last_write),
];

/// Counters with a `partition` label (`_total` is appended).
const COUNTERS: &[(&str, &str, Counter)] = &[
    ("pulse_pipeline_restarts", "Times the pipeline began a partition again (count went backwards or partition re-announced).", |v| v.log.map(|p| p.restarts)),
    ("pulse_output_records", "Complete records (lines) in the output files.", |v| v.outputs.as_ref().map(|o| o.records)),
    ("pulse_output_invalid_records", "Records that are not a JSON object.", |v| v.outputs.as_ref().map(|o| o.invalid)),
    ("pulse_output_empty_responses", "Records whose response text is empty.", |v| v.outputs.as_ref().map(|o| o.empty)),
    ("pulse_output_error_records", "Records that carry an error.", |v| v.outputs.as_ref().map(|o| o.errors)),
    ("pulse_output_completion_tokens", "Sum of the completion tokens in the records.", |v| v.outputs.as_ref().map(|o| o.tokens)),
    ("pulse_output_oversized_records", "Records longer than max_record_bytes: counted, not inspected.", |v| v.outputs.as_ref().map(|o| o.oversized)),
    ("pulse_output_duplicate_records", "Records repeating the id of an earlier record of the partition (a re-run re-doing prompts).", |v| v.outputs.as_ref().map(|o| o.duplicates)),
];

pub(super) fn encode(run: &Run, now: Seconds, enc: &mut Out) -> fmt::Result {
    let views = run.views();
    for (name, help, value) in GAUGES {
        family(
            enc,
            name,
            help,
            MetricType::Gauge,
            views
                .iter()
                .filter_map(|v| Some(([("partition", v.name)], ConstGauge::new(value(v, now)?)))),
        )?;
    }
    for (name, help, value) in COUNTERS {
        family(
            enc,
            name,
            help,
            MetricType::Counter,
            views
                .iter()
                .filter_map(|v| Some(([("partition", v.name)], ConstCounter::new(value(v)?)))),
        )?;
    }
    per_key(
        enc,
        &views,
        (
            "pulse_output_finish_reason",
            "Records by finish reason.",
            "reason",
        ),
        |o| &o.finish_reasons,
    )?;
    per_key(
        enc,
        &views,
        (
            "pulse_output_missing_field_records",
            "Records lacking a required field, or holding it empty.",
            "field",
        ),
        |o| &o.missing,
    )?;
    histograms(enc, &views, now)?;
    family(
        enc,
        "pulse_partition_stall_seconds",
        "Seconds without evidence of work (a progress line, an output write, or before the first report the server generating), for active partitions.",
        MetricType::Gauge,
        views.iter().filter_map(|v| {
            let stall = run.stall_seconds(v, now)?;
            Some(([("partition", v.name)], ConstGauge::new(stall)))
        }),
    )?;
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    info(
        enc,
        "pulse_partition",
        "What the log says about each partition.",
        run.partitions()
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
        run.model_name()
            .iter()
            .map(|m| [("model", m.as_str())])
            .collect(),
    )?;
    if views.is_empty() {
        return Ok(());
    }
    let views = run.current_views();
    if let Some(at) = run.last_evidence_at(&views) {
        super::gauge(
            enc,
            "pulse_run_last_evidence_timestamp_seconds",
            "When anything last showed the run works: a progress line or header, an output write, the server generating.",
            at,
        )?;
    }
    if let Some(stall) = run.run_stall_seconds(&views, now) {
        super::gauge(
            enc,
            "pulse_run_stall_seconds",
            "Seconds without evidence of work anywhere in the run, while it is unfinished; with no partition active, a driver idle (or hung) between partitions.",
            stall,
        )?;
    }
    super::gauge(
        enc,
        "pulse_run_finished",
        "1 once the run is finished (every partition reached its plan, or the driver's log said the run is complete, or a library's driver ended right after it said its last stage was done), whether or not its driver still runs.",
        if run.finished(&views) { 1.0 } else { 0.0 },
    )?;
    let p = run.projection(now);
    super::gauge(
        enc,
        "pulse_run_requests_completed",
        "Completed requests over all partitions: distinct records where the outputs are followed.",
        p.completed as f64,
    )?;
    // No plan known (a library that keeps none) is no plan, not a plan of zero.
    if views.iter().any(|v| v.planned().is_some()) {
        super::gauge(
            enc,
            "pulse_run_requests_planned",
            "Planned requests over the partitions whose plan is known; absent while none is.",
            p.planned as f64,
        )?;
    }
    let optional = [
        ("pulse_run_eta_seconds", "Remaining time for the whole run at the current rate (to its plan, or a budget before it).", p.eta_seconds),
        ("pulse_run_eta_lower_seconds", "The ETA at the fastest of the recent rates (the band's lower bound).", p.eta_band.map(|b| b.0)),
        ("pulse_run_eta_upper_seconds", "The ETA at the slowest of the recent rates (the band's upper bound): RunLate compares it with the deadline.", p.eta_band.map(|b| b.1)),
        ("pulse_run_deadline_timestamp_seconds", "When the run must be done (the deadline key).", p.deadline),
        ("pulse_run_gpu_seconds_projected", "GPU time at the projected end, in GPU-seconds: so far, and the GPUs held now until the ETA.", p.gpu_hours_projected.map(|h| h * 3600.0)),
        ("pulse_run_cost", "The run's cost so far: GPU-hours times gpu_hour_price.", p.cost),
        ("pulse_run_cost_projected", "The run's cost at the projected end.", p.cost_projected),
    ];
    super::gauge(
        enc,
        "pulse_run_gpu_seconds",
        "GPU time the run has held while a partition was being processed, in GPU-seconds (3600 are a GPU-hour).",
        p.gpu_hours * 3600.0,
    )?;
    for (name, help, value) in optional {
        if let Some(value) = value {
            super::gauge(enc, name, help, value)?;
        }
    }
    Ok(())
}

/// How long after its last write a partition's token histogram is still exported: past the
/// 10-minute window the shipped quantile rules take its rate over, it says nothing new, and a
/// run of 50 partitions would otherwise keep 17 bucket series for each (docs/many-nodes.md).
const HISTOGRAM_AFTER_WRITE: Seconds = 15.0 * 60.0;

/// Completion tokens per record, per partition with inspected outputs written lately.
fn histograms(enc: &mut Out, views: &[PartitionView<'_>], now: Seconds) -> fmt::Result {
    let inspected: Vec<_> = views
        .iter()
        .filter(|v| {
            v.last_write
                .is_some_and(|w| now - w <= HISTOGRAM_AFTER_WRITE)
        })
        .filter_map(|v| Some((v.name, v.outputs.as_ref()?)))
        .filter(|(_, o)| o.token_histogram.count() > 0)
        .collect();
    if inspected.is_empty() {
        return Ok(());
    }
    let Some(mut metric) = enc.descriptor(
        "pulse_output_record_completion_tokens",
        "Completion tokens per record.",
        MetricType::Histogram,
    )?
    else {
        return Ok(());
    };
    for (name, outputs) in inspected {
        let h = &outputs.token_histogram;
        let buckets: Vec<(f64, u64)> = TokenHistogram::bounds()
            .zip(h.counts().iter().copied())
            .collect();
        metric
            .encode_family(&[("partition", name)])?
            .encode_histogram::<Vec<(String, String)>>(
                outputs.tokens as f64,
                h.count(),
                &buckets,
                None,
            )?;
    }
    Ok(())
}

/// A counter per partition and per key of one of its output counts (finish reasons, missing
/// fields): `(name, help, the key's label)`.
fn per_key(
    enc: &mut Out,
    views: &[PartitionView<'_>],
    (name, help, label): (&str, &str, &str),
    counts: fn(&OutputStats) -> &std::collections::BTreeMap<String, u64>,
) -> fmt::Result {
    family(
        enc,
        name,
        help,
        MetricType::Counter,
        views.iter().flat_map(|v| {
            v.outputs.iter().flat_map(move |o| {
                counts(o).iter().map(move |(k, n)| {
                    (
                        [("partition", v.name), (label, k.as_str())],
                        ConstCounter::new(*n),
                    )
                })
            })
        }),
    )
}
