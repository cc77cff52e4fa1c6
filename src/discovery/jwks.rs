//! istiod's JWKS resolver (pilot/pkg/model/jwks_resolver.go) on the control
//! thread: the key sets of RequestAuthentication rules whose keys istiod
//! fetches (`PILOT_JWT_ENABLE_REMOTE_JWKS`, default `istiod`) are fetched
//! from their `jwksUri` (or the issuer's OpenID discovery document), kept,
//! refreshed every `PILOT_JWT_PUB_KEY_REFRESH_INTERVAL` (20m), and inlined
//! into the proxies' `jwt_authn` filters. Until a key set arrives, or when
//! it cannot be fetched, istiod's public-only key set is served: tokens of
//! that issuer are rejected, requests without one pass (fail closed).
//!
//! Translation stays pure: the resolver publishes an immutable map, and a
//! change to it is a new generators' input whose inbound fingerprint
//! differs ([`MeshInput::with_jwks`]), pushed like any other change.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::sync::mpsc;

use super::sources::{State, Tx};
use crate::translate::authn::{FetchedJwks, JwksKey};

/// istiod's `openIDDiscoveryCfgURLSuffix`.
const OPENID_SUFFIX: &str = "/.well-known/openid-configuration";
/// Largest key set or discovery document read (a JWKS is kilobytes).
const MAX_BODY: usize = 1 << 20;
/// A fetch's time limit (istiod's default for a rule without `timeout`;
/// a rule's own `timeout` is not read for istiod's fetch yet).
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// istiod's `JwtPubKeyRefreshIntervalOnFailure`, doubled after each failed
/// round up to `JwtPubKeyRefreshIntervalOnFailureResetThreshold`.
const RETRY_FIRST: Duration = Duration::from_secs(60);
const RETRY_MAX: Duration = Duration::from_secs(3600);

/// Fetches over http and https (the system's roots, as istiod's
/// `secureHTTPClient`; without them https fetches fail with a reason).
pub(crate) struct Fetcher {
    http: Client<HttpConnector, Empty<Bytes>>,
    https: Option<Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>>,
}

impl Fetcher {
    pub(crate) fn new() -> Self {
        let exec = hyper_util::rt::TokioExecutor::new();
        let https = match hyper_rustls::HttpsConnectorBuilder::new().with_native_roots() {
            Ok(b) => Some(Client::builder(exec.clone()).build(b.https_only().enable_http1().build())),
            Err(e) => {
                tracing::warn!(target: "authn", error = %e, "no root certificates: JWKS cannot be fetched over https");
                None
            }
        };
        Self { http: Client::builder(exec).build_http(), https }
    }

