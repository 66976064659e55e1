//! Output files end to end: JSONL written while the sidecar runs, counted, inspected and
//! reconciled with the log. A file rewritten in place is read by the sidecar in this process,
//! stepped (`common::stepped`): a poll after the rewrite, no wall time waited for.

use crate::common::stepped::InProcess;
use crate::common::*;
use std::path::Path;

fn sglang(tokens: u64, reason: &str, text: &str) -> String {
    format!(
        r#"{{"text":"{text}","meta_info":{{"completion_tokens":{tokens},"finish_reason":{{"type":"{reason}"}}}}}}"#
    ) + "\n"
}

fn records(m: &Metrics, partition: &str) -> Option<f64> {
    m.partition("pulse_output_records_total", partition)
}

fn setup() -> (tempfile::TempDir, String, String) {
    let dir = temp_dir();
    let outputs = format!("{}/prepared/*/raw_responses.jsonl", path_str(dir.path()));
    let inputs = format!("{}/prepared/*/prompts.jsonl", path_str(dir.path()));
    (dir, outputs, inputs)
}

/// The sidecar in this process, following the output glob `outputs`.
fn stepped(dir: &Path, outputs: &str) -> InProcess {
    InProcess::start(dir, &format!("[[outputs]]\nglob = {outputs:?}\n"))
}

fn partition_dir(dir: &Path, name: &str) -> std::path::PathBuf {
    let p = dir.join("prepared").join(name);
    std::fs::create_dir_all(&p).unwrap();
    p
}

#[test]
fn records_are_counted_inspected_and_reconciled_with_the_log() {
    let (dir, outputs, inputs) = setup();
    let log = dir.path().join("inference.log");
    let sidecar = Sidecar::run(&[
        "--log",
        path_str(&log),
        "--outputs",
        &outputs,
        "--inputs",
        &inputs,
    ]);
    let b1 = partition_dir(dir.path(), "B1_glaive");
    std::fs::write(b1.join("prompts.jsonl"), "{\"p\":1}\n".repeat(400)).unwrap();
    let raw = b1.join("raw_responses.jsonl");
    let mut text = String::new();
    text += &sglang(100, "stop", "Hello");
    text += &sglang(
        200,
        "stop",
        "A longer answer with \\\"quotes\\\" and \\n newlines",
    );
    text += &sglang(10240, "length", "cut at the token cap");
    text += &sglang(0, "stop", "");
    text += "{\"text\":\"\",\"error\":\"Request timed out after 600s\"}\n";
    text += "this is not json\n";
    text += "{\"text\":\"half a rec";
    append(&raw, &text);

    let m = sidecar.wait_metrics("six complete records", |m| {
        records(m, "B1_glaive") == Some(6.0)
            && m.get("pulse_collector_up", "collector=\"outputs\"") == Some(1.0)
    });
    let b = |name| m.partition(name, "B1_glaive");
    assert_eq!(b("pulse_output_completion_tokens_total"), Some(10540.0));
    assert_eq!(b("pulse_output_empty_responses_total"), Some(1.0));
    assert_eq!(b("pulse_output_error_records_total"), Some(1.0));
    assert_eq!(b("pulse_output_invalid_records_total"), Some(1.0));
    let complete_bytes = text.rfind('\n').unwrap() + 1;
    assert_eq!(b("pulse_output_bytes"), Some(complete_bytes as f64));
    assert!(b("pulse_output_last_write_timestamp_seconds").unwrap() > 1.6e9);
    assert_eq!(
        m.get(
            "pulse_output_finish_reason_total",
            "partition=\"B1_glaive\",reason=\"stop\""
        ),
        Some(3.0)
    );
    assert_eq!(
        m.get(
            "pulse_output_finish_reason_total",
            "partition=\"B1_glaive\",reason=\"length\""
        ),
        Some(1.0)
    );
    // Planned from the input file before the log says anything.
    assert_eq!(b("pulse_partition_requests_planned"), Some(400.0));
    assert_eq!(m.get("pulse_run_requests_planned", ""), Some(400.0));

    // The partial record completes.
    append(&raw, "ord\"}\n");
    sidecar.wait_metrics("the completed record", |m| {
        records(m, "B1_glaive") == Some(7.0)
    });

    // The log claims far more than the files hold: the gap shows it.
    append(
        &log,
        "Processing: B1_glaive (SHORT)\nB1_glaive: 400 prompts\n  150/400 (1 err) 1.0 req/s avg_comp=300tok ETA=4m\n",
    );
    let m = sidecar.wait_metrics("the log", |m| {
        m.partition("pulse_partition_log_output_gap", "B1_glaive") == Some(143.0)
    });
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "B1_glaive"),
        Some(150.0)
    );
    // The run's progress is what the files hold, each prompt once: not the log's claim.
    assert_eq!(m.get("pulse_run_requests_completed", ""), Some(7.0));

    // Rates need two points in time: more records in the files, more progress in the log.
    append(&raw, &sglang(50, "stop", "more"));
    append(&log, "  160/400 (1 err) 1.0 req/s avg_comp=300tok ETA=4m\n");
    // The log and the outputs are read by two threads: wait for both.
    sidecar.wait_metrics("rates from two points", |m| {
        m.partition("pulse_partition_requests_completed", "B1_glaive") == Some(160.0)
            && m.get("pulse_run_requests_completed", "") == Some(8.0)
            && records(m, "B1_glaive") == Some(8.0)
            && m.partition("pulse_partition_completion_tokens_per_second", "B1_glaive")
                .is_some_and(|t| t > 0.0)
            && m.get("pulse_run_eta_seconds", "").is_some_and(|e| e > 0.0)
    });

    // A partition that appears later is picked up when the glob is evaluated again.
    let b2 = partition_dir(dir.path(), "B2_code");
    append(
        &b2.join("raw_responses.jsonl"),
        &(sglang(5, "stop", "x") + &sglang(7, "stop", "y")),
    );
    let m = sidecar.wait_metrics("the new partition", |m| records(m, "B2_code") == Some(2.0));
    assert_eq!(
        m.partition("pulse_output_completion_tokens_total", "B2_code"),
        Some(12.0)
    );
}

