use anyhow::Context;
use clap::Parser as _;
use pipeline_pulse::alert::engine::send_test;
use pipeline_pulse::cli::{Cli, Command, DemoArgs, RunArgs};
use pipeline_pulse::config::{Config, ConfigError, RawConfig};
use pipeline_pulse::{demo, sidecar};
use std::process::ExitCode;

/// Exit code for a bad configuration, as for a bad command line (clap uses 2 too).
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => match load(&args) {
            Ok(config) => run(config, args.once),
            Err(e) => return config_error(&e),
        },
        Command::CheckConfig { file } => {
            match RawConfig::from_file(&file).and_then(|r| r.validate()) {
                Ok(config) => {
                    print!("{}", config.to_toml());
                    Ok(())
                }
                Err(e) => return config_error(&e),
            }
        }
        Command::Demo(args) => run_demo(args),
        Command::TestEmail(args) => match load(&args) {
            Ok(config) => test_email(&config),
            Err(e) => return config_error(&e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pipeline-pulse: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn config_error(e: &ConfigError) -> ExitCode {
    eprintln!("pipeline-pulse: {e}");
    ExitCode::from(EXIT_CONFIG)
}

fn load(args: &RunArgs) -> Result<Config, ConfigError> {
    let mut raw = match &args.config {
        Some(path) => RawConfig::from_file(path)?,
        None => RawConfig::default(),
    };
    raw.merge_args(args);
    raw.validate()
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

fn test_email(config: &Config) -> anyhow::Result<()> {
    let Some(delivery) = &config.alerts.delivery else {
        anyhow::bail!(
            "no email transport is configured: set smtp and email_to (or --smtp and --email-to)"
        );
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match runtime.block_on(send_test(delivery, &config.alerts.context)) {
        Ok(()) => {
            println!("sent a test email to {}", delivery.to.join(", "));
            Ok(())
        }
        Err(e) => anyhow::bail!("the test email was not sent: {e}"),
    }
}

fn run_demo(args: DemoArgs) -> anyhow::Result<()> {
    let listen = args.listen.parse().with_context(|| {
        format!(
            "--listen {:?} is not an address like 127.0.0.1:9721",
            args.listen
        )
    })?;
    anyhow::ensure!(
        args.speed > 0.0 && args.speed.is_finite(),
        "--speed must be a positive number"
    );
    let dir = args.dir.unwrap_or_else(|| "pulse-demo".into());
    let layout = demo::Layout::new(&dir);
    let config = layout.config(listen, args.speed);
    let banner = {
        let log = layout.log.display().to_string();
        let mail = layout.mail().display().to_string();
        let outputs = dir
            .join("prepared/*/raw_responses.jsonl")
            .display()
            .to_string();
        move |addr: std::net::SocketAddr| {
            println!(
                "pipeline-pulse demo: a simulated pipeline is writing to {}",
                dir.display()
            );
            println!("  progress log:  {log}");
            println!("  outputs:       {outputs}");
            println!("  metrics:       http://{addr}/metrics");
            println!("  landing page:  http://{addr}/");
            println!("  alert emails:  {mail}/*.eml (written as files, not sent)");
            println!("GPUs are simulated (eight, named \"simulated\").");
            println!("It stalls for a while in B2_opencodeinstruct and restarts B3_longform once. Ctrl-C stops it.");
        }
    };
    let (stop, writer) =
        demo::start(layout, args.speed).context("cannot start the simulated pipeline")?;
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
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = writer.join();
    result
}
