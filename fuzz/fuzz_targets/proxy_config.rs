//! Fuzz target: the `proxy.istio.io/config` annotation's check (YAML 1.1
//! as go-yaml reads it, legacy jsonpb onto istiod's defaults, then
//! `ValidateMeshConfigProxyConfig`) on arbitrary text: an answer, never a
//! panic, and nesting too deep for a linear scan is refused before the
//! YAML scanner runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let checked = istiod_webhook::proxy_config::validate(text);
        if istiod_config::yaml::check_depth(text).is_err() {
            assert!(checked.is_err(), "too deep is refused");
        }
    }
});
