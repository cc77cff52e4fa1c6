//! The serving cores' generator over the translated mesh: shared
//! resources from the snapshot, per proxy class the `virtualInbound`
//! listener and `inbound|<port>||` clusters, and the per-class filtering of
//! shared resources (Sidecar scope, exportTo, sourceLabels, locality,
//! outbound traffic policy).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::node::{NodeType, Proxy, ProxyClass};
use bytes::Bytes;
use istiod_kubewatch::istio::IstioSpec;
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::prost::Message;
use istiod_xds::ads::node::Classified;
use istiod_xds::ads::{Generator, Kind, Snapshot};

use crate::model::Model;

use crate::translate::Translation;
use crate::translate::cluster::ClusterForm;
use crate::translate::grpc::for_grpc_client;
use crate::translate::inbound::{VIRTUAL_INBOUND, inbound_cluster, inbound_ports, virtual_inbound};
use crate::translate::listener::{VIRTUAL_OUTBOUND, virtual_outbound};
use crate::translate::locality::endpoints_for;

/// What the cores need to generate per-class resources. Cloning is cheap
/// (shared model parts, persistent maps): an endpoint change clones it and
/// replaces one service's parts ([`MeshInput::with_endpoints`]).
#[derive(Debug, Clone)]
pub struct MeshInput {
    /// The model.
    pub model: Arc<Model>,
    /// A fingerprint of every input of inbound generation (services,
    /// selectors, ports, security policy): the input generation of the
    /// per-class resources, and what tells the control thread to mark
    /// them changed.
    pub inbound_generation: u64,
    /// Each service's part of `inbound_generation`.
    inbound_parts: imbl::HashMap<Arc<str>, u64>,
    /// The security policies' part of `inbound_generation`.
    security_hash: u64,
    /// The sum of `inbound_parts` (a sum, so one part is replaced in O(1)).
    inbound_sum: u64,
    /// Which services each proxy may see.
    pub scoping: Arc<crate::translate::scope::Scoping>,
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
    /// What translation made of the model.
    pub translation: Translation,
    /// A fingerprint of the DestinationRules: locality load balancing makes
    /// endpoints depend on them.
    pub routing_generation: u64,
    /// Whether a Sidecar or a DestinationRule selects workloads by label
    /// (then a proxy's scope or rules depend on its labels).
    pub selecting_sidecars: bool,
}

impl MeshInput {
    /// The form of outbound cluster `name` a proxy of `class` gets: the one
    /// of the DestinationRule in force for its namespace (and labels).
    fn cluster_form(&self, class: &ProxyClass, name: &str) -> Option<&ClusterForm> {
        let forms = self.translation.clusters.get(name)?;
        if let [only] = forms.forms.as_slice()
            && only.rule.is_none()
        {
            return Some(only); // no rule names the host: nothing to choose
        }
        let rule = self.model.rule_index_for(&class.namespace, &class.labels, &forms.host);
        let rules = self.model.destination_rules();
        forms.form(rule.map(|i| &*rules.get(i).id))
    }

    /// Whether `(kind, name)` exists for `class`, before scoping: outbound
    /// clusters where their form exists, API listeners for proxyless gRPC
    /// only and every other listener for Envoy only.
    fn exists(&self, class: &ProxyClass, kind: Kind, name: &str) -> bool {
        match kind {
            Kind::Cluster if self.translation.clusters.contains_key(name) => self.cluster_form(class, name).is_some(),
            Kind::Endpoint => self.cluster_form(class, name).is_some_and(|f| f.endpoints.is_some()),
            Kind::Listener => self.translation.api_listeners.contains(name) == is_grpc(class),
            _ => true,
        }
    }

    /// Whether a proxy of `class` is served `(kind, name)`: it exists for
    /// the class and the class's scope lets it see it.
    fn serves(&self, class: &ProxyClass, kind: Kind, name: &str) -> bool {
        self.exists(class, kind, name) && self.scoping.allows(&self.model, class, kind, name)
    }

