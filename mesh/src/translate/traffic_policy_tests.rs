//! Upstream cases (pilot/pkg/networking/core/cluster_builder_test.go and
//! cluster_test.go at istio/istio 86c9f01), each named after its test.

use super::*;
use crate::meshconfig::MeshSettings;
use crate::model::Protocol;
use istiod_config::istio::networking::{RetryBudget, TcpKeepalive};
use istiod_proto::prost::Message;
use upstream_http::http_protocol_options::{UpstreamProtocolOptions as U, explicit_http_config::ProtocolConfig};

fn pool(yaml: &str) -> ConnectionPoolSettings {
    serde_yaml_ng::from_str(yaml).expect("connection pool")
}

fn secs(s: i64) -> Option<Duration> {
    Some(Duration { seconds: s, nanos: 0 })
}

/// The HttpProtocolOptions a cluster carries, if any.
fn options(c: &Cluster) -> Option<upstream_http::HttpProtocolOptions> {
    let any = c.typed_extension_protocol_options.get("envoy.extensions.upstreams.http.v3.HttpProtocolOptions")?;
    Some(upstream_http::HttpProtocolOptions::decode(any.value.as_slice()).expect("options"))
}

fn built(
    mesh: &MeshSettings,
    protocol: Protocol,
    sniffs: bool,
    cp: Option<&ConnectionPoolSettings>,
) -> (Cluster, bool) {
    let mut c = Cluster { name: "foo".into(), ..Default::default() };
    let h2 = connection(&mut c, mesh, Upstream { protocol, sniffs, outbound: true }, cp, None);
    (c, h2)
}

/// `TestShouldH2Upgrade`.
#[test]
fn upstream_should_h2_upgrade() {
    let http = Protocol::Http;
    let auto = Protocol::Unsupported;
    let dr = |p: &str| pool(&format!("http: {{h2UpgradePolicy: {p}}}"));
    let client = pool("http: {useClientProtocol: true}");
    let cases: [(&str, Protocol, bool, Option<ConnectionPoolSettings>, bool); 7] = [
        ("mesh upgrade - dr default", http, true, Some(dr("DEFAULT")), true),
        ("mesh default - dr upgrade non http port", auto, false, Some(dr("UPGRADE")), true),
        ("mesh no_upgrade - dr default", http, false, Some(dr("DEFAULT")), false),
        ("mesh no_upgrade - dr upgrade", http, false, Some(dr("UPGRADE")), true),
        ("mesh upgrade - dr no_upgrade", http, true, Some(dr("DO_NOT_UPGRADE")), false),
        ("mesh upgrade - dr useClientProtocol", http, true, Some(client), false),
        ("non-http", auto, true, Some(dr("DEFAULT")), false),
    ];
    for (name, protocol, mesh_upgrade, cp, want) in cases {
        assert_eq!(should_h2_upgrade(protocol, mesh_upgrade, cp.as_ref()), want, "{name}");
    }
}

/// `TestIsHttp2Cluster`: only explicit HTTP/2 options make an HTTP/2
/// cluster (and so the `h2` ALPN); the downstream's protocol does not.
#[test]
fn upstream_is_http2_cluster() {
    let mesh = MeshSettings::default();
    let (plain, h2) = built(&mesh, Protocol::Http, true, None);
    assert!(!h2 && options(&plain).is_none(), "with no h2 options");
    let (grpc, h2) = built(&mesh, Protocol::Grpc, true, None);
    assert!(h2, "with h2 options");
    let Some(U::ExplicitHttpConfig(e)) = options(&grpc).and_then(|o| o.upstream_protocol_options) else {
        panic!("explicit")
    };
    assert!(matches!(e.protocol_config, Some(ProtocolConfig::Http2ProtocolOptions(_))));
    let (sniffed, h2) = built(&mesh, Protocol::Unsupported, true, None);
    assert!(!h2, "with downstream config and h2 options");
    let Some(U::UseDownstreamProtocolConfig(d)) = options(&sniffed).and_then(|o| o.upstream_protocol_options) else {
        panic!("downstream")
    };
    assert!(d.http_protocol_options.is_some() && d.http2_protocol_options.is_some());
    assert_eq!(istio_alpn(true, true), ["istio-peer-exchange", "istio", "h2"], "ALPNInMeshH2WithMxc");
    assert_eq!(istio_alpn(false, false), ["istio"], "ALPNInMesh");
}

