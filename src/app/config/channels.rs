//! The HTTP channels' keys: `alertmanager_urls` and `[[webhooks]]`, validated into the alert
//! engine's channels. A token is read here, from a file or the environment, never from a flag
//! or the config file itself, and never written to the outbox.

use super::{key, ConfigError, RawConfig};
use crate::http_client::Url;
use crate::sinks::alert::channel::{HttpChannel, Shape};
use crate::sinks::alert::heartbeat::{self, HeartbeatConfig};
use hyper::header::{HeaderName, HeaderValue};
use std::time::Duration;

impl RawConfig {
    pub(super) fn heartbeat(&self) -> Result<Option<HeartbeatConfig>, ConfigError> {
        let Some(url) = &self.heartbeat_url else {
            if self.heartbeat_fail_url.is_some() || self.heartbeat_interval.is_some() {
                return Err(ConfigError::invalid(
                    "heartbeat_url",
                    "is needed with heartbeat_fail_url and heartbeat_interval",
                ));
            }
            return Ok(None);
        };
        let fail = self
            .heartbeat_fail_url
            .clone()
            .unwrap_or_else(|| heartbeat::fail_url(url));
        Ok(Some(HeartbeatConfig {
            url: Url::parse_web(url).map_err(|e| ConfigError::invalid("heartbeat_url", e))?,
            fail_url: Url::parse_web(&fail)
                .map_err(|e| ConfigError::invalid("heartbeat_fail_url", e))?,
            interval: key::heartbeat_interval.duration(self.heartbeat_interval.as_deref())?,
            timeout: self.webhook_timeout()?,
        }))
    }

    /// One POST's (or heartbeat ping's) time limit.
    fn webhook_timeout(&self) -> Result<Duration, ConfigError> {
        key::webhook_timeout.duration(self.webhook_timeout.as_deref())
    }

    pub(super) fn http_channels(&self) -> Result<(Vec<HttpChannel>, Duration), ConfigError> {
        let timeout = self.webhook_timeout()?;
        let mut out = Vec::new();
        for (i, url) in self.alertmanager_urls.iter().enumerate() {
            let key = format!("alertmanager_urls[{i}]");
            let base = Url::parse_web(url).map_err(|e| ConfigError::invalid(&key, e))?;
            // The base URL of an Alertmanager, as Prometheus takes it; the API path is ours.
            let url = format!("{}/api/v2/alerts", url.trim_end_matches('/'));
            if base.path != "/" && base.path.ends_with("/api/v2/alerts") {
                return Err(ConfigError::invalid(
                    key,
                    "give the Alertmanager's base URL (http://am:9093); /api/v2/alerts is added",
                ));
            }
            out.push(HttpChannel {
                name: key.clone(),
                url: Url::parse_web(&url).map_err(|e| ConfigError::invalid(&key, e))?,
                shape: Shape::AlertmanagerApi,
                headers: Vec::new(),
                ca_pem: None,
            });
        }
        for (i, hook) in self.webhooks.iter().enumerate() {
            let key = |k: &str| format!("webhooks[{i}].{k}");
            let shape = match hook.format.as_deref().unwrap_or("alertmanager") {
                "alertmanager" => Shape::Alertmanager,
                "slack" => Shape::Slack,
                other => {
                    return Err(ConfigError::invalid(
                        key("format"),
                        format!("{other:?} is not a format: use alertmanager or slack"),
                    ))
                }
            };
            let url = Url::parse_web(&hook.url).map_err(|e| ConfigError::invalid(key("url"), e))?;
            let mut headers = Vec::new();
            for (name, raw) in &hook.headers {
                let hkey = key(&format!("headers.{name}"));
                let name = HeaderName::try_from(name.as_str())
                    .map_err(|_| ConfigError::invalid(&hkey, "not an HTTP header name"))?;
                let value = match (&raw.file, &raw.env) {
                    (Some(file), None) => std::fs::read_to_string(file)
                        .map_err(|e| {
                            ConfigError::invalid(&hkey, format!("cannot read {}: {e}", file.display()))
                        })?
                        .trim_end_matches(['\n', '\r'])
                        .to_owned(),
                    (None, Some(var)) => std::env::var(var).map_err(|_| {
                        ConfigError::invalid(&hkey, format!("the environment variable {var} is not set"))
                    })?,
                    _ => {
                        return Err(ConfigError::invalid(
                            &hkey,
                            "give exactly one of file or env (a header's value is a secret: never in the config itself)",
                        ))
                    }
                };
                let text = format!("{}{value}", raw.prefix.as_deref().unwrap_or(""));
                let mut value = HeaderValue::from_str(&text).map_err(|_| {
                    ConfigError::invalid(&hkey, "the value read is not a valid header value")
                })?;
                value.set_sensitive(true);
                headers.push((name, value));
            }
            let ca_pem = match &hook.ca_file {
                Some(file) => Some(std::fs::read(file).map_err(|e| {
                    ConfigError::invalid(
                        key("ca_file"),
                        format!("cannot read {}: {e}", file.display()),
                    )
                })?),
                None => None,
            };
            let channel = HttpChannel {
                name: format!("webhooks[{i}]"),
                url,
                shape,
                headers,
                ca_pem,
            };
            channel
                .client()
                .map_err(|e| ConfigError::invalid(key("ca_file"), e))?;
            out.push(channel);
        }
        Ok((out, timeout))
    }
}
