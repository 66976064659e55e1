//! A fleet, against real peers: runs that span nodes, one Prometheus scraping every node's
//! sidecar, and a clustered pair of Alertmanagers that every sidecar pushes its alerts to.
//!
//! The nodes are five `pipeline-pulse run` processes on this machine, told apart by their
//! `hostname` (the instance label of the alerts they push):
//! - node-a1, run synth_A's driver node: it follows synth_A/logs/progress.log, which a Python
//!   driver writes (progress advancing); its run is named for that folder;
//! - node-a2, run synth_A's worker node (`--run-name synth_A --role worker`): scripted GPUs
//!   (the fake libnvidia-ml of tests/it/nvml.rs) of which one falls off the bus, and an SGLang rank
//!   (`--node-rank 1`) whose port serves nothing, which discovery finds in its folder;
//! - node-b1, run synth_B on one node;
//! - node-c1, a node with GPUs and no run;
//! - node-a1 again, restarted on the same log and state directory.
//!
//! It proves that every sidecar with a run exports `pulse_run_info` once, with a run id that
//! survives a restart, and one without a run none; that every query of the fleet dashboard
//! returns its run's series, and only its run's, for each run; that a run's recorded
//! throughput (`run:`) is the sum of its nodes' (`instance:`); that both clustered
//! Alertmanagers hold the worker's GpuLost with its run and role, and the pair notifies its
//! run's group exactly once; and that the worker, which has no server of its own to probe,
//! never probes one and never raises ServerDown.

use crate::common::prometheus::Prometheus;
use crate::common::receiver::Receiver;
use crate::common::repo::*;
use crate::common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const FLEET_DASHBOARD: &str = "grafana/pipeline-pulse-fleet.json";
const ALERT_RULES: &str = "deploy/prometheus/rules/pipeline-pulse-alerts.yml";
const RECORDING_RULES: &str = "deploy/prometheus/rules/pipeline-pulse-recording.yml";
const RUN_RULES: &str = "deploy/prometheus/rules/pipeline-pulse-runs.yml";
const RUNS: [&str; 2] = ["synth_A", "synth_B"];
/// How long Prometheus may take to show what the sidecars export: its first scrape comes
/// seconds after it starts, and a removed target's series go stale a few scrapes later.
const PROMETHEUS_LIMIT: Duration = Duration::from_secs(60);
const ALERTMANAGER_LIMIT: Duration = Duration::from_secs(30);

/// A run's driver: writes a progress log (the run_inference format) in its run folder, keeps it
/// open and reports progress every half second; the partition never reaches its plan in the
/// test's time, so nothing about it fires.
const DRIVER: &str = r#"
import sys, time
log_path, partition = sys.argv[1], sys.argv[2]
with open(log_path, "a") as log:
    log.write("Model: /shared/kimi-k2.5-int4\n")
    log.write(f"Processing: {partition} (SHORT)\n{partition}: 100000 prompts\n")
    for i in range(1, 2400):
        log.write(f"  {i * 10}/100000 (0 err) 20.0 req/s avg_comp=300tok ETA=5000s\n")
        log.flush()
        time.sleep(0.5)
"#;

/// Four scripted H200s; GPU 3 falls off the bus 2 s after the library starts, for good.
fn gpus_one_lost() -> String {
    let gpus: Vec<String> = (0..4)
        .map(|i| {
            format!(
                r#"{{"name":"NVIDIA H200","uuid":"GPU-0000000{i}-fake","pci_bus_id":"00000000:{:02X}:00.0",
                "utilization":85,"memory_utilization":40,"memory_total":150754820096,"memory_used":90000000000,
                "temperature":60,"power_mw":500000,"power_limit_mw":700000,"sm_clock_mhz":1900,"processes":[]}}"#,
                0x18 + i
            )
        })
        .collect();
    format!(
        r#"{{"driver_version":"550.54.15","gpus":[{}],"faults":[{{"kind":"lost","gpu":3,"at":2}}]}}"#,
        gpus.join(",")
    )
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// `pipeline-pulse run ARGS` (with Sidecar::run's listen address and poll interval), with
/// these environment variables.
fn start(args: &[String], env: &[(&str, &Path)]) -> Sidecar {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Sidecar::run_with_env(&args, env)
}

/// A config file naming the node: `hostname` is a config-file key, not a flag.
fn node_config(dir: &Path, hostname: &str) -> PathBuf {
    let file = dir.join(format!("{hostname}.toml"));
    std::fs::write(&file, format!("hostname = \"{hostname}\"\n")).unwrap();
    file
}

/// A run's driver writing `log`, once it has reported progress.
fn start_driver(log: &Path, partition: &str) -> Killed {
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let driver = Killed(python(DRIVER, &[path_str(log), partition]));
    wait_for("the driver to report progress in its log", || {
        std::fs::read_to_string(log).is_ok_and(|t| t.contains("/100000 (0 err)"))
    });
    driver
}

