//! What istiod does to the merged pod after the templates
//! (`pkg/kube/inject/webhook.go`: `reapplyOverwrittenContainers`,
//! `adjustInitContainerUser`, `postProcessPod` and what it calls;
//! `app_probe.go`; `validate.go`'s annotation checks).

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json, json};

use super::{Injector, STATUS_ANNOTATION, smp};

const PROXY: &str = "istio-proxy";
const PROBERS_ENV: &str = "ISTIO_KUBE_APP_PROBERS";
/// The prometheus annotations, by sanitized name (port, scrape, path,
/// Istio's scrape targets).
pub const PROMETHEUS_KEYS: [&str; 4] =
    ["prometheus_io_port", "prometheus_io_scrape", "prometheus_io_path", "prometheus_istio_io_scrape_targets"];
const RESERVED_PORTS: [(&str, &str); 9] = [
    ("15000", "Envoy admin"),
    ("15001", "outbound traffic capture"),
    ("15004", "pilot debug"),
    ("15006", "inbound traffic capture"),
    ("15008", "HBONE tunnel"),
    ("15020", "pilot-agent status / merged Prometheus"),
    ("15021", "Envoy health"),
    ("15053", "DNS proxy"),
    ("15090", "Envoy Prometheus (already merged)"),
];

/// `strutil.SanitizeLabelName`: what is not `[a-zA-Z0-9_]` becomes `_`.
pub fn sanitize(k: &str) -> String {
    k.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

/// Go's `strconv.ParseBool`.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn parse_port(s: &str) -> Result<u16, String> {
    s.trim().parse::<u16>().map_err(|e| format!("failed parsing port '{s}': {e}"))
}

fn port_list(name: &str, ports: &str) -> Result<(), String> {
    let ports = ports.trim();
    if ports.is_empty() {
        return Ok(());
    }
    for p in ports.split(',') {
        parse_port(p).map_err(|e| format!("{name} invalid: failed parsing port '{p}': {e}"))?;
    }
    Ok(())
}

fn cidr_list(name: &str, cidrs: &str) -> Result<(), String> {
    if cidrs.is_empty() {
        return Ok(());
    }
    for c in cidrs.split(',') {
        let ok = c.split_once('/').is_some_and(|(ip, bits)| {
            let bits: Option<u8> = if bits.starts_with('0') && bits.len() > 1 { None } else { bits.parse().ok() };
            match ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(_)) => bits.is_some_and(|b| b <= 32),
                Ok(std::net::IpAddr::V6(_)) => bits.is_some_and(|b| b <= 128),
                Err(_) => false,
            }
        });
        if !ok {
            return Err(format!("{name} invalid: failed parsing cidr '{c}': netip.ParsePrefix({c:?}): invalid prefix"));
        }
    }
    Ok(())
}

fn interfaces(s: &str) -> Result<(), String> {
    for name in s.split(',') {
        let name = name.trim();
        if name.is_empty() {
            continue;
        }
        if name.len() > 15 || name.contains(['/', ' ', '\t', '\n']) || name == "." || name == ".." {
            return Err(format!("interface name {name} is invalid"));
        }
    }
    Ok(())
}

/// Kubernetes' `resource.ParseQuantity`, as a check.
fn quantity(s: &str) -> Result<(), String> {
    if s.chars().any(char::is_control) {
        return Err("value contains control characters".into());
    }
    let num_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    let suffix_ok =
        matches!(suffix, "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei")
            || (suffix.starts_with(['e', 'E']) && suffix[1..].trim_start_matches(['+', '-']).parse::<u32>().is_ok());
    if num.is_empty() || num.trim_start_matches(['+', '-']).parse::<f64>().is_err() || !suffix_ok {
        return Err(
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'".into()
        );
    }
    Ok(())
}

