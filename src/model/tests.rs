use super::*;
use crate::parse::{Parser, RunInference, Tqdm};

const T0: Seconds = 1_780_000_000.0;

/// Feeds lines of a `run_inference` log at the given times.
fn feed(run: &mut Run, lines: &[(Seconds, &str)]) {
    let mut parser = Parser::RunInference(RunInference);
    for (at, line) in lines {
        run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), *at);
    }
}

fn one_log() -> Run {
    Run::new(&["/logs/inference.log".to_owned()])
}

const SEED: &[&str] = &[
    "Loading tokenizer from /shared/kimi-k2.5-int4...",
    "Vocab size: 163840",
    "Model: /shared/kimi-k2.5-int4",
    "============================================================",
    "Processing: B1_glaive (SHORT)",
    "============================================================",
    "B1_glaive: 10000 prompts",
    "Running 10000 requests (concurrency=150, max_tokens=10240)...",
    "  50/10000 (0 err) 1.1 req/s avg_comp=217tok ETA=2.4h",
    "  100/10000 (0 err) 1.0 req/s avg_comp=298tok ETA=2.8h",
];

#[test]
fn seed_log_builds_the_partition() {
    let mut run = one_log();
    let lines: Vec<_> = SEED.iter().map(|l| (T0, *l)).collect();
    feed(&mut run, &lines);
    assert_eq!(
        run.progress.model_name.as_deref(),
        Some("/shared/kimi-k2.5-int4")
    );
    let p = &run.partitions["B1_glaive"];
    assert_eq!(p.mode.as_deref(), Some("SHORT"));
    assert_eq!((p.concurrency, p.max_tokens), (Some(150), Some(10240)));
    assert_eq!(
        (p.completed, p.planned, p.errors),
        (100, Some(10000), Some(0))
    );
    assert_eq!(p.requests_per_second, Some(1.0));
    assert_eq!(p.avg_completion_tokens, Some(298.0));
    assert_eq!(p.logged_eta_seconds, Some(2.8 * 3600.0));
    assert!(p.active);
    assert_eq!(p.progress_ratio(), Some(0.01));
    assert_eq!(run.logs[0].lines, SEED.len() as u64);
    assert_eq!(run.logs[0].matched, 6);
    assert_eq!(run.recent_lines.len(), SEED.len());
    // Everything read in one instant: no measured rate, so the logged ETA stands.
    assert_eq!(p.measured_rate(T0), None);
    assert_eq!(p.eta_seconds(T0), Some(2.8 * 3600.0));
    // The logged ETA counts down between reports.
    assert_eq!(p.eta_seconds(T0 + 600.0), Some(2.8 * 3600.0 - 600.0));
    assert_eq!(run.restarts(), 0);
}

#[test]
fn measured_rate_eta_and_tokens_per_second() {
    let mut run = one_log();
    feed(
        &mut run,
        &[
            (T0, "Processing: A"),
            (T0, "A: 1000 prompts"),
            (T0, "  100/1000 (0 err) 2.0 req/s avg_comp=200tok ETA=7m"),
            (
                T0 + 50.0,
                "  200/1000 (0 err) 2.0 req/s avg_comp=200tok ETA=6m",
            ),
            (
                T0 + 100.0,
                "  300/1000 (0 err) 2.0 req/s avg_comp=200tok ETA=5m",
            ),
        ],
    );
    let views = run.views();
    let p = &run.partitions["A"];
    assert_eq!(p.measured_rate(T0 + 100.0), Some(2.0));
    assert_eq!(p.eta_seconds(T0 + 100.0), Some(350.0));
    assert_eq!(p.completion_tokens_per_second(T0 + 100.0), Some(400.0));
    // Nothing new for another 100 s: the rate halves instead of freezing.
    assert_eq!(p.measured_rate(T0 + 200.0), Some(1.0));
    assert_eq!(run.stall_seconds(&views[0], T0 + 200.0), Some(100.0));
    assert_eq!(p.last_progress_at, Some(T0 + 100.0));
}

#[test]
fn partition_switch_leaves_the_old_one_inactive() {
    let mut run = one_log();
    feed(
        &mut run,
        &[
            (T0, "Processing: B1_glaive (SHORT)"),
            (T0, "  50/100 (0 err) 1.1 req/s"),
            (T0 + 1.0, "Processing: B2_code (LONG)"),
            (T0 + 2.0, "  10/200 (1 err) 0.5 req/s"),
        ],
    );
    let b1 = &run.partitions["B1_glaive"];
    let b2 = &run.partitions["B2_code"];
    assert!(!b1.active);
    assert_eq!(b1.completed, 50);
    assert_eq!(run.stall_seconds(&run.views()[0], T0 + 100.0), None);
    assert!(b2.active);
    assert_eq!((b2.completed, b2.errors), (10, Some(1)));
    assert_eq!(b2.mode.as_deref(), Some("LONG"));
}

