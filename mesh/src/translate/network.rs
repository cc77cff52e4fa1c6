//! Split-horizon EDS (istiod's `EndpointsByNetworkFilter`,
//! `pilot/pkg/xds/endpoints/ep_filters.go`), for sidecars and routers: once
//! any east-west gateway is known, a proxy reaches endpoints of its own
//! network (or of a network no gateway leads into) directly and the others
//! through their network's gateways. Every weight is multiplied by the
//! gateways' scale; a remote endpoint's weight is split among the gateways
//! of its network in its cluster (else of its network), and each gateway
//! gets one endpoint per locality with the sum, after the direct ones,
//! ordered by address and port. Remote endpoints that do not take mTLS
//! (istiod needs it for SNI routing at the gateway) and HBONE endpoints are
//! left out. `REQUESTED_NETWORK_VIEW` hides the networks it does not list.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use istiod_proto::envoy::config::endpoint::v3::{ClusterLoadAssignment, Endpoint, LbEndpoint, lb_endpoint};

use crate::model::network::{NetworkGateway, NetworkGateways};

/// Where one endpoint of a load assignment sits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Place {
    /// Its network.
    pub network: String,
    /// Its cluster.
    pub cluster: String,
    /// Whether a sidecar sends it mTLS, so a gateway can route it by SNI.
    pub mtls: bool,
}

/// The places of a load assignment's endpoints (per locality group, per
/// endpoint, in its order), and a digest of them and the gateways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The places.
    pub places: Vec<Vec<Place>>,
    /// Whether the host is cluster-local (istiod's `clusterLocal`): a
    /// proxy sees its own cluster's endpoints only.
    pub cluster_local: bool,
    /// With the telemetry labels on (`PILOT_ENABLE_TELEMETRY_LABEL` and
    /// `PILOT_ENDPOINT_TELEMETRY_LABEL`): gateway endpoints carry
    /// `istio.workload` as istiod's (`;;;;<gateway's cluster>`).
    pub telemetry: bool,
    /// Changes when the places or the gateways do.
    pub digest: u64,
}

impl Split {
    /// `places` under `gateways`.
    pub fn new(places: Vec<Vec<Place>>, gateways: &NetworkGateways, cluster_local: bool, telemetry: bool) -> Split {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&places, &gateways.all, cluster_local, telemetry).hash(&mut h);
        Split { places, cluster_local, telemetry, digest: h.finish() }
    }
}

/// The node metadata keys a class keeps for endpoints once gateways exist.
pub const NODE_KEYS: [&str; 2] = ["NETWORK", "REQUESTED_NETWORK_VIEW"];

/// `cla` as a proxy of `cluster` in `network` (empty: unknown) that sees
/// `view` (comma-separated networks; empty: all) receives it.
pub fn split(
    cla: &ClusterLoadAssignment,
    split: &Split,
    gateways: &NetworkGateways,
    cluster: &str,
    network: &str,
    view: &str,
) -> ClusterLoadAssignment {
    // Without gateways the network view filters nothing (istiod's filter
    // does not run).
    let view = if gateways.enabled() { view } else { "" };
    let visible: Vec<&str> = view.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let scale = gateways.scale.max(1);
    let mut out = ClusterLoadAssignment { endpoints: Vec::new(), ..cla.clone() };
    for (group, places) in cla.endpoints.iter().zip(&split.places) {
        let mut lb_endpoints = Vec::new();
        let mut through: BTreeMap<&NetworkGateway, u32> = BTreeMap::new();
        for (ep, p) in group.lb_endpoints.iter().zip(places) {
            if split.cluster_local && p.cluster != cluster {
                continue;
            }
            if !visible.is_empty() && !p.network.is_empty() && !visible.contains(&p.network.as_str()) {
                continue;
            }
            let weight = ep.load_balancing_weight.filter(|w| *w != 0).unwrap_or(1).saturating_mul(scale);
            let gws = gateways.select(&p.network, &p.cluster);
            let same = network.is_empty() || p.network.is_empty() || network == p.network;
            let forced = network.is_empty() && !p.network.is_empty() && !gws.is_empty();
            if !forced && (same || gws.is_empty()) {
                lb_endpoints.push(LbEndpoint { load_balancing_weight: Some(weight), ..ep.clone() });
                continue;
            }
            if !p.mtls {
                continue;
            }
            let share = weight / gws.len() as u32;
            for g in gws {
                *through.entry(g).or_default() += share;
            }
        }
        let mut by_address: Vec<(&NetworkGateway, u32)> = through.into_iter().collect();
        by_address.sort_by(|a, b| (&a.0.addr, a.0.port).cmp(&(&b.0.addr, b.0.port)));
        for (g, w) in by_address {
            lb_endpoints.push(gateway_endpoint(g, w.max(1), split.telemetry));
        }
        let total: u32 = lb_endpoints.iter().map(|e| e.load_balancing_weight.unwrap_or(1)).sum();
        out.endpoints.push(istiod_proto::envoy::config::endpoint::v3::LocalityLbEndpoints {
            load_balancing_weight: (!lb_endpoints.is_empty()).then_some(total),
            lb_endpoints,
            ..group.clone()
        });
    }
    out
}

