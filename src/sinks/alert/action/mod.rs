//! Actions: a command of the operator's, run when an alert fires (`[[actions]]`, config file
//! only; docs/alerts.md#actions). This part is pure and takes `now`: which action is due for
//! which firing alert, within its limits, and what the alert's notifications say of it. The
//! facts an action is given are read from the run in one place ([`facts`]); running it, with
//! its timeout and its process group, is [`runner`], the I/O edge.
//!
//! The limits are the point: an action that restarts an engine must never restart it in a
//! loop, twice at once, for a run that is over, or behind a silence someone set to work on it.

mod facts;
pub mod runner;

pub use facts::{facts, Facts};

use super::lifecycle::{Kind, Notification};
use crate::rules::{AlertName, Cause, Condition};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// One `[[actions]]` entry, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    /// How logs, metrics and notifications name it: `name`, else the command's file name.
    pub name: String,
    pub on: Vec<AlertName>,
    /// Runs only for an alert whose likely cause is one of these (any alert where empty): by
    /// its id, never by the summary's words, so rewording a summary disarms no action.
    pub cause: Vec<Cause>,
    /// The program (an absolute path) and its arguments; no shell.
    pub command: Vec<String>,
    pub timeout: Duration,
    /// Runs per episode of one alert: from when it fires to when it resolves.
    pub max_runs: u32,
    /// The least time between the end of one run and the start of the next, whatever alert.
    pub cooldown: Duration,
    /// Whether it runs for an alert a silence holds.
    pub silenced: bool,
}

impl Action {
    /// Whether this alert instance is one the action is for.
    pub fn matches(&self, condition: &Condition) -> bool {
        self.on.contains(&condition.alert)
            && (self.cause.is_empty() || condition.cause.is_some_and(|c| self.cause.contains(&c)))
    }
}

/// What the engine is given: the actions, and whether they only say what they would run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Actions {
    pub list: Vec<Action>,
    /// `--dry-run-actions`: log what would run, count it, run nothing.
    pub dry_run: bool,
    /// The configured `server_health_url`, for `PULSE_SERVER_URL` where discovery found no
    /// server.
    pub server_url: Option<String>,
    /// Variables of the sidecar's environment that hold its secrets (`smtp_password_env`, a
    /// webhook header's `env`): left out of the commands' environment, which is the sidecar's
    /// otherwise. A restart script has no business with the SMTP password.
    pub secret_env: Vec<String>,
}

/// Why an action does not run for a firing alert now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Held {
    /// The run is finished: nothing is left to repair.
    Finished,
    /// A silence holds the alert and the action is not for silenced alerts.
    Silenced,
    /// An alert that explains it fires or is pending (`ServerDown` holds `Stalled`): the
    /// cause's action is the one to run.
    Inhibited,
    /// It runs now (for this alert or another): never twice at once.
    Running,
    /// It ran `max_runs` times in this episode.
    Limit,
    /// Its last run ended less than `cooldown` ago; seconds left.
    Cooldown(f64),
}

/// One firing alert instance as the actions see it.
#[derive(Debug, Clone, Copy)]
pub struct Firing<'a> {
    pub condition: &'a Condition,
    /// When it began firing: a new value is a new episode.
    pub since: f64,
    pub silenced: bool,
    pub inhibited: bool,
}

/// The episode of one alert instance an action last ran in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Episode {
    since: f64,
    runs: u32,
    /// When its last run ended, and what the notifications say of it.
    ended: Option<f64>,
    said: Option<String>,
    /// The first evidence of work a round saw after the run ended: the run moved again.
    #[serde(default)]
    moved: Option<f64>,
}

/// How long an alert's resolution waits for the run to move after the action that ran for it
/// (an engine restarted by its action takes minutes to serve again): told then, either way.
pub const RESOLUTION_WAITS_AT_MOST: f64 = 15.0 * 60.0;

/// A resolution held back until the run moves after the action that ran for its alert: a
/// hung engine killed by its action stops being hung at once, long before the run is healed,
/// and "resolved" must not be said of a run that has not moved (docs/alerts.md#actions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct HeldResolution {
    condition: Condition,
    since: f64,
    lasted: f64,
    /// When the episode began (`lasted` before the hold): told late, it lasted until the run
    /// moved, or until it is told, as its line says. Absent in a ledger from before.
    #[serde(default)]
    began: Option<f64>,
    action: String,
    /// When the action ended; `None` while it runs.
    ended: Option<f64>,
    until: f64,
}

/// What the actions remember: runs per episode and when each action last ended. Kept with
/// the alert state (`alerts.json`), so a restart neither forgets a limit nor resets a
/// cooldown. What runs now is not kept: a restarted sidecar has no child to wait for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    /// By [`episode_key`]: an action and an alert instance.
    episodes: BTreeMap<String, Episode>,
    /// By action: when its last run ended.
    ended: BTreeMap<String, f64>,
    #[serde(skip)]
    running: BTreeSet<String>,
    #[serde(default)]
    held: Vec<HeldResolution>,
}

