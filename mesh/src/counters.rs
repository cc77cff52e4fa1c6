//! Counts istiod keeps where configuration is generated, kept here (the
//! crate does no I/O) and read by the metrics handler:
//! `pilot_sds_certificate_errors_total` and
//! `provider_lookup_cluster_failures{type}`.

use std::sync::atomic::{AtomicU64, Ordering};

static SDS_ERRORS: AtomicU64 = AtomicU64::new(0);

/// istiod's `type` labels of provider lookups (`pilot/pkg/model/monitoring.go`
/// callers).
pub const PROVIDER_TYPES: [&str; 11] = [
    "envoyTCPAls",
    "envoyHTTPAls",
    "envoyOtelAls",
    "zipkin",
    "datadog",
    "skywalking",
    "opentelemetry",
    "dynatrace",
    "jwks",
    "authz",
    "externalSds",
];

static PROVIDER_FAILURES: [AtomicU64; 11] = [const { AtomicU64::new(0) }; 11];

/// A credential asked for over SDS that cannot be served.
pub fn sds_error() {
    SDS_ERRORS.fetch_add(1, Ordering::Relaxed);
}

/// SDS errors so far.
pub fn sds_errors() -> u64 {
    SDS_ERRORS.load(Ordering::Relaxed)
}

/// An extension provider of `kind` (one of [`PROVIDER_TYPES`]) whose
/// service has no cluster.
pub fn provider_lookup_failure(kind: &str) {
    if let Some(i) = PROVIDER_TYPES.iter().position(|t| *t == kind) {
        PROVIDER_FAILURES[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// `(type, failures)` of the types that failed.
pub fn provider_lookup_failures() -> Vec<(&'static str, u64)> {
    PROVIDER_TYPES
        .iter()
        .zip(&PROVIDER_FAILURES)
        .map(|(t, n)| (*t, n.load(Ordering::Relaxed)))
        .filter(|(_, n)| *n > 0)
        .collect()
}
