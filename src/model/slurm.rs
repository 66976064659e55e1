//! The SLURM job a run is part of (docs/slurm.md): who it is (its environment), what its
//! controller says of it (state, reason, end time, restarts) and of its array's tasks. Pure: the
//! source reads the environment and asks the controller; this judges what they said.

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

/// What the controller says of the job now (`squeue --json`).
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

    /// The job's environment read again between asks: a requeue's count may be newer than
    /// the controller's last answer.
    pub fn slurm_env_seen(&mut self, env: &JobEnv) {
        if let Some(job) = self.slurm.as_mut() {
            job.env.restart_count = job.env.restart_count.max(env.restart_count);
        }
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
        let job = self.slurm.get_or_insert_with(SlurmJob::default);
        let new = job.env.job_id != env.job_id;
        if new {
            *job = SlurmJob::default();
        }
        if !from.is_empty() {
            job.from = from;
        }
        job.env = env;
        match answer {
            Ok((state, array)) => {
                // A job no longer listed (past MinJobAge) keeps its last known state.
                if state.is_some() {
                    job.controller = state;
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
