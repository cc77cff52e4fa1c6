//! A change of services only (Services, ServiceEntries, EndpointSlices,
//! Pods): the services they concern are rebuilt in the model from the
//! objects (by the rules a full build follows, so the result is the same),
//! re-translated, and the dependency keys they touch recorded; everything
//! else is shared with the previous mesh.

use std::sync::Arc;

use crate::generator::deps::Dep;
use crate::generator::{MeshInput, deps, inbound_part};
use crate::model::Model;

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
            let dns = |m: &Model| m.services.get(host).map(Arc::as_ref).map_or(0, crate::translate::dns::digest);
            next.dns_digest ^= dns(&self.model) ^ dns(&model);
            next.translation.update_service(&model, host);
            let (before, after) =
                (self.model.services.get(host).map(Arc::as_ref), model.services.get(host).map(Arc::as_ref));
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
        let dual = |m: &Model, h: &Arc<str>| m.services.get(h).is_some_and(|s| s.kubernetes && s.vips.len() > 1);
        if hosts.iter().any(|h| dual(&self.model, h) || dual(&model, h)) {
            next.dual_vips = Arc::new(crate::translate::family::dual_vips(&model));
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
