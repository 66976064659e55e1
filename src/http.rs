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
use hyper::header::{HeaderValue, ACCEPT, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::net::TcpListener;

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
}

/// Serves until `shutdown` completes, then lets in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    state: Arc<HttpState>,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Typically EMFILE: back off instead of spinning on the error.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
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
            if let Err(e) = conn.await {
                tracing::debug!("connection from {peer}: {e}");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; closing them");
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
    let mut resp = match path {
        "/metrics" => {
            let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
            let format = negotiate(accept);
            let body = metrics::encode(&state.registry, format);
            with_type(StatusCode::OK, format.content_type(), body)
        }
        "/status" => {
            let status = {
                let run = state.run.lock().unwrap_or_else(|e| e.into_inner());
                Status::from_run(&run, &state.host, crate::clock::now())
            };
            let body = serde_json::to_string_pretty(&status).expect("a Status always serializes");
            with_type(StatusCode::OK, "application/json", body)
        }
        "/-/healthy" => text(StatusCode::OK, "OK\n"),
        "/-/ready" if state.catching_up.load(Ordering::Acquire) == 0 => {
            text(StatusCode::OK, "OK\n")
        }
        "/-/ready" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "reading the inputs for the first time\n",
        ),
        _ => with_type(StatusCode::OK, "text/html; charset=utf-8", PAGE.to_owned()),
    };
    if req.method() == Method::HEAD {
        *resp.body_mut() = Full::new(Bytes::new());
    }
    resp
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    with_type(status, "text/plain; charset=utf-8", body.to_owned())
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
