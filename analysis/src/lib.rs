//! istiod's in-cluster analysis (`pkg/config/analysis`, with
//! `PILOT_ENABLE_ANALYSIS`): analyzers over the Istio configuration whose
//! messages istiod writes to each object's `status.validationMessages`
//! and logs as `Configuration analysis: ...`. The analyzers here are
//! istiod's `virtualservice.DestinationRuleAnalyzer`,
//! `virtualservice.GatewayAnalyzer`,
//! `virtualservice.ConflictingMeshGatewayHostsAnalyzer`,
//! `serviceentry.ProtocolAddressesAnalyzer`,
//! `destinationrule.CaCertificateAnalyzer`,
//! `telemetry.DefaultSelectorAnalyzer`,
//! `serviceentry.ConflictingServiceEntryProtocolAnalyzer`, and (in
//! `hosts`) `virtualservice.DestinationHostAnalyzer` and
//! `destinationrule.SubsetSelectPodAnalyzer`, and (in `resources`)
//! `gateway.CertificateAnalyzer`, `envoyfilter.EnvoyPatchAnalyzer`,
//! `telemetry.ProviderAnalyzer`, `deprecation.DeprecationAnalyzer`,
//! `sidecar.SelectorAnalyzer`, `telemetry.SelectorAnalyzer` and
//! `auth.AuthorizationPoliciesAnalyzer`, and (in `gateways`)
//! `gateway.IngressGatewayPortAnalyzer`, `gateway.SecretAnalyzer` and
//! `gateway.ConflictingGatewayAnalyzer`, and `k8sgateway.SelectorAnalyzer`
//! and `virtualservice.JWTClaimRouteAnalyzer` (in `resources`); their upstream test cases (`analyzers_test.go`
//! on its testdata files) are ported as data below.

use serde_json::{Value, json};

pub mod gateways;
pub mod hosts;
pub mod resources;

use istiod_config::gateway_api::{GatewayApiObject, GatewayApiSpec};
use istiod_config::istio::networking::{Destination, VirtualService};
use istiod_config::istio::{IstioObject, IstioSpec};

/// The docs of the Istio release whose analyzers these are (istiod's
/// `url.ConfigAnalysis` names its own minor version).
const DOCS: &str = "https://istio.io/v1.28/docs/reference/config/analysis";

/// A message type: its code and level (`msg/messages.yaml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageType {
    /// `IST0101`, ...
    pub code: &'static str,
    /// `Error`, `Warning` or `Info`.
    pub level: &'static str,
}

/// `ReferencedResourceNotFound`.
pub const REFERENCED_RESOURCE_NOT_FOUND: MessageType = MessageType { code: "IST0101", level: "Error" };
/// `ConflictingMeshGatewayVirtualServiceHosts`.
pub const CONFLICTING_MESH_GATEWAY_HOSTS: MessageType = MessageType { code: "IST0109", level: "Error" };
/// `NoServerCertificateVerificationDestinationLevel`.
pub const NO_SERVER_CERT_VERIFICATION_DESTINATION: MessageType = MessageType { code: "IST0128", level: "Warning" };
/// `NoServerCertificateVerificationPortLevel`.
pub const NO_SERVER_CERT_VERIFICATION_PORT: MessageType = MessageType { code: "IST0129", level: "Warning" };
/// `MultipleTelemetriesWithoutWorkloadSelectors`.
pub const MULTIPLE_TELEMETRIES_WITHOUT_SELECTORS: MessageType = MessageType { code: "IST0160", level: "Error" };
/// `ConflictingServiceEntryProtocol`.
pub const CONFLICTING_SERVICE_ENTRY_PROTOCOL: MessageType = MessageType { code: "IST0177", level: "Warning" };
/// `ServiceEntryAddressesRequired`.
pub const SERVICE_ENTRY_ADDRESSES_REQUIRED: MessageType = MessageType { code: "IST0134", level: "Warning" };
/// `VirtualServiceHostNotFoundInGateway`.
pub const VS_HOST_NOT_FOUND_IN_GATEWAY: MessageType = MessageType { code: "IST0132", level: "Warning" };
/// `ReferencedInternalGateway`.
pub const REFERENCED_INTERNAL_GATEWAY: MessageType = MessageType { code: "IST0165", level: "Warning" };

/// One message about one object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Message {
    /// The object's kind (`VirtualService`).
    pub kind: &'static str,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The type's code (ordering follows it).
    pub code: &'static str,
    /// The type's level.
    pub level: &'static str,
    /// The text, as istiod's template renders it.
    pub text: String,
}

impl Message {
    fn new(o: &IstioObject, kind: &'static str, t: MessageType, text: String) -> Self {
        Self { kind, namespace: o.meta.ns().to_owned(), name: o.meta.name.clone(), code: t.code, level: t.level, text }
    }

    /// istiod's `Message.String()`: `Error [IST0101] (VirtualService ns/name) text`.
    pub fn line(&self) -> String {
        format!("{} [{}] ({} {}/{}) {}", self.level, self.code, self.kind, self.namespace, self.name, self.text)
    }

    /// istiod's `AnalysisMessageBase`, as written to the status: the code,
    /// the level in capitals, the documentation.
    pub fn base(&self) -> Value {
        json!({
            "documentationUrl": format!("{DOCS}/{}/", self.code.to_ascii_lowercase()),
            "level": self.level.to_ascii_uppercase(),
            "type": {"code": self.code},
        })
    }
}

/// istiod's `ReferencedResourceNotFound` text: `Referenced %s not found: %q`.
fn not_found(what: &str, value: &str) -> String {
    format!("Referenced {what} not found: {value:?}")
}

/// istiod's `GetResourceNameFromHost`: `name.ns.svc.cluster.local` is
/// (ns, name); any other host is a name in `ns`.
fn resource_name(ns: &str, host: &str) -> (String, String) {
    if let Some(rest) = host.strip_suffix(".svc.cluster.local")
        && let Some((name, namespace)) = rest.rsplit_once('.')
        && !name.is_empty()
        && !namespace.is_empty()
    {
        return (namespace.to_owned(), name.to_owned());
    }
    (ns.to_owned(), host.to_owned())
}

/// The destinations of routes and of mirrors, as istiod's
/// `getRouteDestinations` and `getHTTPMirrorDestinations` list them.
fn destinations(vs: &VirtualService) -> (Vec<&Destination>, Vec<&Destination>) {
    let routes = vs
        .tcp
        .iter()
        .flat_map(|r| r.route.iter().filter_map(|d| d.destination.as_ref()))
        .chain(vs.tls.iter().flat_map(|r| r.route.iter().filter_map(|d| d.destination.as_ref())))
        .chain(vs.http.iter().flat_map(|r| r.route.iter().filter_map(|d| d.destination.as_ref())))
        .collect();
    let mirrors = vs
        .http
        .iter()
        .flat_map(|r| r.mirror.iter().chain(r.mirrors.iter().filter_map(|m| m.destination.as_ref())))
        .collect();
    (routes, mirrors)
}

