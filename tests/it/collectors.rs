//! Collectors as operators switch them (`--no-collector.NAME`, `--collector.disable-defaults`):
//! each one off removes exactly the families `docs/metrics.md` gives it, from a node where
//! every collector has something to say; one off runs no thread; and the series budget of a
//! 50-partition node on 8 GPUs with `output_details` off, from `run --once`.

use crate::common::*;
use pipeline_pulse::collectors::of_family;
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// The families the contract gives each collector: `docs/metrics.md`'s *Collector* column.
fn documented(collector: &str) -> BTreeSet<String> {
    contract::families()
        .into_iter()
        .filter(|(_, f)| f.collectors.contains(collector))
        .map(|(name, _)| name)
        .collect()
}

/// The families of a text exposition, as the contract names them (`# TYPE` lines; a
/// counter's samples end in `_total`).
fn families(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|rest| {
            let (name, kind) = rest.split_once(' ').unwrap();
            match kind {
                "counter" if !name.ends_with("_total") => format!("{name}_total"),
                _ => name.to_owned(),
            }
        })
        .collect()
}

fn series(exposition: &str) -> usize {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count()
}

fn once(dir: &Path, args: &[&str]) -> String {
    run_once_with(dir, args).0
}

/// `run --once ARGS` inside a SLURM job whose controller cannot be reached: the job from the
/// environment, its ask counted as failed.
fn once_in_a_job(dir: &Path, args: &[&str]) -> String {
    let conf = dir.join("no-slurm.conf");
    let env = [
        ("SLURM_JOB_ID", OsStr::new("7")),
        ("SLURM_CONF", conf.as_os_str()),
    ];
    run_once_in(dir, args, &env).0
}

/// Every collector, as `docs/metrics.md` names them.
const COLLECTORS: [&str; 9] = [
    "log",
    "outputs",
    "output_details",
    "gpu",
    "process",
    "server",
    "slurm",
    "history",
    "exporter",
];

/// A node where every collector but the history (which `--once` never samples) exports: a
/// progress log, output and input files with a required field, eight simulated GPUs, the
/// driver by its pid file, an inference server's health, metrics and log (and, run by
/// [`once_in_a_job`], a SLURM job).
fn busy_node(dir: &Path) -> (Vec<String>, Killed) {
    let run = dir.join("run");
    std::fs::create_dir_all(run.join("B1")).unwrap();
    std::fs::write(
        run.join("run.log"),
        "Model: /models/m\nProcessing: B1 (SHORT)\nB1: 4 prompts\nRunning 4 requests (concurrency=2, max_tokens=64)...\n  2/4 (0 err) 1.0 req/s avg_comp=20tok ETA=2s\n",
    )
    .unwrap();
    let record = |id: u32| {
        format!("{{\"id\": \"r{id}\", \"text\": \"hi\", \"meta_info\": {{\"completion_tokens\": 20, \"finish_reason\": {{\"type\": \"stop\"}}}}}}\n")
    };
    std::fs::write(run.join("B1/raw_responses.jsonl"), record(1) + &record(2)).unwrap();
    std::fs::write(run.join("B1/prompts.jsonl"), "{}\n{}\n{}\n{}\n").unwrap();
    let pid_file = dir.join("driver.pid");
    std::fs::write(&pid_file, std::process::id().to_string()).unwrap();
    let server_dir = dir.join("server");
    std::fs::create_dir_all(&server_dir).unwrap();
    let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/server");
    std::fs::copy(
        testdata.join("vllm-0.34.0-awake.prom"),
        server_dir.join("metrics"),
    )
    .unwrap();
    std::fs::copy(testdata.join("sglang-0.4.10.log"), dir.join("server.log")).unwrap();
    let (server, port) = static_http_server(&server_dir);
    let args = [
        "--log",
        "run/run.log",
        "--outputs",
        "run/*/raw_responses.jsonl",
        "--inputs",
        "run/*/prompts.jsonl",
        "--require",
        "/id",
        "--gpu",
        "simulated",
        "--pid-file",
        path_str(&pid_file),
        "--server-health-url",
        &format!("http://127.0.0.1:{port}/health"),
        "--server-metrics-url",
        &format!("http://127.0.0.1:{port}/metrics"),
        "--server-log",
        "server.log",
    ]
    .map(str::to_owned)
    .to_vec();
    (args, server)
}

/// The run's own families that any input may feed, but that in one read only the log does:
/// the rate the ETAs come from (in a running sidecar, output writes give one too).
const FED_BY_THE_LOG_HERE: [&str; 2] = ["pulse_run_eta_seconds", "pulse_run_gpu_seconds_projected"];

