//! A proxy's IP families as istiod serves them, upstream's cases ported
//! as data: each resource is generated for the class, as the cores serve
//! it.

use std::sync::Arc;

use istiod_proto::envoy::config::cluster::v3::{Cluster, cluster};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::endpoint::v3::{ClusterLoadAssignment, lb_endpoint};
use istiod_proto::envoy::config::listener::v3::Listener;
use istiod_proto::prost::Message;
use istiod_xds_api::snapshot::Kind;

use super::*;
use crate::testing::{class, objects, served};

/// A mesh with `reviews` selecting its pod, a dual-stack Service (two
/// cluster IPs) whose dual-stack pod is in both EndpointSlices, and a DNS
/// ServiceEntry; `ISTIO_DUAL_STACK` as `dual_stack`.
fn mesh(dual_stack: bool) -> Arc<Model> {
    let yaml = "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: default}\n\
        spec: {clusterIP: 10.0.0.1, clusterIPs: [10.0.0.1, '2001:1::255'], ports: [{port: 9000, name: tcp}], selector: {app: reviews}}\n---\n\
        apiVersion: v1\nkind: Pod\nmetadata: {name: reviews-1, namespace: default, labels: {app: reviews}}\n\
        spec: {containers: [{name: app}]}\nstatus: {podIP: 128.0.0.1, podIPs: [{ip: 128.0.0.1}, {ip: '2001:1::1'}]}\n---\n\
        apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: reviews-v4, namespace: default, labels: {kubernetes.io/service-name: reviews}}\n\
        addressType: IPv4\nports: [{name: tcp, port: 9000}]\n\
        endpoints: [{addresses: [128.0.0.1], targetRef: {kind: Pod, name: reviews-1, namespace: default}}]\n---\n\
        apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: reviews-v6, namespace: default, labels: {kubernetes.io/service-name: reviews}}\n\
        addressType: IPv6\nports: [{name: tcp, port: 9000}]\n\
        endpoints: [{addresses: ['2001:1::1'], targetRef: {kind: Pod, name: reviews-1, namespace: default}}]\n---\n\
        apiVersion: v1\nkind: Service\nmetadata: {name: ratings, namespace: default}\n\
        spec: {clusterIP: '2001:1::256', clusterIPs: ['2001:1::256', 10.0.0.2], ports: [{port: 9001, name: tcp}], selector: {app: ratings}}\n---\n\
        apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: api, namespace: default}\n\
        spec: {hosts: [api.example.com], ports: [{number: 443, name: tls, protocol: TLS}], resolution: DNS}\n";
    // (The name tables' and service addresses' switch is on with it, as
    // the binary sets it.)
    let dns = crate::meshconfig::DnsSettings { dual_stack, ..Default::default() };
    let settings = crate::meshconfig::MeshSettings { dual_stack, dns, ..Default::default() };
    Arc::new(Model::build_in(&objects(yaml), "cluster.local", Arc::new(settings)))
}

/// The `reviews` pod's sidecar with addresses `ips`.
fn proxy(ips: &[&str]) -> crate::node::ProxyClass {
    let mut c = class("default", &[("app", "reviews")]);
    c.ips = ips.iter().map(|i| Arc::from(*i)).collect();
    c
}

const V4: &[&str] = &["1.1.1.1"];
const V6: &[&str] = &["2001:1::1"];
const DUAL: &[&str] = &["1.1.1.1", "1111:2222::1"];

fn cluster_of(model: &Arc<Model>, ips: &[&str], name: &str) -> Cluster {
    Cluster::decode(served(model, &proxy(ips), Kind::Cluster, name).unwrap()).unwrap()
}

fn listener_of(model: &Arc<Model>, ips: &[&str], name: &str) -> Listener {
    Listener::decode(served(model, &proxy(ips), Kind::Listener, name).unwrap()).unwrap()
}

fn ip(a: &Option<core::Address>) -> String {
    match a.as_ref().and_then(|a| a.address.as_ref()) {
        Some(core::address::Address::SocketAddress(s)) => match s.port_specifier {
            Some(core::socket_address::PortSpecifier::PortValue(p)) => format!("{}:{p}", s.address),
            _ => s.address.clone(),
        },
        _ => String::new(),
    }
}

