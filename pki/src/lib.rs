//! Certificates for workload identity: the CA's roots, CSR checks and signing, istiod's own serving certificate.
//!
//! The Istio CA signs short-lived SPIFFE
//! certificates for `istio.v1.auth.IstioCertificateService`, its own
//! serving certificate, and the root it distributes ([`ca`]).
#![forbid(unsafe_code)]

pub mod ca;
mod duration;

pub use ca::{Ca, CaError, Settings, SignError, not_afters, pem_blocks, root_due, uri_sans};
pub use time::OffsetDateTime;
