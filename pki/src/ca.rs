//! The Istio CA, as istiod runs it (`security/pkg/pki/ca/ca.go`,
//! `security/pkg/pki/util/generate_cert.go`, `pilot/pkg/bootstrap/istio_ca.go`):
//!
//! - plugged-in certificates from `ROOT_CA_DIR` (`ca-cert.pem`, `ca-key.pem`,
//!   `root-cert.pem`, `cert-chain.pem`), or
//! - a self-signed root (ECDSA P-256, `CITADEL_SELF_SIGNED_CA_CERT_TTL`, ten
//!   years by default) kept where the next start finds it again.
//!
//! [`Ca::sign`] verifies a CSR (PEM, its own signature, an ECDSA P-256/P-384
//! or RSA >= 2048 key), refuses a CSR that names any identity but the
//! caller's, and issues a leaf whose only SANs are the caller's SPIFFE
//! identities: no subject, SAN critical, digital signature and key
//! encipherment, server and client auth, valid from two minutes ago
//! (istiod's clock-skew grace) for the requested TTL (the default when not
//! positive; over the maximum is an error, as in istiod), never past the
//! signing certificate. The chain answered is istiod's: the leaf, each
//! certificate of `cert-chain.pem`, then the root bundle.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData, SanType, SerialNumber, SignatureAlgorithm,
};
use time::OffsetDateTime;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;
use x509_parser::public_key::PublicKey;

use crate::duration;

/// istiod's `ClockSkewGracePeriod`: certificates are valid from this long
/// before they are issued.
pub const CLOCK_SKEW_GRACE: Duration = Duration::from_secs(120);

/// The largest CSR accepted (istio-agent's are under 2 KiB).
pub const MAX_CSR_BYTES: usize = 64 * 1024;

/// How the CA issues.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The mesh's trust domain (the self-signed root's organization).
    pub trust_domain: String,
    /// `DEFAULT_WORKLOAD_CERT_TTL` (24h): for requests without a TTL.
    pub default_ttl: Duration,
    /// `MAX_WORKLOAD_CERT_TTL` (90 days): longer requests are refused.
    pub max_ttl: Duration,
    /// `CITADEL_SELF_SIGNED_CA_CERT_TTL` (10 years).
    pub self_signed_ttl: Duration,
    /// `CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE`: a self-signed root with an
    /// RSA key of this many bits; `None`, ECDSA P-256.
    pub rsa_key_bits: Option<usize>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            trust_domain: "cluster.local".into(),
            default_ttl: Duration::from_secs(24 * 3600),
            max_ttl: Duration::from_secs(90 * 24 * 3600),
            self_signed_ttl: Duration::from_secs(10 * 365 * 24 * 3600),
            rsa_key_bits: None,
        }
    }
}

/// Why the CA could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file does not hold what it should (the key's bytes never appear).
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The signing certificate has expired.
    #[error("the CA certificate {path} expired at {not_after}")]
    Expired {
        /// The file.
        path: PathBuf,
        /// When.
        not_after: OffsetDateTime,
    },
    /// Generating the self-signed root failed.
    #[error("generating the self-signed root: {0}")]
    Generate(String),
}

/// Why a CSR was not signed; each maps to istiod's gRPC status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The CSR does not parse, its signature does not verify, or its key is
    /// not accepted (istiod's `CSRError`: INVALID_ARGUMENT).
    #[error("{0}")]
    Csr(String),
    /// The requested lifetime is over the maximum (`TTLError`:
    /// INVALID_ARGUMENT).
    #[error("requested TTL {requested} is greater than the max allowed TTL {max}")]
    Ttl {
        /// Requested, in Go's notation.
        requested: String,
        /// The maximum, in Go's notation.
        max: String,
    },
    /// The CSR names an identity the caller does not have
    /// (PERMISSION_DENIED).
    #[error("the CSR asks for {asked}, but the caller is {caller}")]
    Identity {
        /// What the CSR names.
        asked: String,
        /// The caller's identities.
        caller: String,
    },
    /// Issuing failed (`CertGenError`: INTERNAL).
    #[error("{0}")]
    Issue(String),
}

/// A CSR's subject public key, as rcgen signs it.
struct CsrKey {
    raw: Vec<u8>,
    alg: &'static SignatureAlgorithm,
}

impl PublicKeyData for CsrKey {
    fn der_bytes(&self) -> &[u8] {
        &self.raw
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.alg
    }
}

