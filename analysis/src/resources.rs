//! Analyzers that read one kind of Istio resource (and, for Sidecars, the
//! pods and namespaces they select): istiod's
//! `gateway.CertificateAnalyzer`, `envoyfilter.EnvoyPatchAnalyzer`,
//! `telemetry.ProviderAnalyzer`, `deprecation.DeprecationAnalyzer`,
//! `sidecar.SelectorAnalyzer`, `telemetry.SelectorAnalyzer` and
//! `auth.AuthorizationPoliciesAnalyzer`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Message, MessageType};
use istiod_config::istio::networking::ServerTlsSettings;
use istiod_config::istio::{IstioKind, IstioObject, IstioSpec};
use istiod_config::objects::Objects;

/// `Deprecated`.
pub const DEPRECATED: MessageType = MessageType { code: "IST0002", level: "Warning" };
/// `ConflictingSidecarWorkloadSelectors`.
pub const CONFLICTING_SIDECAR_SELECTORS: MessageType = MessageType { code: "IST0110", level: "Error" };
/// `MultipleSidecarsWithoutWorkloadSelectors`.
pub const MULTIPLE_SIDECARS_WITHOUT_SELECTORS: MessageType = MessageType { code: "IST0111", level: "Error" };
/// `GatewayDuplicateCertificate`.
pub const GATEWAY_DUPLICATE_CERTIFICATE: MessageType = MessageType { code: "IST0138", level: "Warning" };
/// `EnvoyFilterUsesRelativeOperation`.
pub const ENVOY_FILTER_RELATIVE: MessageType = MessageType { code: "IST0151", level: "Warning" };
/// `EnvoyFilterUsesReplaceOperationIncorrectly`.
pub const ENVOY_FILTER_REPLACE: MessageType = MessageType { code: "IST0152", level: "Error" };
/// `EnvoyFilterUsesAddOperationIncorrectly`.
pub const ENVOY_FILTER_ADD: MessageType = MessageType { code: "IST0153", level: "Error" };
/// `EnvoyFilterUsesRemoveOperationIncorrectly`.
pub const ENVOY_FILTER_REMOVE: MessageType = MessageType { code: "IST0154", level: "Error" };
/// `EnvoyFilterUsesRelativeOperationWithProxyVersion`.
pub const ENVOY_FILTER_RELATIVE_WITH_PROXY_VERSION: MessageType = MessageType { code: "IST0155", level: "Warning" };
/// `InvalidTelemetryProvider`.
pub const INVALID_TELEMETRY_PROVIDER: MessageType = MessageType { code: "IST0157", level: "Warning" };
/// `IneffectivePolicy`.
pub const INEFFECTIVE_POLICY: MessageType = MessageType { code: "IST0167", level: "Warning" };

/// istiod's `haveSameCertificate`: one Secret, or the same certificate
/// and key files.
fn same_certificate(a: &ServerTlsSettings, b: &ServerTlsSettings) -> bool {
    if !a.credential_name.is_empty() && !b.credential_name.is_empty() {
        return a.credential_name == b.credential_name;
    }
    a.credential_name.is_empty()
        && b.credential_name.is_empty()
        && !a.server_certificate.is_empty()
        && a.server_certificate == b.server_certificate
        && !a.private_key.is_empty()
        && a.private_key == b.private_key
}

