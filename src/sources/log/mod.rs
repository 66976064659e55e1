//! The log source: followers and parsers feeding the model.
//!
//! Each log is read on a thread of its own ([`worker`]); this source asks them to poll every
//! `poll_interval`, waits a moment for their answers, and says which logs are not readable or
//! hang. A log reads a bounded batch of bytes with no lock held and then applies it under the
//! model's lock ([`followed`]), so catching up on a large log never holds a scrape for more than
//! a few milliseconds, and a read that never returns holds it not at all.

mod followed;
mod spec;
mod worker;

use crate::clock;
use crate::collectors::Collector;
use crate::lock::Locked;
use crate::model::Run;
use crate::parse::{ansi, Parser};
use crate::sources::{Awaited, Built, Context, Following, Runs, Source, SourceConfig};
use crate::state::{LogPosition, Snapshot, StateDir};
use followed::FollowedLog;
pub use spec::LogConfig;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use worker::Worker;

/// How long a poll waits for the logs' answers; a log still reading after it is asked again
/// only once it answers.
const POLL_WAIT: Duration = Duration::from_secs(1);

pub struct LogSource {
    /// Logs not started yet (before the first poll, so a restore can reach them).
    pending: Vec<FollowedLog>,
    workers: Vec<Worker>,
    /// Each log's position as of the lines it has applied, kept under the model's lock.
    positions: Arc<Mutex<Vec<LogPosition>>>,
    run: Arc<Mutex<Run>>,
    state: Option<StateDir>,
    /// Saving failed last time: say so once, and again when it recovers.
    failing: bool,
    max_line_bytes: usize,
    /// Logs that discovery finds while the sidecar runs.
    additions: Option<mpsc::Receiver<LogConfig>>,
    /// The logs' switch counts the last snapshot recorded.
    saved_switches: Vec<u64>,
    /// The first poll, which reads the backlog to its end, is done.
    backlog_read: bool,
}

