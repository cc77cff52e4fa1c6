//! istiod's WorkloadEntry auto-registration and health checks
//! (`pilot/pkg/autoregistration/`): a proxy of a WorkloadGroup
//! (`AUTO_REGISTER_GROUP`) gets a WorkloadEntry made from the group's
//! template while it is connected, kept by the replica it is connected to
//! (`istio.io/workloadController`, `istio.io/connectedAt`), marked
//! disconnected (`istio.io/disconnectedAt`) when it leaves and deleted a
//! grace period (`PILOT_WORKLOAD_ENTRY_GRACE_PERIOD`) later unless it came
//! back; the agent's health reports (`istio.v1.HealthInformation`) become
//! the entry's `Healthy` condition, which the model reads (an entry with
//! `proxy.istio.io/health-checks-enabled` serves only while healthy). A
//! proxy naming an existing entry (`WORKLOAD_ENTRY`) that allows health
//! checks is tracked the same way, its entry never deleted (only its
//! condition, once it is gone).
//!
//! The cores report the streams of such proxies (`Lifecycle`); this runs
//! on the control thread against a [`Store`] (the API server). Every
//! replica sweeps entries left behind (`10 x` the grace period): those
//! disconnected longer than the grace period, and those connected longer
//! than 1.5 x `--keepaliveMaxServerConnectionAge` (their replica died
//! before it could mark them).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value as Json, json};

use istiod_kubewatch::kapi::{Api, Deleted, Write};
use istiod_mesh::node::{NodeType, ProxyClass, READINESS_PROBE};
use istiod_proto::time::{parse_rfc3339, rfc3339_nano};

/// istiod's annotations.
pub(crate) const GROUP: &str = "istio.io/autoRegistrationGroup";
pub(crate) const CONTROLLER: &str = "istio.io/workloadController";
pub(crate) const CONNECTED_AT: &str = "istio.io/connectedAt";
pub(crate) const DISCONNECTED_AT: &str = "istio.io/disconnectedAt";
pub(crate) const HEALTH_CHECKS: &str = "proxy.istio.io/health-checks-enabled";
const TUNNEL: &str = "networking.istio.io/tunnel";

/// What the environment sets.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// `PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION` (true).
    pub(crate) autoregistration: bool,
    /// `PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS` (true).
    pub(crate) health_checks: bool,
    /// `PILOT_WORKLOAD_ENTRY_GRACE_PERIOD` (10s).
    pub(crate) grace: Duration,
    /// `ISTIO_WORKLOAD_ENTRY_VALIDATE_IDENTITY` (true).
    pub(crate) validate_identity: bool,
    /// How long a connection may last before an entry still marked
    /// connected counts as leaked: 1.5 x `--keepaliveMaxServerConnectionAge`,
    /// `None` without one.
    pub(crate) max_connection_age: Option<Duration>,
    /// This replica (`POD_NAME`).
    pub(crate) instance: String,
    /// Sidecars listen on HBONE (ambient): a proxy with `ENABLE_HBONE`
    /// gets the tunnel label.
    pub(crate) hbone: bool,
}

/// The series istiod reports (`auto_registration_*`, counters without
/// labels).
static SUCCESS: AtomicU64 = AtomicU64::new(0);
static UPDATES: AtomicU64 = AtomicU64::new(0);
static UNREGISTER: AtomicU64 = AtomicU64::new(0);
static DELETES: AtomicU64 = AtomicU64::new(0);
static ERRORS: AtomicU64 = AtomicU64::new(0);

