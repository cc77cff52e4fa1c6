//! `networking.istio.io` specs: VirtualService, DestinationRule, Gateway,
//! ServiceEntry, WorkloadEntry and Sidecar, with the field names of Istio's
//! API (the JSON names of `istio.networking.v1alpha3`, which `v1beta1` and
//! `v1` share).
//!
//! Every struct rejects fields it does not know. A proto3 scalar that is
//! absent reads as its zero value (`""`, `0`, `false`, the first enum
//! value), as in istiod; a message, a `oneof` member or a wrapper type
//! (`BoolValue`, `UInt32Value`...) is an `Option`. Durations are the
//! strings written (`"10s"`), checked by [`super::validate`].

use std::collections::BTreeMap;

use serde::Deserialize;

// ------------------------------------------------------------------ VirtualService

/// A VirtualService: routing rules for traffic addressed to some hosts.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct VirtualService {
    /// Destination hosts the rules apply to (none: a delegate VirtualService).
    pub hosts: Vec<String>,
    /// Gateways (`namespace/name`, or `mesh` for sidecars) the rules apply to.
    pub gateways: Vec<String>,
    /// HTTP rules, first match wins.
    pub http: Vec<HttpRoute>,
    /// TLS (SNI) passthrough rules.
    pub tls: Vec<TlsRoute>,
    /// TCP rules.
    pub tcp: Vec<TcpRoute>,
    /// Namespaces the rules are visible to (`.`, `*` or names).
    pub export_to: Vec<String>,
}

/// `Destination`: a service (and optionally subset and port) to send to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Destination {
    /// Service host name from the registry (short names resolve against the rule's namespace).
    pub host: String,
    /// Subset named in a DestinationRule.
    pub subset: String,
    /// Port on the host.
    pub port: Option<PortSelector>,
}

/// `PortSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PortSelector {
    /// Port number.
    pub number: u32,
}

/// `HTTPRoute`: one HTTP rule.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpRoute {
    /// Name (for logs and the route name).
    pub name: String,
    /// Match conditions, ORed (none: matches everything).
    #[serde(rename = "match")]
    pub matches: Vec<HttpMatchRequest>,
    /// Weighted destinations.
    pub route: Vec<HttpRouteDestination>,
    /// Redirect instead of forwarding.
    pub redirect: Option<HttpRedirect>,
    /// Answer directly instead of forwarding.
    pub direct_response: Option<HttpDirectResponse>,
    /// Hand the rest of the routing to another (delegate) VirtualService.
    pub delegate: Option<Delegate>,
    /// Rewrite the URI or authority before forwarding.
    pub rewrite: Option<HttpRewrite>,
    /// Request timeout (duration).
    pub timeout: Option<String>,
    /// Retry policy.
    pub retries: Option<HttpRetry>,
    /// Fault injection.
    pub fault: Option<HttpFaultInjection>,
    /// Mirror traffic to this destination.
    pub mirror: Option<Destination>,
    /// Mirror traffic to these destinations.
    pub mirrors: Vec<HttpMirrorPolicy>,
    /// Deprecated integer mirror percentage (`mirror_percent` is accepted too).
    #[serde(alias = "mirror_percent")]
    pub mirror_percent: Option<u32>,
    /// Share of traffic mirrored (0 to 100).
    pub mirror_percentage: Option<Percent>,
    /// CORS policy.
    pub cors_policy: Option<CorsPolicy>,
    /// Header manipulation.
    pub headers: Option<Headers>,
}

/// `Delegate`: the VirtualService an HTTP rule delegates to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Delegate {
    /// Its name.
    pub name: String,
    /// Its namespace (default: the rule's).
    pub namespace: String,
}

/// `Headers`: header manipulation on requests and responses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Headers {
    /// On the request.
    pub request: Option<HeaderOperations>,
    /// On the response.
    pub response: Option<HeaderOperations>,
}

/// `Headers.HeaderOperations`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HeaderOperations {
    /// Set (replace) these headers.
    pub set: BTreeMap<String, String>,
    /// Append these headers.
    pub add: BTreeMap<String, String>,
    /// Remove these headers.
    pub remove: Vec<String>,
}

/// `TLSRoute`: a rule for TLS traffic, by SNI.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsRoute {
    /// Match conditions (at least one).
    #[serde(rename = "match")]
    pub matches: Vec<TlsMatchAttributes>,
    /// Weighted destinations.
    pub route: Vec<RouteDestination>,
}

/// `TCPRoute`: a rule for opaque TCP traffic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TcpRoute {
    /// Match conditions.
    #[serde(rename = "match")]
    pub matches: Vec<L4MatchAttributes>,
    /// Weighted destinations.
    pub route: Vec<RouteDestination>,
}

