//! Virtual machines and DNS: the name tables istio-agent's DNS proxy gets
//! (NDS), asked for by a grpcio client as the agent asks, each table
//! decoded with the project's own NDS proto.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;
use istiod_proto::istio::networking::nds::v1::NameTable;
use istiod_proto::prost::Message;
use serde_json::{Value, json};

use crate::python;
use crate::server::{Server, wait_for};

const OBJECTS: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: web}
spec:
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  selector: {app: reviews}
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: data}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: tcp-pg, port: 5432}]
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, namespace: data, labels: {app: db}}
spec: {hostname: db-0, subdomain: db, containers: [{name: pg}]}
status: {podIP: 10.2.0.1, phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: db-1, namespace: data, labels: {app: db}}
spec: {subdomain: db, containers: [{name: pg}]}
status: {podIP: 10.2.0.2, phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: db-abc, namespace: data, labels: {kubernetes.io/service-name: db}}
addressType: IPv4
ports: [{name: tcp-pg, port: 5432, protocol: TCP}]
endpoints:
- {addresses: [10.2.0.1], conditions: {ready: true}, targetRef: {kind: Pod, name: db-0, namespace: data}}
- {addresses: [10.2.0.2], conditions: {ready: true}, targetRef: {kind: Pod, name: db-1, namespace: data}}
- {addresses: [10.2.0.3], conditions: {ready: false}}
---
apiVersion: v1
kind: Service
metadata: {name: private, namespace: data, annotations: {networking.istio.io/exportTo: "."}}
spec:
  clusterIP: 10.96.0.20
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: web}
spec:
  hosts: [api.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
status:
  addresses: [{host: api.example.com, value: 240.240.0.7}, {host: api.example.com, value: "2001:2::7"}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: legacy, namespace: web}
spec:
  hosts: [legacy.example.com]
  addresses: [192.0.2.1, 198.51.100.0/24, 203.0.113.9/32]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 192.0.2.50}]
"#;

fn sidecar(capture: bool) -> Value {
    let mut metadata = json!({"NAMESPACE": "web", "CLUSTER_ID": "Kubernetes", "ISTIO_VERSION": "1.28.0",
                              "INSTANCE_IPS": "10.1.0.9"});
    if capture {
        metadata["DNS_CAPTURE"] = json!("true");
    }
    json!({"id": "sidecar~10.1.0.9~web-0.web~web.svc.cluster.local", "metadata": metadata})
}

/// Starts the agent's stream; yields each table as (host -> (ips,
/// registry, shortname, namespace)).
struct Watch {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

type Rows = Vec<(String, Vec<String>, String, String, String)>;

impl Watch {
    fn start(s: &Server, node: &Value, count: usize) -> Watch {
        let mut child = Command::new(python::python())
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/nds_watch.py"))
            .arg(s.grpc.to_string())
            .arg(node.to_string())
            .arg(count.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Watch { child, lines }
    }

    fn next(&mut self, s: &Server) -> Rows {
        let line = self.lines.next().unwrap_or_else(|| panic!("the NDS client ended\n{}", s.log())).unwrap();
        let r: Value = serde_json::from_str(&line).unwrap();
        let resources = r["resources"].as_array().unwrap();
        assert_eq!(resources.len(), 1, "one unnamed table: {r}");
        assert_eq!(resources[0]["type_url"], "type.googleapis.com/istio.networking.nds.v1.NameTable");
        let bytes = base64::engine::general_purpose::STANDARD.decode(resources[0]["value"].as_str().unwrap()).unwrap();
        let t = NameTable::decode(&bytes[..]).unwrap();
        t.table.into_iter().map(|(h, i)| (h, i.ips, i.registry, i.shortname, i.namespace)).collect()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn row(
    host: &str,
    ips: &[&str],
    registry: &str,
    short: &str,
    ns: &str,
) -> (String, Vec<String>, String, String, String) {
    (host.into(), ips.iter().map(|s| s.to_string()).collect(), registry.into(), short.into(), ns.into())
}

#[test]
fn the_agents_dns_proxy_gets_its_name_table_and_its_changes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("objects.yaml"), OBJECTS).unwrap();
    let s = Server::start(dir.path(), &[], &[], None);

    let mut w = Watch::start(&s, &sidecar(true), 2);
    let rows = w.next(&s);
    // As istiod's BuildNameTable: a Kubernetes Service by its cluster IP
    // (with its short name and namespace); a headless one by its ready
    // endpoints, and its pods with a subdomain by `<hostname>.<subdomain>`
    // (the pod's name where it names no hostname); a ServiceEntry without
    // addresses by those istiod allocated (an IPv4 proxy: IPv4), one with
    // addresses by each that is one address (a /24 is not); a Service
    // exported to its own namespace only is not seen from `web`.
    let want = vec![
        row("api.example.com", &["240.240.0.7"], "External", "", ""),
        row("db-0.db.data.svc.cluster.local", &["10.2.0.1"], "Kubernetes", "db-0.db", "data"),
        row("db-1.db.data.svc.cluster.local", &["10.2.0.2"], "Kubernetes", "db-1.db", "data"),
        row("db.data.svc.cluster.local", &["10.2.0.1", "10.2.0.2"], "Kubernetes", "db", "data"),
        row("legacy.example.com", &["192.0.2.1", "203.0.113.9"], "External", "", ""),
        row("reviews.web.svc.cluster.local", &["10.96.0.10"], "Kubernetes", "reviews", "web"),
    ];
    assert_eq!(rows, want);
    // `/debug/ndsz` shows what the proxy was sent, as JSON.
    let (code, body) = crate::server::get(s.http, "/debug/ndsz?proxyID=web-0.web").unwrap();
    assert_eq!(code, 200, "{body}");
    let dump: Value = serde_json::from_str(&body).unwrap();
    let table = &dump["configs"][0];
    assert_eq!(table["@type"], "type.googleapis.com/istio.networking.nds.v1.NameTable", "{dump:#}");
    assert_eq!(table["table"]["reviews.web.svc.cluster.local"]["ips"], json!(["10.96.0.10"]), "{dump:#}");

    // A new Service is pushed to the same stream.
    let more = "---\napiVersion: v1\nkind: Service\nmetadata: {name: ratings, namespace: web}\n\
                spec: {clusterIP: 10.96.0.11, selector: {app: ratings}, ports: [{name: http, port: 9080}]}\n";
    std::fs::write(dir.path().join("more.yaml"), more).unwrap();
    let rows = w.next(&s);
    assert!(
        rows.contains(&row("ratings.web.svc.cluster.local", &["10.96.0.11"], "Kubernetes", "ratings", "web")),
        "{rows:?}"
    );
    assert_eq!(rows.len(), want.len() + 1);

    // Without DNS capture the allocated address is not the proxy's to use.
    let mut w = Watch::start(&s, &sidecar(false), 1);
    let rows = w.next(&s);
    assert!(!rows.iter().any(|r| r.0 == "api.example.com"), "{rows:?}");
    wait_for("the server still serves", Duration::from_secs(5), || crate::server::get(s.http, "/ready").is_some());
}
