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
use istiod_envoyfilter::filters::{Applied, ApplyTo, Context, Operation, Patch, Proxy};
use istiod_envoyfilter::listener as listeners;
use istiod_envoyfilter::route as routes;
use istiod_xds_api::snapshot::{Kind, Snapshot};
use prost_reflect::DynamicMessage;

use super::{MeshInput, is_grpc, mesh, mix};
use crate::node::{NodeType, ProxyClass};

pub type BaseGeneration = fn(&Snapshot<MeshInput>, &ProxyClass, Kind, &str) -> Option<u64>;
pub type BaseBody = fn(&Snapshot<MeshInput>, &ProxyClass, Kind, &str) -> Option<Bytes>;

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
    match class.node_type {
        NodeType::Router => return Context::Gateway,
        // A waypoint's listeners are its inbound ones (istiod); its own
        // clusters are not patched (istiod-waypoint).
        NodeType::Waypoint if kind == Kind::Listener => return Context::SidecarInbound,
        _ => {}
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
fn hosts_in(model: &crate::model::Model, class: &ProxyClass, name: &str) -> Vec<Arc<str>> {
    match clusters::parse_name(name) {
        Some(("inbound", port, _, _)) => {
            u16::try_from(port).map(|p| crate::translate::inbound::inbound_hosts(model, class, p)).unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// The levels of a route configuration.
const ROUTE_LEVELS: [ApplyTo; 3] = [ApplyTo::RouteConfiguration, ApplyTo::VirtualHost, ApplyTo::HttpRoute];

/// Whether `p` can change what it matches: a listener's or a route
/// configuration's own ADD, REPLACE and the like do nothing to it (istiod
/// ignores them there; a LISTENER ADD adds a listener of its own).
fn changes(p: &Patch) -> bool {
    match p.apply_to {
        ApplyTo::Listener | ApplyTo::RouteConfiguration | ApplyTo::Cluster => {
            p.operation.merges() || p.operation == Operation::Remove
        }
        _ => true,
    }
}

/// What the patches that apply to a proxy do to one of its resources,
/// decided from its name (the resource is built only when one may change
/// it), with what applying them needs.
struct Touch<'a> {
    /// A patch removes it.
    removed: bool,
    /// The patches that may change it, in order.
    patches: Vec<&'a Arc<Patch>>,
    /// Where it is.
    ctx: Context,
    /// An inbound cluster's services.
    hosts: Vec<Arc<str>>,
    /// A gateway's port map (only when a route patch names a port).
    ports: routes::PortMap,
}

fn touch<'a>(
    model: &crate::model::Model,
    applied: &'a Applied,
    class: &ProxyClass,
    kind: Kind,
    name: &'a str,
) -> Touch<'a> {
    let ctx = context(class, kind, name);
    let mut t = Touch { removed: false, patches: Vec::new(), ctx, hosts: Vec::new(), ports: routes::PortMap::new() };
    let route_patches = || ROUTE_LEVELS.into_iter().flat_map(|to| applied.of(to)).filter(move |p| p.in_context(ctx));
    match kind {
        Kind::Cluster => {
            t.hosts = hosts_in(model, class, name);
            let hosts: Vec<&str> = t.hosts.iter().map(|h| &**h).collect();
            t.patches = applied
                .of(ApplyTo::Cluster)
                .iter()
                .filter(|p| p.in_context(ctx) && changes(p) && clusters::matches(name, p.cluster.as_ref(), &hosts))
                .collect();
            t.removed = clusters::removed(applied, ctx, name, &hosts);
        }
        Kind::Listener => {
            let port = listener_port(name);
            t.removed = listeners::removed(applied, ctx, name, port);
            t.patches = listeners::touching(applied, ctx, name, port).filter(|p| changes(p)).collect();
            // Its inline route configurations (istiod patches them as it
            // builds the inbound side).
            if ctx == Context::SidecarInbound {
                t.patches.extend(route_patches().filter(|p| changes(p)));
            }
        }
        Kind::Route => {
            if class.node_type == NodeType::Router
                && route_patches().any(|p| p.route_configuration.as_ref().is_some_and(|m| m.port_number != 0))
            {
                t.ports = port_map(model, class);
            }
            let ports = &t.ports;
            t.patches = route_patches().filter(|p| changes(p) && routes::rc_matches(ctx, name, p, ports)).collect();
        }
        _ => {}
    }
    t
}

/// The EnvoyFilters (`namespace/name`) whose patches may change resource
/// `name` of `kind` served to a proxy of `class`, in the order they apply
/// (`/debug/explain`).
pub fn filters_touching(model: &crate::model::Model, class: &ProxyClass, kind: Kind, name: &str) -> Vec<Arc<str>> {
    let Some(applied) = applied_in(model, class) else { return Vec::new() };
    let mut out: Vec<Arc<str>> = Vec::new();
    for p in touch(model, &applied, class, kind, name).patches {
        if !out.contains(&p.filter) {
            out.push(p.filter.clone());
        }
    }
    out
}

/// The resources of `kind` (clusters, listeners) ADD patches give a
/// proxy of `class`: a sidecar's outbound and inbound sides both take
/// them (istiod's InsertedClusters and ApplyListenerPatches for each
/// side).
fn added<'a>(applied: &'a Applied, class: &ProxyClass, kind: Kind) -> Vec<&'a DynamicMessage> {
    let to = match kind {
        Kind::Cluster => ApplyTo::Cluster,
        Kind::Listener => ApplyTo::Listener,
        _ => return Vec::new(),
    };
    match class.node_type {
        NodeType::Router => applied.added(to, Context::Gateway).collect(),
        // A waypoint's inserted clusters and listeners are the inbound ones.
        NodeType::Waypoint => applied.added(to, Context::SidecarInbound).collect(),
        _ => applied.added(to, Context::SidecarOutbound).chain(applied.added(to, Context::SidecarInbound)).collect(),
    }
}

