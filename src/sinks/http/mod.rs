//! The HTTP server: `/metrics` for Prometheus, `/` for people, `/-/healthy` and `/-/ready` for
//! orchestrators. [`serve`] owns the connections; this file answers requests.

use crate::model::{AlertView, Run};
use crate::rules::AlertName;
use crate::sinks::metrics::{self, Exposition};
use crate::sinks::status::Status;
use crate::sinks::web_config::Active;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, ACCEPT, ACCEPT_ENCODING, ALLOW, AUTHORIZATION, CACHE_CONTROL, CONTENT_ENCODING,
    CONTENT_LENGTH, CONTENT_TYPE, VARY, WWW_AUTHENTICATE,
};
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

mod serve;
pub mod silences;
use crate::lock::{Locked, Published};
pub use serve::{serve, systemd_listeners};

/// The web config as the HTTP server holds it: watched, and read again when its files change.
#[derive(Clone)]
pub struct WebServing {
    pub watched: Arc<crate::sinks::web_config::Watched>,
    pub health_without_auth: bool,
}

impl WebServing {
    /// Starts watching the web config start-up loaded.
    pub fn of(config: &crate::sinks::web_config::WebConfig) -> WebServing {
        WebServing {
            watched: Arc::new(crate::sinks::web_config::Watched::new(
                &config.path,
                config.loaded.clone(),
            )),
            health_without_auth: config.health_without_auth,
        }
    }
}

/// What the handlers need.
pub struct HttpState {
    pub registry: Registry,
    /// The model, for `/status`.
    pub run: Arc<Mutex<Run>>,
    /// What the alert engine publishes, for `/status`'s alerts.
    pub alerts: Published<AlertView>,
    /// The host name `/status` gives.
    pub host: String,
    /// Sources that have not yet read their inputs to the end once; ready at 0, so the first
    /// scrape after readiness shows the run.
    pub catching_up: Arc<AtomicUsize>,
    /// A client gets this long to send its request headers.
    pub header_read_timeout: Duration,
    /// Requests served at once; more are answered 503 at once rather than queued. A
    /// connection waiting for its request head holds no place.
    pub max_connections: usize,
    /// TLS and auth; `None` serves plain HTTP to anyone.
    pub web: Option<WebServing>,
    pub silences: Arc<crate::sinks::alert::silence::Store>,
    /// The rules' thresholds, which `/api/report` judges the dataset by.
    pub rules: crate::rules::Rules,
    /// Where the metrics are served (`telemetry_path`); `/metrics` is then not found.
    pub telemetry_path: String,
}

async fn handle(
    state: &HttpState,
    web: Option<&Active>,
    peer: std::net::SocketAddr,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let open = matches!(req.uri().path(), "/-/healthy" | ENGINE)
        && state.web.as_ref().is_some_and(|w| w.health_without_auth);
    let mut resp = match web.and_then(|w| w.auth.as_ref()) {
        Some(auth) if !open && !auth.allows(req.headers().get(AUTHORIZATION)).await => {
            if let Some(web) = &state.web {
                crate::sinks::web_config::Counters::count(&web.watched.counters().unauthorized);
            }
            let mut resp = text(StatusCode::UNAUTHORIZED, "unauthorized\n");
            resp.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"pipeline-pulse\", charset=\"UTF-8\""),
            );
            resp
        }
        _ if req.uri().path() == silences::PATH
            || req.uri().path().starts_with("/api/v1/silences/") =>
        {
            silences::answer(state, web, peer, req).await
        }
        _ => route(state, &req),
    };
    // The security headers the web config asks for go on every answer, refusals included.
    for (name, value) in web.iter().flat_map(|w| w.headers.iter()) {
        resp.headers_mut().insert(name.clone(), value.clone());
    }
    resp
}

