//! A serving core's push without sockets (issue #15):
//!
//! - `push_copies/*`: body bytes copied per push per connection, measured
//!   by the HTTP/2 layer's own copy counter (`h2::out::copied_bytes`), as a
//!   criterion measurement: one push of a shared pre-encoded response
//!   queued on a connection and framed for its socket. `segments` is what
//!   the server writes (pieces referenced, one `sendmsg` per batch);
//!   `contiguous` copies every piece into one buffer, as the server did
//!   before.
//! - `push/one_change_10000_streams`: one endpoint change applied by a core
//!   to 10,000 SotW streams that watch it, each response queued on the
//!   stream's own HTTP/2 connection, framed, taken by the "socket" (the
//!   pieces are released) and the window credit returned by the client.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use istiod_bench::sansio::{self, Sink};
use istiod_proto::envoy::config::cluster::v3::Cluster;
use istiod_proto::envoy::config::core::v3::{Address, Node, SocketAddress, address, socket_address};
use istiod_proto::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use istiod_proto::envoy::service::discovery::v3::DiscoveryRequest;
use istiod_proto::prost::Message;
use istiod_xds::ads::cache::Cache;
use istiod_xds::ads::stream::{AdsStream, Changes, Ctx, Protocol};
use istiod_xds::ads::wire::{self, Encoded};
use istiod_xds::ads::{Kind, SimpleGenerator, SimpleModel, Snapshot};
use istiod_xds::grpc::GrpcConnection;
use istiod_xds::h2::frame::encode;
use istiod_xds::h2::out::copied_bytes;
use istiod_xds::h2::{Limits, Segments};

const EDS: &str = "outbound|9080||reviews.default.svc.cluster.local";
const STREAMS: usize = 10_000;

/// A load assignment of `n` endpoints (100 make about 5 KB).
fn cla(n: u32, weight: u32) -> Bytes {
    let endpoint = |i: u32| LbEndpoint {
        host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
            address: Some(Address {
                address: Some(address::Address::SocketAddress(SocketAddress {
                    address: format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
                    port_specifier: Some(socket_address::PortSpecifier::PortValue(9080)),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        })),
        load_balancing_weight: Some(weight),
        ..Default::default()
    };
    ClusterLoadAssignment {
        cluster_name: EDS.into(),
        endpoints: vec![LocalityLbEndpoints { lb_endpoints: (0..n).map(endpoint).collect(), ..Default::default() }],
        ..Default::default()
    }
    .encode_to_vec()
    .into()
}

/// A connection with the ADS call open on stream 1, as Envoy opens it.
fn open_connection() -> GrpcConnection {
    sansio::open_connection(Limits::default(), 1 << 20, 16384)
}

/// The client's WINDOW_UPDATEs for `n` bytes received on stream 1.
fn credit(n: usize) -> Vec<u8> {
    let mut b = Vec::new();
    encode::window_update(&mut b, 0, n as u32);
    encode::window_update(&mut b, 1, n as u32);
    b
}

/// Frames what is queued into `out` and lets the socket take all of it.
fn frame_and_write(conn: &mut GrpcConnection, out: &mut Segments) -> usize {
    conn.poll_transmit(out, usize::MAX, &mut Sink);
    let n = out.len();
    out.advance(n);
    n
}

/// Body bytes copied, as a criterion measurement.
struct Copied;

struct BytesFormatter;
impl ValueFormatter for BytesFormatter {
    fn scale_values(&self, _typical: f64, _values: &mut [f64]) -> &'static str {
        "B"
    }
    fn scale_throughputs(&self, _typical: f64, _t: &Throughput, _values: &mut [f64]) -> &'static str {
        "B"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "B"
    }
}

impl Measurement for Copied {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        copied_bytes()
    }
    fn end(&self, start: u64) -> u64 {
        copied_bytes() - start
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        // Never exactly 0: criterion's analysis divides by the spread.
        *v as f64 + 1e-9
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &BytesFormatter
    }
}

/// Responses as a core assembles them: one load assignment, and a CDS
/// response of 150 clusters (a sidecar's), with the resources shared.
fn responses() -> Vec<(&'static str, istiod_xds::grpc::Chain)> {
    let version: Arc<str> = "1".into();
    let eds = Encoded { any: wire::any(Kind::Endpoint.type_url(), &cla(200, 1)), version: version.clone() };
    let clusters: Vec<Encoded> = (0..150)
        .map(|i| {
            let c = Cluster { name: format!("outbound|9080||svc-{i}.ns.svc.cluster.local"), ..Default::default() };
            Encoded { any: wire::any(Kind::Cluster.type_url(), &c.encode_to_vec()), version: version.clone() }
        })
        .collect();
    vec![
        ("eds_1_load_assignment", wire::sotw_response("1", Kind::Endpoint.type_url(), "7", &[&eds], "bench")),
        (
            "cds_150_clusters",
            wire::sotw_response("1", Kind::Cluster.type_url(), "7", &clusters.iter().collect::<Vec<_>>(), "bench"),
        ),
    ]
}

