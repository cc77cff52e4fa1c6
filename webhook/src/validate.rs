//! Config validation as istiod's webhook does it
//! (`pkg/webhooks/validation/server/server.go`), with the validators the
//! config sources use (`istiod_config::istio::parse`): CREATE and
//! UPDATE of an Istio object are judged, other operations allowed; an
//! invalid object is refused with every problem at its field; top-level
//! fields other than `apiVersion`, `kind`, `metadata`, `spec` and `status`
//! are refused. Every Istio kind istiod validates is judged (the ones not
//! translated yet, EnvoyFilter, WorkloadGroup, ProxyConfig, Telemetry and
//! WasmPlugin, too), whatever its version, since istiod finds the
//! validator by group and kind; istiod's warnings come back as the
//! answer's warnings. Other Istio kinds are allowed with a warning that
//! they were not validated; kinds of other groups are refused as istiod
//! does (`unrecognized type`).

use std::collections::BTreeMap;

use istiod_config::istio::{self, IstioKind};

use super::admission::{AdmissionRequest, AdmissionResponse};

/// istiod's reasons (`monitoring.go`).
const UNSUPPORTED_OPERATION: &str = "unsupported_operation";
const YAML_DECODE_ERROR: &str = "yaml_decode_error";
const UNKNOWN_TYPE: &str = "unknown_type";
const INVALID_CONFIG: &str = "invalid_resource";

/// The groups whose kinds istiod validates.
const ISTIO_GROUPS: [&str; 4] =
    ["networking.istio.io", "security.istio.io", "telemetry.istio.io", "extensions.istio.io"];

/// Series kept per counter: the labels come from the request, so a caller
/// that is not the API server could otherwise grow them without bound.
const MAX_SERIES: usize = 512;

/// A label value from the request: API group, version and resource names
/// (`[a-z0-9.-]`, at most 253 characters) as they are, anything else
/// `invalid`, so nothing needs escaping in the exposition.
fn label(v: &str) -> String {
    let ok = v.len() <= 253 && v.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if ok { v.to_owned() } else { "invalid".to_owned() }
}

/// `galley_validation_passed` and `galley_validation_failed` by labels.
#[derive(Debug, Default)]
pub struct Metrics {
    passed: BTreeMap<(String, String, String), u64>,
    failed: BTreeMap<(String, String, String, &'static str), u64>,
}

impl Metrics {
    fn pass(&mut self, r: &AdmissionRequest) {
        let k = (label(&r.resource.group), label(&r.resource.version), label(&r.resource.resource));
        if self.passed.len() < MAX_SERIES || self.passed.contains_key(&k) {
            *self.passed.entry(k).or_default() += 1;
        }
    }

    fn fail(&mut self, r: &AdmissionRequest, reason: &'static str) {
        // istiod counts no dry run.
        if r.dry_run == Some(true) {
            return;
        }
        let k = (label(&r.resource.group), label(&r.resource.version), label(&r.resource.resource), reason);
        if self.failed.len() < MAX_SERIES || self.failed.contains_key(&k) {
            *self.failed.entry(k).or_default() += 1;
        }
    }

    /// Adds what `other` counted (a review judged off the control thread).
    pub fn merge(&mut self, other: Metrics) {
        for (k, n) in other.passed {
            if self.passed.len() < MAX_SERIES || self.passed.contains_key(&k) {
                *self.passed.entry(k).or_default() += n;
            }
        }
        for (k, n) in other.failed {
            if self.failed.len() < MAX_SERIES || self.failed.contains_key(&k) {
                *self.failed.entry(k).or_default() += n;
            }
        }
    }

    /// Adds the validation series.
    pub fn collect(&self, out: &mut istiod_xds::metrics::Exposition) {
        out.counter(
            "galley_validation_passed",
            "Resource is valid",
            self.passed.iter().map(|((g, v, r), n)| {
                (vec![("group", g.to_string()), ("resource", r.to_string()), ("version", v.to_string())], *n as f64)
            }),
        );
        out.counter(
            "galley_validation_failed",
            "Resource validation failed",
            self.failed.iter().map(|((g, v, r, reason), n)| {
                (
                    vec![
                        ("group", g.to_string()),
                        ("reason", reason.to_string()),
                        ("resource", r.to_string()),
                        ("version", v.to_string()),
                    ],
                    *n as f64,
                )
            }),
        );
    }

