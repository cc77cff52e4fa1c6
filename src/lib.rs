//! `pilot-discovery`, the istiod-rs binary, and its wiring: the command line
//! ([`cli`]), the typed configuration built once from flags and istiod's
//! environment variables ([`config`]), logging, and (as they land) the
//! control thread that owns the mesh model and the serving cores that own
//! the proxy connections.
//!
//! The hot path does not start here: `main` builds a [`config::Config`] and
//! hands it to the serving layer (`istiod-xds`).
#![forbid(unsafe_code)]

pub mod ca;
pub mod cli;
pub mod config;
pub mod config_dump;
pub mod control;
pub mod discovery;
pub mod generator;
pub mod leader;
pub mod logging;
pub mod mesh;
pub mod model;
pub mod node;
#[cfg(test)]
mod testing;
pub mod translate;
pub mod version;
pub mod webhook;
