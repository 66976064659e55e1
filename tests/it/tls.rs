//! Serving behind the web config, against real TLS clients: Prometheus scraping with basic
//! auth and with client certificates, curl over TLS 1.2, 1.3 and HTTP/2, openssl's TLS 1.1
//! refused, a certificate rotated on disk, and `status --url https://`.

use crate::common;
use crate::common::prometheus::Prometheus;
use crate::common::tls::Pki;
use crate::common::{path_str, require_tool, temp_dir, wait_until, Sidecar, BIN};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const PASSWORD: &str = "s3cret-scrape";

/// A web config in the PKI's folder: TLS with its server certificate plus `extra`.
fn web_config(pki: &Pki, extra: &str) -> std::path::PathBuf {
    let file = pki.path("web.yml");
    std::fs::write(
        &file,
        format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n{extra}"),
    )
    .unwrap();
    file
}

fn users() -> String {
    format!(
        "basic_auth_users:\n  prometheus: {}\n",
        bcrypt::hash(PASSWORD, 4).unwrap()
    )
}

/// `curl ARGS URL` against the sidecar: (exit status, stdout, stderr).
fn curl(args: &[&str], url: &str) -> (i32, String, String) {
    let curl = require_tool("curl", "curl");
    let out = Command::new(curl)
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The sidecar's exposition, over TLS; `user` as curl's `-u` if it asks for basic auth.
fn metrics(addr: SocketAddr, ca: &Path, user: Option<&str>) -> common::Metrics {
    let mut args = vec!["--cacert", path_str(ca), "-f"];
    if let Some(user) = user {
        args.extend(["-u", user]);
    }
    let (code, out, err) = curl(&args, &url(addr, "/metrics"));
    assert_eq!(code, 0, "{err}");
    common::Metrics(out)
}

fn url(addr: SocketAddr, path: &str) -> String {
    format!("https://localhost:{}{path}", addr.port())
}

/// A Prometheus whose jobs each scrape one target with their own TLS and auth settings.
fn prometheus(jobs: &[(&str, SocketAddr, String)]) -> Prometheus {
    Prometheus::start(|_| {
        let mut config =
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n".to_owned();
        for (name, target, settings) in jobs {
            config += &format!(
                "  - job_name: {name}\n    scheme: https\n{settings}    static_configs:\n      - targets: ['localhost:{}']\n",
                target.port()
            );
        }
        config
    })
}

/// The scrape state Prometheus reports for a job's target: (health, last error).
fn target(prometheus: &Prometheus, job: &str) -> Option<(String, String)> {
    let all = common::get_json(prometheus.addr, "/api/v1/targets")?;
    let t = all["data"]["activeTargets"]
        .as_array()?
        .iter()
        .find(|t| t["labels"]["job"] == job)?
        .clone();
    Some((
        t["health"].as_str()?.to_owned(),
        t["lastError"].as_str().unwrap_or("").to_owned(),
    ))
}

fn wait_health(prometheus: &Prometheus, job: &str, health: &str) -> String {
    let mut last = None;
    wait_until(
        &format!("Prometheus to see job {job} {health}"),
        Duration::from_secs(40),
        || {
            last = target(prometheus, job);
            last.as_ref().is_some_and(|(h, _)| h == health)
        },
    );
    last.unwrap().1
}

#[test]
fn prometheus_scrapes_over_tls_with_basic_auth_and_with_client_certificates() {
    let dir = temp_dir();
    let pki = Pki::new(&dir.path().join("pki"), "test-ca");
    let (client_crt, client_key) = pki.issue("prometheus", "DNS:prometheus");
    let auth = Sidecar::run(&[
        "--gpu",
        "simulated",
        "--web-config-file",
        path_str(&web_config(&pki, &users())),
    ]);
    let mtls_dir = Pki {
        dir: dir.path().join("pki"),
    };
    let mtls_file = mtls_dir.path("mtls.yml");
    std::fs::write(
        &mtls_file,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  client_allowed_sans: [prometheus]\n",
    )
    .unwrap();
    let mtls = Sidecar::run(&[
        "--gpu",
        "simulated",
        "--web.config.file",
        path_str(&mtls_file),
    ]);
    let ca = format!(
        "    tls_config:\n      ca_file: {}\n",
        pki.path("ca.crt").display()
    );
    let basic = |password: &str| {
        format!("{ca}    basic_auth:\n      username: prometheus\n      password: {password}\n")
    };
    let with_cert = format!(
        "    tls_config:\n      ca_file: {}\n      cert_file: {}\n      key_file: {}\n",
        pki.path("ca.crt").display(),
        client_crt.display(),
        client_key.display()
    );
    let prometheus = prometheus(&[
        ("auth", auth.addr, basic(PASSWORD)),
        ("wrong_password", auth.addr, basic("guess")),
        ("mtls", mtls.addr, with_cert),
        ("no_client_cert", mtls.addr, ca.clone()),
    ]);
    wait_health(&prometheus, "auth", "up");
    wait_health(&prometheus, "mtls", "up");
    let error = wait_health(&prometheus, "wrong_password", "down");
    // Prometheus says "server returned HTTP status 401 Unauthorized"; a bare "401" could be the
    // target's port.
    assert!(error.contains("HTTP status 401"), "{error}");
    // Refused in the handshake (TLS 1.3 refuses after the client's Finished, so Go may only
    // see the connection reset), never reaching HTTP.
    let error = wait_health(&prometheus, "no_client_cert", "down");
    assert!(
        !error.is_empty() && !error.contains("HTTP status"),
        "{error}"
    );
    assert_eq!(
        prometheus.wait_value("up{job=\"auth\"}", Duration::from_secs(10)),
        1.0
    );
    assert_eq!(
        prometheus.wait_value("up{job=\"wrong_password\"}", Duration::from_secs(10)),
        0.0
    );
    assert_eq!(
        prometheus.wait_value("up{job=\"no_client_cert\"}", Duration::from_secs(10)),
        0.0
    );
    // What it scraped is ours, through TLS: the GPU figures of the simulated node.
    let gpus = prometheus.wait_value(
        "count(pulse_gpu_utilization_ratio{job=\"mtls\"})",
        Duration::from_secs(20),
    );
    assert!(gpus >= 1.0);
}

#[test]
fn curl_speaks_tls_1_2_tls_1_3_and_http_2_and_tls_1_1_is_refused() {
    let dir = temp_dir();
    let pki = Pki::new(dir.path(), "test-ca");
    let sidecar = Sidecar::run(&[
        "--gpu",
        "off",
        "--web-config-file",
        path_str(&web_config(&pki, "")),
    ]);
    let ca = path_str(&pki.path("ca.crt")).to_owned();
    for (flags, version) in [
        (["--tlsv1.2", "--tls-max", "1.2"], "TLSv1.2"),
        (["--tlsv1.3", "--tls-max", "1.3"], "TLSv1.3"),
    ] {
        let mut args = vec![
            "-v",
            "--cacert",
            &ca,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ];
        args.extend(flags);
        let (code, out, err) = curl(&args, &url(sidecar.addr, "/metrics"));
        assert_eq!((code, out.as_str()), (0, "200"), "{err}");
        assert!(
            err.contains(&format!("SSL connection using {version}")),
            "{err}"
        );
    }
    let (code, out, err) = curl(
        &[
            "--http2",
            "--cacert",
            &ca,
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
        ],
        &url(sidecar.addr, "/metrics"),
    );
    assert_eq!((code, out.as_str()), (0, "2 200"), "{err}");
    // Without HTTP/2 in ALPN, curl stays on HTTP/1.1; gzip is still offered and honoured.
    let (code, out, err) = curl(
        &[
            "--http1.1",
            "--compressed",
            "--cacert",
            &ca,
            "-D",
            "-",
            "-o",
            "/dev/null",
        ],
        &url(sidecar.addr, "/metrics"),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.to_ascii_lowercase().contains("content-encoding: gzip"),
        "{out}"
    );
    // openssl, told to allow TLS 1.1 at security level 0, sends a TLS 1.1 hello: the
    // sidecar answers with an alert, and no session is made.
    let openssl = require_tool("openssl", "openssl");
    let out = Command::new(openssl)
        .args(["s_client", "-connect", &sidecar.addr.to_string(), "-tls1_1"])
        .args(["-cipher", "DEFAULT:@SECLEVEL=0", "-CAfile", &ca])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("alert"),
        "the server did not refuse with an alert: {said}"
    );
    assert!(
        said.contains("Cipher is (NONE)"),
        "a session was made: {said}"
    );
}

