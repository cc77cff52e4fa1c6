//! Fuzz target: see `istiod_xds::fuzzing::connection`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| istiod_xds::fuzzing::connection(data));
