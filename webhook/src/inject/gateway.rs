//! What istiod's Gateway API deployment controller makes of a Gateway
//! (`pilot/pkg/config/kube/gatewaycommon/deploymentcontroller.go`): the
//! chart's `kube-gateway` template rendered with the injector's engine,
//! values and mesh configuration, and istiod's checks on what the
//! template gives, ready to be applied (server-side) by the elected
//! replica (`discovery/gateway_deploy.rs`). Pure: no API calls.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value as Json, json};

use super::super::gotmpl::Value;
use super::{
    ClusterInputs, Injector, go_struct, mesh_config_value, proxy_config, proxy_config_value, proxy_image, set,
    set_default, string_map,
};

pub use istiod_config::gateway_convert::controller;
/// The class's template.
pub const TEMPLATE: &str = "kube-gateway";
/// The waypoint class's controller (`ManagedGatewayMeshController`).
pub const MESH_CONTROLLER: &str = "istio.io/mesh-controller";
/// The built-in waypoint class (`WaypointGatewayClassName`).
pub const WAYPOINT_CLASS: &str = "istio-waypoint";
/// Where the Gateway JSON given to [`render`] names its class's controller
/// when the class says (not a field of the Gateway).
pub const CONTROLLER_FIELD: &str = "controllerName";

/// What a class's controller deploys (istiod's `ClassInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassInfo {
    /// The controller (the field manager; `/` as `-`: the managed label).
    pub controller: &'static str,
    /// The chart template rendered.
    pub template: &'static str,
    /// Objects are named `<gateway>-<class>` (else `<gateway>`).
    pub name_suffix: bool,
    /// The Service's type unless the Gateway says.
    pub service_type: &'static str,
}

/// The class info of `gw`: its class's controller ([`CONTROLLER_FIELD`]),
/// else the built-in class names' (`istio-waypoint`: waypoints).
pub fn class_info(gw: &Json) -> ClassInfo {
    let waypoint = match gw[CONTROLLER_FIELD].as_str() {
        Some(c) => c == MESH_CONTROLLER,
        None => s(&gw["spec"]["gatewayClassName"]) == WAYPOINT_CLASS,
    };
    match waypoint {
        true => ClassInfo {
            controller: MESH_CONTROLLER,
            template: "waypoint",
            name_suffix: false,
            service_type: "ClusterIP",
        },
        false => {
            ClassInfo { controller: controller(), template: TEMPLATE, name_suffix: true, service_type: "LoadBalancer" }
        }
    }
}
/// `ControllerVersionAnnotation` and `ControllerVersion`.
pub const VERSION_ANNOTATION: &str = "gateway.istio.io/controller-version";
/// istiod 1.18 and later.
pub const VERSION: i64 = 5;
/// The label on what the controller manages (`label.GatewayManaged`).
pub const MANAGED_LABEL: &str = "gateway.istio.io/managed";
/// The label selecting the gateway's pods.
pub const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";

/// The deployment controller's switches (istiod's features).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Settings {
    /// `CLUSTER_ID`.
    pub cluster_id: String,
    /// The API server's version as istiod reads it (`1.28` → 128; -1
    /// unknown).
    pub kube_version: i64,
    /// `PILOT_ENABLE_GATEWAY_API_COPY_LABELS_ANNOTATIONS` (true).
    pub copy_labels_annotations: bool,
    /// `PILOT_ENABLE_AMBIENT_WAYPOINTS`, which only counts with
    /// `PILOT_ENABLE_AMBIENT` (then true by default, else false): gateways
    /// are marked out of ambient redirection.
    pub ambient_waypoints: bool,
    /// `ENABLE_GATEWAY_API_MANUAL_DEPLOYMENT` (true): a Gateway with a
    /// hostname address (or several addresses) names an existing
    /// deployment.
    pub manual_deployment: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cluster_id: "Kubernetes".into(),
            kube_version: -1,
            copy_labels_annotations: true,
            ambient_waypoints: false,
            manual_deployment: true,
        }
    }
}

/// Whether the controller makes a deployment for `gw` (a Gateway as the
/// API server serves it), and if so whether it writes its version on it
/// first: `Err` says why not (istiod's `IsManaged` and
/// `ManagedGatewayControllerVersion`).
pub fn managed(gw: &Json, s: &Settings) -> Result<bool, String> {
    let addresses = gw["spec"]["addresses"].as_array().map_or(&[][..], Vec::as_slice);
    if s.manual_deployment && !addresses.is_empty() {
        let ip = addresses.len() == 1 && addresses[0]["type"].as_str().is_none_or(|t| t == "IPAddress");
        if !ip {
            return Err("its addresses name an existing deployment".into());
        }
    }
    match gw["metadata"]["annotations"][VERSION_ANNOTATION].as_str() {
        None => Ok(true),
        Some(v) => match v.parse::<i64>() {
            Err(_) => Err(format!("managed by controller version {v:?}")),
            Ok(n) if n > VERSION => Err(format!("managed by controller version {n}")),
            Ok(n) => Ok(n < VERSION),
        },
    }
}

