//! The analyzers that look a host up among the services of the mesh
//! (istiod's `util.InitServiceEntryHostMap` and `GetDestinationHost`):
//! `virtualservice.DestinationHostAnalyzer` and
//! `destinationrule.SubsetSelectPodAnalyzer`.

use std::collections::{BTreeMap, HashMap};

use super::{Message, MessageType};
use istiod_config::istio::networking::{Destination, VirtualService};
use istiod_config::istio::{IstioObject, IstioSpec};
use istiod_config::objects::Objects;

/// `VirtualServiceDestinationPortSelectorRequired`.
pub const PORT_SELECTOR_REQUIRED: MessageType = MessageType { code: "IST0112", level: "Error" };
/// `IngressRouteRulesNotAffected`.
pub const INGRESS_ROUTE_RULES_NOT_AFFECTED: MessageType = MessageType { code: "IST0140", level: "Warning" };
/// `DestinationRuleSubsetNotSelectPods`.
pub const SUBSET_SELECTS_NO_PODS: MessageType = MessageType { code: "IST0173", level: "Error" };
/// `UnknownDestinationRuleHost`.
pub const UNKNOWN_DESTINATION_RULE_HOST: MessageType = MessageType { code: "IST0174", level: "Warning" };

/// istiod's `ConvertHostToFQDN`: a short name is a service of `ns`.
fn fqdn(ns: &str, host: &str) -> String {
    if !host.starts_with('*') && !host.contains('.') {
        format!("{host}.{ns}.svc.cluster.local")
    } else {
        host.to_owned()
    }
}

/// What a host lookup finds: the ports (numbers, in order) and the
/// workload selector (a ServiceEntry's; a Service has none).
#[derive(Debug, Clone, Default)]
struct Entry {
    ports: Vec<u32>,
    selector: BTreeMap<String, String>,
}

/// istiod's `InitServiceEntryHostMap`: (scope, FQDN) -> entry, the scope
/// `*` for every namespace. Services come after ServiceEntries and win.
struct Hosts(HashMap<(String, String), Entry>);

impl Hosts {
    fn new(objects: &Objects) -> Hosts {
        let mut map = HashMap::new();
        for o in &objects.istio {
            let IstioSpec::ServiceEntry(se) = &o.spec else { continue };
            let ns = o.meta.ns();
            let entry = Entry {
                ports: se.ports.iter().map(|p| p.number).collect(),
                selector: se.workload_selector.as_ref().map(|w| w.labels.clone()).unwrap_or_default(),
            };
            // Once an entry of exportTo says `*`, the later hosts are
            // exported everywhere too (upstream's exportsToAll).
            let mut everywhere = false;
            for h in &se.hosts {
                let host = fqdn(ns, h);
                if se.export_to.is_empty() || everywhere {
                    map.insert(("*".to_owned(), host), entry.clone());
                    continue;
                }
                for e in &se.export_to {
                    let scope = match e.as_str() {
                        "*" => {
                            everywhere = true;
                            "*"
                        }
                        "." => ns,
                        other => other,
                    };
                    map.insert((scope.to_owned(), host.clone()), entry.clone());
                    if everywhere {
                        break;
                    }
                }
            }
        }
        for s in &objects.services {
            let ns = s.metadata.ns();
            let entry = Entry { ports: s.spec.ports.iter().map(|p| u32::from(p.port)).collect(), ..Entry::default() };
            let host = fqdn(ns, &s.metadata.name);
            let scopes: Vec<String> = match s.metadata.annotations.get("networking.istio.io/exportTo") {
                None => vec!["*".to_owned()],
                Some(a) if a.is_empty() => vec!["*".to_owned()],
                Some(a) => {
                    a.split(',').map(str::trim).map(|e| if e == "." { ns } else { e }).map(str::to_owned).collect()
                }
            };
            for scope in scopes {
                map.insert((scope, host.clone()), entry.clone());
            }
        }
        Hosts(map)
    }

