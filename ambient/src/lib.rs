//! The ambient index: what ztunnels are served (istiod's
//! `pilot/pkg/serviceregistry/ambient`), as resources of the workload API,
//! kept incrementally from the objects the sources read.
//!
//! Each output is a function of a few inputs, keyed per object, as istiod's
//! krt collections are:
//!
//! | output (resource name) | reads |
//! |---|---|
//! | a Pod's `Workload` (`<cluster>//Pod/<ns>/<name>`) | the Pod, its Node (locality), the services of its namespace that select it, the selector policies of its namespace and the root namespace, the PeerAuthentications in force for it |
//! | a WorkloadEntry's `Workload` | the entry, the services of its namespace that select it, the policies |
//! | a ServiceEntry's endpoint `Workload`s (`<cluster>/networking.istio.io/ServiceEntry/<ns>/<name>/<address>`) | the ServiceEntry, the services it won, the policies |
//! | the `Service`s of one hostname (`<ns>/<hostname>`, one per namespace) | every Service and ServiceEntry that names the hostname, their Namespaces (traffic distribution) |
//! | an `Authorization` (`<ns>/<name>`) | its AuthorizationPolicy; the converted PeerAuthentications read the namespace's and root's ones |
//!
//! A change names the objects it changed ([`Index::apply`]); the index
//! follows the table backwards (a Service or ServiceEntry change marks the
//! hostnames it had and has; a service that changes marks the workloads its
//! old and new selectors select, and a ServiceEntry's own endpoints; a Node
//! change, its Pods; a policy change, the workloads of its namespace, or
//! every one for the root namespace), rebuilds only the marked outputs, and
//! hands back those whose encoded bytes changed: exactly the resources to
//! push. The sidecar model can move onto the same shape
//! (docs/architecture.md, "The ambient index").
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use istiod_config::gateway_api::{GatewayApiObject, GatewayApiSpec};
use istiod_config::gateway_convert::ObjectStatus;
use istiod_config::istio::{IstioObject, IstioSpec};
use istiod_config::manifest::ObjectRef;
use istiod_config::objects::{EndpointSlice, Namespace, Node, Objects, Pod, Service};
use istiod_proto::istio::security::Authorization;
use istiod_proto::istio::workload::{Address, Workload, address};
use istiod_proto::prost::Message;
use istiod_xds_api::snapshot::Kind;

pub mod authz;
pub mod endpoint_slice;
pub mod service;
pub mod service_entry;
pub mod waypoint;
pub mod workload;

use service::{Info, Source};

/// What the index is built with: the mesh's names for things.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `CLUSTER_ID` (`Kubernetes`): the first part of a workload's uid.
    pub cluster_id: String,
    /// The domain suffix (`cluster.local`): services' hostnames.
    pub domain: String,
    /// The mesh's trust domain (`cluster.local`).
    pub trust_domain: String,
    /// The root namespace (`istio-system`): mesh-wide policies.
    pub root_namespace: String,
    /// The local network where the system namespace's
    /// `topology.istio.io/network` label names none (`NETWORK`, empty by
    /// default).
    pub network: String,
    /// The namespace istiod runs in (`POD_NAMESPACE`, `istio-system`): its
    /// `topology.istio.io/network` label is the local network.
    pub system_namespace: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cluster_id: "Kubernetes".into(),
            domain: "cluster.local".into(),
            trust_domain: "cluster.local".into(),
            root_namespace: "istio-system".into(),
            network: String::new(),
            system_namespace: "istio-system".into(),
        }
    }
}

/// A resource the index changed: added or replaced (`Some`), or removed.
pub type Change = (Kind, Arc<str>, Option<Bytes>);

/// `(namespace, name)`.
type Key = (String, String);

fn key(ns: &str, name: &str) -> Key {
    (ns.to_owned(), name.to_owned())
}

/// One output: its resource name, message and encoded bytes.
#[derive(Debug, Clone)]
struct Output<M> {
    name: Arc<str>,
    message: M,
    bytes: Bytes,
}

/// The inputs the index keeps, keyed for the lookups the outputs make.
#[derive(Debug, Default, Clone)]
pub struct Inputs {
    pods: HashMap<Key, Arc<Pod>>,
    services: HashMap<Key, Arc<Service>>,
    namespaces: HashMap<String, Arc<Namespace>>,
    nodes: HashMap<String, Arc<Node>>,
    /// AuthorizationPolicies and PeerAuthentications.
    policies: HashMap<(String, Key), Arc<IstioObject>>,
    /// WorkloadEntries.
    entries: HashMap<Key, Arc<IstioObject>>,
    /// ServiceEntries.
    service_entries: HashMap<Key, Arc<IstioObject>>,
    /// The Services and ServiceEntries naming each hostname.
    hosts: HashMap<String, BTreeSet<(Source, Key)>>,
    /// Gateway API Gateways.
    gateways: HashMap<Key, Arc<GatewayApiObject>>,
    /// Gateway API GatewayClasses.
    gateway_classes: HashMap<String, Arc<GatewayApiObject>>,
    /// The waypoints, made from the Gateways (derived: kept here for the
    /// builders that read them).
    waypoints: waypoint::Waypoints,
    /// EndpointSlices.
    slices: HashMap<Key, Arc<EndpointSlice>>,
    /// The EndpointSlices naming each Pod.
    slices_by_pod: HashMap<Key, BTreeSet<Key>>,
    /// The EndpointSlices of each Service.
    slices_by_service: HashMap<Key, BTreeSet<String>>,
    /// Pod names by namespace.
    pods_by_ns: HashMap<String, BTreeSet<String>>,
    /// Service names by namespace.
    services_by_ns: HashMap<String, BTreeSet<String>>,
}

