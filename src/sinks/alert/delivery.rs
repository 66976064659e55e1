//! Getting an email out: SMTP through lettre, or `.eml` files in a folder (what `demo` uses).
//!
//! lettre's own timeout bounds only the TCP connect, so every send runs under
//! `tokio::time::timeout`: a server that accepts and never answers costs one timeout, then a
//! retry with backoff. A permanent (5xx) rejection is not retried.

use super::email::Email;
use crate::state::write_atomic;
use lettre::message::{header::ContentType, Attachment, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{Address, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    None,
    StartTls,
    Tls,
}

/// Where emails go, as configured (`--smtp`).
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    Smtp {
        host: String,
        port: u16,
        tls: TlsMode,
        user: Option<String>,
        password: Option<String>,
        /// A private CA to trust, PEM.
        ca_pem: Option<Vec<u8>>,
    },
    Files(PathBuf),
}

impl Target {
    /// `smtp://host[:port][?tls=none|starttls|tls]` or `file:///dir`. The credentials and CA
    /// come from elsewhere (never in a URL or a flag).
    pub fn parse(url: &str) -> Result<Target, String> {
        if let Some(dir) = url.strip_prefix("file://") {
            if dir.is_empty() {
                return Err(
                    "file:// needs a folder, as in file:///var/lib/pipeline-pulse/mail".into(),
                );
            }
            return Ok(Target::Files(PathBuf::from(dir)));
        }
        let rest = url.strip_prefix("smtp://").ok_or_else(|| {
            format!("{url:?} is neither smtp://host:port?tls=... nor file:///dir")
        })?;
        let (authority, query) = rest.split_once('?').unwrap_or((rest, ""));
        let authority = authority.trim_end_matches('/');
        if authority.contains('@') {
            return Err("put the SMTP user in smtp_user and the password in smtp_password_file or smtp_password_env, not in the URL".into());
        }
        let mut tls = TlsMode::StartTls;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("tls", "none")) => tls = TlsMode::None,
                Some(("tls", "starttls")) => tls = TlsMode::StartTls,
                Some(("tls", "tls")) => tls = TlsMode::Tls,
                _ => {
                    return Err(format!(
                        "unknown SMTP URL option {pair:?}; use tls=none, tls=starttls or tls=tls"
                    ))
                }
            }
        }
        let default_port = match tls {
            TlsMode::Tls => 465,
            TlsMode::StartTls => 587,
            TlsMode::None => 25,
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                let port = p
                    .parse::<u16>()
                    .ok()
                    .filter(|port| *port != 0)
                    .ok_or_else(|| format!("{p:?} is not a port: it must be 1 to 65535"))?;
                (h, port)
            }
            _ => (authority, default_port),
        };
        if host.is_empty() {
            return Err(format!("{url:?} has no host"));
        }
        Ok(Target::Smtp {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            tls,
            user: None,
            password: None,
            ca_pem: None,
        })
    }
}

/// A built transport. Build it inside the async runtime (lettre's pool spawns on it).
pub enum Transport {
    Smtp(AsyncSmtpTransport<Tokio1Executor>),
    Files(PathBuf),
}

impl Transport {
    pub fn build(target: &Target, timeout: Duration) -> Result<Transport, String> {
        match target {
            Target::Files(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                Ok(Transport::Files(dir.clone()))
            }
            Target::Smtp {
                host,
                port,
                tls,
                user,
                password,
                ca_pem,
            } => {
                let params = || -> Result<TlsParameters, String> {
                    let mut builder = TlsParameters::builder(host.clone());
                    if let Some(pem) = ca_pem {
                        let cert = Certificate::from_pem(pem)
                            .map_err(|e| format!("the CA file is not a PEM certificate: {e}"))?;
                        builder = builder.add_root_certificate(cert);
                    }
                    builder.build_rustls().map_err(|e| e.to_string())
                };
                let tls = match tls {
                    TlsMode::None => Tls::None,
                    TlsMode::StartTls => Tls::Required(params()?),
                    TlsMode::Tls => Tls::Wrapper(params()?),
                };
                let mut builder =
                    AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host.as_str())
                        .port(*port)
                        .tls(tls)
                        .timeout(Some(timeout));
                if let Some(user) = user {
                    builder = builder.credentials(Credentials::new(
                        user.clone(),
                        password.clone().unwrap_or_default(),
                    ));
                }
                Ok(Transport::Smtp(builder.build()))
            }
        }
    }
}

