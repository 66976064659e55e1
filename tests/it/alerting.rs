//! Alert emails end to end: the real binary, a real SMTP server (aiosmtpd) writing to a Maildir.
//!
//! "Exactly one" is checked without sleeping: each scenario ends with a later email (the
//! resolution) and then counts everything that arrived before it.

use crate::common::smtp::{self, SmtpServer};
use crate::common::*;
use std::time::{Duration, SystemTime};

/// A log whose partition made progress and then stopped, `stalled_for` ago.
fn stalled_log(
    dir: &std::path::Path,
    name: &str,
    partition: &str,
    stalled_for: u64,
) -> std::path::PathBuf {
    let log = dir.join(name);
    std::fs::write(
        &log,
        format!("Processing: {partition} (SHORT)\n{partition}: 1000 prompts\n  100/1000 (0 err) 1.0 req/s avg_comp=200tok ETA=15m\nWARNING: request 101 timed out, retrying\n"),
    )
    .unwrap();
    let then = SystemTime::now() - Duration::from_secs(stalled_for);
    std::fs::File::options()
        .append(true)
        .open(&log)
        .unwrap()
        .set_modified(then)
        .unwrap();
    log
}

fn alert_args<'a>(smtp_url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--smtp",
        smtp_url,
        "--email-to",
        "oncall@example.com",
        "--email-from",
        "pulse@example.com",
        "--stall-after",
        "1s",
        "--alert-interval",
        "100ms",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn a_stall_sends_one_email_with_the_evidence_and_recovery_sends_one_resolved() {
    let dir = temp_dir();
    let server = SmtpServer::start(free_port(), &dir.path().join("mail"), "plain", None);
    let log = stalled_log(dir.path(), "run.log", "B1_glaive", 120);
    let url = format!("smtp://127.0.0.1:{}?tls=none", server.port);
    let sidecar = Sidecar::run(&alert_args(&url, &["--log", path_str(&log)]));

    let first = smtp::wait_messages(&server.maildir, 1);
    let subject = smtp::subject(&first[0]);
    assert!(
        subject.starts_with("[pulse] FIRING Stalled: B1_glaive on ")
            && subject.contains("no progress for 2m (cause unknown)"),
        "{subject}"
    );
    assert!(first[0].contains("To: oncall@example.com"));
    assert!(first[0].contains("multipart/alternative"));
    assert!(
        first[0].contains("WARNING: request 101 timed out, retrying"),
        "the log tail is in the email"
    );
    assert!(
        first[0].contains("Likely cause"),
        "the verdict is in the email"
    );
    sidecar.wait_metrics("the alert firing", |m| {
        m.get(
            "pulse_alert_firing",
            "alert=\"Stalled\",partition=\"B1_glaive\"",
        ) == Some(1.0)
    });

    append(
        &log,
        "  150/1000 (0 err) 1.0 req/s avg_comp=200tok ETA=14m\n",
    );
    let all = smtp::wait_messages(&server.maildir, 2);
    assert_eq!(all.len(), 2, "exactly one firing and one resolved email");
    let resolved = smtp::subject(&all[1]);
    assert!(
        resolved.starts_with("[pulse] RESOLVED Stalled: B1_glaive on ")
            // The whole stall, from the last progress two minutes back, as FIRING counted it.
            && resolved.contains("lasted 2m"),
        "{resolved}"
    );
    let m = sidecar.wait_metrics("two sent", |m| {
        m.get(
            "pulse_notifications_total",
            "alert=\"Stalled\",result=\"sent\",channel=\"email\"",
        ) == Some(2.0)
    });
    assert_eq!(
        m.get(
            "pulse_alert_firing",
            "alert=\"Stalled\",partition=\"B1_glaive\""
        ),
        None
    );
}

