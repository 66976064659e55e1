//! What the inference server's own log says, and the server's figures as the sidecar shows
//! them: its metrics URL where one is configured (it is exact and current), else its log.

use super::{RecentLines, Run, Seconds};
use crate::parse::{
    Format, Pools, Rank, RequestLine, ServerEvent, ServerLine, ServerRead, ServerReport,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How long a server with running requests may print no report before it counts as hung,
/// at most and at least: the engine's own cadence sets it in between ([`ServerLogState::silent_after`]).
pub const DECODE_SILENCE: f64 = 120.0;
const SILENCE_AT_LEAST: f64 = 10.0;
/// Reports the engine may skip before its silence is a hang: a long prefill or a slow step
/// delays one, never four.
const SILENT_REPORTS: f64 = 4.0;
/// The intervals between reports kept to learn the engine's cadence.
const GAPS_KEPT: usize = 8;

/// How long a rank's last report is believed once other ranks report newer ones: three of
/// vLLM's 10 s intervals; SGLang's decode lines come every 40 steps, seconds apart.
fn rank_stale_after(format: Option<Format>) -> Seconds {
    match format {
        Some(Format::Vllm) => 30.0,
        _ => 60.0,
    }
}

/// One rank's latest report.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RankReport {
    /// A DP rank or engine, or vLLM's `N Engines Aggregated:` line (the engines' sum already).
    pub rank: Rank,
    pub running: Option<f64>,
    pub queued: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    pub kv_cache_usage: Option<f64>,
    pub kv_tokens: Option<f64>,
    #[serde(default)]
    pub pools: BTreeMap<String, f64>,
    pub at: Seconds,
}

/// The latest fatal line: what the log says killed the server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Fatal {
    pub event: String,
    /// The line itself (an excerpt), for the page.
    pub text: String,
    pub at: Seconds,
    /// Its place among the log's report and event lines: "the log ends in a crash" is about
    /// order, not clocks (a traceback's lines carry no time of their own).
    pub seq: u64,
}

/// The server log's latest reports (one per rank), its event counts and its last lines.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerLogState {
    #[serde(default)]
    pub ranks: Vec<RankReport>,
    pub last_report_at: Option<Seconds>,
    /// The latest decode (SGLang) or stats (vLLM) line.
    pub last_decode_at: Option<Seconds>,
    /// `pulse_server_log_events_total{event}`, carried across restarts like every counter.
    pub events: BTreeMap<String, u64>,
    /// `pulse_server_log_request_lines_total{kind}`: lines about single requests.
    #[serde(default)]
    pub request_lines: BTreeMap<String, u64>,
    #[serde(default)]
    pub last_fatal: Option<Fatal>,
    /// The latest line that told of trouble (a failed health check, a traceback, an OOM, a
    /// fatal error), for an alert about the server: what its log said last.
    #[serde(default)]
    last_trouble: Option<String>,
    /// vLLM V0's running count of preemptions, as its last warning gave it.
    #[serde(default)]
    preemptions_seen: Option<u64>,
    /// vLLM V1's preemptions, the sum of its stats lines' `Preemptions: N`.
    #[serde(default)]
    preemptions_counted: Option<u64>,
    /// The latest intervals between reports while requests ran: the engine's cadence.
    #[serde(default)]
    gaps: Vec<Seconds>,
    /// The latest retraction line's data-parallel rank, message and time, to count the
    /// copies its other ranks print once.
    #[serde(skip)]
    last_retraction: Option<(Option<u32>, Vec<u8>, Seconds)>,
    #[serde(default)]
    seq: u64,
    #[serde(default)]
    last_report_seq: u64,
    /// Since when the log says the engine sleeps (vLLM's sleep mode); `None` awake.
    #[serde(default)]
    pub asleep: Option<Seconds>,
    /// Where the latest fatal line counted is among the log's lines.
    #[serde(default)]
    fatal_seq: u64,
    /// Likewise for the latest out-of-memory line counted.
    #[serde(default)]
    oom_seq: u64,
    /// The format the log was found in: it sets how long a silent rank is believed.
    #[serde(default)]
    pub format: Option<Format>,
    pub tail: RecentLines,
}

