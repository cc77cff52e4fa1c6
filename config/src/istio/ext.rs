//! The Istio kinds kept as written: EnvoyFilter, WorkloadGroup,
//! ProxyConfig (`networking.istio.io`), Telemetry (`telemetry.istio.io`),
//! WasmPlugin and TrafficExtension (`extensions.istio.io`). Their specs
//! are kept as JSON, as istiod decodes them (`protomarshal.ApplyJSON`
//! allows unknown fields inside `spec`), read where they are applied
//! (EnvoyFilters by `istiod-envoyfilter`, extensions by
//! `crate::extensions`, Telemetry by the mesh model), and checked here
//! with istiod's rules (`pkg/config/validation/validation.go`:
//! `ValidateEnvoyFilter` in `validation/envoyfilter`,
//! `ValidateWorkloadGroup`, `ValidateProxyConfig`, `ValidateTelemetry`,
//! `ValidateWasmPlugin`, `ValidateTrafficExtension`) plus what their CRDs'
//! OpenAPI and CEL rules (`manifests/charts/base/files/crd-all.gen.yaml`)
//! make the API server refuse, since a `--configDir` has no API server:
//! enum names, scalar types, the selector/targetRefs one-of, ports and
//! lengths. Errors name their field; istiod's warnings come back apart
//! ([`warnings`]). The facts are in docs/design/research-validation-*.md.

use serde_json::Value;

use super::field::FieldError;

/// A kept spec, as written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExtSpec(pub Value);

impl<'de> serde::Deserialize<'de> for ExtSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(ExtSpec)
    }
}

/// The kinds of this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtKind {
    /// EnvoyFilter.
    EnvoyFilter,
    /// WorkloadGroup.
    WorkloadGroup,
    /// ProxyConfig.
    ProxyConfig,
    /// Telemetry.
    Telemetry,
    /// WasmPlugin.
    WasmPlugin,
    /// TrafficExtension.
    TrafficExtension,
}

struct V {
    errors: Vec<FieldError>,
    warnings: Vec<String>,
}

impl V {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError::new(path, message));
    }

    fn warn(&mut self, message: impl Into<String>) {
        self.warnings.push(message.into());
    }

    /// A string field (absent is ""); another type is a decode error.
    fn string<'a>(&mut self, v: &'a Value, path: &str) -> &'a str {
        match v {
            Value::Null => "",
            Value::String(s) => s,
            _ => {
                self.err(path, "invalid value: want a string");
                ""
            }
        }
    }

    /// An integer field (absent is 0), within `lo..=hi`.
    fn int(&mut self, v: &Value, path: &str, lo: i64, hi: i64) -> i64 {
        match v {
            Value::Null => 0,
            Value::Number(n) => match n.as_i64() {
                Some(i) if (lo..=hi).contains(&i) => i,
                _ => {
                    self.err(path, format!("invalid value {n}: want an integer in {lo}..{hi}"));
                    0
                }
            },
            _ => {
                self.err(path, "invalid value: want an integer");
                0
            }
        }
    }

    fn bool(&mut self, v: &Value, path: &str) {
        if !matches!(v, Value::Null | Value::Bool(_)) {
            self.err(path, "invalid value: want a boolean");
        }
    }

    /// An enum field, by name or number (protojson takes both); the name
    /// of its value, `names[0]` when absent.
    fn enumeration(&mut self, v: &Value, path: &str, names: &[&'static str]) -> &'static str {
        match v {
            Value::Null => names[0],
            Value::String(s) => match names.iter().find(|n| **n == s) {
                Some(n) => n,
                None => {
                    self.err(path, format!("invalid value {s:?}: want one of {}", names.join(", ")));
                    names[0]
                }
            },
            Value::Number(n) => match n.as_u64().and_then(|i| names.get(i as usize)) {
                Some(name) => name,
                None => {
                    self.err(path, format!("invalid enum number {n}"));
                    names[0]
                }
            },
            _ => {
                self.err(path, "invalid value: want an enum name");
                names[0]
            }
        }
    }

    fn object<'a>(&mut self, v: &'a Value, path: &str) -> Option<&'a serde_json::Map<String, Value>> {
        match v {
            Value::Null => None,
            Value::Object(m) => Some(m),
            _ => {
                self.err(path, "invalid value: want an object");
                None
            }
        }
    }

    fn list<'a>(&mut self, v: &'a Value, path: &str) -> &'a [Value] {
        match v {
            Value::Null => &[],
            Value::Array(a) => a,
            _ => {
                self.err(path, "invalid value: want a list");
                &[]
            }
        }
    }

    /// A `map<string, string>`.
    fn string_map<'a>(&mut self, v: &'a Value, path: &str) -> Vec<(&'a str, &'a str)> {
        let Some(m) = self.object(v, path) else { return Vec::new() };
        let mut out = Vec::new();
        for (k, x) in m {
            match x {
                Value::String(s) => out.push((k.as_str(), s.as_str())),
                _ => self.err(format!("{path}[{k}]"), "invalid value: want a string"),
            }
        }
        out
    }

    fn duration(&mut self, v: &Value, path: &str) {
        let s = self.string(v, path);
        if s.is_empty() {
            return;
        }
        match crate::duration::parse(s) {
            Ok(d) if d < std::time::Duration::from_millis(1) => {
                self.err(path, "must be a valid duration greater than 1ms")
            }
            Ok(_) => {}
            Err(e) => self.err(path, e.to_string()),
        }
    }

    /// istiod's `validateWorkloadSelector` over `matchLabels` (or the
    /// networking selector's `labels`), with the CRD's value length.
    fn selector(&mut self, sel: &Value, path: &str, field: &str, warning: &str) {
        let Some(m) = self.object(sel, path) else { return };
        let labels = self.string_map(m.get(field).unwrap_or(&Value::Null), &format!("{path}.{field}"));
        if labels.is_empty() {
            self.warn(warning);
        }
        for (k, v) in labels {
            let kv = format!("{k}={v}");
            if k.is_empty() {
                self.err(format!("{path}.{field}"), format!("empty key is not supported in selector: {kv:?}"));
            }
            if k.contains('*') || v.contains('*') {
                self.err(format!("{path}.{field}"), format!("wildcard is not supported in selector: {kv:?}"));
            }
            if v.len() > 63 {
                self.err(format!("{path}.{field}[{k}]"), "label value may not be longer than 63 characters");
            }
        }
    }

    /// istiod's `validatePolicyTargetReference` with the CRD's shape rules.
    fn target_ref(&mut self, r: &Value, path: &str, kinds_checked: bool) {
        let Some(m) = self.object(r, path) else { return };
        let get = |k: &str| m.get(k).unwrap_or(&Value::Null);
        let group = self.string(get("group"), &format!("{path}.group")).to_owned();
        let kind = self.string(get("kind"), &format!("{path}.kind")).to_owned();
        let name = self.string(get("name"), &format!("{path}.name")).to_owned();
        let ns = self.string(get("namespace"), &format!("{path}.namespace")).to_owned();
        if name.is_empty() {
            self.err(format!("{path}.name"), "targetRef name must be set");
        }
        if !ns.is_empty() {
            self.err(
                format!("{path}.namespace"),
                "targetRef namespace must not be set; cross namespace referencing is not supported",
            );
        }
        if kind.is_empty() {
            self.err(format!("{path}.kind"), "kind is required");
        }
        if kinds_checked {
            let g = if group.is_empty() { "core" } else { group.as_str() };
            let allowed = [
                ("core", "Service"),
                ("networking.istio.io", "ServiceEntry"),
                ("gateway.networking.k8s.io", "Gateway"),
                ("gateway.networking.k8s.io", "GatewayClass"),
            ];
            if !allowed.contains(&(g, kind.as_str())) {
                self.err(
                    path,
                    format!(
                        "targetRef must be to one of [core/v1/Service networking.istio.io/v1/ServiceEntry \
                         gateway.networking.k8s.io/v1/Gateway gateway.networking.k8s.io/v1/GatewayClass] but was {group}/{kind}"
                    ),
                );
            }
        }
    }

    /// `selector`/`targetRef`/`targetRefs` of Telemetry and WasmPlugin, or
    /// (`singular` false) `selector`/`targetRefs` of a TrafficExtension,
    /// which has no `targetRef` (istiod passes none to
    /// `validateOneOfSelectorType`).
    fn policy_selection(&mut self, spec: &serde_json::Map<String, Value>, singular: bool) {
        let get = |k: &str| spec.get(k).unwrap_or(&Value::Null);
        let target_ref = if singular { get("targetRef") } else { &Value::Null };
        let refs = self.list(get("targetRefs"), "spec.targetRefs");
        let set = [!get("selector").is_null(), !target_ref.is_null(), !refs.is_empty()];
        if set.iter().filter(|s| **s).count() > 1 {
            self.err("spec", "only one of targetRefs or workloadSelector can be set");
        }
        self.selector(get("selector"), "spec.selector", "matchLabels", "workload selector specified without labels");
        if !target_ref.is_null() {
            self.target_ref(target_ref, "spec.targetRef", true);
        }
        if refs.len() > 16 {
            self.err("spec.targetRefs", "may not have more than 16 items");
        }
        for (i, r) in refs.iter().enumerate() {
            self.target_ref(r, &format!("spec.targetRefs[{i}]"), true);
        }
    }
}

