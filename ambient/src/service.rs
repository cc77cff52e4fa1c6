//! A Kubernetes Service as ztunnel's `Service` (istiod's
//! `serviceServiceBuilder` and `constructService`,
//! `pilot/pkg/serviceregistry/ambient/services.go`), and the services of one
//! hostname reduced to one per namespace (`selectWorkloadServices`).

use std::collections::BTreeMap;
use std::sync::Arc;

use istiod_config::objects::{IntOrString, Service};
use istiod_mesh::model::Protocol;
use istiod_proto::istio::workload::{
    AppProtocol, IpFamilies, LoadBalancing, NetworkAddress, Port, Service as WdsService, load_balancing,
};
use serde_json::{Value, json};

use crate::{Inputs, Settings};

/// The annotation that sets a Service's (or its namespace's) traffic
/// distribution where the field is not set.
pub const TRAFFIC_DISTRIBUTION: &str = "networking.istio.io/traffic-distribution";

/// `<name>.<ns>.svc.<domain>`.
pub fn hostname(s: &Service, domain: &str) -> String {
    format!("{}.{}.svc.{domain}", s.metadata.name, s.metadata.ns())
}

/// The resource name: `<ns>/<hostname>`.
pub fn resource_name(s: &WdsService) -> Arc<str> {
    Arc::from(format!("{}/{}", s.namespace, s.hostname))
}

/// A port's numeric target: the number, or 0 for a named one; absent, the
/// port itself (what the API server defaults it to).
pub fn numeric_target(port: u16, target: Option<&IntOrString>) -> u32 {
    match target {
        Some(IntOrString::Int(n)) => u32::try_from(*n).unwrap_or(0),
        Some(IntOrString::String(_)) => 0,
        None => port.into(),
    }
}

/// The Service's VIPs as written (`clusterIPs`, else `clusterIP`), without
/// the empty and `None` ones (`getVIPs`).
fn vips(s: &Service) -> Vec<&str> {
    let all: Vec<&str> = match s.spec.cluster_ips.as_slice() {
        [] => s.spec.cluster_ip.as_deref().into_iter().collect(),
        many => many.iter().map(String::as_str).collect(),
    };
    all.into_iter().filter(|v| !v.is_empty() && *v != "None").collect()
}

/// What made a service: istiod's `ServiceInfo.Source.Kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// A Kubernetes Service.
    Service,
    /// A ServiceEntry (one service per host).
    ServiceEntry,
}

/// A port's names, by which a workload's target port is found
/// (`ServicePortName`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortName {
    /// The port's name.
    pub port_name: String,
    /// A Kubernetes Service's named `targetPort`.
    pub target_port_name: String,
}

/// One service as the index keeps it (istiod's `ServiceInfo`): the
/// served message and what workloads need to list it.
#[derive(Debug, Clone, PartialEq)]
pub struct Info {
    /// The kind of object that made it.
    pub source: Source,
    /// That object's name (its namespace is the service's).
    pub object: String,
    /// The served service.
    pub service: WdsService,
    /// The workloads it selects (empty: none).
    pub selector: BTreeMap<String, String>,
    /// Port names by service port.
    pub port_names: BTreeMap<u32, PortName>,
    /// The object's creation time (oldest wins a shared hostname).
    pub created: Option<String>,
    /// Its binding to a waypoint (its `istio.io/WaypointBound` condition).
    pub binding: crate::waypoint::Binding,
    /// The object's generation (the condition's `observedGeneration`).
    pub generation: Option<i64>,
    /// A ServiceEntry's `istio.io/connect-strategy: RACE_FIRST_TCP_CONNECT`
    /// (`GetDNSConnectStrategy`), which needs a waypoint.
    pub racing_connect: bool,
}

