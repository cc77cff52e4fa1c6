//! Fuzz target: a what-if question's body (`/debug/whatif`, and
//! `whatif?config=` over `istio.io/debug`) as the server judges it, with a
//! flag byte for a delete and a caller limited to one namespace: judged
//! or refused with a verdict per object, never a panic, never an object
//! of another namespace for a limited caller.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| istiod_webhook::question::fuzz_entry(data));