#[test]
fn alerts_of_one_evaluation_come_in_one_email() {
    let dir = temp_dir();
    let server = SmtpServer::start(free_port(), &dir.path().join("mail"), "plain", None);
    let a = stalled_log(dir.path(), "a.log", "A", 300);
    let b = stalled_log(dir.path(), "b.log", "B", 300);
    let url = format!("smtp://127.0.0.1:{}?tls=none", server.port);
    let sidecar = Sidecar::run(&alert_args(
        &url,
        &["--log", path_str(&a), "--log", path_str(&b)],
    ));
    let first = smtp::wait_messages(&server.maildir, 1);
    let subject = smtp::subject(&first[0]);
    assert!(
        subject.contains("2 alerts on")
            && subject.contains("FIRING Stalled (A)")
            && subject.contains("FIRING Stalled (B)"),
        "{subject}"
    );
    // Both recover in one evaluation too: one resolved email, and nothing else came between.
    append(&a, "  200/1000 (0 err) 1.0 req/s\n");
    append(&b, "  200/1000 (0 err) 1.0 req/s\n");
    sidecar.wait_metrics("both resolved", |m| {
        m.get("pulse_alert_firing", "alert=\"Stalled\",partition=\"A\"")
            .is_none()
            && m.get("pulse_alert_firing", "alert=\"Stalled\",partition=\"B\"")
                .is_none()
    });
    let all = smtp::wait_messages(&server.maildir, 2);
    let subjects: Vec<String> = all.iter().map(|m| smtp::subject(m)).collect();
    assert!(subjects.len() <= 3, "{subjects:?}");
    assert!(
        subjects[1..].iter().all(|s| s.contains("RESOLVED")),
        "{subjects:?}"
    );
}

#[test]
fn smtp_down_while_firing_is_delivered_exactly_once_when_it_is_back() {
    let dir = temp_dir();
    let port = free_port();
    let log = stalled_log(dir.path(), "run.log", "A", 120);
    let config = dir.path().join("pulse.toml");
    std::fs::write(
        &config,
        "retry_backoff = \"200ms\"\nsmtp_timeout = \"2s\"\n",
    )
    .unwrap();
    let url = format!("smtp://127.0.0.1:{port}?tls=none");
    let sidecar = Sidecar::run(&alert_args(
        &url,
        &["--log", path_str(&log), "--config", path_str(&config)],
    ));
    // Nothing listens yet: attempts fail and are counted.
    sidecar.wait_metrics("a failed attempt", |m| {
        m.get(
            "pulse_notifications_total",
            "alert=\"Stalled\",result=\"failed\",channel=\"email\"",
        )
        .is_some_and(|n| n >= 1.0)
    });
    sidecar.wait_log("trying again");
    let server = SmtpServer::start(port, &dir.path().join("mail"), "plain", None);
    smtp::wait_messages(&server.maildir, 1);
    sidecar.wait_metrics("one sent", |m| {
        m.get(
            "pulse_notifications_total",
            "alert=\"Stalled\",result=\"sent\",channel=\"email\"",
        ) == Some(1.0)
    });
    append(&log, "  150/1000 (0 err) 1.0 req/s\n");
    let all = smtp::wait_messages(&server.maildir, 2);
    assert_eq!(all.len(), 2, "the firing email once, then the resolved one");
    assert!(smtp::subject(&all[0]).contains("FIRING Stalled: A"));
    assert!(smtp::subject(&all[1]).contains("RESOLVED Stalled: A"));
}

#[test]
fn a_server_that_never_answers_times_out_and_is_retried() {
    let dir = temp_dir();
    // Accepts connections and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in silent.incoming().flatten() {
            held.push(conn);
        }
    });
    let log = stalled_log(dir.path(), "run.log", "A", 120);
    let config = dir.path().join("pulse.toml");
    std::fs::write(
        &config,
        "retry_backoff = \"100ms\"\nsmtp_timeout = \"300ms\"\n",
    )
    .unwrap();
    let url = format!("smtp://127.0.0.1:{port}?tls=none");
    let sidecar = Sidecar::run(&alert_args(
        &url,
        &["--log", path_str(&log), "--config", path_str(&config)],
    ));
    sidecar.wait_log("did not finish within 300ms");
    sidecar.wait_metrics("a retry after the timeout", |m| {
        m.get(
            "pulse_notifications_total",
            "alert=\"Stalled\",result=\"failed\",channel=\"email\"",
        )
        .is_some_and(|n| n >= 2.0)
    });
    // Scrapes are never held up by a hung send.
    assert_eq!(sidecar.get("/-/healthy").status, 200);
}

