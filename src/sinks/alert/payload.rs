//! Our notifications in the shapes the rest of the world reads: Alertmanager's API (`POST
//! /api/v2/alerts`), Alertmanager's webhook payload (version 4, which every webhook receiver
//! written for Alertmanager already parses) and a Slack incoming-webhook message. Pure: the
//! caller passes the alerts, the status and `now`.

use super::channel::Shape;
use super::lifecycle::{Kind, Notification};
use super::Condition;
use crate::model::Seconds;
use crate::sinks::alert::email::Context;
use crate::sinks::status::Status;
use crate::stable_hash;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Prometheus re-sends firing alerts every minute (`--rules.alert.resend-delay`) and marks
/// each valid for four times that; Alertmanager resolves an alert that is not refreshed in time.
pub const RESEND_SECONDS: f64 = 60.0;

/// How an alert goes out: the same for all three shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: Seconds,
    /// When a firing alert stops being valid unless re-sent, or when it resolved.
    pub ends_at: Seconds,
    pub resolved: bool,
}

/// One alert from a condition: labels identify it (the same alert re-sent is the same
/// Alertmanager alert), annotations describe it.
pub fn alert(
    condition: &Condition,
    context: &Context,
    starts_at: Seconds,
    ends_at: Seconds,
    resolved: bool,
) -> Alert {
    let mut labels = BTreeMap::from([
        ("alertname".to_owned(), condition.alert.to_string()),
        ("severity".to_owned(), condition.alert.severity().to_owned()),
        ("job".to_owned(), "pipeline-pulse".to_owned()),
        // As the shipped Prometheus rules label theirs: deploy/alertmanager routes on it.
        ("service".to_owned(), "pipeline-pulse".to_owned()),
        ("instance".to_owned(), context.host.clone()),
        ("hostname".to_owned(), context.host.clone()),
    ]);
    if let Some(partition) = &condition.partition {
        labels.insert("partition".to_owned(), partition.clone());
    }
    // Alertmanager groups a run's alerts across its nodes, and holds a worker's while the
    // run's server is down, by these (deploy/alertmanager).
    if let Some(label) = &context.run {
        labels.insert("run".to_owned(), label.run.clone());
        labels.insert("role".to_owned(), label.role.as_str().to_owned());
    }
    let mut annotations = BTreeMap::from([
        ("summary".to_owned(), condition.summary.clone()),
        ("description".to_owned(), condition.details.clone()),
        ("cause".to_owned(), condition.summary.clone()),
    ]);
    if let Some(url) = &context.status_url {
        annotations.insert("status_url".to_owned(), url.clone());
    }
    if let Some(url) = &context.dashboard_url {
        annotations.insert("dashboard_url".to_owned(), url.clone());
    }
    Alert {
        labels,
        annotations,
        starts_at,
        ends_at,
        resolved,
    }
}

/// The alerts one batch of notifications carries: firing ones valid for four resend
/// intervals, resolved ones ending when they resolved.
pub fn from_notifications(
    notifications: &[Notification],
    context: &Context,
    interval: f64,
    now: Seconds,
) -> Vec<Alert> {
    notifications
        .iter()
        .map(|n| match n.kind {
            Kind::Resolved { .. } => alert(&n.condition, context, n.since, now, true),
            _ => alert(
                &n.condition,
                context,
                n.since,
                valid_until(interval, now),
                false,
            ),
        })
        .collect()
}

/// How long a firing alert sent now stays valid in Alertmanager without being re-sent.
pub fn valid_until(interval: f64, now: Seconds) -> Seconds {
    now + 4.0 * interval.max(RESEND_SECONDS)
}

fn rfc3339(t: Seconds) -> String {
    let t =
        std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(t.clamp(0.0, 253_402_300_799.0));
    humantime::format_rfc3339_millis(t).to_string()
}

fn map(m: &BTreeMap<String, String>) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<Map<_, _>>(),
    )
}

/// The URL Alertmanager links an alert back to: the status page.
fn generator(context: &Context) -> String {
    context
        .status_url
        .clone()
        .unwrap_or_else(|| format!("http://{}:9721/", context.host))
}

/// `POST /api/v2/alerts`: a list of postable alerts.
pub fn alertmanager_api(alerts: &[Alert], context: &Context) -> Value {
    Value::Array(
        alerts
            .iter()
            .map(|a| {
                json!({
                    "labels": map(&a.labels),
                    "annotations": map(&a.annotations),
                    "startsAt": rfc3339(a.starts_at),
                    "endsAt": rfc3339(a.ends_at),
                    "generatorURL": generator(context),
                })
            })
            .collect(),
    )
}

