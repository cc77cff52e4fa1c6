//! Proxyless gRPC (node metadata `GENERATOR=grpc`): for every service port,
//! an API listener `<host>:<port>` whose HttpConnectionManager takes its
//! routes over RDS from `outbound|<port>||<host>`, and that route
//! configuration, built from the VirtualService of the host (matches on
//! path and headers, weighted destinations to subset clusters, fault
//! injection) or a default route to the service's cluster. The clusters and
//! endpoints are the same ones sidecars get (`cluster.rs`, `endpoint.rs`).

use std::sync::Arc;

use bytes::Bytes;
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::listener::v3::{ApiListener, Listener};
use istiod_proto::envoy::extensions::filters::http::fault::v3 as fault;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::prost::Message;
use istiod_xds_api::snapshot::Kind;

use crate::model::Model;

use super::envoy::{ads, any, http_filter, router};
use super::route::{FAULT_FILTER, Flavor, RouteTable, ServiceRoutes};

/// Adds the gRPC listeners and route configurations of every service port.
pub fn translate(model: &Model, t: &mut super::Translation) {
    // (ExternalName aliases have none: their concrete service serves them.)
    let services: Vec<&crate::model::Service> =
        model.services.values().map(Arc::as_ref).filter(|s| !model.is_alias(&s.hostname)).collect();
    for parts in crate::model::par_map(&services, |svc| service_parts(model, svc)) {
        add_parts(parts, t);
    }
}

/// Replaces the gRPC listeners and route configurations of the services
/// `hosts` (as `old` had them) with what `new` makes of them.
pub fn update_hosts(old: &Model, new: &Model, hosts: &[Arc<str>], t: &mut super::Translation) {
    for svc in hosts.iter().filter_map(|h| old.services.get(h)) {
        for port in &svc.ports {
            let (listener, route) = names(svc, port.port);
            Arc::make_mut(&mut t.api_listeners).remove(&*listener);
            t.resources.remove(&(Kind::Listener, listener.into()));
            Arc::make_mut(&mut t.routes).remove(&*route);
            t.resources.remove(&(Kind::Route, route.into()));
        }
    }
    for svc in hosts.iter().filter_map(|h| new.services.get(h)).filter(|s| !new.is_alias(&s.hostname)) {
        add_service(new, svc, t);
    }
}

/// The API listener's and the route configuration's names for a port.
fn names(svc: &crate::model::Service, port: u16) -> (String, String) {
    (format!("{}:{port}", svc.hostname), format!("outbound|{port}||{}", svc.hostname))
}

fn add_service(model: &Model, svc: &crate::model::Service, t: &mut super::Translation) {
    add_parts(service_parts(model, svc), t);
}

/// What one port of a service adds: its API listener (name, bytes) and
/// its route configuration.
struct PortParts {
    listener: Arc<str>,
    bytes: Bytes,
    table: RouteTable,
}

fn add_parts(parts: Vec<PortParts>, t: &mut super::Translation) {
    for PortParts { listener, bytes, table } in parts {
        Arc::make_mut(&mut t.api_listeners).insert(listener.clone());
        t.resources.insert((Kind::Listener, listener), bytes);
        let route: Arc<str> = table.name.as_str().into();
        t.resources.insert((Kind::Route, route.clone()), table.digest());
        Arc::make_mut(&mut t.routes).insert(route, table);
    }
}

/// [`PortParts`] of each of `svc`'s ports: reads only the model.
fn service_parts(model: &Model, svc: &crate::model::Service) -> Vec<PortParts> {
    let mut parts = Vec::with_capacity(svc.ports.len());
    for port in &svc.ports {
        let (listener_name, route_name) = names(svc, port.port);
        let manager = hcm::HttpConnectionManager {
            stat_prefix: route_name.clone(),
            route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::Rds(hcm::Rds {
                config_source: ads(),
                route_config_name: route_name.clone(),
            })),
            http_filters: vec![http_filter(FAULT_FILTER, &fault::HttpFault::default()), router()],
            ..Default::default()
        };
        let listener = Listener {
            name: listener_name.clone(),
            api_listener: Some(ApiListener { api_listener: Some(any(&manager)) }),
            ..Default::default()
        };
        let hosts = vec![ServiceRoutes::new(model, svc, port.port, Flavor::Grpc)];
        parts.push(PortParts {
            listener: listener_name.into(),
            bytes: Bytes::from(listener.encode_to_vec()),
            table: RouteTable { name: route_name, flavor: Flavor::Grpc, hosts, vs_digest: 0 },
        });
    }
    parts
}

