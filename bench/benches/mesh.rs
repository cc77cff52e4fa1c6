//! The control plane's hot paths on the `istio-perf` mesh (1,000 services,
//! 2,000 sidecars, every namespace isolated) and `large` (10,000 pods):
//!
//! - `snapshot/build+diff/*`: objects -> model -> shared resources ->
//!   per-class inputs -> diff against the previous build (what the control
//!   thread does for every change, before the debounced publish), on as
//!   many threads as the server would use (the machine's, at most four);
//!   `snapshot/build+diff/large/one_thread` the same on one;
//! - `assemble/*`: a sidecar's CDS/EDS/LDS/RDS state-of-the-world response,
//!   from a warm per-core cache and from scratch (empty cache);
//! - `core/one_endpoint_change_1000_streams`: a serving core applying a
//!   snapshot delta (one endpoint changed) to 1,000 SotW streams of
//!   distinct proxies and building the pushes.
//!
//! `+100ef` runs the same on the mesh with 100 EnvoyFilters (10 in the
//! root namespace for every proxy, 90 each selecting one workload):
//! what patching costs where it applies (issue #34's target: under 25%
//! more for the full build, the endpoint change unchanged).

mod support;

use std::sync::Arc;
use std::time::Instant;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use istiod_mesh::generator::MeshGenerator;
use istiod_mesh::meshconfig::MeshSettings;
use istiod_mesh::update;
use istiod_xds::ads::Kind;
use istiod_xds::ads::cache::Cache;
use support::mesh::*;

fn build(c: &mut Criterion) {
    let settings = Arc::new(MeshSettings::default());
    let mut g = c.benchmark_group("snapshot");
    g.sample_size(10);
    // Each scenario on as many threads as the server would use (0: the
    // machine's, at most four); `large` also on one. Set up only when a
    // benchmark of the scenario runs (not when filtered out), once.
    let mut setups = std::collections::HashMap::new();
    for (scenario, threads) in [("istio-perf", 0), ("istio-perf+100ef", 0), ("large", 0), ("large", 1)] {
        let id = match threads {
            1 => format!("build+diff/{scenario}/one_thread"),
            _ => format!("build+diff/{scenario}"),
        };
        g.bench_function(id, |b| {
            let (objs, prev) = setups.entry(scenario).or_insert_with(|| {
                let objs = objects(scenario);
                let prev = update::build(&objs, "cluster.local", &settings);
                (objs, prev)
            });
            istiod_mesh::model::set_rebuild_threads(threads);
            // (The mesh built is freed outside the timing: the server frees
            // the one a change replaced on a thread of its own.)
            b.iter_with_large_drop(|| {
                let next = update::build(objs, "cluster.local", &settings);
                let n =
                    istiod_mesh::translate::diff_maps(&prev.translation.resources, &next.translation.resources).len();
                (next, n)
            });
            istiod_mesh::model::set_rebuild_threads(0);
        });
    }
    g.finish();
}

fn assemble(c: &mut Criterion) {
    let mut g = c.benchmark_group("assemble");
    for scenario in ["istio-perf", "istio-perf+100ef"] {
        let setup = std::cell::OnceCell::new();
        let shared = || setup.get_or_init(|| std::cell::RefCell::new(assemble_setup(scenario)));
        // The istio-perf names keep their labels; the others say theirs.
        let suffix = scenario.strip_prefix("istio-perf").unwrap_or(scenario);
        for kind in Kind::ALL {
            let label = match kind {
                Kind::Cluster => "cds",
                Kind::Endpoint => "eds",
                Kind::Listener => "lds",
                Kind::Route => "rds",
                // A sidecar mesh has none; ztunnels' kinds are
                // bench/benches/ambient.rs's.
                Kind::Secret
                | Kind::ExtensionConfig
                | Kind::Address
                | Kind::Authorization
                | Kind::NameTable
                | Kind::ProxyConfig => {
                    continue;
                }
            };
            g.bench_function(format!("{label}/cached{suffix}"), |b| {
                let mut a = shared().borrow_mut();
                let a = &mut *a;
                let names = &a.names[kind as usize];
                b.iter(|| response(&mut a.warm, &a.snap, &a.class, kind, names).len());
            });
            g.bench_function(format!("{label}/scratch{suffix}"), |b| {
                let a = shared().borrow();
                b.iter_batched(
                    Cache::default,
                    |mut cold| {
                        let names: Vec<Arc<str>> = if kind.is_wildcard() {
                            cold.wildcard_names(&MeshGenerator, &a.snap, &a.class, kind).to_vec()
                        } else {
                            a.names[kind as usize].clone()
                        };
                        response(&mut cold, &a.snap, &a.class, kind, &names).len()
                    },
                    BatchSize::SmallInput,
                );
            });
        }
    }
    g.finish();
}

fn core_delta(c: &mut Criterion) {
    let mut setup = None;
    let mut g = c.benchmark_group("core");
    g.bench_function("one_endpoint_change_1000_streams", |b| {
        let core = setup.get_or_insert_with(core_setup);
        let now = Instant::now();
        let mut seq = 0u64;
        let mut nonce = move || -> Arc<str> {
            seq += 1;
            seq.to_string().into()
        };
        b.iter(|| core.push_one_change(now, &mut nonce));
    });
    g.finish();
}

fn change(c: &mut Criterion) {
    let mut g = c.benchmark_group("change");
    g.sample_size(20);
    for scenario in ["istio-perf", "istio-perf+100ef", "large"] {
        let mut setup = None;
        g.bench_function(format!("one_endpoint/{scenario}"), |b| {
            let st = setup.get_or_insert_with(|| Change::new(scenario, drop_endpoint));
            b.iter(|| {
                let (n, incremental) = st.step();
                assert!(incremental && n > 0, "an incremental update that changes something");
                n
            });
        });
        let mut setup = None;
        g.bench_function(format!("one_virtual_service/{scenario}"), |b| {
            let st = setup.get_or_insert_with(|| Change::new(scenario, shift_weight));
            b.iter(|| {
                let (n, incremental) = st.step();
                assert!(incremental && n > 0, "an incremental update that changes something");
                n
            });
        });
        // A Helm install and uninstall of one app, by turns: Services,
        // Pods, EndpointSlices, DestinationRules and VirtualServices at once.
        let mut setup = None;
        g.bench_function(format!("install_app/{scenario}"), |b| {
            let st = setup.get_or_insert_with(|| Change::of_many(scenario, install_app));
            b.iter(|| {
                let (n, incremental) = st.step();
                assert!(incremental && n > 0, "an incremental update that changes something");
                n
            });
        });
        let mut setup = None;
        g.bench_function(format!("one_service_address/{scenario}"), |b| {
            let st = setup.get_or_insert_with(|| Change::new(scenario, readdress_service));
            b.iter(|| {
                let (n, incremental) = st.step();
                assert!(incremental && n > 0, "an incremental update that changes something");
                n
            });
        });
    }
    g.finish();
}

criterion_group!(benches, build, change, assemble, core_delta);
criterion_main!(benches);
