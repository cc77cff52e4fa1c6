//! Fetching JWT key sets (istiod's `jwks_resolver.go` HTTP side): over
//! http and https, from a `jwksUri` or through the issuer's OpenID
//! discovery document, bounded in size and time. The CA reads `JWT_RULE`'s
//! keys with it; the control thread RequestAuthentication's.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use istiod_mesh::model::JwksKey;

/// istiod's `openIDDiscoveryCfgURLSuffix`.
const OPENID_SUFFIX: &str = "/.well-known/openid-configuration";
/// Largest key set or discovery document read (a JWKS is kilobytes).
const MAX_BODY: usize = 1 << 20;
/// A fetch's time limit (istiod's default for a rule without `timeout`;
/// a rule's own `timeout` is not read for istiod's fetch yet).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Fetches over http and https (the system's roots, as istiod's
/// `secureHTTPClient`; without them https fetches fail with a reason).
pub struct Fetcher {
    http: Client<HttpConnector<Guarded>, Empty<Bytes>>,
    https: Option<Client<hyper_rustls::HttpsConnector<HttpConnector<Guarded>>, Empty<Bytes>>>,
    /// The addresses refused (the resolver's fetcher), none: any.
    guard: Option<std::sync::Arc<Vec<(std::net::IpAddr, u8)>>>,
}

/// `BLOCKED_CIDRS_IN_JWKS_URIS`, parsed at start.
static BLOCKED_CIDRS: std::sync::OnceLock<Vec<(std::net::IpAddr, u8)>> = std::sync::OnceLock::new();

/// Sets the CIDRs RequestAuthentication key sets are never fetched from
/// (`BLOCKED_CIDRS_IN_JWKS_URIS`, comma-separated; a range that does not
/// parse is skipped with istiod's warning). The first call wins.
pub fn set_blocked_cidrs(list: &str) {
    let mut out = Vec::new();
    for cidr in list.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        match parse_cidr(cidr) {
            Some(c) => out.push(c),
            None => tracing::warn!(target: "authn", "Failed to parse CIDR range {cidr:?}"),
        }
    }
    let _ = BLOCKED_CIDRS.set(out);
}

/// A CIDR (`10.0.0.0/8`, `fd00::/8`): its address and prefix length.
fn parse_cidr(s: &str) -> Option<(std::net::IpAddr, u8)> {
    let (a, l) = s.split_once('/')?;
    let ip: std::net::IpAddr = a.parse().ok()?;
    let len: u8 = l.parse().ok()?;
    (len <= if ip.is_ipv4() { 32 } else { 128 }).then_some((ip, len))
}

/// Whether `ip` is in the CIDR `net`/`len`.
fn cidr_contains(net: std::net::IpAddr, len: u8, ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(n) & mask == u32::from(i) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(i)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(n) & mask == u128::from(i) & mask
        }
        _ => false,
    }
}

/// Why a key set is not fetched from `ip` (istiod's `jwksBlockedIP`):
/// link-local addresses (cloud metadata endpoints among them) and the
/// cloud metadata addresses outside that range always, and `cidrs`.
fn blocked(ip: std::net::IpAddr, cidrs: &[(std::net::IpAddr, u8)]) -> Option<String> {
    use std::net::IpAddr;
    let ip = ip.to_canonical();
    let link_local = match ip {
        IpAddr::V4(v) => v.is_link_local() || (v.octets()[..3] == [224, 0, 0]),
        IpAddr::V6(v) => (v.segments()[0] & 0xffc0) == 0xfe80 || (v.segments()[0] & 0xff0f) == 0xff02,
    };
    if link_local {
        return Some(format!("connection blocked: resolved IP {ip} is link-local"));
    }
    let metadata = [("100.100.100.200", 32), ("fd00:ec2::", 32)];
    if metadata.iter().any(|(n, l)| n.parse().is_ok_and(|n| cidr_contains(n, *l, ip))) {
        return Some(format!("connection blocked: resolved IP {ip} is a known cloud metadata address"));
    }
    cidrs
        .iter()
        .find(|(n, l)| cidr_contains(*n, *l, ip))
        .map(|(n, l)| format!("connection blocked: resolved IP {ip} is in blocked CIDR range {n}/{l}"))
}

