//! Gateway credentials served over SDS, as istiod reads them (facts in
//! docs/design/gateway-notes.md §5): resource names
//! (`model/credentials/resource.go ParseResourceName`), the certificate,
//! key and CA a Secret holds (`credentials/kube/secrets.go
//! ExtractCertInfo`, `ExtractRoot`), and which names a proxy may read
//! (`xds/sds.go filterAuthorizedResources` for `kubernetes://` names).
//!
//! The SDS generator (`generator/router.rs`) uses it.

use std::collections::BTreeMap;

/// The suffix of a CA-only resource.
pub const CA_SUFFIX: &str = "-cacert";

/// What a resource name asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// `kubernetes://[ns/]name[-cacert]`: a Secret.
    Kubernetes {
        /// The Secret's namespace (the proxy's when not given).
        namespace: String,
        /// The Secret's name, without `-cacert`.
        name: String,
        /// Only the CA (`-cacert`).
        ca_only: bool,
    },
    /// `kubernetes-gateway://ns/name`: a Secret a Gateway API Gateway
    /// names (read only when the Gateway may: its namespace or a
    /// ReferenceGrant).
    KubernetesGateway {
        /// Namespace (required).
        namespace: String,
        /// Name, without `-cacert`.
        name: String,
        /// Only the CA.
        ca_only: bool,
    },
    /// `configmap://ns/name`: a CA in a ConfigMap.
    ConfigMap {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
}

/// Parses an SDS resource name for a proxy in `proxy_namespace`; `None`
/// for names istiod does not serve (`invalid://`, an unknown scheme, a
/// malformed name), which are skipped.
pub fn parse(resource: &str, proxy_namespace: &str) -> Option<Resource> {
    let split = |rest: &str| -> (String, bool) {
        match rest.strip_suffix(CA_SUFFIX) {
            Some(n) => (n.to_owned(), true),
            None => (rest.to_owned(), false),
        }
    };
    // istiod splits on `/` and reads the first two parts (more are
    // ignored); `kubernetes://` names may leave the namespace out.
    let ns_name = |rest: &str| -> Option<(String, String)> {
        let mut parts = rest.split('/');
        let (ns, name) = (parts.next()?, parts.next()?);
        (!ns.is_empty() && !name.is_empty()).then(|| (ns.to_owned(), name.to_owned()))
    };
    if let Some(rest) = resource.strip_prefix("kubernetes://") {
        let (ns, name) =
            if rest.contains('/') { ns_name(rest)? } else { (proxy_namespace.to_owned(), rest.to_owned()) };
        let (name, ca_only) = split(&name);
        return Some(Resource::Kubernetes { namespace: ns, name, ca_only });
    }
    if let Some(rest) = resource.strip_prefix("kubernetes-gateway://") {
        let (ns, name) = ns_name(rest)?;
        let (name, ca_only) = split(&name);
        return Some(Resource::KubernetesGateway { namespace: ns, name, ca_only });
    }
    if let Some(rest) = resource.strip_prefix("configmap://") {
        let (namespace, name) = ns_name(rest)?;
        // GetConfigMapCaCert reads the ConfigMap without the suffix.
        let (name, _) = split(&name);
        return Some(Resource::ConfigMap { namespace, name });
    }
    None
}

/// A certificate and key (PEM) for a TLS listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// Certificate chain.
    pub cert: Vec<u8>,
    /// Private key (never logged).
    pub key: Vec<u8>,
    /// Revocation list, when the Secret has one.
    pub crl: Option<Vec<u8>>,
    /// OCSP staple (`tls.ocsp-staple` of a TLS Secret).
    pub staple: Option<Vec<u8>>,
}

/// A Secret's `data`, decoded (the API sends base64; the config source
/// decodes it).
pub type SecretData = BTreeMap<String, Vec<u8>>;

fn non_empty<'a>(d: &'a SecretData, k: &str) -> Option<&'a Vec<u8>> {
    d.get(k).filter(|v| !v.is_empty())
}

