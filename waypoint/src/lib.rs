//! What a waypoint proxy is served (istiod's `listener_waypoint.go`,
//! `cluster_waypoint.go`, `waypoint.go`, for a single network).
//!
//! A waypoint is an Envoy that ztunnels send a service's traffic to over
//! HBONE. Its resources, for the services the ambient index binds to it:
//!
//! | resource | what |
//! |---|---|
//! | listener `connect_terminate` | `0.0.0.0:15008`, TLS with a required client certificate, an HCM that accepts CONNECT and sends the tunnel to `main_internal` |
//! | listener `main_internal` | internal listener: a filter chain matcher on the destination IP (each service's VIPs) and port picks the chain of `inbound-vip\|<port>\|http\|<host>` (HCM, routes of the service's VirtualServices) or `inbound-vip\|<port>\|tcp\|<host>` (tcp_proxy); sniffs ports declared neither way |
//! | listener `connect_originate` | internal listener re-wrapping each upstream connection in HBONE (tcp_proxy tunnelling to the original destination) |
//! | clusters `main_internal`, `encap` | static, to the internal listeners |
//! | cluster `connect_originate` | ORIGINAL_DST on port 15008, HTTP/2 CONNECT, mutual TLS checking the peer's SPIFFE prefix |
//! | clusters `inbound-vip\|<port>\|<http\|tcp>[/<subset>]\|<host>` | the service's, with its DestinationRule, through an internal upstream socket |
//! | load assignments of those | the service's endpoints; HBONE-capable ones as internal addresses of `connect_originate` with the tunnel's destination in metadata |
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use istiod_mesh::generator::{MeshInput, WaypointServices};
use istiod_mesh::model::{Model, Protocol, Resolution, Service};
use istiod_mesh::node::ProxyClass;
use istiod_mesh::translate::envoy::{any, http_connection_manager, http_filter, router, sds, socket, tcp_proxy};
use istiod_mesh::translate::route::Flavor;
use istiod_proto::envoy::config::cluster::v3::{self as cluster, Cluster};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::endpoint::v3 as ep;
use istiod_proto::envoy::config::listener::v3::{self as listener, Filter, FilterChain, Listener, ListenerFilter};
use istiod_proto::envoy::config::route::v3 as route;
use istiod_proto::envoy::extensions::filters::common::set_filter_state::v3::{FilterStateValue, filter_state_value};
use istiod_proto::envoy::extensions::filters::http::set_filter_state::v3::Config as HttpSetFilterState;
use istiod_proto::envoy::extensions::filters::listener::http_inspector::v3::HttpInspector;
use istiod_proto::envoy::extensions::filters::listener::original_dst::v3::OriginalDst;
use istiod_proto::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::envoy::extensions::filters::network::set_filter_state::v3::Config as NetworkSetFilterState;
use istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3 as tcp;
use istiod_proto::envoy::extensions::matching::common_inputs::network::v3::{
    ApplicationProtocolInput, DestinationIpInput, DestinationPortInput,
};
use istiod_proto::envoy::extensions::transport_sockets::internal_upstream::v3::{
    InternalUpstreamTransport, internal_upstream_transport::MetadataValueSource,
};
use istiod_proto::envoy::extensions::transport_sockets::raw_buffer::v3::RawBuffer;
use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;
use istiod_proto::envoy::extensions::upstreams::http::v3 as upstream_http;
use istiod_proto::envoy::r#type::metadata::v3 as metadata;
use istiod_proto::prost::Message;
use istiod_proto::prost_types::{Duration, Struct, Value, value::Kind as ValueKind};
use istiod_proto::xds::core::v3::{CidrRange, TypedExtensionConfig};
use istiod_proto::xds::r#type::matcher::v3::{IpMatcher, Matcher, ip_matcher::IpRangeMatcher, matcher};

pub mod generator;
pub mod hbone;

/// The HBONE termination listener (and its HCM's stat prefix).
pub const CONNECT_TERMINATE: &str = "connect_terminate";
/// The internal listener (and cluster) past HBONE termination.
pub const MAIN_INTERNAL: &str = "main_internal";
/// The internal listener (and cluster) that originates HBONE.
pub const CONNECT_ORIGINATE: &str = "connect_originate";
/// The cluster to `connect_originate` (direct workload traffic).
pub const ENCAP: &str = "encap";
/// HBONE's port.
pub const HBONE_PORT: u32 = 15008;
/// The label naming a Gateway's deployment (`gateway.networking.k8s.io/gateway-name`).
pub const GATEWAY_NAME: &str = "gateway.networking.k8s.io/gateway-name";
/// Where the tunnel's destination rides in endpoint metadata.
pub const ORIGINAL_DST_KEY: &str = "envoy.filters.listener.original_dst";
/// The filter state key of the CONNECT authority (the original destination).
const LOCAL_IP_KEY: &str = "envoy.filters.listener.original_dst.local_ip";

/// The services the ambient index binds to each waypoint (`ServicesForWaypoint`),
/// ordered by namespace and hostname.
pub fn attachments(index: &istiod_ambient::Index) -> WaypointServices {
    let mut out: WaypointServices = BTreeMap::new();
    for (_, info) in index.services() {
        if let Some(w) = &info.binding.waypoint {
            let s = &info.service;
            out.entry(w.clone()).or_default().push((s.namespace.clone(), Arc::from(s.hostname.as_str())));
        }
    }
    for v in out.values_mut() {
        v.sort();
        v.dedup();
    }
    out
}

/// The services whose gateways' traffic goes through their waypoint
/// (`istio.io/ingress-use-waypoint`, istiod's `ServiceEds` shim): their
/// hostname -> the addresses of the waypoint's instances (the workloads of
/// the waypoint's Service), sorted.
pub fn ingress_waypoints(index: &istiod_ambient::Index) -> BTreeMap<Arc<str>, Vec<String>> {
    use istiod_proto::istio::workload::{address, gateway_address};
    let mut wanted: BTreeMap<String, Vec<Arc<str>>> = BTreeMap::new();
    for (_, info) in index.services() {
        let s = &info.service;
        if !info.binding.ingress_use {
            continue;
        }
        if let Some(gateway_address::Destination::Hostname(h)) =
            s.waypoint.as_ref().and_then(|w| w.destination.as_ref())
        {
            wanted.entry(format!("{}/{}", h.namespace, h.hostname)).or_default().push(Arc::from(s.hostname.as_str()));
        }
    }
    let mut out: BTreeMap<Arc<str>, Vec<String>> = BTreeMap::new();
    if wanted.is_empty() {
        return out;
    }
    for (_, a) in index.workloads() {
        let Some(address::Type::Workload(w)) = &a.r#type else { continue };
        // Only ready instances (istiod's `filterIstioEndpoint`).
        if w.status != istiod_proto::istio::workload::WorkloadStatus::Healthy as i32 {
            continue;
        }
        for (key, hosts) in &wanted {
            if w.services.contains_key(key)
                && let Some(ip) = w.addresses.first()
            {
                for h in hosts {
                    out.entry(h.clone()).or_default().push(istiod_ambient::ip_text(ip));
                }
            }
        }
    }
    for v in out.values_mut() {
        v.sort();
        v.dedup();
    }
    out
}

/// Every name a waypoint may be served from `mesh`: the fixed ones and the
/// inbound-VIP clusters and load assignments of every bound service (the
/// control thread marks them on each update; generations tell which
/// waypoints' changed).
pub fn all_names(mesh: &MeshInput) -> Vec<(istiod_xds_api::snapshot::Kind, Arc<str>)> {
    use istiod_xds_api::snapshot::Kind;
    let mut out: Vec<(Kind, Arc<str>)> = [CONNECT_TERMINATE, MAIN_INTERNAL, CONNECT_ORIGINATE]
        .into_iter()
        .map(|n| (Kind::Listener, Arc::from(n)))
        .chain([MAIN_INTERNAL, ENCAP, CONNECT_ORIGINATE].into_iter().map(|n| (Kind::Cluster, Arc::from(n))))
        .collect();
    let hosts: BTreeSet<&str> = mesh.waypoints.values().flatten().map(|(_, h)| &**h).collect();
    let rules = mesh.model.destination_rules();
    for host in hosts {
        let Some(svc) = mesh.model.services.get(host) else { continue };
        // The subsets any DestinationRule for the host defines (which one
        // is in force is the waypoint's; a name none has is harmless).
        let named = rules.candidates(host).into_iter().flat_map(|i| rules.get(i).rule.subsets.iter());
        let subsets: BTreeSet<&str> = std::iter::once("").chain(named.map(|s| s.name.as_str())).collect();
        for p in &svc.ports {
            for &subset in &subsets {
                for k in ["tcp", "http"] {
                    let sub = if subset.is_empty() { k.to_owned() } else { format!("{k}/{subset}") };
                    let name: Arc<str> = Arc::from(vip_name(p.port, &sub, host));
                    out.push((Kind::Cluster, name.clone()));
                    out.push((Kind::Endpoint, name));
                }
            }
        }
    }
    out
}

/// The waypoint (`<ns>/<name>`) a proxy of `class` is an instance of: its
/// namespace and the Gateway its deployment is labelled with.
pub fn waypoint_of(class: &ProxyClass) -> Option<String> {
    let name = class
        .labels
        .iter()
        .find(|(k, _)| &**k == GATEWAY_NAME || &**k == "istio.io/gateway-name")
        .map(|(_, v)| v.clone())?;
    Some(format!("{}/{}", class.namespace, name))
}

