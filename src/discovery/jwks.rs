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

use istiod_ca::jwks::Fetcher;
use tokio::sync::mpsc;

use super::sources::{State, Tx};
use istiod_mesh::model::{FetchedJwks, JwksKey};

/// istiod's `JwtPubKeyRefreshIntervalOnFailure`, doubled after each failed
/// round up to `JwtPubKeyRefreshIntervalOnFailureResetThreshold`.
const RETRY_FIRST: Duration = Duration::from_secs(60);
const RETRY_MAX: Duration = Duration::from_secs(3600);

/// Follows the key sets translation wants (`wanted`: the set after each
/// model change) and publishes what it fetched.
pub(super) async fn run(
    mut wanted_rx: mpsc::UnboundedReceiver<BTreeSet<JwksKey>>,
    state: Rc<RefCell<State>>,
    tx: Tx,
    refresh: Duration,
) {
    let fetcher = Fetcher::for_resolver();
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
    s.published = Some((Arc::downgrade(&next), s.objects.clone()));
    let touched = istiod_mesh::generator::all_names(&next.model);
    let _ = tx.send(crate::control::Input {
        changes: Vec::new(),
        mesh: Some(next),
        touched,
        reasons: istiod_xds_api::Reasons::one("config"),
        full: false,
    });
}
