//! What the progress logs say of the run as a whole (docs/formats.md): its model, whether the
//! driver or a library said the work is done. Kept apart so a new run's reset of them lives in
//! one place.

use super::Seconds;
use serde::{Deserialize, Serialize};

/// Flattened into [`super::Run`]'s snapshot: its fields keep their names and order there.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Progress {
    /// `Model:` from the log, for `pulse_pipeline_info`.
    pub(super) model_name: Option<String>,
    /// The driver's log said the whole run is done, and no partition began after.
    #[serde(default)]
    pub(super) complete_said: bool,
    /// A library's log said a stage of its work is done, and nothing of the run's work was
    /// said after: the driver ending now is the run's end.
    #[serde(default)]
    pub(super) stage_done: bool,
    /// When a library's log last showed it at work (a line with no figure).
    #[serde(default)]
    pub(super) working_at: Option<Seconds>,
}

impl Progress {
    /// A new run begins: nothing of the run before's model or end is carried into it.
    pub(super) fn new_run(&mut self) {
        self.model_name = None;
        self.complete_said = false;
        self.stage_done = false;
        self.working_at = None;
    }
}
