//! What-if (issue #41) on the `large` mesh (10,000 pods, 1,000 services,
//! 2,000 classes of sidecar): `whatif/one_virtual_service/large` answers
//! a question about one VirtualService's weights, as `/debug/whatif` does
//! off the control thread: the model updated on a copy, every class
//! compared, the analysis run, the answer (first page, with diffs)
//! rendered. Target: under 200 ms.

mod support;

use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use istiod::discovery::whatif::{Page, World, judge, predict};
use istiod_mesh::meshconfig::MeshSettings;
use istiod_mesh::update;
use istiod_xds::ads::{SimpleModel, Snapshot};

/// `svc-0`'s 90/10 split made 80/20.
const QUESTION: &str = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: svc-0, namespace: ns-0}
spec:
  hosts: [svc-0]
  http:
  - route:
    - {destination: {host: svc-0, subset: v1}, weight: 80}
    - {destination: {host: svc-0, subset: v2}, weight: 20}
";

fn whatif(c: &mut Criterion) {
    let mut g = c.benchmark_group("whatif");
    g.sample_size(10);
    let mut world = None;
    g.bench_function("one_virtual_service/large", |b| {
        let world = world.get_or_insert_with(|| {
            let objects = support::mesh::objects("large");
            let mesh = update::build(&objects, "cluster.local", &Arc::new(MeshSettings::default()));
            let shared = mesh.translation.resources.iter().map(|((k, n), body)| (*k, n.clone(), Some(body.clone())));
            let (model, _) = SimpleModel::default().apply(1, shared.collect());
            let mut snap = Snapshot::new(1, Instant::now(), Arc::new(model));
            snap.mesh = Some(mesh);
            World {
                objects: Arc::new(objects),
                snapshot: Arc::new(snap),
                domain: "cluster.local".into(),
                cluster_id: "Kubernetes".into(),
                connected: Vec::new(),
                namespace: None,
                namespace_filter: false,
                ambient: None,
            }
        });
        let asked = judge(QUESTION, false, None).expect("a valid question");
        let page = Page { size: 50, index: 0, diffs: true };
        // It measures something: the weights change somewhere.
        let answer = predict(world, &asked, page);
        assert!(answer["summary"]["classesReached"].as_u64().unwrap_or(0) > 0, "{}", answer["summary"]);
        b.iter(|| predict(world, &asked, page));
    });
    g.finish();
}

criterion_group!(benches, whatif);
criterion_main!(benches);
