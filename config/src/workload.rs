//! What istiod derives of a workload from its Pod or WorkloadEntry: its
//! name (`GetWorkloadMetaFromPod`, `WorkloadNameFromWorkloadEntry`) and
//! canonical service (`kubelabels.CanonicalService`), which telemetry
//! labels and ztunnel's workloads carry.

use std::collections::BTreeMap;

use crate::objects::Pod;

/// The workload's name: `service.istio.io/workload-name`, else its
/// controller's (a Deployment for a ReplicaSet with the pod's template
/// hash, a CronJob for a Job named `<name>-<8 to 10 digits>`), else the
/// pod's (`GetWorkloadMetaFromPod`).
pub fn workload_name(pod: &Pod) -> String {
    let meta = &pod.metadata;
    if let Some(n) = meta.labels.get("service.istio.io/workload-name") {
        return n.clone();
    }
    let mut name = meta.name.clone();
    let controller = meta.owner_references.iter().find(|r| r.controller == Some(true));
    if meta.generate_name.as_deref().is_some_and(|g| !g.is_empty())
        && let Some(r) = controller
    {
        name = r.name.clone();
        let label = |k: &str| meta.labels.get(k).filter(|v| !v.is_empty());
        match r.kind.as_str() {
            "ReplicaSet" => {
                for hash in ["pod-template-hash", "rollouts-pod-template-hash"] {
                    if let Some(h) = label(hash)
                        && r.name.ends_with(h.as_str())
                    {
                        name = r
                            .name
                            .strip_suffix(h.as_str())
                            .and_then(|n| n.strip_suffix('-'))
                            .unwrap_or(&r.name)
                            .to_owned();
                        break;
                    }
                }
            }
            "ReplicationController" => {
                if let Some(dc) = label("deploymentconfig") {
                    name = dc.clone();
                }
            }
            "Job" => {
                if let Some((base, digits)) = r.name.rsplit_once('-')
                    && (8..=10).contains(&digits.len())
                    && digits.bytes().all(|b| b.is_ascii_digit())
                    && !base.is_empty()
                {
                    name = base.to_owned();
                }
            }
            _ => {}
        }
    }
    if name.is_empty() { meta.name.clone() } else { name }
}

/// The canonical service name and revision (`kubelabels.CanonicalService`).
pub fn canonical_service(labels: &BTreeMap<String, String>, workload: &str) -> (String, String) {
    let (name, rev) = canonical_service_of(labels, workload);
    (name.to_owned(), rev.to_owned())
}

/// [`canonical_service`], borrowed.
pub fn canonical_service_of<'a>(labels: &'a BTreeMap<String, String>, workload: &'a str) -> (&'a str, &'a str) {
    let first = |keys: &[&str]| keys.iter().find_map(|k| labels.get(*k).map(String::as_str));
    let name = first(&["service.istio.io/canonical-name", "app.kubernetes.io/name", "app"]);
    let rev = first(&["service.istio.io/canonical-revision", "app.kubernetes.io/version", "version"]);
    (name.unwrap_or(workload), rev.unwrap_or("latest"))
}

/// A WorkloadEntry's workload name (`WorkloadNameFromWorkloadEntry`): its
/// auto-registration group, else its `service.istio.io/workload-name`
/// label, else its name.
pub fn entry_workload_name(
    name: &str,
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> String {
    annotations
        .get("istio.io/autoRegistrationGroup")
        .or_else(|| labels.get("service.istio.io/workload-name"))
        .cloned()
        .unwrap_or_else(|| name.to_owned())
}
