//! Sidecar injection against Istio's own cases (issue #13): the inputs
//! and expected pods of istio/istio `pkg/kube/inject/testdata/inject/`
//! (tests/data/inject, Apache-2.0), with the chart's four injection
//! templates (tests/data/istio-chart) and its default values, run as
//! istiod's `pkg/kube/inject/inject_test.go` webhook subtest runs them:
//! each workload becomes the pod its controller would create
//! (`webhook_test.go:objectToPod`, with the simulated owner reference),
//! the pod goes through the injector, the JSONPatch is applied by an
//! independent RFC 6902 implementation (the `json-patch` crate), and the
//! result must equal the expected pod after `normalizeAndCompareDeployments`
//! (status annotation and `fieldRef.apiVersion` ignored) and Go's typed
//! round trip (nulls and empty structs dropped, quantities canonical).
//!
//! The default cases go through the server's HTTPS webhook over HTTP/2;
//! the cases that need other settings go through the same injector in
//! process, with the settings istiod's test gives them.

#[path = "support/server.rs"]
mod server;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use istiod::webhook::inject::{self, Env, Injector, MeshInputs};
use serde_json::{Value, json};

fn data(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(p)
}

/// The mesh configuration istiod's injection tests use (the chart's
/// `istio` ConfigMap with the test defaults).
const MESH: &str = "defaultConfig:\n  discoveryAddress: istiod.istio-system.svc:15012\ndefaultProviders:\n  metrics:\n  - prometheus\nenablePrometheusMerge: true\nrootNamespace: istio-system\ntrustDomain: cluster.local\n";

/// The injector's `config` as the chart renders it, with extra templates.
fn config(extra: &[(&str, &str)]) -> String {
    let mut templates = BTreeMap::new();
    for (name, file) in [
        ("sidecar", "injection-template.yaml"),
        ("gateway", "gateway-injection-template.yaml"),
        ("grpc-simple", "grpc-simple.yaml"),
        ("grpc-agent", "grpc-agent.yaml"),
    ] {
        templates.insert(name.to_owned(), std::fs::read_to_string(data("istio-chart").join(file)).unwrap());
    }
    for (name, t) in extra {
        templates.insert((*name).to_owned(), (*t).to_owned());
    }
    let c = json!({
        "defaultTemplates": ["sidecar"],
        "policy": "enabled",
        "alwaysInjectSelector": [],
        "neverInjectSelector": [],
        "injectedAnnotations": {},
        "templates": templates,
    });
    serde_yaml_ng::to_string(&c).unwrap()
}

fn values() -> Value {
    serde_json::from_str(&std::fs::read_to_string(data("inject/values.json")).unwrap()).unwrap()
}

/// YAML documents of a file, `List`s expanded.
fn documents(path: &Path) -> Vec<Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc).unwrap();
        if v.is_null() {
            continue;
        }
        if v["kind"] == "List" {
            out.extend(v["items"].as_array().cloned().unwrap_or_default());
        } else {
            out.push(v);
        }
    }
    out
}

/// `webhook_test.go:objectToPod`: the pod a workload's controller makes,
/// with `simulateOwnerRef`; `None` for what holds no pod (a Service).
fn object_to_pod(obj: &Value) -> Option<Value> {
    let kind = obj["kind"].as_str().unwrap_or_default();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let gv = obj["apiVersion"].as_str().unwrap_or_default();
    let simulate = |template: &Value, name: &str, gv: &str, kind: &str| -> Value {
        let mut meta = template["metadata"].clone();
        if !meta.is_object() {
            meta = json!({});
        }
        meta["generateName"] = json!(name);
        meta["ownerReferences"] = json!([{"apiVersion": gv, "kind": kind, "name": name, "controller": true}]);
        json!({"metadata": meta, "spec": template["spec"]})
    };
    Some(match kind {
        "Pod" => obj.clone(),
        "CronJob" => simulate(&obj["spec"]["jobTemplate"]["spec"]["template"], name, gv, kind),
        "DaemonSet" | "ReplicaSet" | "ReplicationController" | "StatefulSet" | "Job" | "DeploymentConfig" => {
            simulate(&obj["spec"]["template"], name, gv, kind)
        }
        "Deployment" => {
            let rs = format!("{name}-fake");
            let mut pod = simulate(&obj["spec"]["template"], &rs, "apps/v1", "ReplicaSet");
            pod["metadata"]["generateName"] = json!(format!("{rs}-"));
            if !pod["metadata"]["labels"].is_object() {
                pod["metadata"]["labels"] = json!({});
            }
            pod["metadata"]["labels"]["pod-template-hash"] = json!("fake");
            pod
        }
        _ => return None,
    })
}

/// A Kubernetes quantity as an exact number of thousandths (so `2000m`,
/// `2` and `"2"` compare equal, as the API server's canonical form does).
fn quantity(q: &str) -> Option<String> {
    let split = q.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let frac3 = format!("{frac:0<3}");
    let milli: i128 = format!("{int}{}", &frac3[..3]).parse().ok()?;
    let mult: i128 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return None,
    };
    Some((milli * mult).to_string())
}

