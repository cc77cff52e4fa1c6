//! The functions the chart's injection templates call, with Go's
//! semantics (istiod's `pkg/kube/inject/template.go` `InjectionFuncmap`,
//! which overrides sprig's `indent` and `contains`, and the few sprig v3
//! functions the templates use). See docs/design/injection-notes.md §3.3.
//! Functions that read typed Kubernetes or proto values (`protoToJSON`,
//! `structToJSON` of ports, `otelResourceAttributes`) come with the
//! injection's data model.

use std::collections::{BTreeMap, HashMap};

use std::sync::Arc;

use super::gotmpl::{Func, Value, print};

/// The functions by name.
pub fn funcs() -> HashMap<&'static str, Func> {
    let mut f: HashMap<&'static str, Func> = HashMap::new();
    f.insert("annotation", annotation);
    f.insert("isset", isset);
    f.insert("valueOrDefault", value_or_default);
    f.insert("toYaml", to_yaml);
    f.insert("indent", indent);
    f.insert("nindent", nindent);
    f.insert("fromJSON", from_json);
    f.insert("toJSON", to_json);
    f.insert("contains", contains);
    f.insert("toLower", |a| Ok(Value::Str(string(a, 0, "toLower")?.to_lowercase())));
    f.insert("directory", directory);
    f.insert("excludeInboundPort", exclude_inbound_port);
    f.insert("appendMultusNetwork", append_multus_network);
    f.insert("omitNil", |a| Ok(one(a, "omitNil")?.clone()).map(|v| omit_nil(&v).unwrap_or(Value::Nil)));
    f.insert("default", default);
    f.insert("quote", quote);
    f.insert("list", |a| Ok(Value::List(Arc::new(a.to_vec()))));
    f.insert("append", append);
    f.insert("join", join);
    f.insert("trunc", trunc);
    f.insert("trimAll", trim_all);
    f.insert("env", env);
    f.insert("omit", omit);
    f.insert("strdict", strdict);
    f.insert("mergeMaps", merge_maps);
    f.insert("toJsonMap", |a| Ok(Value::Str(merge_maps(a)?.to_json().to_string())));
    f.insert("structToJSON", struct_to_json);
    f.insert("protoToJSON", proto_to_json);
    f.insert("otelResourceAttributes", otel_resource_attributes);
    f.insert("formatDuration", |a| Ok(one(a, "formatDuration")?.clone()));
    f.insert("includeInboundPorts", |a| container_ports(a, false));
    f.insert("applicationPorts", |a| container_ports(a, true));
    f.insert("kubevirtInterfaces", |a| Ok(Value::Str(string(a, 0, "kubevirtInterfaces")?.to_owned())));
    f.insert("excludeInterfaces", |a| Ok(Value::Str(string(a, 0, "excludeInterfaces")?.to_owned())));
    f
}

/// Go's JSON name of a field (`ContainerPort` → `containerPort`).
fn json_name(k: &str) -> String {
    let mut c = k.chars();
    c.next().map(|f| f.to_ascii_lowercase()).into_iter().chain(c).collect()
}

/// A template value with Go field names back to its JSON form; maps of
/// data (string maps) keep their keys.
fn to_go_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Map(m, false) => m.iter().map(|(k, v)| (json_name(k), to_go_json(v))).collect(),
        Value::List(l) => l.iter().map(to_go_json).collect(),
        v => v.to_json(),
    }
}

/// `structToJSON v`: `json.Marshal` of a Kubernetes struct; container
/// ports in `corev1.ContainerPort`'s field order.
fn struct_to_json(a: &mut [Value]) -> Result<Value, String> {
    let v = one(a, "structToJSON")?;
    if matches!(v, Value::Invalid | Value::Nil) {
        return Ok(Value::Str("{}".into()));
    }
    let j = to_go_json(v);
    let port_fields = ["name", "hostPort", "containerPort", "protocol", "hostIP"];
    if let Some(m) =
        j.as_object().filter(|m| m.contains_key("containerPort") && m.keys().all(|k| port_fields.contains(&k.as_str())))
    {
        let mut out = String::from("{");
        for f in port_fields {
            let Some(x) = m.get(f) else { continue };
            let zero = x.is_null() || *x == serde_json::json!("") || *x == serde_json::json!(0);
            if zero && f != "containerPort" {
                continue;
            }
            if out.len() > 1 {
                out.push(',');
            }
            out.push_str(&format!("{}:{}", serde_json::json!(f), x));
        }
        out.push('}');
        return Ok(Value::Str(out));
    }
    Ok(Value::Str(j.to_string()))
}

