//! `AdmissionReview` (`admission.k8s.io/v1` and `v1beta1`, the same JSON
//! shape) in and out, as istiod's webhook servers read and answer it: the
//! answer has the request's `apiVersion`, echoes its `uid`, and carries a
//! denial's reason in `status.message`.

use serde::Deserialize;
use serde_json::{Value, json};

/// A group, version and kind (`request.kind`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Gvk {
    /// API group ("" for core).
    #[serde(default)]
    pub group: String,
    /// Version.
    #[serde(default)]
    pub version: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
}

/// A group, version and resource (`request.resource`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Gvr {
    /// API group.
    #[serde(default)]
    pub group: String,
    /// Version.
    #[serde(default)]
    pub version: String,
    /// Plural resource name.
    #[serde(default)]
    pub resource: String,
}

/// What the API server asks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Echoed in the answer.
    #[serde(default)]
    pub uid: String,
    /// The object's kind.
    #[serde(default)]
    pub kind: Gvk,
    /// The resource.
    #[serde(default)]
    pub resource: Gvr,
    /// The object's namespace.
    #[serde(default)]
    pub namespace: String,
    /// The object's name (empty for a generated name).
    #[serde(default)]
    pub name: String,
    /// CREATE, UPDATE, DELETE or CONNECT.
    #[serde(default)]
    pub operation: String,
    /// The object.
    #[serde(default)]
    pub object: Value,
    /// A dry run changes nothing and counts in no metric.
    #[serde(default)]
    pub dry_run: Option<bool>,
}

/// The webhook's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdmissionResponse {
    /// Admitted?
    pub allowed: bool,
    /// Why not (or what else to say).
    pub message: Option<String>,
    /// Warnings shown to the user.
    pub warnings: Vec<String>,
    /// A JSONPatch (RFC 6902) to apply, as JSON text.
    pub patch: Option<Vec<u8>>,
}

impl AdmissionResponse {
    /// Admitted.
    pub fn allow() -> Self {
        Self { allowed: true, ..Self::default() }
    }

    /// Refused, saying why (istiod's `toAdmissionResponse`).
    pub fn deny(message: impl Into<String>) -> Self {
        Self { allowed: false, message: Some(message.into()), ..Self::default() }
    }
}

const VERSIONS: [&str; 2] = ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"];

/// Answers the AdmissionReview in `body` with `admit`'s response; a body
/// that is not one is answered with a refusal saying why, as istiod does.
pub fn serve(body: &[u8], admit: impl FnOnce(&AdmissionRequest) -> AdmissionResponse) -> Vec<u8> {
    let (api_version, uid, response) = match decode(body) {
        Ok((api_version, request)) => {
            let r = admit(&request);
            (api_version, request.uid, r)
        }
        Err(e) => {
            (VERSIONS[0].to_owned(), String::new(), AdmissionResponse::deny(format!("could not decode body: {e}")))
        }
    };
    encode(&api_version, &uid, &response)
}

fn decode(body: &[u8]) -> Result<(String, AdmissionRequest), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let api_version = v["apiVersion"].as_str().unwrap_or_default();
    let kind = v["kind"].as_str().unwrap_or_default();
    if kind != "AdmissionReview" || !VERSIONS.contains(&api_version) {
        return Err(format!(
            "want an AdmissionReview of admission.k8s.io/v1 or v1beta1, got {kind:?} of {api_version:?}"
        ));
    }
    let request = v.get("request").filter(|r| r.is_object()).ok_or("the AdmissionReview has no request")?;
    let request: AdmissionRequest = serde_json::from_value(request.clone()).map_err(|e| format!("request: {e}"))?;
    Ok((api_version.to_owned(), request))
}

fn encode(api_version: &str, uid: &str, r: &AdmissionResponse) -> Vec<u8> {
    use base64::Engine;
    let mut response = json!({"uid": uid, "allowed": r.allowed});
    if let Some(m) = &r.message {
        response["status"] = json!({"metadata": {}, "message": m});
    }
    if let Some(p) = &r.patch {
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(p));
        response["patchType"] = json!("JSONPatch");
    }
    if !r.warnings.is_empty() {
        response["warnings"] = json!(r.warnings);
    }
    serde_json::to_vec(&json!({"kind": "AdmissionReview", "apiVersion": api_version, "response": response}))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_has_the_requests_version_and_uid() {
        for v in VERSIONS {
            let body =
                json!({"apiVersion": v, "kind": "AdmissionReview", "request": {"uid": "u-1", "operation": "CREATE"}});
            let out: Value = serde_json::from_slice(&serve(body.to_string().as_bytes(), |r| {
                assert_eq!(r.operation, "CREATE");
                AdmissionResponse { warnings: vec!["w".into()], ..AdmissionResponse::allow() }
            }))
            .unwrap();
            assert_eq!(out["apiVersion"], v);
            assert_eq!(out["kind"], "AdmissionReview");
            assert_eq!(out["response"], json!({"uid": "u-1", "allowed": true, "warnings": ["w"]}));
        }
        let out: Value = serde_json::from_slice(&serve(
            json!({"apiVersion": VERSIONS[0], "kind": "AdmissionReview", "request": {"uid": "u-2"}})
                .to_string()
                .as_bytes(),
            |_| AdmissionResponse { patch: Some(b"[]".to_vec()), ..AdmissionResponse::deny("no") },
        ))
        .unwrap();
        assert_eq!(out["response"]["status"]["message"], "no");
        assert_eq!((&out["response"]["patch"], &out["response"]["patchType"]), (&json!("W10="), &json!("JSONPatch")));
    }

    #[test]
    fn what_is_not_an_admission_review_is_refused_saying_why() {
        for body in [
            &b"{"[..],
            b"[]",
            br#"{"apiVersion":"v1","kind":"Pod"}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
        ] {
            let out: Value = serde_json::from_slice(&serve(body, |_| panic!("not admitted"))).unwrap();
            assert_eq!(out["response"]["allowed"], false);
            let m = out["response"]["status"]["message"].as_str().unwrap();
            assert!(m.starts_with("could not decode body: "), "{m}");
        }
    }
}

/// Replays what the `admission_review` fuzz target keeps (seeds and fixed
/// crashes under fuzz/regressions/admission_review/).
#[cfg(test)]
mod fuzz_regressions {
    #[test]
    fn kept_inputs_get_an_answer() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/admission_review");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            let mut metrics = super::super::validate::Metrics::default();
            let out = super::serve(&data, |r| super::super::validate::validate(r, &mut metrics));
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert!(v["response"]["allowed"].is_boolean());
            n += 1;
        }
        assert!(n >= 2, "the seeds are there");
    }
}
