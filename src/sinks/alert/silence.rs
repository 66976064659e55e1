//! Silences ("maintenance, don't page me for 2 h"): an alert, a partition or both, muted until a
//! time. A silenced alert is still evaluated and shown (as silenced); only its notifications
//! are held back. When the silence ends on an alert still firing, it is notified then: a
//! silence postpones a page, it never loses one. Pure: every function takes `now`.

use super::lifecycle::{Kind, Notification};
use super::{AlertName, Condition};
use crate::lock::Locked;
use crate::model::Seconds;
use crate::state::StateDir;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Mutex;

/// Ended silences are listed this long, then forgotten.
const KEPT_AFTER_END: f64 = 24.0 * 3600.0;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Silence {
    pub id: String,
    /// `None` matches every alert.
    pub alert: Option<String>,
    /// `None` matches every partition (and alerts of no partition).
    pub partition: Option<String>,
    pub starts_at: Seconds,
    pub ends_at: Seconds,
    pub comment: String,
}

impl Silence {
    pub fn active(&self, now: Seconds) -> bool {
        self.starts_at <= now && now < self.ends_at
    }

    fn matches(&self, alert: &str, partition: Option<&str>) -> bool {
        self.alert.as_deref().is_none_or(|a| a == alert)
            && self
                .partition
                .as_deref()
                .is_none_or(|p| partition == Some(p))
    }
}

/// What `POST /api/v1/silences` takes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSilence {
    pub alert: Option<String>,
    pub partition: Option<String>,
    /// How long, as "2h" or "30m".
    #[serde(rename = "for")]
    pub for_: String,
    pub comment: String,
}

/// The longest silence: past this, disable the rule instead.
const LONGEST: f64 = 30.0 * 24.0 * 3600.0;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Silences {
    pub list: Vec<Silence>,
    next_id: u64,
    /// Alerts whose firing was held back by a silence: notified when it ends, if still firing.
    #[serde(default)]
    held: BTreeSet<String>,
}

impl Silences {
    /// Adds a silence from now; an error says what is wrong with the request.
    pub fn add(&mut self, new: NewSilence, now: Seconds) -> Result<Silence, String> {
        if let Some(alert) = &new.alert {
            if AlertName::parse(alert).is_none() {
                let known: Vec<&str> = AlertName::ALL.iter().map(|a| a.as_str()).collect();
                return Err(format!(
                    "alert {alert:?} is not one of {}",
                    known.join(", ")
                ));
            }
        }
        let seconds = humantime::parse_duration(new.for_.trim())
            .map_err(|e| format!("for {:?} is not a duration such as 2h: {e}", new.for_))?
            .as_secs_f64();
        if !(60.0..=LONGEST).contains(&seconds) {
            return Err(format!(
                "for {:?} is out of range: a silence lasts 1m to 30d",
                new.for_
            ));
        }
        if new.comment.trim().is_empty() {
            return Err("a silence needs a comment saying why".to_owned());
        }
        if new.comment.len() > 1000 {
            return Err("the comment is longer than 1000 bytes".to_owned());
        }
        self.prune(now);
        if self.list.len() >= 1000 {
            return Err("1000 silences are kept already; expire some first".to_owned());
        }
        self.next_id += 1;
        let silence = Silence {
            id: format!("s{}", self.next_id),
            alert: new.alert,
            partition: new.partition.filter(|p| !p.is_empty()),
            starts_at: now,
            ends_at: now + seconds,
            comment: new.comment.trim().to_owned(),
        };
        self.list.push(silence.clone());
        Ok(silence)
    }

    /// Ends a silence now; false if there is no such active silence.
    pub fn expire(&mut self, id: &str, now: Seconds) -> bool {
        match self.list.iter_mut().find(|s| s.id == id && s.active(now)) {
            Some(s) => {
                s.ends_at = now;
                true
            }
            None => false,
        }
    }