impl LogSource {
    /// A source for `logs`; with a state directory, it resumes from the last snapshot there.
    pub fn new(
        logs: &[LogConfig],
        max_line_bytes: usize,
        run: Arc<Mutex<Run>>,
        state: Option<StateDir>,
    ) -> LogSource {
        let pending: Vec<FollowedLog> = logs
            .iter()
            .map(|l| FollowedLog::new(l, max_line_bytes))
            .collect();
        let positions = pending.iter().map(FollowedLog::position).collect();
        let mut source = LogSource {
            pending,
            workers: Vec::new(),
            positions: Arc::new(Mutex::new(positions)),
            run,
            state,
            failing: false,
            max_line_bytes,
            additions: None,
            saved_switches: vec![0; logs.len()],
            backlog_read: false,
        };
        if let Some(snapshot) = source.state.as_ref().and_then(StateDir::load) {
            source.restore(snapshot, &Self::paths(logs));
        }
        source.run.locked().set_utc_offset(clock::utc_offset());
        if !logs.is_empty() {
            let mut run = source.run.locked();
            run.expect_collector(Collector::Log);
            for (index, log) in logs.iter().enumerate() {
                run.set_server_log(index, log.server);
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
            tracing::info!(
                path = %log.path.display(),
                "following the discovered {kind} {}",
                log.path.display()
            );
            let followed = FollowedLog::new(&log, self.max_line_bytes);
            let mut run = self.run.locked();
            run.add_log(log.path.display().to_string(), log.server);
            self.positions.locked().push(followed.position());
            drop(run);
            self.saved_switches.push(0);
            self.pending.push(followed);
        }
    }

    /// Starts the logs not started yet, each on its thread.
    fn start_pending(&mut self) {
        for log in std::mem::take(&mut self.pending) {
            let index = self.workers.len();
            let path = log.follower.path().display().to_string();
            match Worker::start(log, index, self.run.clone(), self.positions.clone()) {
                Ok(worker) => self.workers.push(worker),
                Err(e) => {
                    tracing::error!(path = %path, "cannot start a thread to read {path}: {e}")
                }
            }
        }
    }

    fn restore(&mut self, snapshot: Snapshot, paths: &[String]) {
        {
            let mut run = self.run.locked();
            *run = Run::restored(snapshot.run, paths, &run);
        }
        let mut positions = self.positions.locked();
        for ((log, path), position) in self.pending.iter_mut().zip(paths).zip(positions.iter_mut())
        {
            let Some(saved) = snapshot.logs.iter().find(|l| &l.path == path) else {
                continue;
            };
            log.follower.set_stats(saved.stats);
            if let Some(envelope) = saved_envelope(&self.run, path) {
                log.unwrap.assume(envelope);
            }
            match (&mut log.parser, saved_format(&self.run, path)) {
                (Parser::Auto(detect), Some(format)) => detect.assume(format),
                (Parser::Server(server), Some(format)) => server.assume(format),
                _ => {}
            }
            // Resumed lines were read by the sidecar before; they are not a catch-up backlog.
            log.has_read = true;
            // Found again on the log's own thread, at its first poll: the files may be on a
            // file system that hangs.
            log.resume_from(saved.clone());
            *position = saved.clone();
        }
    }

    /// Saves the model and the tail positions, if a state directory is configured. A failure
    /// is logged once until it recovers; the sidecar goes on without it. The positions are
    /// those of the lines the model holds, whatever a log is reading now.
    pub fn save_snapshot(&mut self) {
        let Some(state) = &self.state else {
            return;
        };
        let (run, logs) = {
            let run = self.run.locked();
            let logs = self.positions.locked().clone();
            (run.clone(), logs)
        };
        for (saved, worker) in self.saved_switches.iter_mut().zip(&self.workers) {
            *saved = worker.last.switches;
        }
        match state.save(&Snapshot::new(run, logs, clock::now())) {
            Ok(()) if self.failing => {
                tracing::info!("saving snapshots again");
                self.failing = false;
            }
            Ok(()) => {}
            Err(e) if !self.failing => {
                tracing::warn!(
                    path = %state.snapshot_path().display(),
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

    /// Asks every log to read to its current end, and waits up to [`POLL_WAIT`] for them;
    /// the first time, for as long as they make progress: the backlog is read before the
    /// sidecar is ready, judges or records anything.
    pub fn poll(&mut self) {
        self.poll_unless(&|| false);
    }

    /// [`LogSource::poll`], the first one giving up once `stopping()`.
    pub fn poll_unless(&mut self, stopping: &dyn Fn() -> bool) {
        if self.backlog_read {
            self.poll_waiting(POLL_WAIT);
        } else {
            self.read_to_end(stopping);
        }
    }

    /// Reads every log to its end, waiting as long as they make progress: `run --once`.
    pub fn poll_to_end(&mut self) {
        self.read_to_end(&|| false);
    }

    fn read_to_end(&mut self, stopping: &dyn Fn() -> bool) {
        self.backlog_read = true;
        self.poll_waiting(Duration::ZERO);
        while self.workers.iter().any(|w| w.busy() && !w.stuck()) && !stopping() {
            self.collect(Instant::now() + Duration::from_millis(100));
        }
        self.report(Duration::ZERO);
    }

    fn poll_waiting(&mut self, wait: Duration) {
        self.take_additions();
        self.start_pending();
        if self.workers.is_empty() {
            return;
        }
        let started = Instant::now();
        for worker in &mut self.workers {
            worker.ask();
        }
        self.collect(started + wait);
        self.report(started.elapsed());
    }

    /// Takes the answers that arrive by `deadline`.
    fn collect(&mut self, deadline: Instant) {
        for worker in &mut self.workers {
            if worker.answered_by(deadline) && worker.hung {
                worker.hung = false;
                tracing::info!(
                    path = %worker.path,
                    "{} answers again; reading it",
                    worker.path
                );
                self.run.locked().file_answers(&worker.path);
            }
        }
    }

    /// Says which logs hang, sets the collector's state, and saves a snapshot at once when a
    /// log switched files.
    fn report(&mut self, elapsed: Duration) {
        let now = clock::now();
        let mut all_up = true;
        let mut newly_hung = Vec::new();
        for worker in &mut self.workers {
            if worker.stuck() && !worker.hung {
                worker.hung = true;
                newly_hung.push(worker.path.clone());
            }
            all_up &= worker.last.ok && !worker.hung;
        }
        {
            let mut run = self.run.locked();
            for path in &newly_hung {
                tracing::warn!(
                    path = %path,
                    "{path}: a read has not returned for {}s: the file system under it does not answer; the other logs go on",
                    crate::model::HUNG_AFTER
                );
                run.file_hung(path.clone(), now - crate::model::HUNG_AFTER);
            }
            run.set_collector(Collector::Log, all_up, elapsed.as_secs_f64());
        }
        // A rotation changes which files a restart must find: record it now, not at the next
        // interval, so a kill loses at most what was read since.
        if self
            .workers
            .iter()
            .zip(&self.saved_switches)
            .any(|(w, saved)| w.last.switches != *saved)
        {
            self.save_snapshot();
        }
    }
}

impl Source for LogSource {
    fn poll(&mut self) {
        LogSource::poll(self);
    }

    fn poll_unless(&mut self, stopping: &dyn Fn() -> bool) {
        LogSource::poll_unless(self, stopping);
    }

    fn save_snapshot(&mut self) {
        LogSource::save_snapshot(self);
    }
}

/// The log source's section of the configuration: the progress and server logs, the longest
/// line kept, and how often they are read.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `logs` and `server_logs`, those of the collectors switched off left out.
    pub logs: Vec<LogConfig>,
    /// `max_line_bytes`: a longer line is dropped (and counted), so a runaway line cannot
    /// take the memory.
    pub max_line_bytes: usize,
    /// `poll_interval`.
    pub interval: Duration,
}

impl SourceConfig for Following<Settings, mpsc::Receiver<LogConfig>> {
    /// Built first: it restores the model from the state directory's snapshot.
    fn build(self: Box<Self>, cx: &mut Context) -> anyhow::Result<Option<Built>> {
        let Following {
            settings: this,
            found,
        } = *self;
        let mut source = LogSource::new(
            &this.logs,
            this.max_line_bytes,
            cx.run.clone(),
            cx.state.clone(),
        );
        if let Some(found) = found {
            source = source.with_additions(found);
        }
        Ok(Some(Built {
            name: "log-source",
            collectors: &[Collector::Log, Collector::Server],
            interval: this.interval,
            awaited: Awaited::ByAll,
            runs: Runs::Thread(Box::new(source)),
        }))
    }
}

/// The format a restored model says a log was found to be in.
fn saved_format(run: &Mutex<Run>, path: &str) -> Option<crate::parse::Format> {
    let run = run.locked();
    run.logs().iter().find(|l| l.path == path)?.format
}

/// The envelope a restored model says a log's lines were found in.
fn saved_envelope(run: &Mutex<Run>, path: &str) -> Option<crate::parse::envelope::Envelope> {
    let run = run.locked();
    run.logs().iter().find(|l| l.path == path)?.envelope
}

/// What `auto` makes of the start of the log at `path` now (for `check-config`): the format and
/// the line that decides it, or why none is decided yet. Reads at most the first 1 MiB.
pub fn detect_now(path: &std::path::Path) -> Result<(crate::parse::Format, String), String> {
    use std::io::Read;
    const LIMIT: u64 = 1024 * 1024;
    let mut head = Vec::new();
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Err(
            "it is not a regular file (a FIFO, a socket or a device); only regular files are read"
                .to_owned(),
        );
    }
    crate::tail::open_nonblocking(path)
        .and_then(|f| f.take(LIMIT).read_to_end(&mut head))
        .map_err(|e| format!("cannot read it yet ({e})"))?;
    let mut detect = crate::parse::Detect::default();
    let mut stripped = Vec::new();
    let mut found = None;
    crate::parse::envelope::texts(&head, &mut |text| {
        if found.is_none() {
            detect.parse(ansi::strip(text, &mut stripped));
            if let (Some(format), Some(reason)) = (detect.chosen(), detect.reason()) {
                found = Some((format, reason.to_owned()));
            }
        }
    });
    if let Some(found) = found {
        return Ok(found);
    }
    Err("no recognisable line in its first 1 MiB yet".to_owned())
}
