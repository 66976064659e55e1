//! What each source may change in the run, and how: one method per update. The run's fields
//! are private to the model, so these (and the parsers' events, [`Run::ingest`]) are the only
//! ways in (docs/architecture.md#one-writer). Each takes plain values a source read, and
//! `now` where time matters; none reads a clock, a file or a socket.

use super::*;
use crate::collectors::Collectors;
use crate::run_identity::RunLabel;

/// What a log's tailer counts of its file, as of its latest poll.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TailCounts {
    pub rotations: u64,
    pub truncations: u64,
    pub oversized: u64,
    pub refused: u64,
}

/// The start-up: what the configuration says of the run, before any source reads.
impl Run {
    pub fn configure(
        &mut self,
        plan: Plan,
        identity: Option<RunLabel>,
        collectors_on: Collectors,
        discovered: Option<Discovered>,
    ) {
        self.plan = plan;
        self.identity.label = identity;
        self.collectors_on = collectors_on;
        self.discovered = DiscoveryFacts { found: discovered };
    }
}

/// Discovery and the logs.
impl Run {
    /// What discovery found in the run folder, as of its latest look.
    pub fn set_discovered(&mut self, found: Discovered) {
        self.discovered.found = Some(found);
    }

    /// The node's role in the run as the evidence now says it (docs/many-nodes.md#roles): a
    /// driver seen, a server tied to the run. A node with no run label has none to change.
    pub fn set_role(&mut self, role: crate::run_identity::Role) {
        if let Some(label) = &mut self.identity.label {
            label.role = role;
        }
    }

    /// A read of `path` has not returned since `since`: the file system under it hangs.
    pub fn file_hung(&mut self, path: String, since: Seconds) {
        self.calls.hung(Caller::File(path.clone()), path, since);
    }

    /// `path` answers again.
    pub fn file_answers(&mut self, path: &str) {
        self.calls.answers(&Caller::File(path.to_owned()));
    }

    /// The node's offset from UTC, seconds east, as the clock says at start-up.
    pub fn set_utc_offset(&mut self, seconds_east: i64) {
        self.utc_offset = seconds_east;
    }

    /// Whether log `index` is an inference server's (configured so; a snapshot does not say).
    pub fn set_server_log(&mut self, index: usize, server: bool) {
        if let Some(log) = self.logs.get_mut(index) {
            log.server = server;
        }
    }

    /// The format log `index` is read in, once configured or found; returns whether it is news.
    pub fn set_log_format(&mut self, index: usize, format: Option<crate::parse::Format>) -> bool {
        let Some(log) = self.logs.get_mut(index) else {
            return false;
        };
        let news = log.format != format;
        log.format = format;
        news
    }

    /// What wraps log `index`'s lines, once configured or found; returns whether it is news.
    pub fn set_log_envelope(
        &mut self,
        index: usize,
        envelope: Option<crate::parse::envelope::Envelope>,
    ) -> bool {
        let Some(log) = self.logs.get_mut(index) else {
            return false;
        };
        let news = log.envelope != envelope;
        log.envelope = envelope;
        news
    }

    /// What the tailer of log `index` counted, and the file's birth time once asked for.
    pub fn tailed(&mut self, index: usize, counts: TailCounts, born: Option<Option<Seconds>>) {
        let Some(log) = self.logs.get_mut(index) else {
            return;
        };
        if let Some(born) = born {
            log.began_at = born;
        }
        log.rotations = counts.rotations;
        log.truncations = counts.truncations;
        log.oversized = counts.oversized;
        log.refused = counts.refused;
    }
}

/// The output and input files.
impl Run {
    /// Whether `path` is refused now for being no regular file (a FIFO, a socket).
    pub fn file_refused(&mut self, path: String, refused: bool) {
        self.outputs.refuse(path, refused);
    }

    /// Record ids remembered on the node now.
    pub fn set_identities_stored(&mut self, stored: usize) {
        self.outputs.identities_stored = stored;
    }

    /// An input file's planned requests.
    pub fn set_input_file(&mut self, path: String, file: InputFile) {
        Arc::make_mut(&mut self.outputs.inputs).insert(path, file);
    }

    /// A reader of the output source went into `path` (a file, or a glob) at `now`.
    pub fn reading_began(&mut self, reader: u64, path: String, now: Seconds) {
        self.calls.began(Caller::Output(reader), path, now);
    }

    /// The reader made progress: it is not hung.
    pub fn reading_progressed(&mut self, reader: u64, now: Seconds) {
        self.calls.progressed(&Caller::Output(reader), now);
    }

    /// The reader came out.
    pub fn reading_ended(&mut self, reader: u64) {
        self.calls.answers(&Caller::Output(reader));
    }

    /// How the output source holds and watches its files, as of its latest pass.
    pub fn set_output_files(&mut self, files: OutputFiles) {
        self.outputs.held = files;
    }
}

/// The GPUs, the driver process, the run's id.
impl Run {
    /// A critical XID error on GPU `uuid`; `code` where NVML said it.
    pub fn xid_error(&mut self, uuid: String, code: Option<u64>) {
        self.gpu.xid_error(uuid, code);
    }

    /// An NVML call has not returned since `since`; returns whether that is news.
    pub fn gpu_hung(&mut self, since: Seconds) -> bool {
        self.calls.hung(Caller::Gpu, "NVML".to_owned(), since)
    }

    /// NVML answered; returns whether it had hung.
    pub fn gpu_answers(&mut self) -> bool {
        self.calls.answers(&Caller::Gpu)
    }

    /// The driver process found now (its pid), or none: what changed since the last look.
    pub fn process_seen(&mut self, pid: Option<u32>, now: Seconds) -> Option<ProcessChange> {
        self.process.seen(pid, now)
    }

    /// The run's id, as the run-id source read it for the run `runs_started` counts.
    pub fn set_run_id(&mut self, id: String, runs_started: u64) {
        self.identity.run_id = Some((id, runs_started));
    }
}

/// The recent past (the recorder keeps it on disk; the alert engine marks it).
impl Run {
    /// The history as saved before a restart.
    pub fn set_history(&mut self, history: history::History) {
        self.history = Arc::new(history);
    }

    /// Takes the run's figures now into the history.
    pub fn sample_history(&mut self, now: Seconds) {
        let mut history = std::mem::take(&mut self.history);
        Arc::make_mut(&mut history).sample(self, now);
        self.history = history;
    }

    /// An alert began (`firing`) or ended at `at`, for the charts.
    pub fn mark_alert(&mut self, at: Seconds, alert: &str, partition: Option<&str>, firing: bool) {
        Arc::make_mut(&mut self.history).mark(at, alert, partition, firing);
    }
}
