//! The peer behind a stream, as the [`Generator`](super::Generator)
//! classifies it from the node of its first request. The engine knows
//! nothing of what a node id means: it keeps the id and a few fields for
//! the debug endpoints, and the opaque class the per-core cache keys on.

use std::sync::Arc;

use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::prost::Message;

/// Largest encoded node the engine accepts on a stream's first request,
/// unless configured otherwise. A sidecar's node (id, metadata with labels,
/// annotations and proxy config) is a few kilobytes; istiod's whole request
/// limit is 4 MiB, which lets one client pin megabytes per class.
pub const DEFAULT_MAX_NODE_BYTES: usize = 64 * 1024;

/// A classified peer: what the debug endpoints show of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The node id as sent.
    pub id: Arc<str>,
    /// istiod's `Proxy.ID`: the third part of a node id (`pod.namespace`),
    /// which `/debug/syncz` shows and connection ids start with; the whole
    /// id for other ids.
    pub name: Arc<str>,
    /// Fields the generator adds to the peer's rows in `/debug/syncz` and
    /// `/debug/adsz` (`istio_version`, `cluster_id`, ...).
    pub info: Vec<(&'static str, Arc<str>)>,
}

impl Peer {
    /// The generator's field `key`, or "".
    pub fn info(&self, key: &str) -> &str {
        self.info.iter().find(|(k, _)| *k == key).map_or("", |(_, v)| v)
    }
}

/// What [`Generator::classify`](super::Generator::classify) makes of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified<C> {
    /// The peer.
    pub peer: Peer,
    /// Its class: proxies of equal class share cached bytes.
    pub class: C,
}

/// Refuses a node larger than `limit` encoded bytes, with a message that
/// names the limit (the stream ends with INVALID_ARGUMENT).
pub fn check_size(node: Option<&Node>, limit: usize) -> Result<(), String> {
    match node.map(Message::encoded_len) {
        Some(n) if n > limit => Err(format!("node is {n} bytes, over the limit of {limit} (ISTIOD_RS_MAX_NODE_BYTES)")),
        _ => Ok(()),
    }
}