/// `HTTPMatchRequest`: conditions on a request, ANDed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpMatchRequest {
    /// Name (appended to the route name).
    pub name: String,
    /// Path.
    pub uri: Option<StringMatch>,
    /// Scheme.
    pub scheme: Option<StringMatch>,
    /// Method.
    pub method: Option<StringMatch>,
    /// Authority (host).
    pub authority: Option<StringMatch>,
    /// Headers that must match (keys lower case).
    pub headers: BTreeMap<String, StringMatch>,
    /// Port the request arrived on.
    pub port: u32,
    /// Labels of the calling workload.
    pub source_labels: BTreeMap<String, String>,
    /// Gateways this condition applies to.
    pub gateways: Vec<String>,
    /// Query parameters that must match.
    pub query_params: BTreeMap<String, StringMatch>,
    /// Match the URI case-insensitively.
    pub ignore_uri_case: bool,
    /// Headers that must not match.
    pub without_headers: BTreeMap<String, StringMatch>,
    /// Namespace of the calling workload.
    pub source_namespace: String,
    /// Stat prefix for this match.
    pub stat_prefix: String,
}

/// `HTTPRouteDestination`: a destination with its share of traffic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpRouteDestination {
    /// Where to send (required).
    pub destination: Option<Destination>,
    /// Relative weight (absent: 0; a single destination gets everything).
    pub weight: i32,
    /// Header manipulation for this destination.
    pub headers: Option<Headers>,
}

/// `RouteDestination`: a TCP/TLS destination with its share of traffic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RouteDestination {
    /// Where to send (required).
    pub destination: Option<Destination>,
    /// Relative weight.
    pub weight: i32,
}

/// `L4MatchAttributes`: conditions on a TCP connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct L4MatchAttributes {
    /// Destination IPs or CIDRs.
    pub destination_subnets: Vec<String>,
    /// Destination port.
    pub port: u32,
    /// Source IP or CIDR.
    pub source_subnet: String,
    /// Labels of the calling workload.
    pub source_labels: BTreeMap<String, String>,
    /// Gateways this condition applies to.
    pub gateways: Vec<String>,
    /// Namespace of the calling workload.
    pub source_namespace: String,
}

/// `TLSMatchAttributes`: conditions on a TLS connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsMatchAttributes {
    /// SNI values (required).
    pub sni_hosts: Vec<String>,
    /// Destination IPs or CIDRs.
    pub destination_subnets: Vec<String>,
    /// Destination port.
    pub port: u32,
    /// Labels of the calling workload.
    pub source_labels: BTreeMap<String, String>,
    /// Gateways this condition applies to.
    pub gateways: Vec<String>,
    /// Namespace of the calling workload.
    pub source_namespace: String,
}

/// `HTTPRedirect`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpRedirect {
    /// Replace the whole path.
    pub uri: String,
    /// Replace the authority.
    pub authority: String,
    /// Redirect to this port (one of `port`, `derivePort`).
    pub port: Option<u32>,
    /// Derive the port from the protocol or the request.
    pub derive_port: Option<RedirectPortSelection>,
    /// Replace the scheme (`http` or `https`).
    pub scheme: String,
    /// Status code (default 301).
    pub redirect_code: u32,
    /// Replace the matched prefix of the path.
    pub prefix_rewrite: String,
}

/// `HTTPRedirect.RedirectPortSelection`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum RedirectPortSelection {
    /// The default port of the scheme.
    #[default]
    #[serde(rename = "FROM_PROTOCOL_DEFAULT")]
    FromProtocolDefault,
    /// The port of the request.
    #[serde(rename = "FROM_REQUEST_PORT")]
    FromRequestPort,
}

/// `HTTPDirectResponse`: a fixed answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpDirectResponse {
    /// Status code (required).
    pub status: u32,
    /// Body.
    pub body: Option<HttpBody>,
}

/// `HTTPBody`: one of `string` or `bytes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpBody {
    /// Body as text.
    pub string: Option<String>,
    /// Body as base64.
    pub bytes: Option<String>,
}

/// `HTTPRewrite`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpRewrite {
    /// Replace the matched path or prefix.
    pub uri: String,
    /// Replace the authority.
    pub authority: String,
    /// Rewrite the path with a regex.
    pub uri_regex_rewrite: Option<RegexRewrite>,
}

/// `RegexRewrite`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RegexRewrite {
    /// RE2 regex to match.
    #[serde(rename = "match")]
    pub pattern: String,
    /// Replacement (may use capture groups `\1`).
    pub rewrite: String,
}

/// `StringMatch`: one of `exact`, `prefix` or `regex` (RE2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct StringMatch {
    /// Exact value.
    pub exact: Option<String>,
    /// Prefix.
    pub prefix: Option<String>,
    /// RE2 regex.
    pub regex: Option<String>,
}