/// `ExtractCertInfo`: generic `cert` + `key` (and `crl`) first, else the
/// TLS Secret's `tls.crt` + `tls.key` (and `ca.crl`); both non-empty.
pub fn cert_info(d: &SecretData) -> Result<CertInfo, String> {
    if let (Some(cert), Some(key)) = (non_empty(d, "cert"), non_empty(d, "key")) {
        return Ok(CertInfo { cert: cert.clone(), key: key.clone(), crl: non_empty(d, "crl").cloned(), staple: None });
    }
    if let (Some(cert), Some(key)) = (non_empty(d, "tls.crt"), non_empty(d, "tls.key")) {
        return Ok(CertInfo {
            cert: cert.clone(),
            key: key.clone(),
            crl: non_empty(d, "ca.crl").cloned(),
            staple: non_empty(d, "tls.ocsp-staple").cloned(),
        });
    }
    for (c, k) in [("cert", "key"), ("tls.crt", "tls.key")] {
        if d.contains_key(c) && d.contains_key(k) {
            return Err(format!("found keys {c:?} and {k:?}, but they were empty"));
        }
    }
    Err(format!(
        "found secret, but didn't have expected keys (cert and key) or (tls.crt and tls.key); found: {}",
        crate::objects::found_keys(d)
    ))
}

/// Whether a Secret holds a certificate and key a gateway can serve
/// (`buildSecretReference`: `ExtractCertInfo`, then `tls.X509KeyPair`,
/// here as far as finding the PEM blocks); the error in istiod's words.
pub fn usable_pair(d: &SecretData) -> Result<(), String> {
    let c = cert_info(d)?;
    let has = |pem: &[u8], label: &str| {
        let text = String::from_utf8_lossy(pem);
        text.lines().any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&format!("{label}-----")))
    };
    if !has(&c.cert, "CERTIFICATE") {
        return Err("the certificate is malformed: tls: failed to find any PEM data in certificate input".into());
    }
    if !has(&c.key, "PRIVATE KEY") {
        return Err("the certificate is malformed: tls: failed to find any PEM data in key input".into());
    }
    Ok(())
}

/// `ExtractRoot`: generic `cacert` (and `crl`) first, else `ca.crt` (and
/// `ca.crl`).
pub fn ca_info(d: &SecretData) -> Result<(Vec<u8>, Option<Vec<u8>>), String> {
    crate::objects::extract_root(d)
}

/// For a `-cacert` name istiod reads the Secret `<name>-cacert` first and
/// falls back to `<name>`: the Secret names to try, in order.
pub fn ca_secret_names(name: &str) -> [String; 2] {
    [format!("{name}{CA_SUFFIX}"), name.to_owned()]
}

/// Whether a proxy of `proxy_namespace` may read a `kubernetes://`
/// resource: only in its own namespace, and, unless only the CA is asked,
/// when its service account may list Secrets there (`can_list_secrets`,
/// istiod's SubjectAccessReview). Cross-namespace names are never served.
pub fn authorized(r: &Resource, proxy_namespace: &str, can_list_secrets: impl FnOnce() -> bool) -> bool {
    match r {
        Resource::Kubernetes { namespace, ca_only, .. } => {
            namespace == proxy_namespace && (*ca_only || can_list_secrets())
        }
        // Decided by the Gateway's verified references (ReferenceGrants).
        Resource::KubernetesGateway { .. } => false,
        Resource::ConfigMap { .. } => true,
    }
}

/// istiod's `CredentialsController.Authorize`: whether a gateway's service
/// account may list the Secrets of its namespace, which it must to read a
/// `kubernetes://` credential that is not only a CA. The API server
/// decides (a SubjectAccessReview, asked by the control thread,
/// `discovery/secret_access.rs`); the answers it gave are part of the
/// model, so a changed answer is pushed like any change. Without an API
/// server (`--configDir`) there is no RBAC to ask and a verified gateway
/// reads its namespace's Secrets.
#[derive(Clone, Default)]
pub struct SecretAccess {
    /// Where a gateway whose service account has no answer yet is asked
    /// about (`None`: nothing to ask, every verified gateway may read).
    pub asks: Option<Asks>,
    /// The answers in force, by (namespace, service account).
    pub answers: BTreeMap<(String, String), Answer>,
}

