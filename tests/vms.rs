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

/// A VM's agent on its own stream (see `tests/py/vm_agent.py`).
struct Agent {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    first: Value,
}

impl Agent {
    fn start(secure: std::net::SocketAddr, root: &Path, token: &str, ip: &str) -> Agent {
        let mut child = Command::new(python::python())
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/vm_agent.py"))
            .args([&secure.to_string(), root.to_str().unwrap(), token, "vm", "legacy", ip])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        Agent { child, stdin, lines, first }
    }

    fn say(&mut self, cmd: &str) {
        use std::io::Write;
        writeln!(self.stdin, "{cmd}").unwrap();
        assert_eq!(self.lines.next().unwrap().unwrap(), "ok");
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The load assignment of `legacy.vm` another sidecar (of `web`) is sent:
/// its endpoints' addresses.
fn legacy_endpoints(s: &Server) -> Vec<String> {
    let node = json!({"id": "sidecar~10.1.0.9~web-0.web~web.svc.cluster.local",
                      "metadata": {"NAMESPACE": "web", "ISTIO_VERSION": "1.28.0", "CLUSTER_ID": "Kubernetes"}});
    let got = ads_fetch(s, &node, true);
    let cla = &got["endpoints"]["outbound|80||legacy.vm.svc.cluster.local"];
    let mut addrs: Vec<String> = cla["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["lbEndpoints"].as_array().unwrap().iter())
        .map(|e| e["endpoint"]["address"]["socketAddress"]["address"].as_str().unwrap().to_owned())
        .collect();
    addrs.sort();
    addrs
}

/// Done means for issue #38's auto-registration: a grpcio client playing a
/// VM's agent (`AUTO_REGISTER_GROUP`, a token of the group's service
/// account, over the TLS port) gets its WorkloadEntry made in the API
/// server from the group's template; a Kubernetes Service selecting it
/// sends another proxy to it once its health reports say it is healthy,
/// and not while they say otherwise; it is deleted the grace period after
/// the agent leaves. A proxy of another service account makes nothing.
#[test]
fn a_vm_registers_reports_health_and_is_removed_after_it_leaves() {
    let api = crate::server::fake_api();
    for r in istiod_kubewatch::fake::core_resources().into_iter().chain(istiod_kubewatch::fake::istio_resources()) {
        api.install(r);
    }
    api.apply("namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vm"}}));
    api.apply(
        "workloadgroups",
        json!({"apiVersion": "networking.istio.io/v1", "kind": "WorkloadGroup",
               "metadata": {"name": "legacy", "namespace": "vm", "uid": "wg-uid-1"},
               "spec": {"metadata": {"labels": {"app": "legacy"}, "annotations": {"team": "vms"}},
                        "template": {"serviceAccount": "legacy-sa", "ports": {"http": 8080}, "network": "",
                                     "labels": {"security.istio.io/tlsMode": "istio"}}}}),
    );
    api.apply(
        "services",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "legacy", "namespace": "vm"},
               "spec": {"clusterIP": "10.96.5.5", "selector": {"app": "legacy"},
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    );
    api.add_token("tok-vm", "system:serviceaccount:vm:legacy-sa", &["istio-ca"]);
    api.add_token("tok-other", "system:serviceaccount:vm:other-sa", &["istio-ca"]);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = crate::server::kubeconfig(dir.path(), &api.url());
    let ca_dir = dir.path().join("ca");
    let secure = crate::server::free_port();
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--secureGRPCAddr", &secure.to_string()],
        &[
            ("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca_dir.to_str().unwrap()),
            ("PILOT_WORKLOAD_ENTRY_GRACE_PERIOD", "1s"),
            ("POD_NAME", "istiod-a"),
        ],
        None,
    );
    let root = ca_dir.join("ca-cert.pem");

    // Another service account: served, but nothing is registered for it.
    let other = Agent::start(secure, &root, "tok-other", "10.9.0.6");
    assert_eq!(other.first["code"], "OK", "{}\n{}", other.first, s.log());
    wait_for("the refusal", Duration::from_secs(10), || {
        s.log().contains("registration of WorkloadEntry service account mismatch: \"other-sa\" vs \"legacy-sa\"")
    });
    assert!(api.get("workloadentries", "vm", "legacy-10.9.0.6").is_none());
    drop(other);