fn count(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Adds the `auto_registration_*` counters.
pub(super) fn collect(out: &mut istiod_xds::metrics::Exposition) {
    for (name, help, c) in [
        ("auto_registration_success_total", "Total number of successful auto registrations.", &SUCCESS),
        ("auto_registration_updates_total", "Total number of auto registration updates.", &UPDATES),
        ("auto_registration_unregister_total", "Total number of unregistrations.", &UNREGISTER),
        (
            "auto_registration_deletes_total",
            "Total number of auto registration cleaned up by periodic timer.",
            &DELETES,
        ),
        ("auto_registration_errors_total", "Total number of auto registration errors.", &ERRORS),
    ] {
        out.counter(name, help, [(vec![], c.load(Ordering::Relaxed) as f64)]);
    }
}

/// Where WorkloadEntries and WorkloadGroups are read and written.
pub(crate) trait Store {
    /// The WorkloadEntry `ns/name`.
    async fn entry(&self, ns: &str, name: &str) -> Result<Option<Json>, String>;
    /// The WorkloadGroup `ns/name`.
    async fn group(&self, ns: &str, name: &str) -> Result<Option<Json>, String>;
    /// Creates a WorkloadEntry.
    async fn create(&self, entry: &Json) -> Result<Write, String>;
    /// Replaces a WorkloadEntry (its `resourceVersion` must be current).
    async fn update(&self, entry: &Json) -> Result<Write, String>;
    /// Replaces a WorkloadEntry's status.
    async fn update_status(&self, entry: &Json) -> Result<Write, String>;
    /// Deletes a WorkloadEntry if its `resourceVersion` is still `rv`.
    async fn delete(&self, ns: &str, name: &str, rv: Option<&str>) -> Result<Deleted, String>;
    /// Every WorkloadEntry.
    async fn list(&self) -> Result<Vec<Json>, String>;
    /// The WorkloadEntry `ns/name` as the watch last saw it, without its
    /// status (istiod's informer cache): may be behind. Default: [`Store::entry`].
    async fn cached_entry(&self, ns: &str, name: &str) -> Result<Option<Json>, String> {
        self.entry(ns, name).await
    }
    /// The WorkloadGroup `ns/name` as the watch last saw it. Default:
    /// [`Store::group`].
    async fn cached_group(&self, ns: &str, name: &str) -> Result<Option<Json>, String> {
        self.group(ns, name).await
    }
}

/// `(kind, namespace, name)` -> the object as last watched.
pub(crate) type Lookup = std::rc::Rc<dyn Fn(&str, &str, &str) -> Option<Json>>;

/// The API server, read through what the config source watches: a
/// registration costs one write, as istiod's (its store reads its
/// informers). A stale read costs a conflict, and a fresh read after it.
pub(crate) struct CachedApi {
    pub(crate) api: Api,
    /// The watched objects.
    pub(crate) lookup: Lookup,
}

impl Store for CachedApi {
    async fn entry(&self, ns: &str, name: &str) -> Result<Option<Json>, String> {
        self.api.entry(ns, name).await
    }
    async fn group(&self, ns: &str, name: &str) -> Result<Option<Json>, String> {
        self.api.group(ns, name).await
    }
    async fn create(&self, entry: &Json) -> Result<Write, String> {
        Store::create(&self.api, entry).await
    }
    async fn update(&self, entry: &Json) -> Result<Write, String> {
        self.api.update(entry).await
    }
    async fn update_status(&self, entry: &Json) -> Result<Write, String> {
        self.api.update_status(entry).await
    }
    async fn delete(&self, ns: &str, name: &str, rv: Option<&str>) -> Result<Deleted, String> {
        Store::delete(&self.api, ns, name, rv).await
    }
    async fn list(&self) -> Result<Vec<Json>, String> {
        self.api.list().await
    }
    async fn cached_entry(&self, ns: &str, name: &str) -> Result<Option<Json>, String> {
        Ok((self.lookup)("WorkloadEntry", ns, name))
    }
    async fn cached_group(&self, ns: &str, name: &str) -> Result<Option<Json>, String> {
        match (self.lookup)("WorkloadGroup", ns, name) {
            Some(g) => Ok(Some(g)),
            // Not watched yet: asked.
            None => self.api.group(ns, name).await,
        }
    }
}

const API: &str = "/apis/networking.istio.io/v1";

fn entry_path(ns: &str, name: &str) -> String {
    format!("{API}/namespaces/{ns}/workloadentries/{name}")
}

impl Store for Api {
    async fn entry(&self, ns: &str, name: &str) -> Result<Option<Json>, String> {
        self.get(&entry_path(ns, name)).await
    }
    async fn group(&self, ns: &str, name: &str) -> Result<Option<Json>, String> {
        self.get(&format!("{API}/namespaces/{ns}/workloadgroups/{name}")).await
    }
    async fn create(&self, entry: &Json) -> Result<Write, String> {
        let ns = entry["metadata"]["namespace"].as_str().unwrap_or_default();
        Api::create(self, &format!("{API}/namespaces/{ns}/workloadentries"), entry).await
    }
    async fn update(&self, entry: &Json) -> Result<Write, String> {
        let (ns, name) = ns_name(entry);
        self.replace(&entry_path(ns, name), entry).await
    }
    async fn update_status(&self, entry: &Json) -> Result<Write, String> {
        let (ns, name) = ns_name(entry);
        self.replace(&format!("{}/status", entry_path(ns, name)), entry).await
    }
    async fn delete(&self, ns: &str, name: &str, rv: Option<&str>) -> Result<Deleted, String> {
        Api::delete(self, &entry_path(ns, name), rv).await
    }
    async fn list(&self) -> Result<Vec<Json>, String> {
        let list = self.get(&format!("{API}/workloadentries")).await?.unwrap_or_default();
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }
}

fn ns_name(o: &Json) -> (&str, &str) {
    (o["metadata"]["namespace"].as_str().unwrap_or_default(), o["metadata"]["name"].as_str().unwrap_or_default())
}

fn annotation<'a>(o: &'a Json, key: &str) -> Option<&'a str> {
    o["metadata"]["annotations"][key].as_str()
}

fn meta<'a>(class: &'a ProxyClass, key: &str) -> &'a str {
    class.metadata.iter().find(|(k, _)| &**k == key).map_or("", |(_, v)| &**v)
}

