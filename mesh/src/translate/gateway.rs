//! A router's listeners from its merged Gateways, as istiod's
//! `pilot/pkg/networking/core/gateway.go buildGatewayListeners` builds
//! them (facts in docs/design/gateway-notes.md §2): one listener per
//! `<bind>_<port>`, a chain for the HTTP servers of a port (RDS
//! `http.<port>`), and a chain per HTTPS server that terminates TLS,
//! matched by SNI, with its TLS context (`kubernetes://<credentialName>`
//! over ADS for SIMPLE and MUTUAL, the agent's `default`/`ROOTCA` for
//! ISTIO_MUTUAL) and RDS `https.<port>.<name>.<gateway>.<ns>`.
//!
//! TCP servers take their `tcp_proxy` from the first VirtualService `tcp`
//! block bound to the Gateway that matches the port; PASSTHROUGH servers
//! get a chain per matching `tls[].match[]`, by SNI, with no TLS context
//! (`buildGatewayNetworkFiltersFromTCPRoutes`, `...FromTLSRoutes`); their
//! chains carry istiod's network filters for the Gateway class: metadata
//! exchange on ISTIO_MUTUAL servers, RBAC, the stats filter, a Mongo or
//! Redis server's protocol filter, and the access logs on the tcp_proxy.
//!
//! TLS servers that terminate TLS proxy their TCP routes behind their TLS
//! context; AUTO_PASSTHROUGH servers get a chain per SNI-DNAT cluster of
//! the services under their hosts. Served to routers by
//! `generator/router.rs`.

use istiod_config::gateway_convert::host_intersection;
use istiod_config::istio::networking::{RouteDestination, Server, ServerTlsMode, ServerTlsSettings, VirtualService};
use istiod_config::istio::{IstioObject, IstioSpec};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::listener::v3::{
    Filter, FilterChain, FilterChainMatch, Listener, ListenerFilter, listener_filter,
};
use istiod_proto::envoy::extensions::filters::http::fault::v3 as fault;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;
use istiod_proto::prost_types::Duration;

use super::envoy::{ads, any, http_connection_manager, http_filter, router, sds, socket};
use crate::model::gateway::{MergedGateway, MergedServer, ServerPort, bound_gateways, is_http};

/// A listener's name: `<bind or 0.0.0.0>_<port>`.
pub fn listener_name(p: &ServerPort) -> String {
    let bind = if p.bind.is_empty() { "0.0.0.0" } else { p.bind.as_str() };
    format!("{bind}_{}", p.number)
}

/// `credentials.ToResourceName`: a credential name as an SDS resource.
fn credential_resource(name: &str) -> String {
    if ["kubernetes://", "kubernetes-gateway://", "configmap://", "builtin://"].iter().any(|p| name.starts_with(p)) {
        name.to_owned()
    } else {
        format!("kubernetes://{name}")
    }
}

/// An SDS reference served over ADS (istiod's `SDSAdsConfig`, no initial
/// fetch timeout, so a missing Secret does not hold the listener).
fn ads_sds(name: &str) -> tls::SdsSecretConfig {
    tls::SdsSecretConfig { name: name.to_owned(), sds_config: ads() }
}

/// The TLS context of a TLS-terminating server (`BuildListenerTLSContext`):
/// ISTIO_MUTUAL takes the agent's `default` certificate and `ROOTCA`;
/// `credentialName(s)` the Secrets over ADS (`kubernetes://<name>`, the
/// CA `<name>-cacert`, or `caCertCredentialName`); otherwise the files
/// of `serverCertificate`/`privateKey`/`caCertificates` (or
/// `tlsCertificates`) through the agent (`file-cert:<cert>~<key>`,
/// `file-root:<ca>`). SIMPLE, MUTUAL and OPTIONAL_MUTUAL then get the
/// server's protocol versions, curves and cipher suites.
/// `tcp_istio_mutual`: a non-HTTP server terminating ISTIO_MUTUAL, whose
/// ALPN offers Istio's peer exchange first.
pub fn tls_context(
    t: &ServerTlsSettings,
    tcp_istio_mutual: bool,
    defaults: Option<&crate::meshconfig::TlsDefaults>,
) -> tls::DownstreamTlsContext {
    use tls::common_tls_context::{CombinedCertificateValidationContext, ValidationContextType};
    let require = matches!(t.mode, ServerTlsMode::Mutual | ServerTlsMode::IstioMutual);
    let validate_client = require || t.mode == ServerTlsMode::OptionalMutual;
    let insecure = t.insecure_skip_verify == Some(true);
    let sans = || {
        t.subject_alt_names
            .iter()
            .map(|s| istiod_proto::envoy::r#type::matcher::v3::StringMatcher {
                match_pattern: Some(istiod_proto::envoy::r#type::matcher::v3::string_matcher::MatchPattern::Exact(
                    s.clone(),
                )),
                ..Default::default()
            })
            .collect()
    };
    let untrusted = |v: &mut tls::CertificateValidationContext| {
        if insecure {
            v.trust_chain_verification =
                tls::certificate_validation_context::TrustChainVerification::AcceptUntrusted as i32;
        }
    };
    let combined = |default: tls::CertificateValidationContext, ca: tls::SdsSecretConfig| {
        Some(ValidationContextType::CombinedValidationContext(CombinedCertificateValidationContext {
            default_validation_context: Some(default),
            validation_context_sds_secret_config: Some(ca),
            ..Default::default()
        }))
    };
    let alpn = if tcp_istio_mutual && t.mode == ServerTlsMode::IstioMutual {
        vec!["istio-peer-exchange".into(), "h2".into(), "http/1.1".into()]
    } else {
        vec!["h2".into(), "http/1.1".into()]
    };
    let mut common = tls::CommonTlsContext { alpn_protocols: alpn, ..Default::default() };
    // `ApplyToCommonTLSContext`: the agent's SDS, from files or its own
    // workload certificate.
    let agent = |common: &mut tls::CommonTlsContext, cert: &str, key: &str, ca: &str| {
        let file_cert = |c: &str, k: &str| {
            if c.is_empty() || k.is_empty() { "default".to_owned() } else { format!("file-cert:{c}~{k}") }
        };
        common.tls_certificate_sds_secret_configs = if t.tls_certificates.is_empty() {
            vec![sds(&file_cert(cert, key))]
        } else {
            t.tls_certificates.iter().map(|c| sds(&file_cert(&c.server_certificate, &c.private_key))).collect()
        };
        if validate_client {
            let mut v = tls::CertificateValidationContext { match_subject_alt_names: sans(), ..Default::default() };
            if !t.ca_crl.is_empty() {
                v.crl = Some(core::DataSource {
                    specifier: Some(core::data_source::Specifier::Filename(t.ca_crl.clone())),
                    ..Default::default()
                });
            }
            untrusted(&mut v);
            let root = if ca.is_empty() { "ROOTCA".to_owned() } else { format!("file-root:{ca}") };
            common.validation_context_type = combined(v, sds(&root));
        }
    };
    let names: Vec<&str> = if t.credential_names.is_empty() {
        Some(t.credential_name.as_str()).filter(|n| !n.is_empty()).into_iter().collect()
    } else {
        t.credential_names.iter().map(String::as_str).collect()
    };
    if t.mode == ServerTlsMode::IstioMutual {
        agent(&mut common, "", "", "");
    } else if names.first() == Some(&"builtin://") {
        common.tls_certificate_sds_secret_configs = vec![sds("default")];
        if validate_client {
            let mut v = tls::CertificateValidationContext { match_subject_alt_names: sans(), ..Default::default() };
            untrusted(&mut v);
            common.validation_context_type = combined(v, sds("ROOTCA"));
        }
    } else if !names.is_empty() {
        // `ApplyCredentialSDSToServerCommonTLSContext`.
        common.tls_certificate_sds_secret_configs = names.iter().map(|n| ads_sds(&credential_resource(n))).collect();
        let mut v = tls::CertificateValidationContext { match_subject_alt_names: sans(), ..Default::default() };
        if validate_client {
            v.verify_certificate_spki = t.verify_certificate_spki.clone();
            v.verify_certificate_hash = t.verify_certificate_hash.clone();
            untrusted(&mut v);
            let ca = if t.ca_cert_credential_name.is_empty() {
                format!("{}-cacert", credential_resource(names[0]))
            } else {
                credential_resource(&t.ca_cert_credential_name)
            };
            common.validation_context_type = combined(v, ads_sds(&ca));
        } else if !t.subject_alt_names.is_empty() {
            common.validation_context_type = Some(ValidationContextType::ValidationContext(v));
        }
    } else {
        agent(&mut common, &t.server_certificate, &t.private_key, &t.ca_certificates);
    }
    if matches!(t.mode, ServerTlsMode::Simple | ServerTlsMode::Mutual | ServerTlsMode::OptionalMutual) {
        common.tls_params = tls_params(t, defaults);
    }
    // Compliance for Envoy TLS downstreams (istiod's
    // BuildListenerTLSContext).
    super::envoy::enforce_compliance(&mut common);
    tls::DownstreamTlsContext {
        common_tls_context: Some(common),
        require_client_certificate: Some(require),
        ..Default::default()
    }
}