/// The [`Info`] of Kubernetes Service `s` (`serviceServiceBuilder`).
pub fn info(s: &Service, inputs: &Inputs, settings: &Settings) -> Option<Info> {
    let (service, binding) = build_bound(s, inputs, settings)?;
    let port_names = s
        .spec
        .ports
        .iter()
        .map(|p| {
            let target_port_name = match &p.target_port {
                Some(IntOrString::String(n)) => n.clone(),
                _ => String::new(),
            };
            (u32::from(p.port), PortName { port_name: p.name.clone().unwrap_or_default(), target_port_name })
        })
        .collect();
    Some(Info {
        source: Source::Service,
        object: s.metadata.name.clone(),
        service,
        selector: s.spec.selector.clone(),
        port_names,
        created: s.metadata.creation_timestamp.clone(),
        binding,
        generation: s.metadata.generation,
        racing_connect: false,
    })
}

/// istiod's `selectWorkloadServices`: of the services sharing one hostname,
/// one per namespace (a Kubernetes Service, else the oldest), and of those
/// one canonical (the Kubernetes Service, else the oldest). Ties go to the
/// first in `(namespace, object)` order, where istiod's pick is arbitrary.
pub fn select(mut candidates: Vec<Info>) -> BTreeMap<String, Info> {
    candidates.sort_by(|a, b| (&a.service.namespace, &a.object).cmp(&(&b.service.namespace, &b.object)));
    let better = |a: &Info, b: &Info| a.created < b.created && b.source != Source::Service;
    let mut best: BTreeMap<String, Info> = BTreeMap::new();
    for c in candidates {
        let ns = c.service.namespace.clone();
        match best.get(&ns) {
            Some(cur) if c.source != Source::Service && !better(&c, cur) => {}
            _ => {
                best.insert(ns, c);
            }
        }
    }
    let mut canonical: Option<&Info> = None;
    for si in best.values() {
        if si.source == Source::Service {
            canonical = Some(si);
            break;
        }
        if canonical.is_none_or(|c| better(si, c)) {
            canonical = Some(si);
        }
    }
    let ns = canonical.map(|c| c.service.namespace.clone());
    for (n, si) in best.iter_mut() {
        si.service.canonical = Some(n) == ns.as_ref();
    }
    best
}

/// The Service of `s`, or `None` for an ExternalName Service (ambient
/// leaves those to DNS) or one whose cluster IP does not parse.
pub fn build(s: &Service, inputs: &Inputs, settings: &Settings) -> Option<WdsService> {
    build_bound(s, inputs, settings).map(|(svc, _)| svc)
}

/// [`build`], with the service's binding to its waypoint.
fn build_bound(s: &Service, inputs: &Inputs, settings: &Settings) -> Option<(WdsService, crate::waypoint::Binding)> {
    let spec = &s.spec;
    if spec.kind.as_deref() == Some("ExternalName") {
        return None;
    }
    let ports = spec
        .ports
        .iter()
        .map(|p| Port {
            service_port: p.port.into(),
            target_port: numeric_target(p.port, p.target_port.as_ref()),
            app_protocol: app_protocol(convert_protocol(
                p.port,
                p.name.as_deref().unwrap_or(""),
                p.protocol.as_deref(),
                p.app_protocol.as_deref(),
            )) as i32,
        })
        .collect();
    let vips = vips(s);
    let mut addresses = Vec::new();
    let network = crate::network(inputs, settings);
    for vip in vips {
        let ip: std::net::IpAddr = match vip.parse() {
            Ok(ip) => ip,
            Err(_) => {
                tracing::warn!(target: "ambient", "fail to parse service {}/{}: {vip}", s.metadata.ns(), s.metadata.name);
                return None;
            }
        };
        addresses.push(NetworkAddress { network: network.clone(), address: crate::ip_bytes(ip), length: None });
    }
    let ns_annotations = inputs.namespace(s.metadata.ns()).map(|n| &n.metadata.annotations);
    let mut lb = if spec.internal_traffic_policy.as_deref() == Some("Local") {
        Some(LoadBalancing {
            routing_preference: vec![load_balancing::Scope::Node as i32],
            mode: load_balancing::Mode::Strict as i32,
            ..LoadBalancing::default()
        })
    } else {
        traffic_distribution(spec.traffic_distribution.as_deref(), &s.metadata.annotations, ns_annotations).balancing()
    };
    if spec.publish_not_ready_addresses {
        lb.get_or_insert_with(LoadBalancing::default).health_policy = load_balancing::HealthPolicy::AllowAll as i32;
    }
    let ip_families = match spec.ip_families.as_slice() {
        [_, _] => IpFamilies::Dual,
        [f] if f == "IPv4" => IpFamilies::Ipv4Only,
        [_] => IpFamilies::Ipv6Only,
        _ => IpFamilies::Automatic,
    };
    let mut out = WdsService {
        name: s.metadata.name.clone(),
        namespace: s.metadata.ns().to_owned(),
        hostname: hostname(s, &settings.domain),
        addresses,
        ports,
        load_balancing: lb,
        ip_families: ip_families as i32,
        // Set by [`select`] (a Kubernetes Service always is).
        canonical: true,
        ..WdsService::default()
    };
    let binding = set_waypoint(&mut out, &s.metadata.labels, &s.metadata.annotations, inputs);
    Some((out, binding))
}

