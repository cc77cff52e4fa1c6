//! What a sidecar receives about its own workload: the `virtualInbound`
//! listener with a filter chain per inbound port, mTLS as PeerAuthentication
//! says (STRICT: TLS only; PERMISSIVE: TLS and plaintext, told apart by the
//! tls_inspector; DISABLE: plaintext), AuthorizationPolicy as RBAC filters,
//! and an `inbound|<port>||` cluster per port.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::node::ProxyClass;
use istiod_config::istio::security::MtlsMode;
use istiod_proto::envoy::config::cluster::v3::{Cluster, cluster};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::listener::v3::{
    Filter, FilterChain, FilterChainMatch, Listener, ListenerFilter, listener_filter,
};
use istiod_proto::envoy::config::route::v3 as route;
use istiod_proto::envoy::extensions::filters::listener::{
    http_inspector::v3::HttpInspector, original_dst::v3::OriginalDst, tls_inspector::v3::TlsInspector,
};
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;
use istiod_proto::prost_types::{Any, Duration};

use crate::model::{Model, Protocol};

use super::envoy::{any, http_connection_manager, http_filter, router, tcp_proxy_logged};
use super::telemetry;
use istiod_proto::envoy::extensions::filters::http::cors::v3::Cors;
use istiod_proto::envoy::extensions::filters::http::fault::v3::HttpFault;

/// The inbound listener's name.
pub const VIRTUAL_INBOUND: &str = "virtualInbound";

/// An inbound port of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundPort {
    /// Port the workload listens on.
    pub port: u16,
    /// Protocol of the service port.
    pub protocol: Protocol,
    /// mTLS mode in force for it.
    pub mtls: MtlsMode,
    /// A Sidecar `ingress` listener's `bind` and `defaultEndpoint` (empty
    /// for a service's port).
    pub ingress: Option<(String, String)>,
    /// A Sidecar `ingress` listener's `tls`, with
    /// `ENABLE_TLS_ON_SIDECAR_INGRESS` set: terminated on the port when its
    /// mTLS is disabled.
    pub tls: Option<Box<istiod_config::istio::networking::ServerTlsSettings>>,
    /// The first service serving the port and its port number (istiod's
    /// `inboundServices[0]`: its DestinationRule's connection pool applies
    /// to the inbound cluster).
    pub service: Option<(Arc<str>, u16)>,
}

/// `getSidecarInboundBindIPs`: the proxy's first global unicast address
/// (Go's `IsGlobalUnicast`: not unspecified, loopback, link-local,
/// multicast or broadcast), else the wildcard.
fn sidecar_inbound_bind(class: &ProxyClass) -> String {
    let global = |ip: &std::net::IpAddr| match ip {
        std::net::IpAddr::V4(a) => {
            !(a.is_unspecified() || a.is_loopback() || a.is_link_local() || a.is_multicast() || a.is_broadcast())
        }
        std::net::IpAddr::V6(a) => {
            !(a.is_unspecified() || a.is_loopback() || a.is_multicast() || (a.segments()[0] & 0xffc0) == 0xfe80)
        }
    };
    class
        .ips
        .iter()
        .find(|ip| ip.parse::<std::net::IpAddr>().is_ok_and(|a| global(&a)))
        .map_or_else(|| "0.0.0.0".to_owned(), |ip| ip.to_string())
}

fn selects(selector: &BTreeMap<String, String>, labels: &[(Arc<str>, Arc<str>)]) -> bool {
    !selector.is_empty() && crate::model::has_labels(labels, selector)
}

/// The addresses services claim by endpoint rather than by selector (a
/// ServiceEntry's inline endpoints, a Service without selector and its
/// EndpointSlices): a proxy at one of them serves the service, as istiod
/// finds a proxy's services by its IP.
pub fn claimed_ips(model: &Model) -> std::collections::HashSet<Arc<str>> {
    model
        .services
        .values()
        .filter(|s| s.selector.is_empty())
        .flat_map(|s| s.endpoints.iter().map(|e| Arc::from(e.address.as_str())))
        .collect()
}

/// Whether `svc` claims one of the proxy's addresses by endpoint (a
/// service of the proxy's namespace, as istiod's registries answer
/// `GetProxyServiceTargets`).
pub(crate) fn claims(svc: &crate::model::Service, class: &ProxyClass) -> bool {
    svc.selector.is_empty()
        && svc.namespace == *class.namespace
        && svc.endpoints.iter().any(|e| class.ips.iter().any(|ip| **ip == *e.address))
}

/// Why a proxy has no service targets, in istiod's `reason` words
/// (`GetProxyServiceTargets`); `None` when it has some or istiod would
/// not ask. A pod's (labels, not a VM's WorkloadEntry)
/// `no_matching_services`; else `no_matching_metadata`. istiod tells a pod
/// by finding it in its cache; a sidecar's pod is there.
pub fn missing_service_targets(model: &Model, class: &ProxyClass) -> Option<&'static str> {
    // istiod's aggregate registry asks only the proxy's own cluster's
    // registry (so `incorrect_cluster` is never counted in practice), and
    // only for proxies with addresses; its Kubernetes registry looks at
    // Kubernetes Services only.
    let ours = &model.mesh.networks.cluster_id;
    let aliases = &model.mesh.networks.cluster_aliases;
    let cluster = aliases.get(&*class.cluster_id).map_or(&*class.cluster_id, String::as_str);
    if (!cluster.is_empty() && !ours.is_empty() && cluster != ours.as_str()) || class.ips.is_empty() {
        return None;
    }
    let serves = |s: &crate::model::Service| {
        s.kubernetes && ((s.namespace == *class.namespace && selects(&s.selector, &class.labels)) || claims(s, class))
    };
    if model.services_in(&class.namespace).map(Arc::as_ref).any(serves) {
        return None;
    }
    Some(reason(class))
}