/// `applyDownstreamTLSDefaults` then `applyServerTLSSettings`: the mesh's
/// `tlsDefaults`, then the server's protocol versions, curves and cipher
/// suites where it sets them (duplicates dropped, as
/// `FilterCipherSuites`); none when nothing is set.
fn tls_params(t: &ServerTlsSettings, defaults: Option<&crate::meshconfig::TlsDefaults>) -> Option<tls::TlsParameters> {
    use istiod_config::istio::networking::TlsProtocol;
    let version = |v: TlsProtocol| match v {
        TlsProtocol::Auto => tls::tls_parameters::TlsProtocol::TlsAuto,
        TlsProtocol::Tls10 => tls::tls_parameters::TlsProtocol::TlSv10,
        TlsProtocol::Tls11 => tls::tls_parameters::TlsProtocol::TlSv11,
        TlsProtocol::Tls12 => tls::tls_parameters::TlsProtocol::TlSv12,
        TlsProtocol::Tls13 => tls::tls_parameters::TlsProtocol::TlSv13,
    } as i32;
    let mut p = tls::TlsParameters::default();
    if let Some(d) = defaults {
        p.ecdh_curves = d.ecdh_curves.clone();
        p.cipher_suites = d.cipher_suites.clone();
        p.tls_minimum_protocol_version = match d.min_protocol_version.as_deref() {
            Some("TLSV1_2") => tls::tls_parameters::TlsProtocol::TlSv12 as i32,
            Some("TLSV1_3") => tls::tls_parameters::TlsProtocol::TlSv13 as i32,
            _ => tls::tls_parameters::TlsProtocol::TlsAuto as i32,
        };
    }
    if t.min_protocol_version != TlsProtocol::Auto {
        p.tls_minimum_protocol_version = version(t.min_protocol_version);
    }
    if t.max_protocol_version != TlsProtocol::Auto {
        p.tls_maximum_protocol_version = version(t.max_protocol_version);
    }
    if !t.ecdh_curves.is_empty() {
        p.ecdh_curves = t.ecdh_curves.clone();
    }
    if !t.cipher_suites.is_empty() {
        let mut ciphers: Vec<String> = Vec::new();
        for c in &t.cipher_suites {
            if !ciphers.contains(c) {
                ciphers.push(c.clone());
            }
        }
        p.cipher_suites = ciphers;
    }
    (p != tls::TlsParameters::default()).then_some(p)
}

/// What a gateway's chains enforce for its workload (namespace and
/// labels), as on a sidecar's inbound side: RequestAuthentication's JWT
/// filter, then AuthorizationPolicy's RBAC (DENY, then ALLOW), for HTTP
/// and for TCP (istiod's listener builder: authn, then authz, on gateways
/// as on sidecars).
#[derive(Debug, Clone, Default)]
pub struct GatewayPolicies {
    /// The jwt_authn filter.
    pub jwt: Option<hcm::HttpFilter>,
    /// HTTP RBAC.
    pub http: super::authz::Rbacs,
    /// Network RBAC.
    pub tcp: super::authz::Rbacs,
    /// The mesh's `tlsDefaults`.
    pub tls_defaults: crate::meshconfig::TlsDefaults,
    /// `PILOT_DISABLE_MX_ALPN`: a TCP server's ISTIO_MUTUAL offers no
    /// `istio-peer-exchange`.
    pub disable_mx_alpn: bool,
    /// Not `ENABLE_100_CONTINUE_HEADERS` (so that the default is istiod's).
    pub no_100_continue: bool,
    /// `MAX_CONNECTIONS_PER_SOCKET_EVENT_LOOP` on its listeners.
    pub accept_per_event: Option<u32>,
    /// `PILOT_HTTP10`.
    pub http10: bool,
    /// Metadata exchange's additional labels; `None` when it is off.
    pub mx: Option<Vec<String>>,
    /// `PILOT_ENABLE_ALPN_FILTER`.
    pub alpn_filter: bool,
    /// The meshNetworks `fromCidr` ranges, internal to its HTTP managers
    /// (which use the remote address).
    pub internal_addresses: Option<hcm::http_connection_manager::InternalAddressConfig>,
    /// `PILOT_ENABLE_MONGO_FILTER`, `PILOT_ENABLE_REDIS_FILTER`: a Mongo
    /// or Redis server's TCP chains.
    pub protocol_filters: crate::meshconfig::ProtocolFilters,
    /// Its managers' telemetry (the client side, as istiod's gateways):
    /// the stats filter, access logs, tracing and request id
    /// ([`super::telemetry::gateway`]).
    pub telemetry: super::telemetry::Side,
}

