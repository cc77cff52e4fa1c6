//! The serving cores' generator over the translated mesh: shared
//! resources from the snapshot, per proxy class the `virtualInbound`
//! listener and `inbound|<port>||` clusters, and the per-class filtering of
//! shared resources (Sidecar scope, exportTo, sourceLabels, locality,
//! outbound traffic policy).

use std::hash::{Hash, Hasher};

pub(crate) mod deps;
pub mod extensions;
pub mod patches;
pub mod router;
pub mod workload_api;
pub use deps::{Changes, Dep};
use router::is_router;
use std::sync::Arc;

use crate::node::{NodeType, Proxy, ProxyClass};
use bytes::Bytes;
use istiod_config::istio::IstioSpec;
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::prost::Message;
use istiod_xds_api::Code;
use istiod_xds_api::node::Classified;
use istiod_xds_api::snapshot::{Aliases, Generator, Kind, Snapshot, UnknownType};

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
    /// When each dependency of the per-class resources last changed
    /// (`deps.rs`): their input generations.
    pub changes: deps::Changes,
    /// What inbound generation reads of each service (a hash of its
    /// selector, ports and the endpoints' ports), to tell which namespaces'
    /// workloads an update of services concerns.
    pub(crate) inbound_parts: imbl::HashMap<Arc<str>, u64>,
    /// Which services each proxy may see.
    pub scoping: Arc<crate::translate::scope::Scoping>,
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
    /// Whether a Sidecar or a DestinationRule selects workloads by label
    /// (then a proxy's scope or rules depend on its labels).
    pub selecting_sidecars: bool,
    /// Addresses that services claim by endpoint rather than by selector
    /// (`crate::translate::inbound::claims`): a class keeps its `ips` only
    /// where one of them is here.
    pub claimed_ips: Arc<std::collections::HashSet<Arc<str>>>,
    /// The services each waypoint (`<ns>/<name>`) serves, as the ambient
    /// index binds them: `(namespace, hostname)`, set by the control
    /// thread (waypoint proxies' resources read it, `istiod-waypoint`).
    pub waypoints: Arc<WaypointServices>,
    /// Services whose gateways' traffic goes through their waypoint
    /// (`istio.io/ingress-use-waypoint`): hostname -> the waypoint's
    /// instances' addresses.
    pub ingress_waypoints: Arc<std::collections::BTreeMap<Arc<str>, Vec<String>>>,
    /// The addresses of the workloads bound to each waypoint (`<ns>/<name>`).
    pub waypoint_workloads: Arc<std::collections::BTreeMap<String, Vec<String>>>,
    /// The services as name tables read them: the sum (xor) of each one's
    /// [`crate::translate::dns::digest`].
    pub dns_digest: u64,
    /// Listeners on allocated addresses, served only to proxies that take
    /// them ([`crate::translate::listener::auto_listeners`]).
    pub auto_listeners: Arc<std::collections::HashSet<Arc<str>>>,
    /// With `PILOT_ENABLE_IP_AUTOALLOCATE` off: istiod's legacy allocation
    /// of the services ([`crate::translate::dns::legacy_allocation`]), for
    /// every name table that takes it.
    pub legacy_allocation: Option<Arc<LegacyAllocation>>,
    /// The dual-stack Services' cluster IPs, by each of them: their
    /// listeners as IPv6 and dual-stack proxies get them
    /// (`translate::family`).
    pub dual_vips: Arc<crate::translate::family::DualVips>,
}

/// Host -> the addresses istiod's legacy allocation gives it.
pub type LegacyAllocation = std::collections::HashMap<Arc<str>, Vec<String>>;

/// The legacy allocation of `model`'s services, when the mesh uses it.
pub(crate) fn legacy_allocation_of(model: &Model) -> Option<Arc<LegacyAllocation>> {
    (!model.mesh.dns.ip_autoallocate)
        .then(|| Arc::new(crate::translate::dns::legacy_allocation(model.services.values().map(Arc::as_ref))))
}

/// Waypoint (`<ns>/<name>`) -> the `(namespace, hostname)` of the services
/// bound to it.
pub type WaypointServices = std::collections::BTreeMap<String, Vec<(String, Arc<str>)>>;

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
            // (A headless service's endpoints are for routers, whose
            // cluster of it is EDS; a sidecar's is original-destination.)
            Kind::Endpoint => self.cluster_form(class, name).is_some_and(|f| {
                f.endpoints.is_some() && (f.cluster.eds_cluster_config.is_some() || is_router(class) || is_grpc(class))
            }),
            Kind::Listener => self.translation.api_listeners.contains(name) == is_grpc(class),
            _ => true,
        }
    }

    /// Whether a proxy of `class` is served `(kind, name)`: it exists for
    /// the class and the class's scope lets it see it.
    fn serves(&self, class: &ProxyClass, kind: Kind, name: &str) -> bool {
        if kind == Kind::Listener && self.auto_listeners.contains(name) && !name_table_asker(self, class).auto_allocated
        {
            return false;
        }
        self.exists(class, kind, name) && self.scoping.allows(&self.model, class, kind, name)
    }

    /// Whether shared resources may differ between classes at all.
    fn per_class_outbound(&self) -> bool {
        self.scoping.active || self.outbound_overrides
    }
}

impl MeshInput {
    /// Wraps a model, as a first update (every dependency changed).
    pub fn new(model: Arc<Model>) -> Self {
        Self::build(model, deps::Changes::first())
    }

    /// Wraps `model`, the next update after `prev`: what changed between
    /// the two models is recorded against its dependency keys.
    pub fn after(prev: &MeshInput, model: Arc<Model>) -> Self {
        let mut next = Self::build(model, prev.changes.next());
        deps::touch_models(&mut next.changes, &prev.model, &next.model, &prev.inbound_parts, &next.inbound_parts);
        next
    }