/// The log's figures, combined over its ranks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LogFigures {
    pub running: Option<f64>,
    pub queued: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    pub kv_cache_usage: Option<f64>,
    pub kv_cache_usage_max: Option<f64>,
}

/// The server's figures from whichever source has them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerFigures {
    pub running: Option<f64>,
    pub queued: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    pub kv_cache_usage: Option<f64>,
    /// The fullest rank's KV cache: one full rank stalls its requests whatever the mean.
    pub kv_cache_usage_max: Option<f64>,
    /// When the server last reported figures: its log's latest report (the line's own time),
    /// else the latest scrape of its metrics that worked.
    pub last_report_at: Option<Seconds>,
    /// The server is down or crashed: the figures above are its last known ones, not now's.
    pub down: bool,
}

/// The longest a server that never answered its health check counts as starting: past it, it
/// is down. A large model on a slow disk loads in minutes.
pub const STARTING_AT_MOST: Seconds = 600.0;

impl ServerLogState {
    /// Takes a line read at `at` (its own time, else the read time).
    pub(super) fn take(&mut self, line: ServerLine, text: &[u8], at: Seconds) {
        match line {
            ServerLine::Event(event) => {
                self.seq += 1;
                // One crash is one fatal event however many lines tell it (vLLM's EngineCore,
                // its client and the API server each say so; SGLang's SIGQUIT echoes its
                // watchdog): a fatal line after another, with no report between, is the same
                // crash.
                // So is one out-of-memory error, which a dying engine's traceback prints
                // again on stderr.
                if event == ServerEvent::Fatal {
                    if self.fatal_seq > self.last_report_seq {
                        return;
                    }
                    self.fatal_seq = self.seq;
                }
                if event == ServerEvent::Oom {
                    if self.oom_seq > self.last_report_seq {
                        return;
                    }
                    self.oom_seq = self.seq;
                }
                if !matches!(event, ServerEvent::Retract | ServerEvent::Preemption) {
                    let text = String::from_utf8_lossy(&text[..text.len().min(400)]);
                    self.last_trouble = Some(text.trim().to_owned());
                }
                if event.is_fatal() {
                    let text = String::from_utf8_lossy(&text[..text.len().min(400)]);
                    self.last_fatal = Some(Fatal {
                        event: event.as_str().to_owned(),
                        text: text.trim().to_owned(),
                        at,
                        seq: self.seq,
                    });
                }
                if event == ServerEvent::Retract && self.echoed_retraction(text, at) {
                    return;
                }
                self.count(event, 1);
            }
            ServerLine::Report(report) => {
                self.seq += 1;
                // An engine that runs requests is awake, whatever line the log missed.
                if report.running.is_some_and(|n| n > 0.0) {
                    self.asleep = None;
                }
                self.last_report_seq = self.seq;
                self.report(report, at);
            }
            ServerLine::Preempted { cumulative } => {
                self.seq += 1;
                // The warnings skip 49 of every 50: the line is counted as a line, the engine's
                // own count is the estimate of how many there were.
                self.count(ServerEvent::Preemption, 1);
                self.preemptions_seen = Some(self.preemptions_seen.unwrap_or(0).max(cumulative));
            }
            ServerLine::Request(kind) => {
                *self
                    .request_lines
                    .entry(kind.as_str().to_owned())
                    .or_default() += 1;
            }
            ServerLine::Asleep(asleep) => {
                self.seq += 1;
                self.asleep = asleep.then_some(at);
            }
            ServerLine::Unreadable => {}
        }
    }

    /// Whether a retraction line repeats the one before: SGLang prints a retraction on every
    /// tensor-parallel rank of its data-parallel group, the same message under each rank's
    /// prefix within the second; a second retraction says another `#new_token_ratio`.
    fn echoed_retraction(&mut self, text: &[u8], at: Seconds) -> bool {
        let p = crate::parse::server::prefix::split(text);
        let key = (p.dp_rank, p.message.trim_ascii().to_vec(), at);
        let echoed = self
            .last_retraction
            .as_ref()
            .is_some_and(|(dp, message, then)| {
                *dp == key.0 && *message == key.1 && (at - then).abs() <= 1.0
            });
        self.last_retraction = Some(key);
        echoed
    }

