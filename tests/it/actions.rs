//! `[[actions]]` end to end (docs/alerts.md#actions): the real binary runs a script of ours
//! when a stall fires, and a scripted webhook receiver shows what the channels were told. As in
//! tests/it/notify.rs, the stall is a log whose partition stopped two minutes ago and
//! `stall_after = "1s"`; "once" is checked after a later event (the resolution).

use crate::common::receiver::{Received, Receiver};
use crate::common::repo::repo_file;
use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// An executable script in `dir`, writable by its owner only.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// One `[[actions]]` table running `command` on `Stalled`.
fn action(name: &str, command: &Path, extra: &str) -> String {
    format!(
        "[[actions]]\nname = {name:?}\non = [\"Stalled\"]\ncommand = [{:?}, \"--now\"]\n{extra}",
        path_str(command)
    )
}

/// A config file stalling after 1 s, evaluated every 100 ms, with a webhook to `hook`.
/// Emails go into `dir/mail` as `.eml` files.
fn config(dir: &Path, log: &Path, hook: &Receiver, actions: &str) -> PathBuf {
    let file = dir.join("pulse.toml");
    std::fs::write(
        &file,
        format!(
            "stall_after = \"1s\"\nalert_interval = \"100ms\"\nretry_backoff = \"100ms\"\nhostname = \"gpu-node-01\"\nsmtp = \"file://{}\"\nemail_to = [\"oncall@example.com\"]\n[[webhooks]]\nurl = {:?}\nformat = \"alertmanager\"\n{actions}\n[[logs]]\npath = {:?}\n",
            path_str(&dir.join("mail")),
            hook.url("/hook"),
            path_str(log)
        ),
    )
    .unwrap();
    file
}

fn sidecar(file: &Path, state: &Path, more: &[&str]) -> Sidecar {
    let mut args = vec![
        "--gpu",
        "off",
        "--config",
        path_str(file),
        "--state-dir",
        path_str(state),
    ];
    args.extend_from_slice(more);
    Sidecar::run(&args)
}

fn emails(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.join("mail"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "eml"))
                .map(|e| std::fs::read_to_string(e.path()).unwrap())
                .collect()
        })
        .unwrap_or_default()
}

fn said(r: &[Received], text: &str) -> bool {
    r.iter().any(|m| m.answered == 200 && m.body.contains(text))
}

fn actions_total(m: &Metrics, action: &str, result: &str) -> Option<f64> {
    m.get(
        "pulse_actions_total",
        &format!("action=\"{action}\",result=\"{result}\""),
    )
}

