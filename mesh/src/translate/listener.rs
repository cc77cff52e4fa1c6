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

/// How a service port listens outbound (istiod's `ListenerProtocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listen {
    /// HCM on the shared `0.0.0.0_<port>`, routes from RDS `"<port>"`.
    Http,
    /// tcp_proxy (TLS and HTTPS by server name where the address does not
    /// tell the hosts apart).
    Tcp,
    /// Sniffed: a tcp_proxy chain and an HCM chain chosen by the HTTP
    /// inspector's ALPN.
    Auto,
}

fn listen(port: &Port) -> Option<Listen> {
    match port.protocol {
        p if p.is_http() => Some(Listen::Http),
        Protocol::Udp => None,
        Protocol::Unsupported => Some(Listen::Auto),
        _ => Some(Listen::Tcp),
    }
}

/// Where a service port listens outbound: the bind address, and the
/// destination CIDR its chains match when the address is a range.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Bind {
    address: String,
    cidr: Option<String>,
}

/// The binds of a service port (istiod's `buildSidecarOutboundListeners`):
/// HTTP shares `0.0.0.0`; other protocols listen on each service address
/// (a CIDR address on `0.0.0.0`, matched by prefix), else on each endpoint
/// of a passthrough service (headless), else on `0.0.0.0` (a ServiceEntry
/// without addresses; a Kubernetes headless service without endpoints gets
/// none).
fn binds(svc: &Service, port: &Port) -> Vec<Bind> {
    let wildcard = || Bind { address: "0.0.0.0".into(), cidr: None };
    match listen(port) {
        None => vec![],
        Some(Listen::Http) => vec![wildcard()],
        Some(_) if !svc.vips.is_empty() => proxy_vips(svc)
            .iter()
            .map(|v| match v.contains('/') {
                true => Bind { address: "0.0.0.0".into(), cidr: Some(v.clone()) },
                false => Bind { address: v.clone(), cidr: None },
            })
            .collect(),
        Some(_) if svc.resolution == Resolution::Passthrough => {
            let mut ips: Vec<String> = svc
                .endpoints
                .iter()
                .filter(|e| e.address.parse::<std::net::IpAddr>().is_ok())
                .map(|e| e.address.to_string())
                .collect();
            ips.sort();
            ips.dedup();
            match (ips.is_empty(), svc.kubernetes) {
                (false, _) => ips.into_iter().map(|a| Bind { address: a, cidr: None }).collect(),
                (true, false) => vec![wildcard()],
                (true, true) => vec![],
            }
        }
        // A ServiceEntry without addresses: on `0.0.0.0`, and on each
        // address istiod allocated it, for the proxies that resolve its
        // host to them (see [`auto_listeners`]).
        Some(_) => std::iter::once(wildcard())
            .chain(svc.auto_addresses.iter().map(|a| Bind { address: a.clone(), cidr: None }))
            .collect(),
    }
}

/// The addresses an IPv4 proxy's listeners of `svc` bind: a Kubernetes
/// Service's first IPv4 cluster IP (istiod's `GetAddressForProxy`; a
/// dual-stack proxy gets the others as additional addresses, see
/// `family::adapt`), a ServiceEntry's every address (each a service of
/// its own in istiod).
fn proxy_vips(svc: &Service) -> &[String] {
    if !svc.kubernetes || svc.vips.len() < 2 {
        return &svc.vips;
    }
    match svc.vips.iter().position(|v| v.parse::<std::net::Ipv4Addr>().is_ok()) {
        Some(i) => &svc.vips[i..=i],
        None => &svc.vips,
    }
}

/// The outbound listeners that exist only for allocated addresses
/// (`<address>_<port>` of a ServiceEntry host istiod gave addresses): only
/// proxies that resolve hosts to them (DNS capture) are served them, as
/// istiod builds them from `GetAllAddressesForProxy`.
pub fn auto_listeners(model: &Model) -> std::collections::HashSet<Arc<str>> {
    let mut out = std::collections::HashSet::new();
    for svc in model.services.values().filter(|s| !s.auto_addresses.is_empty() && s.vips.is_empty()) {
        for port in svc.ports.iter().filter(|p| !matches!(listen(p), None | Some(Listen::Http))) {
            out.extend(svc.auto_addresses.iter().map(|a| Arc::from(format!("{a}_{}", port.port))));
        }
    }
    out
}

