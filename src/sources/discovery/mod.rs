//! `--run-dir`: finding a run's sources by themselves. The engineer knows where the run lives;
//! discovery finds its progress logs, outputs and inputs in the folder, the driver by the log
//! it has open for writing, and the inference server by its command line. Keys given in the
//! config file or as flags always win over what is found.
//!
//! It runs at start-up, then again every `discover_interval` (a server started later, a new
//! partition's files, a driver that restarts); every finding and every change is logged once
//! and shown in `/status`.

mod files;
#[cfg(test)]
mod fixtures;
pub mod procs;
pub mod sockets;

pub use files::classify;

use crate::model::{Discovered, DiscoveredLog};
use crate::parse::Format;
use crate::paths::same_file;
use crate::run_identity::Role;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// What a first look at `dir` and the machine finds.
pub fn scan_once(dir: &Path) -> Discovered {
    scan(dir, &mut procs::Table::default(), &[])
}

/// Everything discovery finds in `dir` and on the machine now. `procs` keeps what earlier
/// scans read of the processes; `held` (the driver and server found before) are read again.
pub fn scan(dir: &Path, table: &mut procs::Table, held: &[u32]) -> Discovered {
    let procfs = table.procfs().clone();
    let procs = table.refresh(dir, held);
    let found_logs = files::logs(dir);
    // The driver writes a progress log, not the server's: the server's format is known only
    // once the server is, but a writer of an SGLang or vLLM log is the server, never the driver.
    let progress_paths: Vec<PathBuf> = found_logs
        .iter()
        .filter(|l| !matches!(l.format, Format::Sglang | Format::Vllm))
        .map(|l| l.path.clone())
        .collect();
    let sockets = sockets::read(&procfs);
    let mut driver = procs::driver(procs, &progress_paths);
    let driver_pid = driver.as_ref().map(|d| d.pid);
    let chosen = procs::server(&procfs, procs, dir, driver_pid, &sockets);
    // A tie by the driver's connection is that driver's: it lasts as long as that process.
    let server = chosen.server.map(|mut s| {
        if s.tied_by_connection() {
            s.tied_by_driver = driver.clone();
        }
        s
    });
    // A guessed server's log is not followed: the guess may be dropped at the next scan, and
    // a log once followed stays followed.
    let server_log = server
        .as_ref()
        .filter(|s| s.tied())
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
        partitions: output_partitions,
        counts: jsonl_counts,
        passed_over,
    } = files::jsonl_globs(dir);
    let mut notes: Vec<String> = hidden(procs)
        .filter(|_| driver.is_none())
        .into_iter()
        .collect();
    notes.extend(chosen.note.clone());
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
        output_partitions,
        jsonl_counts,
        passed_over,
        driver,
        server,
        role,
        notes,
        server_note: chosen.note,
    }
}

/// What is said of the processes whose open files cannot be read, where there are some: a
/// driver among them cannot be found.
fn hidden(procs: &[procs::Proc]) -> Option<String> {
    let hidden = procs.iter().filter(|p| p.files.is_none()).count();
    (hidden > 0).then(|| format!(
        "the open files of {hidden} processes (other users') cannot be read, so a driver among them cannot be found: run the sidecar as the pipeline's user, or give --process-match"
    ))
}

/// How long the first scan may take before the sidecar gives up starting: the run's folder
/// can sit on a hung mount, and `/proc` can block on a process stuck in the kernel.
pub const STARTUP_SCAN_WAIT: Duration = Duration::from_secs(30);

/// [`scan`] on a thread of its own, if it returns within `wait`; a scan that does not is left
/// to its thread.
pub fn scan_within(dir: &Path, wait: Duration) -> Option<Discovered> {
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
        let by = match found.output_partitions.get(g) {
            Some(p) => format!(", partition {p}"),
            None => String::new(),
        };
        lines.push(format!("outputs {}{by}", counted(g)));
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
        Some(s) if !s.tied() => lines.push(format!(
            "{} server pid {} (by {}): a guess, shown only; not probed, and it says nothing of this node's role",
            s.engine, s.pid, s.by
        )),
        Some(s) if !s.serves_http => lines.push(format!(
            "{} server pid {} (by {}): a rank that serves no HTTP, not probed",
            s.engine, s.pid, s.by
        )),
        Some(s) => lines.push(format!(
            "{} server pid {} (by {}): health {}, metrics {}",
            s.engine,
            s.pid,
            s.by,
            s.health_url,
            s.metrics_url.as_deref().unwrap_or("not served")
        )),
        None => lines.push("no SGLang or vLLM server process taken".into()),
    }
    lines.extend(found.notes.iter().cloned());
    lines
}
