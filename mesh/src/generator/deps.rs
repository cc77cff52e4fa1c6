//! What the per-class resources depend on, and when each dependency last
//! changed: istiod's `DependentConfigs` / `ConfigAffectsProxy`
//! (`pilot/pkg/xds/proxy_dependencies.go`) at the granularity of a config
//! kind and a namespace. A proxy's inbound listener reads the security
//! policies of its own namespace and the root namespace and the Services
//! that select it; its routes read the Sidecars of its namespace, the
//! mesh's services and the DestinationRules. A change is recorded against
//! exactly those keys, so the cores regenerate a class's resources only
//! when a config it depends on changed: a PeerAuthentication in one
//! namespace regenerates the inbound side of that namespace's proxies
//! only (one in the root namespace, every proxy's, as in istiod).
//!
//! Each update of the mesh draws a process-wide unique id (its epoch); a
//! dependency key remembers the epoch of the update that last changed it.
//! The cores use these epochs as input generations: two meshes built
//! separately never share one, so a cache entry made from one is never
//! taken for the other's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use istiod_config::istio::IstioObject;

use crate::model::{Model, Service};

/// A kind of configuration a per-class resource may depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dep {
    /// PeerAuthentication, AuthorizationPolicy and RequestAuthentication
    /// (and the JWT key sets istiod fetched for them): the inbound side of
    /// the namespace's workloads.
    Security,
    /// What a workload's inbound side reads of the Services of its
    /// namespace that select it: selector, ports, the endpoints' ports.
    Workloads,
    /// Sidecars: what the namespace's proxies see and their outbound
    /// fallback.
    Sidecar,
    /// What scoping reads of every service (name, namespace, exportTo,
    /// addresses, ports): mesh-wide.
    Services,
    /// DestinationRules (which one applies, locality balancing, hash
    /// policies): mesh-wide, a rule may apply to clients anywhere.
    DestinationRule,
    /// Gateways and the VirtualServices routers read: mesh-wide (a
    /// Gateway selects routers by label, anywhere).
    Gateway,
}

const DEPS: usize = 6;

/// Every dependency kind.
pub(super) const ALL_DEPS: [Dep; DEPS] =
    [Dep::Security, Dep::Workloads, Dep::Sidecar, Dep::Services, Dep::DestinationRule, Dep::Gateway];

/// Process-wide source of update ids.
static EPOCHS: AtomicU64 = AtomicU64::new(1);

fn fresh() -> u64 {
    EPOCHS.fetch_add(1, Ordering::Relaxed)
}

/// When each dependency key last changed.
#[derive(Debug, Clone)]
pub struct Changes {
    /// This update's id.
    epoch: u64,
    /// Per (kind, namespace): the epoch of its last change.
    by_ns: imbl::HashMap<(Dep, Arc<str>), u64>,
    /// Per kind: the last change that affects every namespace.
    everywhere: [u64; DEPS],
    /// Per kind: the last change anywhere.
    latest: [u64; DEPS],
}

impl Changes {
    /// A first update: every key changed.
    pub fn first() -> Changes {
        let epoch = fresh();
        Changes { epoch, by_ns: imbl::HashMap::new(), everywhere: [epoch; DEPS], latest: [epoch; DEPS] }
    }

    /// The next update, nothing changed yet.
    pub fn next(&self) -> Changes {
        Changes { epoch: fresh(), ..self.clone() }
    }

    /// This update as the continuation of `earlier`, an update of the same
    /// change (a mixed change applies its groups one after another): what
    /// this one touched is recorded under `earlier`'s epoch, so the change
    /// is one update, as a rebuild would record it.
    pub(crate) fn within(mut self, earlier: &Changes) -> Changes {
        let (from, to) = (self.epoch, earlier.epoch);
        for e in self.everywhere.iter_mut().chain(self.latest.iter_mut()) {
            if *e == from {
                *e = to;
            }
        }
        let moved: Vec<(Dep, Arc<str>)> =
            self.by_ns.iter().filter(|(_, e)| **e == from).map(|(k, _)| k.clone()).collect();
        for k in moved {
            self.by_ns.insert(k, to);
        }
        self.epoch = to;
        self
    }

    /// Records a change of `dep` in namespace `ns`; `root` is the mesh's
    /// root namespace, whose configuration applies to every namespace.
    pub fn touch(&mut self, dep: Dep, ns: &str, root: &str) {
        if ns == root {
            self.touch_everywhere(dep);
        } else {
            self.by_ns.insert((dep, Arc::from(ns)), self.epoch);
            self.latest[dep as usize] = self.epoch;
        }
    }

    /// Records a change of `dep` that affects every namespace.
    pub fn touch_everywhere(&mut self, dep: Dep) {
        self.everywhere[dep as usize] = self.epoch;
        self.latest[dep as usize] = self.epoch;
    }

    /// The epoch of the last change of `dep` that a proxy of namespace
    /// `ns` depends on.
    pub fn at(&self, dep: Dep, ns: &str) -> u64 {
        let own = self.by_ns.get(&(dep, Arc::from(ns))).copied().unwrap_or(0);
        own.max(self.everywhere[dep as usize])
    }

    /// How many dependency keys are tracked: one per kind for every
    /// namespace, and one per (kind, namespace) changed on its own
    /// (`xds_cache_dependent_config_size`).
    pub fn keys(&self) -> usize {
        DEPS + self.by_ns.len()
    }

    /// The epoch of the last change of `dep` anywhere.
    pub fn latest(&self, dep: Dep) -> u64 {
        self.latest[dep as usize]
    }

