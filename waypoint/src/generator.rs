//! The generator the server runs: the mesh's, with waypoint proxies
//! served their own resources ([`crate::View`]).
//!
//! A waypoint's resources are per class (its namespace and labels, which
//! name its Gateway). Each one's input generation is a digest of what it
//! reads: the waypoint's bound services, those services' clusters and
//! VirtualServices (and, for a load assignment, its endpoints), so a
//! change to one service's routes changes the generation of only the
//! waypoints that serve it.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use istiod_mesh::generator::{MeshGenerator, MeshInput, patches};
use istiod_mesh::node::{NodeType, ProxyClass};
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::prost::Message;
use istiod_xds_api::node::Classified;
use istiod_xds_api::snapshot::{Aliases, Generator, Kind, Snapshot, UnknownType};

use crate::{CONNECT_ORIGINATE, View, hbone};

/// A sidecar's or gateway's names, with `connect_originate` where it sends
/// HBONE (a class name: the shared ones are every proxy's).
fn with_originate(class: &ProxyClass, kind: Kind, mut names: Vec<Arc<str>>) -> Vec<Arc<str>> {
    if hbone::sends(class)
        && matches!(kind, Kind::Cluster | Kind::Listener)
        && !names.iter().any(|n| &**n == CONNECT_ORIGINATE)
    {
        names.push(Arc::from(CONNECT_ORIGINATE));
    }
    names
}

/// [`MeshGenerator::input_generation`], and what the HBONE rewrite reads.
fn hbone_generation(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    "hbone".hash(&mut h);
    match (kind, name) {
        (Kind::Cluster | Kind::Listener, CONNECT_ORIGINATE) => {
            let mesh = snap.mesh.as_deref()?;
            (kind as u8, format!("{:?}", mesh.model.mesh.connect_timeout)).hash(&mut h);
        }
        (Kind::Endpoint, _) => {
            MeshGenerator.input_generation(snap, class, kind, name)?.hash(&mut h);
            hbone::tunnels_digest(snap.mesh.as_deref()?, name).hash(&mut h);
            if class.node_type == NodeType::Router {
                hbone::ingress_digest(snap.mesh.as_deref()?, name).hash(&mut h);
            }
        }
        _ => MeshGenerator.input_generation(snap, class, kind, name)?.hash(&mut h),
    }
    Some(h.finish())
}

