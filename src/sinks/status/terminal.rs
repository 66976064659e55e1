//! `/status` for a terminal: what an engineer used to piece together from `tail`, `wc -l` and
//! `nvidia-smi`, on one screen. Pure: a status in, text out; colour only when asked for.

use super::{PartitionStatus, Status};
use crate::human::{human, sparkline};
use std::fmt::Write;

const BAR: usize = 20;

struct Paint {
    on: bool,
}

impl Paint {
    fn wrap(&self, code: &str, s: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }
    fn red(&self, s: &str) -> String {
        self.wrap("1;31", s)
    }
    fn green(&self, s: &str) -> String {
        self.wrap("32", s)
    }
    fn yellow(&self, s: &str) -> String {
        self.wrap("33", s)
    }
    fn bold(&self, s: &str) -> String {
        self.wrap("1", s)
    }
    fn dim(&self, s: &str) -> String {
        self.wrap("2", s)
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn bar(ratio: Option<f64>) -> String {
    match ratio {
        Some(r) => {
            let filled = ((r.clamp(0.0, 1.0) * BAR as f64).round()) as usize;
            format!(
                "[{}{}] {:>3.0}%",
                "█".repeat(filled),
                "░".repeat(BAR - filled),
                r * 100.0
            )
        }
        None => format!("[{}]    ", " ".repeat(BAR)),
    }
}

fn bytes(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / 1073741824.0)
}

/// Renders the status; `color` adds ANSI colours (for a TTY).
pub fn render(status: &Status, color: bool) -> String {
    let p = Paint { on: color };
    let mut s = String::new();
    header(&mut s, status, &p);
    partitions(&mut s, status, &p);
    gpus(&mut s, status, &p);
    s.push('\n');
    process_and_server(&mut s, status, &p);
    collectors_and_files(&mut s, status, &p);
    alerts_and_stacks(&mut s, status, &p);
    s
}

/// The verdict, the node and the model; the run's progress, ETA and outlook.
fn header(s: &mut String, status: &Status, p: &Paint) {
    let firing = status.alerts.iter().filter(|a| a.firing).count();
    let verdict = if status.healthy {
        p.green("HEALTHY")
    } else if firing > 0 {
        p.red(&format!(
            "{firing} ALERT{}",
            if firing == 1 { "" } else { "S" }
        ))
    } else {
        p.red("STALLED")
    };
    let r = &status.run;
    let node = match (&r.name, &r.role) {
        (Some(run), Some(role)) => format!("{} ({role} of run {run})", status.host),
        _ => status.host.clone(),
    };
    let _ = writeln!(
        s,
        "{} · {node} · {}   {verdict}",
        p.bold("pipeline-pulse"),
        status.model.as_deref().unwrap_or("model unknown")
    );
    let overall = (r.planned > 0).then(|| r.completed as f64 / r.planned as f64);
    let _ = writeln!(
        s,
        "run {} {}/{} · ETA {} · {} tok/s",
        bar(overall),
        r.completed,
        r.planned,
        opt(r.eta_seconds.map(human)),
        opt(r.tokens_per_second.map(|t| format!("{t:.0}")))
    );
    let late = r.deadline_margin_seconds.is_some_and(|m| m < 0.0);
    let outlook = if late {
        p.yellow(&r.outlook)
    } else {
        p.dim(&r.outlook)
    };
    let _ = writeln!(s, "    {outlook}\n");
}

/// A line per partition, then an earlier run's partitions apart.
fn partitions(s: &mut String, status: &Status, p: &Paint) {
    let name_width = status
        .partitions
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(9)
        .max(9);
    let _ = writeln!(
        s,
        "{}",
        p.dim(&format!(
            "  {:<name_width$}  {:<27}  {:>13}  {:>6}  {:>6}  {:>8}  {:>7}  {:>8}",
            "PARTITION", "PROGRESS", "DONE/PLANNED", "ERRORS", "REQ/S", "TOK/S", "ETA", "STALLED"
        ))
    );
    for part in &status.partitions {
        *s += &partition_line(part, name_width, p);
    }
    if !status.previous.is_empty() {
        let _ = writeln!(
            s,
            "\n  {}",
            p.dim("PREVIOUS (output files an earlier run left; not in the run's totals)")
        );
        for prev in &status.previous {
            let _ = writeln!(
                s,
                "    {:<name_width$}  {} records{}",
                prev.name,
                prev.records,
                prev.planned
                    .map(|n| format!(", {n} planned"))
                    .unwrap_or_default()
            );
        }
    }
}

/// A line per GPU, where they are read.
fn gpus(s: &mut String, status: &Status, p: &Paint) {
    if let Some(gpus) = &status.gpus {
        let _ = writeln!(s, "\n{}", p.dim("  GPU  NAME                       UTIL                MEMORY              TEMP   POWER"));
        for g in gpus {
            let util = g.utilization.unwrap_or(0.0);
            let filled = (util.clamp(0.0, 1.0) * 10.0).round() as usize;
            let _ = writeln!(
                s,
                "  {:>3}  {:<25}  [{}{}] {:>4}  {:>18}  {:>5}  {:>6}",
                g.index,
                g.name.chars().take(25).collect::<String>(),
                "█".repeat(filled),
                "░".repeat(10 - filled),
                opt(g.utilization.map(|u| format!("{:.0}%", u * 100.0))),
                match (g.memory_used_bytes, g.memory_total_bytes) {
                    (Some(u), Some(t)) => format!("{}/{}", bytes(u), bytes(t)),
                    _ => "-".into(),
                },
                opt(g.temperature_celsius.map(|t| format!("{t:.0}°C"))),
                opt(g.power_watts.map(|w| format!("{w:.0} W")))
            );
        }
    } else {
        let _ = writeln!(s, "\n  GPUs: not read");
    }
}

/// The driver process and the inference server, as probed.
fn process_and_server(s: &mut String, status: &Status, p: &Paint) {
    match &status.process {
        Some(pr) if pr.up => {
            let _ = writeln!(s, "  process: {} (pid {})", p.green("running"), opt(pr.pid));
        }
        Some(_) => {
            let _ = writeln!(s, "  process: {}", p.red("NOT RUNNING"));
        }
        None => {
            let _ = writeln!(s, "  process: {}", p.dim("not probed"));
        }
    }
    match &status.server {
        Some(sv) => {
            let health = match sv.up {
                Some(true) => p.green("up"),
                Some(false) => p.red("DOWN"),
                None => p.dim("health not probed"),
            };
            let known = if sv.last_known { "last known: " } else { "" };
            let _ = writeln!(
                s,
                "  server:  {health}, {known}{} running, {} queued, {} tok/s, KV {}, last report {}{}",
                opt(sv.running_requests.map(|v| format!("{v:.0}"))),
                opt(sv.queued_requests.map(|v| format!("{v:.0}"))),
                opt(sv.generation_tokens_per_second.map(|v| format!("{v:.0}"))),
                opt(sv.kv_cache_usage.map(|v| format!("{:.0}%", v * 100.0))),
                opt(sv
                    .last_report
                    .map(|at| format!("{} ago", human(status.generated_at - at)))),
                sv.error
                    .as_ref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            );
            if let Some(crash) = &sv.crashed {
                let _ = writeln!(s, "           {} {crash}", p.red("crashed:"));
            }
        }
        None => {
            let _ = writeln!(s, "  server:  {}", p.dim("not probed"));
        }
    }
    if let Some(job) = &status.slurm {
        let state = job
            .job
            .controller
            .as_ref()
            .map_or("not answered yet", |c| c.state.as_str());
        let ends = job
            .end_time
            .map(|t| format!(", ends in {}", human(t - status.generated_at)))
            .unwrap_or_default();
        let age = job
            .age_seconds
            .map(|a| format!(" (known {} ago)", human(a)))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  slurm:   job {} {state}{ends}{age}",
            job.job.env.job_id
        );
        if let Some(e) = &job.job.error {
            let _ = writeln!(s, "           {} {e}", p.red("controller:"));
        }
        if let Some(ended) = &job.ended {
            let _ = writeln!(s, "           {} {ended}", p.red("the job"));
        }
    }
}