/// ProxyConfig's fields in declaration order (`mesh/v1alpha1/proxy.proto`),
/// the order Go's protojson writes them in.
const PROXY_CONFIG_FIELDS: [&str; 39] = [
    "configPath",
    "binaryPath",
    "serviceCluster",
    "tracingServiceName",
    "drainDuration",
    "discoveryAddress",
    "discoveryRefreshDelay",
    "zipkinAddress",
    "statsdUdpAddress",
    "envoyMetricsServiceAddress",
    "proxyAdminPort",
    "availabilityZone",
    "controlPlaneAuthPolicy",
    "customConfigFile",
    "statNameLength",
    "concurrency",
    "proxyBootstrapTemplatePath",
    "interceptionMode",
    "tracing",
    "sds",
    "envoyAccessLogService",
    "envoyMetricsService",
    "proxyMetadata",
    "runtimeValues",
    "statusPort",
    "extraStatTags",
    "gatewayTopology",
    "terminationDrainDuration",
    "meshId",
    "readinessProbe",
    "proxyStatsMatcher",
    "holdApplicationUntilProxyStarts",
    "caCertificatesPem",
    "image",
    "privateKeyProvider",
    "proxyHeaders",
    "fileFlushInterval",
    "fileFlushMinSizeKb",
    "statsCompression",
];

/// `protoToJSON proxyConfig`: istiod's `cleanProxyConfig` (fields equal to
/// `mesh.DefaultProxyConfig()` dropped) then compact proto JSON in field
/// order.
fn proto_to_json(a: &mut [Value]) -> Result<Value, String> {
    let v = one(a, "protoToJSON")?;
    let serde_json::Value::Object(mut m) = to_go_json(v) else {
        return Ok(Value::Str("{}".into()));
    };
    let defaults = crate::proxy_config::defaults();
    m.retain(|k, v| defaults.get(k) != Some(v));
    if m.get("interceptionMode").and_then(serde_json::Value::as_str) == Some("REDIRECT") {
        m.remove("interceptionMode");
    }
    for k in ["proxyMetadata", "runtimeValues"] {
        if m.get(k).and_then(serde_json::Value::as_object).is_some_and(serde_json::Map::is_empty) {
            m.remove(k);
        }
    }
    let mut out = String::from("{");
    let mut fields: Vec<&String> = m.keys().collect();
    fields.sort_by_key(|k| PROXY_CONFIG_FIELDS.iter().position(|f| f == k).unwrap_or(usize::MAX));
    for k in fields {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&format!("{}:{}", serde_json::json!(k), m[k]));
    }
    out.push('}');
    Ok(Value::Str(out))
}

fn str_at<'a>(m: &'a Value, k: &str) -> &'a str {
    match m {
        Value::Map(m, _) => m.get(k).and_then(Value::as_str).unwrap_or_default(),
        _ => "",
    }
}

