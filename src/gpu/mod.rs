//! The GPU source: every GPU sampled through NVML on a thread of its own, never on the scrape
//! path (an NVML call can take tens of milliseconds, and a wedged driver much longer).
//!
//! NVML sits behind [`GpuReader`], so `demo` and the tests drive the same sampler with a
//! simulated set of GPUs.

mod nvml;
mod simulated;

pub use nvml::{start_xid_watcher, NvmlReader};
pub use simulated::Simulated;

use crate::clock;
use crate::model::Run;
pub use crate::model::{GpuProcess, GpuReading, GpuSample};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Where GPU readings come from: NVML, or a simulation.
pub trait GpuReader: Send + 'static {
    /// Reads every GPU once. An error means no GPU could be listed at all.
    fn read(&mut self, processes: bool) -> Result<GpuReading, String>;
}

/// Samples the GPUs into the model.
pub struct GpuSource {
    reader: Box<dyn GpuReader>,
    run: Arc<Mutex<Run>>,
    processes: bool,
    problem: Option<String>,
}

impl GpuSource {
    pub fn new(reader: Box<dyn GpuReader>, run: Arc<Mutex<Run>>, processes: bool) -> GpuSource {
        run.lock()
            .unwrap_or_else(|e| e.into_inner())
            .expect_collector("gpu");
        GpuSource {
            reader,
            run,
            processes,
            problem: None,
        }
    }

    pub fn poll(&mut self) {
        let started = Instant::now();
        let result = self.reader.read(self.processes);
        let elapsed = started.elapsed().as_secs_f64();
        let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(mut reading) => {
                reading.at = clock::now();
                run.gpus = Some(reading);
                run.set_collector("gpu", true, elapsed);
                if self.problem.take().is_some() {
                    tracing::info!("reading the GPUs again");
                }
            }
            Err(e) => {
                run.set_collector("gpu", false, elapsed);
                if self.problem.as_deref() != Some(e.as_str()) {
                    tracing::warn!("cannot read the GPUs: {e}");
                    self.problem = Some(e);
                }
            }
        }
    }
}

impl crate::source::Source for GpuSource {
    fn poll(&mut self) {
        GpuSource::poll(self);
    }

    fn save_snapshot(&mut self) {}
}

/// The name of a process, from `/proc/PID/comm`.
pub(crate) fn process_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}
