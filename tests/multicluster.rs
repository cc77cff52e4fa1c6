//! Networks and remote clusters end to end (issue #37). Networks: the
//! binary reads `--networksConfig` and the objects through `--configDir`;
//! grpcio, as sidecars in different networks (`NETWORK` node metadata),
//! fetches EDS (`tests/py/ads_fetch.py`, Envoy's field rules checked). The
//! expected shapes are istiod's split-horizon EDS
//! (`EndpointsByNetworkFilter`): a proxy's own network directly, another
//! network through its east-west gateway's addresses on 15443 with the
//! weights split among them. Remote clusters: three fake API servers (the
//! config cluster and remotes added by Secret at run time), as istiod's
//! secret controller follows them.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::python;
use crate::server::{Server, get, wait_for};

const OBJECTS: &str = "\
apiVersion: v1
kind: Namespace
metadata: {name: istio-system}
---
apiVersion: v1
kind: Service
metadata:
  name: istio-eastwestgateway
  namespace: istio-system
  labels: {topology.istio.io/network: network2, istio: eastwestgateway}
spec:
  type: LoadBalancer
  clusterIP: 10.96.0.99
  selector: {istio: eastwestgateway}
  ports: [{name: tls, port: 15443}, {name: tls-istiod, port: 15012}]
status:
  loadBalancer:
    ingress: [{ip: 203.0.113.2}, {ip: 203.0.113.3}]
---
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  clusterIP: 10.96.0.20
  selector: {app: reviews}
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Pod
metadata:
  name: reviews-a
  namespace: shop
  labels: {app: reviews, security.istio.io/tlsMode: istio}
status: {podIP: 10.1.0.1}
---
apiVersion: v1
kind: Pod
metadata:
  name: reviews-b
  namespace: shop
  labels: {app: reviews, security.istio.io/tlsMode: istio}
status: {podIP: 10.1.0.2}
---
apiVersion: v1
kind: Pod
metadata:
  name: reviews-remote
  namespace: shop
  labels: {app: reviews, security.istio.io/tlsMode: istio, topology.istio.io/network: network2}
status: {podIP: 10.2.0.1}
---
apiVersion: v1
kind: Pod
metadata:
  name: reviews-remote-plain
  namespace: shop
  labels: {app: reviews, topology.istio.io/network: network2}
status: {podIP: 10.2.0.2}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-1
  namespace: shop
  labels: {kubernetes.io/service-name: reviews}
addressType: IPv4
ports: [{name: http, port: 9080}]
endpoints:
- {addresses: [10.1.0.1], conditions: {ready: true}, targetRef: {kind: Pod, name: reviews-a, namespace: shop}}
- {addresses: [10.1.0.2], conditions: {ready: true}, targetRef: {kind: Pod, name: reviews-b, namespace: shop}}
- {addresses: [10.2.0.1], conditions: {ready: true}, targetRef: {kind: Pod, name: reviews-remote, namespace: shop}}
- {addresses: [10.2.0.2], conditions: {ready: true}, targetRef: {kind: Pod, name: reviews-remote-plain, namespace: shop}}
";

/// Unlabelled workloads of this cluster (`Kubernetes`) are network1's.
const NETWORKS: &str = "networks:\n  network1:\n    endpoints: [{fromRegistry: Kubernetes}]\n";

const CLUSTER: &str = "outbound|9080||reviews.shop.svc.cluster.local";

/// EDS for `CLUSTER` as a sidecar in `network` (none: no `NETWORK`).
fn eds(s: &Server, network: Option<&str>) -> Value {
    eds_of(s, network, CLUSTER)
}

/// EDS for `cluster` as a sidecar in `network`.
fn eds_of(s: &Server, network: Option<&str>, cluster: &str) -> Value {
    let mut metadata = json!({});
    if let Some(n) = network {
        metadata["NETWORK"] = json!(n);
    }
    eds_as(s, metadata, cluster)
}

