//! Which run this node watches (docs/many-nodes.md#run-ids): the label the configuration
//! gives, the id the run-id source read, and the new runs begun in the progress log's place.
//! Kept apart so a new run's bookkeeping lives in one place, and a snapshot carries only what
//! the configuration cannot give again.

use super::{RunStarted, Seconds};
use crate::run_identity::RunLabel;
use serde::{Deserialize, Serialize};

/// Flattened into [`super::Run`]'s snapshot: its serialized fields keep their names there.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Identity {
    /// The run this node belongs to (from the configuration); `None` on a node with no run.
    #[serde(skip)]
    pub(super) label: Option<RunLabel>,
    /// The run's id as the run-id source last read it (docs/many-nodes.md#run-ids), and the
    /// run it was read for (a count of `runs_started`): an id read for the run before is no
    /// word on this one.
    #[serde(skip)]
    pub(super) run_id: Option<(String, u64)>,
    /// New runs begun in the progress log's place while it was followed: a log replaced or
    /// rewritten by one beginning with other first lines ([`super::Run::begin_new_run`]).
    #[serde(default)]
    pub(super) runs_started: u64,
    /// When the latest of them began, and the id of the run it replaced.
    #[serde(default)]
    pub(super) run_started: Option<RunStarted>,
}

impl Identity {
    /// A new run begins: counted, and told with the id of the run it replaces.
    pub(super) fn new_run(&mut self, at: Seconds, log: String, first_line: String) {
        self.runs_started += 1;
        self.run_started = Some(RunStarted {
            at,
            log,
            first_line,
            previous_id: self.run_id.as_ref().map(|(id, _)| id.clone()),
        });
    }
}
