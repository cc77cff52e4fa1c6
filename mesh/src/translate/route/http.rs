//! One VirtualService's HTTP routes as Envoy routes, after istiod's
//! `pilot/pkg/networking/core/route/route.go` (`translateRoute` and its
//! helpers): matches on URI, headers, method, authority and query
//! parameters; weighted destinations; retries, timeouts, faults, mirrors,
//! CORS, rewrites, redirects, direct responses and header changes; and the
//! consistent-hash policies a DestinationRule adds. `route.rs` puts them
//! into virtual hosts and route tables.

use std::collections::BTreeMap;

use istiod_config::istio::IstioObject;
use istiod_config::istio::networking::{DestinationRule, Headers, HttpRoute, StringMatch, VirtualService};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::route::v3 as route;
use istiod_proto::envoy::extensions::filters::common::fault::v3 as common_fault;
use istiod_proto::envoy::extensions::filters::http::fault::v3 as fault;
use istiod_proto::envoy::r#type::matcher::v3 as matcher;
use istiod_proto::envoy::r#type::v3 as types;
use istiod_proto::prost_types::Duration;

use crate::model::Model;
use crate::translate::envoy::any;

use super::{FAULT_FILTER, Flavor, RouteScope, ScopedRoute};

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
        && let Some(fixed) = d.fixed_delay.as_deref().and_then(|s| istiod_config::duration::parse(s).ok())
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
/// istiod's `DEFAULT_RETRY_ON`.
const DEFAULT_RETRY_ON: &str = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes";

/// `retry.ConvertPolicy` (retry.go): no `retries` is istiod's default
/// policy (2 attempts, the default conditions, other hosts preferred);
/// `attempts: 0` none; otherwise the given attempts, conditions (numbers
/// among them are status codes), per-try timeout, host choice and backoff.
/// (A consistent-hash route drops the host predicate when rendered.)
pub(crate) fn retry_policy(r: Option<&istiod_config::istio::networking::HttpRetry>) -> Option<route::RetryPolicy> {
    let mut out = route::RetryPolicy {
        num_retries: Some(2),
        retry_on: DEFAULT_RETRY_ON.into(),
        host_selection_retry_max_attempts: 5,
        retry_host_predicate: vec![previous_hosts()],
        ..Default::default()
    };
    let Some(r) = r else { return Some(out) };
    if r.attempts <= 0 {
        return None;
    }
    out.num_retries = Some(r.attempts as u32);
    if !r.retry_on.is_empty() {
        let (mut on, mut codes) = (Vec::new(), Vec::new());
        for part in r.retry_on.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.parse::<u32>() {
                Ok(code) => codes.push(code),
                Err(_) => on.push(part),
            }
        }
        let mut on = on.join(",");
        if !codes.is_empty() && !on.contains("retriable-status-codes") {
            on = if on.is_empty() { "retriable-status-codes".into() } else { format!("{on},retriable-status-codes") };
        }
        out.retry_on = on;
        out.retriable_status_codes = codes;
    }
    let duration = |d: &str| {
        let d = istiod_config::duration::parse(d).ok()?;
        Some(Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 })
    };
    out.per_try_timeout = r.per_try_timeout.as_deref().and_then(duration);
    if r.retry_ignore_previous_hosts == Some(false) {
        out.retry_host_predicate.clear();
    }
    if let Some(b) = r.backoff.as_deref().and_then(duration) {
        out.retry_back_off = Some(route::retry_policy::RetryBackOff { base_interval: Some(b), ..Default::default() });
    }
    Some(out)
}

/// `envoy.retry_host_predicates.previous_hosts` (xdsfilters.RetryPreviousHosts).
fn previous_hosts() -> route::retry_policy::RetryHostPredicate {
    use istiod_proto::envoy::extensions::retry::host::previous_hosts::v3::PreviousHostsPredicate;
    route::retry_policy::RetryHostPredicate {
        name: "envoy.retry_host_predicates.previous_hosts".into(),
        config_type: Some(route::retry_policy::retry_host_predicate::ConfigType::TypedConfig(any(
            &PreviousHostsPredicate::default(),
        ))),
    }
}

