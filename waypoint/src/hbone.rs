//! Sidecars and gateways sending HBONE (istiod's `PILOT_ENABLE_SENDING_HBONE`,
//! on with `PILOT_ENABLE_AMBIENT`): a `connect_originate` cluster and
//! listener, every outbound cluster able to tunnel (`cluster_tls.go`
//! `applyHBONETransportSocketMatches`), and the endpoints that take HBONE
//! and not Istio mTLS (ambient workloads, waypoints) sent through
//! `connect_originate` (`endpoint_builder.go`).
//!
//! Applied to what the mesh generator made, as a rewrite of its bytes: the
//! per-core cache keeps the result per class and input generation.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};

use bytes::Bytes;
use istiod_mesh::generator::MeshInput;
use istiod_mesh::node::{NodeType, ProxyClass};
use istiod_proto::envoy::config::cluster::v3::{Cluster, cluster::TransportSocketMatch};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::endpoint::v3 as ep;
use istiod_proto::prost::Message;
use istiod_proto::prost_types::Struct;

use crate::{CONNECT_ORIGINATE, ORIGINAL_DST_KEY};

/// `envoy.transport_socket_match`: endpoint metadata the matches read.
const SOCKET_MATCH: &str = "envoy.transport_socket_match";

/// Whether proxies of `class` send HBONE: sidecars and gateways (not
/// proxyless gRPC), with ambient on.
pub fn sends(class: &ProxyClass) -> bool {
    istiod_mesh::node::ambient()
        && matches!(class.node_type, NodeType::Sidecar | NodeType::Router)
        && &*class.generator != "grpc"
}

/// `connect_originate` for a sidecar or gateway (`buildConnectOriginate`
/// without a SAN check).
pub fn originate_cluster(mesh: &MeshInput) -> Cluster {
    crate::connect_originate_cluster(&mesh.model, None)
}

/// An outbound cluster that may tunnel: its transport socket (matches) as
/// `applyHBONETransportSocketMatches` arranges them.
pub fn cluster(body: &[u8]) -> Option<Bytes> {
    let mut c = Cluster::decode(body).ok()?;
    if !c.name.starts_with("outbound|") {
        return Some(Bytes::copy_from_slice(body));
    }
    let original_dst = c.cluster_discovery_type
        == Some(istiod_proto::envoy::config::cluster::v3::cluster::ClusterDiscoveryType::Type(
            istiod_proto::envoy::config::cluster::v3::cluster::DiscoveryType::OriginalDst as i32,
        ));
    let raw = || core::TransportSocket {
        name: "envoy.transport_sockets.raw_buffer".into(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(crate::any(
            &istiod_proto::envoy::extensions::transport_sockets::raw_buffer::v3::RawBuffer {},
        ))),
    };
    let default = || TransportSocketMatch {
        name: "tlsMode-disabled".into(),
        r#match: Some(Struct::default()),
        transport_socket: Some(raw()),
    };
    if !c.transport_socket_matches.is_empty() {
        // Auto mTLS: HBONE first, then Istio mTLS or plaintext per endpoint.
        let mut matches = vec![hbone(raw())];
        matches.append(&mut c.transport_socket_matches);
        c.transport_socket_matches = matches;
    } else if let Some(ts) = c.transport_socket.take() {
        if original_dst {
            c.transport_socket = Some(ts);
        } else if crate::istio_mutual_socket(&ts) {
            // ISTIO_MUTUAL set by the user: HBONE replaces it where it can.
            c.transport_socket_matches = vec![
                hbone(raw()),
                TransportSocketMatch { name: "tlsMode-istio".into(), transport_socket: Some(ts), ..Default::default() },
            ];
        } else {
            // TLS origination of the user's, inside the tunnel or not.
            c.transport_socket_matches = vec![
                hbone(ts.clone()),
                TransportSocketMatch { name: "user".into(), transport_socket: Some(ts), ..Default::default() },
            ];
        }
    } else {
        // No TLS: HBONE or plaintext, as the endpoint takes it.
        c.transport_socket_matches = vec![hbone(raw()), default()];
    }
    Some(Bytes::from(c.encode_to_vec()))
}

