//! A hand-rolled HTTP/2 server (RFC 9113) as a sans-I/O state machine:
//! [`frame`] decodes and encodes frames, [`hpack`] decodes header blocks and
//! builds our fixed response blocks, [`conn`] runs one connection (streams,
//! flow control, settings, keepalive, graceful shutdown, flood limits).
//!
//! Modelled on the layering of the `h2` crate (`frame/`, `hpack/`,
//! `proto/`) without its shared stream store: one core owns a connection.

pub mod conn;
pub mod error;
pub mod frame;
pub mod hpack;
pub mod limits;
pub mod out;
#[cfg(test)]
pub(crate) mod testing;
pub mod violations;

pub use conn::{Connection, Event, Request, SendError};
pub use error::{Error, Reason};
pub use limits::{Limits, Rate};
pub use out::{Segments, Transmit};
