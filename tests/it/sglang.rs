//! A real SGLang, the seed's own server, watched as a user would: SGLang 0.4.10 on the CPU
//! (installed by `scripts/install-sglang-peer.sh`) serving the tests' tiny random model, a
//! driver sending it concurrent requests through its OpenAI API, and the sidecar on `--run-dir`
//! with nothing else configured but the pace. Then its real faults: the scheduler stopped
//! (ServerHung, with its stacks), the HTTP process stopped (the kernel still accepts
//! connections for it), and the scheduler killed, as the OOM killer does (the front end answers
//! on, its gauges frozen).
//!
//! One test, one server: SGLang takes about a minute to start on two cores.

use crate::common::receiver::Receiver;
use crate::common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PEERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers");

/// The virtualenv `scripts/install-sglang-peer.sh` made.
pub(crate) fn venv() -> PathBuf {
    let venv = std::env::var_os("PULSE_SGLANG_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/pipeline-pulse/sglang-venv"));
    assert!(
        venv.join(".pulse-sglang-0.4.10.post2").exists(),
        "no SGLang at {}: run `bash scripts/install-sglang-peer.sh` (as root; it installs SGLang 0.4.10.post2 for the CPU into that virtualenv, about 6 GB, once per machine), or set PULSE_SGLANG_VENV",
        venv.display()
    );
    venv
}

