//! A JWT issuer for the tests: an ES256 key, its JWKS, and tokens as
//! Kubernetes projects them (audience `istio-ca`), for `JWT_RULE`.

#![allow(dead_code, reason = "each test binary uses part of the support code")]

use std::time::SystemTime;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};

/// An ES256 token issuer and its JWKS.
pub(crate) struct Issuer {
    key: EcdsaKeyPair,
    pub(crate) jwks: String,
}

impl Issuer {
    pub(crate) fn new() -> Issuer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let p = key.public_key().as_ref();
        let (x, y) = (URL_SAFE_NO_PAD.encode(&p[1..33]), URL_SAFE_NO_PAD.encode(&p[33..]));
        let jwks = format!(r#"{{"keys":[{{"kty":"EC","kid":"k1","crv":"P-256","x":"{x}","y":"{y}"}}]}}"#);
        Issuer { key, jwks }
    }

    pub(crate) fn token(&self, iss: &str, sub: &str) -> String {
        let exp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() + 600;
        let claims = serde_json::json!({"iss": iss, "sub": sub, "aud": ["istio-ca"], "exp": exp});
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"ES256","kid":"k1"}"#),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = self.key.sign(&SystemRandom::new(), signed.as_bytes()).unwrap();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }
}
