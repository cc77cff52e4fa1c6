//! What-if (issue #41), through the binary: questions asked with
//! `pilot-discovery whatif` (the command people and CI run) of a server on
//! a `--configDir`, with a proxy connected over ADS (the `h2` crate) and
//! what is served fetched by grpcio (`tests/py/ads_fetch.py`) before, after
//! the question, and after the change is applied. istiod has no such
//! feature: the expectations follow from the objects (which workloads a
//! VirtualService's `exportTo` or a PeerAuthentication's selector reach)
//! and, for validation and analysis, from istiod's own words
//! (`pkg/config/validation/validation.go`, `msg/messages.yaml`).

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::python;
use crate::server::{Server, wait_for};

/// Two namespaces: `shop` (web and db) and `bank` (teller), a pod each,
/// and a VirtualService for `web` seen in `shop` only.
const MESH: &str = "\
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Namespace
metadata: {name: bank}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.10
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  clusterIP: 10.96.0.11
  selector: {app: db}
  ports: [{name: tcp, port: 5432}]
---
apiVersion: v1
kind: Service
metadata: {name: teller, namespace: bank}
spec:
  clusterIP: 10.96.1.10
  selector: {app: teller}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: shop, labels: {app: web, version: v1}}
spec: {serviceAccountName: web, containers: [{name: web, ports: [{containerPort: 8080}]}]}
status: {phase: Running, podIP: 10.1.0.1, conditions: [{type: Ready, status: 'True'}]}
---
apiVersion: v1
kind: Pod
metadata: {name: db-1, namespace: shop, labels: {app: db}}
spec: {serviceAccountName: db, containers: [{name: db, ports: [{containerPort: 5432}]}]}
status: {phase: Running, podIP: 10.1.0.2, conditions: [{type: Ready, status: 'True'}]}
---
apiVersion: v1
kind: Pod
metadata: {name: teller-1, namespace: bank, labels: {app: teller}}
spec: {serviceAccountName: teller, containers: [{name: teller, ports: [{containerPort: 8080}]}]}
status: {phase: Running, podIP: 10.1.1.1, conditions: [{type: Ready, status: 'True'}]}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop}
spec:
  hosts: [web]
  exportTo: [.]
  http:
  - route:
    - destination: {host: web}
";

/// The same VirtualService with a 3 s timeout.
const VS_TIMEOUT: &str = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop}
spec:
  hosts: [web]
  exportTo: [.]
  http:
  - route:
    - destination: {host: web}
    timeout: 3s
";

/// A server on [`MESH`] (one file, `mesh.yaml`, in the returned
/// directory).
fn start() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mesh.yaml"), MESH).unwrap();
    let s = Server::start(dir.path(), &[], &[], None);
    (dir, s)
}

/// `pilot-discovery whatif -o json` with `args` and `objects` as the file:
/// the exit status and the answer.
pub(crate) fn whatif(s: &Server, objects: &str, args: &[&str]) -> (i32, Value) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("change.yaml");
    std::fs::write(&file, objects).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["whatif", "-f", file.to_str().unwrap(), "--server", &format!("http://{}", s.http), "-o", "json"])
        .args(args)
        .output()
        .unwrap();
    let answer = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", String::from_utf8_lossy(&out.stdout), python::text(&out)));
    (out.status.code().unwrap(), answer)
}

/// The sidecar node of pod `pod` (`name.namespace`) at `ip` with `labels`.
fn node(pod: &str, ip: &str, labels: Value) -> Value {
    let ns = pod.split_once('.').unwrap().1;
    json!({
        "id": format!("sidecar~{ip}~{pod}~{ns}.svc.cluster.local"),
        "metadata": {"NAMESPACE": ns, "INSTANCE_IPS": ip, "LABELS": labels, "SERVICE_ACCOUNT": "web"},
    })
}

/// What `node` is served, fetched by grpcio.
fn fetch(s: &Server, node: &Value) -> Value {
    crate::served::fetch(s, node, &[])
}

