//! Fuzz target: the HTTP/1.1 response reader of `pilot-discovery whatif`
//! (status line, headers, a plain or chunked body): an answer or an
//! error, never a panic or an overflow.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| istiod_httpd::response::fuzz_entry(data));