    fn count(&mut self, event: ServerEvent, n: u64) {
        *self.events.entry(event.as_str().to_owned()).or_default() += n;
    }

    fn report(&mut self, r: ServerReport, at: Seconds) {
        if let Some(n) = r.preemptions {
            self.preemptions_counted = Some(self.preemptions_counted.unwrap_or(0) + n);
        }
        let running = self
            .ranks
            .iter()
            .any(|k| k.running.is_some_and(|n| n > 0.0));
        if let (true, Some(last)) = (running, self.last_report_at) {
            if at >= last {
                if self.gaps.len() == GAPS_KEPT {
                    self.gaps.remove(0);
                }
                self.gaps.push(at - last);
            }
        }
        let i = match self.ranks.iter().position(|k| k.rank == r.rank) {
            Some(i) => i,
            None => {
                self.ranks.push(RankReport {
                    rank: r.rank,
                    ..RankReport::default()
                });
                self.ranks.len() - 1
            }
        };
        let k = &mut self.ranks[i];
        k.running = r.running.or(k.running);
        k.queued = r.queued.or(k.queued);
        if r.decode {
            k.generation_tokens_per_second = r.generation_tokens_per_second;
            self.last_decode_at = Some(self.last_decode_at.map_or(at, |d| d.max(at)));
        }
        if r.kv_cache_usage.is_some() {
            k.kv_cache_usage = r.kv_cache_usage;
            k.kv_tokens = r.kv_tokens;
        }
        let pools: &Pools = &r.pools;
        for (name, usage) in pools.iter() {
            k.pools.insert(name.to_owned(), usage);
        }
        k.at = at;
        self.last_report_at = Some(self.last_report_at.map_or(at, |l| l.max(at)));
    }

    /// The ranks whose reports are current: each within its engine's interval of the newest.
    /// An aggregated line, where the engine prints one, stands for all of them.
    fn current(&self) -> Vec<&RankReport> {
        let Some(newest) = self.last_report_at else {
            return Vec::new();
        };
        let stale = rank_stale_after(self.format);
        let fresh: Vec<&RankReport> = self
            .ranks
            .iter()
            .filter(|k| newest - k.at <= stale)
            .collect();
        match fresh.iter().find(|k| k.rank == Rank::Aggregated) {
            Some(all) => vec![*all],
            None => fresh,
        }
    }

    /// Counts and rates add across ranks; the KV ratio is the mean over ranks, weighted by
    /// their pools where the lines give the pool sizes, and its max.
    pub fn figures(&self) -> LogFigures {
        let ranks = self.current();
        let sum = |f: fn(&RankReport) -> Option<f64>| {
            ranks.iter().filter_map(|k| f(k)).reduce(|a, b| a + b)
        };
        let usages: Vec<f64> = ranks.iter().filter_map(|k| k.kv_cache_usage).collect();
        let pool_sizes: Option<Vec<(f64, f64)>> = ranks
            .iter()
            .filter(|k| k.kv_cache_usage.is_some())
            .map(|k| match (k.kv_tokens, k.kv_cache_usage) {
                (Some(t), Some(u)) if u > 0.0 => Some((t, t / u)),
                _ => None,
            })
            .collect();
        let kv = match pool_sizes {
            Some(p) if p.len() > 1 => {
                let (used, size) = p.iter().fold((0.0, 0.0), |(a, b), (u, s)| (a + u, b + s));
                (size > 0.0).then(|| (used / size).clamp(0.0, 1.0))
            }
            _ => (!usages.is_empty()).then(|| usages.iter().sum::<f64>() / usages.len() as f64),
        };
        LogFigures {
            running: sum(|k| k.running),
            queued: sum(|k| k.queued),
            generation_tokens_per_second: sum(|k| k.generation_tokens_per_second),
            kv_cache_usage: kv,
            kv_cache_usage_max: usages.iter().copied().reduce(f64::max),
        }
    }

