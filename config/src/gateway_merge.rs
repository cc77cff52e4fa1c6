//! Istio Gateways for a router proxy, selected and merged as istiod's
//! `PushContext.mergeGateways` and `model/gateway.go MergeGateways` do
//! (facts in docs/design/gateway-notes.md §1): which Gateways apply to a proxy,
//! the servers each listener port carries, istiod's conflict rules (a TLS
//! host claimed twice on a port, protocols that cannot share a port, HTTPS
//! route names that collide), the RDS route names, and the SNI hosts.
//!
//! Pure: the listener and route builders of issue #14 read its result.
//! Gateways are taken oldest first (creation time, then name, then
//! namespace), so the oldest wins every conflict, as in istiod.

use std::collections::{BTreeMap, BTreeSet};

use crate::gateway_convert::{
    GATEWAY_SEMANTICS, GATEWAY_SERVICE, PARENT_NAMESPACE, SERVICE_ACCOUNT, host_intersection,
};
use crate::istio::networking::{Gateway, Server, ServerTlsMode};
use crate::istio::{IstioObject, IstioSpec};

/// A listener key: the resolved port, the protocol, the bind address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerPort {
    /// The port the listener binds (the server's port resolved to the
    /// gateway Service's target port).
    pub number: u32,
    /// The server's protocol, upper case.
    pub protocol: String,
    /// The server's bind address ("" for any).
    pub bind: String,
}

/// A server kept, with the Gateway it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedServer {
    /// The server, its hosts sanitized (`./h` → `<ns>/h`, `*/h` → `h`).
    pub server: Server,
    /// `<namespace>/<name>` of its Gateway.
    pub gateway: String,
    /// Its RDS route name ("" for TCP, TLS and passthrough servers).
    pub route_name: String,
    /// Its hosts without namespace prefixes, de-duplicated and sorted
    /// (`GetSNIHostsForServer`).
    pub sni_hosts: Vec<String>,
}

/// A server dropped by a conflict rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// `<namespace>/<name>` of its Gateway.
    pub gateway: String,
    /// The server's port number.
    pub port: u32,
    /// Why (istiod's reason, in our words).
    pub reason: String,
}

/// The Gateways of one router, merged (`MergedGateway`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergedGateway {
    /// Listener keys in first-seen order.
    pub ports: Vec<ServerPort>,
    /// The servers of each key.
    pub servers: BTreeMap<ServerPort, Vec<MergedServer>>,
    /// RDS name → the servers it serves.
    pub by_route: BTreeMap<String, Vec<MergedServer>>,
    /// Whether some server is AUTO_PASSTHROUGH, and their hosts.
    pub auto_passthrough_hosts: Vec<String>,
    /// Servers dropped, each with its reason
    /// (`pilot_total_rejected_configs{type="gateway"}`).
    pub rejected: Vec<Rejected>,
}

/// `protocol.IsHTTP`: HTTP, HTTP2, GRPC, GRPC-Web (case-insensitive).
pub fn is_http(protocol: &str) -> bool {
    matches!(protocol.to_ascii_uppercase().as_str(), "HTTP" | "HTTP2" | "GRPC" | "GRPC-WEB" | "HTTP_PROXY")
}

fn passthrough(s: &Server) -> bool {
    s.tls.as_ref().is_some_and(|t| matches!(t.mode, ServerTlsMode::Passthrough | ServerTlsMode::AutoPassthrough))
}

fn protocol(s: &Server) -> String {
    s.port.as_ref().map(|p| p.protocol.to_ascii_uppercase()).unwrap_or_default()
}

/// `IsTLSServer`: TLS settings on a protocol that is not HTTP-like.
pub fn is_tls_server(s: &Server) -> bool {
    s.tls.is_some() && !is_http(&protocol(s))
}

/// `IsHTTPServer`: HTTP-like, or HTTPS that terminates TLS.
pub fn is_http_server(s: &Server) -> bool {
    let p = protocol(s);
    is_http(&p) || (p == "HTTPS" && !passthrough(s))
}

/// `gatewayRDSRouteName`: `http.<resolved port>` for HTTP-like servers,
/// `https.<declared port>.<port name>.<gateway>.<namespace>` for HTTPS
/// that terminates TLS, "" otherwise; `.<bind>` appended when bound.
pub fn route_name(s: &Server, resolved_port: u32, gateway: &str, namespace: &str) -> String {
    let Some(port) = &s.port else { return String::new() };
    let p = port.protocol.to_ascii_uppercase();
    let mut name = if is_http(&p) {
        format!("http.{resolved_port}")
    } else if p == "HTTPS" && !passthrough(s) {
        format!("https.{}.{}.{gateway}.{namespace}", port.number, port.name)
    } else {
        return String::new();
    };
    if !s.bind.is_empty() {
        name.push('.');
        name.push_str(&s.bind);
    }
    name
}

