//! The Prometheus web configuration file (`--web.config.file`, prometheus/exporter-toolkit's
//! schema): TLS, client certificates, basic auth and security headers for every listener.
//!
//! Operators already write this file for node_exporter and dcgm-exporter, Prometheus's scrape
//! configs assume it and `promtool check web-config` checks it, so we read the same schema
//! rather than invent one. It is parsed strictly: a key exporter-toolkit does not know, or a
//! value we cannot honour exactly, is an error naming the key, never a silent downgrade.

mod auth;
mod tls;
mod watch;

pub use auth::BasicAuth;
pub use watch::Watched;

use hyper::header::{HeaderName, HeaderValue};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A file this large is not a web config (nor a certificate): refuse it rather than read it.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// What the web config's guards turned away, and how its reloads went, for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    pub reloads_ok: AtomicU64,
    pub reloads_failed: AtomicU64,
    /// Whether the last reload loaded (1 until one fails).
    pub last_reload_failed: AtomicBool,
    pub handshakes_failed: AtomicU64,
    pub unauthorized: AtomicU64,
}

impl Counters {
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why a web config cannot be used, naming the YAML key (`tls_server_config.key_file`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: `{key}`: {message}", path.display())]
pub struct WebConfigError {
    pub path: PathBuf,
    pub key: String,
    pub message: String,
}

/// The web config as start-up read it (a bad one is a config error there): what the HTTP
/// server's watcher starts from.
#[derive(Clone)]
pub struct WebConfig {
    pub path: PathBuf,
    pub loaded: std::sync::Arc<Active>,
    /// `/-/healthy` is served without basic auth.
    pub health_without_auth: bool,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("path", &self.path)
            .field("health_without_auth", &self.health_without_auth)
            .finish()
    }
}

/// One reading of the file and of what it names: what a connection is served with.
pub struct Active {
    /// `None` serves plain HTTP.
    pub tls: Option<Tls>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub auth: Option<BasicAuth>,
    /// Every file this reading came from, to notice when one changes.
    files: Vec<PathBuf>,
}

/// The acceptors of one TLS configuration.
#[derive(Clone)]
pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// The same without HTTP/2 in its ALPN list, for the 503 written to a connection over
    /// `max_connections` in HTTP/1.1.
    pub busy: tokio_rustls::TlsAcceptor,
    /// Versions, client certificates and ALPN, in words.
    summary: String,
    /// Every client shows a verified certificate (`RequireAndVerifyClientCert`).
    pub requires_client_cert: bool,
}

impl Active {
    /// What a connection gets, in a few lines, for `check-web-config`.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        out += &match &self.tls {
            Some(tls) => format!("tls: {}\n", tls.summary),
            None => "tls: off (plain HTTP)\n".to_owned(),
        };
        out += &match &self.auth {
            Some(auth) => format!("basic auth: {} user(s)\n", auth.users()),
            None => "basic auth: off\n".to_owned(),
        };
        for (name, value) in &self.headers {
            out += &format!("header: {name}: {}\n", value.to_str().unwrap_or("?"));
        }
        out
    }
}

impl std::fmt::Debug for Active {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Active")
            .field("tls", &self.tls.is_some())
            .field("headers", &self.headers)
            .field("auth", &self.auth.is_some())
            .field("files", &self.files)
            .finish()
    }
}

/// The file's schema, exactly exporter-toolkit's.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsServer>,
    http_server_config: Option<HttpServer>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsServer {
    cert_file: Option<String>,
    key_file: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    client_ca: Option<String>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
}

impl TlsServer {
    /// exporter-toolkit serves plain HTTP when the section says nothing.
    fn is_empty(&self) -> bool {
        self.cert_file.is_none()
            && self.key_file.is_none()
            && self.cert.is_none()
            && self.key.is_none()
            && self.client_auth_type.is_none()
            && self.client_ca_file.is_none()
            && self.client_ca.is_none()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpServer {
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// The headers exporter-toolkit lets the file set, with the values it allows (`None`: any).
const HEADERS: &[(&str, Option<&[&str]>)] = &[
    ("Strict-Transport-Security", None),
    ("X-Content-Type-Options", Some(&["nosniff"])),
    ("X-Frame-Options", Some(&["deny", "sameorigin"])),
    ("X-XSS-Protection", None),
    ("Content-Security-Policy", None),
];

/// A key of the file and what is wrong with it, before the file's path is attached.
type Problem = (String, String);

fn problem(key: impl Into<String>, message: impl Into<String>) -> Problem {
    (key.into(), message.into())
}

/// Reads and checks the web config at `path`, and every file it names (relative to its folder).
pub fn load(path: &Path) -> Result<Active, WebConfigError> {
    let fail = |(key, message): Problem| WebConfigError {
        path: path.to_owned(),
        key,
        message,
    };
    let text = read_text(path).map_err(|m| fail(problem("(file)", m)))?;
    let file = parse(&text).map_err(fail)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut files = vec![path.to_owned()];
    let http2 = file
        .http_server_config
        .as_ref()
        .and_then(|h| h.http2)
        .unwrap_or(true);
    let headers = headers(file.http_server_config.as_ref()).map_err(fail)?;
    let auth = match &file.basic_auth_users {
        Some(users) if !users.is_empty() => Some(BasicAuth::new(users).map_err(fail)?),
        _ => None,
    };
    let tls = match &file.tls_server_config {
        Some(t) if !t.is_empty() => {
            let (config, read, summary) = tls::server_config(t, dir, http2).map_err(fail)?;
            files.extend(read);
            let mut busy = config.clone();
            busy.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(Tls {
                acceptor: tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)),
                busy: tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(busy)),
                summary,
                requires_client_cert: t.client_auth_type.as_deref()
                    == Some("RequireAndVerifyClientCert"),
            })
        }
        Some(t) => {
            let tuned = t.client_allowed_sans.is_some()
                || t.min_version.is_some()
                || t.max_version.is_some()
                || t.cipher_suites.is_some()
                || t.curve_preferences.is_some()
                || t.prefer_server_cipher_suites.is_some();
            if tuned {
                return Err(fail(problem(
                    "tls_server_config.cert_file",
                    "TLS settings are given without a certificate: give cert_file and key_file",
                )));
            }
            None
        }
        None => None,
    };
    Ok(Active {
        tls,
        headers,
        auth,
        files,
    })
}

