//! A first, simple translation from the mesh model to Envoy resources,
//! until istiod's translation (issue #6) replaces it: a cluster
//! `outbound|<port>||<host>` per service port (EDS, ORIGINAL_DST for
//! headless, STRICT_DNS/LOGICAL_DNS for DNS resolution) and the
//! `ClusterLoadAssignment` of each EDS cluster, grouped by locality. It
//! feeds the ADS engine's `SimpleModel`.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use istiod_kubewatch::istio::security::MtlsMode;
use istiod_proto::envoy::config::cluster::v3::{Cluster, cluster};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use istiod_proto::prost::Message;
use istiod_proto::prost_types::{Duration, Struct, Value, value::Kind as ValueKind};
use istiod_xds::ads::{Kind, SimpleModel};

use crate::model::{Health, Locality, Model, Protocol, Resolution, Service};
use crate::traffic_policy;

/// One resource change for the engine's model.
pub type Change = (Kind, Arc<str>, Option<Bytes>);

/// Suffix of the shadow cluster a DestinationRule with a narrow `exportTo`
/// leaves for the namespaces it is not exported to: `<cluster>#nodr`, never
/// listed or served under that name.
pub const NO_DR: &str = "#nodr";

/// Every resource the model describes.
pub fn translate(model: &Model) -> BTreeMap<(Kind, Arc<str>), Bytes> {
    let mut out = BTreeMap::new();
    for svc in model.services.values() {
        let dr = model.destination_rule(&svc.hostname);
        let dr_hidden_somewhere = model.destination_rule_export(&svc.hostname).is_some();
        let subsets: Vec<(String, BTreeMap<String, String>)> =
            dr.map(|dr| dr.subsets.iter().map(|s| (s.name.clone(), s.labels.clone())).collect()).unwrap_or_default();
        for port in &svc.ports {
            if port.protocol == Protocol::Udp {
                continue; // not proxied
            }
            for (subset, labels) in
                std::iter::once((String::new(), None)).chain(subsets.iter().map(|(n, l)| (n.clone(), Some(l))))
            {
                let name: Arc<str> = format!("outbound|{}|{subset}|{}", port.port, svc.hostname).into();
                let mut c = Cluster {
                    name: name.to_string(),
                    connect_timeout: Some(Duration { seconds: 10, nanos: 0 }),
                    ..Default::default()
                };
                match svc.resolution {
                    Resolution::ClientSideLb => {
                        c.cluster_discovery_type =
                            Some(cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::Eds as i32));
                        c.eds_cluster_config = Some(cluster::EdsClusterConfig {
                            eds_config: Some(core::ConfigSource {
                                config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(
                                    core::AggregatedConfigSource {},
                                )),
                                resource_api_version: core::ApiVersion::V3 as i32,
                                ..Default::default()
                            }),
                            service_name: name.to_string(),
                        });
                        out.insert(
                            (Kind::Endpoint, name.clone()),
                            Bytes::from(load_assignment(&name, svc, port.port, labels).encode_to_vec()),
                        );
                    }
                    Resolution::Passthrough => {
                        // Headless: connect to the address the application dialed.
                        c.cluster_discovery_type =
                            Some(cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::OriginalDst as i32));
                        c.lb_policy = cluster::LbPolicy::ClusterProvided as i32;
                    }
                    Resolution::Dns | Resolution::DnsRoundRobin => {
                        let t = if svc.resolution == Resolution::Dns {
                            cluster::DiscoveryType::StrictDns
                        } else {
                            cluster::DiscoveryType::LogicalDns
                        };
                        c.cluster_discovery_type = Some(cluster::ClusterDiscoveryType::Type(t as i32));
                        c.load_assignment = Some(load_assignment(&name, svc, port.port, labels));
                    }
                }
                let auto_mtls = model.mesh.enable_auto_mtls
                    && !svc.mesh_external
                    && crate::inbound::service_mtls_mode(model, svc, port.port) != Some(MtlsMode::Disable)
                    && svc.endpoints.iter().any(|e| e.tls_mode == "istio");
                if subset.is_empty() && dr_hidden_somewhere {
                    // The cluster as namespaces the DestinationRule is not
                    // exported to see it (served by `inbound.rs`).
                    let mut plain = c.clone();
                    if auto_mtls {
                        traffic_policy::auto_mtls(&mut plain, &svc.hostname, port.port, &subset);
                    }
                    out.insert((Kind::Cluster, format!("{name}{NO_DR}").into()), Bytes::from(plain.encode_to_vec()));
                }
                let mut explicit_tls = false;
                if let Some(dr) = dr {
                    let policy = traffic_policy::effective(dr, port.port, &subset);
                    explicit_tls = policy.tls.is_some();
                    traffic_policy::apply(&mut c, &policy, &svc.hostname, port.port, &subset);
                }
                if !explicit_tls && auto_mtls {
                    traffic_policy::auto_mtls(&mut c, &svc.hostname, port.port, &subset);
                }
                out.insert((Kind::Cluster, name.clone()), Bytes::from(c.encode_to_vec()));
            }
        }
    }
    crate::grpc_xds::translate(model, &mut out);
    crate::sidecar::translate(model, &mut out);
    out
}

