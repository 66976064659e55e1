//! Real peers: `promtool` lints our exposition and a real Prometheus server scrapes us.

use crate::common::prometheus::Prometheus;
use crate::common::*;
use std::process::Command;
use std::time::Duration;

/// A log with every line kind, several partitions, a restart and noise.
fn rich_log(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let log = dir.path().join("run.log");
    std::fs::write(
        &log,
        "Loading tokenizer from /shared/kimi-k2.5-int4...\n\
         Model: /shared/kimi-k2.5-int4\n\
         Processing: B1_glaive (SHORT)\n\
         B1_glaive: 100 prompts\n\
         Running 100 requests (concurrency=150, max_tokens=10240)...\n\
         \x20 50/100 (0 err) 1.1 req/s avg_comp=217tok ETA=45s\n\
         \x20 100/100 (1 err) 1.0 req/s avg_comp=298tok ETA=0s\n\
         Processing: B2_\"quoted\"\\name (LONG)\n\
         \x20 40/500 (0 err) 0.5 req/s avg_comp=1800tok ETA=15m\n\
         Traceback (most recent call last):\n\
         \x20 10/500 (0 err) 0.5 req/s avg_comp=1800tok ETA=16m\n",
    )
    .unwrap();
    log
}

#[test]
fn promtool_finds_nothing_to_say_about_our_exposition() {
    let promtool = require_tool("promtool", "prometheus");
    let dir = temp_dir();
    let log = rich_log(&dir);
    let prepared = dir.path().join("prepared/B1_glaive");
    std::fs::create_dir_all(&prepared).unwrap();
    std::fs::write(
        prepared.join("raw_responses.jsonl"),
        "{\"text\":\"hi\",\"meta_info\":{\"completion_tokens\":3,\"finish_reason\":{\"type\":\"stop\"}}}\n\
         {\"text\":\"\",\"error\":\"timeout\"}\nnot json\n",
    )
    .unwrap();
    std::fs::write(prepared.join("prompts.jsonl"), "{}\n{}\n{}\n").unwrap();
    let outputs = format!("{}/prepared/*/raw_responses.jsonl", path_str(dir.path()));
    let inputs = format!("{}/prepared/*/prompts.jsonl", path_str(dir.path()));
    let out = Command::new(BIN)
        .args([
            "run",
            "--once",
            "--log",
            path_str(&log),
            "--log",
            "/nonexistent/other.log",
        ])
        .args([
            "--outputs",
            &outputs,
            "--inputs",
            &inputs,
            "--gpu",
            "simulated",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let exposition = String::from_utf8(out.stdout).unwrap();
    assert!(
        exposition
            .contains("pulse_pipeline_restarts_total{partition=\"B2_\\\"quoted\\\"\\\\name\"} 1"),
        "{exposition}"
    );
    for family in [
        "pulse_output_records_total",
        "pulse_output_finish_reason_total",
        "pulse_partition_log_output_gap",
        "pulse_run_requests_planned",
        "pulse_gpu_info",
        "pulse_gpu_utilization_ratio",
    ] {
        assert!(
            exposition.contains(family),
            "{family} missing from:\n{exposition}"
        );
    }
    let (ok, said) = promtool_check_metrics(&promtool, &exposition);
    assert!(
        ok && said.trim().is_empty(),
        "promtool said:\n{said}\nabout:\n{exposition}"
    );
}

/// A Prometheus that scrapes `targets` every second.
fn scraping(targets: &[std::net::SocketAddr]) -> Prometheus {
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    Prometheus::start(|_| {
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: pulse\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        )
    })
}

#[test]
fn a_thousand_slow_clients_do_not_shut_prometheus_out() {
    let sidecar = Sidecar::run(&[
        "--gpu",
        "off",
        "--max-connections",
        "64",
        "--header-read-timeout",
        "60s",
    ]);
    // Slowloris: each sends the start of a request head and then nothing, for as long as the
    // test runs.
    let _slow = slow_clients(sidecar.addr, 1000, true);
    let prometheus = scraping(&[sidecar.addr]);
    let up = prometheus.wait_value("up{job=\"pulse\"}", Duration::from_secs(30));
    assert_eq!(up, 1.0, "Prometheus could not scrape us");
    // Every scrape of the next several got through.
    let scrapes = "count_over_time(up{job=\"pulse\"}[1m])";
    wait_until("five scrapes", Duration::from_secs(30), || {
        prometheus.wait_value(scrapes, Duration::from_secs(30)) >= 5.0
    });
    assert_eq!(
        prometheus.wait_value(
            "min_over_time(up{job=\"pulse\"}[1m])",
            Duration::from_secs(5)
        ),
        1.0,
        "a scrape failed while the slow clients held their connections"
    );
}

#[test]
fn a_real_prometheus_scrapes_us() {
    let dir = temp_dir();
    let log = rich_log(&dir);
    let sidecar = Sidecar::run(&["--log", path_str(&log), "--gpu", "simulated"]);
    let prometheus = scraping(&[sidecar.addr]);
    let up = prometheus.wait_value("up{job=\"pulse\"}", Duration::from_secs(30));
    assert_eq!(up, 1.0, "Prometheus could not scrape us");
    for (query, expected) in [
        (
            "pulse_partition_requests_completed{partition=\"B1_glaive\"}",
            100.0,
        ),
        (
            "pulse_partition_info{partition=\"B1_glaive\",mode=\"SHORT\"}",
            1.0,
        ),
        ("count(pulse_gpu_info{name=\"simulated\"})", 8.0),
        ("sum(pulse_pipeline_restarts_total)", 1.0),
    ] {
        let value = prometheus.wait_value(query, Duration::from_secs(10));
        assert_eq!(value, expected, "{query}");
    }
}
