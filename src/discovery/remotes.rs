//! Remote clusters, as istiod's secret controller
//! (`pkg/kube/multicluster/secretcontroller.go`) finds them: Secrets
//! labelled `istio/multiCluster: "true"` in `--clusterRegistriesNamespace`,
//! each key a cluster ID and its value a kubeconfig. Each remote gets a
//! client and the watches of its registry (Services, EndpointSlices, Pods,
//! Nodes, Namespaces); its objects join the model (`Objects::remotes`,
//! merged by hostname) once it has synced, and every later change
//! rebuilds the model. A Secret added, changed (a kubeconfig rotated, a
//! key added or gone) or deleted is followed at run time; a cluster whose
//! kubeconfig is unchanged keeps its watches. A key naming this cluster is
//! ignored, a cluster ID a Secret earlier in name order already registered
//! is skipped, a kubeconfig that does not parse is reported and skipped,
//! all in istiod's words. A remote that cannot be reached keeps retrying
//! and is reported `timeout` after `PILOT_REMOTE_CLUSTER_TIMEOUT`; it never
//! holds the others back. Kubeconfigs (credentials) are never logged or
//! shown: only cluster IDs and Secret names are.
//!
//! Metrics (istiod's): `istiod_managed_clusters{cluster_type}`,
//! `istiod_remote_cluster_sync_status{cluster,cluster_type,status}`,
//! `remote_cluster_secret_events_total{event}`,
//! `remote_cluster_sync_timeouts_total`. `/debug/clusterz` lists the
//! clusters ([`Remotes::clusterz`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use istiod_config::manifest::ObjectRef;
use istiod_config::objects::Objects;

/// The label that marks a remote cluster's Secret.
pub(super) const SECRET_LABEL: &str = "istio/multiCluster";

/// istiod's sync states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sync {
    Syncing,
    Synced,
    Timeout,
    Closed,
}

impl Sync {
    const ALL: [Sync; 4] = [Sync::Synced, Sync::Syncing, Sync::Timeout, Sync::Closed];

    fn as_str(self) -> &'static str {
        match self {
            Sync::Syncing => "syncing",
            Sync::Synced => "synced",
            Sync::Timeout => "timeout",
            Sync::Closed => "closed",
        }
    }
}

/// What a remote's task shares with the control thread.
struct Shared {
    objects: Option<Arc<Objects>>,
    sync: Sync,
}

/// The remote objects changed since the model last took them: `None` when
/// not known (a cluster came, went, or relisted).
type Pending = Rc<RefCell<Option<Vec<ObjectRef>>>>;