/// The patch that records the controller version on the Gateway
/// (applied to its status subresource, as istiod does).
pub fn version_patch() -> Json {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"annotations": {VERSION_ANNOTATION: VERSION.to_string()}},
    })
}

/// `GetDefaultName`: `<gateway>-<class>`, or the Gateway's name for a
/// class without the suffix (waypoints).
fn default_name(gw: &Json) -> String {
    match class_info(gw).name_suffix {
        true => format!("{}-{}", s(&gw["metadata"]["name"]), s(&gw["spec"]["gatewayClassName"])),
        false => s(&gw["metadata"]["name"]).to_owned(),
    }
}

/// The managed label's value (and the template's `ControllerLabel`): the
/// class's controller's name with `-` for `/`.
pub fn managed_value(gw: &Json) -> String {
    class_info(gw).controller.replace('/', "-")
}

/// A JSON string, or "".
pub fn s(v: &Json) -> &str {
    v.as_str().unwrap_or_default()
}

/// The names the generated objects take: (deployment and service,
/// service account).
pub fn names(gw: &Json) -> (String, String) {
    let a = &gw["metadata"]["annotations"];
    let default = default_name(gw);
    let deployment = a["gateway.istio.io/name-override"].as_str().map_or_else(|| default.clone(), str::to_owned);
    let sa = a["gateway.istio.io/service-account"].as_str().map_or(default, str::to_owned);
    (deployment, sa)
}

/// `extractInfrastructureMetadata`: the infrastructure's labels or
/// annotations when given (without `gateway.networking.k8s.io/` keys),
/// else the Gateway's own when copying is on.
fn infrastructure(gw: &Json, what: &str, s: &Settings) -> BTreeMap<String, String> {
    if let Some(m) = gw["spec"]["infrastructure"][what].as_object() {
        return m
            .iter()
            .filter(|(k, _)| !k.starts_with("gateway.networking.k8s.io/"))
            .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
            .collect();
    }
    if !s.copy_labels_annotations {
        return BTreeMap::new();
    }
    string_map(gw["metadata"].get(what))
}

/// Where the Gateway JSON given to [`render`] carries the listeners of the
/// ListenerSets it takes (not a field of the Gateway).
pub const LISTENER_SET_LISTENERS: &str = "listenerSetListeners";

/// `extractServicePorts`: the status port, then one per listener port
/// (the first listener's name, sanitised and made unique), the Gateway's
/// listeners then its ListenerSets'.
fn service_ports(gw: &Json) -> Vec<Json> {
    let mut out = vec![json!({"Name": "status-port", "Port": 15021, "Protocol": "TCP", "AppProtocol": "tcp"})];
    let mut ports = BTreeSet::new();
    let mut used: BTreeSet<String> = ["status-port".to_owned()].into();
    let own = gw["spec"]["listeners"].as_array().into_iter().flatten();
    let from_sets = gw[LISTENER_SET_LISTENERS].as_array().into_iter().flatten();
    for (i, l) in own.chain(from_sets).enumerate() {
        let port = l["port"].as_i64().unwrap_or_default();
        if !ports.insert(port) {
            continue;
        }
        let mut name: String = s(&l["name"]).replace('.', "-").chars().take(63).collect();
        if name.is_empty() {
            name = format!("{}-{i}", s(&l["protocol"]).to_lowercase());
        }
        let name = unique_port_name(&name, port, &mut used);
        out.push(
            json!({"Name": name, "Port": port, "Protocol": "TCP", "AppProtocol": s(&l["protocol"]).to_lowercase()}),
        );
    }
    out
}

/// `uniquePortName`: at most 63 characters, the port number (then `x`s)
/// appended until unused.
fn unique_port_name(name: &str, port: i64, used: &mut BTreeSet<String>) -> String {
    let name: String = name.chars().take(63).collect();
    let mut candidate = name.clone();
    let mut suffix = format!("-{port}");
    while used.contains(&candidate) {
        let keep = 63usize.saturating_sub(suffix.len());
        candidate = format!("{}{suffix}", name.chars().take(keep).collect::<String>());
        suffix.push('x');
    }
    used.insert(candidate.clone());
    candidate
}

