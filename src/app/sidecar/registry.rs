//! Every source, one entry each: its section of the configuration, which builds it
//! (`sources::SourceConfig`). Adding a source is its folder under `src/sources/` and one entry
//! here. The order is the order they are built and read: the log source restores the model
//! from its snapshot first, and the output files add their part after.

use crate::app::config::Config;
use crate::sources::{files, log, probe, run_id, SourceConfig};

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
        Box::new(config.gpu.clone()),
        Box::new(probe::Settings {
            probes: config.probes.clone(),
            interval: config.probe_interval,
        }),
        Box::new(config.slurm.clone()),
    ]
}
