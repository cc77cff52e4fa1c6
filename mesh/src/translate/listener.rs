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

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::listener::v3::{Filter, FilterChain, Listener};
use istiod_proto::envoy::extensions::filters::http::fault::v3 as fault;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::prost::Message;
use istiod_xds_api::snapshot::Kind;

use super::telemetry::{self, Side};
use crate::meshconfig::OutboundPolicy;
use crate::model::{Model, Port, Protocol, Resolution, Service};

/// Outbound capture port (istio-iptables `-p`).
pub const OUTBOUND_PORT: u32 = 15001;
/// The outbound capture listener's name.
pub const VIRTUAL_OUTBOUND: &str = "virtualOutbound";
/// Inbound capture port (istio-iptables `-z`).
pub const INBOUND_PORT: u32 = 15006;

use super::envoy::{ads, any, http_connection_manager, http_filter, router, socket, tcp_proxy_logged};
use super::route::{Flavor, RouteTable, ServiceRoutes};

/// What one service port contributes to the outbound listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The port's shared `0.0.0.0_<port>` HTTP listener and route table.
    Http,
    /// A `<VIP>_<port>` tcp_proxy listener per address.
    Tcp,
    /// A filter chain of the port's SNI listener (TLS, no address).
    Sni,
    /// Nothing: UDP, or headless TCP (virtualOutbound takes it).
    None,
}

/// Whether `port` of `svc` gets a TCP listener per service address (the
/// listeners whose address and port two services can claim).
pub fn is_tcp_listener(svc: &Service, port: &Port) -> bool {
    role(svc, port) == Role::Tcp
}

fn role(svc: &Service, port: &Port) -> Role {
    match port.protocol {
        p if p.is_http() => Role::Http,
        Protocol::Udp => Role::None,
        // Headless TCP goes through virtualOutbound.
        _ if svc.resolution == Resolution::Passthrough => Role::None,
        // No address to match on: the TLS server name tells the hosts
        // apart (external TLS ServiceEntries).
        Protocol::Tls | Protocol::Https if svc.vips.is_empty() => Role::Sni,
        _ => Role::Tcp,
    }
}

/// Adds the sidecar outbound listeners and their route configurations.
pub fn translate(model: &Model, t: &mut super::Translation) {
    // outboundTrafficPolicy: unknown destinations pass through (ALLOW_ANY,
    // the default) or are dropped (REGISTRY_ONLY).
    let side = telemetry::outbound(model);
    let virtual_outbound = virtual_outbound(model.mesh.outbound, &side);
    let name = virtual_outbound.name.as_str().into();
    t.resources.insert((Kind::Listener, name), Bytes::from(virtual_outbound.encode_to_vec()));

    // HTTP ports get one shared listener and route configuration per port;
    // other ports a listener per service address.
    let mut ports: BTreeSet<u16> = BTreeSet::new();
    for svc in model.services.values() {
        for port in &svc.ports {
            match role(svc, port) {
                Role::Http | Role::Sni => {
                    ports.insert(port.port);
                }
                Role::Tcp => {
                    for vip in &svc.vips {
                        let l = tcp_listener(svc, vip, port.port, &side);
                        t.resources.insert((Kind::Listener, l.name.as_str().into()), Bytes::from(l.encode_to_vec()));
                    }
                }
                Role::None => {}
            }
        }
    }
    for port in ports {
        shared_port(model, port, &side, t);
    }
}

/// Makes `0.0.0.0_<port>` (and route table `"<port>"`) what `model` says,
/// from every service with the port: the HTTP listener if one is HTTP,
/// else the SNI listener of the TLS hosts without addresses, else nothing.
fn shared_port(model: &Model, port: u16, side: &Side, t: &mut super::Translation) {
    let name: Arc<str> = format!("0.0.0.0_{port}").into();
    let table: Arc<str> = port.to_string().into();
    let mut sni: Vec<Arc<str>> = Vec::new();
    let mut http: Vec<Arc<ServiceRoutes>> = Vec::new();
    for svc in model.services.values() {
        let mut roles = svc.ports.iter().filter(|p| p.port == port).map(|p| role(svc, p));
        match roles.clone().any(|r| r == Role::Http) {
            true => http.push(ServiceRoutes::new(model, svc, port, Flavor::Envoy)),
            false if roles.any(|r| r == Role::Sni) => sni.push(svc.hostname.clone()),
            false => {}
        }
    }
    let routes = Arc::make_mut(&mut t.routes);
    if !http.is_empty() {
        if !sni.is_empty() {
            // One listener per port: HTTP wins, as in istiod's conflict rules.
            tracing::warn!(target: "model", port, "TLS hosts without addresses share a port with HTTP services; not listening for them");
        }
        t.resources.insert((Kind::Listener, name), Bytes::from(http_listener(port, side).encode_to_vec()));
        let rt = RouteTable { name: table.to_string(), flavor: Flavor::Envoy, hosts: http };
        t.resources.insert((Kind::Route, table.clone()), rt.digest());
        routes.insert(table, rt);
        return;
    }
    routes.remove(&table);
    t.resources.remove(&(Kind::Route, table));
    match sni.is_empty() {
        true => t.resources.remove(&(Kind::Listener, name)),
        false => {
            t.resources.insert((Kind::Listener, name), Bytes::from(sni_listener(port, &sni, side).encode_to_vec()))
        }
    };
}