/// istiod's `gateway.CertificateAnalyzer`: two Gateways whose servers use
/// one certificate, the other's selector covering this one's (any Gateway
/// when this one selects nothing).
pub(super) fn gateway_certificates(istio: &[IstioObject], out: &mut Vec<Message>) {
    let gateways: Vec<(&IstioObject, &istiod_config::istio::networking::Gateway)> = istio
        .iter()
        .filter_map(|o| match &o.spec {
            IstioSpec::Gateway(g) => Some((o, g)),
            _ => None,
        })
        .collect();
    for (o, g) in &gateways {
        let me = format!("{}/{}", o.meta.ns(), o.meta.name);
        for (other, og) in &gateways {
            if std::ptr::eq(*o, *other) || !g.selector.iter().all(|(k, v)| og.selector.get(k) == Some(v)) {
                continue;
            }
            let them = format!("{}/{}", other.meta.ns(), other.meta.name);
            for a in g.servers.iter().filter_map(|s| s.tls.as_ref()) {
                for b in og.servers.iter().filter_map(|s| s.tls.as_ref()) {
                    if same_certificate(a, b) {
                        let text = format!(
                            "Duplicate certificate in multiple gateways [{me} {them}] may cause 404s if clients re-use HTTP2 connections."
                        );
                        out.push(Message::new(o, "Gateway", GATEWAY_DUPLICATE_CERTIFICATE, text));
                    }
                }
            }
        }
    }
}

/// istiod's `envoyfilter.EnvoyPatchAnalyzer`, over the EnvoyFilters in
/// (namespace, name) order: operations the applyTo ignores, and relative
/// operations without a priority (with a proxyVersion on an earlier patch
/// of the same name, the upgrade warning).
pub(super) fn envoy_filter_patches(istio: &[IstioObject], out: &mut Vec<Message>) {
    let mut filters: Vec<(&IstioObject, &Value)> = istio
        .iter()
        .filter_map(|o| match &o.spec {
            IstioSpec::Ext(IstioKind::EnvoyFilter, spec) => Some((o, &spec.0)),
            _ => None,
        })
        .collect();
    filters.sort_by(|a, b| (a.0.meta.ns(), &a.0.meta.name).cmp(&(b.0.meta.ns(), &b.0.meta.name)));
    // The names of the patches that carry a proxyVersion, so far.
    let mut versioned: Vec<String> = Vec::new();
    for (o, spec) in filters {
        let priority = spec["priority"].as_i64().unwrap_or(0);
        for p in spec["configPatches"].as_array().into_iter().flatten() {
            let patch = &p["patch"];
            if patch.is_null() {
                break;
            }
            // The patched value's `name` (as protobuf's text form of a
            // Value, as upstream compares it), else the filter chain's
            // filter name.
            let name = match patch["value"].as_object().filter(|m| !m.is_empty()) {
                Some(value) => match value.get("name") {
                    Some(Value::String(s)) => format!("string_value:{s:?}"),
                    Some(v) => format!("{v}"),
                    None => {
                        p["match"]["listener"]["filterChain"]["filter"]["name"].as_str().unwrap_or_default().to_owned()
                    }
                },
                None => String::new(),
            };
            let apply_to = p["applyTo"].as_str().unwrap_or_default();
            let on_routes = matches!(apply_to, "ROUTE_CONFIGURATION" | "HTTP_ROUTE");
            let relative = |out: &mut Vec<Message>| {
                if priority == 0 {
                    let t = if versioned.contains(&name) {
                        ENVOY_FILTER_RELATIVE_WITH_PROXY_VERSION
                    } else {
                        ENVOY_FILTER_RELATIVE
                    };
                    out.push(Message::new(o, "EnvoyFilter", t, envoy_filter_text(t).to_owned()));
                }
            };
            match patch["operation"].as_str().unwrap_or_default() {
                "ADD" if on_routes => out.push(Message::new(
                    o,
                    "EnvoyFilter",
                    ENVOY_FILTER_ADD,
                    envoy_filter_text(ENVOY_FILTER_ADD).to_owned(),
                )),
                "REMOVE" if on_routes => out.push(Message::new(
                    o,
                    "EnvoyFilter",
                    ENVOY_FILTER_REMOVE,
                    envoy_filter_text(ENVOY_FILTER_REMOVE).to_owned(),
                )),
                "REPLACE" if !matches!(apply_to, "NETWORK_FILTER" | "HTTP_FILTER" | "VIRTUAL_HOST") => {
                    out.push(Message::new(
                        o,
                        "EnvoyFilter",
                        ENVOY_FILTER_REPLACE,
                        envoy_filter_text(ENVOY_FILTER_REPLACE).to_owned(),
                    ))
                }
                "REMOVE" | "REPLACE" | "INSERT_BEFORE" | "INSERT_AFTER" => relative(out),
                _ => {}
            }
            if p["match"]["proxy"]["proxyVersion"].as_str().is_some_and(|v| !v.is_empty()) {
                versioned.push(name);
            }
        }
    }
}

