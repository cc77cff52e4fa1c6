//! The webhook configurations' `caBundle`, as istiod keeps them
//! (`pkg/webhooks/webhookpatch.go`, `pkg/webhooks/validation/controller`):
//! every MutatingWebhookConfiguration labelled `istio.io/rev=<revision>`
//! gets the CA's trust bundle in the `caBundle` of each webhook named
//! `*sidecar-injector.istio.io`; every ValidatingWebhookConfiguration with
//! that label gets it in every webhook, and its `failurePolicy` is set to
//! `Fail` once this server's validation webhook is serving. Updates carry
//! the `resourceVersion` read (a 409 waits for the next round) and are
//! made only where something differs, so a configuration is written once
//! per root change. The replica holding the election Lease does it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::ca::kapi::{Api, Write};

const GROUP: &str = "/apis/admissionregistration.k8s.io/v1";
/// istiod's injection webhook name (`pilot/pkg/bootstrap/sidecarinjector.go`).
const INJECTOR_WEBHOOK: &str = "sidecar-injector.istio.io";

/// The revision label's value for `revision` (istiod's default revision
/// is `default`).
fn rev(revision: &str) -> &str {
    if revision.is_empty() { "default" } else { revision }
}

/// Sets `caBundle` (and, for `fail_closed`, `failurePolicy: Fail`) on the
/// webhooks of `config` that `pick` selects; whether anything changed.
fn patch_config(config: &mut Value, bundle_b64: &str, pick: impl Fn(&str) -> bool, fail_closed: bool) -> bool {
    let mut changed = false;
    for wh in config["webhooks"].as_array_mut().into_iter().flatten() {
        if !pick(wh["name"].as_str().unwrap_or_default()) {
            continue;
        }
        if wh["clientConfig"]["caBundle"] != bundle_b64 {
            wh["clientConfig"]["caBundle"] = json!(bundle_b64);
            changed = true;
        }
        if fail_closed && wh["failurePolicy"] != "Fail" {
            wh["failurePolicy"] = json!("Fail");
            changed = true;
        }
    }
    changed
}

/// One round: returns how many configurations were written. `serving`:
/// this server's validation webhook answers (istiod checks that a dry run
/// of an invalid object is refused; this server knows it directly).
pub async fn reconcile(api: &Api, revision: &str, bundle: &str, serving: bool) -> Result<usize, String> {
    let b64 = STANDARD.encode(bundle);
    let mut wrote = 0;
    for (plural, validating) in [("mutatingwebhookconfigurations", false), ("validatingwebhookconfigurations", true)] {
        let selector = format!("istio.io%2Frev%3D{}", rev(revision));
        let Some(list) = api.get(&format!("{GROUP}/{plural}?labelSelector={selector}")).await? else { continue };
        for mut config in list["items"].as_array().cloned().unwrap_or_default() {
            if config["metadata"]["labels"]["istio.io/rev"] != rev(revision) {
                continue;
            }
            let name = config["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let changed = if validating {
                patch_config(&mut config, &b64, |_| true, serving)
            } else {
                patch_config(&mut config, &b64, |n| n.ends_with(INJECTOR_WEBHOOK), false)
            };
            if !changed {
                continue;
            }
            config["apiVersion"] = json!("admissionregistration.k8s.io/v1");
            match api.replace(&format!("{GROUP}/{plural}/{name}"), &config).await {
                Ok(Write::Done(_)) => {
                    wrote += 1;
                    tracing::info!(target: "webhook", config = %name, "caBundle patched");
                }
                Ok(Write::Conflict) => {
                    tracing::debug!(target: "webhook", config = %name, "changed meanwhile; next round")
                }
                Err(e) => {
                    tracing::warn!(target: "webhook", config = %name, error = %e, "cannot patch the webhook configuration")
                }
            }
        }
    }
    Ok(wrote)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_istios_webhooks_are_patched_and_only_when_different() {
        let mut config = json!({"webhooks": [
            {"name": "rev.namespace.sidecar-injector.istio.io", "clientConfig": {}},
            {"name": "other.example.com", "clientConfig": {"caBundle": "theirs"}},
        ]});
        let pick = |n: &str| n.ends_with(INJECTOR_WEBHOOK);
        assert!(patch_config(&mut config, "QQ==", pick, false));
        assert_eq!(config["webhooks"][0]["clientConfig"]["caBundle"], "QQ==");
        assert_eq!(config["webhooks"][1]["clientConfig"]["caBundle"], "theirs");
        assert!(!patch_config(&mut config, "QQ==", pick, false), "nothing to change: no write");
        let mut v = json!({"webhooks": [{"name": "rev.validation.istio.io", "failurePolicy": "Ignore", "clientConfig": {"caBundle": "QQ=="}}]});
        assert!(!patch_config(&mut v, "QQ==", |_| true, false), "not serving: Ignore stays");
        assert!(patch_config(&mut v, "QQ==", |_| true, true));
        assert_eq!(v["webhooks"][0]["failurePolicy"], "Fail");
        assert_eq!(rev(""), "default");
    }
}
