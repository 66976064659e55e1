//! Running an action: the I/O edge. Each run is a thread of its own, never the async runtime's
//! and never under a lock: a command that hangs holds back nothing but itself, and at its
//! timeout it is killed with its whole process group, so a `sleep` a script left behind goes
//! with it (docs/alerts.md#actions).

use super::{Action, Facts};
use crate::model::ActionResult;
use crate::rules::{Cause, Condition};
use serde::Serialize;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The most of a run's output kept, per stream: what a person reads to see why it failed.
pub const OUTPUT_CAP: usize = 16 * 1024;
/// How long the output is waited for after the command ended: a daemon it started may hold
/// its pipes open for ever.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// What one run is given.
#[derive(Debug, Clone)]
pub struct Launch {
    pub action: Action,
    pub condition: Condition,
    pub since: f64,
    pub facts: Facts,
    /// Which run of the episode this is, from 1.
    pub attempt: u32,
    pub host: String,
    /// Variables of the sidecar's environment the command does not get.
    pub secret_env: Vec<String>,
}

/// The document on the command's stdin.
#[derive(Serialize)]
struct Document<'a> {
    action: &'a str,
    alert: String,
    partition: Option<&'a str>,
    summary: &'a str,
    /// The likely cause's id, what a script branches on; null where the alert names none.
    cause: Option<&'static str>,
    /// Its words, for a script's own messages.
    cause_text: Option<&'static str>,
    details: &'a str,
    firing_since: f64,
    attempt: u32,
    host: &'a str,
    #[serde(flatten)]
    facts: &'a Facts,
}

impl Launch {
    /// The alert as the command's environment (`PULSE_*`): every variable is set, empty
    /// where the fact is unknown, so a script can test it without `set -u` tripping.
    pub fn env(&self) -> Vec<(String, String)> {
        let c = &self.condition;
        let f = &self.facts;
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        let pid = |v: Option<u32>| v.map(|p| p.to_string()).unwrap_or_default();
        [
            ("PULSE_ACTION", self.action.name.clone()),
            ("PULSE_ALERT", c.alert.to_string()),
            (
                "PULSE_CAUSE",
                c.cause.map(Cause::id).unwrap_or_default().into(),
            ),
            (
                "PULSE_CAUSE_TEXT",
                c.cause.map(Cause::label).unwrap_or_default().into(),
            ),
            ("PULSE_SUMMARY", c.summary.clone()),
            ("PULSE_PARTITION", text(&c.partition)),
            ("PULSE_RUN", text(&f.run)),
            ("PULSE_RUN_ID", text(&f.run_id)),
            ("PULSE_RUN_DIR", text(&f.run_dir)),
            ("PULSE_SERVER_PID", pid(f.server_pid)),
            ("PULSE_SERVER_URL", text(&f.server_url)),
            ("PULSE_ENGINE", text(&f.engine)),
            ("PULSE_DRIVER_PID", pid(f.driver_pid)),
            ("PULSE_SLURM_JOB_ID", text(&f.slurm_job_id)),
            ("PULSE_HOST", self.host.clone()),
            ("PULSE_ATTEMPT", self.attempt.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// The alert as the JSON document on the command's stdin.
    pub fn document(&self) -> String {
        let c = &self.condition;
        serde_json::to_string(&Document {
            action: &self.action.name,
            alert: c.alert.to_string(),
            partition: c.partition.as_deref(),
            summary: &c.summary,
            cause: c.cause.map(Cause::id),
            cause_text: c.cause.map(Cause::label),
            details: &c.details,
            firing_since: self.since,
            attempt: self.attempt,
            host: &self.host,
            facts: &self.facts,
        })
        .unwrap_or_default()
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it.
    Signalled(i32),
    /// It was killed at its timeout, with its process group.
    TimedOut,
    /// It could not be started.
    NotStarted(String),
    /// `--dry-run-actions`: said, not run.
    DryRun,
}

/// A run's end: how, after how long, and what it printed.
#[derive(Debug, Clone)]
pub struct Finished {
    pub ended: Ended,
    pub seconds: f64,
    pub output: String,
}

impl Finished {
    /// The result label of `pulse_actions_total`.
    pub fn result(&self) -> ActionResult {
        match self.ended {
            Ended::Exited(0) => ActionResult::Ok,
            Ended::TimedOut => ActionResult::Timeout,
            Ended::DryRun => ActionResult::DryRun,
            _ => ActionResult::Failed,
        }
    }

    /// What the alert's notifications say of it: "ran `x` (exit 0, 12 s)".
    pub fn said(&self, action: &str) -> String {
        let took = super::seconds(self.seconds);
        match &self.ended {
            Ended::Exited(code) => format!("ran `{action}` (exit {code}, {took})"),
            Ended::Signalled(sig) => format!("ran `{action}` (killed by signal {sig}, {took})"),
            Ended::TimedOut => format!("ran `{action}` (killed at its timeout, {took})"),
            Ended::NotStarted(e) => format!("could not run `{action}`: {e}"),
            Ended::DryRun => format!("would have run `{action}` (dry run)"),
        }
    }

    pub fn exit_code(&self) -> Option<i32> {
        match self.ended {
            Ended::Exited(code) => Some(code),
            _ => None,
        }
    }
}

/// Runs `command` (no shell) in a process group of its own with `env` added to the sidecar's
/// environment and `stdin` on its standard input; past `timeout` the group is killed.
/// Blocking: call it off the runtime.
pub fn execute(
    command: &[String],
    env: &[(String, String)],
    hidden: &[String],
    stdin: &str,
    timeout: Duration,
    groups: &Groups,
) -> Finished {
    let started = Instant::now();
    let not_started = |e: String| Finished {
        ended: Ended::NotStarted(e),
        seconds: started.elapsed().as_secs_f64(),
        output: String::new(),
    };
    let Some((program, args)) = command.split_first() else {
        return not_started("no command".into());
    };
    let mut command = Command::new(program);
    for name in hidden {
        command.env_remove(name);
    }
    let mut child = match command
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return not_started(format!("{program}: {e}")),
    };
    let pgid = child.id() as libc::pid_t;
    groups.add(pgid);
    if let Some(mut input) = child.stdin.take() {
        let stdin = stdin.to_owned();
        // A command that never reads its stdin must not block the runner on a full pipe.
        std::thread::spawn(move || {
            let _ = input.write_all(stdin.as_bytes());
        });
    }
    let stdout = child.stdout.take().map(capture);
    let stderr = child.stderr.take().map(capture);
    let deadline = started + timeout;
    let ended = loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                break match (status.code(), status.signal()) {
                    (Some(code), _) => Ended::Exited(code),
                    (None, Some(sig)) => Ended::Signalled(sig),
                    (None, None) => Ended::Exited(-1),
                }
            }
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                kill_group(pgid);
                let _ = child.wait();
                break Ended::TimedOut;
            }
        }
    };
    // Reaped: the group's id may be another's from here on.
    groups.remove(pgid);
    let seconds = started.elapsed().as_secs_f64();
    let read = |rx: Option<mpsc::Receiver<String>>| {
        rx.and_then(|rx| rx.recv_timeout(OUTPUT_GRACE).ok())
            .unwrap_or_default()
    };
    let (out, err) = (read(stdout), read(stderr));
    let output = match (out.is_empty(), err.is_empty()) {
        (_, true) => out,
        (true, false) => err,
        (false, false) => format!("{out}\n--- stderr ---\n{err}"),
    };
    Finished {
        ended,
        seconds,
        output,
    }
}

