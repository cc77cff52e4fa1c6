//! Kubernetes access for the control plane: the watchers (kube-rs, tokio) and the `--configDir` directory, both turned into typed, validated objects; the few writes and the lease election; a fake API server for tests.
//!
//! - [`kube_source`] lists and watches the API server, [`config_dir`]
//!   reads and watches a directory of the same manifests; both yield
//!   [`objects::Objects`] and the references of what changed.
//! - [`istio`] and [`gateway_api`] are the CRD specs, parsed and validated
//!   as istiod's webhook would ([`istio::validate`], [`istio::re2`]);
//!   [`yaml`] bounds what the YAML parser is given.
//! - [`kapi`] makes the writes (Secrets, ConfigMaps, Leases, webhook
//!   configurations) with 404 and 409 told apart; [`leader`] is istiod's
//!   lease election on top of it.
//! - [`fake`] is a fake API server speaking real list/watch over HTTP, for
//!   tests only: no real one can be installed where the tests run.
#![forbid(unsafe_code)]

pub mod config_dir;
pub mod duration;
pub mod events;
pub mod fake;
pub mod gateway_api;
pub mod istio;
pub mod kapi;
pub mod kube_source;
pub mod leader;
pub mod meta;
pub mod objects;
pub mod yaml;
