//! TrafficExtensions, and WasmPlugins as the TrafficExtensions istiod
//! makes of them (`pilot/pkg/config/kube/extensions/translate.go`), read
//! as istiod's `convertToTrafficExtensionWrapper` reads them
//! (`pilot/pkg/model/extensions.go`), and selected for a listener as its
//! `TrafficExtensionsByListenerInfo` selects them (`push_context.go`).

use std::collections::BTreeMap;
use std::sync::Arc;

use istiod_envoyfilter::filters::should_attach;
use istiod_envoyfilter::spec::TargetRef;
use serde_json::Value;

use crate::istio::{IstioKind, IstioSpec};
use crate::objects::Objects;

/// The prefix of the names of the filters and ECDS resources extensions
/// become (`TrafficExtensionResourceNamePrefix`).
pub const RESOURCE_PREFIX: &str = "extensions.istio.io/trafficextension/";
/// What a WasmPlugin's name gains as a TrafficExtension.
pub const WASM_PLUGIN_MARKER: &str = "~istio-translated-wasmplugin";

/// Where in a filter chain an extension goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Before authentication.
    Authn,
    /// Before authorization.
    Authz,
    /// After authorization.
    Stats,
    /// After the STATS ones.
    Unspecified,
}

/// Which side of a workload's traffic (`WorkloadMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Both (`UNDEFINED`, `CLIENT_AND_SERVER`).
    Any,
    /// Outbound, and gateways.
    Client,
    /// Inbound.
    Server,
}

/// The listener an extension is asked for (istiod's `ListenerInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListenerClass {
    /// A sidecar's inbound side.
    SidecarInbound,
    /// A sidecar's outbound side.
    SidecarOutbound,
    /// A gateway.
    Gateway,
}

/// The chain an extension is asked for (`FilterChainType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChainType {
    /// An HTTP connection manager's filters.
    Http,
    /// A chain's network filters.
    Network,
}

/// A Wasm module's settings.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Wasm {
    /// `url`, as written.
    pub url: String,
    /// `sha256`.
    pub sha256: String,
    /// `imagePullPolicy` (`IfNotPresent`, `Always`), unless unspecified.
    pub pull_policy: Option<String>,
    /// `imagePullSecret` as istiod normalises it: (namespace, name) in the
    /// extension's namespace (`kubernetes://<ns>/<name>`); empty ones for
    /// a name istiod keeps but never resolves (`configmap://`); none.
    pub pull_secret: Option<(String, String)>,
    /// `pluginConfig` as compact JSON, unless empty.
    pub plugin_config: Option<String>,
    /// `pluginName` (the root id).
    pub plugin_name: String,
    /// `failStrategy`: `FAIL_CLOSED` (the default), `FAIL_OPEN` or
    /// `FAIL_RELOAD`, Envoy's names.
    pub failure_policy: &'static str,
    /// `vmConfig.env` given inline.
    pub env: Vec<(String, String)>,
    /// `vmConfig.env` from the host; `None` when `env` is empty.
    pub host_env: Option<Vec<String>>,
    /// `type: NETWORK`.
    pub network: bool,
}

/// What an extension runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Code {
    /// A Wasm module, delivered over ECDS.
    Wasm(Box<Wasm>),
    /// Lua code, inline (HTTP only).
    Lua(String),
}

/// One extension, read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Extension {
    /// Namespace.
    pub namespace: String,
    /// Name (a WasmPlugin's with [`WASM_PLUGIN_MARKER`]).
    pub name: String,
    /// The filter's and ECDS resource's name.
    pub resource_name: String,
    /// `selector.matchLabels`.
    pub selector: Option<BTreeMap<String, String>>,
    /// `targetRefs` (a WasmPlugin's `targetRef` too).
    pub target_refs: Vec<TargetRef>,
    /// `phase`.
    pub phase: Phase,
    /// `priority` (unset sorts as the lowest, as istiod sorts it).
    pub priority: i64,
    /// `match`: (mode, ports).
    pub matches: Vec<(Mode, Vec<u32>)>,
    /// What it runs.
    pub code: Code,
    /// What stands for the object's `resourceVersion` (a digest of what
    /// was read: the agent re-fetches a module when it changes).
    pub version: String,
    /// A hash of its identity and spec, for the generations of what it
    /// goes into (a Lua extension's code is not hashed again per use).
    pub digest: u64,
}

