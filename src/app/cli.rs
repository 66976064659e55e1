//! The command line (`docs/configuration.md`). Every `run` flag has a config-file key of the same name
//! (dashes become underscores); flags win over the file.

use crate::app::config::keys::KeyFlags;
use crate::app::config::{ConfigError, RawConfig};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// What `--version` prints: the version, the commit and the build date, as `pulse_build_info`
/// carries them.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("PULSE_GIT_REVISION"),
    ", built ",
    env!("PULSE_BUILD_DATE"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "pipeline-pulse",
    version = LONG_VERSION,
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
        /// The pipeline supervises its server: one that ends is started again.
        #[arg(long)]
        heal: bool,
    },
    /// `demo --heal`'s action: ends the simulated server the sidecar found hung
    /// (`PULSE_SERVER_PID`), for the simulated pipeline to start it again.
    #[command(hide = true)]
    DemoKillServer,
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
    /// The dataset card of a run's output files: per partition records, distinct,
    /// duplicates, errors, empty, truncated, missing fields, token percentiles and bytes.
    /// Exit status 1 when a threshold is crossed (a training job can gate on it), 2 on error.
    Report(Box<ReportArgs>),
    /// Take the Python stacks of a run's processes now (with py-spy) and print where each
    /// waits, one line a process; the full dumps with --full, JSON with --json. Exit status
    /// 2 when there is nothing to look at.
    Stacks(Box<StacksArgs>),
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
    /// Read every input to its end, print the exposition to stdout, and exit.
    #[arg(long)]
    pub once: bool,
    /// Every configuration key that has a flag (`config::keys`).
    #[command(flatten)]
    pub keys: KeyFlags,
}

impl RunArgs {
    /// The config file with the flags laid over it.
    pub fn raw(&self) -> Result<RawConfig, ConfigError> {
        let mut raw = match &self.config {
            Some(path) => RawConfig::from_file(path)?,
            None => RawConfig::default(),
        };
        self.keys.lay_over(&mut raw)?;
        Ok(raw)
    }
}

#[derive(Debug, Args)]
pub struct StacksArgs {
    /// The run's folder (as --run-dir): its driver and its inference server's processes are
    /// found by themselves.
    pub dir: Option<PathBuf>,
    /// A process to look at as well (repeatable).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// py-spy, by its path or by a name looked up in PATH.
    #[arg(long, value_name = "PATH", default_value = "py-spy")]
    pub py_spy: String,
    /// The most one process's stacks may take.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,
    /// Print the full dumps under the summaries.
    #[arg(long)]
    pub full: bool,
    /// Print the capture as JSON, for scripts.
    #[arg(long, conflicts_with = "full")]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The run's folder (as --run-dir): its outputs are found by themselves.
    pub dir: Option<PathBuf>,
    /// Print the card as JSON, for scripts.
    #[arg(long)]
    pub json: bool,
    /// The same flags and config as `run`: --outputs, --require, the rules' thresholds.
    #[command(flatten)]
    pub files: RunArgs,
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
    /// Heal the wedged server: an action (docs/alerts.md#actions) ends it when `ServerHung`
    /// fires, the simulated pipeline starts it again, and the emails tell the story.
    #[arg(long)]
    pub heal: bool,
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (try 90s, 10m or 1h30m)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_come_from_the_key_table_and_win_over_the_file() {
        let dir = std::env::temp_dir().join(format!("pulse-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pulse.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:1\"\n[[logs]]\npath = \"file.log\"\n",
        )
        .unwrap();
        let cli = Cli::try_parse_from([
            "pipeline-pulse",
            "run",
            "--config",
            file.to_str().unwrap(),
            "--listen",
            "127.0.0.1:2",
            "--log",
            "flag.log",
            "--log-format",
            "tqdm",
            "--gpu-processes",
            "--web.config.file",
            "/nonexistent.yml",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        let raw = args.raw().unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(raw.gpu_processes, Some(true));
        assert_eq!(raw.web_config_file, Some(PathBuf::from("/nonexistent.yml")));
        let mut raw = raw;
        raw.web_config_file = None;
        let c = raw.validate().unwrap();
        assert_eq!(c.listen[0].port(), 2);
        assert_eq!(c.log.logs.len(), 1);
        assert_eq!(c.log.logs[0].path, PathBuf::from("flag.log"));
        assert!(matches!(
            c.log.logs[0].parser,
            crate::parse::Parser::Tqdm(_)
        ));
    }
}
