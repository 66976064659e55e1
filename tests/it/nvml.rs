//! The real NVML code path (nvml-wrapper through `src/sources/gpu/nvml.rs`), run against a scripted
//! `libnvidia-ml` (`tests/fake-nvml`) loaded with `--nvml-library`: no GPU needed, and faults
//! a real GPU cannot be asked for.

use crate::common;
use crate::common::repo::*;
use crate::common::*;
use std::path::Path;
use std::process::Command;

/// Eight H200s, each with its own figures, so a field read from the wrong GPU shows.
fn eight_gpus(extra: &str) -> String {
    let gpus: Vec<String> = (0..8)
        .map(|i| {
            format!(
                r#"{{"name":"NVIDIA H200","uuid":"GPU-0000000{i}-fake","pci_bus_id":"00000000:{:02X}:00.0",
                "utilization":{},"memory_utilization":{},"memory_total":150754820096,"memory_used":{},
                "temperature":{},"power_mw":{},"power_limit_mw":700000,"sm_clock_mhz":{},
                "processes":[{{"pid":{},"used":{}}}]}}"#,
                0x18 + i,
                80 + i,
                30 + i,
                90_000_000_000u64 + i as u64,
                60 + i,
                500_000 + i * 1000,
                1900 + i,
                4000 + i,
                80_000_000_000u64 + i as u64
            )
        })
        .collect();
    format!(
        r#"{{"driver_version":"550.54.15","gpus":[{}]{extra}}}"#,
        gpus.join(",")
    )
}

