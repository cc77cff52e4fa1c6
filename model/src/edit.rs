//! In-place edits of the model: a change of one group of kinds reads
//! that group again from the objects and shares the rest with the model
//! before (the mesh crate's `update` re-translates what they touch and
//! records the dependency keys).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use istiod_config::istio::{IstioObject, IstioSpec};
use istiod_config::manifest::ObjectRef;
use istiod_config::objects::{EndpointSlice, Objects};

use crate::network::place;
use crate::{
    LazyIndex, Model, Service, Workloads, export_default, is_security, remote_service, routing_export_default,
    secrets_of, select_workload_entries, service, service_entry, sorted,
};

impl Model {
    /// The model with its security policies (PeerAuthentication,
    /// AuthorizationPolicy, RequestAuthentication) read again from `objs`
    /// and nothing else: a pass over the Istio objects, no rebuild.
    pub fn with_security_of(&self, objs: &Objects) -> Model {
        Model { security: Arc::new(sorted(objs, is_security)), ..self.clone() }
    }
}
impl Model {
    /// The model with its Secrets read again from `objs` and nothing else.
    pub fn with_secrets_of(&self, objs: &Objects) -> Model {
        Model { secrets: Arc::new(secrets_of(objs)), ..self.clone() }
    }
}
impl Model {
    /// The model with its Sidecars read again from `objs` and nothing else.
    pub fn with_sidecars_of(&self, objs: &Objects) -> Model {
        Model { sidecars: Arc::new(sorted(objs, |s| matches!(s, IstioSpec::Sidecar(_)))), ..self.clone() }
    }
}

impl Model {
    /// The routing objects (VirtualServices, DestinationRules) named
    /// (kind, namespace, name) in `keys`: a binary search each, so a
    /// change of n objects costs O(n log total).
    pub fn routing_named<'a>(
        &'a self,
        keys: &'a [(String, String, String)],
    ) -> impl Iterator<Item = &'a IstioObject> + 'a {
        keys.iter().filter_map(move |(kind, ns, name)| {
            let key = (ns.as_str(), name.as_str());
            let start = self
                .routing
                .binary_search_by(|o| (o.meta.ns(), o.meta.name.as_str()).cmp(&key).then(std::cmp::Ordering::Greater));
            let start = start.unwrap_or_else(|i| i);
            (start..self.routing.len())
                .map(|j| &self.routing[j])
                .take_while(|o| (o.meta.ns(), o.meta.name.as_str()) == key)
                .find(|o| o.kind().name() == kind)
        })
    }

    /// The model after the VirtualServices and DestinationRules `changed`
    /// (kind, namespace, name) were added, changed or removed in `objs`, nothing
    /// else having changed: the routing list is updated in place (it stays
    /// ordered by namespace and name) and re-indexed; services and the
    /// other configuration are shared with `self`.
    pub fn with_routing_of(&self, objs: &Objects, changed: &[(String, String, String)]) -> Model {
        let mut model = self.clone();
        // The changed objects as they are now, found in one pass (a search
        // per changed name made a bulk change quadratic).
        let wanted: std::collections::HashSet<(&str, &str, &str)> =
            changed.iter().map(|(k, ns, name)| (k.as_str(), ns.as_str(), name.as_str())).collect();
        let current: std::collections::HashMap<(&str, &str, &str), &IstioObject> = objs
            .istio
            .iter()
            .map(|o| ((o.kind().name(), o.meta.ns(), o.meta.name.as_str()), o))
            .filter(|(k, _)| wanted.contains(k))
            .collect();
        if changed.len() > IN_PLACE_EDITS {
            model.routing = merged_routing(&self.routing, changed, &current, &model.mesh);
            model.routing_index = LazyIndex::default();
            return model;
        }
        for (kind, ns, name) in changed {
            let is = |o: &IstioObject| o.kind().name() == kind && o.meta.ns() == ns && o.meta.name == *name;
            let now = current.get(&(kind.as_str(), ns.as_str(), name.as_str())).copied();
            // A VirtualService and a DestinationRule may share a name: find
            // the run of (namespace, name), then the kind within it.
            let key = (ns.as_str(), name.as_str());
            let at = model.routing.binary_search_by(|o| (o.meta.ns(), o.meta.name.as_str()).cmp(&key));
            let (start, end) = match at {
                Ok(i) => {
                    let same =
                        |j: usize| model.routing.get(j).is_some_and(|o| (o.meta.ns(), o.meta.name.as_str()) == key);
                    let mut start = i;
                    while start > 0 && same(start - 1) {
                        start -= 1;
                    }
                    let mut end = i;
                    while same(end) {
                        end += 1;
                    }
                    (start, end)
                }
                Err(i) => (i, i),
            };
            match ((start..end).find(|j| is(&model.routing[*j])), now) {
                (Some(j), Some(o)) => {
                    let mut o = o.clone();
                    routing_export_default(&mut o, &model.mesh);
                    model.routing.set(j, o);
                }
                (Some(j), None) => {
                    model.routing.remove(j);
                }
                (None, Some(o)) => {
                    let mut o = o.clone();
                    routing_export_default(&mut o, &model.mesh);
                    model.routing.insert(end, o)
                }
                (None, None) => {}
            }
        }
        model.routing_index = LazyIndex::default();
        model
    }
}