impl Extension {
    /// istiod's `MatchType`.
    fn for_chain(&self, chain: ChainType) -> bool {
        match (&self.code, chain) {
            (Code::Lua(_), ChainType::Http) => true,
            (Code::Lua(_), ChainType::Network) => false,
            (Code::Wasm(w), ChainType::Network) => w.network,
            (Code::Wasm(w), ChainType::Http) => !w.network,
        }
    }

    /// istiod's `ShouldAttachPolicy` for a sidecar or gateway
    /// (`gateway_selectors`: `ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY`).
    pub fn attaches(&self, namespace: &str, labels: &[(Arc<str>, Arc<str>)], gateway_selectors: bool) -> bool {
        let label = |k: &str| labels.iter().find(|(l, _)| &**l == k).map(|(_, v)| &**v);
        should_attach(&self.namespace, self.selector.as_ref(), &self.target_refs, namespace, label, gateway_selectors)
    }

    /// istiod's `matchTrafficExtensionSelectors`.
    fn matches_listener(&self, class: ListenerClass, port: u32) -> bool {
        let mode = match class {
            ListenerClass::SidecarInbound => Mode::Server,
            ListenerClass::SidecarOutbound | ListenerClass::Gateway => Mode::Client,
        };
        self.matches.is_empty()
            || self.matches.iter().any(|(m, ports)| {
                (*m == Mode::Any || *m == mode) && (ports.is_empty() || ports.iter().any(|p| *p != 0 && *p == port))
            })
    }
}

/// The mesh's extensions, by namespace, in istiod's order (creation time,
/// name, namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Extensions {
    by_namespace: BTreeMap<String, Vec<Arc<Extension>>>,
    root: String,
    /// Not `ENABLE_SELECTOR_BASED_K8S_GATEWAY_POLICY` (true): Gateway API
    /// gateways take only extensions with `targetRefs`.
    pub no_gateway_selectors: bool,
    /// Objects dropped as istiod drops them: (kind, namespace, name, why).
    pub dropped: Vec<(&'static str, String, String, String)>,
}

impl Extensions {
    /// The extensions of `objs`, the mesh's root namespace being `root`.
    pub fn of(objs: &Objects, root: &str) -> Self {
        let mut all: Vec<(&str, Extension)> = Vec::new();
        let mut dropped = Vec::new();
        for o in &objs.istio {
            let (kind, spec) = match &o.spec {
                IstioSpec::Ext(IstioKind::WasmPlugin, s) => ("WasmPlugin", &s.0),
                IstioSpec::Ext(IstioKind::TrafficExtension, s) => ("TrafficExtension", &s.0),
                _ => continue,
            };
            let (ns, name) = (o.meta.ns(), o.meta.name.as_str());
            let read = match kind {
                "WasmPlugin" => read(ns, &format!("{name}{WASM_PLUGIN_MARKER}"), &from_wasm_plugin(spec)),
                _ => read(ns, name, spec),
            };
            match read {
                Ok(e) => all.push((o.meta.creation_timestamp.as_deref().unwrap_or(""), e)),
                Err(why) => dropped.push((kind, ns.to_owned(), name.to_owned(), why)),
            }
        }
        all.sort_by(|(ta, a), (tb, b)| (ta, &a.name, &a.namespace).cmp(&(tb, &b.name, &b.namespace)));
        let mut by_namespace: BTreeMap<String, Vec<Arc<Extension>>> = BTreeMap::new();
        for (_, e) in all {
            by_namespace.entry(e.namespace.clone()).or_default().push(Arc::new(e));
        }
        Extensions { by_namespace, root: root.to_owned(), no_gateway_selectors: false, dropped }
    }

    /// None exists.
    pub fn is_empty(&self) -> bool {
        self.by_namespace.is_empty()
    }

    /// Whether one selects workloads by label (or names a gateway).
    pub fn reads_labels(&self) -> bool {
        self.by_namespace.values().flatten().any(|e| e.selector.is_some() || !e.target_refs.is_empty())
    }

    /// The namespaces a proxy of `namespace` looks in: its own, then the
    /// root.
    fn lookup<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Arc<Extension>> {
        let root = (self.root != namespace).then_some(self.root.as_str());
        std::iter::once(namespace).chain(root).flat_map(|ns| self.by_namespace.get(ns).into_iter().flatten())
    }

