//! Alerts into Alertmanager and webhooks, end to end: the real binary, a real Alertmanager and
//! scripted HTTP receivers. As in tests/it/alerting.rs, "exactly one" is checked by waiting for a
//! later message (the resolution) and counting what came before it.

use crate::common;
use crate::common::receiver::{Receiver, Reply};
use crate::common::*;
use std::process::Command;
use std::time::{Duration, SystemTime};

fn resume(log: &std::path::Path) {
    append(
        log,
        "  150/1000 (0 err) 1.0 req/s avg_comp=200tok ETA=14m\n",
    );
}

/// A config file with these webhooks, stalling after 1 s, evaluated every 100 ms.
fn config(dir: &std::path::Path, log: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let file = dir.join("pulse.toml");
    std::fs::write(
        &file,
        format!(
            "stall_after = \"1s\"\nalert_interval = \"100ms\"\nretry_backoff = \"100ms\"\nwebhook_timeout = \"2s\"\nhostname = \"gpu-node-01\"\nstatus_url = \"http://gpu-node-01:9721/\"\n{extra}\n[[logs]]\npath = {:?}\n",
            path_str(log)
        ),
    )
    .unwrap();
    file
}

/// `run` on this config with this state directory, no GPUs.
fn with_state<'a>(file: &'a std::path::Path, state: &'a std::path::Path) -> [&'a str; 6] {
    [
        "--gpu",
        "off",
        "--config",
        path_str(file),
        "--state-dir",
        path_str(state),
    ]
}

fn webhook(url: &str, format: &str) -> String {
    format!("[[webhooks]]\nurl = {url:?}\nformat = {format:?}\n")
}

fn firing(r: &[common::receiver::Received]) -> usize {
    r.iter()
        .filter(|m| m.answered == 200 && m.body.contains("\"firing\""))
        .count()
}

fn resolved(r: &[common::receiver::Received]) -> bool {
    r.iter()
        .any(|m| m.answered == 200 && m.body.contains("\"status\":\"resolved\""))
}