/// The system resolver, refusing names that resolve only to blocked
/// addresses (istiod checks at dial time, after resolution, so a name
/// cannot smuggle a blocked address in).
#[derive(Clone)]
pub struct Guarded {
    inner: hyper_util::client::legacy::connect::dns::GaiResolver,
    guard: Option<std::sync::Arc<Vec<(std::net::IpAddr, u8)>>>,
}

impl tower_service::Service<hyper_util::client::legacy::connect::dns::Name> for Guarded {
    type Response = std::vec::IntoIter<std::net::SocketAddr>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, name: hyper_util::client::legacy::connect::dns::Name) -> Self::Future {
        let (resolving, guard) = (self.inner.call(name), self.guard.clone());
        Box::pin(async move {
            let addrs: Vec<std::net::SocketAddr> = resolving.await?.collect();
            let Some(cidrs) = guard else { return Ok(addrs.into_iter()) };
            let mut why = None;
            let allowed: Vec<std::net::SocketAddr> = addrs
                .into_iter()
                .filter(|a| match blocked(a.ip(), &cidrs) {
                    Some(reason) => {
                        why.get_or_insert(reason);
                        false
                    }
                    None => true,
                })
                .collect();
            match (allowed.is_empty(), why) {
                (true, Some(reason)) => Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, reason)),
                _ => Ok(allowed.into_iter()),
            }
        })
    }
}

impl Default for Fetcher {
    fn default() -> Self {
        Self::new()
    }
}

