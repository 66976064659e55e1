//! Logs in envelopes (JSON log objects, CRI and Docker json-file container logs, in
//! `tests/testdata/envelopes/`, each beside its `.golden` exposition): the sidecar reads the
//! text inside as it reads a plain log, and the envelope's time as the line's.

use crate::common::*;
use std::path::Path;

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/testdata/envelopes");

/// The figures a golden keeps: the partitions', the server's and the log's.
fn golden_lines(m: &Metrics) -> String {
    m.0.lines()
        .filter(|l| {
            l.starts_with("pulse_partition_requests_")
                || l.starts_with("pulse_partition_errors_total")
                || (l.starts_with("pulse_server_") && !l.starts_with("pulse_server_last_report"))
                || l.starts_with("pulse_log_lines_")
                || l.starts_with("pulse_log_format_info{")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn every_enveloped_log_reads_as_its_golden_exposition() {
    let samples = Path::new(SAMPLES);
    let checked = check_goldens(samples, |name| {
        let flag = if name.starts_with("vllm-") {
            "--server-log"
        } else {
            "--log"
        };
        golden_lines(&run_once(samples, &[flag, name]))
    });
    assert!(checked >= 7, "only {checked} samples");
}

#[test]
fn an_envelope_that_cannot_be_read_changes_no_figure() {
    let dir = temp_dir();
    let log = dir.path().join("pod.log");
    std::fs::write(
        &log,
        "2026-12-04T15:00:00.1Z stdout F Processing: B1 (SHORT)\n\
         2026-12-04T15:00:00.2Z stdout F B1: 40 prompts\n\
         2026-12-04T15:00:01Z stdout F   10/40 (0 err) 2.0 req/s\n\
         2026-13-04T15:00:02Z stdout F   30/40 (0 err) 2.0 req/s\n",
    )
    .unwrap();
    let m = run_once(dir.path(), &["--log", "pod.log", "--log-envelope", "cri"]);
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "B1"),
        Some(10.0)
    );
    assert_eq!(
        m.get("pulse_log_lines_unparsed_total", "path=\"pod.log\""),
        Some(1.0)
    );
}