#[test]
fn a_webhook_gets_alertmanagers_payload_and_slack_its_message() {
    let dir = temp_dir();
    let log = stalled_log(dir.path());
    let hook = Receiver::start(&[]);
    let slack = Receiver::start(&[]);
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let extra = format!(
        "{}[webhooks.headers]\nAuthorization = {{ file = {:?}, prefix = \"Bearer \" }}\n{}",
        webhook(&hook.url("/hook"), "alertmanager"),
        path_str(&token),
        webhook(&slack.url("/services/T/B/X"), "slack"),
    );
    let sidecar = Sidecar::run(&[
        "--gpu",
        "simulated",
        "--config",
        path_str(&config(dir.path(), &log, &extra)),
    ]);
    let got = hook.wait("the firing webhook", Duration::from_secs(20), |r| {
        firing(r) == 1
    });
    let m = &got[0];
    assert_eq!((m.method.as_str(), m.path.as_str()), ("POST", "/hook"));
    assert_eq!(m.header("Authorization"), Some("Bearer s3cret"));
    assert_eq!(m.header("Content-Type"), Some("application/json"));
    let v = m.json();
    assert_eq!(v["version"], "4");
    assert_eq!(v["status"], "firing");
    assert_eq!(v["receiver"], "webhooks[0]");
    assert_eq!(v["truncatedAlerts"], 0);
    assert_eq!(v["externalURL"], "http://gpu-node-01:9721/");
    assert_eq!(v["groupLabels"]["instance"], "gpu-node-01");
    assert_eq!(v["commonLabels"]["alertname"], "Stalled");
    assert!(v["groupKey"].as_str().unwrap().contains("gpu-node-01"));
    let a = &v["alerts"][0];
    assert_eq!(a["status"], "firing");
    for (label, value) in [
        ("alertname", "Stalled"),
        ("partition", "B1"),
        ("severity", "critical"),
        ("job", "pipeline-pulse"),
        ("instance", "gpu-node-01"),
        ("hostname", "gpu-node-01"),
    ] {
        assert_eq!(a["labels"][label], value, "{label}: {a}");
    }
    assert!(
        a["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("no progress for 2m"),
        "{a}"
    );
    assert_eq!(a["annotations"]["status_url"], "http://gpu-node-01:9721/");
    let starts = a["startsAt"].as_str().unwrap();
    let starts = humantime::parse_rfc3339(starts).expect("startsAt is RFC 3339");
    assert!(starts <= SystemTime::now());
    assert_eq!(a["endsAt"], "0001-01-01T00:00:00Z");
    assert_eq!(a["generatorURL"], "http://gpu-node-01:9721/");
    assert_eq!(a["fingerprint"].as_str().unwrap().len(), 16);

    let s = slack.wait("the Slack message", Duration::from_secs(20), |r| {
        !r.is_empty()
    });
    let s = s[0].json();
    assert!(
        s["text"].as_str().unwrap().contains("FIRING Stalled B1"),
        "{s}"
    );
    let blocks = s["blocks"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "header");
    let sections: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "section")
        .map(|b| b["text"]["text"].as_str().unwrap())
        .collect();
    assert!(
        sections.iter().any(|t| t.contains("*FIRING Stalled*")),
        "{sections:?}"
    );
    assert!(
        sections
            .iter()
            .any(|t| t.starts_with("Progress: 100 done of 1000")),
        "{sections:?}"
    );
    // Eight simulated GPUs, unless the stall was judged before their first reading.
    assert!(
        sections
            .iter()
            .any(|t| t.contains("GPUs: ") && (t.contains(" of 8 busy") || t.contains("not read"))),
        "{sections:?}"
    );
    assert!(blocks.iter().any(|b| b["type"] == "context"
        && b["elements"][0]["text"]
            .as_str()
            .unwrap()
            .contains("<http://gpu-node-01:9721/|status page>")));

    resume(&log);
    let got = hook.wait("the resolved webhook", Duration::from_secs(20), resolved);
    assert_eq!(firing(&got), 1, "one firing message, then the resolution");
    let last = got.last().unwrap().json();
    assert_eq!(last["alerts"][0]["status"], "resolved");
    assert_ne!(last["alerts"][0]["endsAt"], "0001-01-01T00:00:00Z");
    assert_eq!(
        last["alerts"][0]["fingerprint"],
        v["alerts"][0]["fingerprint"]
    );
    let m = sidecar.wait_metrics("two sent to each", |m| {
        ["webhooks[0]", "webhooks[1]"].iter().all(|c| {
            m.get(
                "pulse_notifications_total",
                &format!("alert=\"Stalled\",result=\"sent\",channel=\"{c}\""),
            ) == Some(2.0)
        })
    });
    assert_eq!(
        m.get(
            "pulse_notifications_total",
            "alert=\"Stalled\",result=\"failed\",channel=\"webhooks[0]\""
        ),
        Some(0.0)
    );
}

