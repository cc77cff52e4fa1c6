//! RDS: route configurations from VirtualServices, after istiod's
//! `httproute.go` and `route/route.go`: a virtual host per service port
//! with the names a client may dial, the VirtualService's HTTP routes
//! (matches, weighted destinations, retries, timeouts, faults, mirrors,
//! rewrites, redirects, header changes) or a default route, and the
//! `allow_any` / `block_all` fallback host. Envoy sidecars and proxyless
//! gRPC differ in what they support ([`Flavor`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use istiod_kubewatch::istio::IstioObject;
use istiod_kubewatch::istio::networking::{DestinationRule, HttpRoute, StringMatch, VirtualService};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::route::v3 as route;
use istiod_proto::envoy::extensions::filters::common::fault::v3 as common_fault;
use istiod_proto::envoy::extensions::filters::http::fault::v3 as fault;
use istiod_proto::envoy::r#type::matcher::v3 as matcher;
use istiod_proto::envoy::r#type::v3 as types;
use istiod_proto::prost::Message;
use istiod_proto::prost_types::Duration;

use crate::node::ProxyClass;

use crate::mesh::OutboundPolicy;
use crate::model::{Model, Service};

use super::envoy::any;

/// Envoy's fault filter (also in proxyless gRPC's filter chain).
pub(crate) const FAULT_FILTER: &str = "envoy.filters.http.fault";

/// The names a client in namespace `proxy_ns` may dial to reach `svc` on
/// `port`, as istiod's `generateVirtualHostDomains` (httproute.go) makes
/// them: the FQDN and its absolute form (`<fqdn>.`), the short names a
/// resolver's search path completes (`reviews`, `reviews.ns.svc`,
/// `reviews.ns` from the service's own namespace; `reviews.ns`,
/// `reviews.ns.svc` from others), `*.`-prefixed forms for headless
/// Kubernetes services (not ServiceEntries), and the VIPs (IPv6 in brackets). Envoy sidecars
/// match hosts without the port (the route configuration sets
/// `ignore_port_in_host_matching`); proxyless gRPC matches the
/// `:authority` it dialed, so each name is followed by its `:<port>` form.
pub(crate) fn domains(model: &Model, svc: &Service, port: u16, proxy_ns: &str, flavor: Flavor) -> Vec<String> {
    let mut names = vec![svc.hostname.to_string(), format!("{}.", svc.hostname)];
    let suffix = format!(".svc.{}", model.domain);
    if let Some((name, ns)) = svc.hostname.strip_suffix(&suffix).and_then(|short| short.split_once('.'))
        && !ns.contains('.')
    {
        if ns == proxy_ns {
            names.extend([name.to_owned(), format!("{name}.{ns}.svc"), format!("{name}.{ns}")]);
        } else {
            names.extend([format!("{name}.{ns}"), format!("{name}.{ns}.svc")]);
        }
    }
    // Headless Kubernetes services: their pods' own names (istiod adds these
    // for the Kubernetes registry only).
    if svc.resolution == crate::model::Resolution::Passthrough && svc.kubernetes {
        let wild: Vec<String> = names.iter().map(|n| format!("*.{n}")).collect();
        names.extend(wild);
    }
    names.extend(
        svc.vips
            .iter()
            .filter(|v| !v.is_empty() && *v != "0.0.0.0")
            .map(|v| if v.contains(':') { format!("[{v}]") } else { v.clone() }),
    );
    match flavor {
        Flavor::Envoy => names,
        Flavor::Grpc => names
            .into_iter()
            .flat_map(|n| {
                let with_port = format!("{n}:{port}");
                [n, with_port]
            })
            .collect(),
    }
}

fn string_match(m: &StringMatch) -> Option<matcher::StringMatcher> {
    use matcher::string_matcher::MatchPattern;
    let pattern = if let Some(e) = &m.exact {
        MatchPattern::Exact(e.clone())
    } else if let Some(p) = &m.prefix {
        MatchPattern::Prefix(p.clone())
    } else if let Some(r) = &m.regex {
        MatchPattern::SafeRegex(matcher::RegexMatcher { regex: r.clone() })
    } else {
        return None;
    };
    Some(matcher::StringMatcher { match_pattern: Some(pattern), ignore_case: false })
}