#[test]
fn an_action_gets_the_alert_and_what_it_did_is_said_counted_and_kept() {
    let dir = temp_dir();
    let log = stalled_log(dir.path());
    let (env_file, stdin_file) = (dir.path().join("env.txt"), dir.path().join("stdin.json"));
    let record = script(
        dir.path(),
        "record.sh",
        &format!(
            "env | grep '^PULSE_' | sort > {:?}\necho \"args: $*\" >> {:?}\ncat > {:?}\necho recorded\n",
            path_str(&env_file),
            path_str(&env_file),
            path_str(&stdin_file)
        ),
    );
    let hook = Receiver::start(&[]);
    let state = dir.path().join("state");
    // Nothing is probed here, so the stall's cause is unknown: the action is for that id.
    let file = config(
        dir.path(),
        &log,
        &hook,
        &action("record", &record, "cause = \"unknown\"\n"),
    );
    let sidecar = sidecar(&file, &state, &[]);
    let got = hook.wait("the action's report", Duration::from_secs(20), |r| {
        said(r, "ran `record` (exit 0, ")
    });
    // A quick action is said in the page itself: it waited for it (at most 3 s).
    let first = got.iter().find(|m| m.body.contains("\"firing\"")).unwrap();
    assert!(
        first.body.contains("ran `record` (exit 0, "),
        "{}",
        first.body
    );
    let env = std::fs::read_to_string(&env_file).unwrap();
    for line in [
        "PULSE_ALERT=Stalled",
        "PULSE_PARTITION=B1",
        "PULSE_ACTION=record",
        "PULSE_ATTEMPT=1",
        "PULSE_HOST=gpu-node-01",
        "PULSE_DRIVER_PID=",
        "PULSE_SERVER_URL=",
        "PULSE_CAUSE=unknown",
        "PULSE_CAUSE_TEXT=cause unknown",
        "args: --now",
    ] {
        assert!(env.lines().any(|l| l == line), "{line} not in:\n{env}");
    }
    assert!(env.contains("PULSE_SUMMARY=no progress for"), "{env}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stdin_file).unwrap()).unwrap();
    assert_eq!(doc["alert"], "Stalled");
    assert_eq!(doc["partition"], "B1");
    assert_eq!(doc["action"], "record");
    assert_eq!(doc["attempt"], 1);
    assert_eq!(doc["cause"], "unknown");
    assert_eq!(doc["cause_text"], "cause unknown");
    let m = sidecar.wait_metrics("the run counted", |m| {
        actions_total(m, "record", "ok") == Some(1.0)
    });
    assert_eq!(actions_total(&m, "record", "failed"), Some(0.0));
    let status = get_json(sidecar.addr, "/status").unwrap();
    let run = &status["actions"][0];
    assert_eq!(run["result"], "ok");
    assert_eq!(run["exit_code"], 0);
    assert_eq!(run["output"], "recorded\n");
    let kept = read_json(&state.join("actions.json")).unwrap();
    assert_eq!(kept[0]["said"], run["said"]);
    // The email says it too, in the page: no reminder follows it a moment later.
    let mut mails = Vec::new();
    wait_for("the page's email", || {
        mails = emails(dir.path());
        !mails.is_empty()
    });
    assert!(mails[0].contains("ran `record` (exit 0, "), "{}", mails[0]);
    // The run moves again: the resolution says after what, and the action ran once.
    append(
        &log,
        "  150/1000 (0 err) 1.0 req/s avg_comp=200tok ETA=14m\n",
    );
    hook.wait("the resolution", Duration::from_secs(20), |r| {
        said(r, "the run moved again ")
    });
    assert!(said(&hook.received(), "after `record`"));
    assert_eq!(
        actions_total(&sidecar.metrics(), "record", "ok"),
        Some(1.0),
        "max_runs = 1"
    );
    // Said in the page, so no reminder was told.
    assert!(!said(&hook.received(), "STILL FIRING"));
    assert!(emails(dir.path())
        .iter()
        .all(|m| !m.contains("STILL FIRING")));
}

#[test]
fn a_hanging_action_is_killed_with_its_group_and_a_failing_one_is_told_while_alerts_go_out() {
    let dir = temp_dir();
    let log = stalled_log(dir.path());
    let pid_file = dir.path().join("sleep.pid");
    let hang = script(
        dir.path(),
        "hang.sh",
        &format!("sleep 300 &\necho $! > {:?}\nwait\n", path_str(&pid_file)),
    );
    let fail = script(dir.path(), "fail.sh", "echo broken >&2\nexit 3\n");
    let hook = Receiver::start(&[]);
    // Its timeout is past the 3 s a page waits for its round's actions.
    let actions = action("hang", &hang, "timeout = \"6s\"\n") + &action("fail", &fail, "");
    let file = config(dir.path(), &log, &hook, &actions);
    let sidecar = sidecar(&file, &dir.path().join("state"), &[]);
    // The page is out while the action still hangs: it says so, and what the quick one did.
    let got = hook.wait("the page", Duration::from_secs(20), |r| {
        said(r, "\"firing\"")
    });
    assert!(said(&got, "running `hang`"), "{got:#?}");
    assert!(said(&got, "ran `fail` (exit 3, "), "{got:#?}");
    sidecar.wait_metrics("the timeout and the failure counted", |m| {
        actions_total(m, "hang", "timeout") == Some(1.0)
            && actions_total(m, "fail", "failed") == Some(1.0)
    });
    hook.wait("both reports", Duration::from_secs(20), |r| {
        said(r, "ran `hang` (killed at its timeout, ") && said(r, "ran `fail` (exit 3, ")
    });
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let stat = format!("/proc/{}/stat", pid.trim());
    wait_for("the grandchild sleep gone with its group", || {
        std::fs::read_to_string(&stat).map_or(true, |s| {
            s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
        })
    });
    let status = get_json(sidecar.addr, "/status").unwrap();
    let failed = status["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == "fail")
        .unwrap()
        .clone();
    assert_eq!(failed["exit_code"], 3);
    assert!(failed["output"].as_str().unwrap().contains("broken"));
}

#[test]
fn dry_run_actions_says_what_would_run_and_runs_nothing() {
    let dir = temp_dir();
    let log = stalled_log(dir.path());
    let touched = dir.path().join("touched");
    let touch = script(
        dir.path(),
        "touch.sh",
        &format!("touch {:?}\n", path_str(&touched)),
    );
    let hook = Receiver::start(&[]);
    let file = config(dir.path(), &log, &hook, &action("touch", &touch, ""));
    let sidecar = sidecar(&file, &dir.path().join("state"), &["--dry-run-actions"]);
    sidecar.wait_metrics("the dry run counted", |m| {
        actions_total(m, "touch", "dry_run") == Some(1.0)
    });
    sidecar.wait_log("would run (dry run) action touch");
    hook.wait("the dry run told", Duration::from_secs(20), |r| {
        said(r, "would have run `touch` (dry run)")
    });
    assert!(!touched.exists(), "a dry run ran the command");
}

#[test]
fn check_config_refuses_commands_that_cannot_or_must_not_run() {
    let dir = temp_dir();
    let good = script(dir.path(), "good.sh", "exit 0\n");
    let plain = dir.path().join("plain.sh");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open = script(dir.path(), "open.sh", "exit 0\n");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = dir.path().join("pulse.toml");
    for (command, said) in [
        (dir.path().join("missing.sh"), "No such file"),
        (plain, "not executable"),
        (open, "writable by others"),
        (good, ""),
    ] {
        std::fs::write(&file, action("fix", &command, "")).unwrap();
        let out = Command::new(BIN)
            .args(["check-config", path_str(&file)])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if said.is_empty() {
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains("[[actions]]"), "{stdout}");
            continue;
        }
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}: {stderr}",
            command.display()
        );
        assert!(stderr.contains("`actions[0].command`"), "{stderr}");
        assert!(stderr.contains(said), "{stderr}");
    }
}

