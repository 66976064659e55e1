//! Wires the sources to the model to the outputs for `run` (and for `demo`, which runs the
//! same sidecar on a simulated pipeline).

use crate::config::Config;
use crate::http::{self, HttpState};
use crate::log_source::{LogSource, Snapshots};
use crate::metrics::{self, Exposition};
use crate::model::Run;
use crate::state::StateDir;
use anyhow::Context;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc, Mutex};

fn model_and_source(config: &Config) -> anyhow::Result<(Arc<Mutex<Run>>, LogSource)> {
    let snapshots = match &config.state_dir {
        Some(dir) => Some(Snapshots::new(
            StateDir::open(dir)
                .with_context(|| format!("cannot create the state directory {}", dir.display()))?,
            config.snapshot_interval,
        )),
        None => None,
    };
    let run = Arc::new(Mutex::new(Run::new(&LogSource::paths(&config.logs))));
    let source = LogSource::new(&config.logs, config.max_line_bytes, run.clone(), snapshots);
    Ok((run, source))
}

/// `run --once`: reads every input to its end and returns the text exposition. With a state
/// directory it continues from, and saves, the snapshot there.
pub fn once(config: &Config) -> anyhow::Result<String> {
    let (run, mut source) = model_and_source(config)?;
    source.poll();
    source.save_snapshot();
    Ok(metrics::encode(&metrics::registry(run), Exposition::Text))
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
    let (run, source) = model_and_source(&config)?;
    let state = Arc::new(HttpState {
        registry: metrics::registry(run),
        ready: AtomicBool::new(false),
        header_read_timeout: config.header_read_timeout,
    });
    let (stop, stopped) = mpsc::channel();
    let ready_state = state.clone();
    let interval = config.poll_interval;
    let source_thread = std::thread::Builder::new()
        .name("log-source".into())
        .spawn(move || source.run_until(interval, stopped, &ready_state.ready))
        .context("cannot start the log source thread")?;
    tracing::info!(
        "listening on http://{addr} (metrics at http://{addr}/metrics), following {} log(s)",
        config.logs.len()
    );
    on_listening(addr);
    http::serve(listener, state.clone(), shutdown).await;
    tracing::info!("shutting down");
    drop(stop);
    if source_thread.join().is_err() {
        anyhow::bail!("the log source thread panicked");
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
