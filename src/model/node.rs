//! The node around the run: the driver process and the inference server, as the probes see
//! them. Transitions are computed here, purely, so the notices are testable without processes.

use super::Seconds;
use serde::{Deserialize, Serialize};

/// The pipeline's driver process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessState {
    pub up: bool,
    pub pid: Option<u32>,
    /// When the current state (up with this pid, or down) began.
    pub since: Option<Seconds>,
    pub starts: u64,
    pub exits: u64,
}

/// The driver process's facts in the run, as its probe last saw it: `None` until a probe for
/// it is configured and has looked, which is no word on the process either way.
#[derive(Debug, Clone, Default)]
pub struct ProcessFacts {
    pub(super) state: Option<ProcessState>,
}

impl ProcessFacts {
    /// The process found now (its pid), or none: what changed since the last look.
    pub(super) fn seen(&mut self, pid: Option<u32>, now: Seconds) -> Option<ProcessChange> {
        self.state
            .get_or_insert_with(ProcessState::default)
            .observe(pid, now)
    }

    /// The probe saw it running.
    pub(super) fn up(&self) -> bool {
        self.state.as_ref().is_some_and(|p| p.up)
    }

    /// The probe saw it gone.
    pub(super) fn gone(&self) -> bool {
        self.state.as_ref().is_some_and(|p| !p.up)
    }
}

/// What changed between two observations of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessChange {
    Started(u32),
    Exited(u32),
    /// A different process replaced the one we knew between two probes.
    Replaced {
        old: u32,
        new: u32,
    },
}

impl ProcessState {
    /// Takes a new observation: the pid found, if any.
    pub fn observe(&mut self, pid: Option<u32>, now: Seconds) -> Option<ProcessChange> {
        let change = match (self.pid, pid) {
            (None, Some(new)) => Some(ProcessChange::Started(new)),
            (Some(old), None) => Some(ProcessChange::Exited(old)),
            (Some(old), Some(new)) if old != new => Some(ProcessChange::Replaced { old, new }),
            _ => None,
        };
        match change {
            Some(ProcessChange::Started(_)) => self.starts += 1,
            Some(ProcessChange::Exited(_)) => self.exits += 1,
            Some(ProcessChange::Replaced { .. }) => {
                self.exits += 1;
                self.starts += 1;
            }
            None => {}
        }
        if change.is_some() || self.since.is_none() {
            self.since = Some(now);
        }
        self.pid = pid;
        self.up = pid.is_some();
        change
    }
}

/// The inference server, from its health endpoint and its own metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerState {
    /// `None` when no health URL is configured.
    pub up: Option<bool>,
    pub running_requests: Option<f64>,
    pub queued_requests: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    /// KV cache in use, 0-1.
    #[serde(default)]
    pub kv_cache_usage: Option<f64>,
    /// The fullest rank's KV cache, 0-1.
    #[serde(default)]
    pub kv_cache_usage_max: Option<f64>,
    /// The engine's own count of requests it preempted (vLLM) or retracted (SGLang).
    #[serde(default)]
    pub preemptions_total: Option<f64>,
    /// The throughput the server's gauge claims (SGLang's `gen_throughput`), beside the rate
    /// its token counter gives: a gauge that claims work while the counter stands still is
    /// frozen.
    #[serde(default)]
    pub claimed_tokens_per_second: Option<f64>,
    /// vLLM's sleep mode (`vllm:engine_sleep_state`): every engine put to sleep, its weights
    /// offloaded or discarded between jobs; `None` where the metrics do not say.
    #[serde(default)]
    pub asleep: Option<bool>,
    /// Its health URL gave no answer in time though its port accepts connections: hung where
    /// its process lives, not gone.
    #[serde(default)]
    pub hung: bool,
    /// Its generating `/health` answered 503: its engine gave its own health request no token
    /// within the engine's bound (20 s for SGLang), so it generates nothing now, whatever its
    /// gauges (frozen where they were) claim.
    #[serde(default)]
    pub busy: bool,
    /// Its health URL itself answered 2xx (not a port that accepts, nor a 503).
    #[serde(default)]
    pub health_passed: bool,
    /// Its token counter stood still since the last scrape while its gauges claim running
    /// requests: the gauges are the last batch's, not now's.
    #[serde(default)]
    pub frozen: bool,
    /// Why the latest probe failed, for the alert email.
    pub error: Option<String>,
    pub checked_at: Option<Seconds>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_lifecycle() {
        let mut p = ProcessState::default();
        assert_eq!(p.observe(None, 0.0), None);
        assert!(!p.up);
        assert_eq!(p.observe(Some(42), 5.0), Some(ProcessChange::Started(42)));
        assert!(p.up);
        assert_eq!(p.observe(Some(42), 10.0), None);
        assert_eq!(p.since, Some(5.0));
        assert_eq!(
            p.observe(Some(77), 15.0),
            Some(ProcessChange::Replaced { old: 42, new: 77 })
        );
        assert_eq!(p.observe(None, 20.0), Some(ProcessChange::Exited(77)));
        assert_eq!((p.starts, p.exits, p.up), (2, 2, false));
        assert_eq!(p.since, Some(20.0));
    }
}

/// The inference server's facts in the run: the probe's latest answer, and when the probe and
/// the server's log last saw it at work.
#[derive(Debug, Clone, Default)]
pub struct ServerFacts {
    /// The probe's latest answer, when a probe for the server is configured.
    pub(super) state: Option<ServerState>,
    /// When the server was last seen generating (running requests, tok/s above zero).
    pub(super) generating_at: Option<Seconds>,
    /// When the server was last seen generating or with nothing to run: not hung.
    pub(super) working_at: Option<Seconds>,
    /// When the server was first seen at all.
    pub(super) seen_at: Option<Seconds>,
    /// When the server was first probed, and whether its health check has passed since.
    pub(super) probed: Option<(Seconds, bool)>,
}
