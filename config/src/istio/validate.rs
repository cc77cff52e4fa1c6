//! istiod's validation rules for the fields read here
//! (pilot/pkg/config/validation), one function for both sources and the
//! validation webhook. Every problem names its field.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::IstioSpec;
use super::networking::{
    ClientTlsMode, ClientTlsSettings, DestinationRule, Gateway, HttpRoute, LoadBalancerSettings, OutlierDetection,
    Resolution, RouteDestination, ServiceEntry, Sidecar, TrafficPolicy, VirtualService,
};
use super::security::{Action, AuthorizationPolicy, PeerAuthentication, RequestAuthentication};
use crate::duration;
use crate::meta::Meta;

use super::field::FieldError;

struct V {
    errors: Vec<FieldError>,
}

impl V {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError::new(path, message));
    }

    /// istiod's durations: Go syntax, at least 1ms.
    fn duration(&mut self, path: &str, d: Option<&String>) {
        let Some(d) = d else { return };
        match duration::parse(d) {
            Ok(v) if v < std::time::Duration::from_millis(1) => self.err(path, "duration must be at least 1ms"),
            Ok(_) => {}
            Err(e) => self.err(path, e.to_string()),
        }
    }

    fn port(&mut self, path: &str, n: u32) {
        if !(1..=65535).contains(&n) {
            self.err(path, format!("port number {n} must be in the range 1..65535"));
        }
    }

    fn percent(&mut self, path: &str, v: f64) {
        if !(0.0..=100.0).contains(&v) {
            self.err(path, format!("percentage {v} must be in the range 0..100"));
        }
    }
}

/// Validates a spec; empty when valid.
pub fn validate(meta: &Meta, spec: &IstioSpec) -> Vec<FieldError> {
    let mut v = V { errors: Vec::new() };
    if meta.name.is_empty() {
        v.err("metadata.name", "name is required");
    }
    metadata(&mut v, meta, spec);
    match spec {
        IstioSpec::VirtualService(s) => virtual_service(&mut v, s),
        IstioSpec::DestinationRule(s) => destination_rule(&mut v, s),
        IstioSpec::Gateway(s) => gateway(&mut v, s),
        IstioSpec::ServiceEntry(s) => service_entry(&mut v, s),
        IstioSpec::WorkloadEntry(s) => {
            // validateWorkloadEntry: an address, unless a network is given
            // (reached through that network's gateway).
            if s.address.is_empty() && s.network.is_empty() {
                v.err("spec.address", "address is required");
            }
            workload_address(&mut v, "spec", &s.address, &s.ports);
            workload_entry_sizes(&mut v, "spec", s);
        }
        IstioSpec::Sidecar(s) => sidecar(&mut v, s),
        IstioSpec::PeerAuthentication(s) => peer_authentication(&mut v, s),
        IstioSpec::AuthorizationPolicy(s) => authorization_policy(&mut v, s),
        IstioSpec::RequestAuthentication(s) => request_authentication(&mut v, s),
        IstioSpec::Ext(k, s) => {
            if let Some(e) = k.ext() {
                v.errors.extend(super::ext::check(e, &s.0).0);
            }
        }
    }
    v.errors
}

/// istiod's `validateMetadata`: annotations only istiod may set, and
/// `istio.io/dry-run` only on an ALLOW or DENY AuthorizationPolicy.
fn metadata(v: &mut V, meta: &Meta, spec: &IstioSpec) {
    let (ns, name) = (meta.ns(), meta.name.as_str());
    if let Some(val) = meta.annotations.get("istio.io/dry-run") {
        match spec {
            IstioSpec::AuthorizationPolicy(ap) => match ap.action {
                Action::Allow | Action::Deny => {
                    if !matches!(val.as_str(), "1" | "t" | "T" | "TRUE" | "true" | "True" | "0" | "f" | "F" | "FALSE" | "false" | "False") {
                        v.err(
                            "metadata.annotations",
                            format!(
                                "{ns}/{name} has annotation istio.io/dry-run with invalid value ({val}): strconv.ParseBool: parsing {val:?}: invalid syntax"
                            ),
                        );
                    }
                }
                other => v.err(
                    "metadata.annotations",
                    format!(
                        "the annotation istio.io/dry-run currently only supports action ALLOW/DENY, found action {} in {ns}/{name}",
                        match other {
                            Action::Audit => "AUDIT",
                            _ => "CUSTOM",
                        }
                    ),
                ),
            },
            _ => v.err(
                "metadata.annotations",
                format!("{ns}/{name} has unsupported annotation istio.io/dry-run, please remove the annotation"),
            ),
        }
    }
    // istiod's own dry run of an invalid object (the validation
    // controller's readiness check) carries this.
    const ALWAYS_REJECT: &str = "internal.istio.io/webhook-always-reject";
    if meta.annotations.contains_key(ALWAYS_REJECT) {
        v.err("metadata.annotations", format!("{ALWAYS_REJECT:?} annotation found, rejecting"));
    }
    for internal in ["internal.istio.io/parent-namespace", "internal.istio.io/parents"] {
        if meta.annotations.contains_key(internal) {
            v.err("metadata.annotations", format!("{internal:?} annotation found, this may not be set by users"));
        }
    }
}