/// A VM's proxy: one of a WorkloadGroup (`AUTO_REGISTER_GROUP`) or of a
/// WorkloadEntry it keeps healthy (`WORKLOAD_ENTRY`).
pub(crate) fn vm_proxy(class: &ProxyClass) -> bool {
    class.metadata.iter().any(|(k, v)| matches!(&**k, "AUTO_REGISTER_GROUP" | "WORKLOAD_ENTRY") && !v.is_empty())
}

/// istiod's `reason` for a proxy without service targets: a VM's or a
/// proxy without labels `no_matching_metadata`, else `no_matching_services`.
pub(crate) fn reason(class: &ProxyClass) -> &'static str {
    if vm_proxy(class) || class.labels.is_empty() { "no_matching_metadata" } else { "no_matching_services" }
}

/// The workload's inbound ports: target ports of the services in its
/// namespace whose selector matches its labels, or that claim its address.
pub fn inbound_ports(model: &Model, class: &ProxyClass) -> Vec<InboundPort> {
    let mut ports: BTreeMap<u16, InboundPort> = BTreeMap::new();
    // A Sidecar with `ingress` listeners replaces the services' ports
    // (`buildInboundChainConfigs`), unless
    // PILOT_ALLOW_SIDECAR_SERVICE_INBOUND_LISTENER_MERGE (off by default)
    // adds the services' other target ports (the Sidecar's win).
    let ingress = super::scope::sidecar(model, class).map(|sc| sc.ingress.as_slice()).unwrap_or_default();
    if !ingress.is_empty() {
        for i in ingress {
            let Some(port) = i.port.as_ref().and_then(|p| u16::try_from(p.number).ok().map(|n| (n, p))) else {
                continue;
            };
            let (number, p) = port;
            let bind = if i.bind.is_empty() { sidecar_inbound_bind(class) } else { i.bind.clone() };
            let tls = i.tls.clone().filter(|_| model.mesh.tls_on_sidecar_ingress).map(Box::new);
            // The first listener of a port wins (istiod keeps the oldest).
            ports.entry(number).or_insert(InboundPort {
                port: number,
                protocol: Protocol::parse(&p.protocol),
                mtls: super::authn::mtls_mode(model, class, number),
                ingress: Some((bind, i.default_endpoint.clone())),
                tls,
                // istiod's findOrCreateService: a service of the workload
                // whose target port is the listener's, at the listener's
                // port number.
                service: model
                    .services_in(&class.namespace)
                    .filter(|s| {
                        (s.namespace == *class.namespace && selects(&s.selector, &class.labels)) || claims(s, class)
                    })
                    .find(|s| s.ports.iter().any(|sp| sp.target_port.unwrap_or(sp.port) == number))
                    .map(|s| (s.hostname.clone(), number)),
            });
        }
        if !model.mesh.features.sidecar_inbound_merge {
            return ports.into_values().collect();
        }
    }
    for svc in model
        .services_in(&class.namespace)
        .filter(|s| (s.namespace == *class.namespace && selects(&s.selector, &class.labels)) || claims(s, class))
    {
        for p in &svc.ports {
            // The workload's own port: from an endpoint of this workload,
            // else the Service's numeric target port, else the port.
            let mine = |e: &&crate::model::Endpoint| {
                e.service_port == p.port
                    && match claims(svc, class) {
                        true => class.ips.iter().any(|ip| **ip == *e.address),
                        false => class.labels.iter().all(|(k, v)| e.labels.get(&**k).is_some_and(|ev| **ev == **v)),
                    }
            };
            if claims(svc, class) && !svc.endpoints.iter().any(|e| mine(&e)) {
                // Its endpoints at this address do not serve this port.
                continue;
            }
            let target = svc.endpoints.iter().find(mine).map_or(p.target_port.unwrap_or(p.port), |e| e.port);
            ports.entry(target).or_insert(InboundPort {
                port: target,
                protocol: p.protocol,
                mtls: super::authn::mtls_mode(model, class, target),
                ingress: None,
                tls: None,
                service: Some((svc.hostname.clone(), p.port)),
            });
        }
    }
    ports.into_values().collect()
}

/// The hosts of the workload's services that serve its port `port` (an
/// inbound cluster's services, for EnvoyFilter cluster matches).
pub(crate) fn inbound_hosts(model: &Model, class: &ProxyClass, port: u16) -> Vec<std::sync::Arc<str>> {
    model
        .services_in(&class.namespace)
        .filter(|s| (s.namespace == *class.namespace && selects(&s.selector, &class.labels)) || claims(s, class))
        .filter(|s| {
            s.ports.iter().any(|p| {
                s.endpoints.iter().any(|e| e.service_port == p.port && e.port == port)
                    || p.target_port.unwrap_or(p.port) == port
            })
        })
        .map(|s| s.hostname.clone())
        .collect()
}

/// A Sidecar ingress `defaultEndpoint`'s host (brackets off) and port.
fn default_endpoint_host(e: &str) -> (&str, &str) {
    let (host, n) = e.rsplit_once(':').unwrap_or((e, ""));
    (host.trim_start_matches('[').trim_end_matches(']'), n)
}

/// Whether a Sidecar ingress `defaultEndpoint` names the workload's own
/// address (`0.0.0.0:<port>`, `[::]:<port>`), which its inbound cluster
/// is sent to.
pub(crate) fn default_endpoint_is_own(e: &str) -> bool {
    !e.starts_with("unix://") && matches!(default_endpoint_host(e).0, "0.0.0.0" | "::")
}

