//! The HTTP server: `/metrics` for Prometheus, `/` for people, `/-/healthy` and `/-/ready` for
//! orchestrators.
//!
//! hyper's HTTP/1 connection builder with its timer set: without the timer, hyper's header read
//! timeout silently does nothing and a client that never finishes its headers holds a
//! connection forever.

use crate::metrics::{self, Exposition};
use crate::model::Run;
use crate::status::Status;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, ACCEPT, ACCEPT_ENCODING, ALLOW, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH,
    CONTENT_TYPE, VARY,
};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// How long in-flight requests may take to finish at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What the handlers need.
pub struct HttpState {
    pub registry: Registry,
    /// The model, for `/status`.
    pub run: Arc<Mutex<Run>>,
    /// The host name `/status` gives.
    pub host: String,
    /// Sources that have not yet read their inputs to the end once; ready at 0, so the first
    /// scrape after readiness shows the run.
    pub catching_up: Arc<AtomicUsize>,
    /// A client gets this long to send its request headers.
    pub header_read_timeout: Duration,
    /// Connections served at once; more are answered 503 at once rather than queued.
    pub max_connections: usize,
}

/// The answer to a connection over `max_connections`: written without reading the request.
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
                // Typically EMFILE: back off instead of spinning on the error.
                tracing::warn!("accepting a connection failed: {e}");
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
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let open = Arc::new(AtomicUsize::new(0));
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
        if open.load(Ordering::Acquire) >= state.max_connections {
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut stream = stream;
                let answer = async {
                    stream.write_all(BUSY).await?;
                    stream.shutdown().await?;
                    // Closing with the request unread would reset the connection and could
                    // destroy the answer before the client reads it: drain, a little.
                    let mut sink = [0u8; 4096];
                    while stream.read(&mut sink).await? > 0 {}
                    Ok::<_, std::io::Error>(())
                };
                let _ = tokio::time::timeout(Duration::from_secs(1), answer).await;
            });
            tracing::debug!(
                "connection from {peer} refused: {} open",
                state.max_connections
            );
            continue;
        }
        open.fetch_add(1, Ordering::AcqRel);
        let still_open = Open(open.clone());
        let timeout = state.header_read_timeout;
        let state = state.clone();
        let service = hyper::service::service_fn(move |req| {
            let state = state.clone();
            async move { Ok::<_, std::convert::Infallible>(handle(&state, &req)) }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(timeout)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _open = still_open;
            if let Err(e) = conn.await {
                tracing::debug!("connection from {peer}: {e}");
            }
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

/// One open connection, counted until its task ends (even by a panic's unwinding).
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn handle(state: &HttpState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    // The test of the panic policy: a panic in a connection task must end the process, not
    // leave it serving nothing. Only in debug builds; a release binary has no such path.
    #[cfg(debug_assertions)]
    if path == "/-/debug/panic" {
        panic!("panic requested through /-/debug/panic");
    }
    let known = matches!(
        path,
        "/" | "/metrics" | "/status" | "/-/healthy" | "/-/ready"
    );
    if !known {
        return text(
            StatusCode::NOT_FOUND,
            "not found; see / for what is served here\n",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD are allowed\n",
        );
        resp.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    let (status, content_type, body) = match path {
        "/metrics" => {
            let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
            let format = negotiate(accept);
            let body = metrics::encode(&state.registry, format);
            (StatusCode::OK, format.content_type(), body)
        }
        "/status" => {
            let status = {
                let run = state.run.lock().unwrap_or_else(|e| e.into_inner());
                Status::from_run(&run, &state.host, crate::clock::now())
            };
            let body = serde_json::to_string_pretty(&status).expect("a Status always serializes");
            (StatusCode::OK, "application/json", body)
        }
        "/-/healthy" => (StatusCode::OK, TEXT, "OK\n".to_owned()),
        "/-/ready" if state.catching_up.load(Ordering::Acquire) == 0 => {
            (StatusCode::OK, TEXT, "OK\n".to_owned())
        }
        "/-/ready" => (
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            "reading the inputs for the first time\n".to_owned(),
        ),
        _ => (StatusCode::OK, "text/html; charset=utf-8", PAGE.to_owned()),
    };
    let mut resp = with_type(status, content_type, String::new());
    let headers = resp.headers_mut();
    // Every answer here is about now: no cache may keep it.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let mut body = Bytes::from(body);
    if matches!(path, "/metrics" | "/status") {
        headers.insert(VARY, HeaderValue::from_static("accept-encoding"));
        let encoding = req
            .headers()
            .get(ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok());
        if accepts_gzip(encoding) {
            if let Some(compressed) = gzip(&body) {
                headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                body = compressed;
            }
        }
    }
    // HEAD answers what GET would, headers and length included, without the body.
    headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    if req.method() != Method::HEAD {
        *resp.body_mut() = Full::new(body);
    }
    resp
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Whether an `Accept-Encoding` header takes gzip (Prometheus always sends it): listed, or
/// through `*`, with a q-value above 0.
pub fn accepts_gzip(header: Option<&str>) -> bool {
    let mut gzip = None;
    let mut any = None;
    for coding in header.unwrap_or("").split(',') {
        let mut parts = coding.split(';').map(str::trim);
        let name = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f64>().ok())
            .unwrap_or(1.0);
        match name.as_str() {
            "gzip" | "x-gzip" => gzip = Some(q),
            "*" => any = Some(q),
            _ => {}
        }
    }
    gzip.or(any).is_some_and(|q| q > 0.0)
}

fn gzip(body: &[u8]) -> Option<Bytes> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(body).ok()?;
    encoder.finish().ok().map(Bytes::from)
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    with_type(status, TEXT, body.to_owned())
}

fn with_type(
    status: StatusCode,
    content_type: &'static str,
    body: String,
) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// Picks the exposition format from an `Accept` header by its q-values: OpenMetrics when the
/// client prefers it (as Prometheus does), the classic text format otherwise (curl, old
/// scrapers, no header at all).
pub fn negotiate(accept: Option<&str>) -> Exposition {
    let mut best_openmetrics = 0.0f64;
    let mut best_text = 0.0f64;
    for range in accept.unwrap_or("").split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.parse::<f64>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => best_openmetrics = best_openmetrics.max(q),
            "text/plain" | "text/*" | "*/*" => best_text = best_text.max(q),
            _ => {}
        }
    }
    if best_openmetrics > 0.0 && best_openmetrics >= best_text {
        Exposition::OpenMetrics
    } else {
        Exposition::Text
    }
}

/// The live status page: plain HTML, inline CSS and JS, no external assets (the node may have
/// no internet, and a status page must not depend on a CDN). It polls `/status`.
const PAGE: &str = include_str!("status/page.html");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_q_values() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prometheus)), Exposition::OpenMetrics);
        assert_eq!(negotiate(None), Exposition::Text);
        assert_eq!(negotiate(Some("*/*")), Exposition::Text);
        assert_eq!(
            negotiate(Some(
                "text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5"
            )),
            Exposition::Text
        );
        assert_eq!(
            negotiate(Some("application/openmetrics-text;q=0")),
            Exposition::Text
        );
        assert_eq!(
            negotiate(Some("Application/OpenMetrics-Text; version=1.0.0")),
            Exposition::OpenMetrics
        );
    }
}
