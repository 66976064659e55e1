//! Alerting: deciding when a run is in trouble and telling people, with the evidence: emails,
//! Alertmanager, webhooks and Slack, the heartbeat, and silences.
//!
//! The same one-way flow as the rest of the sidecar. [`crate::rules`] turns a model snapshot
//! into conditions; [`lifecycle`] turns conditions over time into notifications (pending → firing →
//! resolved, reminders, inhibition); [`email`] renders them with the evidence and [`payload`]
//! for the other [`channel`]s; [`delivery`] sends them through SMTP or into `.eml` files, from
//! an outbox kept in the state directory; [`heartbeat`] pings an outside service while the
//! sidecar works, and [`silence`] holds back what people silenced.
//! The first three are pure and take `now`; [`engine`] is the async loop at the edge.

pub mod action;
pub mod channel;
pub mod chart;
pub mod delivery;
pub mod email;
pub mod engine;
pub mod heartbeat;
pub mod lifecycle;
pub mod payload;
pub mod settings;
pub mod silence;

pub use crate::rules::{AlertName, Condition};