/// istiod's `virtualservice.DestinationRuleAnalyzer`: a route or mirror
/// naming a subset no DestinationRule of that host defines.
fn destination_rules(istio: &[IstioObject], out: &mut Vec<Message>) {
    let mut subsets = std::collections::BTreeSet::new();
    for o in istio {
        if let IstioSpec::DestinationRule(dr) = &o.spec {
            for s in &dr.subsets {
                subsets.insert((resource_name(o.meta.ns(), &dr.host), s.name.clone()));
            }
        }
    }
    for o in istio {
        let IstioSpec::VirtualService(vs) = &o.spec else { continue };
        let (routes, mirrors) = destinations(vs);
        for (what, list) in [("host+subset in destinationrule", routes), ("mirror+subset in destinationrule", mirrors)]
        {
            for d in list.into_iter().filter(|d| !d.subset.is_empty()) {
                if !subsets.contains(&(resource_name(o.meta.ns(), &d.host), d.subset.clone())) {
                    let text = format!("Referenced {what} not found: {:?}", format!("{}+{}", d.host, d.subset));
                    out.push(Message::new(o, "VirtualService", REFERENCED_RESOURCE_NOT_FOUND, text));
                }
            }
        }
    }
}

/// istio's `host.Name.Matches`: the two hosts overlap (a `*` prefix
/// matches any suffix).
fn hosts_match(a: &str, b: &str) -> bool {
    match (a.strip_prefix('*'), b.strip_prefix('*')) {
        (Some(sa), Some(sb)) => sa.ends_with(sb) || sb.ends_with(sa),
        (Some(sa), None) => b.ends_with(sa),
        (None, Some(sb)) => a.ends_with(sb),
        (None, None) => a == b,
    }
}

/// istiod's `vsHostInGateway`: the Gateway's server hosts (`./h` in its
/// namespace, `*/h` in any, `ns/h` in `ns`) that a VirtualService of
/// `vs_ns` may bind, overlap one of `hosts`.
fn in_gateway(gw: &IstioObject, hosts: &[String], vs_ns: &str) -> bool {
    let IstioSpec::Gateway(g) = &gw.spec else { return false };
    g.servers.iter().flat_map(|s| &s.hosts).any(|h| {
        let host = match h.split_once('/') {
            None => h.as_str(),
            Some((".", host)) if gw.meta.ns() == vs_ns => host,
            Some(("*", host)) => host,
            Some((ns, host)) if ns == vs_ns => host,
            Some(_) => return false,
        };
        hosts.iter().any(|v| hosts_match(host, v))
    })
}

/// istiod's `virtualservice.GatewayAnalyzer`: a reference to a Gateway
/// istiod generates from a Gateway API one (`<name>~istio-autogenerated-k8s-gateway~<listener>`),
/// a gateway reference that names no Gateway (Istio's or the Gateway
/// API's), and hosts the referenced Gateway does not serve.
fn gateways(istio: &[IstioObject], gateway_api: &[GatewayApiObject], out: &mut Vec<Message>) {
    for o in istio {
        let IstioSpec::VirtualService(vs) = &o.spec else { continue };
        let ns = o.meta.ns();
        for gw in vs.gateways.iter().filter(|g| *g != "mesh") {
            let (gns, gname) = gw.split_once('/').unwrap_or((ns, gw));
            // kube.IsInternalGatewayReference.
            if gname.contains("~istio-autogenerated-k8s-gateway~") {
                let text = format!(
                    "Gateway reference in VirtualService {ns}/{} is to an implementation-generated internal Gateway: {gw}.",
                    o.meta.name
                );
                out.push(Message::new(o, "VirtualService", REFERENCED_INTERNAL_GATEWAY, text));
                continue;
            }
            let istio_gw = istio
                .iter()
                .find(|g| matches!(g.spec, IstioSpec::Gateway(_)) && g.meta.ns() == gns && g.meta.name == gname);
            let kube_gw = gateway_api
                .iter()
                .find(|g| matches!(g.spec, GatewayApiSpec::Gateway(_)) && g.meta.ns() == gns && g.meta.name == gname);
            if istio_gw.is_none() && kube_gw.is_none() {
                let text = format!("Referenced gateway not found: {gw:?}");
                out.push(Message::new(o, "VirtualService", REFERENCED_RESOURCE_NOT_FOUND, text));
            }
            let matched = match (istio_gw, kube_gw) {
                (Some(g), _) => in_gateway(g, &vs.hosts, ns),
                (None, Some(GatewayApiObject { spec: GatewayApiSpec::Gateway(g), .. })) => {
                    g.listeners.iter().any(|l| match l.hostname.as_deref() {
                        None | Some("") => true,
                        Some(h) => vs.hosts.iter().any(|v| hosts_match(h, v)),
                    })
                }
                _ => false,
            };
            if !matched {
                let text = format!(
                    "one or more host [{}] defined in VirtualService {ns}/{} not found in Gateway {gns}/{gname}.",
                    vs.hosts.join(" "),
                    o.meta.name
                );
                out.push(Message::new(o, "VirtualService", VS_HOST_NOT_FOUND_IN_GATEWAY, text));
            }
        }
    }
}

/// istiod's `virtualservice.ConflictingMeshGatewayHostsAnalyzer`:
/// VirtualServices bound to the mesh gateway that define the same host
/// where both are seen (a host exported everywhere also meets the same or
/// a matching host exported to some namespaces). Hosts in the key order
/// (istiod walks a map; its tests check objects and codes only).
fn conflicting_mesh_gateway_hosts(istio: &[IstioObject], out: &mut Vec<Message>) {
    use std::collections::{BTreeMap, BTreeSet};
    // (scope, FQDN) -> the VirtualServices defining it.
    let mut hosts: BTreeMap<(String, String), Vec<&IstioObject>> = BTreeMap::new();
    for o in istio {
        let IstioSpec::VirtualService(vs) = &o.spec else { continue };
        if !(vs.gateways.is_empty() || vs.gateways.iter().any(|g| g == "mesh")) {
            continue;
        }
        let ns = o.meta.ns();
        let scopes: BTreeSet<String> = if vs.export_to.is_empty() || vs.export_to.iter().any(|e| e == "*") {
            BTreeSet::from(["*".to_owned()])
        } else {
            vs.export_to.iter().map(|e| if e == "." { ns.to_owned() } else { e.clone() }).collect()
        };
        for scope in scopes {
            for h in &vs.hosts {
                // istiod's ConvertHostToFQDN.
                let fqdn = if h.starts_with('*') || h.contains('.') {
                    h.clone()
                } else {
                    format!("{h}.{ns}.svc.cluster.local")
                };
                hosts.entry((scope.clone(), fqdn)).or_default().push(o);
            }
        }
    }
    let mut reported = BTreeSet::new();
    for ((scope, fqdn), list) in &hosts {
        let mut list = list.clone();
        if scope != "*" {
            for ((other_scope, other), more) in &hosts {
                if other_scope == "*" && hosts_match(fqdn, other) {
                    list.extend(more);
                }
            }
        }
        if list.len() < 2 {
            continue;
        }
        let mut names: Vec<String> = list.iter().map(|o| format!("{}/{}", o.meta.ns(), o.meta.name)).collect();
        names.sort();
        let names = names.join(",");
        for o in list {
            if reported.insert((o.meta.ns(), o.meta.name.as_str())) {
                let text = format!(
                    "The VirtualServices {names} associated with mesh gateway define the same host {scope}/{fqdn} which can lead to undefined behavior. This can be fixed by merging the conflicting VirtualServices into a single resource."
                );
                out.push(Message::new(o, "VirtualService", CONFLICTING_MESH_GATEWAY_HOSTS, text));
            }
        }
    }
}

