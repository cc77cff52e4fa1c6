//! EnvoyFilters on what is served (issue #34): each case's objects go to
//! the binary through `--configDir`, and what one proxy is served is
//! fetched by grpcio and decoded with the upstream `xds-protos`
//! descriptors (`tests/py/ads_fetch.py`): every patched resource decodes
//! with Envoy's own types, including extensions istiod-rs never builds.

use serde_json::{Value, json};

use crate::served::served_with;

/// What a sidecar of `namespace` with `labels` at `ip` is served, every
/// resource checked with Envoy's own field rules (protoc-gen-validate,
/// the typed configs inside unpacked): none may fail them.
fn served(objects: &str, mesh: &str, namespace: &str, labels: Value, ip: &str) -> Value {
    let got = served_with("sidecar", objects, mesh, namespace, labels, ip, &[("PGV", "1")]);
    assert_eq!(got["pgv_errors"], json!([]), "Envoy would reject what is served");
    got
}

const MESH: &str = "\
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
metadata: {name: api, namespace: shop}
spec:
  clusterIP: 10.96.0.12
  selector: {app: api}
  ports: [{name: http, port: 9090}]
";

/// CLUSTER patches (istiod's cluster_patch.go): a MERGE of a connection
/// pool and timeout into one service's cluster, a REMOVE of another, an
/// ADD of an aggregate cluster (an extension istiod-rs never builds,
/// kept whole), from the root namespace for every proxy; and a MERGE a
/// workload selector limits to `app: client`.
#[test]
fn cluster_patches_are_served_as_istiod_applies_them() {
    let objects = format!(
        "{MESH}---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: mesh-clusters, namespace: istio-system}}
spec:
  configPatches:
  - applyTo: CLUSTER
    match: {{context: SIDECAR_OUTBOUND, cluster: {{service: web.shop.svc.cluster.local, portNumber: 80}}}}
    patch:
      operation: MERGE
      value:
        connect_timeout: 3s
        circuit_breakers: {{thresholds: [{{max_connections: 7, max_pending_requests: 9}}]}}
  - applyTo: CLUSTER
    match: {{context: SIDECAR_OUTBOUND, cluster: {{name: outbound|5432||db.shop.svc.cluster.local}}}}
    patch: {{operation: REMOVE}}
  - applyTo: CLUSTER
    match: {{context: SIDECAR_OUTBOUND}}
    patch:
      operation: ADD
      value:
        name: web-aggregate
        connect_timeout: 1s
        lb_policy: CLUSTER_PROVIDED
        cluster_type:
          name: envoy.clusters.aggregate
          typed_config:
            '@type': type.googleapis.com/envoy.extensions.clusters.aggregate.v3.ClusterConfig
            clusters: [outbound|80||web.shop.svc.cluster.local]
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: client-only, namespace: shop}}
spec:
  workloadSelector: {{labels: {{app: client}}}}
  configPatches:
  - applyTo: CLUSTER
    match: {{context: SIDECAR_OUTBOUND, cluster: {{service: web.shop.svc.cluster.local}}}}
    patch: {{operation: MERGE, value: {{per_connection_buffer_limit_bytes: 4096}}}}
