//! Root distribution in Kubernetes, as istiod's namespace controller
//! (`pilot/pkg/serviceregistry/kube/controller/namespacecontroller.go`):
//! the `istio-ca-root-cert` ConfigMap (`root-cert.pem`, label
//! `istio.io/config: "true"`) in every namespace the mesh's
//! `discoverySelectors` select (but `kube-public`, `kube-node-lease`,
//! `local-path-storage` and terminating ones), kept equal to the CA's
//! trust bundle: created where missing, updated where different.
//!
//! One replica does it: the holder of the `istio-namespace-controller-election`
//! Lease in istiod's namespace (`pilot/pkg/leaderelection`: 30 s lease,
//! renewed every 7.5 s, given up when not renewed for 15 s). A lease is
//! taken over only when its holder has not renewed it for its whole
//! duration, as seen by this replica's clock (client-go's rule: the
//! holder's timestamps are not compared with ours). Writes race safely:
//! a stale `resourceVersion` is a 409 and the next round reads again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use super::CaServer;
use super::kapi::{Api, Write};
use crate::mesh::MeshSettings;

/// The Lease's name.
pub const ELECTION: &str = "istio-namespace-controller-election";
/// The ConfigMap's name and key.
pub const ROOT_CONFIGMAP: &str = "istio-ca-root-cert";
const ROOT_KEY: &str = "root-cert.pem";

/// istiod's election timings.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// How long a lease holds without renewal (30 s).
    pub lease: Duration,
    /// How long a leader keeps leading without a successful renewal (15 s).
    pub renew_deadline: Duration,
    /// How often it tries (7.5 s); also how often the ConfigMaps are
    /// reconciled.
    pub retry: Duration,
}

impl Timings {
    /// istiod's: a 30 s TTL, renew deadline half, retry a quarter.
    pub fn istiod() -> Timings {
        let ttl = Duration::from_secs(30);
        Timings { lease: ttl, renew_deadline: ttl / 2, retry: ttl / 4 }
    }
}

/// Namespaces istiod never writes to (`inject.IgnoredNamespaces` but
/// kube-system).
const IGNORED: &[&str] = &["kube-public", "kube-node-lease", "local-path-storage"];

/// RFC 3339 with microseconds, UTC (Kubernetes' `MicroTime`).
/// What the leader keeps of the webhook configurations.
#[derive(Debug, Clone)]
pub struct Webhooks {
    /// `REVISION` (the `istio.io/rev` label; empty is `default`).
    pub revision: String,
    /// This server's validation webhook is serving (`--httpsAddr`).
    pub serving: bool,
}

