//! The engine's round meets its actions: which start now, and what the page says they did.
//! Apart from the `Actions` room, which owns the processes and never needs the engine.

use super::actions::QUICK_ACTION;
use super::{Engine, Round};
use crate::clock;
use crate::lock::Locked;
use crate::sinks::alert::action;
use crate::sinks::alert::action::runner::{Finished, Launch};
use crate::sinks::alert::lifecycle::{Kind, Notification};
use crate::sinks::alert::Condition;
use crate::sinks::status::Status;

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
