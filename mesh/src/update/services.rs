//! A change of services only (Services, ServiceEntries, EndpointSlices,
//! Pods): the services they concern are rebuilt in the model from the
//! objects (by the rules a full build follows, so the result is the same),
//! re-translated, and the dependency keys they touch recorded; everything
//! else is shared with the previous mesh.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use istiod_config::istio::IstioSpec;
use istiod_config::manifest::ObjectRef;
use istiod_config::objects::{EndpointSlice, Objects};

use crate::generator::deps::Dep;
use crate::generator::{MeshInput, deps, inbound_part};
use crate::model::network::place;
use crate::model::{
    Model, Service, Workloads, export_default, remote_service, select_workload_entries, service, service_entry,
};

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
        for host in &hosts {
            match self.service_for_host(objs, host) {
                Some(s) => model.services.insert(host.clone(), s),
                None => model.services.remove(host),
            };
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
                    let selecting = |s: &&Service| s.namespace == ns && (!s.selector.is_empty() || !s.kubernetes);
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
                let mut s = service(svc, &self.domain, &slices, &Workloads::of_slices(objs, &slices));
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

impl MeshInput {
    /// The mesh after Services, ServiceEntries, EndpointSlices or Pods
    /// (`changed`) changed in `objs`, and nothing else: the services they
    /// concern are rebuilt in the model and their clusters and load
    /// assignments re-translated; where a service's outbound shape
    /// (addresses, ports, resolution, exportTo) changed, or it came or
    /// went, its listeners and virtual hosts too, and the scoping. Where
    /// what inbound reads of a service changed, its namespace's workloads
    /// are recorded. Everything else is shared with `self`: an endpoint
    /// change costs O(changed services), not O(mesh).
    pub fn with_services(
        &self,
        objs: &istiod_config::objects::Objects,
        changed: &[istiod_config::manifest::ObjectRef],
    ) -> MeshInput {
        let (model, hosts) = self.model.with_services_of(objs, changed);
        let model = Arc::new(model);
        let mut next = MeshInput { model: model.clone(), changes: self.changes.next(), ..self.clone() };
        let mut reshaped = Vec::new();
        for host in &hosts {
            let dns = |m: &Model| m.services.get(host).map_or(0, crate::translate::dns::digest);
            next.dns_digest ^= dns(&self.model) ^ dns(&model);
            next.translation.update_service(&model, host);
            let (before, after) = (self.model.services.get(host), model.services.get(host));
            if before.map(deps::shape) != after.map(deps::shape) {
                reshaped.push(host.clone());
            }
            let old = match after {
                Some(svc) => next.inbound_parts.insert(host.clone(), inbound_part(svc)),
                None => next.inbound_parts.remove(host),
            };
            if old != next.inbound_parts.get(host).copied() {
                let ns = after.or(before).map(|s| &*s.namespace);
                next.changes.touch(Dep::Workloads, ns.unwrap_or_default(), "");
            }
        }
        // A service without a selector claims its endpoints' addresses as
        // its workloads' (a ServiceEntry's WorkloadEntries, a VM's).
        let claims = |m: &Model, h: &Arc<str>| m.services.get(h).is_some_and(|s| s.selector.is_empty());
        if hosts.iter().any(|h| claims(&self.model, h) || claims(&model, h)) {
            let claimed = crate::translate::inbound::claimed_ips(&model);
            if claimed != *self.claimed_ips {
                next.claimed_ips = Arc::new(claimed);
            }
        }
        if !reshaped.is_empty() {
            let auto = crate::translate::listener::auto_listeners(&model);
            if auto != *self.auto_listeners {
                next.auto_listeners = Arc::new(auto);
            }
            next.legacy_allocation = crate::generator::legacy_allocation_of(&model);
            next.translation.update_hosts(&self.model, &model, &reshaped);
            next.changes.touch_everywhere(Dep::Services);
            next.scoping = Arc::new(crate::translate::scope::Scoping::new(&model));
        }
        next
    }
}
