//! Progress logs written by the real tqdm library (Debian's python3-tqdm), read by the real
//! binary: every shape tqdm prints, with and without `--log-format`, compared with the figures
//! the generator fed to tqdm. The committed samples under `tests/testdata/tqdm/` are checked
//! against their `.golden` expositions too (`UPDATE_GOLDEN=1` rewrites them).

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const GENERATOR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/testdata/tqdm/generate.py"
);
const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/testdata/tqdm");

/// Debian's python3-tqdm imports only under /usr/bin/python3. Missing: fail and say how to
/// install it.
fn require_tqdm() {
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", "import tqdm"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the tqdm library is not installed for /usr/bin/python3; this test drives it. Install it \
         with: apt-get update && apt-get install -y --no-install-recommends python3-tqdm \
         (or run scripts/install-test-peers.sh as root)"
    );
}

/// Runs the generator into `dir` and returns its manifest.
fn generate(dir: &Path) -> serde_json::Map<String, Value> {
    require_tqdm();
    let status = Command::new("/usr/bin/python3")
        .arg(GENERATOR)
        .arg(dir)
        .status()
        .expect("run the tqdm generator");
    assert!(status.success(), "the tqdm generator failed: {status}");
    match read_json(&dir.join("manifest.json")) {
        Some(Value::Object(cases)) => cases,
        other => panic!("no manifest: {other:?}"),
    }
}

/// `run --once` on one log, from `cwd`, with extra flags.
fn once(cwd: &Path, log: &str, extra: &[&str]) -> Metrics {
    let mut args = vec!["--log", log];
    args.extend_from_slice(extra);
    run_once(cwd, &args)
}

fn close(got: Option<f64>, want: f64, relative: f64, what: &str) {
    let got = got.unwrap_or_else(|| panic!("{what}: no figure, want {want}"));
    assert!(
        (got - want).abs() <= want.abs() * relative + 1e-9,
        "{what}: got {got}, want {want} (within {relative})"
    );
}

/// What a scaled count reads as: three significant digits of the count in the printed
/// prefix's units, the prefix then read as decimal.
fn as_printed(value: f64, divisor: f64) -> f64 {
    let mut power = 0;
    let mut v = value;
    while v.abs() >= 999.5 {
        v /= divisor;
        power += 1;
    }
    v * 1000f64.powi(power)
}

fn check_case(name: &str, case: &Value, m: &Metrics) {
    let partition = case["partition"].as_str().unwrap();
    let get = |metric: &str| m.partition(metric, partition);
    let completed = case["completed"].as_f64().unwrap();
    let divisor = case["divisor"].as_f64().unwrap_or(1000.0);
    let what = |figure: &str| format!("{name}: {figure} of {partition}");
    if case["scaled"].as_bool().unwrap() {
        // Three significant digits: within half a unit of the third.
        let printed = as_printed(completed, divisor);
        close(
            get("pulse_partition_requests_completed"),
            printed,
            0.005,
            &what("completed"),
        );
        let planned = as_printed(case["planned"].as_f64().unwrap(), divisor);
        close(
            get("pulse_partition_requests_planned"),
            planned,
            0.005,
            &what("planned"),
        );
    } else {
        assert_eq!(
            get("pulse_partition_requests_completed"),
            Some(completed),
            "{}",
            what("completed")
        );
        assert_eq!(
            get("pulse_partition_requests_planned"),
            case["planned"].as_f64(),
            "{}",
            what("planned")
        );
    }
    // tqdm prints rates with three significant digits or two decimals.
    close(
        get("pulse_partition_requests_per_second"),
        case["rate"].as_f64().unwrap(),
        0.005,
        &what("req/s"),
    );
    match case["tokens_per_second"].as_f64() {
        Some(tps) => close(
            get("pulse_partition_completion_tokens_per_second"),
            tps,
            case["tokens_precision"].as_f64().unwrap(),
            &what("tok/s"),
        ),
        None => assert_eq!(
            get("pulse_partition_completion_tokens_per_second"),
            None,
            "{}: a postfix field taken for tokens",
            what("tok/s")
        ),
    }
    if let Some(eta) = case["logged_eta"].as_f64() {
        assert_eq!(
            get("pulse_partition_logged_eta_seconds"),
            Some(eta),
            "{}",
            what("logged ETA")
        );
    }
    if let Some(Value::Object(also)) = case.get("also") {
        for (other, figures) in also {
            assert_eq!(
                m.partition("pulse_partition_requests_completed", other),
                figures[0].as_f64(),
                "{name}: completed of {other}"
            );
            assert_eq!(
                m.partition("pulse_partition_requests_planned", other),
                figures[1].as_f64(),
                "{name}: planned of {other}"
            );
        }
    }
    let path = format!("path=\"{}\"", case["file"].as_str().unwrap());
    assert_eq!(
        m.get("pulse_log_lines_unparsed_total", &path),
        Some(0.0),
        "{name}"
    );
    // No frame is ever read as a pipeline restart, and vLLM's queueing bar is no partition.
    for line in m.0.lines() {
        if line.starts_with("pulse_pipeline_restarts_total{") {
            assert!(line.ends_with(" 0"), "{name}: {line}");
        }
        assert!(!line.contains("Adding requests"), "{name}: {line}");
    }
}

