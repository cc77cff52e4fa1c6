//! Sidecar injection (`/inject`), as istiod's `pkg/kube/inject` does it:
//! the injector's configuration and values as the chart's
//! `istio-sidecar-injector` ConfigMap gives them (files `config` and
//! `values`), istiod's policy (`injectRequired`), the chart's own templates
//! rendered by our Go template engine over the data istiod gives them
//! (`SidecarTemplateData`, with Go's field names), each rendered pod laid
//! over the original by strategic merge, then istiod's post-processing
//! ([`post`]) and a JSONPatch from the pod the API server sent to the
//! injected one.
//!
//! Facts and file names are in docs/design/injection-notes.md.

pub mod gateway;
pub mod post;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value as Json, json};

use super::gotmpl::{Template, Value};
use super::{funcs, jsonpatch, smp};
use crate::proxy_config;
use istiod_mesh::meshconfig::LabelSelector;

/// The status annotation istiod writes on an injected pod.
pub const STATUS_ANNOTATION: &str = "sidecar.istio.io/status";
/// Namespaces istiod never injects (`initializer.go`).
const IGNORED_NAMESPACES: [&str; 4] = ["kube-system", "kube-public", "kube-node-lease", "local-path-storage"];

/// The injector's `config` (istiod's `inject.Config`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RawConfig {
    policy: String,
    default_templates: Vec<String>,
    templates: BTreeMap<String, String>,
    aliases: BTreeMap<String, Vec<String>>,
    never_inject_selector: Option<Vec<LabelSelector>>,
    always_inject_selector: Option<Vec<LabelSelector>>,
    injected_annotations: Option<BTreeMap<String, String>>,
}

/// What istiod reads from the mesh configuration to inject.
#[derive(Debug, Clone)]
pub struct MeshInputs {
    /// `defaultConfig` laid over istiod's default ProxyConfig (proto JSON).
    pub default_config: Map<String, Json>,
    /// `enablePrometheusMerge` (true).
    pub prometheus_merge: bool,
    /// `inboundTrafficPolicy.mode == LOCALHOST`.
    pub inbound_localhost: bool,
    /// `proxyListenPort`, `proxyInboundListenPort`.
    pub listen_ports: (u16, u16),
    /// `trustDomain`.
    pub trust_domain: String,
    /// `extensionProviders` (for `otelResourceAttributes`).
    pub extension_providers: Json,
}

impl MeshInputs {
    /// From the mesh configuration's YAML (empty: istiod's defaults).
    pub fn parse(yaml: &str) -> Result<MeshInputs, String> {
        let raw: Json = if yaml.trim().is_empty() {
            json!({})
        } else {
            serde_yaml_ng::from_str(yaml).map_err(|e| format!("mesh config: {e}"))?
        };
        let raw = if raw.is_null() { json!({}) } else { raw };
        let mut default_config = proxy_config::defaults();
        if let Some(d) = raw.get("defaultConfig").and_then(Json::as_object) {
            proxy_config::overlay(&mut default_config, d);
        }
        let port = |k: &str, d: u16| raw.get(k).and_then(Json::as_u64).map_or(d, |p| p as u16);
        Ok(MeshInputs {
            default_config,
            prometheus_merge: raw.get("enablePrometheusMerge").and_then(Json::as_bool).unwrap_or(true),
            inbound_localhost: raw.pointer("/inboundTrafficPolicy/mode").and_then(Json::as_str) == Some("LOCALHOST"),
            listen_ports: (port("proxyListenPort", 15001), port("proxyInboundListenPort", 15006)),
            trust_domain: raw.get("trustDomain").and_then(Json::as_str).unwrap_or("cluster.local").to_owned(),
            extension_providers: raw.get("extensionProviders").cloned().unwrap_or(json!([])),
        })
    }
}

/// What injection reads of the cluster besides the pod: the ProxyConfig
/// resources in force (`networking.istio.io/v1beta1`, as istiod's
/// `ProxyConfigs` keeps them for `EffectiveProxyConfig`) and the nodes'
/// kubelet versions (for `ENABLE_NATIVE_SIDECARS=auto`).
#[derive(Debug, Clone, Default)]
pub struct ClusterInputs {
    /// The mesh's root namespace (its selector-less configs apply mesh-wide).
    pub root_namespace: String,
    /// Every ProxyConfig resource, by namespace and name.
    pub items: Vec<ProxyConfigResource>,
    /// Node name → `status.nodeInfo.kubeletVersion`; `None` before the
    /// config source has said (istiod's nil node client).
    pub nodes: Option<BTreeMap<String, String>>,
}

impl ClusterInputs {
    /// What the injector reads of the cluster's objects: every ProxyConfig
    /// and every node's kubelet version.
    pub fn of(objects: &istiod_config::objects::Objects, root_namespace: &str) -> ClusterInputs {
        use istiod_config::istio::{IstioKind, IstioSpec};
        let items = objects
            .istio
            .iter()
            .filter_map(|o| match &o.spec {
                IstioSpec::Ext(IstioKind::ProxyConfig, spec) => {
                    Some(ProxyConfigResource::from_spec(o.meta.ns(), &o.meta.name, &spec.0))
                }
                _ => None,
            })
            .collect();
        let nodes = objects
            .nodes
            .iter()
            .map(|n| (n.metadata.name.clone(), n.status.node_info.kubelet_version.clone()))
            .collect();
        ClusterInputs { root_namespace: root_namespace.to_owned(), items, nodes: Some(nodes) }
    }
}

/// istiod's `DetectNativeSidecar` for `auto`: the pod's node when it is
/// known, else every node, must run kubelet 1.33 or later (an empty node
/// list qualifies); no node information disqualifies.
fn detect_native(nodes: Option<&BTreeMap<String, String>>, node_name: &str) -> bool {
    let Some(nodes) = nodes else {
        tracing::warn!(target: "injection", "configured to auto detect native sidecar support, but couldn't find a client");
        return false;
    };
    // hashicorp go-version: `v1.33.0` → segments [1, 33, 0].
    let ok = |v: &str| {
        let v = v.trim_start_matches(['v', 'V']);
        let minor = v.split(['.', '-', '+']).nth(1).and_then(|m| m.parse::<u32>().ok());
        minor.is_some_and(|m| m >= 33)
    };
    if !node_name.is_empty()
        && let Some(v) = nodes.get(node_name)
    {
        return ok(v);
    }
    nodes.values().all(|v| ok(v))
}