#[test]
fn basic_auth_refuses_with_a_challenge_and_status_logs_in() {
    let dir = temp_dir();
    let pki = Pki::new(dir.path(), "test-ca");
    let extra = format!("{}http_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n", users());
    let config = dir.path().join("pulse.toml");
    std::fs::write(
        &config,
        format!(
            "web_config_file = {:?}\nhealth_without_auth = true\n",
            path_str(&web_config(&pki, &extra))
        ),
    )
    .unwrap();
    let sidecar = Sidecar::run(&["--gpu", "off", "--config", path_str(&config)]);
    let ca = path_str(&pki.path("ca.crt")).to_owned();
    let answer = |user: Option<&str>, path: &str| {
        let mut args = vec!["--cacert", ca.as_str(), "-D", "-", "-o", "/dev/null"];
        if let Some(user) = user {
            args.extend(["-u", user]);
        }
        let (code, out, err) = curl(&args, &url(sidecar.addr, path));
        assert_eq!(code, 0, "{err}");
        out.to_ascii_lowercase()
    };
    let good = format!("prometheus:{PASSWORD}");
    for user in [
        None,
        Some("prometheus:guess"),
        Some("nobody:guess"),
        Some("prometheus:"),
    ] {
        let head = answer(user, "/metrics");
        assert!(head.contains(" 401"), "{user:?}: {head}");
        assert!(head.contains("www-authenticate: basic"), "{head}");
        assert!(head.contains("x-frame-options: deny"), "{head}");
    }
    // The right password, twice: the second from the cache, the same answer.
    for _ in 0..2 {
        let head = answer(Some(&good), "/metrics");
        assert!(head.contains(" 200"), "{head}");
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    }
    let m = metrics(sidecar.addr, &pki.path("ca.crt"), Some(&good));
    assert_eq!(
        m.get("pulse_http_unauthorized_total", ""),
        Some(4.0),
        "{}",
        m.0
    );
    // health_without_auth opens /-/healthy, and only it.
    assert!(answer(None, "/-/healthy").contains(" 200"));
    assert!(answer(None, "/-/ready").contains(" 401"));
    assert!(answer(None, "/status").contains(" 401"));

    let status = |password: Option<&str>| {
        let mut cmd = Command::new(BIN);
        cmd.args(["status", "--json", "--url", &url(sidecar.addr, "")])
            .args(["--ca-file", &ca, "--user", "prometheus"])
            .env_remove("PULSE_PASSWORD");
        if let Some(password) = password {
            cmd.env("PULSE_PASSWORD", password);
        }
        cmd.output().unwrap()
    };
    let out = status(Some(PASSWORD));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["partitions"].is_array(), "{doc}");
    let out = status(Some("guess"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("answered 401"), "{stderr}");
    let out = status(None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PULSE_PASSWORD"));
    // A password file does as well as the variable.
    let file = dir.path().join("password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let out = Command::new(BIN)
        .args(["status", "--url", &url(sidecar.addr, ""), "--ca-file", &ca])
        .args(["--user", "prometheus", "--password-file", path_str(&file)])
        .env_remove("PULSE_PASSWORD")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Replaces `to` with `from` the way a rotation does: a new file renamed over the old.
fn replace(from: &Path, to: &Path) {
    let staged = to.with_extension("new");
    std::fs::copy(from, &staged).unwrap();
    std::fs::rename(&staged, to).unwrap();
}

#[test]
fn a_certificate_replaced_on_disk_is_served_to_the_next_connection() {
    let dir = temp_dir();
    let pki = Pki::new(dir.path(), "first-ca");
    let rotated = Pki::new(&dir.path().join("rotated"), "second-ca");
    let sidecar = Sidecar::run(&[
        "--gpu",
        "off",
        "--web-config-file",
        path_str(&web_config(&pki, "")),
    ]);
    let healthy = |ca: &Path| {
        let (code, out, err) = curl(
            &[
                "--cacert",
                path_str(ca),
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
            ],
            &url(sidecar.addr, "/-/healthy"),
        );
        (code == 0 && out == "200", err)
    };
    assert!(healthy(&pki.path("ca.crt")).0);
    assert!(!healthy(&rotated.path("ca.crt")).0);
    replace(&rotated.path("server.key"), &pki.path("server.key"));
    replace(&rotated.path("server.crt"), &pki.path("server.crt"));
    let (ok, err) = healthy(&rotated.path("ca.crt"));
    assert!(
        ok,
        "the next connection still got the old certificate: {err}"
    );
    assert!(!healthy(&pki.path("ca.crt")).0);
    // A certificate that does not load (half written, say) keeps the last good one.
    std::fs::write(pki.path("server.crt"), "-----BEGIN CERTIFICATE-----\ntrunc").unwrap();
    let (ok, err) = healthy(&rotated.path("ca.crt"));
    assert!(ok, "{err}");
    sidecar.wait_log("cannot be used, so the last good one stays");
    // Files are looked at when a connection comes: the key and the certificate, both replaced
    // before the next one, are one reload; the truncated certificate, one failure.
    let m = metrics(sidecar.addr, &rotated.path("ca.crt"), None);
    let reloads = |result: &str| {
        m.get(
            "pulse_web_config_reloads_total",
            &format!("result=\"{result}\""),
        )
    };
    assert_eq!(reloads("success"), Some(1.0), "{}", m.0);
    assert_eq!(reloads("failure"), Some(1.0), "{}", m.0);
    assert_eq!(
        m.get("pulse_web_config_last_reload_successful", ""),
        Some(0.0)
    );
    // Two connections trusted the other CA and were refused in the handshake.
    assert_eq!(
        m.get("pulse_http_tls_handshake_failures_total", ""),
        Some(2.0)
    );
    let promtool = require_tool("promtool", "prometheus");
    let (clean, said) = common::promtool_check_metrics(&promtool, &m.0);
    assert!(clean, "{said}");
}

#[test]
fn clients_stuck_before_their_handshake_hold_no_place_a_tls_scrape_needs() {
    let dir = temp_dir();
    let pki = Pki::new(dir.path(), "test-ca");
    let sidecar = Sidecar::run(&[
        "--gpu",
        "off",
        "--max-connections",
        "2",
        "--web-config-file",
        path_str(&web_config(&pki, "")),
    ]);
    let _held: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(sidecar.addr).unwrap())
        .collect();
    let ca = path_str(&pki.path("ca.crt")).to_owned();
    let (code, out, err) = curl(
        &["--cacert", &ca, "-o", "/dev/null", "-w", "%{http_code}"],
        &url(sidecar.addr, "/metrics"),
    );
    assert_eq!((code, out.as_str()), (0, "200"), "{err}");
}

#[test]
fn a_client_certificate_must_carry_an_allowed_name() {
    let dir = temp_dir();
    let pki = Pki::new(dir.path(), "test-ca");
    let (good_crt, good_key) = pki.issue("prometheus", "DNS:prometheus");
    let (bad_crt, bad_key) = pki.issue("intruder", "DNS:intruder,email:x@example.com");
    let file = web_config(
        &pki,
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  client_allowed_sans: [prometheus]\n",
    );
    let sidecar = Sidecar::run(&["--gpu", "off", "--web-config-file", path_str(&file)]);
    let ca = path_str(&pki.path("ca.crt")).to_owned();
    let with = |crt: &Path, key: &Path| {
        curl(
            &[
                "--cacert",
                &ca,
                "--cert",
                path_str(crt),
                "--key",
                path_str(key),
            ]
            .into_iter()
            .chain(["-o", "/dev/null", "-w", "%{http_code}"])
            .collect::<Vec<_>>(),
            &url(sidecar.addr, "/-/healthy"),
        )
    };
    let (code, out, err) = with(&good_crt, &good_key);
    assert_eq!((code, out.as_str()), (0, "200"), "{err}");
    let (code, out, err) = with(&bad_crt, &bad_key);
    assert_ne!(code, 0, "a certificate without an allowed name got {out}");
    assert!(!err.is_empty());
    sidecar.wait_log("none of its names [\"intruder\", \"x@example.com\"]");
}
