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
use istiod_envoyfilter::listener as listeners;
use istiod_envoyfilter::route as routes;
use istiod_xds_api::snapshot::{Kind, Snapshot};
use prost::Message;

use super::{MeshInput, is_grpc, mesh, mix};
use crate::node::{NodeType, ProxyClass};

type BaseGeneration = fn(&Snapshot<MeshInput>, &ProxyClass, Kind, &str) -> Option<u64>;
type BaseBody = fn(&Snapshot<MeshInput>, &ProxyClass, Kind, &str) -> Option<Bytes>;

/// The patches that apply to a proxy of `class` (`None`: none do).
pub(crate) fn applied(m: &MeshInput, class: &ProxyClass) -> Option<Arc<Applied>> {
    applied_in(&m.model, class)
}

fn applied_in(model: &crate::model::Model, class: &ProxyClass) -> Option<Arc<Applied>> {
    let filters = &model.envoy_filters;
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
        // istiod patches the inbound passthrough cluster with the inbound
        // patcher (buildClusters).
        Kind::Cluster if name.starts_with("inbound|") || name == "InboundPassthroughCluster" => Context::SidecarInbound,
        Kind::Listener if name == crate::translate::inbound::VIRTUAL_INBOUND => Context::SidecarInbound,
        _ => Context::SidecarOutbound,
    }
}

/// The services an inbound cluster serves (its port's).
fn hosts(m: &MeshInput, class: &ProxyClass, name: &str) -> Vec<Arc<str>> {
    hosts_in(&m.model, class, name)
}

