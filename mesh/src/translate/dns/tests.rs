//! Upstream's name table cases as data: istio/istio (release-1.28)
//! `pkg/dns/server/name_table_test.go` `TestNameTable` and
//! `TestPodNameTableLocalRemoteAddresses`, and `pilot/pkg/xds/nds_test.go`
//! `TestNDS`. Expected tables are upstream's.
//!
//! Left out: `publish unready headless service with unhealthy pods` (our
//! endpoints carry the EndpointSlice's readiness, which the API server
//! already sets for `publishNotReadyAddresses`: the service has no flag
//! of its own here).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::model::{Endpoint, Locality, Port, Protocol};

fn svc(
    host: &str,
    kubernetes: bool,
    name: &str,
    vips: &[&str],
    ports: &[(&str, u16)],
    resolution: Resolution,
) -> Service {
    Service {
        hostname: host.into(),
        kubernetes,
        name: name.into(),
        namespace: "testns".into(),
        vips: vips.iter().map(|s| s.to_string()).collect(),
        ports: ports
            .iter()
            .map(|(n, p)| Port { name: n.to_string(), port: *p, protocol: Protocol::Tcp, target_port: Some(*p) })
            .collect(),
        resolution,
        mesh_external: false,
        export_to: Vec::new(),
        selector: BTreeMap::new(),
        labels: BTreeMap::new(),
        endpoints: Vec::new(),
        auto_addresses: Vec::new(),
        prefers_near: false,
        race_first_connect: false,
    }
}

/// upstream's `pod1`..`pod4`: address, network, cluster.
const PODS: [(&str, &str, &str, &str); 4] = [
    ("pod1", "1.2.3.4", "", ""),
    ("pod2", "9.6.7.8", "nw2", "cl2"),
    ("pod3", "19.6.7.8", "nw1", ""),
    ("pod4", "9.16.7.8", "", "cl1"),
];

/// `makeServiceInstances`: the pod on every port of the service.
fn instance(s: &mut Service, pod: (&str, &str, &str, &str), dns: Option<&str>, health: Health) {
    let (_, address, network, cluster) = pod;
    let ports: Vec<u16> = s.ports.iter().map(|p| p.port).collect();
    for port in ports {
        let mut labels = BTreeMap::new();
        if !cluster.is_empty() {
            labels.insert(CLUSTER_LABEL.to_owned(), cluster.to_owned());
        }
        s.endpoints.push(Endpoint {
            address: address.into(),
            service_port: port,
            port,
            health,
            labels,
            service_account: String::new(),
            tls_mode: String::new(),
            locality: Locality::default(),
            pod: None,
            tunnel: false,
            network: network.into(),
            dns_name: dns.map(Arc::from),
            extra_addresses: Vec::new(),
            workload: (Arc::from(""), Arc::from("")),
        });
    }
}

fn headless() -> Service {
    svc(
        "headless-svc.testns.svc.cluster.local",
        true,
        "headless-svc",
        &[],
        &[("tcp-port", 9000)],
        Resolution::Passthrough,
    )
}

/// upstream's `push`: the four pods, healthy, as `podN.headless-svc`.
fn headless_with_pods() -> Service {
    let mut s = headless();
    for p in PODS {
        instance(&mut s, p, Some(&format!("{}.headless-svc", p.0)), Health::Healthy);
    }
    s
}

fn service_entry_with_pods() -> Service {
    let mut s = svc("foo.bar.com", false, "foo.bar.com", &[], &[("tcp-port", 9000)], Resolution::Passthrough);
    for p in PODS {
        instance(&mut s, p, None, Health::Healthy);
    }
    s
}

struct Proxy {
    ips: Vec<Arc<str>>,
    network: &'static str,
    cluster: &'static str,
}

fn proxy() -> Proxy {
    Proxy { ips: vec!["9.9.9.9".into()], network: "", cluster: "" }
}
fn nw1proxy() -> Proxy {
    Proxy { network: "nw1", ..proxy() }
}
fn cl1proxy() -> Proxy {
    Proxy { cluster: "cl1", ..proxy() }
}
fn cl1_dual_stack_proxy() -> Proxy {
    Proxy { ips: vec!["9.9.9.9".into(), "2001:2::2001".into()], ..cl1proxy() }
}

