//! Configuration: a TOML file and the command line merged into one validated [`Config`].
//!
//! Parsing is two-step: serde reads the file into a [`RawConfig`] of plain strings, the flags
//! are laid over it, and [`RawConfig::validate`] turns it into typed values. Validating after
//! the merge means an error names the key whichever way the value came in.

use crate::collectors::{Collector, Collectors};
use crate::http_client::Url;
use crate::model::Discovered;
use crate::parse::{Detect, Format, Parser, RegexFormat, RunInference, ServerLog, Tqdm};
use crate::paths::normalize;
use crate::run_identity::{self, RunLabel};
use crate::sinks::alert::settings::AlertConfig;
use crate::sinks::recorder;
use crate::sinks::web_config::WebConfig;
use crate::sources::probe::process::ProcessTarget;
use crate::sources::probe::ProbeConfig;

mod actions;
mod alerts;
mod channels;
pub mod discovery;
pub mod keys;
mod sections;
mod tables;
mod unique;

pub use crate::sources::files::{FileWatch, OutputConfig, OutputLimits, Pointers};
pub use crate::sources::log::LogConfig;
pub use keys::{key, RawConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
pub use tables::{
    Listen, RawAction, RawLog, RawOutputs, RawPartition, RawRule, RawWebhook, Threshold,
    MAX_REQUIRED,
};

pub use crate::sources::gpu::GpuMode;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: key `{key}`: {message}")]
    Syntax {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error("config key `{key}`: {message}")]
    Invalid { key: String, message: String },
}

impl ConfigError {
    pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// The inputs of a configuration, typed: what the sources follow and the probes ask.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub logs: Vec<LogConfig>,
    pub outputs: Vec<OutputConfig>,
    pub inputs: Vec<String>,
    pub probes: ProbeConfig,
}

/// The validated configuration the sidecar runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Every address to serve on; at least one.
    pub listen: Vec<SocketAddr>,
    /// Serve on the sockets systemd passed instead (`LISTEN_FDS`).
    pub systemd_socket: bool,
    /// Where the metrics are served (`/metrics`).
    pub telemetry_path: String,
    /// The collectors switched on; the inputs of those off are already left out below.
    pub collectors: Collectors,
    pub state_dir: Option<PathBuf>,
    /// How long an HTTP client may take to send its request headers.
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    /// TLS and auth from the web config file; `None` serves plain HTTP to anyone.
    pub web: Option<WebConfig>,
    /// The recorder's section: how fine and how far back the history is kept.
    pub history: recorder::Settings,
    /// How often the state directory's snapshot is rewritten.
    pub snapshot_interval: Duration,
    /// The deadline, budgets and price the run is held to.
    pub plan: crate::model::Plan,
    /// The log source's section: the progress and server logs, and how often they are read.
    pub log: crate::sources::log::Settings,
    /// The output files source's section: the output globs and input files, and their limits.
    pub files: crate::sources::files::Settings,
    /// The GPU source's section.
    pub gpu: crate::sources::gpu::Settings,
    /// The probes' section: the driver process and the server, and how often they are asked.
    pub probe: crate::sources::probe::Settings,
    pub alerts: AlertConfig,
    pub heartbeat: Option<crate::sinks::alert::heartbeat::HeartbeatConfig>,
    pub discover_interval: Duration,
    /// The SLURM source's section: when, and how long at most, the controller is asked
    /// about the run's job.
    pub slurm: crate::sources::slurm::Settings,
    /// The run-id source's section: the run this node belongs to, if any.
    pub run_id: crate::sources::run_id::Settings,
    /// With `run_dir`: the keys as given (discovery fills only the others) and what it found.
    pub discovered: Option<(RawConfig, Discovered)>,
    /// The file and flags as given, for printing the effective configuration.
    source: RawConfig,
}