fn binds(c: &Cluster) -> Vec<String> {
    let b = c.upstream_bind_config.as_ref().unwrap();
    let source = |s: &Option<core::SocketAddress>| s.as_ref().map(|s| s.address.clone()).unwrap_or_default();
    std::iter::once(source(&b.source_address))
        .chain(b.extra_source_addresses.iter().map(|e| source(&e.address)))
        .collect()
}

fn extra(l: &Listener) -> Vec<String> {
    l.additional_addresses.iter().map(|a| ip(&a.address)).collect()
}

/// Upstream `TestInboundClustersPassThroughBindIPs`: an inbound cluster
/// sends from 127.0.0.6 (IPv4), ::6 (IPv6), and from both on a dual-stack
/// proxy only under ISTIO_DUAL_STACK.
#[test]
fn upstream_inbound_clusters_pass_through_bind_ips() {
    for (dual_stack, ips, want) in [
        (false, V4, vec!["127.0.0.6"]),
        (true, V4, vec!["127.0.0.6"]),
        (false, V6, vec!["::6"]),
        (true, V6, vec!["::6"]),
        (false, DUAL, vec!["127.0.0.6"]),
        (true, DUAL, vec!["127.0.0.6", "::6"]),
    ] {
        let c = cluster_of(&mesh(dual_stack), ips, "inbound|9000||");
        assert_eq!(binds(&c), want, "{ips:?} dual stack {dual_stack}");
    }
}

/// Upstream `TestBuildPassthroughClusters` (`["6.6.6.6", "::1"]`: both
/// bind addresses, with or without the flag) and its single-family cases.
#[test]
fn upstream_inbound_passthrough_cluster_binds() {
    for (ips, want) in [(V4, vec!["127.0.0.6"]), (V6, vec!["::6"]), (&["6.6.6.6", "::1"][..], vec!["127.0.0.6", "::6"])]
    {
        let c = cluster_of(&mesh(false), ips, "InboundPassthroughCluster");
        assert_eq!(binds(&c), want, "{ips:?}");
    }
}

/// Upstream `TestClusterDnsLookupFamily`: V4_ONLY for IPv4 proxies, V6_ONLY
/// for IPv6 ones, ALL for dual-stack ones only under ISTIO_DUAL_STACK.
#[test]
fn upstream_cluster_dns_lookup_family() {
    use cluster::DnsLookupFamily::{All, V4Only, V6Only};
    for (dual_stack, ips, want) in
        [(false, V4, V4Only), (true, V4, V4Only), (true, V6, V6Only), (false, DUAL, V4Only), (true, DUAL, All)]
    {
        let c = cluster_of(&mesh(dual_stack), ips, "outbound|443||api.example.com");
        assert_eq!(c.dns_lookup_family, want as i32, "{ips:?} dual stack {dual_stack}");
    }
}

/// Upstream `TestAdditionalAddressesForIPv6`: under
/// `ISTIO_ENABLE_IPV4_OUTBOUND_LISTENER_FOR_IPV6_CLUSTERS` an IPv6 proxy's
/// `virtualOutbound` takes one additional (IPv4) address; and its DNS
/// clusters look up both families (util.go `SelectDNSLookupFamily`). An
/// IPv4 or dual-stack proxy's are unchanged.
#[test]
fn upstream_additional_addresses_for_ipv6() {
    use cluster::DnsLookupFamily::{All, V4Only};
    let on = {
        let mut m = (*mesh(false)).clone();
        m.mesh = Arc::new(crate::meshconfig::MeshSettings {
            features: crate::meshconfig::Features { ipv4_outbound_for_ipv6: true, ..Default::default() },
            ..(*m.mesh).clone()
        });
        Arc::new(m)
    };
    let l = listener_of(&on, &["1111:2222::1"], "virtualOutbound");
    assert_eq!(ip(&l.address), ":::15001");
    assert_eq!(extra(&l), vec!["0.0.0.0:15001"], "expected additional ipv4 bind addresses");
    let c = cluster_of(&on, V6, "outbound|443||api.example.com");
    assert_eq!(c.dns_lookup_family, All as i32);
    for ips in [V4, DUAL] {
        assert!(extra(&listener_of(&on, ips, "virtualOutbound")).is_empty(), "{ips:?}");
        assert_eq!(cluster_of(&on, ips, "outbound|443||api.example.com").dns_lookup_family, V4Only as i32);
    }
    // Off (istiod's default): no additional address.
    assert!(extra(&listener_of(&mesh(false), V6, "virtualOutbound")).is_empty());
}

