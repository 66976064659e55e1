//! The log source: followers and parsers feeding the model, on a thread of their own.
//!
//! File reads are blocking, so this runs on a plain thread rather than the async runtime. The
//! model lock is taken per bounded batch of bytes, so catching up on a large log never holds a
//! scrape waiting for more than a few milliseconds.

use crate::clock;
use crate::config::LogConfig;
use crate::model::Run;
use crate::parse::{ansi, Event, Format, Parser};
use crate::source::Source;
use crate::state::{LogPosition, Snapshot, StateDir};
use crate::tail::{Follower, Tailed};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

/// Bytes read from one log per model lock.
const BATCH_BYTES: u64 = 4 * 1024 * 1024;

pub struct LogSource {
    logs: Vec<FollowedLog>,
    run: Arc<Mutex<Run>>,
    state: Option<StateDir>,
    /// Saving failed last time: say so once, and again when it recovers.
    failing: bool,
    max_line_bytes: usize,
    /// Logs that discovery finds while the sidecar runs.
    additions: Option<mpsc::Receiver<LogConfig>>,
}

struct FollowedLog {
    follower: Follower,
    parser: Parser,
    /// What we last said about this log's health, so a lasting problem is logged once.
    last_problem: Option<String>,
    /// Whether lines were read before (at start-up they are a backlog, stamped with the mtime).
    has_read: bool,
    /// The follower's switch count the last snapshot recorded.
    saved_switches: u64,
    /// Holds a line while its ANSI escapes are removed.
    stripped: Vec<u8>,
    /// The follower's byte count when the pending frame was last applied: a frame is applied
    /// once, not at every poll (its logged ETA would be stamped afresh each time and never
    /// count down).
    peeked_at: Option<u64>,
    /// Whether the log file's birth time was asked for (`LogStats::began_at`).
    birth_asked: bool,
}

impl LogSource {
    /// A source for `logs`; with a state directory, it resumes from the last snapshot there.
    pub fn new(
        logs: &[LogConfig],
        max_line_bytes: usize,
        run: Arc<Mutex<Run>>,
        state: Option<StateDir>,
    ) -> LogSource {
        let mut source = LogSource {
            logs: logs
                .iter()
                .map(|l| FollowedLog::new(l, max_line_bytes))
                .collect(),
            run,
            state,
            failing: false,
            max_line_bytes,
            additions: None,
        };
        if let Some(snapshot) = source.state.as_ref().and_then(StateDir::load) {
            source.restore(snapshot, &Self::paths(logs));
        }
        if !logs.is_empty() {
            let mut run = source.run.lock().unwrap_or_else(|e| e.into_inner());
            run.expect_collector("log");
            for (stats, log) in run.logs.iter_mut().zip(logs) {
                stats.server = log.server;
            }
        }
        source
    }

    /// Takes the logs discovery finds later from `additions`, at each poll.
    pub fn with_additions(mut self, additions: mpsc::Receiver<LogConfig>) -> LogSource {
        self.additions = Some(additions);
        self
    }

    fn take_additions(&mut self) {
        let Some(additions) = &self.additions else {
            return;
        };
        while let Ok(log) = additions.try_recv() {
            let kind = if log.server { "server log" } else { "log" };
            tracing::info!("following the discovered {kind} {}", log.path.display());
            let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
            run.add_log(log.path.display().to_string(), log.server);
            self.logs.push(FollowedLog::new(&log, self.max_line_bytes));
        }
    }

    fn restore(&mut self, snapshot: Snapshot, paths: &[String]) {
        *self.run.lock().unwrap_or_else(|e| e.into_inner()) = Run::restored(snapshot.run, paths);
        for (log, path) in self.logs.iter_mut().zip(paths) {
            let Some(saved) = snapshot.logs.iter().find(|l| &l.path == path) else {
                continue;
            };
            log.follower.set_stats(saved.stats);
            match (&mut log.parser, saved_format(&self.run, path)) {
                (Parser::Auto(detect), Some(format)) => detect.assume(format),
                (Parser::Server(server), Some(format)) => server.assume(format),
                _ => {}
            }
            // Resumed lines were read by the sidecar before; they are not a catch-up backlog.
            log.has_read = true;
            let resumed = log
                .follower
                .resume(saved.position.as_ref(), &saved.draining);
            for (found, offset) in &resumed.draining {
                tracing::info!(
                    "{path}: draining the rotated file {} from byte {offset}",
                    found.display()
                );
            }
            for lost in &resumed.lost {
                tracing::warn!(
                    "{path}: the file it was reading (inode {}) is gone from its folder; \
                     what was written to it after byte {} cannot be read",
                    lost.ino,
                    lost.offset
                );
            }
            match &saved.position {
                Some(position) if resumed.in_place => {
                    tracing::info!("resuming {path} at byte {}", position.offset)
                }
                Some(_) => tracing::info!(
                    "{path} was replaced while the sidecar was down; reading it from the start"
                ),
                None => {}
            }
        }
    }

