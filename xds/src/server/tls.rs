//! rustls configuration of the TLS gRPC listener (:15012): ALPN `h2` only,
//! the ring provider, certificates from PEM.

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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder =
        rustls::ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
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
