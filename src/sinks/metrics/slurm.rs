//! The run's SLURM job (docs/slurm.md): who it is, when its controller ends it, its requeues,
//! its array's tasks, and how asking the controller fares.

use super::{family, gauge, info, Out};
use crate::model::Run;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::fmt;

pub(super) fn encode(run: &Run, enc: &mut Out) -> fmt::Result {
    let Some(job) = &run.slurm() else {
        return Ok(());
    };
    let e = &job.env;
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let state = job.controller.as_ref().map(|c| c.state.clone());
    info(
        enc,
        "pulse_slurm_job",
        "The run's SLURM job: its id, its array's id and this task's, name, partition, user, nodes and the controller's state (empty until it answered). Join on `array_job_id` (else `job_id`) for an array's tasks.",
        vec![[
            ("job_id", e.job_id.clone()),
            ("array_job_id", text(&e.array_job_id)),
            ("array_task_id", text(&e.array_task_id)),
            ("name", text(&e.name)),
            ("partition", text(&e.partition)),
            ("user", text(&e.user)),
            ("nodes", text(&e.nodes)),
            ("state", state.unwrap_or_default()),
        ]],
    )?;
    if let Some(end) = job.end_time() {
        gauge(
            enc,
            "pulse_slurm_job_end_time_seconds",
            "When the controller ends the job (its start plus its time limit), while it runs: the run's deadline where none is configured.",
            end,
        )?;
    }
    gauge(
        enc,
        "pulse_slurm_job_restarts",
        "Times the job was requeued and started again (SLURM_RESTART_COUNT, the controller's restart_cnt).",
        f64::from(job.restarts()),
    )?;
    if let Some(tasks) = job.array {
        family(
            enc,
            "pulse_slurm_array_tasks",
            "The job array's tasks by state, as the controller lists them (those it no longer lists are done).",
            MetricType::Gauge,
            [
                ("pending", tasks.pending),
                ("running", tasks.running),
                ("done", tasks.done),
                ("failed", tasks.failed),
            ]
            .map(|(state, n)| ([("state", state)], ConstGauge::new(i64::from(n)))),
        )?;
    }
    family(
        enc,
        "pulse_slurm_controller_asks",
        "Asks of the SLURM controller about the job (one single-job lookup each): when it is new, its driver exits, its warning signal comes, and every slurm_interval.",
        MetricType::Counter,
        [([] as [(&str, &str); 0], ConstCounter::new(job.asks))],
    )?;
    family(
        enc,
        "pulse_slurm_controller_errors",
        "Asks of the SLURM controller that failed: no answer within slurm_timeout, an error, or an answer too big or that could not be read.",
        MetricType::Counter,
        [([] as [(&str, &str); 0], ConstCounter::new(job.errors))],
    )
}