/// The HTTP connection manager of a gateway chain
/// (`buildGatewayConnectionManager`).
fn manager(stat_prefix: String, route: &str, policies: Option<&GatewayPolicies>) -> hcm::HttpConnectionManager {
    // istiod's order (buildHTTPConnectionManager, class Gateway): metadata
    // exchange, authentication and authorization, gRPC stats, the ALPN
    // override, fault, CORS, the stats filter, the router.
    let mut filters: Vec<hcm::HttpFilter> = Vec::new();
    if let Some(p) = policies {
        let (custom, local) = p.http.clone().split_custom();
        filters.extend(p.mx.as_deref().map(|l| super::telemetry::mx_http(false, l)));
        filters.extend(custom.http_filters());
        filters.extend(p.jwt.iter().cloned());
        filters.extend(local.http_filters());
        filters.push(super::telemetry::grpc_stats());
        filters.extend(p.alpn_filter.then(super::telemetry::alpn));
    }
    let stats = policies.and_then(|p| p.telemetry.stats.as_ref()).map(super::telemetry::stats_http);
    use hcm::http_connection_manager::{ForwardClientCertDetails, RouteSpecifier, ServerHeaderTransformation};
    let mut source = ads();
    if let Some(s) = source.as_mut() {
        s.initial_fetch_timeout = Some(Duration { seconds: 0, nanos: 0 });
    }
    let mut manager = hcm::HttpConnectionManager {
        stat_prefix,
        route_specifier: Some(RouteSpecifier::Rds(hcm::Rds {
            config_source: source,
            route_config_name: route.to_owned(),
        })),
        use_remote_address: Some(true),
        forward_client_cert_details: ForwardClientCertDetails::SanitizeSet as i32,
        set_current_client_cert_details: Some(hcm::http_connection_manager::SetCurrentClientCertDetails {
            subject: Some(true),
            cert: true,
            dns: true,
            uri: true,
            ..Default::default()
        }),
        server_name: "istio-envoy".into(),
        server_header_transformation: ServerHeaderTransformation::Overwrite as i32,
        proxy_100_continue: policies.is_none_or(|p| !p.no_100_continue),
        http_protocol_options: super::envoy::http10_options(policies.is_some_and(|p| p.http10)),
        internal_address_config: policies.and_then(|p| p.internal_addresses.clone()),
        normalize_path: Some(true),
        upgrade_configs: vec![hcm::http_connection_manager::UpgradeConfig {
            upgrade_type: "websocket".into(),
            ..Default::default()
        }],
        stream_idle_timeout: Some(Duration { seconds: 0, nanos: 0 }),
        http_filters: filters
            .into_iter()
            .chain([
                http_filter(super::route::FAULT_FILTER, &fault::HttpFault::default()),
                http_filter(
                    "envoy.filters.http.cors",
                    &istiod_proto::envoy::extensions::filters::http::cors::v3::Cors::default(),
                ),
            ])
            .chain(stats)
            .chain([router()])
            .collect(),
        access_log: policies.map(|p| p.telemetry.log.clone()).unwrap_or_default(),
        ..Default::default()
    };
    if let Some(p) = policies {
        p.telemetry.trace(&mut manager);
    }
    manager
}

fn passthrough(s: &Server) -> bool {
    s.tls.as_ref().is_some_and(|t| matches!(t.mode, ServerTlsMode::Passthrough | ServerTlsMode::AutoPassthrough))
}

/// `toFilterChainMatch`: omitted when the chain matches every name.
fn sni_match(hosts: &[String]) -> Option<FilterChainMatch> {
    if hosts.is_empty() || hosts.iter().any(|h| h == "*") {
        return None;
    }
    Some(FilterChainMatch { server_names: hosts.to_vec(), ..Default::default() })
}

/// `ctx` as the TLS transport socket of a filter chain.
pub(crate) fn downstream_tls(ctx: &tls::DownstreamTlsContext) -> core::TransportSocket {
    core::TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(ctx))),
    }
}

fn https_chain(listener: &str, s: &MergedServer, policies: Option<&GatewayPolicies>) -> Option<FilterChain> {
    let t = s.server.tls.as_ref()?;
    let stat = if s.server.name.is_empty() { format!("outbound_{listener};") } else { s.server.name.clone() };
    Some(FilterChain {
        filter_chain_match: sni_match(&s.sni_hosts),
        filters: vec![http_connection_manager(&manager(stat, &s.route_name, policies))],
        transport_socket: Some(downstream_tls(&tls_context(t, false, policies.map(|p| &p.tls_defaults)))),
        transport_socket_connect_timeout: Some(Duration { seconds: 15, nanos: 0 }),
        ..Default::default()
    })
}

/// What the L4 chains read of the mesh: the VirtualServices, and how a
/// destination's host and port resolve (short names to FQDNs; the port
/// when the destination gives none: the service's single port, else the
/// server's).
pub struct L4Inputs<'a> {
    /// The VirtualServices.
    pub virtual_services: Vec<&'a IstioObject>,
    /// The proxy's namespace (exportTo is checked from it).
    pub proxy_ns: &'a str,
    /// (host, VirtualService namespace) → FQDN.
    pub resolve_host: &'a dyn Fn(&str, &str) -> String,
    /// FQDN → its single port, if it has exactly one.
    pub single_port: &'a dyn Fn(&str) -> Option<u32>,
    /// An AUTO_PASSTHROUGH server's hosts → the SNI-DNAT cluster names of
    /// the services under them (`outbound_.<port>_.<subset>_.<host>`).
    pub auto_passthrough: &'a dyn Fn(&[String]) -> Vec<String>,
    /// What the router's chains enforce.
    pub policies: Option<&'a GatewayPolicies>,
}

/// The ALPNs of Istio's mTLS (`allIstioMtlsALPNs`): an AUTO_PASSTHROUGH
/// chain takes only mTLS from other Istio proxies.
const ISTIO_MTLS_ALPNS: [&str; 5] = ["istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"];

