//! A real SMTP server for the tests: Python's aiosmtpd (Debian's python3-aiosmtpd), writing
//! every message it accepts into a Maildir. Modes: plain, STARTTLS with AUTH, and rejecting
//! everything with 550.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SERVER: &str = r#"
import sys, ssl, time
from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Mailbox
from aiosmtpd.smtp import AuthResult, LoginPassword

port, maildir, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]

class Reject:
    async def handle_DATA(self, server, session, envelope):
        return "550 5.7.1 Message rejected by policy"

def authenticator(server, session, envelope, mechanism, auth_data):
    if isinstance(auth_data, LoginPassword) and auth_data.login == b"pulse" and auth_data.password == b"s3cret":
        return AuthResult(success=True)
    # handled=False makes aiosmtpd answer 535; anything else leaves the client hanging.
    return AuthResult(success=False, handled=False)

handler = Reject() if mode == "reject" else Mailbox(maildir)
kwargs = {}
if mode == "tls":
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(sys.argv[4], sys.argv[5])
    kwargs = dict(tls_context=context, require_starttls=True, authenticator=authenticator, auth_required=True)
controller = Controller(handler, hostname="127.0.0.1", port=port, **kwargs)
controller.start()
print("ready", flush=True)
while True:
    time.sleep(3600)
"#;

pub struct SmtpServer {
    child: Child,
    pub port: u16,
    pub maildir: PathBuf,
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's aiosmtpd imports only under /usr/bin/python3.
fn python() -> &'static str {
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", "import aiosmtpd"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "aiosmtpd is not installed; this test needs a real SMTP server. Install it with: \
         apt-get update && apt-get install -y --no-install-recommends python3-aiosmtpd \
         (or run .ci/run, which does)"
    );
    "/usr/bin/python3"
}

impl SmtpServer {
    /// Starts a server in `mode` ("plain", "reject", or "tls" with `tls` = (cert, key)).
    pub fn start(port: u16, maildir: &Path, mode: &str, tls: Option<(&Path, &Path)>) -> SmtpServer {
        let mut cmd = Command::new(python());
        cmd.arg("-c")
            .arg(SERVER)
            .arg(port.to_string())
            .arg(maildir)
            .arg(mode);
        if let Some((cert, key)) = tls {
            cmd.arg(cert).arg(key);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start aiosmtpd");
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "aiosmtpd did not start");
        SmtpServer {
            child,
            port,
            maildir: maildir.to_owned(),
        }
    }

    /// The messages delivered so far, as raw text, oldest first.
    pub fn messages(&self) -> Vec<String> {
        messages(&self.maildir)
    }
}

pub fn messages(maildir: &Path) -> Vec<String> {
    let mut files: Vec<_> = std::fs::read_dir(maildir.join("new"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// Waits up to 20 s until the Maildir holds `n` messages; returns them.
pub fn wait_messages(maildir: &Path, n: usize) -> Vec<String> {
    super::poll(&format!("{n} emails"), Duration::from_secs(20), || {
        let got = messages(maildir);
        if got.len() >= n {
            Ok(got)
        } else {
            Err(format!("{} emails", got.len()))
        }
    })
}

/// The decoded subject of a raw message (lettre folds long subjects and may encode them).
pub fn subject(raw: &str) -> String {
    let mut out = String::new();
    let mut in_subject = false;
    for line in raw.lines() {
        if line.starts_with("Subject:") {
            in_subject = true;
            out.push_str(line.trim_start_matches("Subject:").trim());
        } else if in_subject && (line.starts_with(' ') || line.starts_with('\t')) {
            out.push(' ');
            out.push_str(line.trim());
        } else if in_subject {
            break;
        }
    }
    out
}

/// The body of the MIME part whose headers contain `header`, decoded (base64 or
/// quoted-printable, as lettre chose).
pub fn part(raw: &str, header: &str) -> Vec<u8> {
    use base64::Engine;
    // The Maildir keeps the message with bare newlines.
    let raw = raw.replace("\r\n", "\n");
    let at = raw
        .find(header)
        .unwrap_or_else(|| panic!("no part with {header}: {raw}"));
    let start = raw[..at].rfind("\n--").expect("a part's boundary") + 1;
    let part = &raw[start..];
    let headers_end = part.find("\n\n").unwrap();
    let headers = &part[..headers_end];
    let body = &part[headers_end + 2..];
    let body = &body[..body.find("\n--").unwrap_or(body.len())];
    if headers.contains("Content-Transfer-Encoding: base64") {
        let joined: String = body.split_whitespace().collect();
        base64::engine::general_purpose::STANDARD
            .decode(joined)
            .unwrap()
    } else if headers.contains("Content-Transfer-Encoding: quoted-printable") {
        let body = body.replace("=\n", "");
        let mut out = Vec::new();
        let bytes = body.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'=' && i + 2 < bytes.len() {
                out.push(u8::from_str_radix(&body[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        out
    } else {
        body.as_bytes().to_vec()
    }
}

/// A self-signed certificate for 127.0.0.1, made with openssl.
pub fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
        ])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        // A server certificate, not a CA: rustls refuses a CA certificate as a server's.
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "keyUsage=digitalSignature,keyEncipherment"])
        .args(["-addext", "extendedKeyUsage=serverAuth"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl is needed for the TLS test: apt-get install -y openssl");
    assert!(status.success(), "openssl could not make a certificate");
    (cert, key)
}
