//! WasmPlugins and TrafficExtensions on what is served (issue #34): the
//! objects go to the binary through `--configDir`; what one sidecar is
//! served, its listeners and the ECDS resources their filters name, is
//! fetched by grpcio and decoded with the upstream `xds-protos`
//! descriptors (`tests/py/ads_fetch.py`), every resource checked with
//! Envoy's own field rules. Expected values are istiod's
//! (`pilot/pkg/model/extensions.go`, `extension/extensionfilter.go`,
//! `listener_builder.go`), not this server's output.

use serde_json::{Value, json};

use crate::served::served_with;

const OBJECTS: &str = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.10
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-shop, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  rules: [{from: [{source: {namespaces: [shop]}}]}]
---
apiVersion: v1
kind: Secret
metadata: {name: pull, namespace: shop}
type: kubernetes.io/dockerconfigjson
stringData: {.dockerconfigjson: '{\"auths\":{}}'}
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: auth, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  url: oci://example.com/auth:1
  phase: AUTHN
  pluginConfig: {header: x-auth, keys: [a, b]}
  failStrategy: FAIL_OPEN
  imagePullPolicy: Always
  imagePullSecret: pull
  vmConfig:
    env:
    - {name: POD_NAME, valueFrom: HOST}
    - {name: MODE, value: strict}
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: stats, namespace: istio-system}
spec:
  url: example.com/stats:2
  phase: STATS
  match: [{mode: SERVER}]
