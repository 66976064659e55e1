//! Wires the sources to the model to the outputs for `run` (and for `demo`, which runs the
//! same sidecar on a simulated pipeline).

mod discovery;

use crate::app::config::{Config, GpuMode};
use crate::collectors::Collector;
use crate::lock::Locked;
use crate::model::Run;
use crate::sinks::alert::engine::Engine;
use crate::sinks::http::{self, HttpState};
use crate::sinks::metrics::{self, Exposition};
use crate::sources::files::OutputSource;
use crate::sources::gpu::{start_xid_watcher, GpuReader, GpuSource, NvmlReader, Simulated};
use crate::sources::log::LogSource;
use crate::sources::probe::Probes;
use crate::sources::run_id::RunIdSource;
use crate::sources::{self, FirstRead, Source, Unread};
use crate::state::StateDir;
use anyhow::Context;
use discovery::{Additions, Discovery};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The model and the sources that feed it. The log source restores the model from its
/// snapshot first; the output source then adds its own part.
type Sources = (Arc<Mutex<Run>>, LogSource, OutputSource, Option<StateDir>);

fn model_and_sources(config: &Config) -> anyhow::Result<Sources> {
    let state = match &config.state_dir {
        Some(dir) => Some(
            StateDir::open(dir)
                .with_context(|| format!("cannot create the state directory {}", dir.display()))?,
        ),
        None => None,
    };
    let run = Arc::new(Mutex::new(Run::new(&LogSource::paths(&config.logs))));
    {
        let mut run = run.locked();
        run.plan = config.plan.clone();
        run.identity = config.run.as_ref().map(|r| r.label.clone());
        run.collectors_on = config.collectors;
    }
    run.locked().discovered = config.discovered.as_ref().map(|(_, found)| found.clone());
    let logs = LogSource::new(
        &config.logs,
        config.max_line_bytes,
        run.clone(),
        state.clone(),
    );
    let outputs = OutputSource::new(
        &config.outputs,
        &config.inputs,
        config.output_limits,
        run.clone(),
        state.clone(),
    );
    Ok((run, logs, outputs, state))
}

/// The GPU reader the configuration asks for; `None` when GPUs are off or, in `auto`, when
/// NVML is not on this machine.
fn gpu_reader(
    config: &Config,
    run: &Arc<Mutex<Run>>,
) -> anyhow::Result<Option<Box<dyn GpuReader>>> {
    match config.gpu {
        GpuMode::Off => Ok(None),
        GpuMode::Simulated => {
            tracing::info!("GPUs are simulated: eight GPUs named \"simulated\"");
            Ok(Some(Box::new(Simulated::new(8))))
        }
        GpuMode::Auto | GpuMode::On => match NvmlReader::init(config.nvml_library.as_deref()) {
            Ok(reader) => {
                if let Err(e) = start_xid_watcher(config.nvml_library.clone(), run.clone()) {
                    tracing::warn!("GPU XID errors are not counted: {e}");
                }
                Ok(Some(Box::new(reader)))
            }
            Err(e) if config.gpu == GpuMode::On => anyhow::bail!("gpu = \"on\" but {e}"),
            Err(e) => {
                tracing::warn!("{e}; GPU metrics are off (use gpu = \"off\" to say so)");
                let mut run = run.locked();
                run.set_collector(crate::collectors::Collector::Gpu, false, 0.0);
                Ok(None)
            }
        },
    }
}

/// `run --once`: reads every input to its end and returns the text exposition. With a state
/// directory it continues from, and saves, the snapshots there.
pub fn once(config: &Config) -> anyhow::Result<String> {
    let run = read_once(config)?;
    let registry = metrics::registry_with_web(run, None, config.collectors.on(Collector::Exporter));
    Ok(metrics::encode(&registry, Exposition::Text))
}

/// Reads every input to its end once (logs, outputs, one GPU sample, one probe round) and
/// returns the model: `--once` and `status --log` without a sidecar.
pub fn read_once(config: &Config) -> anyhow::Result<Arc<Mutex<Run>>> {
    let (run, mut logs, mut outputs, _) = model_and_sources(config)?;
    logs.poll_to_end();
    outputs.poll();
    if let Some(mut ids) = run_id_source(config, &run) {
        ids.poll();
    }
    logs.save_snapshot();
    outputs.save_snapshot();
    if let Some(reader) = gpu_reader(config, &run)? {
        GpuSource::new(
            reader,
            run.clone(),
            config.gpu_processes,
            config.gpu_timeout,
        )
        .poll();
    }
    if !config.probes.is_empty() {
        let mut probes = Probes::new(config.probes.clone(), run.clone());
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(probes.round());
    }
    Ok(run)
}

/// How often the run's id is looked at: a new run in the log's place is told within this.
const RUN_ID_INTERVAL: Duration = Duration::from_secs(5);

