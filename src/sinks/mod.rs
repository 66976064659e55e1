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

use crate::lock::Published;
use crate::model::{AlertView, Run};
use crate::state::StateDir;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

/// What a sink is started with: the model, the state directory, what the alert engine
/// publishes, and how many inputs are not read once yet.
pub struct Context {
    pub run: Arc<Mutex<Run>>,
    pub state: Option<StateDir>,
    pub alerts: Published<AlertView>,
    pub unread: Arc<AtomicUsize>,
}

/// A sink's task on the async runtime, run until the sidecar stops.
pub type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A sink's section of the configuration. The sidecar takes its sinks from one list
/// (`app/sidecar/registry`'s `sinks()`) as it takes its sources, so that adding a sink is
/// its module and one entry there: each is prepared before the sources start, its task runs
/// beside theirs, and it is stopped after them.
pub trait SinkConfig: Send {
    /// What the sink sets in the model before the sources start (the recorder restores the
    /// saved history).
    fn prepare(&self, _cx: &Context) {}

    /// The sink's task; `None` for one that has nothing to run.
    fn start(&self, cx: &Context) -> Option<Task>;

    /// What the sink does as the sidecar stops, after every task is stopped (the recorder
    /// saves the history).
    fn stop(&self, _cx: &Context) {}
}
