//! Configs a migrating mesh brings, end to end (issue #33): each case's
//! objects go to the binary through `--configDir`, and what one proxy is
//! served is fetched by grpcio and decoded with the upstream `xds-protos`
//! descriptors (`tests/py/ads_fetch.py`); the assertions are istiod's
//! shapes, cited where they are made.

use std::path::Path;

use serde_json::{Value, json};

use crate::python;
use crate::server::Server;

/// What a sidecar of `namespace` with `labels` at `ip` is served from
/// `objects` (multi-document YAML) under mesh config `mesh`:
/// `{"clusters": {name: Cluster}, "listeners": {..}, "routes": {..}}` as
/// protobuf JSON.
pub(crate) fn served(objects: &str, mesh: &str, namespace: &str, labels: Value, ip: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir(&config).unwrap();
    std::fs::write(config.join("objects.yaml"), objects).unwrap();
    let mesh_file = dir.path().join("mesh");
    std::fs::write(&mesh_file, mesh).unwrap();
    let s = Server::start(&config, &["--meshConfig", mesh_file.to_str().unwrap()], &[], None);
    let node = json!({
        "id": format!("sidecar~{ip}~app-0.{namespace}~{namespace}.svc.cluster.local"),
        "metadata": {"NAMESPACE": namespace, "ISTIO_VERSION": "1.28.0", "INSTANCE_IPS": ip, "LABELS": labels},
    });
    let out = std::process::Command::new(python::python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/ads_fetch.py"))
        .arg(s.grpc.to_string())
        .arg(node.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", python::text(&out), s.log());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The filter chains of listener `l` named `name`.
fn chains<'a>(l: &'a Value, name: &str) -> Vec<&'a Value> {
    l["filterChains"].as_array().unwrap().iter().filter(|c| c["name"] == name).collect()
}

/// A Sidecar `ingress` listener (istiod's `buildInboundChainConfigs`,
/// `buildInboundClusterForPortOrUDS`): the workload's inbound chains are
/// the Sidecar's ports, not its Service's, and each port's cluster sends
/// to its `defaultEndpoint` (`0.0.0.0` meaning the workload's address, a
/// `unix://` socket as a pipe).
#[test]
fn a_sidecar_ingress_listener_is_served_as_istiod_serves_it() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.10
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 9999}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: web, namespace: shop}
spec:
  workloadSelector: {labels: {app: web}}
  ingress:
  - port: {number: 8080, protocol: HTTP, name: http}
    defaultEndpoint: 127.0.0.1:18080
  - port: {number: 9090, protocol: TCP, name: tcp}
    defaultEndpoint: 0.0.0.0:19090
  - port: {number: 7070, protocol: HTTP, name: uds}
    defaultEndpoint: unix:///var/run/app.sock
";
    let got = served(objects, "", "shop", json!({"app": "web"}), "10.1.2.3");
    let inbound = &got["listeners"]["virtualInbound"];
    // The Service's port (target 9999) is replaced by the Sidecar's.
    assert!(chains(inbound, "0.0.0.0_9999").is_empty(), "{inbound}");
    let http = chains(inbound, "0.0.0.0_8080");
    // PERMISSIVE HTTP: mTLS with Istio's ALPNs, and plaintext.
    assert_eq!(http.len(), 2, "{inbound}");
    assert!(http.iter().all(|c| c["filterChainMatch"]["destinationPort"] == 8080));
    let hcm = &http[1]["filters"].as_array().unwrap().last().unwrap()["typedConfig"];
    let route = &hcm["routeConfig"]["virtualHosts"][0]["routes"][0]["route"]["cluster"];
    assert_eq!(route, "inbound|8080||", "{hcm}");
    assert_eq!(chains(inbound, "0.0.0.0_9090").len(), 3, "PERMISSIVE TCP: mTLS, TLS, plaintext");
    let endpoint = |name: &str| {
        got["clusters"][name]["loadAssignment"]["endpoints"][0]["lbEndpoints"][0]["endpoint"]["address"].clone()
    };
    assert_eq!(got["clusters"]["inbound|8080||"]["type"], "STATIC");
    assert_eq!(endpoint("inbound|8080||")["socketAddress"], json!({"address": "127.0.0.1", "portValue": 18080}));
    assert_eq!(endpoint("inbound|9090||")["socketAddress"], json!({"address": "10.1.2.3", "portValue": 19090}));
    assert_eq!(endpoint("inbound|7070||")["pipe"]["path"], "/var/run/app.sock");
    assert!(got["clusters"].get("inbound|9999||").is_none(), "{}", got["clusters"]);
}