/// The source of the run's id, on a node with a run.
fn run_id_source(config: &Config, run: &Arc<Mutex<Run>>) -> Option<RunIdSource> {
    let identity = config.run.clone()?;
    let follows_log = config.logs.iter().any(|l| !l.server);
    Some(RunIdSource::new(identity, run.clone(), follows_log))
}

/// How long a stopping sidecar waits for its sources to save their snapshots and end.
const SOURCE_STOP_WAIT: Duration = Duration::from_secs(3);

/// A source running on its own thread; dropping `stop` ends it.
struct Running {
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

fn start(
    name: &str,
    source: impl Source,
    interval: Duration,
    config: &Config,
    first_read: FirstRead,
) -> anyhow::Result<Running> {
    let (stop, stopped) = mpsc::channel();
    let snapshots = config.snapshot_interval;
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || sources::run_until(source, interval, snapshots, stopped, first_read))
        .with_context(|| format!("cannot start the {name} thread"))?;
    Ok(Running { stop, thread })
}

/// Follows the inputs and serves HTTP until `shutdown` completes. `on_listening` learns the
/// bound address (which differs from the configured one for port 0).
pub async fn serve(
    config: Config,
    on_listening: impl FnOnce(SocketAddr),
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    // Thousands of output files need no more descriptors than the default soft limit gives
    // (they are closed when quiet), but the hard limit is there to be used, as Go does.
    crate::fd_limit::raise();
    // Bind first: a taken port should fail start-up before anything else happens.
    let listeners = listeners(&config).await?;
    let addresses: Vec<SocketAddr> = listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<Result<_, _>>()?;
    let (run, logs, outputs, state_dir) = model_and_sources(&config)?;
    let discovery = Discovery::of(&config);
    let wired = wire_discovery(&config, discovery.is_some(), logs, outputs);
    let gpus = gpu_reader(&config, &run)?;
    // The inputs not read once yet. `/-/ready` waits for all of them. The alert engine waits
    // for the backlog (logs and outputs) and the probes, so that it never judges half the
    // evidence; not for the GPUs, whose first read may hang with a GPU fallen off the bus.
    let (ready, judging) = (Unread::default(), Unread::default());
    let both = || FirstRead::of(&[&ready, &judging]);
    let silences = Arc::new(crate::sinks::alert::silence::Store::open(
        state_dir.as_ref(),
    ));
    if config.collectors.on(Collector::History) {
        run.locked().history =
            crate::sinks::recorder::restore(state_dir.as_ref(), config.history.0, config.history.1);
    }
    let state = http_state(&config, &run, silences.clone(), &ready);
    let running = start_sources(
        &config,
        &run,
        wired.logs,
        wired.outputs,
        gpus,
        (&ready, &judging),
    )?;
    // The tasks, stopped together when the server stops.
    let mut tasks = tokio::task::JoinSet::new();
    if config.collectors.on(Collector::History) {
        tasks.spawn(crate::sinks::recorder::run_every(
            run.clone(),
            state_dir.clone(),
            judging.counter(),
        ));
    }
    if !config.probes.is_empty() || discovery.is_some() {
        let mut probes = Probes::new(config.probes.clone(), run.clone());
        if let Some(updates) = wired.probe_updates {
            probes = probes.with_updates(updates);
        }
        tasks.spawn(probes.run_every(config.probe_interval, both()));
    }
    tasks.spawn(
        Engine::new(config.alerts.clone(), run.clone(), state_dir.as_ref())
            .with_silences(silences)
            .run_every(judging.counter()),
    );
    if let Some(h) = config.heartbeat.clone() {
        tasks.spawn(crate::sinks::alert::heartbeat::run_every(h, run.clone()));
    }
    if let (Some(discovery), Some(additions)) = (discovery, wired.additions) {
        tasks.spawn(discovery.run_every(run.clone(), additions));
    }
    say_listening(&config, &addresses);
    on_listening(addresses[0]);
    http::serve(listeners, state, shutdown).await;
    tracing::info!("shutting down");
    tasks.abort_all();
    if config.collectors.on(Collector::History) {
        crate::sinks::recorder::save(&run, state_dir.as_ref());
    }
    stop_sources(running)
}

/// What the HTTP server serves from.
fn http_state(
    config: &Config,
    run: &Arc<Mutex<Run>>,
    silences: Arc<crate::sinks::alert::silence::Store>,
    ready: &Unread,
) -> Arc<HttpState> {
    let web = config.web.as_ref().map(http::WebServing::of);
    Arc::new(HttpState {
        silences,
        registry: metrics::registry_with_web(
            run.clone(),
            web.as_ref().map(|w| w.watched.counters().clone()),
            config.collectors.on(Collector::Exporter),
        ),
        run: run.clone(),
        host: config.alerts.context.host.clone(),
        catching_up: ready.counter(),
        header_read_timeout: config.header_read_timeout,
        max_connections: config.max_connections,
        web,
        rules: config.alerts.rules.clone(),
        telemetry_path: config.telemetry_path.clone(),
    })
}