/// The certificate authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    /// The signing certificate's end: no leaf outlives it.
    not_after: OffsetDateTime,
    /// `cert-chain.pem`, one PEM per certificate (empty for a self-signed
    /// root).
    chain: Vec<String>,
    /// `root-cert.pem` as given: the trust bundle.
    root: String,
    /// The signing certificate (DER), to recognise what this CA issued.
    signer: Vec<u8>,
    /// The signing certificate (PEM).
    cert_pem: String,
    /// `ca-crl.pem` of a plugged-in CA (empty: none), which istiod
    /// distributes in the `istio-ca-crl` ConfigMaps.
    crl: String,
    settings: Settings,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Ca").field("not_after", &self.not_after).field("chain", &self.chain.len()).finish()
    }
}

fn read(path: &Path) -> Result<String, CaError> {
    std::fs::read_to_string(path).map_err(|source| CaError::Io { path: path.to_owned(), source })
}

/// The PEM blocks of `text` labelled `label`, each re-encoded with a final
/// newline.
pub fn pem_blocks(text: &str, label: &str) -> Vec<String> {
    let (begin, end) = (format!("-----BEGIN {label}-----"), format!("-----END {label}-----"));
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(b) = rest.find(&begin) {
        let Some(e) = rest[b..].find(&end) else { break };
        let stop = b + e + end.len();
        out.push(format!("{}\n", &rest[b..stop]));
        rest = &rest[stop..];
    }
    out
}

/// The end of validity of a PEM certificate.
fn not_after(pem: &str, path: &Path) -> Result<OffsetDateTime, CaError> {
    let invalid = |reason: String| CaError::Invalid { path: path.to_owned(), reason };
    let (_, block) =
        x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| invalid(format!("not a PEM certificate: {e}")))?;
    let cert = block.parse_x509().map_err(|e| invalid(format!("not an X.509 certificate: {e}")))?;
    Ok(cert.validity().not_after.to_datetime())
}

impl Ca {
    /// The plugged-in CA of `dir` (istiod's `ROOT_CA_DIR`, the `cacerts`
    /// Secret mounted), or `None` when it holds no `ca-key.pem`.
    /// `cert-chain.pem` is optional; `root-cert.pem` defaults to
    /// `ca-cert.pem` (a root used directly).
    pub fn plugged(dir: &Path, settings: Settings) -> Result<Option<Ca>, CaError> {
        let key_path = dir.join("ca-key.pem");
        if !key_path.exists() {
            return Ok(None);
        }
        let cert_path = dir.join("ca-cert.pem");
        let cert = read(&cert_path)?;
        let key = key_from_pem(&read(&key_path)?).map_err(|e| CaError::Invalid {
            path: key_path.clone(),
            reason: format!("not a usable private key: {e}"),
        })?;
        let root_path = dir.join("root-cert.pem");
        let root = if root_path.exists() { read(&root_path)? } else { cert.clone() };
        let chain_path = dir.join("cert-chain.pem");
        let chain = if chain_path.exists() { pem_blocks(&read(&chain_path)?, "CERTIFICATE") } else { Vec::new() };
        let crl_path = dir.join("ca-crl.pem");
        let crl = if crl_path.exists() { read(&crl_path)? } else { String::new() };
        let mut ca = Self::from_parts(&cert_path, &cert, key, chain, root, settings)?;
        ca.crl = crl;
        Ok(Some(ca))
    }