/// The classes of an answer by their first pod or proxy: `{who: {type:
/// {"added": [..], "removed": [..], "changed": [..]}}}`, names only.
pub(crate) fn reached(answer: &Value) -> std::collections::BTreeMap<String, Value> {
    answer["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let who = c["pods"][0].as_str().or(c["proxies"][0].as_str()).unwrap().to_owned();
            let mut kinds = serde_json::Map::new();
            for (k, v) in c["changes"].as_object().unwrap() {
                let changed: Vec<&Value> = v["changed"].as_array().unwrap().iter().map(|c| &c["name"]).collect();
                kinds.insert(k.clone(), json!({"added": v["added"], "removed": v["removed"], "changed": changed}));
            }
            (who, Value::Object(kinds))
        })
        .collect()
}

/// The diff an answer lists for the change of `name` of type `t`.
pub(crate) fn diff_of<'a>(answer: &'a Value, t: &str, name: &str) -> &'a str {
    let id = answer["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|c| c["changes"][t]["changed"].as_array()?.iter().find(|x| x["name"] == name)?["diff"].as_u64())
        .unwrap_or_else(|| panic!("no diff of {t} {name}: {answer}"));
    answer["diffs"].as_array().unwrap().iter().find(|d| d["id"] == id).unwrap()["diff"].as_str().unwrap()
}

/// The names whose resources differ between two fetches, by type.
fn differences(before: &Value, after: &Value) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out = std::collections::BTreeMap::new();
    for (key, t) in [("clusters", "CDS"), ("listeners", "LDS"), ("routes", "RDS"), ("extension_configs", "ECDS")] {
        let empty = serde_json::Map::new();
        let (b, a) = (before[key].as_object().unwrap_or(&empty), after[key].as_object().unwrap_or(&empty));
        let mut names: Vec<String> = b.keys().chain(a.keys()).filter(|n| b.get(*n) != a.get(*n)).cloned().collect();
        names.sort();
        names.dedup();
        if !names.is_empty() {
            out.insert(t.to_owned(), names);
        }
    }
    out
}

/// The names an answer says change for one class, by type.
fn predicted(class: &Value) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out = std::collections::BTreeMap::new();
    for (t, v) in class.as_object().unwrap() {
        if t == "EDS" {
            continue; // not fetched
        }
        let mut names: Vec<String> = ["added", "removed", "changed"]
            .iter()
            .flat_map(|k| v[*k].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_owned()))
            .collect();
        names.sort();
        out.insert(t.clone(), names);
    }
    out
}

