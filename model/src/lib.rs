//! The mesh model: services with their hostnames, addresses and ports, and
//! their endpoints joined with Pods (labels, service account, mTLS mode)
//! and Nodes (locality). Built from the objects a source read; immutable
//! once built. Translation reads only this.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use istiod_config::istio::{IstioObject, IstioSpec, networking};
use istiod_config::meta::Meta;
use istiod_config::objects::{EndpointSlice, IntOrString, Objects, Pod, Service as KubeService, ServicePort};
use serde::Serialize;

pub mod counters;
pub use istiod_config::credentials;
pub use istiod_config::delegate;
pub mod destination_rules;
pub mod edit;
pub use istiod_config::extensions;
pub use istiod_config::gateway_merge as gateway;
pub use istiod_config::ingress;
pub mod network;
mod parallel;
pub use parallel::{MAX_THREADS, par_map, set_rebuild_threads};
pub mod report;
pub mod telemetry;

/// Application protocol of a port (istiod's `protocol.Instance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Protocol {
    /// HTTP/1.1 (and upgrades).
    #[serde(rename = "HTTP")]
    Http,
    /// HTTP/2 (cleartext).
    #[serde(rename = "HTTP2")]
    Http2,
    /// gRPC.
    #[serde(rename = "GRPC")]
    Grpc,
    /// gRPC-Web.
    #[serde(rename = "GRPC-Web")]
    GrpcWeb,
    /// HTTPS (TLS carrying HTTP).
    #[serde(rename = "HTTPS")]
    Https,
    /// TLS.
    #[serde(rename = "TLS")]
    Tls,
    /// Opaque TCP.
    #[serde(rename = "TCP")]
    Tcp,
    /// MongoDB.
    #[serde(rename = "Mongo")]
    Mongo,
    /// Redis.
    #[serde(rename = "Redis")]
    Redis,
    /// MySQL.
    #[serde(rename = "MySQL")]
    MySql,
    /// UDP (not proxied).
    #[serde(rename = "UDP")]
    Udp,
    /// Unknown: the proxy sniffs it.
    #[serde(rename = "UnsupportedProtocol")]
    Unsupported,
}

impl Protocol {
    /// istiod's `protocol.Parse`: case-insensitive names.
    pub fn parse(s: &str) -> Protocol {
        match s.to_ascii_lowercase().as_str() {
            "http" => Protocol::Http,
            "http2" => Protocol::Http2,
            "grpc" => Protocol::Grpc,
            "grpc-web" => Protocol::GrpcWeb,
            "https" => Protocol::Https,
            "tls" => Protocol::Tls,
            "tcp" => Protocol::Tcp,
            "mongo" => Protocol::Mongo,
            "redis" => Protocol::Redis,
            "mysql" => Protocol::MySql,
            "udp" => Protocol::Udp,
            _ => Protocol::Unsupported,
        }
    }

    /// A Kubernetes port's protocol, by istiod's precedence: `appProtocol`
    /// (with Kubernetes' own `kubernetes.io/h2c`, `kubernetes.io/ws(s)`),
    /// then the port name's prefix before `-` (`http-web`, `grpc`), then
    /// UDP from the L4 protocol; anything else is sniffed.
    pub fn of_port(name: Option<&str>, app_protocol: Option<&str>, l4: Option<&str>) -> Protocol {
        if let Some(ap) = app_protocol {
            let p = match ap {
                "kubernetes.io/h2c" => Protocol::Http2,
                "kubernetes.io/ws" | "kubernetes.io/wss" => Protocol::Http,
                other => Protocol::parse(other),
            };
            if p != Protocol::Unsupported {
                return p;
            }
        }
        if l4.is_some_and(|p| p.eq_ignore_ascii_case("udp")) {
            return Protocol::Udp;
        }
        if let Some(name) = name {
            let prefix = name.split('-').next().unwrap_or(name);
            let p = Protocol::parse(prefix);
            if p != Protocol::Udp {
                return p;
            }
        }
        Protocol::Unsupported
    }

    /// HTTP-family protocols get HTTP listeners and routes.
    pub fn is_http(self) -> bool {
        matches!(self, Protocol::Http | Protocol::Http2 | Protocol::Grpc | Protocol::GrpcWeb)
    }

    /// The HTTP/2 family (istiod's `IsHTTP2`): their clusters speak
    /// HTTP/2 upstream.
    pub fn is_http2(self) -> bool {
        matches!(self, Protocol::Http2 | Protocol::Grpc | Protocol::GrpcWeb)
    }
}

/// How clients find a service's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Resolution {
    /// Endpoints known to the control plane (EDS).
    ClientSideLb,
    /// DNS resolution by the proxy.
    Dns,
    /// DNS, round robin over the first address.
    DnsRoundRobin,
    /// The original destination (headless services, `NONE`).
    Passthrough,
}

/// A service port.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Port {
    /// Name (may be empty for a single-port Service).
    pub name: String,
    /// Service port.
    pub port: u16,
    /// Application protocol.
    pub protocol: Protocol,
    /// The workloads' port when the Service names it by number (or not at
    /// all: then it is `port`); `None` for a named target port, which each
    /// workload resolves (its endpoints say which).
    pub target_port: Option<u16>,
}

/// Endpoint health, from EndpointSlice conditions as istiod's
/// `endpointHealthStatus` reads them (a condition left unset counts as
/// true, `ready` first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Health {
    /// Ready.
    Healthy,
    /// Not ready and not terminating: sent with its health where the
    /// cluster takes unhealthy endpoints (`translate::endpoint`).
    Unhealthy,
    /// Not ready, terminating but still serving: sent (as draining) only
    /// for a service with a persistent-session label, dropped elsewhere.
    Draining,
    /// Not ready, terminating and no longer serving: never sent.
    Terminating,
}

impl Health {
    /// istiod's `HealthStatus` number (`/debug/endpointz`) for an endpoint
    /// of a service that keeps draining endpoints or not (istiod calls a
    /// draining one terminating where the service does not keep them).
    pub fn istiod_number(self, keeps_draining: bool) -> u8 {
        match self {
            Health::Healthy => 1,
            Health::Unhealthy => 2,
            Health::Draining if keeps_draining => 3,
            Health::Draining | Health::Terminating => 4,
        }
    }
}

impl Service {
    /// istiod's `ForcesSupportUnhealthyEndpoints`: its clusters take
    /// unhealthy endpoints whatever their outlier detection says.
    pub fn forces_unhealthy(&self, mesh: &istiod_config::meshconfig::MeshSettings) -> bool {
        mesh.unhealthy.always || self.prefers_near
    }

    /// istiod's `SupportsUnhealthyEndpoints`.
    pub fn supports_unhealthy(&self, mesh: &istiod_config::meshconfig::MeshSettings) -> bool {
        mesh.unhealthy.by_default || self.forces_unhealthy(mesh)
    }

    /// istiod's `SupportsDrainingEndpoints`: labelled with a
    /// persistent-session label.
    pub fn keeps_draining(&self, mesh: &istiod_config::meshconfig::MeshSettings) -> bool {
        mesh.persistent_session_labels
            .iter()
            .any(|l| !l.is_empty() && self.labels.get(l).is_some_and(|v| !v.is_empty()))
    }
}

/// Where a workload runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Locality {
    /// Region.
    pub region: String,
    /// Zone.
    pub zone: String,
    /// Subzone.
    pub subzone: String,
}

/// One endpoint of one service port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    /// IP address.
    pub address: String,
    /// The service port it serves.
    pub service_port: u16,
    /// The port on the endpoint.
    pub port: u16,
    /// Health.
    pub health: Health,
    /// Workload labels.
    pub labels: BTreeMap<String, String>,
    /// Service account (`spiffe://<td>/ns/<ns>/sa/<sa>` is derived later).
    pub service_account: String,
    /// `security.istio.io/tlsMode` (`istio` when the workload has a sidecar).
    pub tls_mode: String,
    /// Locality.
    pub locality: Locality,
    /// The Pod, if known.
    pub pod: Option<String>,
    /// Reached over HBONE (istiod's `TunnelAbility`): an ambient-redirected
    /// Pod or WorkloadEntry, or one labelled `networking.istio.io/tunnel: http`.
    pub tunnel: bool,
    /// Its network (istiod's `Network(ip, labels)`, `model/network.rs`;
    /// empty when none is known).
    pub network: String,
    /// A Pod with a `subdomain`: `<hostname>.<subdomain>`, its name under
    /// a headless Service (istiod's `HostName` and `SubDomain`).
    pub dns_name: Option<Arc<str>>,
    /// Its workload's name and namespace (istiod's `WorkloadName` and
    /// `Namespace`: a Pod's controller, a WorkloadEntry's group or name, a
    /// ServiceEntry's name for its DNS or inline endpoints; empty where no
    /// workload is known), for telemetry.
    pub workload: (Arc<str>, Arc<str>),
    /// Its other addresses: a dual-stack Pod's other IPs, under
    /// `ISTIO_DUAL_STACK`, for a Service with more than one cluster IP
    /// (istiod's `IstioEndpoint.Addresses` after the first).
    pub extra_addresses: Vec<String>,
}

