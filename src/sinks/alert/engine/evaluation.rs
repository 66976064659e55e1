//! Judging the run: the rules over a model snapshot and the history they look back on, and the
//! stacks of a stuck run, which may name a stall's cause better than the probes. A room of its
//! own because it is the only part that asks "is something wrong?"; every other room acts on
//! the answer.

use crate::lock::Locked;
use crate::model::stacks::{Captures, TakeStacks};
use crate::model::Run;
use crate::rules::{self, Condition, History, Rules};
use crate::sinks::alert::lifecycle::Notification;
use std::sync::{Arc, Mutex};

/// The rule history, kept in `alerts.json` so that a restart looks back as far as before.
#[derive(Debug, Default)]
pub(super) struct Evaluation {
    pub history: History,
}

impl Evaluation {
    pub fn new(history: History) -> Evaluation {
        Evaluation { history }
    }

    /// Adds the run as it is now to the history, then evaluates the rules on both.
    pub fn judge(
        &mut self,
        run: &Run,
        stacks: Option<&Captures>,
        rules: &Rules,
        now: f64,
    ) -> Vec<Condition> {
        self.history.record(run, now);
        rules::evaluate(run, stacks, rules, &self.history, now)
    }

    /// The rules again with stacks just taken: what the round's notifications say takes what
    /// the stacks tell of the cause.
    pub fn refine(
        &self,
        run: &Run,
        stacks: &Captures,
        rules: &Rules,
        notifications: &mut [Notification],
        now: f64,
    ) {
        let conditions = rules::evaluate(run, Some(stacks), rules, &self.history, now);
        for n in notifications {
            if let Some(c) = conditions.iter().find(|c| c.key() == n.condition.key()) {
                n.condition.summary = c.summary.clone();
                n.condition.details = c.details.clone();
            }
        }
    }
}

/// Takes the stacks of the run's processes, off the runtime's threads and under each capture's
/// deadline. Nothing waits for stacks that cannot be had: where py-spy is missing or refused,
/// each process's line says why (docs/alerts.md#stacks); with no process known, none are taken.
pub(super) async fn capture(
    taker: &Arc<dyn TakeStacks>,
    run: &Mutex<Run>,
    reason: &str,
    now: f64,
) -> Option<Arc<Captures>> {
    let Some(capture) = taker.prepare(&run.locked()) else {
        tracing::info!("{reason}: no driver or server process is known, so no stacks are taken (--process-match, --run-dir)");
        return None;
    };
    let why = reason.to_owned();
    let captured = match tokio::task::spawn_blocking(move || capture(&why, now)).await {
        Ok(c) => Arc::new(c),
        Err(e) => {
            tracing::error!("the stacks for {reason} were not taken: {e}");
            return None;
        }
    };
    for p in &captured.processes {
        tracing::info!(pid = p.pid, took_ms = p.took_ms, "stacks: {}", p.summary);
    }
    Some(captured)
}