/// Checks `spec` of kind `kind`: (errors, istiod's warnings).
pub fn check(kind: ExtKind, spec: &Value) -> (Vec<FieldError>, Vec<String>) {
    let mut v = V { errors: Vec::new(), warnings: Vec::new() };
    let empty = serde_json::Map::new();
    let spec_map = match spec {
        Value::Null => &empty,
        Value::Object(m) => m,
        _ => {
            v.err("spec", "invalid value: want an object");
            return (v.errors, v.warnings);
        }
    };
    match kind {
        ExtKind::EnvoyFilter => envoy_filter(&mut v, spec_map),
        ExtKind::WorkloadGroup => workload_group(&mut v, spec_map),
        ExtKind::ProxyConfig => proxy_config(&mut v, spec_map),
        ExtKind::Telemetry => telemetry(&mut v, spec_map),
        ExtKind::WasmPlugin => wasm_plugin(&mut v, spec_map),
        ExtKind::TrafficExtension => traffic_extension(&mut v, spec_map),
    }
    (v.errors, v.warnings)
}

const APPLY_TO: [&str; 12] = [
    "INVALID",
    "LISTENER",
    "FILTER_CHAIN",
    "NETWORK_FILTER",
    "HTTP_FILTER",
    "ROUTE_CONFIGURATION",
    "VIRTUAL_HOST",
    "HTTP_ROUTE",
    "CLUSTER",
    "EXTENSION_CONFIG",
    "BOOTSTRAP",
    "LISTENER_FILTER",
];
const PATCH_CONTEXT: [&str; 5] = ["ANY", "SIDECAR_INBOUND", "SIDECAR_OUTBOUND", "GATEWAY", "WAYPOINT"];
const OPERATION: [&str; 9] = [
    "INVALID",
    "MERGE",
    "ADD",
    "REMOVE",
    "INSERT_BEFORE",
    "INSERT_AFTER",
    "INSERT_FIRST",
    "REPLACE",
    "MERGE_AND_REPLACE_LIST",
];
const FILTER_CLASS: [&str; 4] = ["UNSPECIFIED", "AUTHN", "AUTHZ", "STATS"];
const ROUTE_ACTION: [&str; 4] = ["ANY", "ROUTE", "REDIRECT", "DIRECT_RESPONSE"];
const HCM: [&str; 2] = ["envoy.filters.network.http_connection_manager", "envoy.http_connection_manager"];
/// istio's `xds.DeprecatedFilterNames`: old name → canonical one.
const DEPRECATED_FILTERS: [(&str, &str); 12] = [
    ("envoy.router", "envoy.filters.http.router"),
    ("envoy.http_connection_manager", "envoy.filters.network.http_connection_manager"),
    ("envoy.cors", "envoy.filters.http.cors"),
    ("envoy.lua", "envoy.filters.http.lua"),
    ("envoy.fault", "envoy.filters.http.fault"),
    ("envoy.ext_authz", "envoy.filters.http.ext_authz"),
    ("envoy.listener.tls_inspector", "envoy.filters.listener.tls_inspector"),
    ("envoy.listener.http_inspector", "envoy.filters.listener.http_inspector"),
    ("envoy.listener.original_dst", "envoy.filters.listener.original_dst"),
    ("envoy.tcp_proxy", "envoy.filters.network.tcp_proxy"),
    ("envoy.health_check", "envoy.filters.http.health_check"),
    ("envoy.grpc_web", "envoy.filters.http.grpc_web"),
];

