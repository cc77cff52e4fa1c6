//! Sidecar injection's cost (issue #13): one AdmissionReview of a typical
//! Deployment's pod (Istio's `hello.yaml` test case: one container, one
//! port) answered as `/inject` answers it, without TLS and HTTP: decode
//! the review, render the chart's sidecar template, merge, post-process,
//! diff, encode the answer. Target: p99 under 5 ms on one core.
//!
//! Criterion reports the median; a second pass of 2,000 injections
//! records each in an HDR histogram and prints p50/p99/max.

use std::path::PathBuf;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use istiod_webhook::{admission, inject};
use serde_json::{Value, json};

fn data(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data").join(p)
}

fn injector() -> inject::Injector {
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
fn review() -> Vec<u8> {
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

fn answer(inj: &inject::Injector, body: &[u8]) -> Vec<u8> {
    admission::serve(body, |r| match inject::inject(inj, &Default::default(), &r.object, &r.namespace, "/inject") {
        Ok(inject::Outcome::Patched(ops)) => admission::AdmissionResponse {
            patch: Some(serde_json::to_vec(&ops).unwrap()),
            ..admission::AdmissionResponse::allow()
        },
        other => panic!("not injected: {other:?}"),
    })
}

fn bench(c: &mut Criterion) {
    let inj = injector();
    let body = review();
    let out = answer(&inj, &body);
    assert!(out.len() > 1000, "a patch is returned");
    c.bench_function("inject/hello_deployment_pod", |b| b.iter(|| answer(&inj, &body)));
    // The percentiles only in a benchmark run (`cargo bench` passes
    // --bench), not when a test runner lists or smoke-runs the target.
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--list") {
        return;
    }

    let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    for _ in 0..2_000 {
        let t = Instant::now();
        std::hint::black_box(answer(&inj, &body));
        h.record(t.elapsed().as_micros() as u64).unwrap();
    }
    #[allow(clippy::print_stdout)]
    {
        println!(
            "inject/hello_deployment_pod: {} injections, p50 {} µs, p99 {} µs, max {} µs (target p99 < 5000 µs)",
            h.len(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.max()
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
