//! DestinationRule traffic policy applied to a cluster, after istiod's
//! `cluster_traffic_policy.go`: load balancer (simple, consistent hash as
//! RING_HASH/MAGLEV), connection pool (circuit breakers, connect timeout,
//! HTTP idle timeout), outlier detection, and client TLS (ISTIO_MUTUAL
//! with istiod's SDS names `default` and `ROOTCA`, SIMPLE, MUTUAL with a
//! credentialName). Port-level settings override the top level for their
//! port; a subset's policy overrides both.

use std::collections::BTreeMap;

use super::envoy::{any, sds};
use istiod_config::istio::networking::{
    ClientTlsMode, ClientTlsSettings, ConnectionPoolSettings, LoadBalancerSettings, OutlierDetection, SimpleLb,
    TrafficPolicy,
};
use istiod_proto::envoy::config::cluster::v3::{
    CircuitBreakers, Cluster, OutlierDetection as EnvoyOutlier, circuit_breakers, cluster,
};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;
use istiod_proto::envoy::extensions::upstreams::http::v3 as upstream_http;
use istiod_proto::envoy::r#type::matcher::v3 as matcher;
use istiod_proto::prost_types::Duration;

fn dur(s: Option<&String>) -> Option<Duration> {
    let d = istiod_config::duration::parse(s?).ok()?;
    Some(Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 })
}

/// The policy for `port` (istiod's `GetPortLevelTrafficPolicy`): that
/// port's settings where it has some, which replace the top level whole
/// (what they leave out is the default, not inherited), else the top
/// level; and whether the port's applied.
pub fn for_port(policy: &TrafficPolicy, port: u16) -> (TrafficPolicy, bool) {
    match policy.port_level_settings.iter().find(|pl| pl.port.as_ref().is_some_and(|x| x.number == u32::from(port))) {
        Some(pl) => (
            TrafficPolicy {
                load_balancer: pl.load_balancer.clone(),
                connection_pool: pl.connection_pool.clone(),
                outlier_detection: pl.outlier_detection.clone(),
                tls: pl.tls.clone(),
                ..Default::default()
            },
            true,
        ),
        None => (policy.clone(), false),
    }
}

/// istiod's `applyDefaultTrafficPolicy`: meshConfig
/// `defaultTrafficPolicy`'s connection pool and outlier detection where
/// the port's policy has none (before a subset's merge).
pub fn seed(p: &mut TrafficPolicy, baseline: &crate::meshconfig::DefaultTrafficPolicy) {
    if p.connection_pool.is_none() {
        p.connection_pool.clone_from(&baseline.connection_pool);
    }
    if p.outlier_detection.is_none() {
        p.outlier_detection.clone_from(&baseline.outlier_detection);
    }
}

/// The policy of a cluster no DestinationRule shapes: the mesh's
/// baseline, if it sets anything.
pub fn baseline(b: &crate::meshconfig::DefaultTrafficPolicy) -> Option<TrafficPolicy> {
    let mut p = TrafficPolicy::default();
    seed(&mut p, b);
    (p.connection_pool.is_some() || p.outlier_detection.is_some()).then_some(p)
}

/// A subset's policy `over` on top of `base` (istiod's
/// `MergeTrafficPolicy`): field by field, or, where the subset's comes
/// from its port-level settings, those four fields whole.
pub fn merge(base: &TrafficPolicy, over: &TrafficPolicy, port_level: bool) -> TrafficPolicy {
    let mut p = base.clone();
    if over.load_balancer.is_some() || port_level {
        p.load_balancer = over.load_balancer.clone();
    }
    if over.connection_pool.is_some() || port_level {
        p.connection_pool = over.connection_pool.clone();
    }
    if over.outlier_detection.is_some() || port_level {
        p.outlier_detection = over.outlier_detection.clone();
    }
    if over.tls.is_some() || port_level {
        p.tls = over.tls.clone();
    }
    if over.tunnel.is_some() {
        p.tunnel = over.tunnel.clone();
    }
    if over.proxy_protocol.is_some() {
        p.proxy_protocol = over.proxy_protocol.clone();
    }
    if over.retry_budget.is_some() {
        p.retry_budget = over.retry_budget.clone();
    }
    p
}

