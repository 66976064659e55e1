//! A sidecar that cannot be left half-dead: a panic ends the process and a restart on the same
//! state directory continues exactly; any request head leaves the server serving; its own
//! logs are plain text off a terminal, or JSON for collectors.

use crate::common;
use crate::common::*;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

fn records(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"text\":\"r{i}\",\"meta_info\":{{\"completion_tokens\":10}}}}\n"))
        .collect()
}

#[test]
fn a_panic_ends_the_process_and_a_restart_continues_exactly() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    let part = dir.path().join("B1_glaive");
    std::fs::create_dir(&part).unwrap();
    let out = part.join("raw_responses.jsonl");
    std::fs::write(
        &log,
        "Processing: B1_glaive\n  100/1000 (0 err) 1.0 req/s\n",
    )
    .unwrap();
    std::fs::write(&out, records(100)).unwrap();
    let state = dir.path().join("state");
    let glob = format!("{}/*/raw_responses.jsonl", dir.path().display());
    let args = [
        "--log",
        path_str(&log),
        "--outputs",
        &glob,
        "--state-dir",
        path_str(&state),
        "--snapshot-interval",
        "100ms",
        "--gpu",
        "off",
    ];
    let mut first = Sidecar::run(&args);
    first.wait_metrics("the first reading", |m| {
        m.partition("pulse_partition_requests_completed", "B1_glaive") == Some(100.0)
            && m.partition("pulse_output_records_total", "B1_glaive") == Some(100.0)
    });
    // A snapshot that holds what was read.
    wait_for("a snapshot of the outputs", || {
        std::fs::read_to_string(state.join("outputs.json"))
            .is_ok_and(|s| s.contains("\"records\":100"))
    });
    assert_eq!(try_http(first.addr, "GET", "/-/debug/panic", ""), None);
    let status = wait_exit(&mut first.child, Duration::from_secs(10));
    assert_eq!(
        status.code(),
        Some(101),
        "a panic must end the process: {status}"
    );
    let said = first.log_until("panicked at");
    assert!(
        said.last().unwrap().contains("src/sinks/http/mod.rs"),
        "the panic is logged with its location: {said:?}"
    );

    append(&log, "  150/1000 (0 err) 1.0 req/s\n");
    append(&out, &records(50));
    let second = Sidecar::run(&args);
    let m = second.wait_metrics("the restart to read on", |m| {
        m.partition("pulse_partition_requests_completed", "B1_glaive") == Some(150.0)
            && m.partition("pulse_output_records_total", "B1_glaive") >= Some(150.0)
    });
    assert_eq!(
        m.partition("pulse_output_records_total", "B1_glaive"),
        Some(150.0),
        "records counted once each across the crash:\n{}",
        m.0
    );
    assert_eq!(
        m.partition("pulse_pipeline_restarts_total", "B1_glaive"),
        Some(0.0),
        "the sidecar's restart is not the pipeline's:\n{}",
        m.0
    );
}

/// Request heads as a scanner, a broken client or an attacker sends them.
fn request_head() -> impl Strategy<Value = Vec<u8>> {
    let method = prop::sample::select(vec!["GET", "HEAD", "POST", "get", "", "G\0T", "PRI"]);
    let path = prop_oneof![
        prop::sample::select(vec![
            "/",
            "/metrics",
            "/status",
            "/-/healthy",
            "/-/ready",
            "*",
            "//",
            "/%ff%00"
        ])
        .prop_map(str::to_owned),
        "[ -~]{0,300}",
    ];
    let version = prop::sample::select(vec![
        "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", "", "http/1.1",
    ]);
    let header = prop_oneof![
        prop::sample::select(vec![
            "Accept: application/openmetrics-text;version=1.0.0;q=0.9",
            "Accept: ;;;q=nan,*/*;q=-1",
            "Content-Length: 99999999999999999999",
            "Transfer-Encoding: chunked",
            "Host:",
            ": nothing",
            "X\u{7f}: y",
        ])
        .prop_map(str::to_owned),
        "[ -~]{0,100}",
        (0usize..20_000).prop_map(|n| format!("X-Long: {}", "a".repeat(n))),
    ];
    let ending = prop::sample::select(vec!["\r\n", "\n", "\r", ""]);
    (
        method,
        path,
        version,
        prop::collection::vec(header, 0..6),
        ending,
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(method, path, version, headers, ending, tail)| {
            let mut head = format!("{method} {path} {version}{ending}");
            for h in headers {
                head.push_str(&h);
                head.push_str(ending);
            }
            head.push_str(ending);
            let mut bytes = head.into_bytes();
            bytes.extend(tail);
            bytes
        })
}

