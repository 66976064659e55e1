//! The metric contract, `docs/metrics.md`, against what real sidecars export: the demo (every
//! source discovered, simulated GPUs, a simulated SGLang server, an alert emailed) and a
//! sidecar behind a web config with a heartbeat, GPU processes, a vLLM server's metrics and an
//! SGLang server log. A family exported and not documented, documented and never exported, or
//! documented with another type or other labels fails the test. The expositions are read in
//! OpenMetrics, which keeps every family's type (the text format writes an info as a gauge).

use crate::common;
use crate::common::receiver::Receiver;
use crate::common::{
    contract, path_str, require_tool, temp_dir, wait_until, Demo, Metrics, Sidecar,
};
use pipeline_pulse::sources::probe::exposition;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A family as the contract states it: its type and its label names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Family {
    kind: String,
    labels: BTreeSet<String>,
}

/// The contract's families, by type and label names (what an exposition can show).
fn documented() -> BTreeMap<String, Family> {
    contract::families()
        .into_iter()
        .map(|(name, f)| {
            let family = Family {
                kind: f.kind,
                labels: f.labels,
            };
            (name, family)
        })
        .collect()
}

/// The families of an OpenMetrics exposition, named as the contract names them (the text
/// format's names: a counter with `_total`, an info with `_info`), with the label names their
/// samples carry. OpenMetrics is read because it keeps the types the text format folds into
/// gauges (an info family).
fn exported(exposition: &str) -> BTreeMap<String, Family> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut current = None;
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            let name = match kind {
                "counter" => format!("{name}_total"),
                "info" => format!("{name}_info"),
                _ => name.to_owned(),
            };
            // Several expositions may be read as one: a family seen again keeps its labels.
            families.entry(name.clone()).or_insert(Family {
                kind: kind.to_owned(),
                labels: BTreeSet::new(),
            });
            current = Some(name);
        } else if let Some((_, labels, _)) = exposition::samples(line).next() {
            let name = current.as_ref().expect("a sample after its # TYPE line");
            let family = families.get_mut(name).unwrap();
            for pair in exposition::label_pairs(labels) {
                let (label, _) = pair.split_once('=').expect("name=\"value\"");
                // A histogram's bucket bound is its own, not a label the contract lists.
                if !(family.kind == "histogram" && label == "le") {
                    family.labels.insert(label.to_owned());
                }
            }
        }
    }
    families
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves one file's bytes to every GET, as a server's `/metrics` does.
fn serve(body: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
        }
    });
    format!("http://127.0.0.1:{port}/metrics")
}

