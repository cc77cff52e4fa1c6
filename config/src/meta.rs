//! What every object has: its `metadata` (the fields the control plane
//! reads) and its text as written, for the debug endpoints.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `metadata`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Meta {
    /// Name.
    pub name: String,
    /// `uid` (node authorization checks a caller's pod by it).
    pub uid: Option<String>,
    /// `generateName`: set when the name was generated (a controller's pod).
    pub generate_name: Option<String>,
    /// Namespace (`default` when absent).
    pub namespace: Option<String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// `creationTimestamp` (RFC 3339, so it sorts as it reads; `null` in
    /// manifests written by kubectl); istiod orders Gateways and other
    /// configs by it.
    pub creation_timestamp: Option<String>,
    /// `deletionTimestamp`: set while the object is being deleted (a pod
    /// terminating is no longer healthy).
    pub deletion_timestamp: Option<String>,
    /// `generation` (status conditions report it as `observedGeneration`).
    pub generation: Option<i64>,
    /// `ownerReferences` (an ambient workload is named after its
    /// controller).
    pub owner_references: Vec<OwnerReference>,
}

/// `metadata.ownerReferences[]`: the kind and name of an owner.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct OwnerReference {
    /// API version of the owner (`apps/v1`).
    pub api_version: String,
    /// Kind of the owner (`ReplicaSet`, `Job`...).
    pub kind: String,
    /// Name of the owner.
    pub name: String,
    /// Whether it is the managing controller.
    pub controller: Option<bool>,
}

/// An object as written: its JSON text without `status`, for istiod's
/// `/debug/configz` (which lists every config object in its Kubernetes
/// form). `None` for objects istiod-rs made itself. Not part of the
/// object's value: objects that read the same are equal however they were
/// written (a `resourceVersion` bump alone changes nothing served).
#[derive(Debug, Clone, Default)]
pub struct Raw(pub Option<std::sync::Arc<str>>);

impl PartialEq for Raw {
    fn eq(&self, _: &Raw) -> bool {
        true
    }
}

impl Eq for Raw {}

impl Raw {
    /// Keeps `value` (a whole object), less its status.
    pub fn of(value: &serde_json::Value) -> Raw {
        let mut v = value.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("status");
            if let Some(m) = o.get_mut("metadata").and_then(serde_json::Value::as_object_mut) {
                // The API server's bookkeeping, which kubectl hides too.
                m.remove("managedFields");
            }
        }
        Raw(Some(v.to_string().into()))
    }

    /// The object, parsed again.
    pub fn value(&self) -> Option<serde_json::Value> {
        self.0.as_deref().and_then(|t| serde_json::from_str(t).ok())
    }
}

impl Meta {
    /// The namespace, `default` when absent (kubectl's rule).
    pub fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }
}
