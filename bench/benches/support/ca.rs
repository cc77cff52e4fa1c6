//! What the CA benchmarks share: certificate requests for one identity.

use rcgen::{CertificateParams, KeyPair, SanType};

/// The identity every request asks for.
pub(crate) const ID: &str = "spiffe://cluster.local/ns/bookinfo/sa/reviews";

/// `n` PEM requests for [`ID`], each with its own P-256 key.
pub(crate) fn csrs(n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::default();
            p.subject_alt_names = vec![SanType::URI(ID.try_into().unwrap())];
            p.serialize_request(&key).unwrap().pem().unwrap()
        })
        .collect()
}