impl RawConfig {
    /// Reads and parses a TOML file.
    pub fn from_file(path: &Path) -> Result<RawConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Syntax {
            path: path.to_owned(),
            key: key_at(&text, e.span()).unwrap_or_else(|| "(file)".to_owned()),
            message: with_hint(e.message()),
        })
    }

    pub fn validate(&self) -> Result<Config, ConfigError> {
        let listen = self.listen_addresses()?;
        if self
            .run_name
            .as_deref()
            .is_some_and(|n| n.trim().is_empty())
        {
            return Err(ConfigError::invalid("run_name", "must not be empty"));
        }
        let poll_interval = key::poll_interval.duration(self.poll_interval.as_deref())?;
        let header_read_timeout =
            key::header_read_timeout.duration(self.header_read_timeout.as_deref())?;
        let snapshot_interval =
            key::snapshot_interval.duration(self.snapshot_interval.as_deref())?;
        let max_line_bytes = key::max_line_bytes.count(self.max_line_bytes)?;
        let max_record_bytes = key::max_record_bytes.count(self.max_record_bytes)?;
        let probe_interval = key::probe_interval.duration(self.probe_interval.as_deref())?;
        unique::check(self)?;
        let discover_interval =
            key::discover_interval.duration(self.discover_interval.as_deref())?;
        // `web.disable-exporter-metrics` is the toolkit's spelling of the exporter's switch.
        let collectors = self.collectors()?;
        let collectors = collectors.with(
            Collector::Exporter,
            collectors.on(Collector::Exporter) && !self.disable_exporter_metrics.unwrap_or(false),
        );
        let Inputs {
            logs,
            outputs,
            inputs,
            probes,
        } = self.inputs(collectors)?;
        let gpu = self.gpu_section(collectors)?;
        let run = self.run_label();
        let alerts = self.alerts(run.clone())?;
        let web = self.web()?;
        let heartbeat = self.heartbeat()?;
        let history = self.history(collectors)?;
        Ok(Config {
            history,
            heartbeat,
            listen,
            systemd_socket: self.systemd_socket.unwrap_or(false),
            telemetry_path: self.telemetry_path()?,
            collectors,
            web,
            state_dir: self.state_dir.clone(),
            header_read_timeout,
            max_connections: key::max_connections.count(self.max_connections)?,
            snapshot_interval,
            // Its limits are read here, after max_connections, as they always were: a file
            // with several errors names the same one first.
            files: self.files_section(outputs, inputs, poll_interval, max_record_bytes)?,
            plan: self.plan()?,
            run_id: self.run_id_section(run, &logs),
            log: self.log_section(logs, poll_interval, max_line_bytes),
            gpu,
            probe: self.probe_section(probes, probe_interval),
            alerts,
            discover_interval,
            slurm: self.slurm_section(collectors)?,
            discovered: None,
            source: self.clone(),
        })
    }

    /// What the sidecar follows and probes, typed, for the collectors switched on: a
    /// collector switched off reads nothing, so its inputs are left out here. Start-up takes
    /// it with the rest of the configuration; discovery takes it alone for what a later scan
    /// finds (config/discovery.rs), without validating the whole configuration again.
    pub fn inputs(&self, collectors: Collectors) -> Result<Inputs, ConfigError> {
        let mut logs = self
            .logs
            .iter()
            .enumerate()
            .map(|(i, log)| log.validate(i))
            .collect::<Result<Vec<_>, _>>()?;
        let server_format = self.server_log_format.unwrap_or_default();
        if !matches!(server_format, Format::Auto | Format::Sglang | Format::Vllm) {
            return Err(ConfigError::invalid(
                "server_log_format",
                format!(
                    "{server_format} is not a server log format; expected auto, sglang or vllm"
                ),
            ));
        }
        for (i, path) in self.server_logs.iter().enumerate() {
            if path.as_os_str().is_empty() {
                return Err(ConfigError::invalid(
                    format!("server_logs[{i}]"),
                    "must not be empty",
                ));
            }
            logs.push(LogConfig {
                path: path.clone(),
                parser: Parser::Server(ServerLog::new(server_format)),
                server: true,
                envelope: self.server_log_envelope.unwrap_or_default(),
                format: server_format,
                regex: None,
                unit_divisor: None,
            });
        }
        let outputs = self
            .outputs
            .iter()
            .enumerate()
            .map(|(i, o)| o.validate(i, &self.require))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, glob) in self.inputs.iter().enumerate() {
            check_glob(&format!("inputs[{i}]"), glob)?;
        }
        let probe_timeout = key::probe_timeout.duration(self.probe_timeout.as_deref())?;
        let mut probes = self.probes(probe_timeout)?;
        // A collector switched off reads nothing: its inputs are not followed at all.
        if !collectors.on(Collector::Process) {
            probes.process = None;
        }
        if !collectors.on(Collector::Server) {
            probes.health_url = None;
            probes.metrics_url = None;
        }
        logs.retain(|l| {
            collectors.on(if l.server {
                Collector::Server
            } else {
                Collector::Log
            })
        });
        let (outputs, inputs) = match collectors.on(Collector::Outputs) {
            true => (outputs, self.inputs.clone()),
            false => (Vec::new(), Vec::new()),
        };
        Ok(Inputs {
            logs,
            outputs,
            inputs,
            probes,
        })
    }

    /// The run this node belongs to and its part in it (docs/many-nodes.md): `None` on a
    /// node with no run name, no run folder and no progress log.
    pub(crate) fn run_label(&self) -> Option<RunLabel> {
        let logs: Vec<PathBuf> = self.logs.iter().map(|l| l.path.clone()).collect();
        let run = run_identity::name(self.run_name.as_deref(), self.run_dir.as_deref(), &logs)?;
        let has_server = self.server_health_url.is_some()
            || self.server_metrics_url.is_some()
            || !self.server_logs.is_empty();
        let role = run_identity::role(self.role, None, !logs.is_empty(), has_server);
        Some(RunLabel { run, role })
    }

    fn plan(&self) -> Result<crate::model::Plan, ConfigError> {
        use crate::model::Deadline;
        let deadline = match self.deadline.as_deref().map(str::trim) {
            None => None,
            Some(text) => Some(match humantime::parse_rfc3339_weak(text) {
                Ok(at) => Deadline::At(crate::clock::unix_seconds(at)),
                Err(_) => match humantime::parse_duration(text) {
                    Ok(d) if d.as_secs() >= 60 => Deadline::AfterStart(d.as_secs_f64()),
                    _ => {
                        return Err(ConfigError::invalid(
                            "deadline",
                            format!("{text:?} is neither a time like 2026-12-03T09:00:00Z nor a duration from the run's start of a minute or more, like 36h"),
                        ))
                    }
                },
            }),
        };
        for (name, budget) in [
            ("budget_records", self.budget_records),
            ("budget_tokens", self.budget_tokens),
        ] {
            if budget == Some(0) {
                return Err(ConfigError::invalid(name, "must be 1 or more"));
            }
        }
        if let Some(price) = self
            .gpu_hour_price
            .filter(|p| !(p.is_finite() && *p >= 0.0))
        {
            return Err(ConfigError::invalid(
                "gpu_hour_price",
                format!("{price} is not a price: 0 or more"),
            ));
        }
        let mut partition_budgets = std::collections::BTreeMap::new();
        for (i, p) in self.partitions.iter().enumerate() {
            let key = |k: &str| format!("partitions[{i}].{k}");
            if p.name.trim().is_empty() {
                return Err(ConfigError::invalid(key("name"), "must not be empty"));
            }
            match p.budget_records {
                Some(0) => {
                    return Err(ConfigError::invalid(
                        key("budget_records"),
                        "must be 1 or more",
                    ))
                }
                Some(b) if partition_budgets.insert(p.name.clone(), b).is_some() => {
                    return Err(ConfigError::invalid(
                        key("name"),
                        format!("{:?} is given twice", p.name),
                    ))
                }
                _ => {}
            }
        }
        Ok(crate::model::Plan {
            deadline,
            budget_records: self.budget_records,
            budget_tokens: self.budget_tokens,
            partition_budgets,
            gpu_hour_price: self.gpu_hour_price,
        })
    }

    /// The collectors switched on: every one, or none with `collectors_disable_defaults`,
    /// then `collectors`' switches.
    fn collectors(&self) -> Result<Collectors, ConfigError> {
        let start = match self.collectors_disable_defaults.unwrap_or(false) {
            true => Collectors::none(),
            false => Collectors::all(),
        };
        self.collectors
            .iter()
            .try_fold(start, |set, (name, on)| match Collector::from_name(name) {
                Some(c) => Ok(set.with(c, *on)),
                None => Err(ConfigError::invalid(
                    format!("collectors.{name}"),
                    format!(
                        "no such collector; the collectors are {}",
                        Collector::NAMES.join(", ")
                    ),
                )),
            })
    }

    fn history(&self, collectors: Collectors) -> Result<recorder::Settings, ConfigError> {
        let resolution = key::history_resolution
            .duration(self.history_resolution.as_deref())?
            .as_secs_f64();
        let span = key::history_span
            .duration(self.history_span.as_deref())?
            .as_secs_f64();
        // The bound on memory: points per series.
        if span / resolution > 100_000.0 {
            return Err(ConfigError::invalid(
                "history_span",
                format!(
                    "{} points per series at history_resolution {}: at most 100000 (a coarser resolution or a shorter span)",
                    (span / resolution).ceil(),
                    humantime::format_duration(std::time::Duration::from_secs_f64(resolution))
                ),
            ));
        }
        Ok(recorder::Settings {
            on: collectors.on(Collector::History),
            resolution,
            span,
        })
    }

    fn web(&self) -> Result<Option<WebConfig>, ConfigError> {
        let Some(path) = &self.web_config_file else {
            if self.health_without_auth.is_some() {
                return Err(ConfigError::invalid(
                    "health_without_auth",
                    "needs web_config_file: without one nothing asks for auth",
                ));
            }
            return Ok(None);
        };
        let active = crate::sinks::web_config::load(path)
            .map_err(|e| ConfigError::invalid("web_config_file", e.to_string()))?;
        Ok(Some(WebConfig {
            path: path.clone(),
            loaded: std::sync::Arc::new(active),
            health_without_auth: self.health_without_auth.unwrap_or(false),
        }))
    }

    /// The metrics' path: one of its own, never one of the other endpoints'.
    fn telemetry_path(&self) -> Result<String, ConfigError> {
        let path = self.telemetry_path.as_deref().unwrap_or("/metrics");
        let taken = ["/", "/status"].contains(&path)
            || path.starts_with("/api/")
            || path.starts_with("/-/");
        if !path.starts_with('/') || taken || path.contains(['?', '#', ' ']) {
            return Err(ConfigError::invalid(
                "telemetry_path",
                format!("{path:?} must be a path of its own starting with / (not /, /status, /api/… or /-/…)"),
            ));
        }
        Ok(path.to_owned())
    }

    fn listen_addresses(&self) -> Result<Vec<SocketAddr>, ConfigError> {
        let keys::DefaultValue::Value(default) = key::listen.default else {
            unreachable!("listen has a default")
        };
        let given = self
            .listen
            .as_ref()
            .map_or(vec![default], Listen::addresses);
        if given.is_empty() {
            return Err(ConfigError::invalid("listen", "needs at least one address"));
        }
        let mut addresses: Vec<SocketAddr> = Vec::new();
        for (i, text) in given.iter().enumerate() {
            let key = if given.len() == 1 {
                "listen".to_owned()
            } else {
                format!("listen[{i}]")
            };
            let address: SocketAddr = text.parse().map_err(|_| {
                ConfigError::invalid(
                    key.as_str(),
                    format!("{text:?} is not an address like 0.0.0.0:9721 or 127.0.0.1:9721"),
                )
            })?;
            // Port 0 (any free port) may repeat: each bind gets its own.
            if address.port() != 0 && addresses.contains(&address) {
                return Err(ConfigError::invalid(
                    key,
                    format!("{address} is given twice"),
                ));
            }
            addresses.push(address);
        }
        Ok(addresses)
    }

    fn probes(&self, timeout: Duration) -> Result<ProbeConfig, ConfigError> {
        let process = match (&self.process_match, &self.pid_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    "pid_file",
                    "give process_match or pid_file, not both",
                ))
            }
            (Some(text), None) if text.trim().is_empty() => {
                return Err(ConfigError::invalid("process_match", "must not be empty"))
            }
            (Some(text), None) => Some(match &self.process_dir {
                Some(dir) => ProcessTarget::MatchIn(text.clone(), normalize(dir)),
                None => ProcessTarget::Match(text.clone()),
            }),
            (None, Some(file)) => Some(ProcessTarget::PidFile(file.clone())),
            (None, None) => None,
        };
        let url = |key: &str, value: &Option<String>| {
            value
                .as_deref()
                .map(|v| Url::parse(v).map_err(|e| ConfigError::invalid(key, e)))
                .transpose()
        };
        let health_interval = match &self.server_health_interval {
            Some(text) => Some(key::server_health_interval.duration(Some(text))?),
            None => None,
        };
        let health_timeout = match &self.server_health_timeout {
            Some(text) => Some(key::server_health_timeout.duration(Some(text))?),
            None => None,
        };
        Ok(ProbeConfig {
            process,
            health_url: url("server_health_url", &self.server_health_url)?,
            metrics_url: url("server_metrics_url", &self.server_metrics_url)?,
            timeout,
            health_interval,
            health_timeout,
        })
    }
}