    /// Each KV pool's usage (the fullest rank's), for a hybrid model.
    pub fn pools(&self) -> BTreeMap<&str, f64> {
        let mut pools = BTreeMap::new();
        for k in self.current() {
            for (name, usage) in &k.pools {
                let e = pools.entry(name.as_str()).or_insert(*usage);
                *e = e.max(*usage);
            }
        }
        pools
    }

    /// Whether the log's last word is a crash: a fatal line (a traceback, an OOM, a failed
    /// health check, the engine saying it died) with no report after it.
    pub fn crashed(&self) -> Option<&Fatal> {
        self.last_fatal
            .as_ref()
            .filter(|f| f.seq > self.last_report_seq)
    }

    /// The latest line of the log that told of trouble.
    pub fn last_words(&self) -> Option<&str> {
        self.last_trouble.as_deref()
    }

    pub fn event_count(&self, event: ServerEvent) -> u64 {
        self.events.get(event.as_str()).copied().unwrap_or(0)
    }

    /// Preemptions as the log tells them, and whether the figure is exact: V1's stats lines
    /// count each one; V0 warns only at the 1st, 51st, 101st…, so its count is a lower bound.
    pub fn preemptions(&self) -> Option<(u64, bool)> {
        match (self.preemptions_counted, self.preemptions_seen) {
            (None, None) => None,
            (counted, seen) => Some((counted.unwrap_or(0) + seen.unwrap_or(0), seen.is_none())),
        }
    }

    /// How long the log may be silent while requests run before the server counts as hung:
    /// [`SILENT_REPORTS`] of the engine's longest recent interval between reports, within
    /// [`SILENCE_AT_LEAST`] and [`DECODE_SILENCE`]; until the cadence is known, three of the
    /// engine's default intervals (vLLM's stats every 10 s; SGLang's every 40 decode steps).
    pub fn silent_after(&self) -> Seconds {
        let longest = self.gaps.iter().copied().reduce(f64::max);
        match (longest, self.format) {
            (Some(gap), _) => (gap * SILENT_REPORTS).clamp(SILENCE_AT_LEAST, DECODE_SILENCE),
            (None, Some(Format::Vllm)) => 30.0,
            (None, _) => 20.0,
        }
    }

    pub fn request_line_count(&self, kind: RequestLine) -> u64 {
        self.request_lines.get(kind.as_str()).copied().unwrap_or(0)
    }
}

impl Run {
    /// Takes a line of a server log, read at `now`. The line's own time, where its prefix has
    /// one, is when its figures held (vLLM's year-less stamps take `now`'s year, the file's
    /// mtime for a backlog); a stamp ahead of `now` (another time zone) is not believed.
    pub(super) fn server_line(&mut self, read: ServerRead, text: &[u8], now: Seconds) {
        let at = read
            .stamp
            .map(|s| s.resolve(now, self.utc_offset))
            .filter(|at| *at <= now + 60.0)
            .map_or(now, |at| at.min(now));
        std::sync::Arc::make_mut(&mut self.server_log).take(read.line, text, at);
        if let ServerLine::Report(r) = read.line {
            if r.decode {
                let figures = self.server_log.figures();
                self.note_server(
                    figures.running,
                    figures.queued,
                    figures.generation_tokens_per_second,
                    at,
                );
            }
        }
    }

    /// Remembers when the server was last seen generating (evidence of work before a first
    /// report) and last seen working or idle (not hung). A server that runs nothing while
    /// requests wait is not idle: it is frozen.
    pub(super) fn note_server(
        &mut self,
        running: Option<f64>,
        queued: Option<f64>,
        tps: Option<f64>,
        now: Seconds,
    ) {
        let generating = running.is_some_and(|r| r > 0.0) && tps.is_some_and(|t| t > 0.0);
        if generating {
            self.server.generating_at = Some(now);
        }
        let idle = running == Some(0.0) && queued.is_none_or(|q| q == 0.0);
        if generating || idle {
            self.server.working_at = Some(now);
        }
        self.server.seen_at.get_or_insert(now);
    }