/// A cause is an id: the words the summary says it with, what `cause` matched once, are refused
/// with the id to write instead.
#[test]
fn check_config_refuses_a_cause_that_is_no_id() {
    let dir = temp_dir();
    let good = script(dir.path(), "good.sh", "exit 0\n");
    let file = dir.path().join("pulse.toml");
    for (cause, said) in [
        ("\"server hung\"", "did you mean server_hung?"),
        (
            "[\"server_hung\", \"server_sad\"]",
            "\"server_sad\" is not a cause",
        ),
        ("[\"server_hung\", \"server_crashed\"]", ""),
    ] {
        std::fs::write(&file, action("fix", &good, &format!("cause = {cause}\n"))).unwrap();
        let out = Command::new(BIN)
            .args(["check-config", path_str(&file)])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if said.is_empty() {
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            continue;
        }
        assert_eq!(out.status.code(), Some(2), "{cause}: {stderr}");
        assert!(stderr.contains("`actions[0].cause`"), "{stderr}");
        assert!(stderr.contains(said), "{stderr}");
    }
}

/// A folder of programs that write down how they were called (`NAME.log`) and exit 0.
fn recorders(dir: &Path, names: &[&str]) -> (PathBuf, String) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in names {
        script(
            &bin,
            name,
            &format!(
                "echo \"$@\" >> {:?}\necho \"{name} $*\"\n",
                path_str(&dir.join(format!("{name}.log")))
            ),
        );
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (bin, path)
}

