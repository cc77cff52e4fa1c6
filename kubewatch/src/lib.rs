//! Kubernetes access for the control plane: the watchers (kube-rs, tokio) and the `--configDir` directory as sources of typed objects, the few API writes and the lease election, a fake API server for tests.
//!
//! - [`kube_source`] lists and watches the API server, [`config_dir`]
//!   reads and watches a directory of the same manifests; both yield
//!   `istiod_config::objects::Objects` and the references of what changed
//!   (the objects and their parsing are `istiod-config`'s).
//! - [`kapi`] makes the writes (Secrets, ConfigMaps, Leases, webhook
//!   configurations) with 404 and 409 told apart; [`leader`] is istiod's
//!   lease election on top of it; [`events`] counts the watch events.
//! - [`fake`] is a fake API server speaking real list/watch over HTTP, for
//!   tests only: no real one can be installed where the tests run.
#![forbid(unsafe_code)]

pub mod config_dir;
pub mod events;
pub mod fake;
pub mod kapi;
pub mod kube_source;
pub mod leader;
pub mod limit;