/// One waypoint's view of the mesh: its namespace and its services.
pub struct View<'a> {
    /// The model.
    pub model: &'a Model,
    /// The waypoint's namespace.
    pub namespace: &'a str,
    /// The waypoint's own labels (which DestinationRules select it).
    pub labels: &'a [(Arc<str>, Arc<str>)],
    /// The proxy's class.
    pub class: &'a ProxyClass,
    /// Its telemetry (stats, access logs, tracing), on first use.
    telemetry: std::cell::OnceCell<istiod_mesh::translate::telemetry::Side>,
    /// The services bound to it, `(namespace, hostname)`.
    bound: &'a [(String, Arc<str>)],
    /// The addresses of the workloads bound to it.
    pub workloads: &'a [String],
    /// Its services (istiod's `findWaypointResources`), resolved on first use.
    services: std::cell::OnceCell<Vec<&'a Service>>,
    /// The mesh's VirtualServices by the hosts they name, built on first use.
    routes: std::cell::OnceCell<RouteIndex>,
    /// [`View::outbound_services`], on first use.
    outbound: std::cell::OnceCell<Vec<&'a Service>>,
    /// The proxy's trust domain.
    pub trust_domain: &'a str,
    /// The waypoint's Gateway.
    pub gateway: String,
}

impl<'a> View<'a> {
    /// The view of the waypoint a proxy of `class` is, if it is one.
    pub fn of(mesh: &'a MeshInput, class: &'a ProxyClass) -> Option<View<'a>> {
        let key = waypoint_of(class)?;
        let gateway = key.split_once('/').map_or("", |(_, n)| n).to_owned();
        let model = &*mesh.model;
        Some(View {
            model,
            namespace: &class.namespace,
            labels: &class.labels,
            class,
            telemetry: std::cell::OnceCell::new(),
            bound: mesh.waypoints.get(&key).map_or(&[], Vec::as_slice),
            workloads: mesh.waypoint_workloads.get(&key).map_or(&[], Vec::as_slice),
            services: std::cell::OnceCell::new(),
            routes: std::cell::OnceCell::new(),
            outbound: std::cell::OnceCell::new(),
            trust_domain: &model.mesh.trust_domain,
            gateway,
        })
    }

    /// The waypoint's telemetry: as a workload's inbound side (istiod
    /// builds a waypoint's filters in the SidecarInbound class).
    pub fn telemetry(&self) -> &istiod_mesh::translate::telemetry::Side {
        self.telemetry.get_or_init(|| istiod_mesh::translate::telemetry::inbound(self.model, self.class))
    }

    /// The telemetry of `svc`'s chains (`None`: the direct ones): the
    /// waypoint's own, with the Telemetries attached by `targetRef(s)` to
    /// the service, the waypoint's Gateway or the `istio-waypoint` class
    /// (istiod's `applicableTelemetries` for a waypoint: they apply over
    /// the namespace-wide ones, oldest first).
    pub fn telemetry_for(
        &self,
        svc: Option<&Service>,
    ) -> std::borrow::Cow<'_, istiod_mesh::translate::telemetry::Side> {
        use istiod_config::istio::{IstioKind, IstioSpec, ext::ExtSpec};
        let target = svc.map(|s| PolicyService { name: &s.name, namespace: &s.namespace, kubernetes: s.kubernetes });
        let root = &self.model.mesh.root_namespace;
        let attached: Vec<istiod_config::istio::IstioObject> = self
            .model
            .telemetries
            .iter()
            .filter_map(|o| {
                let spec = istiod_mesh::model::telemetry::spec(o)?;
                let refs: Vec<istiod_config::istio::PolicyTargetReference> = match spec.get("targetRefs") {
                    Some(v) if v.as_array().is_some_and(|a| !a.is_empty()) => serde_json::from_value(v.clone()).ok()?,
                    _ => vec![serde_json::from_value(spec.get("targetRef")?.clone()).ok()?],
                };
                let refs: Vec<&istiod_config::istio::PolicyTargetReference> = refs.iter().collect();
                if !attaches(&refs, o.meta.ns(), root, self.namespace, &self.gateway, target) {
                    return None;
                }
                // As one attached to this waypoint's Gateway in its
                // namespace (a selector would not do: waypoints take none,
                // nor does ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY=false).
                let mut spec = spec.clone();
                if let Some(m) = spec.as_object_mut() {
                    m.remove("targetRef");
                    m.remove("selector");
                    m.insert(
                        "targetRefs".into(),
                        serde_json::json!([{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": self.gateway}]),
                    );
                }
                let mut o = o.clone();
                o.meta.namespace = Some(self.namespace.to_owned());
                o.spec = IstioSpec::Ext(IstioKind::Telemetry, ExtSpec(spec));
                Some(o)
            })
            .collect();
        if attached.is_empty() {
            return std::borrow::Cow::Borrowed(self.telemetry());
        }
        let mut model = self.model.clone();
        // (The attached ones stand for every Telemetry with targets.)
        let mut telemetries: Vec<istiod_config::istio::IstioObject> = model
            .telemetries
            .iter()
            .filter(|o| {
                istiod_mesh::model::telemetry::spec(o)
                    .is_none_or(|s| !istiod_mesh::model::telemetry::has_target_refs(s))
            })
            .cloned()
            .collect();
        telemetries.extend(attached);
        model.telemetries = Arc::new(telemetries);
        // The waypoint is selected by its Gateway's label.
        let mut class = self.class.clone();
        if !class.labels.iter().any(|(k, _)| &**k == GATEWAY_NAME) {
            class.labels.push((Arc::from(GATEWAY_NAME), Arc::from(self.gateway.as_str())));
        }
        std::borrow::Cow::Owned(istiod_mesh::translate::telemetry::inbound(&model, &class))
    }

    /// Its services: those bound to it that the model has, in the
    /// namespace they were bound from.
    pub fn services(&self) -> &[&'a Service] {
        self.services.get_or_init(|| self.bound.iter().filter_map(|(ns, h)| self.resolve(ns, h)).collect())
    }

    fn resolve(&self, ns: &str, host: &str) -> Option<&'a Service> {
        self.model.services.get(host).map(|s| &**s).filter(|s| s.namespace == ns)
    }

    /// The service `host` if this waypoint serves it.
    fn owns(&self, host: &str) -> Option<&'a Service> {
        let (ns, h) = self.bound.iter().find(|(_, h)| &**h == host)?;
        self.resolve(ns, h)
    }

    /// The cluster names, in istiod's order.
    pub fn cluster_names(&self, mesh: &'a MeshInput) -> Vec<String> {
        let mut out = vec![MAIN_INTERNAL.to_owned(), ENCAP.to_owned()];
        for (name, _) in self.vip_clusters() {
            out.push(name);
        }
        out.push(CONNECT_ORIGINATE.to_owned());
        out.extend(self.outbound_clusters(mesh).into_iter().map(|(n, _)| n));
        out
    }

    /// The services the waypoint's routes send to that it does not serve
    /// (or that are outside the mesh), reached by their outbound clusters
    /// (istiod's `filterWaypointOutboundServices`).
    pub fn outbound_services(&self) -> &[&'a Service] {
        self.outbound.get_or_init(|| self.find_outbound_services())
    }

    fn find_outbound_services(&self) -> Vec<&'a Service> {
        use istiod_config::istio::networking::Destination;
        let mut hosts = BTreeSet::new();
        for svc in self.services() {
            for (o, vs) in self.virtual_services_of(svc) {
                let ns = o.meta.ns();
                let mut add = |d: Option<&Destination>| {
                    if let Some(d) = d.filter(|d| !d.host.is_empty()) {
                        hosts.insert(self.model.resolve_host(&d.host, ns));
                    }
                };
                for r in &vs.http {
                    r.route.iter().for_each(|d| add(d.destination.as_ref()));
                    add(r.mirror.as_ref());
                    r.mirrors.iter().for_each(|m| add(m.destination.as_ref()));
                }
                for d in vs.tcp.iter().flat_map(|r| &r.route).chain(vs.tls.iter().flat_map(|r| &r.route)) {
                    add(d.destination.as_ref());
                }
            }
        }
        // The services of the mesh's extension providers (ext_authz,
        // tracers, log collectors) its filters may name (istiod's
        // `ExtraWaypointServices`, here every provider's).
        for (_, p) in self.model.mesh.extension_providers.values() {
            let (service, port) = (p["service"].as_str().unwrap_or(""), p["port"].as_u64().unwrap_or(0));
            if let Ok((host, _)) = istiod_mesh::model::telemetry::resolve_cluster(self.model, service, port) {
                hosts.insert(host);
            }
        }
        hosts
            .iter()
            .filter_map(|h| self.model.services.get(h.as_str()).map(|s| &**s))
            .filter(|s| self.owns(&s.hostname).is_none_or(|o| o.mesh_external))
            .collect()
    }

    /// The outbound clusters of [`View::outbound_services`] (the forms the
    /// waypoint's DestinationRules give them): name -> the outbound form.
    fn outbound_clusters(
        &self,
        mesh: &'a MeshInput,
    ) -> Vec<(String, &'a istiod_mesh::translate::cluster::ClusterForm)> {
        let mut out = Vec::new();
        for svc in self.outbound_services() {
            out.extend(self.outbound_clusters_of(mesh, svc));
        }
        out
    }

    /// A service's outbound clusters, in the form the waypoint's
    /// DestinationRule gives them (each port, each of its subsets).
    fn outbound_clusters_of(
        &self,
        mesh: &'a MeshInput,
        svc: &Service,
    ) -> Vec<(String, &'a istiod_mesh::translate::cluster::ClusterForm)> {
        let rule = self.model.rule_index_for(self.namespace, self.labels, &svc.hostname);
        let rules = self.model.destination_rules();
        let id = rule.map(|i| rules.get(i).id.clone());
        let mut names: Vec<String> = Vec::new();
        let subsets = rules.candidates(&svc.hostname).into_iter().flat_map(|i| rules.get(i).rule.subsets.iter());
        let subsets: BTreeSet<&str> = std::iter::once("").chain(subsets.map(|s| s.name.as_str())).collect();
        for p in &svc.ports {
            names.extend(subsets.iter().map(|sub| format!("outbound|{}|{sub}|{}", p.port, svc.hostname)));
        }
        names.sort();
        names
            .into_iter()
            .filter_map(|name| {
                let form = mesh.translation.clusters.get(name.as_str())?.form(id.as_deref())?;
                Some((name, form))
            })
            .collect()
    }

    /// The outbound cluster `name` (of a service the routes send to).
    fn outbound_cluster(
        &self,
        mesh: &'a MeshInput,
        name: &str,
    ) -> Option<&'a istiod_mesh::translate::cluster::ClusterForm> {
        let host = name.splitn(4, '|').nth(3)?;
        let svc = self.outbound_services().iter().find(|s| &*s.hostname == host)?;
        self.outbound_clusters_of(mesh, svc).into_iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }

    /// The listener names.
    pub fn listener_names(&self) -> Vec<String> {
        vec![CONNECT_TERMINATE.to_owned(), MAIN_INTERNAL.to_owned(), CONNECT_ORIGINATE.to_owned()]
    }

    /// The load assignment names (inbound-VIP clusters fed by EDS).
    pub fn endpoint_names(&self, mesh: &'a MeshInput) -> Vec<String> {
        let mut out: Vec<String> = self
            .vip_clusters()
            .into_iter()
            .filter(|(_, (svc, _, _))| svc.resolution == Resolution::ClientSideLb)
            .map(|(n, _)| n)
            .collect();
        // (A headless service's cluster is original-destination here.)
        let eds = |f: &istiod_mesh::translate::cluster::ClusterForm| {
            f.endpoints.is_some() && f.cluster.eds_cluster_config.is_some()
        };
        out.extend(self.outbound_clusters(mesh).into_iter().filter(|(_, f)| eds(f)).map(|(n, _)| n));
        out
    }

    /// Every inbound-VIP cluster: name -> (service, port, subset).
    fn vip_clusters(&self) -> Vec<(String, (&'a Service, u16, String))> {
        let mut out = Vec::new();
        for svc in self.services() {
            out.extend(self.vip_clusters_of(svc));
        }
        out
    }

    /// A service's inbound-VIP clusters.
    fn vip_clusters_of(&self, svc: &'a Service) -> Vec<(String, (&'a Service, u16, String))> {
        let mut out = Vec::new();
        {
            let subsets = self.subsets(svc);
            for p in svc.ports.iter().filter(|p| p.protocol != Protocol::Udp) {
                let kinds: &[&str] = match p.protocol {
                    Protocol::Unsupported => &["tcp", "http"],
                    p if p.is_http() => &["http"],
                    _ => &["tcp"],
                };
                for subset in std::iter::once(String::new()).chain(subsets.iter().cloned()) {
                    for k in kinds {
                        let sub = if subset.is_empty() { (*k).to_owned() } else { format!("{k}/{subset}") };
                        out.push((vip_name(p.port, &sub, &svc.hostname), (svc, p.port, subset.clone())));
                    }
                }
            }
        }
        out
    }

    /// Inbound-VIP cluster `name`, if the waypoint has it.
    fn vip_cluster_named(&self, name: &str) -> Option<(String, (&'a Service, u16, String))> {
        let host = name.strip_prefix("inbound-vip|")?.splitn(3, '|').nth(2)?;
        self.vip_clusters_of(self.owns(host)?).into_iter().find(|(n, _)| n == name)
    }

    /// The subsets of the DestinationRule in force for the waypoint.
    fn subsets(&self, svc: &Service) -> Vec<String> {
        let Some(i) = self.model.rule_index_for(self.namespace, self.labels, &svc.hostname) else { return Vec::new() };
        self.model.destination_rules().get(i).rule.subsets.iter().map(|s| s.name.clone()).collect()
    }

    /// Cluster `name`, encoded.
    pub fn cluster(&self, mesh: &'a MeshInput, name: &str) -> Option<Cluster> {
        match name {
            MAIN_INTERNAL => Some(internal_cluster(self.model, MAIN_INTERNAL, MAIN_INTERNAL)),
            ENCAP => Some(internal_cluster(self.model, ENCAP, CONNECT_ORIGINATE)),
            CONNECT_ORIGINATE => Some(self.connect_originate_cluster()),
            _ if name.starts_with("outbound|") => {
                let form = self.outbound_cluster(mesh, name)?;
                Cluster::decode(hbone::cluster(&form.bytes)?.as_ref()).ok()
            }
            _ => {
                let (_, (svc, port, subset)) = self.vip_cluster_named(name)?;
                self.vip_cluster(mesh, name, svc, port, &subset)
            }
        }
    }

    /// The outbound cluster of `(svc, port, subset)` in the form the
    /// waypoint's DestinationRule gives it, renamed and re-socketed.
    fn vip_cluster(&self, mesh: &MeshInput, name: &str, svc: &Service, port: u16, subset: &str) -> Option<Cluster> {
        let outbound = format!("outbound|{port}|{subset}|{}", svc.hostname);
        let forms = mesh.translation.clusters.get(outbound.as_str())?;
        let rule = self.model.rule_index_for(self.namespace, self.labels, &svc.hostname);
        let rules = self.model.destination_rules();
        let form = forms.form(rule.map(|i| &*rules.get(i).id)).or_else(|| forms.form(None))?;
        let mut c = (*form.cluster).clone();
        c.name = name.to_owned();
        if let Some(eds) = c.eds_cluster_config.as_mut() {
            eds.service_name = name.to_owned();
        }
        if let Some(la) = c.load_assignment.as_mut() {
            la.cluster_name = name.to_owned();
        }
        c.alt_stat_name = String::new();
        // ISTIO_MUTUAL and auto mTLS do not apply: HBONE carries identity.
        // SIMPLE / MUTUAL origination stays inside the tunnel.
        c.transport_socket_matches.clear();
        let inner = c.transport_socket.take().filter(|ts| !istio_mutual_socket(ts)).unwrap_or_else(raw_buffer);
        c.transport_socket =
            Some(internal_upstream("internal_upstream", inner, &[(Host, ORIGINAL_DST_KEY), (Host, "istio")]));
        if c.lb_policy == cluster::cluster::LbPolicy::ClusterProvided as i32
            || c.cluster_discovery_type
                == Some(cluster::cluster::ClusterDiscoveryType::Type(
                    cluster::cluster::DiscoveryType::OriginalDst as i32,
                ))
        {
            c.lb_policy = cluster::cluster::LbPolicy::ClusterProvided as i32;
        }
        Some(c)
    }

    fn connect_originate_cluster(&self) -> Cluster {
        connect_originate_cluster(self.model, Some((self.trust_domain, self.namespace)))
    }

    /// The load assignment of inbound-VIP cluster `name`: the outbound
    /// cluster's, with HBONE-capable endpoints reached through
    /// `connect_originate` (`endpoint_builder.go`: waypoints always tunnel
    /// to an endpoint that can take it).
    pub fn endpoints(&self, mesh: &'a MeshInput, name: &str) -> Option<ep::ClusterLoadAssignment> {
        if name.starts_with("outbound|") {
            let form = self.outbound_cluster(mesh, name)?;
            return ep::ClusterLoadAssignment::decode(hbone::endpoints(mesh, name, form.endpoints.as_ref()?)?.as_ref())
                .ok();
        }
        let (_, (svc, port, subset)) = self.vip_cluster_named(name)?;
        let outbound = format!("outbound|{port}|{subset}|{}", svc.hostname);
        let forms = mesh.translation.clusters.get(outbound.as_str())?;
        let rule = self.model.rule_index_for(self.namespace, self.labels, &svc.hostname);
        let rules = self.model.destination_rules();
        let form = forms.form(rule.map(|i| &*rules.get(i).id)).or_else(|| forms.form(None))?;
        let mut cla = ep::ClusterLoadAssignment::decode(form.endpoints.as_ref()?.as_ref()).ok()?;
        cla.cluster_name = name.to_owned();
        let tunnels: BTreeSet<(&str, u16)> = svc
            .endpoints
            .iter()
            .filter(|e| e.tunnel && e.service_port == port)
            .map(|e| (e.address.as_str(), e.port))
            .collect();
        for l in &mut cla.endpoints {
            for lb in &mut l.lb_endpoints {
                let Some(ep::lb_endpoint::HostIdentifier::Endpoint(e)) = lb.host_identifier.as_mut() else { continue };
                let Some((ip, p)) = socket_of(e.address.as_ref()) else { continue };
                if !tunnels.contains(&(ip.as_str(), p)) {
                    continue;
                }
                let target = if ip.contains(':') { format!("[{ip}]:{p}") } else { format!("{ip}:{p}") };
                e.address = Some(internal_address(CONNECT_ORIGINATE, &target));
                e.additional_addresses.clear();
                let md = lb.metadata.get_or_insert_default();
                md.filter_metadata.insert(ORIGINAL_DST_KEY.into(), strings(&[("local", &target)]));
            }
        }
        Some(cla)
    }

    /// Listener `name`.
    pub fn listener(&self, name: &str) -> Option<Listener> {
        match name {
            CONNECT_TERMINATE => Some(connect_terminate(self.model)),
            MAIN_INTERNAL => Some(self.main_internal()),
            CONNECT_ORIGINATE => Some(connect_originate()),
            _ => None,
        }
    }

    /// The internal listener dispatching per VIP and port
    /// (`buildWaypointInternal`).
    fn main_internal(&self) -> Listener {
        let mut chains = Vec::new();
        let mut ranges = Vec::new();
        let mut protocols: BTreeMap<u16, Protocol> = BTreeMap::new();
        for svc in self.services() {
            let mut port_map = BTreeMap::new();
            for p in svc.ports.iter().filter(|p| p.protocol != Protocol::Udp) {
                let tcp_name = vip_name(p.port, "tcp", &svc.hostname);
                let http_name = vip_name(p.port, "http", &svc.hostname);
                let tcp_chain = FilterChain {
                    name: tcp_name.clone(),
                    filters: self.tcp_filters(svc, p.port, &tcp_name),
                    ..Default::default()
                };
                let http_chain = FilterChain {
                    name: http_name.clone(),
                    filters: vec![http_connection_manager(&self.http_manager(
                        Some(svc),
                        p.port,
                        &http_name,
                        p.protocol,
                    ))],
                    ..Default::default()
                };
                let on_match = if p.protocol == Protocol::Unsupported {
                    chains.push(tcp_chain);
                    chains.push(http_chain);
                    protocols.insert(p.port, Protocol::Unsupported);
                    to_matcher(app_protocol(&tcp_name, &http_name, self.model.mesh.http10))
                } else if p.protocol.is_http() {
                    chains.push(http_chain);
                    let e = protocols.entry(p.port).or_insert(Protocol::Http);
                    if *e != Protocol::Http {
                        *e = Protocol::Unsupported;
                    }
                    to_chain(&http_name)
                } else {
                    chains.push(tcp_chain);
                    let e = protocols.entry(p.port).or_insert(p.protocol);
                    if !is_tcp(*e) {
                        *e = Protocol::Unsupported;
                    }
                    to_chain(&tcp_name)
                };
                port_map.insert(p.port.to_string(), on_match);
            }
            let mut vips: Vec<&String> = svc.vips.iter().collect();
            vips.sort();
            vips.dedup();
            if !port_map.is_empty() && !vips.is_empty() {
                ranges.push(IpRangeMatcher {
                    ranges: vips.iter().map(|v| cidr(v)).collect(),
                    on_match: Some(to_matcher(tree(input("port", &DestinationPortInput {}), port_map, None))),
                    ..Default::default()
                });
            }
        }
        // Direct workload traffic: the workloads bound to this waypoint,
        // HTTP by the application protocol the inspector saw, else TCP.
        if !self.workloads.is_empty() {
            ranges.push(IpRangeMatcher {
                ranges: self.workloads.iter().map(|ip| cidr(ip)).collect(),
                on_match: Some(to_matcher(app_protocol("direct-tcp", "direct-http", self.model.mesh.http10))),
                ..Default::default()
            });
        }
        chains.push(FilterChain {
            name: "direct-tcp".into(),
            filters: [connect_authority_network()]
                .into_iter()
                .chain(self.rbacs(None, false).network_filters())
                .chain([tcp_proxy(ENCAP, ENCAP)])
                .collect(),
            ..Default::default()
        });
        chains.push(FilterChain {
            name: "direct-http".into(),
            filters: vec![
                connect_authority_network(),
                http_connection_manager(&self.http_manager(None, 0, ENCAP, Protocol::Tcp)),
            ],
            ..Default::default()
        });
        let mut listener_filters = vec![listener_filter("envoy.filters.listener.original_dst", &OriginalDst {}, None)];
        // Bound workloads take any port: then sniff every one.
        let exact: Vec<u16> = protocols.iter().filter(|(_, p)| **p != Protocol::Unsupported).map(|(p, _)| *p).collect();
        let disabled = (!exact.is_empty() && self.workloads.is_empty()).then(|| exclude_ports(&exact));
        listener_filters.push(listener_filter("envoy.filters.listener.http_inspector", &HttpInspector {}, disabled));
        if let Some(f) = self.tls_inspector() {
            listener_filters.push(f);
        }
        let ip = IpMatcher { range_matchers: ranges };
        Listener {
            name: MAIN_INTERNAL.into(),
            listener_specifier: Some(listener::listener::ListenerSpecifier::InternalListener(
                listener::listener::InternalListenerConfig::default(),
            )),
            listener_filters,
            traffic_direction: core::TrafficDirection::Inbound as i32,
            filter_chains: chains,
            filter_chain_matcher: Some(Matcher {
                matcher_type: Some(matcher::MatcherType::MatcherTree(matcher::MatcherTree {
                    input: Some(input("ip", &DestinationIpInput {})),
                    tree_type: Some(matcher::matcher_tree::TreeType::CustomMatch(TypedExtensionConfig {
                        name: "ip".into(),
                        typed_config: Some(any(&ip)),
                    })),
                })),
                on_no_match: None,
            }),
            ..Default::default()
        }
    }

    /// tls_inspector on the TLS ports only (none when no port is TLS).
    fn tls_inspector(&self) -> Option<ListenerFilter> {
        let (mut tls_ports, mut others) = (BTreeSet::new(), BTreeSet::new());
        for p in self.services().iter().flat_map(|s| &s.ports) {
            if matches!(p.protocol, Protocol::Tls | Protocol::Https) {
                tls_ports.insert(p.port);
            } else {
                others.insert(p.port);
            }
        }
        if tls_ports.is_empty() {
            return None;
        }
        let rest: Vec<u16> = others.difference(&tls_ports).copied().collect();
        let config = TlsInspector { initial_read_buffer_size: Some(512), ..Default::default() };
        Some(listener_filter(
            "envoy.filters.listener.tls_inspector",
            &config,
            (!rest.is_empty()).then(|| exclude_ports(&rest)),
        ))
    }

    /// A TCP chain: tcp_proxy to the inbound-VIP cluster, or to the
    /// destinations of the service's TCP/TLS route (`buildWaypointNetworkFilters`).
    fn tcp_filters(&self, svc: &Service, port: u16, cluster: &str) -> Vec<Filter> {
        let routes = self.tcp_route(svc, port);
        let specifier = match routes.as_slice() {
            [] => tcp::tcp_proxy::ClusterSpecifier::Cluster(cluster.to_owned()),
            [only] => {
                tcp::tcp_proxy::ClusterSpecifier::Cluster(self.destination_cluster(&only.0, only.1, &only.2, port))
            }
            many => tcp::tcp_proxy::ClusterSpecifier::WeightedClusters(tcp::tcp_proxy::WeightedCluster {
                clusters: many
                    .iter()
                    .filter(|d| d.3 > 0)
                    .map(|d| tcp::tcp_proxy::weighted_cluster::ClusterWeight {
                        name: self.destination_cluster(&d.0, d.1, &d.2, port),
                        weight: d.3 as u32,
                        ..Default::default()
                    })
                    .collect(),
            }),
        };
        let telemetry = self.telemetry_for(Some(svc));
        // The connection pool of the DestinationRule of the (first)
        // destination: idle timeout and maximum duration
        // (`buildWaypointNetworkFilters`).
        let host = routes.first().map_or(&*svc.hostname, |r| r.0.as_str());
        let tcp_pool = self
            .model
            .rule_index_for(self.namespace, self.labels, host)
            .and_then(|i| self.model.destination_rules().get(i).rule.traffic_policy.clone())
            .and_then(|p| p.connection_pool)
            .and_then(|c| c.tcp);
        let duration = |d: Option<&String>| {
            let d = istiod_config::duration::parse(d?).ok()?;
            Some(Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 })
        };
        let t = tcp::TcpProxy {
            stat_prefix: cluster.to_owned(),
            cluster_specifier: Some(specifier),
            access_log: telemetry.log.clone(),
            idle_timeout: tcp_pool.as_ref().and_then(|t| duration(t.idle_timeout.as_ref())),
            max_downstream_connection_duration: tcp_pool
                .as_ref()
                .and_then(|t| duration(t.max_connection_duration.as_ref())),
            ..Default::default()
        };
        // Metadata exchange, the service's policies (network RBAC), the
        // stats, the proxy (`buildCompleteNetworkFilters`).
        let mesh = &self.model.mesh;
        let mx =
            mesh.metadata_exchange.then(|| istiod_mesh::translate::telemetry::mx_network(&mesh.mx_additional_labels));
        let mut out: Vec<Filter> = mx.into_iter().collect();
        out.extend(self.rbacs(Some(svc), false).network_filters());
        out.extend(telemetry.stats.as_ref().map(istiod_mesh::translate::telemetry::stats_network));
        out.push(Filter {
            name: "envoy.filters.network.tcp_proxy".into(),
            config_type: Some(listener::filter::ConfigType::TypedConfig(any(&t))),
        });
        out
    }

    /// The RBAC filters of the policies attached to the waypoint for `svc`.
    fn rbacs(&self, svc: Option<&Service>, http: bool) -> istiod_mesh::translate::authz::Rbacs {
        let mut r = istiod_mesh::translate::authz::rbacs_of(
            self.model,
            policies(self.model, self.namespace, &self.gateway, svc),
            http,
        );
        r.peer_from_filter_state();
        r
    }

    /// The VirtualServices that route a service in a waypoint
    /// (`getVirtualServiceForWaypoint`): bound to the mesh, in the
    /// service's or the waypoint's namespace, naming its host.
    pub fn virtual_services_of(
        &self,
        svc: &Service,
    ) -> Vec<(&'a istiod_config::istio::IstioObject, &'a istiod_config::istio::networking::VirtualService)> {
        let model = self.model;
        let index = self.routes.get_or_init(|| RouteIndex::new(model));
        let mut hits: Vec<usize> = index.exact.get(&*svc.hostname).cloned().unwrap_or_default();
        hits.extend(
            index
                .wildcards
                .iter()
                .filter(|(h, _)| istiod_mesh::model::destination_rules::host_matches(h, &svc.hostname))
                .map(|(_, i)| *i),
        );
        hits.sort_unstable();
        hits.dedup();
        hits.into_iter()
            .filter_map(|at| {
                let o = &model.routing[index.order[at]];
                let istiod_config::istio::IstioSpec::VirtualService(vs) = &o.spec else { return None };
                let ns = o.meta.ns();
                (ns == self.namespace || ns == svc.namespace).then_some((o, vs))
            })
            .collect()
    }

    /// The destinations of the first TLS route (SNI of the service's host),
    /// else TCP route, matching `port`: (host, port, subset, weight).
    fn tcp_route(&self, svc: &Service, port: u16) -> Vec<(String, Option<u16>, String, i32)> {
        let vss = self.virtual_services_of(svc);
        let dests = |o: &istiod_config::istio::IstioObject,
                     r: &[istiod_config::istio::networking::RouteDestination]| {
            r.iter()
                .filter_map(|d| d.destination.as_ref().map(|dd| (d, dd)))
                .map(|(d, dd)| {
                    let port = dd.port.as_ref().map(|p| p.number as u16).filter(|p| *p != 0);
                    (self.model.resolve_host(&dd.host, o.meta.ns()), port, dd.subset.clone(), d.weight)
                })
                .collect::<Vec<_>>()
        };
        let port_ok = |p: u32| p == 0 || p == u32::from(port);
        let gateways_ok = |g: &[String]| g.is_empty() || g.iter().any(|g| g == "mesh");
        for (o, vs) in &vss {
            for rule in &vs.tls {
                let hit = rule.matches.is_empty()
                    || rule.matches.iter().any(|m| {
                        m.sni_hosts.len() == 1
                            && m.sni_hosts[0] == *svc.hostname
                            && port_ok(m.port)
                            && gateways_ok(&m.gateways)
                            // A waypoint has no source labels or namespace
                            // (`matchTLS` with none): such a match fails.
                            && m.source_labels.is_empty()
                            && m.source_namespace.is_empty()
                    });
                if hit {
                    return dests(o, &rule.route);
                }
            }
        }
        for (o, vs) in &vss {
            for rule in &vs.tcp {
                let hit = rule.matches.is_empty()
                    || rule.matches.iter().any(|m| {
                        port_ok(m.port)
                            && gateways_ok(&m.gateways)
                            && m.source_labels.is_empty()
                            && m.source_namespace.is_empty()
                    });
                if hit {
                    return dests(o, &rule.route);
                }
            }
        }
        Vec::new()
    }

    /// A route destination's cluster (`getWaypointDestinationCluster`):
    /// this waypoint's own services by their inbound-VIP cluster, others
    /// by their outbound one.
    fn destination_cluster(&self, host: &str, port: Option<u16>, subset: &str, listener_port: u16) -> String {
        if host.is_empty() {
            return "UnknownService".into();
        }
        let service = self.model.services.get(host);
        let port = port
            .or_else(|| service.and_then(|s| (s.ports.len() == 1).then(|| s.ports[0].port)))
            .unwrap_or(listener_port);
        match self.owns(host) {
            Some(s) => {
                let kind = match s.ports.iter().find(|p| p.port == port) {
                    Some(p) if p.protocol.is_http() || p.protocol == Protocol::Unsupported => "http",
                    Some(_) => "tcp",
                    None => "http",
                };
                let sub = if subset.is_empty() { kind.to_owned() } else { format!("{kind}/{subset}") };
                vip_name(port, &sub, host)
            }
            None => format!("outbound|{port}|{subset}|{host}"),
        }
    }

    /// The HCM of an HTTP chain: inline routes of the service's
    /// VirtualServices (merged, in order), else one default route to the
    /// chain's cluster (`buildWaypointInboundHTTPRouteConfig`).
    fn http_manager(
        &self,
        svc: Option<&Service>,
        port: u16,
        cluster: &str,
        protocol: Protocol,
    ) -> hcm::HttpConnectionManager {
        let mut routes = Vec::new();
        if let Some(svc) = svc {
            for (o, vs) in self.virtual_services_of(svc) {
                if vs.http.is_empty() {
                    continue;
                }
                routes.extend(self.waypoint_routes(o, vs, port));
            }
        }
        // A waypoint's default route is an outbound one (istiod's default
        // retries, no timeout), with a bound on direct response bodies.
        let default = routes.is_empty();
        if default {
            let mut r = istiod_mesh::translate::route::default_route(cluster.to_owned(), Flavor::Envoy);
            // A consistent hash of the service's DestinationRule needs the
            // route's hash policy (istiod's waypoint default route).
            if let (Some(svc), Some(route::route::Action::Route(a))) = (svc, r.action.as_mut())
                && let Some(i) = self.model.rule_index_for(self.namespace, self.labels, &svc.hostname)
            {
                a.hash_policy = istiod_mesh::translate::route::http::hash_policy(
                    &self.model.destination_rules().get(i).rule,
                    port,
                    "",
                );
            }
            routes.push(r);
        }
        let rc = route::RouteConfiguration {
            name: cluster.to_owned(),
            virtual_hosts: vec![route::VirtualHost {
                name: format!("inbound|http|{port}"),
                domains: vec!["*".into()],
                routes,
                ..Default::default()
            }],
            validate_clusters: Some(false),
            max_direct_response_body_size_bytes: default.then_some(1024 * 1024),
            ..Default::default()
        };
        let telemetry = self.telemetry_for(svc);
        let mut manager = hcm::HttpConnectionManager {
            // `inboundChainConfig.StatPrefix`: bind and port, delimited.
            stat_prefix: format!("inbound_0.0.0.0_{port};"),
            server_name: "istio-envoy".into(),
            proxy_100_continue: self.model.mesh.proxy_100_continue,
            http_protocol_options: istiod_mesh::translate::envoy::http10_options(self.model.mesh.http10),
            internal_address_config: (self.model.mesh.hcm_internal_networks)
                .then(|| istiod_mesh::translate::envoy::internal_address_config(&self.model.mesh.networks.mesh))
                .flatten(),
            normalize_path: Some(true),
            upgrade_configs: vec![hcm::http_connection_manager::UpgradeConfig {
                upgrade_type: "websocket".into(),
                ..Default::default()
            }],
            stream_idle_timeout: Some(Duration::default()),
            route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::RouteConfig(rc)),
            http_filters: {
                // istiod's order (`buildWaypointHTTPFilters`): CUSTOM,
                // authentication (jwt_authn), the local policies, the
                // upstream peer metadata, the stats, the router.
                let (custom, local) = self.rbacs(svc, true).split_custom();
                let mut f = custom.http_filters();
                let rules = jwt_rules(self.model, self.namespace, &self.gateway, svc);
                f.extend(istiod_mesh::translate::authn::jwt_filter_of(self.model, rules));
                f.extend(local.http_filters());
                // The HTTP manager's own (`buildHTTPConnectionManager`):
                // gRPC stats, fault injection, CORS.
                f.push(istiod_mesh::translate::telemetry::grpc_stats());
                f.push(http_filter(
                    "envoy.filters.http.fault",
                    &istiod_proto::envoy::extensions::filters::http::fault::v3::HttpFault::default(),
                ));
                f.push(http_filter(
                    "envoy.filters.http.cors",
                    &istiod_proto::envoy::extensions::filters::http::cors::v3::Cors::default(),
                ));
                f.push(waypoint_upstream_peer_metadata());
                f.extend(telemetry.stats.as_ref().map(istiod_mesh::translate::telemetry::stats_http));
                f.push(router());
                f
            },
            access_log: telemetry.log.clone(),
            http2_protocol_options: matches!(protocol, Protocol::Http2 | Protocol::Grpc)
                .then(core::Http2ProtocolOptions::default),
            use_remote_address: Some(false),
            ..Default::default()
        };
        telemetry.trace(&mut manager);
        manager
    }

    /// A VirtualService's HTTP routes in the waypoint (`waypointInboundRoute`):
    /// match blocks with `sourceLabels` dropped (ambient has no source
    /// labels), up to the first catch-all, destinations renamed to the
    /// waypoint's clusters.
    fn waypoint_routes(
        &self,
        o: &istiod_config::istio::IstioObject,
        vs: &istiod_config::istio::networking::VirtualService,
        port: u16,
    ) -> Vec<route::Route> {
        let mut vs = vs.clone();
        let mut cut = None;
        vs.http.retain_mut(|r| {
            if r.matches.is_empty() {
                return true;
            }
            r.matches.retain(|m| m.source_labels.is_empty());
            !r.matches.is_empty()
        });
        if let Some(i) = vs.http.iter().position(|r| r.matches.is_empty()) {
            cut = Some(i + 1);
        }
        if let Some(n) = cut {
            vs.http.truncate(n);
        }
        let mut out = istiod_mesh::translate::route::gateway_routes(self.model, o, &vs, "mesh", port);
        if let Some(i) = out.iter().position(catch_all) {
            out.truncate(i + 1);
        }
        for r in &mut out {
            let Some(route::route::Action::Route(a)) = r.action.as_mut() else { continue };
            match a.cluster_specifier.as_mut() {
                Some(route::route_action::ClusterSpecifier::Cluster(c)) => *c = self.rename(c, port),
                Some(route::route_action::ClusterSpecifier::WeightedClusters(w)) => {
                    for c in &mut w.clusters {
                        c.name = self.rename(&c.name, port);
                    }
                }
                _ => {}
            }
            for m in &mut a.request_mirror_policies {
                m.cluster = self.rename(&m.cluster, port);
            }
            // One destination: its DestinationRule's consistent hash
            // (istiod's `LookupHash` for the route's destination).
            if let Some(route::route_action::ClusterSpecifier::Cluster(c)) = &a.cluster_specifier
                && a.hash_policy.is_empty()
            {
                a.hash_policy = self.hash_policy_of(c);
            }
        }
        out
    }

    /// The hash policy the DestinationRule in force for the waypoint gives
    /// cluster `name`'s destination (its host, port and subset).
    fn hash_policy_of(&self, name: &str) -> Vec<route::route_action::HashPolicy> {
        let mut parts = name.splitn(4, '|');
        let (Some(dir), Some(port), Some(subset), Some(host)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Vec::new();
        };
        let subset = match dir {
            // `http/<subset>` or `tcp/<subset>`.
            "inbound-vip" => subset.split_once('/').map_or("", |(_, s)| s),
            "outbound" => subset,
            _ => return Vec::new(),
        };
        let (Ok(port), Some(i)) = (port.parse::<u16>(), self.model.rule_index_for(self.namespace, self.labels, host))
        else {
            return Vec::new();
        };
        istiod_mesh::translate::route::http::hash_policy(&self.model.destination_rules().get(i).rule, port, subset)
    }

    /// An outbound cluster name as the waypoint's own (`outbound|p|s|h` ->
    /// its inbound-VIP cluster where the waypoint serves `h`).
    fn rename(&self, name: &str, listener_port: u16) -> String {
        let mut parts = name.splitn(4, '|');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("outbound"), Some(p), Some(subset), Some(host)) => {
                self.destination_cluster(host, p.parse().ok(), subset, listener_port)
            }
            _ => name.to_owned(),
        }
    }
}

