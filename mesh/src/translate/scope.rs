//! What a proxy may see of the mesh, as istiod's `SidecarScope` decides it:
//! a service is visible to a proxy in namespace `ns` when it is exported to
//! `ns` (`exportTo` on a ServiceEntry, the `networking.istio.io/exportTo`
//! annotation on a Kubernetes Service) and the proxy's Sidecar, if any,
//! lists it among its egress hosts. The Sidecar in force is the one in the
//! proxy's namespace whose `workloadSelector` matches the proxy's labels,
//! else that namespace's selector-less one, else the root namespace's
//! selector-less one.
//!
//! Scoping applies to names: clusters, endpoints, listeners and API
//! listeners of invisible services are withheld, and route configurations
//! lose their virtual hosts. A VirtualService's own `exportTo` is applied to
//! its routes (`route.rs`, `RouteScope`). An egress listener with a `port`
//! makes its hosts visible on that port only. Which DestinationRule shapes a
//! cluster for a proxy is `model/destination_rules.rs`'s choice.

use std::collections::HashMap;
use std::sync::Arc;

use crate::node::ProxyClass;
use istiod_config::istio::{IstioSpec, networking};
use istiod_xds_api::snapshot::Kind;

use crate::model::{Model, Service};

/// The visibility index of one model.
#[derive(Debug, Default)]
pub struct Scoping {
    /// Whether anything restricts visibility at all; when not, every proxy
    /// sees everything and nothing is filtered.
    pub active: bool,
    /// Hostname of each service address.
    by_vip: HashMap<String, Arc<str>>,
}

impl Scoping {
    /// Indexes `model`.
    pub fn new(model: &Model) -> Scoping {
        let restricted = |e: &Vec<String>| !e.is_empty() && !e.iter().any(|x| x == "*");
        let active = model.services.values().any(|s| restricted(&s.export_to))
            || model.sidecars.iter().any(|o| matches!(&o.spec, IstioSpec::Sidecar(sc) if !sc.egress.is_empty()));
        let mut by_vip = HashMap::new();
        if active {
            for s in model.services.values() {
                for v in &s.vips {
                    by_vip.entry(v.clone()).or_insert_with(|| s.hostname.clone());
                }
            }
        }
        Scoping { active, by_vip }
    }

    /// Whether a proxy of `class` receives the resource `(kind, name)`.
    /// Names that are not about one service (fixed clusters, inbound
    /// resources, shared route configurations) are always visible.
    pub fn allows(&self, model: &Model, class: &ProxyClass, kind: Kind, name: &str) -> bool {
        if !self.active {
            return true;
        }
        let host_visible =
            |host: &str, port: Option<u16>| model.services.get(host).is_none_or(|s| visible_on(model, class, s, port));
        match kind {
            Kind::Secret
            | Kind::ExtensionConfig
            | Kind::Address
            | Kind::Authorization
            | Kind::NameTable
            | Kind::ProxyConfig => true,
            Kind::Cluster | Kind::Endpoint | Kind::Route => match name.strip_prefix("outbound|") {
                Some(rest) => {
                    let port = rest.split('|').next().and_then(|p| p.parse().ok());
                    rest.rsplit('|').next().is_none_or(|h| host_visible(h, port))
                }
                None => true,
            },
            Kind::Listener => {
                if let Some((addr, port)) = name.rsplit_once('_') {
                    let Ok(port) = port.parse::<u16>() else { return true };
                    if addr == "0.0.0.0" {
                        // The shared HTTP (or SNI) listener of a port stays
                        // while any visible service is served by it.
                        return model.services.values().any(|s| {
                            super::listener::contributes(s, port, "0.0.0.0") && visible_on(model, class, s, Some(port))
                        });
                    }
                    return self.by_vip.get(addr).is_none_or(|h| host_visible(h, Some(port)));
                }
                // Proxyless gRPC API listener `<host>:<port>`.
                match name.rsplit_once(':') {
                    Some((host, port)) => {
                        let port = port.parse().ok();
                        if model.services.contains_key(host) {
                            host_visible(host, port)
                        } else {
                            host_visible(&model.resolve_host(host, &class.namespace), port)
                        }
                    }
                    None => true,
                }
            }
        }
    }

    /// Whether the virtual host `vh_name` (`<host>:<port>`) of a route
    /// configuration stays for `class`.
    pub fn keeps_virtual_host(&self, model: &Model, class: &ProxyClass, vh_name: &str) -> bool {
        if !self.active {
            return true;
        }
        match vh_name.rsplit_once(':') {
            Some((host, port)) => {
                model.services.get(host).is_none_or(|s| visible_on(model, class, s, port.parse().ok()))
            }
            None => true,
        }
    }
}