    fn build(model: Arc<Model>, changes: deps::Changes) -> Self {
        let inbound_parts = model.services.iter().map(|(h, s)| (h.clone(), inbound_part(s))).collect();
        let scoping = Arc::new(crate::translate::scope::Scoping::new(&model));
        let (source_matching, vs_export) = route_flags(&model);
        let outbound_overrides = outbound_overrides(&model);
        let translation = crate::translate::translate(&model);
        let selecting_sidecars = selecting(&model);
        let claimed_ips = Arc::new(crate::translate::inbound::claimed_ips(&model));
        let dns_digest = model.services.values().fold(0, |d, s| d ^ crate::translate::dns::digest(s));
        let auto_listeners = Arc::new(crate::translate::listener::auto_listeners(&model));
        let legacy_allocation = legacy_allocation_of(&model);
        let dual_vips = Arc::new(crate::translate::family::dual_vips(&model));
        Self {
            model,
            changes,
            inbound_parts,
            scoping,
            source_matching,
            outbound_overrides,
            vs_export,
            translation,
            selecting_sidecars,
            claimed_ips,
            dns_digest,
            auto_listeners,
            legacy_allocation,
            dual_vips,
            waypoints: Arc::default(),
            ingress_waypoints: Arc::default(),
            waypoint_workloads: Arc::default(),
        }
    }

    /// The last change of anything a per-class inbound resource reads, in
    /// any namespace (the control thread marks the inbound names when it
    /// moves).
    pub fn inbound_generation(&self) -> u64 {
        let c = &self.changes;
        c.latest(Dep::Security).max(c.latest(Dep::Workloads)).max(self.inbound_services())
    }

    /// The services' part of the inbound inputs: only where Envoy fetches
    /// JWT keys from mesh services, or a tracer's or access log service's
    /// collector may be one (`telemetry::reads_services`), does inbound
    /// read other services.
    fn inbound_services(&self) -> u64 {
        let telemetry = crate::translate::telemetry::reads_services(&self.model);
        match self.model.mesh.jwks_fetch {
            crate::meshconfig::JwksFetch::Istiod if !telemetry => 0,
            _ => self.changes.latest(Dep::Services),
        }
    }

    /// The last change of what scoping reads (Sidecars, services).
    pub fn scope_generation(&self) -> u64 {
        self.changes.latest(Dep::Sidecar).max(self.changes.latest(Dep::Services))
    }

    /// The last change of anything a router's listeners and routes read,
    /// in any namespace.
    pub fn router_generation(&self) -> u64 {
        let c = &self.changes;
        mix((
            c.latest(Dep::Gateway),
            c.latest(Dep::Services),
            c.latest(Dep::DestinationRule),
            c.latest(Dep::Workloads),
            c.latest(Dep::Security),
        ))
    }

    /// The last change of a DestinationRule.
    pub fn routing_generation(&self) -> u64 {
        self.changes.latest(Dep::DestinationRule)
    }

    /// The input generation of a proxy of `class`'s inbound resources: the
    /// security policies of its namespace (and the root's), the Services
    /// of its namespace, and where Envoy fetches JWT keys from mesh
    /// services, the services.
    fn inbound_input(&self, class: &ProxyClass) -> u64 {
        let (c, ns) = (&self.changes, &*class.namespace);
        // (Sidecars: their `ingress` listeners replace the services' ports.)
        mix((c.at(Dep::Security, ns), c.at(Dep::Workloads, ns), c.at(Dep::Sidecar, ns), self.inbound_services()))
    }

    /// The input generation of what scoping gives a proxy of `class`: the
    /// Sidecars of its namespace (and the root's) and the services.
    fn scope_input(&self, class: &ProxyClass) -> u64 {
        mix((self.sidecar_input(class), self.changes.latest(Dep::Services)))
    }

    /// What decides the Sidecar in force for `class` (its outbound policy).
    fn sidecar_input(&self, class: &ProxyClass) -> u64 {
        self.changes.at(Dep::Sidecar, &class.namespace)
    }
}

/// Whether some Sidecar sets its own `outboundTrafficPolicy`.
pub(crate) fn outbound_overrides(model: &Model) -> bool {
    model.sidecars.iter().any(|o| matches!(&o.spec, IstioSpec::Sidecar(sc) if sc.outbound_traffic_policy.is_some()))
}

/// Whether some VirtualService route matches on `sourceLabels` or
/// `sourceNamespace`, and whether some VirtualService is not exported
/// everywhere.
pub(crate) fn route_flags(model: &Model) -> (bool, bool) {
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

/// Whether a Sidecar or a DestinationRule selects workloads by label.
pub(crate) fn selecting(model: &Model) -> bool {
    model.sidecars.iter().any(|o| {
        matches!(&o.spec, IstioSpec::Sidecar(sc) if sc.workload_selector.as_ref().is_some_and(|w| !w.labels.is_empty()))
    }) || model.destination_rules().selecting
}

/// What inbound generation reads of one service: its selector and ports,
/// and the endpoints that tell a workload its port where the Service does
/// not (named target ports): scaling a Service with a numeric target port
/// changes no proxy's inbound side.
pub(crate) fn inbound_part(s: &crate::model::Service) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&s.hostname, &s.namespace, &s.selector, &s.ports).hash(&mut h);
    if s.selector.is_empty() {
        // Its endpoints' addresses say whose it is.
        for e in &s.endpoints {
            (&e.address, e.service_port, e.port).hash(&mut h);
        }
    }
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

thread_local! {
    /// Per core: whether some Kubernetes Service of a namespace selects a
    /// label set, for the snapshot version it was answered in. A connect
    /// storm of a deployment's pods asks once, not once per pod
    /// (`missing_service_targets` walks every service).
    static SELECTED: std::cell::RefCell<(u64, std::collections::HashMap<u64, bool>)> =
        std::cell::RefCell::new((0, std::collections::HashMap::new()));
}

/// [`crate::translate::inbound::missing_service_targets`] at a proxy's connection, on a serving
/// core: a proxy that no service claims by address (`claimed_ips`, the
/// rare case, answered in full) is answered from a per-core cache of
/// (namespace, labels) for the snapshot `version`.
pub fn missing_service_targets_cached(version: u64, m: &MeshInput, class: &ProxyClass) -> Option<&'static str> {
    if class.ips.iter().any(|ip| m.claimed_ips.contains(ip)) {
        return crate::translate::inbound::missing_service_targets(&m.model, class);
    }
    let key = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&class.namespace, &class.labels, &class.cluster_id, class.ips.is_empty()).hash(&mut h);
        crate::translate::inbound::vm_proxy(class).hash(&mut h);
        h.finish()
    };
    SELECTED.with(|cell| {
        let mut cache = cell.borrow_mut();
        if cache.0 != version || cache.1.len() >= 4096 {
            *cache = (version, std::collections::HashMap::new());
        }
        if let Some(missing) = cache.1.get(&key) {
            return missing.then(|| crate::translate::inbound::reason(class));
        }
        let answer = crate::translate::inbound::missing_service_targets(&m.model, class);
        cache.1.insert(key, answer.is_some());
        answer
    })
}

