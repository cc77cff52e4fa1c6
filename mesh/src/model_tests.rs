//! Conversion tests from manifests written after the Kubernetes docs.

use std::path::Path;

use crate::model::*;

pub(super) fn build(yaml: &str) -> Model {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.yaml"), yaml).unwrap();
    let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    Model::build(&loaded.objects, "cluster.local")
}

#[test]
fn protocol_detection_follows_istio() {
    let p = |name: Option<&str>, ap: Option<&str>, l4: Option<&str>| Protocol::of_port(name, ap, l4);
    assert_eq!(p(Some("http"), None, None), Protocol::Http);
    assert_eq!(p(Some("http2-api"), None, None), Protocol::Http2);
    assert_eq!(p(Some("grpc-web"), None, None), Protocol::Grpc, "prefix before the first dash");
    assert_eq!(p(Some("GRPC"), None, None), Protocol::Grpc, "case-insensitive");
    assert_eq!(p(Some("tcp-db"), None, None), Protocol::Tcp);
    assert_eq!(p(Some("https"), None, None), Protocol::Https);
    assert_eq!(p(Some("tls-x"), None, None), Protocol::Tls);
    assert_eq!(p(Some("mongo"), None, None), Protocol::Mongo);
    assert_eq!(p(Some("web"), None, None), Protocol::Unsupported, "unknown names are sniffed");
    assert_eq!(p(None, None, None), Protocol::Unsupported);
    assert_eq!(p(Some("tcp"), Some("grpc"), None), Protocol::Grpc, "appProtocol wins");
    assert_eq!(p(Some("http"), Some("kubernetes.io/h2c"), None), Protocol::Http2);
    assert_eq!(p(Some("http"), Some("kubernetes.io/ws"), None), Protocol::Http);
    assert_eq!(
        p(Some("http"), Some("custom.example/x"), None),
        Protocol::Http,
        "unknown appProtocol falls back to the name"
    );
    assert_eq!(p(Some("dns"), None, Some("UDP")), Protocol::Udp);
}

#[test]
fn headless_service_with_named_target_ports_and_two_ports() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: db, namespace: data}
spec:
  clusterIP: None
  selector: {app: db}
  ports:
  - {name: tcp-client, port: 5432, targetPort: pg}
  - {name: http-metrics, port: 9187, targetPort: 9187}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-abc
  namespace: data
  labels: {kubernetes.io/service-name: db}
addressType: IPv4
ports:
- {name: tcp-client, port: 15432, protocol: TCP}
- {name: http-metrics, port: 9187, protocol: TCP}
endpoints:
- addresses: [10.1.0.5]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: db-0, namespace: data}
---
apiVersion: v1
kind: Pod
metadata:
  name: db-0
  namespace: data
  labels: {app: db, security.istio.io/tlsMode: istio}
spec: {serviceAccountName: db, nodeName: n1}
status: {podIP: 10.1.0.5, phase: Running}
---
apiVersion: v1
kind: Node
metadata:
  name: n1
  labels: {topology.kubernetes.io/region: eu-west1, topology.kubernetes.io/zone: eu-west1-a, topology.istio.io/subzone: rack7}
"#,
    );
    let s = &m.services["db.data.svc.cluster.local"];
    assert_eq!(s.resolution, Resolution::Passthrough);
    assert!(s.vips.is_empty(), "headless: no VIP");
    assert_eq!(
        s.ports.iter().map(|p| (p.port, p.protocol)).collect::<Vec<_>>(),
        vec![(5432, Protocol::Tcp), (9187, Protocol::Http)]
    );
    let pg: Vec<&Endpoint> = s.endpoints.iter().filter(|e| e.service_port == 5432).collect();
    assert_eq!(pg.len(), 1);
    assert_eq!(pg[0].port, 15432, "the named target port resolved through the slice");
    assert_eq!(pg[0].service_account, "db");
    assert_eq!(pg[0].tls_mode, "istio");
    assert_eq!(
        pg[0].locality,
        Locality { region: "eu-west1".into(), zone: "eu-west1-a".into(), subzone: "rack7".into() }
    );
    assert_eq!(pg[0].labels["app"], "db");
}

