//! Fuzz target: see `istiod_xds::fuzzing::grpc`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| istiod_xds::fuzzing::grpc(data));
