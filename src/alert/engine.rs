//! The alert loop: every `alert_interval`, evaluate the rules on the model, step the
//! lifecycle, render what it says into one email, queue it, and deliver what is due.
//!
//! The lifecycle, the rule history and the outbox are saved atomically to the state directory
//! (`alerts.json`) after every change and before any send: a restart resumes them, so a
//! notification is neither lost nor sent twice. (A crash between an SMTP server's "250 OK" and
//! the save that follows it would send that one message again: SMTP has no way to ask.)

use super::delivery::{self, Outcome, Outgoing, Target, Transport};
use super::email::{self, Context};
use super::lifecycle::Lifecycle;
use super::rules::{self, History, Rules};
use crate::clock;
use crate::model::{AlertState, Run};
use crate::state::StateDir;
use crate::status::Status;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SAVED: &str = "alerts.json";
/// The longest alerts wait for every input's first read.
const FIRST_READ_LIMIT: Duration = Duration::from_secs(120);

/// Where emails go: a transport target and the addresses.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub target: Target,
    pub from: String,
    pub to: Vec<String>,
    /// The most one send may take, connect to final reply.
    pub timeout: Duration,
    /// The wait before the first retry; it doubles up to 60 times this.
    pub retry_backoff: Duration,
}

#[derive(Debug, Clone)]
pub struct AlertConfig {
    pub rules: Rules,
    pub interval: Duration,
    pub repeat: Duration,
    /// `None`: notifications are only logged.
    pub delivery: Option<Delivery>,
    pub context: Context,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Saved {
    lifecycle: Lifecycle,
    history: History,
    outbox: Vec<Outgoing>,
    next_id: u64,
}

pub struct Engine {
    config: AlertConfig,
    run: Arc<Mutex<Run>>,
    state: Option<StateDir>,
    saved: Saved,
    transport: Option<Transport>,
}

impl Engine {
    /// Resumes the saved alert state, if a state directory holds one.
    pub fn new(config: AlertConfig, run: Arc<Mutex<Run>>, state: Option<&StateDir>) -> Engine {
        let saved: Saved = state.and_then(|s| s.load_json(SAVED)).unwrap_or_default();
        if !saved.outbox.is_empty() {
            tracing::info!(
                "{} undelivered notification(s) from before the restart",
                saved.outbox.len()
            );
        }
        seed_notification_counters(&config, &mut run.lock().unwrap_or_else(|e| e.into_inner()));
        Engine {
            config,
            run,
            state: state.cloned(),
            saved,
            transport: None,
        }
    }

