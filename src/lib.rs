//! pipeline-pulse: a sidecar that watches long-running LLM batch-inference jobs.
//!
//! Data flows one way: [`sources`] → [`model`] (and [`rules`] over it) → [`sinks`]. The model,
//! the parsers and the rules are pure; I/O lives in the sources and the sinks. [`app`] (the
//! command line, the configuration, the sidecar that wires the rest) sits on top; the ground
//! floor ([`tail`], [`parse`], [`clock`], …) imports none of the others. `main.rs` hands the
//! command line to [`app::commands`].

pub mod app;
pub mod model;
pub mod rules;
pub mod sinks;
pub mod sources;

pub mod clock;
pub mod collectors;
pub mod deadline;
pub mod fd_limit;
pub mod http_client;
pub mod human;
pub mod lock;
pub mod parse;
pub mod paths;
pub mod procfs;
pub mod run_identity;
pub mod stable_hash;
pub mod state;
pub mod tail;

#[cfg(test)]
pub(crate) mod testing;
