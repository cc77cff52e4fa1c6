//! Envoy builders every translator shares: `Any` packing, the ADS config
//! source, socket addresses, the tcp_proxy filter and istio-agent's SDS
//! references.

use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::listener::v3::{Filter, filter};
use istiod_proto::envoy::extensions::filters::http::router::v3::Router;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3 as tcp;
use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;
use istiod_proto::prost::Name;
use istiod_proto::prost_types::Any;

/// `m` packed as a `google.protobuf.Any` (shared by the translators).
pub fn any<M: Name>(m: &M) -> Any {
    Any { type_url: M::type_url(), value: m.encode_to_vec() }
}

pub(crate) fn ads() -> Option<core::ConfigSource> {
    Some(core::ConfigSource {
        config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(core::AggregatedConfigSource {})),
        resource_api_version: core::ApiVersion::V3 as i32,
        ..Default::default()
    })
}

/// A socket address.
pub fn socket(ip: &str, port: u32) -> Option<core::Address> {
    Some(core::Address {
        address: Some(core::address::Address::SocketAddress(core::SocketAddress {
            address: ip.to_owned(),
            port_specifier: Some(core::socket_address::PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    })
}

/// The HTTP filter `name` with typed config `config`.
pub fn http_filter<M: Name>(name: &str, config: &M) -> hcm::HttpFilter {
    hcm::HttpFilter {
        name: name.into(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(any(config))),
        ..Default::default()
    }
}

/// The router, last of every HTTP filter chain.
pub fn router() -> hcm::HttpFilter {
    http_filter("envoy.filters.http.router", &Router::default())
}

/// An HttpConnectionManager as a listener's network filter.
pub fn http_connection_manager(manager: &hcm::HttpConnectionManager) -> Filter {
    Filter {
        name: "envoy.filters.network.http_connection_manager".into(),
        config_type: Some(filter::ConfigType::TypedConfig(any(manager))),
    }
}

/// istiod's `MeshNetworksToEnvoyInternalAddressConfig`: every meshNetworks
/// `fromCidr` (a bare address as its /32 or /128), sorted by address then
/// length, as the HTTP manager's internal addresses; none without any.
pub fn internal_address_config(
    nets: &istiod_config::networks::MeshNetworks,
) -> Option<hcm::http_connection_manager::InternalAddressConfig> {
    let mut prefixes: Vec<(std::net::IpAddr, u32)> = nets
        .networks
        .values()
        .flat_map(|n| n.endpoints.iter().filter_map(|e| e.from_cidr.as_deref()))
        .filter_map(|c| match c.split_once('/') {
            Some((a, l)) => {
                let a: std::net::IpAddr = a.parse().ok()?;
                let l: u32 = l.parse().ok()?;
                (l <= if a.is_ipv4() { 32 } else { 128 }).then_some((a, l))
            }
            None => c.parse().ok().map(|a: std::net::IpAddr| (a, if a.is_ipv4() { 32 } else { 128 })),
        })
        .collect();
    if prefixes.is_empty() {
        return None;
    }
    prefixes.sort();
    Some(hcm::http_connection_manager::InternalAddressConfig {
        cidr_ranges: prefixes
            .into_iter()
            .map(|(a, l)| core::CidrRange { address_prefix: a.to_string(), prefix_len: Some(l) })
            .collect(),
        ..Default::default()
    })
}

/// `PILOT_HTTP10`: HTTP managers accept HTTP/1.0.
pub fn http10_options(on: bool) -> Option<core::Http1ProtocolOptions> {
    on.then(|| core::Http1ProtocolOptions { accept_http_10: true, ..Default::default() })
}

/// istiod's `buildNetworkFiltersStack`: a Mongo port's chain puts
/// `mongo_proxy` before its tcp_proxy; a Redis port's has `redis_proxy`
/// instead of it (to `cluster`, 5 s per operation, latency in
/// microseconds), each with the tcp_proxy's stat prefix, where
/// `PILOT_ENABLE_MONGO_FILTER` and `PILOT_ENABLE_REDIS_FILTER` say so.
pub fn protocol_stack(
    filters: crate::meshconfig::ProtocolFilters,
    protocol: crate::model::Protocol,
    stat_prefix: &str,
    cluster: &str,
    tcp: Filter,
) -> Vec<Filter> {
    use crate::model::Protocol;
    use istiod_proto::envoy::extensions::filters::network::{mongo_proxy::v3 as mongo, redis_proxy::v3 as redis};
    let filter = |name: &str, config: istiod_proto::prost_types::Any| Filter {
        name: name.into(),
        config_type: Some(filter::ConfigType::TypedConfig(config)),
    };
    match protocol {
        Protocol::Mongo if filters.mongo => {
            let config = mongo::MongoProxy { stat_prefix: stat_prefix.to_owned(), ..Default::default() };
            vec![filter("envoy.filters.network.mongo_proxy", any(&config)), tcp]
        }
        Protocol::Redis if filters.redis => {
            use redis::redis_proxy::{ConnPoolSettings, PrefixRoutes, prefix_routes::Route};
            let config = redis::RedisProxy {
                stat_prefix: stat_prefix.to_owned(),
                latency_in_micros: true,
                settings: Some(ConnPoolSettings {
                    op_timeout: Some(istiod_proto::prost_types::Duration { seconds: 5, nanos: 0 }),
                    ..Default::default()
                }),
                prefix_routes: Some(PrefixRoutes {
                    catch_all_route: Some(Route { cluster: cluster.to_owned(), ..Default::default() }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            vec![filter("envoy.filters.network.redis_proxy", any(&config))]
        }
        _ => vec![tcp],
    }
}

pub fn tcp_proxy(stat_prefix: &str, cluster: &str) -> Filter {
    tcp_proxy_logged(stat_prefix, cluster, &[])
}

/// A tcp_proxy that writes `log` for each connection.
pub(crate) fn tcp_proxy_logged(
    stat_prefix: &str,
    cluster: &str,
    log: &[istiod_proto::envoy::config::accesslog::v3::AccessLog],
) -> Filter {
    let t = tcp::TcpProxy {
        stat_prefix: stat_prefix.to_owned(),
        cluster_specifier: Some(tcp::tcp_proxy::ClusterSpecifier::Cluster(cluster.to_owned())),
        access_log: log.to_vec(),
        ..Default::default()
    };
    Filter {
        name: "envoy.filters.network.tcp_proxy".into(),
        config_type: Some(filter::ConfigType::TypedConfig(any(&t))),
    }
}

/// `COMPLIANCE_POLICY`, set once at start (before anything is built).
static COMPLIANCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets `COMPLIANCE_POLICY` for every TLS context built from now on.
pub fn set_compliance_policy(policy: &str) {
    let _ = COMPLIANCE.set(policy.to_owned());
}

/// The TLS 1.2 suites FIPS 140-2 allows (istiod's `fipsCiphers`).
const FIPS_CIPHERS: [&str; 4] = [
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
];

/// istiod's `EnforceCompliance` (pkg/model/fips.go), applied last to
/// every TLS context it sends Envoy (mesh mTLS in and out, a
/// DestinationRule's upstream TLS, a gateway server's, HBONE's).
pub fn enforce_compliance(ctx: &mut tls::CommonTlsContext) {
    enforce_compliance_as(COMPLIANCE.get().map_or("", String::as_str), ctx);
}

pub(crate) fn enforce_compliance_as(policy: &str, ctx: &mut tls::CommonTlsContext) {
    use tls::tls_parameters::{CompliancePolicy, TlsProtocol};
    if !matches!(policy, "fips-140-2" | "fips-140-3" | "pqc") {
        return;
    }
    let p = ctx.tls_params.get_or_insert_with(Default::default);
    match policy {
        "fips-140-2" => {
            p.tls_minimum_protocol_version = TlsProtocol::TlSv12 as i32;
            p.tls_maximum_protocol_version = TlsProtocol::TlSv12 as i32;
            // Unset, a FIPS build of Envoy uses only FIPS suites.
            p.cipher_suites.retain(|c| FIPS_CIPHERS.contains(&c.as_str()));
            // Unset is P-256.
            p.ecdh_curves.clear();
        }
        "fips-140-3" => p.compliance_policies = vec![CompliancePolicy::Fips202205 as i32],
        _ => {
            p.tls_minimum_protocol_version = TlsProtocol::TlSv13 as i32;
            p.cipher_suites = FIPS_CIPHERS.iter().map(|c| (*c).to_owned()).collect();
            p.ecdh_curves = vec!["X25519MLKEM768".into()];
        }
    }
}

/// The SDS reference istio-agent serves (`default`, `ROOTCA`) over the
/// `sds-grpc` cluster.
pub fn sds(name: &str) -> tls::SdsSecretConfig {
    tls::SdsSecretConfig {
        name: name.to_owned(),
        sds_config: Some(core::ConfigSource {
            config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::ApiConfigSource(
                core::ApiConfigSource {
                    api_type: core::api_config_source::ApiType::Grpc as i32,
                    transport_api_version: core::ApiVersion::V3 as i32,
                    set_node_on_first_message_only: true,
                    grpc_services: vec![core::GrpcService {
                        target_specifier: Some(core::grpc_service::TargetSpecifier::EnvoyGrpc(
                            core::grpc_service::EnvoyGrpc { cluster_name: "sds-grpc".into(), ..Default::default() },
                        )),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            )),
            resource_api_version: core::ApiVersion::V3 as i32,
            ..Default::default()
        }),
    }
}

/// A gRPC service reached through Envoy's own client: cluster `cluster`,
/// `:authority` `authority` (tracers' and access logs' collectors).
pub(crate) fn envoy_grpc(
    cluster: String,
    authority: String,
    timeout: Option<istiod_proto::prost_types::Duration>,
) -> istiod_proto::envoy::config::core::v3::GrpcService {
    use istiod_proto::envoy::config::core::v3::grpc_service::{EnvoyGrpc, TargetSpecifier};
    istiod_proto::envoy::config::core::v3::GrpcService {
        target_specifier: Some(TargetSpecifier::EnvoyGrpc(EnvoyGrpc {
            cluster_name: cluster,
            authority,
            ..Default::default()
        })),
        timeout,
        ..Default::default()
    }
}

/// `tlsMode: istio` under `envoy.transport_socket_match`: what auto mTLS
/// matches on.
pub(crate) fn istio_tls_metadata() -> core::Metadata {
    use istiod_proto::prost_types::{Struct, Value, value::Kind as ValueKind};
    use std::collections::BTreeMap;
    core::Metadata {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tls::tls_parameters::{CompliancePolicy, TlsProtocol};

    /// istiod's `EnforceCompliance` (pkg/model/fips.go) case by case: each
    /// policy's versions, suites and curves over a context that set its
    /// own; no policy (or an unknown one) leaves it alone.
    #[test]
    fn compliance_policies_as_istiod_enforces_them() {
        let given = || tls::CommonTlsContext {
            tls_params: Some(tls::TlsParameters {
                cipher_suites: vec!["ECDHE-RSA-AES128-GCM-SHA256".into(), "ECDHE-RSA-CHACHA20-POLY1305".into()],
                ecdh_curves: vec!["X25519".into()],
                tls_maximum_protocol_version: TlsProtocol::TlSv13 as i32,
                ..Default::default()
            }),
            ..Default::default()
        };
        let as_ = |policy: &str| {
            let mut c = given();
            enforce_compliance_as(policy, &mut c);
            c.tls_params.unwrap()
        };
        assert_eq!(as_(""), given().tls_params.unwrap());
        assert_eq!(as_("strict-ish"), given().tls_params.unwrap(), "unknown: warned, left alone");
        let p = as_("fips-140-2");
        assert_eq!(
            (p.tls_minimum_protocol_version, p.tls_maximum_protocol_version),
            (TlsProtocol::TlSv12 as i32, TlsProtocol::TlSv12 as i32)
        );
        assert_eq!(p.cipher_suites, ["ECDHE-RSA-AES128-GCM-SHA256"], "only FIPS suites kept");
        assert!(p.ecdh_curves.is_empty(), "P-256, Envoy's default");
        let p = as_("fips-140-3");
        assert_eq!(p.compliance_policies, [CompliancePolicy::Fips202205 as i32]);
        assert_eq!(p.cipher_suites.len(), 2, "left to Envoy's FIPS_202205");
        let p = as_("pqc");
        assert_eq!(p.tls_minimum_protocol_version, TlsProtocol::TlSv13 as i32);
        assert_eq!(p.cipher_suites, FIPS_CIPHERS);
        assert_eq!(p.ecdh_curves, ["X25519MLKEM768"]);
        // No params before: made.
        let mut bare = tls::CommonTlsContext::default();
        enforce_compliance_as("fips-140-2", &mut bare);
        assert!(bare.tls_params.as_ref().is_some_and(|p| p.cipher_suites.is_empty()));
    }
}

#[cfg(test)]
mod internal_address_tests {
    /// Upstream `TestMeshNetworksToEnvoyInternalAddressConfig`
    /// (pilot/pkg/networking/util/util_test.go), every case.
    #[test]
    fn upstream_mesh_networks_to_envoy_internal_address_config() {
        let nets = |yaml: &str| -> istiod_config::networks::MeshNetworks { serde_yaml_ng::from_str(yaml).unwrap() };
        let got = |yaml: &str| {
            super::internal_address_config(&nets(yaml))
                .map(|c| c.cidr_ranges.into_iter().map(|r| (r.address_prefix, r.prefix_len)).collect::<Vec<_>>())
        };
        assert_eq!(got("{}"), None, "empty networks");
        assert_eq!(
            got("networks: {default: {endpoints: [{fromCidr: 192.168.0.0/16}, {fromCidr: 172.16.0.0/12}]}}"),
            Some(vec![("172.16.0.0".to_owned(), Some(12)), ("192.168.0.0".to_owned(), Some(16))]),
            "networks populated"
        );
        assert_eq!(
            got("networks: {default: {endpoints: [{fromCidr: '2001:db8:abcd::/48'}]}, \
                 other: {endpoints: [{fromCidr: '2001:db8:def0:1234::/56'}]}}"),
            Some(vec![("2001:db8:abcd::".to_owned(), Some(48)), ("2001:db8:def0:1234::".to_owned(), Some(56))]),
            "multi v6"
        );
    }
}
