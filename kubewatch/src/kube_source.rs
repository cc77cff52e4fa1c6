//! Kubernetes as a source: one kube-rs watcher per kind (list, then watch
//! from the list's version with bookmarks; relist on 410 Gone), each
//! keeping a store that is swapped whole on a relist, so a relist neither
//! loses nor duplicates objects. Objects arrive as JSON and are read into
//! the same typed structs as the config directory's, so both sources give
//! the same model for the same objects; each object is converted once, when
//! its event arrives, and every update names the objects that changed since
//! the previous one (`Update::changed`), so the control thread need not
//! compare them.
//!
//! During an API outage the last state stays in force (the watchers retry
//! with backoff); the source is ready once every kind has been listed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::watch;

use istiod_config::manifest::{Object, ObjectRef};
use istiod_config::objects::{EndpointSlice, KINDS, Namespace, Node, Objects, Pod, Secret, Service};

/// Kinds from here on are CRDs: absent ones count as synced and empty.
const FIRST_CRD: usize = 6;

/// What the source hands the control thread.
#[derive(Debug, Clone)]
pub struct Update {
    /// Every object in force.
    pub objects: Objects,
    /// The objects added, changed or removed since the previous update;
    /// `None` when that is not known (the first update, a relist).
    pub changed: Option<Vec<ObjectRef>>,
}

impl Update {
    /// `self` followed by `newer`, as one update: the newer objects, and
    /// every change either named (unknown if either did not know).
    fn then(self, newer: Update) -> Update {
        let changed = match (self.changed, newer.changed) {
            (Some(mut a), Some(b)) => {
                a.extend(b);
                a.sort();
                a.dedup();
                Some(a)
            }
            _ => None,
        };
        Update { objects: newer.objects, changed }
    }
}

/// Where the source leaves updates for the control thread: one slot, so
/// updates the consumer has not taken yet are merged into one (one copy of
/// the objects, every change named) instead of queueing a copy each.
#[derive(Default)]
pub struct Updates {
    slot: Mutex<Option<Update>>,
    ready: tokio::sync::Notify,
    /// Asks the source for every object again, as after a relist.
    resend: Mutex<Option<tokio::sync::mpsc::UnboundedSender<()>>>,
    whole: std::sync::atomic::AtomicBool,
}

impl Updates {
    fn put(&self, u: Update) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        *slot = Some(match slot.take() {
            Some(older) => older.then(u),
            None => u,
        });
        drop(slot);
        self.ready.notify_one();
    }

    /// Asks for an update with every object and no list of changes (a
    /// new mesh configuration rebuilds from everything); once the source
    /// has listed every kind.
    pub fn resend_all(&self) {
        self.whole.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(tx) = self.resend.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let _ = tx.send(());
        }
    }

    /// Asks for an update now, with the changes since the last one (none
    /// may be left: an update that names no change), once the source has
    /// listed every kind: what another source changed (a remote cluster)
    /// is applied with these objects.
    pub fn poke(&self) {
        if let Some(tx) = self.resend.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let _ = tx.send(());
        }
    }

    /// The next update: everything since the last one taken.
    pub async fn next(&self) -> Update {
        loop {
            if let Some(u) = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return u;
            }
            self.ready.notified().await;
        }
    }
}

struct Stores {
    objects: [BTreeMap<(String, String), Object>; KINDS.len()],
    synced: [bool; KINDS.len()],
    /// Since the last update; `None`: unknown.
    changed: Option<std::collections::BTreeSet<ObjectRef>>,
}

// (Arrays derive Default only up to 32 elements.)
impl Default for Stores {
    fn default() -> Self {
        Stores { objects: std::array::from_fn(|_| BTreeMap::new()), synced: [false; KINDS.len()], changed: None }
    }
}

fn key(v: &Value) -> (String, String) {
    let m = &v["metadata"];
    (m["namespace"].as_str().unwrap_or_default().to_owned(), m["name"].as_str().unwrap_or_default().to_owned())
}

/// The typed object of kind `i` (an index into [`KINDS`]), or why not.
fn convert(i: usize, v: &Value) -> Result<Object, String> {
    fn read<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T, String> {
        serde_json::from_value(v.clone()).map_err(|e| e.to_string())
    }
    Ok(match i {
        0 => Object::Service(read::<Service>(v)?),
        1 => Object::EndpointSlice(read::<EndpointSlice>(v)?),
        2 => Object::Pod(read::<Pod>(v)?),
        3 => Object::Node(read::<Node>(v)?),
        4 => Object::Namespace(read::<Namespace>(v)?),
        // istiod's informer leaves Helm releases and tokens out.
        5 => match read::<Secret>(v)? {
            s if s.is_read() => Object::Secret(s),
            _ => Object::Skipped("Secret".into()),
        },
        _ if KINDS[i].2 == "Ingress" => Object::Ingress(read(v)?),
        _ if KINDS[i].2 == "IngressClass" => Object::IngressClass(read(v)?),
        _ if KINDS[i].2 == "ConfigMap" => Object::ConfigMap(read::<istiod_config::objects::ConfigMap>(v)?.slim()),
        _ if KINDS[i].0 == istiod_config::gateway_api::GROUP => {
            Object::GatewayApi(istiod_config::gateway_api::parse(KINDS[i].2, v.clone())?)
        }
        _ => {
            let y = serde_yaml_ng::to_value(v).map_err(|e| e.to_string())?;
            Object::Istio(istiod_config::istio::parse(&y).map_err(|e| e.to_string())?)
        }
    })
}