/// A stable fingerprint of an alert's labels, as Alertmanager gives one (its own is a
/// different hash; receivers only compare fingerprints with each other).
fn fingerprint(labels: &BTreeMap<String, String>) -> String {
    let h = labels.iter().fold(stable_hash::EMPTY, |h, (k, v)| {
        let bytes = k.bytes().chain([0xff]).chain(v.bytes()).chain([0xfe]);
        stable_hash::extend(h, bytes)
    });
    format!("{h:016x}")
}

/// Labels every alert has with the same value.
fn common(maps: impl Iterator<Item = BTreeMap<String, String>>) -> BTreeMap<String, String> {
    let mut iter = maps;
    let Some(mut out) = iter.next() else {
        return BTreeMap::new();
    };
    for m in iter {
        out.retain(|k, v| m.get(k) == Some(v));
    }
    out
}

/// Alertmanager's webhook payload, version 4: what a webhook receiver written for
/// Alertmanager (PagerDuty bridges, chat bots, ticketing) parses unchanged.
pub fn webhook_v4(alerts: &[Alert], context: &Context, receiver: &str) -> Value {
    let firing = alerts.iter().any(|a| !a.resolved);
    let group_labels: BTreeMap<String, String> =
        [("instance".to_owned(), context.host.clone())].into();
    json!({
        "version": "4",
        "groupKey": format!("{{}}:{{instance=\"{}\"}}", context.host),
        "truncatedAlerts": 0,
        "status": if firing { "firing" } else { "resolved" },
        "receiver": receiver,
        "groupLabels": map(&group_labels),
        "commonLabels": map(&common(alerts.iter().map(|a| a.labels.clone()))),
        "commonAnnotations": map(&common(alerts.iter().map(|a| a.annotations.clone()))),
        "externalURL": generator(context),
        "alerts": alerts.iter().map(|a| json!({
            "status": if a.resolved { "resolved" } else { "firing" },
            "labels": map(&a.labels),
            "annotations": map(&a.annotations),
            "startsAt": rfc3339(a.starts_at),
            // A firing alert in a v4 payload has the zero time as its end, as Alertmanager
            // sends it.
            "endsAt": if a.resolved { rfc3339(a.ends_at) } else { "0001-01-01T00:00:00Z".to_owned() },
            "generatorURL": generator(context),
            "fingerprint": fingerprint(&a.labels),
        })).collect::<Vec<_>>(),
    })
}

/// What a channel of `shape` posts, for the alerts and the notifications they came from: the
/// one builder both sending and `test-notify` use. `receiver` names the channel in the
/// webhook payload; a Slack message without a `status` has no progress line.
pub fn body(
    shape: Shape,
    alerts: &[Alert],
    notifications: &[Notification],
    status: Option<&Status>,
    context: &Context,
    receiver: &str,
) -> Value {
    match shape {
        Shape::AlertmanagerApi => alertmanager_api(alerts, context),
        Shape::Alertmanager => webhook_v4(alerts, context, receiver),
        Shape::Slack => slack(notifications, status, context),
    }
}

/// A Slack incoming-webhook message: `text` for notifications and clients without blocks,
/// and blocks with the cause, the progress line, the GPU summary and the links.
fn slack(notifications: &[Notification], status: Option<&Status>, context: &Context) -> Value {
    let headline: Vec<String> = notifications
        .iter()
        .map(|n| {
            let partition = n
                .condition
                .partition
                .as_deref()
                .map(|p| format!(" {p}"))
                .unwrap_or_default();
            format!(
                "{} {}{partition}: {}",
                n.kind.word(),
                n.condition.alert,
                n.condition.summary
            )
        })
        .collect();
    let text = format!("[pulse] {} on {}", headline.join("; "), context.host);
    let mut blocks = vec![json!({
        "type": "header",
        "text": {"type": "plain_text", "text": truncate(&format!("pipeline-pulse on {}", context.host), 150)},
    })];
    for n in notifications {
        let mut body = format!(
            "*{} {}*{}\n{}",
            n.kind.word(),
            n.condition.alert,
            n.condition
                .partition
                .as_deref()
                .map(|p| format!(" · {p}"))
                .unwrap_or_default(),
            n.condition.summary
        );
        if !n.condition.details.is_empty() {
            body += &format!("\n{}", n.condition.details);
        }
        blocks.push(
            json!({"type": "section", "text": {"type": "mrkdwn", "text": truncate(&body, 3000)}}),
        );
    }
    if let Some(status) = status {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": truncate(&progress(status), 3000)}}));
    }
    let mut links = Vec::new();
    if let Some(url) = &context.status_url {
        links.push(format!("<{url}|status page>"));
    }
    if let Some(url) = &context.dashboard_url {
        links.push(format!("<{url}|dashboard>"));
    }
    if !links.is_empty() {
        blocks.push(
            json!({"type": "context", "elements": [{"type": "mrkdwn", "text": links.join(" · ")}]}),
        );
    }
    json!({"text": truncate(&text, 3000), "blocks": blocks})
}