fn header(name: &str, m: &StringMatch) -> Option<route::HeaderMatcher> {
    Some(route::HeaderMatcher {
        name: name.to_owned(),
        header_match_specifier: Some(route::header_matcher::HeaderMatchSpecifier::StringMatch(string_match(m)?)),
        ..Default::default()
    })
}

/// gRPC status names as VirtualService writes them.
fn grpc_code(name: &str) -> Option<u32> {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES.iter().position(|n| *n == name).map(|i| i as u32)
}

fn percent(p: Option<f64>) -> Option<types::FractionalPercent> {
    let v = p.unwrap_or(100.0).clamp(0.0, 100.0);
    Some(types::FractionalPercent {
        numerator: (v * 10_000.0).round() as u32,
        denominator: types::fractional_percent::DenominatorType::Million as i32,
    })
}

fn fault_config(r: &HttpRoute) -> Option<fault::HttpFault> {
    let f = r.fault.as_ref()?;
    let mut out = fault::HttpFault::default();
    if let Some(a) = &f.abort {
        let error_type = match (a.http_status, a.grpc_status.as_deref().and_then(grpc_code)) {
            (Some(code), _) => fault::fault_abort::ErrorType::HttpStatus(code as u32),
            (None, Some(code)) => fault::fault_abort::ErrorType::GrpcStatus(code),
            (None, None) => return None,
        };
        out.abort = Some(fault::FaultAbort {
            error_type: Some(error_type),
            percentage: percent(a.percentage.as_ref().map(|p| p.value)),
        });
    }
    if let Some(d) = &f.delay
        && let Some(fixed) = d.fixed_delay.as_deref().and_then(|s| istiod_kubewatch::duration::parse(s).ok())
    {
        out.delay = Some(common_fault::FaultDelay {
            fault_delay_secifier: Some(common_fault::fault_delay::FaultDelaySecifier::FixedDelay(Duration {
                seconds: fixed.as_secs() as i64,
                nanos: fixed.subsec_nanos() as i32,
            })),
            percentage: percent(d.percentage.as_ref().map(|p| p.value)),
        });
    }
    Some(out)
}

/// The consistent-hash key of a destination's DestinationRule (istiod puts
/// it on the route; the cluster gets RING_HASH or MAGLEV).
fn hash_policy(dr: &DestinationRule, port: u16, subset: &str) -> Vec<route::route_action::HashPolicy> {
    use route::route_action::hash_policy::{ConnectionProperties, Cookie, Header, PolicySpecifier, QueryParameter};
    let policy = crate::translate::traffic_policy::effective(dr, port, subset);
    let Some(h) = policy.load_balancer.and_then(|lb| lb.consistent_hash) else { return Vec::new() };
    let spec = if let Some(name) = h.http_header_name {
        PolicySpecifier::Header(Header { header_name: name, ..Default::default() })
    } else if let Some(c) = h.http_cookie {
        let ttl = c.ttl.as_deref().and_then(|t| istiod_kubewatch::duration::parse(t).ok());
        PolicySpecifier::Cookie(Cookie {
            name: c.name,
            path: c.path,
            ttl: ttl.map(|d| Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }),
            ..Default::default()
        })
    } else if h.use_source_ip == Some(true) {
        PolicySpecifier::ConnectionProperties(ConnectionProperties { source_ip: true })
    } else if let Some(q) = h.http_query_parameter_name {
        PolicySpecifier::QueryParameter(QueryParameter { name: q })
    } else {
        return Vec::new();
    };
    vec![route::route_action::HashPolicy { policy_specifier: Some(spec), ..Default::default() }]
}

/// Who the routes are for: Envoy supports every action, proxyless gRPC
/// only forwarding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// Envoy sidecars and gateways.
    Envoy,
    /// Proxyless gRPC.
    Grpc,
}

