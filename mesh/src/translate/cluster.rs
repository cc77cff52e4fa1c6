//! CDS: `outbound|<port>|<subset>|<host>` per service port and
//! DestinationRule subset (EDS, ORIGINAL_DST for headless, STRICT_DNS /
//! LOGICAL_DNS for DNS resolution) with the DestinationRule's traffic
//! policy or auto mTLS, and the fixed `BlackHoleCluster`,
//! `PassthroughCluster` and `InboundPassthroughCluster`.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use istiod_config::istio::networking::LocalityLoadBalancerSetting;
use istiod_config::istio::security::MtlsMode;
use istiod_proto::envoy::config::cluster::v3::{Cluster, cluster};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::endpoint::v3::ClusterLoadAssignment;
use istiod_proto::prost::Message;
use istiod_proto::prost_types::Duration;
use istiod_proto::prost_types::value::Kind as Kind_;
use istiod_xds_api::snapshot::Kind;

use super::endpoint::{Encoded, Takes, encoded_load_assignment, load_assignment, placed};
use super::envoy::socket;
use super::traffic_policy;
use crate::model::{Model, Protocol, Resolution};

/// One form of an outbound cluster: as it is where DestinationRule `rule`
/// applies (`None`: where none does), with its load assignment.
#[derive(Debug, Clone)]
pub struct ClusterForm {
    /// The rule's id (`AppliedRule::id`).
    pub rule: Option<Arc<str>>,
    /// The cluster (proxyless gRPC clients get a variant of it).
    pub cluster: Arc<Cluster>,
    /// The cluster encoded, as Envoy receives it.
    pub bytes: Bytes,
    /// The cluster encoded as a router receives it, where that differs
    /// (an unnamed port's: routers do not sniff).
    pub for_router: Option<Bytes>,
    /// The rule asks for LEAST_REQUEST itself: proxyless gRPC
    /// clients balance round robin otherwise.
    pub least_request: bool,
    /// The encoded load assignment of an EDS cluster.
    pub endpoints: Option<Bytes>,
    /// The load assignment itself, kept only where the rule balances by
    /// locality or sets outlier detection (what the per-proxy variant by
    /// locality reads).
    pub endpoints_typed: Option<Arc<ClusterLoadAssignment>>,
    /// Locality load balancing the rule asks for (per proxy locality).
    pub locality: Option<LocalityLoadBalancerSetting>,
    /// Whether the rule sets outlier detection (locality failover needs it).
    pub outlier_detection: bool,
    /// Where the endpoints sit, once east-west gateways exist (the
    /// per-network variant reads it).
    pub split: Option<Arc<super::network::Split>>,
    /// A hash of what decides which proxies get this form (the rule's
    /// namespace, host, exportTo and workload selector): a change there
    /// moves proxies between forms without changing any form's bytes.
    pub selection: u64,
}

/// The forms of one outbound cluster name: one per DestinationRule that may
/// apply to its host (a subset cluster exists only where a rule that
/// defines the subset applies).
#[derive(Debug, Clone, Default)]
pub struct ClusterForms {
    /// The service's hostname.
    pub host: Arc<str>,
    /// The forms.
    pub forms: Vec<ClusterForm>,
}

impl ClusterForms {
    /// The form where rule `rule` (its id) applies.
    pub fn form(&self, rule: Option<&str>) -> Option<&ClusterForm> {
        self.forms.iter().find(|f| f.rule.as_deref() == rule)
    }

    /// A digest of every form's cluster (`kind == Cluster`) or load
    /// assignment: it changes when some proxy's may. (A change of locality
    /// settings alone is found by the DestinationRules' generation.)
    pub fn digest(&self, kind: Kind) -> Bytes {
        use std::hash::{Hash, Hasher};
        let mut h = crate::digester();
        for f in &self.forms {
            (&f.rule, f.selection).hash(&mut h);
            match kind {
                Kind::Endpoint => (&f.endpoints, f.split.as_ref().map(|s| s.digest)).hash(&mut h),
                _ => (&f.bytes, &f.for_router, f.least_request).hash(&mut h),
            }
        }
        Bytes::copy_from_slice(&h.finish().to_be_bytes())
    }
}