#[test]
fn a_virtual_service_change_is_predicted_and_then_served_as_predicted() {
    use crate::ads_client::{connect, runtime};
    use istiod_proto::envoy::service::discovery::v3::DiscoveryRequest;

    let (dir, s) = start();
    let web = node("web-1.shop", "10.1.0.1", json!({"app": "web", "version": "v1"}));
    let before = fetch(&s, &web);
    assert!(before["routes"]["80"].is_object(), "web is routed on 80: {}", before["routes"]);
    // A proxy of db-1 stays connected while the question is asked.
    let rt = runtime();
    let db_id = "sidecar~10.1.0.2~db-1.shop~shop.svc.cluster.local";
    let mut db = rt.block_on(async {
        let mut c = connect(s.grpc, false).await;
        let mut n = crate::ads_client::node(db_id);
        n.metadata = Some(istiod_proto::prost_types::Struct {
            fields: [("NAMESPACE", "shop"), ("INSTANCE_IPS", "10.1.0.2"), ("SERVICE_ACCOUNT", "db")]
                .into_iter()
                .map(|(k, v)| {
                    (
                        k.to_owned(),
                        istiod_proto::prost_types::Value {
                            kind: Some(istiod_proto::prost_types::value::Kind::StringValue(v.into())),
                        },
                    )
                })
                .chain([(
                    "LABELS".to_owned(),
                    istiod_proto::prost_types::Value {
                        kind: Some(istiod_proto::prost_types::value::Kind::StructValue(
                            istiod_proto::prost_types::Struct {
                                fields: [(
                                    "app".to_owned(),
                                    istiod_proto::prost_types::Value {
                                        kind: Some(istiod_proto::prost_types::value::Kind::StringValue("db".into())),
                                    },
                                )]
                                .into(),
                            },
                        )),
                    },
                )])
                .collect(),
        });
        c.sotw(DiscoveryRequest {
            node: Some(n),
            type_url: istiod_proto::type_url::CLUSTER.into(),
            ..Default::default()
        });
        let _ = c.recv().await;
        c
    });

    let (code, answer) = whatif(&s, VS_TIMEOUT, &[]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["objects"][0]["operation"], "updated", "{answer}");
    // The VirtualService is exported to its own namespace: shop's two
    // workloads see their route to web change, bank's teller nothing.
    let got = reached(&answer);
    let want: std::collections::BTreeMap<String, Value> = [
        ("db-1.shop", json!({"RDS": {"added": [], "removed": [], "changed": ["80"]}})),
        ("web-1.shop", json!({"RDS": {"added": [], "removed": [], "changed": ["80"]}})),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(got.keys().collect::<Vec<_>>(), [db_id, "web-1.shop"], "teller is not reached: {answer}");
    let db_class = answer["classes"].as_array().unwrap().iter().find(|c| c["proxies"][0] == db_id);
    let db_class = db_class.unwrap_or_else(|| panic!("the connected db proxy is reached: {answer}"));
    assert!(db_class["pods"].as_array().unwrap().is_empty(), "the connected proxy stands for db-1: {answer}");
    assert_eq!(got[db_id], want["db-1.shop"]);
    assert_eq!(got["web-1.shop"], want["web-1.shop"]);
    assert_eq!(answer["summary"]["namespacesReached"], json!(["shop"]));
    assert_eq!(answer["summary"]["proxiesReached"], 1);
    // The route's diff, as a config dump renders it.
    let d = diff_of(&answer, "RDS", "80");
    assert!(d.contains("+            \"timeout\": \"3s\""), "{d}");
    assert!(d.lines().any(|l| l.starts_with('-') && l.contains("\"timeout\"")), "{d}");
    // Reaching only shop: allowed there, refused for bank.
    assert_eq!(whatif(&s, VS_TIMEOUT, &["--allow-namespace", "shop"]).0, 0);
    assert_eq!(whatif(&s, VS_TIMEOUT, &["--allow-namespace", "bank"]).0, 2);

    // Nothing served changed: the connected proxy is sent nothing, and a
    // fetch gets what it got before.
    rt.block_on(db.expect_silence(Duration::from_millis(300)));
    assert_eq!(fetch(&s, &web), before);

    // Applied, it is served as predicted: the names that change for web-1
    // are the ones the answer named, and the route carries the timeout.
    assert!(MESH.ends_with(VS_TIMEOUT.trim_end_matches("    timeout: 3s\n")));
    std::fs::write(dir.path().join("mesh.yaml"), format!("{MESH}    timeout: 3s\n")).unwrap();
    let mut after = Value::Null;
    wait_for("the change to be served", Duration::from_secs(20), || {
        after = fetch(&s, &web);
        after["routes"] != before["routes"]
    });
    assert_eq!(differences(&before, &after), predicted(&want["web-1.shop"]), "{after}");
    let route = after["routes"]["80"].to_string();
    assert!(route.contains("\"timeout\":\"3s\""), "{route}");
}

#[test]
fn peer_authentication_strict_reaches_the_selected_workloads_inbound_only() {
    let (_dir, s) = start();
    let strict = "\
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: web-strict, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  mtls: {mode: STRICT}
";
    let (code, answer) = whatif(&s, strict, &["--no-diff"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["objects"][0]["operation"], "created");
    let got = reached(&answer);
    // Only web's sidecar, and only its inbound listener.
    assert_eq!(
        got,
        [("web-1.shop".to_owned(), json!({"LDS": {"added": [], "removed": [], "changed": ["virtualInbound"]}}))]
            .into_iter()
            .collect(),
        "{answer}"
    );
    assert!(answer["diffs"].as_array().unwrap().is_empty(), "--no-diff: {answer}");
}

#[test]
fn a_subset_that_selects_no_pod_is_warned_about() {
    let (_dir, s) = start();
    let dr = "\
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: shop}
spec:
  host: web
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v9, labels: {version: v9}}
";
    let (code, answer) = whatif(&s, dr, &["--no-diff"]);
    assert_eq!(code, 0, "{answer}");
    // istiod's DestinationRuleSubsetNotSelectPods (msg/messages.yaml).
    let warnings = answer["warnings"].to_string();
    assert!(
        warnings.contains("Error [IST0173] (DestinationRule shop/web) The Subset v9 defined in the DestinationRule does not select any pods."),
        "{warnings}"
    );
    assert!(!warnings.contains("Subset v1"), "v1 selects web-1: {warnings}");
    // Every workload that sees web gets the two subsets' clusters.
    let got = reached(&answer);
    assert_eq!(got.keys().collect::<Vec<_>>(), ["db-1.shop", "teller-1.bank", "web-1.shop"], "{answer}");
    for (who, changes) in got {
        for subset in ["v1", "v9"] {
            let name = format!("outbound|80|{subset}|web.shop.svc.cluster.local");
            assert!(changes["CDS"]["added"].as_array().unwrap().contains(&json!(name)), "{who}: {changes}");
        }
    }
    assert_eq!(answer["summary"]["namespacesReached"], json!(["bank", "shop"]));
}

#[test]
fn a_delete_is_reported_and_a_change_reaching_nobody_says_why() {
    let (_dir, s) = start();
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: web, namespace: shop}\n";
    let (code, answer) = whatif(&s, vs, &["--delete", "--no-diff"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["objects"][0]["operation"], "deleted", "{answer}");
    let got = reached(&answer);
    assert_eq!(got.keys().collect::<Vec<_>>(), ["db-1.shop", "web-1.shop"], "{answer}");
    // Deleting what is not there: nothing changes, and it says so.
    let missing = vs.replace("name: web,", "name: nothing,");
    let (code, answer) = whatif(&s, &missing, &["--delete"]);
    assert_eq!(code, 0);
    assert_eq!(answer["objects"][0]["operation"], "not found");
    assert_eq!(answer["summary"]["classesReached"], 0);
    // A selector matching no pod.
    let nobody = "\
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: ghost, namespace: shop}
spec:
  selector: {matchLabels: {app: ghost}}
  mtls: {mode: STRICT}
";
    let (_, answer) = whatif(&s, nobody, &[]);
    assert_eq!(answer["summary"]["classesReached"], 0, "{answer}");
    let w = answer["warnings"].to_string();
    assert!(
        w.contains(
            "PeerAuthentication shop/ghost changes no proxy's configuration: its selector app=ghost matches no pod"
        ),
        "{w}"
    );
    // A host no service has.
    let dr = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: nosuch, namespace: shop}\n\
              spec: {host: nosuch, trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}}\n";
    let (_, answer) = whatif(&s, dr, &[]);
    assert_eq!(answer["summary"]["classesReached"], 0, "{answer}");
    let w = answer["warnings"].to_string();
    assert!(
        w.contains("DestinationRule shop/nosuch changes no proxy's configuration: no service has host nosuch"),
        "{w}"
    );
    // The analysis says so of a VirtualService routing to it
    // (ReferencedResourceNotFound, msg/messages.yaml).
    let (_, answer) = whatif(&s, &VS_TIMEOUT.replace("web", "nosuch"), &[]);
    let w = answer["warnings"].to_string();
    assert!(w.contains(r#"Error [IST0101] (VirtualService shop/nosuch) Referenced host not found: \"nosuch\""#), "{w}");
}

#[test]
fn an_invalid_object_is_refused_in_istiods_words_and_nothing_is_predicted() {
    let (_dir, s) = start();
    // validation.go ValidateVirtualService: "http, tcp or tls must be
    // provided in virtual service".
    let bad = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: bad, namespace: shop}\nspec: {hosts: [web]}\n";
    let (code, answer) = whatif(&s, &format!("{VS_TIMEOUT}---\n{bad}"), &[]);
    assert_eq!(code, 1, "{answer}");
    assert_eq!(answer["valid"], false);
    assert_eq!(answer["objects"][1]["name"], "bad");
    assert_eq!(
        answer["objects"][1]["error"],
        "configuration is invalid: spec: http, tcp or tls must be provided in virtual service"
    );
    assert!(answer["objects"][0].get("error").is_none(), "the valid one is not blamed: {answer}");
    assert!(answer.get("classes").is_none(), "{answer}");
    // The webhook says the same of the same object.
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "1",
            "kind": {"group": "networking.istio.io", "version": "v1", "kind": "VirtualService"},
            "resource": {"group": "networking.istio.io", "version": "v1", "resource": "virtualservices"},
            "namespace": "shop",
            "operation": "CREATE",
            "object": {"apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
                       "metadata": {"name": "bad", "namespace": "shop"}, "spec": {"hosts": ["web"]}},
        },
    });
    let (status, body) = post(s.http, "/validate", &review.to_string());
    assert_eq!(status, 200, "{body}");
    let review: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(review["response"]["status"]["message"], answer["objects"][1]["error"]);
    // Malformed YAML, and an empty question.
    let (code, answer) = whatif(&s, "kind: [", &[]);
    assert_eq!(code, 1, "{answer}");
    assert!(answer["objects"][0]["error"].as_str().unwrap().starts_with("cannot decode configuration"), "{answer}");
    let (code, answer) = whatif(&s, "", &[]);
    assert_eq!(code, 1, "{answer}");
    assert_eq!(answer["objects"][0]["error"], "the question names no object");
}