/// `sanitizeServerHostNamespace`: `./h` is the Gateway's namespace, `*/h`
/// any namespace (`h`); `*/*` makes the whole list `*`.
fn sanitize_hosts(hosts: &[String], gateway_ns: &str) -> Vec<String> {
    if hosts.iter().any(|h| h == "*/*") {
        return vec!["*".into()];
    }
    hosts
        .iter()
        .map(|h| match h.split_once('/') {
            Some((".", host)) => format!("{gateway_ns}/{host}"),
            Some(("*", host)) => host.to_owned(),
            _ => h.clone(),
        })
        .collect()
}

/// `GetSNIHostsForServer`.
fn sni_hosts(hosts: &[String]) -> Vec<String> {
    let set: BTreeSet<String> =
        hosts.iter().map(|h| h.rsplit_once('/').map_or(h.as_str(), |(_, x)| x).to_owned()).collect();
    set.into_iter().collect()
}

/// The Gateways that apply to a router with `labels` in `namespace`
/// (`mergeGateways`' selection: no selector applies to every router, else
/// the selector's labels must be the proxy's), oldest first; with
/// `PILOT_SCOPE_GATEWAY_TO_NAMESPACE` only the proxy's namespace's.
pub fn select<'a>(
    objects: impl IntoIterator<Item = &'a IstioObject>,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    scope_to_namespace: bool,
    service_hosts: &[&str],
) -> Vec<(&'a IstioObject, &'a Gateway)> {
    let mut out: Vec<(&IstioObject, &Gateway)> = objects
        .into_iter()
        .filter_map(|o| match &o.spec {
            IstioSpec::Gateway(g) => Some((o, g)),
            _ => None,
        })
        .filter(|(o, _)| !scope_to_namespace || o.meta.ns() == namespace)
        .filter(|(o, g)| match gateway_services(o) {
            // From the Gateway API: the routers behind its Service, in its
            // namespace (istiod's `internal.istio.io/gateway-service`; a
            // ListenerSet's listeners are in the parent Gateway's, its
            // `internal.istio.io/parent-namespace`).
            Some(services) => parent_namespace(o) == namespace && services.iter().any(|s| service_hosts.contains(s)),
            None => g.selector.iter().all(|(k, v)| labels.get(k) == Some(v)),
        })
        .collect();
    out.sort_by(|(a, _), (b, _)| {
        let key = |o: &IstioObject| {
            (o.meta.creation_timestamp.clone().unwrap_or_default(), o.meta.name.clone(), o.meta.ns().to_owned())
        };
        key(a).cmp(&key(b))
    });
    out
}

/// The namespace of the Gateway API Gateway an Istio Gateway was made
/// for: its own, or for a ListenerSet's listener its parent's.
pub fn parent_namespace(o: &IstioObject) -> &str {
    o.meta.annotations.get(PARENT_NAMESPACE).map_or(o.meta.ns(), String::as_str)
}

/// The Services of a Gateway translated from the Gateway API (its
/// [`GATEWAY_SERVICE`] annotation), if it is one.
pub fn gateway_services(o: &IstioObject) -> Option<Vec<&str>> {
    o.meta.annotations.get(GATEWAY_SERVICE).map(|s| s.split(',').filter(|x| !x.is_empty()).collect())
}

/// istiod's `filterStrictGatewayMerging` (`PILOT_ENABLE_STRICT_GATEWAY_MERGING`,
/// on by default): where a Gateway API Gateway with a managed deployment
/// (`internal.istio.io/gateway-semantics: gateway` and a service account)
/// is among `selected`, only the Gateway API ones and those of a managed
/// one's namespace stay, so that no other namespace's servers (and TLS
/// credentials) join its listeners. Returns what stays, and the names
/// (`namespace/name`) of what is dropped.
pub fn strict<'a>(selected: Vec<(&'a IstioObject, &'a Gateway)>) -> (Vec<(&'a IstioObject, &'a Gateway)>, Vec<String>) {
    let api = |o: &IstioObject| o.meta.annotations.get(GATEWAY_SEMANTICS).is_some_and(|v| v == "gateway");
    let managed: BTreeSet<&str> = selected
        .iter()
        .filter(|(o, _)| api(o) && o.meta.annotations.get(SERVICE_ACCOUNT).is_some_and(|sa| !sa.is_empty()))
        .map(|(o, _)| o.meta.ns())
        .collect();
    if managed.is_empty() {
        return (selected, Vec::new());
    }
    let (kept, dropped): (Vec<_>, Vec<_>) =
        selected.into_iter().partition(|(o, _)| api(o) || managed.contains(o.meta.ns()));
    (kept, dropped.into_iter().map(|(o, _)| format!("{}/{}", o.meta.ns(), o.meta.name)).collect())
}