/// One ProxyConfig resource, in MeshConfig's ProxyConfig terms
/// (`toMeshConfigProxyConfig`: concurrency, environmentVariables as
/// proxyMetadata, image).
#[derive(Debug, Clone)]
pub struct ProxyConfigResource {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `selector.matchLabels`; `None` for a namespace-wide one.
    pub selector: Option<BTreeMap<String, String>>,
    /// The fields it sets.
    pub config: Map<String, Json>,
}

impl ProxyConfigResource {
    /// From a resource's spec.
    pub fn from_spec(namespace: &str, name: &str, spec: &Json) -> Self {
        let mut config = Map::new();
        if let Some(c) = spec.get("concurrency").filter(|c| !c.is_null()) {
            config.insert("concurrency".into(), c.clone());
        }
        if let Some(e) = spec.get("environmentVariables").filter(|e| e.is_object()) {
            config.insert("proxyMetadata".into(), e.clone());
        }
        if let Some(i) = spec.get("image").filter(|i| !i.is_null()) {
            config.insert("image".into(), i.clone());
        }
        let selector = spec.get("selector").filter(|s| !s.is_null()).map(|s| string_map(s.get("matchLabels")));
        ProxyConfigResource { namespace: namespace.into(), name: name.into(), selector, config }
    }
}

/// Settings from istiod's environment that shape injection.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `REVISION` ("" is the default revision).
    pub revision: String,
    /// `ENABLE_NATIVE_SIDECARS`: `Some(true)` for `true`, `Some(false)`
    /// for `false` or a value istiod does not know, `None` for `auto` (the
    /// default: the nodes' kubelet versions decide, [`detect_native`]).
    pub native_sidecars: Option<bool>,
    /// `COMPLIANCE_POLICY`.
    pub compliance_policy: String,
}

impl Env {
    /// From the process environment.
    pub fn from_env() -> Env {
        let native = std::env::var("ENABLE_NATIVE_SIDECARS").unwrap_or_else(|_| "auto".into());
        let native_sidecars = match native.as_str() {
            "true" => Some(true),
            "false" => Some(false),
            "auto" => None,
            other => {
                tracing::warn!(target: "injection", value = other, "Unknown value for ENABLE_NATIVE_SIDECARS, defaulting to false");
                Some(false)
            }
        };
        Env {
            revision: std::env::var("REVISION").unwrap_or_default(),
            native_sidecars,
            compliance_policy: std::env::var("COMPLIANCE_POLICY").unwrap_or_default(),
        }
    }
}

/// A loaded injector: configuration, parsed templates, values, mesh.
pub struct Injector {
    policy: String,
    default_templates: Vec<String>,
    aliases: BTreeMap<String, Vec<String>>,
    never: Vec<LabelSelector>,
    always: Vec<LabelSelector>,
    injected_annotations: BTreeMap<String, String>,
    /// Each template, or why it did not parse (istiod refuses the whole
    /// configuration for one bad template; here only the pods that ask
    /// for a bad one are refused, and the log says why at load).
    templates: BTreeMap<String, Result<Template, String>>,
    /// The templates as written (`/debug/inject`).
    raw_templates: BTreeMap<String, String>,
    values: Json,
    values_data: Value,
    mesh: MeshInputs,
    env: Env,
}

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(pub String);

impl Injector {
    /// From the ConfigMap's `config` and `values` texts.
    pub fn new(config: &str, values: &str, mesh: MeshInputs, env: Env) -> Result<Injector, LoadError> {
        let raw: RawConfig = serde_yaml_ng::from_str::<Option<RawConfig>>(config)
            .map_err(|e| LoadError(format!("config: {e}")))?
            .unwrap_or_default();
        let values: Json = if values.trim().is_empty() {
            json!({})
        } else {
            serde_yaml_ng::from_str(values).map_err(|e| LoadError(format!("values: {e}")))?
        };
        if !values.is_object() {
            return Err(LoadError("values: not a map".into()));
        }
        let templates = raw
            .templates
            .iter()
            .map(|(name, src)| {
                let t = Template::parse(name, src, funcs::funcs()).map_err(|e| e.to_string());
                if let Err(e) = &t {
                    tracing::warn!(target: "injection", template = %name, error = %e, "injection template does not parse");
                }
                (name.clone(), t)
            })
            .collect();
        let values_data = Value::from(&values);
        Ok(Injector {
            policy: raw.policy,
            default_templates: if raw.default_templates.is_empty() {
                vec!["sidecar".into()]
            } else {
                raw.default_templates
            },
            aliases: raw.aliases,
            never: raw.never_inject_selector.unwrap_or_default(),
            always: raw.always_inject_selector.unwrap_or_default(),
            injected_annotations: raw.injected_annotations.unwrap_or_default(),
            templates,
            raw_templates: raw.templates,
            values,
            values_data,
            mesh,
            env,
        })
    }

    /// The templates by name as written (istiod's `RawTemplates`, which
    /// `/debug/inject` shows).
    pub fn raw_templates(&self) -> &BTreeMap<String, String> {
        &self.raw_templates
    }

    /// From a directory holding `config` and `values` (the mounted
    /// ConfigMap, `/var/lib/istio/inject`).
    pub fn load(dir: &Path, mesh: MeshInputs, env: Env) -> Result<Injector, LoadError> {
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f)).map_err(|e| LoadError(format!("{}: {e}", dir.join(f).display())))
        };
        Injector::new(&read("config")?, &read("values")?, mesh, env)
    }

    /// Names of the templates that parsed.
    pub fn template_names(&self) -> Vec<&str> {
        self.templates.iter().filter(|(_, t)| t.is_ok()).map(|(n, _)| n.as_str()).collect()
    }

    fn value(&self, pointer: &str) -> Option<&Json> {
        self.values.pointer(pointer)
    }
}

