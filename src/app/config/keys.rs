//! Every configuration key, defined once: its name, its `run` flag, its type and range, its
//! default and its one line of documentation. The table below generates [`RawConfig`] (what
//! serde reads from the file), the flags of `run` and their help, the defaults and comments
//! `check-config` prints, and the key table of `docs/configuration.md` (a test fails when the
//! page differs from [`markdown`]). Adding a key is one entry here, the line that reads it into
//! its section (`validate`, or `sections` for a source's), and the field that holds it.

use super::tables::{RawAction, RawLog, RawOutputs, RawPartition, RawRule, RawWebhook};
use super::{ConfigError, FileWatch, GpuMode, Listen, Span};
use crate::collectors::Collector;
use crate::parse::envelope::Envelope;
use crate::parse::Format;
use crate::run_identity::Role;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// What a key holds, which decides how a flag's text becomes a TOML value and what the
/// documentation gives as its range.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Duration(Span),
    /// A whole number from `min` to `max`, of `unit`.
    Count(usize, usize, &'static str),
    /// A number, of what the text says (`PRICE`).
    Decimal(&'static str),
    Bool,
    /// A file or folder; the text is the flag's value name (`FILE`, `DIR`).
    Path(&'static str),
    /// Free text; the value name (`URL`, `ADDR`, `TEXT`).
    Text(&'static str),
    Choice(&'static [&'static str]),
    /// A table of switches, one per name (`[collectors] gpu = false`).
    Switches(&'static [&'static str]),
    /// An array of tables or a table of tables: its header as written (`[[logs]]`), and the
    /// field a flag's value fills in a new table (`--log PATH` is `[[logs]] path = PATH`).
    Tables(&'static str, Option<&'static str>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// Config file only.
    None,
    /// `--name VALUE`.
    Value(&'static str),
    /// `--name`, which sets the key to `true`.
    Switch(&'static str),
    /// `--name VALUE`, repeatable: the values replace the file's list.
    Repeat(&'static str),
    /// A field of a table key, set on every one of its tables (`--log-format`).
    EveryTable(&'static str),
    /// For a table of switches, `--PREFIX.NAME` and `--no-PREFIX.NAME` per name, as the
    /// exporter toolkit's `--collector.NAME` and `--no-collector.NAME`.
    OnOff(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultValue {
    None,
    /// As written in the file.
    Value(&'static str),
    /// Worked out at start-up (the host name); the text says from what.
    Derived(&'static str),
}

#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub name: &'static str,
    /// For a field of a table key (`[[logs]] format`), the table key's name.
    pub table: Option<&'static str>,
    pub kind: Kind,
    pub flag: Flag,
    pub alias: Option<&'static str>,
    pub default: DefaultValue,
    /// What the range does not say by itself: each value once, needs another key.
    pub rule: &'static str,
    /// The key this one is only valid with (its default is printed only then).
    pub needs: Option<&'static str>,
    pub doc: &'static str,
}

const fn key(kind: Kind, doc: &'static str) -> Key {
    Key {
        name: "",
        table: None,
        kind,
        flag: Flag::None,
        alias: None,
        default: DefaultValue::None,
        rule: "",
        needs: None,
        doc,
    }
}

const fn duration(default: &'static str, min_ms: u64, max_ms: u64, doc: &'static str) -> Key {
    Key {
        default: DefaultValue::Value(default),
        ..key(Kind::Duration(super::span(min_ms, max_ms)), doc)
    }
}

const fn text(value_name: &'static str, doc: &'static str) -> Key {
    key(Kind::Text(value_name), doc)
}

const fn path(value_name: &'static str, doc: &'static str) -> Key {
    key(Kind::Path(value_name), doc)
}

/// Whether a key is absent from a file, so that `check-config` and `discover` print only
/// what is set.
pub trait Unset {
    fn unset(&self) -> bool;
}

impl<T> Unset for Option<T> {
    fn unset(&self) -> bool {
        self.is_none()
    }
}

impl<T> Unset for Vec<T> {
    fn unset(&self) -> bool {
        self.is_empty()
    }
}

impl<K, V> Unset for BTreeMap<K, V> {
    fn unset(&self) -> bool {
        self.is_empty()
    }
}

/// One entry per key: `field: type = key(…)`. It makes the field of [`RawConfig`], the
/// constant `key::field` that `validate` reads the default and range from, and the entry in
/// [`KEYS`], in this order (the order of `check-config`'s output and of the docs' table).
macro_rules! keys {
    ($($field:ident: $ty:ty = $key:expr,)*) => {
        /// The file as written (and the flags laid over it): every key optional, values not
        /// yet interpreted.
        #[derive(Debug, Clone, Default, Deserialize, Serialize)]
        #[serde(deny_unknown_fields)]
        pub struct RawConfig {
            $(
                #[serde(default, skip_serializing_if = "Unset::unset")]
                pub $field: $ty,
            )*
        }

        /// Each key's definition, by its field's name.
        #[allow(non_upper_case_globals)]
        pub mod key {
            use super::*;
            $(pub const $field: Key = Key { name: stringify!($field), ..$key };)*
        }

        /// Every top-level key, in the order of the file's documentation.
        pub const KEYS: &[Key] = &[$(key::$field),*];
    };
}

const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

keys! {
    run_dir: Option<PathBuf> = Key { flag: Flag::Value("run-dir"), ..path("DIR", "the run's folder: its logs, outputs, inputs, driver and server are discovered, for every key not given") },
    discover_interval: Option<String> = Key { flag: Flag::Value("discover-interval"), ..duration("30s", 1000, HOUR, "how often discovery looks again for new logs, partitions, a driver and a server") },
    listen: Option<Listen> = Key { flag: Flag::Repeat("web.listen-address"), alias: Some("listen"), default: DefaultValue::Value("0.0.0.0:9721"), rule: "port 1–65535, or 0 for any free port (tests); each address once", ..text("ADDR", "address to serve /metrics on, or a list of them: every one is served") },
    systemd_socket: Option<bool> = Key { flag: Flag::Switch("web.systemd-socket"), default: DefaultValue::Value("false"), ..key(Kind::Bool, "serve on the sockets systemd passes (socket activation, `LISTEN_FDS`) instead of `listen`'s addresses (deploy/systemd/pipeline-pulse.socket)") },
    telemetry_path: Option<String> = Key { flag: Flag::Value("web.telemetry-path"), default: DefaultValue::Value("/metrics"), rule: "starts with `/`; not `/`, `/status`, `/api/…` or `/-/…`", ..text("PATH", "the path the metrics are served on") },
    collectors: BTreeMap<String, bool> = Key { flag: Flag::OnOff("collector"), default: DefaultValue::Derived("every one on"), rule: "each a collector's name (metrics.md#collectors)", ..key(Kind::Switches(Collector::NAMES), "which collectors run: `NAME = false` switches one off (no thread, no read, its families absent), `NAME = true` on") },
    collectors_disable_defaults: Option<bool> = Key { flag: Flag::Switch("collector.disable-defaults"), default: DefaultValue::Value("false"), ..key(Kind::Bool, "every collector off but those `collectors` switches on") },
    disable_exporter_metrics: Option<bool> = Key { flag: Flag::Switch("web.disable-exporter-metrics"), default: DefaultValue::Value("false"), ..key(Kind::Bool, "leave out the sidecar's own `process_*` families and its HTTP server's (`pulse_http_*`, `pulse_web_config_*`)") },
    poll_interval: Option<String> = Key { flag: Flag::Value("poll-interval"), ..duration("250ms", 10, MINUTE, "how often the inputs are checked for new bytes (`stat`, no inotify: works on NFS)") },
    max_line_bytes: Option<usize> = Key { default: DefaultValue::Value("1048576"), ..key(Kind::Count(256, 1 << 30, "bytes"), "longer lines are dropped and counted in `pulse_tail_oversized_lines_total`") },
    header_read_timeout: Option<String> = Key { flag: Flag::Value("header-read-timeout"), ..duration("10s", 100, 10 * MINUTE, "an HTTP client that takes longer to send its request headers is cut off") },
    max_connections: Option<usize> = Key { flag: Flag::Value("max-connections"), default: DefaultValue::Value("64"), ..key(Kind::Count(1, 65536, "connections"), "requests served at once; more are answered 503 with Retry-After: 1 at once, not queued") },
    web_config_file: Option<PathBuf> = Key { flag: Flag::Value("web.config.file"), alias: Some("web-config-file"), ..path("FILE", "the Prometheus web config (exporter-toolkit's schema): TLS, client certificates, basic auth, headers") },
    health_without_auth: Option<bool> = Key { default: DefaultValue::Value("false"), needs: Some("web_config_file"), ..key(Kind::Bool, "serve /-/healthy and /-/engine without basic auth, for probes that have no password (a required client certificate is still required)") },
    state_dir: Option<PathBuf> = Key { flag: Flag::Value("state-dir"), ..path("DIR", "directory for the snapshot kept across restarts (created if missing)") },
    snapshot_interval: Option<String> = Key { flag: Flag::Value("snapshot-interval"), ..duration("5s", 100, HOUR, "how often the state directory's snapshot is rewritten") },
    history_resolution: Option<String> = Key { flag: Flag::Value("history-resolution"), ..duration("30s", 1000, HOUR, "one history point per series per this long; the ETA's band is read from 20 of them") },
    history_span: Option<String> = Key { rule: "at most 100000 points per series", ..duration("48h", MINUTE, 30 * DAY, "how far back the history reaches") },
    gpu: Option<GpuMode> = Key { flag: Flag::Value("gpu"), default: DefaultValue::Value("auto"), ..key(Kind::Choice(&["auto", "on", "off", "simulated"]), "how to read the GPUs: NVML if present, NVML or fail, not at all, or eight made-up GPUs (demos and tests)") },
    gpu_interval: Option<String> = Key { flag: Flag::Value("gpu-interval"), ..duration("5s", 100, HOUR, "how often the GPUs are sampled") },
    gpu_processes: Option<bool> = Key { flag: Flag::Switch("gpu-processes"), default: DefaultValue::Value("false"), ..key(Kind::Bool, "also export GPU memory per process") },
    gpu_timeout: Option<String> = Key { flag: Flag::Value("gpu-timeout"), ..duration("10s", 100, 10 * MINUTE, "the most one reading of the GPUs may take; past it their figures are stale, not exported, and GpuHung fires") },
    nvml_library: Option<PathBuf> = Key { flag: Flag::Value("nvml-library"), default: DefaultValue::Derived("`libnvidia-ml.so.1`"), ..path("PATH", "load NVML from this file instead of from the library path") },
    run_name: Option<String> = Key { flag: Flag::Value("run-name"), default: DefaultValue::Derived("the run folder's name, else the first progress log's folder"), ..text("NAME", "the run this node belongs to: `pulse_run_info`, the `run` label of pushed alerts, the emails' subject") },
    role: Option<Role> = Key { flag: Flag::Value("role"), default: DefaultValue::Derived("from the command lines discovery reads, else what the node watches"), ..key(Kind::Choice(&["driver", "server", "worker"]), "this node's part in the run: the progress log's node, an inference server's rank 0, or a rank above 0 or a Ray worker (no HTTP probe, no ServerDown)") },
    process_match: Option<String> = Key { flag: Flag::Value("process-match"), ..text("TEXT", "the driver process, by a piece of its command line (run_inference.py)") },
    process_dir: Option<PathBuf> = Key { flag: Flag::Value("process-dir"), needs: Some("process_match"), ..path("DIR", "with `process_match`: the driver also works in this folder, names it in its arguments, or has a file in it open (two runs of one program on one node)") },
    pid_file: Option<PathBuf> = Key { flag: Flag::Value("pid-file"), rule: "not with `process_match`", ..path("PATH", "the driver process, by a file holding its pid") },
    server_health_url: Option<String> = Key { flag: Flag::Value("server-health-url"), rule: "`http://`, port 1–65535", ..text("URL", "the inference server's health URL: 2xx means up") },
    server_metrics_url: Option<String> = Key { flag: Flag::Value("server-metrics-url"), rule: "`http://`, port 1–65535", ..text("URL", "the inference server's Prometheus metrics (SGLang or vLLM)") },
    probe_interval: Option<String> = Key { flag: Flag::Value("probe-interval"), ..duration("5s", 100, HOUR, "how often the driver process and the server are probed") },
    slurm_interval: Option<String> = Key { flag: Flag::Value("slurm-interval"), ..duration("5m", 30 * 1000, HOUR, "how often the controller is asked about the run's SLURM job (`scontrol show job`, one job's lookup) besides when the job is new, its driver exits and its warning signal comes; not at all for what the prolog's file (`slurm_job_dir`) gives. A job's end changes only with `scontrol update`, and a cluster's one controller serves every node") },
    slurm_timeout: Option<String> = Key { flag: Flag::Value("slurm-timeout"), ..duration("10s", 1000, 5 * MINUTE, "the most one ask of the SLURM controller may take; past it the ask is killed, counted, and the job's last known state stands") },
    slurm_spread: Option<String> = Key { flag: Flag::Value("slurm-spread"), ..duration("30s", 0, 5 * MINUTE, "the most an ask of the controller is put off when the job is new, its driver exits or its warning signal comes: each node waits its own share (a hash of the host and the job), so that the tasks of an array that start or end together do not ask together; 0s asks at once (tests)") },
    slurm_job_dir: Option<PathBuf> = Key { flag: Flag::Value("slurm-job-dir"), default: DefaultValue::Value("/run/pipeline-pulse/slurm"), ..path("DIR", "where the site's prolog writes a file for each job on the node (`job-ID.env`: its end and time limit, deploy/slurm/prolog.sh); what it gives is not asked of the controller") },
    probe_timeout: Option<String> = Key { flag: Flag::Value("probe-timeout"), ..duration("2s", 100, 5 * MINUTE, "the most one server probe may take") },
    server_health_interval: Option<String> = Key { flag: Flag::Value("server-health-interval"), needs: Some("server_health_url"), default: DefaultValue::Derived("`probe_interval`; 60s for SGLang (discovered, or named by its metrics), whose /health generates a token"), ..duration("5s", 100, HOUR, "how often the health URL is asked; between two asks the server is seen alive by a connection to its port, which costs it nothing") },
    server_health_timeout: Option<String> = Key { flag: Flag::Value("server-health-timeout"), needs: Some("server_health_url"), default: DefaultValue::Derived("`probe_timeout`; 25s for SGLang, discovered or named by its metrics (its /health waits up to 20 s for a token)"), ..duration("2s", 100, 5 * MINUTE, "the most one ask of the health URL may take; no answer within it is not up, even from a port that accepts connections (the kernel accepts them for a stopped or wedged process): hung. A 503 where it is asked on an interval (`server_health_interval`, or SGLang's: a generating /health) is busy; else a 503 is down") },
    smtp: Option<String> = Key { flag: Flag::Value("smtp"), rule: "`smtp://host:port?tls=none|starttls|tls` or `file:///dir`", ..text("URL", "where alert emails go: an SMTP server, or a folder for .eml files") },
    email_to: Vec<String> = Key { flag: Flag::Repeat("email-to"), rule: "each address once; needs `smtp`", ..text("ADDR", "an alert email recipient") },
    email_from: Option<String> = Key { flag: Flag::Value("email-from"), default: DefaultValue::Derived("`pipeline-pulse@HOST`"), ..text("ADDR", "the sender of alert emails") },
    smtp_user: Option<String> = text("USER", "the SMTP AUTH user"),
    smtp_password_file: Option<PathBuf> = path("FILE", "a file holding the SMTP password (its first line)"),
    smtp_password_env: Option<String> = text("NAME", "an environment variable holding the SMTP password"),
    smtp_ca_file: Option<PathBuf> = path("FILE", "PEM certificates of a private CA for the SMTP server's TLS"),
    smtp_timeout: Option<String> = Key { needs: Some("smtp"), ..duration("30s", 100, 10 * MINUTE, "the most one email send may take") },
    retry_backoff: Option<String> = duration("10s", 100, HOUR, "the wait before the first retry on every channel; it doubles with each failure, up to 60 times"),
    alert_interval: Option<String> = Key { flag: Flag::Value("alert-interval"), ..duration("15s", 50, HOUR, "how often the alert rules are evaluated") },
    alertmanager_urls: Vec<String> = Key { flag: Flag::Repeat("alertmanager-url"), rule: "`http://` or `https://`; `/api/v2/alerts` is added", ..text("URL", "an Alertmanager to push the alerts to, by its base URL (an HA pair gets every alert, as from Prometheus)") },
    webhooks: Vec<RawWebhook> = key(Kind::Tables("[[webhooks]]", None), "webhooks to post every notification to"),
    heartbeat_url: Option<String> = Key { flag: Flag::Value("heartbeat-url"), rule: "`http://` or `https://`", ..text("URL", "a URL to GET every heartbeat_interval while every collector is up (healthchecks.io, Uptime Kuma)") },
    heartbeat_fail_url: Option<String> = Key { default: DefaultValue::Derived("`heartbeat_url` with `/fail`"), needs: Some("heartbeat_url"), ..text("URL", "the URL to GET instead while a collector is down") },
    heartbeat_interval: Option<String> = Key { needs: Some("heartbeat_url"), ..duration("60s", 100, DAY, "how often the heartbeat is sent") },
    webhook_timeout: Option<String> = duration("10s", 100, 5 * MINUTE, "the most one POST to an Alertmanager or a webhook, or one heartbeat ping, may take"),
    repeat_interval: Option<String> = duration("1h", MINUTE, 30 * DAY, "how often a firing alert is notified again"),
    stall_after: Option<String> = Key { flag: Flag::Value("stall-after"), ..duration("10m", 100, 30 * DAY, "alert when an active partition makes no progress for this long (the Stalled threshold)") },
    stacks: Option<bool> = Key { default: DefaultValue::Value("true"), ..key(Kind::Bool, "take the Python stacks of the driver and the server's processes with py-spy when Stalled, ServerHung or LogSilent fires, and bring them to the alert (see alerts.md#stacks)") },
    stacks_py_spy: Option<String> = Key { flag: Flag::Value("stacks-py-spy"), default: DefaultValue::Value("py-spy"), ..text("PATH", "py-spy, by its path or by a name looked up in PATH (pip install py-spy)") },
    stacks_timeout: Option<String> = Key { flag: Flag::Value("stacks-timeout"), ..duration("5s", 100, MINUTE, "the most one process's stacks may take: a stopped or hung process holds no alert longer") },
    actions: Vec<RawAction> = Key { rule: "config file only", ..key(Kind::Tables("[[actions]]", None), "commands to run when an alert fires (see alerts.md#actions)") },
    dry_run_actions: Option<bool> = Key { flag: Flag::Switch("dry-run-actions"), default: DefaultValue::Value("false"), ..key(Kind::Bool, "log and count what each action would run, and run nothing") },
    dashboard_url: Option<String> = text("URL", "a link in the emails and Slack messages, and an annotation of pushed alerts"),
    status_url: Option<String> = text("URL", "a link in the emails and Slack messages, and an annotation of pushed alerts"),
    hostname: Option<String> = Key { default: DefaultValue::Derived("the machine's"), ..text("NAME", "the host name emails give, and the instance label of pushed alerts") },
    rules: BTreeMap<String, RawRule> = key(Kind::Tables("[rules.NAME]", None), "per rule settings"),
    deadline: Option<String> = Key { flag: Flag::Value("deadline"), rule: "after the run's start", ..text("TIME", "when the run must be done: an RFC 3339 time (2026-12-03T09:00:00Z) or a duration from the run's start (36h); RunLate warns when the ETA's upper bound passes it") },
    budget_records: Option<u64> = Key { flag: Flag::Value("budget-records"), rule: "1 or more", ..key(Kind::Count(1, usize::MAX, "records"), "the records the run stops at (a dataset size cap): progress and ETA aim at the lesser of this and the plan") },
    budget_tokens: Option<u64> = Key { flag: Flag::Value("budget-tokens"), rule: "1 or more", ..key(Kind::Count(1, usize::MAX, "tokens"), "the completion tokens the run stops at: progress and ETA aim at whichever of the budgets and the plan comes first") },
    gpu_hour_price: Option<f64> = Key { flag: Flag::Value("gpu-hour-price"), rule: "0 or more", ..key(Kind::Decimal("PRICE"), "the price of one GPU-hour, in any currency: the run's cost so far and projected, in the status, the page and every email") },
    partitions: Vec<RawPartition> = key(Kind::Tables("[[partitions]]", None), "per partition settings"),
    identity_cap: Option<usize> = Key { default: DefaultValue::Value("5000000"), ..key(Kind::Count(0, 1 << 30, "ids"), "distinct record ids remembered on this node (at most 14 bytes each); past it the unique counts are upper bounds, by at most `pulse_output_unique_records_error`") },
    max_open_files: Option<usize> = Key { flag: Flag::Value("max-open-files"), default: DefaultValue::Value("128"), ..key(Kind::Count(1, 1 << 20, "files"), "output and input files kept open at once (those written in the last minute first); the others are closed, watched by `stat` and reopened where they were when they grow") },
    file_watch: Option<FileWatch> = Key { flag: Flag::Value("file-watch"), default: DefaultValue::Value("auto"), ..key(Kind::Choice(&["auto", "inotify", "poll"]), "how output and input files are seen to change: inotify on their folders where the kernel reports changes (polling on NFS, CIFS, FUSE, Lustre, overlay and other mounts it does not), inotify everywhere, or polling only") },
    max_record_bytes: Option<usize> = Key { default: DefaultValue::Value("16777216"), ..key(Kind::Count(1024, 1 << 30, "bytes"), "longer output records are counted but not parsed") },
    logs: Vec<RawLog> = Key { flag: Flag::Repeat("log"), rule: "each file once (by path and by inode)", ..key(Kind::Tables("[[logs]]", Some("path")), "a progress log to follow; it may not exist yet") },
    server_logs: Vec<PathBuf> = Key { flag: Flag::Repeat("server-log"), rule: "each file once, and not also a `[[logs]]` path", ..path("PATH", "the inference server's own log, SGLang or vLLM: running and queued requests, tok/s, KV-cache usage") },
    server_log_format: Option<Format> = Key { flag: Flag::Value("server-log-format"), default: DefaultValue::Value("auto"), ..key(Kind::Choice(&["auto", "sglang", "vllm"]), "the format of the server logs") },
    server_log_envelope: Option<Envelope> = Key { flag: Flag::Value("server-log-envelope"), default: DefaultValue::Value("auto"), ..key(Kind::Choice(&["auto", "plain", "json", "cri", "docker"]), "what wraps the server logs' lines: JSON log objects (vLLM's json formatter), a container runtime's CRI or Docker json-file records, or nothing (see formats.md#envelopes)") },
    outputs: Vec<RawOutputs> = Key { flag: Flag::Repeat("outputs"), rule: "each glob once; not matching a log", ..key(Kind::Tables("[[outputs]]", Some("glob")), "output files, one JSON record per line (`/data/run/prepared/*/raw_responses.jsonl`); the partition is each file's folder name") },
    require: Vec<String> = Key { flag: Flag::Repeat("require"), rule: "at most 32 JSON pointers; `[[outputs]] required` wins for its glob", ..text("POINTER", "a field every output record must have, not empty (`/choices/0/message/reasoning_content`), for every output glob") },
    inputs: Vec<String> = Key { flag: Flag::Repeat("inputs"), rule: "each glob once, and not an output glob", ..text("GLOB", "input files whose line counts are each partition's planned requests") },
}

/// The fields of the table keys, for their flags and their documentation; serde reads them
/// into [`RawLog`], [`RawOutputs`], [`RawWebhook`] and [`RawRule`], and a test holds those
/// structs to this list.
macro_rules! fields {
    ($($const:ident = [$table:literal, $name:literal] $key:expr,)*) => {
        /// Each field's definition, as `TABLE_FIELD`: a name mistyped does not compile.
        #[allow(non_upper_case_globals)]
        pub mod field {
            use super::*;
            $(pub const $const: Key = Key { table: Some($table), name: $name, ..$key };)*
        }

        pub const FIELDS: &[Key] = &[$(field::$const),*];
    };
}

const RULES_TABLE: DefaultValue = DefaultValue::Derived("see the rules table (alerts.md)");

fields! {
    logs_format = ["logs", "format"] Key { flag: Flag::EveryTable("log-format"), default: DefaultValue::Value("auto"), ..key(Kind::Choice(&["auto", "run_inference", "tqdm", "regex"]), "the format of the logs (given with --log, or else every log of the file)") },
    logs_envelope = ["logs", "envelope"] Key { flag: Flag::EveryTable("log-envelope"), default: DefaultValue::Value("auto"), ..key(Kind::Choice(&["auto", "plain", "json", "cri", "docker"]), "what wraps the log's lines: JSON log objects (python-json-logger, structlog), a container runtime's CRI or Docker json-file records, or nothing; auto finds it from the log (see formats.md#envelopes)") },
    logs_regex = ["logs", "regex"] Key { flag: Flag::EveryTable("log-regex"), ..text("RE", "a regex with named groups (completed, planned, errors, rps, avg_tokens, eta, partition), for format regex") },
    logs_unit_divisor = ["logs", "unit_divisor"] Key { default: DefaultValue::Value("1000"), rule: "1000 or 1024", ..key(Kind::Count(1000, 1024, ""), "tqdm's unit_divisor for this log's bars") },
    outputs_partition = ["outputs", "partition"] Key { default: DefaultValue::Derived("the folder's name"), ..text("NAME", "a fixed partition name for the files of this glob") },
    outputs_inspect = ["outputs", "inspect"] Key { default: DefaultValue::Value("true"), ..key(Kind::Bool, "parse each record (false counts records without parsing them)") },
    outputs_pointers = ["outputs", "pointers"] key(Kind::Tables("pointers", None), "JSON pointers to a record's tokens, finish reason, text, error, status, result type, id and prompt (see formats.md)"),
    outputs_required = ["outputs", "required"] Key { default: DefaultValue::Derived("`require`"), rule: "at most 32 JSON pointers", ..text("POINTER", "fields every record of this glob must have, not empty: records lacking one count in `pulse_output_missing_field_records_total`") },
    webhooks_url = ["webhooks", "url"] Key { rule: "`http://` or `https://`", ..text("URL", "the webhook") },
    webhooks_format = ["webhooks", "format"] Key { default: DefaultValue::Value("alertmanager"), ..key(Kind::Choice(&["alertmanager", "slack"]), "the payload") },
    webhooks_ca_file = ["webhooks", "ca_file"] path("FILE", "PEM certificates of a private CA for an https URL"),
    webhooks_headers = ["webhooks", "headers"] key(Kind::Tables("headers", None), "headers to send, each read from a `file` or an `env` variable, with an optional `prefix`"),
    actions_name = ["actions", "name"] Key { default: DefaultValue::Derived("the command's file name"), rule: "letters, digits, `-`, `_`, `.`; each once", ..text("NAME", "how logs, `pulse_actions_total` and the notifications name it") },
    actions_on = ["actions", "on"] Key { rule: "at least one", ..text("ALERT", "the alerts it runs for (`on = [\"ServerHung\"]`)") },
    actions_cause = ["actions", "cause"] Key { rule: "a cause id, or a list of them", ..text("ID", "runs only for an alert whose likely cause is this (`server_hung`, or `[\"server_hung\", \"server_crashed\"]`; see alerts.md#triage-the-likely-cause)") },
    actions_command = ["actions", "command"] Key { rule: "an absolute path, executable, not writable by others", ..text("ARGV", "the program and its arguments, as a list; no shell") },
    actions_timeout = ["actions", "timeout"] duration("60s", 1000, HOUR, "past it the command is killed with its process group"),
    actions_max_runs = ["actions", "max_runs"] Key { default: DefaultValue::Value("1"), ..key(Kind::Count(1, 100, "runs"), "runs per episode of one alert (from firing to resolved)") },
    actions_cooldown = ["actions", "cooldown"] duration("10m", 0, DAY, "the least time from the end of one run to the start of the next, whatever the alert"),
    actions_silenced = ["actions", "silenced"] Key { default: DefaultValue::Value("false"), ..key(Kind::Bool, "whether it runs for an alert a silence holds") },
    partitions_name = ["partitions", "name"] text("NAME", "the partition, as the log or its folder names it"),
    partitions_budget_records = ["partitions", "budget_records"] Key { rule: "1 or more", ..key(Kind::Count(1, usize::MAX, "records"), "the records this partition stops at: its progress and the run's ETA aim at the lesser of this and its plan") },
    rules_enabled = ["rules", "enabled"] Key { default: RULES_TABLE, ..key(Kind::Bool, "whether the rule is evaluated") },
    rules_threshold = ["rules", "threshold"] Key { default: RULES_TABLE, ..text("VALUE", "the rule's threshold: a duration, a ratio or a count (below)") },
    rules_window = ["rules", "window"] Key { default: DefaultValue::Value("15m"), rule: "ThroughputDrop only", ..duration("15m", MINUTE, DAY, "the recent tok/s ThroughputDrop compares with the run's median is averaged over this long") },
    rules_history = ["rules", "history"] Key { default: DefaultValue::Value("30m"), rule: "ThroughputDrop only", ..duration("30m", MINUTE, 7 * DAY, "the history ThroughputDrop needs before it judges") },
    rules_for = ["rules", "for"] Key { default: RULES_TABLE, ..duration("0s", 0, 30 * DAY, "how long the condition must hold before the alert fires") },
}

impl Key {
    /// The key as an error names it.
    pub fn path(&self) -> String {
        match self.table {
            Some(table) => format!("{table}.{}", self.name),
            None => self.name.to_owned(),
        }
    }

    /// The flag's name, if the key has one.
    pub fn long(&self) -> Option<&'static str> {
        match self.flag {
            Flag::None => None,
            Flag::Value(l) | Flag::Switch(l) | Flag::Repeat(l) | Flag::EveryTable(l) => Some(l),
            Flag::OnOff(_) => None,
        }
    }

    /// The flags of a table of switches, as (switch's name, on, flag): `--collector.gpu` and
    /// `--no-collector.gpu`.
    fn switch_flags(&self) -> Vec<(&'static str, bool, String)> {
        let (Flag::OnOff(prefix), Kind::Switches(names)) = (self.flag, self.kind) else {
            return Vec::new();
        };
        names
            .iter()
            .flat_map(|n| {
                [
                    (*n, true, format!("{prefix}.{n}")),
                    (*n, false, format!("no-{prefix}.{n}")),
                ]
            })
            .collect()
    }

    /// The key's value (or its default) as a duration within its range.
    pub fn duration(&self, value: Option<&str>) -> Result<Duration, ConfigError> {
        self.duration_as(self.name, value)
    }

    /// [`Key::duration`] for one table's field, named as the error should name it
    /// (`rules.Stalled.for`).
    pub fn duration_as(&self, name: &str, value: Option<&str>) -> Result<Duration, ConfigError> {
        let Kind::Duration(span) = self.kind else {
            unreachable!("{} is not a duration key", self.name)
        };
        let default = match self.default {
            DefaultValue::Value(default) => default,
            _ => "",
        };
        super::duration(name, value, default, span)
    }

    /// The range of a duration key.
    pub const fn span(&self) -> Span {
        match self.kind {
            Kind::Duration(span) => span,
            _ => panic!("not a duration key"),
        }
    }

    /// The key's value (or its default) as a count within its range.
    pub fn count(&self, value: Option<usize>) -> Result<usize, ConfigError> {
        let (Kind::Count(min, max, unit), DefaultValue::Value(default)) = (self.kind, self.default)
        else {
            unreachable!("{} is not a count key with a default", self.name)
        };
        let default = default.parse().expect("a count's default is a number");
        super::count(self.name, value, default, (min, max), unit)
    }

    /// A flag's text as the TOML value the key holds.
    fn value(&self, text: &str) -> Result<toml::Value, ConfigError> {
        match self.kind {
            Kind::Count(..) => text
                .trim()
                .parse::<i64>()
                .map(toml::Value::Integer)
                .map_err(|_| {
                    ConfigError::invalid(self.path(), format!("{text:?} is not a whole number"))
                }),
            Kind::Decimal(_) => text
                .trim()
                .parse::<f64>()
                .map(toml::Value::Float)
                .map_err(|_| {
                    ConfigError::invalid(self.path(), format!("{text:?} is not a number"))
                }),
            Kind::Bool => Ok(toml::Value::Boolean(true)),
            Kind::Switches(_) => {
                let (name, on) = text.split_once('=').unwrap_or((text, "true"));
                Ok(toml::Value::Table(toml::Table::from_iter([(
                    name.to_owned(),
                    toml::Value::Boolean(on == "true"),
                )])))
            }
            _ => Ok(toml::Value::String(text.to_owned())),
        }
    }

    /// The default as the TOML value `check-config` prints.
    fn default_value(&self) -> Option<toml::Value> {
        let DefaultValue::Value(text) = self.default else {
            return None;
        };
        Some(match self.kind {
            Kind::Count(..) => toml::Value::Integer(text.parse().expect("a count's default")),
            Kind::Bool => toml::Value::Boolean(text == "true"),
            _ => toml::Value::String(text.to_owned()),
        })
    }

    fn help(&self) -> String {
        let mut help = capitalized(self.doc);
        match self.default {
            DefaultValue::Value(d) => help.push_str(&format!(" [default: {d}]")),
            DefaultValue::Derived(d) => {
                help.push_str(&format!(" [default: {}]", d.replace('`', "")))
            }
            DefaultValue::None => {}
        }
        help
    }

    fn args(&self) -> Vec<clap::Arg> {
        let switches = self.switch_flags();
        if !switches.is_empty() {
            return switches
                .iter()
                .map(|(name, on, flag)| {
                    let other = self
                        .switch_flags()
                        .into_iter()
                        .find(|(n, o, _)| n == name && o != on)
                        .map(|(_, _, f)| f)
                        .expect("each switch has both flags");
                    let said = if *on { "switch on" } else { "switch off" };
                    let doc = Collector::from_name(name).map_or("", Collector::doc);
                    // clap takes `'static` names; these are made once, when the command is.
                    let (flag, other): (&'static str, &'static str) =
                        (flag.clone().leak(), other.leak());
                    clap::Arg::new(flag)
                        .long(flag)
                        .action(clap::ArgAction::SetTrue)
                        .conflicts_with(other)
                        .help(format!("{} the {name} collector: {doc}", capitalized(said)))
                })
                .collect();
        }
        self.arg().into_iter().collect()
    }

    fn arg(&self) -> Option<clap::Arg> {
        let long = self.long()?;
        let value_name = match self.kind {
            Kind::Duration(_) => "DURATION",
            Kind::Count(..) => "N",
            Kind::Decimal(name) => name,
            Kind::Choice(_) => "VALUE",
            Kind::Path(name) | Kind::Text(name) => name,
            Kind::Tables(..) => match self.name {
                "outputs" => "GLOB",
                _ => "PATH",
            },
            Kind::Bool | Kind::Switches(_) => "",
        };
        let arg = clap::Arg::new(long).long(long).help(self.help());
        let arg = match self.alias {
            Some(alias) => arg.alias(alias),
            None => arg,
        };
        Some(match self.flag {
            Flag::Switch(_) => arg.action(clap::ArgAction::SetTrue),
            Flag::Repeat(_) => arg.action(clap::ArgAction::Append).value_name(value_name),
            _ => arg.action(clap::ArgAction::Set).value_name(value_name),
        })
    }

    /// Sets this key in `table` to a flag's values.
    fn lay(&self, values: &[String], table: &mut toml::Table) -> Result<(), ConfigError> {
        let values = values
            .iter()
            .map(|v| self.value(v))
            .collect::<Result<Vec<_>, _>>()?;
        match (self.flag, self.kind) {
            (Flag::OnOff(_), _) => {
                let switches = table
                    .entry(self.name.to_owned())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                if let toml::Value::Table(switches) = switches {
                    for value in values {
                        if let toml::Value::Table(one) = value {
                            switches.extend(one);
                        }
                    }
                }
            }
            (Flag::EveryTable(_), _) => {
                let parent = self
                    .table
                    .expect("an EveryTable flag belongs to a table key");
                if let Some(toml::Value::Array(tables)) = table.get_mut(parent) {
                    for t in tables.iter_mut().filter_map(toml::Value::as_table_mut) {
                        t.insert(self.name.to_owned(), values[0].clone());
                    }
                }
            }
            (Flag::Repeat(_), Kind::Tables(_, Some(field))) => {
                let tables = values
                    .into_iter()
                    .map(|v| toml::Value::Table(toml::Table::from_iter([(field.to_owned(), v)])))
                    .collect();
                table.insert(self.name.to_owned(), toml::Value::Array(tables));
            }
            (Flag::Repeat(_), _) => {
                table.insert(self.name.to_owned(), toml::Value::Array(values));
            }
            _ => {
                let value = values.into_iter().next().expect("a flag given has a value");
                table.insert(self.name.to_owned(), value);
            }
        }
        Ok(())
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Every key that has a flag, top-level keys first (so that `--log` makes the tables
/// `--log-format` then sets a field of).
fn flagged() -> impl Iterator<Item = &'static Key> {
    KEYS.iter().chain(FIELDS).filter(|k| k.flag != Flag::None)
}

/// The flags of `run` as given: each key's values, in the order of [`flagged`].
#[derive(Debug, Clone, Default)]
pub struct KeyFlags {
    given: Vec<(&'static Key, Vec<String>)>,
}

/// A table as the configuration it holds.
fn parse(table: toml::Table) -> Result<RawConfig, toml::de::Error> {
    toml::Value::Table(table).try_into()
}

impl KeyFlags {
    /// Whether the flag of this key was given.
    pub fn has(&self, key: &Key) -> bool {
        self.given.iter().any(|(k, _)| k.path() == key.path())
    }

    /// Gives a flag, as if on the command line.
    pub fn set(&mut self, key: &'static Key, values: &[&str]) {
        self.given.retain(|(k, _)| k.path() != key.path());
        self.given
            .push((key, values.iter().map(|v| (*v).to_owned()).collect()));
        let order = |k: &Key| flagged().position(|f| f.path() == k.path());
        self.given.sort_by_key(|(k, _)| order(k));
    }

    /// Lays the flags over the file's keys: a flag given wins (a repeated one replaces the
    /// file's list).
    pub fn lay_over(&self, raw: &mut RawConfig) -> Result<(), ConfigError> {
        if self.given.is_empty() {
            return Ok(());
        }
        let mut table = to_table(raw);
        for (key, values) in &self.given {
            key.lay(values, &mut table)?;
        }
        *raw = parse(table).map_err(|e| self.culprit(e))?;
        Ok(())
    }

    /// The flag a merged configuration failed on: the first that fails alone.
    fn culprit(&self, merged: toml::de::Error) -> ConfigError {
        for (key, values) in &self.given {
            // A field of a table key needs one table to be set in.
            let mut alone = toml::Table::new();
            if let Some(parent) = key.table.and_then(|t| KEYS.iter().find(|k| k.name == t)) {
                if let (Flag::Repeat(_), Kind::Tables(_, Some(_))) = (parent.flag, parent.kind) {
                    parent.lay(&["x".to_owned()], &mut alone).ok();
                }
            }
            if key.lay(values, &mut alone).is_ok() {
                if let Err(e) = parse(alone) {
                    return ConfigError::invalid(
                        key.path(),
                        format!("--{}: {}", key.long().unwrap_or(key.name), e.message()),
                    );
                }
            }
        }
        ConfigError::invalid("(flags)", merged.message().to_owned())
    }
}

impl clap::FromArgMatches for KeyFlags {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = KeyFlags::default();
        flags.update_from_arg_matches(matches)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        for key in flagged() {
            if let Flag::OnOff(_) = key.flag {
                let values: Vec<String> = key
                    .switch_flags()
                    .into_iter()
                    .filter(|(_, _, flag)| {
                        matches.try_get_one::<bool>(flag).ok().flatten() == Some(&true)
                    })
                    .map(|(name, on, _)| format!("{name}={on}"))
                    .collect();
                if !values.is_empty() {
                    self.given.retain(|(k, _)| k.path() != key.path());
                    self.given.push((key, values));
                }
                continue;
            }
            let id = key.long().expect("a flagged key has a flag");
            let values: Vec<String> = match key.flag {
                Flag::Switch(_) if matches.get_flag(id) => vec!["true".to_owned()],
                Flag::Switch(_) => continue,
                _ => match matches.get_many::<String>(id) {
                    Some(values) => values.cloned().collect(),
                    None => continue,
                },
            };
            self.given.retain(|(k, _)| k.long() != Some(id));
            self.given.push((key, values));
        }
        Ok(())
    }
}

impl clap::Args for KeyFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        flagged()
            .flat_map(Key::args)
            .fold(cmd, |cmd, arg| cmd.arg(arg))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// A configuration as a TOML table, to lay flags or defaults over.
pub fn to_table(raw: &RawConfig) -> toml::Table {
    match toml::Value::try_from(raw).expect("a RawConfig always serializes") {
        toml::Value::Table(table) => table,
        _ => unreachable!("a struct serializes as a table"),
    }
}

/// Fills in the defaults of the keys not set, the way `check-config` prints the effective
/// configuration: only where the key they need is set.
pub fn with_defaults(table: &mut toml::Table) {
    for key in KEYS {
        if table.contains_key(key.name) || key.needs.is_some_and(|n| !table.contains_key(n)) {
            continue;
        }
        if let Some(value) = key.default_value() {
            table.insert(key.name.to_owned(), value);
        }
    }
}

/// A configuration as TOML, each top-level value after its key's documentation.
pub fn commented(mut table: toml::Table) -> String {
    let mut out = String::new();
    for key in KEYS {
        let Some(value) = table.get(key.name) else {
            continue;
        };
        if is_tables(value) {
            continue;
        }
        out.push_str(&format!(
            "# {}\n{} = {value}\n",
            capitalized(key.doc),
            key.name
        ));
        table.remove(key.name);
    }
    if !table.is_empty() {
        out.push('\n');
        out.push_str(&toml::to_string(&table).expect("a TOML table always serializes"));
    }
    out
}

fn is_tables(value: &toml::Value) -> bool {
    match value {
        toml::Value::Table(_) => true,
        toml::Value::Array(items) => items.first().is_some_and(toml::Value::is_table),
        _ => false,
    }
}

/// A duration as the docs write a range's ends: `250ms`, `1m`, `30d`.
fn short(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    if ms == 0 {
        return "0s".to_owned();
    }
    for (unit, size) in [("d", DAY), ("h", HOUR), ("m", MINUTE), ("s", 1000)] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// The key table of `docs/configuration.md`.
pub fn markdown() -> String {
    let mut out = String::from("| key / flag | default | range | meaning |\n|---|---|---|---|\n");
    for key in KEYS.iter().chain(FIELDS) {
        let header = |name: &str| match KEYS.iter().find(|k| k.name == name).map(|k| k.kind) {
            Some(Kind::Tables(header, _)) => header,
            _ => unreachable!("{name} is a table key"),
        };
        let mut cell = match (key.table, key.kind) {
            (Some(table), _) => format!("`{}` `{}`", header(table), key.name),
            (None, Kind::Tables(_, None)) => continue,
            (None, Kind::Tables(header, Some(field))) => format!("`{header}` `{field}`"),
            (None, Kind::Switches(_)) => format!("`[{}]`", key.name),
            (None, _) => format!("`{}`", key.name),
        };
        if let Some(long) = key.long() {
            cell.push_str(&format!(" / `--{long}`"));
        }
        let switches: Vec<String> = key
            .switch_flags()
            .iter()
            .map(|(_, _, flag)| format!("`--{flag}`"))
            .collect();
        if !switches.is_empty() {
            cell.push_str(&format!(" / {}", switches.join(", ")));
        }
        if let Some(alias) = key.alias {
            cell.push_str(&format!(" (`--{alias}`)"));
        }
        let default = match key.default {
            DefaultValue::None => "none".to_owned(),
            DefaultValue::Value(v) => format!("`{v}`"),
            DefaultValue::Derived(d) => d.to_owned(),
        };
        let mut range: Vec<String> = match key.kind {
            Kind::Duration(span) => vec![format!("{}–{}", short(span.min), short(span.max))],
            Kind::Count(min, max, _) if key.rule.is_empty() => vec![format!("{min}–{max}")],
            Kind::Choice(values) | Kind::Switches(values) => vec![values
                .iter()
                .map(|v| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(", ")],
            _ => Vec::new(),
        };
        if !key.rule.is_empty() {
            range.push(key.rule.to_owned());
        }
        if let Some(needs) = key.needs {
            range.push(format!("needs `{needs}`"));
        }
        let mut meaning = key.doc.to_owned();
        if key.flag == Flag::None {
            meaning.push_str(" (config only)");
        }
        let escape = |s: &str| s.replace('|', "\\|");
        out.push_str(&format!(
            "| {cell} | {default} | {} | {} |\n",
            escape(&range.join("; ")),
            escape(&meaning)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN: &str = "<!-- keys: generated from src/app/config/keys.rs -->\n";
    const END: &str = "<!-- /keys -->\n";

    /// The page's table is the one the code generates.
    #[test]
    fn the_docs_table_is_the_generated_one() {
        crate::testing::generated_section(
            "docs/configuration.md",
            BEGIN,
            END,
            &markdown(),
            "PULSE_WRITE_DOCS=1 cargo test --lib keys",
        );
    }

    #[test]
    fn every_default_is_valid() {
        let mut table = toml::Table::new();
        for key in KEYS {
            if let Some(value) = key.default_value() {
                table.insert(key.name.to_owned(), value);
            }
        }
        table.insert("smtp".into(), "file:///tmp".into());
        table.insert("email_to".into(), toml::Value::Array(vec!["a@b.c".into()]));
        table.insert("heartbeat_url".into(), "http://127.0.0.1:1/".into());
        table.insert("web_config_file".into(), "/nonexistent".into());
        let raw = parse(table).unwrap();
        let err = raw.validate().unwrap_err();
        // Only the missing web config file is wrong: every default passed.
        assert!(err.to_string().contains("web_config_file"), "{err}");
        let mut raw = raw;
        raw.web_config_file = None;
        raw.health_without_auth = None;
        raw.validate().unwrap();
    }

    /// The fields serde takes in each table are the ones [`FIELDS`] documents.
    #[test]
    fn the_table_fields_are_the_documented_ones() {
        for (table, toml) in [
            ("logs", "[[logs]]\npath = \"x\"\nbogus = 1\n"),
            ("outputs", "[[outputs]]\nglob = \"x\"\nbogus = 1\n"),
            ("webhooks", "[[webhooks]]\nurl = \"x\"\nbogus = 1\n"),
            ("actions", "[[actions]]\nname = \"x\"\nbogus = 1\n"),
            ("rules", "[rules.Stalled]\nbogus = 1\n"),
            ("partitions", "[[partitions]]\nname = \"x\"\nbogus = 1\n"),
        ] {
            let err = toml::from_str::<RawConfig>(toml).unwrap_err().to_string();
            // serde says "expected one of `a`, `b`, `c`", or "expected `a` or `b`" for two.
            let expected = err
                .split_once("expected one of ")
                .or_else(|| err.split_once("expected "))
                .expect(&err)
                .1;
            let mut accepted: Vec<&str> = expected
                .split([',', '\n'])
                .flat_map(|k| k.split(" or "))
                .map(|k| {
                    k.trim()
                        .trim_matches(|c: char| c == '`' || c.is_whitespace())
                })
                .filter(|k| !k.is_empty())
                .collect();
            accepted.sort();
            let field = match KEYS.iter().find(|k| k.name == table).unwrap().kind {
                Kind::Tables(_, field) => field,
                _ => unreachable!(),
            };
            let mut documented: Vec<&str> = FIELDS
                .iter()
                .filter(|k| k.table == Some(table))
                .map(|k| k.name)
                .chain(field)
                .collect();
            documented.sort();
            assert_eq!(accepted, documented, "the fields of {table}");
        }
    }

    #[test]
    fn flags_are_laid_over_the_file() {
        let mut raw: RawConfig = toml::from_str(
            "listen = \"127.0.0.1:1\"\npoll_interval = \"1s\"\n[[logs]]\npath = \"file.log\"\n",
        )
        .unwrap();
        let mut flags = KeyFlags::default();
        flags.set(&field::logs_format, &["tqdm"]);
        flags.set(&key::logs, &["a.log", "b.log"]);
        flags.set(&key::listen, &["127.0.0.1:2"]);
        flags.set(&key::max_connections, &["3"]);
        flags.set(&key::gpu_processes, &["true"]);
        flags.lay_over(&mut raw).unwrap();
        assert_eq!(
            raw.poll_interval.as_deref(),
            Some("1s"),
            "the file's key stays"
        );
        assert_eq!(raw.listen, Some(Listen::Many(vec!["127.0.0.1:2".into()])));
        assert_eq!(raw.max_connections, Some(3));
        assert_eq!(raw.gpu_processes, Some(true));
        let logs: Vec<_> = raw
            .logs
            .iter()
            .map(|l| (l.path.clone(), l.format))
            .collect();
        assert_eq!(
            logs,
            [
                (PathBuf::from("a.log"), Format::Tqdm),
                (PathBuf::from("b.log"), Format::Tqdm)
            ]
        );
    }

    /// `--collector.X` and `--no-collector.X` switch single collectors in the file's table.
    #[test]
    fn collector_flags_are_laid_over_the_files_switches() {
        let mut raw: RawConfig =
            toml::from_str("[collectors]\ngpu = false\nhistory = false\n").unwrap();
        let mut flags = KeyFlags::default();
        flags.set(&key::collectors, &["gpu=true", "log=false"]);
        flags.lay_over(&mut raw).unwrap();
        let switches: Vec<_> = raw
            .collectors
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        assert_eq!(
            switches,
            [("gpu", true), ("history", false), ("log", false)]
        );
    }

    #[test]
    fn a_bad_flag_is_named() {
        let mut flags = KeyFlags::default();
        flags.set(&key::gpu, &["sometimes"]);
        let err = flags.lay_over(&mut RawConfig::default()).unwrap_err();
        assert!(
            err.to_string().contains("`gpu`: --gpu: unknown variant"),
            "{err}"
        );
        let mut flags = KeyFlags::default();
        flags.set(&key::max_connections, &["many"]);
        let err = flags.lay_over(&mut RawConfig::default()).unwrap_err();
        assert!(err.to_string().contains("`max_connections`"), "{err}");
    }

    #[test]
    fn ranges_read_as_the_docs_write_them() {
        assert_eq!(short(Duration::from_millis(250)), "250ms");
        assert_eq!(short(Duration::from_secs(60)), "1m");
        assert_eq!(short(Duration::from_secs(30 * 86400)), "30d");
        assert_eq!(short(Duration::from_secs(90)), "90s");
    }
}