fn is_run_id(id: &str) -> bool {
    id.len() == 12 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A sidecar's `pulse_run_info`, checked against its run and role; returns its run id. A node
/// that follows the run's log gives the id read from it, which its run-id source reads on a
/// thread of its own soon after start; until then the id is the run name's alone.
fn check_run_info(sidecar: &Sidecar, node: &str, run: &str, role: &str) -> String {
    let named = pipeline_pulse::run_identity::named_id(run);
    let m = if role == "driver" {
        sidecar.wait_metrics(&format!("{node}'s run id read from its log"), |m| {
            run_info(m).is_some_and(|i| i.get("run_id") != Some(&named))
        })
    } else {
        sidecar.metrics()
    };
    let info = run_info(&m).unwrap_or_else(|| {
        panic!(
            "{node} should export pulse_run_info{{run=\"{run}\",role=\"{role}\"}}, it exports none:\n{}",
            m.0
        )
    });
    let label = |name: &str| info.get(name).map(String::as_str).unwrap_or("");
    assert_eq!(
        (label("run"), label("role")),
        (run, role),
        "{node}'s pulse_run_info: expected run {run} and role {role}, got {info:?}"
    );
    assert!(
        is_run_id(label("run_id")),
        "{node}'s run_id should be 12 lowercase hex digits, got {info:?}"
    );
    label("run_id").to_owned()
}

/// `n` different free loopback ports (held together while they are picked).
fn distinct_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// One route for the whole fleet: a run's alerts, from all its nodes, are one group, notified
/// to the test's receiver.
fn alertmanager_config(webhook: &str) -> String {
    format!(
        "route:\n  receiver: fleet\n  group_by: ['run']\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n\
         receivers:\n  - name: fleet\n    webhook_configs:\n      - url: '{webhook}'\n        send_resolved: false\n"
    )
}

/// One of a clustered pair of real Alertmanagers (common::start_alertmanager's command, with
/// gossip): its API on `web`, its gossip on `gossip`, joined to the peer gossiping on `peer`.
/// The second in the cluster's order waits `--cluster.peer-timeout` (2 s) before it notifies,
/// and then does only if the notification log gossiped from the first does not hold the
/// group's notification already. Killed when the first value is dropped.
fn clustered_alertmanager(
    config: &Path,
    data: &Path,
    web: u16,
    gossip: u16,
    peer: u16,
) -> (Killed, SocketAddr) {
    let child = dies_with_its_starter(&mut Command::new(alertmanager_binary()))
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.path={}", data.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{web}"))
        .arg(format!("--cluster.listen-address=127.0.0.1:{gossip}"))
        .arg(format!("--cluster.peer=127.0.0.1:{peer}"))
        .args([
            "--cluster.gossip-interval=100ms",
            "--cluster.pushpull-interval=1s",
            "--cluster.settle-timeout=5s",
            "--cluster.peer-timeout=2s",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start alertmanager");
    let killed = Killed(child);
    let addr: SocketAddr = format!("127.0.0.1:{web}").parse().unwrap();
    wait_for("Alertmanager to be ready", || {
        matches!(try_http(addr, "GET", "/-/ready", ""), Some((200, _)))
    });
    (killed, addr)
}

/// An Alertmanager's cluster status and the number of peers it sees.
fn cluster(addr: SocketAddr) -> (String, usize) {
    let status = get_json(addr, "/api/v2/status").unwrap_or_default();
    (
        status["cluster"]["status"]
            .as_str()
            .unwrap_or("no answer")
            .to_owned(),
        status["cluster"]["peers"].as_array().map_or(0, Vec::len),
    )
}

/// How many times an Alertmanager has consulted its notification log: once each time a
/// group's notification reaches the deduplication step, after the peer's wait.
fn nflog_queries(addr: SocketAddr) -> f64 {
    let (_, body) = try_http(addr, "GET", "/metrics", "").unwrap_or_default();
    Metrics(body)
        .get("alertmanager_nflog_queries_total", "")
        .unwrap_or(0.0)
}

/// The alerts an Alertmanager holds, as `GET /api/v2/alerts` lists them.
fn held_alerts(addr: SocketAddr) -> Vec<Value> {
    get_json(addr, "/api/v2/alerts")
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

fn summarize_alerts(alerts: &[Value]) -> String {
    let listed: Vec<String> = alerts
        .iter()
        .map(|a| format!("{} ({})", a["labels"], a["status"]["state"]))
        .collect();
    format!("[{}]", listed.join(", "))
}

/// The Alertmanager notifications the receiver got (webhook payloads, version 4).
fn notifications(receiver: &Receiver) -> Vec<Value> {
    receiver
        .received()
        .iter()
        .filter(|m| m.method == "POST" && m.path == "/alertmanager")
        .map(|m| m.json())
        .collect()
}

/// Whether a notification is of run synth_A's group and carries GpuLost, firing.
fn carries_gpu_lost(n: &Value) -> bool {
    n["groupLabels"]["run"] == "synth_A"
        && n["alerts"].as_array().is_some_and(|alerts| {
            alerts
                .iter()
                .any(|a| a["labels"]["alertname"] == "GpuLost" && a["status"] == "firing")
        })
}

fn describe(notifications: &[Value]) -> String {
    if notifications.is_empty() {
        return "none".into();
    }
    let listed: Vec<String> = notifications
        .iter()
        .map(|n| {
            let alerts: Vec<String> = n["alerts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| {
                    format!(
                        "{} {} on {}",
                        a["status"], a["labels"]["alertname"], a["labels"]["instance"]
                    )
                })
                .collect();
            format!(
                "  from {} for group {}: {}",
                n["externalURL"],
                n["groupLabels"],
                alerts.join(", ")
            )
        })
        .collect();
    listed.join("\n")
}

/// Writes the file_sd targets file in one step (a rename), so Prometheus never reads half.
fn write_targets(file: &Path, targets: &[SocketAddr]) {
    let listed: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    let fresh = file.with_extension("json.new");
    std::fs::write(
        &fresh,
        format!("[{{\"targets\": [{}]}}]\n", listed.join(", ")),
    )
    .unwrap();
    std::fs::rename(fresh, file).unwrap();
}

/// The shipped recording rules (`instance:`, `job:`) and run rules (`run:`) as one rule group.
/// Two groups are evaluated at different offsets within the interval, so a run's figure and
/// its nodes' would be computed from different scrapes (and a rate moves at every scrape);
/// in one group every rule is evaluated at the same instant from the same samples.
fn one_rule_group() -> String {
    let fleet = read_repo(RECORDING_RULES);
    let runs = read_repo(RUN_RULES);
    for (file, text) in [(RECORDING_RULES, &fleet), (RUN_RULES, &runs)] {
        let groups = text.lines().filter(|l| l.starts_with("  - name:")).count();
        assert_eq!(
            groups, 1,
            "{file} is expected to hold one rule group (this test merges them), it holds {groups}"
        );
    }
    let (_, run_rules) = runs
        .split_once("\n    rules:\n")
        .unwrap_or_else(|| panic!("{RUN_RULES} has no `    rules:` list"));
    format!("{}\n{run_rules}", fleet.trim_end())
}

/// Scrapes the file_sd targets every second; evaluates the shipped alert rules and (as one
/// group) the recording and run rules every second.
fn prometheus_config(targets: &Path, rules: &Path) -> String {
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - '{}'\n  - '{}'\n\
         scrape_configs:\n  - job_name: pipeline-pulse\n    file_sd_configs:\n      - files: ['{}']\n        refresh_interval: 1s\n",
        repo_file(ALERT_RULES).display(),
        rules.display(),
        targets.display()
    )
}

