//! A change of VirtualServices and DestinationRules only: the routing list
//! is edited in place (or merged anew for a bulk change), the virtual hosts
//! of the hosts they name and the clusters of the services they shape are
//! re-translated, and the dependency keys they touch recorded; listeners,
//! the other services and the scope are shared with the previous mesh.

use std::collections::BTreeMap;
use std::sync::Arc;

use istiod_config::istio::{IstioObject, IstioSpec};
use istiod_config::objects::Objects;

use crate::generator::deps::{self, Dep};
use crate::generator::{MeshInput, route_flags, selecting};
use crate::model::{LazyIndex, Model, routing_export_default};

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
pub(crate) const IN_PLACE_EDITS: usize = 64;

/// `old` (ordered by namespace and name) with the objects `changed` names
/// as they are now in `current` (absent: removed), in one ordered merge:
/// a changed object keeps its place in its (namespace, name) run, a new
/// one follows the run in the order given, as the edits one by one place
/// them.
fn merged_routing(
    old: &imbl::Vector<IstioObject>,
    changed: &[(String, String, String)],
    current: &std::collections::HashMap<(&str, &str, &str), &IstioObject>,
    mesh: &crate::meshconfig::MeshSettings,
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
