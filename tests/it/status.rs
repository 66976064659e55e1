//! `pipeline-pulse status` and the live status page.

use crate::common::*;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

/// Several partitions: B1 finished, B2 stalled for an hour with far fewer records than the log
/// claims, B3 not started.
fn troubled_run(dir: &std::path::Path) -> (std::path::PathBuf, String) {
    let log = dir.join("run.log");
    std::fs::write(
        &log,
        "Model: /shared/kimi-k2.5-int4\n\
         Processing: B1 (SHORT)\nB1: 100 prompts\n  100/100 (0 err) 2.0 req/s avg_comp=300tok ETA=0s\n\
         Processing: B2 (LONG)\nB2: 1000 prompts\n  400/1000 (3 err) 1.0 req/s avg_comp=900tok ETA=10m\n",
    )
    .unwrap();
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .append(true)
        .open(&log)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    let record = "{\"text\":\"ok\",\"meta_info\":{\"completion_tokens\":10,\"finish_reason\":{\"type\":\"stop\"}}}\n";
    for (name, records) in [("B1", 100), ("B2", 150)] {
        let folder = dir.join("prepared").join(name);
        std::fs::create_dir_all(&folder).unwrap();
        let file = folder.join("raw_responses.jsonl");
        std::fs::write(&file, record.repeat(records)).unwrap();
        // Written no later than the log: records arriving now would be evidence of work.
        std::fs::File::options()
            .append(true)
            .open(&file)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
    }
    let b3 = dir.join("prepared/B3");
    std::fs::create_dir_all(&b3).unwrap();
    std::fs::write(b3.join("prompts.jsonl"), "{}\n".repeat(500)).unwrap();
    (
        log,
        format!("{}/prepared/*/raw_responses.jsonl", path_str(dir)),
    )
}

/// A sidecar on the troubled run, once its Stalled alert fires.
fn troubled_sidecar(dir: &std::path::Path) -> Sidecar {
    let (log, outputs) = troubled_run(dir);
    let sidecar = Sidecar::run(&[
        "--log",
        path_str(&log),
        "--outputs",
        &outputs,
        "--gpu",
        "simulated",
        "--alert-interval",
        "100ms",
    ]);
    // Ready: the log, the outputs and the GPUs have all been read once.
    wait_for("readiness", || sidecar.get("/-/ready").status == 200);
    sidecar.wait_metrics("the stall firing", |m| {
        m.get("pulse_alert_firing", "alert=\"Stalled\",partition=\"B2\"") == Some(1.0)
    });
    sidecar
}