/// The CRD's rules on a WorkloadEntry's (or endpoint's) address and ports:
/// a `unix://` socket is absolute or abstract, not a directory, and has no
/// ports; ports are 1..65535 under valid names.
/// The CRD's lengths and sizes on a WorkloadEntry (or a ServiceEntry
/// endpoint).
fn workload_entry_sizes(v: &mut V, path: &str, e: &super::networking::WorkloadEntry) {
    for (field, value, max) in [
        ("address", &e.address, 256),
        ("locality", &e.locality, 2048),
        ("network", &e.network, 2048),
        ("serviceAccount", &e.service_account, 253),
    ] {
        if value.len() > max {
            v.err(format!("{path}.{field}"), format!("may not be longer than {max} characters"));
        }
    }
    if e.labels.len() > 256 {
        v.err(format!("{path}.labels"), "may not have more than 256 labels");
    }
    if e.ports.len() > 128 {
        v.err(format!("{path}.ports"), "may not have more than 128 ports");
    }
}

fn workload_address(v: &mut V, path: &str, address: &str, ports: &std::collections::BTreeMap<String, u32>) {
    if let Some(uds) = address.strip_prefix("unix://") {
        if !(uds.starts_with('/') || uds.starts_with('@')) {
            v.err(format!("{path}.address"), "UDS must be an absolute path or abstract socket");
        }
        if uds.ends_with('/') {
            v.err(format!("{path}.address"), "UDS may not be a dir");
        }
        if !ports.is_empty() {
            v.err(format!("{path}.ports"), "UDS may not include ports");
        }
    }
    for (name, port) in ports {
        let valid_name = name.len() < 63
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !name.starts_with('-')
            && !name.ends_with('-')
            && !name.is_empty();
        if !valid_name {
            v.err(format!("{path}.ports"), "port name must be valid");
        }
        if !(1..=65535).contains(port) {
            v.err(format!("{path}.ports[{name}]"), "port must be between 1-65535");
        }
    }
}

fn weights<'a>(v: &mut V, path: &str, dests: impl Iterator<Item = (i32, Option<&'a str>)>) {
    let mut total = 0i64;
    let mut n = 0;
    for (i, (w, host)) in dests.enumerate() {
        n += 1;
        if !(0..=100).contains(&w) {
            v.err(format!("{path}[{i}].weight"), format!("weight {w} must be in the range 0..100"));
        }
        total += i64::from(w);
        match host {
            None => v.err(format!("{path}[{i}].destination"), "destination is required"),
            Some("") => v.err(format!("{path}[{i}].destination.host"), "destination host is required"),
            Some(_) => {}
        }
    }
    // istiod: with several destinations the weights must add up to 100
    // (a single destination may leave its weight out).
    if n > 1 && total != 100 {
        v.err(path, format!("total destination weight {total} != 100"));
    }
}

fn virtual_service(v: &mut V, s: &VirtualService) {
    // No hosts: a delegate VirtualService (istiod's ValidateVirtualService,
    // PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE on by default).
    if s.hosts.is_empty() {
        if !s.gateways.is_empty() {
            v.err("spec.gateways", "delegate virtual service must have no gateways specified");
        }
        if !s.tls.is_empty() {
            v.err("spec.tls", "delegate virtual service must have no tls route specified");
        }
        if !s.tcp.is_empty() {
            v.err("spec.tcp", "delegate virtual service must have no tcp route specified");
        }
        for (i, r) in s.http.iter().enumerate() {
            if r.delegate.is_some() {
                v.err(format!("spec.http[{i}]"), "delegate HTTP route cannot contain delegate");
            }
        }
    }
    for (i, h) in s.hosts.iter().enumerate() {
        if h.is_empty() {
            v.err(format!("spec.hosts[{i}]"), "host must not be empty");
        }
    }
    if s.http.is_empty() && s.tcp.is_empty() && s.tls.is_empty() {
        v.err("spec", "http, tcp or tls must be provided in virtual service");
    }
    for (i, r) in s.http.iter().enumerate() {
        http_route(v, &format!("spec.http[{i}]"), r);
    }
    let l4 = |v: &mut V, path: String, route: &[RouteDestination]| {
        if route.is_empty() {
            v.err(&path, "route is required");
        }
        weights(v, &path, route.iter().map(|d| (d.weight, d.destination.as_ref().map(|d| d.host.as_str()))));
    };
    for (i, r) in s.tcp.iter().enumerate() {
        l4(v, format!("spec.tcp[{i}].route"), &r.route);
    }
    for (i, r) in s.tls.iter().enumerate() {
        if r.matches.is_empty() {
            v.err(format!("spec.tls[{i}].match"), "TLS route must have at least one match condition");
        }
        for (j, m) in r.matches.iter().enumerate() {
            if m.sni_hosts.is_empty() {
                v.err(format!("spec.tls[{i}].match[{j}].sniHosts"), "TLS match must have at least one SNI host");
            }
        }
        l4(v, format!("spec.tls[{i}].route"), &r.route);
    }
}

/// istiod's `validateStringRegexp` (after `validateStringMatchRegexp`'s
/// empty check): Envoy's RE2 refuses a program over its size limit, which
/// istiod approximates by 1,024 bytes, and Go's `regexp` is the syntax.
pub fn regex(re: &str, field: &str) -> Result<(), String> {
    if re.is_empty() {
        return Err(format!("{field:?}: regex string match should not be empty"));
    }
    if re.len() > 1024 {
        return Err(format!("{field:?}: regex is too large, max length allowed is 1024"));
    }
    super::re2::check(re).map_err(|e| {
        format!("{field:?}: {e}; Istio uses RE2 style regex-based match (https://github.com/google/re2/wiki/Syntax)")
    })
}

