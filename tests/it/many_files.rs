//! Many files: a run folder of sharded outputs (40 partitions × 250 shards) is counted exactly
//! under the open-file limit a systemd service or a login shell gets, `/metrics` answers all
//! the while, and a file closed for being quiet is reopened where it was, across appends,
//! rotation, truncation and a restart, with inotify and with polling (docs/formats.md#many-files).

use crate::common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `partitions` folders `prepared/Pnn` of `shards` files `shard-nnnnn.jsonl` of `records`
/// records each, written `age` seconds ago; returns the records written.
fn write_shards(dir: &Path, partitions: usize, shards: usize, records: usize, age: u64) -> u64 {
    for p in 0..partitions {
        let folder = dir.join(format!("prepared/P{p:02}"));
        std::fs::create_dir_all(&folder).unwrap();
        for s in 0..shards {
            let mut text = String::new();
            for r in 0..records {
                text.push_str(&format!(
                    "{{\"id\":\"P{p:02}-{s:05}-{r}\",\"text\":\"an answer\",\"meta_info\":{{\"completion_tokens\":3}}}}\n"
                ));
            }
            let path = folder.join(format!("shard-{s:05}.jsonl"));
            std::fs::write(&path, text).unwrap();
            if age > 0 {
                set_mtime(&path, age);
            }
        }
    }
    (partitions * shards * records) as u64
}

fn record(id: &str) -> String {
    format!("{{\"id\":\"{id}\",\"text\":\"an answer\"}}\n")
}