/// `HTTPRetry`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpRetry {
    /// Number of retries (0 disables them).
    pub attempts: i32,
    /// Timeout per attempt (duration).
    pub per_try_timeout: Option<String>,
    /// Retry conditions, comma-separated (`5xx,connect-failure`, status codes).
    pub retry_on: String,
    /// Retry on other localities.
    pub retry_remote_localities: Option<bool>,
    /// Avoid hosts already tried.
    pub retry_ignore_previous_hosts: Option<bool>,
    /// Base interval between retries (duration).
    pub backoff: Option<String>,
}

/// `CorsPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct CorsPolicy {
    /// Deprecated exact origins.
    pub allow_origin: Vec<String>,
    /// Allowed origins.
    pub allow_origins: Vec<StringMatch>,
    /// Allowed methods.
    pub allow_methods: Vec<String>,
    /// Allowed request headers.
    pub allow_headers: Vec<String>,
    /// Headers the browser may read.
    pub expose_headers: Vec<String>,
    /// How long a preflight answer may be cached (duration, whole seconds).
    pub max_age: Option<String>,
    /// Whether credentials may be sent.
    pub allow_credentials: Option<bool>,
    /// What to do with a preflight that does not match.
    pub unmatched_preflights: UnmatchedPreflights,
}

/// `CorsPolicy.UnmatchedPreflights`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum UnmatchedPreflights {
    /// Default (forward).
    #[default]
    #[serde(rename = "UNSPECIFIED")]
    Unspecified,
    /// Forward to the upstream.
    #[serde(rename = "FORWARD")]
    Forward,
    /// Answer with 200 and no CORS headers.
    #[serde(rename = "IGNORE")]
    Ignore,
}

/// `HTTPFaultInjection`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpFaultInjection {
    /// Delay requests.
    pub delay: Option<FaultDelay>,
    /// Fail requests.
    pub abort: Option<FaultAbort>,
}

/// `HTTPFaultInjection.Delay`: one of `fixedDelay`, `exponentialDelay`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct FaultDelay {
    /// Deprecated integer percentage.
    pub percent: i32,
    /// Delay (duration).
    pub fixed_delay: Option<String>,
    /// Exponential delay (duration; not supported by istiod).
    pub exponential_delay: Option<String>,
    /// Share of requests delayed.
    pub percentage: Option<Percent>,
}

/// `HTTPFaultInjection.Abort`: one of `httpStatus`, `grpcStatus`, `http2Error`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct FaultAbort {
    /// HTTP status to answer with.
    pub http_status: Option<i32>,
    /// gRPC status name (`UNAVAILABLE`...).
    pub grpc_status: Option<String>,
    /// HTTP/2 error (not supported by istiod).
    pub http2_error: Option<String>,
    /// Share of requests aborted.
    pub percentage: Option<Percent>,
}

/// `HTTPMirrorPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpMirrorPolicy {
    /// Where to mirror (required).
    pub destination: Option<Destination>,
    /// Share of traffic mirrored.
    pub percentage: Option<Percent>,
}

/// `Percent`: a percentage, 0.0 to 100.0.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Percent {
    /// The percentage.
    pub value: f64,
}

// ------------------------------------------------------------------ DestinationRule

/// A DestinationRule: policies for traffic to a host, and its subsets.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct DestinationRule {
    /// Service host name (required).
    pub host: String,
    /// Policies for the whole host.
    pub traffic_policy: Option<TrafficPolicy>,
    /// Named subsets (by endpoint labels), each with optional overrides.
    pub subsets: Vec<Subset>,
    /// Namespaces the rule is visible to.
    pub export_to: Vec<String>,
    /// Apply only to these workloads (as clients).
    pub workload_selector: Option<super::WorkloadSelector>,
}

/// `TrafficPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TrafficPolicy {
    /// Load balancing.
    pub load_balancer: Option<LoadBalancerSettings>,
    /// Connection pool limits.
    pub connection_pool: Option<ConnectionPoolSettings>,
    /// Outlier detection (passive health checking).
    pub outlier_detection: Option<OutlierDetection>,
    /// TLS to the upstream.
    pub tls: Option<ClientTlsSettings>,
    /// Overrides per destination port.
    pub port_level_settings: Vec<PortTrafficPolicy>,
    /// Tunnel (HTTP CONNECT or POST) to the upstream.
    pub tunnel: Option<TunnelSettings>,
    /// Send the PROXY protocol header upstream.
    pub proxy_protocol: Option<ProxyProtocol>,
    /// Limit on concurrent retries.
    pub retry_budget: Option<RetryBudget>,
}

/// `TrafficPolicy.PortTrafficPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PortTrafficPolicy {
    /// The port (required).
    pub port: Option<PortSelector>,
    /// Load balancing.
    pub load_balancer: Option<LoadBalancerSettings>,
    /// Connection pool limits.
    pub connection_pool: Option<ConnectionPoolSettings>,
    /// Outlier detection.
    pub outlier_detection: Option<OutlierDetection>,
    /// TLS to the upstream.
    pub tls: Option<ClientTlsSettings>,
}

