//! What the engine keeps in the state directory, and nothing else: the lifecycle, the rule
//! history and the outbox (`alerts.json`), the last stacks (`stacks.json`) and the last action
//! runs (`actions.json`). A room of its own because every other room has a part in
//! `alerts.json`: the file's shape is decided here, once, and each room owns its part in
//! memory.
//!
//! `alerts.json` is saved atomically after every change and before any send: a restart resumes
//! it, so a notification is neither lost nor sent twice. (A crash between an SMTP server's "250
//! OK" and the save that follows it would send that one message again: SMTP has no way to ask.)

use crate::model::stacks::Captures;
use crate::model::ActionRun;
use crate::rules::History;
use crate::sinks::alert::action;
use crate::sinks::alert::delivery::Outgoing;
use crate::sinks::alert::lifecycle::Lifecycle;
use crate::state::StateDir;
use serde::{Deserialize, Serialize};

const SAVED: &str = "alerts.json";
/// The last stacks taken, kept across a restart.
const STACKS: &str = "stacks.json";
/// The last action runs, with their output.
const ACTIONS: &str = "actions.json";

/// `alerts.json` as a restart reads it; dealt out to the rooms that own its parts.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Saved {
    pub lifecycle: Lifecycle,
    pub history: History,
    pub outbox: Vec<Outgoing>,
    pub next_id: u64,
    /// When the firing alerts were last pushed to the Alertmanagers.
    #[serde(default)]
    pub alertmanager_pushed_at: f64,
    /// The run the lifecycle's notices were told for ([`crate::model::Run::runs_started`]).
    #[serde(default)]
    pub runs_started: u64,
    /// The actions' runs per episode and cooldowns.
    #[serde(default)]
    pub actions: action::Ledger,
}

/// `alerts.json` as it is written, borrowed from the rooms: the same fields as [`Saved`].
#[derive(Serialize)]
pub(super) struct Snapshot<'a> {
    pub lifecycle: &'a Lifecycle,
    pub history: &'a History,
    pub outbox: &'a [Outgoing],
    pub next_id: u64,
    pub alertmanager_pushed_at: f64,
    pub runs_started: u64,
    pub actions: &'a action::Ledger,
}

/// The state directory, where there is one; without it nothing is kept.
#[derive(Debug, Clone, Default)]
pub(super) struct Persistence {
    state: Option<StateDir>,
}

impl Persistence {
    pub fn new(state: Option<&StateDir>) -> Persistence {
        Persistence {
            state: state.cloned(),
        }
    }

    /// The saved alert state, or a fresh one.
    pub fn load(&self) -> Saved {
        let saved: Saved = self.load_json(SAVED).unwrap_or_default();
        if !saved.outbox.is_empty() {
            tracing::info!(
                "{} undelivered notification(s) from before the restart",
                saved.outbox.len()
            );
        }
        saved
    }

    pub fn save(&self, snapshot: &Snapshot<'_>) {
        let Some(state) = &self.state else {
            return;
        };
        if let Err(e) = state.save_json(SAVED, snapshot) {
            let path = state.path(SAVED);
            tracing::warn!(
                path = %path.display(),
                "cannot save the alert state {}: {e}",
                path.display()
            );
        }
    }

    pub fn load_stacks(&self) -> Option<Captures> {
        self.load_json(STACKS)
    }

    pub fn keep_stacks(&self, stacks: &Captures) {
        if let Some(state) = &self.state {
            if let Err(e) = state.save_json(STACKS, stacks) {
                tracing::warn!("cannot keep the stacks in the state directory: {e}");
            }
        }
    }

    pub fn load_action_runs(&self) -> Option<Vec<ActionRun>> {
        self.load_json(ACTIONS)
    }

    pub fn keep_action_runs(&self, runs: &[ActionRun]) {
        if let Some(state) = &self.state {
            if let Err(e) = state.save_json(ACTIONS, &runs) {
                tracing::warn!("cannot keep the action runs in the state directory: {e}");
            }
        }
    }

    fn load_json<T: serde::de::DeserializeOwned>(&self, name: &str) -> Option<T> {
        self.state.as_ref().and_then(|s| s.load_json(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is written is what a restart reads: the two shapes of `alerts.json` are one.
    #[test]
    fn a_snapshot_reads_back_as_saved() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let persistence = Persistence::new(Some(&state));
        let (lifecycle, history, ledger) = (
            Lifecycle::default(),
            History::default(),
            action::Ledger::default(),
        );
        persistence.save(&Snapshot {
            lifecycle: &lifecycle,
            history: &history,
            outbox: &[],
            next_id: 7,
            alertmanager_pushed_at: 12.5,
            runs_started: 3,
            actions: &ledger,
        });
        let saved = persistence.load();
        assert_eq!(
            (
                saved.next_id,
                saved.alertmanager_pushed_at,
                saved.runs_started
            ),
            (7, 12.5, 3)
        );
    }
}