/// An instant query's series, once Prometheus answers it.
fn series(prometheus: &Prometheus, expr: &str) -> Result<Vec<Value>, String> {
    let answer = prometheus
        .query(expr)
        .ok_or("no answer from Prometheus yet")?;
    if answer["status"] != "success" {
        return Err(format!("`{expr}` failed: {answer}"));
    }
    Ok(answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// The values of `label` among the series of an instant query.
fn label_values(prometheus: &Prometheus, expr: &str, label: &str) -> BTreeSet<String> {
    label_set(&series(prometheus, expr).unwrap_or_default(), label)
}

fn label_set(results: &[Value], label: &str) -> BTreeSet<String> {
    results
        .iter()
        .filter_map(|r| r["metric"][label].as_str().map(str::to_owned))
        .collect()
}

fn value(result: &Value) -> Option<f64> {
    result["value"][1].as_str()?.parse().ok()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|i| i.to_string()).collect()
}

/// One query of the fleet dashboard with the run variable set to one run.
struct DashboardQuery {
    what: String,
    run: &'static str,
    expr: String,
    last: String,
}

impl DashboardQuery {
    /// A finite value in at least one series, and no series of another run or of the node
    /// with no run.
    fn passes(&mut self, prometheus: &Prometheus, no_run_node: &str) -> bool {
        let Some(answer) = prometheus.query(&self.expr) else {
            self.last = "no answer from Prometheus".into();
            return false;
        };
        self.last = answer.to_string().chars().take(800).collect();
        if answer["status"] != "success" {
            return false;
        }
        let results: Vec<Value> = answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let finite = results.iter().any(|r| value(r).is_some_and(f64::is_finite));
        let foreign = results.iter().any(|r| {
            r["metric"]["run"]
                .as_str()
                .is_some_and(|run| run != self.run)
                || r["metric"]["instance"] == no_run_node
        });
        finite && !foreign
    }
}

/// The fleet every test below looks at, started once: two runs over four nodes, one
/// Prometheus, a clustered pair of Alertmanagers and the receiver they notify. Node-a1's first
/// sidecar has been stopped and started again on the same log and state before any test looks.
struct Fleet {
    receiver: Receiver,
    alertmanagers: [SocketAddr; 2],
    prometheus: Prometheus,
    /// The first node-a1 process: its address, run id and exit status on SIGTERM.
    first_a1: (SocketAddr, String, std::process::ExitStatus),
    a1: Sidecar,
    a2: Sidecar,
    b1: Sidecar,
    c1: Sidecar,
    run_id_a: String,
    run_id_b: String,
    /// The worker's SGLang rank above 0.
    rank_pid: u32,
    /// Everything else that must live as long as the fleet.
    _kept: Vec<Box<dyn Send>>,
    _dir: tempfile::TempDir,
}

/// The fleet, started on first use from a thread that lives as long as the test binary: its
/// processes die with that thread (common::dies_with_its_starter), since a static is never
/// dropped. A fleet that failed to start fails every test with the reason.
static FLEET: std::sync::OnceLock<Result<Mutex<Fleet>, String>> = std::sync::OnceLock::new();

fn fleet() -> MutexGuard<'static, Fleet> {
    let started = FLEET.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("fleet".into())
            .spawn(move || {
                let started = std::panic::catch_unwind(Fleet::start).map_err(|panic| {
                    panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                });
                let _ = tx.send(started.map(Mutex::new));
                loop {
                    std::thread::park();
                }
            })
            .unwrap();
        rx.recv().map_err(|e| e.to_string()).and_then(|r| r)
    });
    match started {
        Ok(fleet) => fleet.lock().unwrap_or_else(|e| e.into_inner()),
        Err(why) => panic!("the fleet did not start: {why}"),
    }
}