/// Whether `svc` contributes a chain to the outbound listener `address`
/// on `port` (what Sidecar scoping asks of a shared listener).
pub fn contributes(svc: &Service, port: u16, address: &str) -> bool {
    svc.ports.iter().filter(|p| p.port == port).any(|p| binds(svc, p).iter().any(|b| b.address == address))
}

/// Whether `port` of `svc` gets a listener on each of the service's own
/// addresses (the listeners two services can claim).
pub fn is_tcp_listener(svc: &Service, port: &Port) -> bool {
    !matches!(listen(port), None | Some(Listen::Http)) && !svc.vips.is_empty()
}

/// Adds the sidecar outbound listeners and their route configurations.
pub fn translate(model: &Model, t: &mut super::Translation) {
    // outboundTrafficPolicy: unknown destinations pass through (ALLOW_ANY,
    // the default) or are dropped (REGISTRY_ONLY).
    let side = telemetry::outbound(model);
    let virtual_outbound = virtual_outbound(model.mesh.outbound, &model.mesh, &side);
    let name = virtual_outbound.name.as_str().into();
    t.resources.insert((Kind::Listener, name), Bytes::from(virtual_outbound.encode_to_vec()));

    let mut keys: BTreeSet<(String, u16)> = BTreeSet::new();
    let mut http_ports: BTreeSet<u16> = BTreeSet::new();
    // (ExternalName aliases get no listeners or virtual hosts: listener.go,
    // route.go skip resolution Alias.)
    for svc in model.services.values().filter(|s| !model.is_alias(&s.hostname)) {
        for port in &svc.ports {
            if listen(port) == Some(Listen::Http) || listen(port) == Some(Listen::Auto) {
                http_ports.insert(port.port);
            }
            keys.extend(binds(svc, port).into_iter().map(|b| (b.address, port.port)));
        }
    }
    for (address, port) in keys {
        set_listener(model, &address, port, &side, t);
    }
    let digests = super::route::special_virtual_services_digests(model, http_ports.contains(&80));
    for port in http_ports {
        route_table(model, port, super::route::special_digest_of(port, digests), t);
    }
}

/// Makes the outbound listener `<address>_<port>` what `model` says (or
/// removes it).
fn set_listener(model: &Model, address: &str, port: u16, side: &Side, t: &mut super::Translation) {
    let key = (Kind::Listener, Arc::<str>::from(format!("{address}_{port}")));
    match outbound_listener(model, address, port, side) {
        Some(l) => t.resources.insert(key, Bytes::from(l.encode_to_vec())),
        None => t.resources.remove(&key),
    };
}

/// Makes route table `"<port>"` what `model` says: a virtual host per
/// service with an HTTP or sniffed port `port`.
fn route_table(model: &Model, port: u16, vs_digest: u64, t: &mut super::Translation) {
    let table: Arc<str> = port.to_string().into();
    let services: Vec<&crate::model::Service> = model
        .services
        .values()
        .map(Arc::as_ref)
        .filter(|s| s.ports.iter().any(|p| p.port == port && has_routes(p)) && !model.is_alias(&s.hostname))
        .collect();
    let http: Vec<Arc<ServiceRoutes>> =
        crate::model::par_map(&services, |s| ServiceRoutes::new(model, s, port, Flavor::Envoy));
    let routes = Arc::make_mut(&mut t.routes);
    if http.is_empty() {
        routes.remove(&table);
        t.resources.remove(&(Kind::Route, table));
        return;
    }
    let rt = RouteTable { name: table.to_string(), flavor: Flavor::Envoy, hosts: http, vs_digest };
    t.resources.insert((Kind::Route, table.clone()), rt.digest());
    routes.insert(table, rt);
}

/// Whether route configuration 80 exists: some service's port 80 may be
/// HTTP.
fn serves_80(model: &Model) -> bool {
    model.services.values().any(|s| s.ports.iter().any(|p| p.port == 80 && has_routes(p)))
}

/// Whether a port's traffic may be HTTP, routed by route table `"<port>"`.
fn has_routes(p: &Port) -> bool {
    matches!(listen(p), Some(Listen::Http | Listen::Auto))
}