#[test]
fn a_550_is_counted_and_not_retried() {
    let dir = temp_dir();
    let server = SmtpServer::start(free_port(), &dir.path().join("mail"), "reject", None);
    let log = stalled_log(dir.path(), "run.log", "A", 120);
    let state = dir.path().join("state");
    let url = format!("smtp://127.0.0.1:{}?tls=none", server.port);
    let sidecar = Sidecar::run(&alert_args(
        &url,
        &["--log", path_str(&log), "--state-dir", path_str(&state)],
    ));
    sidecar.wait_log("rejected");
    let m = sidecar.wait_metrics("the rejection", |m| {
        m.get(
            "pulse_notifications_total",
            "alert=\"Stalled\",result=\"rejected\",channel=\"email\"",
        ) == Some(1.0)
    });
    assert_eq!(
        m.get(
            "pulse_notifications_total",
            "alert=\"Stalled\",result=\"failed\",channel=\"email\""
        ),
        Some(0.0),
        "a 5xx is not retried (the counter exists from the start, at 0)"
    );
    // The counter moves before the outbox is saved without the message: wait for the save.
    let saved = || -> Option<serde_json::Value> {
        serde_json::from_slice(&std::fs::read(state.join("alerts.json")).ok()?).ok()
    };
    wait_for("the rejected message to leave the saved outbox", || {
        saved().is_some_and(|s| s["outbox"] == serde_json::json!([]))
    });
}

#[test]
fn starttls_and_auth_with_a_self_signed_certificate() {
    let dir = temp_dir();
    let (cert, key) = smtp::self_signed(dir.path());
    let server = SmtpServer::start(
        free_port(),
        &dir.path().join("mail"),
        "tls",
        Some((&cert, &key)),
    );
    let config = |password: &str| {
        let path = dir.path().join(format!("pulse-{password}.toml"));
        std::fs::write(
            &path,
            format!(
                "smtp = \"smtp://127.0.0.1:{}?tls=starttls\"\nemail_to = [\"oncall@example.com\"]\nsmtp_user = \"pulse\"\nsmtp_password_env = \"PULSE_TEST_SMTP_PASSWORD\"\nsmtp_ca_file = \"{}\"\nsmtp_timeout = \"10s\"\n",
                server.port,
                cert.display()
            ),
        )
        .unwrap();
        path
    };
    let test_email = |password: &str| {
        std::process::Command::new(BIN)
            .args(["test-email", "--config"])
            .arg(config(password))
            .env("PULSE_TEST_SMTP_PASSWORD", password)
            .output()
            .unwrap()
    };
    let ok = test_email("s3cret");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout)
        .contains("sent a test notification: email to oncall@example.com"));
    let got = smtp::wait_messages(&server.maildir, 1);
    assert!(smtp::subject(&got[0]).starts_with("[pulse] test email from "));

    let wrong = test_email("wrong");
    assert!(!wrong.status.success());
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        stderr.contains("535") || stderr.to_lowercase().contains("authentication"),
        "a clear error: {stderr}"
    );
    assert!(
        !stderr.contains("wrong"),
        "the password is never printed: {stderr}"
    );
    assert_eq!(server.messages().len(), 1);
}

#[test]
fn a_restart_while_firing_does_not_send_the_email_again() {
    let dir = temp_dir();
    let server = SmtpServer::start(free_port(), &dir.path().join("mail"), "plain", None);
    let log = stalled_log(dir.path(), "run.log", "A", 120);
    let state = dir.path().join("state");
    let url = format!("smtp://127.0.0.1:{}?tls=none", server.port);
    let args = alert_args(
        &url,
        &["--log", path_str(&log), "--state-dir", path_str(&state)],
    );
    let mut sidecar = Sidecar::run(&args);
    smtp::wait_messages(&server.maildir, 1);
    sidecar.wait_metrics("sent", |m| {
        m.get(
            "pulse_notifications_total",
            "alert=\"Stalled\",result=\"sent\",channel=\"email\"",
        ) == Some(1.0)
    });
    // Kill only once the state says it was delivered (SMTP cannot tell a resend apart).
    wait_for("the delivery to be saved", || {
        read_json(&state.join("alerts.json")).is_some_and(|v| {
            v["outbox"] == serde_json::json!([])
                && v["lifecycle"]["alerts"]
                    .as_object()
                    .is_some_and(|a| !a.is_empty())
        })
    });
    sidecar.kill9();

    let sidecar = Sidecar::run(&args);
    sidecar.wait_metrics("the alert still firing", |m| {
        m.get("pulse_alert_firing", "alert=\"Stalled\",partition=\"A\"") == Some(1.0)
    });
    append(&log, "  150/1000 (0 err) 1.0 req/s\n");
    let all = smtp::wait_messages(&server.maildir, 2);
    let subjects: Vec<String> = all.iter().map(|m| smtp::subject(m)).collect();
    assert_eq!(
        subjects.len(),
        2,
        "no second firing email after the restart: {subjects:?}"
    );
    assert!(subjects[1].contains("RESOLVED Stalled: A"), "{subjects:?}");
}

