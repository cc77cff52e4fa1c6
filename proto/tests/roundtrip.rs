//! Values cross between our prost types and upstream's Python types both
//! ways: bytes we encode decode (with the `envoy` modules of xds-protos) to
//! the value written independently here as proto3 JSON, and the bytes
//! Python encodes from that JSON decode to the value we built.
//!
//! A wrong field number, type or oneof in our schemas shows up as a field
//! that is missing, unknown or different on the other side.

#[path = "support/python.rs"]
mod python;

use std::collections::BTreeMap;

use istiod_proto::envoy::config::cluster::v3 as cluster;
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::endpoint::v3 as endpoint;
use istiod_proto::envoy::config::listener::v3 as listener;
use istiod_proto::envoy::config::rbac::v3 as rbac;
use istiod_proto::envoy::config::route::v3 as route;
use istiod_proto::envoy::extensions::filters::common::fault::v3 as common_fault;
use istiod_proto::envoy::extensions::filters::http::{fault, rbac as http_rbac, router};
use istiod_proto::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3 as tcp;
use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;
use istiod_proto::envoy::service::discovery::v3 as discovery;
use istiod_proto::envoy::r#type::matcher::v3 as matcher;
use istiod_proto::envoy::r#type::v3 as types;
use istiod_proto::google::rpc::Status;
use istiod_proto::prost::{Message, Name};
use istiod_proto::prost_types::{self, Any, Duration, Struct, Value, value::Kind};
use istiod_proto::type_url;

fn any<M: Name>(m: &M) -> Any {
    Any { type_url: M::type_url(), value: m.encode_to_vec() }
}

fn secs(s: i64) -> Option<Duration> {
    Some(Duration { seconds: s, nanos: 0 })
}

fn string(s: &str) -> Value {
    Value { kind: Some(Kind::StringValue(s.into())) }
}

fn exact(s: &str) -> matcher::StringMatcher {
    matcher::StringMatcher {
        match_pattern: Some(matcher::string_matcher::MatchPattern::Exact(s.into())),
        ignore_case: false,
    }
}

