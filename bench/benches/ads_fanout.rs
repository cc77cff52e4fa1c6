//! One endpoint change, from publish on the watcher side to the ACK of
//! every one of 1,000 connected SotW proxies (real loopback connections,
//! `h2` crate clients), on one serving core.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use istiod_bench::fanout;
use istiod_proto::envoy::config::cluster::v3::Cluster;
use istiod_proto::envoy::config::endpoint::v3::{ClusterLoadAssignment, LocalityLbEndpoints};
use istiod_proto::prost::Message;
use istiod_xds::ads::{self, AdsFactory, Kind, SimpleGenerator, SimpleModel, Snapshot};
use istiod_xds::grpc::GrpcLimits;
use istiod_xds::h2::Limits;
use istiod_xds::server::{self, ListenerConfig, ServerConfig};

const PROXIES: usize = 1000;
const EDS: &str = "outbound|9080||reviews.default.svc.cluster.local";

fn cla(weight: u32) -> Bytes {
    ClusterLoadAssignment {
        cluster_name: EDS.into(),
        endpoints: vec![LocalityLbEndpoints { load_balancing_weight: Some(weight), ..Default::default() }],
        ..Default::default()
    }
    .encode_to_vec()
    .into()
}

fn fanout(c: &mut Criterion) {
    let (publisher, receivers) = ads::channels(1);
    // istiod's automatic PILOT_PUSH_THROTTLE on two cores: a change goes
    // out in 40 batches, with the core's I/O polled between them.
    let factory =
        AdsFactory::new(Arc::new(SimpleGenerator), receivers, Arc::new(Snapshot::empty(Instant::now())), "bench")
            .push_throttle(25);
    let cfg = ServerConfig {
        cores: 1,
        pin: false,
        listeners: vec![ListenerConfig { addr: "127.0.0.1:0".parse().unwrap(), tls: None }],
        limits: Limits::default(),
        grpc: GrpcLimits::default(),
        shutdown: std::time::Duration::from_secs(10),
        handoff: None,
        ring_depth: istiod_xds::server::RING_DEPTH,
    };
    let server = server::start(cfg, factory).unwrap();
    let mut version = 1;
    let cluster = Bytes::from(Cluster { name: EDS.into(), ..Default::default() }.encode_to_vec());
    let (mut model, delta) = SimpleModel::default()
        .apply(version, vec![(Kind::Cluster, EDS.into(), Some(cluster)), (Kind::Endpoint, EDS.into(), Some(cla(0)))]);
    publisher.publish(Arc::new(Snapshot::new(version, Instant::now(), Arc::new(model.clone()))), delta);
    let clients = fanout::start(server.addrs()[0], PROXIES, EDS);
    let deadline = Instant::now() + Duration::from_secs(60);
    while clients.synced.load(Ordering::SeqCst) < PROXIES {
        assert!(Instant::now() < deadline, "only {} proxies synced", clients.synced.load(Ordering::SeqCst));
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut g = c.benchmark_group("ads_fanout");
    g.sample_size(30);
    g.bench_function("one_endpoint_change_acked_by_1000_proxies", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                version += 1;
                let (m, delta) = model.apply(version, vec![(Kind::Endpoint, EDS.into(), Some(cla(version as u32)))]);
                model = m;
                let start = Instant::now();
                publisher.publish(Arc::new(Snapshot::new(version, start, Arc::new(model.clone()))), delta);
                while clients.acked.iter().any(|a| a.load(Ordering::SeqCst) < version) {
                    std::hint::spin_loop();
                    std::thread::yield_now();
                }
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, fanout);
criterion_main!(benches);