#[test]
fn finished_partition_is_not_active() {
    let mut run = one_log();
    feed(
        &mut run,
        &[
            (T0, "Processing: A"),
            (T0, "  100/100 (0 err) 1.0 req/s ETA=0s"),
        ],
    );
    let p = &run.partitions["A"];
    assert!(!p.active);
    assert_eq!(p.eta_seconds(T0), Some(0.0));
    assert_eq!(p.progress_ratio(), Some(1.0));
}

#[test]
fn count_going_backwards_is_a_restart_not_negative_progress() {
    let mut run = one_log();
    feed(
        &mut run,
        &[
            (T0, "Processing: A"),
            (T0, "  400/1000 (0 err) 1.0 req/s"),
            (T0 + 10.0, "  450/1000 (0 err) 1.0 req/s"),
            (T0 + 20.0, "  50/1000 (0 err) 1.0 req/s"),
            (T0 + 30.0, "  100/1000 (0 err) 1.0 req/s"),
        ],
    );
    let p = &run.partitions["A"];
    assert_eq!(p.restarts, 1);
    assert_eq!(p.completed, 100);
    // The rate only spans points since the restart: 50 in 10 s, never negative.
    assert_eq!(p.measured_rate(T0 + 30.0), Some(5.0));
}

#[test]
fn repeated_header_is_one_restart() {
    let mut run = one_log();
    feed(
        &mut run,
        &[
            (T0, "Processing: A"),
            (T0, "  400/1000 (0 err) 1.0 req/s"),
            (T0 + 5.0, "Traceback (most recent call last):"),
            (T0 + 6.0, "Processing: A"),
            (T0 + 7.0, "  50/1000 (0 err) 1.0 req/s"),
        ],
    );
    let p = &run.partitions["A"];
    assert_eq!(
        p.restarts, 1,
        "header and the lower count are the same restart"
    );
    assert_eq!(p.completed, 50);
    assert_eq!(run.restarts(), 1);
}

#[test]
fn progress_before_any_header_goes_to_the_default_partition() {
    let mut run = one_log();
    feed(&mut run, &[(T0, "  5/10 (0 err) 1.0 req/s")]);
    assert_eq!(run.partitions[DEFAULT_PARTITION].completed, 5);
    assert!(run.partitions[DEFAULT_PARTITION].active);
}

#[test]
fn tqdm_descriptions_name_partitions_per_log() {
    let mut run = Run::new(&["a.log".into(), "b.log".into()]);
    let mut parser = Parser::Tqdm(Tqdm::default());
    let lines = [
        (0, "A:  10%|#         | 10/100 [00:10<01:30, 1.00it/s]"),
        (1, "B:  50%|#####     | 50/100 [00:10<00:10, 5.00it/s]"),
        (0, "A:  20%|##        | 20/100 [00:20<01:20, 1.00it/s]"),
    ];
    for (log, line) in lines {
        run.ingest(log, line.as_bytes(), parser.parse(line.as_bytes()), T0);
    }
    assert_eq!(run.partitions["A"].completed, 20);
    assert_eq!(run.partitions["B"].completed, 50);
    assert!(run.partitions["A"].active && run.partitions["B"].active);
    assert_eq!(run.logs[0].lines, 2);
    assert_eq!(run.logs[1].matched, 1);
}

#[test]
fn window_is_bounded() {
    let mut run = one_log();
    feed(&mut run, &[(T0, "Processing: A")]);
    for i in 1..=5000u64 {
        let line = format!("  {i}/100000 (0 err) 1.0 req/s");
        feed(&mut run, &[(T0 + i as f64, &line)]);
    }
    let p = &run.partitions["A"];
    // 600 s of points at one per second, fewer than the point cap: rate stays exact.
    assert_eq!(p.measured_rate(T0 + 5000.0), Some(1.0));
    assert_eq!(p.completed, 5000);
}

#[test]
fn a_count_that_starts_over_after_its_plan_is_a_new_pass_not_a_restart() {
    let mut run = one_log();
    let mut parser = Parser::Tqdm(Tqdm::default());
    let lines = [
        (T0, "inner: 100%|##########| 4/4 [00:02<00:00, 2.00it/s]"),
        (
            T0 + 1.0,
            "inner:  25%|##5       | 1/4 [00:00<00:01, 2.00it/s]",
        ),
        (
            T0 + 2.0,
            "inner:  50%|#####     | 2/4 [00:01<00:01, 2.00it/s]",
        ),
        // Backwards before the plan was reached: the pipeline did start over.
        (
            T0 + 3.0,
            "inner:  25%|##5       | 1/4 [00:00<00:01, 2.00it/s]",
        ),
    ];
    for (i, (at, line)) in lines.iter().enumerate() {
        run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), *at);
        let p = &run.partitions["inner"];
        assert_eq!(p.restarts, u64::from(i == 3), "after line {i}");
        assert!(p.active == (i > 0), "after line {i}");
    }
}

