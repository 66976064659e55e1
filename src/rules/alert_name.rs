//! The alerts' names, and a condition: one alert holding for one partition (or the run) now.

use super::{Cause, Rule, Severity, TABLE};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The enum, its list and its names, from one list of names.
macro_rules! alert_names {
    ($($name:ident),* $(,)?) => {
        /// Every alert and notice the sidecar knows; what each one is, is its entry in
        /// [`super::TABLE`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum AlertName {
            $($name),*
        }

        impl AlertName {
            pub const ALL: [AlertName; <[&str]>::len(&[$(stringify!($name)),*])] =
                [$(AlertName::$name),*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(AlertName::$name => stringify!($name)),*
                }
            }
        }
    };
}

alert_names! {
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
    RunStarted,
    SlurmJobEnding,
    SlurmJobEnded,
    SlurmJobResumed,
}

impl AlertName {
    /// Its entry in the rules table; every alert has one (`rules::tests`).
    pub fn rule(self) -> &'static Rule {
        TABLE
            .iter()
            .find(|r| r.alert == self)
            .expect("every alert has a rule in the table")
    }

    /// Notices are sent once when they become true; they are never "resolved".
    pub fn is_notice(self) -> bool {
        self.rule().severity == Severity::Info
    }

    /// Notices told once per episode, not once ever: `DuplicateRecords` once per pass of the
    /// driver (its condition holds from a pass's first duplicate to the pass's end).
    pub fn rearms(self) -> bool {
        self.rule().rearms
    }

    /// Alerts that, while firing, silence others: a dead process or server explains a
    /// stall and idle GPUs, a hung server explains a stall, and one email about the cause is
    /// enough.
    pub fn inhibits(self, other: AlertName) -> bool {
        self.rule().inhibits.contains(&other)
    }

    /// Alerts about a stuck run: when one fires, the stacks of the run's processes are taken
    /// and brought to its page (docs/alerts.md#stacks).
    pub fn wants_stacks(self) -> bool {
        self.rule().stacks
    }

    /// As the shipped Prometheus rules label them.
    pub fn severity(self) -> &'static str {
        self.rule().severity.as_str()
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
    /// The likely cause the summary names, for what acts on it: an action matches this, never
    /// the summary's words, which may be reworded (docs/alerts.md#actions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    /// When the episode began, where that is before the condition held: a stall's last
    /// evidence of work, so that a RESOLVED "lasted" counts what the FIRING "for" counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub began_at: Option<f64>,
    /// The longest its rule's `for` may hold it back now, where waiting the whole `for` would
    /// page too late to act (RunLate near its deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_at_most: Option<f64>,
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
            cause: None,
            began_at: None,
            wait_at_most: None,
        }
    }
}

impl Condition {
    /// The condition of an episode that began at `t`, before it held.
    pub fn began(mut self, t: f64) -> Condition {
        self.began_at = Some(t);
        self
    }

    /// The condition whose likely cause is `cause`.
    pub fn caused(mut self, cause: Cause) -> Condition {
        self.cause = Some(cause);
        self
    }

    /// The condition whose `for` may hold it back `seconds` at most.
    pub fn waiting_at_most(mut self, seconds: f64) -> Condition {
        self.wait_at_most = Some(seconds);
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