/// The CRD's oneOf (one of exact, prefix and regex), then istiod's
/// `validateStringMatch` for `field` (its `where`): `uri` takes an empty
/// prefix (Envoy does), CORS origins take no empty match at all
/// (`validateAllowOrigins`), `*` in `withoutHeaders` means "present".
fn string_match(v: &mut V, path: String, field: &str, sm: &super::networking::StringMatch) {
    if [&sm.exact, &sm.prefix, &sm.regex].iter().filter(|x| x.is_some()).count() > 1 {
        v.err(path, "only one of exact, prefix and regex");
        return;
    }
    let given = sm.exact.as_deref().or(sm.prefix.as_deref()).or(sm.regex.as_deref()).unwrap_or_default();
    let checked = match field {
        "allowOrigins" if given.is_empty() => {
            Err(format!("'{given}' is not a valid match type for CORS allow origins"))
        }
        "allowOrigins" => sm.regex.as_deref().map_or(Ok(()), |re| regex(re, "corsPolicy.allowOrigins")),
        "withoutHeaders" if sm.regex.as_deref() == Some("*") => Ok(()),
        "uri" => sm.regex.as_deref().map_or(Ok(()), |re| regex(re, field)),
        _ if sm.prefix.as_deref() == Some("") => Err(format!("{field:?}: prefix string match should not be empty")),
        _ => sm.regex.as_deref().map_or(Ok(()), |re| regex(re, field)),
    };
    if let Err(e) = checked {
        v.err(path, e);
    }
}

/// istiod's `validateHTTPRewrite` and `validateURIRegexRewrite`.
fn http_rewrite(v: &mut V, path: &str, rw: &super::networking::HttpRewrite) {
    if !rw.uri.is_empty() && rw.uri_regex_rewrite.is_some() {
        v.err(path, "rewrite may only contain one of URI or UriRegexRewrite");
    } else if rw.uri.is_empty() && rw.uri_regex_rewrite.is_none() && rw.authority.is_empty() {
        v.err(
            path,
            "rewrite must specify at least one of URI, UriRegexRewrite, or authority. Only one of URI or UriRegexRewrite may be specified",
        );
    } else if let Some(rr) = &rw.uri_regex_rewrite {
        let checked = if rr.pattern.is_empty() || rr.rewrite.is_empty() {
            Err("UriRegexRewrite requires both Rewrite and Match fields to be specified".to_owned())
        } else {
            regex(&rr.pattern, "HTTPRewrite.UriRegexRewrite.Match")
        };
        if let Err(e) = checked {
            v.err(format!("{path}.uriRegexRewrite"), format!("UriRegexRewrite has errors\n{e}"));
        }
    }
}

fn http_route(v: &mut V, path: &str, r: &HttpRoute) {
    let targets = [!r.route.is_empty(), r.redirect.is_some(), r.direct_response.is_some(), r.delegate.is_some()];
    match targets.iter().filter(|x| **x).count() {
        0 => v.err(path, "HTTP route must have a route, a redirect, a direct response or a delegate"),
        1 => {}
        _ => v.err(path, "only one of route, redirect, direct response and delegate may be set"),
    }
    weights(
        v,
        &format!("{path}.route"),
        r.route.iter().map(|d| (d.weight, d.destination.as_ref().map(|d| d.host.as_str()))),
    );
    for (i, m) in r.matches.iter().enumerate() {
        let mp = format!("{path}.match[{i}]");
        if m.port != 0 {
            v.port(&format!("{mp}.port"), m.port);
        }
        for (field, sm) in [("uri", &m.uri), ("scheme", &m.scheme), ("method", &m.method), ("authority", &m.authority)]
        {
            if let Some(sm) = sm {
                string_match(v, format!("{mp}.{field}"), field, sm);
            }
        }
        for (field, map) in
            [("headers", &m.headers), ("queryParams", &m.query_params), ("withoutHeaders", &m.without_headers)]
        {
            for (name, sm) in map {
                string_match(v, format!("{mp}.{field}[{name}]"), field, sm);
            }
        }
    }
    if let Some(c) = &r.cors_policy {
        for (j, sm) in c.allow_origins.iter().enumerate() {
            string_match(v, format!("{path}.corsPolicy.allowOrigins[{j}]"), "allowOrigins", sm);
        }
        v.duration(&format!("{path}.corsPolicy.maxAge"), c.max_age.as_ref());
    }
    if let Some(rw) = &r.rewrite {
        http_rewrite(v, &format!("{path}.rewrite"), rw);
    }
    v.duration(&format!("{path}.timeout"), r.timeout.as_ref());
    if let Some(retry) = &r.retries {
        if retry.attempts < 0 {
            v.err(format!("{path}.retries.attempts"), "attempts cannot be negative");
        }
        v.duration(&format!("{path}.retries.perTryTimeout"), retry.per_try_timeout.as_ref());
        v.duration(&format!("{path}.retries.backoff"), retry.backoff.as_ref());
    }
    if let Some(rd) = &r.redirect
        && rd.port.is_some()
        && rd.derive_port.is_some()
    {
        v.err(format!("{path}.redirect"), "only one of port and derivePort may be set");
    }
    if let Some(body) = r.direct_response.as_ref().and_then(|d| d.body.as_ref())
        && body.string.is_some()
        && body.bytes.is_some()
    {
        v.err(format!("{path}.directResponse.body"), "only one of string and bytes may be set");
    }
    if let Some(f) = &r.fault {
        if f.delay.is_none() && f.abort.is_none() {
            v.err(format!("{path}.fault"), "fault must have a delay or an abort");
        }
        if let Some(d) = &f.delay {
            if d.fixed_delay.is_none() && d.exponential_delay.is_none() {
                v.err(format!("{path}.fault.delay"), "a delay needs fixedDelay");
            }
            if d.fixed_delay.is_some() && d.exponential_delay.is_some() {
                v.err(format!("{path}.fault.delay"), "only one of fixedDelay and exponentialDelay may be set");
            }
            v.duration(&format!("{path}.fault.delay.fixedDelay"), d.fixed_delay.as_ref());
            v.duration(&format!("{path}.fault.delay.exponentialDelay"), d.exponential_delay.as_ref());
            if let Some(p) = &d.percentage {
                v.percent(&format!("{path}.fault.delay.percentage.value"), p.value);
            }
        }
        if let Some(a) = &f.abort {
            if usize::from(a.http_status.is_some())
                + usize::from(a.grpc_status.is_some())
                + usize::from(a.http2_error.is_some())
                > 1
            {
                v.err(format!("{path}.fault.abort"), "only one of httpStatus, grpcStatus and http2Error may be set");
            }
            match (a.http_status, &a.grpc_status) {
                (Some(s), _) if !(200..=599).contains(&s) => {
                    v.err(format!("{path}.fault.abort.httpStatus"), format!("invalid HTTP status {s}"))
                }
                (None, None) => v.err(format!("{path}.fault.abort"), "an abort needs httpStatus or grpcStatus"),
                _ => {}
            }
            if let Some(p) = &a.percentage {
                v.percent(&format!("{path}.fault.abort.percentage.value"), p.value);
            }
        }
    }
    if let Some(d) = &r.direct_response
        && !(200..=599).contains(&d.status)
    {
        v.err(format!("{path}.directResponse.status"), format!("invalid HTTP status {}", d.status));
    }
    if let Some(p) = &r.mirror_percentage {
        v.percent(&format!("{path}.mirrorPercentage.value"), p.value);
    }
    if let Some(m) = &r.mirror
        && m.host.is_empty()
    {
        v.err(format!("{path}.mirror.host"), "mirror host is required");
    }
    for (j, m) in r.mirrors.iter().enumerate() {
        if m.destination.as_ref().is_none_or(|d| d.host.is_empty()) {
            v.err(format!("{path}.mirrors[{j}].destination.host"), "mirror host is required");
        }
        if let Some(p) = &m.percentage {
            v.percent(&format!("{path}.mirrors[{j}].percentage.value"), p.value);
        }
    }
}