/// This replica's name in the Lease: `POD_NAME`, else istiod's
/// `unknown-<hostname>` with a random suffix (containers all run as pid 1,
/// and two replicas must never share a name).
pub fn identity(pod_name: &str) -> String {
    if !pod_name.is_empty() {
        return pod_name.to_owned();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("unknown-{}-{:08x}", host.trim(), super::random_u64() as u32)
}

/// One replica's view of an election (a Lease in istiod's namespace).
pub(crate) struct Elector {
    api: Api,
    lease: String,
    path: String,
    namespace: String,
    me: String,
    timings: Timings,
    /// The last record seen (holder, renew time, version) and when this
    /// replica saw it change.
    observed: Option<(Value, Instant)>,
    /// When this replica last renewed as leader.
    pub(crate) renewed: Option<Instant>,
}

impl Elector {
    /// A replica named `me` in the election of `namespace`.
    fn new(api: Api, namespace: String, me: String, timings: Timings) -> Elector {
        Elector::named(api, ELECTION.to_owned(), namespace, me, timings)
    }

    /// istiod's `NewPerRevisionLeaderElection` name: `<election>-<revision>`,
    /// `default` for the default revision (each revision elects its own
    /// leader).
    pub(crate) fn per_revision(election: &str, revision: &str) -> String {
        format!("{election}-{}", if revision.is_empty() { "default" } else { revision })
    }

    /// A replica named `me` in the election `lease` of `namespace`.
    pub(crate) fn named(api: Api, lease: String, namespace: String, me: String, timings: Timings) -> Elector {
        let path = format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}");
        Elector { api, lease, path, namespace, me, timings, observed: None, renewed: None }
    }

    /// Tries to lead; whether this replica leads now (it renewed within
    /// the renew deadline).
    pub(crate) async fn lead(&mut self) -> bool {
        match self.try_lead().await {
            Ok(true) => self.renewed = Some(Instant::now()),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(target: "ca", lease = %self.lease, error = %e, "leader election: cannot reach the Lease")
            }
        }
        self.still_leading()
    }

    /// Whether this replica's last renewal is within the renew deadline
    /// (without asking the API server: a long run of writes checks it
    /// between writes).
    pub(crate) fn still_leading(&self) -> bool {
        self.renewed.is_some_and(|t| t.elapsed() < self.timings.renew_deadline)
    }

    /// One try to acquire or renew (client-go's `tryAcquireOrRenew`):
    /// whether this replica leads now.
    async fn try_lead(&mut self) -> Result<bool, String> {
        let now = SystemTime::now();
        let secs = self.timings.lease.as_secs().max(1);
        let Some(mut lease) = self.api.get(&self.path).await? else {
            let lease = json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.lease, "namespace": self.namespace},
                "spec": {
                    "holderIdentity": self.me,
                    "leaseDurationSeconds": secs,
                    "acquireTime": istiod_xds::time::rfc3339(now),
                    "renewTime": istiod_xds::time::rfc3339(now),
                    "leaseTransitions": 0,
                },
            });
            let coll = format!("/apis/coordination.k8s.io/v1/namespaces/{}/leases", self.namespace);
            return Ok(matches!(self.api.create(&coll, &lease).await?, Write::Done(_)));
        };
        let spec = lease["spec"].clone();
        let holder = spec["holderIdentity"].as_str().unwrap_or_default().to_owned();
        let record = json!([holder, spec["renewTime"], lease["metadata"]["resourceVersion"]]);
        let seen_at = match &self.observed {
            Some((r, at)) if *r == record => *at,
            _ => {
                self.observed = Some((record, Instant::now()));
                Instant::now()
            }
        };
        let held_for = spec["leaseDurationSeconds"].as_u64().map_or(self.timings.lease, Duration::from_secs);
        if !holder.is_empty() && holder != self.me && seen_at.elapsed() < held_for {
            return Ok(false);
        }
        let mine = holder == self.me;
        let transitions = spec["leaseTransitions"].as_u64().unwrap_or(0) + u64::from(!mine);
        lease["spec"]["holderIdentity"] = json!(self.me);
        lease["spec"]["leaseDurationSeconds"] = json!(secs);
        lease["spec"]["renewTime"] = json!(istiod_xds::time::rfc3339(now));
        lease["spec"]["leaseTransitions"] = json!(transitions);
        if !mine {
            lease["spec"]["acquireTime"] = json!(istiod_xds::time::rfc3339(now));
        }
        Ok(matches!(self.api.replace(&self.path, &lease).await?, Write::Done(_)))
    }
}

