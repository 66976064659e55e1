//! `/api/v1/silences`: list (GET), add (POST) and expire (DELETE /api/v1/silences/ID).
//!
//! Changing silences mutes pages, so it is taken only from loopback (the node itself, or
//! `kubectl port-forward`) unless the web config authenticates clients (basic auth or
//! required client certificates), in which case from anyone who passed that. Listing them is
//! as open as `/status`.

use super::{json, text, HttpState};
use crate::sinks::alert::silence::{NewSilence, Silence};
use crate::sinks::web_config::Active;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW};
use hyper::{Method, Request, Response, StatusCode};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// A silence as the API shows it: the stored silence and, in a list, whether it holds now.
#[derive(Debug, Serialize, Deserialize)]
pub struct Shown {
    #[serde(flatten)]
    pub silence: Silence,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<bool>,
}

/// `GET /api/v1/silences`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Listed {
    pub silences: Vec<Shown>,
}

/// A silence request is a few fields; anything longer is not one.
const BODY_LIMIT: usize = 16 * 1024;

pub const PATH: &str = "/api/v1/silences";

/// Whether this client may add or expire silences.
pub fn may_change(peer: SocketAddr, web: Option<&Active>) -> bool {
    peer.ip().is_loopback()
        || peer.ip().to_canonical().is_loopback()
        || web.is_some_and(|w| {
            w.auth.is_some() || w.tls.as_ref().is_some_and(|t| t.requires_client_cert)
        })
}

pub(super) async fn answer(
    state: &HttpState,
    web: Option<&Active>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let now = crate::clock::now();
    let id = req
        .uri()
        .path()
        .strip_prefix(PATH)
        .unwrap_or("")
        .trim_start_matches('/')
        .to_owned();
    let method = req.method().clone();
    if method != Method::GET && method != Method::HEAD && !may_change(peer, web) {
        return text(
            StatusCode::FORBIDDEN,
            "silences are changed from the node itself (loopback) unless the web config asks for basic auth or client certificates\n",
        );
    }
    match (method, id.is_empty()) {
        (Method::GET | Method::HEAD, true) => {
            let list = state.silences.with(|s| s.list.clone());
            let silences = list
                .into_iter()
                .map(|silence| Shown {
                    active: Some(silence.active(now)),
                    silence,
                })
                .collect();
            json(StatusCode::OK, &Listed { silences })
        }
        (Method::POST, true) => {
            let body = match Limited::new(req.into_body(), BODY_LIMIT).collect().await {
                Ok(body) => body.to_bytes(),
                Err(e) => {
                    return text(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        if e.is::<http_body_util::LengthLimitError>() {
                            "a silence request is at most 16 KiB\n"
                        } else {
                            "the request body could not be read\n"
                        },
                    )
                }
            };
            let new: NewSilence = match serde_json::from_slice(&body) {
                Ok(new) => new,
                Err(e) => return bad(format!("not a silence request: {e}; send {{\"for\": \"2h\", \"comment\": \"...\", \"alert\": \"Stalled\", \"partition\": \"B1\"}}\n")),
            };
            match state.silences.with(|s| s.add(new, now)) {
                Ok(silence) => {
                    tracing::info!(
                        alert = silence.alert.as_deref(),
                        partition = silence.partition.as_deref(),
                        "silence {} added from {peer} until {}: {}",
                        silence.id,
                        humantime::format_rfc3339_seconds(
                            std::time::UNIX_EPOCH
                                + std::time::Duration::from_secs_f64(silence.ends_at)
                        ),
                        silence.comment
                    );
                    json(
                        StatusCode::OK,
                        &Shown {
                            silence,
                            active: None,
                        },
                    )
                }
                Err(e) => bad(format!("{e}\n")),
            }
        }
        (Method::DELETE, false) => {
            if state.silences.with(|s| s.expire(&id, now)) {
                tracing::info!("silence {id} expired from {peer}");
                text(StatusCode::OK, "expired\n")
            } else {
                text(StatusCode::NOT_FOUND, "no active silence has that id\n")
            }
        }
        (_, true) => not_allowed("GET, HEAD, POST"),
        (_, false) => not_allowed("DELETE"),
    }
}

fn bad(message: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(message)));
    *resp.status_mut() = StatusCode::BAD_REQUEST;
    resp
}

fn not_allowed(allow: &'static str) -> Response<Full<Bytes>> {
    let mut resp = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here\n");
    resp.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_changes_silences_without_auth() {
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let local6: SocketAddr = "[::1]:5000".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5000".parse().unwrap();
        let remote: SocketAddr = "10.0.0.7:5000".parse().unwrap();
        assert!(may_change(local, None));
        assert!(may_change(local6, None));
        assert!(may_change(mapped, None));
        assert!(!may_change(remote, None));
    }
}
