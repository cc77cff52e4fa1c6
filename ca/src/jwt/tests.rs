use super::*;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};

/// An ES256 signer and its JWKS (kid `k1`).
pub(crate) struct Issuer {
    key: EcdsaKeyPair,
    pub(crate) jwks: String,
}

impl Issuer {
    pub(crate) fn new() -> Issuer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let point = key.public_key().as_ref();
        let (x, y) = (URL_SAFE_NO_PAD.encode(&point[1..33]), URL_SAFE_NO_PAD.encode(&point[33..]));
        let jwks = format!(r#"{{"keys":[{{"kty":"EC","kid":"k1","crv":"P-256","x":"{x}","y":"{y}","alg":"ES256"}}]}}"#);
        Issuer { key, jwks }
    }

    pub(crate) fn token(&self, claims: &serde_json::Value) -> String {
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"ES256","kid":"k1","typ":"JWT"}"#);
        let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signed = format!("{header}.{payload}");
        let sig = self.key.sign(&SystemRandom::new(), signed.as_bytes()).unwrap();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }
}

const NOW: u64 = 1_900_000_000;

fn rule() -> JwtRule {
    JwtRule { issuer: "https://issuer.test".into(), jwks_uri: String::new(), audiences: vec!["istio-ca".into()] }
}

fn claims() -> serde_json::Value {
    serde_json::json!({
        "iss": "https://issuer.test",
        "sub": "system:serviceaccount:bookinfo:reviews",
        "aud": ["istio-ca"],
        "exp": NOW + 600,
    })
}

#[test]
fn a_valid_token_names_its_service_account() {
    let issuer = Issuer::new();
    let keys = KeySet::parse(&issuer.jwks).unwrap();
    let got = verify(&issuer.token(&claims()), &rule(), &keys, NOW).unwrap();
    assert_eq!(got, ("bookinfo".to_owned(), "reviews".to_owned()));
    // `aud` as a single string too.
    let mut c = claims();
    c["aud"] = "istio-ca".into();
    assert!(verify(&issuer.token(&c), &rule(), &keys, NOW).is_ok());
}

#[test]
fn every_check_of_go_oidc_and_istiod_refuses() {
    let issuer = Issuer::new();
    let keys = KeySet::parse(&issuer.jwks).unwrap();
    let with = |field: &str, v: serde_json::Value| {
        let mut c = claims();
        if v.is_null() {
            c.as_object_mut().unwrap().remove(field);
        } else {
            c[field] = v;
        }
        verify(&issuer.token(&c), &rule(), &keys, NOW).unwrap_err()
    };
    assert!(with("iss", "https://other".into()).contains("issuer"));
    assert!(with("exp", (NOW - 1).into()).contains("expired"));
    assert!(with("exp", serde_json::Value::Null).contains("expired"), "no exp is expired, as go-oidc");
    assert!(with("nbf", (NOW + 3600).into()).contains("not valid yet"));
    assert!(with("aud", serde_json::json!(["kubernetes"])).contains("audiences"));
    assert!(with("sub", "alice".into()).contains("invalid sub"));
    assert!(with("sub", "system:serviceaccount:ns".into()).contains("invalid sub"));
    // Another issuer's key, a tampered payload, garbage, `alg: none`.
    let other = Issuer::new();
    let forged = other.token(&claims());
    assert!(verify(&forged, &rule(), &keys, NOW).unwrap_err().contains("signature"));
    let good = issuer.token(&claims());
    let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
    let mut c = claims();
    c["sub"] = "system:serviceaccount:kube-system:admin".into();
    parts[1] = URL_SAFE_NO_PAD.encode(c.to_string());
    assert!(verify(&parts.join("."), &rule(), &keys, NOW).unwrap_err().contains("signature"));
    assert!(verify("a.b", &rule(), &keys, NOW).is_err());
    let none =
        format!("{}.{}.", URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#), URL_SAFE_NO_PAD.encode(claims().to_string()));
    assert!(verify(&none, &rule(), &keys, NOW).is_err());
    assert!(KeySet::parse(r#"{"not":"a jwks"}"#).is_err());
}