/// A shared (Envoy) cluster as istiod's gRPC generator would send it:
/// no per-endpoint `transport_socket_matches` (no auto mTLS for proxyless
/// clients: istiod cannot know the client uses xDS credentials), ISTIO_MUTUAL
/// through the `default` certificate provider instance (certificate
/// `default`, roots `ROOTCA`, in both the current and the deprecated fields
/// gRPC reads), and no transport socket for other TLS modes, which gRPC's
/// xDS client cannot carry out.
pub fn for_grpc_client(
    mut c: istiod_proto::envoy::config::cluster::v3::Cluster,
    least_request: bool,
) -> istiod_proto::envoy::config::cluster::v3::Cluster {
    use istiod_proto::envoy::config::cluster::v3::CircuitBreakers;
    use istiod_proto::envoy::config::cluster::v3::cluster::LbPolicy;
    use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;
    // Envoy's upstream filters (metadata exchange) are not gRPC's, nor its
    // HTTP and socket options; gRPC balances round robin unless the rule
    // asks for LEAST_REQUEST or a consistent hash (grpcgen's
    // applyLoadBalancing), and is capped only by a rule's
    // `http2MaxRequests` (applyCircuitBreakers).
    c.filters.clear();
    c.typed_extension_protocol_options.clear();
    c.upstream_connection_options = None;
    // (grpcgen's clusters carry no Istio metadata nor outlier detection.)
    c.metadata = None;
    c.outlier_detection = None;
    let kept = match LbPolicy::try_from(c.lb_policy) {
        Ok(LbPolicy::LeastRequest) => least_request,
        Ok(LbPolicy::RingHash | LbPolicy::Maglev) => true,
        _ => false,
    };
    if !kept {
        c.lb_policy = LbPolicy::RoundRobin as i32;
    }
    let max_requests = c.circuit_breakers.take().and_then(|b| b.thresholds.first()?.max_requests);
    c.circuit_breakers = max_requests.filter(|m| *m != u32::MAX).map(|m| CircuitBreakers {
        thresholds: vec![istiod_proto::envoy::config::cluster::v3::circuit_breakers::Thresholds {
            max_requests: Some(m),
            ..Default::default()
        }],
        ..Default::default()
    });
    c.transport_socket_matches.clear();
    let Some(ts) = c.transport_socket.take() else { return c };
    let Some(core::transport_socket::ConfigType::TypedConfig(any_cfg)) = &ts.config_type else { return c };
    let Ok(upstream) = tls::UpstreamTlsContext::decode(any_cfg.value.as_slice()) else { return c };
    let common = upstream.common_tls_context.unwrap_or_default();
    let istio_mutual = common.tls_certificate_sds_secret_configs.iter().any(|s| s.name == "default");
    if !istio_mutual {
        return c;
    }
    let sans = match common.validation_context_type {
        Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(v)) => {
            v.default_validation_context.map(|d| d.match_subject_alt_names).unwrap_or_default()
        }
        _ => Vec::new(),
    };
    let old = |name: &str| tls::common_tls_context::CertificateProviderInstance {
        instance_name: "default".into(),
        certificate_name: name.into(),
    };
    let new = |name: &str| tls::CertificateProviderPluginInstance {
        instance_name: "default".into(),
        certificate_name: name.into(),
    };
    let ctx = tls::UpstreamTlsContext {
        common_tls_context: Some(tls::CommonTlsContext {
            tls_certificate_certificate_provider_instance: Some(old("default")),
            tls_certificate_provider_instance: Some(new("default")),
            validation_context_type: Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(
                tls::common_tls_context::CombinedCertificateValidationContext {
                    default_validation_context: Some(tls::CertificateValidationContext {
                        match_subject_alt_names: sans,
                        ca_certificate_provider_instance: Some(new("ROOTCA")),
                        ..Default::default()
                    }),
                    validation_context_certificate_provider_instance: Some(old("ROOTCA")),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }),
        ..Default::default()
    };
    c.transport_socket = Some(core::TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(&ctx))),
    });
    c
}