/// `TrafficPolicy.TunnelSettings`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TunnelSettings {
    /// `CONNECT` (default) or `POST`.
    pub protocol: String,
    /// Host of the tunnel endpoint (FQDN or IP).
    pub target_host: String,
    /// Port of the tunnel endpoint.
    pub target_port: u32,
}

/// `TrafficPolicy.ProxyProtocol`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ProxyProtocol {
    /// Version.
    pub version: ProxyProtocolVersion,
}

/// `TrafficPolicy.ProxyProtocol.VERSION`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum ProxyProtocolVersion {
    /// Version 1 (text).
    #[default]
    V1,
    /// Version 2 (binary).
    V2,
}

/// `TrafficPolicy.RetryBudget`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RetryBudget {
    /// Share of active requests that may be retries (0 to 100).
    pub percent: Option<f64>,
    /// Retries always allowed.
    pub min_retry_concurrency: u32,
    /// Window of the budget (duration).
    pub budget_interval: Option<String>,
}

/// `Subset`: endpoints of the host selected by labels.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Subset {
    /// Name (required, a DNS label).
    pub name: String,
    /// Endpoint labels.
    pub labels: BTreeMap<String, String>,
    /// Overrides of the host's policies.
    pub traffic_policy: Option<TrafficPolicy>,
}

/// `LoadBalancerSettings`: one of `simple`, `consistentHash`, plus locality settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LoadBalancerSettings {
    /// A standard algorithm.
    pub simple: Option<SimpleLb>,
    /// Session affinity by hashing.
    pub consistent_hash: Option<ConsistentHashLb>,
    /// Locality weighting and failover.
    pub locality_lb_setting: Option<LocalityLoadBalancerSetting>,
    /// Zone-aware routing (alternative to `localityLbSetting`).
    pub zone_aware_lb_setting: Option<ZoneAwareLoadBalancerSetting>,
    /// Slow start window for new endpoints (duration).
    pub warmup_duration_secs: Option<String>,
    /// Slow start settings.
    pub warmup: Option<WarmupConfiguration>,
    /// Utilization-based balancing from ORCA metrics (kept as written;
    /// not translated yet).
    pub backend_utilization: Option<BackendUtilization>,
}

/// `LoadBalancerSettings.BackendUtilization`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct BackendUtilization {
    /// Penalty for endpoints returning errors, in percent of utilization.
    pub error_utilization_penalty_percent: Option<u32>,
    /// ORCA metric names the utilization is computed from.
    pub metric_names_for_computing_utilization: Vec<String>,
    /// Weight expiry (duration).
    pub weight_expiration_period: Option<String>,
    /// Blackout before a new weight is trusted (duration).
    pub weight_stabilization_period: Option<String>,
    /// Weight recomputation period (duration).
    pub weight_update_period: Option<String>,
}

/// `LoadBalancerSettings.SimpleLB`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum SimpleLb {
    /// Let the proxy choose (least request).
    #[default]
    #[serde(rename = "UNSPECIFIED")]
    Unspecified,
    /// Deprecated name of least request.
    #[serde(rename = "LEAST_CONN")]
    LeastConn,
    /// Random.
    #[serde(rename = "RANDOM")]
    Random,
    /// Forward to the original destination address.
    #[serde(rename = "PASSTHROUGH")]
    Passthrough,
    /// Round robin.
    #[serde(rename = "ROUND_ROBIN")]
    RoundRobin,
    /// Least outstanding requests.
    #[serde(rename = "LEAST_REQUEST")]
    LeastRequest,
}

/// `LoadBalancerSettings.ConsistentHashLB`: one hash key, one optional algorithm.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ConsistentHashLb {
    /// Hash on this header.
    pub http_header_name: Option<String>,
    /// Hash on this cookie (created if absent).
    pub http_cookie: Option<HttpCookie>,
    /// Hash on the source IP.
    pub use_source_ip: Option<bool>,
    /// Hash on this query parameter.
    pub http_query_parameter_name: Option<String>,
    /// Ring hash algorithm.
    pub ring_hash: Option<RingHash>,
    /// Maglev algorithm.
    pub maglev: Option<MagLev>,
    /// Deprecated ring size (use `ringHash`).
    pub minimum_ring_size: u64,
}

/// `ConsistentHashLB.RingHash`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RingHash {
    /// Minimum number of virtual nodes.
    pub minimum_ring_size: u64,
}

/// `ConsistentHashLB.MagLev`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MagLev {
    /// Table size (a prime).
    pub table_size: u64,
}

