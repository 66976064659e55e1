//! The commands, as `main.rs` hands them over: each parses nothing more, loads what it needs,
//! runs, and says how it ended as an exit code (`EXIT_CONFIG`, 2, for a configuration that
//! does not hold, naming the key). The top of the house: it may use every module below.

use crate::app::cli::StatusArgs;
use crate::app::cli::{Cli, Command, DemoArgs, LogOutput, ReportArgs, RunArgs, StacksArgs};
use crate::app::config::{key, Config, ConfigError, RawConfig};
use crate::app::{demo, sidecar};
use crate::collectors::Collector;
use crate::lock::Locked;
use crate::sinks::alert::engine::test_notify;
use crate::sinks::report::Report;
use crate::sinks::status::{self, Status};
use crate::sources::discovery as discover;
use anyhow::Context;
use clap::Parser as _;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

/// Exit code for a bad configuration, as for a bad command line (clap uses 2 too).
const EXIT_CONFIG: u8 = 2;

/// Runs the command line's command; its exit code.
pub fn main() -> ExitCode {
    if std::env::var_os(demo::server::ENV).is_some() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        return match demo::server::main(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("the simulated server failed: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let cli = Cli::parse();
    // A one-shot status view is for reading, not for the sidecar's progress messages.
    let default_level = match cli.command {
        Command::Status(_) => "warn",
        _ => "info",
    };
    init_logging(cli.log_output, default_level);
    exit_on_panic();
    let result = match cli.command {
        Command::Run(args) => match load(&args) {
            Ok(config) => run(config, args.once),
            Err(e) => return config_error(&e),
        },
        Command::CheckConfig { file } => {
            match RawConfig::from_file(&file).and_then(|r| r.validate()) {
                Ok(config) => {
                    print!("{}", config.to_toml());
                    print_detected_formats(&config);
                    Ok(())
                }
                Err(e) => return config_error(&e),
            }
        }
        Command::CheckWebConfig { file } => match crate::sinks::web_config::load(&file) {
            Ok(active) => {
                print!("{}", active.describe());
                Ok(())
            }
            Err(e) => return config_error(&ConfigError::invalid("web_config_file", e.to_string())),
        },
        Command::HashPassword { cost } => hash_password(cost),
        Command::Report(args) => return report(*args),
        Command::Stacks(args) => return stacks(&args),
        Command::Discover { dir } => {
            if !dir.is_dir() {
                return config_error(&ConfigError::invalid(
                    "run_dir",
                    format!("{} is not a folder", dir.display()),
                ));
            }
            print!(
                "{}",
                crate::app::config::discovery::to_toml(&discover::scan_once(
                    &crate::paths::normalize(&dir)
                ))
            );
            Ok(())
        }
        Command::GpuCheck { nvml_library } => {
            match crate::sources::gpu::check(nvml_library.as_deref()) {
                Ok(table) => {
                    print!("{table}");
                    Ok(())
                }
                Err(e) => Err(anyhow::anyhow!(e)),
            }
        }
        Command::Demo(args) => run_demo(args),
        Command::DemoPipeline {
            dir,
            speed,
            server_port,
            heal,
        } => demo::pipeline_main(&dir, speed, server_port, heal)
            .context("the simulated pipeline failed"),
        Command::DemoKillServer => demo::kill_server(),
        Command::Status(args) => return status(&args),
        Command::Silence(args) => crate::app::remote::silence::run(&args),
        Command::TestNotify(args) => match load(&args) {
            Ok(config) => test_notify(&config.alerts),
            Err(e) => return config_error(&e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say_error(format_args!("{e:#}"));
            ExitCode::FAILURE
        }
    }
}

/// Human lines, coloured only on a terminal (colour codes in a file, journald or `kubectl logs`
/// are noise), or one JSON object per event for log collectors.
fn init_logging(output: LogOutput, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match output {
        LogOutput::Text => builder
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .init(),
        LogOutput::Json => {
            JSON_LOGS.store(true, std::sync::atomic::Ordering::Relaxed);
            builder
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .init()
        }
    }
}

/// Exit status after a panic, as Rust's own for a panicking main thread.
const EXIT_PANIC: i32 = 101;

/// A panic anywhere (a connection task, a source thread) ends the process. Unwinding would
/// end only that thread or task, and a sidecar with a dead tailer or a server that resets
/// every connection looks alive to systemd and Kubernetes while it serves nothing. Exiting
/// lets them restart it, and the state directory resumes where the last snapshot stood.
fn exit_on_panic() {
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map_or_else(|| "an unknown place".to_owned(), |l| l.to_string());
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".to_owned());
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("unnamed");
        tracing::error!(
            location = %location,
            thread,
            "panicked at {location}: {payload}; exiting so that the supervisor restarts the sidecar"
        );
        std::process::exit(EXIT_PANIC);
    }));
}

