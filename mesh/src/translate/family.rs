//! A proxy's IP families (istiod's `IPMode`, from the addresses it
//! sent) and what they change in its configuration
//! (`listener_address.go`, `ISTIO_DUAL_STACK`): the listeners' wildcard
//! addresses, the address inbound traffic is sent from (which iptables
//! lets through), the DNS clusters' lookup family, and the extra addresses
//! a dual-stack proxy listens on.
//!
//! The shared translation is what an IPv4 proxy gets; [`adapt`] turns a
//! shared listener or cluster into an IPv6 or dual-stack proxy's.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use istiod_proto::envoy::config::cluster::v3::{Cluster, cluster};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::listener::v3::{AdditionalAddress, Listener};
use istiod_proto::prost::Message;

use crate::meshconfig::MeshSettings;
use crate::model::Model;

/// istiod's `IPMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpMode {
    /// Only IPv4 addresses, or none.
    V4,
    /// Only IPv6 addresses (`::ffff:a.b.c.d` among them).
    V6,
    /// Both.
    Dual,
}

/// istiod's `DiscoverIPMode` over the proxy's addresses.
pub fn ip_mode(ips: &[Arc<str>]) -> IpMode {
    let parsed: Vec<IpAddr> = ips.iter().filter_map(|i| i.parse().ok()).collect();
    match (parsed.iter().any(IpAddr::is_ipv4), parsed.iter().any(IpAddr::is_ipv6)) {
        (true, true) => IpMode::Dual,
        (false, true) => IpMode::V6,
        _ => IpMode::V4,
    }
}

impl IpMode {
    /// istiod's wildcards of the mode (`getWildcardsAndLocalHost`).
    pub fn wildcards(self) -> &'static [&'static str] {
        match self {
            IpMode::V4 => &["0.0.0.0"],
            IpMode::V6 => &["::"],
            IpMode::Dual => &["0.0.0.0", "::"],
        }
    }

    /// istiod's `getPassthroughBindIPs`: where inbound traffic is sent
    /// from to the application (iptables lets these through); a
    /// dual-stack proxy's both only under `ISTIO_DUAL_STACK`.
    pub fn passthrough_binds(self, dual_stack: bool) -> &'static [&'static str] {
        match self {
            IpMode::V4 => &["127.0.0.6"],
            IpMode::V6 => &["::6"],
            IpMode::Dual if dual_stack => &["127.0.0.6", "::6"],
            IpMode::Dual => &["127.0.0.6"],
        }
    }

    /// istiod's `SelectDNSLookupFamily`: V4_ONLY, V6_ONLY for an IPv6
    /// proxy (ALL under `ISTIO_ENABLE_IPV4_OUTBOUND_LISTENER_FOR_IPV6_CLUSTERS`,
    /// `v4_for_v6`), ALL for a dual-stack one under `ISTIO_DUAL_STACK`.
    pub fn dns_lookup_family(self, dual_stack: bool, v4_for_v6: bool) -> cluster::DnsLookupFamily {
        match self {
            IpMode::V6 if v4_for_v6 => cluster::DnsLookupFamily::All,
            IpMode::V6 => cluster::DnsLookupFamily::V6Only,
            IpMode::Dual if dual_stack => cluster::DnsLookupFamily::All,
            _ => cluster::DnsLookupFamily::V4Only,
        }
    }
}

/// The listener's `additional_addresses` on `addresses` and `port`.
pub fn additional(addresses: &[&str], port: u32) -> Vec<AdditionalAddress> {
    addresses
        .iter()
        .map(|a| AdditionalAddress { address: super::envoy::socket(a, port), socket_options: None })
        .collect()
}

/// `upstream_bind_config` sending from `binds` (the first, the others as
/// extra source addresses).
pub fn bind_config(binds: &[&str]) -> core::BindConfig {
    let source = |a: &str| core::SocketAddress {
        address: a.to_owned(),
        port_specifier: Some(core::socket_address::PortSpecifier::PortValue(0)),
        ..Default::default()
    };
    core::BindConfig {
        source_address: binds.first().map(|a| source(a)),
        extra_source_addresses: binds[1..]
            .iter()
            .map(|a| core::ExtraSourceAddress { address: Some(source(a)), socket_options: None })
            .collect(),
        ..Default::default()
    }
}

/// A listener's port, when it listens on a socket address.
fn port_of(l: &Listener) -> Option<u32> {
    match l.address.as_ref()?.address.as_ref()? {
        core::address::Address::SocketAddress(s) => match s.port_specifier {
            Some(core::socket_address::PortSpecifier::PortValue(p)) => Some(p),
            _ => None,
        },
        _ => None,
    }
}

/// Every cluster IP of the Kubernetes Services that have more than one,
/// each to all of them in order (the listeners of a dual-stack Service).
pub type DualVips = std::collections::HashMap<Arc<str>, Arc<[String]>>;

/// [`DualVips`] of `model`.
pub fn dual_vips(model: &Model) -> DualVips {
    let mut out = DualVips::new();
    for svc in model.services.values().filter(|s| s.kubernetes && s.vips.len() > 1) {
        let all: Arc<[String]> = svc.vips.clone().into();
        for v in &svc.vips {
            out.insert(Arc::from(v.as_str()), all.clone());
        }
    }
    out
}

