//! Fuzz target: see `istiod_xds::fuzzing::frame_decoder`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| istiod_xds::fuzzing::frame_decoder(data));
