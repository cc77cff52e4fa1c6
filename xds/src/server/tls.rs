//! rustls configuration of the TLS gRPC listener (:15012): ALPN `h2` only,
//! the ring provider, certificates from PEM.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

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

/// A server configuration presenting `cert_chain` (PEM) with `key` (PEM),
/// offering only ALPN `h2`.
pub fn server_config(cert_chain: &[u8], key: &[u8]) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_chain)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Certs(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::Certs("no CERTIFICATE block".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsError::Key(e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(cfg))
}
