//! The alert scenario matrix: healthy runs that must not page and broken ones that must, each
//! played through the real model, rules and lifecycle on a simulated clock (every 15 s, the
//! default `alert_interval`, with the default thresholds), so hours of a run take
//! milliseconds and nothing sleeps. For each scenario: the alerts that must fire and the
//! latest moment each may, and every other paging alert is a false one. The table of
//! precision, recall and detection latency is printed (`cargo test --test it alert_scenarios:: --
//! --nocapture`) and the goal, 1.0 and 1.0, is asserted.

use pipeline_pulse::model::{InputFile, OutputFile, Run, ServerState};
use pipeline_pulse::parse::{Detect, Parser};
use pipeline_pulse::rules::{evaluate, History, Rules};
use pipeline_pulse::sinks::alert::lifecycle::{Kind, Lifecycle};
use pipeline_pulse::sinks::alert::AlertName;

const T0: f64 = 1_780_000_000.0;
const STEP: f64 = 15.0;
const MIN: f64 = 60.0;

/// A run, its probes and the alert engine, on a clock the scenario moves.
struct Sim {
    run: Run,
    parser: Parser,
    rules: Rules,
    history: History,
    lifecycle: Lifecycle,
    now: f64,
    /// (seconds since start, alert, partition) of every FIRING notification.
    fired: Vec<(f64, AlertName, Option<String>)>,
    /// When the scenario's incident happened, if it has one.
    incident: Option<f64>,
    /// What the server probe finds, probed at every step like the real one (every 5 s).
    server: Option<(bool, f64, f64)>,
}

impl Sim {
    fn new() -> Sim {
        let mut run = Run::new(&["inference_all.log".into()]);
        run.process_seen(Some(4242), T0);
        Sim {
            run,
            parser: Parser::Auto(Detect::default()),
            rules: Rules::default(),
            history: History::default(),
            lifecycle: Lifecycle::default(),
            now: T0,
            fired: Vec::new(),
            incident: None,
            server: None,
        }
    }

    fn log(&mut self, text: &str) {
        for line in text.lines() {
            let event = self.parser.parse(line.as_bytes());
            self.run.ingest(0, line.as_bytes(), event, self.now);
        }
    }

    fn progress(&mut self, done: u64, planned: u64) {
        self.log(&format!(
            "  {done}/{planned} (0 err) 1.0 req/s avg_comp=500tok ETA=10m"
        ));
    }

    /// `records` more records in the partition's output file, written now.
    fn write(&mut self, partition: &str, records: u64) {
        let path = format!("prepared/{partition}/raw_responses.jsonl");
        let mut file = self
            .run
            .outputs()
            .get(&path)
            .cloned()
            .unwrap_or(OutputFile {
                partition: partition.to_owned(),
                ..OutputFile::default()
            });
        file.stats.records += records;
        file.last_write = Some(self.now);
        self.run.set_output_file(path, file);
    }

    fn inputs(&mut self, partition: &str, lines: u64) {
        self.run.set_input_file(
            format!("prepared/{partition}/prompts.jsonl"),
            InputFile {
                partition: partition.to_owned(),
                lines,
            },
        );
    }

    fn server(&mut self, up: bool, running: f64, tps: f64) {
        self.server = Some((up, running, tps));
        self.probe();
    }

    fn probe(&mut self) {
        let Some((up, running, tps)) = self.server else {
            return;
        };
        let state = ServerState {
            up: Some(up),
            running_requests: up.then_some(running),
            queued_requests: up.then_some(0.0),
            generation_tokens_per_second: up.then_some(tps),
            checked_at: Some(self.now),
            ..ServerState::default()
        };
        self.run.set_server(state, self.now);
    }

    fn driver_exits(&mut self) {
        self.run.process_seen(None, self.now);
    }

    fn incident_now(&mut self) {
        self.incident = Some(self.now - T0);
    }

