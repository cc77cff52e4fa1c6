//! CDS: `outbound|<port>|<subset>|<host>` per service port and
//! DestinationRule subset (EDS, ORIGINAL_DST for headless, STRICT_DNS /
//! LOGICAL_DNS for DNS resolution) with the DestinationRule's traffic
//! policy or auto mTLS, and the fixed `BlackHoleCluster`,
//! `PassthroughCluster` and `InboundPassthroughCluster`.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use istiod_kubewatch::istio::security::MtlsMode;
use istiod_proto::envoy::config::cluster::v3::{Cluster, cluster};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::prost::Message;
use istiod_proto::prost_types::Duration;
use istiod_xds::ads::Kind;

use super::envoy::socket;
use super::{endpoint::load_assignment, traffic_policy};
use crate::model::{Model, Protocol, Resolution};

/// Suffix of the shadow cluster a DestinationRule with a narrow `exportTo`
/// leaves for the namespaces it is not exported to: `<cluster>#nodr`, never
/// listed or served under that name.
pub const NO_DR: &str = "#nodr";

/// Every resource the model describes.
/// The outbound clusters of every service port, and the load assignments
/// of the EDS ones.
pub fn outbound(model: &Model, out: &mut BTreeMap<(Kind, Arc<str>), Bytes>) {
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
                    && crate::translate::inbound::service_mtls_mode(model, svc, port.port) != Some(MtlsMode::Disable)
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
}

/// The clusters every sidecar has.
pub fn fixed(out: &mut BTreeMap<(Kind, Arc<str>), Bytes>) {
    let timeout = Some(Duration { seconds: 10, nanos: 0 });
    let black_hole = Cluster {
        name: "BlackHoleCluster".into(),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::Static as i32)),
        connect_timeout: timeout,
        ..Default::default()
    };
    let passthrough = |name: &str, bind: Option<&str>| Cluster {
        name: name.into(),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::OriginalDst as i32)),
        lb_policy: cluster::LbPolicy::ClusterProvided as i32,
        connect_timeout: timeout,
        // Inbound passthrough leaves from 127.0.0.6 so iptables does not
        // capture it again (istiod's InboundPassthroughBindIpv4).
        upstream_bind_config: bind.map(|ip| core::BindConfig {
            source_address: socket(ip, 0).and_then(|a| match a.address {
                Some(core::address::Address::SocketAddress(s)) => Some(s),
                _ => None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    for c in [
        black_hole,
        passthrough("PassthroughCluster", None),
        passthrough("InboundPassthroughCluster", Some("127.0.0.6")),
    ] {
        out.insert((Kind::Cluster, c.name.as_str().into()), Bytes::from(c.encode_to_vec()));
    }
}