    /// Whether shared resources may differ between classes at all.
    fn per_class_outbound(&self) -> bool {
        self.scoping.active || self.outbound_overrides
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
        let inbound_parts: imbl::HashMap<Arc<str>, u64> =
            model.services.iter().map(|(h, s)| (h.clone(), inbound_part(s))).collect();
        let security_hash = security_hash(&model);
        let inbound_sum = inbound_parts.values().fold(0u64, |a, b| a.wrapping_add(*b));
        let inbound_generation = mix((security_hash, inbound_sum));
        let scope_generation = scope_generation(&model);
        let scoping = Arc::new(crate::translate::scope::Scoping::new(&model));
        let (source_matching, vs_export) = route_flags(&model);
        let outbound_overrides = outbound_overrides(&model);
        let translation = crate::translate::translate(&model);
        let selecting_sidecars = selecting(&model);
        let routing_generation = routing_generation(&model);
        Self {
            model,
            inbound_generation,
            inbound_parts,
            security_hash,
            inbound_sum,
            scoping,
            scope_generation,
            source_matching,
            outbound_overrides,
            vs_export,
            translation,
            routing_generation,
            selecting_sidecars,
        }
    }
}

/// A fingerprint of what scoping reads: Sidecars, the root namespace, and
/// each service's name, namespace, exportTo and VIPs.
fn scope_generation(model: &Model) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hash_debug(&mut h, &model.sidecars);
    model.mesh.root_namespace.hash(&mut h);
    for s in model.services.values() {
        (&s.hostname, &s.namespace, &s.export_to, &s.vips).hash(&mut h);
    }
    h.finish()
}

/// Whether some Sidecar sets its own `outboundTrafficPolicy`.
fn outbound_overrides(model: &Model) -> bool {
    model.sidecars.iter().any(|o| matches!(&o.spec, IstioSpec::Sidecar(sc) if sc.outbound_traffic_policy.is_some()))
}

/// The security policies' part of the inbound fingerprint: the policies and
/// the key sets fetched for them.
fn security_hash(model: &Model) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hash_debug(&mut h, &model.security);
    model.jwks.hash(&mut h);
    h.finish()
}

impl MeshInput {
    /// The mesh with the JWT key sets istiod fetched replaced: only the
    /// inbound listeners read them (jwt_authn), so only the inbound
    /// fingerprint changes; everything else is shared with `self`.
    pub fn with_jwks(&self, jwks: Arc<crate::translate::authn::FetchedJwks>) -> MeshInput {
        let mut model = (*self.model).clone();
        model.jwks = jwks;
        self.with_security_inputs(model)
    }

    /// `self` with `model`, which differs only in what the security part of
    /// the inbound fingerprint reads (policies, fetched key sets).
    fn with_security_inputs(&self, model: Model) -> MeshInput {
        let mut next = MeshInput { model: Arc::new(model), ..self.clone() };
        next.security_hash = security_hash(&next.model);
        next.inbound_generation = mix((next.security_hash, next.inbound_sum));
        next
    }

    /// The mesh after Sidecars changed in `objs`, and nothing else: they
    /// shape what each proxy sees (scoping) and its outbound fallback, both
    /// applied per class on the cores; the shared translation does not
    /// read them and is kept. A pass over the Istio objects and a new
    /// scoping, not a rebuild.
    pub fn with_sidecars(&self, objs: &istiod_kubewatch::objects::Objects) -> MeshInput {
        let model = Arc::new(self.model.with_sidecars_of(objs));
        MeshInput {
            scope_generation: scope_generation(&model),
            scoping: Arc::new(crate::translate::scope::Scoping::new(&model)),
            outbound_overrides: outbound_overrides(&model),
            selecting_sidecars: selecting(&model),
            model,
            ..self.clone()
        }
    }