fn destination_rule(v: &mut V, s: &DestinationRule) {
    if let Some(sel) = &s.workload_selector {
        match_labels(v, "spec.workloadSelector.matchLabels", &sel.match_labels);
    }
    if s.host.is_empty() {
        v.err("spec.host", "host is required");
    }
    if let Some(p) = &s.traffic_policy {
        traffic_policy(v, "spec.trafficPolicy", p);
    }
    let mut names = BTreeSet::new();
    for (i, sub) in s.subsets.iter().enumerate() {
        if sub.name.is_empty() {
            v.err(format!("spec.subsets[{i}].name"), "subset name is required");
        } else if !names.insert(&sub.name) {
            v.err(format!("spec.subsets[{i}].name"), format!("duplicate subset name {:?}", sub.name));
        }
        if let Some(p) = &sub.traffic_policy {
            traffic_policy(v, &format!("spec.subsets[{i}].trafficPolicy"), p);
        }
    }
}

fn traffic_policy(v: &mut V, path: &str, p: &TrafficPolicy) {
    if let Some(t) = &p.tunnel {
        if t.target_host.is_empty() {
            v.err(format!("{path}.tunnel.targetHost"), "targetHost is required");
        }
        if t.target_port == 0 {
            v.err(format!("{path}.tunnel.targetPort"), "targetPort is required");
        } else {
            v.port(&format!("{path}.tunnel.targetPort"), t.target_port);
        }
    }
    if let Some(pct) = p.retry_budget.as_ref().and_then(|b| b.percent) {
        v.percent(&format!("{path}.retryBudget.percent"), pct);
    }
    if p.port_level_settings.len() > 4096 {
        v.err(format!("{path}.portLevelSettings"), "may not have more than 4096 items");
    }
    if let Some(lb) = &p.load_balancer {
        load_balancer(v, &format!("{path}.loadBalancer"), lb);
    }
    if let Some(o) = &p.outlier_detection {
        outlier(v, &format!("{path}.outlierDetection"), o);
    }
    if let Some(t) = &p.tls {
        client_tls(v, &format!("{path}.tls"), t);
    }
    if let Some(cp) = &p.connection_pool {
        connection_pool(v, &format!("{path}.connectionPool"), cp);
    }
    for (i, pl) in p.port_level_settings.iter().enumerate() {
        let pp = format!("{path}.portLevelSettings[{i}]");
        match &pl.port {
            None => v.err(format!("{pp}.port"), "port is required"),
            Some(port) => v.port(&format!("{pp}.port.number"), port.number),
        }
        if let Some(lb) = &pl.load_balancer {
            load_balancer(v, &format!("{pp}.loadBalancer"), lb);
        }
        if let Some(o) = &pl.outlier_detection {
            outlier(v, &format!("{pp}.outlierDetection"), o);
        }
        if let Some(t) = &pl.tls {
            client_tls(v, &format!("{pp}.tls"), t);
        }
        if let Some(cp) = &pl.connection_pool {
            connection_pool(v, &format!("{pp}.connectionPool"), cp);
        }
    }
}