struct Remote {
    /// `<namespace>/<name>` of its Secret.
    secret: String,
    /// A digest of its kubeconfig (an unchanged one keeps the watches).
    digest: u64,
    shared: Rc<RefCell<Shared>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The remote clusters in force.
pub(super) struct Remotes {
    namespace: String,
    local: String,
    timeout: Duration,
    clusters: BTreeMap<String, Remote>,
    /// Each Secret's digest, for istiod's add/update/delete events.
    secrets: BTreeMap<String, u64>,
    /// Keys whose kubeconfig did not parse, by (Secret, cluster) and digest:
    /// reported once per version.
    refused: BTreeMap<(String, String), u64>,
    /// Asks for a model update (a remote's objects changed).
    on_change: Option<Rc<dyn Fn()>>,
    /// What changed since [`Remotes::take_changed`] last said.
    pending: Pending,
    /// With `EXTERNAL_ISTIOD`: what keeping a remote's root ConfigMaps and
    /// webhooks needs.
    roots: Option<Rc<Roots>>,
}

/// What keeps a remote cluster's root ConfigMaps and webhook `caBundle`
/// (istiod's namespace controller and webhook cert patcher, run for the
/// remotes an external istiod leads).
pub(super) struct Roots {
    /// The CA whose root is distributed.
    pub(super) ca: Arc<istiod_ca::CaServer>,
    /// The mesh configuration (its discovery selectors).
    pub(super) mesh: tokio::sync::watch::Receiver<Arc<istiod_mesh::meshconfig::MeshSettings>>,
    /// This replica's election identity, revision and namespace.
    pub(super) identity: String,
    pub(super) revision: String,
    pub(super) namespace: String,
    /// Whether elections are held (`ENABLE_LEADER_ELECTION`).
    pub(super) elect: bool,
    /// Which webhook configurations are patched.
    pub(super) patching: istiod_webhook::patch::Kinds,
}

/// Process-wide series (the metrics handler reads them without the state).
#[derive(Default)]
struct Metrics {
    remotes: usize,
    sync: BTreeMap<String, Sync>,
    events: BTreeMap<&'static str, u64>,
    timeouts: u64,
}

static METRICS: Mutex<Option<Metrics>> = Mutex::new(None);

/// Whether [`initially_synced`] has said yes once.
static SETTLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// istiod's `HasSynced` for readiness, asked once the first snapshot is
/// out (the remotes known at start are registered by then): every remote
/// has synced, timed out or closed. Once true it stays true: a remote
/// added later never makes a ready istiod unready.
pub(super) fn initially_synced() -> bool {
    use std::sync::atomic::Ordering;
    if SETTLED.load(Ordering::SeqCst) {
        return true;
    }
    let done = metrics(|m| m.sync.values().all(|s| *s != Sync::Syncing));
    if done {
        SETTLED.store(true, Ordering::SeqCst);
    }
    done
}

fn metrics<T>(f: impl FnOnce(&mut Metrics) -> T) -> T {
    let mut m = METRICS.lock().unwrap_or_else(|e| e.into_inner());
    f(m.get_or_insert_with(Metrics::default))
}

fn digest(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

impl Remotes {
    /// Remotes registered in `namespace`, this cluster being `local`.
    pub(super) fn new(namespace: String, local: String, timeout: Duration) -> Remotes {
        metrics(|m| m.remotes = 0);
        Remotes {
            namespace,
            local,
            timeout,
            clusters: BTreeMap::new(),
            secrets: BTreeMap::new(),
            refused: BTreeMap::new(),
            on_change: None,
            pending: Rc::new(RefCell::new(Some(Vec::new()))),
            roots: None,
        }
    }

    /// What a remote's change calls.
    pub(super) fn on_change(&mut self, f: Rc<dyn Fn()>) {
        self.on_change = Some(f);
    }

    /// With `EXTERNAL_ISTIOD`: keep the root ConfigMaps and webhooks of
    /// the remotes that name this cluster as their control plane.
    pub(super) fn distribute_roots(&mut self, roots: Roots) {
        self.roots = Some(Rc::new(roots));
    }

    /// Follows the remote Secrets among `objects`: starts, restarts and
    /// stops remotes to match.
    pub(super) fn reconcile(&mut self, objects: &Objects) {
        let mut secrets: Vec<(String, BTreeMap<String, Vec<u8>>)> = objects
            .secrets
            .iter()
            .filter(|s| s.metadata.ns() == self.namespace)
            .filter(|s| s.metadata.labels.get(SECRET_LABEL).is_some_and(|v| v == "true"))
            .map(|s| (format!("{}/{}", s.metadata.ns(), s.metadata.name), s.decoded()))
            .collect();
        secrets.sort_by(|a, b| a.0.cmp(&b.0));
        // istiod's secret events.
        let now: BTreeMap<String, u64> = secrets
            .iter()
            .map(|(name, data)| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                data.hash(&mut h);
                (name.clone(), h.finish())
            })
            .collect();
        // Secrets new or changed since the last round: what is said of
        // their keys is said once, not at every update of the objects.
        let mut fresh = std::collections::BTreeSet::new();
        for (name, d) in &now {
            match self.secrets.get(name) {
                None => count("add"),
                Some(old) if old != d => count("update"),
                Some(_) => continue,
            }
            fresh.insert(name.clone());
            tracing::info!(target: "multicluster", secret = %name, "processing remote config event");
        }
        for name in self.secrets.keys().filter(|n| !now.contains_key(*n)) {
            count("delete");
            tracing::info!(target: "multicluster", secret = %name, "processing remote config event (deleted)");
        }
        self.secrets = now;
        // The cluster each key registers: the first Secret (by name) wins.
        let mut wanted: BTreeMap<String, (String, &[u8])> = BTreeMap::new();
        for (name, data) in &secrets {
            for (cluster, kubeconfig) in data {
                if *cluster == self.local {
                    if fresh.contains(name) {
                        tracing::info!(target: "multicluster", cluster = %cluster, config = %name,
                            "ignoring cluster as it would overwrite the config cluster");
                    }
                    continue;
                }
                if let Some((other, _)) = wanted.get(cluster) {
                    if other != name && fresh.contains(name) {
                        tracing::warn!(target: "multicluster", cluster = %cluster, config = %name,
                            "cluster has already been registered");
                    }
                    continue;
                }
                wanted.insert(cluster.clone(), (name.clone(), kubeconfig));
            }
        }
        self.refused.retain(|(_, cluster), _| wanted.contains_key(cluster));
        let gone: Vec<String> = self.clusters.keys().filter(|c| !wanted.contains_key(*c)).cloned().collect();
        for cluster in gone {
            if let Some(r) = self.clusters.remove(&cluster) {
                tracing::info!(target: "multicluster", cluster = %cluster, secret = %r.secret, "Deleting cluster");
                metrics(|m| m.sync.remove(&cluster));
                self.changed();
            }
        }
        for (cluster, (secret, kubeconfig)) in wanted {
            let d = digest(kubeconfig);
            if self.clusters.get(&cluster).is_some_and(|r| r.digest == d && r.secret == secret) {
                continue;
            }
            if self.refused.get(&(secret.clone(), cluster.clone())) == Some(&d) {
                continue;
            }
            let action = if self.clusters.contains_key(&cluster) { "Update" } else { "Add" };
            let config = std::str::from_utf8(kubeconfig)
                .map_err(|e| e.to_string())
                .and_then(|t| kube::config::Kubeconfig::from_yaml(t).map_err(|e| e.to_string()))
                .and_then(|c| match sanitize(&c, &insecure_options()) {
                    Ok(()) => Ok(c),
                    Err(e) => Err(format!("kubeconfig is not allowed: {e}")),
                });
            let config = match config {
                Ok(c) => c,
                Err(e) => {
                    // The parser's message names a position, not the content.
                    tracing::error!(target: "multicluster", cluster = %cluster, config = %secret,
                        "{action} cluster: create remote cluster failed: invalid kubeconfig: {e}");
                    self.refused.insert((secret, cluster.clone()), d);
                    if self.clusters.remove(&cluster).is_some() {
                        metrics(|m| m.sync.remove(&cluster));
                        self.changed();
                    }
                    continue;
                }
            };
            tracing::info!(target: "multicluster", cluster = %cluster, config = %secret, "{action} cluster");
            let shared = Rc::new(RefCell::new(Shared { objects: None, sync: Sync::Syncing }));
            metrics(|m| m.sync.insert(cluster.clone(), Sync::Syncing));
            let task = tokio::task::spawn_local(follow(
                (cluster.clone(), self.local.clone()),
                config,
                shared.clone(),
                (self.pending.clone(), self.on_change.clone()),
                (self.timeout, self.roots.clone()),
            ));
            // A replaced remote's watches stop as it drops.
            if self.clusters.insert(cluster.clone(), Remote { secret, digest: d, shared, task }).is_some() {
                self.changed();
            }
        }
        metrics(|m| m.remotes = self.clusters.len());
    }

    /// A cluster came or went: what changed is not known.
    fn changed(&self) {
        *self.pending.borrow_mut() = None;
        if let Some(f) = &self.on_change {
            f();
        }
    }

    /// The remote objects changed since the last call (`None`: not known,
    /// rebuild from everything).
    pub(super) fn take_changed(&self) -> Option<Vec<ObjectRef>> {
        self.pending.replace(Some(Vec::new()))
    }

    /// The synced remotes' registries, by cluster ID.
    pub(super) fn objects(&self) -> Vec<(String, Arc<Objects>)> {
        self.clusters.iter().filter_map(|(c, r)| Some((c.clone(), r.shared.borrow().objects.clone()?))).collect()
    }

    /// istiod's `/debug/clusterz` (`ListRemoteClusters`): this cluster,
    /// then each remote with its Secret and sync state.
    pub(super) fn clusterz(&self, local_synced: bool) -> Value {
        let mut out = vec![json!({
            "id": self.local,
            "secretName": "",
            "syncStatus": if local_synced { "synced" } else { "syncing" },
        })];
        for (id, r) in &self.clusters {
            out.push(json!({"id": id, "secretName": r.secret, "syncStatus": r.shared.borrow().sync.as_str()}));
        }
        Value::Array(out)
    }
}

/// `PILOT_INSECURE_MULTICLUSTER_KUBECONFIG_OPTIONS`: the kubeconfig
/// options a remote Secret may use that read files or run programs.
fn insecure_options() -> BTreeSet<String> {
    std::env::var("PILOT_INSECURE_MULTICLUSTER_KUBECONFIG_OPTIONS")
        .unwrap_or_default()
        .split(',')
        .map(|o| o.trim().to_owned())
        .filter(|o| !o.is_empty())
        .collect()
}

/// istiod's `sanitizeKubeConfig`: a remote Secret's kubeconfig may not
/// read this host's files or run its programs (an auth provider other
/// than `oidc`, `clientKey`, `clientCertificate`, `tokenFile`, `exec`)
/// unless `allow` names the option. Anyone who may write a labelled Secret
/// writes these.
pub(super) fn sanitize(config: &kube::config::Kubeconfig, allow: &BTreeSet<String>) -> Result<(), String> {
    for named in &config.auth_infos {
        let Some(a) = named.auth_info.as_ref() else { continue };
        if let Some(p) = a.auth_provider.as_ref().filter(|p| p.name != "oidc" && !allow.contains(&p.name)) {
            return Err(format!("auth provider {} is not allowed", p.name));
        }
        let set = |o: &Option<String>| o.as_deref().is_some_and(|v| !v.is_empty());
        for (present, option) in [
            (set(&a.client_key), "clientKey"),
            (set(&a.client_certificate), "clientCertificate"),
            (set(&a.token_file), "tokenFile"),
            (a.exec.is_some(), "exec"),
        ] {
            if present && !allow.contains(option) {
                return Err(format!("{option} is not allowed"));
            }
        }
    }
    Ok(())
}

fn count(event: &'static str) {
    metrics(|m| *m.events.entry(event).or_default() += 1);
}

/// One remote: a client from its kubeconfig, its registry's watches, each
/// update kept for the model; `timeout` after `timeout` unsynced.
async fn follow(
    (cluster, local): (String, String),
    config: kube::config::Kubeconfig,
    shared: Rc<RefCell<Shared>>,
    (pending, on_change): (Pending, Option<Rc<dyn Fn()>>),
    (timeout, roots): (Duration, Option<Rc<Roots>>),
) {
    let set = |s: Sync| {
        shared.borrow_mut().sync = s;
        metrics(|m| {
            if let Some(v) = m.sync.get_mut(&cluster) {
                *v = s;
            }
        });
    };
    let client = match kube::Config::from_custom_kubeconfig(config, &Default::default()).await {
        Ok(c) => istiod_kubewatch::limit::client(c).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(target: "multicluster", cluster = %cluster, "create remote cluster failed: {e}");
            set(Sync::Closed);
            return;
        }
    };
    let updates = Arc::new(istiod_kubewatch::kube_source::Updates::default());
    let _watches = Abort(tokio::spawn(istiod_kubewatch::kube_source::run_registry(
        client.clone(),
        updates.clone(),
        cluster.as_str().into(),
    )));
    // The remote's root ConfigMaps and webhooks, once its system
    // namespace says this cluster leads it (`EXTERNAL_ISTIOD`).
    let mut _roots: Option<Abort> = None;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let (mut synced, mut timed_out) = (false, false);
    loop {
        tokio::select! {
            u = updates.next() => {
                if !synced {
                    tracing::info!(target: "multicluster", cluster = %cluster, "remote cluster synced");
                    synced = true;
                }
                // The first objects (or a relist) change what is not known.
                let first = shared.borrow().objects.is_none();
                let mut p = pending.borrow_mut();
                match (p.as_mut(), u.changed) {
                    (Some(p), Some(refs)) if !first => p.extend(refs),
                    _ => *p = None,
                }
                drop(p);
                if let Some(r) = roots.as_ref().filter(|_| _roots.is_none())
                    && leads(&u.objects, &r.namespace, &local)
                {
                    tracing::info!(target: "multicluster", cluster = %cluster,
                        "starting namespace controller and webhook patcher for cluster");
                    _roots = Some(Abort(tokio::task::spawn_local(keep_roots(client.clone(), r.clone()))));
                }
                shared.borrow_mut().objects = Some(Arc::new(u.objects));
                set(Sync::Synced);
                if let Some(f) = &on_change {
                    f();
                }
            }
            _ = &mut deadline, if !synced && !timed_out => {
                tracing::warn!(target: "multicluster", cluster = %cluster, timeout = ?timeout,
                    "remote cluster did not sync in time; serving without it until it does");
                metrics(|m| m.timeouts += 1);
                set(Sync::Timeout);
                timed_out = true;
            }
        }
    }
}

