//! What an action is told of the run, copied from the model under its lock into plain values,
//! so the command is started (and waited for) with no lock held. The one function that reads
//! the run's fields for the actions: where the run changes shape, this is what follows it.

use crate::model::Run;
use serde::Serialize;

/// The run as an action sees it when it starts.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Facts {
    pub run: Option<String>,
    pub run_id: Option<String>,
    pub run_dir: Option<String>,
    pub server_pid: Option<u32>,
    /// `http://host:port` of the inference server.
    pub server_url: Option<String>,
    /// `sglang` or `vllm`, where discovery found the server.
    pub engine: Option<String>,
    pub driver_pid: Option<u32>,
    pub slurm_job_id: Option<String>,
    /// The run is finished: no action runs for it.
    #[serde(skip)]
    pub finished: bool,
}

/// The facts of `run`; `server_url` is the configured health URL, for a server discovery did
/// not find.
pub fn facts(run: &Run, server_url: Option<&str>) -> Facts {
    let discovered = run.discovered().as_ref();
    let server = discovered.and_then(|d| d.server.as_ref());
    let driver_pid = run
        .process()
        .as_ref()
        .filter(|p| p.up)
        .and_then(|p| p.pid)
        .or_else(|| discovered.and_then(|d| d.driver.as_ref()).map(|d| d.pid));
    Facts {
        run: run.identity().as_ref().map(|i| i.run.clone()),
        run_id: run.run_id().as_ref().map(|(id, _)| id.clone()),
        run_dir: discovered.map(|d| d.run_dir.clone()),
        server_pid: server.map(|s| s.pid),
        server_url: server
            .map(|s| s.health_url.as_str())
            .or(server_url)
            .map(base_url),
        engine: server.map(|s| s.engine.clone()),
        driver_pid,
        slurm_job_id: run.slurm().as_ref().map(|j| j.env.job_id.clone()),
        finished: crate::rules::run_finished(run),
    }
}

/// `http://127.0.0.1:30000/health` → `http://127.0.0.1:30000`: what a client of the server
/// builds its own paths on.
fn base_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let authority = rest.split(['/', '?']).next().unwrap_or(rest);
            format!("{scheme}://{authority}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_url_is_its_base() {
        assert_eq!(
            base_url("http://127.0.0.1:30000/health"),
            "http://127.0.0.1:30000"
        );
        assert_eq!(base_url("http://h:1?x=1"), "http://h:1");
        assert_eq!(base_url("h:1"), "h:1");
    }

    #[test]
    fn an_empty_run_gives_nothing_but_the_configured_url() {
        let run = Run::new(&[]);
        let f = facts(&run, Some("http://127.0.0.1:8000/health"));
        assert_eq!(f.server_url.as_deref(), Some("http://127.0.0.1:8000"));
        assert_eq!((f.server_pid, f.driver_pid, f.run), (None, None, None));
    }
}