    /// The self-signed CA kept in `dir` (`ca-cert.pem`, `ca-key.pem`): read
    /// when there, else generated and written (the key 0600), so a restart
    /// keeps the root every workload trusts. istiod keeps it in the
    /// `istio-ca-secret` Secret; this is the same without Kubernetes.
    pub fn self_signed_in(dir: &Path, settings: Settings) -> Result<Ca, CaError> {
        let (cert_path, key_path) = (dir.join("ca-cert.pem"), dir.join("ca-key.pem"));
        if key_path.exists() && cert_path.exists() {
            let cert = read(&cert_path)?;
            let key = key_from_pem(&read(&key_path)?).map_err(|e| CaError::Invalid {
                path: key_path.clone(),
                reason: format!("not a usable private key: {e}"),
            })?;
            return Self::from_parts(&cert_path, &cert, key, Vec::new(), cert.clone(), settings);
        }
        let (cert, key) = Self::generate_root(&settings)?;
        fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
            move |source| CaError::Io { path: path.to_owned(), source }
        }
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        write_private(&key_path, key.serialize_pem().as_bytes()).map_err(io(&key_path))?;
        std::fs::write(&cert_path, &cert).map_err(io(&cert_path))?;
        tracing::info!(target: "ca", dir = %dir.display(), "generated a self-signed root CA");
        Self::from_parts(&cert_path, &cert, key, Vec::new(), cert.clone(), settings)
    }

    /// A new self-signed root for a store outside this process (istiod's
    /// `istio-ca-secret`): (certificate PEM, private key PEM).
    pub fn generate_root_pem(settings: &Settings) -> Result<(String, String), CaError> {
        let (cert, key) = Self::generate_root(settings)?;
        Ok((cert, key.serialize_pem()))
    }

    /// The self-signed CA of a certificate and key given as PEM (read from
    /// `source`, named in errors); the trust bundle is the certificate
    /// followed by `older_roots` (roots still trusted after a rotation).
    pub fn self_signed_from_pem(
        cert: &str,
        key: &str,
        older_roots: &[String],
        settings: Settings,
        source: &str,
    ) -> Result<Ca, CaError> {
        let path = Path::new(source);
        let key = key_from_pem(key).map_err(|e| CaError::Invalid {
            path: path.to_owned(),
            reason: format!("ca-key.pem is not a usable private key: {e}"),
        })?;
        let mut bundle = cert.to_owned();
        if !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        for old in older_roots {
            bundle.push_str(old);
        }
        Self::from_parts(path, cert, key, Vec::new(), bundle, settings)
    }

    /// istiod's root rotation (`GenRootCertFromExistingKey`): a new
    /// self-signed certificate for the same key and subject, so every
    /// certificate the old one signed verifies under the new one too.
    pub fn renew_root_pem(cert: &str, key: &str, settings: &Settings) -> Result<String, CaError> {
        let invalid = |reason: String| CaError::Invalid { path: PathBuf::from("ca-cert.pem"), reason };
        let key = key_from_pem(key).map_err(|e| invalid(format!("ca-key.pem: {e}")))?;
        let (_, block) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).map_err(|e| invalid(e.to_string()))?;
        let parsed = block.parse_x509().map_err(|e| invalid(e.to_string()))?;
        // The same subject (istiod's roots carry O = the trust domain, a
        // plugged-in one may carry CN too).
        let mut dn = DistinguishedName::new();
        for o in parsed.subject().iter_organization() {
            dn.push(DnType::OrganizationName, o.as_str().map_err(|e| invalid(e.to_string()))?);
        }
        for cn in parsed.subject().iter_common_name() {
            dn.push(DnType::CommonName, cn.as_str().map_err(|e| invalid(e.to_string()))?);
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = dn;
        let now = OffsetDateTime::now_utc();
        params.not_before = now - CLOCK_SKEW_GRACE;
        params.not_after = now + settings.self_signed_ttl;
        params.serial_number = Some(serial().map_err(CaError::Generate)?);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key).map_err(|e| CaError::Generate(e.to_string()))?;
        Ok(cert.pem())
    }

    /// The signing certificate (PEM), as loaded.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A new self-signed CA held in memory only.
    pub fn generate(settings: Settings) -> Result<Ca, CaError> {
        let (cert, key) = Self::generate_root(&settings)?;
        Self::from_parts(Path::new("<generated>"), &cert, key, Vec::new(), cert.clone(), settings)
    }

    /// istiod's self-signed root: organization the trust domain, a CA
    /// that may sign (key usage cert sign and CRL sign), the configured
    /// lifetime, backdated by the clock-skew grace.
    fn generate_root(settings: &Settings) -> Result<(String, KeyPair), CaError> {
        let key = match settings.rsa_key_bits {
            None => KeyPair::generate().map_err(|e| CaError::Generate(e.to_string()))?,
            Some(bits) => rsa_key(bits)?,
        };
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, settings.trust_domain.clone());
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - CLOCK_SKEW_GRACE;
        params.not_after = now + settings.self_signed_ttl;
        params.serial_number = Some(serial().map_err(CaError::Generate)?);
        let cert = params.self_signed(&key).map_err(|e| CaError::Generate(e.to_string()))?;
        Ok((cert.pem(), key))
    }

    fn from_parts(
        cert_path: &Path,
        cert: &str,
        key: KeyPair,
        chain: Vec<String>,
        root: String,
        settings: Settings,
    ) -> Result<Ca, CaError> {
        let not_after = not_after(cert, cert_path)?;
        if not_after <= OffsetDateTime::now_utc() {
            return Err(CaError::Expired { path: cert_path.to_owned(), not_after });
        }
        // istiod's verified key-cert bundle: the key is the certificate's,
        // and the certificate may sign. A rotation caught half-way (a new
        // certificate with the old key) is refused, not put in force.
        let invalid = |reason: &str| CaError::Invalid { path: cert_path.to_owned(), reason: reason.to_owned() };
        let (_, block) =
            x509_parser::pem::parse_x509_pem(cert.as_bytes()).map_err(|_| invalid("not a PEM certificate"))?;
        let parsed = block.parse_x509().map_err(|_| invalid("not an X.509 certificate"))?;
        if parsed.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(invalid("the private key (ca-key.pem) is not this certificate's"));
        }
        if !parsed.is_ca() {
            return Err(invalid("the certificate is not a CA (basicConstraints)"));
        }
        let issuer = Issuer::from_ca_cert_pem(cert, key).map_err(|e| CaError::Invalid {
            path: cert_path.to_owned(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
        Ok(Ca {
            issuer,
            not_after,
            chain,
            root,
            signer: block.contents.clone(),
            cert_pem: cert.to_owned(),
            crl: String::new(),
            settings,
        })
    }

    /// A plugged-in CA's revocation list (`ca-crl.pem`), empty when it has
    /// none.
    pub fn crl_pem(&self) -> &str {
        &self.crl
    }

    /// The trust bundle (`root-cert.pem`): what workloads verify against
    /// and the `istio-ca-root-cert` ConfigMap carries.
    pub fn root_pem(&self) -> &str {
        &self.root
    }

    /// Whether `leaf` (DER) is a certificate this CA's signing certificate
    /// issued and still valid now: what a client certificate must be to
    /// stand for its identities (the TLS layer checked it against the
    /// roots of the start; the CA may have rotated since, and a long-lived
    /// connection may outlive the certificate).
    pub fn issued(&self, leaf: &[u8]) -> bool {
        use x509_parser::certificate::X509Certificate;
        let (Ok((_, leaf)), Ok((_, signer))) =
            (X509Certificate::from_der(leaf), X509Certificate::from_der(&self.signer))
        else {
            return false;
        };
        leaf.validity().is_valid() && leaf.verify_signature(Some(signer.public_key())).is_ok()
    }

    /// When the signing certificate expires.
    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// When the first certificate of the root bundle expires.
    pub fn root_not_after(&self) -> Option<OffsetDateTime> {
        not_after(&self.root, Path::new("root-cert.pem")).ok()
    }

    /// What the CA issues under.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The lifetime a request for `requested_secs` gets: the default when
    /// not positive, an error over the maximum.
    fn lifetime(&self, requested_secs: i64) -> Result<Duration, SignError> {
        if requested_secs <= 0 {
            return Ok(self.settings.default_ttl);
        }
        let requested = Duration::from_secs(requested_secs as u64);
        if requested > self.settings.max_ttl {
            return Err(SignError::Ttl {
                requested: duration::go(requested),
                max: duration::go(self.settings.max_ttl),
            });
        }
        Ok(requested)
    }

    /// What [`Ca::sign`] checks, for a CSR another signs (istiod's RA
    /// `preSign`): the lifetime asked is allowed, the CSR names the
    /// caller's identities, and it is a CSR as istio-agent or ztunnel
    /// makes one ([`agent_made`]), since the signer copies what it asks.
    pub fn check_request(&self, csr_pem: &[u8], identities: &[String], requested_secs: i64) -> Result<(), SignError> {
        // preSign's order: the CSR (ValidateCSR), then the lifetime.
        verified_key(csr_pem, identities, true)?;
        self.lifetime(requested_secs).map(|_| ())
    }

    /// Signs `csr_pem` for a caller with SPIFFE `identities`, for
    /// `requested_secs` (the request's `validity_duration`). Returns the
    /// chain istiod answers: leaf, intermediates, root bundle.
    pub fn sign(&self, csr_pem: &[u8], identities: &[String], requested_secs: i64) -> Result<Vec<String>, SignError> {
        let lifetime = self.lifetime(requested_secs)?;
        let key = verified_key(csr_pem, identities, false)?;
        let mut params = CertificateParams::default();
        params.subject_alt_names = identities
            .iter()
            .map(|id| {
                id.as_str().try_into().map(SanType::URI).map_err(|e| SignError::Issue(format!("identity {id}: {e}")))
            })
            .collect::<Result<_, _>>()?;
        params.distinguished_name = DistinguishedName::new();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let leaf = self.issue_params(params, &key, lifetime)?;
        let mut out = Vec::with_capacity(self.chain.len() + 2);
        out.push(leaf);
        out.extend(self.chain.iter().cloned());
        out.push(self.root.clone());
        Ok(out)
    }

    /// A key and certificate for istiod itself (`GenKeyCert`): DNS SANs
    /// `dns_names`, server and client auth, `ttl`. Returns (certificate
    /// chain PEM: leaf then `cert-chain.pem`, private key PEM).
    pub fn issue_server(&self, dns_names: &[String], ttl: Duration) -> Result<(String, String), SignError> {
        let key = KeyPair::generate().map_err(|e| SignError::Issue(e.to_string()))?;
        let mut params = CertificateParams::new(dns_names.to_vec()).map_err(|e| SignError::Issue(e.to_string()))?;
        params.distinguished_name = DistinguishedName::new();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let csr_key = CsrKey { raw: key.public_key_raw().to_vec(), alg: key.algorithm() };
        let mut chain = self.issue_params(params, &csr_key, ttl)?;
        for c in &self.chain {
            chain.push_str(c);
        }
        Ok((chain, key.serialize_pem()))
    }

    fn issue_params(&self, mut params: CertificateParams, key: &CsrKey, ttl: Duration) -> Result<String, SignError> {
        let now = OffsetDateTime::now_utc();
        if now >= self.not_after {
            return Err(SignError::Issue(format!("signing certificate has expired at {}", self.not_after)));
        }
        params.not_before = now - CLOCK_SKEW_GRACE;
        params.not_after = (now + ttl).min(self.not_after);
        params.serial_number = Some(serial().map_err(SignError::Issue)?);
        params.is_ca = IsCa::ExplicitNoCa;
        let cert = params.signed_by(key, &self.issuer).map_err(|e| SignError::Issue(e.to_string()))?;
        Ok(cert.pem())
    }
}

/// A DER element: `tag`, definite length, `content`.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n.to_be_bytes().iter().copied().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// `key` (a PKCS#1 or SEC1 private key) as PKCS#8 with `alg_id`.
fn pkcs8(alg_id: &[u8], key: &[u8]) -> Vec<u8> {
    let version = [0x02, 0x01, 0x00];
    der(0x30, &[&version[..], alg_id, &der(0x04, key)].concat())
}

/// rsaEncryption, NULL parameters.
const RSA_ALG_ID: &[u8] = &[0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00];
/// id-ecPublicKey with prime256v1, then with secp384r1.
const EC_ALG_IDS: [&[u8]; 2] = [
    &[
        0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d,
        0x03, 0x01, 0x07,
    ],
    &[0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22],
];

/// A private key from PEM in any of the forms istiod writes and reads
/// (`ParsePemEncodedKey`): PKCS#8 (`PRIVATE KEY`), PKCS#1 (`RSA PRIVATE
/// KEY`, istiod's self-signed RSA root) or SEC1 (`EC PRIVATE KEY`); rcgen
/// and ring take PKCS#8 only, so the others are wrapped.
pub fn key_from_pem(pem: &str) -> Result<KeyPair, String> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|_| "not a PEM block".to_owned())?;
    let key = &block.contents;
    let parsed = match block.label.as_str() {
        "PRIVATE KEY" => KeyPair::try_from(&key[..]),
        "RSA PRIVATE KEY" => KeyPair::try_from(pkcs8(RSA_ALG_ID, key)),
        "EC PRIVATE KEY" => {
            KeyPair::try_from(pkcs8(EC_ALG_IDS[0], key)).or_else(|_| KeyPair::try_from(pkcs8(EC_ALG_IDS[1], key)))
        }
        other => return Err(format!("a {other:?} PEM block is not a private key")),
    };
    parsed.map_err(|e| e.to_string())
}

