//! Connections: accepting on every listener, the `max_connections` cap, TLS and the choice of
//! HTTP/1.1 or HTTP/2, and the graceful end.
//!
//! hyper's connection builders get their timer set: without it, hyper's header read timeout
//! silently does nothing and a client that never finishes its headers holds a connection
//! forever. A TLS handshake gets the same deadline.

use super::{handle, HttpState};
use crate::sinks::web_config::{Active, Counters};
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long in-flight requests may take to finish at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long a connection over [`OPEN_LIMIT`] is given to take its 503.
const BUSY_GRACE: Duration = Duration::from_secs(1);

/// Connections open at once. A connection that has not sent its request head holds no place
/// a request needs (`max_connections` counts requests being served, as node_exporter's
/// `--web.max-requests` does): slow clients cannot shut a scrape out, and they are cut at
/// `header_read_timeout`. This bound only keeps file descriptors and memory in hand.
const OPEN_LIMIT: usize = 16_384;

/// The answer to a connection over [`OPEN_LIMIT`]: written without reading the request.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 38\r\nConnection: close\r\n\r\ntoo many connections; try again soon\r\n";

/// Accepts on one listener, forever, handing each connection to the serving loop.
async fn accept(listener: TcpListener, to: tokio::sync::mpsc::Sender<(TcpStream, SocketAddr)>) {
    loop {
        match listener.accept().await {
            Ok(conn) => {
                if to.send(conn).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                // Typically EMFILE: back off instead of spinning on the error, and say a want
                // of descriptors once a minute (fd_limit), not ten times a second.
                if !crate::fd_limit::note(&e) {
                    tracing::warn!("accepting a connection failed: {e}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves every listener until `shutdown` completes, then lets in-flight requests finish.
pub async fn serve(
    listeners: Vec<TcpListener>,
    state: Arc<HttpState>,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let open = Arc::new(AtomicUsize::new(0));
    let serving = Arc::new(tokio::sync::Semaphore::new(state.max_connections));
    let (to, mut accepted) = tokio::sync::mpsc::channel(64);
    let acceptors: Vec<_> = listeners
        .into_iter()
        .map(|l| tokio::spawn(accept(l, to.clone())))
        .collect();
    drop(to);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            conn = accepted.recv() => match conn {
                Some(conn) => conn,
                None => break,
            },
            () = &mut shutdown => break,
        };
        // The web config as it is now: a rotated certificate serves this connection.
        let web = state.web.as_ref().map(|w| w.watched.current());
        if open.load(Ordering::Acquire) >= OPEN_LIMIT {
            tokio::spawn(refuse(stream, web));
            tracing::debug!("connection from {peer} refused: {OPEN_LIMIT} open");
            continue;
        }
        open.fetch_add(1, Ordering::AcqRel);
        let still_open = Open(open.clone());
        let watcher = graceful.watcher();
        let state = state.clone();
        let serving = serving.clone();
        tokio::spawn(async move {
            let _open = still_open;
            connection(stream, peer, state, web, serving, watcher).await;
        });
    }
    for acceptor in acceptors {
        acceptor.abort();
    }
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; closing them");
    }
}

/// One connection: the TLS handshake if the web config asks for TLS, then HTTP/2 if ALPN
/// chose it, HTTP/1.1 otherwise.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<HttpState>,
    web: Option<Arc<Active>>,
    serving: Arc<tokio::sync::Semaphore>,
    watcher: Watcher,
) {
    let Some(tls) = web.as_ref().and_then(|w| w.tls.clone()) else {
        return http(stream, false, peer, state, web, serving, watcher).await;
    };
    match tokio::time::timeout(state.header_read_timeout, tls.acceptor.accept(stream)).await {
        Ok(Ok(stream)) => {
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            http(stream, h2, peer, state, web, serving, watcher).await;
        }
        // A scanner, a client that does not trust our certificate, no client certificate:
        // the client is told by the TLS alert; the log says so at debug level.
        Ok(Err(e)) => {
            count_failed_handshake(&state);
            tracing::debug!("TLS handshake with {peer} failed: {e}");
        }
        Err(_) => {
            count_failed_handshake(&state);
            tracing::debug!("TLS handshake with {peer} timed out");
        }
    }
}

fn count_failed_handshake(state: &HttpState) {
    if let Some(web) = &state.web {
        Counters::count(&web.watched.counters().handshakes_failed);
    }
}

async fn http<S>(
    stream: S,
    h2: bool,
    peer: SocketAddr,
    state: Arc<HttpState>,
    web: Option<Arc<Active>>,
    serving: Arc<tokio::sync::Semaphore>,
    watcher: Watcher,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let timeout = state.header_read_timeout;
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let state = state.clone();
        let web = web.clone();
        // A place is taken once a request has arrived, for as long as it is answered.
        let permit = serving.clone().try_acquire_owned();
        async move {
            let response = match permit {
                Ok(_serving) => handle(&state, web.as_deref(), peer, req).await,
                Err(_) => super::busy(state.max_connections),
            };
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let io = TokioIo::new(stream);
    let result = if h2 {
        let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .serve_connection(io, service);
        watcher.watch(conn).await
    } else {
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(timeout)
            .serve_connection(io, service);
        watcher.watch(conn).await
    };
    if let Err(e) = result {
        tracing::debug!("connection from {peer}: {e}");
    }
}

/// Answers a connection over `max_connections` with a 503 at once (over TLS when the listener
/// speaks TLS), instead of queueing it.
async fn refuse(stream: TcpStream, web: Option<Arc<Active>>) {
    let answer = async {
        match web.as_ref().and_then(|w| w.tls.clone()) {
            Some(tls) => write_busy(tls.busy.accept(stream).await?).await,
            None => write_busy(stream).await,
        }
    };
    let _ = tokio::time::timeout(BUSY_GRACE, answer).await;
}

async fn write_busy<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) -> std::io::Result<()> {
    stream.write_all(BUSY).await?;
    stream.shutdown().await?;
    // Closing with the request unread would reset the connection and could destroy the
    // answer before the client reads it: drain, a little.
    let mut sink = [0u8; 4096];
    while stream.read(&mut sink).await? > 0 {}
    Ok(())
}

/// One open connection, counted until its task ends (even by a panic's unwinding).
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The listening sockets systemd passed (socket activation, `sd_listen_fds(3)`): `LISTEN_FDS`
/// of them from descriptor 3 on, for the process `LISTEN_PID` names.
pub fn systemd_listeners() -> anyhow::Result<Vec<TcpListener>> {
    use anyhow::Context as _;
    use std::os::fd::{FromRawFd, RawFd};
    const FIRST: RawFd = 3;
    let var = |name: &str| {
        std::env::var(name).with_context(|| {
            format!("systemd_socket is set but {name} is not: start the sidecar from its .socket unit (deploy/systemd/pipeline-pulse.socket)")
        })
    };
    let pid: u32 = var("LISTEN_PID")?
        .parse()
        .context("LISTEN_PID is not a process id")?;
    anyhow::ensure!(
        pid == std::process::id(),
        "LISTEN_PID {pid} is not this process ({}): the sockets were passed to another",
        std::process::id()
    );
    let count: RawFd = var("LISTEN_FDS")?
        .parse()
        .context("LISTEN_FDS is not a count")?;
    anyhow::ensure!(
        (1..=64).contains(&count),
        "LISTEN_FDS is {count}: systemd passed no socket to serve on"
    );
    (FIRST..FIRST + count)
        .map(|fd| {
            // SAFETY: systemd hands these descriptors to this process, once, for it to own;
            // LISTEN_PID was checked above, and nothing else in the process takes them.
            let socket = unsafe { std::net::TcpListener::from_raw_fd(fd) };
            socket
                .set_nonblocking(true)
                .with_context(|| format!("descriptor {fd} from systemd is not a socket"))?;
            let listener = TcpListener::from_std(socket)
                .with_context(|| format!("descriptor {fd} from systemd is not a TCP socket"))?;
            listener.local_addr().with_context(|| {
                format!("descriptor {fd} from systemd is not a listening socket")
            })?;
            Ok(listener)
        })
        .collect()
}