/// Changed routing objects applied one by one (an edit of the persistent
/// vector each); past this many, the list is merged anew in one pass:
/// thousands of edits in the middle of an RRB vector cost seconds in
/// rebalancing (25k VirtualServices added to 25k: 28 s).
pub const IN_PLACE_EDITS: usize = 64;

/// `old` (ordered by namespace and name) with the objects `changed` names
/// as they are now in `current` (absent: removed), in one ordered merge:
/// a changed object keeps its place in its (namespace, name) run, a new
/// one follows the run in the order given, as the edits one by one place
/// them.
fn merged_routing(
    old: &imbl::Vector<IstioObject>,
    changed: &[(String, String, String)],
    current: &std::collections::HashMap<(&str, &str, &str), &IstioObject>,
    mesh: &istiod_config::meshconfig::MeshSettings,
) -> imbl::Vector<IstioObject> {
    let mut runs: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for (kind, ns, name) in changed {
        let kinds = runs.entry((ns.as_str(), name.as_str())).or_default();
        if !kinds.contains(&kind.as_str()) {
            kinds.push(kind.as_str());
        }
    }
    let now = |kind: &str, (ns, name): (&str, &str)| {
        current.get(&(kind, ns, name)).map(|o| {
            let mut o = (*o).clone();
            routing_export_default(&mut o, mesh);
            o
        })
    };
    let mut out = imbl::Vector::new();
    let mut old = old.iter().peekable();
    for (run, kinds) in runs {
        // The objects before this run, as they were.
        while let Some(o) = old.next_if(|o| (o.meta.ns(), o.meta.name.as_str()) < run) {
            out.push_back(o.clone());
        }
        // The run's own: changed ones replaced in place or gone, then the
        // new ones.
        let mut seen = Vec::new();
        while let Some(o) = old.next_if(|o| (o.meta.ns(), o.meta.name.as_str()) == run) {
            let kind = o.kind().name();
            if kinds.contains(&kind) {
                seen.push(kind);
                out.extend(now(kind, run));
            } else {
                out.push_back(o.clone());
            }
        }
        for kind in kinds.iter().filter(|k| !seen.contains(k)) {
            out.extend(now(kind, run));
        }
    }
    out.extend(old.cloned());
    out
}

