//! Certificates made for a test with the `openssl` command: a CA, a server certificate for
//! `localhost` and `127.0.0.1`, and client certificates, all valid for a day.

use super::require_tool;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    /// A CA named `name` in `dir`, with a server certificate signed by it
    /// (`server.crt`, `server.key`).
    pub fn new(dir: &Path, name: &str) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        let pki = Pki {
            dir: dir.to_owned(),
        };
        pki.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ]);
        pki.issue("server", "DNS:localhost,IP:127.0.0.1");
        pki
    }

    /// A certificate `NAME.crt` / `NAME.key` signed by the CA, with these subject alternative
    /// names (`DNS:x,IP:y`, `email:...`).
    pub fn issue(&self, name: &str, sans: &str) -> (PathBuf, PathBuf) {
        let ext = self.dir.join(format!("{name}.ext"));
        std::fs::write(&ext, format!("subjectAltName={sans}\n")).unwrap();
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.crt"),
        ]);
        (
            self.path(&format!("{name}.crt")),
            self.path(&format!("{name}.key")),
        )
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn openssl(&self, args: &[&str]) {
        let openssl = require_tool("openssl", "openssl");
        let out = Command::new(openssl)
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("run openssl");
        assert!(
            out.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
