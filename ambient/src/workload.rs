//! A Pod as ztunnel's `Workload` (istiod's `podWorkloadBuilder`,
//! `pilot/pkg/serviceregistry/ambient/workloads.go`).

use std::collections::BTreeMap;

use istiod_config::objects::Pod;
use istiod_proto::istio::workload::{
    Locality, NetworkMode, Port, PortList, TunnelProtocol, Workload, WorkloadStatus, WorkloadType,
};
use serde_json::{Value, json};

use crate::service::{Info, Source};
use crate::{Inputs, Services, Settings, selects};

/// The annotation istio-cni writes on a pod it redirected.
pub const REDIRECTION: &str = "ambient.istio.io/redirection";
/// The label of a pod that takes HBONE itself.
pub const TUNNEL: &str = "networking.istio.io/tunnel";

/// A workload's uid for Pod `ns/name` (`generatePodUID`).
pub fn pod_uid(cluster_id: &str, ns: &str, name: &str) -> String {
    format!("{cluster_id}//Pod/{ns}/{name}")
}

/// The Workload of `pod`, or `None` where istiod makes none: a terminal
/// pod (Succeeded, Failed), a pod without an IP, or one with an IP that
/// does not parse.
pub fn from_pod(pod: &Pod, inputs: &Inputs, services: &Services, settings: &Settings) -> Option<Workload> {
    if matches!(pod.status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let ips: Vec<&str> = match pod.status.pod_ips.as_slice() {
        [] => pod.status.pod_ip.as_deref().filter(|ip| !ip.is_empty()).into_iter().collect(),
        many => many.iter().map(|p| p.ip.as_str()).collect(),
    };
    if ips.is_empty() {
        return None;
    }
    let mut addresses = Vec::with_capacity(ips.len());
    for ip in ips {
        addresses.push(crate::ip_bytes(ip.parse().ok()?));
    }
    let meta = &pod.metadata;
    let ns = meta.ns();
    let ready = pod.status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
        && meta.deletion_timestamp.is_none();
    let mut selected: Vec<&Info> = services.in_ns(ns).filter(|s| selects(&s.selector, &meta.labels)).collect();
    let named = crate::endpoint_slice::pod_services(pod, &selected, inputs, services, settings);
    selected.extend(named);
    let mut w = Workload {
        uid: pod_uid(&settings.cluster_id, ns, &meta.name),
        name: meta.name.clone(),
        namespace: ns.to_owned(),
        network: crate::network(inputs, settings),
        cluster_id: settings.cluster_id.clone(),
        addresses,
        service_account: pod.spec.service_account_name.clone().unwrap_or_default(),
        node: pod.spec.node_name.clone().unwrap_or_default(),
        services: port_lists(pod, selected.into_iter()),
        authorization_policies: crate::authz::workload_policies(inputs, settings, ns, &meta.labels),
        status: if ready { WorkloadStatus::Healthy } else { WorkloadStatus::Unhealthy } as i32,
        trust_domain: crate::trust_domain(settings),
        locality: pod.spec.node_name.as_deref().and_then(|n| inputs.node(n)).and_then(|n| locality(&n.metadata.labels)),
        workload_type: WorkloadType::Pod as i32,
        ..Workload::default()
    };
    if pod.spec.host_network {
        w.network_mode = NetworkMode::HostNetwork as i32;
    }
    w.workload_name = workload_name(pod);
    (w.canonical_name, w.canonical_revision) = canonical_service(&meta.labels, &w.workload_name);
    (w.waypoint, w.application_tunnel) = crate::waypoint::for_workload(&inputs.waypoints, inputs, ns, &meta.labels);
    set_tunnel(&meta.labels, &meta.annotations, &mut w);
    Some(w)
}

/// HBONE for a workload istio-cni redirected, or one labelled to take it
/// itself (`setTunnelProtocol`).
pub(crate) fn set_tunnel(labels: &BTreeMap<String, String>, annotations: &BTreeMap<String, String>, w: &mut Workload) {
    if annotations.get(REDIRECTION).is_some_and(|v| v == "enabled") {
        w.tunnel_protocol = TunnelProtocol::Hbone as i32;
    }
    if labels.get(TUNNEL).is_some_and(|v| v.split(',').any(|t| t == "http")) {
        w.tunnel_protocol = TunnelProtocol::Hbone as i32;
        w.native_tunnel = true;
    }
}

/// A WorkloadEntry's locality, `region/zone/subzone` (`getWorkloadEntryLocality`).
pub(crate) fn entry_locality(text: &str) -> Option<Locality> {
    let mut parts = text.splitn(3, '/');
    let l = Locality {
        region: parts.next().unwrap_or("").to_owned(),
        zone: parts.next().unwrap_or("").to_owned(),
        subzone: parts.next().unwrap_or("").to_owned(),
    };
    (l != Locality::default()).then_some(l)
}

/// A WorkloadEntry's uid (`generateWorkloadEntryUID`).
pub fn workload_entry_uid(cluster_id: &str, ns: &str, name: &str) -> String {
    format!("{cluster_id}/networking.istio.io/WorkloadEntry/{ns}/{name}")
}

/// The Workload of a WorkloadEntry (istiod's `workloadEntryWorkloadBuilder`):
/// its labels are the spec's overlaid with the object's; an address that
/// is not an IP is the workload's hostname; always healthy; selected by the
/// Kubernetes Services and ServiceEntries of its namespace.
pub fn from_workload_entry(
    o: &istiod_config::istio::IstioObject,
    we: &istiod_config::istio::networking::WorkloadEntry,
    inputs: &Inputs,
    services: &Services,
    settings: &Settings,
) -> Workload {
    entry_workload(o, we, inputs, services, settings).0
}

/// [`from_workload_entry`], with the entry's binding to its waypoint (its
/// `istio.io/WaypointBound` condition).
pub(crate) fn entry_workload(
    o: &istiod_config::istio::IstioObject,
    we: &istiod_config::istio::networking::WorkloadEntry,
    inputs: &Inputs,
    services: &Services,
    settings: &Settings,
) -> (Workload, crate::waypoint::Binding) {
    let meta = &o.meta;
    let ns = meta.ns();
    let labels = entry_labels(o, we);
    let mut w = Workload {
        uid: workload_entry_uid(&settings.cluster_id, ns, &meta.name),
        name: meta.name.clone(),
        namespace: ns.to_owned(),
        network: if we.network.is_empty() { crate::network(inputs, settings) } else { we.network.clone() },
        cluster_id: settings.cluster_id.clone(),
        service_account: we.service_account.clone(),
        authorization_policies: crate::authz::workload_policies(inputs, settings, ns, &labels),
        status: WorkloadStatus::Healthy as i32,
        trust_domain: crate::trust_domain(settings),
        locality: entry_locality(&we.locality),
        workload_type: WorkloadType::Pod as i32,
        ..Workload::default()
    };
    if we.weight > 0 {
        w.capacity = Some(we.weight);
    }
    match we.address.parse::<std::net::IpAddr>() {
        Ok(ip) => w.addresses = vec![crate::ip_bytes(ip)],
        Err(_) => w.hostname = we.address.clone(),
    }
    // The services of its namespace selecting it (Kubernetes Services too:
    // istiod's `PILOT_ENABLE_K8S_SELECT_WORKLOAD_ENTRIES`, on by default).
    w.services = entry_port_lists(&we.ports, services.in_ns(ns).filter(|s| selects(&s.selector, &labels)));
    w.workload_name = istiod_config::workload::entry_workload_name(&meta.name, &meta.annotations, &labels);
    (w.canonical_name, w.canonical_revision) = canonical_service(&labels, &w.workload_name);
    let binding;
    (w.waypoint, w.application_tunnel, binding) =
        crate::waypoint::workload_binding(&inputs.waypoints, inputs, ns, &labels);
    set_tunnel(&labels, &meta.annotations, &mut w);
    (w, binding)
}

/// The `services` map of a WorkloadEntry or a ServiceEntry endpoint
/// (`constructServicesFromWorkloadEntry`), whose `ports` map port names to
/// numbers: a Kubernetes Service's named `targetPort` must be there (else
/// the port is left out) and its port name may be; a ServiceEntry's port
/// name may be.
pub(crate) fn entry_port_lists<'a>(
    ports: &BTreeMap<String, u32>,
    services: impl Iterator<Item = &'a Info>,
) -> BTreeMap<String, PortList> {
    let mut out = BTreeMap::new();
    for si in services {
        let mut list = PortList::default();
        for p in &si.service.ports {
            let mut target = p.target_port;
            if let Some(named) = si.port_names.get(&p.service_port) {
                match si.source {
                    Source::Service if !named.target_port_name.is_empty() => match ports.get(&named.target_port_name) {
                        Some(n) => target = *n,
                        None => continue,
                    },
                    _ => match ports.get(&named.port_name) {
                        Some(n) => target = *n,
                        None if target == 0 && si.source == Source::ServiceEntry => target = p.service_port,
                        None => {}
                    },
                }
            }
            list.ports.push(Port { service_port: p.service_port, target_port: target, app_protocol: 0 });
        }
        out.insert(format!("{}/{}", si.service.namespace, si.service.hostname), list);
    }
    out
}