/// `V:validateAnnotations`: every bad annotation, in one error.
pub fn validate_annotations(a: &BTreeMap<String, String>) -> Result<(), String> {
    let mut errors = Vec::new();
    for (name, v) in a {
        let r = match name.as_str() {
            "sidecar.istio.io/interceptionMode" => match v.as_str() {
                "REDIRECT" | "TPROXY" | "NONE" => Ok(()),
                _ => Err(format!("interceptionMode invalid, use REDIRECT,TPROXY,NONE: {v}")),
            },
            "status.sidecar.istio.io/port" => {
                parse_port(v).map(drop).map_err(|e| format!("excludeInboundPorts invalid: {e}"))
            }
            "readiness.status.sidecar.istio.io/initialDelaySeconds"
            | "readiness.status.sidecar.istio.io/periodSeconds"
            | "readiness.status.sidecar.istio.io/failureThreshold" => {
                v.parse::<u32>().map(drop).map_err(|e| format!("strconv.ParseUint: parsing {v:?}: {e}"))
            }
            "traffic.sidecar.istio.io/includeOutboundIPRanges" if v == "*" => Ok(()),
            "traffic.sidecar.istio.io/includeOutboundIPRanges" => cidr_list("includeIPRanges", v),
            "traffic.sidecar.istio.io/excludeOutboundIPRanges" => cidr_list("excludeIPRanges", v),
            "traffic.sidecar.istio.io/includeInboundPorts" if v == "*" => Ok(()),
            "traffic.sidecar.istio.io/includeInboundPorts" => port_list("includeInboundPorts", v),
            "traffic.sidecar.istio.io/excludeInboundPorts" => port_list("excludeInboundPorts", v),
            "traffic.sidecar.istio.io/excludeOutboundPorts" => port_list("excludeOutboundPorts", v),
            "traffic.sidecar.istio.io/excludeInterfaces"
            | "traffic.sidecar.istio.io/kubevirtInterfaces"
            | "istio.io/reroute-virtual-interfaces" => interfaces(v),
            "prometheus.istio.io/merge-metrics" => {
                parse_bool(v).map(drop).ok_or_else(|| format!("strconv.ParseBool: parsing {v:?}: invalid syntax"))
            }
            "proxy.istio.io/config" => crate::proxy_config::validate(v),
            "sidecar.istio.io/proxyCPU"
            | "sidecar.istio.io/proxyMemory"
            | "sidecar.istio.io/proxyCPULimit"
            | "sidecar.istio.io/proxyMemoryLimit" => quantity(v),
            _ => Ok(()),
        };
        if let Err(e) = r {
            errors.push(format!("invalid value '{v}' for annotation '{name}': {e}"));
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(format!("1 error occurred:\n\t* {}\n\n", errors[0])),
        n => Err(format!("{n} errors occurred:\n\t* {}\n\n", errors.join("\n\t* "))),
    }
}

fn containers<'a>(pod: &'a Json, field: &str) -> &'a [Json] {
    pod.pointer(&format!("/spec/{field}")).and_then(Json::as_array).map_or(&[], Vec::as_slice)
}

fn find<'a>(list: &'a [Json], name: &str) -> Option<&'a Json> {
    list.iter().find(|c| c["name"] == name)
}

/// `FindSidecar`: the proxy in containers, else in initContainers.
fn sidecar_mut(pod: &mut Json) -> Option<&mut Map<String, Json>> {
    let in_containers = containers(pod, "containers").iter().any(|c| c["name"] == PROXY);
    let field = if in_containers { "containers" } else { "initContainers" };
    pod.pointer_mut(&format!("/spec/{field}"))?.as_array_mut()?.iter_mut().find(|c| c["name"] == PROXY)?.as_object_mut()
}

fn sidecar(pod: &Json) -> Option<&Json> {
    find(containers(pod, "containers"), PROXY).or_else(|| find(containers(pod, "initContainers"), PROXY))
}

fn env_mut(c: &mut Map<String, Json>) -> &mut Vec<Json> {
    let e = c.entry("env").or_insert_with(|| json!([]));
    if !e.is_array() {
        *e = json!([]);
    }
    e.as_array_mut().expect("an array")
}

fn annotations_mut(pod: &mut Json) -> &mut Map<String, Json> {
    let meta = pod.as_object_mut().expect("a pod is a map").entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    let a = meta.as_object_mut().expect("a map").entry("annotations").or_insert_with(|| json!({}));
    if !a.is_object() {
        *a = json!({});
    }
    a.as_object_mut().expect("a map")
}

fn labels_mut(pod: &mut Json) -> &mut Map<String, Json> {
    let meta = pod["metadata"].as_object_mut().expect("made by annotations_mut");
    let l = meta.entry("labels").or_insert_with(|| json!({}));
    if !l.is_object() {
        *l = json!({});
    }
    l.as_object_mut().expect("a map")
}

