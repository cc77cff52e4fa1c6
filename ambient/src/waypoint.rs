//! Waypoints and what uses them (istiod's `waypoints.go`, `computeWaypoint`
//! in `workloads.go`, `fetchWaypointForService` in `services.go`): a
//! Gateway with a status address is a waypoint for the traffic its class or
//! its own `istio.io/waypoint-for` names (`service` by default); a Service,
//! ServiceEntry, Pod, WorkloadEntry or ServiceEntry endpoint labelled
//! `istio.io/use-waypoint` (or in a Namespace so labelled) carries its
//! address, where the waypoint lets its namespace attach.

use std::collections::BTreeMap;

use istiod_config::gateway_api::{GatewayApiObject, GatewayApiSpec, LabelSelector};
use istiod_proto::istio::workload::{
    ApplicationTunnel, GatewayAddress, NamespacedHostname, NetworkAddress, WeightedWaypoint, application_tunnel,
    gateway_address,
};

use crate::Inputs;

/// The waypoint an object (or its namespace) uses; `none` opts out.
pub const USE_WAYPOINT: &str = "istio.io/use-waypoint";
/// The namespace of the waypoint `istio.io/use-waypoint` names.
pub const USE_WAYPOINT_NAMESPACE: &str = "istio.io/use-waypoint-namespace";
/// A canary waypoint, sharing the traffic by `CANARY_WEIGHT`.
pub const USE_WAYPOINT_CANARY: &str = "istio.io/use-waypoint-canary";
/// The canary's namespace.
pub const USE_WAYPOINT_CANARY_NAMESPACE: &str = "istio.io/use-waypoint-canary-namespace";
/// The canary's share, 0 to 100 (annotation).
pub const CANARY_WEIGHT: &str = "istio.io/use-waypoint-canary-weight";
/// What a waypoint takes: `service`, `workload`, `all` or `none`.
pub const WAYPOINT_FOR: &str = "istio.io/waypoint-for";
/// Ingress gateways send to the Service's waypoint too.
pub const INGRESS_USE_WAYPOINT: &str = "istio.io/ingress-use-waypoint";
/// The Gateway a pod is an instance of.
pub const GATEWAY_NAME: &str = "gateway.networking.k8s.io/gateway-name";
/// How ztunnel sends to a waypoint's instances: `PROXY` or `NONE`,
/// optionally `/port` (Gateway, else GatewayClass annotation).
pub const INBOUND_BINDING: &str = "ambient.istio.io/waypoint-inbound-binding";
/// The label a deployed waypoint's or east-west gateway's objects carry.
const MANAGED: &str = "gateway.istio.io/managed";

/// One waypoint: a Gateway with an address.
#[derive(Debug, Clone, PartialEq)]
pub struct Waypoint {
    /// The Gateway's namespace.
    pub namespace: String,
    /// The Gateway's name.
    pub name: String,
    /// Where ztunnel sends to it (none where its status addresses are of
    /// no usable kind: it is a waypoint still, its instances get their
    /// binding, and what uses it is sent no address).
    pub address: Option<GatewayAddress>,
    /// How ztunnel delivers to its instances, if the binding says.
    pub binding: Option<ApplicationTunnel>,
    /// `service`, `workload`, `all` or `none`.
    pub traffic_type: String,
    /// Which namespaces may attach.
    pub allowed: Allowed,
}

/// The namespaces whose objects may use a waypoint (its listener's
/// `allowedRoutes.namespaces`).
#[derive(Debug, Clone, PartialEq)]
pub enum Allowed {
    /// Every namespace.
    All,
    /// The waypoint's own.
    Same,
    /// Those the selector selects (none without one).
    Selector(Option<LabelSelector>),
}

impl Waypoint {
    /// `<ns>/<name>`.
    pub fn resource_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether namespace `ns` may attach (`AllowsAttachmentFromNamespace`).
    fn allows(&self, ns: &str, inputs: &Inputs) -> bool {
        match &self.allowed {
            Allowed::All => true,
            Allowed::Same => self.namespace == ns,
            Allowed::Selector(sel) => {
                let empty = BTreeMap::new();
                let labels = inputs.namespace(ns).map_or(&empty, |n| &n.metadata.labels);
                sel.as_ref().is_some_and(|s| s.matches(labels))
            }
        }
    }
}