/// `otelResourceAttributes mesh annotations labels namespace containers`:
/// the OTel resource attributes when an OpenTelemetry provider asks for
/// semantic conventions, else "".
fn otel_resource_attributes(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 5, "otelResourceAttributes")?;
    let providers = match &a[0] {
        Value::Map(m, _) => m.get("ExtensionProviders").cloned().unwrap_or(Value::Invalid),
        _ => Value::Invalid,
    };
    let enriched = match &providers {
        Value::List(l) => l.iter().any(|p| {
            let j = p.to_json();
            j.pointer("/opentelemetry/serviceAttributeEnrichment").and_then(serde_json::Value::as_str)
                == Some("OTEL_SEMANTIC_CONVENTIONS")
        }),
        _ => false,
    };
    if !enriched {
        return Ok(Value::Str(String::new()));
    }
    let (annos, labels) = (&a[1], &a[2]);
    let ns = a[3].as_str().unwrap_or_default();
    let containers = match &a[4] {
        Value::List(l) => l.as_slice(),
        _ => &[],
    };
    let mut attrs = Vec::new();
    let ns_attr = Some(str_at(annos, "resource.opentelemetry.io/service.namespace"))
        .filter(|s| !s.is_empty())
        .or(Some(ns).filter(|s| !s.is_empty()));
    if let Some(n) = ns_attr {
        attrs.push(format!("service.namespace={n}"));
    }
    let mut version = str_at(annos, "resource.opentelemetry.io/service.version").to_owned();
    if version.is_empty() {
        version = str_at(labels, "app.kubernetes.io/version").to_owned();
    }
    if version.is_empty() && containers.len() == 1 {
        let image = str_at(&containers[0], "Image");
        let (rest, digest) = image.split_once('@').map_or((image, ""), |(r, d)| (r, d));
        let after_slash = rest.rsplit_once('/').map_or(rest, |(_, r)| r);
        let tag = after_slash.rsplit_once(':').map_or("", |(_, t)| t);
        version = match (tag, digest) {
            ("", d) => d.to_owned(),
            (t, "") => t.to_owned(),
            (t, d) => format!("{t}@{d}"),
        };
    }
    if !version.is_empty() {
        attrs.push(format!("service.version={version}"));
    }
    let instance = str_at(annos, "resource.opentelemetry.io/service.instance.id");
    if !instance.is_empty() {
        attrs.push(format!("service.instance.id={instance}"));
    } else if let Some(c) = containers.first() {
        attrs.push(format!("service.instance.id={ns}.$(POD_NAME).{}", str_at(c, "Name")));
    }
    Ok(Value::Str(attrs.join(",")))
}

/// `includeInboundPorts containers` / `applicationPorts containers`: the
/// containers' TCP ports, comma-joined (the latter without the proxy's).
fn container_ports(a: &[Value], skip_proxy: bool) -> Result<Value, String> {
    let mut ports = Vec::new();
    if let Value::List(cs) = one(a, "includeInboundPorts")? {
        for c in cs.iter() {
            if skip_proxy && str_at(c, "Name") == "istio-proxy" {
                continue;
            }
            if let Value::Map(m, _) = c
                && let Some(Value::List(ps)) = m.get("Ports")
            {
                for p in ps.iter() {
                    if matches!(str_at(p, "Protocol"), "UDP" | "SCTP") {
                        continue;
                    }
                    if let Value::Map(pm, _) = p
                        && let Some(Value::Num(n)) = pm.get("ContainerPort")
                    {
                        ports.push(format!("{n}"));
                    }
                }
            }
        }
    }
    Ok(Value::Str(ports.join(",")))
}

fn arity(a: &[Value], n: usize, name: &str) -> Result<(), String> {
    if a.len() == n { Ok(()) } else { Err(format!("wrong number of args for {name}: want {n} got {}", a.len())) }
}

fn one<'a>(a: &'a [Value], name: &str) -> Result<&'a Value, String> {
    arity(a, 1, name)?;
    Ok(&a[0])
}

/// Argument `i` as a Go `string` parameter (an invalid value is an error).
fn string<'a>(a: &'a [Value], i: usize, name: &str) -> Result<&'a str, String> {
    match a.get(i) {
        Some(Value::Str(s)) => Ok(s),
        Some(Value::Invalid) | None => Err(format!("{name}: invalid value; expected string")),
        Some(other) => Err(format!("{name}: wrong type for value; expected string; got {}", print(other))),
    }
}

/// Argument `i` as a Go `int` parameter.
fn int(a: &[Value], i: usize, name: &str) -> Result<i64, String> {
    match a.get(i) {
        Some(Value::Num(n)) if n.fract() == 0.0 => Ok(*n as i64),
        _ => Err(format!("{name}: expected an integer")),
    }
}

