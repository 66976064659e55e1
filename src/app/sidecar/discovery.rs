//! Discovery as the sidecar runs it: a scan every `discover_interval`, what it finds merged
//! under the keys given, and what is new handed to the sources and the probes.

use crate::app::config::discovery::apply;
use crate::app::config::{Config, Inputs, LogConfig, OutputConfig, RawConfig};
use crate::clock;
use crate::collectors::Collectors;
use crate::lock::Locked;
use crate::model::{Discovered, DiscoveredServer, Run};
use crate::paths::same_file;
use crate::run_identity::Role;
use crate::sources::discovery::{describe, procs, scan};
use crate::sources::probe::ProbeConfig;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// Discovery as the sidecar runs it.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub interval: Duration,
    /// The keys given in the file and as flags; discovery fills only the others.
    pub explicit: RawConfig,
    /// What the last scan found.
    pub found: Discovered,
    /// A finding of a collector switched off is not followed.
    pub collectors: Collectors,
}

/// Where a scan's new findings go: the sources take them at their next poll.
pub struct Additions {
    pub logs: mpsc::Sender<LogConfig>,
    pub outputs: mpsc::Sender<OutputConfig>,
    pub inputs: mpsc::Sender<String>,
    pub probes: tokio::sync::watch::Sender<ProbeConfig>,
}

impl Discovery {
    /// The discovery a configuration asks for, if it has a `run_dir`.
    pub fn of(config: &Config) -> Option<Discovery> {
        let (explicit, found) = config.discovered.clone()?;
        Some(Discovery {
            interval: config.discover_interval,
            explicit,
            found,
            collectors: config.collectors,
        })
    }

    /// Scans again every interval, forever (abort the task to stop it), handing what is new
    /// to the sources and the probes.
    pub async fn run_every(mut self, run: Arc<Mutex<Run>>, additions: Additions) {
        let dir = PathBuf::from(&self.found.run_dir);
        // Start-up validated this very configuration: it types.
        let inputs = match self.inputs() {
            Ok(inputs) => inputs,
            Err(e) => {
                tracing::warn!("discovery stops: the inputs it found are not valid: {e}");
                return;
            }
        };
        let mut followed = Followed::of(&inputs);
        run.locked().set_discovered(self.found.clone());
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        // A scan that does not return (a hung mount, a process stuck in the kernel) is waited
        // for at the next ticks, never started twice; past HUNG_AFTER the folder is named.
        let mut pending = None;
        let mut hung = false;
        let wait = Duration::from_secs_f64(crate::model::HUNG_AFTER);
        // Only the scan's own thread locks it, and never two scans at once.
        let table = Arc::new(Mutex::new(procs::Table::default()));
        loop {
            ticks.tick().await;
            let (scanning, since) = pending.get_or_insert_with(|| {
                let scan_dir = dir.clone();
                let table = Arc::clone(&table);
                let held: Vec<u32> = [
                    self.found.driver.as_ref().map(|d| d.pid),
                    self.found.server.as_ref().map(|s| s.pid),
                ]
                .into_iter()
                .flatten()
                .collect();
                (
                    tokio::task::spawn_blocking(move || {
                        let mut table = table.locked();
                        scan(&scan_dir, &mut table, &held)
                    }),
                    clock::now(),
                )
            });
            let found = match tokio::time::timeout(wait, &mut *scanning).await {
                Ok(found) => found,
                Err(_) => {
                    if !hung {
                        hung = true;
                        tracing::warn!(
                            path = %self.found.run_dir,
                            "discovery's scan of {} and /proc has not returned for {} s; what was found before stands",
                            self.found.run_dir,
                            wait.as_secs()
                        );
                        let mut run = run.locked();
                        run.file_hung(self.found.run_dir.clone(), *since);
                    }
                    continue;
                }
            };
            pending = None;
            if std::mem::take(&mut hung) {
                tracing::info!(path = %self.found.run_dir, "discovery's scan returned again");
                let mut run = run.locked();
                run.file_answers(&self.found.run_dir);
            }
            let Ok(found) = found else {
                continue;
            };
            let found = self.followed_finding(found);
            if found != self.found {
                self.take(found, &run, &mut followed, &additions);
            }
        }
    }

