//! Leader election as istiod's (`pilot/pkg/leaderelection`, its fork of
//! client-go's `leaderelection` and `resourcelock`): one implementation
//! every singleton controller uses, with istiod's election names and locks.
//!
//! - `istio-namespace-controller-election` (root ConfigMaps; here also the
//!   webhook `caBundle`s): a ConfigMap lock, the record in the
//!   `control-plane.alpha.kubernetes.io/leader` annotation, the holder's
//!   key its revision; a replica of the default revision (the
//!   `istio-revision-tag-default` webhook names it) takes the lock from
//!   another revision's holder (`LocationPrioritizedComparison`).
//! - `istio-leader` (Ingress status): a ConfigMap lock, as above.
//! - `istio-gateway-status-leader-<rev>`, `istio-gateway-deployment-<rev>`:
//!   per-revision Lease locks, no key.
//!
//! Timings: a 30 s lease, renewed within 15 s, tried every 7.5 s. A lock is
//! taken over only when its holder has not renewed it for this replica's
//! lease duration, timed by this replica's clock from when it saw the
//! record change (the holder's timestamps are not compared with ours). On
//! shutdown every lock held is released (`ReleaseOnCancel`: holder emptied,
//! a 1 s lease) and no election leads again, so another replica takes over
//! at its next try, not a lease later. `ENABLE_LEADER_ELECTION
//! =false` leads everything without asking (one replica only).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::kapi::{Api, Write};

/// The namespace controller's election (a ConfigMap lock).
pub const NAMESPACE_CONTROLLER: &str = "istio-namespace-controller-election";
/// The ConfigMap lock's annotation.
const CONFIGMAP_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";
/// The Lease lock's holder key annotation.
const LEASE_KEY_ANNOTATION: &str = "leader.istio.io/holder-key";

/// istiod's election timings.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// How long a lease holds without renewal (30 s).
    pub lease: Duration,
    /// How long a leader keeps leading without a successful renewal (15 s).
    pub renew_deadline: Duration,
    /// How often it tries (7.5 s).
    pub retry: Duration,
}

impl Timings {
    /// istiod's: a 30 s TTL, renew deadline half, retry a quarter.
    pub fn istiod() -> Timings {
        let ttl = Duration::from_secs(30);
        Timings { lease: ttl, renew_deadline: ttl / 2, retry: ttl / 4 }
    }
}

/// What holds the election record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// A `coordination.k8s.io/v1` Lease.
    Lease,
    /// A ConfigMap's annotation (istiod's non-per-revision elections).
    ConfigMap,
}

/// client-go's `LeaderElectionRecord`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Record {
    holder: String,
    key: String,
    duration_secs: u64,
    acquire: String,
    renew: String,
    transitions: u64,
}

impl Record {
    fn read(lock: Lock, object: &Value) -> Record {
        match lock {
            Lock::Lease => {
                let s = &object["spec"];
                Record {
                    holder: s["holderIdentity"].as_str().unwrap_or_default().to_owned(),
                    key: object["metadata"]["annotations"][LEASE_KEY_ANNOTATION]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    duration_secs: s["leaseDurationSeconds"].as_u64().unwrap_or(0),
                    acquire: s["acquireTime"].as_str().unwrap_or_default().to_owned(),
                    renew: s["renewTime"].as_str().unwrap_or_default().to_owned(),
                    transitions: s["leaseTransitions"].as_u64().unwrap_or(0),
                }
            }
            Lock::ConfigMap => {
                let text = object["metadata"]["annotations"][CONFIGMAP_ANNOTATION].as_str().unwrap_or_default();
                let r: Value = serde_json::from_str(text).unwrap_or_default();
                Record {
                    holder: r["holderIdentity"].as_str().unwrap_or_default().to_owned(),
                    key: r["holderKey"].as_str().unwrap_or_default().to_owned(),
                    duration_secs: r["leaseDurationSeconds"].as_u64().unwrap_or(0),
                    acquire: r["acquireTime"].as_str().unwrap_or_default().to_owned(),
                    renew: r["renewTime"].as_str().unwrap_or_default().to_owned(),
                    transitions: r["leaderTransitions"].as_u64().unwrap_or(0),
                }
            }
        }
    }

