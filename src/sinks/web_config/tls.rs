//! `tls_server_config` to a rustls server configuration.
//!
//! exporter-toolkit maps the section onto Go's crypto/tls, which knows modes and algorithms
//! rustls deliberately lacks (TLS 1.0 and 1.1, CBC suites, accepting a client certificate
//! without verifying it). Each of those is a config error saying so: serving something weaker
//! or different from what the file asks would be a silent downgrade.

use super::{problem, read_bytes, Problem, TlsServer};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::ring::{cipher_suite as suite, default_provider, kx_group};
use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme, SupportedCipherSuite, SupportedProtocolVersion,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const SECTION: &str = "tls_server_config";

fn key(name: &str) -> String {
    format!("{SECTION}.{name}")
}

/// Builds the server configuration; also returns the files it read, to watch them.
pub(super) fn server_config(
    t: &TlsServer,
    dir: &Path,
    http2: bool,
) -> Result<(ServerConfig, Vec<PathBuf>, String), Problem> {
    let mut files = Vec::new();
    let certs = pem_source(dir, "cert", &t.cert_file, &t.cert, &mut files)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&certs.1)
        .collect::<Result<_, _>>()
        .map_err(|e| problem(&certs.0, format!("not a PEM certificate: {e}")))?;
    let cert_key = if t.cert_file.is_some() {
        key("cert_file")
    } else {
        key("cert")
    };
    if certs.is_empty() {
        return Err(problem(cert_key, "holds no PEM certificate"));
    }
    let private = pem_source(dir, "key", &t.key_file, &t.key, &mut files)?;
    let private_key = PrivateKeyDer::from_pem_slice(&private.1)
        .map_err(|e| problem(&private.0, format!("not a PEM private key: {e}")))?;
    let versions = versions(t)?;
    let provider = Arc::new(provider(t)?);
    let verifier = client_verifier(t, dir, &provider, &mut files)?;
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| problem(key("cipher_suites"), format!("{e}")))?;
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, private_key).map_err(|e| {
        problem(
            &private.0,
            format!("cannot be used with the certificate: {e}"),
        )
    })?;
    config.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(false);
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    let names: Vec<&str> = versions
        .iter()
        .map(|v| {
            if v.version == rustls::ProtocolVersion::TLSv1_3 {
                "TLS 1.3"
            } else {
                "TLS 1.2"
            }
        })
        .collect();
    let summary = format!(
        "{}; client certificates: {}; ALPN: {}",
        names.join(" and "),
        t.client_auth_type.as_deref().unwrap_or("NoClientCert"),
        if http2 { "h2, http/1.1" } else { "http/1.1" },
    );
    Ok((config, files, summary))
}

/// One PEM input given as `NAME_file` or inline as `NAME`: exactly one of the two.
fn pem_source(
    dir: &Path,
    name: &str,
    file: &Option<String>,
    inline: &Option<String>,
    files: &mut Vec<PathBuf>,
) -> Result<(String, Vec<u8>), Problem> {
    match (file, inline) {
        (Some(_), Some(_)) => Err(problem(
            key(name),
            format!("give {name}_file or {name}, not both"),
        )),
        (Some(path), None) => {
            let path = dir.join(path);
            let bytes = read_bytes(&path).map_err(|m| problem(key(&format!("{name}_file")), m))?;
            files.push(path);
            Ok((key(&format!("{name}_file")), bytes))
        }
        (None, Some(text)) => Ok((key(name), text.as_bytes().to_vec())),
        (None, None) => Err(problem(
            key(&format!("{name}_file")),
            "missing: TLS needs cert_file and key_file (or cert and key)",
        )),
    }
}

fn version(name: &str, value: &str) -> Result<u8, Problem> {
    match value {
        "TLS12" => Ok(12),
        "TLS13" => Ok(13),
        "TLS10" | "TLS11" => Err(problem(
            key(name),
            format!(
                "{value} is refused: TLS 1.0 and 1.1 are deprecated (RFC 8996) and rustls does \
                 not implement them; use TLS12 or TLS13"
            ),
        )),
        other => Err(problem(
            key(name),
            format!("{other:?} is not a TLS version: use TLS12 or TLS13"),
        )),
    }
}

fn versions(t: &TlsServer) -> Result<Vec<&'static SupportedProtocolVersion>, Problem> {
    let min = version("min_version", t.min_version.as_deref().unwrap_or("TLS12"))?;
    let max = version("max_version", t.max_version.as_deref().unwrap_or("TLS13"))?;
    if min > max {
        return Err(problem(
            key("min_version"),
            "is above max_version: no TLS version is left",
        ));
    }
    let mut out = Vec::new();
    if min <= 13 && max >= 13 {
        out.push(&rustls::version::TLS13);
    }
    if min <= 12 {
        out.push(&rustls::version::TLS12);
    }
    Ok(out)
}