/// `annotation meta name default`: the annotation when present (even
/// empty), else `fmt.Sprint(default)`.
fn annotation(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 3, "annotation")?;
    let name = string(a, 1, "annotation")?;
    let found = match &a[0] {
        Value::Map(m, _) => match m.get("Annotations").or_else(|| m.get("annotations")) {
            Some(Value::Map(ann, _)) => ann.get(name).cloned(),
            _ => None,
        },
        _ => None,
    };
    Ok(Value::Str(match found {
        Some(v) => print(&v),
        None => match &a[2] {
            Value::Invalid | Value::Nil => "<nil>".into(),
            d => print(d),
        },
    }))
}

/// `isset map key`: the key is present.
fn isset(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 2, "isset")?;
    let key = string(a, 1, "isset")?;
    Ok(Value::Bool(matches!(&a[0], Value::Map(m, _) if m.contains_key(key))))
}

/// `valueOrDefault value default`: `default` only for `""` and nil.
fn value_or_default(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 2, "valueOrDefault")?;
    Ok(match &a[0] {
        Value::Invalid | Value::Nil => a[1].clone(),
        Value::Str(s) if s.is_empty() => a[1].clone(),
        v => v.clone(),
    })
}

/// `toYaml v`: sigs.k8s.io/yaml's output (keys sorted, a final newline);
/// "" when it cannot be written.
fn to_yaml(a: &mut [Value]) -> Result<Value, String> {
    let v = one(a, "toYaml")?;
    Ok(Value::Str(serde_yaml_ng::to_string(&v.to_json()).unwrap_or_default()))
}

/// Istio's `indent spaces s`: every line but the first gets the spaces.
fn indent(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 2, "indent")?;
    let pad = " ".repeat(int(a, 0, "indent")?.max(0) as usize);
    let s = string(a, 1, "indent")?;
    Ok(Value::Str(s.split('\n').collect::<Vec<_>>().join(&format!("\n{pad}"))))
}

/// sprig's `nindent n s`: a newline, then every line padded.
fn nindent(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 2, "nindent")?;
    let pad = " ".repeat(int(a, 0, "nindent")?.max(0) as usize);
    let s = string(a, 1, "nindent")?;
    Ok(Value::Str(format!("\n{pad}{}", s.replace('\n', &format!("\n{pad}")))))
}

/// `fromJSON s`: the decoded value, or the string `{}` when it is not JSON.
fn from_json(a: &mut [Value]) -> Result<Value, String> {
    let s = string(a, 0, "fromJSON")?;
    Ok(serde_json::from_str::<serde_json::Value>(s).map_or(Value::Str("{}".into()), |v| {
        // Go decodes objects as map[string]interface{} (not string maps).
        match Value::from(&v) {
            Value::Map(m, _) => Value::Map(m, false),
            other => other,
        }
    }))
}

/// `toJSON map`: the JSON of a string map, `{}` for nil.
fn to_json(a: &mut [Value]) -> Result<Value, String> {
    Ok(Value::Str(match one(a, "toJSON")? {
        Value::Invalid | Value::Nil => "{}".into(),
        v => v.to_json().to_string(),
    }))
}

/// Istio's `contains needle haystack`.
fn contains(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 2, "contains")?;
    Ok(Value::Bool(string(a, 1, "contains")?.contains(string(a, 0, "contains")?)))
}

/// `directory path`: Go's `path.Split` directory, with its final `/`.
fn directory(a: &mut [Value]) -> Result<Value, String> {
    let p = string(a, 0, "directory")?;
    Ok(Value::Str(p.rfind('/').map_or(String::new(), |i| p[..=i].to_owned())))
}

