//! A ServiceEntry as ztunnel's `Service`s, one per host (istiod's
//! `serviceEntryServiceBuilder` and `constructServiceEntries`,
//! `pilot/pkg/serviceregistry/ambient/services.go`), and its endpoints as
//! `Workload`s (`serviceEntryWorkloadBuilder`, `workloads.go`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use istiod_config::istio::IstioObject;
use istiod_config::istio::networking::{Resolution, ServiceEntry, WorkloadEntry};
use istiod_mesh::model::Protocol;
use istiod_proto::istio::workload::{
    LoadBalancing, NetworkAddress, Port, Service as WdsService, Workload, WorkloadStatus, WorkloadType, load_balancing,
};

use crate::service::{Info, PortName, Source};
use crate::{Inputs, Settings};

/// A ServiceEntry workload's uid (`generateServiceEntryUID`).
pub fn uid(cluster_id: &str, ns: &str, name: &str, address: &str) -> String {
    format!("{cluster_id}/networking.istio.io/ServiceEntry/{ns}/{name}/{address}")
}

/// An address or CIDR as the workload API carries it (`toNetworkAddressFromCidr`):
/// a CIDR masked to its network, with its length unless it is one address.
pub fn network_address(text: &str, network: &str) -> Option<NetworkAddress> {
    let (ip, bits) = match text.split_once('/') {
        Some((ip, bits)) => {
            let ip: IpAddr = ip.parse().ok()?;
            let bits: u8 = bits.parse().ok()?;
            (ip, Some(bits))
        }
        None => (text.parse().ok()?, None),
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = bits.unwrap_or(max);
    if bits > max || (text.contains('/') && !valid_prefix_text(text)) {
        return None;
    }
    let masked = mask(ip, bits);
    Some(NetworkAddress {
        network: network.to_owned(),
        address: crate::ip_bytes(masked),
        length: (bits != max).then_some(u32::from(bits)),
    })
}

/// Go's `ParsePrefix` refuses a length with a sign or leading zeros.
fn valid_prefix_text(text: &str) -> bool {
    let bits = text.rsplit('/').next().unwrap_or("");
    !bits.is_empty() && bits.bytes().all(|b| b.is_ascii_digit()) && (bits == "0" || !bits.starts_with('0'))
}

fn mask(ip: IpAddr, bits: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = if bits == 0 { 0 } else { u32::MAX << (32 - u32::from(bits)) };
            IpAddr::V4((u32::from(v4) & m).into())
        }
        IpAddr::V6(v6) => {
            let m = if bits == 0 { 0 } else { u128::MAX << (128 - u32::from(bits)) };
            IpAddr::V6((u128::from(v6) & m).into())
        }
    }
}

/// The services of ServiceEntry `o`, one per host, before a shared
/// hostname is resolved (`serviceEntriesInfo`). None if an address does
/// not parse, as istiod.
pub fn infos(o: &IstioObject, se: &ServiceEntry, inputs: &Inputs, settings: &Settings) -> Vec<Info> {
    let meta = &o.meta;
    let ns = meta.ns();
    let network = crate::network(inputs, settings);
    let mut addresses = Vec::with_capacity(se.addresses.len());
    for a in &se.addresses {
        match network_address(a, &network) {
            Some(na) => addresses.push(na),
            None => return Vec::new(),
        }
    }
    let ports: Vec<Port> = se
        .ports
        .iter()
        .map(|p| Port {
            service_port: p.number,
            target_port: if p.target_port == 0 { p.number } else { p.target_port },
            app_protocol: crate::service::app_protocol(Protocol::parse(&p.protocol)) as i32,
        })
        .collect();
    let load_balancing = if se.resolution == Resolution::None {
        Some(LoadBalancing {
            mode: load_balancing::Mode::Passthrough as i32,
            health_policy: load_balancing::HealthPolicy::AllowAll as i32,
            ..LoadBalancing::default()
        })
    } else {
        let ns_annotations = inputs.namespace(ns).map(|n| &n.metadata.annotations);
        crate::service::traffic_distribution(None, &meta.annotations, ns_annotations).balancing()
    };
    let port_names: BTreeMap<u32, PortName> =
        se.ports.iter().map(|p| (p.number, PortName { port_name: p.name.clone(), ..PortName::default() })).collect();
    let selector = se.workload_selector.as_ref().map(|s| s.labels.clone()).unwrap_or_default();
    let mut template = WdsService {
        name: meta.name.clone(),
        namespace: ns.to_owned(),
        subject_alt_names: se.subject_alt_names.clone(),
        load_balancing,
        ..WdsService::default()
    };
    let binding = crate::service::set_waypoint(&mut template, &meta.labels, &meta.annotations, inputs);
    se.hosts
        .iter()
        .map(|h| Info {
            source: Source::ServiceEntry,
            object: meta.name.clone(),
            service: WdsService {
                hostname: h.clone(),
                addresses: addresses.clone(),
                ports: ports.clone(),
                ..template.clone()
            },
            selector: selector.clone(),
            port_names: port_names.clone(),
            created: meta.creation_timestamp.clone(),
            binding: binding.clone(),
            generation: meta.generation,
            racing_connect: meta
                .annotations
                .get("istio.io/connect-strategy")
                .is_some_and(|v| v.eq_ignore_ascii_case("RACE_FIRST_TCP_CONNECT")),
        })
        .collect()
}

