//! `pilot-discovery`'s wiring: the command line and configuration, the control thread, the sources, the debug and monitoring ports, and the controllers that tie the other crates together.
//!
//! - [`cli`] and [`config`]: flags and istiod's environment variables,
//!   read once into a typed [`config::Config`];
//! - [`discovery`]: starts the serving cores (`istiod-xds`), the CA
//!   (`istiod-ca`), the webhooks (`istiod-webhook`) and the control thread,
//!   which follows the sources (`istiod-kubewatch`), builds the mesh
//!   (`istiod-mesh`) and publishes it to the cores;
//! - [`control`]: the control thread's push debouncing and its plain HTTP
//!   ports; [`logging`] and [`version`].
#![forbid(unsafe_code)]

pub mod cli;
pub mod config;
pub mod control;
pub mod discovery;
pub mod logging;
pub mod version;
