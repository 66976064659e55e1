//! The web config file: every bad one is refused at start with exit status 2 naming the key
//! (and where exporter-toolkit refuses it too, `promtool check web-config` agrees), and the
//! shipped example passes both checks.

use crate::common::tls::Pki;
use crate::common::{require_tool, temp_dir, BIN};
use std::path::Path;
use std::process::Command;

/// `check-web-config FILE`: exit status and stderr.
fn check(file: &Path) -> (i32, String) {
    let out = Command::new(BIN)
        .arg("check-web-config")
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn promtool_accepts(file: &Path) -> (bool, String) {
    let promtool = require_tool("promtool", "prometheus");
    let out = Command::new(promtool)
        .args(["check", "web-config"])
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

const TLS: &str = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";

#[test]
fn every_bad_web_config_is_refused_naming_its_key() {
    let dir = temp_dir();
    let pki = Pki::new(dir.path(), "test-ca");
    let other = Pki::new(&dir.path().join("other"), "other-ca");
    std::fs::copy(other.path("server.key"), pki.path("other.key")).unwrap();
    std::fs::write(pki.path("garbage.crt"), "not a certificate\n").unwrap();
    let hash = bcrypt::hash("secret", 4).unwrap();
    // (what is wrong, the file, the key the error must name, whether promtool refuses it too:
    // where it does not, Go's crypto/tls would serve something rustls will not, and we refuse
    // rather than downgrade).
    let table: Vec<(&str, String, &str, bool)> = vec![
        (
            "unknown key",
            "basic_auth: {}\n".into(),
            "`basic_auth`",
            true,
        ),
        (
            "unknown TLS key",
            format!("{TLS}  cert_fil: x\n"),
            "`tls_server_config.cert_fil`",
            true,
        ),
        (
            "missing key file",
            "tls_server_config:\n  cert_file: server.crt\n  key_file: missing.key\n".into(),
            "`tls_server_config.key_file`",
            true,
        ),
        (
            "certificate without a key",
            "tls_server_config:\n  cert_file: server.crt\n".into(),
            "`tls_server_config.key_file`",
            true,
        ),
        (
            "a key that is not the certificate's",
            "tls_server_config:\n  cert_file: server.crt\n  key_file: other.key\n".into(),
            "`tls_server_config.key_file`",
            true,
        ),
        (
            "a certificate file that is not PEM",
            "tls_server_config:\n  cert_file: garbage.crt\n  key_file: server.key\n".into(),
            "`tls_server_config.cert_file`",
            true,
        ),
        (
            "CA without client auth",
            format!("{TLS}  client_ca_file: ca.crt\n"),
            "`tls_server_config.client_ca_file`",
            true,
        ),
        (
            "unknown client auth type",
            format!("{TLS}  client_auth_type: Sometimes\n  client_ca_file: ca.crt\n"),
            "`tls_server_config.client_auth_type`",
            true,
        ),
        (
            "a client certificate accepted unverified",
            format!("{TLS}  client_auth_type: RequestClientCert\n"),
            "`tls_server_config.client_auth_type`",
            false,
        ),
        (
            "client certificates verified against no CA",
            format!("{TLS}  client_auth_type: RequireAndVerifyClientCert\n"),
            "`tls_server_config.client_ca_file`",
            false,
        ),
        (
            "allowed SANs with no client certificates",
            format!("{TLS}  client_allowed_sans: [prometheus]\n"),
            "`tls_server_config.client_allowed_sans`",
            false,
        ),
        (
            "bad bcrypt",
            "basic_auth_users:\n  alice: plaintext\n".into(),
            "`basic_auth_users.alice`",
            true,
        ),
        (
            "TLS 1.0",
            format!("{TLS}  min_version: TLS10\n"),
            "`tls_server_config.min_version`",
            false,
        ),
        (
            "not a TLS version",
            format!("{TLS}  max_version: TLS14\n"),
            "`tls_server_config.max_version`",
            true,
        ),
        (
            "minimum above maximum",
            format!("{TLS}  min_version: TLS13\n  max_version: TLS12\n"),
            "`tls_server_config.min_version`",
            false,
        ),
        (
            "a CBC suite",
            format!("{TLS}  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA]\n"),
            "`tls_server_config.cipher_suites[0]`",
            false,
        ),
        (
            "not a cipher suite",
            format!("{TLS}  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, NOPE]\n"),
            "`tls_server_config.cipher_suites[1]`",
            true,
        ),
        (
            "a curve rustls lacks",
            format!("{TLS}  curve_preferences: [CurveP521]\n"),
            "`tls_server_config.curve_preferences[0]`",
            false,
        ),
        (
            "a header that cannot be set",
            "http_server_config:\n  headers:\n    Set-Cookie: a=b\n".into(),
            "`http_server_config.headers.Set-Cookie`",
            true,
        ),
        (
            "a header value that is not allowed",
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n".into(),
            "`http_server_config.headers.X-Frame-Options`",
            true,
        ),
        (
            "http2 not a boolean",
            "http_server_config:\n  http2: sometimes\n".into(),
            "`http_server_config.http2`",
            true,
        ),
        (
            "not YAML",
            "tls_server_config: [\n".into(),
            "`(file)`",
            true,
        ),
        (
            "TLS settings without a certificate",
            "tls_server_config:\n  min_version: TLS13\n".into(),
            "`tls_server_config.cert_file`",
            false,
        ),
    ];
    assert!(table.len() >= 12);
    let mut promtool_refused = 0;
    for (what, text, key, promtool_too) in &table {
        let file = pki.path("web.yml");
        std::fs::write(&file, text).unwrap();
        let (code, stderr) = check(&file);
        assert_eq!(code, 2, "{what}: exit status {code}: {stderr}");
        assert!(
            stderr.contains("web_config_file") && stderr.contains(key),
            "{what}: the error does not name {key}: {stderr}"
        );
        if *promtool_too {
            let (accepted, said) = promtool_accepts(&file);
            assert!(!accepted, "{what}: promtool accepted it: {said}");
            promtool_refused += 1;
        }
    }
    assert!(promtool_refused >= 12, "{promtool_refused}");
    // A good one, for contrast: the same folder, the same certificates.
    let good = pki.path("good.yml");
    std::fs::write(&good, format!("{TLS}basic_auth_users:\n  alice: {hash}\n")).unwrap();
    assert_eq!(check(&good).0, 0);
    assert!(promtool_accepts(&good).0);
}

#[test]
fn run_refuses_a_bad_web_config_at_start() {
    let dir = temp_dir();
    let file = dir.path().join("web.yml");
    std::fs::write(
        &file,
        "tls_server_config:\n  cert_file: nowhere.crt\n  key_file: nowhere.key\n",
    )
    .unwrap();
    for flag in ["--web-config-file", "--web.config.file"] {
        let out = Command::new(BIN)
            .args(["run", "--listen", "127.0.0.1:0", "--gpu", "off", flag])
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("`web_config_file`")
                && stderr.contains("`tls_server_config.cert_file`"),
            "{stderr}"
        );
    }
}

#[test]
fn the_shipped_example_passes_promtool_and_our_check() {
    let dir = temp_dir();
    let pki = Pki::new(dir.path(), "test-ca");
    // It names tls.crt and tls.key beside itself, as a Kubernetes TLS Secret mounts them.
    std::fs::copy(pki.path("server.crt"), pki.path("tls.crt")).unwrap();
    std::fs::copy(pki.path("server.key"), pki.path("tls.key")).unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/web-config.yml");
    let file = pki.path("web-config.yml");
    std::fs::copy(&example, &file).unwrap();
    let (accepted, said) = promtool_accepts(&file);
    assert!(accepted, "promtool check web-config: {said}");
    let (code, stderr) = check(&file);
    assert_eq!(code, 0, "{stderr}");
}