/// The collectors switched off, and the files whose file system does not answer.
fn collectors_and_files(s: &mut String, status: &Status, p: &Paint) {
    let off: Vec<&str> = crate::collectors::Collector::NAMES
        .iter()
        .copied()
        .filter(|c| !status.collectors_on.iter().any(|o| o == c))
        .collect();
    // An old sidecar says nothing of its collectors: every one was on.
    if !status.collectors_on.is_empty() && !off.is_empty() {
        let _ = writeln!(
            s,
            "  {}",
            p.dim(&format!("collectors off: {}", off.join(", ")))
        );
    }
    for (path, since) in &status.hung_files {
        let _ = writeln!(
            s,
            "  {} the file system under {path} does not answer (for {})",
            p.red("HUNG"),
            human(status.generated_at - since)
        );
    }
}

/// The alerts pending and firing, and the last stacks taken.
fn alerts_and_stacks(s: &mut String, status: &Status, p: &Paint) {
    if !status.alerts.is_empty() {
        let _ = writeln!(s, "\n  {}", p.bold("ALERTS"));
        for a in &status.alerts {
            let state = if a.firing && a.silenced {
                p.dim("silenced")
            } else if a.firing {
                p.red("FIRING ")
            } else {
                p.yellow("pending")
            };
            let what = match &a.partition {
                Some(part) => format!("{} ({part})", a.alert),
                None => a.alert.clone(),
            };
            let _ = writeln!(s, "  {state} {what}: {}", a.summary);
        }
    }
    if !status.actions.is_empty() {
        let _ = writeln!(s, "\n  {}", p.bold("ACTIONS"));
        for a in status.actions.iter().rev().take(5) {
            let _ = writeln!(
                s,
                "  {} ago, for {}: {}",
                human(status.generated_at - a.started_at),
                a.alert,
                a.said
            );
        }
    }
    if let Some(stacks) = &status.stacks {
        let _ = writeln!(
            s,
            "\n  {} {} ago, for {}",
            p.bold("STACKS"),
            human(status.generated_at - stacks.at),
            stacks.reason
        );
        for process in &stacks.processes {
            let _ = writeln!(s, "  {}", process.summary);
        }
    }
}

