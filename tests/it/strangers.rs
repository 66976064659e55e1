//! Beside a stranger: an inference server on the node that the run does not use (a
//! colleague's, the next job's warming up). In CI it is the bystander vLLM
//! (scripts/bystander-vllm.sh); elsewhere a stand-in vLLM started outside the run folder. What
//! the sidecar follows and reports must not change for it (docs/claims.md, "a guess changes
//! nothing"): a sidecar started before its driver follows the run, a driver that opens its log
//! for each write is followed all the same, and a finished folder's `report` counts its records.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The one unrelated server: the CI's bystander where it serves, else a stand-in started in a
/// folder of its own (kept while the test runs).
fn stranger(dir: &Path) -> Option<FakeServer> {
    let bystander = std::env::var("PULSE_BYSTANDER_DIR").unwrap_or("/tmp/pulse-bystander".into());
    let serving = std::fs::read_to_string(Path::new(&bystander).join("vllm.pid"))
        .ok()
        .and_then(|pid| pid.trim().parse::<u32>().ok())
        .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
    if serving {
        return None;
    }
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    Some(FakeServer::start(Engine::Vllm, &[], &elsewhere, true))
}

/// A driver that opens its log and its output file for each write and closes them again, so
/// no scan ever finds it holding either open: 400 requests of one partition, a progress line
/// every 20, then it waits.
const REOPENING: &str = r#"
import json, os, sys, time
root = sys.argv[1]
log = os.path.join(root, "logs", "gen.log")
out = os.path.join(root, "prepared", "B1_glaive", "raw_responses.jsonl")
os.makedirs(os.path.dirname(log), exist_ok=True)
os.makedirs(os.path.dirname(out), exist_ok=True)
def say(line):
    with open(log, "a") as f:
        f.write(line + "\n")
say("Model: /m")
say("Processing: B1_glaive (SHORT)")
say("B1_glaive: 400 prompts")
for i in range(1, 401):
    with open(out, "a") as f:
        f.write(json.dumps({"id": i, "text": "x", "meta_info": {"completion_tokens": 30}}) + "\n")
    if i % 20 == 0:
        say(f"  {i}/400 (0 err) 20.0 req/s avg_comp=30tok ETA=10s")
    time.sleep(0.01)
open(os.path.join(root, "done"), "w").close()
time.sleep(600)
"#;

fn run_info_role(m: &Metrics) -> Option<String> {
    m.0.lines()
        .find(|l| l.starts_with("pulse_run_info{"))
        .and_then(|l| l.split("role=\"").nth(1))
        .and_then(|r| r.split('"').next())
        .map(str::to_owned)
}

#[test]
fn a_sidecar_started_before_its_driver_follows_the_run_beside_a_stranger() {
    let dir = temp_dir();
    let _stranger = stranger(dir.path());
    let root: PathBuf = dir.path().join("synth_100k");
    std::fs::create_dir_all(&root).unwrap();
    let sidecar = watching(path_str(&root));
    let _driver = Killed(python(REOPENING, &[path_str(&root)]));
    wait_for("the driver to finish writing", || {
        root.join("done").exists()
    });
    let m = sidecar.wait_metrics("the run followed, its log and its outputs", |m| {
        m.partition("pulse_partition_requests_completed", "B1_glaive") == Some(400.0)
            && m.partition("pulse_output_records_total", "B1_glaive") == Some(400.0)
    });
    assert_eq!(
        run_info_role(&m).as_deref(),
        Some("driver"),
        "a node whose run folder this sidecar follows is the driver's, whatever else serves:\n{}",
        m.0
    );
    assert_eq!(
        m.get("pulse_server_up", ""),
        None,
        "no server is tied to this run: none is probed\n{}",
        m.0
    );
    let status: serde_json::Value = serde_json::from_str(&sidecar.get("/status").body).unwrap();
    assert_eq!(status["run"]["role"], "driver", "{}", status["run"]);
    assert!(status["server"].is_null(), "{}", status["server"]);
    let server = &status["discovered"]["server"];
    assert!(
        server.is_null()
            || server["by"]
                .as_str()
                .is_some_and(|by| by.starts_with("the only inference server")),
        "a server is shown only as the guess it is: {server}"
    );
}

/// A finished run folder, beside a stranger: `report`, `run --once` and `discover` read its
/// files and take no server.
#[test]
fn a_finished_folders_report_counts_its_records_beside_a_stranger() {
    let dir = temp_dir();
    let _stranger = stranger(dir.path());
    let root = dir.path().join("synth_100k");
    let records = |n: usize| -> String {
        (0..n)
            .map(|i| {
                format!(
                    "{{\"id\":{i},\"text\":\"x\",\"meta_info\":{{\"completion_tokens\":30}}}}\n"
                )
            })
            .collect()
    };
    for (name, n) in [("B1_glaive", 40), ("B2_code", 25)] {
        let folder = root.join("prepared").join(name);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("raw_responses.jsonl"), records(n)).unwrap();
    }
    std::fs::create_dir_all(root.join("logs")).unwrap();
    std::fs::write(
        root.join("logs/inference_all.log"),
        "Processing: B1_glaive (SHORT)\nB1_glaive: 40 prompts\n  40/40 (0 err) 2.0 req/s avg_comp=30tok ETA=0s\n\
         Processing: B2_code (SHORT)\nB2_code: 25 prompts\n  25/25 (0 err) 2.0 req/s avg_comp=30tok ETA=0s\n",
    )
    .unwrap();

    let out = Command::new(BIN)
        .args(["report", "--json"])
        .arg(&root)
        .output()
        .unwrap();
    let card: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let counts: Vec<(String, u64)> = card["partitions"]
        .as_array()
        .unwrap_or_else(|| panic!("{card}"))
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                p["records"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        counts,
        [("B1_glaive".to_owned(), 40), ("B2_code".to_owned(), 25)],
        "{card}"
    );
    assert_eq!(out.status.code(), Some(0), "{card}");

    let once = Command::new(BIN)
        .args(["run", "--once", "--gpu", "off", "--run-dir"])
        .arg(&root)
        .output()
        .unwrap();
    let m = Metrics(String::from_utf8_lossy(&once.stdout).into_owned());
    assert_eq!(
        (
            m.partition("pulse_output_records_total", "B1_glaive"),
            m.partition("pulse_output_records_total", "B2_code"),
        ),
        (Some(40.0), Some(25.0)),
        "{}\n{}",
        m.0,
        String::from_utf8_lossy(&once.stderr)
    );
    assert_eq!(run_info_role(&m).as_deref(), Some("driver"), "{}", m.0);
    assert_eq!(m.get("pulse_server_up", ""), None, "{}", m.0);

    let toml = Command::new(BIN)
        .arg("discover")
        .arg(&root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&toml.stdout);
    assert!(
        !text.contains("server_health_url") && !text.contains("role ="),
        "`discover` proposes no server and no role it cannot tie to the run:\n{text}"
    );
}

/// An empty folder's card is no pass: a job gating on `report` stops.
#[test]
fn a_report_over_no_records_fails() {
    let dir = temp_dir();
    let out = Command::new(BIN)
        .arg("report")
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("no output records were read"), "{text}");
}