/// The waypoint Gateway `o` makes, or `None` while it has no status
/// address (or is not a Gateway). `classes` finds a GatewayClass by name;
/// `network` is the local network, an IP address's.
pub fn from_gateway<'a>(
    o: &GatewayApiObject,
    classes: impl Fn(&str) -> Option<&'a GatewayApiObject>,
    network: &str,
) -> Option<Waypoint> {
    let GatewayApiSpec::Gateway(g) = &o.spec else { return None };
    if g.status_addresses.is_empty() {
        return None;
    }
    let ns = o.meta.ns();
    // A hostname first, else an IP (`getGatewayAddress`).
    let hostname = g.status_addresses.iter().find(|a| a.type_.as_deref() == Some("Hostname"));
    let destination = match hostname {
        Some(h) => Some(gateway_address::Destination::Hostname(NamespacedHostname {
            namespace: ns.to_owned(),
            hostname: h.value.clone(),
        })),
        None => g
            .status_addresses
            .iter()
            // The type defaults to IPAddress (the CRD's default).
            .filter(|a| a.type_.as_deref().is_none_or(|t| t == "IPAddress"))
            .find_map(|a| a.value.parse::<std::net::IpAddr>().ok())
            .map(|ip| {
                gateway_address::Destination::Address(NetworkAddress {
                    network: network.to_owned(),
                    address: crate::ip_bytes(ip),
                    length: None,
                })
            }),
    };
    let class = classes(&g.gateway_class_name);
    let mut traffic_type = "service".to_owned();
    if let Some(t) = class.and_then(|c| c.meta.labels.get(WAYPOINT_FOR)) {
        t.clone_into(&mut traffic_type);
    }
    if let Some(t) = o.meta.labels.get(WAYPOINT_FOR) {
        t.clone_into(&mut traffic_type);
    }
    let binding_text = o.meta.annotations.get(INBOUND_BINDING).or_else(|| class?.meta.annotations.get(INBOUND_BINDING));
    let binding = binding_text.and_then(|b| inbound_binding(b));
    // The listener the binding names, else the HBONE one on 15008.
    let bound = binding.as_ref().and_then(|b| {
        g.listeners.iter().find(|l| {
            if b.port != 0 {
                l.port == b.port
            } else {
                b.protocol == application_tunnel::Protocol::Proxy as i32 && l.protocol == "istio.io/PROXY"
            }
        })
    });
    let listener = bound.or_else(|| g.listeners.iter().find(|l| l.protocol == "HBONE" && l.port == 15008));
    let allowed = match listener.and_then(|l| l.allowed_routes.as_ref()).and_then(|a| a.namespaces.as_ref()) {
        None => Allowed::Same,
        Some(n) => match n.from.as_deref().unwrap_or("Same") {
            "All" => Allowed::All,
            "Selector" => Allowed::Selector(n.selector.clone()),
            _ => Allowed::Same,
        },
    };
    Some(Waypoint {
        namespace: ns.to_owned(),
        name: o.meta.name.clone(),
        address: destination.map(|d| GatewayAddress { destination: Some(d), hbone_mtls_port: 15008 }),
        binding,
        traffic_type,
        allowed,
    })
}

/// `PROXY` or `NONE`, optionally `/<port>` (`makeInboundBinding`).
fn inbound_binding(text: &str) -> Option<ApplicationTunnel> {
    let mut parts = text.split('/');
    let protocol = match parts.next()? {
        "NONE" => application_tunnel::Protocol::None,
        "PROXY" => application_tunnel::Protocol::Proxy,
        other => {
            tracing::warn!(target: "ambient", "invalid protocol {other} for {INBOUND_BINDING}. Only NONE or PROXY are supported.");
            return None;
        }
    };
    let port = match (parts.next(), parts.next()) {
        (None, _) => 0,
        (Some(p), None) => p.parse().unwrap_or_else(|_| {
            tracing::warn!(target: "ambient", "invalid port {p} for {INBOUND_BINDING}.");
            0
        }),
        _ => {
            tracing::warn!(target: "ambient", "invalid value {text:?} for {INBOUND_BINDING}. Must be of the format \"<protocol>\" or \"<protocol>/<port>\".");
            return None;
        }
    };
    Some(ApplicationTunnel { protocol: protocol as i32, port })
}

