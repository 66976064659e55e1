//! The model of a run: what the sources have told us, and what follows from it.
//!
//! Pure data with methods. Every method that depends on time takes `now` (Unix seconds) as an
//! argument and nothing here reads a clock, a file or a socket, so every behaviour is testable
//! without sleeping.

mod access;
mod alert_counts;
mod discovery;
mod evidence;
mod gpu;
pub mod history;
mod hung;
mod identity;
mod node;
mod outputs;
mod partition;
mod plan;
mod progress;
mod recent;
mod records;
mod server_log;
pub mod slurm;
pub mod stacks;
mod updates;
mod window;

pub use alert_counts::{ActionResult, Delivered, NotificationKey};
pub use discovery::{
    Discovered, DiscoveredLog, DiscoveredProcess, DiscoveredServer, DiscoveryFacts, BY_CONNECTION,
    ONLY_ONE,
};
pub use evidence::{Evidence, FIRST_REPORT_DEFAULT};
pub use gpu::{
    xid_label, GpuPids, GpuProcess, GpuReading, GpuSample, Gpus, CRITICAL_XIDS,
    PIDS_IN_ANOTHER_NAMESPACE,
};
pub use hung::{Caller, Calls, Hung};
pub use identity::Identity;
pub use node::{ProcessChange, ProcessFacts, ProcessState, ServerFacts, ServerState};
pub use outputs::{
    InputFile, OutputFile, OutputFiles, OutputStats, Outputs, PartitionView, PassMark, RunTotals,
    MISMATCH_MIN_GAP,
};
pub use partition::Partition;
pub use plan::{Deadline, Plan, Projection, BAND_WINDOWS, BAND_WINDOW_POINTS};
pub use progress::Progress;
pub use recent::RecentLines;
pub use records::{Facts, RecentCounts, RecentRecords, TokenHistogram, RECENT_RECORDS, TRUNCATED};
pub use server_log::{ServerFigures, ServerLogState, DECODE_SILENCE};
pub use updates::TailCounts;
pub use window::Window;

use crate::collectors::Collector;
use crate::parse::{Event, ServerLine, ServerRead};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Unix time in seconds.
pub type Seconds = f64;

/// A read that has not returned for this long is hung: the file system under the file does
/// not answer.
pub const HUNG_AFTER: Seconds = 10.0;

/// Partition name used when a format names none and no header announced one.
pub const DEFAULT_PARTITION: &str = "default";

/// The whole run as seen through its logs. Serializable: the state directory keeps it across
/// sidecar restarts, together with the tail positions it corresponds to.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Run {
    /// What the progress logs say. Flattened: a snapshot keeps its fields at its top level,
    /// as before.
    #[serde(flatten)]
    progress: Progress,
    /// Not in [`Progress`] (yet): the layout test checks its guard on this field of `Run`,
    /// and a snapshot keeps these after `Progress`'s fields, in this order.
    partitions: Arc<BTreeMap<String, Partition>>,
    logs: Vec<LogStats>,
    /// How the sources fare now; not carried across restarts.
    #[serde(skip)]
    collectors: BTreeMap<Collector, CollectorState>,
    /// The collectors switched on (`collectors`): the families of the others are not
    /// exported, even where a snapshot holds figures of theirs.
    #[serde(skip)]
    collectors_on: crate::collectors::Collectors,
    /// The last lines of the logs, matched or not, for the alert email and the status view.
    recent_lines: Arc<RecentLines>,
    /// The output and input files, as the output source reads them. It keeps its own
    /// snapshot of these.
    #[serde(skip)]
    outputs: Outputs,
    /// The driver process, when a probe for it is configured.
    #[serde(skip)]
    process: ProcessFacts,
    /// The inference server as its probe and its log say.
    #[serde(skip)]
    server: ServerFacts,
    /// The inference server's own log, when one is followed.
    #[serde(default)]
    server_log: Arc<ServerLogState>,
    /// The node's offset from UTC, seconds east: a server log line's time is local.
    #[serde(skip)]
    utc_offset: i64,
    /// The calls that do not return, or may not: files whose reads hang (a hung mount, a
    /// cause of its own), the files the output readers are in, NVML past its deadline (the
    /// last GPU reading is stale then, and its figures are not exported).
    #[serde(skip)]
    calls: Calls,
    /// The recent past at a fixed resolution; saved on its own (`history.json`).
    #[serde(skip)]
    history: Arc<history::History>,
    /// What discovery found, with `--run-dir`.
    #[serde(skip)]
    discovered: DiscoveryFacts,
    /// The deadline, budgets and price the run is held to (from the configuration).
    #[serde(skip)]
    plan: Plan,
    /// The GPUs' latest reading and XID errors, and the GPU time the run has held while a
    /// partition was being processed: only that time is in a snapshot, under its own name.
    #[serde(default, rename = "gpu_seconds", with = "gpu::held_seconds")]
    gpu: Gpus,
    /// Which run this is: its label, its id, the new runs begun in its log's place. Flattened:
    /// a snapshot keeps `runs_started` and `run_started` at its top level, as before.
    #[serde(flatten)]
    identity: Identity,
    /// The run's SLURM job, once the SLURM source found one (docs/slurm.md). Not kept across
    /// the sidecar's restarts: what the controller said then (a job ending, the warning) is no
    /// word on the job now, and a requeued job's environment says its restarts.
    #[serde(skip)]
    slurm: Option<slurm::SlurmJob>,
}

