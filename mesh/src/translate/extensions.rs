//! Extensions (TrafficExtensions, WasmPlugins) as istiod builds them into
//! listeners (`extension/extensionfilter.go`, `extension/lua.go`): a Lua
//! filter inline, a Wasm filter by name through ECDS, each where its phase
//! says among the filters a listener's chain already has (`AUTHN` before
//! authentication, `AUTHZ` before authorization, `STATS` and unspecified
//! after it), by descending priority. And the ECDS resources themselves
//! (`extension_config_builder.go`), built into the complete Envoy schema.

use std::sync::Arc;

use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::listener::v3::{Filter, FilterChain, Listener, filter};
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use istiod_proto::prost::Message;
use istiod_proto::prost_types::{Any, Duration};
use serde_json::{Value, json};

use crate::model::extensions::{ChainType, Code, Extension, Extensions, ListenerClass, Phase};

const WASM_HTTP: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";
const WASM_NETWORK: &str = "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm";
const RBAC_HTTP: &str = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC";
const RBAC_NETWORK: &str = "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC";
const HCM: &str = "envoy.filters.network.http_connection_manager";
/// The pull secret's variable, carrying the secret's `.dockerconfigjson`.
pub const PULL_SECRET_ENV: &str = "ISTIO_META_WASM_IMAGE_PULL_SECRET";

/// The ECDS source istiod's filters name: ADS, with no initial fetch
/// timeout (a listener waits for its extensions).
fn ecds_source(type_urls: [&str; 2]) -> core::ExtensionConfigSource {
    core::ExtensionConfigSource {
        config_source: Some(core::ConfigSource {
            initial_fetch_timeout: Some(Duration { seconds: 0, nanos: 0 }),
            ..super::envoy::ads().unwrap_or_default()
        }),
        type_urls: type_urls.iter().map(|t| (*t).to_owned()).collect(),
        ..Default::default()
    }
}

/// An extension as an HTTP filter (`toEnvoyHTTPTrafficExtension`).
fn http_filter(e: &Extension) -> Option<hcm::HttpFilter> {
    let config_type = match &e.code {
        Code::Lua(code) => {
            let lua = istiod_envoyfilter::schema::message("envoy.extensions.filters.http.lua.v3.Lua")?;
            let lua =
                istiod_envoyfilter::schema::from_json(lua, &json!({"default_source_code": {"inline_string": code}}))
                    .ok()?;
            hcm::http_filter::ConfigType::TypedConfig(Any {
                type_url: "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua".into(),
                value: lua.encode_to_vec(),
            })
        }
        Code::Wasm(w) if !w.network => {
            hcm::http_filter::ConfigType::ConfigDiscovery(ecds_source([WASM_HTTP, RBAC_HTTP]))
        }
        Code::Wasm(_) => return None,
    };
    Some(hcm::HttpFilter { name: e.resource_name.clone(), config_type: Some(config_type), ..Default::default() })
}

/// An extension as a network filter (`toEnvoyNetworkTrafficExtension`).
fn network_filter(e: &Extension) -> Option<Filter> {
    match &e.code {
        Code::Wasm(w) if w.network => Some(Filter {
            name: e.resource_name.clone(),
            config_type: Some(filter::ConfigType::ConfigDiscovery(ecds_source([WASM_NETWORK, RBAC_NETWORK]))),
        }),
        _ => None,
    }
}

/// Where a filter already in a chain stands among the phases: the
/// metadata exchange, CUSTOM authorization (its shadow RBAC and
/// ext_authz), authentication, authorization, then everything after.
fn rank(names: &[&str], i: usize) -> u8 {
    let later_ext_authz = || names[i + 1..].iter().any(|n| n.ends_with(".ext_authz"));
    match names[i] {
        super::telemetry::MX_FILTER => 0,
        n if n.ends_with(".ext_authz") => 1,
        n if n.ends_with(".rbac") && later_ext_authz() => 1,
        super::authn::JWT_FILTER | "istio_authn" => 3,
        n if n.ends_with(".rbac") => 5,
        _ => 7,
    }
}