/// The mesh's VirtualServices by the hosts they name (resolved): a
/// position in the mesh order per exact host, and the wildcard ones.
struct RouteIndex {
    /// Positions in [`Model::mesh_virtual_services`] -> `routing` index.
    order: Vec<usize>,
    exact: std::collections::HashMap<String, Vec<usize>>,
    wildcards: Vec<(String, usize)>,
}

impl RouteIndex {
    fn new(model: &Model) -> RouteIndex {
        let order = model.mesh_virtual_services().to_vec();
        let mut exact: std::collections::HashMap<String, Vec<usize>> = std::collections::HashMap::new();
        let mut wildcards = Vec::new();
        for (at, &i) in order.iter().enumerate() {
            let o = &model.routing[i];
            let istiod_config::istio::IstioSpec::VirtualService(vs) = &o.spec else { continue };
            for h in &vs.hosts {
                let h = model.resolve_host(h, o.meta.ns());
                if h.starts_with('*') {
                    wildcards.push((h, at));
                } else {
                    exact.entry(h).or_default().push(at);
                }
            }
        }
        RouteIndex { order, exact, wildcards }
    }
}

/// istiod's canonical API group (`""` is `core`).
fn canonical_group(g: &str) -> &str {
    if g.is_empty() { "core" } else { g }
}