/// istiod's `checkShouldLead` with `EXTERNAL_ISTIOD`: the remote's system
/// namespace names this cluster (or `*`) in
/// `topology.istio.io/controlPlaneClusters`.
fn leads(objects: &Objects, namespace: &str, local: &str) -> bool {
    objects
        .namespaces
        .iter()
        .filter(|n| n.metadata.name == namespace)
        .filter_map(|n| n.metadata.annotations.get("topology.istio.io/controlPlaneClusters"))
        .any(|v| v.split(',').map(str::trim).any(|c| c == "*" || c == local))
}

/// The remote's namespace controller (root ConfigMaps, under its own
/// election in the remote) and its webhook configurations' `caBundle`
/// (this revision's, every round, as istiod's cert patcher).
async fn keep_roots(client: kube::Client, r: Rc<Roots>) {
    let api = istiod_kubewatch::kapi::Api::new(client);
    let leadership =
        istiod_kubewatch::leader::Leadership::new(r.elect, r.identity.clone(), &r.revision, r.namespace.clone());
    let (patcher, ns, rev) = (api.clone(), r.namespace.clone(), r.revision.clone());
    let mut rounds = istiod_webhook::patch::Rounds::default();
    let kinds = r.patching;
    let patch = async move |root: &str| {
        let done = istiod_webhook::patch::reconcile(&patcher, &ns, &rev, root, false, &mut rounds, kinds);
        if let Err(e) = done.await {
            tracing::warn!(target: "multicluster", error = %e, "cannot reconcile a remote's webhook configurations");
        }
    };
    istiod_ca::namespaces::run(
        api,
        leadership,
        r.ca.clone(),
        r.mesh.clone(),
        istiod_kubewatch::leader::Timings::istiod(),
        patch,
    )
    .await;
}

