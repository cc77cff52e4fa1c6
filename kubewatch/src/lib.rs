//! Sources of mesh state for the control thread: Kubernetes watchers
//! (kube-rs, tokio) and the `--configDir` directory of the same YAML
//! manifests, both turned into typed objects.
//!
//! Today: [`config_dir`] reads Services and EndpointSlices (the kinds the
//! first, simple translation uses) from a directory, once, with located
//! errors. Watching, the other kinds, Istio CRDs, Kubernetes and the fake
//! API server are issue #5.
#![forbid(unsafe_code)]

pub mod config_dir;
pub mod duration;
pub mod events;
pub mod fake;
pub mod gateway_api;
pub mod istio;
pub mod kube_source;
pub mod objects;
pub mod yaml;