---
apiVersion: extensions.istio.io/v1alpha1
kind: TrafficExtension
metadata: {name: lua, namespace: shop}
spec:
  phase: AUTHZ
  priority: 10
  match: [{mode: CLIENT, ports: [{number: 80}]}]
  lua: {inlineCode: 'function envoy_on_request(h) h:headers():add(\"x-lua\", \"1\") end'}
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: other, namespace: elsewhere}
spec: {url: oci://example.com/other:1}
";

const AUTH: &str = "extensions.istio.io/trafficextension/shop.auth~istio-translated-wasmplugin";
const STATS: &str = "extensions.istio.io/trafficextension/istio-system.stats~istio-translated-wasmplugin";
const LUA: &str = "extensions.istio.io/trafficextension/shop.lua";

/// The HTTP filters of every HTTP connection manager of listener `name`.
fn http_filters(got: &Value, name: &str) -> Vec<Vec<Value>> {
    let l = &got["listeners"][name];
    assert!(l.is_object(), "no listener {name}: {:?}", got["listeners"].as_object().unwrap().keys());
    l["filterChains"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["filters"].as_array().unwrap().clone())
        .filter(|f| f["name"] == "envoy.filters.network.http_connection_manager")
        .map(|f| f["typedConfig"]["httpFilters"].as_array().unwrap().clone())
        .collect()
}

fn names(filters: &[Value]) -> Vec<&str> {
    filters.iter().map(|f| f["name"].as_str().unwrap()).collect()
}

/// A WasmPlugin delivered over ECDS, a Lua TrafficExtension inline, each
/// where its phase, match and selector put it: the workload's AUTHN plugin
/// before authentication and authorization on both sides, the root
/// namespace's SERVER-only STATS plugin after authorization inbound only,
/// the CLIENT Lua filter on outbound port 80 only; the ECDS resource as
/// istiod builds it.
#[test]
fn wasm_plugins_and_traffic_extensions_are_served_as_istiod_serves_them() {
    let got = served_with("sidecar", OBJECTS, "", "shop", json!({"app": "web"}), "10.1.0.5", &[("PGV", "1")]);
    assert_eq!(got["pgv_errors"], json!([]), "Envoy would reject what is served");

    let inbound = http_filters(&got, "virtualInbound");
    let http_inbound: Vec<&Vec<Value>> =
        inbound.iter().filter(|f| names(f).contains(&"envoy.filters.http.rbac")).collect();
    assert!(!http_inbound.is_empty(), "{}", got["listeners"]["virtualInbound"]);
    for filters in http_inbound {
        let n = names(filters);
        let at = |name: &str| n.iter().position(|x| *x == name).unwrap_or_else(|| panic!("no {name} in {n:?}"));
        assert!(at(AUTH) < at("envoy.filters.http.rbac"), "AUTHN before authorization: {n:?}");
        assert!(at("envoy.filters.http.rbac") < at(STATS), "STATS after authorization: {n:?}");
        assert!(at(STATS) < at("envoy.filters.http.router"), "{n:?}");
        assert!(!n.contains(&LUA), "the Lua filter is CLIENT only: {n:?}");
        let wasm = &filters[at(AUTH)];
        assert_eq!(
            wasm["configDiscovery"],
            json!({
                "configSource": {"ads": {}, "initialFetchTimeout": "0s", "resourceApiVersion": "V3"},
                "typeUrls": [
                    "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
                    "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
                ]
            })
        );
    }

    let outbound = http_filters(&got, "0.0.0.0_80");
    assert!(!outbound.is_empty());
    for filters in &outbound {
        let n = names(filters);
        let at = |name: &str| n.iter().position(|x| *x == name).unwrap_or_else(|| panic!("no {name} in {n:?}"));
        assert!(at(AUTH) < at(LUA), "AUTHN, then AUTHZ: {n:?}");
        assert!(at(LUA) < at("envoy.filters.http.router"));
        assert!(!n.contains(&STATS), "the STATS plugin is SERVER only: {n:?}");
        let code = &filters[at(LUA)]["typedConfig"];
        assert_eq!(code["@type"], "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua");
        assert!(code["defaultSourceCode"]["inlineString"].as_str().unwrap().contains("x-lua"));
    }

    // ECDS: what the filters name, and nothing of another namespace.
    let configs = got["extension_configs"].as_object().unwrap();
    let mut served: Vec<&str> = configs.keys().map(String::as_str).collect();
    served.sort();
    assert_eq!(served, [STATS, AUTH]);
    let auth = &configs[AUTH]["typedConfig"];
    assert_eq!(auth["@type"], "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm");
    let config = &auth["config"];
    assert_eq!(config["name"], "shop.auth~istio-translated-wasmplugin");
    assert_eq!(config["failurePolicy"], "FAIL_OPEN");
    assert_eq!(
        config["configuration"],
        json!({"@type": "type.googleapis.com/google.protobuf.StringValue", "value": "{\"header\":\"x-auth\",\"keys\":[\"a\",\"b\"]}"})
    );
    let vm = &config["vmConfig"];
    assert_eq!(vm["runtime"], "envoy.wasm.runtime.v8");
    assert_eq!(
        vm["code"]["remote"]["httpUri"],
        json!({"uri": "oci://example.com/auth:1", "cluster": "_", "timeout": "30s"})
    );
    let env = &vm["environmentVariables"];
    assert_eq!(env["hostEnvKeys"], json!(["POD_NAME"]));
    let kv = &env["keyValues"];
    assert_eq!(kv["MODE"], "strict");
    assert_eq!(kv["ISTIO_META_WASM_IMAGE_PULL_POLICY"], "Always");
    // The stream is not authenticated: no pull secret (istiod's
    // GeneratePullSecrets), the variable present and empty.
    assert_eq!(kv["ISTIO_META_WASM_IMAGE_PULL_SECRET"], "", "{env}");
    assert!(kv["ISTIO_META_WASM_PLUGIN_RESOURCE_VERSION"].as_str().is_some_and(|v| !v.is_empty()));
    // A reference without a scheme is fetched as OCI.
    let stats = &configs[STATS]["typedConfig"]["config"];
    assert_eq!(stats["vmConfig"]["code"]["remote"]["httpUri"]["uri"], "oci://example.com/stats:2");
    assert_eq!(stats["failurePolicy"], "FAIL_CLOSED", "FAIL_CLOSE is the default");
    assert!(stats["vmConfig"]["environmentVariables"]["keyValues"].get("ISTIO_META_WASM_IMAGE_PULL_SECRET").is_none());
}

/// A workload the plugin does not select: the namespace's CLIENT Lua
/// filter and the root namespace's SERVER plugin, never `app: web`'s.
#[test]
fn extensions_reach_only_the_workloads_they_select() {
    let got = served_with("sidecar", OBJECTS, "", "shop", json!({"app": "api"}), "10.1.0.6", &[("PGV", "1")]);
    assert_eq!(got["pgv_errors"], json!([]));
    let text = got["listeners"].to_string();
    assert!(!text.contains(AUTH), "app: web's plugin only");
    assert!(text.contains(LUA));
    let configs = got["extension_configs"].as_object().unwrap();
    assert!(configs.keys().all(|k| k != AUTH), "{configs:?}");
}

/// An extension or EnvoyFilter written while a proxy is connected is
/// pushed to it: the listeners it changes go out again with it in them,
/// and an EXTENSION_CONFIG ADD to a proxy asking for its name over ECDS
/// (they are applied per proxy as resources are generated, so the change
/// must mark what it may touch).
#[test]
fn extensions_and_envoy_filters_added_live_are_pushed() {
    use crate::ads_client::{connect, runtime, sidecar};
    use istiod_proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
    use std::time::Duration;
    let mentions = |r: &DiscoveryResponse, what: &str| {
        r.resources.iter().any(|a| a.value.windows(what.len()).any(|w| w == what.as_bytes()))
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("svc.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\n\
         spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]}\n",
    )
    .unwrap();
    let s = crate::server::Server::start(dir.path(), &[], &[], None);
    runtime().block_on(async {
        let mut c = connect(s.grpc, false).await;
        let lds = istiod_proto::type_url::LISTENER;
        c.sotw(DiscoveryRequest { node: Some(sidecar(1)), type_url: lds.into(), ..Default::default() });
        let first = c.recv().await;
        c.ack(&first, &[]);
        assert!(!mentions(&first, "x-live-lua"));

        std::fs::write(
            dir.path().join("lua.yaml"),
            "apiVersion: extensions.istio.io/v1alpha1\nkind: TrafficExtension\nmetadata: {name: lua, namespace: default}\n\
             spec: {lua: {inlineCode: 'function envoy_on_request(h) h:headers():add(\"x-live-lua\", \"1\") end'}}\n",
        )
        .unwrap();
        let pushed = tokio::time::timeout(Duration::from_secs(10), c.recv()).await.expect("a push for the extension");
        assert!(mentions(&pushed, "extensions.istio.io/trafficextension/default.lua"));
        assert!(mentions(&pushed, "x-live-lua"));
        c.ack(&pushed, &[]);

        std::fs::write(
            dir.path().join("ef.yaml"),
            "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: buffer, namespace: default}\n\
             spec: {configPatches: [{applyTo: LISTENER, match: {context: SIDECAR_OUTBOUND, listener: {portNumber: 80}}, \
             patch: {operation: MERGE, value: {per_connection_buffer_limit_bytes: 77777}}}]}\n",
        )
        .unwrap();
        let pushed = tokio::time::timeout(Duration::from_secs(10), c.recv()).await.expect("a push for the filter");
        let listeners: Vec<istiod_proto::envoy::config::listener::v3::Listener> = pushed
            .resources
            .iter()
            .map(|a| istiod_proto::prost::Message::decode(a.value.as_slice()).unwrap())
            .collect();
        let l80 = listeners.iter().find(|l| l.name == "0.0.0.0_80").expect("the port 80 listener");
        assert_eq!(l80.per_connection_buffer_limit_bytes, Some(77777));

        // An EXTENSION_CONFIG ADD reaches a proxy already asking for its
        // name over ECDS.
        let ecds = istiod_proto::type_url::TYPED_EXTENSION_CONFIG;
        let mut e = connect(s.grpc, false).await;
        e.sotw(DiscoveryRequest {
            node: Some(sidecar(2)),
            type_url: ecds.into(),
            resource_names: vec!["live-ecds".to_owned()],
            ..Default::default()
        });
        // The name does not exist yet: an empty answer, or none.
        if let Ok(r) = tokio::time::timeout(Duration::from_secs(2), e.recv()).await {
            assert!(r.resources.is_empty(), "{r:?}");
            e.ack(&r, &["live-ecds"]);
        }
        std::fs::write(
            dir.path().join("ecds.yaml"),
            "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: ecds, namespace: default}\n\
             spec: {configPatches: [{applyTo: EXTENSION_CONFIG, patch: {operation: ADD, value: {name: live-ecds, \
             typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua, \
             default_source_code: {inline_string: 'function envoy_on_request(h) end'}}}}}]}\n",
        )
        .unwrap();
        let pushed = tokio::time::timeout(Duration::from_secs(10), e.recv()).await.expect("a push for the ADD");
        let configs: Vec<istiod_proto::envoy::config::core::v3::TypedExtensionConfig> = pushed
            .resources
            .iter()
            .map(|a| istiod_proto::prost::Message::decode(a.value.as_slice()).unwrap())
            .collect();
        assert_eq!(configs.len(), 1, "{configs:?}");
        assert_eq!(configs[0].name, "live-ecds");
        let typed = configs[0].typed_config.as_ref().unwrap();
        assert_eq!(typed.type_url, "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua");
        e.ack(&pushed, &["live-ecds"]);
        // istiod's /debug/ecdsz: the ECDS resources the connected proxy
        // holds, as TypedExtensionConfigs (`getConfigDumpByResourceType`).
        let mut ecdsz = serde_json::Value::Null;
        for _ in 0..100 {
            let (_, body) = crate::server::get(s.http, "/debug/ecdsz?proxyID=app-2.default").unwrap();
            ecdsz = serde_json::from_str(&body).unwrap_or_default();
            if ecdsz["configs"].as_array().is_some_and(|c| !c.is_empty()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let c = &ecdsz["configs"][0];
        assert_eq!(c["@type"], "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig", "{ecdsz}");
        assert_eq!(c["name"], "live-ecds", "{ecdsz}");
    });
}
