//! EDS: the `ClusterLoadAssignment` of a cluster, endpoints grouped by
//! locality (always set: grpcio rejects a group without one), with health,
//! weights and the `tlsMode` metadata auto mTLS matches on; a subset keeps
//! the endpoints whose labels it names. Per-proxy locality load balancing is
//! in `locality.rs`.

use std::collections::BTreeMap;

use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};

use super::network::Place;
use crate::model::{Health, Locality, Service};

/// Which endpoints besides healthy ones a cluster takes (istiod's
/// `filterIstioEndpoint`): terminating ones never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Takes<'a> {
    /// Unhealthy (not ready) ones, with their health.
    pub(crate) unhealthy: bool,
    /// Draining (terminating, still serving) ones: a persistent-session
    /// service's.
    pub(crate) draining: bool,
    /// `PILOT_DRAINING_LABEL`: an endpoint whose workload carries it
    /// (non-empty) is draining, whatever its conditions say (empty: none).
    pub(crate) draining_label: &'a str,
    /// With `PILOT_ENABLE_TELEMETRY_LABEL` and
    /// `PILOT_ENDPOINT_TELEMETRY_LABEL`: the mesh's cluster, for each
    /// endpoint's `istio.workload` metadata.
    pub(crate) telemetry: Option<&'a str>,
}

impl<'a> Takes<'a> {
    /// What a cluster of `svc` on `port` takes where `policy` applies
    /// (istiod's `supportsUnhealthyEndpoints` and
    /// `SupportsDrainingEndpoints`), and the panic threshold it sets
    /// (istiod's `applyOutlierDetection` and `applyLoadBalancer`): the
    /// rule's `minHealthPercent` where it sets outlier detection, zero
    /// where the cluster takes unhealthy endpoints, Envoy's own else.
    pub(crate) fn of(
        mesh: &'a crate::meshconfig::MeshSettings,
        svc: &Service,
        policy: Option<&istiod_config::istio::networking::TrafficPolicy>,
    ) -> (Takes<'a>, Option<f64>) {
        let (forced, supports) = (svc.forces_unhealthy(mesh), svc.supports_unhealthy(mesh));
        let outlier = policy.and_then(|p| p.outlier_detection.as_ref());
        let min_health = outlier.map_or(0, |o| o.min_health_percent);
        let unhealthy = forced || (supports && min_health <= 0);
        let panic = match outlier {
            Some(_) if forced => Some(0.0),
            Some(_) => Some(f64::from(min_health.max(0))),
            None => supports.then_some(0.0),
        };
        // Draining endpoints go to PILOT_PERSISTENT_SESSION_LABEL's
        // services only (istiod's filterIstioEndpoint; the header label
        // does not keep them).
        let label = &mesh.persistent_session_labels[0];
        let draining = !label.is_empty() && svc.labels.get(label).is_some_and(|v| !v.is_empty());
        let telemetry = (mesh.telemetry_labels == (true, true)).then_some(mesh.networks.cluster_id.as_str());
        (Takes { unhealthy, draining, draining_label: &mesh.draining_label, telemetry }, panic)
    }

    /// An endpoint's health as sent (istiod's `buildEnvoyLbEndpoint`: the
    /// draining label first).
    fn health_of(self, e: &crate::model::Endpoint) -> Health {
        match self.draining_label {
            "" => e.health,
            label if e.labels.get(label).is_some_and(|v| !v.is_empty()) => Health::Draining,
            _ => e.health,
        }
    }

    fn admits(self, health: Health) -> bool {
        match health {
            Health::Healthy => true,
            Health::Unhealthy => self.unhealthy,
            Health::Draining => self.draining,
            Health::Terminating => false,
        }
    }
}

/// An endpoint's metadata (istiod's `AppendLbEndpointMetadata`): its
/// `tlsMode` where it takes mesh mTLS, and, given the mesh's cluster
/// (`telemetry`), `istio.workload`: `<workload>;<namespace>;<canonical
/// service>;<canonical revision, empty for latest>;<cluster>`.
fn endpoint_metadata(ep: &crate::model::Endpoint, telemetry: Option<&str>) -> Option<core::Metadata> {
    use istiod_proto::prost_types::{Struct, Value, value::Kind};
    let mut md = (ep.tls_mode == "istio").then(super::envoy::istio_tls_metadata);
    if let Some(mesh_cluster) = telemetry {
        let text = workload_text(ep, mesh_cluster);
        let value = Value { kind: Some(Kind::StringValue(text)) };
        md.get_or_insert_with(Default::default)
            .filter_metadata
            .insert("istio".to_owned(), Struct { fields: BTreeMap::from([("workload".to_owned(), value)]) });
    }
    md
}

