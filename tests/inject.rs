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
//! Every case goes through the server's HTTPS webhook over HTTP/2 (the
//! ones with settings through servers whose injector files and mesh
//! configuration are changed between cases, and whose environment is the
//! case's), and through the injector in process.

use crate::server;
use crate::webhook_client as client;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use istiod_webhook::inject::{self, Env, Injector, MeshInputs};
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
    Env { revision: "default".into(), native_sidecars: Some(true), compliance_policy: String::new() }
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
            let r = match inject::inject(&inj, &Default::default(), &pod, &ns, "") {
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

/// One AdmissionReview of a pod, as the API server sends it for a CREATE.
fn pod_review(uid: &str, ns: &str, pod: &Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns,
            "operation": "CREATE",
            "object": pod,
        },
    })
}

fn decoded_patch(answer: &Value) -> Option<Vec<Value>> {
    use base64::Engine;
    let p = answer["response"]["patch"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(p).unwrap();
    Some(serde_json::from_slice(&bytes).unwrap())
}

/// `pod` injected through the webhook at `https` (one review over h2, the
/// patch applied); `None` when the answer is not 200 or has no patch.
fn injected(https: std::net::SocketAddr, root: &Path, path: &str, ns: &str, pod: &Value) -> Option<Value> {
    let (status, answer) =
        client::post_all(https, root, path, &[pod_review("r", ns, pod).to_string().into_bytes()]).remove(0);
    if status != 200 {
        return None;
    }
    let ops = decoded_patch(&answer)?;
    let mut got = pod.clone();
    let p: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
    json_patch::patch(&mut got, &p).unwrap();
    Some(got)
}

#[test]
fn istios_cases_through_the_https_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let inject_dir = dir.path().join("inject");
    std::fs::create_dir(&inject_dir).unwrap();
    std::fs::write(inject_dir.join("config"), config(&[])).unwrap();
    std::fs::write(inject_dir.join("values"), values().to_string()).unwrap();
    let mesh = dir.path().join("mesh");
    std::fs::write(&mesh, MESH).unwrap();
    let ca = dir.path().join("ca");
    let https = server::free_port();
    let s = server::Server::start(
        Path::new(server::BOOKINFO),
        &[
            "--httpsAddr",
            &https.to_string(),
            "--injectionDir",
            inject_dir.to_str().unwrap(),
            "--meshConfig",
            mesh.to_str().unwrap(),
        ],
        &[
            ("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca.to_str().unwrap()),
            ("REVISION", "default"),
            ("ENABLE_NATIVE_SIDECARS", "true"),
        ],
        None,
    );
    let root = ca.join("ca-cert.pem");
    server::wait_for("the webhook port", std::time::Duration::from_secs(10), || {
        std::net::TcpStream::connect(https).is_ok()
    });
    // The injector loads within its first poll.
    // Before it has, /inject answers 503 (the API server's failurePolicy
    // decides), counted as a failure.
    let mut unavailable = 0;
    server::wait_for("the injector", std::time::Duration::from_secs(10), || {
        let probe = pod_review(
            "probe",
            "default",
            &json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "a"}]}}),
        );
        let status = client::post_all(https, &root, "/inject", &[probe.to_string().into_bytes()])[0].0;
        if status == 503 {
            unavailable += 1;
        }
        status == 200
    });

    let mut pods = Vec::new();
    for name in DEFAULT_CASES {
        for (pod, ns, want) in case(name) {
            pods.push((name, pod, ns, want));
        }
    }
    let bodies: Vec<Vec<u8>> = pods
        .iter()
        .enumerate()
        .map(|(i, (_, pod, ns, _))| pod_review(&format!("u-{i}"), ns, pod).to_string().into_bytes())
        .collect();
    let answers = client::post_all(https, &root, "/inject", &bodies);
    let mut failures = Vec::new();
    let mut patched = 0;
    for (i, ((name, pod, _, want), (status, answer))) in pods.iter().zip(&answers).enumerate() {
        assert_eq!(*status, 200, "{name}: {answer}");
        assert_eq!(answer["response"]["uid"], format!("u-{i}"), "{name}: the uid is echoed");
        assert_eq!(answer["response"]["allowed"], true, "{name}: {answer}");
        let patch = decoded_patch(answer);
        if patch.is_some() {
            assert_eq!(answer["response"]["patchType"], "JSONPatch");
            patched += 1;
        }
        if let Err(e) = check(name, pod, patch.as_deref(), want) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{} of {} pods differ:\n{}", failures.len(), pods.len(), failures.join("\n"));
    // hello-ignore (sidecar.istio.io/inject: "false") and
    // hello-host-network are left alone: no patch.
    assert_eq!(patched, pods.len() - 2, "every other pod is patched");

    // Bad input: a clear answer, and the server serves on.
    let broken = pod_review(
        "bad-1",
        "default",
        &json!({"metadata": {"name": "x", "annotations": {
        "traffic.sidecar.istio.io/includeInboundPorts": "80,notaport"}}, "spec": {"containers": [{"name": "a"}]}}),
    );
    let missing = pod_review(
        "bad-2",
        "default",
        &json!({"metadata": {"name": "x", "annotations": {
        "inject.istio.io/templates": "sidecar,nosuch"}}, "spec": {"containers": [{"name": "a"}]}}),
    );
    let not_a_pod = pod_review("bad-3", "default", &json!("a string"));
    let answers = client::post_all(
        https,
        &root,
        "/inject/cluster/c1/net/n1",
        &[
            broken.to_string().into_bytes(),
            missing.to_string().into_bytes(),
            not_a_pod.to_string().into_bytes(),
            b"{".to_vec(),
        ],
    );
    let message = |a: &Value| a["response"]["status"]["message"].as_str().unwrap_or_default().to_owned();
    assert_eq!(answers[0].1["response"]["allowed"], false);
    assert!(message(&answers[0].1).contains("includeInboundPorts invalid"), "{}", answers[0].1);
    assert!(message(&answers[1].1).contains("requested template \"nosuch\" not found"), "{}", answers[1].1);
    assert_eq!(answers[2].1["response"]["allowed"], false, "{}", answers[2].1);
    assert!(message(&answers[3].1).starts_with("could not decode body"), "{}", answers[3].1);

    // HTTP/1.1 (the API server's other way): the same answer.
    let hello = &case("hello")[0];
    let over_h1 = client::http1(
        https,
        &root,
        &json!({"method": "POST", "path": "/inject", "body": pod_review("h1", "default", &hello.0).to_string()}),
    );
    assert_eq!((over_h1["status"].as_u64(), over_h1["alpn"].as_str()), (Some(200), Some("http/1.1")), "{over_h1}");
    let answer: Value = serde_json::from_str(over_h1["body"].as_str().unwrap()).unwrap();
    let mut got = hello.0.clone();
    let p: json_patch::Patch = serde_json::from_value(Value::Array(decoded_patch(&answer).unwrap())).unwrap();
    json_patch::patch(&mut got, &p).unwrap();
    check("hello over HTTP/1.1", &got, None, &hello.2).unwrap();

    // The URL's cluster and network reach the proxy's environment.
    let got = injected(https, &root, "/inject/cluster/c1/net/n1", "default", &hello.0).unwrap();
    let proxy = got["spec"]["initContainers"].as_array().unwrap().iter().find(|c| c["name"] == "istio-proxy").unwrap();
    let env: Vec<&Value> = proxy["env"].as_array().unwrap().iter().rev().take(2).collect();
    assert_eq!(
        env,
        [
            &json!({"name": "ISTIO_META_NETWORK", "value": "n1"}),
            &json!({"name": "ISTIO_META_CLUSTER_ID", "value": "c1"})
        ]
    );
    assert_eq!(got["metadata"]["labels"]["topology.istio.io/network"], "n1");

    // istiod's counters: every review answered counts as a success, the
    // undecodable body included (istiod counts written answers).
    let metrics = server::get(s.monitoring, "/metrics").unwrap().1;
    // The cases, the probe that saw the injector loaded, four bad reviews,
    // one over HTTP/1.1 and one with path envs.
    let n = pods.len() + 1 + 4 + 1 + 1;
    for line in [
        format!("sidecar_injection_success_total {}", n),
        "sidecar_injection_skip_total 2".to_owned(),
        // The 503s before the injector loaded, and the four bad reviews.
        format!("sidecar_injection_failure_total {}", unavailable + 4),
    ] {
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
    assert!(metrics.contains("sidecar_injection_time_seconds_count"), "{metrics}");
}

/// A case: input file, expected file, settings.
type Case = (&'static str, &'static str, Vec<Set>);

/// A setting a case changes: `values` at a JSON pointer, the mesh
/// config's YAML at a pointer, or the environment.
enum Set {
    Values(&'static str, Value),
    Mesh(&'static str, Value),
    NativeOff,
    Compliance(&'static str),
}

fn set_pointer(root: &mut Value, pointer: &str, v: Value) {
    let mut cur = root;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let m = cur.as_object_mut().unwrap();
        if i == parts.len() - 1 {
            m.insert((*p).to_owned(), v);
            return;
        }
        cur = m.entry((*p).to_owned()).or_insert_with(|| json!({}));
    }
}

/// The values, mesh configuration (YAML) and environment of `sets`.
fn settings(sets: &[Set]) -> (Value, String, Env) {
    let mut values = values();
    let mut mesh: Value = serde_yaml_ng::from_str(MESH).unwrap();
    let mut env = default_env();
    for s in sets {
        match s {
            Set::Values(p, v) => set_pointer(&mut values, p, v.clone()),
            Set::Mesh(p, v) => set_pointer(&mut mesh, p, v.clone()),
            Set::NativeOff => env.native_sidecars = Some(false),
            Set::Compliance(c) => env.compliance_policy = (*c).to_owned(),
        }
    }
    (values, serde_yaml_ng::to_string(&mesh).unwrap(), env)
}

fn injector_with(sets: &[Set]) -> Injector {
    let (values, mesh, env) = settings(sets);
    injector(&[], values, &mesh, env)
}

/// Istio's cases with settings (inject_test.go's explicit cases), each
/// with what it sets there: (input, expected, settings).
fn settings_cases() -> Vec<Case> {
    use Set::*;
    let hold = || Values("/global/proxy/holdApplicationUntilProxyStarts", json!(true));
    let status = || {
        vec![
            Values("/global/proxy/statusPort", json!(123)),
            Values("/global/proxy/readinessInitialDelaySeconds", json!(100)),
            Values("/global/proxy/readinessPeriodSeconds", json!(200)),
            Values("/global/proxy/readinessFailureThreshold", json!(300)),
        ]
    };
    let secrets = || Values("/global/imagePullSecrets", json!(["barSecret"]));
    let multus = || vec![Values("/pilot/cni/enabled", json!(true)), Values("/pilot/cni/provider", json!("multus"))];
    vec![
        (
            "hello.yaml",
            "hello.yaml.cni.injected",
            vec![
                Values("/pilot/cni/enabled", json!(true)),
                Values("/pilot/cni/provider", json!("default")),
                Values("/global/network", json!("network1")),
            ],
        ),
        ("hello.yaml", "hello.yaml.proxyImageName.injected", vec![Values("/global/proxy/image", json!("proxyTest"))]),
        (
            "hello.yaml",
            "hello.yaml.proxyInitImageName.injected",
            vec![Values("/global/proxy_init/image", json!("proxyInitTest"))],
        ),
        ("hello.yaml", "hello-tproxy.yaml.injected", vec![Mesh("/defaultConfig/interceptionMode", json!("TPROXY"))]),
        ("hello.yaml", "hello-always.yaml.injected", vec![Values("/global/imagePullPolicy", json!("Always"))]),
        ("hello.yaml", "hello-never.yaml.injected", vec![Values("/global/imagePullPolicy", json!("Never"))]),
        ("hello.yaml", "hello-old-version.yaml.injected", vec![NativeOff]),
        (
            "format-duration.yaml",
            "format-duration.yaml.injected",
            vec![Mesh("/defaultConfig/drainDuration", json!("23s"))],
        ),
        (
            "traffic-params.yaml",
            "traffic-params.yaml.injected",
            vec![
                Values("/global/proxy/includeIPRanges", json!("127.0.0.1/24,10.96.0.1/24")),
                Values("/global/proxy/excludeIPRanges", json!("10.96.0.2/24,10.96.0.3/24")),
                Values("/global/proxy/excludeInboundPorts", json!("4,5,6")),
                Values("/global/proxy/statusPort", json!(0)),
            ],
        ),
        ("status_params.yaml", "status_params.yaml.injected", status()),
        ("kubevirtInterfaces.yaml", "kubevirtInterfaces.yaml.injected", status()),
        ("reroute-virtual-interfaces.yaml", "reroute-virtual-interfaces.yaml.injected", status()),
        ("hello.yaml", "hello-image-secrets-in-values.yaml.injected", vec![secrets()]),
        ("hello-image-pull-secret.yaml", "hello-multiple-image-secrets.yaml.injected", vec![secrets()]),
        ("hello.yaml", "hello-mount-mtls-certs.yaml.injected", vec![Values("/global/mountMtlsCerts", json!(true))]),
        ("hello.yaml", "hello-cncf-networks.yaml.injected", multus()),
        ("hello-existing-cncf-networks.yaml", "hello-existing-cncf-networks.yaml.injected", multus()),
        ("hello-existing-cncf-networks-json.yaml", "hello-existing-cncf-networks-json.yaml.injected", multus()),
        ("hello.yaml", "hello.proxyHoldsApplication.yaml.injected", vec![hold()]),
        ("hello-probes.yaml", "hello-probes.proxyHoldsApplication.yaml.injected", vec![hold()]),
        (
            "hello-probes-proxyHoldApplication-ProxyConfig.yaml",
            "hello-probes-proxyHoldApplication-ProxyConfig.yaml.injected",
            vec![],
        ),
        (
            "hello-probes-noProxyHoldApplication-ProxyConfig.yaml",
            "hello-probes-noProxyHoldApplication-ProxyConfig.yaml.injected",
            vec![hold()],
        ),
        ("daemonset.yaml", "daemonset-old-version.yaml.injected", vec![NativeOff]),
        ("job.yaml", "job-old-version.yaml.injected", vec![NativeOff]),
        ("pod.yaml", "pod-old-version.yaml.injected", vec![NativeOff]),
        ("replicaset.yaml", "replicaset-old-version.yaml.injected", vec![NativeOff]),
        ("statefulset.yaml", "statefulset-old-version.yaml.injected", vec![NativeOff]),
        (
            "traffic-annotations.yaml",
            "traffic-annotations.yaml.injected",
            vec![Mesh(
                "/defaultConfig/proxyMetadata",
                json!({"ISTIO_META_TLS_CLIENT_KEY": "/etc/identity/client/keys/client-key.pem"}),
            )],
        ),
        (
            "proxy-override-runas.yaml",
            "proxy-override-runas.yaml.cni.injected",
            vec![Values("/pilot/cni/enabled", json!(true))],
        ),
        (
            "proxy-override-runas.yaml",
            "proxy-override-runas.yaml.tproxy.injected",
            vec![Mesh("/defaultConfig/interceptionMode", json!("TPROXY"))],
        ),
        ("proxy-override-args.yaml", "proxy-override-args-native.yaml.injected", vec![]),
        ("native-sidecar.yaml", "native-sidecar-old-version.yaml.injected", vec![NativeOff]),
        ("native-sidecar-opt-in.yaml", "native-sidecar-opt-in.yaml.injected", vec![NativeOff]),
        ("native-sidecar-opt-out.yaml", "native-sidecar-opt-out.yaml.injected", vec![NativeOff]),
        (
            "hello-probes-localhost.yaml",
            "hello-probes-localhost.yaml.injected",
            vec![Mesh("/inboundTrafficPolicy/mode", json!("LOCALHOST"))],
        ),
        (
            "hello-tracing-disabled.yaml",
            "hello-tracing-disabled.yaml.injected",
            vec![Mesh("/defaultConfig/tracing", json!({}))],
        ),
        ("merge-probers.yaml", "merge-probers.yaml.injected", vec![hold()]),
        ("hello.yaml", "hello-fips-140-3.yaml.injected", vec![Compliance("fips-140-3")]),
        (
            "hello-otel-semconv.yaml",
            "hello-otel-semconv.yaml.injected",
            vec![Mesh(
                "/extensionProviders",
                json!([{"name": "otel", "opentelemetry": {"service": "otel-collector.observability.svc.cluster.local",
                    "port": 4317, "serviceAttributeEnrichment": "OTEL_SEMANTIC_CONVENTIONS"}}]),
            )],
        ),
        (
            "proxy-resources-null.yaml",
            "proxy-resources-null.yaml.injected",
            vec![Values(
                "/global/proxy/resources",
                json!({"limits": {"memory": "500Mi"}, "requests": {"memory": "150Mi"}}),
            )],
        ),
        (
            "proxy-resources-zero.yaml",
            "proxy-resources-zero.yaml.injected",
            vec![Values(
                "/global/proxy/resources",
                json!({"limits": {"cpu": "0", "memory": "500Mi"}, "requests": {"cpu": "0", "memory": "150Mi"}}),
            )],
        ),
    ]
}

/// The cases with settings, in process.
#[test]
fn istios_injection_cases_with_settings() {
    let cases = settings_cases();
    let mut failures = Vec::new();
    let n = cases.len();
    for (input, want, sets) in cases {
        let inj = injector_with(&sets);
        let ins = documents(&data("inject").join(input));
        let wants = documents(&data("inject").join(want));
        for (i, w) in ins.iter().zip(&wants) {
            let (Some(pod), Some(want_pod)) = (object_to_pod(i), object_to_pod(w)) else { continue };
            let ns = i["metadata"]["namespace"].as_str().unwrap_or_default();
            let r = match inject::inject(&inj, &Default::default(), &pod, ns, "") {
                Ok(inject::Outcome::Skipped) => check(want, &pod, None, &want_pod),
                Ok(inject::Outcome::Patched(ops)) => check(want, &pod, Some(&ops), &want_pod),
                Err(e) => Err(format!("{want}: refused: {e}")),
            };
            if let Err(e) = r {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{} of {n} cases differ:\n{}", failures.len(), failures.join("\n"));

    // The comparison tells settings apart: without them, the same inputs
    // do not give those pods.
    let plain = injector_with(&[]);
    for want in [
        "hello.yaml.cni.injected",
        "hello-tproxy.yaml.injected",
        "hello-old-version.yaml.injected",
        "hello-fips-140-3.yaml.injected",
    ] {
        let pod = object_to_pod(&documents(&data("inject/hello.yaml"))[0]).unwrap();
        let want_pod = object_to_pod(&documents(&data("inject").join(want))[0]).unwrap();
        let inject::Outcome::Patched(ops) = inject::inject(&plain, &Default::default(), &pod, "", "").unwrap() else {
            panic!()
        };
        assert!(check(want, &pod, Some(&ops), &want_pod).is_err(), "{want} is told apart");
    }

    // Bad traffic annotations are refused naming the field (expectedError).
    let inj = injector_with(&[]);
    for field in
        ["includeipranges", "excludeipranges", "includeinboundports", "excludeinboundports", "excludeoutboundports"]
    {
        let doc = &documents(&data("inject").join(format!("traffic-annotations-bad-{field}.yaml")))[0];
        let pod = object_to_pod(doc).unwrap();
        let err = inject::inject(&inj, &Default::default(), &pod, "default", "")
            .err()
            .unwrap_or_else(|| panic!("{field}: injected"));
        assert!(err.to_lowercase().contains(field), "{field}: {err}");
    }
}

/// The injector's files are watched: a change takes effect without a
/// restart (as a ConfigMap update, a symlink swap), a broken one keeps
/// the last good configuration.
#[test]
fn the_injector_follows_its_configmap() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca");
    // The mounted ConfigMap: files are symlinks into a data directory that
    // the kubelet swaps.
    let mount = dir.path().join("inject");
    std::fs::create_dir(&mount).unwrap();
    let publish = |version: &str, config: &str| {
        let data_dir = mount.join(format!("..{version}"));
        std::fs::create_dir(&data_dir).unwrap();
        std::fs::write(data_dir.join("config"), config).unwrap();
        std::fs::write(data_dir.join("values"), values().to_string()).unwrap();
        let tmp = mount.join("..data_tmp");
        std::os::unix::fs::symlink(format!("..{version}"), &tmp).unwrap();
        std::fs::rename(&tmp, mount.join("..data")).unwrap();
        for f in ["config", "values"] {
            if !mount.join(f).exists() {
                std::os::unix::fs::symlink(format!("..data/{f}"), mount.join(f)).unwrap();
            }
        }
    };
    let with_annotation = |v: &str| {
        config(&[]).replace("injectedAnnotations: {}", &format!("injectedAnnotations:\n  team/version: \"{v}\""))
    };
    publish("1", &with_annotation("one"));
    // The config directory holds a ProxyConfig for the pods' namespace:
    // injection sees it (istiod's EffectiveProxyConfig).
    let config_dir = dir.path().join("config");
    std::fs::create_dir(&config_dir).unwrap();
    server::copy_dir(Path::new(server::BOOKINFO), &config_dir);
    std::fs::write(
        config_dir.join("proxyconfig.yaml"),
        "apiVersion: networking.istio.io/v1beta1\nkind: ProxyConfig\nmetadata: {name: pc, namespace: default}\n\
         spec: {environmentVariables: {FROM_PROXY_CONFIG: 'yes'}}\n",
    )
    .unwrap();
    let https = server::free_port();
    let s = server::Server::start(
        &config_dir,
        &["--httpsAddr", &https.to_string(), "--injectionDir", mount.to_str().unwrap()],
        &[("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca.to_str().unwrap()), ("ENABLE_NATIVE_SIDECARS", "true")],
        None,
    );
    let root = ca.join("ca-cert.pem");
    server::wait_for("the webhook port", std::time::Duration::from_secs(10), || {
        std::net::TcpStream::connect(https).is_ok()
    });
    let hello = case("hello").remove(0).0;
    let annotation = || -> Option<String> {
        let got = injected(https, &root, "/inject", "default", &hello)?;
        got["metadata"]["annotations"]["team/version"].as_str().map(str::to_owned)
    };
    server::wait_for("the first configuration", std::time::Duration::from_secs(10), || {
        annotation().as_deref() == Some("one")
    });
    let got = injected(https, &root, "/inject", "default", &hello).unwrap();
    let proxy = got["spec"]["initContainers"].as_array().unwrap().iter().find(|c| c["name"] == "istio-proxy").unwrap();
    assert!(
        proxy["env"].as_array().unwrap().contains(&json!({"name": "FROM_PROXY_CONFIG", "value": "yes"})),
        "the ProxyConfig's environment reaches the proxy: {}",
        proxy["env"]
    );
    publish("2", &with_annotation("two"));
    server::wait_for("the new configuration", std::time::Duration::from_secs(10), || {
        annotation().as_deref() == Some("two")
    });
    // A broken configuration: the last good one stays.
    publish("3", "templates: [not, a, map");
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(annotation().as_deref(), Some("two"));
    assert!(s.log().contains("injector configuration not loaded; keeping the last good one"), "{}", s.log());
}

/// Replays what the `inject_pod` fuzz target keeps (seeds and fixed
/// crashes under fuzz/regressions/inject_pod/): each gets an answer, and a
/// patch that applies to its pod.
#[test]
fn kept_fuzz_inputs_get_an_answer() {
    use istiod_webhook::admission;
    let inj = injector(
        &[],
        values(),
        "",
        Env { revision: String::new(), native_sidecars: Some(true), compliance_policy: String::new() },
    );
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/inject_pod");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let mut pod = None;
        let out = admission::serve(&data, |r| {
            pod = Some(r.object.clone());
            match inject::inject(&inj, &Default::default(), &r.object, &r.namespace, "/inject") {
                Ok(inject::Outcome::Skipped) => admission::AdmissionResponse::allow(),
                Ok(inject::Outcome::Patched(ops)) => admission::AdmissionResponse {
                    patch: Some(serde_json::to_vec(&ops).unwrap()),
                    ..admission::AdmissionResponse::allow()
                },
                Err(e) => admission::AdmissionResponse::deny(e),
            }
        });
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert!(v["response"]["allowed"].is_boolean(), "{}", path.display());
        if let (Some(ops), Some(pod)) = (decoded_patch(&v), pod) {
            let mut p = pod;
            let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
            json_patch::patch(&mut p, &patch).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        n += 1;
    }
    assert!(n >= 3, "the seeds are there");
}

/// With no mounted files, the injector's configuration is the
/// `istio-sidecar-injector` ConfigMap read from the API server (istiod's
/// `NewConfigMapWatcher`), and its changes are followed.
#[test]
fn without_files_the_configmap_comes_from_the_api_server() {
    let api = server::fake_api();
    for r in istiod_kubewatch::fake::core_resources() {
        api.install(r);
    }
    let cm = |v: &str| {
        let config =
            config(&[]).replace("injectedAnnotations: {}", &format!("injectedAnnotations:\n  team/version: \"{v}\""));
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "istio-sidecar-injector", "namespace": "istio-system"},
            "data": {"config": config, "values": values().to_string()}})
    };
    api.apply("configmaps", cm("api-1"));
    // ENABLE_NATIVE_SIDECARS is istiod's default, auto: a node on an older
    // kubelet turns native sidecars off (istiod's TestInjectionOlderVersion).
    for (name, version) in [("node-1", "v1.33.0"), ("node-2", "v1.28.0")] {
        api.apply("nodes", json!({"metadata": {"name": name}, "status": {"nodeInfo": {"kubeletVersion": version}}}));
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let ca = dir.path().join("ca");
    let https = server::free_port();
    let s = server::Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--httpsAddr", &https.to_string(), "--injectionDir", dir.path().join("absent").to_str().unwrap()],
        &[("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca.to_str().unwrap())],
        None,
    );
    let root = ca.join("ca-cert.pem");
    server::wait_for("the webhook port", std::time::Duration::from_secs(10), || {
        std::net::TcpStream::connect(https).is_ok()
    });
    let hello = case("hello").remove(0).0;
    let annotation = || -> Option<String> {
        let got = injected(https, &root, "/inject", "default", &hello)?;
        got["metadata"]["annotations"]["team/version"].as_str().map(str::to_owned)
    };
    server::wait_for("the ConfigMap's configuration", std::time::Duration::from_secs(15), || {
        annotation().as_deref() == Some("api-1")
    });
    let got = injected(https, &root, "/inject", "default", &hello).unwrap();
    let names = |f: &str| -> Vec<Value> {
        got["spec"][f].as_array().into_iter().flatten().map(|c| c["name"].clone()).collect()
    };
    assert!(names("containers").contains(&json!("istio-proxy")), "not native: {:?}", names("containers"));
    assert!(!names("initContainers").contains(&json!("istio-proxy")));
    api.apply("configmaps", cm("api-2"));
    server::wait_for("its update", std::time::Duration::from_secs(15), || annotation().as_deref() == Some("api-2"));
    assert!(s.log().contains("injector configuration loaded"), "{}", s.log());
}

/// The cases with settings through the server's HTTPS webhook: one server
/// per environment (native sidecars off, a compliance policy), the values
/// and mesh configuration changed through the watched files between
/// cases; a marker annotation in the injector's configuration tells when
/// the server has taken each change.
#[test]
fn istios_cases_with_settings_through_the_https_webhook() {
    let cases = settings_cases();
    let env_of = |sets: &[Set]| {
        let (_, _, env) = settings(sets);
        (env.native_sidecars, env.compliance_policy)
    };
    // (native sidecars, compliance policy) → the cases run with them.
    type Environment = (Option<bool>, String);
    let mut groups: Vec<(Environment, Vec<&Case>)> = Vec::new();
    for c in &cases {
        let key = env_of(&c.2);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(c),
            None => groups.push((key, vec![c])),
        }
    }
    assert!(groups.len() >= 3, "cases in several environments");
    let mut failures = Vec::new();
    let mut checked = 0;
    for ((native, compliance), group) in groups {
        let dir = tempfile::tempdir().unwrap();
        let inject_dir = dir.path().join("inject");
        std::fs::create_dir(&inject_dir).unwrap();
        let mesh_file = dir.path().join("mesh");
        let write = |marker: usize, sets: &[Set]| {
            let (values, mesh, _) = settings(sets);
            let config = config(&[])
                .replace("injectedAnnotations: {}", &format!("injectedAnnotations:\n  test/case: \"{marker}\""));
            // The configuration, with the marker, is written last.
            std::fs::write(&mesh_file, mesh).unwrap();
            std::fs::write(inject_dir.join("values"), values.to_string()).unwrap();
            std::fs::write(inject_dir.join("config"), config).unwrap();
        };
        write(0, &[]);
        let ca = dir.path().join("ca");
        let https = server::free_port();
        let mut env =
            vec![("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca.to_str().unwrap().to_owned()), ("REVISION", "default".to_owned())];
        // istiod's test cluster runs kubelet 1.33 and 1.34: native
        // sidecars unless the case turns them off.
        let native = if native == Some(false) { "false" } else { "true" };
        env.push(("ENABLE_NATIVE_SIDECARS", native.to_owned()));
        if !compliance.is_empty() {
            env.push(("COMPLIANCE_POLICY", compliance.clone()));
        }
        let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let _s = server::Server::start(
            Path::new(server::BOOKINFO),
            &[
                "--httpsAddr",
                &https.to_string(),
                "--injectionDir",
                inject_dir.to_str().unwrap(),
                "--meshConfig",
                mesh_file.to_str().unwrap(),
            ],
            &env_refs,
            None,
        );
        let root = ca.join("ca-cert.pem");
        server::wait_for("the webhook port", std::time::Duration::from_secs(10), || {
            std::net::TcpStream::connect(https).is_ok()
        });
        let probe = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "a"}]}});
        let marker = || -> Option<String> {
            let got = injected(https, &root, "/inject", "default", &probe)?;
            got["metadata"]["annotations"]["test/case"].as_str().map(str::to_owned)
        };
        for (i, (input, want, sets)) in group.into_iter().enumerate() {
            let marker_value = i + 1;
            write(marker_value, sets);
            // Taken when the marker shows: the configuration (written last)
            // was read after the values and the mesh were.
            server::wait_for("the case's settings", std::time::Duration::from_secs(15), || {
                marker().as_deref() == Some(marker_value.to_string().as_str())
            });
            let ins = documents(&data("inject").join(input));
            let wants = documents(&data("inject").join(want));
            for (doc, w) in ins.iter().zip(&wants) {
                let (Some(pod), Some(want_pod)) = (object_to_pod(doc), object_to_pod(w)) else { continue };
                let ns = doc["metadata"]["namespace"].as_str().unwrap_or_default();
                let (status, answer) =
                    client::post_all(https, &root, "/inject", &[pod_review("c", ns, &pod).to_string().into_bytes()])
                        .remove(0);
                assert_eq!(status, 200, "{want}: {answer}");
                let patch = decoded_patch(&answer);
                let mut got = pod.clone();
                if let Some(ops) = &patch {
                    let p: json_patch::Patch = serde_json::from_value(Value::Array(ops.clone())).unwrap();
                    json_patch::patch(&mut got, &p).unwrap();
                }
                // The marker is ours, not istiod's.
                if let Some(a) = got["metadata"]["annotations"].as_object_mut() {
                    a.remove("test/case");
                }
                checked += 1;
                if let Err(e) = check(want, &got, None, &want_pod) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {checked} pods differ:\n{}", failures.len(), failures.join("\n"));
    assert!(checked >= 40, "every case ran: {checked}");
}
