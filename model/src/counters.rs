//! Counts istiod keeps where configuration is generated, kept here (the
//! crate does no I/O) and read by the metrics handler:
//! `pilot_sds_certificate_errors_total`,
//! `provider_lookup_cluster_failures{type}`,
//! `pilot_k8s_proxies_with_no_service_targets{reason}`, and the Gateways
//! strict merging leaves out (`pilot_total_rejected_configs`).

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

/// istiod's `reason` labels of `pilot_k8s_proxies_with_no_service_targets`.
pub const NO_TARGET_REASONS: [&str; 3] = ["incorrect_cluster", "no_matching_services", "no_matching_metadata"];

static NO_TARGETS: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];

/// A proxy whose service targets were looked up and none found, for
/// `reason` (one of [`NO_TARGET_REASONS`]).
pub fn no_service_targets(reason: &str) {
    if let Some(i) = NO_TARGET_REASONS.iter().position(|r| *r == reason) {
        NO_TARGETS[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// `(reason, proxies)` of the reasons counted.
pub fn no_service_targets_counted() -> Vec<(&'static str, u64)> {
    NO_TARGET_REASONS
        .iter()
        .zip(&NO_TARGETS)
        .map(|(r, n)| (*r, n.load(Ordering::Relaxed)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Gateways left out by strict merging, not yet counted.
static REJECTED_GATEWAYS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// A Gateway (`namespace/name`) strict gateway merging left out of a
/// router's configuration (istiod's `RecordRejectedConfig`).
pub fn rejected_gateway(name: &str) {
    REJECTED_GATEWAYS.lock().unwrap_or_else(|e| e.into_inner()).push(name.to_owned());
}

/// The Gateways left out since the last call (the metrics handler counts
/// them in `pilot_total_rejected_configs{type="gateway"}`).
pub fn take_rejected_gateways() -> Vec<String> {
    std::mem::take(&mut *REJECTED_GATEWAYS.lock().unwrap_or_else(|e| e.into_inner()))
}
