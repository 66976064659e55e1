//! The sidecar stepped in-process, for the tests (docs/testing.md#stepped-in-process): the
//! sources the configuration builds, polled on the caller's thread one step at a time, on a
//! clock the caller moves, as mtail's tests drive its tailer with a test waker. No thread
//! polls on its own and no wall time needs to pass between two steps, so a test waits for
//! nothing and its verdicts are what the sidecar read, never how soon.
//!
//! Only the sources that read (logs, output and input files) are stepped: the tasks ask
//! peers over the network (probes), and a test that needs a peer runs the binary.

use super::registry::Feeds;
use super::{build_sources, model, state_dir};
use crate::app::config::Config;
use crate::clock::Injected;
use crate::lock::Published;
use crate::model::Run;
use crate::sinks::metrics::{self, Exposition};
use crate::sources::{Context, Runs, Source};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A sidecar whose sources poll when [`Stepped::step`] says, on an injected clock.
pub struct Stepped {
    run: Arc<Mutex<Run>>,
    sources: Vec<Box<dyn Source>>,
    clock: Injected,
    exporter: bool,
}

impl Stepped {
    /// Builds the sources of `config` on a clock at `at` (Unix seconds), entered on this
    /// thread and carried to the sources' workers, and gives every source its first read.
    pub fn start(config: &Config, at: f64) -> anyhow::Result<Stepped> {
        let clock = Injected::at(at);
        let run = model(config);
        let mut cx = Context {
            run: run.clone(),
            state: state_dir(config)?,
        };
        let mut sources = Vec::new();
        for built in build_sources(config, &mut cx, Feeds::default())? {
            let off = |c: &crate::collectors::Collector| !config.collectors.on(*c);
            if !built.collectors.is_empty() && built.collectors.iter().all(off) {
                continue;
            }
            if let Runs::Thread(source) = built.runs {
                sources.push(source);
            }
        }
        let mut stepped = Stepped {
            run,
            sources,
            clock,
            exporter: config.collectors.on(crate::collectors::Collector::Exporter),
        };
        stepped.poll();
        // As a source's thread does after its first read.
        stepped.save();
        Ok(stepped)
    }

    /// Moves the clock on by `by`, then polls every source once: one wake of the poll
    /// interval, whatever the interval.
    pub fn step(&mut self, by: Duration) {
        self.clock.advance(by);
        self.poll();
    }

    /// The injected clock's now.
    pub fn now(&self) -> f64 {
        self.clock.now()
    }

    /// The model the sources tell.
    pub fn run(&self) -> Arc<Mutex<Run>> {
        self.run.clone()
    }

    /// `/metrics` as the text exposition, at the injected now (without the alert engine's
    /// families, which the stepped sidecar does not run).
    pub fn metrics(&self) -> String {
        let registry =
            metrics::registry_with_web(self.run.clone(), Published::default(), None, self.exporter);
        metrics::encode(&registry, Exposition::Text)
    }

    /// Saves every source's snapshot, as a source's thread does on its interval and on stop.
    pub fn save(&mut self) {
        for source in &mut self.sources {
            source.save_snapshot();
        }
    }

    fn poll(&mut self) {
        for source in &mut self.sources {
            source.poll();
        }
    }
}

impl Drop for Stepped {
    /// The thread goes back to the wall clock with the sidecar.
    fn drop(&mut self) {
        crate::clock::enter(None);
    }
}