/// A DNS-1123 subdomain (what Kubernetes names and namespaces are).
fn dns_subdomain(v: &str) -> bool {
    v.len() <= 253
        && v.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// istiod's `autoregisteredWorkloadEntryName`: `<group>-<ip>[-<network>]`
/// (`:` of an IPv6 address as `-`), its last 253 characters; `None` for a
/// proxy of no group, without an address or a namespace.
pub(crate) fn entry_name(class: &ProxyClass) -> Option<String> {
    let group = meta(class, "AUTO_REGISTER_GROUP");
    if group.is_empty() {
        return None;
    }
    let Some(ip) = class.ips.first() else {
        tracing::error!(target: "wle", group, "auto-registration failed: missing IP addresses");
        return None;
    };
    if class.namespace.is_empty() {
        tracing::error!(target: "wle", group, "auto-registration failed: missing namespace");
        return None;
    }
    let mut name = format!("{group}-{}", ip.replace(':', "-"));
    let network = meta(class, "NETWORK");
    if !network.is_empty() {
        name = format!("{name}-{network}");
    }
    if name.len() > 253 {
        let mut cut = name.len() - 253;
        while !name.is_char_boundary(cut) {
            cut += 1;
        }
        name = name[cut..].to_owned();
        tracing::warn!(target: "wle", %name, "generated WorkloadEntry name is too long, consider making the WorkloadGroup name shorter. Shortening from beginning to: {name}");
    }
    Some(name)
}

/// istiod's `VerifiedIdentity`: the first of the caller's identities in
/// the proxy's namespace (and service account, when its node names one);
/// `None` for a caller not authenticated.
pub(crate) fn verified_identity(class: &ProxyClass, identities: &[String]) -> Option<(String, String)> {
    if !class.verified {
        return None;
    }
    let sa = meta(class, "SERVICE_ACCOUNT");
    identities.iter().find_map(|id| {
        let (ns, id_sa) = istiod_ca::spiffe_ns_sa(id)?;
        ((class.namespace.is_empty() || ns == &*class.namespace) && (sa.is_empty() || id_sa == sa))
            .then(|| (ns.to_owned(), id_sa.to_owned()))
    })
}

/// istiod's `ensureProxyCanControlEntry`, in its words.
pub(crate) fn can_control(identity: Option<&(String, String)>, entry: &Json) -> Result<(), String> {
    let Some((ns, sa)) = identity else {
        return Err("registration of WorkloadEntry requires a verified identity".into());
    };
    let entry_ns = entry["metadata"]["namespace"].as_str().unwrap_or_default();
    if ns != entry_ns {
        return Err(format!("registration of WorkloadEntry namespace mismatch: {ns:?} vs {entry_ns:?}"));
    }
    let entry_sa = entry["spec"]["serviceAccount"].as_str().unwrap_or_default();
    if !entry_sa.is_empty() && sa != entry_sa {
        return Err(format!("registration of WorkloadEntry service account mismatch: {sa:?} vs {entry_sa:?}"));
    }
    Ok(())
}

/// istiod's `workloadEntryFromGroup`: the group's template, at the proxy's
/// address, network and locality, its labels over the template's and the
/// group's, owned by the group.
pub(crate) fn entry_from_group(name: &str, class: &ProxyClass, group: &Json, hbone: bool) -> Json {
    let gspec = &group["spec"];
    let mut spec = gspec["template"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    let mut labels: BTreeMap<String, Json> = BTreeMap::new();
    let mut put = |from: &Json| {
        if let Some(m) = from.as_object() {
            labels.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    };
    put(&spec["labels"]);
    put(&gspec["metadata"]["labels"]);
    if !class.labels.is_empty() {
        labels.extend(class.labels.iter().map(|(k, v)| (k.to_string(), json!(&**v))));
        labels.remove("istio-locality");
    }
    if hbone && istiod_config::istio::networking::parse_bool_true(meta(class, "ENABLE_HBONE")) {
        labels.entry(TUNNEL.to_owned()).or_insert_with(|| json!("http"));
    }
    let mut annotations: BTreeMap<String, Json> = BTreeMap::new();
    annotations.insert(GROUP.into(), group["metadata"]["name"].clone());
    if let Some(m) = gspec["metadata"]["annotations"].as_object() {
        annotations.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    if meta(class, READINESS_PROBE) == "true" {
        annotations.insert(HEALTH_CHECKS.into(), json!("true"));
    }
    spec["address"] = json!(class.ips.first().map_or("", |ip| &**ip));
    let network = meta(class, "NETWORK");
    if !network.is_empty() {
        spec["network"] = json!(network);
    }
    // istiod's `LocalityToString`: the parts up to the first empty one.
    let locality: Vec<&str> = class.locality.split('/').take_while(|p| !p.is_empty()).collect();
    if !locality.is_empty() {
        spec["locality"] = json!(locality.join("/"));
    }
    let labels: serde_json::Map<String, Json> = labels.into_iter().collect();
    if labels.is_empty() {
        spec.as_object_mut().map(|o| o.remove("labels"));
    } else {
        spec["labels"] = Json::Object(labels.clone());
    }
    let api_version = group["apiVersion"].as_str().unwrap_or("networking.istio.io/v1");
    let mut metadata = json!({
        "name": name,
        "namespace": &*class.namespace,
        "annotations": annotations.into_iter().collect::<serde_json::Map<_, _>>(),
        "ownerReferences": [{
            "apiVersion": api_version,
            "kind": "WorkloadGroup",
            "name": group["metadata"]["name"],
            "uid": group["metadata"]["uid"].as_str().unwrap_or_default(),
            "controller": true,
        }],
    });
    if !labels.is_empty() {
        metadata["labels"] = Json::Object(labels);
    }
    json!({"apiVersion": "networking.istio.io/v1", "kind": "WorkloadEntry", "metadata": metadata, "spec": spec})
}

fn set_annotation(o: &mut Json, key: &str, value: Option<String>) {
    if !o["metadata"]["annotations"].is_object() {
        o["metadata"]["annotations"] = json!({});
    }
    let a = o["metadata"]["annotations"].as_object_mut().expect("an object");
    match value {
        Some(v) => a.insert(key.to_owned(), json!(v)),
        None => a.remove(key),
    };
}

/// istiod's `setConnectMeta`.
fn set_connected(o: &mut Json, instance: &str, at: SystemTime) {
    set_annotation(o, CONTROLLER, Some(instance.to_owned()));
    set_annotation(o, CONNECTED_AT, Some(rfc3339_nano(at)));
    set_annotation(o, DISCONNECTED_AT, None);
}

fn time_of(o: &Json, key: &str) -> Option<SystemTime> {
    annotation(o, key).and_then(parse_rfc3339)
}

/// istiod's `changeWorkloadEntryStateToConnected`: the entry as this
/// replica connected at `at`, or `None` when it has nothing to change (a
/// later connection is recorded, or this one already is).
pub(crate) fn connected(entry: &Json, instance: &str, at: SystemTime) -> Option<Json> {
    if annotation(entry, DISCONNECTED_AT).is_some() {
        let gone = time_of(entry, DISCONNECTED_AT).unwrap_or(SystemTime::UNIX_EPOCH);
        if at < gone {
            return None;
        }
    }
    let last = time_of(entry, CONNECTED_AT).unwrap_or(SystemTime::UNIX_EPOCH);
    if at < last || (annotation(entry, CONTROLLER) == Some(instance) && at <= last) {
        return None;
    }
    let mut e = entry.clone();
    set_connected(&mut e, instance, at);
    Some(e)
}

/// istiod's `changeWorkloadEntryStateToDisconnected`: the entry as
/// disconnected at `at` from the connection made at `since`, or `None`
/// when a later connection, or another replica, holds it.
pub(crate) fn disconnected(entry: &Json, instance: &str, at: SystemTime, since: SystemTime) -> Option<Json> {
    let connected_at = time_of(entry, CONNECTED_AT);
    if connected_at.is_some_and(|c| c > since) || annotation(entry, CONTROLLER) != Some(instance) {
        return None;
    }
    if at < connected_at.unwrap_or(SystemTime::UNIX_EPOCH) {
        return None;
    }
    let mut e = entry.clone();
    set_annotation(&mut e, CONNECTED_AT, None);
    set_annotation(&mut e, DISCONNECTED_AT, Some(rfc3339_nano(at)));
    Some(e)
}

fn auto_registered(entry: &Json) -> bool {
    annotation(entry, GROUP).is_some_and(|g| !g.is_empty())
}

fn health_checked(entry: &Json) -> bool {
    annotation(entry, CONTROLLER).is_some_and(|c| !c.is_empty()) && !auto_registered(entry)
}

fn has_health(entry: &Json) -> bool {
    entry["status"]["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Healthy"))
}

/// istiod's `shouldCleanupEntry`.
pub(crate) fn should_clean_up(entry: &Json, now: SystemTime, grace: Duration, max_age: Option<Duration>) -> bool {
    if !(auto_registered(entry) || health_checked(entry) && has_health(entry)) {
        return false;
    }
    if annotation(entry, CONNECTED_AT).is_some_and(|c| !c.is_empty()) {
        // Its replica and proxy died before it could be marked.
        let Some(at) = time_of(entry, CONNECTED_AT) else { return false };
        return max_age.is_some_and(|m| now.duration_since(at).unwrap_or_default() > m);
    }
    let Some(gone) = annotation(entry, DISCONNECTED_AT) else { return false };
    match parse_rfc3339(gone) {
        Some(at) => now.duration_since(at).unwrap_or_default() >= grace,
        None => true,
    }
}

/// The `Healthy` condition of a report at `now`.
fn health_condition(healthy: bool, message: &str, now: SystemTime) -> Json {
    let t = rfc3339_nano(now);
    let mut c = json!({"type": "Healthy", "status": if healthy { "True" } else { "False" },
                       "lastProbeTime": t, "lastTransitionTime": t});
    if !healthy && !message.is_empty() {
        c["message"] = json!(message);
    }
    c
}

/// istiod's `UpdateHealth`: the entry with the condition, or `None` when
/// another replica holds it or a later probe is recorded.
pub(crate) fn with_health(entry: &Json, instance: &str, condition: &Json) -> Option<Json> {
    if annotation(entry, CONTROLLER) != Some(instance) {
        return None;
    }
    let conditions = entry["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let probe = |c: &Json| c["lastProbeTime"].as_str().and_then(parse_rfc3339);
    if let Some(old) = conditions.iter().find(|c| c["type"] == "Healthy")
        && probe(old) > probe(condition)
    {
        return None;
    }
    let mut e = entry.clone();
    let mut next: Vec<Json> = conditions;
    match next.iter_mut().find(|c| c["type"] == "Healthy") {
        Some(c) => *c = condition.clone(),
        None => next.push(condition.clone()),
    }
    if !e["status"].is_object() {
        e["status"] = json!({});
    }
    e["status"]["conditions"] = Json::Array(next);
    Some(e)
}

/// A proxy's identity for counting its connections (istiod's `proxyKey`).
type ProxyKey = (String, String, String, String);

/// One tracked stream.
#[derive(Debug, Clone)]
struct Tracked {
    /// The stream's connection id.
    conn: String,
    key: ProxyKey,
    entry: String,
    namespace: String,
    /// Auto-registered (else a health-checked entry of the proxy's).
    auto: bool,
    connected_at: SystemTime,
    class: Arc<ProxyClass>,
    identity: Option<(String, String)>,
}

/// The controller of one replica.
pub(crate) struct Controller<S> {
    store: S,
    s: Settings,
    conns: HashMap<String, Tracked>,
    by_key: HashMap<ProxyKey, BTreeSet<String>>,
    /// Entries to look at again, when.
    cleanups: BTreeMap<(Instant, u64), (String, String)>,
    seq: u64,
}

impl<S: Store> Controller<S> {
    pub(crate) fn new(store: S, s: Settings) -> Self {
        Controller { store, s, conns: HashMap::new(), by_key: HashMap::new(), cleanups: BTreeMap::new(), seq: 0 }
    }

    /// istiod's `OnConnect`.
    pub(crate) async fn on_connect(
        &mut self,
        conn: &str,
        class: Arc<ProxyClass>,
        identities: &[String],
        at: SystemTime,
    ) -> Result<(), String> {
        let result = match self.track(conn, class, identities, at).await {
            Ok(Some(t)) => self.connect(&t).await,
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = &result {
            tracing::error!(target: "wle", conn, "{e}");
            // Not the entry's: its reports are not taken, its end marks
            // nothing (istiod ends such a stream).
            self.forget(conn);
        }
        result
    }

    /// The bookkeeping part of istiod's `OnConnect`: which entry the
    /// stream stands for (`None`: none), recorded.
    async fn track(
        &mut self,
        conn: &str,
        class: Arc<ProxyClass>,
        identities: &[String],
        at: SystemTime,
    ) -> Result<Option<Tracked>, String> {
        if class.node_type == NodeType::Ztunnel {
            return Ok(None);
        }
        let ns = class.namespace.to_string();
        // Names from the proxy's metadata go into API paths.
        for (what, v) in [
            ("NAMESPACE", &*ns),
            ("AUTO_REGISTER_GROUP", meta(&class, "AUTO_REGISTER_GROUP")),
            ("WORKLOAD_ENTRY", meta(&class, "WORKLOAD_ENTRY")),
        ] {
            if !v.is_empty() && !dns_subdomain(v) {
                return Err(format!("{what} {v:?} is not a valid Kubernetes name"));
            }
        }
        let identity = verified_identity(&class, identities);
        let (entry, auto) = if self.s.autoregistration && !meta(&class, "AUTO_REGISTER_GROUP").is_empty() {
            match entry_name(&class) {
                Some(name) => (name, true),
                None => return Ok(None),
            }
        } else if self.s.health_checks && !meta(&class, "WORKLOAD_ENTRY").is_empty() {
            let name = meta(&class, "WORKLOAD_ENTRY").to_owned();
            let Some(we) = self.store.entry(&ns, &name).await? else {
                return Err(format!(
                    "proxy metadata indicates that it must correspond to an existing WorkloadEntry, however WorkloadEntry {ns}/{name} is not found"
                ));
            };
            if annotation(&we, HEALTH_CHECKS).is_none() {
                return Ok(None);
            }
            if self.s.validate_identity {
                can_control(identity.as_ref(), &we)?;
            }
            (name, false)
        } else {
            return Ok(None);
        };
        let key = (
            meta(&class, "NETWORK").to_owned(),
            class.ips.first().map(|i| i.to_string()).unwrap_or_default(),
            meta(&class, "AUTO_REGISTER_GROUP").to_owned(),
            ns.clone(),
        );
        self.by_key.entry(key.clone()).or_default().insert(conn.to_owned());
        let t = Tracked { conn: conn.to_owned(), key, entry, namespace: ns, auto, connected_at: at, class, identity };
        self.conns.insert(conn.to_owned(), t.clone());
        Ok(Some(t))
    }

    /// The API part of istiod's `OnConnect`.
    async fn connect(&self, t: &Tracked) -> Result<(), String> {
        if t.auto { self.register(t).await } else { self.become_controller(t).await.map(|_| ()) }
    }

    /// istiod's `registerWorkload`.
    async fn register(&self, t: &Tracked) -> Result<(), String> {
        let (ns, name) = (&t.namespace, &t.entry);
        if let Some(we) = self.store.cached_entry(ns, name).await? {
            return self.register_existing(t, &we).await;
        }
        let group_name = meta(&t.class, "AUTO_REGISTER_GROUP");
        let Some(group) = self.store.cached_group(ns, group_name).await? else {
            count(&ERRORS);
            return Err(format!(
                "auto-registration WorkloadEntry of {} failed: cannot find WorkloadGroup {ns}/{group_name}",
                t.class.ips.first().map_or("", |i| &**i)
            ));
        };
        let mut we = entry_from_group(name, &t.class, &group, self.s.hbone);
        if self.s.validate_identity {
            can_control(t.identity.as_ref(), &we)?;
        }
        set_connected(&mut we, &self.s.instance, t.connected_at);
        match self.store.create(&we).await {
            Ok(Write::Done(_)) => {
                count(&SUCCESS);
                let health =
                    if annotation(&we, HEALTH_CHECKS).is_some() { " with health checking enabled" } else { "" };
                tracing::info!(target: "wle", "auto-registered WorkloadEntry {ns}/{name}{health}");
                Ok(())
            }
            // There already (the watch was behind): as an existing one.
            Ok(Write::Conflict) => match self.store.entry(ns, name).await? {
                Some(we) => self.register_existing(t, &we).await,
                None => {
                    count(&ERRORS);
                    Err(format!(
                        "auto-registration WorkloadEntry of {name} failed: error creating WorkloadEntry: already exists"
                    ))
                }
            },
            Err(e) => {
                count(&ERRORS);
                Err(format!("auto-registration WorkloadEntry of {name} failed: error creating WorkloadEntry: {e}"))
            }
        }
    }

    /// `registerWorkload` of an entry that exists: the proxy must be able
    /// to control it; then it is marked connected.
    async fn register_existing(&self, t: &Tracked, we: &Json) -> Result<(), String> {
        let (ns, name) = (&t.namespace, &t.entry);
        if self.s.validate_identity {
            can_control(t.identity.as_ref(), we)?;
        }
        match self.become_controller(t).await {
            Err(e) => {
                count(&ERRORS);
                Err(e)
            }
            Ok(true) => {
                count(&UPDATES);
                tracing::info!(target: "wle", "updated auto-registered WorkloadEntry {ns}/{name} as connected");
                Ok(())
            }
            Ok(false) => Ok(()),
        }
    }

    /// Marks the entry connected to this replica; whether it changed it.
    /// An entry written meanwhile (another replica marking it) is read
    /// again: the later connection wins.
    async fn become_controller(&self, t: &Tracked) -> Result<bool, String> {
        let (ns, name) = (&t.namespace, &t.entry);
        for attempt in 0..6 {
            // The watched copy first; after a conflict, or where the
            // watched copy says there is nothing to do (it may be behind),
            // the API server's.
            let cached = attempt == 0;
            let read = if cached { self.store.cached_entry(ns, name).await? } else { None };
            let read = match read {
                Some(we) => Some(we),
                None => self.store.entry(ns, name).await?,
            };
            let Some(we) = read else {
                return Err(format!("failed updating WorkloadEntry {ns}/{name}: WorkloadEntry not found"));
            };
            let Some(next) = connected(&we, &self.s.instance, t.connected_at) else {
                if cached {
                    continue;
                }
                return Ok(false);
            };
            match self.store.update(&next).await {
                Ok(Write::Done(_)) => {
                    if !t.auto {
                        tracing::info!(target: "wle", "updated health-checked WorkloadEntry {ns}/{name}");
                    }
                    return Ok(true);
                }
                Ok(Write::Conflict) => continue,
                Err(e) => return Err(format!("failed updating WorkloadEntry {ns}/{name} err: {e}")),
            }
        }
        Err(format!("failed updating WorkloadEntry {ns}/{name} err: the object has been modified"))
    }

    /// istiod's `OnDisconnect`: the entry is marked disconnected unless
    /// another stream of the proxy remains, and looked at again after the
    /// grace period.
    pub(crate) async fn on_disconnect(&mut self, conn: &str, at: SystemTime) {
        let Some(t) = self.untrack(conn) else { return };
        let changed = self.disconnect(&t, at).await;
        self.disconnected(&t, changed);
    }

    /// The stream's entry, when it was the proxy's last stream.
    fn untrack(&mut self, conn: &str) -> Option<Tracked> {
        let t = self.conns.remove(conn)?;
        if let Some(set) = self.by_key.get_mut(&t.key) {
            set.remove(conn);
            if !set.is_empty() {
                return None;
            }
            self.by_key.remove(&t.key);
        }
        Some(t)
    }

    /// Forgets a stream whose entry it could not claim.
    fn forget(&mut self, conn: &str) {
        if let Some(t) = self.conns.remove(conn)
            && let Some(set) = self.by_key.get_mut(&t.key)
        {
            set.remove(conn);
            if set.is_empty() {
                self.by_key.remove(&t.key);
            }
        }
    }

    /// Marks the entry disconnected (istiod retries 5 times); whether it
    /// did.
    async fn disconnect(&self, t: &Tracked, at: SystemTime) -> bool {
        for attempt in 1..=5 {
            match self.mark_disconnected(t, at, attempt > 1).await {
                Ok(changed) => return changed,
                Err(e) => {
                    count(&ERRORS);
                    tracing::warn!(target: "wle", attempt, "disconnect: {e}");
                }
            }
        }
        false
    }

    /// After [`Controller::disconnect`]: counted, and looked at again after
    /// the grace period.
    fn disconnected(&mut self, t: &Tracked, changed: bool) {
        if !changed {
            return;
        }
        if t.auto {
            count(&UNREGISTER);
            tracing::info!(target: "wle", "updated auto-registered WorkloadEntry {}/{} as disconnected", t.namespace, t.entry);
        }
        self.seq += 1;
        self.cleanups.insert((Instant::now() + self.s.grace, self.seq), (t.namespace.clone(), t.entry.clone()));
    }

    async fn mark_disconnected(&self, t: &Tracked, at: SystemTime, fresh: bool) -> Result<bool, String> {
        let (ns, name) = (&t.namespace, &t.entry);
        let cached = if fresh { None } else { self.store.cached_entry(ns, name).await? };
        let read = match cached {
            Some(we) => Some(we),
            None => self.store.entry(ns, name).await?,
        };
        let Some(we) = read else {
            return Err(format!("workloadentry {ns}/{name} is not found"));
        };
        let Some(next) = disconnected(&we, &self.s.instance, at, t.connected_at) else {
            // The watched copy may be behind: the API server's says.
            if !fresh {
                return Box::pin(self.mark_disconnected(t, at, true)).await;
            }
            return Ok(false);
        };
        match self.store.update(&next).await? {
            Write::Done(_) => Ok(true),
            Write::Conflict => {
                Err(format!("disconnect: failed updating WorkloadEntry {ns}/{name}: the object has been modified"))
            }
        }
    }

    /// A health report from stream `conn` (istiod's
    /// `QueueWorkloadEntryHealth`).
    pub(crate) async fn on_health(&mut self, conn: &str, healthy: bool, message: &str) {
        if !self.s.health_checks {
            return;
        }
        let Some(t) = self.conns.get(conn) else {
            tracing::debug!(target: "wle", conn, "unable to derive WorkloadEntry for health update for {conn}");
            return;
        };
        let (ns, name) = (t.namespace.clone(), t.entry.clone());
        let condition = health_condition(healthy, message, SystemTime::now());
        for _ in 0..5 {
            let we = match self.store.entry(&ns, &name).await {
                Ok(Some(we)) => we,
                Ok(None) => {
                    tracing::error!(target: "wle", "failed to update health status for {conn}: WorkloadEntry {ns} not found");
                    return;
                }
                Err(e) => {
                    tracing::error!(target: "wle", "error while updating WorkloadEntry health status for {conn}: {e}");
                    continue;
                }
            };
            let Some(next) = with_health(&we, &self.s.instance, &condition) else { return };
            match self.store.update_status(&next).await {
                Ok(Write::Done(_)) => return,
                Ok(Write::Conflict) => continue,
                Err(e) => {
                    tracing::error!(target: "wle", "error while updating WorkloadEntry health status for {conn}: {e}")
                }
            }
        }
    }

    /// When the controller next wants [`Controller::tick`].
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.cleanups.keys().next().map(|(at, _)| *at)
    }

    /// Looks again at the entries due by `now` (istiod's delayed cleanup),
    /// [`CONCURRENCY`] at a time.
    pub(crate) async fn tick(&mut self, now: Instant) {
        use futures_util::StreamExt;
        let mut due = Vec::new();
        while let Some((&(at, seq), _)) = self.cleanups.iter().next() {
            if at > now {
                break;
            }
            due.extend(self.cleanups.remove(&(at, seq)));
        }
        let this = &*self;
        futures_util::stream::iter(due)
            .map(|(ns, name)| async move {
                match this.store.entry(&ns, &name).await {
                    Ok(Some(we))
                        if should_clean_up(&we, SystemTime::now(), this.s.grace, this.s.max_connection_age) =>
                    {
                        this.clean_up(&we, false).await;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(target: "wle", "failed cleaning up auto-registered WorkloadEntry {ns}/{name}: {e}")
                    }
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<()>>()
            .await;
    }

    /// istiod's `cleanupEntry`.
    async fn clean_up(&self, we: &Json, periodic: bool) {
        let (ns, name) = ns_name(we);
        if auto_registered(we) {
            let rv = we["metadata"]["resourceVersion"].as_str();
            match self.store.delete(ns, name, rv).await {
                Ok(Deleted::Done | Deleted::Gone) => {
                    count(&DELETES);
                    tracing::info!(target: "wle", "cleaned up auto-registered WorkloadEntry {ns}/{name} periodic:{periodic}");
                }
                Ok(Deleted::Conflict) => {
                    count(&ERRORS);
                    tracing::warn!(target: "wle", "failed cleaning up auto-registered WorkloadEntry {ns}/{name}: it changed meanwhile");
                }
                Err(e) => {
                    count(&ERRORS);
                    tracing::warn!(target: "wle", "failed cleaning up auto-registered WorkloadEntry {ns}/{name}: {e}");
                }
            }
        } else if health_checked(we) && has_health(we) {
            let mut next = we.clone();
            if let Some(c) = next["status"]["conditions"].as_array_mut() {
                c.retain(|c| c["type"] != "Healthy");
            }
            match self.store.update_status(&next).await {
                Ok(_) => {
                    tracing::info!(target: "wle", "cleaned up health-checked WorkloadEntry {ns}/{name} periodic:{periodic}")
                }
                Err(e) => {
                    tracing::warn!(target: "wle", "error while removing WorkloadEntry health status for {ns}/{name}: {e}");
                }
            }
        }
    }

    /// istiod's `periodicWorkloadEntryCleanup`, and its late registration:
    /// entries left behind are cleaned up; a connected proxy whose entry
    /// is missing (its group was gone, or came back) is registered again.
    pub(crate) async fn sweep(&mut self) {
        match self.store.list().await {
            Ok(entries) => {
                let now = SystemTime::now();
                for we in entries {
                    if should_clean_up(&we, now, self.s.grace, self.s.max_connection_age) {
                        self.clean_up(&we, true).await;
                    }
                }
            }
            Err(e) => tracing::warn!(target: "wle", "listing WorkloadEntries: {e}"),
        }
        let tracked: Vec<Tracked> = self.conns.values().filter(|t| t.auto).cloned().collect();
        let mut seen = BTreeSet::new();
        for t in tracked {
            if !seen.insert((t.namespace.clone(), t.entry.clone())) {
                continue;
            }
            if matches!(self.store.entry(&t.namespace, &t.entry).await, Ok(None))
                && let Err(e) = self.register(&t).await
            {
                tracing::warn!(target: "wle", "{e}");
            }
        }
    }

    /// Handles one event of the cores.
    pub(crate) async fn on_event(&mut self, ev: istiod_xds::ads::Lifecycle<ProxyClass>) {
        use istiod_xds::ads::Lifecycle;
        match ev {
            Lifecycle::Connected { conn, class, identities, at } => {
                let _ = self.on_connect(&conn, class, &identities, at).await;
            }
            Lifecycle::Disconnected { conn, at, .. } => self.on_disconnect(&conn, at).await,
            Lifecycle::Report { conn, type_url, error, .. }
                if type_url == istiod_mesh::generator::HEALTH_INFORMATION =>
            {
                self.on_health(&conn, error.is_none(), error.as_deref().unwrap_or_default()).await;
            }
            Lifecycle::Report { .. } => {}
        }
    }
}

/// How many entries the controller writes at once: the cores report a
/// thousand VMs connecting in a burst; one round trip at a time would
/// take seconds.
const CONCURRENCY: usize = 64;

/// One API operation of a batch.
enum Op {
    Connect(Tracked),
    Disconnect(Tracked, SystemTime),
}

impl<S: Store> Controller<S> {
    /// Handles a burst of events: bookkeeping in order, the API writes of
    /// different entries at once (an entry's are never reordered: a
    /// second event of an entry ends the batch before it).
    pub(crate) async fn on_events(&mut self, events: Vec<istiod_xds::ads::Lifecycle<ProxyClass>>) {
        use istiod_xds::ads::Lifecycle;
        let mut batch: Vec<Op> = Vec::new();
        let mut entries: BTreeSet<(String, String)> = BTreeSet::new();
        for ev in events {
            let op = match ev {
                Lifecycle::Connected { conn, class, identities, at } => {
                    match self.track(&conn, class, &identities, at).await {
                        Ok(Some(t)) => Op::Connect(t),
                        Ok(None) => continue,
                        Err(e) => {
                            tracing::error!(target: "wle", conn, "{e}");
                            continue;
                        }
                    }
                }
                Lifecycle::Disconnected { conn, at, .. } => match self.untrack(&conn) {
                    Some(t) => Op::Disconnect(t, at),
                    None => continue,
                },
                other => {
                    self.flush(std::mem::take(&mut batch)).await;
                    entries.clear();
                    self.on_event(other).await;
                    continue;
                }
            };
            let (Op::Connect(t) | Op::Disconnect(t, _)) = &op;
            // An entry's writes in their order: a second one waits for the
            // batch before it.
            if !entries.insert((t.namespace.clone(), t.entry.clone())) {
                self.flush(std::mem::take(&mut batch)).await;
                entries.clear();
                entries.insert((t.namespace.clone(), t.entry.clone()));
            }
            batch.push(op);
        }
        self.flush(batch).await;
    }

    async fn flush(&mut self, batch: Vec<Op>) {
        use futures_util::StreamExt;
        if batch.is_empty() {
            return;
        }
        let this = &*self;
        let done: Vec<Option<Result<(Tracked, bool), String>>> = futures_util::stream::iter(batch)
            .map(|op| async move {
                match op {
                    Op::Connect(t) => match this.connect(&t).await {
                        Ok(()) => None,
                        Err(e) => {
                            tracing::error!(target: "wle", conn = %t.conn, "{e}");
                            Some(Err(t.conn))
                        }
                    },
                    Op::Disconnect(t, at) => {
                        let changed = this.disconnect(&t, at).await;
                        Some(Ok((t, changed)))
                    }
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for d in done.into_iter().flatten() {
            match d {
                Ok((t, changed)) => self.disconnected(&t, changed),
                Err(conn) => self.forget(&conn),
            }
        }
    }
}

/// The cores' two channels: streams connecting and ending, and reports.
pub(crate) type Receivers = (
    async_channel::Receiver<istiod_xds::ads::Lifecycle<ProxyClass>>,
    async_channel::Receiver<istiod_xds::ads::Lifecycle<ProxyClass>>,
);

/// Runs the controller on the control thread until the cores' channels
/// close.
pub(crate) async fn run<S: Store>(mut c: Controller<S>, (streams, reports): Receivers) {
    use istiod_xds::ads::Lifecycle;
    let sweep_every = c.s.grace.saturating_mul(10).max(Duration::from_millis(100));
    let mut next_sweep = Instant::now() + sweep_every;
    loop {
        let due = c.next_due().map_or(next_sweep, |d| d.min(next_sweep));
        tokio::select! {
            ev = streams.recv() => match ev {
                Ok(ev) => {
                    // What else has arrived goes with it, then the reports
                    // (each stream's last only: a state, not a log).
                    let mut events = vec![ev];
                    while events.len() < 4096 {
                        match streams.try_recv() {
                            Ok(ev) => events.push(ev),
                            Err(_) => break,
                        }
                    }
                    c.on_events(events).await;
                }
                Err(_) => return,
            },
            ev = reports.recv() => match ev {
                Ok(ev) => {
                    let mut last: BTreeMap<String, Lifecycle<ProxyClass>> = BTreeMap::new();
                    let mut put = |ev: Lifecycle<ProxyClass>| {
                        if let Lifecycle::Report { conn, .. } = &ev {
                            last.insert(conn.clone(), ev);
                        }
                    };
                    put(ev);
                    for _ in 0..4096 {
                        match reports.try_recv() {
                            Ok(ev) => put(ev),
                            Err(_) => break,
                        }
                    }
                    c.on_events(last.into_values().collect()).await;
                }
                Err(_) => return,
            },
            _ = tokio::time::sleep_until(due.into()) => {
                let now = Instant::now();
                c.tick(now).await;
                if now >= next_sweep {
                    c.sweep().await;
                    next_sweep = Instant::now() + sweep_every;
                }
            }
        }
    }
}

/// Without an API server (or with both switches off): the proxies of
/// WorkloadGroups are served, and it is said once that their entries are
/// not made.
pub(crate) async fn unserved((rx, reports): Receivers, no_api: bool) {
    // Reports are not read: the cores drop them once the channel is full.
    drop(reports);
    let mut said = false;
    while let Ok(ev) = rx.recv().await {
        if let (istiod_xds::ads::Lifecycle::Connected { conn, .. }, false) = (&ev, said) {
            said = true;
            let why = if no_api {
                "WorkloadEntries are written to the Kubernetes API server, and there is none (--configDir)"
            } else {
                "PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION and PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS are off"
            };
            tracing::warn!(target: "wle", conn, "a proxy of a WorkloadGroup or a health-checked WorkloadEntry connected; not registered: {why}");
        }
    }
}

#[cfg(test)]
mod tests;