/// A new run in the progress log's place, for the `RunStarted` notice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStarted {
    pub at: Seconds,
    /// The log it was seen in, and its new first line.
    pub log: String,
    pub first_line: String,
    /// The id of the run before, where it was known.
    pub previous_id: Option<String>,
}

/// One alert instance, for `pulse_alert_firing`.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertState {
    pub alert: String,
    pub partition: Option<String>,
    pub firing: bool,
    pub summary: String,
    /// Held back by a silence.
    pub silenced: bool,
}

/// Per-log counters, exported with a `path` label.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LogStats {
    pub path: String,
    pub lines: u64,
    pub matched: u64,
    /// An inference server's log: its lines are kept in the server's own tail.
    #[serde(default)]
    pub server: bool,
    /// Lines that looked like progress but could not be read exactly.
    #[serde(default)]
    pub unparsed: u64,
    /// The format the lines are read in (configured, or found by `auto`); `None` while `auto`
    /// has not decided. Kept across restarts so a resumed log needs no second detection.
    #[serde(default)]
    pub format: Option<crate::parse::Format>,
    /// What wraps its lines (configured, or found by `auto`), kept across restarts likewise.
    #[serde(default)]
    pub envelope: Option<crate::parse::envelope::Envelope>,
    /// When the log's first line was written (the file's birth time), for telling this
    /// run's output files from an earlier run's. `None` where the file system does not say.
    #[serde(default)]
    pub began_at: Option<Seconds>,
    pub rotations: u64,
    pub truncations: u64,
    pub oversized: u64,
    /// Times its path was found to be no regular file (a FIFO, a socket): never opened.
    #[serde(default)]
    pub refused: u64,
    /// The partition that progress lines without a name belong to: the latest header.
    current: Option<String>,
    /// The first line of the run the log holds: a log rewritten from its start with another
    /// first line (that begins a run) holds a new run.
    #[serde(default)]
    pub first_line: Option<String>,
}

/// What the alert sinks publish for the others to show (`pulse_alert_*`, `/status`'s alerts):
/// the alert engine and the heartbeat write it, outside the run, which they only read
/// (`lock::Published`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlertView {
    /// Alert instances pending or firing, as the alert engine last saw them.
    pub alerts: Vec<AlertState>,
    /// Rounds of the alert engine: evaluated, and held back while an input is on its first
    /// read.
    pub rounds: AlertRounds,
    /// Notification outcomes by alert, result and channel.
    pub notifications: BTreeMap<NotificationKey, u64>,
    /// Alert emails sent without their chart because it could not be drawn.
    pub chart_failures: u64,
    /// When the heartbeat's outside service last took a ping.
    pub heartbeat_last_success: Option<Seconds>,
    /// The last stacks taken of the run's processes (kept in the state directory by the alert
    /// engine, which takes them when a stuck run's alert fires).
    pub stacks: Option<std::sync::Arc<stacks::Captures>>,
    /// Action runs by (action, result), for `pulse_actions_total`.
    pub action_counts: BTreeMap<(String, ActionResult), u64>,
    /// The latest action runs, the newest last (docs/alerts.md#actions).
    pub action_runs: Vec<ActionRun>,
}

