//! The limits, pure, with `now` given: runs per episode, the cooldown, silences, a finished
//! run, never twice at once; and what the notifications say.

use super::*;
use crate::sinks::alert::lifecycle::Kind;

pub(crate) fn action(name: &str, on: &[AlertName]) -> Action {
    Action {
        name: name.into(),
        on: on.to_vec(),
        cause: Vec::new(),
        command: vec!["/bin/true".into()],
        timeout: Duration::from_secs(60),
        max_runs: 1,
        cooldown: Duration::from_secs(600),
        silenced: false,
    }
}

fn hung() -> Condition {
    let mut c = Condition::holding(AlertName::ServerHung, None).caused(Cause::ServerHung);
    c.summary = "no tokens for 5m (server hung)".into();
    c
}

fn firing(c: &Condition, since: f64) -> Firing<'_> {
    Firing {
        condition: c,
        since,
        silenced: false,
        inhibited: false,
    }
}

#[test]
fn an_action_matches_its_alerts_and_its_cause() {
    let mut a = action("restart", &[AlertName::ServerHung, AlertName::Stalled]);
    assert!(a.matches(&hung()));
    assert!(!a.matches(&Condition::holding(AlertName::ServerDown, None)));
    a.cause = vec![Cause::ServerHung, Cause::ServerCrashed];
    assert!(a.matches(&hung()));
    let stalled = |cause: Cause, summary: &str| {
        let mut c = Condition::holding(AlertName::Stalled, Some("B1")).caused(cause);
        c.summary = summary.into();
        c
    };
    assert!(a.matches(&stalled(Cause::ServerCrashed, "no progress for 14m")));
    assert!(!a.matches(&stalled(
        Cause::ServerIdleClientWaiting,
        "no progress for 14m (server idle, client waiting)"
    )));
    // An alert that names no cause is not one an action for a cause runs for.
    assert!(!a.matches(&Condition::holding(AlertName::Stalled, Some("B1"))));
}

/// The cause is the condition's, not words of its summary: a summary reworded (or naming
/// another cause in passing) neither disarms an action nor arms one.
#[test]
fn an_action_matches_the_cause_not_the_summarys_words() {
    let mut a = action("restart", &[AlertName::Stalled]);
    a.cause = vec![Cause::ServerHung];
    let mut reworded = Condition::holding(AlertName::Stalled, Some("B1")).caused(Cause::ServerHung);
    reworded.summary = "no progress for 14m (the engine is wedged)".into();
    assert!(a.matches(&reworded));
    let mut said = Condition::holding(AlertName::Stalled, Some("B1")).caused(Cause::DriverIdle);
    said.summary = "no progress for 14m (server hung? no: driver idle)".into();
    assert!(!a.matches(&said));
}

#[test]
fn at_most_max_runs_per_episode_and_a_new_episode_starts_afresh() {
    let mut a = action("restart", &[AlertName::ServerHung]);
    a.max_runs = 2;
    a.cooldown = Duration::ZERO;
    let c = hung();
    let mut ledger = Ledger::default();
    for t in [100.0, 200.0] {
        assert_eq!(ledger.verdict(&a, firing(&c, 100.0), false, t), Ok(()));
        ledger.begin("restart", firing(&c, 100.0));
        assert_eq!(
            ledger.verdict(&a, firing(&c, 100.0), false, t),
            Err(Held::Running),
            "never twice at once"
        );
        ledger.end("restart", &c.key(), 100.0, "ran", t + 5.0);
    }
    assert_eq!(
        ledger.verdict(&a, firing(&c, 100.0), false, 300.0),
        Err(Held::Limit)
    );
    // The alert resolved and fired again: a new episode.
    assert_eq!(ledger.verdict(&a, firing(&c, 400.0), false, 400.0), Ok(()));
}

#[test]
fn the_cooldown_runs_from_the_last_end_whatever_the_alert() {
    let mut a = action("restart", &[AlertName::ServerHung, AlertName::ServerDown]);
    a.max_runs = 5;
    let (hung, down) = (hung(), Condition::holding(AlertName::ServerDown, None));
    let mut ledger = Ledger::default();
    ledger.begin("restart", firing(&hung, 100.0));
    ledger.end("restart", &hung.key(), 100.0, "ran", 160.0);
    assert_eq!(
        ledger.verdict(&a, firing(&down, 150.0), false, 460.0),
        Err(Held::Cooldown(300.0))
    );
    assert_eq!(
        ledger.verdict(&a, firing(&hung, 100.0), false, 759.0),
        Err(Held::Cooldown(1.0))
    );
    assert_eq!(
        ledger.verdict(&a, firing(&down, 150.0), false, 760.0),
        Ok(())
    );
}