/// The outbound clusters of `svc`'s ports, each in a form per
/// DestinationRule that may apply to its host, in a stable order.
pub fn outbound_of(model: &Model, svc: &crate::model::Service) -> Vec<(Arc<str>, ClusterForms)> {
    let rules = model.destination_rules();
    let mut out: BTreeMap<Arc<str>, ClusterForms> = BTreeMap::new();
    let choices = std::iter::once(None).chain(rules.candidates(&svc.hostname).into_iter().map(|i| Some(rules.get(i))));
    // (Each endpoint encoded once for all of the service's clusters.)
    let mut memo = Encoded::default();
    for rule in choices {
        let subsets = rule.map_or(&[][..], |r| r.rule.subsets.as_slice());
        for port in svc.ports.iter().filter(|p| p.protocol != Protocol::Udp) {
            // Auto mTLS, unless the service's workloads are known to refuse it.
            let refused = super::authn::service_mtls_mode(model, svc, port.port) == Some(MtlsMode::Disable);
            let auto_mtls = model.mesh.enable_auto_mtls
                && !svc.mesh_external
                && !refused
                && svc.endpoints.iter().any(|e| e.tls_mode == "istio");
            let local = model.remote_clusters && model.cluster_local.is_local(&svc.hostname);
            let networks = (model.network_gateways.enabled() || local).then_some(Placing {
                gateways: &model.network_gateways,
                refused,
                cluster_local: local,
            });
            let plain = std::iter::once(("", None));
            for (subset, labels) in plain.chain(subsets.iter().map(|s| (s.name.as_str(), Some(&s.labels)))) {
                let (name, form) =
                    form(&model.mesh, svc, port.port, subset, labels, rule, auto_mtls, networks, &mut memo);
                out.entry(name)
                    .or_insert_with(|| ClusterForms { host: svc.hostname.clone(), forms: Vec::new() })
                    .forms
                    .push(form);
            }
        }
    }
    out.into_iter().collect()
}

/// Where endpoints are placed for per-proxy EDS: the gateways, whether the
/// service's workloads refuse mTLS, whether the host is cluster-local.
#[derive(Clone, Copy)]
struct Placing<'a> {
    gateways: &'a crate::model::network::NetworkGateways,
    refused: bool,
    cluster_local: bool,
}

