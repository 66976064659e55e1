//! The alert engine's side of the actions (docs/alerts.md#actions): after each round, start
//! those due (the decisions are `action`'s, pure); when one ends, keep it, count it and tell
//! the alert's channels what it did. A room of its own because it owns processes: the
//! commands running now, killed with the engine, and the ledger of what ran.

use super::persistence::Persistence;
use super::{Engine, Round};
use crate::clock;
use crate::lock::{Locked, Published};
use crate::model::{ActionResult, ActionRun, AlertView};
use crate::sinks::alert::action::runner::{Finished, Launch};
use crate::sinks::alert::action::{self, runner};
use crate::sinks::alert::lifecycle::{Kind, Notification};
use crate::sinks::alert::settings::AlertConfig;
use crate::sinks::alert::Condition;
use crate::sinks::status::Status;
use tokio::sync::mpsc;

/// Action runs kept for `/status` and `actions.json`.
const ACTION_RUNS_KEPT: usize = 20;
/// How long a page waits for the actions its round started, to say what a quick one did.
pub const QUICK_ACTION: std::time::Duration = std::time::Duration::from_secs(3);

pub(super) struct Actions {
    /// The runs per episode and the cooldowns; kept in `alerts.json`.
    pub ledger: action::Ledger,
    /// Where action runs report their end.
    acted: (runner::Done, mpsc::UnboundedReceiver<(Launch, Finished)>),
    /// The process groups of the actions running now.
    groups: runner::Groups,
}

impl Drop for Actions {
    /// The sidecar stops: no action outlives it, since nothing would enforce its timeout.
    fn drop(&mut self) {
        self.groups.kill_all();
    }
}

impl Actions {
    pub fn new(ledger: action::Ledger) -> Actions {
        Actions {
            ledger,
            acted: mpsc::unbounded_channel(),
            groups: runner::Groups::default(),
        }
    }

    /// The next action run to end.
    pub async fn ended(&mut self) -> Option<(Launch, Finished)> {
        self.acted.1.recv().await
    }

    /// One action run begins: logged, shown as running, started off the runtime.
    fn start(&mut self, launch: Launch, dry_run: bool, view: &Published<AlertView>, now: f64) {
        let (action, alert) = (&launch.action, &launch.condition);
        let verb = if dry_run {
            "would run (dry run)"
        } else {
            "running"
        };
        tracing::warn!(
            action = %action.name,
            alert = %alert.alert,
            partition = alert.partition.as_deref(),
            "{verb} action {}: {:?} (timeout {:?}, run {} of {} this episode)",
            action.name, action.command, action.timeout, launch.attempt, action.max_runs
        );
        let shown = ActionRun {
            action: action.name.clone(),
            alert: alert.alert.to_string(),
            partition: alert.partition.clone(),
            started_at: now,
            result: ActionResult::Running,
            said: format!("running `{}`", action.name),
            ..ActionRun::default()
        };
        view.update(|v| {
            v.action_runs.push(shown);
            let extra = v.action_runs.len().saturating_sub(ACTION_RUNS_KEPT);
            v.action_runs.drain(..extra);
        });
        runner::spawn(launch, dry_run, self.acted.0.clone(), self.groups.clone());
    }

    /// Keeps what an action run did: in the ledger, the alert view, the count and the state
    /// directory, and in the sidecar's log. Returns the line the notifications say.
    fn record_end(
        &mut self,
        launch: &Launch,
        finished: &Finished,
        view: &Published<AlertView>,
        persistence: &Persistence,
    ) -> String {
        let now = clock::now();
        let name = launch.action.name.as_str();
        let said = finished.said(name);
        let key = launch.condition.key();
        self.ledger.end(name, &key, launch.since, &said, now);
        let result = finished.result();
        match result {
            ActionResult::Ok | ActionResult::DryRun => tracing::info!(action = name, "{said}"),
            _ => tracing::warn!(
                action = name,
                "{said}; it printed: {}",
                finished.output.trim()
            ),
        }
        view.update(|v| {
            *v.action_counts
                .entry((name.to_owned(), result))
                .or_default() += 1;
            let run = v
                .action_runs
                .iter_mut()
                .rev()
                .find(|r| r.action == name && r.result == ActionResult::Running);
            if let Some(run) = run {
                run.result = result;
                run.seconds = Some(finished.seconds);
                run.exit_code = finished.exit_code();
                run.said = said.clone();
                run.output = finished.output.clone();
            }
        });
        persistence.keep_action_runs(&view.get().action_runs);
        said
    }
}