fn status_names(pod: &Json) -> Option<(Vec<String>, Vec<String>)> {
    let s = pod.pointer("/metadata/annotations")?.get(STATUS_ANNOTATION)?.as_str()?;
    let v: Json = serde_json::from_str(s).unwrap_or(json!({}));
    let names = |k: &str| -> Vec<String> {
        v[k].as_array().map(|a| a.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect()).unwrap_or_default()
    };
    Some((names("containers"), names("initContainers")))
}

/// Go's `corev1.Container` JSON field order (for the overrides annotation).
const CONTAINER_FIELDS: [&str; 24] = [
    "name",
    "image",
    "command",
    "args",
    "workingDir",
    "ports",
    "envFrom",
    "env",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "volumeMounts",
    "volumeDevices",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "imagePullPolicy",
    "securityContext",
    "stdin",
    "stdinOnce",
    "tty",
];

fn go_container_json(c: &Json) -> String {
    let mut out = String::from("{");
    let mut first = true;
    for f in CONTAINER_FIELDS {
        let v = match (f, c.get(f)) {
            ("resources", None) => json!({}),
            // Go's omitempty strings and lists.
            (_, Some(v)) if !v.is_null() && *v != json!("") && *v != json!([]) => v.clone(),
            _ => continue,
        };
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(&format!("{}:{}", json!(f), v));
    }
    out.push('}');
    out
}

/// `W:reapplyOverwrittenContainers` + `adjustInitContainerUser`: what the
/// user declared for an injected container (e.g. their own `istio-proxy`)
/// wins over the template.
pub fn reapply_overwritten_containers(
    merged: &mut Json,
    original: &Json,
    template_pod: &Json,
    pc: &Map<String, Json>,
) -> Result<(), String> {
    let existing: Json =
        match original.pointer("/metadata/annotations/proxy.istio.io~1overrides").and_then(Json::as_str) {
            Some(s) => serde_json::from_str(s).map_err(|e| format!("proxy.istio.io/overrides: {e}"))?,
            None => json!({}),
        };
    let status = status_names(original);
    let already = status.is_some();
    let (status_containers, status_init) = status.unwrap_or_default();
    let mut overrides: BTreeMap<&str, Vec<Json>> = BTreeMap::new();
    for (field, injected) in [("containers", &status_containers), ("initContainers", &status_init)] {
        for c in containers(template_pod, field) {
            let name = c["name"].as_str().unwrap_or_default();
            if injected.iter().any(|n| n == name) {
                continue;
            }
            let from_existing = existing.get(field).and_then(Json::as_array).and_then(|l| find(l, name));
            let from_pod = if field == "containers" {
                find(containers(original, "containers"), name)
            } else {
                find(containers(original, "containers"), name)
                    .or_else(|| find(containers(original, "initContainers"), name))
            };
            let Some(m) = from_existing.or(from_pod) else { continue };
            let mut overlay = m.clone();
            // The overlay is Go's JSON of a Container: `image: auto` is
            // cleared, and empty strings are omitted.
            if let Some(o) = overlay.as_object_mut() {
                if o.get("image") == Some(&json!("auto")) {
                    o.remove("image");
                }
                o.retain(|_, v| *v != json!(""));
            }
            let patch = if field == "containers" {
                json!({"spec": {"containers": [overlay.clone()]}})
            } else {
                json!({"spec": {"containers": [], "initContainers": [overlay.clone()]}})
            };
            smp::merge_pod(merged, &patch);
            overrides.entry(field).or_default().push(overlay);
        }
    }
    if !already && !overrides.is_empty() {
        let mut parts = Vec::new();
        for field in ["containers", "initContainers"] {
            if let Some(list) = overrides.get(field) {
                let items: Vec<String> = list.iter().map(go_container_json).collect();
                parts.push(format!("{}:[{}]", json!(field), items.join(",")));
            }
        }
        annotations_mut(merged).insert("proxy.istio.io/overrides".into(), json!(format!("{{{}}}", parts.join(","))));
    }
    adjust_init_container_user(merged, original, pc);
    Ok(())
}