/// The waypoints by `(namespace, name)`.
pub type Waypoints = BTreeMap<(String, String), Waypoint>;

/// Why an object has no waypoint though it asked for one, or no canary
/// (istiod's `Report*` status messages, `serviceregistry/ambient/status.go`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unbound {
    /// The waypoint does not exist or has no address yet.
    NotReady(String),
    /// The waypoint does not let the object's namespace attach.
    Denied(String),
    /// The waypoint does not take this kind of traffic (`service`,
    /// `workload`).
    TrafficType(String, &'static str),
    /// The canary's weight is not a percentage.
    CanaryInvalidWeight(String),
    /// The canary is the primary.
    CanarySameAsPrimary(String),
}

impl Unbound {
    /// The condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Unbound::NotReady(_) => "WaypointIsNotReady",
            Unbound::Denied(_) => "AttachmentDenied",
            Unbound::TrafficType(..) => "UnsupportedTrafficType",
            Unbound::CanaryInvalidWeight(_) => "CanaryInvalidWeight",
            Unbound::CanarySameAsPrimary(_) => "CanarySameAsPrimary",
        }
    }

    /// The condition's message, in istiod's words.
    pub fn message(&self) -> String {
        match self {
            Unbound::NotReady(w) => format!("waypoint {w:?} is not ready"),
            Unbound::Denied(w) => format!("we are not permitted to attach to waypoint {w:?} (missing allowedRoutes?)"),
            Unbound::TrafficType(w, t) => {
                format!("attempting to bind to traffic type {t:?} which the waypoint {w:?} does not support")
            }
            Unbound::CanaryInvalidWeight(w) => {
                format!("canary waypoint {w:?} has an invalid weight; must be an integer in [0,100]")
            }
            Unbound::CanarySameAsPrimary(w) => format!("canary waypoint {w:?} must differ from the primary waypoint"),
        }
    }
}

/// A service's binding to its waypoint, for its `istio.io/WaypointBound`
/// condition (istiod's `WaypointBindingStatus`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Binding {
    /// The waypoint bound (`<ns>/<name>`).
    pub waypoint: Option<String>,
    /// `istio.io/ingress-use-waypoint` is set (on it or its namespace).
    pub ingress_present: bool,
    /// ... and says true.
    pub ingress_use: bool,
    /// Why it is not bound, or why its canary is not.
    pub error: Option<Unbound>,
}

impl Binding {
    /// [`Binding::condition`], or its removal.
    pub fn condition_or_removal(&self) -> serde_json::Value {
        self.condition().unwrap_or_else(|| removal(WAYPOINT_BOUND))
    }

    /// The `istio.io/WaypointBound` condition (`ServiceInfo.GetConditions`):
    /// `None` where there is nothing to say (the condition is removed).
    pub fn condition(&self) -> Option<serde_json::Value> {
        use serde_json::json;
        match (&self.waypoint, &self.error) {
            (Some(w), error) => {
                let mut msg = format!("Successfully attached to waypoint {w}");
                if self.ingress_use {
                    msg += ". Ingress traffic will traverse the waypoint";
                } else if self.ingress_present {
                    msg += ". Ingress traffic is not using the waypoint, set the istio.io/ingress-use-waypoint label to true if desired.";
                }
                if let Some(e) = error {
                    msg += ". Canary waypoint not attached: ";
                    msg += &e.message();
                }
                Some(json!({"type": WAYPOINT_BOUND, "status": "True", "reason": "WaypointAccepted", "message": msg}))
            }
            (None, Some(e)) => {
                Some(json!({"type": WAYPOINT_BOUND, "status": "False", "reason": e.reason(), "message": e.message()}))
            }
            (None, None) => None,
        }
    }
}

/// The condition type of a service's binding.
pub const WAYPOINT_BOUND: &str = "istio.io/WaypointBound";

/// A condition of ours of type `t` to take off where it was written (the
/// status writer's `remove` mark).
pub fn removal(t: &str) -> serde_json::Value {
    serde_json::json!({"type": t, "remove": true})
}
/// The condition type of a ServiceEntry that needs a waypoint and has none.
pub const WAYPOINT_MISSING: &str = "istio.io/WaypointMissing";