/// Whether `svc` is exported to `ns`.
pub fn exported(svc: &Service, ns: &str) -> bool {
    svc.export_to.is_empty()
        || svc.export_to.iter().any(|e| match e.as_str() {
            "*" => true,
            "." => svc.namespace == ns,
            "~" => false,
            other => other == ns,
        })
}

/// The Sidecar in force for `class`; none for gateways and waypoints
/// (istiod's `doGetSidecarScope`: "Gateways always use default sidecar
/// scope").
pub fn sidecar<'a>(model: &'a Model, class: &ProxyClass) -> Option<&'a networking::Sidecar> {
    use crate::node::NodeType;
    if matches!(class.node_type, NodeType::Router | NodeType::Waypoint) {
        return None;
    }
    let of = |o: &'a istiod_config::istio::IstioObject| match &o.spec {
        IstioSpec::Sidecar(sc) => Some(sc),
        _ => None,
    };
    let in_ns = || model.sidecars.iter().filter(|o| o.meta.ns() == &*class.namespace).filter_map(of);
    in_ns()
        .find(|sc| selector(sc).is_some_and(|sel| crate::model::has_labels(&class.labels, sel)))
        .or_else(|| in_ns().find(|sc| selector(sc).is_none()))
        .or_else(|| {
            model
                .sidecars
                .iter()
                .filter(|o| o.meta.ns() == model.mesh.root_namespace)
                .filter_map(of)
                .find(|sc| selector(sc).is_none())
        })
}

fn selector(sc: &networking::Sidecar) -> Option<&std::collections::BTreeMap<String, String>> {
    sc.workload_selector.as_ref().map(|w| &w.labels).filter(|l| !l.is_empty())
}

/// The outbound traffic policy of `class`: its Sidecar's, else the mesh's.
pub fn outbound_policy(model: &Model, class: &ProxyClass) -> crate::meshconfig::OutboundPolicy {
    use crate::meshconfig::OutboundPolicy;
    match sidecar(model, class).and_then(|sc| sc.outbound_traffic_policy.as_ref()).map(|p| p.mode) {
        Some(networking::OutboundTrafficMode::AllowAny) => OutboundPolicy::AllowAny,
        Some(networking::OutboundTrafficMode::RegistryOnly) => OutboundPolicy::RegistryOnly,
        // Refused by validation; never in force.
        Some(networking::OutboundTrafficMode::AllowAnyDynamicDns) => model.mesh.outbound,
        None => model.mesh.outbound,
    }
}

/// Whether a proxy of `class` sees `svc` on some port.
pub fn visible(model: &Model, class: &ProxyClass, svc: &Service) -> bool {
    visible_on(model, class, svc, None)
}

/// Whether a proxy of `class` sees `svc` on `port` (`None`: on any port).
/// An egress listener with a `port` lists hosts for that port only.
pub fn visible_on(model: &Model, class: &ProxyClass, svc: &Service, port: Option<u16>) -> bool {
    if !exported(svc, &class.namespace) {
        return false;
    }
    let Some(sc) = sidecar(model, class).filter(|sc| !sc.egress.is_empty()) else { return true };
    sc.egress
        .iter()
        .filter(|e| match (port, e.port.as_ref()) {
            (Some(p), Some(ep)) => ep.number == u32::from(p),
            _ => true,
        })
        .flat_map(|e| &e.hosts)
        .any(|h| egress_host_matches(h, &class.namespace, svc))
}

/// istiod's egress host syntax: `namespace/dnsName`, the namespace `*`
/// (any), `.` (the proxy's own) or `~` (none), the name `*`, `*.suffix` or
/// a hostname.
fn egress_host_matches(entry: &str, proxy_ns: &str, svc: &Service) -> bool {
    let Some((ns, host)) = entry.split_once('/') else { return false };
    let ns_ok = match ns {
        "*" => true,
        "." => svc.namespace == proxy_ns,
        "~" => false,
        other => svc.namespace == other,
    };
    ns_ok
        && match host {
            "*" => true,
            h if h.starts_with("*.") => svc.hostname.ends_with(&h[1..]),
            h => *svc.hostname == *h,
        }
}