fn partition_line(part: &PartitionStatus, name_width: usize, p: &Paint) -> String {
    let marker = if part.active { "▶" } else { " " };
    let stalled = match part.stall_seconds {
        Some(secs) if part.stalled => p.red(&format!("{:>8}", human(secs))),
        Some(secs) => format!("{:>8}", human(secs)),
        None => format!("{:>8}", "-"),
    };
    let mut line = format!(
        "{marker} {:<name_width$}  {}  {:>13}  {:>6}  {:>6}  {:>8}  {:>7}  {stalled}\n",
        part.name,
        bar(part.progress_ratio),
        format!("{}/{}", opt(part.completed), opt(part.planned)),
        opt(part.errors),
        opt(part.requests_per_second.map(|r| format!("{r:.1}"))),
        opt(part.tokens_per_second.map(|t| format!("{t:.0}"))),
        opt(part.eta_seconds.map(human)),
    );
    if part.recent_tokens_per_second.len() >= 2 {
        line += &format!(
            "  {:<name_width$}  {}\n",
            "",
            p.dim(&format!(
                "tok/s, last hour: {}",
                sparkline(&part.recent_tokens_per_second)
            ))
        );
    }
    if let Some(o) = &part.outputs {
        let gap = part
            .log_output_gap
            .map(|g| format!(", log − records = {g}"))
            .unwrap_or_default();
        let warn = if part.mismatch {
            format!("  {}", p.yellow("⚠ the log and the output files disagree"))
        } else {
            String::new()
        };
        line += &format!(
            "  {:<name_width$}  {}{warn}\n",
            "",
            p.dim(&format!(
                "outputs: {}, {} errors, {} empty, {} invalid, {} truncated{gap}",
                records(o),
                o.errors,
                o.empty,
                o.invalid,
                o.truncated
            ))
        );
        let mut dataset = Vec::new();
        if let Some([p50, p90, p99]) = o.token_quantiles {
            dataset.push(format!("tokens p50 {p50:.0} p90 {p90:.0} p99 {p99:.0}"));
        }
        if let Some(earlier) = o.earlier_pass {
            dataset.push(format!("{earlier} written by an earlier pass"));
        }
        for (field, n) in o.missing.iter().filter(|(_, n)| **n > 0) {
            dataset.push(format!("{n} lack {field}"));
        }
        if !dataset.is_empty() {
            line += &format!("  {:<name_width$}  {}\n", "", p.dim(&dataset.join(", ")));
        }
    }
    line
}

