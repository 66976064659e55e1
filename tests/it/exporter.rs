//! The core exporter end to end: the built binary following real files, scraped over HTTP.
//! What a log's lines make of the exposition, where only the file and the polls matter, is
//! read by the sidecar in this process, stepped (`common::stepped`): each poll is one the test
//! makes, none is waited for.

use crate::common::stepped::InProcess;
use crate::common::*;
use std::time::Duration;

const SEED_HEAD: &str = "\
Loading tokenizer from /shared/kimi-k2.5-int4...
Vocab size: 163840
Model: /shared/kimi-k2.5-int4
============================================================
Processing: B1_glaive (SHORT)
============================================================
B1_glaive: 10000 prompts
Running 10000 requests (concurrency=150, max_tokens=10240)...
";

#[test]
fn log_written_line_by_line_is_followed_and_served() {
    let dir = temp_dir();
    let log = dir.path().join("logs/inference_all.log");
    // The log and its folder do not exist yet: the job has not started.
    let sidecar = Sidecar::run(&["--log", path_str(&log)]);
    let m = sidecar.metrics();
    assert_eq!(m.get("pulse_collector_up", "collector=\"log\""), Some(0.0));

    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    for line in SEED_HEAD.lines() {
        append(&log, &format!("{line}\n"));
    }
    append(
        &log,
        "  50/10000 (0 err) 1.1 req/s avg_comp=217tok ETA=2.4h\n",
    );
    sidecar.wait_metrics("the first progress line", |m| {
        m.partition("pulse_partition_requests_completed", "B1_glaive") == Some(50.0)
    });
    append(
        &log,
        "  100/10000 (2 err) 1.0 req/s avg_comp=298tok ETA=2.8h\n",
    );
    let m = sidecar.wait_metrics("the second progress line", |m| {
        m.partition("pulse_partition_requests_completed", "B1_glaive") == Some(100.0)
    });
    let b1 = |name| m.partition(name, "B1_glaive");
    assert_eq!(b1("pulse_partition_requests_planned"), Some(10000.0));
    assert_eq!(b1("pulse_partition_request_errors"), Some(2.0));
    assert_eq!(b1("pulse_partition_requests_per_second"), Some(1.0));
    assert_eq!(b1("pulse_partition_completion_tokens_avg"), Some(298.0));
    assert_eq!(b1("pulse_partition_logged_eta_seconds"), Some(2.8 * 3600.0));
    assert_eq!(b1("pulse_partition_progress_ratio"), Some(0.01));
    assert_eq!(b1("pulse_partition_active"), Some(1.0));
    let eta = b1("pulse_partition_eta_seconds").expect("an ETA");
    assert!(eta > 0.0 && eta.is_finite(), "ETA {eta}");
    assert!(m.has_line_starting(
        "pulse_partition_info{partition=\"B1_glaive\",mode=\"SHORT\",concurrency=\"150\",max_tokens=\"10240\"} 1"
    ));
    assert!(m.has_line_starting("pulse_pipeline_info{model=\"/shared/kimi-k2.5-int4\"} 1"));
    assert_eq!(m.get("pulse_collector_up", "collector=\"log\""), Some(1.0));
    let path_label = format!("path=\"{}\"", path_str(&log));
    assert_eq!(m.get("pulse_log_lines_total", &path_label), Some(10.0));
    assert_eq!(
        m.get("pulse_log_lines_matched_total", &path_label),
        Some(6.0)
    );

    // The next partition begins: the old one stays, inactive, with its last figures.
    append(
        &log,
        "Processing: B2_opencodeinstruct (LONG)\n  20/500 (0 err) 0.5 req/s\n",
    );
    let m = sidecar.wait_metrics("the partition switch", |m| {
        m.partition("pulse_partition_requests_completed", "B2_opencodeinstruct") == Some(20.0)
    });
    assert_eq!(
        m.partition("pulse_partition_active", "B1_glaive"),
        Some(0.0)
    );
    assert_eq!(
        m.partition("pulse_partition_active", "B2_opencodeinstruct"),
        Some(1.0)
    );
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "B1_glaive"),
        Some(100.0)
    );
    assert_eq!(
        m.partition("pulse_partition_stall_seconds", "B1_glaive"),
        None
    );
    assert!(
        m.has_line_starting("pulse_partition_info{partition=\"B2_opencodeinstruct\",mode=\"LONG\"")
    );
}