    /// Whether the engine is put to sleep (vLLM's sleep mode, between RL steps or jobs): its
    /// metrics say so where they are read, else its log. Asleep is neither hung, idle nor down.
    pub fn server_asleep(&self) -> bool {
        match self.server.state.as_ref().and_then(|s| s.asleep) {
            Some(asleep) => asleep,
            None => self.server_log.asleep.is_some(),
        }
    }

    /// Whether the server is gone: its probe fails (health, or a metrics scrape with nothing
    /// read), its engine is dead behind its front end ([`Run::engine_dead`]), or, with no
    /// probe that works, its log ends in a crash.
    pub fn server_down(&self) -> bool {
        if self.engine_dead().is_some() {
            return true;
        }
        match &self.server.state {
            Some(s) if s.up == Some(false) => true,
            Some(s) if s.error.is_some() && s.running_requests.is_none() => true,
            Some(s) if s.up == Some(true) || s.running_requests.is_some() => false,
            _ => self.server_log.crashed().is_some(),
        }
    }

    /// What is dead behind a front end that still runs: the workers that did the engine's work
    /// (SGLang's scheduler, vLLM's `EngineCore`) gone while the server's own process runs, as
    /// the OOM killer leaves it. Its `/health` may answer 503 (SGLang) and its gauges stay
    /// where they were, so neither says it; discovery's scans of its processes do.
    pub fn engine_dead(&self) -> Option<String> {
        let server = self.discovered.tied_server()?;
        if server.workers_gone.is_empty() {
            return None;
        }
        let gone: Vec<String> = server
            .workers_gone
            .iter()
            .map(|w| {
                let title = w.command.split_whitespace().next().unwrap_or("?");
                format!("{title} (pid {})", w.pid)
            })
            .collect();
        Some(format!(
            "its {} {} gone while its front end (pid {}) still runs",
            gone.join(", "),
            if gone.len() == 1 { "is" } else { "are" },
            server.pid
        ))
    }

    /// Whether the server is starting: probed for less than [`STARTING_AT_MOST`], its health
    /// check never passed, and its log tells of no crash. A server loads its weights before it
    /// answers (SGLang: its port refused, then 503, then 200): not down meanwhile.
    pub fn server_starting(&self, now: Seconds) -> bool {
        self.server
            .probed
            .is_some_and(|(since, up)| !up && now - since < STARTING_AT_MOST)
            && self.server_log.crashed().is_none()
            && self.engine_dead().is_none()
    }

    /// Whether the server's gauges are the last batch's and nobody waits on them: frozen
    /// ([`ServerState::frozen`]) while the run is not at work ([`Run::working`]). Not shown then; while the run
    /// waits on the server, frozen gauges are what a hang looks like, and they stay.
    fn server_gauges_stale(&self) -> bool {
        self.server.state.as_ref().is_some_and(|s| s.frozen) && !self.working()
    }

    /// The server's figures now: none while it is down (its last known ones are
    /// [`Run::server_last_known`]).
    pub fn server_figures(&self) -> ServerFigures {
        let known = self.server_last_known();
        if !known.down {
            return known;
        }
        ServerFigures {
            last_report_at: known.last_report_at,
            down: true,
            ..ServerFigures::default()
        }
    }

    /// The server's last known figures: each from its metrics URL where that has it, else
    /// from its log.
    pub fn server_last_known(&self) -> ServerFigures {
        let probe = self.server.state.as_ref();
        let log = self.server_log.figures();
        let pick = |from_probe: Option<f64>, from_log: Option<f64>| from_probe.or(from_log);
        let scraped_at = probe
            .filter(|s| s.error.is_none() && s.running_requests.is_some())
            .and_then(|s| s.checked_at);
        if self.server_gauges_stale() {
            return ServerFigures {
                last_report_at: self.server_log.last_report_at.or(scraped_at),
                down: self.server_down(),
                ..ServerFigures::default()
            };
        }
        ServerFigures {
            running: pick(probe.and_then(|s| s.running_requests), log.running),
            queued: pick(probe.and_then(|s| s.queued_requests), log.queued),
            generation_tokens_per_second: pick(
                probe.and_then(|s| s.generation_tokens_per_second),
                log.generation_tokens_per_second,
            ),
            kv_cache_usage: pick(probe.and_then(|s| s.kv_cache_usage), log.kv_cache_usage),
            kv_cache_usage_max: pick(
                probe.and_then(|s| s.kv_cache_usage_max),
                log.kv_cache_usage_max,
            ),
            last_report_at: self.server_log.last_report_at.or(scraped_at),
            down: self.server_down(),
        }
    }