fn header_ops(
    h: Option<&istiod_kubewatch::istio::networking::HeaderOperations>,
) -> (Vec<core::HeaderValueOption>, Vec<String>) {
    let Some(h) = h else { return (Vec::new(), Vec::new()) };
    let opt = |k: &String, v: &String, action: core::header_value_option::HeaderAppendAction| core::HeaderValueOption {
        header: Some(core::HeaderValue { key: k.clone(), value: v.clone(), ..Default::default() }),
        append_action: action as i32,
        ..Default::default()
    };
    let mut add: Vec<core::HeaderValueOption> = h
        .set
        .iter()
        .map(|(k, v)| opt(k, v, core::header_value_option::HeaderAppendAction::OverwriteIfExistsOrAdd))
        .collect();
    add.extend(
        h.add.iter().map(|(k, v)| opt(k, v, core::header_value_option::HeaderAppendAction::AppendIfExistsOrAdd)),
    );
    (add, h.remove.clone())
}

fn envoy_action(r: &HttpRoute) -> Option<route::route::Action> {
    if let Some(rd) = &r.redirect {
        use route::redirect_action::{PathRewriteSpecifier, RedirectResponseCode, SchemeRewriteSpecifier};
        let code = match rd.redirect_code {
            302 => RedirectResponseCode::Found,
            303 => RedirectResponseCode::SeeOther,
            307 => RedirectResponseCode::TemporaryRedirect,
            308 => RedirectResponseCode::PermanentRedirect,
            _ => RedirectResponseCode::MovedPermanently,
        };
        let path = if !rd.uri.is_empty() {
            Some(PathRewriteSpecifier::PathRedirect(rd.uri.clone()))
        } else if !rd.prefix_rewrite.is_empty() {
            Some(PathRewriteSpecifier::PrefixRewrite(rd.prefix_rewrite.clone()))
        } else {
            None
        };
        return Some(route::route::Action::Redirect(route::RedirectAction {
            host_redirect: rd.authority.clone(),
            port_redirect: rd.port.unwrap_or(0),
            response_code: code as i32,
            scheme_rewrite_specifier: (!rd.scheme.is_empty())
                .then(|| SchemeRewriteSpecifier::SchemeRedirect(rd.scheme.clone())),
            path_rewrite_specifier: path,
            ..Default::default()
        }));
    }
    if let Some(d) = &r.direct_response {
        let body = d.body.as_ref().and_then(|b| {
            let specifier = match (&b.string, &b.bytes) {
                (Some(s), _) => core::data_source::Specifier::InlineString(s.clone()),
                (None, Some(b64)) => core::data_source::Specifier::InlineString(b64.clone()),
                (None, None) => return None,
            };
            Some(core::DataSource { specifier: Some(specifier), ..Default::default() })
        });
        return Some(route::route::Action::DirectResponse(route::DirectResponseAction { status: d.status, body }));
    }
    None
}

/// Which proxies a route is for, beyond its virtual host's visibility:
/// a match's `sourceLabels` / `sourceNamespace`, and the VirtualService's
/// `exportTo` (a proxy it is not exported to gets the default route).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct RouteScope {
    /// Labels the proxy must carry.
    pub source_labels: BTreeMap<String, String>,
    /// Namespace the proxy must be in (empty: any).
    pub source_namespace: String,
    /// Namespaces the VirtualService is exported to; `None`: everywhere.
    pub export: Option<Vec<String>>,
    /// The default route that stands where the VirtualService is not
    /// exported.
    pub fallback: bool,
}

impl RouteScope {
    /// Whether a proxy in `namespace` with `labels` gets the route.
    pub fn admits(&self, namespace: &str, labels: &[(Arc<str>, Arc<str>)]) -> bool {
        let exported = self.export.as_ref().is_none_or(|e| e.iter().any(|n| n == "*" || n == namespace));
        let source = (self.source_namespace.is_empty() || self.source_namespace == namespace)
            && crate::model::has_labels(labels, &self.source_labels);
        exported != self.fallback && source
    }
}

