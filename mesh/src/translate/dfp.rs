//! `outboundTrafficPolicy.mode: ALLOW_ANY_DYNAMIC_DNS`: plaintext HTTP to
//! a host the mesh does not know is resolved by Envoy's dynamic forward
//! proxy from its `Host` header, rather than passed through to the address
//! the client dialled. istiod (1.28) builds it from three parts, all
//! naming one shared DNS cache: the `AllowAnyDynamicDNSCluster`
//! (`buildAllowAnyDFPCluster`), the dynamic forward proxy HTTP filter in
//! every sidecar outbound HTTP connection manager, and the catch-all
//! virtual host `allow_any_dynamic_dns` (`buildCatchAllVirtualHost`); the
//! `virtualOutbound` listener sniffs HTTP to reach it for ports no
//! listener takes. TLS and opaque TCP still pass through.
//!
//! One shared cache config for every sidecar: IPv4 lookups and Envoy's own
//! resolver. istiod varies both by proxy (the lookup family by
//! `INSTANCE_IPS`, the agent's DNS proxy as resolver with `DNS_CAPTURE`);
//! that difference is on the compatibility page.

use std::collections::BTreeMap;

use istiod_proto::envoy::config::cluster::v3::{Cluster, cluster};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::extensions::clusters::dynamic_forward_proxy::v3 as dfp_cluster;
use istiod_proto::envoy::extensions::common::dynamic_forward_proxy::v3::DnsCacheConfig;
use istiod_proto::envoy::extensions::filters::http::dynamic_forward_proxy::v3 as dfp_filter;
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::envoy::extensions::upstreams::http::v3 as upstream_http;
use istiod_proto::prost_types::Duration;

use super::envoy::{any, http_filter};

/// The cluster unknown HTTP hosts are resolved and sent through.
pub const CLUSTER: &str = "AllowAnyDynamicDNSCluster";
/// The catch-all virtual host's (and its route's) name
/// (`route::fallback_host` builds it).
pub const VIRTUAL_HOST: &str = "allow_any_dynamic_dns";
/// The DNS cache the cluster and the filters share.
pub const DNS_CACHE: &str = "allow_any_dfp_dns_cache";
/// The HTTP filter's name.
pub const FILTER: &str = "envoy.filters.http.dynamic_forward_proxy";

/// istiod's `buildAllowAnyDynamicDNSDNSCacheConfig`, as for an IPv4 proxy
/// without DNS capture; `max_hosts` is
/// `PILOT_ALLOW_ANY_DYNAMIC_DNS_MAX_HOSTS` (1024).
pub fn dns_cache(max_hosts: u32) -> DnsCacheConfig {
    DnsCacheConfig {
        name: DNS_CACHE.into(),
        dns_lookup_family: cluster::DnsLookupFamily::V4Only as i32,
        max_hosts: Some(max_hosts),
        typed_dns_resolver_config: None,
    }
}

/// The dynamic forward proxy HTTP filter, just before the router.
pub fn http_filter_of(max_hosts: u32) -> hcm::HttpFilter {
    http_filter(
        FILTER,
        &dfp_filter::FilterConfig {
            implementation_specifier: Some(dfp_filter::filter_config::ImplementationSpecifier::DnsCacheConfig(
                dns_cache(max_hosts),
            )),
            ..Default::default()
        },
    )
}

/// istiod's `passthroughHttpProtocolOptions`: the requests' own HTTP
/// version upstream, idle connections closed after 5 minutes.
pub fn passthrough_http_options() -> upstream_http::HttpProtocolOptions {
    use upstream_http::http_protocol_options::{UpstreamProtocolOptions, UseDownstreamHttpConfig};
    upstream_http::HttpProtocolOptions {
        common_http_protocol_options: Some(core::HttpProtocolOptions {
            idle_timeout: Some(Duration { seconds: 300, nanos: 0 }),
            ..Default::default()
        }),
        upstream_protocol_options: Some(UpstreamProtocolOptions::UseDownstreamProtocolConfig(
            UseDownstreamHttpConfig {
                http_protocol_options: Some(Default::default()),
                http2_protocol_options: Some(Default::default()),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

/// `AllowAnyDynamicDNSCluster` without upstream TLS: the dynamic forward
/// proxy cluster type (Envoy requires `allow_insecure_cluster_options`
/// where the cluster validates no certificates), the requests' own HTTP
/// version upstream, idle connections closed after 5 minutes, as
/// PassthroughCluster's.
/// `max_hosts` sizes its DNS cache; `connect_timeout` is the mesh's.
pub fn cluster(max_hosts: u32, connect_timeout: Duration) -> Cluster {
    let config = dfp_cluster::ClusterConfig {
        cluster_implementation_specifier: Some(
            dfp_cluster::cluster_config::ClusterImplementationSpecifier::DnsCacheConfig(dns_cache(max_hosts)),
        ),
        allow_insecure_cluster_options: true,
        ..Default::default()
    };
    let options = passthrough_http_options();
    Cluster {
        name: CLUSTER.into(),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::ClusterType(cluster::CustomClusterType {
            name: "envoy.clusters.dynamic_forward_proxy".into(),
            typed_config: Some(any(&config)),
        })),
        lb_policy: cluster::LbPolicy::ClusterProvided as i32,
        connect_timeout: Some(connect_timeout),
        alt_stat_name: format!("{CLUSTER};"),
        typed_extension_protocol_options: BTreeMap::from([(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".to_owned(),
            any(&options),
        )]),
        filters: vec![super::telemetry::mx_cluster(&[])],
        ..Default::default()
    }
}

/// Removes the dynamic forward proxy filter from an encoded listener's
/// HTTP connection managers: a Sidecar whose own outbound policy is not
/// this mode shares listeners built under it.
pub fn strip_from(l: &mut istiod_proto::envoy::config::listener::v3::Listener) {
    use istiod_proto::envoy::config::listener::v3::filter::ConfigType;
    use istiod_proto::prost::Message;
    let chains = l.filter_chains.iter_mut().chain(l.default_filter_chain.as_mut());
    for f in chains.flat_map(|c| c.filters.iter_mut()) {
        let Some(ConfigType::TypedConfig(a)) = &mut f.config_type else { continue };
        if f.name != "envoy.filters.network.http_connection_manager" {
            continue;
        }
        let Ok(mut m) = hcm::HttpConnectionManager::decode(a.value.as_slice()) else { continue };
        let before = m.http_filters.len();
        m.http_filters.retain(|h| h.name != FILTER);
        if m.http_filters.len() != before {
            *a = any(&m);
        }
    }
}
