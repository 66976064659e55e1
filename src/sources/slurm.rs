//! The run's SLURM job (docs/slurm.md): who it is, from the sidecar's own environment when it
//! runs inside the job, else from the driver's (`/proc/PID/environ`); what the site's prolog
//! wrote of it on this node; and what the controller says of it, asked about that one job
//! (`scontrol --local -o show job ID`, a single-job lookup that costs the controller the same at
//! any queue size) under a deadline, one call at a time (this source's thread), when the job is
//! new, when its driver exits and when its warning signal comes, and otherwise no more often
//! than `slurm_interval` ([`Asks`]). A controller that does not answer, or answers too much, is
//! a counter and one plain note: the job's last known state stands.

mod scontrol;

use crate::collectors::Collector;
use crate::lock::Locked;
use crate::model::slurm::{spread_offset, ArrayTasks, Asks, JobEnv, JobFile, JobState, SlurmJob};
use crate::model::Run;
use crate::procfs::Procfs;
use crate::sources::{Awaited, Built, Context, Runs, Source, SourceConfig};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The SLURM source's section of the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    pub on: bool,
    pub interval: Duration,
    pub timeout: Duration,
    /// The most an ask is put off when the job is new or its driver exits or is warned.
    pub spread: Duration,
    /// Where the site's prolog writes each job's file (`slurm_job_dir`).
    pub job_dir: PathBuf,
    /// The `scontrol` to run: found in `PATH` unless a path is given.
    pub scontrol: String,
}

impl SourceConfig for Settings {
    fn build(self: Box<Self>, cx: &mut Context) -> anyhow::Result<Option<Built>> {
        if !self.on {
            return Ok(None);
        }
        let own = own_job();
        Ok(Some(Built {
            name: "slurm",
            collectors: &[Collector::Slurm],
            interval: LOOK.min(self.interval),
            // The controller may not answer: nothing waits for it.
            awaited: Awaited::ByNothing,
            runs: Runs::Thread(Box::new(SlurmSource {
                run: cx.run.clone(),
                own,
                settings: *self,
                host: host_name(),
                told: None,
                asks: None,
                driver: Driver::default(),
                file: None,
            })),
        }))
    }
}

struct SlurmSource {
    run: Arc<Mutex<Run>>,
    /// The sidecar's own job, when it runs inside one.
    own: Option<JobEnv>,
    settings: Settings,
    /// Spreads this node's asks from other nodes' ([`spread_offset`]).
    host: String,
    /// The last error said in the log, so that a controller down is said once.
    told: Option<String>,
    asks: Option<Asks>,
    driver: Driver,
    /// The prolog's file last taken into the run: its path and text.
    file: Option<(PathBuf, String)>,
}

/// What was last seen of the driver, to tell when it exits.
#[derive(Default)]
struct Driver {
    /// The process probe's count of exits.
    exits: Option<u64>,
    /// Without a probe: whether the discovered driver's pid was alive.
    alive: bool,
}

/// How often the environment and the prolog's file are looked at (local reads): a job that
/// starts is known within this, and a driver's exit seen.
const LOOK: Duration = Duration::from_secs(5);