/// A plain HTTP/1.1 POST of JSON: the status and the body.
fn post(addr: std::net::SocketAddr, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (head.split_whitespace().nth(1).unwrap().parse().unwrap(), body.to_owned())
}

/// A gateway (istio-system's ingress pod, which a Gateway selects) and
/// web's EndpointSlice, on top of [`MESH`].
const WITH_GATEWAY: &str = "\
---
apiVersion: v1
kind: Namespace
metadata: {name: istio-system}
---
apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  clusterIP: 10.96.9.9
  selector: {istio: ingressgateway}
  ports: [{name: http, port: 80, targetPort: 8080}, {name: alt, port: 9090, targetPort: 9090}]
---
apiVersion: v1
kind: Pod
metadata: {name: ingress-1, namespace: istio-system, labels: {istio: ingressgateway}}
spec: {serviceAccountName: ingress, containers: [{name: istio-proxy}]}
status: {phase: Running, podIP: 10.1.9.9, conditions: [{type: Ready, status: 'True'}]}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - {port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-abc, namespace: shop, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.1.0.1]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: web-1, namespace: shop}
";

#[test]
fn a_gateways_listeners_and_an_endpoint_slice_delete_are_predicted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mesh.yaml"), format!("{MESH}{WITH_GATEWAY}")).unwrap();
    let s = Server::start(dir.path(), &[], &[], None);
    // A second server on the Gateway: the gateway's own listeners (not
    // shared by any reduced class) gain it, and nobody else's change.
    let gateway = "\
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: public, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - {port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}
  - {port: {number: 9090, name: alt, protocol: HTTP}, hosts: ['*']}