/// A service a waypoint's policy may name: its name, namespace and
/// whether it is a Kubernetes Service (else a ServiceEntry).
#[derive(Debug, Clone, Copy)]
pub struct PolicyService<'a> {
    /// The Service's (or ServiceEntry's) name.
    pub name: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// A Kubernetes Service.
    pub kubernetes: bool,
}

/// Whether a policy in `policy_ns` with `refs` (its `targetRefs`, else its
/// `targetRef`) attaches to waypoint `gateway` of `waypoint_ns` for traffic
/// to `svc` (istiod's `ShouldAttachPolicy` for a waypoint): only by
/// reference, to the Service (or ServiceEntry) in its namespace, this
/// waypoint's Gateway in its namespace, or the `istio-waypoint`
/// GatewayClass from the root namespace.
pub fn attaches(
    refs: &[&istiod_config::istio::PolicyTargetReference],
    policy_ns: &str,
    root_ns: &str,
    waypoint_ns: &str,
    gateway: &str,
    svc: Option<PolicyService<'_>>,
) -> bool {
    refs.iter().any(|r| {
        let group = canonical_group(&r.group);
        let service = svc.is_some_and(|s| {
            r.name == s.name
                && policy_ns == s.namespace
                && ((group == "core" && r.kind == "Service" && s.kubernetes)
                    || (group == "networking.istio.io" && r.kind == "ServiceEntry" && !s.kubernetes))
        });
        let class = policy_ns == root_ns
            && group == "gateway.networking.k8s.io"
            && r.kind == "GatewayClass"
            && r.name == "istio-waypoint";
        let own = policy_ns == waypoint_ns
            && (r.namespace.is_empty() || r.namespace == waypoint_ns)
            && group == "gateway.networking.k8s.io"
            && r.kind == "Gateway"
            && r.name == gateway;
        service || class || own
    })
}