/// Where a phase's extensions go: before the first filter that ranks
/// after the phase.
fn phase_rank(p: Phase) -> u8 {
    match p {
        Phase::Authn => 2,
        Phase::Authz => 4,
        Phase::Stats | Phase::Unspecified => 6,
    }
}

/// Inserts the extensions of each phase (`by_phase`, in phase order) made
/// into `T`s by `make`, into `list` (named by `name`): before the first
/// filter that ranks after the phase (extensions already in rank as their
/// phase, so `UNSPECIFIED` follows `STATS`).
fn insert<T>(
    list: &mut Vec<T>,
    name: impl Fn(&T) -> &str,
    by_phase: &[(Phase, Vec<Arc<Extension>>)],
    make: impl Fn(&Extension) -> Option<T>,
) -> bool {
    let mut changed = false;
    for (phase, exts) in by_phase {
        let names: Vec<&str> = list.iter().map(&name).collect();
        let ranked = |i: usize| match by_phase.iter().find(|(_, es)| es.iter().any(|e| e.resource_name == names[i])) {
            Some((p, _)) => phase_rank(*p),
            None => rank(&names, i),
        };
        let at = (0..names.len()).find(|&i| ranked(i) > phase_rank(*phase)).unwrap_or(names.len());
        let made: Vec<T> = exts.iter().filter_map(|e| make(e)).collect();
        changed |= !made.is_empty();
        for (k, t) in made.into_iter().enumerate() {
            list.insert(at + k, t);
        }
    }
    changed
}

/// A chain's destination port (0 when it matches none).
fn chain_port(c: &FilterChain) -> u32 {
    c.filter_chain_match.as_ref().and_then(|m| m.destination_port).unwrap_or(0)
}

/// Chains istiod builds without its filter-stack builders: catch-alls
/// and blackholes take no extensions.
fn skipped(c: &FilterChain) -> bool {
    c.name.contains("lackhole") || c.name.contains("Passthrough") || c.name.starts_with("virtualOutbound")
}

/// Adds the extensions a proxy (`namespace`, `labels`) takes to listener
/// `l` of `class` (port `port` unless its chains name theirs); whether
/// anything changed.
pub fn apply(
    exts: &Extensions,
    namespace: &str,
    labels: &[(Arc<str>, Arc<str>)],
    class: ListenerClass,
    port: u32,
    l: &mut Listener,
) -> bool {
    let mut changed = false;
    // The network extensions of a listener's HTTP chains are popped once
    // per listener on the outbound side and at gateways (istiod builds
    // them once and hands them to the first HTTP chain only).
    let mut http_network_done = false;
    // A match-all chain moved to `default_filter_chain` takes them too
    // (istiod adds them before moving it).
    for c in l.filter_chains.iter_mut().chain(l.default_filter_chain.as_mut()).filter(|c| !skipped(c)) {
        let port = match (class, chain_port(c)) {
            (ListenerClass::SidecarInbound, p) => p,
            (_, _) => port,
        };
        let http = c.filters.iter().position(|f| f.name == HCM);
        let network = exts.for_listener(namespace, labels, class, port, ChainType::Network);
        let once = class != ListenerClass::SidecarInbound && http.is_some();
        let popped = once && http_network_done;
        if !network.is_empty() && !popped {
            changed |= insert(&mut c.filters, |f| &f.name, &network, network_filter);
            http_network_done |= once;
        }
        let Some(i) = c.filters.iter().position(|f| f.name == HCM) else { continue };
        let by_phase = exts.for_listener(namespace, labels, class, port, ChainType::Http);
        if by_phase.is_empty() {
            continue;
        }
        let Some(filter::ConfigType::TypedConfig(a)) = &mut c.filters[i].config_type else { continue };
        let Ok(mut m) = hcm::HttpConnectionManager::decode(a.value.as_slice()) else { continue };
        if insert(&mut m.http_filters, |f| &f.name, &by_phase, http_filter) {
            a.value = m.encode_to_vec();
            changed = true;
        }
    }
    changed
}

