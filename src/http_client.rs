//! The sidecar's HTTP/1.1 client: the probes' GETs, the channels' POSTs (Alertmanager,
//! webhooks, the heartbeat), and `status`/`silence` against a running sidecar. One request per
//! connection, a deadline over the whole exchange (connect, TLS, headers and body), and a cap
//! on the body.
//! Inference servers answer on plain HTTP on the node, so probe URLs are `http://` only; a
//! sidecar behind its web config is reached over `https://` with [`Client`]'s TLS and auth.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{
    HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, RETRY_AFTER, USER_AGENT,
};
use hyper::Request;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::Duration;

/// An `http://host[:port]/path` URL, checked once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    /// `https://`: only through [`Url::parse_web`].
    pub tls: bool,
    /// Path and query, starting with `/`.
    pub path: String,
    text: String,
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Url {
    /// An `http://` URL, for a probe of a server on the node.
    pub fn parse(text: &str) -> Result<Url, String> {
        Url::parse_scheme(text, false)
    }

    /// An `http://` or `https://` URL, for a sidecar that may serve TLS.
    pub fn parse_web(text: &str) -> Result<Url, String> {
        Url::parse_scheme(text, true)
    }

    fn parse_scheme(text: &str, https: bool) -> Result<Url, String> {
        let uri: hyper::Uri = text
            .parse()
            .map_err(|e| format!("{text:?} is not a URL: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") if https => true,
            Some(other) if https => {
                return Err(format!("{text:?}: use http:// or https://, not {other}://"))
            }
            Some(other) => {
                return Err(format!(
                "{text:?}: only http:// is supported (the server runs on the node), not {other}://"
            ))
            }
            None => {
                return Err(format!(
                    "{text:?} has no scheme; write http://host:port/path"
                ))
            }
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("{text:?} has no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        // `Uri` parses any digits as the port and then forgets one over 65535, which would
        // quietly probe port 80 instead: read the port from the authority itself.
        let authority = uri.authority().map_or("", |a| a.as_str());
        let port = match authority.rsplit_once(':') {
            Some((_, p)) if !p.ends_with(']') && !p.is_empty() => p
                .parse::<u16>()
                .ok()
                .filter(|port| *port != 0)
                .ok_or_else(|| format!("{text:?}: {p:?} is not a port: it must be 1 to 65535"))?,
            _ if tls => 443,
            _ => 80,
        };
        Ok(Url {
            host,
            port,
            tls,
            path: uri
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "/".to_owned()),
            text: text.to_owned(),
        })
    }
}

/// Ends the connection task when the request is done or abandoned, so a server that hangs
/// cannot keep a task alive.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How `https://` URLs are reached, and the credentials a request carries.
#[derive(Clone, Default)]
pub struct Client {
    /// Needed for an `https://` URL.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The `Authorization` header's value.
    pub authorization: Option<HeaderValue>,
}

/// The start of every TLS client here: the CAs in `ca_pem` (PEM), or the Web PKI roots
/// without it, with rustls's safe protocol versions. The error says what is wrong with the PEM.
pub fn tls_client(
    ca_pem: Option<&[u8]>,
) -> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>, String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca_pem {
        Some(pem) => {
            for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("not usable PEM: {e}"))?;
                roots.add(cert).map_err(|e| e.to_string())?;
            }
            if roots.is_empty() {
                return Err("holds no PEM certificate".to_owned());
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots))
}

/// One request: what [`send`] sends besides the URL.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    /// By default GET, or POST when there is a body.
    pub method: Option<hyper::Method>,
    /// `None` is a GET; `Some` a POST of this body.
    pub body: Option<Bytes>,
    pub content_type: Option<&'static str>,
    /// More headers (a webhook's bearer token, say).
    pub headers: Vec<(hyper::header::HeaderName, HeaderValue)>,
}

/// What came back: the status, a `Retry-After` in seconds if one was given, and the body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<f64>,
    pub body: Bytes,
}

/// GETs `url`; returns the status and the body (at most `limit` bytes).
pub async fn get(url: &Url, timeout: Duration, limit: usize) -> Result<(u16, Bytes), String> {
    get_with(&Client::default(), url, timeout, limit).await
}

/// [`get`], over TLS for an `https://` URL and with the client's credentials.
pub async fn get_with(
    client: &Client,
    url: &Url,
    timeout: Duration,
    limit: usize,
) -> Result<(u16, Bytes), String> {
    let answer = send(client, url, &Outgoing::default(), timeout, limit).await?;
    Ok((answer.status, answer.body))
}

/// Sends one request and reads the answer, all within `timeout`.
pub async fn send(
    client: &Client,
    url: &Url,
    request: &Outgoing,
    timeout: Duration,
    limit: usize,
) -> Result<Answer, String> {
    let exchange = async {
        let stream = tokio::net::TcpStream::connect((url.host.as_str(), url.port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        if !url.tls {
            return exchange(stream, client, url, request, limit).await;
        }
        let config = client
            .tls
            .clone()
            .ok_or_else(|| format!("{url}: no TLS client is configured"))?;
        let name = rustls::pki_types::ServerName::try_from(url.host.clone())
            .map_err(|e| format!("{:?} is not a host name for TLS: {e}", url.host))?;
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS handshake failed: {e}"))?;
        exchange(stream, client, url, request, limit).await
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| format!("no complete answer within {timeout:?}"))?
}

async fn exchange<S>(
    stream: S,
    client: &Client,
    url: &Url,
    outgoing: &Outgoing,
    limit: usize,
) -> Result<Answer, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake failed: {e}"))?;
    let _conn = AbortOnDrop(tokio::spawn(async move {
        let _ = conn.await;
    }));
    let authority = if url.port == if url.tls { 443 } else { 80 } {
        url.host.clone()
    } else {
        format!("{}:{}", url.host, url.port)
    };
    let method = match (&outgoing.method, &outgoing.body) {
        (Some(method), _) => method.clone(),
        (None, Some(_)) => hyper::Method::POST,
        (None, None) => hyper::Method::GET,
    };
    let mut request = Request::builder()
        .method(method)
        .uri(url.path.as_str())
        .header(HOST, authority)
        .header(ACCEPT, "text/plain;version=0.0.4, */*;q=0.1")
        .header(
            USER_AGENT,
            concat!("pipeline-pulse/", env!("CARGO_PKG_VERSION")),
        );
    if let Some(authorization) = &client.authorization {
        request = request.header(AUTHORIZATION, authorization.clone());
    }
    if let Some(content_type) = outgoing.content_type {
        request = request.header(CONTENT_TYPE, content_type);
    }
    for (name, value) in &outgoing.headers {
        request = request.header(name, value);
    }
    let request = request
        .body(Full::new(outgoing.body.clone().unwrap_or_default()))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0);
    let mut body = response.into_body();
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading the body failed: {e}"))?;
        if let Some(data) = frame.data_ref() {
            if buf.len() + data.len() > limit {
                return Err(format!("the response is larger than {limit} bytes"));
            }
            buf.extend_from_slice(data);
        }
    }
    Ok(Answer {
        status,
        retry_after,
        body: Bytes::from(buf),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://127.0.0.1:30000/metrics").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 30000, "/metrics")
        );
        let u = Url::parse("http://localhost/health?x=1").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/health?x=1"));
        assert_eq!(Url::parse("http://[::1]:8000").unwrap().host, "::1");
        assert!(Url::parse("https://x/")
            .unwrap_err()
            .contains("only http://"));
        assert!(Url::parse("localhost:8000").is_err());
        assert!(Url::parse("not a url").is_err());
    }
}