/// One run of an action: what `/status`, the page and the state directory keep of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ActionRun {
    pub action: String,
    pub alert: String,
    #[serde(default)]
    pub partition: Option<String>,
    pub started_at: Seconds,
    /// `running` until it ends, then `ok`, `failed`, `timeout` or `dry_run`.
    pub result: ActionResult,
    #[serde(default)]
    pub seconds: Option<f64>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The line the alert's notifications carry: "ran `restart-sglang` (exit 0, 12 s)".
    pub said: String,
    /// What it printed (stdout, then stderr), capped.
    #[serde(default)]
    pub output: String,
}

/// Rounds of the alert engine since the sidecar started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlertRounds {
    pub evaluated: u64,
    /// Held back: some input was still on its first read.
    pub waiting: u64,
}

/// How a source fared on its latest collection.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CollectorState {
    pub up: bool,
    pub duration_seconds: f64,
    /// Collections ended since the sidecar started: what "the next poll has happened" is
    /// waited on with, by a test or a user.
    pub runs: u64,
}

impl Run {
    /// A run followed through these logs (indexes into `logs` identify them in [`Run::ingest`]).
    pub fn new(log_paths: &[String]) -> Run {
        Run {
            logs: log_paths
                .iter()
                .map(|p| LogStats {
                    path: p.clone(),
                    ..LogStats::default()
                })
                .collect(),
            ..Run::default()
        }
    }

    /// A run restored from a snapshot, for the logs configured now: a log's counters (and the
    /// partition its progress lines belong to) carry over when its path was followed before.
    pub fn restored(mut saved: Run, log_paths: &[String], configured: &Run) -> Run {
        // What the configuration gives is not in the snapshot: this start's stands.
        saved.plan = configured.plan.clone();
        saved.identity.label = configured.identity.label.clone();
        saved.collectors_on = configured.collectors_on;
        saved.discovered = configured.discovered.clone();
        let mut old = std::mem::take(&mut saved.logs);
        saved.logs = log_paths
            .iter()
            .map(|path| match old.iter().position(|l| &l.path == path) {
                Some(i) => old.swap_remove(i),
                None => LogStats {
                    path: path.clone(),
                    ..LogStats::default()
                },
            })
            .collect();
        saved
    }

    /// Every file whose read does not return at `now`, and since when: the logs found hung
    /// by their threads, and the output file being read, if for [`HUNG_AFTER`] already.
    pub fn hung(&self, now: Seconds) -> BTreeMap<String, Seconds> {
        self.calls.files(now)
    }

    /// Whether collector `name` works at `now`: its latest collection did, and it is not stuck
    /// in a read that does not return.
    pub fn collector_up(&self, collector: Collector, state: &CollectorState, now: Seconds) -> bool {
        let stuck = collector == Collector::Outputs && self.calls.outputs(now);
        state.up && !stuck
    }

    /// Takes one line of log `log` and what the parser made of it.
    pub fn ingest(&mut self, log: usize, line: &[u8], event: Option<Event<'_>>, now: Seconds) {
        let stats = &mut self.logs[log];
        stats.lines += 1;
        if stats.first_line.is_none() && !stats.server {
            stats.first_line = Some(first_line_text(line));
        }
        if stats.server {
            // Lines about single requests (the access log, our own probes among them) would
            // push out what the engine said.
            if !matches!(
                event,
                Some(Event::Server(ServerRead {
                    line: ServerLine::Request(_),
                    ..
                }))
            ) {
                Arc::make_mut(&mut self.server_log).tail.push(line);
            }
        } else {
            Arc::make_mut(&mut self.recent_lines).push(line);
        }
        match event {
            Some(Event::Unparsed) => stats.unparsed += 1,
            Some(event) => {
                stats.matched += 1;
                self.apply(log, event, line, now);
            }
            None => {}
        }
    }

