//! Bad configuration stops start-up with exit code 2 and a message naming the key.

use crate::common::*;
use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn config_file(dir: &tempfile::TempDir, text: &str) -> String {
    let path = dir.path().join("pulse.toml");
    std::fs::write(&path, text).unwrap();
    path_str(&path).to_owned()
}

#[test]
fn check_config_prints_the_effective_config() {
    let dir = temp_dir();
    let file = config_file(
        &dir,
        "listen = \"127.0.0.1:9999\"\n[[logs]]\npath = \"/data/run.log\"\n",
    );
    let (code, stdout, stderr) = run(&["check-config", &file]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("listen = \"127.0.0.1:9999\""), "{stdout}");
    assert!(
        stdout.contains("poll_interval = \"250ms\""),
        "defaults are spelled out: {stdout}"
    );
    assert!(stdout.contains("format = \"auto\""), "{stdout}");
    assert!(
        stdout.contains("# logs[0] /data/run.log: auto has not decided"),
        "the effective format, as far as the log says: {stdout}"
    );
    assert!(
        toml::from_str::<toml::Value>(&stdout).is_ok(),
        "still TOML: {stdout}"
    );
}

#[test]
fn bad_values_exit_2_naming_the_key() {
    let dir = temp_dir();
    let cases = [
        ("listen = \"everywhere\"\n", "`listen`"),
        ("lisen = \"127.0.0.1:1\"\n", "`lisen`"),
        ("poll_interval = \"often\"\n", "`poll_interval`"),
        (
            "[[logs]]\npath = \"a.log\"\nformat = \"regex\"\n",
            "`logs[0].regex`",
        ),
        (
            "[[logs]]\npath = \"a.log\"\nformat = \"regex\"\nregex = '(?P<done>\\d+)'\n",
            "`logs[0].regex`",
        ),
    ];
    for (text, key) in cases {
        let file = config_file(&dir, text);
        for args in [
            vec!["check-config", &file],
            vec!["run", "--once", "--config", &file],
        ] {
            let (code, _, stderr) = run(&args);
            assert_eq!(code, Some(2), "{args:?} with {text:?}: {stderr}");
            assert!(
                stderr.contains(key),
                "{text:?}: expected {key} in {stderr:?}"
            );
        }
    }
}