/// `addPlainTextServer`: a plaintext server as a key of its own on a port
/// that has one already (another bind, or TLS servers only).
fn add_plaintext(
    m: &mut MergedGateway,
    plaintext: &mut BTreeMap<u32, Vec<ServerPort>>,
    key: ServerPort,
    route: String,
    merged: MergedServer,
) {
    if !m.ports.contains(&key) {
        m.ports.push(key.clone());
    }
    plaintext.entry(key.number).or_default().push(key.clone());
    if is_http_server(&merged.server) {
        m.by_route.entry(route).or_default().push(merged.clone());
    }
    m.servers.entry(key).or_default().push(merged);
}

/// Merges the selected Gateways. `resolve` maps a Gateway's server port to
/// the port the router listens on (`resolvePorts`: the gateway Service's
/// targetPort for that port; without one, the number itself for an Istio
/// Gateway, and no port, so no server, for one from the Gateway API).
pub fn merge(
    selected: &[(&IstioObject, &Gateway)],
    resolve: impl Fn(&IstioObject, u32) -> Option<u32>,
) -> MergedGateway {
    let mut m = MergedGateway::default();
    // (resolved port, bind) → TLS hosts claimed there.
    let mut tls_hosts: BTreeMap<(u32, String), BTreeSet<String>> = BTreeMap::new();
    // resolved port → the plaintext key on it.
    let mut plaintext: BTreeMap<u32, Vec<ServerPort>> = BTreeMap::new();
    let mut auto_hosts = BTreeSet::new();
    for (o, g) in selected {
        let (ns, name) = (o.meta.ns(), o.meta.name.as_str());
        let gateway = format!("{ns}/{name}");
        for s in &g.servers {
            let Some(port) = &s.port else { continue };
            let mut server = s.clone();
            server.hosts = sanitize_hosts(&s.hosts, ns);
            let Some(resolved) = resolve(o, port.number) else { continue };
            let proto = port.protocol.to_ascii_uppercase();
            let key = ServerPort { number: resolved, protocol: proto.clone(), bind: s.bind.clone() };
            let route = route_name(&server, resolved, name, ns);
            let merged = MergedServer {
                sni_hosts: sni_hosts(&server.hosts),
                server: server.clone(),
                gateway: gateway.clone(),
                route_name: route.clone(),
            };
            let reject = |m: &mut MergedGateway, reason: &str| {
                m.rejected.push(Rejected { gateway: gateway.clone(), port: port.number, reason: reason.into() });
            };
            // 1. A TLS host claimed twice on a port and bind drops the server.
            if server.tls.is_some() {
                let claimed = tls_hosts.entry((resolved, s.bind.clone())).or_default();
                if server.hosts.iter().any(|h| claimed.contains(h)) {
                    reject(&mut m, "duplicate host names for a TLS server on this port");
                    continue;
                }
                claimed.extend(server.hosts.iter().cloned());
                if server.tls.as_ref().is_some_and(|t| t.mode == ServerTlsMode::AutoPassthrough) {
                    auto_hosts.extend(server.hosts.iter().cloned());
                }
            }
            let port_known = m.ports.iter().any(|p| p.number == resolved);
            if !port_known {
                // 2. The first server on this port.
                m.ports.push(key.clone());
                if !is_tls_server(&server) {
                    plaintext.entry(resolved).or_default().push(key.clone());
                }
                if is_http_server(&server) {
                    m.by_route.insert(route.clone(), vec![merged.clone()]);
                }
                m.servers.entry(key).or_default().push(merged);
                continue;
            }
            if let Some(keys) = plaintext.get(&resolved).cloned() {
                // 3. The port has a plaintext server.
                match keys.iter().find(|k| k.bind == s.bind) {
                    Some(existing) => {
                        let mergeable = (is_http(&existing.protocol) && is_http(&proto)) || existing.protocol == proto;
                        if !mergeable {
                            reject(
                                &mut m,
                                "this port's protocol cannot carry the server's (another Gateway's server holds it)",
                            );
                            continue;
                        }
                        if route.is_empty() {
                            reject(&mut m, "a TCP server cannot share a port with another");
                            continue;
                        }
                        let existing = existing.clone();
                        let existing_route =
                            m.servers[&existing].first().map(|x| x.route_name.clone()).unwrap_or_default();
                        m.by_route.entry(existing_route).or_default().push(merged.clone());
                        m.servers.entry(existing).or_default().push(merged);
                    }
                    // Another bind address: a listener of its own.
                    None => add_plaintext(&mut m, &mut plaintext, key, route, merged),
                }
                continue;
            }
            // 4. The port is held by TLS servers only.
            if !is_tls_server(&server) {
                add_plaintext(&mut m, &mut plaintext, key, route, merged);
                continue;
            }
            if is_http_server(&server) {
                if m.by_route.contains_key(&route) {
                    reject(&mut m, "non unique port name for an HTTPS server");
                    continue;
                }
                m.by_route.insert(route, vec![merged.clone()]);
            }
            if !m.ports.contains(&key) {
                m.ports.push(key.clone());
            }
            m.servers.entry(key).or_default().push(merged);
        }
    }
    m.auto_passthrough_hosts = auto_hosts.into_iter().collect();
    m
}