/// EDS for `cluster` as a sidecar with `metadata` besides the usual.
fn eds_as(s: &Server, mut metadata: Value, cluster: &str) -> Value {
    for (k, v) in [("NAMESPACE", "web"), ("ISTIO_VERSION", "1.28.0"), ("INSTANCE_IPS", "10.1.0.9")] {
        metadata[k] = json!(v);
    }
    let node = json!({"id": "sidecar~10.1.0.9~web-0.web~web.svc.cluster.local", "metadata": metadata});
    let out = std::process::Command::new(python::python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/ads_fetch.py"))
        .arg(s.grpc.to_string())
        .arg(node.to_string())
        .envs([("EDS", "1"), ("PGV", "1")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", python::text(&out), s.log());
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["pgv_errors"], json!([]), "{got:#}");
    got["endpoints"][cluster].clone()
}

/// (address:port, weight, tlsMode) of each endpoint, and each locality's weight.
fn endpoints(cla: &Value) -> (Vec<(String, u64, String)>, Vec<u64>) {
    let groups = cla["endpoints"].as_array().unwrap_or_else(|| panic!("no endpoints: {cla:#}"));
    let eps = groups
        .iter()
        .flat_map(|g| g["lbEndpoints"].as_array().unwrap().iter())
        .map(|e| {
            let sa = &e["endpoint"]["address"]["socketAddress"];
            let tls = &e["metadata"]["filterMetadata"]["envoy.transport_socket_match"]["tlsMode"];
            (
                format!("{}:{}", sa["address"].as_str().unwrap(), sa["portValue"]),
                e["loadBalancingWeight"].as_u64().unwrap(),
                tls.as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    (eps, groups.iter().map(|g| g["loadBalancingWeight"].as_u64().unwrap()).collect())
}

fn ep(a: &str, w: u64, tls: &str) -> (String, u64, String) {
    (a.to_owned(), w, tls.to_owned())
}

/// Split-horizon EDS through grpcio: network1 sees its own endpoints and
/// network2's mTLS endpoint through both gateway addresses (the scale is 2,
/// two gateways for network2; the endpoint's 2 splits 1 and 1); the plain
/// network2 endpoint is left out (no SNI routing without mTLS). network2
/// sees everything directly: no gateway leads into network1. A proxy that
/// names no network goes through the gateway for network2 too. The
/// gateways are listed by `/debug/networkz` in istiod's shape; a networks
/// change (a second gateway address for network1) is followed.
#[test]
fn split_horizon_eds_through_east_west_gateways() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir(&config).unwrap();
    std::fs::write(config.join("objects.yaml"), OBJECTS).unwrap();
    let networks = dir.path().join("meshNetworks");
    std::fs::write(&networks, NETWORKS).unwrap();
    let s = Server::start(&config, &["--networksConfig", networks.to_str().unwrap()], &[], None);

    let gws: Value = serde_json::from_str(&get(s.http, "/debug/networkz").unwrap().1).unwrap();
    let gw = |addr: &str| {
        json!({"Network": "network2", "Cluster": "Kubernetes", "Addr": addr, "Port": 15443, "HBONEPort": 0,
               "ServiceAccount": {"Namespace": "", "Name": ""}})
    };
    assert_eq!(gws, json!([gw("203.0.113.2"), gw("203.0.113.3")]));

    let (eps, localities) = endpoints(&eds(&s, Some("network1")));
    assert_eq!(
        eps,
        [
            ep("10.1.0.1:9080", 2, "istio"),
            ep("10.1.0.2:9080", 2, "istio"),
            ep("203.0.113.2:15443", 1, "istio"),
            ep("203.0.113.3:15443", 1, "istio"),
        ]
    );
    assert_eq!(localities, [6]);
    // A gateway endpoint's telemetry metadata, as istiod's ep_filters.go
    // appends it: no workload, the gateway's cluster.
    let cla = eds(&s, Some("network1"));
    let gateway = cla["endpoints"][0]["lbEndpoints"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["endpoint"]["address"]["socketAddress"]["portValue"] == 15443))
        .unwrap_or_else(|| panic!("{cla:#}"))
        .clone();
    assert_eq!(gateway["metadata"]["filterMetadata"]["istio"]["workload"], ";;;;Kubernetes", "{gateway:#}");

    let (eps, localities) = endpoints(&eds(&s, Some("network2")));
    assert_eq!(
        eps,
        [
            ep("10.1.0.1:9080", 2, "istio"),
            ep("10.1.0.2:9080", 2, "istio"),
            ep("10.2.0.1:9080", 2, "istio"),
            ep("10.2.0.2:9080", 2, ""),
        ]
    );
    assert_eq!(localities, [8]);

    let (eps, _) = endpoints(&eds(&s, None));
    assert_eq!(
        eps,
        [
            ep("10.1.0.1:9080", 2, "istio"),
            ep("10.1.0.2:9080", 2, "istio"),
            ep("203.0.113.2:15443", 1, "istio"),
            ep("203.0.113.3:15443", 1, "istio"),
        ],
        "no NETWORK: network2 through its gateway, network1 (no gateway) directly"
    );

    // network1 gets a gateway: network2's proxies now reach it through
    // that, and the scale (lcm of 2 and 1) stays 2.
    std::fs::write(&networks, format!("{NETWORKS}    gateways: [{{address: 198.51.100.1, port: 15443}}]\n")).unwrap();
    wait_for("the new gateway", Duration::from_secs(10), || {
        get(s.http, "/debug/networkz").is_some_and(|(_, b)| b.contains("198.51.100.1"))
    });
    let (eps, localities) = endpoints(&eds(&s, Some("network2")));
    assert_eq!(
        eps,
        [ep("10.2.0.1:9080", 2, "istio"), ep("10.2.0.2:9080", 2, ""), ep("198.51.100.1:15443", 4, "istio")]
    );
    assert_eq!(localities, [8]);

    // An invalid networks file is reported and the last good one stays.
    std::fs::write(&networks, "networks: {network1: {gateways: [{address: 198.51.100.1, port: 0}]}}\n").unwrap();
    wait_for("the refusal", Duration::from_secs(10), || s.log().contains("invalid mesh networks"));
    assert!(s.log().contains("port number 0 must be in the range 1..65535"), "{}", s.log());
    assert!(get(s.http, "/debug/networkz").unwrap().1.contains("198.51.100.1"));
}

/// An API server for a remote cluster: its registry's kinds, a system
/// namespace on `network`, and Service `reviews` in `shop` with one
/// endpoint at `ip` (a Pod with a sidecar).
fn remote_api(network: &str, ip: &str) -> istiod_kubewatch::fake::FakeApi {
    remote_api_led(network, ip, None)
}

fn remote_api_led(network: &str, ip: &str, leader: Option<&str>) -> istiod_kubewatch::fake::FakeApi {
    let api = crate::server::bare_fake_api();
    for r in istiod_kubewatch::fake::core_resources() {
        api.install(r);
    }
    populate_led(&api, network, ip, leader);
    api
}

fn populate(api: &istiod_kubewatch::fake::FakeApi, network: &str, ip: &str) {
    populate_led(api, network, ip, None);
}

/// [`populate`], the system namespace naming `leader` as its control
/// plane cluster (`topology.istio.io/controlPlaneClusters`).
fn populate_led(api: &istiod_kubewatch::fake::FakeApi, network: &str, ip: &str, leader: Option<&str>) {
    let annotations = match leader {
        Some(l) => json!({"topology.istio.io/controlPlaneClusters": l}),
        None => json!({}),
    };
    api.apply(
        "namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "istio-system", "labels": {"topology.istio.io/network": network}, "annotations": annotations}}),
    );
    api.apply("namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}));
    api.apply(
        "services",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "reviews", "namespace": "shop"},
               "spec": {"clusterIP": "10.96.0.20", "selector": {"app": "reviews"}, "ports": [{"name": "http", "port": 9080}]}}),
    );
    let pod = format!("reviews-{}", ip.replace('.', "-"));
    api.apply(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": pod, "namespace": "shop", "labels": {"app": "reviews", "security.istio.io/tlsMode": "istio"}},
               "status": {"podIP": ip}}),
    );
    api.apply(
        "endpointslices",
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "reviews-1", "namespace": "shop", "labels": {"kubernetes.io/service-name": "reviews"}},
               "addressType": "IPv4", "ports": [{"name": "http", "port": 9080}],
               "endpoints": [{"addresses": [ip], "conditions": {"ready": true},
                              "targetRef": {"kind": "Pod", "name": pod, "namespace": "shop"}}]}),
    );
}