/// `hboneTransportSocket`: endpoints marked `tunnel: http` go through the
/// internal upstream (to `connect_originate`) with `inner` inside.
fn hbone(inner: core::TransportSocket) -> TransportSocketMatch {
    TransportSocketMatch {
        name: "hbone".into(),
        r#match: Some(crate::strings(&[("tunnel", "http")])),
        transport_socket: Some(crate::internal_upstream(
            "envoy.transport_sockets.internal_upstream",
            inner,
            &[(crate::Host, ORIGINAL_DST_KEY), (crate::ClusterMetadata, "istio"), (crate::Host, "istio")],
        )),
    }
}

/// The endpoints of outbound load assignment `name` that take HBONE and
/// not Istio mTLS (`supportTunnel`, and `PILOT_PREFER_SENDING_HBONE` off):
/// (address, port).
fn tunnels<'a>(mesh: &'a MeshInput, name: &str) -> BTreeSet<(&'a str, u16)> {
    let mut parts = name.splitn(4, '|');
    let (Some("outbound"), Some(port), Some(_), Some(host)) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return BTreeSet::new();
    };
    let Ok(port) = port.parse::<u16>() else { return BTreeSet::new() };
    let Some(svc) = mesh.model.services.get(host) else { return BTreeSet::new() };
    svc.endpoints
        .iter()
        .filter(|e| e.service_port == port)
        .filter(|e| {
            let waypoint = e.labels.get("gateway.istio.io/managed").is_some_and(|m| m == "istio.io-mesh-controller");
            waypoint || (e.tunnel && e.tls_mode != "istio")
        })
        .map(|e| (e.address.as_str(), e.port))
        .collect()
}

/// A digest of [`tunnels`]: what the rewrite of `name` reads beyond the
/// mesh generator's own inputs.
pub fn tunnels_digest(mesh: &MeshInput, name: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tunnels(mesh, name).hash(&mut h);
    h.finish()
}

/// A gateway's load assignment `name` of a service whose ingress traffic
/// goes through its waypoint (`istio.io/ingress-use-waypoint`): the
/// waypoint's instances, each through `connect_originate` to the
/// service's address, the waypoint's as the tunnel's
/// (`endpoint_builder.go`'s `toServiceWaypoint`).
pub fn ingress_endpoints(mesh: &MeshInput, name: &str) -> Option<Bytes> {
    let mut parts = name.splitn(4, '|');
    let (Some("outbound"), Some(port), Some(_), Some(host)) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let waypoints = mesh.ingress_waypoints.get(host)?;
    let svc = mesh.model.services.get(host)?;
    let vip = svc.vips.first()?;
    let local = if vip.contains(':') { format!("[{vip}]:{port}") } else { format!("{vip}:{port}") };
    let lb_endpoints = waypoints
        .iter()
        .map(|ip| {
            let target = if ip.contains(':') { format!("[{ip}]:15008") } else { format!("{ip}:15008") };
            let mut md = istiod_proto::envoy::config::core::v3::Metadata::default();
            md.filter_metadata
                .insert(ORIGINAL_DST_KEY.into(), crate::strings(&[("local", &local), ("waypoint", &target)]));
            md.filter_metadata.insert(SOCKET_MATCH.into(), crate::strings(&[("tunnel", "http")]));
            ep::LbEndpoint {
                host_identifier: Some(ep::lb_endpoint::HostIdentifier::Endpoint(ep::Endpoint {
                    address: Some(crate::internal_address(CONNECT_ORIGINATE, &target)),
                    ..Default::default()
                })),
                metadata: Some(md),
                load_balancing_weight: Some(1),
                ..Default::default()
            }
        })
        .collect();
    let cla = ep::ClusterLoadAssignment {
        cluster_name: name.to_owned(),
        endpoints: vec![ep::LocalityLbEndpoints {
            locality: Some(core::Locality::default()),
            lb_endpoints,
            ..Default::default()
        }],
        ..Default::default()
    };
    Some(Bytes::from(cla.encode_to_vec()))
}

