//! Fuzz target: see `istiod_xds::fuzzing::hpack_decoder`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| istiod_xds::fuzzing::hpack_decoder(data));