/// The JWT rules of the RequestAuthentications a waypoint applies to
/// traffic for `svc` (attached as [`attaches`] says), sorted by issuer.
pub fn jwt_rules(
    model: &Model,
    waypoint_ns: &str,
    gateway: &str,
    svc: Option<&Service>,
) -> Vec<istiod_config::istio::security::JwtRule> {
    let svc = svc.map(|s| PolicyService { name: &s.name, namespace: &s.namespace, kubernetes: s.kubernetes });
    let mut rules = Vec::new();
    for o in model.security.iter() {
        let istiod_config::istio::IstioSpec::RequestAuthentication(ra) = &o.spec else { continue };
        let refs: Vec<&istiod_config::istio::PolicyTargetReference> = match ra.target_refs.is_empty() {
            true => ra.target_ref.iter().collect(),
            false => ra.target_refs.iter().collect(),
        };
        if attaches(&refs, o.meta.ns(), &model.mesh.root_namespace, waypoint_ns, gateway, svc) {
            rules.extend(ra.jwt_rules.iter().cloned());
        }
    }
    rules.sort_by(|a, b| a.issuer.cmp(&b.issuer));
    rules
}

/// The AuthorizationPolicies a waypoint applies to traffic for `svc`
/// (none: its direct workload chains), in the model's order ([`attaches`]).
pub fn policies<'m>(
    model: &'m Model,
    waypoint_ns: &str,
    gateway: &str,
    svc: Option<&Service>,
) -> Vec<(&'m istiod_config::istio::IstioObject, &'m istiod_config::istio::security::AuthorizationPolicy)> {
    let svc = svc.map(|s| PolicyService { name: &s.name, namespace: &s.namespace, kubernetes: s.kubernetes });
    let root = &model.mesh.root_namespace;
    let mut out = Vec::new();
    for o in model.security.iter() {
        let istiod_config::istio::IstioSpec::AuthorizationPolicy(ap) = &o.spec else { continue };
        let refs: Vec<&istiod_config::istio::PolicyTargetReference> = match ap.target_refs.is_empty() {
            true => ap.target_ref.iter().collect(),
            false => ap.target_refs.iter().collect(),
        };
        if attaches(&refs, o.meta.ns(), root, waypoint_ns, gateway, svc) {
            out.push((o, ap));
        }
    }
    out
}