/// Whatever is read and not applied is reported where a user looks
/// (issue #33): `/debug/config_report` lists it, the log says it once, and
/// the server serves everything else.
#[test]
fn what_is_read_and_not_applied_is_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("objects.yaml"),
        "\
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: lua, namespace: shop}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    patch: {operation: INSERT_BEFORE, value: {name: envoy.lua}}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit, namespace: shop}
spec: {action: AUDIT, rules: [{}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]}
",
    )
    .unwrap();
    let s = Server::start(dir.path(), &[], &[], None);
    let (code, body) = crate::server::get(s.http, "/debug/config_report").unwrap();
    assert_eq!(code, 200);
    let report: Value = serde_json::from_str(&body).unwrap();
    let listed: Vec<&str> = report["notApplied"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert_eq!(
        listed,
        [
            "AuthorizationPolicy shop/audit: action AUDIT: requests are not marked for audit",
            "EnvoyFilter shop/lua: validated, not applied to generated configuration",
        ],
        "{report}"
    );
    assert_eq!(s.log().matches("read and not applied: EnvoyFilter shop/lua").count(), 1, "{}", s.log());
}

/// A delegate VirtualService's routes, merged under the routes that
/// delegate to them (`pilot/pkg/model/virtualservice.go`
/// `MergeHTTPRoutes`): matches narrowed to both, the root's timeout where
/// the delegate sets none, names joined, the delegate's short names its own
/// namespace's; the root's other routes stay after them.
#[test]
fn a_delegate_virtual_service_is_merged_into_its_root() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: bookinfo}
spec: {clusterIP: 10.96.0.20, selector: {app: reviews}, ports: [{name: http, port: 9080}]}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: team}
spec: {clusterIP: 10.96.0.21, selector: {app: api}, ports: [{name: http, port: 9080}]}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews]
  http:
  - name: api
    match: [{uri: {prefix: /api}}]
    timeout: 3s
    delegate: {name: reviews-api, namespace: team}
  - route: [{destination: {host: reviews}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews-api, namespace: team}
spec:
  http:
  - name: v2
    match: [{uri: {prefix: /api/v2}}]
    route: [{destination: {host: api}}]
  - name: elsewhere
    match: [{uri: {prefix: /login}}]
    route: [{destination: {host: api}}]
  - route: [{destination: {host: reviews.bookinfo.svc.cluster.local, subset: v1}}]
";
    let got = served(objects, "", "bookinfo", json!({"app": "productpage"}), "10.1.0.7");
    let vh = got["routes"]["9080"]["virtualHosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "reviews.bookinfo.svc.cluster.local:9080")
        .unwrap_or_else(|| panic!("{}", got["routes"]["9080"]))
        .clone();
    let routes: Vec<(String, String, String, String)> = vh["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (s(&r["name"]), s(&r["match"]["prefix"]), s(&r["route"]["cluster"]), s(&r["route"]["timeout"]))
        })
        .collect();
    assert_eq!(
        routes,
        [
            ("api-v2".into(), "/api/v2".into(), "outbound|9080||api.team.svc.cluster.local".into(), "3s".into()),
            ("api".into(), "/api".into(), "outbound|9080|v1|reviews.bookinfo.svc.cluster.local".into(), "3s".into()),
            ("".into(), "/".into(), "outbound|9080||reviews.bookinfo.svc.cluster.local".into(), "0s".into()),
        ],
        "{vh}"
    );
}