impl Source for SlurmSource {
    fn poll(&mut self) {
        let now = crate::clock::now();
        let (driver, known, exited, warned_at) = {
            let run = self.run.locked();
            let driver = run
                .process()
                .as_ref()
                .filter(|p| p.up)
                .and_then(|p| p.pid)
                .or_else(|| Some(run.discovered().as_ref()?.driver.as_ref()?.pid));
            let exited = self
                .driver
                .exited(run.process().as_ref().map(|p| p.exits), driver);
            let job = run.slurm().as_ref();
            (
                driver,
                job.map(|j| j.env.clone()),
                exited,
                job.and_then(|j| j.warned_at),
            )
        };
        let (env, from) = match (&self.own, driver.and_then(driver_job)) {
            (Some(own), _) => (own.clone(), "the sidecar's own environment".to_owned()),
            (None, Some(env)) => (
                env,
                format!("the driver's environment (pid {})", driver.unwrap_or(0)),
            ),
            // The driver gone (the job ended): its job is still the one to ask about.
            (None, None) => match known {
                Some(env) => (env, String::new()),
                None => return,
            },
        };
        let file = self.read_file(&env);
        let new = match &file {
            Some((path, job)) => {
                let said = path.display().to_string();
                self.run
                    .locked()
                    .slurm_file(env.clone(), from.clone(), job, said)
            }
            None => self.run.locked().slurm_seen(env.clone(), from.clone()),
        };
        if new {
            let facts = file.as_ref().map_or(String::new(), |(path, _)| {
                format!("; its end from {}", path.display())
            });
            tracing::info!("SLURM: the run is job {} (from {from}{facts})", env.job_id);
        }

        let key = (env.job_id.clone(), env.restart_count);
        if self.asks.as_ref().is_none_or(|a| a.job != key) {
            let spread = self.settings.spread.as_secs_f64();
            let offset = spread_offset(&self.host, &env.job_id, spread);
            self.asks = Some(Asks::new(key, now, offset));
        }
        let asks = self.asks.as_mut().expect("set above");
        asks.facts_given = env.array_job_id.is_none()
            && self
                .file
                .as_ref()
                .and_then(|(_, text)| JobFile::parse(text))
                .is_some_and(|f| f.has_end());
        if exited {
            asks.driver_exited_at = Some(now);
        }
        asks.warned_at = warned_at;
        let Some(why) = asks.due(self.settings.interval.as_secs_f64(), now) else {
            return;
        };
        tracing::debug!(
            "SLURM: asking the controller about job {}: {}",
            env.job_id,
            why.says()
        );
        let answer = ask(&self.settings, &env);
        let now = crate::clock::now();
        asks.asked(now, answer.is_ok());
        match &answer {
            Err(e) if self.told.as_ref() != Some(e) => {
                tracing::warn!("SLURM: job {}: {e}", env.job_id);
            }
            Ok(_) if self.told.is_some() => tracing::info!("SLURM: the controller answers again"),
            _ => {}
        }
        self.told = answer.as_ref().err().cloned();
        self.run
            .locked()
            .slurm_answer(env, String::new(), answer, now);
    }

    fn save_snapshot(&mut self) {}
}

impl SlurmSource {
    /// The prolog's file for the job, when it is there and says it is this job's; `Some` only
    /// when it is new or was rewritten since it was last taken in.
    fn read_file(&mut self, env: &JobEnv) -> Option<(PathBuf, JobFile)> {
        let path = self
            .settings
            .job_dir
            .join(format!("job-{}.env", env.job_id));
        let mut text = String::new();
        let read = std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_FILE).read_to_string(&mut text))
            .is_ok();
        let job = JobFile::parse(&text).filter(|f| read && f.job_id == env.job_id);
        if job.is_none() {
            self.file = None;
            return None;
        }
        if self
            .file
            .as_ref()
            .is_some_and(|(p, t)| *p == path && *t == text)
        {
            return None;
        }
        self.file = Some((path.clone(), text));
        job.map(|j| (path, j))
    }
}

impl Driver {
    /// Whether the driver exited since the last look: the probe counted an exit, or, without
    /// a probe, the discovered driver's pid is gone.
    fn exited(&mut self, probe_exits: Option<u64>, pid: Option<u32>) -> bool {
        match probe_exits {
            Some(n) => {
                let more = self.exits.is_some_and(|before| n > before);
                self.exits = Some(n);
                more
            }
            None => {
                let alive = pid.is_some_and(|p| Procfs::default().exists(p));
                let gone = self.alive && !alive;
                self.alive = alive;
                gone
            }
        }
    }
}

/// A prolog's file is a few lines: more is not one.
const MAX_FILE: u64 = 64 * 1024;

/// Notes the job's warning signal: `sbatch --signal=B:USR1@N` reaches the batch shell only,
/// and the templates in deploy/slurm/ pass it on to the sidecar as SIGUSR1. Listening also
/// keeps SIGUSR1 from ending the sidecar (its default action). The source asks the controller
/// when it sees it.
pub async fn warned_by_signal(run: Arc<Mutex<Run>>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut usr1 = match signal(SignalKind::user_defined1()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot listen for SIGUSR1 ({e}): SLURM's warning signal is not heard");
            return;
        }
    };
    while usr1.recv().await.is_some() {
        let now = crate::clock::now();
        match run.locked().slurm_warned(now) {
            Some(job) => tracing::warn!("SLURM: job {job} is about to end (its warning signal)"),
            None => tracing::warn!("SIGUSR1, but no SLURM job is known: ignored"),
        }
    }
}

