//! istio-agent's DNS name table (NDS,
//! `type.googleapis.com/istio.networking.nds.v1.NameTable`), as istiod's
//! `BuildNameTable` (`pkg/dns/server/name_table.go`, release 1.28) makes it
//! for one proxy: every service the proxy sees, by hostname, with the
//! addresses its DNS proxy answers with.
//!
//! - A service's addresses: a Kubernetes Service's cluster IPs for a proxy
//!   that names its cluster, else (a proxy that captures DNS, with
//!   allocation on) the addresses istiod allocated a ServiceEntry host,
//!   filtered to the proxy's IP families (not for a dual-stack proxy with
//!   `ISTIO_DUAL_STACK` or ambient); failing those, the service's own
//!   address (a ServiceEntry's each, a Kubernetes Service's first), or
//!   none (`0.0.0.0`, headless). What is not an IP (a CIDR) is left out.
//! - A headless service of passthrough resolution is answered with its
//!   ready endpoints on its first port (their pods' records too,
//!   `<hostname>.<subdomain>.<namespace>...`, the proxy's cluster's first);
//!   other networks' left out, and other clusters' unless
//!   `ENABLE_MULTICLUSTER_HEADLESS`.
//! - A Kubernetes Service's entry names its short name and namespace (the
//!   agent answers `name`, `name.ns`, ...), a ServiceEntry's none.

use std::collections::BTreeMap;
use std::net::IpAddr;

use istiod_proto::istio::networking::nds::v1::NameTable;
use istiod_proto::istio::networking::nds::v1::name_table::NameInfo;

use crate::model::{Health, Resolution, Service};

/// The label naming an endpoint's cluster (istiod's `AugmentLabels`).
const CLUSTER_LABEL: &str = "topology.istio.io/cluster";

/// What a name table depends on besides the services.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asker<'a> {
    /// The proxy's addresses (its IP families).
    pub ips: &'a [std::sync::Arc<str>],
    /// `NETWORK`.
    pub network: &'a str,
    /// `CLUSTER_ID`.
    pub cluster: &'a str,
    /// It takes allocated addresses (istiod's `nodeUsesAutoallocatedIPs`:
    /// `DNS_CAPTURE` or a waypoint, with allocation on).
    pub auto_allocated: bool,
    /// With `PILOT_ENABLE_IP_AUTOALLOCATE` off: the addresses istiod's
    /// legacy allocation gives each host ([`legacy_allocation`]), instead
    /// of the entries' status.
    pub legacy: Option<&'a std::collections::HashMap<std::sync::Arc<str>, Vec<String>>>,
}

/// The switches istiod reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flags {
    /// `ENABLE_MULTICLUSTER_HEADLESS` (true).
    pub multicluster_headless: bool,
    /// `ISTIO_DUAL_STACK` or `PILOT_ENABLE_AMBIENT`: a dual-stack proxy
    /// gets both families.
    pub dual_stack: bool,
}

impl Default for Flags {
    fn default() -> Self {
        Flags { multicluster_headless: true, dual_stack: false }
    }
}

/// The name table of `services` (those the proxy sees, in order) for
/// `asker`.
pub fn name_table<'s>(services: impl IntoIterator<Item = &'s Service>, asker: &Asker<'_>, flags: Flags) -> NameTable {
    let mut table: BTreeMap<String, NameInfo> = BTreeMap::new();
    for svc in services {
        let registry = if svc.kubernetes { "Kubernetes" } else { "External" };
        let mut ips = Vec::new();
        let mut headless = false;
        for a in addresses(svc, asker, flags) {
            if a == "0.0.0.0" {
                headless = true;
                break;
            }
            if a.parse::<IpAddr>().is_ok() {
                ips.push(a);
            }
        }
        if headless && svc.resolution == Resolution::Passthrough && !svc.ports.is_empty() {
            pods(svc, asker, flags, registry, &mut ips, &mut table);
        }
        if ips.is_empty() {
            continue;
        }
        let mcs = svc.hostname.ends_with(".clusterset.local");
        match table.get_mut(&*svc.hostname) {
            None => {
                let mut info = NameInfo { ips, registry: registry.into(), ..Default::default() };
                if svc.kubernetes && !mcs {
                    info.namespace.clone_from(&svc.namespace);
                    info.shortname.clone_from(&svc.name);
                }
                table.insert(svc.hostname.to_string(), info);
            }
            // A Kubernetes Service wins over a ServiceEntry of its host;
            // ServiceEntries' addresses add up.
            Some(info) if info.registry != "Kubernetes" => {
                if svc.kubernetes {
                    info.ips = ips;
                    info.registry = registry.into();
                    if !mcs {
                        info.namespace.clone_from(&svc.namespace);
                        info.shortname.clone_from(&svc.name);
                    }
                } else {
                    info.ips.extend(ips);
                }
            }
            Some(_) => {}
        }
    }
    NameTable { table: table.into_iter().collect() }
}