/// A WorkloadEntry's labels: the spec's, overlaid with the object's
/// (`ConvertClientWorkloadEntry`).
pub fn entry_labels(
    o: &istiod_config::istio::IstioObject,
    we: &istiod_config::istio::networking::WorkloadEntry,
) -> BTreeMap<String, String> {
    let mut labels = we.labels.clone();
    labels.extend(o.meta.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels
}

/// A Node's locality from its labels (`nodeLocality`).
pub fn locality(labels: &BTreeMap<String, String>) -> Option<Locality> {
    let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
    let l = Locality {
        region: get("topology.kubernetes.io/region"),
        zone: get("topology.kubernetes.io/zone"),
        subzone: get("topology.istio.io/subzone"),
    };
    (l != Locality::default()).then_some(l)
}

/// The `services` map (`constructServices`): per selecting service
/// (`<ns>/<hostname>`), its ports with the target port this pod listens
/// on. A Kubernetes Service's named `targetPort` is looked up among the
/// pod's TCP container ports, and a port whose name the pod lacks is left
/// out; a ServiceEntry's port name is looked up the same way, and where
/// the pod has none its target port stands.
fn port_lists<'a>(pod: &Pod, services: impl Iterator<Item = &'a Info>) -> BTreeMap<String, PortList> {
    let mut out = BTreeMap::new();
    for si in services {
        let mut list = PortList::default();
        for p in &si.service.ports {
            let mut target = p.target_port;
            if let Some(named) = si.port_names.get(&p.service_port) {
                if !named.target_port_name.is_empty() {
                    match find_port(pod, &named.target_port_name) {
                        Some(n) => target = n,
                        None => continue,
                    }
                } else if si.source == Source::ServiceEntry && !named.port_name.is_empty() {
                    match find_port(pod, &named.port_name) {
                        Some(n) => target = n,
                        None if target == 0 => target = p.service_port,
                        None => {}
                    }
                }
            }
            list.ports.push(Port { service_port: p.service_port, target_port: target, app_protocol: 0 });
        }
        out.insert(format!("{}/{}", si.service.namespace, si.service.hostname), list);
    }
    out
}

