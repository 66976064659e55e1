//! Wires the sources to the model to the outputs for `run` (and for `demo`, which runs the
//! same sidecar on a simulated pipeline).

use crate::config::Config;
use crate::http::{self, HttpState};
use crate::log_source::LogSource;
use crate::metrics::{self, Exposition};
use crate::model::Run;
use crate::outputs::OutputSource;
use crate::source::{self, Source};
use crate::state::StateDir;
use anyhow::Context;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{mpsc, Arc, Mutex};

/// The model and the sources that feed it. The log source restores the model from its
/// snapshot first; the output source then adds its own part.
fn model_and_sources(
    config: &Config,
) -> anyhow::Result<(Arc<Mutex<Run>>, LogSource, OutputSource)> {
    let state = match &config.state_dir {
        Some(dir) => Some(
            StateDir::open(dir)
                .with_context(|| format!("cannot create the state directory {}", dir.display()))?,
        ),
        None => None,
    };
    let run = Arc::new(Mutex::new(Run::new(&LogSource::paths(&config.logs))));
    let logs = LogSource::new(
        &config.logs,
        config.max_line_bytes,
        run.clone(),
        state.clone(),
    );
    let outputs = OutputSource::new(
        &config.outputs,
        &config.inputs,
        config.max_record_bytes,
        run.clone(),
        state,
    );
    Ok((run, logs, outputs))
}

/// `run --once`: reads every input to its end and returns the text exposition. With a state
/// directory it continues from, and saves, the snapshots there.
pub fn once(config: &Config) -> anyhow::Result<String> {
    let (run, mut logs, mut outputs) = model_and_sources(config)?;
    logs.poll();
    outputs.poll();
    logs.save_snapshot();
    outputs.save_snapshot();
    Ok(metrics::encode(&metrics::registry(run), Exposition::Text))
}

/// A source running on its own thread; dropping `stop` ends it.
struct Running {
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

fn start(
    name: &str,
    source: impl Source,
    config: &Config,
    catching_up: Arc<AtomicUsize>,
) -> anyhow::Result<Running> {
    let (stop, stopped) = mpsc::channel();
    let (interval, snapshots) = (config.poll_interval, config.snapshot_interval);
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || source::run_until(source, interval, snapshots, stopped, &catching_up))
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
    // Bind first: a taken port should fail start-up before anything else happens.
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (is another sidecar running?)",
                config.listen
            )
        })?;
    let addr = listener.local_addr()?;
    let (run, logs, outputs) = model_and_sources(&config)?;
    let catching_up = Arc::new(AtomicUsize::new(2));
    let state = Arc::new(HttpState {
        registry: metrics::registry(run),
        catching_up: catching_up.clone(),
        header_read_timeout: config.header_read_timeout,
    });
    let running = [
        start("log-source", logs, &config, catching_up.clone())?,
        start("output-source", outputs, &config, catching_up)?,
    ];
    tracing::info!(
        "listening on http://{addr} (metrics at http://{addr}/metrics), following {} log(s) and {} output glob(s)",
        config.logs.len(),
        config.outputs.len()
    );
    on_listening(addr);
    http::serve(listener, state, shutdown).await;
    tracing::info!("shutting down");
    for source in running {
        drop(source.stop);
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