/// What a name table reads of `svc`: its hash. The mesh keeps the sum of
/// its services' (a change of one service changes it, and it is kept up
/// to date one service at a time).
pub fn digest(svc: &Service) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&svc.hostname, svc.kubernetes, &svc.name, &svc.namespace, &svc.vips, &svc.auto_addresses).hash(&mut h);
    (svc.resolution == Resolution::Passthrough, svc.ports.first().map(|p| p.port), &svc.export_to).hash(&mut h);
    if svc.resolution == Resolution::Passthrough {
        for e in &svc.endpoints {
            let cluster = e.labels.get(CLUSTER_LABEL);
            (&e.address, e.service_port, e.health == Health::Healthy, &e.network, cluster, &e.dns_name).hash(&mut h);
            e.extra_addresses.hash(&mut h);
        }
    }
    h.finish()
}

/// The endpoints of a headless service: their addresses into `ips`, and
/// their pods' own records into `table`.
fn pods(
    svc: &Service,
    asker: &Asker<'_>,
    flags: Flags,
    registry: &str,
    ips: &mut Vec<String>,
    table: &mut BTreeMap<String, NameInfo>,
) {
    let port = svc.ports[0].port;
    let mut local: Vec<(String, Vec<String>)> = Vec::new();
    let mut remote: Vec<(String, Vec<String>)> = Vec::new();
    let mut short: BTreeMap<String, String> = BTreeMap::new();
    for ep in svc.endpoints.iter().filter(|e| e.service_port == port) {
        if ep.address.parse::<IpAddr>().is_err() || ep.health != Health::Healthy {
            continue;
        }
        let same_network = ep.network.is_empty() || asker.network.is_empty() || ep.network == asker.network;
        let cluster = ep.labels.get(CLUSTER_LABEL).map_or("", String::as_str);
        let same_cluster = cluster.is_empty() || asker.cluster.is_empty() || cluster == asker.cluster;
        if let Some(name) = ep.dns_name.as_deref().filter(|_| same_network) {
            let Some((_, domain)) = svc.hostname.split_once('.') else { continue };
            let host = format!("{name}.{domain}");
            short.insert(host.clone(), name.to_owned());
            let side = if same_cluster { &mut local } else { &mut remote };
            // (A dual-stack Pod's every address, as istiod's
            // instance.Addresses.)
            let all = std::iter::once(&ep.address).chain(&ep.extra_addresses).cloned();
            match side.iter_mut().find(|(h, _)| *h == host) {
                Some((_, v)) => v.extend(all),
                None => side.push((host, all.collect())),
            }
        }
        if (!flags.multicluster_headless && !same_cluster) || !same_network {
            continue;
        }
        ips.push(ep.address.clone());
        ips.extend(ep.extra_addresses.iter().cloned());
    }
    let record = |host: &str, ips: Vec<String>| NameInfo {
        ips,
        registry: registry.into(),
        shortname: short.get(host).cloned().unwrap_or_default(),
        namespace: svc.namespace.clone(),
        ..Default::default()
    };
    let local_hosts: Vec<String> = local.iter().map(|(h, _)| h.clone()).collect();
    for (host, v) in local {
        let info = record(&host, v);
        table.insert(host, info);
    }
    for (host, v) in remote.into_iter().filter(|(h, _)| !local_hosts.contains(h)) {
        let info = record(&host, v);
        table.insert(host, info);
    }
}

/// istiod's `GetAllAddressesForProxy`, for our services: a Kubernetes
/// Service's cluster IPs stand for its `ClusterVIPs` of the proxy's
/// cluster, a ServiceEntry's addresses for its services' default
/// addresses.
fn addresses(svc: &Service, asker: &Asker<'_>, flags: Flags) -> Vec<String> {
    let mut out: Vec<String> = if svc.kubernetes && !asker.cluster.is_empty() { svc.vips.clone() } else { Vec::new() };
    if out.is_empty() && asker.auto_allocated {
        match asker.legacy {
            Some(map) => out = map.get(&svc.hostname).cloned().unwrap_or_default(),
            None => out.clone_from(&svc.auto_addresses),
        }
    }
    let (v4, v6) = families(asker.ips);
    if !(flags.dual_stack && v4 && v6) {
        out = filter_families(out, v4, v6);
    }
    if !out.is_empty() {
        return out;
    }
    match svc.vips.first() {
        None => vec!["0.0.0.0".to_owned()],
        Some(first) if svc.kubernetes => vec![first.clone()],
        // A ServiceEntry address is a service of its own: a CIDR of one
        // address is that address.
        Some(_) => svc.vips.iter().map(|a| single(a).unwrap_or_else(|| a.clone())).collect(),
    }
}

/// `a/32` or `a/128`: `a`.
fn single(cidr: &str) -> Option<String> {
    let (ip, bits) = cidr.split_once('/')?;
    let ip: IpAddr = ip.parse().ok()?;
    let full = if ip.is_ipv4() { "32" } else { "128" };
    (bits == full).then(|| ip.to_string())
}

