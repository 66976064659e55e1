//! The top floor: the command line and the configuration, and what runs them: the sidecar
//! (sources wired to the model to the sinks), the demo, the clients of a running sidecar and
//! the one-shot commands. Nothing below imports it; it hands the floors below plain values.

pub mod cli;
pub mod commands;
pub mod config;
pub mod demo;
pub mod remote;
pub mod sidecar;