    /// A scan's finding as the run follows it. A driver no longer seen stays the one probed:
    /// its absence is what ProcessExited is for, not a reason to stop looking. The server is
    /// [`next_server`]'s. The role is [`next_role`]'s: a node that runs the driver is the
    /// driver's once it is seen here, and stays so once it exits (the seed's single node
    /// starts its SGLang first and the driver after; a sidecar started between them took the
    /// node for a server's and followed no progress log).
    fn followed_finding(&self, mut found: Discovered) -> Discovered {
        let driver_in_scan = found.driver.is_some();
        let driver_seen = driver_in_scan || self.found.driver.is_some();
        if !driver_in_scan {
            found.driver = self.found.driver.clone();
        }
        found.server = next_server(
            self.found.server.as_ref(),
            found.server.take(),
            driver_in_scan,
            driver_seen,
        );
        found.role = next_role(self.found.role, found.role, driver_seen);
        found
    }

    /// Takes a finding that differs from the last: each new line logged once, what is new
    /// handed to the sources and the probes, `/status` told.
    fn take(
        &mut self,
        found: Discovered,
        run: &Mutex<Run>,
        followed: &mut Followed,
        additions: &Additions,
    ) {
        let before: BTreeSet<String> = describe(&self.found).into_iter().collect();
        for line in describe(&found) {
            if !before.contains(&line) {
                tracing::info!("discovered: {line}");
            }
        }
        let before = self.found.server.take();
        self.found = found;
        self.found.server = self.found.server.take().map(|s| s.after(before.as_ref()));
        // Typed as start-up typed them; a finding that does not type (it cannot: discovery
        // writes the paths and URLs itself) keeps the sources as they are.
        match self.inputs() {
            Ok(inputs) => followed.hand_over(inputs, additions),
            Err(e) => tracing::warn!("discovery found inputs that are not valid: {e}"),
        }
        // The role follows the evidence as it arrives, as start-up read it from what it had.
        let label = self.merged().run_label();
        let mut run = run.locked();
        run.set_discovered(self.found.clone());
        if let Some(label) = label {
            run.set_role(label.role);
        }
    }

    /// The keys given, and what the last scan found for the others.
    fn merged(&self) -> RawConfig {
        let mut merged = self.explicit.clone();
        apply(&self.found, &mut merged);
        merged
    }

    /// What to follow and probe now, for the collectors switched on.
    fn inputs(&self) -> Result<Inputs, crate::app::config::ConfigError> {
        self.merged().inputs(self.collectors)
    }
}

/// The server the run follows after a scan that found `new` where `old` was followed
/// (docs/configuration.md, "Which server is the run's"). A server tied to the run replaces any
/// other, and stays when a scan no longer sees it: its absence is ServerDown's to tell. The only
/// server on the node, a guess, never replaces a tied one, is not taken once a driver was seen
/// that this scan misses (the run's "no driver yet" is over), and is kept only while each scan
/// takes it again: gone, or not taken by a scan that sees the driver (it talks to another
/// server, or to none), it is dropped, never told of as down.
fn next_server(
    old: Option<&DiscoveredServer>,
    new: Option<DiscoveredServer>,
    driver_in_scan: bool,
    driver_seen: bool,
) -> Option<DiscoveredServer> {
    match (new, old.filter(|o| o.tied())) {
        (Some(new), _) if new.tied() => Some(new),
        // The same process, tied before: it keeps the reason it was taken for.
        (Some(new), Some(o)) if o.pid == new.pid => Some(DiscoveredServer {
            by: o.by.clone(),
            ..new
        }),
        (_, Some(o)) => Some(o.clone()),
        (Some(new), None) if driver_in_scan || !driver_seen => Some(new),
        _ => None,
    }
}

/// The node's role after a scan: the driver's once a driver was seen on it, else as it was,
/// else what this scan's evidence says (a server tied to the run, a worker's command line).
fn next_role(old: Option<Role>, new: Option<Role>, driver_seen: bool) -> Option<Role> {
    if driver_seen {
        Some(Role::Driver)
    } else {
        old.or(new)
    }
}

