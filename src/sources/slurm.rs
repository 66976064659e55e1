//! The run's SLURM job (docs/slurm.md): who it is, from the sidecar's own environment when it
//! runs inside the job, else from the driver's (`/proc/PID/environ`); and what the controller
//! says of it, asked with `squeue --json` under a deadline, one call at a time (this source's
//! thread), no more often than `slurm_interval`. A controller that does not answer is a
//! counter and a note: the job's last known state stands.

use crate::collectors::Collector;
use crate::lock::Locked;
use crate::model::slurm::{ArrayTasks, JobEnv, JobState, SlurmJob};
use crate::model::Run;
use crate::sources::{Awaited, Built, Context, Runs, Source, SourceConfig};
use serde_json::Value;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The SLURM source's section of the configuration.
pub struct Settings {
    pub on: bool,
    pub interval: Duration,
    pub timeout: Duration,
    /// The `squeue` to run: found in `PATH` unless a path is given.
    pub squeue: String,
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
                told: None,
                asked: None,
            })),
        }))
    }
}

struct SlurmSource {
    run: Arc<Mutex<Run>>,
    /// The sidecar's own job, when it runs inside one.
    own: Option<JobEnv>,
    settings: Settings,
    /// The last error said in the log, so that a controller down is said once.
    told: Option<String>,
    /// The job last asked about, and when.
    asked: Option<(String, Instant)>,
}

/// How often the environment is looked at (a local read): a job that starts is known within
/// this, and its controller asked at once; then every `slurm_interval`.
const LOOK: Duration = Duration::from_secs(5);

impl Source for SlurmSource {
    fn poll(&mut self) {
        let (driver, known) = {
            let run = self.run.locked();
            let driver = run
                .process()
                .as_ref()
                .filter(|p| p.up)
                .and_then(|p| p.pid)
                .or_else(|| Some(run.discovered().as_ref()?.driver.as_ref()?.pid));
            (driver, run.slurm().as_ref().map(|j| j.env.clone()))
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
        let due = self
            .asked
            .as_ref()
            .is_none_or(|(id, at)| *id != env.job_id || at.elapsed() >= self.settings.interval);
        if !due {
            self.run.locked().slurm_env_seen(&env);
            return;
        }
        self.asked = Some((env.job_id.clone(), Instant::now()));
        let answer = ask(&self.settings, &env);
        let now = crate::clock::now();
        match &answer {
            Err(e) if self.told.as_ref() != Some(e) => {
                tracing::warn!(
                    "SLURM: cannot read job {} from the controller: {e}",
                    env.job_id
                );
            }
            Ok(_) if self.told.is_some() => tracing::info!("SLURM: the controller answers again"),
            _ => {}
        }
        self.told = answer.as_ref().err().cloned();
        let (job_id, said) = (env.job_id.clone(), from.clone());
        if self.run.locked().slurm_answer(env, from, answer, now) {
            tracing::info!("SLURM: the run is job {job_id} (from {said})");
        }
    }

    fn save_snapshot(&mut self) {}
}

/// Notes the job's warning signal: `sbatch --signal=B:USR1@N` reaches the batch shell only,
/// and the templates in deploy/slurm/ pass it on to the sidecar as SIGUSR1. Listening also
/// keeps SIGUSR1 from ending the sidecar (its default action).
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
/// job's end) and tells what the controller says first. At most `timeout`, and no more than 5 s.
pub async fn ask_once(run: &Arc<Mutex<Run>>, timeout: Duration) {
    let inside = |j: &SlurmJob| own_job().is_some_and(|own| own.job_id == j.env.job_id);
    let Some((env, inside)) = run
        .locked()
        .slurm()
        .as_ref()
        .map(|j| (j.env.clone(), inside(j)))
    else {
        return;
    };
    let settings = Settings {
        on: true,
        interval: Duration::ZERO,
        timeout: timeout.min(Duration::from_secs(5)),
        squeue: "squeue".into(),
    };
    let env_id = env.job_id.clone();
    let asked = tokio::task::spawn_blocking(move || ask(&settings, &env)).await;
    if let Ok(Ok((Some(state), array))) = asked {
        let now = crate::clock::now();
        tracing::info!("SLURM: at the end, job {} is {}", env_id, state.state);
        run.locked().slurm_last_answer(state, array, inside, now);
    }
}

/// The sidecar's own job, when it runs inside one.
fn own_job() -> Option<JobEnv> {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    JobEnv::from_vars(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// The job of the driver's environment, where it can be read (the same user, or root).
fn driver_job(pid: u32) -> Option<JobEnv> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let text = String::from_utf8_lossy(&raw);
    JobEnv::from_vars(text.split('\0').filter_map(|kv| kv.split_once('=')))
}

/// Asks the controller for the job (and its array's tasks): `squeue --json`, killed at the
/// deadline.
fn ask(
    settings: &Settings,
    env: &JobEnv,
) -> Result<(Option<JobState>, Option<ArrayTasks>), String> {
    let mut child = Command::new(&settings.squeue)
        .args(["--json", "--states=all", "--jobs", env.run_job_id()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", settings.squeue))?;
    let mut stdout = child.stdout.take().expect("piped");
    // Read on a thread of its own: a controller that answers slowly must not outlast the
    // deadline through a blocked read.
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.by_ref().take(MAX_ANSWER).read_to_end(&mut buf);
        buf
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
                    "squeue gave no answer within {:?} (the controller does not answer)",
                    settings.timeout
                ));
            }
        }
    };
    let out = reader.join().unwrap_or_default();
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.by_ref().take(4096).read_to_string(&mut err);
        }
        return Err(format!("squeue {status}: {}", err.trim()));
    }
    parse_squeue(&out, env)
}