/// `builtAutoPassthroughFilterChains`: per SNI-DNAT cluster, a chain
/// matching its name as SNI and Istio's mTLS ALPNs, proxying TCP to it,
/// with no TLS context (the TLS passes through); no authorization, the
/// stats filter and the access log (`buildOutboundNetworkFiltersWithSingleDestination`
/// of a listener builder without authz).
fn auto_passthrough_chains(inputs: &L4Inputs<'_>, s: &MergedServer) -> Vec<FilterChain> {
    let telemetry = inputs.policies.map(|p| &p.telemetry);
    let log = telemetry.map(|t| t.log.as_slice()).unwrap_or_default();
    (inputs.auto_passthrough)(&s.sni_hosts)
        .into_iter()
        .map(|name| FilterChain {
            filter_chain_match: Some(FilterChainMatch {
                server_names: vec![name.clone()],
                application_protocols: ISTIO_MTLS_ALPNS.iter().map(|a| a.to_string()).collect(),
                ..Default::default()
            }),
            filters: telemetry
                .and_then(|t| t.stats.as_ref())
                .map(super::telemetry::stats_network)
                .into_iter()
                .chain([super::envoy::tcp_proxy_logged(&name, &name, log)])
                .collect(),
            ..Default::default()
        })
        .collect()
}

/// The network filters of a route's chain (`buildOutboundNetworkFilters`,
/// class Gateway): metadata exchange on an ISTIO_MUTUAL server (`mx`),
/// the router's network RBAC, the stats filter, then the port protocol's
/// filter (Mongo, Redis) and the `tcp_proxy` with the access logs.
fn l4_filters(
    inputs: &L4Inputs<'_>,
    vs: &IstioObject,
    route: &[RouteDestination],
    s: &MergedServer,
    mx: bool,
) -> Option<Vec<Filter>> {
    let declared = s.server.port.as_ref().map_or(0, |p| p.number);
    let policies = inputs.policies;
    let log = policies.map(|p| p.telemetry.log.as_slice()).unwrap_or_default();
    let (tcp, stat_prefix, cluster) = l4_proxy(inputs, vs, route, declared, log)?;
    let mut out: Vec<Filter> = Vec::new();
    if mx {
        out.extend(policies.and_then(|p| p.mx.as_deref()).map(super::telemetry::mx_network));
    }
    out.extend(policies.map(|p| p.tcp.network_filters()).unwrap_or_default());
    out.extend(policies.and_then(|p| p.telemetry.stats.as_ref()).map(super::telemetry::stats_network));
    let protocol = crate::model::Protocol::parse(s.server.port.as_ref().map_or("", |p| p.protocol.as_str()));
    match policies {
        Some(p) => out.extend(super::envoy::protocol_stack(p.protocol_filters, protocol, &stat_prefix, &cluster, tcp)),
        None => out.push(tcp),
    }
    Some(out)
}

/// `tcp_proxy` to a route's destinations (`buildOutboundNetworkFilters`):
/// one cluster, or weighted clusters (those of a positive weight, stat
/// prefix `<VirtualService>.<namespace>`); with its stat prefix and (first)
/// cluster.
fn l4_proxy(
    inputs: &L4Inputs<'_>,
    vs: &IstioObject,
    route: &[RouteDestination],
    server_port: u32,
    log: &[istiod_proto::envoy::config::accesslog::v3::AccessLog],
) -> Option<(Filter, String, String)> {
    let clusters: Vec<(String, u32)> = route
        .iter()
        .filter_map(|d| {
            let dest = d.destination.as_ref()?;
            let host = (inputs.resolve_host)(&dest.host, vs.meta.ns());
            let port =
                dest.port.as_ref().map(|p| p.number).or_else(|| (inputs.single_port)(&host)).unwrap_or(server_port);
            Some((format!("outbound|{port}|{}|{host}", dest.subset), d.weight.max(0) as u32))
        })
        .collect();
    match clusters.as_slice() {
        [] => None,
        [(c, _)] => Some((super::envoy::tcp_proxy_logged(c, c, log), c.clone(), c.clone())),
        many => {
            use istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3 as tcp;
            let all_zero = many.iter().all(|(_, w)| *w == 0);
            // (istiod leaves out weight-0 destinations; ours keeps all of
            // them at weight 1 where every weight is 0, which its
            // validation refuses.)
            let many: Vec<&(String, u32)> = many.iter().filter(|(_, w)| all_zero || *w > 0).collect();
            let stat_prefix = format!("{}.{}", vs.meta.name, vs.meta.ns());
            let t = tcp::TcpProxy {
                stat_prefix: stat_prefix.clone(),
                cluster_specifier: Some(tcp::tcp_proxy::ClusterSpecifier::WeightedClusters(
                    tcp::tcp_proxy::WeightedCluster {
                        clusters: many
                            .iter()
                            .map(|(name, w)| tcp::tcp_proxy::weighted_cluster::ClusterWeight {
                                name: name.clone(),
                                weight: if all_zero { 1 } else { *w },
                                ..Default::default()
                            })
                            .collect(),
                    },
                )),
                access_log: log.to_vec(),
                ..Default::default()
            };
            let filter = Filter {
                name: "envoy.filters.network.tcp_proxy".into(),
                config_type: Some(istiod_proto::envoy::config::listener::v3::filter::ConfigType::TypedConfig(any(&t))),
            };
            Some((filter, stat_prefix, many[0].0.clone()))
        }
    }
}

/// The VirtualServices bound to a server's Gateway, visible from the
/// proxy's namespace, whose hosts meet the server's (`pickMatchingGatewayHosts`).
fn bound<'a>(inputs: &L4Inputs<'a>, s: &MergedServer) -> Vec<(&'a IstioObject, &'a VirtualService)> {
    let mut out = crate::model::gateway::bound_virtual_services(
        inputs.virtual_services.iter().copied(),
        inputs.proxy_ns,
        &s.gateway,
    );
    out.retain(|(o, vs)| {
        s.server.hosts.iter().any(|sh| {
            let (host_ns, h) = sh.split_once('/').unwrap_or(("*", sh.as_str()));
            (host_ns == "*" || host_ns == o.meta.ns()) && vs.hosts.iter().any(|vh| host_intersection(h, vh).is_some())
        })
    });
    out
}

/// A match block's gateway and port conditions (`isGatewayMatch`,
/// `isPortMatch`).
fn l4_applies(gateways: &[String], port: u32, vs_ns: &str, s: &MergedServer) -> bool {
    let declared = s.server.port.as_ref().map_or(0, |p| p.number);
    (port == 0 || port == declared) && (gateways.is_empty() || bound_gateways(gateways, vs_ns).contains(&s.gateway))
}