/// Creates or updates the root ConfigMap of every selected namespace,
/// writing only while this replica leads (until `lead_until`: a long pass
/// stops when the lease may have passed to another replica); returns how
/// many it wrote. A namespace whose write fails is logged and skipped.
pub async fn reconcile(api: &Api, mesh: &MeshSettings, root: &str, lead_until: Instant) -> Result<usize, String> {
    let namespaces = api.get("/api/v1/namespaces").await?.ok_or("cannot list namespaces")?;
    let maps = api
        .get(&format!("/api/v1/configmaps?fieldSelector=metadata.name%3D{ROOT_CONFIGMAP}"))
        .await?
        .ok_or("cannot list configmaps")?;
    let mut existing: BTreeMap<String, Value> = BTreeMap::new();
    for cm in maps["items"].as_array().into_iter().flatten() {
        if cm["metadata"]["name"] == ROOT_CONFIGMAP
            && let Some(ns) = cm["metadata"]["namespace"].as_str()
        {
            existing.insert(ns.to_owned(), cm.clone());
        }
    }
    let mut wrote = 0;
    for ns in namespaces["items"].as_array().into_iter().flatten() {
        let Some(name) = ns["metadata"]["name"].as_str() else { continue };
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
        if current.as_ref().is_some_and(|cm| cm["data"][ROOT_KEY] == root) {
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
                    "metadata": {"name": ROOT_CONFIGMAP, "namespace": name, "labels": {"istio.io/config": "true"}},
                    "data": {ROOT_KEY: root},
                });
                api.create(&format!("/api/v1/namespaces/{name}/configmaps"), &cm).await
            }
            // istiod's InsertDataToConfigMap: the key set, the rest kept.
            Some(mut cm) => {
                cm["data"][ROOT_KEY] = json!(root);
                api.replace(&format!("/api/v1/namespaces/{name}/configmaps/{ROOT_CONFIGMAP}"), &cm).await
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

/// Runs the election and, while leading, keeps the root ConfigMaps (and
/// the webhook configurations' `caBundle`, [`crate::webhook::patch`]): at
/// once on winning, whenever the CA changes, and every retry period (new
/// namespaces, edited or deleted ConfigMaps).
pub async fn run(
    api: Api,
    namespace: String,
    me: String,
    server: Arc<CaServer>,
    mesh: tokio::sync::watch::Receiver<Arc<MeshSettings>>,
    timings: Timings,
    webhooks: Webhooks,
) {
    let mut elector = Elector::new(api.clone(), namespace.clone(), me, timings);
    let mut changed = server.changed.subscribe();
    let mut leading = false;
    // Validation fails closed only once the API server is seen to reach
    // this webhook (istiod's dry run of an invalid Gateway).
    let mut fail_closed = false;
    loop {
        match elector.try_lead().await {
            Ok(true) => elector.renewed = Some(Instant::now()),
            Ok(false) => {}
            Err(e) => tracing::warn!(target: "ca", error = %e, "leader election: cannot reach the Lease"),
        }
        let now_leading = elector.renewed.is_some_and(|t| t.elapsed() < elector.timings.renew_deadline);
        if now_leading != leading {
            leading = now_leading;
            if leading {
                tracing::info!(target: "ca", lease = ELECTION, "leader election: leading; keeping the root ConfigMaps");
            } else {
                tracing::info!(target: "ca", lease = ELECTION, "leader election: not leading");
            }
        }
        if let (true, Some(renewed)) = (leading, elector.renewed) {
            let lead_until = renewed + elector.timings.renew_deadline;
            let root = server.ca().root_pem().to_owned();
            let selectors = mesh.borrow().clone();
            match reconcile(&api, &selectors, &root, lead_until).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(target: "ca", configmaps = n, "root ConfigMaps written"),
                Err(e) => tracing::warn!(target: "ca", error = %e, "cannot reconcile the root ConfigMaps"),
            }
            if Instant::now() < lead_until
                && let Err(e) = crate::webhook::patch::reconcile(
                    &api,
                    &namespace,
                    &webhooks.revision,
                    &root,
                    webhooks.serving,
                    &mut fail_closed,
                )
                .await
            {
                tracing::warn!(target: "webhook", error = %e, "cannot reconcile the webhook configurations");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(elector.timings.retry) => {}
            r = changed.changed() => if r.is_err() { return },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elector(api: &Api, me: &str, timings: Timings) -> Elector {
        Elector::new(api.clone(), "istio-system".into(), me.into(), timings)
    }

    /// client-go's rules against a fake API server: the first to create
    /// the Lease leads; the other waits while the holder renews, takes
    /// over once the lease went unrenewed for its duration (by its own
    /// clock), and the old holder, back, finds it held.
    #[test]
    fn one_replica_leads_and_another_takes_over_a_lapsed_lease() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let fake = istiod_kubewatch::fake::FakeApi::start().await.unwrap();
            for r in istiod_kubewatch::fake::write_resources() {
                fake.install(r);
            }
            let config = kube::Config::new(fake.url().parse().unwrap());
            let api = Api::new(kube::Client::try_from(config).unwrap());
            let timings = Timings {
                lease: Duration::from_millis(1000),
                renew_deadline: Duration::from_millis(500),
                retry: Duration::from_millis(100),
            };
            let (mut a, mut b) = (elector(&api, "a", timings), elector(&api, "b", timings));
            assert!(a.try_lead().await.unwrap(), "a creates the lease");
            assert!(!b.try_lead().await.unwrap(), "b sees it held");
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                assert!(a.try_lead().await.unwrap(), "a renews");
                assert!(!b.try_lead().await.unwrap(), "a renewed within the lease: b waits");
            }
            // a stops renewing: b takes over once a full lease passed
            // since b saw the record change.
            assert!(!b.try_lead().await.unwrap());
            tokio::time::sleep(Duration::from_millis(1100)).await;
            assert!(b.try_lead().await.unwrap(), "b takes over a lapsed lease");
            let lease = fake.get("leases", "istio-system", ELECTION).unwrap();
            assert_eq!(lease["spec"]["holderIdentity"], "b");
            assert_eq!(lease["spec"]["leaseTransitions"], 1);
            assert!(!a.try_lead().await.unwrap(), "a finds b holding it");
            // Two writers of one version: one gets a 409 and does not lead.
            let before = fake.conflicts();
            let (mut c, mut d) = (elector(&api, "c", timings), elector(&api, "d", timings));
            let _ = (c.try_lead().await, d.try_lead().await);
            tokio::time::sleep(Duration::from_millis(1100)).await;
            let (rc, rd) = tokio::join!(c.try_lead(), d.try_lead());
            assert_eq!(u8::from(rc.unwrap()) + u8::from(rd.unwrap()), 1, "exactly one of two racers wins");
            assert!(fake.conflicts() > before, "the loser got a 409");
        });
    }
}
