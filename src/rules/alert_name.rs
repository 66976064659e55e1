//! The alerts' names, and a condition: one alert holding for one partition (or the run) now.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Every alert and notice the sidecar knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AlertName {
    Stalled,
    LogSilent,
    ServerHung,
    ProcessExited,
    ServerDown,
    GpusIdle,
    GpuMissing,
    GpuLost,
    GpuHung,
    ErrorRateHigh,
    EmptyResponses,
    ThroughputDrop,
    LogOutputMismatch,
    TruncationHigh,
    MissingFields,
    DuplicateRecords,
    RunLate,
    PartitionFinished,
    RunFinished,
}

impl AlertName {
    pub const ALL: [AlertName; 19] = [
        AlertName::Stalled,
        AlertName::LogSilent,
        AlertName::ServerHung,
        AlertName::ProcessExited,
        AlertName::ServerDown,
        AlertName::GpusIdle,
        AlertName::GpuMissing,
        AlertName::GpuLost,
        AlertName::GpuHung,
        AlertName::ErrorRateHigh,
        AlertName::EmptyResponses,
        AlertName::ThroughputDrop,
        AlertName::LogOutputMismatch,
        AlertName::TruncationHigh,
        AlertName::MissingFields,
        AlertName::DuplicateRecords,
        AlertName::RunLate,
        AlertName::PartitionFinished,
        AlertName::RunFinished,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AlertName::Stalled => "Stalled",
            AlertName::LogSilent => "LogSilent",
            AlertName::ServerHung => "ServerHung",
            AlertName::ProcessExited => "ProcessExited",
            AlertName::ServerDown => "ServerDown",
            AlertName::GpusIdle => "GpusIdle",
            AlertName::GpuMissing => "GpuMissing",
            AlertName::GpuLost => "GpuLost",
            AlertName::GpuHung => "GpuHung",
            AlertName::ErrorRateHigh => "ErrorRateHigh",
            AlertName::EmptyResponses => "EmptyResponses",
            AlertName::ThroughputDrop => "ThroughputDrop",
            AlertName::LogOutputMismatch => "LogOutputMismatch",
            AlertName::TruncationHigh => "TruncationHigh",
            AlertName::MissingFields => "MissingFields",
            AlertName::DuplicateRecords => "DuplicateRecords",
            AlertName::RunLate => "RunLate",
            AlertName::PartitionFinished => "PartitionFinished",
            AlertName::RunFinished => "RunFinished",
        }
    }

    /// Notices are sent once when they become true; they are never "resolved".
    pub fn is_notice(self) -> bool {
        matches!(
            self,
            AlertName::PartitionFinished | AlertName::RunFinished | AlertName::DuplicateRecords
        )
    }

    /// Notices told once per episode, not once ever: `DuplicateRecords` once per pass of the
    /// driver (its condition holds from a pass's first duplicate to the pass's end).
    pub fn rearms(self) -> bool {
        self == AlertName::DuplicateRecords
    }

    /// Alerts that, while firing, silence others: a dead process or server explains a
    /// stall and idle GPUs, a hung server explains a stall, and one email about the cause is
    /// enough.
    pub fn inhibits(self, other: AlertName) -> bool {
        match self {
            AlertName::ProcessExited => matches!(other, AlertName::Stalled | AlertName::GpusIdle),
            AlertName::ServerDown => matches!(
                other,
                AlertName::Stalled | AlertName::GpusIdle | AlertName::ServerHung
            ),
            AlertName::ServerHung => other == AlertName::Stalled,
            _ => false,
        }
    }

    /// Alerts about a stuck run: when one fires, the stacks of the run's processes are taken
    /// and brought to its page (docs/alerts.md#stacks).
    pub fn wants_stacks(self) -> bool {
        matches!(
            self,
            AlertName::Stalled | AlertName::ServerHung | AlertName::LogSilent
        )
    }

    pub fn parse(s: &str) -> Option<AlertName> {
        AlertName::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

impl fmt::Display for AlertName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rule's verdict: this alert holds now, for this partition, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    pub alert: AlertName,
    pub partition: Option<String>,
    /// One line for the subject: "no progress for 14m (server idle, client waiting)".
    pub summary: String,
    /// The reasoning, for the body.
    pub details: String,
    /// When the episode began, where that is before the condition held: a stall's last
    /// evidence of work, so that a RESOLVED "lasted" counts what the FIRING "for" counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub began_at: Option<f64>,
}

#[cfg(test)]
impl Condition {
    /// A condition of `alert` (on `partition`) for the tests: "ALERT holds".
    pub(crate) fn holding(alert: AlertName, partition: Option<&str>) -> Condition {
        Condition {
            alert,
            partition: partition.map(str::to_owned),
            summary: format!("{alert} holds"),
            details: String::new(),
            began_at: None,
        }
    }
}

impl Condition {
    /// The condition of an episode that began at `t`, before it held.
    pub fn began(mut self, t: f64) -> Condition {
        self.began_at = Some(t);
        self
    }

    /// Identifies the alert instance across evaluations.
    pub fn key(&self) -> String {
        match &self.partition {
            Some(p) => format!("{}/{p}", self.alert),
            None => self.alert.to_string(),
        }
    }
}