#[test]
fn every_configured_collector_is_listed_from_the_first_scrape() {
    let dir = temp_dir();
    let outputs = format!("{}/*/out.jsonl", path_str(dir.path()));
    // Port 9 (discard) on loopback: nothing answers, so the server probe reports it down.
    let sidecar = Sidecar::run(&[
        "--log",
        path_str(&dir.path().join("run.log")),
        "--outputs",
        &outputs,
        "--process-match",
        "no-such-pipeline-process",
        "--server-health-url",
        "http://127.0.0.1:9/health",
        "--gpu",
        "off",
    ]);
    // The scrape may come before any source has read once: the series must exist anyway,
    // or an alert on `pulse_collector_up == 0` would miss a collector that never starts.
    let m = sidecar.metrics();
    for collector in ["log", "outputs", "process", "server"] {
        let up = m.get("pulse_collector_up", &format!("collector=\"{collector}\""));
        assert!(
            matches!(up, Some(v) if v == 0.0 || v == 1.0),
            "{collector}: {up:?}"
        );
    }
    assert_eq!(m.get("pulse_collector_up", "collector=\"gpu\""), None);
}

#[test]
fn started_mid_run_the_first_scrape_shows_the_run() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    let mut text = SEED_HEAD.to_owned();
    for i in 1..=40 {
        text.push_str(&format!(
            "  {}/10000 (0 err) 1.0 req/s avg_comp=300tok ETA=2.5h\n",
            i * 50
        ));
    }
    std::fs::write(&log, text).unwrap();
    let sidecar = Sidecar::run(&["--log", path_str(&log)]);
    // Readiness means the backlog is read; the very first scrape after it has the run.
    wait_for("readiness", || sidecar.get("/-/ready").status == 200);
    let m = sidecar.metrics();
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "B1_glaive"),
        Some(2000.0)
    );
    assert_eq!(
        m.partition("pulse_pipeline_restarts_total", "B1_glaive"),
        Some(0.0)
    );
}

#[test]
fn a_line_written_in_two_halves_is_counted_once() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    std::fs::write(&log, "Processing: A\n").unwrap();
    let mut sidecar = InProcess::logs(dir.path(), &[&log]);
    let path_label = format!("path=\"{}\"", path_str(&log));
    sidecar.step_until("the header", |m| {
        m.get("pulse_log_lines_total", &path_label) == Some(1.0)
    });
    let polls = sidecar
        .metrics()
        .get("pulse_collector_runs_total", "collector=\"log\"")
        .expect("the polls counted");
    append(&log, "  250/1000 (3 e");
    // The pause the writer's buffer makes: several polls pass with half a line on disk.
    for _ in 0..3 {
        sidecar.step();
    }
    let m = sidecar.step_until("three polls with half a line", |m| {
        m.get("pulse_collector_runs_total", "collector=\"log\"") >= Some(polls + 3.0)
    });
    assert_eq!(
        m.get("pulse_log_lines_total", &path_label),
        Some(1.0),
        "half a line is not a line"
    );
    append(&log, "rr) 2.5 req/s avg_comp=100tok ETA=5m\n");
    let m = sidecar.step_until("the whole line", |m| {
        m.get("pulse_log_lines_total", &path_label) == Some(2.0)
    });
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "A"),
        Some(250.0)
    );
    assert_eq!(
        m.partition("pulse_partition_request_errors", "A"),
        Some(3.0)
    );
    assert_eq!(
        m.partition("pulse_partition_requests_per_second", "A"),
        Some(2.5)
    );
    assert_eq!(
        m.get("pulse_log_lines_matched_total", &path_label),
        Some(2.0)
    );
}

#[test]
fn tqdm_frames_separated_by_carriage_returns() {
    let dir = temp_dir();
    let log = dir.path().join("tqdm.log");
    let mut sidecar = InProcess::start(
        dir.path(),
        &format!("[[logs]]\npath = {:?}\nformat = \"tqdm\"\n", path_str(&log)),
    );
    append(
        &log,
        "gen:   0%|          | 0/200 [00:00<?, ?it/s]\rgen:  10%|#         | 20/200 [00:02<00:18, 10.00it/s]\rgen:  25%|##5       | 50/200 [00:05<00:15, 10.00it/s]",
    );
    append(
        &log,
        "\rgen:  30%|###       | 60/200 [00:06<00:14, 10.00it/s]\n",
    );
    let path_label = format!("path=\"{}\"", path_str(&log));
    let m = sidecar.step_until("four frames", |m| {
        m.get("pulse_log_lines_total", &path_label) == Some(4.0)
    });
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "gen"),
        Some(60.0)
    );
    assert_eq!(
        m.partition("pulse_partition_requests_planned", "gen"),
        Some(200.0)
    );
    assert_eq!(
        m.partition("pulse_partition_requests_per_second", "gen"),
        Some(10.0)
    );
    assert_eq!(
        m.partition("pulse_partition_logged_eta_seconds", "gen"),
        Some(14.0)
    );
}