#[test]
fn nothing_is_evaluated_before_every_input_has_been_read_once() {
    let dir = temp_dir();
    let log = stalled_log(dir.path(), "run.log", "A", 120);
    // A health endpoint that accepts and says nothing until the test lets go: the probes'
    // first round, and with it the sidecar's catch-up, lasts exactly as long as the test wants.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/health", silent.local_addr().unwrap());
    let (release, released) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let (conn, _) = silent.accept().unwrap();
        let _ = released.recv();
        drop(conn);
    });
    let sidecar = Sidecar::run(&[
        "--log",
        path_str(&log),
        "--stall-after",
        "1s",
        "--alert-interval",
        "100ms",
        "--server-health-url",
        &url,
        "--probe-timeout",
        "60s",
    ]);
    sidecar.wait_metrics("the log read", |m| {
        m.partition("pulse_partition_requests_completed", "A") == Some(100.0)
    });
    // Several rounds of the engine pass with the stall in the model but the probe unanswered.
    sidecar.wait_metrics("five rounds held back", |m| {
        m.get("pulse_alert_rounds_total", "outcome=\"waiting\"") >= Some(5.0)
    });
    assert_eq!(sidecar.get("/-/ready").status, 503);
    assert_eq!(
        sidecar
            .metrics()
            .get("pulse_alert_firing", "alert=\"Stalled\",partition=\"A\""),
        None,
        "no alert from a half-read node"
    );
    release.send(()).unwrap();
    wait_for("readiness", || sidecar.get("/-/ready").status == 200);
    sidecar.wait_metrics("the stall firing", |m| {
        m.get("pulse_alert_firing", "alert=\"Stalled\",partition=\"A\"") == Some(1.0)
    });
}

#[test]
fn a_driver_idle_between_partitions_is_paged_and_resolved_when_it_moves() {
    let dir = temp_dir();
    let server = SmtpServer::start(free_port(), &dir.path().join("mail"), "plain", None);
    // B1 finished two minutes ago; B2's prompts are waiting, and nothing has happened since.
    let log = dir.path().join("run.log");
    std::fs::write(
        &log,
        "Processing: B1 (SHORT)\nB1: 100 prompts\n  100/100 (0 err) 2.0 req/s avg_comp=200tok ETA=0s\nDone: B1\n",
    )
    .unwrap();
    set_mtime(&log, 120);
    let b2 = dir.path().join("prepared/B2");
    std::fs::create_dir_all(&b2).unwrap();
    std::fs::write(b2.join("prompts.jsonl"), "{}\n".repeat(50)).unwrap();
    let inputs = format!("{}/prepared/*/prompts.jsonl", path_str(dir.path()));
    let url = format!("smtp://127.0.0.1:{}?tls=none", server.port);
    let sidecar = Sidecar::run(&alert_args(
        &url,
        &["--log", path_str(&log), "--inputs", &inputs],
    ));

    let first = smtp::wait_messages(&server.maildir, 1);
    let subject = smtp::subject(&first[0]);
    // B1's PartitionFinished notice may share the email.
    assert!(subject.contains("FIRING Stalled"), "{subject}");
    assert!(
        first[0].contains("no work for 2m (driver idle between partitions)"),
        "{}",
        first[0]
    );
    sidecar.wait_metrics("the run-level alert", |m| {
        m.get("pulse_alert_firing", "alert=\"Stalled\",partition=\"\"") == Some(1.0)
    });
    let m = sidecar.metrics();
    assert!(m
        .get("pulse_run_stall_seconds", "")
        .is_some_and(|s| s >= 120.0));

    // The driver moves on: the next partition's header is evidence of work.
    append(&log, "Processing: B2 (SHORT)\n");
    let all = smtp::wait_messages(&server.maildir, 2);
    assert_eq!(all.len(), 2, "one firing and one resolved email");
    assert!(
        smtp::subject(&all[1]).contains("RESOLVED Stalled"),
        "{}",
        all[1]
    );
}