/// Auto mTLS (istiod's default): with no TLS setting in the
/// DestinationRule, endpoints labelled `security.istio.io/tlsMode: istio`
/// (they run a sidecar) get ISTIO_MUTUAL and the others plaintext, chosen
/// per endpoint through `transport_socket_matches` and the endpoint
/// metadata `envoy.transport_socket_match`.
pub fn auto_mtls(c: &mut Cluster, sni_host: &str, port: u16, subset: &str, alpn: &[&str]) {
    use istiod_proto::prost_types::{Struct, Value, value::Kind as V};
    let criteria = Struct {
        fields: BTreeMap::from([("tlsMode".to_owned(), Value { kind: Some(V::StringValue("istio".into())) })]),
    };
    let raw = core::TransportSocket {
        name: "envoy.transport_sockets.raw_buffer".into(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(
            &istiod_proto::envoy::extensions::transport_sockets::raw_buffer::v3::RawBuffer::default(),
        ))),
    };
    c.transport_socket_matches = vec![
        cluster::TransportSocketMatch {
            name: "tlsMode-istio".into(),
            r#match: Some(criteria),
            transport_socket: istio_mutual_socket(&format!("outbound_.{port}_.{subset}_.{sni_host}"), alpn),
        },
        cluster::TransportSocketMatch {
            name: "tlsMode-disabled".into(),
            r#match: Some(Struct::default()),
            transport_socket: Some(raw),
        },
    ];
}

/// [`transport_socket`] of a plain ISTIO_MUTUAL setting (auto mTLS's)
/// with SNI `sni`: its common context is the same for every cluster
/// offering `alpn`, so it is encoded once per thread and ALPN, and the SNI
/// (field 2 of `UpstreamTlsContext`, after the context's field 1) is
/// appended as prost would write it. Building and encoding the whole
/// context for each cluster was a tenth of a full rebuild.
pub(crate) fn istio_mutual_socket(sni: &str, alpn: &[&str]) -> Option<core::TransportSocket> {
    thread_local! {
        static COMMON: std::cell::RefCell<Vec<(Vec<String>, Option<core::TransportSocket>)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    use core::transport_socket::ConfigType;
    COMMON.with(|memo| {
        let mut memo = memo.borrow_mut();
        let i = match memo.iter().position(|(a, _)| a.iter().map(String::as_str).eq(alpn.iter().copied())) {
            Some(i) => i,
            None => {
                let istio = ClientTlsSettings { mode: ClientTlsMode::IstioMutual, ..ClientTlsSettings::default() };
                // (No SNI: the context alone, field 1.)
                memo.push((alpn.iter().map(|a| (*a).to_owned()).collect(), transport_socket(&istio, "", alpn)));
                memo.len() - 1
            }
        };
        let base = memo[i].1.as_ref()?;
        let Some(ConfigType::TypedConfig(any)) = &base.config_type else { return Some(base.clone()) };
        let mut value = Vec::with_capacity(any.value.len() + sni.len() + 6);
        value.extend_from_slice(&any.value);
        if !sni.is_empty() {
            value.push(0x12);
            prost::encoding::encode_varint(sni.len() as u64, &mut value);
            value.extend_from_slice(sni.as_bytes());
        }
        let any = istiod_proto::prost_types::Any { type_url: any.type_url.clone(), value };
        Some(core::TransportSocket { name: base.name.clone(), config_type: Some(ConfigType::TypedConfig(any)) })
    })
}

/// Applies `policy`'s outlier detection and TLS to `c` (its connection
/// pool is [`connection`]'s, its load balancer [`balance`]'s); `alpn` is what ISTIO_MUTUAL
/// offers ([`istio_alpn`]).
pub fn apply(c: &mut Cluster, policy: &TrafficPolicy, sni_host: &str, port: u16, subset: &str, alpn: &[&str]) {
    if let Some(o) = &policy.outlier_detection {
        c.outlier_detection = Some(outlier(o));
    }
    if let Some(t) = &policy.tls {
        c.transport_socket = transport_socket(t, &format!("outbound_.{port}_.{subset}_.{sni_host}"), alpn);
    }
}

/// The ALPN an ISTIO_MUTUAL upstream offers (istiod's
/// `buildUpstreamClusterTLSContext`): `istio-peer-exchange` for metadata
/// exchange unless `PILOT_DISABLE_MX_ALPN`, `istio`, and `h2` on an HTTP/2
/// cluster.
pub fn istio_alpn(h2: bool, mx: bool) -> &'static [&'static str] {
    match (h2, mx) {
        (true, true) => &["istio-peer-exchange", "istio", "h2"],
        (true, false) => &["istio", "h2"],
        (false, true) => &["istio-peer-exchange", "istio"],
        (false, false) => &["istio"],
    }
}

