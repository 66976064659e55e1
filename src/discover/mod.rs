//! `--run-dir`: finding a run's sources by themselves. The engineer knows where the run lives;
//! discovery finds its progress logs, outputs and inputs in the folder, the driver by the log
//! it has open for writing, and the inference server by its command line. Keys given in the
//! config file or as flags always win over what is found.
//!
//! It runs at start-up, then again every `discover_interval` (a server started later, a new
//! partition's files, a driver that restarts); every finding and every change is logged once
//! and shown in `/status`.

mod files;
mod procs;
pub mod sockets;

pub use files::classify;

use crate::clock;
use crate::config::{
    normalize, same_file, Config, ConfigError, LogConfig, OutputConfig, RawConfig, RawLog,
};
use crate::model::{Discovered, DiscoveredLog, DiscoveredServer, Run};
use crate::parse::{Format, Parser, ServerLog};
use crate::probe::ProbeConfig;
use crate::run_identity::Role;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// What a first look at `dir` and the machine finds.
pub fn scan_once(dir: &Path) -> Discovered {
    scan(dir, &mut procs::Table::default(), &[])
}

/// Everything discovery finds in `dir` and on the machine now. `procs` keeps what earlier
/// scans read of the processes; `held` (the driver and server found before) are read again.
pub fn scan(dir: &Path, procs: &mut procs::Table, held: &[u32]) -> Discovered {
    let procs = procs.refresh(dir, held);
    let found_logs = files::logs(dir);
    // The driver writes a progress log, not the server's: the server's format is known only
    // once the server is, but a writer of an SGLang or vLLM log is the server, never the driver.
    let progress_paths: Vec<PathBuf> = found_logs
        .iter()
        .filter(|l| !matches!(l.format, Format::Sglang | Format::Vllm))
        .map(|l| l.path.clone())
        .collect();
    let sockets = sockets::read();
    let mut driver = procs::driver(procs, &progress_paths);
    let chosen = procs::server(procs, dir, driver.as_ref().map(|d| d.pid), &sockets);
    let server = chosen.server;
    let server_log = server
        .as_ref()
        .and_then(|s| s.log.clone())
        .map(PathBuf::from);
    let mut logs = Vec::new();
    let mut server_logs: Vec<String> = Vec::new();
    for log in found_logs {
        let is_server_log = matches!(log.format, Format::Sglang | Format::Vllm)
            || server_log
                .as_deref()
                .is_some_and(|s| same_file(s, &log.path));
        if is_server_log {
            server_logs.push(log.path.display().to_string());
        } else {
            logs.push(DiscoveredLog {
                path: log.path.display().to_string(),
                format: log.format.as_str().to_owned(),
            });
        }
    }
    if let Some(s) = &server_log {
        if !server_logs.iter().any(|l| same_file(Path::new(l), s)) {
            server_logs.push(s.display().to_string());
        }
        // The server (or one of its workers) writing its own log into the folder is not the
        // driver: the driver is a writer of the other logs.
        let of_server = |pid: u32| {
            server
                .as_ref()
                .is_some_and(|sv| sv.pid == pid || sv.workers.iter().any(|w| w.pid == pid))
        };
        if driver.as_ref().is_some_and(|d| of_server(d.pid)) {
            let others: Vec<PathBuf> = progress_paths
                .iter()
                .filter(|p| !same_file(p, s))
                .cloned()
                .collect();
            driver = procs::driver(procs, &others);
        }
    }
    let files::Jsonl {
        outputs,
        inputs,
        counts: jsonl_counts,
        passed_over,
    } = files::jsonl_globs(dir);
    let hidden = procs.iter().filter(|p| p.files.is_none()).count();
    let mut notes = Vec::new();
    if hidden > 0 && driver.is_none() {
        notes.push(format!(
            "the open files of {hidden} processes (other users') cannot be read, so a driver among them cannot be found: run the sidecar as the pipeline's user, or give --process-match"
        ));
    }
    notes.extend(chosen.note);
    let role = if driver.is_some() {
        Some(Role::Driver)
    } else {
        chosen.role
    };
    Discovered {
        run_dir: dir.display().to_string(),
        logs,
        server_logs,
        outputs,
        inputs,
        jsonl_counts,
        passed_over,
        driver,
        server,
        role,
        notes,
    }
}