fn once(script: &str, args: &[&str]) -> (bool, Metrics, String) {
    let dir = temp_dir();
    let path = dir.path().join("nvml.json");
    std::fs::write(&path, script).unwrap();
    let out = Command::new(BIN)
        .env("FAKE_NVML_SCRIPT", &path)
        .args(["run", "--once", "--nvml-library"])
        .arg(fake_nvml())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        Metrics(String::from_utf8_lossy(&out.stdout).into_owned()),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn eight_gpus_read_exactly_as_scripted_through_every_field() {
    let (ok, m, stderr) = once(&eight_gpus(""), &["--gpu", "on", "--gpu-processes"]);
    assert!(ok, "{stderr}");
    assert_eq!(m.get("pulse_gpus", ""), Some(8.0), "{}", m.0);
    for i in 0..8u64 {
        let labels = format!("gpu=\"{i}\",uuid=\"GPU-0000000{i}-fake\"");
        let field = |name: &str| m.get(name, &labels);
        assert_eq!(
            field("pulse_gpu_utilization_ratio"),
            Some((80 + i) as f64 / 100.0)
        );
        assert_eq!(
            field("pulse_gpu_memory_utilization_ratio"),
            Some((30 + i) as f64 / 100.0)
        );
        assert_eq!(
            field("pulse_gpu_memory_used_bytes"),
            Some((90_000_000_000 + i) as f64)
        );
        assert_eq!(field("pulse_gpu_memory_total_bytes"), Some(150754820096.0));
        assert_eq!(
            field("pulse_gpu_temperature_celsius"),
            Some((60 + i) as f64)
        );
        assert_eq!(
            field("pulse_gpu_power_watts"),
            Some((500_000 + i * 1000) as f64 / 1000.0)
        );
        assert_eq!(field("pulse_gpu_power_limit_watts"), Some(700.0));
        assert_eq!(
            field("pulse_gpu_sm_clock_hertz"),
            Some((1900 + i) as f64 * 1e6)
        );
        let info = format!(
            "pulse_gpu_info{{gpu=\"{i}\",uuid=\"GPU-0000000{i}-fake\",name=\"NVIDIA H200\",pci_bus_id=\"00000000:{:02X}:00.0\",driver_version=\"550.54.15\"}} 1",
            0x18 + i
        );
        assert!(m.has_line_starting(&info), "{info} not in:\n{}", m.0);
        let process =
            m.0.lines()
                .find(|l| {
                    l.starts_with("pulse_gpu_process_memory_used_bytes{")
                        && l.contains(&format!("gpu=\"{i}\""))
                        && l.contains(&format!("pid=\"{}\"", 4000 + i))
                })
                .unwrap_or_else(|| panic!("no process row for GPU {i}:\n{}", m.0));
        let used: f64 = process.rsplit(' ').next().unwrap().parse().unwrap();
        assert_eq!(used, (80_000_000_000 + i) as f64, "{process}");
    }
    assert_eq!(m.get("pulse_collector_up", "collector=\"gpu\""), Some(1.0));
}

#[test]
fn an_init_failure_says_what_it_means() {
    let script = r#"{"init_error":"LIB_RM_VERSION_MISMATCH","gpus":[]}"#;
    let (ok, m, stderr) = once(script, &["--gpu", "auto"]);
    assert!(ok, "auto goes on without GPUs: {stderr}");
    assert_eq!(m.get("pulse_collector_up", "collector=\"gpu\""), Some(0.0));
    assert!(
        stderr.contains("different versions") && stderr.contains("reboot"),
        "{stderr}"
    );
    let (ok, _, stderr) = once(script, &["--gpu", "on"]);
    assert!(!ok, "on fails start-up without NVML");
    assert!(
        stderr.contains("gpu = \"on\" but NVML cannot start"),
        "{stderr}"
    );
    let (_, _, stderr) = once(r#"{"init_error":"DRIVER_NOT_LOADED"}"#, &["--gpu", "auto"]);
    assert!(stderr.contains("kernel driver is not loaded"), "{stderr}");
    let out = Command::new(BIN)
        .args([
            "run",
            "--once",
            "--gpu",
            "on",
            "--nvml-library",
            "/nonexistent/libnvidia-ml.so.1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot load NVML from /nonexistent/libnvidia-ml.so.1"),
        "{stderr}"
    );
}

/// A sidecar reading the scripted GPUs, serving.
fn sidecar(dir: &Path, script: &str, extra: &[&str]) -> Sidecar {
    let path = dir.join("nvml.json");
    std::fs::write(&path, script).unwrap();
    let lib = fake_nvml().display().to_string();
    let mut args = vec![
        "--gpu",
        "on",
        "--nvml-library",
        lib.as_str(),
        "--gpu-interval",
        "200ms",
        "--alert-interval",
        "100ms",
    ];
    args.extend_from_slice(extra);
    // The scripted library reads its script from the environment of the process that loads it.
    Sidecar::run_with_env(&args, &[("FAKE_NVML_SCRIPT", &path)])
}

#[test]
fn a_hung_nvml_call_makes_the_figures_stale_not_frozen_and_recovers() {
    let dir = temp_dir();
    // Every call blocks from 2 s to 8 s after the library starts.
    let script = eight_gpus(r#","faults":[{"kind":"block","at":2,"until":8}]"#);
    let s = sidecar(dir.path(), &script, &["--gpu-timeout", "1s"]);
    let up = "collector=\"gpu\"";
    s.wait_metrics("the GPUs read", |m| {
        m.get("pulse_collector_up", up) == Some(1.0)
    });
    // While the call hangs, /metrics still answers: the collector is down, the gauges gone,
    // and the last sample's time says when they were true.
    let m = s.wait_metrics("the deadline to pass", |m| {
        m.get("pulse_collector_up", up) == Some(0.0)
    });
    assert!(!m.0.contains("pulse_gpu_utilization_ratio{"), "{}", m.0);
    assert!(m
        .get("pulse_gpu_last_sample_timestamp_seconds", "")
        .is_some());
    assert!(
        m.has_line_starting("pulse_gpu_info{gpu=\"0\""),
        "the inventory stays"
    );
    wait_for("GpuHung to fire", || {
        get_json(s.addr, "/status").is_some_and(|st| {
            st["alerts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["alert"] == "GpuHung" && a["firing"] == true)
        })
    });
    // The block ends at 8 s: the figures come back.
    let m = s.wait_metrics("NVML to answer again", |m| {
        m.get("pulse_collector_up", up) == Some(1.0)
            && m.get(
                "pulse_gpu_utilization_ratio",
                "gpu=\"0\",uuid=\"GPU-00000000-fake\"",
            ) == Some(0.8)
    });
    assert!(m
        .get("pulse_gpu_last_sample_timestamp_seconds", "")
        .is_some());
    s.wait_log("NVML answers again");
}

#[test]
fn a_lost_gpu_is_emailed_with_its_xid_and_pci_id_and_the_others_are_still_read() {
    let dir = temp_dir();
    let smtp =
        common::smtp::SmtpServer::start(free_port(), &dir.path().join("mail"), "plain", None);
    let url = format!("smtp://127.0.0.1:{}?tls=none", smtp.port);
    // GPU 3 falls off the bus at 1 s (XID 79) and is back at 6 s; GPU 5 reports XID 48 and a
    // code outside the documented ones.
    let script = eight_gpus(
        r#","faults":[{"kind":"lost","gpu":3,"at":1,"until":6},{"kind":"xid","gpu":3,"code":79,"at":1},
        {"kind":"xid","gpu":5,"code":48,"at":1},{"kind":"xid","gpu":5,"code":999,"at":1}]"#,
    );
    let s = sidecar(
        dir.path(),
        &script,
        &[
            "--gpu-processes",
            "--smtp",
            &url,
            "--email-to",
            "oncall@example.com",
        ],
    );
    let gpu3 = "gpu=\"3\",uuid=\"GPU-00000003-fake\"";
    let m = s.wait_metrics("GPU 3 lost", |m| m.get("pulse_gpu_up", gpu3) == Some(0.0));
    assert_eq!(
        m.get("pulse_gpu_up", "gpu=\"2\",uuid=\"GPU-00000002-fake\""),
        Some(1.0)
    );
    assert_eq!(
        m.get(
            "pulse_gpu_utilization_ratio",
            "gpu=\"2\",uuid=\"GPU-00000002-fake\""
        ),
        Some(0.82),
        "the others are still read"
    );
    assert!(
        !m.0.contains(&format!("pulse_gpu_utilization_ratio{{{gpu3}}}")),
        "{}",
        m.0
    );
    assert!(m.has_line_starting("pulse_gpu_info{gpu=\"3\",uuid=\"GPU-00000003-fake\""));
    let m = s.wait_metrics("the XIDs counted", |m| {
        m.get("pulse_gpu_xid_errors_total", &format!("{gpu3},xid=\"79\"")) == Some(1.0)
            && m.get(
                "pulse_gpu_xid_errors_total",
                "gpu=\"5\",uuid=\"GPU-00000005-fake\",xid=\"other\"",
            ) == Some(1.0)
    });
    assert_eq!(
        m.get(
            "pulse_gpu_xid_errors_total",
            "gpu=\"5\",uuid=\"GPU-00000005-fake\",xid=\"48\""
        ),
        Some(1.0)
    );
    let mails = common::smtp::wait_messages(&smtp.maildir, 1);
    let lost = mails
        .iter()
        .find(|m| common::smtp::subject(m).contains("FIRING GpuLost"))
        .unwrap_or_else(|| {
            panic!(
                "no GpuLost email: {:?}",
                mails
                    .iter()
                    .map(|m| common::smtp::subject(m))
                    .collect::<Vec<_>>()
            )
        });
    let body = lost.replace("=\r\n", "").replace("=\n", "");
    assert!(body.contains("last XID 79"), "{body}");
    assert!(body.contains("PCI 00000000:1B:00.0"), "{body}");
    assert!(
        body.contains("pid 4003"),
        "the processes that were on it: {body}"
    );
    // At 6 s the GPU is back; the reader has initialised NVML again on the way.
    s.wait_metrics("GPU 3 back", |m| m.get("pulse_gpu_up", gpu3) == Some(1.0));
    s.wait_log("NVML initialised again");
}

#[test]
fn gpu_memory_is_attributed_to_the_server_or_named_as_a_stale_process() {
    let dir = temp_dir();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    // An inference server by its command line (found by --run-dir), and a leftover process.
    let server = FakeServer::start(Engine::Sglang, &[], &run, false);
    let stale = Killed(Command::new("sleep").arg("120").spawn().unwrap());
    let (server_pid, stale_pid) = (server.pid(), stale.0.id());
    let script = split_gpus(dir.path(), (server_pid, stale_pid), 50);
    // The same run folder and scripted GPUs, through `status --json` and `run --once`.
    let pulse = |command: &[&str]| {
        Command::new(BIN)
            .env("FAKE_NVML_SCRIPT", &script)
            .args(command)
            .args(["--gpu", "on", "--run-dir"])
            .arg(&run)
            .arg("--nvml-library")
            .arg(fake_nvml())
            .output()
            .unwrap()
    };
    // Without `--gpu-processes` the lists are not read: nothing is known of who holds the
    // memory, and nothing is said (the server is no less alive for it).
    let status = status_json(&pulse(&["status", "--json"]));
    assert_eq!(
        status["discovered"]["server"]["pid"], server_pid,
        "{status}"
    );
    assert_eq!(status["gpu_memory"], serde_json::Value::Null, "{status}");
    // One scan: a server met inside one of its launcher's `execve`s (pyenv's shim execs
    // several times) is read again until its command line is back (procs::read_args).
    let status = status_json(&pulse(&["status", "--json", "--gpu-processes"]));
    let memory = status["gpu_memory"]
        .as_str()
        .unwrap_or_else(|| panic!("{status}"));
    assert_eq!(
        memory,
        format!(
            "the server process (pid {server_pid}) holds memory on GPUs 0–3; GPUs 4–7 held by pid {stale_pid} (sleep), which is not the server nor the driver: a stale process from an earlier run?"
        )
    );
    let exposition = pulse(&["run", "--once", "--gpu-processes"]);
    let m = Metrics(String::from_utf8_lossy(&exposition.stdout).into_owned());
    assert!(
        m.0.lines().any(
            |l| l.starts_with("pulse_gpu_process_memory_used_bytes{gpu=\"0\"")
                && l.contains(&format!("pid=\"{server_pid}\""))
                && l.contains("role=\"server\"")
        ),
        "{}",
        m.0
    );
    assert!(m.0.lines().any(
        |l| l.starts_with("pulse_gpu_process_memory_used_bytes{gpu=\"7\"")
            && l.contains("role=\"other\"")
    ));
}

/// An NVML script of eight GPUs, `used` of 100 bytes each: GPUs 0–3 held by the first pid,
/// 4–7 by the second.
fn split_gpus(dir: &Path, (low, high): (u32, u32), used: u32) -> std::path::PathBuf {
    let gpus: Vec<String> = (0..8)
        .map(|i| {
            let pid = if i < 4 { low } else { high };
            format!(
                r#"{{"name":"NVIDIA H200","uuid":"GPU-{i}","pci_bus_id":"00000000:{:02X}:00.0","memory_total":100,"memory_used":{used},"processes":[{{"pid":{pid},"used":{used}}}]}}"#,
                0x18 + i
            )
        })
        .collect();
    let script = dir.join("nvml.json");
    std::fs::write(
        &script,
        format!(r#"{{"driver_version":"550","gpus":[{}]}}"#, gpus.join(",")),
    )
    .unwrap();
    script
}

fn status_json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// NVML lists the host's pids whatever PID namespace asks: the driver does not know them
/// (NVIDIA/nvidia-docker#1483). A sidecar beside the server in a namespace of their own (a
/// pod with `shareProcessNamespace`, a container) cannot tell them to the server or to
/// anyone: it says so once, and never that the server holds no memory (it does, under its
/// host pid) nor that another process is stale.
#[test]
fn in_a_pid_namespace_of_its_own_the_sidecar_says_the_gpu_processes_are_anothers() {
    let uid = Command::new("id").arg("-u").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "this test runs the sidecar in a PID namespace of its own (`unshare --pid`, \
         `nsenter`), which takes root, as CI has: run it as root, e.g. \
         `sudo -E env PATH=\"$PATH\" cargo test --test it nvml::in_a_pid_namespace`"
    );
    let nsenter = require_tool("nsenter", "util-linux");
    let dir = temp_dir();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    // The server in the pod's namespace; a process of the host's on GPUs 4-7.
    let server = FakeServer::start_in_pid_namespace(Engine::Sglang, &run);
    let host = Killed(Command::new("sleep").arg("120").spawn().unwrap());
    let (server_pid, host_pid) = (server.pid(), host.0.id());
    let script = split_gpus(dir.path(), (server_pid, host_pid), 60);
    // Beside the server, in its PID namespace and with its `/proc`.
    let pulse = |command: &[&str]| {
        Command::new(&nsenter)
            .args([
                "--target",
                &server_pid.to_string(),
                "--pid",
                "--mount",
                "--",
            ])
            .arg(BIN)
            .env("FAKE_NVML_SCRIPT", &script)
            .args(command)
            .args(["--gpu", "on", "--gpu-processes", "--run-dir"])
            .arg(&run)
            .arg("--nvml-library")
            .arg(fake_nvml())
            .output()
            .unwrap()
    };
    let status = status_json(&pulse(&["status", "--json"]));
    let inside = status["discovered"]["server"]["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("the server is discovered in the namespace: {status}"));
    assert_ne!(inside, u64::from(server_pid), "{status}");
    assert_eq!(
        status["gpu_memory"],
        "the GPU processes live in another PID namespace (NVML lists the host's pids): per-process memory cannot be told to the server or the driver here",
        "{status}"
    );
    let text = status.to_string();
    assert!(
        !text.contains("may have crashed") && !text.contains("stale process"),
        "{status}"
    );
    // The host's pids are exported as NVML gave them, with no name or role read from
    // whichever process has that number here.
    let exposition = pulse(&["run", "--once"]);
    let m = Metrics(String::from_utf8_lossy(&exposition.stdout).into_owned());
    let rows: Vec<&str> =
        m.0.lines()
            .filter(|l| l.starts_with("pulse_gpu_process_memory_used_bytes{"))
            .collect();
    assert_eq!(rows.len(), 8, "{}", m.0);
    assert!(
        rows.iter().all(|l| l.contains("process=\"\",role=\"\"")),
        "{rows:#?}"
    );
}

#[test]
fn gpu_check_times_every_query_and_registers_the_event_set() {
    let dir = temp_dir();
    let script = dir.path().join("nvml.json");
    std::fs::write(&script, eight_gpus("")).unwrap();
    let out = Command::new(BIN)
        .env("FAKE_NVML_SCRIPT", &script)
        .args(["gpu-check", "--nvml-library"])
        .arg(fake_nvml())
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(table.contains("GPUs\t8"), "{table}");
    for query in [
        "uuid",
        "name",
        "pci",
        "utilization",
        "memory",
        "temperature",
        "power",
        "power limit",
        "sm clock",
        "processes",
    ] {
        for gpu in 0..8 {
            let row = format!("GPU {gpu} {query}\t");
            let line = table
                .lines()
                .find(|l| l.starts_with(&row))
                .unwrap_or_else(|| panic!("no {row:?} in {table}"));
            assert!(line.contains(" ms\t") && !line.contains("error"), "{line}");
        }
    }
    assert!(
        table.contains("GPU 7 sm clock") && table.contains("1907 MHz"),
        "{table}"
    );
    assert!(
        table.contains("XID event set") && table.contains("8 GPUs registered"),
        "{table}"
    );
}

#[test]
fn unknown_errors_take_a_gpu_down_without_calling_it_lost_and_nvml_is_initialised_again() {
    let dir = temp_dir();
    // GPU 2 fails with UNKNOWN from 1 s to 3 s; then every call fails from 4 s to 6 s.
    let script = eight_gpus(
        r#","faults":[{"kind":"unknown","gpu":2,"at":1,"until":3},{"kind":"unknown","at":4,"until":6}]"#,
    );
    let s = sidecar(dir.path(), &script, &[]);
    let gpu2 = "gpu=\"2\",uuid=\"GPU-00000002-fake\"";
    s.wait_metrics("GPU 2 failing", |m| {
        m.get("pulse_gpu_up", gpu2) == Some(0.0)
    });
    let status = get_json(s.addr, "/status").unwrap();
    assert!(
        !status["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["alert"] == "GpuLost"),
        "an UNKNOWN error is not a lost GPU: {status}"
    );
    s.wait_metrics("GPU 2 back", |m| m.get("pulse_gpu_up", gpu2) == Some(1.0));
    s.wait_metrics("the whole library failing", |m| {
        m.get("pulse_collector_up", "collector=\"gpu\"") == Some(0.0)
    });
    s.wait_log("NVML initialised again");
    s.wait_metrics("reading again", |m| {
        m.get("pulse_collector_up", "collector=\"gpu\"") == Some(1.0)
    });
}

#[test]
fn the_xid_watcher_registers_again_after_an_error() {
    let dir = temp_dir();
    // Waiting for events fails from 1 s to 2 s; an XID 48 comes at 3 s, after that.
    let script = eight_gpus(
        r#","faults":[{"kind":"unknown","at":1,"until":2},{"kind":"xid","gpu":0,"code":48,"at":3}]"#,
    );
    let s = sidecar(dir.path(), &script, &[]);
    s.wait_log("waiting for GPU XID events failed");
    let labels = "gpu=\"0\",uuid=\"GPU-00000000-fake\",xid=\"48\"";
    wait_until(
        "the XID counted after registering again",
        std::time::Duration::from_secs(20),
        || s.metrics().get("pulse_gpu_xid_errors_total", labels) == Some(1.0),
    );
}
