//! A new run started in the same folder under a running sidecar (the old log removed, a new
//! one written with other first lines): it gets its own run id, one `RunStarted` notice and
//! no page, and nothing of the old run's end is carried into it: its partitions count from
//! nothing, `RunFinished` is told again when it finishes. A rotated log, whose new file goes on
//! with progress, is the same run (tests/it/tailer.rs holds its counts).

use crate::common::smtp::{self, SmtpServer};
use crate::common::*;

fn run_id(m: &Metrics) -> String {
    run_info(m)
        .and_then(|i| i.get("run_id").cloned())
        .expect("pulse_run_info")
}

#[test]
fn a_run_replaced_under_a_running_sidecar_is_a_new_run() {
    let dir = temp_dir();
    let server = SmtpServer::start(free_port(), &dir.path().join("mail"), "plain", None);
    let run = dir.path().join("synth");
    std::fs::create_dir_all(&run).unwrap();
    let log = run.join("run.log");
    std::fs::write(
        &log,
        "Model: /models/m1\nProcessing: B1 (SHORT)\nB1: 4 prompts\n  4/4 (0 err) 2.0 req/s avg_comp=20tok ETA=0s\nProcessing: B2 (SHORT)\nB2: 2 prompts\n  2/2 (0 err) 2.0 req/s avg_comp=20tok ETA=0s\nAll partitions complete.\n",
    )
    .unwrap();
    let config = dir.path().join("pulse.toml");
    std::fs::write(
        &config,
        "[rules.RunFinished]\nfor = \"0s\"\n[rules.PartitionFinished]\nenabled = false\n",
    )
    .unwrap();
    let url = format!("smtp://127.0.0.1:{}?tls=none", server.port);
    let sidecar = Sidecar::run(&[
        "--config",
        path_str(&config),
        "--smtp",
        &url,
        "--email-to",
        "oncall@example.com",
        "--alert-interval",
        "100ms",
        "--stall-after",
        "1h",
        "--log",
        path_str(&log),
        "--gpu",
        "off",
    ]);
    let first = smtp::wait_messages(&server.maildir, 1);
    assert!(
        smtp::subject(&first[0]).contains("RunFinished"),
        "{}",
        first[0]
    );
    let m = sidecar.wait_metrics("the first run's id read", |m| {
        run_info(m).is_some_and(|i| i["run_id"] != pipeline_pulse::run_identity::named_id("synth"))
    });
    let old_id = run_id(&m);
    assert_eq!(m.get("pulse_run_finished", ""), Some(1.0));

    // The next run: the old log removed, a new one with another model and one partition.
    std::fs::remove_file(&log).unwrap();
    std::fs::write(
        &log,
        "Model: /models/m2\nProcessing: B1 (SHORT)\nB1: 10 prompts\n  3/10 (0 err) 2.0 req/s avg_comp=20tok ETA=4s\n",
    )
    .unwrap();
    let m = sidecar.wait_metrics("the new run's id", |m| run_id(m) != old_id);
    assert_eq!(m.get("pulse_run_finished", ""), Some(0.0), "{}", m.0);
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "B1"),
        Some(3.0)
    );
    assert_eq!(
        m.partition("pulse_partition_requests_planned", "B1"),
        Some(10.0)
    );
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "B2"),
        None,
        "the old run's partitions are not the new one's:\n{}",
        m.0
    );
    assert_eq!(m.get("pulse_run_requests_planned", ""), Some(10.0));
    assert!(
        m.0.contains("pulse_pipeline_info{model=\"/models/m2\"}"),
        "{}",
        m.0
    );
    let second = smtp::wait_messages(&server.maildir, 2);
    let notice = second
        .iter()
        .find(|e| smtp::subject(e).contains("RunStarted"))
        .unwrap_or_else(|| {
            panic!(
                "no RunStarted: {:?}",
                second.iter().map(|e| smtp::subject(e)).collect::<Vec<_>>()
            )
        });
    let new_id = run_id(&m);
    assert!(
        notice.contains(&new_id) && notice.contains(&old_id),
        "{notice}"
    );
    assert!(
        smtp::subject(notice).contains("NOTICE"),
        "a notice, not a page: {}",
        smtp::subject(notice)
    );

    // The new run finishes: it is told, as the first one was.
    let mut more = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(
        &mut more,
        b"  10/10 (0 err) 2.0 req/s avg_comp=20tok ETA=0s\nAll partitions complete.\n",
    )
    .unwrap();
    let all = smtp::wait_messages(&server.maildir, 3);
    let subjects: Vec<String> = all.iter().map(|e| smtp::subject(e)).collect();
    assert_eq!(
        subjects
            .iter()
            .filter(|s| s.contains("RunFinished"))
            .count(),
        2,
        "{subjects:?}"
    );
    assert_eq!(
        subjects.iter().filter(|s| s.contains("RunStarted")).count(),
        1,
        "{subjects:?}"
    );
    assert!(
        subjects.iter().all(|s| !s.contains("FIRING")),
        "no page: {subjects:?}"
    );
}

/// The seed's driver begins every run with the same preamble (`Loading tokenizer from
/// MODEL...`, `Vocab size: N`), so a new run's first line is the old run's: a new file that
/// begins a run is a new run all the same, with the id a restarted sidecar would give it.
#[test]
fn a_new_run_with_the_seeds_preamble_gets_its_new_id_without_a_restart() {
    const PREAMBLE: &str = "Loading tokenizer from /shared/kimi-k2.5-int4...\nVocab size: 163840\nModel: /shared/kimi-k2.5-int4\n============================================================\nProcessing: B1_glaive (SHORT)\n============================================================\n";
    let dir = temp_dir();
    let run = dir.path().join("synth");
    std::fs::create_dir_all(&run).unwrap();
    let log = run.join("inference_all.log");
    std::fs::write(
        &log,
        format!("{PREAMBLE}B1_glaive: 4 prompts\nRunning 4 requests (concurrency=150, max_tokens=10240)...\n  4/4 (0 err) 1.1 req/s avg_comp=217tok ETA=0s\nAll partitions complete.\n"),
    )
    .unwrap();
    let sidecar = Sidecar::run(&["--log", path_str(&log), "--gpu", "off"]);
    let m = sidecar.wait_metrics("the first run read", |m| {
        m.get("pulse_run_finished", "") == Some(1.0)
            && run_info(m)
                .is_some_and(|i| i["run_id"] != pipeline_pulse::run_identity::named_id("synth"))
    });
    let old_id = run_id(&m);

    // The driver's next run: the log removed and written anew, from the same first lines.
    std::fs::remove_file(&log).unwrap();
    std::fs::write(
        &log,
        format!("{PREAMBLE}B1_glaive: 10 prompts\nRunning 10 requests (concurrency=150, max_tokens=10240)...\n  3/10 (0 err) 1.1 req/s avg_comp=217tok ETA=7s\n"),
    )
    .unwrap();
    let m = sidecar.wait_metrics("the new run's id", |m| run_id(m) != old_id);
    assert_eq!(m.get("pulse_run_finished", ""), Some(0.0), "{}", m.0);
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "B1_glaive"),
        Some(3.0),
        "the new run's progress, not the old run's 4/4:\n{}",
        m.0
    );
    assert_eq!(
        m.partition("pulse_partition_requests_planned", "B1_glaive"),
        Some(10.0)
    );
    let restarted = run_once(&run, &["--log", path_str(&log)]);
    assert_eq!(
        run_id(&m),
        run_id(&restarted),
        "the id a sidecar started now gives the new log"
    );
}