fn copies(c: &mut Criterion<Copied>) {
    let mut g = c.benchmark_group("push_copies");
    for (name, chain) in responses() {
        let len = chain.len();
        for (mode, copy_below) in [("segments", istiod_xds::h2::out::COPY_BELOW), ("contiguous", usize::MAX)] {
            g.bench_function(format!("{name}_{len}B/{mode}"), |b| {
                let mut conn = open_connection();
                let mut out = Segments::new(copy_below);
                let back = credit(len + 5);
                let now = Instant::now();
                b.iter(|| {
                    let msg = istiod_xds::grpc::Chain(chain.0.clone());
                    conn.send_admitted(1, msg).unwrap();
                    let n = frame_and_write(&mut conn, &mut out);
                    conn.recv(&back, now, &mut Sink);
                    black_box(n)
                })
            });
        }
    }
    g.finish();
}

/// A core with 10,000 SotW streams watching one EDS cluster, each on its
/// own connection.
struct Core {
    streams: Vec<(AdsStream, GrpcConnection)>,
    model: SimpleModel,
    cache: Cache,
    version: u64,
    out: Segments,
}

fn core_setup() -> Core {
    let now = Instant::now();
    let (model, _) = SimpleModel::default().apply(1, vec![(Kind::Endpoint, EDS.into(), Some(cla(200, 1)))]);
    let snap = Snapshot::new(1, now, Arc::new(model.clone()));
    let mut cache = Cache::default();
    let mut seq = 0u64;
    let mut nonce = move || -> Arc<str> {
        seq += 1;
        seq.to_string().into()
    };
    let mut identify = |n: Option<&Node>| {
        let c = istiod_xds::ads::Generator::classify(&SimpleGenerator, n, false)?;
        Ok((c.peer, Arc::new(())))
    };
    let mut out = Segments::default();
    let mut streams = Vec::with_capacity(STREAMS);
    for i in 0..STREAMS {
        let mut st = AdsStream::new(Protocol::Sotw, now);
        let req = DiscoveryRequest {
            node: Some(Node {
                id: format!("sidecar~10.0.0.{i}~p{i}.default~default.svc.cluster.local"),
                ..Default::default()
            }),
            type_url: Kind::Endpoint.type_url().into(),
            resource_names: vec![EDS.into()],
            ..Default::default()
        };
        st.on_sotw(req, &mut identify, now).unwrap();
        let mut ctx = Ctx {
            generator: &SimpleGenerator,
            snap: &snap,
            cache: &mut cache,
            nonce: &mut nonce,
            control_plane: "bench",
            now,
        };
        let mut conn = open_connection();
        for o in st.flush(&mut ctx) {
            conn.send_admitted(1, o.bytes).unwrap();
        }
        frame_and_write(&mut conn, &mut out);
        streams.push((st, conn));
    }
    Core { streams, model, cache, version: 1, out }
}

fn core_push(c: &mut Criterion) {
    let mut core = None;
    let mut g = c.benchmark_group("push");
    g.sample_size(10);
    g.bench_function("one_change_10000_streams", |b| {
        let core = core.get_or_insert_with(core_setup);
        let mut seq = 0u64;
        let mut nonce = move || -> Arc<str> {
            seq += 1;
            seq.to_string().into()
        };
        b.iter_batched(
            || {
                core.version += 1;
                let (next, delta) = core
                    .model
                    .apply(core.version, vec![(Kind::Endpoint, EDS.into(), Some(cla(200, core.version as u32)))]);
                core.model = next;
                (Snapshot::new(core.version, Instant::now(), Arc::new(core.model.clone())), delta)
            },
            |(snap, delta)| {
                let now = Instant::now();
                let mut ctx = Ctx {
                    generator: &SimpleGenerator,
                    snap: &snap,
                    cache: &mut core.cache,
                    nonce: &mut nonce,
                    control_plane: "bench",
                    now,
                };
                let mut written = 0;
                let mut pushed = 0;
                let changes = Changes::of(&delta);
                for (st, conn) in &mut core.streams {
                    st.on_delta_update(&changes, now, false);
                    let mut body = 0;
                    for o in st.flush(&mut ctx) {
                        body += 5 + o.bytes.len();
                        conn.send_admitted(1, o.bytes).unwrap();
                        pushed += 1;
                    }
                    written += frame_and_write(conn, &mut core.out);
                    conn.recv(&credit(body), now, &mut Sink);
                }
                assert_eq!(pushed, STREAMS, "every stream gets the change");
                black_box(written)
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group! {
    name = copied;
    config = Criterion::default().with_measurement(Copied);
    targets = copies
}
criterion_group!(push, core_push);
criterion_main!(copied, push);
