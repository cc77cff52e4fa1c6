//! The contract between a generator and the serving cores: resource kinds, snapshots and deltas, the `Generator` trait, a node's classification, push reasons, gRPC status codes; no I/O.
//!
//! The serving layer (`istiod-xds`) runs it; the mesh generator
//! (`istiod-mesh`) implements it without linking a server or a runtime.
#![forbid(unsafe_code)]

mod code;
pub mod node;
pub mod snapshot;

pub use code::Code;
pub use snapshot::Reasons;
