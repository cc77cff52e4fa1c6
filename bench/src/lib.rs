//! Criterion benchmarks of the hot paths (response assembly from the
//! per-core cache and from scratch, snapshot builds, HTTP/2 framing of a
//! push, HPACK) and the scenario files in `bench/testdata/` that `loadgen`
//! plays. Benchmarks are explicit `[[bench]]` targets; none exist yet
//! (issue #7), so this crate only reserves its place in the workspace.
#![forbid(unsafe_code)]