/// SIGKILL to the whole group: the command and everything it started that stayed in it.
fn kill_group(pgid: libc::pid_t) {
    if pgid > 0 {
        // SAFETY: killpg has no memory effects; a group already gone gives ESRCH.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
        }
    }
}

/// Reads a stream to its end on a thread of its own, keeping the first [`OUTPUT_CAP`] bytes
/// and draining the rest, so a chatty command never blocks on a full pipe.
fn capture(mut stream: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        let mut cut = false;
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = OUTPUT_CAP.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                    cut |= n > room;
                }
            }
        }
        let mut text = String::from_utf8_lossy(&kept).into_owned();
        if cut {
            text.push_str("\n[… cut]");
        }
        let _ = tx.send(text);
    });
    rx
}

/// The process groups of the commands running now, so that they end with the sidecar: a
/// command started in a group of its own is out of reach of the terminal's Ctrl-C, and once
/// the sidecar is gone nothing else would enforce its timeout.
#[derive(Debug, Clone, Default)]
pub struct Groups(std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<libc::pid_t>>>);

impl Groups {
    fn add(&self, pgid: libc::pid_t) {
        crate::lock::Locked::locked(&*self.0).insert(pgid);
    }

    fn remove(&self, pgid: libc::pid_t) {
        crate::lock::Locked::locked(&*self.0).remove(&pgid);
    }

    /// Kills every group still running: the sidecar stops.
    pub fn kill_all(&self) {
        for pgid in std::mem::take(&mut *crate::lock::Locked::locked(&*self.0)) {
            kill_group(pgid);
        }
    }
}

/// Where runs report their end.
pub type Done = tokio::sync::mpsc::UnboundedSender<(Launch, Finished)>;

/// Starts `launch` on a thread of its own; its end is sent to `done`. With `dry_run`, says
/// what would run and runs nothing.
pub fn spawn(launch: Launch, dry_run: bool, done: Done, groups: Groups) {
    let name = format!("action {}", launch.action.name);
    let (kept, failed) = (launch.clone(), done.clone());
    let started = std::thread::Builder::new().name(name).spawn(move || {
        let finished = if dry_run {
            Finished {
                ended: Ended::DryRun,
                seconds: 0.0,
                output: String::new(),
            }
        } else {
            execute(
                &launch.action.command,
                &launch.env(),
                &launch.secret_env,
                &launch.document(),
                launch.action.timeout,
                &groups,
            )
        };
        let _ = done.send((launch, finished));
    });
    if let Err(e) = started {
        let finished = Finished {
            ended: Ended::NotStarted(format!("no thread for it: {e}")),
            seconds: 0.0,
            output: String::new(),
        };
        let _ = failed.send((kept, finished));
    }
}

#[cfg(test)]
mod tests;