/// `ConsistentHashLB.HTTPCookie`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpCookie {
    /// Cookie name (required).
    pub name: String,
    /// Cookie path.
    pub path: String,
    /// Lifetime of a generated cookie (duration; `0s` makes a session cookie).
    pub ttl: Option<String>,
    /// Extra attributes of a generated cookie.
    pub attributes: Vec<CookieAttribute>,
}

/// `ConsistentHashLB.HTTPCookie.Attribute`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct CookieAttribute {
    /// Name (required).
    pub name: String,
    /// Value.
    pub value: String,
}

/// `WarmupConfiguration`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct WarmupConfiguration {
    /// Warmup window (duration, required).
    pub duration: Option<String>,
    /// Starting share of traffic (0 to 100).
    pub minimum_percent: Option<f64>,
    /// Curve of the ramp (> 0).
    pub aggression: Option<f64>,
}

/// `ConnectionPoolSettings`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ConnectionPoolSettings {
    /// TCP limits (HTTP too).
    pub tcp: Option<TcpSettings>,
    /// HTTP limits.
    pub http: Option<HttpSettings>,
}

/// `ConnectionPoolSettings.TCPSettings`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TcpSettings {
    /// Maximum connections to each host.
    pub max_connections: i32,
    /// Connect timeout (duration).
    pub connect_timeout: Option<String>,
    /// TCP keepalive.
    pub tcp_keepalive: Option<TcpKeepalive>,
    /// Maximum connection lifetime (duration).
    pub max_connection_duration: Option<String>,
    /// Idle timeout (duration; `0s` disables it).
    pub idle_timeout: Option<String>,
}

/// `ConnectionPoolSettings.TCPSettings.TcpKeepalive`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TcpKeepalive {
    /// Unanswered probes before the connection is dropped.
    pub probes: u32,
    /// Idle time before the first probe (duration).
    pub time: Option<String>,
    /// Interval between probes (duration).
    pub interval: Option<String>,
}

/// `ConnectionPoolSettings.HTTPSettings`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpSettings {
    /// Maximum queued requests.
    pub http1_max_pending_requests: i32,
    /// Maximum active requests.
    pub http2_max_requests: i32,
    /// Maximum requests per connection (0: unlimited).
    pub max_requests_per_connection: i32,
    /// Maximum outstanding retries.
    pub max_retries: i32,
    /// Idle timeout (duration).
    pub idle_timeout: Option<String>,
    /// Whether to upgrade HTTP/1.1 to HTTP/2.
    pub h2_upgrade_policy: H2UpgradePolicy,
    /// Use the client's protocol upstream.
    pub use_client_protocol: bool,
    /// Maximum concurrent streams per HTTP/2 connection.
    pub max_concurrent_streams: i32,
    /// HTTP/2 keepalive pings.
    pub http2_keep_alive: Option<ConnectionKeepalive>,
}

/// `ConnectionPoolSettings.HTTPSettings.H2UpgradePolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum H2UpgradePolicy {
    /// The mesh default.
    #[default]
    #[serde(rename = "DEFAULT")]
    Default,
    /// Never upgrade.
    #[serde(rename = "DO_NOT_UPGRADE")]
    DoNotUpgrade,
    /// Upgrade.
    #[serde(rename = "UPGRADE")]
    Upgrade,
}

/// `ConnectionPoolSettings.HTTPSettings.ConnectionKeepalive`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ConnectionKeepalive {
    /// Ping interval (duration, required).
    pub interval: Option<String>,
    /// Ping timeout (duration, required).
    pub timeout: Option<String>,
}

/// `OutlierDetection`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct OutlierDetection {
    /// Deprecated: use `consecutiveGatewayErrors` or `consecutive5xxErrors`.
    pub consecutive_errors: i32,
    /// Count local-origin failures separately.
    pub split_external_local_origin_errors: bool,
    /// Local-origin failures before ejection.
    pub consecutive_local_origin_failures: Option<u32>,
    /// 502/503/504 before ejection.
    pub consecutive_gateway_errors: Option<u32>,
    /// 5xx before ejection.
    #[serde(rename = "consecutive5xxErrors")]
    pub consecutive_5xx_errors: Option<u32>,
    /// Sweep interval (duration).
    pub interval: Option<String>,
    /// Minimum ejection time (duration).
    pub base_ejection_time: Option<String>,
    /// Maximum share of hosts ejected (0 to 100).
    pub max_ejection_percent: i32,
    /// Disable ejection below this share of healthy hosts (0 to 100).
    pub min_health_percent: i32,
    /// Status codes counted as errors.
    pub outlier_detection_http_error_codes: Vec<u32>,
}

