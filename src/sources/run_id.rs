//! The run's id read into the model as any input is: a source on its own thread (the
//! progress log may be on a mount that hangs), polled every few seconds (docs/many-nodes.md#run-ids).

use crate::collectors::Collector;
use crate::lock::Locked;
use crate::model::Run;
use crate::run_identity::RunIdentity;
use crate::sources::{Awaited, Built, Context, Runs, Source, SourceConfig};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Reads the run's id into the model, as a source does: once the log has a first line, and
/// again when a new run begins in its place. On the node that follows the log, the log source
/// says when ([`Run::runs_started`](crate::model::Run::runs_started)): a rotated log's new
/// file is the same run. A node that does not follow it (a worker) sees a new run when the
/// log's first line changes to one that begins a run ([`crate::parse::starts_a_run`]).
pub struct RunIdSource {
    identity: RunIdentity,
    run: Arc<Mutex<Run>>,
    /// The log's head the id was read from.
    read: Option<(u64, Vec<u8>)>,
    follows_log: bool,
}

impl RunIdSource {
    pub fn new(identity: RunIdentity, run: Arc<Mutex<Run>>, follows_log: bool) -> RunIdSource {
        RunIdSource {
            identity,
            run,
            read: None,
            follows_log,
        }
    }
}

impl Source for RunIdSource {
    fn poll(&mut self) {
        let (runs_started, known) = {
            let run = self.run.locked();
            (run.runs_started(), run.run_id().as_ref().map(|(_, n)| *n))
        };
        let wanted = match (&self.read, self.follows_log) {
            (None, _) => true,
            (Some(_), true) => known != Some(runs_started),
            // A worker reads the head on every poll; a cheap read of at most 4 KiB.
            (Some(_), false) => true,
        };
        if !wanted {
            return;
        }
        // Read outside the lock: the log may be on a mount that hangs.
        let Some(head) = self.identity.head() else {
            return;
        };
        if !self.follows_log {
            let begins = self
                .read
                .as_ref()
                .is_none_or(|(_, old)| *old != head.1 && crate::parse::starts_a_run(&head.1));
            if !begins {
                return;
            }
        }
        let id = self.identity.id_of(&head);
        self.run.locked().set_run_id(id, runs_started);
        self.read = Some(head);
    }

    fn save_snapshot(&mut self) {}
}

/// How often the run's id is looked at: a new run in the log's place is told within this.
const INTERVAL: Duration = Duration::from_secs(5);

/// The run-id source's section of the configuration: the run this node belongs to, and
/// whether this node follows its progress log (or only reads its head, as a worker).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `None` where the node has no run (a node with only GPUs): the source is not built.
    pub identity: Option<RunIdentity>,
    /// Whether a progress log is followed here, whose source says when a new run begins.
    pub follows_log: bool,
}

impl SourceConfig for Settings {
    fn build(self: Box<Self>, cx: &mut Context) -> anyhow::Result<Option<Built>> {
        const NONE: &[Collector] = &[];
        Ok(self.identity.map(|identity| Built {
            name: "run-id",
            collectors: NONE,
            interval: INTERVAL,
            // It holds nothing up: its log may be on a mount that hangs.
            awaited: Awaited::ByNothing,
            runs: Runs::Thread(Box::new(RunIdSource::new(
                identity,
                cx.run.clone(),
                self.follows_log,
            ))),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a node that does not follow the log, the source reads a new id when the log's first
    /// line becomes one that begins a run, not when a rotation leaves more progress there.
    #[test]
    fn a_worker_reads_a_new_id_for_a_new_run_not_for_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("progress.log");
        std::fs::write(&log, "Model: m\n  3/10 (0 err)\n").unwrap();
        let run = std::sync::Arc::new(std::sync::Mutex::new(Run::default()));
        let mut source = RunIdSource::new(
            RunIdentity::new(
                crate::run_identity::RunLabel {
                    run: "a".into(),
                    role: crate::run_identity::Role::Worker,
                },
                vec![log.clone()],
            ),
            run.clone(),
            false,
        );
        let id = || run.lock().unwrap().run_id().clone().map(|(id, _)| id);
        source.poll();
        let first = id().expect("read");
        std::fs::rename(&log, dir.path().join("progress.log.1")).unwrap();
        std::fs::write(&log, "  4/10 (0 err) 1.0 req/s\n").unwrap();
        source.poll();
        assert_eq!(id().as_ref(), Some(&first), "a rotation: the same run");
        std::fs::write(&log, "Model: m2\n").unwrap();
        source.poll();
        assert!(id().is_some_and(|id| id != first), "a new run");
    }
}
