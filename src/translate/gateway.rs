//! A router's listeners from its merged Gateways, as istiod's
//! `pilot/pkg/networking/core/gateway.go buildGatewayListeners` builds
//! them (facts in docs/gateway-notes.md §2): one listener per
//! `<bind>_<port>`, a chain for the HTTP servers of a port (RDS
//! `http.<port>`), and a chain per HTTPS server that terminates TLS,
//! matched by SNI, with its TLS context (`kubernetes://<credentialName>`
//! over ADS for SIMPLE and MUTUAL, the agent's `default`/`ROOTCA` for
//! ISTIO_MUTUAL) and RDS `https.<port>.<name>.<gateway>.<ns>`.
//!
//! Groundwork of issue #14: TCP, TLS-terminating TCP and passthrough
//! chains (which read VirtualServices' `tcp` and `tls` routes) come next,
//! and routers are not served these yet.

use istiod_kubewatch::istio::networking::{Server, ServerTlsMode, ServerTlsSettings};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::listener::v3::{
    FilterChain, FilterChainMatch, Listener, ListenerFilter, listener_filter,
};
use istiod_proto::envoy::extensions::filters::http::fault::v3 as fault;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;
use istiod_proto::prost_types::Duration;

use super::envoy::{ads, any, http_connection_manager, http_filter, router, sds, socket};
use crate::model::gateway::{MergedGateway, MergedServer, ServerPort, is_http};

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

/// The TLS context of an HTTPS server (`BuildListenerTLSContext`).
pub fn tls_context(t: &ServerTlsSettings) -> tls::DownstreamTlsContext {
    use tls::common_tls_context::{CombinedCertificateValidationContext, ValidationContextType};
    let validation = |ca: Option<tls::SdsSecretConfig>| tls::CertificateValidationContext {
        match_subject_alt_names: t
            .subject_alt_names
            .iter()
            .map(|s| istiod_proto::envoy::r#type::matcher::v3::StringMatcher {
                match_pattern: Some(istiod_proto::envoy::r#type::matcher::v3::string_matcher::MatchPattern::Exact(
                    s.clone(),
                )),
                ..Default::default()
            })
            .collect(),
        verify_certificate_spki: if ca.is_some() { t.verify_certificate_spki.clone() } else { Vec::new() },
        verify_certificate_hash: if ca.is_some() { t.verify_certificate_hash.clone() } else { Vec::new() },
        ..Default::default()
    };
    let mut common =
        tls::CommonTlsContext { alpn_protocols: vec!["h2".into(), "http/1.1".into()], ..Default::default() };
    let builtin = t.credential_name == "builtin://";
    match t.mode {
        ServerTlsMode::IstioMutual => {
            common.tls_certificate_sds_secret_configs = vec![sds("default")];
            common.validation_context_type =
                Some(ValidationContextType::CombinedValidationContext(CombinedCertificateValidationContext {
                    default_validation_context: Some(validation(None)),
                    validation_context_sds_secret_config: Some(sds("ROOTCA")),
                    ..Default::default()
                }));
        }
        _ if builtin => {
            common.tls_certificate_sds_secret_configs = vec![sds("default")];
            if matches!(t.mode, ServerTlsMode::Mutual | ServerTlsMode::OptionalMutual) {
                common.validation_context_type =
                    Some(ValidationContextType::CombinedValidationContext(CombinedCertificateValidationContext {
                        default_validation_context: Some(validation(Some(sds("ROOTCA")))),
                        validation_context_sds_secret_config: Some(sds("ROOTCA")),
                        ..Default::default()
                    }));
            }
        }
        mode => {
            let names: Vec<&str> = if t.credential_names.is_empty() {
                vec![t.credential_name.as_str()]
            } else {
                t.credential_names.iter().map(String::as_str).collect()
            };
            common.tls_certificate_sds_secret_configs =
                names.iter().filter(|n| !n.is_empty()).map(|n| ads_sds(&credential_resource(n))).collect();
            if matches!(mode, ServerTlsMode::Mutual | ServerTlsMode::OptionalMutual) {
                let ca = if t.ca_cert_credential_name.is_empty() {
                    format!("{}{}", credential_resource(names.first().copied().unwrap_or_default()), "-cacert")
                } else {
                    credential_resource(&t.ca_cert_credential_name)
                };
                common.validation_context_type =
                    Some(ValidationContextType::CombinedValidationContext(CombinedCertificateValidationContext {
                        default_validation_context: Some(validation(Some(ads_sds(&ca)))),
                        validation_context_sds_secret_config: Some(ads_sds(&ca)),
                        ..Default::default()
                    }));
            } else if !t.subject_alt_names.is_empty() {
                common.validation_context_type = Some(ValidationContextType::ValidationContext(validation(None)));
            }
        }
    }
    tls::DownstreamTlsContext {
        common_tls_context: Some(common),
        require_client_certificate: Some(matches!(t.mode, ServerTlsMode::Mutual | ServerTlsMode::IstioMutual)),
        ..Default::default()
    }
}