    /// Those that apply to a proxy (`namespace`, `labels`) on a listener
    /// of `class` and `port`, for `chain`, by phase, each phase by
    /// descending priority (istiod's stable sort: ties keep the lookup
    /// order).
    pub fn for_listener(
        &self,
        namespace: &str,
        labels: &[(Arc<str>, Arc<str>)],
        class: ListenerClass,
        port: u32,
        chain: ChainType,
    ) -> Vec<(Phase, Vec<Arc<Extension>>)> {
        let mut out: Vec<(Phase, Vec<Arc<Extension>>)> = Vec::new();
        for e in self.lookup(namespace) {
            if e.for_chain(chain)
                && e.attaches(namespace, labels, !self.no_gateway_selectors)
                && e.matches_listener(class, port)
            {
                match out.iter_mut().find(|(p, _)| *p == e.phase) {
                    Some((_, list)) => list.push(e.clone()),
                    None => out.push((e.phase, vec![e.clone()])),
                }
            }
        }
        for (_, list) in &mut out {
            list.sort_by_key(|e| std::cmp::Reverse(e.priority));
        }
        out.sort_by_key(|(p, _)| *p);
        out
    }

    /// A hash of the extensions that select a proxy (`namespace`,
    /// `labels`), in lookup order; `None` when none does (its listeners
    /// need no second look).
    pub fn digest_for(&self, namespace: &str, labels: &[(Arc<str>, Arc<str>)]) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut any = false;
        for e in self.lookup(namespace).filter(|e| e.attaches(namespace, labels, !self.no_gateway_selectors)) {
            e.digest.hash(&mut h);
            any = true;
        }
        any.then(|| h.finish())
    }

    /// Every Wasm extension.
    pub fn wasm(&self) -> impl Iterator<Item = &Arc<Extension>> {
        self.by_namespace.values().flatten().filter(|e| matches!(e.code, Code::Wasm(_)))
    }

    /// The Wasm extension an ECDS name names, for a proxy of `namespace`
    /// (istiod's `TrafficExtensionsByName`: the proxy's namespace or the
    /// root's, by name alone).
    pub fn by_resource_name(&self, namespace: &str, resource: &str) -> Option<&Arc<Extension>> {
        let (ns, name) = resource.strip_prefix(RESOURCE_PREFIX)?.split_once('.')?;
        if ns != namespace && ns != self.root {
            return None;
        }
        let e = self.by_namespace.get(ns)?.iter().find(|e| e.name == name)?;
        matches!(e.code, Code::Wasm(_)).then_some(e)
    }
}

/// A WasmPlugin's spec as the TrafficExtension's istiod translates it to
/// (`translateWasmPlugin`): its module settings under `wasm`, a singular
/// `targetRef` as `targetRefs`.
fn from_wasm_plugin(spec: &Value) -> Value {
    let get = |k: &str| spec.get(k).cloned().unwrap_or(Value::Null);
    let mut out = serde_json::Map::new();
    for k in ["selector", "phase", "priority", "match"] {
        if !get(k).is_null() {
            out.insert(k.into(), get(k));
        }
    }
    let refs = match (get("targetRefs"), get("targetRef")) {
        (Value::Array(a), _) if !a.is_empty() => Value::Array(a),
        (_, r) if !r.is_null() => Value::Array(vec![r]),
        _ => Value::Null,
    };
    out.insert("targetRefs".into(), refs);
    let mut wasm = serde_json::Map::new();
    for k in [
        "url",
        "sha256",
        "imagePullPolicy",
        "imagePullSecret",
        "pluginConfig",
        "pluginName",
        "failStrategy",
        "vmConfig",
        "type",
    ] {
        if !get(k).is_null() {
            wasm.insert(k.into(), get(k));
        }
    }
    // The URL is carried even when empty (the read drops the extension).
    wasm.entry("url").or_insert(Value::String(String::new()));
    out.insert("wasm".into(), Value::Object(wasm));
    if out.get("phase").and_then(Value::as_str) == Some("UNSPECIFIED_PHASE") {
        out.remove("phase");
    }
    Value::Object(out)
}

fn text(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or("").to_owned()
}