/// The `(namespace, name)` an object's labels name (`GetUseWaypoint`):
/// `Err(())` for `none`.
fn use_waypoint(labels: &BTreeMap<String, String>, ns: &str) -> Result<Option<(String, String)>, ()> {
    match labels.get(USE_WAYPOINT) {
        Some(v) if v == "none" => Err(()),
        Some(v) => Ok(Some((labels.get(USE_WAYPOINT_NAMESPACE).map_or(ns, String::as_str).to_owned(), v.clone()))),
        None => Ok(None),
    }
}

/// The waypoint that handles traffic for an object of namespace `ns` with
/// `labels` (`fetchWaypointForTarget`): its own label, else its
/// namespace's.
fn for_target<'a>(
    waypoints: &'a Waypoints,
    inputs: &Inputs,
    ns: &str,
    labels: &BTreeMap<String, String>,
) -> Result<Option<&'a Waypoint>, Unbound> {
    let named = match use_waypoint(labels, ns) {
        Err(()) => return Ok(None),
        Ok(Some(n)) => Some(n),
        Ok(None) => {
            let empty = BTreeMap::new();
            let ns_labels = inputs.namespace(ns).map_or(&empty, |n| &n.metadata.labels);
            use_waypoint(ns_labels, ns).ok().flatten()
        }
    };
    let Some(key) = named else { return Ok(None) };
    match waypoints.get(&key) {
        Some(w) if w.allows(ns, inputs) => Ok(Some(w)),
        Some(w) => Err(Unbound::Denied(w.resource_name())),
        None => Err(Unbound::NotReady(format!("{}/{}", key.0, key.1))),
    }
}

/// A service's waypoint (`fetchWaypointForService`): none for a
/// waypoint's or east-west gateway's own Service; the waypoint must take
/// service traffic.
pub fn for_service<'a>(
    waypoints: &'a Waypoints,
    inputs: &Inputs,
    ns: &str,
    labels: &BTreeMap<String, String>,
) -> Result<Option<&'a Waypoint>, Unbound> {
    if labels.get(MANAGED).is_some_and(|m| m == "istio.io-mesh-controller" || m == "istio.io-eastwest-controller") {
        return Ok(None);
    }
    match for_target(waypoints, inputs, ns, labels)? {
        Some(w) if w.traffic_type == "service" || w.traffic_type == "all" => Ok(Some(w)),
        Some(w) => Err(Unbound::TrafficType(w.resource_name(), "service")),
        None => Ok(None),
    }
}

/// A workload's waypoint and application tunnel (`computeWaypoint`): an
/// instance of a waypoint gets its binding as the tunnel and no waypoint;
/// otherwise the waypoint must take workload traffic (one inherited from
/// the namespace that does not is no error).
pub fn for_workload(
    waypoints: &Waypoints,
    inputs: &Inputs,
    ns: &str,
    labels: &BTreeMap<String, String>,
) -> (Option<GatewayAddress>, Option<ApplicationTunnel>) {
    let (address, tunnel, _) = workload_binding(waypoints, inputs, ns, labels);
    (address, tunnel)
}

/// [`for_workload`], with the binding its `istio.io/WaypointBound`
/// condition reports (`fetchWaypointForWorkload`'s error).
pub fn workload_binding(
    waypoints: &Waypoints,
    inputs: &Inputs,
    ns: &str,
    labels: &BTreeMap<String, String>,
) -> (Option<GatewayAddress>, Option<ApplicationTunnel>, Binding) {
    if let Some(gw) = labels.get(GATEWAY_NAME).filter(|n| !n.is_empty())
        && let Some(w) = waypoints.get(&(ns.to_owned(), gw.clone()))
    {
        return (None, w.binding, Binding::default());
    }
    match for_target(waypoints, inputs, ns, labels) {
        Ok(Some(w)) if w.traffic_type == "workload" || w.traffic_type == "all" => {
            (w.address.clone(), None, Binding { waypoint: Some(w.resource_name()), ..Binding::default() })
        }
        // Inherited from the namespace, a waypoint for services is no
        // error for a workload.
        Ok(Some(w)) if labels.contains_key(USE_WAYPOINT) => {
            let error = Some(Unbound::TrafficType(w.resource_name(), "workload"));
            (None, None, Binding { error, ..Binding::default() })
        }
        Ok(_) => (None, None, Binding::default()),
        Err(error) => (None, None, Binding { error: Some(error), ..Binding::default() }),
    }
}

