//! The SLURM job a run is part of (docs/slurm.md): who it is (its environment), what the site's
//! prolog wrote of it, what its controller says of it (state, reason, end time, restarts) and of
//! its array's tasks, and when the controller is asked. Pure: the source reads the environment
//! and the prolog's file and asks the controller; this judges what they said.

use super::{Run, Seconds};
use serde::{Deserialize, Serialize};

/// What a job's environment says of it (SLURM sets these for the batch script and every
/// process it starts). It has no time limit or end time: only the controller knows those.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEnv {
    pub job_id: String,
    pub array_job_id: Option<String>,
    pub array_task_id: Option<String>,
    pub array_task_count: Option<u32>,
    pub name: Option<String>,
    pub partition: Option<String>,
    pub user: Option<String>,
    pub nodes: Option<String>,
    /// `SLURM_RESTART_COUNT`: set (from 1) once the job was requeued.
    pub restart_count: u32,
}

impl JobEnv {
    /// The job of an environment (the sidecar's own, or the driver's `/proc/PID/environ`);
    /// `None` outside a job.
    pub fn from_vars<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<JobEnv> {
        let mut env = JobEnv::default();
        let mut user = None;
        for (key, value) in vars {
            let value = value.trim();
            let text = || (!value.is_empty()).then(|| value.to_owned());
            match key {
                "SLURM_JOB_ID" => env.job_id = value.to_owned(),
                // Older releases set only this one.
                "SLURM_JOBID" if env.job_id.is_empty() => env.job_id = value.to_owned(),
                "SLURM_ARRAY_JOB_ID" => env.array_job_id = text(),
                "SLURM_ARRAY_TASK_ID" => env.array_task_id = text(),
                "SLURM_ARRAY_TASK_COUNT" => env.array_task_count = value.parse().ok(),
                "SLURM_JOB_NAME" => env.name = text(),
                "SLURM_JOB_PARTITION" => env.partition = text(),
                "SLURM_JOB_USER" => env.user = text(),
                "USER" => user = text(),
                "SLURM_JOB_NODELIST" => env.nodes = text(),
                "SLURM_RESTART_COUNT" => env.restart_count = value.parse().unwrap_or(0),
                _ => {}
            }
        }
        let id_ok = !env.job_id.is_empty() && env.job_id.bytes().all(|b| b.is_ascii_digit());
        env.user = env.user.or(user);
        id_ok.then_some(env)
    }

    /// The id that names the whole job: the array's for a task of one.
    pub fn run_job_id(&self) -> &str {
        self.array_job_id.as_deref().unwrap_or(&self.job_id)
    }
}

/// What the controller says of the job now (`scontrol show job`), or what the prolog's file
/// said of it at its start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobState {
    /// `RUNNING`, `PENDING`, `TIMEOUT`, `CANCELLED`, `COMPLETED`, `FAILED`, `PREEMPTED`,
    /// `NODE_FAIL`, `REQUEUED`…
    pub state: String,
    pub reason: Option<String>,
    pub start_time: Option<Seconds>,
    /// When the controller ends it: its start plus its time limit, while it runs.
    pub end_time: Option<Seconds>,
    pub time_limit_minutes: Option<u64>,
    pub restart_count: u32,
}

/// An array's tasks by state, as the controller lists them; those it no longer lists finished
/// (they leave its list `MinJobAge` after their end).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayTasks {
    pub total: u32,
    pub pending: u32,
    pub running: u32,
    pub failed: u32,
    pub done: u32,
}

/// What the site's prolog wrote for the job on this node (docs/slurm.md#the-prolog-file):
/// `KEY=value` lines, as `deploy/slurm/prolog.sh` writes them from its one ask at the job's
/// start. The facts the sidecar would otherwise ask the controller for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFile {
    pub job_id: String,
    pub array_job_id: Option<String>,
    pub array_task_id: Option<String>,
    pub restart_count: u32,
    pub start_time: Option<Seconds>,
    pub end_time: Option<Seconds>,
    pub time_limit_minutes: Option<u64>,
}