#[test]
fn awkward_records_are_counted_not_fatal() {
    let (dir, outputs, _) = setup();
    let p = partition_dir(dir.path(), "A");
    let raw = p.join("raw_responses.jsonl");
    let sidecar = Sidecar::run(&["--outputs", &outputs]);
    let mut text = String::new();
    text += "[1, 2, 3]\n";
    text += "\"just a string\"\n";
    text += "{\"completion_tokens\": \"217\", \"response\": \"ok\"}\n";
    text += "{\"completion_tokens\": 216.6, \"response\": \"ok\"}\n";
    text += "\u{0}\u{0}\u{0}\n";
    append(&raw, &text);
    // A 50 MB record, over the default 16 MiB cap: a record, counted, not inspected.
    let script = r#"
import sys
with open(sys.argv[1], 'a') as f:
    f.write('{"response": "')
    chunk = 'x' * (1 << 20)
    for _ in range(50):
        f.write(chunk)
    f.write('", "completion_tokens": 9}\n{"response": "after", "completion_tokens": 1}\n')
"#;
    python_done(script, &[path_str(&raw)]);
    let m = sidecar.wait_metrics("seven records", |m| records(m, "A") == Some(7.0));
    assert_eq!(
        m.partition("pulse_output_invalid_records_total", "A"),
        Some(3.0)
    );
    assert_eq!(
        m.partition("pulse_output_oversized_records_total", "A"),
        Some(1.0)
    );
    assert_eq!(
        m.partition("pulse_output_completion_tokens_total", "A"),
        Some(217.0 + 217.0 + 1.0)
    );
    let rss = m.get("process_resident_memory_bytes", "").unwrap();
    assert!(
        rss < 96.0 * 1024.0 * 1024.0,
        "resident memory {rss} after a 50 MB record"
    );
}

#[test]
fn a_truncated_output_file_is_recounted_not_doubled() {
    let (dir, outputs, _) = setup();
    let raw = partition_dir(dir.path(), "A").join("raw_responses.jsonl");
    append(&raw, &sglang(1, "stop", "a").repeat(5));
    let mut sidecar = stepped(dir.path(), &outputs);
    sidecar.step_until("five records", |m| records(m, "A") == Some(5.0));
    std::fs::write(&raw, sglang(2, "stop", "b").repeat(2)).unwrap();
    let m = sidecar.step_until("the rewritten file", |m| {
        m.partition("pulse_output_completion_tokens_total", "A") == Some(4.0)
    });
    assert_eq!(records(&m, "A"), Some(2.0));
}

#[test]
fn an_output_file_replaced_by_rename_is_recounted_not_doubled() {
    let (dir, outputs, _) = setup();
    let raw = partition_dir(dir.path(), "A").join("raw_responses.jsonl");
    append(&raw, &sglang(1, "stop", "a").repeat(5));
    let mut sidecar = stepped(dir.path(), &outputs);
    sidecar.step_until("five records", |m| records(m, "A") == Some(5.0));
    // A pipeline that rewrites its results (deduplicated, say) to a temporary file and renames
    // it over the old one: the file's records are now the new file's.
    let tmp = dir.path().join("rewritten.jsonl.tmp");
    std::fs::write(&tmp, sglang(2, "stop", "b").repeat(3)).unwrap();
    std::fs::rename(&tmp, &raw).unwrap();
    let m = sidecar.step_until("the replacement", |m| {
        m.partition("pulse_output_completion_tokens_total", "A") == Some(6.0)
    });
    assert_eq!(records(&m, "A"), Some(3.0));
    append(&raw, &sglang(2, "stop", "c"));
    let m = sidecar.step_until("an append to the new file", |m| {
        records(m, "A") == Some(4.0)
    });
    assert_eq!(
        m.partition("pulse_output_completion_tokens_total", "A"),
        Some(8.0)
    );
}