    /// The mesh after security policies (PeerAuthentication,
    /// AuthorizationPolicy, RequestAuthentication) changed in `objs`, and
    /// nothing else: only the inbound resources read them, so the shared
    /// translation is kept and only the inbound fingerprint changes.
    /// A pass over the Istio objects, not a rebuild.
    pub fn with_security(&self, objs: &istiod_kubewatch::objects::Objects) -> MeshInput {
        self.with_security_inputs(self.model.with_security_of(objs))
    }

    /// The mesh after the EndpointSlices of the Services `changed`
    /// (namespace, name) changed in `objs`, and nothing else: those
    /// services are rebuilt in the model, their clusters and load
    /// assignments re-translated and their part of the inbound fingerprint
    /// replaced; everything else is shared with `self`. Costs O(changed
    /// services), not O(mesh).
    pub fn with_endpoints(&self, objs: &istiod_kubewatch::objects::Objects, changed: &[(String, String)]) -> MeshInput {
        let (model, hosts) = self.model.with_endpoints_of(objs, changed);
        let model = Arc::new(model);
        let mut next = MeshInput { model: model.clone(), ..self.clone() };
        for host in &hosts {
            next.translation.update_service(&model, host);
            let old = match model.services.get(host) {
                Some(svc) => next.inbound_parts.insert(host.clone(), inbound_part(svc)),
                None => next.inbound_parts.remove(host),
            };
            let new = next.inbound_parts.get(host).copied().unwrap_or(0);
            next.inbound_sum = next.inbound_sum.wrapping_sub(old.unwrap_or(0)).wrapping_add(new);
        }
        next.inbound_generation = mix((next.security_hash, next.inbound_sum));
        next
    }
}

/// Whether some VirtualService route matches on `sourceLabels` or
/// `sourceNamespace`, and whether some VirtualService is not exported
/// everywhere.
fn route_flags(model: &Model) -> (bool, bool) {
    let (mut source, mut export) = (false, false);
    for o in model.routing.iter() {
        if let IstioSpec::VirtualService(vs) = &o.spec {
            source |= vs
                .http
                .iter()
                .flat_map(|r| &r.matches)
                .any(|m| !m.source_labels.is_empty() || !m.source_namespace.is_empty());
            export |= crate::translate::route::vs_export(vs, o.meta.ns()).is_some();
        }
    }
    (source, export)
}

impl MeshInput {
    /// The mesh after the VirtualServices and DestinationRules `changed`
    /// (kind, namespace, name) were added, changed or removed in `objs`,
    /// and nothing else: the routing list is updated in place; the virtual
    /// hosts of every host those VirtualServices name, and the clusters of
    /// every service those DestinationRules name (before and after), are
    /// re-translated; listeners, the other services and the scope are
    /// shared with `self`.
    pub fn with_routing(
        &self,
        objs: &istiod_kubewatch::objects::Objects,
        changed: &[(String, String, String)],
    ) -> MeshInput {
        let named = |o: &istiod_kubewatch::istio::IstioObject| {
            changed.iter().any(|(k, ns, name)| o.kind().name() == k && o.meta.ns() == ns && o.meta.name == *name)
        };
        // (hosts whose virtual hosts change, services whose clusters change)
        let hosts_of = |model: &Model| {
            let (mut routes, mut clusters) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
            for o in model.routing.iter().filter(|o| named(o)) {
                match &o.spec {
                    IstioSpec::VirtualService(vs) => {
                        routes.extend(vs.hosts.iter().map(|h| Arc::<str>::from(model.resolve_host(h, o.meta.ns()))));
                    }
                    IstioSpec::DestinationRule(dr) => match dr.host.strip_prefix('*') {
                        // A wildcard host shapes every service under it.
                        Some(suffix) => {
                            clusters.extend(model.services.keys().filter(|h| h.ends_with(suffix)).cloned());
                        }
                        None => {
                            clusters.insert(Arc::<str>::from(model.resolve_host(&dr.host, o.meta.ns())));
                        }
                    },
                    _ => {}
                }
            }
            (routes, clusters)
        };
        let (mut routes, mut clusters) = hosts_of(&self.model);
        let model = Arc::new(self.model.with_routing_of(objs, changed));
        let (r, c) = hosts_of(&model);
        routes.extend(r);
        clusters.extend(c);
        let mut next = MeshInput { model: model.clone(), ..self.clone() };
        next.translation.update_routes(&model, &routes);
        for host in &clusters {
            next.translation.update_service(&model, host);
        }
        (next.source_matching, next.vs_export) = route_flags(&model);
        if !clusters.is_empty() {
            // Locality load balancing and route hash policies read the
            // rules; so does the choice of rule by workload labels.
            next.routing_generation = routing_generation(&model);
            next.selecting_sidecars = selecting(&model);
        }
        next
    }
}