/// The HTTP connection manager of a gateway chain
/// (`buildGatewayConnectionManager`).
fn manager(stat_prefix: String, route: &str) -> hcm::HttpConnectionManager {
    use hcm::http_connection_manager::{ForwardClientCertDetails, RouteSpecifier, ServerHeaderTransformation};
    let mut source = ads();
    if let Some(s) = source.as_mut() {
        s.initial_fetch_timeout = Some(Duration { seconds: 0, nanos: 0 });
    }
    hcm::HttpConnectionManager {
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
        normalize_path: Some(true),
        upgrade_configs: vec![hcm::http_connection_manager::UpgradeConfig {
            upgrade_type: "websocket".into(),
            ..Default::default()
        }],
        stream_idle_timeout: Some(Duration { seconds: 0, nanos: 0 }),
        http_filters: vec![
            http_filter(super::route::FAULT_FILTER, &fault::HttpFault::default()),
            http_filter(
                "envoy.filters.http.cors",
                &istiod_proto::envoy::extensions::filters::http::cors::v3::Cors::default(),
            ),
            router(),
        ],
        ..Default::default()
    }
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

fn https_chain(listener: &str, s: &MergedServer) -> Option<FilterChain> {
    let t = s.server.tls.as_ref()?;
    let stat = if s.server.name.is_empty() { format!("outbound_{listener};") } else { s.server.name.clone() };
    let ctx = tls_context(t);
    Some(FilterChain {
        filter_chain_match: sni_match(&s.sni_hosts),
        filters: vec![http_connection_manager(&manager(stat, &s.route_name))],
        transport_socket: Some(core::TransportSocket {
            name: "envoy.transport_sockets.tls".into(),
            config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(&ctx))),
        }),
        transport_socket_connect_timeout: Some(Duration { seconds: 15, nanos: 0 }),
        ..Default::default()
    })
}

/// The listeners of a router's merged Gateways (HTTP and TLS-terminating
/// HTTPS servers; see the module's note for what comes next).
pub fn listeners(m: &MergedGateway) -> Vec<Listener> {
    let mut out: Vec<Listener> = Vec::new();
    for key in &m.ports {
        let name = listener_name(key);
        let servers = m.servers.get(key).map(Vec::as_slice).unwrap_or_default();
        let mut chains = Vec::new();
        if is_http(&key.protocol) {
            if let Some(first) = servers.first() {
                chains.push(FilterChain {
                    filters: vec![http_connection_manager(&manager(format!("outbound_{name};"), &first.route_name))],
                    ..Default::default()
                });
            }
        } else if key.protocol == "HTTPS" {
            chains.extend(servers.iter().filter(|s| !passthrough(&s.server)).filter_map(|s| https_chain(&name, s)));
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
                    ..Default::default()
                });
            }
        }
    }
    for l in &mut out {
        if l.filter_chains.iter().any(|c| c.filter_chain_match.as_ref().is_some_and(|m| !m.server_names.is_empty())) {
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

#[cfg(test)]
mod tests {
    use istiod_kubewatch::istio::{IstioObject, IstioSpec};
    use istiod_proto::prost::Message;

    use super::*;
    use crate::model::gateway::merge;

    fn gateway(spec: &str) -> IstioObject {
        let doc = format!(
            "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: ns}}\nspec: {spec}\n"
        );
        istiod_kubewatch::istio::parse(&serde_yaml_ng::from_str(&doc).unwrap()).unwrap()
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
        let m = merge(&[(&o, g)], |p| p + 8000);
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
    fn istio_mutual_uses_the_agents_secrets() {
        let t = ServerTlsSettings { mode: ServerTlsMode::IstioMutual, ..Default::default() };
        let ctx = tls_context(&t);
        let common = ctx.common_tls_context.unwrap();
        assert_eq!(common.tls_certificate_sds_secret_configs[0].name, "default");
        let Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(v)) =
            common.validation_context_type
        else {
            panic!()
        };
        assert_eq!(v.validation_context_sds_secret_config.unwrap().name, "ROOTCA");
        assert_eq!(ctx.require_client_certificate, Some(true));
    }
}
