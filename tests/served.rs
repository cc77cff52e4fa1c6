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
    served_as("sidecar", objects, mesh, namespace, labels, ip)
}

/// [`served`] for a proxy of type `kind` (`sidecar`, `router`).
pub(crate) fn served_as(kind: &str, objects: &str, mesh: &str, namespace: &str, labels: Value, ip: &str) -> Value {
    served_with(kind, objects, mesh, namespace, labels, ip, &[])
}

/// [`served_as`] with `env` for the client and the server (`PGV=1`: every
/// resource is checked with Envoy's field rules, failures under
/// `pgv_errors`; `EDS=1`: load assignments too).
pub(crate) fn served_with(
    kind: &str,
    objects: &str,
    mesh: &str,
    namespace: &str,
    labels: Value,
    ip: &str,
    env: &[(&str, &str)],
) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir(&config).unwrap();
    std::fs::write(config.join("objects.yaml"), objects).unwrap();
    let mesh_file = dir.path().join("mesh");
    std::fs::write(&mesh_file, mesh).unwrap();
    // The client's settings go to the server too (PILOT_ENABLE_AMBIENT).
    let s = Server::start(&config, &["--meshConfig", mesh_file.to_str().unwrap()], env, None);
    let mut node = json!({
        "id": format!("{kind}~{ip}~app-0.{namespace}~{namespace}.svc.cluster.local"),
        "metadata": {"NAMESPACE": namespace, "ISTIO_VERSION": "1.28.0", "INSTANCE_IPS": ip, "LABELS": labels},
    });
    // `NODE_META_<KEY>` entries of `env` are the node's metadata too.
    for (k, v) in env {
        if let Some(key) = k.strip_prefix("NODE_META_") {
            node["metadata"][key] = json!(v);
        }
    }
    fetch(&s, &node, env)
}