/// Fills the keys that `raw` leaves unset with what was found. A key given keeps its value,
/// lists included: `--log` given means no log is discovered.
pub fn apply(found: &Discovered, raw: &mut RawConfig) {
    if raw.role.is_none() {
        raw.role = found.role;
    }
    // A server or worker node sees the run folder on a shared file system too: the progress
    // in it is the driver node's to report, or every run-wide sum would count it twice.
    if raw.role.is_none_or(Role::follows_progress) {
        apply_progress(found, raw);
    }
    if raw.server_logs.is_empty() {
        raw.server_logs = found.server_logs.iter().map(PathBuf::from).collect();
    }
    let Some(server) = &found.server else {
        return;
    };
    if raw.role.is_none_or(Role::probes_server) && server.serves_http {
        if raw.server_health_url.is_none() {
            raw.server_health_url = Some(server.health_url.clone());
            // SGLang's /health (0.5 on) sends a one-token request and waits up to 20 s for it:
            // asked once a minute with time to answer, a connection to its port in between.
            if server.engine == "sglang" {
                raw.server_health_interval
                    .get_or_insert_with(|| "60s".to_owned());
                raw.server_health_timeout
                    .get_or_insert_with(|| "25s".to_owned());
            }
        }
        if raw.server_metrics_url.is_none() {
            raw.server_metrics_url = server.metrics_url.clone();
        }
    }
}

/// The run's progress: its logs, outputs, inputs and driver.
fn apply_progress(found: &Discovered, raw: &mut RawConfig) {
    if raw.logs.is_empty() {
        raw.logs = found
            .logs
            .iter()
            .map(|l| RawLog {
                path: l.path.clone().into(),
                format: l.format.parse().unwrap_or_default(),
                envelope: Default::default(),
                regex: None,
                unit_divisor: None,
            })
            .collect();
    }
    if raw.outputs.is_empty() {
        raw.outputs = found
            .outputs
            .iter()
            .map(|glob| crate::config::RawOutputs {
                glob: glob.clone(),
                ..Default::default()
            })
            .collect();
    }
    if raw.inputs.is_empty() {
        raw.inputs = found.inputs.clone();
    }
    if raw.process_match.is_none() && raw.pid_file.is_none() {
        if let Some(driver) = &found.driver {
            raw.process_match = Some(driver.program.clone());
            raw.process_dir = Some(PathBuf::from(&found.run_dir));
        }
    }
}

/// How long the first scan may take before the sidecar gives up starting: the run's folder
/// can sit on a hung mount, and `/proc` can block on a process stuck in the kernel.
const STARTUP_SCAN_WAIT: Duration = Duration::from_secs(30);

/// [`scan`] on a thread of its own, if it returns within `wait`; a scan that does not is left
/// to its thread.
fn scan_within(dir: &Path, wait: Duration) -> Option<Discovered> {
    let (found, scanned) = mpsc::channel();
    let dir = dir.to_path_buf();
    std::thread::Builder::new()
        .name("discovery".into())
        .spawn(move || {
            let _ = found.send(scan_once(&dir));
        })
        .ok()?;
    scanned.recv_timeout(wait).ok()
}

