//! Envoy sidecar outbound listeners, after istiod's `networking/core`
//! (the parts every sidecar shares; `inbound.rs` makes the per-workload
//! ones): `virtualOutbound` on 0.0.0.0:15001 passing unknown traffic
//! through (or dropping it under REGISTRY_ONLY), `0.0.0.0_<port>` HTTP
//! listeners using RDS `"<port>"` (whose route tables, a virtual host per
//! service, are made here and rendered by `route.rs`), `<VIP>_<port>` TCP
//! listeners with tcp_proxy, and SNI listeners for TLS hosts without
//! addresses.
//!
//! Sidecar scoping and `exportTo` filter these per proxy (`scope.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::listener::v3::{FilterChain, Listener};
use istiod_proto::envoy::extensions::filters::http::fault::v3 as fault;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::prost::Message;
use istiod_xds::ads::Kind;

use crate::mesh::OutboundPolicy;
use crate::model::{Model, Protocol, Resolution};

/// Outbound capture port (istio-iptables `-p`).
pub const OUTBOUND_PORT: u32 = 15001;
/// The outbound capture listener's name.
pub const VIRTUAL_OUTBOUND: &str = "virtualOutbound";
/// Inbound capture port (istio-iptables `-z`).
pub const INBOUND_PORT: u32 = 15006;

use super::envoy::{ads, any, http_connection_manager, http_filter, router, socket, tcp_proxy};
use super::route::{Flavor, RouteTable, ServiceRoutes};

/// Adds the sidecar outbound listeners and their route configurations.
pub fn translate(model: &Model, t: &mut super::Translation) {
    let (out, routes) = (&mut t.resources, Arc::make_mut(&mut t.routes));
    // outboundTrafficPolicy: unknown destinations pass through (ALLOW_ANY,
    // the default) or are dropped (REGISTRY_ONLY).
    let virtual_outbound = virtual_outbound(model.mesh.outbound);
    out.insert((Kind::Listener, virtual_outbound.name.as_str().into()), Bytes::from(virtual_outbound.encode_to_vec()));

    // HTTP ports get one shared listener and route configuration per port;
    // other ports a listener per service address.
    let mut http_ports: BTreeSet<u16> = BTreeSet::new();
    let mut sni: BTreeMap<u16, Vec<Arc<str>>> = BTreeMap::new();
    for svc in model.services.values() {
        for port in &svc.ports {
            match port.protocol {
                p if p.is_http() => {
                    http_ports.insert(port.port);
                }
                Protocol::Udp => {}
                _ => {
                    if svc.resolution == Resolution::Passthrough {
                        continue; // headless TCP goes through virtualOutbound
                    }
                    if svc.vips.is_empty() && matches!(port.protocol, Protocol::Tls | Protocol::Https) {
                        // No address to match on: the TLS server name tells
                        // the hosts apart (external TLS ServiceEntries).
                        sni.entry(port.port).or_default().push(svc.hostname.clone());
                        continue;
                    }
                    for vip in &svc.vips {
                        let name = format!("{vip}_{}", port.port);
                        let cluster = format!("outbound|{}||{}", port.port, svc.hostname);
                        let l = Listener {
                            name: name.clone(),
                            address: socket(vip, u32::from(port.port)),
                            bind_to_port: Some(false),
                            traffic_direction: core::TrafficDirection::Outbound as i32,
                            filter_chains: vec![FilterChain {
                                filters: vec![tcp_proxy(&cluster, &cluster)],
                                ..Default::default()
                            }],
                            ..Default::default()
                        };
                        out.insert((Kind::Listener, name.into()), Bytes::from(l.encode_to_vec()));
                    }
                }
            }
        }
    }
    for (port, hosts) in sni {
        if http_ports.contains(&port) {
            // One listener per port: HTTP wins, as in istiod's conflict rules.
            tracing::warn!(target: "model", port, "TLS hosts without addresses share a port with HTTP services; not listening for them");
            continue;
        }
        let l = sni_listener(port, &hosts);
        out.insert((Kind::Listener, l.name.as_str().into()), Bytes::from(l.encode_to_vec()));
    }
    for port in http_ports {
        let name = format!("0.0.0.0_{port}");
        let manager = hcm::HttpConnectionManager {
            stat_prefix: format!("outbound_0.0.0.0_{port}"),
            route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::Rds(hcm::Rds {
                config_source: ads(),
                route_config_name: port.to_string(),
            })),
            http_filters: vec![
                http_filter(
                    "envoy.filters.http.cors",
                    &istiod_proto::envoy::extensions::filters::http::cors::v3::Cors::default(),
                ),
                http_filter(super::route::FAULT_FILTER, &fault::HttpFault::default()),
                router(),
            ],
            use_remote_address: Some(false),
            normalize_path: Some(true),
            ..Default::default()
        };
        let l = Listener {
            name: name.clone(),
            address: socket("0.0.0.0", u32::from(port)),
            bind_to_port: Some(false),
            traffic_direction: core::TrafficDirection::Outbound as i32,
            filter_chains: vec![FilterChain { filters: vec![http_connection_manager(&manager)], ..Default::default() }],
            ..Default::default()
        };
        out.insert((Kind::Listener, name.into()), Bytes::from(l.encode_to_vec()));
        let hosts = model
            .services
            .values()
            .filter(|s| s.ports.iter().any(|p| p.port == port && p.protocol.is_http()))
            .map(|svc| ServiceRoutes::new(model, svc, port, Flavor::Envoy))
            .collect();
        routes.insert(port.to_string().into(), RouteTable { name: port.to_string(), flavor: Flavor::Envoy, hosts });
    }
}