impl RawLog {
    fn validate(&self, i: usize) -> Result<LogConfig, ConfigError> {
        let key = |k: &str| format!("logs[{i}].{k}");
        if self.path.as_os_str().is_empty() {
            return Err(ConfigError::invalid(key("path"), "must not be empty"));
        }
        let tqdm = match self.unit_divisor {
            None => Tqdm::default(),
            Some(d @ (1000 | 1024)) if matches!(self.format, Format::Auto | Format::Tqdm) => {
                Tqdm::with_divisor(d)
            }
            Some(1000 | 1024) => {
                return Err(ConfigError::invalid(
                    key("unit_divisor"),
                    format!("applies to tqdm bars only, but format is {}", self.format),
                ))
            }
            Some(other) => {
                return Err(ConfigError::invalid(
                    key("unit_divisor"),
                    format!("must be 1000 or 1024 (tqdm's unit_divisor), not {other}"),
                ))
            }
        };
        let parser = match (self.format, &self.regex) {
            (Format::Auto, None) => Parser::Auto(Detect::with_tqdm(tqdm)),
            (Format::RunInference, None) => Parser::RunInference(RunInference),
            (Format::Tqdm, None) => Parser::Tqdm(tqdm),
            (Format::Library, None) => {
                let mut detect = Detect::with_tqdm(tqdm);
                detect.assume(Format::Library);
                Parser::Auto(detect)
            }
            (Format::Regex, Some(re)) => Parser::Regex(
                RegexFormat::new(re)
                    .map_err(|e| ConfigError::invalid(key("regex"), e.to_string()))?,
            ),
            (Format::Regex, None) => {
                return Err(ConfigError::invalid(
                    key("regex"),
                    "is required when format = \"regex\" (or give --log-regex)",
                ))
            }
            (Format::Sglang | Format::Vllm, _) => {
                return Err(ConfigError::invalid(
                    key("format"),
                    format!(
                        "{} is an inference server's log format: give the file as server_logs (--server-log)",
                        self.format
                    ),
                ))
            }
            (format, Some(_)) => {
                return Err(ConfigError::invalid(
                    key("regex"),
                    format!("is only used with format = \"regex\", but format is {format:?}"),
                ))
            }
        };
        Ok(LogConfig {
            path: self.path.clone(),
            parser,
            server: false,
            envelope: self.envelope,
            format: self.format,
            regex: self.regex.clone(),
            unit_divisor: self.unit_divisor,
        })
    }
}