#[test]
fn any_request_head_leaves_the_server_serving() {
    let sidecar = Sidecar::run(&["--gpu", "off", "--header-read-timeout", "300ms"]);
    let mut runner = TestRunner::new(proptest_config(150));
    let result = runner.run(&request_head(), |head| {
        let mut stream = TcpStream::connect(sidecar.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = stream.write_all(&head);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let healthy = try_http(sidecar.addr, "GET", "/-/healthy", "");
        prop_assert_eq!(
            healthy.map(|(code, _)| code),
            Some(200),
            "after {:?}",
            String::from_utf8_lossy(&head)
        );
        Ok(())
    });
    result.unwrap();
    let mut sidecar = sidecar;
    assert!(sidecar.child.try_wait().unwrap().is_none(), "still running");
}

fn run_with(env: &[(&str, &str)], args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .envs(env.iter().copied())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn json_logs_are_one_object_per_event_with_the_fields_as_keys() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    std::fs::write(&log, "Processing: B1\n  3/9 (0 err) 1.0 req/s\n").unwrap();
    let (code, stderr) = run_with(
        &[("RUST_LOG", "debug")],
        &[
            "run",
            "--once",
            "--log-output",
            "json",
            "--gpu",
            "off",
            "--log",
            path_str(&log),
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect();
    assert!(!events.is_empty(), "nothing logged");
    for event in &events {
        for key in ["timestamp", "level", "message", "target"] {
            assert!(event.get(key).is_some(), "no {key} in {event}");
        }
    }
    assert!(
        events
            .iter()
            .any(|e| e["message"].as_str().is_some_and(|m| m.contains("run.log"))),
        "{events:?}"
    );
    // The followed log's path is a key of its own too, for a collector to filter on.
    assert!(
        events.iter().any(|e| e["path"] == path_str(&log)),
        "no event with `path` {:?}: {events:?}",
        path_str(&log)
    );

    // A config error in JSON mode is an event too, and still exit 2.
    let (code, stderr) = run_with(
        &[("PULSE_LOG_OUTPUT", "json")],
        &["run", "--once", "--poll-interval", "0s"],
    );
    assert_eq!(code, Some(2));
    let event: serde_json::Value = serde_json::from_str(stderr.trim()).unwrap();
    assert_eq!(event["level"], "ERROR");
    assert!(
        event["message"]
            .as_str()
            .unwrap()
            .contains("`poll_interval`"),
        "{event}"
    );
}

#[test]
fn json_logs_of_an_alert_carry_the_alert_partition_and_channel_as_fields() {
    let dir = temp_dir();
    // Progress that stopped two minutes ago: Stalled fires at the first evaluation.
    let log = dir.path().join("run.log");
    std::fs::write(
        &log,
        "Processing: B1 (SHORT)\nB1: 1000 prompts\n  100/1000 (0 err) 1.0 req/s avg_comp=200tok ETA=15m\n",
    )
    .unwrap();
    set_mtime(&log, 120);
    let hook = common::receiver::Receiver::start(&[]);
    let config = dir.path().join("pulse.toml");
    std::fs::write(
        &config,
        format!(
            "stall_after = \"1s\"\nalert_interval = \"100ms\"\n[[webhooks]]\nurl = {:?}\nformat = \"alertmanager\"\n[[logs]]\npath = {:?}\n",
            hook.url("/hook"),
            path_str(&log)
        ),
    )
    .unwrap();
    let sidecar = Sidecar::run(&[
        "--log-output",
        "json",
        "--gpu",
        "off",
        "--config",
        path_str(&config),
    ]);
    let event = |line: String| -> serde_json::Value {
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    };

    let firing = event(sidecar.wait_log("FIRING Stalled"));
    assert_eq!(firing["level"], "WARN", "{firing}");
    assert_eq!(firing["alert"], "Stalled", "{firing}");
    assert_eq!(firing["partition"], "B1", "{firing}");

    // The receiver answers 200: the first attempt is sent.
    let sent = event(sidecar.wait_log("alert(s) to webhooks[0]"));
    assert!(
        sent["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("sent ")),
        "{sent}"
    );
    assert_eq!(sent["channel"], "webhooks[0]", "{sent}");
    assert_eq!(sent["alert"], "Stalled", "{sent}");
}

#[test]
fn text_logs_have_no_colour_codes_off_a_terminal() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    std::fs::write(&log, "Processing: B1\n").unwrap();
    let (code, stderr) = run_with(
        &[],
        &["run", "--once", "--gpu", "off", "--log", path_str(&log)],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("run.log"), "{stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "colour codes in a pipe: {stderr:?}"
    );
}
