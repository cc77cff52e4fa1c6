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
    /// proxy, ALL for a dual-stack one under `ISTIO_DUAL_STACK`
    /// (`ISTIO_ENABLE_IPV4_OUTBOUND_LISTENER_FOR_IPV6_CLUSTERS`, which
    /// would make an IPv6 proxy's ALL, is not read).
    pub fn dns_lookup_family(self, dual_stack: bool) -> cluster::DnsLookupFamily {
        match self {
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

/// The shared listener or cluster `body` as a proxy of `mode` (not
/// [`IpMode::V4`]) gets it; `router` for gateways, whose wildcard
/// listeners add `::` only under `ISTIO_DUAL_STACK` (`gateway.go`).
/// A body it does not change comes back as it was.
pub fn adapt(model: &Model, mode: IpMode, router: bool, name: &str, body: Bytes, is_cluster: bool) -> Bytes {
    let mesh: &MeshSettings = &model.mesh;
    if is_cluster {
        let Ok(mut c) = Cluster::decode(body.clone()) else { return body };
        let dns = matches!(
            c.cluster_discovery_type,
            Some(cluster::ClusterDiscoveryType::Type(t))
                if t == cluster::DiscoveryType::StrictDns as i32 || t == cluster::DiscoveryType::LogicalDns as i32
        );
        if dns {
            c.dns_lookup_family = mode.dns_lookup_family(mesh.dual_stack) as i32;
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
        // only under ISTIO_DUAL_STACK.
        l.address = super::envoy::socket(wildcards[0], port);
        if mesh.dual_stack {
            l.additional_addresses = additional(&wildcards[1..], port);
        }
        return Bytes::from(l.encode_to_vec());
    }
    if mode != IpMode::Dual {
        // An IPv6 proxy's service listeners would be named and bound by
        // the services' IPv6 addresses: not built yet.
        return body;
    }
    let Some((ip, _)) = name.rsplit_once('_') else { return body };
    let extra: Vec<&str> = if ip == "0.0.0.0" {
        // A wildcard listener: `::` too (listenerBinding.Extra), on a
        // gateway only under ISTIO_DUAL_STACK.
        if router && !mesh.dual_stack {
            return body;
        }
        vec!["::"]
    } else if mesh.dual_stack && !router {
        // A service's listener: its other cluster IPs
        // (GetExtraAddressesForProxy).
        let Some(svc) = model.services.values().find(|s| s.kubernetes && s.vips.first().is_some_and(|v| v == ip))
        else {
            return body;
        };
        svc.vips[1..].iter().map(String::as_str).collect()
    } else {
        return body;
    };
    if extra.is_empty() {
        return body;
    }
    l.additional_addresses = additional(&extra, port);
    Bytes::from(l.encode_to_vec())
}

#[cfg(test)]
mod tests;