/// The configuration to run with: `raw` as given, and with `run_dir` what discovery found
/// for the keys it leaves unset.
pub fn configure(raw: RawConfig) -> Result<Config, ConfigError> {
    let Some(dir) = raw.run_dir.clone() else {
        return raw.validate();
    };
    if !dir.is_dir() {
        return Err(ConfigError::invalid(
            "run_dir",
            format!("{} is not a folder", dir.display()),
        ));
    }
    let dir = normalize(&dir);
    let found = scan_within(&dir, STARTUP_SCAN_WAIT).ok_or_else(|| {
        ConfigError::invalid(
            "run_dir",
            format!(
                "scanning {} and /proc has not returned in {} s: the file system under it (or a process in /proc) does not answer",
                dir.display(),
                STARTUP_SCAN_WAIT.as_secs()
            ),
        )
    })?;
    let mut merged = raw.clone();
    apply(&found, &mut merged);
    let mut config = merged.validate()?;
    for line in describe(&found) {
        tracing::info!("discovered: {line}");
    }
    // A server or worker node follows no progress log: its run's id is read from the logs
    // its run folder shows.
    if let Some(identity) = config.run.as_mut().and_then(std::sync::Arc::get_mut) {
        if identity.logs.is_empty() {
            identity.logs = found.logs.iter().map(|l| PathBuf::from(&l.path)).collect();
        }
    }
    if let Some(role) = found.role {
        tracing::info!(
            "discovered: this node's role in the run is {}",
            role.as_str()
        );
    }
    config.discovered = Some((raw, found));
    Ok(config)
}

/// The findings, one line each, for the log.
pub fn describe(found: &Discovered) -> Vec<String> {
    let mut lines = Vec::new();
    for l in &found.logs {
        lines.push(format!("progress log {} ({})", l.path, l.format));
    }
    for l in &found.server_logs {
        lines.push(format!("server log {l}"));
    }
    let counted = |g: &String| match found.jsonl_counts.get(g) {
        Some(n) => format!("{g} ({n} file{})", if *n == 1 { "" } else { "s" }),
        None => g.clone(),
    };
    for g in &found.outputs {
        lines.push(format!("outputs {}", counted(g)));
    }
    for g in &found.inputs {
        lines.push(format!("inputs {}", counted(g)));
    }
    if !found.passed_over.is_empty() {
        lines.push(format!(
            "JSONL passed over (no output, input or shard name; give --outputs or --inputs to take them): {}",
            found.passed_over.join(", ")
        ));
    }
    match &found.driver {
        Some(d) => lines.push(format!(
            "driver pid {} (it has the log open for writing): {}",
            d.pid, d.command
        )),
        None => lines.push("no driver process has a progress log open for writing".into()),
    }
    match &found.server {
        Some(s) if !s.serves_http => lines.push(format!(
            "{} server pid {} (by {}): a rank that serves no HTTP, not probed",
            s.engine, s.pid, s.chosen_by
        )),
        Some(s) => lines.push(format!(
            "{} server pid {} (by {}): health {}, metrics {}",
            s.engine,
            s.pid,
            s.chosen_by,
            s.health_url,
            s.metrics_url.as_deref().unwrap_or("not served")
        )),
        None => lines.push("no SGLang or vLLM server process taken".into()),
    }
    lines.extend(found.notes.iter().cloned());
    lines
}

/// The TOML that `discover DIR` prints: the keys discovery fills, ready to pin with `--config`.
pub fn to_toml(found: &Discovered) -> String {
    let mut raw = RawConfig::default();
    apply(found, &mut raw);
    let mut out = format!("# pipeline-pulse discover {}\n", found.run_dir);
    for line in describe(found) {
        // A command line can hold newlines (`python -c SCRIPT`); a comment cannot.
        out.push_str(&format!("# {}\n", line.replace('\n', "\\n")));
    }
    out.push_str(&toml::to_string(&raw).expect("a RawConfig always serializes"));
    out
}