"
    );
    let client = served(&objects, "", "shop", json!({"app": "client"}), "10.1.0.5");
    let clusters = &client["clusters"];
    let web = &clusters["outbound|80||web.shop.svc.cluster.local"];
    assert_eq!(web["connectTimeout"], "3s", "{web}");
    let thresholds = &web["circuitBreakers"]["thresholds"];
    let added: Vec<&Value> = thresholds.as_array().unwrap().iter().filter(|t| t["maxConnections"] == 7).collect();
    assert_eq!(added.len(), 1, "the patch's thresholds appended to istiod-rs's own: {thresholds}");
    assert_eq!(added[0]["maxPendingRequests"], 9);
    assert_eq!(web["perConnectionBufferLimitBytes"], 4096, "the selected workload's own patch");
    assert_eq!(web["type"], "EDS", "the rest of the cluster is kept: {web}");
    assert!(clusters.get("outbound|5432||db.shop.svc.cluster.local").is_none(), "removed: {clusters}");
    let aggregate = &clusters["web-aggregate"];
    assert_eq!(aggregate["clusterType"]["typedConfig"]["clusters"], json!(["outbound|80||web.shop.svc.cluster.local"]));
    assert_eq!(
        aggregate["clusterType"]["typedConfig"]["@type"],
        "type.googleapis.com/envoy.extensions.clusters.aggregate.v3.ClusterConfig"
    );
    // Another workload: the mesh-wide patches only.
    let other = served(&objects, "", "shop", json!({"app": "other"}), "10.1.0.6");
    let web = &other["clusters"]["outbound|80||web.shop.svc.cluster.local"];
    assert_eq!(web["connectTimeout"], "3s");
    assert!(web.get("perConnectionBufferLimitBytes").is_none(), "not selected: {web}");
    // A namespace the filter's selector-less patches do not reach still
    // gets the root namespace's.
    let elsewhere = served(&objects, "", "other", json!({"app": "client"}), "10.1.0.7");
    assert!(elsewhere["clusters"].get("web-aggregate").is_some());
    let web = &elsewhere["clusters"]["outbound|80||web.shop.svc.cluster.local"];
    assert!(web.get("perConnectionBufferLimitBytes").is_none(), "shop's filter stays in shop: {web}");
}

/// The HTTP filters of the inbound chains for `port` of `listeners`'
/// `virtualInbound`, by chain.
fn inbound_http_filters(got: &Value, port: u64) -> Vec<Vec<Value>> {
    let l = &got["listeners"]["virtualInbound"];
    l["filterChains"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["filterChainMatch"]["destinationPort"] == port)
        .flat_map(|c| c["filters"].as_array().unwrap().clone())
        .filter(|f| f["name"] == "envoy.filters.network.http_connection_manager")
        .map(|f| f["typedConfig"]["httpFilters"].as_array().unwrap().clone())
        .collect()
}

/// HTTP_FILTER patches on the inbound side (istiod's listener_patch.go):
/// a Lua filter inserted before the router for every workload of the
/// namespace, and a local rate limit for one workload's port only, both
/// served whole (configs the project's own types do not carry); the
/// outbound side untouched.
#[test]
fn inbound_http_filters_are_inserted_as_istiod_inserts_them() {
    let objects = format!(
        "{MESH}---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: lua, namespace: shop}}
spec:
  configPatches:
  - applyTo: HTTP_FILTER
    match:
      context: SIDECAR_INBOUND
      listener:
        filterChain:
          filter:
            name: envoy.filters.network.http_connection_manager
            subFilter: {{name: envoy.filters.http.router}}
    patch:
      operation: INSERT_BEFORE
      value:
        name: envoy.filters.http.lua
        typed_config:
          '@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
          default_source_code: {{inline_string: 'function envoy_on_request(h) h:headers():add(\"x-lua\", \"1\") end'}}
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: ratelimit, namespace: shop}}
spec:
  workloadSelector: {{labels: {{app: web}}}}
  configPatches:
  - applyTo: HTTP_FILTER
    match:
      context: SIDECAR_INBOUND
      listener:
        portNumber: 8080
        filterChain: {{filter: {{name: envoy.filters.network.http_connection_manager}}}}
    patch:
      operation: INSERT_FIRST
      value:
        name: envoy.filters.http.local_ratelimit
        typed_config:
          '@type': type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
          stat_prefix: http_local_rate_limiter
          token_bucket: {{max_tokens: 10, tokens_per_fill: 10, fill_interval: 60s}}