/// One filter chain of an outbound listener, before it is built
/// (istiod's `filterChainOpts`).
#[derive(Debug, Clone)]
struct ChainOpts {
    sni: Vec<String>,
    cidrs: Vec<String>,
    alpn: Vec<&'static str>,
    transport: &'static str,
    /// None: the port's HCM; else tcp_proxy to this cluster (the stat
    /// prefix, with `weighted` set).
    cluster: Option<String>,
    /// A VirtualService route's weighted clusters (empty: `cluster`).
    weighted: Vec<(String, u32)>,
    /// The service port's protocol (its TCP chains' protocol filter).
    protocol: Protocol,
}

/// The ALPNs the HTTP inspector sets for plaintext HTTP
/// (`plaintextHTTPALPNs`, without HTTP/1.0).
const PLAINTEXT_HTTP_ALPNS: [&str; 2] = ["http/1.1", "h2c"];

/// `plaintextHTTPALPNs` as `PILOT_HTTP10` makes them.
/// Whether a proxy's node asks for HTTP/1.0 (`HTTP10` metadata `"1"`,
/// istiod's `enableHTTP10`): its HTTP managers accept it, as under
/// `PILOT_HTTP10` (whose sniffing `http/1.0` ALPN it does not add).
pub fn http10_metadata(class: &crate::node::ProxyClass) -> bool {
    class.metadata.iter().any(|(k, v)| &**k == "HTTP10" && &**v == "1")
}

/// `l` with every HTTP manager accepting HTTP/1.0 (a proxy's `HTTP10`
/// metadata on the listeners it shares with others); `None` when it has
/// no HTTP manager or all accept it already.
pub fn accepting_http10(mut l: Listener) -> Option<Listener> {
    let mut changed = false;
    for c in l.filter_chains.iter_mut().chain(l.default_filter_chain.as_mut()) {
        for f in c.filters.iter_mut().filter(|f| f.name == "envoy.filters.network.http_connection_manager") {
            let Some(istiod_proto::envoy::config::listener::v3::filter::ConfigType::TypedConfig(a)) =
                &mut f.config_type
            else {
                continue;
            };
            let Ok(mut m) = hcm::HttpConnectionManager::decode(a.value.as_slice()) else { continue };
            let options = m.http_protocol_options.get_or_insert_with(Default::default);
            if !options.accept_http_10 {
                options.accept_http_10 = true;
                a.value = m.encode_to_vec();
                changed = true;
            }
        }
    }
    changed.then_some(l)
}

pub(crate) fn plaintext_http_alpns(http10: bool) -> &'static [&'static str] {
    const WITH_HTTP10: [&str; 3] = ["http/1.0", "http/1.1", "h2c"];
    if http10 { &WITH_HTTP10 } else { &PLAINTEXT_HTTP_ALPNS }
}

impl ChainOpts {
    /// `isMatchAll`.
    fn match_all(&self) -> bool {
        (self.sni.is_empty() || self.sni.iter().any(|s| s == "*"))
            && self.alpn.is_empty()
            && self.transport.is_empty()
            && self.cidrs.is_empty()
    }

    /// `conflictsWith`: the same match.
    fn conflicts_with(&self, other: &ChainOpts) -> bool {
        let sni = |v: &[String]| v.iter().filter(|s| *s != "*").cloned().collect::<BTreeSet<_>>();
        let cidr =
            |v: &[String]| v.iter().filter(|c| !c.starts_with("0.0.0.0")).map(|c| cidr_key(c)).collect::<BTreeSet<_>>();
        self.transport == other.transport
            && self.alpn == other.alpn
            && sni(&self.sni) == sni(&other.sni)
            && cidr(&self.cidrs) == cidr(&other.cidrs)
    }

