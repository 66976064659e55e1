//! The inference server as it reports itself: its log (SGLang and vLLM, every variant in
//! `tests/testdata/server/`, each beside its `.golden` exposition), followed live, and its
//! metrics in every naming and rank layout, served by a real HTTP server; and the stall triage
//! they feed, end to end.

use crate::common::*;
use std::path::Path;
use std::time::Duration;

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/testdata/server");

/// The figures a golden file keeps: the server's and the log's, not the clock's.
fn golden_lines(m: &Metrics) -> String {
    m.0.lines()
        .filter(|l| {
            (l.starts_with("pulse_server_") && !l.starts_with("pulse_server_last_report"))
                || l.starts_with("pulse_log_lines_")
                || l.starts_with("pulse_log_format_info{")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn every_server_log_variant_reads_as_its_golden_exposition() {
    let samples = Path::new(SAMPLES);
    let checked = check_goldens(samples, |name| {
        golden_lines(&run_once(samples, &["--server-log", name]))
    });
    assert!(checked >= 5, "only {checked} samples");
}

/// Each release's own exposition (`tests/testdata/server/*.prom`, rendered by the release's
/// collector through prometheus_client, as its `/metrics` serves them), beside the figures it
/// must give (`*.prom.golden`).
#[test]
fn every_release_exposition_reads_as_its_golden_figures() {
    let samples = Path::new(SAMPLES);
    let dir = temp_dir();
    let (_server, port) = static_http_server(dir.path());
    let url = format!("http://127.0.0.1:{port}/metrics");
    let checked = check_goldens_of(samples, "prom", |name| {
        std::fs::copy(samples.join(name), dir.path().join("metrics")).unwrap();
        let m = run_once(dir.path(), &["--server-metrics-url", &url]);
        m.0.lines()
            .filter(|l| {
                l.starts_with("pulse_server_") && !l.starts_with("pulse_server_last_report")
            })
            .map(|l| format!("{l}\n"))
            .collect()
    });
    assert!(checked >= 6, "only {checked} expositions");
}

const DECODE: &str = "[2026-08-28 22:30:08 TP0] Decode batch, #running-req: 233, #token: 370959, token usage: 0.82, cuda graph: True, gen throughput (token/s): 4594.01, #queue-req: 317, \n";

/// [`DECODE`] printed `seconds_ago`: the sidecar reads the time from the line.
fn decode_at(seconds_ago: u64) -> String {
    DECODE.replace("2026-08-28 22:30:08", &local_stamp(seconds_ago))
}

#[test]
fn a_server_log_is_followed_live_through_partial_writes_and_a_rotation() {
    let dir = temp_dir();
    let log = dir.path().join("sglang.log");
    let sidecar = Sidecar::run(&["--server-log", path_str(&log)]);
    // Half a decode line is not a report.
    let (head, tail) = DECODE.split_at(60);
    append(&log, head);
    sidecar.wait_metrics("the server log read", |m| {
        m.get(
            "pulse_log_lines_total",
            &format!("path=\"{}\"", path_str(&log)),
        ) == Some(0.0)
            && m.get("pulse_collector_up", "collector=\"log\"") == Some(1.0)
    });
    assert_eq!(
        sidecar.metrics().get("pulse_server_running_requests", ""),
        None
    );
    append(&log, tail);
    let m = sidecar.wait_metrics("the decode line", |m| {
        m.get("pulse_server_running_requests", "") == Some(233.0)
    });
    assert_eq!(
        m.get("pulse_server_generation_tokens_per_second", ""),
        Some(4594.01)
    );
    assert_eq!(m.get("pulse_server_kv_cache_usage_ratio", ""), Some(0.82));
    assert!(m
        .get("pulse_server_last_report_timestamp_seconds", "")
        .is_some());
    // Rotated by rename; the next lines go to the new file.
    std::fs::rename(&log, dir.path().join("sglang.log.1")).unwrap();
    append(
        &log,
        "[2026-08-28 22:31:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3\n\
         [2026-08-28 22:31:02 TP0] Decode batch, #running-req: 190, #token: 300000, token usage: 0.70, gen throughput (token/s): 3900.00, #queue-req: 350, \n",
    );
    let m = sidecar.wait_metrics("the rotated log's report", |m| {
        m.get("pulse_server_running_requests", "") == Some(190.0)
    });
    assert_eq!(
        m.get("pulse_server_log_events_total", "event=\"retract\""),
        Some(1.0)
    );
    assert_eq!(m.get("pulse_server_queued_requests", ""), Some(350.0));
    let status = get_json(sidecar.addr, "/status").unwrap();
    let tail = status["server_log_tail"].as_array().unwrap();
    assert_eq!(tail.len(), 3, "{tail:?}");
    assert!(
        status["log_tail"].as_array().unwrap().is_empty(),
        "the progress tail stays clean"
    );
    assert_eq!(status["server"]["kv_cache_usage"], 0.7);
}

#[test]
fn every_metrics_layout_gives_the_server_figures() {
    let dir = temp_dir();
    let (_server, port) = static_http_server(dir.path());
    let metrics = dir.path().join("metrics");
    let url = format!("http://127.0.0.1:{port}/metrics");
    let sidecar = Sidecar::run(&[
        "--server-metrics-url",
        &url,
        "--probe-interval",
        "100ms",
        "--gpu",
        "off",
    ]);
    let cases: Vec<(&str, String, f64, f64, f64)> = vec![
        (
            // --enable-metrics-for-all-schedulers: every TP rank reports the same batch.
            "SGLang, tp_rank 0-7",
            (0..8)
                .map(|r| {
                    format!(
                        "sglang:num_running_reqs{{model_name=\"kimi\",tp_rank=\"{r}\"}} 150\n\
                         sglang:num_queue_reqs{{model_name=\"kimi\",tp_rank=\"{r}\"}} 30\n\
                         sglang:token_usage{{model_name=\"kimi\",tp_rank=\"{r}\"}} 0.5\n"
                    )
                })
                .collect(),
            150.0,
            30.0,
            0.5,
        ),
        (
            "SGLang, dp_rank 0-1",
            "sglang:num_running_reqs{dp_rank=\"0\",tp_rank=\"0\"} 75\n\
             sglang:num_running_reqs{dp_rank=\"1\",tp_rank=\"0\"} 75\n\
             sglang:num_queue_reqs{dp_rank=\"0\",tp_rank=\"0\"} 5\n\
             sglang:num_queue_reqs{dp_rank=\"1\",tp_rank=\"0\"} 6\n\
             sglang:token_usage{dp_rank=\"0\",tp_rank=\"0\"} 0.25\n"
                .into(),
            150.0,
            11.0,
            0.25,
        ),
        (
            "SGLang 0.3 names",
            "sglang:num_requests_running{name=\"kimi\"} 42\n\
             sglang:num_requests_waiting{name=\"kimi\"} 7\n\
             sglang:token_usage{name=\"kimi\"} 0.3\n"
                .into(),
            42.0,
            7.0,
            0.3,
        ),
        (
            "vLLM V1, two engines",
            "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 40\n\
             vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 35\n\
             vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 1\n\
             vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 2\n\
             vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.6\n"
                .into(),
            75.0,
            3.0,
            0.6,
        ),
        (
            "vLLM before the KV rename",
            "vllm:num_requests_running{model_name=\"m\"} 9\n\
             vllm:num_requests_waiting{model_name=\"m\"} 0\n\
             vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.12\n"
                .into(),
            9.0,
            0.0,
            0.12,
        ),
    ];
    for (name, text, running, queued, kv) in cases {
        std::fs::write(&metrics, text).unwrap();
        let m = sidecar.wait_metrics(name, |m| {
            m.get("pulse_server_running_requests", "") == Some(running)
                && m.get("pulse_server_queued_requests", "") == Some(queued)
        });
        assert_eq!(
            m.get("pulse_server_kv_cache_usage_ratio", ""),
            Some(kv),
            "{name}"
        );
    }
}

/// A progress log that reported 100/1000 ten minutes ago and nothing since.
fn silent_driver_log(dir: &Path) -> std::path::PathBuf {
    let log = dir.join("run.log");
    std::fs::write(
        &log,
        "Processing: B1 (SHORT)\nB1: 1000 prompts\nRunning 1000 requests (concurrency=150, max_tokens=10240)...\n  100/1000 (0 err) 1.0 req/s avg_comp=200tok ETA=15m\n",
    )
    .unwrap();
    set_mtime(&log, 600);
    log
}

/// A sidecar on a driver log and a server log, emailing into `.eml` files, and the first email
/// it sends.
fn first_email(dir: &Path, log: &Path, server_log: &Path, extra: &[&str]) -> (Sidecar, String) {
    let mail = dir.join("mail");
    let smtp = format!("file://{}", path_str(&mail));
    let mut args = vec![
        "--log",
        path_str(log),
        "--server-log",
        path_str(server_log),
        "--smtp",
        &smtp,
        "--email-to",
        "oncall@example.com",
        "--stall-after",
        "1s",
        "--alert-interval",
        "100ms",
    ];
    args.extend_from_slice(extra);
    let sidecar = Sidecar::run(&args);
    let mut found = Vec::new();
    wait_for("the first email", || {
        found = emails(&mail);
        !found.is_empty()
    });
    (sidecar, found.swap_remove(0))
}

fn emails(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "eml"))
                .map(|e| std::fs::read_to_string(e.path()).unwrap())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_driver_that_stops_while_the_server_decodes_is_server_busy_nothing_written() {
    let dir = temp_dir();
    let log = silent_driver_log(dir.path());
    let server_log = dir.path().join("sglang.log");
    std::fs::write(&server_log, decode_at(0).repeat(3)).unwrap();
    let (_sidecar, email) = first_email(dir.path(), &log, &server_log, &[]);
    assert!(email.contains("FIRING Stalled"), "{email}");
    assert!(email.contains("server busy, nothing written"), "{email}");
    assert!(email.contains("lines of the inference server"), "{email}");
    assert!(!email.contains("ServerHung"), "{email}");
}

#[test]
fn a_server_that_stops_decoding_with_requests_running_is_server_hung() {
    let dir = temp_dir();
    let log = silent_driver_log(dir.path());
    let server_log = dir.path().join("sglang.log");
    // Its last decode line is as old as the driver's last progress line.
    std::fs::write(&server_log, decode_at(600).repeat(3)).unwrap();
    set_mtime(&server_log, 600);
    let config = dir.path().join("pulse.toml");
    std::fs::write(&config, "[rules.ServerHung]\nthreshold = \"1s\"\n").unwrap();
    let (sidecar, email) = first_email(
        dir.path(),
        &log,
        &server_log,
        &["--config", path_str(&config)],
    );
    assert!(email.contains("FIRING ServerHung"), "{email}");
    assert!(
        email.contains("233 requests running, no tokens generated"),
        "{email}"
    );
    // ServerHung explains the stall: Stalled is held back while it fires.
    let m = sidecar.metrics();
    assert_eq!(
        m.get("pulse_alert_firing", "alert=\"ServerHung\",partition=\"\""),
        Some(1.0)
    );
    assert!(!email.contains("FIRING Stalled"), "{email}");
}

/// A health ask with no answer within `server_health_timeout` is not up, though the port
/// accepts connections: the kernel completes the handshake for a process that is stopped or
/// wedged, and both engines bound their own handlers (SGLang's generating `/health` answers
/// 503 after 20 s), so no answer in time means the HTTP process is hung. A slow answer that
/// comes within the timeout (SGLang's `/health` under load) is up; a port that refuses is
/// down.
#[test]
fn a_health_ask_with_no_answer_in_time_is_hung_and_a_slow_one_in_time_is_up() {
    let port = free_port();
    let python = require_tool("python3", "python3");
    let mut server = Killed(
        std::process::Command::new(python)
            .args([
                "-c",
                "import http.server, sys, time\n\
                 class H(http.server.BaseHTTPRequestHandler):\n\
                 \tdef do_GET(self):\n\
                 \t\ttime.sleep(3)\n\
                 \t\tself.send_response(200); self.end_headers()\n\
                 http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n",
                &port.to_string(),
            ])
            .spawn()
            .unwrap(),
    );
    wait_for("the slow server to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let url = format!("http://127.0.0.1:{port}/health");
    let watching = |timeout: &str| {
        Sidecar::run(&[
            "--server-health-url",
            &url,
            "--server-health-interval",
            "1s",
            "--server-health-timeout",
            timeout,
            "--probe-interval",
            "500ms",
            "--gpu",
            "off",
        ])
    };
    let (impatient, patient) = (watching("1s"), watching("6s"));
    impatient.wait_log("gives no answer within 1s, so its HTTP process is hung");
    impatient.wait_metrics("the hung server not up", |m| {
        m.get("pulse_server_up", "") == Some(0.0)
    });
    let status = get_json(impatient.addr, "/status").unwrap();
    let error = status["server"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("hung"), "{status}");
    let m = patient.wait_metrics("several answers", |m| {
        m.get("pulse_collector_runs_total", "collector=\"server\"")
            .is_some_and(|n| n >= 8.0)
    });
    assert_eq!(m.get("pulse_server_up", ""), Some(1.0), "slow, but in time");
    // Gone: its port refuses, and it is down at the next round.
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    patient.wait_metrics("the server down", |m| {
        m.get("pulse_server_up", "") == Some(0.0)
    });
}

/// A server whose metrics say it is SGLang is judged as SGLang though its URLs were
/// configured by hand, not discovered: its generating `/health`, which waits for a token (up
/// to 20 s under load), is asked on SGLang's bounds (every 60 s, 25 s to answer), not the 2 s
/// `probe_timeout`, so a slow answer is not read as a hung server. The ask runs on a task of
/// its own: the metrics are read meanwhile.
#[test]
fn a_configured_server_whose_metrics_say_sglang_has_its_health_asked_as_sglangs() {
    let port = free_port();
    let python = require_tool("python3", "python3");
    let _server = Killed(
        std::process::Command::new(python)
            .args([
                "-c",
                "import http.server, sys, time\n\
                 start = time.time()\n\
                 class H(http.server.BaseHTTPRequestHandler):\n\
                 \tdef do_GET(self):\n\
                 \t\tif self.path == '/health':\n\
                 \t\t\ttime.sleep(5)\n\
                 \t\t\tbody = b''\n\
                 \t\telse:\n\
                 \t\t\ttokens = int((time.time() - start) * 1000)\n\
                 \t\t\tbody = b'sglang:num_running_reqs 12\\nsglang:num_queue_reqs 3\\nsglang:token_usage 0.4\\nsglang:generation_tokens_total %d\\n' % tokens\n\
                 \t\tself.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()\n\
                 \t\tself.wfile.write(body)\n\
                 \tdef log_message(self, *a):\n\
                 \t\tpass\n\
                 http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n",
                &port.to_string(),
            ])
            .spawn()
            .unwrap(),
    );
    wait_for("the stand-in to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let sidecar = Sidecar::run(&[
        "--server-health-url",
        &format!("http://127.0.0.1:{port}/health"),
        "--server-metrics-url",
        &format!("http://127.0.0.1:{port}/metrics"),
        "--probe-interval",
        "500ms",
        "--gpu",
        "off",
    ]);
    let told = sidecar.wait_log("the server's metrics say it is SGLang");
    assert!(told.contains("every 60s within 25s"), "{told}");
    // Its health answers in 5 s: it passes, and the server is up throughout.
    let status = poll("the health ask to pass", Duration::from_secs(15), || {
        let status = get_json(sidecar.addr, "/status").unwrap();
        let server = &status["server"];
        assert_ne!(server["up"], false, "{status}");
        if server["starting"] == false && server["up"] == true {
            Ok(status)
        } else {
            Err(status.to_string())
        }
    });
    assert_eq!(
        status["server"]["error"],
        serde_json::Value::Null,
        "{status}"
    );
    let m = sidecar.metrics();
    assert_eq!(m.get("pulse_server_up", ""), Some(1.0), "{}", m.0);
    assert_eq!(m.get("pulse_server_running_requests", ""), Some(12.0));
}
