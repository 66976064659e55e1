//! The tailer's promises under faults: real files, real writers, and exact counts. Every case
//! ends by checking `pulse_log_lines_total` and the model's values against what the writer
//! wrote. Where the sidecar must look between two writes (a line cut by a flush, a rotation
//! half done, a truncated file seen empty), the sidecar runs in this process, stepped
//! (`common::stepped`): it polls exactly where the test says, with no wall time to wait for.
//! A restart, a kill and a snapshot on disk are the real binary's.

use crate::common::stepped::{self, InProcess};
use crate::common::*;

/// Progress lines `  i/total (0 err) ...` for i in start..=end, one per line.
const PROGRESS: &str = r#"
import sys
def progress(f, start, end, total):
    for i in range(start, end + 1):
        f.write(f"  {i}/{total} (0 err) 10.0 req/s avg_comp=100tok ETA=1m\n")
"#;

fn label(log: &std::path::Path) -> String {
    format!("path=\"{}\"", path_str(log))
}

fn lines_total(m: &Metrics, log: &std::path::Path) -> f64 {
    m.get("pulse_log_lines_total", &label(log)).unwrap_or(-1.0)
}

/// Waits until the sidecar has read exactly `expected` lines and the partition shows
/// `completed`, then checks that nothing was mistaken for a pipeline restart.
fn expect_exact(
    sidecar: &Sidecar,
    log: &std::path::Path,
    expected: f64,
    completed: f64,
) -> Metrics {
    let m = sidecar.wait_metrics(&format!("{expected} lines"), |m| {
        reached(m, log, expected, completed)
    });
    exact(m, log, expected)
}

/// [`expect_exact`] on the sidecar in this process: stepped until it has read them.
fn expect_exact_stepped(
    sidecar: &mut InProcess,
    log: &std::path::Path,
    expected: f64,
    completed: f64,
) -> Metrics {
    let m = sidecar.step_until(&format!("{expected} lines"), |m| {
        reached(m, log, expected, completed)
    });
    exact(m, log, expected)
}

fn reached(m: &Metrics, log: &std::path::Path, expected: f64, completed: f64) -> bool {
    lines_total(m, log) >= expected
        && m.partition("pulse_partition_requests_completed", "A") == Some(completed)
}

fn exact(m: Metrics, log: &std::path::Path, expected: f64) -> Metrics {
    assert_eq!(lines_total(&m, log), expected, "lines lost or doubled");
    assert_eq!(
        m.get("pulse_log_lines_matched_total", &label(log)),
        Some(expected)
    );
    assert_eq!(m.partition("pulse_pipeline_restarts_total", "A"), Some(0.0));
    m
}

#[test]
fn bursts_through_an_8k_buffered_writer() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    let mut sidecar = InProcess::logs(dir.path(), &[&log]);
    // A buffered writer (Python's, C's stdio) flushes whenever 8 KiB fill up, cutting lines
    // anywhere; the sidecar polls after every flush, so it meets every cut.
    let text = format!("Processing: A\n{}", progress_lines(1, 50_000, 50_000));
    let mut writer = Writer::open(&log);
    for flush in text.as_bytes().chunks(8192) {
        writer.write_bytes(flush);
        sidecar.step();
    }
    expect_exact_stepped(&mut sidecar, &log, 50_001.0, 50_000.0);
}

#[test]
fn one_line_written_a_byte_at_a_time() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    std::fs::write(&log, "Processing: A\n").unwrap();
    let mut sidecar = InProcess::logs(dir.path(), &[&log]);
    // The sidecar polls after every byte: it sees each part of the line.
    let mut writer = Writer::open(&log);
    for byte in "  777/1000 (0 err) 10.0 req/s avg_comp=100tok ETA=1m\n".as_bytes() {
        writer.write_bytes(std::slice::from_ref(byte));
        sidecar.step();
    }
    expect_exact_stepped(&mut sidecar, &log, 2.0, 777.0);
}