/// `istio.io/ingress-use-waypoint` of a service with a waypoint: the
/// object's label, else its namespace's; whether it is set, and whether it
/// says true as Go's `ParseBool` reads it.
pub fn ingress_use_waypoint(labels: &BTreeMap<String, String>, inputs: &Inputs, ns: &str) -> (bool, bool) {
    let value = labels
        .get(INGRESS_USE_WAYPOINT)
        .or_else(|| inputs.namespace(ns).and_then(|n| n.metadata.labels.get(INGRESS_USE_WAYPOINT)));
    match value.map(String::as_str) {
        None => (false, false),
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => (true, false),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => (true, true),
        Some(v) => {
            tracing::warn!(target: "ambient", "invalid value for label {INGRESS_USE_WAYPOINT}: {v}, defaulting to false");
            (true, false)
        }
    }
}

/// The weighted waypoints of a service with primary waypoint `primary`
/// (`buildWeightedWaypoints`): `[primary, 100 - w]`, `[canary, w]` for a
/// canary the object (or, when it names no waypoint itself, its
/// namespace) declares; none without one; why not where the canary is the
/// primary, its weight is not a percentage, or it cannot be used.
pub fn weighted(
    waypoints: &Waypoints,
    inputs: &Inputs,
    ns: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    primary: &Waypoint,
) -> Result<Vec<WeightedWaypoint>, Unbound> {
    let ns_meta = if use_waypoint(labels, ns).ok().flatten().is_none() {
        inputs.namespace(ns).map(|n| &n.metadata)
    } else {
        None
    };
    let canary_labels = if !labels.contains_key(USE_WAYPOINT_CANARY)
        && let Some(m) = ns_meta.filter(|m| m.labels.contains_key(USE_WAYPOINT_CANARY))
    {
        &m.labels
    } else {
        labels
    };
    let Some(name) = canary_labels.get(USE_WAYPOINT_CANARY).filter(|v| !v.is_empty() && *v != "none") else {
        return Ok(Vec::new());
    };
    let canary_ns = canary_labels.get(USE_WAYPOINT_CANARY_NAMESPACE).map_or(ns, String::as_str);
    let resource = format!("{canary_ns}/{name}");
    let weight_text = annotations.get(CANARY_WEIGHT).or_else(|| ns_meta.and_then(|m| m.annotations.get(CANARY_WEIGHT)));
    let weight = match weight_text {
        None => Some(0),
        Some(v) => v.parse::<u32>().ok().filter(|w| *w <= 100),
    };
    if resource == primary.resource_name() {
        return Err(Unbound::CanarySameAsPrimary(resource));
    }
    let Some(weight) = weight else { return Err(Unbound::CanaryInvalidWeight(resource)) };
    let Some(canary) = waypoints.get(&(canary_ns.to_owned(), name.clone())) else {
        return Err(Unbound::NotReady(resource));
    };
    if !canary.allows(ns, inputs) {
        return Err(Unbound::Denied(resource));
    }
    if !(canary.traffic_type == "service" || canary.traffic_type == "all") {
        return Err(Unbound::TrafficType(resource, "service"));
    }
    Ok(vec![
        WeightedWaypoint { destination: primary.address.clone(), weight: 100 - weight },
        WeightedWaypoint { destination: canary.address.clone(), weight },
    ])
}

/// A waypoint's address as protojson writes it (in `/debug/ambientz`).
pub fn describe(g: &istiod_proto::istio::workload::GatewayAddress) -> serde_json::Value {
    use istiod_proto::istio::workload::gateway_address::Destination;
    let mut v = serde_json::json!({"hboneMtlsPort": g.hbone_mtls_port});
    match &g.destination {
        Some(Destination::Hostname(h)) => {
            v["hostname"] = serde_json::json!({"namespace": h.namespace, "hostname": h.hostname})
        }
        Some(Destination::Address(a)) => {
            v["address"] = serde_json::json!({"network": a.network, "address": crate::debug_ip(&a.address)});
        }
        None => {}
    }
    v
}

