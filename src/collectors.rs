//! The collectors, named once: what each one reads and which metric families are its own
//! (`docs/metrics.md`'s *Collector* column, which a test holds to [`of_family`]). A collector
//! switched off (`--no-collector.NAME`, `[collectors]`) runs no thread and reads nothing, and
//! its families are absent, not 0. The ground floor: it uses nothing of the crate.

use std::fmt;

macro_rules! collectors {
    ($($variant:ident = $name:literal: $doc:literal,)*) => {
        /// One collector.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Collector {
            $(#[doc = $doc] $variant,)*
        }

        impl Collector {
            /// Every collector, in the order the docs list them.
            pub const ALL: &'static [Collector] = &[$(Collector::$variant),*];
            /// Their names, as flags and the config file spell them.
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            pub fn name(self) -> &'static str {
                match self {
                    $(Collector::$variant => $name,)*
                }
            }

            /// What it reads and exports, for the docs.
            pub fn doc(self) -> &'static str {
                match self {
                    $(Collector::$variant => $doc,)*
                }
            }
        }
    };
}

collectors! {
    Log = "log": "the progress logs: partitions' reported progress, rates and ETAs, `pulse_log_*`, `pulse_tail_*`",
    Outputs = "outputs": "the output and input files: records, distinct records, last writes, planned counts from inputs",
    OutputDetails = "output_details": "what the records hold beyond their count: bytes, tokens, finish reasons, errors, empties, duplicates, missing fields, the token histogram (the records are still read once, for the quality rules)",
    Gpu = "gpu": "the GPUs through NVML (`gpu` says how)",
    Process = "process": "the driver process (`process_match`, `pid_file`)",
    Server = "server": "the inference server: its health and metrics URLs and its own logs",
    Slurm = "slurm": "the run's SLURM job: its environment, the prolog's file, and what its controller says of it and of its array (`scontrol show job`, rarely)",
    History = "history": "the recent past the page's charts, `/api/history`, the ETA's band and ThroughputDrop read",
    Exporter = "exporter": "the sidecar's own `process_*` and HTTP server families (also `web.disable-exporter-metrics`)",
}

impl Collector {
    pub fn from_name(name: &str) -> Option<Collector> {
        Collector::ALL.iter().copied().find(|c| c.name() == name)
    }

    fn bit(self) -> u16 {
        1 << self as u16
    }
}

impl fmt::Display for Collector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The collectors switched on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Collectors(u16);

impl Default for Collectors {
    /// Every collector is on by default.
    fn default() -> Collectors {
        Collectors::all()
    }
}

impl Collectors {
    pub const fn all() -> Collectors {
        Collectors((1 << Collector::ALL.len()) - 1)
    }

    pub fn none() -> Collectors {
        Collectors(0)
    }

    pub fn with(self, collector: Collector, on: bool) -> Collectors {
        if on {
            Collectors(self.0 | collector.bit())
        } else {
            Collectors(self.0 & !collector.bit())
        }
    }

    pub fn on(self, collector: Collector) -> bool {
        self.0 & collector.bit() != 0
    }

    /// The names of those switched on, in [`Collector::ALL`]'s order.
    pub fn names(self) -> Vec<&'static str> {
        Collector::ALL
            .iter()
            .filter(|c| self.on(**c))
            .map(|c| c.name())
            .collect()
    }

    /// Whether a family (as the text format names it: `_total`, `_info`) is exported: those
    /// of no collector always are.
    pub fn exports(self, family: &str) -> bool {
        of_family(family).iter().all(|c| self.on(*c))
    }
}

impl fmt::Debug for Collectors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.names()).finish()
    }
}

