//! `demo`: the embedded default a newcomer runs first. Its sidecar is given the run folder
//! and nothing else about the sources: what it shows, discovery found.

use crate::common::*;
use std::time::Duration;

#[test]
fn demo_serves_a_simulated_run_and_stops_by_itself() {
    let dir = temp_dir();
    let demo_dir = dir.path().join("demo");
    let mut demo = Demo::start(&demo_dir, "20", "10s");
    let (addr, banner) = (demo.addr, &demo.banner);
    assert!(banner.iter().any(|l| l.contains("simulated")), "{banner:?}");
    // Polls what the demo exposes until the simulated run has moved on to its second partition.
    let m = poll(
        "the demo's second partition",
        Duration::from_secs(8),
        || {
            let m = Metrics(http_get(addr, "GET", "/metrics", None).body);
            // The log's first progress line for B2 (its empty output file already shows 0), and
            // every record of B1 (the outputs are polled on their own thread).
            if m.partition("pulse_partition_requests_completed", "B2_opencodeinstruct") > Some(0.0)
                && m.partition("pulse_output_records_total", "B1_glaive") == Some(300.0)
            {
                Ok(m)
            } else {
                Err(m.0)
            }
        },
    );
    assert_eq!(
        m.partition("pulse_partition_requests_completed", "B1_glaive"),
        Some(300.0)
    );
    // An earlier run's partition: its records are exported, but not in the run's totals.
    assert_eq!(
        m.partition("pulse_output_records_total", "B0_pilot"),
        Some(120.0),
        "{}",
        m.0
    );
    let planned = m.get("pulse_run_requests_planned", "").unwrap();
    assert_eq!(
        planned,
        300.0 + 600.0 + 800.0,
        "the previous partition plans nothing"
    );
    let status = get_json(addr, "/status").unwrap();
    let previous = status["previous"].as_array().unwrap();
    assert_eq!(previous.len(), 1, "{status}");
    assert_eq!(previous[0]["name"], "B0_pilot");
    assert_eq!(previous[0]["records"], 120);
    assert!(
        status["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["name"] != "B0_pilot"),
        "{status}"
    );
    // Everything the sidecar follows, it found by itself.
    let found = &status["discovered"];
    assert!(found["logs"][0]["path"]
        .as_str()
        .unwrap()
        .ends_with("logs/inference_all.log"));
    assert!(found["server_logs"][0]
        .as_str()
        .unwrap()
        .ends_with("logs/sglang_server.log"));
    assert_eq!(found["server"]["engine"], "sglang", "{found}");
    assert!(found["driver"]["command"]
        .as_str()
        .unwrap()
        .contains("demo-pipeline"));
    assert_eq!(status["process"]["up"], true, "{status}");
    assert_eq!(status["server"]["up"], true, "{status}");
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
    let stall = mails
        .iter()
        .find(|m| m.contains("FIRING Stalled: B2_opencodeinstruct"))
        .unwrap_or_else(|| panic!("no stall email among {}", mails.len()));
    // Quoted-printable wraps long lines; the cause reads whole once they are joined.
    let stall = stall.replace("=\r\n", "").replace("=\n", "");
    assert!(
        stall.contains("Likely cause: server hung") && !stall.contains("cause unknown"),
        "the stall email names the cause the probes saw:\n{stall}"
    );
    assert!(
        !has("LogSilent"),
        "the records that come before the line after the stall are no silent log"
    );
    // Its GPUs are made up and their processes not read: who holds their memory is not
    // known, so no email guesses it.
    assert!(
        !has("GPU memory:") && !has("may have crashed") && !has("stale process"),
        "{mails:#?}"
    );
}

/// The whole demo, fast: B3's restart re-does 240 prompts, so its file holds 1040 records for
/// 800 distinct ids. The sidecar counts them once, tells of the duplicates once, and sees no
/// mismatch between the log (800) and the files.
#[test]
fn the_demos_rerun_partition_counts_each_prompt_once() {
    let dir = temp_dir();
    let demo_dir = dir.path().join("demo");
    let demo = Demo::start(&demo_dir, "40", "3m");
    let mut m = Metrics(String::new());
    wait_until("the demo's run to finish", Duration::from_secs(150), || {
        m = Metrics(http_get(demo.addr, "GET", "/metrics", None).body);
        // The log and the files are read by two threads: the last record may come after the
        // line that says the run is complete, and the files' 800 distinct records (which
        // finish the run too) before the log's last line.
        m.get("pulse_run_finished", "") == Some(1.0)
            && m.partition("pulse_output_records_total", "B3_longform") == Some(1040.0)
            && m.partition("pulse_partition_requests_completed", "B3_longform") == Some(800.0)
    });
    let b3 = |name: &str| m.partition(name, "B3_longform");
    assert_eq!(
        (
            b3("pulse_output_records_total"),
            b3("pulse_output_unique_records"),
            b3("pulse_output_duplicate_records_total"),
            b3("pulse_partition_log_output_gap"),
        ),
        (Some(1040.0), Some(800.0), Some(240.0), Some(0.0)),
        "{}",
        m.0
    );
    assert_eq!(m.get("pulse_run_requests_completed", ""), Some(1700.0));
    let b3 = b3_of(&get_json(demo.addr, "/status").unwrap());
    assert_eq!(b3["outputs"]["unique"], 800, "{b3}");
    assert_eq!(b3["outputs"]["duplicates"], 240, "{b3}");
    assert_eq!(b3["mismatch"], false, "{b3}");
    let card = b3_of(&get_json(demo.addr, "/api/report").unwrap());
    assert_eq!(
        (card["distinct"].clone(), card["duplicates"].clone()),
        (800.into(), 240.into())
    );
    wait_until("the RunFinished email", Duration::from_secs(30), || {
        mails(&demo_dir)
            .iter()
            .any(|m| m.contains("NOTICE RunFinished"))
    });
    let mails = mails(&demo_dir);
    let notices = mails
        .iter()
        .filter(|m| m.contains("NOTICE DuplicateRecords: B3_longform"))
        .count();
    assert_eq!(notices, 1, "one notice for the one pass that repeats");
    assert!(!mails.iter().any(|m| m.contains("LogOutputMismatch")));
    let finished = mails
        .iter()
        .find(|m| m.contains("NOTICE RunFinished"))
        .unwrap()
        .replace("=\r\n", "")
        .replace("=\n", "");
    assert!(
        finished.contains("1040 records (800 distinct, 240 duplicates)")
            && finished.contains("p50 "),
        "{finished}"
    );
}

/// B3's entry in a document's `partitions` (the status document's, or the report's).
fn b3_of(document: &serde_json::Value) -> serde_json::Value {
    document["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "B3_longform")
        .unwrap_or_else(|| panic!("no B3_longform in {document}"))
        .clone()
}

/// The alert emails the demo wrote, as text.
fn mails(demo_dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(demo_dir.join("mail"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `demo --heal`: the wedged server is ended by the demo's action when `ServerHung` fires, the
/// simulated pipeline (its supervisor) starts it again, and the run moves. The page says what
/// the action did, the RESOLVED how long after it the run moved, and discovery finds the new
/// server.
#[test]
fn demo_heal_restarts_the_wedged_server_and_the_emails_tell_it() {
    let dir = temp_dir();
    let demo_dir = dir.path().join("demo");
    let demo = Demo::start_with(&demo_dir, "10", "3m", &["--heal"]);
    let first = poll("the demo's server found", Duration::from_secs(30), || {
        get_json(demo.addr, "/status")
            .and_then(|s| s["discovered"]["server"]["pid"].as_u64())
            .ok_or_else(String::new)
    });
    let mails = || -> Vec<String> {
        std::fs::read_dir(demo_dir.join("mail"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            // Quoted-printable wraps long lines; they read whole once joined.
            .map(|m| m.replace("=\r\n", "").replace("=\n", ""))
            .collect()
    };
    let resolved = poll("ServerHung's RESOLVED", Duration::from_secs(150), || {
        mails()
            .into_iter()
            .find(|m| m.contains("RESOLVED ServerHung"))
            .ok_or_else(|| format!("{} emails", mails().len()))
    });
    assert!(
        resolved.contains("the run moved again") && resolved.contains("after `restart-sglang`"),
        "{resolved}"
    );
    // Said in the page (it waits 3 s for its round's actions), or in a reminder on a machine
    // too loaded to run it within them.
    let told: Vec<String> = mails()
        .into_iter()
        .filter(|m| m.contains("FIRING ServerHung"))
        .collect();
    assert!(
        told.iter()
            .any(|m| m.contains("ran `restart-sglang` (exit 0, ")),
        "{told:#?}"
    );
    let status = get_json(demo.addr, "/status").unwrap();
    let ran = &status["actions"][0];
    assert_eq!(
        (&ran["action"], &ran["result"]),
        (&"restart-sglang".into(), &"ok".into())
    );
    assert!(
        ran["output"]
            .as_str()
            .is_some_and(|o| o.contains(&format!("pid {first}"))),
        "{ran}"
    );
    let again = status["discovered"]["server"]["pid"].as_u64();
    assert!(
        again.is_some_and(|p| p != first),
        "a new server: {again:?} after {first}"
    );
}