/// Upstream `TestGetDualStackActualWildcard` and the virtual listeners of
/// `buildVirtualOutboundListener` / `buildInboundListener`: the proxy's
/// wildcard, and `::` as an additional address of a dual-stack proxy's
/// under ISTIO_DUAL_STACK.
#[test]
fn virtual_listeners_listen_on_the_proxys_wildcards() {
    for (dual_stack, ips, address, additional) in [
        (true, V4, "0.0.0.0", vec![]),
        (true, V6, "::", vec![]),
        (false, DUAL, "0.0.0.0", vec![]),
        (true, DUAL, "0.0.0.0", vec!["::"]),
    ] {
        let model = mesh(dual_stack);
        for (name, port) in [("virtualOutbound", 15001), ("virtualInbound", 15006)] {
            let l = listener_of(&model, ips, name);
            assert_eq!(ip(&l.address), format!("{address}:{port}"), "{name} {ips:?} {dual_stack}");
            let want: Vec<String> = additional.iter().map(|a| format!("{a}:{port}")).collect();
            assert_eq!(extra(&l), want, "{name} {ips:?} {dual_stack}");
        }
    }
}

/// istiod's `buildSidecarOutboundListeners` for a Service with two cluster
/// IPs: one listener, on the IPv4 one; a dual-stack proxy's also on the
/// other under ISTIO_DUAL_STACK (`GetExtraAddressesForProxy`, upstream
/// `TestGetAllAddresses`' "Dual, flag on" case).
#[test]
fn a_dual_stack_services_listener_takes_its_other_cluster_ip() {
    let model = mesh(true);
    let snap = crate::testing::snapshot(&model);
    let names = istiod_xds_api::snapshot::Generator::wildcard_names(
        &crate::generator::MeshGenerator,
        &snap,
        &proxy(DUAL),
        Kind::Listener,
    );
    assert!(names.iter().any(|n| &**n == "10.0.0.1_9000"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("2001:1::255")), "one listener: {names:?}");
    assert_eq!(extra(&listener_of(&model, V4, "10.0.0.1_9000")), Vec::<String>::new());
    assert_eq!(extra(&listener_of(&model, DUAL, "10.0.0.1_9000")), ["2001:1::255:9000"]);
    assert_eq!(extra(&listener_of(&mesh(false), DUAL, "10.0.0.1_9000")), Vec::<String>::new(), "the flag off");
}