impl Inputs {
    /// The Node named `name`.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name).map(|n| &**n)
    }

    /// The Namespace named `name`.
    pub fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.get(name).map(|n| &**n)
    }

    /// The policies of `kind` in namespace `ns`.
    pub fn policies_in<'a>(&'a self, kind: &'a str, ns: &'a str) -> impl Iterator<Item = &'a IstioObject> + 'a {
        self.policies.iter().filter(move |((k, (n, _)), _)| k == kind && n == ns).map(|(_, o)| &**o)
    }

    /// Every policy of `kind`.
    pub fn policies_of<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a IstioObject> + 'a {
        self.policies.iter().filter(move |((k, _), _)| k == kind).map(|(_, o)| &**o)
    }

    fn set_pod(&mut self, k: Key, pod: Option<Pod>) -> Option<Arc<Pod>> {
        match pod {
            Some(p) => {
                self.pods_by_ns.entry(k.0.clone()).or_default().insert(k.1.clone());
                self.pods.insert(k, Arc::new(p))
            }
            None => {
                if let Some(s) = self.pods_by_ns.get_mut(&k.0) {
                    s.remove(&k.1);
                }
                self.pods.remove(&k)
            }
        }
    }

    /// Sets Service `k`, keeping the hostname index; returns the hostnames
    /// it had and has.
    fn set_service(&mut self, k: Key, svc: Option<Service>, domain: &str) -> Vec<String> {
        let new_host = svc.as_ref().map(|s| service::hostname(s, domain));
        let old = match svc {
            Some(s) => {
                self.services_by_ns.entry(k.0.clone()).or_default().insert(k.1.clone());
                self.services.insert(k.clone(), Arc::new(s))
            }
            None => {
                if let Some(s) = self.services_by_ns.get_mut(&k.0) {
                    s.remove(&k.1);
                }
                self.services.remove(&k)
            }
        };
        let old_host = old.map(|s| service::hostname(&s, domain));
        self.rehost((Source::Service, k), old_host.iter().cloned().collect(), new_host.iter().cloned().collect())
    }

    /// Sets ServiceEntry `k`, as [`Inputs::set_service`].
    fn set_service_entry(&mut self, k: Key, o: Option<IstioObject>) -> Vec<String> {
        let hosts = |o: &IstioObject| match &o.spec {
            IstioSpec::ServiceEntry(se) => se.hosts.clone(),
            _ => Vec::new(),
        };
        let new_hosts = o.as_ref().map(hosts).unwrap_or_default();
        let old = match o {
            Some(o) => self.service_entries.insert(k.clone(), Arc::new(o)),
            None => self.service_entries.remove(&k),
        };
        let old_hosts = old.map(|o| hosts(&o)).unwrap_or_default();
        self.rehost((Source::ServiceEntry, k), old_hosts, new_hosts)
    }

    /// Sets EndpointSlice `k`, keeping its indexes; returns the Pods whose
    /// services it may have changed: those it stopped or started naming
    /// (by name and uid), or every one it named and names where it moved
    /// to another Service.
    fn set_slice(&mut self, k: Key, es: Option<EndpointSlice>) -> Vec<Key> {
        let new_refs = es.as_ref().map(endpoint_slice::pod_refs).unwrap_or_default();
        let new_service = es.as_ref().and_then(|e| e.service_name().map(str::to_owned));
        let old = match es {
            Some(e) => self.slices.insert(k.clone(), Arc::new(e)),
            None => self.slices.remove(&k),
        };
        let old_refs = old.as_deref().map(endpoint_slice::pod_refs).unwrap_or_default();
        let old_service = old.as_deref().and_then(EndpointSlice::service_name).map(str::to_owned);
        if let Some(svc) = &old_service {
            let sk = key(&k.0, svc);
            if let Some(set) = self.slices_by_service.get_mut(&sk) {
                set.remove(&k.1);
                if set.is_empty() {
                    self.slices_by_service.remove(&sk);
                }
            }
        }
        if let Some(svc) = &new_service {
            self.slices_by_service.entry(key(&k.0, svc)).or_default().insert(k.1.clone());
        }
        let keys = |refs: &BTreeSet<(Key, String)>| refs.iter().map(|(p, _)| p.clone()).collect::<BTreeSet<Key>>();
        let (old_keys, new_keys) = (keys(&old_refs), keys(&new_refs));
        for p in old_keys.difference(&new_keys) {
            if let Some(set) = self.slices_by_pod.get_mut(p) {
                set.remove(&k);
                if set.is_empty() {
                    self.slices_by_pod.remove(p);
                }
            }
        }
        for p in new_keys.difference(&old_keys) {
            self.slices_by_pod.entry(p.clone()).or_default().insert(k.clone());
        }
        if old_service != new_service {
            return old_keys.union(&new_keys).cloned().collect();
        }
        let moved: BTreeSet<Key> = old_refs.symmetric_difference(&new_refs).map(|(p, _)| p.clone()).collect();
        moved.into_iter().collect()
    }

    fn rehost(&mut self, src: (Source, Key), old: Vec<String>, new: Vec<String>) -> Vec<String> {
        for h in &old {
            if let Some(set) = self.hosts.get_mut(h) {
                set.remove(&src);
                if set.is_empty() {
                    self.hosts.remove(h);
                }
            }
        }
        for h in &new {
            self.hosts.entry(h.clone()).or_default().insert(src.clone());
        }
        let mut all = old;
        all.extend(new);
        all
    }
}

/// The services the index serves, one per namespace and hostname.
#[derive(Debug, Default, Clone)]
pub struct Services {
    map: BTreeMap<Key, ServiceOut>,
    /// The namespaces holding a service of each hostname.
    host_namespaces: HashMap<String, BTreeSet<String>>,
}

#[derive(Debug, Clone)]
struct ServiceOut {
    name: Arc<str>,
    bytes: Bytes,
    info: Info,
}

impl Services {
    /// The service of hostname `host` in namespace `ns`.
    pub fn get(&self, ns: &str, host: &str) -> Option<&Info> {
        self.map.get(&(ns.to_owned(), host.to_owned())).map(|o| &o.info)
    }

    /// The services of namespace `ns`.
    pub fn in_ns<'a>(&'a self, ns: &str) -> impl Iterator<Item = &'a Info> + 'a {
        let ns = ns.to_owned();
        self.map.range((ns.clone(), String::new())..).take_while(move |((n, _), _)| *n == ns).map(|(_, o)| &o.info)
    }
}

/// The policy kinds the index reads.
const POLICY_KINDS: [&str; 2] = ["AuthorizationPolicy", "PeerAuthentication"];

fn policy_kind(o: &IstioObject) -> Option<&'static str> {
    match o.spec {
        IstioSpec::AuthorizationPolicy(_) => Some(POLICY_KINDS[0]),
        IstioSpec::PeerAuthentication(_) => Some(POLICY_KINDS[1]),
        _ => None,
    }
}

/// The ambient index: inputs and outputs, changed together by
/// [`Index::apply`]. A clone is an independent index (what-if predictions
/// apply a change to one).
#[derive(Debug, Default, Clone)]
pub struct Index {
    settings: Option<Settings>,
    inputs: Inputs,
    /// Workloads by their Pod.
    workloads: BTreeMap<Key, Output<Address>>,
    /// Workloads by their WorkloadEntry.
    entry_workloads: BTreeMap<Key, Output<Address>>,
    /// Workloads by their ServiceEntry (one per endpoint).
    se_workloads: BTreeMap<Key, Vec<Output<Address>>>,
    /// Workloads by their EndpointSlice (one per endpoint without a Pod).
    slice_workloads: BTreeMap<Key, Vec<Output<Address>>>,
    /// Services by namespace and hostname.
    services: Services,
    /// Authorizations by resource name.
    policies: BTreeMap<Arc<str>, Output<Authorization>>,
    /// The statuses istiod writes on the AuthorizationPolicies.
    policy_statuses: Vec<ObjectStatus>,
    /// The `WaypointAccepted` statuses of those attached by `targetRef`.
    waypoint_policy_statuses: Vec<ObjectStatus>,
    /// The statuses istiod writes on the Services and ServiceEntries (their
    /// waypoint binding), by object.
    service_statuses: BTreeMap<(Source, Key), ObjectStatus>,
    /// The statuses istiod writes on the WorkloadEntries (their waypoint
    /// binding).
    entry_statuses: BTreeMap<Key, ObjectStatus>,
    /// All of them.
    statuses: Arc<Vec<ObjectStatus>>,
}