    let mut agent = Agent::start(secure, &root, "tok-vm", "10.9.0.5");
    assert_eq!(agent.first["code"], "OK", "{}\n{}", agent.first, s.log());
    let mut entry = Value::Null;
    wait_for("the WorkloadEntry", Duration::from_secs(10), || {
        entry = api.get("workloadentries", "vm", "legacy-10.9.0.5").unwrap_or(Value::Null);
        !entry.is_null()
    });
    // The group's template at the agent's address and locality; its
    // labels over the template's; owned by the group; this replica's.
    let spec = &entry["spec"];
    assert_eq!(spec["address"], "10.9.0.5", "{entry:#}");
    assert_eq!(spec["serviceAccount"], "legacy-sa");
    assert_eq!(spec["ports"], json!({"http": 8080}));
    assert_eq!(spec["locality"], "us-east/us-east-1a");
    assert_eq!(spec["labels"], json!({"app": "legacy", "security.istio.io/tlsMode": "istio", "version": "v1"}));
    let meta = &entry["metadata"];
    assert_eq!(meta["labels"], spec["labels"]);
    assert_eq!(meta["annotations"]["istio.io/autoRegistrationGroup"], "legacy");
    assert_eq!(meta["annotations"]["team"], "vms");
    assert_eq!(meta["annotations"]["istio.io/workloadController"], "istiod-a");
    assert_eq!(meta["annotations"]["proxy.istio.io/health-checks-enabled"], "true", "its agent probes readiness");
    assert!(meta["annotations"]["istio.io/connectedAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{entry:#}");
    assert_eq!(
        meta["ownerReferences"],
        json!([{"apiVersion": "networking.istio.io/v1", "kind": "WorkloadGroup", "name": "legacy", "uid": "wg-uid-1", "controller": true}])
    );

    // Health-checked: not an endpoint until it reports healthy.
    assert_eq!(legacy_endpoints(&s), Vec::<String>::new());
    agent.say("healthy");
    wait_for("the healthy VM in EDS", Duration::from_secs(10), || legacy_endpoints(&s) == ["10.9.0.5"]);
    let status = &api.get("workloadentries", "vm", "legacy-10.9.0.5").unwrap()["status"]["conditions"][0];
    assert_eq!((&status["type"], &status["status"]), (&json!("Healthy"), &json!("True")), "{status}");
    agent.say("unhealthy connection refused");
    wait_for("the unhealthy VM out of EDS", Duration::from_secs(10), || legacy_endpoints(&s).is_empty());
    let status = &api.get("workloadentries", "vm", "legacy-10.9.0.5").unwrap()["status"]["conditions"][0];
    assert_eq!((&status["status"], &status["message"]), (&json!("False"), &json!("connection refused")));
    agent.say("healthy");
    wait_for("healthy again", Duration::from_secs(10), || legacy_endpoints(&s) == ["10.9.0.5"]);

    // It leaves: marked disconnected, then deleted after the grace period.
    agent.say("quit");
    wait_for("the disconnection", Duration::from_secs(10), || {
        api.get("workloadentries", "vm", "legacy-10.9.0.5")
            .is_none_or(|e| e["metadata"]["annotations"]["istio.io/disconnectedAt"].is_string())
    });
    wait_for("the deletion", Duration::from_secs(10), || api.get("workloadentries", "vm", "legacy-10.9.0.5").is_none());
    wait_for("out of EDS", Duration::from_secs(10), || legacy_endpoints(&s).is_empty());
    let metrics = crate::server::get(s.monitoring, "/metrics").unwrap().1;
    for (name, want) in [
        ("auto_registration_success_total", 1.0),
        ("auto_registration_unregister_total", 1.0),
        ("auto_registration_deletes_total", 1.0),
    ] {
        let got = metrics.lines().find_map(|l| l.strip_prefix(&format!("{name} "))?.parse::<f64>().ok());
        assert_eq!(got, Some(want), "{name}\n{metrics}");
    }
}

/// The listeners a sidecar of `web` is sent (names), with DNS capture or
/// without.
fn listener_names(s: &Server, capture: bool) -> Vec<String> {
    let got = ads_fetch(s, &sidecar(capture), false);
    got["listeners"].as_object().unwrap().keys().cloned().collect()
}

/// What `node` is sent (`tests/py/ads_fetch.py`; with `eds`, load
/// assignments too). The script takes the response to each request as the
/// next one on its stream: a push the test's changes cause in between is
/// another type, and the fetch is made again (three times at most).
fn ads_fetch(s: &Server, node: &Value, eds: bool) -> Value {
    let fetch = || {
        let mut c = Command::new(python::python());
        c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/ads_fetch.py")).arg(s.grpc.to_string());
        c.arg(node.to_string());
        if eds {
            c.env("EDS", "1");
        }
        c.output().unwrap()
    };
    let mut out = fetch();
    for _ in 0..3 {
        if out.status.success() {
            break;
        }
        out = fetch();
    }
    assert!(out.status.success(), "{}", python::text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Done means for issue #38's allocation: the elected replica gives a
/// ServiceEntry host without addresses an IPv4 and an IPv6 address, in
/// its status; a proxy capturing DNS resolves the host to it and has a
/// listener on it (one that does not, neither); another replica started
/// later (a restart) keeps the addresses as they are.
#[test]
fn service_entry_addresses_are_allocated_kept_and_used() {
    let api = crate::server::fake_api();
    for r in istiod_kubewatch::fake::core_resources().into_iter().chain(istiod_kubewatch::fake::istio_resources()) {
        api.install(r);
    }
    api.apply("namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web"}}));
    let entry = |name: &str, host: &str| {
        json!({"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
               "metadata": {"name": name, "namespace": "web", "creationTimestamp": "2026-12-04T10:00:00Z"},
               "spec": {"hosts": [host], "ports": [{"number": 5432, "name": "tcp-pg", "protocol": "TCP"}],
                        "resolution": "DNS", "location": "MESH_EXTERNAL"}})
    };
    api.apply("serviceentries", entry("db", "db.example.com"));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = crate::server::kubeconfig(dir.path(), &api.url());
    let start = |pod: &str| {
        Server::start_on(
            &["--kubeconfig", kubeconfig.to_str().unwrap()],
            &[],
            &[("ISTIOD_RS_SELF_SIGNED_CA_DIR", dir.path().join("ca").to_str().unwrap()), ("POD_NAME", pod)],
            None,
        )
    };
    let s = start("istiod-a");
    let status = |name: &str| api.get("serviceentries", "web", name).map(|o| o["status"]["addresses"].clone());
    wait_for("the allocation", Duration::from_secs(15), || status("db").is_some_and(|a| a.is_array()));
    let want =
        json!([{"host": "db.example.com", "value": "240.240.0.1"}, {"host": "db.example.com", "value": "2001:2::1"}]);
    assert_eq!(status("db"), Some(want.clone()));