/// The cluster `outbound|<port>|<subset>|<host>` as it is where `rule`
/// applies (`None`: no rule), with its load assignment; with `networks`,
/// where its endpoints sit, for split-horizon and cluster-local EDS.
#[allow(clippy::too_many_arguments)]
fn form(
    mesh: &crate::meshconfig::MeshSettings,
    svc: &crate::model::Service,
    port: u16,
    subset: &str,
    labels: Option<&BTreeMap<String, String>>,
    rule: Option<&crate::model::destination_rules::AppliedRule>,
    auto_mtls: bool,
    networks: Option<Placing<'_>>,
    memo: &mut Encoded,
) -> (Arc<str>, ClusterForm) {
    // (istiod seeds the mesh's defaultTrafficPolicy below the rule, and
    // where no rule applies.)
    let baseline = &mesh.default_traffic_policy;
    let policy = match rule {
        Some(r) => Some(traffic_policy::effective(&r.rule, port, subset, baseline)),
        None => traffic_policy::baseline(baseline),
    };
    let name: Arc<str> = format!("outbound|{port}|{subset}|{}", svc.hostname).into();
    let mut c = Cluster {
        name: name.to_string(),
        connect_timeout: Some(timeout(mesh)),
        // istiod's applyMetadataExchange (cluster_builder.go): the peer's
        // metadata over ALPN istio-peer-exchange, for TCP telemetry.
        filters: super::telemetry::cluster_filters(mesh),
        metadata: telemetry_metadata(mesh, [svc]),
        ..Default::default()
    };
    // (Which endpoints are sent, and locality failover, follow the rule
    // alone: istiod's endpoint builder reads it without the mesh's
    // baseline.)
    let unseeded = rule.map(|r| traffic_policy::effective(&r.rule, port, subset, &Default::default()));
    let (admits, _) = Takes::of(mesh, svc, unseeded.as_ref());
    let (_, panic) = Takes::of(mesh, svc, policy.as_ref());
    // The rule's setting, else the mesh's (istiod's getLocalityLbSetting).
    // The mesh's counts only where it says something: istiod's default
    // `{enabled: true}` is the same as none.
    let from_rule = policy.as_ref().and_then(|p| p.load_balancer.as_ref()?.locality_lb_setting.clone());
    let locality = from_rule.clone().or_else(|| {
        mesh.locality_lb_setting.clone().filter(|l| {
            !l.distribute.is_empty()
                || !l.failover.is_empty()
                || !l.failover_priority.is_empty()
                || l.enabled == Some(false)
        })
    });
    let outlier_detection = unseeded.as_ref().is_some_and(|p| p.outlier_detection.is_some());
    // The load assignment itself where the per-proxy variants read it,
    // else only its bytes, from the service's endpoints encoded once.
    let mut endpoints: Option<Arc<ClusterLoadAssignment>> = None;
    let mut encoded: Option<Bytes> = None;
    let mut assign = |endpoints: &mut Option<Arc<ClusterLoadAssignment>>, memo: &mut Encoded| {
        if locality.is_some() || outlier_detection {
            *endpoints = Some(Arc::new(load_assignment(&name, svc, port, labels, admits)));
        } else {
            encoded = Some(encoded_load_assignment(&name, svc, port, labels, admits, memo));
        }
    };
    let mut split = None;
    // istiod's convertResolution: a Kubernetes headless service is EDS
    // under PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES.
    let resolution = match svc.resolution {
        Resolution::Passthrough if mesh.eds_for_headless && svc.kubernetes => Resolution::ClientSideLb,
        r => r,
    };
    let discovery = match resolution {
        Resolution::ClientSideLb => {
            c.eds_cluster_config =
                Some(cluster::EdsClusterConfig { eds_config: super::envoy::ads(), service_name: name.to_string() });
            match networks {
                // istiod's mtlsChecker: the rule's TLS mode where it sets
                // one, else what the workloads' policy allows.
                Some(p) => {
                    let tls = policy.as_ref().and_then(|p| p.tls.as_ref());
                    let takes = tls
                        .map_or(!p.refused, |t| t.mode == istiod_config::istio::networking::ClientTlsMode::IstioMutual);
                    let mtls = |e: &crate::model::Endpoint| takes && e.tls_mode == "istio" && !e.tunnel;
                    let (cla, places) = placed(&name, svc, port, labels, admits, &mesh.networks.cluster_id, &mtls);
                    let telemetry = mesh.telemetry_labels == (true, true);
                    split = Some(Arc::new(super::network::Split::new(places, p.gateways, p.cluster_local, telemetry)));
                    endpoints = Some(Arc::new(cla));
                }
                None => assign(&mut endpoints, memo),
            }
            cluster::DiscoveryType::Eds
        }
        Resolution::Passthrough => {
            // Headless: connect to the address the application dialed
            // (a router, which cannot, balances over the endpoints).
            assign(&mut endpoints, memo);
            cluster::DiscoveryType::OriginalDst
        }
        Resolution::Dns | Resolution::DnsRoundRobin => {
            c.load_assignment = Some(load_assignment(&name, svc, port, labels, admits));
            resolve_by_dns(&mut c, mesh);
            if svc.race_first_connect {
                // istiod's RACE_FIRST_TCP_CONNECT: LOGICAL_DNS over both
                // families, whatever the proxy's.
                c.dns_lookup_family = cluster::DnsLookupFamily::All as i32;
            }
            if svc.resolution == Resolution::Dns && !svc.race_first_connect {
                cluster::DiscoveryType::StrictDns
            } else {
                cluster::DiscoveryType::LogicalDns
            }
        }
    };
    c.cluster_discovery_type = Some(cluster::ClusterDiscoveryType::Type(discovery as i32));
    // The HTTP version upstream and the connection pool, as a sidecar's; a
    // router does not sniff, so an unnamed port's cluster is its own.
    let protocol = svc.ports.iter().find(|p| p.port == port).map_or(Protocol::Unsupported, |p| p.protocol);
    let cp = policy.as_ref().and_then(|p| p.connection_pool.as_ref());
    let budget = policy.as_ref().and_then(|p| p.retry_budget.as_ref());
    let up = traffic_policy::Upstream { protocol, sniffs: true, outbound: true };
    let h2 = traffic_policy::connection(&mut c, mesh, up, cp, budget);
    let alpn = |h2| traffic_policy::istio_alpn(h2, mesh.metadata_exchange && !mesh.disable_mx_alpn);
    if let Some(policy) = &policy {
        traffic_policy::apply(&mut c, policy, &svc.hostname, port, subset, alpn(h2));
    }
    let lb = policy.as_ref().and_then(|p| p.load_balancer.as_ref());
    let redis = mesh.protocol_filters.redis && protocol == Protocol::Redis;
    traffic_policy::balance(&mut c, lb, redis);
    // (Original destination and PASSTHROUGH clusters too: istiod's
    // applyLoadBalancer sets it before it makes them CLUSTER_PROVIDED.)
    if let Some(value) = panic {
        c.common_lb_config.get_or_insert_with(Default::default).healthy_panic_threshold =
            Some(istiod_proto::envoy::r#type::v3::Percent { value });
    }
    if subset.is_empty() && svc.keeps_draining(mesh) {
        // Persistent sessions: Envoy keeps DRAINING endpoints (as coarse
        // UNHEALTHY), used only when a cookie or header picks them
        // (istiod's default cluster, cluster.go and grpcgen/cds.go).
        use istiod_proto::envoy::config::core::v3::{HealthStatus, HealthStatusSet};
        let statuses = [HealthStatus::Healthy, HealthStatus::Draining, HealthStatus::Unknown, HealthStatus::Degraded];
        c.common_lb_config.get_or_insert_with(Default::default).override_host_status =
            Some(HealthStatusSet { statuses: statuses.map(|s| s as i32).to_vec() });
    }
    // istiod's AddALPNOverrideToMetadata (TLS origination keeps the
    // application's ALPN: the ALPN filter reads it) and the mesh-external
    // mark metadata exchange reads.
    let originates = policy.as_ref().and_then(|p| p.tls.as_ref()).is_some_and(|t| {
        use istiod_config::istio::networking::ClientTlsMode;
        matches!(t.mode, ClientTlsMode::Simple | ClientTlsMode::Mutual)
    });
    if originates {
        istio_field(&mut c, "alpn_override", Kind_::StringValue("false".into()));
    }
    if svc.mesh_external {
        istio_field(&mut c, "external", Kind_::BoolValue(true));
    }
    if auto_mtls && policy.as_ref().is_none_or(|p| p.tls.is_none()) {
        traffic_policy::auto_mtls(&mut c, &svc.hostname, port, subset, alpn(h2));
    }
    // (The mesh's weighs as a rule's: loadbalancer.go applies it whatever
    // its source.)
    let (effective, forced) =
        traffic_policy::effective_locality(from_rule.as_ref(), svc.prefers_near, mesh.locality_lb_setting.as_ref());
    traffic_policy::weigh_localities(&mut c, effective.as_deref(), forced, mesh.features.locality_weighted_lb);
    // A router does not sniff: an unnamed port's cluster speaks HTTP/1.1
    // upstream unless upgraded, and offers `h2` over mTLS when it is.
    // istiod's convertResolution: a router's headless service is EDS.
    let headless = resolution == Resolution::Passthrough;
    let for_router = (protocol == Protocol::Unsupported || headless)
        .then(|| {
            let mut r = c.clone();
            if headless && r.eds_cluster_config.is_none() {
                r.cluster_discovery_type =
                    Some(cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::Eds as i32));
                r.eds_cluster_config =
                    Some(cluster::EdsClusterConfig { eds_config: super::envoy::ads(), service_name: name.to_string() });
                traffic_policy::balance(&mut r, lb, redis);
            }
            r.typed_extension_protocol_options.clear();
            let h2 =
                traffic_policy::connection(&mut r, mesh, traffic_policy::Upstream { sniffs: false, ..up }, cp, budget);
            if let Some(policy) = policy.as_ref().filter(|p| p.tls.is_some()) {
                traffic_policy::apply(&mut r, policy, &svc.hostname, port, subset, alpn(h2));
            } else if auto_mtls {
                traffic_policy::auto_mtls(&mut r, &svc.hostname, port, subset, alpn(h2));
            }
            r
        })
        .filter(|r| *r != c)
        .map(|r| Bytes::from(r.encode_to_vec()));
    let selection = rule.map_or(0, |r| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&r.namespace, &r.host, &r.export, &r.selector).hash(&mut h);
        h.finish()
    });
    let form = ClusterForm {
        rule: rule.map(|r| r.id.clone()),
        selection,
        bytes: Bytes::from(c.encode_to_vec()),
        for_router,
        least_request: lb.is_some_and(|l| {
            use istiod_config::istio::networking::SimpleLb;
            l.consistent_hash.is_none() && matches!(l.simple, Some(SimpleLb::LeastRequest))
        }),
        cluster: Arc::new(c),
        endpoints: encoded.or_else(|| endpoints.as_ref().map(|e| Bytes::from(e.encode_to_vec()))),
        endpoints_typed: endpoints.filter(|_| locality.is_some() || outlier_detection || split.is_some()),
        split,
        locality,
        outlier_detection,
    };
    (name, form)
}

