//! rustls configuration of the TLS gRPC listener (:15012): ALPN `h2` only,
//! the ring provider, certificates from PEM; the process's TLS policy
//! ([`TlsPolicy`]: istiod's `--tls-min-version`, `--tls-cipher-suites`
//! and `COMPLIANCE_POLICY`) on every server configuration built.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

pub use rustls::ServerConfig;

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate chain PEM holds no certificate or does not parse.
    #[error("certificate chain: {0}")]
    Certs(String),
    /// The key PEM holds no private key or does not parse.
    #[error("private key: {0}")]
    Key(String),
    /// rustls refused the pair (e.g. the key does not match).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// What TLS istiod's servers offer: istiod's `--tls-min-version`,
/// `--tls-cipher-suites` (Go's names, TLS 1.2 suites: Go does not let TLS
/// 1.3 ones be chosen) and `COMPLIANCE_POLICY` (`EnforceGoCompliance`,
/// applied last).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsPolicy {
    /// `--tls-min-version=1.3`.
    pub min_tls13: bool,
    /// `--tls-cipher-suites`, as given (empty: the defaults).
    pub cipher_suites: Vec<String>,
    /// `COMPLIANCE_POLICY` (empty: none).
    pub compliance: String,
}

/// Go's names of the TLS 1.2 suites rustls's ring provider has.
const GO_SUITES: [(&str, rustls::CipherSuite); 8] = [
    ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
    ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
    ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
    ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", rustls::CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
    ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", rustls::CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
];