/// The *Collector* column of `docs/metrics.md` is the code's [`of_family`], row by row.
#[test]
fn the_docs_name_each_familys_collectors_as_the_code_does() {
    for (name, family) in contract::families() {
        let code: BTreeSet<String> = of_family(&name).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            family.collectors, code,
            "the collectors of {name} in docs/metrics.md"
        );
    }
}

#[test]
fn each_collector_off_removes_exactly_its_families() {
    let dir = temp_dir();
    let (args, _server) = busy_node(dir.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let all = families(&once_in_a_job(dir.path(), &args));
    let mut wrong = Vec::new();
    for collector in COLLECTORS {
        let flag = format!("--no-collector.{collector}");
        let off = families(&once_in_a_job(
            dir.path(),
            &[&args[..], &[flag.as_str()]].concat(),
        ));
        let gone: BTreeSet<String> = all
            .difference(&off)
            .filter(|f| !(collector == "log" && FED_BY_THE_LOG_HERE.contains(&f.as_str())))
            .cloned()
            .collect();
        let own = documented(collector);
        let expected: BTreeSet<String> = all.intersection(&own).cloned().collect();
        if gone != expected {
            wrong.push(format!(
                "{flag}: removed {:?}, but docs/metrics.md gives it {:?} of those exported",
                gone, expected
            ));
        }
        let new: Vec<_> = off.difference(&all).collect();
        if !new.is_empty() {
            wrong.push(format!(
                "{flag}: exports {new:?}, which everything on does not"
            ));
        }
    }
    // The node exports something of every collector the fixture can feed in one read.
    for collector in COLLECTORS.into_iter().filter(|c| *c != "history") {
        assert!(
            !all.is_disjoint(&documented(collector)),
            "the fixture exports nothing of {collector}: {all:?}"
        );
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn disable_defaults_keeps_only_the_collectors_named() {
    let dir = temp_dir();
    let (args, _server) = busy_node(dir.path());
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(["--collector.disable-defaults", "--collector.gpu"]);
    let only_gpu = families(&once(dir.path(), &args));
    let gpu = documented("gpu");
    for family in &only_gpu {
        let other = COLLECTORS
            .into_iter()
            .filter(|c| *c != "gpu")
            .find(|c| documented(c).contains(family));
        assert!(
            other.is_none(),
            "{family} of {other:?} is exported with only gpu on"
        );
    }
    assert!(
        only_gpu.contains("pulse_gpu_utilization_ratio") && !only_gpu.is_disjoint(&gpu),
        "{only_gpu:?}"
    );
}

#[test]
fn a_collector_off_runs_no_thread_and_status_says_which_are_on() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    std::fs::write(
        &log,
        "Processing: B1 (SHORT)\nB1: 4 prompts\n  1/4 (0 err) 1.0 req/s avg_comp=20tok ETA=3s\n",
    )
    .unwrap();
    let threads = |sidecar: &Sidecar| -> BTreeSet<String> {
        let tasks = format!("/proc/{}/task", sidecar.child.id());
        std::fs::read_dir(tasks)
            .unwrap()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
            .map(|c| c.trim().to_owned())
            .collect()
    };
    let args = [
        "--log",
        path_str(&log),
        "--outputs",
        "out/*.jsonl",
        "--gpu",
        "simulated",
    ];
    let on = Sidecar::run(&args);
    on.wait_metrics("the GPUs' first sample", |m| {
        m.has_line_starting("pulse_gpu_up{")
    });
    let named = threads(&on);
    for thread in ["log-source", "output-source", "gpu-source", "slurm"] {
        assert!(named.contains(thread), "no {thread} thread among {named:?}");
    }
    let off = Sidecar::run(
        &[
            &args[..],
            // The log thread also follows the server's logs.
            &[
                "--no-collector.log",
                "--no-collector.server",
                "--no-collector.outputs",
                "--no-collector.gpu",
                "--no-collector.history",
                "--no-collector.slurm",
            ],
        ]
        .concat(),
    );
    let status = get_json(off.addr, "/status").expect("/status");
    let collectors_on: Vec<&str> = status["collectors_on"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    assert_eq!(
        collectors_on,
        ["output_details", "process", "exporter"],
        "{status}"
    );
    let m = off.metrics();
    let named = threads(&off);
    for thread in ["log-source", "output-source", "gpu-source", "slurm"] {
        assert!(
            !named.contains(thread),
            "a {thread} thread with its collector off: {named:?}"
        );
    }
    for absent in [
        "pulse_partition_",
        "pulse_log_",
        "pulse_gpu",
        "pulse_run_gpu_seconds",
    ] {
        assert!(
            !m.has_line_starting(absent),
            "{absent}… with its collector off:\n{}",
            m.0
        );
    }
    let history = off.get("/api/history");
    assert_eq!(history.status, 404, "{}", history.body);
    assert!(
        history.body.contains("collectors.history"),
        "{}",
        history.body
    );
    assert_eq!(on.get("/api/history").status, 200);
}

/// A run folder as a run that does one partition at a time leaves it: 50 partitions, each
/// with its log lines, its output file (inspected) and its input file, the last one written
/// now and the others two hours ago.
fn fifty_partitions(dir: &Path) {
    let mut log = String::from("Model: /shared/model\n");
    let record = "{\"text\": \"x\", \"meta_info\": {\"completion_tokens\": 120, \"finish_reason\": {\"type\": \"stop\"}}}\n";
    for p in 0..50 {
        let name = format!("P{p:02}");
        let folder = dir.join("prepared").join(&name);
        std::fs::create_dir_all(&folder).unwrap();
        let done = if p < 49 { 100 } else { 40 };
        std::fs::write(folder.join("raw_responses.jsonl"), record.repeat(done)).unwrap();
        std::fs::write(folder.join("prompts.jsonl"), "{}\n".repeat(100)).unwrap();
        if p < 49 {
            set_mtime(&folder.join("raw_responses.jsonl"), 7200);
        }
        log.push_str(&format!(
            "Processing: {name} (SHORT)\n{name}: 100 prompts\nRunning 100 requests (concurrency=8, max_tokens=1024)...\n"
        ));
        for n in (10..=done).step_by(10) {
            log.push_str(&format!(
                "  {n}/100 (0 err) 2.0 req/s avg_comp=120tok ETA=30s\n"
            ));
        }
    }
    std::fs::write(dir.join("run.log"), log).unwrap();
}

#[test]
fn fifty_partitions_on_eight_gpus_stay_under_a_thousand_series_without_output_details() {
    let dir = temp_dir();
    fifty_partitions(dir.path());
    let args = [
        "--log",
        "run.log",
        "--outputs",
        "prepared/*/raw_responses.jsonl",
        "--inputs",
        "prepared/*/prompts.jsonl",
        "--gpu",
        "simulated",
    ];
    let all = once(dir.path(), &args);
    let lean = once(
        dir.path(),
        &[&args[..], &["--no-collector.output_details"]].concat(),
    );
    let (all, lean) = (series(&all), series(&lean));
    eprintln!("8 GPUs × 50 partitions: {all} series, {lean} with output_details off");
    assert!(lean < 1000, "{lean} series with output_details off");
    assert!(lean < all, "{lean} of {all}");
    let scale = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/many-nodes.md"))
        .unwrap();
    for figure in [all, lean] {
        let written = match figure {
            0..1000 => figure.to_string(),
            _ => format!("{},{:03}", figure / 1000, figure % 1000),
        };
        assert!(
            scale.contains(&format!("**{written}**")),
            "docs/many-nodes.md does not give the figure {written} (measured: {all} all on, {lean} without output_details)"
        );
    }
}

#[test]
fn the_collectors_are_read_from_the_file_and_a_wrong_one_is_named() {
    let dir = temp_dir();
    let config = dir.path().join("pulse.toml");
    let check = |text: &str| {
        std::fs::write(&config, text).unwrap();
        let out = Command::new(BIN)
            .arg("check-config")
            .arg(&config)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, text) =
        check("collectors_disable_defaults = true\n[collectors]\nlog = true\ngpu = false\n");
    assert_eq!(code, Some(0), "{text}");
    for line in [
        "collectors_disable_defaults = true",
        "[collectors]",
        "log = true",
        "gpu = false",
    ] {
        assert!(text.contains(line), "{line}: {text}");
    }
    let (code, text) = check("[collectors]\nnvme = false\n");
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("`collectors.nvme`") && text.contains("output_details"),
        "{text}"
    );
    let (code, text) = check("gpu = \"on\"\n[collectors]\ngpu = false\n");
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("`collectors.gpu`"), "{text}");
    // Both ways at once is a mistake on the command line, not a last-one-wins.
    let out = Command::new(BIN)
        .args(["run", "--once", "--collector.gpu", "--no-collector.gpu"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}