/// `inbound|<port>||` (cluster.go `buildInboundClustersFromServiceInstances`,
/// cluster_builder.go `buildInboundCluster`): to the address the
/// connection was for, leaving from 127.0.0.6 so iptables lets it through;
/// with `inboundTrafficPolicy.mode: LOCALHOST`, a static cluster to
/// 127.0.0.1 on the port.
pub(crate) fn inbound_cluster(model: &Model, p: &InboundPort, class: &ProxyClass) -> Cluster {
    let mesh = &model.mesh;
    let port = p.port;
    let name = format!("inbound|{port}||");
    // A Sidecar ingress `defaultEndpoint` (cluster_builder.go
    // `buildInboundClusterForPortOrUDS`): `127.0.0.1:N`, `0.0.0.0:N` (the
    // workload's own address) or `unix:///path`.
    let target: Option<core::Address> = match p.ingress.as_ref().map(|(_, e)| e.as_str()).unwrap_or("") {
        // (An IPv6 proxy's localhost is ::1, cluster.go's actualLocalHosts.)
        "" if mesh.inbound_localhost => {
            let v6 = super::family::ip_mode(&class.ips) == super::family::IpMode::V6;
            super::envoy::socket(if v6 { "::1" } else { "127.0.0.1" }, u32::from(port))
        }
        "" => None,
        e if e.starts_with("unix://") => Some(core::Address {
            address: Some(core::address::Address::Pipe(core::Pipe {
                path: e.trim_start_matches("unix://").to_owned(),
                ..Default::default()
            })),
        }),
        e => {
            let (host, n) = default_endpoint_host(e);
            let host = match host {
                "0.0.0.0" | "::" => class.ips.first().map(|s| s.to_string()).unwrap_or_else(|| "127.0.0.1".into()),
                h => h.to_owned(),
            };
            super::envoy::socket(&host, n.parse().unwrap_or(u32::from(port)))
        }
    };
    let mut c = if let Some(address) = target {
        use istiod_proto::envoy::config::endpoint::v3 as ep;
        let endpoint = ep::LbEndpoint {
            host_identifier: Some(ep::lb_endpoint::HostIdentifier::Endpoint(ep::Endpoint {
                address: Some(address),
                ..Default::default()
            })),
            ..Default::default()
        };
        Cluster {
            cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::Static as i32)),
            connect_timeout: Some(super::cluster::timeout(mesh)),
            load_assignment: Some(ep::ClusterLoadAssignment {
                cluster_name: name.clone(),
                endpoints: vec![ep::LocalityLbEndpoints { lb_endpoints: vec![endpoint], ..Default::default() }],
                ..Default::default()
            }),
            name,
            ..Default::default()
        }
    } else {
        Cluster {
            name,
            cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
                cluster::DiscoveryType::OriginalDst as i32,
            )),
            lb_policy: cluster::LbPolicy::ClusterProvided as i32,
            connect_timeout: Some(super::cluster::timeout(mesh)),
            // istiod's passthrough bind addresses of the proxy's family;
            // both of a dual-stack proxy's under ISTIO_DUAL_STACK.
            upstream_bind_config: Some(super::family::bind_config(
                super::family::ip_mode(&class.ips).passthrough_binds(mesh.dual_stack),
            )),
            ..Default::default()
        }
    };
    // The application's HTTP version (HTTP/2 for the HTTP/2 family, the
    // downstream's on a sniffed port), circuit breakers, the mesh's TCP
    // keepalive: istiod's buildCluster and applyConnectionPool.
    let up = super::traffic_policy::Upstream { protocol: p.protocol, sniffs: true, outbound: false };
    // The workload's services on the port (none for a Sidecar ingress
    // listener no service backs: istiod's dummy service is mesh-external).
    // istiod lists the first one's and those of the same service port
    // (addTelemetryMetadata), none where the first is mesh-external; a
    // Sidecar ingress port, its one service.
    if let Some((first, service_port)) = &p.service
        && let Some(svc) = model.services.get(first).map(Arc::as_ref).filter(|s| !s.mesh_external)
    {
        let others = match p.ingress {
            Some(_) => Vec::new(),
            None => inbound_hosts(model, class, p.port),
        };
        let same_port = |s: &&crate::model::Service| s.ports.iter().any(|sp| sp.port == *service_port);
        let rest = others
            .iter()
            .filter(|h| *h != first)
            .filter_map(|h| model.services.get(h).map(Arc::as_ref))
            .filter(same_port);
        c.metadata = super::cluster::telemetry_metadata(mesh, std::iter::once(svc).chain(rest));
    }
    let policy = inbound_policy(model, p, class);
    let (cp, budget) = (policy.connection_pool.as_ref(), policy.retry_budget.as_ref());
    super::traffic_policy::connection(&mut c, mesh, up, cp, budget);
    c
}

/// What shapes an inbound cluster's connection pool (cluster_builder.go
/// `buildInboundCluster`): the DestinationRule of its first service as the
/// workload's namespace sees it (workload selectors are for clients), at
/// the service port; the mesh's `defaultTrafficPolicy` below it; the
/// Sidecar's `connectionPool` for the port, else its
/// `inboundConnectionPool`, over both.
fn inbound_policy(
    model: &Model,
    p: &InboundPort,
    class: &ProxyClass,
) -> istiod_config::istio::networking::TrafficPolicy {
    use istiod_config::istio::networking::TrafficPolicy;
    let rule = p.service.as_ref().and_then(|(host, port)| {
        let i = model.rule_index_for(&class.namespace, &[], host)?;
        let tp = model.destination_rules().get(i).rule.traffic_policy.clone()?;
        Some(super::traffic_policy::for_port(&tp, *port).0)
    });
    let mut policy: TrafficPolicy = rule.unwrap_or_default();
    super::traffic_policy::seed(&mut policy, &model.mesh.default_traffic_policy);
    if let Some(sc) = super::scope::sidecar(model, class) {
        let own = sc.ingress.iter().find(|i| i.port.as_ref().is_some_and(|x| x.number == u32::from(p.port)));
        if let Some(cp) = own.and_then(|i| i.connection_pool.clone()).or_else(|| sc.inbound_connection_pool.clone()) {
            policy.connection_pool = Some(cp);
        }
    }
    policy
}

/// istiod's `TrustDomainsForValidation`: the trust domain, its aliases and
/// the trust domains of meshConfig `caCertificates`, each once (none under
/// `PILOT_SKIP_VALIDATE_TRUST_DOMAIN`).
fn trust_domains_for_validation(mesh: &crate::meshconfig::MeshSettings) -> Vec<String> {
    if mesh.skip_validate_trust_domain {
        return Vec::new();
    }
    let all = std::iter::once(&mesh.trust_domain)
        .chain(&mesh.trust_domain_aliases)
        .chain(mesh.ca_certificates.iter().flat_map(|c| &c.trust_domains));
    let mut out: Vec<String> = Vec::new();
    for td in all.filter(|t| !t.is_empty()) {
        if !out.contains(td) {
            out.push(td.clone());
        }
    }
    out
}