"
    );
    let web = served(&objects, "", "shop", json!({"app": "web"}), "10.1.0.8");
    let chains = inbound_http_filters(&web, 8080);
    assert!(!chains.is_empty(), "{}", web["listeners"]["virtualInbound"]);
    for filters in &chains {
        let names: Vec<&str> = filters.iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names.first(), Some(&"envoy.filters.http.local_ratelimit"), "{names:?}");
        let lua = names.iter().position(|n| *n == "envoy.filters.http.lua").expect("the Lua filter");
        assert_eq!(names[lua + 1], "envoy.filters.http.router", "before the router: {names:?}");
        assert_eq!(filters[0]["typedConfig"]["tokenBucket"]["maxTokens"], 10);
        assert!(filters[lua]["typedConfig"]["defaultSourceCode"]["inlineString"].as_str().unwrap().contains("x-lua"));
    }
    // Another workload of the namespace: Lua, no rate limit.
    let api = served(&objects, "", "shop", json!({"app": "api"}), "10.1.0.9");
    let chains = inbound_http_filters(&api, 9090);
    assert!(!chains.is_empty(), "{}", api["listeners"]["virtualInbound"]);
    for filters in &chains {
        assert!(filters.iter().any(|f| f["name"] == "envoy.filters.http.lua"));
        assert!(!filters.iter().any(|f| f["name"] == "envoy.filters.http.local_ratelimit"));
    }
    // The outbound side: nothing inserted.
    let outbound = web["listeners"]["0.0.0.0_80"].to_string();
    assert!(!outbound.contains("envoy.filters.http.lua"), "{outbound}");
}

/// Route patches (istiod's rc_patch.go) on a sidecar's outbound route
/// configuration `80`: an HTTP_ROUTE REMOVE of the route a VirtualService
/// names `legacy`, a VIRTUAL_HOST MERGE adding a response header to one
/// virtual host, and an HTTP_ROUTE INSERT_FIRST of a direct response.
#[test]
fn route_patches_are_served_as_istiod_applies_them() {
    let objects = format!(
        "{MESH}---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: shop}}
spec:
  hosts: [web.shop.svc.cluster.local]
  http:
  - name: legacy
    match: [{{uri: {{prefix: /old}}}}]
    route: [{{destination: {{host: web.shop.svc.cluster.local}}}}]
  - name: default
    route: [{{destination: {{host: web.shop.svc.cluster.local}}}}]
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: routes, namespace: istio-system}}
spec:
  configPatches:
  - applyTo: HTTP_ROUTE
    match:
      context: SIDECAR_OUTBOUND
      routeConfiguration:
        portNumber: 80
        vhost: {{name: web.shop.svc.cluster.local:80, route: {{name: legacy}}}}
    patch: {{operation: REMOVE}}
  - applyTo: VIRTUAL_HOST
    match:
      context: SIDECAR_OUTBOUND
      routeConfiguration: {{vhost: {{name: web.shop.svc.cluster.local:80}}}}
    patch:
      operation: MERGE
      value:
        response_headers_to_add: [{{header: {{key: x-patched, value: '1'}}}}]
  - applyTo: HTTP_ROUTE
    match:
      context: SIDECAR_OUTBOUND
      routeConfiguration: {{portNumber: 80, vhost: {{name: web.shop.svc.cluster.local:80}}}}
    patch:
      operation: INSERT_FIRST
      value:
        name: maintenance
        match: {{prefix: /maintenance}}
        direct_response: {{status: 503}}
"
    );
    let got = served(&objects, "", "shop", json!({"app": "client"}), "10.1.0.5");
    let rc = &got["routes"]["80"];
    let vhosts = rc["virtualHosts"].as_array().unwrap();
    let web = vhosts.iter().find(|v| v["name"] == "web.shop.svc.cluster.local:80").expect("web's virtual host");
    let names: Vec<&str> = web["routes"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap_or("")).collect();
    assert_eq!(names, ["maintenance", "default"], "{web}");
    assert_eq!(web["routes"][0]["directResponse"]["status"], 503);
    assert_eq!(web["responseHeadersToAdd"][0]["header"]["key"], "x-patched", "{web}");
    for other in vhosts.iter().filter(|v| v["name"] != "web.shop.svc.cluster.local:80") {
        assert!(other.get("responseHeadersToAdd").is_none(), "only the matched virtual host: {other}");
    }
}