/// `svc`'s endpoints on `port` that a cluster taking `takes` sends, those
/// of the subset with `subset` labels when given, each with its index in
/// `Service::endpoints`.
fn taken<'s>(
    svc: &'s Service,
    port: u16,
    subset: Option<&'s BTreeMap<String, String>>,
    takes: Takes<'s>,
) -> impl Iterator<Item = (usize, &'s crate::model::Endpoint)> {
    let in_subset =
        move |e: &crate::model::Endpoint| subset.is_none_or(|l| l.iter().all(|(k, v)| e.labels.get(k) == Some(v)));
    svc.endpoints
        .iter()
        .enumerate()
        .filter(move |(_, e)| e.service_port == port && takes.admits(takes.health_of(e)) && in_subset(e))
}

/// One endpoint as a load assignment sends it: what it reads of `takes` is
/// mesh-wide (the draining label, the telemetry cluster), so every cluster
/// of a service sends the same bytes for it.
fn lb_endpoint(ep: &crate::model::Endpoint, takes: Takes<'_>) -> LbEndpoint {
    lb_endpoint_of(ep, takes, endpoint_metadata(ep, takes.telemetry))
}

/// [`lb_endpoint`] with `metadata`.
fn lb_endpoint_of(ep: &crate::model::Endpoint, takes: Takes<'_>, metadata: Option<core::Metadata>) -> LbEndpoint {
    let health = match takes.health_of(ep) {
        Health::Healthy => core::HealthStatus::Healthy,
        Health::Draining => core::HealthStatus::Draining,
        Health::Unhealthy | Health::Terminating => core::HealthStatus::Unhealthy,
    };
    LbEndpoint {
        host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
            address: Some(core::Address {
                address: Some(core::address::Address::SocketAddress(core::SocketAddress {
                    address: ep.address.clone(),
                    port_specifier: Some(core::socket_address::PortSpecifier::PortValue(u32::from(ep.port))),
                    ..Default::default()
                })),
            }),
            // A dual-stack Pod's other IPs (istiod's buildLbEndpoint
            // under ISTIO_DUAL_STACK).
            additional_addresses: ep
                .extra_addresses
                .iter()
                .map(|a| istiod_proto::envoy::config::endpoint::v3::endpoint::AdditionalAddress {
                    address: super::envoy::socket(a, u32::from(ep.port)),
                })
                .collect(),
            ..Default::default()
        })),
        health_status: health as i32,
        load_balancing_weight: Some(1),
        // Picks the cluster's transport socket (auto mTLS); and the
        // workload for the stats filter's labels.
        metadata,
    }
}

