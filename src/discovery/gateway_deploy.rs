//! istiod's Gateway API deployment controller
//! (`pilot/pkg/config/kube/gatewaycommon/deploymentcontroller.go`), with
//! `PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER`: for every Gateway of
//! the `istio` class (or a GatewayClass of `istio.io/gateway-controller`)
//! that names no existing deployment, the replica holding the
//! `istio-gateway-deployment` Lease applies (server-side, field manager
//! `istio.io/gateway-controller`, forced) the ServiceAccount, Deployment
//! and Service the chart's `kube-gateway` template makes
//! (`webhook/inject/gateway.rs`), after recording its controller version
//! on the Gateway. An object that exists without the managed label is
//! someone else's and left alone.
//!
//! istiod re-applies when a Gateway, the injection configuration or an
//! object it made changes; istiod-rs watches the first two and, for the
//! third, applies everything again every [`RESYNC`] (a no-op for the API
//! server when nothing drifted).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use tokio::sync::watch;

use crate::ca::kapi::Api;
use crate::ca::namespaces::{Elector, Timings};
use crate::webhook::inject::gateway::{self, Settings};

/// istiod's lease for the deployment controller.
pub(super) const ELECTION: &str = "istio-gateway-deployment";
/// The field manager of every apply.
const FIELD_MANAGER: &str = gateway::CONTROLLER;
/// Everything is applied again this often (objects deleted or edited by
/// hand come back).
const RESYNC: Duration = Duration::from_secs(300);

/// The Gateways to deploy, as the config source last listed them.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Desired {
    /// Each Gateway of a class this controller handles, as the API server
    /// serves it.
    pub(crate) gateways: Vec<Json>,
}

/// The Gateways of `objects` this controller handles: class `istio`
/// (without a GatewayClass of that name saying otherwise) or a class whose
/// controller is istiod's, and this revision's (`istio.io/rev`).
pub(crate) fn desired(objects: &istiod_kubewatch::objects::Objects, revision: &str) -> Desired {
    use istiod_kubewatch::gateway_api::GatewayApiSpec;
    let classes: BTreeMap<&str, &str> = objects
        .gateway_api
        .iter()
        .filter_map(|o| match &o.spec {
            GatewayApiSpec::GatewayClass(c) => Some((o.meta.name.as_str(), c.controller_name.as_str())),
            _ => None,
        })
        .collect();
    let mine = |labels: &BTreeMap<String, String>| match labels.get("istio.io/rev") {
        None => revision.is_empty() || revision == "default",
        Some(r) => r == revision || (r == "default" && revision.is_empty()),
    };
    let mut gateways: Vec<Json> = objects
        .gateway_api
        .iter()
        .filter_map(|o| match &o.spec {
            GatewayApiSpec::Gateway(g) => {
                let controller = classes
                    .get(g.gateway_class_name.as_str())
                    .copied()
                    .or((g.gateway_class_name == gateway::DEFAULT_CLASS).then_some(gateway::CONTROLLER));
                (controller == Some(gateway::CONTROLLER) && mine(&o.meta.labels))
                    .then(|| gateway::gateway_json(&o.meta, g))
            }
            _ => None,
        })
        .collect();
    gateways.sort_by_key(key);
    Desired { gateways }
}

