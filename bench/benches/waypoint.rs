//! Waypoint proxies' configuration (issue #36) on two ambient namespaces of
//! 200 services each (an HTTP and a TCP port, an ambient pod, a
//! VirtualService; every tenth with a DestinationRule of two subsets),
//! each namespace using its own waypoint:
//!
//! - `waypoint/scratch/200_services`: everything one waypoint is served
//!   (CDS, EDS, LDS) from an empty per-core cache;
//! - `waypoint/vs_change/200_services`: one service's VirtualService
//!   changes: the control thread's update, then both waypoints' resources
//!   through the warm per-core cache (the target: only the waypoint that
//!   serves the service regenerates, and only its `main_internal`; the
//!   bench checks it before it measures);
//! - `waypoint/unchanged/200_services`: the floor of that, a snapshot in
//!   which nothing of theirs changed (every input generation checked,
//!   nothing regenerated).

use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use istiod_config::manifest::ObjectRef;
use istiod_config::objects::Objects;
use istiod_mesh::generator::MeshInput;
use istiod_mesh::meshconfig::MeshSettings;
use istiod_mesh::node::{NodeType, ProxyClass};
use istiod_mesh::update;
use istiod_waypoint::generator::WithWaypoints;
use istiod_xds::ads::cache::Cache;
use istiod_xds::ads::{Generator, Kind, SimpleModel, Snapshot};

const SERVICES: usize = 200;

fn objects(route: &str) -> Objects {
    let mut y = String::new();
    for (n, ns) in ["ns-a", "ns-b"].iter().enumerate() {
        let wp = format!("wp-{n}");
        y += &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{istio.io/dataplane-mode: ambient, istio.io/use-waypoint: {wp}}}}}\n---\n\
             apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {wp}, namespace: {ns}}}\n\
             spec: {{gatewayClassName: istio-waypoint, listeners: [{{name: mesh, port: 15008, protocol: HBONE}}]}}\n\
             status: {{addresses: [{{type: Hostname, value: {wp}.{ns}.svc.cluster.local}}]}}\n---\n"
        );
        for s in 0..SERVICES {
            let ip = format!("10.{}.{}.{}", 100 + n, s / 250, s % 250 + 1);
            y += &format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: svc-{s}, namespace: {ns}}}\n\
                 spec: {{clusterIP: 10.96.{n}.{s}, selector: {{app: svc-{s}}}, ports: [{{name: http, port: 80, targetPort: 8080}}, {{name: tcp, port: 9000}}]}}\n---\n\
                 apiVersion: v1\nkind: Pod\nmetadata: {{name: svc-{s}-0, namespace: {ns}, labels: {{app: svc-{s}, version: v1}}, annotations: {{ambient.istio.io/redirection: enabled}}}}\n\
                 spec: {{serviceAccountName: svc-{s}}}\nstatus: {{phase: Running, podIP: {ip}, conditions: [{{type: Ready, status: 'True'}}]}}\n---\n\
                 apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: svc-{s}-1, namespace: {ns}, labels: {{kubernetes.io/service-name: svc-{s}}}}}\n\
                 addressType: IPv4\nports: [{{name: http, port: 8080}}, {{name: tcp, port: 9000}}]\n\
                 endpoints: [{{addresses: [{ip}], conditions: {{ready: true}}, targetRef: {{kind: Pod, name: svc-{s}-0, namespace: {ns}}}}}]\n---\n\
                 apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: svc-{s}, namespace: {ns}}}\n\
                 spec: {{hosts: [svc-{s}], http: [{{match: [{{uri: {{prefix: /api}}}}], route: [{{destination: {{host: svc-{s}}}}}], timeout: 5s}}, {{route: [{{destination: {{host: svc-{s}}}}}]}}]}}\n---\n"
            );
            if s % 10 == 0 {
                y += &format!(
                    "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: svc-{s}, namespace: {ns}}}\n\
                     spec: {{host: svc-{s}, subsets: [{{name: v1, labels: {{version: v1}}}}, {{name: v2, labels: {{version: v2}}}}]}}\n---\n"
                );
            }
        }
    }
    // The one VirtualService the change edits (ns-a's svc-7).
    y = y.replace(
        "name: svc-7, namespace: ns-a}\nspec: {hosts: [svc-7], http: [{match: [{uri: {prefix: /api}}]",
        &format!(
            "name: svc-7, namespace: ns-a}}\nspec: {{hosts: [svc-7], http: [{{match: [{{uri: {{prefix: {route}}}}}]"
        ),
    );
    let mut o = Objects::default();
    for obj in istiod_config::manifest::parse_file_limited(&y, 20_000).docs.into_iter().filter_map(Result::ok).flatten()
    {
        o.push(obj);
    }
    o
}

/// The mesh as the control thread publishes it: the model, the waypoints'
/// services from the ambient index.
fn built(objects: &Objects, prev: Option<&Arc<MeshInput>>, changed: Option<&[ObjectRef]>) -> Arc<MeshInput> {
    let settings = Arc::new(MeshSettings::default());
    let (mesh, _) = update::update(prev, objects, changed, "cluster.local", &settings, &Arc::default());
    let mut index = istiod_ambient::Index::new();
    index.apply(objects, None, &istiod_ambient::Settings::default());
    let mut with = (*mesh).clone();
    with.waypoints = Arc::new(istiod_waypoint::attachments(&index));
    Arc::new(with)
}

