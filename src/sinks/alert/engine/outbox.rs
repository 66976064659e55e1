//! Delivery from the outbox: the messages queued and not yet delivered, sent one per channel
//! at a time and side by side across channels, each attempt's outcome counted, and the failed
//! retried with backoff. A room of its own because it is the only part that waits on the
//! world: a channel that hangs until its timeout holds back no other channel and no round.

use crate::clock;
use crate::http_client::Client;
use crate::lock::Published;
use crate::model::{AlertView, Delivered, NotificationKey};
use crate::sinks::alert::channel::HttpChannel;
use crate::sinks::alert::delivery::{self, Outcome, Outgoing, Transport, EMAIL};
use crate::sinks::alert::settings::AlertConfig;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// A send task's report: the message's id and how it went.
pub(super) type Settled = (String, Outcome);

pub(super) struct Outbox {
    /// Kept in `alerts.json` (as `outbox`): a restart sends what is left, and only once.
    pub queue: Vec<Outgoing>,
    /// Built when the loop starts (lettre's pool spawns on the runtime).
    senders: Option<Arc<Senders>>,
    /// Ids of messages being sent now, by channel: one per channel at a time, in the order
    /// queued.
    in_flight: BTreeMap<String, String>,
    /// Where send tasks report.
    outcomes: (
        mpsc::UnboundedSender<Settled>,
        mpsc::UnboundedReceiver<Settled>,
    ),
}

impl Outbox {
    pub fn new(queue: Vec<Outgoing>) -> Outbox {
        Outbox {
            queue,
            senders: None,
            in_flight: BTreeMap::new(),
            outcomes: mpsc::unbounded_channel(),
        }
    }

    /// Builds every channel's way out; call it on the runtime, before the first delivery.
    pub fn open(&mut self, config: &AlertConfig) {
        self.senders = Some(Arc::new(Senders::build(config)));
    }

    /// Whether a send is under way on any channel.
    pub fn busy(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// The next send to end.
    pub async fn settled(&mut self) -> Option<Settled> {
        self.outcomes.1.recv().await
    }

    /// Starts the next due message of every channel that has none in flight. Each send is a
    /// task of its own; its outcome comes back through [`Outbox::settled`].
    pub fn deliver(&mut self) {
        let Some(senders) = &self.senders else {
            return;
        };
        let now = clock::now();
        for message in &self.queue {
            if message.next_attempt_at > now || self.in_flight.contains_key(&message.channel) {
                continue;
            }
            self.in_flight
                .insert(message.channel.clone(), message.id.clone());
            let (senders, message, done) =
                (senders.clone(), message.clone(), self.outcomes.0.clone());
            tokio::spawn(async move {
                let outcome = senders.send(&message).await;
                let _ = done.send((message.id, outcome));
            });
        }
    }

    /// One attempt's outcome: counted, logged, and the message retried after `backoff`
    /// (doubling) or removed. Returns whether the outbox changed.
    pub fn settle(
        &mut self,
        id: &str,
        outcome: Outcome,
        backoff: Duration,
        view: &Published<AlertView>,
    ) -> bool {
        self.in_flight.retain(|_, in_flight| in_flight != id);
        let Some(i) = self.queue.iter().position(|m| m.id == id) else {
            return false;
        };
        let now = clock::now();
        let message = &mut self.queue[i];
        let alert = delivery::alert_names(message.alerts.iter().map(String::as_str));
        let result = match &outcome {
            Outcome::Sent => {
                tracing::info!(
                    channel = %message.channel,
                    alert = %alert,
                    "sent \"{}\" ({})",
                    message.subject,
                    message.channel
                );
                Delivered::Sent
            }
            Outcome::Retry(e, after) => {
                message.attempts += 1;
                let wait = delivery::backoff(message.attempts, backoff.as_secs_f64())
                    .max(after.unwrap_or(0.0));
                message.next_attempt_at = now + wait;
                tracing::warn!(
                    channel = %message.channel,
                    alert = %alert,
                    "sending \"{}\" ({}) failed (attempt {}): {e}; trying again in {wait:.0}s",
                    message.subject,
                    message.channel,
                    message.attempts
                );
                Delivered::Failed
            }
            Outcome::Rejected(e) => {
                tracing::error!(
                    channel = %message.channel,
                    alert = %alert,
                    "\"{}\" was rejected for good by {}, dropping it: {e}",
                    message.subject,
                    message.channel
                );
                Delivered::Rejected
            }
        };
        view.update(|v| {
            for alert in &message.alerts {
                count(v, alert, result, &message.channel);
            }
        });
        if !matches!(outcome, Outcome::Retry(..)) {
            self.queue.remove(i);
        }
        true
    }
}

/// Every channel's way out, shared by the send tasks.
struct Senders {
    /// `None` with email configured: its transport could not be built (logged at start).
    email: Option<(Transport, Duration)>,
    email_configured: bool,
    http: Vec<(HttpChannel, Client)>,
    timeout: Duration,
}

impl Senders {
    fn build(config: &AlertConfig) -> Senders {
        let email = config.delivery.as_ref().and_then(|delivery| {
            match Transport::build(&delivery.target, delivery.timeout) {
                Ok(t) => Some((t, delivery.timeout)),
                Err(e) => {
                    tracing::error!(channel = EMAIL, "alert emails cannot be sent: {e}");
                    None
                }
            }
        });
        let http = config
            .http
            .iter()
            .filter_map(|channel| match channel.client() {
                Ok(client) => Some((channel.clone(), client)),
                Err(e) => {
                    tracing::error!(
                        channel = %channel.name,
                        "{} cannot be sent to: {e}",
                        channel.name
                    );
                    None
                }
            })
            .collect();
        Senders {
            email,
            email_configured: config.delivery.is_some(),
            http,
            timeout: config.http_timeout,
        }
    }