fn key(gw: &Json) -> String {
    format!(
        "{}/{}",
        gw["metadata"]["namespace"].as_str().unwrap_or_default(),
        gw["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn s(v: &Json) -> &str {
    v.as_str().unwrap_or_default()
}

/// The API path of a generated object.
fn path_of(obj: &Json) -> Result<String, String> {
    let (ns, name) = (s(&obj["metadata"]["namespace"]), s(&obj["metadata"]["name"]));
    let (prefix, plural) = match s(&obj["kind"]) {
        "Deployment" => ("/apis/apps/v1", "deployments"),
        "Service" => ("/api/v1", "services"),
        "ServiceAccount" => ("/api/v1", "serviceaccounts"),
        "HorizontalPodAutoscaler" => ("/apis/autoscaling/v2", "horizontalpodautoscalers"),
        "PodDisruptionBudget" => ("/apis/policy/v1", "poddisruptionbudgets"),
        other => return Err(format!("unexpected object kind {other:?}")),
    };
    Ok(format!("{prefix}/namespaces/{ns}/{plural}/{name}"))
}

/// `GetVersionAsInt`: `1.28` → 128, -1 when the API server does not say.
pub(super) async fn kube_version(api: &Api) -> i64 {
    let Ok(Some(v)) = api.get("/version").await else { return -1 };
    let num = |f: &str| s(&v[f]).chars().filter(char::is_ascii_digit).collect::<String>().parse::<i64>().ok();
    match (num("major"), num("minor")) {
        (Some(major), Some(minor)) => major * 100 + minor,
        _ => -1,
    }
}

/// The overlays for `gw`: the oldest ConfigMap of `system_ns` labelled
/// with the Gateway's class, then the `parametersRef` ConfigMap of its
/// namespace (which must exist).
async fn overlays(api: &Api, system_ns: &str, gw: &Json) -> Result<Vec<BTreeMap<String, String>>, String> {
    let class = s(&gw["spec"]["gatewayClassName"]);
    let data = |cm: &Json| -> BTreeMap<String, String> {
        cm["data"].as_object().into_iter().flatten().map(|(k, v)| (k.clone(), s(v).to_owned())).collect()
    };
    let mut out = Vec::new();
    let label = format!("{}={class}", gateway::CLASS_DEFAULTS_LABEL);
    let list = format!(
        "/api/v1/namespaces/{system_ns}/configmaps?labelSelector={}",
        label.replace('/', "%2F").replace('=', "%3D")
    );
    if let Some(l) = api.get(&list).await? {
        let mut items: Vec<&Json> = l["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["metadata"]["labels"][gateway::CLASS_DEFAULTS_LABEL] == class)
            .collect();
        items
            .sort_by_key(|c| (s(&c["metadata"]["creationTimestamp"]).to_owned(), s(&c["metadata"]["name"]).to_owned()));
        if let Some(c) = items.first() {
            out.push(data(c));
        }
    }
    if let Some(name) = gateway::parameters_ref(gw)? {
        let ns = s(&gw["metadata"]["namespace"]);
        match api.get(&format!("/api/v1/namespaces/{ns}/configmaps/{name}")).await? {
            Some(cm) => out.push(data(&cm)),
            None => {
                return Err(format!("parametersRef targeting configmap \"{ns}/{name}\", but configmap does not exist"));
            }
        }
    }
    Ok(out)
}

/// Applies `objects` (and first the version, when `take_over`); an object
/// that exists without the managed label is skipped.
async fn apply(api: &Api, gw: &Json, take_over: bool, objects: Vec<Json>) -> Result<(), String> {
    let (ns, name) = (s(&gw["metadata"]["namespace"]), s(&gw["metadata"]["name"]));
    if take_over {
        let path = format!("/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/gateways/{name}/status");
        api.apply(&path, &gateway::version_patch(), FIELD_MANAGER)
            .await
            .map_err(|e| format!("update gateway annotation: {e}"))?;
    }
    for mut obj in objects {
        let path = path_of(&obj)?;
        if let Some(existing) = api.get(&path).await? {
            if existing["metadata"]["labels"].get(gateway::MANAGED_LABEL).is_none() {
                tracing::debug!(target: "model", path, "skipping, already managed by someone else");
                continue;
            }
            // Ensure our claim is not stale.
            obj["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"].clone();
            // Deployments made before 1.24 keep their selector (it cannot
            // change).
            if s(&obj["kind"]) == "Deployment" {
                let old = &existing["spec"]["selector"];
                if !s(&old["matchLabels"]["istio.io/gateway-name"]).is_empty() {
                    obj["spec"]["selector"] = old.clone();
                    obj["spec"]["template"]["metadata"]["labels"]["istio.io/gateway-name"] =
                        existing["spec"]["template"]["metadata"]["labels"]["istio.io/gateway-name"].clone();
                }
            }
        }
        api.apply(&path, &obj, FIELD_MANAGER).await.map_err(|e| format!("apply failed: patch {path}: {e}"))?;
    }
    Ok(())
}

/// What the controller needs besides the Gateways.
pub(super) struct Context {
    pub(super) api: Api,
    /// istiod's namespace (the class defaults live there; the Lease too).
    pub(super) namespace: String,
    /// This replica's identity in the election.
    pub(super) me: String,
    /// The injection configuration (templates, values, mesh) and the
    /// ProxyConfigs.
    pub(super) webhooks: Rc<crate::webhook::Webhooks>,
    pub(super) settings: Settings,
}

/// Runs the election and, while leading, keeps the Gateways' deployments.
pub(super) async fn run(cx: Context, mut desired: watch::Receiver<Arc<Desired>>) {
    let timings = Timings::istiod();
    let mut elector = Elector::named(cx.api.clone(), ELECTION, cx.namespace.clone(), cx.me.clone(), timings);
    let mut settings = cx.settings.clone();
    settings.kube_version = kube_version(&cx.api).await;
    // Per Gateway: the fingerprint of what was last applied for it.
    let mut done: BTreeMap<String, u64> = BTreeMap::new();
    // Per Gateway: the last refusal logged (logged again only when it changes).
    let mut refused: BTreeMap<String, String> = BTreeMap::new();
    let mut leading = false;
    let mut last_lead: Option<Instant> = None;
    let mut last_resync = Instant::now();
    let mut missing_logged = false;
    // What the last pass saw (the Gateways, the injector, the
    // ProxyConfigs), and whether an apply failed and is to be retried.
    let mut last_pass: Option<(usize, usize, usize)> = None;
    let mut retry_at: Option<Instant> = None;
    loop {
        if last_lead.is_none_or(|t| t.elapsed() >= timings.retry) {
            let now_leading = elector.lead().await;
            last_lead = Some(Instant::now());
            if now_leading != leading {
                leading = now_leading;
                done.clear();
                tracing::info!(target: "model", lease = ELECTION, leading, "leader election for Gateway API deployments");
            }
        }
        if last_resync.elapsed() >= RESYNC {
            done.clear();
            last_pass = None;
            last_resync = Instant::now();
        }
        let injector = cx.webhooks.injector.borrow().clone();
        let crs = cx.webhooks.proxy_configs.borrow().clone();
        let gateways = desired.borrow_and_update().clone();
        let seen = (
            Arc::as_ptr(&gateways) as usize,
            injector.as_ref().map_or(0, |i| Arc::as_ptr(i) as usize),
            Arc::as_ptr(&crs) as usize,
        );
        let due = !leading
            || last_pass != Some(seen)
            || done.is_empty() && !gateways.gateways.is_empty()
            || retry_at.is_some_and(|t| t <= Instant::now());
        if !due {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                r = desired.changed() => if r.is_err() { return },
            }
            continue;
        }
        match (&injector, leading) {
            (Some(inj), true) => {
                last_pass = Some(seen);
                retry_at = None;
                for gw in &gateways.gateways {
                    let k = key(gw);
                    let take_over = match gateway::managed(gw, &settings) {
                        Ok(t) => t,
                        Err(why) => {
                            tracing::debug!(target: "model", gateway = %k, "not deployed: {why}");
                            continue;
                        }
                    };
                    let rendered = match overlays(&cx.api, &cx.namespace, gw).await {
                        Ok(o) => gateway::render(inj, &crs, gw, &settings, &o),
                        Err(e) => Err(e),
                    };
                    let objects = match rendered {
                        Ok(o) => o,
                        Err(e) => {
                            // Not retried until something changes (istiod:
                            // rendering errors are not ephemeral).
                            if refused.get(&k) != Some(&e) {
                                tracing::error!(target: "model", gateway = %k, error = %e, "cannot deploy the gateway");
                                refused.insert(k.clone(), e);
                            }
                            continue;
                        }
                    };
                    refused.remove(&k);
                    let fingerprint =
                        crate::generator::mix((take_over, serde_json::to_vec(&objects).unwrap_or_default()));
                    if done.get(&k) == Some(&fingerprint) {
                        continue;
                    }
                    match apply(&cx.api, gw, take_over, objects).await {
                        Ok(()) => {
                            tracing::info!(target: "model", gateway = %k, "gateway deployment updated");
                            done.insert(k, fingerprint);
                        }
                        Err(e) => {
                            tracing::warn!(target: "model", gateway = %k, error = %e, "cannot deploy the gateway");
                            retry_at = Some(Instant::now() + timings.retry);
                        }
                    }
                }
                let keys: std::collections::BTreeSet<String> = gateways.gateways.iter().map(key).collect();
                done.retain(|k, _| keys.contains(k));
            }
            (None, true) if !missing_logged => {
                tracing::warn!(target: "model", "Gateway API deployments wait for the injector's configuration (its kube-gateway template)");
                missing_logged = true;
            }
            _ => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            r = desired.changed() => if r.is_err() { return },
        }
    }
}