impl JobFile {
    /// The file's facts; `None` without a job id. Unknown keys are skipped: a site may add its
    /// own.
    pub fn parse(text: &str) -> Option<JobFile> {
        let mut f = JobFile::default();
        for line in text.lines() {
            let Some((key, value)) = line.trim().split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            let text = || (!value.is_empty()).then(|| value.to_owned());
            let number = || value.parse::<u64>().ok().filter(|n| *n > 0);
            match key.trim() {
                "SLURM_JOB_ID" => f.job_id = value.to_owned(),
                "SLURM_ARRAY_JOB_ID" => f.array_job_id = text(),
                "SLURM_ARRAY_TASK_ID" => f.array_task_id = text(),
                "SLURM_RESTART_COUNT" => f.restart_count = value.parse().unwrap_or(0),
                "START_TIME" => f.start_time = number().map(|n| n as Seconds),
                "END_TIME" => f.end_time = number().map(|n| n as Seconds),
                "TIME_LIMIT" => f.time_limit_minutes = number(),
                _ => {}
            }
        }
        let id_ok = !f.job_id.is_empty() && f.job_id.bytes().all(|b| b.is_ascii_digit());
        id_ok.then_some(f)
    }

    /// Whether it gives what the controller would be asked for: the job's end.
    pub fn has_end(&self) -> bool {
        self.end_time.is_some()
    }

    /// The job as the prolog saw it: running, since the prolog runs as it starts.
    pub fn state(&self) -> JobState {
        JobState {
            state: "RUNNING".to_owned(),
            reason: None,
            start_time: self.start_time,
            end_time: self.end_time,
            time_limit_minutes: self.time_limit_minutes,
            restart_count: self.restart_count,
        }
    }
}

/// Why the controller is asked now (docs/slurm.md#when-it-asks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    FirstSight,
    DriverExited,
    Warned,
    Retry,
    Interval,
}

impl Why {
    pub fn says(self) -> &'static str {
        match self {
            Why::FirstSight => "the job is new",
            Why::DriverExited => "its driver exited",
            Why::Warned => "its warning signal came",
            Why::Retry => "the last ask failed",
            Why::Interval => "slurm_interval passed",
        }
    }
}

/// When the SLURM source asks the controller about the run's job: the question costs the
/// controller the same at any queue size, but a cluster has thousands of nodes asking it.
/// Asked once the job is seen, when its driver exits and when its warning signal comes, each
/// put off by the node's own share of `spread` (so that the tasks of an array that start or
/// end together do not ask together), and otherwise every `interval`; not at all for what the
/// prolog's file gave, unless an event asks. A failed ask is tried again sooner, doubling from
/// a minute up to `interval`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Asks {
    /// The job these are about: its id and restart count (a requeued job's new life is
    /// asked about afresh).
    pub job: (String, u32),
    pub seen_at: Seconds,
    /// This node's share of the spread for this job ([`spread_offset`]).
    pub offset: Seconds,
    pub asked_at: Option<Seconds>,
    /// Failed asks in a row.
    pub failures: u32,
    pub driver_exited_at: Option<Seconds>,
    pub warned_at: Option<Seconds>,
    /// The prolog's file gave the job's end, and the job is no array task (whose array's
    /// tasks only the controller can count).
    pub facts_given: bool,
}

impl Asks {
    /// Asks about `job`, first seen `now`, put off by `offset`.
    pub fn new(job: (String, u32), now: Seconds, offset: Seconds) -> Asks {
        Asks {
            job,
            seen_at: now,
            offset,
            ..Asks::default()
        }
    }

    /// Why the controller is to be asked at `now`, if it is.
    pub fn due(&self, interval: Seconds, now: Seconds) -> Option<Why> {
        let unanswered = |t: Option<Seconds>| t.filter(|t| self.asked_at.is_none_or(|a| *t > a));
        let ready = |t: Seconds| now >= t + self.offset;
        if unanswered(self.driver_exited_at).is_some_and(ready) {
            return Some(Why::DriverExited);
        }
        if unanswered(self.warned_at).is_some_and(ready) {
            return Some(Why::Warned);
        }
        match self.asked_at {
            None if !self.facts_given && ready(self.seen_at) => Some(Why::FirstSight),
            None => None,
            Some(at) if self.failures > 0 => {
                let backoff = 60.0 * 2f64.powi(self.failures.min(16) as i32 - 1);
                (now >= at + backoff.min(interval)).then_some(Why::Retry)
            }
            Some(at) => (!self.facts_given && now >= at + interval).then_some(Why::Interval),
        }
    }

