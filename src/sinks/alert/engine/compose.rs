//! A round's notifications in each channel's shape: the email (with its chart, sparkline and
//! stacks), Alertmanager's API (every firing alert again before the last copy expires) and
//! the webhooks and Slack. A room of its own because it is the one place that turns what the
//! engine decided into messages; the outbox only carries them, whatever they say.

use crate::lock::{Locked, Published};
use crate::model::{AlertView, Run};
use crate::rules::{AlertName, Condition};
use crate::sinks::alert::channel::Shape;
use crate::sinks::alert::delivery::{self, Outgoing, EMAIL};
use crate::sinks::alert::lifecycle::{Kind, Notification};
use crate::sinks::alert::settings::AlertConfig;
use crate::sinks::alert::{chart, email, payload};
use crate::sinks::status::{StacksStatus, Status};
use std::sync::Mutex;

/// The most bytes of dumps an email attaches.
const STACKS_ATTACHMENT: usize = 512 * 1024;

/// What rendering reads: the configuration, the run (for the chart) and the engine's view (the
/// stacks, and where a chart failure is counted).
pub(super) struct Desk<'a> {
    pub config: &'a AlertConfig,
    pub run: &'a Mutex<Run>,
    pub view: &'a Published<AlertView>,
}

/// The messages' ids and the Alertmanager push's clock, both kept in `alerts.json`.
#[derive(Debug, Default)]
pub(super) struct Composer {
    pub next_id: u64,
    /// When the firing alerts were last pushed to the Alertmanagers.
    pub alertmanager_pushed_at: f64,
}

impl Composer {
    /// What each channel gets for this evaluation's notifications; `firing` is the firing
    /// alerts no silence holds, which the Alertmanagers get again and again.
    pub fn outgoing(
        &mut self,
        desk: &Desk<'_>,
        notifications: &[Notification],
        status: &Status,
        firing: Vec<(Condition, f64)>,
        now: f64,
    ) -> Vec<Outgoing> {
        let alerts: Vec<String> = notifications
            .iter()
            .map(|n| n.condition.alert.to_string())
            .collect();
        let mut out: Vec<Outgoing> = self
            .outgoing_email(desk, notifications, status, &alerts, now)
            .into_iter()
            .collect();
        out.extend(self.outgoing_http(desk, notifications, status, &alerts, firing, now));
        out
    }

    /// A new message's id: unique across restarts, since the counter is kept.
    fn next_id(&mut self, now: f64) -> String {
        self.next_id += 1;
        format!("pulse-{}-{}", (now * 1000.0) as u64, self.next_id)
    }

    /// The alert email for these notifications, where there is an email channel and anything
    /// to tell.
    fn outgoing_email(
        &mut self,
        desk: &Desk<'_>,
        notifications: &[Notification],
        status: &Status,
        alerts: &[String],
        now: f64,
    ) -> Option<Outgoing> {
        let context = &desk.config.context;
        let (Some(delivery), false) = (&desk.config.delivery, notifications.is_empty()) else {
            return None;
        };
        let mut email = illustrated(
            desk,
            email::render(notifications, status, context, now),
            notifications,
            now,
        );
        if email::stacks_shown(notifications, status).is_some() {
            email.stacks = desk
                .view
                .get()
                .stacks
                .as_deref()
                .map(|c| c.dump(STACKS_ATTACHMENT));
        }
        let id = self.next_id(now);
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
                    alert = %delivery::alert_names(alerts.iter().map(String::as_str)),
                    "cannot compose the alert email: {e}"
                );
                None
            }
        }
    }

    /// What each HTTP channel (Alertmanager, webhooks, Slack) gets for these notifications.
    fn outgoing_http(
        &mut self,
        desk: &Desk<'_>,
        notifications: &[Notification],
        status: &Status,
        alerts: &[String],
        firing: Vec<(Condition, f64)>,
        now: f64,
    ) -> Vec<Outgoing> {
        let context = &desk.config.context;
        let mut out = Vec::new();
        let interval = desk.config.interval.as_secs_f64();
        // Alertmanager wants every firing alert again before the last copy expires, and each
        // change at once.
        let changed = notifications
            .iter()
            .any(|n| !matches!(n.kind, Kind::Reminder));
        let due = now - self.alertmanager_pushed_at >= payload::RESEND_SECONDS;
        let push = changed || (!firing.is_empty() && due);
        if push {
            self.alertmanager_pushed_at = now;
        }
        for channel in &desk.config.http {
            let (mut batch, carried) = match channel.shape {
                Shape::AlertmanagerApi if push => {
                    let (batch, carried) = pushed(&firing, notifications, desk.config, now);
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
            out.push(Outgoing {
                id: self.next_id(now),
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
}

/// What an Alertmanager's API gets: every firing alert no silence holds, and this round's
/// resolutions and notices; with the alerts each carries.
fn pushed(
    firing: &[(Condition, f64)],
    notifications: &[Notification],
    config: &AlertConfig,
    now: f64,
) -> (Vec<payload::Alert>, Vec<String>) {
    let (context, interval) = (&config.context, config.interval.as_secs_f64());
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
    let mut carried: Vec<String> = firing.iter().map(|(c, _)| c.alert.to_string()).collect();
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
    (batch, carried)
}

/// The email with the chart of the last hours and a tok/s sparkline. A chart that cannot be
/// drawn leaves the email as it was: logged and counted, never a reason not to send.
fn illustrated(
    desk: &Desk<'_>,
    email: email::Email,
    notifications: &[Notification],
    now: f64,
) -> email::Email {
    let t0 = now - chart::WINDOW;
    // The window's points, copied under the lock; drawn outside it, so no scrape waits for a
    // picture.
    let history = desk.run.locked().history().window(t0);
    let history = &history;
    let email = match chart::sparkline(history, now) {
        Some(line) => email.with_sparkline(&line),
        None => email,
    };
    // Shaded: each alert from when it began to now (or to when it resolved).
    let shade: Vec<(f64, f64)> = notifications.iter().map(|n| (n.since, now)).collect();
    let started = std::time::Instant::now();
    match chart::render(history, &shade, now) {
        Ok(None) => email,
        Ok(Some(png)) => {
            tracing::debug!("chart drawn in {:?}", started.elapsed());
            email.with_chart(
                png,
                "The last hours: completed requests, tok/s (shaded: the alert), GPU utilization",
            )
        }
        Err(e) => {
            tracing::warn!(
                channel = EMAIL,
                "the alert email goes without its chart: {e}"
            );
            desk.view.update(|v| v.chart_failures += 1);
            email
        }
    }
}

/// The stacks' summary as the `stacks` annotation of the firing alerts of a stuck run they
/// were taken during.
fn with_stacks(batch: &mut [payload::Alert], stacks: &StacksStatus) {
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
            .and_then(|n| AlertName::parse(n))
            .is_some_and(AlertName::wants_stacks);
        if wants && !a.resolved && stacks.at >= a.starts_at {
            a.annotations.insert("stacks".to_owned(), line.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::alert::email::Context;

    /// The stacks' lines go on the firing alerts of a stuck run they were taken during, not
    /// on others, older firings or resolutions.
    #[test]
    fn the_stacks_annotation_goes_where_it_belongs() {
        use crate::sinks::status::ProcessStacksStatus;
        let context = Context {
            host: "node".into(),
            dashboard_url: None,
            status_url: None,
            run: None,
        };
        let alert = |name: AlertName, starts_at: f64, resolved: bool| {
            payload::alert(
                &Condition::holding(name, Some("B1")),
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
