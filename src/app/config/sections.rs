//! The sources' sections of the configuration, each built whole from its keys: the source's
//! own `Settings`, which the sidecar hands to its `build` as it is (`app/sidecar/registry`). A
//! key of a source is its entry in the key table (`keys`), the line here that reads it, and
//! the field of the source's `Settings` that holds it.

use super::{key, keys, ConfigError, RawConfig};
use crate::collectors::{Collector, Collectors};
use crate::sources::gpu::{self, GpuMode};
use crate::sources::slurm;
use std::path::PathBuf;

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
}