fn name_of(m: &DynamicMessage) -> Arc<str> {
    m.get_field_by_name("name").and_then(|v| v.as_str().map(Arc::from)).unwrap_or_else(|| "".into())
}

/// The names of the clusters or listeners (`kind`) ADD patches give a
/// proxy of `class`.
pub fn added_names(m: &MeshInput, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
    applied(m, class).map(|a| added(&a, class, kind).into_iter().map(name_of).collect()).unwrap_or_default()
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
    for (sp, servers) in &super::router::merged(model, class).servers {
        let numbers = servers.iter().filter_map(|s| s.server.port.as_ref().map(|p| p.number));
        out.entry(sp.number).or_default().extend(numbers);
    }
    out
}

/// The generation of `name`: the base one, unless a patch removes the
/// resource (none), adds it, or may change it (mixed with the filters').
pub fn generation(
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
    let t = touch(&m.model, &applied, class, kind, name);
    let added_here = || added(&applied, class, kind).into_iter().any(|c| &*name_of(c) == name);
    match (t.removed, base(snap, class, kind, name)) {
        // A REMOVE drops the built resource; an ADD of the same name is
        // still served (istiod appends ADDs after patching).
        (true, _) => added_here().then(|| mix(("added", applied.digest))),
        (false, Some(g)) if t.patches.is_empty() => Some(g),
        (false, Some(g)) => Some(mix((g, applied.digest))),
        // An added resource (the first ADD of a name wins where two add it).
        (false, None) => added_here().then(|| mix(("added", applied.digest))),
    }
}

/// The bytes of `name`: the base ones, patched where a patch applies.
pub fn body(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str, base: BaseBody) -> Option<Bytes> {
    let Some(m) = mesh(snap).filter(|_| matches!(kind, Kind::Cluster | Kind::Listener | Kind::Route)) else {
        return base(snap, class, kind, name);
    };
    let Some(applied) = applied(m, class) else { return base(snap, class, kind, name) };
    let t = touch(&m.model, &applied, class, kind, name);
    let built = if t.removed { None } else { base(snap, class, kind, name) };
    let Some(bytes) = built else {
        let c = added(&applied, class, kind).into_iter().find(|c| &*name_of(c) == name)?;
        return Some(Bytes::from(istiod_envoyfilter::canonical::encode(c)));
    };
    if t.patches.is_empty() {
        return Some(bytes);
    }
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
            let hosts: Vec<&str> = t.hosts.iter().map(|h| &**h).collect();
            clusters::apply(&applied, t.ctx, resource, &hosts, &mut outcomes)
        }
        Kind::Listener => {
            let mut l = resource;
            if t.ctx == Context::SidecarInbound {
                listeners::patch_inline_routes(&applied, t.ctx, &mut l, &mut outcomes);
            }
            listeners::apply(&applied, t.ctx, l, &mut outcomes)
        }
        _ => Some(routes::apply(&applied, t.ctx, resource, &t.ports, &mut outcomes)),
    };
    istiod_envoyfilter::status::record(&outcomes);
    patched.map(|c| Bytes::from(istiod_envoyfilter::canonical::encode(&c)))
}