#[test]
fn silenced_alerts_and_finished_runs_run_nothing() {
    let mut a = action("restart", &[AlertName::ServerHung]);
    let c = hung();
    let ledger = Ledger::default();
    let silenced = Firing {
        silenced: true,
        ..firing(&c, 100.0)
    };
    assert_eq!(
        ledger.verdict(&a, silenced, false, 100.0),
        Err(Held::Silenced)
    );
    a.silenced = true;
    assert_eq!(ledger.verdict(&a, silenced, false, 100.0), Ok(()));
    assert_eq!(
        ledger.verdict(&a, firing(&c, 100.0), true, 100.0),
        Err(Held::Finished)
    );
    let inhibited = Firing {
        inhibited: true,
        ..firing(&c, 100.0)
    };
    assert_eq!(
        ledger.verdict(&a, inhibited, false, 100.0),
        Err(Held::Inhibited)
    );
}

#[test]
fn a_restart_forgets_what_runs_but_not_the_limits() {
    let a = action("restart", &[AlertName::ServerHung]);
    let c = hung();
    let mut ledger = Ledger::default();
    ledger.begin("restart", firing(&c, 100.0));
    let saved = serde_json::to_string(&ledger).unwrap();
    let resumed: Ledger = serde_json::from_str(&saved).unwrap();
    assert_eq!(
        resumed.verdict(&a, firing(&c, 100.0), false, 5000.0),
        Err(Held::Limit)
    );
}

#[test]
fn notifications_say_what_the_action_did() {
    let c = hung();
    let mut ledger = Ledger::default();
    let note = |kind| Notification {
        kind,
        condition: c.clone(),
        since: 100.0,
    };
    ledger.begin("restart-sglang", firing(&c, 100.0));
    let mut page = [note(Kind::Firing)];
    ledger.annotate(&mut page, 100.0);
    assert_eq!(
        page[0].condition.summary,
        "no tokens for 5m (server hung); running `restart-sglang`"
    );
    ledger.end(
        "restart-sglang",
        &c.key(),
        100.0,
        "ran `restart-sglang` (exit 0, 12 s)",
        112.0,
    );
    let mut told = [note(Kind::Reminder), note(Kind::Resolved { lasted: 60.0 })];
    ledger.annotate(&mut told, 152.0);
    assert!(told[0]
        .condition
        .summary
        .ends_with("; ran `restart-sglang` (exit 0, 12 s)"));
    assert!(told[1]
        .condition
        .summary
        .ends_with("; the run moved again 40 s after `restart-sglang`"));
    assert!(told[1].condition.details.contains("Action: "));
    // Another episode's notifications say nothing of it.
    let mut other = [Notification {
        since: 900.0,
        ..note(Kind::Firing)
    }];
    ledger.annotate(&mut other, 900.0);
    assert_eq!(other[0].condition.summary, c.summary);
    ledger.forget_gone(&[]);
    let mut after = [note(Kind::Reminder)];
    ledger.annotate(&mut after, 999.0);
    assert_eq!(after[0].condition.summary, c.summary);
}

#[test]
fn durations_read_as_people_say_them() {
    assert_eq!(seconds(12.4), "12 s");
    assert_eq!(seconds(120.0), "2 min");
    assert_eq!(seconds(200.0), "3 min 20 s");
}

#[test]
fn a_run_that_ends_after_its_episode_says_nothing_of_the_next() {
    let c = hung();
    let mut ledger = Ledger::default();
    ledger.begin("restart", firing(&c, 100.0));
    // The alert resolved and fired again while the run went on.
    ledger.forget_gone(&[]);
    ledger.end(
        "restart",
        &c.key(),
        100.0,
        "ran `restart` (exit 0, 90 s)",
        190.0,
    );
    let mut page = [Notification {
        kind: Kind::Reminder,
        condition: c.clone(),
        since: 180.0,
    }];
    ledger.annotate(&mut page, 200.0);
    assert_eq!(page[0].condition.summary, c.summary);
}