/// `JWKS_RESOLVER_INSECURE_SKIP_VERIFY`: the RequestAuthentication key
/// sets' fetcher ([`Fetcher::for_resolver`]) checks no server certificate.
static INSECURE_RESOLVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets [`INSECURE_RESOLVER`] (at start).
pub fn set_resolver_insecure_skip_verify(on: bool) {
    INSECURE_RESOLVER.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Accepts any server certificate (Go's `InsecureSkipVerify`): the
/// handshake's signatures are still checked.
#[derive(Debug)]
struct AnyCertificate(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl Fetcher {
    pub fn new() -> Self {
        Self::verifying(true, None)
    }

    /// The fetcher of RequestAuthentication key sets (istiod's
    /// `jwks_resolver.go`): certificates checked unless
    /// `JWKS_RESOLVER_INSECURE_SKIP_VERIFY`.
    pub fn for_resolver() -> Self {
        let cidrs = BLOCKED_CIDRS.get().cloned().unwrap_or_default();
        Self::verifying(!INSECURE_RESOLVER.load(std::sync::atomic::Ordering::Relaxed), Some(std::sync::Arc::new(cidrs)))
    }

    fn verifying(verify: bool, guard: Option<std::sync::Arc<Vec<(std::net::IpAddr, u8)>>>) -> Self {
        let connector = |enforce_http: bool| {
            let resolver =
                Guarded { inner: hyper_util::client::legacy::connect::dns::GaiResolver::new(), guard: guard.clone() };
            let mut c = HttpConnector::new_with_resolver(resolver);
            c.enforce_http(enforce_http);
            c
        };
        use hyper_rustls::ConfigBuilderExt as _;
        let exec = hyper_util::rt::TokioExecutor::new();
        // `COMPLIANCE_POLICY` holds for these fetches too.
        let (provider, versions) = istiod_xds::server::tls::client_provider();
        let tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| e.to_string())
            .and_then(|b| match verify {
                true => b.with_native_roots().map_err(|e| e.to_string()),
                false => {
                    Ok(b.dangerous().with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate(provider))))
                }
            })
            .map(|b| b.with_no_client_auth());
        let https = match tls {
            Ok(cfg) => {
                let tls = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(cfg)
                    .https_only()
                    .enable_http1()
                    .wrap_connector(connector(false));
                Some(Client::builder(exec.clone()).build(tls))
            }
            Err(e) => {
                tracing::warn!(target: "authn", error = %e, "no root certificates: JWKS cannot be fetched over https");
                None
            }
        };
        Self { http: Client::builder(exec).build(connector(true)), https, guard }
    }

    /// GET `uri`: the body of a 2xx answer, else why not (istiod's
    /// `getRemoteContentWithRetry` without the retries).
    pub async fn get(&self, uri: &str) -> Result<Vec<u8>, String> {
        let parsed: http::Uri = uri.parse().map_err(|e| format!("invalid URI {uri:?}: {e}"))?;
        // An address literal is never resolved: checked here.
        let literal = parsed.host().and_then(|h| h.trim_start_matches('[').trim_end_matches(']').parse().ok());
        if let (Some(ip), Some(cidrs)) = (literal, &self.guard)
            && let Some(reason) = blocked(ip, cidrs)
        {
            return Err(format!("GET {uri}: {reason}"));
        }
        let fut = async {
            let resp = match parsed.scheme_str() {
                Some("http") => self.http.get(parsed).await,
                Some("https") => match &self.https {
                    Some(c) => c.get(parsed).await,
                    None => return Err(format!("cannot fetch {uri}: no root certificates for https")),
                },
                _ => return Err(format!("unsupported scheme in {uri:?}")),
            }
            .map_err(|e| {
                // The cause too (a refused address says why).
                let mut text = format!("GET {uri}: {e}");
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    text.push_str(&format!(": {s}"));
                    source = s.source();
                }
                text
            })?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| format!("GET {uri}: {e}"))?
                .to_bytes();
            if !status.is_success() {
                let msg: String = String::from_utf8_lossy(&body).chars().take(100).collect();
                return Err(format!("GET {uri}: status {}, message {msg:?}", status.as_u16()));
            }
            Ok(body.to_vec())
        };
        let result =
            tokio::time::timeout(FETCH_TIMEOUT, fut).await.unwrap_or_else(|_| Err(format!("GET {uri}: timed out")));
        // istiod's `getPublicKey`: every network fetch, as it ended.
        let name = if result.is_ok() {
            "pilot_jwks_resolver_network_fetch_success_total"
        } else {
            "pilot_jwks_resolver_network_fetch_fail_total"
        };
        istiod_xds::metrics::count_event(name, Vec::new());
        result
    }

    /// The key set of `(issuer, jwks_uri)`: from the URI, or through the
    /// issuer's OpenID discovery document when it is empty; checked to be a
    /// JWKS (istiod's `validateJWKSFormat`: an object with a `keys` array),
    /// so that no other content a URI returns ends up inlined.
    pub async fn key_set(&self, key: &JwksKey) -> Result<String, String> {
        let (issuer, uri) = key;
        let uri = if uri.is_empty() {
            let doc = self.get(&format!("{}{OPENID_SUFFIX}", issuer.trim_end_matches('/'))).await?;
            let v: serde_json::Value =
                serde_json::from_slice(&doc).map_err(|e| format!("OpenID discovery of {issuer:?}: {e}"))?;
            match v.get("jwks_uri").and_then(|u| u.as_str()) {
                Some(u) => u.to_owned(),
                None => return Err(format!("invalid jwks_uri {} in OpenID discovery of {issuer:?}", v["jwks_uri"])),
            }
        } else {
            uri.clone()
        };
        let body = self.get(&uri).await?;
        let v: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| format!("content of {uri} is not a valid JWKS: {e}"))?;
        if !v.get("keys").is_some_and(serde_json::Value::is_array) {
            return Err(format!("content of {uri} is not a valid JWKS: no \"keys\" array"));
        }
        String::from_utf8(body).map_err(|e| format!("content of {uri}: {e}"))
    }
}

#[cfg(test)]
mod tests;