/// The template's data: the Gateway (its fields promoted, as Go embeds
/// it) and istiod's `TemplateInput` and `derivedInput`.
fn template_data(inj: &Injector, crs: &ClusterInputs, gw: &Json, st: &Settings) -> Result<Value, String> {
    let (deployment, sa) = names(gw);
    let ns = s(&gw["metadata"]["namespace"]);
    let name = s(&gw["metadata"]["name"]);
    let class = s(&gw["spec"]["gatewayClassName"]);
    let mut labels = infrastructure(gw, "labels", st);
    let annotations = infrastructure(gw, "annotations", st);
    // setLabelOverrides: out of ambient redirection unless said.
    let waypoint = class.contains("waypoint") || class.contains("east-west");
    let ambient_label = "istio.io/dataplane-mode";
    let gw_labels = string_map(gw["metadata"].get("labels"));
    if st.ambient_waypoints
        && !waypoint
        && !gw_labels.contains_key(ambient_label)
        && !labels.contains_key(ambient_label)
    {
        labels.insert(ambient_label.into(), "none".into());
    }
    // Waypoints take the mesh's network unless the Gateway names one.
    let network = inj.value("/global/network").and_then(Json::as_str).unwrap_or_default();
    if waypoint && !network.is_empty() && !gw_labels.contains_key("topology.istio.io/network") {
        labels.insert("topology.istio.io/network".into(), network.to_owned());
    }
    let pod_labels: BTreeMap<String, String> = [(GATEWAY_NAME_LABEL.to_owned(), name.to_owned())].into();
    let pc = proxy_config(inj, crs, ns, &pod_labels, &BTreeMap::new())?;
    let gw_annotations = string_map(gw["metadata"].get("annotations"));
    let image_type = pc.get("image").and_then(|i| i.get("imageType")).and_then(Json::as_str);
    let info = class_info(gw);
    let service_type =
        gw_annotations.get("networking.istio.io/service-type").cloned().unwrap_or(info.service_type.into());

    let mut object_meta = go_struct(gw.get("metadata").unwrap_or(&json!({})));
    for k in ["Labels", "Annotations"] {
        set_default(&mut object_meta, k, Value::Map(Default::default(), true));
    }
    for k in ["Name", "Namespace", "UID"] {
        set_default(&mut object_meta, k, Value::Str(String::new()));
    }
    let mut d = object_meta.clone();
    set(&mut d, "ObjectMeta", object_meta);
    let mut spec = go_struct(gw.get("spec").unwrap_or(&json!({})));
    set_default(&mut spec, "Addresses", Value::List(Default::default()));
    set(&mut d, "Spec", spec);
    let type_meta = Value::Map(
        std::sync::Arc::new(BTreeMap::from([
            ("APIVersion".to_owned(), Value::Str(s(&gw["apiVersion"]).to_owned())),
            ("Kind".to_owned(), Value::Str(s(&gw["kind"]).to_owned())),
        ])),
        false,
    );
    set(&mut d, "TypeMeta", type_meta);
    set(&mut d, "GatewayClass", Value::Str(class.to_owned()));
    set(&mut d, "DeploymentName", Value::Str(deployment));
    set(&mut d, "ServiceAccount", Value::Str(sa));
    set(&mut d, "Ports", go_struct(&Json::Array(service_ports(gw))));
    set(&mut d, "ServiceType", Value::Str(service_type));
    set(&mut d, "ClusterID", Value::Str(st.cluster_id.clone()));
    set(&mut d, "KubeVersion", Value::Num(st.kube_version as f64));
    set(&mut d, "Revision", Value::Str(inj.env.revision.clone()));
    set(&mut d, "NativeSidecars", Value::Bool(inj.env.native_sidecars != Some(false)));
    set(&mut d, "ProxyUID", Value::Num(1337.0));
    set(&mut d, "ProxyGID", Value::Num(1337.0));
    set(&mut d, "CompliancePolicy", Value::Str(inj.env.compliance_policy.clone()));
    set(&mut d, "InfrastructureLabels", Value::string_map(&labels));
    set(&mut d, "InfrastructureAnnotations", Value::string_map(&annotations));
    set(&mut d, "GatewayNameLabel", Value::Str(GATEWAY_NAME_LABEL.into()));
    set(&mut d, "IsEastWestGateway", Value::Bool(false));
    set(&mut d, "ControllerLabel", Value::Str(managed_value(gw)));
    set(&mut d, "ProxyImage", Value::Str(proxy_image(inj, false, image_type, &gw_annotations)));
    set(&mut d, "ProxyConfig", proxy_config_value(&pc));
    set(&mut d, "MeshConfig", mesh_config_value(inj));
    set(&mut d, "Values", inj.values_data.clone());
    Ok(d)
}