";
    let (code, answer) = whatif(&s, gateway, &["--no-diff"]);
    assert_eq!(code, 0, "{answer}");
    let got = reached(&answer);
    assert_eq!(got.keys().collect::<Vec<_>>(), ["ingress-1.istio-system"], "{answer}");
    let class = &answer["classes"][0];
    assert_eq!(class["class"]["nodeType"], "router", "{class}");
    let lds = &got["ingress-1.istio-system"]["LDS"];
    assert_eq!(lds["added"].as_array().map(Vec::len), Some(1), "one listener for the new port: {answer}");
    assert!(lds["added"][0].as_str().unwrap().ends_with("9090"), "{answer}");
    // The gateway's routes for port 9090 (istiod's `http.<port>`).
    assert_eq!(got["ingress-1.istio-system"]["RDS"]["added"], json!(["http.9090"]), "{answer}");

    // Deleting web's EndpointSlice empties web's load assignment for
    // whoever sees web (its Service, hence its clusters, stays).
    let slice = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-abc, namespace: shop}\n";
    let (code, answer) = whatif(&s, slice, &["--delete"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["objects"][0]["operation"], "deleted");
    let got = reached(&answer);
    assert!(got.contains_key("web-1.shop") && got.contains_key("teller-1.bank"), "{answer}");
    for (who, changes) in &got {
        assert_eq!(
            changes.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["EDS"],
            "{who}: only load assignments change: {answer}"
        );
        assert!(
            changes["EDS"]["changed"].as_array().unwrap().contains(&json!("outbound|80||web.shop.svc.cluster.local")),
            "{who}: {answer}"
        );
    }
    let d = diff_of(&answer, "EDS", "outbound|80||web.shop.svc.cluster.local");
    assert!(d.lines().any(|l| l.starts_with('-') && l.contains("10.1.0.1")), "the endpoint goes: {d}");
}