/// "1040 records: 800 distinct, 240 duplicates", or "800 records" when none repeats.
fn records(o: &crate::sinks::status::OutputStatus) -> String {
    let bound = if o.unique_error > 0 {
        format!(" (at most; {} unchecked)", o.unique_error)
    } else {
        String::new()
    };
    if o.duplicates == 0 && o.unique_error == 0 {
        return format!("{} records", o.records);
    }
    format!(
        "{} records: {} distinct{bound}, {} duplicates",
        o.records, o.unique, o.duplicates
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::status::{AlertStatus, OutputStatus, PreviousStatus, RunStatus};

    fn status() -> Status {
        let part = |name: &str, completed, planned, active| PartitionStatus {
            name: name.into(),
            active,
            mode: None,
            completed: Some(completed),
            planned: Some(planned),
            progress_ratio: Some(completed as f64 / planned as f64),
            errors: Some(0),
            requests_per_second: Some(1.0),
            tokens_per_second: Some(300.0),
            eta_seconds: Some(600.0),
            stall_seconds: active.then_some(900.0),
            restarts: 0,
            stalled: active,
            recent_tokens_per_second: if active {
                vec![100.0, 300.0, 200.0, 0.0]
            } else {
                vec![]
            },
            outputs: Some(OutputStatus {
                records: completed - 200,
                unique: completed - 240,
                duplicates: 40,
                token_quantiles: Some([310.0, 2100.0, 10240.0]),
                ..OutputStatus::default()
            }),
            log_output_gap: Some(200),
            mismatch: true,
        };
        Status {
            version: "0".into(),
            host: "gpu-node-01".into(),
            generated_at: 0.0,
            model: Some("kimi".into()),
            healthy: false,
            run: RunStatus {
                completed: 1400,
                planned: 2000,
                eta_seconds: Some(600.0),
                tokens_per_second: Some(300.0),
                outlook:
                    "ends 2026-12-02 14:20Z (14:10–14:40) · deadline 2026-12-02 14:00Z, 40m late"
                        .into(),
                deadline_margin_seconds: Some(-2400.0),
                ..RunStatus::default()
            },
            partitions: vec![
                part("B1_glaive", 1000, 1000, false),
                part("B2_code", 400, 1000, true),
            ],
            gpus: None,
            process: None,
            server: None,
            alerts: vec![AlertStatus {
                alert: "Stalled".into(),
                partition: Some("B2_code".into()),
                firing: true,
                summary: "no progress for 15m (cause unknown)".into(),
                silenced: false,
            }],
            collectors: Default::default(),
            collectors_on: Default::default(),
            hung_files: Default::default(),
            log_tail: vec![],
            server_log_tail: Vec::new(),
            previous: vec![PreviousStatus {
                name: "B0_old".into(),
                records: 3000,
                planned: None,
                last_write: Some(0.0),
            }],
            discovered: None,
            gpu_memory: None,
            slurm: None,
            stacks: Some(crate::sinks::status::StacksStatus {
                at: -90.0,
                reason: "Stalled".into(),
                processes: vec![crate::sinks::status::ProcessStacksStatus {
                    role: "driver".into(),
                    pid: 42,
                    summary: "driver (pid 42): main thread blocked on a lock in `write_record` (run.py:40)".into(),
                    note: None,
                }],
            }),
            actions: vec![crate::model::ActionRun {
                action: "restart-sglang".into(),
                alert: "ServerHung".into(),
                started_at: -60.0,
                result: crate::model::ActionResult::Ok,
                said: "ran `restart-sglang` (exit 0, 12 s)".into(),
                ..Default::default()
            }],
        }
    }

    #[test]
    fn plain_view_has_every_figure() {
        let text = render(&status(), false);
        assert!(text.contains("1 ALERT"), "{text}");
        assert!(
            text.contains("1m ago, for ServerHung: ran `restart-sglang` (exit 0, 12 s)"),
            "{text}"
        );
        assert!(text.contains("B1_glaive") && text.contains("[████████████████████] 100%"));
        assert!(text.contains("▶ B2_code") && text.contains(" 40%") && text.contains("400/1000"));
        assert!(
            text.contains("outputs: 200 records: 160 distinct, 40 duplicates")
                && text.contains("⚠ the log and the output files disagree"),
            "{text}"
        );
        assert!(text.contains("tokens p50 310 p90 2100 p99 10240"), "{text}");
        assert!(
            text.contains("    ends 2026-12-02 14:20Z (14:10–14:40) · deadline"),
            "{text}"
        );
        assert!(text.contains("FIRING  Stalled (B2_code): no progress for 15m"));
        assert!(text.contains("GPUs: not read"));
        assert!(
            text.contains("STACKS 1m ago, for Stalled\n  driver (pid 42): main thread blocked on a lock in `write_record` (run.py:40)"),
            "{text}"
        );
        assert!(
            text.contains("PREVIOUS") && text.contains("B0_old") && text.contains("3000 records"),
            "{text}"
        );
        assert!(!text.contains('\x1b'), "no colour unless asked");
        assert!(text.contains("tok/s, last hour: ▃█▆▁"), "{text}");
    }

    #[test]
    fn colour_on_request() {
        let text = render(&status(), true);
        assert!(text.contains("\x1b[1;31m1 ALERT\x1b[0m"));
    }
}
