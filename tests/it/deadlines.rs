//! Deadlines, budgets and the ETA's band, played through the real model, rules and lifecycle
//! on a simulated clock (an evaluation every 15 s, the history sampled as the recorder does),
//! so hours of a run take milliseconds: a run that slows until it would miss its deadline
//! pages `RunLate` once and resolves it when it speeds up; a run that stops at its budget is
//! finished; and in a run whose pace comes in bursts the band holds the real end.

use pipeline_pulse::model::{Deadline, OutputFile, Plan, Run};
use pipeline_pulse::parse::{Parser, RunInference};
use pipeline_pulse::rules::{evaluate, History, Rules};
use pipeline_pulse::sinks::alert::lifecycle::{Kind, Lifecycle};
use pipeline_pulse::sinks::alert::AlertName;

const T0: f64 = 1_780_000_000.0;
const STEP: f64 = 15.0;
const MIN: f64 = 60.0;

struct Sim {
    run: Run,
    rules: Rules,
    history: History,
    lifecycle: Lifecycle,
    now: f64,
    done: f64,
    planned: u64,
    /// Where the driver stops: its plan, or a cap of its own.
    stop_at: u64,
    /// (minutes since start, kind, alert) of every notification.
    told: Vec<(f64, Kind, AlertName)>,
}

impl Sim {
    fn new(planned: u64, plan: Plan) -> Sim {
        let mut run = Run::new(&["inference_all.log".into()]);
        let collectors = run.collectors_on();
        run.configure(plan, None, collectors, None);
        let mut sim = Sim {
            run,
            rules: Rules::default(),
            history: History::default(),
            lifecycle: Lifecycle::default(),
            now: T0,
            done: 0.0,
            planned,
            stop_at: planned,
            told: Vec::new(),
        };
        sim.log(&format!("Processing: A (SHORT)\nA: {planned} prompts"));
        sim
    }

    fn log(&mut self, text: &str) {
        let mut parser = Parser::RunInference(RunInference);
        for line in text.lines() {
            self.run
                .ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), self.now);
        }
    }

    /// `minutes` at `rate` requests a second: a progress line and the records each 15 s.
    fn run_at(&mut self, rate: f64, minutes: f64) {
        let end = self.now + minutes * MIN;
        while self.now + STEP <= end + 1e-9 && (self.done as u64) < self.stop_at {
            self.now += STEP;
            self.done = (self.done + rate * STEP).min(self.stop_at as f64);
            let done = self.done as u64;
            self.log(&format!(
                "  {done}/{} (0 err) {rate:.1} req/s avg_comp=500tok ETA=1h",
                self.planned
            ));
            let mut file = self.file();
            file.stats.records = done;
            file.stats.tokens = done * 500;
            file.last_write = Some(self.now);
            self.run.set_output_file("A/raw.jsonl".into(), file);
            self.evaluate();
        }
    }

    /// The partition's output file as it stands.
    fn file(&self) -> OutputFile {
        self.run
            .outputs()
            .get("A/raw.jsonl")
            .cloned()
            .unwrap_or(OutputFile {
                partition: "A".into(),
                ..OutputFile::default()
            })
    }

    /// `minutes` with nothing new.
    fn idle(&mut self, minutes: f64) {
        let end = self.now + minutes * MIN;
        while self.now + STEP <= end + 1e-9 {
            self.now += STEP;
            self.evaluate();
        }
    }

    fn evaluate(&mut self) {
        self.run.note_output_tokens(self.now, true);
        self.run.sample_history(self.now);
        self.history.record(&self.run, self.now);
        let conditions = evaluate(&self.run, None, &self.rules, &self.history, self.now);
        for n in self
            .lifecycle
            .step(conditions, &self.rules, 3600.0, self.now)
        {
            self.told
                .push(((self.now - T0) / MIN, n.kind, n.condition.alert));
        }
    }

    fn told(&self, alert: AlertName) -> Vec<(f64, Kind)> {
        self.told
            .iter()
            .filter(|(_, _, a)| *a == alert)
            .map(|(t, k, _)| (*t, *k))
            .collect()
    }
}

