//! The tables and lists of the file as written (`[[logs]]`, `[[outputs]]`, `[[partitions]]`,
//! `[[webhooks]]`, `[[actions]]`, `[rules.NAME]`, `listen`), as serde reads them. They sit
//! apart from the code that validates them so that the key table (`keys`), which holds them,
//! and that code, which reads the table's ranges and defaults, import one way only.

use crate::parse::envelope::Envelope;
use crate::parse::Format;
use crate::sources::files::Pointers;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `listen = "0.0.0.0:9721"` or `listen = ["10.0.0.5:9721", "127.0.0.1:9721"]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Listen {
    One(String),
    Many(Vec<String>),
}

impl Listen {
    pub(super) fn addresses(&self) -> Vec<&str> {
        match self {
            Listen::One(a) => vec![a.as_str()],
            Listen::Many(all) => all.iter().map(String::as_str).collect(),
        }
    }
}

impl From<String> for Listen {
    fn from(address: String) -> Listen {
        Listen::One(address)
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutputs {
    pub glob: String,
    /// A fixed partition name; by default the name of each file's folder.
    pub partition: Option<String>,
    /// `false` counts records without parsing them.
    pub inspect: Option<bool>,
    pub pointers: Option<Pointers>,
    /// Pointers every record must have, not empty (`/choices/0/message/reasoning_content`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<String>,
}

/// `[[partitions]]`: settings of one partition, by its name.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawPartition {
    pub name: String,
    pub budget_records: Option<u64>,
}

/// Required fields per output glob: each is a bit of a record's facts.
pub const MAX_REQUIRED: usize = 32;

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub path: PathBuf,
    #[serde(default)]
    pub format: Format,
    /// Left out where it is `auto`, so that a discovered config shows only what was found.
    #[serde(default, skip_serializing_if = "Envelope::is_auto")]
    pub envelope: Envelope,
    pub regex: Option<String>,
    /// tqdm's `unit_divisor` for this log's bars: 1000 (its default) or 1024 (byte units).
    pub unit_divisor: Option<u32>,
}

/// `[[actions]]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAction {
    pub name: Option<String>,
    /// The alerts it runs for.
    #[serde(default)]
    pub on: Vec<String>,
    /// Cause ids: `cause = "server_hung"` or a list of them.
    pub cause: Option<RawCauses>,
    /// The program's absolute path and its arguments.
    #[serde(default)]
    pub command: Vec<String>,
    pub timeout: Option<String>,
    pub max_runs: Option<usize>,
    pub cooldown: Option<String>,
    pub silenced: Option<bool>,
}

/// One cause id, or a list: an engine restart is as right for a crashed server as for a hung
/// one, and two actions for it would keep two cooldowns.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum RawCauses {
    One(String),
    Many(Vec<String>),
}

impl RawCauses {
    pub(super) fn ids(&self) -> &[String] {
        match self {
            RawCauses::One(id) => std::slice::from_ref(id),
            RawCauses::Many(ids) => ids,
        }
    }
}

/// `[rules.Stalled]` and the like.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    pub enabled: Option<bool>,
    /// A number, or for `Stalled` a duration such as "10m".
    pub threshold: Option<Threshold>,
    #[serde(rename = "for")]
    pub for_: Option<String>,
    /// ThroughputDrop: the recent average's window.
    pub window: Option<String>,
    /// ThroughputDrop: the history it needs.
    pub history: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Threshold {
    Number(f64),
    Text(String),
}

/// `[[webhooks]]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawWebhook {
    pub url: String,
    /// `alertmanager` (the webhook payload, version 4) or `slack`.
    pub format: Option<String>,
    /// Headers to send, each read from a file or an environment variable.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, RawHeader>,
    /// A private CA (PEM) for an https URL.
    pub ca_file: Option<PathBuf>,
}

/// `Authorization = { file = "/run/secrets/token", prefix = "Bearer " }`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeader {
    pub file: Option<PathBuf>,
    pub env: Option<String>,
    /// Put before the value read (`"Bearer "`).
    pub prefix: Option<String>,
}