/// Where a question goes: (namespace, service account) to whoever asks the
/// API server (the control thread's SubjectAccessReview task).
#[derive(Clone)]
pub struct Asks(std::sync::Arc<dyn Fn(String, String) + Send + Sync>);

impl Asks {
    /// Questions handed to `f`.
    pub fn new(f: impl Fn(String, String) + Send + Sync + 'static) -> Asks {
        Asks(std::sync::Arc::new(f))
    }
}

/// One answer of the API server, and whether a gateway read it since the
/// control thread last looked (an expired answer nobody reads is dropped,
/// not reviewed again).
#[derive(Clone, Debug, Default)]
pub struct Answer {
    /// May list Secrets.
    pub allowed: bool,
    /// Read by a core since last cleared.
    pub used: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Answer {
    /// An answer, not read yet.
    pub fn new(allowed: bool) -> Answer {
        Answer { allowed, used: Default::default() }
    }
}

impl PartialEq for Answer {
    fn eq(&self, other: &Self) -> bool {
        self.allowed == other.allowed
    }
}

impl SecretAccess {
    /// A copy that asks the API server nothing: the answers in force (not
    /// marked read), none for a service account not asked about yet.
    /// What-if predictions generate with it: what they generate is not
    /// served. (Equal to `self`: the same answers.)
    pub fn quiet(&self) -> SecretAccess {
        SecretAccess {
            asks: self.asks.as_ref().map(|_| Asks::new(|_, _| {})),
            answers: self.answers.iter().map(|(k, a)| (k.clone(), Answer::new(a.allowed))).collect(),
        }
    }

