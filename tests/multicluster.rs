//! Networks end to end (issue #37): the binary reads `--networksConfig`
//! and the objects through `--configDir`; grpcio, as sidecars in different
//! networks (`NETWORK` node metadata), fetches EDS
//! (`tests/py/ads_fetch.py`, Envoy's field rules checked). The expected
//! shapes are istiod's split-horizon EDS (`EndpointsByNetworkFilter`):
//! a proxy's own network directly, another network through its east-west
//! gateway's addresses on 15443 with the weights split among them.

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
    let mut metadata = json!({"NAMESPACE": "web", "ISTIO_VERSION": "1.28.0", "INSTANCE_IPS": "10.1.0.9"});
    if let Some(n) = network {
        metadata["NETWORK"] = json!(n);
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
    got["endpoints"][CLUSTER].clone()
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