#[test]
fn answers_are_paged_and_anchors_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mesh.yaml"), MESH).unwrap();
    let s = Server::start(dir.path(), &[], &[("ISTIOD_RS_WHATIF_MAX_CLASSES", "1")], None);
    let (_, first) = whatif(&s, VS_TIMEOUT, &["--no-diff"]);
    let (_, second) = whatif(&s, VS_TIMEOUT, &["--no-diff", "--page", "1"]);
    assert_eq!((first["pages"].as_u64(), first["summary"]["classesReached"].as_u64()), (Some(2), Some(2)), "{first}");
    let (a, b) = (reached(&first), reached(&second));
    assert_eq!((a.len(), b.len()), (1, 1), "{first}\n{second}");
    let mut both: Vec<&String> = a.keys().chain(b.keys()).collect();
    both.sort();
    assert_eq!(both, ["db-1.shop", "web-1.shop"], "each page its own class");
    // An alias could stand for more than memory holds: refused.
    let bomb = "a: &x [1, 2]\nb: [*x, *x]\n";
    let (code, answer) = whatif(&s, bomb, &[]);
    assert_eq!(code, 1, "{answer}");
    assert!(answer["objects"][0]["error"].as_str().unwrap().contains("aliases are not accepted"), "{answer}");
}

/// A TLS certificate and key for `host`, as a `kubernetes.io/tls`
/// Secret's `stringData` (PEM).
fn tls_secret(name: &str, ns: &str, host: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![host.to_owned()]).unwrap().self_signed(&key).unwrap();
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\ntype: kubernetes.io/tls\n\
         stringData:\n  tls.crt: {:?}\n  tls.key: {:?}\n",
        cert.pem(),
        key.serialize_pem()
    );
    (secret, key.serialize_pem())
}

/// SDS: a gateway's credential rotated reaches the gateway that names it
/// (istiod serves `kubernetes://<name>` to a gateway whose server's
/// `credentialName` names a Secret of its namespace), as a change of
/// that name alone, with the key redacted in the diff as `config_dump`
/// redacts it; nobody else's configuration changes.
#[test]
fn a_rotated_gateway_credential_is_predicted_for_its_gateway_only() {
    let (secret, _) = tls_secret("shop-cert", "istio-system", "shop.example.com");
    let tls_gateway = "\
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: tls, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: ['shop.example.com']
    tls: {mode: SIMPLE, credentialName: shop-cert}
";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mesh.yaml"), format!("{MESH}{WITH_GATEWAY}{tls_gateway}---\n{secret}")).unwrap();
    let s = Server::start(dir.path(), &[], &[], None);
    let (rotated, new_key) = tls_secret("shop-cert", "istio-system", "shop.example.com");
    let (code, answer) = whatif(&s, &rotated, &[]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["objects"][0]["operation"], "updated", "{answer}");
    let got = reached(&answer);
    assert_eq!(
        got,
        [(
            "ingress-1.istio-system".to_owned(),
            json!({"SDS": {"added": [], "removed": [], "changed": ["kubernetes://shop-cert"]}})
        )]
        .into(),
        "{answer}"
    );
    let d = diff_of(&answer, "SDS", "kubernetes://shop-cert");
    // Proto3 JSON shows bytes in base64: a PEM's first line, encoded.
    const CERTIFICATE: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"; // -----BEGIN CERTIFICATE-----
    const KEY: &str = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t"; // -----BEGIN PRIVATE KEY-----
    assert!(new_key.starts_with("-----BEGIN PRIVATE KEY-----"), "{new_key}");
    assert!(d.lines().any(|l| l.starts_with('+') && l.contains(CERTIFICATE)), "the new chain: {d}");
    assert!(!answer.to_string().contains(KEY), "a private key is never shown: {d}");
    assert!(d.contains("W3JlZGFjdGVkXQ=="), "redacted as config_dump redacts it: {d}");
}

