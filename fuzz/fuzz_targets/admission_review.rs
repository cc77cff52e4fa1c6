//! Fuzz target: the validation webhook's body path (AdmissionReview JSON in,
//! the validators on the object, an AdmissionReview out) on arbitrary
//! bytes: an answer that is JSON with a response, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut metrics = istiod_webhook::validate::Metrics::default();
    let out = istiod_webhook::admission::serve(data, |r| istiod_webhook::validate::validate(r, &mut metrics));
    let v: serde_json::Value = serde_json::from_slice(&out).expect("the answer is JSON");
    assert!(v["response"]["allowed"].is_boolean());
});