    /// An ask was made at `now`; `ok`: the controller answered.
    pub fn asked(&mut self, now: Seconds, ok: bool) {
        self.asked_at = Some(now);
        self.failures = if ok { 0 } else { self.failures + 1 };
    }
}

/// This node's share of `spread` for a job: the same on every look (a hash of the host and the
/// job, FNV-1a), different from node to node and from task to task.
pub fn spread_offset(host: &str, job_id: &str, spread: Seconds) -> Seconds {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host.bytes().chain([0]).chain(job_id.bytes()) {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    spread * (hash % 10_000) as Seconds / 10_000.0
}

/// How a job ended, when SLURM ended it and not the run's own driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    TimeLimit,
    Cancelled,
    Requeued,
    Preempted,
    NodeFailed,
}

impl Ended {
    pub fn says(self) -> &'static str {
        match self {
            Ended::TimeLimit => "was ended by its time limit",
            Ended::Cancelled => "was cancelled",
            Ended::Requeued => "was requeued",
            Ended::Preempted => "was preempted",
            Ended::NodeFailed => "lost its node",
        }
    }
}

/// The run's SLURM job, as the SLURM source last read it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlurmJob {
    pub env: JobEnv,
    /// Where the environment was read: the sidecar's own, or the driver's.
    pub from: String,
    pub controller: Option<JobState>,
    pub array: Option<ArrayTasks>,
    /// When the controller last answered.
    pub answered_at: Option<Seconds>,
    /// Why the last ask failed, while it does.
    pub error: Option<String>,
    pub errors: u64,
    /// Asks of the controller so far, failed ones included.
    #[serde(default)]
    pub asks: u64,
    /// The prolog's file the job's state came from, while the controller has not answered.
    #[serde(default)]
    pub file: Option<String>,
    /// When the sidecar got the job's warning signal (`--signal=B:USR1@N`, passed on).
    pub warned_at: Option<Seconds>,
    /// The sidecar runs inside the job, and SLURM's SIGTERM reached it: the controller ends
    /// the job while it asks (`COMPLETING`).
    #[serde(default)]
    pub terminated_inside: bool,
}

impl SlurmJob {
    /// The job's restarts (requeues) so far: the controller's count where it answered, else
    /// the environment's.
    pub fn restarts(&self) -> u32 {
        self.controller
            .as_ref()
            .map_or(0, |c| c.restart_count)
            .max(self.env.restart_count)
    }

    /// Since when its last known state stands: the controller's last answer, else the
    /// prolog's file (written at the job's start).
    pub fn known_since(&self) -> Option<Seconds> {
        match (&self.file, self.answered_at) {
            (Some(_), _) => self.controller.as_ref()?.start_time,
            (None, at) => at,
        }
    }

    /// When the controller will end the job (its time limit), while it runs.
    pub fn end_time(&self) -> Option<Seconds> {
        let c = self.controller.as_ref()?;
        (c.state == "RUNNING").then_some(c.end_time?)
    }