/// Every object in force.
fn build(stores: &Stores) -> Objects {
    let mut o = Objects::default();
    for map in &stores.objects {
        for obj in map.values() {
            o.push(obj.clone());
        }
    }
    o
}

/// Follows every kind and sends the objects whole whenever they change,
/// once all kinds have been listed (see [`run_updates`]).
pub async fn run(client: kube::Client, tx: watch::Sender<Option<Objects>>) {
    let updates = Arc::new(Updates::default());
    tokio::spawn(run_updates(client, updates.clone()));
    loop {
        if tx.send(Some(updates.next().await.objects)).is_err() {
            return;
        }
    }
}

/// Follows every kind and leaves an [`Update`] in `out` whenever objects
/// change, once all kinds have been listed.
pub async fn run_updates(client: kube::Client, out: Arc<Updates>) {
    run_kinds(client, out, |_| true, config_cluster()).await
}

static CONFIG_CLUSTER: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Names the config cluster (`--clusterID`) in the watches' error counts;
/// the first call wins.
pub fn set_config_cluster(id: &str) {
    let _ = CONFIG_CLUSTER.set(id.to_owned());
}

fn config_cluster() -> Arc<str> {
    CONFIG_CLUSTER.get().map_or("Kubernetes", String::as_str).into()
}

/// The kinds a remote cluster's registry is read from (istiod's remote
/// kube controller): Services, EndpointSlices, Pods, Nodes, Namespaces.
const REGISTRY_KINDS: usize = 5;

/// Whether remote clusters' Gateway API Gateways are read too
/// (`PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API`: istiod's network manager
/// of each cluster watches them for east-west gateways).
static REMOTE_GATEWAYS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets whether [`run_registry`] reads Gateway API Gateways.
pub fn set_remote_gateways(on: bool) {
    REMOTE_GATEWAYS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The index of the Gateway API Gateway in [`KINDS`].
fn gateway_api_gateway(i: usize) -> bool {
    KINDS.get(i).is_some_and(|(g, _, k, _)| *g == "gateway.networking.k8s.io" && *k == "Gateway")
}

/// [`run_updates`] for a remote cluster: its registry's kinds only, and
/// its Gateway API Gateways with [`set_remote_gateways`]. Dropping the
/// future stops every watch it started.
pub async fn run_registry(client: kube::Client, out: Arc<Updates>, cluster: Arc<str>) {
    match REMOTE_GATEWAYS.load(std::sync::atomic::Ordering::Relaxed) {
        true => run_kinds(client, out, |i| i < REGISTRY_KINDS || gateway_api_gateway(i), cluster).await,
        false => run_kinds(client, out, |i| i < REGISTRY_KINDS, cluster).await,
    }
}

/// `ISTIO_WATCH_NAMESPACE`: the one namespace whose namespaced objects are
/// read (istiod's `kclient` informers' `ToOpts`); cluster-scoped kinds
/// are read whole. Set once, before the first watch.
static WATCH_NAMESPACE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Reads namespaced kinds in `namespace` only (`ISTIO_WATCH_NAMESPACE`).
pub fn set_watch_namespace(namespace: &str) {
    if !namespace.is_empty() {
        let _ = WATCH_NAMESPACE.set(namespace.to_owned());
    }
}

/// The namespace set by [`set_watch_namespace`], if any.
pub fn watch_namespace() -> Option<&'static str> {
    WATCH_NAMESPACE.get().map(String::as_str)
}

/// The kinds of [`KINDS`] that are cluster-scoped.
const CLUSTER_SCOPED: [&str; 4] = ["Node", "Namespace", "GatewayClass", "IngressClass"];