/// One ask now, off the runtime, for the job already known: the sidecar stops (SIGTERM at the
/// job's end) and tells what the controller says first. At most `timeout`, and no more than
/// 5 s; not at all when the controller already said how the job ended.
pub async fn ask_once(run: &Arc<Mutex<Run>>, timeout: Duration) {
    let inside = |j: &SlurmJob| own_job().is_some_and(|own| own.job_id == j.env.job_id);
    let Some((env, inside, ended)) = run.locked().slurm().as_ref().map(|j| {
        let ended = j.controller.as_ref().is_some_and(|c| over(&c.state));
        (j.env.clone(), inside(j), ended)
    }) else {
        return;
    };
    if ended {
        return;
    }
    let settings = Settings {
        on: true,
        interval: Duration::ZERO,
        timeout: timeout.min(Duration::from_secs(5)),
        spread: Duration::ZERO,
        job_dir: PathBuf::new(),
        scontrol: "scontrol".into(),
    };
    let env_id = env.job_id.clone();
    let asked = tokio::task::spawn_blocking(move || ask(&settings, &env)).await;
    if let Ok(Ok((Some(state), array))) = asked {
        let now = crate::clock::now();
        tracing::info!("SLURM: at the end, job {} is {}", env_id, state.state);
        run.locked().slurm_last_answer(state, array, inside, now);
    }
}

/// A state the job does not leave: asking again says nothing new.
fn over(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "TIMEOUT"
            | "CANCELLED"
            | "PREEMPTED"
            | "NODE_FAIL"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "OUT_OF_MEMORY"
    )
}

/// The sidecar's own job, when it runs inside one.
fn own_job() -> Option<JobEnv> {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    JobEnv::from_vars(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// The job of the driver's environment, where it can be read (the same user, or root).
fn driver_job(pid: u32) -> Option<JobEnv> {
    let vars = Procfs::default().environ(pid)?;
    JobEnv::from_vars(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

fn host_name() -> String {
    Procfs::default().hostname().unwrap_or_default()
}

/// Asks the controller for the run's job (an array task: its array's records, which hold the
/// task's own): `scontrol --local -o show job ID`, times as Unix seconds, killed at the
/// deadline, at most `MAX_ANSWER` read. Each failure says what was asked, what came back and
/// what to do.
fn ask(
    settings: &Settings,
    env: &JobEnv,
) -> Result<(Option<JobState>, Option<ArrayTasks>), String> {
    let id = env.run_job_id();
    let asked = format!("`{} --local -o show job {id}`", settings.scontrol);
    let mut child = Command::new(&settings.scontrol)
        // --local: no federation lookup first, one RPC (REQUEST_JOB_INFO_SINGLE).
        .args(["--local", "--oneliner", "show", "job", id])
        .env("SLURM_TIME_FORMAT", "%s")
        .env("TZ", "UTC")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run {asked}: {e}; install SLURM's client on this node or switch the \
                 collector off (--no-collector.slurm)"
            )
        })?;
    // Read on threads of their own: a controller that answers slowly must not outlast the
    // deadline through a blocked read. One byte over the cap says the answer is too big; the
    // pipe is closed after it, which ends scontrol.
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.take(MAX_ANSWER + 1).read_to_end(&mut buf);
        buf
    });
    let stderr = child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.take(4096).read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).trim().to_owned()
    });
    let deadline = Instant::now() + settings.timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "asked {asked}: no answer within {:?} (slurm_timeout): the controller does \
                     not answer or is overloaded (`sdiag` says how busy); asked again later",
                    settings.timeout
                ));
            }
        }
    };
    let out = reader.join().unwrap_or_default();
    let err = errors.join().unwrap_or_default();
    if out.len() as u64 > MAX_ANSWER {
        return Err(format!(
            "asked {asked}: more than {} KiB came back (the cap), and was not read; an array \
             with that many tasks listed at once is counted better by one central exporter \
             than from every node: switch the collector off there (--no-collector.slurm)",
            MAX_ANSWER / 1024
        ));
    }
    if !status.success() {
        // A job past MinJobAge is forgotten: no longer listed, not an error.
        if scontrol::forgotten(&err) {
            let array = env.array_job_id.as_ref().map(|_| scontrol::done(env));
            return Ok((None, array));
        }
        let how = match std::os::unix::process::ExitStatusExt::signal(&status) {
            Some(sig) => format!("was killed by signal {sig}"),
            None => format!("failed (exit status {})", status.code().unwrap_or(-1)),
        };
        let said = if err.is_empty() {
            "nothing on stderr".to_owned()
        } else {
            format!("it said {err:?}")
        };
        return Err(format!(
            "asked {asked}: it {how}, {said}; check that the command works on this node as the \
             sidecar's user (SLURM_CONF, munge)"
        ));
    }
    scontrol::parse_show_job(&out, env).map_err(|e| {
        format!(
            "asked {asked}: {} bytes came back that could not be read ({e}); file an issue \
             with `scontrol --version` and the output",
            out.len()
        )
    })
}

/// The most of an answer read: one job's record is 1 to 5 KB, an array's a record per task
/// started and not yet forgotten.
const MAX_ANSWER: u64 = 4 * 1024 * 1024;
