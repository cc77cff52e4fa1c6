//! The mesh model, its translation to Envoy and proxyless-gRPC resources, and the generator the serving cores call: pure, no I/O, no async runtime.
//!
//! - [`meshconfig`]: the MeshConfig settings in force;
//! - [`model`]: the typed mesh built from the watched objects (services,
//!   endpoints, routing, policies, gateways, Secrets);
//! - [`translate`]: model -> xDS resources, shared and per proxy class;
//! - [`generator`]: what a class of proxies is served and what a change
//!   touches (its dependency keys), behind `istiod_xds_api::snapshot::Generator`;
//! - [`update`]: one place per kind group for what a change does to the
//!   model, the translation and the dependency keys;
//! - [`node`]: a proxy's node metadata and class.
//!
//! The control thread builds a [`generator::MeshInput`] with [`update`];
//! the serving cores read it through [`generator::MeshGenerator`]. Benches
//! and fuzzers link this crate without a server.
#![forbid(unsafe_code)]

pub use istiod_model::counters;
pub mod generator;
pub use istiod_config::meshconfig;
pub use istiod_model as model;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod model_we_tests;
pub mod node;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
pub mod translate;
pub mod update;

/// The hasher of digests that stand for encoded resources within this
/// process (a changed digest is a changed resource): foldhash's quality
/// variant, a 64-bit hash with full avalanche, several times faster than
/// SipHash over the kilobytes of a cluster. Its seeds are drawn once per
/// process (equal input, equal digest, on every thread and across
/// rebuilds), so that no one writing a config can aim at a collision
/// with seeds known in advance.
pub(crate) fn digester() -> impl std::hash::Hasher {
    use std::hash::BuildHasher;
    static STATE: std::sync::OnceLock<foldhash::quality::RandomState> = std::sync::OnceLock::new();
    STATE.get_or_init(foldhash::quality::RandomState::default).build_hasher()
}