fn tcp_chain(inputs: &L4Inputs<'_>, s: &MergedServer) -> Option<FilterChain> {
    let declared = s.server.port.as_ref().map_or(0, |p| p.number);
    // (istiod's includeMx: a TCP server terminating mesh mTLS.)
    let mx = s.server.tls.as_ref().is_some_and(|t| t.mode == ServerTlsMode::IstioMutual);
    for (o, vs) in bound(inputs, s) {
        for r in &vs.tcp {
            let applies =
                r.matches.is_empty() || r.matches.iter().any(|m| l4_applies(&m.gateways, m.port, o.meta.ns(), s));
            if applies && let Some(filters) = l4_filters(inputs, o, &r.route, s, mx) {
                return Some(FilterChain { filters, ..Default::default() });
            }
        }
    }
    tracing::warn!(target: "model", gateway = %s.gateway, port = declared, "no VirtualService routes the gateway's TCP server");
    None
}

fn passthrough_chains(inputs: &L4Inputs<'_>, s: &MergedServer, seen_sni: &mut Vec<String>) -> Vec<FilterChain> {
    let mut out = Vec::new();
    for (o, vs) in bound(inputs, s) {
        for r in &vs.tls {
            for m in r.matches.iter().filter(|m| l4_applies(&m.gateways, m.port, o.meta.ns(), s)) {
                // A match naming an SNI host already routed on this port
                // is skipped whole (istiod's CheckDuplicates).
                if m.sni_hosts.is_empty() || m.sni_hosts.iter().any(|h| seen_sni.contains(h)) {
                    continue;
                }
                let sni = m.sni_hosts.clone();
                let Some(filters) = l4_filters(inputs, o, &r.route, s, false) else { continue };
                seen_sni.extend(sni.iter().cloned());
                let mut sorted = sni;
                sorted.sort();
                out.push(FilterChain { filter_chain_match: sni_match(&sorted), filters, ..Default::default() });
            }
        }
    }
    out
}

/// The listeners of a router's merged Gateways (HTTP and TLS-terminating
/// HTTPS servers; see the module's note for what comes next).
pub fn listeners(m: &MergedGateway) -> Vec<Listener> {
    listeners_with(m, None)
}

/// [`listeners`], with TCP and PASSTHROUGH servers' chains from the
/// VirtualServices in `l4`.
pub fn listeners_with(m: &MergedGateway, l4: Option<&L4Inputs<'_>>) -> Vec<Listener> {
    let policies = l4.and_then(|l| l.policies);
    let mut out: Vec<Listener> = Vec::new();
    // SNI hosts routed so far, per listener (every key of a port shares it).
    let mut seen_sni_by_listener: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for key in &m.ports {
        let name = listener_name(key);
        let servers = m.servers.get(key).map(Vec::as_slice).unwrap_or_default();
        let mut chains = Vec::new();
        if is_http(&key.protocol) {
            if let Some(first) = servers.first() {
                chains.push(FilterChain {
                    filters: vec![http_connection_manager(&manager(
                        format!("outbound_{name};"),
                        &first.route_name,
                        policies,
                    ))],
                    ..Default::default()
                });
            }
        } else if key.protocol == "HTTPS" {
            chains.extend(
                servers.iter().filter(|s| !passthrough(&s.server)).filter_map(|s| https_chain(&name, s, policies)),
            );
        }
        if let Some(l4) = l4 {
            let seen_sni = seen_sni_by_listener.entry(name.clone()).or_default();
            for s in servers {
                let mode = s.server.tls.as_ref().map(|t| t.mode);
                if mode == Some(ServerTlsMode::Passthrough) {
                    chains.extend(passthrough_chains(l4, s, seen_sni));
                } else if mode == Some(ServerTlsMode::AutoPassthrough) {
                    chains.extend(auto_passthrough_chains(l4, s));
                } else if s.server.tls.is_none() && !is_http(&key.protocol) {
                    chains.extend(tcp_chain(l4, s));
                } else if let Some(t) = s
                    .server
                    .tls
                    .as_ref()
                    .filter(|_| !passthrough(&s.server) && !is_http(&key.protocol) && key.protocol != "HTTPS")
                {
                    // `IsTCPServerWithTLSTermination`: tcp_proxy behind
                    // the server's TLS context, matched by SNI.
                    chains.extend(tcp_chain(l4, s).map(|mut c| {
                        c.filter_chain_match = sni_match(&s.sni_hosts);
                        c.transport_socket = Some(downstream_tls(&tls_context(
                            t,
                            policies.is_none_or(|p| !p.disable_mx_alpn),
                            policies.map(|p| &p.tls_defaults),
                        )));
                        c
                    }));
                }
            }
        }
        if chains.is_empty() {
            continue;
        }
        match out.iter_mut().find(|l| l.name == name) {
            Some(l) => l.filter_chains.extend(chains),
            None => {
                let bind = if key.bind.is_empty() { "0.0.0.0" } else { key.bind.as_str() };
                out.push(Listener {
                    name: name.clone(),
                    address: socket(bind, key.number),
                    traffic_direction: core::TrafficDirection::Outbound as i32,
                    filter_chains: chains,
                    max_connections_to_accept_per_socket_event: policies.map_or(Some(1), |p| p.accept_per_event),
                    ..Default::default()
                });
            }
        }
    }
    for l in &mut out {
        // istiod sets it on every gateway chain.
        for c in &mut l.filter_chains {
            c.transport_socket_connect_timeout = Some(Duration { seconds: 15, nanos: 0 });
        }
        // The TLS inspector when a chain matches names or carries a TLS
        // context (with ALPN).
        if l.filter_chains.iter().any(|c| {
            c.filter_chain_match.as_ref().is_some_and(|m| !m.server_names.is_empty()) || c.transport_socket.is_some()
        }) {
            use istiod_proto::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
            l.listener_filters.push(ListenerFilter {
                name: "envoy.filters.listener.tls_inspector".into(),
                config_type: Some(listener_filter::ConfigType::TypedConfig(any(&TlsInspector::default()))),
                ..Default::default()
            });
        }
    }
    out
}