#[test]
fn retries_follow_the_answer_and_a_hung_channel_holds_no_other_back() {
    let dir = temp_dir();
    let log = stalled_log(dir.path());
    let busy = Receiver::start(&[Reply::Status(503)]);
    let limited = Receiver::start(&[Reply::RetryAfter(429, 2)]);
    let refusing = Receiver::start(&[Reply::Status(400)]);
    let hung = Receiver::start(&[Reply::Hang(Duration::from_secs(30))]);
    let extra = [&busy, &limited, &refusing, &hung]
        .iter()
        .map(|r| webhook(&r.url("/"), "alertmanager"))
        .collect::<String>();
    let sidecar = Sidecar::run(&[
        "--gpu",
        "off",
        "--config",
        path_str(&config(dir.path(), &log, &extra)),
    ]);
    // 503, then 200: one delivery.
    let got = busy.wait("the retry after 503", Duration::from_secs(20), |r| {
        firing(r) == 1
    });
    assert_eq!(got[0].answered, 503);
    // 429 with Retry-After: 2: the retry waits the 2 s, not the 100 ms backoff.
    let got = limited.wait("the retry after 429", Duration::from_secs(20), |r| {
        firing(r) == 1
    });
    assert!(got[1].at - got[0].at >= Duration::from_secs(2), "{got:#?}");
    // A hang: cut off by webhook_timeout (2 s) and retried; the others were not held back.
    let got = hung.wait(
        "the retry after the timeout",
        Duration::from_secs(20),
        |r| firing(r) == 1,
    );
    assert_eq!(got[0].answered, 0, "the first attempt hung");
    assert!(busy.received()[1].at < got[1].at);
    resume(&log);
    for r in [&busy, &limited, &hung] {
        r.wait("the resolution", Duration::from_secs(20), resolved);
    }
    // 400: dropped for good, not retried: the resolution is the only other message.
    let got = refusing.wait(
        "the resolution after a 400",
        Duration::from_secs(20),
        resolved,
    );
    assert_eq!(got.len(), 2, "{got:#?}");
    let m = sidecar.metrics();
    let count = |result: &str, channel: &str| {
        m.get(
            "pulse_notifications_total",
            &format!("alert=\"Stalled\",result=\"{result}\",channel=\"{channel}\""),
        )
    };
    assert_eq!(count("rejected", "webhooks[2]"), Some(1.0));
    assert_eq!(count("failed", "webhooks[2]"), Some(0.0));
    assert_eq!(count("failed", "webhooks[0]"), Some(1.0));
    assert_eq!(count("failed", "webhooks[1]"), Some(1.0));
    assert_eq!(count("failed", "webhooks[3]"), Some(1.0));
    assert_eq!(count("sent", "webhooks[3]"), Some(2.0));
}

#[test]
fn killed_between_the_outbox_and_the_send_it_delivers_once_after_a_restart() {
    let dir = temp_dir();
    let log = stalled_log(dir.path());
    let hook = Receiver::start(&[Reply::Hang(Duration::from_secs(60))]);
    let state = dir.path().join("state");
    let file = config(dir.path(), &log, &webhook(&hook.url("/"), "alertmanager"));
    let args = with_state(&file, &state);
    let mut sidecar = Sidecar::run(&args);
    hook.wait("the attempt that hangs", Duration::from_secs(20), |r| {
        r.len() == 1
    });
    sidecar.kill9();
    let _sidecar = Sidecar::run(&args);
    hook.wait(
        "the delivery after the restart",
        Duration::from_secs(20),
        |r| firing(r) == 1,
    );
    resume(&log);
    let got = hook.wait("the resolution", Duration::from_secs(20), resolved);
    assert_eq!(firing(&got), 1, "delivered once: {got:#?}");
}