impl RawOutputs {
    /// `require` is the top-level list, for a glob that names no fields of its own.
    fn validate(&self, i: usize, require: &[String]) -> Result<OutputConfig, ConfigError> {
        let key = |k: &str| format!("outputs[{i}].{k}");
        let (required, required_key) = if self.required.is_empty() {
            (require, "require".to_owned())
        } else {
            (&self.required[..], key("required"))
        };
        check_glob(&key("glob"), &self.glob)?;
        if self.partition.as_deref().is_some_and(str::is_empty) {
            return Err(ConfigError::invalid(key("partition"), "must not be empty"));
        }
        let pointers = self.pointers.clone().unwrap_or_default();
        let lists = pointers.lists();
        let named = lists
            .iter()
            .map(|(n, l)| (key(&format!("pointers.{n}")), l.as_slice()))
            .chain([(required_key.clone(), required)]);
        for (name, list) in named {
            if let Some(bad) = list.iter().find(|p| !p.is_empty() && !p.starts_with('/')) {
                return Err(ConfigError::invalid(
                    name,
                    format!("{bad:?} is not a JSON pointer; pointers start with / as in /meta_info/completion_tokens"),
                ));
            }
        }
        if required.len() > MAX_REQUIRED {
            return Err(ConfigError::invalid(
                required_key,
                format!("{} fields: at most {MAX_REQUIRED}", required.len()),
            ));
        }
        Ok(OutputConfig {
            glob: self.glob.clone(),
            partition: self.partition.clone(),
            inspect: self.inspect.unwrap_or(true),
            pointers,
            required: required.to_vec(),
        })
    }
}