/// A kubeconfig for `url` with a bearer token (never to be logged).
fn remote_kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: r, cluster: {{server: \"{url}\"}}}}]\n\
         users: [{{name: u, user: {{token: sekret-token-do-not-log}}}}]\n\
         contexts: [{{name: c, context: {{cluster: r, user: u}}}}]\ncurrent-context: c\n"
    )
}

/// A remote secret: `istio/multiCluster: "true"`, one key per cluster.
fn remote_secret(name: &str, clusters: &[(&str, String)]) -> Value {
    use base64::Engine;
    let data: serde_json::Map<String, Value> = clusters
        .iter()
        .map(|(c, k)| ((*c).to_owned(), json!(base64::engine::general_purpose::STANDARD.encode(k))))
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
           "metadata": {"name": name, "namespace": "istio-system", "labels": {"istio/multiCluster": "true"}},
           "data": data})
}

/// The endpoint addresses `/debug/endpointShardz` has for reviews, by shard.
fn shards(s: &Server) -> Value {
    let v: Value = serde_json::from_str(&get(s.http, "/debug/endpointShardz").unwrap().1).unwrap();
    let shards = &v["reviews.shop.svc.cluster.local"]["shop"]["Shards"];
    let mut out = serde_json::Map::new();
    for (k, eps) in shards.as_object().into_iter().flatten() {
        let addrs: Vec<Value> = eps.as_array().unwrap().iter().map(|e| e["Addresses"][0].clone()).collect();
        out.insert(k.clone(), Value::Array(addrs));
    }
    Value::Object(out)
}