/// A TCP container port named `name` (`FindPortName`): the containers',
/// then the native sidecars' (init containers with `restartPolicy: Always`).
fn find_port(pod: &Pod, name: &str) -> Option<u32> {
    let sidecars = pod.spec.init_containers.iter().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    pod.spec.containers.iter().chain(sidecars).flat_map(|c| &c.ports).find_map(|p| {
        let tcp = p.protocol.as_deref().is_none_or(|p| p == "TCP");
        (tcp && p.name.as_deref() == Some(name)).then_some(u32::from(p.container_port))
    })
}

pub use istiod_config::workload::{canonical_service, workload_name};

/// A workload as `/debug/ambientz` shows it (the proto's JSON names).
pub fn describe(w: &Workload) -> Value {
    let services: serde_json::Map<String, Value> = w
        .services
        .iter()
        .map(|(k, v)| {
            let ports: Vec<Value> =
                v.ports.iter().map(|p| json!({"servicePort": p.service_port, "targetPort": p.target_port})).collect();
            (k.clone(), json!({ "ports": ports }))
        })
        .collect();
    json!({
        "uid": w.uid,
        "name": w.name,
        "namespace": w.namespace,
        "addresses": w.addresses.iter().map(|a| crate::debug_ip(a)).collect::<Vec<_>>(),
        "network": w.network,
        "tunnelProtocol": crate::enum_name(w.tunnel_protocol, |v| TunnelProtocol::try_from(v).ok().map(|t| t.as_str_name())),
        "nativeTunnel": w.native_tunnel,
        "networkMode": crate::enum_name(w.network_mode, |v| NetworkMode::try_from(v).ok().map(|t| t.as_str_name())),
        "trustDomain": w.trust_domain,
        "serviceAccount": w.service_account,
        "node": w.node,
        "clusterId": w.cluster_id,
        "workloadName": w.workload_name,
        "workloadType": crate::enum_name(w.workload_type, |v| WorkloadType::try_from(v).ok().map(|t| t.as_str_name())),
        "canonicalName": w.canonical_name,
        "canonicalRevision": w.canonical_revision,
        "status": crate::enum_name(w.status, |v| WorkloadStatus::try_from(v).ok().map(|t| t.as_str_name())),
        "services": services,
        "authorizationPolicies": w.authorization_policies,
        "locality": w.locality.as_ref().map(|l| json!({"region": l.region, "zone": l.zone, "subzone": l.subzone})),
        "waypoint": w.waypoint.as_ref().map(crate::waypoint::describe),
        "applicationTunnel": w.application_tunnel.as_ref().map(|t| json!({
            "protocol": crate::enum_name(t.protocol, |v| istiod_proto::istio::workload::application_tunnel::Protocol::try_from(v).ok().map(|p| p.as_str_name())),
            "port": if t.port == 0 { Value::Null } else { t.port.into() },
        })),
    })
}
