//! The alert loop: every `alert_interval`, evaluate the rules on the model, step the
//! lifecycle, render what it says for every channel (one email, one webhook message each, the
//! firing alerts for each Alertmanager), queue it, and deliver what is due. Channels are
//! delivered side by side: one that hangs until its timeout never holds another back.
//!
//! The lifecycle, the rule history and the outbox are saved atomically to the state directory
//! (`alerts.json`) after every change and before any send: a restart resumes them, so a
//! notification is neither lost nor sent twice. (A crash between an SMTP server's "250 OK" and
//! the save that follows it would send that one message again: SMTP has no way to ask.)

use super::action;
use super::action::runner::{self, Finished, Launch};
use super::channel::{HttpChannel, Shape};
use super::delivery::{self, Outcome, Outgoing, Transport, EMAIL};
use super::email::{self, Context};
use super::lifecycle::{Kind, Lifecycle, Notification};
use super::payload;
pub use super::settings::{AlertConfig, Delivery};
use super::silence::Store;
use crate::clock;
use crate::http_client::Client;
use crate::lock::{Locked, Published};
use crate::model::stacks::Captures;
use crate::model::{AlertState, AlertView, Delivered, NotificationKey, Run};
use crate::rules::{self, History};
use crate::sinks::status::Status;
use crate::state::StateDir;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

mod actions;

const SAVED: &str = "alerts.json";
/// The last stacks taken, kept across a restart.
const STACKS: &str = "stacks.json";
/// The most bytes of dumps an email attaches.
const STACKS_ATTACHMENT: usize = 512 * 1024;

/// A send task's report: the message's id and how it went.
type Settled = (String, Outcome);
/// The longest alerts wait for every input's first read.
const FIRST_READ_LIMIT: Duration = Duration::from_secs(120);

/// How long the last round's sends may take when the sidecar stops with something left to
/// say (a SLURM job's end): inside the job, SLURM kills what is left 30 s after SIGTERM.
pub const LAST_WORD: Duration = Duration::from_secs(10);

#[derive(Debug, Default, Serialize, Deserialize)]
struct Saved {
    lifecycle: Lifecycle,
    history: History,
    outbox: Vec<Outgoing>,
    next_id: u64,
    /// When the firing alerts were last pushed to the Alertmanagers.
    #[serde(default)]
    alertmanager_pushed_at: f64,
    /// The run the lifecycle's notices were told for ([`Run::runs_started`]).
    #[serde(default)]
    runs_started: u64,
    /// The actions' runs per episode and cooldowns.
    #[serde(default)]
    actions: action::Ledger,
}

/// One evaluation's notifications and the status they are told with, before they are queued.
struct Round {
    notifications: Vec<Notification>,
    status: Status,
}

/// The alerts of a stuck run that begin firing in this round, which want stacks taken.
fn wanting_stacks(notifications: &[Notification]) -> Option<String> {
    let names: Vec<&str> = notifications
        .iter()
        .filter(|n| n.kind == Kind::Firing && n.condition.alert.wants_stacks())
        .map(|n| n.condition.alert.as_str())
        .collect();
    (!names.is_empty()).then(|| alert_names(names))
}

pub struct Engine {
    config: AlertConfig,
    run: Arc<Mutex<Run>>,
    state: Option<StateDir>,
    saved: Saved,
    /// Built when the loop starts (lettre's pool spawns on the runtime).
    senders: Option<Arc<Senders>>,
    /// Ids of messages being sent now, by channel: one per channel at a time, in the order
    /// queued.
    in_flight: BTreeMap<String, String>,
    /// Where send tasks report: (message id, outcome).
    outcomes: (
        mpsc::UnboundedSender<Settled>,
        mpsc::UnboundedReceiver<Settled>,
    ),
    silences: Arc<Store>,
    /// This evaluation's firing alerts that no silence holds.
    unsilenced: Vec<(super::Condition, f64)>,
    /// What the engine publishes for the other sinks: it alone writes it (with the heartbeat's
    /// last success), and never into the run.
    view: Published<AlertView>,
    /// Where action runs report their end.
    acted: (runner::Done, mpsc::UnboundedReceiver<(Launch, Finished)>),
    /// The process groups of the actions running now.
    action_groups: runner::Groups,
}

