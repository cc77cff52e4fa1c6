//! Sidecar injection's cost (issue #13): one AdmissionReview of a typical
//! Deployment's pod (Istio's `hello.yaml` test case: one container, one
//! port) answered as `/inject` answers it, without TLS and HTTP: decode
//! the review, render the chart's sidecar template, merge, post-process,
//! diff, encode the answer. Target: p99 under 5 ms on one core.
//!
//! Criterion reports the median; a second pass of 2,000 injections
//! records each in an HDR histogram and prints p50/p99/max.

mod support;

use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use support::inject::{answer, injector, review};

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