    /// GET `uri`: the body of a 2xx answer, else why not (istiod's
    /// `getRemoteContentWithRetry` without the retries).
    pub(crate) async fn get(&self, uri: &str) -> Result<Vec<u8>, String> {
        let parsed: http::Uri = uri.parse().map_err(|e| format!("invalid URI {uri:?}: {e}"))?;
        let fut = async {
            let resp = match parsed.scheme_str() {
                Some("http") => self.http.get(parsed).await,
                Some("https") => match &self.https {
                    Some(c) => c.get(parsed).await,
                    None => return Err(format!("cannot fetch {uri}: no root certificates for https")),
                },
                _ => return Err(format!("unsupported scheme in {uri:?}")),
            }
            .map_err(|e| format!("GET {uri}: {e}"))?;
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
        tokio::time::timeout(FETCH_TIMEOUT, fut).await.unwrap_or_else(|_| Err(format!("GET {uri}: timed out")))
    }

    /// The key set of `(issuer, jwks_uri)`: from the URI, or through the
    /// issuer's OpenID discovery document when it is empty; checked to be a
    /// JWKS (istiod's `validateJWKSFormat`: an object with a `keys` array),
    /// so that no other content a URI returns ends up inlined.
    pub(crate) async fn key_set(&self, key: &JwksKey) -> Result<String, String> {
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

/// Follows the key sets translation wants (`wanted`: the set after each
/// model change) and publishes what it fetched.
pub(super) async fn run(
    mut wanted_rx: mpsc::UnboundedReceiver<BTreeSet<JwksKey>>,
    state: Rc<RefCell<State>>,
    tx: Tx,
    refresh: Duration,
) {
    let fetcher = Fetcher::new();
    let mut wanted: BTreeSet<JwksKey> = BTreeSet::new();
    let mut keys: FetchedJwks = BTreeMap::new();
    let mut failing = false;
    let mut retry = RETRY_FIRST;
    let mut next_round = tokio::time::Instant::now() + refresh;
    loop {
        let round = tokio::select! {
            w = wanted_rx.recv() => {
                let Some(mut w) = w else { return };
                while let Ok(newer) = wanted_rx.try_recv() {
                    w = newer;
                }
                let before = keys.len();
                keys.retain(|k, _| w.contains(k));
                let new: Vec<JwksKey> = w.iter().filter(|k| !wanted.contains(*k) && !keys.contains_key(*k)).cloned().collect();
                wanted = w;
                let changed = fetch_all(&fetcher, &new, &mut keys).await || keys.len() != before;
                if new.iter().any(|k| !keys.contains_key(k)) {
                    // istiod retries a failed first fetch in the background.
                    next_round = next_round.min(tokio::time::Instant::now() + RETRY_FIRST);
                    failing = true;
                }
                changed
            }
            _ = tokio::time::sleep_until(next_round) => {
                let all: Vec<JwksKey> = wanted.iter().cloned().collect();
                let mut fresh = BTreeMap::new();
                fetch_all(&fetcher, &all, &mut fresh).await;
                let errors = fresh.len() < all.len();
                // A key set that cannot be refreshed keeps its last good
                // version (istiod deletes only never-fetched entries).
                let mut changed = false;
                for (k, v) in fresh {
                    if keys.get(&k) != Some(&v) {
                        tracing::info!(target: "authn", issuer = %k.0, uri = %k.1, "updated cached JWT public key");
                        keys.insert(k, v);
                        changed = true;
                    }
                }
                // istiod's refreshCache: the default interval after a clean
                // round; after a failed one a minute, doubling while rounds
                // keep failing, up to an hour.
                retry = if errors && failing { (retry * 2).min(RETRY_MAX) } else { RETRY_FIRST };
                let wait = if errors { retry } else { refresh };
                failing = errors;
                next_round = tokio::time::Instant::now() + wait;
                changed
            }
        };
        if round {
            publish(&state, &tx, Arc::new(keys.clone()));
        }
    }
}

/// Fetches `which` into `into`; whether anything in `into` changed.
async fn fetch_all(fetcher: &Fetcher, which: &[JwksKey], into: &mut FetchedJwks) -> bool {
    let results = futures_util::future::join_all(which.iter().map(|k| fetcher.key_set(k))).await;
    let mut changed = false;
    for (k, r) in which.iter().zip(results) {
        match r {
            Ok(body) => {
                changed |= into.get(k) != Some(&body);
                into.insert(k.clone(), body);
            }
            Err(e) => tracing::warn!(
                target: "authn",
                issuer = %k.0,
                uri = %k.1,
                error = %e,
                "cannot fetch JWKS; its last good key set stays, or, never fetched, the public-only one (tokens of this issuer are rejected)"
            ),
        }
    }
    changed
}

/// Makes `keys` the key sets in force: a new generators' input whose
/// inbound fingerprint changed, pushed to the proxies.
fn publish(state: &RefCell<State>, tx: &Tx, keys: Arc<FetchedJwks>) {
    let mut s = state.borrow_mut();
    s.jwks = keys.clone();
    let Some(prev) = s.mesh.clone() else { return };
    if prev.model.jwks == keys {
        return;
    }
    let next = Arc::new(prev.with_jwks(keys));
    s.mesh = Some(next.clone());
    let touched = crate::generator::all_names(&next.model);
    let _ = tx.send(crate::control::Input {
        changes: Vec::new(),
        mesh: Some(next),
        touched,
        reasons: istiod_xds::metrics::Reasons::one("config"),
    });
}

#[cfg(test)]
mod tests;