    /// Whether SLURM ended (or is ending) the job rather than its driver finishing it.
    pub fn ended(&self) -> Option<Ended> {
        let c = self.controller.as_ref()?;
        match c.state.as_str() {
            "TIMEOUT" | "DEADLINE" => Some(Ended::TimeLimit),
            "CANCELLED" => Some(Ended::Cancelled),
            "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" => Some(Ended::Requeued),
            // Requeued: it waits again with its restart counted; while its processes
            // are ended the controller already counts the restart its environment lacks.
            "PENDING" if c.restart_count > 0 => Some(Ended::Requeued),
            "COMPLETING" if c.restart_count > self.env.restart_count => Some(Ended::Requeued),
            // Its processes are being ended (SIGTERM, then SIGKILL after KillWait): the
            // reason says why while the state does not yet.
            "COMPLETING" if c.reason.as_deref() == Some("TimeLimit") => Some(Ended::TimeLimit),
            // SLURM ends the job while its batch script runs (the script's own end would
            // come first and stop the sidecar while the job still runs): a cancel.
            "COMPLETING" if self.terminated_inside => Some(Ended::Cancelled),
            "PREEMPTED" => Some(Ended::Preempted),
            "NODE_FAIL" | "BOOT_FAIL" => Some(Ended::NodeFailed),
            _ => None,
        }
    }
}

impl Run {
    /// The deadline the run is held to: the configured one, else its SLURM job's end.
    pub fn deadline_or_job_end(&self) -> Option<(Seconds, bool)> {
        match self.deadline_at() {
            Some(at) => Some((at, false)),
            None => Some((self.slurm.as_ref()?.end_time()?, true)),
        }
    }

    /// How SLURM ended the run's job, if it did: then the driver's exit, a dead server and
    /// the silence after are the job's end, not incidents.
    pub fn job_ended(&self) -> Option<Ended> {
        self.slurm.as_ref()?.ended()
    }

    /// The job `env` names, read from `from` (empty when the known job is looked at again):
    /// known before the controller is asked, and a requeue's count (its environment's) may be
    /// newer than the controller's last answer. Another job id starts afresh; returns whether
    /// it did.
    pub fn slurm_seen(&mut self, env: JobEnv, from: String) -> bool {
        let job = self.slurm.get_or_insert_with(SlurmJob::default);
        let new = job.env.job_id != env.job_id;
        if new {
            *job = SlurmJob {
                env,
                from,
                ..SlurmJob::default()
            };
            return true;
        }
        if !from.is_empty() {
            job.from = from;
        }
        job.env.restart_count = job.env.restart_count.max(env.restart_count);
        false
    }

    /// What the controller answered about the job `env` names (read from `from`; empty when
    /// the known job is asked about again), or why it did not. Another job id starts afresh;
    /// returns whether it did.
    pub fn slurm_answer(
        &mut self,
        env: JobEnv,
        from: String,
        answer: Result<(Option<JobState>, Option<ArrayTasks>), String>,
        now: Seconds,
    ) -> bool {
        let (job, new) = self.slurm_job(env, from);
        job.asks += 1;
        match answer {
            Ok((state, array)) => {
                // A job no longer listed (past MinJobAge) keeps its last known state.
                if state.is_some() {
                    job.controller = state;
                    job.file = None;
                }
                job.array = array.or(job.array);
                job.answered_at = Some(now);
                job.error = None;
            }
            Err(e) => {
                job.error = Some(e);
                job.errors += 1;
            }
        }
        new
    }

    /// The job `env` names, told where it was learnt from: another job id starts afresh
    /// (returned as `true`).
    fn slurm_job(&mut self, env: JobEnv, from: String) -> (&mut SlurmJob, bool) {
        let job = self.slurm.get_or_insert_with(SlurmJob::default);
        let new = job.env.job_id != env.job_id;
        if new {
            *job = SlurmJob::default();
        }
        if !from.is_empty() {
            job.from = from;
        }
        job.env = env;
        (job, new)
    }

    /// What the site's prolog wrote of the job `env` names (docs/slurm.md#the-prolog-file), at
    /// `path`, read when it was written or rewritten: the job's state as of then, until the
    /// controller says otherwise. Another job id starts afresh; returns whether it did.
    pub fn slurm_file(&mut self, env: JobEnv, from: String, file: &JobFile, path: String) -> bool {
        let (job, new) = self.slurm_job(env, from);
        job.controller = Some(file.state());
        job.file = Some(path);
        new
    }

    /// The job's warning signal arrived at `now`; returns the job's id, where one is known.
    pub fn slurm_warned(&mut self, now: Seconds) -> Option<String> {
        let job = self.slurm.as_mut()?;
        job.warned_at = Some(now);
        Some(job.env.job_id.clone())
    }

