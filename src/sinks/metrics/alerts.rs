//! Alert states and notification outcomes.

use super::family;
use super::Out;
use crate::model::AlertView;
use prometheus_client::encoding::EncodeMetric;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::fmt;

pub(super) fn encode(view: &AlertView, enc: &mut Out) -> fmt::Result {
    family(
        enc,
        "pulse_alert_firing",
        "1 for a firing alert, 0 for a pending one (partition is empty for run-wide alerts).",
        MetricType::Gauge,
        view.alerts.iter().map(|a| {
            (
                [
                    ("alert", a.alert.as_str()),
                    ("partition", a.partition.as_deref().unwrap_or("")),
                ],
                ConstGauge::new(i64::from(a.firing)),
            )
        }),
    )?;
    if let Some(metric) = enc.descriptor(
        "pulse_email_chart_failures",
        "Alert emails sent without their chart because it could not be drawn.",
        MetricType::Counter,
    )? {
        ConstCounter::new(view.chart_failures).encode(metric)?;
    }
    if let Some(t) = view.heartbeat_last_success {
        super::gauge(
            enc,
            "pulse_heartbeat_last_success_timestamp_seconds",
            "When the heartbeat URL last answered a ping (absent until it has).",
            t,
        )?;
    }
    family(
        enc,
        "pulse_actions",
        "Action runs by action and result (ok, failed, timeout: killed with its process group, dry_run: only logged); every result of every action is there from start-up at 0.",
        MetricType::Counter,
        view.action_counts.iter().map(|((action, result), n)| {
            (
                [("action", action.as_str()), ("result", result.as_str())],
                ConstCounter::new(*n),
            )
        }),
    )?;
    let rounds = view.rounds;
    family(
        enc,
        "pulse_alert_rounds",
        "Rounds of the alert engine by outcome: evaluated, or waiting (held back while an input is on its first read).",
        MetricType::Counter,
        [("evaluated", rounds.evaluated), ("waiting", rounds.waiting)]
            .map(|(outcome, n)| ([("outcome", outcome)], ConstCounter::new(n))),
    )?;
    family(
        enc,
        "pulse_notifications",
        "Alert notifications by outcome (sent, failed: an attempt that will be retried, rejected: dropped for good, not_configured) and channel (email, alertmanager_urls[i], webhooks[i]).",
        MetricType::Counter,
        view.notifications.iter().map(|(key, n)| {
            (
                [
                    ("alert", key.alert.as_str()),
                    ("result", key.result.as_str()),
                    ("channel", key.channel.as_str()),
                ],
                ConstCounter::new(*n),
            )
        }),
    )
}
