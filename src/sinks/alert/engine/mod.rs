//! The alert loop: every `alert_interval`, evaluate the rules on the model, step the
//! lifecycle, render what it says for every channel (one email, one webhook message each, the
//! firing alerts for each Alertmanager), queue it, and deliver what is due.
//!
//! The engine is a coordinator: it owns the rooms and says in which order they work, each
//! room a file of its own with the state it keeps:
//! - [`evaluation`]: the rules and the history they look back on, and the stacks of a stuck run;
//! - [`episodes`]: the lifecycle between rounds, the silences over it, the alerts shown;
//! - [`actions`]: the operator's commands started after a round, and what each did;
//! - [`compose`]: the round's notifications in each channel's shape;
//! - [`outbox`]: the queued messages, delivered per channel side by side, and their counters;
//! - [`persistence`]: what of all this the state directory keeps (`alerts.json` and others);
//! - [`test_notify`]: `test-notify`'s message past all of it.

mod acting;
mod actions;
mod compose;
mod episodes;
mod evaluation;
mod outbox;
mod persistence;
mod test_notify;

pub use super::settings::{AlertConfig, Delivery};
pub use test_notify::{send_test, send_tests, test_notify};

use self::actions::Actions;
use self::compose::{Composer, Desk};
use self::episodes::Episodes;
use self::evaluation::Evaluation;
use self::outbox::Outbox;
use self::persistence::{Persistence, Snapshot};
use super::delivery::{alert_names, Outcome, EMAIL};
use super::email;
use super::lifecycle::{Kind, Notification};
use super::silence::Store;
use crate::clock;
use crate::lock::{Locked, Published};
use crate::model::{AlertView, Delivered, Run};
use crate::sinks::status::Status;
use crate::state::StateDir;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The longest alerts wait for every input's first read.
const FIRST_READ_LIMIT: Duration = Duration::from_secs(120);

/// How long the last round's sends may take when the sidecar stops with something left to
/// say (a SLURM job's end): inside the job, SLURM kills what is left 30 s after SIGTERM.
pub const LAST_WORD: Duration = Duration::from_secs(10);

/// One evaluation's notifications and the status they are told with, before they are queued.
struct Round {
    notifications: Vec<Notification>,
    status: Status,
}

/// The alerts of a stuck run that begin firing in this round, which want stacks taken.
fn wanting_stacks(notifications: &[Notification]) -> Option<String> {
    let names: Vec<&str> = notifications
        .iter()
        .filter(|n| n.kind == Kind::Firing && n.condition.alert.wants_stacks())
        .map(|n| n.condition.alert.as_str())
        .collect();
    (!names.is_empty()).then(|| alert_names(names))
}

pub struct Engine {
    config: AlertConfig,
    run: Arc<Mutex<Run>>,
    silences: Arc<Store>,
    /// What the engine publishes for the other sinks: it alone writes it (with the heartbeat's
    /// last success), and never into the run.
    view: Published<AlertView>,
    evaluation: Evaluation,
    episodes: Episodes,
    actions: Actions,
    composer: Composer,
    outbox: Outbox,
    persistence: Persistence,
}

impl Engine {
    /// Resumes the saved alert state, if a state directory holds one.
    pub fn new(config: AlertConfig, run: Arc<Mutex<Run>>, state: Option<&StateDir>) -> Engine {
        let persistence = Persistence::new(state);
        let saved = persistence.load();
        let view = Published::default();
        view.update(|v| outbox::seed_counters(&config, v));
        view.update(|v| actions::seed(&config, &persistence, v));
        if let Some(stacks) = persistence.load_stacks() {
            view.update(|v| v.stacks = Some(Arc::new(stacks)));
        }
        Engine {
            config,
            run,
            silences: Arc::new(Store::open(None)),
            view,
            evaluation: Evaluation::new(saved.history),
            episodes: Episodes::new(saved.lifecycle, saved.runs_started),
            actions: Actions::new(saved.actions),
            composer: Composer {
                next_id: saved.next_id,
                alertmanager_pushed_at: saved.alertmanager_pushed_at,
            },
            outbox: Outbox::new(saved.outbox),
            persistence,
        }
    }

    /// What the engine publishes: the alerts, its rounds, the notifications' outcomes.
    pub fn view(&self) -> Published<AlertView> {
        self.view.clone()
    }

    /// Obeys these silences (by default, an empty set of its own).
    pub fn with_silences(mut self, silences: Arc<Store>) -> Engine {
        self.silences = silences;
        self
    }