/// The proxy's IP families (istiod's `DiscoverIPMode`: no IPv6 address is
/// IPv4, even with no address at all).
fn families(ips: &[std::sync::Arc<str>]) -> (bool, bool) {
    let parsed: Vec<IpAddr> = ips.iter().filter_map(|i| i.parse().ok()).collect();
    let v6 = parsed.iter().any(IpAddr::is_ipv6);
    let v4 = parsed.iter().any(IpAddr::is_ipv4);
    match (v4, v6) {
        (_, false) => (true, false),
        (false, true) => (false, true),
        (true, true) => (true, true),
    }
}

/// istiod's legacy allocation (`serviceentry/auto_allocation.go`
/// `autoAllocateIPs`, with `PILOT_ENABLE_IP_AUTOALLOCATE` off, for proxies
/// with `DNS_AUTO_ALLOCATE`): every ServiceEntry host without addresses
/// (not a wildcard, not NONE) is placed by the FNV-1a hash of
/// `<namespace>/<host>` among 65,024 slots (double hashing on a
/// collision), and the slots are then numbered in order into
/// `240.240.<x/255>.<x%255>` and `2001:2::f0f0:<hex>`.
pub fn legacy_allocation<'s>(
    services: impl IntoIterator<Item = &'s Service>,
) -> std::collections::HashMap<std::sync::Arc<str>, Vec<String>> {
    const MAX_IPS: u32 = 256 * 254;
    const PRIME: u32 = 65_011;
    let fnv = |key: &str| key.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    let mut slots: Vec<Option<(&'s Service, String)>> = vec![None; MAX_IPS as usize];
    let mut placed = 0u32;
    for svc in services {
        if svc.kubernetes
            || !svc.vips.is_empty()
            || svc.hostname.starts_with('*')
            || svc.resolution == Resolution::Passthrough
        {
            continue;
        }
        if placed >= MAX_IPS {
            tracing::error!(target: "model", "out of IPs to allocate for service entries. maxips:= {MAX_IPS}");
            break;
        }
        let key = format!("{}/{}", svc.namespace, svc.hostname);
        let h = fnv(&key);
        let mut slot = h % MAX_IPS;
        if slots[slot as usize].is_some() {
            let second = PRIME - h % PRIME;
            let mut i = 1u32;
            loop {
                slot = h.wrapping_add(i.wrapping_mul(second)) % (MAX_IPS - 1);
                if slots[slot as usize].is_none() {
                    break;
                }
                i += 1;
            }
        }
        slots[slot as usize] = Some((svc, key));
        placed += 1;
    }
    let mut by_key: std::collections::HashMap<String, (u32, u32)> = std::collections::HashMap::new();
    let mut out = std::collections::HashMap::new();
    let mut x = 0u32;
    for slot in slots {
        x += 1;
        let Some((svc, key)) = slot else { continue };
        if x.is_multiple_of(255) {
            x += 1;
        }
        let (a, b) = *by_key.entry(key).or_insert((x / 255, x % 255));
        let v6 = if a == 0 { format!("2001:2::f0f0:{b:x}") } else { format!("2001:2::f0f0:{a:x}{b:x}") };
        out.insert(svc.hostname.clone(), vec![format!("240.240.{a}.{b}"), v6]);
    }
    out
}

/// Stand-ins for a proxy's addresses that keep only their families
/// (`0.0.0.0`, `::`, both), which is all a name table reads of them.
pub fn family_markers(ips: &[std::sync::Arc<str>]) -> Vec<std::sync::Arc<str>> {
    let (v4, v6) = families(ips);
    let mut out = Vec::new();
    if v4 {
        out.push(std::sync::Arc::from("0.0.0.0"));
    }
    if v6 {
        out.push(std::sync::Arc::from("::"));
    }
    out
}

/// istiod's `filterAddresses`: those of the families the proxy has; a
/// dual-stack proxy, the family of the first.
fn filter_families(addresses: Vec<String>, v4: bool, v6: bool) -> Vec<String> {
    if addresses.is_empty() {
        return addresses;
    }
    let family = |a: &str| a.split('/').next().and_then(|ip| ip.parse::<IpAddr>().ok()).map(|ip| ip.is_ipv4());
    let (fours, sixes): (Vec<String>, Vec<String>) =
        addresses.iter().filter(|a| family(a).is_some()).cloned().partition(|a| family(a) == Some(true));
    let (fours, sixes) = (if v4 { fours } else { Vec::new() }, if v6 { sixes } else { Vec::new() });
    if v4 && v6 {
        match family(&addresses[0]) {
            Some(true) => return fours,
            Some(false) => return sixes,
            None => {}
        }
    }
    if fours.is_empty() { sixes } else { fours }
}

#[cfg(test)]
mod tests;