#[test]
fn bad_flags_exit_2_naming_the_key() {
    let (code, _, stderr) = run(&["run", "--once", "--poll-interval", "soon"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("`poll_interval`"), "{stderr}");
    let (code, _, stderr) = run(&["run", "--once", "--log", "a.log", "--log-format", "json"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("json"), "{stderr}");
}

#[test]
fn unreadable_config_file_exits_2() {
    let (code, _, stderr) = run(&["check-config", "/nonexistent/pulse.toml"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("/nonexistent/pulse.toml"), "{stderr}");
}

#[test]
fn flags_override_the_file() {
    let dir = temp_dir();
    let log = dir.path().join("flag.log");
    std::fs::write(&log, "Processing: from_flag\n  3/9 (0 err) 1.0 req/s\n").unwrap();
    let file = config_file(&dir, "[[logs]]\npath = \"/nonexistent/file.log\"\n");
    let (code, stdout, stderr) =
        run(&["run", "--once", "--config", &file, "--log", path_str(&log)]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("pulse_partition_requests_completed{partition=\"from_flag\"} 3"),
        "{stdout}"
    );
    assert!(!stdout.contains("/nonexistent/file.log"));
}

/// One bad configuration: the file, the same through flags where flags can say it, the key
/// the message must name and what else it must say.
struct Bad {
    file: String,
    flags: Option<Vec<String>>,
    key: String,
    says: &'static str,
}

fn bad(file: impl Into<String>, key: impl Into<String>, says: &'static str) -> Bad {
    Bad {
        file: file.into(),
        flags: None,
        key: key.into(),
        says,
    }
}

impl Bad {
    fn flags(mut self, flags: &[&str]) -> Bad {
        self.flags = Some(flags.iter().map(|f| (*f).to_owned()).collect());
        self
    }
}

/// Wrong in ways people really type: out of range, zero where zero means never, duplicate
/// sources. Each must stop start-up with exit 2, naming the key, the value and the range.
fn bad_configs(dir: &std::path::Path) -> Vec<Bad> {
    const SMTP: &str = "smtp = \"file:///tmp/mail\"\nemail_to = [\"a@example.com\"]\n";
    let huge = "1000000000000y";
    let mut cases = Vec::new();
    let durations: [(&str, Option<&str>, &str); 13] = [
        ("poll_interval", Some("--poll-interval"), ""),
        ("header_read_timeout", Some("--header-read-timeout"), ""),
        ("snapshot_interval", Some("--snapshot-interval"), ""),
        ("gpu_interval", Some("--gpu-interval"), ""),
        ("probe_interval", Some("--probe-interval"), ""),
        ("probe_timeout", Some("--probe-timeout"), ""),
        ("alert_interval", Some("--alert-interval"), ""),
        ("stall_after", Some("--stall-after"), ""),
        ("repeat_interval", None, ""),
        ("smtp_timeout", None, SMTP),
        ("retry_backoff", None, ""),
        ("webhook_timeout", None, ""),
        (
            "heartbeat_interval",
            None,
            "heartbeat_url = \"http://127.0.0.1:9/ping\"\n",
        ),
    ];
    for (key, flag, extra) in durations {
        for value in ["0s", huge, "500000000000y"] {
            let mut case = bad(format!("{extra}{key} = \"{value}\"\n"), key, value);
            if let Some(flag) = flag {
                case = case.flags(&[flag, value]);
            }
            cases.push(case);
        }
    }
    cases.push(bad(
        "poll_interval = 5\n",
        "poll_interval",
        "quoted strings",
    ));
    cases.push(bad("probe_timeout = \"-1s\"\n", "probe_timeout", "-1s"));
    for rule in [
        "Stalled",
        "LogSilent",
        "ServerHung",
        "ProcessExited",
        "ServerDown",
        "GpusIdle",
        "GpuMissing",
        "ErrorRateHigh",
        "EmptyResponses",
        "ThroughputDrop",
        "LogOutputMismatch",
        "PartitionFinished",
        "RunFinished",
    ] {
        cases.push(bad(
            format!("[rules.{rule}]\nfor = \"{huge}\"\n"),
            format!("rules.{rule}.for"),
            huge,
        ));
    }
    for rule in ["Stalled", "ServerHung"] {
        for value in ["1e20", "\"0s\"", "nan", "inf", "-5"] {
            cases.push(bad(
                format!("[rules.{rule}]\nthreshold = {value}\n"),
                format!("rules.{rule}.threshold"),
                "",
            ));
        }
    }
    for rule in [
        "GpusIdle",
        "ErrorRateHigh",
        "EmptyResponses",
        "ThroughputDrop",
        "LogOutputMismatch",
    ] {
        for value in ["-0.1", "1.5", "nan", "\"5%\""] {
            cases.push(bad(
                format!("[rules.{rule}]\nthreshold = {value}\n"),
                format!("rules.{rule}.threshold"),
                "",
            ));
        }
    }
    for value in ["-1", "2.5", "1e9"] {
        cases.push(bad(
            format!("[rules.GpuMissing]\nthreshold = {value}\n"),
            "rules.GpuMissing.threshold",
            "whole number",
        ));
    }
    cases.push(bad(
        "[rules.LogSilent]\nthreshold = \"5m\"\n",
        "rules.LogSilent.threshold",
        "Stalled",
    ));
    cases.push(bad(
        "[rules.ProcessExited]\nthreshold = 1\n",
        "rules.ProcessExited.threshold",
        "no threshold",
    ));
    for port in ["0", "65536"] {
        let smtp = format!("smtp://mail.example.com:{port}?tls=none");
        cases.push(
            bad(
                format!("smtp = \"{smtp}\"\nemail_to = [\"a@example.com\"]\n"),
                "smtp",
                "1 to 65535",
            )
            .flags(&["--smtp", &smtp, "--email-to", "a@example.com"]),
        );
        for (key, flag) in [
            ("server_health_url", "--server-health-url"),
            ("server_metrics_url", "--server-metrics-url"),
        ] {
            let url = format!("http://127.0.0.1:{port}/x");
            cases.push(bad(format!("{key} = \"{url}\"\n"), key, "1 to 65535").flags(&[flag, &url]));
        }
    }
    cases.push(
        bad("listen = \"0.0.0.0:65536\"\n", "listen", "65536")
            .flags(&["--listen", "0.0.0.0:65536"]),
    );
    for (key, value) in [
        ("max_line_bytes", "0"),
        ("max_line_bytes", "1099511627776"),
        ("max_record_bytes", "10"),
        ("max_record_bytes", "1099511627776"),
    ] {
        cases.push(bad(format!("{key} = {value}\n"), key, "out of range"));
    }

    // Duplicate sources, of each kind.
    let log = dir.join("run.log");
    std::fs::write(&log, "").unwrap();
    let link = dir.join("link.log");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&log, &link).unwrap();
    let log = log.display().to_string();
    let dotted = format!("{}/./run.log", dir.display());
    let link = link.display().to_string();
    for other in [log.as_str(), dotted.as_str(), link.as_str()] {
        cases.push(
            bad(
                format!("[[logs]]\npath = \"{log}\"\n[[logs]]\npath = \"{other}\"\n"),
                "logs[1].path",
                "logs[0].path",
            )
            .flags(&["--log", &log, "--log", other]),
        );
    }
    cases.push(
        bad(
            format!("server_logs = [\"{log}\", \"{link}\"]\n"),
            "server_logs[1]",
            "server_logs[0]",
        )
        .flags(&["--server-log", &log, "--server-log", &link]),
    );
    cases.push(
        bad(
            format!("server_logs = [\"{dotted}\"]\n[[logs]]\npath = \"{log}\"\n"),
            "server_logs[0]",
            "logs[0].path",
        )
        .flags(&["--log", &log, "--server-log", &dotted]),
    );
    let glob = format!("{}/*/raw_responses.jsonl", dir.display());
    let glob_dotted = format!("{}/./*/raw_responses.jsonl", dir.display());
    cases.push(
        bad(
            format!("[[outputs]]\nglob = \"{glob}\"\n[[outputs]]\nglob = \"{glob_dotted}\"\n"),
            "outputs[1].glob",
            "outputs[0].glob",
        )
        .flags(&["--outputs", &glob, "--outputs", &glob_dotted]),
    );
    let inputs = format!("{}/*/prompts.jsonl", dir.display());
    cases.push(
        bad(
            format!("inputs = [\"{inputs}\", \"{inputs}\"]\n"),
            "inputs[1]",
            "inputs[0]",
        )
        .flags(&["--inputs", &inputs, "--inputs", &inputs]),
    );
    cases.push(
        bad(
            format!("inputs = [\"{glob}\"]\n[[outputs]]\nglob = \"{glob}\"\n"),
            "inputs[0]",
            "outputs[0].glob",
        )
        .flags(&["--outputs", &glob, "--inputs", &glob]),
    );
    let star = format!("{}/*.log", dir.display());
    cases.push(
        bad(
            format!("[[logs]]\npath = \"{log}\"\n[[outputs]]\nglob = \"{star}\"\n"),
            "logs[0].path",
            "outputs[0].glob",
        )
        .flags(&["--log", &log, "--outputs", &star]),
    );
    cases.push(
        bad(
            "smtp = \"file:///tmp/mail\"\nemail_to = [\"a@example.com\", \"b@example.com\", \"A@Example.com\"]\n",
            "email_to[2]",
            "email_to[0]",
        )
        .flags(&[
            "--smtp",
            "file:///tmp/mail",
            "--email-to",
            "a@example.com",
            "--email-to",
            "b@example.com",
            "--email-to",
            "A@Example.com",
        ]),
    );
    cases
}

#[test]
fn every_bad_value_exits_2_naming_the_key_the_value_and_the_range() {
    let dir = temp_dir();
    let cases = bad_configs(dir.path());
    assert!(cases.len() >= 60, "{} cases", cases.len());
    let mut runs = 0;
    for case in &cases {
        let file = config_file(&dir, &case.file);
        let mut all = vec![
            vec!["check-config".to_owned(), file.clone()],
            vec![
                "run".to_owned(),
                "--once".to_owned(),
                "--config".to_owned(),
                file,
            ],
        ];
        if let Some(flags) = &case.flags {
            let mut args = vec!["run".to_owned(), "--once".to_owned()];
            args.extend(flags.iter().cloned());
            all.push(args);
        }
        for args in all {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, _, stderr) = run(&args);
            runs += 1;
            assert_eq!(code, Some(2), "{args:?} with {:?}: {stderr}", case.file);
            let key = format!("`{}`", case.key);
            assert!(
                stderr.contains(&key) && stderr.contains(case.says),
                "{args:?} with {:?}: expected {key} and {:?} in {stderr:?}",
                case.file,
                case.says
            );
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }
    eprintln!("{} bad configs, {runs} runs of the binary", cases.len());
}

#[test]
fn the_edges_of_each_range_are_accepted() {
    let dir = temp_dir();
    let file = config_file(
        &dir,
        "poll_interval = \"10ms\"\nheader_read_timeout = \"10m\"\nrepeat_interval = \"30days\"\n\
         max_line_bytes = 256\nlisten = \"127.0.0.1:0\"\n\
         [rules.Stalled]\nthreshold = \"30days\"\nfor = \"0s\"\n\
         [rules.GpusIdle]\nthreshold = 1\n[rules.ThroughputDrop]\nthreshold = 0\n\
         [rules.GpuMissing]\nthreshold = 8\n",
    );
    let (code, stdout, stderr) = run(&["check-config", &file]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("repeat_interval = \"30days\""), "{stdout}");
    assert!(
        !stdout.contains("[rules.LogSilent]\nenabled = true\nthreshold"),
        "a rule without a threshold is printed without one: {stdout}"
    );
}