/// A route before it is filtered for a proxy: the Envoy route, who it is
/// for, and the destination whose DestinationRule (in force for the
/// proxy's namespace) may add a consistent-hash policy.
#[derive(Debug, Clone, PartialEq)]
pub struct ScopedRoute {
    /// The route, without its hash policy.
    pub route: route::Route,
    /// Who gets it.
    pub scope: RouteScope,
    /// `(host, port, subset)` of the first destination.
    pub hash_destination: Option<(String, u16, String)>,
}

/// A virtual host before it is rendered for a proxy: domains and the
/// DestinationRules' hash policies depend on the proxy's namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceRoutes {
    /// The service.
    pub host: Arc<str>,
    /// The service port.
    pub port: u16,
    /// Its routes.
    pub routes: Vec<ScopedRoute>,
    /// A digest of what rendering reads of it (see [`ServiceRoutes::new`]).
    pub digest: u64,
}

impl ServiceRoutes {
    /// The virtual host of `svc`'s `port` for `flavor`, with its digest:
    /// the routes, who each is for, and the service's addresses and
    /// resolution, which the domains read.
    pub fn new(model: &Model, svc: &Service, port: u16, flavor: Flavor) -> Arc<ServiceRoutes> {
        use std::hash::{Hash, Hasher};
        let routes = routes(model, svc, port, flavor);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&svc.hostname, port, &svc.vips, svc.resolution == crate::model::Resolution::Passthrough, svc.kubernetes)
            .hash(&mut h);
        for r in &routes {
            r.route.encode_to_vec().hash(&mut h);
            (&r.scope, &r.hash_destination).hash(&mut h);
        }
        Arc::new(ServiceRoutes { host: svc.hostname.clone(), port, routes, digest: h.finish() })
    }
}

/// A route configuration before it is rendered for a proxy.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteTable {
    /// Its name (`"<port>"`, or `outbound|<port>||<host>` for proxyless gRPC).
    pub name: String,
    /// Envoy or proxyless gRPC.
    pub flavor: Flavor,
    /// A virtual host per service, in hostname order (shared between
    /// tables: a change replaces the hosts it touches).
    pub hosts: Vec<Arc<ServiceRoutes>>,
}

impl RouteTable {
    /// A digest of everything rendering reads from the table (the control
    /// thread compares digests to find changed route configurations).
    pub fn digest(&self) -> Bytes {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&self.name, self.flavor).hash(&mut h);
        for vh in &self.hosts {
            vh.digest.hash(&mut h);
        }
        Bytes::copy_from_slice(&h.finish().to_be_bytes())
    }

    /// The route configuration a proxy of `class` receives: the virtual
    /// hosts it may see (`visible`), each with the domains it may dial
    /// ([`domains`]) and the routes meant for it; for Envoy the fallback
    /// host of its outbound traffic policy and `ignore_port_in_host_matching`
    /// (istiod's `buildSidecarOutboundHTTPRouteConfig`).
    pub fn render(
        &self,
        model: &Model,
        class: &ProxyClass,
        policy: OutboundPolicy,
        visible: impl Fn(&Service, u16) -> bool,
    ) -> route::RouteConfiguration {
        let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut virtual_hosts = Vec::new();
        for vh in &self.hosts {
            let Some(svc) = model.services.get(&vh.host) else { continue };
            if !visible(svc, vh.port) {
                continue;
            }
            // istiod's dedupeDomains: a domain an earlier host took is dropped.
            let domains: Vec<String> = domains(model, svc, vh.port, &class.namespace, self.flavor)
                .into_iter()
                .filter(|d| seen.insert(d.clone()))
                .collect();
            let routes = vh
                .routes
                .iter()
                .filter(|r| r.scope.admits(&class.namespace, &class.labels))
                .map(|r| {
                    let mut out = r.route.clone();
                    if let Some((host, port, subset)) = &r.hash_destination
                        && let Some(i) = model.rule_index_for(&class.namespace, &class.labels, host)
                        && let Some(route::route::Action::Route(a)) = &mut out.action
                    {
                        a.hash_policy = hash_policy(&model.destination_rules().get(i).rule, *port, subset);
                    }
                    out
                })
                .collect();
            virtual_hosts.push(route::VirtualHost {
                name: format!("{}:{}", vh.host, vh.port),
                domains,
                routes,
                include_request_attempt_count: self.flavor == Flavor::Envoy,
                ..Default::default()
            });
        }
        match self.flavor {
            Flavor::Grpc => route::RouteConfiguration { name: self.name.clone(), virtual_hosts, ..Default::default() },
            Flavor::Envoy => {
                virtual_hosts.push(fallback_host(policy == OutboundPolicy::AllowAny));
                route::RouteConfiguration {
                    name: self.name.clone(),
                    virtual_hosts,
                    validate_clusters: Some(false),
                    ignore_port_in_host_matching: true,
                    ..Default::default()
                }
            }
        }
    }
}