    /// Moves the clock by `seconds`, evaluating every STEP.
    fn wait(&mut self, seconds: f64) {
        let end = self.now + seconds;
        while self.now + STEP <= end + 1e-9 {
            self.now += STEP;
            self.probe();
            self.history.record(&self.run, self.now);
            let conditions = evaluate(&self.run, None, &self.rules, &self.history, self.now);
            for n in self
                .lifecycle
                .step(conditions, &self.rules, 3600.0, self.now)
            {
                if n.kind == Kind::Firing {
                    self.fired.push((
                        self.now - T0,
                        n.condition.alert,
                        n.condition.partition.clone(),
                    ));
                }
            }
        }
        self.now = end;
    }

    /// Runs a partition at a steady pace: a progress line every `every` seconds, each
    /// `per_line` completions, with the records written as they complete.
    fn steady(&mut self, name: &str, planned: u64, per_line: u64, every: f64, until: u64) {
        let mut done = self.run.partitions().get(name).map_or(0, |p| p.completed);
        while done < until {
            self.wait(every);
            done = (done + per_line).min(until);
            self.write(name, per_line);
            self.progress(done, planned);
        }
    }

    /// A partition announced with `max_tokens=10240`, the server generating for it, and a
    /// progress line of 50 more completions every minute until `until`.
    fn partition(&mut self, name: &str, planned: u64, until: u64) {
        self.header(name, planned, 10240);
        self.server(true, 150.0, 1300.0);
        self.steady(name, planned, 50, MIN, until);
    }

    fn header(&mut self, name: &str, planned: u64, max_tokens: u64) {
        self.log(&format!(
            "Processing: {name} (SHORT)\n{name}: {planned} prompts\nRunning {planned} requests (concurrency=150, max_tokens={max_tokens})..."
        ));
    }
}

/// An alert that must fire: which, for which partition, and at the latest how long after the
/// incident.
struct Expected {
    alert: AlertName,
    partition: Option<&'static str>,
    within: f64,
}

struct Scenario {
    name: &'static str,
    expected: Vec<Expected>,
    /// Alerts that are true about the incident too, and may fire besides the expected ones.
    allowed: &'static [AlertName],
    play: fn(&mut Sim),
}

fn must(alert: AlertName, partition: Option<&'static str>, within: f64) -> Expected {
    Expected {
        alert,
        partition,
        within,
    }
}

