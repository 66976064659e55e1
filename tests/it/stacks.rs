//! The stacks a stall page brings: real Python drivers stuck the ways drivers get stuck
//! (`tests/peers/stuck_driver.py`), the real py-spy from PyPI (installed by
//! `scripts/install-test-peers.sh`), a real SMTP server. The email, /status and /api/stacks
//! must name the function and line where the driver waits, and the cause it means; where the
//! stacks cannot be had, the page goes out on time and says why.

use crate::common::smtp::{self, SmtpServer};
use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/stuck_driver.py");

/// py-spy's own binary (not pyenv's shim, which another user cannot run).
fn py_spy() -> PathBuf {
    let found = find_in_path("py-spy").unwrap_or_else(|| {
        panic!(
            "`py-spy` is not installed; this test needs it. Install it with: \
             python3 -m pip install py-spy (scripts/install-test-peers.sh does)"
        )
    });
    let shim = std::fs::read(&found).is_ok_and(|b| b.starts_with(b"#!"));
    if !shim {
        return found;
    }
    let out = Command::new("pyenv").args(["which", "py-spy"]).output();
    match out {
        Ok(o) if o.status.success() => {
            PathBuf::from(String::from_utf8_lossy(&o.stdout).trim().to_owned())
        }
        _ => found,
    }
}

/// The line of the peer marked `# stuck here: MODE`.
fn marked(mode: &str) -> usize {
    std::fs::read_to_string(PEER)
        .unwrap()
        .lines()
        .position(|l| l.ends_with(&format!("# stuck here: {mode}")))
        .expect("the peer marks its lines")
        + 1
}

/// The driver stuck in `mode`, writing its progress to `dir/run.log`.
fn stuck(dir: &Path, mode: &str, port: Option<u16>) -> (Killed, PathBuf) {
    let log = dir.join("run.log");
    let python = require_tool("python3", "python3");
    let mut command = Command::new(python);
    command.arg(PEER).arg(&log).arg(mode);
    if let Some(port) = port {
        command.arg(port.to_string());
    }
    let child = Killed(command.spawn().unwrap());
    wait_for("the driver's first progress", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("/1000"))
    });
    (child, log)
}

/// The sidecar's arguments: the log, the driver by its (unique) log path, email to `smtp`.
fn args<'a>(log: &'a Path, smtp: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--log",
        path_str(log),
        "--process-match",
        path_str(log),
        "--smtp",
        smtp,
        "--email-to",
        "oncall@example.com",
        "--email-from",
        "pulse@example.com",
        "--stall-after",
        "2s",
        "--alert-interval",
        "200ms",
        "--gpu",
        "off",
    ];
    args.extend_from_slice(extra);
    args
}

/// The first Stalled email: its subject, its text part and its stacks attachment, if any.
fn stalled_email(server: &SmtpServer) -> (String, String, Option<String>) {
    stalled_email_within(server, std::time::Duration::from_secs(60))
}

/// [`stalled_email`], failing after `limit`.
fn stalled_email_within(
    server: &SmtpServer,
    limit: std::time::Duration,
) -> (String, String, Option<String>) {
    let mut found = None;
    wait_until("a Stalled email", limit, || {
        found = server
            .messages()
            .into_iter()
            .find(|m| smtp::subject(m).contains("FIRING Stalled"));
        found.is_some()
    });
    let raw = found.unwrap();
    let text = String::from_utf8(smtp::part(&raw, "Content-Type: text/plain")).unwrap();
    let attachment = raw
        .contains("filename=\"stacks.txt\"")
        .then(|| String::from_utf8(smtp::part(&raw, "filename=\"stacks.txt\"")).unwrap());
    (smtp::subject(&raw), text, attachment)
}

fn smtp_url(server: &SmtpServer) -> String {
    format!("smtp://127.0.0.1:{}?tls=none", server.port)
}

#[test]
fn a_driver_deadlocked_on_its_lock_pages_with_the_line_and_the_cause() {
    py_spy();
    let dir = temp_dir();
    let server = SmtpServer::start(free_port(), &dir.path().join("mail"), "plain", None);
    let (driver, log) = stuck(dir.path(), "lock", None);
    let url = smtp_url(&server);
    let state = dir.path().join("state");
    let mut sidecar = Sidecar::run(&args(&log, &url, &["--state-dir", path_str(&state)]));
    let (subject, text, attachment) = stalled_email(&server);
    let line = marked("lock");
    let place = format!("in `write_record` (stuck_driver.py:{line})");
    assert!(subject.contains("(driver deadlocked)"), "{subject}");
    assert!(
        text.contains("Likely cause: driver deadlocked.")
            && text.contains("Where it waits (stacks at ")
            && text.contains(&format!(
                "driver (pid {}): main thread blocked on a lock (`lock.acquire()  # stuck here: lock`) {place}",
                driver.0.id()
            )),
        "{text}"
    );
    let dump = attachment.expect("the dumps are attached");
    assert!(
        dump.contains(&format!("write_record (stuck_driver.py:{line})"))
            && dump.contains("Thread ")
            && dump.contains("heartbeat"),
        "{dump}"
    );
    let status = get_json(sidecar.addr, "/status").unwrap();
    let stacks = &status["stacks"];
    assert_eq!(stacks["reason"], "Stalled", "{stacks}");
    assert!(
        stacks["processes"][0]["summary"]
            .as_str()
            .is_some_and(|s| s.contains(&place)),
        "{stacks}"
    );
    let full = get_json(sidecar.addr, "/api/stacks").unwrap();
    assert_eq!(full["processes"][0]["verdict"], "deadlocked", "{full}");
    assert!(full["processes"][0]["threads"]
        .as_array()
        .is_some_and(|t| t.len() == 2));
    // Kept across a restart: the new sidecar shows the same capture before any alert.
    sidecar.terminate();
    let again = Sidecar::run(&[
        "--log",
        path_str(&log),
        "--state-dir",
        path_str(&state),
        "--gpu",
        "off",
    ]);
    let kept = get_json(again.addr, "/api/stacks").unwrap();
    assert_eq!(kept["at"], full["at"]);
}