fn adjust_init_container_user(merged: &mut Json, original: &Json, pc: &Map<String, Json>) {
    let Some(user) = sidecar(original) else { return };
    let (run_as_user, run_as_group) =
        (user.pointer("/securityContext/runAsUser").cloned(), user.pointer("/securityContext/runAsGroup").cloned());
    if run_as_user.is_none() && run_as_group.is_none() {
        return;
    }
    let tproxy = pc.get("interceptionMode").and_then(Json::as_str) == Some("TPROXY")
        || merged.pointer("/metadata/annotations/sidecar.istio.io~1interceptionMode").and_then(Json::as_str)
            == Some("TPROXY");
    if tproxy
        && run_as_user.is_some()
        && let Some(s) = sidecar_mut(merged)
        && let Some(sc) = s.get_mut("securityContext").and_then(Json::as_object_mut)
    {
        sc.insert("runAsUser".into(), json!(0));
    }
    let init = ["istio-init", "istio-validation"]
        .into_iter()
        .find_map(|n| containers(merged, "initContainers").iter().position(|c| c["name"] == n));
    let Some(i) = init else { return };
    let Some(init) = merged.pointer_mut(&format!("/spec/initContainers/{i}")).and_then(Json::as_object_mut) else {
        return;
    };
    if !tproxy && init.get("name") == Some(&json!("istio-validation")) {
        let sc = init.entry("securityContext").or_insert_with(|| json!({}));
        if !sc.is_object() {
            *sc = json!({});
        }
        if let Some(u) = &run_as_user {
            sc["runAsUser"] = u.clone();
        }
        if let Some(g) = &run_as_group {
            sc["runAsGroup"] = g.clone();
        }
    }
    let Some(uid) = run_as_user.and_then(|u| u.as_i64()).filter(|u| *u != 0) else { return };
    if let Some(Json::Array(args)) = init.get_mut("args")
        && let Some(p) = args.iter().position(|a| a == "-u")
        && p + 1 < args.len()
    {
        args[p + 1] = json!(uid.to_string());
    }
}

/// `W:postProcessPod`.
pub fn post_process(
    inj: &Injector,
    pod: &mut Json,
    template_pod: &Json,
    proxy_envs: &BTreeMap<String, String>,
    _pc: &Map<String, Json>,
    _status_port: &str,
) -> Result<(), String> {
    annotations_mut(pod);
    labels_mut(pod);
    // overwriteClusterInfo: the URL's and values' cluster and network go
    // last, sorted.
    if !proxy_envs.is_empty()
        && let Some(s) = sidecar_mut(pod)
    {
        let env = env_mut(s);
        env.retain(|e| !e["name"].as_str().is_some_and(|n| proxy_envs.contains_key(n)));
        env.extend(proxy_envs.iter().map(|(k, v)| json!({"name": k, "value": v})));
    }
    let mesh_status_port = inj.mesh.default_config.get("statusPort").and_then(Json::as_i64).unwrap_or(15020);
    prometheus_merge(inj, pod, mesh_status_port)?;
    secure_prometheus(pod);
    rewrite_probes(inj, pod, mesh_status_port);
    // applyMetadata.
    if let Some(n) = proxy_envs.get("ISTIO_META_NETWORK") {
        labels_mut(pod).insert("topology.istio.io/network".into(), json!(n));
    }
    let status = injection_status(template_pod, &inj.env.revision);
    let a = annotations_mut(pod);
    a.insert(STATUS_ANNOTATION.into(), json!(status));
    for (k, v) in &inj.injected_annotations {
        a.insert(k.clone(), json!(v));
    }
    reorder(inj, pod)?;
    Ok(())
}

/// `getInjectionStatus`, with Go's key order and `null` for none.
pub fn injection_status(template_pod: &Json, revision: &str) -> String {
    let names = |field: &str| -> Json {
        let l: Vec<Json> = containers(template_pod, field).iter().map(|c| c["name"].clone()).collect();
        if l.is_empty() { Json::Null } else { Json::Array(l) }
    };
    let revision = istiod_kubewatch::kapi::revision_label(revision);
    format!(
        "{{\"initContainers\":{},\"containers\":{},\"volumes\":{},\"imagePullSecrets\":{},\"revision\":{}}}",
        names("initContainers"),
        names("containers"),
        names("volumes"),
        names("imagePullSecrets"),
        json!(revision)
    )
}

