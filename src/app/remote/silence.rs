//! `silence add|list|expire`: the command line's client of the sidecar's silence API
//! ([`crate::sinks::http::silences`]), one request each, reading the answers as the server writes them.

use super::status::remote;
use crate::app::cli::{SilenceArgs, SilenceCommand};
use crate::http_client;
use crate::sinks::http::silences::{Listed, Shown};

/// Sends the command's request to the sidecar and prints what it answered.
pub fn run(args: &SilenceArgs) -> anyhow::Result<()> {
    let (path, outgoing) = match &args.command {
        SilenceCommand::Add {
            for_,
            alert,
            partition,
            comment,
            ..
        } => (
            crate::sinks::http::silences::PATH.to_owned(),
            http_client::Outgoing {
                body: Some(
                    serde_json::json!({"for": for_, "alert": alert, "partition": partition, "comment": comment})
                        .to_string()
                        .into(),
                ),
                content_type: Some("application/json"),
                ..Default::default()
            },
        ),
        SilenceCommand::List { .. } => (
            crate::sinks::http::silences::PATH.to_owned(),
            http_client::Outgoing::default(),
        ),
        SilenceCommand::Expire { id, .. } => (
            format!("{}/{id}", crate::sinks::http::silences::PATH),
            http_client::Outgoing {
                method: Some(hyper::Method::DELETE),
                ..Default::default()
            },
        ),
    };
    let (url, client) = remote(args.command.remote(), &path)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let answer = runtime
        .block_on(http_client::send(
            &client,
            &url,
            &outgoing,
            std::time::Duration::from_secs(10),
            16 * 1024 * 1024,
        ))
        .map_err(|e| anyhow::anyhow!("cannot reach the sidecar at {url}: {e}"))?;
    let body = String::from_utf8_lossy(&answer.body);
    anyhow::ensure!(
        answer.status == 200,
        "{url} answered {}: {}",
        answer.status,
        body.trim()
    );
    let unexpected = |e| anyhow::anyhow!("{url} did not answer a pipeline-pulse silence: {e}");
    match &args.command {
        SilenceCommand::Add { .. } => {
            let shown: Shown = serde_json::from_str(&body).map_err(unexpected)?;
            println!("{}", line(&shown));
        }
        SilenceCommand::List { .. } => {
            let listed: Listed = serde_json::from_str(&body).map_err(unexpected)?;
            if listed.silences.is_empty() {
                println!("no silences");
            }
            for shown in &listed.silences {
                println!("{}", line(shown));
            }
        }
        SilenceCommand::Expire { id, .. } => println!("{id} expired"),
    }
    Ok(())
}

/// `s3  active until 2026-12-01T17:00:00Z  Stalled B1  "maintenance"`.
fn line(shown: &Shown) -> String {
    let s = &shown.silence;
    let until = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(s.ends_at.max(0.0)),
    );
    let state = if shown.active == Some(false) {
        "ended"
    } else {
        "active until"
    };
    format!(
        "{}  {state} {until}  {} {}  {:?}",
        s.id,
        s.alert.as_deref().unwrap_or("every alert"),
        s.partition.as_deref().unwrap_or("every partition"),
        s.comment
    )
}
