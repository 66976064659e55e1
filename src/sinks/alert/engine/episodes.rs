//! The alerts' episodes as the engine keeps them: the lifecycle stepped each round, the
//! silences that hold its notifications back, the marks on the run's chart and the alert
//! states published for `/metrics` and `/status`. A room of its own because it is the engine's
//! memory between rounds (pending → firing → resolved), which the actions and the channels
//! read and never change.

use crate::model::{AlertState, Run};
use crate::rules::Condition;
use crate::sinks::alert::lifecycle::{Kind, Lifecycle, Notification};
use crate::sinks::alert::settings::AlertConfig;
use crate::sinks::alert::silence::Store;

#[derive(Debug, Default)]
pub(super) struct Episodes {
    /// Kept in `alerts.json`.
    pub lifecycle: Lifecycle,
    /// The run the lifecycle's notices were told for ([`Run::runs_started`]); kept in
    /// `alerts.json`.
    pub runs_started: u64,
    /// This evaluation's firing alerts that no silence holds: what the Alertmanagers get.
    pub unsilenced: Vec<(Condition, f64)>,
}

/// One step's outcome: what may be notified, and every alert instance to show.
pub(super) struct Stepped {
    pub notifications: Vec<Notification>,
    pub alerts: Vec<AlertState>,
}

impl Episodes {
    pub fn new(lifecycle: Lifecycle, runs_started: u64) -> Episodes {
        Episodes {
            lifecycle,
            runs_started,
            unsilenced: Vec::new(),
        }
    }

    /// A new run in the log's place: its partitions and its end are told anew.
    pub fn follow(&mut self, run: &Run) {
        if run.runs_started() != self.runs_started {
            self.lifecycle.forget_notices();
            self.runs_started = run.runs_started();
        }
    }

    /// Steps the lifecycle with this round's conditions, marks the run's chart, and holds back
    /// what a silence holds; a silenced alert is still shown, as silenced.
    pub fn step(
        &mut self,
        run: &mut Run,
        conditions: Vec<Condition>,
        config: &AlertConfig,
        silences: &Store,
        now: f64,
    ) -> Stepped {
        let notifications =
            self.lifecycle
                .step(conditions, &config.rules, config.repeat.as_secs_f64(), now);
        for n in &notifications {
            let (alert, partition) = (n.condition.alert.as_str(), n.condition.partition.as_deref());
            match n.kind {
                Kind::Firing => run.mark_alert(n.since, alert, partition, true),
                Kind::Resolved { .. } => run.mark_alert(now, alert, partition, false),
                _ => {}
            }
        }
        let firing = self.lifecycle.firing();
        let statuses = self.lifecycle.statuses();
        let (notifications, silenced, shown) = silences.with(|silences| {
            let silenced: Vec<bool> = firing
                .iter()
                .map(|(c, _)| silences.silenced(c, now))
                .collect();
            let shown: Vec<bool> = statuses
                .iter()
                .map(|s| {
                    s.firing && silences.silences(s.alert.as_str(), s.partition.as_deref(), now)
                })
                .collect();
            (silences.mute(notifications, &firing, now), silenced, shown)
        });
        self.unsilenced = firing
            .into_iter()
            .zip(silenced)
            .filter(|(_, s)| !s)
            .map(|(f, _)| f)
            .collect();
        let alerts = statuses
            .into_iter()
            .zip(shown)
            .map(|(s, silenced)| AlertState {
                alert: s.alert.to_string(),
                silenced,
                partition: s.partition,
                firing: s.firing,
                summary: s.summary,
            })
            .collect();
        Stepped {
            notifications,
            alerts,
        }
    }

    /// The alerts firing now, with when each began.
    pub fn firing(&self) -> Vec<(Condition, f64)> {
        self.lifecycle.firing()
    }

    /// Whether this episode of this alert still fires, and no silence holds it now.
    pub fn still_firing(
        &self,
        key: &str,
        since: f64,
        silences: &Store,
        now: f64,
    ) -> Option<(Condition, f64)> {
        self.firing()
            .into_iter()
            .find(|(c, s)| c.key() == key && *s == since)
            .filter(|(c, _)| !silences.with(|s| s.silenced(c, now)))
    }
}