/// The VirtualServices bound to the mesh that a proxy of `class` sees on
/// route configuration `port`, as indexes into `model.routing`, in
/// istiod's order (`VirtualServicesForGateway`: those private to its
/// namespace, then those exported to it by name, then the public ones,
/// each in creation order): exported to its namespace, and imported by its
/// Sidecar's egress listener for the port (else the catch-all one) when
/// it has one, a host of the VirtualService meeting one of the listener's
/// `namespace/host` entries (either may be the wildcard, as
/// `hostClassification.VSMatches`).
pub fn virtual_services(model: &Model, class: &ProxyClass, port: u16) -> Vec<usize> {
    let proxy_ns = &*class.namespace;
    let listener = sidecar(model, class).filter(|sc| !sc.egress.is_empty()).map(|sc| {
        sc.egress
            .iter()
            .find(|e| e.port.as_ref().is_some_and(|p| p.number == u32::from(port)))
            .or_else(|| sc.egress.iter().find(|e| e.port.is_none()))
    });
    let (mut private, mut exported, mut consumer, mut public) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for &i in model.mesh_virtual_services().iter() {
        let o = &model.routing[i];
        let IstioSpec::VirtualService(vs) = &o.spec else { continue };
        let ns = o.meta.ns();
        // Routes of the Gateway API for a Service (GAMMA) reach the
        // proxies of their own namespace, or of the Service's
        // (buildSidecarVirtualHostsForVirtualService); those of the proxy's
        // namespace come first among the public ones (the consumer's
        // override, VirtualServicesForGateway).
        let gateway_semantics =
            o.meta.annotations.get("internal.istio.io/route-semantics").is_some_and(|v| v == "gateway");
        // (A parent Service that does not exist takes no route.)
        let parent = |s: &Service| s.kubernetes && (ns == proxy_ns || s.namespace == ns);
        if gateway_semantics
            && !vs
                .hosts
                .iter()
                .any(|h| model.services.get(model.resolve_host(h, ns).as_str()).map(Arc::as_ref).is_some_and(parent))
        {
            continue;
        }
        let bucket = match crate::model::vs_export(vs, ns) {
            None if gateway_semantics && ns == proxy_ns => &mut consumer,
            None => &mut public,
            Some(list) if !list.iter().any(|n| n == proxy_ns) => continue,
            Some(list) if ns == proxy_ns && list.iter().all(|n| n == ns) => &mut private,
            Some(_) => &mut exported,
        };
        if let Some(listener) = listener {
            let Some(egress) = listener else { continue };
            let imported = egress.hosts.iter().any(|entry| {
                let Some((ens, eh)) = entry.split_once('/') else { return false };
                let ns_ok = match ens {
                    "*" => true,
                    "." => ns == proxy_ns,
                    "~" => false,
                    other => other == ns,
                };
                ns_ok
                    && vs.hosts.iter().any(|h| {
                        let h = model.resolve_host(h, ns);
                        use crate::model::destination_rules::host_matches;
                        h == eh
                            || ((h.starts_with('*') || eh.starts_with('*'))
                                && (host_matches(eh, &h) || host_matches(&h, eh)))
                    })
            });
            if !imported {
                continue;
            }
        }
        bucket.push(i);
    }
    private.extend(exported);
    private.extend(consumer);
    private.extend(public);
    private
}

/// Whether a workload policy of namespace `ns` applies to `class`, as
/// istiod's `getConfigsForWorkload` and `ShouldAttachPolicy` decide for
/// AuthorizationPolicy and RequestAuthentication alike: of the workload's
/// namespace or the root namespace; then, for a Gateway API gateway's
/// deployment (`gateway.networking.k8s.io/gateway-name`), one whose
/// `targetRef(s)` name its Gateway (same namespace), or without targets
/// one whose selector matches under `ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY`;
/// for any other workload, one without targets whose selector matches (or
/// that has none). `refs`: `targetRefs`, else `targetRef` (`GetTargetRefs`).
pub fn policy_applies(
    model: &Model,
    class: &ProxyClass,
    ns: &str,
    selector: Option<&std::collections::BTreeMap<String, String>>,
    refs: &[&istiod_config::istio::PolicyTargetReference],
) -> bool {
    if ns != &*class.namespace && ns != model.mesh.root_namespace {
        return false;
    }
    let refs: Vec<istiod_envoyfilter::spec::TargetRef> = refs
        .iter()
        .map(|r| istiod_envoyfilter::spec::TargetRef {
            group: r.group.clone(),
            kind: r.kind.clone(),
            name: r.name.clone(),
            namespace: r.namespace.clone(),
        })
        .collect();
    let label = |k: &str| class.labels.iter().find(|(l, _)| &**l == k).map(|(_, v)| &**v);
    istiod_envoyfilter::filters::should_attach(
        ns,
        selector,
        &refs,
        &class.namespace,
        label,
        model.mesh.features.selector_k8s_gateway_policy,
    )
}

/// A policy's targets as istiod's `GetTargetRefs` reads them:
/// `targetRefs`, else the one `targetRef`.
pub fn target_refs<'a>(
    target_ref: Option<&'a istiod_config::istio::PolicyTargetReference>,
    target_refs: &'a [istiod_config::istio::PolicyTargetReference],
) -> Vec<&'a istiod_config::istio::PolicyTargetReference> {
    if target_refs.is_empty() { target_ref.into_iter().collect() } else { target_refs.iter().collect() }
}

#[cfg(test)]
mod tests;