    /// `toFilterChainMatch`.
    fn filter_chain_match(&self) -> istiod_proto::envoy::config::listener::v3::FilterChainMatch {
        let mut m = istiod_proto::envoy::config::listener::v3::FilterChainMatch {
            application_protocols: self.alpn.iter().map(|a| a.to_string()).collect(),
            transport_protocol: self.transport.into(),
            ..Default::default()
        };
        if !self.sni.iter().any(|s| s == "*") {
            let mut sni = self.sni.clone();
            sni.sort();
            m.server_names = sni;
        }
        let mut cidrs = self.cidrs.clone();
        cidrs.sort();
        for c in cidrs {
            let (addr, len) = match c.split_once('/') {
                Some((a, l)) => (a.to_string(), l.parse().unwrap_or(32)),
                None => (c.clone(), if c.contains(':') { 128 } else { 32 }),
            };
            if addr != "0.0.0.0" {
                m.prefix_ranges.push(core::CidrRange { address_prefix: addr, prefix_len: Some(len) });
            }
        }
        m
    }
}

/// A CIDR masked to its prefix (`1.2.3.4/8` and `1.5.6.7/8` are one).
fn cidr_key(c: &str) -> String {
    let (addr, len) = c.split_once('/').unwrap_or((c, ""));
    match (addr.parse::<std::net::IpAddr>(), len.parse::<u32>()) {
        (Ok(std::net::IpAddr::V4(a)), Ok(l)) if l <= 32 => {
            let mask = u32::MAX.checked_shl(32 - l).unwrap_or(0);
            format!("{}/{l}", std::net::Ipv4Addr::from(u32::from(a) & mask))
        }
        (Ok(std::net::IpAddr::V6(a)), Ok(l)) if l <= 128 => {
            let mask = u128::MAX.checked_shl(128 - l).unwrap_or(0);
            format!("{}/{l}", std::net::Ipv6Addr::from(u128::from(a) & mask))
        }
        _ => c.to_string(),
    }
}

/// The chains one service port brings to a listener bound as `bind`
/// (`buildSidecarOutboundTCPListenerOpts`, the TLS variant, and the HTTP
/// options with the inspector's ALPN on a wildcard bind).
fn chains_of(model: &Model, svc: &Service, port: &Port, bind: &Bind) -> Vec<ChainOpts> {
    let http = ChainOpts {
        sni: vec![],
        cidrs: vec![],
        alpn: plaintext_http_alpns(model.mesh.http10).to_vec(),
        transport: "raw_buffer",
        cluster: None,
        weighted: vec![],
        protocol: port.protocol,
    };
    let cluster_port = if svc.ports.len() == 1 { svc.ports[0].port } else { port.port };
    let cluster = format!("outbound|{cluster_port}||{}", svc.hostname);
    let cidrs: Vec<String> = bind.cidr.iter().cloned().collect();
    let tcp = || {
        // TLS: the server name tells hosts apart where the address does
        // not (a CIDR, or a wildcard bind of a service without address).
        let sni = match matches!(port.protocol, Protocol::Tls | Protocol::Https)
            && (bind.cidr.is_some() || (svc.vips.is_empty() && bind.address == "0.0.0.0"))
        {
            true => vec![svc.hostname.to_string()],
            false => vec![],
        };
        ChainOpts {
            sni,
            cidrs: cidrs.clone(),
            alpn: vec![],
            transport: "",
            cluster: Some(cluster.clone()),
            weighted: vec![],
            protocol: port.protocol,
        }
    };
    // A VirtualService's tcp or tls routes for the host replace the
    // default chain where they apply.
    let routed = |default: ChainOpts| -> Vec<ChainOpts> {
        let (chains, needs_default) = super::l4::sidecar_chains(model, svc, port, &cidrs);
        let mut out: Vec<ChainOpts> = chains
            .into_iter()
            .map(|c| ChainOpts {
                sni: c.sni,
                cidrs: c.cidrs,
                alpn: vec![],
                transport: "",
                cluster: Some(c.stat_prefix),
                weighted: c.weighted,
                protocol: port.protocol,
            })
            .collect();
        if needs_default {
            out.push(default);
        }
        out
    };
    match listen(port) {
        None => vec![],
        Some(Listen::Http) => vec![http],
        Some(Listen::Tcp) => routed(tcp()),
        Some(Listen::Auto) => {
            let mut out = routed(tcp());
            out.push(http);
            out
        }
    }
}