#[test]
fn a_run_that_slows_past_its_deadline_pages_once_and_resolves_when_it_speeds_up() {
    let plan = Plan {
        deadline: Some(Deadline::At(T0 + 180.0 * MIN)),
        ..Plan::default()
    };
    let mut sim = Sim::new(6000, plan);
    // An hour at 1 req/s: 2400 left at that pace end at 1h40m, well inside 3h.
    sim.run_at(1.0, 60.0);
    assert_eq!(sim.told(AlertName::RunLate), []);
    let p = sim.run.projection(sim.now);
    assert!(
        p.deadline == Some(T0 + 180.0 * MIN) && p.eta_band.is_some(),
        "{p:?}"
    );
    // Slowed to 0.3 req/s: at that pace the rest takes past 3h.
    sim.run_at(0.3, 40.0);
    let fired = sim.told(AlertName::RunLate);
    assert_eq!(fired.len(), 1, "{fired:?}");
    let (at, kind) = fired[0];
    assert_eq!(kind, Kind::Firing);
    assert!(
        (75.0..=100.0).contains(&at),
        "fired at {at} min: after the slowdown's `for`"
    );
    // Back to 2 req/s: the projection comes back inside and the alert resolves, once.
    sim.run_at(2.0, 30.0);
    let told = sim.told(AlertName::RunLate);
    assert!(
        matches!(told[..], [(_, Kind::Firing), (_, Kind::Resolved { .. })]),
        "{told:?}"
    );
}

#[test]
fn a_run_stopped_at_its_budget_is_finished() {
    let plan = Plan {
        budget_records: Some(500),
        ..Plan::default()
    };
    let mut sim = Sim::new(1000, plan);
    sim.run_at(1.0, 5.0);
    let p = sim.run.projection(sim.now);
    assert_eq!(
        (p.target, p.budget_reached),
        (500, false),
        "the budget, not the plan"
    );
    assert!(
        p.eta_seconds.is_some_and(|e| (150.0..=250.0).contains(&e)),
        "{p:?}"
    );
    sim.run_at(1.0, 5.0);
    // The driver stops at 500 of its 1000 prompts, as its cap says, and goes quiet.
    let mut file = sim.file();
    file.stats.records = 500;
    sim.run.set_output_file("A/raw.jsonl".into(), file);
    sim.idle(30.0);
    let p = sim.run.projection(sim.now);
    assert!(p.budget_reached && p.eta_seconds == Some(0.0), "{p:?}");
    assert_eq!(
        sim.told(AlertName::RunFinished)
            .iter()
            .map(|(_, k)| *k)
            .collect::<Vec<_>>(),
        [Kind::Notice]
    );
    assert_eq!(
        sim.told(AlertName::Stalled),
        [],
        "a run at its budget is not stalled"
    );
    // Its rates are current: nothing is being generated.
    assert_eq!(p.tokens_per_second, Some(0.0));
}

#[test]
fn a_partition_stopped_at_its_own_budget_is_finished() {
    let plan = Plan {
        partition_budgets: [("A".to_owned(), 300)].into(),
        ..Plan::default()
    };
    let mut sim = Sim::new(1000, plan);
    sim.run_at(1.0, 5.0);
    let views = sim.run.current_views();
    assert_eq!(
        (views[0].planned(), views[0].target()),
        (Some(1000), Some(300))
    );
    drop(views);
    assert_eq!(sim.run.projection(sim.now).target, 300);
    // At 300 the driver stops A, as its cap says.
    sim.stop_at = 300;
    sim.run_at(1.0, 5.0);
    sim.idle(30.0);
    assert_eq!(
        sim.told(AlertName::PartitionFinished)
            .iter()
            .map(|(_, k)| *k)
            .collect::<Vec<_>>(),
        [Kind::Notice]
    );
    assert_eq!(sim.told(AlertName::RunFinished).len(), 1);
    assert_eq!(sim.told(AlertName::Stalled), []);
}

#[test]
fn the_band_holds_the_real_end_of_a_bursty_run() {
    let mut sim = Sim::new(20_000, Plan::default());
    let burst = |sim: &mut Sim| {
        sim.run_at(3.0, 10.0);
        sim.run_at(0.8, 10.0);
    };
    for _ in 0..4 {
        burst(&mut sim);
    }
    let p = sim.run.projection(sim.now);
    let (lower, upper) = p.eta_band.expect("a band after an hour and more");
    let eta = p.eta_seconds.unwrap();
    assert!(lower <= eta && eta <= upper, "{p:?}");
    assert!(upper > 1.5 * lower, "bursts make a wide band: {p:?}");
    let asked_at = sim.now;
    while (sim.done as u64) < sim.planned {
        burst(&mut sim);
    }
    let end = sim.now - asked_at;
    assert!(
        lower <= end && end <= upper,
        "ended {end:.0}s later; the band said {lower:.0}–{upper:.0}s"
    );
}
