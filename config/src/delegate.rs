//! Delegate VirtualServices, merged into the routes of the VirtualServices
//! that delegate to them, as istiod merges them
//! (`pilot/pkg/model/virtualservice_controller.go` `mergeVirtualServices`,
//! `virtualservice.go` `MergeHTTPRoutes`): a route with `delegate` becomes
//! the delegate's routes, each with the root's match conditions merged in
//! (a delegate match that conflicts with every root match drops that
//! route) and the root's settings where the delegate leaves them unset.
//! The delegate's short host names are its own namespace's. A delegate that
//! is missing or not exported to the root's namespace drops the route.

use std::collections::BTreeMap;

use crate::istio::IstioObject;
use crate::istio::IstioSpec;
use crate::istio::networking::{HttpMatchRequest, HttpRoute, StringMatch, VirtualService};

/// Whether some VirtualService delegates (the routing list must then be
/// merged whole: a delegate's change reaches its roots).
pub fn any_delegating(routing: &[IstioObject]) -> bool {
    routing
        .iter()
        .any(|o| matches!(&o.spec, IstioSpec::VirtualService(vs) if vs.http.iter().any(|r| r.delegate.is_some())))
}

/// Merges every delegating VirtualService of `routing` (export defaults
/// already applied) with its delegates.
pub fn merge(routing: &mut [IstioObject], domain: &str) {
    if !any_delegating(routing) {
        return;
    }
    // Delegates (no hosts) by namespace and name, with their short names
    // resolved in their namespace.
    let delegates: BTreeMap<(String, String), (VirtualService, Vec<String>)> = routing
        .iter()
        .filter_map(|o| match &o.spec {
            IstioSpec::VirtualService(vs) if vs.hosts.is_empty() => {
                let mut vs = vs.clone();
                resolve_short_names(&mut vs, o.meta.ns(), domain);
                let export = vs.export_to.clone();
                Some(((o.meta.ns().to_owned(), o.meta.name.clone()), (vs, export)))
            }
            _ => None,
        })
        .collect();
    for o in routing.iter_mut() {
        let ns = o.meta.ns().to_owned();
        let name = o.meta.name.clone();
        let IstioSpec::VirtualService(vs) = &mut o.spec else { continue };
        if vs.hosts.is_empty() || !vs.http.iter().any(|r| r.delegate.is_some()) {
            continue;
        }
        let mut merged = Vec::new();
        for route in std::mem::take(&mut vs.http) {
            let Some(d) = route.delegate.clone() else {
                merged.push(route);
                continue;
            };
            let d_ns = if d.namespace.is_empty() { ns.clone() } else { d.namespace.clone() };
            match delegates.get(&(d_ns.clone(), d.name.clone())) {
                None => {
                    tracing::warn!(target: "model", "delegate virtual service {d_ns}/{} of {ns}/{name} not found", d.name);
                }
                Some((_, export)) if !exported(export, &d_ns, &ns) => {
                    tracing::warn!(target: "model", "delegate virtual service {d_ns}/{} of {ns}/{name} is not exported to {ns}", d.name);
                }
                Some((delegate, _)) => merged.extend(merge_http_routes(&route, &delegate.http)),
            }
        }
        vs.http = merged;
    }
}

fn exported(export: &[String], delegate_ns: &str, root_ns: &str) -> bool {
    export.is_empty() || export.iter().any(|e| e == "*" || e == root_ns || (e == "." && delegate_ns == root_ns))
}

/// `ResolveVirtualServiceShortnames` for destinations: a host without a dot
/// is `<host>.<ns>.svc.<domain>`.
fn resolve_short_names(vs: &mut VirtualService, ns: &str, domain: &str) {
    let fqdn = |h: &mut String| {
        if !h.is_empty() && h != "*" && !h.contains('.') {
            *h = format!("{h}.{ns}.svc.{domain}");
        }
    };
    for r in &mut vs.http {
        for d in r.route.iter_mut().filter_map(|d| d.destination.as_mut()) {
            fqdn(&mut d.host);
        }
        if let Some(m) = r.mirror.as_mut() {
            fqdn(&mut m.host);
        }
        for m in r.mirrors.iter_mut().filter_map(|m| m.destination.as_mut()) {
            fqdn(&mut m.host);
        }
    }
}

/// `MergeHTTPRoutes`: the delegate's routes under the root's.
fn merge_http_routes(root: &HttpRoute, delegate: &[HttpRoute]) -> Vec<HttpRoute> {
    delegate.iter().filter_map(|d| merge_http_route(root, d.clone())).collect()
}