/// Alerts that page a person: notices and the throughput and data-quality warnings this
/// matrix does not exercise are not judged.
fn pages(alert: AlertName) -> bool {
    matches!(
        alert,
        AlertName::Stalled
            | AlertName::LogSilent
            | AlertName::ProcessExited
            | AlertName::ServerDown
            | AlertName::ServerHung
            | AlertName::LogOutputMismatch
            | AlertName::ErrorRateHigh
    )
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "healthy steady run",
            expected: vec![],
            allowed: &[],
            play: |s| {
                s.header("B1", 2000, 10240);
                s.server(true, 150.0, 1300.0);
                s.steady("B1", 2000, 50, 60.0, 2000);
                s.driver_exits();
                s.wait(30.0 * MIN);
            },
        },
        Scenario {
            name: "healthy slow reporter (a line every 15 min)",
            expected: vec![],
            allowed: &[],
            play: |s| {
                s.header("B1", 1000, 10240);
                s.server(true, 150.0, 1300.0);
                for i in 1..=8 {
                    for _ in 0..15 {
                        s.wait(MIN);
                        s.write("B1", 3);
                    }
                    s.progress(i * 50, 1000);
                }
            },
        },
        Scenario {
            name: "long partition start, server generating",
            expected: vec![],
            allowed: &[],
            play: |s| {
                s.header("B7_longform", 2000, 32768);
                // 150 streams sharing 1300 tok/s: ~10k-token answers take ~19 minutes.
                for _ in 0..19 {
                    s.server(true, 150.0, 1300.0);
                    s.wait(MIN);
                }
                s.write("B7_longform", 50);
                s.progress(50, 2000);
                s.steady("B7_longform", 2000, 50, 2.0 * MIN, 600);
            },
        },
        Scenario {
            name: "bursts: 150 completions together every 12 min",
            expected: vec![],
            allowed: &[],
            play: |s| {
                s.header("B2", 1500, 16384);
                for burst in 1..=10 {
                    for _ in 0..12 {
                        s.server(true, 150.0, 1300.0);
                        s.wait(MIN);
                    }
                    s.write("B2", 150);
                    for k in 1..=3 {
                        s.progress(burst * 150 - 150 + k * 50, 1500);
                    }
                }
            },
        },
        Scenario {
            name: "normal pause between partitions (5 min of dataset loading)",
            expected: vec![],
            allowed: &[],
            play: |s| {
                s.inputs("B1", 500);
                s.inputs("B2", 500);
                s.partition("B1", 500, 500);
                s.log("Done: B1");
                s.server(true, 0.0, 0.0);
                s.wait(5.0 * MIN);
                s.partition("B2", 500, 500);
                s.driver_exits();
                s.wait(10.0 * MIN);
            },
        },
        Scenario {
            name: "driver hung mid-partition",
            expected: vec![must(AlertName::Stalled, Some("B1"), 11.0 * MIN)],
            allowed: &[],
            play: |s| {
                s.partition("B1", 2000, 600);
                s.incident_now();
                s.server(true, 0.0, 0.0);
                s.wait(30.0 * MIN);
            },
        },
        Scenario {
            name: "driver hung between partitions",
            expected: vec![must(AlertName::Stalled, None, 11.0 * MIN)],
            allowed: &[],
            play: |s| {
                s.inputs("B1", 200);
                s.inputs("B2", 500);
                s.partition("B1", 200, 200);
                s.log("Done: B1");
                s.incident_now();
                s.server(true, 0.0, 0.0);
                s.wait(40.0 * MIN);
            },
        },
        Scenario {
            name: "driver crashed",
            expected: vec![must(AlertName::ProcessExited, None, 90.0)],
            allowed: &[],
            play: |s| {
                s.partition("B1", 2000, 600);
                s.incident_now();
                s.driver_exits();
                s.server(true, 0.0, 0.0);
                s.wait(30.0 * MIN);
            },
        },
        Scenario {
            name: "driver exits after a complete run",
            expected: vec![],
            allowed: &[],
            play: |s| {
                s.inputs("B1", 300);
                s.partition("B1", 300, 300);
                s.driver_exits();
                s.server(true, 0.0, 0.0);
                s.wait(30.0 * MIN);
            },
        },
        Scenario {
            name: "server crashed",
            expected: vec![must(AlertName::ServerDown, None, 2.5 * MIN)],
            allowed: &[],
            play: |s| {
                s.partition("B1", 2000, 600);
                s.incident_now();
                for _ in 0..30 {
                    s.server(false, 0.0, 0.0);
                    s.wait(MIN);
                }
            },
        },
        Scenario {
            name: "server hung with requests running",
            expected: vec![must(AlertName::ServerHung, None, 6.0 * MIN)],
            // The partition's stall is this incident too (ServerHung holds it back while firing).
            allowed: &[AlertName::Stalled],
            play: |s| {
                s.partition("B1", 2000, 600);
                s.incident_now();
                for _ in 0..30 {
                    s.server(true, 150.0, 0.0);
                    s.wait(MIN);
                }
            },
        },
        Scenario {
            name: "output writer stuck while the log advances",
            expected: vec![must(AlertName::LogOutputMismatch, Some("B1"), 13.0 * MIN)],
            allowed: &[],
            play: |s| {
                s.partition("B1", 4000, 600);
                s.incident_now();
                for done in (650..=2000).step_by(50) {
                    s.wait(MIN);
                    s.progress(done, 4000);
                }
            },
        },
        Scenario {
            name: "log buffered while outputs advance",
            expected: vec![must(AlertName::LogSilent, Some("B1"), 11.0 * MIN)],
            // The log's count lags the files: a true disagreement, about the same incident.
            allowed: &[AlertName::LogOutputMismatch],
            play: |s| {
                s.partition("B1", 4000, 600);
                s.incident_now();
                for _ in 0..30 {
                    s.wait(MIN);
                    s.write("B1", 50);
                }
            },
        },
        Scenario {
            name: "disk full: outputs stop, the log goes on",
            expected: vec![must(AlertName::LogOutputMismatch, Some("B1"), 13.0 * MIN)],
            allowed: &[],
            play: |s| {
                s.header("B1", 4000, 10240);
                s.server(true, 150.0, 1300.0);
                s.steady("B1", 4000, 100, MIN, 1000);
                s.incident_now();
                s.log("OSError: [Errno 28] No space left on device");
                for done in (1100..=3000).step_by(100) {
                    s.wait(MIN);
                    s.progress(done, 4000);
                }
            },
        },
    ]
}