    /// One attempt at one message, on its channel.
    async fn send(&self, message: &Outgoing) -> Outcome {
        if message.channel == EMAIL {
            return match &self.email {
                Some((transport, timeout)) => delivery::deliver(transport, message, *timeout).await,
                None if self.email_configured => Outcome::Retry(
                    "the email transport could not be built (see the start-up log)".to_owned(),
                    None,
                ),
                None => Outcome::Rejected("email is no longer configured".to_owned()),
            };
        }
        match self.http.iter().find(|(c, _)| c.name == message.channel) {
            Some((channel, client)) => channel.send(client, &message.raw, self.timeout).await,
            None => Outcome::Rejected(format!("{} is not configured", message.channel)),
        }
    }
}

/// Every outcome an enabled rule can have starts at 0: `increase()` over a counter that
/// appears at 1 misses the first notification, so an alert on failed emails would too.
pub(super) fn seed_counters(config: &AlertConfig, view: &mut AlertView) {
    const DELIVERED: &[Delivered] = &[Delivered::Sent, Delivered::Failed, Delivered::Rejected];
    let mut channels: Vec<(&str, &[Delivered])> = Vec::new();
    if config.delivery.is_some() {
        channels.push((EMAIL, DELIVERED));
    }
    for channel in &config.http {
        channels.push((&channel.name, DELIVERED));
    }
    if channels.is_empty() {
        channels.push((EMAIL, &[Delivered::NotConfigured]));
    }
    for (alert, rule) in &config.rules.0 {
        if !rule.enabled {
            continue;
        }
        for (channel, results) in &channels {
            for result in *results {
                view.notifications
                    .entry(NotificationKey::new(alert.as_str(), *result, channel))
                    .or_default();
            }
        }
    }
}

pub(super) fn count(view: &mut AlertView, alert: &str, result: Delivered, channel: &str) {
    *view
        .notifications
        .entry(NotificationKey::new(alert, result, channel))
        .or_default() += 1;
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::rules::{AlertName, Rules};
    use crate::sinks::alert::delivery::Target;
    use crate::sinks::alert::email::Context;
    use crate::sinks::alert::settings::Delivery;

    /// The engine's tests' configuration too.
    pub(crate) fn config(delivery: Option<Delivery>) -> AlertConfig {
        let mut rules = Rules::default();
        rules.0.get_mut(&AlertName::GpuMissing).unwrap().enabled = false;
        AlertConfig {
            rules,
            interval: Duration::from_secs(15),
            repeat: Duration::from_secs(3600),
            delivery,
            http: Vec::new(),
            http_timeout: Duration::from_secs(10),
            retry_backoff: Duration::from_secs(10),
            stacks: None,
            actions: Default::default(),
            context: Context {
                host: "node".into(),
                dashboard_url: None,
                status_url: None,
                run: None,
            },
        }
    }

    fn outcomes(view: &AlertView, alert: &str) -> Vec<(String, u64)> {
        view.notifications
            .iter()
            .filter(|(key, _)| key.alert == alert)
            .map(|(key, n)| (key.result.to_string(), *n))
            .collect()
    }

    #[test]
    fn counters_of_enabled_rules_start_at_zero() {
        let mut view = AlertView::default();
        seed_counters(&config(None), &mut view);
        assert_eq!(
            outcomes(&view, "Stalled"),
            [("not_configured".to_owned(), 0)]
        );
        assert!(outcomes(&view, "GpuMissing").is_empty(), "disabled");
        assert_eq!(outcomes(&view, "RunFinished").len(), 1);
    }

    #[test]
    fn with_email_every_delivery_outcome_starts_at_zero() {
        let delivery = Delivery {
            target: Target::Files("/tmp".into()),
            from: "pulse@node".into(),
            to: vec!["oncall@example.com".into()],
            timeout: Duration::from_secs(30),
        };
        let mut view = AlertView::default();
        seed_counters(&config(Some(delivery)), &mut view);
        let results: Vec<String> = outcomes(&view, "Stalled")
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        assert_eq!(results, ["failed", "rejected", "sent"]);
    }

    #[test]
    fn seeding_keeps_counts_already_made() {
        let mut view = AlertView::default();
        count(&mut view, "Stalled", Delivered::NotConfigured, EMAIL);
        seed_counters(&config(None), &mut view);
        assert_eq!(
            outcomes(&view, "Stalled"),
            [("not_configured".to_owned(), 1)]
        );
    }
}