/// istiod's `serviceentry.ProtocolAddressesAnalyzer`: a ServiceEntry
/// without addresses (in its spec or allocated in its status) has a port
/// of TCP or no protocol, one message per such port, unless the mesh's
/// proxies capture DNS and allocate addresses (`defaultConfig.
/// proxyMetadata` in `mesh`, the mesh configuration as written).
fn service_entry_addresses(istio: &[IstioObject], mesh: &Value, out: &mut Vec<Message>) {
    let meta = &mesh["defaultConfig"]["proxyMetadata"];
    let on = |k: &str| meta[k].as_str() == Some("true");
    if on("ISTIO_META_DNS_CAPTURE") && (on("ISTIO_META_DNS_AUTO_ALLOCATE") || on("PILOT_ENABLE_IP_AUTOALLOCATE")) {
        return;
    }
    for o in istio {
        let IstioSpec::ServiceEntry(se) = &o.spec else { continue };
        if !se.addresses.is_empty() || !se.allocated.is_empty() {
            continue;
        }
        for _ in se.ports.iter().filter(|p| p.protocol.is_empty() || p.protocol.eq_ignore_ascii_case("TCP")) {
            let text = "ServiceEntry addresses are required for this protocol.".to_owned();
            out.push(Message::new(o, "ServiceEntry", SERVICE_ENTRY_ADDRESSES_REQUIRED, text));
        }
    }
}

/// istiod's `destinationrule.CaCertificateAnalyzer`: SIMPLE or MUTUAL TLS
/// (at the destination, or on a port) without `caCertificates`, unless a
/// `credentialName` serves them to a selected workload.
fn ca_certificates(istio: &[IstioObject], out: &mut Vec<Message>) {
    use istiod_config::istio::networking::{ClientTlsMode, ClientTlsSettings};
    for o in istio {
        let IstioSpec::DestinationRule(dr) = &o.spec else { continue };
        let Some(policy) = &dr.traffic_policy else { continue };
        let unverified = |t: &ClientTlsSettings| {
            matches!(t.mode, ClientTlsMode::Simple | ClientTlsMode::Mutual)
                && t.ca_certificates.is_empty()
                // (a credential serves them only to selected workloads)
                && (t.credential_name.is_empty() || dr.workload_selector.is_none())
        };
        let mode = |t: &ClientTlsSettings| if t.mode == ClientTlsMode::Simple { "SIMPLE" } else { "MUTUAL" };
        let (ns, name) = (o.meta.ns(), format!("{}/{}", o.meta.ns(), o.meta.name));
        if let Some(t) = policy.tls.as_ref().filter(|t| unverified(t)) {
            let text = format!(
                "DestinationRule {name} in namespace {ns} has TLS mode set to {} but no caCertificates are set to validate server identity for host: {}",
                mode(t),
                dr.host
            );
            out.push(Message::new(o, "DestinationRule", NO_SERVER_CERT_VERIFICATION_DESTINATION, text));
        }
        for p in &policy.port_level_settings {
            let Some(t) = p.tls.as_ref().filter(|t| unverified(t)) else { continue };
            // The port as Go's proto String() renders a PortSelector.
            let port = p.port.as_ref().map(|p| format!("number:{}", p.number)).unwrap_or_default();
            let text = format!(
                "DestinationRule {name} in namespace {ns} has TLS mode set to {} but no caCertificates are set to validate server identity for host: {} at port {port}",
                mode(t),
                dr.host
            );
            out.push(Message::new(o, "DestinationRule", NO_SERVER_CERT_VERIFICATION_PORT, text));
        }
    }
}

/// istiod's `telemetry.DefaultSelectorAnalyzer`: more than one Telemetry
/// without a `selector` in a namespace.
fn telemetry_default_selectors(istio: &[IstioObject], out: &mut Vec<Message>) {
    let mut by_ns: std::collections::BTreeMap<&str, Vec<&IstioObject>> = Default::default();
    for o in istio {
        let IstioSpec::Ext(istiod_config::istio::IstioKind::Telemetry, spec) = &o.spec else { continue };
        if spec.0.get("selector").is_none_or(Value::is_null) {
            by_ns.entry(o.meta.ns()).or_default().push(o);
        }
    }
    for (ns, list) in by_ns.into_iter().filter(|(_, l)| l.len() > 1) {
        let mut names: Vec<&str> = list.iter().map(|o| o.meta.name.as_str()).collect();
        names.sort_unstable();
        // Go's %v of a []string.
        let text = format!(
            "The Telemetries [{}] in namespace {ns:?} have no workload selector, which can lead to undefined behavior.",
            names.join(" ")
        );
        for o in list {
            out.push(Message::new(o, "Telemetry", MULTIPLE_TELEMETRIES_WITHOUT_SELECTORS, text.clone()));
        }
    }
}

/// istiod's `serviceentry.ConflictingServiceEntryProtocolAnalyzer`:
/// ServiceEntries seen together that give one host and port different
/// protocols (a host exported everywhere meets the namespaces' too).
fn conflicting_service_entry_protocols(istio: &[IstioObject], out: &mut Vec<Message>) {
    use std::collections::{BTreeMap, BTreeSet};
    // (scope, host, port) -> (protocol, entry)
    type Index<'a> = BTreeMap<(String, &'a str, u32), Vec<(&'a str, &'a IstioObject)>>;
    let mut index: Index<'_> = BTreeMap::new();
    for o in istio {
        let IstioSpec::ServiceEntry(se) = &o.spec else { continue };
        let scopes: BTreeSet<String> = if se.export_to.is_empty() || se.export_to.iter().any(|e| e == "*") {
            BTreeSet::from(["*".to_owned()])
        } else {
            se.export_to.iter().map(|e| if e == "." { o.meta.ns().to_owned() } else { e.clone() }).collect()
        };
        for scope in &scopes {
            for h in &se.hosts {
                for p in &se.ports {
                    index.entry((scope.clone(), h, p.number)).or_default().push((&p.protocol, o));
                }
            }
        }
    }
    let mut reported = BTreeSet::new();
    for ((scope, host, port), entries) in &index {
        let mut entries = entries.clone();
        if scope != "*" {
            entries.extend(index.get(&("*".to_owned(), *host, *port)).into_iter().flatten());
        }
        let protocols: BTreeSet<String> = entries.iter().map(|(p, _)| p.to_ascii_uppercase()).collect();
        if protocols.len() < 2 {
            continue;
        }
        let names: BTreeSet<String> = entries.iter().map(|(_, o)| format!("{}/{}", o.meta.ns(), o.meta.name)).collect();
        let text = format!(
            "Multiple ServiceEntries ({}) define the same host {host:?} and port {port} with conflicting protocols ({}).",
            names.into_iter().collect::<Vec<_>>().join(", "),
            protocols.into_iter().collect::<Vec<_>>().join(", ")
        );
        for (_, o) in entries {
            if reported.insert((o.meta.ns(), o.meta.name.as_str())) {
                out.push(Message::new(o, "ServiceEntry", CONFLICTING_SERVICE_ENTRY_PROTOCOL, text.clone()));
            }
        }
    }
}