#[test]
fn unparsed_lines_are_counted_and_change_nothing() {
    let mut run = one_log();
    let mut parser = Parser::Tqdm(Tqdm::default());
    for line in [
        "B3_big:  30%|###       | 3.60k/12.0k [00:01<00:02, 3.60kit/s]",
        "B3_big:  37%|###7      | 4.50x/12.0k [00:02<00:02, 3.60kit/s]",
    ] {
        run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), T0);
    }
    assert_eq!(run.partitions["B3_big"].completed, 3600);
    assert_eq!((run.logs[0].matched, run.logs[0].unparsed), (1, 1));
    assert_eq!(run.recent_lines.len(), 2);
}

#[test]
fn a_restored_run_keeps_what_the_configuration_gives_now() {
    let mut saved = one_log();
    feed(
        &mut saved,
        &[(T0, "Processing: B1 (SHORT)"), (T0, "B1: 100 prompts")],
    );
    saved.plan.gpu_hour_price = Some(1.0);
    let snapshot: Run = serde_json::from_str(&serde_json::to_string(&saved).unwrap()).unwrap();
    let mut configured = one_log();
    configured.plan.gpu_hour_price = Some(2.5);
    configured.plan.deadline = Some(Deadline::AfterStart(3600.0));
    let label = crate::run_identity::RunLabel {
        run: "synth".into(),
        role: crate::run_identity::Role::Driver,
    };
    configured.identity.label = Some(label);
    configured.collectors_on =
        crate::collectors::Collectors::all().with(crate::collectors::Collector::Gpu, false);
    let run = Run::restored(snapshot, &["/logs/inference.log".to_owned()], &configured);
    assert_eq!(run.plan.gpu_hour_price, Some(2.5));
    assert!(
        run.plan.deadline.is_some(),
        "the deadline given at this start"
    );
    assert_eq!(run.identity.label.as_ref().unwrap().run, "synth");
    assert_eq!(
        run.collectors_on, configured.collectors_on,
        "and its collectors"
    );
    assert!(
        run.partitions.contains_key("B1"),
        "and the snapshot's progress"
    );
}

#[test]
fn a_bar_no_header_named_is_not_added_to_the_records_of_named_partitions() {
    // vLLM's offline bar with no header: the call in progress, 16 of 16, beside B1's file.
    let mut run = Run::new(&["run.log".into()]);
    let mut parser = Parser::Tqdm(Tqdm::default());
    let frame = "Processed prompts: 100%|██████████| 16/16 [00:03<00:00,  5.00it/s]";
    run.ingest(0, frame.as_bytes(), parser.parse(frame.as_bytes()), T0);
    assert_eq!(run.partitions[DEFAULT_PARTITION].completed, 16);
    let mut stats = OutputStats::expecting(&[]);
    for _ in 0..24 {
        stats.add(&Facts::default(), 10);
    }
    run.outputs_mut().insert(
        "/run/outputs/B1/responses.jsonl".into(),
        OutputFile {
            partition: "B1".into(),
            stats,
            last_write: Some(T0),
        },
    );
    let p = run.projection(T0 + 1.0);
    assert_eq!(p.completed, 24);
}

/// A log rewritten from its start: a header other than the run's first line is a new run, and
/// leaves nothing of the old one; the same header (a driver restarted into its log) and more
/// progress (a rotated log's new file) are the same run.
#[test]
fn a_new_first_line_that_begins_a_run_is_a_new_run() {
    let mut run = one_log();
    feed(
        &mut run,
        &[
            (0.0, "Model: /models/m1"),
            (1.0, "Processing: B1 (SHORT)"),
            (2.0, "B1: 4 prompts"),
            (3.0, "  4/4 (0 err) 2.0 req/s avg_comp=20tok ETA=0s"),
            (4.0, "All partitions complete."),
        ],
    );
    assert!(run.progress.complete_said);
    assert!(
        !run.is_new_run(0, b"Model: /models/m1", false),
        "the same header"
    );
    assert!(
        run.is_new_run(0, b"Model: /models/m1", true),
        "the same header in a new file"
    );
    for replaced in [false, true] {
        assert!(
            !run.is_new_run(0, b"  5/10 (0 err) 2.0 req/s", replaced),
            "more progress"
        );
        assert!(!run.is_new_run(0, b"Traceback (most recent call last):", replaced));
    }
    assert!(run.is_new_run(0, b"Model: /models/m2", false));
    assert!(run.is_new_run(0, b"Processing: C1 (LONG)", false));
    run.begin_new_run(0, b"Model: /models/m2", 10.0);
    assert!(
        run.partitions.is_empty()
            && !run.progress.complete_said
            && run.progress.model_name.is_none()
    );
    assert_eq!(run.identity.runs_started, 1);
    assert_eq!(run.logs[0].first_line.as_deref(), Some("Model: /models/m2"));
    assert!(
        !run.is_new_run(0, b"Model: /models/m2", false),
        "now the run's own header"
    );
}