/// The EnvoyFilter messages' texts (their templates take no arguments;
/// the typos are istiod's).
fn envoy_filter_text(t: MessageType) -> &'static str {
    match t.code {
        "IST0151" => {
            "This EnvoyFilter does not have a priority and has a relative patch operation set which can cause the EnvoyFilter not to be applied. Using the INSERT_FIRST of ADD option or setting the priority may help in ensuring the EnvoyFilter is applied correctly."
        }
        "IST0152" => "The REPLACE operation is only valid for HTTP_FILTER and NETWORK_FILTER.",
        "IST0153" => "The ADD operation will be ignored when applyTo is set to ROUTE_CONFIGURATION, or HTTP_ROUTE.",
        "IST0154" => "The REMOVE operation will be ignored when applyTo is set to ROUTE_CONFIGURATION, or HTTP_ROUTE.",
        _ => {
            "This EnvoyFilter does not have a priority and has a relative patch operation (NSTERT_BEFORE/AFTER, REPLACE, MERGE, DELETE) and proxyVersion set which can cause the EnvoyFilter not to be applied during an upgrade. Using the INSERT_FIRST or ADD option or setting the priority may help in ensuring the EnvoyFilter is applied correctly."
        }
    }
}

/// istiod's `telemetry.ProviderAnalyzer`: an access logging entry, not
/// disabled, that names no provider. istiod runs it when the mesh has no
/// default access log provider, and its in-cluster analysis always reads
/// the built-in mesh config, which has none: so always, here too.
pub(super) fn telemetry_providers(istio: &[IstioObject], out: &mut Vec<Message>) {
    for o in istio {
        let IstioSpec::Ext(IstioKind::Telemetry, spec) = &o.spec else { continue };
        for entry in spec.0["accessLogging"].as_array().into_iter().flatten() {
            let disabled = entry["disabled"].as_bool().unwrap_or(false);
            if !disabled && entry["providers"].as_array().is_none_or(Vec::is_empty) {
                let text = format!(
                    "The Telemetry {} in namespace {:?} with empty providers will be ignored.",
                    o.meta.name,
                    o.meta.ns()
                );
                out.push(Message::new(o, "Telemetry", INVALID_TELEMETRY_PROVIDER, text));
            }
        }
    }
}

/// istiod's `deprecation.DeprecationAnalyzer`: a fault delay's integer
/// `percent`, a Sidecar's `egressProxy`.
pub(super) fn deprecations(istio: &[IstioObject], out: &mut Vec<Message>) {
    for o in istio {
        match &o.spec {
            IstioSpec::VirtualService(vs) => {
                for r in &vs.http {
                    if r.fault.as_ref().and_then(|f| f.delay.as_ref()).is_some_and(|d| d.percent > 0) {
                        let text = "Deprecated: HTTPRoute.fault.delay.percent is deprecated; use HTTPRoute.fault.delay.percentage";
                        out.push(Message::new(o, "VirtualService", DEPRECATED, text.to_owned()));
                    }
                }
            }
            IstioSpec::Sidecar(sc) if sc.outbound_traffic_policy.as_ref().is_some_and(|p| p.egress_proxy.is_some()) => {
                let text = "Deprecated: OutboundTrafficPolicy.EgressProxy ignored";
                out.push(Message::new(o, "Sidecar", DEPRECATED, text.to_owned()));
            }
            _ => {}
        }
    }
}

/// Go's `%v` of a sorted []string.
fn names(list: &[&IstioObject]) -> String {
    let mut names: Vec<&str> = list.iter().map(|o| o.meta.name.as_str()).collect();
    names.sort_unstable();
    format!("[{}]", names.join(" "))
}

