//! A VirtualService's `tcp` and `tls` routes on sidecars' outbound
//! listeners, after istiod's `buildSidecarOutboundTLSFilterChainOpts` and
//! `buildSidecarOutboundTCPFilterChainOpts` (`networking/core/tls.go`):
//! the VirtualServices bound to the mesh whose hosts match a service give
//! its TCP or TLS port filter chains to their routes' destinations, by
//! server name and destination subnet.
//!
//! Outbound listeners are shared by every sidecar, so a match that depends
//! on the proxy (`sourceLabels`, `sourceNamespace`) or a VirtualService
//! not exported everywhere does not apply here; the model's report lists
//! them (`model/report.rs`).

use istiod_config::istio::IstioSpec;
use istiod_config::istio::networking::{RouteDestination, VirtualService};

use crate::model::{Model, Port, Protocol, Service};

/// One filter chain a route makes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chain {
    /// Server names it matches (TLS).
    pub sni: Vec<String>,
    /// Destination CIDRs it matches.
    pub cidrs: Vec<String>,
    /// The tcp_proxy's stat prefix, and its cluster when `weighted` is
    /// empty.
    pub stat_prefix: String,
    /// Weighted clusters (two destinations or more).
    pub weighted: Vec<(String, u32)>,
}

/// Whether a route of `vs` can apply on the shared sidecar listeners: the
/// VirtualService is bound to the mesh and exported everywhere.
fn shared(vs: &VirtualService, ns: &str) -> bool {
    crate::model::for_mesh(vs, ns) && crate::model::vs_export(vs, ns).is_none()
}

/// Whether a match's static predicates hold for every sidecar
/// (`matchTCP` / `matchTLS` with the mesh gateway, on `port`).
fn static_match(gateways: &[String], port: u32, labels_empty: bool, ns_empty: bool, listen: u16) -> bool {
    (gateways.is_empty() || gateways.iter().any(|g| g == "mesh"))
        && (port == 0 || port == u32::from(listen))
        && labels_empty
        && ns_empty
}

/// The VirtualServices (in model order, with their name and namespace)
/// whose hosts match `svc` (`getConfigsForHost`).
fn for_host<'m>(model: &'m Model, svc: &Service) -> Vec<((&'m str, &'m str), &'m VirtualService)> {
    model
        .routing
        .iter()
        .filter_map(|o| match &o.spec {
            IstioSpec::VirtualService(vs) if shared(vs, o.meta.ns()) && (!vs.tcp.is_empty() || !vs.tls.is_empty()) => {
                let ns = o.meta.ns();
                let matches = vs.hosts.iter().any(|h| {
                    let h = model.resolve_host(h, ns);
                    crate::model::destination_rules::host_matches(&h, &svc.hostname)
                        || crate::model::destination_rules::host_matches(&svc.hostname, &h)
                });
                matches.then_some(((o.meta.name.as_str(), ns), vs))
            }
            _ => None,
        })
        .collect()
}

/// `GetDestinationCluster`: the destination's port, else its service's
/// only port, else the listener's.
fn destination_cluster(model: &Model, d: &RouteDestination, ns: &str, listen: u16) -> Option<String> {
    let dest = d.destination.as_ref()?;
    let host = model.resolve_host(&dest.host, ns);
    let port = match &dest.port {
        Some(p) => p.number,
        None => match model.services.get(host.as_str()) {
            Some(s) if s.ports.len() == 1 => u32::from(s.ports[0].port),
            _ => u32::from(listen),
        },
    };
    Some(format!("outbound|{port}|{}|{host}", dest.subset))
}

/// `buildOutboundNetworkFilters`' destination: one cluster (its name the
/// stat prefix), or the weighted clusters of the positive weights with
/// stat prefix `<name>.<namespace>` of the VirtualService.
fn target(
    model: &Model,
    route: &[RouteDestination],
    vs: (&str, &str),
    listen: u16,
) -> Option<(String, Vec<(String, u32)>)> {
    let (name, ns) = vs;
    if let [one] = route {
        return destination_cluster(model, one, ns, listen).map(|c| (c, vec![]));
    }
    let weighted: Vec<(String, u32)> = route
        .iter()
        .filter(|d| d.weight > 0)
        .filter_map(|d| Some((destination_cluster(model, d, ns, listen)?, d.weight as u32)))
        .collect();
    (!weighted.is_empty()).then(|| (format!("{name}.{ns}"), weighted))
}

/// The chains the VirtualServices of `svc` make on its `port` (whose
/// listener matches `bind_cidrs`, the service's CIDR address if any), and
/// whether the service's own default chain is still needed after them.
pub(crate) fn sidecar_chains(model: &Model, svc: &Service, port: &Port, bind_cidrs: &[String]) -> (Vec<Chain>, bool) {
    let configs = for_host(model, svc);
    if configs.is_empty() {
        return (vec![], true);
    }
    let listen = port.port;
    let mut out = Vec::new();
    if matches!(port.protocol, Protocol::Tls | Protocol::Https) {
        let mut handled = std::collections::HashSet::new();
        for (id, vs) in &configs {
            for r in vs.tls.iter().filter(|r| !r.route.is_empty()) {
                for m in &r.matches {
                    if !static_match(
                        &m.gateways,
                        m.port,
                        m.source_labels.is_empty(),
                        m.source_namespace.is_empty(),
                        listen,
                    ) {
                        continue;
                    }
                    let cidrs = if m.destination_subnets.is_empty() {
                        bind_cidrs.to_vec()
                    } else {
                        m.destination_subnets.clone()
                    };
                    // Runtime predicates seen before can never be reached.
                    if !handled.insert((m.sni_hosts.join(","), m.destination_subnets.join(","))) {
                        continue;
                    }
                    if let Some((stat_prefix, weighted)) = target(model, &r.route, *id, listen) {
                        out.push(Chain { sni: m.sni_hosts.clone(), cidrs, stat_prefix, weighted });
                    }
                }
            }
        }
        let needs_default = out.is_empty();
        return (out, needs_default);
    }
    for (id, vs) in &configs {
        for r in vs.tcp.iter().filter(|r| !r.route.is_empty()) {
            let Some((stat_prefix, weighted)) = target(model, &r.route, *id, listen) else { continue };
            let chain = |cidrs: Vec<String>| Chain {
                sni: vec![],
                cidrs,
                stat_prefix: stat_prefix.clone(),
                weighted: weighted.clone(),
            };
            if r.matches.is_empty() {
                out.push(chain(bind_cidrs.to_vec()));
                return (out, false);
            }
            let mut subnets: Vec<String> = Vec::new();
            for m in &r.matches {
                if !static_match(&m.gateways, m.port, m.source_labels.is_empty(), m.source_namespace.is_empty(), listen)
                {
                    continue;
                }
                if m.destination_subnets.is_empty() {
                    out.push(chain(bind_cidrs.to_vec()));
                    return (out, false);
                }
                subnets.extend(m.destination_subnets.iter().cloned());
            }
            if !subnets.is_empty() {
                out.push(chain(subnets.clone()));
                // The same CIDRs as the service's own chain: that one would
                // be a duplicate match Envoy refuses.
                let mut a = subnets;
                a.sort();
                let mut b = bind_cidrs.to_vec();
                b.sort();
                if a == b {
                    return (out, false);
                }
            }
        }
    }
    (out, true)
}
