//! istiod's Gateway API deployment controller
//! (`pilot/pkg/config/kube/gatewaycommon/deploymentcontroller.go`), with
//! `PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER`: for every Gateway of
//! the `istio` class (or a GatewayClass of `istio.io/gateway-controller`)
//! that names no existing deployment, the replica holding the
//! `istio-gateway-deployment-<revision>` Lease applies (server-side, field manager
//! `istio.io/gateway-controller`, forced) the ServiceAccount, Deployment
//! and Service the chart's `kube-gateway` template makes
//! (`webhook/inject/gateway.rs`), after recording its controller version
//! on the Gateway. An object that exists without the managed label is
//! someone else's and left alone.
//!
//! istiod re-applies when a Gateway, the injection configuration, an
//! overlay ConfigMap or an object it made changes; istiod-rs watches the
//! first two (and the ProxyConfigs) and, for the others, applies
//! everything again every [`RESYNC`] (a no-op for the API server when
//! nothing drifted). A failed apply is retried after [`FIRST_RETRY`],
//! doubling; a Gateway that cannot be rendered waits for a change.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use tokio::sync::watch;

use istiod_kubewatch::kapi::Api;
use istiod_kubewatch::leader::{Elector, Leadership, Lock, Timings};
use istiod_webhook::inject::gateway::{self, Settings, s};

/// istiod's lease for the deployment controller.
pub(super) const ELECTION: &str = "istio-gateway-deployment";
/// The field manager of every apply: the Gateway's class's controller.
fn field_manager(gw: &Json) -> &'static str {
    gateway::class_info(gw).controller
}
/// Everything is applied again this often (objects deleted or edited by
/// hand come back).
const RESYNC: Duration = Duration::from_secs(300);

/// The Gateways to deploy, as the config source last listed them.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Desired {
    /// Each Gateway of a class this controller handles, as the API server
    /// serves it, with a hash of it (computed once here, not on every
    /// pass of the controller).
    pub(crate) gateways: Vec<(Json, u64)>,
}

/// The Gateways of `objects` this controller handles: class `istio`
/// (without a GatewayClass of that name saying otherwise) or a class whose
/// controller is istiod's, and this revision's (`istio.io/rev`, tags).
pub(crate) fn desired(objects: &istiod_config::objects::Objects, tags: &super::revisions::Tags) -> Desired {
    use istiod_config::gateway_api::GatewayApiSpec;
    let handled = istiod_config::gateway_convert::handled_classes(&objects.gateway_api);
    let waypoint = istiod_config::gateway_convert::waypoint_classes(&objects.gateway_api);
    // tagWatcher.IsMine: the Gateway's `istio.io/rev`, else its
    // namespace's.
    let ns_rev: BTreeMap<&str, &str> = objects
        .namespaces
        .iter()
        .filter_map(|n| n.metadata.labels.get("istio.io/rev").map(|r| (n.metadata.name.as_str(), r.as_str())))
        .collect();
    let mine = |meta: &istiod_config::meta::Meta| {
        let selected = meta.labels.get("istio.io/rev").map(String::as_str).or_else(|| ns_rev.get(meta.ns()).copied());
        tags.is_mine(selected.unwrap_or_default())
    };
    let namespaces: BTreeMap<String, BTreeMap<String, String>> =
        objects.namespaces.iter().map(|n| (n.metadata.name.clone(), n.metadata.labels.clone())).collect();
    let mut gateways: Vec<(Json, u64)> = objects
        .gateway_api
        .iter()
        .filter_map(|o| match &o.spec {
            GatewayApiSpec::Gateway(g) => {
                let waypoint = waypoint(&g.gateway_class_name);
                ((handled(&g.gateway_class_name) || waypoint) && mine(&o.meta)).then(|| {
                    let mut gw = gateway::gateway_json(&o.meta, g);
                    // A waypoint's class is the mesh controller's (its
                    // template, names and Service type).
                    if waypoint {
                        gw[gateway::CONTROLLER_FIELD] = serde_json::json!(gateway::MESH_CONTROLLER);
                    }
                    // The listeners of the ListenerSets it takes are ports of
                    // its Service too; a change to them applies it again.
                    let added =
                        istiod_config::gateway_convert::listener_set_listeners(&objects.gateway_api, o, &namespaces);
                    if !added.is_empty() {
                        gw[gateway::LISTENER_SET_LISTENERS] = added
                            .iter()
                            .map(|l| serde_json::json!({"name": l.name, "port": l.port, "protocol": l.protocol}))
                            .collect();
                    }
                    let hash = istiod_mesh::generator::mix(gw.to_string());
                    (gw, hash)
                })
            }
            _ => None,
        })
        .collect();
    gateways.sort_by_key(|(gw, _)| key(gw));
    Desired { gateways }
}

fn key(gw: &Json) -> String {
    format!(
        "{}/{}",
        gw["metadata"]["namespace"].as_str().unwrap_or_default(),
        gw["metadata"]["name"].as_str().unwrap_or_default()
    )
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
        api.apply(&path, &gateway::version_patch(), field_manager(gw))
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
        api.apply(&path, &obj, field_manager(gw)).await.map_err(|e| format!("apply failed: patch {path}: {e}"))?;
    }
    Ok(())
}

/// What the controller needs besides the Gateways.
pub(super) struct Context {
    pub(super) api: Api,
    /// This replica's elections, in istiod's namespace (where the class
    /// defaults live too).
    pub(super) leadership: Rc<Leadership>,
    /// The injection configuration (templates, values, mesh) and the
    /// ProxyConfigs.
    pub(super) webhooks: Rc<istiod_webhook::Webhooks>,
    pub(super) settings: Settings,
}