/// istiod's `sidecar.SelectorAnalyzer`: a selector that matches no pod of
/// its namespace, two Sidecars selecting one pod, two namespace-wide ones,
/// and any on an ambient pod or namespace (where they do nothing).
pub(super) fn sidecar_selectors(objects: &Objects, out: &mut Vec<Message>) {
    let mut namespace_wide: BTreeMap<&str, Vec<&IstioObject>> = BTreeMap::new();
    // Pods (by index) and the Sidecars that select them.
    let mut selected: BTreeMap<usize, Vec<&IstioObject>> = BTreeMap::new();
    for o in &objects.istio {
        let IstioSpec::Sidecar(sc) = &o.spec else { continue };
        let ns = o.meta.ns();
        let selector = sc.workload_selector.as_ref().map(|w| &w.labels).filter(|l| !l.is_empty());
        let Some(selector) = selector else {
            namespace_wide.entry(ns).or_default().push(o);
            continue;
        };
        let mut any = false;
        for (i, pod) in objects.pods.iter().enumerate() {
            if pod.metadata.ns() == ns && selector.iter().all(|(k, v)| pod.metadata.labels.get(k) == Some(v)) {
                any = true;
                selected.entry(i).or_default().push(o);
            }
        }
        if !any {
            // istiod's `labels.SelectorFromSet(...).String()`.
            let text: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let text = super::not_found("selector", &text.join(","));
            out.push(Message::new(o, "Sidecar", super::REFERENCED_RESOURCE_NOT_FOUND, text));
        }
    }
    let mut ineffective: Vec<(&str, &str)> = Vec::new();
    for (i, sidecars) in selected {
        let pod = &objects.pods[i];
        if pod.metadata.annotations.get("ambient.istio.io/redirection").is_some_and(|v| v == "enabled") {
            for o in sidecars {
                if !ineffective.contains(&(o.meta.ns(), o.meta.name.as_str())) {
                    ineffective.push((o.meta.ns(), o.meta.name.as_str()));
                    let text =
                        "The policy has no impact: selected workload is in ambient mode, the policy has no impact.";
                    out.push(Message::new(o, "Sidecar", INEFFECTIVE_POLICY, text.to_owned()));
                }
            }
        } else if sidecars.len() > 1 {
            let text = format!(
                "The Sidecars {} in namespace {:?} select the same workload pod {:?}, which can lead to undefined behavior.",
                names(&sidecars),
                pod.metadata.ns(),
                pod.metadata.name
            );
            for o in sidecars {
                out.push(Message::new(o, "Sidecar", CONFLICTING_SIDECAR_SELECTORS, text.clone()));
            }
        }
    }
    for (ns, sidecars) in namespace_wide {
        let labels = objects.namespaces.iter().find(|n| n.metadata.name == ns).map(|n| &n.metadata.labels);
        let ambient = labels.is_some_and(|l| {
            l.get("istio-injection").is_none_or(|v| v != "enabled")
                && l.get("istio.io/rev").is_none_or(String::is_empty)
                && l.get("istio.io/dataplane-mode").is_some_and(|v| v == "ambient")
        });
        if ambient {
            for o in sidecars {
                if !ineffective.contains(&(o.meta.ns(), o.meta.name.as_str())) {
                    let text = "The policy has no impact: namespace is in ambient mode, the policy has no impact.";
                    out.push(Message::new(o, "Sidecar", INEFFECTIVE_POLICY, text.to_owned()));
                }
            }
        } else if sidecars.len() > 1 {
            let text = format!(
                "The Sidecars {} in namespace {ns:?} have no workload selector, which can lead to undefined behavior.",
                names(&sidecars)
            );
            for o in sidecars {
                out.push(Message::new(o, "Sidecar", MULTIPLE_SIDECARS_WITHOUT_SELECTORS, text.clone()));
            }
        }
    }
}