fn check_glob(key: &str, glob: &str) -> Result<(), ConfigError> {
    if glob.is_empty() {
        return Err(ConfigError::invalid(key, "must not be empty"));
    }
    glob::Pattern::new(glob)
        .map(|_| ())
        .map_err(|e| ConfigError::invalid(key, format!("{glob:?} is not a valid glob: {e}")))
}

impl Config {
    /// The effective configuration as TOML, every default spelled out and every key after
    /// its documentation.
    pub fn to_toml(&self) -> String {
        let mut raw = self.source.clone();
        raw.outputs = self
            .files
            .outputs
            .iter()
            .map(|o| RawOutputs {
                glob: o.glob.clone(),
                partition: o.partition.clone(),
                inspect: Some(o.inspect),
                pointers: Some(o.pointers.clone()),
                required: o.required.clone(),
            })
            .collect();
        raw.server_logs = self
            .log
            .logs
            .iter()
            .filter(|l| l.server)
            .map(|l| l.path.clone())
            .collect();
        raw.server_log_format = self.log.logs.iter().find(|l| l.server).map(|l| l.format);
        raw.server_log_envelope = self.log.logs.iter().find(|l| l.server).map(|l| l.envelope);
        raw.logs = self
            .log
            .logs
            .iter()
            .filter(|l| !l.server)
            .map(|l| RawLog {
                path: l.path.clone(),
                format: l.format,
                envelope: l.envelope,
                regex: l.regex.clone(),
                unit_divisor: l.unit_divisor,
            })
            .collect();
        raw.hostname = Some(self.alerts.context.host.clone());
        if let Some(delivery) = &self.alerts.delivery {
            raw.email_from = Some(delivery.from.clone());
        }
        // Every rule, with its effective settings; stall_after is folded into Stalled.
        raw.stall_after = None;
        let d = |d: Duration| Some(humantime::format_duration(d).to_string());
        raw.rules = self
            .alerts
            .rules
            .0
            .iter()
            .map(|(alert, rule)| {
                let threshold = match alerts::threshold_kind(*alert) {
                    alerts::ThresholdKind::Silence(_) => Some(Threshold::Text(
                        humantime::format_duration(Duration::from_secs_f64(rule.threshold))
                            .to_string(),
                    )),
                    alerts::ThresholdKind::None(_) => None,
                    _ => Some(Threshold::Number(rule.threshold)),
                };
                let throughput = *alert == crate::rules::AlertName::ThroughputDrop;
                let seconds = |s: f64| d(Duration::from_secs_f64(s)).filter(|_| throughput);
                let raw_rule = RawRule {
                    enabled: Some(rule.enabled),
                    threshold,
                    for_: d(Duration::from_secs_f64(rule.for_seconds)),
                    window: seconds(rule.window_seconds),
                    history: seconds(rule.history_seconds),
                };
                (alert.to_string(), raw_rule)
            })
            .collect();
        let mut table = keys::to_table(&raw);
        keys::with_defaults(&mut table);
        // The default was folded into the rule above.
        table.remove(key::stall_after.name);
        keys::commented(table)
    }
}