/// The mesh's `connectTimeout`, as a cluster's.
pub fn timeout(mesh: &crate::meshconfig::MeshSettings) -> Duration {
    let t = mesh.connect_timeout;
    Duration { seconds: t.as_secs() as i64, nanos: t.subsec_nanos() as i32 }
}

/// The clusters every sidecar has.
pub fn fixed(mesh: &crate::meshconfig::MeshSettings, out: &mut super::Resources) {
    let timeout = Some(timeout(mesh));
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
        // Outbound passthrough exchanges metadata as service clusters do.
        filters: if bind.is_none() { super::telemetry::cluster_filters(mesh) } else { Vec::new() },
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
    let dfp = (mesh.outbound == crate::meshconfig::OutboundPolicy::AllowAnyDynamicDns)
        .then(|| super::dfp::cluster(mesh.dynamic_dns_max_hosts, self::timeout(mesh)));
    let mut passthroughs =
        [passthrough("PassthroughCluster", None), passthrough("InboundPassthroughCluster", Some("127.0.0.6"))];
    let mut dfp = dfp.into_iter().collect::<Vec<_>>();
    // istiod's passthroughHttpProtocolOptions and default connection pool
    // (circuit breakers, the mesh's TCP keepalive), the dynamic forward
    // proxy's as theirs.
    for c in &mut dfp {
        c.filters = super::telemetry::cluster_filters(mesh);
    }
    for c in passthroughs.iter_mut().chain(dfp.iter_mut()) {
        if c.typed_extension_protocol_options.is_empty() {
            c.typed_extension_protocol_options = BTreeMap::from([(
                "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".to_owned(),
                super::envoy::any(&super::dfp::passthrough_http_options()),
            )]);
        }
        let up = traffic_policy::Upstream { protocol: Protocol::Tcp, sniffs: false, outbound: false };
        // The passthrough clusters are capped by the mesh's baseline pool
        // (buildDefaultPassthroughCluster; the dynamic forward proxy's not).
        // Only its circuit breakers, connect timeout and keepalive: istiod
        // applies it to a throwaway wrapper, keeping the passthrough HTTP
        // options.
        let pool =
            (c.name != super::dfp::CLUSTER).then_some(mesh.default_traffic_policy.connection_pool.as_ref()).flatten();
        let options = c.typed_extension_protocol_options.clone();
        traffic_policy::connection(c, mesh, up, pool, None);
        c.typed_extension_protocol_options = options;
    }
    for c in std::iter::once(black_hole).chain(passthroughs).chain(dfp) {
        out.insert((Kind::Cluster, c.name.as_str().into()), Bytes::from(c.encode_to_vec()));
    }
}