/// What a cluster's HTTP protocol options depend on besides its policy.
#[derive(Debug, Clone, Copy)]
pub struct Upstream {
    /// The port's protocol.
    pub protocol: crate::model::Protocol,
    /// Sidecars (and waypoints) sniff unnamed ports: such a port's
    /// upstream speaks what the downstream spoke.
    pub sniffs: bool,
    /// Outbound: an HTTP/2 upgrade applies.
    pub outbound: bool,
}

/// istiod's `shouldH2Upgrade`: a rule's `useClientProtocol` never
/// upgrades, its `h2UpgradePolicy` decides when set, else the mesh's
/// `h2UpgradePolicy` for HTTP ports.
pub fn should_h2_upgrade(
    protocol: crate::model::Protocol,
    mesh_upgrade: bool,
    cp: Option<&ConnectionPoolSettings>,
) -> bool {
    use istiod_config::istio::networking::H2UpgradePolicy;
    if let Some(http) = cp.and_then(|cp| cp.http.as_ref()) {
        if http.use_client_protocol {
            return false;
        }
        match http.h2_upgrade_policy {
            H2UpgradePolicy::Upgrade => return true,
            H2UpgradePolicy::DoNotUpgrade => return false,
            H2UpgradePolicy::Default => {}
        }
    }
    protocol.is_http() && mesh_upgrade
}