/// Every duration of a connection pool (at least 1 ms, as the CRD says).
fn connection_pool(v: &mut V, path: &str, cp: &super::networking::ConnectionPoolSettings) {
    if let Some(tcp) = &cp.tcp {
        v.duration(&format!("{path}.tcp.connectTimeout"), tcp.connect_timeout.as_ref());
        v.duration(&format!("{path}.tcp.maxConnectionDuration"), tcp.max_connection_duration.as_ref());
        // istiod checks it only when set to more than zero ("0s" turns
        // the timeout off), and the CRD has no rule on it.
        if tcp.idle_timeout.as_deref().and_then(|d| duration::parse(d).ok()).is_none_or(|d| !d.is_zero()) {
            v.duration(&format!("{path}.tcp.idleTimeout"), tcp.idle_timeout.as_ref());
        }
        if let Some(k) = &tcp.tcp_keepalive {
            v.duration(&format!("{path}.tcp.tcpKeepalive.time"), k.time.as_ref());
            v.duration(&format!("{path}.tcp.tcpKeepalive.interval"), k.interval.as_ref());
        }
    }
    if let Some(http) = &cp.http {
        v.duration(&format!("{path}.http.idleTimeout"), http.idle_timeout.as_ref());
        if let Some(k) = &http.http2_keep_alive {
            v.duration(&format!("{path}.http.http2KeepAlive.interval"), k.interval.as_ref());
            v.duration(&format!("{path}.http.http2KeepAlive.timeout"), k.timeout.as_ref());
        }
    }
}

fn load_balancer(v: &mut V, path: &str, lb: &LoadBalancerSettings) {
    if lb.simple.is_some() && lb.consistent_hash.is_some() {
        v.err(path, "only one of simple and consistentHash may be set");
    }
    if let Some(size) = lb.zone_aware_lb_setting.as_ref().and_then(|z| z.min_cluster_size)
        && !(1..=u64::from(u32::MAX)).contains(&size)
    {
        v.err(format!("{path}.zoneAwareLbSetting.minClusterSize"), "must be in the range 1..4294967295");
    }
    v.duration(&format!("{path}.warmupDurationSecs"), lb.warmup_duration_secs.as_ref());
    if let Some(w) = &lb.warmup {
        if w.duration.is_none() {
            v.err(format!("{path}.warmup.duration"), "duration is required");
        }
        v.duration(&format!("{path}.warmup.duration"), w.duration.as_ref());
        if let Some(m) = w.minimum_percent {
            v.percent(&format!("{path}.warmup.minimumPercent"), m);
        }
        if w.aggression.is_some_and(|a| a < 0.0) {
            v.err(format!("{path}.warmup.aggression"), "aggression may not be negative");
        }
    }
    if let Some(h) = &lb.consistent_hash {
        let keys = usize::from(h.http_header_name.is_some())
            + usize::from(h.http_cookie.is_some())
            + usize::from(h.use_source_ip.is_some())
            + usize::from(h.http_query_parameter_name.is_some());
        if keys > 1 {
            v.err(
                format!("{path}.consistentHash"),
                "only one of httpHeaderName, httpCookie, useSourceIp and httpQueryParameterName may be set",
            );
        }
        if h.ring_hash.is_some() && h.maglev.is_some() {
            v.err(format!("{path}.consistentHash"), "only one of ringHash and maglev may be set");
        }
        if let Some(c) = &h.http_cookie {
            if c.name.is_empty() {
                v.err(format!("{path}.consistentHash.httpCookie.name"), "name is required");
            }
            for (j, a) in c.attributes.iter().enumerate() {
                if a.name.is_empty() {
                    v.err(format!("{path}.consistentHash.httpCookie.attributes[{j}].name"), "name is required");
                }
            }
        }
    }
}

fn outlier(v: &mut V, path: &str, o: &OutlierDetection) {
    if !(0..=100).contains(&o.max_ejection_percent) {
        v.err(format!("{path}.maxEjectionPercent"), "must be in the range 0..100");
    }
    if !(0..=100).contains(&o.min_health_percent) {
        v.err(format!("{path}.minHealthPercent"), "must be in the range 0..100");
    }
    v.duration(&format!("{path}.interval"), o.interval.as_ref());
    v.duration(&format!("{path}.baseEjectionTime"), o.base_ejection_time.as_ref());
    for (j, c) in o.outlier_detection_http_error_codes.iter().enumerate() {
        if !(100..=599).contains(c) {
            v.err(format!("{path}.outlierDetectionHttpErrorCodes[{j}]"), format!("invalid HTTP status {c}"));
        }
    }
}

fn client_tls(v: &mut V, path: &str, t: &ClientTlsSettings) {
    if t.mode == ClientTlsMode::Mutual
        && t.credential_name.is_empty()
        && (t.client_certificate.is_empty() || t.private_key.is_empty())
    {
        v.err(path, "MUTUAL needs clientCertificate and privateKey, or credentialName");
    }
}

fn gateway(v: &mut V, s: &Gateway) {
    if s.servers.is_empty() {
        v.err("spec.servers", "gateway must have at least one server");
    }
    for (i, srv) in s.servers.iter().enumerate() {
        let path = format!("spec.servers[{i}]");
        match &srv.port {
            None => v.err(format!("{path}.port"), "port is required"),
            Some(p) => {
                v.port(&format!("{path}.port.number"), p.number);
                if p.protocol.is_empty() {
                    v.err(format!("{path}.port.protocol"), "protocol is required");
                }
                if p.name.is_empty() {
                    v.err(format!("{path}.port.name"), "port name is required");
                }
            }
        }
        if srv.hosts.is_empty() {
            v.err(format!("{path}.hosts"), "server must have at least one host");
        }
        if let Some(t) = &srv.tls {
            server_tls(v, &format!("{path}.tls"), t);
        }
    }
}