/// Whether a workload with these labels and annotations takes HBONE.
pub fn tunnel(labels: &BTreeMap<String, String>, annotations: &BTreeMap<String, String>) -> bool {
    annotations.get("ambient.istio.io/redirection").is_some_and(|v| v == "enabled")
        || labels.get("networking.istio.io/tunnel").is_some_and(|v| v == "http")
}

/// A service in the mesh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Service {
    /// `name.ns.svc.<domain>` (or a ServiceEntry host).
    pub hostname: Arc<str>,
    /// A Kubernetes Service (not a ServiceEntry): istiod's registry
    /// `Kubernetes`, which some rules read (headless wildcard domains).
    pub kubernetes: bool,
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Addresses (cluster IPs, ServiceEntry addresses).
    pub vips: Vec<String>,
    /// Ports.
    pub ports: Vec<Port>,
    /// Resolution.
    pub resolution: Resolution,
    /// Outside the mesh (ServiceEntry `MESH_EXTERNAL`).
    pub mesh_external: bool,
    /// Namespaces it is exported to (`exportTo`, or a Kubernetes Service's
    /// `networking.istio.io/exportTo` annotation): `*` every namespace, `.`
    /// its own, `~` none; empty means `*`.
    pub export_to: Vec<String>,
    /// Pod labels the service selects (Service `spec.selector`).
    pub selector: BTreeMap<String, String>,
    /// The Service's (or ServiceEntry's) own labels (istiod's
    /// `Attributes.Labels`).
    pub labels: BTreeMap<String, String>,
    /// Endpoints, ordered.
    pub endpoints: Vec<Endpoint>,
    /// A ServiceEntry host without addresses: those istiod's `ipallocate`
    /// controller gave it (its status), when it takes them (istiod's
    /// `ShouldV2AutoAllocateIP`).
    pub auto_addresses: Vec<String>,
    /// A Kubernetes Service that prefers near endpoints (its
    /// `trafficDistribution`, or the `networking.istio.io/traffic-distribution`
    /// annotation): its clusters always take unhealthy endpoints, which
    /// spill-over needs (istiod's `ForcesSupportUnhealthyEndpoints`).
    pub prefers_near: bool,
    /// A DNS ServiceEntry annotated `istio.io/connect-strategy:
    /// RACE_FIRST_TCP_CONNECT` (istiod's `DNSConnectStrategy`): its
    /// clusters are LOGICAL_DNS over both families, racing connections.
    pub race_first_connect: bool,
}

/// Counts istiod reports as gauges, see [`Model::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeshStats {
    /// `pilot_services`.
    pub services: usize,
    /// `pilot_virt_services`.
    pub virtual_services: usize,
}

/// What istiod fetches a key set for: a rule's issuer and `jwksUri` (empty:
/// found through the issuer's OpenID discovery document), istiod's
/// `jwtKey`.
pub type JwksKey = (String, String);

/// Key sets istiod-rs fetched, by [`JwksKey`] (the control thread's
/// resolver fills it; translation only reads it).
pub type FetchedJwks = std::collections::BTreeMap<JwksKey, String>;

/// The model.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Model {
    /// Services by hostname (a persistent map: a model that changes one
    /// service shares the others with its predecessor). Each behind its
    /// own `Arc`: changing one copies the map's node that holds it, and a
    /// node of whole services copied each neighbour's endpoints too (a
    /// third of an EndpointSlice change's model update at 1,000 pods).
    pub services: imbl::OrdMap<Arc<str>, Arc<Service>>,
    /// Namespace labels by name.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// The DNS domain (`cluster.local`).
    pub domain: String,
    /// VirtualServices and DestinationRules, in a stable order
    /// (namespace, name), for translation.
    #[serde(skip)]
    pub routing: imbl::Vector<IstioObject>,
    /// What of the BackendTLSPolicies (whose DestinationRules are in
    /// `routing`) is not applied, and why.
    #[serde(skip)]
    pub backend_tls_problems: Arc<Vec<istiod_config::backend_tls::Problem>>,
    /// PeerAuthentications, AuthorizationPolicies and
    /// RequestAuthentications, same order.
    #[serde(skip)]
    pub security: Arc<Vec<IstioObject>>,
    /// Sidecars, same order.
    #[serde(skip)]
    pub sidecars: Arc<Vec<IstioObject>>,
    /// Telemetries, oldest first (istiod applies them in creation order).
    #[serde(skip)]
    pub telemetries: Arc<Vec<IstioObject>>,
    /// Gateways (networking.istio.io), same order (a router sorts the
    /// ones it takes oldest first).
    #[serde(skip)]
    pub gateways: Arc<Vec<IstioObject>>,
    /// Secrets (gateway credentials) by (namespace, name).
    #[serde(skip)]
    pub secrets: Arc<Secrets>,
    /// The EnvoyFilters, read (their patch values built as their types).
    #[serde(skip)]
    pub envoy_filters: Arc<istiod_envoyfilter::filters::EnvoyFilters>,
    /// TrafficExtensions and WasmPlugins, read.
    #[serde(skip)]
    pub extensions: Arc<extensions::Extensions>,
    /// ConfigMaps by (namespace, name), their CA keys only (SDS
    /// `configmap://` names: a BackendTLSPolicy's CA).
    #[serde(skip)]
    pub config_maps: Arc<Secrets>,
    /// The Kubernetes Gateway API: its ReferenceGrants and what was
    /// refused (its Gateways and routes are in `gateways` and `routing`).
    #[serde(skip)]
    pub gateway_api: Arc<GatewayApi>,
    /// ExternalName Services naming a service of the mesh: the concrete
    /// service's hostname -> the aliases' hostnames (istiod's
    /// `Attributes.Aliases`: a request for an alias reaches the concrete
    /// service's virtual host).
    #[serde(skip)]
    pub aliases: Arc<BTreeMap<Arc<str>, Vec<Arc<str>>>>,
    /// The east-west gateways (`model/network.rs`): with any, endpoints
    /// are served split by network.
    pub network_gateways: Arc<network::NetworkGateways>,
    /// The hosts proxies see only their own cluster's endpoints of.
    #[serde(skip)]
    pub cluster_local: Arc<istiod_config::networks::ClusterLocal>,
    /// Whether remote clusters' registries are merged in (then a
    /// cluster-local host's endpoints are filtered per proxy cluster).
    pub remote_clusters: bool,
    /// The mesh configuration.
    #[serde(skip)]
    pub mesh: Arc<istiod_config::meshconfig::MeshSettings>,
    /// The JWT key sets istiod-rs fetched for RequestAuthentications
    /// (`jwksUri` or OpenID discovery), as the control thread's resolver
    /// last had them.
    #[serde(skip)]
    pub jwks: Arc<crate::FetchedJwks>,
    /// Which gateways' service accounts may read their namespace's
    /// Secrets, as the API server last said (kept across rebuilds).
    #[serde(skip)]
    pub secret_access: Arc<credentials::SecretAccess>,
    /// The DestinationRules by namespace and the first VirtualService of
    /// each host (an index into `routing`), built on first use with the length of
    /// `routing` then: a model whose `routing` grew or shrank since falls
    /// back to a scan. Lookups per service made translation quadratic.
    #[serde(skip)]
    pub routing_index: LazyIndex,
    /// The hostnames of each namespace's services, in `services`' order,
    /// built on first use (`services_in`): a sidecar's inbound side reads
    /// only its namespace's services, and walking all of them was a tenth
    /// of the serving core in a connect storm of `large`. Edits that add,
    /// remove or move a service start it again; one that changes a
    /// service's endpoints keeps it.
    #[serde(skip)]
    pub services_index: ServicesIndex,
}

/// See `Model::services_index`: a cache, equal whether built or not.
#[derive(Debug, Clone, Default)]
pub struct ServicesIndex(Arc<std::sync::OnceLock<(usize, HostsByNamespace)>>);

/// Each namespace's hostnames.
type HostsByNamespace = HashMap<Arc<str>, Vec<Arc<str>>>;

impl PartialEq for ServicesIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A cache, not part of the model's value: equal whether built or not.
/// Models that share their routing objects share it.
#[derive(Debug, Clone, Default)]
pub struct LazyIndex(Arc<std::sync::OnceLock<RoutingIndex>>);