    /// Seconds the server has held running requests without generating, when it does now:
    /// from its metrics (generation 0 tok/s) or its log (a stats line at 0 tok/s, or no report
    /// for longer than the engine prints them while running: [`ServerLogState::silent_after`]).
    pub fn server_stuck_seconds(&self, now: Seconds) -> Option<f64> {
        let since = self.server.working_at.or(self.server.seen_at)?;
        self.server_stuck(now).then(|| (now - since).max(0.0))
    }

    /// Whether the server holds running requests (or, running none, queued ones) and
    /// generates nothing for them now.
    pub fn server_stuck(&self, now: Seconds) -> bool {
        if self.server_asleep() {
            return false;
        }
        // Its own health request got no token within the engine's bound (SGLang's generating
        // /health): it generates nothing, though its gauges may read idle (the last batch the
        // scheduler logged before it stopped).
        if self.server.state.as_ref().is_some_and(|s| s.busy) && self.working() {
            return true;
        }
        let figures = self.server_figures();
        let waiting = figures.running == Some(0.0) && figures.queued.is_some_and(|q| q > 0.0);
        if !(figures.running.is_some_and(|r| r > 0.0) || waiting) {
            return false;
        }
        let log_silent = self
            .server
            .state
            .as_ref()
            .is_none_or(|s| s.running_requests.is_none())
            && self
                .server_log
                .last_report_at
                .is_some_and(|d| now - d > self.server_log.silent_after());
        figures.generation_tokens_per_second == Some(0.0) || log_silent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::ServerLog;

    /// Reads `lines` as one server log, each at `now` (their own stamps win where they have
    /// them), into a fresh run.
    fn run_of(lines: &[&str], now: Seconds) -> Run {
        let mut run = Run::default();
        let mut log = ServerLog::default();
        for line in lines {
            if let Some(read) = log.parse(line.as_bytes()) {
                std::sync::Arc::make_mut(&mut run.server_log).format = log.format();
                run.server_line(read, line.as_bytes(), now);
            }
        }
        run
    }

    /// An hour after the lines' 2027-01-15 08:00:00 UTC.
    const NOW: Seconds = 1_800_003_600.0;

    fn sglang(at: &str, ranks: &str, running: u32, tokens: u32, usage: f64, tps: f64) -> String {
        format!("[{at} {ranks}] Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2}, gen throughput (token/s): {tps:.2}, #queue-req: 5")
    }

    /// SGLang's decode reports at these times, each with 150 requests running.
    fn busy_reports(stamps: impl Iterator<Item = String>) -> Vec<String> {
        stamps
            .map(|at| sglang(&at, "TP0", 150, 9000, 0.4, 900.0))
            .collect()
    }

    #[test]
    fn a_log_silent_longer_than_its_engine_reports_holds_a_hang() {
        // SGLang reporting every second with 150 running, then nothing.
        let lines = busy_reports((0..6).map(|i| format!("2027-01-15 08:00:0{i}")));
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let last = 1_800_000_005.0;
        let run = run_of(&lines, last);
        // Four of its one-second intervals, but never under ten seconds.
        assert_eq!(run.server_log.silent_after(), SILENCE_AT_LEAST);
        assert!(!run.server_stuck(last + 9.0));
        assert!(run.server_stuck(last + 11.0));
        assert_eq!(run.server_stuck_seconds(last + 11.0), Some(11.0));
        // An engine that reports every 20 s is not hung after 30 s of silence.
        let slow = busy_reports((0..3).map(|i| format!("2027-01-15 08:0{i}:00")));
        let slow: Vec<&str> = slow.iter().map(String::as_str).collect();
        let run = run_of(&slow, 1_800_000_120.0);
        assert_eq!(run.server_log.silent_after(), DECODE_SILENCE);
        let run = {
            let twenty = busy_reports((0..3).map(|i| format!("2027-01-15 08:00:{:02}", i * 20)));
            let twenty: Vec<&str> = twenty.iter().map(String::as_str).collect();
            run_of(&twenty, 1_800_000_040.0)
        };
        assert_eq!(run.server_log.silent_after(), 80.0);
        assert!(!run.server_stuck(1_800_000_070.0));
        assert!(run.server_stuck(1_800_000_121.0));
    }

    /// A restart: the server worked, went down for 30 s, came back up holding requests it
    /// has not generated for yet. Stuck counts from its coming up, not from before.
    #[test]
    fn a_restarted_server_is_not_stuck_for_its_downtime() {
        let mut run = Run::default();
        let state = |up: bool, running: f64, tps: f64| crate::model::ServerState {
            up: Some(up),
            running_requests: up.then_some(running),
            queued_requests: up.then_some(0.0),
            generation_tokens_per_second: up.then_some(tps),
            ..Default::default()
        };
        run.set_server(state(true, 6.0, 900.0), NOW);
        run.set_server(state(false, 0.0, 0.0), NOW + 1.0);
        run.set_server(state(true, 1.0, 0.0), NOW + 31.0);
        assert_eq!(run.server_stuck_seconds(NOW + 32.0), Some(1.0));
        // Up all along, nothing generated since it last did: stuck since then.
        run.set_server(state(true, 1.0, 0.0), NOW + 40.0);
        assert_eq!(run.server_stuck_seconds(NOW + 40.0), Some(9.0));
    }

    #[test]
    fn an_engine_put_to_sleep_is_asleep_not_hung() {
        let stats = "INFO 01-15 08:00:00 [loggers.py:335] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 90.0 tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 9.0%, Prefix cache hit rate: 0.0%";
        let asleep =
            "INFO 01-15 08:00:01 [abstract.py:445] It took 0.512311 seconds to fall asleep.";
        let woke = "INFO 01-15 08:10:00 [abstract.py:463] It took 0.801002 seconds to wake up tags {'weights', 'kv_cache'}.";
        let run = run_of(&[stats, asleep], NOW);
        assert!(run.server_asleep());
        // Four requests on its last word and silent for an hour: asleep, not a hang.
        assert!(!run.server_stuck(NOW + 3600.0));
        let run = run_of(&[stats, asleep, woke], NOW);
        assert!(!run.server_asleep());
        // The metrics' word wins over the log's.
        let mut run = run_of(&[stats, asleep], NOW);
        run.server.state = Some(crate::model::ServerState {
            asleep: Some(false),
            ..Default::default()
        });
        assert!(!run.server_asleep());
    }

    #[test]
    fn v0_warnings_count_as_lines_and_their_count_is_a_lower_bound() {
        let warn = |n: u32| {
            format!("WARNING 01-15 08:00:00 scheduler.py:1077] Sequence group cmpl-{n}-0 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={n}")
        };
        let lines = [warn(1), warn(51), warn(101)];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let run = run_of(&lines, NOW);
        assert_eq!(run.server_log.event_count(ServerEvent::Preemption), 3);
        assert_eq!(run.server_log.preemptions(), Some((101, false)));
        let v1 = "INFO 01-15 08:00:00 [loggers.py:248] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 90.0 tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 9.0%, Prefix cache hit rate: 0.0%, Preemptions: 7";
        let run = run_of(&[v1, v1], NOW);
        assert_eq!(run.server_log.event_count(ServerEvent::Preemption), 0);
        assert_eq!(run.server_log.preemptions(), Some((14, true)));
    }

    #[test]
    fn data_parallel_ranks_add_up_and_kv_is_weighted_by_pool() {
        let lines = [
            sglang(
                "2027-01-15 08:00:00",
                "DP0 TP0 EP0",
                80,
                50_000,
                0.50,
                2000.0,
            ),
            sglang(
                "2027-01-15 08:00:00",
                "DP1 TP4 EP4",
                75,
                20_000,
                0.25,
                1000.0,
            ),
        ];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let f = run_of(&lines, NOW).server_log.figures();
        assert_eq!(f.running, Some(155.0));
        assert_eq!(f.queued, Some(10.0));
        assert_eq!(f.generation_tokens_per_second, Some(3000.0));
        // Pools of 100k and 80k tokens: 70k of 180k in use.
        assert!((f.kv_cache_usage.unwrap() - 70_000.0 / 180_000.0).abs() < 1e-12);
        assert_eq!(f.kv_cache_usage_max, Some(0.5));
    }

    #[test]
    fn a_rank_that_stops_reporting_is_stale_after_its_engines_interval() {
        let lines = [
            sglang("2027-01-15 08:00:00", "DP1 TP4", 75, 1, 0.2, 1.0),
            sglang("2027-01-15 08:00:59", "DP0 TP0", 80, 1, 0.2, 1.0),
        ];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        assert_eq!(
            run_of(&lines, NOW).server_log.figures().running,
            Some(155.0)
        );
        let later = sglang("2027-01-15 08:01:01", "DP0 TP0", 80, 1, 0.2, 1.0);
        let mut all = lines.clone();
        all.push(&later);
        assert_eq!(run_of(&all, NOW).server_log.figures().running, Some(80.0));
    }

    #[test]
    fn engines_add_up_and_an_aggregated_line_stands_for_them() {
        let e = |n: u32, running: u32, kv: f64| {
            format!("(APIServer pid=1) INFO 01-15 08:00:00 [loggers.py:335] Engine {n:03}: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 100.0 tokens/s, Running: {running} reqs, Waiting: 2 reqs, GPU KV cache usage: {kv:.1}%, Prefix cache hit rate: 0.0%")
        };
        let lines = [e(0, 80, 57.5), e(1, 75, 63.5)];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let f = run_of(&lines, NOW).server_log.figures();
        assert_eq!((f.running, f.queued), (Some(155.0), Some(4.0)));
        assert!(
            (f.kv_cache_usage.unwrap() - 0.605).abs() < 1e-12,
            "the mean, not the sum"
        );
        assert_eq!(f.kv_cache_usage_max, Some(0.635));
        let aggregated = "(APIServer pid=1) INFO 01-15 08:00:00 [loggers.py:335] 2 Engines Aggregated: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 200.0 tokens/s, Running: 155 reqs, Waiting: 4 reqs, GPU KV cache usage: 60.5%";
        let f = run_of(&[aggregated], NOW).server_log.figures();
        assert_eq!(
            (f.running, f.generation_tokens_per_second),
            (Some(155.0), Some(200.0))
        );
    }

    #[test]
    fn the_lines_own_time_is_the_report_time() {
        let line = sglang("2027-01-15 08:00:00", "TP0", 1, 1, 0.1, 1.0);
        let run = run_of(&[&line], NOW);
        assert_eq!(run.server_log.last_report_at, Some(1_800_000_000.0));
        // A stamp from the future (another time zone) is not believed.
        let line = sglang("2027-01-15 11:00:00", "TP0", 1, 1, 0.1, 1.0);
        assert_eq!(run_of(&[&line], NOW).server_log.last_report_at, Some(NOW));
    }

    #[test]
    fn a_crash_is_the_logs_last_word_by_order_not_by_clock() {
        let report = sglang("2027-01-15 08:00:00", "TP0", 4, 1, 0.1, 1.0);
        let fatal = "[2027-01-15 07:59:00] Received sigquit from a child process. It usually means the child failed.";
        let crashed = run_of(&[&report, fatal], NOW);
        let f = crashed.server_log.crashed().expect("crashed");
        assert_eq!(f.event, "fatal");
        assert!(f.text.contains("sigquit"));
        // Down, by its log alone: no figures now, the last known ones kept.
        assert!(crashed.server_down());
        assert_eq!(crashed.server_figures().running, None);
        assert_eq!(crashed.server_last_known().running, Some(4.0));
        assert!(run_of(&[fatal, &report], NOW)
            .server_log
            .crashed()
            .is_none());
    }
}
