//! The command line (`docs/configuration.md`). Every `run` flag has a config-file key of the same name
//! (dashes become underscores); flags win over the file.

use crate::config::{GpuMode, Listen, RawConfig, RawLog, RawOutputs};
use crate::parse::Format;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "pipeline-pulse",
    version,
    about = "Watches a long-running LLM batch-inference job and serves its progress to Prometheus."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// How the sidecar's own messages are written to stderr: text, or json (one object per
    /// event, for log collectors). RUST_LOG sets the level.
    #[arg(long, global = true, value_enum, default_value_t = LogOutput::Text, env = "PULSE_LOG_OUTPUT")]
    pub log_output: LogOutput,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogOutput {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Follow a run's logs and serve /metrics.
    Run(Box<RunArgs>),
    /// Simulate a pipeline in a folder and watch it with the real sidecar.
    Demo(DemoArgs),
    /// Show a run's status: from a sidecar (--url) or from the files directly (--log,
    /// --outputs). Exit status 0 healthy, 1 alert firing or stalled, 2 error.
    Status(Box<StatusArgs>),
    /// Send a test notification through every configured channel (email, Alertmanagers,
    /// webhooks) and print each outcome; exit status 1 if any failed.
    #[command(alias = "test-email")]
    TestNotify(Box<RunArgs>),
    /// Look at a run folder and print the config that --run-dir would run with (the logs,
    /// outputs, inputs, driver and server it finds), to review, edit and pin with --config.
    Discover {
        /// The run's folder.
        dir: PathBuf,
    },
    /// Initialise NVML, time every query the sampler makes on every GPU and register the
    /// XID event set; prints a table (scripts/gpu-smoke.sh runs it on a real node).
    GpuCheck {
        /// Load NVML from this file instead of libnvidia-ml.so.1.
        #[arg(long, value_name = "PATH")]
        nvml_library: Option<PathBuf>,
    },
    /// The demo's simulated pipeline (started by `demo`).
    #[command(hide = true)]
    DemoPipeline {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        speed: f64,
        #[arg(long)]
        server_port: u16,
    },
    /// The demo's simulated SGLang server (started by the simulated pipeline).
    #[command(hide = true)]
    DemoServer {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Silence a running sidecar's notifications for a while (maintenance), list or expire
    /// silences.
    Silence(Box<SilenceArgs>),
    /// Check a Prometheus web config file (TLS, client certificates, basic auth) as `run`
    /// would read it, and print what it serves; exit status 2 names the bad key.
    CheckWebConfig {
        /// The YAML file to check.
        file: PathBuf,
    },
    /// Read a password from standard input and print its bcrypt hash, for the web config's
    /// basic_auth_users (as `htpasswd -nBC 10` would).
    HashPassword {
        /// bcrypt's cost: each step doubles the work of a check.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(4..=31))]
        cost: u32,
    },
    /// Validate a config file and print the effective configuration.
    CheckConfig {
        /// The TOML file to check.
        file: PathBuf,
    },
}

#[derive(Debug, Args, Default)]
pub struct RunArgs {
    /// TOML config file; flags given here override its keys.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The run's folder: find its progress logs, outputs, inputs, driver process and
    /// inference server by themselves (flags and config keys given win).
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// How often --run-dir looks again for new logs, partitions, a driver and a server
    /// [default: 30s].
    #[arg(long, value_name = "DURATION")]
    pub discover_interval: Option<String>,
    /// A progress log to follow (repeatable). It may not exist yet.
    #[arg(long = "log", value_name = "PATH")]
    pub logs: Vec<PathBuf>,
    /// The inference server's own log, SGLang or vLLM (repeatable): its decode and stats
    /// lines give running and queued requests, tok/s and KV-cache usage.
    #[arg(long = "server-log", value_name = "PATH")]
    pub server_logs: Vec<PathBuf>,
    /// Format of the server logs: auto (the default), sglang or vllm.
    #[arg(long, value_name = "FORMAT", value_parser = parse_format)]
    pub server_log_format: Option<Format>,
    /// Output files to count and inspect, one JSON record per line (repeatable), e.g.
    /// '/data/run/prepared/*/raw_responses.jsonl'. The partition is each file's folder name.
    #[arg(long = "outputs", value_name = "GLOB")]
    pub outputs: Vec<String>,
    /// Input files whose line counts are each partition's planned requests (repeatable), e.g.
    /// '/data/run/prepared/*/prompts.jsonl'.
    #[arg(long = "inputs", value_name = "GLOB")]
    pub inputs: Vec<String>,
    /// Format of the logs given with --log.
    #[arg(long, value_name = "FORMAT", value_parser = parse_format)]
    pub log_format: Option<Format>,
    /// Regex with named groups (completed, planned, errors, rps, avg_tokens, eta, partition),
    /// for --log-format regex.
    #[arg(long, value_name = "RE")]
    pub log_regex: Option<String>,
    /// Address to serve /metrics on (repeatable: every address is served) [default:
    /// 0.0.0.0:9721].
    #[arg(long, value_name = "ADDR")]
    pub listen: Vec<String>,
    /// Directory for state kept across restarts.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// How often to check the inputs for new data, e.g. 250ms [default: 250ms].
    #[arg(long, value_name = "DURATION")]
    pub poll_interval: Option<String>,
    /// How to read the GPUs: auto (NVML if present), on (NVML or fail), off, or simulated
    /// (eight made-up GPUs, for demos and tests) [default: auto].
    #[arg(long, value_name = "MODE", value_parser = parse_gpu_mode)]
    pub gpu: Option<GpuMode>,
    /// How often to sample the GPUs [default: 5s].
    #[arg(long, value_name = "DURATION")]
    pub gpu_interval: Option<String>,
    /// Also export GPU memory per process.
    #[arg(long)]
    pub gpu_processes: bool,
    /// The most one reading of the GPUs may take; past it their figures are stale, not
    /// exported, and GpuHung fires [default: 10s].
    #[arg(long, value_name = "DURATION")]
    pub gpu_timeout: Option<String>,
    /// Load NVML from this file instead of libnvidia-ml.so.1 from the library path.
    #[arg(long, value_name = "PATH")]
    pub nvml_library: Option<PathBuf>,
    /// The driver process: a piece of its command line, e.g. run_inference.py.
    #[arg(long, value_name = "TEXT")]
    pub process_match: Option<String>,
    /// The driver process: a file holding its pid.
    #[arg(long, value_name = "PATH")]
    pub pid_file: Option<PathBuf>,
    /// The inference server's health URL (2xx means up), e.g. http://127.0.0.1:30000/health.
    #[arg(long, value_name = "URL")]
    pub server_health_url: Option<String>,
    /// The inference server's Prometheus metrics (SGLang or vLLM), e.g.
    /// http://127.0.0.1:30000/metrics.
    #[arg(long, value_name = "URL")]
    pub server_metrics_url: Option<String>,
    /// How often to probe the process and the server [default: 5s].
    #[arg(long, value_name = "DURATION")]
    pub probe_interval: Option<String>,
    /// How long a server probe may take [default: 2s].
    #[arg(long, value_name = "DURATION")]
    pub probe_timeout: Option<String>,
    /// Where alert emails go: smtp://host:port?tls=none|starttls|tls, or file:///dir for .eml
    /// files. The SMTP user, password (file or environment variable) and CA are config keys.
    #[arg(long, value_name = "URL")]
    pub smtp: Option<String>,
    /// An alert email recipient (repeatable).
    #[arg(long = "email-to", value_name = "ADDR")]
    pub email_to: Vec<String>,
    /// The sender of alert emails [default: pipeline-pulse@HOSTNAME].
    #[arg(long, value_name = "ADDR")]
    pub email_from: Option<String>,
    /// Alert when an active partition makes no progress for this long [default: 10m].
    #[arg(long, value_name = "DURATION")]
    pub stall_after: Option<String>,
    /// How often the alert rules are evaluated [default: 15s].
    #[arg(long, value_name = "DURATION")]
    pub alert_interval: Option<String>,
    /// How often to write the state directory's snapshot [default: 5s].
    #[arg(long, value_name = "DURATION")]
    pub snapshot_interval: Option<String>,
    /// How long an HTTP client may take to send its request headers [default: 10s].
    #[arg(long, value_name = "DURATION")]
    pub header_read_timeout: Option<String>,
    /// Connections served at once; more are answered 503 at once [default: 64].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// An Alertmanager to push the alerts to, by its base URL (repeatable: an HA pair gets
    /// every alert, as from Prometheus).
    #[arg(long = "alertmanager-url", value_name = "URL")]
    pub alertmanager_urls: Vec<String>,
    /// A URL to GET every heartbeat_interval while every input reads (healthchecks.io, Uptime
    /// Kuma); URL/fail while a collector is down.
    #[arg(long, value_name = "URL")]
    pub heartbeat_url: Option<String>,
    /// The Prometheus web configuration file (TLS, client certificates, basic auth), the
    /// schema every Prometheus exporter reads; `--web.config.file` is the same flag.
    #[arg(long, value_name = "FILE", alias = "web.config.file")]
    pub web_config_file: Option<PathBuf>,
    /// Read every input to its end, print the exposition to stdout, and exit.
    #[arg(long)]
    pub once: bool,
}

impl RunArgs {
    /// Lays the flags over the file's keys: a flag given wins. The merge lives here, not in
    /// `config`, so the configuration knows nothing of the command line.
    pub fn lay_over(&self, raw: &mut RawConfig) {
        if let Some(dir) = &self.run_dir {
            raw.run_dir = Some(dir.clone());
        }
        if let Some(interval) = &self.discover_interval {
            raw.discover_interval = Some(interval.clone());
        }
        match &self.listen[..] {
            [] => {}
            [one] => raw.listen = Some(Listen::One(one.clone())),
            all => raw.listen = Some(Listen::Many(all.to_vec())),
        }
        if let Some(dir) = &self.state_dir {
            raw.state_dir = Some(dir.clone());
        }
        if let Some(interval) = &self.poll_interval {
            raw.poll_interval = Some(interval.clone());
        }
        if let Some(url) = &self.heartbeat_url {
            raw.heartbeat_url = Some(url.clone());
        }
        if !self.alertmanager_urls.is_empty() {
            raw.alertmanager_urls = self.alertmanager_urls.clone();
        }
        if let Some(file) = &self.web_config_file {
            raw.web_config_file = Some(file.clone());
        }
        if let Some(n) = self.max_connections {
            raw.max_connections = Some(n);
        }
        if let Some(timeout) = &self.header_read_timeout {
            raw.header_read_timeout = Some(timeout.clone());
        }
        if let Some(interval) = &self.snapshot_interval {
            raw.snapshot_interval = Some(interval.clone());
        }
        if let Some(mode) = self.gpu {
            raw.gpu = Some(mode);
        }
        if let Some(interval) = &self.gpu_interval {
            raw.gpu_interval = Some(interval.clone());
        }
        if self.gpu_processes {
            raw.gpu_processes = Some(true);
        }
        if let Some(timeout) = &self.gpu_timeout {
            raw.gpu_timeout = Some(timeout.clone());
        }
        if let Some(path) = &self.nvml_library {
            raw.nvml_library = Some(path.clone());
        }
        if let Some(text) = &self.process_match {
            raw.process_match = Some(text.clone());
        }
        if let Some(file) = &self.pid_file {
            raw.pid_file = Some(file.clone());
        }
        if let Some(url) = &self.server_health_url {
            raw.server_health_url = Some(url.clone());
        }
        if let Some(url) = &self.server_metrics_url {
            raw.server_metrics_url = Some(url.clone());
        }
        if let Some(interval) = &self.probe_interval {
            raw.probe_interval = Some(interval.clone());
        }
        if let Some(timeout) = &self.probe_timeout {
            raw.probe_timeout = Some(timeout.clone());
        }
        if let Some(smtp) = &self.smtp {
            raw.smtp = Some(smtp.clone());
        }
        if !self.email_to.is_empty() {
            raw.email_to = self.email_to.clone();
        }
        if let Some(from) = &self.email_from {
            raw.email_from = Some(from.clone());
        }
        if let Some(stall) = &self.stall_after {
            raw.stall_after = Some(stall.clone());
        }
        if let Some(interval) = &self.alert_interval {
            raw.alert_interval = Some(interval.clone());
        }
        if !self.outputs.is_empty() {
            raw.outputs = self
                .outputs
                .iter()
                .map(|glob| RawOutputs {
                    glob: glob.clone(),
                    ..RawOutputs::default()
                })
                .collect();
        }
        if !self.inputs.is_empty() {
            raw.inputs = self.inputs.clone();
        }
        if !self.logs.is_empty() {
            raw.logs = self
                .logs
                .iter()
                .map(|path| RawLog {
                    path: path.clone(),
                    ..RawLog::default()
                })
                .collect();
        }
        if !self.server_logs.is_empty() {
            raw.server_logs = self.server_logs.clone();
        }
        if let Some(format) = self.server_log_format {
            raw.server_log_format = Some(format);
        }
        // --log-format and --log-regex describe the logs given with --log, or, without
        // --log, every log of the file.
        for log in &mut raw.logs {
            if let Some(format) = self.log_format {
                log.format = format;
            }
            if let Some(re) = &self.log_regex {
                log.regex = Some(re.clone());
            }
        }
    }
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// A running sidecar [default: http://127.0.0.1:9721 unless --log, --outputs or --run-dir
    /// is given].
    #[command(flatten)]
    pub remote: Remote,
    /// Print the /status JSON instead of the view.
    #[arg(long)]
    pub json: bool,
    /// Refresh the view in place until Ctrl-C.
    #[arg(long)]
    pub watch: bool,
    /// How often --watch refreshes.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub interval: std::time::Duration,
    /// Read the files directly (no sidecar needed): the same flags and config as `run`.
    #[command(flatten)]
    pub files: RunArgs,
}

/// How to reach a running sidecar, behind its web config if it has one.
#[derive(Debug, Args, Default, Clone)]
pub struct Remote {
    /// The sidecar's base URL [default: http://127.0.0.1:9721].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// With an https:// --url: PEM CA certificates to trust instead of the Web PKI roots.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// With an https:// --url: a client certificate (PEM), for a sidecar that requires one.
    #[arg(long, value_name = "FILE", requires = "key_file")]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "cert_file")]
    pub key_file: Option<PathBuf>,
    /// Basic-auth user; the password comes from PULSE_PASSWORD or --password-file.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// A file holding the basic-auth password (its first line).
    #[arg(long, value_name = "FILE", requires = "user")]
    pub password_file: Option<PathBuf>,
}

impl Remote {
    /// Whether any of these was given (with `status`, they mean "ask a sidecar").
    pub fn given(&self) -> bool {
        self.url.is_some()
            || self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.user.is_some()
    }
}

#[derive(Debug, Subcommand)]
pub enum SilenceCommand {
    /// Mute notifications of an alert, a partition or both, for a while.
    Add {
        /// How long, e.g. 2h (1m to 30d).
        #[arg(long = "for", value_name = "DURATION")]
        for_: String,
        /// Only this alert (e.g. Stalled) [default: every alert].
        #[arg(long, value_name = "NAME")]
        alert: Option<String>,
        /// Only this partition [default: every partition].
        #[arg(long, value_name = "NAME")]
        partition: Option<String>,
        /// Why: shown with the silence.
        #[arg(long, value_name = "TEXT")]
        comment: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// The silences, active and recently ended.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// End a silence now; an alert it held that still fires is notified then.
    Expire {
        /// The silence's id, as `silence add` or `silence list` prints it.
        id: String,
        #[command(flatten)]
        remote: Remote,
    },
}

impl SilenceCommand {
    pub fn remote(&self) -> &Remote {
        match self {
            SilenceCommand::Add { remote, .. }
            | SilenceCommand::List { remote }
            | SilenceCommand::Expire { remote, .. } => remote,
        }
    }
}

#[derive(Debug, Args)]
pub struct SilenceArgs {
    #[command(subcommand)]
    pub command: SilenceCommand,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Address to serve the demo sidecar on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9721")]
    pub listen: String,
    /// Folder for the simulated pipeline [default: ./pulse-demo].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Speed-up of the simulation (2 runs twice as fast).
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    pub speed: f64,
    /// Stop by itself after this long, e.g. 2m.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<std::time::Duration>,
}

fn parse_gpu_mode(s: &str) -> Result<GpuMode, String> {
    s.parse()
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (try 90s, 10m or 1h30m)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::Parser as LogParser;

    #[test]
    fn flags_win_over_the_file() {
        let mut raw: RawConfig =
            toml::from_str("listen = \"127.0.0.1:1\"\n[[logs]]\npath = \"file.log\"").unwrap();
        RunArgs {
            listen: vec!["127.0.0.1:2".into()],
            logs: vec!["flag.log".into()],
            log_format: Some(Format::Tqdm),
            ..RunArgs::default()
        }
        .lay_over(&mut raw);
        let c = raw.validate().unwrap();
        assert_eq!(c.listen[0].port(), 2);
        assert_eq!(c.logs.len(), 1);
        assert_eq!(c.logs[0].path, PathBuf::from("flag.log"));
        assert!(matches!(c.logs[0].parser, LogParser::Tqdm(_)));
    }
}