/// [`MeshGenerator::generate`], rewritten to send HBONE ([`hbone`]).
fn hbone_body(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<Bytes> {
    let mesh = snap.mesh.as_deref()?;
    match (kind, name) {
        (Kind::Cluster, CONNECT_ORIGINATE) => Some(Bytes::from(hbone::originate_cluster(mesh).encode_to_vec())),
        (Kind::Listener, CONNECT_ORIGINATE) => Some(Bytes::from(crate::connect_originate().encode_to_vec())),
        (Kind::Cluster, _) => hbone::cluster(&MeshGenerator.generate(snap, class, kind, name)?),
        (Kind::Endpoint, _) => {
            let base = MeshGenerator.generate(snap, class, kind, name)?;
            // A gateway sends a service's traffic to its waypoint where the
            // service says so (istio.io/ingress-use-waypoint).
            let ingress = (class.node_type == NodeType::Router).then(|| hbone::ingress_endpoints(mesh, name)).flatten();
            ingress.or_else(|| hbone::endpoints(mesh, name, &base))
        }
        _ => MeshGenerator.generate(snap, class, kind, name),
    }
}

/// A waypoint's own cluster (not an outbound one, not an EnvoyFilter's).
fn own_cluster(name: &str) -> bool {
    matches!(name, crate::MAIN_INTERNAL | crate::ENCAP | CONNECT_ORIGINATE) || name.starts_with("inbound-vip|")
}

/// [`MeshGenerator`], with waypoints.
#[derive(Debug, Clone, Copy, Default)]
pub struct WithWaypoints;

fn waypoint(class: &ProxyClass) -> bool {
    class.node_type == NodeType::Waypoint
}

fn view<'a>(snap: &'a Snapshot<MeshInput>, class: &'a ProxyClass) -> Option<View<'a>> {
    View::of(snap.mesh.as_deref()?, class)
}

/// The names of `kind` a waypoint of `class` is served (none when it names
/// no Gateway).
pub fn names(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
    let (Some(mesh), Some(v)) = (snap.mesh.as_deref(), view(snap, class)) else { return Vec::new() };
    let names = match kind {
        Kind::Cluster => v.cluster_names(mesh),
        Kind::Listener => v.listener_names(),
        Kind::Endpoint => v.endpoint_names(mesh),
        _ => Vec::new(),
    };
    let mut names: Vec<Arc<str>> = names.into_iter().map(Arc::from).collect();
    // Clusters and listeners EnvoyFilters add (context WAYPOINT or any).
    if matches!(kind, Kind::Cluster | Kind::Listener) {
        for added in patches::added_names(mesh, class, kind) {
            if !names.contains(&added) {
                names.push(added);
            }
        }
    }
    names
}

/// What a waypoint's `(kind, name)` is, encoded.
pub fn body(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<Bytes> {
    let mesh = snap.mesh.as_deref()?;
    let v = View::of(mesh, class)?;
    let bytes = match kind {
        Kind::Cluster => v.cluster(mesh, name)?.encode_to_vec(),
        Kind::Listener => {
            let mut l = v.listener(name)?;
            // TrafficExtensions and WasmPlugins that select the waypoint
            // (by its labels, or by targetRef to its Gateway) go into its
            // service chains as a workload's inbound ones do.
            if name == crate::MAIN_INTERNAL && !mesh.model.extensions.is_empty() {
                use istiod_config::extensions::ListenerClass;
                let exts = &mesh.model.extensions;
                istiod_mesh::translate::extensions::apply(
                    exts,
                    &class.namespace,
                    &class.labels,
                    ListenerClass::SidecarInbound,
                    0,
                    &mut l,
                );
            }
            l.encode_to_vec()
        }
        Kind::Endpoint => v.endpoints(mesh, name)?.encode_to_vec(),
        _ => return None,
    };
    Some(Bytes::from(bytes))
}

/// A digest of what a waypoint's `(kind, name)` reads.
pub fn generation(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<u64> {
    let mesh = snap.mesh.as_deref()?;
    let v = View::of(mesh, class)?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (kind as u8, name, &*class.namespace, &class.labels, v.trust_domain).hash(&mut h);
    format!("{:?}", mesh.model.mesh.connect_timeout).hash(&mut h);
    // An outbound cluster or load assignment: its form for the waypoint's
    // rule, and which endpoints take HBONE.
    if let Some(host) = name.strip_prefix("outbound|").and_then(|r| r.splitn(3, '|').nth(2)) {
        let rule = mesh.model.rule_index_for(v.namespace, v.labels, host);
        let rules = mesh.model.destination_rules();
        rule.map(|i| rules.get(i).id.clone()).hash(&mut h);
        if let Some(forms) = mesh.translation.clusters.get(name) {
            forms.digest(kind).hash(&mut h);
        }
        if kind == Kind::Endpoint {
            hbone::tunnels_digest(mesh, name).hash(&mut h);
        }
        return Some(h.finish());
    }
    // main_internal reads every service of the waypoint (addresses,
    // ports, routes, policies) and the ports of those its routes send to;
    // an inbound-VIP cluster or load assignment its own service; the
    // other listeners and clusters nothing more.
    if kind == Kind::Listener && name == crate::MAIN_INTERNAL {
        let mut policies = std::collections::BTreeMap::new();
        fn key<T>(
            (o, _): (&istiod_config::istio::IstioObject, T),
        ) -> ((&str, &str), &istiod_config::istio::IstioObject) {
            ((o.meta.ns(), o.meta.name.as_str()), o)
        }
        policies.extend(crate::policies(&mesh.model, v.namespace, &v.gateway, None).into_iter().map(key));
        for svc in v.services() {
            (&svc.hostname, &svc.namespace, &svc.vips, svc.mesh_external, svc.kubernetes, &svc.name).hash(&mut h);
            format!("{:?}{:?}", svc.ports, svc.resolution).hash(&mut h);
            for (o, vs) in v.virtual_services_of(svc) {
                (o.meta.ns(), &o.meta.name, format!("{vs:?}")).hash(&mut h);
            }
            // Its DestinationRule (the default route's hash policy).
            if let Some(i) = mesh.model.rule_index_for(v.namespace, v.labels, &svc.hostname) {
                format!("{:?}", mesh.model.destination_rules().get(i).rule).hash(&mut h);
            }
            policies.extend(crate::policies(&mesh.model, v.namespace, &v.gateway, Some(svc)).into_iter().map(key));
        }
        for (k, o) in policies {
            (k, format!("{:?}", o.spec)).hash(&mut h);
        }
        // RequestAuthentications by targetRef, and the key sets istiod-rs
        // fetched for them.
        for svc in v.services() {
            format!("{:?}", crate::jwt_rules(&mesh.model, v.namespace, &v.gateway, Some(svc))).hash(&mut h);
        }
        format!("{:?}", crate::jwt_rules(&mesh.model, v.namespace, &v.gateway, None)).hash(&mut h);
        mesh.model.jwks.hash(&mut h);
        // The mesh config (extension providers for CUSTOM policies, trust
        // domain aliases, tracing and logging defaults).
        format!("{:?}", mesh.model.mesh).hash(&mut h);
        // The extensions that select it.
        mesh.model.extensions.digest_for(&class.namespace, &class.labels).hash(&mut h);
        // Telemetry (stats, access logs, tracing), the services' own.
        format!("{:?}", v.telemetry()).hash(&mut h);
        for svc in v.services() {
            if let std::borrow::Cow::Owned(t) = v.telemetry_for(Some(svc)) {
                format!("{t:?}").hash(&mut h);
            }
        }
        for s in v.outbound_services() {
            (&s.hostname, format!("{:?}", s.ports)).hash(&mut h);
            // Its rule's hash policy on the routes to it.
            if let Some(i) = mesh.model.rule_index_for(v.namespace, v.labels, &s.hostname) {
                format!("{:?}", mesh.model.destination_rules().get(i).rule).hash(&mut h);
            }
        }
        v.workloads.hash(&mut h);
    } else if let Some(svc) =
        name.strip_prefix("inbound-vip|").and_then(|r| r.splitn(3, '|').nth(2)).and_then(|host| v.owns(host))
    {
        (&svc.hostname, &svc.namespace, svc.mesh_external).hash(&mut h);
        format!("{:?}{:?}", svc.ports, svc.resolution).hash(&mut h);
        let rule = mesh.model.rule_index_for(v.namespace, v.labels, &svc.hostname);
        let rules = mesh.model.destination_rules();
        rule.map(|i| rules.get(i).id.clone()).hash(&mut h);
        let subsets = rule.map(|i| rules.get(i).rule.subsets.iter().map(|s| s.name.clone()).collect::<Vec<_>>());
        for p in &svc.ports {
            for sub in std::iter::once(String::new()).chain(subsets.iter().flatten().cloned()) {
                let outbound = format!("outbound|{}|{sub}|{}", p.port, svc.hostname);
                if let Some(forms) = mesh.translation.clusters.get(outbound.as_str()) {
                    (&outbound, forms.digest(kind)).hash(&mut h);
                }
            }
        }
        if kind == Kind::Endpoint {
            for e in &svc.endpoints {
                (&e.address, e.port, e.service_port, e.tunnel).hash(&mut h);
            }
        }
    }
    Some(h.finish())
}

impl Generator for WithWaypoints {
    type Mesh = MeshInput;
    type Class = ProxyClass;

    fn unknown_type(
        &self,
        snap: &Snapshot<MeshInput>,
        class: &ProxyClass,
        type_url: &str,
        names: &[String],
    ) -> UnknownType {
        MeshGenerator.unknown_type(snap, class, type_url, names)
    }

    fn tracks(&self, class: &ProxyClass) -> bool {
        MeshGenerator.tracks(class)
    }

    fn connected(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass) {
        MeshGenerator.connected(snap, class)
    }

    fn classify(&self, node: Option<&Node>, verified: bool) -> Result<Classified<ProxyClass>, String> {
        MeshGenerator.classify(node, verified)
    }

    fn describe(&self, class: &ProxyClass) -> serde_json::Map<String, serde_json::Value> {
        MeshGenerator.describe(class)
    }

    fn class_detail(&self, class: &ProxyClass) -> serde_json::Value {
        MeshGenerator.class_detail(class)
    }

    fn wildcard_names(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        match waypoint(class) {
            true => names(snap, class, kind),
            false => with_originate(class, kind, MeshGenerator.wildcard_names(snap, class, kind)),
        }
    }

    fn shared_wildcard_names(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        match waypoint(class) {
            true => Vec::new(),
            false => MeshGenerator.shared_wildcard_names(snap, class, kind),
        }
    }

    fn class_wildcard_names(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        match waypoint(class) {
            true => names(snap, class, kind),
            false => with_originate(class, kind, MeshGenerator.class_wildcard_names(snap, class, kind)),
        }
    }

    /// A waypoint's are its own; anyone else's are the mesh's, and the
    /// HBONE cluster reads the node type and generator.
    fn own_names_read_whole(&self, class: &ProxyClass, kind: Kind) -> bool {
        !waypoint(class) && MeshGenerator.own_names_read_whole(class, kind)
    }

    fn aliases(&self, snap: &Snapshot<MeshInput>, kind: Kind) -> Option<Aliases> {
        MeshGenerator.aliases(snap, kind)
    }

    fn implicit_names(&self, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        MeshGenerator.implicit_names(class, kind)
    }

    /// A waypoint's resources read its namespace and labels (its Gateway,
    /// the DestinationRules that select it) and nothing else of the proxy.
    fn reduce(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Option<ProxyClass> {
        // ECDS resources are the mesh generator's (their pull secrets read
        // whether the proxy was verified).
        if !waypoint(class) || kind == Kind::ExtensionConfig {
            return MeshGenerator.reduce(snap, class, kind);
        }
        // EnvoyFilters may match the proxy's version and metadata.
        let filters = snap.mesh.as_ref().map(|m| m.model.envoy_filters.clone());
        let keys = filters.as_ref().map(|f| f.metadata_keys()).unwrap_or_default();
        Some(ProxyClass {
            locality: Arc::from(""),
            verified: false,
            service_account: Arc::from(""),
            ips: Vec::new(),
            mesh_id: Arc::from(""),
            cluster_id: Arc::from(""),
            version: match filters.as_ref().is_some_and(|f| f.reads_version()) {
                true => class.version.clone(),
                false => Arc::from(""),
            },
            metadata: class.metadata.iter().filter(|(k, _)| keys.contains(&**k)).cloned().collect(),
            ..class.clone()
        })
    }

    fn reduction_inputs(&self, snap: &Snapshot<MeshInput>) -> Option<u64> {
        // (Covers the EnvoyFilters' version and metadata keys a
        // waypoint's reduction reads.)
        MeshGenerator.reduction_inputs(snap)
    }

    fn reduction_reads_more(&self, class: &ProxyClass, kind: Kind) -> bool {
        match !waypoint(class) || kind == Kind::ExtensionConfig {
            true => MeshGenerator.reduction_reads_more(class, kind),
            false => false,
        }
    }

    fn whole_class(&self, kind: Kind, name: &str) -> bool {
        MeshGenerator.whole_class(kind, name)
    }

    fn reduce_whole(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass) -> Option<ProxyClass> {
        MeshGenerator.reduce_whole(snap, class)
    }

    fn input_generation(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<u64> {
        match waypoint(class) {
            // istiod patches a waypoint's listeners and outbound clusters,
            // not its own clusters.
            true if kind == Kind::ExtensionConfig => MeshGenerator.input_generation(snap, class, kind, name),
            true if kind == Kind::Cluster && own_cluster(name) => generation(snap, class, kind, name),
            true => patches::generation(snap, class, kind, name, generation),
            false if hbone::sends(class) => hbone_generation(snap, class, kind, name),
            false => MeshGenerator.input_generation(snap, class, kind, name),
        }
    }

    fn generate(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<Bytes> {
        match waypoint(class) {
            true if kind == Kind::ExtensionConfig => MeshGenerator.generate(snap, class, kind, name),
            true if kind == Kind::Cluster && own_cluster(name) => body(snap, class, kind, name),
            true => patches::body(snap, class, kind, name, body),
            false if hbone::sends(class) => hbone_body(snap, class, kind, name),
            false => MeshGenerator.generate(snap, class, kind, name),
        }
    }
}