/// `python -m sglang.launch_server`'s arguments after the program: what serves the tiny model
/// on two cores.
pub(crate) fn launch_args(model: &Path, port: u16) -> Vec<String> {
    let model = path_str(model).to_owned();
    [
        "-m",
        "sglang.launch_server",
        "--model-path",
        &model,
        "--host",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--device",
        "cpu",
        "--attention-backend",
        "torch_native",
        "--dtype",
        "bfloat16",
        "--enable-metrics",
        "--log-level",
        "info",
        "--max-total-tokens",
        "8192",
        "--decode-log-interval",
        "10",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// What SGLang needs on this machine, in its environment.
pub(crate) const LAUNCH_ENV: [(&str, &str); 3] = [
    ("SGLANG_USE_CPU_ENGINE", "1"),
    ("TORCHINDUCTOR_COMPILE_THREADS", "1"),
    ("HF_HUB_OFFLINE", "1"),
];

fn start_server(venv: &Path, model: &Path, run: &Path, port: u16) -> Group {
    // Appended to, as a supervisor restarting it would.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run.join("sglang.log"))
        .unwrap();
    let child = Command::new(venv.join("bin/python"))
        .args(launch_args(model, port))
        .envs(LAUNCH_ENV)
        .current_dir(run)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("start sglang.launch_server");
    Group(child)
}

fn health(port: u16) -> Option<u16> {
    try_http(([127, 0, 0, 1], port).into(), "GET", "/health", "").map(|(status, _)| status)
}

fn firing(sidecar: &Sidecar, alert: &str) -> bool {
    let labels = format!("alert=\"{alert}\",partition=\"\"");
    sidecar.metrics().get("pulse_alert_firing", &labels) == Some(1.0)
}

/// The sidecar's `/-/engine`, a supervisor's liveness probe: its status and reason.
fn engine(sidecar: &Sidecar) -> (u16, String) {
    try_http(sidecar.addr, "GET", "/-/engine", "").expect("/-/engine answers")
}

fn server_down_summary(sidecar: &Sidecar) -> Option<String> {
    let status = get_json(sidecar.addr, "/status")?;
    let alert = status["alerts"]
        .as_array()?
        .iter()
        .find(|a| a["alert"] == "ServerDown" && a["firing"] == true)?;
    Some(alert["summary"].as_str()?.to_owned())
}

#[test]
fn a_real_sglang_started_served_stopped_and_its_scheduler_killed() {
    let venv = venv();
    let python = venv.join("bin/python");
    let dir = temp_dir();
    let run = dir.path().join("run");
    let model = dir.path().join("tiny-model");
    std::fs::create_dir_all(&run).unwrap();
    let made = Command::new(&python)
        .arg(Path::new(PEERS).join("tiny_model.py"))
        .arg(&model)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );

    let port = free_port();
    let mut server = start_server(&venv, &model, &run, port);
    let server_pid = server.0.id();
    // Every notification to a webhook, to see what was sent over the whole test; a Stalled
    // threshold short enough that a run that moved were read as stalled or log-silent, and
    // longer than the server's restart takes on two loaded cores (81 s seen beside the SLURM
    // test's 10,000-job queue): the run waits on its server meanwhile.
    let hook = Receiver::start(&[]);
    let config = dir.path().join("pulse.toml");
    std::fs::write(
        &config,
        format!(
            "probe_interval = \"500ms\"\ndiscover_interval = \"1s\"\n\
             server_health_interval = \"2s\"\nserver_health_timeout = \"25s\"\n\
             alert_interval = \"500ms\"\n[rules.ServerDown]\nfor = \"1s\"\n\
             [rules.ServerHung]\nthreshold = \"5s\"\n[rules.Stalled]\nthreshold = \"240s\"\n\
             [rules.RunFinished]\nfor = \"5s\"\n\
             [[webhooks]]\nurl = {:?}\nformat = \"alertmanager\"\n",
            hook.url("/hook")
        ),
    )
    .unwrap();
    // The driver's records are `outputs/B1.jsonl`, no name discovery takes by itself.
    let records = run.join("outputs").join("*.jsonl");
    let sidecar = Sidecar::run(&[
        "--run-dir",
        path_str(&run),
        "--config",
        path_str(&config),
        "--outputs",
        path_str(&records),
        "--gpu",
        "off",
    ]);

    // Start-up: its port refused, then 503, then 200. Starting, never ServerDown.
    let mut starting_seen = false;
    wait_until("SGLang to answer /health", Duration::from_secs(400), || {
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!(
                "sglang exited ({status}):\n{}",
                std::fs::read_to_string(run.join("sglang.log")).unwrap_or_default()
            );
        }
        let status = get_json(sidecar.addr, "/status").unwrap_or_default();
        starting_seen |= status["server"]["starting"] == true;
        assert!(
            !firing(&sidecar, "ServerDown"),
            "ServerDown while starting: {status}"
        );
        assert_eq!(engine(&sidecar).0, 200, "a starting engine is alive");
        health(port) == Some(200)
    });
    assert!(starting_seen, "the sidecar said the server was starting");

    // Discovery names it: the main process, the engine, its URLs, its log in the run folder.
    // The node is the server's until the driver starts on it.
    wait_until(
        "the server discovered and up",
        Duration::from_secs(60),
        || {
            get_json(sidecar.addr, "/status").is_some_and(|s| {
                s["discovered"]["server"]["pid"] == server_pid && s["server"]["up"] == true
            })
        },
    );
    let status = get_json(sidecar.addr, "/status").unwrap();
    let found = &status["discovered"]["server"];
    assert_eq!(found["engine"], "sglang", "{found}");
    assert_eq!(
        found["health_url"],
        format!("http://127.0.0.1:{port}/health"),
        "{found}"
    );
    assert_eq!(
        found["metrics_url"],
        format!("http://127.0.0.1:{port}/metrics"),
        "{found}"
    );
    let sched =
        child_titled(server_pid, "sglang::scheduler").expect("SGLang has a scheduler child");
    assert!(
        found["workers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["pid"] == sched),
        "the scheduler {sched} among the workers: {found}"
    );
    let server_log = run.join("sglang.log");
    assert!(
        status["discovered"]["server_logs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str() == Some(path_str(&server_log))),
        "{status}"
    );

    // A driver sending concurrent requests (the run's first partition; another follows): the
    // figures as SGLang's own /metrics says them, at a moment both agree on.
    let mut driver = batch_driver(
        &python,
        &run,
        (port, &model),
        [240, 6, 48],
        &[("PULSE_MORE", "1")],
    );
    let figure = |ours: &str, theirs: &str| {
        wait_figure(&sidecar, port, ours, theirs, Duration::from_secs(90))
    };
    wait_until("requests running", Duration::from_secs(90), || {
        server_metrics(port).is_some_and(|t| total(&t, "sglang:num_running_reqs") > Some(0.0))
    });
    figure("pulse_server_running_requests", "sglang:num_running_reqs");
    figure("pulse_server_queued_requests", "sglang:num_queue_reqs");
    figure("pulse_server_kv_cache_usage_ratio", "sglang:token_usage");
    wait_until("a generation rate", Duration::from_secs(60), || {
        sidecar
            .metrics()
            .get("pulse_server_generation_tokens_per_second", "")
            .is_some_and(|r| r > 0.0)
    });
    // Its log, read as SGLang's with nothing left unparsed.
    let log_labels = format!("path=\"{}\"", path_str(&server_log));
    let sglang_format = format!("{log_labels},format=\"sglang\"");
    wait_until("a batch line read", Duration::from_secs(60), || {
        sidecar
            .metrics()
            .get("pulse_log_format_info", &sglang_format)
            == Some(1.0)
    });
    let status = driver.0.wait().unwrap();
    assert!(status.success(), "the driver: {status}");
    let m = sidecar.metrics();
    assert_eq!(
        m.get("pulse_log_lines_unparsed_total", &log_labels),
        Some(0.0),
        "{}",
        std::fs::read_to_string(&server_log).unwrap()
    );
    poll(
        "the run's 240 requests and records counted",
        Duration::from_secs(60),
        || {
            let m = sidecar.metrics();
            let seen: Vec<&str> =
                m.0.lines()
                    .filter(|l| {
                        l.starts_with("pulse_partition_requests_completed")
                            || l.starts_with("pulse_output_records_total")
                            || l.starts_with("pulse_output_error_records_total")
                    })
                    .collect();
            let done = m.partition("pulse_partition_requests_completed", "B1") == Some(240.0)
                && m.partition("pulse_output_records_total", "outputs") == Some(240.0);
            done.then_some(()).ok_or_else(|| seen.join("\n"))
        },
    );

    // The run over: SGLang's gauges keep the last batch's figures (it sets them only when it
    // logs a batch); the sidecar shows no running request nor rate from them.
    wait_until(
        "the frozen gauges left out",
        Duration::from_secs(60),
        || {
            let m = sidecar.metrics();
            m.get("pulse_server_running_requests", "").unwrap_or(0.0) == 0.0
                && m.get("pulse_server_generation_tokens_per_second", "")
                    .unwrap_or(0.0)
                    == 0.0
        },
    );
    let theirs = server_metrics(port).unwrap();
    eprintln!(
        "SGLang's own gauges after the run: running {:?}, gen_throughput {:?}",
        total(&theirs, "sglang:num_running_reqs"),
        total(&theirs, "sglang:gen_throughput")
    );
    assert!(!firing(&sidecar, "ServerDown") && !firing(&sidecar, "ServerHung"));

    // The idle server's generating /health made slow: its scheduler stopped for 15 s with
    // nothing to run, so the health ask waits for it and then answers 200. Slow but answering
    // (within the timeout) is up; nothing pages.
    let rounds = |sidecar: &Sidecar| {
        sidecar
            .metrics()
            .get("pulse_alert_rounds_total", "outcome=\"evaluated\"")
    };
    // Stopped first, asked after: on a fast machine an ask sent first could get its token
    // before the stop lands.
    signal(sched, libc::SIGSTOP);
    let stopped = Instant::now();
    let asked = std::thread::spawn(move || health(port));
    while stopped.elapsed() < Duration::from_secs(15) {
        let m = sidecar.metrics();
        assert_eq!(m.get("pulse_server_up", ""), Some(1.0), "{}", m.0);
        assert!(!firing(&sidecar, "ServerDown"));
        std::thread::sleep(Duration::from_millis(500));
    }
    // Slow, not how slow: the ask still waits on the stopped scheduler when it resumes.
    assert!(
        !asked.is_finished(),
        "/health answered while the scheduler was stopped"
    );
    signal(sched, libc::SIGCONT);
    let answer = asked.join().unwrap();
    assert_eq!(answer, Some(200), "the slow /health answered");
    let after = rounds(&sidecar).unwrap();
    wait_until("five more alert rounds", Duration::from_secs(30), || {
        rounds(&sidecar).is_some_and(|r| r >= after + 5.0)
    });
    assert_eq!(sidecar.metrics().get("pulse_server_up", ""), Some(1.0));
    assert!(!firing(&sidecar, "ServerDown") && !firing(&sidecar, "ServerHung"));

    // A second partition, paced so it outlasts the faults, whose driver retries what fails
    // (as the seed's does while its server restarts): a server fault while the run waits on
    // it pages; the run resumes on a restarted server and ends with exact counts.
    const B2: u32 = 360;
    let b2_switches = [
        ("PULSE_PARTITION", "B2"),
        ("PULSE_RETRY", "1"),
        ("PULSE_PACE", "3"),
    ];
    let _b2 = batch_driver(&python, &run, (port, &model), [B2, 6, 48], &b2_switches);
    wait_until("B2 under way", Duration::from_secs(60), || {
        sidecar
            .metrics()
            .partition("pulse_partition_requests_completed", "B2")
            .is_some_and(|n| n > 0.0)
    });

    // The scheduler stopped: the front end answers (its generating /health 503 after 20 s,
    // busy), the engine's counters stand still while the driver's requests wait. ServerHung,
    // not Stalled nor ServerDown, with the scheduler's stacks.
    signal(sched, libc::SIGSTOP);
    let stopped = Instant::now();
    wait_until("ServerHung", Duration::from_secs(90), || {
        firing(&sidecar, "ServerHung")
    });
    eprintln!(
        "ServerHung {:?} after the scheduler's SIGSTOP",
        stopped.elapsed()
    );
    assert!(!firing(&sidecar, "Stalled") && !firing(&sidecar, "ServerDown"));
    assert_eq!(sidecar.metrics().get("pulse_server_up", ""), Some(1.0));
    // Its supervisor's liveness probe says it, though SGLang's own /health may not yet.
    let (code, why) = engine(&sidecar);
    assert_eq!(code, 503, "{why}");
    assert!(why.starts_with("ServerHung: "), "{why}");
    let mut stacks = None;
    wait_until("the scheduler's stacks", Duration::from_secs(60), || {
        stacks = get_json(sidecar.addr, "/api/stacks");
        stacks.as_ref().is_some_and(|s| {
            s["processes"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["pid"] == sched))
        })
    });
    let stacks = stacks.unwrap();
    let of_scheduler = stacks["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == sched)
        .unwrap();
    assert_eq!(of_scheduler["wait"], "stopped", "{of_scheduler}");
    signal(sched, libc::SIGCONT);
    wait_until("ServerHung resolved", Duration::from_secs(90), || {
        !firing(&sidecar, "ServerHung")
    });
    assert_eq!(engine(&sidecar).0, 200, "alive again");

    // The HTTP process stopped: the kernel still completes handshakes on its port, and its
    // /health gives no answer. Not up within the health timeout (25 s: SGLang bounds its own
    // at 20 s) and interval, said as hung.
    signal(server_pid, libc::SIGSTOP);
    let stopped = Instant::now();
    wait_until("the stopped server not up", Duration::from_secs(60), || {
        sidecar.metrics().get("pulse_server_up", "") == Some(0.0)
    });
    eprintln!(
        "not up {:?} after the HTTP process's SIGSTOP",
        stopped.elapsed()
    );
    wait_until("ServerDown, hung", Duration::from_secs(30), || {
        server_down_summary(&sidecar).is_some_and(|s| s.contains("HTTP process is hung"))
    });
    eprintln!("ServerDown (hung) {:?} after it", stopped.elapsed());
    signal(server_pid, libc::SIGCONT);
    wait_until("up again", Duration::from_secs(60), || {
        sidecar.metrics().get("pulse_server_up", "") == Some(1.0)
    });

    // The scheduler killed, as the OOM killer does: the front end answers on (503 from its
    // generating /health) and its gauges stay where they were. A crash behind a live API.
    signal(sched, libc::SIGKILL);
    let killed = Instant::now();
    wait_until("ServerDown, a crash", Duration::from_secs(60), || {
        server_down_summary(&sidecar)
            .is_some_and(|s| s.contains("engine crashed behind its live API"))
    });
    eprintln!(
        "ServerDown (crash) {:?} after the scheduler's SIGKILL",
        killed.elapsed()
    );
    assert!(
        server.0.try_wait().unwrap().is_none(),
        "the front end still runs"
    );
    let m = sidecar.metrics();
    assert_eq!(m.get("pulse_server_up", ""), Some(0.0));
    assert_eq!(m.get("pulse_server_running_requests", ""), None);
    let status = get_json(sidecar.addr, "/status").unwrap();
    assert!(
        status["server"]["engine_dead"]
            .as_str()
            .is_some_and(|d| d.contains(&format!("sglang::scheduler (pid {sched})"))),
        "{status}"
    );

    // Restarted as its supervisor would (the rest of it killed, the same command, the same
    // port, its log appended to): discovered anew, and the driver's retries finish B2 with
    // every request counted once and no error record.
    let before_restart = hook.received().len();
    drop(server);
    let server = start_server(&venv, &model, &run, port);
    let restarted = server.0.id();
    let started = Instant::now();
    wait_until("the restarted server up", Duration::from_secs(400), || {
        get_json(sidecar.addr, "/status").is_some_and(|s| {
            s["discovered"]["server"]["pid"] == restarted && s["server"]["up"] == true
        })
    });
    eprintln!("the restarted server up after {:?}", started.elapsed());
    poll(
        "B2's requests and records counted",
        Duration::from_secs(400),
        || {
            let m = sidecar.metrics();
            let b2 = m.partition("pulse_partition_requests_completed", "B2");
            let records = m.partition("pulse_output_records_total", "outputs");
            (b2 == Some(B2 as f64) && records == Some((240 + B2) as f64))
                .then_some(())
                .ok_or_else(|| format!("B2 {b2:?}, records {records:?}"))
        },
    );
    let m = sidecar.metrics();
    assert_eq!(
        m.partition("pulse_output_error_records_total", "outputs"),
        Some(0.0)
    );
    let told_since = |from: usize, alert: &str, status: &str| {
        hook.received()[from..]
            .iter()
            .flat_map(|r| r.json()["alerts"].as_array().cloned().unwrap_or_default())
            .filter(|a| a["labels"]["alertname"] == alert && a["status"] == status)
            .collect::<Vec<_>>()
    };
    let told = |alert: &str, status: &str| told_since(0, alert, status);
    hook.wait("RunFinished after B2", Duration::from_secs(60), |_| {
        told("PartitionFinished", "firing")
            .iter()
            .any(|a| a["labels"]["partition"] == "B2")
            && !told_since(before_restart, "RunFinished", "firing").is_empty()
    });
    assert!(
        hook.received()[..before_restart]
            .iter()
            .all(|r| !r.body.contains("RunFinished")),
        "RunFinished before the run's last partition"
    );
    let b2_done = told("PartitionFinished", "firing")
        .into_iter()
        .find(|a| a["labels"]["partition"] == "B2")
        .unwrap();
    assert_eq!(
        b2_done["annotations"]["summary"],
        format!("{B2} requests done"),
        "{b2_done}"
    );

    // The run over, the server stopped with SIGTERM (it drains and exits): the end of a
    // finished run's server pages nothing.
    let sent = hook.received().len();
    signal(restarted, libc::SIGTERM);
    let mut server = server;
    wait_exit(&mut server.0, Duration::from_secs(60));
    wait_until("the server seen gone", Duration::from_secs(60), || {
        sidecar.metrics().get("pulse_server_up", "") != Some(1.0)
    });
    let after = rounds(&sidecar).unwrap();
    wait_until("ten more alert rounds", Duration::from_secs(60), || {
        rounds(&sidecar).is_some_and(|r| r >= after + 10.0)
    });
    assert!(!firing(&sidecar, "ServerDown"));
    // A group's payload repeats its alerts still firing: the run's end notices stay so.
    let paged: Vec<serde_json::Value> = hook.received()[sent..]
        .iter()
        .flat_map(|r| r.json()["alerts"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["status"] == "firing")
        .filter(|a| {
            !["RunFinished", "PartitionFinished"]
                .contains(&a["labels"]["alertname"].as_str().unwrap_or(""))
        })
        .collect();
    assert!(paged.is_empty(), "paged after the run: {paged:?}");

    // Over the whole test, the run moved whenever its server did: neither Stalled nor
    // LogSilent (its records and log lines arrive in either order) was ever sent.
    for alert in ["Stalled", "LogSilent"] {
        assert!(told(alert, "firing").is_empty(), "{alert} sent");
    }
}
