//! Discovery as the sidecar runs it: a scan every `discover_interval`, what it finds merged
//! under the keys given, and what is new handed to the sources and the probes.

use crate::app::config::discovery::apply;
use crate::app::config::{Config, Inputs, LogConfig, OutputConfig, RawConfig};
use crate::clock;
use crate::collectors::Collectors;
use crate::lock::Locked;
use crate::model::{Discovered, DiscoveredProcess, DiscoveredServer, Run};
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
                let tying = self
                    .found
                    .server
                    .as_ref()
                    .and_then(|s| s.tied_by_driver.clone());
                (
                    tokio::task::spawn_blocking(move || {
                        let mut table = table.locked();
                        let found = scan(&scan_dir, &mut table, &held);
                        // Whether the driver whose connection tied the server still runs.
                        let lives = tying.as_ref().is_none_or(|p| table.lives(p));
                        (found, lives)
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
            let Ok((found, tying_driver_lives)) = found else {
                continue;
            };
            let (found, untied) = self.followed_finding(found, tying_driver_lives);
            if let Some(why) = untied {
                tracing::info!("discovered: {why}");
            }
            if found != self.found {
                self.take(found, &run, &mut followed, &additions);
            }
        }
    }

    /// A scan's finding as the run follows it. A driver no longer seen stays the one probed:
    /// its absence is what ProcessExited is for, not a reason to stop looking. The server is
    /// [`next_server`]'s, told whether the driver whose connection tied it still runs; with
    /// the server's tie kept, the scan's word on why it took no server is not said. The role
    /// is [`next_role`]'s: a node that runs the driver is the driver's once it is seen here,
    /// and stays so once it exits (the seed's single node starts its SGLang first and the
    /// driver after; a sidecar started between them took the node for a server's and followed
    /// no progress log). Returns, where a tie ended, why.
    fn followed_finding(
        &self,
        mut found: Discovered,
        tying_driver_lives: bool,
    ) -> (Discovered, Option<String>) {
        let driver_in_scan = found.driver.is_some();
        let driver_seen = driver_in_scan || self.found.driver.is_some();
        let scanned_tied = found.server.as_ref().is_some_and(DiscoveredServer::tied);
        let (server, untied) = next_server(
            self.found.server.as_ref(),
            found.server.take(),
            found.driver.as_ref(),
            driver_seen,
            tying_driver_lives,
        );
        found.server = server;
        if !driver_in_scan {
            found.driver = self.found.driver.clone();
        }
        if !scanned_tied && found.server.as_ref().is_some_and(DiscoveredServer::tied) {
            if let Some(note) = found.server_note.take() {
                found.notes.retain(|n| *n != note);
            }
        }
        found.role = next_role(self.found.role, found.role, driver_seen);
        (found, untied)
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

/// The server the run follows after a scan that found `new` where `old` was followed, the
/// scan's driver `driver` (docs/configuration.md, "Which server is the run's"), and, where a
/// tie ended, why.
///
/// A server tied to the run replaces any other: the driver seen connected to another server
/// moves the tie there. A tie stays through the scans that no longer show its evidence: a
/// driver between two requests holds no connection (datatrove opens one per request, httpx
/// and aiohttp pools close theirs when idle), and a server that no scan sees any more is the
/// run's until another is tied, its absence ServerDown's to tell. A tie by the driver's
/// connection is that driver process's (its pid and start time): it ends once a scan shows
/// another driver in its place, or, with none seen, once `tying_driver_lives` says it exited.
///
/// The only server on the node, a guess, never replaces a tied one, is not taken once a driver
/// was seen that this scan misses (the run's "no driver yet" is over), and is kept only while
/// each scan takes it again: gone, or not taken by a scan that sees the driver (it talks to
/// another server, or to none), it is dropped, never told of as down.
fn next_server(
    old: Option<&DiscoveredServer>,
    new: Option<DiscoveredServer>,
    driver: Option<&DiscoveredProcess>,
    driver_seen: bool,
    tying_driver_lives: bool,
) -> (Option<DiscoveredServer>, Option<String>) {
    let driver_in_scan = driver.is_some();
    let (kept, mut untied) = match old.filter(|o| o.tied()) {
        Some(o) => match tie_ends(o, driver, tying_driver_lives) {
            Some(why) => (None, Some(why)),
            None => (Some(o), None),
        },
        None => (None, None),
    };
    let server = match (new, kept) {
        // Tied by the run folder, the same process keeps that tie: it ends with no driver.
        (Some(new), Some(o)) if new.tied() && new.same_process(o) && o.tied_by_driver.is_none() => {
            Some(DiscoveredServer {
                by: o.by.clone(),
                tied_by_driver: None,
                ..new
            })
        }
        (Some(new), Some(o)) if new.tied() => {
            if !new.same_process(o) {
                untied = Some(format!(
                    "{} server pid {} is no longer the run's server: {} server pid {} is (by {})",
                    o.engine, o.pid, new.engine, new.pid, new.by
                ));
            }
            Some(new)
        }
        (Some(new), None) if new.tied() => {
            // The new driver's connection ties the same server again: no tie ended.
            if old.is_some_and(|o| o.same_process(&new)) {
                untied = None;
            }
            Some(new)
        }
        // The same process, tied before: it keeps the reason it was taken for.
        (Some(new), Some(o)) if o.same_process(&new) => Some(DiscoveredServer {
            by: o.by.clone(),
            tied_by_driver: o.tied_by_driver.clone(),
            ..new
        }),
        (_, Some(o)) => Some(o.clone()),
        (Some(new), None) if driver_in_scan || !driver_seen => Some(new),
        _ => None,
    };
    (server, untied)
}

/// Why the tie of `tied` ends after a scan that found `driver`, if it does: a tie by the
/// driver's connection ends with that driver process, replaced by another or exited.
fn tie_ends(
    tied: &DiscoveredServer,
    driver: Option<&DiscoveredProcess>,
    tying_driver_lives: bool,
) -> Option<String> {
    let by = tied.tied_by_driver.as_ref()?;
    let server = format!(
        "{} server pid {} is no longer the run's server",
        tied.engine, tied.pid
    );
    match driver {
        Some(d) if !d.same_process(by) => Some(format!(
            "{server}: it was tied by the connection of driver pid {}, and the run's driver is now pid {}",
            by.pid, d.pid
        )),
        None if !tying_driver_lives => Some(format!(
            "{server}: it was tied by the connection of driver pid {}, which has exited",
            by.pid
        )),
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

    fn driver(pid: u32, started: u64) -> DiscoveredProcess {
        DiscoveredProcess {
            pid,
            command: "python3 gen.py".into(),
            program: "python3 gen.py".into(),
            started: Some(started),
        }
    }

    /// The pid `next_server` follows, the way a scan that found `driver` leaves it.
    fn next(
        old: Option<&DiscoveredServer>,
        new: Option<DiscoveredServer>,
        driver: Option<&DiscoveredProcess>,
        seen: bool,
    ) -> Option<u32> {
        next_server(old, new, driver, seen, true).0.map(|s| s.pid)
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
        let d = driver(20, 1000);
        let d = Some(&d);
        // No driver yet: the guess is taken while each scan takes it again, and dropped once
        // gone, never told of as down.
        assert_eq!(next(None, Some(only()), None, false), Some(7));
        assert_eq!(next(Some(&only()), Some(only()), None, false), Some(7));
        assert_eq!(next(Some(&only()), None, None, false), None);
        // A scan that sees the driver and takes no server drops the guess.
        assert_eq!(next(Some(&only()), None, d, true), None);
        // A driver seen once and missed now (it ended): the only server is not taken.
        assert_eq!(next(None, Some(only()), None, true), None);
        // A tied server replaces the guess, is never replaced by one, and outlives its absence.
        assert_eq!(next(Some(&only()), Some(tied()), d, true), Some(8));
        assert_eq!(next(Some(&tied()), Some(only()), None, false), Some(8));
        assert_eq!(next(Some(&tied()), None, d, true), Some(8));
        // The tied server seen again only as the node's only one keeps its reason.
        let again = next_server(
            Some(&tied()),
            Some(server(8, crate::model::ONLY_ONE)),
            d,
            true,
            true,
        );
        assert_eq!(again.0.unwrap().by, "the run folder /run");
        // A guess never becomes evidence: a guess followed, then the same guess again, is
        // still a guess.
        let guessed = next_server(Some(&only()), Some(only()), None, false, true).0;
        assert!(!guessed.unwrap().tied());
    }

    /// A server tied by `driver`'s connection to it, as a scan that saw the connection finds it.
    fn connected(pid: u32, driver: &DiscoveredProcess) -> DiscoveredServer {
        DiscoveredServer {
            started: Some(500),
            tied_by_driver: Some(driver.clone()),
            ..server(pid, "the driver's connection to it")
        }
    }

    /// The only server on the node, as a scan finds it while the driver holds no connection
    /// (datatrove between two requests): passed over, with the note that says why.
    fn passed_over() -> Option<DiscoveredServer> {
        None
    }

    /// Issue 58: a driver that opens a connection per request (datatrove), or whose pool the
    /// server closes when idle (distilabel's httpx, Curator's aiohttp), holds none between
    /// two requests. The server its connection tied stays tied through those scans, with no
    /// word of a tie ended, for as long as that driver process runs.
    #[test]
    fn a_tie_by_the_drivers_connection_outlasts_the_scans_between_its_requests() {
        let d = driver(20, 1000);
        let first = next_server(None, Some(connected(8, &d)), Some(&d), true, true);
        assert_eq!(first.1, None);
        let mut followed = first.0.expect("tied by the connection");
        assert!(followed.tied() && followed.tied_by_connection());
        for scan in 0..3 {
            let (next, untied) = next_server(Some(&followed), passed_over(), Some(&d), true, true);
            let next = next.unwrap_or_else(|| panic!("untied at scan {scan}: {untied:?}"));
            assert_eq!(untied, None, "scan {scan}");
            assert_eq!(
                (next.pid, next.by.as_str()),
                (8, "the driver's connection to it")
            );
            followed = next;
        }
        // A server tied by the run folder and then seen with the driver's connection keeps its
        // folder tie: the driver's exit does not end it (vLLM's engine killed takes the driver
        // and the server down together, and ServerDown must still say so).
        let mut by_folder = server(9, "the run folder /r");
        by_folder.tied_by_driver = None;
        let mut by_connection = server(9, "the driver's connection to it");
        by_connection.tied_by_driver = Some(driver(3, 100));
        let (kept, _) = next_server(
            Some(&by_folder),
            Some(by_connection),
            Some(&driver(3, 100)),
            true,
            true,
        );
        let kept = kept.unwrap();
        assert_eq!(
            (kept.by.as_str(), kept.tied_by_driver.is_none()),
            ("the run folder /r", true)
        );
        let (kept, untied) = next_server(Some(&kept), None, None, true, false);
        assert_eq!((kept.map(|s| s.pid), untied), (Some(9), None));
        // A scan that finds no driver (it closed its log a moment) while it still runs: kept.
        let (kept, untied) = next_server(Some(&followed), None, None, true, true);
        assert_eq!((kept.map(|s| s.pid), untied), (Some(8), None));
        // The same server seen again as the node's only one (a guess): still tied, by the
        // driver's connection.
        let guess = server(
            8,
            &format!(
                "{} (the driver talks to a local port that no process it can read listens on)",
                crate::model::ONLY_ONE
            ),
        );
        let (again, _) = next_server(
            Some(&followed),
            Some(DiscoveredServer {
                started: Some(500),
                ..guess
            }),
            Some(&d),
            true,
            true,
        );
        let again = again.unwrap();
        assert!(again.tied_by_connection(), "{}", again.by);
        assert_eq!(again.tied_by_driver.as_ref(), Some(&d));
    }

    #[test]
    fn a_tie_by_the_drivers_connection_ends_with_that_driver_process() {
        let d = driver(20, 1000);
        let tied = connected(8, &d);
        // Another driver in its place: a new pid, or the same pid given to a later process.
        for other in [driver(21, 1000), driver(20, 2000)] {
            let (taken, untied) = next_server(Some(&tied), passed_over(), Some(&other), true, true);
            assert_eq!(taken, None, "driver {other:?}");
            let why = untied.expect("said why");
            assert!(
                why.contains("server pid 8 is no longer the run's server"),
                "{why}"
            );
            assert!(why.contains(&format!("now pid {}", other.pid)), "{why}");
        }
        // The driver exited: no scan finds it, and its pid runs no more.
        let (taken, untied) = next_server(Some(&tied), None, None, true, false);
        assert_eq!(taken, None);
        assert!(untied.unwrap().contains("driver pid 20, which has exited"));
        // A new driver connected to the same server ties it again: no tie ended.
        let new = driver(21, 3000);
        let (taken, untied) = next_server(
            Some(&tied),
            Some(connected(8, &new)),
            Some(&new),
            true,
            true,
        );
        assert_eq!(untied, None);
        assert_eq!(taken.unwrap().tied_by_driver, Some(new));
        // A tie by the run folder is no driver's: a new driver does not end it.
        let folder = server(9, "the run folder /run");
        let (taken, untied) = next_server(Some(&folder), None, Some(&driver(22, 1)), true, false);
        assert_eq!((taken.map(|s| s.pid), untied), (Some(9), None));
    }

    #[test]
    fn the_driver_connected_to_another_server_moves_the_tie() {
        let d = driver(20, 1000);
        let (taken, untied) = next_server(
            Some(&connected(8, &d)),
            Some(connected(9, &d)),
            Some(&d),
            true,
            true,
        );
        assert_eq!(taken.map(|s| s.pid), Some(9));
        let why = untied.expect("the move said");
        assert!(why.contains("pid 8 is no longer the run's server: vllm server pid 9 is (by the driver's connection to it)"), "{why}");
        // The same pid given to a later server process is another server.
        let later = DiscoveredServer {
            started: Some(900),
            ..connected(8, &d)
        };
        let (_, untied) = next_server(Some(&connected(8, &d)), Some(later), Some(&d), true, true);
        assert!(untied.is_some());
        // A guess of another server never moves it.
        let guess = server(9, crate::model::ONLY_ONE);
        let (taken, untied) =
            next_server(Some(&connected(8, &d)), Some(guess), Some(&d), true, true);
        assert_eq!((taken.map(|s| s.pid), untied), (Some(8), None));
    }
}

#[cfg(test)]
mod finding_tests {
    use super::*;
    use crate::model::{DiscoveredProcess, DiscoveredServer};

    /// The scans connected, not connected, not connected as the sidecar takes them: the
    /// server stays the run's (and probed), and the note a scan without the connection makes
    /// ("talks to no server on this node") is not said while the tie holds.
    #[test]
    fn scans_without_the_drivers_connection_keep_the_tie_and_say_nothing_against_it() {
        let d = DiscoveredProcess {
            pid: 20,
            command: "python3 gen.py".into(),
            program: "python3 gen.py".into(),
            started: Some(1000),
        };
        let tied = DiscoveredServer {
            pid: 8,
            started: Some(500),
            engine: "vllm".into(),
            command: "vllm serve m --port 8000".into(),
            health_url: "http://127.0.0.1:8000/health".into(),
            by: "the driver's connection to it".into(),
            serves_http: true,
            tied_by_driver: Some(d.clone()),
            ..DiscoveredServer::default()
        };
        let connected = Discovered {
            run_dir: "/run".into(),
            driver: Some(d.clone()),
            server: Some(tied.clone()),
            ..Discovered::default()
        };
        let note = "vllm server pid 8 is not the run's: driver pid 20 talks to no server on this node (its engine runs in-process, or it waits), and the server neither works in nor logs into /run; give --server-health-url for it if it is".to_owned();
        let between = Discovered {
            server: None,
            notes: vec!["another note".into(), note.clone()],
            server_note: Some(note),
            ..connected.clone()
        };
        let mut discovery = Discovery {
            interval: Duration::from_secs(30),
            explicit: RawConfig::default(),
            found: Discovered::default(),
            collectors: Collectors::default(),
        };
        for (i, scan) in [connected, between.clone(), between]
            .into_iter()
            .enumerate()
        {
            let (found, untied) = discovery.followed_finding(scan, true);
            assert_eq!(untied, None, "scan {i}");
            assert_eq!(found.server.as_ref(), Some(&tied), "scan {i}");
            assert_eq!(
                found.notes,
                if i == 0 {
                    vec![]
                } else {
                    vec!["another note".to_owned()]
                }
            );
            discovery.found = found;
            let probes = discovery.inputs().unwrap().probes;
            assert_eq!(
                probes.health_url.map(|u| u.to_string()).as_deref(),
                Some("http://127.0.0.1:8000/health"),
                "scan {i}: probed"
            );
        }
    }
}