/// `(host, ips, registry, shortname, namespace)`.
type Row = (&'static str, Vec<&'static str>, &'static str, &'static str, &'static str);

fn table(services: &[Service], p: &Proxy, multicluster_headless: bool) -> Vec<Row> {
    let asker = Asker { ips: &p.ips, network: p.network, cluster: p.cluster, auto_allocated: false, legacy: None };
    // The upstream test runs with `EnableDualStack`.
    let t = name_table(services, &asker, Flags { multicluster_headless, dual_stack: true });
    let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    t.table
        .iter()
        .map(|(h, i)| {
            (
                leak(h),
                i.ips.iter().map(|s| leak(s)).collect(),
                leak(&i.registry),
                leak(&i.shortname),
                leak(&i.namespace),
            )
        })
        .collect()
}

fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_by(|a, b| a.0.cmp(b.0));
    rows
}

const K: &str = "Kubernetes";
const E: &str = "External";
const H: &str = "headless-svc.testns.svc.cluster.local";

fn pod_row(n: &'static str, ip: &'static str) -> Row {
    let host: &'static str = Box::leak(format!("{n}.{H}").into_boxed_str());
    let short: &'static str = Box::leak(format!("{n}.headless-svc").into_boxed_str());
    (host, vec![ip], K, short, "testns")
}

/// A case: name, services, the proxy, `ENABLE_MULTICLUSTER_HEADLESS`, the
/// table.
type Case = (&'static str, Vec<Service>, Proxy, bool, Vec<Row>);
/// A case: name, instances (address, cluster), the pod record's addresses.
type LocalRemote = (&'static str, &'static [(&'static str, &'static str)], &'static [&'static str]);

#[test]
fn upstream_name_table() {
    let all_pods = || {
        vec![
            pod_row("pod1", "1.2.3.4"),
            pod_row("pod2", "9.6.7.8"),
            pod_row("pod3", "19.6.7.8"),
            pod_row("pod4", "9.16.7.8"),
        ]
    };
    let cases: Vec<Case> = vec![
        ("headless service pods", vec![headless_with_pods()], proxy(), false, {
            let mut r = all_pods();
            r.push((H, vec!["1.2.3.4", "9.6.7.8", "19.6.7.8", "9.16.7.8"], K, "headless-svc", "testns"));
            r
        }),
        ("headless service pods with network isolation", vec![headless_with_pods()], nw1proxy(), false, {
            let mut r = all_pods();
            r.remove(1);
            r.push((H, vec!["1.2.3.4", "19.6.7.8", "9.16.7.8"], K, "headless-svc", "testns"));
            r
        }),
        ("multi cluster headless service pods", vec![headless_with_pods()], cl1proxy(), false, {
            let mut r = all_pods();
            r.push((H, vec!["1.2.3.4", "19.6.7.8", "9.16.7.8"], K, "headless-svc", "testns"));
            r
        }),
        (
            "multi cluster headless service pods with multi cluster enabled",
            vec![headless_with_pods()],
            cl1proxy(),
            true,
            {
                let mut r = all_pods();
                r.push((H, vec!["1.2.3.4", "9.6.7.8", "19.6.7.8", "9.16.7.8"], K, "headless-svc", "testns"));
                r
            },
        ),
        (
            "headless service with unhealthy pods",
            vec![{
                let mut s = headless();
                instance(&mut s, PODS[0], Some("pod1.headless-svc"), Health::Healthy);
                instance(&mut s, PODS[1], Some("pod2.headless-svc"), Health::Unhealthy);
                // (Terminating: not healthy either.)
                instance(&mut s, PODS[2], Some("pod3.headless-svc"), Health::Draining);
                s
            }],
            cl1proxy(),
            true,
            vec![pod_row("pod1", "1.2.3.4"), (H, vec!["1.2.3.4"], K, "headless-svc", "testns")],
        ),
        (
            "wildcard service pods",
            vec![svc(
                "*.testns.svc.cluster.local",
                true,
                "wildcard-svc",
                &["172.10.10.10"],
                &[("tcp-port", 9000), ("http-port", 8000)],
                Resolution::ClientSideLb,
            )],
            proxy(),
            false,
            vec![("*.testns.svc.cluster.local", vec!["172.10.10.10"], K, "wildcard-svc", "testns")],
        ),
        (
            "cidr service",
            vec![svc(
                "*.testns.svc.cluster.local",
                true,
                "cidr-svc",
                &["172.217.0.0/16"],
                &[("tcp-port", 9000), ("http-port", 8000)],
                Resolution::ClientSideLb,
            )],
            proxy(),
            false,
            vec![],
        ),
        (
            "service entry with resolution = NONE",
            vec![service_entry_with_pods()],
            proxy(),
            false,
            vec![("foo.bar.com", vec!["1.2.3.4", "9.6.7.8", "19.6.7.8", "9.16.7.8"], E, "", "")],
        ),
        (
            "dual stack",
            vec![svc(
                "dual.foo.bar",
                false,
                "mysql-svc",
                &["2001:2::", "10.0.0.8"],
                &[("tcp", 3306)],
                Resolution::Passthrough,
            )],
            cl1_dual_stack_proxy(),
            false,
            vec![("dual.foo.bar", vec!["2001:2::", "10.0.0.8"], E, "", "")],
        ),
        (
            "service entry with resolution = NONE with network isolation",
            vec![service_entry_with_pods()],
            nw1proxy(),
            false,
            vec![("foo.bar.com", vec!["1.2.3.4", "19.6.7.8", "9.16.7.8"], E, "", "")],
        ),
        (
            "multi cluster service entry with resolution = NONE",
            vec![service_entry_with_pods()],
            cl1proxy(),
            false,
            vec![("foo.bar.com", vec!["1.2.3.4", "19.6.7.8", "9.16.7.8"], E, "", "")],
        ),
        (
            "service entry with multiple VIPs",
            // One ServiceEntry of two addresses (upstream: two services).
            vec![svc(
                "mysql.foo.bar",
                false,
                "mysql-svc",
                &["10.0.0.5", "10.0.0.6"],
                &[("tcp", 3306)],
                Resolution::Passthrough,
            )],
            proxy(),
            false,
            vec![("mysql.foo.bar", vec!["10.0.0.5", "10.0.0.6"], E, "", "")],
        ),
        (
            "service entry as a decorator(created before k8s service)",
            vec![
                svc("mysql.foo.bar", false, "mysql-svc", &["10.0.0.5"], &[("tcp", 3306)], Resolution::Passthrough),
                svc("mysql.foo.bar", true, "mysql-svc", &["10.0.0.7"], &[("tcp", 3306)], Resolution::Passthrough),
            ],
            proxy(),
            false,
            vec![("mysql.foo.bar", vec!["10.0.0.7"], K, "mysql-svc", "testns")],
        ),
        (
            "service entry as a decorator(created after k8s service)",
            vec![
                svc("mysql.foo.bar", true, "mysql-svc", &["10.0.0.7"], &[("tcp", 3306)], Resolution::Passthrough),
                svc("mysql.foo.bar", false, "mysql-svc", &["10.0.0.6"], &[("tcp", 3306)], Resolution::Passthrough),
            ],
            proxy(),
            false,
            vec![("mysql.foo.bar", vec!["10.0.0.7"], K, "mysql-svc", "testns")],
        ),
    ];
    for (name, services, p, mc, want) in cases {
        assert_eq!(sorted(table(&services, &p, mc)), sorted(want), "{name}");
    }
}

