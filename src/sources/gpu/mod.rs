//! The GPU source: every GPU sampled through NVML on a thread of its own, never on the scrape
//! path (an NVML call can take tens of milliseconds, and a wedged driver much longer).
//!
//! NVML sits behind [`GpuReader`], so `demo` and the tests drive the same sampler with a
//! simulated set of GPUs.

mod nvml;
mod pids;
mod simulated;

pub use nvml::{check, start_xid_watcher, NvmlReader};
use pids::{GpuProcesses as _, Procfs};
pub use simulated::Simulated;

use crate::clock;
use crate::collectors::Collector;
use crate::deadline::{self, Waited};
use crate::lock::Locked;
use crate::model::{GpuPids, Run};
pub use crate::model::{GpuProcess, GpuReading, GpuSample};
use crate::sources::{Awaited, Built, Context, Runs, SourceConfig};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How to find the GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuMode {
    /// NVML if it loads; without it, `pulse_collector_up{collector="gpu"}` is 0.
    #[default]
    Auto,
    /// NVML or fail start-up.
    On,
    Off,
    /// Eight made-up GPUs named `simulated`, for demos and tests.
    Simulated,
}

/// The GPU source's section of the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    pub mode: GpuMode,
    /// The NVML library to load, where not the system's.
    pub library: Option<std::path::PathBuf>,
    /// Whether each GPU's processes are read too.
    pub processes: bool,
    /// How long a reading may take before the GPUs count as hung.
    pub timeout: Duration,
    pub interval: Duration,
}

impl Settings {
    /// The reader the mode asks for; `None` when GPUs are off or, in `auto`, when NVML is not
    /// on this machine.
    fn reader(&self, run: &Arc<Mutex<Run>>) -> anyhow::Result<Option<Box<dyn GpuReader>>> {
        match self.mode {
            GpuMode::Off => Ok(None),
            GpuMode::Simulated => {
                tracing::info!("GPUs are simulated: eight GPUs named \"simulated\"");
                Ok(Some(Box::new(Simulated::new(8))))
            }
            GpuMode::Auto | GpuMode::On => match NvmlReader::init(self.library.as_deref()) {
                Ok(reader) => {
                    if let Err(e) = start_xid_watcher(self.library.clone(), run.clone()) {
                        tracing::warn!("GPU XID errors are not counted: {e}");
                    }
                    Ok(Some(Box::new(reader)))
                }
                Err(e) if self.mode == GpuMode::On => anyhow::bail!("gpu = \"on\" but {e}"),
                Err(e) => {
                    tracing::warn!("{e}; GPU metrics are off (use gpu = \"off\" to say so)");
                    run.locked().set_collector(Collector::Gpu, false, 0.0);
                    Ok(None)
                }
            },
        }
    }
}

impl SourceConfig for Settings {
    fn build(self: Box<Self>, cx: &mut Context) -> anyhow::Result<Option<Built>> {
        let Some(reader) = self.reader(&cx.run)? else {
            return Ok(None);
        };
        let source = GpuSource::new(
            reader,
            cx.run.clone(),
            self.processes,
            self.timeout,
            Procfs::default(),
        );
        Ok(Some(Built {
            name: "gpu-source",
            collectors: &[Collector::Gpu],
            interval: self.interval,
            // Not the alert engine: a GPU fallen off the bus may hang the first read.
            awaited: Awaited::ByReadiness,
            runs: Runs::Thread(Box::new(source)),
        }))
    }
}

/// Where GPU readings come from: NVML, or a simulation.
pub trait GpuReader: Send + 'static {
    /// Reads every GPU once. An error means no GPU could be listed at all.
    fn read(&mut self, processes: bool) -> Result<GpuReading, String>;

    /// Whether the pids it lists are processes of this machine (the simulation's are not).
    fn lists_real_pids(&self) -> bool {
        true
    }
}

/// A reading, or why there is none, and how long it took in seconds.
type Read = (Result<GpuReading, String>, f64);

