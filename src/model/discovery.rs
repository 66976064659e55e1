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
    /// Output globs whose partition is not each file's folder (`{file}`: the file's name).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub output_partitions: std::collections::BTreeMap<String, String>,
    /// Files each of those globs matched when found.
    #[serde(default)]
    pub jsonl_counts: std::collections::BTreeMap<String, usize>,
    /// JSONL files no glob takes: the first few, then how many more.
    #[serde(default)]
    pub passed_over: Vec<String>,
    pub driver: Option<DiscoveredProcess>,
    pub server: Option<DiscoveredServer>,
    /// The node's part in the run, read from the command lines; `None` where they say nothing.
    #[serde(default)]
    pub role: Option<crate::run_identity::Role>,
    /// What could not be looked at, said once (`/proc` of other users' processes).
    pub notes: Vec<String>,
    /// The one of `notes` that says why this scan took no server (it is among them): not
    /// said while a server tied to the run before stays tied.
    #[serde(skip)]
    pub server_note: Option<String>,
}

/// What discovery found, as the run holds it: `None` without `--run-dir`. It is given by this
/// start (the configuration, then discovery's scans), never restored from a snapshot, so a
/// server found before a restart is not taken for the run's now.
#[derive(Debug, Clone, Default)]
pub struct DiscoveryFacts {
    pub(super) found: Option<Discovered>,
}

impl DiscoveryFacts {
    /// The server discovery tied to the run. A guess (the only server on the node) is never
    /// evidence (docs/claims.md): its processes say nothing of the run's.
    pub(super) fn tied_server(&self) -> Option<&DiscoveredServer> {
        self.found.as_ref()?.server.as_ref().filter(|s| s.tied())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscoveredLog {
    pub path: String,
    pub format: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscoveredProcess {
    pub pid: u32,
    /// Its command line, arguments joined with spaces.
    pub command: String,
    /// The program: the executable, and an interpreter's script or module. A driver is known
    /// by it and its run folder, so one restarted with other arguments is still the driver.
    #[serde(default)]
    pub program: String,
    /// When it started, in clock ticks after boot: with the pid, what tells it from a later
    /// process given the same pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscoveredServer {
    pub pid: u32,
    /// When it started, in clock ticks after boot (as [`DiscoveredProcess::started`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<u64>,
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
    /// Its workers that did the engine's work (a scheduler, an `EngineCore`) and were gone at
    /// a later scan while the server itself still ran: a front end that answers with its
    /// engine dead (what the OOM killer leaves).
    #[serde(default)]
    pub workers_gone: Vec<DiscoveredProcess>,
    /// Why this server is the run's: the driver's connection to it, the run folder, or being
    /// the only one on the node while that is not contradicted (docs/configuration.md,
    /// "Which server is the run's"). Only a server tied to the run replaces one that went away.
    #[serde(default, alias = "chosen_by")]
    pub by: String,
    /// Whether it serves the run's HTTP: not a rank above 0 (`--node-rank 1`) nor a headless
    /// data-parallel engine (`vllm serve --headless`), which only compute.
    #[serde(default = "yes")]
    pub serves_http: bool,
    /// The driver whose connection tied it to the run (pid and start time): the tie lasts as
    /// long as that process, through the scans that find it between two requests with no
    /// connection open. `None` for a server tied by the run folder, and for a guess.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tied_by_driver: Option<DiscoveredProcess>,
}

fn yes() -> bool {
    true
}

impl DiscoveredProcess {
    /// Whether `other` is this very process: the same pid, and the same start time where both
    /// are known (a pid the kernel gave again to another process is another process).
    pub fn same_process(&self, other: &DiscoveredProcess) -> bool {
        self.pid == other.pid
            && (self.started.is_none() || other.started.is_none() || self.started == other.started)
    }

    /// Whether it does the engine's work, by the title it gave itself (`VLLM::EngineCore`,
    /// `VLLM::Worker_TP0`, `sglang::scheduler_TP0`): not a detokenizer nor multiprocessing's
    /// resource tracker.
    pub fn works(&self) -> bool {
        let lower = self.command.to_lowercase();
        ["enginecore", "scheduler", "worker"]
            .iter()
            .any(|w| lower.contains(w))
            && !lower.contains("detokeniz")
            && !lower.contains("resource_tracker")
    }
}

impl DiscoveredServer {
    /// This scan's view of the server, told what the last one saw: the working processes the
    /// same server had then and has no more are gone (and stay so while it runs).
    pub fn after(mut self, before: Option<&DiscoveredServer>) -> DiscoveredServer {
        let Some(before) = before.filter(|b| b.same_process(&self)) else {
            return self;
        };
        let now: Vec<u32> = self.workers.iter().map(|w| w.pid).collect();
        let mut gone = before.workers_gone.clone();
        for w in &before.workers {
            if w.works() && !now.contains(&w.pid) && !gone.iter().any(|g| g.pid == w.pid) {
                gone.push(w.clone());
            }
        }
        self.workers_gone = gone;
        self
    }

    /// Tied to the run (by the driver's connection or the run folder), not merely the only one.
    pub fn tied(&self) -> bool {
        !self.by.starts_with(ONLY_ONE)
    }

    /// Tied by the driver's connection to it (or to its port), not by the run folder.
    pub fn tied_by_connection(&self) -> bool {
        self.by.starts_with(BY_CONNECTION)
    }

    /// Whether `other` is this very server process (as [`DiscoveredProcess::same_process`]).
    pub fn same_process(&self, other: &DiscoveredServer) -> bool {
        self.pid == other.pid
            && (self.started.is_none() || other.started.is_none() || self.started == other.started)
    }
}

/// How [`DiscoveredServer::by`] begins for a server tied by the driver's connection to it or
/// to the port its command line gives it.
pub const BY_CONNECTION: &str = "the driver's connection to";

/// How [`DiscoveredServer::by`] begins for the only server on a node, a guess said as such;
/// what follows says why the guess is allowed.
pub const ONLY_ONE: &str = "the only inference server on this node";

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, command: &str) -> DiscoveredProcess {
        DiscoveredProcess {
            pid,
            command: command.into(),
            ..DiscoveredProcess::default()
        }
    }

    fn server(pid: u32, workers: &[DiscoveredProcess]) -> DiscoveredServer {
        DiscoveredServer {
            pid,
            workers: workers.to_vec(),
            ..DiscoveredServer::default()
        }
    }

    #[test]
    fn a_working_process_that_goes_while_its_server_runs_is_gone_and_stays_so() {
        let scheduler = process(11, "sglang::scheduler");
        let detokenizer = process(12, "sglang::detokenizer");
        let first = server(10, &[scheduler.clone(), detokenizer.clone()]).after(None);
        assert!(first.workers_gone.is_empty());
        let same = server(10, &[scheduler.clone(), detokenizer.clone()]).after(Some(&first));
        assert!(same.workers_gone.is_empty());
        // The detokenizer going is no dead engine; the scheduler going is.
        let no_detok = server(10, std::slice::from_ref(&scheduler)).after(Some(&same));
        assert!(no_detok.workers_gone.is_empty());
        let dead = server(10, &[]).after(Some(&no_detok));
        assert_eq!(dead.workers_gone, std::slice::from_ref(&scheduler));
        assert_eq!(server(10, &[]).after(Some(&dead)).workers_gone, [scheduler]);
        // Another server in its place starts with nothing gone.
        assert!(server(20, &[]).after(Some(&dead)).workers_gone.is_empty());
    }
}