/// istiod's `setUpstreamProtocol`, `applyH2Upgrade` and
/// `applyConnectionPool`, in that order: the cluster's upstream HTTP
/// version (HTTP/2 for the HTTP/2 family and upgrades, the downstream's
/// for sniffed ports and `useClientProtocol`), its common HTTP options,
/// circuit breakers (effectively unlimited unless the pool says), connect
/// timeout and TCP keepalive (the mesh's, then the pool's). Returns
/// whether the cluster speaks HTTP/2 upstream (`isHttp2Cluster`).
pub fn connection(
    c: &mut Cluster,
    mesh: &crate::meshconfig::MeshSettings,
    up: Upstream,
    cp: Option<&ConnectionPoolSettings>,
    budget: Option<&istiod_config::istio::networking::RetryBudget>,
) -> bool {
    use upstream_http::http_protocol_options::{
        ExplicitHttpConfig, UpstreamProtocolOptions as U, UseDownstreamHttpConfig, explicit_http_config,
    };
    let h2 = || {
        U::ExplicitHttpConfig(ExplicitHttpConfig {
            protocol_config: Some(explicit_http_config::ProtocolConfig::Http2ProtocolOptions(Default::default())),
        })
    };
    let downstream = || {
        U::UseDownstreamProtocolConfig(UseDownstreamHttpConfig {
            http_protocol_options: Some(Default::default()),
            http2_protocol_options: Some(Default::default()),
            ..Default::default()
        })
    };
    let mut upstream = None;
    if up.protocol.is_http2() {
        upstream = Some(h2());
    } else if up.sniffs && up.protocol == crate::model::Protocol::Unsupported {
        upstream = Some(downstream());
    }
    if up.outbound && upstream.is_none() && should_h2_upgrade(up.protocol, mesh.h2_upgrade, cp) {
        upstream = Some(h2());
    }
    let mut t = default_thresholds(mesh.track_remaining);
    // istiod's applyRetryBudget: 20% and 3 unless the rule says (its
    // `budgetInterval` is not sent: this Envoy API has no such field).
    if let Some(b) = budget {
        t.retry_budget = Some(circuit_breakers::thresholds::RetryBudget {
            budget_percent: Some(istiod_proto::envoy::r#type::v3::Percent { value: b.percent.unwrap_or(20.0) }),
            min_retry_concurrency: Some(if b.min_retry_concurrency > 0 { b.min_retry_concurrency } else { 3 }),
        });
    }
    let mut common = core::HttpProtocolOptions::default();
    let (mut streams, mut ping) = (None, None);
    let tcp = cp.and_then(|cp| cp.tcp.as_ref());
    if let Some(http) = cp.and_then(|cp| cp.http.as_ref()) {
        let positive = |v: i32| (v > 0).then_some(v as u32);
        if let Some(v) = positive(http.http2_max_requests) {
            t.max_requests = Some(v);
        }
        if let Some(v) = positive(http.http1_max_pending_requests) {
            t.max_pending_requests = Some(v);
        }
        if let Some(v) = positive(http.max_retries) {
            t.max_retries = Some(v);
        }
        common.idle_timeout = dur(http.idle_timeout.as_ref());
        common.max_requests_per_connection = positive(http.max_requests_per_connection);
        streams = positive(http.max_concurrent_streams);
        ping = http.http2_keep_alive.as_ref();
    }
    if let Some(tcp) = tcp {
        if let Some(d) = dur(tcp.connect_timeout.as_ref()) {
            c.connect_timeout = Some(d);
        }
        if tcp.max_connections > 0 {
            t.max_connections = Some(tcp.max_connections as u32);
        }
        common.max_connection_duration = dur(tcp.max_connection_duration.as_ref());
        if common.idle_timeout.is_none() {
            common.idle_timeout = dur(tcp.idle_timeout.as_ref());
        }
    }
    for k in mesh.tcp_keepalive.iter().chain(tcp.and_then(|t| t.tcp_keepalive.as_ref())) {
        keepalive(c, k);
    }
    c.circuit_breakers = Some(CircuitBreakers { thresholds: vec![t], ..Default::default() });
    let mut options = upstream_http::HttpProtocolOptions::default();
    if common != core::HttpProtocolOptions::default() || streams.is_some() || ping.is_some() {
        options.common_http_protocol_options = Some(common);
    }
    if let Some(U::ExplicitHttpConfig(ExplicitHttpConfig {
        protocol_config: Some(explicit_http_config::ProtocolConfig::Http2ProtocolOptions(o)),
    })) = upstream.as_mut()
    {
        o.max_concurrent_streams = streams;
        o.connection_keepalive = ping.map(|k| core::KeepaliveSettings {
            interval: dur(k.interval.as_ref()),
            timeout: dur(k.timeout.as_ref()),
            ..Default::default()
        });
    }
    if cp.and_then(|cp| cp.http.as_ref()).is_some_and(|h| h.use_client_protocol) {
        upstream = Some(downstream());
    }
    let is_h2 = matches!(
        upstream,
        Some(U::ExplicitHttpConfig(ExplicitHttpConfig {
            protocol_config: Some(explicit_http_config::ProtocolConfig::Http2ProtocolOptions(_))
        }))
    );
    // istiod's clusterWrapper build: options made without an upstream
    // protocol speak HTTP/1.1 explicitly.
    if upstream.is_none() && options.common_http_protocol_options.is_some() {
        upstream = Some(U::ExplicitHttpConfig(ExplicitHttpConfig {
            protocol_config: Some(explicit_http_config::ProtocolConfig::HttpProtocolOptions(Default::default())),
        }));
    }
    options.upstream_protocol_options = upstream;
    if options != upstream_http::HttpProtocolOptions::default() {
        c.typed_extension_protocol_options =
            BTreeMap::from([("envoy.extensions.upstreams.http.v3.HttpProtocolOptions".to_owned(), any(&options))]);
    }
    is_h2
}

/// istiod's `setKeepAliveSettings`: SO_KEEPALIVE with what `k` sets.
fn keepalive(c: &mut Cluster, k: &istiod_config::istio::networking::TcpKeepalive) {
    let opts = c.upstream_connection_options.get_or_insert_with(Default::default);
    let ka = opts.tcp_keepalive.get_or_insert_with(Default::default);
    if k.probes > 0 {
        ka.keepalive_probes = Some(k.probes);
    }
    if let Some(d) = dur(k.time.as_ref()) {
        ka.keepalive_time = Some(d.seconds as u32);
    }
    if let Some(d) = dur(k.interval.as_ref()) {
        ka.keepalive_interval = Some(d.seconds as u32);
    }
}

/// The policy in force for one port and subset of a DestinationRule:
/// the top-level policy with its port-level settings, overridden by the
/// subset's (with its own port-level settings).
pub fn effective(
    dr: &istiod_config::istio::networking::DestinationRule,
    port: u16,
    subset: &str,
    baseline: &crate::meshconfig::DefaultTrafficPolicy,
) -> TrafficPolicy {
    let mut top = dr.traffic_policy.as_ref().map(|p| for_port(p, port).0).unwrap_or_default();
    seed(&mut top, baseline);
    match dr.subsets.iter().find(|s| s.name == subset).and_then(|s| s.traffic_policy.as_ref()) {
        Some(sp) => {
            let (over, port_level) = for_port(sp, port);
            merge(&top, &over, port_level)
        }
        None => top,
    }
}

/// istiod's `LocalityLBSettings.ApplyToCluster`, the cluster's part
/// (loadbalancer.go): locality-weighted balancing where the effective
/// `localityLbSetting` distributes, or fails over (`failover` or
/// `failoverPriority`) with failover on (outlier detection, or `forced`
/// by a Service preferring near endpoints); on every cluster under
/// `ENABLE_LOCALITY_WEIGHTED_LB_CONFIG` (`always`). The weights come with
/// the endpoints (`locality.rs`).
pub(super) fn weigh_localities(
    c: &mut Cluster,
    setting: Option<&istiod_config::istio::networking::LocalityLoadBalancerSetting>,
    forced: bool,
    always: bool,
) {
    let failover = forced || c.outlier_detection.is_some();
    let weighed = setting.is_some_and(|l| {
        !l.distribute.is_empty() || failover && (!l.failover.is_empty() || !l.failover_priority.is_empty())
    });
    if always || weighed {
        c.common_lb_config.get_or_insert_with(Default::default).locality_config_specifier =
            Some(cluster::common_lb_config::LocalityConfigSpecifier::LocalityWeightedLbConfig(
                cluster::common_lb_config::LocalityWeightedLbConfig {},
            ));
    }
}

/// istiod's `GetEffectiveLbSetting` for locality: the rule's setting,
/// else (a Service preferring near endpoints) failover by topology,
/// forced, else the mesh's; a disabled one is none. Returns the setting
/// and whether failover is forced.
pub(super) fn effective_locality<'a>(
    rule: Option<&'a istiod_config::istio::networking::LocalityLoadBalancerSetting>,
    prefers_near: bool,
    mesh: Option<&'a istiod_config::istio::networking::LocalityLoadBalancerSetting>,
) -> (Option<std::borrow::Cow<'a, istiod_config::istio::networking::LocalityLoadBalancerSetting>>, bool) {
    use std::borrow::Cow;
    let on = |l: &&istiod_config::istio::networking::LocalityLoadBalancerSetting| l.enabled != Some(false);
    match rule {
        Some(l) => (Some(l).filter(on).map(Cow::Borrowed), false),
        None if prefers_near => {
            let near = istiod_config::istio::networking::LocalityLoadBalancerSetting {
                enabled: Some(true),
                failover_priority: [
                    "topology.istio.io/network",
                    "topology.kubernetes.io/region",
                    "topology.kubernetes.io/zone",
                ]
                .map(String::from)
                .to_vec(),
                ..Default::default()
            };
            (Some(Cow::Owned(near)), true)
        }
        None => (mesh.filter(on).map(Cow::Borrowed), false),
    }
}