/// The kinds the template may make, and istiod's overlay keys for them.
const KINDS: [(&str, &str); 5] = [
    ("Deployment", "deployment"),
    ("Service", "service"),
    ("ServiceAccount", "serviceAccount"),
    ("HorizontalPodAutoscaler", "horizontalPodAutoscaler"),
    ("PodDisruptionBudget", "podDisruptionBudget"),
];

/// The label of a ConfigMap (in istiod's namespace) of overlays for
/// every Gateway of a class.
pub const CLASS_DEFAULTS_LABEL: &str = "gateway.istio.io/defaults-for-class";

/// `fetchParameters`: the ConfigMap of the Gateway's namespace its
/// `infrastructure.parametersRef` names, if any; `Err` for another kind.
pub fn parameters_ref(gw: &Json) -> Result<Option<String>, String> {
    let Some(p) = gw["spec"]["infrastructure"].get("parametersRef").filter(|p| !p.is_null()) else {
        return Ok(None);
    };
    if s(&p["kind"]) != "ConfigMap" || !s(&p["group"]).is_empty() {
        return Err(format!(
            "invalid parameters: unknown infrastructure parameters type {}/{}",
            s(&p["group"]),
            s(&p["kind"])
        ));
    }
    Ok(Some(s(&p["name"]).to_owned()))
}

/// `applyOverlay`: each overlay's entry for the object's kind laid over it
/// as a strategic merge patch (a Deployment's pod template with the Pod's
/// merge keys); `None` when the object is made only with an overlay and
/// none has one. Overlays may not touch the object's identity.
fn apply_overlays(mut obj: Json, key: &str, overlays: &[BTreeMap<String, String>]) -> Result<Option<Json>, String> {
    let before = obj["metadata"].clone();
    let mut applied = false;
    for overlays in overlays {
        if let Some(k) = overlays.keys().find(|k| !KINDS.iter().any(|(_, o)| o == k)) {
            let supported: BTreeSet<&str> = KINDS.iter().map(|(_, o)| *o).collect();
            return Err(format!("unsupported overlay {k:?} (supported: {supported:?})"));
        }
        let Some(text) = overlays.get(key) else { continue };
        let patch: Json = serde_yaml_ng::from_str(text).map_err(|e| format!("strategic merge patch failed: {e}"))?;
        if patch.is_null() {
            applied = true;
            continue;
        }
        if !patch.is_object() {
            return Err("strategic merge patch failed: not a map".into());
        }
        // The Pod's merge keys apply in a Deployment's pod template; a
        // Service's ports merge by port.
        super::super::smp::merge_pod(&mut obj, &patch);
        applied = true;
    }
    if !applied && matches!(key, "horizontalPodAutoscaler" | "podDisruptionBudget") {
        return Ok(None);
    }
    let (a, b) = (&before, &obj["metadata"]);
    let same = |f: &str| a.get(f) == b.get(f);
    let identity = ["name", "generateName", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp"];
    let more = ["deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences", "finalizers", "managedFields"];
    if !identity.iter().chain(&more).all(|f| same(f)) || b.get("managedFields").is_some() {
        return Err("illegal metadata change".into());
    }
    Ok(Some(obj))
}

/// The objects istiod would apply for `gw`, in the template's order, with
/// `overlays` (the class's defaults ConfigMap's data, then the Gateway's
/// `parametersRef` ConfigMap's) laid over them, each checked as istiod's
/// `apply` does (kind, namespace, name) and labelled as managed. A
/// HorizontalPodAutoscaler or PodDisruptionBudget is made only with an
/// overlay for it.
pub fn render(
    inj: &Injector,
    crs: &ClusterInputs,
    gw: &Json,
    st: &Settings,
    overlays: &[BTreeMap<String, String>],
) -> Result<Vec<Json>, String> {
    let name = class_info(gw).template;
    let template = match inj.templates.get(name) {
        Some(Ok(t)) => t,
        Some(Err(e)) => return Err(format!("template {name:?} does not parse: {e}")),
        None => return Err(format!("no {name:?} template defined")),
    };
    let data = template_data(inj, crs, gw, st)?;
    let text = template.render(&data).map_err(|e| format!("error rendering templates: {e}"))?;
    let (deployment, sa) = names(gw);
    let ns = s(&gw["metadata"]["namespace"]);
    let name = s(&gw["metadata"]["name"]);
    let mut out = Vec::new();
    for doc in split_docs(&text) {
        let obj: Json = serde_yaml_ng::from_str(&doc).map_err(|e| format!("failed to find kind: {e}"))?;
        let kind = s(&obj["kind"]).to_owned();
        let Some((_, key)) = KINDS.iter().find(|(k, _)| *k == kind) else {
            return Err(format!("unknown overlay kind {kind:?}"));
        };
        let Some(mut obj) = apply_overlays(obj, key, overlays)? else { continue };
        if s(&obj["metadata"]["namespace"]) != ns {
            return Err(format!(
                "object namespace {:?} does not match gateway namespace {ns:?}",
                s(&obj["metadata"]["namespace"])
            ));
        }
        let obj_name = s(&obj["metadata"]["name"]).to_owned();
        if obj_name != deployment && obj_name != sa && !obj_name.starts_with(name) {
            return Err(format!("object name {obj_name:?} does not match expected pattern"));
        }
        let meta = obj.as_object_mut().map(|o| o.entry("metadata").or_insert_with(|| json!({})));
        if let Some(Json::Object(m)) = meta {
            let labels = m.entry("labels").or_insert_with(|| json!({}));
            if !labels.is_object() {
                *labels = json!({});
            }
            labels[MANAGED_LABEL] = json!(managed_value(gw));
        }
        out.push(obj);
    }
    Ok(out)
}

/// `yml.SplitString`: the documents between `---` lines, blank ones
/// dropped.
fn split_docs(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else if let Some(d) = docs.last_mut() {
            d.push_str(line);
            d.push('\n');
        }
    }
    docs.into_iter().filter(|d| d.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))).collect()
}

