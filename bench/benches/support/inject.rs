//! What the injection benchmarks share: the chart's injector, one pod's
//! AdmissionReview, and `/inject`'s answer to it.

use std::path::PathBuf;

use istiod_webhook::{admission, inject};
use serde_json::{Value, json};

pub(crate) fn data(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data").join(p)
}

pub(crate) fn injector() -> inject::Injector {
    let template = std::fs::read_to_string(data("istio-chart/injection-template.yaml")).unwrap();
    let config = serde_yaml_ng::to_string(&json!({
        "defaultTemplates": ["sidecar"], "policy": "enabled", "templates": {"sidecar": template},
    }))
    .unwrap();
    let values = std::fs::read_to_string(data("inject/values.json")).unwrap();
    let mesh =
        inject::MeshInputs::parse("defaultConfig:\n  discoveryAddress: istiod.istio-system.svc:15012\n").unwrap();
    let env = inject::Env { revision: String::new(), native_sidecars: Some(true), compliance_policy: String::new() };
    inject::Injector::new(&config, &values, mesh, env).unwrap()
}

/// The pod a ReplicaSet of the `hello` Deployment creates.
pub(crate) fn review() -> Vec<u8> {
    let text = std::fs::read_to_string(data("inject/hello.yaml")).unwrap();
    let deployment: Value = serde_yaml_ng::from_str(&text).unwrap();
    let mut pod =
        json!({"metadata": deployment["spec"]["template"]["metadata"], "spec": deployment["spec"]["template"]["spec"]});
    pod["metadata"]["generateName"] = json!("hello-7d9c5b8f4-");
    pod["metadata"]["labels"]["pod-template-hash"] = json!("7d9c5b8f4");
    pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "hello-7d9c5b8f4", "controller": true, "uid": "u"}]);
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "b", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default", "operation": "CREATE", "object": pod},
    }))
    .unwrap()
}

pub(crate) fn answer(inj: &inject::Injector, body: &[u8]) -> Vec<u8> {
    admission::serve(body, |r| match inject::inject(inj, &Default::default(), &r.object, &r.namespace, "/inject") {
        Ok(inject::Outcome::Patched(ops)) => admission::AdmissionResponse {
            patch: Some(serde_json::to_vec(&ops).unwrap()),
            ..admission::AdmissionResponse::allow()
        },
        other => panic!("not injected: {other:?}"),
    })
}