/// A gateway as an endpoint: its address and mTLS port, `tlsMode: istio`
/// (what reaches it is mTLS), and with `telemetry` its (empty) workload
/// and cluster (`ep_filters.go`: `AppendLbEndpointMetadata` of the
/// gateway's cluster).
fn gateway_endpoint(g: &NetworkGateway, weight: u32, telemetry: bool) -> LbEndpoint {
    let mut metadata = super::envoy::istio_tls_metadata();
    if telemetry {
        use istiod_proto::prost_types::{Struct, Value, value::Kind};
        let workload = Value { kind: Some(Kind::StringValue(format!(";;;;{}", g.cluster))) };
        let fields = std::collections::BTreeMap::from([("workload".to_owned(), workload)]);
        metadata.filter_metadata.insert("istio".to_owned(), Struct { fields });
    }
    LbEndpoint {
        host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
            address: super::envoy::socket(&g.addr, u32::from(g.port)),
            ..Default::default()
        })),
        load_balancing_weight: Some(weight),
        metadata: Some(metadata),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use istiod_proto::envoy::config::endpoint::v3::LocalityLbEndpoints;

    use super::*;

    fn gw(network: &str, cluster: &str, addr: &str, port: u16, hbone_port: u16) -> NetworkGateway {
        NetworkGateway { network: network.into(), cluster: cluster.into(), addr: addr.into(), port, hbone_port }
    }

    fn gateways(all: Vec<NetworkGateway>) -> NetworkGateways {
        NetworkGateways::new(all, Default::default())
    }

    /// One locality group of endpoints `(address, network, cluster, mTLS)`.
    fn input(eps: &[(&str, &str, &str, bool)], gws: &NetworkGateways) -> (ClusterLoadAssignment, Split) {
        let lb = |a: &str| LbEndpoint {
            host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                address: super::super::envoy::socket(a, 8080),
                ..Default::default()
            })),
            load_balancing_weight: Some(1),
            ..Default::default()
        };
        let cla = ClusterLoadAssignment {
            cluster_name: "outbound|80||example.ns.svc.cluster.local".into(),
            endpoints: vec![LocalityLbEndpoints {
                lb_endpoints: eps.iter().map(|e| lb(e.0)).collect(),
                load_balancing_weight: Some(eps.len() as u32),
                ..Default::default()
            }],
            ..Default::default()
        };
        let places = eps.iter().map(|&(_, n, c, mtls)| Place { network: n.into(), cluster: c.into(), mtls }).collect();
        (cla, Split::new(vec![places], gws, false, false))
    }

    /// (address, weight) of each endpoint, in order, and the group's weight.
    fn got(cla: &ClusterLoadAssignment) -> (Vec<(String, u32)>, Option<u32>) {
        let g = &cla.endpoints[0];
        let eps = g
            .lb_endpoints
            .iter()
            .map(|e| {
                let Some(lb_endpoint::HostIdentifier::Endpoint(ep)) = &e.host_identifier else { panic!() };
                let Some(istiod_proto::envoy::config::core::v3::address::Address::SocketAddress(sa)) =
                    ep.address.as_ref().and_then(|a| a.address.as_ref())
                else {
                    panic!()
                };
                (sa.address.clone(), e.load_balancing_weight.unwrap())
            })
            .collect();
        (eps, g.load_balancing_weight)
    }

    /// istiod's `environment()`: one gateway for network1 (cluster1a),
    /// three for network2 (one in cluster2a, two in cluster2b), one for
    /// network3, none for network4.
    fn environment() -> NetworkGateways {
        gateways(vec![
            gw("network1", "cluster1a", "1.1.1.1", 80, 0),
            gw("network2", "cluster2a", "2.2.2.2", 80, 15008),
            gw("network2", "cluster2b", "2.2.2.20", 80, 15008),
            gw("network2", "cluster2b", "2.2.2.21", 80, 15008),
            gw("network3", "cluster3", "3.3.3.3", 443, 15008),
        ])
    }

    /// istiod's `testShards()`, in shard order, less the ServiceEntry
    /// endpoint with a hostname address (an EDS cluster here never has
    /// one); 10.0.0.3 is the HBONE endpoint, which no gateway carries.
    /// `mtls` is whether the rule in force lets the others take mTLS.
    fn shards(mtls: bool) -> Vec<(&'static str, &'static str, &'static str, bool)> {
        vec![
            ("10.0.0.1", "network1", "cluster1a", mtls),
            ("10.0.0.3", "network1", "cluster1a", false),
            ("10.0.0.2", "network1", "cluster1b", mtls),
            ("20.0.0.1", "network2", "cluster2a", mtls),
            ("20.0.0.2", "network2", "cluster2b", mtls),
            ("20.0.0.3", "network2", "cluster2b", mtls),
            ("40.0.0.1", "network4", "cluster4", mtls),
        ]
    }

    fn run(network: &str, mtls: bool) -> (Vec<(String, u32)>, Option<u32>) {
        let gws = environment();
        let (cla, s) = input(&shards(mtls), &gws);
        got(&split(&cla, &s, &gws, "", network, ""))
    }

    fn want(eps: &[(&str, u32)]) -> (Vec<(String, u32)>, Option<u32>) {
        let total = eps.iter().map(|e| e.1).sum();
        (eps.iter().map(|(a, w)| ((*a).to_owned(), *w)).collect(), Some(total))
    }

    /// `TestEndpointsByNetworkFilter` (pilot/pkg/xds/endpoints/
    /// ep_filters_test.go), its `networkFiltered` cases: the expected
    /// addresses and weights are upstream's, in the order its workload
    /// metadata lists them (direct endpoints, then gateways by address).
    /// A proxy's cluster does not enter (cluster1a and cluster1b, 2a and 2b
    /// get the same), so one case per network.
    #[test]
    fn upstream_network_filtered_cases() {
        // The scale: lcm of 1 (network1), 3 (network2), 1, and per cluster
        // 1, 1, 2, 1 = 6.
        assert_eq!(environment().scale, 6);
        let local1 = [("10.0.0.1", 6), ("10.0.0.3", 6), ("10.0.0.2", 6)];
        let mut n1 = local1.to_vec();
        n1.extend([("40.0.0.1", 6), ("2.2.2.2", 6), ("2.2.2.20", 6), ("2.2.2.21", 6)]);
        assert_eq!(run("network1", true), want(&n1), "from network1");
        assert_eq!(
            run("network2", true),
            want(&[("20.0.0.1", 6), ("20.0.0.2", 6), ("20.0.0.3", 6), ("40.0.0.1", 6), ("1.1.1.1", 12)]),
            "from network2: network1's two mTLS endpoints through its one gateway"
        );
        assert_eq!(
            run("network3", true),
            want(&[("40.0.0.1", 6), ("1.1.1.1", 12), ("2.2.2.2", 6), ("2.2.2.20", 6), ("2.2.2.21", 6)]),
            "from network3"
        );
        assert_eq!(
            run("network4", true),
            want(&[("40.0.0.1", 6), ("1.1.1.1", 12), ("2.2.2.2", 6), ("2.2.2.20", 6), ("2.2.2.21", 6)]),
            "from network4"
        );
    }

    /// `TestEndpointsByNetworkFilter_WithConfig`'s `noCrossNetwork` cases:
    /// where the rule or policy in force disables mTLS, remote endpoints
    /// behind a gateway are dropped; network4 (no gateway) stays direct.
    #[test]
    fn upstream_no_cross_network_cases() {
        let mut n1 = vec![("10.0.0.1", 6), ("10.0.0.3", 6), ("10.0.0.2", 6)];
        n1.push(("40.0.0.1", 6));
        assert_eq!(run("network1", false), want(&n1));
        assert_eq!(run("network2", false), want(&[("20.0.0.1", 6), ("20.0.0.2", 6), ("20.0.0.3", 6), ("40.0.0.1", 6)]));
        assert_eq!(run("network3", false), want(&[("40.0.0.1", 6)]));
        assert_eq!(run("network4", false), want(&[("40.0.0.1", 6)]));
    }

    /// `TestEndpointsByNetworkFilter_ProxyWithEmptyNetwork`: a proxy that
    /// names no network reaches endpoints of networks with a gateway
    /// through it, and the others directly. (Its fourth case, an endpoint
    /// without an address, has no counterpart here.)
    #[test]
    fn upstream_proxy_with_empty_network() {
        let gws = gateways(vec![gw("network-1", "", "1.1.1.1", 15443, 0), gw("network-2", "", "2.2.2.2", 15443, 0)]);
        let (cla, s) = input(
            &[
                ("3.3.3.3", "network-without-gateway", "Kubernetes", true),
                ("10.10.10.10", "network-1", "Kubernetes", true),
                ("10.20.20.20", "network-2", "Kubernetes", true),
            ],
            &gws,
        );
        assert_eq!(got(&split(&cla, &s, &gws, "", "", "")), want(&[("3.3.3.3", 1), ("1.1.1.1", 1), ("2.2.2.2", 1)]));
    }

    /// `REQUESTED_NETWORK_VIEW` hides the networks it does not name
    /// (istiod's `proxyView`; endpoints with no network stay visible).
    #[test]
    fn the_requested_network_view_hides_other_networks() {
        let gws = environment();
        let mut eps = shards(true);
        eps.push(("50.0.0.1", "", "cluster5", true));
        let (cla, s) = input(&eps, &gws);
        assert_eq!(
            got(&split(&cla, &s, &gws, "", "network1", "network1, network4")),
            want(&[("10.0.0.1", 6), ("10.0.0.3", 6), ("10.0.0.2", 6), ("40.0.0.1", 6), ("50.0.0.1", 6)])
        );
    }
}