#[test]
fn rename_rotation_while_the_writer_keeps_appending_to_the_old_file() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    let mut sidecar = InProcess::logs(dir.path(), &[&log]);
    let mut writer = Writer::open(&log);
    writer.write(&format!("Processing: A\n{}", progress_lines(1, 1000, 3000)));
    sidecar.step();
    // logrotate 'create': a rename...
    std::fs::rename(&log, log.with_extension("log.1")).unwrap();
    // ...but the writer still holds the old file.
    writer.write(&progress_lines(1001, 1500, 3000));
    sidecar.step();
    // logrotate creates the new file; the writer has not reopened yet.
    std::fs::File::create(&log).unwrap();
    writer.write(&progress_lines(1501, 2000, 3000));
    sidecar.step();
    // Now it reopens.
    writer.reopen();
    writer.write(&progress_lines(2001, 3000, 3000));
    let m = expect_exact_stepped(&mut sidecar, &log, 3001.0, 3000.0);
    assert_eq!(m.get("pulse_tail_rotations_total", &label(&log)), Some(1.0));
}

/// logrotate's copytruncate: copy the file away, truncate it; the writer (O_APPEND) goes on.
fn copytruncate(fast: bool) {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    let mut sidecar = InProcess::logs(dir.path(), &[&log]);
    // The writer opened with O_APPEND, as Python's and the shell's `>>` are: after the
    // truncation it writes at the new end, not where it was.
    let mut writer = Writer::open(&log);
    writer.write(&format!("Processing: A\n{}", progress_lines(1, 1000, 5000)));
    sidecar.step_until("the first 1001 lines", |m| lines_total(m, &log) == 1001.0);
    std::fs::copy(&log, log.with_extension("log.1")).unwrap();
    writer.file.set_len(0).unwrap();
    // Fast: at once more bytes than the file had, with no poll between that could see it
    // empty. Slow: a poll sees the empty file, then the writer goes on.
    if !fast {
        sidecar.step();
    }
    writer.write(&progress_lines(1001, 5000, 5000));
    let m = expect_exact_stepped(&mut sidecar, &log, 5001.0, 5000.0);
    assert_eq!(
        m.get("pulse_tail_truncations_total", &label(&log)),
        Some(1.0)
    );
}

#[test]
fn copytruncate_slow() {
    copytruncate(false);
}

#[test]
fn copytruncate_fast() {
    copytruncate(true);
}

#[test]
fn delete_and_recreate() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    std::fs::write(&log, "Processing: A\n  10/100 (0 err) 1.0 req/s\n").unwrap();
    let mut sidecar = InProcess::logs(dir.path(), &[&log]);
    sidecar.step_until("the first file", |m| lines_total(m, &log) == 2.0);
    std::fs::remove_file(&log).unwrap();
    std::fs::write(
        &log,
        "  20/100 (0 err) 1.0 req/s\n  30/100 (0 err) 1.0 req/s\n",
    )
    .unwrap();
    let m = expect_exact_stepped(&mut sidecar, &log, 4.0, 30.0);
    assert_eq!(m.get("pulse_tail_rotations_total", &label(&log)), Some(1.0));
    assert_eq!(m.get("pulse_collector_up", "collector=\"log\""), Some(1.0));
}

#[test]
fn file_and_folder_missing_at_start() {
    let dir = temp_dir();
    let log = dir.path().join("not/yet/run.log");
    let mut sidecar = InProcess::logs(dir.path(), &[&log]);
    assert_eq!(lines_total(&sidecar.metrics(), &log), 0.0);
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::fs::write(&log, "Processing: A\n  5/10 (0 err) 1.0 req/s\n").unwrap();
    expect_exact_stepped(&mut sidecar, &log, 2.0, 5.0);
}

#[test]
fn a_100_mb_line_is_capped_and_memory_stays_bounded() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    let sidecar = Sidecar::run(&["--log", path_str(&log)]);
    let script = r#"
import sys
with open(sys.argv[1], 'a') as f:
    f.write('Processing: A\n')
    chunk = 'x' * (1 << 20)
    for _ in range(100):
        f.write(chunk)
        f.flush()
    f.write('\n  5/10 (0 err) 1.0 req/s\n  6/10 (0 err) 1.0 req/s\n')
"#;
    python_done(script, &[path_str(&log)]);
    let m = expect_exact(&sidecar, &log, 3.0, 6.0);
    assert_eq!(
        m.get("pulse_tail_oversized_lines_total", &label(&log)),
        Some(1.0)
    );
    let rss = m.get("process_resident_memory_bytes", "").unwrap();
    assert!(
        rss < 64.0 * 1024.0 * 1024.0,
        "resident memory {rss} bytes after a 100 MB line"
    );
}

