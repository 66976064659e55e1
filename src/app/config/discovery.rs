//! `--run-dir`: what discovery found, as the keys it fills (a key given always wins), and
//! the configuration to run with.

use super::{Config, ConfigError, RawConfig, RawLog, RawOutputs};
use crate::model::Discovered;
use crate::paths::normalize;
use crate::run_identity::Role;
use crate::sources::discovery::{describe, scan_within, STARTUP_SCAN_WAIT};
use crate::sources::probe::{SGLANG_HEALTH_INTERVAL, SGLANG_HEALTH_TIMEOUT};
use std::path::PathBuf;

/// Fills the keys that `raw` leaves unset with what was found. A key given keeps its value,
/// lists included: `--log` given means no log is discovered.
pub fn apply(found: &Discovered, raw: &mut RawConfig) {
    if raw.role.is_none() {
        raw.role = found.role;
    }
    // A server or worker node sees the run folder on a shared file system too: the progress
    // in it is the driver node's to report, or every run-wide sum would count it twice.
    if raw.role.is_none_or(Role::follows_progress) {
        apply_progress(found, raw);
    }
    if raw.server_logs.is_empty() {
        raw.server_logs = found.server_logs.iter().map(PathBuf::from).collect();
    }
    // A guess (the only server on the node, nothing tying it to the run) is shown, never
    // probed: its health is not the run's (docs/configuration.md, "Which server is the run's").
    let Some(server) = found.server.as_ref().filter(|s| s.tied()) else {
        return;
    };
    if raw.role.is_none_or(Role::probes_server) && server.serves_http {
        if raw.server_health_url.is_none() {
            raw.server_health_url = Some(server.health_url.clone());
            // Known by its command line before any of its metrics are read (SGLang serves
            // them only with --enable-metrics): asked as SGLang's /health from the start.
            if server.engine == "sglang" {
                let secs = |d: std::time::Duration| format!("{}s", d.as_secs());
                raw.server_health_interval
                    .get_or_insert_with(|| secs(SGLANG_HEALTH_INTERVAL));
                raw.server_health_timeout
                    .get_or_insert_with(|| secs(SGLANG_HEALTH_TIMEOUT));
            }
        }
        if raw.server_metrics_url.is_none() {
            raw.server_metrics_url = server.metrics_url.clone();
        }
    }
}

/// The run's progress: its logs, outputs, inputs and driver.
fn apply_progress(found: &Discovered, raw: &mut RawConfig) {
    if raw.logs.is_empty() {
        raw.logs = found
            .logs
            .iter()
            .map(|l| RawLog {
                path: l.path.clone().into(),
                format: l.format.parse().unwrap_or_default(),
                envelope: Default::default(),
                regex: None,
                unit_divisor: None,
            })
            .collect();
    }
    if raw.outputs.is_empty() {
        raw.outputs = found
            .outputs
            .iter()
            .map(|glob| RawOutputs {
                glob: glob.clone(),
                partition: found.output_partitions.get(glob).cloned(),
                ..Default::default()
            })
            .collect();
    }
    if raw.inputs.is_empty() {
        raw.inputs = found.inputs.clone();
    }
    if raw.process_match.is_none() && raw.pid_file.is_none() {
        if let Some(driver) = &found.driver {
            raw.process_match = Some(driver.program.clone());
            raw.process_dir = Some(PathBuf::from(&found.run_dir));
        }
    }
}

/// The configuration to run with: `raw` as given, and with `run_dir` what discovery found
/// for the keys it leaves unset.
pub fn configure(raw: RawConfig) -> Result<Config, ConfigError> {
    let Some(dir) = raw.run_dir.clone() else {
        return raw.validate();
    };
    if !dir.is_dir() {
        return Err(ConfigError::invalid(
            "run_dir",
            format!("{} is not a folder", dir.display()),
        ));
    }
    let dir = normalize(&dir);
    let found = scan_within(&dir, STARTUP_SCAN_WAIT).ok_or_else(|| {
        ConfigError::invalid(
            "run_dir",
            format!(
                "scanning {} and /proc has not returned in {} s: the file system under it (or a process in /proc) does not answer",
                dir.display(),
                STARTUP_SCAN_WAIT.as_secs()
            ),
        )
    })?;
    let mut merged = raw.clone();
    apply(&found, &mut merged);
    let mut config = merged.validate()?;
    for line in describe(&found) {
        tracing::info!("discovered: {line}");
    }
    // A server or worker node follows no progress log: its run's id is read from the logs
    // its run folder shows.
    if let Some(identity) = config.run_id.identity.as_mut() {
        if identity.logs.is_empty() {
            identity.logs = found.logs.iter().map(|l| PathBuf::from(&l.path)).collect();
        }
    }
    if let Some(role) = found.role {
        tracing::info!(
            "discovered: this node's role in the run is {}",
            role.as_str()
        );
    }
    config.discovered = Some((raw, found));
    Ok(config)
}

/// The TOML that `discover DIR` prints: the keys discovery fills, ready to pin with `--config`.
pub fn to_toml(found: &Discovered) -> String {
    let mut raw = RawConfig::default();
    apply(found, &mut raw);
    let mut out = format!("# pipeline-pulse discover {}\n", found.run_dir);
    for line in describe(found) {
        // A command line can hold newlines (`python -c SCRIPT`); a comment cannot.
        out.push_str(&format!("# {}\n", line.replace('\n', "\\n")));
    }
    out.push_str(&toml::to_string(&raw).expect("a RawConfig always serializes"));
    out
}