/// Brings the outbound listeners and route tables of `old` up to `new`,
/// where only the services `hosts` changed (added, removed or edited):
/// their `<VIP>_<port>` listeners, and the shared listener and route table
/// of each port they had or have. A port that stays HTTP only has the
/// hosts' virtual hosts replaced; the other ports are rebuilt from the
/// services that have them.
pub fn update_hosts(old: &Model, new: &Model, hosts: &[Arc<str>], t: &mut super::Translation) {
    let side = telemetry::outbound(new);
    update_hosts_only(old, new, hosts, &side, t);
    if telemetry::reads_services(new) && side != telemetry::outbound(old) {
        // A collector's Service came or went: every outbound listener's
        // tracer or access log changes, not only those of `hosts`.
        translate(new, t);
    }
}

/// [`update_hosts`] for the listeners and route tables of `hosts` alone.
fn update_hosts_only(old: &Model, new: &Model, hosts: &[Arc<str>], side: &Side, t: &mut super::Translation) {
    let mut tcp: BTreeSet<(String, u16)> = BTreeSet::new();
    let mut ports: BTreeSet<u16> = BTreeSet::new();
    for svc in hosts.iter().flat_map(|h| [old.services.get(h), new.services.get(h)]).flatten() {
        for port in &svc.ports {
            match role(svc, port) {
                Role::Tcp => tcp.extend(svc.vips.iter().map(|v| (v.clone(), port.port))),
                Role::Http | Role::Sni => {
                    ports.insert(port.port);
                }
                Role::None => {}
            }
        }
    }
    // A `<VIP>_<port>` name is the last service's that makes it, as in
    // `translate`.
    for (vip, port) in tcp {
        let maker = new
            .services
            .values()
            .rev()
            .find(|s| s.vips.contains(&vip) && s.ports.iter().any(|p| p.port == port && role(s, p) == Role::Tcp));
        let key = (Kind::Listener, Arc::<str>::from(format!("{vip}_{port}")));
        match maker {
            Some(svc) => t.resources.insert(key, Bytes::from(tcp_listener(svc, &vip, port, side).encode_to_vec())),
            None => t.resources.remove(&key),
        };
    }
    for port in ports {
        let http =
            |m: &Model| m.services.values().any(|s| s.ports.iter().any(|p| p.port == port && p.protocol.is_http()));
        let table: Arc<str> = port.to_string().into();
        if !(http(old) && http(new) && t.routes.contains_key(&table)) {
            shared_port(new, port, side, t);
            continue;
        }
        // Still HTTP: replace the hosts' virtual hosts, in hostname order.
        let routes = Arc::make_mut(&mut t.routes);
        let Some(rt) = routes.get_mut(&table) else { continue };
        for host in hosts {
            let at = rt.hosts.binary_search_by(|vh| vh.host.cmp(host));
            let now = new
                .services
                .get(host)
                .filter(|s| s.ports.iter().any(|p| p.port == port && p.protocol.is_http()))
                .map(|s| ServiceRoutes::new(new, s, port, Flavor::Envoy));
            match (at, now) {
                (Ok(i), Some(vh)) => rt.hosts[i] = vh,
                (Ok(i), None) => {
                    rt.hosts.remove(i);
                }
                (Err(i), Some(vh)) => rt.hosts.insert(i, vh),
                (Err(_), None) => {}
            }
        }
        let digest = rt.digest();
        t.resources.insert((Kind::Route, table), digest);
    }
}