fn metric(s: &Server, series: &str) -> Option<f64> {
    let (_, body) = get(s.monitoring, "/metrics")?;
    body.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

/// Remote clusters by Secret, at run time (istiod's secret controller):
/// a remote on the config cluster's network joins `reviews` directly; one
/// on another network, whose east-west gateway is its own Service, is
/// reached through that gateway (a grpcio sidecar's EDS); a rotated
/// kubeconfig moves to the new API server; a deleted Secret removes its
/// cluster; a remote whose API server does not answer is reported as timed
/// out and holds nothing back; a kubeconfig that does not parse is
/// reported and skipped; a key naming this cluster is ignored; a
/// cluster-local host's endpoints are the proxy's cluster's. No
/// credential reaches the log, and `/debug/clusterz` and the metrics say
/// what istiod's say.
#[test]
fn remote_clusters_join_by_secret_and_are_followed() {
    let primary = crate::server::fake_api();
    for r in istiod_kubewatch::fake::core_resources() {
        primary.install(r);
    }
    populate(&primary, "network1", "10.1.0.1");
    // west names this cluster as its control plane (EXTERNAL_ISTIOD):
    // its root ConfigMaps are kept from here; south's are not.
    let west = remote_api_led("network1", "10.2.0.1", Some("east"));
    let south = remote_api("network2", "10.3.0.1");
    south.apply(
        "services",
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "istio-eastwestgateway", "namespace": "istio-system", "labels": {"topology.istio.io/network": "network2"}},
               "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.99", "ports": [{"name": "tls", "port": 15443}]},
               "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.30"}]}}}),
    );
    let moved = remote_api("network1", "10.4.0.1");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = crate::server::kubeconfig(dir.path(), &primary.url());
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--clusterAliases", "old-east=east"],
        &[
            ("ISTIOD_RS_SELF_SIGNED_CA_DIR", dir.path().join("ca").to_str().unwrap()),
            ("CLUSTER_ID", "east"),
            ("PILOT_REMOTE_CLUSTER_TIMEOUT", "2s"),
            ("EXTERNAL_ISTIOD", "true"),
        ],
        None,
    );
    let wait = |what: &str, f: &dyn Fn() -> bool| wait_for(what, Duration::from_secs(20), f);
    wait("the config cluster's endpoints", &|| shards(&s) == json!({"Kubernetes/east": ["10.1.0.1"]}));
    let clusterz = || serde_json::from_str::<Value>(&get(s.http, "/debug/clusterz").unwrap().1).unwrap();
    assert_eq!(clusterz(), json!([{"id": "east", "secretName": "", "syncStatus": "synced"}]));
    assert_eq!(metric(&s, "istiod_managed_clusters{cluster_type=\"remote\"}"), Some(0.0));

    // Two remotes: west on this network, south behind its gateway. A key
    // for this cluster in the same Secret is ignored.
    primary.apply(
        "secrets",
        remote_secret(
            "istio-remote-secret-west",
            &[("west", remote_kubeconfig(&west.url())), ("east", remote_kubeconfig(&west.url()))],
        ),
    );
    primary.apply("secrets", remote_secret("istio-remote-secret-south", &[("south", remote_kubeconfig(&south.url()))]));
    wait("the remotes' endpoints", &|| {
        shards(&s)
            == json!({"Kubernetes/east": ["10.1.0.1"], "Kubernetes/west": ["10.2.0.1"], "Kubernetes/south": ["10.3.0.1"]})
    });
    assert!(s.log().contains("ignoring cluster as it would overwrite the config cluster"), "{}", s.log());
    assert_eq!(
        clusterz(),
        json!([
            {"id": "east", "secretName": "", "syncStatus": "synced"},
            {"id": "south", "secretName": "istio-system/istio-remote-secret-south", "syncStatus": "synced"},
            {"id": "west", "secretName": "istio-system/istio-remote-secret-west", "syncStatus": "synced"},
        ])
    );
    let (eps, localities) = endpoints(&eds(&s, Some("network1")));
    assert_eq!(
        eps,
        [ep("10.1.0.1:9080", 1, "istio"), ep("10.2.0.1:9080", 1, "istio"), ep("203.0.113.30:15443", 1, "istio")],
        "network1: east and west directly, south through its gateway"
    );
    assert_eq!(localities, [3]);
    let (eps, _) = endpoints(&eds(&s, Some("network2")));
    assert_eq!(
        eps,
        // (The config cluster's endpoints, then the remotes' by cluster ID.)
        [ep("10.1.0.1:9080", 1, "istio"), ep("10.3.0.1:9080", 1, "istio"), ep("10.2.0.1:9080", 1, "istio")],
        "network2: everything directly (no gateway leads into network1)"
    );
    assert_eq!(metric(&s, "istiod_managed_clusters{cluster_type=\"remote\"}"), Some(2.0));
    assert_eq!(
        metric(&s, "istiod_remote_cluster_sync_status{cluster=\"west\",cluster_type=\"remote\",status=\"synced\"}"),
        Some(1.0)
    );
    assert_eq!(metric(&s, "remote_cluster_secret_events_total{event=\"add\"}"), Some(2.0));

    // EXTERNAL_ISTIOD: the root ConfigMap in west's namespaces, none in
    // south's (its system namespace names no control plane cluster).
    wait("west's root ConfigMaps", &|| west.get("configmaps", "shop", "istio-ca-root-cert").is_some());
    let root = west.get("configmaps", "shop", "istio-ca-root-cert").unwrap();
    let ca = std::fs::read_to_string(dir.path().join("ca/ca-cert.pem")).unwrap();
    assert_eq!(root["data"]["root-cert.pem"].as_str().map(str::trim), Some(ca.trim()));
    assert!(south.get("configmaps", "shop", "istio-ca-root-cert").is_none());

    // A cluster-local host (istiod's default: all of kube-system): a proxy
    // sees its own cluster's endpoints of it, a `--clusterAliases` alias
    // naming its cluster.
    for (api, ip) in [(&primary, "10.1.9.9"), (&west, "10.2.9.9")] {
        api.apply(
            "services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "namespace": "kube-system"},
                   "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "tcp-dns", "port": 53}]}}),
        );
        api.apply(
            "endpointslices",
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": "kube-dns-1", "namespace": "kube-system", "labels": {"kubernetes.io/service-name": "kube-dns"}},
                   "addressType": "IPv4", "ports": [{"name": "tcp-dns", "port": 53}],
                   "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}]}),
        );
    }
    let dns = "outbound|53||kube-dns.kube-system.svc.cluster.local";
    let dns_shards = || {
        let v: Value = serde_json::from_str(&get(s.http, "/debug/endpointShardz").unwrap().1).unwrap();
        v["kube-dns.kube-system.svc.cluster.local"]["kube-system"]["Shards"].as_object().map_or(0, |o| o.len())
    };
    wait("kube-dns in both clusters", &|| dns_shards() == 2);
    let of = |cluster: &str| endpoints(&eds_as(&s, json!({"CLUSTER_ID": cluster, "NETWORK": "network1"}), dns)).0;
    assert_eq!(of("east"), [ep("10.1.9.9:53", 1, "")]);
    assert_eq!(of("west"), [ep("10.2.9.9:53", 1, "")]);
    assert_eq!(of("old-east"), [ep("10.1.9.9:53", 1, "")], "an alias of east");
    let (eps, _) = endpoints(&eds_as(&s, json!({"CLUSTER_ID": "east", "NETWORK": "network1"}), CLUSTER));
    assert_eq!(eps.len(), 3, "reviews is not cluster-local: {eps:?}");

    // A remote's change is followed.
    west.apply(
        "endpointslices",
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "reviews-2", "namespace": "shop", "labels": {"kubernetes.io/service-name": "reviews"}},
               "addressType": "IPv4", "ports": [{"name": "http", "port": 9080}],
               "endpoints": [{"addresses": ["10.2.0.2"], "conditions": {"ready": true}}]}),
    );
    wait("west's new endpoint", &|| shards(&s)["Kubernetes/west"] == json!(["10.2.0.1", "10.2.0.2"]));

    // west's kubeconfig rotated to another API server.
    primary.apply("secrets", remote_secret("istio-remote-secret-west", &[("west", remote_kubeconfig(&moved.url()))]));
    wait("west moved", &|| shards(&s)["Kubernetes/west"] == json!(["10.4.0.1"]));
    assert_eq!(metric(&s, "remote_cluster_secret_events_total{event=\"update\"}"), Some(1.0));

    // A remote that does not answer: reported after the timeout; the
    // others serve on, and readiness does not wait for it.
    let dead = crate::server::free_port();
    primary.apply(
        "secrets",
        remote_secret("istio-remote-secret-down", &[("down", remote_kubeconfig(&format!("http://{dead}")))]),
    );
    wait("the timeout", &|| {
        metric(&s, "istiod_remote_cluster_sync_status{cluster=\"down\",cluster_type=\"remote\",status=\"timeout\"}")
            == Some(1.0)
    });
    assert_eq!(metric(&s, "remote_cluster_sync_timeouts_total"), Some(1.0));
    assert!(clusterz().as_array().unwrap().iter().any(|c| c["id"] == "down" && c["syncStatus"] == "timeout"));
    assert_eq!(get(s.http, "/ready").unwrap().0, 200);
    assert_eq!(shards(&s)["Kubernetes/west"], json!(["10.4.0.1"]));

    // A kubeconfig that does not parse: reported, skipped.
    primary.apply("secrets", remote_secret("istio-remote-secret-bad", &[("bad", "clusters: [unclosed".to_owned())]));
    wait("the refusal", &|| s.log().contains("create remote cluster failed: invalid kubeconfig"));
    assert!(!clusterz().as_array().unwrap().iter().any(|c| c["id"] == "bad"));

    // west's Secret deleted: its cluster goes.
    primary.delete("secrets", "istio-system", "istio-remote-secret-west");
    wait("west gone", &|| shards(&s).get("Kubernetes/west").is_none());
    assert_eq!(shards(&s)["Kubernetes/south"], json!(["10.3.0.1"]));
    assert_eq!(metric(&s, "remote_cluster_secret_events_total{event=\"delete\"}"), Some(1.0));
    assert!(!s.log().contains("sekret-token"), "a credential was logged:\n{}", s.log());
    assert_eq!(
        s.log().matches("ignoring cluster as it would overwrite the config cluster").count(),
        1,
        "said once, not at every update of the objects"
    );
    assert!(!get(s.http, "/debug/clusterz").unwrap().1.contains("sekret"));
}

