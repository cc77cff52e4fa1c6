//! `pilot_envoy_filter_status` (envoyfilter/monitoring.go), recorded when
//! `PILOT_ENVOY_FILTER_STATS` is true, as istiod records it: per filter
//! (`namespace/name`) and patch type, `result="applied"` 1 once a patch of
//! that filter and type applied since the last collection; per patch type `result="error"` 1 once a patch failed. Each
//! collection starts the applied set afresh, as istiod's RecordMetrics
//! does.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::cluster::Outcome;

/// (filter, patch type) -> applied.
static APPLIED: Mutex<BTreeMap<(String, &'static str), bool>> = Mutex::new(BTreeMap::new());
/// Patch types that failed.
static ERRORS: Mutex<BTreeMap<&'static str, ()>> = Mutex::new(BTreeMap::new());
/// 0 unknown, 1 off, 2 on.
static ENABLED: AtomicU8 = AtomicU8::new(0);

/// Whether `PILOT_ENVOY_FILTER_STATS` is on (off by default, as in istiod).
pub fn enabled() -> bool {
    match ENABLED.load(Ordering::Relaxed) {
        0 => {
            let on =
                std::env::var("PILOT_ENVOY_FILTER_STATS").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
            ENABLED.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        v => v == 2,
    }
}

/// Records what patches did (`IncrementEnvoyFilterMetric`).
pub fn record(outcomes: &[Outcome]) {
    if outcomes.is_empty() || !enabled() {
        return;
    }
    let mut map = APPLIED.lock().unwrap_or_else(|e| e.into_inner());
    for o in outcomes {
        let e = map.entry((o.key.to_string(), o.kind)).or_insert(false);
        *e |= o.applied;
    }
}

/// Records a patch of `kind` that failed (`IncrementEnvoyFilterErrorMetric`).
pub fn error(kind: &'static str) {
    if enabled() {
        ERRORS.lock().unwrap_or_else(|e| e.into_inner()).insert(kind, ());
    }
}

/// The series to expose: (name, patch, result, value); the applied set is
/// started afresh.
pub fn collect() -> Vec<(Option<String>, &'static str, &'static str, f64)> {
    let applied = std::mem::take(&mut *APPLIED.lock().unwrap_or_else(|e| e.into_inner()));
    // istiod records a pair only once a patch of it applied.
    let mut out: Vec<_> =
        applied.into_iter().filter(|(_, a)| *a).map(|((name, kind), _)| (Some(name), kind, "applied", 1.0)).collect();
    out.extend(ERRORS.lock().unwrap_or_else(|e| e.into_inner()).keys().map(|k| (None, *k, "error", 1.0)));
    out
}
