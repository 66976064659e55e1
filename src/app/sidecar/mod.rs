//! Wires the sources to the model to the sinks for `run` (and for `demo`, which runs the
//! same sidecar on a simulated pipeline): the sources come from the registry (`registry`), one
//! entry each, and run as their `Built` says.

mod discovery;
mod registry;
pub mod stepped;

use crate::app::config::Config;
use crate::collectors::Collector;
use crate::lock::{Locked, Published};
use crate::model::{AlertView, Run};
use crate::sinks::alert::engine::Engine;
use crate::sinks::http::{self, HttpState};
use crate::sinks::metrics::{self, Exposition};
use crate::sources::log::LogSource;
use crate::sources::{self, Awaited, Built, Context, FirstRead, Runs, Source, Unread};
use crate::state::StateDir;
use anyhow::Context as _;
use discovery::{Additions, Discovery};
use registry::Feeds;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The model as the configuration starts it: the plan, the run's name and the collectors
/// switched on are the configuration's, not any source's.
fn model(config: &Config) -> Arc<Mutex<Run>> {
    let mut run = Run::new(&LogSource::paths(&config.log.logs));
    run.configure(
        config.plan.clone(),
        config.run_id.identity.as_ref().map(|r| r.label.clone()),
        config.collectors,
        config.discovered.as_ref().map(|(_, found)| found.clone()),
    );
    Arc::new(Mutex::new(run))
}

fn state_dir(config: &Config) -> anyhow::Result<Option<StateDir>> {
    config
        .state_dir
        .as_ref()
        .map(|dir| {
            StateDir::open(dir)
                .with_context(|| format!("cannot create the state directory {}", dir.display()))
        })
        .transpose()
}

/// Every source of the registry, built in its order, those that follow discovery with their
/// feeds.
fn build_sources(config: &Config, cx: &mut Context, feeds: Feeds) -> anyhow::Result<Vec<Built>> {
    let mut built = Vec::new();
    for section in registry::sources(config, feeds) {
        built.extend(section.build(cx)?);
    }
    Ok(built)
}

/// `run --once`: reads every input to its end and returns the text exposition. With a state
/// directory it continues from, and saves, the snapshots there.
pub fn once(config: &Config) -> anyhow::Result<String> {
    let run = read_once(config)?;
    let registry = metrics::registry_with_web(
        run,
        Published::default(),
        None,
        config.collectors.on(Collector::Exporter),
    );
    Ok(metrics::encode(&registry, Exposition::Text))
}

/// Reads every input to its end once (each source of the registry polled once, in its order,
/// its snapshot saved) and returns the model: `--once` and `status --log` without a sidecar.
pub fn read_once(config: &Config) -> anyhow::Result<Arc<Mutex<Run>>> {
    let run = model(config);
    let mut cx = Context {
        run: run.clone(),
        state: state_dir(config)?,
    };
    let mut runtime = None;
    for built in build_sources(config, &mut cx, Feeds::default())? {
        match built.runs {
            Runs::Thread(mut source) => {
                // A first poll reads the backlog to its end.
                source.poll();
                source.save_snapshot();
            }
            Runs::Task(mut task) => {
                if runtime.is_none() {
                    runtime = Some(
                        tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()?,
                    );
                }
                if let Some(rt) = &runtime {
                    rt.block_on(task.round());
                }
            }
        }
    }
    Ok(run)
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
    source: Box<dyn Source>,
    interval: Duration,
    snapshots: Duration,
    first_read: FirstRead,
) -> anyhow::Result<Running> {
    let (stop, stopped) = mpsc::channel();
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
    let run = model(&config);
    let state_dir = state_dir(&config)?;
    let discovery = Discovery::of(&config);
    let (feeds, additions) = match discovery {
        Some(_) => {
            let (feeds, additions) = found_later(&config);
            (feeds, Some(additions))
        }
        None => (Feeds::default(), None),
    };
    let mut cx = Context {
        run: run.clone(),
        state: state_dir.clone(),
    };
    let built = build_sources(&config, &mut cx, feeds)?;
    // The inputs not read once yet. `/-/ready` waits for all of them; the alert engine for
    // those each source's `Built::awaited` says, so that it never judges half the evidence.
    let (ready, judging) = (Unread::default(), Unread::default());
    let silences = Arc::new(crate::sinks::alert::silence::Store::open(
        state_dir.as_ref(),
    ));
    let engine = Engine::new(config.alerts.clone(), run.clone(), state_dir.as_ref())
        .with_silences(silences.clone());
    let sinks = registry::sinks(&config);
    let sinks_cx = crate::sinks::Context {
        run: run.clone(),
        state: state_dir.clone(),
        alerts: engine.view(),
        unread: judging.counter(),
    };
    for sink in &sinks {
        sink.prepare(&sinks_cx);
    }
    let state = http_state(&config, &run, engine.view(), silences, &ready);
    // The tasks, stopped together when the server stops.
    let mut tasks = tokio::task::JoinSet::new();
    let running = start_sources(&config, built, &mut tasks, (&ready, &judging))?;
    for task in sinks.iter().filter_map(|sink| sink.start(&sinks_cx)) {
        tasks.spawn(task);
    }
    if config.collectors.on(Collector::Slurm) {
        tasks.spawn(sources::slurm::warned_by_signal(run.clone()));
    }
    let (last_word, last) = tokio::sync::watch::channel(false);
    let engine = tokio::spawn(engine.run_every(judging.counter(), last));
    if let (Some(discovery), Some(additions)) = (discovery, additions) {
        tasks.spawn(discovery.run_every(run.clone(), additions));
    }
    say_listening(&config, &addresses);
    on_listening(addresses[0]);
    http::serve(listeners, state, shutdown).await;
    tracing::info!("shutting down");
    // A SLURM job's end (its time limit, a cancel, a requeue) sends SIGTERM: what the
    // controller says of it is told before the sidecar goes (docs/slurm.md).
    if run.locked().slurm().is_some() {
        sources::slurm::ask_once(&run, config.slurm.timeout).await;
        let _ = last_word.send(true);
        let wait = crate::sinks::alert::engine::LAST_WORD + Duration::from_secs(1);
        let _ = tokio::time::timeout(wait, engine).await;
    } else {
        engine.abort();
    }
    tasks.abort_all();
    for sink in &sinks {
        sink.stop(&sinks_cx);
    }
    stop_sources(running)
}