/// A service's waypoint, whether ingress uses it, and its canary
/// (`fetchWaypointForService`, `ingressUseWaypointFromLabels`,
/// `buildWeightedWaypoints`).
pub(crate) fn set_waypoint(
    s: &mut WdsService,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    inputs: &Inputs,
) -> crate::waypoint::Binding {
    let ns = s.namespace.clone();
    let mut binding = crate::waypoint::Binding::default();
    match crate::waypoint::for_service(&inputs.waypoints, inputs, &ns, labels) {
        Ok(Some(w)) => {
            s.waypoint = w.address.clone();
            binding.waypoint = Some(w.resource_name());
            (binding.ingress_present, binding.ingress_use) = crate::waypoint::ingress_use_waypoint(labels, inputs, &ns);
            s.ingress_use_waypoint = binding.ingress_use;
            match crate::waypoint::weighted(&inputs.waypoints, inputs, &ns, labels, annotations, w) {
                Ok(weighted) => s.weighted_waypoints = weighted,
                Err(e) => binding.error = Some(e),
            }
        }
        Ok(None) => {}
        Err(e) => binding.error = Some(e),
    }
    binding
}

pub(crate) fn prefer(scopes: &[load_balancing::Scope]) -> LoadBalancing {
    LoadBalancing {
        routing_preference: scopes.iter().map(|s| *s as i32).collect(),
        mode: load_balancing::Mode::Failover as i32,
        ..LoadBalancing::default()
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Distribution {
    Any,
    SameZone,
    SameNode,
}

impl Distribution {
    /// The load balancing it asks for (`preferSameZoneLoadBalancer`,
    /// `preferSameNodeLoadBalancer`).
    pub(crate) fn balancing(&self) -> Option<LoadBalancing> {
        use load_balancing::Scope;
        match self {
            Distribution::SameZone => Some(prefer(&[Scope::Network, Scope::Region, Scope::Zone])),
            Distribution::SameNode => {
                Some(prefer(&[Scope::Network, Scope::Region, Scope::Zone, Scope::Subzone, Scope::Node]))
            }
            Distribution::Any => None,
        }
    }
}

/// `model.GetTrafficDistribution`: the field, then the Service's
/// annotation, then its namespace's.
pub(crate) fn traffic_distribution(
    field: Option<&str>,
    annotations: &std::collections::BTreeMap<String, String>,
    ns_annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Distribution {
    match field {
        Some("PreferSameZone" | "PreferClose") => return Distribution::SameZone,
        Some("PreferSameNode") => return Distribution::SameNode,
        _ => {}
    }
    let read = |v: &str| match v.to_ascii_lowercase().as_str() {
        "preferclose" | "prefersamezone" => Distribution::SameZone,
        "prefersamenode" => Distribution::SameNode,
        _ => Distribution::Any,
    };
    if let Some(v) = annotations.get(TRAFFIC_DISTRIBUTION).filter(|v| !v.is_empty()) {
        return read(v);
    }
    match ns_annotations.and_then(|a| a.get(TRAFFIC_DISTRIBUTION)).filter(|v| !v.is_empty()) {
        Some(v) => read(v),
        None => Distribution::Any,
    }
}

/// istiod's `kube.ConvertProtocol` (pkg/config/kube/conversion.go): UDP
/// first; `appProtocol` if set (Kubernetes' `kubernetes.io/h2c`, `ws`,
/// `wss`), else the port name; a `grpc-web` prefix; the part before `-`;
/// an unknown one on a well-known port (SMTP, DNS, MySQL, MongoDB) is TCP.
fn convert_protocol(port: u16, name: &str, l4: Option<&str>, app_protocol: Option<&str>) -> Protocol {
    if l4 == Some("UDP") {
        return Protocol::Udp;
    }
    let name = match app_protocol {
        Some("kubernetes.io/h2c") => return Protocol::Http2,
        Some("kubernetes.io/ws") => return Protocol::Http,
        Some("kubernetes.io/wss") => return Protocol::Https,
        Some(ap) => ap,
        None => name,
    };
    if name.len() >= 8 && name.is_char_boundary(8) && name[..8].eq_ignore_ascii_case("grpc-web") {
        return Protocol::GrpcWeb;
    }
    let p = Protocol::parse(name.split('-').next().unwrap_or(name));
    if p == Protocol::Unsupported && matches!(port, 25 | 53 | 3306 | 27017) {
        return Protocol::Tcp;
    }
    p
}

/// `toAppProtocolFromProtocol`.
pub(crate) fn app_protocol(p: Protocol) -> AppProtocol {
    match p {
        Protocol::Http => AppProtocol::Http11,
        Protocol::Http2 => AppProtocol::Http2,
        Protocol::Grpc => AppProtocol::Grpc,
        Protocol::Tls | Protocol::Https => AppProtocol::Tls,
        Protocol::Tcp => AppProtocol::Tcp,
        _ => AppProtocol::Unknown,
    }
}

/// A service as `/debug/ambientz` shows it.
pub fn describe(s: &WdsService) -> Value {
    let ports: Vec<Value> = s
        .ports
        .iter()
        .map(|p| {
            json!({
                "servicePort": p.service_port,
                "targetPort": p.target_port,
                "appProtocol": crate::enum_name(p.app_protocol, |v| AppProtocol::try_from(v).ok().map(|a| a.as_str_name())),
            })
        })
        .collect();
    json!({
        "name": s.name,
        "namespace": s.namespace,
        "hostname": s.hostname,
        "addresses": s.addresses.iter().map(|a| json!({"network": a.network, "address": crate::debug_ip(&a.address), "length": a.length})).collect::<Vec<_>>(),
        "ports": ports,
        "subjectAltNames": s.subject_alt_names,
        "loadBalancing": s.load_balancing.as_ref().map(describe_lb),
        "waypoint": s.waypoint.as_ref().map(crate::waypoint::describe),
        "ingressUseWaypoint": s.ingress_use_waypoint,
        "weightedWaypoints": s.weighted_waypoints.iter().map(|w| json!({"destination": w.destination.as_ref().map(crate::waypoint::describe), "weight": w.weight})).collect::<Vec<_>>(),
        "ipFamilies": crate::enum_name(s.ip_families, |v| IpFamilies::try_from(v).ok().map(|f| f.as_str_name())),
        "canonical": s.canonical,
    })
}

fn describe_lb(lb: &LoadBalancing) -> Value {
    use load_balancing::{HealthPolicy, Mode, Scope};
    let scopes: Vec<Value> = lb
        .routing_preference
        .iter()
        .map(|s| crate::enum_name(*s, |v| Scope::try_from(v).ok().map(|x| x.as_str_name())))
        .collect();
    json!({
        "routingPreference": scopes,
        "mode": crate::enum_name(lb.mode, |v| Mode::try_from(v).ok().map(|x| x.as_str_name())),
        "healthPolicy": crate::enum_name(lb.health_policy, |v| HealthPolicy::try_from(v).ok().map(|x| x.as_str_name())),
    })
}