impl Model {
    /// The kinds [`Model::with_services_of`] takes.
    pub const SERVICE_KINDS: [&'static str; 5] = ["Service", "ServiceEntry", "EndpointSlice", "Pod", "WorkloadEntry"];

    /// The model after the objects `changed` (of [`Model::SERVICE_KINDS`])
    /// changed in `objs`, nothing else having changed: every service they
    /// concern, before or after, is rebuilt from `objs`, every other part
    /// is shared with `self`. Returns the hostnames concerned. Costs
    /// O(changed services) lookups plus one pass over the EndpointSlices
    /// when Pods changed.
    pub fn with_services_of(&self, objs: &Objects, changed: &[ObjectRef]) -> (Model, Vec<Arc<str>>) {
        let hosts = self.hosts_of(objs, changed);
        let mut model = self.clone();
        // Whether a service came, went or moved to another namespace (a
        // ServiceEntry's host): the namespaces' index starts again.
        let mut moved = false;
        for host in &hosts {
            let before = model.services.get(host).map(|s| s.namespace.clone());
            match self.service_for_host(objs, host) {
                Some(s) => {
                    moved |= before.as_ref() != Some(&s.namespace);
                    model.services.insert(host.clone(), Arc::new(s));
                }
                None => moved |= model.services.remove(host).is_some(),
            };
        }
        if moved {
            model.services_index = crate::ServicesIndex::default();
        }
        (model, hosts.into_iter().collect())
    }

    /// The hostnames `changed` concerns, in `self` or in `objs`.
    fn hosts_of(&self, objs: &Objects, changed: &[ObjectRef]) -> BTreeSet<Arc<str>> {
        let kube = |ns: &str, name: &str| Arc::<str>::from(format!("{name}.{ns}.svc.{}", self.domain));
        let mut hosts = BTreeSet::new();
        let mut pods: HashSet<(&str, &str)> = HashSet::new();
        for r in changed {
            let (ns, name) = (r.namespace.as_str(), r.name.as_str());
            match r.kind.as_str() {
                "Service" => {
                    hosts.insert(kube(ns, name));
                }
                // A slice without its service label serves nothing.
                "EndpointSlice" => hosts.extend(r.service.as_deref().map(|svc| kube(ns, svc))),
                "Pod" => {
                    pods.insert((ns, name));
                }
                // A WorkloadEntry: every service of its namespace that
                // selects workloads (its labels before the change are not
                // kept), as it was and as it is.
                "WorkloadEntry" => {
                    let selecting = |s: &&Arc<Service>| s.namespace == ns && (!s.selector.is_empty() || !s.kubernetes);
                    hosts.extend(self.services.values().filter(selecting).map(|s| s.hostname.clone()));
                    for svc in objs.services.iter().filter(|s| s.metadata.ns() == ns && !s.spec.selector.is_empty()) {
                        hosts.insert(kube(ns, &svc.metadata.name));
                    }
                    for o in objs.istio.iter().filter(|o| o.meta.ns() == ns) {
                        if let IstioSpec::ServiceEntry(se) = &o.spec
                            && se.workload_selector.is_some()
                        {
                            hosts.extend(se.hosts.iter().map(|h| Arc::from(h.as_str())));
                        }
                    }
                }
                _ => {
                    // A ServiceEntry: the hosts it made, and those it names now.
                    let made = self.services.values().filter(|s| !s.kubernetes && s.namespace == ns && s.name == name);
                    hosts.extend(made.map(|s| s.hostname.clone()));
                    for o in objs.istio.iter().filter(|o| o.meta.ns() == ns && o.meta.name == name) {
                        if let IstioSpec::ServiceEntry(se) = &o.spec {
                            hosts.extend(se.hosts.iter().map(|h| Arc::from(h.as_str())));
                        }
                    }
                }
            }
        }
        if !pods.is_empty() {
            hosts.extend(self.hosts_of_pods(objs, &pods).into_iter().map(|(ns, svc)| kube(ns, svc)));
            // A changed Pod may be a remote cluster's (refs name no cluster).
            for (_, remote) in &objs.remotes {
                hosts.extend(self.hosts_of_pods(remote, &pods).into_iter().map(|(ns, svc)| kube(ns, svc)));
            }
            // A ServiceEntry's workloadSelector selects Pods of its namespace.
            for o in objs.istio.iter().filter(|o| pods.iter().any(|(ns, _)| *ns == o.meta.ns())) {
                if let IstioSpec::ServiceEntry(se) = &o.spec
                    && se.workload_selector.is_some()
                {
                    hosts.extend(se.hosts.iter().map(|h| Arc::from(h.as_str())));
                }
            }
        }
        hosts
    }

    /// The (namespace, service) of every EndpointSlice that names one of
    /// `pods`, by reference or by the address the Pod has now or had (a
    /// deleted Pod is found by its old one).
    fn hosts_of_pods<'a>(&self, objs: &'a Objects, pods: &HashSet<(&str, &str)>) -> BTreeSet<(&'a str, &'a str)> {
        let mut ips: HashSet<&str> = objs
            .pods
            .iter()
            .filter(|p| pods.contains(&(p.metadata.ns(), p.metadata.name.as_str())))
            .filter_map(|p| p.status.pod_ip.as_deref())
            .collect();
        for s in self.services.values() {
            for e in &s.endpoints {
                if e.pod.as_deref().is_some_and(|p| pods.contains(&(s.namespace.as_str(), p))) {
                    ips.insert(&e.address);
                }
            }
        }
        let mut out = BTreeSet::new();
        for slice in &objs.endpoint_slices {
            let Some(svc) = slice.service_name() else { continue };
            let ns = slice.metadata.ns();
            let names_one = slice.endpoints.iter().any(|ep| {
                let by_ref = ep.target_ref.as_ref().is_some_and(|r| {
                    r.kind == "Pod" && pods.contains(&(r.namespace.as_deref().unwrap_or(ns), r.name.as_str()))
                });
                by_ref || ep.addresses.iter().any(|a| ips.contains(a.as_str()))
            });
            if names_one {
                out.insert((ns, svc));
            }
        }
        out
    }