    /// Saves the model and the tail positions, if a state directory is configured. A failure
    /// is logged once until it recovers; the sidecar goes on without it.
    pub fn save_snapshot(&mut self) {
        let Some(state) = &self.state else {
            return;
        };
        let logs = self
            .logs
            .iter()
            .map(|l| LogPosition {
                path: l.follower.path().display().to_string(),
                position: l.follower.position(),
                draining: l.follower.draining_positions(),
                stats: l.follower.stats(),
            })
            .collect();
        for log in &mut self.logs {
            log.saved_switches = log.follower.switches();
        }
        let run = self.run.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match state.save(&Snapshot::new(run, logs, clock::now())) {
            Ok(()) if self.failing => {
                tracing::info!("saving snapshots again");
                self.failing = false;
            }
            Ok(()) => {}
            Err(e) if !self.failing => {
                tracing::warn!(
                    "cannot save the snapshot {}: {e}; a restart will read the logs from the start",
                    state.snapshot_path().display()
                );
                self.failing = true;
            }
            Err(_) => {}
        }
    }

    /// The model's list of log paths, in the order the source indexes them.
    pub fn paths(logs: &[LogConfig]) -> Vec<String> {
        logs.iter().map(|l| l.path.display().to_string()).collect()
    }

    /// Reads every log to its current end once.
    pub fn poll(&mut self) {
        self.take_additions();
        if self.logs.is_empty() {
            return;
        }
        let started = Instant::now();
        let mut all_up = true;
        for (index, log) in self.logs.iter_mut().enumerate() {
            all_up &= log.poll(index, &self.run);
        }
        let elapsed = started.elapsed().as_secs_f64();
        self.run
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_collector("log", all_up, elapsed);
        // A rotation changes which files a restart must find: record it now, not at the next
        // interval, so a kill loses at most what was read since.
        if self
            .logs
            .iter()
            .any(|l| l.follower.switches() != l.saved_switches)
        {
            self.save_snapshot();
        }
    }
}

impl Source for LogSource {
    fn poll(&mut self) {
        LogSource::poll(self);
    }

    fn save_snapshot(&mut self) {
        LogSource::save_snapshot(self);
    }
}

impl FollowedLog {
    fn new(log: &LogConfig, max_line_bytes: usize) -> FollowedLog {
        FollowedLog {
            follower: Follower::new(&log.path, max_line_bytes),
            parser: log.parser.clone(),
            last_problem: None,
            has_read: false,
            saved_switches: 0,
            stripped: Vec::new(),
            peeked_at: None,
            birth_asked: false,
        }
    }

    /// Reads this log to its end in batches; returns whether it is present and readable.
    fn poll(&mut self, index: usize, run: &Mutex<Run>) -> bool {
        let mut now = clock::now();
        if !self.has_read {
            // Lines found at start were written no later than the file's mtime: stamping them
            // so keeps a sidecar started on a stalled run honest about how long it has stalled.
            if let Ok(modified) = std::fs::metadata(self.follower.path()).and_then(|m| m.modified())
            {
                now = now.min(clock::unix_seconds(modified));
            }
        }
        loop {
            let mut guard = run.lock().unwrap_or_else(|e| e.into_inner());
            let run = &mut *guard;
            let parser = &mut self.parser;
            let stripped = &mut self.stripped;
            let result = self.follower.poll(BATCH_BYTES, |tailed| {
                if let Tailed::Line(line) = tailed {
                    let line = ansi::strip(line, stripped);
                    run.ingest(index, line, parser.parse(line), now);
                }
            });
            if result.as_ref().is_ok_and(|p| !p.more) {
                self.peek_pending_frame(index, run, now);
            }
            let format = self.parser.format();
            if run.logs[index].format != format {
                run.logs[index].format = format;
                self.announce_format();
            }
            let stats = self.follower.stats();
            let log = &mut run.logs[index];
            if !self.birth_asked && log.began_at.is_none() && log.lines > 0 && !log.server {
                // Asked once: a file system that keeps no birth time will not start to.
                self.birth_asked = true;
                // The birth time, not a line's stamp: a backlog's lines all carry the mtime,
                // which would make every output file look older than the run.
                log.began_at = std::fs::metadata(self.follower.path())
                    .and_then(|m| m.created())
                    .ok()
                    .map(clock::unix_seconds);
            }
            log.rotations = stats.rotations;
            log.truncations = stats.truncations;
            log.oversized = stats.oversized_lines;
            drop(guard);
            match result {
                Ok(polled) if !polled.present => {
                    let message = format!(
                        "log {} does not exist (yet); watching for it",
                        self.follower.path().display()
                    );
                    self.problem(tracing::Level::INFO, message);
                    return false;
                }
                Ok(polled) => {
                    self.has_read = true;
                    if !polled.more {
                        self.recovered();
                        return true;
                    }
                }
                Err(e) => {
                    self.problem(tracing::Level::WARN, e.to_string());
                    return false;
                }
            }
        }
    }

