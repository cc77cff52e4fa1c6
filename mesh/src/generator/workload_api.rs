//! The names an on-demand ztunnel subscribes by (istiod's ambient index
//! `Lookup`): a workload's `<network>/<ip>` stands for the workloads with
//! that address; a service's `<network>/<vip>` and its own name
//! (`<ns>/<hostname>`) stand for the service and the workloads that list
//! it. Read from the encoded `Address` resources of a snapshot.

use std::collections::HashMap;
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

/// The aliases of the workload API's `Address` resources in `model`.
pub fn aliases(model: &SimpleModel) -> Aliases {
    let mut by_ip: Aliases = HashMap::new();
    let mut services: Vec<(Arc<str>, Vec<String>)> = Vec::new();
    let mut by_service: HashMap<&str, Vec<Arc<str>>> = HashMap::new();
    let decoded: Vec<(Arc<str>, Address)> = model.resources[Kind::Address as usize]
        .iter()
        .filter_map(|(name, r)| Some((name.clone(), Address::decode(r.body.clone()).ok()?)))
        .collect();
    for (name, a) in &decoded {
        match &a.r#type {
            Some(address::Type::Workload(w)) => {
                for ip in w.addresses.iter().filter_map(|b| network_ip(&w.network, b)) {
                    by_ip.entry(ip.into()).or_default().push(name.clone());
                }
                for svc in w.services.keys() {
                    by_service.entry(svc.as_str()).or_default().push(name.clone());
                }
            }
            Some(address::Type::Service(s)) => {
                let vips = s.addresses.iter().filter_map(|a| network_ip(&a.network, &a.address)).collect();
                services.push((name.clone(), vips));
            }
            None => {}
        }
    }
    // A workload's address is looked up before a service's.
    let mut out = by_ip;
    for (name, vips) in services {
        let mut all = vec![name.clone()];
        all.extend(by_service.get(&*name).into_iter().flatten().cloned());
        for vip in vips {
            out.entry(vip.into()).or_insert_with(|| all.clone());
        }
        out.insert(name, all);
    }
    out
}
