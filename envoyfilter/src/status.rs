//! `pilot_envoy_filter_status` (envoyfilter/monitoring.go), recorded when
//! `PILOT_ENVOY_FILTER_STATS` is true (the binary says so with
//! [`set_enabled`]), as istiod records it: per filter
//! (`namespace/name`) and patch type, `result="applied"` 1 once a patch of
//! that filter and type applied since the last collection; per patch type `result="error"` 1 once a patch failed. Each
//! collection starts the applied set afresh, as istiod's RecordMetrics
//! does.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cluster::Outcome;

/// (filter, patch type) pairs a patch of which applied: istiod records
/// only those.
static APPLIED: Mutex<BTreeSet<(String, &'static str)>> = Mutex::new(BTreeSet::new());
/// Patch types that failed.
static ERRORS: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
/// `PILOT_ENVOY_FILTER_STATS` (off by default, as in istiod).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns the recording on or off.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Records what patches did (`IncrementEnvoyFilterMetric`).
pub fn record(outcomes: &[Outcome]) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let mut set = APPLIED.lock().unwrap_or_else(|e| e.into_inner());
    for o in outcomes.iter().filter(|o| o.applied) {
        set.insert((o.key.to_string(), o.kind));
    }
}

/// Records a patch of `kind` that failed (`IncrementEnvoyFilterErrorMetric`).
pub fn error(kind: &'static str) {
    if ENABLED.load(Ordering::Relaxed) {
        ERRORS.lock().unwrap_or_else(|e| e.into_inner()).insert(kind);
    }
}

/// The series to expose: (name, patch, result, value); the applied set is
/// started afresh.
pub fn collect() -> Vec<(Option<String>, &'static str, &'static str, f64)> {
    let applied = std::mem::take(&mut *APPLIED.lock().unwrap_or_else(|e| e.into_inner()));
    let mut out: Vec<_> = applied.into_iter().map(|(name, kind)| (Some(name), kind, "applied", 1.0)).collect();
    out.extend(ERRORS.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|k| (None, *k, "error", 1.0)));
    out
}
