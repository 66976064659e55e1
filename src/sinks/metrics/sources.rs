//! The sidecar's view of its own inputs: log line counters, tail events, collector health.

use super::family;
use super::Out;
use crate::model::{LogStats, Run};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::fmt;

type LogCounter = fn(&LogStats) -> u64;

/// Counters with a `path` label (`_total` is appended).
const LOG_COUNTERS: &[(&str, &str, LogCounter)] = &[
    ("pulse_log_lines", "Lines read from the log.", |l| l.lines),
    (
        "pulse_log_lines_matched",
        "Lines the log format recognised.",
        |l| l.matched,
    ),
    (
        "pulse_log_lines_unparsed",
        "Lines that looked like progress but could not be read exactly; they change no figure.",
        |l| l.unparsed,
    ),
    (
        "pulse_tail_rotations",
        "Times the log was replaced under its path (rename rotation, delete and recreate).",
        |l| l.rotations,
    ),
    (
        "pulse_tail_truncations",
        "Times the log was truncated under the read offset (copytruncate).",
        |l| l.truncations,
    ),
    (
        "pulse_tail_oversized_lines",
        "Lines dropped for exceeding max_line_bytes.",
        |l| l.oversized,
    ),
    (
        "pulse_tail_refused",
        "Times the log's path was found to be no regular file (a FIFO, a socket, a device): it is never opened.",
        |l| l.refused,
    ),
];

pub(super) fn encode(run: &Run, now: f64, enc: &mut Out) -> fmt::Result {
    for (name, help, value) in LOG_COUNTERS {
        family(
            enc,
            name,
            help,
            MetricType::Counter,
            run.logs()
                .iter()
                .map(|l| ([("path", l.path.as_str())], ConstCounter::new(value(l)))),
        )?;
    }
    family(
        enc,
        "pulse_log_format_info",
        "The format each log is read in, configured or detected (undetected: auto has not decided yet); always 1.",
        MetricType::Gauge,
        run.logs().iter().map(|l| {
            let format = l.format.map_or("undetected", |f| f.as_str());
            (
                [("path", l.path.as_str()), ("format", format)],
                ConstGauge::new(1i64),
            )
        }),
    )?;
    super::gauge(
        enc,
        "pulse_output_files_refused",
        "Output and input paths refused now for being no regular file (a FIFO, a socket, a device): never opened.",
        run.refused_files().len() as f64,
    )?;
    let files = &run.output_files();
    family(
        enc,
        "pulse_output_files",
        "Output and input files followed, by whether they hold a file descriptor now (open: written in the last minute, or being read; closed: watched by stat and reopened where they were when they grow).",
        MetricType::Gauge,
        [("open", files.open), ("closed", files.followed - files.open.min(files.followed))]
            .into_iter()
            .filter(|_| files.followed > 0)
            .map(|(state, n)| ([("state", state)], ConstGauge::new(n as i64))),
    )?;
    family(
        enc,
        "pulse_output_folders",
        "Folders of output and input files, by how their changes are seen (inotify: the kernel reports them; poll: looked at every poll, on NFS, FUSE and other mounts inotify cannot watch).",
        MetricType::Gauge,
        [("inotify", files.watched_folders), ("poll", files.polled_folders)]
            .into_iter()
            .filter(|_| files.followed > 0)
            .map(|(method, n)| ([("method", method)], ConstGauge::new(n as i64))),
    )?;
    family(
        enc,
        "pulse_fd_exhausted",
        "Calls that failed for want of file descriptors (EMFILE, ENFILE); said in the log at most once a minute.",
        MetricType::Counter,
        std::iter::once(([] as [(&str, &str); 0], ConstCounter::new(crate::fd_limit::exhausted_total()))),
    )?;
    family(
        enc,
        "pulse_collector_up",
        "1 where the source works (0 too while it is stuck in a read that does not return).",
        MetricType::Gauge,
        run.collectors().iter().map(|(c, s)| {
            let up = run.collector_up(*c, s, now);
            ([("collector", c.name())], ConstGauge::new(i64::from(up)))
        }),
    )?;
    family(
        enc,
        "pulse_collector_duration_seconds",
        "How long the source's latest collection took.",
        MetricType::Gauge,
        run.collectors().iter().map(|(c, s)| {
            (
                [("collector", c.name())],
                ConstGauge::new(s.duration_seconds),
            )
        }),
    )?;
    family(
        enc,
        "pulse_collector_runs",
        "Collections the source has ended since the sidecar started: wait on it for the next one.",
        MetricType::Counter,
        run.collectors()
            .iter()
            .map(|(c, s)| ([("collector", c.name())], ConstCounter::new(s.runs))),
    )
}