#[test]
fn upstream_pod_name_table_local_remote_addresses() {
    let cases: [LocalRemote; 4] = [
        (
            "cumulative IPs for same pod in local cluster",
            &[("10.0.0.1", "cluster1"), ("10.0.0.2", "cluster1")],
            &["10.0.0.1", "10.0.0.2"],
        ),
        (
            "cumulative IPs for same pod in remote cluster",
            &[("10.0.0.3", "cluster2"), ("10.0.0.4", "cluster2")],
            &["10.0.0.3", "10.0.0.4"],
        ),
        ("local cluster preferred over remote", &[("10.0.0.1", "cluster1"), ("10.0.0.2", "cluster2")], &["10.0.0.1"]),
        (
            "multiple local instances preferred over multiple remote",
            &[("10.0.0.1", "cluster1"), ("10.0.0.2", "cluster1"), ("10.0.0.3", "cluster2"), ("10.0.0.4", "cluster2")],
            &["10.0.0.1", "10.0.0.2"],
        ),
    ];
    for (name, instances, want) in cases {
        let mut s = headless();
        for (ip, cluster) in instances {
            instance(&mut s, ("mysql-0", ip, "", cluster), Some("mysql-0.headless-svc"), Health::Healthy);
        }
        let p = Proxy { cluster: "cluster1", ..proxy() };
        let rows = table(&[s], &p, true);
        let pod = rows.iter().find(|r| r.0 == "mysql-0.headless-svc.testns.svc.cluster.local");
        assert_eq!(pod.map(|r| r.1.clone()), Some(want.to_vec()), "{name}");
    }
}

