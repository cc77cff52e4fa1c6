//! The CA's hot path (issue #12): one `CreateCertificate`'s work on a
//! serving core, without the transport: parse the CSR's PEM, verify its
//! signature, check its key and SANs, and sign a leaf (ECDSA P-256 under a
//! self-signed P-256 root), returning istiod's chain. Target: at least
//! 5,000 certificates a second on one core, i.e. under 200 µs each.

mod support;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use istiod_pki::{Ca, Settings};
use support::ca::{ID, csrs};

fn sign(c: &mut Criterion) {
    let ca = Ca::generate(Settings::default()).unwrap();
    let pool = csrs(64);
    let ids = [ID.to_owned()];
    let mut g = c.benchmark_group("ca");
    g.throughput(Throughput::Elements(1));
    let mut i = 0;
    g.bench_function("verify_and_sign_ecdsa_p256", |b| {
        b.iter(|| {
            i = (i + 1) % pool.len();
            let chain = ca.sign(pool[i].as_bytes(), &ids, 3600).unwrap();
            assert_eq!(chain.len(), 2);
            chain
        })
    });
    g.finish();
}

criterion_group!(benches, sign);
criterion_main!(benches);
