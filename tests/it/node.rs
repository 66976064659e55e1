//! Node health end to end: simulated GPUs through the real sampler, NVML absent on this
//! machine, a real child process, and a real HTTP server playing SGLang and vLLM.

use crate::common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn simulated_gpus_flow_through_the_sampler() {
    let sidecar = Sidecar::run(&["--gpu", "simulated", "--gpu-interval", "100ms"]);
    let m = sidecar.wait_metrics("eight GPUs", |m| m.get("pulse_gpus", "") == Some(8.0));
    let infos =
        m.0.lines()
            .filter(|l| l.starts_with("pulse_gpu_info{"))
            .collect::<Vec<_>>();
    assert_eq!(infos.len(), 8);
    assert!(
        infos.iter().all(|l| l.contains("name=\"simulated\"")),
        "{infos:?}"
    );
    let gpu0 = "gpu=\"0\",uuid=\"GPU-00000000-0000-0000-0000-000000000000\"";
    let util = m.get("pulse_gpu_utilization_ratio", gpu0).unwrap();
    assert!((0.0..=1.0).contains(&util), "{util}");
    assert!(
        m.get("pulse_gpu_memory_used_bytes", gpu0).unwrap()
            <= m.get("pulse_gpu_memory_total_bytes", gpu0).unwrap()
    );
    assert_eq!(m.get("pulse_gpu_power_limit_watts", gpu0), Some(700.0));
    assert_eq!(
        m.get(
            "pulse_gpu_xid_errors_total",
            &format!("{gpu0},xid=\"other\"")
        ),
        Some(0.0),
        "every GPU has its XID series from the start"
    );
    assert_eq!(m.get("pulse_gpu_up", gpu0), Some(1.0));
    assert!(m
        .get("pulse_gpu_last_sample_timestamp_seconds", "")
        .is_some());
    assert_eq!(m.get("pulse_collector_up", "collector=\"gpu\""), Some(1.0));
    assert!(
        !m.has_line_starting("pulse_gpu_process_memory_used_bytes{"),
        "per-process memory is off by default"
    );
}

#[test]
fn per_process_gpu_memory_when_asked_for() {
    let sidecar = Sidecar::run(&[
        "--gpu",
        "simulated",
        "--gpu-interval",
        "100ms",
        "--gpu-processes",
    ]);
    let m = sidecar.wait_metrics("eight GPUs", |m| m.get("pulse_gpus", "") == Some(8.0));
    let per_process: Vec<&str> =
        m.0.lines()
            .filter(|l| l.starts_with("pulse_gpu_process_memory_used_bytes{"))
            .collect();
    assert_eq!(per_process.len(), 8, "{per_process:?}");
    let gpu3 = "gpu=\"3\",uuid=\"GPU-00000000-0000-0000-0000-000000000003\"";
    // No server or driver is known here, so no role.
    let worker = format!("{gpu3},pid=\"41003\",process=\"sglang::scheduler_TP3\",role=\"\"");
    assert_eq!(
        m.get("pulse_gpu_process_memory_used_bytes", &worker),
        m.get("pulse_gpu_memory_used_bytes", gpu3),
        "the one worker holds all the GPU's used memory"
    );
}

/// Whether this machine has the NVIDIA driver's NVML (CI machines do not).
fn nvml_present() -> bool {
    std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libnvidia-ml.so.1"))
}

#[test]
fn without_nvml_auto_carries_on_and_on_refuses_to_start() {
    if nvml_present() {
        // On a GPU machine both modes must simply work.
        let sidecar = Sidecar::run(&["--gpu", "on"]);
        let m = sidecar.wait_metrics("the GPUs", |m| m.get("pulse_gpus", "").is_some());
        assert_eq!(m.get("pulse_collector_up", "collector=\"gpu\""), Some(1.0));
        return;
    }
    let sidecar = Sidecar::run(&["--gpu", "auto"]);
    sidecar.wait_log("NVML is not available");
    let m = sidecar.metrics();
    assert_eq!(m.get("pulse_collector_up", "collector=\"gpu\""), Some(0.0));
    assert_eq!(m.get("pulse_gpus", ""), None);
    assert_eq!(sidecar.get("/-/healthy").status, 200);

    let out = std::process::Command::new(BIN)
        .args(["run", "--gpu", "on", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("NVML is not available"), "{stderr}");
}

#[test]
fn process_probe_sees_a_real_child_run_and_exit() {
    let marker = format!("pulse-node-test-{}", std::process::id());
    let mut child = std::process::Command::new("sh")
        .args(["-c", "sleep 60; true", &marker])
        .spawn()
        .unwrap();
    let sidecar = Sidecar::run(&["--process-match", &marker, "--probe-interval", "100ms"]);
    sidecar.wait_metrics("the process up", |m| {
        m.get("pulse_pipeline_process_up", "") == Some(1.0)
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let m = sidecar.wait_metrics("the process down", |m| {
        m.get("pulse_pipeline_process_up", "") == Some(0.0)
    });
    assert_eq!(
        m.get("pulse_collector_up", "collector=\"process\""),
        Some(1.0)
    );
    sidecar.wait_log(&format!("pipeline process {} exited", child.id()));
}

#[test]
fn process_probe_notices_a_new_driver_and_one_that_takes_over() {
    let marker = format!("pulse-node-takeover-{}", std::process::id());
    let spawn = || {
        std::process::Command::new("sh")
            .args(["-c", "sleep 60; true", &marker])
            .spawn()
            .unwrap()
    };
    let sidecar = Sidecar::run(&["--process-match", &marker, "--probe-interval", "100ms"]);
    sidecar.wait_metrics("the probe's first round", |m| {
        m.get("pulse_pipeline_process_up", "") == Some(0.0)
    });
    // The job starts after the sidecar: noticed as a start.
    let mut first = spawn();
    sidecar.wait_log(&format!("pipeline process {} is running", first.id()));
    // A second driver (a retry wrapper, say) starts beside it: the first is still followed.
    let mut second = spawn();
    // It takes over when the first exits, with no probe in between seeing nothing.
    first.kill().unwrap();
    first.wait().unwrap();
    sidecar.wait_log(&format!(
        "pipeline process {} exited; {} runs in its place",
        first.id(),
        second.id()
    ));
    assert_eq!(
        sidecar.metrics().get("pulse_pipeline_process_up", ""),
        Some(1.0)
    );
    second.kill().unwrap();
    second.wait().unwrap();
    sidecar.wait_metrics("the process down", |m| {
        m.get("pulse_pipeline_process_up", "") == Some(0.0)
    });
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Sglang,
    Vllm,
    Unavailable,
    Hang,
}

/// A real HTTP server that plays an inference server in the given mode.
fn fake_server(mode: Arc<Mutex<Mode>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(Mutex::new(0u64));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mode = *mode.lock().unwrap();
            let served = served.clone();
            std::thread::spawn(move || answer(stream, mode, &served));
        }
    });
    addr
}