/// The collectors a family needs, by its name as the text format writes it (`_total`,
/// `_info`): without any one of them it is never exported. None for the run's own families
/// (fed by whichever input says it, or by the sidecar itself), which always are.
pub fn of_family(family: &str) -> &'static [Collector] {
    use Collector::*;
    const DETAILS: &[&str] = &[
        "pulse_output_bytes",
        "pulse_output_invalid_records_total",
        "pulse_output_empty_responses_total",
        "pulse_output_error_records_total",
        "pulse_output_oversized_records_total",
        "pulse_output_completion_tokens_total",
        "pulse_output_finish_reason_total",
        "pulse_output_duplicate_records_total",
        "pulse_output_unique_records_estimated",
        "pulse_output_unique_records_error",
        "pulse_output_missing_field_records_total",
        "pulse_output_record_completion_tokens",
    ];
    const LOG: &[&str] = &[
        "pulse_partition_request_errors",
        "pulse_partition_requests_per_second",
        "pulse_partition_completion_tokens_avg",
        "pulse_partition_eta_seconds",
        "pulse_partition_logged_eta_seconds",
        "pulse_partition_last_progress_timestamp_seconds",
        "pulse_partition_active",
        "pulse_partition_stall_seconds",
        "pulse_partition_progress_gap_median_seconds",
        "pulse_partition_info",
        "pulse_pipeline_info",
        "pulse_pipeline_restarts_total",
    ];
    const GPU: &[&str] = &[
        "pulse_gpus",
        "pulse_run_gpu_seconds",
        "pulse_run_gpu_seconds_projected",
        "pulse_run_cost",
        "pulse_run_cost_projected",
    ];
    const HISTORY: &[&str] = &["pulse_run_eta_lower_seconds", "pulse_run_eta_upper_seconds"];
    let named = |list: &[&str]| list.contains(&family);
    if named(DETAILS) {
        &[Outputs, OutputDetails]
    } else if family == "pulse_partition_log_output_gap" {
        &[Log, Outputs]
    } else if named(LOG) || family.starts_with("pulse_log_") || family.starts_with("pulse_tail_") {
        &[Log]
    } else if family.starts_with("pulse_output_") {
        &[Outputs]
    } else if named(GPU) || family.starts_with("pulse_gpu_") {
        &[Gpu]
    } else if family == "pulse_pipeline_process_up" {
        &[Process]
    } else if family.starts_with("pulse_server_") {
        &[Server]
    } else if family.starts_with("pulse_slurm_") {
        &[Slurm]
    } else if named(HISTORY) {
        &[History]
    } else if family.starts_with("process_")
        || family.starts_with("pulse_http_")
        || family.starts_with("pulse_web_config_")
    {
        &[Exporter]
    } else {
        &[]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_switches_each_collector_alone() {
        let set = Collectors::all().with(Collector::Gpu, false);
        assert!(!set.on(Collector::Gpu) && set.on(Collector::Log));
        assert_eq!(set.names().len(), Collector::ALL.len() - 1);
        assert_eq!(
            Collectors::none().with(Collector::Log, true).names(),
            ["log"]
        );
        for c in Collector::ALL {
            assert_eq!(Collector::from_name(c.name()), Some(*c));
        }
    }

    #[test]
    fn families_belong_by_name() {
        let details_off = Collectors::all().with(Collector::OutputDetails, false);
        assert!(!details_off.exports("pulse_output_finish_reason_total"));
        assert!(details_off.exports("pulse_output_records_total"));
        assert!(details_off.exports("pulse_run_requests_completed"));
        assert!(!Collectors::all()
            .with(Collector::Outputs, false)
            .exports("pulse_output_finish_reason_total"));
        assert_eq!(of_family("pulse_tail_rotations_total"), [Collector::Log]);
        assert_eq!(of_family("pulse_server_up"), [Collector::Server]);
        assert_eq!(of_family("process_open_fds"), [Collector::Exporter]);
        assert_eq!(
            of_family("pulse_partition_log_output_gap"),
            [Collector::Log, Collector::Outputs]
        );
        assert_eq!(of_family("pulse_build_info"), []);
    }
}
