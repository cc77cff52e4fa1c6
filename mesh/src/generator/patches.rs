//! EnvoyFilters on what the generator serves (istiod applies them as it
//! builds each proxy's resources): the patches that apply to a proxy of a
//! class, their effect on a resource's bytes, and on its cache key. A
//! resource no patch can touch keeps its shared bytes and generation; one
//! a patch changes is decoded into the complete Envoy schema, patched and
//! encoded again, and cached under its generation mixed with the applying
//! filters' digest, so an EnvoyFilter change reaches only the proxies it
//! selects.

use std::sync::Arc;

use bytes::Bytes;
use istiod_envoyfilter::cluster as clusters;
use istiod_envoyfilter::filters::{Applied, ApplyTo, Context, Proxy};
use istiod_xds_api::snapshot::{Kind, Snapshot};
use prost::Message;

use super::{MeshInput, is_grpc, mesh, mix};
use crate::node::{NodeType, ProxyClass};

type BaseGeneration = fn(&Snapshot<MeshInput>, &ProxyClass, Kind, &str) -> Option<u64>;
type BaseBody = fn(&Snapshot<MeshInput>, &ProxyClass, Kind, &str) -> Option<Bytes>;

/// The patches that apply to a proxy of `class` (`None`: none do).
pub(crate) fn applied(m: &MeshInput, class: &ProxyClass) -> Option<Applied> {
    let filters = &m.model.envoy_filters;
    // Proxyless gRPC is not patched (istiod's grpcgen).
    if filters.is_empty() || is_grpc(class) {
        return None;
    }
    let labels: Vec<(&str, &str)> = class.labels.iter().map(|(k, v)| (&**k, &**v)).collect();
    let metadata: Vec<(&str, &str)> = class.metadata.iter().map(|(k, v)| (&**k, &**v)).collect();
    let proxy = Proxy { namespace: &class.namespace, labels: &labels, version: &class.version, metadata: &metadata };
    let applied = filters.applied(&proxy);
    (!applied.patches.is_empty()).then_some(applied)
}

/// Where resource `name` of `kind` is for a proxy of `class`.
fn context(class: &ProxyClass, kind: Kind, name: &str) -> Context {
    if class.node_type == NodeType::Router {
        return Context::Gateway;
    }
    match kind {
        Kind::Cluster if name.starts_with("inbound|") => Context::SidecarInbound,
        Kind::Listener if name == crate::translate::inbound::VIRTUAL_INBOUND => Context::SidecarInbound,
        _ => Context::SidecarOutbound,
    }
}

/// The services an inbound cluster serves (its port's).
fn hosts(m: &MeshInput, class: &ProxyClass, name: &str) -> Vec<Arc<str>> {
    match clusters::parse_name(name) {
        Some(("inbound", port, _, _)) => u16::try_from(port)
            .map(|p| crate::translate::inbound::inbound_hosts(&m.model, class, p))
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The clusters ADD patches give a proxy of `class`, by name.
pub(crate) fn added_clusters(m: &MeshInput, class: &ProxyClass) -> Vec<(Arc<str>, prost_reflect::DynamicMessage)> {
    let Some(applied) = applied(m, class) else { return Vec::new() };
    let ctx = if class.node_type == NodeType::Router { Context::Gateway } else { Context::SidecarOutbound };
    clusters::inserted(&applied, ctx)
        .into_iter()
        .map(|c| {
            let name = c.get_field_by_name("name").and_then(|v| v.as_str().map(Arc::from)).unwrap_or_else(|| "".into());
            (name, c)
        })
        .collect()
}

/// The generation of `name`: the base one, unless a patch removes the
/// resource (none), adds it, or may change it (mixed with the filters').
pub(crate) fn generation(
    snap: &Snapshot<MeshInput>,
    class: &ProxyClass,
    kind: Kind,
    name: &str,
    base: BaseGeneration,
) -> Option<u64> {
    let (Some(m), Kind::Cluster) = (mesh(snap), kind) else { return base(snap, class, kind, name) };
    let Some(applied) = applied(m, class) else { return base(snap, class, kind, name) };
    if applied.of(ApplyTo::Cluster).is_empty() {
        return base(snap, class, kind, name);
    }
    let ctx = context(class, kind, name);
    let hosts = hosts(m, class, name);
    let hosts: Vec<&str> = hosts.iter().map(|h| &**h).collect();
    if clusters::removed(&applied, ctx, name, &hosts) {
        return None;
    }
    match base(snap, class, kind, name) {
        Some(g) if clusters::touched(&applied, ctx, name, &hosts) => Some(mix((g, applied.digest))),
        Some(g) => Some(g),
        // An added cluster (the first ADD of a name wins where two add it).
        None => added_clusters(m, class).iter().any(|(n, _)| &**n == name).then(|| mix(("added", applied.digest))),
    }
}

/// The bytes of `name`: the base ones, patched where a patch applies.
pub(crate) fn body(
    snap: &Snapshot<MeshInput>,
    class: &ProxyClass,
    kind: Kind,
    name: &str,
    base_generation: BaseGeneration,
    base: BaseBody,
) -> Option<Bytes> {
    let (Some(m), Kind::Cluster) = (mesh(snap), kind) else { return base(snap, class, kind, name) };
    let Some(applied) = applied(m, class).filter(|a| !a.of(ApplyTo::Cluster).is_empty()) else {
        return base(snap, class, kind, name);
    };
    let ctx = context(class, kind, name);
    let hosts = hosts(m, class, name);
    let hosts: Vec<&str> = hosts.iter().map(|h| &**h).collect();
    if clusters::removed(&applied, ctx, name, &hosts) {
        return None;
    }
    if base_generation(snap, class, kind, name).is_none() {
        let (_, c) = added_clusters(m, class).into_iter().find(|(n, _)| &**n == name)?;
        return Some(Bytes::from(c.encode_to_vec()));
    }
    let bytes = base(snap, class, kind, name)?;
    if !clusters::touched(&applied, ctx, name, &hosts) {
        return Some(bytes);
    }
    let desc = istiod_envoyfilter::schema::message("envoy.config.cluster.v3.Cluster")?;
    let c = match istiod_envoyfilter::schema::decode(desc, &bytes) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(target: "ads", name, "cannot patch: {e}");
            return Some(bytes);
        }
    };
    let mut outcomes = Vec::new();
    let patched = clusters::apply(&applied, ctx, c, &hosts, &mut outcomes);
    istiod_envoyfilter::status::record(&outcomes);
    patched.map(|c| Bytes::from(c.encode_to_vec()))
}