/// ECDS: a WasmPlugin selecting web reaches web's class alone: its
/// listeners gain the filter that names the plugin's extension config
/// (`<phase-ordered> configDiscovery`), and the extension config is
/// added; once applied, what grpcio is served differs by exactly those
/// names (istiod's resource name since WasmPlugins are translated to
/// TrafficExtensions: `extensions.istio.io/trafficextension/<ns>.<name>`
/// with `translateWasmPlugin`'s `syntheticMarker`,
/// `~istio-translated-wasmplugin`, as `tests/extensions.rs` checks it).
#[test]
fn a_wasm_plugin_is_predicted_as_its_listeners_and_extension_config_and_then_served() {
    let (dir, s) = start();
    let web = node("web-1.shop", "10.1.0.1", json!({"app": "web", "version": "v1"}));
    let before = fetch(&s, &web);
    let plugin = "\
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: auth, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  url: oci://example.com/auth:1
  phase: AUTHN
";
    let name = "extensions.istio.io/trafficextension/shop.auth~istio-translated-wasmplugin";
    let (code, answer) = whatif(&s, plugin, &["--no-diff"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["objects"][0]["operation"], "created", "{answer}");
    let got = reached(&answer);
    assert_eq!(got.keys().collect::<Vec<_>>(), ["web-1.shop"], "db and teller are not selected: {answer}");
    assert_eq!(got["web-1.shop"]["ECDS"], json!({"added": [name], "removed": [], "changed": []}), "{answer}");
    assert!(!got["web-1.shop"]["LDS"]["changed"].as_array().unwrap().is_empty(), "{answer}");
    assert_eq!(fetch(&s, &web), before, "a question changes nothing served");

    // Applied: what is served changes by the predicted names.
    std::fs::write(dir.path().join("plugin.yaml"), plugin).unwrap();
    let mut after = before.clone();
    wait_for("the plugin served", Duration::from_secs(20), || {
        after = fetch(&s, &web);
        after["extension_configs"].get(name).is_some()
    });
    let want = predicted(&got["web-1.shop"]);
    assert_eq!(differences(&before, &after), want, "{answer}");

    // With an image pull secret: the extension config carries the
    // secret's `.dockerconfigjson` (istiod's
    // `ISTIO_META_WASM_IMAGE_PULL_SECRET`, here not empty: the diff shows
    // it set); a what-if shows it redacted.
    let pull = "\
apiVersion: v1
kind: Secret
metadata: {name: pull, namespace: shop}
type: kubernetes.io/dockerconfigjson
stringData: {.dockerconfigjson: '{\"auths\":{\"example.com\":{\"auth\":\"c2VjcmV0LXRva2Vu\"}}}'}
";
    // (Asked with the plugin: the answer does not wait on the file watch.)
    let pulling = format!("{pull}---\n{plugin}  imagePullSecret: pull\n");
    let (code, answer) = whatif(&s, &pulling, &[]);
    assert_eq!(code, 0, "{answer}");
    let d = diff_of(&answer, "ECDS", name);
    assert!(
        d.lines()
            .any(|l| l.starts_with('+') && l.contains("ISTIO_META_WASM_IMAGE_PULL_SECRET") && l.contains("[redacted]")),
        "{d}\n{answer}"
    );
    assert!(!answer.to_string().contains("c2VjcmV0LXRva2Vu"), "the pull secret is never shown: {d}");
}

/// Which pods stand for proxies: one the question creates in a namespace
/// it turns injection off for runs none; those already there keep the
/// sidecar they run (until restarted).
#[test]
fn pods_are_judged_by_their_namespace_as_they_run() {
    let (_dir, s) = start();
    let web2 = "\
apiVersion: v1
kind: Pod
metadata: {name: web-2, namespace: shop, labels: {app: web, version: v2}}
spec: {serviceAccountName: web, containers: [{name: web, ports: [{containerPort: 8080}]}]}
status: {phase: Running, podIP: 10.1.0.3, conditions: [{type: Ready, status: 'True'}]}
";
    let considered = |answer: &Value| answer["summary"]["classesConsidered"].as_u64();
    let (code, alone) = whatif(&s, web2, &["--no-diff"]);
    assert_eq!(code, 0, "{alone}");
    assert_eq!(considered(&alone), Some(4), "web-1, db-1, teller-1 and the new web-2: {alone}");
    let disabled = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: shop, labels: {{istio-injection: disabled}}}}\n---\n{web2}"
    );
    let (code, answer) = whatif(&s, &disabled, &["--no-diff"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(considered(&answer), Some(3), "web-2 runs no proxy; web-1 and db-1 keep theirs: {answer}");
}