#[test]
fn invalid_utf8_and_nul_bytes_are_lines_not_crashes() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"\xff\xfe not utf-8\n");
    bytes.extend_from_slice(b"\x00\x00\x00\x00\n");
    bytes.extend_from_slice(b"Processing: A\n");
    bytes.extend_from_slice(b"  5/10 (0 err) 1.0 req/s\x00 trailing nul\n");
    bytes.extend_from_slice(b"cut \xe2\x82 in the middle of a character\n");
    bytes.extend_from_slice(b"  7/10 (0 err) 1.0 req/s\n");
    std::fs::write(&log, &bytes).unwrap();
    let sidecar = Sidecar::run(&["--log", path_str(&log)]);
    let m = sidecar.wait_metrics("six lines", |m| lines_total(m, &log) == 6.0);
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "A"),
        Some(7.0)
    );
    // The header and both progress lines (a NUL after the rate does not hide the counts).
    assert_eq!(
        m.get("pulse_log_lines_matched_total", &label(&log)),
        Some(3.0)
    );
    assert_eq!(sidecar.get("/-/healthy").status, 200);
}

#[test]
fn sigkill_and_restart_resume_without_doubling_or_losing_lines() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    let state = dir.path().join("state");
    let args = [
        "--log",
        path_str(&log),
        "--state-dir",
        path_str(&state),
        "--snapshot-interval",
        "100ms",
    ];
    let mut sidecar = Sidecar::run(&args);
    let first = format!(
        "{PROGRESS}
with open(sys.argv[1], 'a') as f:
    f.write('Processing: A\\n')
    progress(f, 1, 3000, 9000)
    f.write('  3001/9000 (0 err) 10.0 req/s avg_')    # a partial line at the moment of the kill
"
    );
    python_done(&first, &[path_str(&log)]);
    sidecar.wait_metrics("the first 3001 lines", |m| lines_total(m, &log) == 3001.0);
    // Once a snapshot holds them, kill without warning.
    let snapshot = state.join("snapshot.json");
    wait_for("a snapshot with 3001 lines", || {
        read_json(&snapshot).is_some_and(|v| v["run"]["logs"][0]["lines"] == 3001)
    });
    sidecar.kill9();

    // While the sidecar is down: more lines, then a rename rotation. Lines in the rotated
    // file exist nowhere under the path any more; only the snapshot's position finds them.
    let second = format!(
        "{PROGRESS}
import os
path = sys.argv[1]
with open(path, 'a') as f:
    f.write('comp=100tok ETA=1m\\n')
    progress(f, 3002, 6000, 9000)
os.rename(path, path + '.1')
with open(path, 'a') as f:
    progress(f, 6001, 9000, 9000)
"
    );
    python_done(&second, &[path_str(&log)]);
    let sidecar = Sidecar::run(&args);
    sidecar.wait_log("replaced while the sidecar was down");
    let m = expect_exact(&sidecar, &log, 9001.0, 9000.0);
    assert_eq!(m.get("pulse_tail_rotations_total", &label(&log)), Some(1.0));
}

#[test]
fn a_corrupt_snapshot_is_reported_and_ignored() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("snapshot.json"),
        b"{\"version\": 1, \"run\": {\"logs\": [tr",
    )
    .unwrap();
    std::fs::write(&log, "Processing: A\n  5/10 (0 err) 1.0 req/s\n").unwrap();
    let sidecar = Sidecar::run(&["--log", path_str(&log), "--state-dir", path_str(&state)]);
    sidecar.wait_log("ignoring the corrupt snapshot");
    expect_exact(&sidecar, &log, 2.0, 5.0);
}

#[test]
fn an_unreadable_snapshot_is_reported_and_ignored() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    let state = dir.path().join("state");
    // Tests run as root, for whom permissions never fail a read: a directory in the
    // snapshot's place does. Saving over it fails too, and must not stop the sidecar either.
    std::fs::create_dir_all(state.join("snapshot.json")).unwrap();
    std::fs::write(&log, "Processing: A\n  5/10 (0 err) 1.0 req/s\n").unwrap();
    let sidecar = Sidecar::run(&["--log", path_str(&log), "--state-dir", path_str(&state)]);
    sidecar.wait_log("cannot read the state file");
    expect_exact(&sidecar, &log, 2.0, 5.0);
    sidecar.wait_log("cannot save the snapshot");
    append(&log, "  6/10 (0 err) 1.0 req/s\n");
    expect_exact(&sidecar, &log, 3.0, 6.0);
}