/// `0.0.0.0_<port>`: the HTTP listener of a port, taking its routes from
/// route configuration `"<port>"` over RDS. Its filters are istiod's for a
/// sidecar's outbound HTTP (listener_builder.go): metadata exchange, gRPC
/// stats, the ALPN override, fault, CORS, the stats filter where a metrics
/// provider applies, the router.
fn http_listener(port: u16, side: &Side) -> Listener {
    let mut http_filters = vec![
        telemetry::mx_http(false),
        telemetry::grpc_stats(),
        telemetry::alpn(),
        http_filter(super::route::FAULT_FILTER, &fault::HttpFault::default()),
        http_filter(
            "envoy.filters.http.cors",
            &istiod_proto::envoy::extensions::filters::http::cors::v3::Cors::default(),
        ),
    ];
    http_filters.extend(side.stats.as_ref().map(telemetry::stats_http));
    http_filters.push(router());
    let mut manager = hcm::HttpConnectionManager {
        stat_prefix: format!("outbound_0.0.0.0_{port}"),
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::Rds(hcm::Rds {
            config_source: ads(),
            route_config_name: port.to_string(),
        })),
        http_filters,
        access_log: side.log.clone(),
        use_remote_address: Some(false),
        normalize_path: Some(true),
        ..Default::default()
    };
    side.trace(&mut manager);
    Listener {
        name: format!("0.0.0.0_{port}"),
        address: socket("0.0.0.0", u32::from(port)),
        bind_to_port: Some(false),
        traffic_direction: core::TrafficDirection::Outbound as i32,
        filter_chains: vec![FilterChain { filters: vec![http_connection_manager(&manager)], ..Default::default() }],
        ..Default::default()
    }
}

/// An outbound TCP chain's filters: the stats filter where a metrics
/// provider applies, then the tcp_proxy (networkfilter.go; outbound
/// metadata exchange is on the cluster).
fn outbound_tcp(side: &Side, stat_prefix: &str, cluster: &str) -> Vec<Filter> {
    let mut filters: Vec<Filter> = side.stats.as_ref().map(telemetry::stats_network).into_iter().collect();
    filters.push(tcp_proxy_logged(stat_prefix, cluster, &side.log));
    filters
}

/// `<vip>_<port>`: tcp_proxy to the service's cluster.
fn tcp_listener(svc: &Service, vip: &str, port: u16, side: &Side) -> Listener {
    let cluster = format!("outbound|{port}||{}", svc.hostname);
    Listener {
        name: format!("{vip}_{port}"),
        address: socket(vip, u32::from(port)),
        bind_to_port: Some(false),
        traffic_direction: core::TrafficDirection::Outbound as i32,
        filter_chains: vec![FilterChain { filters: outbound_tcp(side, &cluster, &cluster), ..Default::default() }],
        ..Default::default()
    }
}

/// `virtualOutbound` on 0.0.0.0:15001, where iptables sends every outbound
/// connection: `use_original_dst` hands it to the listener of its original
/// destination; what none takes passes through (ALLOW_ANY) or is dropped
/// (REGISTRY_ONLY), as istiod's `buildVirtualOutboundListener` makes it.
pub fn virtual_outbound(policy: OutboundPolicy, side: &Side) -> Listener {
    let catchall = match policy {
        OutboundPolicy::AllowAny => "PassthroughCluster",
        OutboundPolicy::RegistryOnly => "BlackHoleCluster",
    };
    Listener {
        name: VIRTUAL_OUTBOUND.into(),
        address: socket("0.0.0.0", OUTBOUND_PORT),
        use_original_dst: Some(true),
        access_log: side.log.iter().map(telemetry::listener_access_log).collect(),
        traffic_direction: core::TrafficDirection::Outbound as i32,
        filter_chains: vec![FilterChain {
            name: "virtualOutbound-catchall-tcp".into(),
            // Logged either way (listener_builder.go): blocked egress shows.
            filters: outbound_tcp(side, catchall, catchall),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// `0.0.0.0_<port>` for TLS hosts without addresses: the tls_inspector reads
/// the client's server name and a filter chain per host forwards to its
/// cluster (`*.example.com` hosts match as Envoy matches wildcard names).
fn sni_listener(port: u16, hosts: &[Arc<str>], side: &Side) -> Listener {
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
                    filters: outbound_tcp(side, &cluster, &cluster),
                    ..Default::default()
                }
            })
            .collect(),
        ..Default::default()
    }
}