/// `ClientTLSSettings`: TLS from the proxy to the upstream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ClientTlsSettings {
    /// Mode.
    pub mode: ClientTlsMode,
    /// Client certificate file (`MUTUAL`).
    pub client_certificate: String,
    /// Private key file (`MUTUAL`).
    pub private_key: String,
    /// CA bundle file to verify the server.
    pub ca_certificates: String,
    /// Secret holding the certificates (instead of files).
    pub credential_name: String,
    /// Names the server certificate must carry.
    pub subject_alt_names: Vec<String>,
    /// SNI to send.
    pub sni: String,
    /// Do not verify the server certificate.
    pub insecure_skip_verify: Option<bool>,
    /// CRL file.
    pub ca_crl: String,
}

/// `ClientTLSSettings.TLSmode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum ClientTlsMode {
    /// Plain text.
    #[default]
    #[serde(rename = "DISABLE")]
    Disable,
    /// TLS, server authenticated.
    #[serde(rename = "SIMPLE")]
    Simple,
    /// Mutual TLS with given certificates.
    #[serde(rename = "MUTUAL")]
    Mutual,
    /// Mutual TLS with the mesh's certificates.
    #[serde(rename = "ISTIO_MUTUAL")]
    IstioMutual,
}

/// `LocalityLoadBalancerSetting`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LocalityLoadBalancerSetting {
    /// Traffic shares by locality (exclusive with `failover`).
    pub distribute: Vec<LocalityDistribute>,
    /// Region failover order.
    pub failover: Vec<LocalityFailover>,
    /// Labels ordering endpoints by priority.
    pub failover_priority: Vec<String>,
    /// Enable or disable locality load balancing.
    pub enabled: Option<bool>,
}

/// `LocalityLoadBalancerSetting.Distribute`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LocalityDistribute {
    /// Source locality (`region/zone/subzone`, `*` allowed at the end).
    pub from: String,
    /// Destination localities and their weights (summing to 100).
    pub to: BTreeMap<String, u32>,
}

/// `LocalityLoadBalancerSetting.Failover` (also `ZoneAwareLoadBalancerSetting.Failover`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LocalityFailover {
    /// Region that fails over.
    pub from: String,
    /// Region it fails over to.
    pub to: String,
}

/// `ZoneAwareLoadBalancerSetting`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ZoneAwareLoadBalancerSetting {
    /// Enable or disable it.
    pub enabled: Option<bool>,
    /// Region failover order.
    pub failover: Vec<LocalityFailover>,
    /// Labels ordering endpoints by priority.
    pub failover_priority: Vec<String>,
    /// Minimum cluster size for zone-aware routing.
    pub min_cluster_size: Option<u64>,
}

// ------------------------------------------------------------------ Gateway

/// A Gateway: listeners of an ingress or egress gateway.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Gateway {
    /// Listeners.
    pub servers: Vec<Server>,
    /// Labels of the gateway pods this applies to.
    pub selector: BTreeMap<String, String>,
}

/// `Server`: one listener.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Server {
    /// Port (required).
    pub port: Option<Port>,
    /// Address or `unix://` socket to bind.
    pub bind: String,
    /// Hosts exposed (`namespace/host`, or a host).
    pub hosts: Vec<String>,
    /// TLS settings.
    pub tls: Option<ServerTlsSettings>,
    /// Default endpoint.
    pub default_endpoint: String,
    /// Name.
    pub name: String,
}

/// `Port` of a Gateway server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Port {
    /// Number.
    pub number: u32,
    /// Protocol (`HTTP`, `HTTPS`, `GRPC`, `HTTP2`, `MONGO`, `TCP`, `TLS`).
    pub protocol: String,
    /// Name.
    pub name: String,
    /// Deprecated, no effect on Gateways.
    pub target_port: u32,
}

/// `ServerTLSSettings`: TLS terminated (or passed through) by a listener.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ServerTlsSettings {
    /// Redirect plain HTTP to HTTPS.
    pub https_redirect: bool,
    /// Mode.
    pub mode: ServerTlsMode,
    /// Server certificate file.
    pub server_certificate: String,
    /// Private key file.
    pub private_key: String,
    /// CA bundle to verify clients.
    pub ca_certificates: String,
    /// CRL file.
    pub ca_crl: String,
    /// Secret holding the certificates.
    pub credential_name: String,
    /// Secrets holding certificates (up to 2).
    pub credential_names: Vec<String>,
    /// Secret holding the client CA only.
    pub ca_cert_credential_name: String,
    /// Certificate files (up to 2).
    pub tls_certificates: Vec<TlsCertificate>,
    /// Names a client certificate must carry.
    pub subject_alt_names: Vec<String>,
    /// Accepted client certificate SPKI hashes.
    pub verify_certificate_spki: Vec<String>,
    /// Accepted client certificate hashes.
    pub verify_certificate_hash: Vec<String>,
    /// Minimum TLS version.
    pub min_protocol_version: TlsProtocol,
    /// Maximum TLS version.
    pub max_protocol_version: TlsProtocol,
    /// Cipher suites.
    pub cipher_suites: Vec<String>,
    /// Do not verify client certificates.
    pub insecure_skip_verify: Option<bool>,
    /// ECDH curves offered.
    pub ecdh_curves: Vec<String>,
}