/// What the HTTP server serves from.
fn http_state(
    config: &Config,
    run: &Arc<Mutex<Run>>,
    alerts: Published<AlertView>,
    silences: Arc<crate::sinks::alert::silence::Store>,
    ready: &Unread,
) -> Arc<HttpState> {
    let web = config.web.as_ref().map(http::WebServing::of);
    Arc::new(HttpState {
        silences,
        registry: metrics::registry_with_web(
            run.clone(),
            alerts.clone(),
            web.as_ref().map(|w| w.watched.counters().clone()),
            config.collectors.on(Collector::Exporter),
        ),
        run: run.clone(),
        alerts,
        host: config.alerts.context.host.clone(),
        catching_up: ready.counter(),
        header_read_timeout: config.header_read_timeout,
        max_connections: config.max_connections,
        web,
        rules: config.alerts.rules.clone(),
        telemetry_path: config.telemetry_path.clone(),
    })
}

/// Starts each source whose collectors are on (a source without collectors, the run's id,
/// always runs): a thread for each that reads, a task for each that asks. `waiting` are the
/// counts of first reads `/-/ready` and the alert engine wait on.
fn start_sources(
    config: &Config,
    built: Vec<Built>,
    tasks: &mut tokio::task::JoinSet<()>,
    (ready, judging): (&Unread, &Unread),
) -> anyhow::Result<Vec<Running>> {
    let mut running = Vec::new();
    for source in built {
        let off = |c: &Collector| !config.collectors.on(*c);
        if !source.collectors.is_empty() && source.collectors.iter().all(off) {
            // A collector switched off has no thread (its inputs are already out of the config).
            continue;
        }
        let first = match source.awaited {
            Awaited::ByAll => FirstRead::of(&[ready, judging]),
            Awaited::ByReadiness => FirstRead::of(&[ready]),
            Awaited::ByNothing => FirstRead::of(&[]),
        };
        match source.runs {
            Runs::Thread(s) => running.push(start(
                source.name,
                s,
                source.interval,
                config.snapshot_interval,
                first,
            )?),
            Runs::Task(task) => {
                tasks.spawn(task.run_every(source.interval, first));
            }
        }
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
            config.log.logs.len(),
            config.files.outputs.len()
        );
    }
}

/// What discovery hands the sources later: the receiving ends for the sources, the sending
/// ends for discovery.
fn found_later(config: &Config) -> (Feeds, Additions) {
    let (log_tx, log_rx) = mpsc::channel();
    let (out_tx, out_rx) = mpsc::channel();
    let (in_tx, in_rx) = mpsc::channel();
    let (probe_tx, probe_rx) = tokio::sync::watch::channel(config.probe.probes.clone());
    let found = Feeds {
        logs: Some(log_rx),
        files: Some((out_rx, in_rx)),
        probes: Some(probe_rx),
    };
    let additions = Additions {
        logs: log_tx,
        outputs: out_tx,
        inputs: in_tx,
        probes: probe_tx,
    };
    (found, additions)
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

#[cfg(test)]
mod tests {
    use super::{found_later, registry::Feeds};
    use crate::app::config::{LogConfig, OutputConfig, RawConfig};
    use crate::parse::{Format, Parser, Tqdm};
    use crate::sources::probe::ProbeConfig;
    use std::path::PathBuf;
    use std::time::Duration;

    /// What discovery adds for one source reaches that source's feed, and each feed is a
    /// field of its own that the registry takes by value: a source cannot be handed another's
    /// feed, nor one feed twice (the compiler says so, where a lookup by type said `None`).
    #[test]
    fn each_source_gets_its_own_feed_once() {
        let config = RawConfig::default().validate().unwrap();
        let (feeds, additions) = found_later(&config);
        let log = LogConfig {
            path: "a.log".into(),
            parser: Parser::Tqdm(Tqdm::default()),
            server: false,
            envelope: Default::default(),
            format: Format::Tqdm,
            regex: None,
            unit_divisor: None,
        };
        additions.logs.send(log).unwrap();
        additions
            .outputs
            .send(OutputConfig::new("out/*.jsonl".into()))
            .unwrap();
        additions.inputs.send("in.jsonl".into()).unwrap();
        let probes = ProbeConfig {
            timeout: Duration::from_secs(9),
            ..ProbeConfig::default()
        };
        additions.probes.send(probes).unwrap();
        let Feeds {
            logs,
            files,
            probes,
        } = feeds;
        let logs = logs.unwrap();
        assert_eq!(logs.try_recv().unwrap().path, PathBuf::from("a.log"));
        assert!(logs.try_recv().is_err());
        let (outputs, inputs) = files.unwrap();
        assert_eq!(outputs.try_recv().unwrap().glob, "out/*.jsonl");
        assert!(outputs.try_recv().is_err());
        assert_eq!(inputs.try_recv().unwrap(), "in.jsonl");
        assert!(inputs.try_recv().is_err());
        let mut probes = probes.unwrap();
        assert!(probes.has_changed().unwrap());
        assert_eq!(probes.borrow_and_update().timeout, Duration::from_secs(9));
    }
}
