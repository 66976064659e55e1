//! `--run-dir` and `discover`: a run folder with a real driver process writing its log (found
//! by its open file, not its name), a real HTTP server whose command line is an SGLang launch,
//! three partitions of outputs and inputs, and one partition left by an earlier run. Also two
//! runs on one node, each driver talking to its own vLLM server (which one is whose is read
//! from the drivers' TCP connections), and a worker node found by its SGLang `--node-rank`.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A driver that writes a progress log and holds it open; its command line says nothing of
/// being one.
const WRITER: &str = r#"
import sys, time
with open(sys.argv[1], "a") as log:
    log.write("Model: /shared/kimi-k2.5-int4\n")
    for name, done, plan in [("B1_glaive", 40, 40), ("B2_code", 30, 60)]:
        log.write(f"Processing: {name} (SHORT)\n{name}: {plan} prompts\n")
        log.write(f"  {done}/{plan} (0 err) 2.0 req/s avg_comp=300tok ETA=15s\n")
        log.flush()
    time.sleep(600)
"#;

struct Run {
    _dir: tempfile::TempDir,
    root: PathBuf,
    log: PathBuf,
    _writer: Killed,
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn lines(n: usize, text: &str) -> String {
    (0..n).map(|i| format!("{{\"id\":{i},{text}}}\n")).collect()
}

/// The run folder, its driver started and its log written.
fn run_folder() -> Run {
    let dir = temp_dir();
    let root = dir.path().join("synth_100k");
    let prepared = root.join("prepared");
    // The earlier run's partition: older files, no plan, not in this run's log.
    let old = prepared.join("B0_old/raw_responses.jsonl");
    write(&old, &lines(3000, "\"text\":\"old\""));
    set_mtime(&old, 7200);
    for (name, records, plan) in [
        ("B1_glaive", 40, 40),
        ("B2_code", 30, 60),
        ("B3_long", 0, 50),
    ] {
        let folder = prepared.join(name);
        write(
            &folder.join("raw_responses.jsonl"),
            &lines(
                records,
                "\"text\":\"x\",\"meta_info\":{\"completion_tokens\":300}",
            ),
        );
        write(
            &folder.join("prompts.jsonl"),
            &lines(plan, "\"prompt\":\"p\""),
        );
    }
    let log = root.join("logs/inference_all.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let writer = Killed(python(WRITER, &[path_str(&log)]));
    wait_for("the driver to write its log", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("30/60"))
    });
    Run {
        _dir: dir,
        root,
        log,
        _writer: writer,
    }
}

fn discover(dir: &Path) -> toml::Value {
    let out = Command::new(BIN).arg("discover").arg(dir).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    toml::from_str(&stdout).unwrap_or_else(|e| panic!("{e}:\n{stdout}"))
}

#[test]
fn discover_prints_the_config_of_what_it_found() {
    let run = run_folder();
    // Started in the run folder: that ties it to the run.
    let server = FakeServer::start(Engine::Sglang, &[], &run.root, true);
    let port = server.port;
    let got = discover(&run.root);
    let driver_pid = run._writer.0.id();
    let driver = std::fs::read(format!("/proc/{driver_pid}/cmdline")).unwrap();
    let driver: Vec<String> = driver
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let root = run.root.display();
    let expected: toml::Value = toml::from_str(&format!(
        r#"
role = "driver"
process_match = {process}
process_dir = "{root}"
server_health_url = "http://127.0.0.1:{port}/health"
server_health_interval = "60s"
server_health_timeout = "25s"
inputs = ["{root}/prepared/*/prompts*.jsonl"]

[[logs]]
path = "{root}/logs/inference_all.log"
format = "run_inference"

[[outputs]]
glob = "{root}/prepared/*/raw_responses.jsonl"
"#,
        // The program (`python3 -c SCRIPT`), not its arguments: the same driver restarted
        // with others is still the driver.
        process = toml::Value::String(driver[..3].join(" ")),
    ))
    .unwrap();
    assert_eq!(got, expected);
    drop(server);
    // Without --enable-metrics, SGLang serves none: nothing to scrape is proposed.
    assert!(got.get("server_metrics_url").is_none());
}

