//! Helpers the unit tests of several modules share.

use std::sync::Arc;

use istiod_xds::ads::node::{NodeType, ProxyClass};

/// A sidecar's class: namespace and labels, no locality.
pub(crate) fn class(ns: &str, labels: &[(&str, &str)]) -> ProxyClass {
    ProxyClass {
        node_type: NodeType::Sidecar,
        namespace: ns.into(),
        generator: "".into(),
        labels: labels.iter().map(|(k, v)| (Arc::from(*k), Arc::from(*v))).collect(),
        locality: "".into(),
    }
}