    /// istiod's `GetDestinationHost`: the entry `host` names for a
    /// resource of `ns` exported to `export_to`.
    fn lookup(&self, ns: &str, export_to: &[String], host: &str) -> Option<&Entry> {
        let raw = host;
        let host = fqdn(ns, host);
        if let Some(e) = self.0.get(&("*".to_owned(), host.clone())) {
            return Some(e);
        }
        let scopes: Vec<&str> = match export_to.is_empty() {
            true => vec![ns],
            false => export_to.iter().map(|e| if e == "." { ns } else { e.as_str() }).collect(),
        };
        for scope in scopes {
            if let Some(e) = self.0.get(&(scope.to_owned(), host.clone())) {
                return Some(e);
            }
        }
        // Wildcard entries visible here (upstream takes the first its map
        // order gives; here the least by scope and host).
        // (Against the host as written: a short name is not expanded here.)
        let bare = raw.strip_prefix('*').unwrap_or(raw);
        let mut wildcards: Vec<(&(String, String), &Entry)> =
            self.0.iter().filter(|((scope, h), _)| h.starts_with('*') && (scope == "*" || scope == ns)).collect();
        wildcards.sort_by(|a, b| a.0.cmp(b.0));
        wildcards.into_iter().find(|((_, h), _)| bare.ends_with(&h[1..])).map(|(_, e)| e)
    }
}

/// A route's or mirror's destination as upstream's
/// `AnnotatedDestination`s list them: a route entry without one names
/// the host "".
fn route_destinations(vs: &VirtualService) -> Vec<Destination> {
    let tcp = vs.tcp.iter().flat_map(|r| r.route.iter().map(|d| d.destination.clone().unwrap_or_default()));
    let tls = vs.tls.iter().flat_map(|r| r.route.iter().map(|d| d.destination.clone().unwrap_or_default()));
    let http = vs.http.iter().flat_map(|r| r.route.iter().map(|d| d.destination.clone().unwrap_or_default()));
    tcp.chain(tls).chain(http).collect()
}

/// istiod's `checkServiceEntryPorts`.
fn check_ports(o: &IstioObject, d: &Destination, e: &Entry, out: &mut Vec<Message>) {
    match &d.port {
        None if e.ports.len() > 1 => {
            // Go's %v of an []int.
            let ports: Vec<String> = e.ports.iter().map(u32::to_string).collect();
            let text = format!(
                "This VirtualService routes to a service {:?} that exposes multiple ports [{}]. Specifying a port in the destination is required to disambiguate.",
                d.host,
                ports.join(" ")
            );
            out.push(Message::new(o, "VirtualService", PORT_SELECTOR_REQUIRED, text));
        }
        None => {}
        Some(p) if !e.ports.contains(&p.number) => {
            let text = super::not_found("host:port", &format!("{}:{}", d.host, p.number));
            out.push(Message::new(o, "VirtualService", super::REFERENCED_RESOURCE_NOT_FOUND, text));
        }
        Some(_) => {}
    }
}

/// istiod's `virtualservice.DestinationHostAnalyzer`: a route or mirror
/// naming a host no service (visible to the VirtualService) has, or a
/// port it does not expose, or no port where it exposes several; and a
/// gateway-bound route without a subset to a host another VirtualService
/// routes by subset (`analyzeSubset`).
pub(super) fn destination_hosts(objects: &Objects, out: &mut Vec<Message>) {
    let hosts = Hosts::new(objects);
    let services: Vec<(&IstioObject, &VirtualService)> = objects
        .istio
        .iter()
        .filter_map(|o| match &o.spec {
            IstioSpec::VirtualService(vs) => Some((o, vs)),
            _ => None,
        })
        .collect();
    // Per VirtualService: its subset destinations to one of its own hosts.
    let by_subset: Vec<(String, Vec<&str>)> = services
        .iter()
        .map(|(o, vs)| {
            let dests = vs
                .http
                .iter()
                .flat_map(|r| r.route.iter().filter_map(|d| d.destination.as_ref()))
                .filter(|d| !d.subset.is_empty())
                .flat_map(|d| vs.hosts.iter().filter(|h| **h == d.host).map(|_| d.host.as_str()))
                .collect();
            (format!("{}/{}", o.meta.ns(), o.meta.name), dests)
        })
        .filter(|(_, d): &(String, Vec<&str>)| !d.is_empty())
        .collect();
    for (o, vs) in &services {
        let ns = o.meta.ns();
        for d in route_destinations(vs) {
            match hosts.lookup(ns, &vs.export_to, &d.host) {
                None => {
                    let text = super::not_found("host", &d.host);
                    out.push(Message::new(o, "VirtualService", super::REFERENCED_RESOURCE_NOT_FOUND, text));
                }
                Some(e) => check_ports(o, &d, e, out),
            }
        }
        let mirrors = vs.http.iter().flat_map(|r| {
            r.mirror.iter().cloned().chain(r.mirrors.iter().map(|m| m.destination.clone().unwrap_or_default()))
        });
        for d in mirrors {
            match hosts.lookup(ns, &vs.export_to, &d.host) {
                None => {
                    let text = super::not_found("mirror host", &d.host);
                    out.push(Message::new(o, "VirtualService", super::REFERENCED_RESOURCE_NOT_FOUND, text));
                }
                Some(e) => check_ports(o, &d, e, out),
            }
        }
        if vs.gateways.is_empty() {
            continue;
        }
        let me = format!("{ns}/{}", o.meta.name);
        for d in vs.http.iter().flat_map(|r| r.route.iter().filter_map(|d| d.destination.as_ref())) {
            if !d.subset.is_empty() {
                continue;
            }
            for (other, dests) in &by_subset {
                for _ in dests.iter().filter(|h| **h == d.host) {
                    let text =
                        format!("Subset in virtual service {other} has no effect on ingress gateway {me} requests");
                    out.push(Message::new(o, "VirtualService", INGRESS_ROUTE_RULES_NOT_AFFECTED, text));
                }
            }
        }
    }
}