/// ring's system RNG for the rsa crate.
struct SystemRng(ring::rand::SystemRandom);

#[derive(Debug)]
struct RngError;

impl std::fmt::Display for RngError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the system RNG failed")
    }
}

impl std::error::Error for RngError {}

impl rsa::rand_core::TryRng for SystemRng {
    type Error = RngError;
    fn try_next_u32(&mut self) -> Result<u32, RngError> {
        let mut b = [0u8; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn try_next_u64(&mut self) -> Result<u64, RngError> {
        let mut b = [0u8; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), RngError> {
        ring::rand::SecureRandom::fill(&self.0, dst).map_err(|_| RngError)
    }
}

impl rsa::rand_core::TryCryptoRng for SystemRng {}

/// The largest RSA root key made (istiod accepts any size; keys this
/// large already take seconds to generate).
pub const MAX_RSA_BITS: usize = 8192;

/// A new RSA key of `bits` (2048 to [`MAX_RSA_BITS`]) for rcgen.
fn rsa_key(bits: usize) -> Result<KeyPair, CaError> {
    use rsa::pkcs8::EncodePrivateKey;
    if !(2048..=MAX_RSA_BITS).contains(&bits) {
        return Err(CaError::Generate(format!("RSA key size {bits}: 2048 to {MAX_RSA_BITS} bits")));
    }
    let key = rsa::PrivateKey::new(&mut SystemRng(ring::rand::SystemRandom::new()), bits)
        .map_err(|e| CaError::Generate(format!("RSA key: {e}")))?;
    let der = key.to_pkcs8_der().map_err(|e| CaError::Generate(format!("RSA key: {e}")))?;
    let der = rustls_pki_types::PrivatePkcs8KeyDer::from(der.as_bytes().to_vec());
    KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_RSA_SHA256).map_err(|e| CaError::Generate(e.to_string()))
}

/// istiod's root check (`certutil.GetWaitTime`): whether the certificate
/// `pem` is within the last `grace_percent` of its lifetime at `now` (or
/// does not parse), when a self-signed root is renewed.
pub fn root_due(pem: &str, grace_percent: u32, now: OffsetDateTime) -> bool {
    let Ok((_, block)) = x509_parser::pem::parse_x509_pem(pem.as_bytes()) else { return true };
    let Ok(cert) = block.parse_x509() else { return true };
    let (from, to) = (cert.validity().not_before.to_datetime(), cert.validity().not_after.to_datetime());
    let grace = (to - from) * (grace_percent.min(100) as f64 / 100.0);
    to - grace <= now
}

/// The end of validity of each certificate in a PEM bundle.
pub fn not_afters(pem: &str) -> Vec<(String, OffsetDateTime)> {
    pem_blocks(pem, "CERTIFICATE")
        .into_iter()
        .filter_map(|c| {
            let t = not_after(&c, Path::new("bundle")).ok()?;
            Some((c, t))
        })
        .collect()
}

/// istiod's `verifyTrustAnchor`: the first PEM block of `pem` is an X.509
/// CA certificate.
pub fn trust_anchor(pem: &str) -> Result<(), String> {
    use x509_parser::certificate::X509Certificate;
    let block = pem_blocks(pem, "CERTIFICATE").into_iter().next().ok_or("failed to decode pem certificate")?;
    let (_, der) =
        x509_parser::pem::parse_x509_pem(block.as_bytes()).map_err(|_| "failed to decode pem certificate")?;
    let (_, cert) =
        X509Certificate::from_der(&der.contents).map_err(|e| format!("failed to parse X.509 certificate: {e}"))?;
    if !cert.is_ca() {
        return Err("certificate is not a CA certificate".into());
    }
    Ok(())
}

/// The DER of each certificate of a PEM bundle (those that decode).
pub fn pem_ders(pem: &str) -> Vec<Vec<u8>> {
    pem_blocks(pem, "CERTIFICATE")
        .iter()
        .filter_map(|b| x509_parser::pem::parse_x509_pem(b.as_bytes()).ok().map(|(_, p)| p.contents))
        .collect()
}

/// istiod's `FindRootCertFromCertificateChainBytes`: the last certificate
/// of a PEM chain, when it is a CA's.
pub fn chain_root(chain: &str) -> Option<String> {
    let last = pem_blocks(chain, "CERTIFICATE").pop()?;
    trust_anchor(&last).ok().map(|()| last)
}

/// istiod's `VerifyCertificate` of a signed chain (leaf first) against
/// `roots` (PEM): the leaf valid now, each certificate signed by the next,
/// the last one a root or signed by one.
pub fn verify_chain(chain: &str, roots: &str) -> Result<(), String> {
    use x509_parser::certificate::X509Certificate;
    let ders: Vec<Vec<u8>> = pem_blocks(chain, "CERTIFICATE")
        .iter()
        .filter_map(|b| x509_parser::pem::parse_x509_pem(b.as_bytes()).ok().map(|(_, p)| p.contents))
        .collect();
    let root_ders: Vec<Vec<u8>> = pem_blocks(roots, "CERTIFICATE")
        .iter()
        .filter_map(|b| x509_parser::pem::parse_x509_pem(b.as_bytes()).ok().map(|(_, p)| p.contents))
        .collect();
    fn parse(d: &[u8]) -> Result<X509Certificate<'_>, String> {
        X509Certificate::from_der(d).map(|(_, c)| c).map_err(|e| format!("x509: {e}"))
    }
    let certs = ders.iter().map(|d| parse(d)).collect::<Result<Vec<_>, _>>()?;
    let roots = root_ders.iter().map(|d| parse(d)).collect::<Result<Vec<_>, _>>()?;
    let leaf = certs.first().ok_or("x509: no certificate")?;
    if !leaf.validity().is_valid() {
        return Err("x509: certificate has expired or is not yet valid".into());
    }
    for (i, c) in certs.iter().enumerate() {
        if root_ders.contains(&ders[i]) {
            return Ok(());
        }
        let by_root =
            roots.iter().any(|r| r.subject() == c.issuer() && c.verify_signature(Some(r.public_key())).is_ok());
        if by_root {
            return Ok(());
        }
        match certs.get(i + 1) {
            Some(next) if c.verify_signature(Some(next.public_key())).is_ok() => {}
            _ => break,
        }
    }
    Err("x509: certificate signed by unknown authority".into())
}

/// Whether `leaf` (DER) is valid now and signed by one of the
/// certificates of `roots` (PEM), directly: a Kubernetes RA's signer's
/// leaves, for the client-certificate authenticator.
pub fn issued_by(leaf: &[u8], roots: &str) -> bool {
    use x509_parser::certificate::X509Certificate;
    let Ok((_, leaf)) = X509Certificate::from_der(leaf) else { return false };
    leaf.validity().is_valid()
        && pem_blocks(roots, "CERTIFICATE").iter().any(|b| {
            let Ok((_, block)) = x509_parser::pem::parse_x509_pem(b.as_bytes()) else { return false };
            let Ok((_, root)) = X509Certificate::from_der(&block.contents) else { return false };
            root.subject() == leaf.issuer() && leaf.verify_signature(Some(root.public_key())).is_ok()
        })
}

/// The URI SANs of a DER certificate (istiod's `ExtractIDs`, for the
/// client-certificate authenticator); empty when it does not parse.
pub fn uri_sans(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::certificate::X509Certificate::from_der(der) else { return Vec::new() };
    let Ok(Some(san)) = cert.subject_alternative_name() else { return Vec::new() };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(u) => Some((*u).to_owned()),
            _ => None,
        })
        .collect()
}

