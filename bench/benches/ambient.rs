//! The ambient index (issue #35) on a 10,000-pod mesh (100 namespaces of
//! 10 services, 10 pods each, on 100 nodes, every pod HBONE, an
//! AuthorizationPolicy per namespace):
//!
//! - `ambient/build/10000_pods`: the whole index from the objects (a
//!   start, a relist);
//! - `ambient/one_pod/10000_pods`: one pod's readiness flips, with the
//!   changed object named, as the control thread applies a watch event
//!   (target: under 1 ms);
//! - `ambient/one_service/10000_pods`: one Service's port changes (its
//!   Service and the ten pods it selects rebuilt).

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use istiod_ambient::{Index, Settings};
use istiod_config::manifest::ObjectRef;
use istiod_config::objects::Objects;

fn mesh() -> Objects {
    let mut y = String::new();
    for n in 0..100 {
        let ns = format!("ns-{n}");
        y += &format!(
            "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: allow, namespace: {ns}}}\n\
             spec: {{selector: {{matchLabels: {{tier: web}}}}, rules: [{{from: [{{source: {{namespaces: [{ns}]}}}}], to: [{{operation: {{ports: ['8080']}}}}]}}]}}\n---\n"
        );
        for s in 0..10 {
            y += &format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: svc-{s}, namespace: {ns}}}\n\
                 spec: {{clusterIP: 10.96.{n}.{s}, selector: {{app: svc-{s}}}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}\n---\n"
            );
            for p in 0..10 {
                let i = n * 100 + s * 10 + p;
                y += &format!(
                    "apiVersion: v1\nkind: Pod\nmetadata: {{name: svc-{s}-{p}, namespace: {ns}, labels: {{app: svc-{s}, tier: web}}, annotations: {{ambient.istio.io/redirection: enabled}}}}\n\
                     spec: {{serviceAccountName: svc-{s}, nodeName: node-{}}}\n\
                     status: {{phase: Running, podIP: 10.{}.{}.{}, conditions: [{{type: Ready, status: 'True'}}]}}\n---\n",
                    i % 100,
                    i / 65536,
                    (i / 256) % 256,
                    i % 256
                );
            }
        }
    }
    let mut o = Objects::default();
    for obj in istiod_config::manifest::parse_file_limited(&y, 20_000).docs.into_iter().filter_map(Result::ok).flatten()
    {
        o.push(obj);
    }
    o
}

fn bench(c: &mut Criterion) {
    let objects = mesh();
    assert_eq!(objects.pods.len(), 10_000);
    let settings = Settings::default();
    let mut g = c.benchmark_group("ambient");
    g.sample_size(10);
    g.bench_function("build/10000_pods", |b| {
        b.iter(|| {
            let mut index = Index::new();
            index.apply(&objects, None, &settings).len()
        })
    });
    let mut index = Index::new();
    index.apply(&objects, None, &settings);
    // One pod flips readiness each iteration (alternately), so every
    // iteration is a real change of one workload.
    let mut flipped = objects.clone();
    let at = flipped.pods.iter().position(|p| p.metadata.name == "svc-5-5" && p.metadata.ns() == "ns-50").unwrap();
    let pod = [ObjectRef { kind: "Pod".into(), namespace: "ns-50".into(), name: "svc-5-5".into(), service: None }];
    let mut ready = true;
    g.sample_size(100);
    g.bench_function("one_pod/10000_pods", |b| {
        b.iter_batched(
            || {
                ready = !ready;
                flipped.pods[at].status.conditions[0].status = if ready { "True" } else { "False" }.into();
                flipped.clone()
            },
            |o| {
                let changes = index.apply(&o, Some(&pod), &settings);
                assert_eq!(changes.len(), 1);
                o
            },
            BatchSize::LargeInput,
        )
    });
    let svc = [ObjectRef { kind: "Service".into(), namespace: "ns-50".into(), name: "svc-5".into(), service: None }];
    let s_at = flipped.services.iter().position(|s| s.metadata.name == "svc-5" && s.metadata.ns() == "ns-50").unwrap();
    let mut port = 80;
    g.bench_function("one_service/10000_pods", |b| {
        b.iter_batched(
            || {
                port = if port == 80 { 81 } else { 80 };
                flipped.services[s_at].spec.ports[0].port = port;
                flipped.clone()
            },
            |o| {
                let changes = index.apply(&o, Some(&svc), &settings);
                assert_eq!(changes.len(), 11, "the service and its ten pods");
                o
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