/// Beyond upstream's cases: what `addresses` decides from the proxy.
#[test]
fn addresses_follow_the_proxy() {
    let mut k = svc(
        "web.testns.svc.cluster.local",
        true,
        "web",
        &["10.0.0.1", "fd00::1"],
        &[("http", 80)],
        Resolution::ClientSideLb,
    );
    k.namespace = "testns".into();
    let v4 = Proxy { cluster: "Kubernetes", ..proxy() };
    let v6 = Proxy { ips: vec!["fd00::9".into()], cluster: "Kubernetes", network: "" };
    let no_cluster = proxy();
    let ips = |p: &Proxy, dual: bool| {
        let asker = Asker { ips: &p.ips, network: p.network, cluster: p.cluster, auto_allocated: false, legacy: None };
        let t = name_table([&k], &asker, Flags { multicluster_headless: true, dual_stack: dual });
        t.table.get("web.testns.svc.cluster.local").map(|i| i.ips.clone()).unwrap_or_default()
    };
    assert_eq!(ips(&v4, false), vec!["10.0.0.1"], "an IPv4 proxy gets the IPv4 cluster IP");
    assert_eq!(ips(&v6, false), vec!["fd00::1"], "an IPv6 proxy the IPv6 one");
    assert_eq!(ips(&no_cluster, false), vec!["10.0.0.1"], "no CLUSTER_ID: the first address");
    // Allocated addresses: only for a proxy that takes them.
    let se = Service {
        auto_addresses: vec!["240.240.0.1".into(), "2001:2::1".into()],
        ..svc("api.example.com", false, "api", &[], &[("http", 80)], Resolution::Dns)
    };
    let take = |auto: bool| {
        let p = proxy();
        let asker = Asker { ips: &p.ips, network: "", cluster: "", auto_allocated: auto, legacy: None };
        name_table([&se], &asker, Flags::default()).table.get("api.example.com").map(|i| i.ips.clone())
    };
    assert_eq!(take(true), Some(vec!["240.240.0.1".to_owned()]));
    assert_eq!(take(false), None, "without an address, a DNS ServiceEntry has no entry");
}

/// istio/istio (release-1.28) `pilot/pkg/xds/nds_test.go` `TestNDS`, with
/// its `testdata/nds-se.yaml` and `PILOT_ENABLE_IP_AUTOALLOCATE` off (the
/// legacy allocation): a proxy of `default` (`1.1.1.1`, no cluster) with
/// DNS capture and `DNS_AUTO_ALLOCATE`, and one with capture only.
#[test]
fn upstream_nds() {
    let yaml = r#"
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: service-dns-no-addr, namespace: ns2}
spec:
  hosts: [random-1.host.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: service-dns-with-addr, namespace: ns2}
spec:
  hosts: [random-2.host.example]
  addresses: [9.9.9.9]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: service-static-no-addr, namespace: ns2}
spec:
  hosts: [random-3.host.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  location: MESH_INTERNAL
  endpoints: [{address: 1.2.3.4, labels: {security.istio.io/tlsMode: istio}}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: service-none-wildcard, namespace: ns2}
spec:
  hosts: ["*.random-4.host.example"]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: NONE
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: service-none-no-wildcard, namespace: ns2}
spec:
  hosts: [random-5.host.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: NONE
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: cidr, namespace: default}
spec:
  addresses: [198.51.100.0/31]
  hosts: [address.internal]
  ports: [{name: tcp, number: 8888, protocol: TCP}]
"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("nds-se.yaml"), yaml).unwrap();
    let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let mut mesh = crate::meshconfig::MeshSettings::default();
    mesh.dns.ip_autoallocate = false;
    let model = crate::model::Model::build_in(&loaded.objects, "cluster.local", Arc::new(mesh));
    let legacy = legacy_allocation(model.services.values().map(Arc::as_ref));
    let ips: Vec<Arc<str>> = vec!["1.1.1.1".into()];
    let table = |auto: bool| -> BTreeMap<String, (Vec<String>, String)> {
        let asker =
            Asker { ips: &ips, network: "", cluster: "", auto_allocated: auto, legacy: auto.then_some(&legacy) };
        let t = name_table(model.services.values().map(Arc::as_ref), &asker, Flags::default());
        t.table.into_iter().map(|(h, i)| (h, (i.ips, i.registry))).collect()
    };
    let row = |ip: &str| (vec![ip.to_owned()], "External".to_owned());
    assert_eq!(
        table(true),
        BTreeMap::from([
            ("random-1.host.example".to_owned(), row("240.240.116.21")),
            ("random-2.host.example".to_owned(), row("9.9.9.9")),
            ("random-3.host.example".to_owned(), row("240.240.81.100")),
        ]),
        "auto allocate"
    );
    assert_eq!(table(false), BTreeMap::from([("random-2.host.example".to_owned(), row("9.9.9.9"))]), "just capture");
}