impl Drop for Engine {
    /// The sidecar stops: no action outlives it, since nothing would enforce its timeout.
    fn drop(&mut self) {
        self.action_groups.kill_all();
    }
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
        let view = Published::default();
        view.update(|v| seed_notification_counters(&config, v));
        view.update(|v| actions::seed(&config, state, v));
        if let Some(stacks) = state.and_then(|s| s.load_json::<Captures>(STACKS)) {
            view.update(|v| v.stacks = Some(Arc::new(stacks)));
        }
        Engine {
            config,
            run,
            state: state.cloned(),
            saved,
            senders: None,
            in_flight: BTreeMap::new(),
            outcomes: mpsc::unbounded_channel(),
            silences: Arc::new(Store::open(None)),
            unsilenced: Vec::new(),
            view,
            acted: mpsc::unbounded_channel(),
            action_groups: runner::Groups::default(),
        }
    }

    /// What the engine publishes: the alerts, its rounds, the notifications' outcomes.
    pub fn view(&self) -> Published<AlertView> {
        self.view.clone()
    }

    /// Obeys these silences (by default, an empty set of its own).
    pub fn with_silences(mut self, silences: Arc<Store>) -> Engine {
        self.silences = silences;
        self
    }

    /// Evaluates and delivers every interval, forever; abort the task to stop it. Nothing is
    /// evaluated while `unread` counts inputs still on their first read: a half-read backlog
    /// (one log read, the next not yet) would raise alerts that the rest disproves, or split
    /// alerts of one moment across emails. A first read that never ends (a hung NFS mount)
    /// must not silence alerting, though: after `FIRST_READ_LIMIT` it goes ahead, and says so.
    /// Judges every `interval` until `last` turns true (the sidecar stops with something
    /// left to say): then one more round, and its sends for up to [`LAST_WORD`].
    pub async fn run_every(
        mut self,
        unread: Arc<AtomicUsize>,
        mut last: tokio::sync::watch::Receiver<bool>,
    ) {
        self.senders = Some(Arc::new(Senders::build(&self.config)));
        let mut ticks = tokio::time::interval(self.config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // tokio's clock, not std's: the tests pause it.
        let started = tokio::time::Instant::now();
        let mut waiting = true;
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                Some((id, outcome)) = self.outcomes.1.recv() => {
                    // A send ended: take its outcome and start that channel's next one.
                    self.settle(&id, outcome);
                    self.deliver();
                    continue;
                }
                Some((launch, finished)) = self.acted.1.recv() => {
                    self.action_ended(launch, finished);
                    self.deliver();
                    continue;
                }
                Ok(()) = last.changed() => {
                    self.last_word().await;
                    return;
                }
            }
            if waiting && unread.load(Ordering::Acquire) > 0 {
                if started.elapsed() < FIRST_READ_LIMIT {
                    self.view.update(|v| v.rounds.waiting += 1);
                    continue;
                }
                tracing::warn!(
                    "some inputs have not been read once after {FIRST_READ_LIMIT:?}; judging alerts on what has been read"
                );
            }
            waiting = false;
            let now = clock::now();
            let mut round = self.decide(now);
            if let Some(reason) = wanting_stacks(&round.notifications) {
                self.take_stacks(&mut round, &reason, now).await;
            }
            let started = self.act(&mut round, now);
            self.await_quick_actions(&mut round, started).await;
            self.queue(round, now);
            self.deliver();
        }
    }

    /// One last round, and its sends waited for (at most [`LAST_WORD`]).
    async fn last_word(&mut self) {
        let now = clock::now();
        let round = self.decide(now);
        self.queue(round, now);
        self.deliver();
        let deadline = tokio::time::Instant::now() + LAST_WORD;
        while !self.in_flight.is_empty() {
            match tokio::time::timeout_at(deadline, self.outcomes.1.recv()).await {
                Ok(Some((id, outcome))) => self.settle(&id, outcome),
                _ => break,
            }
        }
    }

    /// Evaluates the rules and steps the lifecycle: what this round has to say.
    fn decide(&mut self, now: f64) -> Round {
        let mut run = self.run.locked();
        self.view.update(|v| v.rounds.evaluated += 1);
        if run.runs_started() != self.saved.runs_started {
            // A new run in the log's place: its partitions and its end are told anew.
            self.saved.lifecycle.forget_notices();
            self.saved.runs_started = run.runs_started();
        }
        self.saved.history.record(&run, now);
        // Alerts carry the node's role as the evidence now says it (docs/many-nodes.md#roles).
        if let Some(label) = run.identity() {
            self.config.context.run = Some(label.clone());
        }
        let stacks = self.view.get().stacks.clone();
        let conditions = rules::evaluate(
            &run,
            stacks.as_deref(),
            &self.config.rules,
            &self.saved.history,
            now,
        );
        let notifications = self.saved.lifecycle.step(
            conditions,
            &self.config.rules,
            self.config.repeat.as_secs_f64(),
            now,
        );
        for n in &notifications {
            let (alert, partition) = (n.condition.alert.as_str(), n.condition.partition.as_deref());
            match n.kind {
                Kind::Firing => run.mark_alert(n.since, alert, partition, true),
                Kind::Resolved { .. } => run.mark_alert(now, alert, partition, false),
                _ => {}
            }
        }
        let firing = self.saved.lifecycle.firing();
        let statuses = self.saved.lifecycle.statuses();
        let (notifications, silenced, shown) = self.silences.with(|silences| {
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
        // The Alertmanagers get the firing alerts no silence holds.
        self.unsilenced = firing
            .into_iter()
            .zip(silenced)
            .filter(|(_, s)| !s)
            .map(|(f, _)| f)
            .collect();
        let alerts: Vec<AlertState> = statuses
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
        self.view.update(|v| v.alerts = alerts);
        let status = Status::from_run(&run, &self.view.get(), &self.config.context.host, now);
        if !notifications.is_empty() {
            let partition = match notifications.as_slice() {
                [one] => one.condition.partition.as_deref(),
                _ => None,
            };
            tracing::warn!(
                alert = %alert_names(notifications.iter().map(|n| n.condition.alert.as_str())),
                partition,
                "{}",
                email::subject(&notifications, &self.config.context.place())
            );
            if !self.config.notifies() {
                self.view.update(|v| {
                    for n in &notifications {
                        count(
                            v,
                            n.condition.alert.as_str(),
                            Delivered::NotConfigured,
                            EMAIL,
                        );
                    }
                });
            }
        }
        Round {
            notifications,
            status,
        }
    }

    /// Renders the round for every channel and queues it.
    fn queue(&mut self, round: Round, now: f64) {
        let queued = self.outgoing(&round.notifications, &round.status, now);
        self.saved.outbox.extend(queued);
        // Saved before any attempt: from here on a restart sends it, and only once.
        self.save();
    }

    /// Takes the stacks of the run's processes for the alerts of a stuck run that fire now,
    /// off the runtime's threads and under each capture's deadline, then lets them refine
    /// what the round says. Nothing waits for stacks that cannot be had: where py-spy is
    /// missing or refused, each process's line says why (docs/alerts.md#stacks).
    async fn take_stacks(&mut self, round: &mut Round, reason: &str, now: f64) {
        let Some(taker) = self.config.stacks.clone() else {
            return;
        };
        let Some(capture) = taker.prepare(&self.run.locked()) else {
            tracing::info!("{reason}: no driver or server process is known, so no stacks are taken (--process-match, --run-dir)");
            return;
        };
        let why = reason.to_owned();
        let captured = tokio::task::spawn_blocking(move || capture(&why, now)).await;
        let captured = match captured {
            Ok(c) => Arc::new(c),
            Err(e) => {
                tracing::error!("the stacks for {reason} were not taken: {e}");
                return;
            }
        };
        for p in &captured.processes {
            tracing::info!(pid = p.pid, took_ms = p.took_ms, "stacks: {}", p.summary);
        }
        if let Some(state) = &self.state {
            if let Err(e) = state.save_json(STACKS, &*captured) {
                tracing::warn!("cannot keep the stacks in the state directory: {e}");
            }
        }
        self.view.update(|v| v.stacks = Some(captured.clone()));
        let run = self.run.locked();
        // The rules again: the driver's stacks may name the cause better than the probes.
        let conditions = rules::evaluate(
            &run,
            Some(&captured),
            &self.config.rules,
            &self.saved.history,
            now,
        );
        for n in &mut round.notifications {
            if let Some(c) = conditions.iter().find(|c| c.key() == n.condition.key()) {
                n.condition.summary = c.summary.clone();
                n.condition.details = c.details.clone();
            }
        }
        let alerts = self.view.get();
        round.status = Status::from_run(&run, &alerts, &self.config.context.host, now);
    }

    /// The email with the chart of the last hours and a tok/s sparkline. A chart that cannot
    /// be drawn leaves the email as it was: logged and counted, never a reason not to send.
    fn illustrated(
        &self,
        email: email::Email,
        notifications: &[Notification],
        now: f64,
    ) -> email::Email {
        let t0 = now - super::chart::WINDOW;
        // The window's points, copied under the lock; drawn outside it, so no scrape waits
        // for a picture.
        let history = self.run.locked().history().window(t0);
        let history = &history;
        let email = match super::chart::sparkline(history, now) {
            Some(line) => email.with_sparkline(&line),
            None => email,
        };
        // Shaded: each alert from when it began to now (or to when it resolved).
        let shade: Vec<(f64, f64)> = notifications.iter().map(|n| (n.since, now)).collect();
        let started = std::time::Instant::now();
        let chart = super::chart::render(history, &shade, now);
        match chart {
            Ok(None) => email,
            Ok(Some(png)) => {
                tracing::debug!("chart drawn in {:?}", started.elapsed());
                email.with_chart(png, "The last hours: completed requests, tok/s (shaded: the alert), GPU utilization")
            }
            Err(e) => {
                tracing::warn!(
                    channel = EMAIL,
                    "the alert email goes without its chart: {e}"
                );
                self.view.update(|v| v.chart_failures += 1);
                email
            }
        }
    }

    /// What each channel gets for this evaluation's notifications.
    fn outgoing(
        &mut self,
        notifications: &[Notification],
        status: &Status,
        now: f64,
    ) -> Vec<Outgoing> {
        let alerts: Vec<String> = notifications
            .iter()
            .map(|n| n.condition.alert.to_string())
            .collect();
        let mut out: Vec<Outgoing> = self
            .outgoing_email(notifications, status, &alerts, now)
            .into_iter()
            .collect();
        out.extend(self.outgoing_http(notifications, status, &alerts, now));
        out
    }

    /// The alert email for these notifications, where there is an email channel and anything
    /// to tell.
    fn outgoing_email(
        &mut self,
        notifications: &[Notification],
        status: &Status,
        alerts: &[String],
        now: f64,
    ) -> Option<Outgoing> {
        let context = &self.config.context;
        let (Some(delivery), false) = (&self.config.delivery, notifications.is_empty()) else {
            return None;
        };
        let mut email = self.illustrated(
            email::render(notifications, status, context, now),
            notifications,
            now,
        );
        if email::stacks_shown(notifications, status).is_some() {
            email.stacks = self
                .view
                .get()
                .stacks
                .as_deref()
                .map(|c| c.dump(STACKS_ATTACHMENT));
        }
        self.saved.next_id += 1;
        let id = format!("pulse-{}-{}", (now * 1000.0) as u64, self.saved.next_id);
        match delivery::compose(
            &email,
            &delivery.from,
            &delivery.to,
            alerts.to_vec(),
            id,
            &context.host,
        ) {
            Ok(message) => Some(message),
            Err(e) => {
                tracing::error!(
                    channel = EMAIL,
                    alert = %alert_names(alerts.iter().map(String::as_str)),
                    "cannot compose the alert email: {e}"
                );
                None
            }
        }
    }

    /// What each HTTP channel (Alertmanager, webhooks, Slack) gets for these notifications.
    fn outgoing_http(
        &mut self,
        notifications: &[Notification],
        status: &Status,
        alerts: &[String],
        now: f64,
    ) -> Vec<Outgoing> {
        let context = &self.config.context;
        let mut out = Vec::new();
        let interval = self.config.interval.as_secs_f64();
        // Alertmanager wants every firing alert again before the last copy expires, and each
        // change at once.
        let changed = notifications
            .iter()
            .any(|n| !matches!(n.kind, Kind::Reminder));
        let firing = std::mem::take(&mut self.unsilenced);
        let due = now - self.saved.alertmanager_pushed_at >= payload::RESEND_SECONDS;
        let push = changed || (!firing.is_empty() && due);
        if push {
            self.saved.alertmanager_pushed_at = now;
        }
        for channel in &self.config.http {
            let (mut batch, carried) = match channel.shape {
                Shape::AlertmanagerApi if push => {
                    let mut batch: Vec<payload::Alert> = firing
                        .iter()
                        .map(|(c, since)| {
                            payload::alert(
                                c,
                                context,
                                *since,
                                payload::valid_until(interval, now),
                                false,
                            )
                        })
                        .collect();
                    let mut carried: Vec<String> =
                        firing.iter().map(|(c, _)| c.alert.to_string()).collect();
                    for n in notifications {
                        if matches!(n.kind, Kind::Resolved { .. } | Kind::Notice) {
                            batch.extend(payload::from_notifications(
                                std::slice::from_ref(n),
                                context,
                                interval,
                                now,
                            ));
                            carried.push(n.condition.alert.to_string());
                        }
                    }
                    if batch.is_empty() {
                        continue;
                    }
                    (batch, carried)
                }
                Shape::Alertmanager | Shape::Slack if !notifications.is_empty() => (
                    payload::from_notifications(notifications, context, interval, now),
                    alerts.to_vec(),
                ),
                _ => continue,
            };
            if let Some(stacks) = &status.stacks {
                with_stacks(&mut batch, stacks);
            }
            let body = payload::body(
                channel.shape,
                &batch,
                notifications,
                Some(status),
                context,
                &channel.name,
            );
            self.saved.next_id += 1;
            out.push(Outgoing {
                id: format!("pulse-{}-{}", (now * 1000.0) as u64, self.saved.next_id),
                subject: format!("{} alert(s) to {}", carried.len(), channel.name),
                alerts: carried,
                channel: channel.name.clone(),
                from: String::new(),
                to: Vec::new(),
                raw: body.to_string(),
                attempts: 0,
                next_attempt_at: 0.0,
            });
        }
        out
    }

    /// Starts the next due message of every channel that has none in flight. Each send is a
    /// task of its own, so a channel that hangs until its timeout holds back no other channel
    /// and no evaluation; its outcome comes back through `outcomes`.
    fn deliver(&mut self) {
        let Some(senders) = &self.senders else {
            return;
        };
        let now = clock::now();
        for message in &self.saved.outbox {
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

    /// One attempt's outcome: counted, logged, and the message retried later or removed.
    fn settle(&mut self, id: &str, outcome: Outcome) {
        self.in_flight.retain(|_, in_flight| in_flight != id);
        let Some(i) = self.saved.outbox.iter().position(|m| m.id == id) else {
            return;
        };
        let now = clock::now();
        let base = self.config.retry_backoff.as_secs_f64();
        let message = &mut self.saved.outbox[i];
        let alert = alert_names(message.alerts.iter().map(String::as_str));
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
                let wait = delivery::backoff(message.attempts, base).max(after.unwrap_or(0.0));
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
        self.view.update(|v| {
            for alert in &message.alerts {
                count(v, alert, result, &message.channel);
            }
        });
        if !matches!(outcome, Outcome::Retry(..)) {
            self.saved.outbox.remove(i);
        }
        self.save();
    }

    fn save(&self) {
        let Some(state) = &self.state else {
            return;
        };
        if let Err(e) = state.save_json(SAVED, &self.saved) {
            let path = state.path(SAVED);
            tracing::warn!(
                path = %path.display(),
                "cannot save the alert state {}: {e}",
                path.display()
            );
        }
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

/// The stacks' summary as the `stacks` annotation of the firing alerts of a stuck run they
/// were taken during.
fn with_stacks(batch: &mut [payload::Alert], stacks: &crate::sinks::status::StacksStatus) {
    let line = stacks
        .processes
        .iter()
        .map(|p| p.summary.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    for a in batch {
        let wants = a
            .labels
            .get("alertname")
            .and_then(|n| rules::AlertName::parse(n))
            .is_some_and(rules::AlertName::wants_stacks);
        if wants && !a.resolved && stacks.at >= a.starts_at {
            a.annotations.insert("stacks".to_owned(), line.clone());
        }
    }
}

/// Every outcome an enabled rule can have starts at 0: `increase()` over a counter that
/// appears at 1 misses the first notification, so an alert on failed emails would too.
fn seed_notification_counters(config: &AlertConfig, view: &mut AlertView) {
    let mut channels: Vec<(&str, &[Delivered])> = Vec::new();
    const DELIVERED: &[Delivered] = &[Delivered::Sent, Delivered::Failed, Delivered::Rejected];
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

fn count(view: &mut AlertView, alert: &str, result: Delivered, channel: &str) {
    *view
        .notifications
        .entry(NotificationKey::new(alert, result, channel))
        .or_default() += 1;
}

/// The `alert` field of a log event about notifications: each alert once, comma-separated
/// (`Stalled`, or `Stalled,ServerDown` for one email about several).
fn alert_names<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut distinct: Vec<&str> = Vec::new();
    for name in names {
        if !distinct.contains(&name) {
            distinct.push(name);
        }
    }
    distinct.join(",")
}

/// `test-notify`: one test message through every configured channel, now, without the
/// outbox; each channel's outcome, in the order configured.
pub async fn send_tests(config: &AlertConfig) -> Vec<(String, Result<(), String>)> {
    let mut out = Vec::new();
    if let Some(delivery) = &config.delivery {
        let result = send_test(delivery, &config.context).await;
        out.push((format!("email to {}", delivery.to.join(", ")), result));
    }
    let now = clock::now();
    let test = super::Condition {
        alert: super::AlertName::RunFinished,
        partition: None,
        summary: format!(
            "a test notification from pipeline-pulse on {}",
            config.context.host
        ),
        details: "Sent by `pipeline-pulse test-notify`; alerts will arrive here like this one."
            .to_owned(),
        cause: None,
        began_at: None,
        wait_at_most: None,
    };
    let notice = Notification {
        kind: Kind::Notice,
        condition: test,
        since: now,
    };
    for channel in &config.http {
        // Resolved as it is pushed: an Alertmanager takes it (proving the path) and pages no
        // one.
        let resolved = channel.shape == Shape::AlertmanagerApi;
        let mut alert = payload::alert(&notice.condition, &config.context, now, now, resolved);
        alert
            .labels
            .insert("alertname".to_owned(), "PipelinePulseTest".to_owned());
        let body = payload::body(
            channel.shape,
            &[alert],
            std::slice::from_ref(&notice),
            None,
            &config.context,
            &channel.name,
        );
        let result = match channel.client() {
            Ok(client) => match channel
                .send(&client, &body.to_string(), config.http_timeout)
                .await
            {
                Outcome::Sent => Ok(()),
                Outcome::Retry(e, _) | Outcome::Rejected(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        out.push((format!("{} ({})", channel.name, channel.url), result));
    }
    out
}

/// One test email through the configured transport, now, without the outbox.
pub async fn send_test(delivery: &Delivery, context: &Context) -> Result<(), String> {
    let transport = Transport::build(&delivery.target, delivery.timeout)?;
    let now = clock::now();
    let email = email::Email {
        subject: format!("[pulse] test email from {}", context.host),
        text: format!("This is a test email from pipeline-pulse on {}. Alert emails will arrive like this one.\n", context.host),
        html: format!("<p>This is a test email from pipeline-pulse on {}. Alert emails will arrive like this one.</p>", context.host),
        chart: None,
        stacks: None,
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
        Outcome::Retry(e, _) | Outcome::Rejected(e) => Err(e),
    }
}

/// `test-notify`: one test notification on every configured channel, each outcome printed;
/// an error when any failed.
pub fn test_notify(config: &AlertConfig) -> anyhow::Result<()> {
    anyhow::ensure!(
        config.notifies(),
        "no channel is configured: set smtp and email_to, alertmanager_urls or [[webhooks]]"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let results = runtime.block_on(send_tests(config));
    let mut failed = 0;
    for (channel, result) in &results {
        match result {
            Ok(()) => println!("sent a test notification: {channel}"),
            Err(e) => {
                failed += 1;
                eprintln!("pipeline-pulse: the test notification was not sent: {channel}: {e}");
            }
        }
    }
    anyhow::ensure!(
        failed == 0,
        "{failed} of {} channel(s) failed",
        results.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{Parser, RunInference};
    use crate::rules::{AlertName, Rules};
    use crate::sinks::alert::delivery::Target;

    fn config(delivery: Option<Delivery>) -> AlertConfig {
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

    /// A last word never asked for.
    fn never_last() -> tokio::sync::watch::Receiver<bool> {
        let (tx, rx) = tokio::sync::watch::channel(false);
        std::mem::forget(tx);
        rx
    }

    fn firing(view: &Published<AlertView>) -> Vec<String> {
        view.get().alerts.iter().map(|a| a.alert.clone()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn alerts_wait_for_every_first_read() {
        let run = stalled_run();
        let unread = Arc::new(AtomicUsize::new(2));
        let engine = Engine::new(config(None), run.clone(), None);
        let view = engine.view();
        let engine = tokio::spawn(engine.run_every(unread.clone(), never_last()));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            firing(&view).is_empty(),
            "judged before the inputs were read"
        );
        unread.fetch_sub(2, Ordering::AcqRel);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(firing(&view), ["Stalled"]);
        engine.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_read_that_never_ends_does_not_silence_alerts() {
        let run = stalled_run();
        let unread = Arc::new(AtomicUsize::new(1));
        let engine = Engine::new(config(None), run.clone(), None);
        let view = engine.view();
        let engine = tokio::spawn(engine.run_every(unread, never_last()));
        tokio::time::sleep(FIRST_READ_LIMIT - Duration::from_secs(20)).await;
        assert!(firing(&view).is_empty());
        tokio::time::sleep(Duration::from_secs(40)).await;
        assert_eq!(firing(&view), ["Stalled"]);
        engine.abort();
    }

    #[test]
    fn counters_of_enabled_rules_start_at_zero() {
        let mut view = AlertView::default();
        seed_notification_counters(&config(None), &mut view);
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
        seed_notification_counters(&config(Some(delivery)), &mut view);
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
        seed_notification_counters(&config(None), &mut view);
        assert_eq!(
            outcomes(&view, "Stalled"),
            [("not_configured".to_owned(), 1)]
        );
    }

    /// The stacks' lines go on the firing alerts of a stuck run they were taken during, not
    /// on others, older firings or resolutions.
    #[test]
    fn the_stacks_annotation_goes_where_it_belongs() {
        use crate::sinks::status::{ProcessStacksStatus, StacksStatus};
        let context = config(None).context;
        let alert = |name: AlertName, starts_at: f64, resolved: bool| {
            payload::alert(
                &crate::rules::Condition::holding(name, Some("B1")),
                &context,
                starts_at,
                starts_at + 240.0,
                resolved,
            )
        };
        let mut batch = vec![
            alert(AlertName::Stalled, 100.0, false),
            alert(AlertName::Stalled, 300.0, false),
            alert(AlertName::Stalled, 100.0, true),
            alert(AlertName::GpusIdle, 100.0, false),
        ];
        let stacks = StacksStatus {
            at: 200.0,
            reason: "Stalled".into(),
            processes: vec![ProcessStacksStatus {
                role: "driver".into(),
                pid: 42,
                summary: "driver (pid 42): main thread blocked on a lock".into(),
                note: None,
            }],
        };
        with_stacks(&mut batch, &stacks);
        let annotated: Vec<bool> = batch
            .iter()
            .map(|a| a.annotations.contains_key("stacks"))
            .collect();
        assert_eq!(annotated, [true, false, false, false]);
        assert_eq!(
            batch[0].annotations["stacks"],
            "driver (pid 42): main thread blocked on a lock"
        );
    }
}