/// A run whose log reached its plan (`log`), a driver process running `driver` (a Python
/// script; it gets a path it may wait for as its first argument), and a sidecar watching both,
/// with ProcessExited and RunFinished at once, so a ProcessExited would come no later than the
/// RunFinished notice.
fn finished_run(
    dir: &std::path::Path,
    log: &str,
    driver: &str,
) -> (SmtpServer, Sidecar, std::process::Child, std::path::PathBuf) {
    let server = SmtpServer::start(free_port(), &dir.join("mail"), "plain", None);
    let log_path = dir.join("run.log");
    std::fs::write(&log_path, log).unwrap();
    let config = dir.join("pulse.toml");
    std::fs::write(
        &config,
        "[rules.ProcessExited]\nfor = \"0s\"\n[rules.RunFinished]\nfor = \"0s\"\n[rules.PartitionFinished]\nenabled = false\n",
    )
    .unwrap();
    let marker = format!("driver-{}", std::process::id());
    let go = dir.join("go");
    let driver = python(driver, &[path_str(&go), &marker]);
    let url = format!("smtp://127.0.0.1:{}?tls=none", server.port);
    let sidecar = Sidecar::run(&alert_args(
        &url,
        &[
            "--config",
            path_str(&config),
            "--log",
            path_str(&log_path),
            "--process-match",
            &marker,
            "--probe-interval",
            "100ms",
        ],
    ));
    sidecar.wait_metrics("the driver seen running", |m| {
        m.get("pulse_pipeline_process_up", "") == Some(1.0)
    });
    (server, sidecar, driver, go)
}

const PLAN_REACHED: &str =
    "Processing: B1 (SHORT)\nB1: 100 prompts\n  100/100 (0 err) 2.0 req/s avg_comp=200tok ETA=0s\n";