/// The run's progress and the GPUs, in two lines.
fn progress(status: &Status) -> String {
    let run = &status.run;
    let mut line = format!("Progress: {} done", run.completed);
    if run.planned > 0 {
        line += &format!(" of {}", run.planned);
    }
    if let Some(rate) = run.tokens_per_second {
        line += &format!(" · {rate:.0} tok/s");
    }
    if let Some(eta) = run.eta_seconds {
        line += &format!(" · ETA {}", crate::human::human(eta));
    }
    // The alerts do not wait for the GPUs' first reading (it may hang): say so rather than
    // leave the line out.
    match status.gpus.as_deref() {
        Some(gpus) if !gpus.is_empty() => {
            let busy = gpus
                .iter()
                .filter(|g| g.utilization.is_some_and(|u| u > 0.0))
                .count();
            line += &format!("\nGPUs: {busy} of {} busy", gpus.len());
        }
        _ => line += "\nGPUs: not read",
    }
    line
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut + "…"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::AlertName;

    fn context() -> Context {
        Context {
            host: "gpu-node-01".into(),
            dashboard_url: Some("https://grafana/d/pulse".into()),
            status_url: Some("http://gpu-node-01:9721/".into()),
            run: Some(crate::run_identity::RunLabel {
                run: "synth_100k".into(),
                role: crate::run_identity::Role::Driver,
            }),
        }
    }

    fn condition(alert: AlertName, partition: Option<&str>) -> Condition {
        Condition {
            alert,
            partition: partition.map(str::to_owned),
            summary: "no progress for 14m".into(),
            details: "last line 14m ago".into(),
            cause: None,
            began_at: None,
            wait_at_most: None,
        }
    }

    #[test]
    fn an_alert_carries_the_labels_and_annotations_alertmanager_routes_on() {
        let a = alert(
            &condition(AlertName::Stalled, Some("B1")),
            &context(),
            1000.0,
            1240.0,
            false,
        );
        assert_eq!(a.labels["alertname"], "Stalled");
        assert_eq!(a.labels["partition"], "B1");
        assert_eq!(a.labels["run"], "synth_100k");
        assert_eq!(a.labels["role"], "driver");
        assert_eq!(a.labels["severity"], "critical");
        assert_eq!(a.labels["job"], "pipeline-pulse");
        assert_eq!(a.labels["instance"], "gpu-node-01");
        assert_eq!(a.annotations["dashboard_url"], "https://grafana/d/pulse");
        let api = alertmanager_api(std::slice::from_ref(&a), &context());
        assert_eq!(api[0]["startsAt"], "1970-01-01T00:16:40.000Z");
        assert_eq!(api[0]["endsAt"], "1970-01-01T00:20:40.000Z");
        assert_eq!(api[0]["generatorURL"], "http://gpu-node-01:9721/");
        let v4 = webhook_v4(&[a], &context(), "oncall");
        assert_eq!(v4["version"], "4");
        assert_eq!(v4["status"], "firing");
        assert_eq!(v4["alerts"][0]["endsAt"], "0001-01-01T00:00:00Z");
        assert_eq!(v4["commonLabels"]["alertname"], "Stalled");
        assert_eq!(v4["alerts"][0]["fingerprint"].as_str().unwrap().len(), 16);
    }

    #[test]
    fn firing_alerts_stay_valid_four_resend_intervals() {
        assert_eq!(valid_until(15.0, 100.0), 340.0);
        assert_eq!(valid_until(120.0, 100.0), 580.0);
        assert_eq!(AlertName::RunFinished.severity(), "info");
        assert_eq!(AlertName::ThroughputDrop.severity(), "warning");
    }

    #[test]
    fn common_labels_are_those_all_share() {
        let a = alert(
            &condition(AlertName::Stalled, Some("B1")),
            &context(),
            0.0,
            1.0,
            false,
        );
        let b = alert(
            &condition(AlertName::GpusIdle, None),
            &context(),
            0.0,
            1.0,
            true,
        );
        let c = common([a.labels.clone(), b.labels.clone()].into_iter());
        assert!(!c.contains_key("alertname") && !c.contains_key("partition"));
        assert_eq!(c["instance"], "gpu-node-01");
        let v4 = webhook_v4(&[a, b], &context(), "r");
        assert_eq!(v4["status"], "firing");
        assert_eq!(v4["alerts"][1]["status"], "resolved");
        assert_ne!(
            v4["alerts"][0]["fingerprint"],
            v4["alerts"][1]["fingerprint"]
        );
    }
}