/// Every analyzer's messages, ordered by object then code, each once
/// (istiod's `SortedDedupedCopy`).
pub fn analyze(objects: &istiod_config::objects::Objects, mesh: &Value) -> Vec<Message> {
    let (istio, gateway_api) = (&objects.istio[..], &objects.gateway_api[..]);
    let mut out = Vec::new();
    hosts::destination_hosts(objects, &mut out);
    hosts::subsets_select_pods(objects, &mut out);
    resources::gateway_certificates(istio, &mut out);
    resources::envoy_filter_patches(istio, &mut out);
    resources::telemetry_providers(istio, &mut out);
    resources::deprecations(istio, &mut out);
    resources::sidecar_selectors(objects, &mut out);
    gateways::ingress_gateway_ports(objects, &mut out);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    gateways::gateway_secrets(objects, now, &mut out);
    gateways::conflicting_gateways(objects, &mut out);
    resources::kubernetes_gateway_selectors(objects, &mut out);
    resources::jwt_claim_routes(objects, &mut out);
    resources::telemetry_selectors(objects, &mut out);
    // istiod's in-cluster analysis reads the built-in mesh config, whose
    // root namespace is istio-system; here the mesh's own.
    let root = mesh["rootNamespace"].as_str().filter(|r| !r.is_empty()).unwrap_or("istio-system");
    resources::authorization_policies(objects, root, &mut out);
    service_entry_addresses(istio, mesh, &mut out);
    ca_certificates(istio, &mut out);
    telemetry_default_selectors(istio, &mut out);
    conflicting_service_entry_protocols(istio, &mut out);
    destination_rules(istio, &mut out);
    gateways(istio, gateway_api, &mut out);
    conflicting_mesh_gateway_hosts(istio, &mut out);
    out.sort_by(|a, b| (&a.namespace, &a.name, a.code).cmp(&(&b.namespace, &b.name, b.code)));
    let mut seen = std::collections::HashSet::new();
    out.retain(|m| seen.insert(m.line()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Typed, not validated: analyzers see what a cluster holds (the
    /// upstream files have Gateways without servers).
    fn parse(yaml: &str) -> Vec<IstioObject> {
        use serde::Deserialize as _;
        serde_yaml_ng::Deserializer::from_str(yaml)
            .map(|d| serde_yaml_ng::Value::deserialize(d).unwrap())
            .filter(|v| !v.is_null())
            .map(|v| istiod_config::istio::read(&v).unwrap())
            .collect()
    }

    fn found(msgs: &[Message]) -> Vec<(&'static str, String)> {
        msgs.iter().map(|m| (m.code, format!("{}/{}", m.namespace, m.name))).collect()
    }

    /// Upstream `analyzers_test.go` `virtualServiceDestinationRules`, on
    /// its `testdata/virtualservice_destinationrules.yaml`.
    #[test]
    fn upstream_virtual_service_destination_rules() {
        let objs = parse(include_str!("virtualservice_destinationrules.yaml"));
        let mut msgs = Vec::new();
        destination_rules(&objs, &mut msgs);
        assert_eq!(
            found(&msgs),
            [
                ("IST0101", "default/reviews-bogussubset".to_owned()),
                ("IST0101", "default/reviews-mirror-bogussubset".to_owned())
            ]
        );
        assert_eq!(msgs[0].text, "Referenced host+subset in destinationrule not found: \"reviews+bogus\"");
        assert_eq!(msgs[1].text, "Referenced mirror+subset in destinationrule not found: \"reviews+bogus\"");
        assert_eq!(
            msgs[0].line(),
            "Error [IST0101] (VirtualService default/reviews-bogussubset) Referenced host+subset in destinationrule not found: \"reviews+bogus\""
        );
        assert_eq!(
            msgs[0].base(),
            json!({"documentationUrl": "https://istio.io/v1.28/docs/reference/config/analysis/ist0101/",
                   "level": "ERROR", "type": {"code": "IST0101"}})
        );
    }

    /// Upstream `analyzers_test.go` `virtualServiceInternalGatewayRef`, on
    /// its `testdata/virtualservice_internal_gateway_ref.yaml`: IST0165
    /// alone (the reference is not also reported as not found).
    #[test]
    fn upstream_virtual_service_internal_gateway_ref() {
        let objs = parse(include_str!("virtualservice_internal_gateway_ref.yaml"));
        let mut msgs = Vec::new();
        gateways(&objs, &[], &mut msgs);
        assert_eq!(found(&msgs), [("IST0165", "default/httpbin".to_owned())]);
        assert_eq!(
            msgs[0].text,
            "Gateway reference in VirtualService default/httpbin is to an implementation-generated internal Gateway: istio-ingress/gateway~istio-autogenerated-k8s-gateway~foo."
        );
    }

    /// Upstream `analyzers_test.go` `virtualServiceGateways`, on its
    /// `testdata/virtualservice_gateways.yaml` (objects without a
    /// namespace are in `default`, as the analyzer's local source puts
    /// them).
    #[test]
    fn upstream_virtual_service_gateways() {
        let objs = parse(include_str!("virtualservice_gateways.yaml"));
        let mut msgs = Vec::new();
        gateways(&objs, &[], &mut msgs);
        let mut got = found(&msgs);
        got.sort();
        assert_eq!(
            got,
            [
                ("IST0101", "default/httpbin-bogus".to_owned()),
                ("IST0132", "default/cross-test".to_owned()),
                ("IST0132", "default/httpbin".to_owned()),
                ("IST0132", "default/httpbin-bogus".to_owned()),
            ]
        );
    }

    /// Upstream `analyzers_test.go` `virtualServiceConflictingMeshGatewayHosts`
    /// and `virtualServiceConflictingMeshGatewayHostsWithExportTo`, on
    /// their testdata files.
    #[test]
    fn upstream_virtual_service_conflicting_mesh_gateway_hosts() {
        let run = |yaml: &str| {
            let mut msgs = Vec::new();
            conflicting_mesh_gateway_hosts(&parse(yaml), &mut msgs);
            let mut got: Vec<String> = msgs
                .iter()
                .inspect(|m| assert_eq!(m.code, "IST0109"))
                .map(|m| format!("{}/{}", m.namespace, m.name))
                .collect();
            got.sort();
            (got, msgs)
        };
        let (got, msgs) = run(include_str!("virtualservice_conflictingmeshgatewayhosts.yaml"));
        let mut want = vec![
            "team3/ratings",
            "team4/ratings",
            "foo/ratings",
            "bar/ratings",
            "foo/productpage",
            "foo/bogus-productpage",
            "team2/ratings",
        ];
        want.sort();
        assert_eq!(got, want);
        let foo = msgs.iter().find(|m| m.namespace == "foo" && m.name == "productpage").unwrap();
        assert!(foo.text.starts_with("The VirtualServices foo/bogus-productpage,foo/productpage associated with mesh gateway define the same host */"), "{}", foo.text);
        let (got, _) = run(include_str!("virtualservice_conflictingmeshgatewayhosts_with_exportto.yaml"));
        let mut want = vec![
            "foo/productpage",
            "bar/productpage",
            "foo/productpage-c",
            "bar/productpage-c",
            "foo/productpage-d",
            "bar/productpage-d",
        ];
        want.sort();
        assert_eq!(got, want);
    }

    /// Upstream `analyzers_test.go` "missing Addresses and Protocol in
    /// Service Entry" (and its ISTIO_META_DNS_AUTO_ALLOCATE variant),
    /// "ServiceEntry Addresses Required Lowercase/Uppercase Protocol" and
    /// "ServiceEntry Addresses Allocated", on their testdata files and
    /// mesh configurations.
    #[test]
    fn upstream_service_entry_protocol_addresses() {
        let run = |yaml: &str, mesh: Value| {
            let mut msgs = Vec::new();
            service_entry_addresses(&parse(yaml), &mesh, &mut msgs);
            let mut got: Vec<String> = msgs
                .iter()
                .inspect(|m| assert_eq!((m.code, m.level, m.kind), ("IST0134", "Warning", "ServiceEntry")))
                .map(|m| format!("{}/{}", m.namespace, m.name))
                .collect();
            got.dedup();
            got
        };
        let missing = include_str!("serviceentry-missing-addresses-protocol.yaml");
        assert_eq!(
            run(missing, Value::Null),
            ["default/service-entry-test-03", "default/service-entry-test-04", "default/service-entry-test-07"]
        );
        let auto = json!({"defaultConfig": {"proxyMetadata": {"ISTIO_META_DNS_CAPTURE": "true", "ISTIO_META_DNS_AUTO_ALLOCATE": "true"}}});
        assert!(run(missing, auto).is_empty());
        let lower = include_str!("serviceentry-address-required-lowercase.yaml");
        assert_eq!(run(lower, Value::Null), ["default/address-missing-lowercase"]);
        let upper = include_str!("serviceentry-address-required-uppercase.yaml");
        assert_eq!(run(upper, Value::Null), ["default/address-missing-uppercase"]);
        let allocated = include_str!("serviceentry-address-allocated.yaml");
        let capture = json!({"defaultConfig": {"proxyMetadata": {"ISTIO_META_DNS_CAPTURE": "true"}}});
        assert!(run(allocated, capture).is_empty(), "addresses in its status");
    }

    /// Upstream `analyzers_test.go`'s eight `destinationrule with ...`
    /// cases of `CaCertificateAnalyzer`, on their testdata files.
    #[test]
    fn upstream_destination_rule_ca_certificates() {
        let cases: [(&str, &str, &[&str]); 8] = [
            ("simple-destination", include_str!("destinationrule-simple-destination.yaml"), &["IST0128"]),
            ("mutual-destination", include_str!("destinationrule-mutual-destination.yaml"), &["IST0128"]),
            ("simple-port", include_str!("destinationrule-simple-port.yaml"), &["IST0129"]),
            (
                "credentialname, no selector",
                include_str!("destinationrule-simple-destination-credentialname.yaml"),
                &["IST0128"],
            ),
            (
                "credentialname, selector",
                include_str!("destinationrule-simple-destination-credentialname-selector.yaml"),
                &[],
            ),
            (
                "port credentialname, no selector",
                include_str!("destinationrule-simple-port-credentialname.yaml"),
                &["IST0129"],
            ),
            (
                "port credentialname, selector",
                include_str!("destinationrule-simple-port-credentialname-selector.yaml"),
                &[],
            ),
            ("mutual-port", include_str!("destinationrule-mutual-port.yaml"), &["IST0129"]),
        ];
        for (name, yaml, want) in cases {
            let mut msgs = Vec::new();
            ca_certificates(&parse(yaml), &mut msgs);
            let got: Vec<&str> = msgs.iter().map(|m| m.code).collect();
            assert_eq!(got, want, "{name}");
        }
        let mut msgs = Vec::new();
        ca_certificates(&parse(include_str!("destinationrule-simple-port.yaml")), &mut msgs);
        assert!(
            msgs[0].text.starts_with(
                "DestinationRule default/db-tls in namespace default has TLS mode set to SIMPLE but no caCertificates"
            ),
            "{}",
            msgs[0].text
        );
    }

    /// Upstream `analyzers_test.go` `telemetryDefaultSelector`, on its
    /// testdata file.
    #[test]
    fn upstream_telemetry_default_selector() {
        let mut msgs = Vec::new();
        telemetry_default_selectors(&parse(include_str!("telemetry-default-selector.yaml")), &mut msgs);
        let mut got = found(&msgs);
        got.sort();
        assert_eq!(got, [("IST0160", "ns2/has-conflict-1".to_owned()), ("IST0160", "ns2/has-conflict-2".to_owned())]);
        assert_eq!(
            msgs[0].text,
            "The Telemetries [has-conflict-1 has-conflict-2] in namespace \"ns2\" have no workload selector, which can lead to undefined behavior."
        );
    }

    /// Upstream `analyzers_test.go`'s three `ServiceEntry ... protocol`
    /// cases of `ConflictingServiceEntryProtocolAnalyzer`, on their
    /// testdata files.
    #[test]
    fn upstream_conflicting_service_entry_protocols() {
        let run = |yaml: &str| {
            let mut msgs = Vec::new();
            conflicting_service_entry_protocols(&parse(yaml), &mut msgs);
            let mut got = found(&msgs);
            got.sort();
            (got, msgs)
        };
        let (got, msgs) = run(include_str!("serviceentry-conflicting-protocol.yaml"));
        assert_eq!(got, [("IST0177", "default/se-http".to_owned()), ("IST0177", "default/se-https".to_owned())]);
        assert_eq!(
            msgs[0].text,
            "Multiple ServiceEntries (default/se-http, default/se-https) define the same host \"example.com\" and port 13835 with conflicting protocols (HTTP, HTTPS)."
        );
        assert!(run(include_str!("serviceentry-no-conflict-protocol.yaml")).0.is_empty());
        assert!(run(include_str!("serviceentry-conflicting-exportto.yaml")).0.is_empty());
    }

    /// Every object of an upstream testdata file: Istio kinds typed, not
    /// validated; Kubernetes kinds (Services, Pods, Nodes, Namespaces) as
    /// the sources read them; the rest (Secrets, QuotaSpecs) left out.
    fn parse_objects(yaml: &str) -> istiod_config::objects::Objects {
        use serde::Deserialize as _;
        let mut objects = istiod_config::objects::Objects::default();
        for v in serde_yaml_ng::Deserializer::from_str(yaml).map(|d| serde_yaml_ng::Value::deserialize(d).unwrap()) {
            if v.is_null() {
                continue;
            }
            let api = v.get("apiVersion").and_then(serde_yaml_ng::Value::as_str).unwrap_or_default();
            if api.contains("istio.io/") {
                if let Ok(o) = istiod_config::istio::read(&v) {
                    objects.istio.push(o);
                }
            } else if let Ok(o) = istiod_config::manifest::parse_value(v) {
                objects.push(o);
            }
        }
        objects
    }

    /// `analyze`'s messages about `codes`, as (code, "ns/name").
    fn analyzed(yaml: &str, codes: &[&str]) -> Vec<(&'static str, String)> {
        let msgs = analyze(&parse_objects(yaml), &Value::Null);
        let mut out: Vec<_> = found(&msgs).into_iter().filter(|(c, _)| codes.contains(c)).collect();
        out.sort();
        out
    }

    fn expect(list: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        let mut out: Vec<_> = list.iter().map(|(c, o)| (*c, o.to_string())).collect();
        out.sort();
        out
    }

    /// Upstream `virtualServiceDestinationHosts`, on
    /// `testdata/virtualservice_destinationhosts.yaml`: hosts no service
    /// has (an empty one too), a port the service lacks, a port not given
    /// where the service has two, a Service exported elsewhere, a
    /// VirtualService exported where the service is not.
    #[test]
    fn upstream_virtual_service_destination_hosts() {
        let yaml = include_str!("virtualservice_destinationhosts.yaml");
        let msgs = analyze(&parse_objects(yaml), &Value::Null);
        // (The DestinationRuleAnalyzer's messages about subsets left out.)
        let ours: Vec<&Message> = msgs
            .iter()
            .filter(|m| matches!(m.code, "IST0101" | "IST0112") && !m.text.contains("+subset in destinationrule"))
            .collect();
        let mut got: Vec<_> = ours.iter().map(|m| (m.code, format!("{}/{}", m.namespace, m.name))).collect();
        got.sort();
        assert_eq!(
            got,
            expect(&[
                ("IST0101", "default/reviews-bogushost"),
                ("IST0101", "default/reviews-bogushost"),
                ("IST0101", "default/reviews-bookinfo-other"),
                ("IST0101", "default/reviews-mirror-bogushost"),
                ("IST0101", "default/reviews-bogusport"),
                ("IST0112", "default/reviews-2port-missing"),
                ("IST0101", "istio-system/cross-namespace-details"),
                ("IST0101", "hello/hello-export-to-bogus"),
            ])
        );
        let text = |name: &str, code: &str| {
            ours.iter().filter(|m| m.name == name && m.code == code).map(|m| m.text.as_str()).collect::<Vec<_>>()
        };
        assert_eq!(
            text("reviews-bogushost", "IST0101"),
            ["Referenced host not found: \"\"", "Referenced host not found: \"reviews-bogus\""]
        );
        assert_eq!(
            text("reviews-mirror-bogushost", "IST0101"),
            ["Referenced mirror host not found: \"reviews-bogus\""]
        );
        assert_eq!(text("reviews-bogusport", "IST0101"), ["Referenced host:port not found: \"reviews:999\""]);
        assert_eq!(
            text("reviews-2port-missing", "IST0112"),
            [
                "This VirtualService routes to a service \"reviews-2port\" that exposes multiple ports [80 443]. Specifying a port in the destination is required to disambiguate."
            ]
        );
    }

    /// Upstream `Route Rule no effect on Ingress`, on
    /// `testdata/virtualservice_route_rule_no_effects_ingress.yaml`.
    #[test]
    fn upstream_route_rule_no_effect_on_ingress() {
        let yaml = include_str!("virtualservice_route_rule_no_effects_ingress.yaml");
        let msgs = analyze(&parse_objects(yaml), &Value::Null);
        let ingress: Vec<&Message> = msgs.iter().filter(|m| m.code == "IST0140").collect();
        assert_eq!(ingress.len(), 1, "{msgs:?}");
        assert_eq!(
            (ingress[0].namespace.as_str(), ingress[0].name.as_str()),
            ("default", "testing-service-01-test-01")
        );
        assert_eq!(
            ingress[0].text,
            "Subset in virtual service default/ratings-01 has no effect on ingress gateway default/testing-service-01-test-01 requests"
        );
    }

    /// Upstream `DestinationRuleWithFakeHost`,
    /// `DestinationRuleSubsetsNotSelectPods` and
    /// `DestinationRuleSubsetsWithTopologyLabels` (subsets selecting by the
    /// node's topology labels select the pod on that node), on their
    /// testdata files.
    #[test]
    fn upstream_destination_rule_hosts_and_subsets() {
        let codes = ["IST0173", "IST0174"];
        let fake = include_str!("destinationrule-with-fake-host.yaml");
        assert_eq!(analyzed(fake, &codes), expect(&[("IST0174", "default/fake-host")]));
        let msgs = analyze(&parse_objects(fake), &Value::Null);
        assert_eq!(
            msgs.iter().find(|m| m.code == "IST0174").unwrap().text,
            "The host fake-svc.default.svc.cluster.local defined in the DestinationRule does not match any services in the mesh."
        );
        let subsets = include_str!("destinationrule-subsets-not-select-pods.yaml");
        assert_eq!(analyzed(subsets, &codes), expect(&[("IST0173", "default/subsets-not-select-pods")]));
        let msgs = analyze(&parse_objects(subsets), &Value::Null);
        assert_eq!(
            msgs.iter().find(|m| m.code == "IST0173").unwrap().text,
            "The Subset fake defined in the DestinationRule does not select any pods. Which may lead to 503 UH (NoHealthyUpstream)."
        );
        assert_eq!(analyzed(include_str!("destinationrule-subsets-with-topology-labels.yaml"), &codes), []);
    }

    /// Upstream `certificate duplication in Gateway`, on
    /// `testdata/gateway-duplicate-certificate.yaml`.
    #[test]
    fn upstream_gateway_duplicate_certificates() {
        let got = analyzed(include_str!("gateway-duplicate-certificate.yaml"), &["IST0138"]);
        assert_eq!(
            got,
            expect(&[
                ("IST0138", "istio-system/gateway-01-test-01"),
                ("IST0138", "istio-system/gateway-02-test-01"),
                ("IST0138", "istio-system/gateway-01-test-02"),
                ("IST0138", "default/gateway-01-test-03"),
            ])
        );
        let msgs = analyze(&parse_objects(include_str!("gateway-duplicate-certificate.yaml")), &Value::Null);
        let m = msgs.iter().find(|m| m.name == "gateway-01-test-01").unwrap();
        assert_eq!(
            m.text,
            "Duplicate certificate in multiple gateways [istio-system/gateway-01-test-01 istio-system/gateway-02-test-01] may cause 404s if clients re-use HTTP2 connections."
        );
    }

    /// Upstream's EnvoyFilter cases (`EnvoyFilterUsesRelativeOperation`,
    /// `...FilterChainMatch`, `...UsesAbsoluteOperation`,
    /// `...UsesReplaceOperation`, `...UsesAddOperation`,
    /// `...UsesRemoveOperation`), each on its testdata file.
    #[test]
    fn upstream_envoy_filter_patches() {
        let codes = ["IST0151", "IST0152", "IST0153", "IST0154", "IST0155"];
        let cases: [(&str, &[(&str, &str)]); 6] = [
            (
                include_str!("relative-envoy-filter-operation.yaml"),
                &[
                    ("IST0151", "bookinfo/test-relative-1"),
                    ("IST0151", "bookinfo/test-relative-2"),
                    ("IST0151", "bookinfo/test-relative-3"),
                    ("IST0155", "bookinfo/test-relative-3"),
                ],
            ),
            (include_str!("envoy-filter-filterchain.yaml"), &[]),
            (include_str!("absolute-envoy-filter-operation.yaml"), &[]),
            (
                include_str!("envoy-filter-replace-operation.yaml"),
                &[
                    ("IST0152", "bookinfo/test-replace-1"),
                    ("IST0155", "bookinfo/test-replace-3"),
                    ("IST0151", "bookinfo/test-replace-3"),
                ],
            ),
            (
                include_str!("envoy-filter-add-operation.yaml"),
                &[("IST0153", "bookinfo/test-auth-2"), ("IST0153", "bookinfo/test-auth-3")],
            ),
            (
                include_str!("envoy-filter-remove-operation.yaml"),
                &[
                    ("IST0151", "bookinfo/test-remove-1"),
                    ("IST0154", "bookinfo/test-remove-2"),
                    ("IST0154", "bookinfo/test-remove-3"),
                    ("IST0151", "bookinfo/test-remove-5"),
                ],
            ),
        ];
        for (i, (yaml, want)) in cases.into_iter().enumerate() {
            assert_eq!(analyzed(yaml, &codes), expect(want), "case {i}");
        }
    }

    /// Upstream `Analyze invalid telemetry` (both files) and `deprecation`.
    #[test]
    fn upstream_telemetry_providers_and_deprecations() {
        let msgs = analyze(&parse_objects(include_str!("telemetry-invalid-provider.yaml")), &Value::Null);
        let invalid: Vec<&Message> = msgs.iter().filter(|m| m.code == "IST0157").collect();
        assert_eq!(invalid.len(), 1, "{msgs:?}");
        assert_eq!((invalid[0].namespace.as_str(), invalid[0].name.as_str()), ("istio-system", "mesh-default"));
        assert_eq!(
            invalid[0].text,
            "The Telemetry mesh-default in namespace \"istio-system\" with empty providers will be ignored."
        );
        assert_eq!(analyzed(include_str!("telemetry-disable-provider.yaml"), &["IST0157"]), []);
        assert_eq!(
            analyzed(include_str!("deprecation.yaml"), &["IST0002"]),
            expect(&[("IST0002", "foo/productpage"), ("IST0002", "default/no-selector")])
        );
    }

    /// Upstream `sidecarDefaultSelector` and `sidecarSelector`, on their
    /// testdata files.
    #[test]
    fn upstream_sidecar_selectors() {
        let codes = ["IST0101", "IST0110", "IST0111", "IST0167"];
        assert_eq!(
            analyzed(include_str!("sidecar-default-selector.yaml"), &codes),
            expect(&[
                ("IST0111", "ns2/has-conflict-2"),
                ("IST0111", "ns2/has-conflict-1"),
                ("IST0167", "ns-ambient/namespace-scoped"),
                ("IST0167", "ns-ambient/pod-scoped"),
            ])
        );
        let yaml = include_str!("sidecar-selector.yaml");
        assert_eq!(
            analyzed(yaml, &codes),
            expect(&[
                ("IST0101", "default/maps-to-nonexistent"),
                ("IST0101", "other/maps-to-different-ns"),
                ("IST0110", "default/dupe-1"),
                ("IST0110", "default/dupe-2"),
                ("IST0110", "default/overlap-1"),
                ("IST0110", "default/overlap-2"),
            ])
        );
        let msgs = analyze(&parse_objects(yaml), &Value::Null);
        let dupe = msgs.iter().find(|m| m.name == "dupe-1").unwrap();
        assert_eq!(
            dupe.text,
            "The Sidecars [dupe-1 dupe-2] in namespace \"default\" select the same workload pod \"reviews\", which can lead to undefined behavior."
        );
        let missing = msgs.iter().find(|m| m.name == "maps-to-nonexistent").unwrap();
        assert_eq!(missing.text, "Referenced selector not found: \"app=bogus\"");
    }

    /// Upstream `telemetrySelector` and `authorizationpolicies`, on their
    /// testdata files.
    #[test]
    fn upstream_telemetry_selectors_and_authorization_policies() {
        let yaml = include_str!("telemetry-selector.yaml");
        assert_eq!(
            analyzed(yaml, &["IST0101", "IST0159"]),
            expect(&[
                ("IST0101", "default/maps-to-nonexistent"),
                ("IST0101", "other/maps-to-different-ns"),
                ("IST0159", "default/dupe-1"),
                ("IST0159", "default/dupe-2"),
                ("IST0159", "default/overlap-1"),
                ("IST0159", "default/overlap-2"),
            ])
        );
        let yaml = include_str!("authorizationpolicies.yaml");
        assert_eq!(
            analyzed(yaml, &["IST0101", "IST0127"]),
            expect(&[
                ("IST0127", "istio-system/meshwide-httpbin-v1"),
                ("IST0127", "httpbin-empty/httpbin-empty-namespace-wide"),
                ("IST0127", "httpbin/httpbin-nopods"),
                ("IST0101", "httpbin/httpbin-bogus-ns"),
                ("IST0101", "httpbin/httpbin-bogus-ns"),
                ("IST0101", "httpbin/httpbin-bogus-not-ns"),
                ("IST0101", "httpbin/httpbin-bogus-not-ns"),
                ("IST0127", "test-ambient/no-workload"),
            ])
        );
        let msgs = analyze(&parse_objects(yaml), &Value::Null);
        let text = |name: &str| msgs.iter().filter(|m| m.name == name).map(|m| m.text.as_str()).collect::<Vec<_>>();
        assert_eq!(
            text("httpbin-nopods"),
            ["No matching workloads for this resource with the following labels: app=bogus-label,version=v1"]
        );
        assert_eq!(
            text("httpbin-empty-namespace-wide"),
            ["No matching workloads for this resource with the following labels: "]
        );
    }

    /// What upstream's test harness adds to every case
    /// (`AddDefaultResources`, local/defaults.go): the default ingress
    /// gateway's Service and a pod of it.
    const DEFAULT_INGRESS: &str = "---\napiVersion: v1\nkind: Pod\nmetadata: {labels: {istio: ingressgateway}, name: istio-ingressgateway-dummypod, namespace: istio-system}\n\
        spec: {containers: [{name: istio-proxy}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: istio-ingressgateway, namespace: istio-system}\n\
        spec:\n  selector: {istio: ingressgateway}\n  ports:\n\
        \x20 - {name: http2, nodePort: 31380, port: 80, protocol: TCP, targetPort: 80}\n\
        \x20 - {name: https, nodePort: 31390, port: 443, protocol: TCP, targetPort: 443}\n\
        \x20 - {name: tcp, nodePort: 31400, port: 31400, protocol: TCP, targetPort: 31400}\n\
        \x20 - {name: tls, nodePort: 31447, port: 15443, protocol: TCP, targetPort: 15443}\n";

    /// `analyzed` with the harness's default resources.
    fn analyzed_with_defaults(yaml: &str, codes: &[&str]) -> Vec<(&'static str, String)> {
        analyzed(&format!("{yaml}\n{DEFAULT_INGRESS}"), codes)
    }

    /// Upstream's `gatewayNoWorkload`, `gatewayBadPort`, `gatewayCorrectPort`,
    /// `gatewayCustomIngressGateway*` and `gatewayServiceMatchPod` cases
    /// (`IngressGatewayPortAnalyzer`), on their testdata files.
    #[test]
    fn upstream_ingress_gateway_ports() {
        let codes = ["IST0101", "IST0162"];
        let cases: [(&str, &[(&str, &str)]); 8] = [
            (include_str!("gateway-no-workload.yaml"), &[("IST0101", "default/httpbin-gateway")]),
            (include_str!("gateway-no-port.yaml"), &[("IST0162", "default/httpbin-gateway")]),
            (include_str!("gateway-correct-port.yaml"), &[]),
            (include_str!("gateway-custom-ingressgateway.yaml"), &[]),
            (include_str!("gateway-custom-ingressgateway-badport.yaml"), &[("IST0162", "default/httpbin-gateway")]),
            (
                include_str!("gateway-custom-ingressgateway-badport-notarget.yaml"),
                &[("IST0162", "default/httpbin-gateway")],
            ),
            (include_str!("gateway-custom-ingressgateway-translation.yaml"), &[]),
            (
                include_str!("gateway-custom-ingressgateway-svcselector.yaml"),
                &[("IST0162", "default/httpbin8002-gateway")],
            ),
        ];
        for (i, (yaml, want)) in cases.into_iter().enumerate() {
            let msgs = analyze(&parse_objects(&format!("{yaml}\n{DEFAULT_INGRESS}")), &Value::Null);
            // (Only the port analyzer's: the others' IST0101 of the same
            // selector are the same message, deduplicated.)
            let got: Vec<_> = found(&msgs).into_iter().filter(|(c, _)| codes.contains(c)).collect();
            assert_eq!(got, expect(want), "case {i}: {msgs:#?}");
        }
        let msgs = analyze(
            &parse_objects(&format!("{}\n{DEFAULT_INGRESS}", include_str!("gateway-no-port.yaml"))),
            &Value::Null,
        );
        let m = msgs.iter().find(|m| m.code == "IST0162").unwrap();
        assert!(m.text.starts_with("The gateway is listening on a target port (port 8004) that is not defined in the Service associated with its workload instances (Pod selector istio=ingressgateway)."), "{}", m.text);
    }

    /// Upstream's `gatewaySecret` and `gatewaySecretValidations` cases
    /// (`SecretAnalyzer`): credentials missing from the gateway workload's
    /// namespace, and Secrets without a valid certificate (missing keys,
    /// not a certificate, expired).
    #[test]
    fn upstream_gateway_secrets() {
        assert_eq!(
            analyzed_with_defaults(include_str!("gateway-secrets.yaml"), &["IST0101", "IST0161"]),
            expect(&[
                ("IST0101", "default/defaultgateway-bogusCredentialName"),
                ("IST0101", "default/customgateway-wrongnamespace"),
                ("IST0101", "default/bogusgateway"),
            ])
        );
        let yaml = format!("{}\n{DEFAULT_INGRESS}", include_str!("gateway-secrets-validation.yaml"));
        let msgs = analyze(&parse_objects(&yaml), &Value::Null);
        assert!(msgs.iter().filter(|m| m.code == "IST0161").all(|m| m.kind == "Gateway"), "on the Gateway: {msgs:#?}");
        let mut invalid: Vec<&str> = msgs.iter().filter(|m| m.code == "IST0161").map(|m| m.text.as_str()).collect();
        invalid.sort_unstable();
        let text = |gw: &str| {
            format!(
                "The credential referenced by the Gateway {gw} in namespace istio-system is invalid, which can cause the traffic not to work as expected."
            )
        };
        let mut want: Vec<String> = [
            "defaultgateway-invalid-keys",
            "defaultgateway-missing-keys",
            "defaultgateway-invalid-cert",
            "defaultgateway-expired",
        ]
        .map(text)
        .to_vec();
        want.sort_unstable();
        assert_eq!(invalid, want);
    }

    /// The certificate validity check of `ValidateCertificate`: a time
    /// before the certificate's notBefore or after its notAfter fails.
    #[test]
    fn der_times_read_as_x509_times() {
        assert_eq!(gateways::der_time_for_test(0x17, b"700101000000Z"), Some(0));
        assert_eq!(gateways::der_time_for_test(0x18, b"20260101000000Z"), Some(1_767_225_600));
        assert_eq!(gateways::der_time_for_test(0x17, b"491231235959Z"), Some(2_524_607_999));
    }

    /// Upstream's `conflicting gateways detect`, `gateways with different
    /// port are non-conflicting`, `conflicting gateways with multiple port
    /// declarations` and `conflicting gateways detect by sub selector`.
    #[test]
    fn upstream_conflicting_gateways() {
        let cases: [(&str, &[(&str, &str)]); 4] = [
            (include_str!("conflicting-gateways.yaml"), &[("IST0145", "default/alpha"), ("IST0145", "default/beta")]),
            (include_str!("gateway-different-port.yaml"), &[]),
            (
                include_str!("conflicting-gateways-multiple-ports.yaml"),
                &[("IST0145", "default/alpha"), ("IST0145", "default/beta")],
            ),
            (
                include_str!("conflicting-gateways-subSelector.yaml"),
                &[("IST0145", "default/alpha"), ("IST0145", "default/beta")],
            ),
        ];
        for (i, (yaml, want)) in cases.into_iter().enumerate() {
            assert_eq!(analyzed_with_defaults(yaml, &["IST0145"]), expect(want), "case {i}");
        }
    }

    /// Upstream's `KubernetesGatewaySelector` and `virtualServiceJWTClaimRoute`.
    #[test]
    fn upstream_kubernetes_gateway_selectors_and_jwt_claim_routes() {
        assert_eq!(
            analyzed_with_defaults(include_str!("k8sgateway-selector.yaml"), &["IST0166"]),
            expect(&[
                ("IST0166", "default/ra-ineffective"),
                ("IST0166", "default/ap-ineffective"),
                ("IST0166", "default/wasmplugin-ineffective"),
                ("IST0166", "default/telemetry-ineffective"),
            ])
        );
        let yaml = format!("{}\n{DEFAULT_INGRESS}", include_str!("virtualservice_jwtclaimroute.yaml"));
        let msgs = analyze(&parse_objects(&yaml), &Value::Null);
        let jwt: Vec<&Message> = msgs.iter().filter(|m| m.code == "IST0149").collect();
        assert_eq!(jwt.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["foo"], "{msgs:#?}");
        assert!(
            jwt[0].text.starts_with("The virtual service uses the JWT claim based routing (key: @request.auth.claims"),
            "{}",
            jwt[0].text
        );
    }
}
