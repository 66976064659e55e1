//! The sources' sections of the configuration, each built whole from its keys: the source's
//! own `Settings`, which the sidecar hands to its `build` as it is (`app/sidecar/registry`). A
//! key of a source is its entry in the key table (`keys`), the line here that reads it, and
//! the field of the source's `Settings` that holds it.

use super::{key, keys, ConfigError, RawConfig};
use crate::collectors::{Collector, Collectors};
use crate::run_identity::{RunIdentity, RunLabel};
use crate::sources::files::{self, OutputConfig, OutputLimits};
use crate::sources::gpu::{self, GpuMode};
use crate::sources::log::{self, LogConfig};
use crate::sources::probe::{self, ProbeConfig};
use crate::sources::{run_id, slurm};
use std::path::PathBuf;
use std::time::Duration;

impl RawConfig {
    /// The GPU source's section: off with its collector, and an error where `gpu = "on"`
    /// asks for NVML the collectors switch off.
    pub(super) fn gpu_section(&self, collectors: Collectors) -> Result<gpu::Settings, ConfigError> {
        let mode = match (self.gpu.unwrap_or_default(), collectors.on(Collector::Gpu)) {
            (GpuMode::On, false) => {
                return Err(ConfigError::invalid(
                    "collectors.gpu",
                    "the gpu collector is off, but gpu = \"on\" asks for NVML or failure",
                ))
            }
            (mode, true) => mode,
            (_, false) => GpuMode::Off,
        };
        Ok(gpu::Settings {
            mode,
            library: self.nvml_library.clone(),
            processes: self.gpu_processes.unwrap_or(false),
            timeout: key::gpu_timeout.duration(self.gpu_timeout.as_deref())?,
            interval: key::gpu_interval.duration(self.gpu_interval.as_deref())?,
        })
    }

    /// The SLURM source's section: how it asks the controller, and where the prolog's file
    /// is (docs/slurm.md#when-it-asks).
    pub(super) fn slurm_section(
        &self,
        collectors: Collectors,
    ) -> Result<slurm::Settings, ConfigError> {
        Ok(slurm::Settings {
            on: collectors.on(Collector::Slurm),
            interval: key::slurm_interval.duration(self.slurm_interval.as_deref())?,
            timeout: key::slurm_timeout.duration(self.slurm_timeout.as_deref())?,
            spread: key::slurm_spread.duration(self.slurm_spread.as_deref())?,
            job_dir: self.slurm_job_dir.clone().unwrap_or_else(|| {
                let keys::DefaultValue::Value(dir) = key::slurm_job_dir.default else {
                    unreachable!("slurm_job_dir has a default")
                };
                PathBuf::from(dir)
            }),
            scontrol: "scontrol".into(),
        })
    }

    /// The log source's section: the logs `inputs` kept for the collectors on, with the keys
    /// `validate` read before them (`poll_interval`, `max_line_bytes`), in the order it
    /// always read them.
    pub(super) fn log_section(
        &self,
        logs: Vec<LogConfig>,
        interval: Duration,
        max_line_bytes: usize,
    ) -> log::Settings {
        log::Settings {
            logs,
            max_line_bytes,
            interval,
        }
    }

    /// The output files source's section: the globs and input files `inputs` kept, read as
    /// often as the logs (`poll_interval`), and their limits.
    pub(super) fn files_section(
        &self,
        outputs: Vec<OutputConfig>,
        inputs: Vec<String>,
        interval: Duration,
        max_record_bytes: usize,
    ) -> Result<files::Settings, ConfigError> {
        Ok(files::Settings {
            outputs,
            inputs,
            limits: OutputLimits {
                max_record_bytes,
                identity_cap: key::identity_cap.count(self.identity_cap)?,
                max_open_files: key::max_open_files.count(self.max_open_files)?,
                file_watch: self.file_watch.unwrap_or_default(),
            },
            interval,
        })
    }

    /// The run-id source's section: the run's id is read from the progress logs as given
    /// (discovery adds a worker's later, `config/discovery.rs`), and followed as the log
    /// source does where this node follows a progress log (docs/many-nodes.md#run-ids).
    pub(super) fn run_id_section(
        &self,
        label: Option<RunLabel>,
        logs: &[LogConfig],
    ) -> run_id::Settings {
        run_id::Settings {
            identity: label.map(|label| {
                let logs = self.logs.iter().map(|l| l.path.clone()).collect();
                RunIdentity::new(label, logs)
            }),
            follows_log: logs.iter().any(|l| !l.server),
        }
    }

    /// The probes' section: what `inputs` kept to probe, and `probe_interval`.
    pub(super) fn probe_section(&self, probes: ProbeConfig, interval: Duration) -> probe::Settings {
        probe::Settings { probes, interval }
    }
}