/// [`lb_endpoint`] encoded, byte for byte as prost encodes it, with its
/// metadata written directly: the `tlsMode` entry is the same for every
/// endpoint that takes mesh mTLS (encoded once), and `istio.workload` is
/// one string. (Building and encoding the metadata's structs was most of
/// an endpoint's cost.)
fn encoded_lb_endpoint(ep: &crate::model::Endpoint, takes: Takes<'_>) -> bytes::Bytes {
    use istiod_proto::prost::Message;
    use istiod_proto::prost::encoding::{self, WireType};
    /// The size of a length-delimited field of `len` bytes (tags under 16).
    fn field(len: usize) -> usize {
        1 + encoding::encoded_len_varint(len as u64) + len
    }
    /// Writes the key and length of such a field.
    fn head(tag: u32, len: usize, out: &mut Vec<u8>) {
        encoding::encode_key(tag, WireType::LengthDelimited, out);
        encoding::encode_varint(len as u64, out);
    }
    // Metadata.filter_metadata["envoy.transport_socket_match"] =
    // {tlsMode: "istio"}, as its map entry.
    static TLS_MODE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let tls_mode = TLS_MODE.get_or_init(|| {
        let md = super::envoy::istio_tls_metadata();
        let mut out = Vec::new();
        encoding::btree_map::encode(
            encoding::string::encode,
            encoding::string::encoded_len,
            encoding::message::encode,
            encoding::message::encoded_len,
            1,
            &md.filter_metadata,
            &mut out,
        );
        out
    });
    let tls = ep.tls_mode == "istio";
    // filter_metadata["istio"] = {workload: <text>}: the entry's nested
    // sizes, innermost first (Value.string_value 3; the Struct's fields
    // entry; the Struct; the metadata's entry).
    let text = takes.telemetry.map(|cluster| workload_text(ep, cluster));
    let sizes = text.as_ref().map(|t| {
        let value = field(t.len());
        let fields_entry = field("workload".len()) + field(value);
        let structure = field(fields_entry);
        let entry = field("istio".len()) + field(structure);
        (value, fields_entry, structure, entry)
    });
    let metadata = if tls { tls_mode.len() } else { 0 } + sizes.map_or(0, |s| field(s.3));
    let bare = lb_endpoint_of(ep, takes, None);
    // (prost encodes fields in tag order: the endpoint 1, health 2,
    // metadata 3, weight 4.)
    let mut out = Vec::with_capacity(bare.encoded_len() + field(metadata));
    if let Some(lb_endpoint::HostIdentifier::Endpoint(e)) = &bare.host_identifier {
        encoding::message::encode(1, e, &mut out);
    }
    if bare.health_status != 0 {
        encoding::int32::encode(2, &bare.health_status, &mut out);
    }
    if metadata > 0 {
        head(3, metadata, &mut out);
        if tls {
            out.extend_from_slice(tls_mode);
        }
        if let (Some(text), Some((value, fields_entry, structure, entry))) = (&text, sizes) {
            head(1, entry, &mut out);
            head(1, "istio".len(), &mut out);
            out.extend_from_slice(b"istio");
            head(2, structure, &mut out);
            head(1, fields_entry, &mut out);
            head(1, "workload".len(), &mut out);
            out.extend_from_slice(b"workload");
            head(2, value, &mut out);
            head(3, text.len(), &mut out);
            out.extend_from_slice(text.as_bytes());
        }
    }
    if let Some(w) = &bare.load_balancing_weight {
        encoding::message::encode(4, w, &mut out);
    }
    out.into()
}

/// Each endpoint of one service encoded once (by its index in
/// `Service::endpoints`), for all the service's load assignments: valid
/// for one service and one mesh configuration.
#[derive(Default)]
pub(crate) struct Encoded(Vec<Option<bytes::Bytes>>);

/// [`load_assignment`] encoded, byte for byte as prost encodes it, from
/// each endpoint's bytes in `memo` (made once per service: its plain and
/// subset clusters, under each rule, send the same endpoints).
pub(crate) fn encoded_load_assignment(
    cluster: &str,
    svc: &Service,
    port: u16,
    subset: Option<&BTreeMap<String, String>>,
    takes: Takes<'_>,
    memo: &mut Encoded,
) -> bytes::Bytes {
    use istiod_proto::prost::encoding::{self, WireType};
    memo.0.resize(svc.endpoints.len(), None);
    let mut by_locality: BTreeMap<&Locality, Vec<usize>> = BTreeMap::new();
    for (i, ep) in taken(svc, port, subset, takes) {
        if memo.0[i].is_none() {
            memo.0[i] = Some(encoded_lb_endpoint(ep, takes));
        }
        by_locality.entry(&ep.locality).or_default().push(i);
    }
    let bytes = |i: &usize| memo.0[*i].as_ref().expect("encoded above");
    let groups: Vec<(core::Locality, Vec<usize>, usize)> = by_locality
        .into_iter()
        .map(|(l, eps)| {
            let locality =
                core::Locality { region: l.region.clone(), zone: l.zone.clone(), sub_zone: l.subzone.clone() };
            let len = encoding::message::encoded_len(1, &locality)
                + eps
                    .iter()
                    .map(|i| {
                        encoding::key_len(2) + encoding::encoded_len_varint(bytes(i).len() as u64) + bytes(i).len()
                    })
                    .sum::<usize>()
                + encoding::message::encoded_len(3, &(eps.len() as u32));
            (locality, eps, len)
        })
        .collect();
    // (Written into one allocation of the right size, not grown.)
    let field = |tag: u32, len: usize| encoding::key_len(tag) + encoding::encoded_len_varint(len as u64) + len;
    let total = if cluster.is_empty() { 0 } else { field(1, cluster.len()) }
        + groups.iter().map(|(_, _, len)| field(2, *len)).sum::<usize>();
    let mut out = Vec::with_capacity(total);
    if !cluster.is_empty() {
        encoding::encode_key(1, WireType::LengthDelimited, &mut out);
        encoding::encode_varint(cluster.len() as u64, &mut out);
        out.extend_from_slice(cluster.as_bytes());
    }
    for (locality, eps, len) in groups {
        let weight = eps.len() as u32;
        encoding::encode_key(2, WireType::LengthDelimited, &mut out);
        encoding::encode_varint(len as u64, &mut out);
        encoding::message::encode(1, &locality, &mut out);
        for i in &eps {
            encoding::encode_key(2, WireType::LengthDelimited, &mut out);
            encoding::encode_varint(bytes(i).len() as u64, &mut out);
            out.extend_from_slice(bytes(i));
        }
        encoding::message::encode(3, &weight, &mut out);
    }
    debug_assert_eq!(out.len(), total);
    out.into()
}