/// istiod's readiness with remote clusters: a remote registered at start
/// that does not answer holds `/ready` back until
/// `PILOT_REMOTE_CLUSTER_TIMEOUT`, and no longer.
#[test]
fn a_dead_remote_delays_readiness_only_to_the_timeout() {
    let primary = crate::server::fake_api();
    for r in istiod_kubewatch::fake::core_resources() {
        primary.install(r);
    }
    populate(&primary, "network1", "10.1.0.1");
    let dead = crate::server::free_port();
    primary.apply(
        "secrets",
        remote_secret("istio-remote-secret-down", &[("down", remote_kubeconfig(&format!("http://{dead}")))]),
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = crate::server::kubeconfig(dir.path(), &primary.url());
    let started = std::time::Instant::now();
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &[],
        &[
            ("ISTIOD_RS_SELF_SIGNED_CA_DIR", dir.path().join("ca").to_str().unwrap()),
            ("CLUSTER_ID", "east"),
            ("PILOT_REMOTE_CLUSTER_TIMEOUT", "3s"),
        ],
        None,
    );
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(3), "ready after {took:?}, before the remote's timeout");
    assert!(took < Duration::from_secs(20), "ready after {took:?}");
    assert!(s.log().contains("remote cluster did not sync in time"), "{}", s.log());
    assert_eq!(metric(&s, "remote_cluster_sync_timeouts_total"), Some(1.0));
}