/// The exposition without what depends on when it was taken.
fn figures(m: &Metrics) -> Vec<String> {
    m.0.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            ![
                "timestamp",
                "_seconds",
                "pulse_collector",
                "pulse_process_",
                "process_",
                "pulse_build",
            ]
            .iter()
            .any(|t| l.contains(t))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn run_dir_serves_what_the_explicit_flags_serve_without_the_previous_partition() {
    let run = run_folder();
    let server = FakeServer::start(Engine::Sglang, &[], &run.root, true);
    let port = server.port;
    let root = run.root.display().to_string();
    let discovered = run_once(&run.root, &["--run-dir", &root]);
    let outputs = format!("{root}/prepared/*/raw_responses.jsonl");
    let inputs = format!("{root}/prepared/*/prompts*.jsonl");
    let health = format!("http://127.0.0.1:{port}/health");
    let explicit = run_once(
        &run.root,
        &[
            "--log",
            path_str(&run.log),
            "--outputs",
            &outputs,
            "--inputs",
            &inputs,
            "--process-match",
            "time.sleep(600)",
            "--server-health-url",
            &health,
        ],
    );
    assert_eq!(figures(&discovered), figures(&explicit));
    // The earlier run's 3000 records are its own, not this run's.
    assert_eq!(
        discovered.get("pulse_run_requests_completed", ""),
        Some(70.0)
    );
    assert_eq!(
        discovered.get("pulse_run_requests_planned", ""),
        Some(150.0)
    );
    assert_eq!(
        discovered.partition("pulse_output_records_total", "B0_old"),
        Some(3000.0)
    );
    assert_eq!(
        discovered.get("pulse_pipeline_process_up", ""),
        Some(1.0),
        "{}",
        discovered.0
    );
    assert_eq!(discovered.get("pulse_server_up", ""), Some(1.0));

    let out = Command::new(BIN)
        .args(["status", "--json", "--gpu", "off", "--run-dir", &root])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["run"]["completed"], 70, "{status}");
    assert_eq!(status["previous"][0]["name"], "B0_old", "{status}");
    assert_eq!(status["previous"][0]["records"], 3000);
    let names: Vec<&str> = status["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["B1_glaive", "B2_code", "B3_long"]);
    assert_eq!(status["discovered"]["driver"]["pid"], run._writer.0.id());
    let text = Command::new(BIN)
        .args(["status", "--gpu", "off", "--run-dir", &root])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("run [") && text.contains(" 70/150"), "{text}");
    assert!(
        text.contains("PREVIOUS") && text.contains("3000 records"),
        "{text}"
    );
}

#[test]
fn a_server_started_after_the_sidecar_is_found() {
    let run = run_folder();
    let root = run.root.display().to_string();
    let sidecar = watching(&root);
    sidecar.wait_log("discovered: no SGLang or vLLM server process");
    let m = sidecar.wait_metrics("the run read", |m| {
        m.get("pulse_run_requests_completed", "") == Some(70.0)
    });
    assert_eq!(
        m.get("pulse_server_up", ""),
        None,
        "no server yet:\n{}",
        m.0
    );
    let server = FakeServer::start(Engine::Sglang, &[], &run.root, true);
    let port = server.port;
    let line = sidecar.wait_log("discovered: sglang server pid");
    assert!(
        line.contains(&format!("http://127.0.0.1:{port}/health")),
        "{line}"
    );
    sidecar.wait_metrics("the new server probed", |m| {
        m.get("pulse_server_up", "") == Some(1.0)
    });
    let status = get_json(sidecar.addr, "/status").unwrap();
    assert_eq!(
        status["discovered"]["server"]["engine"], "sglang",
        "{status}"
    );
    assert_eq!(status["server"]["up"], true);
}