fn is_v6(a: &str) -> bool {
    a.parse::<std::net::Ipv6Addr>().is_ok()
}

/// The addresses a proxy of `mode` listens on for a Service with cluster
/// IPs `vips` (istiod's `GetAddressForProxy` and
/// `GetExtraAddressesForProxy`): an IPv6 proxy, the IPv6 ones; a
/// dual-stack proxy, all of them in order under `ISTIO_DUAL_STACK` or
/// ambient (`all`), else those of the first one's family. `None` where
/// the proxy has no address of its family.
fn service_binds(vips: &[String], mode: IpMode, all: bool) -> Option<Vec<&str>> {
    let family = match mode {
        IpMode::V4 => false,
        IpMode::V6 => true,
        IpMode::Dual if all => return Some(vips.iter().map(String::as_str).collect()),
        IpMode::Dual => is_v6(vips.first()?),
    };
    let out: Vec<&str> = vips.iter().map(String::as_str).filter(|v| is_v6(v) == family).collect();
    (!out.is_empty()).then_some(out)
}

/// What [`adapt`] reads beyond the IPv4 proxies' resource, for the input
/// generation: a dual-stack Service's cluster IPs, for its listener.
pub fn listener_input<'a>(dual: &'a DualVips, name: &str) -> Option<&'a [String]> {
    let (ip, _) = name.rsplit_once('_')?;
    dual.get(ip).map(|v| &v[..])
}

/// The shared listener or cluster `body` as a proxy of `mode` (not
/// [`IpMode::V4`]) gets it; `router` for gateways, whose wildcard
/// listeners add `::` only under `ISTIO_DUAL_STACK` (`gateway.go`). Names
/// stay the IPv4 proxies' (istiod names a listener by its first address).
/// A body it does not change comes back as it was.
pub fn adapt(
    model: &Model,
    dual: &DualVips,
    mode: IpMode,
    router: bool,
    name: &str,
    body: Bytes,
    is_cluster: bool,
) -> Bytes {
    let mesh: &MeshSettings = &model.mesh;
    if is_cluster {
        let Ok(mut c) = Cluster::decode(body.clone()) else { return body };
        let dns = matches!(
            c.cluster_discovery_type,
            Some(cluster::ClusterDiscoveryType::Type(t))
                if t == cluster::DiscoveryType::StrictDns as i32 || t == cluster::DiscoveryType::LogicalDns as i32
        );
        if dns && c.dns_lookup_family != cluster::DnsLookupFamily::All as i32 {
            // (A RACE_FIRST_TCP_CONNECT service's ALL stays.)
            c.dns_lookup_family = mode.dns_lookup_family(mesh.dual_stack, mesh.features.ipv4_outbound_for_ipv6) as i32;
        } else if dns {
            return body;
        } else if name == "InboundPassthroughCluster" {
            // istiod's buildInboundPassthroughCluster: from ::6 without
            // IPv4, and from both on a dual-stack proxy (with or without
            // ISTIO_DUAL_STACK).
            c.upstream_bind_config = Some(bind_config(match mode {
                IpMode::V6 => &["::6"],
                _ => &["127.0.0.6", "::6"],
            }));
        } else {
            return body;
        }
        return Bytes::from(c.encode_to_vec());
    }
    let Ok(mut l) = Listener::decode(body.clone()) else { return body };
    let Some(port) = port_of(&l) else { return body };
    let wildcards = mode.wildcards();
    if name == super::listener::VIRTUAL_OUTBOUND {
        // buildVirtualOutboundListener: the first wildcard, the others
        // only under ISTIO_DUAL_STACK; an IPv6 proxy's IPv4 one under
        // ISTIO_ENABLE_IPV4_OUTBOUND_LISTENER_FOR_IPV6_CLUSTERS.
        l.address = super::envoy::socket(wildcards[0], port);
        if mesh.dual_stack && wildcards.len() > 1 {
            l.additional_addresses = additional(&wildcards[1..], port);
        } else if mesh.features.ipv4_outbound_for_ipv6 && mode == IpMode::V6 {
            l.additional_addresses = additional(IpMode::V4.wildcards(), port);
        }
        return Bytes::from(l.encode_to_vec());
    }
    let Some((ip, _)) = name.rsplit_once('_') else { return body };
    if ip == "0.0.0.0" {
        // A wildcard listener (HTTP, a ServiceEntry without addresses, a
        // gateway's): the proxy's wildcards, `::` as an additional address
        // of a dual-stack proxy's (listenerBinding.Extra), a gateway's only
        // under ISTIO_DUAL_STACK.
        if mode == IpMode::Dual && router && !mesh.dual_stack {
            return body;
        }
        l.address = super::envoy::socket(wildcards[0], port);
        l.additional_addresses = additional(&wildcards[1..], port);
        return Bytes::from(l.encode_to_vec());
    }
    // A dual-stack Service's listener.
    let Some(vips) = dual.get(ip).filter(|_| !router) else { return body };
    let Some(binds) = service_binds(vips, mode, mesh.dns.dual_stack) else { return body };
    l.address = super::envoy::socket(binds[0], port);
    l.additional_addresses = additional(&binds[1..], port);
    Bytes::from(l.encode_to_vec())
}

#[cfg(test)]
mod tests;