fn prometheus_merge(inj: &Injector, pod: &mut Json, status_port: i64) -> Result<(), String> {
    let anns: Vec<(String, String)> = pod
        .pointer("/metadata/annotations")
        .and_then(Json::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect())
        .unwrap_or_default();
    let get = |key: &str| anns.iter().find(|(k, _)| sanitize(k) == key).map(|(_, v)| v.clone());
    let scrape_on = anns
        .iter()
        .filter(|(k, _)| sanitize(k) == "prometheus_io_scrape")
        .find_map(|(_, v)| parse_bool(v))
        .unwrap_or(true);
    let merge_on = match anns.iter().find(|(k, _)| k == "prometheus.istio.io/merge-metrics") {
        Some((_, v)) => parse_bool(v).unwrap_or(inj.mesh.prometheus_merge),
        None => inj.mesh.prometheus_merge,
    };
    if !scrape_on || !merge_on {
        return Ok(());
    }
    let target = status_port.to_string();
    if get("prometheus_io_port").as_deref() == Some(target.as_str()) {
        return Ok(());
    }
    let (mut port, mut path) =
        (get("prometheus_io_port").unwrap_or_default(), get("prometheus_io_path").unwrap_or_default());
    let scrape = get("prometheus_io_scrape").unwrap_or_default();
    let mut targets: Vec<(String, String)> = Vec::new();
    if let Some(raw) = get("prometheus_istio_io_scrape_targets") {
        let mut parsed = Vec::new();
        let mut ok = true;
        for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (p, rest) = entry.split_once(':').map_or((entry, None), |(p, r)| (p, Some(r)));
            let p = p.trim();
            if p.is_empty() {
                ok = false;
                break;
            }
            let path = rest.map(str::trim).filter(|r| !r.is_empty()).unwrap_or("/metrics");
            parsed.push((p.to_owned(), path.to_owned()));
        }
        if ok {
            targets = parsed;
        } else {
            tracing::warn!(target: "injection", "failed to parse prometheus.istio.io/scrape-targets");
        }
    }
    let check = |p: &str, what: &str, field: &str| -> Result<(), String> {
        let n: i64 = p
            .parse()
            .ok()
            .filter(|n| (1..=65535).contains(n))
            .ok_or_else(|| format!("invalid prometheus scrape {what}: invalid {field}port {p:?}"))?;
        let canon = n.to_string();
        if canon == target {
            return Err(format!("invalid prometheus scrape {what}: {field}port {p} conflicts with agent port"));
        }
        if let Some((_, reason)) = RESERVED_PORTS.iter().find(|(r, _)| *r == canon) {
            return Err(format!(
                "invalid prometheus scrape {what}: {field}port {p} is reserved for Istio ({reason}) and cannot be scraped"
            ));
        }
        Ok(())
    };
    if let Some((p, pa)) = targets.first() {
        (port, path) = (p.clone(), pa.clone());
        for (p, _) in &targets {
            check(p, "targets", "target ")?;
        }
    } else if !port.is_empty() {
        check(&port, "configuration", "")?;
    }
    let empty = scrape.is_empty() && path.is_empty() && port.is_empty() && targets.is_empty();
    if !empty && let Some(s) = sidecar_mut(pod) {
        let mut v = format!("{{\"scrape\":{},\"path\":{},\"port\":{}", json!(scrape), json!(path), json!(port));
        if !targets.is_empty() {
            let t: Vec<String> =
                targets.iter().map(|(p, pa)| format!("{{\"port\":{},\"path\":{}}}", json!(p), json!(pa))).collect();
            v.push_str(&format!(",\"targets\":[{}]", t.join(",")));
        }
        v.push('}');
        env_mut(s).push(json!({"name": "ISTIO_PROMETHEUS_ANNOTATIONS", "value": v}));
    }
    let a = annotations_mut(pod);
    a.retain(|k, _| !PROMETHEUS_KEYS.contains(&sanitize(k).as_str()));
    a.insert("prometheus.io/port".into(), json!(target));
    a.insert("prometheus.io/path".into(), json!("/stats/prometheus"));
    a.insert("prometheus.io/scrape".into(), json!("true"));
    Ok(())
}

fn secure_prometheus(pod: &mut Json) {
    let has = pod
        .pointer("/metadata/annotations")
        .and_then(Json::as_object)
        .is_some_and(|a| a.keys().any(|k| sanitize(k) == "prometheus_istio_io_secure_port"));
    if has {
        return;
    }
    let port = sidecar(pod).and_then(|s| s["env"].as_array()).and_then(|env| {
        env.iter()
            .find(|e| e["name"] == "ENVOY_SECURE_MERGED_METRICS_PORT")
            .and_then(|e| e["value"].as_str())
            .filter(|v| !v.is_empty() && *v != "0")
            .map(str::to_owned)
    });
    if let Some(p) = port {
        annotations_mut(pod).insert("prometheus.istio.io/secure-port".into(), json!(p));
    }
}