    /// The keys this update changed (`None`: every namespace), in order.
    pub fn touched(&self) -> Vec<(Dep, Option<Arc<str>>)> {
        let all = ALL_DEPS;
        let mut out: Vec<(Dep, Option<Arc<str>>)> =
            all.into_iter().filter(|d| self.everywhere[*d as usize] == self.epoch).map(|d| (d, None)).collect();
        let mut own: Vec<_> =
            self.by_ns.iter().filter(|(_, e)| **e == self.epoch).map(|((d, ns), _)| (*d, Some(ns.clone()))).collect();
        own.sort();
        out.extend(own);
        out
    }
}

/// Objects of a list sorted by (namespace, name), grouped by namespace.
fn by_namespace<'a>(list: impl IntoIterator<Item = &'a IstioObject>) -> BTreeMap<&'a str, Vec<&'a IstioObject>> {
    let mut out: BTreeMap<&str, Vec<&IstioObject>> = BTreeMap::new();
    for o in list {
        out.entry(o.meta.ns()).or_default().push(o);
    }
    out
}

/// The namespaces whose objects differ between the lists `old` and `new`
/// (each sorted by namespace and name).
pub(crate) fn changed_namespaces<'a>(
    old: impl IntoIterator<Item = &'a IstioObject>,
    new: impl IntoIterator<Item = &'a IstioObject>,
) -> std::collections::BTreeSet<&'a str> {
    let (a, b) = (by_namespace(old), by_namespace(new));
    a.keys().chain(b.keys()).filter(|ns| a.get(*ns) != b.get(*ns)).copied().collect()
}

/// Records `dep` changed in every namespace whose objects differ between
/// `old` and `new`.
pub(crate) fn touch_lists(changes: &mut Changes, dep: Dep, old: &[IstioObject], new: &[IstioObject], root: &str) {
    for ns in changed_namespaces(old, new) {
        changes.touch(dep, ns, root);
    }
}

/// The VirtualServices bound to some Gateway (not only to `mesh`): what
/// routers read of the routing objects.
pub(super) fn gateway_bound(model: &Model) -> Vec<&IstioObject> {
    model.routing.iter().filter(|o| is_gateway_bound(o)).collect()
}

/// Whether `o` is a VirtualService bound to some Gateway.
pub(crate) fn is_gateway_bound(o: &IstioObject) -> bool {
    match &o.spec {
        istiod_config::istio::IstioSpec::VirtualService(vs) => {
            crate::model::gateway::bound_gateways(&vs.gateways, o.meta.ns()).iter().any(|g| g != "mesh")
        }
        _ => false,
    }
}

/// What scoping, the outbound listeners and the virtual hosts read of one
/// service (all of it but its endpoints).
pub(crate) fn shape(s: &Service) -> impl PartialEq + '_ {
    (
        (&s.hostname, s.kubernetes, &s.name, &s.namespace, &s.vips, &s.auto_addresses),
        (&s.ports, s.resolution, s.mesh_external, &s.export_to, &s.labels),
    )
}

/// Records what changed between `old` and `new` in everything per-class
/// resources read, comparing the two models: the full-rebuild path
/// (the fast paths record their own part).
/// `old_parts` / `new_parts`: what inbound reads of each service (the
/// inputs' `inbound_parts`, already computed).
pub(super) fn touch_models(
    changes: &mut Changes,
    old: &Model,
    new: &Model,
    old_parts: &imbl::HashMap<Arc<str>, u64>,
    new_parts: &imbl::HashMap<Arc<str>, u64>,
) {
    let root = new.mesh.root_namespace.as_str();
    touch_lists(changes, Dep::Security, &old.security, &new.security, root);
    // Telemetries: the stats filter of the namespace's inbound side (the
    // outbound side is shared, diffed with the translation).
    touch_lists(changes, Dep::Security, &old.telemetries, &new.telemetries, root);
    if old.jwks != new.jwks {
        changes.touch_everywhere(Dep::Security);
    }
    touch_lists(changes, Dep::Sidecar, &old.sidecars, &new.sidecars, root);
    let rules = |m: &Model| {
        m.routing
            .iter()
            .filter(|o| matches!(o.spec, istiod_config::istio::IstioSpec::DestinationRule(_)))
            .cloned()
            .collect::<Vec<_>>()
    };
    if rules(old) != rules(new) {
        changes.touch_everywhere(Dep::DestinationRule);
    }
    // Routers read the Gateways and the VirtualServices (any of them may
    // be bound to a Gateway).
    if old.gateways != new.gateways || gateway_bound(old) != gateway_bound(new) {
        changes.touch_everywhere(Dep::Gateway);
    }
    if old.namespaces != new.namespaces || old.mesh != new.mesh {
        // Namespace labels and the mesh settings: anything may read them.
        for d in ALL_DEPS {
            changes.touch_everywhere(d);
        }
    }
    let mut scope = false;
    for (host, s) in new.services.iter() {
        match old.services.get(host) {
            Some(o) => {
                scope |= shape(o) != shape(s);
                if old_parts.get(host) != new_parts.get(host) {
                    changes.touch(Dep::Workloads, &o.namespace, "");
                    changes.touch(Dep::Workloads, &s.namespace, "");
                }
            }
            None => {
                scope = true;
                changes.touch(Dep::Workloads, &s.namespace, "");
            }
        }
    }
    for (host, o) in old.services.iter() {
        if !new.services.contains_key(host) {
            scope = true;
            changes.touch(Dep::Workloads, &o.namespace, "");
        }
    }
    if scope {
        changes.touch_everywhere(Dep::Services);
    }
}