    /// Whether `line`, the first of a progress log's content after it was rewritten from its
    /// start or `replaced` by another file, begins a new run: it begins one, and not the one
    /// the log held. A driver restarted into the same file prints the same first lines and
    /// resumes its run; a new file that begins a run is a new run even with the same first
    /// line (the seed's driver begins every run with `Loading tokenizer from MODEL...`), as the
    /// run id, made of the file's inode and first line, says (docs/many-nodes.md#run-ids).
    pub fn is_new_run(&self, log: usize, line: &[u8], replaced: bool) -> bool {
        let stats = &self.logs[log];
        !stats.server
            && stats
                .first_line
                .as_ref()
                .is_some_and(|old| replaced || *old != first_line_text(line))
            && crate::parse::starts_a_run(line)
    }

    /// A new run begins in log `log`'s place with `line`: the run before it is over, and
    /// nothing of its progress, its partitions or its end is carried into this one (its output
    /// files stay, as an earlier run's, docs/formats.md#output-files).
    pub fn begin_new_run(&mut self, log: usize, line: &[u8], now: Seconds) {
        let path = self.logs[log].path.clone();
        tracing::info!(
            path = %path,
            "a new run begins in {path}: its first line is now {:?}",
            first_line_text(line)
        );
        self.progress.new_run();
        Arc::make_mut(&mut self.partitions).clear();
        for stats in &mut self.logs {
            stats.current = None;
        }
        self.outputs.new_run();
        self.gpu.new_run();
        let stats = &mut self.logs[log];
        stats.first_line = Some(first_line_text(line));
        stats.began_at = Some(now);
        self.identity.new_run(now, path, first_line_text(line));
    }

    /// Takes a server probe's result; remembers when the server was last seen generating, which
    /// stands in for a partition's first report while it may still take a while.
    pub fn set_server(&mut self, server: ServerState, now: Seconds) {
        let up = server.up == Some(true);
        // A server that comes back up (restarted by its supervisor) starts again: it was not
        // stuck while it was down, and until its health passes it is starting (its warm-up's
        // 503s and requests taken are not a hang).
        if up
            && self
                .server
                .state
                .as_ref()
                .is_some_and(|s| s.up == Some(false))
        {
            self.server.working_at = Some(now);
            self.server.probed = Some((now, false));
        }
        // Without a health URL, a metrics answer is the server passing.
        let passed = server.health_passed || (server.up.is_none() && server.error.is_none());
        let probed = self.server.probed.get_or_insert((now, false));
        probed.1 |= passed;
        // A server whose generating /health gets no token is neither idle nor working, whatever
        // its frozen gauges say.
        if server.error.is_none() && server.running_requests.is_some() && !server.busy {
            self.note_server(
                server.running_requests,
                server.queued_requests,
                server.generation_tokens_per_second,
                now,
            );
        }
        self.server.state = Some(server);
    }

    /// Applies what a line not yet finished says (tqdm's latest frame), without counting it
    /// as a line: it is counted when its terminator arrives.
    pub fn peek(&mut self, log: usize, event: Event<'_>, now: Seconds) {
        self.apply(log, event, &[], now);
    }