/// A 128-bit random serial number (istiod's `genSerialNum`), positive.
fn serial() -> Result<SerialNumber, String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut bytes).map_err(|_| "no randomness for a serial number".to_owned())?;
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01; // never zero, never a shorter encoding
    Ok(SerialNumber::from_slice(&bytes))
}

/// Writes a private key readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    // `mode` applies to a new file only: an existing one is narrowed too.
    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    f.write_all(bytes)
}

/// The public key of `csr_pem` once its signature verifies, its key is
/// one istiod-rs signs for, and every SAN it asks for is one of
/// `identities`.
fn verified_key(csr_pem: &[u8], identities: &[String], as_agents_make: bool) -> Result<CsrKey, SignError> {
    if csr_pem.len() > MAX_CSR_BYTES {
        return Err(SignError::Csr(format!("the CSR is {} bytes, over the limit of {MAX_CSR_BYTES}", csr_pem.len())));
    }
    let (_, block) =
        x509_parser::pem::parse_x509_pem(csr_pem).map_err(|e| SignError::Csr(format!("the CSR is not PEM: {e}")))?;
    if block.label != "CERTIFICATE REQUEST" && block.label != "NEW CERTIFICATE REQUEST" {
        return Err(SignError::Csr(format!("the PEM block is a {}, not a CERTIFICATE REQUEST", block.label)));
    }
    let (_, csr) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|e| SignError::Csr(format!("the CSR does not parse: {e}")))?;
    csr.verify_signature().map_err(|e| SignError::Csr(format!("the CSR's signature does not verify: {e}")))?;
    let spki = &csr.certification_request_info.subject_pki;
    let alg = match spki.parsed().map_err(|e| SignError::Csr(format!("the CSR's public key: {e}")))? {
        PublicKey::RSA(rsa) if rsa.key_size() >= 2048 => &rcgen::PKCS_RSA_SHA256,
        PublicKey::RSA(rsa) => {
            return Err(SignError::Csr(format!("RSA keys of {} bits are refused: 2048 at least", rsa.key_size())));
        }
        PublicKey::EC(_) => {
            let curve = spki.algorithm.parameters.as_ref().and_then(|p| p.as_oid().ok()).map(|o| o.to_id_string());
            match curve.as_deref() {
                Some("1.2.840.10045.3.1.7") => &rcgen::PKCS_ECDSA_P256_SHA256,
                Some("1.3.132.0.34") => &rcgen::PKCS_ECDSA_P384_SHA384,
                other => return Err(SignError::Csr(format!("elliptic curve {other:?} is refused: P-256 or P-384"))),
            }
        }
        _ => return Err(SignError::Csr("only ECDSA and RSA keys are signed".into())),
    };
    for ext in csr.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(san) = ext else { continue };
        for name in &san.general_names {
            let asked = match name {
                GeneralName::URI(uri) if identities.iter().any(|i| i == uri) => continue,
                GeneralName::URI(uri) => (*uri).to_owned(),
                other => other.to_string(),
            };
            return Err(SignError::Identity { asked, caller: identities.join(",") });
        }
    }
    if as_agents_make {
        agent_made(&csr).map_err(SignError::Csr)?;
    }
    Ok(CsrKey { raw: spki.subject_public_key.data.to_vec(), alg })
}