fn envoy_filter(v: &mut V, spec: &serde_json::Map<String, Value>) {
    let get = |k: &str| spec.get(k).unwrap_or(&Value::Null);
    v.warn(
        "EnvoyFilter exposes internal implementation details that may change at any time. Prefer other APIs if \
         possible, and exercise extreme caution, especially around upgrades.",
    );
    // ValidateAlphaWorkloadSelector: its errors end the validation alone.
    let before = v.errors.len();
    let warnings = v.warnings.len();
    if !get("workloadSelector").is_null() {
        v.selector(
            get("workloadSelector"),
            "spec.workloadSelector",
            "labels",
            "Envoy filter: workload selector specified without labels, will be applied to all services in namespace",
        );
    }
    if v.errors.len() > before {
        v.warnings.truncate(warnings - 1);
        return;
    }
    let refs = v.list(get("targetRefs"), "spec.targetRefs");
    if !refs.is_empty() && !get("workloadSelector").is_null() {
        v.err("spec", "only one of targetRefs or workloadSelector can be set");
    }
    for (i, r) in refs.iter().enumerate() {
        v.target_ref(r, &format!("spec.targetRefs[{i}]"), false);
    }
    v.int(get("priority"), "spec.priority", i64::from(i32::MIN), i64::from(i32::MAX));
    for (i, p) in v.list(get("configPatches"), "spec.configPatches").iter().enumerate() {
        let path = format!("spec.configPatches[{i}]");
        let Some(p) = v.object(p, &path) else {
            v.err(&path, "Envoy filter: null config patch");
            continue;
        };
        let get = |k: &str| p.get(k).unwrap_or(&Value::Null);
        let m = v.object(get("match"), &format!("{path}.match"));
        let mget = |k: &str| m.and_then(|m| m.get(k)).unwrap_or(&Value::Null);
        let context = v.enumeration(mget("context"), &format!("{path}.match.context"), &PATCH_CONTEXT);
        let kinds: Vec<&str> = ["listener", "routeConfiguration", "cluster", "waypoint"]
            .into_iter()
            .filter(|k| !mget(k).is_null())
            .collect();
        if kinds.len() > 1 {
            v.err(
                format!("{path}.match"),
                format!(
                    "only one of listener, routeConfiguration, cluster, waypoint may be set; got {}",
                    kinds.join(", ")
                ),
            );
        }
        // The CRD's CEL rules: a waypoint match exactly with context
        // WAYPOINT, its port in range.
        if (context == "WAYPOINT") != kinds.contains(&"waypoint") {
            v.err(format!("{path}.match"), "only support waypointMatch when context is WAYPOINT");
        }
        if let Some(port) = mget("waypoint").get("portNumber").filter(|p| !p.is_null())
            && !port.as_i64().is_some_and(|n| (1..=65535).contains(&n))
        {
            v.err(format!("{path}.match.waypoint.portNumber"), "port must be between 1-65535");
        }
        if context == "WAYPOINT" {
            // istiod checks nothing more of waypoint patches.
            continue;
        }
        let apply_to = v.enumeration(get("applyTo"), &format!("{path}.applyTo"), &APPLY_TO);
        if apply_to == "INVALID" {
            v.err(format!("{path}.applyTo"), "Envoy filter: missing applyTo");
            continue;
        }
        let Some(patch) = v.object(get("patch"), &format!("{path}.patch")) else {
            v.err(format!("{path}.patch"), "Envoy filter: missing patch");
            continue;
        };
        let op = v.enumeration(
            patch.get("operation").unwrap_or(&Value::Null),
            &format!("{path}.patch.operation"),
            &OPERATION,
        );
        v.enumeration(
            patch.get("filterClass").unwrap_or(&Value::Null),
            &format!("{path}.patch.filterClass"),
            &FILTER_CLASS,
        );
        if op == "INVALID" {
            v.err(format!("{path}.patch.operation"), "Envoy filter: missing patch operation");
            continue;
        }
        let value = patch.get("value").unwrap_or(&Value::Null);
        if op != "REMOVE" && value.is_null() {
            v.err(format!("{path}.patch.value"), "Envoy filter: missing patch value for non-remove operation");
            continue;
        }
        if !value.is_null() && !value.is_object() {
            v.err(format!("{path}.patch.value"), "invalid value: want an object");
        } else if value.is_object()
            && let Err(e) = istiod_envoyfilter::filters::check_value(apply_to, value)
        {
            // istiod builds the value as its type (BuildXDSObjectFromStruct).
            v.err(format!("{path}.patch.value"), e);
        }
        let proxy = v.object(mget("proxy"), &format!("{path}.match.proxy"));
        if let Some(proxy) = proxy {
            let pv = v
                .string(proxy.get("proxyVersion").unwrap_or(&Value::Null), &format!("{path}.match.proxy.proxyVersion"));
            if pv.len() > 1024 {
                v.warn("Envoy filter: proxyVersion match exceeds 1024 characters and will be ignored");
            } else if !pv.is_empty()
                && let Err(e) = super::re2::check(pv)
            {
                v.err(
                    format!("{path}.match.proxy.proxyVersion"),
                    format!("Envoy filter: invalid regex for proxy version, [{e}]"),
                );
                continue;
            }
            v.string_map(proxy.get("metadata").unwrap_or(&Value::Null), &format!("{path}.match.proxy.metadata"));
        }
        // The match type must fit applyTo.
        let object_type = kinds.first().copied();
        match apply_to {
            "LISTENER" | "FILTER_CHAIN" | "NETWORK_FILTER" | "HTTP_FILTER" if object_type.is_some() => {
                if object_type != Some("listener") {
                    v.err(
                        format!("{path}.match"),
                        "Envoy filter: applyTo for listener class objects cannot have non listener match",
                    );
                    continue;
                }
                let l = mget("listener");
                let filter = l.pointer("/filterChain/filter").unwrap_or(&Value::Null);
                if let Some(f) = v.object(filter, &format!("{path}.match.listener.filterChain.filter")) {
                    if matches!(apply_to, "LISTENER" | "FILTER_CHAIN") {
                        v.warn(format!("Envoy filter: filter match has no effect when used with {apply_to}"));
                    }
                    let fpath = format!("{path}.match.listener.filterChain.filter");
                    let name = v.string(f.get("name").unwrap_or(&Value::Null), &format!("{fpath}.name"));
                    if name.is_empty() {
                        v.err(format!("{fpath}.name"), "Envoy filter: filter match has no name to match on");
                        continue;
                    }
                    if let Some(sub) =
                        v.object(f.get("subFilter").unwrap_or(&Value::Null), &format!("{fpath}.subFilter"))
                    {
                        if apply_to != "HTTP_FILTER" {
                            v.err(
                                format!("{fpath}.subFilter"),
                                "Envoy filter: subfilter match can be used with applyTo HTTP_FILTER only",
                            );
                            continue;
                        }
                        if !HCM.contains(&name) {
                            v.err(
                                format!("{fpath}.subFilter"),
                                format!("Envoy filter: subfilter match requires filter match with {}", HCM[0]),
                            );
                            continue;
                        }
                        let sub_name =
                            v.string(sub.get("name").unwrap_or(&Value::Null), &format!("{fpath}.subFilter.name"));
                        if sub_name.is_empty() {
                            v.err(
                                format!("{fpath}.subFilter.name"),
                                "Envoy filter: subfilter match has no name to match on",
                            );
                            continue;
                        }
                        if let Some((_, canon)) = DEPRECATED_FILTERS.iter().find(|(old, _)| *old == sub_name) {
                            v.warn(format!("using deprecated filter name {sub_name:?}; use {canon:?} instead"));
                        }
                    }
                    if let Some((_, canon)) = DEPRECATED_FILTERS.iter().find(|(old, _)| *old == name) {
                        v.warn(format!("using deprecated filter name {name:?}; use {canon:?} instead"));
                    }
                }
            }
            "ROUTE_CONFIGURATION" | "VIRTUAL_HOST" | "HTTP_ROUTE"
                if object_type.is_some_and(|t| t != "routeConfiguration") =>
            {
                v.err(
                    format!("{path}.match"),
                    "Envoy filter: applyTo for http route class objects cannot have non route configuration match",
                );
            }
            "CLUSTER" if object_type.is_some_and(|t| t != "cluster") => {
                v.err(
                    format!("{path}.match"),
                    "Envoy filter: applyTo for cluster class objects cannot have non cluster match",
                );
            }
            _ => {}
        }
        // Match fields' types (the CRD's schema).
        let mpath = format!("{path}.match");
        for (k, fields) in [
            ("cluster", &["portNumber"][..]),
            ("listener", &["portNumber"][..]),
            ("routeConfiguration", &["portNumber"][..]),
        ] {
            if let Some(o) = v.object(mget(k), &format!("{mpath}.{k}")) {
                for f in fields {
                    v.int(o.get(*f).unwrap_or(&Value::Null), &format!("{mpath}.{k}.{f}"), 0, i64::from(u32::MAX));
                }
            }
        }
        if let Some(rc) = mget("routeConfiguration").as_object() {
            let action =
                rc.get("vhost").and_then(|h| h.get("route")).and_then(|r| r.get("action")).unwrap_or(&Value::Null);
            v.enumeration(action, &format!("{mpath}.routeConfiguration.vhost.route.action"), &ROUTE_ACTION);
        }
    }
}

/// Kubernetes label keys and values as istiod checks them
/// (`labels.Instance.Validate`).
fn label_errors(v: &mut V, path: &str, labels: &[(&str, &str)]) -> bool {
    let dns_label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    for (k, val) in labels {
        let (prefix, name) = k.rsplit_once('/').map_or((None, *k), |(p, n)| (Some(p), n));
        let key_err = if let Some(p) = prefix {
            if p.len() > 253 {
                Some(format!("invalid tag key: {k:?} (DNS prefix is too long)"))
            } else if !p.split('.').all(dns_label) {
                Some(format!("invalid tag key: {k:?}"))
            } else {
                None
            }
        } else {
            None
        };
        let key_err = key_err.or_else(|| {
            if !name_ok(name) {
                Some(format!("invalid tag key: {k:?}"))
            } else if name.len() > 63 {
                Some(format!("invalid tag key: {k:?} (name is too long)"))
            } else {
                None
            }
        });
        if let Some(e) = key_err {
            v.err(path, format!("invalid labels: {e}"));
            return true;
        }
        if !val.is_empty() && !name_ok(val) {
            v.err(path, format!("invalid labels: invalid tag value: {val:?}"));
            return true;
        }
    }
    false
}

