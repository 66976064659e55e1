//! Every source, one entry each: its section of the configuration, which builds it
//! (`sources::SourceConfig`). Adding a source is its folder under `src/sources/` and one entry
//! here. The order is the order they are built and read: the log source restores the model
//! from its snapshot first, and the output files add their part after.

use crate::app::config::Config;
use crate::collectors::Collector;
use crate::sources::{files, gpu, log, probe, run_id, slurm, SourceConfig};

pub fn sources(config: &Config) -> Vec<Box<dyn SourceConfig>> {
    vec![
        Box::new(log::Settings {
            logs: config.logs.clone(),
            max_line_bytes: config.max_line_bytes,
            interval: config.poll_interval,
        }),
        Box::new(files::Settings {
            outputs: config.outputs.clone(),
            inputs: config.inputs.clone(),
            limits: config.output_limits,
            interval: config.poll_interval,
        }),
        Box::new(run_id::Settings {
            identity: config.run.clone(),
            follows_log: config.logs.iter().any(|l| !l.server),
        }),
        Box::new(gpu::Settings {
            mode: config.gpu,
            library: config.nvml_library.clone(),
            processes: config.gpu_processes,
            timeout: config.gpu_timeout,
            interval: config.gpu_interval,
        }),
        Box::new(probe::Settings {
            probes: config.probes.clone(),
            interval: config.probe_interval,
        }),
        Box::new(slurm::Settings {
            on: config.collectors.on(Collector::Slurm),
            interval: config.slurm.interval,
            timeout: config.slurm.timeout,
            spread: config.slurm.spread,
            job_dir: config.slurm.job_dir.clone(),
            scontrol: "scontrol".into(),
        }),
    ]
}