/// The other names Go's `tls.CipherSuites()` and `InsecureCipherSuites()`
/// list: istiod accepts them; rustls has no such suite (CBC, RSA key
/// exchange, 3DES, RC4) or does not let it be chosen (TLS 1.3).
const GO_OTHER_SUITES: [&str; 19] = [
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// istiod's FIPS 140 TLS 1.2 suites (`pkg/model/fips.go` `fipsGoCiphers`).
const FIPS_SUITES: [rustls::CipherSuite; 4] = [
    rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
];

impl TlsPolicy {
    /// Checks the policy as istiod's `PilotArgs.Complete` does: every
    /// suite must be one Go knows (`cipher suite X not supported or
    /// doesn't exist`). Returns what is read and not applied.
    pub fn check(&self) -> Result<Vec<String>, String> {
        let mut not_applied = Vec::new();
        for name in &self.cipher_suites {
            if GO_SUITES.iter().any(|(n, _)| n == name) {
                continue;
            }
            if !GO_OTHER_SUITES.contains(&name.as_str()) {
                return Err(format!("cipher suite {name} not supported or doesn't exist"));
            }
            not_applied.push(format!("--tls-cipher-suites {name}: not offered (rustls has no such TLS 1.2 suite, or it is a TLS 1.3 one, which cannot be chosen)"));
        }
        match self.compliance.as_str() {
            "" | "fips-140-2" | "fips-140-3" => {}
            "pqc" => not_applied.push(
                "COMPLIANCE_POLICY=pqc: X25519MLKEM768 is not offered (TLS 1.3 and its AES-GCM suites are)".into(),
            ),
            other => not_applied.push(format!("unknown compliance policy: {other:?}")),
        }
        Ok(not_applied)
    }

    /// The ring provider limited to the policy's suites and groups, and
    /// the protocol versions it allows.
    fn provider(&self) -> (rustls::crypto::CryptoProvider, Vec<&'static rustls::SupportedProtocolVersion>) {
        use rustls::crypto::ring::{default_provider, kx_group};
        let mut p = default_provider();
        let tls13 = |s: &rustls::SupportedCipherSuite| s.version() == &rustls::version::TLS13;
        if !self.cipher_suites.is_empty() {
            let wanted: Vec<rustls::CipherSuite> = self
                .cipher_suites
                .iter()
                .filter_map(|n| GO_SUITES.iter().find(|(g, _)| g == n).map(|(_, s)| *s))
                .collect();
            let mut chosen: Vec<rustls::SupportedCipherSuite> = p.cipher_suites.iter().copied().filter(tls13).collect();
            for w in wanted {
                if let Some(s) = p.cipher_suites.iter().find(|s| s.suite() == w) {
                    chosen.push(*s);
                }
            }
            p.cipher_suites = chosen;
        }
        let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = if self.min_tls13 {
            vec![&rustls::version::TLS13]
        } else {
            vec![&rustls::version::TLS13, &rustls::version::TLS12]
        };
        match self.compliance.as_str() {
            "fips-140-2" => {
                versions = vec![&rustls::version::TLS12];
                p.cipher_suites.retain(|s| FIPS_SUITES.contains(&s.suite()));
                p.kx_groups = vec![kx_group::SECP256R1];
            }
            "fips-140-3" => {
                if self.min_tls13 {
                    versions = vec![&rustls::version::TLS13];
                }
                p.cipher_suites.retain(|s| tls13(s) || FIPS_SUITES.contains(&s.suite()));
                p.cipher_suites
                    .retain(|s| !tls13(s) || s.suite() != rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256);
                p.kx_groups = vec![kx_group::SECP256R1, kx_group::SECP384R1];
            }
            "pqc" => {
                versions = vec![&rustls::version::TLS13];
                p.cipher_suites
                    .retain(|s| tls13(s) && s.suite() != rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256);
            }
            _ => {}
        }
        (p, versions)
    }
}

/// What `COMPLIANCE_POLICY` leaves a TLS client (istiod-rs's JWKS
/// fetches): its versions, suites and groups; `--tls-min-version` and
/// `--tls-cipher-suites` are the servers' only, as in istiod.
pub fn client_provider() -> (Arc<rustls::crypto::CryptoProvider>, Vec<&'static rustls::SupportedProtocolVersion>) {
    let compliance = TlsPolicy { compliance: policy().compliance, ..TlsPolicy::default() };
    let (p, versions) = compliance.provider();
    (Arc::new(p), versions)
}

/// Makes [`client_provider`] the process's default TLS provider, which
/// clients built without one of their own take (kube's API clients); the
/// first call wins.
pub fn install_client_default() {
    let (provider, _) = client_provider();
    let _ = rustls::crypto::CryptoProvider::install_default(Arc::unwrap_or_clone(provider));
}

static POLICY: std::sync::RwLock<Option<TlsPolicy>> = std::sync::RwLock::new(None);

/// Sets the policy every server configuration is built with from now on.
pub fn set_policy(policy: TlsPolicy) {
    *POLICY.write().unwrap_or_else(|e| e.into_inner()) = Some(policy);
}

fn policy() -> TlsPolicy {
    POLICY.read().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default()
}

/// A listener's TLS configuration, replaceable while it serves: each new
/// connection is handshaken with the one current when it is accepted
/// (istiod's own certificate is renewed, the CA's roots rotate).
#[derive(Clone)]
pub struct Reloadable(Arc<std::sync::RwLock<Arc<rustls::ServerConfig>>>);

impl Reloadable {
    /// Starts with `cfg`.
    pub fn new(cfg: Arc<rustls::ServerConfig>) -> Self {
        Self(Arc::new(std::sync::RwLock::new(cfg)))
    }

    /// The configuration in force.
    pub fn get(&self) -> Arc<rustls::ServerConfig> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces it for connections accepted from now on.
    pub fn set(&self, cfg: Arc<rustls::ServerConfig>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = cfg;
    }
}

impl From<Arc<rustls::ServerConfig>> for Reloadable {
    fn from(cfg: Arc<rustls::ServerConfig>) -> Self {
        Self::new(cfg)
    }
}

impl std::fmt::Debug for Reloadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reloadable(rustls::ServerConfig)")
    }
}

/// A server configuration presenting `cert_chain` (PEM) with `key` (PEM),
/// offering only ALPN `h2`.
pub fn server_config(cert_chain: &[u8], key: &[u8]) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    server_config_alpn(cert_chain, key, None, &[b"h2"])
}

/// A server configuration presenting `cert_chain` with `key` (PEM),
/// offering the ALPN protocols `alpn` (gRPC takes `h2`, the webhooks `h2`
/// and `http/1.1`). With `client_roots` (PEM) it asks clients for a
/// certificate those roots verify: optional (a client without one is
/// served as before), and one that does not verify fails the handshake.
/// The verified leaf reaches the service as `ConnInfo::peer_certificate`.
pub fn server_config_alpn(
    cert_chain: &[u8],
    key: &[u8],
    client_roots: Option<&[u8]>,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_chain)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Certs(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::Certs("no CERTIFICATE block".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsError::Key(e.to_string()))?;
    let (provider, versions) = policy().provider();
    let provider = Arc::new(provider);
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions)?;
    let builder = match client_roots {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(pem) {
                let c = c.map_err(|e| TlsError::Certs(format!("client roots: {e}")))?;
                roots.add(c).map_err(|e| TlsError::Certs(format!("client roots: {e}")))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Certs(format!("client roots: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = builder.with_single_cert(certs, key)?;
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(cfg))
}