/// The ECDS resource of a Wasm extension (`InsertedTrafficExtensionConfigurations`):
/// a `TypedExtensionConfig` named as its filter, holding the HTTP or
/// network Wasm filter config istiod builds. `pull_secret`: what the pull
/// secret's variable carries (istiod's `updatePluginConfig`).
pub fn ecds_config(e: &Extension, pull_secret: Option<&str>) -> Option<Vec<u8>> {
    let Code::Wasm(w) = &e.code else { return None };
    // buildDataSource: a file is read locally (its sha256 dropped); any
    // other URL is fetched by the agent, a bare reference as OCI.
    let code = match w.url.strip_prefix("file://") {
        Some(path) => json!({"local": {"filename": path}}),
        None => {
            let uri = match istiod_config::istio::ext::go_url_scheme(&w.url) {
                "" => format!("oci://{}", w.url),
                _ => w.url.clone(),
            };
            // No checksum is "nil", the agent's magic value for none
            // (pkg/wasm/convert.go): an empty one breaks Envoy's rule
            // (`min_len: 1`), which older agents check as they read.
            let sha256 = if w.sha256.is_empty() { "nil" } else { w.sha256.as_str() };
            json!({"remote": {"http_uri": {"uri": uri, "cluster": "_", "timeout": "30s"}, "sha256": sha256}})
        }
    };
    let mut env = serde_json::Map::new();
    if w.pull_secret.is_some() {
        env.insert(PULL_SECRET_ENV.into(), Value::String(pull_secret.unwrap_or("").to_owned()));
    }
    if let Some(p) = &w.pull_policy {
        env.insert("ISTIO_META_WASM_IMAGE_PULL_POLICY".into(), Value::String(p.clone()));
    }
    env.insert("ISTIO_META_WASM_PLUGIN_RESOURCE_VERSION".into(), Value::String(e.version.clone()));
    for (k, v) in &w.env {
        env.insert(k.clone(), Value::String(v.clone()));
    }
    let mut vars = json!({"key_values": env});
    if let Some(host) = &w.host_env {
        vars["host_env_keys"] = json!(host);
    }
    let mut config = json!({
        "name": format!("{}.{}", e.namespace, e.name),
        "root_id": w.plugin_name,
        "vm_config": {"runtime": "envoy.wasm.runtime.v8", "code": code, "environment_variables": vars},
        "failure_policy": w.failure_policy,
    });
    if let Some(c) = &w.plugin_config {
        config["configuration"] = json!({"@type": "type.googleapis.com/google.protobuf.StringValue", "value": c});
    }
    let (type_url, type_name) = match w.network {
        true => (WASM_NETWORK, "envoy.extensions.filters.network.wasm.v3.Wasm"),
        false => (WASM_HTTP, "envoy.extensions.filters.http.wasm.v3.Wasm"),
    };
    let built = istiod_envoyfilter::schema::message(type_name)
        .ok_or_else(|| format!("no {type_name} in the schema"))
        .and_then(|desc| istiod_envoyfilter::schema::from_json(desc, &json!({"config": config})));
    match built {
        Ok(mut wasm) => {
            // Without a plugin config, an empty Any (istiod's `&anypb.Any{}`).
            if w.plugin_config.is_none()
                && let Some(prost_reflect::Value::Message(c)) = wasm.get_field_by_name_mut("config")
                && let Some(any) = istiod_envoyfilter::schema::message("google.protobuf.Any")
            {
                c.set_field_by_name(
                    "configuration",
                    prost_reflect::Value::Message(prost_reflect::DynamicMessage::new(any)),
                );
            }
            let typed = core::TypedExtensionConfig {
                name: e.resource_name.clone(),
                typed_config: Some(Any {
                    type_url: type_url.into(),
                    value: istiod_envoyfilter::canonical::encode(&wasm),
                }),
            };
            Some(typed.encode_to_vec())
        }
        Err(err) => {
            tracing::warn!(target: "model", resource = e.resource_name, "cannot build the Wasm config: {err}");
            None
        }
    }
}
