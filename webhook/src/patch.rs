//! The webhook configurations' `caBundle`, as istiod keeps them
//! (`pkg/webhooks/webhookpatch.go`, `pkg/webhooks/validation/controller`):
//! every MutatingWebhookConfiguration labelled `istio.io/rev=<revision>`
//! gets the CA's trust bundle in the `caBundle` of each webhook named
//! `*sidecar-injector.istio.io`; every ValidatingWebhookConfiguration with
//! that label gets it in every webhook, and its `failurePolicy` is set to
//! `Fail` once this server's validation webhook serves and the API server
//! was seen to reach it (a dry-run create of an invalid Gateway refused by
//! a webhook, istiod's `isDryRunOfInvalidConfigRejected`). Updates carry
//! the `resourceVersion` read (a 409 waits for the next round) and are
//! made only where something differs, so a configuration is written once
//! per root change. Every replica of the revision does it, elected or not,
//! as istiod does.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use istiod_kubewatch::kapi::{Api, Write};

const GROUP: &str = "/apis/admissionregistration.k8s.io/v1";
/// istiod's injection webhook name (`pilot/pkg/bootstrap/sidecarinjector.go`).
const INJECTOR_WEBHOOK: &str = "sidecar-injector.istio.io";

use istiod_kubewatch::kapi::revision_label as rev;
use istiod_xds::metrics::{count_event, label};

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

/// istiod's `isDryRunOfInvalidConfigRejected`: a dry-run create of an
/// invalid Gateway through the API server must be refused by a validating
/// webhook (`denied the request`) before validation may fail closed: only
/// then is it known that the API server reaches this webhook. A missing
/// Gateway CRD or a webhook without dry-run support count as ready, as in
/// istiod; anything else (the create succeeding, another error) does not.
pub async fn dry_run_rejected(api: &Api, namespace: &str, revision: &str) -> Result<(), String> {
    let gateway = json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "Gateway",
        "metadata": {
            "name": "invalid-gateway",
            "namespace": namespace,
            "labels": {"istio.io/rev": rev(revision)},
            "annotations": {"internal.istio.io/webhook-always-reject": "true"},
        },
        "spec": {},
    });
    let collection = format!("/apis/networking.istio.io/v1/namespaces/{namespace}/gateways");
    let mut result = api.create(&format!("{collection}?dryRun=All"), &gateway).await;
    if let Ok(Write::Conflict) = result {
        result = api.replace(&format!("{collection}/invalid-gateway?dryRun=All"), &gateway).await;
    }
    match result {
        Ok(_) => Err("dummy invalid config not rejected".into()),
        Err(e) if e.contains("denied the request") => Ok(()),
        Err(e) if e.contains("404") || e.contains("the server could not find the requested resource") => {
            tracing::warn!(target: "webhook", "Missing Gateway CRD, cannot perform validation check. Assuming validation is ready");
            Ok(())
        }
        Err(e) if e.contains("does not support dry run") => {
            tracing::warn!(target: "webhook", error = %e, "One of the validating webhooks does not support DryRun, cannot perform validation check. Assuming validation is ready");
            Ok(())
        }
        Err(e) => Err(format!("dummy invalid rejected for the wrong reason: {e}")),
    }
}

/// Which configurations are patched: istiod patches the injector's unless
/// `INJECTION_WEBHOOK_CONFIG_NAME` is set empty, and runs the validation
/// controller unless `VALIDATION_WEBHOOK_CONFIG_NAME` is (low-privilege
/// installs, without RBAC on webhook configurations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kinds {
    /// MutatingWebhookConfigurations.
    pub injection: bool,
    /// ValidatingWebhookConfigurations.
    pub validation: bool,
}

impl Kinds {
    /// Both, istiod's default.
    pub const ALL: Self = Self { injection: true, validation: true };
}

/// `webhook_patch_failures_total{name, reason}`, istiod's reasons.
fn count_failure(name: &str, reason: &str) {
    count_event("webhook_patch_failures_total", vec![("name", name.to_owned()), ("reason", reason.to_owned())]);
}