fn workload_group(v: &mut V, spec: &serde_json::Map<String, Value>) {
    let get = |k: &str| spec.get(k).unwrap_or(&Value::Null);
    if get("template").is_null() {
        v.err("spec.template", "template is required");
        return;
    }
    if let Some(meta) = v.object(get("metadata"), "spec.metadata") {
        let labels = v.string_map(meta.get("labels").unwrap_or(&Value::Null), "spec.metadata.labels");
        v.string_map(meta.get("annotations").unwrap_or(&Value::Null), "spec.metadata.annotations");
        if label_errors(v, "spec.metadata.labels", &labels) {
            return;
        }
    }
    // The template's fields (the CRD's WorkloadEntry schema, without its
    // address requirement).
    if let Some(t) = v.object(get("template"), "spec.template") {
        let tget = |k: &str| t.get(k).unwrap_or(&Value::Null);
        let address = v.string(tget("address"), "spec.template.address").to_owned();
        if let Some(uds) = address.strip_prefix("unix://") {
            if !(uds.starts_with('/') || uds.starts_with('@')) {
                v.err("spec.template.address", "UDS must be an absolute path or abstract socket");
            }
            if uds.ends_with('/') {
                v.err("spec.template.address", "UDS may not be a dir");
            }
            if !tget("ports").is_null() {
                v.err("spec.template", "UDS may not include ports");
            }
        }
        if let Some(ports) = v.object(tget("ports"), "spec.template.ports") {
            for (name, p) in ports {
                let path = format!("spec.template.ports[{name}]");
                let n = v.int(p, &path, 0, i64::from(u32::MAX));
                if !(1..=65535).contains(&n) {
                    v.err(&path, "port must be between 1-65535");
                }
            }
        }
        v.string_map(tget("labels"), "spec.template.labels");
        v.int(tget("weight"), "spec.template.weight", 0, i64::from(u32::MAX));
        for f in ["network", "locality", "serviceAccount"] {
            v.string(tget(f), &format!("spec.template.{f}"));
        }
    }
    let Some(probe) = v.object(get("probe"), "spec.probe") else { return };
    let pget = |k: &str| probe.get(k).unwrap_or(&Value::Null);
    for f in ["periodSeconds", "initialDelaySeconds", "timeoutSeconds", "successThreshold", "failureThreshold"] {
        if v.int(pget(f), &format!("spec.probe.{f}"), i64::from(i32::MIN), i64::from(i32::MAX)) < 0 {
            v.err(format!("spec.probe.{f}"), format!("{f} must be non-negative"));
        }
    }
    let methods: Vec<&str> =
        ["httpGet", "tcpSocket", "exec", "grpc"].into_iter().filter(|m| !pget(m).is_null()).collect();
    if methods.len() > 1 {
        v.err("spec.probe", format!("only one health check method may be set; got {}", methods.join(", ")));
    }
    match methods.first().copied() {
        Some("httpGet") => {
            let Some(h) = v.object(pget("httpGet"), "spec.probe.httpGet") else { return };
            let port = v.int(h.get("port").unwrap_or(&Value::Null), "spec.probe.httpGet.port", 0, i64::from(u32::MAX));
            if !(1..=65535).contains(&port) {
                v.err("spec.probe.httpGet.port", format!("port number {port} must be in the range 1..65535"));
            }
            let scheme = v.string(h.get("scheme").unwrap_or(&Value::Null), "spec.probe.httpGet.scheme");
            if !matches!(scheme, "" | "HTTP" | "HTTPS") {
                v.err("spec.probe.httpGet.scheme", "httpGet.scheme must be one of \"HTTPS\", \"HTTP\"");
            }
            for (i, hdr) in v
                .list(h.get("httpHeaders").unwrap_or(&Value::Null), "spec.probe.httpGet.httpHeaders")
                .iter()
                .enumerate()
            {
                let path = format!("spec.probe.httpGet.httpHeaders[{i}]");
                let Some(hdr) = v.object(hdr, &path) else {
                    v.err(&path, "invalid nil header");
                    continue;
                };
                let name = v.string(hdr.get("name").unwrap_or(&Value::Null), &format!("{path}.name"));
                if name.is_empty() {
                    v.err(format!("{path}.name"), "header name cannot be empty");
                } else if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                    v.err(format!("{path}.name"), format!("header name {name} is not a valid header name"));
                }
            }
        }
        Some("tcpSocket") => {
            let Some(t) = v.object(pget("tcpSocket"), "spec.probe.tcpSocket") else { return };
            let port =
                v.int(t.get("port").unwrap_or(&Value::Null), "spec.probe.tcpSocket.port", 0, i64::from(u32::MAX));
            if !(1..=65535).contains(&port) {
                v.err("spec.probe.tcpSocket.port", format!("port number {port} must be in the range 1..65535"));
            }
        }
        Some("exec") => {
            let Some(e) = v.object(pget("exec"), "spec.probe.exec") else { return };
            if v.list(e.get("command").unwrap_or(&Value::Null), "spec.probe.exec.command").is_empty() {
                v.err("spec.probe.exec.command", "exec.command is required");
            }
        }
        // istiod's switch has no grpc case: such probes are refused.
        Some(m) => v.err(format!("spec.probe.{m}"), "unknown health check method *v1alpha3.ReadinessProbe_Grpc"),
        None => v.err("spec.probe", "unknown health check method <nil>"),
    }
}

fn proxy_config(v: &mut V, spec: &serde_json::Map<String, Value>) {
    let get = |k: &str| spec.get(k).unwrap_or(&Value::Null);
    v.selector(get("selector"), "spec.selector", "matchLabels", "workload selector specified without labels");
    if v.int(get("concurrency"), "spec.concurrency", i64::from(i32::MIN), i64::from(i32::MAX)) < 0 {
        v.err("spec.concurrency", "concurrency must be greater than or equal to 0");
    }
    for (k, val) in v.string_map(get("environmentVariables"), "spec.environmentVariables") {
        if val.len() > 2048 {
            v.err(format!("spec.environmentVariables[{k}]"), "may not be longer than 2048 characters");
        }
    }
    if let Some(image) = v.object(get("image"), "spec.image") {
        v.string(image.get("imageType").unwrap_or(&Value::Null), "spec.image.imageType");
    }
}

const TELEMETRY_MODE: [&str; 3] = ["CLIENT_AND_SERVER", "CLIENT", "SERVER"];
const ISTIO_METRIC: [&str; 11] = [
    "ALL_METRICS",
    "REQUEST_COUNT",
    "REQUEST_DURATION",
    "REQUEST_SIZE",
    "RESPONSE_SIZE",
    "TCP_OPENED_CONNECTIONS",
    "TCP_CLOSED_CONNECTIONS",
    "TCP_SENT_BYTES",
    "TCP_RECEIVED_BYTES",
    "GRPC_REQUEST_MESSAGES",
    "GRPC_RESPONSE_MESSAGES",
];

fn providers(v: &mut V, list: &Value, path: &str) -> usize {
    let items = v.list(list, path);
    for (i, p) in items.iter().enumerate() {
        let name = p.get("name").map_or("", |n| v.string(n, &format!("{path}[{i}].name")));
        if name.is_empty() {
            v.err(format!("{path}[{i}].name"), "providers.name may not be empty");
            break;
        }
    }
    items.len()
}