/// YAML to our schema, naming the key of the first thing that does not fit.
fn parse(text: &str) -> Result<File, Problem> {
    // Through a JSON value: serde_path_to_error then gives the full key of a problem
    // (`tls_server_config.client_auth_type`), which the YAML deserializer alone does not.
    let value: serde_json::Value =
        serde_saphyr::from_str(text).map_err(|e| problem("(file)", format!("not YAML: {e}")))?;
    if value.is_null() {
        // An empty file (or only comments): plain HTTP, no auth, as exporter-toolkit does.
        return Ok(File::default());
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let key = e.path().to_string();
        let key = if key == "." { "(file)".to_owned() } else { key };
        problem(key, e.into_inner().to_string())
    })
}

fn headers(http: Option<&HttpServer>) -> Result<Vec<(HeaderName, HeaderValue)>, Problem> {
    let mut out = Vec::new();
    for (name, value) in http.and_then(|h| h.headers.as_ref()).into_iter().flatten() {
        let key = format!("http_server_config.headers.{name}");
        let Some((canonical, allowed)) = HEADERS
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(name))
        else {
            let known: Vec<&str> = HEADERS.iter().map(|(h, _)| *h).collect();
            return Err(problem(
                key,
                format!(
                    "this header cannot be set here; these can: {}",
                    known.join(", ")
                ),
            ));
        };
        if let Some(allowed) = allowed {
            if !allowed.iter().any(|a| a.eq_ignore_ascii_case(value)) {
                return Err(problem(
                    key,
                    format!("{value:?} is not allowed; it must be one of {allowed:?}"),
                ));
            }
        }
        let value =
            HeaderValue::from_str(value).map_err(|_| problem(&key, "not a valid header value"))?;
        out.push((HeaderName::from_static(lower(canonical)), value));
    }
    Ok(out)
}

/// `HeaderName::from_static` wants lower case; the table is written as people write headers.
fn lower(name: &'static str) -> &'static str {
    match name {
        "Strict-Transport-Security" => "strict-transport-security",
        "X-Content-Type-Options" => "x-content-type-options",
        "X-Frame-Options" => "x-frame-options",
        "X-XSS-Protection" => "x-xss-protection",
        _ => "content-security-policy",
    }
}

/// Reads a small file, refusing one that is not.
fn read_text(path: &Path) -> Result<String, String> {
    let bytes = read_bytes(path)?;
    String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "{} is larger than {MAX_FILE_BYTES} bytes",
            path.display()
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(text: &str) -> String {
        match parse(text) {
            Ok(_) => "(ok)".to_owned(),
            Err((key, _)) => key,
        }
    }

    #[test]
    fn a_problem_names_its_full_key() {
        assert_eq!(
            key_of("tls_server_config:\n  cert_fil: x\n"),
            "tls_server_config.cert_fil"
        );
        assert_eq!(
            key_of("tls_server_config:\n  client_allowed_sans: 3\n"),
            "tls_server_config.client_allowed_sans"
        );
        assert_eq!(key_of("basic_auth: {}\n"), "basic_auth");
        assert_eq!(
            key_of("http_server_config:\n  http2: maybe\n"),
            "http_server_config.http2"
        );
        assert_eq!(key_of(""), "(ok)");
        assert_eq!(key_of("# only a comment\n"), "(ok)");
        assert_eq!(key_of("basic_auth_users:\n  alice: $2y$10$x\n"), "(ok)");
    }

    #[test]
    fn only_the_allowed_headers_and_values() {
        let http = |name: &str, value: &str| HttpServer {
            http2: None,
            headers: Some([(name.to_owned(), value.to_owned())].into()),
        };
        assert!(headers(Some(&http("X-Frame-Options", "deny"))).is_ok());
        assert!(headers(Some(&http("x-frame-options", "SAMEORIGIN"))).is_ok());
        let (key, _) = headers(Some(&http("X-Frame-Options", "allow"))).unwrap_err();
        assert_eq!(key, "http_server_config.headers.X-Frame-Options");
        assert!(headers(Some(&http("Set-Cookie", "a=b"))).is_err());
        assert!(headers(Some(&http("X-Content-Type-Options", "sniff"))).is_err());
        let ok = headers(Some(&http("Strict-Transport-Security", "max-age=31536000"))).unwrap();
        assert_eq!(ok[0].0.as_str(), "strict-transport-security");
    }
}
