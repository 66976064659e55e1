use super::*;
use crate::model::Facts;
use crate::model::{GpuReading, GpuSample};
use crate::model::{OutputFile, OutputStats, ProcessState, ServerState};
use crate::parse::{Parser, RunInference};

const T0: Seconds = 1_780_000_000.0;

fn feed(run: &mut Run, lines: &[(Seconds, &str)]) {
    let mut parser = Parser::RunInference(RunInference);
    for (at, line) in lines {
        run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), *at);
    }
}

fn active_run() -> Run {
    let mut run = Run::new(&["log".into()]);
    feed(
        &mut run,
        &[
            (T0, "Processing: B1 (SHORT)"),
            (T0, "  100/1000 (0 err) 1.0 req/s avg_comp=300tok"),
            (T0 + 60.0, "  160/1000 (0 err) 1.0 req/s avg_comp=300tok"),
        ],
    );
    run
}

fn alerts(conditions: &[Condition]) -> Vec<(AlertName, Option<&str>)> {
    conditions
        .iter()
        .map(|c| (c.alert, c.partition.as_deref()))
        .collect()
}

fn eval(run: &Run, now: Seconds) -> Vec<Condition> {
    evaluate(run, None, &Rules::default(), &History::default(), now)
}

#[test]
fn healthy_run_has_no_conditions() {
    let run = active_run();
    assert!(eval(&run, T0 + 120.0).is_empty());
}

#[test]
fn stalled_after_ten_minutes_without_progress() {
    let run = active_run();
    assert!(eval(&run, T0 + 60.0 + 599.0).is_empty());
    let c = eval(&run, T0 + 60.0 + 840.0);
    assert_eq!(alerts(&c), [(AlertName::Stalled, Some("B1"))]);
    assert_eq!(c[0].summary, "no progress for 14m (cause unknown)");
}

#[test]
fn a_slow_reporter_gets_five_median_gaps() {
    let mut run = Run::new(&["log".into()]);
    let mut lines = vec![(T0, "Processing: B1".to_owned())];
    for i in 1..=5 {
        lines.push((
            T0 + i as f64 * 300.0,
            format!("  {}/1000 (0 err) 1.0 req/s", i * 10),
        ));
    }
    let lines: Vec<(Seconds, &str)> = lines.iter().map(|(t, l)| (*t, l.as_str())).collect();
    feed(&mut run, &lines);
    // Reports every 5 minutes: 20 minutes of silence is normal, 26 is not.
    assert!(eval(&run, T0 + 1500.0 + 20.0 * 60.0).is_empty());
    assert_eq!(
        alerts(&eval(&run, T0 + 1500.0 + 26.0 * 60.0)),
        [(AlertName::Stalled, Some("B1"))]
    );
}

#[test]
fn a_backlog_read_at_once_does_not_hide_a_slow_reporter() {
    let mut run = Run::new(&["log".into()]);
    // A sidecar started (without a state directory) on a run that already reported 40 times:
    // every backlog line carries the same time.
    let mut lines = vec![(T0, "Processing: B1".to_owned())];
    for i in 1..=40 {
        lines.push((T0, format!("  {i}/1000 (0 err) 1.0 req/s")));
    }
    // Then it goes on reporting every 5 minutes.
    for i in 1..=3 {
        lines.push((
            T0 + i as f64 * 300.0,
            format!("  {}/1000 (0 err) 1.0 req/s", 40 + i),
        ));
    }
    let lines: Vec<(Seconds, &str)> = lines.iter().map(|(t, l)| (*t, l.as_str())).collect();
    feed(&mut run, &lines);
    assert_eq!(run.partitions()["B1"].median_progress_gap(), Some(300.0));
    assert!(eval(&run, T0 + 900.0 + 20.0 * 60.0).is_empty());
}

