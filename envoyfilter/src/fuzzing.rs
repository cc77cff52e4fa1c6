//! What the fuzz target and the hostile-input tests drive: one EnvoyFilter
//! spec (any JSON) applied in every context to a cluster, a listener with
//! an HTTP connection manager and its inline route configuration, and a
//! route configuration. Never panics; the output is bounded by the input
//! and the patch values.

use prost::Message;

use crate::filters::{Context, EnvoyFilters, Proxy};

const CLUSTER: &str = r#"{"name": "outbound|80||web.shop.svc.cluster.local", "type": "EDS", "connect_timeout": "10s",
  "transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": {
    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext", "sni": "web"}}}"#;
const LISTENER: &str = r#"{"name": "0.0.0.0_80", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 80}},
  "listener_filters": [{"name": "envoy.filters.listener.http_inspector", "typed_config": {
    "@type": "type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3.HttpInspector"}}],
  "filter_chains": [{"name": "c", "filter_chain_match": {"destination_port": 80, "transport_protocol": "raw_buffer"},
    "filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": {
      "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
      "stat_prefix": "x", "route_config": {"name": "inbound|80||", "virtual_hosts": [{"name": "v", "domains": ["*"],
        "routes": [{"name": "r", "match": {"prefix": "/"}, "route": {"cluster": "c"}}]}]},
      "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]}}]}]}"#;
const ROUTES: &str = r#"{"name": "80", "virtual_hosts": [{"name": "web:80", "domains": ["web", "web:80"],
  "routes": [{"name": "default", "match": {"prefix": "/"}, "route": {"cluster": "outbound|80||web"}}]}]}"#;

fn message(name: &str, json: &str) -> prost_reflect::DynamicMessage {
    let v: serde_json::Value = serde_json::from_str(json).expect("a fixture");
    crate::schema::from_json(crate::schema::message(name).expect("in the schema"), &v).expect("a fixture")
}

/// Applies `spec` everywhere; the encoded sizes of what came out, each
/// checked against the bound.
pub fn run(spec: &serde_json::Value) -> Vec<usize> {
    let filters = EnvoyFilters::new("istio-system", [("istio-system", "fuzz", "", spec)]);
    let proxy = Proxy { namespace: "shop", labels: &[("app", "web")], version: "1.28.0", metadata: &[] };
    let applied = filters.applied(&proxy);
    let values: usize =
        applied.patches.values().flatten().filter_map(|p| p.value.as_ref()).map(|v| v.encoded_len()).sum();
    let patches = applied.patches.values().map(Vec::len).sum::<usize>();
    let mut sizes = Vec::new();
    for ctx in [Context::SidecarInbound, Context::SidecarOutbound, Context::Gateway] {
        let mut outcomes = Vec::new();
        let c = message("envoy.config.cluster.v3.Cluster", CLUSTER);
        let base = c.encoded_len();
        if let Some(c) = crate::cluster::apply(&applied, ctx, c, &["web.shop.svc.cluster.local"], &mut outcomes) {
            sizes.push((base, c.encoded_len()));
        }
        let mut l = message("envoy.config.listener.v3.Listener", LISTENER);
        let base = l.encoded_len();
        crate::listener::patch_inline_routes(&applied, ctx, &mut l, &mut outcomes);
        if let Some(l) = crate::listener::apply(&applied, ctx, l, &mut outcomes) {
            sizes.push((base, l.encoded_len()));
        }
        let r = message("envoy.config.route.v3.RouteConfiguration", ROUTES);
        let base = r.encoded_len();
        let r = crate::route::apply(&applied, ctx, r, &Default::default(), &mut outcomes);
        sizes.push((base, r.encoded_len()));
    }
    // Every patch adds at most its value once per place it lands; a
    // resource has a handful of places.
    for (base, out) in &sizes {
        assert!(*out <= base + 16 * (values + 64) * (patches + 1), "{out} bytes from {base}");
    }
    sizes.into_iter().map(|(_, s)| s).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// Hostile or nonsensical filters: unknown types, wrong shapes,
    /// newer enum values, patches of one level aimed at another, lists
    /// of thousands: an answer, never a panic.
    #[test]
    fn hostile_filters_never_panic() {
        let big: Vec<serde_json::Value> =
            (0..2000).map(|i| json!({"name": format!("f{i}"), "typed_config": {"@type": "type.googleapis.com/google.protobuf.Empty"}})).collect();
        let specs = [
            json!(null),
            json!([1, 2, 3]),
            json!({"configPatches": "nope"}),
            json!({"configPatches": [{"applyTo": "CLUSTER", "patch": {"operation": "MERGE", "value": {"@type": "x", "name": 3}}}]}),
            json!({"configPatches": [{"applyTo": "LISTENER", "patch": {"operation": "MERGE", "value": {"filter_chains": "x"}}}]}),
            json!({"configPatches": [{"applyTo": "HTTP_FILTER", "match": {"context": "SIDECAR_INBOUND"},
                "patch": {"operation": "INSERT_BEFORE", "value": {"name": "lua", "typed_config": {"@type": "type.googleapis.com/not.a.Type"}}}}]}),
            json!({"configPatches": [{"applyTo": "NETWORK_FILTER", "patch": {"operation": "MERGE",
                "value": {"name": "x", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}}}]}),
            json!({"configPatches": [{"applyTo": "HTTP_FILTER", "patch": {"operation": "SOMETHING_NEW", "value": {"name": "x"}}},
                {"applyTo": "FUTURE_LEVEL", "patch": {"operation": "ADD", "value": {}}},
                {"applyTo": "CLUSTER", "match": {"context": "WAYPOINT"}, "patch": {"operation": "REMOVE"}}]}),
            json!({"configPatches": [{"applyTo": "FILTER_CHAIN", "patch": {"operation": "ADD", "value": {"filters": big}}}]}),
            json!({"configPatches": [{"applyTo": "HTTP_ROUTE", "patch": {"operation": "INSERT_FIRST", "value": {"name": "x"}}},
                {"applyTo": "VIRTUAL_HOST", "patch": {"operation": "REPLACE", "value": {"name": "v"}}},
                {"applyTo": "ROUTE_CONFIGURATION", "patch": {"operation": "MERGE", "value": {"virtual_hosts": [{"name": "w"}]}}}]}),
            json!({"configPatches": [{"applyTo": "CLUSTER", "match": {"proxy": {"proxyVersion": "(("}},
                "patch": {"operation": "REMOVE"}}]}),
        ];
        for spec in &specs {
            let sizes = super::run(spec);
            assert!(!sizes.is_empty(), "{spec}");
        }
        // A proxyVersion that does not compile is no check at all (as
        // istiod): the REMOVE applies, in the contexts a cluster has.
        let kept = super::run(&specs[10]);
        assert_eq!(kept.len(), 6, "the cluster removed in all three contexts: {kept:?}");
    }
}

#[cfg(test)]
mod replay {
    /// The fuzz target's seeds and the crashes it once found
    /// (fuzz/regressions/envoy_filter/), replayed on every test run.
    #[test]
    fn fuzz_regressions_replay() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/regressions/envoy_filter");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            if let Ok(spec) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                super::run(&spec);
            }
            n += 1;
        }
        assert!(n >= 1);
    }
}
