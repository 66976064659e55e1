//! The alerting keys: rules, SMTP and email addresses, validated into the alert engine's
//! configuration.

use super::keys::{self, key};
use super::tables::Threshold;
use super::{in_span, ConfigError, RawConfig, Span};
use crate::rules::AlertName;
use crate::rules::Rules;
use crate::sinks::alert::delivery::Target;
use crate::sinks::alert::email::Context;
use crate::sinks::alert::settings::{AlertConfig, Delivery};
use std::time::Duration;

/// The most bytes of one process's py-spy dump that are read: 8 ranks of a deep engine stack
/// fit many times over.
const STACKS_CAP: usize = 1 << 20;

impl RawConfig {
    pub(super) fn alerts(
        &self,
        run: Option<crate::run_identity::RunLabel>,
    ) -> Result<AlertConfig, ConfigError> {
        let interval = key::alert_interval.duration(self.alert_interval.as_deref())?;
        let repeat = key::repeat_interval.duration(self.repeat_interval.as_deref())?;
        let mut rules = Rules::default();
        for (name, raw) in &self.rules {
            let key = |k: &str| format!("rules.{name}.{k}");
            let alert = AlertName::parse(name).ok_or_else(|| {
                let known: Vec<&str> = AlertName::ALL.iter().map(|a| a.as_str()).collect();
                ConfigError::invalid(
                    format!("rules.{name}"),
                    format!("unknown rule; the rules are {}", known.join(", ")),
                )
            })?;
            let rule = rules.0.get_mut(&alert).expect("every rule has a default");
            if let Some(enabled) = raw.enabled {
                rule.enabled = enabled;
            }
            if let Some(threshold) = &raw.threshold {
                rule.threshold = threshold_value(alert, threshold, &key("threshold"))?;
            }
            for (field, value, seconds) in [
                (
                    &keys::field::rules_window,
                    &raw.window,
                    &mut rule.window_seconds,
                ),
                (
                    &keys::field::rules_history,
                    &raw.history,
                    &mut rule.history_seconds,
                ),
            ] {
                let name = field.name;
                let Some(text) = value else { continue };
                if alert != AlertName::ThroughputDrop {
                    return Err(ConfigError::invalid(
                        key(name),
                        format!("only ThroughputDrop takes {name}"),
                    ));
                }
                *seconds = field.duration_as(&key(name), Some(text))?.as_secs_f64();
            }
            if let Some(text) = &raw.for_ {
                rule.for_seconds = keys::field::rules_for
                    .duration_as(&key("for"), Some(text))?
                    .as_secs_f64();
            }
        }
        if let Some(stall) = &self.stall_after {
            let rule = rules.0.get_mut(&AlertName::Stalled).expect("default");
            rule.threshold = key::stall_after.duration(Some(stall))?.as_secs_f64();
        }
        let host = self.hostname.clone().unwrap_or_else(hostname);
        let delivery = match &self.smtp {
            None => {
                if !self.email_to.is_empty() {
                    return Err(ConfigError::invalid("smtp", "is required when email_to is set (smtp://host:port?tls=starttls, or file:///dir)"));
                }
                None
            }
            Some(url) => Some(self.delivery(url, &host)?),
        };
        let (http, http_timeout) = self.http_channels()?;
        Ok(AlertConfig {
            rules,
            interval,
            repeat,
            delivery,
            http,
            http_timeout,
            retry_backoff: key::retry_backoff.duration(self.retry_backoff.as_deref())?,
            stacks: self.stacks_tool()?,
            actions: self.actions()?,
            context: Context {
                host,
                dashboard_url: self.dashboard_url.clone(),
                status_url: self.status_url.clone(),
                run,
            },
        })
    }

    /// py-spy is looked for once, at start: where it is missing, the alerts say so and go out
    /// without stacks.
    fn stacks_tool(
        &self,
    ) -> Result<Option<std::sync::Arc<dyn crate::model::stacks::TakeStacks>>, ConfigError> {
        if self.stacks == Some(false) {
            return Ok(None);
        }
        let deadline = key::stacks_timeout.duration(self.stacks_timeout.as_deref())?;
        let program = self.stacks_py_spy.as_deref().unwrap_or("py-spy");
        if program.is_empty() {
            return Err(ConfigError::invalid(
                "stacks_py_spy",
                "is empty: give py-spy's path, or set stacks = false",
            ));
        }
        Ok(Some(std::sync::Arc::new(
            crate::sources::stacks::capture::Tool::new(program, deadline, STACKS_CAP),
        )))
    }

