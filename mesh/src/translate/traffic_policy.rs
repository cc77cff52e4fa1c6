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

/// The policy for `port`: the top level with that port's settings on top.
pub fn for_port(policy: &TrafficPolicy, port: u16) -> TrafficPolicy {
    let mut p = policy.clone();
    if let Some(pl) =
        policy.port_level_settings.iter().find(|pl| pl.port.as_ref().is_some_and(|x| x.number == u32::from(port)))
    {
        if pl.load_balancer.is_some() {
            p.load_balancer = pl.load_balancer.clone();
        }
        if pl.connection_pool.is_some() {
            p.connection_pool = pl.connection_pool.clone();
        }
        if pl.outlier_detection.is_some() {
            p.outlier_detection = pl.outlier_detection.clone();
        }
        if pl.tls.is_some() {
            p.tls = pl.tls.clone();
        }
    }
    p
}

/// `over` on top of `base`, field by field (a subset's policy).
pub fn merge(base: &TrafficPolicy, over: &TrafficPolicy) -> TrafficPolicy {
    let mut p = base.clone();
    if over.load_balancer.is_some() {
        p.load_balancer = over.load_balancer.clone();
    }
    if over.connection_pool.is_some() {
        p.connection_pool = over.connection_pool.clone();
    }
    if over.outlier_detection.is_some() {
        p.outlier_detection = over.outlier_detection.clone();
    }
    if over.tls.is_some() {
        p.tls = over.tls.clone();
    }
    p
}

/// Auto mTLS (istiod's default): with no TLS setting in the
/// DestinationRule, endpoints labelled `security.istio.io/tlsMode: istio`
/// (they run a sidecar) get ISTIO_MUTUAL and the others plaintext, chosen
/// per endpoint through `transport_socket_matches` and the endpoint
/// metadata `envoy.transport_socket_match`.
pub fn auto_mtls(c: &mut Cluster, sni_host: &str, port: u16, subset: &str) {
    use istiod_proto::prost_types::{Struct, Value, value::Kind as V};
    let istio = ClientTlsSettings { mode: ClientTlsMode::IstioMutual, ..ClientTlsSettings::default() };
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
            transport_socket: transport_socket(&istio, &format!("outbound_.{port}_.{subset}_.{sni_host}")),
        },
        cluster::TransportSocketMatch {
            name: "tlsMode-disabled".into(),
            r#match: Some(Struct::default()),
            transport_socket: Some(raw),
        },
    ];
}

/// Applies `policy` to `c`.
pub fn apply(c: &mut Cluster, policy: &TrafficPolicy, sni_host: &str, port: u16, subset: &str) {
    if let Some(lb) = &policy.load_balancer {
        load_balancer(c, lb);
    }
    if let Some(cp) = &policy.connection_pool {
        connection_pool(c, cp);
    }
    if let Some(o) = &policy.outlier_detection {
        c.outlier_detection = Some(outlier(o));
    }
    if let Some(t) = &policy.tls {
        c.transport_socket = transport_socket(t, &format!("outbound_.{port}_.{subset}_.{sni_host}"));
    }
}

/// The policy in force for one port and subset of a DestinationRule:
/// the top-level policy with its port-level settings, overridden by the
/// subset's (with its own port-level settings).
pub fn effective(dr: &istiod_config::istio::networking::DestinationRule, port: u16, subset: &str) -> TrafficPolicy {
    let top = dr.traffic_policy.as_ref().map(|p| for_port(p, port)).unwrap_or_default();
    match dr.subsets.iter().find(|s| s.name == subset).and_then(|s| s.traffic_policy.as_ref()) {
        Some(sp) => merge(&top, &for_port(sp, port)),
        None => top,
    }
}

/// Locality-weighted balancing for a `localityLbSetting` that
/// distributes (a rule's or the mesh's): the weights come with the
/// endpoints (`locality.rs`).
pub(super) fn weigh_localities(
    c: &mut Cluster,
    setting: Option<&istiod_config::istio::networking::LocalityLoadBalancerSetting>,
) {
    if setting.is_some_and(|l| !l.distribute.is_empty()) {
        c.common_lb_config.get_or_insert_with(Default::default).locality_config_specifier =
            Some(cluster::common_lb_config::LocalityConfigSpecifier::LocalityWeightedLbConfig(
                cluster::common_lb_config::LocalityWeightedLbConfig {},
            ));
    }
}

fn load_balancer(c: &mut Cluster, lb: &LoadBalancerSettings) {
    weigh_localities(c, lb.locality_lb_setting.as_ref());
    if let Some(simple) = &lb.simple {
        c.lb_policy = match simple {
            SimpleLb::LeastRequest | SimpleLb::LeastConn => cluster::LbPolicy::LeastRequest,
            SimpleLb::Random => cluster::LbPolicy::Random,
            SimpleLb::Passthrough => cluster::LbPolicy::ClusterProvided,
            SimpleLb::RoundRobin | SimpleLb::Unspecified => cluster::LbPolicy::RoundRobin,
        } as i32;
    }
    if let Some(h) = &lb.consistent_hash {
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
pub fn default_thresholds() -> circuit_breakers::Thresholds {
    circuit_breakers::Thresholds {
        max_connections: Some(u32::MAX),
        max_pending_requests: Some(u32::MAX),
        max_requests: Some(u32::MAX),
        max_retries: Some(u32::MAX),
        track_remaining: true,
        ..Default::default()
    }
}

fn connection_pool(c: &mut Cluster, cp: &ConnectionPoolSettings) {
    let positive = |v: i32| (v > 0).then_some(v as u32);
    let mut t = default_thresholds();
    if let Some(tcp) = &cp.tcp {
        if let Some(v) = positive(tcp.max_connections) {
            t.max_connections = Some(v);
        }
        if let Some(d) = dur(tcp.connect_timeout.as_ref()) {
            c.connect_timeout = Some(d);
        }
    }
    if let Some(http) = &cp.http {
        if let Some(v) = positive(http.http1_max_pending_requests) {
            t.max_pending_requests = Some(v);
        }
        if let Some(v) = positive(http.http2_max_requests) {
            t.max_requests = Some(v);
        }
        if let Some(v) = positive(http.max_retries) {
            t.max_retries = Some(v);
        }
        let idle = dur(http.idle_timeout.as_ref());
        let per_conn = positive(http.max_requests_per_connection);
        if idle.is_some() || per_conn.is_some() {
            let opts = upstream_http::HttpProtocolOptions {
                common_http_protocol_options: Some(core::HttpProtocolOptions {
                    idle_timeout: idle,
                    max_requests_per_connection: per_conn,
                    ..Default::default()
                }),
                upstream_protocol_options: Some(
                    upstream_http::http_protocol_options::UpstreamProtocolOptions::UseDownstreamProtocolConfig(
                        upstream_http::http_protocol_options::UseDownstreamHttpConfig::default(),
                    ),
                ),
                ..Default::default()
            };
            c.typed_extension_protocol_options =
                BTreeMap::from([("envoy.extensions.upstreams.http.v3.HttpProtocolOptions".to_owned(), any(&opts))]);
        }
    }
    c.circuit_breakers = Some(CircuitBreakers { thresholds: vec![t], ..Default::default() });
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

fn transport_socket(t: &ClientTlsSettings, default_sni: &str) -> Option<core::TransportSocket> {
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
                alpn_protocols: vec!["istio-peer-exchange".into(), "istio".into()],
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
