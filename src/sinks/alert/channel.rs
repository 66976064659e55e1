//! The HTTP channels: Alertmanager's API and webhooks. Each is a URL, a payload shape and
//! headers; a POST either lands (2xx), is worth retrying (no connection, a timeout, 5xx, 429
//! with its `Retry-After`), or is refused for good (any other 4xx: the payload or the token is
//! wrong, and sending it again will not change that).

use super::delivery::Outcome;
use crate::http_client::{self, Client, Url};
use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use std::sync::Arc;
use std::time::Duration;

/// What a channel's POST carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `POST /api/v2/alerts` of an Alertmanager: every firing alert, re-sent each minute.
    AlertmanagerApi,
    /// Alertmanager's webhook payload (version 4), one per notification batch.
    Alertmanager,
    /// A Slack incoming-webhook message, one per notification batch.
    Slack,
}

#[derive(Clone)]
pub struct HttpChannel {
    /// The config key it came from (`alertmanager_urls[0]`, `webhooks[1]`): the `channel` label
    /// of `pulse_notifications_total`, and how a queued message finds its channel after a
    /// restart.
    pub name: String,
    pub url: Url,
    pub shape: Shape,
    /// Read from files or the environment at start; never written to the outbox.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// A private CA (PEM) instead of the Web PKI roots.
    pub ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for HttpChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The headers hold tokens: their names only.
        let headers: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("HttpChannel")
            .field("name", &self.name)
            .field("url", &self.url.to_string())
            .field("shape", &self.shape)
            .field("headers", &headers)
            .finish()
    }
}

impl PartialEq for HttpChannel {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.url == other.url
            && self.shape == other.shape
            && self.headers == other.headers
            && self.ca_pem == other.ca_pem
    }
}

/// The largest answer body read (and ignored) from a receiver.
const ANSWER_LIMIT: usize = 64 * 1024;

impl HttpChannel {
    /// The TLS client this channel sends with.
    pub fn client(&self) -> Result<Client, String> {
        let config = http_client::tls_client(self.ca_pem.as_deref())
            .map_err(|e| format!("{}: ca_file: {e}", self.name))?
            .with_no_client_auth();
        Ok(Client {
            tls: Some(Arc::new(config)),
            authorization: None,
        })
    }

    pub async fn send(&self, client: &Client, body: &str, timeout: Duration) -> Outcome {
        let request = http_client::Outgoing {
            body: Some(Bytes::from(body.to_owned())),
            content_type: Some("application/json"),
            headers: self.headers.clone(),
            ..Default::default()
        };
        match http_client::send(client, &self.url, &request, timeout, ANSWER_LIMIT).await {
            Ok(answer) => judge(answer.status, answer.retry_after, &answer.body),
            Err(e) => Outcome::Retry(e, None),
        }
    }
}

/// What an HTTP status means for a notification.
pub fn judge(status: u16, retry_after: Option<f64>, body: &[u8]) -> Outcome {
    let said = String::from_utf8_lossy(&body[..body.len().min(300)])
        .trim()
        .to_owned();
    match status {
        200..=299 => Outcome::Sent,
        429 | 500..=599 => Outcome::Retry(format!("answered {status}: {said}"), retry_after),
        _ => Outcome::Rejected(format!("answered {status}: {said}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_outcomes() {
        assert_eq!(judge(200, None, b""), Outcome::Sent);
        assert_eq!(judge(204, None, b""), Outcome::Sent);
        assert!(matches!(judge(503, None, b"busy"), Outcome::Retry(_, None)));
        assert!(matches!(judge(429, Some(7.0), b""), Outcome::Retry(_, Some(s)) if s == 7.0));
        assert!(
            matches!(judge(400, None, b"bad payload"), Outcome::Rejected(e) if e.contains("bad payload"))
        );
        assert!(matches!(judge(404, None, b""), Outcome::Rejected(_)));
        assert!(matches!(judge(301, None, b""), Outcome::Rejected(_)));
    }
}