#[test]
fn a_count_that_goes_backwards_is_a_restart() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    std::fs::write(
        &log,
        "Processing: A\n  400/1000 (0 err) 1.0 req/s\n  450/1000 (0 err) 1.0 req/s\n",
    )
    .unwrap();
    let mut sidecar = InProcess::logs(dir.path(), &[&log]);
    sidecar.step_until("the backlog", |m| {
        m.partition("pulse_partition_requests_completed", "A") == Some(450.0)
    });
    append(&log, "  50/1000 (0 err) 1.0 req/s\n");
    let m = sidecar.step_until("the restart", |m| {
        m.partition("pulse_pipeline_restarts_total", "A") == Some(1.0)
    });
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "A"),
        Some(50.0)
    );
    for line in m.0.lines().filter(|l| l.starts_with("pulse_partition_")) {
        let value: f64 = line.rsplit_once(' ').unwrap().1.parse().unwrap();
        assert!(value >= 0.0 && !value.is_nan(), "negative or NaN: {line}");
    }
}

#[test]
fn http_endpoints_negotiate_and_refuse_properly() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    std::fs::write(&log, "Processing: A\n  1/2 (0 err) 1.0 req/s\n").unwrap();
    let sidecar = Sidecar::run(&["--log", path_str(&log)]);
    // The log's families exist once it has been read.
    wait_for("readiness", || sidecar.get("/-/ready").status == 200);

    let text = http_get(sidecar.addr, "GET", "/metrics", None);
    assert_eq!(text.status, 200);
    assert_eq!(
        text.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(!text.body.contains("# EOF"));

    let prometheus_accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let om = http_get(sidecar.addr, "GET", "/metrics", Some(prometheus_accept));
    assert_eq!(om.status, 200);
    assert_eq!(
        om.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(
        om.body.ends_with("# EOF\n"),
        "OpenMetrics must end with # EOF"
    );
    assert!(om.body.contains("# TYPE pulse_pipeline_restarts counter"));

    let landing = sidecar.get("/");
    assert_eq!(landing.status, 200);
    assert!(landing.body.contains("href=\"/metrics\""));
    assert_eq!(sidecar.get("/-/healthy").status, 200);
    assert_eq!(sidecar.get("/nope").status, 404);
    let post = http_get(sidecar.addr, "POST", "/metrics", None);
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
    let head = http_get(sidecar.addr, "HEAD", "/metrics", None);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
}

#[test]
fn a_client_that_never_finishes_its_headers_is_cut_off() {
    use std::io::{Read, Write};
    let sidecar = Sidecar::run(&["--header-read-timeout", "300ms"]);
    let mut slow = std::net::TcpStream::connect(sidecar.addr).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // Others are served while the slow client dawdles.
    assert_eq!(sidecar.get("/-/healthy").status, 200);
    // Then the server gives up on it: a 408 or a plain close. The verdict is that the server
    // closed the connection, not how soon; the read's own bound sits between the 300 ms asked
    // and the 10 s default, so a server that ignored the flag is not the one that closes.
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = Vec::new();
    let read = slow.read_to_end(&mut answer);
    assert!(read.is_ok(), "the connection was not closed: {read:?}");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
}

#[test]
fn sigterm_shuts_down_gracefully() {
    let mut sidecar = Sidecar::run(&[]);
    assert_eq!(sidecar.get("/-/healthy").status, 200);
    let status = sidecar.terminate();
    assert!(status.success(), "exit status {status}");
}

#[test]
fn once_prints_the_exposition_and_exits() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    std::fs::write(
        &log,
        format!("{SEED_HEAD}  50/10000 (0 err) 1.1 req/s avg_comp=217tok ETA=2.4h\n"),
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["run", "--once", "--log", path_str(&log)])
        .output()
        .unwrap();
    assert!(out.status.success());
    let m = Metrics(String::from_utf8(out.stdout).unwrap());
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "B1_glaive"),
        Some(50.0)
    );
    assert_eq!(
        m.partition("pulse_partition_eta_seconds", "B1_glaive")
            .map(f64::round),
        Some(8640.0)
    );
}
