//! What the inference server's own log says, and the server's figures as the sidecar shows
//! them: its metrics URL where one is configured (it is exact and current), else its log.

use super::{RecentLines, Run, Seconds};
use crate::parse::{ServerEvent, ServerLine, ServerReport};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How long a server with running requests may print no decode line before it counts as
/// hung: SGLang prints one every 40 decode steps, a few seconds at most.
pub const DECODE_SILENCE: f64 = 120.0;

/// The server log's latest report, its event counts and its last lines.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerLogState {
    pub running: Option<f64>,
    pub queued: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    pub kv_cache_usage: Option<f64>,
    pub last_report_at: Option<Seconds>,
    /// The latest decode (SGLang) or stats (vLLM) line.
    pub last_decode_at: Option<Seconds>,
    /// `pulse_server_log_events_total{event}`, carried across restarts like every counter.
    pub events: BTreeMap<String, u64>,
    /// The latest traceback, OOM or failed health check, and when.
    pub last_fatal: Option<(String, Seconds)>,
    pub tail: RecentLines,
}

/// The server's figures from whichever source has them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerFigures {
    pub running: Option<f64>,
    pub queued: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    pub kv_cache_usage: Option<f64>,
    /// When the server last reported figures: its log's latest report, else the latest scrape
    /// of its metrics that worked.
    pub last_report_at: Option<Seconds>,
}

impl ServerLogState {
    pub(super) fn take(&mut self, line: ServerLine, now: Seconds) {
        match line {
            ServerLine::Event(event) => {
                *self.events.entry(event.as_str().to_owned()).or_default() += 1;
                if event.is_fatal() {
                    self.last_fatal = Some((event.as_str().to_owned(), now));
                }
            }
            ServerLine::Report(report) => self.report(report, now),
        }
    }

    fn report(&mut self, r: ServerReport, now: Seconds) {
        self.running = r.running.or(self.running);
        self.queued = r.queued.or(self.queued);
        if r.decode {
            self.generation_tokens_per_second = r.generation_tokens_per_second;
            self.last_decode_at = Some(now);
        }
        self.kv_cache_usage = r.kv_cache_usage.or(self.kv_cache_usage);
        self.last_report_at = Some(now);
    }

    /// Whether the log's last word is a crash: a traceback, an OOM or a failed health check
    /// with no report after it.
    pub fn crashed(&self) -> Option<&str> {
        let (event, at) = self.last_fatal.as_ref()?;
        self.last_report_at
            .is_none_or(|r| r <= *at)
            .then_some(event.as_str())
    }

    pub fn event_count(&self, event: ServerEvent) -> u64 {
        self.events.get(event.as_str()).copied().unwrap_or(0)
    }
}

impl Run {
    /// Takes a line of a server log.
    pub(super) fn server_line(&mut self, line: ServerLine, now: Seconds) {
        self.server_log.take(line, now);
        if let ServerLine::Report(r) = line {
            if r.decode {
                self.note_server(
                    r.running.or(self.server_log.running),
                    r.generation_tokens_per_second,
                    now,
                );
            }
        }
    }

    /// Remembers when the server was last seen generating (evidence of work before a first
    /// report) and last seen working or idle (not hung).
    pub(super) fn note_server(&mut self, running: Option<f64>, tps: Option<f64>, now: Seconds) {
        let generating = running.is_some_and(|r| r > 0.0) && tps.is_some_and(|t| t > 0.0);
        if generating {
            self.server_generating_at = Some(now);
        }
        if generating || running == Some(0.0) {
            self.server_working_at = Some(now);
        }
        self.server_seen_at.get_or_insert(now);
    }

    /// The server's figures: each from its metrics URL where that has it, else from its log.
    pub fn server_figures(&self) -> ServerFigures {
        let probe = self.server.as_ref();
        let log = &self.server_log;
        let pick = |from_probe: Option<f64>, from_log: Option<f64>| from_probe.or(from_log);
        let scraped_at = probe
            .filter(|s| s.error.is_none() && s.running_requests.is_some())
            .and_then(|s| s.checked_at);
        ServerFigures {
            running: pick(probe.and_then(|s| s.running_requests), log.running),
            queued: pick(probe.and_then(|s| s.queued_requests), log.queued),
            generation_tokens_per_second: pick(
                probe.and_then(|s| s.generation_tokens_per_second),
                log.generation_tokens_per_second,
            ),
            kv_cache_usage: pick(probe.and_then(|s| s.kv_cache_usage), log.kv_cache_usage),
            last_report_at: log.last_report_at.or(scraped_at),
        }
    }

    /// Seconds the server has held running requests without generating, when it does now:
    /// from its metrics (generation 0 tok/s) or its log (a stats line at 0 tok/s, or no decode
    /// line for [`DECODE_SILENCE`]).
    pub fn server_stuck_seconds(&self, now: Seconds) -> Option<f64> {
        let since = self.server_working_at.or(self.server_seen_at)?;
        self.server_stuck(now).then(|| (now - since).max(0.0))
    }

    /// Whether the server holds running requests and generates nothing for them now.
    pub fn server_stuck(&self, now: Seconds) -> bool {
        let figures = self.server_figures();
        if !figures.running.is_some_and(|r| r > 0.0) {
            return false;
        }
        let log_silent = self
            .server
            .as_ref()
            .is_none_or(|s| s.running_requests.is_none())
            && self
                .server_log
                .last_decode_at
                .is_some_and(|d| now - d > DECODE_SILENCE);
        figures.generation_tokens_per_second == Some(0.0) || log_silent
    }
}