/// The field-rule check of these tests can fail: a patch istiod accepts
/// and applies but Envoy would reject (a negative connect timeout) is
/// served as istiod serves it, and the check names it.
#[test]
fn the_envoy_field_rule_check_can_fail() {
    let objects = format!(
        "{MESH}---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: bad, namespace: shop}}
spec:
  configPatches:
  - applyTo: CLUSTER
    match: {{context: SIDECAR_OUTBOUND, cluster: {{service: web.shop.svc.cluster.local}}}}
    patch: {{operation: MERGE, value: {{connect_timeout: -1s}}}}
"
    );
    let got = served_with("sidecar", &objects, "", "shop", json!({"app": "client"}), "10.1.0.5", &[("PGV", "1")]);
    let errors = got["pgv_errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e.as_str().unwrap().starts_with("cluster outbound|80||web.shop.svc.cluster.local")),
        "{errors:?}"
    );
}

/// A gateway's route configuration matched by the port its server
/// declares (istiod's port map: the listener is on the Service's target
/// port, `http.8080`, the patch names `portNumber: 80`), in context
/// GATEWAY only.
#[test]
fn gateway_routes_match_by_server_port_as_istiod_maps_them() {
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  clusterIP: 10.96.0.100
  selector: {istio: ingressgateway}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {clusterIP: 10.96.0.10, selector: {app: web}, ports: [{name: http, port: 80}]}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: shop}
spec:
  hosts: ['web.example.com']
  gateways: [istio-system/edge]
  http: [{route: [{destination: {host: web.shop.svc.cluster.local}}]}]
---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: edge-headers, namespace: istio-system}
spec:
  configPatches:
  - applyTo: ROUTE_CONFIGURATION
    match: {context: GATEWAY, routeConfiguration: {portNumber: 80}}
    patch: {operation: MERGE, value: {response_headers_to_add: [{header: {key: x-edge, value: '1'}}]}}
  - applyTo: ROUTE_CONFIGURATION
    match: {context: GATEWAY, routeConfiguration: {portNumber: 8443}}
    patch: {operation: MERGE, value: {response_headers_to_add: [{header: {key: x-wrong-port, value: '1'}}]}}
";
    let got = crate::served::served_as(
        "router",
        objects,
        "",
        "istio-system",
        json!({"istio": "ingressgateway"}),
        "10.1.0.30",
    );
    let rc = &got["routes"]["http.8080"];
    assert!(rc.is_object(), "{:?}", got["routes"].as_object().map(|r| r.keys().collect::<Vec<_>>()));
    let headers: Vec<&str> =
        rc["responseHeadersToAdd"].as_array().unwrap().iter().map(|h| h["header"]["key"].as_str().unwrap()).collect();
    assert_eq!(headers, ["x-edge"], "{rc}");
}

/// A REMOVE then an ADD of the same name replaces the cluster (istiod
/// appends ADDs after patching what it built), and an ADD in context
/// SIDECAR_INBOUND reaches the sidecar too.
#[test]
fn a_removed_cluster_is_replaced_by_an_add_of_its_name() {
    let objects = format!(
        "{MESH}---
apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {{name: replace, namespace: shop}}
spec:
  configPatches:
  - applyTo: CLUSTER
    match: {{context: SIDECAR_OUTBOUND, cluster: {{name: outbound|5432||db.shop.svc.cluster.local}}}}
    patch: {{operation: REMOVE}}
  - applyTo: CLUSTER
    match: {{context: SIDECAR_OUTBOUND}}
    patch:
      operation: ADD
      value:
        name: outbound|5432||db.shop.svc.cluster.local
        type: STATIC
        connect_timeout: 7s
        load_assignment:
          cluster_name: outbound|5432||db.shop.svc.cluster.local
          endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 10.9.9.9, port_value: 5432}}}}}}}}]}}]
  - applyTo: CLUSTER
    match: {{context: SIDECAR_INBOUND}}
    patch: {{operation: ADD, value: {{name: inbound-extra, type: STATIC, connect_timeout: 1s}}}}
"
    );
    let got = served(&objects, "", "shop", json!({"app": "client"}), "10.1.0.5");
    let db = &got["clusters"]["outbound|5432||db.shop.svc.cluster.local"];
    assert_eq!(db["type"], "STATIC", "the ADD replaces it: {db}");
    assert_eq!(db["connectTimeout"], "7s");
    assert!(got["clusters"].get("inbound-extra").is_some(), "{:?}", got["clusters"].as_object().unwrap().keys());
}