impl Fleet {
    fn start() -> Fleet {
        // Every peer up front: a missing one fails at once and says how to install it.
        require_tool("prometheus", "prometheus");
        require_tool("python3", "python3");
        alertmanager_binary();
        // Built (once) before anything that runs against the clock is started.
        let lib = fake_nvml().display().to_string();
        let dir = temp_dir();
        let root = dir.path();
        let mut kept: Vec<Box<dyn Send>> = Vec::new();

        // The Alertmanager pair, one cluster, notifying the receiver.
        let receiver = Receiver::start(&[]);
        let am_config = root.join("alertmanager.yml");
        std::fs::write(
            &am_config,
            alertmanager_config(&receiver.url("/alertmanager")),
        )
        .unwrap();
        let ports = distinct_ports(4);
        let (am1_process, am1) =
            clustered_alertmanager(&am_config, &root.join("am1"), ports[0], ports[2], ports[3]);
        let (am2_process, am2) =
            clustered_alertmanager(&am_config, &root.join("am2"), ports[1], ports[3], ports[2]);
        kept.push(Box::new(am1_process));
        kept.push(Box::new(am2_process));
        let alertmanagers = [am1, am2];
        poll(
            "the two Alertmanagers to form one settled cluster of two",
            ALERTMANAGER_LIMIT,
            || {
                let seen: Vec<(String, usize)> =
                    alertmanagers.iter().map(|a| cluster(*a)).collect();
                if seen
                    .iter()
                    .all(|(status, peers)| status == "ready" && *peers == 2)
                {
                    Ok(())
                } else {
                    Err(format!("(status, peers) of each: {seen:?}"))
                }
            },
        );
        let am_urls: Vec<String> = alertmanagers
            .iter()
            .map(|a| format!("http://{a}"))
            .collect();

        // The runs' drivers.
        let log_a = root.join("synth_A/logs/progress.log");
        let log_b = root.join("synth_B/logs/progress.log");
        kept.push(Box::new(start_driver(&log_a, "B1_glaive")));
        kept.push(Box::new(start_driver(&log_b, "B1_code")));

        // Run A's worker node: its folder, with an SGLang rank above 0 started in it, serving
        // nothing on its port (nothing listens there).
        let worker_dir = root.join("node-a2");
        std::fs::create_dir_all(worker_dir.as_path()).unwrap();
        let rank = FakeServer::start(Engine::Sglang, SGLANG_RANK_1, &worker_dir, false);
        let rank_pid = rank.pid();
        kept.push(Box::new(rank));
        let nvml_script = root.join("nvml.json");
        std::fs::write(nvml_script.as_path(), gpus_one_lost()).unwrap();

        // The sidecars.
        let a1_config = node_config(root, "node-a1");
        let state_a1 = root.join("state-a1");
        let a1_args = strings(&[
            "--config",
            path_str(&a1_config),
            "--log",
            path_str(&log_a),
            "--gpu",
            "simulated",
            "--gpu-interval",
            "1s",
            "--alertmanager-url",
            am_urls[0].as_str(),
            "--alertmanager-url",
            am_urls[1].as_str(),
            "--alert-interval",
            "1s",
            "--state-dir",
            path_str(&state_a1),
        ]);
        let mut first_a1 = start(&a1_args, &[]);
        let a2_config = node_config(root, "node-a2");
        let a2 = start(
            &strings(&[
                "--config",
                path_str(&a2_config),
                "--run-name",
                "synth_A",
                "--role",
                "worker",
                "--run-dir",
                path_str(&worker_dir),
                "--discover-interval",
                "1s",
                "--probe-interval",
                "200ms",
                "--gpu",
                "on",
                "--nvml-library",
                lib.as_str(),
                "--gpu-interval",
                "200ms",
                "--alertmanager-url",
                am_urls[0].as_str(),
                "--alertmanager-url",
                am_urls[1].as_str(),
                "--alert-interval",
                "1s",
            ]),
            // The scripted library reads its script from the environment of the process
            // that loads it.
            &[("FAKE_NVML_SCRIPT", nvml_script.as_path())],
        );
        let b1_config = node_config(root, "node-b1");
        let b1 = start(
            &strings(&[
                "--config",
                path_str(&b1_config),
                "--log",
                path_str(&log_b),
                "--gpu",
                "simulated",
                "--gpu-interval",
                "1s",
            ]),
            &[],
        );
        let c1_config = node_config(root, "node-c1");
        let c1 = start(
            &strings(&[
                "--config",
                path_str(&c1_config),
                "--gpu",
                "simulated",
                "--gpu-interval",
                "1s",
            ]),
            &[],
        );
        let run_id_a = check_run_info(&first_a1, "node-a1", "synth_A", "driver");
        let run_id_b = check_run_info(&b1, "node-b1", "synth_B", "driver");

        // One Prometheus scraping them all, through file_sd so the restarted sidecar can join.
        let mut targets = [first_a1.addr, a2.addr, b1.addr, c1.addr];
        let targets_file = root.join("targets.json");
        write_targets(&targets_file, &targets);
        let rules = root.join("pipeline-pulse-recording-and-runs.yml");
        std::fs::write(&rules, one_rule_group()).unwrap();
        let prometheus = Prometheus::start(|_| prometheus_config(&targets_file, &rules));

        // Run A's driver sidecar restarts on the same log and state, once Prometheus has
        // scraped the first one's pulse_run_info.
        let old_a1 = first_a1.addr.to_string();
        poll(
            "Prometheus to have scraped the first node-a1's pulse_run_info",
            PROMETHEUS_LIMIT,
            || {
                let seen = label_values(
                    &prometheus,
                    "pulse_run_info{run=\"synth_A\",role=\"driver\"}",
                    "instance",
                );
                if seen.contains(&old_a1) {
                    Ok(())
                } else {
                    Err(format!("synth_A's driver instances: {seen:?}"))
                }
            },
        );
        let exit = first_a1.terminate();
        let first = (first_a1.addr, run_id_a.clone(), exit);
        drop(first_a1);
        let a1 = start(&a1_args, &[]);
        targets[0] = a1.addr;
        write_targets(&targets_file, &targets);
        Fleet {
            receiver,
            alertmanagers,
            prometheus,
            first_a1: first,
            a1,
            a2,
            b1,
            c1,
            run_id_a,
            run_id_b,
            rank_pid,
            _kept: kept,
            _dir: dir,
        }
    }

