//! Every source and every sink, one entry each: its section of the configuration, which
//! builds it (`sources::SourceConfig`, `sinks::SinkConfig`). Adding a source is its folder
//! under `src/sources/` and one entry here; adding a sink likewise. The order is the order they are built and read: the log source restores the model
//! from its snapshot first, and the output files add their part after.

use crate::app::config::Config;
use crate::sinks::SinkConfig;
use crate::sources::SourceConfig;

pub fn sources(config: &Config) -> Vec<Box<dyn SourceConfig>> {
    vec![
        Box::new(config.log.clone()),
        Box::new(config.files.clone()),
        Box::new(config.run_id.clone()),
        Box::new(config.gpu.clone()),
        Box::new(config.probe.clone()),
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