/// `status.FormatProberURL`.
fn prober_urls(name: &str) -> [String; 5] {
    [
        format!("/app-health/{name}/readyz"),
        format!("/app-health/{name}/livez"),
        format!("/app-health/{name}/startupz"),
        format!("/app-lifecycle/{name}/prestopz"),
        format!("/app-lifecycle/{name}/poststartz"),
    ]
}

/// A probe's handler as istiod's `Prober`, with named ports resolved;
/// `None` when it is not rewritten.
fn prober(handler: Option<&Json>, ports: &BTreeMap<String, i64>, target: i64, probe: bool) -> Option<Json> {
    let h = handler?.as_object()?;
    let mut out = Map::new();
    let timeout = if probe { h.get("timeoutSeconds").and_then(Json::as_i64).filter(|t| *t != 0) } else { None };
    if let Some(g) = h.get("httpGet").filter(|v| v.is_object()) {
        out.insert("httpGet".into(), go_order(g, &["path", "port", "host", "scheme", "httpHeaders"]));
    } else if let Some(t) = h.get("tcpSocket").filter(|v| v.is_object()) {
        out.insert("tcpSocket".into(), go_order(t, &["port", "host"]));
    } else if let Some(g) = h.get("grpc").filter(|v| v.is_object()) {
        if !probe {
            return None;
        }
        let mut g = go_order(g, &["port", "service"]);
        g.as_object_mut()?.entry("service").or_insert(Json::Null);
        out.insert("grpc".into(), g);
        if let Some(t) = timeout {
            out.insert("timeoutSeconds".into(), json!(t));
        }
        return Some(Json::Object(out));
    } else {
        return None;
    }
    let action = out.values_mut().next()?;
    match &action["port"] {
        Json::String(name) => {
            let p = ports.get(name)?;
            action["port"] = json!(p);
        }
        Json::Number(n) if n.as_i64() == Some(target) => return None,
        _ => {}
    }
    if let Some(t) = timeout {
        out.insert("timeoutSeconds".into(), json!(t));
    }
    Some(Json::Object(out))
}

fn go_order(v: &Json, fields: &[&str]) -> Json {
    let mut m = Map::new();
    for f in fields {
        if let Some(x) = v.get(*f).filter(|x| !x.is_null() && *x != "") {
            m.insert((*f).to_owned(), x.clone());
        }
    }
    Json::Object(m)
}

fn rewrite_probes(inj: &Injector, pod: &mut Json, mesh_status_port: i64) {
    if sidecar(pod).is_none() {
        return;
    }
    let values_flag = inj.value("/sidecarInjectorWebhook/rewriteAppHTTPProbe").and_then(Json::as_bool).unwrap_or(false);
    let annotation = pod
        .pointer("/metadata/annotations/sidecar.istio.io~1rewriteAppHTTPProbers")
        .and_then(Json::as_str)
        .and_then(parse_bool);
    if !annotation.unwrap_or(values_flag) {
        return;
    }
    // DumpAppProbers: initContainers first, then containers.
    let mut probers = BTreeMap::new();
    for field in ["initContainers", "containers"] {
        for c in containers(pod, field) {
            let name = c["name"].as_str().unwrap_or_default();
            if name == PROXY {
                continue;
            }
            let ports: BTreeMap<String, i64> = c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| {
                    Some((p["name"].as_str().filter(|n| !n.is_empty())?.to_owned(), p["containerPort"].as_i64()?))
                })
                .collect();
            let urls = prober_urls(name);
            let handlers = [
                (c.get("readinessProbe"), true),
                (c.get("livenessProbe"), true),
                (c.get("startupProbe"), true),
                (c.pointer("/lifecycle/preStop"), false),
                (c.pointer("/lifecycle/postStart"), false),
            ];
            for ((h, probe), url) in handlers.into_iter().zip(urls) {
                if let Some(p) = prober(h, &ports, mesh_status_port, probe) {
                    probers.insert(url, p);
                }
            }
        }
    }
    if !probers.is_empty() {
        let previously = pod.pointer("/metadata/annotations").and_then(|a| a.get(STATUS_ANNOTATION)).is_some();
        let new = serde_json::to_string(&probers).unwrap_or_default();
        if let Some(s) = sidecar_mut(pod) {
            let env = env_mut(s);
            match env.iter_mut().find(|e| e["name"] == PROBERS_ENV).filter(|_| previously) {
                Some(e) => {
                    let old: Option<BTreeMap<String, Json>> =
                        e["value"].as_str().and_then(|v| serde_json::from_str(v).ok());
                    if let Some(old) = old {
                        let mut merged = probers.clone();
                        merged.extend(old);
                        e["value"] = json!(serde_json::to_string(&merged).unwrap_or_default());
                    }
                }
                None => env.push(json!({"name": PROBERS_ENV, "value": new})),
            }
        }
    }
    // patchRewriteProbe.
    let status_port = match pod.pointer("/metadata/annotations/status.sidecar.istio.io~1port").and_then(Json::as_str) {
        Some(v) => v.parse::<i64>().unwrap_or(0),
        None => mesh_status_port,
    };
    for field in ["containers", "initContainers"] {
        let Some(list) = pod.pointer_mut(&format!("/spec/{field}")).and_then(Json::as_array_mut) else { continue };
        for c in list.iter_mut() {
            let name = c["name"].as_str().unwrap_or_default().to_owned();
            if name == PROXY {
                continue;
            }
            let urls = prober_urls(&name);
            for (key, url) in ["readinessProbe", "livenessProbe", "startupProbe"].iter().zip(&urls) {
                if let Some(p) = c.get_mut(*key).and_then(Json::as_object_mut) {
                    convert(p, url, status_port, true);
                }
            }
            for (key, url) in ["preStop", "postStart"].iter().zip(&urls[3..]) {
                if let Some(p) = c.pointer_mut(&format!("/lifecycle/{key}")).and_then(Json::as_object_mut) {
                    convert(p, url, status_port, false);
                }
            }
        }
    }
}