    /// In Prometheus text (tests).
    #[cfg(test)]
    fn render(&self) -> String {
        let mut out = istiod_xds::metrics::Exposition::new();
        self.collect(&mut out);
        out.encode()
    }
}

const VALID_FIELDS: [&str; 5] = ["apiVersion", "kind", "metadata", "spec", "status"];

/// Judges one request.
pub fn validate(request: &AdmissionRequest, metrics: &mut Metrics) -> AdmissionResponse {
    let dry = if request.dry_run == Some(true) { " (dry run)" } else { "" };
    match request.operation.as_str() {
        "CREATE" | "UPDATE" => {}
        other => {
            tracing::warn!(target: "validation", "Unsupported webhook operation {other}{dry}");
            metrics.fail(request, UNSUPPORTED_OPERATION);
            return AdmissionResponse::allow();
        }
    }
    let obj = &request.object;
    let Some(fields) = obj.as_object() else {
        metrics.fail(request, YAML_DECODE_ERROR);
        return AdmissionResponse::deny("cannot decode configuration: the object is not a JSON object");
    };
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    // istiod finds the validator by group and kind, whatever the version.
    let known = IstioKind::ALL.into_iter().find(|k| k.group() == group && k.name() == kind);
    if known.is_none() {
        if ISTIO_GROUPS.contains(&group) && !kind.is_empty() {
            metrics.pass(request);
            return AdmissionResponse {
                warnings: vec![format!("{kind} of {api_version} is not validated by istiod-rs yet")],
                ..AdmissionResponse::allow()
            };
        }
        tracing::info!(target: "validation", "unrecognized type {api_version}, Kind={kind}{dry}");
        metrics.fail(request, UNKNOWN_TYPE);
        return AdmissionResponse::deny(format!("unrecognized type {api_version}, Kind={kind}"));
    }
    let mut as_read = obj.clone();
    if let Some(k) = known.filter(|_| IstioKind::from_api(api_version, kind).is_none()) {
        as_read["apiVersion"] = format!("{group}/{}", k.versions()[0]).into();
    }
    let yaml = match serde_yaml_ng::to_value(&as_read) {
        Ok(v) => v,
        Err(e) => {
            metrics.fail(request, YAML_DECODE_ERROR);
            return AdmissionResponse::deny(format!("cannot decode configuration: {e}"));
        }
    };
    let parsed = match istio::parse(&yaml) {
        Ok(o) => o,
        Err(e) => {
            tracing::info!(target: "validation", "configuration is invalid: {e}{dry}");
            metrics.fail(request, INVALID_CONFIG);
            return AdmissionResponse::deny(format!("configuration is invalid: {e}"));
        }
    };
    if let Some(key) = fields.keys().find(|k| !VALID_FIELDS.contains(&k.as_str())) {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        metrics.fail(request, INVALID_CONFIG);
        return AdmissionResponse::deny(format!(
            "unknown field {key:?} on {} resource {}/{name}",
            request.kind.kind, request.namespace
        ));
    }
    metrics.pass(request);
    AdmissionResponse { warnings: istio::warnings(&parsed), ..AdmissionResponse::allow() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn request(op: &str, object: Value) -> AdmissionRequest {
        serde_json::from_value(json!({
            "uid": "u",
            "kind": {"group": "networking.istio.io", "version": "v1", "kind": object["kind"]},
            "resource": {"group": "networking.istio.io", "version": "v1", "resource": "virtualservices"},
            "namespace": "default",
            "operation": op,
            "object": object,
        }))
        .unwrap()
    }

    fn vs(spec: Value) -> Value {
        json!({"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "metadata": {"name": "r", "namespace": "default"}, "spec": spec})
    }

    /// pkg/webhooks/validation/server/server.go `validate`.
    #[test]
    fn istio_objects_are_judged_as_istiod_judges_them() {
        let mut m = Metrics::default();
        let good = vs(json!({"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}}]}]}));
        assert!(validate(&request("CREATE", good.clone()), &mut m).allowed);
        let bad = vs(
            json!({"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}, "weight": -1}]}]}),
        );
        let r = validate(&request("UPDATE", bad.clone()), &mut m);
        assert!(!r.allowed);
        let msg = r.message.unwrap();
        assert!(msg.starts_with("configuration is invalid: ") && msg.contains("spec.http[0].route[0].weight"), "{msg}");
        // Deleting is not judged.
        assert!(validate(&request("DELETE", bad), &mut m).allowed);
        // A top-level field of its own.
        let mut extra = good;
        extra["extra"] = json!(1);
        let r = validate(&request("CREATE", extra), &mut m);
        assert_eq!(r.message.as_deref(), Some(r#"unknown field "extra" on VirtualService resource default/r"#));
        // EnvoyFilter is judged, with istiod's warning, in any version.
        let ef = json!({"apiVersion": "networking.istio.io/v1alpha3", "kind": "EnvoyFilter", "metadata": {"name": "f"}, "spec": {}});
        let r = validate(&request("CREATE", ef), &mut m);
        assert!(r.allowed && r.warnings[0].starts_with("EnvoyFilter exposes internal implementation details"), "{r:?}");
        let ef = json!({"apiVersion": "networking.istio.io/v1", "kind": "EnvoyFilter", "metadata": {"name": "f"},
            "spec": {"configPatches": [{"applyTo": "CLUSTER", "patch": {"operation": "MERGE"}}]}});
        let r = validate(&request("CREATE", ef), &mut m);
        let msg = r.message.unwrap_or_default();
        assert!(
            msg.contains(
                "spec.configPatches[0].patch.value: Envoy filter: missing patch value for non-remove operation"
            ),
            "{msg}"
        );
        // Istio kinds not known here pass with a warning; others are refused.
        let other =
            json!({"apiVersion": "networking.istio.io/v1", "kind": "NewKind", "metadata": {"name": "f"}, "spec": {}});
        let r = validate(&request("CREATE", other), &mut m);
        assert!(r.allowed && r.warnings[0].contains("not validated"), "{r:?}");
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        assert_eq!(
            validate(&request("CREATE", pod), &mut m).message.as_deref(),
            Some("unrecognized type v1, Kind=Pod")
        );
        // Labels from the request are not taken as they are.
        let mut hostile = request("CREATE", vs(json!({"hosts": ["r"]})));
        hostile.resource.resource = "x\"} 1\nfake_metric{a=\"".into();
        validate(&hostile, &mut m);
        assert!(m.render().contains("resource=\"invalid\""), "{}", m.render());
        assert!(!m.render().contains("fake_metric"));
        let text = m.render();
        for line in [
            "galley_validation_passed{group=\"networking.istio.io\",resource=\"virtualservices\",version=\"v1\"} 3",
            "galley_validation_failed{group=\"networking.istio.io\",reason=\"invalid_resource\",resource=\"virtualservices\",version=\"v1\"} 3",
            "galley_validation_failed{group=\"networking.istio.io\",reason=\"unsupported_operation\",resource=\"virtualservices\",version=\"v1\"} 1",
            "galley_validation_failed{group=\"networking.istio.io\",reason=\"unknown_type\",resource=\"virtualservices\",version=\"v1\"} 1",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
