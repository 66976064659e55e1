//! Bad configuration stops start-up with exit code 2 and a message naming the key.

mod common;

use common::*;
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