impl Engine {
    /// Starts the actions due for the firing alerts, and lets the round's notifications say
    /// what the actions did (docs/alerts.md#actions). The run's facts are copied under the
    /// lock; each command starts after it is released, on a thread of its own, so a scrape
    /// never waits for one and a command that hangs holds back no alert.
    pub(super) fn act(&mut self, round: &mut Round, now: f64) -> usize {
        let mut started = 0;
        let actions = &self.config.actions;
        let firing = self.episodes.firing();
        if !actions.list.is_empty() && !firing.is_empty() {
            let facts = action::facts(&self.run.locked(), actions.server_url.as_deref());
            let tracked: Vec<_> = self
                .episodes
                .lifecycle
                .statuses()
                .iter()
                .map(|s| s.alert)
                .collect();
            let ledger = &mut self.actions.ledger;
            let due = self.silences.with(|silences| {
                let silenced = |c: &Condition| silences.silenced(c, now);
                action::due(actions, ledger, &firing, &tracked, silenced, &facts, now)
            });
            for (action, condition, since, attempt) in due {
                started += 1;
                let launch = Launch {
                    action,
                    condition,
                    since,
                    facts: facts.clone(),
                    attempt,
                    host: self.config.context.host.clone(),
                    secret_env: actions.secret_env.clone(),
                };
                self.actions.start(launch, actions.dry_run, &self.view, now);
            }
        }
        let last_work = self.actions.ledger.watching().then(|| {
            let run = self.run.locked();
            run.last_evidence_at(&run.current_views())
        });
        let last_work = last_work.flatten();
        let ledger = &mut self.actions.ledger;
        ledger.note_work(last_work);
        ledger.hold_resolutions(&mut round.notifications, now);
        ledger.annotate(&mut round.notifications, now);
        ledger.release_resolutions(&mut round.notifications, last_work, now);
        ledger.annotate_firing(&mut self.episodes.unsilenced);
        ledger.forget_gone(&firing);
        started
    }

    /// Waits at most [`QUICK_ACTION`] for the `started` actions of this round, so that the page
    /// says what a quick one did (``ran `x` (exit 0, 1 s)``) instead of "running" followed by
    /// a reminder a moment later. An action that takes longer is told in a reminder when it
    /// ends; an earlier round's action that ends meanwhile is taken as usual.
    pub(super) async fn await_quick_actions(&mut self, round: &mut Round, mut started: usize) {
        let deadline = tokio::time::Instant::now() + QUICK_ACTION;
        while started > 0 {
            let Ok(Some((launch, finished))) =
                tokio::time::timeout_at(deadline, self.actions.ended()).await
            else {
                return;
            };
            let key = launch.condition.key();
            let paged = |n: &Notification| {
                n.kind == Kind::Firing && n.since == launch.since && n.condition.key() == key
            };
            if !round.notifications.iter().any(paged) {
                self.action_ended(launch, finished);
                continue;
            }
            started -= 1;
            let said = self
                .actions
                .record_end(&launch, &finished, &self.view, &self.persistence);
            let running = format!("running `{}`", launch.action.name);
            for n in round.notifications.iter_mut().filter(|n| paged(n)) {
                n.condition.summary = n.condition.summary.replace(&running, &said);
                n.condition.details = n.condition.details.replace(&running, &said);
            }
        }
    }

    /// An action run ended: kept, counted, logged, and told on the alert's channels while it
    /// still fires (a failing action is said, never a reason to hold an alert back).
    pub(super) fn action_ended(&mut self, launch: Launch, finished: Finished) {
        let now = clock::now();
        self.actions
            .record_end(&launch, &finished, &self.view, &self.persistence);
        let key = launch.condition.key();
        let Some((condition, since)) =
            self.episodes
                .still_firing(&key, launch.since, &self.silences, now)
        else {
            self.save();
            return;
        };
        let mut told = vec![Notification {
            kind: Kind::Reminder,
            condition,
            since,
        }];
        self.actions.ledger.annotate(&mut told, now);
        let alerts = self.view.get();
        let run = self.run.locked().clone();
        let status = Status::from_run(&run, &alerts, &self.config.context.host, now);
        self.queue(
            Round {
                notifications: told,
                status,
            },
            now,
        );
    }
}

/// Every outcome of every action starts at zero, so `increase()` sees the first run; and the
/// last runs come back from the state directory.
pub(super) fn seed(config: &AlertConfig, persistence: &Persistence, view: &mut AlertView) {
    let results: &[ActionResult] = if config.actions.dry_run {
        &[ActionResult::DryRun]
    } else {
        &[
            ActionResult::Ok,
            ActionResult::Failed,
            ActionResult::Timeout,
        ]
    };
    for action in &config.actions.list {
        for result in results {
            view.action_counts
                .entry((action.name.clone(), *result))
                .or_default();
        }
    }
    if let Some(mut runs) = persistence.load_action_runs() {
        // A run the last life saw start has no one to wait for it now.
        for run in runs
            .iter_mut()
            .filter(|r| r.result == ActionResult::Running)
        {
            run.result = ActionResult::Interrupted;
        }
        view.action_runs = runs;
    }
}