fn load_assignment(
    cluster: &str,
    svc: &Service,
    port: u16,
    subset: Option<&BTreeMap<String, String>>,
) -> ClusterLoadAssignment {
    let mut by_locality: BTreeMap<&Locality, Vec<LbEndpoint>> = BTreeMap::new();
    let in_subset =
        |e: &&crate::model::Endpoint| subset.is_none_or(|l| l.iter().all(|(k, v)| e.labels.get(k) == Some(v)));
    for ep in svc.endpoints.iter().filter(|e| e.service_port == port).filter(in_subset) {
        let health = match ep.health {
            Health::Healthy => core::HealthStatus::Healthy,
            Health::Draining => core::HealthStatus::Draining,
            Health::Unhealthy => core::HealthStatus::Unhealthy,
        };
        by_locality.entry(&ep.locality).or_default().push(LbEndpoint {
            host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                address: Some(core::Address {
                    address: Some(core::address::Address::SocketAddress(core::SocketAddress {
                        address: ep.address.clone(),
                        port_specifier: Some(core::socket_address::PortSpecifier::PortValue(u32::from(ep.port))),
                        ..Default::default()
                    })),
                }),
                ..Default::default()
            })),
            health_status: health as i32,
            load_balancing_weight: Some(1),
            // Picks the cluster's transport socket (auto mTLS).
            metadata: (ep.tls_mode == "istio").then(|| core::Metadata {
                filter_metadata: BTreeMap::from([(
                    "envoy.transport_socket_match".to_owned(),
                    Struct {
                        fields: BTreeMap::from([(
                            "tlsMode".to_owned(),
                            Value { kind: Some(ValueKind::StringValue("istio".into())) },
                        )]),
                    },
                )]),
                ..Default::default()
            }),
        });
    }
    ClusterLoadAssignment {
        cluster_name: cluster.to_owned(),
        endpoints: by_locality
            .into_iter()
            .map(|(l, lb_endpoints)| LocalityLbEndpoints {
                // grpcio rejects a group without a locality: always set it.
                locality: Some(core::Locality {
                    region: l.region.clone(),
                    zone: l.zone.clone(),
                    sub_zone: l.subzone.clone(),
                }),
                load_balancing_weight: Some(lb_endpoints.len() as u32),
                lb_endpoints,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// The changes that turn `model` into exactly `want`.
pub fn diff(model: &SimpleModel, want: &BTreeMap<(Kind, Arc<str>), Bytes>) -> Vec<Change> {
    let mut changes: Vec<Change> = want.iter().map(|((k, n), b)| (*k, n.clone(), Some(b.clone()))).collect();
    for kind in Kind::ALL {
        for name in model.resources[kind as usize].keys() {
            if !want.contains_key(&(kind, name.clone())) {
                changes.push((kind, name.clone(), None));
            }
        }
    }
    changes
}

/// The changes from one set of resources to another.
pub fn diff_maps(old: &BTreeMap<(Kind, Arc<str>), Bytes>, new: &BTreeMap<(Kind, Arc<str>), Bytes>) -> Vec<Change> {
    let mut changes: Vec<Change> = new
        .iter()
        .filter(|(k, b)| old.get(*k) != Some(*b))
        .map(|((k, n), b)| (*k, n.clone(), Some(b.clone())))
        .collect();
    changes.extend(old.keys().filter(|k| !new.contains_key(*k)).map(|(k, n)| (*k, n.clone(), None)));
    changes
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn bookinfo_clusters_and_endpoints() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookinfo");
        let objs = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
        let r = translate(&Model::build(&objs, "cluster.local"));
        let reviews: Arc<str> = "outbound|9080||reviews.bookinfo.svc.cluster.local".into();
        let c = Cluster::decode(r[&(Kind::Cluster, reviews.clone())].clone()).unwrap();
        assert_eq!(c.eds_cluster_config.unwrap().service_name, &*reviews);
        let cla = ClusterLoadAssignment::decode(r[&(Kind::Endpoint, reviews)].clone()).unwrap();
        let eps: Vec<&LbEndpoint> = cla.endpoints.iter().flat_map(|l| &l.lb_endpoints).collect();
        assert_eq!(eps.len(), 4, "reviews v1, v2 x2, v3");
        assert_eq!(eps.iter().filter(|e| e.health_status == core::HealthStatus::Draining as i32).count(), 1);
        assert!(
            cla.endpoints
                .iter()
                .all(|l| l.locality.as_ref().is_some_and(|l| !l.zone.is_empty() && !l.region.is_empty()))
        );
    }

    #[test]
    fn mesh_config_shapes_outbound_traffic_and_auto_mtls() {
        use istiod_proto::envoy::config::listener::v3::Listener;
        use istiod_proto::envoy::config::route::v3::{RouteConfiguration, route};
        use istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3::{TcpProxy, tcp_proxy};

        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookinfo");
        let objs = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
        let catchall = |r: &BTreeMap<(Kind, Arc<str>), Bytes>| {
            let l = Listener::decode(r[&(Kind::Listener, Arc::from("virtualOutbound"))].clone()).unwrap();
            let any = l.filter_chains[0].filters[0].config_type.clone();
            let Some(istiod_proto::envoy::config::listener::v3::filter::ConfigType::TypedConfig(any)) = any else {
                panic!("no tcp_proxy config")
            };
            match TcpProxy::decode(any.value.as_slice()).unwrap().cluster_specifier {
                Some(tcp_proxy::ClusterSpecifier::Cluster(c)) => c,
                other => panic!("{other:?}"),
            }
        };
        let fallback = |r: &BTreeMap<(Kind, Arc<str>), Bytes>| {
            let rc = RouteConfiguration::decode(r[&(Kind::Route, Arc::from("9080"))].clone()).unwrap();
            let vh = rc.virtual_hosts.last().unwrap().clone();
            (vh.name, vh.routes[0].action.clone())
        };
        let details: Arc<str> = "outbound|9080||details.bookinfo.svc.cluster.local".into();

        let open = translate(&Model::build(&objs, "cluster.local"));
        assert_eq!(catchall(&open), "PassthroughCluster");
        assert_eq!(fallback(&open).0, "allow_any");
        let c = Cluster::decode(open[&(Kind::Cluster, details.clone())].clone()).unwrap();
        assert!(!c.transport_socket_matches.is_empty(), "auto mTLS is on by default");

        let mesh =
            crate::mesh::MeshSettings::parse("outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\nenableAutoMtls: false\n")
                .unwrap();
        let closed = translate(&Model::build_in(&objs, "cluster.local", Arc::new(mesh)));
        assert_eq!(catchall(&closed), "BlackHoleCluster");
        let (name, action) = fallback(&closed);
        assert_eq!(name, "block_all");
        assert!(matches!(action, Some(route::Action::DirectResponse(d)) if d.status == 502));
        let c = Cluster::decode(closed[&(Kind::Cluster, details)].clone()).unwrap();
        assert!(c.transport_socket_matches.is_empty(), "enableAutoMtls: false");
    }

    #[test]
    fn diff_removes_what_is_gone() {
        let mut want = BTreeMap::new();
        want.insert((Kind::Cluster, Arc::<str>::from("a")), Bytes::from_static(b"1"));
        let (model, _) = SimpleModel::default().apply(1, diff(&SimpleModel::default(), &want));
        let changes = diff(&model, &BTreeMap::new());
        assert_eq!(changes, vec![(Kind::Cluster, Arc::from("a"), None)]);
    }
}
