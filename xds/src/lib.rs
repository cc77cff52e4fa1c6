//! The xDS serving layer: everything that runs on the serving cores.
//!
//! It will own the hand-rolled HTTP/2 + gRPC framing (a sans-I/O state
//! machine with a thin glommio adapter), the ADS state of each proxy stream
//! (state of the world and delta), the per-core cache of pre-encoded
//! resources and the push queue. The hot path starts where a connection's
//! bytes arrive and ends where a push is copied into its send buffer. Only
//! this crate imports glommio.
//!
//! Nothing is implemented yet: the framing layer is issue #3, the ADS engine
//! issue #4.
#![forbid(unsafe_code)]