/// `  i/total (0 err) ...` for i in start..=end, as the Python writers print them.
fn progress_lines(start: u32, end: u32, total: u32) -> String {
    (start..=end)
        .map(|i| format!("  {i}/{total} (0 err) 10.0 req/s avg_comp=100tok ETA=1m\n"))
        .collect()
}

/// A writer holding its log open, the way a pipeline does: after a rename it goes on writing
/// to the renamed file until it reopens.
struct Writer {
    path: std::path::PathBuf,
    file: std::fs::File,
}

impl Writer {
    fn open(path: &std::path::Path) -> Writer {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        Writer {
            path: path.to_owned(),
            file,
        }
    }

    fn write(&mut self, text: &str) {
        self.write_bytes(text.as_bytes());
    }

    fn write_bytes(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.file.write_all(bytes).unwrap();
    }

    /// logrotate `create`: the log is renamed to `.1` and an empty one is created in its place;
    /// this writer still holds the renamed file.
    fn rotate(&self) {
        std::fs::rename(&self.path, self.path.with_extension("log.1")).unwrap();
        std::fs::File::create(&self.path).unwrap();
    }

    fn reopen(&mut self) {
        *self = Writer::open(&self.path);
    }
}

fn state_args<'a>(log: &'a std::path::Path, state: &'a std::path::Path) -> [&'a str; 6] {
    [
        "--log",
        path_str(log),
        "--state-dir",
        path_str(state),
        // Long: the snapshots these tests rely on are the ones taken at start and at each
        // rotation switch.
        "--snapshot-interval",
        "1h",
    ]
}

/// Waits for exactly `lines` lines and each partition's `(name, completed)`, with no pipeline
/// restart counted anywhere.
fn expect_partitions(
    sidecar: &Sidecar,
    log: &std::path::Path,
    lines: f64,
    partitions: &[(&str, f64)],
) {
    let m = sidecar.wait_metrics(&format!("{lines} lines and {partitions:?}"), |m| {
        lines_total(m, log) >= lines
            && partitions.iter().all(|(name, completed)| {
                m.partition("pulse_partition_requests_completed", name) == Some(*completed)
            })
    });
    assert_eq!(lines_total(&m, log), lines, "lines lost or doubled");
    assert_eq!(
        m.get("pulse_log_lines_matched_total", &label(log)),
        Some(lines)
    );
    for (name, _) in partitions {
        assert_eq!(
            m.partition("pulse_pipeline_restarts_total", name),
            Some(0.0),
            "a restart that never happened, in {name}"
        );
    }
}

fn snapshot_of(state: &std::path::Path) -> Option<serde_json::Value> {
    read_json(&state.join("snapshot.json"))
}

/// Partition A's header and progress `1..=done` of `total` in `run.log` under `dir`, read by a
/// sidecar with a state directory whose snapshot already holds them; the writer keeps the log
/// open.
fn started_with_state(
    dir: &std::path::Path,
    done: u32,
    total: u32,
) -> (std::path::PathBuf, std::path::PathBuf, Writer, Sidecar) {
    let log = dir.join("run.log");
    let state = dir.join("state");
    let mut writer = Writer::open(&log);
    writer.write(&format!(
        "Processing: A (SHORT)\n{}",
        progress_lines(1, done, total)
    ));
    let sidecar = Sidecar::run(&state_args(&log, &state));
    let lines = f64::from(done + 1);
    expect_partitions(&sidecar, &log, lines, &[("A", f64::from(done))]);
    wait_for("a snapshot of every line", || {
        snapshot_of(&state).is_some_and(|s| s["run"]["logs"][0]["lines"] == done + 1)
    });
    (log, state, writer, sidecar)
}

