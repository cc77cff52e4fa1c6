//! Root distribution in Kubernetes, as istiod's namespace controller
//! (`pilot/pkg/serviceregistry/kube/controller/namespacecontroller.go`):
//! the `istio-ca-root-cert` ConfigMap (`root-cert.pem`, label
//! `istio.io/config: "true"`) in every namespace the mesh's
//! `discoverySelectors` select (but `kube-public`, `kube-node-lease`,
//! `local-path-storage` and terminating ones), kept equal to the CA's
//! trust bundle: created where missing, updated where different.
//!
//! One replica does it: the holder of istiod's
//! `istio-namespace-controller-election` lock (a ConfigMap lock in istiod's
//! namespace, `istiod_kubewatch::leader`). Writes race safely: a stale
//! `resourceVersion` is a 409 and the next round reads again.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::CaServer;
use istiod_kubewatch::kapi::{Api, Write};
use istiod_kubewatch::leader::{Elector, Leadership, Lock, NAMESPACE_CONTROLLER, Timings};
use istiod_mesh::meshconfig::MeshSettings;

/// The ConfigMap's default name (`PILOT_CA_CERT_CONFIGMAP`) and its key.
pub const ROOT_CONFIGMAP: &str = "istio-ca-root-cert";
const ROOT_KEY: &str = "root-cert.pem";

static CONFIGMAP: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Names the ConfigMap (`PILOT_CA_CERT_CONFIGMAP`, process-wide as in
/// istiod); the first call wins.
pub fn set_configmap_name(name: &str) {
    let _ = CONFIGMAP.set(name.to_owned());
}

/// The ConfigMap's name in force.
pub fn configmap_name() -> &'static str {
    CONFIGMAP.get().map_or(ROOT_CONFIGMAP, String::as_str)
}

/// The CRL ConfigMap's default name (`PILOT_CRL_CONFIGMAP`) and its key.
pub const CRL_CONFIGMAP: &str = "istio-ca-crl";
const CRL_KEY: &str = "ca-crl.pem";

static CRL: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Names the CRL ConfigMap written beside the root one
/// (`PILOT_ENABLE_CA_CRL`, `PILOT_CRL_CONFIGMAP`), or none; the first call
/// wins. istiod writes it in every namespace, empty without a plugged-in
/// CA's `ca-crl.pem`.
pub fn set_crl_configmap(name: Option<&str>) {
    let _ = CRL.set(name.map(str::to_owned));
}

fn crl_configmap() -> Option<&'static str> {
    CRL.get().map_or(Some(CRL_CONFIGMAP), |n| n.as_deref())
}

/// istiod's ClusterTrustBundle (`ENABLE_CLUSTER_TRUST_BUNDLE_API`): the
/// root in one cluster-scoped object instead of a ConfigMap per namespace.
pub const TRUST_BUNDLE: &str = "istio.io:istiod-ca:root-cert";
const TRUST_BUNDLE_SIGNER: &str = "istio.io/istiod-ca";
const TRUST_BUNDLES: &str = "/apis/certificates.k8s.io/v1beta1/clustertrustbundles";

static USE_TRUST_BUNDLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Distributes the root as a ClusterTrustBundle instead of the ConfigMaps
/// (the first call wins).
pub fn set_cluster_trust_bundle(on: bool) {
    let _ = USE_TRUST_BUNDLE.set(on);
}

/// istiod's `clustertrustbundle` controller: `istio.io:istiod-ca:root-cert`
/// (signer `istio.io/istiod-ca`) holds the root; written when it differs.
async fn upsert_trust_bundle(api: &Api, root: &str) -> Result<usize, String> {
    let path = format!("{TRUST_BUNDLES}/{TRUST_BUNDLE}");
    let written = match api.get(&path).await? {
        Some(existing) if existing["spec"]["trustBundle"] == root => return Ok(0),
        Some(mut existing) => {
            existing["spec"]["trustBundle"] = json!(root);
            api.replace(&path, &existing).await?
        }
        None => {
            let bundle = json!({
                "apiVersion": "certificates.k8s.io/v1beta1",
                "kind": "ClusterTrustBundle",
                "metadata": {"name": TRUST_BUNDLE},
                "spec": {"signerName": TRUST_BUNDLE_SIGNER, "trustBundle": root},
            });
            api.create(TRUST_BUNDLES, &bundle).await?
        }
    };
    Ok(usize::from(matches!(written, Write::Done(_))))
}

/// Namespaces istiod never writes to (`inject.IgnoredNamespaces` but
/// kube-system).
const IGNORED: &[&str] = &["kube-public", "kube-node-lease", "local-path-storage"];

/// Creates or updates the root ConfigMap of every selected namespace,
/// writing only while this replica leads (until `lead_until`: a long pass
/// stops when the lease may have passed to another replica); returns how
/// many it wrote. A namespace whose write fails is logged and skipped.
/// With `PILOT_ENABLE_CA_CRL`, the CA's revocation list (`crl`, empty
/// without one) goes to every namespace's CRL ConfigMap the same way.
pub async fn reconcile(
    api: &Api,
    mesh: &MeshSettings,
    (root, crl): (&str, &str),
    lead_until: Instant,
) -> Result<usize, String> {
    if USE_TRUST_BUNDLE.get().copied().unwrap_or(false) {
        return upsert_trust_bundle(api, root).await;
    }
    let mut wrote = upsert_all(api, mesh, (configmap_name(), ROOT_KEY, root), lead_until).await?;
    if let Some(name) = crl_configmap() {
        wrote += upsert_all(api, mesh, (name, CRL_KEY, crl), lead_until).await?;
    }
    Ok(wrote)
}

