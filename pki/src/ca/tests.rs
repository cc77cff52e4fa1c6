use super::*;
use rcgen::{CertificateParams, KeyPair};
use x509_parser::prelude::{FromDer, X509Certificate};

const ID: &str = "spiffe://cluster.local/ns/bookinfo/sa/reviews";

fn csr(sans: &[SanType]) -> String {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::default();
    p.subject_alt_names = sans.to_vec();
    p.serialize_request(&key).unwrap().pem().unwrap()
}

fn uri(s: &str) -> SanType {
    SanType::URI(s.try_into().unwrap())
}

fn der(pem: &str) -> Vec<u8> {
    x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap().1.contents
}

#[test]
fn a_csr_for_the_callers_identity_gets_a_leaf_signed_by_the_root() {
    let ca = Ca::generate(Settings::default()).unwrap();
    let chain = ca.sign(csr(&[uri(ID)]).as_bytes(), &[ID.to_owned()], 3600).unwrap();
    assert_eq!(chain.len(), 2, "leaf and root (a self-signed root has no chain)");
    assert_eq!(chain[1], ca.root_pem());
    let (leaf_der, root_der) = (der(&chain[0]), der(&chain[1]));
    let (_, leaf) = X509Certificate::from_der(&leaf_der).unwrap();
    let (_, root) = X509Certificate::from_der(&root_der).unwrap();
    leaf.verify_signature(Some(root.public_key())).expect("signed by the root");
    assert!(!leaf.is_ca());
    assert_eq!(leaf.subject().iter().count(), 0, "no subject");
    let san = leaf.subject_alternative_name().unwrap().unwrap();
    assert!(san.critical, "SAN critical with an empty subject");
    assert_eq!(format!("{:?}", san.value.general_names), format!("{:?}", [GeneralName::URI(ID)]));
    let eku = leaf.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && eku.client_auth);
    let v = leaf.validity();
    let life = (v.not_after.timestamp() - v.not_before.timestamp()) as u64;
    assert_eq!(life, 3600 + CLOCK_SKEW_GRACE.as_secs(), "the TTL, backdated by the grace");
    // Two leaves for the same key differ in serial.
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::default();
    p.subject_alt_names = vec![uri(ID)];
    let same = p.serialize_request(&key).unwrap().pem().unwrap();
    let serial = |pem: &str| X509Certificate::from_der(&der(pem)).unwrap().1.raw_serial().to_vec();
    let (a, b) =
        (ca.sign(same.as_bytes(), &[ID.into()], 0).unwrap(), ca.sign(same.as_bytes(), &[ID.into()], 0).unwrap());
    assert_ne!(serial(&a[0]), serial(&b[0]));
    // What it issued it recognises; another CA's leaf it does not.
    assert!(ca.issued(&der(&a[0])));
    let other = Ca::generate(Settings::default()).unwrap();
    let theirs = other.sign(same.as_bytes(), &[ID.into()], 0).unwrap();
    assert!(!ca.issued(&der(&theirs[0])));
    // Without a TTL: the default.
    let a0 = der(&a[0]);
    let (_, leaf) = X509Certificate::from_der(&a0).unwrap();
    let life = (leaf.validity().not_after.timestamp() - leaf.validity().not_before.timestamp()) as u64;
    assert_eq!(life, 24 * 3600 + CLOCK_SKEW_GRACE.as_secs());
}