fn answer(mut stream: TcpStream, mode: Mode, served: &Mutex<u64>) {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let path = String::from_utf8_lossy(&request)
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_owned();
    let (status, body) = match (mode, path.as_str()) {
        (Mode::Hang, _) => {
            std::thread::sleep(Duration::from_secs(30));
            return;
        }
        (Mode::Unavailable, _) => ("503 Service Unavailable", "loading".to_owned()),
        (_, "/health") => ("200 OK", String::new()),
        (Mode::Sglang, "/metrics") => (
            "200 OK",
            "# HELP sglang:num_running_reqs The number of running requests.\n\
             # TYPE sglang:num_running_reqs gauge\n\
             sglang:num_running_reqs{model_name=\"kimi\"} 148.0\n\
             sglang:num_queue_reqs{model_name=\"kimi\"} 37.0\n\
             sglang:gen_throughput{model_name=\"kimi\"} 1234.5\n"
                .to_owned(),
        ),
        (Mode::Vllm, "/metrics") => {
            let mut n = served.lock().unwrap();
            *n += 1;
            (
                "200 OK",
                format!(
                    "# TYPE vllm:num_requests_running gauge\n\
                     vllm:num_requests_running{{model_name=\"llama\"}} 12.0\n\
                     vllm:num_requests_waiting{{model_name=\"llama\"}} 3.0\n\
                     # TYPE vllm:generation_tokens_total counter\n\
                     vllm:generation_tokens_total{{model_name=\"llama\"}} {}\n",
                    *n * 100_000
                ),
            )
        }
        _ => ("404 Not Found", String::new()),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

#[test]
fn server_probe_reads_sglang_and_vllm_and_survives_errors_and_hangs() {
    let mode = Arc::new(Mutex::new(Mode::Sglang));
    let addr = fake_server(mode.clone());
    let health = format!("http://{addr}/health");
    let metrics = format!("http://{addr}/metrics");
    let sidecar = Sidecar::run(&[
        "--server-health-url",
        &health,
        "--server-metrics-url",
        &metrics,
        "--probe-interval",
        "100ms",
        "--probe-timeout",
        "300ms",
    ]);
    let m = sidecar.wait_metrics("SGLang figures", |m| {
        m.get("pulse_server_running_requests", "") == Some(148.0)
    });
    assert_eq!(m.get("pulse_server_up", ""), Some(1.0));
    assert_eq!(m.get("pulse_server_queued_requests", ""), Some(37.0));
    assert_eq!(
        m.get("pulse_server_generation_tokens_per_second", ""),
        Some(1234.5)
    );
    assert_eq!(
        m.get("pulse_collector_up", "collector=\"server\""),
        Some(1.0)
    );

    *mode.lock().unwrap() = Mode::Vllm;
    let m = sidecar.wait_metrics("vLLM figures with a token rate", |m| {
        m.get("pulse_server_running_requests", "") == Some(12.0)
            && m.get("pulse_server_generation_tokens_per_second", "")
                .is_some_and(|r| r > 0.0)
    });
    assert_eq!(m.get("pulse_server_queued_requests", ""), Some(3.0));

    *mode.lock().unwrap() = Mode::Unavailable;
    let m = sidecar.wait_metrics("the server down", |m| {
        m.get("pulse_server_up", "") == Some(0.0)
    });
    assert_eq!(
        m.get("pulse_collector_up", "collector=\"server\""),
        Some(0.0)
    );
    assert_eq!(
        m.get("pulse_server_running_requests", ""),
        None,
        "no stale figures"
    );
    sidecar.wait_log("answered 503");

    // A server that accepts and never answers: the probe gives up at its timeout, and
    // scrapes, which never wait on a probe, keep answering meanwhile.
    *mode.lock().unwrap() = Mode::Hang;
    sidecar.wait_log("no complete answer within");
    for _ in 0..5 {
        assert_eq!(sidecar.get("/metrics").status, 200);
    }
    assert_eq!(sidecar.metrics().get("pulse_server_up", ""), Some(0.0));

    *mode.lock().unwrap() = Mode::Sglang;
    sidecar.wait_metrics("recovery", |m| m.get("pulse_server_up", "") == Some(1.0));
}