/// A gateway route configuration (`buildGatewayHTTPRouteConfig`):
/// the virtual hosts [`crate::model::gateway::virtual_hosts`] plans, each
/// with its VirtualServices' routes for the server's Gateway and port;
/// an unknown name is an empty configuration, as istiod answers.
pub fn route_configuration(
    model: &crate::model::Model,
    m: &MergedGateway,
    route_name: &str,
    virtual_services: &[&IstioObject],
    proxy_ns: &str,
) -> istiod_proto::envoy::config::route::v3::RouteConfiguration {
    use istiod_proto::envoy::config::route::v3 as route;
    let mut plans = crate::model::gateway::virtual_hosts(m, route_name, virtual_services.iter().copied(), proxy_ns);
    if model.mesh.route_collapse {
        plans = crate::model::gateway::collapse(plans);
    }
    let by_name: std::collections::HashMap<String, &IstioObject> =
        virtual_services.iter().map(|o| (format!("{}/{}", o.meta.ns(), o.meta.name), *o)).collect();
    let mut vhosts = Vec::new();
    for plan in plans {
        let mut routes = Vec::new();
        for (vs_name, (gateway, port)) in plan.virtual_services.iter().zip(&plan.bound_by) {
            let Some(obj) = by_name.get(vs_name) else { continue };
            let IstioSpec::VirtualService(vs) = &obj.spec else { continue };
            routes.extend(super::route::gateway_routes(model, obj, vs, gateway, *port as u16));
        }
        // istiod's SortVHostRoutes: catch-all routes go last, the others
        // keep their order.
        let catch_all = |r: &route::Route| {
            r.r#match.as_ref().is_some_and(|m| {
                m.headers.is_empty()
                    && m.query_parameters.is_empty()
                    && match &m.path_specifier {
                        Some(route::route_match::PathSpecifier::Prefix(p)) => p == "/",
                        Some(route::route_match::PathSpecifier::SafeRegex(re)) => re.regex == ".*",
                        _ => false,
                    }
            })
        };
        let (mut rest, last): (Vec<_>, Vec<_>) = routes.into_iter().partition(|r| !catch_all(r));
        rest.extend(last);
        let routes = rest;
        vhosts.push(route::VirtualHost {
            name: plan.name.clone(),
            domains: std::iter::once(&plan.domain).chain(&plan.more_domains).cloned().collect(),
            routes,
            require_tls: if plan.require_tls {
                route::virtual_host::TlsRequirementType::All as i32
            } else {
                route::virtual_host::TlsRequirementType::None as i32
            },
            include_request_attempt_count: true,
            ..Default::default()
        });
    }
    route::RouteConfiguration {
        name: route_name.to_owned(),
        virtual_hosts: vhosts,
        validate_clusters: Some(false),
        ignore_port_in_host_matching: m.by_route.contains_key(route_name),
        max_direct_response_body_size_bytes: m.by_route.contains_key(route_name).then_some(1_048_576),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use istiod_config::istio::{IstioObject, IstioSpec};
    use istiod_proto::prost::Message;

    use super::*;
    use crate::model::gateway::merge;

    fn gateway(spec: &str) -> IstioObject {
        let doc = format!(
            "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: ns}}\nspec: {spec}\n"
        );
        istiod_config::istio::parse(&serde_yaml_ng::from_str(&doc).unwrap()).unwrap()
    }

    fn hcm_of(c: &FilterChain) -> hcm::HttpConnectionManager {
        let Some(istiod_proto::envoy::config::listener::v3::filter::ConfigType::TypedConfig(a)) =
            &c.filters[0].config_type
        else {
            panic!("typed config")
        };
        hcm::HttpConnectionManager::decode(a.value.as_slice()).unwrap()
    }

    fn rds(m: &hcm::HttpConnectionManager) -> &str {
        match &m.route_specifier {
            Some(hcm::http_connection_manager::RouteSpecifier::Rds(r)) => &r.route_config_name,
            _ => "",
        }
    }

    #[test]
    fn an_ingress_gateway_with_http_and_https() {
        let o = gateway(
            "{servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']},\
             {port: {number: 443, name: https, protocol: HTTPS}, hosts: [a.example.com], tls: {mode: SIMPLE, credentialName: a-cert}},\
             {port: {number: 443, name: https-b, protocol: HTTPS}, hosts: [b.example.com], name: b-server, tls: {mode: MUTUAL, credentialName: b-cert}}]}",
        );
        let IstioSpec::Gateway(g) = &o.spec else { unreachable!() };
        let m = merge(&[(&o, g)], |_, p| Some(p + 8000));
        let ls = listeners(&m);
        let names: Vec<&str> = ls.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["0.0.0.0_8080", "0.0.0.0_8443"]);
        // HTTP: one chain, no match, RDS http.8080, istiod's gateway HCM.
        let http = &ls[0];
        assert!(http.listener_filters.is_empty() && http.filter_chains.len() == 1);
        let h = hcm_of(&http.filter_chains[0]);
        assert_eq!((h.stat_prefix.as_str(), rds(&h)), ("outbound_0.0.0.0_8080;", "http.8080"));
        assert_eq!((h.use_remote_address, h.server_name.as_str()), (Some(true), "istio-envoy"));
        assert_eq!(h.upgrade_configs[0].upgrade_type, "websocket");
        assert_eq!(
            http.filter_chains[0].transport_socket_connect_timeout,
            Some(Duration { seconds: 15, nanos: 0 }),
            "every chain"
        );
        // HTTPS: a chain per server, by SNI, each with its TLS context.
        let https = &ls[1];
        assert_eq!(https.listener_filters[0].name, "envoy.filters.listener.tls_inspector");
        assert_eq!(https.filter_chains.len(), 2);
        let sni: Vec<&str> = https
            .filter_chains
            .iter()
            .map(|c| c.filter_chain_match.as_ref().unwrap().server_names[0].as_str())
            .collect();
        assert_eq!(sni, ["a.example.com", "b.example.com"]);
        let a = hcm_of(&https.filter_chains[0]);
        assert_eq!((a.stat_prefix.as_str(), rds(&a)), ("outbound_0.0.0.0_8443;", "https.443.https.gw.ns"));
        assert_eq!(hcm_of(&https.filter_chains[1]).stat_prefix, "b-server");
        let ctx = |c: &FilterChain| {
            let Some(core::transport_socket::ConfigType::TypedConfig(a)) =
                &c.transport_socket.as_ref().unwrap().config_type
            else {
                panic!()
            };
            tls::DownstreamTlsContext::decode(a.value.as_slice()).unwrap()
        };
        let simple = ctx(&https.filter_chains[0]);
        let common = simple.common_tls_context.as_ref().unwrap();
        assert_eq!(common.tls_certificate_sds_secret_configs[0].name, "kubernetes://a-cert");
        assert_eq!(common.alpn_protocols, ["h2", "http/1.1"]);
        assert_eq!(simple.require_client_certificate, Some(false));
        let mutual = ctx(&https.filter_chains[1]);
        assert_eq!(mutual.require_client_certificate, Some(true));
        let Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(v)) =
            &mutual.common_tls_context.as_ref().unwrap().validation_context_type
        else {
            panic!("combined validation")
        };
        assert_eq!(v.validation_context_sds_secret_config.as_ref().unwrap().name, "kubernetes://b-cert-cacert");
    }

    #[test]
    fn tcp_and_passthrough_servers_route_by_virtual_service() {
        let o = gateway(
            "{servers: [{port: {number: 31400, name: tcp, protocol: TCP}, hosts: ['*']},\
             {port: {number: 443, name: tls, protocol: TLS}, hosts: ['*.example.com'], tls: {mode: PASSTHROUGH}}]}",
        );
        let IstioSpec::Gateway(g) = &o.spec else { unreachable!() };
        let m = merge(&[(&o, g)], |_, p| Some(p));
        let vs = |name: &str, body: &str| {
            let doc = format!(
                "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {name}, namespace: ns}}\nspec: {body}\n"
            );
            istiod_config::istio::parse(&serde_yaml_ng::from_str(&doc).unwrap()).unwrap()
        };
        let objs = [
            vs(
                "tcp",
                "{hosts: ['*'], gateways: [gw], tcp: [{match: [{port: 31400}], route: [{destination: {host: db, port: {number: 5432}}}]}]}",
            ),
            vs(
                "tls",
                "{hosts: [a.example.com, b.example.com], gateways: [gw], tls: [\
                {match: [{sniHosts: [a.example.com]}], route: [{destination: {host: a}}]},\
                {match: [{sniHosts: [b.example.com], port: 8443}], route: [{destination: {host: b}}]}]}",
            ),
            vs(
                "zdup",
                "{hosts: [a.example.com], gateways: [gw], tls: [{match: [{sniHosts: [a.example.com]}], route: [{destination: {host: z}}]}]}",
            ),
        ];
        let resolve =
            |h: &str, ns: &str| if h.contains('.') { h.to_owned() } else { format!("{h}.{ns}.svc.cluster.local") };
        let single = |h: &str| (h == "a.ns.svc.cluster.local").then_some(9443);
        let inputs = L4Inputs {
            virtual_services: objs.iter().collect(),
            proxy_ns: "ns",
            resolve_host: &resolve,
            single_port: &single,
            auto_passthrough: &|_| Vec::new(),
            policies: None,
        };
        let ls = listeners_with(&m, Some(&inputs));
        let names: Vec<&str> = ls.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["0.0.0.0_31400", "0.0.0.0_443"]);
        let cluster = |c: &FilterChain| {
            use istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3 as tcp;
            let Some(istiod_proto::envoy::config::listener::v3::filter::ConfigType::TypedConfig(a)) =
                &c.filters[0].config_type
            else {
                panic!()
            };
            match tcp::TcpProxy::decode(a.value.as_slice()).unwrap().cluster_specifier {
                Some(tcp::tcp_proxy::ClusterSpecifier::Cluster(c)) => c,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(cluster(&ls[0].filter_chains[0]), "outbound|5432||db.ns.svc.cluster.local");
        // One chain per matching tls block (oldest VirtualService first, then
        // by name): b's asks port 8443, a's
        // duplicate in another VirtualService is skipped.
        let tls = &ls[1];
        assert_eq!(tls.filter_chains.len(), 1);
        assert_eq!(tls.filter_chains[0].filter_chain_match.as_ref().unwrap().server_names, ["a.example.com"]);
        assert_eq!(
            cluster(&tls.filter_chains[0]),
            "outbound|9443||a.ns.svc.cluster.local",
            "the service's single port"
        );
        assert!(tls.filter_chains[0].transport_socket.is_none(), "passed through");
        assert_eq!(tls.listener_filters[0].name, "envoy.filters.listener.tls_inspector");
    }

    #[test]
    fn a_gateway_route_configuration_carries_its_virtual_services() {
        let o = gateway("{servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*.example.com']}]}");
        let IstioSpec::Gateway(g) = &o.spec else { unreachable!() };
        let m = merge(&[(&o, g)], |_, p| Some(p + 8000));
        let vs = |name: &str, body: &str| {
            let doc = format!(
                "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {name}, namespace: ns}}\nspec: {body}\n"
            );
            istiod_config::istio::parse(&serde_yaml_ng::from_str(&doc).unwrap()).unwrap()
        };
        let objs = [vs(
            "web",
            "{hosts: [web.example.com], gateways: [gw, mesh], http: [\
              {match: [{uri: {prefix: /api}, gateways: [mesh]}], route: [{destination: {host: api}}]},\
              {match: [{uri: {prefix: /other}, port: 81}], route: [{destination: {host: other}}]},\
              {route: [{destination: {host: web, port: {number: 8000}}}]},\
              {match: [{uri: {prefix: /late}}], route: [{destination: {host: late}}]}]}",
        )];
        let refs: Vec<&IstioObject> = objs.iter().collect();
        let model = crate::model::Model::default();
        let rc = route_configuration(&model, &m, "http.8080", &refs, "ns");
        assert_eq!(rc.name, "http.8080");
        assert_eq!(rc.virtual_hosts.len(), 1);
        let vh = &rc.virtual_hosts[0];
        assert_eq!(
            (vh.name.as_str(), vh.domains.as_slice()),
            ("web.example.com:80", &["web.example.com".to_owned()][..])
        );
        // The mesh-only match and the other port's are not the gateway's;
        // the catch-all goes after /late (istiod's SortVHostRoutes).
        assert_eq!(vh.routes.len(), 2, "{:?}", vh.routes);
        assert!(matches!(
            vh.routes[0].r#match.as_ref().and_then(|m| m.path_specifier.as_ref()),
            Some(istiod_proto::envoy::config::route::v3::route_match::PathSpecifier::Prefix(p)) if p == "/late"
        ));
        let Some(istiod_proto::envoy::config::route::v3::route::Action::Route(a)) = &vh.routes[1].action else {
            panic!()
        };
        assert!(
            matches!(
                &a.cluster_specifier,
                Some(istiod_proto::envoy::config::route::v3::route_action::ClusterSpecifier::Cluster(c)) if c.starts_with("outbound|8000||web")
            ),
            "{:?}",
            a.cluster_specifier
        );
        assert!(rc.ignore_port_in_host_matching);
        // An unknown name: an empty configuration.
        assert!(route_configuration(&model, &m, "http.1", &refs, "ns").virtual_hosts.is_empty());
    }

    #[test]
    fn istio_mutual_uses_the_agents_secrets() {
        let t = ServerTlsSettings { mode: ServerTlsMode::IstioMutual, ..Default::default() };
        let ctx = tls_context(&t, false, None);
        let common = ctx.common_tls_context.unwrap();
        assert_eq!(common.tls_certificate_sds_secret_configs[0].name, "default");
        let Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(v)) =
            common.validation_context_type
        else {
            panic!()
        };
        assert_eq!(v.validation_context_sds_secret_config.unwrap().name, "ROOTCA");
        assert_eq!(ctx.require_client_certificate, Some(true));
        assert!(common.tls_params.is_none(), "ISTIO_MUTUAL takes no server TLS parameters");
        // A TCP server terminating ISTIO_MUTUAL offers the peer exchange.
        let tcp = tls_context(&t, true, None).common_tls_context.unwrap();
        assert_eq!(tcp.alpn_protocols, ["istio-peer-exchange", "h2", "http/1.1"]);
    }

    /// istiod's listener.go BuildListenerTLSContext, the file branch of
    /// authentication.go ApplyToCommonTLSContext, applyServerTLSSettings.
    #[test]
    fn file_certificates_tls_parameters_and_insecure_skip_verify() {
        use istiod_config::istio::networking::TlsProtocol;
        let t = ServerTlsSettings {
            mode: ServerTlsMode::Mutual,
            server_certificate: "/etc/certs/cert.pem".into(),
            private_key: "/etc/certs/key.pem".into(),
            ca_certificates: "/etc/certs/ca.pem".into(),
            ca_crl: "/etc/certs/crl.pem".into(),
            insecure_skip_verify: Some(true),
            min_protocol_version: TlsProtocol::Tls12,
            max_protocol_version: TlsProtocol::Tls13,
            cipher_suites: vec!["ECDHE-ECDSA-AES256-GCM-SHA384".into(), "ECDHE-ECDSA-AES256-GCM-SHA384".into()],
            ecdh_curves: vec!["P-256".into()],
            ..Default::default()
        };
        let common = tls_context(&t, false, None).common_tls_context.unwrap();
        let names: Vec<&str> = common.tls_certificate_sds_secret_configs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["file-cert:/etc/certs/cert.pem~/etc/certs/key.pem"]);
        let Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(v)) =
            &common.validation_context_type
        else {
            panic!()
        };
        assert_eq!(v.validation_context_sds_secret_config.as_ref().unwrap().name, "file-root:/etc/certs/ca.pem");
        let d = v.default_validation_context.as_ref().unwrap();
        assert_eq!(
            d.trust_chain_verification,
            tls::certificate_validation_context::TrustChainVerification::AcceptUntrusted as i32
        );
        assert!(d.crl.is_some());
        let p = common.tls_params.unwrap();
        assert_eq!(p.tls_minimum_protocol_version, tls::tls_parameters::TlsProtocol::TlSv12 as i32);
        assert_eq!(p.tls_maximum_protocol_version, tls::tls_parameters::TlsProtocol::TlSv13 as i32);
        assert_eq!(p.cipher_suites, ["ECDHE-ECDSA-AES256-GCM-SHA384"], "duplicates dropped");
        assert_eq!(p.ecdh_curves, ["P-256"]);
        // SIMPLE with nothing set: no parameters at all.
        let simple =
            ServerTlsSettings { mode: ServerTlsMode::Simple, credential_name: "c".into(), ..Default::default() };
        assert!(tls_context(&simple, false, None).common_tls_context.unwrap().tls_params.is_none());
        // The mesh's tlsDefaults first (applyDownstreamTLSDefaults), the
        // server's own settings over them; ISTIO_MUTUAL takes neither.
        let defaults = crate::meshconfig::TlsDefaults {
            min_protocol_version: Some("TLSV1_3".into()),
            ecdh_curves: vec!["X25519".into()],
            cipher_suites: vec!["ECDHE-RSA-AES128-GCM-SHA256".into()],
        };
        let p = tls_context(&simple, false, Some(&defaults)).common_tls_context.unwrap().tls_params.unwrap();
        assert_eq!(p.tls_minimum_protocol_version, tls::tls_parameters::TlsProtocol::TlSv13 as i32);
        assert_eq!((p.ecdh_curves.as_slice(), p.cipher_suites.len()), (&["X25519".to_owned()][..], 1));
        let own = ServerTlsSettings { ecdh_curves: vec!["P-384".into()], ..simple.clone() };
        let p = tls_context(&own, false, Some(&defaults)).common_tls_context.unwrap().tls_params.unwrap();
        assert_eq!(p.ecdh_curves, ["P-384"], "the server's own");
        assert_eq!(p.tls_minimum_protocol_version, tls::tls_parameters::TlsProtocol::TlSv13 as i32, "the mesh's");
        let istio = ServerTlsSettings { mode: ServerTlsMode::IstioMutual, ..Default::default() };
        assert!(tls_context(&istio, false, Some(&defaults)).common_tls_context.unwrap().tls_params.is_none());
    }

    /// A TLS server terminating SIMPLE (`IsTCPServerWithTLSTermination`):
    /// its TCP route behind its TLS context, matched by SNI.
    #[test]
    fn a_tls_server_terminating_tls_proxies_tcp_behind_its_context() {
        let g = gateway(
            "{selector: {app: gw}, servers: [{port: {number: 9443, name: tls, protocol: TLS}, hosts: [db.example.com], \
             tls: {mode: SIMPLE, credentialName: db-cert}}]}",
        );
        let IstioSpec::Gateway(spec) = &g.spec else { panic!() };
        let m = merge(&[(&g, spec)], |_, p| Some(p));
        let vs = crate::testing::istio_objects(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: db, namespace: ns}\n\
             spec: {hosts: [db.example.com], gateways: [gw], tcp: [{route: [{destination: {host: db, port: {number: 5432}}}]}]}\n",
        );
        let l4 = L4Inputs {
            virtual_services: vs.iter().collect(),
            proxy_ns: "ns",
            resolve_host: &|h, ns| format!("{h}.{ns}.svc.cluster.local"),
            single_port: &|_| None,
            auto_passthrough: &|_| Vec::new(),
            policies: None,
        };
        let ls = listeners_with(&m, Some(&l4));
        assert_eq!(ls.len(), 1);
        let chain = &ls[0].filter_chains[0];
        assert_eq!(chain.filter_chain_match.as_ref().unwrap().server_names, ["db.example.com"]);
        assert!(chain.transport_socket.is_some());
        assert!(ls[0].listener_filters.iter().any(|f| f.name == "envoy.filters.listener.tls_inspector"));
    }
}