/// istiod's `SupportedCiphers`: inbound mesh mTLS's cipher suites unless
/// meshConfig `meshMTLS.cipherSuites` names others.
const SUPPORTED_CIPHERS: [&str; 6] = [
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "AES256-GCM-SHA384",
    "AES128-GCM-SHA256",
];

/// istiod's `BuildInboundTLS` TLS parameters: TLS 1.2 (1.3 where
/// `meshMTLS.minProtocolVersion` says `TLSV1_3`) to 1.3, the mesh's cipher
/// suites or [`SUPPORTED_CIPHERS`].
fn inbound_tls_params(mesh_mtls: &crate::meshconfig::TlsDefaults) -> tls::TlsParameters {
    use tls::tls_parameters::TlsProtocol;
    let min = match mesh_mtls.min_protocol_version.as_deref() {
        Some("TLSV1_3") => TlsProtocol::TlSv13,
        _ => TlsProtocol::TlSv12,
    };
    let ciphers: Vec<String> = match mesh_mtls.cipher_suites.is_empty() {
        true => SUPPORTED_CIPHERS.iter().map(|c| (*c).to_owned()).collect(),
        false => mesh_mtls.cipher_suites.clone(),
    };
    tls::TlsParameters {
        tls_minimum_protocol_version: min as i32,
        tls_maximum_protocol_version: TlsProtocol::TlSv13 as i32,
        cipher_suites: ciphers,
        ..Default::default()
    }
}

/// The inbound mesh mTLS of HTTP and of TCP chains (`InboundMTLSSettings`):
/// HTTP offers `h2`, `http/1.1`; TCP also `istio-peer-exchange` first,
/// unless `PILOT_DISABLE_MX_ALPN`.
fn inbound_mtls(mesh: &crate::meshconfig::MeshSettings) -> (core::TransportSocket, core::TransportSocket) {
    let trust_domains = trust_domains_for_validation(mesh);
    let params = inbound_tls_params(&mesh.mesh_mtls);
    let http: &[&str] = &["h2", "http/1.1"];
    let mx = mesh.metadata_exchange && !mesh.disable_mx_alpn;
    let tcp: &[&str] = if mx { &["istio-peer-exchange", "h2", "http/1.1"] } else { http };
    (downstream_mtls(http, &trust_domains, &params), downstream_mtls(tcp, &trust_domains, &params))
}

/// istiod's inbound mTLS: the workload certificate from SDS `default`,
/// peers verified against `ROOTCA` and, as `ApplyToCommonTLSContext`, by
/// a SPIFFE URI of one of `trust_domains` (`spiffe://<td>/` prefixes), a
/// client certificate required, `params` its TLS versions and ciphers.
fn downstream_mtls(alpn: &[&str], trust_domains: &[String], params: &tls::TlsParameters) -> core::TransportSocket {
    use istiod_proto::envoy::r#type::matcher::v3 as matcher;
    let san = |td: &String| matcher::StringMatcher {
        match_pattern: Some(matcher::string_matcher::MatchPattern::Prefix(format!("spiffe://{td}/"))),
        ..Default::default()
    };
    #[allow(deprecated)] // istiod sets `match_subject_alt_names`
    let validation = tls::CertificateValidationContext {
        match_subject_alt_names: trust_domains.iter().map(san).collect(),
        ..Default::default()
    };
    let mut ctx = tls::DownstreamTlsContext {
        common_tls_context: Some(tls::CommonTlsContext {
            tls_certificate_sds_secret_configs: vec![crate::translate::envoy::sds("default")],
            validation_context_type: Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(
                tls::common_tls_context::CombinedCertificateValidationContext {
                    default_validation_context: Some(validation),
                    validation_context_sds_secret_config: Some(crate::translate::envoy::sds("ROOTCA")),
                    ..Default::default()
                },
            )),
            alpn_protocols: alpn.iter().map(|a| (*a).to_owned()).collect(),
            tls_params: Some(params.clone()),
            ..Default::default()
        }),
        require_client_certificate: Some(true),
        ..Default::default()
    };
    // Compliance for downstream mesh mTLS (istiod's BuildInboundTLS).
    if let Some(common) = ctx.common_tls_context.as_mut() {
        crate::translate::envoy::enforce_compliance(common);
    }
    core::TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(&ctx))),
    }
}

/// What a workload's chains enforce, the same on every port of a protocol:
/// built once per class, not once per port.
struct Policies {
    /// Inbound mesh mTLS of HTTP chains.
    mtls_http: core::TransportSocket,
    /// Inbound mesh mTLS of TCP chains.
    mtls_tcp: core::TransportSocket,
    jwt: Option<hcm::HttpFilter>,
    http: crate::translate::authz::Rbacs,
    tcp: crate::translate::authz::Rbacs,
    /// The stats filter and access log.
    telemetry: telemetry::Side,
    /// The protocol filters TCP chains of Mongo and Redis ports take.
    protocol_filters: crate::meshconfig::ProtocolFilters,
    /// `ENABLE_100_CONTINUE_HEADERS`.
    proxy_100_continue: bool,
    /// `PILOT_HTTP10`.
    http10: bool,
    /// Metadata exchange's additional labels; `None` under
    /// `PILOT_ENABLE_METADATA_EXCHANGE=false`.
    mx: Option<Vec<String>>,
    /// `ENABLE_HCM_INTERNAL_NETWORKS`: the meshNetworks internal ranges.
    internal_addresses: Option<hcm::http_connection_manager::InternalAddressConfig>,
}

