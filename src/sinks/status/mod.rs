//! The status of a run at a glance: one JSON document (`/status`), rendered for a terminal by
//! `pipeline-pulse status` and for a browser by the page at `/`.
//!
//! The document is built from the model by a pure function; its schema is documented in
//! `docs/status.md` and is what scripts may rely on.

pub mod terminal;

use crate::model::stacks::Captures;
use crate::model::{AlertView, Discovered, PartitionView, Run, Seconds};
use crate::rules::AlertName;
use crate::rules::{self, History, Rules};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `/status` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub host: String,
    /// Unix seconds when the document was made.
    pub generated_at: f64,
    pub model: Option<String>,
    /// No alert firing and no partition stalled.
    pub healthy: bool,
    pub run: RunStatus,
    pub partitions: Vec<PartitionStatus>,
    /// `None` when GPUs are not read.
    pub gpus: Option<Vec<GpuStatus>>,
    pub process: Option<ProcessStatus>,
    pub server: Option<ServerStatus>,
    /// Alerts pending or firing.
    pub alerts: Vec<AlertStatus>,
    /// Collector name → working.
    pub collectors: BTreeMap<String, bool>,
    /// The collectors switched on (`collectors`, metrics.md#collectors); the others read
    /// nothing.
    #[serde(default)]
    pub collectors_on: Vec<String>,
    /// Files whose reads do not return (the file system under them does not answer), and
    /// since when.
    #[serde(default)]
    pub hung_files: BTreeMap<String, f64>,
    /// The last lines of the logs.
    pub log_tail: Vec<String>,
    /// The last lines of the inference server's log, when one is followed.
    #[serde(default)]
    pub server_log_tail: Vec<String>,
    /// Partitions whose output files an earlier run left: not in `run` (see `docs/formats.md`, output files).
    #[serde(default)]
    pub previous: Vec<PreviousStatus>,
    /// What `--run-dir` discovery found.
    #[serde(default)]
    pub discovered: Option<Discovered>,
    /// Who holds GPU memory (with `gpu_processes`): the server, or a stale process; or that
    /// the GPU processes are another PID namespace's (docs/deploy.md#what-each-deployment-sees).
    #[serde(default)]
    pub gpu_memory: Option<String>,
    /// Where the run's processes waited when their stacks were last taken (the full dumps
    /// are at /api/stacks).
    #[serde(default)]
    pub stacks: Option<StacksStatus>,
    /// The run's SLURM job: who it is, what its controller says, its array's tasks, and how it
    /// ended when SLURM ended it (docs/slurm.md).
    #[serde(default)]
    pub slurm: Option<SlurmStatus>,
    /// The latest action runs, the newest last (docs/alerts.md#actions): what the alert
    /// engine publishes, added where the document is served.
    #[serde(default)]
    pub actions: Vec<crate::model::ActionRun>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmStatus {
    #[serde(flatten)]
    pub job: crate::model::slurm::SlurmJob,
    /// When the controller ends it, while it runs.
    pub end_time: Option<f64>,
    pub restarts: u32,
    /// How SLURM ended it, when it did ("was ended by its time limit").
    pub ended: Option<String>,
    /// How old its last known state is: since the controller last answered, or since the
    /// prolog wrote its file (its `StartTime`); none before either.
    #[serde(default)]
    pub age_seconds: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StacksStatus {
    pub at: f64,
    /// The alerts that asked for them, or `on demand`.
    pub reason: String,
    pub processes: Vec<ProcessStacksStatus>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessStacksStatus {
    pub role: String,
    pub pid: u32,
    pub summary: String,
    #[serde(default)]
    pub note: Option<String>,
}

impl StacksStatus {
    fn of(c: &crate::model::stacks::Captures) -> StacksStatus {
        StacksStatus {
            at: c.at,
            reason: c.reason.clone(),
            processes: c
                .processes
                .iter()
                .map(|p| ProcessStacksStatus {
                    role: p.role.clone(),
                    pid: p.pid,
                    summary: p.summary.clone(),
                    note: p.note.clone(),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviousStatus {
    pub name: String,
    pub records: u64,
    pub planned: Option<u64>,
    pub last_write: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunStatus {
    pub completed: u64,
    pub planned: u64,
    pub eta_seconds: Option<f64>,
    /// Completion tokens per second now, over the partitions being processed.
    pub tokens_per_second: Option<f64>,
    /// What progress aims at: the plan, or a budget before it.
    #[serde(default)]
    pub target: u64,
    /// The ETA's band: at the fastest and the slowest of the recent rates.
    #[serde(default)]
    pub eta_lower_seconds: Option<f64>,
    #[serde(default)]
    pub eta_upper_seconds: Option<f64>,
    /// The deadline (Unix seconds), and the time to spare at the band's slow end (negative:
    /// late).
    #[serde(default)]
    pub deadline: Option<f64>,
    #[serde(default)]
    pub deadline_margin_seconds: Option<f64>,
    #[serde(default)]
    pub budget_reached: bool,
    #[serde(default)]
    pub gpu_hours: f64,
    #[serde(default)]
    pub gpu_hours_projected: Option<f64>,
    #[serde(default)]
    pub cost: Option<f64>,
    #[serde(default)]
    pub cost_projected: Option<f64>,
    /// The above in one line, as the terminal, the page and the emails show it.
    #[serde(default)]
    pub outlook: String,
    /// The run this node belongs to, its id once read, and the node's role in it.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub run_id: Option<String>,
    #[serde(default)]
    pub role: Option<String>,
}

impl RunStatus {
    fn of(p: &crate::model::Projection, now: Seconds) -> RunStatus {
        let margin = p
            .deadline
            .zip(p.eta_band.map(|b| b.1).or(p.eta_seconds))
            .map(|(deadline, eta)| deadline - (now + eta));
        let mut run = RunStatus {
            completed: p.completed,
            planned: p.planned,
            eta_seconds: p.eta_seconds,
            tokens_per_second: p.tokens_per_second,
            target: p.target,
            eta_lower_seconds: p.eta_band.map(|b| b.0),
            eta_upper_seconds: p.eta_band.map(|b| b.1),
            deadline: p.deadline,
            deadline_margin_seconds: margin,
            budget_reached: p.budget_reached,
            gpu_hours: p.gpu_hours,
            gpu_hours_projected: p.gpu_hours_projected,
            cost: p.cost,
            cost_projected: p.cost_projected,
            outlook: String::new(),
            name: None,
            run_id: None,
            role: None,
        };
        run.outlook = run.outlook_line(now);
        run
    }

    /// "ends 2026-12-02 14:20Z (13:50–15:10) · deadline 2026-12-03 09:00Z, 18h40m to spare ·
    /// 12.3 GPU-h, 31.0 at the end · cost 30.75, 77.50 at the end".
    fn outlook_line(&self, now: Seconds) -> String {
        let at = |secs: f64| crate::human::utc_minute(now + secs);
        let mut parts = Vec::new();
        if self.budget_reached {
            parts.push("stopped at its budget".to_owned());
        } else if self.target > 0 && self.completed >= self.target {
            parts.push("done".to_owned());
        } else {
            match (
                self.eta_seconds,
                self.eta_lower_seconds,
                self.eta_upper_seconds,
            ) {
                (Some(eta), Some(lo), Some(hi)) => parts.push(format!(
                    "ends {} ({}–{})",
                    at(eta),
                    clock_of(&at(lo)),
                    clock_of(&at(hi))
                )),
                (Some(eta), _, _) => parts.push(format!(
                    "ends {} (no band yet: too little history of rates)",
                    at(eta)
                )),
                _ => parts.push("no rate measured yet".to_owned()),
            }
        }
        if let Some(deadline) = self.deadline {
            let line = match self.deadline_margin_seconds {
                Some(m) if m >= 0.0 => format!("{} to spare", crate::human::human(m)),
                Some(m) => format!("{} late", crate::human::human(-m)),
                None => "margin unknown".to_owned(),
            };
            parts.push(format!(
                "deadline {}, {line}",
                crate::human::utc_minute(deadline)
            ));
        }
        let projected = |v: Option<f64>, digits: usize| {
            v.map_or(String::new(), |v| format!(", {v:.digits$} at the end"))
        };
        if self.gpu_hours > 0.0 || self.gpu_hours_projected.is_some() {
            parts.push(format!(
                "{:.1} GPU-h{}",
                self.gpu_hours,
                projected(self.gpu_hours_projected, 1)
            ));
        }
        if let Some(cost) = self.cost {
            parts.push(format!(
                "cost {cost:.2}{}",
                projected(self.cost_projected, 2)
            ));
        }
        parts.join(" · ")
    }
}

/// "14:20" of "2026-12-02 14:20Z".
fn clock_of(stamp: &str) -> &str {
    stamp
        .split_once(' ')
        .map_or(stamp, |(_, t)| t.trim_end_matches('Z'))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionStatus {
    pub name: String,
    pub active: bool,
    pub mode: Option<String>,
    pub completed: Option<u64>,
    pub planned: Option<u64>,
    pub progress_ratio: Option<f64>,
    pub errors: Option<u64>,
    pub requests_per_second: Option<f64>,
    pub tokens_per_second: Option<f64>,
    pub eta_seconds: Option<f64>,
    pub stall_seconds: Option<f64>,
    pub restarts: u64,
    /// A `Stalled` alert holds for this partition.
    pub stalled: bool,
    pub outputs: Option<OutputStatus>,
    /// The log's completed count minus the records written.
    pub log_output_gap: Option<i64>,
    /// Log and outputs disagree by more than max(50, 2% of planned).
    pub mismatch: bool,
    /// tok/s over the last hour, a value per minute (oldest first), from the history; what
    /// the terminal view draws as a sparkline.
    #[serde(default)]
    pub recent_tokens_per_second: Vec<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OutputStatus {
    pub records: u64,
    pub bytes: u64,
    pub errors: u64,
    pub empty: u64,
    pub invalid: u64,
    pub tokens: u64,
    pub last_write: Option<f64>,
    /// Distinct records: the records less the duplicates of an earlier id.
    #[serde(default)]
    pub unique: u64,
    #[serde(default)]
    pub duplicates: u64,
    /// The identity cap was reached: `unique` is at most this much too high.
    #[serde(default)]
    pub unique_error: u64,
    /// Records an earlier pass of the driver wrote, where a restart or resume says so.
    #[serde(default)]
    pub earlier_pass: Option<u64>,
    /// Records that stopped at their token limit.
    #[serde(default)]
    pub truncated: u64,
    /// Records lacking each required field.
    #[serde(default)]
    pub missing: std::collections::BTreeMap<String, u64>,
    /// Completion tokens per record: p50, p90, p99.
    #[serde(default)]
    pub token_quantiles: Option<[f64; 3]>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStatus {
    pub index: u32,
    pub name: String,
    pub utilization: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub temperature_celsius: Option<f64>,
    pub power_watts: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessStatus {
    pub up: bool,
    pub pid: Option<u32>,
}

/// The inference server as the status shows it: `None` where none is probed or followed.
fn server_status(run: &Run, now: Seconds) -> Option<ServerStatus> {
    (run.server().is_some() || run.logs().iter().any(|l| l.server)).then(|| {
        let figures = run.server_last_known();
        ServerStatus {
            up: run.server().as_ref().and_then(|s| s.up),
            running_requests: figures.running,
            queued_requests: figures.queued,
            generation_tokens_per_second: figures.generation_tokens_per_second,
            kv_cache_usage: figures.kv_cache_usage,
            last_report: figures.last_report_at,
            error: run.server().as_ref().and_then(|s| s.error.clone()),
            last_known: figures.down,
            crashed: run.server_log().crashed().map(|f| f.text.clone()),
            starting: run.server_starting(now),
            engine_dead: run.engine_dead(),
        }
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerStatus {
    pub up: Option<bool>,
    pub running_requests: Option<f64>,
    pub queued_requests: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    #[serde(default)]
    pub kv_cache_usage: Option<f64>,
    /// When the server last reported figures (its log, else its metrics).
    #[serde(default)]
    pub last_report: Option<f64>,
    pub error: Option<String>,
    /// The server is down: the figures above are its last known ones, `last_report` old.
    #[serde(default)]
    pub last_known: bool,
    /// The line its log ends in when that is a crash (`EngineDeadError`, a watchdog, OOM).
    #[serde(default)]
    pub crashed: Option<String>,
    /// Its health check has never passed yet, within the time a server may take to start.
    #[serde(default)]
    pub starting: bool,
    /// What is dead behind a front end that still runs (its scheduler, its `EngineCore`).
    #[serde(default)]
    pub engine_dead: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertStatus {
    pub alert: String,
    pub partition: Option<String>,
    pub firing: bool,
    pub summary: String,
    /// Held back by a silence: evaluated and shown, not notified.
    #[serde(default)]
    pub silenced: bool,
}

impl Status {
    /// The status of a running sidecar: alerts as its alert engine tracks them.
    pub fn from_run(run: &Run, view: &AlertView, host: &str, now: Seconds) -> Status {
        let alerts = view
            .alerts
            .iter()
            .map(|a| AlertStatus {
                alert: a.alert.clone(),
                partition: a.partition.clone(),
                firing: a.firing,
                summary: a.summary.clone(),
                silenced: a.silenced,
            })
            .collect();
        Status {
            actions: view.action_runs.clone(),
            ..build(run, view.stacks.as_deref(), host, now, alerts)
        }
    }

    /// The status from a one-shot read of the files: every rule that holds now counts as
    /// firing (there is no history to wait out a `for`); notices are not alerts.
    pub fn from_files(run: &Run, rules: &Rules, host: &str, now: Seconds) -> Status {
        let alerts = rules::evaluate(run, None, rules, &History::default(), now)
            .into_iter()
            .filter(|c| !c.alert.is_notice())
            .map(|c| AlertStatus {
                alert: c.alert.to_string(),
                partition: c.partition,
                firing: true,
                summary: c.summary,
                silenced: false,
            })
            .collect();
        build(run, None, host, now, alerts)
    }

    /// Exit status for scripts: 0 healthy, 1 when an alert fires or a partition stalls.
    pub fn exit_code(&self) -> u8 {
        u8::from(!self.healthy)
    }
}

fn build(
    run: &Run,
    stacks: Option<&Captures>,
    host: &str,
    now: Seconds,
    alerts: Vec<AlertStatus>,
) -> Status {
    let stalled = |name: &str| {
        alerts.iter().any(|a: &AlertStatus| {
            a.firing
                && a.alert == AlertName::Stalled.as_str()
                && a.partition.as_deref() == Some(name)
        })
    };
    let views = run.views();
    let partitions: Vec<PartitionStatus> = views
        .iter()
        .filter(|v| !v.previous)
        .map(|v| partition(run, v, stalled(v.name), now))
        .collect();
    let previous = views
        .iter()
        .filter(|v| v.previous)
        .map(|v| PreviousStatus {
            name: v.name.to_owned(),
            records: v.outputs.as_ref().map_or(0, |o| o.records),
            planned: v.planned(),
            last_write: v.last_write,
        })
        .collect();
    let projection = run.projection(now);
    let healthy = !alerts.iter().any(|a| a.firing) && !partitions.iter().any(|p| p.stalled);
    Status {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        host: host.to_owned(),
        generated_at: now,
        model: run.model_name().clone(),
        healthy,
        run: RunStatus {
            name: run.identity().as_ref().map(|i| i.run.clone()),
            run_id: run.run_id().as_ref().map(|(id, _)| id.clone()),
            role: run.identity().as_ref().map(|i| i.role.as_str().to_owned()),
            ..RunStatus::of(&projection, now)
        },
        partitions,
        gpus: run
            .gpu()
            .reading()
            .as_ref()
            .map(|g| g.devices.iter().map(GpuStatus::of).collect()),
        process: run.process().as_ref().map(|p| ProcessStatus {
            up: p.up,
            pid: p.pid,
        }),
        server: server_status(run, now),
        alerts,
        collectors: run
            .collectors()
            .iter()
            .map(|(k, v)| (k.name().to_owned(), run.collector_up(*k, v, now)))
            .collect(),
        collectors_on: run
            .collectors_on()
            .names()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        hung_files: run.hung(now),
        log_tail: run.recent_lines().iter().map(|l| l.into_owned()).collect(),
        server_log_tail: run
            .server_log()
            .tail
            .iter()
            .map(|l| l.into_owned())
            .collect(),
        previous,
        discovered: run.discovered().clone(),
        slurm: run.slurm().as_ref().map(|job| SlurmStatus {
            job: job.clone(),
            end_time: job.end_time(),
            restarts: job.restarts(),
            ended: job.ended().map(|e| e.says().to_owned()),
            age_seconds: job.known_since().map(|t| (now - t).max(0.0)),
        }),
        gpu_memory: run.gpu().reading().as_ref().and_then(|g| {
            g.memory_summary(
                run.discovered()
                    .as_ref()
                    .and_then(|d| d.server.as_ref())
                    .map(|s| s.pid),
            )
        }),
        stacks: stacks.map(StacksStatus::of),
        actions: Vec::new(),
    }
}

impl GpuStatus {
    fn of(d: &crate::model::GpuSample) -> GpuStatus {
        GpuStatus {
            index: d.index,
            name: d.name.clone(),
            utilization: d.utilization,
            memory_used_bytes: d.memory_used_bytes,
            memory_total_bytes: d.memory_total_bytes,
            temperature_celsius: d.temperature_celsius,
            power_watts: d.power_watts,
        }
    }
}

/// p50, p90 and p99 of a token histogram, once it has a count.
pub fn quantiles(h: &crate::model::TokenHistogram) -> Option<[f64; 3]> {
    Some([h.quantile(0.5)?, h.quantile(0.9)?, h.quantile(0.99)?])
}

fn partition(run: &Run, v: &PartitionView<'_>, stalled: bool, now: Seconds) -> PartitionStatus {
    let log = v.log;
    let completed = v.completed();
    let planned = v.planned();
    PartitionStatus {
        name: v.name.to_owned(),
        active: log.is_some_and(|p| p.active),
        mode: log.and_then(|p| p.mode.clone()),
        completed,
        planned,
        progress_ratio: match (completed, planned) {
            (Some(c), Some(p)) if p > 0 => Some((c as f64 / p as f64).min(1.0)),
            _ => None,
        },
        errors: log.and_then(|p| p.errors),
        // What is done now: a finished partition does nothing.
        requests_per_second: if v.finished() {
            Some(0.0)
        } else {
            log.and_then(|p| p.requests_per_second)
        },
        tokens_per_second: v.completion_tokens_per_second(now),
        eta_seconds: log.and_then(|p| p.eta_seconds(now)),
        stall_seconds: run.stall_seconds(v, now),
        restarts: log.map_or(0, |p| p.restarts),
        stalled,
        recent_tokens_per_second: run
            .history()
            .partitions
            .get(v.name)
            .and_then(|s| s.get("tokens_per_second"))
            .map(|s| {
                s.since(now - 3600.0, 60.0)
                    .into_iter()
                    .map(|(_, v)| f64::from(v))
                    .collect()
            })
            .unwrap_or_default(),
        outputs: v.outputs.as_ref().map(|o| OutputStatus {
            records: o.records,
            bytes: o.bytes,
            errors: o.errors,
            empty: o.empty,
            invalid: o.invalid,
            tokens: o.tokens,
            last_write: v.last_write,
            unique: o.distinct(),
            duplicates: o.duplicates,
            unique_error: o.unchecked,
            earlier_pass: v.earlier_pass(),
            truncated: o.truncated(),
            missing: o.missing.clone(),
            token_quantiles: quantiles(&o.token_histogram),
        }),
        log_output_gap: v.log_output_gap(),
        mismatch: v.log_output_mismatch(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{Parser, RunInference};

    #[test]
    fn stalled_partition_makes_the_run_unhealthy() {
        let mut run = Run::new(&["log".into()]);
        let mut parser = Parser::RunInference(RunInference);
        for (t, line) in [
            (0.0, "Processing: A"),
            (0.0, "  10/100 (0 err) 1.0 req/s"),
            (10.0, "  20/100 (0 err) 1.0 req/s"),
        ] {
            run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), t);
        }
        let fresh = Status::from_files(&run, &Rules::default(), "node", 20.0);
        assert!(fresh.healthy);
        assert_eq!(fresh.exit_code(), 0);
        assert_eq!(fresh.partitions[0].progress_ratio, Some(0.2));
        let later = Status::from_files(&run, &Rules::default(), "node", 10.0 + 3600.0);
        assert!(!later.healthy);
        assert!(later.partitions[0].stalled);
        assert_eq!(later.exit_code(), 1);
        let json = serde_json::to_string(&later).unwrap();
        assert_eq!(serde_json::from_str::<Status>(&json).unwrap(), later);
    }
}
