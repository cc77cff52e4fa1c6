//! The serving cores' generator over the translated mesh: shared
//! resources from the snapshot, per proxy class the `virtualInbound`
//! listener and `inbound|<port>||` clusters, and the per-class filtering of
//! shared resources (Sidecar scope, exportTo, sourceLabels, locality,
//! outbound traffic policy).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use istiod_kubewatch::istio::IstioSpec;
use istiod_proto::envoy::config::cluster::v3::Cluster;
use istiod_proto::envoy::config::listener::v3::Listener;
use istiod_proto::envoy::config::route::v3 as route;
use istiod_proto::prost::Message;
use istiod_xds::ads::node::{NodeType, ProxyClass};
use istiod_xds::ads::{Generator, Kind, SimpleGenerator, Snapshot};

use crate::model::Model;

/// The inbound listener's name.
use crate::translate::inbound::{VIRTUAL_INBOUND, inbound_cluster, inbound_ports, virtual_inbound};

/// What the cores need to generate per-class resources.
#[derive(Debug)]
pub struct MeshInput {
    /// The model.
    pub model: Arc<Model>,
    /// A fingerprint of every input of inbound generation (services,
    /// selectors, ports, security policy): the input generation of the
    /// per-class resources, and what tells the control thread to mark
    /// them changed.
    pub inbound_generation: u64,
    /// Which services each proxy may see.
    pub scoping: crate::translate::scope::Scoping,
    /// A fingerprint of the inputs of scoping (Sidecars, exportTo).
    pub scope_generation: u64,
    /// Whether some VirtualService route matches on `sourceLabels` or
    /// `sourceNamespace`, making route configurations per class.
    pub source_matching: bool,
    /// Whether some Sidecar sets its own `outboundTrafficPolicy`, making
    /// `virtualOutbound` and the route configurations' fallback per class.
    pub outbound_overrides: bool,
    /// Whether some VirtualService is not exported everywhere, making its
    /// hosts' routes per namespace.
    pub vs_export: bool,
    /// Hosts whose DestinationRule is exported only to these namespaces.
    pub dr_export: std::collections::HashMap<Arc<str>, Vec<String>>,
    /// A fingerprint of the DestinationRules: locality load balancing makes
    /// endpoints depend on them.
    pub routing_generation: u64,
    /// Whether a Sidecar selects workloads by label (then a proxy's scope
    /// depends on its labels).
    pub selecting_sidecars: bool,
}

impl MeshInput {
    /// The shared resource that stands for `(kind, name)` for `class`:
    /// the same name, the cluster without its DestinationRule where that
    /// rule is not exported to the class's namespace, or `None` for the
    /// subset clusters (and their endpoints) of such a rule.
    fn shared_name<'a>(&self, class: &ProxyClass, kind: Kind, name: &'a str) -> Option<std::borrow::Cow<'a, str>> {
        use std::borrow::Cow;
        if self.dr_export.is_empty() || !matches!(kind, Kind::Cluster | Kind::Endpoint) {
            return Some(Cow::Borrowed(name));
        }
        if name.ends_with(crate::translate::cluster::NO_DR) {
            return None; // never served under its own name
        }
        let Some(rest) = name.strip_prefix("outbound|") else { return Some(Cow::Borrowed(name)) };
        let mut parts = rest.splitn(3, '|');
        let (_, subset, host) = (parts.next(), parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
        let hidden = self.dr_export.get(host).is_some_and(|ns| !ns.iter().any(|n| **n == *class.namespace));
        match (hidden, subset.is_empty(), kind) {
            (false, _, _) => Some(Cow::Borrowed(name)),
            (true, false, _) => None,
            (true, true, Kind::Cluster) => Some(Cow::Owned(format!("{name}{}", crate::translate::cluster::NO_DR))),
            (true, true, _) => Some(Cow::Borrowed(name)),
        }
    }

    /// Whether shared resources may differ between classes at all.
    fn per_class_outbound(&self) -> bool {
        self.scoping.active || self.source_matching || self.outbound_overrides || self.vs_export
    }
}

/// Feeds `v`'s Debug rendering to `h` as it is written, without building
/// the string (the Istio types have floats and do not derive `Hash`).
fn hash_debug(h: &mut impl Hasher, v: &impl std::fmt::Debug) {
    struct W<'a, H>(&'a mut H);
    impl<H: Hasher> std::fmt::Write for W<'_, H> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.write(s.as_bytes());
            Ok(())
        }
    }
    let _ = std::fmt::Write::write_fmt(&mut W(h), format_args!("{v:?}"));
}

