//! `--run-dir` and `discover`: a run folder with a real driver process writing its log (found
//! by its open file, not its name), a real HTTP server whose command line is an SGLang launch,
//! three partitions of outputs and inputs, and one partition left by an earlier run.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// `python3 -m sglang.launch_server --port N`: serves /health and SGLang's metrics.
const SERVER: &str = r#"
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/health": b"", "/metrics": b"sglang:num_running_reqs 12\nsglang:num_queue_reqs 3\nsglang:gen_throughput 850.5\nsglang:token_usage 0.4\n"}.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(body or b"")
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

/// A machine has one inference server; these tests each start one and look for it, so they
/// take turns.
static ONE_SERVER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_SERVER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

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

/// The fake SGLang server on a free port, once it answers; its module lives outside the run.
fn sglang_server(modules: &Path) -> (Killed, u16) {
    write(&modules.join("sglang/__init__.py"), "");
    write(&modules.join("sglang/launch_server.py"), SERVER);
    let port = free_port();
    let child = Command::new(require_tool("python3", "python3"))
        .args(["-m", "sglang.launch_server", "--model-path", "/m", "--port"])
        .arg(port.to_string())
        .current_dir(modules)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Killed(child);
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_for("the SGLang server to answer", || {
        matches!(try_http(addr, "GET", "/health", ""), Some((200, _)))
    });
    (server, port)
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
    let _serial = serial();
    let run = run_folder();
    let modules = run._dir.path().join("modules");
    let (server, port) = sglang_server(&modules);
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
process_match = {process}
server_health_url = "http://127.0.0.1:{port}/health"
inputs = ["{root}/prepared/*/prompts*.jsonl"]

[[logs]]
path = "{root}/logs/inference_all.log"
format = "run_inference"

[[outputs]]
glob = "{root}/prepared/*/raw_responses.jsonl"
"#,
        process = toml::Value::String(driver.join(" ")),
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
    let _serial = serial();
    let run = run_folder();
    let modules = run._dir.path().join("modules");
    let (_server, port) = sglang_server(&modules);
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
    let _serial = serial();
    let run = run_folder();
    let root = run.root.display().to_string();
    let sidecar = Sidecar::run(&[
        "--run-dir",
        &root,
        "--discover-interval",
        "1s",
        "--probe-interval",
        "200ms",
        "--gpu",
        "off",
    ]);
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
    let modules = run._dir.path().join("modules");
    let (_server, port) = sglang_server(&modules);
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
