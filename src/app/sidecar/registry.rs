//! Every source and every sink, one entry each: its section of the configuration, which
//! builds it (`sources::SourceConfig`, `sinks::SinkConfig`). Adding a source is its folder
//! under `src/sources/` and one entry here; adding a sink likewise. The order is the order they are built and read: the log source restores the model
//! from its snapshot first, and the output files add their part after.

use crate::app::config::Config;
use crate::sinks::SinkConfig;
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

/// Every sink that runs beside the sources, one entry each: its section of the
/// configuration, which starts it (`sinks::SinkConfig`). The alert engine, which has the last
/// word at a SLURM job's end, and the HTTP server, which runs in the foreground until the
/// sidecar stops, are started by the sidecar itself.
pub fn sinks(config: &Config) -> Vec<Box<dyn SinkConfig>> {
    let mut sinks: Vec<Box<dyn SinkConfig>> = vec![Box::new(config.history)];
    if let Some(heartbeat) = &config.heartbeat {
        sinks.push(Box::new(heartbeat.clone()));
    }
    sinks
}
