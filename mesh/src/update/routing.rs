//! A change of VirtualServices and DestinationRules only: the routing list
//! is edited in place (or merged anew for a bulk change), the virtual hosts
//! of the hosts they name and the clusters of the services they shape are
//! re-translated, and the dependency keys they touch recorded; listeners,
//! the other services and the scope are shared with the previous mesh.

use std::sync::Arc;

use istiod_config::istio::IstioSpec;

use crate::generator::deps::{self, Dep};
use crate::generator::{MeshInput, route_flags, selecting};
use crate::model::Model;

impl MeshInput {
    /// The mesh after the VirtualServices and DestinationRules `changed`
    /// (kind, namespace, name) were added, changed or removed in `objs`,
    /// and nothing else: the routing list is updated in place; the virtual
    /// hosts of every host those VirtualServices name, and the clusters of
    /// every service those DestinationRules name (before and after), are
    /// re-translated; listeners, the other services and the scope are
    /// shared with `self`.
    pub fn with_routing(
        &self,
        objs: &istiod_config::objects::Objects,
        changed: &[(String, String, String)],
    ) -> MeshInput {
        // (hosts whose virtual hosts change, services whose clusters change)
        let hosts_of = |model: &Model| {
            let (mut routes, mut clusters) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
            for o in model.routing_named(changed) {
                match &o.spec {
                    IstioSpec::VirtualService(vs) => {
                        routes.extend(vs.hosts.iter().map(|h| Arc::<str>::from(model.resolve_host(h, o.meta.ns()))));
                    }
                    IstioSpec::DestinationRule(dr) => match dr.host.strip_prefix('*') {
                        // A wildcard host shapes every service under it.
                        Some(suffix) => {
                            clusters.extend(model.services.keys().filter(|h| h.ends_with(suffix)).cloned());
                        }
                        None => {
                            clusters.insert(Arc::<str>::from(model.resolve_host(&dr.host, o.meta.ns())));
                        }
                    },
                    _ => {}
                }
            }
            (routes, clusters)
        };
        let (mut routes, mut clusters) = hosts_of(&self.model);
        let model = Arc::new(self.model.with_routing_of(objs, changed));
        let (r, c) = hosts_of(&model);
        routes.extend(r);
        clusters.extend(c);
        let mut next = MeshInput { model: model.clone(), changes: self.changes.next(), ..self.clone() };
        next.translation.update_routes(&model, &routes);
        for host in &clusters {
            next.translation.update_service(&model, host);
        }
        (next.source_matching, next.vs_export) = route_flags(&model);
        // Routers read VirtualServices bound to Gateways, before or after.
        let gateway_bound = |model: &Model| model.routing_named(changed).any(deps::is_gateway_bound);
        if gateway_bound(&self.model) || gateway_bound(&model) {
            next.changes.touch_everywhere(Dep::Gateway);
        }
        if changed.iter().any(|(k, _, _)| k == "DestinationRule") {
            // Locality load balancing and route hash policies read the
            // rules; so does the choice of rule by workload labels.
            next.changes.touch_everywhere(Dep::DestinationRule);
            next.selecting_sidecars = selecting(&model);
        }
        next
    }
}