/// istiod's `applyLoadBalancer`, its policy: the rule's localities
/// weighed; an original-destination cluster's own; Maglev for Redis under
/// `PILOT_ENABLE_REDIS_FILTER` (`redis`); the rule's simple policy, where
/// PASSTHROUGH makes the cluster an original-destination one; else
/// LEAST_REQUEST; a consistent hash as RING_HASH or MAGLEV on top.
pub fn balance(c: &mut Cluster, lb: Option<&LoadBalancerSettings>, redis: bool) {
    let original_dst = cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::OriginalDst as i32);
    if c.cluster_discovery_type.as_ref() == Some(&original_dst) {
        c.lb_policy = cluster::LbPolicy::ClusterProvided as i32;
        return;
    }
    if redis {
        c.lb_policy = cluster::LbPolicy::Maglev as i32;
        return;
    }
    c.lb_policy = match lb.and_then(|lb| lb.simple.as_ref()) {
        Some(SimpleLb::Random) => cluster::LbPolicy::Random,
        Some(SimpleLb::RoundRobin) => cluster::LbPolicy::RoundRobin,
        Some(SimpleLb::Passthrough) => {
            c.cluster_discovery_type = Some(original_dst);
            c.load_assignment = None;
            c.eds_cluster_config = None;
            cluster::LbPolicy::ClusterProvided
        }
        Some(SimpleLb::LeastRequest | SimpleLb::LeastConn | SimpleLb::Unspecified) | None => {
            cluster::LbPolicy::LeastRequest
        }
    } as i32;
    if let Some(h) = lb.and_then(|lb| lb.consistent_hash.as_ref()) {
        if h.maglev.is_some() {
            c.lb_policy = cluster::LbPolicy::Maglev as i32;
        } else {
            c.lb_policy = cluster::LbPolicy::RingHash as i32;
            let min = h.ring_hash.as_ref().map_or(h.minimum_ring_size, |r| r.minimum_ring_size);
            c.lb_config = Some(cluster::LbConfig::RingHashLbConfig(cluster::RingHashLbConfig {
                minimum_ring_size: (min > 0).then_some(min),
                ..Default::default()
            }));
        }
    }
}