/// What the sources follow already, so a scan hands over only what is new.
struct Followed {
    logs: Vec<PathBuf>,
    outputs: BTreeSet<String>,
    inputs: BTreeSet<String>,
    probes: ProbeConfig,
}

impl Followed {
    fn of(inputs: &Inputs) -> Followed {
        Followed {
            logs: inputs.logs.iter().map(|l| l.path.clone()).collect(),
            outputs: inputs.outputs.iter().map(|o| o.glob.clone()).collect(),
            inputs: inputs.inputs.iter().cloned().collect(),
            probes: inputs.probes.clone(),
        }
    }

    /// Hands the sources and the probes what `now` has that they do not follow yet.
    fn hand_over(&mut self, now: Inputs, to: &Additions) {
        for log in now.logs {
            if !self.logs.iter().any(|l| same_file(l, &log.path)) {
                self.logs.push(log.path.clone());
                let _ = to.logs.send(log);
            }
        }
        for output in now.outputs {
            if self.outputs.insert(output.glob.clone()) {
                let _ = to.outputs.send(output);
            }
        }
        for input in now.inputs {
            if self.inputs.insert(input.clone()) {
                let _ = to.inputs.send(input);
            }
        }
        if now.probes != self.probes {
            self.probes = now.probes.clone();
            let _ = to.probes.send(now.probes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_that_runs_the_driver_is_the_drivers_once_it_is_seen_and_stays_so() {
        assert_eq!(
            next_role(Some(Role::Server), None, false),
            Some(Role::Server)
        );
        assert_eq!(
            next_role(Some(Role::Server), Some(Role::Server), true),
            Some(Role::Driver)
        );
        assert_eq!(next_role(None, None, true), Some(Role::Driver));
        assert_eq!(
            next_role(Some(Role::Worker), Some(Role::Server), false),
            Some(Role::Worker)
        );
        // A server tied to the run found after start-up says the role then.
        assert_eq!(
            next_role(None, Some(Role::Server), false),
            Some(Role::Server)
        );
        assert_eq!(next_role(None, None, false), None);
    }

    fn server(pid: u32, by: &str) -> DiscoveredServer {
        DiscoveredServer {
            pid,
            engine: "vllm".into(),
            command: "vllm serve m".into(),
            health_url: "http://127.0.0.1:8000/health".into(),
            by: by.into(),
            serves_http: true,
            ..DiscoveredServer::default()
        }
    }

    #[test]
    fn a_guess_goes_with_evidence_against_it_a_tied_server_stays() {
        let only = || {
            server(
                7,
                &format!("{} (no driver found yet)", crate::model::ONLY_ONE),
            )
        };
        let tied = || server(8, "the run folder /run");
        let pid = |s: Option<DiscoveredServer>| s.map(|s| s.pid);
        // No driver yet: the guess is taken while each scan takes it again, and dropped once
        // gone, never told of as down.
        assert_eq!(pid(next_server(None, Some(only()), false, false)), Some(7));
        assert_eq!(
            pid(next_server(Some(&only()), Some(only()), false, false)),
            Some(7)
        );
        assert_eq!(pid(next_server(Some(&only()), None, false, false)), None);
        // A scan that sees the driver and takes no server drops the guess.
        assert_eq!(pid(next_server(Some(&only()), None, true, true)), None);
        // A driver seen once and missed now (it ended): the only server is not taken.
        assert_eq!(pid(next_server(None, Some(only()), false, true)), None);
        // A tied server replaces the guess, is never replaced by one, and outlives its absence.
        assert_eq!(
            pid(next_server(Some(&only()), Some(tied()), true, true)),
            Some(8)
        );
        assert_eq!(
            pid(next_server(Some(&tied()), Some(only()), false, false)),
            Some(8)
        );
        assert_eq!(pid(next_server(Some(&tied()), None, true, true)), Some(8));
        // The tied server seen again only as the node's only one keeps its reason.
        let again = next_server(
            Some(&tied()),
            Some(server(8, crate::model::ONLY_ONE)),
            true,
            true,
        );
        assert_eq!(again.unwrap().by, "the run folder /run");
    }
}