#[test]
fn a_driver_that_exits_after_the_whole_plan_is_a_finished_run_not_a_crash() {
    let dir = temp_dir();
    // The driver runs until the test tells it to go (by creating `go`).
    let (server, sidecar, mut driver, go) = finished_run(
        dir.path(),
        PLAN_REACHED,
        "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.02)",
    );
    std::fs::write(&go, "").unwrap();
    driver.wait().unwrap();
    let first = smtp::wait_messages(&server.maildir, 1);
    let subject = smtp::subject(&first[0]);
    assert!(subject.contains("RunFinished"), "{subject}");
    assert!(!first[0].contains("ProcessExited"), "{subject}");
    let status = get_json(sidecar.addr, "/status").unwrap();
    assert!(
        status["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["alert"] != "ProcessExited"),
        "{status}"
    );
    assert_eq!(smtp::messages(&server.maildir).len(), 1);
}

#[test]
fn a_finished_run_whose_driver_lingers_is_finished_not_stalled() {
    let dir = temp_dir();
    // The driver writes its summary, uploads, or idles in a notebook: it stays.
    let (server, sidecar, driver, _) = finished_run(
        dir.path(),
        &format!("{PLAN_REACHED}Done: B1 (100 responses)\nAll partitions complete.\n"),
        "import time\ntime.sleep(600)",
    );
    let _driver = Killed(driver);
    let m = sidecar.wait_metrics("the run finished", |m| {
        m.get("pulse_run_finished", "") == Some(1.0)
    });
    assert_eq!(m.get("pulse_pipeline_process_up", ""), Some(1.0));
    assert_eq!(
        m.get("pulse_run_stall_seconds", ""),
        None,
        "no stall to judge"
    );
    let first = smtp::wait_messages(&server.maildir, 1);
    let subject = smtp::subject(&first[0]);
    assert!(subject.contains("RunFinished"), "{subject}");
    assert!(!first[0].contains("Stalled"), "{subject}");
    let status = get_json(sidecar.addr, "/status").unwrap();
    let alerts: Vec<&str> = status["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["alert"].as_str().unwrap())
        .collect();
    assert!(
        alerts.iter().all(|a| *a == "RunFinished"),
        "only the notice: {status}"
    );
    assert_eq!(smtp::messages(&server.maildir).len(), 1);
}

/// A sidecar on a stalled log with an hour of history, mailing a real SMTP server, with these
/// environment variables; the first email it sends.
fn first_email_with_history(
    env: &[(&str, &std::path::Path)],
) -> (Sidecar, String, tempfile::TempDir) {
    let dir = temp_dir();
    let server = SmtpServer::start(free_port(), &dir.path().join("mail"), "plain", None);
    let state = dir.path().join("state");
    hour_of_history(&state);
    let log = stalled_log(dir.path(), "run.log", "A", 120);
    let url = format!("smtp://127.0.0.1:{}?tls=none", server.port);
    let args = [
        "--log",
        path_str(&log),
        "--state-dir",
        path_str(&state),
        "--gpu",
        "simulated",
    ];
    let sidecar = Sidecar::run_with_env(&alert_args(&url, &args), env);
    let raw = smtp::wait_messages(&server.maildir, 1).remove(0);
    (sidecar, raw, dir)
}

#[test]
fn an_alert_email_shows_the_last_hours_as_a_picture_and_a_sparkline() {
    let (_sidecar, raw, dir) = first_email_with_history(&[]);
    assert!(raw.contains("multipart/related"), "{raw}");
    let html = String::from_utf8(smtp::part(&raw, "Content-Type: text/html")).unwrap();
    assert!(
        html.contains("<img src=\"cid:chart@pipeline-pulse\""),
        "{html}"
    );
    let png = smtp::part(&raw, "Content-ID: <chart@pipeline-pulse>");
    let picture = tiny_skia::Pixmap::decode_png(&png).expect("the chart is a PNG");
    assert_eq!((picture.width(), picture.height()), (720, 300));
    // The progress line: blue pixels in the top panel.
    let blue = (8..118)
        .flat_map(|y| (8..712).map(move |x| (x, y)))
        .filter(|(x, y)| {
            let p = picture.pixel(*x, *y).unwrap();
            p.blue() > 150 && p.red() < 120
        })
        .count();
    assert!(blue > 200, "{blue} blue pixels in the progress panel");
    let text = String::from_utf8(smtp::part(&raw, "Content-Type: text/plain")).unwrap();
    let spark = text
        .lines()
        .find(|l| l.starts_with("tok/s, last ") && l.contains(": "))
        .unwrap_or_else(|| panic!("no sparkline: {text}"));
    assert!(
        spark.chars().filter(|c| ('▁'..='█').contains(c)).count() >= 2,
        "{spark}"
    );

    // For people: the email as a mail client shows it, the picture inlined.
    use base64::Engine;
    let inlined = html.replace(
        "cid:chart@pipeline-pulse",
        &format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&png)
        ),
    );
    let page = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("alert-email.html");
    std::fs::write(&page, inlined).unwrap();
    let shot = page.with_extension("png");
    let out = chromium(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=900,1400",
            "--hide-scrollbars",
        ],
        &format!("file://{}", page.display()),
        &dir.path().join("profile"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_email_whose_chart_fails_still_goes_out_and_says_so_in_a_counter() {
    let (sidecar, raw, _dir) =
        first_email_with_history(&[("PULSE_DEBUG_CHART_FAILURE", std::path::Path::new("1"))]);
    assert!(smtp::subject(&raw).contains("FIRING Stalled"));
    assert!(
        !raw.contains("multipart/related") && !raw.contains("cid:"),
        "{raw}"
    );
    sidecar.wait_metrics("the failure counted", |m| {
        m.get("pulse_email_chart_failures_total", "") == Some(1.0)
    });
    sidecar.wait_log("the alert email goes without its chart");
}