fn snapshot(version: u64, mesh: &Arc<MeshInput>) -> Snapshot<MeshInput> {
    let (model, _) = SimpleModel::default()
        .apply(version, istiod_mesh::translate::diff_maps(&Default::default(), &mesh.translation.resources));
    let mut snap = Snapshot::new(version, std::time::Instant::now(), Arc::new(model));
    snap.mesh = Some(mesh.clone());
    snap
}

fn waypoint(ns: &str, name: &str) -> Arc<ProxyClass> {
    Arc::new(ProxyClass {
        node_type: NodeType::Waypoint,
        namespace: ns.into(),
        generator: "".into(),
        labels: vec![("gateway.networking.k8s.io/gateway-name".into(), name.into())],
        locality: "".into(),
        verified: false,
        service_account: "".into(),
        ips: Vec::new(),
        mesh_id: "".into(),
        cluster_id: "".into(),
        version: "".into(),
        metadata: Vec::new(),
    })
}

/// Everything `class` is served, through `cache`: (resources, bytes).
fn serve(cache: &mut Cache<ProxyClass>, snap: &Snapshot<MeshInput>, class: &Arc<ProxyClass>) -> (usize, usize) {
    let (mut n, mut bytes) = (0, 0);
    for kind in [Kind::Cluster, Kind::Endpoint, Kind::Listener] {
        let names = cache.wildcard_names(&WithWaypoints, snap, class, kind).to_vec();
        for name in &names {
            if let Some(e) = cache.get(&WithWaypoints, snap, class, kind, name) {
                n += 1;
                bytes += e.any.len();
            }
        }
    }
    (n, bytes)
}

/// The names whose input generation differs between two snapshots.
fn changed(before: &Snapshot<MeshInput>, after: &Snapshot<MeshInput>, class: &ProxyClass) -> Vec<String> {
    let mut out = Vec::new();
    for kind in [Kind::Cluster, Kind::Endpoint, Kind::Listener] {
        for name in WithWaypoints.wildcard_names(after, class, kind) {
            if WithWaypoints.input_generation(before, class, kind, &name)
                != WithWaypoints.input_generation(after, class, kind, &name)
            {
                out.push(format!("{kind:?} {name}"));
            }
        }
    }
    out
}

#[allow(clippy::print_stderr)] // what the change regenerated, beside the timings
fn bench(c: &mut Criterion) {
    let (a, b) = (waypoint("ns-a", "wp-0"), waypoint("ns-b", "wp-1"));
    let objs = objects("/api");
    let before = built(&objs, None, None);
    assert_eq!(before.waypoints.get("ns-a/wp-0").map(Vec::len), Some(SERVICES), "{:?}", before.waypoints.keys());
    let snap = snapshot(1, &before);
    let mut g = c.benchmark_group("waypoint");
    g.sample_size(10);
    g.bench_function("scratch/200_services", |bch| {
        bch.iter_batched(Cache::default, |mut cold| serve(&mut cold, &snap, &a), BatchSize::SmallInput)
    });
    let (n, bytes) = serve(&mut Cache::default(), &snap, &a);
    eprintln!("waypoint/scratch/200_services: {n} resources, {bytes} bytes");

    // One VirtualService edited (and back): update, then both waypoints
    // through the warm cache.
    let edited = objects("/api/v2");
    let vs =
        [ObjectRef { kind: "VirtualService".into(), namespace: "ns-a".into(), name: "svc-7".into(), service: None }];
    let after = built(&edited, Some(&before), Some(&vs));
    let snap_after = snapshot(2, &after);
    let (ca, cb) = (changed(&snap, &snap_after, &a), changed(&snap, &snap_after, &b));
    eprintln!("waypoint/vs_change/200_services: regenerated for the serving waypoint {ca:?}, for the other {cb:?}");
    assert_eq!(ca, ["Listener main_internal"], "only the serving waypoint's main_internal");
    assert!(cb.is_empty(), "{cb:?}");
    let mut warm = Cache::default();
    serve(&mut warm, &snap, &a);
    serve(&mut warm, &snap, &b);
    let snaps = [snapshot(3, &after), snapshot(4, &before)];
    let mut flip = 0;
    g.sample_size(50);
    g.bench_function("vs_change/200_services", |bch| {
        bch.iter(|| {
            flip ^= 1;
            let (objs, prev, refs) = if flip == 1 { (&edited, &before, &vs) } else { (&objs, &after, &vs) };
            // The control thread's update (the ambient index, incremental
            // there, binds the same services: its attachments kept).
            let settings = Arc::new(MeshSettings::default());
            let (next, _) = update::update(Some(prev), objs, Some(refs), "cluster.local", &settings, &Arc::default());
            assert!(Arc::ptr_eq(&next.waypoints, &prev.waypoints));
            let misses = warm.misses;
            let s = &snaps[1 - flip];
            serve(&mut warm, s, &a);
            serve(&mut warm, s, &b);
            (next.waypoints.len(), warm.misses - misses)
        })
    });
    // The floor: a new snapshot in which nothing of theirs changed (every
    // input generation checked, nothing regenerated).
    let same = [snapshot(5, &before), snapshot(6, &before)];
    let mut turn = 0;
    g.bench_function("unchanged/200_services", |bch| {
        bch.iter(|| {
            turn ^= 1;
            let misses = warm.misses;
            serve(&mut warm, &same[turn], &a);
            serve(&mut warm, &same[turn], &b);
            warm.misses - misses
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