/// `connect_originate` (`buildConnectOriginate`): ORIGINAL_DST on 15008,
/// HTTP/2 CONNECT, mutual TLS; a waypoint also checks the peer's SPIFFE
/// prefix (its trust domain and namespace).
/// An HTTP/2 window size as istiod sends it: none for 0.
fn window(size: u32) -> Option<u32> {
    (size > 0).then_some(size)
}

fn connect_originate_cluster(model: &Model, san: Option<(&str, &str)>) -> Cluster {
    let mut ctx = connect_tls_context(model);
    if let (
        Some((trust_domain, ns)),
        Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(v)),
    ) = (san, ctx.validation_context_type.as_mut())
    {
        let prefix = format!("spiffe://{trust_domain}/ns/{ns}/sa/");
        v.default_validation_context.get_or_insert_default().match_typed_subject_alt_names.push(uri_prefix(prefix));
    }
    let options = upstream_http::HttpProtocolOptions {
        common_http_protocol_options: Some(core::HttpProtocolOptions {
            idle_timeout: Some(Duration { seconds: 3600, nanos: 0 }),
            ..Default::default()
        }),
        upstream_protocol_options: Some(upstream_http::http_protocol_options::UpstreamProtocolOptions::ExplicitHttpConfig(
            upstream_http::http_protocol_options::ExplicitHttpConfig {
                protocol_config: Some(
                    upstream_http::http_protocol_options::explicit_http_config::ProtocolConfig::Http2ProtocolOptions(
                        core::Http2ProtocolOptions {
                            allow_connect: true,
                            // PILOT_HBONE_INITIAL_{STREAM,CONNECTION}_WINDOW_SIZE
                            // (0: Envoy's own, the field unset).
                            initial_stream_window_size: window(model.mesh.hbone_window_sizes[0]),
                            initial_connection_window_size: window(model.mesh.hbone_window_sizes[1]),
                            ..Default::default()
                        },
                    ),
                ),
            },
        )),
        ..Default::default()
    };
    Cluster {
        name: CONNECT_ORIGINATE.into(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::OriginalDst as i32,
        )),
        lb_policy: cluster::cluster::LbPolicy::ClusterProvided as i32,
        connect_timeout: Some(connect_timeout(model)),
        cleanup_interval: Some(Duration { seconds: 60, nanos: 0 }),
        circuit_breakers: Some(default_circuit_breakers(model)),
        typed_extension_protocol_options: [(protocol_options_key(), any(&options))].into_iter().collect(),
        lb_config: Some(cluster::cluster::LbConfig::OriginalDstLbConfig(cluster::cluster::OriginalDstLbConfig {
            upstream_port_override: Some(HBONE_PORT),
            metadata_key: Some(metadata::MetadataKey {
                key: ORIGINAL_DST_KEY.into(),
                path: vec![metadata::metadata_key::PathSegment {
                    segment: Some(metadata::metadata_key::path_segment::Segment::Key("waypoint".into())),
                }],
            }),
            ..Default::default()
        })),
        transport_socket: Some(core::TransportSocket {
            name: "tls".into(),
            config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(&tls::UpstreamTlsContext {
                common_tls_context: Some(ctx),
                ..Default::default()
            }))),
        }),
        alt_stat_name: format!("{CONNECT_ORIGINATE};"),
        ..Default::default()
    }
}