/// Go's names for the TLS 1.2 suites rustls implements. As in Go, `cipher_suites` picks among
/// TLS 1.2 suites; TLS 1.3's are always offered (naming them is allowed and changes nothing).
const TLS12_SUITES: &[(&str, SupportedCipherSuite)] = &[
    (
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

const TLS13_SUITES: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// Go's curve names and the groups rustls (with ring) has.
fn curve(name: &str) -> Option<&'static dyn SupportedKxGroup> {
    match name {
        "X25519" => Some(kx_group::X25519),
        "CurveP256" => Some(kx_group::SECP256R1),
        "CurveP384" => Some(kx_group::SECP384R1),
        _ => None,
    }
}

fn provider(t: &TlsServer) -> Result<CryptoProvider, Problem> {
    let mut provider = default_provider();
    if let Some(names) = &t.cipher_suites {
        let mut suites: Vec<SupportedCipherSuite> = provider
            .cipher_suites
            .iter()
            .copied()
            .filter(|s| s.version() == &rustls::version::TLS13)
            .collect();
        for (i, name) in names.iter().enumerate() {
            if TLS13_SUITES.contains(&name.as_str()) {
                continue;
            }
            let Some((_, s)) = TLS12_SUITES.iter().find(|(n, _)| n == name) else {
                let known: Vec<&str> = TLS12_SUITES.iter().map(|(n, _)| *n).collect();
                let why = if name.contains("_CBC_")
                    || name.starts_with("TLS_RSA_")
                    || name.contains("RC4")
                    || name.contains("3DES")
                {
                    "rustls does not implement it (no CBC, RC4, 3DES or RSA key-exchange suites)"
                } else {
                    "not a cipher suite"
                };
                return Err(problem(
                    format!("{}[{i}]", key("cipher_suites")),
                    format!(
                        "{name:?}: {why}; the TLS 1.2 suites are {}",
                        known.join(", ")
                    ),
                ));
            };
            suites.push(*s);
        }
        provider.cipher_suites = suites;
    }
    if let Some(names) = &t.curve_preferences {
        let mut groups = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let group = curve(name).ok_or_else(|| {
                problem(
                    format!("{}[{i}]", key("curve_preferences")),
                    format!(
                        "{name:?} is not a curve rustls offers; use X25519, CurveP256 or CurveP384"
                    ),
                )
            })?;
            groups.push(group);
        }
        if groups.is_empty() {
            return Err(problem(
                key("curve_preferences"),
                "is empty: no key exchange is left",
            ));
        }
        provider.kx_groups = groups;
    }
    Ok(provider)
}

fn client_verifier(
    t: &TlsServer,
    dir: &Path,
    provider: &Arc<CryptoProvider>,
    files: &mut Vec<PathBuf>,
) -> Result<Option<Arc<dyn ClientCertVerifier>>, Problem> {
    let mode = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let has_ca = t.client_ca_file.is_some() || t.client_ca.is_some();
    let optional = match mode {
        "NoClientCert" => {
            if has_ca {
                return Err(problem(
                    key("client_ca_file"),
                    "a client CA is given but client_auth_type is NoClientCert: set \
                     client_auth_type to RequireAndVerifyClientCert or VerifyClientCertIfGiven",
                ));
            }
            if t.client_allowed_sans.is_some() {
                return Err(problem(
                    key("client_allowed_sans"),
                    "needs client certificates: set client_auth_type to RequireAndVerifyClientCert",
                ));
            }
            return Ok(None);
        }
        "RequireAndVerifyClientCert" => false,
        "VerifyClientCertIfGiven" => true,
        "RequestClientCert" | "RequireAnyClientCert" => {
            return Err(problem(
                key("client_auth_type"),
                format!(
                    "{mode} accepts a client certificate without verifying it, which rustls does \
                     not do; use VerifyClientCertIfGiven or RequireAndVerifyClientCert"
                ),
            ))
        }
        other => {
            return Err(problem(
                key("client_auth_type"),
                format!(
                    "{other:?} is not one of NoClientCert, VerifyClientCertIfGiven, \
                     RequireAndVerifyClientCert"
                ),
            ))
        }
    };
    if !has_ca {
        return Err(problem(
            key("client_ca_file"),
            format!("missing: {mode} needs the CA that signs the client certificates"),
        ));
    }
    let (ca_key, pem) = pem_source(dir, "client_ca", &t.client_ca_file, &t.client_ca, files)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| problem(&ca_key, format!("not a PEM certificate: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| problem(&ca_key, format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(problem(ca_key, "holds no PEM certificate"));
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
    let builder = if optional {
        builder.allow_unauthenticated()
    } else {
        builder
    };
    let inner = builder
        .build()
        .map_err(|e| problem(&ca_key, format!("{e}")))?;
    Ok(Some(match &t.client_allowed_sans {
        Some(allowed) if !allowed.is_empty() => Arc::new(AllowedSans {
            inner,
            allowed: allowed.clone(),
        }),
        _ => inner,
    }))
}

/// `client_allowed_sans`: a verified client certificate must also carry one of these names
/// (DNS, email, URI or IP), compared exactly, as exporter-toolkit does.
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<String>,
}

/// A certificate's subject alternative names, written as Go prints them.
pub(super) fn sans(der: &[u8]) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let Ok(Some(ext)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    ext.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(s) | GeneralName::RFC822Name(s) | GeneralName::URI(s) => {
                Some((*s).to_owned())
            }
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*bytes).ok()?).to_string()),
                16 => {
                    Some(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*bytes).ok()?).to_string())
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let found = sans(end_entity);
        if found.iter().any(|name| self.allowed.contains(name)) {
            Ok(ClientCertVerified::assertion())
        } else {
            tracing::info!(
                "client certificate refused: none of its names {found:?} is in client_allowed_sans"
            );
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