fn episode_key(action: &str, alert_key: &str) -> String {
    format!("{action} {alert_key}")
}

impl Ledger {
    /// Whether `action` may run for this firing alert now.
    pub fn verdict(
        &self,
        action: &Action,
        firing: Firing<'_>,
        finished: bool,
        now: f64,
    ) -> Result<(), Held> {
        if finished {
            return Err(Held::Finished);
        }
        if firing.silenced && !action.silenced {
            return Err(Held::Silenced);
        }
        if firing.inhibited {
            return Err(Held::Inhibited);
        }
        if self.running.contains(&action.name) {
            return Err(Held::Running);
        }
        let key = episode_key(&action.name, &firing.condition.key());
        let runs = self
            .episodes
            .get(&key)
            .filter(|e| e.since == firing.since)
            .map_or(0, |e| e.runs);
        if runs >= action.max_runs {
            return Err(Held::Limit);
        }
        if let Some(ended) = self.ended.get(&action.name) {
            let left = ended + action.cooldown.as_secs_f64() - now;
            if left > 0.0 {
                return Err(Held::Cooldown(left));
            }
        }
        Ok(())
    }

    /// `action` starts for this alert: counted against its episode's limit, and running.
    pub fn begin(&mut self, action: &str, firing: Firing<'_>) {
        let episode = self
            .episodes
            .entry(episode_key(action, &firing.condition.key()))
            .or_insert(Episode {
                since: firing.since,
                runs: 0,
                ended: None,
                said: None,
                moved: None,
            });
        if episode.since != firing.since {
            *episode = Episode {
                since: firing.since,
                runs: 0,
                ended: None,
                said: None,
                moved: None,
            };
        }
        episode.runs += 1;
        self.running.insert(action.to_owned());
    }

    /// `action`, run for the episode of `alert_key` that began firing at `since`, ended at
    /// `now`; `said` is its line for that episode's notifications (a later episode of the same
    /// alert has its own).
    pub fn end(&mut self, action: &str, alert_key: &str, since: f64, said: &str, now: f64) {
        self.running.remove(action);
        self.ended.insert(action.to_owned(), now);
        if let Some(e) = self
            .episodes
            .get_mut(&episode_key(action, alert_key))
            .filter(|e| e.since == since)
        {
            e.ended = Some(now);
            e.said = Some(said.to_owned());
            e.moved = None;
        }
        for h in &mut self.held {
            if h.action == action && h.since == since && h.condition.key() == alert_key {
                h.ended = Some(now);
            }
        }
    }

    /// The run's latest evidence of work, as of this round: an action that ended before it
    /// saw the run move again.
    pub fn note_work(&mut self, last_work: Option<f64>) {
        let Some(work) = last_work else {
            return;
        };
        for e in self.episodes.values_mut() {
            if e.moved.is_none() && e.ended.is_some_and(|ended| work > ended) {
                e.moved = Some(work);
            }
        }
    }

    /// Whether any episode or held resolution waits on the run's work.
    pub fn watching(&self) -> bool {
        !self.episodes.is_empty() || !self.held.is_empty()
    }

    /// Holds back the round's resolutions of alerts an action ran for while the run has not
    /// moved since it ended.
    pub fn hold_resolutions(&mut self, notifications: &mut Vec<Notification>, now: f64) {
        let mut kept = Vec::with_capacity(notifications.len());
        for n in notifications.drain(..) {
            let Kind::Resolved { lasted } = n.kind else {
                kept.push(n);
                continue;
            };
            let unmoved = self
                .of(&n.condition, n.since)
                .into_iter()
                .find(|(_, e)| e.moved.is_none())
                .map(|(action, e)| (action.to_owned(), e.ended));
            match unmoved {
                Some((action, ended)) => self.held.push(HeldResolution {
                    condition: n.condition,
                    since: n.since,
                    lasted,
                    began: Some(now - lasted),
                    action,
                    ended,
                    until: now + RESOLUTION_WAITS_AT_MOST,
                }),
                None => kept.push(n),
            }
        }
        *notifications = kept;
    }

    /// Lets out the resolutions held whose run moved after their action ended, or that waited
    /// [`RESOLUTION_WAITS_AT_MOST`]: each says which.
    pub fn release_resolutions(
        &mut self,
        notifications: &mut Vec<Notification>,
        last_work: Option<f64>,
        now: f64,
    ) {
        let moved =
            |h: &HeldResolution| h.ended.zip(last_work).filter(|(ended, work)| work > ended);
        let (out, still): (Vec<HeldResolution>, Vec<HeldResolution>) =
            std::mem::take(&mut self.held)
                .into_iter()
                .partition(|h| moved(h).is_some() || now >= h.until);
        self.held = still;
        for h in out {
            let (line, until) = match moved(&h) {
                Some((ended, work)) => (
                    format!(
                        "the run moved again {} after `{}`",
                        seconds(work - ended),
                        h.action
                    ),
                    work,
                ),
                None => (
                    format!(
                        "the run has not moved in the {} after `{}`",
                        seconds(RESOLUTION_WAITS_AT_MOST),
                        h.action
                    ),
                    now,
                ),
            };
            // The subject's "lasted" counts to what the line says ended it, not to when the
            // condition stopped holding: an engine its action killed stops being hung long
            // before the run moves, and "lasted 2s" over "moved again 6 s after" reads false.
            let lasted = h
                .began
                .map_or(h.lasted, |began| (until - began).max(h.lasted));
            let mut condition = h.condition;
            condition.summary = format!("{}; {line}", condition.summary);
            condition.details = format!("{}\nAction: {line}.", condition.details);
            notifications.push(Notification {
                kind: Kind::Resolved { lasted },
                condition,
                since: h.since,
            });
        }
    }