/// Runs a recipe of deploy/actions/ with the environment an action gets.
fn recipe(name: &str, path: &str, env: &[(&str, &str)]) -> std::process::Output {
    Command::new(repo_file(&format!("deploy/actions/{name}")))
        .env("PATH", path)
        .env("PULSE_ALERT", "ServerHung")
        .env("PULSE_SUMMARY", "no tokens for 5m")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn the_recipes_restart_the_unit_requeue_the_job_and_save_the_stacks() {
    let dir = temp_dir();
    let (_, path) = recorders(dir.path(), &["systemctl", "scontrol", "py-spy"]);
    let asked = |name: &str| {
        std::fs::read_to_string(dir.path().join(format!("{name}.log"))).unwrap_or_default()
    };
    let out = recipe("restart-engine-unit.sh", &path, &[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(asked("systemctl"), "--no-block restart sglang.service\n");
    let out = recipe("requeue-slurm-job.sh", &path, &[("PULSE_SLURM_JOB_ID", "")]);
    assert_eq!(out.status.code(), Some(1), "no job, no requeue");
    let out = recipe(
        "requeue-slurm-job.sh",
        &path,
        &[("PULSE_SLURM_JOB_ID", "4242")],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(asked("scontrol"), "requeue 4242\n");
    let run_dir = dir.path().join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    let out = recipe(
        "py-spy-dump.sh",
        &path,
        &[
            ("PULSE_RUN_DIR", path_str(&run_dir)),
            ("PULSE_DRIVER_PID", "11"),
            ("PULSE_SERVER_PID", "22"),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        asked("py-spy"),
        "dump --locals --pid 11\ndump --locals --pid 22\n"
    );
    let mut saved: Vec<String> = std::fs::read_dir(run_dir.join("pulse-stacks"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    saved.sort();
    assert_eq!(
        saved,
        [
            "py-spy dump --locals --pid 11\n",
            "py-spy dump --locals --pid 22\n"
        ]
    );
}

#[test]
fn the_kill_recipe_ends_the_engine_and_never_a_pid_reused_since() {
    let dir = temp_dir();
    let (_, path) = recorders(dir.path(), &[]);
    // An engine and the worker it started, which ignores SIGTERM as a wedged one does.
    let worker_pid = dir.path().join("worker.pid");
    let mut engine = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 300' & wait",
            path_str(&worker_pid)
        ))
        .spawn()
        .unwrap();
    wait_for("the worker", || worker_pid.exists());
    let pid = engine.id().to_string();
    // Not an engine by its command line: left alone.
    let out = recipe(
        "kill-engine.sh",
        &path,
        &[("PULSE_SERVER_PID", &pid), ("ENGINE_MATCH", "sglang|vllm")],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no longer an engine"));
    assert!(
        engine.try_wait().unwrap().is_none(),
        "killed a process that is no engine"
    );
    // Reaped as soon as it ends, as a supervisor would, so the recipe sees it gone.
    let reaper = std::thread::spawn(move || engine.wait().unwrap());
    let out = recipe(
        "kill-engine.sh",
        &path,
        &[
            ("PULSE_SERVER_PID", &pid),
            ("ENGINE_MATCH", "^sh -c sh -c"),
            ("GRACE", "1"),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("SIGKILL"), "{said}");
    let status = reaper.join().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    let worker = std::fs::read_to_string(&worker_pid).unwrap();
    let stat = format!("/proc/{}/stat", worker.trim());
    wait_for("the worker killed", || {
        std::fs::read_to_string(&stat).map_or(true, |s| {
            s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
        })
    });
}

#[test]
fn an_action_running_when_the_sidecar_stops_is_killed_with_it() {
    let dir = temp_dir();
    let log = stalled_log(dir.path());
    let pid_file = dir.path().join("sleep.pid");
    let hang = script(
        dir.path(),
        "hang.sh",
        &format!("sleep 3000 &\necho $! > {:?}\nwait\n", path_str(&pid_file)),
    );
    let hook = Receiver::start(&[]);
    let file = config(
        dir.path(),
        &log,
        &hook,
        &action("hang", &hang, "timeout = \"1h\"\n"),
    );
    let mut sidecar = sidecar(&file, &dir.path().join("state"), &[]);
    wait_for("the action started", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n'))
    });
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    sidecar.terminate();
    let stat = format!("/proc/{}/stat", pid.trim());
    wait_for("the action's sleep gone with the sidecar", || {
        std::fs::read_to_string(&stat).map_or(true, |s| {
            s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
        })
    });
}
