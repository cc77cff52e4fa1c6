//! Revisions and tags as istiod's tag watcher sees them
//! (`pkg/revisions/tag_watcher.go`): which objects this instance's
//! revision-scoped controllers (the Gateway API deployment controller)
//! take as theirs.
//!
//! - This revision's tags: the `istio.io/tag` of every
//!   MutatingWebhookConfiguration and every Service (in istiod's namespace)
//!   labelled `istio.io/tag` whose `istio.io/rev` is this revision, and
//!   the revision itself.
//! - An object is this instance's when its `istio.io/rev` (else its
//!   namespace's) is one of those tags; an object with neither is when a
//!   tag named `default` points here, or, with no `default` tag elsewhere,
//!   when the `istiod-default-validator` names this revision.
//!
//! In Kubernetes the webhooks and Services are read every [`POLL`]; a
//! change of the tags rebuilds from every object.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use istiod_kubewatch::kapi::Api;

/// How often the tags are read again.
pub(super) const POLL: Duration = Duration::from_secs(5);

/// What decides which objects are this revision's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tags {
    /// This revision and the tags pointing to it.
    pub(crate) mine: BTreeSet<String>,
    /// A `default` tag exists and points elsewhere.
    pub(crate) other_default_tag: bool,
    /// `istiod-default-validator` names this revision.
    pub(crate) default_revision: bool,
}

impl Tags {
    /// With nothing read from a cluster: the revision alone, the default
    /// revision's objects unlabelled ones.
    pub(crate) fn revision_only(revision: &str) -> Tags {
        let revision = istiod_kubewatch::kapi::revision_label(revision);
        Tags {
            mine: BTreeSet::from([revision.to_owned()]),
            other_default_tag: false,
            default_revision: revision == "default",
        }
    }

    /// istiod's `IsMine` for an object selecting `selected` (its own
    /// `istio.io/rev`, else its namespace's; empty: neither).
    pub(crate) fn is_mine(&self, selected: &str) -> bool {
        self.mine.contains(selected)
            || selected.is_empty()
                && (self.mine.contains("default") || (self.default_revision && !self.other_default_tag))
    }

    /// Reads the tags of `revision` from the cluster.
    pub(crate) async fn read(api: &Api, revision: &str, namespace: &str) -> Result<Tags, String> {
        let revision = istiod_kubewatch::kapi::revision_label(revision);
        let list = |v: Option<Value>| v.and_then(|l| l["items"].as_array().cloned()).unwrap_or_default();
        let label = |o: &Value, k: &str| o["metadata"]["labels"][k].as_str().map(str::to_owned);
        // Only what carries the tag label (checked again below: a server
        // that ignores the selector gives everything).
        let hooks = list(
            api.get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations?labelSelector=istio.io%2Ftag")
                .await?,
        );
        let services =
            list(api.get(&format!("/api/v1/namespaces/{namespace}/services?labelSelector=istio.io%2Ftag")).await?);
        let mut mine = BTreeSet::from([revision.to_owned()]);
        let mut other_default_tag = false;
        for o in hooks.iter().chain(&services) {
            let Some(tag) = label(o, "istio.io/tag") else { continue };
            if label(o, "istio.io/rev").as_deref() == Some(revision) {
                mine.insert(tag);
            } else if tag == "default" && o["metadata"]["name"] == "istio-revision-tag-default" {
                other_default_tag = true;
            }
        }
        if mine.contains("default") {
            other_default_tag = false;
        }
        let validator = api
            .get("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/istiod-default-validator")
            .await?;
        let default_revision = validator.is_some_and(|v| label(&v, "istio.io/rev").as_deref() == Some(revision));
        Ok(Tags { mine, other_default_tag, default_revision })
    }
}

/// The tags at start, read once before the first model (istiod waits for
/// its tag watcher), so no other revision's Gateway is taken meanwhile;
/// the revision alone when the API server does not answer in 10 s.
pub(super) async fn initial(api: &Api, revision: &str, namespace: &str) -> Tags {
    match tokio::time::timeout(Duration::from_secs(10), Tags::read(api, revision, namespace)).await {
        Ok(Ok(tags)) => tags,
        Ok(Err(e)) => {
            tracing::warn!(target: "model", error = %e, "cannot read the revision tags yet");
            Tags::revision_only(revision)
        }
        Err(_) => Tags::revision_only(revision),
    }
}

/// Reads the tags every [`POLL`]; each change (from `last`) goes to
/// `changed`. A read that fails keeps the last tags.
pub(super) async fn follow(api: Api, revision: String, namespace: String, mut last: Tags, changed: impl Fn(Tags)) {
    loop {
        match Tags::read(&api, &revision, &namespace).await {
            Ok(tags) if tags != last => {
                tracing::info!(target: "model", tags = ?tags.mine, default = tags.default_revision, "revision tags changed");
                last = tags.clone();
                changed(tags);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(target: "model", error = %e, "cannot read the revision tags; keeping the last"),
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_mine_follows_the_tag_watcher() {
        let t = Tags::revision_only("");
        assert!(t.is_mine("") && t.is_mine("default") && !t.is_mine("canary"));
        let canary = Tags::revision_only("canary");
        assert!(canary.is_mine("canary") && !canary.is_mine("") && !canary.is_mine("default"));
        // A `prod` tag and the `default` tag point at canary.
        let tagged = Tags { mine: ["canary", "prod", "default"].map(String::from).into(), ..canary.clone() };
        assert!(tagged.is_mine("prod") && tagged.is_mine("") && tagged.is_mine("default"));
        // The default validator names canary, but a default tag points
        // elsewhere: the tag wins.
        let validator = Tags { default_revision: true, other_default_tag: true, ..canary.clone() };
        assert!(!validator.is_mine(""));
        assert!(Tags { other_default_tag: false, ..validator }.is_mine(""));
    }
}