fn default_route(cluster: String) -> route::Route {
    route::Route {
        name: "default".into(),
        r#match: Some(route::RouteMatch {
            path_specifier: Some(route::route_match::PathSpecifier::Prefix("/".into())),
            ..Default::default()
        }),
        action: Some(route::route::Action::Route(route::RouteAction {
            cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(cluster)),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// The namespaces a VirtualService is exported to (`.` resolved), or
/// `None` when it is exported everywhere.
pub fn vs_export(vs: &VirtualService, ns: &str) -> Option<Vec<String>> {
    if vs.export_to.is_empty() || vs.export_to.iter().any(|e| e == "*") {
        return None;
    }
    Some(vs.export_to.iter().map(|e| if e == "." { ns.to_owned() } else { e.clone() }).collect())
}

/// The routes of `svc`'s `port`: its VirtualService's HTTP routes, or a
/// default route to the port's cluster.
pub(crate) fn routes(model: &Model, svc: &Service, port: u16, flavor: Flavor) -> Vec<ScopedRoute> {
    let default_cluster = format!("outbound|{port}||{}", svc.hostname);
    let everyone = |route| ScopedRoute { route, scope: RouteScope::default(), hash_destination: None };
    let Some((obj, vs)) = model.virtual_service(&svc.hostname) else {
        return vec![everyone(default_route(default_cluster))];
    };
    let mut out = vs_routes(model, obj, vs, port, flavor, &default_cluster);
    if let Some(namespaces) = vs_export(vs, obj.meta.ns()) {
        for r in &mut out {
            r.scope.export = Some(namespaces.clone());
        }
        let mut fallback = everyone(default_route(default_cluster));
        fallback.scope = RouteScope { export: Some(namespaces), fallback: true, ..RouteScope::default() };
        out.push(fallback);
    }
    out
}

fn vs_routes(
    model: &Model,
    obj: &IstioObject,
    vs: &VirtualService,
    port: u16,
    flavor: Flavor,
    default_cluster: &str,
) -> Vec<ScopedRoute> {
    let default_cluster = default_cluster.to_owned();
    let ns = obj.meta.ns();
    let mut out = Vec::new();
    for (i, r) in vs.http.iter().enumerate() {
        // Proxyless gRPC forwards only: redirects and direct responses are
        // not supported by its xDS client, so such routes are left out.
        let fixed = if flavor == Flavor::Envoy { envoy_action(r) } else { None };
        if r.route.is_empty() && fixed.is_none() {
            continue;
        }
        let hash_destination = r.route.first().and_then(|d| d.destination.as_ref()).map(|dest| {
            let dport = dest.port.as_ref().map_or(port, |p| p.number as u16);
            (model.resolve_host(&dest.host, ns), dport, dest.subset.clone())
        });
        let clusters: Vec<(String, u32)> = r
            .route
            .iter()
            .filter_map(|d| {
                let dest = d.destination.as_ref()?;
                let host = model.resolve_host(&dest.host, ns);
                let dport = dest.port.as_ref().map_or(port, |p| p.number as u16);
                Some((format!("outbound|{dport}|{}|{host}", dest.subset), d.weight.max(0) as u32))
            })
            .collect();
        let specifier = if clusters.is_empty() {
            route::route_action::ClusterSpecifier::Cluster(default_cluster.clone())
        } else if clusters.len() == 1 {
            route::route_action::ClusterSpecifier::Cluster(clusters[0].0.clone())
        } else {
            let all_zero = clusters.iter().all(|(_, w)| *w == 0);
            route::route_action::ClusterSpecifier::WeightedClusters(route::WeightedCluster {
                clusters: clusters
                    .iter()
                    .map(|(name, w)| route::weighted_cluster::ClusterWeight {
                        name: name.clone(),
                        weight: Some(if all_zero { 1 } else { *w }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
        };
        let duration = |d: Option<&String>| {
            let d = istiod_kubewatch::duration::parse(d?).ok()?;
            Some(Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 })
        };
        let retry_policy = r.retries.as_ref().filter(|rt| rt.attempts > 0).map(|rt| route::RetryPolicy {
            // istiod's default conditions when none are given.
            retry_on: if rt.retry_on.is_empty() {
                "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes".into()
            } else {
                rt.retry_on.clone()
            },
            num_retries: Some(rt.attempts as u32),
            per_try_timeout: duration(rt.per_try_timeout.as_ref()),
            ..Default::default()
        });
        let mut action = route::RouteAction {
            cluster_specifier: Some(specifier),
            timeout: duration(r.timeout.as_ref()),
            retry_policy,
            ..Default::default()
        };
        if flavor == Flavor::Envoy {
            if let Some(rw) = &r.rewrite {
                action.prefix_rewrite = rw.uri.clone();
                if !rw.authority.is_empty() {
                    action.host_rewrite_specifier =
                        Some(route::route_action::HostRewriteSpecifier::HostRewriteLiteral(rw.authority.clone()));
                }
            }
            let mirrors = r.mirror.iter().map(|m| (m, r.mirror_percentage.as_ref().map(|p| p.value))).chain(
                r.mirrors
                    .iter()
                    .filter_map(|m| m.destination.as_ref().map(|d| (d, m.percentage.as_ref().map(|p| p.value)))),
            );
            for (m, pct) in mirrors {
                let host = model.resolve_host(&m.host, ns);
                let mport = m.port.as_ref().map_or(port, |p| p.number as u16);
                action.request_mirror_policies.push(route::route_action::RequestMirrorPolicy {
                    cluster: format!("outbound|{mport}|{}|{host}", m.subset),
                    runtime_fraction: Some(core::RuntimeFractionalPercent {
                        default_value: percent(pct),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
        }
        let mut per_filter = BTreeMap::new();
        if let Some(f) = fault_config(r) {
            per_filter.insert(FAULT_FILTER.to_owned(), any(&f));
        }
        let matches: Vec<route::RouteMatch> = if r.matches.is_empty() {
            vec![route::RouteMatch {
                path_specifier: Some(route::route_match::PathSpecifier::Prefix("/".into())),
                ..Default::default()
            }]
        } else {
            r.matches
                .iter()
                .map(|m| {
                    use route::route_match::PathSpecifier;
                    let path = match &m.uri {
                        Some(StringMatch { exact: Some(e), .. }) => PathSpecifier::Path(e.clone()),
                        Some(StringMatch { prefix: Some(p), .. }) => PathSpecifier::Prefix(p.clone()),
                        Some(StringMatch { regex: Some(re), .. }) => {
                            PathSpecifier::SafeRegex(matcher::RegexMatcher { regex: re.clone() })
                        }
                        _ => PathSpecifier::Prefix("/".into()),
                    };
                    let mut headers: Vec<route::HeaderMatcher> =
                        m.headers.iter().filter_map(|(n, v)| header(n, v)).collect();
                    headers.extend(m.method.as_ref().and_then(|v| header(":method", v)));
                    headers.extend(m.authority.as_ref().and_then(|v| header(":authority", v)));
                    route::RouteMatch {
                        path_specifier: Some(path),
                        headers,
                        case_sensitive: m.ignore_uri_case.then_some(false),
                        ..Default::default()
                    }
                })
                .collect()
        };
        if flavor == Flavor::Envoy
            && let Some(c) = &r.cors_policy
        {
            let cors = istiod_proto::envoy::extensions::filters::http::cors::v3::CorsPolicy {
                allow_origin_string_match: c.allow_origins.iter().filter_map(string_match).collect(),
                allow_methods: c.allow_methods.join(","),
                allow_headers: c.allow_headers.join(","),
                expose_headers: c.expose_headers.join(","),
                max_age: c
                    .max_age
                    .as_deref()
                    .and_then(|d| istiod_kubewatch::duration::parse(d).ok())
                    .map(|d| d.as_secs().to_string())
                    .unwrap_or_default(),
                allow_credentials: c.allow_credentials,
                ..Default::default()
            };
            per_filter.insert("envoy.filters.http.cors".to_owned(), any(&cors));
        }
        let (req_add, req_remove) = header_ops(r.headers.as_ref().and_then(|h| h.request.as_ref()));
        let (resp_add, resp_remove) = header_ops(r.headers.as_ref().and_then(|h| h.response.as_ref()));
        let action = fixed.unwrap_or(route::route::Action::Route(action));
        for (mut m, src) in matches.into_iter().zip(r.matches.iter().map(Some).chain(std::iter::repeat(None))) {
            if let Some(src) = src {
                m.query_parameters = src
                    .query_params
                    .iter()
                    .filter_map(|(name, v)| {
                        Some(route::QueryParameterMatcher {
                            name: name.clone(),
                            query_parameter_match_specifier: Some(
                                route::query_parameter_matcher::QueryParameterMatchSpecifier::StringMatch(
                                    string_match(v)?,
                                ),
                            ),
                        })
                    })
                    .collect();
            }
            let route = route::Route {
                name: if r.name.is_empty() { format!("{}.{}.{i}", obj.meta.name, ns) } else { r.name.clone() },
                r#match: Some(m),
                action: Some(action.clone()),
                typed_per_filter_config: per_filter.clone(),
                request_headers_to_add: req_add.clone(),
                request_headers_to_remove: req_remove.clone(),
                response_headers_to_add: resp_add.clone(),
                response_headers_to_remove: resp_remove.clone(),
                ..Default::default()
            };
            let scope = RouteScope {
                source_labels: src.map(|s| s.source_labels.clone()).unwrap_or_default(),
                source_namespace: src.map(|s| s.source_namespace.clone()).unwrap_or_default(),
                ..RouteScope::default()
            };
            out.push(ScopedRoute { route, scope, hash_destination: hash_destination.clone() });
        }
    }
    out
}

/// The last virtual host of every outbound route configuration: unknown
/// hosts go to `PassthroughCluster` (`allow_any`) or get a 502
/// (`block_all`, REGISTRY_ONLY), as istiod builds them.
pub(crate) fn fallback_host(allow_any: bool) -> route::VirtualHost {
    let name = if allow_any { "allow_any" } else { "block_all" };
    let action = if allow_any {
        route::route::Action::Route(route::RouteAction {
            cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster("PassthroughCluster".into())),
            ..Default::default()
        })
    } else {
        route::route::Action::DirectResponse(route::DirectResponseAction { status: 502, body: None })
    };
    route::VirtualHost {
        name: name.into(),
        domains: vec!["*".into()],
        routes: vec![route::Route {
            name: name.into(),
            r#match: Some(route::RouteMatch {
                path_specifier: Some(route::route_match::PathSpecifier::Prefix("/".into())),
                ..Default::default()
            }),
            action: Some(action),
            ..Default::default()
        }],
        include_request_attempt_count: true,
        ..Default::default()
    }
}