/// The watches of one source: aborted together when it is dropped.
struct Watches(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Watches {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

async fn run_kinds(client: kube::Client, out: Arc<Updates>, watched: fn(usize) -> bool, cluster: Arc<str>) {
    let stores = Arc::new(Mutex::new(Stores::default()));
    let (changed_tx, mut changed_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut watches = Watches(Vec::new());
    for (i, (group, version, kind, plural)) in KINDS.into_iter().enumerate() {
        if !watched(i) || !istiod_config::objects::reads(group, kind) {
            // Not read here: nothing of that kind, and nothing to wait for.
            stores.lock().unwrap_or_else(|e| e.into_inner()).synced[i] = true;
            continue;
        }
        let watch = {
            let client = client.clone();
            move |version: &str| {
                let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
                let api: Api<DynamicObject> = match watch_namespace() {
                    Some(ns) if !CLUSTER_SCOPED.contains(&kind) => Api::namespaced_with(client.clone(), ns, &ar),
                    _ => Api::all_with(client.clone(), &ar),
                };
                let mut config = watcher::Config::default();
                if kind == "Secret" {
                    // istiod's informer: Helm releases (up to 1 MiB each) and
                    // tokens are never credentials; the API server leaves them
                    // out (convert drops them too, for servers that do not).
                    config = config.fields("type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token");
                }
                watcher::watcher(api, config).default_backoff().boxed()
            }
        };
        let (stores, changed) = (stores.clone(), changed_tx.clone());
        let cluster = cluster.clone();
        watches.0.push(tokio::spawn(async move {
            let mut buffer: BTreeMap<(String, String), Object> = BTreeMap::new();
            let mut events = watch(version);
            // A CRD that serves only an older version is watched there.
            let mut older = istiod_config::objects::older_version(group, kind);
            while let Some(ev) = events.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        let absent =
                            matches!(&e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404);
                        if absent && let Some(v) = older.take() {
                            tracing::info!(target: "model", kind, version = v, "{version} not served; watching {v}");
                            events = watch(v);
                            continue;
                        }
                        if absent && i >= FIRST_CRD {
                            // A CRD that is not installed: nothing of that kind,
                            // and keep looking in case it appears.
                            let mut s = stores.lock().unwrap_or_else(|e| e.into_inner());
                            if !s.synced[i] {
                                tracing::warn!(target: "model", kind, "CRD not installed; skipping it until it appears");
                                s.synced[i] = true;
                                drop(s);
                                let _ = changed.send(());
                            }
                        } else {
                            crate::events::sync_error(&cluster);
                            // Outage or error: keep the last state; the watcher retries.
                            tracing::warn!(target: "model", kind, error = %e, "watch failed; keeping the last state and retrying");
                        }
                        continue;
                    }
                };
                let json = |o: &DynamicObject| serde_json::to_value(o).unwrap_or(Value::Null);
                // Converted once, here; a rejected object is not in force.
                let typed = |v: &Value| match convert(i, v) {
                    Ok(o) => Some(o),
                    Err(e) => {
                        tracing::warn!(target: "model", kind, object = ?key(v), error = %e, "rejected object");
                        None
                    }
                };
                let mut s = stores.lock().unwrap_or_else(|e| e.into_inner());
                match ev {
                    Event::Init => buffer.clear(),
                    Event::InitApply(o) => {
                        crate::events::count(i, crate::events::Event::Add);
                        let v = json(&o);
                        if let Some(t) = typed(&v) {
                            buffer.insert(key(&v), t);
                        }
                        continue;
                    }
                    Event::InitDone => {
                        // A (re)list: what changed is not known.
                        s.objects[i] = std::mem::take(&mut buffer);
                        s.synced[i] = true;
                        s.changed = None;
                    }
                    Event::Apply(o) => {
                        let v = json(&o);
                        let k = key(&v);
                        let seen = s.objects[i].contains_key(&k);
                        let event = if seen { crate::events::Event::Update } else { crate::events::Event::Add };
                        crate::events::count(i, event);
                        let new = typed(&v);
                        if s.objects[i].get(&k) == new.as_ref() {
                            // Nothing we read changed (a status or a
                            // field we do not keep): no update.
                            continue;
                        }
                        let refs: Vec<ObjectRef> = new.iter().map(ObjectRef::of).collect();
                        let old = match new {
                            Some(t) => s.objects[i].insert(k, t),
                            None => s.objects[i].remove(&k),
                        };
                        if let Some(c) = s.changed.as_mut() {
                            c.extend(refs);
                            c.extend(old.as_ref().map(ObjectRef::of));
                        }
                    }
                    Event::Delete(o) => {
                        crate::events::count(i, crate::events::Event::Delete);
                        let v = json(&o);
                        if let Some(old) = s.objects[i].remove(&key(&v))
                            && let Some(c) = s.changed.as_mut()
                        {
                            c.insert(ObjectRef::of(&old));
                        }
                    }
                }
                drop(s);
                if changed.send(()).is_err() {
                    return;
                }
            }
        }));
    }
    // The sender kept for `resend_all`, so the loop below runs while
    // `out` lives.
    *out.resend.lock().unwrap_or_else(|e| e.into_inner()) = Some(changed_tx);
    while changed_rx.recv().await.is_some() {
        while changed_rx.try_recv().is_ok() {}
        let update = {
            let mut s = stores.lock().unwrap_or_else(|e| e.into_inner());
            if !s.synced.iter().all(|x| *x) {
                continue;
            }
            if out.whole.swap(false, std::sync::atomic::Ordering::SeqCst) {
                s.changed = None;
            }
            let changed = s.changed.replace(Default::default()).map(|c| c.into_iter().collect());
            Update { objects: build(&s), changed }
        };
        out.put(update);
    }
}

/// A client for `url` (plain HTTP, e.g. the fake API server).
pub fn client_for(url: &str) -> Result<kube::Client, String> {
    let uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    kube::Client::try_from(kube::Config::new(uri)).map_err(|e| e.to_string())
}