/// `excludeInboundPort port excluded`: `port` appended to the
/// comma-separated list unless it is there, empty or 0.
fn exclude_inbound_port(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 2, "excludeInboundPort")?;
    let port = print(&a[0]).trim().to_owned();
    let excluded = string(a, 1, "excludeInboundPort")?;
    if port.is_empty() || port == "0" || excluded.split(',').any(|p| p == port) {
        return Ok(Value::Str(excluded.to_owned()));
    }
    let mut items: Vec<&str> = excluded.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    items.push(&port);
    Ok(Value::Str(items.join(",")))
}

/// `appendMultusNetwork existing istioCni`: the CNI network added to the
/// pod's Multus networks (JSON list or comma-separated names) unless
/// there.
fn append_multus_network(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 2, "appendMultusNetwork")?;
    let existing = string(a, 0, "appendMultusNetwork")?;
    let cni = string(a, 1, "appendMultusNetwork")?;
    if existing.is_empty() {
        return Ok(Value::Str(cni.to_owned()));
    }
    if existing.contains(']') {
        let Ok(list) = serde_json::from_str::<Vec<serde_json::Map<String, serde_json::Value>>>(existing) else {
            return Ok(Value::Str(existing.to_owned()));
        };
        let (ns, name) = cni.split_once('/').unwrap_or(("", cni));
        let present = list.iter().any(|n| {
            n.get("name").and_then(|v| v.as_str()) == Some(name)
                && n.get("namespace").and_then(|v| v.as_str()).unwrap_or("") == ns
        });
        if present {
            return Ok(Value::Str(existing.to_owned()));
        }
        let entry = if ns.is_empty() {
            format!(", {{\"name\": \"{name}\"}}")
        } else {
            format!(", {{\"name\": \"{name}\", \"namespace\": \"{ns}\"}}")
        };
        let at = existing.rfind(']').unwrap_or(existing.len());
        return Ok(Value::Str(format!("{}{entry}{}", &existing[..at], &existing[at..])));
    }
    if existing.split(',').any(|n| n.trim() == cni) {
        return Ok(Value::Str(existing.to_owned()));
    }
    Ok(Value::Str(format!("{existing}, {cni}")))
}

/// `omitNil v`: nils removed from maps and lists, recursively; what
/// becomes empty goes too (`None`).
fn omit_nil(v: &Value) -> Option<Value> {
    match v {
        Value::Invalid | Value::Nil => None,
        Value::Map(m, strings) => {
            let kept: BTreeMap<String, Value> =
                m.iter().filter_map(|(k, e)| omit_nil(e).map(|e| (k.clone(), e))).collect();
            if kept.is_empty() { None } else { Some(Value::Map(Arc::new(kept), *strings)) }
        }
        Value::List(l) => {
            let kept: Vec<Value> = l.iter().filter_map(omit_nil).collect();
            if kept.is_empty() { None } else { Some(Value::List(Arc::new(kept))) }
        }
        other => Some(other.clone()),
    }
}

/// sprig's `default d given`: `given` unless empty.
fn default(a: &mut [Value]) -> Result<Value, String> {
    match a {
        [d] => Ok(d.clone()),
        [d, given] => Ok(if given.truthy() { given.clone() } else { d.clone() }),
        _ => Err(format!("wrong number of args for default: want 1 or 2 got {}", a.len())),
    }
}

/// Go's `%q` of a string (`strconv.Quote`).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() || c == '\u{a0}' || c == '\u{ad}' => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// sprig's `quote`: each non-nil argument quoted, space-separated.
fn quote(a: &mut [Value]) -> Result<Value, String> {
    let parts: Vec<String> =
        a.iter().filter(|v| !matches!(v, Value::Invalid | Value::Nil)).map(|v| go_quote(&print(v))).collect();
    Ok(Value::Str(parts.join(" ")))
}

/// sprig's `append list v`.
fn append(a: &mut [Value]) -> Result<Value, String> {
    match a {
        [Value::List(l), v] => {
            // In place when the caller gave up the list (`$l = append $l x`):
            // amortized O(1) as Go's append, not a copy per element.
            let mut l = std::mem::take(l);
            Arc::make_mut(&mut l).push(std::mem::replace(v, Value::Invalid));
            Ok(Value::List(l))
        }
        [other, _] => Err(format!("Cannot push on type {}", print(other))),
        _ => Err(format!("wrong number of args for append: want 2 got {}", a.len())),
    }
}