fn hosts_in(model: &crate::model::Model, class: &ProxyClass, name: &str) -> Vec<Arc<str>> {
    match clusters::parse_name(name) {
        Some(("inbound", port, _, _)) => {
            u16::try_from(port).map(|p| crate::translate::inbound::inbound_hosts(model, class, p)).unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// The EnvoyFilters (`namespace/name`) whose patches may change resource
/// `name` of `kind` served to a proxy of `class`, in the order they apply
/// (`/debug/explain`).
pub fn filters_touching(model: &crate::model::Model, class: &ProxyClass, kind: Kind, name: &str) -> Vec<Arc<str>> {
    let Some(applied) = applied_in(model, class) else { return Vec::new() };
    let ctx = context(class, kind, name);
    let ports = port_map(model, class);
    let patches: Vec<&Arc<istiod_envoyfilter::filters::Patch>> = match kind {
        Kind::Cluster => {
            let hosts = hosts_in(model, class, name);
            let hosts: Vec<&str> = hosts.iter().map(|h| &**h).collect();
            applied
                .of(ApplyTo::Cluster)
                .iter()
                .filter(|p| p.in_context(ctx) && clusters::matches(name, p.cluster.as_ref(), &hosts))
                .collect()
        }
        Kind::Listener => {
            let mut out: Vec<_> = listeners::touching(&applied, ctx, name, listener_port(name)).collect();
            if ctx == Context::SidecarInbound {
                // Its inline route configurations.
                out.extend(
                    [ApplyTo::RouteConfiguration, ApplyTo::VirtualHost, ApplyTo::HttpRoute]
                        .into_iter()
                        .flat_map(|t| applied.of(t))
                        .filter(|p| p.in_context(ctx)),
                );
            }
            out
        }
        Kind::Route => routes::touching(&applied, ctx, name, &ports).collect(),
        _ => Vec::new(),
    };
    let mut out: Vec<Arc<str>> = Vec::new();
    for p in patches {
        if !out.contains(&p.filter) {
            out.push(p.filter.clone());
        }
    }
    out
}

/// The resources of `to` (clusters, listeners) ADD patches give a proxy
/// of `class`, by name.
fn added_of(m: &MeshInput, class: &ProxyClass, to: ApplyTo) -> Vec<(Arc<str>, prost_reflect::DynamicMessage)> {
    let Some(applied) = applied(m, class) else { return Vec::new() };
    // A sidecar's outbound and inbound sides both take ADDs (istiod's
    // InsertedClusters and ApplyListenerPatches for each side).
    let added = match class.node_type {
        NodeType::Router => applied.added(to, Context::Gateway),
        _ => {
            let mut both = applied.added(to, Context::SidecarOutbound);
            both.extend(applied.added(to, Context::SidecarInbound));
            both
        }
    };
    added
        .into_iter()
        .map(|c| {
            let name = c.get_field_by_name("name").and_then(|v| v.as_str().map(Arc::from)).unwrap_or_else(|| "".into());
            (name, c)
        })
        .collect()
}

/// The clusters ADD patches give a proxy of `class`, by name.
pub(crate) fn added_clusters(m: &MeshInput, class: &ProxyClass) -> Vec<(Arc<str>, prost_reflect::DynamicMessage)> {
    added_of(m, class, ApplyTo::Cluster)
}

/// The listeners ADD patches give a proxy of `class`, by name.
pub(crate) fn added_listeners(m: &MeshInput, class: &ProxyClass) -> Vec<(Arc<str>, prost_reflect::DynamicMessage)> {
    added_of(m, class, ApplyTo::Listener)
}

/// The port a listener's name carries (`0.0.0.0_80`; the virtual ones').
fn listener_port(name: &str) -> Option<u32> {
    match name {
        crate::translate::inbound::VIRTUAL_INBOUND => Some(15006),
        "virtualOutbound" => Some(15001),
        _ => name.rsplit('_').next()?.parse().ok(),
    }
}

/// A gateway's port map (istiod's `GatewayPortMap`): each listener port
/// (a server's port resolved to the Service's target port) to the
/// servers' own ports, for `routeConfiguration.portNumber`.
fn port_map(model: &crate::model::Model, class: &ProxyClass) -> routes::PortMap {
    let mut out = routes::PortMap::new();
    if class.node_type != NodeType::Router {
        return out;
    }
    for (sp, servers) in &super::router::merged(model, class).servers {
        let numbers = servers.iter().filter_map(|s| s.server.port.as_ref().map(|p| p.number));
        out.entry(sp.number).or_default().extend(numbers);
    }
    out
}

/// What patches do to one resource, decided without building it.
enum Effect {
    /// Nothing: the base resource as it is.
    None,
    /// Removed.
    Removed,
    /// Possibly changed.
    Touched,
}

fn effect(m: &MeshInput, applied: &Applied, class: &ProxyClass, kind: Kind, name: &str) -> Effect {
    let ctx = context(class, kind, name);
    match kind {
        Kind::Cluster => {
            let hosts = hosts(m, class, name);
            let hosts: Vec<&str> = hosts.iter().map(|h| &**h).collect();
            if clusters::removed(applied, ctx, name, &hosts) {
                Effect::Removed
            } else if clusters::touched(applied, ctx, name, &hosts) {
                Effect::Touched
            } else {
                Effect::None
            }
        }
        Kind::Listener => {
            let port = listener_port(name);
            let inline_routes = ctx == Context::SidecarInbound
                && [ApplyTo::RouteConfiguration, ApplyTo::VirtualHost, ApplyTo::HttpRoute]
                    .iter()
                    .any(|t| applied.of(*t).iter().any(|p| p.in_context(ctx)));
            if listeners::removed(applied, ctx, name, port) {
                Effect::Removed
            } else if inline_routes || listeners::touched(applied, ctx, name, port) {
                Effect::Touched
            } else {
                Effect::None
            }
        }
        Kind::Route if routes::touched(applied, ctx, name, &port_map(&m.model, class)) => Effect::Touched,
        _ => Effect::None,
    }
}

fn added(m: &MeshInput, class: &ProxyClass, kind: Kind) -> Vec<(Arc<str>, prost_reflect::DynamicMessage)> {
    match kind {
        Kind::Cluster => added_clusters(m, class),
        Kind::Listener => added_listeners(m, class),
        _ => Vec::new(),
    }
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
    let Some(m) = mesh(snap).filter(|_| matches!(kind, Kind::Cluster | Kind::Listener | Kind::Route)) else {
        return base(snap, class, kind, name);
    };
    let Some(applied) = applied(m, class) else { return base(snap, class, kind, name) };
    let added_here = || added(m, class, kind).iter().any(|(n, _)| &**n == name);
    match (effect(m, &applied, class, kind, name), base(snap, class, kind, name)) {
        // A REMOVE drops the built resource; an ADD of the same name is
        // still served (istiod appends ADDs after patching).
        (Effect::Removed, _) => added_here().then(|| mix(("added", applied.digest))),
        (Effect::Touched, Some(g)) => Some(mix((g, applied.digest))),
        (Effect::None, Some(g)) => Some(g),
        // An added resource (the first ADD of a name wins where two add it).
        (_, None) => added_here().then(|| mix(("added", applied.digest))),
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
    let Some(m) = mesh(snap).filter(|_| matches!(kind, Kind::Cluster | Kind::Listener | Kind::Route)) else {
        return base(snap, class, kind, name);
    };
    let Some(applied) = applied(m, class) else { return base(snap, class, kind, name) };
    let effect = effect(m, &applied, class, kind, name);
    if matches!(effect, Effect::Removed) || base_generation(snap, class, kind, name).is_none() {
        let (_, c) = added(m, class, kind).into_iter().find(|(n, _)| &**n == name)?;
        return Some(Bytes::from(c.encode_to_vec()));
    }
    let bytes = base(snap, class, kind, name)?;
    if !matches!(effect, Effect::Touched) {
        return Some(bytes);
    }
    let ctx = context(class, kind, name);
    let type_name = match kind {
        Kind::Cluster => "envoy.config.cluster.v3.Cluster",
        Kind::Listener => "envoy.config.listener.v3.Listener",
        _ => "envoy.config.route.v3.RouteConfiguration",
    };
    let desc = istiod_envoyfilter::schema::message(type_name)?;
    let resource = match istiod_envoyfilter::schema::decode(desc, &bytes) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(target: "ads", name, "cannot patch: {e}");
            return Some(bytes);
        }
    };
    let mut outcomes = Vec::new();
    let patched = match kind {
        Kind::Cluster => {
            let hosts = hosts(m, class, name);
            let hosts: Vec<&str> = hosts.iter().map(|h| &**h).collect();
            clusters::apply(&applied, ctx, resource, &hosts, &mut outcomes)
        }
        Kind::Listener => {
            let mut l = resource;
            if ctx == Context::SidecarInbound {
                listeners::patch_inline_routes(&applied, ctx, &mut l, &mut outcomes);
            }
            listeners::apply(&applied, ctx, l, &mut outcomes)
        }
        _ => Some(routes::apply(&applied, ctx, resource, &port_map(&m.model, class), &mut outcomes)),
    };
    istiod_envoyfilter::status::record(&outcomes);
    patched.map(|c| Bytes::from(c.encode_to_vec()))
}