#[test]
fn an_asyncio_driver_waiting_on_a_server_that_never_answers_is_waiting_on_the_server() {
    py_spy();
    let dir = temp_dir();
    // Accepts (the kernel completes the handshakes) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let server = SmtpServer::start(free_port(), &dir.path().join("mail"), "plain", None);
    let (driver, log) = stuck(dir.path(), "asyncio", Some(port));
    let url = smtp_url(&server);
    let sidecar = Sidecar::run(&args(&log, &url, &[]));
    let (subject, text, _) = stalled_email(&server);
    assert!(
        subject.contains("(driver waiting on the server)"),
        "{subject}"
    );
    let line = marked("loop");
    assert!(
        text.contains(&format!(
            "driver (pid {}): asyncio event loop waiting for I/O in `<module>` (stuck_driver.py:{line}); 20 connection(s) open to 127.0.0.1:{port}",
            driver.0.id()
        )) && text.contains("before Python 3.14"),
        "{text}"
    );
    let status = get_json(sidecar.addr, "/status").unwrap();
    assert!(
        status["alerts"][0]["summary"]
            .as_str()
            .is_some_and(|s| s.contains("driver waiting on the server")),
        "{status}"
    );
    drop(silent);
}

/// A sidecar that may not read the driver's stacks (another user's process), and one without
/// py-spy: the page goes out as it would without stacks, saying why and how to have them.
#[test]
fn stacks_refused_or_missing_say_why_and_hold_nothing_back() {
    let py_spy = py_spy();
    let dir = temp_dir();
    // Readable by the unprivileged sidecar: the folder, the log, and a py-spy it can run.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let tool = dir.path().join("py-spy");
    std::fs::copy(&py_spy, &tool).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = SmtpServer::start(free_port(), &dir.path().join("mail"), "plain", None);
    let (_driver, log) = stuck(dir.path(), "lock", None);
    let url = smtp_url(&server);
    let mut command = Command::new(env!("CARGO_BIN_EXE_pipeline-pulse"));
    let mut all = vec!["run", "--listen", "127.0.0.1:0", "--poll-interval", "20ms"];
    // The longest capture deadline there is: a refusal that waited it out would bring the
    // page a minute after the stall, past the wait below.
    all.extend(args(
        &log,
        &url,
        &["--stacks-py-spy", path_str(&tool), "--stacks-timeout", "1m"],
    ));
    command.args(&all).uid(65534).gid(65534);
    let _nobody = Sidecar::start_command(command);
    // On time: the stall (2 s) and the email, not the capture's deadline waited out. The
    // verdict is which came first, the page or the deadline; the wait's bound sits between.
    let (_, text, attachment) = stalled_email_within(&server, std::time::Duration::from_secs(45));
    assert!(
        text.contains("no stacks: refused: reading another process's stack needs ptrace rights"),
        "{text}"
    );
    assert!(attachment.is_some());

    let missing = SmtpServer::start(free_port(), &dir.path().join("mail2"), "plain", None);
    let url = smtp_url(&missing);
    let _without = Sidecar::run(&args(
        &log,
        &url,
        &["--stacks-py-spy", "/nonexistent/py-spy"],
    ));
    let (_, text, _) = stalled_email(&missing);
    assert!(
        text.contains("no stacks: stacks_py_spy /nonexistent/py-spy is not an executable file: install py-spy (pip install py-spy)"),
        "{text}"
    );
}

#[test]
fn pipeline_pulse_stacks_reads_a_pid_on_demand() {
    py_spy();
    let dir = temp_dir();
    let (driver, _log) = stuck(dir.path(), "lock", None);
    let pid = driver.0.id().to_string();
    let mut text = String::new();
    // It deadlocks at its third record, a moment after its first progress line.
    wait_for("the driver to deadlock", || {
        let out = Command::new(env!("CARGO_BIN_EXE_pipeline-pulse"))
            .args(["stacks", "--pid", &pid])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("blocked on a lock")
    });
    assert!(
        text.starts_with(&format!(
            "process (pid {}): main thread blocked on a lock",
            driver.0.id()
        )) && text.contains(&format!("(stuck_driver.py:{})", marked("lock"))),
        "{text}"
    );
    let none = Command::new(env!("CARGO_BIN_EXE_pipeline-pulse"))
        .arg("stacks")
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(2));
}

/// A process that is not Python (here `sleep`) has no Python stacks: its line says so and
/// where its threads wait in the kernel.
#[test]
fn a_process_that_is_not_python_gets_a_plain_note() {
    py_spy();
    let sleeper = Killed(Command::new("sleep").arg("600").spawn().unwrap());
    let pid = sleeper.0.id().to_string();
    let mut text = String::new();
    // Until the child has exec'd `sleep` it is still the test's own copy.
    wait_for("sleep to run", || {
        let out = Command::new(env!("CARGO_BIN_EXE_pipeline-pulse"))
            .args(["stacks", "--pid", &pid])
            .output()
            .unwrap();
        text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("hrtimer_nanosleep") || text.contains("nanosleep")
    });
    assert!(
        text.starts_with(&format!(
            "process (pid {pid}): no stacks: not a Python process, and py-spy reads only Python stacks; its threads wait in the kernel at "
        )),
        "{text}"
    );
}