fn status(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN).arg("status").args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn terminal_view_from_the_files_shows_the_stall_and_the_disagreement() {
    let dir = temp_dir();
    let (log, outputs) = troubled_run(dir.path());
    let inputs = format!("{}/prepared/*/prompts.jsonl", path_str(dir.path()));
    let (code, out, err) = status(&[
        "--log",
        path_str(&log),
        "--outputs",
        &outputs,
        "--inputs",
        &inputs,
    ]);
    assert_eq!(code, Some(1), "stalled means exit 1: {out}{err}");
    assert!(out.contains("1 ALERT") || out.contains("ALERTS"), "{out}");
    assert!(out.contains("/shared/kimi-k2.5-int4"));
    assert!(
        out.contains("[████████████████████] 100%") && out.contains("100/100"),
        "{out}"
    );
    assert!(
        out.contains("▶ B2") && out.contains(" 40%") && out.contains("400/1000"),
        "{out}"
    );
    assert!(
        out.contains("outputs: 150 records") && out.contains("log − records = 250"),
        "{out}"
    );
    assert!(
        out.contains("⚠ the log and the output files disagree"),
        "{out}"
    );
    assert!(
        out.contains("FIRING  Stalled (B2): no progress for 1h00m"),
        "{out}"
    );
    assert!(out.contains("-/500"), "B3 planned from its prompts: {out}");
    // The columns after the bar: errors, req/s, tok/s, ETA, stalled-for. A one-shot read has
    // no rate window, so no tok/s; B2's logged ETA ran out an hour ago, so it is unknown. B1
    // is finished: it does nothing now, whatever its last line said.
    let columns = |row: &str| -> Vec<String> {
        let line = out
            .lines()
            .find(|l| l.trim_start_matches("▶").trim_start().starts_with(row))
            .unwrap_or_else(|| panic!("no row for {row}: {out}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        words[words.len() - 5..]
            .iter()
            .map(|w| w.to_string())
            .collect()
    };
    assert_eq!(columns("B1 "), ["0", "0.0", "0", "0s", "-"], "{out}");
    assert_eq!(columns("B2 "), ["3", "1.0", "-", "-", "1h00m"], "{out}");
    assert!(
        !out.contains('\x1b'),
        "no colour when stdout is not a terminal"
    );
}

#[test]
fn json_view_is_the_status_document() {
    let dir = temp_dir();
    let (log, outputs) = troubled_run(dir.path());
    let (code, out, _) = status(&["--log", path_str(&log), "--outputs", &outputs, "--json"]);
    assert_eq!(code, Some(1));
    let doc: serde_json::Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(doc["healthy"], false);
    assert_eq!(doc["model"], "/shared/kimi-k2.5-int4");
    let parts = doc["partitions"].as_array().unwrap();
    let b2 = parts.iter().find(|p| p["name"] == "B2").unwrap();
    assert_eq!(b2["stalled"], true);
    assert_eq!(b2["mismatch"], true);
    assert_eq!(b2["log_output_gap"], 250);
    assert_eq!(b2["outputs"]["records"], 150);
    assert_eq!(b2["completed"], 400);
    let b1 = parts.iter().find(|p| p["name"] == "B1").unwrap();
    assert_eq!(b1["progress_ratio"], 1.0);
    assert_eq!(b1["mismatch"], false);
    assert!(doc["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["alert"] == "Stalled" && a["firing"] == true));
    assert!(doc["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["alert"] == "LogOutputMismatch"));
}

#[test]
fn exit_codes() {
    let dir = temp_dir();
    let log = dir.path().join("fresh.log");
    std::fs::write(&log, "Processing: A\n  10/100 (0 err) 1.0 req/s\n").unwrap();
    let (code, out, _) = status(&["--log", path_str(&log)]);
    assert_eq!(code, Some(0), "a healthy run: {out}");
    assert!(out.contains("HEALTHY"));

    let (code, _, err) = status(&["--url", &format!("http://127.0.0.1:{}", free_port())]);
    assert_eq!(code, Some(2), "an unreachable sidecar is an error");
    assert!(err.contains("cannot reach the sidecar"), "{err}");

    let (code, _, err) = status(&["--log", "/nonexistent/run.log"]);
    assert_eq!(code, Some(2), "unreadable files are an error");
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn view_of_a_running_sidecar_and_watch() {
    let dir = temp_dir();
    let sidecar = troubled_sidecar(dir.path());
    let url = format!("http://{}", sidecar.addr);
    let (code, out, err) = status(&["--url", &url]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("FIRING  Stalled (B2)"), "{out}");
    assert!(out.contains("simulated") && out.contains("GPU"), "{out}");

    // --watch redraws in place until stopped.
    let mut watch = Command::new(BIN)
        .args(["status", "--watch", "--interval", "100ms", "--url", &url])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = watch.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while seen.windows(7).filter(|w| *w == b"\x1b[H\x1b[2J").count() < 3 {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "--watch ended by itself");
        seen.extend_from_slice(&buf[..n]);
    }
    watch.kill().unwrap();
    watch.wait().unwrap();
    assert!(String::from_utf8_lossy(&seen).contains("B2"));
}

#[test]
fn the_status_page_renders_in_a_real_browser() {
    let dir = temp_dir();
    let sidecar = troubled_sidecar(dir.path());
    let out = chromium(
        &["--dump-dom"],
        &format!("http://{}/", sidecar.addr),
        &dir.path().join("chromium-profile"),
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What the script drew from /status, not just the page's skeleton.
    assert!(
        dom.contains("data-partition=\"B1\"") && dom.contains("data-partition=\"B2\""),
        "{dom}"
    );
    assert!(dom.contains("400 / 1000"), "{dom}");
    assert!(
        dom.contains("⚠ log says 400"),
        "the disagreement is shown: {dom}"
    );
    assert!(dom.contains("FIRING Stalled (B2)"), "{dom}");
    assert!(dom.contains("1 ALERT") || dom.contains("ALERTS"), "{dom}");
    assert_eq!(
        dom.matches("<td>simulated</td>").count(),
        8,
        "eight GPU rows"
    );
    assert_eq!(dom.matches("class=\"bar gpu\"").count(), 8, "a bar per GPU");
    // The history chart is drawn from the sidecar's history, not from what this page happened
    // to see: a sidecar this young has a point (then a path) or none yet (then it says so).
    // tests/it/history.rs checks the charts point by point against an hour of history.
    let progress = dom
        .split("class=\"line\"")
        .nth(1)
        .and_then(|rest| rest.split(" d=\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .expect("the progress chart's path");
    assert!(
        progress.starts_with('M') || dom.contains("No history yet"),
        "progress path: {progress:?}"
    );
    assert!(dom.contains("href=\"/metrics\""));

    // Everything the served page loads comes from the sidecar itself.
    let page = sidecar.get("/").body;
    for opener in ["src=\"", "href=\"", "url(", "@import"] {
        for reference in page.split(opener).skip(1) {
            let target = reference.trim_start_matches(['"', '\'', ' ']);
            assert!(
                !(target.starts_with("http") || target.starts_with("//")),
                "an external asset: {opener}{}",
                &target[..target.len().min(60)]
            );
        }
    }
}