/// The CRD's rules on ServerTLSSettings.
fn server_tls(v: &mut V, path: &str, t: &super::networking::ServerTlsSettings) {
    if !t.tls_certificates.is_empty() && !t.credential_names.is_empty() {
        v.err(path, "only one of credentialNames or tlsCertificates can be set");
    }
    if !t.credential_name.is_empty() && !t.credential_names.is_empty() {
        v.err(path, "only one of credentialName or credentialNames can be set");
    }
    if t.credential_names.len() > 2 {
        v.err(format!("{path}.credentialNames"), "may not have more than 2 items");
    }
    if t.tls_certificates.len() > 2 {
        v.err(format!("{path}.tlsCertificates"), "may not have more than 2 items");
    }
}

fn service_entry(v: &mut V, s: &ServiceEntry) {
    if let Some(sel) = &s.workload_selector {
        match_labels(v, "spec.workloadSelector.labels", &sel.labels);
        if sel.labels.len() > 256 {
            v.err("spec.workloadSelector.labels", "may not have more than 256 labels");
        }
    }
    if s.hosts.is_empty() {
        v.err("spec.hosts", "service entry must have at least one host");
    }
    for (field, n, max) in [
        ("hosts", s.hosts.len(), 256),
        ("addresses", s.addresses.len(), 256),
        ("ports", s.ports.len(), 256),
        ("endpoints", s.endpoints.len(), 4096),
    ] {
        if n > max {
            v.err(format!("spec.{field}"), format!("may not have more than {max} items"));
        }
    }
    for (i, h) in s.hosts.iter().enumerate() {
        if h.is_empty() {
            v.err(format!("spec.hosts[{i}]"), "host must not be empty");
        } else if h == "*" {
            v.err(format!("spec.hosts[{i}]"), "hostname cannot be wildcard");
        } else if matches!(s.resolution, Resolution::Dns | Resolution::DnsRoundRobin)
            && h.contains('*')
            && s.endpoints.is_empty()
        {
            v.err(format!("spec.hosts[{i}]"), "DNS resolution of a wildcard host needs endpoints");
        }
    }
    let (mut numbers, mut names) = (BTreeSet::new(), BTreeSet::new());
    for (i, p) in s.ports.iter().enumerate() {
        v.port(&format!("spec.ports[{i}].number"), p.number);
        if !numbers.insert(p.number) {
            v.err(format!("spec.ports[{i}].number"), format!("duplicate port number {}", p.number));
        }
        if !p.name.is_empty() && !names.insert(&p.name) {
            v.err(format!("spec.ports[{i}].name"), format!("duplicate port name {:?}", p.name));
        }
        // An empty protocol is sniffed (istiod's ValidateProtocol).
        if !p.protocol.is_empty() && !known_protocol(&p.protocol) {
            v.err(format!("spec.ports[{i}].protocol"), format!("unsupported protocol: {}", p.protocol));
        }
        if !dns1123_label(&p.name) {
            v.err(format!("spec.ports[{i}].name"), format!("invalid port name: {}", p.name));
        }
        if p.name.len() > 256 || p.protocol.len() > 256 {
            v.err(format!("spec.ports[{i}]"), "name and protocol may not be longer than 256 characters");
        }
        if p.target_port != 0 {
            v.port(&format!("spec.ports[{i}].targetPort"), p.target_port);
        }
    }
    if !s.endpoints.is_empty() && s.workload_selector.is_some() {
        v.err("spec.workloadSelector", "only one of endpoints and workloadSelector may be set");
    }
    // The CRD's rules.
    if s.addresses.iter().any(|a| a.len() > 64) {
        v.err("spec.addresses", "addresses may not be longer than 64 characters");
    }
    if s.addresses.iter().any(|a| a.contains('/')) && !matches!(s.resolution, Resolution::Static | Resolution::None) {
        v.err("spec", "CIDR addresses are allowed only for NONE/STATIC resolution types");
    }
    if s.resolution == Resolution::None && !s.endpoints.is_empty() {
        v.err("spec", "NONE mode cannot set endpoints");
    }
    if s.resolution == Resolution::DnsRoundRobin && s.endpoints.len() > 1 {
        v.err("spec", "DNS_ROUND_ROBIN mode cannot have multiple endpoints");
    }
    for (i, e) in s.endpoints.iter().enumerate() {
        let path = format!("spec.endpoints[{i}].address");
        workload_address(v, &format!("spec.endpoints[{i}]"), &e.address, &e.ports);
        workload_entry_sizes(v, &format!("spec.endpoints[{i}]"), e);
        if e.address.is_empty() && e.network.is_empty() {
            v.err(&path, "address is required");
        } else if !e.address.is_empty()
            && s.resolution == Resolution::Static
            && !e.address.starts_with("unix://")
            && e.address.parse::<IpAddr>().is_err()
        {
            v.err(&path, format!("endpoint address {:?} is not a valid IP address", e.address));
        }
        for (name, port) in &e.ports {
            v.port(&format!("spec.endpoints[{i}].ports[{name}]"), *port);
        }
    }
}