/// Starts a thread for each source of a collector switched on; `waiting` are the counts of
/// first reads `/-/ready` and the alert engine wait on.
fn start_sources(
    config: &Config,
    run: &Arc<Mutex<Run>>,
    logs: LogSource,
    outputs: OutputSource,
    gpus: Option<Box<dyn GpuReader>>,
    (ready, judging): (&Unread, &Unread),
) -> anyhow::Result<Vec<Running>> {
    let both = || FirstRead::of(&[ready, judging]);
    let interval = config.poll_interval;
    // A collector switched off has no thread (its inputs are already out of the config).
    let on = |c| config.collectors.on(c);
    let mut running = Vec::new();
    if on(Collector::Log) || on(Collector::Server) {
        running.push(start("log-source", logs, interval, config, both())?);
    }
    if on(Collector::Outputs) {
        running.push(start("output-source", outputs, interval, config, both())?);
    }
    // The run's id holds nothing up: its log may be on a mount that hangs.
    if let Some(ids) = run_id_source(config, run) {
        let first = FirstRead::of(&[]);
        running.push(start("run-id", ids, RUN_ID_INTERVAL, config, first)?);
    }
    if let Some(reader) = gpus {
        let source = GpuSource::new(
            reader,
            run.clone(),
            config.gpu_processes,
            config.gpu_timeout,
        );
        let first = FirstRead::of(&[ready]);
        running.push(start(
            "gpu-source",
            source,
            config.gpu_interval,
            config,
            first,
        )?);
    }
    Ok(running)
}

/// The sockets to serve on: those systemd passed (`web.systemd-socket`), else `listen`'s.
async fn listeners(config: &Config) -> anyhow::Result<Vec<tokio::net::TcpListener>> {
    if config.systemd_socket {
        return crate::sinks::http::systemd_listeners();
    }
    let mut listeners = Vec::new();
    for address in &config.listen {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("cannot listen on {address} (is another sidecar running?)"))?;
        listeners.push(listener);
    }
    Ok(listeners)
}

fn say_listening(config: &Config, addresses: &[SocketAddr]) {
    let tls = config.web.as_ref().is_some_and(|w| w.loaded.tls.is_some());
    let scheme = if tls { "https" } else { "http" };
    for addr in addresses {
        tracing::info!(
            "listening on {scheme}://{addr} (metrics at {scheme}://{addr}{}), following {} log(s) and {} output glob(s)",
            config.telemetry_path,
            config.logs.len(),
            config.outputs.len()
        );
    }
}

/// The sources as they run: with a run folder, discovery hands what it finds later to them
/// and to the probes.
struct Wired {
    logs: LogSource,
    outputs: OutputSource,
    additions: Option<Additions>,
    probe_updates: Option<tokio::sync::watch::Receiver<crate::sources::probe::ProbeConfig>>,
}

fn wire_discovery(
    config: &Config,
    discovering: bool,
    logs: LogSource,
    outputs: OutputSource,
) -> Wired {
    if !discovering {
        return Wired {
            logs,
            outputs,
            additions: None,
            probe_updates: None,
        };
    }
    let (log_tx, log_rx) = mpsc::channel();
    let (out_tx, out_rx) = mpsc::channel();
    let (in_tx, in_rx) = mpsc::channel();
    let (probe_tx, probe_rx) = tokio::sync::watch::channel(config.probes.clone());
    Wired {
        logs: logs.with_additions(log_rx),
        outputs: outputs.with_additions(out_rx, in_rx),
        additions: Some(Additions {
            logs: log_tx,
            outputs: out_tx,
            inputs: in_tx,
            probes: probe_tx,
        }),
        probe_updates: Some(probe_rx),
    }
}

/// Stops the source threads. A source stuck in a file-system call that does not return (a
/// hung mount) must not keep the sidecar from stopping: it is waited for a few seconds, then
/// left to the exit.
fn stop_sources(running: Vec<Running>) -> anyhow::Result<()> {
    let deadline = Instant::now() + SOURCE_STOP_WAIT;
    for source in running {
        drop(source.stop);
        while !source.thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !source.thread.is_finished() {
            tracing::warn!(
                "the {} source is stuck in a file-system call; stopping without it (its last snapshot stands)",
                source.thread.thread().name().unwrap_or("a")
            );
            continue;
        }
        if source.thread.join().is_err() {
            anyhow::bail!("a source thread panicked");
        }
    }
    Ok(())
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::warn!("cannot listen for SIGTERM ({e}); only Ctrl-C stops the sidecar");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