/// Sets `key` in the cluster's `istio` metadata (istiod's
/// `getOrCreateIstioMetadata`).
fn istio_field(c: &mut Cluster, key: &str, value: Kind_) {
    let md = c.metadata.get_or_insert_with(Default::default);
    let istio = md.filter_metadata.entry("istio".to_owned()).or_default();
    istio.fields.insert(key.to_owned(), istiod_proto::prost_types::Value { kind: Some(value) });
}

/// istiod's `addTelemetryMetadata` (with `PILOT_ENABLE_TELEMETRY_LABEL`):
/// the services a cluster is for, as `istio.services` (`host`, `name`,
/// `namespace`; a ServiceEntry's name is its host), for the stats
/// filter's destination labels.
pub(crate) fn telemetry_metadata<'a>(
    mesh: &crate::meshconfig::MeshSettings,
    services: impl IntoIterator<Item = &'a crate::model::Service>,
) -> Option<core::Metadata> {
    use istiod_proto::prost_types::{ListValue, Struct, Value, value::Kind};
    if !mesh.telemetry_labels.0 {
        return None;
    }
    let text = |s: &str| Value { kind: Some(Kind::StringValue(s.to_owned())) };
    let list: Vec<Value> = services
        .into_iter()
        .map(|svc| {
            let name = if svc.kubernetes { svc.name.as_str() } else { &svc.hostname };
            let fields = BTreeMap::from([
                ("host".to_owned(), text(&svc.hostname)),
                ("name".to_owned(), text(name)),
                ("namespace".to_owned(), text(&svc.namespace)),
            ]);
            Value { kind: Some(Kind::StructValue(Struct { fields })) }
        })
        .collect();
    let services = Value { kind: Some(Kind::ListValue(ListValue { values: list })) };
    let istio = Struct { fields: BTreeMap::from([("services".to_owned(), services)]) };
    Some(core::Metadata { filter_metadata: BTreeMap::from([("istio".to_owned(), istio)]), ..Default::default() })
}