/// The sum of a family's samples in an exposition.
fn sum(m: &Metrics, name: &str) -> f64 {
    m.0.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A scrape that must answer: the target never looks down to Prometheus (its default scrape
/// timeout is 10 s; this is a liveness check, not a measure of speed).
fn scrape(sidecar: &Sidecar, path: &str) -> String {
    let (status, body) = try_http(sidecar.addr, "GET", path, "")
        .unwrap_or_else(|| panic!("{path} did not answer while the files were read"));
    assert_eq!(status, 200, "{path}: {body}");
    body
}

#[test]
fn ten_thousand_shards_are_counted_exactly_within_1024_descriptors_and_metrics_answers_throughout()
{
    let prlimit = require_tool("prlimit", "util-linux");
    let dir = temp_dir();
    let d = dir.path();
    // Written now: every file was written in the last minute, so the cap decides what stays open.
    let total = write_shards(d, 40, 250, 10, 0);
    std::fs::write(
        d.join("run.log"),
        "Model: /models/tiny\nProcessing: P00 (SHORT)\nP00: 2500 prompts\n",
    )
    .unwrap();
    let mut command = Command::new(prlimit);
    command.args([
        "--nofile=1024:1024",
        BIN,
        "run",
        "--listen",
        "127.0.0.1:0",
        "--poll-interval",
        "50ms",
        "--gpu",
        "off",
        "--log",
        path_str(&d.join("run.log")),
        "--outputs",
        &format!("{}/prepared/*/shard-*.jsonl", d.display()),
    ]);
    let sidecar = Sidecar::start_command(command);
    let pid = sidecar.child.id();
    let mut most = 0;
    let mut last = Metrics(String::new());
    wait_until(
        "every record of 10,000 files",
        Duration::from_secs(180),
        || {
            most = most.max(descriptors(pid));
            scrape(&sidecar, "/-/healthy");
            scrape(&sidecar, "/status");
            last = Metrics(scrape(&sidecar, "/metrics"));
            most = most.max(descriptors(pid));
            sum(&last, "pulse_output_records_total") == total as f64
        },
    );
    assert!(most <= 256, "{most} descriptors held at most");
    for p in 0..40 {
        let partition = format!("P{p:02}");
        assert_eq!(
            last.partition("pulse_output_records_total", &partition),
            Some(2500.0),
            "{partition}"
        );
    }
    // Written in the last minute, so as many as the cap allows stay open, and no more.
    let m = sidecar.wait_metrics("the open files counted", |m| {
        m.get("pulse_output_files", "state=\"open\"").is_some()
    });
    let open = m.get("pulse_output_files", "state=\"open\"").unwrap();
    let closed = m.get("pulse_output_files", "state=\"closed\"").unwrap();
    assert!(open <= 128.0, "{open} open");
    assert_eq!(open + closed, 10_000.0);
    assert_eq!(m.get("pulse_fd_exhausted_total", ""), Some(0.0));
    // Each partition folder and their parent, watched or (on a mount inotify cannot watch) polled.
    let folders = m.get("pulse_output_folders", "method=\"inotify\"").unwrap()
        + m.get("pulse_output_folders", "method=\"poll\"").unwrap();
    assert_eq!(folders, 41.0);
    assert!(descriptors(pid) <= 256);
}

/// 3 partitions of 100 quiet files (written 10 minutes ago, so each is closed once read), at
/// most 8 open; then a closed file grows, one is replaced, one is truncated and written again,
/// a new partition appears, and the sidecar restarts (its state kept) while a file grows.
fn closed_files_stay_exact(watch: &str) {
    let dir = temp_dir();
    let d = dir.path();
    let state = d.join("state");
    let mut expected = write_shards(d, 3, 100, 10, 600);
    let config = d.join("pulse.toml");
    std::fs::write(
        &config,
        format!(
            "gpu = \"off\"\nstate_dir = \"{}\"\nmax_open_files = 8\nfile_watch = \"{watch}\"\n\
             [[outputs]]\nglob = \"{}/prepared/*/shard-*.jsonl\"\ninspect = false\n",
            state.display(),
            d.display()
        ),
    )
    .unwrap();
    let args = [
        "--config",
        path_str(&config),
        "--snapshot-interval",
        "100ms",
    ];
    let mut sidecar = Sidecar::run(&args);
    let records = |s: &Sidecar, partition: &str| {
        s.metrics()
            .partition("pulse_output_records_total", partition)
            .unwrap_or(-1.0)
    };
    let total = |s: &Sidecar, expected: u64| {
        s.wait_metrics(&format!("{expected} records"), |m| {
            sum(m, "pulse_output_records_total") == expected as f64
        })
    };
    let m = total(&sidecar, expected);
    // Quiet for ten minutes: every file is closed once read.
    assert_eq!(m.get("pulse_output_files", "state=\"open\""), Some(0.0));
    assert_eq!(m.get("pulse_output_files", "state=\"closed\""), Some(300.0));
    let (inotify, poll) = (
        m.get("pulse_output_folders", "method=\"inotify\"").unwrap(),
        m.get("pulse_output_folders", "method=\"poll\"").unwrap(),
    );
    match watch {
        "inotify" => assert!(inotify >= 3.0 && poll == 0.0, "{inotify} {poll}"),
        _ => assert!(inotify == 0.0 && poll >= 3.0, "{inotify} {poll}"),
    }
    // A quiet, closed file grows: its new records only.
    let shard = |p: usize, s: usize| d.join(format!("prepared/P{p:02}/shard-{s:05}.jsonl"));
    append(
        &shard(0, 5),
        &(record("new-1") + &record("new-2") + &record("new-3")),
    );
    expected += 3;
    total(&sidecar, expected);
    assert_eq!(records(&sidecar, "P00"), 1003.0);
    // A new file of 2 records renamed over a closed one of 10: counted anew.
    let fresh = d.join("fresh.tmp");
    std::fs::write(&fresh, record("r-1") + &record("r-2")).unwrap();
    std::fs::rename(&fresh, shard(1, 7)).unwrap();
    expected -= 8;
    total(&sidecar, expected);
    // Truncated in place and written again with 4 (copytruncate, then a rewrite).
    let text: String = (0..4).map(|i| record(&format!("t-{i}"))).collect();
    std::fs::write(shard(2, 3), text).unwrap();
    expected -= 6;
    total(&sidecar, expected);
    assert_eq!(records(&sidecar, "P01"), 992.0);
    assert_eq!(records(&sidecar, "P02"), 994.0);
    // A partition folder that appears later is found by the same glob.
    std::fs::create_dir(d.join("prepared/P03")).unwrap();
    std::fs::write(d.join("prepared/P03/shard-00000.jsonl"), record("p3")).unwrap();
    expected += 1;
    total(&sidecar, expected);
    // Stopped, a closed file grows while it is down, and started again on its state: the
    // files continue where they were, nothing counted twice.
    sidecar.terminate();
    append(&shard(0, 9), &(record("down-1") + &record("down-2")));
    expected += 2;
    let sidecar = Sidecar::run(&args);
    total(&sidecar, expected);
    assert_eq!(records(&sidecar, "P00"), 1005.0);
    let m = sidecar.metrics();
    assert!(m.get("pulse_output_files", "state=\"open\"").unwrap() <= 8.0);
}

#[test]
fn closed_files_stay_exact_with_inotify() {
    closed_files_stay_exact("inotify");
}

#[test]
fn closed_files_stay_exact_with_polling() {
    closed_files_stay_exact("poll");
}