/// istiod's `getDefaultCircuitBreakerThresholds`: Envoy's defaults (1024)
/// set to effectively unlimited.
/// `track_remaining`: not `DISABLE_TRACK_REMAINING_CB_METRICS`.
pub fn default_thresholds(track_remaining: bool) -> circuit_breakers::Thresholds {
    circuit_breakers::Thresholds {
        max_connections: Some(u32::MAX),
        max_pending_requests: Some(u32::MAX),
        max_requests: Some(u32::MAX),
        max_retries: Some(u32::MAX),
        track_remaining,
        ..Default::default()
    }
}

fn outlier(o: &OutlierDetection) -> EnvoyOutlier {
    let mut out = EnvoyOutlier {
        interval: dur(o.interval.as_ref()),
        base_ejection_time: dur(o.base_ejection_time.as_ref()),
        max_ejection_percent: (o.max_ejection_percent > 0).then_some(o.max_ejection_percent as u32),
        // istiod: gateway errors are off unless asked for.
        enforcing_consecutive_gateway_failure: Some(0),
        ..Default::default()
    };
    let five_xx = o.consecutive_5xx_errors.or((o.consecutive_errors > 0).then_some(o.consecutive_errors as u32));
    match five_xx {
        Some(0) => out.enforcing_consecutive_5xx = Some(0),
        Some(n) => {
            out.consecutive_5xx = Some(n);
            out.enforcing_consecutive_5xx = Some(100);
        }
        None => {}
    }
    if let Some(n) = o.consecutive_gateway_errors {
        out.consecutive_gateway_failure = Some(n);
        out.enforcing_consecutive_gateway_failure = Some(if n > 0 { 100 } else { 0 });
    }
    out
}

