//! Every alert in one place: its severity, whether it pages or is a notice, what its
//! threshold is and its defaults, what it holds back, when it fires (the words
//! `docs/alerts.md`'s rule table is generated from) and the function that judges it. A new
//! rule is an `AlertName`, one entry here and one function in `checks.rs`.

use super::checks::*;
use super::{AlertName, Condition, RuleConfig};

/// How a rule's alert is labelled for routing (`severity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Critical,
    Warning,
    /// A notice: told once, never resolved.
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// What a rule's `threshold` means.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThresholdKind {
    /// A duration of silence (`stall_after`'s range).
    Silence,
    /// A ratio, 0–1.
    Ratio,
    /// A count, up to this.
    Count(f64),
    /// None of its own: it judges by this rule's.
    Of(AlertName),
    /// None: the rule takes `for` and `enabled`.
    None,
}

/// One built-in rule.
pub struct Rule {
    pub alert: AlertName,
    pub severity: Severity,
    pub threshold_kind: ThresholdKind,
    /// Its default; its meaning is the kind's.
    pub threshold: f64,
    /// How long the condition must hold before it fires, by default.
    pub for_seconds: f64,
    /// The alerts it holds back while its condition holds: one page about the cause.
    pub inhibits: &'static [AlertName],
    /// A notice told once per episode, not once ever (a pass's duplicates).
    pub rearms: bool,
    /// When it begins firing, the stacks of the run's processes are taken (alerts.md#stacks).
    pub stacks: bool,
    /// The flag that sets its threshold, where one does.
    pub flag: Option<&'static str>,
    /// When it fires, for the rules table of `docs/alerts.md`.
    pub fires: &'static str,
    pub check: fn(&Judged<'_>, RuleConfig) -> Vec<Condition>,
}

const DEFAULT: Rule = Rule {
    alert: AlertName::Stalled,
    severity: Severity::Warning,
    threshold_kind: ThresholdKind::None,
    threshold: 0.0,
    for_seconds: 0.0,
    inhibits: &[],
    rearms: false,
    stacks: false,
    flag: None,
    fires: "",
    check: unset,
};

/// Every entry names its own check; this one is never judged.
fn unset(_: &Judged<'_>, _: RuleConfig) -> Vec<Condition> {
    Vec::new()
}

/// Every rule, in the order its conditions are reported.
pub const TABLE: &[Rule] = &[
    Rule {
        alert: AlertName::Stalled,
        severity: Severity::Critical,
        threshold_kind: ThresholdKind::Silence,
        threshold: 600.0,
        stacks: true,
        flag: Some("--stall-after"),
        fires: r#"an active partition has shown no evidence of work for the threshold, or for 5× its median gap between progress reports if that is longer; or, with no partition active, the unfinished run has shown none (`partition=""`, *driver idle between partitions*). See [What counts as a stall](#what-counts-as-a-stall)"#,
        check: stalled,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::LogSilent,
        threshold_kind: ThresholdKind::Of(AlertName::Stalled),
        stacks: true,
        fires: r#"an active partition's progress log is silent for the `Stalled` threshold while its output files keep growing, for at least half that time after the last line (before the first report: once that report is late)"#,
        check: log_silent,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::ServerHung,
        severity: Severity::Critical,
        threshold_kind: ThresholdKind::Silence,
        threshold: 300.0,
        inhibits: &[AlertName::Stalled],
        stacks: true,
        fires: r#"the server holds running requests and has generated nothing for the threshold (metrics at 0 tok/s, a vLLM stats line at 0 tok/s, or no SGLang decode line for 2 minutes while a partition waits), or, while a partition waits, its generating `/health` (SGLang's) answers 503, no token within the engine's own 20 s, whatever its frozen gauges say; never while the server is starting (its health not yet passed, a restarted one included); `ServerDown` holds it back, it holds `Stalled` back"#,
        check: server_hung,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::ProcessExited,
        severity: Severity::Critical,
        for_seconds: 60.0,
        inhibits: &[AlertName::Stalled, AlertName::GpusIdle],
        fires: r#"the driver process is not running (needs `--process-match` or `--pid-file`), and the run has not reached its plan (a driver that exits after every partition reached it gives `RunFinished`)"#,
        check: process_exited,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::ServerDown,
        severity: Severity::Critical,
        for_seconds: 120.0,
        inhibits: &[
            AlertName::Stalled,
            AlertName::GpusIdle,
            AlertName::ServerHung,
        ],
        fires: r#"the server's health check fails (needs `--server-health-url`)"#,
        check: server_down,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::GpuHung,
        severity: Severity::Critical,
        fires: r#"the GPU sampler is past `gpu_timeout`: an NVML call has not returned"#,
        check: gpu_hung,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::GpuLost,
        severity: Severity::Critical,
        fires: r#"NVML says a GPU is lost or every query of it fails; the email names its last XID, PCI id and processes"#,
        check: gpu_lost,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::GpusIdle,
        threshold_kind: ThresholdKind::Ratio,
        threshold: 0.05,
        for_seconds: 600.0,
        fires: r#"every GPU is under the threshold while a partition is active"#,
        check: gpus_idle,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::GpuMissing,
        severity: Severity::Critical,
        threshold_kind: ThresholdKind::Count(1024.0),
        for_seconds: 60.0,
        fires: r#"fewer GPUs than the threshold (0: than the most seen)"#,
        check: gpu_missing,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::ErrorRateHigh,
        threshold_kind: ThresholdKind::Ratio,
        threshold: 0.05,
        for_seconds: 60.0,
        fires: r#"errors over the threshold among the last 200 requests (log's counts, else the records'); needs 50"#,
        check: error_rate_high,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::EmptyResponses,
        threshold_kind: ThresholdKind::Ratio,
        threshold: 0.02,
        for_seconds: 60.0,
        fires: r#"empty responses over the threshold among the last 200 records; needs 50"#,
        check: empty_responses,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::LogOutputMismatch,
        threshold_kind: ThresholdKind::Ratio,
        threshold: 0.02,
        for_seconds: 600.0,
        fires: r#"log's completed − what the files say (distinct records, or this pass's records when the driver started over or resumed: [formats](formats.md#identity-duplicates-and-passes)) over max(50, threshold × planned)"#,
        check: log_output_mismatch,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::TruncationHigh,
        threshold_kind: ThresholdKind::Ratio,
        threshold: 0.2,
        for_seconds: 60.0,
        fires: r#"answers cut at their token limit (`length`, `max_tokens`) over the threshold among the last 200 records; needs 50. The email gives the partition's `max_tokens` from its header and the token distribution (p50, p90, p99)"#,
        check: truncation_high,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::MissingFields,
        threshold_kind: ThresholdKind::Ratio,
        threshold: 0.02,
        for_seconds: 60.0,
        fires: r#"records lacking a required field (`require`, `[[outputs]] required`) over the threshold among the last 200; needs 50. The email names the fields and the first records' line numbers"#,
        check: missing_fields,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::DuplicateRecords,
        severity: Severity::Info,
        rearms: true,
        fires: r#"the driver's current pass wrote a record whose id the partition already held (a restart re-doing prompts): how many, the distinct and total records, the first ids; once per pass"#,
        check: duplicate_records,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::RunLate,
        for_seconds: 900.0,
        fires: r#"the ETA's upper bound (the band's slow end, [status](status.md#the-eta-and-its-band)) passes the `deadline` (or the SLURM job's end); says when the run ends at the current rate, how late, and the rate it needs; resolves when the projection comes back inside; never once the run is finished. Its `for` waits at most a quarter of the time left to the deadline, so that a job with minutes left is paged while they are left"#,
        check: run_late,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::PartitionFinished,
        severity: Severity::Info,
        fires: r#"a partition's completed reaches its planned count"#,
        check: partition_finished,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::ThroughputDrop,
        threshold_kind: ThresholdKind::Ratio,
        threshold: 0.5,
        fires: r#"tok/s over the last `window` (15m) under threshold × the run's median, after `history` (30m) of it: both set in `[rules.ThroughputDrop]` (`window` 1m–1d, `history` 1m–7d), and the Prometheus rule's `[15m:1m]` and `>= 7` are the same two figures"#,
        check: throughput_drop,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::RunFinished,
        severity: Severity::Info,
        for_seconds: 300.0,
        fires: r#"the run is finished: every known partition reached its plan, or the driver's log said `All partitions complete.` (and no partition began after), with none active, whether or not the driver still runs (a summary, an upload, a notebook kernel): per-partition counts, errors, empties, tokens, wall time, GPU-hours. After it no `Stalled`, `ProcessExited` or `ServerDown` pages; a new partition makes the run unfinished again. `pulse_run_finished` says so to Prometheus, and the shipped `ServerDown` rule waits on it too"#,
        check: run_finished_notice,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::RunStarted,
        severity: Severity::Info,
        fires: r#"a new run begins in the progress log's place while the sidecar follows it: the log rewritten from its start or replaced by one whose first line is another that begins a run (a header, or a bar at 0; a rotated log's new file, which goes on with progress, is the same run, and so is a driver restarted with the same header); says the new run id and the one before. The run's progress, partitions, end (`RunFinished`, `PartitionFinished` told again for the new run) and GPU time start afresh; see [many nodes](many-nodes.md#run-ids)"#,
        check: run_started,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::SlurmJobEnding,
        fires: r#"the sidecar got the run's SLURM job's warning signal (`sbatch --signal=B:USR1@N`, passed on by the batch script as SIGUSR1: deploy/slurm/) while the run is unfinished: the job ends within minutes; says when, the progress and what is left, while there is still time to extend it ([slurm](slurm.md))"#,
        check: slurm_job_ending,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::SlurmJobEnded,
        inhibits: &[
            AlertName::Stalled,
            AlertName::LogSilent,
            AlertName::ProcessExited,
            AlertName::ServerDown,
            AlertName::ServerHung,
            AlertName::GpusIdle,
        ],
        fires: r#"SLURM ended the run's job before the run finished: its controller says `TIMEOUT` (the time limit), `CANCELLED`, requeued (`PENDING` with a restart counted), `PREEMPTED` or `NODE_FAIL`; says which, the progress and what is left, and what to do. The driver's exit, the server's and the silence after are the job's end, not incidents: it holds them back. Resolves when the job runs again ([slurm](slurm.md))"#,
        check: slurm_job_ended,
        ..DEFAULT
    },
    Rule {
        alert: AlertName::SlurmJobResumed,
        severity: Severity::Info,
        fires: r#"the run's SLURM job runs again after a requeue (`SLURM_RESTART_COUNT`, the controller's `restart_cnt`): the same run, its progress carried on; told once per run"#,
        check: slurm_job_resumed,
        ..DEFAULT
    },
];

#[cfg(test)]
const BEGIN: &str = "<!-- the rules table, generated from src/rules/table.rs: PULSE_WRITE_DOCS=1 cargo test --lib rules_table -->\n";
#[cfg(test)]
const END: &str = "<!-- end of the rules table -->\n";

/// `docs/alerts.md`'s rules table, from [`TABLE`].
#[cfg(test)]
fn markdown() -> String {
    use std::time::Duration;
    let mut out = String::from("| rule | fires when | threshold | `for` |\n|---|---|---|---|\n");
    for alert in AlertName::ALL {
        let r = alert.rule();
        let label = match r.severity {
            Severity::Critical => "",
            Severity::Warning => " (warning)",
            Severity::Info => " (notice)",
        };
        let duration = |s: f64| humantime::format_duration(Duration::from_secs_f64(s)).to_string();
        let threshold = match r.threshold_kind {
            ThresholdKind::Silence => format!("`{}`", duration(r.threshold)),
            ThresholdKind::Ratio | ThresholdKind::Count(_) => format!("`{}`", r.threshold),
            ThresholdKind::Of(other) => format!("the `{other}` one"),
            ThresholdKind::None => String::new(),
        };
        let threshold = match r.flag {
            Some(flag) => format!("{threshold} (`{flag}`)"),
            None => threshold,
        };
        out += &format!(
            "| `{alert}`{label} | {} | {threshold} | {} |\n",
            r.fires,
            duration(r.for_seconds)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alert_has_one_rule() {
        for alert in AlertName::ALL {
            assert_eq!(
                TABLE.iter().filter(|r| r.alert == alert).count(),
                1,
                "{alert}"
            );
        }
        assert_eq!(TABLE.len(), AlertName::ALL.len());
        // Notices are the info ones, and only notices rearm.
        for r in TABLE {
            assert!(!r.rearms || r.severity == Severity::Info, "{}", r.alert);
            assert!(!r.fires.is_empty(), "{}", r.alert);
        }
    }

    /// The page's table is the one the code generates.
    #[test]
    fn rules_table_in_the_docs_is_the_generated_one() {
        crate::testing::generated_section(
            "docs/alerts.md",
            BEGIN,
            END,
            &markdown(),
            "PULSE_WRITE_DOCS=1 cargo test --lib rules_table",
        );
    }
}
