//! A stall's likely cause as an identifier beside its words: `[[actions]] cause` names it,
//! `PULSE_CAUSE` and an action's stdin carry it. Automation that matched the words of a
//! summary was disarmed by any rewording; an id is a contract, its label is for people and
//! may change (docs/alerts.md#triage-the-likely-cause).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::str::FromStr;

/// The enum, its list, its ids and its labels, from one list.
macro_rules! causes {
    ($($variant:ident = $id:literal, $label:literal;)*) => {
        /// The likely cause a page names, as the evidence selects it (`stall::stall_cause`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Cause {
            $($variant),*
        }

        impl Cause {
            pub const ALL: [Cause; <[&str]>::len(&[$($id),*])] = [$(Cause::$variant),*];

            /// The ids, in the order of [`Cause::ALL`]: what the config's key table offers.
            pub const IDS: [&'static str; <[&str]>::len(&[$($id),*])] = [$($id),*];

            /// Stable: a renamed id breaks every `[[actions]]` that names it.
            pub fn id(self) -> &'static str {
                match self {
                    $(Cause::$variant => $id),*
                }
            }

            /// The words a summary and an email say it with.
            pub fn label(self) -> &'static str {
                match self {
                    $(Cause::$variant => $label),*
                }
            }
        }
    };
}

causes! {
    FileSystemHung = "file_system_hung", "file system hung";
    // "Process gone" is what the emails have always said; the id names which process.
    DriverGone = "driver_gone", "process gone";
    DriverDeadlocked = "driver_deadlocked", "driver deadlocked";
    DriverStopped = "driver_stopped", "driver stopped";
    ServerCrashed = "server_crashed", "server crashed";
    ServerDown = "server_down", "server down";
    ServerAsleep = "server_asleep", "server asleep";
    // Also a server whose /metrics claims tok/s while its counter stands still: the same
    // remedy, so one id; the details say which.
    ServerHung = "server_hung", "server hung";
    ServerBusyNothingWritten = "server_busy_nothing_written", "server busy, nothing written";
    RequestsLost = "requests_lost", "requests lost";
    ServerIdleClientWaiting = "server_idle_client_waiting", "server idle, client waiting";
    DriverWaitingOnServer = "driver_waiting_on_server", "driver waiting on the server";
    DriverBusy = "driver_busy", "driver busy, reporting nothing";
    DriverIdle = "driver_idle", "driver idle";
    DriverIdleBetweenPartitions = "driver_idle_between_partitions", "driver idle between partitions";
    Unknown = "unknown", "cause unknown";
}

/// A name that is no cause's id, with the ids it likely meant: a config written for the
/// prose matching says `server hung` where the id is `server_hung`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not a cause{}; the causes are {}", did_you_mean(.meant), Cause::IDS.join(", "))]
pub struct UnknownCause {
    pub given: String,
    pub meant: Vec<&'static str>,
}

fn did_you_mean(meant: &[&str]) -> String {
    match meant {
        [] => String::new(),
        _ => format!(" (did you mean {}?)", meant.join(" or ")),
    }
}

impl FromStr for Cause {
    type Err = UnknownCause;

    fn from_str(s: &str) -> Result<Cause, UnknownCause> {
        if let Some(cause) = Cause::ALL.into_iter().find(|c| c.id() == s) {
            return Ok(cause);
        }
        let words = s.trim().to_lowercase();
        let snake: String = words
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join("_");
        let exact: Vec<&'static str> = Cause::ALL
            .into_iter()
            .filter(|c| c.id() == snake || c.label() == words)
            .map(Cause::id)
            .collect();
        let meant = if exact.is_empty() && !snake.is_empty() {
            Cause::IDS
                .into_iter()
                .filter(|id| id.contains(&snake))
                .collect()
        } else {
            exact
        };
        Err(UnknownCause {
            given: s.to_owned(),
            meant,
        })
    }
}

impl Serialize for Cause {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

impl<'de> Deserialize<'de> for Cause {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Cause, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_id_reads_back_as_its_cause_and_none_is_shared() {
        for cause in Cause::ALL {
            assert_eq!(cause.id().parse::<Cause>(), Ok(cause));
            let json = serde_json::to_string(&cause).unwrap();
            assert_eq!(json, format!("\"{}\"", cause.id()));
            assert_eq!(serde_json::from_str::<Cause>(&json).unwrap(), cause);
        }
        let ids: BTreeSet<&str> = Cause::ALL.iter().map(|c| c.id()).collect();
        assert_eq!(ids.len(), Cause::ALL.len(), "an id is shared");
        let labels: BTreeSet<&str> = Cause::ALL.iter().map(|c| c.label()).collect();
        assert_eq!(labels.len(), Cause::ALL.len(), "a label is shared");
        assert!(Cause::IDS
            .iter()
            .all(|id| id.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
    }

    /// The ids are a contract with the operators' configs and scripts: each is listed where
    /// they look it up, with the words it is said with.
    #[test]
    fn every_cause_is_in_the_docs_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/alerts.md");
        let page = std::fs::read_to_string(path).unwrap();
        for cause in Cause::ALL {
            let row = format!("| `{}` | {} |", cause.id(), cause.label());
            assert!(page.contains(&row), "docs/alerts.md lacks the row {row}");
        }
    }

    /// A config written for the old matching on words is told the id to write instead.
    #[test]
    fn a_label_or_a_word_is_refused_with_the_ids_it_likely_meant() {
        let err = "Server Hung".parse::<Cause>().unwrap_err();
        assert_eq!(err.meant, ["server_hung"]);
        assert!(
            err.to_string().contains("did you mean server_hung?"),
            "{err}"
        );
        assert_eq!(
            "process gone".parse::<Cause>().unwrap_err().meant,
            ["driver_gone"]
        );
        assert_eq!(
            "hung".parse::<Cause>().unwrap_err().meant,
            ["file_system_hung", "server_hung"]
        );
        let err = "sad".parse::<Cause>().unwrap_err();
        assert!(err.meant.is_empty());
        assert!(err
            .to_string()
            .contains("the causes are file_system_hung, "));
    }
}