/// The workloads of ServiceEntry `o`'s endpoints (`serviceEntryWorkloadBuilder`),
/// given the services it won (`won`, none: it lost every hostname and
/// has no workloads). A DNS ServiceEntry without endpoints or selector
/// has one workload per host, named by it.
pub fn workloads(
    o: &IstioObject,
    se: &ServiceEntry,
    won: &[&Info],
    inputs: &Inputs,
    settings: &Settings,
) -> Vec<Workload> {
    let implicit = se.endpoints.is_empty()
        && matches!(se.resolution, Resolution::Dns | Resolution::DynamicDns | Resolution::DnsRoundRobin)
        && se.workload_selector.is_none();
    if (se.endpoints.is_empty() && !implicit) || won.is_empty() {
        return Vec::new();
    }
    let meta = &o.meta;
    let ns = meta.ns();
    let implicit_eps: Vec<WorkloadEntry>;
    let eps: &[WorkloadEntry] = if implicit {
        implicit_eps = won
            .iter()
            .map(|si| WorkloadEntry { address: si.service.hostname.clone(), ..WorkloadEntry::default() })
            .collect();
        &implicit_eps
    } else {
        &se.endpoints
    };
    let policies = crate::authz::workload_policies(inputs, settings, ns, &meta.labels);
    let local = crate::network(inputs, settings);
    let (canonical_name, canonical_revision) = crate::workload::canonical_service(&meta.labels, &meta.name);
    eps.iter()
        .enumerate()
        .map(|(i, ep)| {
            let services: &[&Info] = if implicit { &won[i..=i] } else { won };
            let mut w = Workload {
                uid: uid(&settings.cluster_id, ns, &meta.name, &ep.address),
                name: meta.name.clone(),
                namespace: ns.to_owned(),
                network: if ep.network.is_empty() { local.clone() } else { ep.network.clone() },
                cluster_id: settings.cluster_id.clone(),
                service_account: ep.service_account.clone(),
                services: crate::workload::entry_port_lists(&ep.ports, services.iter().copied()),
                authorization_policies: policies.clone(),
                status: WorkloadStatus::Healthy as i32,
                trust_domain: crate::trust_domain(settings),
                locality: crate::workload::entry_locality(&ep.locality),
                workload_name: meta.name.clone(),
                workload_type: WorkloadType::Pod as i32,
                canonical_name: canonical_name.clone(),
                canonical_revision: canonical_revision.clone(),
                ..Workload::default()
            };
            if ep.weight > 0 {
                w.capacity = Some(ep.weight);
            }
            match ep.address.parse::<IpAddr>() {
                Ok(ip) => w.addresses = vec![crate::ip_bytes(ip)],
                Err(_) => w.hostname = ep.address.clone(),
            }
            if !implicit {
                (w.waypoint, w.application_tunnel) =
                    crate::waypoint::for_workload(&inputs.waypoints, inputs, ns, &ep.labels);
            }
            crate::workload::set_tunnel(&meta.labels, &meta.annotations, &mut w);
            w
        })
        .collect()
}