impl PartialEq for LazyIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// See `Model::routing_index`.
#[derive(Debug, Clone, Default)]
struct RoutingIndex {
    len: usize,
    destination_rules: destination_rules::DestinationRules,
    /// The VirtualServices bound to the mesh, in istiod's order.
    mesh_order: Vec<usize>,
    /// Exact host -> the first VirtualService (in that order) naming it.
    virtual_services: std::collections::HashMap<String, usize>,
    /// Wildcard host -> the first VirtualService naming it.
    wildcards: Vec<(String, usize)>,
}

/// Secrets by (namespace, name): their data decoded, and a hash of it (the
/// input generation of what is served from them).
pub type Secrets = BTreeMap<(String, String), Arc<StoredSecret>>;

/// What the model keeps of the Gateway API besides the Istio objects it
/// made.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GatewayApi {
    /// ReferenceGrants.
    pub grants: Vec<istiod_config::gateway_api::GatewayApiObject>,
    /// Listeners, routes and references refused, with istiod's reasons.
    pub problems: Vec<serde_json::Value>,
    /// The status each Gateway API object should have.
    pub statuses: Vec<istiod_config::gateway_convert::ObjectStatus>,
}

/// One Secret as SDS reads it.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredSecret {
    /// `data` and `stringData`, decoded.
    pub data: credentials::SecretData,
    /// `type` (empty for a ConfigMap).
    pub type_: String,
    /// A hash of `data`.
    pub hash: u64,
}

impl std::fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredSecret").field("keys", &self.data.keys().collect::<Vec<_>>()).finish()
    }
}

/// The Secrets of `objs`.
pub fn secrets_of(objs: &Objects) -> Secrets {
    use std::hash::{Hash, Hasher};
    objs.secrets
        .iter()
        .map(|s| {
            let data = s.decoded();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (&data, &s.type_).hash(&mut h);
            let stored = StoredSecret { data, type_: s.type_.clone(), hash: h.finish() };
            ((s.metadata.ns().to_owned(), s.metadata.name.clone()), Arc::new(stored))
        })
        .collect()
}

/// The WasmPlugins and TrafficExtensions of `objs`, read, under `mesh`
/// (its root namespace, `ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY`).
pub fn extensions_of(objs: &Objects, mesh: &istiod_config::meshconfig::MeshSettings) -> extensions::Extensions {
    let mut e = extensions::Extensions::of(objs, &mesh.root_namespace);
    e.no_gateway_selectors = !mesh.features.selector_k8s_gateway_policy;
    e
}

/// The EnvoyFilters of `objs`, read, under `mesh` (its root namespace,
/// `ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY`).
pub fn envoy_filters_of(
    objs: &Objects,
    mesh: &istiod_config::meshconfig::MeshSettings,
) -> istiod_envoyfilter::filters::EnvoyFilters {
    let root = mesh.root_namespace.as_str();
    let filters = objs.istio.iter().filter_map(|o| match &o.spec {
        IstioSpec::Ext(istiod_config::istio::IstioKind::EnvoyFilter, s) => {
            Some((o.meta.ns(), o.meta.name.as_str(), o.meta.creation_timestamp.as_deref().unwrap_or(""), &s.0))
        }
        _ => None,
    });
    // What cannot be read is reported (/debug/config_report, logged once).
    let mut read = istiod_envoyfilter::filters::EnvoyFilters::new(root, filters);
    read.no_gateway_selectors = !mesh.features.selector_k8s_gateway_policy;
    read
}

/// The ConfigMaps of `objs`, held as Secrets are (their values as bytes).
pub fn config_maps_of(objs: &Objects) -> Secrets {
    use std::hash::{Hash, Hasher};
    objs.config_maps
        .iter()
        .map(|c| {
            let data: credentials::SecretData =
                c.data.iter().map(|(k, v)| (k.clone(), v.as_bytes().to_vec())).collect();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            data.hash(&mut h);
            let stored = StoredSecret { data, type_: String::new(), hash: h.finish() };
            ((c.metadata.ns().to_owned(), c.metadata.name.clone()), Arc::new(stored))
        })
        .collect()
}

/// Whether a VirtualService applies to sidecars: bound to `mesh`.
pub fn for_mesh(vs: &networking::VirtualService, ns: &str) -> bool {
    gateway::bound_gateways(&vs.gateways, ns).iter().any(|g| g == "mesh")
}

/// The namespaces a VirtualService is exported to (`.` resolved), or
/// `None` when it is exported everywhere.
pub fn vs_export(vs: &networking::VirtualService, ns: &str) -> Option<Vec<String>> {
    if vs.export_to.is_empty() || vs.export_to.iter().any(|e| e == "*") {
        return None;
    }
    Some(vs.export_to.iter().map(|e| if e == "." { ns.to_owned() } else { e.clone() }).collect())
}

/// The VirtualServices of `routing` bound to the mesh, in istiod's order
/// (`sortConfigByCreationTime`: creation time, name, namespace).
fn mesh_order(routing: &imbl::Vector<IstioObject>) -> Vec<usize> {
    // (Each key borrowed once: cloning three strings per comparison, and
    // indexing the persistent vector, was most of a full rebuild's sort.)
    type Key<'a> = (Option<&'a str>, &'a str, &'a str);
    let mut keyed: Vec<(Key<'_>, usize)> = routing
        .iter()
        .enumerate()
        .filter(|(_, o)| matches!(&o.spec, IstioSpec::VirtualService(vs) if for_mesh(vs, o.meta.ns())))
        .map(|(i, o)| ((o.meta.creation_timestamp.as_deref(), o.meta.name.as_str(), o.meta.ns()), i))
        .collect();
    // (Stable: equal keys keep the objects' order, as before.)
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, i)| i).collect()
}

impl Model {
    fn index(&self) -> Option<&RoutingIndex> {
        let index = self.routing_index.0.get_or_init(|| {
            let mut ix = RoutingIndex {
                len: self.routing.len(),
                destination_rules: destination_rules::DestinationRules::build(self.routing.iter(), |h, ns| {
                    self.resolve_host(h, ns)
                }),
                ..RoutingIndex::default()
            };
            ix.mesh_order = mesh_order(&self.routing);
            for &i in &ix.mesh_order {
                let o = &self.routing[i];
                let IstioSpec::VirtualService(vs) = &o.spec else { continue };
                for h in &vs.hosts {
                    let h = self.resolve_host(h, o.meta.ns());
                    if h.starts_with('*') {
                        if !ix.wildcards.iter().any(|(w, _)| *w == h) {
                            ix.wildcards.push((h, i));
                        }
                    } else {
                        ix.virtual_services.entry(h).or_insert(i);
                    }
                }
            }
            ix
        });
        (index.len == self.routing.len()).then_some(index)
    }

