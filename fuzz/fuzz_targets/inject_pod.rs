//! Fuzz target: the injection webhook's body path (AdmissionReview JSON in,
//! the chart's sidecar template rendered over the pod, merged,
//! post-processed and diffed, an AdmissionReview out) on arbitrary bytes:
//! an answer that is JSON with a response, and a patch that is a JSON
//! list, never a panic.
#![no_main]

use istiod_webhook::{admission, inject};

thread_local! {
    static INJECTOR: inject::Injector = {
        let template = include_str!("../../tests/data/istio-chart/injection-template.yaml");
        let config = serde_json::json!({"policy": "enabled", "templates": {"sidecar": template}}).to_string();
        let values = include_str!("../../tests/data/inject/values.json");
        let env = inject::Env { revision: String::new(), native_sidecars: Some(true), compliance_policy: String::new() };
        inject::Injector::new(&config, values, inject::MeshInputs::parse("").unwrap(), env).unwrap()
    };
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    INJECTOR.with(|inj| {
        let out = admission::serve(data, |r| match inject::inject(inj, &Default::default(), &r.object, &r.namespace, "/inject") {
            Ok(inject::Outcome::Skipped) => admission::AdmissionResponse::allow(),
            Ok(inject::Outcome::Patched(ops)) => admission::AdmissionResponse {
                patch: Some(serde_json::to_vec(&ops).unwrap()),
                ..admission::AdmissionResponse::allow()
            },
            Err(e) => admission::AdmissionResponse::deny(e),
        });
        let v: serde_json::Value = serde_json::from_slice(&out).expect("the answer is JSON");
        assert!(v["response"]["allowed"].is_boolean());
    })
});