/// The outbound listener `<address>_<port>`, from every service port bound
/// there in service order, merged by istiod's conflict rules: HTTP joins an
/// existing listener only if it is TCP (turning it sniffed), TCP chains are
/// added unless one with the same match exists. None when no service
/// listens there.
fn outbound_listener(model: &Model, address: &str, port: u16, side: &Side) -> Option<Listener> {
    // (The entry's protocol: HTTP entries on the wildcard are sniffed.)
    let mut entry: Option<(bool, Vec<ChainOpts>)> = None;
    for svc in model.services.values().filter(|s| !model.is_alias(&s.hostname)) {
        for p in svc.ports.iter().filter(|p| p.port == port) {
            let Some(kind) = listen(p) else { continue };
            for bind in binds(svc, p).into_iter().filter(|b| b.address == address) {
                let incoming = chains_of(model, svc, p, &bind);
                match (&mut entry, kind) {
                    (None, Listen::Tcp) => entry = Some((true, incoming)),
                    (None, _) => entry = Some((false, incoming)),
                    // HTTP over HTTP or sniffed: the listener exists.
                    (Some((false, _)), Listen::Http) => {}
                    (Some((tcp, chains)), Listen::Http) => {
                        merge(chains, incoming);
                        *tcp = false;
                    }
                    (Some((tcp, chains)), Listen::Auto) => {
                        // Sniffed over sniffed merges the TCP chains only.
                        let incoming = match *tcp {
                            true => incoming,
                            false => incoming.into_iter().filter(|c| c.cluster.is_some()).collect(),
                        };
                        merge(chains, incoming);
                        *tcp = false;
                    }
                    (Some((_, chains)), Listen::Tcp) => merge(chains, incoming),
                }
            }
        }
    }
    let (_, chains) = entry?;
    Some(build_outbound(address, port, chains, &model.mesh, side))
}

/// `mergeTCPFilterChains`.
fn merge(chains: &mut Vec<ChainOpts>, incoming: Vec<ChainOpts>) {
    for c in incoming {
        if !chains.iter().any(|e| e.conflicts_with(&c)) {
            chains.push(c);
        } else {
            tracing::debug!(target: "model", cluster = ?c.cluster, "outbound filter chain conflicts with an existing one; skipped");
        }
    }
}

/// The fallthrough chain of an outbound listener (`PassthroughFilterChain`):
/// what no chain takes passes through, or is dropped under REGISTRY_ONLY.
pub fn passthrough_chain(policy: OutboundPolicy, side: &Side) -> FilterChain {
    let cluster = if policy.allows_any() { "PassthroughCluster" } else { "BlackHoleCluster" };
    FilterChain {
        name: "PassthroughFilterChain".into(),
        filter_chain_match: Some(Default::default()),
        filters: outbound_tcp(side, cluster, cluster),
        ..Default::default()
    }
}

/// `buildListenerFromEntry`: the listener filters the chains need (TLS
/// inspector for server names, HTTP inspector for ALPN), a match-all chain
/// as the default chain, or the fallthrough chain when there is none.
fn build_outbound(
    address: &str,
    port: u16,
    chains: Vec<ChainOpts>,
    mesh: &crate::meshconfig::MeshSettings,
    side: &Side,
) -> Listener {
    let policy = mesh.outbound;
    let dfp = (policy == OutboundPolicy::AllowAnyDynamicDns).then_some(mesh.dynamic_dns_max_hosts);
    use istiod_proto::envoy::config::listener::v3::{ListenerFilter, listener_filter};
    use istiod_proto::envoy::extensions::filters::listener::http_inspector::v3::HttpInspector;
    use istiod_proto::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
    let name = format!("{address}_{port}");
    let mut l = Listener {
        name: name.clone(),
        address: socket(address, u32::from(port)),
        bind_to_port: Some(false),
        traffic_direction: core::TrafficDirection::Outbound as i32,
        continue_on_listener_filters_timeout: true,
        ..Default::default()
    };
    let lf = |name: &str, a: istiod_proto::prost_types::Any| ListenerFilter {
        name: name.into(),
        config_type: Some(listener_filter::ConfigType::TypedConfig(a)),
        ..Default::default()
    };
    if chains.iter().any(|c| !c.sni.is_empty()) {
        l.listener_filters.push(lf("envoy.filters.listener.tls_inspector", any(&TlsInspector::default())));
    }
    if chains.iter().any(|c| !c.alpn.is_empty()) {
        l.listener_filters.push(lf("envoy.filters.listener.http_inspector", any(&HttpInspector::default())));
    } else {
        l.listener_filters_timeout = Some(Default::default());
    }
    let mut default = None;
    for c in &chains {
        let filters = match &c.cluster {
            Some(stat) if !c.weighted.is_empty() => {
                let first = &c.weighted[0].0;
                let tcp = outbound_tcp_weighted(side, stat, &c.weighted);
                stacked(tcp, |t| super::envoy::protocol_stack(mesh.protocol_filters, c.protocol, stat, first, t))
            }
            Some(cluster) => {
                let tcp = outbound_tcp(side, cluster, cluster);
                stacked(tcp, |t| super::envoy::protocol_stack(mesh.protocol_filters, c.protocol, cluster, cluster, t))
            }
            None => vec![http_manager(&name, route_source(port), dfp, side, mesh)],
        };
        let mut chain = FilterChain { filters, ..Default::default() };
        if c.match_all() {
            default = Some(chain);
        } else {
            chain.filter_chain_match = Some(c.filter_chain_match());
            l.filter_chains.push(chain);
        }
    }
    match default {
        Some(d) if l.filter_chains.is_empty() => l.filter_chains.push(d),
        Some(d) => l.default_filter_chain = Some(d),
        None => l.default_filter_chain = Some(passthrough_chain(policy, side)),
    }
    l
}