#[test]
fn every_shape_the_real_tqdm_prints_is_read_with_and_without_the_format_named() {
    let dir = temp_dir();
    let cases = generate(dir.path());
    assert!(
        cases.len() >= 14,
        "the generator wrote {} cases",
        cases.len()
    );
    for (name, case) in &cases {
        let file = case["file"].as_str().unwrap();
        let detected = once(dir.path(), file, &[]);
        check_case(name, case, &detected);
        assert_eq!(
            detected.get(
                "pulse_log_format_info",
                &format!("path=\"{file}\",format=\"tqdm\"")
            ),
            Some(1.0),
            "{name}: auto did not choose tqdm"
        );
        let named = once(dir.path(), file, &["--log-format", "tqdm"]);
        check_case(name, case, &named);
    }
}

#[test]
fn a_run_inference_log_is_detected_without_a_format() {
    let dir = temp_dir();
    let log = dir.path().join("inference_all.log");
    std::fs::write(
        &log,
        "Loading tokenizer from /shared/kimi-k2.5-int4...\n\
         Model: /shared/kimi-k2.5-int4\n\
         M1_metamath: 360 prompts\n\
         ============================================================\n\
         Processing: M1_metamath (SHORT)\n\
         ============================================================\n\
         Running 360 requests (concurrency=150, max_tokens=10240)...\n  \
         50/360 (2 err) 1.1 req/s avg_comp=217tok ETA=4.7m\n",
    )
    .unwrap();
    let m = once(dir.path(), "inference_all.log", &[]);
    assert_eq!(
        m.get(
            "pulse_log_format_info",
            "path=\"inference_all.log\",format=\"run_inference\""
        ),
        Some(1.0)
    );
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "M1_metamath"),
        Some(50.0)
    );
    assert_eq!(
        m.partition("pulse_partition_requests_planned", "M1_metamath"),
        Some(360.0)
    );
    assert_eq!(
        m.partition("pulse_partition_request_errors", "M1_metamath"),
        Some(2.0)
    );
    assert_eq!(
        m.get(
            "pulse_log_lines_matched_total",
            "path=\"inference_all.log\""
        ),
        Some(5.0)
    );
}

#[test]
fn a_log_with_nothing_recognisable_yet_is_undetected_and_says_why() {
    let dir = temp_dir();
    std::fs::write(dir.path().join("banner.log"), "Starting...\nWARNING: x\n").unwrap();
    let m = once(dir.path(), "banner.log", &[]);
    assert_eq!(
        m.get(
            "pulse_log_format_info",
            "path=\"banner.log\",format=\"undetected\""
        ),
        Some(1.0)
    );
    let config = dir.path().join("pulse.toml");
    let log = dir.path().join("banner.log");
    std::fs::write(
        &config,
        format!("[[logs]]\npath = \"{}\"\n", path_str(&log)),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check-config", path_str(&config)])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("format = \"auto\""), "{text}");
    assert!(text.contains("auto has not decided"), "{text}");
    append(
        &log,
        "B1:  10%|█         | 10/100 [00:01<00:09, 10.00it/s]\n",
    );
    let out = Command::new(BIN)
        .args(["check-config", path_str(&config)])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("auto reads it as tqdm"), "{text}");
}

#[test]
fn a_frame_that_cannot_be_read_exactly_changes_no_figure() {
    let dir = temp_dir();
    std::fs::write(
        dir.path().join("odd.log"),
        "B3_big:  30%|███       | 3.60k/12.0k [00:01<00:02, 3.60kit/s]\n\
         B3_big:  37%|███▋      | 4.50x/12.0k [00:02<00:02, 3.60kit/s]\n\
         B3_big:  37%|███▋      | 4500/12 [00:02<00:02, 3.60kit/s]\n",
    )
    .unwrap();
    let m = once(dir.path(), "odd.log", &["--log-format", "tqdm"]);
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "B3_big"),
        Some(3600.0)
    );
    assert_eq!(
        m.partition("pulse_partition_requests_planned", "B3_big"),
        Some(12000.0)
    );
    assert_eq!(
        m.get("pulse_log_lines_unparsed_total", "path=\"odd.log\""),
        Some(2.0)
    );
    assert_eq!(
        m.get("pulse_log_lines_matched_total", "path=\"odd.log\""),
        Some(1.0)
    );
}