/// What a patcher keeps across rounds.
#[derive(Debug, Default)]
pub struct Rounds {
    /// The API server was seen to reach this server's validation webhook
    /// ([`dry_run_rejected`]), checked each round until it holds.
    pub fail_closed: bool,
    /// Injector configurations without the injector's webhook: by name,
    /// the resource version and bundle last counted (once each, as istiod
    /// counts them once per event, not every round).
    missing_reported: std::collections::HashMap<String, (String, String)>,
}

/// One round: returns how many configurations were written. `serving`:
/// this server's validation webhook answers; `rounds`: what the caller
/// keeps across rounds.
pub async fn reconcile(
    api: &Api,
    namespace: &str,
    revision: &str,
    bundle: &str,
    serving: bool,
    rounds: &mut Rounds,
    kinds: Kinds,
) -> Result<usize, String> {
    let fail_closed = &mut rounds.fail_closed;
    if serving && kinds.validation && !*fail_closed {
        match dry_run_rejected(api, namespace, revision).await {
            Ok(()) => {
                tracing::info!(target: "webhook", "Endpoint successfully rejected invalid config. Switching to fail-close.");
                *fail_closed = true;
            }
            Err(reason) => {
                tracing::info!(target: "webhook", %reason, "Not ready to switch validation to fail-closed");
            }
        }
    }
    let serving = serving && *fail_closed;
    let b64 = STANDARD.encode(bundle);
    let mut wrote = 0;
    let plurals = [("mutatingwebhookconfigurations", false), ("validatingwebhookconfigurations", true)];
    for (plural, validating) in plurals.into_iter().filter(|(_, v)| if *v { kinds.validation } else { kinds.injection })
    {
        let selector = format!("istio.io%2Frev%3D{}", rev(revision));
        let Some(list) = api.get(&format!("{GROUP}/{plural}?labelSelector={selector}")).await? else { continue };
        for mut config in list["items"].as_array().cloned().unwrap_or_default() {
            if config["metadata"]["labels"]["istio.io/rev"] != rev(revision) {
                continue;
            }
            let name = config["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            // istiod's injector patcher: a configuration of this revision
            // without the injector's webhook is a failure it reports.
            if !validating
                && !config["webhooks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|w| w["name"].as_str().is_some_and(|n| n.ends_with(INJECTOR_WEBHOOK)))
            {
                let version = config["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned();
                let seen = (version, b64.clone());
                if rounds.missing_reported.get(&name) != Some(&seen) {
                    rounds.missing_reported.insert(name.clone(), seen);
                    count_failure(&name, "webhook_entry_not_found");
                }
                continue;
            }
            let changed = if validating {
                patch_config(&mut config, &b64, |_| true, serving)
            } else {
                patch_config(&mut config, &b64, |n| n.ends_with(INJECTOR_WEBHOOK), false)
            };
            if !changed {
                continue;
            }
            if !validating {
                // Labelled by the webhook's name suffix, as istiod's.
                count_event("webhook_patch_attempts_total", label("name", INJECTOR_WEBHOOK));
            }
            config["apiVersion"] = json!("admissionregistration.k8s.io/v1");
            let result = api.replace(&format!("{GROUP}/{plural}/{name}"), &config).await;
            // What failed, as apimachinery's `ReasonForError` names it.
            let failed = match &result {
                Ok(Write::Done(_)) => None,
                Ok(Write::Conflict) => Some("Conflict".to_owned()),
                Err(e) => Some(if e.contains("404") { "NotFound".to_owned() } else { String::new() }),
            };
            match (&failed, validating) {
                (None, true) => count_event("galley_validation_config_updates", Vec::new()),
                (Some(reason), true) => {
                    count_event("galley_validation_config_update_error", label("reason", reason.clone()))
                }
                (Some(_), false) => {
                    count_failure(&name, "webhook_update_failure");
                    // Retried next round, as istiod's queue retries it.
                    count_event("webhook_patch_retries_total", label("name", name.clone()));
                }
                (None, false) => {}
            }
            match result {
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
