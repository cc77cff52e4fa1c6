//! What a sidecar receives about its own workload, generated per proxy
//! class on the serving cores (`MeshGenerator`): the `virtualInbound`
//! listener with a filter chain per inbound port, mTLS as PeerAuthentication
//! says (STRICT: TLS only; PERMISSIVE: TLS and plaintext, told apart by the
//! tls_inspector; DISABLE: plaintext), and an `inbound|<port>||` cluster per
//! port. Everything else comes from the shared resources.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use istiod_kubewatch::istio::IstioSpec;
use istiod_kubewatch::istio::security::MtlsMode;
use istiod_proto::envoy::config::cluster::v3::{Cluster, cluster};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::listener::v3::{
    Filter, FilterChain, FilterChainMatch, Listener, ListenerFilter, filter, listener_filter,
};
use istiod_proto::envoy::config::route::v3 as route;
use istiod_proto::envoy::extensions::filters::http::router::v3::Router;
use istiod_proto::envoy::extensions::filters::listener::{
    http_inspector::v3::HttpInspector, original_dst::v3::OriginalDst, tls_inspector::v3::TlsInspector,
};
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3 as tcp;
use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;
use istiod_proto::prost::Message;
use istiod_proto::prost_types::{Any, Duration};
use istiod_xds::ads::node::{NodeType, ProxyClass};
use istiod_xds::ads::{Generator, Kind, SimpleGenerator, Snapshot};

use crate::model::{Model, Protocol};