    /// Evaluates and delivers every interval, forever; abort the task to stop it. Nothing is
    /// evaluated while `unread` counts inputs still on their first read: a half-read backlog
    /// (one log read, the next not yet) would raise alerts that the rest disproves, or split
    /// alerts of one moment across emails. A first read that never ends (a hung NFS mount)
    /// must not silence alerting, though: after `FIRST_READ_LIMIT` it goes ahead, and says so.
    pub async fn run_every(mut self, unread: Arc<AtomicUsize>) {
        if let Some(delivery) = &self.config.delivery {
            match Transport::build(&delivery.target, delivery.timeout) {
                Ok(t) => self.transport = Some(t),
                Err(e) => tracing::error!("alert emails cannot be sent: {e}"),
            }
        }
        let mut ticks = tokio::time::interval(self.config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // tokio's clock, not std's: the tests pause it.
        let started = tokio::time::Instant::now();
        let mut waiting = true;
        loop {
            ticks.tick().await;
            if waiting && unread.load(Ordering::Acquire) > 0 {
                if started.elapsed() < FIRST_READ_LIMIT {
                    continue;
                }
                tracing::warn!(
                    "some inputs have not been read once after {FIRST_READ_LIMIT:?}; judging alerts on what has been read"
                );
            }
            waiting = false;
            self.evaluate(clock::now());
            self.deliver().await;
        }
    }

    fn evaluate(&mut self, now: f64) {
        let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
        self.saved.history.record(&run, now);
        let conditions = rules::evaluate(&run, &self.config.rules, &self.saved.history, now);
        let notifications = self.saved.lifecycle.step(
            conditions,
            &self.config.rules,
            self.config.repeat.as_secs_f64(),
            now,
        );
        run.alerts = self
            .saved
            .lifecycle
            .statuses()
            .into_iter()
            .map(|s| AlertState {
                alert: s.alert.to_string(),
                partition: s.partition,
                firing: s.firing,
                summary: s.summary,
            })
            .collect();
        if notifications.is_empty() {
            drop(run);
            self.save();
            return;
        }
        let status = Status::from_run(&run, &self.config.context.host, now);
        let email = email::render(&notifications, &status, &self.config.context, now);
        let alerts: Vec<String> = notifications
            .iter()
            .map(|n| n.condition.alert.to_string())
            .collect();
        tracing::warn!("{}", email.subject);
        let Some(delivery) = &self.config.delivery else {
            for alert in &alerts {
                count(&mut run, alert, "not_configured");
            }
            drop(run);
            self.save();
            return;
        };
        drop(run);
        self.saved.next_id += 1;
        let id = format!("pulse-{}-{}", (now * 1000.0) as u64, self.saved.next_id);
        match delivery::compose(
            &email,
            &delivery.from,
            &delivery.to,
            alerts,
            id,
            &self.config.context.host,
        ) {
            Ok(message) => self.saved.outbox.push(message),
            Err(e) => tracing::error!("cannot compose the alert email: {e}"),
        }
        // Saved before any attempt: from here on a restart sends it, and only once.
        self.save();
    }

    async fn deliver(&mut self) {
        let (Some(transport), Some(delivery)) = (&self.transport, &self.config.delivery) else {
            return;
        };
        let now = clock::now();
        let mut i = 0;
        while i < self.saved.outbox.len() {
            if self.saved.outbox[i].next_attempt_at > now {
                i += 1;
                continue;
            }
            let outcome =
                delivery::deliver(transport, &self.saved.outbox[i], delivery.timeout).await;
            let message = &mut self.saved.outbox[i];
            let result = match &outcome {
                Outcome::Sent => {
                    tracing::info!("sent \"{}\" to {}", message.subject, message.to.join(", "));
                    "sent"
                }
                Outcome::Retry(e) => {
                    message.attempts += 1;
                    let wait =
                        delivery::backoff(message.attempts, delivery.retry_backoff.as_secs_f64());
                    message.next_attempt_at = now + wait;
                    tracing::warn!(
                        "sending \"{}\" failed (attempt {}): {e}; trying again in {wait:.0}s",
                        message.subject,
                        message.attempts
                    );
                    "failed"
                }
                Outcome::Rejected(e) => {
                    tracing::error!(
                        "the SMTP server rejected \"{}\" for good, dropping it: {e}",
                        message.subject
                    );
                    "rejected"
                }
            };
            {
                let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
                for alert in &message.alerts {
                    count(&mut run, alert, result);
                }
            }
            if matches!(outcome, Outcome::Retry(_)) {
                i += 1;
            } else {
                self.saved.outbox.remove(i);
            }
            self.save();
        }
    }

    fn save(&self) {
        let Some(state) = &self.state else {
            return;
        };
        if let Err(e) = state.save_json(SAVED, &self.saved) {
            tracing::warn!(
                "cannot save the alert state {}: {e}",
                state.path(SAVED).display()
            );
        }
    }
}

/// Every outcome an enabled rule can have starts at 0: `increase()` over a counter that
/// appears at 1 misses the first notification, so an alert on failed emails would too.
fn seed_notification_counters(config: &AlertConfig, run: &mut Run) {
    let results: &[&str] = match config.delivery {
        Some(_) => &["sent", "failed", "rejected"],
        None => &["not_configured"],
    };
    for (alert, rule) in &config.rules.0 {
        if !rule.enabled {
            continue;
        }
        for result in results {
            run.notifications
                .entry((alert.to_string(), (*result).to_owned()))
                .or_default();
        }
    }
}

fn count(run: &mut Run, alert: &str, result: &str) {
    *run.notifications
        .entry((alert.to_owned(), result.to_owned()))
        .or_default() += 1;
}

/// `test-email`: one message through the configured transport, now, without the outbox.
pub async fn send_test(delivery: &Delivery, context: &Context) -> Result<(), String> {
    let transport = Transport::build(&delivery.target, delivery.timeout)?;
    let now = clock::now();
    let email = email::Email {
        subject: format!("[pulse] test email from {}", context.host),
        text: format!("This is a test email from pipeline-pulse on {}. Alert emails will arrive like this one.\n", context.host),
        html: format!("<p>This is a test email from pipeline-pulse on {}. Alert emails will arrive like this one.</p>", context.host),
    };
    let id = format!("pulse-test-{}", (now * 1000.0) as u64);
    let message = delivery::compose(
        &email,
        &delivery.from,
        &delivery.to,
        vec![],
        id,
        &context.host,
    )?;
    match delivery::deliver(&transport, &message, delivery.timeout).await {
        Outcome::Sent => Ok(()),
        Outcome::Retry(e) | Outcome::Rejected(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::AlertName;
    use crate::parse::{Parser, RunInference};

    fn config(delivery: Option<Delivery>) -> AlertConfig {
        let mut rules = Rules::default();
        rules.0.get_mut(&AlertName::GpuMissing).unwrap().enabled = false;
        AlertConfig {
            rules,
            interval: Duration::from_secs(15),
            repeat: Duration::from_secs(3600),
            delivery,
            context: Context {
                host: "node".into(),
                dashboard_url: None,
                status_url: None,
            },
        }
    }

    fn outcomes(run: &Run, alert: &str) -> Vec<(String, u64)> {
        run.notifications
            .iter()
            .filter(|((a, _), _)| a == alert)
            .map(|((_, result), n)| (result.clone(), *n))
            .collect()
    }

    /// A run whose only partition last made progress an hour ago: `Stalled` holds.
    fn stalled_run() -> Arc<Mutex<Run>> {
        let mut run = Run::new(&["log".into()]);
        let mut parser = Parser::RunInference(RunInference);
        let then = clock::now() - 3600.0;
        for line in [
            "Processing: A",
            "A: 1000 prompts",
            "  100/1000 (0 err) 1.0 req/s",
        ] {
            run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), then);
        }
        Arc::new(Mutex::new(run))
    }

    fn firing(run: &Mutex<Run>) -> Vec<String> {
        let run = run.lock().unwrap();
        run.alerts.iter().map(|a| a.alert.clone()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn alerts_wait_for_every_first_read() {
        let run = stalled_run();
        let unread = Arc::new(AtomicUsize::new(2));
        let engine =
            tokio::spawn(Engine::new(config(None), run.clone(), None).run_every(unread.clone()));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            firing(&run).is_empty(),
            "judged before the inputs were read"
        );
        unread.fetch_sub(2, Ordering::AcqRel);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(firing(&run), ["Stalled"]);
        engine.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_read_that_never_ends_does_not_silence_alerts() {
        let run = stalled_run();
        let unread = Arc::new(AtomicUsize::new(1));
        let engine = tokio::spawn(Engine::new(config(None), run.clone(), None).run_every(unread));
        tokio::time::sleep(FIRST_READ_LIMIT - Duration::from_secs(20)).await;
        assert!(firing(&run).is_empty());
        tokio::time::sleep(Duration::from_secs(40)).await;
        assert_eq!(firing(&run), ["Stalled"]);
        engine.abort();
    }

    #[test]
    fn counters_of_enabled_rules_start_at_zero() {
        let mut run = Run::default();
        seed_notification_counters(&config(None), &mut run);
        assert_eq!(
            outcomes(&run, "Stalled"),
            [("not_configured".to_owned(), 0)]
        );
        assert!(outcomes(&run, "GpuMissing").is_empty(), "disabled");
        assert_eq!(outcomes(&run, "RunFinished").len(), 1);
    }

    #[test]
    fn with_email_every_delivery_outcome_starts_at_zero() {
        let delivery = Delivery {
            target: Target::Files("/tmp".into()),
            from: "pulse@node".into(),
            to: vec!["oncall@example.com".into()],
            timeout: Duration::from_secs(30),
            retry_backoff: Duration::from_secs(30),
        };
        let mut run = Run::default();
        seed_notification_counters(&config(Some(delivery)), &mut run);
        let results: Vec<String> = outcomes(&run, "Stalled")
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        assert_eq!(results, ["failed", "rejected", "sent"]);
    }

    #[test]
    fn seeding_keeps_counts_already_made() {
        let mut run = Run::default();
        count(&mut run, "Stalled", "not_configured");
        seed_notification_counters(&config(None), &mut run);
        assert_eq!(
            outcomes(&run, "Stalled"),
            [("not_configured".to_owned(), 1)]
        );
    }
}