    fn instances(&self) -> BTreeSet<String> {
        [&self.a1, &self.a2, &self.b1, &self.c1]
            .iter()
            .map(|s| s.addr.to_string())
            .collect()
    }

    /// The notifications the receiver got that carry run synth_A's GpuLost, once there is one.
    fn gpu_lost_notified(&self) -> Vec<Value> {
        poll(
            "the receiver to get run synth_A's group notified with the GpuLost",
            ALERTMANAGER_LIMIT,
            || {
                let all = notifications(&self.receiver);
                let got: Vec<Value> = all
                    .iter()
                    .filter(|n| carries_gpu_lost(n))
                    .cloned()
                    .collect();
                if got.is_empty() {
                    Err(format!("notifications so far:\n{}", describe(&all)))
                } else {
                    Ok(got)
                }
            },
        )
    }
}

#[test]
fn each_sidecar_exports_its_run_once_and_a_node_without_one_none() {
    let fleet = fleet();
    let a1 = check_run_info(&fleet.a1, "node-a1", "synth_A", "driver");
    check_run_info(&fleet.a2, "node-a2", "synth_A", "worker");
    let b1 = check_run_info(&fleet.b1, "node-b1", "synth_B", "driver");
    assert_eq!(
        (a1.as_str(), b1.as_str()),
        (fleet.run_id_a.as_str(), fleet.run_id_b.as_str())
    );
    assert_ne!(
        fleet.run_id_a, fleet.run_id_b,
        "two runs, two logs: their run ids should differ"
    );
    let m = fleet.c1.metrics();
    assert_eq!(
        run_info(&m),
        None,
        "node-c1 has no run name, no run folder and no log: it should export no pulse_run_info:\n{}",
        m.0
    );
}