impl MeshInput {
    /// Wraps a model.
    pub fn new(model: Arc<Model>) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for s in model.services.values() {
            (&s.hostname, &s.namespace, &s.selector).hash(&mut h);
            hash_debug(&mut h, &s.ports);
            // Endpoints tell a workload its port only where the Service
            // does not (named target ports): scaling a Service with a
            // numeric target port changes no proxy's inbound side.
            for e in &s.endpoints {
                let spec = s.ports.iter().find(|p| p.port == e.service_port).map(|p| p.target_port.unwrap_or(p.port));
                if spec != Some(e.port) {
                    (e.service_port, e.port, &e.labels).hash(&mut h);
                }
            }
        }
        hash_debug(&mut h, &model.security);
        let inbound_generation = h.finish();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        hash_debug(&mut h, &model.sidecars);
        model.mesh.root_namespace.hash(&mut h);
        for s in model.services.values() {
            (&s.hostname, &s.namespace, &s.export_to, &s.vips).hash(&mut h);
        }
        let scope_generation = h.finish();
        let scoping = crate::translate::scope::Scoping::new(&model);
        let source_matching = model.routing.iter().any(|o| match &o.spec {
            IstioSpec::VirtualService(vs) => vs
                .http
                .iter()
                .flat_map(|r| &r.matches)
                .any(|m| !m.source_labels.is_empty() || !m.source_namespace.is_empty()),
            _ => false,
        });
        let outbound_overrides = model
            .sidecars
            .iter()
            .any(|o| matches!(&o.spec, IstioSpec::Sidecar(sc) if sc.outbound_traffic_policy.is_some()));
        let selecting_sidecars = model.sidecars.iter().any(|o| {
            matches!(&o.spec, IstioSpec::Sidecar(sc) if sc.workload_selector.as_ref().is_some_and(|w| !w.labels.is_empty()))
        });
        let vs_export = model.routing.iter().any(|o| match &o.spec {
            IstioSpec::VirtualService(vs) => crate::translate::route::vs_export(vs, o.meta.ns()).is_some(),
            _ => false,
        });
        let dr_export =
            model.services.keys().filter_map(|h| model.destination_rule_export(h).map(|ns| (h.clone(), ns))).collect();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for o in &model.routing {
            if let IstioSpec::DestinationRule(dr) = &o.spec {
                (o.meta.ns(), &o.meta.name).hash(&mut h);
                hash_debug(&mut h, dr);
            }
        }
        let routing_generation = h.finish();
        Self {
            model,
            inbound_generation,
            scoping,
            scope_generation,
            source_matching,
            outbound_overrides,
            vs_export,
            dr_export,
            routing_generation,
            selecting_sidecars,
        }
    }
}

/// Shared resources from the snapshot, and per sidecar class its
/// `virtualInbound` and `inbound|<port>||` clusters.
#[derive(Debug, Default, Clone, Copy)]
pub struct MeshGenerator;

fn mesh(snap: &Snapshot) -> Option<&MeshInput> {
    snap.mesh.as_ref()?.downcast_ref::<MeshInput>()
}

fn per_class(class: &ProxyClass) -> bool {
    class.node_type == NodeType::Sidecar && &*class.generator != "grpc"
}

fn inbound_name(kind: Kind, name: &str) -> bool {
    (kind == Kind::Listener && name == VIRTUAL_INBOUND) || (kind == Kind::Cluster && name.starts_with("inbound|"))
}

impl Generator for MeshGenerator {
    fn wildcard_names(&self, snap: &Snapshot, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        let mut names = self.shared_wildcard_names(snap, class, kind);
        names.extend(self.class_wildcard_names(snap, class, kind));
        names
    }

    fn shared_wildcard_names(&self, snap: &Snapshot, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        let mut names = SimpleGenerator.wildcard_names(snap, class, kind);
        let Some(m) = mesh(snap) else { return names };
        if !m.dr_export.is_empty() {
            names.retain(|n| !n.ends_with(crate::translate::cluster::NO_DR) && m.shared_name(class, kind, n).is_some());
        }
        if m.scoping.active {
            names.retain(|n| m.scoping.allows(&m.model, class, kind, n));
        }
        names
    }

