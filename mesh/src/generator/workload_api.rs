//! The names an on-demand ztunnel subscribes by (istiod's ambient index
//! `Lookup`): a workload's `<network>/<ip>` stands for the workloads with
//! that address; a service's `<network>/<vip>` and its own name
//! (`<ns>/<hostname>`) stand for the service and the workloads that list
//! it; `node:<name>` (no resource name is without a `/`) stands for the
//! workloads on that node, which a ztunnel is sent unasked (istiod's
//! `AdditionalPodSubscriptions`). Read from the encoded `Address` resources
//! of a snapshot.

use std::collections::HashMap;

use istiod_proto::istio::workload::NetworkAddress;
use std::net::IpAddr;
use std::sync::Arc;

use istiod_proto::istio::workload::{Address, address};
use istiod_proto::prost::Message;
use istiod_xds_api::snapshot::{Aliases, Kind, SimpleModel};

/// `<network>/<ip>` for an address of 4 or 16 bytes.
fn network_ip(network: &str, bytes: &[u8]) -> Option<String> {
    let ip = match bytes.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
        16 => IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?),
        _ => return None,
    };
    Some(format!("{network}/{ip}"))
}

/// The name that stands for the workloads on node `node`.
pub fn node_alias(node: &str) -> Arc<str> {
    Arc::from(format!("node:{node}"))
}

/// The aliases of the workload API's `Address` resources in `model`; each
/// resource goes out with its addresses' names as its aliases (istiod's
/// `AddressInfo.Aliases`: `<network>/<ip>`, a CIDR's `<network>/<ip>/<len>`).
pub fn aliases(model: &SimpleModel) -> Aliases {
    let mut stands_for: HashMap<Arc<str>, Vec<Arc<str>>> = HashMap::new();
    let mut of: HashMap<Arc<str>, Vec<Arc<str>>> = HashMap::new();
    let mut services: Vec<(Arc<str>, Vec<String>)> = Vec::new();
    let mut by_service: HashMap<String, Vec<Arc<str>>> = HashMap::new();
    for (name, r) in model.resources[Kind::Address as usize].iter() {
        let Ok(a) = Address::decode(r.body.clone()) else { continue };
        match a.r#type {
            Some(address::Type::Workload(w)) => {
                let ips: Vec<String> = w.addresses.iter().filter_map(|b| network_ip(&w.network, b)).collect();
                for ip in &ips {
                    stands_for.entry(ip.as_str().into()).or_default().push(name.clone());
                }
                of.insert(name.clone(), ips.into_iter().map(Arc::from).collect());
                for svc in w.services.into_keys() {
                    by_service.entry(svc).or_default().push(name.clone());
                }
                if !w.node.is_empty() {
                    stands_for.entry(node_alias(&w.node)).or_default().push(name.clone());
                }
            }
            Some(address::Type::Service(s)) => {
                let vips: Vec<String> = s.addresses.iter().filter_map(|a| network_ip(&a.network, &a.address)).collect();
                of.insert(name.clone(), s.addresses.iter().filter_map(service_alias).map(Arc::from).collect());
                services.push((name.clone(), vips));
            }
            None => {}
        }
    }
    // A workload's address is looked up before a service's.
    for (name, vips) in services {
        let mut all = vec![name.clone()];
        all.extend(by_service.get(&*name).into_iter().flatten().cloned());
        for vip in vips {
            stands_for.entry(vip.into()).or_insert_with(|| all.clone());
        }
        stands_for.insert(name, all);
    }
    Aliases { stands_for, of }
}

/// A service address's alias: `<network>/<ip>`, with `/<len>` for a CIDR.
fn service_alias(a: &NetworkAddress) -> Option<String> {
    let base = network_ip(&a.network, &a.address)?;
    Some(match a.length {
        Some(len) => format!("{base}/{len}"),
        None => base,
    })
}
