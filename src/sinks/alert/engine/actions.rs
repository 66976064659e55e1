//! The alert engine's side of the actions (docs/alerts.md#actions): after each round, start
//! those due (the decisions are `action`'s, pure); when one ends, keep it, count it and tell
//! the alert's channels what it did. A room of its own because it owns processes: the
//! commands running now, killed with the engine, and the ledger of what ran.

use super::persistence::Persistence;
use crate::clock;
use crate::lock::Published;
use crate::model::{ActionResult, ActionRun, AlertView};
use crate::sinks::alert::action::runner::{Finished, Launch};
use crate::sinks::alert::action::{self, runner};
use crate::sinks::alert::settings::AlertConfig;
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
    pub(super) fn start(
        &mut self,
        launch: Launch,
        dry_run: bool,
        view: &Published<AlertView>,
        now: f64,
    ) {
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
    pub(super) fn record_end(
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