/// A status, a content type and a body.
type Answer = (StatusCode, &'static str, String);

/// One path served here.
struct Route {
    path: &'static str,
    /// A document (not the page or a probe's answer): gzipped for a client that accepts it.
    document: bool,
    answer: fn(&HttpState, &Request<Incoming>) -> Answer,
}

/// What is served here, each path once (the docs list them in configuration.md).
const ROUTES: &[Route] = &[
    Route {
        path: "/",
        document: false,
        answer: |_, _| (StatusCode::OK, "text/html; charset=utf-8", PAGE.to_owned()),
    },
    Route {
        path: "/metrics",
        document: true,
        answer: metrics_answer,
    },
    Route {
        path: "/status",
        document: true,
        answer: status_answer,
    },
    Route {
        path: "/api/history",
        document: true,
        answer: history_answer,
    },
    Route {
        path: "/api/report",
        document: true,
        answer: report_answer,
    },
    Route {
        path: "/api/stacks",
        document: true,
        answer: stacks_answer,
    },
    Route {
        path: "/-/healthy",
        document: false,
        answer: |_, _| (StatusCode::OK, TEXT, "OK\n".to_owned()),
    },
    Route {
        path: "/-/ready",
        document: false,
        answer: ready_answer,
    },
    Route {
        path: ENGINE,
        document: false,
        answer: engine_answer,
    },
];

/// The inference engine's liveness, for its supervisor's probe (docs/alerts.md#liveness).
const ENGINE: &str = "/-/engine";

/// 503 while the sidecar judges the server hung or down (`ServerHung` or `ServerDown` firing:
/// their thresholds and `for` are the grace, and a starting server is never down), else 200. A
/// busy engine is neither: its requests run, or its counters move. Read from the alert engine's
/// published view: no lock a scrape needs.
fn engine_answer(state: &HttpState, _: &Request<Incoming>) -> Answer {
    let view = state.alerts.get();
    let judged = view.alerts.iter().find(|a| {
        let judged = [AlertName::ServerHung, AlertName::ServerDown];
        a.firing && AlertName::parse(&a.alert).is_some_and(|n| judged.contains(&n))
    });
    match judged {
        Some(a) => (
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            format!("{}: {}\n", a.alert, a.summary),
        ),
        None => (
            StatusCode::OK,
            TEXT,
            "OK: the inference server is not judged hung or down\n".to_owned(),
        ),
    }
}

fn route(state: &HttpState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    // The metrics answer at their configured path, and only there.
    let path = match req.uri().path() {
        p if p == state.telemetry_path => "/metrics",
        "/metrics" => "(not served here)",
        p => p,
    };
    // The test of the panic policy: a panic in a connection task must end the process, not
    // leave it serving nothing. Only in debug builds; a release binary has no such path.
    #[cfg(debug_assertions)]
    if path == "/-/debug/panic" {
        panic!("panic requested through /-/debug/panic");
    }
    let Some(route) = ROUTES.iter().find(|r| r.path == path) else {
        return text(
            StatusCode::NOT_FOUND,
            "not found; see / for what is served here\n",
        );
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD are allowed\n",
        );
        resp.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    let (status, content_type, body) = (route.answer)(state, req);
    let mut resp = with_type(status, content_type, String::new());
    let headers = resp.headers_mut();
    // Every answer here is about now: no cache may keep it.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let mut body = Bytes::from(body);
    if route.document {
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

fn metrics_answer(state: &HttpState, req: &Request<Incoming>) -> Answer {
    let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
    let format = negotiate(accept);
    let body = metrics::encode(&state.registry, format);
    (StatusCode::OK, format.content_type(), body)
}

fn status_answer(state: &HttpState, _: &Request<Incoming>) -> Answer {
    let alerts = state.alerts.get();
    let mut status = {
        let run = state.run.locked();
        Status::from_run(&run, &alerts.alerts, &state.host, crate::clock::now())
    };
    status.actions = alerts.action_runs.clone();
    let body = serde_json::to_string_pretty(&status).expect("a Status always serializes");
    (StatusCode::OK, "application/json", body)
}

fn report_answer(state: &HttpState, _: &Request<Incoming>) -> Answer {
    let report = {
        let run = state.run.locked();
        crate::sinks::report::Report::of(&run, &state.rules)
    };
    let body = serde_json::to_string_pretty(&report).expect("a Report always serializes");
    (StatusCode::OK, "application/json", body)
}

fn stacks_answer(state: &HttpState, _: &Request<Incoming>) -> Answer {
    // The Arc is taken under the lock, the JSON made outside it.
    let stacks = state.run.locked().stacks.clone();
    match stacks {
        Some(stacks) => (
            StatusCode::OK,
            "application/json",
            serde_json::to_string_pretty(&*stacks).expect("stacks always serialize"),
        ),
        None => (
            StatusCode::NOT_FOUND,
            TEXT,
            "no stacks taken yet: they are taken when Stalled, ServerHung or LogSilent fires (docs/alerts.md#stacks)\n".to_owned(),
        ),
    }
}

fn history_answer(state: &HttpState, req: &Request<Incoming>) -> Answer {
    let query = req.uri().query().unwrap_or("");
    let param = |name: &str| -> Option<f64> {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    let view = {
        let run = state.run.locked();
        let kept = run.collectors_on.on(crate::collectors::Collector::History);
        let since = param("since").unwrap_or(0.0);
        let mut step = param("step").unwrap_or(0.0);
        // `points=N`: a step coarse enough for at most N points per series, which is what a
        // chart N pixels wide can show.
        if let Some(points) = param("points").filter(|p| *p >= 1.0) {
            let covered = run.history.covered_since(since);
            step = step.max(covered / points);
        }
        kept.then(|| run.history.view(since, step))
    };
    match view {
        Some(view) => (StatusCode::OK, "application/json", view),
        None => (
            StatusCode::NOT_FOUND,
            TEXT,
            "the history collector is off (collectors.history): no history is kept\n".to_owned(),
        ),
    }
}

fn ready_answer(state: &HttpState, _: &Request<Incoming>) -> Answer {
    if state.catching_up.load(Ordering::Acquire) == 0 {
        (StatusCode::OK, TEXT, "OK\n".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            "reading the inputs for the first time\n".to_owned(),
        )
    }
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

fn json(status: StatusCode, value: &impl serde::Serialize) -> Response<Full<Bytes>> {
    let body = serde_json::to_string(value).expect("our answers serialize");
    let mut resp = with_type(status, "application/json", body);
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The answer to a request over `max_connections` served at once.
fn busy(limit: usize) -> Response<Full<Bytes>> {
    let mut resp = with_type(
        StatusCode::SERVICE_UNAVAILABLE,
        TEXT,
        format!("{limit} requests are being served; try again soon\n"),
    );
    resp.headers_mut()
        .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
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
const PAGE: &str = include_str!("../status/page.html");

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