/// An inbound HTTP chain's filters: metadata exchange and the HCM, whose
/// inline route sends everything to `cluster` (virtual host
/// `inbound|http|<port>`).
fn http_chain_filters(policies: &Policies, cluster: &str, port: u16, stat_prefix: &str) -> Vec<Filter> {
    // istiod's order for a sidecar's inbound HTTP (listener_builder.go):
    // metadata exchange, CUSTOM authorization, jwt_authn before the local
    // RBAC (which reads what it verified), gRPC stats, fault, CORS, stats,
    // the router.
    let mut http_filters: Vec<hcm::HttpFilter> =
        policies.mx.as_deref().map(|l| telemetry::mx_http(true, l)).into_iter().collect();
    let (custom, local) = policies.http.clone().split_custom();
    http_filters.extend(custom.http_filters());
    http_filters.extend(policies.jwt.iter().cloned());
    http_filters.extend(local.http_filters());
    http_filters.push(telemetry::grpc_stats());
    http_filters.push(http_filter(crate::translate::route::FAULT_FILTER, &HttpFault::default()));
    http_filters.push(http_filter("envoy.filters.http.cors", &Cors::default()));
    http_filters.extend(policies.telemetry.stats.as_ref().map(telemetry::stats_http));
    http_filters.push(router());
    let rc = route::RouteConfiguration {
        name: cluster.to_owned(),
        virtual_hosts: vec![route::VirtualHost {
            name: format!("inbound|http|{port}"),
            domains: vec!["*".into()],
            routes: vec![route::Route {
                name: "default".into(),
                r#match: Some(route::RouteMatch {
                    path_specifier: Some(route::route_match::PathSpecifier::Prefix("/".into())),
                    ..Default::default()
                }),
                action: Some(route::route::Action::Route(route::RouteAction {
                    cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(cluster.to_owned())),
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
    let mut manager = hcm::HttpConnectionManager {
        stat_prefix: stat_prefix.to_owned(),
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::RouteConfig(rc)),
        http_filters,
        access_log: policies.telemetry.log.clone(),
        proxy_100_continue: policies.proxy_100_continue,
        http_protocol_options: super::envoy::http10_options(policies.http10),
        internal_address_config: policies.internal_addresses.clone(),
        ..Default::default()
    };
    policies.telemetry.trace(&mut manager);
    policies.mx.as_deref().map(telemetry::mx_network).into_iter().chain([http_connection_manager(&manager)]).collect()
}

/// A TCP chain's filters: the class's RBAC (DENY, then ALLOW) as network
/// filters, then the tcp_proxy (istiod: `authz.Builder.BuildTCP`, stat
/// prefix `tcp.`). Without them an AuthorizationPolicy was not enforced
/// on TCP ports at all.
fn tcp_filters(policies: &Policies, protocol: Protocol, stat_prefix: &str, cluster: &str) -> Vec<Filter> {
    // networkfilter.go: metadata exchange, authorization, stats, the
    // protocol's filter, tcp_proxy.
    let mut out: Vec<Filter> = policies.mx.as_deref().map(telemetry::mx_network).into_iter().collect();
    out.extend(policies.tcp.clone().network_filters());
    out.extend(policies.telemetry.stats.as_ref().map(telemetry::stats_network));
    let tcp = tcp_proxy_logged(stat_prefix, cluster, &policies.telemetry.log);
    out.extend(super::envoy::protocol_stack(policies.protocol_filters, protocol, stat_prefix, cluster, tcp));
    out
}

/// How an inbound port's traffic is handled (istiod's `ListenerProtocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handling {
    Http,
    Tcp,
    /// Sniffed: HTTP and TCP chains told apart by ALPN.
    Auto,
}

fn handling(p: Protocol) -> Handling {
    match p {
        p if p.is_http() => Handling::Http,
        Protocol::Unsupported => Handling::Auto,
        _ => Handling::Tcp,
    }
}

/// One filter chain match of a port (istiod's `FilterChainMatchOptions`).
struct MatchOpt {
    alpn: &'static [&'static str],
    transport: &'static str,
    http: bool,
    tls: bool,
}

const MTLS_HTTP_ALPNS: &[&str] = &["istio-http/1.0", "istio-http/1.1", "istio-h2"];
const MTLS_TCP_MXC_ALPNS: &[&str] = &["istio-peer-exchange", "istio"];
const ALL_ISTIO_MTLS_ALPNS: &[&str] = &["istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"];

/// `getFilterChainMatchOptions` (filterchain_options.go): by protocol and
/// mTLS mode. PERMISSIVE takes only Istio's ALPNs as mTLS; other TLS
/// passes as opaque TCP.
fn match_options(mode: MtlsMode, h: Handling, http10: bool) -> Vec<MatchOpt> {
    let plain = crate::translate::listener::plaintext_http_alpns(http10);
    let o = |alpn, transport, http, tls| MatchOpt { alpn, transport, http, tls };
    let none: &[&str] = &[];
    match (h, mode) {
        (Handling::Http, MtlsMode::Strict) => vec![o(none, "tls", true, true)],
        (Handling::Http, MtlsMode::Disable) => vec![o(none, "raw_buffer", true, false)],
        (Handling::Http, _) => vec![o(ALL_ISTIO_MTLS_ALPNS, "tls", true, true), o(none, "raw_buffer", true, false)],
        (Handling::Auto, MtlsMode::Strict) => vec![o(MTLS_HTTP_ALPNS, "tls", true, true), o(none, "tls", false, true)],
        (Handling::Auto, MtlsMode::Disable) => {
            vec![o(plain, "raw_buffer", true, false), o(none, "raw_buffer", false, false)]
        }
        (Handling::Auto, _) => vec![
            o(MTLS_HTTP_ALPNS, "tls", true, true),
            o(plain, "raw_buffer", true, false),
            o(MTLS_TCP_MXC_ALPNS, "tls", false, true),
            o(none, "raw_buffer", false, false),
            o(none, "tls", false, false),
        ],
        (Handling::Tcp, MtlsMode::Strict) => vec![o(none, "tls", false, true)],
        (Handling::Tcp, MtlsMode::Disable) => vec![o(none, "raw_buffer", false, false)],
        (Handling::Tcp, _) => vec![
            o(ALL_ISTIO_MTLS_ALPNS, "tls", false, true),
            o(none, "tls", false, false),
            o(none, "raw_buffer", false, false),
        ],
    }
}

/// One port's chains (`inboundChainForOpts`): the passthrough's (`bind`
/// none; port 0 matches any port) are named `virtualInbound` and
/// `virtualInbound-catchall-http`; a port's `<bind>_<port>`.
/// `custom`: a Sidecar ingress listener's own TLS
/// (`getTLSFilterChainMatchOptions`: one chain on TLS, no ALPN).
fn port_chains(
    policies: &Policies,
    port: u16,
    mode: MtlsMode,
    h: Handling,
    protocol: Protocol,
    bind: Option<&str>,
    custom: Option<&core::TransportSocket>,
) -> Vec<FilterChain> {
    let passthrough = bind.is_none();
    let options = match custom {
        Some(_) => vec![MatchOpt { alpn: &[], transport: "tls", http: h == Handling::Http, tls: true }],
        None => match_options(mode, h, policies.http10),
    };
    let cluster = if passthrough { "InboundPassthroughCluster".to_owned() } else { format!("inbound|{port}||") };
    let name = |http: bool| match (bind, http) {
        (None, true) => "virtualInbound-catchall-http".to_owned(),
        (None, false) => VIRTUAL_INBOUND.to_owned(),
        (Some(b), _) => format!("{b}_{port}"),
    };
    options
        .into_iter()
        .map(|o| FilterChain {
            name: name(o.http),
            filter_chain_match: Some(FilterChainMatch {
                destination_port: (port != 0).then_some(u32::from(port)),
                transport_protocol: o.transport.into(),
                application_protocols: o.alpn.iter().map(|a| (*a).to_owned()).collect(),
                ..Default::default()
            }),
            filters: match o.http {
                true => {
                    let stat = match bind {
                        None => cluster.clone(),
                        Some(b) => format!("inbound_{b}_{port}"),
                    };
                    http_chain_filters(policies, &cluster, port, &stat)
                }
                false => tcp_filters(policies, protocol, &cluster, &cluster),
            },
            transport_socket: match custom {
                Some(t) => Some(t.clone()),
                None => o.tls.then(|| if o.http { policies.mtls_http.clone() } else { policies.mtls_tcp.clone() }),
            },
            ..Default::default()
        })
        .collect()
}

/// `virtualInbound-blackhole`: traffic addressed to 15006 itself is
/// dropped rather than looping.
fn blackhole(policies: &Policies) -> FilterChain {
    let mut filters: Vec<Filter> = policies.mx.as_deref().map(telemetry::mx_network).into_iter().collect();
    filters.extend(policies.telemetry.stats.as_ref().map(telemetry::stats_network));
    filters.push(tcp_proxy_logged("BlackHoleCluster", "BlackHoleCluster", &[]));
    FilterChain {
        name: "virtualInbound-blackhole".into(),
        filter_chain_match: Some(FilterChainMatch {
            destination_port: Some(crate::translate::listener::INBOUND_PORT),
            ..Default::default()
        }),
        filters,
        ..Default::default()
    }
}

/// `populateListenerFilters`: the original destination, then the TLS and
/// HTTP inspectors where some chain needs them, disabled on the ports
/// whose chains do not (port 0: the passthrough chains, every other port).
fn listener_filters(chains: &[FilterChain]) -> Vec<ListenerFilter> {
    use istiod_proto::envoy::config::listener::v3::{
        ListenerFilterChainMatchPredicate as Pred, listener_filter_chain_match_predicate as pred,
    };
    let lf = |name: &str, a: Any, disabled: Option<Pred>| ListenerFilter {
        name: name.into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(a)),
        filter_disabled: disabled,
    };
    // port -> (TLS inspector, HTTP inspector)
    let mut need: BTreeMap<u32, (bool, bool)> = BTreeMap::new();
    for c in chains {
        let m = c.filter_chain_match.clone().unwrap_or_default();
        let e = need.entry(m.destination_port.unwrap_or(0)).or_default();
        e.0 |= m.transport_protocol == "tls";
        e.1 |= m.application_protocols.iter().any(|a| a == "http/1.1" || a == "h2c");
    }
    let ranges = |ports: &[u32]| -> Pred {
        let mut rules: Vec<Pred> = ports
            .iter()
            .map(|p| Pred {
                rule: Some(pred::Rule::DestinationPortRange(istiod_proto::envoy::r#type::v3::Int32Range {
                    start: *p as i32,
                    end: *p as i32 + 1,
                })),
            })
            .collect();
        match rules.len() {
            1 => rules.remove(0),
            _ => Pred { rule: Some(pred::Rule::OrMatch(pred::MatchSet { rules })) },
        }
    };
    let mut out = vec![lf("envoy.filters.listener.original_dst", any(&OriginalDst::default()), None)];
    if need.values().any(|n| n.0) {
        let default_on = need.get(&0).is_some_and(|n| n.0);
        let ports: Vec<u32> = need.iter().filter(|(p, n)| **p != 0 && n.0 != default_on).map(|(p, _)| *p).collect();
        let disabled = match (ports.is_empty(), default_on) {
            (true, _) => None,
            // Enabled by default: disabled on these ports.
            (false, true) => Some(ranges(&ports)),
            // Enabled only on these ports.
            (false, false) => Some(Pred { rule: Some(pred::Rule::NotMatch(Box::new(ranges(&ports)))) }),
        };
        out.push(lf("envoy.filters.listener.tls_inspector", any(&TlsInspector::default()), disabled));
    }
    if need.values().any(|n| n.1) {
        let ports: Vec<u32> = need.iter().filter(|(_, n)| !n.1).map(|(p, _)| *p).collect();
        let disabled = (!ports.is_empty()).then(|| ranges(&ports));
        out.push(lf("envoy.filters.listener.http_inspector", any(&HttpInspector::default()), disabled));
    }
    out
}