/// A message waiting in the outbox: rendered once, so a retry sends the very same bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outgoing {
    pub id: String,
    pub subject: String,
    /// The alerts it carries, for `pulse_notifications_total`.
    pub alerts: Vec<String>,
    /// `email`, or the HTTP channel's config key (`webhooks[0]`). Outboxes saved before there
    /// were channels hold emails.
    #[serde(default = "email_channel")]
    pub channel: String,
    /// For an email; empty for an HTTP channel.
    #[serde(default)]
    pub from: String,
    #[serde(default)]
    pub to: Vec<String>,
    /// The email's MIME text, or the JSON an HTTP channel posts.
    pub raw: String,
    pub attempts: u32,
    pub next_attempt_at: f64,
}

/// The channel of every email.
pub const EMAIL: &str = "email";

fn email_channel() -> String {
    EMAIL.to_owned()
}

/// Builds the MIME message (text and HTML alternatives).
pub fn compose(
    email: &Email,
    from: &str,
    to: &[String],
    alerts: Vec<String>,
    id: String,
    host: &str,
) -> Result<Outgoing, String> {
    let from_box: Mailbox = from
        .parse()
        .map_err(|e| format!("email_from {from:?}: {e}"))?;
    let mut builder = Message::builder()
        .from(from_box)
        .subject(email.subject.clone())
        .message_id(Some(format!("<{id}@{host}>")));
    for addr in to {
        let mailbox: Mailbox = addr
            .parse()
            .map_err(|e| format!("email_to {addr:?}: {e}"))?;
        builder = builder.to(mailbox);
    }
    let html = SinglePart::builder()
        .header(ContentType::TEXT_HTML)
        .body(email.html.clone());
    let text = SinglePart::builder()
        .header(ContentType::TEXT_PLAIN)
        .body(email.text.clone());
    // With a chart, the HTML and its picture travel together as multipart/related, which is
    // how mail clients resolve the HTML's `cid:` reference.
    let body = match &email.chart {
        Some(png) => MultiPart::alternative().singlepart(text).multipart(
            MultiPart::related().singlepart(html).singlepart(
                Attachment::new_inline(super::email::CHART_ID.to_owned())
                    .body(png.clone(), "image/png".parse().expect("a MIME type")),
            ),
        ),
        None => MultiPart::alternative().singlepart(text).singlepart(html),
    };
    // The stacks' dumps go beside the message as a text file, for a reader to open or grep.
    let body = match &email.stacks {
        Some(dump) => MultiPart::mixed().multipart(body).singlepart(
            Attachment::new(super::email::STACKS_FILE.to_owned()).body(
                dump.clone(),
                "text/plain; charset=utf-8".parse().expect("a MIME type"),
            ),
        ),
        None => body,
    };
    let message = builder.multipart(body).map_err(|e| e.to_string())?;
    Ok(Outgoing {
        id,
        subject: email.subject.clone(),
        alerts,
        channel: email_channel(),
        from: from.to_owned(),
        to: to.to_vec(),
        raw: String::from_utf8_lossy(&message.formatted()).into_owned(),
        attempts: 0,
        next_attempt_at: 0.0,
    })
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Sent,
    /// Worth trying again later: the server is down, slow, or said 4xx (SMTP) or 5xx or 429
    /// (HTTP), with the seconds it asked us to wait, if it did.
    Retry(String, Option<f64>),
    /// The server said no for good (5xx): dropped, counted, logged.
    Rejected(String),
}

pub async fn deliver(transport: &Transport, message: &Outgoing, timeout: Duration) -> Outcome {
    match transport {
        Transport::Files(dir) => match write_atomic(
            &dir.join(format!("{}.eml", message.id)),
            message.raw.as_bytes(),
        ) {
            Ok(()) => Outcome::Sent,
            Err(e) => Outcome::Retry(format!("cannot write into {}: {e}", dir.display()), None),
        },
        Transport::Smtp(smtp) => {
            let envelope = match envelope(message) {
                Ok(e) => e,
                Err(e) => return Outcome::Rejected(e),
            };
            match tokio::time::timeout(timeout, smtp.send_raw(&envelope, message.raw.as_bytes()))
                .await
            {
                Ok(Ok(_)) => Outcome::Sent,
                Ok(Err(e)) if e.is_permanent() => Outcome::Rejected(describe(&e)),
                Ok(Err(e)) => Outcome::Retry(describe(&e), None),
                Err(_) => Outcome::Retry(
                    format!("the SMTP server did not finish within {timeout:?}"),
                    None,
                ),
            }
        }
    }
}