/// A driver that writes its progress log in its run folder and keeps it open, then talks to
/// its server over one kept-alive connection (`GET /health` every 0.5 s), connecting again
/// whenever the connection drops.
const TALKING_DRIVER: &str = r#"
import http.client, sys, time
log_path, port = sys.argv[1], int(sys.argv[2])
with open(log_path, "a") as log:
    log.write("Model: /shared/kimi-k2.5-int4\n")
    log.write("Processing: B1_glaive (SHORT)\nB1_glaive: 400 prompts\n")
    log.write("  40/400 (0 err) 2.0 req/s avg_comp=300tok ETA=180s\n")
    log.flush()
    conn = None
    for _ in range(1200):
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            conn.getresponse().read()
        except Exception:
            if conn is not None:
                conn.close()
            conn = None
        time.sleep(0.5)
"#;

/// A run folder's driver talking to the server on `port`, once its log is written.
fn talking_driver(root: &Path, port: u16) -> Killed {
    let log = root.join("logs/progress.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let driver = Killed(python(TALKING_DRIVER, &[path_str(&log), &port.to_string()]));
    wait_for("the driver to write its log", || {
        std::fs::read_to_string(log.as_path()).is_ok_and(|t| t.contains("40/400"))
    });
    driver
}

/// Polls the sidecar's `/status` until `ready` accepts it, or fails after 20 s showing what
/// discovery last reported.
fn wait_status(
    sidecar: &Sidecar,
    what: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    poll(what, Duration::from_secs(20), || {
        let status = get_json(sidecar.addr, "/status").unwrap_or_default();
        if ready(&status) {
            Ok(status)
        } else {
            Err(format!("discovered = {}", status["discovered"]))
        }
    })
}

#[test]
fn two_runs_on_one_node_each_take_the_server_their_driver_talks_to() {
    let dir = temp_dir();
    // Both servers run from a folder outside both runs, named in neither's arguments: only
    // their drivers' connections tie them to a run.
    let server_a = FakeServer::start(Engine::Vllm, &[], dir.path(), true);
    let server_b = FakeServer::start(Engine::Vllm, &[], dir.path(), true);
    let (port_a, port_b) = (server_a.port, server_b.port);
    let (pid_a, pid_b) = (server_a.pid(), server_b.pid());
    let health_a = format!("http://127.0.0.1:{port_a}/health");
    let health_b = format!("http://127.0.0.1:{port_b}/health");
    let root_a = dir.path().join("synth_A");
    let root_b = dir.path().join("synth_B");
    let _driver_a = talking_driver(&root_a, port_a);
    let _driver_b = talking_driver(&root_b, port_b);
    let sidecar = |root: &Path| watching(path_str(root));
    let a = sidecar(&root_a);
    let b = sidecar(&root_b);
    let mut run_ids = Vec::new();
    for (s, run, pid, health) in [
        (&a, "synth_A", pid_a, &health_a),
        (&b, "synth_B", pid_b, &health_b),
    ] {
        let status = wait_status(
            s,
            &format!("{run}'s sidecar to take the server its driver talks to (pid {pid})"),
            |st| st["discovered"]["server"]["pid"] == pid,
        );
        let server = &status["discovered"]["server"];
        assert_eq!(
            server["engine"], "vllm",
            "{run}'s server: expected engine vllm, got {server}"
        );
        assert_eq!(
            server["health_url"],
            health.as_str(),
            "{run}'s server: expected health URL {health}, got {server}"
        );
        s.wait_metrics(&format!("{run}'s server probed up"), |m| {
            m.get("pulse_server_up", "") == Some(1.0)
        });
        let m = s.metrics();
        let info = run_info(&m).unwrap_or_else(|| {
            panic!(
                "{run}'s sidecar should export pulse_run_info{{run=\"{run}\"}}, it exports none:\n{}",
                m.0
            )
        });
        let label = |name: &str| info.get(name).cloned().unwrap_or_default();
        assert_eq!(
            (label("run"), label("role")),
            (run.to_owned(), "driver".to_owned()),
            "{run}'s pulse_run_info: the run is named for its folder, and its driver is here; got {info:?}"
        );
        let id = label("run_id");
        assert!(
            id.len() == 12 && id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')),
            "{run}'s run_id should be 12 lowercase hex digits, got {info:?}"
        );
        run_ids.push(id);
    }
    assert_ne!(run_ids[0], run_ids[1], "two runs, two run ids");

    // A's server goes away: A's sidecar keeps probing it (down), and takes neither B's server,
    // the only other one, nor a `vllm serve --help=all` started in A's folder, which names vLLM
    // and is tied to the run but prints its help and serves nothing.
    drop(server_a.process);
    a.wait_metrics("A's server probed down", |m| {
        m.get("pulse_server_up", "") == Some(0.0)
    });
    let bin = dir.path().join("bin");
    write(&bin.join("vllm"), "import time\ntime.sleep(600)\n");
    let help = Killed(
        Command::new(require_tool("python3", "python3"))
            .arg(bin.join("vllm"))
            .args(["serve", "--help=all"])
            .current_dir(root_a.as_path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let help_pid = help.0.id();
    // Until the child has exec'd, /proc shows the test's own command line.
    wait_for("the `vllm serve --help=all` command line", || {
        std::fs::read(format!("/proc/{help_pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains("--help=all"))
    });
    // A new input file that discovery reports: once /status lists it, a scan made after A's
    // server went away and after the help process started has been taken in.
    write(
        &root_a.join("prepared/B9_marker/prompts.jsonl"),
        "{\"id\":0,\"prompt\":\"p\"}\n",
    );
    let marker = format!("{}/prepared/*/prompts*.jsonl", root_a.display());
    let status = wait_status(
        &a,
        &format!("A's discovery to scan again and list {marker}"),
        |st| {
            st["discovered"]["inputs"]
                .as_array()
                .is_some_and(|inputs| inputs.iter().any(|g| g == marker.as_str()))
        },
    );
    let server = &status["discovered"]["server"];
    assert!(
        server["pid"] == pid_a && server["health_url"] == health_a.as_str(),
        "A's server went away: A's sidecar should keep it (pid {pid_a}, {health_a}) until the run's own next server appears; it has {server} (B's server is pid {pid_b}, the `vllm serve --help=all` pid {help_pid})"
    );
    assert_eq!(
        a.metrics().get("pulse_server_up", ""),
        Some(0.0),
        "A's sidecar still probes A's server, which is down"
    );
    let status = get_json(b.addr, "/status").expect("B's /status");
    assert_eq!(
        status["discovered"]["server"]["pid"], pid_b,
        "B keeps the server its driver talks to: {}",
        status["discovered"]
    );
    assert_eq!(
        b.metrics().get("pulse_server_up", ""),
        Some(1.0),
        "B's server is up and probed"
    );
    drop(help);
}

#[test]
fn a_worker_node_is_found_by_its_node_rank() {
    let dir = temp_dir();
    let root = dir.path().join("synth_100k");
    std::fs::create_dir_all(root.as_path()).unwrap();
    // The second node of a two-node SGLang server, started in the run folder; no driver here.
    let _rank = FakeServer::start(Engine::Sglang, SGLANG_RANK_1, &root, true);
    let got = discover(&root);
    assert_eq!(
        got.get("role").and_then(toml::Value::as_str),
        Some("worker"),
        "a server with --node-rank 1 and no driver makes the node a worker: expected role = \"worker\" in {got:?}"
    );
    assert!(
        got.get("server_health_url").is_none() && got.get("server_metrics_url").is_none(),
        "a rank above 0 serves no HTTP of its own: no server URL should be proposed, got {got:?}"
    );
}

/// A server the run does not use (a colleague's, the next job's warming up) is not the run's:
/// the driver neither talks to it nor shares the run folder with it, so it is not probed, not
/// shown, and `/status` says why it was passed over, whatever else serves on the node. (On a
/// node where it is the only server, discover/procs.rs' unit tests hold the rule.)
#[test]
fn a_server_the_run_does_not_use_is_not_the_runs() {
    let run = run_folder();
    let elsewhere = run._dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let other = FakeServer::start(Engine::Vllm, &[], &elsewhere, true);
    let root = run.root.display().to_string();
    let sidecar = watching(&root);
    let pid = other.pid();
    let status = wait_status(
        &sidecar,
        &format!("discovery to pass over the server pid {pid}"),
        |st| {
            st["discovered"]["notes"].as_array().is_some_and(|notes| {
                notes
                    .iter()
                    .any(|n| n.to_string().contains(&format!("pid {pid} ")))
            })
        },
    );
    assert!(
        status["discovered"]["server"].is_null() && status["server"].is_null(),
        "the driver does not talk to it and it is not in the run folder: {}",
        status["discovered"]
    );
    let m = sidecar.wait_metrics("the run read", |m| {
        m.get("pulse_run_requests_completed", "") == Some(70.0)
    });
    assert_eq!(m.get("pulse_server_up", ""), None, "{}", m.0);
    assert!(
        !m.0.contains("pulse_server_running_requests"),
        "none of its figures is the run's:\n{}",
        m.0
    );
    let text = discover(&run.root);
    assert!(
        text.get("server_health_url").is_none(),
        "`discover` proposes no server URL: {text:?}"
    );
}

/// A driver as datatrove (a socket per request) or an httpx pool the server closes when idle
/// talks to its server: a new connection for each request, held about 2.5 s (the request in
/// flight), then none for 4 s, several discovery intervals.
const REQUEST_PER_CONNECTION_DRIVER: &str = r#"
import http.client, sys, time
log_path, port = sys.argv[1], int(sys.argv[2])
with open(log_path, "a") as log:
    log.write("Model: /shared/kimi-k2.5-int4\n")
    log.write("Processing: B1_glaive (SHORT)\nB1_glaive: 400 prompts\n")
    log.write("  40/400 (0 err) 2.0 req/s avg_comp=300tok ETA=180s\n")
    log.flush()
    for _ in range(200):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("GET", "/health")
            conn.getresponse().read()
            time.sleep(2.5)
        except Exception:
            pass
        conn.close()
        time.sleep(4)
"#;

/// Issue 58: a server tied by the driver's connection stays tied (and probed) through the
/// scans that find the driver between two requests with no connection, and the tie ends,
/// said once, when that driver exits.
#[test]
fn a_driver_with_a_connection_per_request_keeps_its_server_between_requests() {
    let dir = temp_dir();
    // Started outside the run folder, named in nothing of it: only the connection ties it.
    let server = FakeServer::start(Engine::Vllm, &[], dir.path(), true);
    let pid = server.pid();
    let root = dir.path().join("synth_req");
    let log = root.join("logs/progress.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let mut driver = Killed(python(
        REQUEST_PER_CONNECTION_DRIVER,
        &[path_str(&log), &server.port.to_string()],
    ));
    wait_for("the driver to write its log", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("40/400"))
    });
    let sidecar = watching(path_str(&root));
    wait_status(
        &sidecar,
        "the server tied by the driver's connection",
        |st| st["discovered"]["server"]["pid"] == pid,
    );
    // Two of the driver's pauses, each several scans with no connection: still tied, probed.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < until {
        let status = get_json(sidecar.addr, "/status").unwrap();
        let found = &status["discovered"]["server"];
        assert_eq!(
            found["pid"], pid,
            "untied between requests: {}",
            status["discovered"]
        );
        assert!(
            found["by"]
                .as_str()
                .is_some_and(|b| b.starts_with("the driver's connection to")),
            "{found}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(sidecar.metrics().get("pulse_server_up", ""), Some(1.0));
    // The driver exits: the tie is its, and ends with it, said once; from the tie on, no scan
    // said the server is not the run's.
    driver.0.kill().unwrap();
    let _ = driver.0.wait();
    let lines = sidecar.log_until("is no longer the run's server");
    let tied_at = lines
        .iter()
        .position(|l| l.contains(&format!("server pid {pid} (by the driver's connection")))
        .unwrap_or(0);
    let after: Vec<&String> = lines[tied_at..]
        .iter()
        .filter(|l| l.contains("is not the run's"))
        .collect();
    assert!(after.is_empty(), "said against the tie: {after:#?}");
    let line = lines.last().unwrap();
    assert!(line.contains("which has exited"), "{line}");
    wait_status(&sidecar, "the server untied", |st| {
        st["discovered"]["server"].is_null()
    });
}