/// `ResolveVirtualServiceShortnames` / `resolveGatewayName`: the Gateways
/// a VirtualService binds to, as `ns/name` (`mesh` when none are given).
pub fn bound_gateways(vs_gateways: &[String], vs_ns: &str) -> Vec<String> {
    if vs_gateways.is_empty() {
        return vec!["mesh".into()];
    }
    vs_gateways
        .iter()
        .map(|g| {
            if g == "mesh" {
                return g.clone();
            }
            if let Some(name) = g.strip_prefix("./") {
                return format!("{vs_ns}/{name}");
            }
            if g.contains('/') {
                return g.clone();
            }
            // The legacy FQDN form `name.ns.svc.<domain>`.
            let parts: Vec<&str> = g.split('.').collect();
            if parts.len() >= 3 && parts[2] == "svc" {
                return format!("{}/{}", parts[1], parts[0]);
            }
            format!("{vs_ns}/{g}")
        })
        .collect()
}

/// The VirtualServices bound to `gateway` (`ns/name`) and visible from
/// `proxy_ns` (exportTo), oldest first (istiod's
/// `VirtualServicesForGateway`).
pub fn bound_virtual_services<'a>(
    virtual_services: impl IntoIterator<Item = &'a IstioObject>,
    proxy_ns: &str,
    gateway: &str,
) -> Vec<(&'a IstioObject, &'a crate::istio::networking::VirtualService)> {
    let mut bound: Vec<_> = virtual_services
        .into_iter()
        .filter_map(|o| match &o.spec {
            IstioSpec::VirtualService(vs) => Some((o, vs)),
            _ => None,
        })
        .filter(|(o, vs)| {
            let ns = o.meta.ns();
            let visible = vs.export_to.is_empty()
                || vs.export_to.iter().any(|e| e == "*" || (e == "." && ns == proxy_ns) || e == proxy_ns);
            visible && bound_gateways(&vs.gateways, ns).iter().any(|g| g == gateway)
        })
        .collect();
    bound.sort_by_key(|(o, _)| (o.meta.creation_timestamp.clone().unwrap_or_default(), o.meta.name.clone()));
    bound
}

/// What one virtual host of a gateway route configuration holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VhostPlan {
    /// `<host>:<declared port>`.
    pub name: String,
    /// The host (lower case), its only domain.
    pub domain: String,
    /// The VirtualServices whose HTTP routes it carries, in order, as
    /// `ns/name`.
    pub virtual_services: Vec<String>,
    /// For each of them, the Gateway (`ns/name`) and declared port of the
    /// server that bound it.
    pub bound_by: Vec<(String, u32)>,
    /// From a server with `httpsRedirect`: `require_tls: ALL`.
    pub require_tls: bool,
    /// Hosts whose virtual hosts were collapsed into this one
    /// ([`collapse`]): more domains, the same routes.
    pub more_domains: Vec<String>,
}