/// One ConfigMap (`cm_name`, its `key` set to `value`) in every selected
/// namespace.
async fn upsert_all(
    api: &Api,
    mesh: &MeshSettings,
    (cm_name, key, value): (&str, &str, &str),
    lead_until: Instant,
) -> Result<usize, String> {
    let namespaces = api.get("/api/v1/namespaces").await?.ok_or("cannot list namespaces")?;
    // (Under ISTIO_WATCH_NAMESPACE, that namespace's only: a namespaced
    // RBAC role may allow no more.)
    let collection = match istiod_kubewatch::kube_source::watch_namespace() {
        Some(ns) => format!("/api/v1/namespaces/{ns}/configmaps"),
        None => "/api/v1/configmaps".to_owned(),
    };
    let maps = api
        .get(&format!("{collection}?fieldSelector=metadata.name%3D{cm_name}"))
        .await?
        .ok_or("cannot list configmaps")?;
    let mut existing: BTreeMap<String, Value> = BTreeMap::new();
    for cm in maps["items"].as_array().into_iter().flatten() {
        if cm["metadata"]["name"] == cm_name
            && let Some(ns) = cm["metadata"]["namespace"].as_str()
        {
            existing.insert(ns.to_owned(), cm.clone());
        }
    }
    let mut wrote = 0;
    for ns in namespaces["items"].as_array().into_iter().flatten() {
        let Some(name) = ns["metadata"]["name"].as_str() else { continue };
        // ISTIO_WATCH_NAMESPACE: that namespace only (istiod's namespace
        // controller sees the others' events no more than their objects).
        if istiod_kubewatch::kube_source::watch_namespace().is_some_and(|w| w != name) {
            continue;
        }
        if IGNORED.contains(&name) || ns["status"]["phase"] == "Terminating" {
            continue;
        }
        let labels: BTreeMap<String, String> = ns["metadata"]["labels"]
            .as_object()
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        if !mesh.discovers(&labels) {
            continue;
        }
        let current = existing.remove(name);
        if current.as_ref().is_some_and(|cm| cm["data"][key] == value) {
            continue;
        }
        if Instant::now() >= lead_until {
            tracing::info!(target: "ca", "leadership may have lapsed: the root ConfigMaps wait for the next round");
            break;
        }
        let written = match current {
            None => {
                let cm = json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": cm_name, "namespace": name, "labels": {"istio.io/config": "true"}},
                    "data": {key: value},
                });
                api.create(&format!("/api/v1/namespaces/{name}/configmaps"), &cm).await
            }
            // istiod's InsertDataToConfigMap: the key set, the rest kept.
            Some(mut cm) => {
                cm["data"][key] = json!(value);
                api.replace(&format!("/api/v1/namespaces/{name}/configmaps/{cm_name}"), &cm).await
            }
        };
        match written {
            Ok(Write::Done(_)) => wrote += 1,
            Ok(Write::Conflict) => {
                tracing::debug!(target: "ca", namespace = name, "root ConfigMap changed meanwhile; next round")
            }
            Err(e) => tracing::warn!(target: "ca", namespace = name, error = %e, "cannot write the root ConfigMap"),
        }
    }
    Ok(wrote)
}

/// Runs the election and, while leading, keeps the root ConfigMaps: at
/// once on winning, whenever the CA changes, and every retry period (new
/// namespaces, edited or deleted ConfigMaps). Leading or not, calls
/// `each_round` with the root as often (the wiring keeps this revision's
/// webhook configurations' `caBundle` there).
pub async fn run(
    api: Api,
    leadership: Rc<Leadership>,
    server: Arc<CaServer>,
    mesh: tokio::sync::watch::Receiver<Arc<MeshSettings>>,
    timings: Timings,
    mut each_round: impl AsyncFnMut(&str),
) {
    let mut elector = Elector::new(api.clone(), NAMESPACE_CONTROLLER, Lock::ConfigMap, &leadership, timings);
    let mut changed = server.changed.subscribe();
    let mut leading = false;
    loop {
        let (root, crl) = (server.distributed_root(), server.ca().crl_pem().to_owned());
        let now_leading = elector.lead().await;
        if now_leading != leading {
            leading = now_leading;
            if leading {
                tracing::info!(target: "ca", lock = NAMESPACE_CONTROLLER, "leader election: leading; keeping the root ConfigMaps");
            } else {
                tracing::info!(target: "ca", lock = NAMESPACE_CONTROLLER, "leader election: not leading");
            }
        }
        if let (true, Some(renewed)) = (leading, elector.renewed) {
            let lead_until = renewed + elector.timings.renew_deadline;
            let selectors = mesh.borrow().clone();
            match reconcile(&api, &selectors, (&root, &crl), lead_until).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(target: "ca", configmaps = n, "root ConfigMaps written"),
                Err(e) => tracing::warn!(target: "ca", error = %e, "cannot reconcile the root ConfigMaps"),
            }
        }
        // Every round, leading or not, whatever else follows the root
        // (the webhook configurations' caBundle) is told it.
        each_round(&root).await;
        tokio::select! {
            _ = tokio::time::sleep(elector.timings.retry) => {}
            r = changed.changed() => if r.is_err() { return },
        }
    }
}