    fn class_wildcard_names(&self, snap: &Snapshot, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        let Some(m) = mesh(snap).filter(|_| per_class(class)) else { return Vec::new() };
        match kind {
            Kind::Listener => vec![VIRTUAL_INBOUND.into()],
            Kind::Cluster => {
                inbound_ports(&m.model, class).iter().map(|p| Arc::from(format!("inbound|{}||", p.port))).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Outbound resources read the class's namespace, generator and node
    /// type; its labels only where a Sidecar selects workloads or a
    /// VirtualService matches source labels; its locality only for
    /// endpoints. Proxies that differ in nothing else share them.
    fn reduce(&self, snap: &Snapshot, class: &ProxyClass, kind: Kind) -> Option<ProxyClass> {
        let m = mesh(snap)?;
        let labels = m.source_matching || m.selecting_sidecars;
        Some(ProxyClass {
            labels: if labels { class.labels.clone() } else { Vec::new() },
            locality: if kind == Kind::Endpoint { class.locality.clone() } else { Arc::from("") },
            ..class.clone()
        })
    }

    fn whole_class(&self, kind: Kind, name: &str) -> bool {
        inbound_name(kind, name)
    }

    fn input_generation(&self, snap: &Snapshot, class: &ProxyClass, kind: Kind, name: &str) -> Option<u64> {
        if inbound_name(kind, name) {
            let m = mesh(snap).filter(|_| per_class(class))?;
            if kind == Kind::Cluster
                && !inbound_ports(&m.model, class).iter().any(|p| format!("inbound|{}||", p.port) == name)
            {
                return None;
            }
            return Some(m.inbound_generation);
        }
        let lookup = match mesh(snap) {
            Some(m) => m.shared_name(class, kind, name)?,
            None => std::borrow::Cow::Borrowed(name),
        };
        let mut shared = SimpleGenerator.input_generation(snap, class, kind, &lookup)?;
        if kind == Kind::Endpoint
            && !class.locality.is_empty()
            && let Some(m) = mesh(snap)
        {
            // Locality load balancing reads the DestinationRules.
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (shared, m.routing_generation).hash(&mut h);
            shared = h.finish();
        }
        let Some(m) = mesh(snap).filter(|m| m.per_class_outbound()) else { return Some(shared) };
        if !m.scoping.allows(&m.model, class, kind, name) {
            return None;
        }
        if kind == Kind::Route || (kind == Kind::Listener && name == "virtualOutbound") {
            // A route configuration filtered per class also depends on the scope.
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (shared, m.scope_generation, m.source_matching).hash(&mut h);
            return Some(h.finish());
        }
        Some(shared)
    }

    fn generate(&self, snap: &Snapshot, class: &ProxyClass, kind: Kind, name: &str) -> Option<Bytes> {
        if inbound_name(kind, name) {
            let m = mesh(snap).filter(|_| per_class(class))?;
            return match kind {
                Kind::Listener => Some(Bytes::from(virtual_inbound(&m.model, class).encode_to_vec())),
                _ => inbound_ports(&m.model, class)
                    .iter()
                    .find(|p| format!("inbound|{}||", p.port) == name)
                    .map(|p| Bytes::from(inbound_cluster(p.port).encode_to_vec())),
            };
        }
        let lookup = match mesh(snap) {
            Some(m) => m.shared_name(class, kind, name)?,
            None => std::borrow::Cow::Borrowed(name),
        };
        let mut shared = SimpleGenerator.generate(snap, class, kind, &lookup)?;
        if kind == Kind::Endpoint
            && !class.locality.is_empty()
            && let Some(m) = mesh(snap)
            && let Some(local) = crate::translate::locality::endpoints_for(&m.model, &class.locality, name, &shared)
        {
            shared = local;
        }
        if kind == Kind::Cluster && &*class.generator == "grpc" {
            let c = crate::translate::grpc::for_grpc_client(Cluster::decode(shared).ok()?);
            shared = Bytes::from(c.encode_to_vec());
        }
        let Some(m) = mesh(snap).filter(|m| m.per_class_outbound()) else { return Some(shared) };
        if !m.scoping.allows(&m.model, class, kind, name) {
            return None;
        }
        let policy = crate::translate::scope::outbound_policy(&m.model, class);
        if kind == Kind::Listener && name == "virtualOutbound" && policy != m.model.mesh.outbound {
            // The Sidecar overrides the mesh's policy for unknown destinations.
            let mut l = Listener::decode(shared).ok()?;
            let catchall = match policy {
                crate::mesh::OutboundPolicy::AllowAny => "PassthroughCluster",
                crate::mesh::OutboundPolicy::RegistryOnly => "BlackHoleCluster",
            };
            for fc in &mut l.filter_chains {
                fc.filters = vec![crate::translate::envoy::tcp_proxy(catchall, catchall)];
            }
            return Some(Bytes::from(l.encode_to_vec()));
        }
        if kind != Kind::Route {
            return Some(shared);
        }
        let mut rc = route::RouteConfiguration::decode(shared).ok()?;
        rc.virtual_hosts.retain(|vh| m.scoping.keeps_virtual_host(&m.model, class, &vh.name));
        if policy != m.model.mesh.outbound
            && let Some(last) = rc.virtual_hosts.last_mut()
            && matches!(last.name.as_str(), "allow_any" | "block_all")
        {
            *last = crate::translate::route::fallback_host(policy == crate::mesh::OutboundPolicy::AllowAny);
        }
        if m.source_matching || m.vs_export {
            for vh in &mut rc.virtual_hosts {
                vh.routes.retain_mut(|r| {
                    let export = crate::translate::route::take_export_match(r, &class.namespace);
                    let source = crate::translate::route::take_source_match(r, &class.namespace, &class.labels);
                    export && source
                });
            }
        }
        Some(Bytes::from(rc.encode_to_vec()))
    }
}

/// Names of every per-class resource a model can produce (what a change of
/// inbound inputs marks as changed).
pub fn all_names(model: &Model) -> Vec<(Kind, Arc<str>)> {
    let mut out = vec![(Kind::Listener, Arc::from(VIRTUAL_INBOUND))];
    let mut ports: Vec<u16> = model
        .services
        .values()
        .flat_map(|s| s.endpoints.iter().map(|e| e.port).chain(s.ports.iter().map(|p| p.port)))
        .collect();
    ports.sort_unstable();
    ports.dedup();
    out.extend(ports.into_iter().map(|p| (Kind::Cluster, Arc::from(format!("inbound|{p}||")))));
    out
}

#[cfg(test)]
mod tests;
