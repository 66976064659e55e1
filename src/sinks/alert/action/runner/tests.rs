use super::*;
use crate::procfs::Procfs;
use crate::rules::AlertName;
use crate::sinks::alert::action::tests::action;

fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}

/// Whether a process is gone: no such pid, or a zombie waiting for its reaper.
fn gone(pid: &str) -> bool {
    match pid.parse().ok().and_then(|p| Procfs::default().stat(p)) {
        None => true,
        Some(stat) => stat.state == 'Z',
    }
}

#[test]
fn a_hanging_command_is_killed_at_its_timeout_with_its_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("grandchild.pid");
    let script = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
    let finished = execute(
        &sh(&script),
        &[],
        &[],
        "",
        Duration::from_secs(1),
        &Groups::default(),
    );
    assert_eq!(finished.ended, Ended::TimedOut);
    assert_eq!(finished.result().as_str(), "timeout");
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    let pid = pid.trim();
    assert!(!pid.is_empty());
    // The kill is sent before `execute` returns; the reaper may take a moment.
    let mut waited = 0;
    while !gone(pid) && waited < 500 {
        std::thread::sleep(Duration::from_millis(10));
        waited += 1;
    }
    assert!(
        gone(pid),
        "the grandchild sleep {pid} outlived its group's kill"
    );
}

#[test]
fn a_failing_command_says_its_exit_code_and_output() {
    let finished = execute(
        &sh("echo out; echo err >&2; exit 3"),
        &[],
        &[],
        "",
        Duration::from_secs(60),
        &Groups::default(),
    );
    assert_eq!(finished.ended, Ended::Exited(3));
    assert_eq!(finished.result().as_str(), "failed");
    assert_eq!(finished.output, "out\n\n--- stderr ---\nerr\n");
    assert!(finished.said("fix").starts_with("ran `fix` (exit 3, "));
}

#[test]
fn a_missing_program_is_not_started() {
    let finished = execute(
        &["/nonexistent/fix".into()],
        &[],
        &[],
        "",
        Duration::from_secs(1),
        &Groups::default(),
    );
    assert!(matches!(finished.ended, Ended::NotStarted(_)));
    assert_eq!(finished.result().as_str(), "failed");
}

#[test]
fn output_is_capped_and_a_chatty_command_is_not_blocked() {
    let finished = execute(
        &sh("head -c 1000000 /dev/zero | tr '\\0' x"),
        &[],
        &[],
        "",
        Duration::from_secs(60),
        &Groups::default(),
    );
    assert_eq!(finished.ended, Ended::Exited(0));
    assert!(finished.output.len() < OUTPUT_CAP + 16);
    assert!(finished.output.ends_with("[… cut]"));
}

#[test]
fn the_alert_reaches_the_command_as_environment_and_stdin() {
    let mut condition =
        Condition::holding(AlertName::ServerHung, Some("B1")).caused(Cause::ServerHung);
    // Worded as no summary is: the cause is the condition's, not read from its words.
    condition.summary = "no tokens for 5m (the engine is wedged)".into();
    let launch = Launch {
        action: action("restart", &[AlertName::ServerHung]),
        condition,
        since: 100.0,
        facts: Facts {
            run: Some("synth".into()),
            server_pid: Some(42),
            server_url: Some("http://127.0.0.1:30000".into()),
            slurm_job_id: Some("77".into()),
            ..Facts::default()
        },
        attempt: 1,
        host: "node".into(),
        secret_env: vec!["PULSE_TEST_SECRET".into()],
    };
    // A secret of the sidecar's environment, named as `smtp_password_env` would name it; no
    // other test reads this variable.
    std::env::set_var("PULSE_TEST_SECRET", "s3cret");
    let finished = execute(
        &sh("env | grep ^PULSE_ | sort; cat"),
        &launch.env(),
        &launch.secret_env,
        &launch.document(),
        Duration::from_secs(60),
        &Groups::default(),
    );
    assert_eq!(finished.ended, Ended::Exited(0));
    let out = &finished.output;
    for line in [
        "PULSE_ALERT=ServerHung",
        "PULSE_CAUSE=server_hung",
        "PULSE_CAUSE_TEXT=server hung",
        "PULSE_PARTITION=B1",
        "PULSE_RUN=synth",
        "PULSE_SERVER_PID=42",
        "PULSE_SERVER_URL=http://127.0.0.1:30000",
        "PULSE_SLURM_JOB_ID=77",
        "PULSE_DRIVER_PID=",
        "PULSE_SUMMARY=no tokens for 5m (the engine is wedged)",
    ] {
        assert!(out.lines().any(|l| l == line), "{line} not in:\n{out}");
    }
    assert!(
        !out.contains("s3cret"),
        "a secret reached the command:\n{out}"
    );
    let json = out.lines().last().unwrap();
    let doc: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(doc["alert"], "ServerHung");
    assert_eq!(doc["cause"], "server_hung");
    assert_eq!(doc["cause_text"], "server hung");
    assert_eq!(doc["summary"], "no tokens for 5m (the engine is wedged)");
    assert_eq!(doc["server_pid"], 42);
    assert_eq!(doc["slurm_job_id"], "77");
}

#[test]
fn the_commands_running_end_with_the_sidecar() {
    let groups = Groups::default();
    let running = groups.clone();
    let runner = std::thread::spawn(move || {
        execute(
            &sh("sleep 300"),
            &[],
            &[],
            "",
            Duration::from_secs(3600),
            &running,
        )
    });
    let registered = || !crate::lock::Locked::locked(&*groups.0).is_empty();
    let mut waited = 0;
    while !registered() && waited < 500 {
        std::thread::sleep(Duration::from_millis(10));
        waited += 1;
    }
    groups.kill_all();
    let finished = runner.join().unwrap();
    assert_eq!(finished.ended, Ended::Signalled(libc::SIGKILL));
}

/// An alert that names no cause (`GpuLost`) sets the variables empty and the fields null, so
/// a script tells "no cause" from a cause it does not know.
#[test]
fn an_alert_without_a_cause_says_none() {
    let launch = Launch {
        action: action("requeue", &[AlertName::GpuLost]),
        condition: Condition::holding(AlertName::GpuLost, None),
        since: 100.0,
        facts: Facts::default(),
        attempt: 1,
        host: "node".into(),
        secret_env: Vec::new(),
    };
    let env = launch.env();
    for name in ["PULSE_CAUSE", "PULSE_CAUSE_TEXT"] {
        assert!(
            env.iter().any(|(k, v)| k == name && v.is_empty()),
            "{name}: {env:?}"
        );
    }
    let doc: serde_json::Value = serde_json::from_str(&launch.document()).unwrap();
    assert!(
        doc["cause"].is_null() && doc["cause_text"].is_null(),
        "{doc}"
    );
}