    /// Applies what line `text` of log `log` said.
    fn apply(&mut self, log: usize, event: Event<'_>, text: &[u8], now: Seconds) {
        match event {
            Event::Model(name) => self.progress.model_name = Some(name.to_owned()),
            Event::Queued | Event::Unparsed => {}
            Event::RunComplete => self.progress.complete_said = true,
            Event::StageDone => self.progress.stage_done = true,
            Event::Working => {
                self.progress.stage_done = false;
                self.progress.working_at =
                    Some(self.progress.working_at.map_or(now, |at| at.max(now)));
            }
            Event::Server(read) => {
                if let Some(format) = self.logs[log].format {
                    Arc::make_mut(&mut self.server_log).format = Some(format);
                }
                self.server_line(read, text, now)
            }
            Event::Partition { name, mode } => {
                // A driver that starts another partition has more to do.
                self.progress.complete_said = false;
                self.progress.stage_done = false;
                self.switch_to(log, name);
                let p = self.partition_mut(name);
                p.announce(now);
                if let Some(mode) = mode {
                    p.mode = Some(mode.to_owned());
                }
            }
            Event::Planned { name, planned } => self.partition_mut(name).planned = Some(planned),
            Event::Running {
                requests,
                concurrency,
                max_tokens,
            } => {
                let name = self.current(log).to_owned();
                let p = self.partition_mut(&name);
                p.planned = Some(requests);
                p.concurrency = concurrency.or(p.concurrency);
                p.max_tokens = max_tokens.or(p.max_tokens);
            }
            Event::Progress(progress) => {
                self.progress.stage_done = false;
                match progress.partition {
                    Some(named) => self.switch_to(log, named),
                    None => {
                        self.current(log);
                    }
                }
                // The hot path: borrow the name from the log's state, allocate nothing.
                let name = self.logs[log]
                    .current
                    .as_deref()
                    .unwrap_or(DEFAULT_PARTITION);
                match Arc::make_mut(&mut self.partitions).get_mut(name) {
                    Some(p) => p.progress(&progress, now),
                    None => {
                        let name = name.to_owned();
                        self.partition_mut(&name).progress(&progress, now);
                    }
                }
            }
        }
    }

    /// The partition progress lines of `log` belong to, creating the default one if none was announced.
    fn current(&mut self, log: usize) -> &str {
        let current = &mut self.logs[log].current;
        if current.is_none() {
            *current = Some(DEFAULT_PARTITION.to_owned());
            Arc::make_mut(&mut self.partitions)
                .entry(DEFAULT_PARTITION.to_owned())
                .or_default()
                .active = true;
        }
        self.logs[log]
            .current
            .as_deref()
            .unwrap_or(DEFAULT_PARTITION)
    }

    /// Makes `name` the current partition of `log`; the one it replaces is no longer active.
    fn switch_to(&mut self, log: usize, name: &str) {
        let current = &mut self.logs[log].current;
        if current.as_deref() == Some(name) {
            return;
        }
        if let Some(old) = current.replace(name.to_owned()) {
            if let Some(p) = Arc::make_mut(&mut self.partitions).get_mut(&old) {
                p.active = false;
            }
        }
        self.partition_mut(name).active = true;
    }

    fn partition_mut(&mut self, name: &str) -> &mut Partition {
        // Look up before inserting: the common case must not allocate a key.
        if !self.partitions.contains_key(name) {
            Arc::make_mut(&mut self.partitions).insert(name.to_owned(), Partition::default());
        }
        Arc::make_mut(&mut self.partitions)
            .get_mut(name)
            .expect("inserted above")
    }

    /// Restart count over all partitions.
    pub fn restarts(&self) -> u64 {
        self.partitions.values().map(|p| p.restarts).sum()
    }

    /// Lists a collector as down unless it has already reported. Each source calls it when it
    /// is made, so a scrape before its first read shows `pulse_collector_up 0` rather than no
    /// series at all.
    /// A log followed from now on (found by discovery); returns its index for `ingest`.
    pub fn add_log(&mut self, path: String, server: bool) -> usize {
        self.logs.push(LogStats {
            path,
            server,
            ..LogStats::default()
        });
        self.expect_collector(Collector::Log);
        self.logs.len() - 1
    }

    /// The server is no longer the run's (discovery's guess was contradicted): nothing of it
    /// is shown or judged any more, as if it had never been probed.
    pub fn forget_server(&mut self) {
        self.server.state = None;
        self.server.generating_at = None;
        self.server.working_at = None;
        self.server.seen_at = None;
        self.collectors.remove(&Collector::Server);
    }

    pub fn expect_collector(&mut self, collector: Collector) {
        self.collectors.entry(collector).or_default();
    }

    pub fn set_collector(&mut self, collector: Collector, up: bool, duration_seconds: f64) {
        let state = self.collectors.entry(collector).or_default();
        state.up = up;
        state.duration_seconds = duration_seconds;
        state.runs += 1;
    }
}

#[cfg(test)]
mod tests;

/// A log's first line as kept and compared: at most 512 bytes of it, as text.
fn first_line_text(line: &[u8]) -> String {
    String::from_utf8_lossy(&line[..line.len().min(512)]).into_owned()
}