    fn delivery(&self, url: &str, host: &str) -> Result<Delivery, ConfigError> {
        let mut target = Target::parse(url).map_err(|e| ConfigError::invalid("smtp", e))?;
        if self.email_to.is_empty() {
            return Err(ConfigError::invalid(
                "email_to",
                "needs at least one address when smtp is set",
            ));
        }
        for (i, to) in self.email_to.iter().enumerate() {
            to.parse::<lettre::message::Mailbox>().map_err(|e| {
                ConfigError::invalid(
                    format!("email_to[{i}]"),
                    format!("{to:?} is not an email address: {e}"),
                )
            })?;
        }
        let from = self
            .email_from
            .clone()
            .unwrap_or_else(|| format!("pipeline-pulse@{host}"));
        from.parse::<lettre::message::Mailbox>().map_err(|e| {
            ConfigError::invalid(
                "email_from",
                format!("{from:?} is not an email address: {e}"),
            )
        })?;
        if let Target::Smtp {
            user,
            password,
            ca_pem,
            ..
        } = &mut target
        {
            *user = self.smtp_user.clone();
            *password = match (&self.smtp_password_file, &self.smtp_password_env) {
                (Some(_), Some(_)) => {
                    return Err(ConfigError::invalid(
                        "smtp_password_env",
                        "give smtp_password_file or smtp_password_env, not both",
                    ))
                }
                (Some(file), None) => Some(
                    std::fs::read_to_string(file)
                        .map_err(|e| {
                            ConfigError::invalid(
                                "smtp_password_file",
                                format!("cannot read {}: {e}", file.display()),
                            )
                        })?
                        .trim_end_matches(['\n', '\r'])
                        .to_owned(),
                ),
                (None, Some(var)) => Some(std::env::var(var).map_err(|_| {
                    ConfigError::invalid(
                        "smtp_password_env",
                        format!("the environment variable {var} is not set"),
                    )
                })?),
                (None, None) => None,
            };
            if password.is_some() && user.is_none() {
                return Err(ConfigError::invalid(
                    "smtp_user",
                    "is required with a password",
                ));
            }
            if let Some(file) = &self.smtp_ca_file {
                let pem = std::fs::read(file).map_err(|e| {
                    ConfigError::invalid(
                        "smtp_ca_file",
                        format!("cannot read {}: {e}", file.display()),
                    )
                })?;
                lettre::transport::smtp::client::Certificate::from_pem(&pem).map_err(|e| {
                    ConfigError::invalid(
                        "smtp_ca_file",
                        format!("{} is not a PEM certificate: {e}", file.display()),
                    )
                })?;
                *ca_pem = Some(pem);
            }
        }
        Ok(Delivery {
            target,
            from,
            to: self.email_to.clone(),
            timeout: key::smtp_timeout.duration(self.smtp_timeout.as_deref())?,
        })
    }
}

/// What a rule's threshold is (its kind in the rules table), and the values it may take.
pub(super) enum ThresholdKind {
    /// A silence: a duration (seconds if a bare number).
    Silence(Span),
    /// A share of requests, records or GPUs, 0 to 1.
    Ratio,
    /// A count of GPUs.
    Count(f64),
    /// The rule has no threshold of its own.
    None(String),
}

pub(super) fn threshold_kind(alert: AlertName) -> ThresholdKind {
    use crate::rules::ThresholdKind as Kind;
    match alert.rule().threshold_kind {
        Kind::Silence => ThresholdKind::Silence(key::stall_after.span()),
        Kind::Ratio => ThresholdKind::Ratio,
        Kind::Count(max) => ThresholdKind::Count(max),
        Kind::Of(other) => ThresholdKind::None(format!(
            "{alert} has no threshold of its own: it uses the {other} one"
        )),
        Kind::None => ThresholdKind::None(
            "this rule has no threshold; it takes `for` and `enabled`".to_owned(),
        ),
    }
}

/// A rule's threshold, checked against what the rule takes.
fn threshold_value(alert: AlertName, t: &Threshold, key: &str) -> Result<f64, ConfigError> {
    let bad = |message: String| Err(ConfigError::invalid(key, message));
    match (threshold_kind(alert), t) {
        (ThresholdKind::None(why), _) => bad(why),
        (ThresholdKind::Silence(span), Threshold::Text(text)) => {
            let d = humantime::parse_duration(text.trim()).map_err(|e| {
                ConfigError::invalid(key, format!("{text:?} is not a duration ({e})"))
            })?;
            Ok(in_span(key, d, text, span)?.as_secs_f64())
        }
        (ThresholdKind::Silence(span), Threshold::Number(n)) => {
            match Duration::try_from_secs_f64(*n) {
                Ok(d) => Ok(in_span(key, d, &n.to_string(), span)?.as_secs_f64()),
                Err(_) => bad(format!("{n} seconds is out of range: it must be {span}")),
            }
        }
        (ThresholdKind::Ratio, Threshold::Number(n)) if (0.0..=1.0).contains(n) => Ok(*n),
        (ThresholdKind::Ratio, Threshold::Number(n)) => {
            bad(format!("{n} is out of range: it is a ratio, 0 to 1"))
        }
        (ThresholdKind::Count(max), Threshold::Number(n))
            if (0.0..=max).contains(n) && n.fract() == 0.0 =>
        {
            Ok(*n)
        }
        (ThresholdKind::Count(max), Threshold::Number(n)) => bad(format!(
            "{n} is out of range: it is a number of GPUs, a whole number 0 to {max} (0: the most seen)"
        )),
        (_, Threshold::Text(text)) => bad(format!("{text:?}: this rule's threshold is a number")),
    }
}

/// The machine's host name, for email subjects and the default sender.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(name) if ok && !name.is_empty() => name.to_owned(),
        _ => "localhost".to_owned(),
    }
}