/// istiod's `convertToTrafficExtensionWrapper`: the extension, or why
/// istiod discards it.
fn read(namespace: &str, name: &str, spec: &Value) -> Result<Extension, String> {
    use serde::Deserialize;
    use std::hash::{Hash, Hasher};
    let get = |k: &str| spec.get(k);
    let code = match (get("wasm").filter(|w| !w.is_null()), get("lua").filter(|l| !l.is_null())) {
        (Some(w), _) => Code::Wasm(Box::new(read_wasm(namespace, w)?)),
        (None, Some(l)) => {
            let code = text(l.get("inlineCode"));
            if code.is_empty() {
                return Err("lua.inlineCode cannot be empty".into());
            }
            if code.len() > 65536 {
                return Err("lua.inlineCode exceeds maximum size of 64KB".into());
            }
            Code::Lua(code)
        }
        (None, None) => return Err("neither wasm nor lua is set".into()),
    };
    let selector = get("selector").filter(|s| !s.is_null()).map(|s| {
        let labels = s.get("matchLabels").and_then(Value::as_object);
        labels.into_iter().flatten().map(|(k, v)| (k.clone(), text(Some(v)))).collect()
    });
    let target_refs = get("targetRefs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| TargetRef::deserialize(r).ok())
        .collect();
    let phase = match get("phase").and_then(Value::as_str) {
        Some("AUTHN") => Phase::Authn,
        Some("AUTHZ") => Phase::Authz,
        Some("STATS") => Phase::Stats,
        _ => Phase::Unspecified,
    };
    let priority = get("priority").and_then(Value::as_i64).unwrap_or(i64::from(i32::MIN));
    let matches = get("match")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| !m.is_null())
        .map(|m| {
            let mode = match m.get("mode").and_then(Value::as_str) {
                Some("CLIENT") => Mode::Client,
                Some("SERVER") => Mode::Server,
                _ => Mode::Any,
            };
            let ports = m.get("ports").and_then(Value::as_array).into_iter().flatten();
            let ports = ports.filter_map(|p| p.get("number").and_then(Value::as_u64)).map(|n| n as u32);
            (mode, ports.collect())
        })
        .collect();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    spec.to_string().hash(&mut h);
    let version = format!("{:016x}", h.finish());
    (namespace, name).hash(&mut h);
    Ok(Extension {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        resource_name: format!("{RESOURCE_PREFIX}{namespace}.{name}"),
        selector,
        target_refs,
        phase,
        priority,
        matches,
        code,
        version,
        digest: h.finish(),
    })
}

