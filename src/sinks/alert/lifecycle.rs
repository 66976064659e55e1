//! Conditions over time → notifications, as Alertmanager does it: pending until the rule's
//! `for` has passed, then firing (one email), reminders while firing, one resolved email that
//! says how long it lasted. `ProcessExited` and `ServerDown` inhibit `Stalled` and `GpusIdle`.
//! Notices are sent once. Pure: the caller passes the conditions and `now`, and persists
//! the whole state (it is serializable) so a restart neither repeats nor forgets.

use super::{AlertName, Condition};
use crate::model::Seconds;
use crate::rules::Rules;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Lifecycle {
    alerts: BTreeMap<String, Tracked>,
    notices_sent: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Tracked {
    condition: Condition,
    /// When the condition was first seen to hold (without interruption).
    since: Seconds,
    /// When its episode began: its first evidence, at or before `since`.
    #[serde(default)]
    began: Option<Seconds>,
    firing_since: Option<Seconds>,
    last_notified: Option<Seconds>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Firing,
    Reminder,
    Resolved { lasted: f64 },
    Notice,
}

impl Kind {
    pub fn word(self) -> &'static str {
        match self {
            Kind::Firing => "FIRING",
            Kind::Reminder => "STILL FIRING",
            Kind::Resolved { .. } => "RESOLVED",
            Kind::Notice => "NOTICE",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub kind: Kind,
    pub condition: Condition,
    /// When the alert began firing (or the condition began, for notices).
    pub since: Seconds,
}

/// The state of one alert instance, for `pulse_alert_firing`.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertStatus {
    pub alert: AlertName,
    pub partition: Option<String>,
    pub firing: bool,
    pub summary: String,
}

fn rearms(key: &str) -> bool {
    let alert = key.split('/').next().unwrap_or(key);
    AlertName::parse(alert).is_some_and(AlertName::rearms)
}

impl Lifecycle {
    /// Forgets which notices were told: a new run tells its own (`RunFinished` once more).
    pub fn forget_notices(&mut self) {
        self.notices_sent.clear();
    }

    /// Takes this evaluation's conditions; returns what to notify, all of which belong in one
    /// email. `repeat` is the reminder interval in seconds.
    pub fn step(
        &mut self,
        conditions: Vec<Condition>,
        rules: &Rules,
        repeat: f64,
        now: Seconds,
    ) -> Vec<Notification> {
        let seen = self.track(conditions, rules, now);
        let mut out = self.resolve_gone(&seen, now);
        out.extend(self.due(repeat, now));
        out.sort_by_key(|n| match n.kind {
            Kind::Firing => 0,
            Kind::Reminder => 1,
            Kind::Resolved { .. } => 2,
            Kind::Notice => 3,
        });
        out
    }

    /// Takes this evaluation's conditions into the tracked alerts, each firing once its `for`
    /// has run; returns their keys.
    fn track(
        &mut self,
        conditions: Vec<Condition>,
        rules: &Rules,
        now: Seconds,
    ) -> BTreeSet<String> {
        // A notice that tells of one episode (a pass's duplicates) may be told again once its
        // condition went away and came back.
        let present: BTreeSet<String> = conditions.iter().map(Condition::key).collect();
        self.notices_sent
            .retain(|key| present.contains(key) || !rearms(key));
        let mut seen = BTreeSet::new();
        for condition in conditions {
            let key = condition.key();
            if condition.alert.is_notice() && self.notices_sent.contains(&key) {
                continue;
            }
            let for_seconds = rules
                .get(condition.alert)
                .for_seconds
                .min(condition.wait_at_most.unwrap_or(f64::INFINITY));
            let tracked = self.alerts.entry(key.clone()).or_insert(Tracked {
                condition: condition.clone(),
                since: now,
                began: Some(condition.began_at.map_or(now, |b| b.min(now))),
                firing_since: None,
                last_notified: None,
            });
            tracked.condition = condition;
            if tracked.firing_since.is_none() && now - tracked.since >= for_seconds {
                tracked.firing_since = Some(now);
            }
            seen.insert(key);
        }
        seen
    }

    /// The tracked alerts whose condition is gone: resolved if anyone was told it fired;
    /// otherwise forgotten quietly.
    fn resolve_gone(&mut self, seen: &BTreeSet<String>, now: Seconds) -> Vec<Notification> {
        let gone: Vec<String> = self
            .alerts
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        let mut out = Vec::new();
        for key in gone {
            let t = self.alerts.remove(&key).expect("listed above");
            if let (Some(firing_since), Some(_)) = (t.firing_since, t.last_notified) {
                // The incident lasted from its first evidence (the first failed check, a
                // stall's last work), not from the page its `for` or threshold delayed.
                out.push(Notification {
                    kind: Kind::Resolved {
                        lasted: now - t.began.unwrap_or(t.since),
                    },
                    condition: t.condition,
                    since: firing_since,
                });
            }
        }
        out
    }

    /// What the firing alerts owe now: a notice once, a page when it begins firing, a
    /// reminder every `repeat` seconds.
    fn due(&mut self, repeat: f64, now: Seconds) -> Vec<Notification> {
        // An alert holds back the ones it explains while its condition holds, its `for`
        // still running included: with equal thresholds the cause's page is the only one.
        let inhibitors: Vec<AlertName> = self.alerts.values().map(|t| t.condition.alert).collect();
        let mut out = Vec::new();
        let mut notices = Vec::new();
        for (key, t) in &mut self.alerts {
            let Some(firing_since) = t.firing_since else {
                continue;
            };
            let alert = t.condition.alert;
            if alert.is_notice() {
                notices.push(key.clone());
                out.push(Notification {
                    kind: Kind::Notice,
                    condition: t.condition.clone(),
                    since: t.since,
                });
                continue;
            }
            if inhibitors.iter().any(|i| i.inhibits(alert)) {
                continue;
            }
            let kind = match t.last_notified {
                None => Kind::Firing,
                Some(last) if now - last >= repeat => Kind::Reminder,
                Some(_) => continue,
            };
            t.last_notified = Some(now);
            out.push(Notification {
                kind,
                condition: t.condition.clone(),
                since: firing_since,
            });
        }
        for key in notices {
            self.alerts.remove(&key);
            self.notices_sent.insert(key);
        }
        out
    }

    /// The alerts firing now (inhibited ones included: a receiver such as Alertmanager does its
    /// own inhibiting), with when each began.
    pub fn firing(&self) -> Vec<(Condition, Seconds)> {
        self.alerts
            .values()
            .filter(|t| !t.condition.alert.is_notice())
            .filter_map(|t| Some((t.condition.clone(), t.firing_since?)))
            .collect()
    }

    /// Every alert instance being tracked, pending or firing.
    pub fn statuses(&self) -> Vec<AlertStatus> {
        self.alerts
            .values()
            .filter(|t| !t.condition.alert.is_notice())
            .map(|t| AlertStatus {
                alert: t.condition.alert,
                partition: t.condition.partition.clone(),
                firing: t.firing_since.is_some(),
                summary: t.condition.summary.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(alert: AlertName, partition: Option<&str>) -> Condition {
        Condition::holding(alert, partition)
    }

    fn kinds(n: &[Notification]) -> Vec<(Kind, AlertName)> {
        n.iter().map(|n| (n.kind, n.condition.alert)).collect()
    }

    const HOUR: f64 = 3600.0;

    /// The default rules, with `alert` firing as soon as it holds.
    fn at_once(alert: AlertName) -> Rules {
        let mut rules = Rules::default();
        rules.0.get_mut(&alert).unwrap().for_seconds = 0.0;
        rules
    }

    #[test]
    fn pending_firing_reminder_resolved() {
        let rules = Rules::default(); // ServerDown: for 2m
        let mut l = Lifecycle::default();
        let down = || vec![cond(AlertName::ServerDown, None)];
        assert!(l.step(down(), &rules, HOUR, 0.0).is_empty(), "pending");
        assert!(!l.statuses()[0].firing);
        assert!(l.step(down(), &rules, HOUR, 119.0).is_empty());
        assert_eq!(
            kinds(&l.step(down(), &rules, HOUR, 120.0)),
            [(Kind::Firing, AlertName::ServerDown)]
        );
        assert!(l.statuses()[0].firing);
        assert!(l.step(down(), &rules, HOUR, 130.0).is_empty(), "told once");
        assert_eq!(
            kinds(&l.step(down(), &rules, HOUR, 120.0 + HOUR)),
            [(Kind::Reminder, AlertName::ServerDown)]
        );
        let resolved = l.step(vec![], &rules, HOUR, 1000.0 + HOUR);
        // From the first failed check, not from the page.
        assert_eq!(
            resolved[0].kind,
            Kind::Resolved {
                lasted: 1000.0 + HOUR
            }
        );
        assert!(l.statuses().is_empty());
        assert!(l.step(vec![], &rules, HOUR, 2000.0 + HOUR).is_empty());
    }

    /// A stall held from its last evidence: FIRING says "no progress for 21s" at 21 s, and the
    /// RESOLVED 11 s later says it lasted 32 s, not the 11 s since the page.
    #[test]
    fn resolved_counts_the_whole_episode_as_firing_did() {
        let rules = Rules::default();
        let mut l = Lifecycle::default();
        let stalled = || vec![cond(AlertName::Stalled, Some("B1")).began(1000.0)];
        let fired = l.step(stalled(), &rules, HOUR, 1021.0);
        assert_eq!(kinds(&fired), [(Kind::Firing, AlertName::Stalled)]);
        let resolved = l.step(vec![], &rules, HOUR, 1032.0);
        assert_eq!(resolved[0].kind, Kind::Resolved { lasted: 32.0 });
    }

    /// RunLate against a 3-minute job's end: its 15-minute `for` would page after the end; a
    /// quarter of the time left pages it 36 s after it first held, 144 s before the end.
    #[test]
    fn a_condition_near_its_deadline_waits_less_than_its_for() {
        let rules = Rules::default();
        let end = 180.0;
        let late =
            |now: f64| vec![cond(AlertName::RunLate, None).waiting_at_most((end - now) * 0.25)];
        let mut l = Lifecycle::default();
        let mut fired = None;
        for step in 0..36 {
            let now = f64::from(step) * 5.0;
            if !l.step(late(now), &rules, HOUR, now).is_empty() {
                fired = Some(now);
                break;
            }
        }
        assert_eq!(fired, Some(40.0), "the first look after 36 s");
        // Without a bound, the rule's own `for` holds.
        let mut l = Lifecycle::default();
        let plain = || vec![cond(AlertName::RunLate, None)];
        assert!(l.step(plain(), &rules, HOUR, 0.0).is_empty());
        assert!(l.step(plain(), &rules, HOUR, 899.0).is_empty());
        assert_eq!(l.step(plain(), &rules, HOUR, 900.0).len(), 1);
    }

    #[test]
    fn a_blip_shorter_than_for_is_never_told() {
        let rules = Rules::default();
        let mut l = Lifecycle::default();
        l.step(vec![cond(AlertName::ServerDown, None)], &rules, HOUR, 0.0);
        assert!(l.step(vec![], &rules, HOUR, 60.0).is_empty());
        assert!(
            l.step(vec![cond(AlertName::ServerDown, None)], &rules, HOUR, 70.0)
                .is_empty(),
            "pending starts again"
        );
        assert!(l
            .step(vec![cond(AlertName::ServerDown, None)], &rules, HOUR, 180.0)
            .is_empty());
        assert_eq!(
            l.step(vec![cond(AlertName::ServerDown, None)], &rules, HOUR, 190.0)
                .len(),
            1
        );
    }

    #[test]
    fn alerts_of_one_evaluation_come_together() {
        let rules = at_once(AlertName::LogOutputMismatch);
        let mut l = Lifecycle::default();
        let both = vec![
            cond(AlertName::Stalled, Some("A")),
            cond(AlertName::LogOutputMismatch, Some("A")),
        ];
        let n = l.step(both, &rules, HOUR, 0.0);
        assert_eq!(n.len(), 2);
        assert!(n.iter().all(|n| n.kind == Kind::Firing));
    }

    #[test]
    fn an_inhibitor_holds_back_while_its_for_runs() {
        // Equal thresholds: Stalled would fire at once, ServerDown after its 2 minutes.
        let rules = at_once(AlertName::Stalled);
        let mut l = Lifecycle::default();
        let both = || {
            vec![
                cond(AlertName::Stalled, Some("A")),
                cond(AlertName::ServerDown, None),
            ]
        };
        assert!(
            l.step(both(), &rules, HOUR, 0.0).is_empty(),
            "ServerDown pending"
        );
        assert!(l.step(both(), &rules, HOUR, 60.0).is_empty());
        assert_eq!(
            kinds(&l.step(both(), &rules, HOUR, 120.0)),
            [(Kind::Firing, AlertName::ServerDown)],
            "one page for one incident"
        );
    }

    #[test]
    fn process_exited_inhibits_stalled() {
        let rules = at_once(AlertName::ProcessExited);
        let mut l = Lifecycle::default();
        let both = || {
            vec![
                cond(AlertName::Stalled, Some("A")),
                cond(AlertName::ProcessExited, None),
            ]
        };
        assert_eq!(
            kinds(&l.step(both(), &rules, HOUR, 0.0)),
            [(Kind::Firing, AlertName::ProcessExited)]
        );
        assert!(l.step(both(), &rules, HOUR, 10.0).is_empty());
        // The process is back but the partition is still stalled: now the stall is news.
        let n = l.step(
            vec![cond(AlertName::Stalled, Some("A"))],
            &rules,
            HOUR,
            20.0,
        );
        assert_eq!(
            kinds(&n),
            [
                (Kind::Firing, AlertName::Stalled),
                (Kind::Resolved { lasted: 20.0 }, AlertName::ProcessExited)
            ]
        );
    }

    #[test]
    fn an_inhibited_alert_that_ends_is_never_resolved() {
        let rules = at_once(AlertName::ProcessExited);
        let mut l = Lifecycle::default();
        l.step(
            vec![
                cond(AlertName::Stalled, Some("A")),
                cond(AlertName::ProcessExited, None),
            ],
            &rules,
            HOUR,
            0.0,
        );
        let n = l.step(
            vec![cond(AlertName::ProcessExited, None)],
            &rules,
            HOUR,
            10.0,
        );
        assert!(n.is_empty(), "{n:?}");
    }

    #[test]
    fn notices_are_sent_once() {
        let rules = Rules::default(); // PartitionFinished: for 0
        let mut l = Lifecycle::default();
        let done = || vec![cond(AlertName::PartitionFinished, Some("A"))];
        assert_eq!(
            kinds(&l.step(done(), &rules, HOUR, 0.0)),
            [(Kind::Notice, AlertName::PartitionFinished)]
        );
        assert!(l.step(done(), &rules, HOUR, 10.0).is_empty());
        assert!(
            l.step(vec![], &rules, HOUR, 20.0).is_empty(),
            "notices never resolve"
        );
        assert!(l.step(done(), &rules, HOUR, 30.0).is_empty());
    }

    #[test]
    fn state_survives_a_round_trip() {
        let rules = Rules::default();
        let mut l = Lifecycle::default();
        l.step(vec![cond(AlertName::Stalled, Some("A"))], &rules, HOUR, 0.0);
        let mut back: Lifecycle =
            serde_json::from_str(&serde_json::to_string(&l).unwrap()).unwrap();
        assert_eq!(back, l);
        assert!(
            back.step(vec![cond(AlertName::Stalled, Some("A"))], &rules, HOUR, 5.0)
                .is_empty(),
            "no second email after a restart"
        );
    }
}