#[test]
fn the_scenario_matrix_pages_for_every_incident_and_only_for_incidents() {
    let mut sent = 0;
    let mut right = 0;
    let mut incidents = 0;
    let mut caught = 0;
    let mut failures = Vec::new();
    println!("| scenario | must fire (deadline) | fired (after the incident) | false pages |");
    println!("|---|---|---|---|");
    for scenario in scenarios() {
        let mut sim = Sim::new();
        (scenario.play)(&mut sim);
        let incident = sim.incident.unwrap_or(0.0);
        let pages: Vec<_> = sim.fired.iter().filter(|(_, a, _)| pages(*a)).collect();
        let mut fired_text = Vec::new();
        let mut matched = vec![false; pages.len()];
        for e in &scenario.expected {
            incidents += 1;
            let hit = pages.iter().position(|(at, alert, partition)| {
                *alert == e.alert
                    && partition.as_deref() == e.partition
                    && *at >= incident
                    && *at - incident <= e.within
            });
            match hit {
                Some(i) => {
                    caught += 1;
                    matched[i] = true;
                    fired_text.push(format!("{} after {:.0}s", e.alert, pages[i].0 - incident));
                }
                None => failures.push(format!(
                    "{}: {} ({:?}) did not fire within {:.0}s of the incident; fired: {:?}",
                    scenario.name, e.alert, e.partition, e.within, sim.fired
                )),
            }
        }
        let mut false_pages = Vec::new();
        for (i, (at, alert, partition)) in pages.iter().enumerate() {
            sent += 1;
            // A second alert about a scenario's own incident is not a false page when it is
            // expected; anything unmatched is.
            if matched[i] || (*at >= incident && scenario.allowed.contains(alert)) {
                right += 1;
            } else {
                false_pages.push(format!("{alert} {partition:?} at {at:.0}s"));
            }
        }
        if !false_pages.is_empty() {
            failures.push(format!("{}: false pages {false_pages:?}", scenario.name));
        }
        let expected: Vec<String> = scenario
            .expected
            .iter()
            .map(|e| format!("{} ({:.0}s)", e.alert, e.within))
            .collect();
        println!(
            "| {} | {} | {} | {} |",
            scenario.name,
            if expected.is_empty() {
                "none".into()
            } else {
                expected.join(", ")
            },
            if fired_text.is_empty() {
                "none".into()
            } else {
                fired_text.join(", ")
            },
            if false_pages.is_empty() {
                "none".into()
            } else {
                false_pages.join(", ")
            },
        );
    }
    let precision = if sent == 0 {
        1.0
    } else {
        right as f64 / sent as f64
    };
    let recall = caught as f64 / incidents.max(1) as f64;
    println!("\nprecision {precision:.2} ({right}/{sent} pages right), recall {recall:.2} ({caught}/{incidents} incidents paged)");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!((precision, recall), (1.0, 1.0));
}