/// The most of `squeue --json` read: a site's whole queue is no job's answer.
const MAX_ANSWER: u64 = 16 * 1024 * 1024;

/// The job and its array's tasks from `squeue --json` (SLURM 22.05's shapes, and the
/// `{set, infinite, number}` and state lists of later releases: docs/slurm.md).
pub fn parse_squeue(
    text: &[u8],
    env: &JobEnv,
) -> Result<(Option<JobState>, Option<ArrayTasks>), String> {
    let doc: Value = serde_json::from_slice(text).map_err(|e| format!("squeue --json: {e}"))?;
    let jobs = doc["jobs"]
        .as_array()
        .ok_or("squeue --json: no \"jobs\" list")?;
    let ours = jobs
        .iter()
        .find(|j| number(&j["job_id"]).is_some_and(|id| id.to_string() == env.job_id));
    let state = ours.map(|j| JobState {
        state: state_of(&j["job_state"]),
        reason: j["state_reason"]
            .as_str()
            .filter(|r| !r.is_empty() && *r != "None")
            .map(str::to_owned),
        start_time: time(&j["start_time"]),
        end_time: time(&j["end_time"]),
        time_limit_minutes: number(&j["time_limit"]).map(|n| n as u64),
        restart_count: number(&j["restart_cnt"]).unwrap_or(0.0) as u32,
    });
    let array = env.array_job_id.as_ref().map(|array| {
        let tasks = jobs
            .iter()
            .filter(|j| number(&j["array_job_id"]).is_some_and(|id| id.to_string() == *array));
        count_tasks(tasks, env.array_task_count)
    });
    Ok((state, array))
}

fn count_tasks<'a>(tasks: impl Iterator<Item = &'a Value>, total: Option<u32>) -> ArrayTasks {
    let mut t = ArrayTasks::default();
    for task in tasks {
        let state = state_of(&task["job_state"]);
        // A pending record stands for every task its `array_task_string` names ("2-3%2").
        let n = match task["array_task_string"].as_str() {
            Some(s) if !s.is_empty() && state == "PENDING" => tasks_in(s),
            _ => 1,
        };
        match state.as_str() {
            "PENDING" | "REQUEUED" => t.pending += n,
            "RUNNING" | "COMPLETING" | "CONFIGURING" | "SUSPENDED" => t.running += n,
            "COMPLETED" => t.done += n,
            _ => t.failed += n,
        }
    }
    let listed = t.pending + t.running + t.done + t.failed;
    t.total = total.unwrap_or(listed).max(listed);
    // Finished tasks leave the list after MinJobAge: those not listed are done.
    t.done += t.total - listed;
    t
}