/// What became of one pod.
#[derive(Debug)]
pub enum Outcome {
    /// Left alone by policy.
    Skipped,
    /// Injected: the JSONPatch.
    Patched(Vec<Json>),
}

fn string_map(v: Option<&Json>) -> BTreeMap<String, String> {
    v.and_then(Json::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_owned))).collect())
        .unwrap_or_default()
}

/// istiod's `injectRequired`.
pub fn inject_required(inj: &Injector, pod: &Json) -> bool {
    if pod.pointer("/spec/hostNetwork").and_then(Json::as_bool) == Some(true) {
        return false;
    }
    let ns = pod.pointer("/metadata/namespace").and_then(Json::as_str).unwrap_or_default();
    if IGNORED_NAMESPACES.contains(&ns) {
        return false;
    }
    let labels = string_map(pod.pointer("/metadata/labels"));
    let annotations = string_map(pod.pointer("/metadata/annotations"));
    let selector = labels.get("sidecar.istio.io/inject").or_else(|| annotations.get("sidecar.istio.io/inject"));
    let (mut inject, mut use_default) = (false, false);
    match selector.map(String::as_str) {
        Some("true") => inject = true,
        Some("false") => {}
        _ => use_default = true,
    }
    let empty = |s: &LabelSelector| s.match_labels.is_empty() && s.match_expressions.is_empty();
    if use_default && inj.never.iter().any(|s| !empty(s) && s.matches(&labels)) {
        (inject, use_default) = (false, false);
    }
    if use_default && inj.always.iter().any(|s| !empty(s) && s.matches(&labels)) {
        (inject, use_default) = (true, false);
    }
    match inj.policy.as_str() {
        "enabled" => use_default || inject,
        "disabled" => !use_default && inject,
        other => {
            tracing::error!(target: "injection", policy = other, "invalid injection policy; not injecting");
            false
        }
    }
}

/// `W:parseInjectEnvs`: `/inject/cluster/c1/net/n1` and `:ENV:` forms.
pub fn path_envs(path: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let parts: Vec<&str> = path.trim_end_matches('/').splitn(3, '/').collect();
    if parts.len() < 3 {
        return out;
    }
    let mut put = |k: &str, v: String| {
        let k = match k {
            "cluster" => "ISTIO_META_CLUSTER_ID".to_owned(),
            "net" => "ISTIO_META_NETWORK".to_owned(),
            k => k.to_uppercase(),
        };
        out.insert(k, v);
    };
    if let Some(rest) = parts[2].strip_prefix(":ENV:") {
        for kv in rest.split(":ENV:") {
            if let Some((k, v)) = kv.split_once('=').filter(|(k, _)| !k.is_empty()) {
                put(k, v.to_owned());
            }
        }
    } else {
        let items: Vec<&str> = parts[2].split('/').collect();
        for pair in items.chunks_exact(2) {
            put(pair[0], pair[1].replace("--slash--", "/"));
        }
    }
    out
}

/// The injection status istiod records (`SidecarInjectionStatus`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Status {
    init_containers: Option<Vec<String>>,
    containers: Option<Vec<String>>,
}

fn status_of(pod: &Json) -> Option<Status> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(STATUS_ANNOTATION))
        .and_then(Json::as_str)
        .and_then(|s| serde_json::from_str(s).ok())
}

/// `I:stripPod` + `W:reinsertOverrides`: the pod as it was before an
/// earlier injection, for the template data.
fn strip_pod(pod: &Json, status_port: &str) -> Json {
    let mut p = pod.clone();
    if let Some(status) = status_of(pod) {
        for (field, names) in [("containers", status.containers), ("initContainers", status.init_containers)] {
            let names: std::collections::HashSet<String> = names.unwrap_or_default().into_iter().collect();
            if let Some(Json::Array(list)) = p.pointer_mut(&format!("/spec/{field}")) {
                list.retain(|c| !c["name"].as_str().is_some_and(|n| names.contains(n)));
            }
        }
        if let Some(Json::Object(a)) = p.pointer_mut("/metadata/annotations") {
            let port = a.iter().find(|(k, _)| post::sanitize(k) == "prometheus_io_port").map(|(_, v)| v.clone());
            if port.as_ref().and_then(Json::as_str) == Some(status_port) {
                a.retain(|k, _| !post::PROMETHEUS_KEYS.contains(&post::sanitize(k).as_str()));
            }
            a.remove(STATUS_ANNOTATION);
        }
    }
    // Containers the user overrode come back.
    let overrides = pod
        .pointer("/metadata/annotations/proxy.istio.io~1overrides")
        .and_then(Json::as_str)
        .and_then(|s| serde_json::from_str::<Json>(s).ok());
    if let Some(o) = overrides {
        let mut seen: BTreeMap<&str, std::collections::HashSet<String>> = BTreeMap::new();
        for field in ["containers", "initContainers"] {
            for c in o.get(field).and_then(Json::as_array).into_iter().flatten() {
                let list = p["spec"].as_object_mut().map(|s| s.entry(field).or_insert_with(|| json!([])));
                if let Some(Json::Array(list)) = list {
                    let have: &mut std::collections::HashSet<String> =
                        seen.entry(field).or_insert_with(|| list.iter().map(|x| x["name"].to_string()).collect());
                    if have.insert(c["name"].to_string()) {
                        list.push(c.clone());
                    }
                }
            }
        }
    }
    p
}

