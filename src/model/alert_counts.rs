//! The alert engine's counters and action results as types. They were strings, spelled again at
//! every place that counted, compared or showed them; a typo compiled and made a new label. Each
//! word is now spelled once, here, and `/metrics`, `/status`, the page and the state directory
//! print the same text as before.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What became of a notification on a channel: the `result` label of `pulse_notifications_total`.
/// Declared in the labels' alphabetical order: the counters are listed in the key's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Delivered {
    /// An attempt failed and will be retried.
    Failed,
    /// No channel is configured: the notification was only logged.
    NotConfigured,
    /// Dropped for good.
    Rejected,
    Sent,
}

impl Delivered {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivered::Failed => "failed",
            Delivered::NotConfigured => "not_configured",
            Delivered::Rejected => "rejected",
            Delivered::Sent => "sent",
        }
    }
}

impl fmt::Display for Delivered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One counter of `pulse_notifications_total`: fields in the order the counters are listed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NotificationKey {
    pub alert: String,
    pub result: Delivered,
    /// `email`, `alertmanager_urls[i]`, `webhooks[i]`.
    pub channel: String,
}

impl NotificationKey {
    pub fn new(alert: &str, result: Delivered, channel: &str) -> NotificationKey {
        NotificationKey {
            alert: alert.to_owned(),
            result,
            channel: channel.to_owned(),
        }
    }
}

/// How an action run went: `running` until it ends. Kept in `actions.json` and shown in
/// `/status` by these words; declared in their alphabetical order, as the counters are listed.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ActionResult {
    /// `--dry-run-actions`: said, not run.
    DryRun,
    /// It exited non-zero, was killed by a signal or could not start.
    Failed,
    /// The sidecar stopped while it ran.
    Interrupted,
    Ok,
    #[default]
    Running,
    /// Killed at its timeout with its process group.
    Timeout,
}

impl ActionResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionResult::DryRun => "dry_run",
            ActionResult::Failed => "failed",
            ActionResult::Interrupted => "interrupted",
            ActionResult::Ok => "ok",
            ActionResult::Running => "running",
            ActionResult::Timeout => "timeout",
        }
    }
}

impl fmt::Display for ActionResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters keep the order they had as strings.
    #[test]
    fn the_order_is_the_words_order() {
        let delivered = [
            Delivered::Failed,
            Delivered::NotConfigured,
            Delivered::Rejected,
            Delivered::Sent,
        ];
        assert!(delivered
            .windows(2)
            .all(|w| w[0] < w[1] && w[0].as_str() < w[1].as_str()));
        let actions = [
            ActionResult::DryRun,
            ActionResult::Failed,
            ActionResult::Interrupted,
            ActionResult::Ok,
            ActionResult::Running,
            ActionResult::Timeout,
        ];
        assert!(actions
            .windows(2)
            .all(|w| w[0] < w[1] && w[0].as_str() < w[1].as_str()));
    }

    /// The state directory and `/status` hold the words the labels use.
    #[test]
    fn an_action_result_is_kept_as_its_word() {
        for result in [
            ActionResult::DryRun,
            ActionResult::Failed,
            ActionResult::Interrupted,
            ActionResult::Ok,
            ActionResult::Running,
            ActionResult::Timeout,
        ] {
            let json = serde_json::to_string(&result).unwrap();
            assert_eq!(json, format!("\"{}\"", result.as_str()));
            assert_eq!(serde_json::from_str::<ActionResult>(&json).unwrap(), result);
        }
    }
}