    /// Evaluates and delivers every interval, forever; abort the task to stop it. Nothing is
    /// evaluated while `unread` counts inputs still on their first read: a half-read backlog
    /// (one log read, the next not yet) would raise alerts that the rest disproves, or split
    /// alerts of one moment across emails. A first read that never ends (a hung NFS mount)
    /// must not silence alerting, though: after `FIRST_READ_LIMIT` it goes ahead, and says so.
    /// Judges every `interval` until `last` turns true (the sidecar stops with something
    /// left to say): then one more round, and its sends for up to [`LAST_WORD`].
    pub async fn run_every(
        mut self,
        unread: Arc<AtomicUsize>,
        mut last: tokio::sync::watch::Receiver<bool>,
    ) {
        self.outbox.open(&self.config);
        let mut ticks = tokio::time::interval(self.config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // tokio's clock, not std's: the tests pause it.
        let started = tokio::time::Instant::now();
        let mut waiting = true;
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                Some((id, outcome)) = self.outbox.settled() => {
                    // A send ended: take its outcome and start that channel's next one.
                    self.settle(&id, outcome);
                    self.outbox.deliver();
                    continue;
                }
                Some((launch, finished)) = self.actions.ended() => {
                    self.action_ended(launch, finished);
                    self.outbox.deliver();
                    continue;
                }
                Ok(()) = last.changed() => {
                    self.last_word().await;
                    return;
                }
            }
            if waiting && unread.load(Ordering::Acquire) > 0 {
                if started.elapsed() < FIRST_READ_LIMIT {
                    self.view.update(|v| v.rounds.waiting += 1);
                    continue;
                }
                tracing::warn!(
                    "some inputs have not been read once after {FIRST_READ_LIMIT:?}; judging alerts on what has been read"
                );
            }
            waiting = false;
            self.round(clock::now()).await;
        }
    }

    /// One round: judge, take stacks where a stuck run begins firing, start the actions due,
    /// queue what is to be said, and deliver what is due.
    async fn round(&mut self, now: f64) {
        let mut round = self.decide(now);
        if let Some(reason) = wanting_stacks(&round.notifications) {
            self.take_stacks(&mut round, &reason, now).await;
        }
        let started = self.act(&mut round, now);
        self.await_quick_actions(&mut round, started).await;
        self.queue(round, now);
        self.outbox.deliver();
    }

    /// One last round, and its sends waited for (at most [`LAST_WORD`]).
    async fn last_word(&mut self) {
        let now = clock::now();
        let round = self.decide(now);
        self.queue(round, now);
        self.outbox.deliver();
        let deadline = tokio::time::Instant::now() + LAST_WORD;
        while self.outbox.busy() {
            match tokio::time::timeout_at(deadline, self.outbox.settled()).await {
                Ok(Some((id, outcome))) => self.settle(&id, outcome),
                _ => break,
            }
        }
    }

    /// Evaluates the rules and steps the lifecycle: what this round has to say.
    fn decide(&mut self, now: f64) -> Round {
        let mut run = self.run.locked();
        self.view.update(|v| v.rounds.evaluated += 1);
        self.episodes.follow(&run);
        // Alerts carry the node's role as the evidence now says it (docs/many-nodes.md#roles).
        if let Some(label) = run.identity() {
            self.config.context.run = Some(label.clone());
        }
        let stacks = self.view.get().stacks.clone();
        let conditions = self
            .evaluation
            .judge(&run, stacks.as_deref(), &self.config.rules, now);
        let stepped = self
            .episodes
            .step(&mut run, conditions, &self.config, &self.silences, now);
        self.view.update(|v| v.alerts = stepped.alerts);
        let notifications = stepped.notifications;
        let status = Status::from_run(&run, &self.view.get(), &self.config.context.host, now);
        if !notifications.is_empty() {
            let partition = match notifications.as_slice() {
                [one] => one.condition.partition.as_deref(),
                _ => None,
            };
            tracing::warn!(
                alert = %alert_names(notifications.iter().map(|n| n.condition.alert.as_str())),
                partition,
                "{}",
                email::subject(&notifications, &self.config.context.place())
            );
            if !self.config.notifies() {
                self.view.update(|v| {
                    for n in &notifications {
                        let alert = n.condition.alert.as_str();
                        outbox::count(v, alert, Delivered::NotConfigured, EMAIL);
                    }
                });
            }
        }
        Round {
            notifications,
            status,
        }
    }

    /// Takes the stacks of the run's processes for the alerts of a stuck run that fire now,
    /// keeps and publishes them, then lets them refine what the round says
    /// (docs/alerts.md#stacks).
    async fn take_stacks(&mut self, round: &mut Round, reason: &str, now: f64) {
        let Some(taker) = self.config.stacks.clone() else {
            return;
        };
        let Some(captured) = evaluation::capture(&taker, &self.run, reason, now).await else {
            return;
        };
        self.persistence.keep_stacks(&captured);
        self.view.update(|v| v.stacks = Some(captured.clone()));
        let run = self.run.locked();
        // The rules again: the driver's stacks may name the cause better than the probes.
        self.evaluation.refine(
            &run,
            &captured,
            &self.config.rules,
            &mut round.notifications,
            now,
        );
        let alerts = self.view.get();
        round.status = Status::from_run(&run, &alerts, &self.config.context.host, now);
    }

    /// Renders the round for every channel and queues it.
    fn queue(&mut self, round: Round, now: f64) {
        let desk = Desk {
            config: &self.config,
            run: &self.run,
            view: &self.view,
        };
        let firing = std::mem::take(&mut self.episodes.unsilenced);
        let queued =
            self.composer
                .outgoing(&desk, &round.notifications, &round.status, firing, now);
        self.outbox.queue.extend(queued);
        // Saved before any attempt: from here on a restart sends it, and only once.
        self.save();
    }

    /// One attempt's outcome, taken by the outbox and saved.
    fn settle(&mut self, id: &str, outcome: Outcome) {
        let backoff = self.config.retry_backoff;
        if self.outbox.settle(id, outcome, backoff, &self.view) {
            self.save();
        }
    }

    fn save(&self) {
        self.persistence.save(&Snapshot {
            lifecycle: &self.episodes.lifecycle,
            history: &self.evaluation.history,
            outbox: &self.outbox.queue,
            next_id: self.composer.next_id,
            alertmanager_pushed_at: self.composer.alertmanager_pushed_at,
            runs_started: self.episodes.runs_started,
            actions: &self.actions.ledger,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{Parser, RunInference};

    fn config() -> AlertConfig {
        super::outbox::tests::config(None)
    }

    /// A run whose only partition last made progress an hour ago: `Stalled` holds.
    fn stalled_run() -> Arc<Mutex<Run>> {
        let mut run = Run::new(&["log".into()]);
        let mut parser = Parser::RunInference(RunInference);
        let then = clock::now() - 3600.0;
        for line in [
            "Processing: A",
            "A: 1000 prompts",
            "  100/1000 (0 err) 1.0 req/s",
        ] {
            run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), then);
        }
        Arc::new(Mutex::new(run))
    }

    /// A last word never asked for.
    fn never_last() -> tokio::sync::watch::Receiver<bool> {
        let (tx, rx) = tokio::sync::watch::channel(false);
        std::mem::forget(tx);
        rx
    }

    fn firing(view: &Published<AlertView>) -> Vec<String> {
        view.get().alerts.iter().map(|a| a.alert.clone()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn alerts_wait_for_every_first_read() {
        let run = stalled_run();
        let unread = Arc::new(AtomicUsize::new(2));
        let engine = Engine::new(config(), run.clone(), None);
        let view = engine.view();
        let engine = tokio::spawn(engine.run_every(unread.clone(), never_last()));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            firing(&view).is_empty(),
            "judged before the inputs were read"
        );
        unread.fetch_sub(2, Ordering::AcqRel);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(firing(&view), ["Stalled"]);
        engine.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_read_that_never_ends_does_not_silence_alerts() {
        let run = stalled_run();
        let unread = Arc::new(AtomicUsize::new(1));
        let engine = Engine::new(config(), run.clone(), None);
        let view = engine.view();
        let engine = tokio::spawn(engine.run_every(unread, never_last()));
        tokio::time::sleep(FIRST_READ_LIMIT - Duration::from_secs(20)).await;
        assert!(firing(&view).is_empty());
        tokio::time::sleep(Duration::from_secs(40)).await;
        assert_eq!(firing(&view), ["Stalled"]);
        engine.abort();
    }

    /// A round that queues notifications keeps them in `alerts.json` with the lifecycle, and
    /// a new engine on the same state directory resumes both.
    #[test]
    fn a_restart_resumes_the_alert_state() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let mut engine = Engine::new(config(), stalled_run(), Some(&state));
        let now = clock::now();
        let round = engine.decide(now);
        engine.queue(round, now);
        assert_eq!(
            engine.episodes.lifecycle.statuses().len(),
            1,
            "Stalled is tracked"
        );
        let resumed = Engine::new(config(), stalled_run(), Some(&state));
        assert_eq!(
            resumed.episodes.lifecycle.statuses(),
            engine.episodes.lifecycle.statuses()
        );
        assert_eq!(resumed.episodes.runs_started, engine.episodes.runs_started);
    }
}