#[test]
fn both_alertmanagers_hold_the_workers_gpu_lost_with_its_run_and_role() {
    let fleet = fleet();
    let gpu3 = "gpu=\"3\",uuid=\"GPU-00000003-fake\"";
    fleet.a2.wait_metrics("the worker's GPU 3 lost", |m| {
        m.get("pulse_gpu_up", gpu3) == Some(0.0)
    });
    fleet.a2.wait_metrics("the worker's GpuLost firing", |m| {
        m.get("pulse_alert_firing", "alert=\"GpuLost\",partition=\"\"") == Some(1.0)
    });
    for am in fleet.alertmanagers {
        let alert = poll(
            &format!("Alertmanager {am} to hold the worker's GpuLost"),
            ALERTMANAGER_LIMIT,
            || {
                let alerts = held_alerts(am);
                alerts
                    .iter()
                    .find(|a| {
                        a["labels"]["alertname"] == "GpuLost"
                            && a["labels"]["run"] == "synth_A"
                            && a["labels"]["role"] == "worker"
                    })
                    .cloned()
                    .ok_or_else(|| format!("alerts held: {}", summarize_alerts(&alerts)))
            },
        );
        for (label, expected) in [
            ("instance", "node-a2"),
            ("severity", "critical"),
            ("job", "pipeline-pulse"),
            ("service", "pipeline-pulse"),
        ] {
            assert_eq!(
                alert["labels"][label], expected,
                "label {label} of the GpuLost that Alertmanager {am} holds: expected {expected}, got {}",
                alert["labels"]
            );
        }
        assert_eq!(
            alert["status"]["state"], "active",
            "the GpuLost that Alertmanager {am} holds should be active: {alert}"
        );
    }
}

#[test]
fn the_alertmanager_pair_notifies_the_runs_group_once() {
    let fleet = fleet();
    let first = fleet.gpu_lost_notified();
    let notified = &first[0];
    assert_eq!(
        notified["groupLabels"],
        serde_json::json!({ "run": "synth_A" }),
        "the group is the run: {notified}"
    );
    let lost = notified["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["labels"]["alertname"] == "GpuLost")
        .expect("the GpuLost alert in the notification");
    for (label, expected) in [
        ("run", "synth_A"),
        ("role", "worker"),
        ("instance", "node-a2"),
    ] {
        assert_eq!(
            lost["labels"][label], expected,
            "label {label} of the notified GpuLost: expected {expected}, got {}",
            lost["labels"]
        );
    }
    // Both have gone through their deduplication several times since (the second after its
    // peer wait), still a cluster of two: a second notification would have been sent by now.
    let alertmanagers = fleet.alertmanagers;
    let before: Vec<f64> = alertmanagers.iter().map(|a| nflog_queries(*a)).collect();
    poll(
        "each Alertmanager to consult its notification log three more times",
        ALERTMANAGER_LIMIT,
        || {
            let now: Vec<f64> = alertmanagers.iter().map(|a| nflog_queries(*a)).collect();
            let peers: Vec<usize> = alertmanagers.iter().map(|a| cluster(*a).1).collect();
            let consulted = now.iter().zip(&before).all(|(n, b)| *n >= b + 3.0);
            if consulted && peers == [2, 2] {
                Ok(())
            } else {
                Err(format!(
                    "notification log queries {before:?} then {now:?}; peers seen {peers:?}"
                ))
            }
        },
    );
    let got: Vec<Value> = notifications(&fleet.receiver)
        .into_iter()
        .filter(carries_gpu_lost)
        .collect();
    assert_eq!(
        got.len(),
        1,
        "a clustered pair notifies a group once (repeat_interval is 1h): expected one notification carrying run synth_A's GpuLost, got {}:\n{}",
        got.len(),
        describe(&got)
    );
}

#[test]
fn prometheus_scrapes_every_sidecar_and_evaluates_every_rule() {
    let fleet = fleet();
    let prometheus = &fleet.prometheus;
    let instances = fleet.instances();
    poll(
        "Prometheus to scrape the four sidecars",
        PROMETHEUS_LIMIT,
        || {
            let up = label_set(
                &series(prometheus, "up{job=\"pipeline-pulse\"} == 1")?,
                "instance",
            );
            let all = label_set(
                &series(prometheus, "up{job=\"pipeline-pulse\"}")?,
                "instance",
            );
            if up == instances && all == instances {
                Ok(())
            } else {
                Err(format!(
                    "up: {up:?}, all targets: {all:?}, expected {instances:?}"
                ))
            }
        },
    );
    let defined = names_after(&read_repo(ALERT_RULES), "- alert:").len()
        + names_after(&read_repo(RECORDING_RULES), "- record:").len()
        + names_after(&read_repo(RUN_RULES), "- record:").len();
    poll(
        "Prometheus to load and evaluate every rule cleanly",
        PROMETHEUS_LIMIT,
        || {
            let rules = prometheus.rules();
            let unhealthy: Vec<String> = rules
                .iter()
                .filter(|r| r["health"] != "ok")
                .map(|r| format!("{} ({}: {})", r["name"], r["health"], r["lastError"]))
                .collect();
            if rules.len() == defined && unhealthy.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} of the {defined} rules loaded; not healthy: {unhealthy:?}",
                    rules.len()
                ))
            }
        },
    );
}

