//! Sources of mesh state for the control thread: Kubernetes watchers
//! (kube-rs, tokio) and the `--configDir` directory of the same YAML
//! manifests, both turned into one stream of typed object events.
//!
//! It will also carry the fake Kubernetes API server used by tests (real
//! list/watch over HTTP). Nothing is implemented yet: see issue #5.
#![forbid(unsafe_code)]
