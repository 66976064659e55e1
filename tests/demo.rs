//! `demo`: the embedded default a newcomer runs first.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn demo_serves_a_simulated_run_and_stops_by_itself() {
    let dir = temp_dir();
    let demo_dir = dir.path().join("demo");
    let mut demo = Demo::start(&demo_dir, "40", "6s");
    let (addr, banner) = (demo.addr, &demo.banner);
    assert!(banner.iter().any(|l| l.contains("simulated")), "{banner:?}");
    // Polls what the demo exposes until the simulated run has moved on to its second partition.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let m = loop {
        let m = Metrics(http_get(addr, "GET", "/metrics", None).body);
        // The log's first progress line for B2 (its empty output file already shows 0), and
        // every record of B1 (the outputs are polled on their own thread).
        if m.partition("pulse_partition_requests_completed", "B2_opencodeinstruct") > Some(0.0)
            && m.partition("pulse_output_records_total", "B1_glaive") == Some(1500.0)
        {
            break m;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the demo made no progress:\n{}",
            m.0
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "B1_glaive"),
        Some(1500.0)
    );
    assert_eq!(
        m.partition("pulse_partition_active", "B1_glaive"),
        Some(0.0)
    );
    assert!(m.has_line_starting("pulse_pipeline_info{model=\"/shared/kimi-k2.5-int4\"} 1"));
    assert_eq!(
        m.get("pulse_gpus", ""),
        Some(8.0),
        "the demo's GPUs are simulated"
    );
    assert!(m.has_line_starting("pulse_gpu_info{gpu=\"0\""));
    assert!(m.0.contains("name=\"simulated\""));
    assert!(demo_dir.join("logs/inference_all.log").is_file());
    assert!(demo_dir
        .join("prepared/B1_glaive/raw_responses.jsonl")
        .is_file());
    let status = wait_exit(&mut demo.process.0, Duration::from_secs(15));
    assert!(
        status.success(),
        "--duration should end the demo cleanly: {status}"
    );
    // Its alert emails are files in the demo folder: B1 finished, and B2's stall fired.
    let mails: Vec<String> = std::fs::read_dir(demo_dir.join("mail"))
        .expect("the demo writes its emails into mail/")
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    let has = |text: &str| mails.iter().any(|m| m.contains(text));
    assert!(
        has("NOTICE PartitionFinished: B1_glaive"),
        "{} emails",
        mails.len()
    );
    assert!(
        has("FIRING Stalled: B2_opencodeinstruct"),
        "{} emails",
        mails.len()
    );
}