/// A remote cluster's east-west gateway as a Gateway API Gateway (istiod's
/// network manager reads each cluster's, `handleGatewayResource`, under
/// `PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API`): network1's sidecar reaches
/// the remote's network2 endpoint through the Gateway's address on its
/// auto-passthrough listener. An `istio-remote` Gateway there is not read
/// (only the config cluster's are), nor are any with the switch off.
#[test]
fn a_remote_gateway_api_gateway_leads_into_its_network() {
    let primary = crate::server::fake_api();
    for r in istiod_kubewatch::fake::core_resources() {
        primary.install(r);
    }
    populate(&primary, "network1", "10.1.0.1");
    let south = remote_api("network2", "10.3.0.1");
    for r in istiod_kubewatch::fake::gateway_api_resources() {
        south.install(r);
    }
    let gateway = |name: &str, class: &str, ip: &str, network: &str| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": name, "namespace": "istio-system", "labels": {"topology.istio.io/network": network}},
               "spec": {"gatewayClassName": class, "addresses": [{"type": "IPAddress", "value": ip}],
                        "listeners": [{"name": "tls-passthrough", "port": 15443, "protocol": "TLS",
                                       "tls": {"mode": "Passthrough", "options": {"gateway.istio.io/listener-protocol": "auto-passthrough"}}}]}})
    };
    south.apply(istiod_kubewatch::fake::K8S_GATEWAYS, gateway("eastwest", "istio", "203.0.113.40", "network2"));
    south.apply(istiod_kubewatch::fake::K8S_GATEWAYS, gateway("elsewhere", "istio-remote", "203.0.113.41", "network3"));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = crate::server::kubeconfig(dir.path(), &primary.url());
    let start = |env: &[(&str, &str)]| {
        let mut e = vec![
            ("ISTIOD_RS_SELF_SIGNED_CA_DIR", dir.path().join("ca").to_str().unwrap().to_owned()),
            ("CLUSTER_ID", "east".to_owned()),
        ];
        e.extend(env.iter().map(|(k, v)| (*k, (*v).to_owned())));
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Server::start_on(&["--kubeconfig", kubeconfig.to_str().unwrap()], &[], &e, None)
    };
    primary.apply("secrets", remote_secret("istio-remote-secret-south", &[("south", remote_kubeconfig(&south.url()))]));
    let s = start(&[]);
    wait_for("the remote's endpoints", Duration::from_secs(20), || {
        shards(&s) == json!({"Kubernetes/east": ["10.1.0.1"], "Kubernetes/south": ["10.3.0.1"]})
    });
    wait_for("the remote's gateway", Duration::from_secs(20), || {
        get(s.http, "/debug/networkz").is_some_and(|(_, b)| b.contains("203.0.113.40"))
    });
    assert!(
        !get(s.http, "/debug/networkz").unwrap().1.contains("203.0.113.41"),
        "istio-remote: the config cluster's only"
    );
    let (eps, _) = endpoints(&eds(&s, Some("network1")));
    assert_eq!(
        eps,
        [ep("10.1.0.1:9080", 1, "istio"), ep("203.0.113.40:15443", 1, "istio")],
        "south through its Gateway"
    );
    drop(s);
    let off = start(&[("PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API", "false")]);
    wait_for("the remote's endpoints", Duration::from_secs(20), || {
        shards(&off) == json!({"Kubernetes/east": ["10.1.0.1"], "Kubernetes/south": ["10.3.0.1"]})
    });
    assert!(!get(off.http, "/debug/networkz").unwrap().1.contains("203.0.113.40"), "the switch off reads none");
}