/// What one [`Index::apply`] rebuilt, for logs and benchmarks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Rebuilt {
    /// Workloads recomputed (Pods, WorkloadEntries, ServiceEntries).
    pub workloads: usize,
    /// Hostnames whose services were recomputed.
    pub services: usize,
    /// Whether the policies were recomputed.
    pub policies: bool,
}

impl Index {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the objects now in force and the ones that changed (`None`:
    /// unknown, so everything is read again) and returns the resources
    /// that changed.
    pub fn apply(&mut self, objects: &Objects, changed: Option<&[ObjectRef]>, settings: &Settings) -> Vec<Change> {
        self.apply_counted(objects, changed, settings).0
    }

    /// [`Index::apply`], with what was rebuilt.
    pub fn apply_counted(
        &mut self,
        objects: &Objects,
        changed: Option<&[ObjectRef]>,
        settings: &Settings,
    ) -> (Vec<Change>, Rebuilt) {
        let full = self.settings.as_ref() != Some(settings) || changed.is_none();
        self.settings = Some(settings.clone());
        let mut dirty = Dirty::default();
        if full {
            self.read_all(objects, settings);
            dirty.mark_all(self);
        } else {
            for r in changed.unwrap_or_default() {
                self.read_one(objects, r, settings, &mut dirty);
            }
        }
        // Waypoints before everything that may use them.
        if full || dirty.waypoints {
            let network = network(&self.inputs, settings);
            let classes = &self.inputs.gateway_classes;
            let next: waypoint::Waypoints = self
                .inputs
                .gateways
                .iter()
                .filter_map(|(k, o)| {
                    Some((k.clone(), waypoint::from_gateway(o, |c| classes.get(c).map(|c| &**c), &network)?))
                })
                .collect();
            if next != self.inputs.waypoints {
                self.inputs.waypoints = next;
                let policies = dirty.policies;
                dirty.mark_all(self);
                dirty.policies = policies;
            }
        }
        let mut changes = Vec::new();
        // Policies first: workloads list the ones that select them.
        if dirty.policies {
            self.rebuild_policies(settings, &mut changes);
        }
        let hosts = dirty.hosts.len();
        // Services next: workloads list the ones that select them, and a
        // service that changed marks the workloads it selected and selects.
        for host in std::mem::take(&mut dirty.hosts) {
            self.rebuild_host(&host, settings, &mut dirty, &mut changes);
        }
        let rebuilt = Rebuilt {
            workloads: dirty.workloads.len() + dirty.entries.len() + dirty.service_entries.len() + dirty.slices.len(),
            services: hosts,
            policies: dirty.policies,
        };
        let name = |a: &Address| match &a.r#type {
            Some(address::Type::Workload(w)) => Arc::from(w.uid.as_str()),
            _ => Arc::from(""),
        };
        let as_address = |w: Workload| Address { r#type: Some(address::Type::Workload(w)) };
        let dirty_statuses = std::mem::take(&mut dirty.statuses);
        for k in dirty.workloads {
            let built = self
                .inputs
                .pods
                .get(&k)
                .and_then(|p| workload::from_pod(p, &self.inputs, &self.services, settings))
                .map(as_address);
            replace(&mut self.workloads, k, built, name, Kind::Address, &mut changes);
        }
        let mut entry_statuses_changed = false;
        for k in dirty.entries {
            let built = self.inputs.entries.get(&k).and_then(|o| match &o.spec {
                IstioSpec::WorkloadEntry(we) => {
                    Some((workload::entry_workload(o, we, &self.inputs, &self.services, settings), o.meta.generation))
                }
                _ => None,
            });
            // Its istio.io/WaypointBound condition.
            let status = built.as_ref().map(|((_, binding), generation)| ObjectStatus {
                path: format!("/apis/networking.istio.io/v1/namespaces/{}/workloadentries/{}", k.0, k.1),
                status: serde_json::json!({"conditions": [binding.condition_or_removal()]}),
                generation: *generation,
            });
            entry_statuses_changed |= set_status(&mut self.entry_statuses, k.clone(), status);
            let built = built.map(|((w, _), _)| as_address(w));
            replace(&mut self.entry_workloads, k, built, name, Kind::Address, &mut changes);
        }
        for k in dirty.service_entries {
            let built = match self.inputs.service_entries.get(&k).map(|o| (o, &o.spec)) {
                Some((o, IstioSpec::ServiceEntry(se))) => {
                    let won: Vec<&Info> = self
                        .services
                        .in_ns(&k.0)
                        .filter(|i| i.source == Source::ServiceEntry && i.object == k.1)
                        .collect();
                    service_entry::workloads(o, se, &won, &self.inputs, settings)
                }
                _ => Vec::new(),
            };
            let built: Vec<Address> = built.into_iter().map(as_address).collect();
            replace_many(&mut self.se_workloads, k, built, name, &mut changes);
        }
        for k in dirty.slices {
            let built = match self.inputs.slices.get(&k) {
                Some(es) => endpoint_slice::workloads(es, &self.services, &self.inputs, settings),
                None => Vec::new(),
            };
            let built: Vec<Address> = built.into_iter().map(as_address).collect();
            replace_many(&mut self.slice_workloads, k, built, name, &mut changes);
        }
        let statuses_changed = self.rebuild_service_statuses(dirty_statuses);
        // Policies bound to waypoints read the services, ServiceEntries,
        // waypoints and classes they name: recomputed on each apply (they
        // are few; a policy without targets has none).
        let waypoint_policies = self.waypoint_policy_statuses(settings);
        let waypoint_changed = waypoint_policies != self.waypoint_policy_statuses;
        self.waypoint_policy_statuses = waypoint_policies;
        if statuses_changed || entry_statuses_changed || rebuilt.policies || waypoint_changed {
            let all: Vec<ObjectStatus> = self
                .policy_statuses
                .iter()
                .chain(&self.waypoint_policy_statuses)
                .chain(self.service_statuses.values())
                .chain(self.entry_statuses.values())
                .cloned()
                .collect();
            if *self.statuses != all {
                self.statuses = Arc::new(all);
            }
        }
        // A name that went and came back in one apply (a Service's hostname
        // can move from one object to another) keeps its last word.
        dedup_changes(&mut changes);
        (changes, rebuilt)
    }

    /// Every resource the index has, as changes (a first publish).
    pub fn all(&self) -> Vec<Change> {
        let mut out: Vec<Change> = Vec::new();
        for o in self.workload_outputs() {
            out.push((Kind::Address, o.name.clone(), Some(o.bytes.clone())));
        }
        for o in self.services.map.values() {
            out.push((Kind::Address, o.name.clone(), Some(o.bytes.clone())));
        }
        for o in self.policies.values() {
            out.push((Kind::Authorization, o.name.clone(), Some(o.bytes.clone())));
        }
        out
    }

    fn workload_outputs(&self) -> impl Iterator<Item = &Output<Address>> {
        self.workloads
            .values()
            .chain(self.entry_workloads.values())
            .chain(self.se_workloads.values().flatten())
            .chain(self.slice_workloads.values().flatten())
    }

    /// The workloads, by resource name.
    pub fn workloads(&self) -> impl Iterator<Item = (&Arc<str>, &Address)> {
        self.workload_outputs().map(|o| (&o.name, &o.message))
    }

    /// The addresses of the workloads bound to each waypoint (`<ns>/<name>`,
    /// a waypoint for workloads), sorted: a workload's waypoint address
    /// matched to the waypoint that has it.
    pub fn waypoint_workloads(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (_, a) in self.workloads() {
            let Some(address::Type::Workload(w)) = &a.r#type else { continue };
            let Some(at) = &w.waypoint else { continue };
            let bound = self.inputs.waypoints.values().find(|wp| wp.address.as_ref() == Some(at));
            if let Some(wp) = bound {
                out.entry(wp.resource_name()).or_default().extend(w.addresses.iter().map(|ip| ip_text(ip)));
            }
        }
        for v in out.values_mut() {
            v.sort();
            v.dedup();
        }
        out
    }

    /// The services, by resource name.
    pub fn services(&self) -> impl Iterator<Item = (&Arc<str>, &Info)> {
        self.services.map.values().map(|o| (&o.name, &o.info))
    }

    /// The policies, by resource name.
    pub fn policies(&self) -> impl Iterator<Item = (&Arc<str>, &Authorization)> {
        self.policies.values().map(|o| (&o.name, &o.message))
    }

    /// The inputs.
    pub fn inputs(&self) -> &Inputs {
        &self.inputs
    }

    /// Reads every input again from `objects`.
    fn read_all(&mut self, objects: &Objects, settings: &Settings) {
        let mut inputs = Inputs::default();
        for p in &objects.pods {
            inputs.set_pod(key(p.metadata.ns(), &p.metadata.name), Some(p.clone()));
        }
        for s in &objects.services {
            inputs.set_service(key(s.metadata.ns(), &s.metadata.name), Some(s.clone()), &settings.domain);
        }
        for n in &objects.namespaces {
            inputs.namespaces.insert(n.metadata.name.clone(), Arc::new(n.clone()));
        }
        for es in &objects.endpoint_slices {
            inputs.set_slice(key(es.metadata.ns(), &es.metadata.name), Some(es.clone()));
        }
        for o in &objects.gateway_api {
            match o.spec {
                GatewayApiSpec::Gateway(_) => {
                    inputs.gateways.insert(key(o.meta.ns(), &o.meta.name), Arc::new(o.clone()));
                }
                GatewayApiSpec::GatewayClass(_) => {
                    inputs.gateway_classes.insert(o.meta.name.clone(), Arc::new(o.clone()));
                }
                _ => {}
            }
        }
        for n in &objects.nodes {
            inputs.nodes.insert(n.metadata.name.clone(), Arc::new(n.clone()));
        }
        for o in &objects.istio {
            if let Some(kind) = policy_kind(o) {
                inputs.policies.insert((kind.into(), key(o.meta.ns(), &o.meta.name)), Arc::new(o.clone()));
            }
            match o.spec {
                IstioSpec::WorkloadEntry(_) => {
                    inputs.entries.insert(key(o.meta.ns(), &o.meta.name), Arc::new(o.clone()));
                }
                IstioSpec::ServiceEntry(_) => {
                    inputs.set_service_entry(key(o.meta.ns(), &o.meta.name), Some(o.clone()));
                }
                _ => {}
            }
        }
        self.inputs = inputs;
    }

    /// Reads one changed object and marks what depends on it. Of two
    /// objects with one name, the last is in force, as [`Index::read_all`]
    /// keeps it.
    fn read_one(&mut self, objects: &Objects, r: &ObjectRef, settings: &Settings, dirty: &mut Dirty) {
        let (ns, name) = (r.namespace.as_str(), r.name.as_str());
        let is = |m: &istiod_config::meta::Meta| m.name == name && m.ns() == ns;
        let istio = |pick: fn(&IstioSpec) -> bool| objects.istio.iter().rev().find(|o| pick(&o.spec) && is(&o.meta));
        match r.kind.as_str() {
            "Pod" => {
                let now = objects.pods.iter().rev().find(|p| is(&p.metadata)).cloned();
                self.inputs.set_pod(key(ns, name), now);
                dirty.workloads.insert(key(ns, name));
            }
            "Service" => {
                let now = objects.services.iter().rev().find(|s| is(&s.metadata)).cloned();
                dirty.hosts.extend(self.inputs.set_service(key(ns, name), now, &settings.domain));
            }
            "Gateway.gateway.networking.k8s.io" => {
                let now = objects
                    .gateway_api
                    .iter()
                    .rev()
                    .find(|o| matches!(o.spec, GatewayApiSpec::Gateway(_)) && is(&o.meta))
                    .cloned();
                match now {
                    Some(o) => self.inputs.gateways.insert(key(ns, name), Arc::new(o)),
                    None => self.inputs.gateways.remove(&key(ns, name)),
                };
                dirty.waypoints = true;
            }
            "GatewayClass.gateway.networking.k8s.io" => {
                let now = objects
                    .gateway_api
                    .iter()
                    .rev()
                    .find(|o| matches!(o.spec, GatewayApiSpec::GatewayClass(_)) && o.meta.name == name)
                    .cloned();
                match now {
                    Some(o) => self.inputs.gateway_classes.insert(name.to_owned(), Arc::new(o)),
                    None => self.inputs.gateway_classes.remove(name),
                };
                dirty.waypoints = true;
            }
            "EndpointSlice" => {
                let now = objects.endpoint_slices.iter().rev().find(|e| is(&e.metadata)).cloned();
                dirty.workloads.extend(self.inputs.set_slice(key(ns, name), now));
                dirty.slices.insert(key(ns, name));
            }
            "ServiceEntry" => {
                let now = istio(|s| matches!(s, IstioSpec::ServiceEntry(_))).cloned();
                dirty.hosts.extend(self.inputs.set_service_entry(key(ns, name), now));
                dirty.service_entries.insert(key(ns, name));
            }
            "Namespace" => {
                let now = objects.namespaces.iter().rev().find(|n| n.metadata.name == name).cloned();
                match now {
                    Some(n) => self.inputs.namespaces.insert(name.to_owned(), Arc::new(n)),
                    None => self.inputs.namespaces.remove(name),
                };
                // With `discoverySelectors` a namespace's objects come and
                // go with it (their own changes are not named): read them
                // again.
                self.resync_namespace(objects, name, settings, dirty);
                if name == settings.system_namespace {
                    // Its network label is every workload's and service's
                    // (and a waypoint's IP address's).
                    let policies = dirty.policies;
                    dirty.mark_all(self);
                    dirty.policies = policies;
                    dirty.waypoints = true;
                }
            }
            "Node" => {
                let now = objects.nodes.iter().rev().find(|n| n.metadata.name == name).cloned();
                match now {
                    Some(n) => self.inputs.nodes.insert(name.to_owned(), Arc::new(n)),
                    None => self.inputs.nodes.remove(name),
                };
                let on_node = self.inputs.pods.iter().filter(|(_, p)| p.spec.node_name.as_deref() == Some(name));
                dirty.workloads.extend(on_node.map(|(k, _)| k.clone()));
            }
            "WorkloadEntry" => {
                match istio(|s| matches!(s, IstioSpec::WorkloadEntry(_))).cloned() {
                    Some(o) => self.inputs.entries.insert(key(ns, name), Arc::new(o)),
                    None => self.inputs.entries.remove(&key(ns, name)),
                };
                dirty.entries.insert(key(ns, name));
            }
            kind @ ("AuthorizationPolicy" | "PeerAuthentication") => {
                let now = objects.istio.iter().rev().find(|o| policy_kind(o) == Some(kind) && is(&o.meta)).cloned();
                let k = (kind.to_owned(), key(ns, name));
                match now {
                    Some(o) => self.inputs.policies.insert(k, Arc::new(o)),
                    None => self.inputs.policies.remove(&k),
                };
                dirty.policies = true;
                // Workloads list the selector policies of their namespace
                // and the root's, and the PeerAuthentications in force.
                dirty.mark_namespace_workloads(&self.inputs, (ns != settings.root_namespace).then_some(ns));
            }
            _ => {}
        }
    }

    /// Reads the Pods, Services, ServiceEntries, WorkloadEntries and
    /// policies of namespace `ns` again, and marks what they were and are.
    fn resync_namespace(&mut self, objects: &Objects, ns: &str, settings: &Settings, dirty: &mut Dirty) {
        let old_pods: Vec<String> = self.inputs.pods_by_ns.get(ns).into_iter().flatten().cloned().collect();
        for p in &old_pods {
            self.inputs.set_pod(key(ns, p), None);
        }
        for p in objects.pods.iter().filter(|p| p.metadata.ns() == ns) {
            self.inputs.set_pod(key(ns, &p.metadata.name), Some(p.clone()));
        }
        let old_services: Vec<String> = self.inputs.services_by_ns.get(ns).into_iter().flatten().cloned().collect();
        for s in &old_services {
            dirty.hosts.extend(self.inputs.set_service(key(ns, s), None, &settings.domain));
        }
        for s in objects.services.iter().filter(|s| s.metadata.ns() == ns) {
            dirty.hosts.extend(self.inputs.set_service(key(ns, &s.metadata.name), Some(s.clone()), &settings.domain));
        }
        let old_ses: Vec<Key> = self.inputs.service_entries.keys().filter(|(n, _)| n == ns).cloned().collect();
        for k in old_ses {
            dirty.hosts.extend(self.inputs.set_service_entry(k, None));
        }
        for o in objects.istio.iter().filter(|o| o.meta.ns() == ns && matches!(o.spec, IstioSpec::ServiceEntry(_))) {
            dirty.hosts.extend(self.inputs.set_service_entry(key(ns, &o.meta.name), Some(o.clone())));
        }
        let before = self.inputs.gateways.len();
        self.inputs.gateways.retain(|(n, _), _| n != ns);
        dirty.waypoints |= before != self.inputs.gateways.len();
        for o in
            objects.gateway_api.iter().filter(|o| o.meta.ns() == ns && matches!(o.spec, GatewayApiSpec::Gateway(_)))
        {
            self.inputs.gateways.insert(key(ns, &o.meta.name), Arc::new(o.clone()));
            dirty.waypoints = true;
        }
        let old_slices: Vec<Key> = self.inputs.slices.keys().filter(|(n, _)| n == ns).cloned().collect();
        for k in old_slices {
            dirty.workloads.extend(self.inputs.set_slice(k, None));
        }
        for es in objects.endpoint_slices.iter().filter(|e| e.metadata.ns() == ns) {
            dirty.workloads.extend(self.inputs.set_slice(key(ns, &es.metadata.name), Some(es.clone())));
        }
        dirty.slices.extend(self.slice_workloads.keys().filter(|(n, _)| n == ns).cloned());
        dirty.slices.extend(self.inputs.slices.keys().filter(|(n, _)| n == ns).cloned());
        self.inputs.entries.retain(|(n, _), _| n != ns);
        for o in objects.istio.iter().filter(|o| o.meta.ns() == ns && matches!(o.spec, IstioSpec::WorkloadEntry(_))) {
            self.inputs.entries.insert(key(ns, &o.meta.name), Arc::new(o.clone()));
        }
        let before = self.inputs.policies.len();
        self.inputs.policies.retain(|(_, (n, _)), _| n != ns);
        let mut any = before != self.inputs.policies.len();
        for o in objects.istio.iter().filter(|o| o.meta.ns() == ns) {
            if let Some(kind) = policy_kind(o) {
                self.inputs.policies.insert((kind.into(), key(ns, &o.meta.name)), Arc::new(o.clone()));
                any = true;
            }
        }
        // Every workload of the namespace, as it was and is.
        dirty.workloads.extend(old_pods.iter().map(|p| key(ns, p)));
        dirty.entries.extend(self.entry_workloads.keys().filter(|(n, _)| n == ns).cloned());
        dirty.service_entries.extend(self.se_workloads.keys().filter(|(n, _)| n == ns).cloned());
        dirty.mark_namespace_workloads(&self.inputs, Some(ns));
        if any {
            dirty.policies = true;
            if ns == settings.root_namespace {
                dirty.mark_namespace_workloads(&self.inputs, None);
            }
        }
    }

    /// Rebuilds the services of hostname `host`: one per namespace, of the
    /// Services and ServiceEntries that name it. A service that changed
    /// marks the workloads its old and new selectors select, and its
    /// ServiceEntry's endpoints.
    fn rebuild_host(&mut self, host: &str, settings: &Settings, dirty: &mut Dirty, changes: &mut Vec<Change>) {
        let mut candidates = Vec::new();
        for (src, k) in self.inputs.hosts.get(host).into_iter().flatten() {
            match src {
                Source::Service => {
                    if let Some(s) = self.inputs.services.get(k) {
                        candidates
                            .extend(service::info(s, &self.inputs, settings).filter(|i| i.service.hostname == host));
                    }
                }
                Source::ServiceEntry => {
                    if let Some(o) = self.inputs.service_entries.get(k)
                        && let IstioSpec::ServiceEntry(se) = &o.spec
                    {
                        let all = service_entry::infos(o, se, &self.inputs, settings);
                        candidates.extend(all.into_iter().find(|i| i.service.hostname == host));
                    }
                }
            }
        }
        let mut next = service::select(candidates);
        let before = self.services.host_namespaces.remove(host).unwrap_or_default();
        let namespaces: BTreeSet<String> = before.into_iter().chain(next.keys().cloned()).collect();
        for ns in namespaces {
            let k = (ns.clone(), host.to_owned());
            let old = self.services.map.remove(&k);
            let new = next.remove(&ns).map(|info| {
                let bytes =
                    Bytes::from(Address { r#type: Some(address::Type::Service(info.service.clone())) }.encode_to_vec());
                ServiceOut { name: service::resource_name(&info.service), bytes, info }
            });
            if old.as_ref().map(|o| (&o.bytes, &o.info)) == new.as_ref().map(|o| (&o.bytes, &o.info)) {
                if let Some(o) = old {
                    self.services.map.insert(k, o);
                    self.services.host_namespaces.entry(host.to_owned()).or_default().insert(ns);
                }
                continue;
            }
            for o in old.iter().chain(new.iter()) {
                dirty.statuses.insert((o.info.source, key(&ns, &o.info.object)));
                dirty.mark_selected(&self.inputs, &ns, &o.info.selector);
                match o.info.source {
                    Source::ServiceEntry => {
                        dirty.service_entries.insert(key(&ns, &o.info.object));
                    }
                    Source::Service => dirty.mark_slices_of(&self.inputs, &ns, &o.info.object),
                }
            }
            match new {
                Some(o) => {
                    if old.as_ref().is_none_or(|old| old.bytes != o.bytes) {
                        changes.push((Kind::Address, o.name.clone(), Some(o.bytes.clone())));
                    }
                    self.services.map.insert(k, o);
                    self.services.host_namespaces.entry(host.to_owned()).or_default().insert(ns);
                }
                None => {
                    if let Some(o) = old {
                        changes.push((Kind::Address, o.name, None));
                    }
                }
            }
        }
    }

    /// The statuses istiod writes (with `AMBIENT_ENABLE_STATUS`, its
    /// default): `ZtunnelAccepted` on the AuthorizationPolicies ztunnel
    /// reads ([`authz::ztunnel_condition`]), `istio.io/WaypointBound` (and a
    /// ServiceEntry's `istio.io/WaypointMissing`) on the Services,
    /// ServiceEntries and WorkloadEntries that hold a service or workload.
    pub fn statuses(&self) -> Arc<Vec<ObjectStatus>> {
        self.statuses.clone()
    }

    /// The `istio.io/WaypointBound` status of each of `objects` that holds
    /// a service now (istiod writes it on the ServiceInfos it serves);
    /// whether any changed.
    fn rebuild_service_statuses(&mut self, objects: BTreeSet<(Source, Key)>) -> bool {
        let mut changed = false;
        for (src, k) in objects {
            let mine: Vec<&Info> = self.services.in_ns(&k.0).filter(|i| i.source == src && i.object == k.1).collect();
            let status = mine.first().map(|i| {
                let mut conditions = vec![i.binding.condition_or_removal()];
                if src == Source::ServiceEntry {
                    // `istio.io/WaypointMissing`: a ServiceEntry that needs
                    // a waypoint (a wildcard host, a racing connect
                    // strategy) and has none.
                    let wildcard = mine.iter().any(|i| i.service.hostname.starts_with('*'));
                    let missing = match (&i.binding.waypoint, i.racing_connect, wildcard) {
                        (Some(_), _, _) | (None, false, false) => waypoint::removal(waypoint::WAYPOINT_MISSING),
                        (None, true, _) => serde_json::json!({"type": waypoint::WAYPOINT_MISSING, "status": "True",
                            "reason": "NoWaypointForRacingConnectStrategy",
                            "message": "ServiceEntry has a non-default connect strategy but no waypoint bound. A waypoint is required for connect strategies to take effect for ambient clients."}),
                        (None, false, true) => serde_json::json!({"type": waypoint::WAYPOINT_MISSING, "status": "True",
                            "reason": "NoWaypointForWildcardService",
                            "message": "ServiceEntry will not apply until it is bound to a valid waypoint."}),
                    };
                    conditions.push(missing);
                }
                let path = match src {
                    Source::Service => format!("/api/v1/namespaces/{}/services/{}", k.0, k.1),
                    Source::ServiceEntry => {
                        format!("/apis/networking.istio.io/v1/namespaces/{}/serviceentries/{}", k.0, k.1)
                    }
                };
                ObjectStatus { path, status: serde_json::json!({"conditions": conditions}), generation: i.generation }
            });
            changed |= set_status(&mut self.service_statuses, (src, k), status);
        }
        changed
    }

    fn waypoint_policy_statuses(&self, settings: &Settings) -> Vec<ObjectStatus> {
        let mut out = self
            .inputs
            .policies_of("AuthorizationPolicy")
            .filter_map(|o| {
                let condition = waypoint::policy_condition(&self.inputs, &settings.root_namespace, o)?;
                Some(ObjectStatus {
                    path: format!(
                        "/apis/security.istio.io/v1/namespaces/{}/authorizationpolicies/{}",
                        o.meta.ns(),
                        o.meta.name
                    ),
                    status: serde_json::json!({ "conditions": [condition] }),
                    generation: o.meta.generation,
                })
            })
            .collect::<Vec<_>>();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }

    fn rebuild_policy_statuses(&mut self, settings: &Settings) {
        let mut out: Vec<ObjectStatus> = self
            .inputs
            .policies_of("AuthorizationPolicy")
            .filter_map(|o| {
                let (bound, reason, message) = authz::ztunnel_condition(&settings.root_namespace, o)?;
                Some(ObjectStatus {
                    path: format!(
                        "/apis/security.istio.io/v1/namespaces/{}/authorizationpolicies/{}",
                        o.meta.ns(),
                        o.meta.name
                    ),
                    status: serde_json::json!({"conditions": [{
                        "type": "ZtunnelAccepted",
                        "status": if bound { "True" } else { "False" },
                        "reason": reason,
                        "message": message,
                    }]}),
                    generation: o.meta.generation,
                })
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        self.policy_statuses = out;
    }

    fn rebuild_policies(&mut self, settings: &Settings, changes: &mut Vec<Change>) {
        self.rebuild_policy_statuses(settings);
        let mut next: BTreeMap<Arc<str>, Authorization> = BTreeMap::new();
        for a in authz::all(&self.inputs, settings) {
            next.insert(authz::resource_name(&a), a);
        }
        let gone: Vec<Arc<str>> = self.policies.keys().filter(|k| !next.contains_key(*k)).cloned().collect();
        for k in gone {
            self.policies.remove(&k);
            changes.push((Kind::Authorization, k, None));
        }
        for (name, message) in next {
            let bytes = Bytes::from(message.encode_to_vec());
            if self.policies.get(&name).is_some_and(|o| o.bytes == bytes) {
                continue;
            }
            changes.push((Kind::Authorization, name.clone(), Some(bytes.clone())));
            self.policies.insert(name.clone(), Output { name, message, bytes });
        }
    }
}

/// What an apply must rebuild.
#[derive(Default)]
struct Dirty {
    /// Pods' workloads.
    workloads: BTreeSet<Key>,
    /// WorkloadEntries' workloads.
    entries: BTreeSet<Key>,
    /// ServiceEntries' endpoint workloads.
    service_entries: BTreeSet<Key>,
    /// EndpointSlices' workloads.
    slices: BTreeSet<Key>,
    /// Hostnames whose services to rebuild.
    hosts: BTreeSet<String>,
    policies: bool,
    /// Whether the waypoints may have changed.
    waypoints: bool,
    /// Services and ServiceEntries whose binding status to compute again.
    statuses: BTreeSet<(Source, Key)>,
}

impl Dirty {
    /// Everything the index had and has.
    fn mark_all(&mut self, index: &Index) {
        let inputs = &index.inputs;
        self.workloads.extend(index.workloads.keys().chain(inputs.pods.keys()).cloned());
        self.entries.extend(index.entry_workloads.keys().chain(inputs.entries.keys()).cloned());
        self.service_entries.extend(index.se_workloads.keys().chain(inputs.service_entries.keys()).cloned());
        self.slices.extend(index.slice_workloads.keys().chain(inputs.slices.keys()).cloned());
        self.hosts.extend(index.services.host_namespaces.keys().chain(inputs.hosts.keys()).cloned());
        self.policies = true;
    }

    /// The workloads of namespace `ns` (`None`: of every namespace).
    fn mark_namespace_workloads(&mut self, inputs: &Inputs, ns: Option<&str>) {
        let of = |k: &&Key| ns.is_none_or(|ns| k.0 == ns);
        match ns {
            Some(ns) => {
                self.workloads.extend(inputs.pods_by_ns.get(ns).into_iter().flatten().map(|p| key(ns, p)));
            }
            None => self.workloads.extend(inputs.pods.keys().cloned()),
        }
        self.entries.extend(inputs.entries.keys().filter(of).cloned());
        self.service_entries.extend(inputs.service_entries.keys().filter(of).cloned());
    }

    /// The EndpointSlices of Service `ns/name`, and the Pods they name.
    fn mark_slices_of(&mut self, inputs: &Inputs, ns: &str, name: &str) {
        for slice in inputs.slices_by_service.get(&key(ns, name)).into_iter().flatten() {
            let k = key(ns, slice);
            if let Some(es) = inputs.slices.get(&k) {
                self.workloads.extend(endpoint_slice::pod_refs(es).into_iter().map(|(p, _)| p));
            }
            self.slices.insert(k);
        }
    }

    /// The Pods and WorkloadEntries of `ns` that `selector` selects.
    fn mark_selected(&mut self, inputs: &Inputs, ns: &str, selector: &BTreeMap<String, String>) {
        if selector.is_empty() {
            return; // selects nothing (endpoints come from EndpointSlices)
        }
        for name in inputs.pods_by_ns.get(ns).into_iter().flatten() {
            let k = key(ns, name);
            if inputs.pods.get(&k).is_some_and(|p| selects(selector, &p.metadata.labels)) {
                self.workloads.insert(k);
            }
        }
        for (k, o) in inputs.entries.iter().filter(|(k, _)| k.0 == ns) {
            if let IstioSpec::WorkloadEntry(we) = &o.spec
                && selects(selector, &workload::entry_labels(o, we))
            {
                self.entries.insert(k.clone());
            }
        }
    }
}

/// Sets (or, with `None`, forgets) the status kept at `k`; whether it
/// changed.
fn set_status<K: Ord>(statuses: &mut BTreeMap<K, ObjectStatus>, k: K, status: Option<ObjectStatus>) -> bool {
    match status {
        Some(st) if statuses.get(&k) != Some(&st) => {
            statuses.insert(k, st);
            true
        }
        Some(_) => false,
        None => statuses.remove(&k).is_some(),
    }
}

/// Replaces the outputs at `k` with `built`, recording the changes.
fn replace_many(
    outputs: &mut BTreeMap<Key, Vec<Output<Address>>>,
    k: Key,
    built: Vec<Address>,
    name: impl Fn(&Address) -> Arc<str>,
    changes: &mut Vec<Change>,
) {
    let old = outputs.remove(&k).unwrap_or_default();
    // Two endpoints with one address are one workload: the last.
    let mut new: Vec<Output<Address>> = Vec::with_capacity(built.len());
    for message in built {
        let bytes = Bytes::from(message.encode_to_vec());
        let name = name(&message);
        new.retain(|o| o.name != name);
        new.push(Output { name, message, bytes });
    }
    for n in &new {
        if !old.iter().any(|o| o.name == n.name && o.bytes == n.bytes) {
            changes.push((Kind::Address, n.name.clone(), Some(n.bytes.clone())));
        }
    }
    for o in old {
        if !new.iter().any(|n| n.name == o.name) {
            changes.push((Kind::Address, o.name, None));
        }
    }
    if !new.is_empty() {
        outputs.insert(k, new);
    }
}

/// Replaces the output at `k` with `built`, recording the change.
fn replace(
    outputs: &mut BTreeMap<Key, Output<Address>>,
    k: Key,
    built: Option<Address>,
    name: impl Fn(&Address) -> Arc<str>,
    kind: Kind,
    changes: &mut Vec<Change>,
) {
    match built {
        Some(message) => {
            let bytes = Bytes::from(message.encode_to_vec());
            let name = name(&message);
            if let Some(old) = outputs.get(&k) {
                if old.bytes == bytes && old.name == name {
                    return;
                }
                if old.name != name {
                    changes.push((kind, old.name.clone(), None));
                }
            }
            changes.push((kind, name.clone(), Some(bytes.clone())));
            outputs.insert(k, Output { name, message, bytes });
        }
        None => {
            if let Some(old) = outputs.remove(&k) {
                changes.push((kind, old.name, None));
            }
        }
    }
}

/// Keeps the last change of each (kind, name).
fn dedup_changes(changes: &mut Vec<Change>) {
    let mut seen = std::collections::HashSet::new();
    let mut out: Vec<Change> = Vec::with_capacity(changes.len());
    for c in changes.drain(..).rev() {
        if seen.insert((c.0, c.1.clone())) {
            out.push(c);
        }
    }
    out.reverse();
    *changes = out;
}

/// The trust domain a workload names: empty for the default one.
pub(crate) fn trust_domain(settings: &Settings) -> String {
    if settings.trust_domain == "cluster.local" { String::new() } else { settings.trust_domain.clone() }
}

/// The local network: the system namespace's `topology.istio.io/network`
/// label (istiod's `LocalSystemNamespaceNetwork`), else the setting.
pub(crate) fn network(inputs: &Inputs, settings: &Settings) -> String {
    inputs
        .namespace(&settings.system_namespace)
        .and_then(|n| n.metadata.labels.get("topology.istio.io/network"))
        .cloned()
        .unwrap_or_else(|| settings.network.clone())
}

/// An address as the workload API carries it: 4 or 16 bytes.
pub fn ip_bytes(ip: std::net::IpAddr) -> Vec<u8> {
    match ip {
        std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
        std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// An address for JSON: its text form.
pub fn ip_text(bytes: &[u8]) -> String {
    match bytes.len() {
        4 => std::net::Ipv4Addr::from(<[u8; 4]>::try_from(bytes).unwrap_or_default()).to_string(),
        16 => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes).unwrap_or_default()).to_string(),
        _ => format!("{bytes:?}"),
    }
}

/// Whether a non-empty `selector` selects `labels`.
pub fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// An enum field as protojson writes it: its name, nothing for 0.
pub(crate) fn enum_name(v: i32, name: impl Fn(i32) -> Option<&'static str>) -> serde_json::Value {
    match v {
        0 => serde_json::Value::Null,
        v => name(v).map_or(v.into(), Into::into),
    }
}

/// An address as istiod's `/debug/ambientz` writes it: the address's
/// text, base64-encoded (its debug handler puts the text in the bytes).
pub(crate) fn debug_ip(bytes: &[u8]) -> String {
    base64(ip_text(bytes).as_bytes())
}

/// Bytes as protojson writes them.
pub(crate) fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Drops what protojson leaves out: nulls, empty strings and lists, and
/// `false` (an empty object stays: it is a message that is set, such as
/// `presence: {}`).
fn prune(v: serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::Value;
    match v {
        Value::Null | Value::Bool(false) => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(a) => {
            let a: Vec<Value> =
                a.into_iter().map(|x| prune(x).unwrap_or_else(|| Value::Object(Default::default()))).collect();
            (!a.is_empty()).then_some(Value::Array(a))
        }
        Value::Object(o) => Some(Value::Object(o.into_iter().filter_map(|(k, x)| Some((k, prune(x)?))).collect())),
        other => Some(other),
    }
}

/// istiod's `/debug/ambientz`: the workloads, services and policies, each
/// as protojson writes it (camelCase names, enum names, defaults left out;
/// addresses as istiod's handler writes them, [`debug_ip`]).
pub fn describe(index: &Index) -> serde_json::Value {
    use serde_json::json;
    let workloads: Vec<_> = index
        .workloads()
        .filter_map(|(_, a)| match &a.r#type {
            Some(address::Type::Workload(w)) => prune(workload::describe(w)),
            _ => None,
        })
        .collect();
    let services: Vec<_> = index.services().filter_map(|(_, i)| prune(service::describe(&i.service))).collect();
    let policies: Vec<_> = index.policies().filter_map(|(_, p)| prune(authz::describe(p))).collect();
    // Each waypoint, its address (none until its Gateway has one) and the
    // services bound to it.
    let waypoints: Vec<_> = index
        .inputs()
        .waypoints
        .values()
        .map(|w| {
            let name = w.resource_name();
            let bound: Vec<String> = index
                .services()
                .filter(|(_, i)| i.binding.waypoint.as_deref() == Some(name.as_str()))
                .map(|(k, _)| k.to_string())
                .collect();
            json!({
                "name": name,
                "address": w.address.as_ref().map(waypoint::describe),
                "trafficType": w.traffic_type,
                "services": bound,
            })
        })
        .collect();
    json!({ "workloads": workloads, "services": services, "policies": policies, "waypoints": waypoints })
}

/// What the fuzz target runs (`fuzz/fuzz_targets/ambient_index.rs`): the
/// objects of `yaml` read into an index from nothing, and into one that
/// held the first half of them and is told of the rest one by one; both
/// must hold the same resources (an incremental apply is a full build),
/// and nothing panics.
pub fn fuzz_one(yaml: &str) {
    let mut all = Objects::default();
    for obj in istiod_config::manifest::parse_file_limited(yaml, 64).docs.into_iter().filter_map(Result::ok).flatten() {
        all.push(obj);
    }
    let settings = Settings::default();
    let mut full = Index::new();
    full.apply(&all, None, &settings);
    // The first half of each kind, then the rest named.
    let mut half = all.clone();
    half.pods.truncate(all.pods.len() / 2);
    half.services.truncate(all.services.len() / 2);
    half.istio.truncate(all.istio.len() / 2);
    half.endpoint_slices.truncate(all.endpoint_slices.len() / 2);
    half.gateway_api.truncate(all.gateway_api.len() / 2);
    let mut inc = Index::new();
    inc.apply(&half, None, &settings);
    let named: Vec<ObjectRef> = all.pods[half.pods.len()..]
        .iter()
        .map(|p| ("Pod", &p.metadata))
        .chain(all.services[half.services.len()..].iter().map(|s| ("Service", &s.metadata)))
        .chain(all.endpoint_slices[half.endpoint_slices.len()..].iter().map(|s| ("EndpointSlice", &s.metadata)))
        .chain(all.gateway_api[half.gateway_api.len()..].iter().filter_map(|o| match o.spec {
            GatewayApiSpec::Gateway(_) => Some(("Gateway.gateway.networking.k8s.io", &o.meta)),
            GatewayApiSpec::GatewayClass(_) => Some(("GatewayClass.gateway.networking.k8s.io", &o.meta)),
            _ => None,
        }))
        .chain(all.istio[half.istio.len()..].iter().filter_map(|o| {
            let kind = match o.spec {
                IstioSpec::WorkloadEntry(_) => "WorkloadEntry",
                IstioSpec::ServiceEntry(_) => "ServiceEntry",
                _ => policy_kind(o)?,
            };
            Some((kind, &o.meta))
        }))
        .map(|(kind, m)| ObjectRef { kind: kind.into(), namespace: m.ns().into(), name: m.name.clone(), service: None })
        .collect();
    // What a client holds: the first publish, then each apply's changes.
    let mut view: BTreeMap<(Kind, Arc<str>), Bytes> = BTreeMap::new();
    let take = |view: &mut BTreeMap<(Kind, Arc<str>), Bytes>, changes: Vec<Change>| {
        for (k, n, b) in changes {
            match b {
                Some(b) => view.insert((k, n), b),
                None => view.remove(&(k, n)),
            };
        }
    };
    take(&mut view, inc.all());
    let as_map = |c: Vec<Change>| -> BTreeMap<(Kind, Arc<str>), Bytes> {
        c.into_iter().filter_map(|(k, n, b)| Some(((k, n), b?))).collect()
    };
    take(&mut view, inc.apply(&all, Some(&named), &settings));
    assert!(as_map(inc.all()) == as_map(full.all()), "an incremental apply differs from a full build");
    assert!(view == as_map(full.all()), "what was pushed differs from a full build");
    let paths = |i: &Index| -> Vec<ObjectStatus> {
        let mut v = i.statuses().to_vec();
        v.sort_by(|a, b| a.path.cmp(&b.path));
        v
    };
    assert!(paths(&inc) == paths(&full), "incremental statuses differ from a full build's");
    // And back: the second half goes (or reverts), named again.
    let mut before = Index::new();
    before.apply(&half, None, &settings);
    take(&mut view, inc.apply(&half, Some(&named), &settings));
    assert!(as_map(inc.all()) == as_map(before.all()), "an incremental removal differs from a full build");
    assert!(view == as_map(before.all()), "what was pushed on removal differs from a full build");
    assert!(paths(&inc) == paths(&before), "statuses after a removal differ from a full build's");
}

#[cfg(test)]
mod scenario_tests;
#[cfg(test)]
mod tests;