/// Whether a route matches every request (a `/` prefix, nothing else).
fn catch_all(r: &route::Route) -> bool {
    r.r#match.as_ref().is_some_and(|m| {
        matches!(&m.path_specifier, Some(route::route_match::PathSpecifier::Prefix(p)) if p == "/")
            && m.headers.is_empty()
            && m.query_parameters.is_empty()
    })
}

/// istiod's `IsTCP`.
fn is_tcp(p: Protocol) -> bool {
    matches!(p, Protocol::Tcp | Protocol::Https | Protocol::Tls | Protocol::Mongo | Protocol::Redis | Protocol::MySql)
}

/// `inbound-vip|<port>|<subset>|<host>`.
pub fn vip_name(port: u16, subset: &str, host: &str) -> String {
    format!("inbound-vip|{port}|{subset}|{host}")
}

fn istio_mutual_socket(ts: &core::TransportSocket) -> bool {
    let Some(core::transport_socket::ConfigType::TypedConfig(a)) = &ts.config_type else { return false };
    let Ok(ctx) = tls::UpstreamTlsContext::decode(a.value.as_slice()) else { return false };
    ctx.common_tls_context.is_some_and(|c| c.tls_certificate_sds_secret_configs.iter().any(|s| s.name == "default"))
}

fn raw_buffer() -> core::TransportSocket {
    core::TransportSocket {
        name: "raw_buffer".into(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(&RawBuffer {}))),
    }
}

/// Where passed-through metadata is read: the host's or the cluster's.
#[derive(Clone, Copy)]
enum MetadataFrom {
    Host,
    Cluster,
}
use MetadataFrom::{Cluster as ClusterMetadata, Host};

fn internal_upstream(name: &str, inner: core::TransportSocket, pass: &[(MetadataFrom, &str)]) -> core::TransportSocket {
    let passthrough_metadata = pass
        .iter()
        .map(|(from, key)| MetadataValueSource {
            kind: Some(metadata::MetadataKind {
                kind: Some(match from {
                    Host => metadata::metadata_kind::Kind::Host(metadata::metadata_kind::Host {}),
                    ClusterMetadata => metadata::metadata_kind::Kind::Cluster(metadata::metadata_kind::Cluster {}),
                }),
            }),
            name: (*key).to_owned(),
        })
        .collect();
    core::TransportSocket {
        name: name.to_owned(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(&InternalUpstreamTransport {
            passthrough_metadata,
            transport_socket: Some(inner),
        }))),
    }
}

fn internal_address(listener: &str, endpoint_id: &str) -> core::Address {
    core::Address {
        address: Some(core::address::Address::EnvoyInternalAddress(core::EnvoyInternalAddress {
            address_name_specifier: Some(core::envoy_internal_address::AddressNameSpecifier::ServerListenerName(
                listener.to_owned(),
            )),
            endpoint_id: endpoint_id.to_owned(),
        })),
    }
}

fn socket_of(a: Option<&core::Address>) -> Option<(String, u16)> {
    let Some(core::address::Address::SocketAddress(s)) = a?.address.as_ref() else { return None };
    let Some(core::socket_address::PortSpecifier::PortValue(p)) = s.port_specifier else { return None };
    Some((s.address.clone(), p as u16))
}

fn strings(kv: &[(&str, &str)]) -> Struct {
    Struct {
        fields: kv
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value { kind: Some(ValueKind::StringValue((*v).to_owned())) }))
            .collect(),
    }
}

fn default_circuit_breakers(model: &Model) -> cluster::CircuitBreakers {
    cluster::CircuitBreakers {
        thresholds: vec![istiod_mesh::translate::traffic_policy::default_thresholds(model.mesh.track_remaining)],
        ..Default::default()
    }
}

fn connect_timeout(model: &Model) -> Duration {
    istiod_mesh::translate::cluster::timeout(&model.mesh)
}

fn protocol_options_key() -> String {
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".into()
}