/// The Gateway as the API server serves it, from what the watch kept.
pub fn gateway_json(meta: &istiod_config::meta::Meta, spec: &istiod_config::gateway_api::GatewaySpec) -> Json {
    let mut m = Map::new();
    m.insert("name".into(), json!(meta.name));
    m.insert("namespace".into(), json!(meta.ns()));
    if !spec.uid.is_empty() {
        m.insert("uid".into(), json!(spec.uid));
    }
    if !meta.labels.is_empty() {
        m.insert("labels".into(), json!(meta.labels));
    }
    if !meta.annotations.is_empty() {
        m.insert("annotations".into(), json!(meta.annotations));
    }
    let mut sp = json!({
        "gatewayClassName": spec.gateway_class_name,
        "listeners": spec.listeners.iter().map(|l| json!({"name": l.name, "port": l.port, "protocol": l.protocol})).collect::<Vec<_>>(),
    });
    if !spec.addresses.is_empty() {
        sp["addresses"] = spec
            .addresses
            .iter()
            .map(|a| match &a.type_ {
                Some(t) => json!({"type": t, "value": a.value}),
                None => json!({"value": a.value}),
            })
            .collect();
    }
    if let Some(i) = &spec.infrastructure {
        let mut inf = Map::new();
        if let Some(l) = &i.labels {
            inf.insert("labels".into(), json!(l));
        }
        if let Some(a) = &i.annotations {
            inf.insert("annotations".into(), json!(a));
        }
        if let Some(p) = &i.parameters_ref {
            inf.insert("parametersRef".into(), json!({"group": p.group, "kind": p.kind, "name": p.name}));
        }
        sp["infrastructure"] = Json::Object(inf);
    }
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": m, "spec": sp})
}

#[cfg(test)]
mod tests {
    use super::super::{Env, MeshInputs, ProxyConfigResource};
    use super::*;

    const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data");

    /// istiod's `testInjectionConfig`: the chart's kube-gateway template,
    /// `values` (default: hub and tag `test`), the default mesh.
    fn injector(values: &str) -> Injector {
        let template = std::fs::read_to_string(format!("{DATA}/istio-chart/kube-gateway.yaml")).unwrap();
        let waypoint = std::fs::read_to_string(format!("{DATA}/istio-chart/waypoint.yaml")).unwrap();
        let config = serde_json::to_string(&json!({"templates": {TEMPLATE: template, "waypoint": waypoint}})).unwrap();
        let values = if values.is_empty() { "global:\n  hub: test\n  tag: test\n" } else { values };
        Injector::new(&config, values, MeshInputs::parse("").unwrap(), Env::default()).unwrap()
    }

    /// What istiod's test patcher records for `gw`: the version patch
    /// (when written), then each object.
    fn applied(
        inj: &Injector,
        crs: &ClusterInputs,
        gw: &Json,
        st: &Settings,
        overlays: &[BTreeMap<String, String>],
    ) -> Vec<Json> {
        let mut out = Vec::new();
        if managed(gw, st).unwrap() {
            out.push(version_patch());
        }
        out.extend(render(inj, crs, gw, st, overlays).unwrap());
        out
    }