/// `kube.GetDeployMetaFromPod`: (name, namespace, kind, apiVersion).
fn deploy_meta(pod: &Json) -> (String, String, String, String) {
    let meta = &pod["metadata"];
    let s = |v: &Json| v.as_str().unwrap_or_default().to_owned();
    let (mut name, ns) = (s(&meta["name"]), s(&meta["namespace"]));
    let (mut kind, mut api) = ("Pod".to_owned(), "v1".to_owned());
    let controller = meta["ownerReferences"]
        .as_array()
        .and_then(|refs| refs.iter().find(|r| r["controller"].as_bool() == Some(true)));
    if !s(&meta["generateName"]).is_empty()
        && let Some(r) = controller
    {
        (api, kind, name) = (s(&r["apiVersion"]), s(&r["kind"]), s(&r["name"]));
        let label = |k: &str| meta["labels"].get(k).and_then(Json::as_str).map(str::to_owned);
        match kind.as_str() {
            "ReplicaSet" => {
                if let Some(h) = label("pod-template-hash")
                    && let Some(n) = name.strip_suffix(&format!("-{h}"))
                {
                    (name, kind) = (n.to_owned(), "Deployment".into());
                } else if label("rollouts-pod-template-hash").is_some() {
                    (kind, api) = ("Rollout".into(), "v1alpha1".into());
                }
            }
            "ReplicationController" => {
                if let Some(dc) = label("deploymentconfig") {
                    (name, kind) = (dc, "DeploymentConfig".into());
                }
            }
            "Job" => {
                // (.+)-\d{8,10}$
                if let Some((base, digits)) = name.rsplit_once('-')
                    && (8..=10).contains(&digits.len())
                    && digits.bytes().all(|b| b.is_ascii_digit())
                    && !base.is_empty()
                {
                    (name, kind, api) = (base.to_owned(), "CronJob".into(), "batch/v1".into());
                }
            }
            _ => {}
        }
    }
    if name.is_empty() {
        name = s(&meta["name"]);
    }
    (name, ns, kind, api)
}

/// Go's field name for a JSON key (`serviceAccountName` →
/// `ServiceAccountName`).
fn go_name(k: &str) -> String {
    // Go spells this initialism in capitals (metav1.ObjectMeta.UID).
    if k == "uid" {
        return "UID".into();
    }
    let mut c = k.chars();
    c.next().map(|f| f.to_ascii_uppercase()).into_iter().chain(c).collect()
}

/// JSON key → template value with Go's field names; maps of data (labels,
/// annotations, node selectors, quantities) keep their keys and are
/// string maps.
fn go_struct(v: &Json) -> Value {
    match v {
        Json::Object(m) => Value::Map(
            Arc::new(
                m.iter()
                    .map(|(k, v)| {
                        let inner = match k.as_str() {
                            "labels" | "annotations" | "nodeSelector" | "proxyMetadata" => {
                                Value::string_map(&string_map(Some(v)))
                            }
                            "limits" | "requests" | "runtimeValues" => Value::from(v),
                            _ => go_struct(v),
                        };
                        (go_name(k), inner)
                    })
                    .collect(),
            ),
            false,
        ),
        Json::Array(a) => Value::List(Arc::new(a.iter().map(go_struct).collect())),
        v => Value::from(v),
    }
}

fn set(m: &mut Value, k: &str, v: Value) {
    if let Value::Map(m, _) = m {
        Arc::make_mut(m).insert(k.to_owned(), v);
    }
}

fn set_default(m: &mut Value, k: &str, v: Value) {
    if let Value::Map(m, _) = m {
        Arc::make_mut(m).entry(k.to_owned()).or_insert(v);
    }
}

/// `I:ProxyImage` / `ProxyInitImage`.
fn proxy_image(inj: &Injector, init: bool, image_type: Option<&str>, annotations: &BTreeMap<String, String>) -> String {
    let hub = inj.value("/global/hub").and_then(Json::as_str).unwrap_or_default();
    let ptr = if init { "/global/proxy_init/image" } else { "/global/proxy/image" };
    let name = inj.value(ptr).and_then(Json::as_str).filter(|s| !s.is_empty()).unwrap_or("proxyv2");
    let tag = match inj.value("/global/tag") {
        Some(Json::String(s)) => s.clone(),
        Some(Json::Null) | None => String::new(),
        Some(v) => super::gotmpl::print(&Value::from(v)),
    };
    let mut image_type = image_type
        .map(str::to_owned)
        .unwrap_or_else(|| inj.value("/global/variant").and_then(Json::as_str).unwrap_or_default().to_owned());
    if let Some(t) = annotations.get("sidecar.istio.io/proxyImageType") {
        image_type = t.clone();
    }
    let tag = if image_type.is_empty() {
        tag
    } else {
        let base = tag.strip_suffix("-distroless").or_else(|| tag.strip_suffix("-debug")).unwrap_or(&tag).to_owned();
        if image_type == "default" { base } else { format!("{base}-{image_type}") }
    };
    if name.contains('/') { format!("{name}:{tag}") } else { format!("{hub}/{name}:{tag}") }
}

