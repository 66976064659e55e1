//! The real NVML code path (nvml-wrapper through `src/gpu/nvml.rs`), run against a scripted
//! `libnvidia-ml` (`tests/fake-nvml`) loaded with `--nvml-library`: no GPU needed, and faults
//! a real GPU cannot be asked for.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The scripted library, built once per test run beside the binary under test.
fn fake_nvml() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "fake-nvml"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build -p fake-nvml");
        assert!(status.success(), "cargo build -p fake-nvml failed");
        let lib = Path::new(BIN).parent().unwrap().join("libfake_nvml.so");
        assert!(lib.is_file(), "{} was not built", lib.display());
        lib
    })
}

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
