//! What discovery found in a run folder and on the machine, as `/status` shows it. Plain data:
//! the finding is done by `discover`, at the edge.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovered {
    pub run_dir: String,
    /// Progress logs, with the format their first lines show (`auto` while undecided).
    pub logs: Vec<DiscoveredLog>,
    pub server_logs: Vec<String>,
    /// Output and input globs, one per folder layout and file name family.
    pub outputs: Vec<String>,
    pub inputs: Vec<String>,
    pub driver: Option<DiscoveredProcess>,
    pub server: Option<DiscoveredServer>,
    /// What could not be looked at, said once (`/proc` of other users' processes).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscoveredLog {
    pub path: String,
    pub format: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscoveredProcess {
    pub pid: u32,
    /// Its command line, arguments joined with spaces.
    pub command: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscoveredServer {
    pub pid: u32,
    /// `sglang` or `vllm`.
    pub engine: String,
    pub command: String,
    pub health_url: String,
    /// Where the engine serves Prometheus metrics (SGLang only with `--enable-metrics`).
    pub metrics_url: Option<String>,
    /// The regular file its stdout or stderr goes to.
    pub log: Option<String>,
    /// Its descendants: vLLM's `EngineCore` and workers, SGLang's schedulers and detokenizer.
    /// A front end can answer while one of these is dead or stopped.
    #[serde(default)]
    pub workers: Vec<DiscoveredProcess>,
}