/// The first retry after an apply failed; each failure doubles it, up to
/// [`RESYNC`].
const FIRST_RETRY: Duration = Duration::from_secs(5);

/// Where one Gateway stands.
enum Outcome {
    /// Applied, from these inputs.
    Applied(u64),
    /// Not deployable from these inputs (a rendering error): not tried
    /// again until they change.
    Refused(u64),
    /// The apply failed; tried again at `next` (or when the inputs change).
    Failed { input: u64, attempts: u32, next: Instant },
}

/// An `Arc` seen before, numbered: a new one (not the same allocation)
/// gets the next number, so inputs are compared without hashing them.
struct Seen<T> {
    held: Option<Arc<T>>,
    generation: u64,
}

impl<T> Seen<T> {
    fn new() -> Self {
        Seen { held: None, generation: 0 }
    }

    fn see(&mut self, now: Option<&Arc<T>>) -> u64 {
        let same = match (&self.held, now) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.held = now.cloned();
            self.generation += 1;
        }
        self.generation
    }
}

/// Runs the election and, while leading, keeps the Gateways' deployments.
pub(super) async fn run(cx: Context, mut desired: watch::Receiver<Arc<Desired>>) {
    let timings = Timings::istiod();
    let lease = cx.leadership.per_revision(ELECTION);
    let mut elector = Elector::new(cx.api.clone(), &lease, Lock::Lease, &cx.leadership, timings);
    let mut settings = cx.settings.clone();
    let mut outcomes: BTreeMap<String, Outcome> = BTreeMap::new();
    let (mut injectors, mut proxy_configs) = (Seen::new(), Seen::new());
    let mut leading = false;
    let mut last_lead: Option<Instant> = None;
    let mut last_resync = Instant::now();
    let mut missing_logged = false;
    loop {
        if last_lead.is_none_or(|t| t.elapsed() >= timings.retry) {
            let leads = elector.lead().await;
            last_lead = Some(Instant::now());
            if leads != leading {
                // A new term starts from what the cluster holds.
                leading = leads;
                outcomes.clear();
                tracing::info!(target: "model", lease = %lease, leading, "leader election for Gateway API deployments");
            }
        }
        if last_resync.elapsed() >= RESYNC {
            // Objects are not watched: apply everything again (and ask
            // again for ConfigMaps a refusal named).
            outcomes.clear();
            last_resync = Instant::now();
        }
        let lead_now = elector.still_leading();
        let injector = cx.webhooks.injector.borrow().clone();
        match (&injector, lead_now) {
            (Some(inj), true) => {
                if settings.kube_version < 0 {
                    settings.kube_version = kube_version(&cx.api).await;
                }
                let crs = cx.webhooks.proxy_configs.borrow().clone();
                let generations = (injectors.see(injector.as_ref()), proxy_configs.see(Some(&crs)));
                let gateways = desired.borrow_and_update().clone();
                // Waypoints are deployed with PILOT_ENABLE_AMBIENT_WAYPOINTS.
                let deployed = |gw: &&(Json, u64)| {
                    settings.ambient_waypoints || gateway::class_info(&gw.0).controller != gateway::MESH_CONTROLLER
                };
                for (gw, hash) in gateways.gateways.iter().filter(deployed) {
                    if !elector.still_leading() {
                        // The lease may have passed on: renew before more writes.
                        last_lead = None;
                        break;
                    }
                    let k = key(gw);
                    let input = istiod_mesh::generator::mix((hash, generations, &settings));
                    let now = Instant::now();
                    let (attempts, skip) = match outcomes.get(&k) {
                        Some(Outcome::Applied(i) | Outcome::Refused(i)) if *i == input => (0, true),
                        Some(Outcome::Failed { input: i, attempts, next }) if *i == input => (*attempts, *next > now),
                        _ => (0, false),
                    };
                    if skip {
                        continue;
                    }
                    let take_over = match gateway::managed(gw, &settings) {
                        Ok(t) => t,
                        Err(why) => {
                            tracing::debug!(target: "model", gateway = %k, "not deployed: {why}");
                            outcomes.insert(k, Outcome::Refused(input));
                            continue;
                        }
                    };
                    let rendered = match overlays(&cx.api, &cx.leadership.namespace, gw).await {
                        Ok(o) => gateway::render(inj, &crs, gw, &settings, &o),
                        Err(e) => Err(e),
                    };
                    let objects = match rendered {
                        Ok(o) => o,
                        Err(e) => {
                            // Not tried again until something changes
                            // (istiod: rendering errors are not ephemeral).
                            tracing::error!(target: "model", gateway = %k, error = %e, "cannot deploy the gateway");
                            outcomes.insert(k, Outcome::Refused(input));
                            continue;
                        }
                    };
                    match apply(&cx.api, gw, take_over, objects).await {
                        Ok(()) => {
                            tracing::info!(target: "model", gateway = %k, "gateway deployment updated");
                            outcomes.insert(k, Outcome::Applied(input));
                        }
                        Err(e) => {
                            let wait = (FIRST_RETRY * 2u32.saturating_pow(attempts.min(16))).min(RESYNC);
                            tracing::warn!(target: "model", gateway = %k, error = %e, retry_in = ?wait, "cannot deploy the gateway");
                            outcomes.insert(k, Outcome::Failed { input, attempts: attempts + 1, next: now + wait });
                        }
                    }
                }
                let keys: std::collections::BTreeSet<String> =
                    gateways.gateways.iter().map(|(gw, _)| key(gw)).collect();
                outcomes.retain(|k, _| keys.contains(k));
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