#[test]
fn bad_requests_are_refused_with_istiods_reasons() {
    let ca = Ca::generate(Settings::default()).unwrap();
    let me = [ID.to_owned()];
    let other = csr(&[uri("spiffe://cluster.local/ns/bookinfo/sa/ratings")]);
    assert!(matches!(ca.sign(other.as_bytes(), &me, 0), Err(SignError::Identity { .. })));
    let dns = csr(&[uri(ID), SanType::DnsName("evil.example.com".try_into().unwrap())]);
    assert!(matches!(ca.sign(dns.as_bytes(), &me, 0), Err(SignError::Identity { .. })));
    // TTL over the maximum: istiod's wording, Go's durations.
    let err = ca.sign(csr(&[]).as_bytes(), &me, 91 * 24 * 3600).unwrap_err();
    assert_eq!(err.to_string(), "requested TTL 2184h0m0s is greater than the max allowed TTL 2160h0m0s");
    // Garbage, a certificate instead of a CSR, a 1 MiB CSR.
    assert!(matches!(ca.sign(b"not pem", &me, 0), Err(SignError::Csr(_))));
    assert!(
        matches!(ca.sign(ca.root_pem().as_bytes(), &me, 0), Err(SignError::Csr(m)) if m.contains("not a CERTIFICATE REQUEST"))
    );
    let huge = vec![b'A'; 1 << 20];
    assert!(matches!(ca.sign(&huge, &me, 0), Err(SignError::Csr(m)) if m.contains("over the limit")));
    // A CSR whose signature does not verify: one bit of the signature flipped.
    let good = csr(&[uri(ID)]);
    let mut bytes = der(&good);
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let tampered =
        format!("-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n", base64(&bytes));
    assert!(matches!(ca.sign(tampered.as_bytes(), &me, 0), Err(SignError::Csr(m)) if m.contains("signature")));
    // The key's bytes never show.
    assert!(!format!("{ca:?}").contains("PRIVATE"));
}