#[test]
fn a_run_begins_with_a_header_or_a_bar_at_nothing() {
    use crate::parse::starts_a_run;
    for start in [
        "Model: /m",
        "Processing: B1 (SHORT)",
        "B1: 10 prompts",
        "Running 10 requests (concurrency=2, max_tokens=8)...",
        "Processed prompts:   0%|          | 0/100 [00:00<?, ?it/s]",
        // The seed's driver begins every run with its preamble.
        "Loading tokenizer from /shared/kimi-k2.5-int4...",
        "Vocab size: 163840",
        "2026-12-04 19:03:44,620 INFO Loading tokenizer from /m...",
    ] {
        assert!(starts_a_run(start.as_bytes()), "{start}");
    }
    for more in [
        "Vocab size: large",
        "Loading tokenizer from ",
        "  3/10 (0 err) 1.0 req/s avg_comp=20tok ETA=7s",
        "Processed prompts:  30%|███       | 30/100 [00:03<00:07, 10.0it/s]",
        "WARNING something",
        "",
    ] {
        assert!(!starts_a_run(more.as_bytes()), "{more}");
    }
}

#[test]
fn a_snapshot_keeps_the_gpu_time_under_its_own_name() {
    let mut saved = serde_json::to_value(Run::default()).unwrap();
    saved["gpu_seconds"] = serde_json::json!(90.0);
    let run: Run = serde_json::from_value(saved.clone()).unwrap();
    assert_eq!(run.gpu_seconds(), 90.0);
    assert_eq!(serde_json::to_value(&run).unwrap(), saved);
    saved.as_object_mut().unwrap().remove("gpu_seconds");
    let run: Run = serde_json::from_value(saved).unwrap();
    assert_eq!(run.gpu_seconds(), 0.0);
}

#[test]
fn an_old_snapshot_loads_with_the_identity_grouped() {
    // Written before the identity was grouped: its fields stay at the snapshot's top level.
    let old = r#"{"model_name":"m","complete_said":false,"stage_done":false,"working_at":null,"partitions":{},"logs":[],"recent_lines":[],"runs_started":2,"run_started":{"at":5.0,"log":"/l","first_line":"Model: m","previous_id":"a"}}"#;
    let run: Run = serde_json::from_str(old).unwrap();
    assert_eq!(run.runs_started(), 2);
    assert_eq!(
        run.run_started().as_ref().unwrap().previous_id.as_deref(),
        Some("a")
    );
    let again = serde_json::to_value(&run).unwrap();
    assert_eq!(again["runs_started"], 2);
    assert_eq!(again["run_started"]["log"], "/l");
    assert!(again.get("identity").is_none());
}

#[test]
fn an_old_snapshot_loads_with_the_progress_grouped() {
    // Written before the progress log's facts were grouped: the same keys, in the same order.
    let mut run = one_log();
    feed(
        &mut run,
        &[(T0, "Model: /models/m1"), (T0, "Processing: B1 (SHORT)")],
    );
    let text = serde_json::to_string(&run).unwrap();
    let keys: Vec<String> = serde_json::from_str::<serde_json::Value>(&text)
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let order: Vec<usize> = [
        "\"model_name\":",
        "\"complete_said\":",
        "\"stage_done\":",
        "\"working_at\":",
        "\"partitions\":",
        "\"logs\":",
        "\"recent_lines\":",
        "\"server_log\":",
        "\"gpu_seconds\":",
        "\"runs_started\":",
        "\"run_started\":",
    ]
    .iter()
    .map(|k| text.find(k).unwrap_or_else(|| panic!("{k} in {text}")))
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert_eq!(keys.len(), order.len(), "{keys:?}");
    let old = r#"{"model_name":"m","complete_said":true,"stage_done":false,"working_at":4.0,"partitions":{},"logs":[{"path":"/l","lines":3,"matched":2,"rotations":0,"truncations":0,"oversized":0,"current":null}],"recent_lines":[]}"#;
    let loaded: Run = serde_json::from_str(old).unwrap();
    assert_eq!(loaded.model_name().as_deref(), Some("m"));
    assert!(loaded.complete_said());
    assert_eq!(loaded.progress.working_at, Some(4.0));
    assert_eq!(loaded.logs()[0].lines, 3);
}