/// A static cluster to internal listener `to` (`buildInternalUpstreamCluster`,
/// HTTP/2 passthrough of the downstream protocol).
fn internal_cluster(model: &Model, name: &str, to: &str) -> Cluster {
    let options = istiod_mesh::translate::dfp::passthrough_http_options();
    Cluster {
        name: name.to_owned(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::Static as i32,
        )),
        circuit_breakers: Some(default_circuit_breakers(model)),
        load_assignment: Some(ep::ClusterLoadAssignment {
            cluster_name: name.to_owned(),
            endpoints: vec![ep::LocalityLbEndpoints {
                lb_endpoints: vec![ep::LbEndpoint {
                    host_identifier: Some(ep::lb_endpoint::HostIdentifier::Endpoint(ep::Endpoint {
                        address: Some(internal_address(to, "")),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
        transport_socket: Some(internal_upstream("internal_upstream", raw_buffer(), &[])),
        typed_extension_protocol_options: [(protocol_options_key(), any(&options))].into_iter().collect(),
        alt_stat_name: format!("{name};"),
        ..Default::default()
    }
}

/// The TLS context of HBONE (`buildCommonConnectTLSContext`): the
/// workload certificate and root from the agent's SDS, HTTP/2, TLS 1.3 only.
fn connect_tls_context(model: &Model) -> tls::CommonTlsContext {
    // The peer's SPIFFE identity must be of the mesh's trust domain or an
    // alias (istiod's `TrustDomainsForValidation`).
    let mut domains: Vec<&String> =
        std::iter::once(&model.mesh.trust_domain).chain(&model.mesh.trust_domain_aliases).collect();
    domains.dedup();
    let sans = domains.into_iter().map(|td| uri_prefix(format!("spiffe://{td}/"))).collect();
    let mut ctx = tls::CommonTlsContext {
        tls_certificate_sds_secret_configs: vec![sds("default")],
        validation_context_type: Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(
            tls::common_tls_context::CombinedCertificateValidationContext {
                default_validation_context: Some(tls::CertificateValidationContext {
                    match_typed_subject_alt_names: sans,
                    ..Default::default()
                }),
                validation_context_sds_secret_config: Some(sds("ROOTCA")),
                ..Default::default()
            },
        )),
        alpn_protocols: vec!["h2".into()],
        tls_params: Some(tls::TlsParameters {
            tls_minimum_protocol_version: tls::tls_parameters::TlsProtocol::TlSv13 as i32,
            tls_maximum_protocol_version: tls::tls_parameters::TlsProtocol::TlSv13 as i32,
            ..Default::default()
        }),
        ..Default::default()
    };
    // Compliance, last (istiod's waypoint listener and clusters).
    istiod_mesh::translate::envoy::enforce_compliance(&mut ctx);
    ctx
}

/// A URI SAN matcher on `prefix`.
fn uri_prefix(prefix: String) -> tls::SubjectAltNameMatcher {
    tls::SubjectAltNameMatcher {
        san_type: tls::subject_alt_name_matcher::SanType::Uri as i32,
        matcher: Some(istiod_proto::envoy::r#type::matcher::v3::StringMatcher {
            match_pattern: Some(istiod_proto::envoy::r#type::matcher::v3::string_matcher::MatchPattern::Prefix(prefix)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `connect_terminate` (`buildConnectTerminateListener`).
fn connect_terminate(model: &Model) -> Listener {
    let routes = vec![route::Route {
        r#match: Some(route::RouteMatch {
            path_specifier: Some(route::route_match::PathSpecifier::ConnectMatcher(
                route::route_match::ConnectMatcher::default(),
            )),
            ..Default::default()
        }),
        action: Some(route::route::Action::Route(route::RouteAction {
            upgrade_configs: vec![route::route_action::UpgradeConfig {
                upgrade_type: "CONNECT".into(),
                connect_config: Some(route::route_action::upgrade_config::ConnectConfig::default()),
                ..Default::default()
            }],
            cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(MAIN_INTERNAL.into())),
            ..Default::default()
        })),
        ..Default::default()
    }];
    let manager = hcm::HttpConnectionManager {
        stat_prefix: CONNECT_TERMINATE.into(),
        server_name: "istio-envoy".into(),
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::RouteConfig(route::RouteConfiguration {
            name: "default".into(),
            virtual_hosts: vec![route::VirtualHost {
                name: "default".into(),
                domains: vec!["*".into()],
                routes,
                ..Default::default()
            }],
            ..Default::default()
        })),
        forward_client_cert_details: hcm::http_connection_manager::ForwardClientCertDetails::AppendForward as i32,
        set_current_client_cert_details: Some(hcm::http_connection_manager::SetCurrentClientCertDetails {
            subject: Some(true),
            uri: true,
            dns: true,
            ..Default::default()
        }),
        use_remote_address: Some(false),
        stream_idle_timeout: Some(Duration::default()),
        upgrade_configs: vec![hcm::http_connection_manager::UpgradeConfig {
            upgrade_type: "CONNECT".into(),
            ..Default::default()
        }],
        http2_protocol_options: Some(core::Http2ProtocolOptions {
            allow_connect: true,
            max_concurrent_streams: Some(100),
            connection_keepalive: Some(core::KeepaliveSettings {
                interval: Some(Duration { seconds: 10, nanos: 0 }),
                timeout: Some(Duration { seconds: 20, nanos: 0 }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        http_filters: vec![waypoint_downstream_peer_metadata(), connect_authority_http(), router()],
        ..Default::default()
    };
    Listener {
        name: CONNECT_TERMINATE.into(),
        address: socket("0.0.0.0", HBONE_PORT),
        filter_chains: vec![FilterChain {
            name: "default".into(),
            transport_socket: Some(core::TransportSocket {
                name: "tls".into(),
                config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(&tls::DownstreamTlsContext {
                    common_tls_context: Some(connect_tls_context(model)),
                    require_client_certificate: Some(true),
                    ..Default::default()
                }))),
            }),
            filters: vec![http_connection_manager(&manager)],
            ..Default::default()
        }],
        connection_balance_config: Some(listener::listener::ConnectionBalanceConfig {
            balance_type: Some(listener::listener::connection_balance_config::BalanceType::ExactBalance(
                listener::listener::connection_balance_config::ExactBalance {},
            )),
        }),
        ..Default::default()
    }
}

/// `connect_originate` (`buildConnectOriginateListener`): every connection
/// is tunnelled to its original destination.
fn connect_originate() -> Listener {
    let t = tcp::TcpProxy {
        stat_prefix: CONNECT_ORIGINATE.into(),
        cluster_specifier: Some(tcp::tcp_proxy::ClusterSpecifier::Cluster(CONNECT_ORIGINATE.into())),
        tunneling_config: Some(tcp::tcp_proxy::TunnelingConfig {
            hostname: "%DOWNSTREAM_LOCAL_ADDRESS%".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    Listener {
        name: CONNECT_ORIGINATE.into(),
        use_original_dst: Some(false),
        listener_specifier: Some(listener::listener::ListenerSpecifier::InternalListener(
            listener::listener::InternalListenerConfig::default(),
        )),
        listener_filters: vec![listener_filter("envoy.filters.listener.original_dst", &OriginalDst {}, None)],
        filter_chains: vec![FilterChain {
            filters: vec![Filter {
                name: "envoy.filters.network.tcp_proxy".into(),
                config_type: Some(listener::filter::ConfigType::TypedConfig(any(&t))),
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn listener_filter<M: istiod_proto::prost::Name>(
    name: &str,
    config: &M,
    disabled: Option<listener::ListenerFilterChainMatchPredicate>,
) -> ListenerFilter {
    ListenerFilter {
        name: name.to_owned(),
        config_type: Some(listener::listener_filter::ConfigType::TypedConfig(any(config))),
        filter_disabled: disabled,
    }
}

/// The filter is off on `ports` (`listenerPredicateExcludePorts`).
pub fn exclude_ports(ports: &[u16]) -> listener::ListenerFilterChainMatchPredicate {
    use listener::listener_filter_chain_match_predicate::{MatchSet, Rule};
    let mut rules: Vec<listener::ListenerFilterChainMatchPredicate> = ports
        .iter()
        .map(|p| listener::ListenerFilterChainMatchPredicate {
            rule: Some(Rule::DestinationPortRange(istiod_proto::envoy::r#type::v3::Int32Range {
                start: i32::from(*p),
                end: i32::from(*p) + 1,
            })),
        })
        .collect();
    if rules.len() == 1 {
        return rules.remove(0);
    }
    listener::ListenerFilterChainMatchPredicate { rule: Some(Rule::OrMatch(MatchSet { rules })) }
}

fn input<M: istiod_proto::prost::Name>(name: &str, m: &M) -> TypedExtensionConfig {
    TypedExtensionConfig { name: name.to_owned(), typed_config: Some(any(m)) }
}

/// An action naming filter chain `name` (`match.ToChain`).
fn to_chain(name: &str) -> matcher::OnMatch {
    matcher::OnMatch {
        on_match: Some(matcher::on_match::OnMatch::Action(TypedExtensionConfig {
            name: name.to_owned(),
            typed_config: Some(any(&name.to_owned())),
        })),
        ..Default::default()
    }
}

fn to_matcher(m: Matcher) -> matcher::OnMatch {
    matcher::OnMatch { on_match: Some(matcher::on_match::OnMatch::Matcher(Box::new(m))), ..Default::default() }
}

fn tree(
    input: TypedExtensionConfig,
    map: BTreeMap<String, matcher::OnMatch>,
    no_match: Option<matcher::OnMatch>,
) -> Matcher {
    Matcher {
        matcher_type: Some(matcher::MatcherType::MatcherTree(matcher::MatcherTree {
            input: Some(input),
            tree_type: Some(matcher::matcher_tree::TreeType::ExactMatchMap(matcher::matcher_tree::MatchMap { map })),
        })),
        on_no_match: no_match.map(Box::new),
    }
}

/// HTTP by the application protocol the inspector saw, else TCP
/// (`match.NewAppProtocol`; HTTP/1.0 too under `PILOT_HTTP10`).
fn app_protocol(tcp_chain: &str, http_chain: &str, http10: bool) -> Matcher {
    let http10 = http10.then_some(("'http/1.0'", http_chain));
    let map = [("'h2c'", http_chain), ("'http/1.1'", http_chain)]
        .into_iter()
        .chain(http10)
        .map(|(k, c)| (k.to_owned(), to_chain(c)))
        .collect();
    tree(input("application-protocol", &ApplicationProtocolInput {}), map, Some(to_chain(tcp_chain)))
}

fn cidr(ip: &str) -> CidrRange {
    let (addr, len) = match ip.split_once('/') {
        Some((a, l)) => (a.to_owned(), l.parse().unwrap_or(32)),
        None => (ip.to_owned(), if ip.contains(':') { 128 } else { 32 }),
    };
    CidrRange { address_prefix: addr, prefix_len: Some(len) }
}

fn format_value(key: &str, format: &str, factory: &str) -> FilterStateValue {
    FilterStateValue {
        key: Some(filter_state_value::Key::ObjectKey(key.to_owned())),
        factory_key: factory.to_owned(),
        value: Some(filter_state_value::Value::FormatString(core::SubstitutionFormatString {
            format: Some(core::substitution_format_string::Format::TextFormatSource(core::DataSource {
                specifier: Some(core::data_source::Specifier::InlineString(format.to_owned())),
                ..Default::default()
            })),
            ..Default::default()
        })),
        shared_with_upstream: filter_state_value::SharedWithUpstream::Once as i32,
        ..Default::default()
    }
}

/// `connect_authority` (HTTP): the CONNECT authority as the original
/// destination, for `main_internal`'s original_dst filter.
fn connect_authority_http() -> hcm::HttpFilter {
    let config = HttpSetFilterState {
        on_request_headers: vec![
            format_value(LOCAL_IP_KEY, "%REQ(:AUTHORITY)%", ""),
            format_value("io.istio.connect_authority", "%REQ(:AUTHORITY)%", "istio.hashable_string"),
            format_value("envoy.filters.listener.original_dst.remote_ip", "%DOWNSTREAM_REMOTE_ADDRESS%", ""),
            // The peer's identity, which the waypoint's policies read.
            format_value("io.istio.peer_principal", "%DOWNSTREAM_PEER_URI_SAN%", "istio.hashable_string"),
            format_value("io.istio.local_principal", "%DOWNSTREAM_LOCAL_URI_SAN%", "istio.hashable_string"),
        ],
    };
    http_filter("connect_authority", &config)
}

/// `connect_authority` (network), on the direct workload chains.
fn connect_authority_network() -> Filter {
    let config = NetworkSetFilterState {
        on_new_connection: vec![format_value(
            LOCAL_IP_KEY,
            "%FILTER_STATE(envoy.filters.listener.original_dst.local_ip:PLAIN)%",
            "",
        )],
    };
    Filter {
        name: "connect_authority".into(),
        config_type: Some(listener::filter::ConfigType::TypedConfig(any(&config))),
    }
}

/// Istio's peer_metadata filter (a TypedStruct: istio/proxy's own type).
fn peer_metadata(name: &str, fields: serde_json::Value) -> hcm::HttpFilter {
    let typed = istiod_proto::udpa::r#type::v1::TypedStruct {
        type_url: "type.googleapis.com/io.istio.http.peer_metadata.Config".into(),
        value: Some(json_struct(&fields)),
    };
    http_filter(name, &typed)
}

fn waypoint_downstream_peer_metadata() -> hcm::HttpFilter {
    peer_metadata(
        "waypoint_downstream_peer_metadata",
        serde_json::json!({"downstream_discovery": [{"workload_discovery": {}}], "shared_with_upstream": true}),
    )
}

fn waypoint_upstream_peer_metadata() -> hcm::HttpFilter {
    peer_metadata(
        "waypoint_upstream_peer_metadata",
        serde_json::json!({"upstream_discovery": [{"workload_discovery": {}}]}),
    )
}

fn json_struct(v: &serde_json::Value) -> Struct {
    match json_value(v).kind {
        Some(ValueKind::StructValue(s)) => s,
        _ => Struct::default(),
    }
}

fn json_value(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    let kind = match v {
        J::Null => ValueKind::NullValue(0),
        J::Bool(b) => ValueKind::BoolValue(*b),
        J::Number(n) => ValueKind::NumberValue(n.as_f64().unwrap_or_default()),
        J::String(s) => ValueKind::StringValue(s.clone()),
        J::Array(a) => {
            ValueKind::ListValue(istiod_proto::prost_types::ListValue { values: a.iter().map(json_value).collect() })
        }
        J::Object(o) => {
            ValueKind::StructValue(Struct { fields: o.iter().map(|(k, v)| (k.clone(), json_value(v))).collect() })
        }
    };
    Value { kind: Some(kind) }
}

#[cfg(test)]
mod tests;
