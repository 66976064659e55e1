//! The batch APIs' output files as their providers document them (`tests/testdata/outputs/`:
//! the OpenAI Batch API, vLLM's `run_batch`, Anthropic's Message Batches; the README there
//! says where each shape comes from), read with the default pointers: each file's figures as
//! that README counts them by hand, and its whole `pulse_output_` exposition beside its
//! `.golden`.

use crate::common::*;
use std::path::Path;

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/testdata/outputs");

/// What the README counts in each file.
struct Counted {
    file: &'static str,
    records: f64,
    unique: f64,
    errors: f64,
    truncated: f64,
    tokens: f64,
    /// Records that give a token count.
    with_tokens: f64,
    empty: f64,
}

const COUNTED: [Counted; 3] = [
    Counted {
        file: "openai-batch.jsonl",
        records: 12.0,
        unique: 11.0,
        errors: 2.0,
        truncated: 2.0,
        tokens: 2954.0,
        with_tokens: 10.0,
        empty: 1.0,
    },
    Counted {
        file: "vllm-run-batch.jsonl",
        records: 6.0,
        unique: 6.0,
        errors: 2.0,
        truncated: 1.0,
        tokens: 942.0,
        with_tokens: 4.0,
        empty: 1.0,
    },
    Counted {
        file: "anthropic-batch.jsonl",
        records: 10.0,
        unique: 10.0,
        errors: 4.0,
        truncated: 1.0,
        tokens: 1910.0,
        with_tokens: 6.0,
        empty: 1.0,
    },
];

/// The figures of the records, not of the clock or the file's place (nor of how its folder is
/// watched, which depends on the machine's file system).
fn golden_lines(m: &Metrics) -> String {
    m.0.lines()
        .filter(|l| {
            l.starts_with("pulse_output_")
                && !l.starts_with("pulse_output_last_write")
                && !l.starts_with("pulse_output_folders")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The samples, copied now: a partition's token histogram is exported only for 15 minutes
/// after its file was written, and a checkout can be older.
fn fresh_samples() -> tempfile::TempDir {
    let fresh = temp_dir();
    for entry in std::fs::read_dir(SAMPLES).unwrap().flatten() {
        std::fs::copy(entry.path(), fresh.path().join(entry.file_name())).unwrap();
    }
    fresh
}

#[test]
fn every_batch_format_reads_as_its_provider_counts_it() {
    let fresh = fresh_samples();
    for c in &COUNTED {
        let m = run_once(fresh.path(), &["--outputs", c.file]);
        let get = |name: &str| m.partition(name, "default");
        let truncated: f64 = ["length", "max_tokens"]
            .iter()
            .filter_map(|r| {
                m.get(
                    "pulse_output_finish_reason_total",
                    &format!("partition=\"default\",reason=\"{r}\""),
                )
            })
            .sum();
        let got = (
            get("pulse_output_records_total"),
            get("pulse_output_unique_records"),
            get("pulse_output_duplicate_records_total"),
            get("pulse_output_error_records_total"),
            truncated,
            get("pulse_output_completion_tokens_total"),
            get("pulse_output_empty_responses_total"),
        );
        let want = (
            Some(c.records),
            Some(c.unique),
            Some(c.records - c.unique),
            Some(c.errors),
            c.truncated,
            Some(c.tokens),
            Some(c.empty),
        );
        assert_eq!(
            got, want,
            "{} (records, unique, duplicates, errors, truncated, tokens, empty)",
            c.file
        );
        assert_eq!(
            (
                get("pulse_output_record_completion_tokens_count"),
                get("pulse_output_record_completion_tokens_sum")
            ),
            (Some(c.with_tokens), Some(c.tokens)),
            "{}: the histogram holds every record with a count",
            c.file
        );
    }
}

#[test]
fn every_batch_format_reads_as_its_golden_exposition() {
    let samples = Path::new(SAMPLES);
    let fresh = fresh_samples();
    let checked = check_goldens_of(samples, "jsonl", |name| {
        golden_lines(&run_once(fresh.path(), &["--outputs", name]))
    });
    assert_eq!(checked, COUNTED.len());
}

/// `report FILES --json`: exit status 1 with the errors named as a problem; the same card a
/// sidecar serves at `/api/report`.
#[test]
fn the_report_gates_on_its_thresholds_and_matches_the_sidecars() {
    let samples = Path::new(SAMPLES);
    let report = |file: &str| {
        let out = std::process::Command::new(BIN)
            .current_dir(samples)
            .args(["report", "--json", "--outputs", file])
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), json)
    };
    let (code, card) = report("openai-batch.jsonl");
    assert_eq!(code, Some(1), "{card}");
    let partition = &card["partitions"][0];
    assert_eq!(
        (
            &partition["records"],
            &partition["distinct"],
            &partition["duplicates"]
        ),
        (&12.into(), &11.into(), &1.into())
    );
    let problems: Vec<&str> = card["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        problems,
        [
            "default: 2 of 12 records carry an error (16.7%, over ErrorRateHigh's 5.0%)",
            "default: 1 of 12 responses are empty (8.3%, over EmptyResponses's 2.0%)"
        ]
    );
    // A clean file crosses nothing.
    let dir = temp_dir();
    let clean = dir.path().join("B1").join("raw.jsonl");
    std::fs::create_dir_all(clean.parent().unwrap()).unwrap();
    let line = |i: u32| {
        format!("{{\"custom_id\":\"r{i}\",\"text\":\"ok\",\"meta_info\":{{\"completion_tokens\":{i},\"finish_reason\":\"stop\"}}}}\n")
    };
    std::fs::write(&clean, (1..=60).map(line).collect::<String>()).unwrap();
    let (code, card) = report(path_str(&clean));
    assert_eq!(code, Some(0), "{card}");
    assert_eq!(card["partitions"][0]["distinct"], 60);
    // The sidecar's card of the same file is the same card.
    let sidecar = Sidecar::run(&["--outputs", path_str(&clean)]);
    let served = sidecar.wait_metrics("the file read", |m| {
        m.partition("pulse_output_records_total", "B1") == Some(60.0)
    });
    drop(served);
    let served = get_json(sidecar.addr, "/api/report").unwrap();
    assert_eq!(served, card);
}

/// A partition whose file has not been written for 15 minutes keeps its counters but not its
/// 17 histogram series: a run of 50 partitions would otherwise carry 850 of them.
#[test]
fn the_token_histogram_is_exported_while_the_partition_writes() {
    let dir = temp_dir();
    let file = dir.path().join("openai-batch.jsonl");
    std::fs::copy(Path::new(SAMPLES).join("openai-batch.jsonl"), &file).unwrap();
    let buckets = |m: &Metrics| {
        m.0.lines()
            .filter(|l| l.starts_with("pulse_output_record_completion_tokens_bucket{"))
            .count()
    };
    let fresh = run_once(dir.path(), &["--outputs", "openai-batch.jsonl"]);
    assert_eq!(buckets(&fresh), 17, "{}", fresh.0);
    set_mtime(&file, 16 * 60);
    let quiet = run_once(dir.path(), &["--outputs", "openai-batch.jsonl"]);
    assert_eq!(buckets(&quiet), 0, "{}", quiet.0);
    assert_eq!(
        quiet.partition("pulse_output_records_total", "default"),
        fresh.partition("pulse_output_records_total", "default"),
        "the counters stay"
    );
}