/// Discovery as the sidecar runs it.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub interval: Duration,
    /// The keys given in the file and as flags; discovery fills only the others.
    pub explicit: RawConfig,
    /// What the last scan found.
    pub found: Discovered,
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
        })
    }

    /// Scans again every interval, forever (abort the task to stop it), handing what is new
    /// to the sources and the probes.
    pub async fn run_every(mut self, run: Arc<Mutex<Run>>, additions: Additions) {
        let dir = PathBuf::from(&self.found.run_dir);
        let mut followed = Followed::of(&self.merged());
        run.lock().unwrap_or_else(|e| e.into_inner()).discovered = Some(self.found.clone());
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
                        let mut table = table.lock().unwrap_or_else(|e| e.into_inner());
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
                        let mut run = run.lock().unwrap_or_else(|e| e.into_inner());
                        run.hung_files.insert(self.found.run_dir.clone(), *since);
                    }
                    continue;
                }
            };
            pending = None;
            if std::mem::take(&mut hung) {
                tracing::info!(path = %self.found.run_dir, "discovery's scan returned again");
                let mut run = run.lock().unwrap_or_else(|e| e.into_inner());
                run.hung_files.remove(&self.found.run_dir);
            }
            let Ok(mut found) = found else {
                continue;
            };
            // A driver or server no longer seen stays the one probed: its absence is what
            // ProcessExited and ServerDown are for, not a reason to stop looking. Only the
            // run's own next server (its driver's, or in its folder) replaces it, never one
            // that is merely the only one left on the node.
            if found.driver.is_none() {
                found.driver = self.found.driver.clone();
            }
            let replaces = |new: &DiscoveredServer| {
                new.tied()
                    || self
                        .found
                        .server
                        .as_ref()
                        .is_none_or(|old| old.pid == new.pid)
            };
            if !found.server.as_ref().is_some_and(replaces) {
                found.server = self.found.server.clone();
            }
            // The role is the start-up's: what a node is for does not change mid-run.
            found.role = self.found.role;
            if found == self.found {
                continue;
            }
            let before: BTreeSet<String> = describe(&self.found).into_iter().collect();
            for line in describe(&found) {
                if !before.contains(&line) {
                    tracing::info!("discovered: {line}");
                }
            }
            self.found = found;
            let merged = self.merged();
            followed.hand_over(&merged, &additions);
            run.lock().unwrap_or_else(|e| e.into_inner()).discovered = Some(self.found.clone());
        }
    }

    fn merged(&self) -> RawConfig {
        let mut merged = self.explicit.clone();
        apply(&self.found, &mut merged);
        merged
    }
}

/// What the sources follow already, so a scan hands over only what is new.
struct Followed {
    logs: Vec<PathBuf>,
    outputs: BTreeSet<String>,
    inputs: BTreeSet<String>,
    probes: (Option<String>, Option<String>, Option<String>),
}

impl Followed {
    fn of(raw: &RawConfig) -> Followed {
        Followed {
            logs: raw
                .logs
                .iter()
                .map(|l| l.path.clone())
                .chain(raw.server_logs.iter().cloned())
                .collect(),
            outputs: raw.outputs.iter().map(|o| o.glob.clone()).collect(),
            inputs: raw.inputs.iter().cloned().collect(),
            probes: probe_keys(raw),
        }
    }

    fn hand_over(&mut self, raw: &RawConfig, to: &Additions) {
        let server_format = raw.server_log_format.unwrap_or_default();
        let logs = raw
            .logs
            .iter()
            .map(|l| (l.path.clone(), false))
            .chain(raw.server_logs.iter().map(|p| (p.clone(), true)));
        for (path, server) in logs {
            if self.logs.iter().any(|l| same_file(l, &path)) {
                continue;
            }
            let parser = if server {
                Parser::Server(ServerLog::new(server_format))
            } else {
                Parser::Auto(Default::default())
            };
            self.logs.push(path.clone());
            let _ = to.logs.send(LogConfig::new(path, parser));
        }
        for output in &raw.outputs {
            if self.outputs.insert(output.glob.clone()) {
                let _ = to.outputs.send(OutputConfig::new(output.glob.clone()));
            }
        }
        for input in &raw.inputs {
            if self.inputs.insert(input.clone()) {
                let _ = to.inputs.send(input.clone());
            }
        }
        let probes = probe_keys(raw);
        if probes != self.probes {
            // Validated as the start-up configuration was; a finding that does not validate
            // (it cannot, as discovery writes the URLs itself) keeps the probes as they are.
            match raw.validate() {
                Ok(config) => {
                    self.probes = probes;
                    let _ = to.probes.send(config.probes);
                }
                Err(e) => tracing::warn!("discovery found a configuration that is not valid: {e}"),
            }
        }
    }
}

fn probe_keys(raw: &RawConfig) -> (Option<String>, Option<String>, Option<String>) {
    (
        raw.process_match.clone(),
        raw.server_health_url.clone(),
        raw.server_metrics_url.clone(),
    )
}
