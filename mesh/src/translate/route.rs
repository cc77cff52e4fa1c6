//! RDS: route configurations from VirtualServices, after istiod's
//! `httproute.go`: a virtual host per service port with the names a client
//! may dial, the VirtualService's HTTP routes (converted in `route/http.rs`,
//! istiod's `route/route.go`) or a default route, who each route is for,
//! and the `allow_any` / `block_all` fallback host. Envoy sidecars and
//! proxyless gRPC differ in what they support ([`Flavor`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use istiod_config::istio::networking::VirtualService;
use istiod_proto::envoy::config::route::v3 as route;
use istiod_proto::prost::Message;
use istiod_proto::prost_types::Duration;

use crate::node::ProxyClass;

use crate::meshconfig::OutboundPolicy;
use crate::model::{Model, Service};

pub mod http;

use http::{hash_policy, vs_routes};

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
    let mut names = Vec::new();
    let suffix = format!(".svc.{}", model.domain);
    // The service's names, then its ExternalName aliases' (istiod's
    // generateVirtualHostDomains over the hostname and `Aliases`).
    let aliases = model.aliases.get(&svc.hostname).map(Vec::as_slice).unwrap_or_default();
    for host in std::iter::once(&svc.hostname).chain(aliases) {
        names.push(host.to_string());
        // PILOT_ENABLE_ABSOLUTE_FQDN_VHOST_DOMAIN (GenerateAltVirtualHosts).
        if model.mesh.features.absolute_fqdn_vhost {
            names.push(format!("{host}."));
        }
        if let Some((name, ns)) = host.strip_suffix(&suffix).and_then(|short| short.split_once('.'))
            && !ns.contains('.')
        {
            if ns == proxy_ns {
                names.extend([name.to_owned(), format!("{name}.{ns}.svc"), format!("{name}.{ns}")]);
            } else {
                names.extend([format!("{name}.{ns}"), format!("{name}.{ns}.svc")]);
            }
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

/// Who the routes are for: Envoy supports every action, proxyless gRPC
/// only forwarding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// Envoy sidecars and gateways.
    Envoy,
    /// Proxyless gRPC.
    Grpc,
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
        let mut h = crate::digester();
        (&svc.hostname, port, &svc.vips, svc.resolution == crate::model::Resolution::Passthrough, svc.kubernetes)
            .hash(&mut h);
        model.aliases.get(&svc.hostname).hash(&mut h);
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
    /// A digest of the VirtualServices rendering reads beyond the
    /// services' own ([`special_virtual_services_digests`]).
    pub vs_digest: u64,
}

/// Whether the mesh VirtualService `o` is read beyond the virtual hosts of
/// the services it names: a wildcard host, a host that is no service, or a
/// host another VirtualService names too (its choice, and its hosts of
/// their own, differ by proxy).
pub fn is_special_virtual_service(model: &Model, o: &istiod_config::istio::IstioObject) -> bool {
    let istiod_config::istio::IstioSpec::VirtualService(vs) = &o.spec else { return false };
    if !crate::model::for_mesh(vs, o.meta.ns()) {
        return false;
    }
    vs.hosts.iter().any(|h| {
        let h = model.resolve_host(h, o.meta.ns());
        h.starts_with('*')
            || !model.services.get(h.as_str()).is_some_and(|s| {
                s.ports.iter().any(|p| p.protocol.is_http() || p.protocol == crate::model::Protocol::Unsupported)
            })
            || model.virtual_service(&h).is_some_and(|(other, _)| !std::ptr::eq(other, o))
    })
}

/// Whether a host of the mesh VirtualService `o` is a service without
/// port 80: on route configuration 80 istiod gives it a virtual host of
/// its own (`BuildSidecarVirtualHostWrapper`'s port 80 "HACK").
fn on_route_80(model: &Model, o: &istiod_config::istio::IstioObject) -> bool {
    let istiod_config::istio::IstioSpec::VirtualService(vs) = &o.spec else { return false };
    vs.hosts.iter().any(|h| {
        let h = model.resolve_host(h, o.meta.ns());
        model.services.get(h.as_str()).is_some_and(|s| !s.ports.iter().any(|p| p.port == 80))
    })
}

/// Digests of the VirtualServices the route configurations read beyond
/// their services' own virtual hosts, in istiod's order: every table's
/// (the special ones, [`is_special_virtual_service`]) and route
/// configuration 80's (those and the ones naming a service without port
/// 80; only `with_80`, else 0: every VirtualService of a mesh whose
/// services are on other ports is one). One pass over the VirtualServices.
pub fn special_virtual_services_digests(model: &Model, with_80: bool) -> (u64, u64) {
    use std::hash::{Hash, Hasher};
    let mut any = std::collections::hash_map::DefaultHasher::new();
    let mut on_80 = std::collections::hash_map::DefaultHasher::new();
    for &i in model.mesh_virtual_services().iter() {
        let o = &model.routing[i];
        let special = is_special_virtual_service(model, o);
        if special || (with_80 && on_route_80(model, o)) {
            let id = (o.meta.ns(), &o.meta.name, &o.meta.creation_timestamp, format!("{:?}", o.spec));
            id.hash(&mut on_80);
            if special {
                id.hash(&mut any);
            }
        }
    }
    (any.finish(), if with_80 { on_80.finish() } else { 0 })
}

/// The VirtualServices digest of route configuration `port`
/// ([`special_virtual_services_digests`]).
pub fn special_digest_of(port: u16, (any, on_80): (u64, u64)) -> u64 {
    if port == 80 { on_80 } else { any }
}

impl RouteTable {
    /// A digest of everything rendering reads from the table (the control
    /// thread compares digests to find changed route configurations).
    pub fn digest(&self) -> Bytes {
        use std::hash::{Hash, Hasher};
        let mut h = crate::digester();
        (&self.name, self.flavor, self.vs_digest).hash(&mut h);
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
        views: &dyn Fn(u16) -> Vec<usize>,
    ) -> route::RouteConfiguration {
        let services: Vec<(&Arc<ServiceRoutes>, &Service)> = self
            .hosts
            .iter()
            .filter_map(|vh| model.services.get(&vh.host).filter(|s| visible(s, vh.port)).map(|s| (vh, &**s)))
            .collect();
        let mut hosts = Hosts { seen: Default::default(), names: Default::default(), out: Vec::new() };
        let flavor = self.flavor;
        let service_host = |hosts: &mut Hosts, vh: &ServiceRoutes, svc: &Service, routes: &[ScopedRoute]| {
            let domains = domains(model, svc, vh.port, &class.namespace, flavor);
            hosts.push(format!("{}:{}", vh.host, vh.port), domains, render_routes(model, class, routes), flavor);
        };
        match (self.flavor, self.name.parse::<u16>()) {
            (Flavor::Envoy, Ok(port)) => {
                // istiod's BuildSidecarVirtualHostWrapper: the hosts of the
                // VirtualServices this proxy sees first, in their order,
                // then the services no VirtualService claims.
                let (plan, defaults) = plan_virtual_hosts(model, port, &services, &visible, views);
                let mut claimed = std::collections::HashSet::new();
                for step in &plan {
                    match step {
                        Planned::Host { name, routes } => {
                            let routes = render_routes(model, class, routes);
                            hosts.push(format!("{name}:{port}"), vec![name.clone()], routes, flavor);
                        }
                        Planned::Service { at, routes } => {
                            let (vh, svc) = services[*at];
                            claimed.insert(*at);
                            service_host(&mut hosts, vh, svc, routes.as_deref().unwrap_or(&vh.routes));
                        }
                    }
                }
                for (i, (vh, svc)) in services.iter().enumerate() {
                    if !claimed.contains(&i) {
                        let routes = defaults.get(&i).map_or(&vh.routes[..], Vec::as_slice);
                        service_host(&mut hosts, vh, svc, routes);
                    }
                }
            }
            _ => {
                for (vh, svc) in &services {
                    match proxy_routes(model, vh, svc, self.flavor, views) {
                        Some(routes) => service_host(&mut hosts, vh, svc, &routes),
                        None => service_host(&mut hosts, vh, svc, &vh.routes),
                    }
                }
            }
        }
        let mut virtual_hosts = hosts.out;
        match self.flavor {
            Flavor::Grpc => route::RouteConfiguration { name: self.name.clone(), virtual_hosts, ..Default::default() },
            Flavor::Envoy => {
                virtual_hosts.push(fallback_host(policy));
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

/// The virtual hosts of one route configuration as they are made: names
/// and domains taken by earlier hosts are not repeated (istiod's
/// `buildVirtualHost` and `dedupeDomains`).
struct Hosts {
    seen: std::collections::HashSet<String>,
    names: std::collections::HashSet<String>,
    out: Vec<route::VirtualHost>,
}

impl Hosts {
    fn push(&mut self, name: String, domains: Vec<String>, routes: Vec<route::Route>, flavor: Flavor) {
        if !self.names.insert(name.clone()) {
            return;
        }
        let domains: Vec<String> = domains.into_iter().filter(|d| self.seen.insert(d.clone())).collect();
        if domains.is_empty() {
            return;
        }
        self.out.push(route::VirtualHost {
            name,
            domains,
            routes,
            include_request_attempt_count: flavor == Flavor::Envoy,
            ..Default::default()
        });
    }
}

/// The routes meant for a proxy of `class`, with the hash policy of the
/// DestinationRule in force for it.
fn render_routes(model: &Model, class: &ProxyClass, routes: &[ScopedRoute]) -> Vec<route::Route> {
    // Routes match in order: none after one that matches everything
    // (istiod's BuildHTTPRoutesForVirtualService stops at IsCatchAllRoute).
    let mut done = false;
    routes
        .iter()
        .filter(|r| r.scope.admits(&class.namespace, &class.labels))
        .take_while(|r| {
            let take = !done;
            done |= is_catch_all(&r.route);
            take
        })
        .map(|r| {
            let mut out = r.route.clone();
            if let Some((host, port, subset)) = &r.hash_destination
                && let Some(i) = model.rule_index_for(&class.namespace, &class.labels, host)
                && let Some(route::route::Action::Route(a)) = &mut out.action
            {
                a.hash_policy = hash_policy(&model.destination_rules().get(i).rule, *port, subset);
                // newRetryPolicy(hashPolicy): no other-host preference.
                if !a.hash_policy.is_empty()
                    && let Some(rp) = a.retry_policy.as_mut()
                {
                    rp.retry_host_predicate.clear();
                }
            }
            out
        })
        .collect()
}

/// A service's routes for a proxy of `class` where its choice of
/// VirtualService (among those it sees) is not the shared one; `None`
/// where the shared routes stand.
fn proxy_routes(
    model: &Model,
    vh: &ServiceRoutes,
    svc: &Service,
    flavor: Flavor,
    views: &dyn Fn(u16) -> Vec<usize>,
) -> Option<Vec<ScopedRoute>> {
    if model.mesh_virtual_services().is_empty() {
        return None;
    }
    let order = views(vh.port);
    let chosen = model.pick_virtual_service(&order, &svc.hostname).map(|i| &model.routing[i]);
    let shared = model.virtual_service(&svc.hostname);
    match (chosen, shared) {
        (Some(c), Some((s, _))) if std::ptr::eq(c, s) => None,
        (Some(c), _) => match &c.spec {
            istiod_config::istio::IstioSpec::VirtualService(vs) => {
                Some(routes_with(model, svc, vh.port, flavor, Some((c, vs))))
            }
            _ => None,
        },
        // Not exported here: the shared routes' fallback stands.
        (None, Some((o, vs))) if vs_export(vs, o.meta.ns()).is_some() => None,
        (None, Some(_)) => Some(routes_with(model, svc, vh.port, flavor, None)),
        (None, None) => None,
    }
}

/// istiod's `IsCatchAllRoute`: a `/` prefix (or `*` regex) and nothing
/// else to match.
fn is_catch_all(r: &route::Route) -> bool {
    use route::route_match::PathSpecifier;
    let Some(m) = &r.r#match else { return false };
    let path = match &m.path_specifier {
        Some(PathSpecifier::Prefix(p)) | Some(PathSpecifier::PathSeparatedPrefix(p)) => p == "/",
        Some(PathSpecifier::SafeRegex(re)) => re.regex == "*",
        _ => false,
    };
    path && m.headers.is_empty() && m.query_parameters.is_empty() && m.dynamic_metadata.is_empty()
}

/// One step of a route configuration's plan for a proxy.
enum Planned {
    /// A VirtualService host that is none of the services the proxy sees
    /// on the port: a virtual host of its own, with the VirtualService's
    /// routes.
    Host { name: String, routes: Vec<ScopedRoute> },
    /// The service at this index, claimed by a VirtualService: with these
    /// routes where the proxy's choice differs from the shared one.
    Service { at: usize, routes: Option<Vec<ScopedRoute>> },
}

/// istiod's `BuildSidecarOutboundVirtualHosts` for the VirtualServices a
/// proxy sees (`views`, the caller's `scope::virtual_services`) on route
/// configuration `port`, over the services it sees there (`services`):
/// each service takes the first VirtualService naming it, else the first
/// naming the most specific wildcard covering it; a VirtualService's other
/// hosts get virtual hosts of their own on the ports of the services it
/// claims, or on 80 when it claims none (istiod's "gross HACK"). Also the
/// default routes of the services whose shared VirtualService this proxy
/// does not see.
fn plan_virtual_hosts(
    model: &Model,
    port: u16,
    services: &[(&Arc<ServiceRoutes>, &Service)],
    visible: &dyn Fn(&Service, u16) -> bool,
    views: &dyn Fn(u16) -> Vec<usize>,
) -> (Vec<Planned>, std::collections::HashMap<usize, Vec<ScopedRoute>>) {
    let mut defaults = std::collections::HashMap::new();
    if model.mesh_virtual_services().is_empty() {
        return (Vec::new(), defaults);
    }
    let order = views(port);
    let by_host: std::collections::HashMap<&str, usize> =
        services.iter().enumerate().map(|(i, (_, s))| (&*s.hostname, i)).collect();
    // istiod's servicesByName: the services the proxy sees with this port,
    // whatever its protocol (only HTTP ones get virtual hosts).
    // (Scanned only for wildcard hosts: exact ones are looked up.)
    let registry: std::cell::OnceCell<Vec<&Service>> = std::cell::OnceCell::new();
    let registry = || {
        registry.get_or_init(|| {
            model
                .services
                .values()
                .map(Arc::as_ref)
                .filter(|s| s.ports.iter().any(|p| p.port == port) && visible(s, port))
                .collect()
        })
    };
    let in_registry = |h: &str| match h.starts_with('*') {
        true => registry().iter().any(|s| crate::model::destination_rules::host_matches(h, &s.hostname)),
        false => model.services.get(h).is_some_and(|s| s.ports.iter().any(|p| p.port == port) && visible(s, port)),
    };
    // The proxy's choice for each service, and whether it is the shared one.
    let picker = model.virtual_service_picker(&order);
    let chosen: Vec<Option<usize>> = services.iter().map(|(_, s)| picker.pick(&s.hostname)).collect();
    let mut out = Vec::new();
    for &i in order.iter() {
        let o = &model.routing[i];
        let istiod_config::istio::IstioSpec::VirtualService(vs) = &o.spec else { continue };
        let hosts: Vec<String> = vs.hosts.iter().map(|h| model.resolve_host(h, o.meta.ns())).collect();
        // selectVirtualServices (ports other than 80): it must name a
        // service of the port.
        if port != 80 && !hosts.iter().any(|h| in_registry(h)) {
            continue;
        }
        let claimed: Vec<usize> = (0..services.len()).filter(|&k| chosen[k] == Some(i)).collect();
        let exact_claims = hosts.iter().any(|h| by_host.contains_key(h.as_str()));
        let others: Vec<&String> = hosts.iter().filter(|h| !in_registry(h)).collect();
        if !others.is_empty() && (exact_claims || !claimed.is_empty() || port == 80) {
            let routes = http::vs_routes(model, o, vs, port, Flavor::Envoy, "", false);
            if !routes.is_empty() {
                out.extend(others.into_iter().map(|h| Planned::Host { name: h.clone(), routes: routes.clone() }));
            }
        }
        for k in claimed {
            let (vh, svc) = services[k];
            let shared = model.virtual_service(&svc.hostname).map(|(so, _)| std::ptr::eq(so, o)).unwrap_or(false);
            let routes = (!shared).then(|| routes_with(model, svc, vh.port, Flavor::Envoy, Some((o, vs))));
            out.push(Planned::Service { at: k, routes });
        }
    }
    for (k, (vh, svc)) in services.iter().enumerate() {
        // A VirtualService this proxy does not import (its Sidecar) leaves
        // the default route; one not exported here has its fallback
        // route in the shared routes already.
        if chosen[k].is_none()
            && let Some((o, vs)) = model.virtual_service(&svc.hostname)
            && vs_export(vs, o.meta.ns()).is_none()
        {
            defaults.insert(k, routes_with(model, svc, vh.port, Flavor::Envoy, None));
        }
    }
    (out, defaults)
}

pub fn default_route(cluster: String, flavor: Flavor) -> route::Route {
    // BuildDefaultHTTPOutboundRoute: istiod's default retries, no timeout.
    let mut action = route::RouteAction {
        cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(cluster)),
        retry_policy: http::retry_policy(None),
        ..Default::default()
    };
    http::set_timeout(&mut action, None, flavor);
    route::Route {
        name: "default".into(),
        r#match: Some(route::RouteMatch {
            path_specifier: Some(route::route_match::PathSpecifier::Prefix("/".into())),
            ..Default::default()
        }),
        action: Some(route::route::Action::Route(action)),
        ..Default::default()
    }
}

pub use crate::model::vs_export;

/// The routes of `svc`'s `port`: its VirtualService's HTTP routes, or a
/// default route to the port's cluster.
pub(crate) fn routes(model: &Model, svc: &Service, port: u16, flavor: Flavor) -> Vec<ScopedRoute> {
    routes_with(model, svc, port, flavor, model.virtual_service(&svc.hostname))
}

/// [`routes`] under VirtualService `chosen` (none: the default route).
fn routes_with(
    model: &Model,
    svc: &Service,
    port: u16,
    flavor: Flavor,
    chosen: Option<(&istiod_config::istio::IstioObject, &VirtualService)>,
) -> Vec<ScopedRoute> {
    let default_cluster = format!("outbound|{port}||{}", svc.hostname);
    let everyone = |route| ScopedRoute { route, scope: RouteScope::default(), hash_destination: None };
    let Some((obj, vs)) = chosen else {
        return vec![everyone(default_route(default_cluster, flavor))];
    };
    // Match blocks naming gateways apply to sidecars only when `mesh` is
    // among them (istiod's route building for the mesh gateway).
    let mesh_only;
    let vs = if vs.http.iter().any(|r| r.matches.iter().any(|m| !m.gateways.is_empty())) {
        mesh_only = for_gateway(vs, obj.meta.ns(), "mesh", None);
        &mesh_only
    } else {
        vs
    };
    let mut out = vs_routes(model, obj, vs, port, flavor, &default_cluster, false);
    if let Some(namespaces) = vs_export(vs, obj.meta.ns()) {
        for r in &mut out {
            r.scope.export = Some(namespaces.clone());
        }
        let mut fallback = everyone(default_route(default_cluster, flavor));
        fallback.scope = RouteScope { export: Some(namespaces), fallback: true, ..RouteScope::default() };
        out.push(fallback);
    }
    out
}

/// `vs` (of namespace `ns`) with only the HTTP match blocks that apply to
/// `gateway` (`ns/name`, or `mesh`) on `port`: a block counts when its
/// `gateways` (normalized) are unset or name the gateway, and its `port`
/// is unset or the given one; a route left with no block is dropped.
fn for_gateway(vs: &VirtualService, ns: &str, gateway: &str, port: Option<u16>) -> VirtualService {
    let mut filtered = vs.clone();
    filtered.http.retain_mut(|r| {
        if r.matches.is_empty() {
            return true;
        }
        r.matches.retain(|m| {
            port.is_none_or(|p| m.port == 0 || m.port == u32::from(p))
                && (m.gateways.is_empty()
                    || crate::model::gateway::bound_gateways(&m.gateways, ns).iter().any(|g| g == gateway))
        });
        !r.matches.is_empty()
    });
    filtered
}

/// A VirtualService's HTTP routes on gateway `gateway` (`ns/name`) for a
/// server declared on `server_port` (`BuildHTTPRoutesForVirtualService`
/// for a gateway): a match block counts when its `port` is unset or the
/// server's and its `gateways` (normalized) name the Gateway; a route
/// whose every match block is dropped is left out.
pub fn gateway_routes(
    model: &Model,
    obj: &istiod_config::istio::IstioObject,
    vs: &VirtualService,
    gateway: &str,
    server_port: u16,
) -> Vec<route::Route> {
    let filtered = for_gateway(vs, obj.meta.ns(), gateway, Some(server_port));
    http::vs_routes(model, obj, &filtered, server_port, Flavor::Envoy, "", true).into_iter().map(|r| r.route).collect()
}

/// The last virtual host of every outbound route configuration, as
/// istiod's `buildCatchAllVirtualHost`: unknown hosts go to
/// `PassthroughCluster` (`allow_any`), to the dynamic forward proxy
/// (`allow_any_dynamic_dns`, ALLOW_ANY_DYNAMIC_DNS), both with no timeout,
/// or get a 502 (`block_all`, REGISTRY_ONLY).
pub(crate) fn fallback_host(policy: OutboundPolicy) -> route::VirtualHost {
    let to = |cluster: &str| {
        route::route::Action::Route(route::RouteAction {
            cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster(cluster.into())),
            timeout: Some(Duration::default()),
            max_grpc_timeout: Some(Duration::default()),
            ..Default::default()
        })
    };
    let (name, action) = match policy {
        OutboundPolicy::AllowAny => ("allow_any", to("PassthroughCluster")),
        OutboundPolicy::AllowAnyDynamicDns => (super::dfp::VIRTUAL_HOST, to(super::dfp::CLUSTER)),
        OutboundPolicy::RegistryOnly => {
            ("block_all", route::route::Action::DirectResponse(route::DirectResponseAction { status: 502, body: None }))
        }
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