fn mesh(snap: &Snapshot<MeshInput>) -> Option<&MeshInput> {
    snap.mesh.as_deref()
}

/// istiod's debug type over xDS (`pilot/pkg/xds/v3/model.go` DebugType):
/// one resource named as a debug path (`syncz`, `config_dump?proxyID=...`),
/// answered with that path's HTTP body.
pub const DEBUG_TYPE: &str = "istio.io/debug";
/// The status generator's types (`statusgen.go`): `syncz` and `config_dump`.
pub const DEBUG_PREFIX: &str = "istio.io/debug/";

/// istio-agent's health reports (`model.HealthInfoType`).
pub const HEALTH_INFORMATION: &str = "type.googleapis.com/istio.v1.HealthInformation";

/// Debug paths a caller outside the root namespace may ask for
/// (`debuggen.go` activeNamespaceDebuggers).
pub const NAMESPACE_DEBUGGERS: &[&str] = &["config_dump", "ndsz", "edsz"];

/// istiod's checks before a debug request over xDS is answered: with
/// `ENABLE_DEBUG_ENDPOINT_AUTH` the caller must be authenticated
/// (`statusgen.go` handleInternalRequest; the debug generator always asks
/// it, `validateProxyAuthentication`), `istio.io/debug` takes exactly one
/// name, and a caller outside the root namespace only the paths of
/// [`NAMESPACE_DEBUGGERS`] (`parseAndValidateDebugRequest`). Status types
/// other than syncz and config_dump are answered with nothing.
fn debug_access(
    mesh: Option<&crate::meshconfig::MeshSettings>,
    class: &ProxyClass,
    type_url: &str,
    names: &[String],
) -> UnknownType {
    let auth = mesh.is_none_or(|m| m.debug_endpoint_auth);
    let root = mesh.map_or("istio-system", |m| m.root_namespace.as_str());
    // The caller's namespace limits what it sees: a node that names none
    // (the identity check passes it) sees nothing.
    if class.verified && class.namespace.is_empty() {
        return UnknownType::Refuse(Code::PermissionDenied, "the debug caller's node names no namespace".into());
    }
    if type_url == DEBUG_TYPE {
        if !class.verified {
            return UnknownType::Refuse(Code::Unauthenticated, "authentication required".into());
        }
        let [name] = names else {
            return UnknownType::Refuse(Code::InvalidArgument, "exactly one debug request is required".into());
        };
        let path = name.split('?').next().unwrap_or("");
        if &*class.namespace != root && !NAMESPACE_DEBUGGERS.contains(&path) {
            return UnknownType::Refuse(
                Code::PermissionDenied,
                format!("the debug info is not available for current identity: {:?}", &*class.namespace),
            );
        }
        return UnknownType::Forward;
    }
    if auth && !class.verified {
        return UnknownType::Refuse(Code::Unauthenticated, "authentication required".into());
    }
    match &type_url[DEBUG_PREFIX.len()..] {
        "syncz" | "config_dump" => UnknownType::Forward,
        _ => UnknownType::Empty,
    }
}

/// For a ztunnel, or a kind of the workload API: whether `class` is
/// served `kind` (a ztunnel gets the workload API, as the snapshot's
/// shared resources `istiod-ambient` builds, and nothing else; no other
/// proxy gets it). `None`: neither, the sidecar and gateway generators'.
fn ambient(class: &ProxyClass, kind: Kind) -> Option<bool> {
    let workload_api = matches!(kind, Kind::Address | Kind::Authorization);
    let ztunnel = class.node_type == NodeType::Ztunnel;
    (workload_api || ztunnel).then_some(workload_api && ztunnel)
}

/// The one class the workload API's resources are cached under.
fn ztunnel_class() -> ProxyClass {
    static CLASS: std::sync::OnceLock<ProxyClass> = std::sync::OnceLock::new();
    CLASS
        .get_or_init(|| ProxyClass {
            node_type: NodeType::Ztunnel,
            namespace: Arc::from(""),
            generator: Arc::from(""),
            labels: Vec::new(),
            locality: Arc::from(""),
            verified: false,
            service_account: Arc::from(""),
            ips: Vec::new(),
            mesh_id: Arc::from(""),
            cluster_id: Arc::from(""),
            version: Arc::from(""),
            metadata: Vec::new(),
        })
        .clone()
}

fn is_grpc(class: &ProxyClass) -> bool {
    &*class.generator == "grpc"
}

fn per_class(class: &ProxyClass) -> bool {
    class.node_type == NodeType::Sidecar && !is_grpc(class)
}

/// Whether a sidecar's listeners read its metadata key `k`: one an
/// EnvoyFilter matches (`keys`), its DNS capture where an address is
/// allocated (an allocated address's listener is served only to a proxy
/// that captures, `MeshInput::serves`), and `HTTP10` where the mesh does
/// not accept HTTP/1.0 itself (its HTTP managers then do).
fn listener_reads(m: &MeshInput, keys: &std::collections::BTreeSet<&str>, k: &str) -> bool {
    keys.contains(k)
        || !m.auto_listeners.is_empty() && matches!(k, "DNS_CAPTURE" | "DNS_AUTO_ALLOCATE")
        || k == "HTTP10" && !m.model.mesh.http10
}

fn inbound_name(kind: Kind, name: &str) -> bool {
    (kind == Kind::Listener && name == VIRTUAL_INBOUND) || (kind == Kind::Cluster && name.starts_with("inbound|"))
}