/// Brings the outbound listeners and route tables of `old` up to `new`,
/// where only the services `hosts` changed (added, removed or edited):
/// every listener they had or have a chain in, and the route table of
/// each HTTP port they had or have. A port that stays HTTP only has the
/// hosts' virtual hosts replaced.
pub fn update_hosts(old: &Model, new: &Model, hosts: &[Arc<str>], t: &mut super::Translation) {
    let side = telemetry::outbound(new);
    // (Route configuration 80's digest only where there is one.)
    let with_80 = serves_80(old) || serves_80(new);
    let digests = super::route::special_virtual_services_digests(new, with_80);
    update_hosts_only(old, new, hosts, &side, digests, t);
    if digests != super::route::special_virtual_services_digests(old, with_80) {
        // A VirtualService's host became or stopped being a service: the
        // route tables read it beyond the services' own virtual hosts.
        translate(new, t);
    } else if telemetry::reads_services(new) && side != telemetry::outbound(old) {
        // A collector's Service came or went: every outbound listener's
        // tracer or access log changes, not only those of `hosts`.
        translate(new, t);
    }
}

/// [`update_hosts`] for the listeners and route tables of `hosts` alone.
fn update_hosts_only(
    old: &Model,
    new: &Model,
    hosts: &[Arc<str>],
    side: &Side,
    digests: (u64, u64),
    t: &mut super::Translation,
) {
    let mut keys: BTreeSet<(String, u16)> = BTreeSet::new();
    let mut ports: BTreeSet<u16> = BTreeSet::new();
    for svc in hosts.iter().flat_map(|h| [old.services.get(h), new.services.get(h)]).flatten() {
        for port in &svc.ports {
            keys.extend(binds(svc, port).into_iter().map(|b| (b.address, port.port)));
            if has_routes(port) {
                ports.insert(port.port);
            }
        }
    }
    for (address, port) in keys {
        set_listener(new, &address, port, side, t);
    }
    for port in ports {
        let http = |m: &Model| m.services.values().any(|s| s.ports.iter().any(|p| p.port == port && has_routes(p)));
        let table: Arc<str> = port.to_string().into();
        if !(http(old) && http(new) && t.routes.contains_key(&table)) {
            route_table(new, port, super::route::special_digest_of(port, digests), t);
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
                .filter(|s| s.ports.iter().any(|p| p.port == port && has_routes(p)))
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

/// Route configuration `"<port>"` over RDS.
fn route_source(port: u16) -> hcm::http_connection_manager::RouteSpecifier {
    hcm::http_connection_manager::RouteSpecifier::Rds(hcm::Rds {
        config_source: ads(),
        route_config_name: port.to_string(),
    })
}

/// The HCM of an outbound HTTP chain of listener `listener` with its
/// routes from `routes`. Its filters are istiod's for a sidecar's
/// outbound HTTP (listener_builder.go): metadata exchange, gRPC stats, the
/// ALPN override, fault, CORS, the stats filter where a metrics provider
/// applies, the dynamic forward proxy under ALLOW_ANY_DYNAMIC_DNS (`dfp`:
/// its DNS cache's size), the router.
fn http_manager(
    listener: &str,
    routes: hcm::http_connection_manager::RouteSpecifier,
    dfp: Option<u32>,
    side: &Side,
    mesh: &crate::meshconfig::MeshSettings,
) -> Filter {
    let mut http_filters: Vec<hcm::HttpFilter> = mesh
        .metadata_exchange
        .then(|| telemetry::mx_http(false, &mesh.mx_additional_labels))
        .into_iter()
        .chain([telemetry::grpc_stats()])
        .chain(mesh.alpn_filter.then(telemetry::alpn))
        .collect();
    http_filters.extend([
        http_filter(super::route::FAULT_FILTER, &fault::HttpFault::default()),
        http_filter(
            "envoy.filters.http.cors",
            &istiod_proto::envoy::extensions::filters::http::cors::v3::Cors::default(),
        ),
    ]);
    http_filters.extend(side.stats.as_ref().map(telemetry::stats_http));
    http_filters.extend(dfp.map(super::dfp::http_filter_of));
    http_filters.push(router());
    let mut manager = hcm::HttpConnectionManager {
        stat_prefix: format!("outbound_{listener}"),
        route_specifier: Some(routes),
        http_filters,
        access_log: side.log.clone(),
        use_remote_address: Some(mesh.sidecar_use_remote_address),
        internal_address_config: (mesh.sidecar_use_remote_address || mesh.hcm_internal_networks)
            .then(|| super::envoy::internal_address_config(&mesh.networks.mesh))
            .flatten(),
        http_protocol_options: super::envoy::http10_options(mesh.http10),
        normalize_path: Some(true),
        proxy_100_continue: mesh.proxy_100_continue,
        ..Default::default()
    };
    side.trace(&mut manager);
    http_connection_manager(&manager)
}

/// `filters` with their last (the tcp_proxy) replaced by `stack` of it.
fn stacked(mut filters: Vec<Filter>, stack: impl FnOnce(Filter) -> Vec<Filter>) -> Vec<Filter> {
    if let Some(tcp) = filters.pop() {
        filters.extend(stack(tcp));
    }
    filters
}

/// `MAX_CONNECTIONS_PER_SOCKET_EVENT_LOOP` as a listener's
/// `max_connections_to_accept_per_socket_event` (0: unset, Envoy's
/// unlimited), as istiod's `maxConnectionsToAcceptPerSocketEvent`.
pub fn accept_per_event(mesh: &crate::meshconfig::MeshSettings) -> Option<u32> {
    (mesh.max_accept_per_event > 0).then_some(mesh.max_accept_per_event)
}

/// An outbound TCP chain's filters: the stats filter where a metrics
/// provider applies, then the tcp_proxy (networkfilter.go; outbound
/// metadata exchange is on the cluster).
fn outbound_tcp(side: &Side, stat_prefix: &str, cluster: &str) -> Vec<Filter> {
    let mut filters: Vec<Filter> = side.stats.as_ref().map(telemetry::stats_network).into_iter().collect();
    filters.push(tcp_proxy_logged(stat_prefix, cluster, &side.log));
    filters
}

/// [`outbound_tcp`] to a VirtualService route's weighted clusters
/// (`buildOutboundNetworkFiltersWithWeightedClusters`).
fn outbound_tcp_weighted(side: &Side, stat_prefix: &str, clusters: &[(String, u32)]) -> Vec<Filter> {
    use istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3 as tcp;
    let mut filters: Vec<Filter> = side.stats.as_ref().map(telemetry::stats_network).into_iter().collect();
    let t = tcp::TcpProxy {
        stat_prefix: stat_prefix.to_owned(),
        cluster_specifier: Some(tcp::tcp_proxy::ClusterSpecifier::WeightedClusters(tcp::tcp_proxy::WeightedCluster {
            clusters: clusters
                .iter()
                .map(|(name, weight)| tcp::tcp_proxy::weighted_cluster::ClusterWeight {
                    name: name.clone(),
                    weight: *weight,
                    ..Default::default()
                })
                .collect(),
        })),
        access_log: side.log.to_vec(),
        ..Default::default()
    };
    filters.push(Filter {
        name: "envoy.filters.network.tcp_proxy".into(),
        config_type: Some(istiod_proto::envoy::config::listener::v3::filter::ConfigType::TypedConfig(any(&t))),
    });
    filters
}

/// `virtualOutbound` on 0.0.0.0:15001, where iptables sends every outbound
/// connection: `use_original_dst` hands it to the listener of its original
/// destination; what none takes passes through (ALLOW_ANY) or is dropped
/// (REGISTRY_ONLY), as istiod's `buildVirtualOutboundListener` makes it.
/// Under ALLOW_ANY_DYNAMIC_DNS the HTTP inspector picks plaintext HTTP out
/// for the dynamic forward proxy (its DNS cache the mesh's
/// `dynamic_dns_max_hosts` big). It accepts
/// `MAX_CONNECTIONS_PER_SOCKET_EVENT_LOOP` connections per socket event.
pub fn virtual_outbound(policy: OutboundPolicy, mesh: &crate::meshconfig::MeshSettings, side: &Side) -> Listener {
    let catchall = if policy.allows_any() { "PassthroughCluster" } else { "BlackHoleCluster" };
    let mut l = Listener {
        name: VIRTUAL_OUTBOUND.into(),
        address: socket("0.0.0.0", OUTBOUND_PORT),
        use_original_dst: Some(true),
        access_log: side.log.iter().map(telemetry::listener_access_log).collect(),
        traffic_direction: core::TrafficDirection::Outbound as i32,
        max_connections_to_accept_per_socket_event: accept_per_event(mesh),
        filter_chains: vec![
            blackhole_chain(side),
            FilterChain {
                name: "virtualOutbound-catchall-tcp".into(),
                // Logged either way (listener_builder.go): blocked egress shows.
                filters: outbound_tcp(side, catchall, catchall),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    if policy == OutboundPolicy::AllowAnyDynamicDns {
        use istiod_proto::envoy::config::listener::v3::{FilterChainMatch, ListenerFilter, listener_filter};
        use istiod_proto::envoy::extensions::filters::listener::http_inspector::v3::HttpInspector;
        l.listener_filters = vec![ListenerFilter {
            name: "envoy.filters.listener.http_inspector".into(),
            config_type: Some(listener_filter::ConfigType::TypedConfig(any(&HttpInspector::default()))),
            ..Default::default()
        }];
        // The catch-all virtual host alone, inline (`allow_any_dynamic_dns`).
        let routes = istiod_proto::envoy::config::route::v3::RouteConfiguration {
            name: super::dfp::VIRTUAL_HOST.into(),
            virtual_hosts: vec![super::route::fallback_host(policy)],
            validate_clusters: Some(false),
            ignore_port_in_host_matching: true,
            ..Default::default()
        };
        let http = FilterChain {
            name: "virtualOutbound-catchall-tcp-http".into(),
            filter_chain_match: Some(FilterChainMatch {
                application_protocols: plaintext_http_alpns(mesh.http10).iter().map(|a| (*a).to_owned()).collect(),
                ..Default::default()
            }),
            filters: vec![http_manager(
                &format!("{VIRTUAL_OUTBOUND}_{}", super::dfp::VIRTUAL_HOST),
                hcm::http_connection_manager::RouteSpecifier::RouteConfig(routes),
                Some(mesh.dynamic_dns_max_hosts),
                side,
                mesh,
            )],
            ..Default::default()
        };
        l.filter_chains.insert(1, http);
    }
    l
}

/// istiod's `blackholeFilterChain`: a connection to 15001 itself (not
/// redirected there by iptables) goes nowhere, lest it loop back.
fn blackhole_chain(side: &Side) -> FilterChain {
    let mut filters: Vec<Filter> = side.stats.as_ref().map(telemetry::stats_network).into_iter().collect();
    filters.push(tcp_proxy_logged("BlackHoleCluster", "BlackHoleCluster", &[]));
    FilterChain {
        name: "virtualOutbound-blackhole".into(),
        filter_chain_match: Some(istiod_proto::envoy::config::listener::v3::FilterChainMatch {
            destination_port: Some(OUTBOUND_PORT),
            ..Default::default()
        }),
        filters,
        ..Default::default()
    }
}