/// The `virtualInbound` listener of a workload.
pub fn virtual_inbound(model: &Model, class: &ProxyClass) -> Listener {
    let (mtls_http, mtls_tcp) = inbound_mtls(&model.mesh);
    let policies = Policies {
        mtls_http,
        mtls_tcp,
        jwt: crate::translate::authn::jwt_filter(model, class),
        http: crate::translate::authz::rbacs(model, class, true),
        tcp: crate::translate::authz::rbacs(model, class, false),
        telemetry: telemetry::inbound(model, class),
        protocol_filters: model.mesh.protocol_filters,
        proxy_100_continue: model.mesh.proxy_100_continue,
        http10: model.mesh.http10,
        mx: model.mesh.metadata_exchange.then(|| model.mesh.mx_additional_labels.clone()),
        internal_addresses: model
            .mesh
            .hcm_internal_networks
            .then(|| super::envoy::internal_address_config(&model.mesh.networks.mesh))
            .flatten(),
    };
    // The blackhole and passthrough chains (`buildInboundPassthroughChains`):
    // the workload-wide mode, then each port-level mode for a port no
    // service names.
    let ports = inbound_ports(model, class);
    let mut filter_chains = vec![blackhole(&policies)];
    let mode = super::authn::mtls_mode(model, class, 0);
    filter_chains.extend(port_chains(&policies, 0, mode, Handling::Auto, Protocol::Unsupported, None, None));
    for port in super::authn::port_level_ports(model, class) {
        if !ports.iter().any(|p| p.port == port) {
            let mode = super::authn::mtls_mode(model, class, port);
            filter_chains.extend(port_chains(&policies, port, mode, Handling::Auto, Protocol::Unsupported, None, None));
        }
    }
    for p in &ports {
        let bind = p.ingress.as_ref().map_or("0.0.0.0", |(b, _)| b.as_str());
        // The ingress listener's own TLS applies where mTLS is disabled;
        // the port's protocol is then what TLS carries (HTTPS: HTTP, TLS:
        // TCP).
        match p.tls.as_deref().filter(|_| p.mtls == MtlsMode::Disable) {
            Some(t) => {
                let h = match p.protocol {
                    Protocol::Https => Handling::Http,
                    Protocol::Tls | Protocol::Unsupported => Handling::Tcp,
                    other => handling(other),
                };
                let ctx = super::gateway::tls_context(t, false, Some(&model.mesh.tls_defaults));
                let socket = super::gateway::downstream_tls(&ctx);
                filter_chains.extend(port_chains(&policies, p.port, p.mtls, h, p.protocol, Some(bind), Some(&socket)));
            }
            None => filter_chains.extend(port_chains(
                &policies,
                p.port,
                p.mtls,
                handling(p.protocol),
                p.protocol,
                Some(bind),
                None,
            )),
        }
    }
    let listener_filters = listener_filters(&filter_chains);
    // The proxy's wildcard, both of a dual-stack proxy's under
    // ISTIO_DUAL_STACK (buildInboundListener).
    let wildcards = super::family::ip_mode(&class.ips).wildcards();
    let port = crate::translate::listener::INBOUND_PORT;
    let extra = if model.mesh.dual_stack { &wildcards[1..] } else { &[][..] };
    Listener {
        name: VIRTUAL_INBOUND.into(),
        address: super::envoy::socket(wildcards[0], port),
        additional_addresses: super::family::additional(extra, port),
        traffic_direction: core::TrafficDirection::Inbound as i32,
        max_connections_to_accept_per_socket_event: crate::translate::listener::accept_per_event(&model.mesh),
        access_log: policies.telemetry.log.iter().map(telemetry::listener_access_log).collect(),
        listener_filters,
        continue_on_listener_filters_timeout: true,
        filter_chains,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use crate::meshconfig::{CertificateData, MeshSettings};

    /// `PILOT_ALLOW_SIDECAR_SERVICE_INBOUND_LISTENER_MERGE`
    /// (listener_inbound.go `getFilterChainsByServicePort`, cluster.go
    /// `buildInboundClusters`): off, a Sidecar's `ingress` ports are the
    /// workload's only ones; on, its services' other target ports join,
    /// and a port in both is the Sidecar's (as upstream's "merge sidecar
    /// ingress ports and service ports" cases).
    #[test]
    fn sidecar_ingress_merges_service_ports_under_the_switch() {
        let yaml = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n\
            spec: {clusterIP: 10.0.0.1, selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}, {name: http-admin, port: 81, targetPort: 9000}]}\n---\n\
            apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: web, namespace: shop}\n\
            spec:\n  workloadSelector: {labels: {app: web}}\n  ingress: [{port: {number: 9000, protocol: HTTP, name: admin}, defaultEndpoint: '127.0.0.1:9001'}]\n";
        let class = crate::testing::class("shop", &[("app", "web")]);
        for (merge, want) in [(false, vec![(9000, true)]), (true, vec![(8080, false), (9000, true)])] {
            let mut m = crate::testing::model_in("", yaml);
            m.mesh = std::sync::Arc::new(MeshSettings {
                features: crate::meshconfig::Features { sidecar_inbound_merge: merge, ..Default::default() },
                ..(*m.mesh).clone()
            });
            let got: Vec<(u16, bool)> =
                super::inbound_ports(&m, &class).iter().map(|p| (p.port, p.ingress.is_some())).collect();
            assert_eq!(got, want, "merge={merge}");
        }
    }

    /// Upstream `TestTrustDomainsForValidation`
    /// (pilot/pkg/networking/plugin/authn/util_test.go), every case, and
    /// `PILOT_SKIP_VALIDATE_TRUST_DOMAIN` (ours, from `util.go`).
    #[test]
    fn upstream_trust_domains_for_validation() {
        let mesh = |td: &str, aliases: &[&str], ca: &[&[&str]]| MeshSettings {
            trust_domain: td.into(),
            trust_domain_aliases: aliases.iter().map(|a| (*a).to_owned()).collect(),
            ca_certificates: ca
                .iter()
                .map(|tds| CertificateData {
                    trust_domains: tds.iter().map(|t| (*t).to_owned()).collect(),
                    ..Default::default()
                })
                .collect(),
            ..MeshSettings::default()
        };
        let cases: [(&str, MeshSettings, &[&str]); 5] = [
            (
                "No duplicated trust domain in mesh config",
                mesh("cluster.local", &["alias-1.domain", "some-other-alias-1.domain", "alias-2.domain"], &[]),
                &["cluster.local", "alias-1.domain", "some-other-alias-1.domain", "alias-2.domain"],
            ),
            ("Empty mesh config", mesh("", &[], &[]), &[]),
            (
                "Sequential duplicated trust domains in mesh config",
                mesh(
                    "cluster.local",
                    &[
                        "alias-1.domain",
                        "alias-1.domain",
                        "some-other-alias-1.domain",
                        "alias-2.domain",
                        "alias-2.domain",
                    ],
                    &[],
                ),
                &["cluster.local", "alias-1.domain", "some-other-alias-1.domain", "alias-2.domain"],
            ),
            (
                "Mixed duplicated trust domains in mesh config",
                mesh(
                    "cluster.local",
                    &[
                        "alias-1.domain",
                        "cluster.local",
                        "alias-2.domain",
                        "some-other-alias-1.domain",
                        "alias-2.domain",
                        "alias-1.domain",
                    ],
                    &[],
                ),
                &["cluster.local", "alias-1.domain", "alias-2.domain", "some-other-alias-1.domain"],
            ),
            (
                "Extra trust domains in mesh config caCertificates",
                mesh("cluster.local", &[], &[&["external-1.domain"], &["external-2.domain", "external-3.domain"]]),
                &["cluster.local", "external-1.domain", "external-2.domain", "external-3.domain"],
            ),
        ];
        for (name, m, want) in cases {
            assert_eq!(super::trust_domains_for_validation(&m), want, "{name}");
        }
        let skip = MeshSettings { skip_validate_trust_domain: true, ..mesh("cluster.local", &["a"], &[]) };
        assert!(super::trust_domains_for_validation(&skip).is_empty());
    }

    fn context(socket: &istiod_proto::envoy::config::core::v3::TransportSocket) -> super::tls::DownstreamTlsContext {
        use istiod_proto::prost::Message;
        let Some(istiod_proto::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(any)) =
            &socket.config_type
        else {
            panic!("typed")
        };
        super::tls::DownstreamTlsContext::decode(any.value.as_slice()).expect("context")
    }

    /// Upstream `TestInboundMTLSSettings`
    /// (pilot/pkg/security/authn/policy_applier_test.go): the TCP and HTTP
    /// contexts' ALPN, TLS parameters and client certificate; and
    /// `PILOT_DISABLE_MX_ALPN` (utils.go's `ALPNDownstream`).
    #[test]
    fn upstream_inbound_mtls_settings() {
        use super::tls::tls_parameters::TlsProtocol;
        let ciphers = [
            "ECDHE-ECDSA-AES256-GCM-SHA384",
            "ECDHE-RSA-AES256-GCM-SHA384",
            "ECDHE-ECDSA-AES128-GCM-SHA256",
            "ECDHE-RSA-AES128-GCM-SHA256",
            "AES256-GCM-SHA384",
            "AES128-GCM-SHA256",
        ];
        let (http, tcp) = super::inbound_mtls(&MeshSettings::default());
        let (http, tcp) = (context(&http), context(&tcp));
        for (ctx, alpn) in [(&tcp, &["istio-peer-exchange", "h2", "http/1.1"][..]), (&http, &["h2", "http/1.1"][..])] {
            let common = ctx.common_tls_context.as_ref().expect("common");
            assert_eq!(common.alpn_protocols, alpn);
            let p = common.tls_params.as_ref().expect("params");
            assert_eq!(p.tls_minimum_protocol_version, TlsProtocol::TlSv12 as i32);
            assert_eq!(p.tls_maximum_protocol_version, TlsProtocol::TlSv13 as i32);
            assert_eq!(p.cipher_suites, ciphers);
            assert!(p.ecdh_curves.is_empty());
            assert_eq!(ctx.require_client_certificate, Some(true));
        }
        let no_mx = MeshSettings { disable_mx_alpn: true, ..MeshSettings::default() };
        let tcp = context(&super::inbound_mtls(&no_mx).1);
        assert_eq!(tcp.common_tls_context.expect("common").alpn_protocols, ["h2", "http/1.1"]);
    }

    /// Upstream `TestGetMinTLSVersion` and `TestGetMTLSCipherSuites`
    /// (pilot/pkg/security/authn/utils/utils_test.go).
    #[test]
    fn upstream_min_tls_version_and_cipher_suites() {
        use super::tls::tls_parameters::TlsProtocol;
        use crate::meshconfig::TlsDefaults;
        let min = |v: Option<&str>| {
            let t = TlsDefaults { min_protocol_version: v.map(str::to_owned), ..Default::default() };
            super::inbound_tls_params(&t).tls_minimum_protocol_version
        };
        assert_eq!(min(None), TlsProtocol::TlSv12 as i32, "Default TLS versions");
        assert_eq!(min(Some("TLSV1_2")), TlsProtocol::TlSv12 as i32, "Configure minimum TLS version 1.2");
        assert_eq!(min(Some("TLS_AUTO")), TlsProtocol::TlSv12 as i32, "Configure minimum TLS version to be auto");
        assert_eq!(min(Some("TLSV1_3")), TlsProtocol::TlSv13 as i32, "Configure minimum TLS version 1.3");
        let own = TlsDefaults { cipher_suites: vec!["ECDHE-RSA-AES256-GCM-SHA384".into()], ..Default::default() };
        assert_eq!(
            super::inbound_tls_params(&own).cipher_suites,
            ["ECDHE-RSA-AES256-GCM-SHA384"],
            "Configure 1 cipher"
        );
        assert_eq!(super::inbound_tls_params(&TlsDefaults::default()).cipher_suites.len(), 6, "Default cipher suites");
    }
}