#[test]
fn a_restarted_sidecar_keeps_its_run_id_in_its_exposition_and_in_prometheus() {
    let fleet = fleet();
    let (old_addr, old_id, exit) = &fleet.first_a1;
    assert!(
        exit.success(),
        "node-a1's first sidecar should exit cleanly on SIGTERM, exit status {exit}"
    );
    let restarted_id = check_run_info(&fleet.a1, "node-a1 (restarted)", "synth_A", "driver");
    assert_eq!(
        &restarted_id, old_id,
        "the same run (the same log) after a restart of its sidecar"
    );
    let old_a1 = old_addr.to_string();
    let five: BTreeSet<String> = fleet
        .instances()
        .into_iter()
        .chain([old_a1.clone()])
        .collect();
    poll(
        "Prometheus to have scraped five sidecar processes",
        PROMETHEUS_LIMIT,
        || {
            let seen = label_set(
                &series(
                    &fleet.prometheus,
                    "count by (instance) (count_over_time(up{job=\"pipeline-pulse\"}[1h]))",
                )?,
                "instance",
            );
            if seen == five {
                Ok(())
            } else {
                Err(format!("instances scraped: {seen:?}, expected {five:?}"))
            }
        },
    );
    let both_a1 = set(&[old_a1.as_str(), fleet.a1.addr.to_string().as_str()]);
    poll(
        "both node-a1 processes to have been scraped with one run_id",
        PROMETHEUS_LIMIT,
        || {
            let seen = series(
                &fleet.prometheus,
                "last_over_time(pulse_run_info{run=\"synth_A\",role=\"driver\"}[1h])",
            )?;
            let (nodes, ids) = (label_set(&seen, "instance"), label_set(&seen, "run_id"));
            if nodes == both_a1 && ids == set(&[old_id.as_str()]) {
                Ok(())
            } else {
                Err(format!(
                    "instances {nodes:?} (expected {both_a1:?}), run_ids {ids:?} (expected {old_id})"
                ))
            }
        },
    );
}

fn fleet_dashboard() -> Value {
    serde_json::from_str(&read_repo(FLEET_DASHBOARD)).expect("the fleet dashboard is valid JSON")
}