fn socket(ip: &str, port: u32) -> Option<core::Address> {
    Some(core::Address {
        address: Some(core::address::Address::SocketAddress(core::SocketAddress {
            address: ip.into(),
            port_specifier: Some(core::socket_address::PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    })
}

fn ads() -> Option<core::ConfigSource> {
    Some(core::ConfigSource {
        config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(core::AggregatedConfigSource {})),
        resource_api_version: core::ApiVersion::V3 as i32,
        ..Default::default()
    })
}

fn sds(name: &str) -> tls::SdsSecretConfig {
    tls::SdsSecretConfig {
        name: name.into(),
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

const SDS_JSON: &str = r#"{"apiConfigSource": {"apiType": "GRPC", "transportApiVersion": "V3",
    "setNodeOnFirstMessageOnly": true, "grpcServices": [{"envoyGrpc": {"clusterName": "sds-grpc"}}]},
    "resourceApiVersion": "V3"}"#;

fn node() -> core::Node {
    let labels =
        Struct { fields: BTreeMap::from([("app".into(), string("productpage")), ("version".into(), string("v1"))]) };
    core::Node {
        id: "sidecar~10.244.1.10~productpage-v1-7d4b.bookinfo~bookinfo.svc.cluster.local".into(),
        cluster: "productpage.bookinfo".into(),
        metadata: Some(Struct {
            fields: BTreeMap::from([
                ("NAMESPACE".into(), string("bookinfo")),
                ("ISTIO_VERSION".into(), string("1.28.0")),
                ("LABELS".into(), Value { kind: Some(Kind::StructValue(labels)) }),
                ("ISTIO_PROXY".into(), Value { kind: Some(Kind::BoolValue(true)) }),
                ("CONCURRENCY".into(), Value { kind: Some(Kind::NumberValue(2.0)) }),
            ]),
        }),
        locality: Some(core::Locality {
            region: "us-east1".into(),
            zone: "us-east1-b".into(),
            sub_zone: "rack-1".into(),
        }),
        user_agent_name: "envoy".into(),
        user_agent_version_type: Some(core::node::UserAgentVersionType::UserAgentVersion("1.36.0".into())),
        client_features: vec!["envoy.lb.does_not_support_overprovisioning".into()],
        ..Default::default()
    }
}

const NODE_JSON: &str = r#"{"id": "sidecar~10.244.1.10~productpage-v1-7d4b.bookinfo~bookinfo.svc.cluster.local",
    "cluster": "productpage.bookinfo",
    "metadata": {"NAMESPACE": "bookinfo", "ISTIO_VERSION": "1.28.0", "LABELS": {"app": "productpage", "version": "v1"},
                 "ISTIO_PROXY": true, "CONCURRENCY": 2},
    "locality": {"region": "us-east1", "zone": "us-east1-b", "subZone": "rack-1"},
    "userAgentName": "envoy", "userAgentVersion": "1.36.0",
    "clientFeatures": ["envoy.lb.does_not_support_overprovisioning"]}"#;

fn upstream_tls() -> tls::UpstreamTlsContext {
    tls::UpstreamTlsContext {
        common_tls_context: Some(tls::CommonTlsContext {
            tls_certificate_sds_secret_configs: vec![sds("default")],
            alpn_protocols: vec!["istio-peer-exchange".into(), "istio".into()],
            validation_context_type: Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(
                tls::common_tls_context::CombinedCertificateValidationContext {
                    default_validation_context: Some(tls::CertificateValidationContext {
                        match_subject_alt_names: vec![exact("spiffe://cluster.local/ns/bookinfo/sa/bookinfo-reviews")],
                        ..Default::default()
                    }),
                    validation_context_sds_secret_config: Some(sds("ROOTCA")),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }),
        sni: "outbound_.9080_.v1_.reviews.bookinfo.svc.cluster.local".into(),
        ..Default::default()
    }
}

fn cluster() -> cluster::Cluster {
    let upstream_http = istiod_proto::envoy::extensions::upstreams::http::v3::HttpProtocolOptions {
        common_http_protocol_options: Some(core::HttpProtocolOptions {
            idle_timeout: secs(3600),
            max_requests_per_connection: Some(100),
            ..Default::default()
        }),
        upstream_protocol_options: Some(
            istiod_proto::envoy::extensions::upstreams::http::v3::http_protocol_options::UpstreamProtocolOptions::UseDownstreamProtocolConfig(
                istiod_proto::envoy::extensions::upstreams::http::v3::http_protocol_options::UseDownstreamHttpConfig {
                    http_protocol_options: Some(core::Http1ProtocolOptions::default()),
                    http2_protocol_options: Some(core::Http2ProtocolOptions {
                        max_concurrent_streams: Some(1024),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ),
        ),
        ..Default::default()
    };
    cluster::Cluster {
        name: "outbound|9080|v1|reviews.bookinfo.svc.cluster.local".into(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster::cluster::EdsClusterConfig {
            eds_config: ads(),
            service_name: "outbound|9080|v1|reviews.bookinfo.svc.cluster.local".into(),
        }),
        connect_timeout: secs(10),
        lb_policy: cluster::cluster::LbPolicy::LeastRequest as i32,
        circuit_breakers: Some(cluster::CircuitBreakers {
            thresholds: vec![cluster::circuit_breakers::Thresholds {
                max_connections: Some(4_294_967_295),
                max_pending_requests: Some(1024),
                max_retries: Some(4_294_967_295),
                track_remaining: true,
                ..Default::default()
            }],
            ..Default::default()
        }),
        outlier_detection: Some(cluster::OutlierDetection {
            consecutive_5xx: Some(5),
            interval: secs(30),
            base_ejection_time: secs(60),
            max_ejection_percent: Some(100),
            ..Default::default()
        }),
        common_lb_config: Some(cluster::cluster::CommonLbConfig {
            healthy_panic_threshold: Some(types::Percent { value: 0.0 }),
            locality_config_specifier: Some(
                cluster::cluster::common_lb_config::LocalityConfigSpecifier::LocalityWeightedLbConfig(
                    Default::default(),
                ),
            ),
            ..Default::default()
        }),
        transport_socket: Some(core::TransportSocket {
            name: "envoy.transport_sockets.tls".into(),
            config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(&upstream_tls()))),
        }),
        typed_extension_protocol_options: BTreeMap::from([(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".into(),
            any(&upstream_http),
        )]),
        metadata: Some(core::Metadata {
            filter_metadata: BTreeMap::from([(
                "istio".into(),
                Struct {
                    fields: BTreeMap::from([
                        ("default_original_port".into(), Value { kind: Some(Kind::NumberValue(9080.0)) }),
                        ("subset".into(), string("v1")),
                    ]),
                },
            )]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn cluster_json() -> String {
    format!(
        r#"{{"name": "outbound|9080|v1|reviews.bookinfo.svc.cluster.local", "type": "EDS",
        "edsClusterConfig": {{"edsConfig": {{"ads": {{}}, "resourceApiVersion": "V3"}},
                              "serviceName": "outbound|9080|v1|reviews.bookinfo.svc.cluster.local"}},
        "connectTimeout": "10s", "lbPolicy": "LEAST_REQUEST",
        "circuitBreakers": {{"thresholds": [{{"maxConnections": 4294967295, "maxPendingRequests": 1024,
                                              "maxRetries": 4294967295, "trackRemaining": true}}]}},
        "outlierDetection": {{"consecutive5xx": 5, "interval": "30s", "baseEjectionTime": "60s", "maxEjectionPercent": 100}},
        "commonLbConfig": {{"healthyPanicThreshold": {{}}, "localityWeightedLbConfig": {{}}}},
        "transportSocket": {{"name": "envoy.transport_sockets.tls", "typedConfig": {{
            "@type": "{tls}",
            "commonTlsContext": {{
                "tlsCertificateSdsSecretConfigs": [{{"name": "default", "sdsConfig": {SDS_JSON}}}],
                "alpnProtocols": ["istio-peer-exchange", "istio"],
                "combinedValidationContext": {{
                    "defaultValidationContext": {{"matchSubjectAltNames": [{{"exact": "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-reviews"}}]}},
                    "validationContextSdsSecretConfig": {{"name": "ROOTCA", "sdsConfig": {SDS_JSON}}}}}}},
            "sni": "outbound_.9080_.v1_.reviews.bookinfo.svc.cluster.local"}}}},
        "typedExtensionProtocolOptions": {{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {{
            "@type": "{http}",
            "commonHttpProtocolOptions": {{"idleTimeout": "3600s", "maxRequestsPerConnection": 100}},
            "useDownstreamProtocolConfig": {{"httpProtocolOptions": {{}}, "http2ProtocolOptions": {{"maxConcurrentStreams": 1024}}}}}}}},
        "metadata": {{"filterMetadata": {{"istio": {{"default_original_port": 9080, "subset": "v1"}}}}}}}}"#,
        tls = type_url::UPSTREAM_TLS_CONTEXT,
        http = type_url::HTTP_PROTOCOL_OPTIONS,
    )
}

fn load_assignment() -> endpoint::ClusterLoadAssignment {
    let lb = |ip: &str, health: core::HealthStatus| endpoint::LbEndpoint {
        host_identifier: Some(endpoint::lb_endpoint::HostIdentifier::Endpoint(endpoint::Endpoint {
            address: socket(ip, 9080),
            ..Default::default()
        })),
        health_status: health as i32,
        load_balancing_weight: Some(1),
        metadata: Some(core::Metadata {
            filter_metadata: BTreeMap::from([(
                "envoy.transport_socket_match".into(),
                Struct { fields: BTreeMap::from([("tlsMode".into(), string("istio"))]) },
            )]),
            ..Default::default()
        }),
    };
    endpoint::ClusterLoadAssignment {
        cluster_name: "outbound|9080||reviews.bookinfo.svc.cluster.local".into(),
        endpoints: vec![
            endpoint::LocalityLbEndpoints {
                locality: Some(core::Locality {
                    region: "us-east1".into(),
                    zone: "us-east1-b".into(),
                    sub_zone: String::new(),
                }),
                lb_endpoints: vec![
                    lb("10.244.1.12", core::HealthStatus::Healthy),
                    lb("10.244.1.13", core::HealthStatus::Draining),
                ],
                load_balancing_weight: Some(2),
                priority: 1,
                ..Default::default()
            },
            endpoint::LocalityLbEndpoints {
                locality: Some(core::Locality::default()),
                lb_endpoints: vec![lb("10.244.2.10", core::HealthStatus::Unhealthy)],
                load_balancing_weight: Some(1),
                ..Default::default()
            },
        ],
        policy: Some(endpoint::cluster_load_assignment::Policy {
            overprovisioning_factor: Some(140),
            ..Default::default()
        }),
        ..Default::default()
    }
}

const LOAD_ASSIGNMENT_JSON: &str = r#"{"clusterName": "outbound|9080||reviews.bookinfo.svc.cluster.local",
  "endpoints": [
    {"locality": {"region": "us-east1", "zone": "us-east1-b"}, "loadBalancingWeight": 2, "priority": 1,
     "lbEndpoints": [
       {"endpoint": {"address": {"socketAddress": {"address": "10.244.1.12", "portValue": 9080}}}, "healthStatus": "HEALTHY",
        "loadBalancingWeight": 1, "metadata": {"filterMetadata": {"envoy.transport_socket_match": {"tlsMode": "istio"}}}},
       {"endpoint": {"address": {"socketAddress": {"address": "10.244.1.13", "portValue": 9080}}}, "healthStatus": "DRAINING",
        "loadBalancingWeight": 1, "metadata": {"filterMetadata": {"envoy.transport_socket_match": {"tlsMode": "istio"}}}}]},
    {"locality": {}, "loadBalancingWeight": 1,
     "lbEndpoints": [
       {"endpoint": {"address": {"socketAddress": {"address": "10.244.2.10", "portValue": 9080}}}, "healthStatus": "UNHEALTHY",
        "loadBalancingWeight": 1, "metadata": {"filterMetadata": {"envoy.transport_socket_match": {"tlsMode": "istio"}}}}]}],
  "policy": {"overprovisioningFactor": 140}}"#;

fn http_listener() -> listener::Listener {
    let fault = fault::v3::HttpFault {
        delay: Some(common_fault::FaultDelay {
            fault_delay_secifier: Some(common_fault::fault_delay::FaultDelaySecifier::FixedDelay(Duration {
                seconds: 7,
                nanos: 0,
            })),
            percentage: Some(types::FractionalPercent {
                numerator: 100_000,
                denominator: types::fractional_percent::DenominatorType::Million as i32,
            }),
        }),
        ..Default::default()
    };
    let manager = hcm::HttpConnectionManager {
        stat_prefix: "outbound_0.0.0.0_9080".into(),
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::Rds(hcm::Rds {
            config_source: ads(),
            route_config_name: "9080".into(),
        })),
        http_filters: vec![
            hcm::HttpFilter {
                name: "envoy.filters.http.fault".into(),
                config_type: Some(hcm::http_filter::ConfigType::TypedConfig(any(&fault))),
                ..Default::default()
            },
            hcm::HttpFilter {
                name: "envoy.filters.http.router".into(),
                config_type: Some(hcm::http_filter::ConfigType::TypedConfig(any(&router::v3::Router {
                    suppress_envoy_headers: true,
                    ..Default::default()
                }))),
                ..Default::default()
            },
        ],
        use_remote_address: Some(false),
        normalize_path: Some(true),
        stream_idle_timeout: secs(0),
        ..Default::default()
    };
    listener::Listener {
        name: "0.0.0.0_9080".into(),
        address: socket("0.0.0.0", 9080),
        filter_chains: vec![listener::FilterChain {
            filter_chain_match: Some(listener::FilterChainMatch {
                destination_port: Some(9080),
                transport_protocol: "raw_buffer".into(),
                application_protocols: vec!["http/1.1".into(), "h2c".into()],
                ..Default::default()
            }),
            filters: vec![listener::Filter {
                name: "envoy.filters.network.http_connection_manager".into(),
                config_type: Some(listener::filter::ConfigType::TypedConfig(any(&manager))),
            }],
            ..Default::default()
        }],
        listener_filters: vec![listener::ListenerFilter {
            name: "envoy.filters.listener.tls_inspector".into(),
            config_type: Some(listener::listener_filter::ConfigType::TypedConfig(any(&TlsInspector::default()))),
            ..Default::default()
        }],
        traffic_direction: core::TrafficDirection::Outbound as i32,
        bind_to_port: Some(false),
        ..Default::default()
    }
}

fn http_listener_json() -> String {
    format!(
        r#"{{"name": "0.0.0.0_9080", "address": {{"socketAddress": {{"address": "0.0.0.0", "portValue": 9080}}}},
        "filterChains": [{{
            "filterChainMatch": {{"destinationPort": 9080, "transportProtocol": "raw_buffer", "applicationProtocols": ["http/1.1", "h2c"]}},
            "filters": [{{"name": "envoy.filters.network.http_connection_manager", "typedConfig": {{
                "@type": "{hcm}",
                "statPrefix": "outbound_0.0.0.0_9080",
                "rds": {{"configSource": {{"ads": {{}}, "resourceApiVersion": "V3"}}, "routeConfigName": "9080"}},
                "httpFilters": [
                    {{"name": "envoy.filters.http.fault", "typedConfig": {{"@type": "{fault}",
                        "delay": {{"fixedDelay": "7s", "percentage": {{"numerator": 100000, "denominator": "MILLION"}}}}}}}},
                    {{"name": "envoy.filters.http.router", "typedConfig": {{"@type": "{router}", "suppressEnvoyHeaders": true}}}}],
                "useRemoteAddress": false, "normalizePath": true, "streamIdleTimeout": "0s"}}}}]}}],
        "listenerFilters": [{{"name": "envoy.filters.listener.tls_inspector", "typedConfig": {{"@type": "{tlsi}"}}}}],
        "trafficDirection": "OUTBOUND", "bindToPort": false}}"#,
        hcm = type_url::HTTP_CONNECTION_MANAGER,
        fault = type_url::HTTP_FAULT,
        router = type_url::ROUTER,
        tlsi = type_url::TLS_INSPECTOR,
    )
}

fn route_config() -> route::RouteConfiguration {
    let weighted = |name: &str, w: u32| route::weighted_cluster::ClusterWeight {
        name: name.into(),
        weight: Some(w),
        ..Default::default()
    };
    route::RouteConfiguration {
        name: "9080".into(),
        virtual_hosts: vec![route::VirtualHost {
            name: "reviews.bookinfo.svc.cluster.local:9080".into(),
            domains: vec![
                "reviews.bookinfo.svc.cluster.local".into(),
                "reviews".into(),
                "reviews.bookinfo".into(),
                "10.96.10.12".into(),
            ],
            routes: vec![
                route::Route {
                    name: "jason".into(),
                    r#match: Some(route::RouteMatch {
                        path_specifier: Some(route::route_match::PathSpecifier::Prefix("/".into())),
                        case_sensitive: Some(true),
                        headers: vec![route::HeaderMatcher {
                            name: "end-user".into(),
                            header_match_specifier: Some(route::header_matcher::HeaderMatchSpecifier::StringMatch(
                                exact("jason"),
                            )),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                    action: Some(route::route::Action::Route(route::RouteAction {
                        cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(
                            "outbound|9080|v2|reviews.bookinfo.svc.cluster.local".into(),
                        )),
                        timeout: secs(10),
                        retry_policy: Some(route::RetryPolicy {
                            retry_on: "5xx".into(),
                            num_retries: Some(3),
                            per_try_timeout: secs(2),
                            host_selection_retry_max_attempts: 5,
                            ..Default::default()
                        }),
                        ..Default::default()
                    })),
                    request_headers_to_add: vec![core::HeaderValueOption {
                        header: Some(core::HeaderValue {
                            key: "x-served-by".into(),
                            value: "istiod-rs".into(),
                            ..Default::default()
                        }),
                        append_action: core::header_value_option::HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                route::Route {
                    r#match: Some(route::RouteMatch {
                        path_specifier: Some(route::route_match::PathSpecifier::SafeRegex(matcher::RegexMatcher {
                            regex: "/api/v[0-9]+/.*".into(),
                        })),
                        ..Default::default()
                    }),
                    action: Some(route::route::Action::Route(route::RouteAction {
                        cluster_specifier: Some(route::route_action::ClusterSpecifier::WeightedClusters(
                            route::WeightedCluster {
                                clusters: vec![
                                    weighted("outbound|9080|v1|reviews.bookinfo.svc.cluster.local", 50),
                                    weighted("outbound|9080|v2|reviews.bookinfo.svc.cluster.local", 30),
                                    weighted("outbound|9080|v3|reviews.bookinfo.svc.cluster.local", 20),
                                ],
                                ..Default::default()
                            },
                        )),
                        prefix_rewrite: "/".into(),
                        ..Default::default()
                    })),
                    ..Default::default()
                },
                route::Route {
                    r#match: Some(route::RouteMatch {
                        path_specifier: Some(route::route_match::PathSpecifier::Path("/old".into())),
                        ..Default::default()
                    }),
                    action: Some(route::route::Action::Redirect(route::RedirectAction {
                        path_rewrite_specifier: Some(route::redirect_action::PathRewriteSpecifier::PathRedirect(
                            "/new".into(),
                        )),
                        response_code: route::redirect_action::RedirectResponseCode::PermanentRedirect as i32,
                        ..Default::default()
                    })),
                    ..Default::default()
                },
                route::Route {
                    r#match: Some(route::RouteMatch {
                        path_specifier: Some(route::route_match::PathSpecifier::Prefix("/health".into())),
                        ..Default::default()
                    }),
                    action: Some(route::route::Action::DirectResponse(route::DirectResponseAction {
                        status: 200,
                        body: Some(core::DataSource {
                            specifier: Some(core::data_source::Specifier::InlineString("ok".into())),
                            ..Default::default()
                        }),
                    })),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        validate_clusters: Some(false),
        ..Default::default()
    }
}

const ROUTE_CONFIG_JSON: &str = r#"{"name": "9080", "validateClusters": false, "virtualHosts": [{
  "name": "reviews.bookinfo.svc.cluster.local:9080",
  "domains": ["reviews.bookinfo.svc.cluster.local", "reviews", "reviews.bookinfo", "10.96.10.12"],
  "routes": [
    {"name": "jason",
     "match": {"prefix": "/", "caseSensitive": true, "headers": [{"name": "end-user", "stringMatch": {"exact": "jason"}}]},
     "route": {"cluster": "outbound|9080|v2|reviews.bookinfo.svc.cluster.local", "timeout": "10s",
               "retryPolicy": {"retryOn": "5xx", "numRetries": 3, "perTryTimeout": "2s", "hostSelectionRetryMaxAttempts": "5"}},
     "requestHeadersToAdd": [{"header": {"key": "x-served-by", "value": "istiod-rs"}, "appendAction": "OVERWRITE_IF_EXISTS_OR_ADD"}]},
    {"match": {"safeRegex": {"regex": "/api/v[0-9]+/.*"}},
     "route": {"weightedClusters": {"clusters": [
        {"name": "outbound|9080|v1|reviews.bookinfo.svc.cluster.local", "weight": 50},
        {"name": "outbound|9080|v2|reviews.bookinfo.svc.cluster.local", "weight": 30},
        {"name": "outbound|9080|v3|reviews.bookinfo.svc.cluster.local", "weight": 20}]},
        "prefixRewrite": "/"}},
    {"match": {"path": "/old"}, "redirect": {"pathRedirect": "/new", "responseCode": "PERMANENT_REDIRECT"}},
    {"match": {"prefix": "/health"}, "directResponse": {"status": 200, "body": {"inlineString": "ok"}}}]}]}"#;

fn rbac_filter() -> http_rbac::v3::Rbac {
    let header = |name: &str, value: &str| rbac::Permission {
        rule: Some(rbac::permission::Rule::Header(route::HeaderMatcher {
            name: name.into(),
            header_match_specifier: Some(route::header_matcher::HeaderMatchSpecifier::StringMatch(exact(value))),
            ..Default::default()
        })),
    };
    rbac_with(rbac::Policy {
        permissions: vec![rbac::Permission {
            rule: Some(rbac::permission::Rule::AndRules(rbac::permission::Set {
                rules: vec![header(":method", "GET")],
            })),
        }],
        principals: vec![rbac::Principal {
            identifier: Some(rbac::principal::Identifier::AndIds(rbac::principal::Set {
                ids: vec![rbac::Principal {
                    identifier: Some(rbac::principal::Identifier::Authenticated(rbac::principal::Authenticated {
                        principal_name: Some(exact("spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage")),
                    })),
                }],
            })),
        }],
    })
}

fn rbac_with(policy: rbac::Policy) -> http_rbac::v3::Rbac {
    http_rbac::v3::Rbac {
        rules: Some(rbac::Rbac {
            action: rbac::rbac::Action::Allow as i32,
            policies: BTreeMap::from([("ns[bookinfo]-policy[details-viewer]-rule[0]".into(), policy)]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

const RBAC_JSON: &str = r#"{"rules": {"action": "ALLOW", "policies": {"ns[bookinfo]-policy[details-viewer]-rule[0]": {
  "permissions": [{"andRules": {"rules": [{"header": {"name": ":method", "stringMatch": {"exact": "GET"}}}]}}],
  "principals": [{"andIds": {"ids": [{"authenticated": {"principalName": {"exact": "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage"}}}]}}]}}}}"#;

type Check = Box<dyn Fn(&[u8])>;

struct Case {
    name: &'static str,
    type_name: String,
    ours: Vec<u8>,
    json: String,
    /// Decodes Python's bytes and checks them against the value we built.
    check: Check,
}

/// Python encodes the inside of every `Any` itself, in field-number order,
/// which is not always declaration order (prost's), so `Any` bytes are
/// compared after decoding and re-encoding them with our types.
fn canon_any(a: &mut Any) {
    fn re<M: Message + Default>(a: &mut Any, f: impl FnOnce(&mut M)) {
        let mut m = M::decode(a.value.as_slice()).unwrap_or_else(|e| panic!("{}: {e}", a.type_url));
        f(&mut m);
        a.value = m.encode_to_vec();
    }
    match a.type_url.as_str() {
        type_url::CLUSTER => re(a, |c: &mut cluster::Cluster| {
            if let Some(core::transport_socket::ConfigType::TypedConfig(t)) =
                c.transport_socket.as_mut().and_then(|t| t.config_type.as_mut())
            {
                canon_any(t);
            }
            c.typed_extension_protocol_options.values_mut().for_each(canon_any);
        }),
        type_url::LISTENER => re(a, |l: &mut listener::Listener| {
            for f in l.filter_chains.iter_mut().flat_map(|c| c.filters.iter_mut()) {
                let listener::filter::ConfigType::TypedConfig(t) = f.config_type.as_mut().unwrap() else { continue };
                canon_any(t);
            }
            for f in &mut l.listener_filters {
                if let Some(listener::listener_filter::ConfigType::TypedConfig(t)) = f.config_type.as_mut() {
                    canon_any(t);
                }
            }
        }),
        type_url::HTTP_CONNECTION_MANAGER => re(a, |h: &mut hcm::HttpConnectionManager| {
            for f in &mut h.http_filters {
                if let Some(hcm::http_filter::ConfigType::TypedConfig(t)) = f.config_type.as_mut() {
                    canon_any(t);
                }
            }
        }),
        type_url::ROUTE_CONFIGURATION => re(a, |_: &mut route::RouteConfiguration| ()),
        type_url::CLUSTER_LOAD_ASSIGNMENT => re(a, |_: &mut endpoint::ClusterLoadAssignment| ()),
        type_url::UPSTREAM_TLS_CONTEXT => re(a, |_: &mut tls::UpstreamTlsContext| ()),
        type_url::HTTP_PROTOCOL_OPTIONS => {
            re(a, |_: &mut istiod_proto::envoy::extensions::upstreams::http::v3::HttpProtocolOptions| ())
        }
        type_url::HTTP_FAULT => re(a, |_: &mut fault::v3::HttpFault| ()),
        type_url::ROUTER => re(a, |_: &mut router::v3::Router| ()),
        type_url::TLS_INSPECTOR => re(a, |_: &mut TlsInspector| ()),
        type_url::TCP_PROXY => re(a, |_: &mut tcp::TcpProxy| ()),
        type_url::SECRET => re(a, |_: &mut tls::Secret| ()),
        other => panic!("canon_any: add {other}"),
    }
}

fn case<M>(name: &'static str, value: M, json: impl Into<String>, canon: fn(&mut M)) -> Case
where
    M: Message + Name + Default + PartialEq + std::fmt::Debug + Clone + 'static,
{
    let ours = value.encode_to_vec();
    let mut want = value;
    canon(&mut want);
    Case {
        name,
        type_name: M::full_name(),
        ours,
        json: json.into(),
        check: Box::new(move |bytes| {
            let mut got = M::decode(bytes).unwrap_or_else(|e| panic!("{name}: Python's bytes do not decode: {e}"));
            canon(&mut got);
            assert_eq!(got, want, "{name}: Python's encoding decodes to a different value");
        }),
    }
}

fn no_any<M>(_: &mut M) {}

fn cases() -> Vec<Case> {
    let request = discovery::DiscoveryRequest {
        version_info: "2026-11-29T10:00:00Z/7".into(),
        node: Some(node()),
        resource_names: vec!["outbound|9080||reviews.bookinfo.svc.cluster.local".into()],
        type_url: type_url::CLUSTER_LOAD_ASSIGNMENT.into(),
        response_nonce: "c0ffee-1".into(),
        error_detail: Some(Status { code: 3, message: "cluster not found".into(), details: vec![] }),
        ..Default::default()
    };
    let request_json = format!(
        r#"{{"versionInfo": "2026-11-29T10:00:00Z/7", "node": {NODE_JSON},
        "resourceNames": ["outbound|9080||reviews.bookinfo.svc.cluster.local"],
        "typeUrl": "{}", "responseNonce": "c0ffee-1",
        "errorDetail": {{"code": 3, "message": "cluster not found"}}}}"#,
        type_url::CLUSTER_LOAD_ASSIGNMENT
    );
    let response = discovery::DiscoveryResponse {
        version_info: "7".into(),
        resources: vec![
            any(&cluster()),
            any(&cluster::Cluster { name: "BlackHoleCluster".into(), ..Default::default() }),
        ],
        type_url: type_url::CLUSTER.into(),
        nonce: "n-42".into(),
        control_plane: Some(core::ControlPlane { identifier: "istiod-rs-0".into() }),
        ..Default::default()
    };
    let cluster_json = cluster_json();
    let response_json = format!(
        r#"{{"versionInfo": "7", "typeUrl": "{url}", "nonce": "n-42", "controlPlane": {{"identifier": "istiod-rs-0"}},
        "resources": [{{"@type": "{url}", {}, {{"@type": "{url}", "name": "BlackHoleCluster"}}]}}"#,
        &cluster_json.trim_start()[1..],
        url = type_url::CLUSTER,
    );
    let delta_request = discovery::DeltaDiscoveryRequest {
        node: Some(node()),
        type_url: type_url::CLUSTER.into(),
        resource_names_subscribe: vec!["*".into()],
        resource_names_unsubscribe: vec!["outbound|9080|v9|reviews.bookinfo.svc.cluster.local".into()],
        initial_resource_versions: BTreeMap::from([
            ("outbound|9080||reviews.bookinfo.svc.cluster.local".into(), "v3".into()),
            ("BlackHoleCluster".into(), "v1".into()),
        ]),
        response_nonce: "d-1".into(),
        ..Default::default()
    };
    let delta_request_json = format!(
        r#"{{"node": {NODE_JSON}, "typeUrl": "{}", "resourceNamesSubscribe": ["*"],
        "resourceNamesUnsubscribe": ["outbound|9080|v9|reviews.bookinfo.svc.cluster.local"],
        "initialResourceVersions": {{"outbound|9080||reviews.bookinfo.svc.cluster.local": "v3", "BlackHoleCluster": "v1"}},
        "responseNonce": "d-1"}}"#,
        type_url::CLUSTER
    );
    let delta_response = discovery::DeltaDiscoveryResponse {
        system_version_info: "8".into(),
        resources: vec![discovery::Resource {
            name: "9080".into(),
            version: "r8".into(),
            resource: Some(any(&route_config())),
            ..Default::default()
        }],
        type_url: type_url::ROUTE_CONFIGURATION.into(),
        removed_resources: vec!["15010".into()],
        nonce: "d-2".into(),
        ..Default::default()
    };
    let delta_response_json = format!(
        r#"{{"systemVersionInfo": "8", "typeUrl": "{url}", "removedResources": ["15010"], "nonce": "d-2",
        "resources": [{{"name": "9080", "version": "r8", "resource": {{"@type": "{url}", {}}}]}}"#,
        &ROUTE_CONFIG_JSON.trim_start()[1..],
        url = type_url::ROUTE_CONFIGURATION,
    );
    let secret = tls::Secret {
        name: "default".into(),
        r#type: Some(tls::secret::Type::TlsCertificate(tls::TlsCertificate {
            certificate_chain: Some(core::DataSource {
                specifier: Some(core::data_source::Specifier::InlineBytes(b"-----BEGIN CERTIFICATE-----\n".to_vec())),
                ..Default::default()
            }),
            private_key: Some(core::DataSource {
                specifier: Some(core::data_source::Specifier::InlineBytes(vec![0, 1, 2, 255])),
                ..Default::default()
            }),
            ..Default::default()
        })),
    };
    let secret_json = r#"{"name": "default", "tlsCertificate": {
        "certificateChain": {"inlineBytes": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="},
        "privateKey": {"inlineBytes": "AAEC/w=="}}}"#;
    let tcp_proxy = tcp::TcpProxy {
        stat_prefix: "outbound|27017||mongodb.bookinfo.svc.cluster.local".into(),
        cluster_specifier: Some(tcp::tcp_proxy::ClusterSpecifier::Cluster(
            "outbound|27017||mongodb.bookinfo.svc.cluster.local".into(),
        )),
        idle_timeout: secs(3600),
        max_connect_attempts: Some(2),
        ..Default::default()
    };
    let tcp_proxy_json = r#"{"statPrefix": "outbound|27017||mongodb.bookinfo.svc.cluster.local",
        "cluster": "outbound|27017||mongodb.bookinfo.svc.cluster.local", "idleTimeout": "3600s", "maxConnectAttempts": 2}"#;

    vec![
        case("discovery_request", request, request_json, no_any),
        case("discovery_response", response, response_json, |r: &mut discovery::DiscoveryResponse| {
            r.resources.iter_mut().for_each(canon_any)
        }),
        case("delta_request", delta_request, delta_request_json, no_any),
        case("delta_response", delta_response, delta_response_json, |r: &mut discovery::DeltaDiscoveryResponse| {
            r.resources.iter_mut().filter_map(|r| r.resource.as_mut()).for_each(canon_any)
        }),
        case("cluster", cluster(), cluster_json, |c: &mut cluster::Cluster| {
            let mut a = any(c);
            canon_any(&mut a);
            *c = cluster::Cluster::decode(a.value.as_slice()).unwrap();
        }),
        case("load_assignment", load_assignment(), LOAD_ASSIGNMENT_JSON, no_any),
        case("listener", http_listener(), http_listener_json(), |l: &mut listener::Listener| {
            let mut a = any(l);
            canon_any(&mut a);
            *l = listener::Listener::decode(a.value.as_slice()).unwrap();
        }),
        case("route_config", route_config(), ROUTE_CONFIG_JSON, no_any),
        case("secret", secret, secret_json, no_any),
        case("http_rbac", rbac_filter(), RBAC_JSON, no_any),
        case("tcp_proxy", tcp_proxy, tcp_proxy_json, no_any),
    ]
}

