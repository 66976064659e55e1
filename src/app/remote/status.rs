//! How `status --url` (and `silence`) reach a sidecar, behind its web config too: the CA to
//! trust, a client certificate for mutual TLS, and basic-auth credentials.
//!
//! The password never comes from a flag (flags show in `ps` and shell history): it is read
//! from `PULSE_PASSWORD` or from a file.

use crate::app::cli::Remote;
use crate::http_client::{self, Client, Url};
use crate::sinks::status::Status;
use anyhow::Context as _;
use base64::Engine;
use hyper::header::HeaderValue;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The environment variable `status` reads the basic-auth password from.
pub const PASSWORD_ENV: &str = "PULSE_PASSWORD";

#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// PEM CA certificates to trust instead of the Web PKI roots.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key, for a sidecar that requires one.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    /// `PULSE_PASSWORD`, as the caller read it.
    pub password_env: Option<String>,
}

impl Credentials {
    pub fn client(&self) -> Result<Client, String> {
        Ok(Client {
            tls: Some(Arc::new(self.tls()?)),
            authorization: self.authorization()?,
        })
    }

    fn tls(&self) -> Result<rustls::ClientConfig, String> {
        let ca = match &self.ca_file {
            Some(path) => Some(
                std::fs::read(path).map_err(|e| format!("--ca-file {}: {e}", path.display()))?,
            ),
            None => None,
        };
        let builder = http_client::tls_client(ca.as_deref()).map_err(|e| {
            let path = self.ca_file.as_deref().unwrap_or(Path::new(""));
            format!("--ca-file {}: {e}", path.display())
        })?;
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .map_err(|e| pem(cert, e))?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| pem(cert, e))?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| pem(key, e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("--cert-file and --key-file: {e}"))
            }
            (None, None) => Ok(builder.with_no_client_auth()),
            _ => Err("--cert-file and --key-file go together".to_owned()),
        }
    }

    fn authorization(&self) -> Result<Option<HeaderValue>, String> {
        let Some(user) = &self.user else {
            return Ok(None);
        };
        let password = match (&self.password_file, &self.password_env) {
            (Some(path), _) => std::fs::read_to_string(path)
                .map_err(|e| format!("--password-file {}: {e}", path.display()))?
                .trim_end_matches(['\n', '\r'])
                .to_owned(),
            (None, Some(password)) => password.clone(),
            (None, None) => {
                return Err(format!(
                    "--user {user} needs a password: set {PASSWORD_ENV} or give --password-file"
                ))
            }
        };
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let mut value = HeaderValue::from_str(&format!("Basic {encoded}"))
            .map_err(|_| "the user name cannot go in an HTTP header".to_owned())?;
        value.set_sensitive(true);
        Ok(Some(value))
    }
}

fn pem(path: &Path, e: rustls::pki_types::pem::Error) -> String {
    format!("{}: not usable PEM: {e}", path.display())
}

/// The URL of `path` on the sidecar `--url` names, and the client to reach it with.
pub fn remote(args: &Remote, path: &str) -> anyhow::Result<(Url, Client)> {
    let base = args.url.as_deref().unwrap_or("http://127.0.0.1:9721");
    let url = Url::parse_web(&format!("{}{path}", base.trim_end_matches('/')))
        .map_err(anyhow::Error::msg)?;
    let credentials = Credentials {
        ca_file: args.ca_file.clone(),
        cert_file: args.cert_file.clone(),
        key_file: args.key_file.clone(),
        user: args.user.clone(),
        password_file: args.password_file.clone(),
        password_env: std::env::var(PASSWORD_ENV).ok(),
    };
    let client = credentials.client().map_err(anyhow::Error::msg)?;
    Ok((url, client))
}

/// `status --url`: the running sidecar's `/status` document.
pub fn fetch(args: &Remote) -> anyhow::Result<Status> {
    let (url, client) = remote(args, "/status")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (code, body) = runtime
        .block_on(http_client::get_with(
            &client,
            &url,
            std::time::Duration::from_secs(10),
            64 * 1024 * 1024,
        ))
        .map_err(|e| anyhow::anyhow!("cannot reach the sidecar at {url}: {e}"))?;
    anyhow::ensure!(
        code != 401,
        "{url} answered 401: it asks for basic auth; give --user, and the password in {PASSWORD_ENV} or --password-file"
    );
    anyhow::ensure!(code == 200, "{url} answered {code}");
    serde_json::from_slice(&body)
        .with_context(|| format!("{url} did not answer a pipeline-pulse status"))
}