/// `ServerTLSSettings.TLSmode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum ServerTlsMode {
    /// Forward the TLS connection by SNI.
    #[default]
    #[serde(rename = "PASSTHROUGH")]
    Passthrough,
    /// Terminate TLS.
    #[serde(rename = "SIMPLE")]
    Simple,
    /// Terminate mutual TLS.
    #[serde(rename = "MUTUAL")]
    Mutual,
    /// Forward by SNI to the service the SNI names.
    #[serde(rename = "AUTO_PASSTHROUGH")]
    AutoPassthrough,
    /// Mutual TLS with the mesh's certificates.
    #[serde(rename = "ISTIO_MUTUAL")]
    IstioMutual,
    /// Mutual TLS if the client presents a certificate.
    #[serde(rename = "OPTIONAL_MUTUAL")]
    OptionalMutual,
}

/// `ServerTLSSettings.TLSCertificate`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsCertificate {
    /// Server certificate file.
    pub server_certificate: String,
    /// Private key file.
    pub private_key: String,
    /// CA bundle file.
    pub ca_certificates: String,
}

/// `ServerTLSSettings.TLSProtocol`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum TlsProtocol {
    /// The proxy's default.
    #[default]
    #[serde(rename = "TLS_AUTO")]
    Auto,
    /// TLS 1.0.
    #[serde(rename = "TLSV1_0")]
    Tls10,
    /// TLS 1.1.
    #[serde(rename = "TLSV1_1")]
    Tls11,
    /// TLS 1.2.
    #[serde(rename = "TLSV1_2")]
    Tls12,
    /// TLS 1.3.
    #[serde(rename = "TLSV1_3")]
    Tls13,
}

// ------------------------------------------------------------------ ServiceEntry, WorkloadEntry

/// A ServiceEntry: a service added to the mesh's registry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceEntry {
    /// Host names (required).
    pub hosts: Vec<String>,
    /// Virtual IPs or CIDRs.
    pub addresses: Vec<String>,
    /// Ports.
    pub ports: Vec<ServicePort>,
    /// Inside or outside the mesh.
    pub location: Location,
    /// How endpoints are found.
    pub resolution: Resolution,
    /// Endpoints (exclusive with `workloadSelector`).
    pub endpoints: Vec<WorkloadEntry>,
    /// Select pods and WorkloadEntries as endpoints.
    pub workload_selector: Option<WorkloadSelector>,
    /// Namespaces the service is visible to (`~`: none).
    pub export_to: Vec<String>,
    /// Names the endpoints' certificates must carry.
    pub subject_alt_names: Vec<String>,
    /// Not of the spec: the addresses istiod's `ipallocate` controller
    /// wrote to `status.addresses` (`{host, value}`), by host.
    #[serde(skip)]
    pub allocated: Vec<(String, String)>,
}

/// `ServicePort`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ServicePort {
    /// Number (required).
    pub number: u32,
    /// Protocol (empty: detected).
    pub protocol: String,
    /// Name (required, a DNS label).
    pub name: String,
    /// Port on the endpoints (default: `number`).
    pub target_port: u32,
}

/// `ServiceEntry.Location`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum Location {
    /// Outside the mesh (no mTLS).
    #[default]
    #[serde(rename = "MESH_EXTERNAL")]
    MeshExternal,
    /// Part of the mesh.
    #[serde(rename = "MESH_INTERNAL")]
    MeshInternal,
}

/// `ServiceEntry.Resolution`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum Resolution {
    /// Forward to the original destination IP.
    #[default]
    #[serde(rename = "NONE")]
    None,
    /// The listed endpoint IPs.
    #[serde(rename = "STATIC")]
    Static,
    /// Resolve the hosts (or endpoint names) by DNS, all addresses.
    #[serde(rename = "DNS")]
    Dns,
    /// Resolve by DNS, one address at a time.
    #[serde(rename = "DNS_ROUND_ROBIN")]
    DnsRoundRobin,
    /// Resolve each request's host by DNS (wildcard hosts).
    #[serde(rename = "DYNAMIC_DNS")]
    DynamicDns,
}

impl Resolution {
    /// The name in the API.
    pub fn name(self) -> &'static str {
        match self {
            Resolution::None => "NONE",
            Resolution::Static => "STATIC",
            Resolution::Dns => "DNS",
            Resolution::DnsRoundRobin => "DNS_ROUND_ROBIN",
            Resolution::DynamicDns => "DYNAMIC_DNS",
        }
    }
}