/// Whether the sidecar's messages are JSON: then its last words are an event too.
static JSON_LOGS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The one message before a non-zero exit.
fn say_error(message: std::fmt::Arguments<'_>) {
    if JSON_LOGS.load(std::sync::atomic::Ordering::Relaxed) {
        tracing::error!("{message}");
    } else {
        eprintln!("pipeline-pulse: {message}");
    }
}

fn config_error(e: &ConfigError) -> ExitCode {
    say_error(format_args!("{e}"));
    ExitCode::from(EXIT_CONFIG)
}

fn load(args: &RunArgs) -> Result<Config, ConfigError> {
    crate::app::config::discovery::configure(args.raw()?)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    // Two workers: the sidecar serves a scrape every few seconds, not a crowd.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn run(config: Config, once: bool) -> anyhow::Result<()> {
    if once {
        print!("{}", sidecar::once(&config)?);
        return Ok(());
    }
    runtime()?.block_on(sidecar::serve(config, |_| {}, sidecar::shutdown_signal()))
}

/// Exit status of `status` when it cannot tell (unreachable sidecar, unreadable files).
const EXIT_STATUS_ERROR: u8 = 2;

fn status(args: &StatusArgs) -> ExitCode {
    let files = &args.files;
    let from_files = [&key::logs, &key::outputs, &key::run_dir]
        .iter()
        .any(|k| files.keys.has(k))
        || files.config.is_some();
    if from_files && args.remote.given() {
        eprintln!("pipeline-pulse status: --url and its TLS and auth options ask a running sidecar; --log, --outputs, --config and --run-dir read the files: give one or the other");
        return ExitCode::from(EXIT_STATUS_ERROR);
    }
    let color =
        !args.json && std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    loop {
        let result = if from_files {
            match load(files) {
                Ok(config) => status_from_files(&config),
                Err(e) => return config_error(&e),
            }
        } else {
            crate::app::remote::status::fetch(&args.remote)
        };
        let code = match &result {
            Ok(st) => {
                let out = if args.json {
                    serde_json::to_string_pretty(st).expect("a Status always serializes") + "\n"
                } else {
                    status::terminal::render(st, color)
                };
                if args.watch {
                    // Home and clear, then the new view: it refreshes in place.
                    print!("\x1b[H\x1b[2J");
                }
                print!("{out}");
                let _ = std::io::stdout().flush();
                st.exit_code()
            }
            Err(e) => {
                eprintln!("pipeline-pulse status: {e:#}");
                EXIT_STATUS_ERROR
            }
        };
        if !args.watch {
            return ExitCode::from(code);
        }
        std::thread::sleep(args.interval);
    }
}

fn report(mut args: ReportArgs) -> ExitCode {
    if let Some(dir) = &args.dir {
        args.files
            .keys
            .set(&key::run_dir, &[&dir.display().to_string()]);
    }
    let config = match load(&args.files) {
        Ok(config) => config,
        Err(e) => return config_error(&e),
    };
    let card = sidecar::read_once(&config).map(|run| {
        let run = run.locked();
        Report::of(&run, &config.alerts.rules)
    });
    match card {
        Ok(card) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&card).expect("a Report always serializes")
                );
            } else {
                print!("{}", card.render());
            }
            ExitCode::from(u8::from(!card.problems.is_empty()))
        }
        Err(e) => {
            eprintln!("pipeline-pulse report: {e:#}");
            ExitCode::from(EXIT_STATUS_ERROR)
        }
    }
}

/// The stacks of a run folder's processes, and of any pid given, taken now.
fn stacks(args: &StacksArgs) -> ExitCode {
    use crate::sources::stacks::{capture, targets};
    let mut found = Vec::new();
    if let Some(dir) = &args.dir {
        if !dir.is_dir() {
            return config_error(&ConfigError::invalid(
                "run_dir",
                format!("{} is not a folder", dir.display()),
            ));
        }
        let discovered = discover::scan_once(&crate::paths::normalize(dir));
        found = targets::found(&discovered);
        if found.is_empty() {
            eprintln!(
                "pipeline-pulse stacks: no driver or inference server process found for {}",
                dir.display()
            );
        }
    }
    found.extend(args.pids.iter().map(|&pid| targets::Target {
        role: "process".into(),
        pid,
    }));
    if found.is_empty() {
        eprintln!("pipeline-pulse stacks: nothing to look at: give a run folder or --pid");
        return ExitCode::from(EXIT_STATUS_ERROR);
    }
    let tool = capture::Tool::new(&args.py_spy, args.timeout, 1 << 20);
    let captured = capture::all(&tool, &found, "on demand", crate::clock::now());
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&captured).expect("stacks always serialize")
        );
    } else if args.full {
        print!("{}", captured.dump(usize::MAX));
    } else {
        for p in &captured.processes {
            println!("{}", p.summary);
        }
    }
    ExitCode::SUCCESS
}

