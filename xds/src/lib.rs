//! The xDS serving layer: everything that runs on the serving cores.
//!
//! - [`h2`]: a hand-rolled HTTP/2 server connection, a sans-I/O state
//!   machine (bytes and `now` in; events, frames and deadlines out);
//! - [`grpc`]: gRPC calls on top of it (routing, message framing, status
//!   trailers), still sans-I/O;
//! - [`server`]: the thin glommio adapter: one executor per core,
//!   `SO_REUSEPORT` listeners, plaintext h2c and TLS (rustls, ALPN `h2`);
//! - [`metrics`]: counters of protocol violations.
//!
//! The hot path starts in [`server`] where a connection's bytes arrive,
//! runs through [`grpc::GrpcConnection::recv`], and ends where a response or
//! push is framed by [`h2::Connection::poll_transmit`] into pieces that
//! reference the core's cache and go to the socket in one vectored write.
//! Only this crate imports glommio.
#![forbid(unsafe_code)]

pub mod ads;
#[doc(hidden)]
pub mod fuzzing;
pub mod grpc;
pub mod h2;
mod hash;
pub mod metrics;
pub mod server;