fn convert(h: &mut Map<String, Json>, url: &str, port: i64, probe: bool) {
    let rewrite = |g: &mut Json| {
        g["port"] = json!(port);
        g["path"] = json!(url);
        if g["scheme"] == "HTTPS" {
            g["scheme"] = json!("HTTP");
        }
    };
    if let Some(g) = h.get_mut("httpGet").filter(|g| g.is_object()) {
        rewrite(g);
    } else if h.get("tcpSocket").is_some_and(Json::is_object) || (probe && h.get("grpc").is_some_and(Json::is_object)) {
        h.remove("tcpSocket");
        h.remove("grpc");
        let mut g = json!({});
        rewrite(&mut g);
        h.insert("httpGet".into(), g);
    }
}

/// `W:reorderPod`.
fn reorder(inj: &Injector, pod: &mut Json) -> Result<(), String> {
    let mut hold = inj.mesh.default_config.get("holdApplicationUntilProxyStarts").and_then(Json::as_bool) == Some(true);
    if let Some(a) = pod.pointer("/metadata/annotations/proxy.istio.io~1config").and_then(Json::as_str) {
        let over: Json = istiod_config::yaml::from_str(a).map_err(|e| format!("proxy.istio.io/config: {e}"))?;
        if let Some(h) = over.get("holdApplicationUntilProxyStarts").and_then(Json::as_bool) {
            hold = h;
        }
    }
    hold = hold || inj.value("/global/proxy/holdApplicationUntilProxyStarts").and_then(Json::as_bool) == Some(true);
    let Some(spec) = pod.get_mut("spec").and_then(Json::as_object_mut) else { return Ok(()) };
    if let Some(Json::Array(cs)) = spec.get_mut("containers") {
        move_container(cs, PROXY, !hold);
    }
    let native = spec.get("initContainers").and_then(Json::as_array).is_some_and(|l| find(l, PROXY).is_some());
    if let Some(Json::Array(init)) = spec.get_mut("initContainers") {
        if native {
            for name in ["enable-core-dump", PROXY, "istio-validation", "istio-init"] {
                move_container(init, name, false);
            }
        } else {
            move_container(init, "istio-validation", false);
            move_container(init, "istio-init", true);
            move_container(init, "enable-core-dump", true);
        }
    }
    Ok(())
}

fn move_container(list: &mut Vec<Json>, name: &str, last: bool) {
    if let Some(i) = list.iter().position(|c| c["name"] == name) {
        let c = list.remove(i);
        if last {
            list.push(c);
        } else {
            list.insert(0, c);
        }
    }
}