fn testdata(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/testdata/server")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The demo's exposition once its stall has been emailed (discovery, the logs, the outputs,
/// simulated GPUs, the simulated SGLang server and the alert engine all at work), and a later
/// one with the ETA's band.
fn demo_exposition(dir: &Path) -> String {
    let demo = Demo::start(&dir.join("demo"), "10", "3m");
    let mut last = String::new();
    // The demo's stall lasts seconds: the scrape that shows it firing and the one after its
    // email went out need not be the same.
    let mut firing = String::new();
    wait_until("the demo's stall emailed", Duration::from_secs(120), || {
        let answer = common::http_get(demo.addr, "GET", "/metrics", Some(OPENMETRICS));
        if answer.status != 200 {
            return false;
        }
        last = answer.body;
        if last.contains("pulse_alert_firing{") {
            firing = last.clone();
        }
        let sent = "alert=\"Stalled\",result=\"sent\",channel=\"email\"";
        Metrics(last.clone()).get("pulse_notifications_total", sent) >= Some(1.0)
            && !firing.is_empty()
    });
    // The ETA's band needs two windows of the run's history with progress: later in the run.
    let mut later = String::new();
    wait_until("the demo's ETA band", Duration::from_secs(120), || {
        later = common::http_get(demo.addr, "GET", "/metrics", Some(OPENMETRICS)).body;
        later.contains("pulse_run_eta_upper_seconds ")
    });
    firing + &last + &later
}

/// A sidecar behind basic auth, with a heartbeat, GPU processes, a vLLM `/metrics` and an
/// SGLang server log whose lines report two KV pools.
fn served_exposition(dir: &Path) -> String {
    let curl = require_tool("curl", "curl");
    let hash = bcrypt::hash("scrape", 4).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: {hash}\n")).unwrap();
    let heartbeat = Receiver::start(&[]);
    let metrics_url = serve(testdata("vllm-0.34.0-awake.prom"));
    let server_log = dir.join("sglang.log");
    std::fs::write(&server_log, testdata("sglang-0.4.9.log")).unwrap();
    let config = dir.join("pulse.toml");
    std::fs::write(
        &config,
        format!(
            "web_config_file = {:?}\nhealth_without_auth = true\nheartbeat_url = {:?}\nheartbeat_interval = \"1s\"\nslurm_spread = \"0s\"\n[[actions]]\non = [\"ServerHung\"]\ncommand = [\"/bin/true\"]\n",
            path_str(&web),
            heartbeat.url("/ping")
        ),
    )
    .unwrap();
    // Records that must hold their reasoning, one of which does not.
    let outputs = dir.join("B1").join("raw_responses.jsonl");
    std::fs::create_dir_all(outputs.parent().unwrap()).unwrap();
    std::fs::write(
        &outputs,
        "{\"custom_id\":\"a\",\"choices\":[{\"message\":{\"content\":\"x\",\"reasoning_content\":\"y\"}}]}\n\
         {\"custom_id\":\"b\",\"choices\":[{\"message\":{\"content\":\"x\"}}]}\n",
    )
    .unwrap();
    // Inside task 0 of a SLURM array whose controller answers what SLURM 22.05 answered
    // (tests/testdata/slurm/scontrol-22.05-epoch-array.txt), through a scontrol that prints it.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let scontrol = bin.join("scontrol");
    std::fs::write(
        &scontrol,
        format!(
            "#!/bin/sh\nexec cat {}/tests/testdata/slurm/scontrol-22.05-epoch-array.txt\n",
            env!("CARGO_MANIFEST_DIR")
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &scontrol,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let job = [
        ("SLURM_JOB_ID", "3"),
        ("SLURM_ARRAY_JOB_ID", "2"),
        ("SLURM_ARRAY_TASK_ID", "0"),
        ("SLURM_ARRAY_TASK_COUNT", "10"),
    ];
    let env: Vec<(&str, &Path)> = job
        .iter()
        .map(|(k, v)| (*k, Path::new(*v)))
        .chain([("PATH", Path::new(&path))])
        .collect();
    let sidecar = Sidecar::run_with_env(
        &[
            "--config",
            path_str(&config),
            "--outputs",
            path_str(&outputs),
            "--require",
            "/choices/0/message/reasoning_content",
            "--gpu",
            "simulated",
            "--gpu-processes",
            "--server-metrics-url",
            &metrics_url,
            "--server-log",
            path_str(&server_log),
        ],
        &env,
    );
    let scrape = |user: &str| {
        let out = Command::new(&curl)
            .args(["-sS", "--max-time", "10", "-u", user, "-H"])
            .arg(format!("Accept: {OPENMETRICS}"))
            .arg(format!("http://{}/metrics", sidecar.addr))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // One refused scrape, so that the refusals are counted.
    assert!(!scrape("prometheus:wrong").contains("pulse_"));
    let mut last = String::new();
    wait_until(
        "the heartbeat, the server and the SLURM job read",
        Duration::from_secs(30),
        || {
            last = scrape("prometheus:scrape");
            let m = Metrics(last.clone());
            m.get("pulse_heartbeat_last_success_timestamp_seconds", "")
                .is_some()
                && last.contains("pulse_server_kv_cache_pool_usage_ratio{")
                && last.contains("pulse_gpu_process_memory_used_bytes{")
                && m.get("pulse_http_unauthorized_total", "") == Some(1.0)
                && last.contains("pulse_output_missing_field_records_total{")
                && m.get("pulse_server_asleep", "") == Some(0.0)
                && last.contains("pulse_slurm_array_tasks{")
                && m.get("pulse_actions_total", "action=\"true\",result=\"ok\"") == Some(0.0)
        },
    );
    last
}

#[test]
fn every_family_exported_is_documented_and_every_one_documented_is_exported() {
    let contract = documented();
    let dir = temp_dir();
    let expositions = [
        ("the demo", demo_exposition(dir.path())),
        ("the served sidecar", served_exposition(dir.path())),
    ];
    let mut seen = BTreeSet::new();
    let mut wrong = Vec::new();
    for (fixture, exposition) in &expositions {
        for (name, family) in exported(exposition) {
            match contract.get(&name) {
                None => wrong.push(format!("{fixture} exports {name}, not in docs/metrics.md")),
                Some(documented) if documented.kind != family.kind => wrong.push(format!(
                    "{name}: docs/metrics.md says {}, {fixture} exports a {}",
                    documented.kind, family.kind
                )),
                // A family with no sample yet shows no labels: that says nothing against them.
                Some(documented)
                    if !family.labels.is_empty() && documented.labels != family.labels =>
                {
                    wrong.push(format!(
                        "{name}: docs/metrics.md says labels {:?}, {fixture} exports {:?}",
                        documented.labels, family.labels
                    ))
                }
                Some(_) => {}
            }
            seen.insert(name);
        }
    }
    for name in contract.keys() {
        if !seen.contains(name) {
            wrong.push(format!(
                "{name} is documented in docs/metrics.md but neither fixture exports it"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn label_names_are_read_past_commas_inside_values() {
    let families =
        exported("# TYPE pulse_x gauge\npulse_x{a=\"x\",b=\"y, z=\\\"q\\\"\",c=\"\"} 1\n# EOF\n");
    assert_eq!(
        families["pulse_x"].labels,
        ["a", "b", "c"].map(str::to_owned).into()
    );
}
