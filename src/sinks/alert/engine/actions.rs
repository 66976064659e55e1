//! The alert engine's side of the actions (docs/alerts.md#actions): after each round, start
//! those due (the decisions are `action`'s, pure); when one ends, keep it, count it and tell
//! the alert's channels what it did. Kept apart from the loop so the engine reads as rounds and
//! deliveries.

use super::{Engine, Round};
use crate::clock;
use crate::lock::Locked;
use crate::model::{ActionResult, ActionRun, AlertView};
use crate::sinks::alert::action::runner::{Finished, Launch};
use crate::sinks::alert::action::{self, runner};
use crate::sinks::alert::lifecycle::{Kind, Notification};
use crate::sinks::alert::settings::AlertConfig;
use crate::sinks::alert::Condition;
use crate::sinks::status::Status;
use crate::state::StateDir;

/// The last action runs, with their output.
const ACTIONS: &str = "actions.json";
/// Action runs kept for `/status` and `actions.json`.
const ACTION_RUNS_KEPT: usize = 20;
/// How long a page waits for the actions its round started, to say what a quick one did.
pub const QUICK_ACTION: std::time::Duration = std::time::Duration::from_secs(3);

impl Engine {
    /// Starts the actions due for the firing alerts, and lets the round's notifications say
    /// what the actions did (docs/alerts.md#actions). The run's facts are copied under the
    /// lock; each command starts after it is released, on a thread of its own, so a scrape
    /// never waits for one and a command that hangs holds back no alert.
    pub(super) fn act(&mut self, round: &mut Round, now: f64) -> usize {
        let mut started = 0;
        let actions = &self.config.actions;
        let firing = self.saved.lifecycle.firing();
        if !actions.list.is_empty() && !firing.is_empty() {
            let facts = action::facts(&self.run.locked(), actions.server_url.as_deref());
            let tracked: Vec<_> = self
                .saved
                .lifecycle
                .statuses()
                .iter()
                .map(|s| s.alert)
                .collect();
            let due = self.silences.with(|silences| {
                let silenced = |c: &Condition| silences.silenced(c, now);
                action::due(
                    actions,
                    &mut self.saved.actions,
                    &firing,
                    &tracked,
                    silenced,
                    &facts,
                    now,
                )
            });
            let secret_env = actions.secret_env.clone();
            for (action, condition, since, attempt) in due {
                started += 1;
                self.start_action(
                    Launch {
                        action,
                        condition,
                        since,
                        facts: facts.clone(),
                        attempt,
                        host: self.config.context.host.clone(),
                        secret_env: secret_env.clone(),
                    },
                    now,
                );
            }
        }
        let last_work = self.saved.actions.watching().then(|| {
            let run = self.run.locked();
            run.last_evidence_at(&run.current_views())
        });
        let last_work = last_work.flatten();
        let ledger = &mut self.saved.actions;
        ledger.note_work(last_work);
        ledger.hold_resolutions(&mut round.notifications, now);
        ledger.annotate(&mut round.notifications, now);
        ledger.release_resolutions(&mut round.notifications, last_work, now);
        ledger.annotate_firing(&mut self.unsilenced);
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
                tokio::time::timeout_at(deadline, self.acted.1.recv()).await
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
            let said = self.record_action_end(&launch, &finished);
            let running = format!("running `{}`", launch.action.name);
            for n in round.notifications.iter_mut().filter(|n| paged(n)) {
                n.condition.summary = n.condition.summary.replace(&running, &said);
                n.condition.details = n.condition.details.replace(&running, &said);
            }
        }
    }

    /// One action run begins: logged, shown as running, started off the runtime.
    fn start_action(&mut self, launch: Launch, now: f64) {
        let (action, alert) = (&launch.action, &launch.condition);
        let dry_run = self.config.actions.dry_run;
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
        self.view.update(|v| {
            v.action_runs.push(shown);
            let extra = v.action_runs.len().saturating_sub(ACTION_RUNS_KEPT);
            v.action_runs.drain(..extra);
        });
        runner::spawn(
            launch,
            dry_run,
            self.acted.0.clone(),
            self.action_groups.clone(),
        );
    }

    /// An action run ended: kept, counted, logged, and told on the alert's channels while it
    /// still fires (a failing action is said, never a reason to hold an alert back).
    pub(super) fn action_ended(&mut self, launch: Launch, finished: Finished) {
        let now = clock::now();
        self.record_action_end(&launch, &finished);
        let key = launch.condition.key();
        let still = self
            .saved
            .lifecycle
            .firing()
            .into_iter()
            .find(|(c, since)| c.key() == key && *since == launch.since);
        let silenced = |c: &Condition| self.silences.with(|s| s.silenced(c, now));
        let Some((condition, since)) = still.filter(|(c, _)| !silenced(c)) else {
            self.save();
            return;
        };
        let mut told = vec![Notification {
            kind: Kind::Reminder,
            condition,
            since,
        }];
        self.saved.actions.annotate(&mut told, now);
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

    /// Keeps what an action run did: in the ledger, the alert view, the count and the state
    /// directory, and in the sidecar's log. Returns the line the notifications say.
    fn record_action_end(&mut self, launch: &Launch, finished: &Finished) -> String {
        let now = clock::now();
        let name = launch.action.name.as_str();
        let said = finished.said(name);
        let key = launch.condition.key();
        self.saved.actions.end(name, &key, launch.since, &said, now);
        let result = finished.result();
        match result {
            ActionResult::Ok | ActionResult::DryRun => tracing::info!(action = name, "{said}"),
            _ => tracing::warn!(
                action = name,
                "{said}; it printed: {}",
                finished.output.trim()
            ),
        }
        self.view.update(|v| {
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
        if let Some(state) = &self.state {
            if let Err(e) = state.save_json(ACTIONS, &self.view.get().action_runs) {
                tracing::warn!("cannot keep the action runs in the state directory: {e}");
            }
        }
        said
    }
}

/// Every outcome of every action starts at zero, so `increase()` sees the first run; and the
/// last runs come back from the state directory.
pub(super) fn seed(config: &AlertConfig, state: Option<&StateDir>, view: &mut AlertView) {
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
    if let Some(mut runs) = state.and_then(|s| s.load_json::<Vec<ActionRun>>(ACTIONS)) {
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