/// `virtualOutbound` on 0.0.0.0:15001, where iptables sends every outbound
/// connection: `use_original_dst` hands it to the listener of its original
/// destination; what none takes passes through (ALLOW_ANY) or is dropped
/// (REGISTRY_ONLY), as istiod's `buildVirtualOutboundListener` makes it.
pub fn virtual_outbound(policy: OutboundPolicy) -> Listener {
    let catchall = match policy {
        OutboundPolicy::AllowAny => "PassthroughCluster",
        OutboundPolicy::RegistryOnly => "BlackHoleCluster",
    };
    Listener {
        name: VIRTUAL_OUTBOUND.into(),
        address: socket("0.0.0.0", OUTBOUND_PORT),
        use_original_dst: Some(true),
        traffic_direction: core::TrafficDirection::Outbound as i32,
        filter_chains: vec![FilterChain {
            name: "virtualOutbound-catchall-tcp".into(),
            filters: vec![tcp_proxy(catchall, catchall)],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// `0.0.0.0_<port>` for TLS hosts without addresses: the tls_inspector reads
/// the client's server name and a filter chain per host forwards to its
/// cluster (`*.example.com` hosts match as Envoy matches wildcard names).
fn sni_listener(port: u16, hosts: &[Arc<str>]) -> Listener {
    use istiod_proto::envoy::config::listener::v3::{FilterChainMatch, ListenerFilter, listener_filter};
    use istiod_proto::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
    Listener {
        name: format!("0.0.0.0_{port}"),
        address: socket("0.0.0.0", u32::from(port)),
        bind_to_port: Some(false),
        traffic_direction: core::TrafficDirection::Outbound as i32,
        listener_filters: vec![ListenerFilter {
            name: "envoy.filters.listener.tls_inspector".into(),
            config_type: Some(listener_filter::ConfigType::TypedConfig(any(&TlsInspector::default()))),
            ..Default::default()
        }],
        filter_chains: hosts
            .iter()
            .map(|h| {
                let cluster = format!("outbound|{port}||{h}");
                FilterChain {
                    name: cluster.clone(),
                    filter_chain_match: Some(FilterChainMatch {
                        server_names: vec![h.to_string()],
                        ..Default::default()
                    }),
                    filters: vec![tcp_proxy(&cluster, &cluster)],
                    ..Default::default()
                }
            })
            .collect(),
        ..Default::default()
    }
}