#[test]
fn ipv6_and_terminating_endpoints_and_istio_locality_label() {
    let m = build(
        r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: fd00:10:96::a
  clusterIPs: [fd00:10:96::a]
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv6
ports: [{port: 8080}]
endpoints:
- addresses: ["fd00:10:244::5"]
  conditions: {ready: false, serving: true, terminating: true}
  zone: z1
- addresses: ["fd00:10:244::6"]
  conditions: {ready: false, serving: false, terminating: true}
- addresses: ["fd00:10:244::8"]
  conditions: {ready: false, serving: false, terminating: false}
- addresses: ["fd00:10:244::7"]
  targetRef: {kind: Pod, name: web-7}
---
apiVersion: v1
kind: Pod
metadata: {name: web-7, labels: {istio-locality: us.us-1.r2}}
status: {podIP: "fd00:10:244::7"}
"#,
    );
    let s = &m.services["web.default.svc.cluster.local"];
    assert_eq!(s.namespace, "default");
    assert_eq!(s.vips, vec!["fd00:10:96::a"]);
    assert_eq!(s.ports[0].protocol, Protocol::Unsupported);
    let h: Vec<(&str, Health)> = s.endpoints.iter().map(|e| (e.address.as_str(), e.health)).collect();
    assert_eq!(
        h,
        vec![
            ("fd00:10:244::5", Health::Draining),
            ("fd00:10:244::6", Health::Terminating),
            ("fd00:10:244::7", Health::Healthy),
            ("fd00:10:244::8", Health::Unhealthy)
        ]
    );
    assert_eq!(s.endpoints[0].locality.zone, "z1", "slice zone when no node is known");
    assert_eq!(s.endpoints[2].locality, Locality { region: "us".into(), zone: "us-1".into(), subzone: "r2".into() });
    assert_eq!(s.endpoints[1].tls_mode, "disabled");
}

#[test]
fn bundled_example() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let objs = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let m = Model::build(&objs, "cluster.local");
    let reviews = &m.services["reviews.bookinfo.svc.cluster.local"];
    assert_eq!(reviews.vips, vec!["10.96.10.12"]);
    assert_eq!(reviews.endpoints.len(), 4);
    assert!(reviews.endpoints.iter().all(|e| e.tls_mode == "istio" && e.service_account == "bookinfo-reviews"));
    assert!(reviews.endpoints.iter().all(|e| !e.locality.region.is_empty()));
    let versions: std::collections::BTreeSet<&str> =
        reviews.endpoints.iter().map(|e| e.labels["version"].as_str()).collect();
    assert_eq!(versions.into_iter().collect::<Vec<_>>(), vec!["v1", "v2", "v3"]);
    assert_eq!(m.services["inventory.bookinfo.svc.cluster.local"].ports[0].protocol, Protocol::Grpc);
    assert!(m.namespaces.contains_key("bookinfo"));
}

#[test]
fn service_entries_dns_static_and_selected_workload_entries() {
    let m = build(
        r#"
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: httpbin, namespace: egress}
spec:
  hosts: [httpbin.org]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: https, protocol: TLS}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: data}
spec:
  hosts: [db.internal]
  addresses: [192.0.2.10]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 5432, name: tcp-pg, protocol: TCP, targetPort: 15432}]
  endpoints:
  - {address: 10.0.0.7, labels: {app: db, security.istio.io/tlsMode: istio}, locality: eu/eu-1/r1}
  - {address: 10.0.0.8, ports: {tcp-pg: 6543}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vms, namespace: data}
spec:
  hosts: [vm.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  workloadSelector: {labels: {app: vm}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: data}
spec: {address: 10.1.1.1, labels: {app: vm}, serviceAccount: vm}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: other, namespace: data}
spec: {address: 10.1.1.2, labels: {app: other}}
"#,
    );
    let ext = &m.services["httpbin.org"];
    assert_eq!(ext.resolution, Resolution::Dns);
    assert!(ext.mesh_external);
    assert_eq!(ext.ports[0].protocol, Protocol::Tls);
    assert_eq!(ext.endpoints[0].address, "httpbin.org", "DNS without endpoints resolves the host");
    let db = &m.services["db.internal"];
    assert_eq!(db.resolution, Resolution::ClientSideLb);
    assert_eq!(db.vips, vec!["192.0.2.10"]);
    let eps: Vec<(&str, u16, &str)> =
        db.endpoints.iter().map(|e| (e.address.as_str(), e.port, e.tls_mode.as_str())).collect();
    assert_eq!(eps, vec![("10.0.0.7", 15432, "istio"), ("10.0.0.8", 6543, "disabled")]);
    assert_eq!(db.endpoints[0].locality, Locality { region: "eu".into(), zone: "eu-1".into(), subzone: "r1".into() });
    let vm = &m.services["vm.internal"];
    assert_eq!(vm.endpoints.len(), 1, "only the selected WorkloadEntry");
    assert_eq!(vm.endpoints[0].address, "10.1.1.1");
    assert_eq!(vm.endpoints[0].service_account, "vm");
}