/// `setTimeout` (route.go): the VirtualService's timeout, else none (0s,
/// not Envoy's 15s default); gRPC's deadline header is honoured up to it
/// (proxyless gRPC reads `max_stream_duration` instead).
pub(crate) fn set_timeout(action: &mut route::RouteAction, timeout: Option<Duration>, flavor: Flavor) {
    let t = timeout.unwrap_or_default();
    match flavor {
        Flavor::Grpc => {
            action.max_stream_duration =
                Some(route::route_action::MaxStreamDuration { max_stream_duration: Some(t), ..Default::default() });
        }
        Flavor::Envoy => action.max_grpc_timeout = Some(t),
    }
    action.timeout = Some(t);
}

pub fn hash_policy(dr: &DestinationRule, port: u16, subset: &str) -> Vec<route::route_action::HashPolicy> {
    use route::route_action::hash_policy::{ConnectionProperties, Cookie, Header, PolicySpecifier, QueryParameter};
    let policy = crate::translate::traffic_policy::effective(dr, port, subset, &Default::default());
    let Some(h) = policy.load_balancer.and_then(|lb| lb.consistent_hash) else { return Vec::new() };
    let spec = if let Some(name) = h.http_header_name {
        PolicySpecifier::Header(Header { header_name: name, ..Default::default() })
    } else if let Some(c) = h.http_cookie {
        let ttl = c.ttl.as_deref().and_then(|t| istiod_config::duration::parse(t).ok());
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

/// Header operations as Envoy takes them (istiod's
/// `TranslateHeadersOperations`): what to add and remove, without the
/// pseudo-headers and `host` Envoy refuses to touch; a `host` or
/// `:authority` set (else added) is the authority to rewrite to.
fn header_ops(
    h: Option<&istiod_config::istio::networking::HeaderOperations>,
) -> (Vec<core::HeaderValueOption>, Vec<String>, Option<String>) {
    let Some(h) = h else { return (Vec::new(), Vec::new(), None) };
    let internal = |k: &str| k.starts_with(':') || k.eq_ignore_ascii_case("host");
    let authority_of = |m: &std::collections::BTreeMap<String, String>| {
        m.iter()
            .rfind(|(k, _)| k.eq_ignore_ascii_case(":authority") || k.eq_ignore_ascii_case("host"))
            .map(|(_, v)| v.clone())
    };
    let opt = |k: &String, v: &String, action: core::header_value_option::HeaderAppendAction| core::HeaderValueOption {
        header: Some(core::HeaderValue { key: k.clone(), value: v.clone(), ..Default::default() }),
        append_action: action as i32,
        ..Default::default()
    };
    let mut add: Vec<core::HeaderValueOption> = h
        .set
        .iter()
        .filter(|(k, _)| !internal(k))
        .map(|(k, v)| opt(k, v, core::header_value_option::HeaderAppendAction::OverwriteIfExistsOrAdd))
        .collect();
    add.extend(
        h.add
            .iter()
            .filter(|(k, _)| !internal(k))
            .map(|(k, v)| opt(k, v, core::header_value_option::HeaderAppendAction::AppendIfExistsOrAdd)),
    );
    let remove = h.remove.iter().filter(|k| !internal(k)).cloned().collect();
    (add, remove, authority_of(&h.set).or_else(|| authority_of(&h.add)))
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

pub(super) fn vs_routes(
    model: &Model,
    obj: &IstioObject,
    vs: &VirtualService,
    port: u16,
    flavor: Flavor,
    default_cluster: &str,
    single_port: bool,
) -> Vec<ScopedRoute> {
    let default_cluster = default_cluster.to_owned();
    let ns = obj.meta.ns();
    // Routes translated from the Gateway API (istiod's
    // `UseGatewaySemantics`): prefixes match whole path segments, and a
    // backend that does not exist answers 500, not 503.
    let semantics = obj.meta.annotations.get("internal.istio.io/route-semantics").map(String::as_str);
    let gateway_semantics = semantics == Some("gateway");
    // Ingress and Gateway API prefixes match whole path segments.
    let segment_prefixes = gateway_semantics || semantics == Some("ingress");
    let mut out = Vec::new();
    for r in &vs.http {
        // Proxyless gRPC forwards only: redirects and direct responses are
        // not supported by its xDS client, so such routes are left out.
        let fixed = if flavor == Flavor::Envoy { envoy_action(r) } else { None };
        if r.route.is_empty() && fixed.is_none() {
            continue;
        }
        let hash_destination = r.route.first().and_then(|d| d.destination.as_ref()).map(|dest| {
            let host = model.resolve_host(&dest.host, ns);
            let dport = destination_port(model, dest.port.as_ref().map(|p| p.number), &host, port, single_port);
            (host, dport, dest.subset.clone())
        });
        let clusters: Vec<(String, u32, Option<&Headers>)> = r
            .route
            .iter()
            .filter_map(|d| {
                let dest = d.destination.as_ref()?;
                let host = model.resolve_host(&dest.host, ns);
                let dport = destination_port(model, dest.port.as_ref().map(|p| p.number), &host, port, single_port);
                Some((format!("outbound|{dport}|{}|{host}", dest.subset), d.weight.max(0) as u32, d.headers.as_ref()))
            })
            .collect();
        // A destination's own headers (istiod's processDestination and
        // processWeightedDestination): on the route after its own for the
        // one destination, on each cluster's weight for several.
        let single_headers = match clusters.as_slice() {
            [(_, _, h)] => *h,
            _ => None,
        };
        let specifier = if clusters.is_empty() {
            route::route_action::ClusterSpecifier::Cluster(default_cluster.clone())
        } else if clusters.len() == 1 {
            route::route_action::ClusterSpecifier::Cluster(clusters[0].0.clone())
        } else {
            let all_zero = clusters.iter().all(|(_, w, _)| *w == 0);
            route::route_action::ClusterSpecifier::WeightedClusters(route::WeightedCluster {
                clusters: clusters
                    .iter()
                    .map(|(name, w, h)| {
                        let (request_headers_to_add, request_headers_to_remove, authority) =
                            header_ops(h.and_then(|h| h.request.as_ref()));
                        let (response_headers_to_add, response_headers_to_remove, _) =
                            header_ops(h.and_then(|h| h.response.as_ref()));
                        route::weighted_cluster::ClusterWeight {
                            name: name.clone(),
                            weight: Some(if all_zero { 1 } else { *w }),
                            request_headers_to_add,
                            request_headers_to_remove,
                            response_headers_to_add,
                            response_headers_to_remove,
                            host_rewrite_specifier: authority
                                .map(route::weighted_cluster::cluster_weight::HostRewriteSpecifier::HostRewriteLiteral),
                            ..Default::default()
                        }
                    })
                    .collect(),
                ..Default::default()
            })
        };
        let duration = |d: Option<&String>| {
            let d = istiod_config::duration::parse(d?).ok()?;
            Some(Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 })
        };
        let retry_policy = retry_policy(r.retries.as_ref());
        let mut action = route::RouteAction { cluster_specifier: Some(specifier), retry_policy, ..Default::default() };
        set_timeout(&mut action, duration(r.timeout.as_ref()), flavor);
        if gateway_semantics {
            action.cluster_not_found_response_code =
                route::route_action::ClusterNotFoundResponseCode::InternalServerError as i32;
        }
        if flavor == Flavor::Envoy {
            if let Some(rw) = &r.rewrite {
                action.prefix_rewrite = rw.uri.clone();
                let prefix = r.matches.first().and_then(|m| m.uri.as_ref()).and_then(|u| u.prefix.as_deref());
                if let Some(rr) = &rw.uri_regex_rewrite {
                    action.prefix_rewrite.clear();
                    action.regex_rewrite = Some(matcher::RegexMatchAndSubstitute {
                        pattern: Some(matcher::RegexMatcher { regex: rr.pattern.clone() }),
                        substitution: rr.rewrite.clone(),
                    });
                } else if gateway_semantics
                    && rw.uri == "/"
                    && let Some(p) = prefix.filter(|p| *p != "/")
                {
                    // istiod: replacing a prefix by "/" strips it and the
                    // slash after it.
                    action.prefix_rewrite.clear();
                    action.regex_rewrite = Some(matcher::RegexMatchAndSubstitute {
                        pattern: Some(matcher::RegexMatcher {
                            regex: format!("^{}(/?)(.*)", istiod_config::istio::re2::quote_meta(p)),
                        }),
                        substitution: "/\\2".into(),
                    });
                }
            }
            // The authority: the route's `host`/`:authority` header, else
            // (overriding it) the rewrite's, else the one destination's
            // (istiod's applyHTTPRouteDestination, processDestination).
            let route_authority = header_ops(r.headers.as_ref().and_then(|h| h.request.as_ref())).2;
            let rewrite_authority = r.rewrite.as_ref().map(|rw| rw.authority.clone()).filter(|a| !a.is_empty());
            let destination_authority = header_ops(single_headers.and_then(|h| h.request.as_ref())).2;
            if let Some(a) = rewrite_authority.or(route_authority).or(destination_authority) {
                action.host_rewrite_specifier = Some(route::route_action::HostRewriteSpecifier::HostRewriteLiteral(a));
            }
            let mirrors = r.mirror.iter().map(|m| (m, r.mirror_percentage.as_ref().map(|p| p.value))).chain(
                r.mirrors
                    .iter()
                    .filter_map(|m| m.destination.as_ref().map(|d| (d, m.percentage.as_ref().map(|p| p.value)))),
            );
            for (m, pct) in mirrors {
                let host = model.resolve_host(&m.host, ns);
                let mport = destination_port(model, m.port.as_ref().map(|p| p.number), &host, port, single_port);
                action.request_mirror_policies.push(route::route_action::RequestMirrorPolicy {
                    cluster: format!("outbound|{mport}|{}|{host}", m.subset),
                    runtime_fraction: Some(core::RuntimeFractionalPercent {
                        default_value: percent(pct),
                        ..Default::default()
                    }),
                    disable_shadow_host_suffix_append: model.mesh.disable_shadow_host_suffix,
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
                        Some(StringMatch { prefix: Some(p), .. }) if segment_prefixes && p != "/" => {
                            PathSpecifier::PathSeparatedPrefix(p.trim_end_matches('/').to_owned())
                        }
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
                        // istiod sets it either way (TranslateRouteMatch).
                        case_sensitive: Some(!m.ignore_uri_case),
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
                    .and_then(|d| istiod_config::duration::parse(d).ok())
                    .map(|d| d.as_secs().to_string())
                    .unwrap_or_default(),
                allow_credentials: c.allow_credentials,
                ..Default::default()
            };
            per_filter.insert("envoy.filters.http.cors".to_owned(), any(&cors));
        }
        let (mut req_add, mut req_remove, _) = header_ops(r.headers.as_ref().and_then(|h| h.request.as_ref()));
        let (mut resp_add, mut resp_remove, _) = header_ops(r.headers.as_ref().and_then(|h| h.response.as_ref()));
        let (add, remove, _) = header_ops(single_headers.and_then(|h| h.request.as_ref()));
        req_add.extend(add);
        req_remove.extend(remove);
        let (add, remove, _) = header_ops(single_headers.and_then(|h| h.response.as_ref()));
        resp_add.extend(add);
        resp_remove.extend(remove);
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
                // translateRoute: the rule's name, empty when it has none.
                name: r.name.clone(),
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

/// A destination's port (istiod's `GetDestinationCluster`): the one it
/// names, else (`single_port`) the port of a service that has exactly one,
/// else the listener's. Sidecar route tables do not take the single-port
/// rule yet: their entries are rebuilt per host, and a destination's
/// ports changing would not rebuild the hosts that route to it; gateway
/// routes are rebuilt whenever services change shape.
pub(crate) fn destination_port(
    model: &Model,
    named: Option<u32>,
    host: &str,
    listener_port: u16,
    single_port: bool,
) -> u16 {
    match (named, model.services.get(host).map(|s| s.ports.as_slice())) {
        (Some(p), _) => p as u16,
        (None, Some([only])) if single_port => only.port,
        _ => listener_port,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Flavor, routes};

    /// istiod's processDestination and processWeightedDestination
    /// (pilot/pkg/networking/core/route/route.go): a destination's header
    /// operations go on the route after the route's own when it is the
    /// only one, on its cluster's weight when there are several.
    #[test]
    fn destination_headers_go_on_the_route_or_the_cluster_weight() {
        let yaml = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n\
            spec: {clusterIP: 10.0.0.1, ports: [{name: http, port: 80}]}\n\
            ---\napiVersion: v1\nkind: Service\nmetadata: {name: api, namespace: shop}\n\
            spec: {clusterIP: 10.0.0.2, ports: [{name: http, port: 80}]}\n\
            ---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: web, namespace: shop}\n\
            spec:\n  hosts: [web]\n  http:\n  \
            - match: [{uri: {prefix: /one}}]\n    headers: {request: {set: {x-route: r}}}\n    \
              route: [{destination: {host: web}, headers: {request: {add: {x-dest: d}, remove: [x-gone, host]}, response: {set: {x-out: o}}}}]\n  \
            - match: [{uri: {prefix: /two}}]\n    headers: {request: {set: {host: front.example.com}}}\n    \
              route: [{destination: {host: web}, headers: {request: {set: {':authority': back.example.com}}}}]\n  \
            - route:\n    - {destination: {host: web}, weight: 70, headers: {request: {set: {x-to: web, host: web.example.com}}}}\n    \
              - {destination: {host: api}, weight: 30}\n";
        let model = crate::testing::model_in("", yaml);
        let svc = model.services.values().find(|s| s.hostname.starts_with("web.")).unwrap();
        let out = routes(&model, svc, 80, Flavor::Envoy);
        let keys = |v: &[istiod_proto::envoy::config::core::v3::HeaderValueOption]| {
            v.iter().map(|h| h.header.as_ref().unwrap().key.clone()).collect::<Vec<_>>()
        };
        let one = &out[0].route;
        assert_eq!(keys(&one.request_headers_to_add), ["x-route", "x-dest"]);
        assert_eq!(one.request_headers_to_remove, ["x-gone"]);
        assert_eq!(keys(&one.response_headers_to_add), ["x-out"]);
        use istiod_proto::envoy::config::route::v3::route::Action;
        use istiod_proto::envoy::config::route::v3::route_action::{ClusterSpecifier, HostRewriteSpecifier};
        use istiod_proto::envoy::config::route::v3::weighted_cluster::cluster_weight;
        let action = |i: usize| match &out[i].route.action {
            Some(Action::Route(a)) => a.clone(),
            other => panic!("{other:?}"),
        };
        // `host` and pseudo-headers are never header operations (Envoy
        // refuses them); set, they rewrite the authority, the route's
        // before the destination's.
        let two = &out[1].route;
        assert!(two.request_headers_to_add.is_empty(), "{two:?}");
        assert_eq!(
            action(1).host_rewrite_specifier,
            Some(HostRewriteSpecifier::HostRewriteLiteral("front.example.com".into()))
        );
        let Some(ClusterSpecifier::WeightedClusters(w)) = &action(2).cluster_specifier else { panic!() };
        assert_eq!(keys(&w.clusters[0].request_headers_to_add), ["x-to"]);
        assert_eq!(
            w.clusters[0].host_rewrite_specifier,
            Some(cluster_weight::HostRewriteSpecifier::HostRewriteLiteral("web.example.com".into()))
        );
        assert!(w.clusters[1].request_headers_to_add.is_empty());
        assert!(out[2].route.request_headers_to_add.is_empty());
    }
}