/// The inbound listener's name.
pub const VIRTUAL_INBOUND: &str = "virtualInbound";

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
    pub scoping: crate::scope::Scoping,
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
        if name.ends_with(crate::simple::NO_DR) {
            return None; // never served under its own name
        }
        let Some(rest) = name.strip_prefix("outbound|") else { return Some(Cow::Borrowed(name)) };
        let mut parts = rest.splitn(3, '|');
        let (_, subset, host) = (parts.next(), parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
        let hidden = self.dr_export.get(host).is_some_and(|ns| !ns.iter().any(|n| **n == *class.namespace));
        match (hidden, subset.is_empty(), kind) {
            (false, _, _) => Some(Cow::Borrowed(name)),
            (true, false, _) => None,
            (true, true, Kind::Cluster) => Some(Cow::Owned(format!("{name}{}", crate::simple::NO_DR))),
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
        let scoping = crate::scope::Scoping::new(&model);
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
            IstioSpec::VirtualService(vs) => crate::grpc_xds::vs_export(vs, o.meta.ns()).is_some(),
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

use crate::grpc_xds::any;

/// An inbound port of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundPort {
    /// Port the workload listens on.
    pub port: u16,
    /// Protocol of the service port.
    pub protocol: Protocol,
    /// mTLS mode in force for it.
    pub mtls: MtlsMode,
}

fn selects(selector: &BTreeMap<String, String>, labels: &[(Arc<str>, Arc<str>)]) -> bool {
    !selector.is_empty()
        && selector.iter().all(|(k, v)| labels.iter().any(|(lk, lv)| &**lk == k.as_str() && &**lv == v.as_str()))
}

/// The mTLS mode a service's workloads accept on `port`, as far as it can
/// be known without looking at each workload (istiod's
/// `BestEffortInferServiceMTLSMode`): unknown (`None`) when some
/// workload-level PeerAuthentication exists in the service's namespace,
/// else the namespace's or the mesh's mode. Auto mTLS sends plaintext to a
/// service known to be DISABLE.
pub fn service_mtls_mode(model: &Model, svc: &crate::model::Service, port: u16) -> Option<MtlsMode> {
    let workload_level = model.security.iter().any(|o| {
        matches!(&o.spec, IstioSpec::PeerAuthentication(pa)
            if o.meta.ns() == svc.namespace && pa.selector.as_ref().is_some_and(|s| !s.match_labels.is_empty()))
    });
    if workload_level {
        return None;
    }
    let class = ProxyClass {
        node_type: NodeType::Sidecar,
        namespace: svc.namespace.as_str().into(),
        generator: "".into(),
        labels: Vec::new(),
        locality: "".into(),
    };
    Some(mtls_mode(model, &class, port))
}

/// The mTLS mode of `port` for a workload: the workload's own
/// PeerAuthentication (port-level first), else its namespace's, else the
/// mesh-wide one in the root namespace, else PERMISSIVE (istiod's rules; UNSET
/// inherits from the level above).
pub fn mtls_mode(model: &Model, class: &ProxyClass, port: u16) -> MtlsMode {
    let mut workload = None;
    let mut namespace = None;
    let mut mesh = None;
    for o in &model.security {
        let IstioSpec::PeerAuthentication(pa) = &o.spec else { continue };
        let sel = pa.selector.as_ref().map(|s| &s.match_labels).filter(|m| !m.is_empty());
        match sel {
            Some(sel) if o.meta.ns() == &*class.namespace && selects(sel, &class.labels) => {
                workload.get_or_insert(pa);
            }
            None if o.meta.ns() == &*class.namespace => {
                namespace.get_or_insert(pa);
            }
            None if o.meta.ns() == model.mesh.root_namespace => {
                mesh.get_or_insert(pa);
            }
            _ => {}
        }
    }
    if let Some(mode) = workload
        .and_then(|pa| pa.port_level_mtls.as_ref())
        .and_then(|ports| ports.get(&u32::from(port)))
        .map(|m| m.mode)
        .filter(|m| *m != MtlsMode::Unset)
    {
        return mode;
    }
    [workload, namespace, mesh]
        .into_iter()
        .flatten()
        .filter_map(|pa| pa.mtls.as_ref().map(|m| m.mode))
        .find(|m| *m != MtlsMode::Unset)
        .unwrap_or(MtlsMode::Permissive)
}

/// The workload's inbound ports: target ports of the services in its
/// namespace whose selector matches its labels.
pub fn inbound_ports(model: &Model, class: &ProxyClass) -> Vec<InboundPort> {
    let mut ports: BTreeMap<u16, InboundPort> = BTreeMap::new();
    for svc in
        model.services.values().filter(|s| s.namespace == *class.namespace && selects(&s.selector, &class.labels))
    {
        for p in &svc.ports {
            // The workload's own port: from an endpoint of this workload,
            // else the Service's numeric target port, else the port.
            let target = svc
                .endpoints
                .iter()
                .find(|e| {
                    e.service_port == p.port
                        && class.labels.iter().all(|(k, v)| e.labels.get(&**k).is_some_and(|ev| **ev == **v))
                })
                .map_or(p.target_port.unwrap_or(p.port), |e| e.port);
            ports.entry(target).or_insert(InboundPort {
                port: target,
                protocol: p.protocol,
                mtls: mtls_mode(model, class, target),
            });
        }
    }
    ports.into_values().collect()
}

fn inbound_cluster(port: u16) -> Cluster {
    Cluster {
        name: format!("inbound|{port}||"),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::OriginalDst as i32)),
        lb_policy: cluster::LbPolicy::ClusterProvided as i32,
        connect_timeout: Some(Duration { seconds: 10, nanos: 0 }),
        upstream_bind_config: Some(core::BindConfig {
            source_address: Some(core::SocketAddress {
                address: "127.0.0.6".into(),
                port_specifier: Some(core::socket_address::PortSpecifier::PortValue(0)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// istiod's inbound mTLS: the workload certificate from SDS `default`,
/// peers verified against `ROOTCA`, a client certificate required.
fn downstream_mtls(alpn: &[&str]) -> core::TransportSocket {
    let ctx = tls::DownstreamTlsContext {
        common_tls_context: Some(tls::CommonTlsContext {
            tls_certificate_sds_secret_configs: vec![crate::traffic_policy::sds("default")],
            validation_context_type: Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(
                tls::common_tls_context::CombinedCertificateValidationContext {
                    default_validation_context: Some(tls::CertificateValidationContext::default()),
                    validation_context_sds_secret_config: Some(crate::traffic_policy::sds("ROOTCA")),
                    ..Default::default()
                },
            )),
            alpn_protocols: alpn.iter().map(|a| (*a).to_owned()).collect(),
            ..Default::default()
        }),
        require_client_certificate: Some(true),
        ..Default::default()
    };
    core::TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(&ctx))),
    }
}

fn network_filters(model: &Model, class: &ProxyClass, p: &InboundPort) -> Vec<Filter> {
    let cluster = format!("inbound|{}||", p.port);
    let rbacs = crate::authz::rbacs(model, class, p.protocol.is_http());
    if p.protocol.is_http() {
        let mut http_filters: Vec<hcm::HttpFilter> = [rbacs.deny, rbacs.allow]
            .into_iter()
            .flatten()
            .map(|rules| hcm::HttpFilter {
                name: "envoy.filters.http.rbac".into(),
                config_type: Some(hcm::http_filter::ConfigType::TypedConfig(any(
                    &istiod_proto::envoy::extensions::filters::http::rbac::v3::Rbac {
                        rules: Some(rules),
                        ..Default::default()
                    },
                ))),
                ..Default::default()
            })
            .collect();
        http_filters.push(hcm::HttpFilter {
            name: "envoy.filters.http.router".into(),
            config_type: Some(hcm::http_filter::ConfigType::TypedConfig(any(&Router::default()))),
            ..Default::default()
        });
        let rc = route::RouteConfiguration {
            name: cluster.clone(),
            virtual_hosts: vec![route::VirtualHost {
                name: format!("inbound|http|{}", p.port),
                domains: vec!["*".into()],
                routes: vec![route::Route {
                    name: "default".into(),
                    r#match: Some(route::RouteMatch {
                        path_specifier: Some(route::route_match::PathSpecifier::Prefix("/".into())),
                        ..Default::default()
                    }),
                    action: Some(route::route::Action::Route(route::RouteAction {
                        cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(cluster.clone())),
                        timeout: Some(Duration::default()),
                        ..Default::default()
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            validate_clusters: Some(false),
            ..Default::default()
        };
        let manager = hcm::HttpConnectionManager {
            stat_prefix: format!("inbound_0.0.0.0_{}", p.port),
            route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::RouteConfig(rc)),
            http_filters,
            ..Default::default()
        };
        vec![Filter {
            name: "envoy.filters.network.http_connection_manager".into(),
            config_type: Some(filter::ConfigType::TypedConfig(any(&manager))),
        }]
    } else {
        let t = tcp::TcpProxy {
            stat_prefix: cluster.clone(),
            cluster_specifier: Some(tcp::tcp_proxy::ClusterSpecifier::Cluster(cluster)),
            ..Default::default()
        };
        vec![Filter {
            name: "envoy.filters.network.tcp_proxy".into(),
            config_type: Some(filter::ConfigType::TypedConfig(any(&t))),
        }]
    }
}

/// Filter chains for one port (or the passthrough when `port` is `None`),
/// by mTLS mode.
fn chains(name: &str, port: Option<u16>, mode: MtlsMode, filters: Vec<Filter>) -> Vec<FilterChain> {
    let chain = |tls: bool| FilterChain {
        name: format!("{name}{}", if tls { "-tls" } else { "" }),
        filter_chain_match: Some(FilterChainMatch {
            destination_port: port.map(u32::from),
            transport_protocol: if mode == MtlsMode::Permissive || mode == MtlsMode::Strict {
                (if tls { "tls" } else { "raw_buffer" }).into()
            } else {
                String::new()
            },
            ..Default::default()
        }),
        filters: filters.clone(),
        transport_socket: tls.then(|| downstream_mtls(&["istio-peer-exchange", "h2", "http/1.1"])),
        ..Default::default()
    };
    match mode {
        MtlsMode::Strict => vec![chain(true)],
        MtlsMode::Permissive | MtlsMode::Unset => vec![chain(true), chain(false)],
        MtlsMode::Disable => vec![chain(false)],
    }
}

/// The `virtualInbound` listener of a workload.
pub fn virtual_inbound(model: &Model, class: &ProxyClass) -> Listener {
    let mut filter_chains = Vec::new();
    for p in inbound_ports(model, class) {
        filter_chains.extend(chains(
            &format!("inbound|{}", p.port),
            Some(p.port),
            p.mtls,
            network_filters(model, class, &p),
        ));
    }
    let passthrough = tcp::TcpProxy {
        stat_prefix: "InboundPassthroughCluster".into(),
        cluster_specifier: Some(tcp::tcp_proxy::ClusterSpecifier::Cluster("InboundPassthroughCluster".into())),
        ..Default::default()
    };
    let passthrough = vec![Filter {
        name: "envoy.filters.network.tcp_proxy".into(),
        config_type: Some(filter::ConfigType::TypedConfig(any(&passthrough))),
    }];
    // Ports no service names follow the workload-wide mode.
    let mode = mtls_mode(model, class, 0);
    filter_chains.extend(chains("virtualInbound-catchall", None, mode, passthrough));
    let lf = |name: &str, a: Any| ListenerFilter {
        name: name.into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(a)),
        ..Default::default()
    };
    Listener {
        name: VIRTUAL_INBOUND.into(),
        address: Some(core::Address {
            address: Some(core::address::Address::SocketAddress(core::SocketAddress {
                address: "0.0.0.0".into(),
                port_specifier: Some(core::socket_address::PortSpecifier::PortValue(crate::sidecar::INBOUND_PORT)),
                ..Default::default()
            })),
        }),
        traffic_direction: core::TrafficDirection::Inbound as i32,
        listener_filters: vec![
            lf("envoy.filters.listener.original_dst", any(&OriginalDst::default())),
            lf("envoy.filters.listener.tls_inspector", any(&TlsInspector::default())),
            lf("envoy.filters.listener.http_inspector", any(&HttpInspector::default())),
        ],
        filter_chains,
        ..Default::default()
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
            names.retain(|n| !n.ends_with(crate::simple::NO_DR) && m.shared_name(class, kind, n).is_some());
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
            && let Some(local) = crate::locality::endpoints_for(&m.model, &class.locality, name, &shared)
        {
            shared = local;
        }
        if kind == Kind::Cluster && &*class.generator == "grpc" {
            let c = crate::grpc_xds::for_grpc_client(Cluster::decode(shared).ok()?);
            shared = Bytes::from(c.encode_to_vec());
        }
        let Some(m) = mesh(snap).filter(|m| m.per_class_outbound()) else { return Some(shared) };
        if !m.scoping.allows(&m.model, class, kind, name) {
            return None;
        }
        let policy = crate::scope::outbound_policy(&m.model, class);
        if kind == Kind::Listener && name == "virtualOutbound" && policy != m.model.mesh.outbound {
            // The Sidecar overrides the mesh's policy for unknown destinations.
            let mut l = Listener::decode(shared).ok()?;
            let catchall = match policy {
                crate::mesh::OutboundPolicy::AllowAny => "PassthroughCluster",
                crate::mesh::OutboundPolicy::RegistryOnly => "BlackHoleCluster",
            };
            for fc in &mut l.filter_chains {
                fc.filters = vec![crate::sidecar::tcp_proxy(catchall, catchall)];
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
            *last = crate::sidecar::fallback_host(policy == crate::mesh::OutboundPolicy::AllowAny);
        }
        if m.source_matching || m.vs_export {
            for vh in &mut rc.virtual_hosts {
                vh.routes.retain_mut(|r| {
                    let export = crate::grpc_xds::take_export_match(r, &class.namespace);
                    let source = crate::grpc_xds::take_source_match(r, &class.namespace, &class.labels);
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