#[test]
fn the_run_variable_lists_each_run_from_its_nodes_with_their_roles() {
    let fleet = fleet();
    let prometheus = &fleet.prometheus;
    let (run_expr, run_label) =
        split_label_values(&variable_query(variable(&fleet_dashboard(), "run")));
    let runs = set(&RUNS);
    let run_nodes = set(&[
        fleet.a1.addr.to_string().as_str(),
        fleet.a2.addr.to_string().as_str(),
        fleet.b1.addr.to_string().as_str(),
    ]);
    let c1_instance = fleet.c1.addr.to_string();
    poll(
        "the run variable to list the two runs, from the three nodes that have one",
        PROMETHEUS_LIMIT,
        || {
            let info = series(prometheus, &run_expr)?;
            let (seen_runs, nodes) = (label_set(&info, &run_label), label_set(&info, "instance"));
            if seen_runs == runs && nodes == run_nodes {
                Ok(())
            } else {
                Err(format!(
                    "runs {seen_runs:?} (expected {runs:?}) from instances {nodes:?} (expected {run_nodes:?}; node-c1 is {c1_instance})"
                ))
            }
        },
    );
    let expected_roles = BTreeMap::from([
        (fleet.a1.addr.to_string(), "driver".to_owned()),
        (fleet.a2.addr.to_string(), "worker".to_owned()),
    ]);
    poll(
        "run synth_A's two nodes in pulse_run_info, with their roles",
        PROMETHEUS_LIMIT,
        || {
            let info = series(prometheus, "pulse_run_info{run=\"synth_A\"}")?;
            let roles: BTreeMap<String, String> = info
                .iter()
                .map(|r| {
                    (
                        r["metric"]["instance"].as_str().unwrap_or("").to_owned(),
                        r["metric"]["role"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect();
            if info.len() == 2 && roles == expected_roles {
                Ok(())
            } else {
                Err(format!(
                    "{} series, instance → role {roles:?}, expected {expected_roles:?}",
                    info.len()
                ))
            }
        },
    );
}

#[test]
fn every_fleet_dashboard_query_returns_its_runs_series_and_no_others() {
    let fleet = fleet();
    let dashboard = fleet_dashboard();
    let mut queries = Vec::new();
    for panel in all_panels(&dashboard["panels"]) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let Some(template) = target["expr"].as_str().filter(|e| !e.trim().is_empty()) else {
                continue;
            };
            for run in RUNS {
                let mut expr = template.to_owned();
                for (name, value) in [
                    ("${run}", run),
                    ("$run", run),
                    ("${__rate_interval}", "1m"),
                    ("$__rate_interval", "1m"),
                    ("${__interval}", "15s"),
                    ("$__interval", "15s"),
                    ("${__range}", "5m"),
                    ("$__range", "5m"),
                ] {
                    expr = expr.replace(name, value);
                }
                assert!(
                    !expr.contains('$'),
                    "panel {} ({}) uses a variable this test does not fill: {template}",
                    panel["id"],
                    panel["title"]
                );
                queries.push(DashboardQuery {
                    what: format!(
                        "panel {} ({}) query {} for run {run}",
                        panel["id"], panel["title"], target["refId"]
                    ),
                    run,
                    expr,
                    last: String::new(),
                });
            }
        }
    }
    assert!(!queries.is_empty(), "the fleet dashboard has no queries");
    let c1_instance = fleet.c1.addr.to_string();
    poll(
        "every fleet dashboard query to return a finite series of its run (and none of another run's or of node-c1)",
        PROMETHEUS_LIMIT,
        || {
            queries.retain_mut(|q| !q.passes(&fleet.prometheus, &c1_instance));
            let report: Vec<String> = queries
                .iter()
                .map(|q| format!("{}: {}\n    last answer: {}", q.what, q.expr, q.last))
                .collect();
            if report.is_empty() {
                Ok(())
            } else {
                Err(format!("{} queries:\n{}", report.len(), report.join("\n")))
            }
        },
    );
}

#[test]
fn a_runs_recorded_throughput_is_the_sum_of_its_nodes() {
    let fleet = fleet();
    let prometheus = &fleet.prometheus;
    let runs = set(&RUNS);
    // One series per run, labelled job and run only.
    poll(
        "run:pulse_completion_tokens_per_second:sum for each run, labelled job and run",
        PROMETHEUS_LIMIT,
        || {
            let found = series(prometheus, "run:pulse_completion_tokens_per_second:sum")?;
            let labels: Vec<BTreeSet<String>> = found
                .iter()
                .map(|r| {
                    r["metric"]
                        .as_object()
                        .map(|m| m.keys().cloned().collect())
                        .unwrap_or_default()
                })
                .collect();
            let positive = found.iter().all(|r| value(r).is_some_and(|v| v > 0.0));
            let expected_labels = set(&["__name__", "job", "run"]);
            if label_set(&found, "run") == runs
                && found.len() == 2
                && labels.iter().all(|l| *l == expected_labels)
                && positive
            {
                Ok(())
            } else {
                Err(format!("{found:?}"))
            }
        },
    );
    // Run A's figure is the sum of its nodes' instance figures, in one evaluation.
    let run_rule = "run:pulse_completion_tokens_per_second:sum{run=\"synth_A\"}";
    let relative_difference = format!(
        "({run_rule} - on (job) sum by (job) (instance:pulse_completion_tokens_per_second:sum * on (job, instance) group_left (run) pulse_run_info{{run=\"synth_A\"}})) / on (job) {run_rule}"
    );
    poll(
        "run synth_A's completion tokens/s to equal the sum of its nodes' (relative difference within 1e-9)",
        PROMETHEUS_LIMIT,
        || {
            let found = series(prometheus, &relative_difference)?;
            match found.as_slice() {
                [one] if value(one).is_some_and(|d| d.is_finite() && d.abs() <= 1e-9) => Ok(()),
                _ => Err(format!("`{relative_difference}` gave {found:?}")),
            }
        },
    );
}

#[test]
fn the_worker_probes_no_server_and_never_raises_server_down() {
    let fleet = fleet();
    // Discovery found the rank in its folder, and it serves no HTTP.
    let status = get_json(fleet.a2.addr, "/status").expect("the worker's /status");
    assert_eq!(
        status["discovered"]["role"], "worker",
        "the worker's discovered role: {}",
        status["discovered"]
    );
    assert_eq!(
        status["discovered"]["server"]["pid"], fleet.rank_pid,
        "the worker's discovery should find the SGLang rank in its folder: {}",
        status["discovered"]
    );
    assert!(
        status["server"].is_null(),
        "a worker has no server of its own to probe, its status shows none: {}",
        status["server"]
    );
    // The GpuLost has gone through the pair: a ServerDown would have gone the same way.
    fleet.gpu_lost_notified();
    let m = fleet.a2.metrics();
    assert_eq!(
        m.get("pulse_server_up", ""),
        None,
        "a worker probes no server health URL it was not given:\n{}",
        m.0
    );
    assert!(
        !m.has_line_starting("pulse_alert_firing{alert=\"ServerDown\""),
        "a worker never raises ServerDown:\n{}",
        m.0
    );
    for am in fleet.alertmanagers {
        let alerts = held_alerts(am);
        assert!(
            !alerts.iter().any(|a| {
                a["labels"]["alertname"] == "ServerDown" && a["labels"]["run"] == "synth_A"
            }),
            "no ServerDown for run synth_A should reach Alertmanager {am}: {}",
            summarize_alerts(&alerts)
        );
    }
    let all = notifications(&fleet.receiver);
    assert!(
        !all.iter().any(|n| n.to_string().contains("ServerDown")),
        "no ServerDown should have been notified:\n{}",
        describe(&all)
    );
}
