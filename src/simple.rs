//! A first, simple translation from Kubernetes objects to Envoy resources,
//! until the mesh model (issue #5) and istiod's translation (issue #6)
//! replace it: an EDS cluster `outbound|<port>||<host>` per Service port and
//! its `ClusterLoadAssignment` from the EndpointSlices, grouped by zone.
//! It feeds the ADS engine's `SimpleModel`.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use istiod_kubewatch::objects::{EndpointSlice, Objects};
use istiod_proto::envoy::config::cluster::v3::{Cluster, cluster};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use istiod_proto::prost::Message;
use istiod_proto::prost_types::Duration;
use istiod_xds::ads::{Kind, SimpleModel};

/// One resource change for the engine's model.
pub type Change = (Kind, Arc<str>, Option<Bytes>);

/// Every resource the objects describe.
pub fn translate(objs: &Objects, domain: &str) -> BTreeMap<(Kind, Arc<str>), Bytes> {
    let mut out = BTreeMap::new();
    for svc in &objs.services {
        let ns = svc.metadata.ns();
        let host = format!("{}.{ns}.svc.{domain}", svc.metadata.name);
        let slices: Vec<&EndpointSlice> = objs
            .endpoint_slices
            .iter()
            .filter(|s| s.metadata.ns() == ns && s.service_name() == Some(svc.metadata.name.as_str()))
            .collect();
        for port in &svc.spec.ports {
            let name: Arc<str> = format!("outbound|{}||{host}", port.port).into();
            let c = Cluster {
                name: name.to_string(),
                cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::Eds as i32)),
                eds_cluster_config: Some(cluster::EdsClusterConfig {
                    eds_config: Some(core::ConfigSource {
                        config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(
                            core::AggregatedConfigSource {},
                        )),
                        resource_api_version: core::ApiVersion::V3 as i32,
                        ..Default::default()
                    }),
                    service_name: name.to_string(),
                }),
                connect_timeout: Some(Duration { seconds: 10, nanos: 0 }),
                ..Default::default()
            };
            out.insert((Kind::Cluster, name.clone()), Bytes::from(c.encode_to_vec()));
            out.insert(
                (Kind::Endpoint, name.clone()),
                Bytes::from(load_assignment(&name, port.name.as_deref(), &slices).encode_to_vec()),
            );
        }
    }
    out
}

fn load_assignment(cluster: &str, port_name: Option<&str>, slices: &[&EndpointSlice]) -> ClusterLoadAssignment {
    let mut by_zone: BTreeMap<String, Vec<LbEndpoint>> = BTreeMap::new();
    for slice in slices {
        let Some(port) = slice.ports.iter().find(|p| p.name.as_deref() == port_name).and_then(|p| p.port) else {
            continue;
        };
        for ep in &slice.endpoints {
            let c = &ep.conditions;
            // Kubernetes: an absent condition means ready. A terminating
            // endpoint that still serves drains.
            let health = if c.ready.unwrap_or(true) {
                core::HealthStatus::Healthy
            } else if c.serving == Some(true) && c.terminating == Some(true) {
                core::HealthStatus::Draining
            } else {
                core::HealthStatus::Unhealthy
            };
            for addr in &ep.addresses {
                by_zone.entry(ep.zone.clone().unwrap_or_default()).or_default().push(LbEndpoint {
                    host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                        address: Some(core::Address {
                            address: Some(core::address::Address::SocketAddress(core::SocketAddress {
                                address: addr.clone(),
                                port_specifier: Some(core::socket_address::PortSpecifier::PortValue(u32::from(port))),
                                ..Default::default()
                            })),
                        }),
                        ..Default::default()
                    })),
                    health_status: health as i32,
                    load_balancing_weight: Some(1),
                    ..Default::default()
                });
            }
        }
    }
    ClusterLoadAssignment {
        cluster_name: cluster.to_owned(),
        endpoints: by_zone
            .into_iter()
            .map(|(zone, lb_endpoints)| LocalityLbEndpoints {
                // grpcio rejects a group without a locality: always set it.
                locality: Some(core::Locality { zone, ..Default::default() }),
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn bookinfo_clusters_and_endpoints() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookinfo");
        let objs = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
        let r = translate(&objs, "cluster.local");
        let reviews: Arc<str> = "outbound|9080||reviews.bookinfo.svc.cluster.local".into();
        let c = Cluster::decode(r[&(Kind::Cluster, reviews.clone())].clone()).unwrap();
        assert_eq!(c.eds_cluster_config.unwrap().service_name, &*reviews);
        let cla = ClusterLoadAssignment::decode(r[&(Kind::Endpoint, reviews)].clone()).unwrap();
        let eps: Vec<&LbEndpoint> = cla.endpoints.iter().flat_map(|l| &l.lb_endpoints).collect();
        assert_eq!(eps.len(), 4, "reviews v1, v2 x2, v3");
        assert_eq!(eps.iter().filter(|e| e.health_status == core::HealthStatus::Draining as i32).count(), 1);
        assert!(cla.endpoints.iter().all(|l| l.locality.as_ref().is_some_and(|l| !l.zone.is_empty())));
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