/// Whether a Sidecar or a DestinationRule selects workloads by label.
fn selecting(model: &Model) -> bool {
    model.sidecars.iter().any(|o| {
        matches!(&o.spec, IstioSpec::Sidecar(sc) if sc.workload_selector.as_ref().is_some_and(|w| !w.labels.is_empty()))
    }) || model.destination_rules().selecting
}

/// A fingerprint of the DestinationRules (what locality load balancing and
/// route hash policies read when rendered per class).
fn routing_generation(model: &Model) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for o in model.routing.iter() {
        if let IstioSpec::DestinationRule(dr) = &o.spec {
            (o.meta.ns(), &o.meta.name).hash(&mut h);
            hash_debug(&mut h, dr);
        }
    }
    h.finish()
}

/// What inbound generation reads of one service: its selector and ports,
/// and the endpoints that tell a workload its port where the Service does
/// not (named target ports): scaling a Service with a numeric target port
/// changes no proxy's inbound side.
fn inbound_part(s: &crate::model::Service) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&s.hostname, &s.namespace, &s.selector).hash(&mut h);
    hash_debug(&mut h, &s.ports);
    for e in &s.endpoints {
        // A numeric target port tells the workload its port: an endpoint
        // that agrees adds nothing. A named one (None) is resolved from
        // the endpoints, so every one of them counts.
        let spec = s.ports.iter().find(|p| p.port == e.service_port).and_then(|p| p.target_port);
        if spec != Some(e.port) {
            (e.service_port, e.port, &e.labels).hash(&mut h);
        }
    }
    h.finish()
}

/// Shared resources from the snapshot, and per sidecar class its
/// `virtualInbound` and `inbound|<port>||` clusters.
#[derive(Debug, Default, Clone, Copy)]
pub struct MeshGenerator;

fn mesh(snap: &Snapshot<MeshInput>) -> Option<&MeshInput> {
    snap.mesh.as_deref()
}

fn is_grpc(class: &ProxyClass) -> bool {
    &*class.generator == "grpc"
}

fn per_class(class: &ProxyClass) -> bool {
    class.node_type == NodeType::Sidecar && !is_grpc(class)
}

fn inbound_name(kind: Kind, name: &str) -> bool {
    (kind == Kind::Listener && name == VIRTUAL_INBOUND) || (kind == Kind::Cluster && name.starts_with("inbound|"))
}

