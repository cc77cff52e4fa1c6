//! Fuzz target: loadgen's lean HTTP/2 client reading arbitrary server
//! bytes (frames, header blocks, gRPC messages streamed field by field),
//! fed in pieces: errors, never a panic, memory bounded.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| istiod_loadgen::lean::fuzz(data));