    pub fn silenced(&self, condition: &Condition, now: Seconds) -> bool {
        self.silences(
            condition.alert.as_str(),
            condition.partition.as_deref(),
            now,
        )
    }

    /// Whether an active silence covers this alert of this partition.
    pub fn silences(&self, alert: &str, partition: Option<&str>, now: Seconds) -> bool {
        self.list
            .iter()
            .any(|s| s.active(now) && s.matches(alert, partition))
    }

    fn prune(&mut self, now: Seconds) {
        self.list.retain(|s| now - s.ends_at < KEPT_AFTER_END);
    }

    /// Takes an evaluation's notifications and the alerts firing now; returns what may be
    /// notified. Firing and reminders of silenced alerts are held; a resolution of one held
    /// is dropped (nobody was told it fired); an alert held whose silence has ended and that
    /// still fires is notified now.
    pub fn mute(
        &mut self,
        notifications: Vec<Notification>,
        firing: &[(Condition, Seconds)],
        now: Seconds,
    ) -> Vec<Notification> {
        let mut out = Vec::new();
        for n in notifications {
            let key = n.condition.key();
            let silenced = self.silenced(&n.condition, now);
            match n.kind {
                Kind::Resolved { .. } if self.held.remove(&key) => {}
                Kind::Firing | Kind::Reminder if silenced => {
                    self.held.insert(key);
                }
                _ if silenced => {}
                _ => out.push(n),
            }
        }
        for (condition, since) in firing {
            let key = condition.key();
            if self.held.contains(&key) && !self.silenced(condition, now) {
                self.held.remove(&key);
                out.push(Notification {
                    kind: Kind::Firing,
                    condition: condition.clone(),
                    since: *since,
                });
            }
        }
        // Held alerts that are no longer tracked at all are forgotten.
        let tracked: BTreeSet<String> = firing.iter().map(|(c, _)| c.key()).collect();
        self.held.retain(|k| tracked.contains(k));
        out
    }
}

/// The silences, shared by the HTTP API that changes them and the alert engine that obeys
/// them, saved to the state directory after every change.
pub struct Store {
    silences: Mutex<Silences>,
    state: Option<StateDir>,
}

const SAVED: &str = "silences.json";

impl Store {
    pub fn open(state: Option<&StateDir>) -> Store {
        let silences: Silences = state.and_then(|s| s.load_json(SAVED)).unwrap_or_default();
        Store {
            silences: Mutex::new(silences),
            state: state.cloned(),
        }
    }

