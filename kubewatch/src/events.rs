//! Watch events by kind, as istiod counts them: `pilot_k8s_reg_events`
//! for the registry's informers (Services, EndpointSlices, Pods, Nodes,
//! Namespaces; `pilot/pkg/serviceregistry/kube/controller/controller.go`
//! `registerHandlers`) and `pilot_k8s_cfg_events` for the config kinds
//! (`pilot/pkg/config/kube/crdclient`, labelled by the object's kind).
//! Every informer event counts, the initial list's as `add`, whether or
//! not it changed anything served.

use std::sync::atomic::{AtomicU64, Ordering};

use istiod_config::objects::KINDS;

/// An informer event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A new object (or one of a list).
    Add,
    /// A changed object.
    Update,
    /// A deleted object.
    Delete,
}

const EVENTS: [&str; 3] = ["add", "update", "delete"];

static COUNTS: [[AtomicU64; 3]; KINDS.len()] = [const { [const { AtomicU64::new(0) }; 3] }; KINDS.len()];

/// istiod's type label of the registry kinds, by the index of [`KINDS`]
/// (Secrets are read by the credentials controller, which counts none).
const REGISTRY: [Option<&str>; 6] =
    [Some("Services"), Some("EndpointSlice"), Some("Pods"), Some("Nodes"), Some("Namespaces"), None];

/// Counts an event of the kind at `index` of [`KINDS`].
pub fn count(index: usize, event: Event) {
    if let Some(c) = COUNTS.get(index) {
        c[event as usize].fetch_add(1, Ordering::Relaxed);
    }
}

fn collect(
    range: std::ops::Range<usize>,
    label: impl Fn(usize) -> Option<&'static str>,
) -> Vec<(&'static str, &'static str, u64)> {
    let mut out: Vec<(&'static str, &'static str, u64)> = Vec::new();
    for i in range {
        let Some(t) = label(i) else { continue };
        for (e, c) in EVENTS.iter().zip(&COUNTS[i]) {
            let n = c.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            // Two groups' kinds of one name (Gateway) share a series.
            match out.iter_mut().find(|(t2, e2, _)| *t2 == t && e2 == e) {
                Some(x) => x.2 += n,
                None => out.push((t, e, n)),
            }
        }
    }
    out
}

/// `(type, event, count)` of the registry kinds seen so far.
pub fn registry() -> Vec<(&'static str, &'static str, u64)> {
    collect(0..REGISTRY.len(), |i| REGISTRY[i])
}

/// `(type, event, count)` of the config kinds seen so far (ConfigMaps
/// are the credentials controller's, which counts none).
pub fn config() -> Vec<(&'static str, &'static str, u64)> {
    collect(REGISTRY.len()..KINDS.len(), |i| Some(KINDS[i].2).filter(|k| *k != "ConfigMap"))
}

/// Endpoints seen to name a Pod not known (`pilot_k8s_endpoints_with_no_pods`).
static WITHOUT_PODS: AtomicU64 = AtomicU64::new(0);

/// Counts `n` endpoints newly seen without their Pod.
pub fn endpoints_without_pods(n: u64) {
    WITHOUT_PODS.fetch_add(n, Ordering::Relaxed);
}

/// Endpoints seen without their Pod so far.
pub fn endpoints_without_pods_seen() -> u64 {
    WITHOUT_PODS.load(Ordering::Relaxed)
}

/// Watch and list errors by cluster (`controller_sync_errors_total`,
/// istiod's informer error handler: every reflector error counts).
static SYNC_ERRORS: std::sync::Mutex<std::collections::BTreeMap<String, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Counts a watch or list error of `cluster`'s informers.
pub fn sync_error(cluster: &str) {
    *SYNC_ERRORS.lock().unwrap_or_else(|e| e.into_inner()).entry(cluster.to_owned()).or_default() += 1;
}

/// `(cluster, errors)` so far.
pub fn sync_errors() -> Vec<(String, u64)> {
    SYNC_ERRORS.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(c, n)| (c.clone(), *n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_labelled_as_istiod_labels_them() {
        count(0, Event::Add);
        count(5, Event::Add); // a Secret: not a registry event
        count(8, Event::Update); // networking.istio.io Gateway
        let api_gateway = KINDS.iter().position(|k| k.0 == "gateway.networking.k8s.io" && k.2 == "Gateway").unwrap();
        count(api_gateway, Event::Update);
        assert_eq!(KINDS[8].2, "Gateway");
        assert!(registry().contains(&("Services", "add", 1)));
        assert!(!registry().iter().any(|(t, _, _)| *t == "Secret"));
        assert!(config().contains(&("Gateway", "update", 2)));
        count(KINDS.len() - 1, Event::Add); // a ConfigMap: not a config event
        assert_eq!(KINDS[KINDS.len() - 1].2, "ConfigMap");
        assert!(!config().iter().any(|(t, _, _)| *t == "ConfigMap"));
    }
}
