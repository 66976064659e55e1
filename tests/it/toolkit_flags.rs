//! The flags every exporter-toolkit exporter takes, as operators type them: several
//! `--web.listen-address`, `--web.telemetry-path`, `--web.disable-exporter-metrics`, and
//! `--web.systemd-socket` with a socket passed the way systemd passes it (the real
//! `systemd-socket-activate`). Today's spellings stay as aliases.

use crate::common::*;
use std::process::Command;
use std::time::Duration;

fn log(dir: &std::path::Path) -> std::path::PathBuf {
    let log = dir.join("run.log");
    std::fs::write(
        &log,
        "Processing: B1 (SHORT)\nB1: 100 prompts\n  10/100 (0 err) 1.0 req/s avg_comp=300tok ETA=1m\n",
    )
    .unwrap();
    log
}

#[test]
fn the_toolkit_flags_serve_where_they_say_and_leave_out_what_they_say() {
    let dir = temp_dir();
    let log = log(dir.path());
    let (a, b) = (free_port(), free_port());
    let sidecar = Sidecar::start(&[
        "run",
        "--web.listen-address",
        &format!("127.0.0.1:{a}"),
        "--web.listen-address",
        &format!("127.0.0.1:{b}"),
        "--web.telemetry-path",
        "/pulse/metrics",
        "--web.disable-exporter-metrics",
        "--log",
        path_str(&log),
        "--gpu",
        "off",
    ]);
    for port in [a, b] {
        let addr = ([127, 0, 0, 1], port).into();
        let scrape = http_get(addr, "GET", "/pulse/metrics", None);
        assert_eq!(scrape.status, 200, "{port}");
        assert!(scrape
            .body
            .contains("pulse_partition_requests_completed{partition=\"B1\"} 10"));
        assert!(scrape.body.contains("pulse_build_info{"), "the build stays");
        assert!(
            !scrape.body.contains("process_") && !scrape.body.contains("pulse_http_"),
            "no exporter families: {}",
            scrape.body
        );
        // The metrics answer at their path only.
        assert_eq!(http_get(addr, "GET", "/metrics", None).status, 404);
        assert_eq!(http_get(addr, "GET", "/status", None).status, 200);
    }
    drop(sidecar);
    // Without the switch the process families are there, under today's spelling.
    let sidecar = Sidecar::start(&["run", "--listen", "127.0.0.1:0", "--log", path_str(&log)]);
    let scrape = sidecar.get("/metrics");
    assert!(
        scrape.body.contains("process_resident_memory_bytes"),
        "{}",
        scrape.body
    );
}

#[test]
fn a_bad_telemetry_path_is_refused_naming_its_key() {
    for bad in ["metrics", "/", "/status", "/api/x", "/-/healthy"] {
        let out = Command::new(env!("CARGO_BIN_EXE_pipeline-pulse"))
            .args(["run", "--once", "--web.telemetry-path", bad])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("telemetry_path"), "{bad}: {stderr}");
    }
    let dir = temp_dir();
    let config = dir.path().join("pulse.toml");
    std::fs::write(
        &config,
        "telemetry_path = \"/m\"\ndisable_exporter_metrics = true\nsystemd_socket = true\nlisten = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pipeline-pulse"))
        .arg("check-config")
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for line in [
        "telemetry_path = \"/m\"",
        "disable_exporter_metrics = true",
        "systemd_socket = true",
    ] {
        assert!(text.contains(line), "{line}: {text}");
    }
}

/// systemd's own socket activation: `systemd-socket-activate` holds the port, starts the
/// sidecar on the first connection and passes the socket as descriptor 3 with `LISTEN_FDS`
/// and `LISTEN_PID`; that first connection is answered.
#[test]
fn socket_activation_serves_on_the_socket_systemd_passes() {
    let activate = require_tool("systemd-socket-activate", "systemd");
    let dir = temp_dir();
    let log = log(dir.path());
    let port = free_port();
    let _held = Killed(
        Command::new(activate)
            .args(["-l", &format!("127.0.0.1:{port}")])
            .arg(env!("CARGO_BIN_EXE_pipeline-pulse"))
            .args(["run", "--web.systemd-socket", "--log", path_str(&log)])
            .args(["--gpu", "off"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr = ([127, 0, 0, 1], port).into();
    // The first connection starts it; its answer may come before the log's first read.
    let mut answer = None;
    wait_until(
        "the activated sidecar to answer",
        Duration::from_secs(30),
        || {
            answer = try_http(addr, "GET", "/metrics", "");
            answer.as_ref().is_some_and(|(_, body)| {
                body.contains("pulse_partition_requests_completed{partition=\"B1\"} 10")
            })
        },
    );
    assert_eq!(answer.unwrap().0, 200);
}

/// Without the sockets systemd passes, the switch is a start-up error that says what to do.
#[test]
fn the_systemd_socket_switch_without_systemd_says_so() {
    let out = Command::new(env!("CARGO_BIN_EXE_pipeline-pulse"))
        .args(["run", "--web.systemd-socket", "--gpu", "off"])
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("LISTEN_PID is not: start the sidecar from its .socket unit"),
        "{stderr}"
    );
}