/// The DNS lookup family of a DNS cluster as served to IPv4 proxies (and
/// proxies that sent no address): istiod's `SelectDNSLookupFamily`; the
/// generator gives IPv6 and dual-stack proxies theirs.
pub const DNS_LOOKUP_FAMILY: cluster::DnsLookupFamily = cluster::DnsLookupFamily::V4Only;

/// The c-ares resolver's extension name.
pub const CARES: &str = "envoy.network.dns_resolver.cares";

/// How istiod's DNS clusters resolve (cluster_builder.go `buildCluster`,
/// STRICT_DNS and LOGICAL_DNS): the proxy's family, c-ares with
/// `PILOT_DNS_CARES_UDP_MAX_QUERIES`, `PILOT_DNS_JITTER_DURATION`,
/// meshConfig `dnsRefreshRate` for failures and the TTL for answers.
fn resolve_by_dns(c: &mut Cluster, mesh: &crate::meshconfig::MeshSettings) {
    use istiod_proto::envoy::extensions::network::dns_resolver::cares::v3::CaresDnsResolverConfig;
    let duration = |d: std::time::Duration| Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 };
    c.dns_lookup_family = DNS_LOOKUP_FAMILY as i32;
    let cares =
        CaresDnsResolverConfig { udp_max_queries: Some(mesh.dns_resolver.udp_max_queries), ..Default::default() };
    c.typed_dns_resolver_config =
        Some(core::TypedExtensionConfig { name: CARES.into(), typed_config: Some(super::envoy::any(&cares)) });
    c.dns_jitter = Some(duration(mesh.dns_resolver.jitter));
    c.dns_refresh_rate = Some(duration(mesh.dns_refresh_rate));
    c.respect_dns_ttl = true;
}