#[test]
fn an_unreadable_output_file_sets_the_collector_down_and_recovers() {
    let (dir, outputs, _) = setup();
    let raw = partition_dir(dir.path(), "A").join("raw_responses.jsonl");
    append(&raw, &sglang(1, "stop", "a"));
    let sidecar = Sidecar::run(&["--outputs", &outputs]);
    sidecar.wait_metrics("the record", |m| records(m, "A") == Some(1.0));
    // Tests run as root, for whom permissions never fail a read: a directory in the file's
    // place does.
    std::fs::remove_file(&raw).unwrap();
    std::fs::create_dir(&raw).unwrap();
    sidecar.wait_metrics("the collector down", |m| {
        m.get("pulse_collector_up", "collector=\"outputs\"") == Some(0.0)
    });
    sidecar.wait_log("cannot read");
    // Many polls meet the same problem while it lasts...
    let polls = sidecar
        .metrics()
        .get("pulse_collector_runs_total", "collector=\"outputs\"")
        .expect("the polls counted");
    sidecar.wait_metrics("ten polls meeting the problem", |m| {
        m.get("pulse_collector_runs_total", "collector=\"outputs\"") >= Some(polls + 10.0)
    });
    std::fs::remove_dir(&raw).unwrap();
    append(&raw, &sglang(1, "stop", "a").repeat(3));
    // ...and it was logged once, not once a poll.
    let meanwhile = sidecar.log_until("again");
    assert!(
        !meanwhile.iter().any(|l| l.contains("cannot read")),
        "{meanwhile:#?}"
    );
    // Up alone is not enough: a poll between the file's creation and its write sees it empty.
    sidecar.wait_metrics("recovery", |m| {
        m.get("pulse_collector_up", "collector=\"outputs\"") == Some(1.0)
            && m.partition("pulse_output_completion_tokens_total", "A") == Some(3.0)
    });
}

#[test]
fn counts_resume_across_a_sidecar_kill() {
    let (dir, outputs, _) = setup();
    let raw = partition_dir(dir.path(), "A").join("raw_responses.jsonl");
    let state = dir.path().join("state");
    let args = [
        "--outputs",
        &outputs,
        "--state-dir",
        path_str(&state),
        "--snapshot-interval",
        "100ms",
    ];
    append(&raw, &sglang(10, "stop", "a").repeat(5));
    let mut sidecar = Sidecar::run(&args);
    sidecar.wait_metrics("five records", |m| records(m, "A") == Some(5.0));
    let snapshot = state.join("outputs.json");
    wait_for("an outputs snapshot with 5 records", || {
        std::fs::read_to_string(&snapshot).is_ok_and(|s| s.contains("\"records\":5"))
    });
    sidecar.kill9();
    append(&raw, &sglang(10, "stop", "b").repeat(3));
    let sidecar = Sidecar::run(&args);
    let m = sidecar.wait_metrics("eight records", |m| records(m, "A") == Some(8.0));
    assert_eq!(
        m.partition("pulse_output_completion_tokens_total", "A"),
        Some(80.0)
    );
}

#[test]
fn a_file_two_output_globs_match_is_counted_once_and_said_so() {
    let dir = temp_dir();
    let folder = dir.path().join("B1_glaive");
    std::fs::create_dir(&folder).unwrap();
    let records: String = (0..7).map(|i| format!("{{\"id\":{i}}}\n")).collect();
    std::fs::write(folder.join("raw_responses.jsonl"), records).unwrap();
    let wide = format!("{}/*/raw_responses.jsonl", dir.path().display());
    let narrow = format!("{}/B1_glaive/*.jsonl", dir.path().display());
    let out = std::process::Command::new(BIN)
        .args([
            "run",
            "--once",
            "--gpu",
            "off",
            "--outputs",
            &wide,
            "--outputs",
            &narrow,
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let m = Metrics(String::from_utf8(out.stdout).unwrap());
    assert_eq!(
        m.partition("pulse_output_records_total", "B1_glaive"),
        Some(7.0)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is also matched by outputs[1]; it is followed once, as outputs[0]"),
        "{stderr}"
    );
}