/// The effective ProxyConfig of a pod, istiod's `EffectiveProxyConfig`:
/// istiod's defaults < the mesh's `defaultConfig` < selector-less
/// ProxyConfigs of the root namespace < those of the pod's namespace <
/// the `proxy.istio.io/config` annotation < ProxyConfigs selecting the
/// pod's labels.
fn proxy_config(
    inj: &Injector,
    crs: &ClusterInputs,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<Map<String, Json>, String> {
    let mut pc = inj.mesh.default_config.clone();
    let root = crs.root_namespace.as_str();
    let level = |ns: &str, pc: &mut Map<String, Json>| {
        for r in crs.items.iter().filter(|r| r.namespace == ns && r.selector.is_none()) {
            proxy_config::overlay(pc, &r.config);
        }
    };
    if !root.is_empty() {
        level(root, &mut pc);
    }
    if namespace != root {
        level(namespace, &mut pc);
    }
    let mut workload = Map::new();
    if let Some(a) = annotations.get("proxy.istio.io/config") {
        let over: Json = istiod_config::yaml::from_str(a).map_err(|e| format!("proxy.istio.io/config: {e}"))?;
        match over {
            Json::Object(m) => proxy_config::overlay(&mut workload, &m),
            Json::Null => {}
            _ => return Err("proxy.istio.io/config: not a map".into()),
        }
    }
    for r in crs.items.iter().filter(|r| r.namespace == namespace) {
        if let Some(sel) = &r.selector
            && sel.iter().all(|(k, v)| labels.get(k) == Some(v))
        {
            proxy_config::overlay(&mut workload, &r.config);
        }
    }
    proxy_config::overlay(&mut pc, &workload);
    Ok(pc)
}

/// `.ProxyConfig` as the templates read it (the proto's defaults for the
/// fields they call methods on).
fn proxy_config_value(pc: &Map<String, Json>) -> Value {
    let mut proxy = go_struct(&Json::Object(pc.clone()));
    set_default(&mut proxy, "InterceptionMode", Value::Str("REDIRECT".into()));
    set_default(&mut proxy, "ProxyMetadata", Value::Map(Default::default(), true));
    proxy
}

/// `.MeshConfig`: the fields the templates read.
fn mesh_config_value(inj: &Injector) -> Value {
    let mut mesh = Value::Map(Default::default(), false);
    set(&mut mesh, "ProxyListenPort", Value::Num(f64::from(inj.mesh.listen_ports.0)));
    set(&mut mesh, "ProxyInboundListenPort", Value::Num(f64::from(inj.mesh.listen_ports.1)));
    set(&mut mesh, "TrustDomain", Value::Str(inj.mesh.trust_domain.clone()));
    set(&mut mesh, "ExtensionProviders", Value::from(&inj.mesh.extension_providers));
    mesh
}

/// The template data istiod passes (`SidecarTemplateData`).
fn template_data(
    inj: &Injector,
    stripped: &Json,
    pc: &Map<String, Json>,
    native: bool,
    meta: &(String, String, String, String),
) -> Value {
    let annotations = string_map(stripped.pointer("/metadata/annotations"));
    let mut object_meta = go_struct(stripped.get("metadata").unwrap_or(&json!({})));
    for k in ["Labels", "Annotations"] {
        set_default(&mut object_meta, k, Value::Map(Default::default(), true));
    }
    for k in ["Name", "Namespace", "GenerateName"] {
        set_default(&mut object_meta, k, Value::Str(String::new()));
    }
    let mut spec = go_struct(stripped.get("spec").unwrap_or(&json!({})));
    set_default(&mut spec, "ServiceAccountName", Value::Str(String::new()));
    set_default(&mut spec, "Containers", Value::List(Default::default()));
    let proxy = proxy_config_value(pc);
    let mesh = mesh_config_value(inj);
    let image_type = pc.get("image").and_then(|i| i.get("imageType")).and_then(Json::as_str);
    let (name, ns, kind, api) = meta;
    let mut d = Value::Map(Default::default(), false);
    let type_meta = Value::Map(
        Arc::new(BTreeMap::from([
            ("APIVersion".to_owned(), Value::Str(api.clone())),
            ("Kind".to_owned(), Value::Str(kind.clone())),
        ])),
        false,
    );
    let deploy_meta = Value::Map(
        Arc::new(BTreeMap::from([
            ("Name".to_owned(), Value::Str(name.clone())),
            ("Namespace".to_owned(), Value::Str(ns.clone())),
        ])),
        false,
    );
    set(&mut d, "TypeMeta", type_meta);
    set(&mut d, "DeploymentMeta", deploy_meta);
    set(&mut d, "ObjectMeta", object_meta);
    set(&mut d, "Spec", spec);
    set(&mut d, "ProxyConfig", proxy);
    set(&mut d, "MeshConfig", mesh);
    set(&mut d, "Values", inj.values_data.clone());
    set(&mut d, "Revision", Value::Str(inj.env.revision.clone()));
    set(&mut d, "NativeSidecars", Value::Bool(native));
    set(&mut d, "ProxyImage", Value::Str(proxy_image(inj, false, image_type, &annotations)));
    set(&mut d, "ProxyInitImage", Value::Str(proxy_image(inj, true, None, &annotations)));
    set(&mut d, "ProxyUID", Value::Num(1337.0));
    set(&mut d, "ProxyGID", Value::Num(1337.0));
    let mode = if inj.mesh.inbound_localhost { "localhost" } else { "passthrough" };
    set(&mut d, "InboundTrafficPolicyMode", Value::Str(mode.into()));
    set(&mut d, "CompliancePolicy", Value::Str(inj.env.compliance_policy.clone()));
    d
}

/// Templates one pod may ask for (istiod has no bound; each is a render
/// and a merge of the whole pod, on the webhook's thread).
const MAX_TEMPLATES: usize = 32;

/// `I:selectTemplates` + `resolveAliases`.
fn select_templates(inj: &Injector, annotations: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
    let names: Vec<String> = match annotations.get("inject.istio.io/templates") {
        Some(list) => list.split(',').take(MAX_TEMPLATES + 1).map(|s| s.trim().to_owned()).collect(),
        None => inj.default_templates.clone(),
    };
    let names: Vec<String> =
        names.into_iter().flat_map(|n| inj.aliases.get(&n).cloned().unwrap_or_else(|| vec![n])).collect();
    if names.len() > MAX_TEMPLATES {
        return Err(format!("inject.istio.io/templates: more than {MAX_TEMPLATES} templates"));
    }
    Ok(names)
}

/// Parses a rendered template: YAML of a partial pod.
fn parse_rendered(text: &str) -> Result<Json, String> {
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    let v: Json = serde_yaml_ng::from_str(text).map_err(|e| {
        format!("failed parsing generated injected YAML (check Istio sidecar injector configuration): {e}")
    })?;
    match v {
        Json::Null => Ok(json!({})),
        Json::Object(_) => Ok(v),
        _ => {
            Err("failed parsing generated injected YAML (check Istio sidecar injector configuration): not a map".into())
        }
    }
}

fn container_index(pod: &Json, field: &str, name: &str) -> Option<usize> {
    pod.pointer(&format!("/spec/{field}"))?.as_array()?.iter().position(|c| c["name"] == name)
}

/// What Go's typed round trip drops from the injected containers: their
/// probes' `omitempty` integers at 0 (a template writes
/// `initialDelaySeconds: 0`; istiod's pod never shows it) and empty env
/// values.
fn drop_zero_probe_fields(pod: &mut Json, template_pod: &Json) {
    for field in ["containers", "initContainers"] {
        let injected: Vec<Json> = template_pod
            .pointer(&format!("/spec/{field}"))
            .and_then(Json::as_array)
            .map(|l| l.iter().map(|c| c["name"].clone()).collect())
            .unwrap_or_default();
        for f in ["containers", "initContainers"] {
            let Some(list) = pod.pointer_mut(&format!("/spec/{f}")).and_then(Json::as_array_mut) else { continue };
            for c in list.iter_mut().filter(|c| injected.contains(&c["name"])) {
                // EnvVar's `value` is omitempty too.
                for e in c.get_mut("env").and_then(Json::as_array_mut).into_iter().flatten() {
                    if let Some(e) = e.as_object_mut()
                        && e.get("value") == Some(&json!(""))
                    {
                        e.remove("value");
                    }
                }
                for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
                    if let Some(p) = c.get_mut(probe).and_then(Json::as_object_mut) {
                        p.retain(|k, v| {
                            !(matches!(
                                k.as_str(),
                                "initialDelaySeconds"
                                    | "timeoutSeconds"
                                    | "periodSeconds"
                                    | "successThreshold"
                                    | "failureThreshold"
                            ) && v.as_i64() == Some(0))
                        });
                    }
                }
            }
        }
    }
}

