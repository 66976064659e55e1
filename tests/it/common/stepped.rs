//! The sidecar in this process, stepped (`pipeline_pulse::app::sidecar::stepped`): for the
//! tests that need no real peer, only files. A test writes, then steps; what one step reads
//! is there after it, so no test waits on wall time and no verdict is a duration.

use super::Metrics;
use pipeline_pulse::app::config::RawConfig;
use pipeline_pulse::app::sidecar::stepped::Stepped;
use std::path::Path;
use std::time::Duration;

/// When every stepped sidecar's clock starts: a fixed moment, the same on every run.
pub const T0: f64 = 1_780_000_000.0;

/// The poll interval the binary's tests run with (`--poll-interval 20ms`): one step.
pub const STEP: Duration = Duration::from_millis(20);

/// The most steps [`InProcess::step_until`] takes: a bound on the wait, never a verdict.
const MOST_STEPS: usize = 500;

pub struct InProcess(pub Stepped);

impl InProcess {
    /// A sidecar on the configuration `toml` (the GPUs off unless it says otherwise),
    /// written to `dir/pulse.toml`, its clock at [`T0`].
    pub fn start(dir: &Path, toml: &str) -> InProcess {
        let path = dir.join("pulse.toml");
        let toml = if toml.contains("gpu =") {
            toml.to_owned()
        } else {
            format!("gpu = \"off\"\n{toml}")
        };
        std::fs::write(&path, toml).unwrap();
        let config = RawConfig::from_file(&path)
            .and_then(|raw| raw.validate())
            .unwrap_or_else(|e| panic!("the test's configuration: {e}"));
        InProcess(Stepped::start(&config, T0).expect("the stepped sidecar"))
    }

    /// A sidecar following `logs`.
    pub fn logs(dir: &Path, logs: &[&Path]) -> InProcess {
        let tables: String = logs
            .iter()
            .map(|l| format!("[[logs]]\npath = {:?}\n", super::path_str(l)))
            .collect();
        InProcess::start(dir, &tables)
    }

    /// One poll interval on: every source polls once.
    pub fn step(&mut self) {
        self.0.step(STEP);
    }

    pub fn metrics(&self) -> Metrics {
        Metrics(self.0.metrics())
    }

    /// Steps until `check` accepts the exposition, or fails after [`MOST_STEPS`] showing the
    /// last one. A read may answer a step late (a log's worker thread under load), never
    /// later than the bound.
    pub fn step_until(&mut self, what: &str, check: impl Fn(&Metrics) -> bool) -> Metrics {
        let mut m = self.metrics();
        for _ in 0..MOST_STEPS {
            if check(&m) {
                return m;
            }
            self.step();
            m = self.metrics();
        }
        panic!(
            "{what} not seen after {MOST_STEPS} steps; the exposition:\n{}",
            m.0
        );
    }
}