/// `mergeHTTPRoute`.
fn merge_http_route(root: &HttpRoute, mut d: HttpRoute) -> Option<HttpRoute> {
    d.matches = merge_matches(&root.matches, &d.matches)?;
    d.name = match (root.name.is_empty(), d.name.is_empty()) {
        (_, true) => root.name.clone(),
        (false, false) => format!("{}-{}", root.name, d.name),
        (true, false) => d.name,
    };
    macro_rules! inherit {
        ($($f:ident),*) => { $( if d.$f.is_none() { d.$f = root.$f.clone(); } )* };
    }
    inherit!(
        rewrite,
        direct_response,
        timeout,
        retries,
        fault,
        mirror,
        mirror_percent,
        mirror_percentage,
        cors_policy,
        headers
    );
    if d.mirrors.is_empty() {
        d.mirrors = root.mirrors.clone();
    }
    Some(d)
}

/// `mergeHTTPMatchRequests`: each delegate match with every root match it
/// does not conflict with; None when one conflicts with them all.
fn merge_matches(root: &[HttpMatchRequest], delegate: &[HttpMatchRequest]) -> Option<Vec<HttpMatchRequest>> {
    if root.is_empty() {
        return Some(delegate.to_vec());
    }
    if delegate.is_empty() {
        return Some(root.to_vec());
    }
    let mut out = Vec::new();
    for sub in delegate {
        let before = out.len();
        for r in root.iter().filter(|r| !has_conflict(r, sub)) {
            out.push(merge_match(r, sub));
        }
        if out.len() == before {
            return None;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// `mergeHTTPMatchRequest`.
fn merge_match(root: &HttpMatchRequest, d: &HttpMatchRequest) -> HttpMatchRequest {
    let mut out = d.clone();
    out.name = match (root.name.is_empty(), out.name.is_empty()) {
        (_, true) => root.name.clone(),
        (false, false) => format!("{}-{}", root.name, out.name),
        (true, false) => out.name,
    };
    for (o, r) in [
        (&mut out.uri, &root.uri),
        (&mut out.scheme, &root.scheme),
        (&mut out.method, &root.method),
        (&mut out.authority, &root.authority),
    ] {
        if o.is_none() {
            o.clone_from(r);
        }
    }
    // maps.MergeCopy: the root's, overridden by the delegate's.
    let merged = |r: &BTreeMap<String, StringMatch>, d: &BTreeMap<String, StringMatch>| {
        let mut m = r.clone();
        m.extend(d.clone());
        m
    };
    out.headers = merged(&root.headers, &d.headers);
    out.without_headers = merged(&root.without_headers, &d.without_headers);
    out.query_params = merged(&root.query_params, &d.query_params);
    let mut labels = root.source_labels.clone();
    labels.extend(d.source_labels.clone());
    out.source_labels = labels;
    if out.port == 0 {
        out.port = root.port;
    }
    if out.source_namespace.is_empty() {
        out.source_namespace.clone_from(&root.source_namespace);
    }
    if out.gateways.is_empty() {
        out.gateways.clone_from(&root.gateways);
    }
    if out.stat_prefix.is_empty() {
        out.stat_prefix.clone_from(&root.stat_prefix);
    }
    out
}

/// `hasConflict`: the leaf is not within the root.
fn has_conflict(root: &HttpMatchRequest, leaf: &HttpMatchRequest) -> bool {
    let pairs = [
        (&root.uri, &leaf.uri),
        (&root.scheme, &leaf.scheme),
        (&root.method, &leaf.method),
        (&root.authority, &leaf.authority),
    ];
    if pairs.iter().any(|(r, l)| string_match_conflict(r.as_ref(), l.as_ref())) {
        return true;
    }
    let maps = [
        (&root.headers, &leaf.headers),
        (&root.without_headers, &leaf.without_headers),
        (&root.query_params, &leaf.query_params),
    ];
    if maps.iter().any(|(r, l)| l.iter().any(|(k, v)| string_match_conflict(r.get(k), Some(v)))) {
        return true;
    }
    if root.ignore_uri_case != leaf.ignore_uri_case {
        return true;
    }
    if root.port > 0 && leaf.port > 0 && root.port != leaf.port {
        return true;
    }
    if !root.source_namespace.is_empty() && leaf.source_namespace != root.source_namespace {
        return true;
    }
    if leaf.source_labels.iter().any(|(k, v)| root.source_labels.get(k).is_some_and(|rv| rv != v)) {
        return true;
    }
    if !root.gateways.is_empty() && !leaf.gateways.is_empty() {
        if root.gateways.len() < leaf.gateways.len() {
            return true;
        }
        if leaf.gateways.iter().any(|g| !root.gateways.contains(g)) {
            return true;
        }
    }
    false
}

/// `stringMatchConflict`.
fn string_match_conflict(root: Option<&StringMatch>, leaf: Option<&StringMatch>) -> bool {
    let (Some(root), Some(leaf)) = (root, leaf) else { return false };
    let set = |s: &Option<String>| s.as_deref().is_some_and(|v| !v.is_empty());
    if set(&root.regex) && (set(&leaf.regex) || set(&leaf.prefix) || set(&leaf.exact)) {
        return true;
    }
    if set(&leaf.regex) && (set(&root.regex) || set(&root.prefix) || set(&root.exact)) {
        return true;
    }
    if let Some(exact) = root.exact.as_deref().filter(|e| !e.is_empty()) {
        return set(&leaf.prefix) || leaf.exact.as_deref() != Some(exact);
    }
    if let Some(prefix) = root.prefix.as_deref().filter(|p| !p.is_empty()) {
        if let Some(lp) = leaf.prefix.as_deref().filter(|p| !p.is_empty()) {
            return !lp.starts_with(prefix);
        }
        if let Some(le) = leaf.exact.as_deref().filter(|e| !e.is_empty()) {
            return !le.starts_with(prefix);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn istio_objects(yaml: &str) -> Vec<crate::istio::IstioObject> {
        crate::manifest::parse_file(yaml)
            .docs
            .into_iter()
            .map(|doc| match doc {
                Ok(Some(crate::manifest::Object::Istio(o))) => o,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// Upstream's `TestMergeVirtualServices` "root catch all", as data:
    /// a root routing `/productpage` by delegate keeps its other routes, and
    /// the delegate's routes get the root's match (prefix `/productpage`
    /// narrowed to the delegate's `/productpage/v1`), the root's timeout
    /// where they set none, and names joined with `-`.
    #[test]
    fn delegate_routes_merge_under_the_root() {
        let mut routing = istio_objects(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: root, namespace: istio-system}\n\
             spec:\n  hosts: [www.example.com]\n  gateways: [gw]\n  http:\n\
             \x20 - name: pp\n    match: [{uri: {prefix: /productpage}}]\n    timeout: 5s\n    delegate: {name: productpage, namespace: bookinfo}\n\
             \x20 - name: other\n    route: [{destination: {host: other}}]\n---\n\
             apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: productpage, namespace: bookinfo}\n\
             spec:\n  http:\n  - name: v1\n    match: [{uri: {prefix: /productpage/v1}}]\n    route: [{destination: {host: productpage, subset: v1}}]\n\
             \x20 - name: conflict\n    match: [{uri: {prefix: /login}}]\n    route: [{destination: {host: login}}]\n\
             \x20 - name: rest\n    route: [{destination: {host: productpage}}]\n",
        );
        merge(&mut routing, "cluster.local");
        let IstioSpec::VirtualService(vs) = &routing[0].spec else { panic!() };
        let names: Vec<&str> = vs.http.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["pp-v1", "pp-rest", "other"], "the conflicting /login route is dropped");
        assert_eq!(vs.http[0].matches[0].uri.as_ref().unwrap().prefix.as_deref(), Some("/productpage/v1"));
        assert_eq!(vs.http[1].matches[0].uri.as_ref().unwrap().prefix.as_deref(), Some("/productpage"));
        assert_eq!(vs.http[0].timeout.as_deref(), Some("5s"));
        assert_eq!(vs.http[0].route[0].destination.as_ref().unwrap().host, "productpage.bookinfo.svc.cluster.local");
        assert_eq!(vs.http[2].route[0].destination.as_ref().unwrap().host, "other", "the root's own stay as written");
    }

    /// A delegate not exported to the root's namespace is not merged.
    #[test]
    fn an_unexported_delegate_drops_the_route() {
        let mut routing = istio_objects(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: root, namespace: a}\n\
             spec: {hosts: [x.example.com], http: [{delegate: {name: d, namespace: b}}]}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: d, namespace: b}\n\
             spec: {exportTo: ['.'], http: [{route: [{destination: {host: y}}]}]}\n",
        );
        merge(&mut routing, "cluster.local");
        let IstioSpec::VirtualService(vs) = &routing[0].spec else { panic!() };
        assert!(vs.http.is_empty());
    }
}