/// Upstream `TestUpdateEndpointCacheForSliceWithMultiAddrs` ("v4 and v6
/// slices": one endpoint at both of the pod's IPs) and
/// `TestBuildLocalityLbEndpoints`' dual-stack case (the other address an
/// additional one, on the same port); without the flag, one endpoint per
/// slice address as before.
#[test]
fn upstream_dual_stack_endpoints() {
    let endpoints = |dual_stack: bool| {
        let cla = ClusterLoadAssignment::decode(
            served(&mesh(dual_stack), &proxy(V4), Kind::Endpoint, "outbound|9000||reviews.default.svc.cluster.local")
                .unwrap(),
        )
        .unwrap();
        cla.endpoints
            .iter()
            .flat_map(|l| &l.lb_endpoints)
            .map(|e| match &e.host_identifier {
                Some(lb_endpoint::HostIdentifier::Endpoint(ep)) => {
                    (ip(&ep.address), ep.additional_addresses.iter().map(|a| ip(&a.address)).collect::<Vec<_>>())
                }
                _ => panic!("{e:?}"),
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(endpoints(true), [("128.0.0.1:9000".to_owned(), vec!["2001:1::1:9000".to_owned()])]);
    assert_eq!(
        endpoints(false),
        [("128.0.0.1:9000".to_owned(), vec![]), ("2001:1::1:9000".to_owned(), vec![])],
        "the flag off"
    );
}

/// istiod's `GetAddressForProxy` and `GetExtraAddressesForProxy` per
/// family, for an IPv4-first and an IPv6-first dual-stack Service: an IPv6
/// proxy listens on the IPv6 cluster IP; a dual-stack proxy on the first
/// one, the others additional under ISTIO_DUAL_STACK, else none of the
/// other family; an IPv4 proxy on the IPv4 one. (The listener keeps the
/// IPv4 proxies' name.)
#[test]
fn service_listeners_follow_the_proxys_family() {
    for (dual_stack, ips, name, address, additional) in [
        (true, V4, "10.0.0.1_9000", "10.0.0.1:9000", vec![]),
        (true, V4, "10.0.0.2_9001", "10.0.0.2:9001", vec![]),
        (true, V6, "10.0.0.1_9000", "2001:1::255:9000", vec![]),
        (true, V6, "10.0.0.2_9001", "2001:1::256:9001", vec![]),
        (true, DUAL, "10.0.0.2_9001", "2001:1::256:9001", vec!["10.0.0.2:9001"]),
        (false, DUAL, "10.0.0.2_9001", "2001:1::256:9001", vec![]),
        (false, DUAL, "10.0.0.1_9000", "10.0.0.1:9000", vec![]),
    ] {
        let l = listener_of(&mesh(dual_stack), ips, name);
        assert_eq!(ip(&l.address), address, "{name} {ips:?} {dual_stack}");
        assert_eq!(extra(&l), additional, "{name} {ips:?} {dual_stack}");
    }
}

/// istiod's wildcard binds (`buildSidecarOutboundListeners`,
/// `actualWildcards`): a listener on `0.0.0.0` (here a ServiceEntry
/// without addresses) is on `::` for an IPv6 proxy, and on both for a
/// dual-stack one, with or without ISTIO_DUAL_STACK (upstream
/// `TestOutboundListenerDualStackWildcard`).
#[test]
fn wildcard_listeners_follow_the_proxys_family() {
    for (ips, address, additional) in
        [(V4, "0.0.0.0:443", vec![]), (V6, ":::443", vec![]), (DUAL, "0.0.0.0:443", vec![":::443"])]
    {
        let l = listener_of(&mesh(false), ips, "0.0.0.0_443");
        assert_eq!(ip(&l.address), address, "{ips:?}");
        assert_eq!(extra(&l), additional, "{ips:?}");
    }
}

/// istiod's `istio.io/connect-strategy: RACE_FIRST_TCP_CONNECT` on a DNS
/// ServiceEntry (cluster_builder.go `buildCluster`, `convertResolution`):
/// a LOGICAL_DNS cluster resolving both families, for every proxy.
#[test]
fn race_first_connect_resolves_both_families() {
    let yaml = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\n\
        metadata: {name: api, namespace: default, annotations: {istio.io/connect-strategy: RACE_FIRST_TCP_CONNECT}}\n\
        spec: {hosts: [api.example.com], ports: [{number: 443, name: tls, protocol: TLS}], resolution: DNS}\n";
    let model = Arc::new(Model::build_in(&objects(yaml), "cluster.local", Arc::new(Default::default())));
    for ips in [V4, V6, DUAL] {
        let c = cluster_of(&model, ips, "outbound|443||api.example.com");
        let logical = cluster::ClusterDiscoveryType::Type(cluster::DiscoveryType::LogicalDns as i32);
        assert_eq!(c.cluster_discovery_type, Some(logical), "{ips:?}");
        assert_eq!(c.dns_lookup_family, cluster::DnsLookupFamily::All as i32, "{ips:?}");
    }
}