/// Aborts a task when dropped.
struct Abort(tokio::task::JoinHandle<()>);

impl Drop for Abort {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Adds istiod's multicluster series (Kubernetes only: the controller
/// runs with an API server).
pub(super) fn collect(out: &mut istiod_xds::metrics::Exposition) {
    let Some((remotes, sync, events, timeouts)) = METRICS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|m| (m.remotes, m.sync.clone(), m.events.clone(), m.timeouts))
    else {
        return;
    };
    let kind = |k: &str| ("cluster_type", k.to_owned());
    out.gauge(
        "istiod_managed_clusters",
        "Number of clusters managed by istiod",
        [(vec![kind("local")], 1.0), (vec![kind("remote")], remotes as f64)],
    );
    out.gauge(
        "istiod_remote_cluster_sync_status",
        "Current synchronization state of remote clusters managed by istiod. One sample per cluster and state; a value of 1 indicates the cluster is in that state.",
        sync.iter().flat_map(|(c, s)| {
            Sync::ALL.iter().map(move |state| {
                (
                    vec![("cluster", c.clone()), kind("remote"), ("status", state.as_str().to_owned())],
                    if state == s { 1.0 } else { 0.0 },
                )
            })
        }),
    );
    out.counter(
        "remote_cluster_secret_events_total",
        "Number of remote cluster secret events.",
        events.into_iter().map(|(e, n)| (vec![("event", e.to_owned())], n as f64)),
    );
    out.counter(
        "remote_cluster_sync_timeouts_total",
        "Number of times remote clusters took too long to sync, causing slow startup that excludes remote clusters.",
        [(vec![], timeouts as f64)],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(user: &str) -> kube::config::Kubeconfig {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'https://10.0.0.1'}}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n\
             users: [{{name: u, user: {user}}}]\n"
        );
        kube::config::Kubeconfig::from_yaml(&text).unwrap()
    }

    /// istiod's `sanitizeKubeConfig`: upstream `pkg/kube/util_test.go`
    /// `TestSanitizeKubeConfig`'s three cases (nothing, `exec`, `exec`
    /// allowed) and each other option it refuses: what reads this host's
    /// files or runs its programs, unless allowed.
    #[test]
    fn remote_kubeconfigs_may_not_read_files_or_run_programs() {
        let none = BTreeSet::new();
        let allow = |o: &[&str]| o.iter().map(|s| s.to_string()).collect::<BTreeSet<String>>();
        let cases: [(&str, Result<(), &str>); 8] = [
            ("{token: abc}", Ok(())),
            ("{client-certificate-data: YQ==, client-key-data: YQ==}", Ok(())),
            ("{auth-provider: {name: oidc, config: {}}}", Ok(())),
            ("{auth-provider: {name: gcp, config: {cmd-path: /bin/sh}}}", Err("auth provider gcp is not allowed")),
            ("{client-key: /etc/key.pem}", Err("clientKey is not allowed")),
            ("{client-certificate: /etc/cert.pem}", Err("clientCertificate is not allowed")),
            ("{tokenFile: /var/run/secrets/token}", Err("tokenFile is not allowed")),
            ("{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}}", Err("exec is not allowed")),
        ];
        for (user, want) in cases {
            assert_eq!(sanitize(&kubeconfig(user), &none), want.map_err(str::to_owned), "{user}");
        }
        let exec = kubeconfig("{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}}");
        assert_eq!(sanitize(&exec, &allow(&["exec"])), Ok(()));
        let gcp = kubeconfig("{auth-provider: {name: gcp, config: {}}}");
        assert_eq!(sanitize(&gcp, &allow(&["gcp"])), Ok(()));
    }
}