    /// The service `objs` makes for `host`, as a full build decides it: a
    /// Kubernetes Service of that name wins (this cluster's, with the
    /// endpoints of the remote clusters' of the same name; else the first
    /// remote's), else the first ServiceEntry (in the objects' order) that
    /// names the host.
    fn service_for_host(&self, objs: &Objects, host: &str) -> Option<Service> {
        let suffix = format!(".svc.{}", self.domain);
        if let Some((name, ns)) = host.strip_suffix(&suffix).and_then(|r| r.split_once('.')) {
            fn slices_of<'a>(o: &'a Objects, ns: &str, name: &str) -> Vec<&'a EndpointSlice> {
                o.endpoint_slices.iter().filter(|s| s.metadata.ns() == ns && s.service_name() == Some(name)).collect()
            }
            fn find<'a>(o: &'a Objects, ns: &str, name: &str) -> Option<&'a istiod_config::objects::Service> {
                o.services.iter().find(|s| s.metadata.ns() == ns && s.metadata.name == name)
            }
            let mut out = find(objs, ns, name).map(|svc| {
                let slices = slices_of(objs, ns, name);
                let workloads = Workloads::of_slices(objs, &slices);
                let mut s = service(svc, &self.domain, &slices, &workloads, self.mesh.dual_stack);
                if self.mesh.k8s_select_workload_entries {
                    let entries: Vec<&istiod_config::istio::IstioObject> = objs
                        .istio
                        .iter()
                        .filter(|o| o.meta.ns() == ns && matches!(o.spec, IstioSpec::WorkloadEntry(_)))
                        .collect();
                    select_workload_entries(&mut s, svc, &entries);
                }
                place(export_default(s, &self.mesh), &self.mesh, &self.namespaces, &self.mesh.networks.cluster_id)
            });
            for (cluster, remote) in &objs.remotes {
                let Some(svc) = find(remote, ns, name) else { continue };
                let slices = slices_of(remote, ns, name);
                let workloads = Workloads::of_slices(remote, &slices);
                let s = remote_service(&self.mesh, &self.domain, (cluster, remote), svc, &slices, &workloads);
                match out.as_mut() {
                    Some(have) => have.endpoints.extend(s.endpoints),
                    None => out = Some(s),
                }
            }
            if out.is_some() {
                return out;
            }
        }
        objs.istio.iter().find_map(|o| match &o.spec {
            IstioSpec::ServiceEntry(se) if se.hosts.iter().any(|h| h == host) => {
                service_entry(&o.meta, se, objs, &self.mesh).into_iter().find(|s| &*s.hostname == host).map(|s| {
                    place(export_default(s, &self.mesh), &self.mesh, &self.namespaces, &self.mesh.networks.cluster_id)
                })
            }
            _ => None,
        })
    }
}
