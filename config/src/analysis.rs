//! istiod's in-cluster analysis (`pkg/config/analysis`, with
//! `PILOT_ENABLE_ANALYSIS`): analyzers over the Istio configuration whose
//! messages istiod writes to each object's `status.validationMessages`
//! and logs as `Configuration analysis: ...`. The analyzers here are
//! istiod's `virtualservice.DestinationRuleAnalyzer` and
//! `virtualservice.GatewayAnalyzer`; their upstream test cases are ported
//! as data below.

use serde_json::{Value, json};

use crate::gateway_api::{GatewayApiObject, GatewayApiSpec};
use crate::istio::networking::{Destination, VirtualService};
use crate::istio::{IstioObject, IstioSpec};

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
/// `VirtualServiceHostNotFoundInGateway`.
pub const VS_HOST_NOT_FOUND_IN_GATEWAY: MessageType = MessageType { code: "IST0132", level: "Warning" };

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

/// istiod's `virtualservice.GatewayAnalyzer`: a gateway reference that
/// names no Gateway (Istio's or the Gateway API's), and hosts the
/// referenced Gateway does not serve.
fn gateways(istio: &[IstioObject], gateway_api: &[GatewayApiObject], out: &mut Vec<Message>) {
    for o in istio {
        let IstioSpec::VirtualService(vs) = &o.spec else { continue };
        let ns = o.meta.ns();
        for gw in vs.gateways.iter().filter(|g| *g != "mesh") {
            let (gns, gname) = gw.split_once('/').unwrap_or((ns, gw));
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

/// Every analyzer's messages, ordered by object then code.
pub fn analyze(istio: &[IstioObject], gateway_api: &[GatewayApiObject]) -> Vec<Message> {
    let mut out = Vec::new();
    destination_rules(istio, &mut out);
    gateways(istio, gateway_api, &mut out);
    out.sort_by(|a, b| (&a.namespace, &a.name, a.code).cmp(&(&b.namespace, &b.name, b.code)));
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
            .map(|v| crate::istio::read(&v).unwrap())
            .collect()
    }

    fn found(msgs: &[Message]) -> Vec<(&'static str, String)> {
        msgs.iter().map(|m| (m.code, format!("{}/{}", m.namespace, m.name))).collect()
    }

    /// Upstream `analyzers_test.go` `virtualServiceDestinationRules`, on
    /// its `testdata/virtualservice_destinationrules.yaml`.
    #[test]
    fn upstream_virtual_service_destination_rules() {
        let objs = parse(include_str!("analysis/virtualservice_destinationrules.yaml"));
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

    /// Upstream `analyzers_test.go` `virtualServiceGateways`, on its
    /// `testdata/virtualservice_gateways.yaml` (objects without a
    /// namespace are in `default`, as the analyzer's local source puts
    /// them).
    #[test]
    fn upstream_virtual_service_gateways() {
        let objs = parse(include_str!("analysis/virtualservice_gateways.yaml"));
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
}