    /// Whether service account `sa` of `namespace` may read its
    /// namespace's Secrets: `None` while the API server has not said (it
    /// is asked; the answer is pushed when it comes).
    pub fn allows(&self, namespace: &str, sa: &str) -> Option<bool> {
        let Some(asks) = &self.asks else { return Some(true) };
        if sa.is_empty() {
            return Some(false);
        }
        let key = (namespace.to_owned(), sa.to_owned());
        match self.answers.get(&key) {
            Some(a) => {
                a.used.store(true, std::sync::atomic::Ordering::Relaxed);
                Some(a.allowed)
            }
            None => {
                (asks.0)(key.0, key.1);
                None
            }
        }
    }
}

impl PartialEq for SecretAccess {
    fn eq(&self, other: &Self) -> bool {
        self.asks.is_some() == other.asks.is_some() && self.answers == other.answers
    }
}

impl std::fmt::Debug for SecretAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretAccess").field("reviewed", &self.asks.is_some()).field("answers", &self.answers).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without an API server every verified gateway may read; with one,
    /// an unknown service account is asked about (and not served
    /// meanwhile), an answer is kept, and a gateway without a service
    /// account never reads.
    #[test]
    fn secret_access_asks_the_api_server_once_it_is_there() {
        assert_eq!(SecretAccess::default().allows("edge", "gw"), Some(true));
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        let asks = Asks::new(move |ns, sa| tx.lock().unwrap().send((ns, sa)).unwrap());
        let mut access = SecretAccess { asks: Some(asks), ..Default::default() };
        assert_eq!(access.allows("edge", "gw"), None);
        assert_eq!(rx.try_recv().unwrap(), ("edge".to_owned(), "gw".to_owned()));
        assert_eq!(access.allows("edge", ""), Some(false));
        assert!(rx.try_recv().is_err(), "no service account: nothing to ask");
        access.answers.insert(("edge".into(), "gw".into()), Answer::new(true));
        access.answers.insert(("edge".into(), "other".into()), Answer::new(false));
        assert_eq!(access.allows("edge", "gw"), Some(true));
        assert!(access.answers[&("edge".to_owned(), "gw".to_owned())].used.load(std::sync::atomic::Ordering::Relaxed));
        assert_eq!(access.allows("edge", "other"), Some(false));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn resource_names_as_istiod_parses_them() {
        let k = |ns: &str, name: &str, ca_only| {
            Some(Resource::Kubernetes { namespace: ns.into(), name: name.into(), ca_only })
        };
        assert_eq!(parse("kubernetes://my-cert", "gw-ns"), k("gw-ns", "my-cert", false));
        assert_eq!(parse("kubernetes://other/my-cert", "gw-ns"), k("other", "my-cert", false));
        assert_eq!(parse("kubernetes://my-cert-cacert", "gw-ns"), k("gw-ns", "my-cert", true));
        assert_eq!(
            parse("kubernetes-gateway://ns/c", "x"),
            Some(Resource::KubernetesGateway { namespace: "ns".into(), name: "c".into(), ca_only: false })
        );
        assert_eq!(
            parse("configmap://ns/ca", "x"),
            Some(Resource::ConfigMap { namespace: "ns".into(), name: "ca".into() })
        );
        assert_eq!(parse("kubernetes://a/b/c", "x"), k("a", "b", false), "extra parts ignored, as istiod");
        // An empty name parses (as in istiod) and names no Secret.
        assert_eq!(parse("kubernetes://", "x"), k("x", "", false));
        for bad in
            ["invalid://", "file:///etc/cert", "configmap:///ca", "kubernetes-gateway://nons", "default", "ROOTCA"]
        {
            assert_eq!(parse(bad, "x"), None, "{bad}");
        }
    }

    #[test]
    fn secret_data_as_istiod_reads_it() {
        let d = |kv: &[(&str, &str)]| -> SecretData {
            kv.iter().map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec())).collect()
        };
        let generic = d(&[("cert", "C"), ("key", "K"), ("tls.crt", "T"), ("tls.key", "TK"), ("crl", "R")]);
        let info = cert_info(&generic).unwrap();
        assert_eq!(
            (info.cert, info.key, info.crl),
            (b"C".to_vec(), b"K".to_vec(), Some(b"R".to_vec())),
            "generic keys first"
        );
        let tls = d(&[("tls.crt", "T"), ("tls.key", "TK"), ("ca.crt", "CA")]);
        assert_eq!(cert_info(&tls).unwrap().cert, b"T");
        assert_eq!(ca_info(&tls).unwrap().0, b"CA");
        let empty_key = d(&[("tls.crt", "T"), ("tls.key", "")]);
        // istiod's messages (secrets.go ExtractCertInfo, ExtractRoot,
        // truncatedKeysMessage).
        assert_eq!(cert_info(&empty_key).unwrap_err(), "found keys \"tls.crt\" and \"tls.key\", but they were empty");
        let many = d(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"), ("e", "5")]);
        assert_eq!(
            cert_info(&many).unwrap_err(),
            "found secret, but didn't have expected keys (cert and key) or (tls.crt and tls.key); found: a, b, c, and 2 more..."
        );
        assert_eq!(
            ca_info(&d(&[("cert", "C")])).unwrap_err(),
            "found secret, but didn't have expected keys cacert or ca.crt; found: cert"
        );
        assert_eq!(ca_info(&d(&[("ca.crt", "")])).unwrap_err(), "found key \"ca.crt\", but it was empty");
        assert_eq!(ca_secret_names("c"), ["c-cacert".to_owned(), "c".to_owned()]);
    }

    #[test]
    fn a_gateway_reads_only_its_own_namespaces_secrets() {
        let r = parse("kubernetes://c", "gw").unwrap();
        assert!(authorized(&r, "gw", || true));
        assert!(!authorized(&r, "gw", || false), "its service account must be able to list secrets");
        let other = parse("kubernetes://other/c", "gw").unwrap();
        assert!(!authorized(&other, "gw", || true), "never across namespaces");
        let ca = parse("kubernetes://c-cacert", "gw").unwrap();
        assert!(authorized(&ca, "gw", || panic!("no access check for a CA")));
    }
}