    /// The services of namespace `ns`, in hostname order (the order of
    /// `services`).
    pub fn services_in<'a>(&'a self, ns: &'a str) -> impl Iterator<Item = &'a Arc<Service>> + 'a {
        let (len, by_ns) = self.services_index.0.get_or_init(|| {
            let mut by_ns = HostsByNamespace::new();
            for (host, s) in self.services.iter() {
                match by_ns.get_mut(s.namespace.as_str()) {
                    Some(hosts) => hosts.push(host.clone()),
                    None => {
                        by_ns.insert(Arc::from(s.namespace.as_str()), vec![host.clone()]);
                    }
                }
            }
            (self.services.len(), by_ns)
        });
        // A model whose services were added or removed in place without
        // starting the index again (a test's edit) is walked whole.
        let (indexed, scan) = match *len == self.services.len() {
            true => (by_ns.get(ns).map(Vec::as_slice).unwrap_or_default(), None),
            false => (&[][..], Some(self.services.values().filter(move |s| s.namespace == ns))),
        };
        #[cfg(debug_assertions)]
        if scan.is_none() {
            let want: Vec<&Arc<str>> =
                self.services.values().filter(|s| s.namespace == ns).map(|s| &s.hostname).collect();
            let got: Vec<&Arc<str>> = indexed.iter().collect();
            assert_eq!(got, want, "the services index of {ns} is not the services'");
        }
        indexed.iter().filter_map(|h| self.services.get(h)).chain(scan.into_iter().flatten())
    }

    /// Forgets the indexes, after a test edited `routing` or `services` in
    /// place.
    #[doc(hidden)]
    pub fn reindex(&mut self) {
        self.routing_index = LazyIndex::default();
        self.services_index = ServicesIndex::default();
    }

    /// What istiod reports of a push context as gauges
    /// (`pilot/pkg/model/push_context.go`, `pilot/pkg/xds/ads.go`).
    pub fn stats(&self) -> MeshStats {
        MeshStats {
            services: self.services.len(),
            virtual_services: self.routing.iter().filter(|o| matches!(o.spec, IstioSpec::VirtualService(_))).count(),
        }
    }

    /// The outbound clusters istiod's EDS builder finds no instance for
    /// (`pilot_eds_no_instances`): each port, as `(port, service)`, of a
    /// service whose endpoints the control plane knows (not DNS, not
    /// passthrough) that has none.
    pub fn clusters_without_instances(&self) -> impl Iterator<Item = (u16, &Service)> {
        self.services.values().filter(|s| s.resolution == Resolution::ClientSideLb).flat_map(|s| {
            s.ports
                .iter()
                .filter(|p| !s.endpoints.iter().any(|e| e.service_port == p.port))
                .map(move |p| (p.port, &**s))
        })
    }

    /// The DestinationRules, indexed for [`destination_rules::DestinationRules::select`].
    pub fn destination_rules(&self) -> std::borrow::Cow<'_, destination_rules::DestinationRules> {
        match self.index() {
            Some(ix) => std::borrow::Cow::Borrowed(&ix.destination_rules),
            None => {
                std::borrow::Cow::Owned(destination_rules::DestinationRules::build(self.routing.iter(), |h, ns| {
                    self.resolve_host(h, ns)
                }))
            }
        }
    }

    /// The index (in [`Model::destination_rules`]) of the DestinationRule in
    /// force for traffic from a proxy in `proxy_ns` with `labels` to `host`
    /// (see `destination_rules.rs`).
    pub fn rule_index_for(&self, proxy_ns: &str, labels: &[(Arc<str>, Arc<str>)], host: &str) -> Option<usize> {
        let rules = self.destination_rules();
        let svc_ns = self.services.get(host).map_or("", |s| s.namespace.as_str());
        let selects = |sel: &BTreeMap<String, String>| has_labels(labels, sel);
        rules.select(proxy_ns, &selects, &self.mesh.root_namespace, host, svc_ns)
    }

    /// The VirtualService that routes `host`, if any, as istiod's sidecar
    /// scope picks it among all of them: the first (in [`mesh_order`]) that
    /// names the host, else the first naming the most specific wildcard
    /// that covers it (`computeWildcardHostVirtualServiceIndex`).
    pub fn virtual_service(&self, host: &str) -> Option<(&IstioObject, &networking::VirtualService)> {
        let i = match self.index() {
            Some(ix) => ix.virtual_services.get(host).copied().or_else(|| {
                ix.wildcards
                    .iter()
                    .filter(|(w, _)| destination_rules::host_matches(w, host))
                    .min_by_key(|(w, _)| std::cmp::Reverse(w.len()))
                    .map(|(_, i)| *i)
            }),
            None => {
                let order = mesh_order(&self.routing);
                self.pick_virtual_service(&order, host)
            }
        }?;
        match &self.routing[i].spec {
            IstioSpec::VirtualService(vs) => Some((&self.routing[i], vs)),
            _ => None,
        }
    }

    /// Whether `host` is an ExternalName alias of a mesh service (istiod's
    /// resolution `Alias`: no clusters, listeners or virtual hosts of its
    /// own).
    pub fn is_alias(&self, host: &str) -> bool {
        self.aliases.values().any(|v| v.iter().any(|a| &**a == host))
    }

    /// The VirtualServices bound to the mesh, as indexes into `routing`,
    /// in istiod's order (`sortConfigByCreationTime`: creation time, then
    /// name, then namespace).
    pub fn mesh_virtual_services(&self) -> std::borrow::Cow<'_, [usize]> {
        match self.index() {
            Some(ix) => std::borrow::Cow::Borrowed(&ix.mesh_order),
            None => std::borrow::Cow::Owned(mesh_order(&self.routing)),
        }
    }

    /// Among the VirtualServices `order` (indexes into `routing`), the one
    /// for `host`: the first naming it, else the first naming the most
    /// specific wildcard covering it.
    pub fn pick_virtual_service(&self, order: &[usize], host: &str) -> Option<usize> {
        let hosts = |i: usize| match &self.routing[i].spec {
            IstioSpec::VirtualService(vs) => {
                let ns = self.routing[i].meta.ns();
                vs.hosts.iter().map(|h| self.resolve_host(h, ns)).collect::<Vec<_>>()
            }
            _ => Vec::new(),
        };
        let mut best: Option<(usize, usize)> = None;
        for &i in order {
            for h in hosts(i) {
                if h == host {
                    return Some(i);
                }
                if h.starts_with('*')
                    && destination_rules::host_matches(&h, host)
                    && best.is_none_or(|(len, _)| h.len() > len)
                {
                    best = Some((h.len(), i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    /// [`Model::pick_virtual_service`] for many hosts against one `order`:
    /// the VirtualServices' hosts resolved once, exact ones looked up.
    pub fn virtual_service_picker(&self, order: &[usize]) -> VirtualServicePicker {
        let mut exact = std::collections::HashMap::new();
        let mut wildcards = Vec::new();
        for &i in order {
            let IstioSpec::VirtualService(vs) = &self.routing[i].spec else { continue };
            let ns = self.routing[i].meta.ns();
            for h in &vs.hosts {
                let h = self.resolve_host(h, ns);
                if h.starts_with('*') {
                    wildcards.push((h.clone(), i));
                }
                // The first in `order` naming it (a wildcard service's
                // host too, as written).
                exact.entry(h).or_insert(i);
            }
        }
        VirtualServicePicker { exact, wildcards }
    }

    /// The FQDN a host written in config means, as istiod's
    /// `ResolveShortnameToFQDN` resolves it: `reviews` in namespace `ns` is
    /// `reviews.ns.svc.<domain>`; a name with a dot (`reviews.ns`,
    /// `example.com`), `*` and an IP address are taken as they are.
    pub fn resolve_host(&self, host: &str, ns: &str) -> String {
        if host.is_empty() || host == "*" || host.contains('.') || host.parse::<std::net::IpAddr>().is_ok() {
            return host.to_owned();
        }
        // (`concat` sizes its one allocation first; `format!` grew its
        // string.)
        [host, ".", ns, ".svc.", &self.domain].concat()
    }
}

/// The VirtualService [`Model::pick_virtual_service`] picks for a host,
/// for many hosts ([`Model::virtual_service_picker`]).
#[derive(Debug, Clone)]
pub struct VirtualServicePicker {
    exact: std::collections::HashMap<String, usize>,
    /// Wildcard hosts in the order they are met.
    wildcards: Vec<(String, usize)>,
}

impl VirtualServicePicker {
    /// The first VirtualService naming `host`, else the first naming the
    /// most specific wildcard covering it.
    pub fn pick(&self, host: &str) -> Option<usize> {
        if let Some(i) = self.exact.get(host) {
            return Some(*i);
        }
        let mut best: Option<(usize, usize)> = None;
        for (h, i) in &self.wildcards {
            if destination_rules::host_matches(h, host) && best.is_none_or(|(len, _)| h.len() > len) {
                best = Some((h.len(), *i));
            }
        }
        best.map(|(_, i)| i)
    }
}

/// Whether `labels` (a proxy's, sorted pairs) carry every label of
/// `selector` (a workload selector matches).
pub fn has_labels(labels: &[(Arc<str>, Arc<str>)], selector: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.iter().any(|(lk, lv)| **lk == **k && **lv == **v))
}

const TLS_MODE: &str = "security.istio.io/tlsMode";

/// Locality of a pod: its `istio-locality` label (`region.zone.subzone`),
/// else its node's topology labels.
/// The Pods and Nodes endpoints are joined with, by the keys they are
/// looked up by.
pub struct Workloads<'a> {
    pods: FastMap<(&'a str, &'a str), &'a Pod>,
    by_ip: FastMap<&'a str, &'a Pod>,
    nodes: FastMap<&'a str, &'a BTreeMap<String, String>>,
}

/// A map keyed by names and addresses the process itself read (foldhash:
/// SipHash of 10,000 Pods' keys was a fiftieth of a full rebuild).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

impl<'a> Workloads<'a> {
    /// Every Pod and Node of `objs`.
    fn all(objs: &'a Objects) -> Self {
        Workloads {
            pods: objs.pods.iter().map(|p| ((p.metadata.ns(), p.metadata.name.as_str()), p)).collect(),
            by_ip: objs.pods.iter().filter_map(|p| p.status.pod_ip.as_deref().map(|ip| (ip, p))).collect(),
            nodes: objs.nodes.iter().map(|n| (n.metadata.name.as_str(), &n.metadata.labels)).collect(),
        }
    }

    /// Only the Pods (and their Nodes) that `slices` name or address: one
    /// pass over the Pods instead of an index of all of them.
    pub fn of_slices(objs: &'a Objects, slices: &[&EndpointSlice]) -> Self {
        let mut names: HashSet<(&str, &str)> = HashSet::new();
        for s in slices {
            for ep in &s.endpoints {
                if let Some(r) = ep.target_ref.as_ref().filter(|r| r.kind == "Pod") {
                    names.insert((r.namespace.as_deref().unwrap_or(s.metadata.ns()), r.name.as_str()));
                }
            }
        }
        let mut w = Workloads { pods: FastMap::default(), by_ip: FastMap::default(), nodes: FastMap::default() };
        let mut node_names: HashSet<&str> = HashSet::new();
        let mut take = |w: &mut Workloads<'a>, p: &'a Pod| {
            w.pods.insert((p.metadata.ns(), p.metadata.name.as_str()), p);
            if let Some(ip) = p.status.pod_ip.as_deref() {
                w.by_ip.insert(ip, p);
            }
            node_names.extend(p.spec.node_name.as_deref());
        };
        // The Pods named by reference, in one pass; then, only if some
        // endpoint names none that exists, the Pods by address (what
        // `service` falls back to).
        if !names.is_empty() {
            for p in objs.pods.iter().filter(|p| names.contains(&(p.metadata.ns(), p.metadata.name.as_str()))) {
                take(&mut w, p);
            }
        }
        let mut ips: HashSet<&str> = HashSet::new();
        for s in slices {
            for ep in &s.endpoints {
                let found = ep.target_ref.as_ref().filter(|r| r.kind == "Pod").is_some_and(|r| {
                    w.pods.contains_key(&(r.namespace.as_deref().unwrap_or(s.metadata.ns()), r.name.as_str()))
                });
                if !found {
                    ips.extend(ep.addresses.iter().map(String::as_str));
                }
            }
        }
        if !ips.is_empty() {
            for p in objs.pods.iter().filter(|p| p.status.pod_ip.as_deref().is_some_and(|ip| ips.contains(ip))) {
                take(&mut w, p);
            }
        }
        w.nodes = objs
            .nodes
            .iter()
            .filter(|n| node_names.contains(n.metadata.name.as_str()))
            .map(|n| (n.metadata.name.as_str(), &n.metadata.labels))
            .collect();
        w
    }
}

fn locality(pod: Option<&Pod>, nodes: &FastMap<&str, &BTreeMap<String, String>>) -> Locality {
    if let Some(l) = pod.and_then(|p| p.metadata.labels.get("istio-locality")) {
        let mut parts = l.splitn(3, '.');
        return Locality {
            region: parts.next().unwrap_or_default().to_owned(),
            zone: parts.next().unwrap_or_default().to_owned(),
            subzone: parts.next().unwrap_or_default().to_owned(),
        };
    }
    let Some(labels) = pod.and_then(|p| p.spec.node_name.as_deref()).and_then(|n| nodes.get(n)) else {
        return Locality::default();
    };
    let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
    Locality {
        region: get("topology.kubernetes.io/region"),
        zone: get("topology.kubernetes.io/zone"),
        subzone: get("topology.istio.io/subzone"),
    }
}

/// The Istio objects of the kinds `want` selects, ordered by namespace and
/// name.
pub fn sorted(objs: &Objects, want: fn(&IstioSpec) -> bool) -> Vec<IstioObject> {
    let mut v: Vec<&IstioObject> = objs.istio.iter().filter(|o| want(&o.spec)).collect();
    v.sort_by(|a, b| (a.meta.ns(), &a.meta.name).cmp(&(b.meta.ns(), &b.meta.name)));
    // (Copied on the build's threads: deep copies of thousands of rules
    // were most of a full build's serial start.)
    par_map(&v, |o| (*o).clone())
}

/// The kinds the model keeps in `security`.
pub fn is_security(s: &IstioSpec) -> bool {
    matches!(
        s,
        IstioSpec::PeerAuthentication(_) | IstioSpec::AuthorizationPolicy(_) | IstioSpec::RequestAuthentication(_)
    )
}

impl Model {
    /// Builds the model from Kubernetes objects under the default mesh
    /// configuration.
    pub fn build(objs: &Objects, domain: &str) -> Model {
        Model::build_in(objs, domain, Arc::default())
    }

    /// Builds the model from Kubernetes objects under `mesh`.
    pub fn build_in(objs: &Objects, domain: &str, mesh: Arc<istiod_config::meshconfig::MeshSettings>) -> Model {
        let mut model = Model { domain: domain.to_owned(), mesh, ..Model::default() };
        for ns in &objs.namespaces {
            model.namespaces.insert(ns.metadata.name.clone(), ns.metadata.labels.clone());
        }
        // The Gateway API, as the Istio Gateways and VirtualServices istiod
        // makes of it, kept in the same (namespace, name) order.
        model.secrets = Arc::new(secrets_of(objs));
        model.config_maps = Arc::new(config_maps_of(objs));
        let secrets = |ns: &str, name: &str| match model.secrets.get(&(ns.to_owned(), name.to_owned())) {
            Some(s) => credentials::usable_pair(&s.data),
            None => Err(format!("secret {ns}/{name} not found")),
        };
        let service_exists =
            |ns: &str, name: &str| objs.services.iter().any(|s| s.metadata.ns() == ns && s.metadata.name == name);
        let entry_hosts = |ns: &str, name: &str| {
            objs.istio.iter().find_map(|o| match &o.spec {
                IstioSpec::ServiceEntry(se) if o.meta.ns() == ns && o.meta.name == name => Some(se.hosts.clone()),
                _ => None,
            })
        };
        let ca = |kind: &str, ns: &str, name: &str| {
            let key = (ns.to_owned(), name.to_owned());
            let held = if kind == "Secret" { model.secrets.get(&key) } else { model.config_maps.get(&key) };
            held.map(|s| credentials::ca_info(&s.data).map(|(ca, _)| ca))
        };
        let inputs = istiod_config::gateway_convert::Inputs {
            namespaces: &model.namespaces,
            secrets: &secrets,
            ca: &ca,
            service: &service_exists,
            service_entry: &entry_hosts,
            instances: &|ns: &str, name: &str, port: u16| {
                let svc = objs.services.iter().find(|s| s.metadata.ns() == ns && s.metadata.name == name)?;
                let ready = objs.endpoint_slices.iter().any(|e| {
                    e.metadata.ns() == ns
                        && e.service_name() == Some(name)
                        && e.ports.iter().any(|p| p.port == Some(port))
                        && e.endpoints.iter().any(|ep| !ep.addresses.is_empty())
                });
                let ips = if svc.spec.cluster_ips.is_empty() {
                    svc.spec.cluster_ip.iter().cloned().collect()
                } else {
                    svc.spec.cluster_ips.clone()
                };
                let ips = ips.into_iter().filter(|ip: &String| ip.parse::<std::net::IpAddr>().is_ok()).collect();
                Some(istiod_config::gateway_convert::Instances { ready, ips })
            },
        };
        let api = istiod_config::gateway_convert::convert(&objs.gateway_api, &inputs, domain);
        // Kubernetes Ingresses, likewise (istiod's ingress controller).
        let ingress = ingress::convert(objs, &model.mesh.ingress, domain);
        let by_name = |a: &IstioObject, b: &IstioObject| (a.meta.ns(), &a.meta.name).cmp(&(b.meta.ns(), &b.meta.name));
        let mut routing = sorted(objs, |s| matches!(s, IstioSpec::VirtualService(_) | IstioSpec::DestinationRule(_)));
        routing.extend(api.virtual_services);
        routing.extend(ingress.virtual_services);
        // BackendTLSPolicies, as the DestinationRules istiod makes of them.
        let backend_tls = istiod_config::backend_tls::convert(objs, domain);
        routing.extend(backend_tls.rules);
        model.backend_tls_problems = Arc::new(backend_tls.problems);
        for o in &mut routing {
            routing_export_default(o, &model.mesh);
        }
        routing.sort_by(by_name);
        delegate::merge(&mut routing, domain);
        model.routing = routing.into();
        model.security = Arc::new(sorted(objs, is_security));
        model.sidecars = Arc::new(sorted(objs, |s| matches!(s, IstioSpec::Sidecar(_))));
        let mut telemetries = sorted(objs, |s| s.kind() == istiod_config::istio::IstioKind::Telemetry);
        telemetries.sort_by(|a, b| {
            (&a.meta.creation_timestamp, a.meta.ns(), &a.meta.name).cmp(&(
                &b.meta.creation_timestamp,
                b.meta.ns(),
                &b.meta.name,
            ))
        });
        model.telemetries = Arc::new(telemetries);
        model.envoy_filters = Arc::new(envoy_filters_of(objs, &model.mesh));
        model.extensions = Arc::new(extensions_of(objs, &model.mesh));
        let mut gateways = sorted(objs, |s| matches!(s, IstioSpec::Gateway(_)));
        gateways.extend(api.gateways);
        gateways.extend(ingress.gateways);
        gateways.sort_by(by_name);
        model.gateways = Arc::new(gateways);
        let mut statuses = api.statuses;
        statuses.extend(backend_tls.statuses);
        model.gateway_api = Arc::new(GatewayApi { grants: api.grants, problems: api.problems, statuses });
        let workloads = Workloads::all(objs);
        let slices = slices_by_service(objs);
        let entries_by_ns = workload_entries_by_namespace(objs);
        // (Each Service on its own: built on several threads.)
        let services: Vec<&KubeService> = objs.services.iter().collect();
        let built = par_map(&services, |svc| {
            let key = (svc.metadata.ns(), svc.metadata.name.as_str());
            let dual_stack = model.mesh.dual_stack;
            let mut s = service(svc, domain, slices.get(&key).map_or(&[][..], Vec::as_slice), &workloads, dual_stack);
            if model.mesh.k8s_select_workload_entries {
                let none = Vec::new();
                select_workload_entries(&mut s, svc, entries_by_ns.get(svc.metadata.ns()).unwrap_or(&none));
            }
            network::place(
                export_default(s, &model.mesh),
                &model.mesh,
                &model.namespaces,
                &model.mesh.networks.cluster_id,
            )
        });
        for s in built {
            model.services.insert(s.hostname.clone(), Arc::new(s));
        }
        remote_services(&mut model, objs, domain);
        model.remote_clusters = !objs.remotes.is_empty();
        model.cluster_local = Arc::new(istiod_config::networks::ClusterLocal::new(&model.mesh.raw, domain));
        let mut aliases: BTreeMap<Arc<str>, Vec<Arc<str>>> = BTreeMap::new();
        for svc in objs.services.iter().filter(|s| s.spec.kind.as_deref() == Some("ExternalName")) {
            let Some(target) = svc.spec.external_name.as_deref() else { continue };
            let target = target.trim_end_matches('.');
            let alias: Arc<str> = format!("{}.{}.svc.{domain}", svc.metadata.name, svc.metadata.ns()).into();
            if let Some((concrete, s)) = model.services.get_key_value(target)
                && !s.mesh_external
            {
                aliases.entry(concrete.clone()).or_default().push(alias);
            }
        }
        model.aliases = Arc::new(aliases);
        model.network_gateways = Arc::new(network::gateways(objs, &model.mesh, domain));
        for o in &objs.istio {
            if let IstioSpec::ServiceEntry(se) = &o.spec {
                for s in service_entry(&o.meta, se, objs, &model.mesh) {
                    let cluster = &model.mesh.networks.cluster_id;
                    let s = network::place(export_default(s, &model.mesh), &model.mesh, &model.namespaces, cluster);
                    // A Kubernetes Service of the same name wins, as in istiod.
                    model.services.entry(s.hostname.clone()).or_insert_with(|| Arc::new(s));
                }
            }
        }
        model
    }
}

/// The Services of remote clusters (`objs.remotes`), merged by hostname
/// as istiod's aggregate registry merges them: a host this cluster (or an
/// earlier remote) has keeps its ports and addresses and gains the remote's
/// endpoints, each placed in its cluster and network; a host only a remote
/// has is that remote's service.
fn remote_services(model: &mut Model, objs: &Objects, domain: &str) {
    for (cluster, remote) in &objs.remotes {
        let workloads = Workloads::all(remote);
        let slices = slices_by_service(remote);
        for svc in &remote.services {
            let key = (svc.metadata.ns(), svc.metadata.name.as_str());
            let slices = slices.get(&key).map_or(&[][..], Vec::as_slice);
            let s = remote_service(&model.mesh, domain, (cluster, remote), svc, slices, &workloads);
            match model.services.get_mut(&s.hostname) {
                Some(have) => Arc::make_mut(have).endpoints.extend(s.endpoints),
                None => {
                    model.services.insert(s.hostname.clone(), Arc::new(s));
                }
            }
        }
    }
}

/// Service `svc` of remote cluster `remote` (its ID and objects), its
/// endpoints from `slices` joined with `workloads`, placed in that cluster.
pub fn remote_service(
    mesh: &istiod_config::meshconfig::MeshSettings,
    domain: &str,
    remote: (&str, &Objects),
    svc: &istiod_config::objects::Service,
    slices: &[&EndpointSlice],
    workloads: &Workloads<'_>,
) -> Service {
    let (cluster, objs) = remote;
    // Only the system namespace's labels are read (its network).
    let namespaces: BTreeMap<String, BTreeMap<String, String>> = objs
        .namespaces
        .iter()
        .filter(|n| n.metadata.name == mesh.networks.system_namespace)
        .map(|n| (n.metadata.name.clone(), n.metadata.labels.clone()))
        .collect();
    let s = service(svc, domain, slices, workloads, mesh.dual_stack);
    network::place(export_default(s, mesh), mesh, &namespaces, cluster)
}

/// The EndpointSlices of each Service, by (namespace, service name).
fn slices_by_service(objs: &Objects) -> HashMap<(&str, &str), Vec<&EndpointSlice>> {
    let mut out: HashMap<(&str, &str), Vec<&EndpointSlice>> = HashMap::new();
    for s in &objs.endpoint_slices {
        if let Some(name) = s.service_name() {
            out.entry((s.metadata.ns(), name)).or_default().push(s);
        }
    }
    out
}

/// `s` with the mesh's `defaultServiceExportTo` when it names no
/// `exportTo` (istiod's `exportToDefaults`).
pub fn export_default(mut s: Service, mesh: &istiod_config::meshconfig::MeshSettings) -> Service {
    if s.export_to.is_empty() {
        s.export_to.clone_from(&mesh.default_service_export_to);
    }
    s
}

/// A VirtualService or DestinationRule without `exportTo` given the mesh's
/// `defaultVirtualServiceExportTo` or `defaultDestinationRuleExportTo`.
pub fn routing_export_default(o: &mut IstioObject, mesh: &istiod_config::meshconfig::MeshSettings) {
    match &mut o.spec {
        IstioSpec::VirtualService(vs) if vs.export_to.is_empty() => {
            vs.export_to.clone_from(&mesh.default_virtual_service_export_to);
        }
        IstioSpec::DestinationRule(dr) if dr.export_to.is_empty() => {
            dr.export_to.clone_from(&mesh.default_destination_rule_export_to);
        }
        _ => {}
    }
}

/// The services a ServiceEntry declares: one per host.
pub fn service_entry(
    meta: &Meta,
    se: &networking::ServiceEntry,
    objs: &Objects,
    mesh: &istiod_config::meshconfig::MeshSettings,
) -> Vec<Service> {
    let ns = meta.ns().to_owned();
    let resolution = match se.resolution {
        networking::Resolution::None => Resolution::Passthrough,
        networking::Resolution::Static => Resolution::ClientSideLb,
        networking::Resolution::Dns | networking::Resolution::DynamicDns => Resolution::Dns,
        networking::Resolution::DnsRoundRobin => Resolution::DnsRoundRobin,
    };
    let ports: Vec<Port> = se
        .ports
        .iter()
        .map(|p| Port {
            name: p.name.clone(),
            port: p.number as u16,
            protocol: Protocol::parse(&p.protocol),
            // `targetPort`: the endpoints' port unless they name their own.
            target_port: Some(if p.target_port != 0 { p.target_port as u16 } else { p.number as u16 }),
        })
        .collect();
    // Inline endpoints, or the WorkloadEntries the selector picks in the namespace.
    let no_annotations = BTreeMap::new();
    // A selector picks Pods too (istiod's workload instances), as entries.
    let selects = |labels: &BTreeMap<String, String>| {
        se.workload_selector.as_ref().is_some_and(|sel| sel.labels.iter().all(|(k, v)| labels.get(k) == Some(v)))
    };
    let select_pods = mesh.service_entry_select_pods;
    let pods: Vec<(networking::WorkloadEntry, &BTreeMap<String, String>, String)> = objs
        .pods
        .iter()
        .filter(|_| select_pods)
        // Ready pods only (istiod's pod controller: `IsPodReady`).
        .filter(|p| p.metadata.ns() == ns && selects(&p.metadata.labels))
        .filter(|p| p.status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        .filter_map(|p| {
            let we = networking::WorkloadEntry {
                address: p.status.pod_ip.clone().filter(|ip| !ip.is_empty())?,
                labels: p.metadata.labels.clone(),
                service_account: p.spec.service_account_name.clone().unwrap_or_default(),
                ..Default::default()
            };
            Some((we, &p.metadata.annotations, istiod_config::workload::workload_name(p)))
        })
        .collect();
    // An entry's metadata labels count too, over its spec's (istiod's
    // `ConvertWorkloadEntry`): such entries are taken as merged copies.
    let entries = || objs.istio.iter().filter(|o| o.meta.ns() == ns);
    let merged: Vec<(networking::WorkloadEntry, &BTreeMap<String, String>, String)> = entries()
        .filter(|o| !o.meta.labels.is_empty())
        .filter_map(|o| match &o.spec {
            IstioSpec::WorkloadEntry(we) if we.serves() => {
                let mut we = we.clone();
                we.labels.extend(o.meta.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
                let name =
                    istiod_config::workload::entry_workload_name(&o.meta.name, &o.meta.annotations, &o.meta.labels);
                Some((we, &o.meta.annotations, name))
            }
            _ => None,
        })
        .collect();
    // (Each with its workload name, for telemetry: istiod's
    // WorkloadNameFromWorkloadEntry, an inline endpoint's `<entry>-<i>`.)
    type Selected<'w> = (&'w networking::WorkloadEntry, &'w BTreeMap<String, String>, String);
    let workloads: Vec<Selected<'_>> = match &se.workload_selector {
        Some(_) => entries()
            .filter(|o| o.meta.labels.is_empty())
            .filter_map(|o| match &o.spec {
                // Health checks may hold an entry out (istiod's `isHealthy`).
                IstioSpec::WorkloadEntry(we) if we.serves() => Some((
                    we,
                    &o.meta.annotations,
                    istiod_config::workload::entry_workload_name(&o.meta.name, &o.meta.annotations, &o.meta.labels),
                )),
                _ => None,
            })
            .chain(merged.iter().map(|(we, a, n)| (we, *a, n.clone())))
            .filter(|(we, _, _)| selects(&we.labels))
            .chain(pods.iter().map(|(we, a, n)| (we, *a, n.clone())))
            .collect(),
        None => se
            .endpoints
            .iter()
            .enumerate()
            .map(|(i, we)| {
                let name = format!("{}-{i}", meta.name);
                // (Its metadata labels, which an inline endpoint has none of.)
                (
                    we,
                    &no_annotations,
                    istiod_config::workload::entry_workload_name(&name, &no_annotations, &no_annotations),
                )
            })
            .collect(),
    };
    // istiod's `ShouldV2AutoAllocateIP`: not for NONE, nor with addresses,
    // nor where the entry's label turns it off.
    let opted_out =
        meta.labels.get("networking.istio.io/enable-autoallocate-ip").is_some_and(|v| v.eq_ignore_ascii_case("false"));
    let allocates =
        mesh.dns.ip_autoallocate && resolution != Resolution::Passthrough && se.addresses.is_empty() && !opted_out;
    // An IPv4 and an IPv6 address per host at most, as istiod reads them
    // (what does not parse is left out).
    let allocated = |host: &str| -> Vec<String> {
        let (mut v4, mut v6) = (None, None);
        for (_, a) in se.allocated.iter().filter(|(h, _)| h == host) {
            match a.parse::<std::net::IpAddr>() {
                Ok(ip @ std::net::IpAddr::V4(_)) => v4 = v4.or(Some(ip)),
                Ok(ip) => v6 = v6.or(Some(ip)),
                Err(_) => {}
            }
        }
        v4.into_iter().chain(v6).map(|ip| ip.to_string()).collect()
    };
    se.hosts
        .iter()
        .map(|host| {
            let mut endpoints = Vec::new();
            for port in &se.ports {
                let target = |we: &networking::WorkloadEntry| {
                    we.ports.get(&port.name).copied().filter(|p| *p != 0).unwrap_or(if port.target_port != 0 {
                        port.target_port
                    } else {
                        port.number
                    }) as u16
                };
                for (we, annotations, name) in &workloads {
                    let mut loc = we.locality.splitn(3, '/');
                    endpoints.push(Endpoint {
                        extra_addresses: Vec::new(),
                        workload: (Arc::from(name.as_str()), Arc::from(ns.as_str())),
                        address: we.address.clone(),
                        service_port: port.number as u16,
                        port: target(we),
                        health: Health::Healthy,
                        labels: we.labels.clone(),
                        service_account: we.service_account.clone(),
                        tls_mode: we.labels.get(TLS_MODE).cloned().unwrap_or_else(|| "disabled".into()),
                        locality: Locality {
                            region: loc.next().unwrap_or_default().to_owned(),
                            zone: loc.next().unwrap_or_default().to_owned(),
                            subzone: loc.next().unwrap_or_default().to_owned(),
                        },
                        pod: None,
                        tunnel: tunnel(&we.labels, annotations),
                        network: we.network.clone(),
                        dns_name: None,
                    });
                }
                if workloads.is_empty() && matches!(resolution, Resolution::Dns | Resolution::DnsRoundRobin) {
                    // DNS without endpoints: the proxy resolves the host itself.
                    endpoints.push(Endpoint {
                        extra_addresses: Vec::new(),
                        workload: (Arc::from(meta.name.as_str()), Arc::from(ns.as_str())),
                        address: host.clone(),
                        service_port: port.number as u16,
                        port: port.number as u16,
                        health: Health::Healthy,
                        labels: BTreeMap::new(),
                        service_account: String::new(),
                        tls_mode: "disabled".into(),
                        locality: Locality::default(),
                        pod: None,
                        tunnel: false,
                        network: String::new(),
                        dns_name: None,
                    });
                }
            }
            Service {
                hostname: host.as_str().into(),
                kubernetes: false,
                name: meta.name.clone(),
                namespace: ns.clone(),
                vips: se.addresses.clone(),
                ports: ports.clone(),
                resolution,
                mesh_external: se.location == networking::Location::MeshExternal,
                export_to: se.export_to.clone(),
                selector: BTreeMap::new(),
                labels: meta.labels.clone(),
                endpoints,
                auto_addresses: if allocates { allocated(host) } else { Vec::new() },
                prefers_near: false,
                race_first_connect: meta
                    .annotations
                    .get("istio.io/connect-strategy")
                    .is_some_and(|v| v.eq_ignore_ascii_case("RACE_FIRST_TCP_CONNECT")),
            }
        })
        .collect()
}

pub fn service(
    svc: &KubeService,
    domain: &str,
    slices: &[&EndpointSlice],
    w: &Workloads<'_>,
    dual_stack: bool,
) -> Service {
    let ns = svc.metadata.ns().to_owned();
    let hostname: Arc<str> = format!("{}.{ns}.svc.{domain}", svc.metadata.name).into();
    let headless = svc.spec.cluster_ip.as_deref() == Some("None");
    let external_name = svc.spec.kind.as_deref() == Some("ExternalName");
    let mut vips: Vec<String> = if !svc.spec.cluster_ips.is_empty() {
        svc.spec.cluster_ips.clone()
    } else {
        svc.spec.cluster_ip.iter().cloned().collect()
    };
    vips.retain(|v| v != "None" && !v.is_empty());
    let ports: Vec<Port> = svc
        .spec
        .ports
        .iter()
        .map(|p| Port {
            name: p.name.clone().unwrap_or_default(),
            port: p.port,
            protocol: Protocol::of_port(p.name.as_deref(), p.app_protocol.as_deref(), p.protocol.as_deref()),
            target_port: match &p.target_port {
                None => Some(p.port),
                Some(IntOrString::Int(n)) => u16::try_from(*n).ok(),
                Some(_) => None,
            },
        })
        .collect();
    let slices: Vec<&EndpointSlice> = slices.iter().copied().filter(|s| s.address_type != "FQDN").collect();
    let mut endpoints = Vec::new();
    for sp in &svc.spec.ports {
        for slice in &slices {
            let Some(ep_port) = slice_port(slice, sp) else { continue };
            for ep in &slice.endpoints {
                let c = &ep.conditions;
                let health = if c.ready.unwrap_or(true) {
                    Health::Healthy
                } else if !c.terminating.unwrap_or(true) {
                    Health::Unhealthy
                } else if c.serving.unwrap_or(true) {
                    Health::Draining
                } else {
                    Health::Terminating
                };
                for addr in &ep.addresses {
                    let by_ref =
                        ep.target_ref.as_ref().filter(|r| r.kind == "Pod").and_then(|r| {
                            w.pods.get(&(r.namespace.as_deref().unwrap_or(&ns), r.name.as_str())).copied()
                        });
                    let pod = by_ref.or_else(|| w.by_ip.get(addr.as_str()).copied());
                    // istiod's dual-stack endpoints (endpointslice.go
                    // updateEndpointCacheForSlice): a referenced Pod with
                    // several IPs, of a Service with several cluster IPs, is
                    // one endpoint at all of them, from the IPv4 slice.
                    let dual: Vec<String> = by_ref
                        .filter(|_| dual_stack && svc.spec.cluster_ips.len() > 1)
                        .map(|p| p.status.pod_ips.iter().map(|i| i.ip.clone()).collect())
                        .filter(|ips: &Vec<String>| ips.len() > 1)
                        .unwrap_or_default();
                    if !dual.is_empty() && slice.address_type == "IPv6" {
                        continue;
                    }
                    let (address, extra_addresses) = match dual.split_first() {
                        Some((first, rest)) => (first.clone(), rest.to_vec()),
                        None => (addr.clone(), Vec::new()),
                    };
                    let mut loc = locality(pod, &w.nodes);
                    if loc.zone.is_empty()
                        && let Some(z) = &ep.zone
                    {
                        loc.zone = z.clone();
                    }
                    endpoints.push(Endpoint {
                        address,
                        extra_addresses,
                        // (istiod's EndpointBuilder: none without the Pod.)
                        workload: match pod {
                            Some(p) => {
                                (Arc::from(istiod_config::workload::workload_name(p)), Arc::from(p.metadata.ns()))
                            }
                            None => (Arc::from(""), Arc::from("")),
                        },
                        service_port: sp.port,
                        port: ep_port,
                        health,
                        labels: pod.map(|p| p.metadata.labels.clone()).unwrap_or_default(),
                        service_account: pod.and_then(|p| p.spec.service_account_name.clone()).unwrap_or_default(),
                        tls_mode: pod
                            .and_then(|p| p.metadata.labels.get(TLS_MODE).cloned())
                            .unwrap_or_else(|| "disabled".into()),
                        locality: loc,
                        pod: pod.map(|p| p.metadata.name.clone()),
                        tunnel: pod.is_some_and(|p| tunnel(&p.metadata.labels, &p.metadata.annotations)),
                        network: String::new(),
                        dns_name: pod.and_then(pod_dns_name),
                    });
                }
            }
        }
    }
    endpoints.sort_by(|a, b| (a.service_port, &a.address, a.port).cmp(&(b.service_port, &b.address, b.port)));
    endpoints.dedup_by(|a, b| (a.service_port, &a.address, a.port) == (b.service_port, &b.address, b.port));
    Service {
        hostname,
        kubernetes: true,
        name: svc.metadata.name.clone(),
        namespace: ns,
        vips,
        ports,
        resolution: if headless {
            Resolution::Passthrough
        } else if external_name {
            Resolution::Dns
        } else {
            Resolution::ClientSideLb
        },
        mesh_external: external_name,
        export_to: svc
            .metadata
            .annotations
            .get("networking.istio.io/exportTo")
            .map(|v| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect())
            .unwrap_or_default(),
        selector: svc.spec.selector.clone(),
        labels: svc.metadata.labels.clone(),
        endpoints,
        auto_addresses: Vec::new(),
        prefers_near: prefers_near(svc),
        race_first_connect: false,
    }
}

/// Whether a Service prefers near endpoints (`model.GetTrafficDistribution`
/// is not `Any`): the field, else the Service's annotation. (istiod also
/// reads the namespace's annotation; here it is not.)
fn prefers_near(svc: &KubeService) -> bool {
    const NEAR: [&str; 3] = ["PreferClose", "PreferSameZone", "PreferSameNode"];
    match svc.spec.traffic_distribution.as_deref() {
        Some(f) if NEAR.contains(&f) => true,
        _ => svc
            .metadata
            .annotations
            .get("networking.istio.io/traffic-distribution")
            .is_some_and(|v| NEAR.iter().any(|n| n.eq_ignore_ascii_case(v))),
    }
}

/// A Pod's name under a headless Service (`<hostname>.<subdomain>`, the
/// hostname defaulting to the Pod's name), when it names a subdomain.
fn pod_dns_name(pod: &Pod) -> Option<Arc<str>> {
    let sub = pod.spec.subdomain.as_deref().filter(|s| !s.is_empty())?;
    let host = pod.spec.hostname.as_deref().filter(|h| !h.is_empty()).unwrap_or(&pod.metadata.name);
    Some(Arc::from(format!("{host}.{sub}")))
}

/// The WorkloadEntries of `objs`, by namespace.
pub fn workload_entries_by_namespace(objs: &Objects) -> HashMap<&str, Vec<&IstioObject>> {
    let mut out: HashMap<&str, Vec<&IstioObject>> = HashMap::new();
    for o in objs.istio.iter().filter(|o| matches!(o.spec, IstioSpec::WorkloadEntry(_))) {
        out.entry(o.meta.ns()).or_default().push(o);
    }
    out
}

/// The WorkloadEntries a Kubernetes Service selects, as its endpoints
/// (`PILOT_ENABLE_K8S_SELECT_WORKLOAD_ENTRIES`, istiod's
/// `serviceInstancesFromWorkloadInstances`): for a Service with a selector
/// that the proxies balance over (not headless, not ExternalName), each
/// entry of its namespace whose labels (its spec's and its own, as
/// `ConvertWorkloadEntry` merges them) the selector matches, and that
/// serves ([`networking::WorkloadEntry::serves`]: health checks may hold
/// it out), on each port: a numeric target port, unless the entry maps the
/// port's name; a named one as the entry maps it (no mapping, no endpoint).
pub fn select_workload_entries(s: &mut Service, svc: &KubeService, entries: &[&IstioObject]) {
    if svc.spec.selector.is_empty() || s.resolution != Resolution::ClientSideLb || s.mesh_external {
        return;
    }
    let mut added = false;
    for o in entries {
        let IstioSpec::WorkloadEntry(we) = &o.spec else { continue };
        // (Matched before the labels are merged: most entries of a
        // namespace are not selected.)
        let label = |k: &String| o.meta.labels.get(k).or_else(|| we.labels.get(k));
        if !we.serves()
            || (we.labels.is_empty() && o.meta.labels.is_empty())
            || !svc.spec.selector.iter().all(|(k, v)| label(k) == Some(v))
        {
            continue;
        }
        let mut labels = we.labels.clone();
        labels.extend(o.meta.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        for sp in &svc.spec.ports {
            let name = sp.name.clone().unwrap_or_default();
            let mapped = |n: &str| we.ports.get(n).copied().filter(|p| *p != 0).and_then(|p| u16::try_from(p).ok());
            let port = match &sp.target_port {
                Some(IntOrString::Int(n)) if *n > 0 => mapped(&name).or(u16::try_from(*n).ok()),
                None => mapped(&name).or(Some(sp.port)),
                Some(IntOrString::Int(_)) => mapped(&name).or(Some(sp.port)),
                Some(IntOrString::String(t)) => mapped(t),
            };
            let Some(port) = port else { continue };
            let mut loc = we.locality.splitn(3, '/');
            let name = istiod_config::workload::entry_workload_name(&o.meta.name, &o.meta.annotations, &o.meta.labels);
            s.endpoints.push(Endpoint {
                extra_addresses: Vec::new(),
                workload: (Arc::from(name), Arc::from(o.meta.ns())),
                address: we.address.clone(),
                service_port: sp.port,
                port,
                health: Health::Healthy,
                tls_mode: labels.get(TLS_MODE).cloned().unwrap_or_else(|| "disabled".into()),
                labels: labels.clone(),
                service_account: we.service_account.clone(),
                locality: Locality {
                    region: loc.next().unwrap_or_default().to_owned(),
                    zone: loc.next().unwrap_or_default().to_owned(),
                    subzone: loc.next().unwrap_or_default().to_owned(),
                },
                pod: None,
                tunnel: tunnel(&labels, &o.meta.annotations),
                network: we.network.clone(),
                dns_name: None,
            });
            added = true;
        }
    }
    if added {
        s.endpoints.sort_by(|a, b| (a.service_port, &a.address, a.port).cmp(&(b.service_port, &b.address, b.port)));
        s.endpoints.dedup_by(|a, b| (a.service_port, &a.address, a.port) == (b.service_port, &b.address, b.port));
    }
}

/// The endpoint port of a Service port in a slice: matched by name (the
/// EndpointSlice controller copies the Service port name), or for an
/// unnamed single port, the only one.
fn slice_port(slice: &EndpointSlice, sp: &ServicePort) -> Option<u16> {
    let by_name = slice.ports.iter().find(|p| p.name.as_deref().unwrap_or("") == sp.name.as_deref().unwrap_or(""));
    if let Some(p) = by_name {
        return p.port;
    }
    match &sp.target_port {
        Some(IntOrString::Int(n)) => u16::try_from(*n).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod testing;
