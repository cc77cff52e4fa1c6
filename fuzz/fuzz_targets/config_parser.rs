//! Fuzz target: the --configDir parser (multi-document YAML/JSON into typed
//! objects) on arbitrary text: errors, never panics.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let parsed = istiod_kubewatch::config_dir::parse_file(text);
        // A syntax error ends the file: no document is reported after it.
        if let Some((index, _)) = parsed.syntax_error {
            assert_eq!(index, parsed.docs.len());
        }
    }
});