/// sprig's `join sep list`.
fn join(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 2, "join")?;
    let sep = string(a, 0, "join")?;
    let items: Vec<String> = match &a[1] {
        Value::List(l) => l.iter().filter(|v| !matches!(v, Value::Invalid | Value::Nil)).map(print).collect(),
        Value::Invalid | Value::Nil => Vec::new(),
        v => vec![print(v)],
    };
    Ok(Value::Str(items.join(sep)))
}

/// sprig's `trunc n s` (bytes; negative keeps the end).
fn trunc(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 2, "trunc")?;
    let n = int(a, 0, "trunc")?;
    let s = print(&a[1]);
    let len = s.len() as i64;
    let cut = |from: usize, to: usize| s.get(from..to).map(str::to_owned).unwrap_or_else(|| s.clone());
    Ok(Value::Str(if n >= 0 && len > n {
        cut(0, n as usize)
    } else if n < 0 && len + n > 0 {
        cut((len + n) as usize, s.len())
    } else {
        s.clone()
    }))
}

/// sprig's `trimAll cutset s` (Go's `strings.Trim`).
fn trim_all(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 2, "trimAll")?;
    let cutset = string(a, 0, "trimAll")?;
    Ok(Value::Str(print(&a[1]).trim_matches(|c| cutset.contains(c)).to_owned()))
}

/// Istio's `env key default`: the variable, or the default when unset or
/// empty.
fn env(a: &mut [Value]) -> Result<Value, String> {
    arity(a, 2, "env")?;
    let key = string(a, 0, "env")?;
    Ok(match std::env::var(key) {
        Ok(v) if !v.is_empty() => Value::Str(v),
        _ => a[1].clone(),
    })
}

