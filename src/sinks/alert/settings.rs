//! What the alert engine is given: the rules, the channels and how to deliver. Built from the
//! configuration, kept apart from the engine so that the configuration
//! depends on what alerting needs, not on how the engine runs.

use super::channel::HttpChannel;
use super::delivery::Target;
use super::email::Context;
use crate::rules::Rules;
use std::time::Duration;

/// Where emails go: a transport target and the addresses.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub target: Target,
    pub from: String,
    pub to: Vec<String>,
    /// The most one send may take, connect to final reply.
    pub timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct AlertConfig {
    pub rules: Rules,
    pub interval: Duration,
    pub repeat: Duration,
    /// `None`: no email.
    pub delivery: Option<Delivery>,
    /// Alertmanagers and webhooks.
    pub http: Vec<HttpChannel>,
    /// The most one POST to an HTTP channel may take.
    pub http_timeout: Duration,
    /// The wait before the first retry on any channel; it doubles up to 60 times this.
    pub retry_backoff: Duration,
    pub context: Context,
    /// How the stacks of a stuck run are taken; `None` where `stacks = false`.
    pub stacks: Option<std::sync::Arc<dyn crate::model::stacks::TakeStacks>>,
    /// `[[actions]]`: commands run when an alert fires.
    pub actions: super::action::Actions,
}

impl AlertConfig {
    /// Whether any channel is configured; without one, notifications are only logged.
    pub fn notifies(&self) -> bool {
        self.delivery.is_some() || !self.http.is_empty()
    }
}