/// How many tasks "0-3%2", "[4,6-7]" or "5" names.
fn tasks_in(s: &str) -> u32 {
    let s = s.trim_matches(|c| c == '[' || c == ']');
    let s = s.split('%').next().unwrap_or(s);
    s.split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().unwrap_or(0), b.parse().unwrap_or(0));
                b.saturating_sub(a) + 1
            }
            None => 1,
        })
        .sum()
}

/// A number as 22.05 writes it, or as later releases do (`{"set": true, "number": N}`).
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Object(o) if o.get("set").and_then(Value::as_bool) != Some(false) => {
            if o.get("infinite").and_then(Value::as_bool) == Some(true) {
                return None;
            }
            o.get("number")?.as_f64()
        }
        _ => None,
    }
}

/// A time: epoch seconds, 0 for none.
fn time(v: &Value) -> Option<f64> {
    number(v).filter(|t| *t > 0.0)
}

/// A state as 22.05 writes it ("RUNNING"), or as later releases do (["RUNNING"]).
fn state_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.first().and_then(Value::as_str).unwrap_or("").to_owned(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What SLURM 22.05 itself printed (tests/testdata/slurm/README.md says how each was made).
    fn sample(name: &str, env: &JobEnv) -> (Option<JobState>, Option<ArrayTasks>) {
        let path = format!("{}/tests/testdata/slurm/{name}", env!("CARGO_MANIFEST_DIR"));
        parse_squeue(&std::fs::read(path).unwrap(), env).unwrap()
    }

    fn job(id: &str) -> JobEnv {
        JobEnv {
            job_id: id.into(),
            ..JobEnv::default()
        }
    }

    #[test]
    fn real_squeue_answers_read_as_the_controller_meant_them() {
        let (running, _) = sample("squeue-22.05-running.json", &job("1"));
        let running = running.unwrap();
        assert_eq!(running.state, "RUNNING");
        assert_eq!(running.reason, None, "\"None\" is no reason");
        assert_eq!(running.time_limit_minutes, Some(2));
        assert_eq!(running.end_time, Some(1_796_629_431.0));
        let (timeout, _) = sample("squeue-22.05-timeout.json", &job("1"));
        let timeout = timeout.unwrap();
        assert_eq!(
            (timeout.state.as_str(), timeout.reason.as_deref()),
            ("TIMEOUT", Some("TimeLimit"))
        );
        let (requeued, _) = sample("squeue-22.05-requeued.json", &job("1"));
        assert_eq!(requeued.as_ref().unwrap().restart_count, 1);
        let (cancelled, _) = sample("squeue-22.05-cancelled.json", &job("1"));
        assert_eq!(cancelled.unwrap().state, "CANCELLED");
        // A job the answer does not hold is no state at all.
        assert_eq!(sample("squeue-22.05-running.json", &job("9")).0, None);
        let task = JobEnv {
            array_job_id: Some("1".into()),
            array_task_id: Some("0".into()),
            array_task_count: Some(4),
            ..job("2")
        };
        let (state, tasks) = sample("squeue-22.05-array.json", &task);
        assert_eq!(state.unwrap().state, "RUNNING");
        assert_eq!(
            tasks,
            Some(ArrayTasks {
                total: 4,
                pending: 2,
                running: 2,
                failed: 0,
                done: 0
            })
        );
        assert!(parse_squeue(b"{\"jobs\": 3}", &task).is_err());
        assert!(parse_squeue(b"not json", &task).is_err());
    }

    #[test]
    fn task_strings_count_their_tasks() {
        assert_eq!(tasks_in("2-3%2"), 2);
        assert_eq!(tasks_in("[4,6-7]"), 3);
        assert_eq!(tasks_in("5"), 1);
    }

    #[test]
    fn numbers_and_states_of_either_shape() {
        let v: Value = serde_json::json!({"a": 5, "b": {"set": true, "infinite": false, "number": 7},
            "c": {"set": false, "number": 0}, "d": {"set": true, "infinite": true, "number": 0}});
        assert_eq!(number(&v["a"]), Some(5.0));
        assert_eq!(number(&v["b"]), Some(7.0));
        assert_eq!(number(&v["c"]), None);
        assert_eq!(number(&v["d"]), None);
        assert_eq!(state_of(&serde_json::json!(["TIMEOUT"])), "TIMEOUT");
    }
}
