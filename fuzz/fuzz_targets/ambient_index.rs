//! Fuzz target: arbitrary YAML manifests into the ambient index, built
//! whole and built incrementally (`istiod_ambient::fuzz_one`): the same
//! resources either way, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        istiod_ambient::fuzz_one(text);
    }
});