fn hash_password(cost: u32) -> anyhow::Result<()> {
    let mut password = String::new();
    std::io::stdin()
        .read_line(&mut password)
        .context("cannot read the password from standard input")?;
    let password = password.trim_end_matches(['\n', '\r']);
    anyhow::ensure!(
        !password.is_empty(),
        "the password on standard input is empty"
    );
    println!("{}", bcrypt::hash(password, cost)?);
    Ok(())
}

fn status_from_files(config: &Config) -> anyhow::Result<Status> {
    let run = sidecar::read_once(config)?;
    let run = run.locked();
    if let Some((name, _)) = run
        .collectors()
        .iter()
        .find(|(collector, c)| !c.up && [Collector::Log, Collector::Outputs].contains(collector))
    {
        anyhow::bail!("cannot read every {name} input; see the messages above");
    }
    let now = crate::clock::now();
    Ok(Status::from_files(
        &run,
        &config.alerts.rules,
        &config.alerts.context.host,
        now,
    ))
}

fn run_demo(args: DemoArgs) -> anyhow::Result<()> {
    let listen = args.listen.parse().with_context(|| {
        format!(
            "--listen {:?} is not an address like 127.0.0.1:9721",
            args.listen
        )
    })?;
    anyhow::ensure!(
        (0.01..=1000.0).contains(&args.speed),
        "--speed must be 0.01 to 1000 (2 runs twice as fast)"
    );
    let dir = args.dir.unwrap_or_else(|| "pulse-demo".into());
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the demo folder {}", dir.display()))?;
    let dir = std::fs::canonicalize(&dir)?;
    let layout = demo::Layout::new(&dir);
    let pipeline = demo::start(&layout, args.speed, args.heal)
        .context("cannot start the simulated pipeline")?;
    let config = match layout.config(listen, args.speed, args.heal) {
        Ok(config) => config,
        Err(e) => anyhow::bail!("the demo's configuration: {e}"),
    };
    let banner = {
        let log = layout.log.display().to_string();
        let server_log = layout.server_log.display().to_string();
        let mail = layout.mail().display().to_string();
        move |addr: std::net::SocketAddr| {
            println!(
                "pipeline-pulse demo: a simulated pipeline is writing to {}",
                dir.display()
            );
            println!(
                "  the sidecar runs as: pipeline-pulse run --run-dir {}",
                dir.display()
            );
            println!("  progress log:  {log}");
            println!("  server log:    {server_log} (a simulated SGLang server)");
            println!("  metrics:       http://{addr}/metrics");
            println!("  status page:   http://{addr}/");
            println!("  alert emails:  {mail}/*.eml (written as files, not sent)");
            println!("GPUs are simulated (eight, named \"simulated\").");
            println!(
                "It stalls for a while in B2_opencodeinstruct (the server wedges) and restarts B3_longform once;"
            );
            println!(
                "{} holds an earlier run's records, shown apart. Ctrl-C stops it.",
                demo::PREVIOUS_PARTITION
            );
        }
    };
    let duration = args.duration;
    let result = runtime()?.block_on(sidecar::serve(config, banner, async move {
        match duration {
            Some(d) => tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = sidecar::shutdown_signal() => {}
            },
            None => sidecar::shutdown_signal().await,
        }
    }));
    drop(pipeline);
    result
}

/// For each log read with `format = "auto"`, what its start says now, as TOML comments.
fn print_detected_formats(config: &Config) {
    for (i, log) in config.log.logs.iter().enumerate() {
        if !matches!(log.parser, crate::parse::Parser::Auto(_)) {
            continue;
        }
        let path = log.path.display();
        match crate::sources::log::detect_now(&log.path) {
            Ok((format, line)) => {
                println!("# logs[{i}] {path}: auto reads it as {format} (from the line {line:?})")
            }
            Err(why) => println!("# logs[{i}] {path}: auto has not decided: {why}"),
        }
    }
}