    /// Writes the record into `object` (a Lease or a ConfigMap).
    fn write(&self, lock: Lock, object: &mut Value) {
        match lock {
            Lock::Lease => {
                object["spec"]["holderIdentity"] = json!(self.holder);
                object["spec"]["leaseDurationSeconds"] = json!(self.duration_secs);
                object["spec"]["acquireTime"] = json!(self.acquire);
                object["spec"]["renewTime"] = json!(self.renew);
                object["spec"]["leaseTransitions"] = json!(self.transitions);
                if self.key.is_empty() {
                    if let Some(a) = object["metadata"]["annotations"].as_object_mut() {
                        a.remove(LEASE_KEY_ANNOTATION);
                    }
                } else {
                    object["metadata"]["annotations"][LEASE_KEY_ANNOTATION] = json!(self.key);
                }
            }
            Lock::ConfigMap => {
                let r = json!({
                    "holderIdentity": self.holder,
                    "holderKey": self.key,
                    "leaseDurationSeconds": self.duration_secs,
                    "acquireTime": self.acquire,
                    "renewTime": self.renew,
                    "leaderTransitions": self.transitions,
                });
                object["metadata"]["annotations"][CONFIGMAP_ANNOTATION] = json!(r.to_string());
            }
        }
    }
}

/// `t` as the lock's time: a Lease's `MicroTime`, a ConfigMap record's
/// `metav1.Time` (seconds).
fn stamp(lock: Lock, t: SystemTime) -> String {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
    let t = k8s_openapi::jiff::Timestamp::try_from(t).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    // k8s-openapi writes them as the API server does (RFC 3339 in UTC, with
    // six fractional digits for a MicroTime, none for a Time).
    let v = match lock {
        Lock::Lease => serde_json::to_value(MicroTime(t)),
        Lock::ConfigMap => serde_json::to_value(Time(t)),
    };
    match v {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

/// This replica's name in the elections: `POD_NAME`, else istiod's
/// `unknown-<hostname>` with a random suffix (containers all run as pid 1,
/// and two replicas must never share a name).
pub fn identity(pod_name: &str) -> String {
    if !pod_name.is_empty() {
        return pod_name.to_owned();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("unknown-{}-{:08x}", host.trim(), random_u64() as u32)
}

/// This replica's elections: whether they run at all, and the locks held
/// now (released on shutdown).
pub struct Leadership {
    /// `ENABLE_LEADER_ELECTION`.
    pub enabled: bool,
    /// This replica's name.
    pub me: String,
    /// `REVISION` (`default` when empty).
    pub revision: String,
    /// istiod's namespace (where the locks live).
    pub namespace: String,
    held: RefCell<BTreeMap<String, (Api, Lock)>>,
    /// Set by [`Leadership::release_all`]: no election leads again.
    stopped: std::cell::Cell<bool>,
}

impl Leadership {
    /// A replica named `me` of `revision` in `namespace`.
    pub fn new(enabled: bool, me: String, revision: &str, namespace: String) -> Rc<Leadership> {
        let revision = crate::kapi::revision_label(revision).to_owned();
        Rc::new(Leadership { enabled, me, revision, namespace, held: RefCell::default(), stopped: Default::default() })
    }

    /// istiod's `NewPerRevisionLeaderElection` name of `election`:
    /// `<election>-<revision>`.
    pub fn per_revision(&self, election: &str) -> String {
        format!("{election}-{}", self.revision)
    }

    /// Releases every lock held (client-go's `release`: the holder emptied
    /// and a 1 s lease, so the next replica's try takes it). Each write is
    /// bounded by the API client's timeout.
    pub async fn release_all(&self) {
        // First: no election of this replica leads or tries again (their
        // loops go on while the connections drain).
        self.stopped.set(true);
        let held = std::mem::take(&mut *self.held.borrow_mut());
        for (path, (api, lock)) in held {
            match release(&api, &path, lock, &self.me).await {
                Ok(true) => tracing::info!(target: "default", lock = %path, "leader election: released"),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(target: "default", lock = %path, error = %e, "leader election: cannot release")
                }
            }
        }
    }
}

async fn release(api: &Api, path: &str, lock: Lock, me: &str) -> Result<bool, String> {
    let Some(mut object) = api.get(path).await? else { return Ok(false) };
    let old = Record::read(lock, &object);
    if old.holder != me {
        return Ok(false);
    }
    let now = stamp(lock, SystemTime::now());
    let r = Record {
        duration_secs: 1,
        acquire: now.clone(),
        renew: now,
        transitions: old.transitions,
        ..Record::default()
    };
    r.write(lock, &mut object);
    Ok(matches!(api.replace(path, &object).await?, Write::Done(_)))
}

/// One replica's view of one election.
pub struct Elector {
    api: Api,
    name: String,
    lock: Lock,
    path: String,
    /// The holder key written (the revision for ConfigMap locks).
    key: String,
    leadership: Rc<Leadership>,
    /// istiod's timings (shorter in tests).
    pub timings: Timings,
    /// The last record seen and when this replica saw it change.
    observed: Option<(Record, String, Instant)>,
    /// When this replica last renewed as leader.
    pub renewed: Option<Instant>,
    /// When [`Elector::lead_paced`] last asked, and what it answered.
    paced: Option<(Instant, bool)>,
}

impl Elector {
    /// The election `name` with `lock`, for `leadership`'s replica.
    pub fn new(api: Api, name: &str, lock: Lock, leadership: &Rc<Leadership>, timings: Timings) -> Elector {
        let ns = &leadership.namespace;
        let path = match lock {
            Lock::Lease => format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}"),
            Lock::ConfigMap => format!("/api/v1/namespaces/{ns}/configmaps/{name}"),
        };
        // Per-revision elections are Leases without a key; the others key
        // the holder by revision.
        let key = match lock {
            Lock::Lease => String::new(),
            Lock::ConfigMap => leadership.revision.clone(),
        };
        Elector {
            api,
            name: name.to_owned(),
            lock,
            path,
            key,
            leadership: leadership.clone(),
            timings,
            observed: None,
            renewed: None,
            paced: None,
        }
    }

    /// [`Elector::lead`] at most once per retry period, for a controller
    /// whose loop its input wakes more often: whether this replica leads,
    /// and whether that changed with this call.
    pub async fn lead_paced(&mut self) -> (bool, bool) {
        if let Some((at, leading)) = self.paced
            && at.elapsed() < self.timings.retry
        {
            return (leading, false);
        }
        let before = self.paced.is_some_and(|(_, l)| l);
        let leading = self.lead().await;
        self.paced = Some((Instant::now(), leading));
        (leading, leading != before)
    }

    /// Tries to lead; whether this replica leads now (it renewed within
    /// the renew deadline).
    pub async fn lead(&mut self) -> bool {
        if self.leadership.stopped.get() {
            self.renewed = None;
            return false;
        }
        if !self.leadership.enabled {
            self.renewed = Some(Instant::now());
            return true;
        }
        match self.try_lead().await {
            Ok(true) => self.renewed = Some(Instant::now()),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(target: "default", lock = %self.name, error = %e, "leader election: cannot reach the lock")
            }
        }
        let leading = self.still_leading();
        if self.leadership.stopped.get() {
            // Released while this try was on its way: give it back.
            if leading {
                let _ = release(&self.api, &self.path, self.lock, &self.leadership.me).await;
            }
            self.renewed = None;
            return false;
        }
        let mut held = self.leadership.held.borrow_mut();
        if leading {
            held.insert(self.path.clone(), (self.api.clone(), self.lock));
        } else {
            held.remove(&self.path);
        }
        leading
    }

    /// Whether this replica's last renewal is within the renew deadline
    /// (without asking the API server).
    pub fn still_leading(&self) -> bool {
        !self.leadership.stopped.get()
            && (!self.leadership.enabled || self.renewed.is_some_and(|t| t.elapsed() < self.timings.renew_deadline))
    }

    /// One try to acquire or renew (client-go's `tryAcquireOrRenew`):
    /// whether this replica leads now.
    pub async fn try_lead(&mut self) -> Result<bool, String> {
        let now = stamp(self.lock, SystemTime::now());
        let me = self.leadership.me.clone();
        let secs = self.timings.lease.as_secs().max(1);
        let mine = Record {
            holder: me.clone(),
            key: self.key.clone(),
            duration_secs: secs,
            acquire: now.clone(),
            renew: now.clone(),
            transitions: 0,
        };
        let Some(mut object) = self.api.get(&self.path).await? else {
            let ns = &self.leadership.namespace;
            let (coll, mut object) = match self.lock {
                Lock::Lease => (
                    format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
                    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": self.name, "namespace": ns}, "spec": {}}),
                ),
                Lock::ConfigMap => (
                    format!("/api/v1/namespaces/{ns}/configmaps"),
                    json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": self.name, "namespace": ns, "annotations": {}}}),
                ),
            };
            mine.write(self.lock, &mut object);
            return Ok(matches!(self.api.create(&coll, &object).await?, Write::Done(_)));
        };
        let old = Record::read(self.lock, &object);
        let version = object["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned();
        let seen_at = match &self.observed {
            Some((r, v, at)) if *r == old && *v == version => *at,
            _ => {
                self.observed = Some((old.clone(), version, Instant::now()));
                Instant::now()
            }
        };
        // client-go (and istiod's fork) time a holder out by this replica's
        // own lease duration from when it saw the record change, not by the
        // record's `leaseDurationSeconds`. A released lock has no holder.
        if !old.holder.is_empty()
            && old.holder != me
            && seen_at.elapsed() < self.timings.lease
            && !self.steals_from(&old).await
        {
            return Ok(false);
        }
        let renewing = old.holder == me;
        let next = Record {
            acquire: if renewing { old.acquire.clone() } else { now },
            transitions: old.transitions + u64::from(!renewing),
            ..mine
        };
        next.write(self.lock, &mut object);
        Ok(matches!(self.api.replace(&self.path, &object).await?, Write::Done(_)))
    }

    /// istiod's `LocationPrioritizedComparison` (keyed locks only): a
    /// replica of the default revision takes the lock from another
    /// revision's holder.
    async fn steals_from(&self, old: &Record) -> bool {
        if self.key.is_empty() || old.key == self.key {
            return false;
        }
        let path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/istio-revision-tag-default";
        let default = match self.api.get(path).await {
            Ok(Some(tag)) => tag["metadata"]["labels"]["istio.io/rev"].as_str().unwrap_or_default().to_owned(),
            _ => String::new(),
        };
        !default.is_empty() && default == self.key
    }
}

/// A random number for names and jitter (not for keys): std's per-process
/// random hasher keys, mixed with the time and the pid.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The formats of apimachinery's `metav1.MicroTime` (`RFC3339Micro`,
    /// `2006-01-02T15:04:05.000000Z07:00`, micro_time.go) and `metav1.Time`
    /// (`time.RFC3339`, time.go), in UTC: 1,795,000,000 s after the epoch is
    /// 2026-11-18 11:06:40 UTC.
    #[test]
    fn stamps_are_apimachinerys_times() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_795_000_000_123_456);
        assert_eq!(stamp(Lock::Lease, t), "2026-11-18T11:06:40.123456Z");
        assert_eq!(stamp(Lock::ConfigMap, t), "2026-11-18T11:06:40Z");
        assert_eq!(stamp(Lock::Lease, SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
    }

    fn api(fake: &crate::fake::FakeApi) -> Api {
        Api::new(kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap())
    }

    fn elector(api: &Api, me: &str, revision: &str, lock: Lock, timings: Timings) -> Elector {
        let l = Leadership::new(true, me.into(), revision, "istio-system".into());
        Elector::new(api.clone(), NAMESPACE_CONTROLLER, lock, &l, timings)
    }

    const FAST: Timings = Timings {
        lease: Duration::from_millis(1000),
        renew_deadline: Duration::from_millis(500),
        retry: Duration::from_millis(100),
    };

    /// client-go's rules against a fake API server, for both locks: the
    /// first to create the lock leads; the other waits while the holder
    /// renews, takes over once the lock went unrenewed for its duration
    /// (by its own clock), and the old holder, back, finds it held; two
    /// racers of one version: one gets a 409 and does not lead.
    #[test]
    fn one_replica_leads_and_another_takes_over_a_lapsed_lock() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let fake = crate::fake::FakeApi::start().await.unwrap();
            for r in crate::fake::write_resources() {
                fake.install(r);
            }
            let api = api(&fake);
            for lock in [Lock::ConfigMap, Lock::Lease] {
                let (mut a, mut b) = (elector(&api, "a", "", lock, FAST), elector(&api, "b", "", lock, FAST));
                assert!(a.try_lead().await.unwrap(), "a creates the lock");
                assert!(!b.try_lead().await.unwrap(), "b sees it held");
                for _ in 0..4 {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    assert!(a.try_lead().await.unwrap(), "a renews");
                    assert!(!b.try_lead().await.unwrap(), "a renewed within the lease: b waits");
                }
                assert!(!b.try_lead().await.unwrap());
                tokio::time::sleep(Duration::from_millis(1100)).await;
                assert!(b.try_lead().await.unwrap(), "b takes over a lapsed lock");
                let (plural, holder, transitions) = match lock {
                    Lock::Lease => {
                        let l = fake.get("leases", "istio-system", NAMESPACE_CONTROLLER).unwrap();
                        ("leases", l["spec"]["holderIdentity"].clone(), l["spec"]["leaseTransitions"].clone())
                    }
                    Lock::ConfigMap => {
                        let cm = fake.get("configmaps", "istio-system", NAMESPACE_CONTROLLER).unwrap();
                        let r: Value =
                            serde_json::from_str(cm["metadata"]["annotations"][CONFIGMAP_ANNOTATION].as_str().unwrap())
                                .unwrap();
                        assert_eq!(r["holderKey"], "default", "keyed by revision");
                        assert!(
                            r["renewTime"].as_str().unwrap().ends_with(":00Z")
                                || !r["renewTime"].as_str().unwrap().contains('.')
                        );
                        ("configmaps", r["holderIdentity"].clone(), r["leaderTransitions"].clone())
                    }
                };
                assert_eq!((holder, transitions), (json!("b"), json!(1)), "{plural}");
                assert!(!a.try_lead().await.unwrap(), "a finds b holding it");
                // b releases (shutdown): a takes it at once.
                b.lead().await;
                b.leadership.release_all().await;
                assert!(a.try_lead().await.unwrap(), "a takes a released lock without waiting");
                fake.delete(plural, "istio-system", NAMESPACE_CONTROLLER);
            }
            let before = fake.conflicts();
            let (mut c, mut d) = (elector(&api, "c", "", Lock::Lease, FAST), elector(&api, "d", "", Lock::Lease, FAST));
            let _ = (c.try_lead().await, d.try_lead().await);
            tokio::time::sleep(Duration::from_millis(1100)).await;
            let (rc, rd) = tokio::join!(c.try_lead(), d.try_lead());
            assert_eq!(u8::from(rc.unwrap()) + u8::from(rd.unwrap()), 1, "exactly one of two racers wins");
            assert!(fake.conflicts() > before, "the loser got a 409");
        });
    }

    /// `LocationPrioritizedComparison`: the default revision's replica
    /// takes the keyed lock from a canary holder at once; a canary does not
    /// take it from the default revision.
    #[test]
    fn the_default_revision_takes_the_lock_from_another_revision() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let fake = crate::fake::FakeApi::start().await.unwrap();
            for r in crate::fake::write_resources().into_iter().chain(crate::fake::webhook_resources()) {
                fake.install(r);
            }
            fake.apply(
                "mutatingwebhookconfigurations",
                json!({"metadata": {"name": "istio-revision-tag-default", "labels": {"istio.io/rev": "stable"}}}),
            );
            let api = api(&fake);
            let mut canary = elector(&api, "canary-1", "canary", Lock::ConfigMap, FAST);
            let mut stable = elector(&api, "stable-1", "stable", Lock::ConfigMap, FAST);
            assert!(canary.try_lead().await.unwrap());
            assert!(stable.try_lead().await.unwrap(), "the default revision takes it at once");
            assert!(!canary.try_lead().await.unwrap(), "and keeps it");
        });
    }
}