/// What [`ingress_endpoints`] reads of `name` (for a gateway).
pub fn ingress_digest(mesh: &MeshInput, name: &str) -> u64 {
    let host = name.splitn(4, '|').nth(3).unwrap_or_default();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    mesh.ingress_waypoints.get(host).hash(&mut h);
    mesh.model.services.get(host).map(|s| &s.vips).hash(&mut h);
    h.finish()
}

/// Outbound load assignment `name` with its HBONE endpoints through
/// `connect_originate`: the tunnel's destination in metadata, and the
/// `tunnel: http` mark the cluster's transport socket match reads.
pub fn endpoints(mesh: &MeshInput, name: &str, body: &[u8]) -> Option<Bytes> {
    let tunnels = tunnels(mesh, name);
    if tunnels.is_empty() {
        return Some(Bytes::copy_from_slice(body));
    }
    let mut cla = ep::ClusterLoadAssignment::decode(body).ok()?;
    for l in &mut cla.endpoints {
        for lb in &mut l.lb_endpoints {
            let Some(ep::lb_endpoint::HostIdentifier::Endpoint(e)) = lb.host_identifier.as_mut() else { continue };
            let Some((ip, p)) = crate::socket_of(e.address.as_ref()) else { continue };
            if !tunnels.contains(&(ip.as_str(), p)) {
                continue;
            }
            let target = if ip.contains(':') { format!("[{ip}]:{p}") } else { format!("{ip}:{p}") };
            e.address = Some(crate::internal_address(CONNECT_ORIGINATE, &target));
            e.additional_addresses.clear();
            let md = lb.metadata.get_or_insert_default();
            md.filter_metadata.insert(ORIGINAL_DST_KEY.into(), crate::strings(&[("local", &target)]));
            md.filter_metadata.insert(SOCKET_MATCH.into(), crate::strings(&[("tunnel", "http")]));
        }
    }
    Some(Bytes::from(cla.encode_to_vec()))
}

/// The load assignments whose HBONE endpoints changed from `prev` to
/// `next` (an ambient annotation or label came or went): the mesh's own
/// diff does not see them, its bytes being the same.
pub fn changed(prev: &MeshInput, next: &MeshInput) -> Vec<(istiod_xds_api::snapshot::Kind, std::sync::Arc<str>)> {
    use imbl::ordmap::DiffItem;
    let mut hosts = BTreeSet::new();
    for d in prev.model.services.diff(&next.model.services) {
        let (host, before, after) = match d {
            DiffItem::Add(h, s) => (h, None, Some(s)),
            DiffItem::Update { old: (h, a), new: (_, b) } => (h, Some(a), Some(b)),
            DiffItem::Remove(h, s) => (h, Some(s), None),
        };
        let marks = |s: Option<&istiod_mesh::model::Service>| -> Vec<(String, u16, u16, bool)> {
            s.map(|s| s.endpoints.iter().map(|e| (e.address.clone(), e.port, e.service_port, e.tunnel)).collect())
                .unwrap_or_default()
        };
        if marks(before.map(|s| &**s)) != marks(after.map(|s| &**s)) {
            hosts.insert(host.clone());
        }
    }
    for (host, _) in prev.ingress_waypoints.iter().chain(next.ingress_waypoints.iter()) {
        if prev.ingress_waypoints.get(host) != next.ingress_waypoints.get(host) {
            hosts.insert(host.clone());
        }
    }
    // Each host's load assignments: its ports, plain and per subset of the
    // rules that name it (the translation has those that exist).
    let mut out = Vec::new();
    for m in [prev, next] {
        let rules = m.model.destination_rules();
        for host in &hosts {
            let Some(svc) = m.model.services.get(&**host) else { continue };
            let named = rules.candidates(host).into_iter().flat_map(|i| rules.get(i).rule.subsets.iter());
            let subsets: BTreeSet<&str> = std::iter::once("").chain(named.map(|s| s.name.as_str())).collect();
            for p in &svc.ports {
                for sub in &subsets {
                    let name = format!("outbound|{}|{sub}|{host}", p.port);
                    if m.translation.clusters.contains_key(name.as_str()) {
                        out.push((istiod_xds_api::snapshot::Kind::Endpoint, std::sync::Arc::from(name)));
                    }
                }
            }
        }
    }
    out
}