/// The virtual hosts of gateway route configuration `route`
/// (`buildGatewayHTTPRouteConfig`): for each of its servers, the
/// VirtualServices bound to the server's Gateway and visible in
/// `proxy_ns` whose hosts meet the server's (a `ns/h` server host only
/// for VirtualServices of `ns`); one vhost per host met; `httpsRedirect`
/// servers require TLS and keep a vhost for each of their hosts; none at
/// all is istiod's `blackhole:<port>` vhost on `*`, answering 404.
pub fn virtual_hosts<'a>(
    m: &MergedGateway,
    route: &str,
    virtual_services: impl IntoIterator<Item = &'a IstioObject> + Clone,
    proxy_ns: &str,
) -> Vec<VhostPlan> {
    let Some(servers) = m.by_route.get(route) else { return Vec::new() };
    let mut vhosts: Vec<VhostPlan> = Vec::new();
    // istiod keys virtual hosts by host (lower case); the name takes the
    // port of the server that made it first; the 404 fallback the first
    // server's.
    let first_port = servers.first().and_then(|s| s.server.port.as_ref()).map_or(0, |p| p.number);
    // Domain → index in `vhosts` (a gateway may carry thousands).
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for s in servers {
        let declared = s.server.port.as_ref().map_or(0, |p| p.number);
        let redirect = s.server.tls.as_ref().is_some_and(|t| t.https_redirect);
        let bound = bound_virtual_services(virtual_services.clone(), proxy_ns, &s.gateway);
        for (o, vs) in bound {
            let vs_ns = o.meta.ns();
            for server_host in &s.server.hosts {
                let (host_ns, h) = server_host.split_once('/').unwrap_or(("*", server_host.as_str()));
                if host_ns != "*" && host_ns != vs_ns {
                    continue;
                }
                for vh in &vs.hosts {
                    let Some(met) = host_intersection(h, vh) else { continue };
                    let met = met.to_ascii_lowercase();
                    let name = format!("{vs_ns}/{}", o.meta.name);
                    match index.get(&met).map(|i| &mut vhosts[*i]) {
                        Some(v) => {
                            if !v.virtual_services.contains(&name) {
                                v.virtual_services.push(name);
                                v.bound_by.push((s.gateway.clone(), declared));
                            }
                            v.require_tls |= redirect;
                        }
                        None => {
                            index.insert(met.clone(), vhosts.len());
                            vhosts.push(VhostPlan {
                                name: format!("{met}:{declared}"),
                                domain: met,
                                virtual_services: vec![name],
                                bound_by: vec![(s.gateway.clone(), declared)],
                                require_tls: redirect,
                                more_domains: Vec::new(),
                            });
                        }
                    }
                }
            }
        }
        if redirect {
            for h in &s.server.hosts {
                let h = h.to_ascii_lowercase();
                if let Some(i) = index.get(&h) {
                    // istiod: an existing virtual host of the host requires
                    // TLS, whichever server made it.
                    vhosts[*i].require_tls = true;
                } else {
                    index.insert(h.clone(), vhosts.len());
                    vhosts.push(VhostPlan {
                        name: format!("{h}:{declared}"),
                        domain: h,
                        virtual_services: Vec::new(),
                        bound_by: Vec::new(),
                        require_tls: true,
                        more_domains: Vec::new(),
                    });
                }
            }
        }
    }
    if vhosts.is_empty() {
        vhosts.push(VhostPlan {
            name: format!("blackhole:{first_port}"),
            domain: "*".into(),
            virtual_services: Vec::new(),
            bound_by: Vec::new(),
            require_tls: false,
            more_domains: Vec::new(),
        });
    }
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    vhosts
}

/// `host.MoreSpecific`: longest first, then alphabetical, wildcards last.
fn more_specific(a: &str, b: &str) -> std::cmp::Ordering {
    (a.starts_with('*'), std::cmp::Reverse(a.len()), a).cmp(&(b.starts_with('*'), std::cmp::Reverse(b.len()), b))
}