fn mix(parts: impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

impl Generator for MeshGenerator {
    type Mesh = MeshInput;
    type Class = ProxyClass;

    fn classify(&self, node: Option<&Node>) -> Result<Classified<ProxyClass>, String> {
        Proxy::classify(node)
    }

    fn wildcard_names(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        let mut names = self.shared_wildcard_names(snap, class, kind);
        names.extend(self.class_wildcard_names(snap, class, kind));
        names
    }

    fn shared_wildcard_names(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        let mut names = snap.shared_names(kind);
        let Some(m) = mesh(snap) else { return names };
        names.retain(|n| m.serves(class, kind, n));
        names
    }

    fn class_wildcard_names(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
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
    /// type; its labels only where a Sidecar or DestinationRule selects
    /// workloads or a VirtualService matches source labels; its locality
    /// only for endpoints. Proxies that differ in nothing else share them.
    fn reduce(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Option<ProxyClass> {
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

    fn input_generation(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<u64> {
        if inbound_name(kind, name) {
            let m = mesh(snap).filter(|_| per_class(class))?;
            if kind == Kind::Cluster
                && !inbound_ports(&m.model, class).iter().any(|p| format!("inbound|{}||", p.port) == name)
            {
                return None;
            }
            return Some(m.inbound_generation);
        }
        let shared = snap.shared_generation(kind, name)?;
        let Some(m) = mesh(snap) else { return Some(shared) };
        if !m.serves(class, kind, name) {
            return None;
        }
        Some(match kind {
            // Locality load balancing reads the DestinationRules.
            Kind::Endpoint if !class.locality.is_empty() => mix((shared, m.routing_generation)),
            // Rendered per class: the scope decides the virtual hosts and
            // the rules the hash policies.
            Kind::Route => mix((shared, m.scope_generation, m.routing_generation)),
            Kind::Listener if name == VIRTUAL_OUTBOUND && m.per_class_outbound() => mix((shared, m.scope_generation)),
            _ => shared,
        })
    }

    fn generate(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<Bytes> {
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
        let Some(m) = mesh(snap) else { return snap.shared_body(kind, name) };
        if !m.serves(class, kind, name) {
            return None;
        }
        let policy = crate::translate::scope::outbound_policy(&m.model, class);
        match kind {
            Kind::Cluster => match m.cluster_form(class, name) {
                Some(form) if is_grpc(class) => {
                    Some(Bytes::from(for_grpc_client((*form.cluster).clone()).encode_to_vec()))
                }
                Some(form) => Some(form.bytes.clone()),
                None => snap.shared_body(kind, name),
            },
            Kind::Endpoint => {
                let form = m.cluster_form(class, name)?;
                let local = (!class.locality.is_empty()).then(|| endpoints_for(form, &class.locality)).flatten();
                local.or_else(|| form.endpoints.clone())
            }
            Kind::Listener if name == VIRTUAL_OUTBOUND && policy != m.model.mesh.outbound => {
                // The Sidecar overrides the mesh's policy for unknown destinations.
                Some(Bytes::from(virtual_outbound(policy).encode_to_vec()))
            }
            Kind::Listener => snap.shared_body(kind, name),
            Kind::Route => {
                let table = m.translation.routes.get(name)?;
                // (Without scoping every service is visible: skip the lookups.)
                let visible = |svc: &crate::model::Service, port: u16| {
                    !m.scoping.active || crate::translate::scope::visible_on(&m.model, class, svc, Some(port))
                };
                Some(Bytes::from(table.render(&m.model, class, policy, visible).encode_to_vec()))
            }
        }
    }
}

/// Names of every per-class resource a model can produce (what a change of
/// inbound inputs marks as changed).
pub fn all_names(model: &Model) -> Vec<(Kind, Arc<str>)> {
    let mut out = vec![(Kind::Listener, Arc::from(VIRTUAL_INBOUND))];
    let mut ports: Vec<u16> = model
        .services
        .values()
        .flat_map(|s| {
            // A workload's inbound port is its endpoints', else the
            // Service's numeric target port, else the service port.
            let spec = s.ports.iter().flat_map(|p| [Some(p.port), p.target_port]).flatten();
            s.endpoints.iter().map(|e| e.port).chain(spec)
        })
        .collect();
    ports.sort_unstable();
    ports.dedup();
    out.extend(ports.into_iter().map(|p| (Kind::Cluster, Arc::from(format!("inbound|{p}||")))));
    out
}

#[cfg(test)]
mod tests;