    /// What the controller said as the sidecar stops; `inside`: SLURM's SIGTERM reached a
    /// sidecar inside the job.
    pub fn slurm_last_answer(
        &mut self,
        state: JobState,
        array: Option<ArrayTasks>,
        inside: bool,
        now: Seconds,
    ) {
        if let Some(job) = self.slurm.as_mut() {
            job.terminated_inside = inside && state.state == "COMPLETING";
            job.asks += 1;
            job.file = None;
            job.controller = Some(state);
            job.array = array.or(job.array);
            job.answered_at = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_environment_names_its_job_and_array() {
        let vars = [
            ("SLURM_JOB_ID", "42"),
            ("SLURM_ARRAY_JOB_ID", "40"),
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_JOB_NAME", "synth"),
            ("SLURM_JOB_PARTITION", "gpu"),
            ("USER", "ana"),
            ("SLURM_JOB_NODELIST", "node[01-02]"),
            ("SLURM_RESTART_COUNT", "1"),
            ("PATH", "/usr/bin"),
        ];
        let env = JobEnv::from_vars(vars).unwrap();
        assert_eq!(env.job_id, "42");
        assert_eq!(env.run_job_id(), "40");
        assert_eq!(env.array_task_count, Some(4));
        assert_eq!(env.user.as_deref(), Some("ana"));
        assert_eq!(env.restart_count, 1);
        assert_eq!(JobEnv::from_vars([("PATH", "/usr/bin")]), None);
        assert_eq!(JobEnv::from_vars([("SLURM_JOB_ID", "4x")]), None);
    }

    /// A sidecar restarted (a requeued job's) starts from the job as it is now: the last
    /// life's "ending" and "cancelled" are not restored with the run.
    #[test]
    fn what_the_controller_said_is_not_restored_after_a_restart() {
        let run = Run {
            slurm: Some(SlurmJob {
                terminated_inside: true,
                warned_at: Some(5.0),
                ..SlurmJob::default()
            }),
            ..Run::default()
        };
        let saved = serde_json::to_string(&run).unwrap();
        let restored: Run = serde_json::from_str(&saved).unwrap();
        assert_eq!(restored.slurm, None);
    }

    #[test]
    fn the_prolog_file_gives_the_jobs_end() {
        let text =
            "# pipeline-pulse\nSLURM_JOB_ID=12\nSLURM_ARRAY_JOB_ID=10\nSLURM_ARRAY_TASK_ID=2\n\
                    SLURM_RESTART_COUNT=1\nSTART_TIME=1000\nEND_TIME=1180\nTIME_LIMIT=3\nSITE=x\n";
        let f = JobFile::parse(text).unwrap();
        assert_eq!(f.array_job_id.as_deref(), Some("10"));
        assert!(f.has_end());
        let s = f.state();
        assert_eq!(s.state, "RUNNING");
        assert_eq!(
            (s.end_time, s.time_limit_minutes, s.restart_count),
            (Some(1180.0), Some(3), 1)
        );
        // Unlimited: no end, no limit.
        let f = JobFile::parse("SLURM_JOB_ID=4\nEND_TIME=\nTIME_LIMIT=\n").unwrap();
        assert!(!f.has_end());
        assert_eq!(JobFile::parse("END_TIME=5\n"), None);
    }

    #[test]
    fn the_controller_is_asked_rarely_and_when_it_matters() {
        let interval = 300.0;
        let mut asks = Asks::new(("7".into(), 0), 1000.0, 12.0);
        // First sight, put off by this node's share of the spread.
        assert_eq!(asks.due(interval, 1000.0), None);
        assert_eq!(asks.due(interval, 1012.0), Some(Why::FirstSight));
        asks.asked(1012.0, true);
        assert_eq!(asks.due(interval, 1300.0), None);
        assert_eq!(asks.due(interval, 1312.0), Some(Why::Interval));
        asks.asked(1312.0, true);
        // The driver's exit: asked at once but for the spread, not at the interval.
        asks.driver_exited_at = Some(1400.0);
        assert_eq!(asks.due(interval, 1405.0), None);
        assert_eq!(asks.due(interval, 1412.0), Some(Why::DriverExited));
        asks.asked(1412.0, true);
        assert_eq!(asks.due(interval, 1413.0), None, "answered");
        asks.warned_at = Some(1500.0);
        assert_eq!(asks.due(interval, 1512.0), Some(Why::Warned));
        // A failed ask: again after a minute, then two, never later than the interval.
        asks.asked(1512.0, false);
        assert_eq!(asks.due(interval, 1571.0), None);
        assert_eq!(asks.due(interval, 1572.0), Some(Why::Retry));
        asks.asked(1572.0, false);
        assert_eq!(asks.due(interval, 1691.0), None);
        assert_eq!(asks.due(interval, 1692.0), Some(Why::Retry));
        asks.failures = 9;
        assert_eq!(asks.due(interval, 1572.0 + interval), Some(Why::Retry));
    }

    #[test]
    fn the_prolog_files_facts_spare_the_controller_until_something_happens() {
        let mut asks = Asks {
            facts_given: true,
            ..Asks::new(("7".into(), 0), 1000.0, 0.0)
        };
        assert_eq!(asks.due(300.0, 1000.0), None);
        assert_eq!(asks.due(300.0, 1_000_000.0), None);
        asks.driver_exited_at = Some(2000.0);
        assert_eq!(asks.due(300.0, 2000.0), Some(Why::DriverExited));
        asks.asked(2000.0, true);
        assert_eq!(asks.due(300.0, 1_000_000.0), None);
    }

    #[test]
    fn the_spread_is_the_nodes_own_and_within_bounds() {
        let a = spread_offset("node001", "4242", 30.0);
        assert_eq!(
            a,
            spread_offset("node001", "4242", 30.0),
            "the same every time"
        );
        assert!((0.0..30.0).contains(&a));
        let all: Vec<Seconds> = (0..1000)
            .map(|i| spread_offset("node001", &format!("{}", 5000 + i), 30.0))
            .collect();
        assert!(all.iter().all(|o| (0.0..30.0).contains(o)));
        // A thousand tasks that start together: spread over the whole span, a few per second.
        let per_second = |s: usize| all.iter().filter(|o| **o as usize == s).count();
        assert!(
            (0..30).all(|s| (10..70).contains(&per_second(s))),
            "{:?}",
            (0..30).map(per_second).collect::<Vec<_>>()
        );
        assert_eq!(spread_offset("node001", "4242", 0.0), 0.0);
    }

    #[test]
    fn the_controller_tells_how_slurm_ended_it() {
        let job = |state: &str, restarts: u32| SlurmJob {
            controller: Some(JobState {
                state: state.into(),
                end_time: Some(1000.0),
                restart_count: restarts,
                ..JobState::default()
            }),
            ..SlurmJob::default()
        };
        assert_eq!(job("TIMEOUT", 0).ended(), Some(Ended::TimeLimit));
        assert_eq!(job("CANCELLED", 0).ended(), Some(Ended::Cancelled));
        assert_eq!(job("PENDING", 1).ended(), Some(Ended::Requeued));
        assert_eq!(job("PENDING", 0).ended(), None);
        assert_eq!(job("COMPLETING", 1).ended(), Some(Ended::Requeued));
        assert_eq!(job("COMPLETING", 0).ended(), None, "its own end");
        let inside = SlurmJob {
            terminated_inside: true,
            ..job("COMPLETING", 0)
        };
        assert_eq!(inside.ended(), Some(Ended::Cancelled));
        assert_eq!(job("COMPLETED", 0).ended(), None);
        assert_eq!(job("FAILED", 0).ended(), None, "the driver's own failure");
        assert_eq!(job("RUNNING", 2).restarts(), 2);
        assert_eq!(job("RUNNING", 0).end_time(), Some(1000.0));
        assert_eq!(job("TIMEOUT", 0).end_time(), None);
    }
}