    fn expected(case: &str) -> Vec<Json> {
        let text = std::fs::read_to_string(format!("{DATA}/gateway-deployment/{case}.yaml")).unwrap();
        serde_yaml_ng::Deserializer::from_str(&text)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .filter(|v: &Json| !v.is_null())
            .collect()
    }

    fn gateway(name: &str, class: &str, labels: Json, annotations: Json, spec: Json) -> Json {
        let mut g = json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"gatewayClassName": class},
        });
        if !labels.is_null() {
            g["metadata"]["labels"] = labels;
        }
        if !annotations.is_null() {
            g["metadata"]["annotations"] = annotations;
        }
        for (k, v) in spec.as_object().cloned().unwrap_or_default() {
            g["spec"][k] = v;
        }
        g
    }

    /// Each case of istiod's `TestConfigureIstioGateway` for the `istio`
    /// class that needs no ConfigMap overlay, compared with istiod's
    /// expected output object by object (field order aside: the API
    /// server receives JSON). The API server is 1.28, as in istiod's test.
    #[test]
    fn what_is_applied_is_what_istiod_applies() {
        let null = Json::Null;
        let http80 = json!({"listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]});
        let https443 = json!({"listeners": [{"name": "https", "port": 443, "protocol": "HTTPS"}]});
        let resources_null = "global:\n  proxy:\n    resources:\n      limits:\n        cpu: null\n        memory: 500Mi\n      requests:\n        cpu: null\n        memory: 150Mi\n";
        let infra = json!({"infrastructure": {
            "labels": {"foo": "bar", "gateway.networking.k8s.io/ignore": "true"},
            "annotations": {"fizz": "buzz", "gateway.networking.k8s.io/ignore": "true"}}});
        let see = json!({"should": "see"});
        let not = json!({"should-not": "see"});
        let infra_set = json!({"infrastructure": {"labels": {"should": "see-infra-label"}, "annotations": {"should": "see-infra-annotation"}}});
        let cases: Vec<(&str, Json, &str, bool)> = vec![
            ("simple", gateway("default", "istio", see.clone(), see.clone(), null.clone()), "", true),
            (
                "manual-sa",
                gateway(
                    "default",
                    "istio",
                    null.clone(),
                    json!({"gateway.istio.io/service-account": "custom-sa"}),
                    null.clone(),
                ),
                "",
                true,
            ),
            (
                "manual-ip",
                gateway(
                    "default",
                    "istio",
                    null.clone(),
                    json!({"gateway.istio.io/name-override": "default"}),
                    json!({"addresses": [{"type": "IPAddress", "value": "1.2.3.4"}]}),
                ),
                "",
                true,
            ),
            (
                "cluster-ip",
                gateway(
                    "default",
                    "istio",
                    null.clone(),
                    json!({"networking.istio.io/service-type": "ClusterIP", "gateway.istio.io/name-override": "default"}),
                    http80.clone(),
                ),
                "",
                true,
            ),
            ("quic-disabled", gateway("default", "istio", null.clone(), null.clone(), https443), "", true),
            (
                "kube-gateway-resources-null",
                gateway("default", "istio", null.clone(), null.clone(), null.clone()),
                resources_null,
                true,
            ),
            ("custom-class", gateway("default", "custom", null.clone(), null.clone(), null.clone()), "", true),
            (
                "infrastructure-labels-annotations",
                gateway("default", "istio", not.clone(), not.clone(), infra),
                "",
                true,
            ),
            (
                "kube-gateway-ambient-redirect",
                gateway("default", "istio", json!({"istio.io/dataplane-mode": "ambient"}), null.clone(), null.clone()),
                "",
                true,
            ),
            (
                "kube-gateway-ambient-redirect-infra",
                gateway(
                    "default",
                    "istio",
                    null.clone(),
                    null.clone(),
                    json!({"infrastructure": {"labels": {"istio.io/dataplane-mode": "ambient"}}}),
                ),
                "",
                true,
            ),
            (
                "copy-labels-annotations-disabled-infra-set",
                gateway("default", "istio", not.clone(), not.clone(), infra_set),
                "",
                false,
            ),
            (
                "copy-labels-annotations-disabled-infra-nil",
                gateway("default", "istio", not.clone(), not.clone(), null.clone()),
                "",
                false,
            ),
            (
                "copy-labels-annotations-enabled-infra-nil",
                gateway("default", "istio", see.clone(), see.clone(), null.clone()),
                "",
                true,
            ),
        ];
        // The waypoint class's cases (`waypoint`, `waypoint-resources-null`,
        // `waypoint-no-network-label`): the `waypoint` template, no name
        // suffix, a ClusterIP Service, the mesh controller's label, the
        // network from the values where the Gateway names none.
        let mesh = json!({"listeners": [{"name": "mesh", "port": 15008, "protocol": "ALL"}]});
        let network_1 = json!({"topology.istio.io/network": "network-1"});
        let waypoint_resources = "global:\n  waypoint:\n    resources:\n      limits:\n        cpu: null\n        memory: 500Mi\n      requests:\n        cpu: null\n        memory: 150Mi";
        let mut cases = cases;
        cases.extend([
            (
                "waypoint",
                gateway("namespace", WAYPOINT_CLASS, network_1, null.clone(), mesh.clone()),
                "global:\n  hub: test\n  tag: test\n  network: network-2",
                true,
            ),
            (
                "waypoint-resources-null",
                gateway("namespace", WAYPOINT_CLASS, null.clone(), null.clone(), mesh.clone()),
                waypoint_resources,
                true,
            ),
            (
                "waypoint-no-network-label",
                gateway("namespace", WAYPOINT_CLASS, null.clone(), null.clone(), mesh),
                "global:\n  hub: test\n  tag: test\n  network: network-1",
                true,
            ),
        ]);
        let crs = ClusterInputs::default();
        for (case, gw, values, copy) in cases {
            // istiod's test turns PILOT_ENABLE_AMBIENT_WAYPOINTS on.
            let st = Settings {
                kube_version: 128,
                copy_labels_annotations: copy,
                ambient_waypoints: true,
                ..Settings::default()
            };
            let got = applied(&injector(values), &crs, &gw, &st, &[]);
            let want = expected(case);
            assert_eq!(got.len(), want.len(), "{case}: {got:#?}");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g, w, "{case}: {}", s(&w["kind"]));
            }
        }
    }

    /// istiod's `proxy-config-crd` case: a ProxyConfig selecting the
    /// gateway's pods by `gateway.networking.k8s.io/gateway-name` picks the
    /// distroless image.
    #[test]
    fn a_proxy_config_selecting_the_gateway_applies() {
        let crs = ClusterInputs {
            items: vec![ProxyConfigResource {
                namespace: "default".into(),
                name: "test".into(),
                selector: Some([(GATEWAY_NAME_LABEL.to_owned(), "default".to_owned())].into()),
                config: json!({"image": {"imageType": "distroless"}}).as_object().cloned().unwrap(),
            }],
            ..ClusterInputs::default()
        };
        let gw = gateway("default", "istio", Json::Null, Json::Null, Json::Null);
        let st = Settings { kube_version: 128, ambient_waypoints: true, ..Settings::default() };
        let got = applied(&injector(""), &crs, &gw, &st, &[]);
        let want = expected("proxy-config-crd");
        assert_eq!(got, want);
    }

    /// istiod's `customizations` and `illegal_customizations` cases: a
    /// `parametersRef` ConfigMap's overlays change the Deployment (an
    /// annotation, replicas, the proxy's CPU request) and make the
    /// HorizontalPodAutoscaler and PodDisruptionBudget; an overlay that
    /// renames the Deployment is refused.
    #[test]
    fn overlays_customise_and_may_not_rename() {
        let spec = json!({"infrastructure": {"labels": {"foo": "bar"},
            "parametersRef": {"group": "", "kind": "ConfigMap", "name": "gw-options"}}});
        let gw = gateway("namespace", "istio", Json::Null, Json::Null, spec);
        assert_eq!(parameters_ref(&gw), Ok(Some("gw-options".to_owned())));
        let data: BTreeMap<String, String> = [
            ("podDisruptionBudget", "\nspec:\n  minAvailable: 1"),
            ("horizontalPodAutoscaler", "\nspec:\n  minReplicas: 2\n  maxReplicas: 2"),
            (
                "deployment",
                "\nmetadata:\n  annotations:\n    cm-annotation: cm-annotation-value\nspec:\n  replicas: 4\n  template:\n    spec:\n      containers:\n      - name: istio-proxy\n        resources:\n          requests:\n            cpu: 222m",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let st = Settings { kube_version: 128, ambient_waypoints: true, ..Settings::default() };
        // istiod's test gives no values here: its defaults (hub and tag).
        let inj = injector("");
        let got = applied(&inj, &ClusterInputs::default(), &gw, &st, &[data]);
        let want = expected("customizations");
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w, "{}", s(&w["kind"]));
        }
        let rename: BTreeMap<String, String> =
            [("deployment".to_owned(), "metadata:\n  name: not-allowed".to_owned())].into();
        let err = render(&inj, &ClusterInputs::default(), &gw, &st, &[rename]).unwrap_err();
        assert_eq!(err, "illegal metadata change");
        // A Service overlay merges ports by port (as corev1.Service's
        // patch strategy), keeping the others.
        let svc: BTreeMap<String, String> =
            [("service".to_owned(), "spec:\n  ports:\n  - port: 15021\n    nodePort: 30021".to_owned())].into();
        let out = render(&inj, &ClusterInputs::default(), &gw, &st, &[svc]).unwrap();
        let service = out.iter().find(|o| o["kind"] == "Service").unwrap();
        assert_eq!(
            service["spec"]["ports"],
            json!([{"name": "status-port", "port": 15021, "protocol": "TCP", "appProtocol": "tcp", "nodePort": 30021}])
        );
        let unknown: BTreeMap<String, String> = [("configMap".to_owned(), "{}".to_owned())].into();
        assert!(
            render(&inj, &ClusterInputs::default(), &gw, &st, &[unknown])
                .unwrap_err()
                .starts_with("unsupported overlay")
        );
        let secret_ref = json!({"infrastructure": {"parametersRef": {"group": "", "kind": "Secret", "name": "x"}}});
        assert!(parameters_ref(&gateway("g", "istio", Json::Null, Json::Null, secret_ref)).is_err());
    }

    /// Which Gateways the controller takes (istiod's `IsManaged`,
    /// `ManagedGatewayControllerVersion`).
    #[test]
    fn gateways_with_a_hostname_or_a_newer_controller_are_left_alone() {
        let st = Settings::default();
        let gw = |spec: Json, version: Option<&str>| {
            let a = version.map_or(Json::Null, |v| json!({VERSION_ANNOTATION: v}));
            gateway("g", "istio", Json::Null, a, spec)
        };
        assert_eq!(managed(&gw(Json::Null, None), &st), Ok(true), "no version: taken over");
        assert_eq!(managed(&gw(Json::Null, Some("5")), &st), Ok(false), "ours already");
        assert_eq!(managed(&gw(Json::Null, Some("1")), &st), Ok(true), "older: taken over");
        assert!(managed(&gw(Json::Null, Some("6")), &st).is_err(), "newer");
        assert!(managed(&gw(Json::Null, Some("v2")), &st).is_err(), "unknown scheme");
        let host = json!({"addresses": [{"type": "Hostname", "value": "gw.example.com"}]});
        assert!(managed(&gw(host.clone(), None), &st).is_err(), "an existing deployment");
        let two = json!({"addresses": [{"value": "1.2.3.4"}, {"value": "1.2.3.5"}]});
        assert!(managed(&gw(two, None), &st).is_err());
        let manual_off = Settings { manual_deployment: false, ..Settings::default() };
        assert_eq!(managed(&gw(host, None), &manual_off), Ok(true));
    }

    #[test]
    fn service_port_names_are_unique_and_short() {
        let long = "a".repeat(70);
        let gw = json!({"spec": {"listeners": [
            {"name": "http.main", "port": 80, "protocol": "HTTP"},
            {"name": "dup", "port": 80, "protocol": "HTTP"},
            {"name": long, "port": 443, "protocol": "HTTPS"},
            {"name": long, "port": 8443, "protocol": "HTTPS"},
            {"name": "status-port", "port": 9000, "protocol": "TCP"},
        ]}});
        let names: Vec<String> = service_ports(&gw).iter().map(|p| s(&p["Name"]).to_owned()).collect();
        let trimmed = "a".repeat(63);
        let suffixed = format!("{}-8443", "a".repeat(58));
        assert_eq!(names, ["status-port", "http-main", trimmed.as_str(), suffixed.as_str(), "status-port-9000"]);
    }

    /// istiod's `extractServicePorts(gw, listenersFromListenerSets)`: the
    /// ports of the ListenerSets a Gateway takes follow its own, a port
    /// already there not repeated.
    #[test]
    fn a_listener_sets_ports_are_the_services_too() {
        let gw = json!({
            "spec": {"listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]},
            LISTENER_SET_LISTENERS: [
                {"name": "also-http", "port": 80, "protocol": "HTTP"},
                {"name": "shop", "port": 8443, "protocol": "HTTPS"},
            ],
        });
        let ports: Vec<(String, i64)> =
            service_ports(&gw).iter().map(|p| (s(&p["Name"]).to_owned(), p["Port"].as_i64().unwrap())).collect();
        assert_eq!(ports, [("status-port".into(), 15021), ("http".into(), 80), ("shop".into(), 8443)]);
    }
}