/// What `node` is served by `s`, fetched by grpcio (`tests/py/ads_fetch.py`).
pub(crate) fn fetch(s: &Server, node: &Value, env: &[(&str, &str)]) -> Value {
    let out = std::process::Command::new(python::python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/ads_fetch.py"))
        .arg(s.grpc.to_string())
        .arg(node.to_string())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", python::text(&out), s.log());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The tcp_proxy configs of every chain of listener `listener` in what
/// [`served`] returned (its default chain last).
fn tcp_proxies(got: &Value, listener: &str) -> Vec<Value> {
    let l = &got["listeners"][listener];
    assert!(l.is_object(), "no listener {listener}: {:?}", got["listeners"].as_object().unwrap().keys());
    let mut chains: Vec<Value> = l["filterChains"].as_array().cloned().unwrap_or_default();
    chains.extend(l.get("defaultFilterChain").cloned());
    chains
        .iter()
        .flat_map(|c| c["filters"].as_array().unwrap().clone())
        .filter(|f| f["name"] == "envoy.filters.network.tcp_proxy")
        .map(|f| f["typedConfig"].clone())
        .collect()
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
    // Chains without `bind` are named after the workload's global unicast
    // address (`getSidecarInboundBindIPs`).
    let http = chains(inbound, "10.1.2.3_8080");
    // PERMISSIVE HTTP: mTLS with Istio's ALPNs, and plaintext.
    assert_eq!(http.len(), 2, "{inbound}");
    assert!(http.iter().all(|c| c["filterChainMatch"]["destinationPort"] == 8080));
    let hcm = &http[1]["filters"].as_array().unwrap().last().unwrap()["typedConfig"];
    let route = &hcm["routeConfig"]["virtualHosts"][0]["routes"][0]["route"]["cluster"];
    assert_eq!(route, "inbound|8080||", "{hcm}");
    assert_eq!(chains(inbound, "10.1.2.3_9090").len(), 3, "PERMISSIVE TCP: mTLS, TLS, plaintext");
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
  - applyTo: EXTENSION_CONFIG
    patch: {operation: MERGE, value: {name: lua-ecds}}
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: wasm, namespace: shop}
spec: {url: oci://example.com/filter:1}
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
            // The HTTP filter is applied; an extension configuration's MERGE
            // is not (istiod applies only ADD there); the WasmPlugin is.
            "EnvoyFilter shop/lua: applyTo EXTENSION_CONFIG: only ADD applies, as in istiod (not MERGE)",
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

/// The filters of the chain named `name` in listener `l`, by name, with
/// their typed configs (an HCM's HTTP filters when `http`).
fn filters(l: &Value, name: &str, http: bool) -> Vec<(String, Value)> {
    let chain = chains(l, name).last().copied().unwrap_or_else(|| panic!("no chain {name}: {l}")).clone();
    let list: Vec<Value> = chain["filters"].as_array().unwrap().clone();
    let list = if http {
        let hcm = list.iter().find(|f| f["name"] == "envoy.filters.network.http_connection_manager").unwrap();
        hcm["typedConfig"]["httpFilters"].as_array().unwrap().clone()
    } else {
        list
    };
    list.into_iter().map(|f| (f["name"].as_str().unwrap().to_owned(), f["typedConfig"].clone())).collect()
}

/// AuthorizationPolicy CUSTOM and AUDIT as istiod builds them
/// (`pilot/pkg/security/authz/builder/builder.go`, `extauthz.go`): per
/// provider an RBAC filter whose shadow rules mark the requests the
/// policy matches (`istio-ext-authz-<provider>-ns[..]-policy[..]-rule[i]`),
/// then the provider's ext_authz filter, enabled by that mark, calling the
/// provider's cluster; a gRPC provider on TCP ports too, an HTTP one on
/// HTTP ports only; AUDIT as an RBAC filter with Envoy's LOG action after
/// them; a policy naming an unknown provider denies what it matches.
#[test]
fn custom_authorization_is_served_as_ext_authz_with_the_providers_cluster() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: opa, namespace: auth}
spec: {clusterIP: 10.96.0.50, selector: {app: opa}, ports: [{name: grpc, port: 9191}, {name: http, port: 8181}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.10
  selector: {app: web}
  ports: [{name: http, port: 80}, {name: tcp-db, port: 5432}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  action: CUSTOM
  provider: {name: opa-grpc}
  rules: [{to: [{operation: {paths: [/admin/*]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit, namespace: shop}
spec:
  action: AUDIT
  rules: [{from: [{source: {namespaces: [legacy]}}]}]
";
    let mesh = "\
extensionProviders:
- name: opa-grpc
  envoyExtAuthzGrpc: {service: opa.auth.svc.cluster.local, port: 9191, timeout: 2s, failOpen: true}
- name: opa-http
  envoyExtAuthzHttp:
    service: auth/opa.auth.svc.cluster.local
    port: 8181
    pathPrefix: /check
    includeRequestHeadersInCheck: [x-user, x-b3-*]
    headersToUpstreamOnAllow: [x-auth-*]
    statusOnError: \"503\"
";
    let got = served(objects, mesh, "shop", json!({"app": "web"}), "10.1.2.3");
    let inbound = &got["listeners"]["virtualInbound"];
    let http = filters(inbound, "0.0.0.0_80", true);
    let names: Vec<&str> = http.iter().map(|(n, _)| n.as_str()).collect();
    let rbac = names.iter().position(|n| *n == "envoy.filters.http.rbac").unwrap_or_else(|| panic!("{names:?}"));
    assert_eq!(
        &names[rbac..rbac + 3],
        ["envoy.filters.http.rbac", "envoy.filters.http.ext_authz", "envoy.filters.http.rbac"],
        "CUSTOM's pair, then AUDIT: {names:?}"
    );
    let shadow = &http[rbac].1;
    assert_eq!(shadow["shadowRulesStatPrefix"], "istio_ext_authz_", "{shadow}");
    assert!(shadow.get("rules").is_none(), "CUSTOM never enforces in RBAC: {shadow}");
    let policies = shadow["shadowRules"]["policies"].as_object().unwrap();
    assert_eq!(policies.keys().collect::<Vec<_>>(), ["istio-ext-authz-opa-grpc-ns[shop]-policy[ext]-rule[0]"]);
    let ext = &http[rbac + 1].1;
    assert_eq!(ext["@type"], "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz");
    assert_eq!(
        ext["grpcService"],
        json!({"envoyGrpc": {"clusterName": "outbound|9191||opa.auth.svc.cluster.local",
                             "authority": "opa.auth.svc.cluster.local"}, "timeout": "2s"}),
        "{ext}"
    );
    assert_eq!(ext["failureModeAllow"], true);
    assert_eq!(ext["transportApiVersion"], "V3");
    assert_eq!(
        ext["filterEnabledMetadata"],
        json!({"filter": "envoy.filters.http.rbac",
               "path": [{"key": "istio_ext_authz_shadow_effective_policy_id"}],
               "value": {"stringMatch": {"prefix": "istio-ext-authz-opa-grpc"}}}),
        "{ext}"
    );
    let audit = &http[rbac + 2].1;
    assert_eq!(audit["rules"]["action"], "LOG", "{audit}");
    assert!(audit["rules"]["policies"].get("ns[shop]-policy[audit]-rule[0]").is_some(), "{audit}");
    // The provider's cluster is served to the workload.
    assert!(got["clusters"].get("outbound|9191||opa.auth.svc.cluster.local").is_some());
    // A gRPC provider authorizes TCP too.
    let tcp = filters(inbound, "0.0.0.0_5432", false);
    let names: Vec<&str> = tcp.iter().map(|(n, _)| n.as_str()).collect();
    let at = names.iter().position(|n| *n == "envoy.filters.network.ext_authz").unwrap_or_else(|| panic!("{names:?}"));
    assert_eq!(names[at - 1], "envoy.filters.network.rbac", "{names:?}");
    assert_eq!(tcp[at].1["statPrefix"], "tcp.");
    assert_eq!(tcp[at].1["filterEnabledMetadata"]["filter"], "envoy.filters.network.rbac");

    // The HTTP provider: its service, path, headers and status; not on TCP.
    let objects = objects.replace("name: opa-grpc}", "name: opa-http}");
    let got = served(&objects, mesh, "shop", json!({"app": "web"}), "10.1.2.3");
    let inbound = &got["listeners"]["virtualInbound"];
    let http = filters(inbound, "0.0.0.0_80", true);
    let (_, ext) = http.iter().find(|(n, _)| n == "envoy.filters.http.ext_authz").unwrap();
    assert_eq!(
        ext["httpService"],
        json!({
            "serverUri": {"uri": "http://opa.auth.svc.cluster.local",
                          "cluster": "outbound|8181||opa.auth.svc.cluster.local", "timeout": "600s"},
            "pathPrefix": "/check",
            "authorizationResponse": {"allowedUpstreamHeaders": {"patterns": [{"prefix": "x-auth-", "ignoreCase": true}]}},
        }),
        "{ext}"
    );
    assert_eq!(
        ext["allowedHeaders"],
        json!({"patterns": [{"exact": "x-user", "ignoreCase": true}, {"prefix": "x-b3-", "ignoreCase": true}]})
    );
    assert_eq!(ext["statusOnError"], json!({"code": "ServiceUnavailable"}));
    let tcp = filters(inbound, "0.0.0.0_5432", false);
    assert!(tcp.iter().all(|(n, _)| n != "envoy.filters.network.ext_authz"), "{tcp:?}");

    // An unknown provider: the policy's rules deny.
    let objects = objects.replace("name: opa-http}", "name: missing}");
    let got = served(&objects, mesh, "shop", json!({"app": "web"}), "10.1.2.3");
    let http = filters(&got["listeners"]["virtualInbound"], "0.0.0.0_80", true);
    assert!(http.iter().all(|(n, _)| n != "envoy.filters.http.ext_authz"));
    let deny = http
        .iter()
        .find(|(n, c)| n == "envoy.filters.http.rbac" && c["rules"]["action"] == "DENY")
        .map(|(_, c)| c)
        .unwrap_or_else(|| panic!("{http:?}"));
    assert!(
        deny["rules"]["policies"]
            .get("istio-ext-authz-missing-ns[shop]-policy[ext]-rule[0]-deny-due-to-bad-CUSTOM-action")
            .is_some(),
        "{deny}"
    );
}

/// A VirtualService's `tcp` and `tls` routes on a sidecar's outbound
/// listeners (`networking/core/tls.go`
/// `buildSidecarOutboundTCPFilterChainOpts` and `...TLSFilterChainOpts`):
/// a match on the listener's port sends it to the route's destination (the
/// destination's only port when it names none), two destinations become
/// weighted clusters with stat prefix `<name>.<namespace>`, a match on
/// another port leaves the service's own chain, and a TLS route matches by
/// server name.
#[test]
fn a_sidecar_tcp_route_by_port_is_served_as_istiod_serves_it() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: mysql, namespace: db}
spec:
  clusterIP: 10.96.0.30
  selector: {app: mysql}
  ports: [{name: tcp-a, port: 3306}, {name: tcp-b, port: 3307}, {name: tcp-c, port: 3308}]
---
apiVersion: v1
kind: Service
metadata: {name: mysql-v2, namespace: db}
spec: {clusterIP: 10.96.0.31, selector: {app: mysql-v2}, ports: [{name: tcp, port: 13306}]}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: mysql, namespace: db}
spec:
  hosts: [mysql]
  tcp:
  - match: [{port: 3306}]
    route: [{destination: {host: mysql-v2}}]
  - match: [{port: 3307}]
    route:
    - {destination: {host: mysql, subset: v1}, weight: 80}
    - {destination: {host: mysql, subset: v2}, weight: 20}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: db}
spec:
  hosts: [api.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: db}
spec:
  hosts: [api.example.com]
  tls:
  - match: [{port: 443, sniHosts: [api.example.com]}]
    route: [{destination: {host: egress.example.com, port: {number: 8443}}}]
";
    let got = served(objects, "", "shop", json!({"app": "client"}), "10.1.0.9");
    let proxy = |listener: &str| tcp_proxies(&got, listener);
    let p3306 = proxy("10.96.0.30_3306");
    assert_eq!(p3306[0]["cluster"], "outbound|13306||mysql-v2.db.svc.cluster.local", "{p3306:?}");
    let p3307 = proxy("10.96.0.30_3307");
    assert_eq!(p3307[0]["statPrefix"], "mysql.db", "{p3307:?}");
    assert_eq!(
        p3307[0]["weightedClusters"]["clusters"],
        json!([{"name": "outbound|3307|v1|mysql.db.svc.cluster.local", "weight": 80},
               {"name": "outbound|3307|v2|mysql.db.svc.cluster.local", "weight": 20}]),
    );
    // No route for 3308: the service's own cluster.
    let p3308 = proxy("10.96.0.30_3308");
    assert_eq!(p3308[0]["cluster"], "outbound|3308||mysql.db.svc.cluster.local", "{p3308:?}");
    // TLS by server name on the address-less ServiceEntry's 0.0.0.0_443.
    let l = &got["listeners"]["0.0.0.0_443"];
    let chain = l["filterChains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["filterChainMatch"]["serverNames"] == json!(["api.example.com"]))
        .unwrap_or_else(|| panic!("{l}"));
    let tcp = chain["filters"].as_array().unwrap().last().unwrap();
    assert_eq!(tcp["typedConfig"]["cluster"], "outbound|8443||egress.example.com", "{chain}");
}

/// A Kubernetes Ingress routed by the ingress gateway, as istiod's ingress
/// controller converts it (`pilot/pkg/config/kube/ingress`): a Gateway per
/// Ingress (HTTP on 80, HTTPS on 443 with the `tls` secret), a
/// VirtualService per host whose routes go longest path first, an `Exact`
/// path as a path match, a `Prefix` path matching whole segments, a named
/// backend port resolved through the Service; an Ingress of another class
/// is left alone.
#[test]
fn an_ingress_is_routed_by_the_ingress_gateway() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {clusterIP: 10.96.0.40, selector: {app: web}, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec: {clusterIP: 10.96.0.41, selector: {app: api}, ports: [{name: http, port: 8080}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: shop
  annotations: {kubernetes.io/ingress.class: istio}
spec:
  tls:
  - {hosts: [shop.example.com], secretName: shop-cert}
  rules:
  - host: shop.example.com
    http:
      paths:
      - {path: /api, pathType: Prefix, backend: {service: {name: api, port: {number: 8080}}}}
      - {path: /exact, pathType: Exact, backend: {service: {name: web, port: {name: http}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: other
  namespace: shop
  annotations: {kubernetes.io/ingress.class: nginx}
spec:
  rules:
  - host: other.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
";
    let got = served_as("router", objects, "", "istio-system", json!({"istio": "ingressgateway"}), "10.1.0.20");
    assert!(got["listeners"]["0.0.0.0_80"].is_object(), "{:?}", got["listeners"].as_object().unwrap().keys());
    let vhosts = got["routes"]["http.80"]["virtualHosts"].as_array().unwrap_or_else(|| panic!("{}", got["routes"]));
    let names: Vec<&str> = vhosts.iter().filter_map(|v| v["name"].as_str()).collect();
    assert!(!names.iter().any(|n| n.starts_with("other.example.com")), "another class's Ingress: {names:?}");
    let vh = vhosts.iter().find(|v| v["name"] == "shop.example.com:80").unwrap_or_else(|| panic!("{names:?}"));
    let routes: Vec<(Value, Value)> =
        vh["routes"].as_array().unwrap().iter().map(|r| (r["match"].clone(), r["route"]["cluster"].clone())).collect();
    assert_eq!(
        routes,
        [
            (json!({"path": "/exact", "caseSensitive": true}), json!("outbound|80||web.shop.svc.cluster.local")),
            (
                json!({"pathSeparatedPrefix": "/api", "caseSensitive": true}),
                json!("outbound|8080||api.shop.svc.cluster.local")
            ),
        ],
        "{vh}"
    );
    // HTTPS on 443 with the Ingress's secret, routed the same way.
    let https = "https.443.https-443-ingress-shop-shop-0.shop-istio-autogenerated-k8s-ingress-shop.istio-system";
    let vh = &got["routes"][https]["virtualHosts"][0];
    // Gateways ignore the port in host matching (istiod's StripHostPort).
    assert_eq!(vh["name"], "shop.example.com:443", "{}", got["routes"]);
    assert_eq!(vh["domains"], json!(["shop.example.com"]));
    assert_eq!(vh["routes"].as_array().unwrap().len(), 2);
    let l443 = got["listeners"]["0.0.0.0_443"].to_string();
    assert!(l443.contains("kubernetes://shop-cert") || l443.contains("\"shop-cert\""), "{l443}");
}

/// `outboundTrafficPolicy.mode: ALLOW_ANY_DYNAMIC_DNS` (istiod's
/// `buildAllowAnyDFPCluster`, `buildCatchAllVirtualHost`, the virtual
/// outbound HTTP chain): the dynamic forward proxy cluster, its filter
/// before the router in every outbound HCM, all naming one DNS cache, the
/// catch-all virtual host sending to it; a Sidecar of its own policy gets
/// none of it.
#[test]
fn allow_any_dynamic_dns_is_served_as_istiod_serves_it() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.10
  selector: {app: web}
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: strict, namespace: shop}
spec:
  workloadSelector: {labels: {app: strict}}
  outboundTrafficPolicy: {mode: REGISTRY_ONLY}
";
    let mesh = "outboundTrafficPolicy: {mode: ALLOW_ANY_DYNAMIC_DNS}\n";
    let got = served(objects, mesh, "shop", json!({"app": "client"}), "10.1.2.4");
    let cluster = &got["clusters"]["AllowAnyDynamicDNSCluster"];
    assert_eq!(cluster["clusterType"]["name"], "envoy.clusters.dynamic_forward_proxy", "{cluster}");
    assert_eq!(cluster["lbPolicy"], "CLUSTER_PROVIDED");
    let config = &cluster["clusterType"]["typedConfig"];
    assert_eq!(config["allowInsecureClusterOptions"], true, "{config}");
    let cache = &config["dnsCacheConfig"];
    assert_eq!(cache["name"], "allow_any_dfp_dns_cache");
    assert_eq!(cache["maxHosts"], 1024);
    // The same cache in the port's HCM, just before the router.
    let hcm = |l: &Value| -> Value {
        let chains = l["filterChains"].as_array().unwrap().iter().chain(l.get("defaultFilterChain"));
        chains
            .flat_map(|c| c["filters"].as_array().unwrap().iter())
            .find(|f| f["name"] == "envoy.filters.network.http_connection_manager")
            .map(|f| f["typedConfig"].clone())
            .unwrap_or(Value::Null)
    };
    let names = |h: &Value| -> Vec<String> {
        h["httpFilters"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap().to_owned()).collect()
    };
    let port80 = hcm(&got["listeners"]["0.0.0.0_80"]);
    let filters = names(&port80);
    assert_eq!(filters[filters.len() - 2], "envoy.filters.http.dynamic_forward_proxy", "{filters:?}");
    let dfp = port80["httpFilters"].as_array().unwrap().iter().find(|f| f["name"] == filters[filters.len() - 2]);
    assert_eq!(dfp.unwrap()["typedConfig"]["dnsCacheConfig"], *cache);
    // Unknown hosts on route 80 go to it, with no timeout.
    let vhosts = got["routes"]["80"]["virtualHosts"].as_array().unwrap();
    let last = vhosts.last().unwrap();
    assert_eq!(last["name"], "allow_any_dynamic_dns");
    assert_eq!(last["routes"][0]["route"]["cluster"], "AllowAnyDynamicDNSCluster");
    assert_eq!(last["routes"][0]["route"]["timeout"], "0s");
    // virtualOutbound sniffs plaintext HTTP for it; other traffic passes.
    let vo = &got["listeners"]["virtualOutbound"];
    assert_eq!(vo["listenerFilters"][0]["name"], "envoy.filters.listener.http_inspector", "{vo}");
    let http = chains(vo, "virtualOutbound-catchall-tcp-http");
    assert_eq!(http[0]["filterChainMatch"]["applicationProtocols"], json!(["http/1.1", "h2c"]));
    assert_eq!(
        hcm(&json!({"filterChains": [http[0]]}))["routeConfig"]["virtualHosts"][0]["name"],
        "allow_any_dynamic_dns"
    );
    let tcp = chains(vo, "virtualOutbound-catchall-tcp");
    assert_eq!(tcp[0]["filters"].as_array().unwrap().last().unwrap()["typedConfig"]["cluster"], "PassthroughCluster");

    // A Sidecar with its own policy: no cluster, no filter, block_all.
    let strict = served(objects, mesh, "shop", json!({"app": "strict"}), "10.1.2.5");
    assert!(strict["clusters"].get("AllowAnyDynamicDNSCluster").is_none(), "{}", strict["clusters"]);
    let filters = names(&hcm(&strict["listeners"]["0.0.0.0_80"]));
    assert!(!filters.iter().any(|f| f.contains("dynamic_forward_proxy")), "{filters:?}");
    let vhosts = strict["routes"]["80"]["virtualHosts"].as_array().unwrap();
    assert_eq!(vhosts.last().unwrap()["name"], "block_all");
    assert!(chains(&strict["listeners"]["virtualOutbound"], "virtualOutbound-catchall-tcp-http").is_empty());
}

/// A Gateway API BackendTLSPolicy becomes istiod's synthetic
/// DestinationRule: the targeted Service's clusters originate TLS with
/// the policy's server name and the system roots, for every proxy.
#[test]
fn a_backend_tls_policy_originates_tls_as_istiod_does() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: shop}
spec:
  clusterIP: 10.96.0.20
  selector: {app: echo}
  ports: [{name: http, port: 80}, {name: https, port: 443}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: echo-tls, namespace: shop}
spec:
  targetRefs: [{group: '', kind: Service, name: echo, sectionName: https}]
  validation: {wellKnownCACertificates: System, hostname: echo.example.com}
";
    let got = served(objects, "", "shop", json!({"app": "client"}), "10.1.2.6");
    let tls = &got["clusters"]["outbound|443||echo.shop.svc.cluster.local"]["transportSocket"];
    assert_eq!(tls["name"], "envoy.transport_sockets.tls", "{tls}");
    assert_eq!(tls["typedConfig"]["sni"], "echo.example.com", "{tls}");
    let ctx = &tls["typedConfig"]["commonTlsContext"];
    let roots = &ctx["combinedValidationContext"]["validationContextSdsSecretConfig"]["name"];
    assert_eq!(roots, "file-root:system", "{ctx}");
    // The port the policy does not name keeps Istio's auto mTLS.
    let plain = &got["clusters"]["outbound|80||echo.shop.svc.cluster.local"];
    assert_ne!(plain["transportSocket"]["typedConfig"]["sni"], "echo.example.com", "{plain}");
}

/// A TCPRoute whose parent is a Service (GAMMA, istiod's
/// `TCPRouteCollection` for mesh parents): a VirtualService bound to
/// `mesh` on the Service's host, the parent's port matched, so the
/// sidecar's listener for that port proxies to the route's backend.
#[test]
fn a_tcp_route_with_a_service_parent_is_served_as_istiod_serves_it() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: mysql, namespace: db}
spec:
  clusterIP: 10.96.0.30
  selector: {app: mysql}
  ports: [{name: tcp-a, port: 3306}, {name: tcp-b, port: 3307}]
---
apiVersion: v1
kind: Service
metadata: {name: mysql-v2, namespace: db}
spec: {clusterIP: 10.96.0.31, selector: {app: mysql-v2}, ports: [{name: tcp, port: 13306}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: mysql, namespace: db}
spec:
  parentRefs: [{group: '', kind: Service, name: mysql, port: 3306}]
  rules: [{backendRefs: [{name: mysql-v2, port: 13306}]}]
";
    let got = served(objects, "", "shop", json!({"app": "client"}), "10.1.0.10");
    let cluster = |listener: &str| tcp_proxies(&got, listener)[0]["cluster"].clone();
    assert_eq!(cluster("10.96.0.30_3306"), "outbound|13306||mysql-v2.db.svc.cluster.local");
    // The port the parent does not name keeps the Service's own cluster.
    assert_eq!(cluster("10.96.0.30_3307"), "outbound|3307||mysql.db.svc.cluster.local");
}

/// How each cluster speaks HTTP upstream, as istiod's `setUpstreamProtocol`,
/// `applyH2Upgrade` and `applyConnectionPool` make it, and inbound mesh
/// mTLS as `BuildInboundTLS` (checked with Envoy's field rules, PGV): a
/// gRPC port's clusters (outbound and the workload's inbound) speak HTTP/2
/// and offer `h2` over mTLS; an unnamed port's sidecar cluster speaks what
/// the client spoke, a router's HTTP/1.1 with the rule's idle timeout; a
/// rule's `h2UpgradePolicy: UPGRADE` and `maxConcurrentStreams` make an
/// HTTP port's cluster HTTP/2; every cluster has istiod's circuit breakers
/// and the mesh's TCP keepalive; inbound mTLS offers `h2`/`http/1.1`
/// (TCP chains `istio-peer-exchange` first) at TLS 1.3 at most, 1.3 at
/// least under `meshMTLS`.
#[test]
fn upstream_http_versions_and_inbound_mtls_are_served_as_istiod_serves_them() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec:
  clusterIP: 10.96.2.10
  selector: {app: api}
  ports: [{name: grpc, port: 9000}, {name: web, port: 8080}, {name: http, port: 80}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: api-1, namespace: shop, labels: {kubernetes.io/service-name: api}}
addressType: IPv4
ports: [{name: grpc, port: 9000}, {name: web, port: 8080}, {name: http, port: 80}]
endpoints:
- addresses: [10.1.2.1]
  targetRef: {kind: Pod, name: api-a, namespace: shop}
---
apiVersion: v1
kind: Pod
metadata: {name: api-a, namespace: shop, labels: {app: api, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: api}
status: {podIP: 10.1.2.1}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api, namespace: shop}
spec:
  host: api
  trafficPolicy:
    connectionPool: {http: {idleTimeout: 15s, http1MaxPendingRequests: 7}}
    portLevelSettings:
    - port: {number: 80}
      connectionPool: {http: {h2UpgradePolicy: UPGRADE, maxConcurrentStreams: 200}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: shop}
spec:
  hosts: [api]
  http:
  - route: [{destination: {host: api, port: {number: 80}}}]
    mirror: {host: api, port: {number: 80}}
";
    let mesh = "meshMTLS: {minProtocolVersion: TLSV1_3}\ntcpKeepalive: {time: 11s}\n";
    let env = [("PGV", "1")];
    let sidecar = served_with("sidecar", objects, mesh, "shop", json!({"app": "api"}), "10.1.2.1", &env);
    assert_eq!(sidecar["pgv_errors"], json!([]), "{sidecar}");
    let options = |c: &Value| {
        c["typedExtensionProtocolOptions"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].clone()
    };
    let alpn = |c: &Value| {
        let m = c["transportSocketMatches"].as_array().unwrap().iter().find(|m| m["name"] == "tlsMode-istio").unwrap();
        m["transportSocket"]["typedConfig"]["commonTlsContext"]["alpnProtocols"].clone()
    };
    let cluster = |got: &Value, name: &str| got["clusters"][name].clone();
    let grpc = cluster(&sidecar, "outbound|9000||api.shop.svc.cluster.local");
    assert_eq!(options(&grpc)["explicitHttpConfig"], json!({"http2ProtocolOptions": {}}), "{grpc}");
    assert_eq!(options(&grpc)["commonHttpProtocolOptions"]["idleTimeout"], "15s");
    assert_eq!(alpn(&grpc), json!(["istio-peer-exchange", "istio", "h2"]));
    let t = &grpc["circuitBreakers"]["thresholds"][0];
    assert_eq!((t["maxPendingRequests"].clone(), t["maxRequests"].clone()), (json!(7), json!(4294967295u32)));
    assert_eq!(t["trackRemaining"], json!(null), "DISABLE_TRACK_REMAINING_CB_METRICS defaults to true");
    assert_eq!(grpc["upstreamConnectionOptions"]["tcpKeepalive"], json!({"keepaliveTime": 11}));
    let web = cluster(&sidecar, "outbound|8080||api.shop.svc.cluster.local");
    assert_eq!(
        options(&web)["useDownstreamProtocolConfig"],
        json!({"httpProtocolOptions": {}, "http2ProtocolOptions": {}}),
        "{web}"
    );
    assert_eq!(alpn(&web), json!(["istio-peer-exchange", "istio"]));
    let upgraded = cluster(&sidecar, "outbound|80||api.shop.svc.cluster.local");
    assert_eq!(
        options(&upgraded)["explicitHttpConfig"],
        json!({"http2ProtocolOptions": {"maxConcurrentStreams": 200}}),
        "{upgraded}"
    );
    // Port-level settings replace the top level: no idle timeout on 80
    // (the options istiod makes for maxConcurrentStreams are empty).
    assert_eq!(options(&upgraded)["commonHttpProtocolOptions"], json!({}));
    assert_eq!(
        cluster(&sidecar, "inbound|9000||")["typedExtensionProtocolOptions"].as_object().map(|o| o.len()),
        Some(1)
    );
    assert_eq!(
        options(&cluster(&sidecar, "inbound|9000||"))["explicitHttpConfig"],
        json!({"http2ProtocolOptions": {}})
    );
    assert!(options(&cluster(&sidecar, "inbound|8080||"))["useDownstreamProtocolConfig"].is_object());
    assert_eq!(options(&cluster(&sidecar, "PassthroughCluster"))["commonHttpProtocolOptions"]["idleTimeout"], "300s");

    // Inbound mTLS: HTTP chains and TCP chains differ in ALPN only.
    let inbound = &sidecar["listeners"]["virtualInbound"];
    let tls: Vec<(bool, Value)> = inbound["filterChains"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["transportSocket"]["name"] == "envoy.transport_sockets.tls")
        .map(|c| {
            let http = c["filters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["name"] == "envoy.filters.network.http_connection_manager");
            (http, c["transportSocket"]["typedConfig"]["commonTlsContext"].clone())
        })
        .collect();
    assert!(tls.iter().any(|(http, _)| *http) && tls.iter().any(|(http, _)| !*http), "{inbound}");
    for (http, common) in &tls {
        let want = if *http { json!(["h2", "http/1.1"]) } else { json!(["istio-peer-exchange", "h2", "http/1.1"]) };
        assert_eq!(common["alpnProtocols"], want, "{common}");
        assert_eq!(
            common["tlsParams"],
            json!({
                "tlsMinimumProtocolVersion": "TLSv1_3",
                "tlsMaximumProtocolVersion": "TLSv1_3",
                "cipherSuites": ["ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
                    "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256", "AES256-GCM-SHA384",
                    "AES128-GCM-SHA256"],
            }),
        );
    }

    // ENABLE_100_CONTINUE_HEADERS, DISABLE_SHADOW_HOST_SUFFIX and
    // MAX_CONNECTIONS_PER_SOCKET_EVENT_LOOP at istiod's defaults.
    for l in ["virtualInbound", "virtualOutbound"] {
        assert_eq!(sidecar["listeners"][l]["maxConnectionsToAcceptPerSocketEvent"], 1, "{l}");
    }
    let managers: Vec<&Value> = sidecar["listeners"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|l| l["filterChains"].as_array().into_iter().flatten().chain(l.get("defaultFilterChain")))
        .flat_map(|c| c["filters"].as_array().into_iter().flatten())
        .filter(|f| f["name"] == "envoy.filters.network.http_connection_manager")
        .collect();
    assert!(managers.len() > 2 && managers.iter().all(|m| m["typedConfig"]["proxy100Continue"] == true));
    let mirrored = sidecar["routes"]["80"]["virtualHosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "api.shop.svc.cluster.local:80")
        .map(|v| v["routes"][0]["route"]["requestMirrorPolicies"][0].clone());
    assert_eq!(
        mirrored.as_ref().map(|m| m["disableShadowHostSuffixAppend"].clone()),
        Some(json!(true)),
        "{mirrored:?}"
    );

    // A router does not sniff: the unnamed port's cluster is HTTP/1.1.
    let router = served_with("router", objects, mesh, "shop", json!({"istio": "ingressgateway"}), "10.1.9.9", &env);
    assert_eq!(router["pgv_errors"], json!([]), "{router}");
    let web = cluster(&router, "outbound|8080||api.shop.svc.cluster.local");
    assert_eq!(options(&web)["explicitHttpConfig"], json!({"httpProtocolOptions": {}}), "{web}");
    assert_eq!(options(&web)["commonHttpProtocolOptions"]["idleTimeout"], "15s");
    assert_eq!(alpn(&web), json!(["istio-peer-exchange", "istio"]));
}

/// Mongo and Redis ports as istiod's `buildNetworkFiltersStack` serves
/// them (Envoy's field rules checked): `mongo_proxy` before the
/// tcp_proxy by default (`PILOT_ENABLE_MONGO_FILTER`), outbound and
/// inbound, with the tcp_proxy's stat prefix; with
/// `PILOT_ENABLE_REDIS_FILTER`, `redis_proxy` in the tcp_proxy's place
/// (upstream `TestBuildRedisFilter`) and Maglev on the Redis cluster,
/// also a router's and a headless service's (upstream
/// `TestRedisProtocolWithPassThroughResolutionAtGateway`: a router's
/// cluster of a headless service is EDS, a sidecar's original-destination
/// unless `PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES`).
#[test]
fn mongo_and_redis_ports_get_their_protocol_filters() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: mongo, namespace: db}
spec:
  clusterIP: 10.96.3.10
  selector: {app: mongo}
  ports: [{name: mongo, port: 27017}]
---
apiVersion: v1
kind: Service
metadata: {name: cache, namespace: db}
spec:
  clusterIP: 10.96.3.11
  selector: {app: cache}
  ports: [{name: redis-port, port: 6379}]
---
apiVersion: v1
kind: Service
metadata: {name: cache-headless, namespace: db}
spec:
  clusterIP: None
  selector: {app: cache}
  ports: [{name: redis-port, port: 6380}]
";
    let names = |chain: &Value| -> Vec<String> {
        chain["filters"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap().to_owned()).collect()
    };
    let outbound = |got: &Value, listener: &str| -> Value {
        let l = &got["listeners"][listener];
        l["filterChains"].as_array().and_then(|c| c.first()).cloned().unwrap_or_else(|| l["defaultFilterChain"].clone())
    };
    let env = [("PGV", "1")];
    let got = served_with("sidecar", objects, "", "db", json!({"app": "mongo"}), "10.1.3.1", &env);
    assert_eq!(got["pgv_errors"], json!([]), "{got}");
    let chain = outbound(&got, "10.96.3.10_27017");
    assert_eq!(
        names(&chain)[names(&chain).len() - 2..],
        ["envoy.filters.network.mongo_proxy", "envoy.filters.network.tcp_proxy"],
        "{chain}"
    );
    let mongo = &chain["filters"].as_array().unwrap()[names(&chain).len() - 2];
    assert_eq!(mongo["typedConfig"]["statPrefix"], "outbound|27017||mongo.db.svc.cluster.local");
    let redis = outbound(&got, "10.96.3.11_6379");
    assert_eq!(names(&redis).last().unwrap(), "envoy.filters.network.tcp_proxy", "off by default: {redis}");
    assert_eq!(got["clusters"]["outbound|6379||cache.db.svc.cluster.local"]["lbPolicy"], "LEAST_REQUEST");
    // The workload's own Mongo port, inbound.
    let inbound = got["listeners"]["virtualInbound"]["filterChains"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["filterChainMatch"]["destinationPort"] == 27017)
        .map(names)
        .collect::<Vec<_>>();
    assert!(!inbound.is_empty());
    for chain in &inbound {
        assert_eq!(chain[chain.len() - 2..], ["envoy.filters.network.mongo_proxy", "envoy.filters.network.tcp_proxy"]);
    }
    let headless = &got["clusters"]["outbound|6380||cache-headless.db.svc.cluster.local"];
    assert_eq!(
        (headless["type"].clone(), headless["lbPolicy"].clone()),
        (json!("ORIGINAL_DST"), json!("CLUSTER_PROVIDED"))
    );
    let off = [("PGV", "1"), ("PILOT_ENABLE_MONGO_FILTER", "false")];
    let got = served_with("sidecar", objects, "", "db", json!({"app": "mongo"}), "10.1.3.1", &off);
    assert!(!names(&outbound(&got, "10.96.3.10_27017")).iter().any(|n| n.contains("mongo")));

    let on = [("PGV", "1"), ("PILOT_ENABLE_REDIS_FILTER", "true")];
    let got = served_with("sidecar", objects, "", "db", json!({"app": "client"}), "10.1.3.2", &on);
    assert_eq!(got["pgv_errors"], json!([]), "{got}");
    let redis = outbound(&got, "10.96.3.11_6379");
    assert_eq!(names(&redis).last().unwrap(), "envoy.filters.network.redis_proxy", "{redis}");
    let config = &redis["filters"].as_array().unwrap().last().unwrap()["typedConfig"];
    assert_eq!(config["statPrefix"], "outbound|6379||cache.db.svc.cluster.local");
    assert_eq!(config["latencyInMicros"], true);
    assert_eq!(config["settings"]["opTimeout"], "5s");
    assert_eq!(config["prefixRoutes"]["catchAllRoute"]["cluster"], "outbound|6379||cache.db.svc.cluster.local");
    assert_eq!(got["clusters"]["outbound|6379||cache.db.svc.cluster.local"]["lbPolicy"], "MAGLEV");
    let router = served_with("router", objects, "", "db", json!({"istio": "ingressgateway"}), "10.1.9.9", &on);
    for (name, kind) in [
        ("outbound|6379||cache.db.svc.cluster.local", "EDS"),
        ("outbound|6380||cache-headless.db.svc.cluster.local", "EDS"),
    ] {
        let c = &router["clusters"][name];
        assert_eq!((c["lbPolicy"].clone(), c["type"].clone()), (json!("MAGLEV"), json!(kind)), "{name}: {c}");
    }
    // PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES: a sidecar's too.
    let eds = [("PGV", "1"), ("PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES", "true")];
    let got = served_with("sidecar", objects, "", "db", json!({"app": "client"}), "10.1.3.2", &eds);
    assert_eq!(got["pgv_errors"], json!([]), "{got}");
    let headless = &got["clusters"]["outbound|6380||cache-headless.db.svc.cluster.local"];
    assert_eq!((headless["type"].clone(), headless["lbPolicy"].clone()), (json!("EDS"), json!("LEAST_REQUEST")));
}

/// `PILOT_HTTP10` and `PILOT_SIDECAR_USE_REMOTE_ADDRESS` as istiod's
/// listener builders read them (Envoy's field rules checked): every HTTP
/// manager accepts HTTP/1.0 (sidecars' outbound and inbound, gateways'),
/// plaintext HTTP is told by `http/1.0` too (`plaintextHTTPALPNs`), and
/// sidecars' outbound managers use the remote address (inbound ones never,
/// gateways' always).
#[test]
fn http10_and_the_remote_address_are_served_as_istiod_serves_them() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.4.10
  selector: {app: web}
  ports: [{name: http, port: 80}, {name: web, port: 8080}]
";
    let env = [("PGV", "1"), ("PILOT_HTTP10", "true"), ("PILOT_SIDECAR_USE_REMOTE_ADDRESS", "true")];
    let managers = |got: &Value, listener: &str| -> Vec<(Value, Value)> {
        let l = &got["listeners"][listener];
        l["filterChains"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(l.get("defaultFilterChain"))
            .flat_map(|c| c["filters"].as_array().into_iter().flatten())
            .filter(|f| f["name"] == "envoy.filters.network.http_connection_manager")
            .map(|f| (f["typedConfig"]["httpProtocolOptions"].clone(), f["typedConfig"]["useRemoteAddress"].clone()))
            .collect()
    };
    for (switches, http10, remote) in
        [(&env[..], json!({"acceptHttp10": true}), json!(true)), (&env[..1], json!(null), json!(false))]
    {
        let got = served_with("sidecar", objects, "", "shop", json!({"app": "web"}), "10.1.4.1", switches);
        assert_eq!(got["pgv_errors"], json!([]), "{got}");
        let outbound = managers(&got, "0.0.0.0_80");
        assert!(
            !outbound.is_empty() && outbound.iter().all(|m| *m == (http10.clone(), remote.clone())),
            "{outbound:?}"
        );
        let inbound = managers(&got, "virtualInbound");
        assert!(!inbound.is_empty() && inbound.iter().all(|m| m.0 == http10 && m.1 != json!(true)), "{inbound:?}");
        let plaintext: Vec<Value> = got["listeners"]["virtualInbound"]["filterChains"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["filterChainMatch"]["transportProtocol"] == "raw_buffer")
            .map(|c| c["filterChainMatch"]["applicationProtocols"].clone())
            .filter(|a| !a.is_null())
            .collect();
        let want = if http10.is_null() { json!(["http/1.1", "h2c"]) } else { json!(["http/1.0", "http/1.1", "h2c"]) };
        assert!(!plaintext.is_empty() && plaintext.iter().all(|a| *a == want), "{plaintext:?}");
        let sniffed = got["listeners"]["10.96.4.10_8080"]["filterChains"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| !c["filterChainMatch"]["applicationProtocols"].is_null())
            .map(|c| c["filterChainMatch"]["applicationProtocols"].clone());
        assert_eq!(sniffed, Some(want), "the outbound sniffed port");
    }
    // A proxy's HTTP10 metadata (istiod's enableHTTP10): its managers
    // accept HTTP/1.0, outbound and inbound; sniffing does not take
    // `http/1.0` (PILOT_HTTP10's alone).
    let asked = [("PGV", "1"), ("NODE_META_HTTP10", "1")];
    let got = served_with("sidecar", objects, "", "shop", json!({"app": "web"}), "10.1.4.1", &asked);
    assert_eq!(got["pgv_errors"], json!([]), "{got}");
    for listener in ["0.0.0.0_80", "virtualInbound"] {
        let m = managers(&got, listener);
        assert!(!m.is_empty() && m.iter().all(|m| m.0 == json!({"acceptHttp10": true})), "{listener}: {m:?}");
    }
    let plaintext = got["listeners"]["virtualInbound"]["filterChains"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["filterChainMatch"]["transportProtocol"] == "raw_buffer")
        .filter_map(|c| c["filterChainMatch"]["applicationProtocols"].as_array().cloned())
        .collect::<Vec<_>>();
    assert!(!plaintext.is_empty() && plaintext.iter().all(|a| !a.contains(&json!("http/1.0"))), "{plaintext:?}");
    let gateway = [
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: shop}\n",
        "spec:\n  selector: {istio: ingressgateway}\n  servers: [{port: {number: 8080, name: http, protocol: HTTP}, hosts: ['*']}]\n",
    ]
    .concat();
    let objects = format!("{objects}---\n{gateway}");
    let router = served_with("router", &objects, "", "shop", json!({"istio": "ingressgateway"}), "10.1.9.9", &env);
    assert_eq!(router["pgv_errors"], json!([]), "{router}");
    let gw = managers(&router, "0.0.0.0_8080");
    assert_eq!(gw, [(json!({"acceptHttp10": true}), json!(true))]);
    let router = served_with("router", &objects, "", "shop", json!({"istio": "ingressgateway"}), "10.1.9.9", &asked);
    assert_eq!(managers(&router, "0.0.0.0_8080"), [(json!({"acceptHttp10": true}), json!(true))], "HTTP10 metadata");
}

/// `PILOT_ENABLE_METADATA_EXCHANGE`, `PILOT_ENABLE_ALPN_FILTER` and
/// `PILOT_MX_ADDITIONAL_LABELS` as istiod's filters read them (Envoy's
/// field rules checked): off, no metadata exchange anywhere (HTTP,
/// network, upstream) and no `istio-peer-exchange` ALPN, no `istio.alpn`;
/// the additional labels, sorted and once, in every exchange's config.
#[test]
fn metadata_exchange_switches_are_served_as_istiod_serves_them() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.5.10
  selector: {app: web}
  ports: [{name: http, port: 80}, {name: tcp-db, port: 5432}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: shop, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 80}, {name: tcp-db, port: 5432}]
endpoints:
- addresses: [10.1.5.1]
  targetRef: {kind: Pod, name: web-a, namespace: shop}
---
apiVersion: v1
kind: Pod
metadata: {name: web-a, namespace: shop, labels: {app: web, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: web}
status: {podIP: 10.1.5.1}
";
    let served = |env: &[(&str, &str)]| {
        let got = served_with("sidecar", objects, "", "shop", json!({"app": "web"}), "10.1.5.1", env);
        assert_eq!(got["pgv_errors"], json!([]), "{got}");
        got
    };
    let alpn = |got: &Value| {
        let c = &got["clusters"]["outbound|5432||web.shop.svc.cluster.local"];
        let m = c["transportSocketMatches"].as_array().unwrap().iter().find(|m| m["name"] == "tlsMode-istio").unwrap();
        m["transportSocket"]["typedConfig"]["commonTlsContext"]["alpnProtocols"].clone()
    };
    let on = served(&[("PGV", "1"), ("PILOT_MX_ADDITIONAL_LABELS", "team, app.kubernetes.io/part-of,team")]);
    let text = on.to_string();
    assert!(text.contains("istio.metadata_exchange") && text.contains("istio.alpn"));
    assert_eq!(alpn(&on), json!(["istio-peer-exchange", "istio"]));
    let labels = json!(["app.kubernetes.io/part-of", "team"]);
    let cluster_mx = &on["clusters"]["outbound|5432||web.shop.svc.cluster.local"]["filters"][0];
    assert_eq!(cluster_mx["typedConfig"]["value"]["additional_labels"], labels, "{cluster_mx}");
    let exchanges: Vec<&Value> = on["listeners"]["virtualInbound"]["filterChains"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["filters"].as_array().unwrap())
        .filter(|f| f["name"] == "istio.metadata_exchange")
        .collect();
    assert!(
        !exchanges.is_empty() && exchanges.iter().all(|f| f["typedConfig"]["value"]["additional_labels"] == labels)
    );

    let off =
        served(&[("PGV", "1"), ("PILOT_ENABLE_METADATA_EXCHANGE", "false"), ("PILOT_ENABLE_ALPN_FILTER", "false")]);
    let text = off.to_string();
    assert!(!text.contains("istio.metadata_exchange"), "no exchange left");
    assert!(!text.contains("istio.alpn"), "no ALPN filter left");
    assert!(!text.contains("istio-peer-exchange\",\"h2\""), "inbound TCP mTLS without the exchange's ALPN");
    assert_eq!(alpn(&off), json!(["istio"]));
}

/// A gateway's HTTP managers as istiod's `buildHTTPConnectionManager`
/// builds them for the Gateway class (Envoy's field rules checked):
/// metadata exchange first, gRPC stats, the ALPN override, fault, CORS,
/// the stats filter (client metrics, the host header not trusted:
/// `disableHostHeaderFallback`), the router; and the access log, so that
/// gateways report `istio_requests_total` and log as istiod's do; and its
/// TCP servers' chains, with the stats filter and the access log too.
#[test]
fn a_gateways_managers_and_tcp_chains_report_metrics_and_logs() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.6.10
  selector: {app: web}
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  selector: {istio: ingressgateway}
  servers:
  - {port: {number: 8080, name: http, protocol: HTTP}, hosts: ['*']}
  - {port: {number: 27017, name: mongo, protocol: MONGO}, hosts: ['*']}
  - {port: {number: 9443, name: tls-mesh, protocol: TLS}, hosts: ['*'], tls: {mode: ISTIO_MUTUAL}}
  - {port: {number: 9000, name: tcp-split, protocol: TCP}, hosts: ['*']}
  - {port: {number: 15443, name: tls-auto, protocol: TLS}, hosts: ['*.local'], tls: {mode: AUTO_PASSTHROUGH}}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  clusterIP: 10.96.6.11
  selector: {app: db}
  ports: [{name: mongo, port: 27017}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: shop}
spec:
  hosts: ['*']
  gateways: [gw]
  tcp:
  - match: [{port: 27017}]
    route: [{destination: {host: db.shop.svc.cluster.local, port: {number: 27017}}}]
  - match: [{port: 9443}]
    route: [{destination: {host: db.shop.svc.cluster.local, port: {number: 27017}}}]
  - match: [{port: 9000}]
    route:
    - {destination: {host: db.shop.svc.cluster.local, port: {number: 27017}}, weight: 100}
    - {destination: {host: web.shop.svc.cluster.local, port: {number: 80}}, weight: 0}
";
    let mesh = "defaultProviders: {metrics: [prometheus]}\naccessLogFile: /dev/stdout\n";
    let got =
        served_with("router", objects, mesh, "shop", json!({"istio": "ingressgateway"}), "10.1.9.9", &[("PGV", "1")]);
    assert_eq!(got["pgv_errors"], json!([]), "{got}");
    let hcm = got["listeners"]["0.0.0.0_8080"]["filterChains"][0]["filters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "envoy.filters.network.http_connection_manager")
        .map(|f| f["typedConfig"].clone())
        .unwrap_or_else(|| panic!("{got}"));
    let names: Vec<&str> = hcm["httpFilters"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "istio.metadata_exchange",
            "envoy.filters.http.grpc_stats",
            "istio.alpn",
            "envoy.filters.http.fault",
            "envoy.filters.http.cors",
            "istio.stats",
            "envoy.filters.http.router"
        ],
        "{hcm}"
    );
    let stats = &hcm["httpFilters"][5]["typedConfig"];
    assert_eq!(stats["disableHostHeaderFallback"], true, "{stats}");
    assert_eq!(hcm["accessLog"][0]["typedConfig"]["path"], "/dev/stdout", "{hcm}");
    // TCP servers' chains (buildOutboundNetworkFilters, class Gateway):
    // metadata exchange on the ISTIO_MUTUAL one, the stats filter, a MONGO
    // server's mongo_proxy, the tcp_proxy with the access log.
    for (listener, want) in [
        ("0.0.0.0_27017", vec!["istio.stats", "envoy.filters.network.mongo_proxy", "envoy.filters.network.tcp_proxy"]),
        ("0.0.0.0_9443", vec!["istio.metadata_exchange", "istio.stats", "envoy.filters.network.tcp_proxy"]),
    ] {
        let filters = got["listeners"][listener]["filterChains"][0]["filters"].as_array().cloned().unwrap_or_default();
        let names: Vec<&str> = filters.iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, want, "{listener}: {}", got["listeners"][listener]);
        let tcp = &filters.last().unwrap()["typedConfig"];
        assert_eq!(tcp["accessLog"][0]["typedConfig"]["path"], "/dev/stdout", "{tcp}");
        assert_eq!(tcp["cluster"], "outbound|27017||db.shop.svc.cluster.local", "{tcp}");
    }
    // A weighted route: stat prefix `<VirtualService>.<namespace>`, the
    // weight-0 destination left out (buildOutboundNetworkFiltersWithWeightedClusters).
    let split = &got["listeners"]["0.0.0.0_9000"]["filterChains"][0]["filters"];
    let tcp = &split.as_array().and_then(|f| f.last()).unwrap_or_else(|| panic!("{split}"))["typedConfig"];
    assert_eq!(tcp["statPrefix"], "db.shop", "{tcp}");
    assert_eq!(
        tcp["weightedClusters"]["clusters"],
        json!([{"name": "outbound|27017||db.shop.svc.cluster.local", "weight": 100}])
    );
    // AUTO_PASSTHROUGH chains: no authorization, the stats filter and the
    // access log (builtAutoPassthroughFilterChains).
    let auto = got["listeners"]["0.0.0.0_15443"]["filterChains"].as_array().cloned().unwrap_or_default();
    assert!(!auto.is_empty(), "{}", got["listeners"]["0.0.0.0_15443"]);
    for chain in &auto {
        let names: Vec<&str> =
            chain["filters"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["istio.stats", "envoy.filters.network.tcp_proxy"], "{chain}");
        assert_eq!(chain["filters"][1]["typedConfig"]["accessLog"][0]["typedConfig"]["path"], "/dev/stdout", "{chain}");
    }
}

/// `ISTIO_DUAL_STACK` as istiod serves a dual-stack sidecar (`INSTANCE_IPS`
/// of both families), through grpcio with Envoy's field rules: the
/// virtual listeners on `0.0.0.0` and `::`, a dual-stack Service's one
/// listener on its IPv4 cluster IP and its IPv6 one, the HTTP wildcard
/// listener on `::` too, inbound traffic sent from 127.0.0.6 and ::6, DNS
/// clusters resolving both families, and the pod's endpoint at both of
/// its IPs (upstream `TestInboundClustersPassThroughBindIPs`,
/// `TestClusterDnsLookupFamily`, `TestUpdateEndpointCacheForSliceWithMultiAddrs`
/// cover the pieces; `family/tests.rs` ports them).
#[test]
fn a_dual_stack_sidecar_is_served_both_families() {
    let objects = "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: default}\n\
        spec: {clusterIP: 10.0.0.1, clusterIPs: [10.0.0.1, 'fd00:10::1'], ports: [{port: 9000, name: tcp}], selector: {app: reviews}}\n---\n\
        apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\n\
        spec: {clusterIP: 10.0.0.2, ports: [{port: 80, name: http}], selector: {app: web}}\n---\n\
        apiVersion: v1\nkind: Pod\nmetadata: {name: reviews-1, namespace: default, labels: {app: reviews}}\n\
        spec: {containers: [{name: app}]}\nstatus: {podIP: 10.1.0.5, podIPs: [{ip: 10.1.0.5}, {ip: 'fd00:1::5'}]}\n---\n\
        apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: reviews-v4, namespace: default, labels: {kubernetes.io/service-name: reviews}}\n\
        addressType: IPv4\nports: [{name: tcp, port: 9000}]\n\
        endpoints: [{addresses: [10.1.0.5], targetRef: {kind: Pod, name: reviews-1, namespace: default}}]\n---\n\
        apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: reviews-v6, namespace: default, labels: {kubernetes.io/service-name: reviews}}\n\
        addressType: IPv6\nports: [{name: tcp, port: 9000}]\n\
        endpoints: [{addresses: ['fd00:1::5'], targetRef: {kind: Pod, name: reviews-1, namespace: default}}]\n---\n\
        apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: api, namespace: default}\n\
        spec: {hosts: [api.example.com], ports: [{number: 443, name: tls, protocol: TLS}], resolution: DNS}\n";
    let labels = json!({"app": "reviews"});
    let env = [("ISTIO_DUAL_STACK", "true"), ("PGV", "1"), ("EDS", "1")];
    let got = served_with("sidecar", objects, "", "default", labels.clone(), "10.1.0.5,fd00:1::5", &env);
    assert_eq!(got["pgv_errors"], json!([]), "{}", got["pgv_errors"]);
    let socket = |address: &str, port: u16| json!({"socketAddress": {"address": address, "portValue": port}});
    let additional = |address: &str, port: u16| json!([{"address": socket(address, port)}]);
    for (name, port) in [("virtualInbound", 15006), ("virtualOutbound", 15001)] {
        let l = &got["listeners"][name];
        assert_eq!(l["address"], socket("0.0.0.0", port), "{name}");
        assert_eq!(l["additionalAddresses"], additional("::", port), "{name}");
    }
    let names: Vec<&String> = got["listeners"].as_object().unwrap().keys().collect();
    assert!(!names.iter().any(|n| n.starts_with("fd00:10::1")), "one listener of reviews: {names:?}");
    assert_eq!(got["listeners"]["10.0.0.1_9000"]["additionalAddresses"], additional("fd00:10::1", 9000));
    assert_eq!(got["listeners"]["0.0.0.0_80"]["additionalAddresses"], additional("::", 80));
    let bind = &got["clusters"]["inbound|9000||"]["upstreamBindConfig"];
    assert_eq!(bind["sourceAddress"]["address"], "127.0.0.6", "{bind}");
    assert_eq!(bind["extraSourceAddresses"][0]["address"]["address"], "::6", "{bind}");
    let dns = &got["clusters"]["outbound|443||api.example.com"];
    assert_eq!(dns["dnsLookupFamily"], "ALL", "{dns}");
    assert_eq!(dns["typedDnsResolverConfig"]["typedConfig"]["udpMaxQueries"], 100, "{dns}");
    let eds = &got["endpoints"]["outbound|9000||reviews.default.svc.cluster.local"];
    let lb = &eds["endpoints"][0]["lbEndpoints"];
    assert_eq!(lb.as_array().map(Vec::len), Some(1), "one endpoint at both IPs: {eds}");
    assert_eq!(lb[0]["endpoint"]["address"], socket("10.1.0.5", 9000));
    assert_eq!(lb[0]["endpoint"]["additionalAddresses"], additional("fd00:1::5", 9000));
    // An IPv4 sidecar of the same mesh: none of it.
    let got = served_with("sidecar", objects, "", "default", labels, "10.1.0.5", &env);
    assert_eq!(got["listeners"]["virtualInbound"].get("additionalAddresses"), None);
    assert_eq!(got["listeners"]["0.0.0.0_80"].get("additionalAddresses"), None);
    assert_eq!(got["clusters"]["outbound|443||api.example.com"]["dnsLookupFamily"], "V4_ONLY");
}

/// istiod's telemetry metadata (`addTelemetryMetadata`,
/// `AppendLbEndpointMetadata`), through grpcio with Envoy's field rules:
/// clusters name their services (`istio.services`: host, name, namespace;
/// a ServiceEntry's name is its host), outbound and inbound; endpoints
/// their workload (`istio.workload`: the Deployment behind the Pod, its
/// namespace, canonical service and revision, the cluster). Off with
/// `PILOT_ENABLE_TELEMETRY_LABEL=false`. And the other `istio` keys:
/// `alpn_override` under TLS origination, `external` for a mesh-external
/// service.
#[test]
fn telemetry_metadata_is_served_as_istiod_serves_it() {
    let objects = "apiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: default}\n\
        spec: {clusterIP: 10.0.0.1, ports: [{port: 9080, name: http}], selector: {app: reviews}}\n---\n\
        apiVersion: v1\nkind: Pod\n\
        metadata: {name: reviews-v1-7d9c5-x2k4p, generateName: reviews-v1-7d9c5-, namespace: default, \
        labels: {app: reviews, version: v1, pod-template-hash: 7d9c5}, \
        ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: reviews-v1-7d9c5, controller: true, uid: u1}]}\n\
        spec: {containers: [{name: app}]}\nstatus: {podIP: 10.1.0.5}\n---\n\
        apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: reviews-1, namespace: default, labels: {kubernetes.io/service-name: reviews}}\n\
        addressType: IPv4\nports: [{name: http, port: 9080}]\n\
        endpoints: [{addresses: [10.1.0.5], targetRef: {kind: Pod, name: reviews-v1-7d9c5-x2k4p, namespace: default}}]\n---\n\
        apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: api, namespace: default}\n\
        spec: {hosts: [api.example.com], ports: [{number: 443, name: tls, protocol: TLS}], resolution: DNS}\n---\n\
        apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: api, namespace: default}\n\
        spec: {host: api.example.com, trafficPolicy: {tls: {mode: SIMPLE}}}\n";
    let labels = json!({"app": "reviews", "version": "v1"});
    let env = [("PGV", "1"), ("EDS", "1")];
    let got = served_with("sidecar", objects, "", "default", labels.clone(), "10.1.0.5", &env);
    assert_eq!(got["pgv_errors"], json!([]), "{}", got["pgv_errors"]);
    let services = |cluster: &Value| cluster["metadata"]["filterMetadata"]["istio"]["services"].clone();
    let reviews = json!([{"host": "reviews.default.svc.cluster.local", "name": "reviews", "namespace": "default"}]);
    assert_eq!(services(&got["clusters"]["outbound|9080||reviews.default.svc.cluster.local"]), reviews);
    assert_eq!(services(&got["clusters"]["inbound|9080||"]), reviews);
    let api = &got["clusters"]["outbound|443||api.example.com"];
    assert_eq!(services(api), json!([{"host": "api.example.com", "name": "api.example.com", "namespace": "default"}]));
    // TLS origination keeps the application's ALPN (AddALPNOverrideToMetadata);
    // a mesh-external service is marked for metadata exchange.
    let istio = &api["metadata"]["filterMetadata"]["istio"];
    assert_eq!((&istio["alpn_override"], &istio["external"]), (&json!("false"), &json!(true)), "{istio}");
    let reviews_md =
        &got["clusters"]["outbound|9080||reviews.default.svc.cluster.local"]["metadata"]["filterMetadata"]["istio"];
    assert_eq!((reviews_md.get("alpn_override"), reviews_md.get("external")), (None, None), "{reviews_md}");
    let workload = |lb: &Value| lb["metadata"]["filterMetadata"]["istio"]["workload"].clone();
    let eds = &got["endpoints"]["outbound|9080||reviews.default.svc.cluster.local"];
    assert_eq!(workload(&eds["endpoints"][0]["lbEndpoints"][0]), "reviews-v1;default;reviews;v1;Kubernetes", "{eds}");
    // A DNS ServiceEntry's endpoint is the entry's workload.
    let dns = &api["loadAssignment"]["endpoints"][0]["lbEndpoints"][0];
    assert_eq!(workload(dns), "api;default;api;;Kubernetes", "{dns}");
    let off = [("PGV", "1"), ("EDS", "1"), ("PILOT_ENABLE_TELEMETRY_LABEL", "false")];
    let got = served_with("sidecar", objects, "", "default", labels, "10.1.0.5", &off);
    assert_eq!(services(&got["clusters"]["outbound|9080||reviews.default.svc.cluster.local"]), Value::Null);
    let eds = &got["endpoints"]["outbound|9080||reviews.default.svc.cluster.local"];
    assert_eq!(workload(&eds["endpoints"][0]["lbEndpoints"][0]), Value::Null);
}

/// istiod's feature switches read in one place each, served (Envoy's
/// field rules checked), each against istiod's default:
/// `PILOT_ENABLE_ABSOLUTE_FQDN_VHOST_DOMAIN` (httproute.go
/// `GenerateAltVirtualHosts`: no `<fqdn>.` domain when off),
/// `ENABLE_LOCALITY_WEIGHTED_LB_CONFIG` (loadbalancer.go `ApplyToCluster`:
/// every outbound cluster weighs localities when on),
/// `ISTIO_ENABLE_IPV4_OUTBOUND_LISTENER_FOR_IPV6_CLUSTERS` (an IPv6
/// proxy's `virtualOutbound` also on 0.0.0.0), and
/// `ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY` (policyattachment.go
/// `ShouldAttachPolicy`: off, a Gateway API gateway's deployment takes no
/// policy without `targetRefs`; a sidecar still does; a policy attached to
/// the Gateway by `targetRefs` is the gateway's either way, never a
/// sidecar's).
#[test]
fn feature_switches_are_served_as_istiod_serves_them() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.5.10
  selector: {app: web}
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  selector: {gateway.networking.k8s.io/gateway-name: gw}
  servers: [{port: {number: 8080, name: http, protocol: HTTP}, hosts: ['*']}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-admin, namespace: shop}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: [/admin]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-debug, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  action: DENY
  rules: [{to: [{operation: {paths: [/debug]}}]}]
";
    let on = [
        ("PGV", "1"),
        ("PILOT_ENABLE_ABSOLUTE_FQDN_VHOST_DOMAIN", "false"),
        ("ENABLE_LOCALITY_WEIGHTED_LB_CONFIG", "true"),
        ("ISTIO_ENABLE_IPV4_OUTBOUND_LISTENER_FOR_IPV6_CLUSTERS", "true"),
        ("ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY", "false"),
    ];
    let rbac_names = |got: &Value, listener: &str| -> Vec<String> {
        got["listeners"][listener]["filterChains"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["filters"].as_array().into_iter().flatten())
            .filter(|f| f["name"] == "envoy.filters.network.http_connection_manager")
            .flat_map(|f| f["typedConfig"]["httpFilters"].as_array().cloned().unwrap_or_default())
            .filter(|f| f["name"] == "envoy.filters.http.rbac")
            .flat_map(|f| {
                f["typedConfig"]["rules"]["policies"].as_object().map(|p| p.keys().cloned().collect::<Vec<_>>())
            })
            .flatten()
            .collect()
    };
    for (env, switched) in [(&on[..], true), (&on[..1], false)] {
        let sidecar = served_with("sidecar", objects, "", "shop", json!({"app": "web"}), "10.1.5.1", env);
        assert_eq!(sidecar["pgv_errors"], json!([]), "{sidecar}");
        let domains = sidecar["routes"]["80"]["virtualHosts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "web.shop.svc.cluster.local:80")
            .map(|v| v["domains"].clone())
            .unwrap_or_else(|| panic!("{}", sidecar["routes"]["80"]));
        assert_eq!(domains.as_array().unwrap().contains(&json!("web.shop.svc.cluster.local.")), !switched, "{domains}");
        let cluster = &sidecar["clusters"]["outbound|80||web.shop.svc.cluster.local"];
        assert_eq!(cluster["commonLbConfig"]["localityWeightedLbConfig"].is_object(), switched, "{cluster}");
        // The sidecar takes the namespace's policy either way.
        let inbound = rbac_names(&sidecar, "virtualInbound");
        assert!(inbound.contains(&"ns[shop]-policy[deny-admin]-rule[0]".to_owned()), "{inbound:?}");
        // A policy attached to a Gateway is not a sidecar's (ShouldAttachPolicy).
        assert!(!inbound.iter().any(|p| p.contains("deny-debug")), "{inbound:?}");
        let v6 = served_with("sidecar", objects, "", "shop", json!({"app": "web"}), "fd00::5:1", env);
        let extra: Vec<Value> = v6["listeners"]["virtualOutbound"]["additionalAddresses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a["address"]["socketAddress"]["address"].clone())
            .collect();
        assert_eq!(
            extra,
            if switched { vec![json!("0.0.0.0")] } else { vec![] },
            "{}",
            v6["listeners"]["virtualOutbound"]
        );
        let labels = json!({"gateway.networking.k8s.io/gateway-name": "gw"});
        let router = served_with("router", objects, "", "shop", labels, "10.1.5.9", env);
        assert_eq!(router["pgv_errors"], json!([]), "{router}");
        let rbac = rbac_names(&router, "0.0.0.0_8080");
        // The policy attached to its Gateway by targetRefs, always; the
        // namespace-wide one only under the switch's default.
        assert!(rbac.contains(&"ns[shop]-policy[deny-debug]-rule[0]".to_owned()), "{rbac:?}");
        assert_eq!(rbac.contains(&"ns[shop]-policy[deny-admin]-rule[0]".to_owned()), !switched, "{rbac:?}");
    }
}

/// Three pods of one workload connect in turn (issue #40): the second
/// builds the shared part of each first response, the third is sent it.
/// What grpcio decodes is the same for all three, with the outbound and
/// inbound clusters a sidecar of the workload is served.
#[test]
fn pods_of_one_workload_are_served_the_shared_first_responses() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.10
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 9999}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  clusterIP: 10.96.0.11
  selector: {app: db}
  ports: [{name: tcp, port: 5432}]
";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("objects.yaml"), objects).unwrap();
    // One serving core: the three connections meet on it.
    let s = Server::start(dir.path(), &["--cores", "1"], &[], None);
    let got: Vec<Value> = ["10.1.2.3", "10.1.2.4", "10.1.2.5"]
        .iter()
        .map(|ip| {
            let node = json!({
                "id": format!("sidecar~{ip}~web-{ip}.shop~shop.svc.cluster.local"),
                "metadata": {"NAMESPACE": "shop", "ISTIO_VERSION": "1.28.0", "INSTANCE_IPS": ip, "LABELS": {"app": "web"}},
            });
            fetch(&s, &node, &[])
        })
        .collect();
    for g in &got {
        for name in
            ["outbound|80||web.shop.svc.cluster.local", "outbound|5432||db.shop.svc.cluster.local", "inbound|9999||"]
        {
            assert!(g["clusters"].get(name).is_some(), "{name} missing: {}", g["clusters"]);
        }
        assert_eq!(g["clusters"], got[0]["clusters"]);
        assert_eq!(g["listeners"], got[0]["listeners"]);
    }
    let (shared, stats) = first_shared(&s);
    assert!(shared >= 2, "the third pod's CDS and LDS come from shared parts: {stats}");
}

/// First responses the server's cores sent from shared parts
/// (`/debug/stats`, every core's `cache.first_shared`), with the stats.
fn first_shared(s: &Server) -> (u64, Value) {
    let stats: Value = serde_json::from_str(&crate::server::get(s.http, "/debug/stats").unwrap().1).unwrap();
    let shared = stats.as_array().unwrap().iter().map(|c| c["cache"]["first_shared"].as_u64().unwrap()).sum();
    (shared, stats)
}

/// Pods of two workloads connect to one server in turn (issue #40): each
/// is served, over the wire, what a server that never saw the others
/// serves it. The second and third pod of `web` take the shared first
/// responses and the inbound resources built for the first; one of them
/// does not capture DNS, so the listener of an address allocated to a
/// ServiceEntry host is the capturing pods' alone. The `api` pods' Sidecar
/// ingress is bound to `0.0.0.0` but sends to the pod's own address
/// (`defaultEndpoint: 0.0.0.0:<port>`), so their inbound clusters are each
/// pod's own. What each pod must get is what it gets alone; sharing must
/// not change it.
#[test]
fn each_pod_is_served_what_it_is_served_alone() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.10
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 9999}]
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec:
  clusterIP: 10.96.0.12
  selector: {app: api}
  ports: [{name: http, port: 81, targetPort: 8081}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: api, namespace: shop}
spec:
  workloadSelector: {labels: {app: api}}
  ingress:
  - port: {number: 8081, protocol: HTTP, name: http}
    bind: 0.0.0.0
    defaultEndpoint: 0.0.0.0:8081
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: shop}
spec:
  hosts: [ext.example.com]
  ports: [{number: 9000, name: tcp, protocol: TCP}]
  resolution: DNS
status:
  addresses: [{host: ext.example.com, value: 240.240.0.5}]
";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("objects.yaml"), objects).unwrap();
    let pod = |app: &str, ip: &str, capture: bool| {
        let mut node = json!({
            "id": format!("sidecar~{ip}~{app}-{ip}.shop~shop.svc.cluster.local"),
            "metadata": {"NAMESPACE": "shop", "ISTIO_VERSION": "1.28.0", "INSTANCE_IPS": ip,
                         "WORKLOAD_NAME": app, "LABELS": {"app": app}},
        });
        if capture {
            node["metadata"]["DNS_CAPTURE"] = json!("true");
        }
        node
    };
    let pods = [
        pod("web", "10.1.0.1", true),
        pod("web", "10.1.0.2", false),
        pod("web", "10.1.0.3", true),
        pod("api", "10.2.0.1", false),
        pod("api", "10.2.0.2", false),
    ];
    // One serving core: every pod meets the others' cache.
    let shared = Server::start(dir.path(), &["--cores", "1"], &[], None);
    let together: Vec<Value> = pods.iter().map(|p| fetch(&shared, p, &[])).collect();
    let (taken, stats) = first_shared(&shared);
    assert!(taken >= 2, "later pods of a workload take shared first responses: {stats}");
    drop(shared);
    for (p, got) in pods.iter().zip(&together) {
        let alone = Server::start(dir.path(), &["--cores", "1"], &[], None);
        let want = fetch(&alone, p, &[]);
        for part in ["clusters", "listeners", "routes"] {
            assert_eq!(got[part], want[part], "{part} of {} differ from what it is served alone", p["id"]);
        }
    }
    // The cases the test is for are there (else it could pass on a mesh
    // where nothing differs between pods), as istiod serves them: an
    // allocated address is used by a proxy that captures DNS
    // (pilot/pkg/model/service.go `nodeUsesAutoallocatedIPs`, with
    // PILOT_ENABLE_IP_AUTOALLOCATE on), and `0.0.0.0` in a Sidecar
    // ingress's defaultEndpoint is the proxy's own IPv4 address
    // (pilot/pkg/networking/core/cluster.go, `model.PodIPAddressPrefix`).
    let listeners = |i: usize| together[i]["listeners"].as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    let allocated = "240.240.0.5_9000".to_owned();
    assert!(listeners(0).contains(&allocated) && listeners(2).contains(&allocated), "{:?}", listeners(0));
    assert!(!listeners(1).contains(&allocated), "a pod that does not capture DNS: {:?}", listeners(1));
    let endpoint = |i: usize| together[i]["clusters"]["inbound|8081||"].to_string();
    assert!(endpoint(3).contains("10.2.0.1") && endpoint(4).contains("10.2.0.2"), "{}\n{}", endpoint(3), endpoint(4));
}