/// istiod decodes the merged pod into a typed `corev1.Pod`
/// (`applyOverlayYAML`), so what the `sidecar.istio.io/userVolume` and
/// `userVolumeMount` annotations add (rendered by the templates as given)
/// loses the fields Kubernetes does not know, and a value of the wrong type
/// refuses the pod. Only those entries are decoded again: the rest of the
/// pod came typed from the API server or from the chart.
fn typed_user_volumes(pod: &mut Json, annotations: &BTreeMap<String, String>) -> Result<(), String> {
    use k8s_openapi::api::core::v1::{Volume, VolumeMount};
    fn retype<T: serde::de::DeserializeOwned + serde::Serialize>(v: &mut Json, what: &str) -> Result<(), String> {
        let typed: T = serde_json::from_value(v.clone())
            .map_err(|e| format!("failed applying injection overlay: unmarshal patched pod: {what}: {e}"))?;
        *v = serde_json::to_value(typed).unwrap_or_default();
        Ok(())
    }
    let names = |key: &str| -> Vec<String> {
        annotations
            .get(key)
            .and_then(|a| serde_json::from_str::<Map<String, Json>>(a).ok())
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (volumes, mounts) = (names("sidecar.istio.io/userVolume"), names("sidecar.istio.io/userVolumeMount"));
    if volumes.is_empty() && mounts.is_empty() {
        return Ok(());
    }
    let named =
        |v: &Json, names: &[String]| v.get("name").and_then(Json::as_str).is_some_and(|n| names.iter().any(|x| x == n));
    for v in pod.pointer_mut("/spec/volumes").and_then(Json::as_array_mut).into_iter().flatten() {
        if named(v, &volumes) {
            retype::<Volume>(v, "Volume")?;
        }
    }
    for field in ["containers", "initContainers"] {
        for c in pod.pointer_mut(&format!("/spec/{field}")).and_then(Json::as_array_mut).into_iter().flatten() {
            for m in c.get_mut("volumeMounts").and_then(Json::as_array_mut).into_iter().flatten() {
                if named(m, &mounts) {
                    retype::<VolumeMount>(m, "VolumeMount")?;
                }
            }
        }
    }
    Ok(())
}

/// Injects `pod` (as the API server sent it): the JSONPatch, or why not.
/// `path` is the request's URL path (for `/inject/cluster/c/net/n`).
pub fn inject(inj: &Injector, crs: &ClusterInputs, pod: &Json, namespace: &str, path: &str) -> Result<Outcome, String> {
    inject_until(inj, crs, pod, namespace, path, None)
}

/// [`inject`], giving up once `deadline` has passed (the webhook's answer
/// was sent): the templates stop rendering, so the thread and the slot
/// are free again.
pub fn inject_until(
    inj: &Injector,
    crs: &ClusterInputs,
    pod: &Json,
    namespace: &str,
    path: &str,
    deadline: Option<std::time::Instant>,
) -> Result<Outcome, String> {
    let mut pod = pod.clone();
    if !pod.is_object() {
        return Err("the object is not a pod".into());
    }
    if let Some(m) = pod.get_mut("metadata").and_then(Json::as_object_mut) {
        m.remove("managedFields");
    }
    if pod.pointer("/metadata/namespace").and_then(Json::as_str).unwrap_or_default().is_empty() {
        let meta = pod.as_object_mut().map(|p| p.entry("metadata").or_insert_with(|| json!({})));
        if let Some(Json::Object(m)) = meta {
            m.insert("namespace".into(), json!(namespace));
        }
    }
    if !inject_required(inj, &pod) {
        return Ok(Outcome::Skipped);
    }
    let original = pod.clone();
    let annotations = string_map(pod.pointer("/metadata/annotations"));
    post::validate_annotations(&annotations)?;
    let pod_ns = pod.pointer("/metadata/namespace").and_then(Json::as_str).unwrap_or_default().to_owned();
    let pc = proxy_config(inj, crs, &pod_ns, &string_map(pod.pointer("/metadata/labels")), &annotations)?;
    let status_port = pc.get("statusPort").and_then(Json::as_u64).unwrap_or(15020).to_string();

    // Cluster and network: values, then the URL, then the pod's label.
    let mut proxy_envs = path_envs(path);
    let cluster = proxy_envs.get("ISTIO_META_CLUSTER_ID").cloned().unwrap_or_else(|| {
        inj.value("/global/multiCluster/clusterName").and_then(Json::as_str).unwrap_or_default().to_owned()
    });
    let mut network = proxy_envs
        .get("ISTIO_META_NETWORK")
        .cloned()
        .unwrap_or_else(|| inj.value("/global/network").and_then(Json::as_str).unwrap_or_default().to_owned());
    if let Some(n) = pod.pointer("/metadata/labels/topology.istio.io~1network").and_then(Json::as_str) {
        network = n.to_owned();
    }
    if !cluster.is_empty() {
        proxy_envs.insert("ISTIO_META_CLUSTER_ID".into(), cluster);
    }
    if !network.is_empty() {
        proxy_envs.insert("ISTIO_META_NETWORK".into(), network);
    }

    let stripped = strip_pod(&pod, &status_port);
    let meta = deploy_meta(&stripped);
    let detected = inj.env.native_sidecars.unwrap_or_else(|| {
        detect_native(crs.nodes.as_ref(), pod.pointer("/spec/nodeName").and_then(Json::as_str).unwrap_or_default())
    });
    let native = match annotations.get("sidecar.istio.io/nativeSidecar").map(String::as_str) {
        Some("true") => true,
        Some("false") => false,
        _ => detected,
    };
    let data = template_data(inj, &stripped, &pc, detected, &meta);
    let mut template_pod = json!({});
    let mut merged = pod;
    for name in select_templates(inj, &annotations)? {
        let t = match inj.templates.get(&name) {
            Some(Ok(t)) => t,
            Some(Err(e)) => return Err(format!("template {name:?} does not parse: {e}")),
            None => {
                let have: Vec<&str> = inj.templates.keys().map(String::as_str).collect();
                return Err(format!("requested template {name:?} not found; have {}", have.join(", ")));
            }
        };
        let text = t.render_until(&data, deadline).map_err(|e| format!("failed to run injection template: {e}"))?;
        let overlay = parse_rendered(&text)?;
        smp::merge_pod(&mut template_pod, &overlay);
        // A native sidecar the user customised in containers follows the
        // proxy into initContainers (`W:moveContainer`).
        if native
            && container_index(&template_pod, "initContainers", "istio-proxy").is_some()
            && let Some(i) = container_index(&merged, "containers", "istio-proxy")
            && let Some(Json::Array(cs)) = merged.pointer_mut("/spec/containers")
        {
            let c = cs.remove(i);
            if let Some(spec) = merged["spec"].as_object_mut() {
                let init = spec.entry("initContainers").or_insert_with(|| json!([]));
                if let Json::Array(init) = init {
                    init.push(c);
                }
            }
        }
        smp::merge_pod(&mut merged, &overlay);
    }
    typed_user_volumes(&mut merged, &annotations)?;
    drop_zero_probe_fields(&mut merged, &template_pod);
    post::reapply_overwritten_containers(&mut merged, &original, &template_pod, &pc)?;
    post::post_process(inj, &mut merged, &template_pod, &proxy_envs, &pc, &status_port)?;
    Ok(Outcome::Patched(jsonpatch::diff(&original, &merged)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn injector(config: &str) -> Injector {
        Injector::new(config, "{}", MeshInputs::parse("").unwrap(), Env::default()).unwrap()
    }

    fn pod(ns: &str, labels: Json, annotations: Json, host_network: bool) -> Json {
        json!({"metadata": {"namespace": ns, "labels": labels, "annotations": annotations},
            "spec": {"hostNetwork": host_network, "containers": [{"name": "a"}]}})
    }

    /// istiod's `TestInjectRequired` rules (pkg/kube/inject/inject_test.go).
    #[test]
    fn inject_required_follows_istiods_policy() {
        let enabled = injector("policy: enabled");
        let disabled = injector("policy: disabled");
        let none = json!({});
        let cases = [
            // (policy injector, pod, want)
            (&enabled, pod("app", none.clone(), none.clone(), false), true),
            (&disabled, pod("app", none.clone(), none.clone(), false), false),
            (&enabled, pod("app", none.clone(), none.clone(), true), false),
            (&enabled, pod("kube-system", none.clone(), none.clone(), false), false),
            (&enabled, pod("app", none.clone(), json!({"sidecar.istio.io/inject": "false"}), false), false),
            (&disabled, pod("app", none.clone(), json!({"sidecar.istio.io/inject": "true"}), false), true),
            // Only the exact words count: "TRUE" falls back to the policy.
            (&disabled, pod("app", none.clone(), json!({"sidecar.istio.io/inject": "TRUE"}), false), false),
            (&enabled, pod("app", none.clone(), json!({"sidecar.istio.io/inject": "FALSE"}), false), true),
            // The label wins over the annotation.
            (
                &enabled,
                pod(
                    "app",
                    json!({"sidecar.istio.io/inject": "false"}),
                    json!({"sidecar.istio.io/inject": "true"}),
                    false,
                ),
                false,
            ),
            // Other values use the policy.
            (&disabled, pod("app", none.clone(), json!({"sidecar.istio.io/inject": "yes"}), false), false),
            (&enabled, pod("app", none.clone(), json!({"sidecar.istio.io/inject": "yes"}), false), true),
        ];
        for (i, (inj, p, want)) in cases.into_iter().enumerate() {
            assert_eq!(inject_required(inj, &p), want, "case {i}: {p}");
        }
        // Selectors decide only when the pod did not; never wins over always.
        let sel = injector(
            "policy: disabled\nalwaysInjectSelector:\n- matchLabels: {app: on}\n- matchExpressions: [{key: both, operator: Exists}]\n\
             neverInjectSelector:\n- matchLabels: {app: off}\n- matchExpressions: [{key: both, operator: Exists}]\n- {}\n",
        );
        assert!(inject_required(&sel, &pod("x", json!({"app": "on"}), none.clone(), false)));
        assert!(!inject_required(&sel, &pod("x", json!({"app": "off"}), none.clone(), false)));
        assert!(!inject_required(&sel, &pod("x", json!({"both": "1"}), none.clone(), false)));
        assert!(
            !inject_required(&sel, &pod("x", json!({"other": "1"}), none.clone(), false)),
            "an empty selector matches nothing"
        );
        assert!(!inject_required(
            &sel,
            &pod("x", json!({"app": "on"}), json!({"sidecar.istio.io/inject": "false"}), false)
        ));
        // No policy: nothing is injected, as istiod.
        assert!(!inject_required(
            &injector(""),
            &pod("app", none.clone(), json!({"sidecar.istio.io/inject": "true"}), false)
        ));
    }

    /// pilot/pkg/model/proxy_config.go `EffectiveProxyConfig`: root
    /// namespace < pod namespace < annotation < workload selector.
    #[test]
    fn proxy_config_resources_apply_in_istiods_order() {
        let inj = Injector::new(
            "policy: enabled\ntemplates:\n  sidecar: |\n    metadata:\n      annotations:\n        pc: '{{ protoToJSON .ProxyConfig }}'\n",
            "{}",
            MeshInputs::parse("defaultConfig: {concurrency: 1}").unwrap(),
            Env::default(),
        )
        .unwrap();
        let r = |ns: &str, name: &str, spec: Json| ProxyConfigResource::from_spec(ns, name, &spec);
        let crs = ClusterInputs {
            nodes: None,
            root_namespace: "istio-system".into(),
            items: vec![
                r(
                    "istio-system",
                    "mesh",
                    json!({"concurrency": 2, "environmentVariables": {"A": "root", "B": "root"}}),
                ),
                r("app", "ns", json!({"concurrency": 3, "environmentVariables": {"B": "ns"}})),
                r(
                    "app",
                    "wl",
                    json!({"selector": {"matchLabels": {"app": "r"}}, "image": {"imageType": "distroless"}}),
                ),
                r("other", "ns", json!({"concurrency": 9})),
            ],
        };
        let pc_of = |labels: Json, annotations: Json| -> Json {
            let p = pod("app", labels, annotations, false);
            let Ok(Outcome::Patched(ops)) = inject(&inj, &crs, &p, "app", "") else { panic!("injected") };
            let op = ops.iter().find(|o| o["path"] == "/metadata/annotations/pc").expect("the annotation added");
            serde_json::from_str(op["value"].as_str().unwrap()).unwrap()
        };
        assert_eq!(pc_of(json!({}), json!({})), json!({"concurrency": 3, "proxyMetadata": {"A": "root", "B": "ns"}}));
        assert_eq!(
            pc_of(json!({"app": "r"}), json!({"proxy.istio.io/config": "concurrency: 5\nimage: {imageType: debug}"})),
            json!({"concurrency": 5, "proxyMetadata": {"A": "root", "B": "ns"}, "image": {"imageType": "distroless"}}),
            "the annotation wins over namespaces, a selecting resource over the annotation"
        );
    }

    /// pkg/kube/inject/webhook.go `DetectNativeSidecar`.
    #[test]
    fn native_sidecars_follow_the_nodes_kubelets() {
        let nodes =
            |v: &[(&str, &str)]| v.iter().map(|(n, k)| ((*n).to_owned(), (*k).to_owned())).collect::<BTreeMap<_, _>>();
        assert!(!detect_native(None, ""), "no node information: off");
        assert!(detect_native(Some(&nodes(&[])), ""), "no nodes: on");
        let mixed = nodes(&[("node-1", "v1.33.0"), ("node-2", "v1.28.0")]);
        assert!(!detect_native(Some(&mixed), ""), "one old node: off");
        assert!(detect_native(Some(&mixed), "node-1"), "the pod's node decides");
        assert!(!detect_native(Some(&mixed), "node-2"));
        assert!(!detect_native(Some(&mixed), "node-9"), "an unknown node: all nodes decide");
        assert!(detect_native(Some(&nodes(&[("a", "v1.33.0"), ("b", "v1.34.1-gke.100")])), ""));
        assert!(!detect_native(Some(&nodes(&[("a", "garbage")])), ""), "an unreadable version: off");
    }

    /// istiod's `TestParseInjectEnvs`.
    #[test]
    fn url_paths_give_proxy_envs() {
        let e = |p: &str| path_envs(p).into_iter().collect::<Vec<_>>();
        assert!(e("/inject").is_empty());
        assert!(e("/inject/").is_empty());
        assert_eq!(
            e("/inject/cluster/cluster1/net/network1"),
            [("ISTIO_META_CLUSTER_ID".into(), "cluster1".into()), ("ISTIO_META_NETWORK".into(), "network1".into())]
        );
        assert_eq!(
            e("/inject/cluster/c1/net/n1/foo"),
            e("/inject/cluster/c1/net/n1"),
            "a key without a value is ignored"
        );
        assert_eq!(e("/inject/foo/a--slash--b"), [("FOO".into(), "a/b".into())]);
        assert_eq!(
            e("/inject/:ENV:cluster=c2:ENV:net=n2:ENV:EMPTY=:ENV:=x"),
            [
                ("EMPTY".into(), String::new()),
                ("ISTIO_META_CLUSTER_ID".into(), "c2".into()),
                ("ISTIO_META_NETWORK".into(), "n2".into())
            ]
        );
    }

    #[test]
    fn bad_configurations_are_refused_and_bad_templates_only_refuse_their_pods() {
        assert!(Injector::new("policy: [", "{}", MeshInputs::parse("").unwrap(), Env::default()).is_err());
        assert!(Injector::new("policy: enabled", "[1]", MeshInputs::parse("").unwrap(), Env::default()).is_err());
        let inj = injector(
            "policy: enabled\ntemplates:\n  sidecar: '{{ nosuchfunc }}'\n  ok: 'metadata: {labels: {x: y}}'\n",
        );
        assert_eq!(inj.template_names(), ["ok"]);
        let p = pod("app", json!({}), json!({}), false);
        let err = inject(&inj, &ClusterInputs::default(), &p, "app", "").unwrap_err();
        assert!(err.contains("template \"sidecar\" does not parse"), "{err}");
        let p = pod("app", json!({}), json!({"inject.istio.io/templates": "ok"}), false);
        let Ok(Outcome::Patched(ops)) = inject(&inj, &ClusterInputs::default(), &p, "app", "") else {
            panic!("injected")
        };
        assert!(ops.iter().any(|o| o["path"] == "/metadata/labels/x"), "{ops:?}");
        // A template whose output is not a pod's YAML refuses the pod.
        let inj = injector("policy: enabled\ntemplates:\n  sidecar: 'a: [b'\n");
        let err =
            inject(&inj, &ClusterInputs::default(), &pod("app", json!({}), json!({}), false), "app", "").unwrap_err();
        assert!(err.starts_with("failed parsing generated injected YAML"), "{err}");
        // So does one that fails to render.
        let inj =
            injector("policy: enabled\ntemplates:\n  sidecar: '{{ .Values.a.b.c }}{{ index .Spec.Containers 9 }}'\n");
        let err =
            inject(&inj, &ClusterInputs::default(), &pod("app", json!({}), json!({}), false), "app", "").unwrap_err();
        assert!(err.starts_with("failed to run injection template"), "{err}");
    }
}
