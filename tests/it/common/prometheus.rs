//! A real Prometheus server for the tests, on a free loopback port, killed when dropped.

use super::{free_port, get_json, require_tool, temp_dir, url_encode, Killed};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

pub struct Prometheus {
    pub addr: SocketAddr,
    _child: Killed,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus with the configuration `config` writes; it gets the server's own
    /// temporary folder, for any file the configuration names (file_sd targets, say).
    pub fn start(config: impl FnOnce(&Path) -> String) -> Prometheus {
        let binary = require_tool("prometheus", "prometheus");
        let dir = temp_dir();
        let file = dir.path().join("prometheus.yml");
        std::fs::write(&file, config(dir.path())).unwrap();
        let port = free_port();
        let child = super::dies_with_its_starter(&mut Command::new(binary))
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        Prometheus {
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
            _child: Killed(child),
            _dir: dir,
        }
    }

    /// The rules Prometheus has loaded, every group's; none until it answers.
    pub fn rules(&self) -> Vec<Value> {
        get_json(self.addr, "/api/v1/rules")
            .map(|answer| {
                answer["data"]["groups"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|g| g["rules"].as_array().into_iter().flatten().cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Runs an instant query; `None` until Prometheus answers.
    pub fn query(&self, expr: &str) -> Option<Value> {
        get_json(
            self.addr,
            &format!("/api/v1/query?query={}", url_encode(expr)),
        )
    }

    /// The first sample's value of an instant query, polled until present (the first scrape
    /// comes about 6 s after start even at a 1 s interval).
    pub fn wait_value(&self, expr: &str, limit: Duration) -> f64 {
        super::poll(&format!("a result for {expr}"), limit, || {
            let v = self.query(expr).unwrap_or_default();
            match v["data"]["result"][0]["value"][1].as_str() {
                Some(value) => Ok(value.parse().unwrap()),
                None => Err(v.to_string()),
            }
        })
    }
}