/// The SDS reference of a DestinationRule's `credentialName` (istiod's
/// `ToResourceName`): `builtin://` is the proxy's own certificate (and
/// root) from the agent; anything else is served by istiod over ADS,
/// `configmap://`, `kubernetes://` and `kubernetes-gateway://` names as
/// they are, `invalid://` (a BackendTLSPolicy's CA that cannot be used)
/// as a name never served, a bare name as `kubernetes://<name>`.
fn credential_sds(name: &str) -> tls::SdsSecretConfig {
    match name {
        "builtin://" => return sds("default"),
        "builtin://-cacert" => return sds("ROOTCA"),
        _ => {}
    }
    let resource = if name.starts_with("invalid://") {
        "invalid://".to_owned()
    } else if ["configmap://", "kubernetes://", "kubernetes-gateway://"].iter().any(|p| name.starts_with(p)) {
        name.to_owned()
    } else {
        format!("kubernetes://{name}")
    };
    tls::SdsSecretConfig { name: resource, sds_config: super::envoy::ads() }
}

fn transport_socket(t: &ClientTlsSettings, default_sni: &str, alpn: &[&str]) -> Option<core::TransportSocket> {
    let exact = |s: &String| matcher::StringMatcher {
        match_pattern: Some(matcher::string_matcher::MatchPattern::Exact(s.clone())),
        ignore_case: false,
    };
    let validation = |root: tls::SdsSecretConfig| {
        Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(
            tls::common_tls_context::CombinedCertificateValidationContext {
                default_validation_context: Some(tls::CertificateValidationContext {
                    match_subject_alt_names: t.subject_alt_names.iter().map(exact).collect(),
                    ..Default::default()
                }),
                validation_context_sds_secret_config: Some(root),
                ..Default::default()
            },
        ))
    };
    let mut ctx = match t.mode {
        ClientTlsMode::Disable => return None,
        ClientTlsMode::IstioMutual => tls::UpstreamTlsContext {
            common_tls_context: Some(tls::CommonTlsContext {
                tls_certificate_sds_secret_configs: vec![sds("default")],
                validation_context_type: validation(sds("ROOTCA")),
                alpn_protocols: alpn.iter().map(|a| (*a).to_owned()).collect(),
                ..Default::default()
            }),
            sni: if t.sni.is_empty() { default_sni.to_owned() } else { t.sni.clone() },
            ..Default::default()
        },
        ClientTlsMode::Simple | ClientTlsMode::Mutual => {
            // A credential is read over ADS (istiod's
            // ConstructSdsSecretConfigForCredential); without one, the
            // agent serves the system roots.
            let cred = (!t.credential_name.is_empty()).then_some(t.credential_name.as_str());
            tls::UpstreamTlsContext {
                common_tls_context: Some(tls::CommonTlsContext {
                    tls_certificate_sds_secret_configs: match (&t.mode, cred) {
                        (ClientTlsMode::Mutual, Some(c)) => vec![credential_sds(c)],
                        _ => vec![],
                    },
                    validation_context_type: validation(match cred {
                        Some(c) => credential_sds(&format!("{c}-cacert")),
                        None => sds("file-root:system"),
                    }),
                    // constructUpstreamTLS: an HTTP/2 cluster offers `h2`
                    // (the mesh ALPN `alpn` holds it then too).
                    alpn_protocols: if alpn.contains(&"h2") { vec!["h2".into()] } else { Vec::new() },
                    ..Default::default()
                }),
                sni: t.sni.clone(),
                ..Default::default()
            }
        }
    };
    // Compliance for Envoy TLS upstreams (istiod's
    // buildUpstreamClusterTLSContext).
    if let Some(common) = ctx.common_tls_context.as_mut() {
        super::envoy::enforce_compliance(common);
    }
    Some(core::TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(core::transport_socket::ConfigType::TypedConfig(any(&ctx))),
    })
}

#[cfg(test)]
#[path = "traffic_policy_tests.rs"]
mod tests;
