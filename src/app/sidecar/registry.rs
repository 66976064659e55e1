//! Every source and every sink, one entry each: its section of the configuration, which
//! builds it (`sources::SourceConfig`, `sinks::SinkConfig`). Adding a source is its folder
//! under `src/sources/` and one entry here; adding a sink likewise. The order is the order they are built and read: the log source restores the model
//! from its snapshot first, and the output files add their part after.

use crate::app::config::{Config, LogConfig};
use crate::sinks::SinkConfig;
use crate::sources::probe::ProbeConfig;
use crate::sources::{files, Following, SourceConfig};
use std::sync::mpsc;

/// What `--run-dir`'s discovery hands the sources that follow it while the sidecar runs, each
/// source's its own (the sending ends are discovery's `Additions`); none without a run folder.
#[derive(Default)]
pub struct Feeds {
    pub logs: Option<mpsc::Receiver<LogConfig>>,
    pub files: Option<files::Discovered>,
    pub probes: Option<tokio::sync::watch::Receiver<ProbeConfig>>,
}

pub fn sources(config: &Config, feeds: Feeds) -> Vec<Box<dyn SourceConfig>> {
    vec![
        Box::new(Following {
            settings: config.log.clone(),
            found: feeds.logs,
        }),
        Box::new(Following {
            settings: config.files.clone(),
            found: feeds.files,
        }),
        Box::new(config.run_id.clone()),
        Box::new(config.gpu.clone()),
        Box::new(Following {
            settings: config.probe.clone(),
            found: feeds.probes,
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