/// `TestApplyConnectionPool` (the cases that do not depend on options
/// set before the pool is applied) and `TestBuildDefaultCluster`'s
/// defaults: no protocol options for an HTTP port without a rule, the
/// effectively unlimited circuit breakers, `track_remaining` off as
/// `DISABLE_TRACK_REMAINING_CB_METRICS` defaults.
#[test]
fn upstream_apply_connection_pool() {
    let mesh = MeshSettings::default();
    let common = |yaml: &str| {
        let (c, _) = built(&mesh, Protocol::Http, true, Some(&pool(yaml)));
        let o = options(&c).and_then(|o| o.common_http_protocol_options).expect("common options");
        (o.idle_timeout, o.max_requests_per_connection, o.max_connection_duration)
    };
    assert_eq!(common("tcp: {idleTimeout: 10s}"), (secs(10), None, None), "set TCP idle timeout");
    assert_eq!(
        common("tcp: {idleTimeout: 10s}\nhttp: {idleTimeout: 20s}"),
        (secs(20), None, None),
        "ignore TCP idle timeout when HTTP idle timeout is specified"
    );
    assert_eq!(
        common("http: {idleTimeout: 22s, maxRequestsPerConnection: 22}\ntcp: {maxConnectionDuration: 500s}"),
        (secs(22), Some(22), secs(500)),
        "update multiple fields"
    );
    let (bare, _) = built(&mesh, Protocol::Http, true, None);
    assert!(options(&bare).is_none(), "default EDS cluster");
    let t = &bare.circuit_breakers.as_ref().expect("breakers").thresholds[0];
    assert_eq!(
        (t.max_connections, t.max_pending_requests, t.max_requests, t.max_retries, t.track_remaining),
        (Some(u32::MAX), Some(u32::MAX), Some(u32::MAX), Some(u32::MAX), false)
    );
    let budget = |b: RetryBudget| {
        let mut c = Cluster::default();
        let up = Upstream { protocol: Protocol::Http, sniffs: true, outbound: true };
        connection(&mut c, &mesh, up, Some(&pool("http: {maxRequestsPerConnection: 22}")), Some(&b));
        let t = c.circuit_breakers.expect("breakers").thresholds.remove(0);
        let b = t.retry_budget.expect("budget");
        (b.budget_percent.map(|p| p.value), b.min_retry_concurrency, t.max_retries)
    };
    assert_eq!(budget(RetryBudget::default()), (Some(20.0), Some(3), Some(u32::MAX)), "default retry budget");
    let set = RetryBudget { percent: Some(0.3), min_retry_concurrency: 4, budget_interval: None };
    assert_eq!(budget(set), (Some(0.3), Some(4), Some(u32::MAX)), "retry budget");
}

/// `TestApplyTCPKeepalive` and `TestBuildSidecarClustersWithMeshWideTCPKeepalive`
/// (the latter's rule through a subset's port-level settings).
#[test]
fn upstream_tcp_keepalive() {
    let keepalive = |mesh_time: Option<&str>, cp: Option<ConnectionPoolSettings>| {
        let mesh = MeshSettings {
            tcp_keepalive: mesh_time.map(|t| TcpKeepalive { time: Some(t.into()), ..Default::default() }),
            ..MeshSettings::default()
        };
        let (c, _) = built(&mesh, Protocol::Tcp, true, cp.as_ref());
        c.upstream_connection_options.and_then(|o| o.tcp_keepalive).map(|k| (k.keepalive_time, k.keepalive_probes))
    };
    assert_eq!(keepalive(None, Some(pool("{}"))), None, "no tcp alive");
    assert_eq!(
        keepalive(None, Some(pool("tcp: {tcpKeepalive: {time: 10s}}"))),
        Some((Some(10), None)),
        "destination rule tcp alive"
    );
    assert_eq!(keepalive(Some("10s"), Some(pool("{}"))), Some((Some(10), None)), "mesh tcp alive");

    let rule = |x: &str| -> istiod_config::istio::networking::DestinationRule {
        serde_yaml_ng::from_str(&format!(
            "host: '*.example.org'\nsubsets:\n- name: foobar\n  labels: {{foo: bar}}\n  trafficPolicy:\n    \
             portLevelSettings:\n    - port: {{number: 8080}}\n      connectionPool: {{tcp: {x}}}\n"
        ))
        .expect("rule")
    };
    let through = |mesh_time: Option<&str>, x: &str| {
        let policy = effective(&rule(x), 8080, "foobar", &Default::default());
        keepalive(mesh_time, policy.connection_pool)
    };
    assert_eq!(through(None, "{}"), None, "unset");
    assert_eq!(through(Some("11s"), "{}"), Some((Some(11), None)), "mesh");
    assert_eq!(through(Some("11s"), "{tcpKeepalive: {time: 21s}}"), Some((Some(21), None)), "destination rule");
    assert_eq!(through(Some("11s"), "{tcpKeepalive: {}}"), Some((Some(11), None)), "destination rule default");
}

