//! `test-notify`: one test message through every configured channel, now, past the outbox and
//! the rounds. A room of its own because it shares the payload builders and the transports
//! with the engine and nothing else: no state, no lifecycle, no counters.

use crate::clock;
use crate::rules::{AlertName, Condition};
use crate::sinks::alert::channel::Shape;
use crate::sinks::alert::delivery::{self, Outcome, Transport};
use crate::sinks::alert::email::{self, Context};
use crate::sinks::alert::lifecycle::{Kind, Notification};
use crate::sinks::alert::payload;
use crate::sinks::alert::settings::{AlertConfig, Delivery};

/// `test-notify`: one test message through every configured channel, now, without the
/// outbox; each channel's outcome, in the order configured.
pub async fn send_tests(config: &AlertConfig) -> Vec<(String, Result<(), String>)> {
    let mut out = Vec::new();
    if let Some(delivery) = &config.delivery {
        let result = send_test(delivery, &config.context).await;
        out.push((format!("email to {}", delivery.to.join(", ")), result));
    }
    let now = clock::now();
    let test = Condition {
        alert: AlertName::RunFinished,
        partition: None,
        summary: format!(
            "a test notification from pipeline-pulse on {}",
            config.context.host
        ),
        details: "Sent by `pipeline-pulse test-notify`; alerts will arrive here like this one."
            .to_owned(),
        cause: None,
        began_at: None,
        wait_at_most: None,
    };
    let notice = Notification {
        kind: Kind::Notice,
        condition: test,
        since: now,
    };
    for channel in &config.http {
        // Resolved as it is pushed: an Alertmanager takes it (proving the path) and pages no
        // one.
        let resolved = channel.shape == Shape::AlertmanagerApi;
        let mut alert = payload::alert(&notice.condition, &config.context, now, now, resolved);
        alert
            .labels
            .insert("alertname".to_owned(), "PipelinePulseTest".to_owned());
        let body = payload::body(
            channel.shape,
            &[alert],
            std::slice::from_ref(&notice),
            None,
            &config.context,
            &channel.name,
        );
        let result = match channel.client() {
            Ok(client) => match channel
                .send(&client, &body.to_string(), config.http_timeout)
                .await
            {
                Outcome::Sent => Ok(()),
                Outcome::Retry(e, _) | Outcome::Rejected(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        out.push((format!("{} ({})", channel.name, channel.url), result));
    }
    out
}

/// One test email through the configured transport, now, without the outbox.
pub async fn send_test(delivery: &Delivery, context: &Context) -> Result<(), String> {
    let transport = Transport::build(&delivery.target, delivery.timeout)?;
    let now = clock::now();
    let email = email::Email {
        subject: format!("[pulse] test email from {}", context.host),
        text: format!("This is a test email from pipeline-pulse on {}. Alert emails will arrive like this one.\n", context.host),
        html: format!("<p>This is a test email from pipeline-pulse on {}. Alert emails will arrive like this one.</p>", context.host),
        chart: None,
        stacks: None,
    };
    let id = format!("pulse-test-{}", (now * 1000.0) as u64);
    let message = delivery::compose(
        &email,
        &delivery.from,
        &delivery.to,
        vec![],
        id,
        &context.host,
    )?;
    match delivery::deliver(&transport, &message, delivery.timeout).await {
        Outcome::Sent => Ok(()),
        Outcome::Retry(e, _) | Outcome::Rejected(e) => Err(e),
    }
}

/// `test-notify`: one test notification on every configured channel, each outcome printed;
/// an error when any failed.
pub fn test_notify(config: &AlertConfig) -> anyhow::Result<()> {
    anyhow::ensure!(
        config.notifies(),
        "no channel is configured: set smtp and email_to, alertmanager_urls or [[webhooks]]"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let results = runtime.block_on(send_tests(config));
    let mut failed = 0;
    for (channel, result) in &results {
        match result {
            Ok(()) => println!("sent a test notification: {channel}"),
            Err(e) => {
                failed += 1;
                eprintln!("pipeline-pulse: the test notification was not sent: {channel}: {e}");
            }
        }
    }
    anyhow::ensure!(
        failed == 0,
        "{failed} of {} channel(s) failed",
        results.len()
    );
    Ok(())
}
