//! A Kubernetes Service's EndpointSlices, for the endpoints no Pod stands
//! behind (istiod's `endpointSlicesBuilder`,
//! `pilot/pkg/serviceregistry/ambient/workloads.go`): each is a workload of
//! its own, and a Pod an EndpointSlice names lists that Service even where
//! no selector selects it (`matchingServicesWithoutSelectors`).

use std::collections::BTreeSet;
use std::net::IpAddr;

use istiod_config::objects::{EndpointSlice, Pod};
use istiod_proto::istio::workload::{NetworkMode, Port, PortList, Workload, WorkloadStatus};

use crate::service::{Info, Source};
use crate::{Inputs, Key, Services, Settings};

/// An EndpointSlice workload's uid: `<cluster>/discovery.k8s.io/EndpointSlice/<ns>/<name>/<address>`.
pub fn uid(cluster_id: &str, ns: &str, name: &str, address: &str) -> String {
    format!("{cluster_id}/discovery.k8s.io/EndpointSlice/{ns}/{name}/{address}")
}

/// Whether istiod reads `es` at all: it belongs to a Service and its
/// addresses are IPs (FQDN slices are not supported).
fn read(es: &EndpointSlice) -> bool {
    es.service_name().is_some() && es.address_type != "FQDN"
}

/// The Pods `es` names (`targetRef` of kind Pod), by namespace and name,
/// with the uid it names them by.
pub(crate) fn pod_refs(es: &EndpointSlice) -> BTreeSet<(Key, String)> {
    if !read(es) {
        return BTreeSet::new();
    }
    es.endpoints
        .iter()
        .filter_map(|e| e.target_ref.as_ref())
        .filter(|r| r.kind == "Pod")
        .map(|r| ((r.namespace.clone().unwrap_or_default(), r.name.clone()), r.uid.clone().unwrap_or_default()))
        .collect()
}

/// Whether `es` names `pod`: kind, namespace, name and uid, as istiod's
/// `TargetRef` index matches.
fn names_pod(es: &EndpointSlice, pod: &Pod) -> bool {
    read(es)
        && es.endpoints.iter().filter_map(|e| e.target_ref.as_ref()).any(|r| {
            r.kind == "Pod"
                && r.namespace.as_deref().unwrap_or("") == pod.metadata.ns()
                && r.name == pod.metadata.name
                && r.uid.as_deref().unwrap_or("") == pod.metadata.uid.as_deref().unwrap_or("")
        })
}

/// The Kubernetes Service `es` belongs to, as the index serves it.
fn service<'a>(es: &EndpointSlice, services: &'a Services, domain: &str) -> Option<&'a Info> {
    let ns = es.metadata.ns();
    let host = format!("{}.{ns}.svc.{domain}", es.service_name()?);
    services.get(ns, &host).filter(|i| i.source == Source::Service)
}

/// The services a Pod lists because an EndpointSlice names it, less the
/// hostnames it lists already.
pub(crate) fn pod_services<'a>(
    pod: &Pod,
    already: &[&'a Info],
    inputs: &'a Inputs,
    services: &'a Services,
    settings: &Settings,
) -> Vec<&'a Info> {
    let mut seen: BTreeSet<&str> = already.iter().map(|i| i.service.hostname.as_str()).collect();
    let mut out = Vec::new();
    let k = (pod.metadata.ns().to_owned(), pod.metadata.name.clone());
    for sk in inputs.slices_by_pod.get(&k).into_iter().flatten() {
        let Some(es) = inputs.slices.get(sk) else { continue };
        if !names_pod(es, pod) {
            continue;
        }
        if let Some(info) = service(es, services, &settings.domain)
            && seen.insert(info.service.hostname.as_str())
        {
            out.push(info);
        }
    }
    out
}

/// The workloads of `es`'s endpoints that name no Pod: host-network
/// workloads of the Service alone, healthy unless not ready, with the
/// slice's TCP ports joined to the Service's by name.
pub fn workloads(es: &EndpointSlice, services: &Services, inputs: &Inputs, settings: &Settings) -> Vec<Workload> {
    if !read(es) {
        return Vec::new();
    }
    let Some(svc) = service(es, services, &settings.domain) else {
        return Vec::new();
    };
    let ns = es.metadata.ns();
    let mut list = PortList::default();
    for p in &es.ports {
        let (Some(name), Some(port)) = (&p.name, p.port) else { continue };
        if p.protocol.as_deref().unwrap_or("TCP") != "TCP" {
            continue;
        }
        let matching = svc
            .service
            .ports
            .iter()
            .find(|sp| svc.port_names.get(&sp.service_port).is_some_and(|n| n.port_name == *name));
        if let Some(sp) = matching {
            list.ports.push(Port { service_port: sp.service_port, target_port: port.into(), app_protocol: 0 });
        }
    }
    let key = format!("{ns}/{}", svc.service.hostname);
    let network = crate::network(inputs, settings);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for ep in &es.endpoints {
        if ep.target_ref.as_ref().is_some_and(|r| r.kind == "Pod") {
            continue; // the Pod is a workload already
        }
        let Some(first) = ep.addresses.first() else { continue };
        if !seen.insert(first.as_str()) {
            tracing::warn!(target: "ambient", "IP address {first} seen twice in {ns}/{}", es.metadata.name);
            continue;
        }
        let Ok(addresses) =
            ep.addresses.iter().map(|a| a.parse::<IpAddr>().map(crate::ip_bytes)).collect::<Result<Vec<_>, _>>()
        else {
            tracing::warn!(target: "ambient", "invalid address in endpointslice {ns}/{}", es.metadata.name);
            continue;
        };
        out.push(Workload {
            uid: uid(&settings.cluster_id, ns, &es.metadata.name, first),
            name: es.metadata.name.clone(),
            namespace: ns.to_owned(),
            addresses,
            network: network.clone(),
            trust_domain: crate::trust_domain(settings),
            services: [(key.clone(), list.clone())].into_iter().collect(),
            status: if ep.conditions.ready.unwrap_or(true) {
                WorkloadStatus::Healthy
            } else {
                WorkloadStatus::Unhealthy
            } as i32,
            cluster_id: settings.cluster_id.clone(),
            network_mode: NetworkMode::HostNetwork as i32,
            ..Workload::default()
        });
    }
    out
}
