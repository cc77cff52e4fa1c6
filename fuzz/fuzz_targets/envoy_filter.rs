//! Fuzz target: an EnvoyFilter spec (arbitrary JSON) applied in every
//! context to a cluster, a listener with an HTTP connection manager and a
//! route configuration (`istiod_envoyfilter::fuzzing::run`): an answer,
//! never a panic, and output bounded by the input and the patch values.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(spec) = serde_json::from_slice::<serde_json::Value>(data) {
        istiod_envoyfilter::fuzzing::run(&spec);
    }
});