/// A pod's labels with its node's topology (istiod's
/// `SubsetSelectPodAnalyzer` augments them so subsets may select by
/// locality and host).
fn pod_labels(
    pod: &istiod_config::objects::Pod,
    nodes: &HashMap<&str, &istiod_config::objects::Node>,
) -> BTreeMap<String, String> {
    let mut labels = pod.metadata.labels.clone();
    let node_name = pod.spec.node_name.as_deref().unwrap_or_default();
    if let Some(node) = nodes.get(node_name) {
        let get = |k: &str| node.metadata.labels.get(k).map(String::as_str).unwrap_or_default();
        let (region, zone, subzone) = (
            get("topology.kubernetes.io/region"),
            get("topology.kubernetes.io/zone"),
            get("topology.istio.io/subzone"),
        );
        for (k, v) in [
            // (istiod's locality string and AugmentLabels: a subzone
            // counts only with a zone.)
            ("topology.kubernetes.io/region", region),
            ("topology.kubernetes.io/zone", zone),
            ("topology.istio.io/subzone", if zone.is_empty() { "" } else { subzone }),
        ] {
            if !v.is_empty() {
                labels.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    if !node_name.is_empty() {
        labels.insert("kubernetes.io/hostname".to_owned(), node_name.to_owned());
    }
    labels
}

/// istiod's `destinationrule.SubsetSelectPodAnalyzer`: a DestinationRule
/// whose host no service (visible to it) has, and a subset that selects
/// no pod anywhere.
pub(super) fn subsets_select_pods(objects: &Objects, out: &mut Vec<Message>) {
    let hosts = Hosts::new(objects);
    let nodes: HashMap<&str, &istiod_config::objects::Node> =
        objects.nodes.iter().map(|n| (n.metadata.name.as_str(), n)).collect();
    let pods: Vec<BTreeMap<String, String>> = objects.pods.iter().map(|p| pod_labels(p, &nodes)).collect();
    for o in &objects.istio {
        let IstioSpec::DestinationRule(dr) = &o.spec else { continue };
        let Some(entry) = hosts.lookup(o.meta.ns(), &dr.export_to, &dr.host) else {
            let text =
                format!("The host {} defined in the DestinationRule does not match any services in the mesh.", dr.host);
            out.push(Message::new(o, "DestinationRule", UNKNOWN_DESTINATION_RULE_HOST, text));
            continue;
        };
        for subset in &dr.subsets {
            let mut selector = entry.selector.clone();
            selector.extend(subset.labels.clone());
            if !pods.iter().any(|labels| selector.iter().all(|(k, v)| labels.get(k) == Some(v))) {
                let text = format!(
                    "The Subset {} defined in the DestinationRule does not select any pods. Which may lead to 503 UH (NoHealthyUpstream).",
                    subset.name
                );
                out.push(Message::new(o, "DestinationRule", SUBSET_SELECTS_NO_PODS, text));
            }
        }
    }
}