/// A bulk routing change (past `crate::model::edit::IN_PLACE_EDITS`, merged in one pass; issue
/// #31: one edit each of the persistent vector made 25k additions to 25k
/// take 28 s) leaves the same ordered routing list as the same changes
/// made one by one, and as a rebuild (which the served bytes follow).
#[test]
fn a_bulk_routing_change_equals_the_edits_one_by_one_and_a_rebuild() {
    // imbl's split_off (the one-by-one path) keeps chunks of IstioObjects
    // on the stack: more than a test thread's 2 MiB in a debug build.
    std::thread::Builder::new().stack_size(64 << 20).spawn(bulk_routing_case).unwrap().join().unwrap();
}

fn bulk_routing_case() {
    let doc = |kind: &str, ns: &str, name: &str, weight: u32| match kind {
        "VirtualService" => format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {name}, namespace: {ns}}}\n\
             spec: {{hosts: [{name}.example.com], http: [{{route: [{{destination: {{host: r{weight}}}}}]}}]}}\n---\n"
        ),
        _ => format!(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: {name}, namespace: {ns}}}\n\
             spec: {{host: {name}.example.com, trafficPolicy: {{connectionPool: {{tcp: {{maxConnections: {weight}}}}}}}}}\n---\n"
        ),
    };
    let load = |text: &str| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.yaml"), text).unwrap();
        istiod_kubewatch::config_dir::load(dir.path()).unwrap().objects
    };
    // Before: even i in two namespaces, a VirtualService each and a
    // DestinationRule for every third.
    let mut before = String::new();
    let mut after = String::new();
    let mut changed = Vec::new();
    for ns in ["a", "b"] {
        for i in 0..120u32 {
            let name = format!("s{i}");
            for kind in ["VirtualService", "DestinationRule"] {
                let was = i % 2 == 0 && (kind == "VirtualService" || i % 3 == 0);
                // After: a fifth removed, a seventh changed, odd ones added.
                let is = match (was, i % 5, i % 7) {
                    (true, 0, _) => None,
                    (true, _, 0) => Some(2),
                    (true, _, _) => Some(1),
                    (false, _, _) => (i % 2 == 1 && (kind == "VirtualService" || i % 3 == 0)).then_some(3),
                };
                if was {
                    before.push_str(&doc(kind, ns, &name, 1));
                }
                if let Some(w) = is {
                    after.push_str(&doc(kind, ns, &name, w));
                }
                if is != was.then_some(1) {
                    changed.push((kind.to_owned(), ns.to_owned(), name.clone()));
                }
            }
        }
    }
    let (before, after) = (load(&before), load(&after));
    let old = Model::build(&before, "cluster.local");
    assert!(changed.len() > crate::model::edit::IN_PLACE_EDITS, "{}", changed.len());
    let bulk = old.with_routing_of(&after, &changed);
    let mut one_by_one = old.clone();
    for c in changed.chunks(crate::model::edit::IN_PLACE_EDITS) {
        one_by_one = one_by_one.with_routing_of(&after, c);
    }
    let names = |m: &Model| -> Vec<String> {
        m.routing.iter().map(|o| format!("{}/{}/{}", o.meta.ns(), o.meta.name, o.kind().name())).collect()
    };
    assert_eq!(names(&bulk), names(&one_by_one));
    assert!(bulk.routing == one_by_one.routing, "the same objects");
    let rebuilt = Model::build(&after, "cluster.local");
    let sorted = |m: &Model| {
        let mut n = names(m);
        n.sort();
        n
    };
    assert_eq!(sorted(&bulk), sorted(&rebuilt));
}