    /// Runs `change` on the silences, and saves them if it changed anything.
    pub fn with<R>(&self, change: impl FnOnce(&mut Silences) -> R) -> R {
        let mut silences = self.silences.locked();
        let before = silences.clone();
        let out = change(&mut silences);
        if *silences != before {
            if let Some(state) = &self.state {
                if let Err(e) = state.save_json(SAVED, &*silences) {
                    let path = state.path(SAVED);
                    tracing::warn!(
                        path = %path.display(),
                        "cannot save the silences to {}: {e}",
                        path.display()
                    );
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(alert: AlertName, partition: Option<&str>) -> Condition {
        Condition::holding(alert, partition)
    }

    fn new(alert: Option<&str>, partition: Option<&str>, for_: &str) -> NewSilence {
        NewSilence {
            alert: alert.map(str::to_owned),
            partition: partition.map(str::to_owned),
            for_: for_.into(),
            comment: "maintenance".into(),
        }
    }

    fn firing(c: &Condition) -> Notification {
        Notification {
            kind: Kind::Firing,
            condition: c.clone(),
            since: 0.0,
        }
    }

    #[test]
    fn a_silence_matches_its_alert_and_partition_until_it_ends() {
        let mut s = Silences::default();
        s.add(new(Some("Stalled"), Some("B1"), "2h"), 100.0)
            .unwrap();
        let b1 = cond(AlertName::Stalled, Some("B1"));
        assert!(s.silenced(&b1, 100.0));
        assert!(s.silenced(&b1, 7299.0));
        assert!(!s.silenced(&b1, 7300.0));
        assert!(!s.silenced(&cond(AlertName::Stalled, Some("B2")), 200.0));
        assert!(!s.silenced(&cond(AlertName::GpusIdle, Some("B1")), 200.0));
        s.add(new(None, None, "1h"), 100.0).unwrap();
        assert!(s.silenced(&cond(AlertName::GpusIdle, None), 200.0));
        assert!(s.expire("s2", 300.0));
        assert!(!s.expire("s2", 301.0), "already ended");
        assert!(!s.silenced(&cond(AlertName::GpusIdle, None), 300.0));
    }

    #[test]
    fn bad_silences_say_why() {
        let mut s = Silences::default();
        assert!(s
            .add(new(Some("Stall"), None, "2h"), 0.0)
            .unwrap_err()
            .contains("not one of"));
        assert!(s.add(new(None, None, "forever"), 0.0).is_err());
        assert!(s
            .add(new(None, None, "10s"), 0.0)
            .unwrap_err()
            .contains("1m to 30d"));
        assert!(s.add(new(None, None, "31d"), 0.0).is_err());
        let mut blank = new(None, None, "1h");
        blank.comment = "  ".into();
        assert!(s.add(blank, 0.0).unwrap_err().contains("comment"));
        assert!(s.list.is_empty());
    }

    #[test]
    fn a_firing_held_by_a_silence_is_notified_when_it_ends() {
        let mut s = Silences::default();
        s.add(new(Some("Stalled"), None, "1h"), 0.0).unwrap();
        let c = cond(AlertName::Stalled, Some("B1"));
        let now_firing = [(c.clone(), 10.0)];
        // Fires during the silence: held.
        assert!(s.mute(vec![firing(&c)], &now_firing, 10.0).is_empty());
        assert!(s.mute(vec![], &now_firing, 1000.0).is_empty());
        // The silence ends, the alert still fires: notified then, once.
        let out = s.mute(vec![], &now_firing, 3600.0);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].kind, Kind::Firing);
        assert_eq!(out[0].since, 10.0);
        assert!(s.mute(vec![], &now_firing, 3700.0).is_empty());
        // Not silenced: passes.
        let other = cond(AlertName::GpusIdle, None);
        assert_eq!(s.mute(vec![firing(&other)], &[], 3700.0).len(), 1);
    }

    #[test]
    fn a_held_alert_that_resolves_in_the_silence_is_never_notified() {
        let mut s = Silences::default();
        s.add(new(None, None, "1h"), 0.0).unwrap();
        let c = cond(AlertName::Stalled, None);
        assert!(s
            .mute(vec![firing(&c)], &[(c.clone(), 5.0)], 5.0)
            .is_empty());
        let resolved = Notification {
            kind: Kind::Resolved { lasted: 10.0 },
            condition: c.clone(),
            since: 5.0,
        };
        assert!(s.mute(vec![resolved], &[], 15.0).is_empty());
        // After the silence there is nothing left to notify.
        assert!(s.mute(vec![], &[], 4000.0).is_empty());
    }

    #[test]
    fn a_resolution_after_a_notified_firing_passes_once_the_silence_ends() {
        let mut s = Silences::default();
        let c = cond(AlertName::Stalled, None);
        // Notified before any silence.
        assert_eq!(s.mute(vec![firing(&c)], &[(c.clone(), 0.0)], 0.0).len(), 1);
        s.add(new(None, None, "1h"), 10.0).unwrap();
        let resolved = Notification {
            kind: Kind::Resolved { lasted: 100.0 },
            condition: c,
            since: 0.0,
        };
        // Resolved during the silence: held back like every notification of it.
        assert!(s.mute(vec![resolved.clone()], &[], 100.0).is_empty());
        // Outside a silence a resolution passes.
        assert_eq!(s.mute(vec![resolved], &[], 4000.0).len(), 1);
    }
}