    /// tqdm ends a frame only when it draws the next one (each frame begins with `\r`), so the
    /// latest frame of a bar is always the file's unfinished last line, and a bar that stops
    /// would be shown one frame short forever. A pending tqdm frame that is whole (it ends with
    /// its bracket) is applied to the figures without being counted as a line; when its
    /// terminator arrives it is counted, and applying it again changes nothing.
    fn peek_pending_frame(&mut self, index: usize, run: &mut Run, now: f64) {
        let read = self.follower.stats().bytes;
        if self.parser.format() != Some(Format::Tqdm) || self.peeked_at == Some(read) {
            return;
        }
        self.peeked_at = Some(read);
        let Some(pending) = self.follower.pending() else {
            return;
        };
        let line = ansi::strip(pending, &mut self.stripped);
        if !line.trim_ascii_end().ends_with(b"]") {
            return;
        }
        if let Some(event @ Event::Progress(_)) = self.parser.tqdm().parse(line) {
            run.peek(index, event, now);
        }
    }

    fn announce_format(&self) {
        let path = self.follower.path().display();
        match &self.parser {
            Parser::Auto(detect) => {
                if let (Some(format), Some(reason)) = (detect.chosen(), detect.reason()) {
                    tracing::info!("log {path}: format {format}, detected from the line {reason:?}")
                }
            }
            Parser::Server(server) => {
                if let Some(format) = server.format() {
                    tracing::info!("server log {path}: format {format}");
                }
            }
            parser => {
                if let Some(format) = parser.format() {
                    tracing::info!("log {path}: format {format}, as configured");
                }
            }
        }
    }

    fn problem(&mut self, level: tracing::Level, message: String) {
        if self.last_problem.as_deref() != Some(message.as_str()) {
            if level == tracing::Level::WARN {
                tracing::warn!("{message}");
            } else {
                tracing::info!("{message}");
            }
            self.last_problem = Some(message);
        }
    }

    fn recovered(&mut self) {
        if self.last_problem.take().is_some() {
            tracing::info!("reading log {}", self.follower.path().display());
        }
    }
}

/// The format a restored model says a log was found to be in.
fn saved_format(run: &Mutex<Run>, path: &str) -> Option<crate::parse::Format> {
    let run = run.lock().unwrap_or_else(|e| e.into_inner());
    run.logs.iter().find(|l| l.path == path)?.format
}

/// What `auto` makes of the start of the log at `path` now (for `check-config`): the format and
/// the line that decides it, or why none is decided yet. Reads at most the first 1 MiB.
pub fn detect_now(path: &std::path::Path) -> Result<(crate::parse::Format, String), String> {
    use std::io::Read;
    const LIMIT: u64 = 1024 * 1024;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(LIMIT).read_to_end(&mut head))
        .map_err(|e| format!("cannot read it yet ({e})"))?;
    let mut detect = crate::parse::Detect::default();
    let mut stripped = Vec::new();
    for line in head.split(|&b| b == b'\n' || b == b'\r') {
        detect.parse(ansi::strip(line, &mut stripped));
        if let (Some(format), Some(reason)) = (detect.chosen(), detect.reason()) {
            return Ok((format, reason.to_owned()));
        }
    }
    Err("no recognisable line in its first 1 MiB yet".to_owned())
}
