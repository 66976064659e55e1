//! The heartbeat: a GET to an outside service (healthchecks.io, Uptime Kuma, a cron monitor)
//! every `heartbeat_interval` while the sidecar runs and reads its inputs. That service alarms
//! when the pings stop, which is the one failure the sidecar cannot report itself: the node,
//! the sidecar or its network gone. A collector that is down (a log unreadable, NVML lost)
//! sends the fail URL instead (`/fail` appended, healthchecks.io's convention, unless one is
//! configured), so the outside service alarms at once rather than after its grace time.

use crate::clock;
use crate::http_client::{self, Client, Url};
use crate::lock::{Locked, Published};
use crate::model::{AlertView, Run};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatConfig {
    pub url: Url,
    pub fail_url: Url,
    pub interval: Duration,
    pub timeout: Duration,
}

impl crate::sinks::SinkConfig for HeartbeatConfig {
    fn start(&self, cx: &crate::sinks::Context) -> Option<crate::sinks::Task> {
        Some(Box::pin(run_every(
            self.clone(),
            cx.run.clone(),
            cx.alerts.clone(),
        )))
    }
}

/// The collectors that are down, by name; empty when every input reads.
fn down(run: &Run) -> Vec<&'static str> {
    run.collectors()
        .iter()
        .filter(|(_, c)| !c.up)
        .map(|(collector, _)| collector.name())
        .collect()
}

/// Pings forever; abort the task to stop it. The first ping waits one interval, so that the
/// inputs have been read once and a collector still starting does not count as down.
pub async fn run_every(config: HeartbeatConfig, run: Arc<Mutex<Run>>, view: Published<AlertView>) {
    let client = match http_client::tls_client(None) {
        Ok(tls) => Client {
            tls: Some(Arc::new(tls.with_no_client_auth())),
            authorization: None,
        },
        Err(e) => {
            tracing::error!(url = %config.url, "the heartbeat cannot start: {e}");
            return;
        }
    };
    let mut ticks = tokio::time::interval(config.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        ping(&config, &client, &run, &view).await;
    }
}

async fn ping(
    config: &HeartbeatConfig,
    client: &Client,
    run: &Mutex<Run>,
    view: &Published<AlertView>,
) {
    let down = down(&run.locked());
    let url = if down.is_empty() {
        &config.url
    } else {
        &config.fail_url
    };
    match http_client::get_with(client, url, config.timeout, 64 * 1024).await {
        Ok((status, _)) if (200..300).contains(&status) => {
            if down.is_empty() {
                view.update(|v| v.heartbeat_last_success = Some(clock::now()));
            } else {
                tracing::info!(
                    url = %url,
                    "heartbeat: told {url} that {} is down",
                    down.join(", ")
                );
            }
        }
        Ok((status, _)) => tracing::warn!(url = %url, "heartbeat: {url} answered {status}"),
        Err(e) => tracing::warn!(url = %url, "heartbeat: {url}: {e}"),
    }
}

/// `/fail` after the path, before any query, as healthchecks.io takes it.
pub fn fail_url(url: &str) -> String {
    match url.split_once('?') {
        Some((path, query)) => format!("{}/fail?{query}", path.trim_end_matches('/')),
        None => format!("{}/fail", url.trim_end_matches('/')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::Collector;

    #[test]
    fn the_fail_url_goes_before_the_query() {
        assert_eq!(
            fail_url("https://hc-ping.com/abc"),
            "https://hc-ping.com/abc/fail"
        );
        assert_eq!(
            fail_url("https://hc-ping.com/abc/"),
            "https://hc-ping.com/abc/fail"
        );
        assert_eq!(
            fail_url("http://kuma/api/push/x?status=up"),
            "http://kuma/api/push/x/fail?status=up"
        );
    }

    #[test]
    fn a_collector_down_is_named() {
        let mut run = Run::default();
        run.set_collector(Collector::Log, true, 0.0);
        run.set_collector(Collector::Gpu, false, 0.0);
        assert_eq!(down(&run), ["gpu"]);
    }
}