/// `TestCommonHttpProtocolOptions`, its outbound clusters: the rule's
/// idle timeout on each; a sniffed port's sidecar cluster speaks the
/// downstream's protocol, a router's explicit HTTP/1.1. (Its inbound rows
/// read the rule on inbound clusters, which istiod-rs does not apply.)
#[test]
fn upstream_common_http_protocol_options() {
    let mesh = MeshSettings::default();
    let cp = pool("http: {http1MaxPendingRequests: 1, idleTimeout: 15s}");
    for (name, protocol, sniffs, downstream) in [
        ("outbound|8080||*.example.org-override-sidecar", Protocol::Http, true, false),
        ("outbound|9090||*.example.org-override-sidecar", Protocol::Unsupported, true, true),
        ("outbound|8080||*.example.org-override-router", Protocol::Http, false, false),
        ("outbound|9090||*.example.org-override-router", Protocol::Unsupported, false, false),
    ] {
        let (c, _) = built(&mesh, protocol, sniffs, Some(&cp));
        let o = options(&c).expect(name);
        assert_eq!(o.common_http_protocol_options.and_then(|c| c.idle_timeout), secs(15), "{name}");
        match o.upstream_protocol_options {
            Some(U::UseDownstreamProtocolConfig(_)) => assert!(downstream, "{name}"),
            Some(U::ExplicitHttpConfig(e)) => {
                assert!(!downstream, "{name}");
                assert!(matches!(e.protocol_config, Some(ProtocolConfig::HttpProtocolOptions(_))), "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
        let t = &c.circuit_breakers.as_ref().expect(name).thresholds[0];
        assert_eq!((t.max_pending_requests, t.max_requests), (Some(1), Some(u32::MAX)), "{name}");
    }
}

/// `TestApplyDestinationRule`'s HTTP/2 cases: `maxConcurrentStreams` and
/// `http2KeepAlive` reach an HTTP/2 cluster's options, whether the port
/// is HTTP/2 or the rule upgrades it.
#[test]
fn upstream_http2_settings_of_a_rule() {
    let mesh = MeshSettings::default();
    let h2 = |protocol: Protocol, yaml: &str| {
        let (c, is_h2) = built(&mesh, protocol, true, Some(&pool(yaml)));
        assert!(is_h2, "{yaml}");
        match options(&c).and_then(|o| o.upstream_protocol_options) {
            Some(U::ExplicitHttpConfig(e)) => match e.protocol_config {
                Some(ProtocolConfig::Http2ProtocolOptions(o)) => o,
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        h2(Protocol::Http2, "http: {maxConcurrentStreams: 10, maxRetries: 10}").max_concurrent_streams,
        Some(10),
        "destination rule with maxConcurrentStreams"
    );
    let ka = h2(Protocol::Http2, "http: {http2KeepAlive: {interval: 15s, timeout: 5s}}").connection_keepalive;
    assert_eq!(ka.map(|k| (k.interval, k.timeout)), Some((secs(15), secs(5))), "destination rule with http2 keepalive");
    for protocol in [Protocol::Http, Protocol::Http2] {
        let o = h2(protocol, "http: {h2UpgradePolicy: UPGRADE, maxConcurrentStreams: 200}");
        assert_eq!(o.max_concurrent_streams, Some(200), "destination rule with http2UpgradePolicy ({protocol:?})");
    }
}

/// istiod's `GetPortLevelTrafficPolicy`: a port's settings replace the
/// top level whole; what they leave out is not inherited.
#[test]
fn port_level_settings_do_not_inherit() {
    let dr: istiod_config::istio::networking::DestinationRule = serde_yaml_ng::from_str(
        "host: web\ntrafficPolicy:\n  loadBalancer: {simple: RANDOM}\n  portLevelSettings:\n  \
         - port: {number: 80}\n    connectionPool: {http: {idleTimeout: 30s}}\n",
    )
    .expect("rule");
    let on_80 = effective(&dr, 80, "", &Default::default());
    assert!(on_80.load_balancer.is_none() && on_80.connection_pool.is_some());
    let on_81 = effective(&dr, 81, "", &Default::default());
    assert!(on_81.load_balancer.is_some() && on_81.connection_pool.is_none());
}

/// `TestApplyLoadBalancer` (cluster_test.go), the policy each case ends
/// with: an original-destination cluster's own, Maglev for Redis (the
/// Redis filter on), LEAST_REQUEST by default, PASSTHROUGH making a DNS
/// cluster an original-destination one.
#[test]
fn upstream_apply_load_balancer() {
    use istiod_config::istio::networking::LoadBalancerSettings;
    let typed = |t: cluster::DiscoveryType| Some(cluster::ClusterDiscoveryType::Type(t as i32));
    let policy = |t: cluster::DiscoveryType, lb: Option<LoadBalancerSettings>, redis: bool| {
        let mut c = Cluster { cluster_discovery_type: typed(t), ..Default::default() };
        balance(&mut c, lb.as_ref(), redis);
        (c.lb_policy, c.cluster_discovery_type)
    };
    use cluster::DiscoveryType::{Eds, OriginalDst, StrictDns};
    use cluster::LbPolicy::{ClusterProvided, LeastRequest, Maglev};
    assert_eq!(policy(OriginalDst, None, false).0, ClusterProvided as i32, "ORIGINAL_DST discovery type is a no op");
    assert_eq!(policy(Eds, None, true).0, Maglev as i32, "redis protocol");
    let distribute: LoadBalancerSettings = serde_yaml_ng::from_str(
        "localityLbSetting: {distribute: [{from: region1/zone1/subzone1, to: {region1/zone1/subzone1: 100}}]}",
    )
    .expect("lb");
    assert_eq!(policy(Eds, Some(distribute), false).0, LeastRequest as i32, "Loadbalancer has distribute");
    let passthrough: LoadBalancerSettings = serde_yaml_ng::from_str("simple: PASSTHROUGH").expect("lb");
    assert_eq!(
        policy(StrictDns, Some(passthrough), false),
        (ClusterProvided as i32, typed(OriginalDst)),
        "DNS cluster with PASSTHROUGH in DR"
    );
    assert_eq!(policy(Eds, None, false).0, LeastRequest as i32, "Send Unhealthy Endpoints enabled");
}

/// `TestApplyLoadBalancer` (cluster_test.go), each case's
/// `expectedLocalityWeightedConfig`, with the `ENABLE_LOCALITY_WEIGHTED_LB_CONFIG`
/// and near-preferring Service cases of loadbalancer.go's `ApplyToCluster`
/// and `GetEffectiveLbSetting`.
#[test]
fn upstream_apply_load_balancer_locality_weighted_config() {
    use istiod_config::istio::networking::LoadBalancerSettings;
    let lb = |y: &str| serde_yaml_ng::from_str::<LoadBalancerSettings>(y).expect("lb");
    let weighed = |lb: Option<&LoadBalancerSettings>, outlier: bool, near: bool, always: bool| {
        let mut c = Cluster {
            cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::Eds as i32)),
            outlier_detection: outlier.then(Default::default),
            ..Default::default()
        };
        balance(&mut c, lb, false);
        let (setting, forced) = effective_locality(lb.and_then(|l| l.locality_lb_setting.as_ref()), near, None);
        weigh_localities(&mut c, setting.as_deref(), forced, always);
        c.common_lb_config.and_then(|l| l.locality_config_specifier).is_some()
    };
    let distribute =
        lb("localityLbSetting: {distribute: [{from: region1/zone1/subzone1, to: {region1/zone1/subzone1: 100}}]}");
    let priority = lb(
        "localityLbSetting: {enabled: true, failoverPriority: [topology.kubernetes.io/region, topology.kubernetes.io/zone]}",
    );
    assert!(!weighed(None, false, false, false), "ORIGINAL_DST discovery type is a no op");
    assert!(weighed(Some(&distribute), false, false, false), "Loadbalancer has distribute");
    assert!(!weighed(None, false, false, false), "Send Unhealthy Endpoints enabled");
    assert!(
        weighed(Some(&priority), true, false, false),
        "Failover priority with nil wrapped endpoints should not panic"
    );
    // Failover only with outlier detection (ApplyToCluster's enableFailover).
    assert!(!weighed(Some(&priority), false, false, false));
    // A Service preferring near endpoints forces failover by topology,
    // unless the rule has its own setting.
    assert!(weighed(None, false, true, false));
    assert!(!weighed(Some(&lb("localityLbSetting: {enabled: false}")), false, true, false));
    // ENABLE_LOCALITY_WEIGHTED_LB_CONFIG: every cluster.
    assert!(weighed(None, false, false, true));
}

/// `constructUpstreamTLS` (cluster_tls.go): SIMPLE and MUTUAL origination
/// offers `h2` on an HTTP/2 cluster, nothing otherwise.
#[test]
fn upstream_simple_tls_offers_h2_on_http2_clusters() {
    use istiod_proto::envoy::config::core::v3::transport_socket::ConfigType;
    let policy: TrafficPolicy = serde_yaml_ng::from_str("tls: {mode: SIMPLE, sni: api.example.com}").expect("policy");
    let alpn = |h2: bool| {
        let mut c = Cluster::default();
        apply(&mut c, &policy, "api.example.com", 443, "", istio_alpn(h2, true));
        let Some(ConfigType::TypedConfig(any)) = c.transport_socket.and_then(|t| t.config_type) else { panic!() };
        tls::UpstreamTlsContext::decode(any.value.as_slice())
            .expect("tls")
            .common_tls_context
            .expect("common")
            .alpn_protocols
    };
    assert_eq!(alpn(true), ["h2"]);
    assert!(alpn(false).is_empty());
}

/// grpcgen's clusters (grpcgen/cds.go `applyLoadBalancing`,
/// `applyCircuitBreakers`): round robin unless the rule asks for
/// LEAST_REQUEST or a consistent hash; capped only by a rule's
/// `http2MaxRequests`.
#[test]
fn proxyless_grpc_clusters_balance_and_cap_as_grpcgen() {
    use crate::translate::grpc::for_grpc_client;
    let mesh = MeshSettings::default();
    let grpc = |lb: cluster::LbPolicy, least_request: bool, cp: Option<&str>| {
        let (mut c, _) = built(&mesh, Protocol::Grpc, true, cp.map(pool).as_ref());
        c.lb_policy = lb as i32;
        let c = for_grpc_client(c, least_request);
        (
            c.lb_policy,
            c.circuit_breakers.map(|b| b.thresholds[0].max_requests),
            c.typed_extension_protocol_options.len(),
        )
    };
    use cluster::LbPolicy::{LeastRequest, Maglev, Random, RingHash, RoundRobin};
    assert_eq!(grpc(LeastRequest, false, None), (RoundRobin as i32, None, 0), "istiod's default is round robin");
    assert_eq!(grpc(LeastRequest, true, None).0, LeastRequest as i32, "the rule's LEAST_REQUEST");
    assert_eq!(grpc(Random, false, None).0, RoundRobin as i32, "RANDOM cannot be applied");
    assert_eq!(grpc(RingHash, false, None).0, RingHash as i32);
    assert_eq!(grpc(Maglev, false, None).0, Maglev as i32);
    assert_eq!(grpc(LeastRequest, false, Some("http: {http2MaxRequests: 7}")).1, Some(Some(7)));
}

/// `TestApplyDefaultTrafficPolicy` (cluster_traffic_policy_test.go): the
/// mesh's baseline where the rule's policy sets no connection pool or
/// outlier detection, never over what it sets.
#[test]
fn upstream_apply_default_traffic_policy() {
    use crate::meshconfig::DefaultTrafficPolicy;
    let mesh_pool = pool("{tcp: {maxConnections: 100}}");
    let mesh_outlier: OutlierDetection = serde_yaml_ng::from_str("{consecutive5xxErrors: 5}").unwrap();
    let dr_pool = pool("{tcp: {maxConnections: 7}}");
    let dr_outlier: OutlierDetection = serde_yaml_ng::from_str("{consecutive5xxErrors: 9}").unwrap();
    let both = DefaultTrafficPolicy {
        connection_pool: Some(mesh_pool.clone()),
        outlier_detection: Some(mesh_outlier.clone()),
    };
    let policy = |cp: Option<&ConnectionPoolSettings>, od: Option<&OutlierDetection>| TrafficPolicy {
        connection_pool: cp.cloned(),
        outlier_detection: od.cloned(),
        ..Default::default()
    };
    // "no mesh default, nil policy stays nil"
    assert_eq!(baseline(&DefaultTrafficPolicy::default()), None);
    // "no mesh default leaves DR policy untouched"
    let mut p = policy(Some(&dr_pool), None);
    seed(&mut p, &DefaultTrafficPolicy::default());
    assert_eq!(p, policy(Some(&dr_pool), None));
    // "no DR inherits both baseline blocks"
    assert_eq!(baseline(&both), Some(policy(Some(&mesh_pool), Some(&mesh_outlier))));
    // "DR connectionPool overrides, outlier inherited"
    let mut p = policy(Some(&dr_pool), None);
    seed(&mut p, &both);
    assert_eq!(p, policy(Some(&dr_pool), Some(&mesh_outlier)));
    // "DR sets both, baseline ignored"
    let mut p = policy(Some(&dr_pool), Some(&dr_outlier));
    seed(&mut p, &both);
    assert_eq!(p, policy(Some(&dr_pool), Some(&dr_outlier)));
    // "baseline only connectionPool, DR sets outlier"
    let only_pool = DefaultTrafficPolicy { connection_pool: Some(mesh_pool.clone()), outlier_detection: None };
    let mut p = policy(None, Some(&dr_outlier));
    seed(&mut p, &only_pool);
    assert_eq!(p, policy(Some(&mesh_pool), Some(&dr_outlier)));
}

/// `TestConnectionPoolSettings` (cluster_test.go), as served: a rule's
/// connection pool shapes the outbound cluster and the inbound clusters
/// of the workloads it serves; a Sidecar's `inboundConnectionPool`, and
/// an ingress listener's `connectionPool` for its port, override it
/// inbound only. And the mesh's `defaultTrafficPolicy` below all of them.
#[test]
fn upstream_connection_pool_settings() {
    use istiod_xds_api::snapshot::Kind;
    let basic = "{http: {http1MaxPendingRequests: 1, http2MaxRequests: 2, maxRequestsPerConnection: 3, maxRetries: 4}, \
        tcp: {maxConnections: 1, connectTimeout: 2s, tcpKeepalive: {probes: 3, time: 4s, interval: 5s}, maxConnectionDuration: 6s}}";
    let over = "{http: {http1MaxPendingRequests: 5, http2MaxRequests: 6, maxRequestsPerConnection: 7, maxRetries: 8}, \
        tcp: {maxConnections: 4, connectTimeout: 5s, tcpKeepalive: {probes: 6, time: 7s, interval: 8s}, maxConnectionDuration: 9s}}";
    let service = "apiVersion: v1\nkind: Service\nmetadata: {name: app, namespace: default}\n\
        spec: {clusterIP: 10.0.0.9, selector: {app: app}, ports: [{port: 10001, name: http}, {port: 10002, name: tcp}]}\n";
    let rule = |pool: &str| {
        let tp = if pool.is_empty() { String::new() } else { format!(", trafficPolicy: {{connectionPool: {pool}}}") };
        format!(
            "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: app, namespace: default}}\n\
             spec: {{host: app.default.svc.cluster.local{tp}}}\n"
        )
    };
    let sidecar = |spec: &str| {
        format!(
            "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: default, namespace: default}}\nspec: {spec}\n"
        )
    };
    let ingress = |pool: &str| {
        format!(
            "ingress: [{{port: {{number: 10001, protocol: HTTP, name: http}}, connectionPool: {pool}}}, \
             {{port: {{number: 10002, protocol: TCP, name: tcp}}}}]"
        )
    };
    // (case, objects, mesh, [outbound, inbound 10001, inbound 10002] as
    // the pools expected: None is istiod's unlimited default.)
    let cases: Vec<(&str, String, &str, [Option<&str>; 3])> = vec![
        ("no settings", rule(""), "", [None, None, None]),
        ("destination rule settings no sidecar", rule(basic), "", [Some(basic), Some(basic), Some(basic)]),
        (
            "sidecar settings no destination rule",
            rule("") + &sidecar(&format!("{{inboundConnectionPool: {basic}}}")),
            "",
            [None, Some(basic), Some(basic)],
        ),
        (
            "sidecar overrides destination rule for inbound listeners",
            rule(basic) + &sidecar(&format!("{{inboundConnectionPool: {over}}}")),
            "",
            [Some(basic), Some(over), Some(over)],
        ),
        (
            "sidecar per-port rules override top-level rules",
            rule("") + &sidecar(&format!("{{inboundConnectionPool: {basic}, {}}}", ingress(over))),
            "",
            [None, Some(over), Some(basic)],
        ),
        (
            "sidecar per-port rules with destination rule default",
            rule(basic) + &sidecar(&format!("{{{}}}", ingress(over))),
            "",
            [Some(basic), Some(over), Some(basic)],
        ),
        (
            "the mesh's defaultTrafficPolicy under no rule",
            String::new(),
            "defaultTrafficPolicy: {connectionPool: {tcp: {maxConnections: 4}, http: {http2MaxRequests: 6, http1MaxPendingRequests: 5, maxRetries: 8}}}",
            [Some("{tcp: {maxConnections: 4}, http: {http2MaxRequests: 6, http1MaxPendingRequests: 5, maxRetries: 8}}");
                3],
        ),
    ];
    for (name, objects, mesh, want) in cases {
        let model = std::sync::Arc::new(crate::testing::model_in(mesh, &format!("{service}{objects}")));
        let proxy = crate::testing::class("default", &[("app", "app")]);
        let names = ["outbound|10001||app.default.svc.cluster.local", "inbound|10001||", "inbound|10002||"];
        for (cluster, want) in names.into_iter().zip(want) {
            let body = crate::testing::served(&model, &proxy, Kind::Cluster, cluster)
                .unwrap_or_else(|| panic!("{name}: {cluster}"));
            let c = Cluster::decode(body).unwrap();
            let t = &c.circuit_breakers.as_ref().unwrap().thresholds[0];
            let limits =
                [&t.max_connections, &t.max_pending_requests, &t.max_requests, &t.max_retries].map(|v| v.unwrap_or(0));
            let expected = match want {
                // istiod's getDefaultCircuitBreakerThresholds.
                None => [u32::MAX; 4],
                Some(p) => {
                    let p = pool(p);
                    let (tcp, http) = (p.tcp.unwrap_or_default(), p.http.unwrap_or_default());
                    [tcp.max_connections, http.http1_max_pending_requests, http.http2_max_requests, http.max_retries]
                        .map(|n| n as u32)
                }
            };
            assert_eq!(limits, expected, "{name}: {cluster}");
        }
    }
}

/// Auto mTLS's socket, its common context encoded once and its SNI
/// appended, is byte for byte the socket built and encoded whole, for
/// each ALPN (the memo keeps one per ALPN) and a one- and two-byte SNI
/// length.
#[test]
fn istio_mutual_socket_is_the_socket_built_whole() {
    let istio = ClientTlsSettings { mode: ClientTlsMode::IstioMutual, ..ClientTlsSettings::default() };
    let long = format!("outbound_.8080_._.{}.svc.cluster.local", "x".repeat(300));
    for alpn in [istio_alpn(true, true), istio_alpn(false, true), istio_alpn(false, false), &[][..]] {
        for sni in ["outbound_.9080_.v1_.reviews.default.svc.cluster.local", long.as_str(), ""] {
            // The first from scratch, the second from the memo.
            for _ in 0..2 {
                assert_eq!(istio_mutual_socket(sni, alpn), transport_socket(&istio, sni, alpn), "{sni} {alpn:?}");
            }
        }
    }
}