/// Istio's `omit map keys...`.
fn omit(a: &mut [Value]) -> Result<Value, String> {
    let (m, keys) = a.split_first().ok_or("omit needs a map")?;
    let Value::Map(m, strings) = m else { return Ok(Value::Map(Default::default(), true)) };
    let keys: Vec<String> = keys.iter().map(print).collect();
    let kept = m.iter().filter(|(k, _)| !keys.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    Ok(Value::Map(Arc::new(kept), *strings))
}

/// Istio's `strdict k v ...` (an odd last key gets "").
fn strdict(a: &mut [Value]) -> Result<Value, String> {
    let mut m = BTreeMap::new();
    for pair in a.chunks(2) {
        let v = pair.get(1).map_or(String::new(), print);
        m.insert(print(&pair[0]), Value::Str(v));
    }
    Ok(Value::Map(Arc::new(m), true))
}

/// Istio's `mergeMaps maps...`: later keys win.
fn merge_maps(a: &mut [Value]) -> Result<Value, String> {
    if a.is_empty() {
        return Ok(Value::Nil);
    }
    let mut out = BTreeMap::new();
    for m in a {
        if let Value::Map(m, _) = m {
            out.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    Ok(Value::Map(Arc::new(out), true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gotmpl::Template;
    use serde_json::json;

    fn run(src: &str, data: serde_json::Value) -> String {
        Template::parse("t", src, funcs()).unwrap().render(&Value::from(&data)).unwrap_or_else(|e| panic!("{src}: {e}"))
    }

    /// Values from pkg/kube/inject/template.go and sprig v3 as
    /// docs/design/injection-notes.md §3.3 records them.
    #[test]
    fn injection_functions_behave_as_istiods() {
        let meta = json!({"m": {"Annotations": {"a": "x", "empty": ""}}, "port": 15020, "mode": "REDIRECT"});
        assert_eq!(
            run(
                "{{ annotation .m `a` 1 }}|{{ annotation .m `empty` 1 }}|{{ annotation .m `b` .port }}|{{ annotation .m `b` .missing }}",
                meta.clone()
            ),
            "x||15020|<nil>"
        );
        assert_eq!(
            run("{{ isset .m.Annotations `empty` }} {{ isset .m.Annotations `b` }} {{ isset .nil `b` }}", meta.clone()),
            "true false false"
        );
        assert_eq!(
            run(
                "{{ valueOrDefault .m.Annotations.empty `d` }}|{{ valueOrDefault false `d` }}|{{ valueOrDefault 0 `d` }}|{{ valueOrDefault .missing `d` }}",
                meta.clone()
            ),
            "d|false|0|d"
        );
        assert_eq!(run("{{ indent 2 \"a\\nb\\n\" }}|", json!({})), "a\n  b\n  |");
        assert_eq!(run("{{ nindent 2 \"a\\nb\" }}", json!({})), "\n  a\n  b");
        assert_eq!(
            run("{{ toYaml .v }}", json!({"v": {"b": [1, "x"], "a": {"c": true}}})),
            "a:\n  c: true\nb:\n- 1\n- x\n"
        );
        assert_eq!(
            run(
                "{{ range $k, $v := fromJSON `{\"b\":1,\"a\":2}` }}{{$k}}{{$v}}{{ end }}|{{ fromJSON `nope` }}",
                json!({})
            ),
            "a2b1|{}"
        );
        assert_eq!(
            run(
                "{{ contains `b` `abc` }} {{ toLower `AbC` }} [{{ directory `a/b/c.pem` }}] [{{ directory `c.pem` }}]",
                json!({})
            ),
            "true abc [a/b/] []"
        );
        assert_eq!(
            run(
                "{{ excludeInboundPort .port `` }}|{{ excludeInboundPort `15020` `4, 5,6` }}|{{ excludeInboundPort `5` `4,5` }}|{{ excludeInboundPort 0 `4` }}",
                meta.clone()
            ),
            "15020|4,5,6,15020|4,5|4"
        );
        assert_eq!(
            run(
                "{{ appendMultusNetwork `` `istio-cni` }}|{{ appendMultusNetwork `a, istio-cni` `istio-cni` }}|{{ appendMultusNetwork `a` `istio-cni` }}",
                json!({})
            ),
            "istio-cni|a, istio-cni|a, istio-cni"
        );
        assert_eq!(
            run("{{ appendMultusNetwork `[{\"name\": \"x\"}]` `default/istio-cni` }}", json!({})),
            "[{\"name\": \"x\"}, {\"name\": \"istio-cni\", \"namespace\": \"default\"}]"
        );
        assert_eq!(run("{{ toYaml (omitNil .v) }}", json!({"v": {"a": null, "b": {"c": null}, "d": 1}})), "d: 1\n");
        assert_eq!(
            run("{{ .missing | default `d` }} {{ `` | default `e` }} {{ `x` | default `d` }}", json!({})),
            "d e x"
        );
        assert_eq!(
            run("{{ quote `a\"b` }}|{{ .missing | quote }}|{{ quote 15020.0 true }}", json!({})),
            "\"a\\\"b\"||\"15020\" \"true\""
        );
        assert_eq!(run("{{ $l := list `a` }}{{ $l = append $l `b` }}{{ join `,` $l }}", json!({})), "a,b");
        assert_eq!(
            run(
                "{{ trunc 3 `abcdef` }} {{ trunc -2 `abcdef` }} {{ trunc 9 `ab` }} {{ trimAll `-_.` `._name-_` }}",
                json!({})
            ),
            "abc ef ab name"
        );
        assert_eq!(
            run(
                "{{ toJSON (strdict `b` `1` `a`) }} {{ toJSON (omit .m `x`) }} {{ toJsonMap .m .n }}",
                json!({"m": {"x": "1", "y": "2"}, "n": {"y": "3"}})
            ),
            "{\"a\":\"\",\"b\":\"1\"} {\"y\":\"2\"} {\"x\":\"1\",\"y\":\"3\"}"
        );
        assert_eq!(go_quote("tab\there\u{1}é"), "\"tab\\there\\x01é\"");
    }
}