#[test]
fn alertmanager_gets_our_alerts_routes_them_and_resolves_them_with_us() {
    let amtool = require_tool("amtool", "prometheus-alertmanager");
    let dir = temp_dir();
    let log = stalled_log(dir.path());
    let routed = Receiver::start(&[]);
    let am_config = dir.path().join("alertmanager.yml");
    std::fs::write(
        &am_config,
        format!(
            "route:\n  receiver: hook\n  group_by: [alertname, instance]\n  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: {:?}\n        send_resolved: true\n",
            routed.url("/am")
        ),
    )
    .unwrap();
    let (_am, addr) = start_alertmanager(&am_config, &dir.path().join("am"));
    let file = config(dir.path(), &log, "");
    let am_url = format!("http://{addr}");
    let sidecar = Sidecar::run(&[
        "--gpu",
        "off",
        "--config",
        path_str(&file),
        "--alertmanager-url",
        &am_url,
    ]);
    // amtool sees it, with our labels.
    let mut shown = String::new();
    wait_for("amtool to show the alert", || {
        let out = Command::new(&amtool)
            .args([
                "alert",
                "query",
                "--alertmanager.url",
                &am_url,
                "-o",
                "json",
                "alertname=Stalled",
            ])
            .output()
            .unwrap();
        shown = String::from_utf8_lossy(&out.stdout).into_owned();
        shown.contains("\"alertname\":\"Stalled\"")
    });
    let alerts: serde_json::Value = serde_json::from_str(&shown).unwrap();
    let labels = &alerts[0]["labels"];
    assert_eq!(labels["partition"], "B1");
    assert_eq!(labels["instance"], "gpu-node-01");
    assert_eq!(labels["severity"], "critical");
    assert_eq!(labels["job"], "pipeline-pulse");
    assert_eq!(alerts[0]["generatorURL"], "http://gpu-node-01:9721/");
    assert_eq!(alerts[0]["status"]["state"], "active");
    // Alertmanager's route delivers it to its webhook receiver: the round trip.
    let got = routed.wait("Alertmanager's webhook", Duration::from_secs(30), |r| {
        firing(r) >= 1
    });
    let v = got[0].json();
    assert_eq!(v["alerts"][0]["labels"]["alertname"], "Stalled");
    assert_eq!(v["alerts"][0]["labels"]["partition"], "B1");
    // Resolved by us, resolved there.
    resume(&log);
    wait_for("Alertmanager to drop the resolved alert", || {
        get_json(addr, "/api/v2/alerts")
            .and_then(|v| v.as_array().map(|a| a.is_empty()))
            .unwrap_or(false)
    });
    routed.wait(
        "Alertmanager's resolved webhook",
        Duration::from_secs(30),
        resolved,
    );
    assert_eq!(
        sidecar.metrics().get(
            "pulse_notifications_total",
            "alert=\"Stalled\",result=\"rejected\",channel=\"alertmanager_urls[0]\""
        ),
        Some(0.0)
    );
}

#[test]
fn the_heartbeat_pings_while_inputs_read_and_fails_when_one_does_not() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    std::fs::write(&log, "Processing: B1 (SHORT)\nB1: 1000 prompts\n").unwrap();
    let service = Receiver::start(&[]);
    let ping = service.url("/ping/abc");
    let sidecar = Sidecar::run(&[
        "--gpu",
        "off",
        "--log",
        path_str(&log),
        "--heartbeat-url",
        &ping,
        "--config",
        path_str(&heartbeat_config(dir.path())),
    ]);
    let got = service.wait("three pings", Duration::from_secs(20), |r| r.len() >= 3);
    assert!(
        got.iter()
            .all(|r| r.method == "GET" && r.path == "/ping/abc"),
        "{got:#?}"
    );
    let m = sidecar.wait_metrics("the last ping's time", |m| {
        m.get("pulse_heartbeat_last_success_timestamp_seconds", "")
            .is_some()
    });
    let last = m
        .get("pulse_heartbeat_last_success_timestamp_seconds", "")
        .unwrap();
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(last <= now && last > now - 60.0, "{last} vs {now}");
    // The log becomes unreadable (a folder where it was): the collector is down, and the fail
    // URL is pinged.
    std::fs::remove_file(&log).unwrap();
    std::fs::create_dir(&log).unwrap();
    service.wait("a fail ping", Duration::from_secs(20), |r| {
        r.iter().any(|m| m.path == "/ping/abc/fail")
    });
}

fn heartbeat_config(dir: &std::path::Path) -> std::path::PathBuf {
    let file = dir.join("heartbeat.toml");
    std::fs::write(&file, "heartbeat_interval = \"200ms\"\n").unwrap();
    file
}