/// An endpoint's `istio.workload` metadata: `<workload>;<namespace>;
/// <canonical service>;<canonical revision, empty for latest>;<cluster>`
/// (`mesh_cluster` unless the endpoint's labels name its own).
fn workload_text(ep: &crate::model::Endpoint, mesh_cluster: &str) -> String {
    let cluster = ep.labels.get(crate::model::network::CLUSTER_LABEL).map_or(mesh_cluster, String::as_str);
    let (workload, namespace) = (&*ep.workload.0, &*ep.workload.1);
    let (name, revision) = istiod_config::workload::canonical_service_of(&ep.labels, workload);
    let revision = if revision == "latest" { "" } else { revision };
    // (`join` sizes its one allocation first; `format!` grew its string
    // several times, a twentieth of a full rebuild.)
    [workload, namespace, name, revision, cluster].join(";")
}

/// The load assignment of `cluster`: `svc`'s endpoints on `port` that it
/// `takes`, those of the subset with `subset` labels when given.
pub(crate) fn load_assignment(
    cluster: &str,
    svc: &Service,
    port: u16,
    subset: Option<&BTreeMap<String, String>>,
    takes: Takes<'_>,
) -> ClusterLoadAssignment {
    placed(cluster, svc, port, subset, takes, "", &|_| false).0
}

/// [`load_assignment`] with where each endpoint sits (per locality group,
/// per endpoint): its network, `cluster_id`, and whether `mtls` says it
/// takes mTLS.
pub(crate) fn placed(
    cluster: &str,
    svc: &Service,
    port: u16,
    subset: Option<&BTreeMap<String, String>>,
    takes: Takes<'_>,
    cluster_id: &str,
    mtls: &dyn Fn(&crate::model::Endpoint) -> bool,
) -> (ClusterLoadAssignment, Vec<Vec<Place>>) {
    let mut by_locality: BTreeMap<&Locality, Vec<(LbEndpoint, Place)>> = BTreeMap::new();
    for (_, ep) in taken(svc, port, subset, takes) {
        let cluster = ep.labels.get(crate::model::network::CLUSTER_LABEL).map_or(cluster_id, String::as_str);
        let place = Place { network: ep.network.clone(), cluster: cluster.to_owned(), mtls: mtls(ep) };
        let lb = lb_endpoint(ep, takes);
        by_locality.entry(&ep.locality).or_default().push((lb, place));
    }
    let mut places = Vec::with_capacity(by_locality.len());
    let cla = ClusterLoadAssignment {
        cluster_name: cluster.to_owned(),
        endpoints: by_locality
            .into_iter()
            .map(|(l, eps)| {
                let (lb_endpoints, p): (Vec<LbEndpoint>, Vec<Place>) = eps.into_iter().unzip();
                places.push(p);
                LocalityLbEndpoints {
                    // grpcio rejects a group without a locality: always set it.
                    locality: Some(core::Locality {
                        region: l.region.clone(),
                        zone: l.zone.clone(),
                        sub_zone: l.subzone.clone(),
                    }),
                    load_balancing_weight: Some(lb_endpoints.len() as u32),
                    lb_endpoints,
                    ..Default::default()
                }
            })
            .collect(),
        ..Default::default()
    };
    (cla, places)
}

#[cfg(test)]
mod tests;