fn telemetry(v: &mut V, spec: &serde_json::Map<String, Value>) {
    let get = |k: &str| spec.get(k).unwrap_or(&Value::Null);
    v.policy_selection(spec, true);
    for (i, m) in v.list(get("metrics"), "spec.metrics").iter().enumerate() {
        let path = format!("spec.metrics[{i}]");
        let Some(m) = v.object(m, &path) else { continue };
        providers(v, m.get("providers").unwrap_or(&Value::Null), &format!("{path}.providers"));
        v.duration(m.get("reportingInterval").unwrap_or(&Value::Null), &format!("{path}.reportingInterval"));
        for (j, o) in
            v.list(m.get("overrides").unwrap_or(&Value::Null), &format!("{path}.overrides")).iter().enumerate()
        {
            let opath = format!("{path}.overrides[{j}]");
            let Some(o) = v.object(o, &opath) else {
                v.err(&opath, "tagOverrides may not be null");
                continue;
            };
            v.bool(o.get("disabled").unwrap_or(&Value::Null), &format!("{opath}.disabled"));
            if let Some(sel) = v.object(o.get("match").unwrap_or(&Value::Null), &format!("{opath}.match")) {
                let sget = |k: &str| sel.get(k).unwrap_or(&Value::Null);
                v.enumeration(sget("mode"), &format!("{opath}.match.mode"), &TELEMETRY_MODE);
                if !sget("metric").is_null() && !sget("customMetric").is_null() {
                    v.err(format!("{opath}.match"), "only one of metric, customMetric may be set");
                }
                v.enumeration(sget("metric"), &format!("{opath}.match.metric"), &ISTIO_METRIC);
                if !sget("customMetric").is_null()
                    && v.string(sget("customMetric"), &format!("{opath}.match.customMetric")).is_empty()
                {
                    v.err(format!("{opath}.match.customMetric"), "customMetric may not be empty");
                }
            }
            if let Some(tags) =
                v.object(o.get("tagOverrides").unwrap_or(&Value::Null), &format!("{opath}.tagOverrides"))
            {
                for (name, t) in tags {
                    let tpath = format!("{opath}.tagOverrides[{name}]");
                    if name.is_empty() {
                        v.warn("tagOverrides.name may not be empty");
                    }
                    let Some(t) = v.object(t, &tpath) else {
                        v.err(&tpath, "tagOverrides may not be null");
                        continue;
                    };
                    let op = v.enumeration(
                        t.get("operation").unwrap_or(&Value::Null),
                        &format!("{tpath}.operation"),
                        &["UPSERT", "REMOVE"],
                    );
                    let value = v.string(t.get("value").unwrap_or(&Value::Null), &format!("{tpath}.value"));
                    match op {
                        "UPSERT" if value.is_empty() => {
                            v.err(&tpath, "tagOverrides.value must be set when operation is UPSERT")
                        }
                        "REMOVE" if !value.is_empty() => {
                            v.err(&tpath, "tagOverrides.value may only be set when operation is UPSERT")
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    let tracing = v.list(get("tracing"), "spec.tracing");
    if tracing.len() > 1 {
        v.warn("multiple tracing is not currently supported");
    }
    for (i, t) in tracing.iter().enumerate() {
        let path = format!("spec.tracing[{i}]");
        let Some(t) = v.object(t, &path) else { continue };
        let tget = |k: &str| t.get(k).unwrap_or(&Value::Null);
        if let Some(m) = v.object(tget("match"), &format!("{path}.match")) {
            v.enumeration(m.get("mode").unwrap_or(&Value::Null), &format!("{path}.match.mode"), &TELEMETRY_MODE);
        }
        if providers(v, tget("providers"), &format!("{path}.providers")) > 1 {
            v.warn("multiple providers is not currently supported");
        }
        match tget("randomSamplingPercentage") {
            Value::Null => {}
            Value::Number(n) if n.as_f64().is_some_and(|p| (0.0..=100.0).contains(&p)) => {}
            Value::Number(_) => v.err(
                format!("{path}.randomSamplingPercentage"),
                "randomSamplingPercentage must be in range [0.0, 100.0]",
            ),
            _ => v.err(format!("{path}.randomSamplingPercentage"), "invalid value: want a number"),
        }
        for f in
            ["disableSpanReporting", "useRequestIdForTraceSampling", "enableIstioTags", "disableContextPropagation"]
        {
            v.bool(tget(f), &format!("{path}.{f}"));
        }
        if let Some(tags) = v.object(tget("customTags"), &format!("{path}.customTags")) {
            for (name, tag) in tags {
                let tpath = format!("{path}.customTags[{name}]");
                if name.is_empty() {
                    v.err(&tpath, "tag name may not be empty");
                }
                let Some(tag) = v.object(tag, &tpath) else {
                    v.err(&tpath, format!("tag '{name}' may not have a nil value"));
                    continue;
                };
                let set: Vec<&str> = ["literal", "environment", "header", "formatter"]
                    .into_iter()
                    .filter(|k| tag.contains_key(*k))
                    .collect();
                if set.len() > 1 {
                    v.err(
                        &tpath,
                        format!(
                            "only one of literal, environment, header, formatter may be set; got {}",
                            set.join(", ")
                        ),
                    );
                }
                let field = |k: &str, f: &str| tag.get(k).and_then(|x| x.get(f)).unwrap_or(&Value::Null);
                if tag.contains_key("literal")
                    && v.string(field("literal", "value"), &format!("{tpath}.literal.value")).is_empty()
                {
                    v.err(format!("{tpath}.literal.value"), "literal tag value may not be empty");
                }
                if tag.contains_key("header")
                    && v.string(field("header", "name"), &format!("{tpath}.header.name")).is_empty()
                {
                    v.err(format!("{tpath}.header.name"), "header tag name may not be empty");
                }
                if tag.contains_key("environment")
                    && v.string(field("environment", "name"), &format!("{tpath}.environment.name")).is_empty()
                {
                    v.err(format!("{tpath}.environment.name"), "environment tag name may not be empty");
                }
            }
        }
    }
    for (i, a) in v.list(get("accessLogging"), "spec.accessLogging").iter().enumerate() {
        let path = format!("spec.accessLogging[{i}]");
        let Some(a) = v.object(a, &path) else { continue };
        let aget = |k: &str| a.get(k).unwrap_or(&Value::Null);
        if let Some(m) = v.object(aget("match"), &format!("{path}.match")) {
            v.enumeration(m.get("mode").unwrap_or(&Value::Null), &format!("{path}.match.mode"), &TELEMETRY_MODE);
        }
        providers(v, aget("providers"), &format!("{path}.providers"));
        v.bool(aget("disabled"), &format!("{path}.disabled"));
        if let Some(f) = v.object(aget("filter"), &format!("{path}.filter")) {
            let expr = v.string(f.get("expression").unwrap_or(&Value::Null), &format!("{path}.filter.expression"));
            if let Err(e) = cel_check(expr) {
                v.err(format!("{path}.filter.expression"), format!("must be a valid CEL expression, {e}"));
            }
        }
    }
}

/// The syntax errors a CEL parser would report first: unbalanced
/// brackets and unterminated strings.
fn cel_check(expr: &str) -> Result<(), String> {
    let mut stack = Vec::new();
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in expr.chars() {
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                c if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '(' | '[' | '{' => stack.push(c),
            ')' | ']' | '}' => {
                let want = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                if stack.pop() != Some(want) {
                    return Err(format!("ERROR: <input>: Syntax error: mismatched input '{c}'"));
                }
            }
            _ => {}
        }
    }
    if quote.is_some() {
        return Err("ERROR: <input>: Syntax error: token recognition error: unterminated string".into());
    }
    if !stack.is_empty() {
        return Err("ERROR: <input>: Syntax error: missing closing bracket".into());
    }
    if expr.trim().is_empty() {
        return Err("ERROR: <input>: Syntax error: mismatched input '<EOF>'".into());
    }
    Ok(())
}

fn wasm_plugin(v: &mut V, spec: &serde_json::Map<String, Value>) {
    let get = |k: &str| spec.get(k).unwrap_or(&Value::Null);
    v.policy_selection(spec, true);
    wasm_config(v, spec, "spec", "pluginName field must be less than 255 characters long");
    v.enumeration(get("phase"), "spec.phase", &["UNSPECIFIED_PHASE", "AUTHN", "AUTHZ", "STATS"]);
    v.int(get("priority"), "spec.priority", i64::from(i32::MIN), i64::from(i32::MAX));
    traffic_selectors(v, get("match"));
}

/// istiod's `ValidateTrafficExtension`: exactly one of `wasm` and `lua`,
/// the wasm config as a WasmPlugin's, Lua code within 64 KiB.
fn traffic_extension(v: &mut V, spec: &serde_json::Map<String, Value>) {
    let get = |k: &str| spec.get(k).unwrap_or(&Value::Null);
    let (wasm, lua) = (get("wasm"), get("lua"));
    if wasm.is_null() == lua.is_null() {
        v.err("spec", "exactly one of wasm or lua must be set");
    }
    v.policy_selection(spec, false);
    if let Some(lua) = v.object(lua, "spec.lua") {
        let code = v.string(lua.get("inlineCode").unwrap_or(&Value::Null), "spec.lua.inlineCode");
        if code.is_empty() {
            v.err("spec.lua.inlineCode", "lua.inlineCode cannot be empty");
        } else if code.len() > 65536 {
            v.err("spec.lua.inlineCode", "lua.inlineCode exceeds maximum size of 64KB");
        }
    }
    if let Some(wasm) = v.object(wasm, "spec.wasm") {
        wasm_config(v, wasm, "spec.wasm", "pluginName field must be less than 256 characters long");
    }
    v.enumeration(get("phase"), "spec.phase", &["UNSPECIFIED", "AUTHN", "AUTHZ", "STATS"]);
    v.int(get("priority"), "spec.priority", i64::from(i32::MIN), i64::from(i32::MAX));
    traffic_selectors(v, get("match"));
}

/// The scheme Go's `url.Parse` reads: letters, then letters, digits,
/// `+`, `-` or `.` up to a `:`; anything else first means none.
pub fn go_url_scheme(url: &str) -> &str {
    for (i, c) in url.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' if i > 0 => return &url[..i],
            _ => return "",
        }
    }
    ""
}

/// A Wasm module's settings (a WasmPlugin's spec, a TrafficExtension's
/// `wasm`): istiod's `validateWasmPluginURL`, `...SHA`,
/// `...ImagePullSecret`, `...Name` and `...VMConfig`, with the CRD's enums.
fn wasm_config(v: &mut V, spec: &serde_json::Map<String, Value>, at: &str, name_message: &str) {
    let get = |k: &str| spec.get(k).unwrap_or(&Value::Null);
    // validateWasmPluginURL: Go's ParseRequestURI, retried with http://
    // before a scheme-less reference (`ghcr.io/a/b:1`); `host:5000/x`
    // has the scheme `host`.
    let url = v.string(get("url"), &format!("{at}.url"));
    if url.is_empty() {
        v.err(format!("{at}.url"), "url field needs to be set");
    } else if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        v.err(format!("{at}.url"), format!("failed to parse url: parse {url:?}: invalid character in URL"));
    } else if url.starts_with(':') {
        v.err(format!("{at}.url"), format!("failed to parse url: parse {url:?}: missing protocol scheme"));
    } else {
        let scheme = go_url_scheme(url);
        if !matches!(scheme, "" | "file" | "http" | "https" | "oci") {
            v.err(format!("{at}.url"), format!("url contains unsupported scheme: {scheme}"));
        }
    }
    let sha = v.string(get("sha256"), &format!("{at}.sha256"));
    if !sha.is_empty() {
        if sha.len() != 64 {
            v.err(format!("{at}.sha256"), "sha256 field must be 64 characters long");
        } else if !sha.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            v.err(format!("{at}.sha256"), "sha256 field must match [a-f0-9]{64} pattern");
        }
    }
    if v.string(get("imagePullSecret"), &format!("{at}.imagePullSecret")).len() > 253 {
        v.err(format!("{at}.imagePullSecret"), "imagePullSecret field must be less than 253 characters long");
    }
    if v.string(get("pluginName"), &format!("{at}.pluginName")).len() > 256 {
        v.err(format!("{at}.pluginName"), name_message);
    }
    v.enumeration(
        get("imagePullPolicy"),
        &format!("{at}.imagePullPolicy"),
        &["UNSPECIFIED_POLICY", "IfNotPresent", "Always"],
    );
    v.enumeration(get("failStrategy"), &format!("{at}.failStrategy"), &["FAIL_CLOSE", "FAIL_OPEN", "FAIL_RELOAD"]);
    v.enumeration(get("type"), &format!("{at}.type"), &["UNSPECIFIED_PLUGIN_TYPE", "HTTP", "NETWORK"]);
    if !get("pluginConfig").is_null() && !get("pluginConfig").is_object() {
        v.err(format!("{at}.pluginConfig"), "invalid value: want an object");
    }
    v.string(get("verificationKey"), &format!("{at}.verificationKey"));
    // validateWasmPluginVMConfig.
    if let Some(vm) = v.object(get("vmConfig"), &format!("{at}.vmConfig")) {
        let env = v.list(vm.get("env").unwrap_or(&Value::Null), &format!("{at}.vmConfig.env"));
        if env.len() > 256 {
            v.err(format!("{at}.vmConfig.env"), "may not have more than 256 items");
        }
        let mut seen = std::collections::HashSet::new();
        for (i, e) in env.iter().enumerate() {
            let path = format!("{at}.vmConfig.env[{i}]");
            let Some(e) = v.object(e, &path) else { continue };
            let name = v.string(e.get("name").unwrap_or(&Value::Null), &format!("{path}.name"));
            if name.is_empty() {
                v.err(format!("{path}.name"), "spec.vmConfig.env invalid");
                break;
            }
            if name.len() > 256 {
                v.err(format!("{path}.name"), "env.name field must be less than 255 characters long");
                break;
            }
            if !seen.insert(name.to_owned()) {
                v.err(format!("{path}.name"), "duplicate env");
                break;
            }
            let from = v.enumeration(
                e.get("valueFrom").unwrap_or(&Value::Null),
                &format!("{path}.valueFrom"),
                &["INLINE", "HOST"],
            );
            let value = v.string(e.get("value").unwrap_or(&Value::Null), &format!("{path}.value"));
            if from != "INLINE" && !value.is_empty() {
                v.err(format!("{path}.value"), "value may only be set when valueFrom is INLINE");
                break;
            }
            if value.len() > 2048 {
                v.err(format!("{path}.value"), "may not be longer than 2048 characters");
            }
        }
    }
}

/// `match` of a WasmPlugin or TrafficExtension
/// (`validateWasmPluginMatch`, `validateTrafficExtensionMatch`).
fn traffic_selectors(v: &mut V, selectors: &Value) {
    for (i, m) in v.list(selectors, "spec.match").iter().enumerate() {
        let path = format!("spec.match[{i}]");
        let Some(m) = v.object(m, &path) else {
            v.err(&path, format!("spec.Match[{i}] is nil"));
            break;
        };
        v.enumeration(
            m.get("mode").unwrap_or(&Value::Null),
            &format!("{path}.mode"),
            &["UNDEFINED", "CLIENT", "SERVER", "CLIENT_AND_SERVER"],
        );
        for (j, p) in v.list(m.get("ports").unwrap_or(&Value::Null), &format!("{path}.ports")).iter().enumerate() {
            let ppath = format!("{path}.ports[{j}]");
            let Some(p) = v.object(p, &ppath) else {
                v.err(&ppath, format!("spec.Match[{i}].Ports[{j}] is nil"));
                continue;
            };
            let n = v.int(p.get("number").unwrap_or(&Value::Null), &format!("{ppath}.number"), i64::MIN, i64::MAX);
            if n <= 0 || n > 65535 {
                v.err(format!("{ppath}.number"), format!("spec.Match[{i}].Ports[{j}] is out of range: {n}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::istio::{IstioKind, parse, warnings};

    fn doc(yaml: &str) -> serde_yaml_ng::Value {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    /// (errors as text, warnings) of one document.
    fn judge(yaml: &str) -> (String, Vec<String>) {
        match parse(&doc(yaml)) {
            Ok(o) => (String::new(), warnings(&o)),
            Err(e) => (e.to_string(), Vec::new()),
        }
    }

    fn refused(yaml: &str, want: &str) {
        let (e, _) = judge(yaml);
        assert!(e.contains(want), "want {want:?} in {e:?} for\n{yaml}");
    }

    /// validation.go ValidateTrafficExtension, and the URL scheme as Go's
    /// url.Parse reads it (ValidateWasmPlugin's validateWasmPluginURL).
    #[test]
    fn traffic_extensions_as_istiod_judges_them() {
        let head =
            "apiVersion: extensions.istio.io/v1alpha1\nkind: TrafficExtension\nmetadata: {name: t, namespace: ns}\n";
        assert_eq!(judge(&format!("{head}spec: {{lua: {{inlineCode: x}}, phase: AUTHZ}}\n")).0, "");
        assert_eq!(judge(&format!("{head}spec: {{wasm: {{url: 'ghcr.io/a/b:1'}}}}\n")).0, "");
        refused(&format!("{head}spec: {{}}\n"), "exactly one of wasm or lua must be set");
        refused(
            &format!("{head}spec: {{lua: {{inlineCode: x}}, wasm: {{url: 'oci://x'}}}}\n"),
            "exactly one of wasm or lua",
        );
        refused(&format!("{head}spec: {{lua: {{inlineCode: ''}}}}\n"), "lua.inlineCode cannot be empty");
        refused(&format!("{head}spec: {{wasm: {{url: 'ftp://x/y'}}}}\n"), "url contains unsupported scheme: ftp");
        refused(&format!("{head}spec: {{lua: {{inlineCode: x}}, phase: UNSPECIFIED_PHASE}}\n"), "spec.phase");
        // A TrafficExtension has no `targetRef`: beside a selector it is
        // no second selection (validateOneOfSelectorType gets none).
        let (e, _) = judge(&format!(
            "{head}spec: {{lua: {{inlineCode: x}}, selector: {{matchLabels: {{app: a}}}}, targetRef: {{kind: Service, name: s}}}}\n"
        ));
        assert_eq!(e, "");
        refused(
            &format!(
                "{head}spec: {{lua: {{inlineCode: x}}, selector: {{matchLabels: {{app: a}}}}, targetRefs: [{{kind: Service, name: s}}]}}\n"
            ),
            "only one of targetRefs or workloadSelector can be set",
        );
        let wp = "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: w, namespace: ns}\n";
        // `host:5000/x` has the scheme `host` (Go's getScheme).
        refused(&format!("{wp}spec: {{url: 'registry:5000/x'}}\n"), "url contains unsupported scheme: registry");
    }

    /// pkg/config/validation/envoyfilter/envoyfilter.go ValidateEnvoyFilter.
    #[test]
    fn envoy_filters_as_istiod_judges_them() {
        let head = "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: f, namespace: ns}\n";
        let (e, w) = judge(&format!(
            "{head}spec:\n  workloadSelector: {{labels: {{app: a}}}}\n  configPatches:\n  - applyTo: HTTP_FILTER\n    match:\n      context: SIDECAR_INBOUND\n      listener:\n        filterChain:\n          filter:\n            name: envoy.http_connection_manager\n            subFilter: {{name: envoy.filters.http.router}}\n    patch:\n      operation: INSERT_BEFORE\n      value: {{name: envoy.lua, typed_config: {{'@type': type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua}}}}\n"
        ));
        assert_eq!(e, "");
        assert!(w[0].starts_with("EnvoyFilter exposes internal implementation details"), "{w:?}");
        assert!(
            w.iter().any(|w| w.contains("using deprecated filter name \"envoy.http_connection_manager\"")),
            "{w:?}"
        );
        let case = |patch: &str| format!("{head}spec:\n  configPatches:\n  - {patch}\n");
        refused(
            &case("applyTo: CLUSTER\n    patch: {operation: MERGE}"),
            "spec.configPatches[0].patch.value: Envoy filter: missing patch value for non-remove operation",
        );
        refused(&case("patch: {operation: MERGE, value: {}}"), "Envoy filter: missing applyTo");
        // The value is built as its type (BuildXDSObjectFromStruct): an
        // unknown typed config is refused.
        refused(
            &case(
                "applyTo: HTTP_FILTER\n    patch: {operation: ADD, value: {name: x, typed_config: {'@type': type.googleapis.com/not.a.Type}}}",
            ),
            "spec.configPatches[0].patch.value: referenced type unknown: ",
        );
        refused(&case("applyTo: CLUSTER"), "Envoy filter: missing patch");
        refused(&case("applyTo: CLUSTER\n    patch: {value: {}}"), "Envoy filter: missing patch operation");
        refused(
            &case("applyTo: CLUSTR\n    patch: {operation: MERGE, value: {}}"),
            "spec.configPatches[0].applyTo: invalid value \"CLUSTR\"",
        );
        refused(
            &case(
                "applyTo: CLUSTER\n    match: {listener: {portNumber: 80}}\n    patch: {operation: MERGE, value: {}}",
            ),
            "Envoy filter: applyTo for cluster class objects cannot have non cluster match",
        );
        refused(
            &case("applyTo: HTTP_ROUTE\n    match: {cluster: {service: a}}\n    patch: {operation: MERGE, value: {}}"),
            "cannot have non route configuration match",
        );
        refused(
            &case(
                "applyTo: NETWORK_FILTER\n    match: {listener: {filterChain: {filter: {name: x, subFilter: {name: y}}}}}\n    patch: {operation: REMOVE}",
            ),
            "Envoy filter: subfilter match can be used with applyTo HTTP_FILTER only",
        );
        refused(
            &case(
                "applyTo: HTTP_FILTER\n    match: {listener: {filterChain: {filter: {name: x, subFilter: {name: y}}}}}\n    patch: {operation: REMOVE}",
            ),
            "Envoy filter: subfilter match requires filter match with envoy.filters.network.http_connection_manager",
        );
        refused(
            &case("applyTo: CLUSTER\n    match: {proxy: {proxyVersion: '1.2(('}}\n    patch: {operation: REMOVE}"),
            "Envoy filter: invalid regex for proxy version",
        );
        // A selector error is the only answer.
        let (e, _) = judge(&format!(
            "{head}spec:\n  workloadSelector: {{labels: {{app: '*'}}}}\n  configPatches:\n  - applyTo: CLUSTER\n"
        ));
        assert_eq!(e, "spec.workloadSelector.labels: wildcard is not supported in selector: \"app=*\"");
        // Waypoint patches are not checked further; REMOVE needs no value.
        assert_eq!(judge(&case("match: {context: WAYPOINT, waypoint: {portNumber: 80}}")).0, "");
        // The CRD's CEL rules on waypoint matches.
        refused(&case("match: {context: WAYPOINT}"), "only support waypointMatch when context is WAYPOINT");
        refused(
            &case("match: {context: GATEWAY, waypoint: {}}"),
            "only support waypointMatch when context is WAYPOINT",
        );
        refused(&case("match: {context: WAYPOINT, waypoint: {portNumber: 0}}"), "port must be between 1-65535");
        assert_eq!(judge(&case("applyTo: CLUSTER\n    patch: {operation: REMOVE}")).0, "");
        // Only v1alpha3 is served.
        assert_eq!(IstioKind::from_api("networking.istio.io/v1", "EnvoyFilter"), None);
    }

    /// validation.go ValidateWorkloadGroup.
    #[test]
    fn workload_groups_as_istiod_judges_them() {
        let head = "apiVersion: networking.istio.io/v1\nkind: WorkloadGroup\nmetadata: {name: g, namespace: ns}\n";
        let ok = format!(
            "{head}spec:\n  metadata: {{labels: {{app: ratings}}}}\n  template: {{ports: {{http: 8080}}, serviceAccount: ratings}}\n  probe:\n    periodSeconds: 5\n    httpGet: {{path: /ready, port: 8080}}\n"
        );
        assert_eq!(judge(&ok), (String::new(), Vec::new()));
        refused(&format!("{head}spec: {{}}\n"), "spec.template: template is required");
        refused(
            &format!("{head}spec:\n  metadata: {{labels: {{'a/b/c': x}}}}\n  template: {{}}\n"),
            "invalid labels: invalid tag key: \"a/b/c\"",
        );
        refused(
            &format!("{head}spec:\n  template: {{}}\n  probe: {{httpGet: {{port: 0}}}}\n"),
            "port number 0 must be in the range 1..65535",
        );
        refused(
            &format!("{head}spec:\n  template: {{}}\n  probe: {{periodSeconds: -1, tcpSocket: {{port: 80}}}}\n"),
            "periodSeconds must be non-negative",
        );
        refused(&format!("{head}spec:\n  template: {{}}\n  probe: {{exec: {{}}}}\n"), "exec.command is required");
        refused(
            &format!("{head}spec:\n  template: {{}}\n  probe: {{httpGet: {{port: 80, scheme: FTP}}}}\n"),
            "httpGet.scheme must be one of",
        );
        refused(
            &format!("{head}spec:\n  template: {{}}\n  probe: {{grpc: {{port: 80}}}}\n"),
            "unknown health check method",
        );
        refused(
            &format!("{head}spec:\n  template: {{address: 'unix://rel', ports: {{a: 1}}}}\n"),
            "UDS must be an absolute path or abstract socket",
        );
    }

    /// validation.go ValidateProxyConfig.
    #[test]
    fn proxy_configs_as_istiod_judges_them() {
        let head = "apiVersion: networking.istio.io/v1beta1\nkind: ProxyConfig\nmetadata: {name: p, namespace: ns}\n";
        assert_eq!(
            judge(&format!(
                "{head}spec: {{concurrency: 0, environmentVariables: {{A: b}}, image: {{imageType: distroless}}}}\n"
            ))
            .0,
            ""
        );
        refused(&format!("{head}spec: {{concurrency: -1}}\n"), "concurrency must be greater than or equal to 0");
        refused(
            &format!("{head}spec: {{selector: {{matchLabels: {{'': x}}}}}}\n"),
            "empty key is not supported in selector",
        );
        let (e, w) = judge(&format!("{head}spec: {{selector: {{}}}}\n"));
        assert_eq!((e.as_str(), w), ("", vec!["workload selector specified without labels".to_owned()]));
    }

    /// validation.go ValidateTelemetry.
    #[test]
    fn telemetry_as_istiod_judges_it() {
        let head = "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {name: t, namespace: ns}\n";
        let ok = format!(
            "{head}spec:\n  tracing:\n  - providers: [{{name: zipkin}}]\n    randomSamplingPercentage: 10\n    customTags: {{my: {{literal: {{value: x}}}}}}\n  metrics:\n  - providers: [{{name: prometheus}}]\n    overrides:\n    - match: {{metric: REQUEST_COUNT, mode: CLIENT}}\n      tagOverrides: {{request_host: {{operation: REMOVE}}}}\n  accessLogging:\n  - providers: [{{name: envoy}}]\n    filter: {{expression: 'response.code >= 400'}}\n"
        );
        assert_eq!(judge(&ok), (String::new(), Vec::new()));
        assert_eq!(IstioKind::from_api("telemetry.istio.io/v1alpha1", "Telemetry"), Some(IstioKind::Telemetry));
        refused(
            &format!("{head}spec: {{tracing: [{{randomSamplingPercentage: 101}}]}}\n"),
            "randomSamplingPercentage must be in range [0.0, 100.0]",
        );
        refused(
            &format!("{head}spec: {{metrics: [{{providers: [{{name: ''}}]}}]}}\n"),
            "providers.name may not be empty",
        );
        refused(
            &format!("{head}spec: {{metrics: [{{overrides: [{{tagOverrides: {{a: {{}}}}}}]}}]}}\n"),
            "tagOverrides.value must be set when operation is UPSERT",
        );
        refused(
            &format!(
                "{head}spec: {{metrics: [{{overrides: [{{tagOverrides: {{a: {{operation: REMOVE, value: x}}}}}}]}}]}}\n"
            ),
            "tagOverrides.value may only be set when operation is UPSERT",
        );
        refused(
            &format!("{head}spec: {{metrics: [{{overrides: [{{match: {{metric: BOGUS}}}}]}}]}}\n"),
            "invalid value \"BOGUS\"",
        );
        refused(
            &format!("{head}spec: {{tracing: [{{customTags: {{a: {{literal: {{value: ''}}}}}}}}]}}\n"),
            "literal tag value may not be empty",
        );
        refused(
            &format!("{head}spec: {{accessLogging: [{{filter: {{expression: 'a == (b'}}}}]}}\n"),
            "must be a valid CEL expression",
        );
        refused(
            &format!("{head}spec: {{selector: {{matchLabels: {{a: b}}}}, targetRefs: [{{kind: Service, name: s}}]}}\n"),
            "only one of targetRefs or workloadSelector can be set",
        );
        refused(&format!("{head}spec: {{targetRefs: [{{kind: Pod, name: s}}]}}\n"), "targetRef must be to one of");
        refused(
            &format!("{head}spec: {{targetRefs: [{{kind: Service, name: s, namespace: other}}]}}\n"),
            "cross namespace referencing is not supported",
        );
        let (_, w) = judge(&format!("{head}spec: {{tracing: [{{providers: [{{name: a}}, {{name: b}}]}}, {{}}]}}\n"));
        assert_eq!(w, ["multiple tracing is not currently supported", "multiple providers is not currently supported"]);
    }

    /// validation.go ValidateWasmPlugin.
    #[test]
    fn wasm_plugins_as_istiod_judges_them() {
        let head = "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {name: w, namespace: ns}\n";
        for url in ["oci://ghcr.io/a/b:1", "ghcr.io/a/b:1", "https://x/y.wasm", "file:///opt/p.wasm"] {
            assert_eq!(
                judge(&format!(
                    "{head}spec: {{url: '{url}', phase: AUTHN, match: [{{mode: SERVER, ports: [{{number: 80}}]}}]}}\n"
                ))
                .0,
                "",
                "{url}"
            );
        }
        refused(&format!("{head}spec: {{}}\n"), "url field needs to be set");
        refused(&format!("{head}spec: {{url: 'fake://x'}}\n"), "url contains unsupported scheme: fake");
        refused(&format!("{head}spec: {{url: 'oci://x', sha256: abc}}\n"), "sha256 field must be 64 characters long");
        refused(
            &format!("{head}spec: {{url: 'oci://x', sha256: '{}'}}\n", "A".repeat(64)),
            "sha256 field must match [a-f0-9]{64} pattern",
        );
        refused(
            &format!("{head}spec: {{url: 'oci://x', vmConfig: {{env: [{{name: a}}, {{name: a}}]}}}}\n"),
            "duplicate env",
        );
        refused(
            &format!("{head}spec: {{url: 'oci://x', vmConfig: {{env: [{{name: a, valueFrom: HOST, value: v}}]}}}}\n"),
            "value may only be set when valueFrom is INLINE",
        );
        refused(
            &format!("{head}spec: {{url: 'oci://x', match: [{{ports: [{{number: 70000}}]}}]}}\n"),
            "spec.Match[0].Ports[0] is out of range: 70000",
        );
        refused(
            &format!("{head}spec: {{url: 'oci://x', failStrategy: SOMETIMES}}\n"),
            "spec.failStrategy: invalid value \"SOMETIMES\"",
        );
    }
}