#[test]
fn a_plugged_in_intermediate_answers_leaf_chain_and_root() {
    // root -> intermediate (ca-cert.pem), as Istio's plugged-in certs docs make them.
    let root_key = KeyPair::generate().unwrap();
    let mut rp = CertificateParams::default();
    rp.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    rp.distinguished_name.push(DnType::CommonName, "Root CA");
    let root = rp.self_signed(&root_key).unwrap();
    let int_key = KeyPair::generate().unwrap();
    let mut ip = CertificateParams::default();
    ip.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ip.distinguished_name.push(DnType::CommonName, "Intermediate CA");
    let root_issuer = Issuer::from_params(&rp, &root_key);
    let int = ip.signed_by(&int_key, &root_issuer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca-cert.pem"), int.pem()).unwrap();
    std::fs::write(dir.path().join("ca-key.pem"), int_key.serialize_pem()).unwrap();
    std::fs::write(dir.path().join("root-cert.pem"), root.pem()).unwrap();
    std::fs::write(dir.path().join("cert-chain.pem"), format!("{}{}", int.pem(), root.pem())).unwrap();
    let ca = Ca::plugged(dir.path(), Settings::default()).unwrap().expect("a plugged-in CA");
    let chain = ca.sign(csr(&[uri(ID)]).as_bytes(), &[ID.to_owned()], 600).unwrap();
    assert_eq!(chain.len(), 4, "leaf, intermediate, root (cert-chain.pem), root bundle");
    assert_eq!(chain[3], root.pem());
    let leaf_der = der(&chain[0]);
    let (_, leaf) = X509Certificate::from_der(&leaf_der).unwrap();
    let int_der = der(&chain[1]);
    let (_, int_cert) = X509Certificate::from_der(&int_der).unwrap();
    leaf.verify_signature(Some(int_cert.public_key())).expect("signed by the intermediate");
    // No ca-key.pem: not plugged in.
    assert!(Ca::plugged(tempfile::tempdir().unwrap().path(), Settings::default()).unwrap().is_none());
}

#[test]
fn the_self_signed_root_is_kept_across_starts_with_a_private_key_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let first = Ca::self_signed_in(dir.path(), Settings::default()).unwrap();
    let mode = std::fs::metadata(dir.path().join("ca-key.pem")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let again = Ca::self_signed_in(dir.path(), Settings::default()).unwrap();
    assert_eq!(first.root_pem(), again.root_pem(), "the same root after a restart");
    let root_der = der(first.root_pem());
    let (_, root) = X509Certificate::from_der(&root_der).unwrap();
    assert!(root.is_ca());
    assert_eq!(root.subject().iter_organization().next().unwrap().as_str().unwrap(), "cluster.local");
}

#[test]
fn istiods_own_certificate_names_its_hosts() {
    let ca = Ca::generate(Settings::default()).unwrap();
    let names = vec!["istiod.istio-system.svc".to_owned(), "istiod-canary.istio-system.svc".to_owned()];
    let (chain, key) = ca.issue_server(&names, Duration::from_secs(3600)).unwrap();
    assert!(key.contains("PRIVATE KEY"));
    let leaf_der = der(&chain);
    let (_, leaf) = X509Certificate::from_der(&leaf_der).unwrap();
    let san = format!("{:?}", leaf.subject_alternative_name().unwrap().unwrap().value.general_names);
    assert!(san.contains("istiod.istio-system.svc") && san.contains("istiod-canary"), "{san}");
}

/// Standard base64 (the tests' PEM writer).
fn base64(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn a_key_that_is_not_the_certificates_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first = Ca::self_signed_in(dir.path(), Settings::default()).unwrap();
    // A rotation caught half-way: another key beside the certificate.
    std::fs::write(dir.path().join("ca-key.pem"), KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let err = Ca::plugged(dir.path(), Settings::default()).unwrap_err();
    assert!(err.to_string().contains("is not this certificate's"), "{err}");
    assert!(!err.to_string().contains("PRIVATE"), "no key material in the error");
    drop(first);
}

/// istiod's rotation (selfsignedcarootcertrotator.go): the renewed root
/// has the old one's key and subject, so what the old root signed
/// verifies under the new one; the bundle keeps the old root after the
/// new; `root_due` follows certutil.GetWaitTime's grace percentile.
#[test]
fn a_renewed_root_keeps_its_key_and_verifies_what_the_old_one_signed() {
    let short = Settings { self_signed_ttl: Duration::from_secs(600), ..Settings::default() };
    let (old_cert, key) = Ca::generate_root_pem(&short).unwrap();
    let old = Ca::self_signed_from_pem(&old_cert, &key, &[], short.clone(), "test").unwrap();
    let leaf = old.sign(csr(&[uri(ID)]).as_bytes(), &[ID.to_owned()], 300).unwrap();

    let new_cert = Ca::renew_root_pem(&old_cert, &key, &Settings::default()).unwrap();
    assert_ne!(new_cert, old_cert);
    let new = Ca::self_signed_from_pem(&new_cert, &key, std::slice::from_ref(&old_cert), Settings::default(), "test")
        .unwrap();
    assert_eq!(new.root_pem(), format!("{new_cert}{old_cert}"), "the new root first, then the old");
    assert!(new.issued(&der(&leaf[0])), "a leaf of the old root stands under the new");
    let (new_der, leaf_der) = (der(&new_cert), der(&leaf[0]));
    let (_, new_parsed) = X509Certificate::from_der(&new_der).unwrap();
    let (_, leaf_parsed) = X509Certificate::from_der(&leaf_der).unwrap();
    leaf_parsed.verify_signature(Some(new_parsed.public_key())).expect("same key");
    assert_eq!(leaf_parsed.issuer(), new_parsed.subject(), "same subject");
    assert!(new_parsed.is_ca());

    // 600 s ahead and 120 s behind: 83% of the life is left.
    let now = OffsetDateTime::now_utc();
    assert!(!root_due(&old_cert, 80, now));
    assert!(root_due(&old_cert, 90, now));
    assert!(root_due(&old_cert, 0, now + Duration::from_secs(601)), "expired");
    assert!(root_due("garbage", 20, now), "an unreadable root is renewed");
    // A key that is not the certificate's is refused.
    let (_, other_key) = Ca::generate_root_pem(&short).unwrap();
    assert!(Ca::self_signed_from_pem(&new_cert, &other_key, &[], Settings::default(), "test").is_err());
}

/// CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE: an RSA root (its key kept as
/// PKCS#8 PEM, read back) signs workload leaves; sizes under 2048 are
/// refused.
#[test]
fn an_rsa_root_signs_workload_certificates() {
    let settings = Settings { rsa_key_bits: Some(2048), ..Settings::default() };
    let (cert, key) = Ca::generate_root_pem(&settings).unwrap();
    assert!(key.contains("BEGIN PRIVATE KEY"));
    let ca = Ca::self_signed_from_pem(&cert, &key, &[], settings.clone(), "test").unwrap();
    let root_der = der(&cert);
    let (_, root) = X509Certificate::from_der(&root_der).unwrap();
    assert!(matches!(root.public_key().parsed().unwrap(), PublicKey::RSA(_)), "an RSA root");
    let chain = ca.sign(csr(&[uri(ID)]).as_bytes(), &[ID.to_owned()], 600).unwrap();
    let leaf_der = der(&chain[0]);
    let (_, leaf) = X509Certificate::from_der(&leaf_der).unwrap();
    leaf.verify_signature(Some(root.public_key())).expect("signed with the RSA key");
    assert!(ca.issued(&leaf_der));
    let small = Settings { rsa_key_bits: Some(1024), ..Settings::default() };
    assert!(Ca::generate_root_pem(&small).is_err());
}

fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

/// An `istio-ca-secret` written by istiod itself: its RSA root's key is
/// PKCS#1 (`RSA PRIVATE KEY`), an EC key SEC1 (`EC PRIVATE KEY`); both load
/// (wrapped into PKCS#8 for rcgen) and sign.
#[test]
fn keys_in_istiods_pkcs1_and_sec1_forms_load() {
    use rsa::pkcs1::EncodeRsaPrivateKey;
    use rsa::pkcs8::DecodePrivateKey;
    // RSA: the PKCS#8 key of a fresh RSA root, re-encoded as PKCS#1.
    let settings = Settings { rsa_key_bits: Some(2048), ..Settings::default() };
    let (cert, key8) = Ca::generate_root_pem(&settings).unwrap();
    let der8 = x509_parser::pem::parse_x509_pem(key8.as_bytes()).unwrap().1.contents;
    let rsa_key = rsa::PrivateKey::from_pkcs8_der(&der8).unwrap();
    let pkcs1 = pem("RSA PRIVATE KEY", rsa_key.to_pkcs1_der().unwrap().as_bytes());
    let ca = Ca::self_signed_from_pem(&cert, &pkcs1, &[], settings, "istio-ca-secret").unwrap();
    assert!(ca.sign(csr(&[uri(ID)]).as_bytes(), &[ID.to_owned()], 60).is_ok());
    // EC: the SEC1 key inside a PKCS#8 P-256 key (its last element).
    let (cert, key8) = Ca::generate_root_pem(&Settings::default()).unwrap();
    let der8 = x509_parser::pem::parse_x509_pem(key8.as_bytes()).unwrap().1.contents;
    let (_, outer) = x509_parser::der_parser::der::parse_der_sequence(&der8).unwrap();
    let items = outer.as_sequence().unwrap();
    let sec1 = items.last().unwrap().as_slice().unwrap();
    let ca = Ca::self_signed_from_pem(&cert, &pem("EC PRIVATE KEY", sec1), &[], Settings::default(), "test").unwrap();
    assert!(ca.sign(csr(&[uri(ID)]).as_bytes(), &[ID.to_owned()], 60).is_ok());
    // Anything else says what it is.
    let err = key_from_pem(&pem("CERTIFICATE", b"x")).unwrap_err();
    assert!(err.contains("CERTIFICATE"), "{err}");
    assert!(key_from_pem(&pem("RSA PRIVATE KEY", b"garbage")).is_err());
}

/// istiod's RA checks a CSR against the template istio-agent makes before
/// another signs it (ra/common.go `ValidateCSR`, `compareCSRs`). Cases of
/// upstream `TestCompareCSRs` (security/pkg/pki/ra/common_test.go), as
/// `ValidateCSR` meets them: an unset organisation is filled with `O=""`
/// first (ztunnel's CSRs), and its template is never dual-use, so any
/// common name is refused.
#[test]
fn the_ra_takes_only_csrs_as_the_agent_makes_them() {
    use rcgen::{CustomExtension, DnType};
    let ca = Ca::generate(Settings::default()).unwrap();
    let two = "spiffe://cluster.local/ns/bookinfo/sa/other";
    let me = [ID.to_owned(), two.to_owned()];
    let make = |o: Option<&str>, cn: Option<&str>, sans: Vec<SanType>, ext: Option<&[u64]>| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name = DistinguishedName::new();
        if let Some(o) = o {
            p.distinguished_name.push(DnType::OrganizationName, o);
        }
        if let Some(cn) = cn {
            p.distinguished_name.push(DnType::CommonName, cn);
        }
        p.subject_alt_names = sans;
        if let Some(oid) = ext {
            p.custom_extensions = vec![CustomExtension::from_oid_content(oid, vec![0x05, 0x00])];
        }
        p.serialize_request(&key).unwrap().pem().unwrap()
    };
    let one = || vec![uri(ID)];
    let cases: Vec<(&str, String, bool)> = vec![
        ("orgCSR CN is invalid (not empty)", make(Some(""), Some("invalid"), one(), None), false),
        ("orgCSR CN set to host (its template is not dual-use)", make(Some(""), Some(ID), one(), None), false),
        ("orgCSR CN empty string", make(Some(""), Some(""), one(), None), true),
        ("orgCSR Org is unset (filled with O=\"\" by ValidateCSR)", make(None, None, one(), None), true),
        ("orgCSR Org is set to empty string", make(Some(""), None, one(), None), true),
        ("orgCSR Org is invalid (not empty or empt string)", make(Some("invalid"), None, one(), None), false),
        ("orgCSR URI set to host", make(Some(""), None, one(), None), true),
        ("orgCSR with multiple URIs", make(Some(""), None, vec![uri(ID), uri(two)], None), false),
        (
            "orgCSR with invalid emailAddresses",
            make(Some(""), None, vec![uri(ID), SanType::Rfc822Name("a@b.c".try_into().unwrap())], None),
            false,
        ),
        (
            "orgCSR with invalid IPAddresses",
            make(Some(""), None, vec![uri(ID), SanType::IpAddress([1, 2, 3, 4].into())], None),
            false,
        ),
        (
            "orgCSR with invalid DNSNames",
            make(Some(""), None, vec![uri(ID), SanType::DnsName("invalid".try_into().unwrap())], None),
            false,
        ),
        ("orgCSR with SANs and non SANs extensions", make(Some(""), None, one(), Some(&[1, 2, 3])), false),
        ("ours: no SAN extension (ExtractIDs fails)", make(Some(""), None, vec![], None), false),
    ];
    for (name, pem, want) in cases {
        let got = ca.check_request(pem.as_bytes(), &me, 0);
        assert_eq!(got.is_ok(), want, "{name}: {got:?}");
        // The CA signing itself makes its own certificate from the key
        // alone: the template is the RA's check, not the CA's.
        if want {
            assert!(ca.sign(pem.as_bytes(), &me, 0).is_ok(), "{name}");
        }
    }
    let rcgen_default = csr(&[uri(ID)]);
    assert!(ca.sign(rcgen_default.as_bytes(), &me, 0).is_ok(), "the CA signs a CSR with a common name");
    assert!(ca.check_request(rcgen_default.as_bytes(), &me, 0).is_err(), "the RA does not");
}