/// Samples the GPUs into the model. The reader runs on a worker thread of its own and each
/// reading has a deadline: an NVML call that hangs (a GPU falling off the bus can do that for
/// minutes) must not freeze the figures while everything looks fine. Past the deadline the
/// collector is down, the last reading is marked stale (its gauges are not exported) and the
/// `GpuHung` alert has the evidence; the reading that finally comes back recovers it all.
pub struct GpuSource {
    /// The reader's thread; `None` when it could not be started.
    reader: Option<deadline::Worker<bool, Read>>,
    run: Arc<Mutex<Run>>,
    processes: bool,
    /// What the process lists' pids are here, decided once: a process does not change its
    /// PID namespace.
    pids: GpuPids,
    procfs: Procfs,
    timeout: Duration,
    problem: Option<String>,
}

impl GpuSource {
    pub fn new(
        mut reader: Box<dyn GpuReader>,
        run: Arc<Mutex<Run>>,
        processes: bool,
        timeout: Duration,
        procfs: Procfs,
    ) -> GpuSource {
        run.locked().expect_collector(Collector::Gpu);
        let pids = match (processes, reader.lists_real_pids()) {
            (false, _) => GpuPids::NotRead,
            (true, false) => GpuPids::MadeUp,
            (true, true) => procfs.pids(),
        };
        if pids == GpuPids::Host {
            tracing::info!("{}", crate::model::PIDS_IN_ANOTHER_NAMESPACE);
        }
        // Ends when the source is dropped, once a hung call returns.
        let reader = deadline::Worker::start("gpu-reader".into(), timeout, move |processes, _| {
            let started = Instant::now();
            let result = reader.read(processes);
            (result, started.elapsed().as_secs_f64())
        })
        .ok();
        GpuSource {
            reader,
            run,
            processes,
            pids,
            procfs,
            timeout,
            problem: None,
        }
    }

    pub fn poll(&mut self) {
        const ENDED: &str = "the GPU reader thread ended";
        let Some(reader) = &mut self.reader else {
            return self.apply(Err(ENDED.into()), 0.0);
        };
        // A reading still in flight is not asked for again: its answer is taken when it comes.
        reader.ask(self.processes);
        let deadline = reader.hung_at().unwrap_or_else(Instant::now);
        match reader.wait_until(deadline) {
            Waited::Done((result, elapsed)) => self.apply(result, elapsed),
            Waited::Hung { since } => self.hung(since),
            // Waited until the call counts as hung: not before it does.
            Waited::Pending => {}
            // Not asked: the thread is gone.
            Waited::Idle | Waited::Gone => self.apply(Err(ENDED.into()), 0.0),
        }
    }

    fn hung(&mut self, asked: Instant) {
        let mut run = self.run.locked();
        let waited = asked.elapsed().as_secs_f64();
        let since = clock::now() - waited;
        if run.gpu_hung(since) {
            tracing::warn!(
                "an NVML call has not returned for {:?}: GPU figures are stale until it does",
                self.timeout
            );
        }
        run.set_collector(Collector::Gpu, false, waited);
    }

    fn apply(&mut self, result: Result<GpuReading, String>, elapsed: f64) {
        let mut run = self.run.locked();
        if run.gpu_answers() {
            tracing::info!("NVML answers again after {elapsed:.1}s");
        }
        match result {
            Ok(mut reading) => {
                reading.at = clock::now();
                reading.pids = self.pids;
                let server = run
                    .discovered()
                    .as_ref()
                    .and_then(|d| d.server.as_ref())
                    .map(|s| s.pid);
                let driver = run.process().as_ref().and_then(|p| p.pid);
                self.procfs.attribute(&mut reading, server, driver);
                run.take_gpus(reading);
                run.set_collector(Collector::Gpu, true, elapsed);
                if self.problem.take().is_some() {
                    tracing::info!("reading the GPUs again");
                }
            }
            Err(e) => {
                run.set_collector(Collector::Gpu, false, elapsed);
                if self.problem.as_deref() != Some(e.as_str()) {
                    tracing::warn!("cannot read the GPUs: {e}");
                    self.problem = Some(e);
                }
            }
        }
    }
}

impl crate::sources::Source for GpuSource {
    fn poll(&mut self) {
        GpuSource::poll(self);
    }

    fn save_snapshot(&mut self) {}
}