/// istiod's RA `ValidateCSR` after the identities: the CSR is the one
/// `GenCSRTemplate` makes for them (`compareCSRs`). Its subject, read as
/// Go's `pkix.Name` reads it, is `O=""` alone (or empty, as ztunnel sends
/// it); a SAN extension names at most one URI and no DNS name, IP or
/// e-mail; no other extension is requested.
pub fn agent_made(csr: &X509CertificationRequest<'_>) -> Result<(), String> {
    // The attributes `pkix.Name` keeps (ToRDNSequence), by OID: C, O, OU,
    // L, ST, street, postal code, serial number, CN.
    const KEPT: [&str; 9] =
        ["2.5.4.6", "2.5.4.10", "2.5.4.11", "2.5.4.7", "2.5.4.8", "2.5.4.9", "2.5.4.17", "2.5.4.5", "2.5.4.3"];
    let mut orgs: Vec<&str> = Vec::new();
    for a in csr.certification_request_info.subject.iter_attributes() {
        let oid = a.attr_type().to_id_string();
        if !KEPT.contains(&oid.as_str()) {
            continue;
        }
        // Go keeps string values only; an empty CN or serial number is
        // dropped when the name is written again.
        let Ok(v) = a.as_str() else { continue };
        match oid.as_str() {
            "2.5.4.10" => orgs.push(v),
            "2.5.4.3" | "2.5.4.5" if v.is_empty() => {}
            _ => return Err(format!("the CSR's subject has attribute {oid}: istio-agent sets only O=\"\"")),
        }
    }
    if !(orgs.is_empty() || orgs == [""]) {
        return Err(format!("the CSR's subject has O={orgs:?}: istio-agent sets only O=\"\""));
    }
    let mut has_san = false;
    let requested = csr.certification_request_info.iter_attributes().filter_map(|a| match a.parsed_attribute() {
        x509_parser::cri_attributes::ParsedCriAttribute::ExtensionRequest(r) => Some(&r.extensions),
        _ => None,
    });
    for ext in requested.flatten() {
        let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() else {
            return Err(format!("the CSR requests extension {}: only a subject alternative name is signed", ext.oid));
        };
        has_san = true;
        let uris = san.general_names.iter().filter(|n| matches!(n, GeneralName::URI(_))).count();
        let other = san
            .general_names
            .iter()
            .any(|n| matches!(n, GeneralName::DNSName(_) | GeneralName::IPAddress(_) | GeneralName::RFC822Name(_)));
        if uris > 1 || other {
            return Err("the CSR's subject alternative name is not one URI alone".into());
        }
    }
    if !has_san {
        return Err("the SAN extension does not exist".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