pub fn mix(parts: impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

impl Generator for MeshGenerator {
    type Mesh = MeshInput;
    type Class = ProxyClass;

    /// istiod's answer to a type this server has no generator for
    /// (pilot/pkg/xds/xdsgen.go `findGenerator`). `istio.io/debug/syncz`
    /// and `istio.io/debug/config_dump` go to the status generator
    /// (`statusgen.go`), `istio.io/debug` to the debug generator
    /// (`debuggen.go`): both are forwarded to the control thread once the
    /// caller passes their checks (see [`debug_access`]). Otherwise
    /// proxyless gRPC's generator sends nothing. A config type
    /// (`group/version/kind`, as `istioctl` and MCP clients ask) goes to the
    /// api generator (pilot/pkg/networking/apigen/apigen.go), which with
    /// `ENABLE_XDS_API_GENERATOR_AUTH` refuses unauthenticated callers and
    /// callers outside the root namespace, and answers the rest with the
    /// config of that type: none here. Protobuf types
    /// (`type.googleapis.com/...`) istiod serves with generators of its own
    /// (istio-agent's NDS and PCDS, health information, ECDS, on every
    /// sidecar's stream): those are ignored, never refused, or every
    /// sidecar with DNS capture would lose its stream.
    fn unknown_type(
        &self,
        snap: &Snapshot<MeshInput>,
        class: &ProxyClass,
        type_url: &str,
        names: &[String],
    ) -> UnknownType {
        if type_url == HEALTH_INFORMATION {
            // istio-agent's health probe results: the application's, and
            // never answered (istiod's `handleWorkloadHealthcheck`).
            return UnknownType::Notify;
        }
        let mesh = snap.mesh.as_ref().map(|m| &*m.model.mesh);
        if type_url == DEBUG_TYPE || type_url.starts_with(DEBUG_PREFIX) {
            return debug_access(mesh, class, type_url, names);
        }
        let config_type = !type_url.starts_with(istiod_proto::type_url::PREFIX) && type_url.split('/').count() == 3;
        if is_grpc(class) || !config_type {
            return UnknownType::Ignore;
        }
        let auth = mesh.is_none_or(|m| m.xds_api_generator_auth);
        let root = mesh.map_or("istio-system", |m| m.root_namespace.as_str());
        if auth && !class.verified {
            UnknownType::Refuse(
                Code::Unauthenticated,
                "the api generator requires an authenticated control-plane identity".into(),
            )
        } else if auth && &*class.namespace != root {
            UnknownType::Refuse(
                Code::PermissionDenied,
                "the api generator is restricted to the control-plane (root) namespace".into(),
            )
        } else {
            UnknownType::Empty
        }
    }

    fn classify(&self, node: Option<&Node>, verified: bool) -> Result<Classified<ProxyClass>, String> {
        Proxy::classify(node, verified)
    }

    /// istiod's `GetProxyServiceTargets` at a proxy's first request:
    /// a proxy with no service counts in
    /// `pilot_k8s_proxies_with_no_service_targets`.
    fn connected(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass) {
        let Some(m) = mesh(snap) else { return };
        if let Some(reason) = missing_service_targets_cached(snap.version, m, class) {
            crate::counters::no_service_targets(reason);
        }
    }

    /// Proxies of a WorkloadGroup (`AUTO_REGISTER_GROUP`) or of a
    /// WorkloadEntry they keep healthy (`WORKLOAD_ENTRY`): the
    /// application registers them and records their health.
    fn tracks(&self, class: &ProxyClass) -> bool {
        class.node_type != NodeType::Ztunnel && crate::translate::inbound::vm_proxy(class)
    }

    /// istiod's `AdsClient.labels` and `locality` (a `core.Locality` as Go's
    /// encoding/json writes it: `region`, `zone`, `sub_zone`, empty ones
    /// left out).
    fn describe(&self, class: &ProxyClass) -> serde_json::Map<String, serde_json::Value> {
        let mut out = serde_json::Map::new();
        if !class.labels.is_empty() {
            let labels: serde_json::Map<String, serde_json::Value> =
                class.labels.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(&**v))).collect();
            out.insert("labels".into(), labels.into());
        }
        if !class.locality.is_empty() {
            let mut parts = class.locality.splitn(3, '/');
            let mut l = serde_json::Map::new();
            for key in ["region", "zone", "sub_zone"] {
                if let Some(v) = parts.next().filter(|v| !v.is_empty()) {
                    l.insert(key.into(), v.into());
                }
            }
            out.insert("locality".into(), l.into());
        }
        out
    }

    fn class_detail(&self, class: &ProxyClass) -> serde_json::Value {
        class.detail()
    }

    fn wildcard_names(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        let mut names = self.shared_wildcard_names(snap, class, kind);
        names.extend(self.class_wildcard_names(snap, class, kind));
        names
    }

    fn shared_wildcard_names(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        if let Some(served) = ambient(class, kind) {
            return if served { snap.shared_names(kind) } else { Vec::new() };
        }
        if is_router(class) && kind == Kind::Listener {
            return Vec::new(); // a router's listeners are its Gateways'
        }
        let mut names = snap.shared_names(kind);
        let Some(m) = mesh(snap) else { return names };
        names.retain(|n| m.serves(class, kind, n));
        if is_router(class) {
            names.retain(|n| !router::router_skips_cluster(n));
            if kind == Kind::Cluster
                && let Some(hosts) = router::needed_hosts(&m.model, class)
            {
                names.retain(|n| router::needs_cluster(&hosts, n));
            }
        }
        names
    }

    /// An on-demand ztunnel's names for the workload API's addresses
    /// ([`workload_api::aliases`]).
    fn aliases(&self, snap: &Snapshot<MeshInput>, kind: Kind) -> Option<Aliases> {
        (kind == Kind::Address).then(|| workload_api::aliases(&snap.model))
    }

    /// An on-demand ztunnel is sent its node's workloads (`NODE_NAME`).
    fn implicit_names(&self, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        if kind != Kind::Address || class.node_type != NodeType::Ztunnel {
            return Vec::new();
        }
        let node = class.metadata.iter().find(|(k, _)| &**k == "NODE_NAME").map(|(_, v)| v);
        node.filter(|n| !n.is_empty()).map(|n| vec![workload_api::node_alias(n)]).unwrap_or_default()
    }

    /// A sidecar's own names (its inbound ports' clusters, virtualInbound,
    /// what EnvoyFilters add) read its namespace, labels, node type and
    /// generator, the addresses a service claims or its Sidecar's ingress
    /// names (then `reduce_whole` keeps the class), what EnvoyFilters
    /// match, and whether it is served allocated addresses' listeners
    /// (which `reduce_whole` keeps). Other types have none of their own.
    fn own_names_read_whole(&self, class: &ProxyClass, kind: Kind) -> bool {
        per_class(class) && matches!(kind, Kind::Cluster | Kind::Listener)
    }

    fn class_wildcard_names(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
        if ambient(class, kind).is_some() {
            return Vec::new();
        }
        let mut names = unpatched_class_names(snap, class, kind);
        // Clusters and listeners EnvoyFilters add (a name already served
        // keeps its own).
        if let (Kind::Cluster | Kind::Listener, Some(m)) = (kind, mesh(snap)) {
            let added = patches::added_names(m, class, kind);
            // The names this proxy is served (another proxy's do not hide
            // an ADD of the same name).
            let shared = if added.is_empty() { Vec::new() } else { self.shared_wildcard_names(snap, class, kind) };
            for name in added {
                if !names.contains(&name) && !shared.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }

    /// Outbound resources read the class's namespace, generator and node
    /// type; its labels only where a Sidecar or DestinationRule selects
    /// workloads or a VirtualService matches source labels; its locality
    /// only for endpoints. Proxies that differ in nothing else share them.
    fn reduce(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Option<ProxyClass> {
        match ambient(class, kind) {
            // The workload API's resources are the same for every ztunnel.
            Some(true) => return Some(ztunnel_class()),
            // None for others, under their own class.
            Some(false) => return None,
            None => {}
        }
        let m = mesh(snap)?;
        if kind == Kind::NameTable {
            // The scope (namespace, and labels where a Sidecar selects),
            // the addresses' families, network and cluster, and whether
            // the proxy takes allocated addresses.
            const KEYS: [&str; 3] = ["NETWORK", "DNS_CAPTURE", "DNS_AUTO_ALLOCATE"];
            return Some(ProxyClass {
                // Only the families of its addresses are read.
                ips: crate::translate::dns::family_markers(&class.ips),
                labels: if m.selecting_sidecars { class.labels.clone() } else { Vec::new() },
                generator: Arc::from(""),
                locality: Arc::from(""),
                verified: false,
                service_account: Arc::from(""),
                mesh_id: Arc::from(""),
                version: Arc::from(""),
                metadata: class.metadata.iter().filter(|(k, _)| KEYS.contains(&&**k)).cloned().collect(),
                ..class.clone()
            });
        }
        // Gateways select routers by label; EnvoyFilters may select, and
        // match versions and metadata.
        let filters = &m.model.envoy_filters;
        let labels = m.source_matching
            || m.selecting_sidecars
            || is_router(class)
            || filters.reads_labels()
            || m.model.extensions.reads_labels();
        let keys = filters.metadata_keys();
        Some(ProxyClass {
            labels: if labels { class.labels.clone() } else { Vec::new() },
            version: if filters.reads_version() { class.version.clone() } else { Arc::from("") },
            // Endpoints are split by the proxy's network once gateways exist.
            metadata: class
                .metadata
                .iter()
                .filter(|(k, _)| {
                    keys.contains(&**k)
                        || kind == Kind::Listener && listener_reads(m, &keys, k)
                        || kind == Kind::Endpoint
                            && m.model.network_gateways.enabled()
                            && crate::translate::network::NODE_KEYS.contains(&&**k)
                })
                .cloned()
                .collect(),
            locality: if kind == Kind::Endpoint { class.locality.clone() } else { Arc::from("") },
            service_account: if kind == Kind::Secret { class.service_account.clone() } else { Arc::from("") },
            // A router's Service may claim it by address (its ports).
            ips: match is_router(class) && class.ips.iter().any(|ip| m.claimed_ips.contains(ip)) {
                true => class.ips.clone(),
                // Listeners and clusters are adapted to the family of its
                // addresses (translate::family).
                false
                    if matches!(kind, Kind::Listener | Kind::Cluster)
                        && crate::translate::family::ip_mode(&class.ips) != crate::translate::family::IpMode::V4 =>
                {
                    crate::translate::dns::family_markers(&class.ips)
                }
                false => Vec::new(),
            },
            // Tracing tags name them: on virtualInbound (built for the
            // whole class) and a gateway's listeners.
            mesh_id: if is_router(class) && kind == Kind::Listener { class.mesh_id.clone() } else { Arc::from("") },
            // ...and a cluster-local host's endpoints are the proxy's
            // cluster's.
            cluster_id: if is_router(class) && kind == Kind::Listener
                || kind == Kind::Endpoint && m.model.remote_clusters
            {
                class.cluster_id.clone()
            } else {
                Arc::from("")
            },
            ..class.clone()
        })
    }

    fn reduction_inputs(&self, snap: &Snapshot<MeshInput>) -> Option<u64> {
        use std::hash::BuildHasher;
        // Keys drawn at start: EnvoyFilter authors write the metadata keys.
        static KEYS: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
        let m = mesh(snap)?;
        let filters = &m.model.envoy_filters;
        // Everything `reduce` reads of the snapshot for a class that is not
        // a router (a router's reads the claimed addresses too).
        let read = (
            m.source_matching,
            m.selecting_sidecars,
            filters.reads_labels(),
            filters.reads_version(),
            filters.metadata_keys(),
            m.model.extensions.reads_labels(),
            m.auto_listeners.is_empty(),
            m.model.mesh.http10,
            m.model.network_gateways.enabled(),
            m.model.remote_clusters,
        );
        Some(KEYS.get_or_init(std::hash::RandomState::new).hash_one(read))
    }

    fn reduction_reads_more(&self, class: &ProxyClass, kind: Kind) -> bool {
        ambient(class, kind).is_none() && is_router(class)
    }

    fn whole_class(&self, kind: Kind, name: &str) -> bool {
        inbound_name(kind, name)
    }

    /// The inbound side reads the proxy's addresses only where a service
    /// claims one of them by endpoint. A sidecar's reads its namespace,
    /// labels, generator, the family of its addresses, and its mesh and
    /// cluster (tracing tags); of the rest only what EnvoyFilters match
    /// (metadata keys, version), `HTTP10`, and (for its own names) its DNS
    /// capture where addresses are allocated: the replicas of a
    /// Deployment, which differ in addresses, names, locality and the like,
    /// share one build.
    fn reduce_whole(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass) -> Option<ProxyClass> {
        let m = mesh(snap)?;
        // A Sidecar ingress `defaultEndpoint: 0.0.0.0:<port>` (or
        // `[::]:<port>`) names the workload's own address too, and an
        // ingress listener without `bind` is named after it.
        let own_address = || {
            crate::translate::scope::sidecar(&m.model, class).is_some_and(|sc| {
                sc.ingress.iter().any(|i| {
                    i.bind.is_empty() || crate::translate::inbound::default_endpoint_is_own(&i.default_endpoint)
                })
            })
        };
        match class.ips.iter().any(|ip| m.claimed_ips.contains(ip)) || own_address() {
            true => None,
            // (virtualInbound and the inbound clusters read the family.)
            false if class.node_type != NodeType::Sidecar => {
                Some(ProxyClass { ips: crate::translate::dns::family_markers(&class.ips), ..class.clone() })
            }
            false => {
                let filters = &m.model.envoy_filters;
                let keys = filters.metadata_keys();
                Some(ProxyClass {
                    ips: crate::translate::dns::family_markers(&class.ips),
                    version: if filters.reads_version() { class.version.clone() } else { Arc::from("") },
                    // (virtualInbound is a listener; the own names read
                    // what every listener does.)
                    metadata: class.metadata.iter().filter(|(k, _)| listener_reads(m, &keys, k)).cloned().collect(),
                    locality: Arc::from(""),
                    service_account: Arc::from(""),
                    verified: false,
                    ..class.clone()
                })
            }
        }
    }

    fn input_generation(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<u64> {
        if let Some(served) = ambient(class, kind) {
            return snap.shared_generation(kind, name).filter(|_| served);
        }
        patches::generation(snap, class, kind, name, extended_generation)
    }

    fn generate(&self, snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<Bytes> {
        if let Some(served) = ambient(class, kind) {
            return snap.shared_body(kind, name).filter(|_| served);
        }
        patches::body(snap, class, kind, name, extended_body)
    }
}

/// What [`MeshGenerator::input_generation`] says before EnvoyFilters, with
/// the extensions.
fn extended_generation(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<u64> {
    extensions::generation(snap, class, kind, name, unpatched_generation)
}

/// The IP family a listener or cluster is adapted to for `class` (see
/// `translate::family`): `None` where the IPv4 proxies' resource is
/// served as it is (IPv4 proxies, resources built for the class itself).
fn family_of(class: &ProxyClass, kind: Kind, name: &str) -> Option<crate::translate::family::IpMode> {
    use crate::translate::family::{IpMode, ip_mode};
    if !matches!(kind, Kind::Listener | Kind::Cluster) || inbound_name(kind, name) || is_grpc(class) {
        return None;
    }
    Some(ip_mode(&class.ips)).filter(|m| *m != IpMode::V4)
}

/// What [`MeshGenerator::input_generation`] says before extensions and
/// EnvoyFilters: the shared resource's, and the family it is adapted to.
fn unpatched_generation(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<u64> {
    let generation = shared_family_generation(snap, class, kind, name)?;
    let generation = if asks_http10(snap, class, kind) { mix((generation, "HTTP10")) } else { generation };
    Some(match (family_of(class, kind, name), mesh(snap)) {
        (Some(mode), Some(m)) => {
            // (A dual-stack Service's other cluster IPs are not in the
            // IPv4 proxies' listener.)
            let vips = crate::translate::family::listener_input(&m.dual_vips, name);
            mix((generation, mode, vips, m.model.mesh.dual_stack, m.model.mesh.dns.dual_stack))
        }
        _ => generation,
    })
}

/// Whether `class`'s listeners are adapted to its `HTTP10` metadata
/// (istiod's `enableHTTP10`, where `PILOT_HTTP10` does not already make
/// every manager accept HTTP/1.0; not proxyless gRPC).
fn asks_http10(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> bool {
    kind == Kind::Listener
        && !is_grpc(class)
        && crate::translate::listener::http10_metadata(class)
        && mesh(snap).is_some_and(|m| !m.model.mesh.http10)
}

/// What [`MeshGenerator::generate`] makes before extensions and
/// EnvoyFilters: the IPv4 proxies' resource, adapted to the class's
/// family.
fn unpatched_body(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<Bytes> {
    let body = shared_family_body(snap, class, kind, name)?;
    // A proxy's HTTP10 metadata: its HTTP managers accept HTTP/1.0.
    let body = match asks_http10(snap, class, kind) {
        true => istiod_proto::envoy::config::listener::v3::Listener::decode(body.clone())
            .ok()
            .and_then(crate::translate::listener::accepting_http10)
            .map_or(body, |l| Bytes::from(l.encode_to_vec())),
        false => body,
    };
    match (family_of(class, kind, name), mesh(snap)) {
        (Some(mode), Some(m)) => {
            let dual = &m.dual_vips;
            Some(crate::translate::family::adapt(
                &m.model,
                dual,
                mode,
                is_router(class),
                name,
                body,
                kind == Kind::Cluster,
            ))
        }
        _ => Some(body),
    }
}

/// What [`MeshGenerator::generate`] makes before EnvoyFilters, with the
/// extensions.
fn extended_body(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<Bytes> {
    extensions::body(snap, class, kind, name, unpatched_body)
}

/// What [`MeshGenerator::class_wildcard_names`] lists before EnvoyFilters.
fn unpatched_class_names(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind) -> Vec<Arc<str>> {
    if kind == Kind::ProxyConfig {
        // One ProxyConfig, unnamed as istiod's PCDS resource, while
        // ISTIO_MULTIROOT_MESH gives a trust bundle.
        let bundle = mesh(snap).and_then(|m| m.model.mesh.trust_bundle.as_ref());
        return bundle.map(|_| vec![Arc::from(PROXY_CONFIG)]).unwrap_or_default();
    }
    if kind == Kind::NameTable {
        // One table, unnamed as istiod's, to whoever asks (the agent asks
        // when it captures DNS).
        return vec![Arc::from(NAME_TABLE)];
    }
    if is_router(class) && kind == Kind::Listener {
        let Some(m) = mesh(snap) else { return Vec::new() };
        return router::listeners(&m.model, class).into_iter().map(|l| Arc::from(l.name)).collect();
    }
    if is_router(class) && kind == Kind::Cluster {
        let Some(m) = mesh(snap).filter(|m| router::auto_passthrough(&m.model, class)) else { return Vec::new() };
        return router::sni_dnat(&m.model, class, None).into_iter().map(|(n, _)| Arc::from(n)).collect();
    }
    let Some(m) = mesh(snap).filter(|_| per_class(class)) else { return Vec::new() };
    match kind {
        Kind::Listener => vec![VIRTUAL_INBOUND.into()],
        Kind::Cluster => {
            inbound_ports(&m.model, class).iter().map(|p| Arc::from(format!("inbound|{}||", p.port))).collect()
        }
        _ => Vec::new(),
    }
}

/// The one ProxyConfig's resource name (PCDS): istiod's has none.
pub const PROXY_CONFIG: &str = "";

/// The one name table's resource name: istiod's has none.
pub const NAME_TABLE: &str = "";

/// What a name table reads of `class` (istiod's `nodeUsesAutoallocatedIPs`:
/// allocation on, or `DNS_AUTO_ALLOCATE`, and `DNS_CAPTURE` or a waypoint).
fn name_table_asker<'a>(m: &MeshInput, class: &'a ProxyClass) -> crate::translate::dns::Asker<'a> {
    let meta = |k: &str| class.metadata.iter().find(|(m, _)| &**m == k).map_or("", |(_, v)| &**v);
    let truthy = |k: &str| istiod_config::istio::networking::parse_bool_true(meta(k));
    let allocation = m.model.mesh.dns.ip_autoallocate || truthy("DNS_AUTO_ALLOCATE");
    crate::translate::dns::Asker {
        ips: &class.ips,
        network: meta("NETWORK"),
        cluster: &class.cluster_id,
        auto_allocated: allocation && (truthy("DNS_CAPTURE") || class.node_type == NodeType::Waypoint),
        legacy: None,
    }
}

/// [`unpatched_generation`] for an IPv4 proxy of the class.
fn shared_family_generation(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<u64> {
    if kind == Kind::ProxyConfig {
        let bundle = mesh(snap).filter(|_| name == PROXY_CONFIG)?.model.mesh.trust_bundle.as_ref()?;
        return Some(mix(("pcds", bundle)));
    }
    if kind == Kind::NameTable {
        let m = mesh(snap).filter(|_| name == NAME_TABLE)?;
        let meta = |k: &str| class.metadata.iter().find(|(m, _)| &**m == k).map(|(_, v)| v);
        return Some(mix((
            "nds",
            m.dns_digest,
            m.scope_input(class),
            crate::translate::dns::family_markers(&class.ips),
            &class.cluster_id,
            meta("NETWORK"),
            name_table_asker(m, class).auto_allocated,
            m.model.mesh.dns,
        )));
    }
    if kind == Kind::Secret {
        return router::secret(&mesh(snap)?.model, class, name).map(|(h, _)| h);
    }
    if is_router(class) {
        let m = mesh(snap)?;
        match kind {
            Kind::Listener => {
                // router::input covers everything a router's listeners
                // read; the build only says whether `name` exists.
                router::listeners(&m.model, class).iter().find(|l| l.name == name)?;
                return Some(router::input(m, class));
            }
            // Every name has an answer (an unknown one is empty).
            Kind::Route => return Some(router::input(m, class)),
            Kind::Cluster if router::router_skips_cluster(name) => return None,
            Kind::Cluster if name.starts_with("outbound_.") => {
                // The copied cluster's bytes: a DNS service's cluster
                // carries its endpoints.
                let c = router::sni_dnat_cluster(m, class, name)?;
                return Some(mix(("sni-dnat", c.encode_to_vec())));
            }
            _ => {}
        }
    }
    if inbound_name(kind, name) {
        let m = mesh(snap).filter(|_| per_class(class))?;
        if kind == Kind::Cluster
            && !inbound_ports(&m.model, class).iter().any(|p| format!("inbound|{}||", p.port) == name)
        {
            return None;
        }
        // An inbound cluster's connection pool follows its service's
        // DestinationRule.
        return Some(match kind {
            Kind::Cluster => mix((m.inbound_input(class), m.routing_generation())),
            _ => m.inbound_input(class),
        });
    }
    let shared = snap.shared_generation(kind, name)?;
    let Some(m) = mesh(snap) else { return Some(shared) };
    if !m.serves(class, kind, name) {
        return None;
    }
    Some(match kind {
        // Locality load balancing reads the DestinationRules.
        Kind::Endpoint if !class.locality.is_empty() => mix((shared, m.routing_generation())),
        // Rendered per class: the scope decides the virtual hosts and
        // the rules the hash policies.
        Kind::Route => mix((shared, m.scope_input(class), m.routing_generation())),
        Kind::Listener if name == VIRTUAL_OUTBOUND && m.per_class_outbound() => mix((shared, m.scope_input(class))),
        // A Sidecar's own outbound policy patches the listeners' fallthrough
        // (and the dynamic forward proxy's filter and cluster): only the
        // Sidecars matter, not the services.
        Kind::Listener if m.outbound_overrides => mix((shared, m.sidecar_input(class))),
        Kind::Cluster if name == crate::translate::dfp::CLUSTER && m.outbound_overrides => {
            mix((shared, m.sidecar_input(class)))
        }
        _ => shared,
    })
}

/// [`unpatched_body`] for an IPv4 proxy of the class.
fn shared_family_body(snap: &Snapshot<MeshInput>, class: &ProxyClass, kind: Kind, name: &str) -> Option<Bytes> {
    if kind == Kind::ProxyConfig {
        // istiod's PcdsGenerator: a ProxyConfig with the trust bundle only.
        let bundle = mesh(snap).filter(|_| name == PROXY_CONFIG)?.model.mesh.trust_bundle.clone()?;
        let pc = istiod_proto::istio::mesh::v1alpha1::ProxyConfig { ca_certificates_pem: bundle };
        return Some(Bytes::from(pc.encode_to_vec()));
    }
    if kind == Kind::NameTable {
        let m = mesh(snap).filter(|_| name == NAME_TABLE)?;
        let model = &m.model;
        let visible = model
            .services
            .values()
            .map(Arc::as_ref)
            .filter(|svc| !m.scoping.active || crate::translate::scope::visible_on(model, class, svc, None));
        let mut asker = name_table_asker(m, class);
        let dns = model.mesh.dns;
        // Without the allocation controller, istiod's legacy allocation.
        if asker.auto_allocated {
            asker.legacy = m.legacy_allocation.as_deref();
        }
        let flags = crate::translate::dns::Flags {
            multicluster_headless: dns.multicluster_headless,
            dual_stack: dns.dual_stack,
        };
        return Some(Bytes::from(crate::translate::dns::name_table(visible, &asker, flags).encode_to_vec()));
    }
    if kind == Kind::Secret {
        let (_, secret) = router::secret(&mesh(snap)?.model, class, name)?;
        return Some(Bytes::from(secret.encode_to_vec()));
    }
    if is_router(class) {
        let m = mesh(snap)?;
        match kind {
            Kind::Listener => {
                let l = router::listeners(&m.model, class).into_iter().find(|l| l.name == name)?;
                return Some(Bytes::from(l.encode_to_vec()));
            }
            Kind::Route => return Some(Bytes::from(router::route(&m.model, class, name).encode_to_vec())),
            Kind::Cluster if router::router_skips_cluster(name) => return None,
            Kind::Cluster if name.starts_with("outbound_.") => {
                return router::sni_dnat_cluster(m, class, name).map(|c| Bytes::from(c.encode_to_vec()));
            }
            _ => {}
        }
    }
    if inbound_name(kind, name) {
        let m = mesh(snap).filter(|_| per_class(class))?;
        return match kind {
            Kind::Listener => Some(Bytes::from(virtual_inbound(&m.model, class).encode_to_vec())),
            _ => inbound_ports(&m.model, class)
                .iter()
                .find(|p| format!("inbound|{}||", p.port) == name)
                .map(|p| Bytes::from(inbound_cluster(&m.model, p, class).encode_to_vec())),
        };
    }
    let Some(m) = mesh(snap) else { return snap.shared_body(kind, name) };
    if !m.serves(class, kind, name) {
        return None;
    }
    let policy = crate::translate::scope::outbound_policy(&m.model, class);
    match kind {
        Kind::Cluster
            if name == crate::translate::dfp::CLUSTER
                && policy != crate::meshconfig::OutboundPolicy::AllowAnyDynamicDns =>
        {
            // A Sidecar's own policy has no dynamic forward proxy.
            None
        }
        Kind::Cluster => match m.cluster_form(class, name) {
            Some(form) if is_grpc(class) => {
                // grpcgen's clusters are EDS, a headless service's too: the
                // router's form where there is one.
                let base = match &form.for_router {
                    Some(b) => istiod_proto::envoy::config::cluster::v3::Cluster::decode(b.clone()).ok()?,
                    None => (*form.cluster).clone(),
                };
                Some(Bytes::from(for_grpc_client(base, form.least_request).encode_to_vec()))
            }
            Some(ClusterForm { for_router: Some(b), .. }) if is_router(class) => Some(b.clone()),
            Some(form) => Some(form.bytes.clone()),
            None => snap.shared_body(kind, name),
        },
        Kind::Endpoint => {
            let form = m.cluster_form(class, name)?;
            if let (Some(split), Some(cla)) = (&form.split, &form.endpoints_typed) {
                let meta = |k: &str| class.metadata.iter().find(|(m, _)| &**m == k).map_or("", |(_, v)| &**v);
                let gateways = &m.model.network_gateways;
                // `--clusterAliases` name a proxy's cluster by another ID.
                let aliases = &m.model.mesh.networks.cluster_aliases;
                let cluster = aliases.get(&*class.cluster_id).map_or(&*class.cluster_id, String::as_str);
                let (network, view) = (meta("NETWORK"), meta("REQUESTED_NETWORK_VIEW"));
                let mut cla = crate::translate::network::split(cla, split, gateways, cluster, network, view);
                if !class.locality.is_empty() {
                    crate::translate::locality::localize(&mut cla, form, &class.locality);
                }
                return Some(Bytes::from(cla.encode_to_vec()));
            }
            let local = (!class.locality.is_empty()).then(|| endpoints_for(form, &class.locality)).flatten();
            local.or_else(|| form.endpoints.clone())
        }
        Kind::Listener if name == VIRTUAL_OUTBOUND && policy != m.model.mesh.outbound => {
            // The Sidecar overrides the mesh's policy for unknown destinations.
            let side = crate::translate::telemetry::outbound(&m.model);
            Some(Bytes::from(virtual_outbound(policy, &m.model.mesh, &side).encode_to_vec()))
        }
        Kind::Listener if policy != m.model.mesh.outbound => {
            // The Sidecar's policy also decides the outbound listeners'
            // fallthrough chain, and whether their HTTP goes through
            // the dynamic forward proxy's filter.
            let body = snap.shared_body(kind, name)?;
            let mut l = istiod_proto::envoy::config::listener::v3::Listener::decode(body.clone()).ok()?;
            let mut changed = false;
            if l.default_filter_chain.as_ref().is_some_and(|c| c.name == "PassthroughFilterChain") {
                let side = crate::translate::telemetry::outbound(&m.model);
                l.default_filter_chain = Some(crate::translate::listener::passthrough_chain(policy, &side));
                changed = true;
            }
            if m.model.mesh.outbound == crate::meshconfig::OutboundPolicy::AllowAnyDynamicDns {
                crate::translate::dfp::strip_from(&mut l);
                changed = true;
            }
            match changed {
                true => Some(Bytes::from(l.encode_to_vec())),
                false => Some(body),
            }
        }
        Kind::Listener | Kind::Secret => snap.shared_body(kind, name),
        Kind::ExtensionConfig | Kind::Address | Kind::Authorization | Kind::NameTable | Kind::ProxyConfig => None,
        Kind::Route => {
            let table = m.translation.routes.get(name)?;
            // (Without scoping every service is visible: skip the lookups.)
            let visible = |svc: &crate::model::Service, port: u16| {
                !m.scoping.active || crate::translate::scope::visible_on(&m.model, class, svc, Some(port))
            };
            let views = |port: u16| crate::translate::scope::virtual_services(&m.model, class, port);
            Some(Bytes::from(table.render(&m.model, class, policy, visible, &views).encode_to_vec()))
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
    // Sidecar `ingress` ports.
    for o in model.sidecars.iter() {
        if let IstioSpec::Sidecar(sc) = &o.spec {
            ports
                .extend(sc.ingress.iter().filter_map(|i| i.port.as_ref()).filter_map(|p| u16::try_from(p.number).ok()));
        }
    }
    ports.sort_unstable();
    ports.dedup();
    out.extend(ports.into_iter().map(|p| (Kind::Cluster, Arc::from(format!("inbound|{p}||")))));
    out
}

#[cfg(test)]
mod tests;