fn sidecar(v: &mut V, s: &Sidecar) {
    if let Some(cp) = &s.inbound_connection_pool {
        connection_pool(v, "spec.inboundConnectionPool", cp);
    }
    if s.outbound_traffic_policy
        .as_ref()
        .is_some_and(|o| o.mode == super::networking::OutboundTrafficMode::AllowAnyDynamicDns)
    {
        // validateSidecarOutboundTrafficPolicy, in its words.
        v.err(
            "spec.outboundTrafficPolicy.mode",
            "sidecar: ALLOW_ANY_DYNAMIC_DNS mode is only supported in MeshConfig, not in Sidecar resource",
        );
    }
    if let Some(proxy) = s.outbound_traffic_policy.as_ref().and_then(|o| o.egress_proxy.as_ref())
        && proxy.host.is_empty()
    {
        v.err("spec.outboundTrafficPolicy.egressProxy.host", "host is required");
    }
    for (i, l) in s.ingress.iter().enumerate() {
        if l.port.is_none() {
            v.err(format!("spec.ingress[{i}].port"), "port is required");
        }
        if let Some(cp) = &l.connection_pool {
            connection_pool(v, &format!("spec.ingress[{i}].connectionPool"), cp);
        }
        if let Some(t) = &l.tls {
            server_tls(v, &format!("spec.ingress[{i}].tls"), t);
        }
    }
    if let Some(sel) = &s.workload_selector {
        match_labels(v, "spec.workloadSelector.labels", &sel.labels);
        if sel.labels.len() > 256 {
            v.err("spec.workloadSelector.labels", "may not have more than 256 labels");
        }
    }
    for (i, e) in s.egress.iter().enumerate() {
        if e.hosts.is_empty() {
            v.err(format!("spec.egress[{i}].hosts"), "egress listener must have at least one host");
        }
        for (j, h) in e.hosts.iter().enumerate() {
            match h.split_once('/') {
                Some((ns, host)) if !ns.is_empty() && !host.is_empty() => {}
                _ => v.err(format!("spec.egress[{i}].hosts[{j}]"), format!("host {h:?} must be namespace/dnsName")),
            }
        }
    }
}

/// The CRD's `matchLabels` rules (and istiod's `validateWorkloadSelector`):
/// no empty key, no `*` in a key or value, values of at most 63 characters.
fn match_labels(v: &mut V, path: &str, labels: &std::collections::BTreeMap<String, String>) {
    if labels.len() > 4096 {
        v.err(path, "may not have more than 4096 labels");
    }
    for (k, val) in labels {
        if k.is_empty() {
            v.err(path, format!("empty key is not supported in selector: {:?}", format!("{k}={val}")));
        }
        if k.contains('*') || val.contains('*') {
            v.err(path, format!("wildcard is not supported in selector: {:?}", format!("{k}={val}")));
        }
        if val.len() > 63 {
            v.err(format!("{path}[{k}]"), "label value may not be longer than 63 characters");
        }
    }
}

/// A policy's `selector`, `targetRef` and `targetRefs`: at most one, and
/// each reference as the CRD shapes it.
fn policy_target(
    v: &mut V,
    selector: Option<&super::WorkloadSelector>,
    target_ref: Option<&super::PolicyTargetReference>,
    target_refs: &[super::PolicyTargetReference],
) {
    let set =
        usize::from(selector.is_some()) + usize::from(target_ref.is_some()) + usize::from(!target_refs.is_empty());
    if set > 1 {
        v.err("spec", "only one of targetRefs or selector can be set");
    }
    if let Some(sel) = selector {
        match_labels(v, "spec.selector.matchLabels", &sel.match_labels);
    }
    if target_refs.len() > 16 {
        v.err("spec.targetRefs", "may not have more than 16 items");
    }
    let refs = target_ref
        .map(|r| ("spec.targetRef".to_owned(), r))
        .into_iter()
        .chain(target_refs.iter().enumerate().map(|(i, r)| (format!("spec.targetRefs[{i}]"), r)));
    for (path, r) in refs {
        if !r.namespace.is_empty() {
            v.err(format!("{path}.namespace"), "cross namespace referencing is not currently supported");
        }
        let kind_ok = r.kind.len() <= 63
            && r.kind.starts_with(|c: char| c.is_ascii_alphabetic())
            && r.kind.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !r.kind.ends_with('-');
        if !kind_ok {
            v.err(format!("{path}.kind"), format!("invalid kind {:?}", r.kind));
        }
        if r.name.is_empty() || r.name.len() > 253 {
            v.err(format!("{path}.name"), "name is required (at most 253 characters)");
        }
        let group_ok = r.group.is_empty()
            || (r.group.len() <= 253
                && r.group.split('.').all(|l| {
                    !l.is_empty()
                        && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                }));
        if !group_ok {
            v.err(format!("{path}.group"), format!("invalid group {:?}", r.group));
        }
    }
}

fn peer_authentication(v: &mut V, s: &PeerAuthentication) {
    if let Some(sel) = &s.selector {
        match_labels(v, "spec.selector.matchLabels", &sel.match_labels);
    }
    if s.port_level_mtls.as_ref().is_some_and(|p| p.is_empty()) {
        v.err("spec.portLevelMtls", "portLevelMtls must have at least one port");
    }
    if let Some(ports) = &s.port_level_mtls {
        if s.selector.as_ref().is_none_or(|sel| sel.match_labels.is_empty()) {
            v.err("spec.portLevelMtls", "port level mTLS needs a workload selector");
        }
        for port in ports.keys() {
            v.port(&format!("spec.portLevelMtls[{port}]"), *port);
        }
    }
}

/// Keys istiod accepts in `when` conditions (prefix match where they end in `.` or `[`).
const WHEN_KEYS: [&str; 13] = [
    "request.headers[",
    "source.ip",
    "remote.ip",
    "source.namespace",
    "source.serviceAccount",
    "source.trustDomain",
    "source.principal",
    "request.auth.principal",
    "request.auth.audiences",
    "request.auth.presenter",
    "request.auth.claims[",
    "destination.ip",
    "destination.port",
];