/// A WorkloadEntry: a workload outside Kubernetes (also a ServiceEntry endpoint).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadEntry {
    /// IP, host name or `unix://` socket.
    pub address: String,
    /// Port by service port name.
    pub ports: BTreeMap<String, u32>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Network the address belongs to.
    pub network: String,
    /// Locality (`region/zone/subzone`).
    pub locality: String,
    /// Load balancing weight.
    pub weight: u32,
    /// Service account (identity).
    pub service_account: String,
    /// Not of the spec: the object's `Healthy` condition
    /// (`status.conditions`), which istiod's health checks write; `None`
    /// when it has none. See [`WorkloadEntry::serves`].
    #[serde(skip)]
    pub healthy: Option<bool>,
    /// Not of the spec: health gates the endpoint (the object's
    /// `proxy.istio.io/health-checks-enabled` annotation reads true as
    /// Go's `strconv.ParseBool`).
    #[serde(skip)]
    pub health_checked: bool,
}

/// The annotation that lets health reports gate a WorkloadEntry.
pub const HEALTH_CHECKS_ENABLED: &str = "proxy.istio.io/health-checks-enabled";

impl WorkloadEntry {
    /// Whether the entry is an endpoint (istiod's serviceentry `isHealthy`):
    /// one whose health is checked only once its `Healthy` condition says
    /// so, any other always.
    pub fn serves(&self) -> bool {
        !self.health_checked || self.healthy == Some(true)
    }
}

/// Go's `strconv.ParseBool` true values.
pub fn parse_bool_true(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

/// `WorkloadSelector` of the networking kinds (ServiceEntry, Sidecar).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadSelector {
    /// Labels a workload must carry (all of them).
    pub labels: BTreeMap<String, String>,
}

// ------------------------------------------------------------------ Sidecar

/// A Sidecar: what the proxies of some workloads listen on and may reach.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Sidecar {
    /// Workloads it applies to (none: the namespace default).
    pub workload_selector: Option<WorkloadSelector>,
    /// Inbound listeners.
    pub ingress: Vec<IstioIngressListener>,
    /// Outbound listeners and the hosts they may reach.
    pub egress: Vec<IstioEgressListener>,
    /// Connection pool for all inbound traffic.
    pub inbound_connection_pool: Option<ConnectionPoolSettings>,
    /// Traffic to hosts outside the registry.
    pub outbound_traffic_policy: Option<OutboundTrafficPolicy>,
}

/// `IstioIngressListener`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct IstioIngressListener {
    /// Port (required).
    pub port: Option<SidecarPort>,
    /// Address to bind.
    pub bind: String,
    /// How traffic is captured.
    pub capture_mode: CaptureMode,
    /// Where to forward (`127.0.0.1:PORT`, `0.0.0.0:PORT`, `unix://...`).
    pub default_endpoint: String,
    /// TLS terminated by the proxy.
    pub tls: Option<ServerTlsSettings>,
    /// Connection pool for this port.
    pub connection_pool: Option<ConnectionPoolSettings>,
}

/// `IstioEgressListener`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct IstioEgressListener {
    /// Port (none: the catch-all listener, which must be last).
    pub port: Option<SidecarPort>,
    /// Address or `unix://` socket to bind.
    pub bind: String,
    /// How traffic is captured.
    pub capture_mode: CaptureMode,
    /// Reachable hosts as `namespace/dnsName` (required).
    pub hosts: Vec<String>,
}

/// `SidecarPort`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct SidecarPort {
    /// Number.
    pub number: u32,
    /// Protocol.
    pub protocol: String,
    /// Name.
    pub name: String,
    /// Deprecated, no effect on Sidecars.
    pub target_port: u32,
}

/// `CaptureMode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum CaptureMode {
    /// The environment's default.
    #[default]
    #[serde(rename = "DEFAULT")]
    Default,
    /// Captured by iptables.
    #[serde(rename = "IPTABLES")]
    Iptables,
    /// Not captured: the application addresses the proxy.
    #[serde(rename = "NONE")]
    None,
}

/// `OutboundTrafficPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct OutboundTrafficPolicy {
    /// Mode.
    pub mode: OutboundTrafficMode,
    /// Send unknown traffic through this proxy (`ALLOW_ANY` only).
    pub egress_proxy: Option<Destination>,
}

/// `OutboundTrafficPolicy.Mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum OutboundTrafficMode {
    /// Only hosts in the registry are reachable.
    #[default]
    #[serde(rename = "REGISTRY_ONLY")]
    RegistryOnly,
    /// Unknown hosts are passed through.
    #[serde(rename = "ALLOW_ANY")]
    AllowAny,
    /// The mesh-level mode, which istiod's validation refuses here.
    #[serde(rename = "ALLOW_ANY_DYNAMIC_DNS")]
    AllowAnyDynamicDns,
}
