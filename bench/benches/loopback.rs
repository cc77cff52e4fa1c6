//! A stream of 10,000 small messages (100 bytes) echoed over loopback:
//! the glommio server against the `h2` crate's server on tokio, both
//! driven by the same `h2` client.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use istiod_bench::{client_round, start_glommio, start_h2_baseline};

const N: usize = 10_000;
const SIZE: usize = 100;

fn loopback(c: &mut Criterion) {
    let glommio = start_glommio();
    let glommio_addr = glommio.addrs()[0];
    let baseline_addr = start_h2_baseline();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut g = c.benchmark_group("loopback_10k_echo");
    g.sample_size(20);
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("glommio_istiod_rs", |b| {
        b.iter(|| assert_eq!(rt.block_on(client_round(glommio_addr, N, SIZE)), N * SIZE))
    });
    g.bench_function("tokio_h2_baseline", |b| {
        b.iter(|| assert_eq!(rt.block_on(client_round(baseline_addr, N, SIZE)), N * SIZE))
    });
    g.finish();
    glommio.shutdown();
}

criterion_group!(benches, loopback);
criterion_main!(benches);