/// The `WaypointAccepted` condition istiod writes on an AuthorizationPolicy
/// attached by `targetRef(s)` (`WaypointPolicyStatusCollection`, flattened
/// as `flattenConditions`): per target whether it binds to a waypoint,
/// then one condition. `None` for a policy without targets.
pub fn policy_condition(
    inputs: &Inputs,
    root: &str,
    o: &istiod_config::istio::IstioObject,
) -> Option<serde_json::Value> {
    let istiod_config::istio::IstioSpec::AuthorizationPolicy(p) = &o.spec else { return None };
    let refs: Vec<&istiod_config::istio::PolicyTargetReference> = match p.target_refs.is_empty() {
        true => p.target_ref.iter().collect(),
        false => p.target_refs.iter().collect(),
    };
    if refs.is_empty() {
        return None;
    }
    // (bound, reason, message, ancestor) per target.
    let mut each: Vec<(bool, &str, String, String)> = Vec::new();
    for r in refs {
        let ns = if r.namespace.is_empty() { o.meta.ns() } else { r.namespace.as_str() };
        let key = format!("{ns}/{}", r.name);
        let service_bound =
            |labels: &BTreeMap<String, String>, what: &str| match for_service(&inputs.waypoints, inputs, ns, labels) {
                Ok(Some(w)) => (true, "Accepted", format!("bound to {}", w.resource_name())),
                _ => (false, "AncestorNotBound", format!("{what} {key} is not bound to a waypoint")),
            };
        let (bound, reason, message) = match r.kind.as_str() {
            "GatewayClass" if ns != root => (
                false,
                "Invalid",
                format!("AuthorizationPolicy must be in the root namespace `{root}` when referencing a GatewayClass"),
            ),
            "GatewayClass" => match inputs.gateway_classes.get(&r.name).map(|c| &c.spec) {
                Some(GatewayApiSpec::GatewayClass(c)) if c.controller_name == "istio.io/mesh-controller" => {
                    (true, "Accepted", format!("bound to {}", r.name))
                }
                Some(_) => (
                    false,
                    "Invalid",
                    "GatewayClass must use controller name `istio.io/mesh-controller` for waypoints".to_owned(),
                ),
                None => (false, "TargetNotFound", "not bound".to_owned()),
            },
            "Gateway" => match inputs.waypoints.get(&(ns.to_owned(), r.name.clone())) {
                Some(w) => (true, "Accepted", format!("bound to {}", w.resource_name())),
                None => (false, "TargetNotFound", "not bound".to_owned()),
            },
            "Service" => match inputs.services.get(&(ns.to_owned(), r.name.clone())) {
                Some(s) => service_bound(&s.metadata.labels, "Service"),
                None => (false, "TargetNotFound", format!("Service {key} was not found")),
            },
            "ServiceEntry" => match inputs.service_entries.get(&(ns.to_owned(), r.name.clone())) {
                Some(se) => service_bound(&se.meta.labels, "ServiceEntry"),
                None => (false, "TargetNotFound", format!("ServiceEntry {key} was not found")),
            },
            _ => (false, "unknown", "not bound".to_owned()),
        };
        let group = if r.group.is_empty() { "core" } else { r.group.as_str() };
        each.push((bound, reason, message, format!("{}.{group}:{key}", r.kind)));
    }
    let (status, reason, message) = match each.as_slice() {
        [(bound, reason, message, _)] => (*bound, *reason, message.clone()),
        all => {
            let bound = all.iter().any(|c| c.0);
            let unbound: Vec<&str> = all.iter().filter(|c| !c.0).map(|c| c.3.as_str()).collect();
            let reason = match (bound, unbound.is_empty()) {
                (true, true) => "Accepted",
                (true, false) => "PartiallyInvalid",
                (false, _) => "Invalid",
            };
            let message =
                if unbound.is_empty() { String::new() } else { format!("Invalid targetRefs: {}", unbound.join(", ")) };
            (bound, reason, message)
        }
    };
    Some(serde_json::json!({
        "type": "WaypointAccepted",
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
    }))
}