/// An engine killed by its action is no longer hung at once; the run moves again only once a
/// new engine serves. The resolution waits for that, and says how long it took; one whose run
/// never moves is told after [`RESOLUTION_WAITS_AT_MOST`], saying so.
#[test]
fn a_resolution_waits_for_the_run_to_move_after_the_action() {
    let c = hung();
    let resolved = |at: f64| Notification {
        kind: Kind::Resolved { lasted: at - 100.0 },
        condition: c.clone(),
        since: 100.0,
    };
    let round = |ledger: &mut Ledger, mut told: Vec<Notification>, work: f64, now: f64| {
        ledger.note_work(Some(work));
        ledger.hold_resolutions(&mut told, now);
        ledger.annotate(&mut told, now);
        ledger.release_resolutions(&mut told, Some(work), now);
        ledger.forget_gone(&[]);
        told
    };
    let mut ledger = Ledger::default();
    ledger.begin("restart", firing(&c, 100.0));
    // Resolved while the action still runs (the engine it kills is down, not hung): held.
    assert!(round(&mut ledger, vec![resolved(105.0)], 90.0, 105.0).is_empty());
    ledger.end(
        "restart",
        &c.key(),
        100.0,
        "ran `restart` (exit 0, 8 s)",
        108.0,
    );
    // Kept across a restart of the sidecar, and still held while the run has not moved.
    let mut ledger: Ledger =
        serde_json::from_str(&serde_json::to_string(&ledger).unwrap()).unwrap();
    assert!(round(&mut ledger, Vec::new(), 90.0, 150.0).is_empty());
    // The run's first work after the action ended lets it out, saying when.
    let told = round(&mut ledger, Vec::new(), 168.0, 170.0);
    assert_eq!(told.len(), 1, "{told:?}");
    // It lasted until the run moved (168 s), as its line says, not until the condition
    // stopped holding while the action ran (105 s): the subject says what the body does.
    assert_eq!(told[0].kind, Kind::Resolved { lasted: 68.0 });
    assert_eq!(
        crate::sinks::alert::email::subject(&told, "node"),
        "[pulse] RESOLVED ServerHung on node, lasted 1m"
    );
    assert!(
        told[0]
            .condition
            .summary
            .ends_with("; the run moved again 1 min after `restart`"),
        "{}",
        told[0].condition.summary
    );
    assert!(round(&mut ledger, Vec::new(), 200.0, 200.0).is_empty());
    // Another episode whose run never moves is told at the limit, saying it has not.
    ledger.begin("restart", firing(&c, 1000.0));
    ledger.end(
        "restart",
        &c.key(),
        1000.0,
        "ran `restart` (exit 0, 8 s)",
        1008.0,
    );
    let again = Notification {
        since: 1000.0,
        ..resolved(1010.0)
    };
    assert!(round(&mut ledger, vec![again], 900.0, 1010.0).is_empty());
    let late = 1010.0 + RESOLUTION_WAITS_AT_MOST;
    assert!(round(&mut ledger, Vec::new(), 900.0, late - 1.0).is_empty());
    let told = round(&mut ledger, Vec::new(), 900.0, late);
    assert!(
        told.len() == 1
            && told[0]
                .condition
                .summary
                .ends_with("; the run has not moved in the 15 min after `restart`"),
        "{told:?}"
    );
    // Not moved: it lasts until it is told, not until its condition ended.
    assert_eq!(
        told[0].kind,
        Kind::Resolved {
            lasted: late - 100.0
        }
    );
}

/// A resolution held by a sidecar from before the hold kept when its episode began is told
/// with the duration it was held with.
#[test]
fn a_resolution_held_before_its_beginning_was_kept_says_what_it_held() {
    let c = hung();
    let mut ledger = Ledger::default();
    ledger.begin("restart", firing(&c, 100.0));
    ledger.end(
        "restart",
        &c.key(),
        100.0,
        "ran `restart` (exit 0, 8 s)",
        108.0,
    );
    let mut told = vec![Notification {
        kind: Kind::Resolved { lasted: 5.0 },
        condition: c.clone(),
        since: 100.0,
    }];
    ledger.hold_resolutions(&mut told, 105.0);
    let mut json = serde_json::to_value(&ledger).unwrap();
    json["held"][0].as_object_mut().unwrap().remove("began");
    let mut ledger: Ledger = serde_json::from_value(json).unwrap();
    ledger.release_resolutions(&mut told, Some(168.0), 170.0);
    assert_eq!(told[0].kind, Kind::Resolved { lasted: 5.0 });
}