#[test]
fn test_notify_tries_every_channel_and_says_which_failed() {
    let dir = temp_dir();
    let log = stalled_log(dir.path());
    let hook = Receiver::start(&[]);
    let slack = Receiver::start(&[]);
    let refusing = Receiver::start(&[Reply::Status(403), Reply::Status(403)]);
    let extra = webhook(&hook.url("/"), "alertmanager")
        + &webhook(&slack.url("/"), "slack")
        + &webhook(&refusing.url("/"), "alertmanager");
    let file = config(dir.path(), &log, &extra);
    // `test-email` is the old name of the same command.
    for command in ["test-notify", "test-email"] {
        let out = Command::new(BIN)
            .args([command, "--config", path_str(&file)])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        assert!(
            stdout.contains("sent a test notification: webhooks[0]"),
            "{stdout}"
        );
        assert!(
            stdout.contains("sent a test notification: webhooks[1]"),
            "{stdout}"
        );
        assert!(
            stderr.contains("webhooks[2]") && stderr.contains("403"),
            "{stderr}"
        );
    }
    let got = hook.received();
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0].json()["alerts"][0]["labels"]["alertname"],
        "PipelinePulseTest"
    );
    assert!(slack.received()[0].json()["text"]
        .as_str()
        .unwrap()
        .contains("test notification"));
}

/// `pipeline-pulse silence ARGS --url http://ADDR`: exit status and stdout + stderr.
fn silence(addr: std::net::SocketAddr, args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .arg("silence")
        .args(args)
        .args(["--url", &format!("http://{addr}")])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn stalled_shown(addr: std::net::SocketAddr) -> Option<serde_json::Value> {
    let status = get_json(addr, "/status")?;
    status["alerts"]
        .as_array()?
        .iter()
        .find(|a| a["alert"] == "Stalled" && a["firing"] == true)
        .cloned()
}

#[test]
fn a_silence_holds_notifications_across_a_restart_and_its_end_notifies() {
    let dir = temp_dir();
    // The log comes once the silence is in place, already stalled.
    let log = dir.path().join("run.log");
    let hook = Receiver::start(&[]);
    let state = dir.path().join("state");
    let file = config(dir.path(), &log, &webhook(&hook.url("/"), "alertmanager"));
    let args = with_state(&file, &state);
    let mut sidecar = Sidecar::run(&args);
    let (code, said) = silence(sidecar.addr, &["add", "--for", "10s", "--comment", "x"]);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("1m to 30d"), "{said}");
    let (code, said) = silence(
        sidecar.addr,
        &["add", "--for", "2h", "--comment", "maintenance"],
    );
    assert_eq!(code, 0, "{said}");
    assert!(said.starts_with("s1  active until "), "{said}");
    let staging = dir.path().join("staged");
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::rename(stalled_log(&staging), &log).unwrap();
    wait_for("Stalled firing and shown silenced", || {
        stalled_shown(sidecar.addr).is_some_and(|a| a["silenced"] == true)
    });
    sidecar.kill9();

    let sidecar = Sidecar::run(&args);
    let (code, said) = silence(sidecar.addr, &["list"]);
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("s1  active until") && said.contains("\"maintenance\""),
        "{said}"
    );
    wait_for("Stalled still firing, still silenced", || {
        stalled_shown(sidecar.addr).is_some_and(|a| a["silenced"] == true)
    });
    assert_eq!(
        sidecar
            .metrics()
            .get("pulse_alert_firing", "alert=\"Stalled\",partition=\"B1\""),
        Some(1.0),
        "a silenced alert is still evaluated"
    );
    let (code, said) = silence(sidecar.addr, &["expire", "s1"]);
    assert_eq!(code, 0, "{said}");
    let got = hook.wait(
        "the firing once the silence ended",
        Duration::from_secs(20),
        |r| {
            r.iter()
                .any(|m| m.body.contains("\"Stalled\"") && m.body.contains("\"firing\""))
        },
    );
    assert!(got.iter().all(|m| m.answered == 200));
    assert!(stalled_shown(sidecar.addr).is_some_and(|a| a["silenced"] == false));
    resume(&log);
    let got = hook.wait("the resolution", Duration::from_secs(20), resolved);
    let stalled_firing = got
        .iter()
        .filter(|m| {
            m.body.contains("\"alertname\":\"Stalled\"") && m.body.contains("\"status\":\"firing\"")
        })
        .count();
    assert_eq!(
        stalled_firing, 1,
        "held while silenced, notified once at its end: {got:#?}"
    );
    let (code, said) = silence(sidecar.addr, &["expire", "s1"]);
    assert_eq!(code, 1, "already ended: {said}");
}
