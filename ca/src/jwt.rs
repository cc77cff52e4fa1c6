//! istiod's `JWT_RULE` authenticator (`security/pkg/server/ca/authenticate/oidc.go`):
//! a bearer token verified locally against the issuer's key set, its
//! `iss`, `exp` and `nbf` checked as go-oidc checks them, its `aud` one of
//! the rule's audiences, and the caller's identity from its `sub`,
//! `system:serviceaccount:<namespace>:<name>`. RS256/384/512 and
//! ES256/384 signatures, checked with ring.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature;
use serde::Deserialize;

/// `JWT_RULE`: `{"issuer": ..., "jwks_uri": ..., "audiences": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct JwtRule {
    /// Tokens must carry this `iss`.
    pub issuer: String,
    /// Where the key set is fetched (empty: OpenID discovery from the issuer).
    #[serde(default)]
    pub jwks_uri: String,
    /// Tokens must name one of these in `aud`.
    #[serde(default)]
    pub audiences: Vec<String>,
}

/// One key of a JWKS.
#[derive(Debug, Clone, Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

/// A parsed key set.
#[derive(Debug, Clone, Default)]
pub struct KeySet {
    keys: Vec<Jwk>,
}

impl KeySet {
    /// Parses a JWKS document (`{"keys": [...]}`).
    pub fn parse(json: &str) -> Result<KeySet, String> {
        #[derive(Deserialize)]
        struct Doc {
            keys: Vec<Jwk>,
        }
        let doc: Doc = serde_json::from_str(json).map_err(|e| format!("not a JWKS: {e}"))?;
        Ok(KeySet { keys: doc.keys })
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// No keys.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

/// `aud`: a string or a list.
#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    iss: String,
    #[serde(default)]
    sub: String,
    #[serde(default)]
    aud: Option<Audience>,
    #[serde(default)]
    exp: Option<f64>,
    #[serde(default)]
    nbf: Option<f64>,
}

fn b64(part: &str, what: &str) -> Result<Vec<u8>, String> {
    URL_SAFE_NO_PAD.decode(part.trim_end_matches('=')).map_err(|e| format!("{what} is not base64url: {e}"))
}

/// Verifies `token` under `rule` with `keys` at `now` (Unix seconds);
/// returns the caller's (namespace, service account).
pub fn verify(token: &str, rule: &JwtRule, keys: &KeySet, now: u64) -> Result<(String, String), String> {
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err("not a JWT (three dot-separated parts)".into());
    };
    let header: Header =
        serde_json::from_slice(&b64(h, "the header")?).map_err(|e| format!("the header is not JSON: {e}"))?;
    let sig = b64(s, "the signature")?;
    let signed = &token.as_bytes()[..h.len() + 1 + p.len()];
    let candidates = keys.keys.iter().filter(|k| header.kid.is_none() || k.kid == header.kid);
    let mut verified = false;
    for key in candidates {
        if check(&header.alg, key, signed, &sig)? {
            verified = true;
            break;
        }
    }
    if !verified {
        return Err("the signature does not verify with any key of the issuer".into());
    }
    let claims: Claims =
        serde_json::from_slice(&b64(p, "the payload")?).map_err(|e| format!("the payload is not JSON: {e}"))?;
    if claims.iss != rule.issuer {
        return Err(format!("issuer {:?} is not {:?}", claims.iss, rule.issuer));
    }
    // go-oidc: a token with no expiry is expired; a minute of leeway for nbf.
    let now = now as f64;
    match claims.exp {
        Some(exp) if exp > now => {}
        _ => return Err("the token is expired".into()),
    }
    if claims.nbf.is_some_and(|nbf| nbf > now + 60.0) {
        return Err("the token is not valid yet".into());
    }
    let aud = match claims.aud {
        Some(Audience::One(a)) => vec![a],
        Some(Audience::Many(a)) => a,
        None => Vec::new(),
    };
    if !aud.iter().any(|a| rule.audiences.contains(a)) {
        return Err(format!("invalid audiences {aud:?}"));
    }
    let sa: Vec<&str> = claims.sub.split(':').collect();
    match sa.as_slice() {
        ["system", "serviceaccount", ns, name] if !ns.is_empty() && !name.is_empty() => {
            Ok(((*ns).to_owned(), (*name).to_owned()))
        }
        _ => Err(format!("invalid sub {:?}", claims.sub)),
    }
}

/// Whether `sig` over `signed` verifies with `key` under `alg`; an error
/// for an algorithm or key istiod-rs does not take.
fn check(alg: &str, key: &Jwk, signed: &[u8], sig: &[u8]) -> Result<bool, String> {
    // A key missing a field, or with one that does not decode, verifies
    // nothing; the other keys are still tried.
    let field = |v: &Option<String>, name: &str| v.as_deref().and_then(|s| b64(s, name).ok());
    match (alg, key.kty.as_str()) {
        ("RS256" | "RS384" | "RS512", "RSA") => {
            let params = match alg {
                "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                _ => &signature::RSA_PKCS1_2048_8192_SHA512,
            };
            let (Some(n), Some(e)) = (field(&key.n, "n"), field(&key.e, "e")) else { return Ok(false) };
            let pk = signature::RsaPublicKeyComponents { n, e };
            Ok(pk.verify(params, signed, sig).is_ok())
        }
        ("ES256" | "ES384", "EC") => {
            let (params, crv) = match alg {
                "ES256" => (&signature::ECDSA_P256_SHA256_FIXED, "P-256"),
                _ => (&signature::ECDSA_P384_SHA384_FIXED, "P-384"),
            };
            if key.crv.as_deref() != Some(crv) {
                return Ok(false);
            }
            let (Some(x), Some(y)) = (field(&key.x, "x"), field(&key.y, "y")) else { return Ok(false) };
            let mut point = vec![4u8];
            point.extend(x);
            point.extend(y);
            Ok(signature::UnparsedPublicKey::new(params, point).verify(signed, sig).is_ok())
        }
        ("RS256" | "RS384" | "RS512" | "ES256" | "ES384", _) => Ok(false),
        (other, _) => Err(format!("algorithm {other:?} is not accepted")),
    }
}

#[cfg(test)]
mod tests;