#[test]
fn sigkill_while_the_rotated_file_is_still_draining() {
    use std::os::unix::fs::MetadataExt;
    let dir = temp_dir();
    let (log, state, mut writer, mut sidecar) = started_with_state(dir.path(), 10, 100);
    let args = state_args(&log, &state);
    writer.rotate();
    let new_inode = std::fs::metadata(&log).unwrap().ino();
    // The snapshot taken at the switch: it must list the file still being drained as well.
    wait_for("a snapshot of the switch to the new file", || {
        snapshot_of(&state).is_some_and(|s| s["logs"][0]["position"]["ino"] == new_inode)
    });
    sidecar.kill9();
    writer.write(&progress_lines(11, 20, 100));
    writer.reopen();
    writer.write(&progress_lines(21, 30, 100));
    let sidecar = Sidecar::run(&args);
    sidecar.wait_log("draining the rotated file");
    expect_partitions(&sidecar, &log, 31.0, &[("A", 30.0)]);
}

#[test]
fn a_restart_while_the_log_is_renamed_away_is_killed_before_its_next_snapshot() {
    let dir = temp_dir();
    let (log, state, mut writer, mut sidecar) = started_with_state(dir.path(), 10, 30);
    let args = state_args(&log, &state);
    sidecar.kill9();
    // Renamed away while the sidecar is down; nothing is at the path yet.
    std::fs::rename(&log, log.with_extension("log.1")).unwrap();
    writer.write(&progress_lines(11, 20, 30));
    let mut sidecar = Sidecar::run(&args);
    expect_partitions(&sidecar, &log, 21.0, &[("A", 20.0)]);
    wait_for("a snapshot of 21 lines", || {
        snapshot_of(&state).is_some_and(|s| s["run"]["logs"][0]["lines"] == 21)
    });
    sidecar.kill9();
    // The lines after the kill hold the next partition's header: losing it would add B's
    // progress to A and count a restart that never happened.
    writer.write(&format!(
        "{}Processing: B (LONG)\n{}",
        progress_lines(21, 30, 30),
        progress_lines(1, 5, 50)
    ));
    writer.reopen();
    writer.write(&progress_lines(6, 10, 50));
    let sidecar = Sidecar::run(&args);
    expect_partitions(&sidecar, &log, 42.0, &[("A", 30.0), ("B", 10.0)]);
}

#[test]
fn a_crash_loop_during_a_rotation_loses_and_doubles_nothing() {
    let dir = temp_dir();
    let (log, state, mut writer, mut sidecar) = started_with_state(dir.path(), 100, 500);
    let args = state_args(&log, &state);
    writer.rotate();
    writer.write(&progress_lines(101, 200, 500));
    // Killed within a second of each restart, three times, while the writer moves from the
    // old file to the new one; each kill lands wherever the restarted sidecar happens to be.
    for round in 0..3u32 {
        sidecar.kill9();
        let start = 201 + round * 100;
        writer.write(&progress_lines(start, start + 49, 500));
        if round == 1 {
            writer.reopen();
        }
        writer.write(&progress_lines(start + 50, start + 99, 500));
        sidecar = Sidecar::run(&args);
    }
    expect_partitions(&sidecar, &log, 501.0, &[("A", 500.0)]);
    let m = sidecar.metrics();
    assert_eq!(m.get("pulse_tail_rotations_total", &label(&log)), Some(1.0));
}

/// The stepped sidecar's clock is the test's down to the log's worker thread, which stamps
/// the lines: progress read after an hour of the test's clock is an hour after the start,
/// with no wall time passed.
#[test]
fn a_stepped_sidecar_reads_on_the_tests_clock() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    std::fs::write(&log, "Processing: A\n  1/10 (0 err) 1.0 req/s\n").unwrap();
    let mut sidecar = InProcess::logs(dir.path(), &[&log]);
    let last = |m: &Metrics| m.partition("pulse_partition_last_progress_timestamp_seconds", "A");
    assert_eq!(last(&sidecar.metrics()), Some(stepped::T0));
    sidecar.0.step(std::time::Duration::from_secs(3600));
    append(&log, "  2/10 (0 err) 1.0 req/s\n");
    let m = sidecar.step_until("the second progress line", |m| {
        m.partition("pulse_partition_requests_completed", "A") == Some(2.0)
    });
    assert_eq!(last(&m), Some(sidecar.0.now()));
    assert!(sidecar.0.now() >= stepped::T0 + 3600.0);
}