/// istiod's `collapseDuplicateRoutes` (`PILOT_ENABLE_ROUTE_COLLAPSE_OPTIMIZATION`):
/// virtual hosts whose routes are the same (istiod compares the routes it
/// built once per VirtualService: the same VirtualServices, bound by the
/// same servers, in the same order) and that agree on `require_tls` become
/// one, named after the most specific host, with every host as a domain.
/// Sorted by name again after.
pub fn collapse(mut plans: Vec<VhostPlan>) -> Vec<VhostPlan> {
    plans.sort_by(|a, b| more_specific(&a.domain, &b.domain));
    let mut out: Vec<VhostPlan> = Vec::with_capacity(plans.len());
    for p in plans {
        let same = |k: &VhostPlan| {
            k.virtual_services == p.virtual_services && k.bound_by == p.bound_by && k.require_tls == p.require_tls
        };
        match out.iter_mut().find(|k| same(k)) {
            Some(k) => k.more_domains.push(p.domain),
            None => out.push(p),
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gw(name: &str, ns: &str, created: &str, spec: &str) -> IstioObject {
        let doc = format!(
            "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: {ns}, creationTimestamp: '{created}'}}\nspec: {spec}\n"
        );
        crate::istio::parse(&serde_yaml_ng::from_str(&doc).unwrap()).unwrap()
    }

    fn keys(m: &MergedGateway) -> Vec<(u32, &str)> {
        m.ports.iter().map(|p| (p.number, p.protocol.as_str())).collect()
    }

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    const HTTP80: &str = "{selector: {istio: ingressgateway}, servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]}";

    #[test]
    fn selection_by_labels_and_namespace_oldest_first() {
        let objs = [
            gw("b", "ns1", "2026-01-02T00:00:00Z", HTTP80),
            gw("a", "ns2", "2026-01-01T00:00:00Z", HTTP80),
            gw(
                "other",
                "ns1",
                "2026-01-01T00:00:00Z",
                "{selector: {istio: egress}, servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]}",
            ),
            gw(
                "all",
                "ns3",
                "2026-01-03T00:00:00Z",
                "{servers: [{port: {number: 81, name: http, protocol: HTTP}, hosts: ['*']}]}",
            ),
        ];
        let l = labels(&[("istio", "ingressgateway"), ("app", "x")]);
        let names: Vec<&str> = select(&objs, "ns1", &l, false, &[]).iter().map(|(o, _)| o.meta.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "all"], "oldest first; no selector applies to every router");
        let names: Vec<&str> = select(&objs, "ns1", &l, true, &[]).iter().map(|(o, _)| o.meta.name.as_str()).collect();
        assert_eq!(names, ["b"], "PILOT_SCOPE_GATEWAY_TO_NAMESPACE");
        // kubectl writes `creationTimestamp: null`: read as no time.
        let doc = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: n, creationTimestamp: null}\nspec: {servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]}\n";
        let o = crate::istio::parse(&serde_yaml_ng::from_str(doc).unwrap()).unwrap();
        assert_eq!(o.meta.creation_timestamp, None);
    }

    /// Upstream `TestFilterStrictGatewayMerging` (pilot/pkg/model/gateway_test.go).
    #[test]
    fn upstream_filter_strict_gateway_merging() {
        let server = "{selector: {istio: ingressgateway}, servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]}";
        let internal = |name: &str, ns: &str, sa: &str| {
            let mut o = gw(name, ns, "", server);
            o.meta.annotations.insert(GATEWAY_SEMANTICS.to_owned(), "gateway".to_owned());
            o.meta.annotations.insert(SERVICE_ACCOUNT.to_owned(), sa.to_owned());
            o
        };
        let istio_a = gw("istio-gw1", "ns-a", "", server);
        let istio_b = gw("istio-gw2", "ns-b", "", server);
        let managed_a = internal("gwapi-gw1", "ns-a", "sa");
        let unmanaged_b = internal("gwapi-gw2", "ns-b", "");
        let managed_b = internal("gwapi-gw3", "ns-b", "sa");
        let run = |input: &[&IstioObject]| {
            let selected: Vec<(&IstioObject, &Gateway)> = input
                .iter()
                .map(|o| match &o.spec {
                    IstioSpec::Gateway(g) => (*o, g),
                    _ => unreachable!(),
                })
                .collect();
            let mut kept: Vec<String> =
                strict(selected).0.iter().map(|(o, _)| format!("{}/{}", o.meta.ns(), o.meta.name)).collect();
            kept.sort();
            kept
        };
        let cases: [(&str, Vec<&IstioObject>, Vec<&str>); 7] = [
            ("no gwapi gateways - no filtering", vec![&istio_a, &istio_b], vec!["ns-a/istio-gw1", "ns-b/istio-gw2"]),
            (
                "only unmanaged gwapi - no filtering",
                vec![&istio_a, &istio_b, &unmanaged_b],
                vec!["ns-a/istio-gw1", "ns-b/istio-gw2", "ns-b/gwapi-gw2"],
            ),
            (
                "managed gwapi in ns-a - keep istio in ns-a, drop istio in ns-b",
                vec![&managed_a, &istio_a, &istio_b],
                vec!["ns-a/gwapi-gw1", "ns-a/istio-gw1"],
            ),
            (
                "managed gwapi in ns-a - keep all gwapi regardless of namespace",
                vec![&managed_a, &unmanaged_b, &istio_a, &istio_b],
                vec!["ns-a/gwapi-gw1", "ns-b/gwapi-gw2", "ns-a/istio-gw1"],
            ),
            (
                "managed gwapi in both namespaces - keep all",
                vec![&managed_a, &managed_b, &istio_a, &istio_b],
                vec!["ns-a/gwapi-gw1", "ns-b/gwapi-gw3", "ns-a/istio-gw1", "ns-b/istio-gw2"],
            ),
            ("only managed gwapi - keep all", vec![&managed_a, &managed_b], vec!["ns-a/gwapi-gw1", "ns-b/gwapi-gw3"]),
            ("order does not matter", vec![&istio_b, &istio_a, &managed_a], vec!["ns-a/istio-gw1", "ns-a/gwapi-gw1"]),
        ];
        for (name, input, want) in cases {
            let mut want: Vec<String> = want.into_iter().map(str::to_owned).collect();
            want.sort();
            assert_eq!(run(&input), want, "{name}");
        }
    }

    #[test]
    fn route_names_and_port_resolution() {
        let o = gw(
            "gw",
            "ns",
            "",
            "{servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['./a.com']},\
             {port: {number: 443, name: https-a, protocol: HTTPS}, hosts: ['*/b.com', 'ns2/c.com'], tls: {mode: SIMPLE, credentialName: c}},\
             {port: {number: 15443, name: tls, protocol: TLS}, hosts: ['*.local'], tls: {mode: AUTO_PASSTHROUGH}}]}",
        );
        let IstioSpec::Gateway(g) = &o.spec else { unreachable!() };
        let m = merge(&[(&o, g)], |_, p| {
            Some(if p == 80 {
                8080
            } else if p == 443 {
                8443
            } else {
                p
            })
        });
        assert_eq!(keys(&m), [(8080, "HTTP"), (8443, "HTTPS"), (15443, "TLS")]);
        let http = &m.servers[&m.ports[0]][0];
        assert_eq!(http.route_name, "http.8080", "the resolved port");
        assert_eq!(http.server.hosts, ["ns/a.com"]);
        let https = &m.servers[&m.ports[1]][0];
        assert_eq!(https.route_name, "https.443.https-a.gw.ns", "the declared port");
        assert_eq!(https.sni_hosts, ["b.com", "c.com"]);
        assert_eq!(m.servers[&m.ports[2]][0].route_name, "");
        assert_eq!(m.auto_passthrough_hosts, ["*.local"]);
        assert_eq!(m.by_route.keys().collect::<Vec<_>>(), ["http.8080", "https.443.https-a.gw.ns"]);
    }

    /// model/gateway.go mergeGateways' conflict rules.
    #[test]
    fn conflicts_as_istiod_resolves_them() {
        let id = |_: &IstioObject, p: u32| Some(p);
        // HTTP servers of two Gateways on one port share one route.
        let a = gw("a", "ns", "1", "{servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: [a.com]}]}");
        let b = gw("b", "ns", "2", "{servers: [{port: {number: 80, name: http2, protocol: HTTP2}, hosts: [b.com]}]}");
        let c = gw("c", "ns", "3", "{servers: [{port: {number: 80, name: tcp, protocol: TCP}, hosts: ['*']}]}");
        let g = |o: &IstioObject| match &o.spec {
            IstioSpec::Gateway(g) => g.clone(),
            _ => unreachable!(),
        };
        let (ga, gb, gc) = (g(&a), g(&b), g(&c));
        let m = merge(&[(&a, &ga), (&b, &gb), (&c, &gc)], id);
        assert_eq!(m.by_route["http.80"].len(), 2, "HTTP and HTTP2 merge");
        assert_eq!(m.rejected.len(), 1, "TCP cannot join an HTTP port");
        assert_eq!(m.rejected[0].gateway, "ns/c");
        // A TLS host claimed twice on a port: the younger server goes.
        let t1 = gw(
            "t1",
            "ns",
            "1",
            "{servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: [a.com], tls: {mode: SIMPLE}}]}",
        );
        let t2 = gw(
            "t2",
            "ns",
            "2",
            "{servers: [{port: {number: 443, name: https2, protocol: HTTPS}, hosts: [a.com, b.com], tls: {mode: SIMPLE}}]}",
        );
        let (g1, g2) = (g(&t1), g(&t2));
        let m = merge(&[(&t1, &g1), (&t2, &g2)], id);
        assert_eq!(m.rejected.iter().map(|r| r.gateway.as_str()).collect::<Vec<_>>(), ["ns/t2"]);
        // HTTPS first then HTTP on one port: both stay, one listener port.
        let h = gw("h", "ns", "3", "{servers: [{port: {number: 443, name: http, protocol: HTTP}, hosts: [c.com]}]}");
        let gh = g(&h);
        let m = merge(&[(&t1, &g1), (&h, &gh)], id);
        assert!(m.rejected.is_empty(), "{:?}", m.rejected);
        assert_eq!(keys(&m), [(443, "HTTPS"), (443, "HTTP")]);
        // HTTP first then HTTPS: the HTTPS server goes.
        let m = merge(&[(&h, &gh), (&t1, &g1)], id);
        assert_eq!(m.rejected.len(), 1);
        // Two HTTPS servers whose route names collide: the second goes.
        let d1 = gw(
            "d",
            "ns",
            "1",
            "{servers: [{port: {number: 443, name: https, protocol: HTTPS}, hosts: [a.com], tls: {mode: SIMPLE}},\
             {port: {number: 443, name: https, protocol: HTTPS}, hosts: [b.com], tls: {mode: SIMPLE}}]}",
        );
        let gd = g(&d1);
        let m = merge(&[(&d1, &gd)], id);
        assert_eq!(m.rejected.len(), 1, "non unique port name");
        // Another bind address is a listener of its own.
        let x = gw(
            "x",
            "ns",
            "4",
            "{servers: [{port: {number: 80, name: tcp, protocol: TCP}, bind: 10.0.0.1, hosts: ['*']}]}",
        );
        let gx = g(&x);
        let m = merge(&[(&a, &ga), (&x, &gx)], id);
        assert!(m.rejected.is_empty());
        assert_eq!(m.ports.len(), 2);
    }

    #[test]
    fn virtual_services_bind_and_hosts_meet_as_in_istiod() {
        assert_eq!(bound_gateways(&[], "ns"), ["mesh"]);
        assert_eq!(
            bound_gateways(
                &["gw".into(), "./g2".into(), "other/g3".into(), "g4.ns9.svc.cluster.local".into(), "mesh".into()],
                "ns"
            ),
            ["ns/gw", "ns/g2", "other/g3", "ns9/g4", "mesh"]
        );
        assert_eq!(host_intersection("*.example.com", "a.example.com").as_deref(), Some("a.example.com"));
        assert_eq!(host_intersection("a.example.com", "*.example.com").as_deref(), Some("a.example.com"));
        assert_eq!(host_intersection("*", "x.y").as_deref(), Some("x.y"));
        assert_eq!(host_intersection("a.com", "b.com"), None);

        let g = gw(
            "gw",
            "istio-system",
            "1",
            "{servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*.example.com', 'bookinfo/reviews.local']},\
             {port: {number: 80, name: http2, protocol: HTTP}, hosts: [secure.example.com], tls: {httpsRedirect: true}}]}",
        );
        let IstioSpec::Gateway(spec) = &g.spec else { unreachable!() };
        let m = merge(&[(&g, spec)], |_, p| Some(p + 8000));
        let vs = |name: &str, ns: &str, body: &str| {
            let doc = format!(
                "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {body}\n"
            );
            crate::istio::parse(&serde_yaml_ng::from_str(&doc).unwrap()).unwrap()
        };
        let objs = [
            vs(
                "a",
                "apps",
                "{hosts: [a.example.com], gateways: [istio-system/gw], http: [{route: [{destination: {host: a}}]}]}",
            ),
            vs(
                "r",
                "bookinfo",
                "{hosts: [reviews.local], gateways: [istio-system/gw], http: [{route: [{destination: {host: r}}]}]}",
            ),
            // reviews.local is claimed for bookinfo only.
            vs(
                "r2",
                "other",
                "{hosts: [reviews.local], gateways: [istio-system/gw], http: [{route: [{destination: {host: r}}]}]}",
            ),
            vs("mesh-only", "apps", "{hosts: [m.example.com], http: [{route: [{destination: {host: m}}]}]}"),
            vs(
                "hidden",
                "apps",
                "{hosts: [h.example.com], gateways: [istio-system/gw], exportTo: [.], http: [{route: [{destination: {host: h}}]}]}",
            ),
        ];
        let plan = virtual_hosts(&m, "http.8080", &objs, "istio-system");
        let names: Vec<(&str, &[String], bool)> =
            plan.iter().map(|v| (v.name.as_str(), v.virtual_services.as_slice(), v.require_tls)).collect();
        assert_eq!(
            names,
            [
                ("a.example.com:80", &["apps/a".to_owned()][..], false),
                ("reviews.local:80", &["bookinfo/r".to_owned()][..], false),
                ("secure.example.com:80", &[][..], true),
            ]
        );
        // A route name with no servers: nothing; servers with no VirtualService: the 404 blackhole.
        assert!(virtual_hosts(&m, "http.9999", &objs, "istio-system").is_empty());
        let plan = virtual_hosts(&m, "http.8080", &objs[3..4], "istio-system");
        assert_eq!(plan.len(), 1);
        assert_eq!((plan[0].name.as_str(), plan[0].domain.as_str()), ("secure.example.com:80", "secure.example.com"));
        let lonely = gw("l", "ns", "1", "{servers: [{port: {number: 81, name: http, protocol: HTTP}, hosts: ['*']}]}");
        let IstioSpec::Gateway(ls) = &lonely.spec else { unreachable!() };
        let lm = merge(&[(&lonely, ls)], |_, p| Some(p));
        assert_eq!(virtual_hosts(&lm, "http.81", &objs, "ns")[0].name, "blackhole:81");
    }

    #[test]
    fn virtual_hosts_with_the_same_routes_collapse_into_the_most_specific() {
        let plan = |domain: &str, vs: &[&str], tls: bool| VhostPlan {
            name: format!("{domain}:80"),
            domain: domain.into(),
            virtual_services: vs.iter().map(|v| v.to_string()).collect(),
            bound_by: vs.iter().map(|_| ("ns/gw".to_owned(), 80)).collect(),
            require_tls: tls,
            more_domains: Vec::new(),
        };
        let out = collapse(vec![
            plan("a.example.com", &["ns/one"], false),
            plan("*.example.com", &["ns/one"], false),
            plan("long.example.com", &["ns/one"], false),
            plan("b.example.com", &["ns/two"], false),
            plan("c.example.com", &["ns/one"], true),
        ]);
        let got: Vec<(&str, &[String])> = out.iter().map(|p| (p.name.as_str(), p.more_domains.as_slice())).collect();
        assert_eq!(
            got,
            [
                ("b.example.com:80", &[][..]),
                ("c.example.com:80", &[][..]),
                ("long.example.com:80", &["a.example.com".to_owned(), "*.example.com".to_owned()][..]),
            ],
            "longest host first, wildcards last; another VirtualService or require_tls keeps its own"
        );
    }
}
