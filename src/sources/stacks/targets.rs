//! Which processes' stacks matter: the driver, and the inference server's front end with the
//! processes that do its work (vLLM's `EngineCore` and workers, SGLang's schedulers, per
//! rank), as the probes and discovery know them.

use crate::model::stacks::DRIVER;
use crate::model::{Discovered, Run};

pub const SERVER: &str = "server";

/// At most this many of the server's processes: an 8-GPU node has 8 ranks and a front end.
const SERVER_PROCESSES: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub role: String,
    pub pid: u32,
}

/// The driver (the probe's pid, else discovery's) and the server's processes that matter.
pub fn of(run: &Run) -> Vec<Target> {
    let driver = run
        .process()
        .as_ref()
        .and_then(|p| p.pid)
        .or_else(|| run.discovered().as_ref()?.driver.as_ref().map(|d| d.pid));
    with_server(driver, run.discovered().as_ref())
}

/// What a look at a run folder found: its driver and its server's processes.
pub fn found(discovered: &Discovered) -> Vec<Target> {
    with_server(discovered.driver.as_ref().map(|d| d.pid), Some(discovered))
}

fn with_server(driver: Option<u32>, discovered: Option<&Discovered>) -> Vec<Target> {
    let mut out = Vec::new();
    if let Some(pid) = driver {
        out.push(Target {
            role: DRIVER.into(),
            pid,
        });
    }
    if let Some(server) = discovered.and_then(|d| d.server.as_ref()) {
        out.push(Target {
            role: SERVER.into(),
            pid: server.pid,
        });
        out.extend(
            server
                .workers
                .iter()
                .filter_map(|w| {
                    Some(Target {
                        role: working(&w.command)?,
                        pid: w.pid,
                    })
                })
                .take(SERVER_PROCESSES - 1),
        );
    }
    out.dedup_by_key(|t| t.pid);
    out
}

/// A worker that does the engine's work, by the title it gave itself (`VLLM::EngineCore`,
/// `VLLM::Worker_TP0`, `sglang::scheduler_TP0`): its role is that title. Detokenizers,
/// multiprocessing's resource tracker and the like are left out.
fn working(command: &str) -> Option<String> {
    let title = command.split_whitespace().next()?;
    let lower = command.to_lowercase();
    let works = ["enginecore", "scheduler", "worker"]
        .iter()
        .any(|w| lower.contains(w))
        && !lower.contains("detokeniz")
        && !lower.contains("resource_tracker");
    works.then(|| title.rsplit('/').next().unwrap_or(title).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_processes_are_kept_and_named_by_their_titles() {
        assert_eq!(
            working("VLLM::EngineCore_DP0").as_deref(),
            Some("VLLM::EngineCore_DP0")
        );
        assert_eq!(
            working("sglang::scheduler_TP3").as_deref(),
            Some("sglang::scheduler_TP3")
        );
        assert_eq!(working("sglang::detokenizer"), None);
        assert_eq!(
            working(
                "/usr/bin/python3 -c from multiprocessing.resource_tracker import main;main(5)"
            ),
            None
        );
    }
}