/// Go's typed round trip and the test's normalization, on both sides.
fn normalize(v: &mut Value, key: &str) {
    match v {
        Value::Object(m) => {
            if key == "limits" || key == "requests" {
                for q in m.values_mut() {
                    let s = match q {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        _ => continue,
                    };
                    let canon = if let Some(milli) = s.strip_suffix('m') {
                        milli.parse::<i128>().ok().map(|x| x.to_string())
                    } else {
                        quantity(&s)
                    };
                    *q = json!(canon.unwrap_or(s));
                }
            }
            if key == "fieldRef" {
                m.remove("apiVersion");
            }
            if key == "annotations" {
                m.remove(inject::STATUS_ANNOTATION);
                // JSON in an annotation compares as JSON.
                for (_, a) in m.iter_mut() {
                    if let Some(j) =
                        a.as_str().filter(|s| s.starts_with('{')).and_then(|s| serde_json::from_str::<Value>(s).ok())
                    {
                        *a = j;
                    }
                }
            }
            for (k, x) in m.iter_mut() {
                normalize(x, k);
            }
            m.retain(|k, x| {
                !(x.is_null()
                    || (k != "emptyDir" && x.as_object().is_some_and(|o| o.is_empty()))
                    || x.as_array().is_some_and(Vec::is_empty))
            });
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                normalize(x, "");
            }
        }
        _ => {}
    }
}

/// The first difference between two JSON values, as a path.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => {
                        if let Some(d) = first_difference(p, q, &format!("{path}/{k}")) {
                            return Some(d);
                        }
                    }
                    (p, q) => return Some(format!("{path}/{k}: got {p:?}, want {q:?}")),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (p, q))| first_difference(p, q, &format!("{path}/{i}")))
        }
        _ if a == b => None,
        _ => Some(format!("{path}: got {a}, want {b}")),
    }
}

/// The pods of a case and the pods it should become.
fn case(name: &str) -> Vec<(Value, String, Value)> {
    let input = documents(&data("inject").join(format!("{name}.yaml")));
    let want = documents(&data("inject").join(format!("{name}.yaml.injected")));
    let mut out = Vec::new();
    for (i, w) in input.iter().zip(want.iter()) {
        let (Some(pod), Some(want_pod)) = (object_to_pod(i), object_to_pod(w)) else { continue };
        let ns = i["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
        out.push((pod, ns, want_pod));
    }
    assert!(!out.is_empty(), "{name}: no pods");
    out
}

/// Applies an injector's answer to `pod` and compares with `want`.
fn check(name: &str, pod: &Value, patch: Option<&[Value]>, want: &Value) -> Result<(), String> {
    let mut got = pod.clone();
    if let Some(ops) = patch {
        let p: json_patch::Patch =
            serde_json::from_value(Value::Array(ops.to_vec())).map_err(|e| format!("{name}: patch: {e}"))?;
        json_patch::patch(&mut got, &p).map_err(|e| format!("{name}: the patch does not apply: {e}"))?;
    }
    let mut want = want.clone();
    normalize(&mut got, "");
    normalize(&mut want, "");
    match first_difference(&got, &want, "") {
        None => Ok(()),
        Some(d) => Err(format!("{name}: {d}")),
    }
}

fn injector(extra: &[(&str, &str)], values: Value, mesh: &str, env: Env) -> Injector {
    Injector::new(&config(extra), &values.to_string(), MeshInputs::parse(mesh).unwrap(), env).unwrap()
}

fn default_env() -> Env {
    // istiod's webhook subtest: revision "default", nodes on kubelet 1.33+.
    Env { revision: "default".into(), native_sidecars: true, compliance_policy: String::new() }
}

/// Istio's cases that run with the defaults (inject_test.go's
/// auto-discovered files and explicit cases with no settings).
const DEFAULT_CASES: &[&str] = &[
    "auth.non-default-service-account",
    "auth",
    "daemonset",
    "deploymentconfig-multi",
    "deploymentconfig-with-canonical-service-label",
    "deploymentconfig",
    "enable-core-dump",
    "frontend",
    "gateway-with-default-container",
    "grpc-agent",
    "grpc-simple",
    "hello-host-network",
    "hello-ignore",
    "hello-image-pull-secret",
    "hello-mtls-not-ready",
    "hello-multi",
    "hello-multiport-metrics",
    "hello-namespace",
    "hello-probes-with-flag-set-in-annotation",
    "hello-probes-with-flag-unset-in-annotation",
    "hello-probes",
    "hello-proxy-override",
    "hello-readiness",
    "hello",
    "https-probes",
    "init-no-intercept-no-native-sidecar",
    "job",
    "kubevirtInterfaces_list",
    "list-frontend",
    "list",
    "multi-container",
    "multi-init",
    "multiple-templates",
    "named_port",
    "one_container",
    "pod",
    "prometheus-scrape",
    "prometheus-scrape2",
    "ready_live",
    "ready_only",
    "replicaset",
    "replicationcontroller",
    "reroute-virtual-interfaces_list",
    "resource_annotations",
    "startup_live",
    "startup_only",
    "startup_ready_live",
    "statefulset",
    "status_annotations",
    "status_annotations_zeroport",
    "traffic-annotations-empty-includes",
    "traffic-annotations-wildcards",
    "traffic-params-empty-includes",
    "two_container",
    "user-volume",
    "gateway",
    "native-sidecar",
    "native-sidecar-opt-in",
    "native-sidecar-opt-out",
    "proxy-override",
    "explicit-security-context",
    "only-proxy-container",
    "proxy-override-args",
    "proxy-override-runas",
    "tcp-probes",
    "truncate-canonical-name-pod",
    "truncate-canonical-name-custom-controller-pod",
];

#[test]
fn istios_default_injection_cases_in_process() {
    let inj = injector(&[], values(), MESH, default_env());
    let mut failures = Vec::new();
    let mut pods = 0;
    for name in DEFAULT_CASES {
        for (pod, ns, want) in case(name) {
            pods += 1;
            let r = match inject::inject(&inj, &pod, &ns, "") {
                Ok(inject::Outcome::Skipped) => check(name, &pod, None, &want),
                Ok(inject::Outcome::Patched(ops)) => check(name, &pod, Some(&ops), &want),
                Err(e) => Err(format!("{name}: refused: {e}")),
            };
            if let Err(e) = r {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{} of {pods} pods differ:\n{}", failures.len(), failures.join("\n"));
}