fn run(cases: &[Case]) -> (std::process::Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut manifest = String::from("[");
    for (i, c) in cases.iter().enumerate() {
        std::fs::write(dir.path().join(format!("{}.ours.bin", c.name)), &c.ours).unwrap();
        if i > 0 {
            manifest.push(',');
        }
        manifest.push_str(&format!(r#"{{"name": "{}", "type": "{}", "json": {}}}"#, c.name, c.type_name, c.json));
    }
    manifest.push(']');
    std::fs::write(dir.path().join("cases.json"), manifest).unwrap();
    let out = python::run("roundtrip.py", &[dir.path().as_os_str()]);
    (out, dir)
}

#[test]
fn python_decodes_our_bytes_and_we_decode_pythons() {
    let cases = cases();
    let (out, dir) = run(&cases);
    let text = python::text(&out);
    assert!(out.status.success(), "upstream decodes our bytes differently:\n{text}");
    assert!(text.contains(&format!("{} passed, 0 failed", cases.len())), "{text}");
    for c in &cases {
        let bytes = std::fs::read(dir.path().join(format!("{}.py.bin", c.name))).unwrap();
        (c.check)(&bytes);
    }
}

/// The comparison is not vacuous: a value that differs from its JSON by one
/// field is reported.
#[test]
fn a_wrong_value_is_reported() {
    let mut la = load_assignment();
    la.endpoints[0].lb_endpoints[1].health_status = core::HealthStatus::Healthy as i32;
    let cases = vec![case("wrong_health", la, LOAD_ASSIGNMENT_JSON, no_any)];
    let (out, _dir) = run(&cases);
    let text = python::text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("MISMATCH wrong_health"), "{text}");
}

#[test]
fn prost_types_well_known_types_are_used() {
    // Duration and Struct come from prost-types, shared with every crate.
    let d: prost_types::Duration = secs(1).unwrap();
    assert_eq!(d.seconds, 1);
}
