//! Where the model goes: the Prometheus exposition, the HTTP server, the status views, the
//! alert channels, the recorder of the recent past and the run's report. A sink reads the model
//! and nothing of the sources (`tests/it/layout.rs` holds it to that).

pub mod alert;
pub mod http;
pub mod metrics;
pub mod recorder;
pub mod report;
pub mod status;
pub mod web_config;
