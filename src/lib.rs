//! pipeline-pulse: a sidecar that watches long-running LLM batch-inference jobs.
//!
//! Data flows one way: sources ([`tail`] + [`parse`] in [`log_source`]) → [`model`] →
//! outputs ([`metrics`] over [`http`]). The model and the parsers are pure; I/O lives at the
//! edges. `main.rs` hands the command line to [`commands`], which runs [`sidecar`], [`demo`]
//! and the one-shot commands.

pub mod alert;
pub mod cli;
pub mod clock;
pub mod collectors;
pub mod commands;
pub mod config;
pub mod demo;
pub mod discover;
pub mod fd_limit;
pub mod gpu;
pub mod http;
pub mod http_client;
pub mod human;
pub mod lock;
pub mod log_source;
pub mod metrics;
pub mod model;
pub mod outputs;
pub mod parse;
pub mod paths;
pub mod probe;
pub mod process_metrics;
pub mod recorder;
pub mod remote;
pub mod report;
pub mod rules;
pub mod run_id_source;
pub mod run_identity;
pub mod sidecar;
pub mod source;
pub mod stable_hash;
pub mod stacks;
pub mod state;
pub mod status;
pub mod tail;
pub mod web;

#[cfg(test)]
pub(crate) mod testing;
