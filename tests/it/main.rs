//! The integration tests, one binary as ripgrep keeps its tests: one link step, one
//! `common` shared by every module (docs/testing.md).

mod common;

mod actions;
mod alert_scenarios;
mod alerting;
mod batch_formats;
mod collectors;
mod config;
mod config_keys;
mod contract;
mod deadlines;
mod demo;
mod deploy;
mod discover;
mod envelopes;
mod exporter;
mod faults;
mod fleet;
mod heal;
mod history;
mod http_habits;
mod layout;
mod libraries;
mod many_files;
mod new_run;
mod node;
mod notify;
mod nvml;
mod outputs;
mod prometheus;
mod properties;
mod resilience;
mod server;
mod sglang;
mod slurm;
mod stacks;
mod status;
mod strangers;
mod tailer;
mod tls;
mod toolkit_flags;
mod tqdm;
mod vllm;
mod web_config;