#[test]
fn stall_causes_from_the_evidence() {
    let stalled_at = T0 + 60.0 + 900.0;
    let cause = |run: &Run| eval(run, stalled_at)[0].summary.clone();
    let id = |run: &Run| eval(run, stalled_at)[0].cause;

    let mut run = active_run();
    *run.process_mut() = Some(ProcessState::default());
    assert!(cause(&run).contains("process gone"));
    assert_eq!(id(&run), Some(Cause::DriverGone));

    let mut run = active_run();
    *run.server_mut() = Some(ServerState {
        up: Some(false),
        ..ServerState::default()
    });
    let c = eval(&run, stalled_at);
    assert!(alerts(&c).contains(&(AlertName::ServerDown, None)));
    assert!(c.iter().any(|c| c.summary.contains("server down")));
    // The alert that is the cause names it too, so an action for the cause runs for either.
    assert!(
        c.iter().all(|c| c.cause == Some(Cause::ServerDown)),
        "{c:?}"
    );
    // A server given in the config is evidence, whatever discovery guesses beside it (a
    // guess is never probed: it has no health to fail).
    *run.discovered_mut() = Some(crate::model::Discovered {
        server: Some(crate::model::DiscoveredServer {
            pid: 7,
            engine: "vllm".into(),
            command: "vllm serve m".into(),
            health_url: "http://127.0.0.1:8000/health".into(),
            by: format!("{} (no driver found yet)", crate::model::ONLY_ONE),
            serves_http: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    assert!(alerts(&eval(&run, stalled_at)).contains(&(AlertName::ServerDown, None)));
    *run.server_mut() = None;
    assert!(!alerts(&eval(&run, stalled_at)).contains(&(AlertName::ServerDown, None)));

    let mut run = active_run();
    *run.server_mut() = Some(ServerState {
        up: Some(true),
        running_requests: Some(150.0),
        queued_requests: Some(0.0),
        ..ServerState::default()
    });
    assert!(cause(&run).contains("server busy, nothing written"));

    run.server_mut()
        .as_mut()
        .unwrap()
        .generation_tokens_per_second = Some(1300.0);
    assert!(cause(&run).contains("server busy, nothing written"));
    run.server_mut()
        .as_mut()
        .unwrap()
        .generation_tokens_per_second = Some(0.0);
    assert!(cause(&run).contains("server hung"));
    assert_eq!(id(&run), Some(Cause::ServerHung));

    // The gauge claims work while the counter stands still: frozen behind a live front end,
    // hung all the same.
    run.server_mut().as_mut().unwrap().claimed_tokens_per_second = Some(1300.0);
    let frozen = &eval(&run, stalled_at)[0];
    assert!(frozen.summary.contains("(server hung)"), "{frozen:?}");
    assert_eq!(frozen.cause, Some(Cause::ServerHung));
    assert!(frozen.details.contains("metrics are frozen"), "{frozen:?}");
    assert!(frozen.details.contains("1300 tok/s"), "{frozen:?}");
    run.server_mut().as_mut().unwrap().claimed_tokens_per_second = None;

    // Running none while requests wait, and nothing generated: frozen too, not idle.
    run.server_mut().as_mut().unwrap().running_requests = Some(0.0);
    run.server_mut().as_mut().unwrap().queued_requests = Some(12.0);
    assert!(cause(&run).contains("server hung"), "{}", cause(&run));
    run.server_mut().as_mut().unwrap().queued_requests = Some(0.0);

    assert!(cause(&run).contains("server idle, client waiting"));
    assert_eq!(id(&run), Some(Cause::ServerIdleClientWaiting));

    // Records still arriving are evidence of work: the log is what is stuck.
    b1_records_written(&mut run, stalled_at - 10.0);
    let c = eval(&run, stalled_at);
    assert_eq!(alerts(&c), [(AlertName::LogSilent, Some("B1"))]);
    assert_eq!(
        c[0].summary,
        "no progress line for 15m, outputs still growing"
    );
}

#[test]
fn a_driver_that_exits_after_a_complete_run_is_not_process_exited() {
    let mut run = Run::new(&["log".into()]);
    feed(
        &mut run,
        &[
            (T0, "Processing: B1"),
            (T0 + 60.0, "  200/200 (0 err) 1.0 req/s"),
        ],
    );
    let mut process = ProcessState::default();
    process.observe(Some(7), T0);
    process.observe(None, T0 + 70.0);
    *run.process_mut() = Some(process.clone());
    let c = eval(&run, T0 + 400.0);
    assert!(
        !alerts(&c).contains(&(AlertName::ProcessExited, None)),
        "{c:?}"
    );
    assert!(alerts(&c).contains(&(AlertName::RunFinished, None)));
    // Exiting before the plan is reached is a crash.
    feed(
        &mut run,
        &[
            (T0 + 80.0, "Processing: B2"),
            (T0 + 90.0, "  5/200 (0 err) 1.0 req/s"),
        ],
    );
    let c = eval(&run, T0 + 400.0);
    assert!(
        c.iter()
            .any(|c| c.alert == AlertName::ProcessExited && c.cause == Some(Cause::DriverGone)),
        "{c:?}"
    );
}

/// A library's run: its records counted from its files, no plan, its log's own lines
/// (tests/testdata/libraries/datatrove/gen.log).
#[test]
fn a_library_driver_that_ends_after_its_last_stage_is_finished_not_exited() {
    let lines = [
        "2026-12-07 20:21:34.318 | INFO     | datatrove.pipeline.inference.run_inference:metrics_reporter:204 - Model call: Inference 🔍",
        "2026-12-07 20:18:26.272 | SUCCESS  | datatrove.executor.base:_run_for_rank:140 - Processing done for rank=0",
        "📉📉📉 Stats: All 2 tasks 📉📉📉",
    ];
    let ended = |said: &[&str]| {
        let mut run = Run::new(&["log".into()]);
        let mut parser = Parser::Auto(crate::parse::Detect::default());
        for (i, line) in said.iter().enumerate() {
            run.ingest(
                0,
                line.as_bytes(),
                parser.parse(line.as_bytes()),
                T0 + i as f64,
            );
        }
        run.set_output_file(
            "/r/output/alpha/00000.jsonl.gz".into(),
            OutputFile {
                partition: "alpha".into(),
                stats: OutputStats {
                    records: 150,
                    ..OutputStats::default()
                },
                last_write: Some(T0),
            },
        );
        let mut process = ProcessState::default();
        process.observe(Some(7), T0);
        process.observe(None, T0 + 10.0);
        *run.process_mut() = Some(process);
        alerts(&eval(&run, T0 + 20.0))
            .into_iter()
            .map(|(a, _)| a)
            .collect::<Vec<_>>()
    };
    let clean = ended(&lines);
    assert!(clean.contains(&AlertName::RunFinished), "{clean:?}");
    assert!(!clean.contains(&AlertName::ProcessExited), "{clean:?}");
    // Work said after the last stage's end: the driver died in the next one.
    let crashed = ended(&[lines[1], lines[2], lines[0]]);
    assert!(crashed.contains(&AlertName::ProcessExited), "{crashed:?}");
    assert!(!crashed.contains(&AlertName::RunFinished), "{crashed:?}");
}

/// A library's run announces no partition; its log at work while its driver runs is the run
/// waiting on its server, so vLLM's gauges frozen mid-request (the EngineCore stopped) are a
/// hang, not the last batch of a finished run.
#[test]
fn a_library_run_at_work_waits_on_its_server() {
    let mut run = Run::new(&["log".into()]);
    let mut parser = Parser::Auto(crate::parse::Detect::default());
    let working = "2026-12-07 20:21:34.318 | INFO     | datatrove.pipeline.inference.run_inference:metrics_reporter:204 - Model call: Inference 🔍";
    let mut process = ProcessState::default();
    process.observe(Some(7), T0);
    *run.process_mut() = Some(process);
    let stopped_at = T0 + 30.0;
    for at in [T0, T0 + 10.0, T0 + 20.0, stopped_at, T0 + 40.0, T0 + 50.0] {
        run.ingest(0, working.as_bytes(), parser.parse(working.as_bytes()), at);
        run.set_server(
            ServerState {
                up: Some(true),
                running_requests: Some(4.0),
                queued_requests: Some(0.0),
                generation_tokens_per_second: Some(if at < stopped_at { 60.0 } else { 0.0 }),
                frozen: at > stopped_at,
                health_passed: true,
                checked_at: Some(at),
                ..ServerState::default()
            },
            at,
        );
    }
    assert!(run.working() && !run.any_active());
    let mut rules = Rules::default();
    rules.0.get_mut(&AlertName::ServerHung).unwrap().threshold = 5.0;
    let c = evaluate(&run, None, &rules, &History::default(), T0 + 50.0);
    assert!(alerts(&c).contains(&(AlertName::ServerHung, None)), "{c:?}");
}

/// B1's output file, as many records as the log reports, last written `at`.
fn b1_records_written(run: &mut Run, at: Seconds) {
    run.outputs_mut().insert(
        "/p/B1/raw.jsonl".into(),
        OutputFile {
            partition: "B1".into(),
            stats: OutputStats {
                records: 160,
                ..OutputStats::default()
            },
            last_write: Some(at),
        },
    );
}

fn with_gpus(run: &mut Run, utilizations: &[f64]) {
    *run.gpus_mut() = Some(GpuReading {
        driver_version: None,
        devices: utilizations
            .iter()
            .enumerate()
            .map(|(i, u)| GpuSample {
                index: i as u32,
                utilization: Some(*u),
                ..GpuSample::default()
            })
            .collect(),
        at: T0,
        ..GpuReading::default()
    });
}

#[test]
fn idle_and_missing_gpus() {
    let mut run = active_run();
    with_gpus(&mut run, &[0.01, 0.02]);
    assert_eq!(
        alerts(&eval(&run, T0 + 61.0)),
        [(AlertName::GpusIdle, None)]
    );
    with_gpus(&mut run, &[0.01, 0.9]);
    assert!(eval(&run, T0 + 61.0).is_empty(), "one busy GPU is not idle");

    let mut history = History::default();
    with_gpus(&mut run, &[0.9; 8]);
    history.record(&run, T0);
    with_gpus(&mut run, &[0.9; 7]);
    let c = evaluate(&run, None, &Rules::default(), &history, T0 + 61.0);
    assert_eq!(alerts(&c), [(AlertName::GpuMissing, None)]);
    assert_eq!(c[0].summary, "7 of 8 GPUs visible");
}

#[test]
fn error_rate_over_the_last_requests() {
    let mut run = Run::new(&["log".into()]);
    feed(
        &mut run,
        &[
            (T0, "Processing: B1"),
            (T0, "  1000/5000 (10 err) 1.0 req/s"),
            (T0 + 10.0, "  1100/5000 (11 err) 1.0 req/s"),
            (T0 + 20.0, "  1200/5000 (30 err) 1.0 req/s"),
        ],
    );
    // 20 errors in the last 200 requests: 10%.
    let c = eval(&run, T0 + 21.0);
    assert_eq!(alerts(&c), [(AlertName::ErrorRateHigh, Some("B1"))]);
    assert_eq!(c[0].summary, "10.0% of the last 200 requests failed");
}

#[test]
fn empty_responses_from_the_records() {
    let mut run = active_run();
    let mut stats = OutputStats::default();
    for i in 0..200 {
        let empty = i % 20 == 0; // 5%
        stats.add(
            &Facts {
                empty,
                ..Facts::default()
            },
            10,
        );
    }
    run.outputs_mut().insert(
        "/p/B1/raw.jsonl".into(),
        OutputFile {
            partition: "B1".into(),
            stats,
            last_write: Some(T0),
        },
    );
    let c = eval(&run, T0 + 61.0);
    assert!(
        alerts(&c).contains(&(AlertName::EmptyResponses, Some("B1"))),
        "{c:?}"
    );
}

#[test]
fn log_output_mismatch() {
    let mut run = active_run();
    let mut stats = OutputStats::default();
    for _ in 0..100 {
        stats.add(&Facts::default(), 10);
    }
    run.outputs_mut().insert(
        "/p/B1/raw.jsonl".into(),
        OutputFile {
            partition: "B1".into(),
            stats,
            last_write: Some(T0 + 60.0),
        },
    );
    // The log says 160, the file holds 100: a gap of 60 > max(50, 2% of 1000).
    let c = eval(&run, T0 + 61.0);
    assert_eq!(alerts(&c), [(AlertName::LogOutputMismatch, Some("B1"))]);
    assert_eq!(
        c[0].summary,
        "the log says 160 completed, the files hold 100"
    );
}

#[test]
fn throughput_drop_against_the_runs_median() {
    let mut run = Run::new(&["log".into()]);
    let mut history = History::default();
    let mut done = 0u64;
    let mut t = T0;
    feed(&mut run, &[(t, "Processing: B1")]);
    // An hour at 10 req/s (3000 tok/s), then 20 minutes at 1 req/s.
    let mut first_fired = None;
    for minute in 0..80 {
        let rate = if minute < 60 { 600 } else { 60 };
        done += rate;
        t += 60.0;
        let line = format!("  {done}/1000000 (0 err) 1.0 req/s avg_comp=300tok");
        feed(&mut run, &[(t, &line)]);
        history.record(&run, t);
        let c = evaluate(&run, None, &Rules::default(), &history, t);
        let dropped = alerts(&c).contains(&(AlertName::ThroughputDrop, None));
        assert!(
            minute >= 60 || !dropped,
            "minute {minute}: a steady run is not a drop"
        );
        if dropped && first_fired.is_none() {
            first_fired = Some(minute);
        }
    }
    // The 15-minute average falls under half the median well within 15 minutes of the drop.
    let first = first_fired.expect("the drop was never noticed");
    assert!((60..75).contains(&first), "noticed at minute {first}");
}

#[test]
fn finished_partitions_and_run() {
    let mut run = Run::new(&["log".into()]);
    feed(
        &mut run,
        &[
            (T0, "Processing: B1"),
            (T0, "  50/100 (0 err) 1.0 req/s"),
            (T0 + 100.0, "  100/100 (1 err) 1.0 req/s"),
        ],
    );
    let c = eval(&run, T0 + 101.0);
    assert_eq!(
        alerts(&c),
        [
            (AlertName::PartitionFinished, Some("B1")),
            (AlertName::RunFinished, None)
        ]
    );
    assert!(
        c[1].details.contains("B1: 100/100 requests, 1 errors"),
        "{}",
        c[1].details
    );
    // Every partition it knows reached its plan: finished, though its driver lingers.
    *run.process_mut() = Some(ProcessState {
        up: true,
        ..ProcessState::default()
    });
    assert_eq!(
        alerts(&eval(&run, T0 + 101.0)),
        [
            (AlertName::PartitionFinished, Some("B1")),
            (AlertName::RunFinished, None)
        ]
    );
}

#[test]
fn disabled_rules_stay_silent() {
    let run = active_run();
    let mut rules = Rules::default();
    rules.0.get_mut(&AlertName::Stalled).unwrap().enabled = false;
    assert!(evaluate(&run, None, &rules, &History::default(), T0 + 5000.0).is_empty());
}

#[test]
fn a_server_log_ending_in_a_crash_is_the_cause() {
    let mut run = Run::new(&["log".into(), "sglang.log".into()]);
    run.logs_mut()[1].server = true;
    feed(
        &mut run,
        &[
            (T0, "Processing: B1 (SHORT)"),
            (T0, "  100/1000 (0 err) 1.0 req/s avg_comp=300tok"),
            (T0 + 60.0, "  160/1000 (0 err) 1.0 req/s avg_comp=300tok"),
        ],
    );
    let mut parser = Parser::Server(crate::parse::ServerLog::default());
    for line in [
        "[2026-11-02 13:00:00 TP0] Decode batch, #running-req: 150, gen throughput (token/s): 1302.40, #queue-req: 0, ",
        "[2026-11-02 13:00:10 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ] {
        run.ingest(1, line.as_bytes(), parser.parse(line.as_bytes()), T0 + 100.0);
    }
    let c = eval(&run, T0 + 60.0 + 900.0);
    assert!(c[0].summary.contains("server crashed"), "{c:?}");
    assert_eq!(c[0].cause, Some(Cause::ServerCrashed));
    assert!(c[0].details.contains("oom"), "{c:?}");
    assert_eq!(run.server_log().tail.len(), 3);
    assert_eq!(
        run.recent_lines().len(),
        3,
        "the progress log's tail is its own"
    );
    // A report after the crash means the server came back.
    let line = "[2026-11-02 13:05:00 TP0] Decode batch, #running-req: 10, gen throughput (token/s): 99.0, #queue-req: 0, ";
    run.ingest(
        1,
        line.as_bytes(),
        parser.parse(line.as_bytes()),
        T0 + 200.0,
    );
    assert!(!eval(&run, T0 + 60.0 + 900.0)[0]
        .summary
        .contains("server crashed"));
}

#[test]
fn a_server_down_after_its_log_says_it_died_is_crashed_and_shows_no_figures() {
    let mut run = Run::new(&["log".into(), "vllm.log".into()]);
    run.logs_mut()[1].server = true;
    feed(
        &mut run,
        &[
            (T0, "Processing: B1 (SHORT)"),
            (T0 + 60.0, "  160/1000 (0 err) 1.0 req/s avg_comp=300tok"),
        ],
    );
    let mut parser = Parser::Server(crate::parse::ServerLog::default());
    for line in [
        "(APIServer pid=1) INFO 11-02 13:00:00 [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 300.0 tokens/s, Running: 4 reqs, Waiting: 4 reqs, CPU KV cache usage: 50.0%",
        "(APIServer pid=1) ERROR 11-02 13:00:05 [async_llm.py:700] AsyncLLM output_handler failed.",
        "Traceback (most recent call last):",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ] {
        run.ingest(1, line.as_bytes(), parser.parse(line.as_bytes()), T0 + 100.0);
    }
    *run.server_mut() = Some(ServerState {
        up: Some(false),
        error: Some("http://127.0.0.1:8000/health: cannot connect".into()),
        ..ServerState::default()
    });
    let c = eval(&run, T0 + 60.0 + 900.0);
    let down = c
        .iter()
        .find(|c| c.alert == AlertName::ServerDown)
        .expect("ServerDown");
    assert_eq!(down.summary, "the inference server crashed (fatal)");
    assert!(down.details.contains("EngineDeadError"), "{down:?}");
    let stalled = c
        .iter()
        .find(|c| c.alert == AlertName::Stalled)
        .expect("Stalled");
    assert!(stalled.summary.contains("server crashed"), "{stalled:?}");
    assert_eq!(run.server_figures().running, None);
    assert_eq!(run.server_last_known().running, Some(4.0));
}

#[test]
fn a_finished_run_whose_driver_lingers_never_pages() {
    let mut run = Run::new(&["log".into()]);
    feed(
        &mut run,
        &[
            (T0, "Processing: B1 (SHORT)"),
            (T0, "B1: 100 prompts"),
            (
                T0 + 60.0,
                "  100/100 (0 err) 2.0 req/s avg_comp=300tok ETA=0s",
            ),
            (T0 + 61.0, "Done: B1 (100 responses)"),
            (T0 + 61.0, "All partitions complete."),
        ],
    );
    *run.process_mut() = Some(ProcessState {
        up: true,
        ..ProcessState::default()
    });
    *run.server_mut() = Some(ServerState {
        up: Some(false),
        ..ServerState::default()
    });
    let later = T0 + 61.0 + 3600.0;
    let finished = [
        (AlertName::PartitionFinished, Some("B1")),
        (AlertName::RunFinished, None),
    ];
    assert_eq!(alerts(&eval(&run, later)), finished);
    run.process_mut().as_mut().unwrap().up = false;
    assert_eq!(alerts(&eval(&run, later)), finished);
    // A new partition makes the run unfinished again.
    run.process_mut().as_mut().unwrap().up = true;
    feed(
        &mut run,
        &[(later, "Processing: B2 (SHORT)"), (later, "B2: 50 prompts")],
    );
    let conditions = eval(&run, later + 60.0);
    let c = alerts(&conditions);
    assert!(!c.contains(&(AlertName::RunFinished, None)), "{c:?}");
    assert!(c.contains(&(AlertName::ServerDown, None)), "{c:?}");
}

#[test]
fn server_down_holds_back_server_hung_and_server_hung_holds_back_stalled() {
    assert!(AlertName::ServerDown.inhibits(AlertName::ServerHung));
    assert!(AlertName::ServerHung.inhibits(AlertName::Stalled));
    assert!(!AlertName::ServerHung.inhibits(AlertName::ServerDown));
    assert!(!AlertName::ServerHung.inhibits(AlertName::LogSilent));
}

#[test]
fn records_written_just_after_the_last_line_are_not_a_silent_log() {
    let mut run = active_run();
    // The last records came 20 s after the last progress line, then nothing.
    b1_records_written(&mut run, T0 + 80.0);
    let c = eval(&run, T0 + 60.0 + 610.0);
    assert!(c.is_empty(), "neither stalled yet nor a silent log: {c:?}");
    assert_eq!(
        alerts(&eval(&run, T0 + 80.0 + 610.0)),
        [(AlertName::Stalled, Some("B1"))]
    );
    // Records that go on for half the silence and more are a silent log.
    b1_records_written(&mut run, T0 + 60.0 + 400.0);
    assert_eq!(
        alerts(&eval(&run, T0 + 60.0 + 610.0)),
        [(AlertName::LogSilent, Some("B1"))]
    );
}

/// B1's file with `n` records made by `each(i)`, written as the log says (160 records).
fn with_records(n: u64, each: impl Fn(u64, &mut OutputStats)) -> Run {
    let mut run = active_run();
    let mut stats = OutputStats::expecting(&["/reasoning".into()]);
    for i in 0..n {
        each(i, &mut stats);
    }
    run.outputs_mut().insert(
        "/p/B1/raw.jsonl".into(),
        OutputFile {
            partition: "B1".into(),
            stats,
            last_write: Some(T0 + 60.0),
        },
    );
    run
}

#[test]
fn truncation_high_over_a_fifth_of_recent_answers() {
    let cut = Facts {
        finish_reason: Some("length".into()),
        tokens: Some(10240),
        ..Facts::default()
    };
    let whole = Facts {
        finish_reason: Some("stop".into()),
        tokens: Some(300),
        ..Facts::default()
    };
    let run = with_records(160, |i, s| {
        s.add(if i % 4 == 0 { &cut } else { &whole }, 10)
    });
    let c = eval(&run, T0 + 61.0);
    assert_eq!(alerts(&c), [(AlertName::TruncationHigh, Some("B1"))]);
    assert!(
        c[0].summary.starts_with("40 of the last 160 responses"),
        "{}",
        c[0].summary
    );
    assert!(
        c[0].details.contains("p50 "),
        "the distribution: {}",
        c[0].details
    );
    // One in ten is under the threshold; and 40 records are too few to judge.
    let run = with_records(160, |i, s| {
        s.add(if i % 10 == 0 { &cut } else { &whole }, 10)
    });
    assert_eq!(eval(&run, T0 + 61.0), []);
    let run = with_records(40, |_, s| s.add(&cut, 10));
    assert!(!alerts(&eval(&run, T0 + 61.0)).contains(&(AlertName::TruncationHigh, Some("B1"))));
}

#[test]
fn missing_fields_name_the_field_and_the_records() {
    let required = ["/reasoning".to_owned()];
    let run = with_records(160, |i, s| {
        let missing = u32::from(i % 20 == 0);
        s.add(
            &Facts {
                missing,
                ..Facts::default()
            },
            10,
        );
        s.add_missing(missing, &required);
    });
    let c = eval(&run, T0 + 61.0);
    assert_eq!(alerts(&c), [(AlertName::MissingFields, Some("B1"))]);
    assert!(c[0].details.contains("/reasoning (8)"), "{}", c[0].details);
    assert!(c[0].details.contains("lines 1, 21, 41"), "{}", c[0].details);
}

#[test]
fn duplicates_are_noticed_once_a_pass_repeats_an_id() {
    let mut run = with_records(160, |_, s| s.add(&Facts::default(), 10));
    run.note_output_tokens(T0 + 60.0, true);
    assert_eq!(eval(&run, T0 + 61.0), [], "no duplicate yet");
    let file = run.outputs_mut().get_mut("/p/B1/raw.jsonl").unwrap();
    file.stats.add(&Facts::default(), 10);
    file.stats.add_duplicate(|| Some("B1-7".into()));
    let c = eval(&run, T0 + 61.0);
    let notice: Vec<_> = c
        .iter()
        .filter(|c| c.alert == AlertName::DuplicateRecords)
        .collect();
    assert_eq!(notice.len(), 1, "{c:?}");
    assert!(
        notice[0]
            .summary
            .starts_with("1 records repeat an earlier id: 160 distinct of 161"),
        "{}",
        notice[0].summary
    );
    assert!(notice[0].details.contains("B1-7"));
}

#[test]
fn a_finished_run_pages_nothing_new_and_its_notice_says_what_held() {
    let cut = Facts {
        finish_reason: Some("length".into()),
        tokens: Some(10240),
        ..Facts::default()
    };
    let mut run = with_records(160, |_, s| s.add(&cut, 10));
    // Unfinished, the truncation pages.
    assert_eq!(
        alerts(&eval(&run, T0 + 61.0)),
        [(AlertName::TruncationHigh, Some("B1"))]
    );
    // Its log says every partition is done: the notices alone, the finding inside.
    feed(
        &mut run,
        &[
            (T0, "Processing: B1 (SHORT)"),
            (T0, "B1: 160 prompts"),
            (
                T0 + 60.0,
                "  160/160 (0 err) 2.0 req/s avg_comp=300tok ETA=0s",
            ),
            (T0 + 61.0, "Done: B1 (160 responses)"),
            (T0 + 61.0, "All partitions complete."),
        ],
    );
    let c = eval(&run, T0 + 61.0);
    assert_eq!(
        alerts(&c),
        [
            (AlertName::PartitionFinished, Some("B1")),
            (AlertName::RunFinished, None)
        ]
    );
    let notice = &c[1].details;
    assert!(
        notice.contains("Held when the run finished (not paged):\n- TruncationHigh on B1: 160 of the last 160 responses"),
        "{notice}"
    );
}

/// The driver's stacks, taken during the stall, name its cause where the probes cannot;
/// stacks from before the stall began say nothing of it.
#[test]
fn the_drivers_stacks_refine_a_stalls_cause() {
    use crate::model::stacks::{Captures, ProcessStacks, Verdict, Wait, DRIVER};
    let stalled_at = T0 + 60.0 + 900.0;
    let stacks = |verdict: Verdict, at: Seconds| {
        Some(Captures {
            at,
            reason: "Stalled".into(),
            processes: vec![ProcessStacks {
                role: DRIVER.into(),
                pid: 42,
                at,
                took_ms: 30,
                summary:
                    "driver (pid 42): main thread blocked on a lock in `write_record` (run.py:40)"
                        .into(),
                wait: Wait::Lock,
                verdict,
                note: None,
                connections: Vec::new(),
                threads: Vec::new(),
            }],
        })
    };
    let judged = |run: &Run, stacks: Option<Captures>| {
        let rules = Rules::default();
        evaluate(
            run,
            stacks.as_ref(),
            &rules,
            &History::default(),
            stalled_at,
        )[0]
        .clone()
    };
    let with = |verdict: Verdict, at: Seconds| judged(&active_run(), stacks(verdict, at));
    let c = with(Verdict::Deadlocked, stalled_at);
    assert!(c.summary.contains("(driver deadlocked)"), "{c:?}");
    assert_eq!(c.cause, Some(Cause::DriverDeadlocked));
    assert!(c.details.contains("`write_record` (run.py:40)"), "{c:?}");
    assert!(with(Verdict::Stopped, stalled_at)
        .summary
        .contains("(driver stopped)"));
    assert!(with(Verdict::WaitingOnServer, stalled_at)
        .summary
        .contains("(driver waiting on the server)"));
    // Taken before the last evidence of work: about another moment.
    assert!(with(Verdict::Deadlocked, T0)
        .summary
        .contains("(cause unknown)"));
    // The probes' evidence of a hung server stands over a driver that waits on it.
    let mut run = active_run();
    *run.server_mut() = Some(ServerState {
        up: Some(true),
        running_requests: Some(150.0),
        generation_tokens_per_second: Some(0.0),
        ..ServerState::default()
    });
    let c = judged(&run, stacks(Verdict::WaitingOnServer, stalled_at));
    assert!(c.summary.contains("server hung"));
}

/// SGLang's scheduler killed (what the OOM killer does): its front end still answers (503 on
/// a generating `/health`, up for the probe) and its gauges stay where they were; discovery's
/// scans saw the scheduler go. That is a crash, with what the log said last, and no figures.
#[test]
fn an_engine_dead_behind_its_live_api_is_a_crash_with_its_last_words_and_no_figures() {
    let mut run = active_run();
    run.add_log("sglang.log".into(), true);
    let mut parser = Parser::Server(crate::parse::ServerLog::default());
    let line = "[2026-12-07 05:25:14] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. tic start time: 05:24:54. last_heartbeat time: 05:24:30";
    run.ingest(
        1,
        line.as_bytes(),
        parser.parse(line.as_bytes()),
        T0 + 100.0,
    );
    *run.server_mut() = Some(ServerState {
        up: Some(true),
        running_requests: Some(4.0),
        queued_requests: Some(6.0),
        frozen: true,
        ..ServerState::default()
    });
    let scheduler = crate::model::DiscoveredProcess {
        pid: 11,
        command: "sglang::scheduler".into(),
        ..Default::default()
    };
    let server = crate::model::DiscoveredServer {
        pid: 10,
        workers: vec![scheduler],
        by: "the driver talks to it".into(),
        ..Default::default()
    };
    let later = crate::model::DiscoveredServer {
        workers: Vec::new(),
        ..server.clone()
    }
    .after(Some(&server));
    *run.discovered_mut() = Some(crate::model::Discovered {
        server: Some(server),
        ..Default::default()
    });
    assert!(!alerts(&eval(&run, T0 + 120.0)).contains(&(AlertName::ServerDown, None)));
    assert_eq!(run.server_figures().running, Some(4.0), "a hang's evidence");
    run.discovered_mut().as_mut().unwrap().server = Some(later);
    let c = eval(&run, T0 + 120.0);
    let down = c
        .iter()
        .find(|c| c.alert == AlertName::ServerDown)
        .expect("ServerDown");
    assert_eq!(
        down.summary,
        "the inference server's engine crashed behind its live API"
    );
    assert!(
        down.details.contains("sglang::scheduler (pid 11)"),
        "{down:?}"
    );
    assert!(down.details.contains("Health check failed"), "{down:?}");
    let figures = run.server_figures();
    assert_eq!((figures.running, figures.queued), (None, None));
}

/// A health URL that gives no answer in time from a port that accepts: ServerDown says the
/// HTTP process is hung, not gone.
#[test]
fn a_hung_health_check_is_said_as_hung() {
    let mut run = active_run();
    *run.server_mut() = Some(ServerState {
        up: Some(false),
        hung: true,
        error: Some("http://127.0.0.1:30000/health: no complete answer within 25s: it accepts connections but gives no answer within 25s, so its HTTP process is hung (stopped, or wedged in its event loop)".into()),
        ..ServerState::default()
    });
    let c = eval(&run, T0 + 120.0);
    let down = c
        .iter()
        .find(|c| c.alert == AlertName::ServerDown)
        .expect("ServerDown");
    assert_eq!(down.summary, "the inference server's HTTP process is hung");
    assert_eq!(down.cause, Some(Cause::ServerHung));
    assert!(down.details.contains("Its process lives"), "{down:?}");
}

/// SGLang sets its gauges only when it logs a batch: idle after the run, they keep the last
/// batch's figures. Frozen gauges are not shown once no partition waits on the server; while
/// one does, they are a hang's evidence and stay.
#[test]
fn frozen_gauges_are_not_shown_once_nothing_waits_on_the_server() {
    let mut run = active_run();
    *run.server_mut() = Some(ServerState {
        up: Some(true),
        running_requests: Some(1.0),
        queued_requests: Some(0.0),
        generation_tokens_per_second: Some(0.0),
        frozen: true,
        ..ServerState::default()
    });
    assert_eq!(run.server_figures().running, Some(1.0));
    for p in run.partitions_mut().values_mut() {
        p.active = false;
    }
    let figures = run.server_figures();
    assert_eq!(
        (figures.running, figures.generation_tokens_per_second),
        (None, None)
    );
    run.server_mut().as_mut().unwrap().frozen = false;
    assert_eq!(run.server_figures().running, Some(1.0));
}

/// vLLM's `run_batch` writes its output file once its bar is closed; a sidecar that reads the
/// file before the bar's last frame (a slow log, a loaded node) has the log at 0 and the
/// files at the plan. The notice fires on the files, and says their count, not the log's.
#[test]
fn a_partition_finished_on_its_files_before_its_log_says_the_files_count() {
    let mut run = Run::new(&["log".into()]);
    feed(
        &mut run,
        &[
            (T0, "Processing: P1 (40 requests)"),
            (T0 + 20.0, "  0/40 (0 err) 0.0 req/s"),
        ],
    );
    run.set_output_file(
        "/b/P1/output.jsonl".into(),
        OutputFile {
            partition: "P1".into(),
            stats: OutputStats {
                records: 40,
                ..OutputStats::default()
            },
            last_write: Some(T0 + 30.0),
        },
    );
    let c = eval(&run, T0 + 31.0);
    let finished = c
        .iter()
        .find(|c| c.alert == AlertName::PartitionFinished)
        .unwrap_or_else(|| panic!("no PartitionFinished: {c:?}"));
    assert_eq!(finished.summary, "40 requests done");
}

/// A run late for a deadline three minutes away is paged while there is time to act: RunLate's
/// `for` (15 minutes) waits at most a quarter of the time left.
#[test]
fn run_late_waits_no_longer_than_a_share_of_the_time_left() {
    let mut run = active_run();
    let plan = crate::model::Plan {
        deadline: Some(crate::model::Deadline::At(T0 + 60.0 + 180.0)),
        ..run.plan().clone()
    };
    run.configure(plan, None, crate::collectors::Collectors::all(), None);
    let late: Vec<Condition> = eval(&run, T0 + 60.0)
        .into_iter()
        .filter(|c| c.alert == AlertName::RunLate)
        .collect();
    assert_eq!(late.len(), 1, "840 requests at 1 a second need 14 minutes");
    assert_eq!(late[0].wait_at_most, Some(45.0));
    let later = eval(&run, T0 + 60.0 + 100.0);
    let late = later
        .iter()
        .find(|c| c.alert == AlertName::RunLate)
        .unwrap();
    assert_eq!(late.wait_at_most, Some(20.0));
}

/// A run between partitions (B1 left with errors to retry, its driver still running) whose server a driver's
/// connection tied to it (issue 58): the engine stopped, the server is what the run waits on.
fn between_partitions_with_a_tied_server() -> Run {
    let mut run = Run::new(&["log".into()]);
    feed(
        &mut run,
        &[
            (T0, "Processing: B1 (SHORT)"),
            (T0, "B1: 100 prompts"),
            (T0 + 30.0, "  50/100 (0 err) 1.0 req/s avg_comp=300tok"),
            (T0 + 60.0, "  80/100 (20 err) 1.0 req/s avg_comp=300tok"),
        ],
    );
    // The driver moved on from B1 (to its retries, or the next subset) and starts nothing.
    for p in run.partitions_mut().values_mut() {
        p.active = false;
    }
    run.process_seen(Some(42), T0);
    *run.discovered_mut() = Some(crate::model::Discovered {
        server: Some(crate::model::DiscoveredServer {
            pid: 7,
            engine: "vllm".into(),
            command: "vllm serve m".into(),
            health_url: "http://127.0.0.1:8000/health".into(),
            by: "the driver's connection to it".into(),
            serves_http: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    run
}

/// Issue 58: with no partition active, a stall whose server is hung, down or not generating
/// names the server, never "driver idle between partitions"; a server that is fine and idle
/// leaves the driver to blame.
#[test]
fn a_stall_between_partitions_with_a_tied_hung_server_names_the_server() {
    let later = T0 + 60.0 + 900.0;
    let run_stall = |run: &Run, now: Seconds| {
        eval(run, now)
            .into_iter()
            .find(|c| c.alert == AlertName::Stalled && c.partition.is_none())
            .unwrap_or_else(|| {
                panic!(
                    "the run's Stalled: {:?} {:?}",
                    eval(run, now),
                    run.partitions()
                )
            })
    };
    // Its health asked, no answer from a port that accepts (the engine stopped behind it),
    // after it had answered.
    let mut run = between_partitions_with_a_tied_server();
    run.set_server(
        ServerState {
            up: Some(true),
            checked_at: Some(T0),
            ..ServerState::default()
        },
        T0,
    );
    run.set_server(
        ServerState {
            up: Some(false),
            hung: true,
            error: Some("http://127.0.0.1:8000/health: no complete answer within 2s: it accepts connections but gives no answer within 2s, so its HTTP process is hung (stopped, or wedged in its event loop)".into()),
            checked_at: Some(later),
            ..ServerState::default()
        },
        later,
    );
    let stalled = run_stall(&run, later);
    assert_eq!(stalled.cause, Some(Cause::ServerHung), "{stalled:?}");
    assert!(stalled.summary.contains("(server hung)"), "{stalled:?}");
    assert!(
        stalled.details.contains("HTTP process is hung"),
        "{stalled:?}"
    );
    let c = eval(&run, later);
    let down = c
        .iter()
        .find(|c| c.alert == AlertName::ServerDown)
        .expect("ServerDown");
    assert_eq!(
        down.cause,
        Some(Cause::ServerHung),
        "the same cause: {down:?}"
    );

    // Its front end answers, its gauges hold a request and its counter stands still (vLLM's
    // EngineCore stopped mid-request): ServerHung, and the stall says so.
    let mut run = between_partitions_with_a_tied_server();
    for at in [T0 + 60.0, later - 300.0, later] {
        run.set_server(
            ServerState {
                up: Some(true),
                running_requests: Some(1.0),
                queued_requests: Some(0.0),
                generation_tokens_per_second: Some(if at == T0 + 60.0 { 30.0 } else { 0.0 }),
                checked_at: Some(at),
                ..ServerState::default()
            },
            at,
        );
    }
    let stalled = run_stall(&run, later);
    assert_eq!(stalled.cause, Some(Cause::ServerHung), "{stalled:?}");
    assert!(
        alerts(&eval(&run, later)).contains(&(AlertName::ServerHung, None)),
        "{:?}",
        eval(&run, later)
    );

    // The server up and idle: the driver starts nothing, as before.
    let mut run = between_partitions_with_a_tied_server();
    run.set_server(
        ServerState {
            up: Some(true),
            running_requests: Some(0.0),
            queued_requests: Some(0.0),
            generation_tokens_per_second: Some(0.0),
            checked_at: Some(later),
            ..ServerState::default()
        },
        later,
    );
    assert_eq!(
        run_stall(&run, later).cause,
        Some(Cause::DriverIdleBetweenPartitions)
    );
}

/// A guess is never evidence: the only server on the node, whose EngineCore discovery saw go,
/// says nothing of the run (no ServerDown, no server cause in a stall).
#[test]
fn a_guessed_servers_dead_engine_says_nothing() {
    let mut run = between_partitions_with_a_tied_server();
    let server = run
        .discovered_mut()
        .as_mut()
        .unwrap()
        .server
        .as_mut()
        .unwrap();
    server.by = format!("{} (no driver found yet)", crate::model::ONLY_ONE);
    server.workers_gone = vec![crate::model::DiscoveredProcess {
        pid: 8,
        command: "VLLM::EngineCore".into(),
        ..Default::default()
    }];
    assert_eq!(run.engine_dead(), None);
    let c = eval(&run, T0 + 60.0 + 900.0);
    assert!(
        !alerts(&c).contains(&(AlertName::ServerDown, None)),
        "{c:?}"
    );
    let stalled = c
        .iter()
        .find(|c| c.alert == AlertName::Stalled)
        .expect("Stalled");
    assert_eq!(stalled.cause, Some(Cause::DriverIdleBetweenPartitions));
}
