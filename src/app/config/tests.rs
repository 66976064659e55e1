use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pulse.toml");
    std::fs::write(&path, text).unwrap();
    RawConfig::from_file(&path)?.validate()
}

fn key_of(err: ConfigError) -> String {
    match err {
        ConfigError::Syntax { key, .. } | ConfigError::Invalid { key, .. } => key,
        ConfigError::Read { .. } => panic!("unexpected read error"),
    }
}

#[test]
fn defaults() {
    let c = parse("").unwrap();
    assert_eq!(c.listen[0].to_string(), "0.0.0.0:9721");
    assert_eq!(c.log.interval, Duration::from_millis(250));
    assert!(c.log.logs.is_empty());
}

#[test]
fn full_file() {
    let c = parse(
        r#"
listen = "127.0.0.1:9999"
poll_interval = "1s"
[[logs]]
path = "/data/run/logs/inference_all.log"
[[logs]]
path = "/data/run/logs/train.log"
format = "regex"
regex = 'step (?P<completed>\d+)'
"#,
    )
    .unwrap();
    assert_eq!(c.listen[0].port(), 9999);
    assert_eq!(c.log.interval, Duration::from_secs(1));
    assert_eq!(c.log.logs.len(), 2);
    assert!(matches!(c.log.logs[1].parser, Parser::Regex(_)));
    let again = {
        let raw: RawConfig = toml::from_str(&c.to_toml()).unwrap();
        raw.validate().unwrap()
    };
    assert_eq!(again.to_toml(), c.to_toml());
}

#[test]
fn errors_name_the_key() {
    for (text, key) in [
        ("listen = \"nowhere\"", "listen"),
        ("listn = \"x\"", "listn"),
        ("poll_interval = 5", "poll_interval"),
        ("poll_interval = \"soon\"", "poll_interval"),
        ("poll_interval = \"1ms\"", "poll_interval"),
        ("max_line_bytes = 3", "max_line_bytes"),
        (
            "[[logs]]\npath = \"a\"\nformat = \"regex\"",
            "logs[0].regex",
        ),
        (
            "[[logs]]\npath = \"a\"\nformat = \"regex\"\nregex = \"(\"",
            "logs[0].regex",
        ),
        ("[[logs]]\npath = \"a\"\nformat = \"json\"", "format"),
        ("[[logs]]\npath = \"a\"\nregex = \"x\"", "logs[0].regex"),
    ] {
        assert_eq!(key_of(parse(text).unwrap_err()), key, "{text}");
    }
}

#[test]
fn several_listen_addresses() {
    let c = parse("listen = [\"127.0.0.1:9721\", \"127.0.0.2:9721\"]").unwrap();
    assert_eq!(c.listen.len(), 2);
    assert_eq!(
        key_of(parse("listen = [\"127.0.0.1:9721\", \"127.0.0.1:9721\"]").unwrap_err()),
        "listen[1]"
    );
    assert_eq!(key_of(parse("listen = []").unwrap_err()), "listen");
    let again: RawConfig = toml::from_str(&c.to_toml()).unwrap();
    assert_eq!(again.validate().unwrap().listen, c.listen);
}

#[test]
fn one_glob_spelled_two_ways_is_refused_naming_the_second() {
    let dir = tempfile::tempdir().unwrap();
    let prepared = dir.path().join("prepared");
    std::fs::create_dir_all(prepared.join("B1")).unwrap();
    std::os::unix::fs::symlink(&prepared, dir.path().join("link")).unwrap();
    let root = dir.path().display();
    for other in [
        format!("{root}/prepared/B1/../*/raw.jsonl"),
        format!("{root}/link/*/raw.jsonl"),
        format!("{root}/./prepared//*/raw.jsonl"),
    ] {
        let text = format!(
            "[[outputs]]\nglob = \"{root}/prepared/*/raw.jsonl\"\n[[outputs]]\nglob = \"{other}\"\n"
        );
        let err = parse(&text).expect_err(&other);
        assert!(err.to_string().contains("the same glob"), "{other}: {err}");
        assert_eq!(key_of(err), "outputs[1].glob", "{other}");
    }
    let distinct = format!(
        "[[outputs]]\nglob = \"{root}/prepared/*/raw.jsonl\"\n[[outputs]]\nglob = \"{root}/prepared/*/other.jsonl\"\n"
    );
    parse(&distinct).expect("two globs");
}