/// The range a duration key must fall in. Too short only burns CPU or gives up on every
/// attempt; too long means the feature never acts, and a duration that large overflows where
/// it meets a clock (hyper adds `header_read_timeout` to an `Instant` and panics).
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub min: Duration,
    pub max: Duration,
}

/// A range of milliseconds.
pub(crate) const fn span(min: u64, max: u64) -> Span {
    Span {
        min: Duration::from_millis(min),
        max: Duration::from_millis(max),
    }
}

impl std::fmt::Display for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} to {}",
            humantime::format_duration(self.min),
            humantime::format_duration(self.max)
        )
    }
}

fn duration(
    key: &str,
    value: Option<&str>,
    default: &str,
    span: Span,
) -> Result<Duration, ConfigError> {
    let value = value.unwrap_or(default);
    let d = humantime::parse_duration(value.trim()).map_err(|e| {
        ConfigError::invalid(
            key,
            format!("{value:?} is not a duration ({e}); try 250ms, 90s or 1h30m"),
        )
    })?;
    in_span(key, d, value, span)
}

fn in_span(key: &str, d: Duration, value: &str, span: Span) -> Result<Duration, ConfigError> {
    if d < span.min || d > span.max {
        return Err(ConfigError::invalid(
            key,
            format!("{value:?} is out of range: it must be {span}"),
        ));
    }
    Ok(d)
}

/// A count key (`unit` says of what) within its range.
fn count(
    key: &str,
    value: Option<usize>,
    default: usize,
    (min, max): (usize, usize),
    unit: &str,
) -> Result<usize, ConfigError> {
    let n = value.unwrap_or(default);
    if n < min || n > max {
        return Err(ConfigError::invalid(
            key,
            format!("{n} is out of range: it must be {min} to {max} {unit}"),
        ));
    }
    Ok(n)
}

/// serde's type errors, with what to write instead.
fn with_hint(message: &str) -> String {
    if message.contains("expected a string") {
        format!("{message} (durations, addresses and URLs are quoted strings, as in poll_interval = \"250ms\")")
    } else {
        message.to_owned()
    }
}

/// The key on the line where a TOML error points, so the message names it even for type
/// errors, whose span covers only the value.
fn key_at(text: &str, span: Option<std::ops::Range<usize>>) -> Option<String> {
    let start = span?.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line = &text[line_start..line_end];
    let key = line
        .split('=')
        .next()?
        .trim()
        .trim_matches(|c| c == '[' || c == ']');
    (!key.is_empty()).then(|| key.to_owned())
}

#[cfg(test)]
mod tests;
