//! Workload identity: the Istio CA that signs short-lived SPIFFE
//! certificates for `istio.v1.auth.IstioCertificateService`, the root
//! certificate it distributes, and the rustls configuration of the TLS
//! listeners (:15012, :15017).
//!
//! Nothing is implemented yet; the CSR service is a later issue.
#![forbid(unsafe_code)]