    // A proxy capturing DNS resolves the host to its IPv4 address and has
    // a listener there; one that does not, neither.
    wait_for("the listener", Duration::from_secs(10), || {
        listener_names(&s, true).contains(&"240.240.0.1_5432".to_owned())
    });
    assert!(!listener_names(&s, false).contains(&"240.240.0.1_5432".to_owned()));
    let mut w = Watch::start(&s, &sidecar(true), 1);
    let rows = w.next(&s);
    assert!(rows.contains(&row("db.example.com", &["240.240.0.1"], "External", "", "")), "{rows:?}");
    drop(w);

    // A second entry gets the next addresses; a restart keeps both.
    api.apply("serviceentries", entry("cache", "cache.example.com"));
    wait_for("the second allocation", Duration::from_secs(15), || status("cache").is_some_and(|a| a.is_array()));
    let second = json!([{"host": "cache.example.com", "value": "240.240.0.2"}, {"host": "cache.example.com", "value": "2001:2::2"}]);
    assert_eq!(status("cache"), Some(second.clone()));
    // A restart: the replica stops (releasing its lock), another starts.
    let mut s = s;
    s.sigterm();
    s.wait_exit(Duration::from_secs(30));
    let s = start("istiod-b");
    api.apply("serviceentries", entry("queue", "queue.example.com"));
    wait_for("the new replica's allocation", Duration::from_secs(30), || status("queue").is_some_and(|a| a.is_array()));
    assert_eq!(status("db"), Some(want), "kept across a restart\n{}", s.log());
    assert_eq!(status("cache"), Some(second));
    assert_eq!(
        status("queue"),
        Some(
            json!([{"host": "queue.example.com", "value": "240.240.0.3"}, {"host": "queue.example.com", "value": "2001:2::3"}])
        )
    );
}