fn envelope(message: &Outgoing) -> Result<lettre::address::Envelope, String> {
    let from: Address = message
        .from
        .parse::<Mailbox>()
        .map_err(|e| e.to_string())?
        .email;
    let to = message
        .to
        .iter()
        .map(|t| {
            t.parse::<Mailbox>()
                .map(|m| m.email)
                .map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    lettre::address::Envelope::new(Some(from), to).map_err(|e| e.to_string())
}

/// lettre's errors with their source chain, which is where the useful part (the server's
/// reply, the TLS problem) lives.
fn describe(e: &lettre::transport::smtp::Error) -> String {
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        let text = inner.to_string();
        if !s.contains(&text) {
            s += &format!(": {text}");
        }
        source = inner.source();
    }
    s
}

/// Seconds to wait before attempt `attempts + 1`: `base`, doubling, at most 60 × `base`.
pub fn backoff(attempts: u32, base: f64) -> f64 {
    (base * 2f64.powi(attempts.saturating_sub(1).min(16) as i32)).min(60.0 * base)
}

/// The `alert` field of a log event about notifications: each alert once, comma-separated
/// (`Stalled`, or `Stalled,ServerDown` for one email about several).
pub fn alert_names<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut distinct: Vec<&str> = Vec::new();
    for name in names {
        if !distinct.contains(&name) {
            distinct.push(name);
        }
    }
    distinct.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_urls() {
        assert_eq!(
            Target::parse("smtp://mail.example.com:2525?tls=none").unwrap(),
            Target::Smtp {
                host: "mail.example.com".into(),
                port: 2525,
                tls: TlsMode::None,
                user: None,
                password: None,
                ca_pem: None
            }
        );
        assert!(matches!(
            Target::parse("smtp://mail").unwrap(),
            Target::Smtp {
                port: 587,
                tls: TlsMode::StartTls,
                ..
            }
        ));
        assert!(matches!(
            Target::parse("smtp://mail?tls=tls").unwrap(),
            Target::Smtp { port: 465, .. }
        ));
        assert_eq!(
            Target::parse("file:///tmp/mail").unwrap(),
            Target::Files("/tmp/mail".into())
        );
        assert!(Target::parse("smtp://user:pw@mail")
            .unwrap_err()
            .contains("smtp_password_file"));
        assert!(Target::parse("smtp://mail?tls=maybe").is_err());
        assert!(Target::parse("http://mail").is_err());
        assert!(Target::parse("smtp://mail:port").is_err());
    }

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1, 10.0), 10.0);
        assert_eq!(backoff(2, 10.0), 20.0);
        assert_eq!(backoff(3, 10.0), 40.0);
        assert_eq!(backoff(30, 10.0), 600.0);
    }

    #[test]
    fn composed_messages_carry_both_parts() {
        let email = Email {
            subject: "[pulse] FIRING Stalled: B1 on node, no progress for 14m".into(),
            text: "plain body".into(),
            html: "<p>html body</p>".into(),
            chart: None,
            stacks: None,
        };
        let m = compose(
            &email,
            "pulse@node",
            &["a@example.com".into(), "b@example.com".into()],
            vec!["Stalled".into()],
            "pulse-1".into(),
            "node",
        )
        .unwrap();
        assert!(m.raw.contains("Subject: [pulse] FIRING Stalled"));
        assert!(m.raw.contains("multipart/alternative"));
        assert!(m.raw.contains("plain body") && m.raw.contains("html body"));
        assert!(m.raw.contains("Message-ID: <pulse-1@node>"));
        assert!(
            compose(&email, "not an address", &[], vec![], "x".into(), "n")
                .unwrap_err()
                .contains("email_from")
        );
    }
}