/// The figures a golden file keeps: those that depend on the log alone, not on the clock.
fn golden_lines(m: &Metrics) -> String {
    const KEPT: [&str; 8] = [
        "pulse_partition_requests_completed{",
        "pulse_partition_requests_planned{",
        "pulse_partition_requests_per_second{",
        "pulse_partition_completion_tokens_per_second{",
        "pulse_partition_logged_eta_seconds{",
        "pulse_log_lines_total{",
        "pulse_log_lines_matched_total{",
        "pulse_log_lines_unparsed_total{",
    ];
    m.0.lines()
        .filter(|l| {
            KEPT.iter().any(|k| l.starts_with(k)) || l.starts_with("pulse_log_format_info{")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn committed_samples_match_their_golden_expositions() {
    let samples = Path::new(SAMPLES);
    let checked = check_goldens(samples, |name| {
        golden_lines(&run_once(samples, &["--log", name]))
    });
    assert!(checked >= 14, "only {checked} samples");
}

#[test]
fn a_live_bar_is_followed_as_it_draws_and_its_escapes_never_reach_the_tail() {
    require_tqdm();
    let dir = temp_dir();
    let log = dir.path().join("gen.log");
    let sidecar = Sidecar::run(&["--log", path_str(&log)]);
    // A coloured vLLM log prefix, then a coloured nested bar that stops at 7 of 20: the last
    // frame is never terminated, as with any tqdm bar that stops.
    let script = r#"
import sys, tqdm
f = open(sys.argv[1], "w", buffering=1)
f.write("\x1b[32mINFO\x1b[0m 12-01 10:00:00 [llm.py:1] starting\n")
outer = tqdm.tqdm(total=2, desc="outer", position=0, file=f, colour="green", mininterval=0)
inner = tqdm.tqdm(total=20, desc="B1_glaive", position=1, file=f, colour="green", mininterval=0)
for i in range(7):
    inner.update(1)
f.flush()
"#;
    let status = Command::new("/usr/bin/python3")
        .args(["-c", script, path_str(&log)])
        .status()
        .unwrap();
    assert!(status.success(), "the tqdm writer failed: {status}");
    let m = sidecar.wait_metrics("the bar's last frame", |m| {
        m.partition("pulse_partition_requests_completed", "B1_glaive") == Some(7.0)
    });
    assert_eq!(
        m.partition("pulse_partition_requests_planned", "B1_glaive"),
        Some(20.0)
    );
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "outer"),
        Some(0.0)
    );
    let status = get_json(sidecar.addr, "/status").expect("the /status document");
    let tail: Vec<&str> = status["log_tail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        tail.contains(&"INFO 12-01 10:00:00 [llm.py:1] starting"),
        "{tail:?}"
    );
    assert!(tail.iter().all(|l| !l.contains('\x1b')), "{tail:?}");
}

/// A byte bar drawn with `unit_divisor=1024` reads 2.4% low per prefix as printed; told the
/// divisor, as tqdm applies it.
#[test]
fn a_log_told_its_unit_divisor_reads_byte_bars_as_tqdm_counted_them() {
    let samples = Path::new(SAMPLES);
    let manifest = read_json(&samples.join("manifest.json")).unwrap();
    let case = &manifest["bytes_1024"];
    let dir = temp_dir();
    let config = dir.path().join("pulse.toml");
    let log = samples.join("bytes_1024.log");
    for (format, divisor) in [("tqdm", 1024), ("auto", 1024), ("tqdm", 1000)] {
        std::fs::write(
            &config,
            format!(
                "[[logs]]\npath = {:?}\nformat = \"{format}\"\nunit_divisor = {divisor}\n",
                path_str(&log)
            ),
        )
        .unwrap();
        let m = run_once(dir.path(), &["--config", path_str(&config)]);
        let completed = m.partition("pulse_partition_requests_completed", "shard");
        let planned = m.partition("pulse_partition_requests_planned", "shard");
        let want = |key: &str| {
            let v = case[key].as_f64().unwrap();
            if divisor == 1024 {
                v
            } else {
                as_printed(v, 1024.0)
            }
        };
        close(
            completed,
            want("completed"),
            0.005,
            &format!("{format}/{divisor} completed"),
        );
        close(
            planned,
            want("planned"),
            0.005,
            &format!("{format}/{divisor} planned"),
        );
        if divisor == 1024 {
            close(
                m.partition("pulse_partition_requests_per_second", "shard"),
                case["rate"].as_f64().unwrap(),
                0.005,
                "rate",
            );
        }
    }
    for (text, key) in [
        ("unit_divisor = 1023", "logs[0].unit_divisor"),
        (
            "format = \"run_inference\"\nunit_divisor = 1024",
            "logs[0].unit_divisor",
        ),
    ] {
        std::fs::write(&config, format!("[[logs]]\npath = \"x.log\"\n{text}\n")).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline-pulse"))
            .args(["check-config", path_str(&config)])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(key), "{text}");
    }
}
