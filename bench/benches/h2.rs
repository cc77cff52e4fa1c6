//! The HTTP/2 layer without I/O: frame decoding and encoding, HPACK, and
//! pushing pre-encoded messages through the connection state machine.

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use istiod_bench::sansio::{self, Sink};
use istiod_xds::grpc::GrpcConnection;
use istiod_xds::h2::frame::{self, Frame, Head, encode};
use istiod_xds::h2::{Limits, hpack};

fn mixed_frames() -> Vec<u8> {
    let mut out = Vec::new();
    let block = request_block();
    for i in 0..1000u32 {
        let s = 1 + 2 * (i % 50);
        match i % 4 {
            0 => encode::headers(&mut out, s, &block, false, 16384),
            1 => {
                encode::data_head(&mut out, s, 1024, false);
                out.extend_from_slice(&[1u8; 1024]);
            }
            2 => encode::window_update(&mut out, s, 65535),
            _ => encode::ping(&mut out, false, [0; 8]),
        }
    }
    out
}

fn request_block() -> Bytes {
    sansio::request_block("DeltaAggregatedResources")
}

fn frames(c: &mut Criterion) {
    let buf = Bytes::from(mixed_frames());
    let mut g = c.benchmark_group("frames");
    g.throughput(Throughput::Bytes(buf.len() as u64));
    g.bench_function("decode_1000_mixed", |b| {
        b.iter(|| {
            let mut rest = buf.clone();
            let mut n = 0;
            while rest.len() >= 9 {
                let head = Head::parse(rest[..9].try_into().unwrap());
                let _ = rest.split_to(9);
                let payload = rest.split_to(head.len as usize);
                if Frame::decode(head, payload).is_ok() {
                    n += 1;
                }
            }
            black_box(n)
        })
    });
    g.bench_function("encode_1000_mixed", |b| b.iter(|| black_box(mixed_frames().len())));
    g.finish();
}

fn hpack_decode(c: &mut Criterion) {
    let block = request_block();
    c.bench_function("hpack/decode_grpc_request", |b| {
        let mut d = hpack::Decoder::default();
        b.iter(|| black_box(d.decode(&block, 65536).unwrap().1))
    });
}

/// A connection with one open call and wide-open client windows.
fn open_connection() -> GrpcConnection {
    sansio::open_connection(Limits { max_queued_bytes: 64 << 20, ..Limits::default() }, frame::MAX_WINDOW, 1 << 20)
}

fn push(c: &mut Criterion) {
    let mut g = c.benchmark_group("push");
    for size in [2 * 1024, 1 << 20] {
        let msg = Bytes::from(vec![3u8; size]);
        g.throughput(Throughput::Bytes(size as u64));
        // The client returns the window credit it used, as a reader does.
        let mut credit = Vec::new();
        encode::window_update(&mut credit, 0, size as u32 + 5);
        encode::window_update(&mut credit, 1, size as u32 + 5);
        g.bench_function(format!("message_{size}B"), |b| {
            let mut conn = open_connection();
            let mut out = Vec::with_capacity(size + 4096);
            let now = Instant::now();
            b.iter(|| {
                conn.send(1, msg.clone()).unwrap();
                out.clear();
                conn.poll_transmit(&mut out, usize::MAX, &mut Sink);
                conn.recv(&credit, now, &mut Sink);
                black_box(out.len())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, frames, hpack_decode, push);
criterion_main!(benches);
