//! The command line's clients of a running sidecar (`status --url`, `silence`): above `cli`,
//! whose arguments they take, so that nothing the sidecar runs on imports the command line.

pub mod silence;
pub mod status;