/// `NoMatchingWorkloadsFound`.
pub const NO_MATCHING_WORKLOADS: MessageType = MessageType { code: "IST0127", level: "Warning" };
/// `ConflictingTelemetryWorkloadSelectors`.
pub const CONFLICTING_TELEMETRY_SELECTORS: MessageType = MessageType { code: "IST0159", level: "Error" };

/// istiod's `labels.SelectorFromSet(...).String()`: `k=v` sorted by key,
/// joined by commas.
fn selector_text(selector: &BTreeMap<String, String>) -> String {
    selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// istiod's `telemetry.SelectorAnalyzer`: a Telemetry's selector that
/// matches no pod of its namespace, and two Telemetries selecting one pod.
pub(super) fn telemetry_selectors(objects: &Objects, out: &mut Vec<Message>) {
    let mut selected: BTreeMap<usize, Vec<&IstioObject>> = BTreeMap::new();
    for o in &objects.istio {
        let IstioSpec::Ext(IstioKind::Telemetry, spec) = &o.spec else { continue };
        // (A Telemetry without labels to match selects nothing here, as
        // istiod's SelectorAnalyzer skips it.)
        let Some(labels) = spec.0["selector"]["matchLabels"].as_object().filter(|l| !l.is_empty()) else { continue };
        let selector: BTreeMap<String, String> =
            labels.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect();
        let ns = o.meta.ns();
        let mut any = false;
        for (i, pod) in objects.pods.iter().enumerate() {
            if pod.metadata.ns() == ns && selects(&selector, &pod.metadata.labels) {
                any = true;
                selected.entry(i).or_default().push(o);
            }
        }
        if !any {
            let text = super::not_found("selector", &selector_text(&selector));
            out.push(Message::new(o, "Telemetry", super::REFERENCED_RESOURCE_NOT_FOUND, text));
        }
    }
    for (i, list) in selected.into_iter().filter(|(_, l)| l.len() > 1) {
        let pod = &objects.pods[i];
        let text = format!(
            "The Telemetries {} in namespace {:?} select the same workload pod {:?}, which can lead to undefined behavior.",
            names(&list),
            pod.metadata.ns(),
            pod.metadata.name
        );
        for o in list {
            out.push(Message::new(o, "Telemetry", CONFLICTING_TELEMETRY_SELECTORS, text.clone()));
        }
    }
}

/// istiod's `PodInMesh` as its in-cluster analysis sees a pod (its
/// containers stripped): the pod's `sidecar.istio.io/inject` label, else
/// annotation, else its namespace's `istio-injection=enabled`.
fn pod_in_mesh(pod: &istiod_config::objects::Pod, namespaces: &BTreeMap<&str, &BTreeMap<String, String>>) -> bool {
    let key = "sidecar.istio.io/inject";
    if let Some(v) = pod.metadata.labels.get(key).or_else(|| pod.metadata.annotations.get(key)) {
        return v == "true";
    }
    namespaces.get(pod.metadata.ns()).is_some_and(|l| l.get("istio-injection").is_some_and(|v| v == "enabled"))
}

/// istiod's `namespaceMatch`: `*`, a `*suffix`, a `prefix*`, else the
/// name in any case.
fn namespace_matches(ns: &str, exp: &str) -> bool {
    if exp == "*" {
        return true;
    }
    if let Some(suffix) = exp.strip_prefix('*') {
        return ns.ends_with(suffix);
    }
    if let Some(prefix) = exp.strip_suffix('*') {
        return ns.starts_with(prefix);
    }
    ns.eq_ignore_ascii_case(exp)
}

/// istiod's `auth.AuthorizationPoliciesAnalyzer`: a policy that selects
/// no workload of the mesh (in the root namespace: anywhere; elsewhere: in
/// its namespace, any for a namespace-wide one), and a source namespace
/// no Namespace matches.
pub(super) fn authorization_policies(objects: &Objects, root: &str, out: &mut Vec<Message>) {
    let namespaces: BTreeMap<&str, &BTreeMap<String, String>> =
        objects.namespaces.iter().map(|n| (n.metadata.name.as_str(), &n.metadata.labels)).collect();
    // Per namespace, the labels of its pods in the mesh (an ambient pod's
    // counted once more, as upstream does).
    let mut pods: BTreeMap<&str, Vec<&BTreeMap<String, String>>> = BTreeMap::new();
    for pod in &objects.pods {
        let list = pods.entry(pod.metadata.ns()).or_default();
        if pod_in_mesh(pod, &namespaces) {
            list.push(&pod.metadata.labels);
        }
        if pod.metadata.annotations.get("ambient.istio.io/redirection").is_some_and(|v| v == "enabled") {
            list.push(&pod.metadata.labels);
        }
    }
    for o in &objects.istio {
        let IstioSpec::AuthorizationPolicy(ap) = &o.spec else { continue };
        let ns = o.meta.ns();
        let selector = ap.selector.as_ref().map(|s| &s.match_labels);
        let in_ns = pods.get(ns).map(Vec::as_slice).unwrap_or_default();
        let missing = match selector {
            Some(sel) if ns == root => !pods.values().flatten().any(|l| selects(sel, l)),
            None if ns == root => false,
            None => in_ns.is_empty(),
            Some(sel) => !in_ns.iter().any(|l| selects(sel, l)),
        };
        if missing {
            let text = format!(
                "No matching workloads for this resource with the following labels: {}",
                selector.map(selector_text).unwrap_or_default()
            );
            out.push(Message::new(o, "AuthorizationPolicy", NO_MATCHING_WORKLOADS, text));
        }
        for source in ap.rules.iter().flat_map(|r| r.from.iter().filter_map(|f| f.source.as_ref())) {
            for exp in source.namespaces.iter().chain(&source.not_namespaces) {
                if !namespaces.keys().any(|ns| namespace_matches(ns, exp)) {
                    let text = super::not_found("namespace", exp);
                    out.push(Message::new(o, "AuthorizationPolicy", super::REFERENCED_RESOURCE_NOT_FOUND, text));
                }
            }
        }
    }
}

/// `IneffectiveSelector`.
pub const INEFFECTIVE_SELECTOR: MessageType = MessageType { code: "IST0166", level: "Warning" };
/// `JwtClaimBasedRoutingWithoutRequestAuthN`.
pub const JWT_CLAIM_ROUTE_WITHOUT_AUTHN: MessageType = MessageType { code: "IST0149", level: "Error" };

/// istiod's `k8sgateway.SelectorAnalyzer`: an AuthorizationPolicy,
/// RequestAuthentication, Telemetry or WasmPlugin that selects the pods
/// of a Kubernetes Gateway by label (it should name the Gateway with
/// `targetRef`).
pub(super) fn kubernetes_gateway_selectors(objects: &Objects, out: &mut Vec<Message>) {
    const GATEWAY_NAME: &str = "gateway.networking.k8s.io/gateway-name";
    let gateway_pods: Vec<&istiod_config::objects::Pod> =
        objects.pods.iter().filter(|p| p.metadata.labels.contains_key(GATEWAY_NAME)).collect();
    for o in &objects.istio {
        // (kind, selector's labels) of a policy with a selector and no
        // `targetRef`.
        let policy: Option<(&'static str, BTreeMap<String, String>)> = match &o.spec {
            IstioSpec::AuthorizationPolicy(p) if p.target_ref.is_none() => {
                p.selector.as_ref().map(|s| ("AuthorizationPolicy", s.match_labels.clone()))
            }
            IstioSpec::RequestAuthentication(p) if p.target_ref.is_none() => {
                p.selector.as_ref().map(|s| ("RequestAuthentication", s.match_labels.clone()))
            }
            IstioSpec::Ext(kind @ (IstioKind::Telemetry | IstioKind::WasmPlugin), spec)
                if spec.0.get("targetRef").is_none_or(Value::is_null) =>
            {
                spec.0.get("selector").filter(|s| !s.is_null()).map(|s| {
                    let labels = s["matchLabels"].as_object().into_iter().flatten();
                    let labels = labels.map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect();
                    (if *kind == IstioKind::Telemetry { "Telemetry" } else { "WasmPlugin" }, labels)
                })
            }
            _ => None,
        };
        let Some((kind, selector)) = policy else { continue };
        for pod in
            gateway_pods.iter().filter(|p| p.metadata.ns() == o.meta.ns() && selects(&selector, &p.metadata.labels))
        {
            let gateway = &pod.metadata.labels[GATEWAY_NAME];
            let text =
                format!("Ineffective selector on Kubernetes Gateway {gateway}. Use the TargetRef field instead.");
            out.push(Message::new(o, kind, INEFFECTIVE_SELECTOR, text));
        }
    }
}

/// istiod's `jwt.ToRoutingClaim(...).Match`: a header key naming a JWT
/// claim (`@request.auth.claims.<name>` or `@request.auth.claims[<name>]`).
fn routes_on_claim(key: &str) -> bool {
    const PREFIX: &str = "@request.auth.claims";
    let Some(rest) = key.get(..PREFIX.len()).filter(|p| p.eq_ignore_ascii_case(PREFIX)).map(|_| &key[PREFIX.len()..])
    else {
        return false;
    };
    match rest.as_bytes().first() {
        Some(b'.') => rest.len() > 1,
        Some(b'[') => rest.ends_with(']') && rest.len() > 2,
        _ => false,
    }
}

/// istiod's `virtualservice.JWTClaimRouteAnalyzer`: a VirtualService that
/// routes on a JWT claim through a Gateway whose pods no
/// RequestAuthentication (of istio-system or the pod's namespace)
/// selects, so no claim is ever there to route on.
pub(super) fn jwt_claim_routes(objects: &Objects, out: &mut Vec<Message>) {
    let mut authn: BTreeMap<&str, Vec<BTreeMap<String, String>>> = BTreeMap::new();
    for o in &objects.istio {
        if let IstioSpec::RequestAuthentication(ra) = &o.spec {
            authn
                .entry(o.meta.ns())
                .or_default()
                .push(ra.selector.as_ref().map(|s| s.match_labels.clone()).unwrap_or_default());
        }
    }
    for o in &objects.istio {
        let IstioSpec::VirtualService(vs) = &o.spec else { continue };
        let matches = vs.http.iter().flat_map(|r| &r.matches);
        let Some(key) =
            matches.flat_map(|m| m.headers.keys().chain(m.without_headers.keys())).find(|k| routes_on_claim(k))
        else {
            continue;
        };
        let ns = o.meta.ns();
        for name in vs.gateways.iter().filter(|g| *g != "mesh") {
            let (gw_ns, gw_name) = name.split_once('/').unwrap_or((ns, name));
            let gateway = objects.istio.iter().find_map(|g| match &g.spec {
                IstioSpec::Gateway(gw) if g.meta.ns() == gw_ns && g.meta.name == gw_name => Some(gw),
                _ => None,
            });
            let Some(gateway) = gateway else { continue };
            for pod in objects.pods.iter().filter(|p| selects(&gateway.selector, &p.metadata.labels)) {
                let covered = authn
                    .get("istio-system")
                    .into_iter()
                    .flatten()
                    .chain(authn.get(pod.metadata.ns()).into_iter().flatten())
                    .any(|sel| selects(sel, &pod.metadata.labels));
                if !covered {
                    let text = format!(
                        "The virtual service uses the JWT claim based routing (key: {key}) but found no request authentication for the gateway ({gw_ns}/{gw_name}) pod ({}). The request authentication must first be applied for the gateway pods to validate the JWT token and make the claims available for routing.",
                        pod.metadata.name
                    );
                    out.push(Message::new(o, "VirtualService", JWT_CLAIM_ROUTE_WITHOUT_AUTHN, text));
                }
            }
        }
    }
}