    /// Forgets the episodes of alerts no longer firing, once their notifications were told.
    pub fn forget_gone(&mut self, firing: &[(Condition, f64)]) {
        let live: BTreeSet<String> = firing.iter().map(|(c, _)| c.key()).collect();
        self.episodes
            .retain(|key, _| key.split_once(' ').is_some_and(|(_, k)| live.contains(k)));
    }

    /// The episodes of this alert instance, as (action, episode).
    fn of<'a>(&'a self, condition: &Condition, since: f64) -> Vec<(&'a str, &'a Episode)> {
        let key = condition.key();
        self.episodes
            .iter()
            .filter(|(k, e)| e.since == since && k.split_once(' ').is_some_and(|(_, a)| a == key))
            .filter_map(|(k, e)| Some((k.split_once(' ')?.0, e)))
            .collect()
    }

    /// Adds what the actions did to the notifications of alerts they ran for: a reminder
    /// says "ran `x` (exit 0, 12 s)", a resolution "the run moved again 40 s after `x`", a
    /// page whose action starts now "running `x`".
    pub fn annotate(&self, notifications: &mut [Notification], now: f64) {
        for n in notifications {
            let lines: Vec<String> = self
                .of(&n.condition, n.since)
                .into_iter()
                .filter_map(|(action, e)| match (n.kind, e.ended, &e.said) {
                    (Kind::Resolved { .. }, Some(ended), _) => Some(format!(
                        "the run moved again {} after `{action}`",
                        seconds((e.moved.unwrap_or(now) - ended).max(0.0))
                    )),
                    (Kind::Firing | Kind::Reminder, _, Some(said)) => Some(said.clone()),
                    (Kind::Firing, None, None) => Some(format!("running `{action}`")),
                    _ => None,
                })
                .collect();
            for line in lines {
                n.condition.summary = format!("{}; {line}", n.condition.summary);
                n.condition.details = format!("{}\nAction: {line}.", n.condition.details);
            }
        }
    }

    /// Adds the actions' last lines to the firing alerts pushed to the Alertmanagers.
    pub fn annotate_firing(&self, firing: &mut [(Condition, f64)]) {
        for (condition, since) in firing {
            let lines: Vec<String> = self
                .of(condition, *since)
                .into_iter()
                .filter_map(|(_, e)| e.said.clone())
                .collect();
            for line in lines {
                condition.summary = format!("{}; {line}", condition.summary);
            }
        }
    }
}

/// A duration as the notifications say it: `12 s`, `3 min 20 s`.
pub fn seconds(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..60 => format!("{s} s"),
        _ if s.is_multiple_of(60) => format!("{} min", s / 60),
        _ => format!("{} min {} s", s / 60, s % 60),
    }
}

#[cfg(test)]
mod tests;

/// The runs the round starts: every action due for a firing alert it matches, at most one
/// run of each at once. `silenced` says whether a silence holds an alert; `tracked` are the
/// alerts firing or pending, which may hold back the ones they explain.
pub fn due(
    actions: &Actions,
    ledger: &mut Ledger,
    firing: &[(Condition, f64)],
    tracked: &[AlertName],
    silenced: impl Fn(&Condition) -> bool,
    facts: &Facts,
    now: f64,
) -> Vec<(Action, Condition, f64, u32)> {
    let mut out = Vec::new();
    for action in &actions.list {
        for (condition, since) in firing.iter().filter(|(c, _)| action.matches(c)) {
            let f = Firing {
                condition,
                since: *since,
                silenced: silenced(condition),
                inhibited: tracked.iter().any(|t| t.inhibits(condition.alert)),
            };
            match ledger.verdict(action, f, facts.finished, now) {
                Ok(()) => {
                    ledger.begin(&action.name, f);
                    let attempt = ledger.runs(&action.name, &condition.key());
                    out.push((action.clone(), condition.clone(), *since, attempt));
                }
                Err(held) => tracing::debug!(
                    action = %action.name,
                    alert = %condition.alert,
                    "the action does not run now: {held:?}"
                ),
            }
        }
    }
    out
}

impl Ledger {
    /// The runs of `action` in the current episode of `alert_key`.
    fn runs(&self, action: &str, alert_key: &str) -> u32 {
        self.episodes
            .get(&episode_key(action, alert_key))
            .map_or(0, |e| e.runs)
    }
}