fn read_wasm(namespace: &str, w: &Value) -> Result<Wasm, String> {
    let url = text(w.get("url"));
    if url.is_empty() {
        return Err("wasm.url is required".into());
    }
    if url.chars().any(char::is_control) {
        return Err(format!("failed to parse wasm URL: parse {url:?}: net/url: invalid control character in URL"));
    }
    // credentials.ToResourceName, then ParseResourceName with the
    // namespace forced to the extension's.
    let secret = text(w.get("imagePullSecret"));
    // ParseResourceName of `kubernetes://` (a bare name is made one):
    // `name` or `namespace/name`, further `/` parts dropped.
    let name_of = |rest: &str| {
        let parts: Vec<&str> = rest.split('/').collect();
        parts.get(1).copied().unwrap_or(parts[0]).to_owned()
    };
    let pull_secret = match secret.split_once("://") {
        _ if secret.is_empty() => None,
        None => Some((namespace.to_owned(), name_of(&secret))),
        Some(("kubernetes", rest)) => Some((namespace.to_owned(), name_of(rest))),
        // Names istiod keeps but whose secret its ECDS never resolves.
        Some(("kubernetes-gateway" | "configmap", _)) => Some((String::new(), String::new())),
        Some(_) => None,
    };
    let plugin_config = match w.get("pluginConfig") {
        Some(Value::Object(m)) if !m.is_empty() => Some(Value::Object(m.clone()).to_string()),
        _ => None,
    };
    let env = w.get("vmConfig").and_then(|v| v.get("env")).and_then(Value::as_array);
    let env: Vec<&Value> = env.into_iter().flatten().filter(|e| !e.is_null()).collect();
    let inline = env
        .iter()
        .filter(|e| e.get("valueFrom").and_then(Value::as_str) != Some("HOST"))
        .map(|e| (text(e.get("name")), text(e.get("value"))))
        .collect();
    let host = env.iter().filter(|e| e.get("valueFrom").and_then(Value::as_str) == Some("HOST"));
    let host_env = (!env.is_empty()).then(|| host.map(|e| text(e.get("name"))).collect());
    Ok(Wasm {
        sha256: text(w.get("sha256")),
        pull_policy: match w.get("imagePullPolicy").and_then(Value::as_str) {
            Some(p @ ("IfNotPresent" | "Always")) => Some(p.to_owned()),
            _ => None,
        },
        pull_secret,
        plugin_config,
        plugin_name: text(w.get("pluginName")),
        failure_policy: match w.get("failStrategy").and_then(Value::as_str) {
            Some("FAIL_OPEN") => "FAIL_OPEN",
            Some("FAIL_RELOAD") => "FAIL_RELOAD",
            _ => "FAIL_CLOSED",
        },
        env: inline,
        host_env,
        network: w.get("type").and_then(Value::as_str) == Some("NETWORK"),
        url,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(spec: Value) -> Extension {
        read("ns", "e", &spec).unwrap()
    }

    /// pilot/pkg/model/extensions_test.go TestMatchListener (proxy in
    /// `ns` with labels a=b, c=d).
    #[test]
    fn listeners_match_as_istiods_match_listener_test() {
        let labels: Vec<(Arc<str>, Arc<str>)> = vec![("a".into(), "b".into()), ("c".into(), "d".into())];
        let lua = serde_json::json!({"inlineCode": "x"});
        let (inb, out, gw) = (ListenerClass::SidecarInbound, ListenerClass::SidecarOutbound, ListenerClass::Gateway);
        let sel =
            |l: &str| serde_json::json!({"matchLabels": {l.split('=').next().unwrap(): l.split('=').nth(1).unwrap()}});
        #[rustfmt::skip]
        let cases: Vec<(Value, Value, ListenerClass, bool)> = vec![
            (Value::Null, Value::Null, inb, true),
            (sel("a=b"), Value::Null, inb, true),
            (sel("e=f"), Value::Null, inb, false),
            (Value::Null, serde_json::json!([{}]), inb, true),
            (Value::Null, serde_json::json!([{"mode": "SERVER"}]), inb, true),
            (Value::Null, serde_json::json!([{"mode": "SERVER", "ports": []}]), inb, true),
            (Value::Null, serde_json::json!([{"mode": "SERVER", "ports": [{"number": 1234}]}]), inb, true),
            (Value::Null, serde_json::json!([{"mode": "SERVER", "ports": [{"number": 1235}]}]), inb, false),
            (sel("e=f"), serde_json::json!([{"mode": "SERVER", "ports": [{"number": 1234}]}]), inb, false),
            (Value::Null, serde_json::json!([{"mode": "CLIENT", "ports": [{"number": 1234}]}]), out, true),
            (Value::Null, serde_json::json!([{"mode": "CLIENT", "ports": [{"number": 1234}]}]), gw, true),
            (Value::Null, serde_json::json!([{"mode": "SERVER", "ports": [{"number": 1234}]}]), gw, false),
        ];
        for (i, (selector, matches, class, want)) in cases.into_iter().enumerate() {
            let e = ext(serde_json::json!({"selector": selector, "match": matches, "lua": lua}));
            let got = e.attaches("ns", &labels, true) && e.matches_listener(class, 1234);
            assert_eq!(got, want, "case {i}");
        }
    }

    /// extensions_test.go TestConvertToTrafficExtensionWrapper and
    /// TestTrafficExtensionWrapper_MatchType; TestFailurePolicy;
    /// TestBuildVMConfig's environment.
    #[test]
    fn extensions_read_as_istiods_wrapper_tests() {
        let lua = ext(serde_json::json!({"lua": {"inlineCode": "function envoy_on_request(h) end"}}));
        assert_eq!(lua.resource_name, "extensions.istio.io/trafficextension/ns.e");
        assert!(lua.for_chain(ChainType::Http) && !lua.for_chain(ChainType::Network));
        let wasm = ext(serde_json::json!({"wasm": {"url": "oci://example.com/wasm:latest"}}));
        assert!(wasm.for_chain(ChainType::Http) && !wasm.for_chain(ChainType::Network));
        let net = ext(serde_json::json!({"wasm": {"url": "oci://x", "type": "NETWORK"}}));
        assert!(net.for_chain(ChainType::Network) && !net.for_chain(ChainType::Http));
        for (spec, why) in [
            (serde_json::json!({}), "neither wasm nor lua is set"),
            (serde_json::json!({"lua": {"inlineCode": ""}}), "lua.inlineCode cannot be empty"),
            (
                serde_json::json!({"lua": {"inlineCode": "x".repeat(65537)}}),
                "lua.inlineCode exceeds maximum size of 64KB",
            ),
            (serde_json::json!({"wasm": {"url": ""}}), "wasm.url is required"),
        ] {
            assert_eq!(read("ns", "e", &spec).unwrap_err(), why);
        }
        let policy =
            |s: &str| match ext(serde_json::json!({"wasm": {"url": "file://fake.wasm", "failStrategy": s}})).code {
                Code::Wasm(w) => w.failure_policy,
                Code::Lua(_) => unreachable!(),
            };
        assert_eq!(
            [policy(""), policy("FAIL_CLOSE"), policy("FAIL_OPEN"), policy("FAIL_RELOAD")],
            ["FAIL_CLOSED", "FAIL_CLOSED", "FAIL_OPEN", "FAIL_RELOAD"]
        );
        let Code::Wasm(w) =
            ext(serde_json::json!({"wasm": {"url": "oci://x", "imagePullSecret": "kubernetes://other/s",
            "vmConfig": {"env": [{"name": "POD_NAME", "valueFrom": "HOST"}, {"name": "ENV1", "value": "VAL1"}]}}}))
            .code
        else {
            unreachable!()
        };
        assert_eq!(w.host_env, Some(vec!["POD_NAME".to_owned()]));
        assert_eq!(w.env, [("ENV1".to_owned(), "VAL1".to_owned())]);
        assert_eq!(w.pull_secret, Some(("ns".to_owned(), "s".to_owned())), "forced into the extension's namespace");
        // A bare name becomes `kubernetes://<name>` (credentials.ToResourceName)
        // and ParseResourceName takes `namespace/name`, dropping further parts.
        for (written, name) in [("pull", "pull"), ("other/pull", "pull"), ("kubernetes://a/b/c", "b")] {
            let Code::Wasm(w) = ext(serde_json::json!({"wasm": {"url": "oci://x", "imagePullSecret": written}})).code
            else {
                unreachable!()
            };
            assert_eq!(w.pull_secret, Some(("ns".to_owned(), name.to_owned())), "{written}");
        }
    }

    /// pilot/pkg/config/kube/extensions/translate_test.go: a WasmPlugin's
    /// phase, singular targetRef and match carried over.
    #[test]
    fn wasm_plugins_translate_as_istiods_translate_test() {
        let spec = serde_json::json!({"url": "oci://x", "phase": "AUTHZ", "priority": 5,
            "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
            "match": [{"mode": "SERVER", "ports": [{"number": 9090}]}]});
        let e = read("ns", &format!("p{WASM_PLUGIN_MARKER}"), &from_wasm_plugin(&spec)).unwrap();
        assert_eq!(e.phase, Phase::Authz);
        assert_eq!(e.priority, 5);
        let gateway = TargetRef {
            group: "gateway.networking.k8s.io".into(),
            kind: "Gateway".into(),
            name: "gw".into(),
            ..Default::default()
        };
        assert_eq!(e.target_refs, [gateway]);
        assert_eq!(e.matches, [(Mode::Server, vec![9090])]);
        assert_eq!(e.resource_name, "extensions.istio.io/trafficextension/ns.p~istio-translated-wasmplugin");
        // A gateway of that Gateway in the namespace only.
        let gw: Vec<(Arc<str>, Arc<str>)> = vec![(istiod_envoyfilter::filters::GATEWAY_NAME.into(), "gw".into())];
        assert!(e.attaches("ns", &gw, true) && !e.attaches("other", &gw, true) && !e.attaches("ns", &[], true));
        // No priority sorts last (istiod's math.MinInt32).
        assert_eq!(ext(serde_json::json!({"lua": {"inlineCode": "x"}})).priority, i64::from(i32::MIN));
    }
}