fn authorization_policy(v: &mut V, s: &AuthorizationPolicy) {
    if s.action == Action::Custom && s.provider.is_none() {
        v.err("spec.provider", "CUSTOM action needs a provider");
    }
    if s.action != Action::Custom && s.provider.is_some() {
        v.err("spec.provider", "a provider is only allowed with the CUSTOM action");
    }
    policy_target(v, s.selector.as_ref(), s.target_ref.as_ref(), &s.target_refs);
    if s.rules.len() > 512 {
        v.err("spec.rules", "may not have more than 512 items");
    }
    for (i, r) in s.rules.iter().enumerate() {
        if r.from.len() > 512 {
            v.err(format!("spec.rules[{i}].from"), "may not have more than 512 items");
        }
        for (j, f) in r.from.iter().enumerate() {
            let path = format!("spec.rules[{i}].from[{j}].source");
            let Some(src) = &f.source else {
                v.err(path, "source is required");
                continue;
            };
            let accounts = !src.service_accounts.is_empty() || !src.not_service_accounts.is_empty();
            let others = !src.principals.is_empty()
                || !src.not_principals.is_empty()
                || !src.namespaces.is_empty()
                || !src.not_namespaces.is_empty();
            if accounts && others {
                v.err(&path, "Cannot set serviceAccounts with namespaces or principals");
            }
            for (field, list) in
                [("serviceAccounts", &src.service_accounts), ("notServiceAccounts", &src.not_service_accounts)]
            {
                if list.len() > 16 {
                    v.err(format!("{path}.{field}"), "may not have more than 16 items");
                }
                if list.iter().any(|a| a.len() > 320) {
                    v.err(format!("{path}.{field}"), "items may not be longer than 320 characters");
                }
            }
        }
        for (j, t) in r.to.iter().enumerate() {
            if t.operation.is_none() {
                v.err(format!("spec.rules[{i}].to[{j}].operation"), "operation is required");
            }
        }
        for (j, c) in r.when.iter().enumerate() {
            let ok = WHEN_KEYS.iter().any(|k| c.key == *k || (k.ends_with('[') && c.key.starts_with(k)))
                || c.key == "connection.sni"
                || c.key.starts_with("experimental.envoy.filters.");
            if !ok {
                v.err(format!("spec.rules[{i}].when[{j}].key"), format!("unknown attribute {:?}", c.key));
            }
            if c.values.is_empty() && c.not_values.is_empty() {
                v.err(format!("spec.rules[{i}].when[{j}]"), "values or notValues is required");
            }
        }
    }
}

fn request_authentication(v: &mut V, s: &RequestAuthentication) {
    policy_target(v, s.selector.as_ref(), s.target_ref.as_ref(), &s.target_refs);
    if s.jwt_rules.len() > 4096 {
        v.err("spec.jwtRules", "may not have more than 4096 items");
    }
    for (i, r) in s.jwt_rules.iter().enumerate() {
        let path = format!("spec.jwtRules[{i}]");
        if !r.jwks_uri.is_empty() {
            let lower = r.jwks_uri.to_ascii_lowercase();
            if !(lower.starts_with("http://") || lower.starts_with("https://")) {
                v.err(format!("{path}.jwksUri"), "url must have scheme http:// or https://");
            }
            if r.jwks_uri.len() > 2048 {
                v.err(format!("{path}.jwksUri"), "may not be longer than 2048 characters");
            }
        }
        for (j, h) in r.from_headers.iter().enumerate() {
            if h.name.is_empty() {
                v.err(format!("{path}.fromHeaders[{j}].name"), "name is required");
            }
        }
        for (j, c) in r.output_claim_to_headers.iter().enumerate() {
            let cpath = format!("{path}.outputClaimToHeaders[{j}]");
            if c.header.is_empty() || !c.header.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                v.err(format!("{cpath}.header"), "header must match ^[-_A-Za-z0-9]+$");
            }
            if c.claim.is_empty() {
                v.err(format!("{cpath}.claim"), "claim is required");
            }
        }
        for (field, list) in [
            ("audiences", &r.audiences),
            ("fromParams", &r.from_params),
            ("fromCookies", &r.from_cookies),
            ("spaceDelimitedClaims", &r.space_delimited_claims),
        ] {
            if list.iter().any(String::is_empty) {
                v.err(format!("{path}.{field}"), "items may not be empty");
            }
        }
        if r.space_delimited_claims.len() > 64 {
            v.err(format!("{path}.spaceDelimitedClaims"), "may not have more than 64 items");
        }
        if r.issuer.is_empty() {
            v.err(format!("spec.jwtRules[{i}].issuer"), "issuer is required");
        }
        if !r.jwks.is_empty() && !r.jwks_uri.is_empty() {
            v.err(format!("spec.jwtRules[{i}]"), "only one of jwks and jwksUri may be set");
        }
        v.duration(&format!("spec.jwtRules[{i}].timeout"), r.timeout.as_ref());
    }
}

/// A protocol name istiod's `protocol.Parse` knows (case-insensitive; its
/// `DoubleHBONE` case never matches a lowered name).
fn known_protocol(p: &str) -> bool {
    const KNOWN: [&str; 12] =
        ["tcp", "udp", "grpc", "grpc-web", "http", "http_proxy", "http2", "https", "tls", "mongo", "redis", "mysql"];
    KNOWN.contains(&p.to_ascii_lowercase().as_str())
}

/// Kubernetes' `IsDNS1123Label`: at most 63 of `[a-z0-9-]`, starting and
/// ending alphanumeric.
fn dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}
