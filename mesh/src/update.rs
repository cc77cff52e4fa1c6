//! What the control thread makes of one set of objects: the generators'
//! input (model and translation), rebuilt or, when only services (Services,
//! ServiceEntries, EndpointSlices, Pods), only VirtualServices and
//! DestinationRules, only security policies or only Sidecars changed,
//! updated in place. Either way the dependency keys the change touched are
//! recorded (`generator/deps.rs`).

use std::sync::Arc;

use istiod_kubewatch::config_dir::ObjectRef;
use istiod_kubewatch::objects::Objects;

use crate::generator::MeshInput;
use crate::model::Model;

/// Builds the model and everything served from it.
pub fn build(objects: &Objects, domain: &str, settings: &Arc<crate::meshconfig::MeshSettings>) -> Arc<MeshInput> {
    build_with(objects, domain, settings, &Arc::default())
}

/// [`build`], with the JWT key sets fetched so far.
pub fn build_with(
    objects: &Objects,
    domain: &str,
    settings: &Arc<crate::meshconfig::MeshSettings>,
    jwks: &Arc<crate::model::FetchedJwks>,
) -> Arc<MeshInput> {
    let mut model = Model::build_in(objects, domain, settings.clone());
    model.jwks = jwks.clone();
    Arc::new(MeshInput::new(Arc::new(model)))
}

/// The mesh built from `objects`, given the previous one (`prev`) and the
/// objects the source says changed since (`None`: it does not know, after a
/// first list or a relist): only Services, ServiceEntries, EndpointSlices
/// and Pods -> only the services they concern are rebuilt and
/// re-translated (their listeners and virtual hosts too where their
/// addresses or ports changed); only VirtualServices and DestinationRules
/// -> only the virtual hosts and clusters of their hosts; only security
/// policies -> only the policy list; only Sidecars -> only the scoping.
/// None of these rebuilds the model or the translation. Anything else
/// (Namespaces, Nodes, WorkloadEntries, a mix of groups, an unknown change)
/// does, and so does a new mesh configuration. Says which it did.
pub fn update(
    prev: Option<&Arc<MeshInput>>,
    objects: &Objects,
    changed: Option<&[ObjectRef]>,
    domain: &str,
    settings: &Arc<crate::meshconfig::MeshSettings>,
    jwks: &Arc<crate::model::FetchedJwks>,
) -> (Arc<MeshInput>, bool) {
    let all = |kinds: &[&str]| changed.filter(|c| c.iter().all(|r| kinds.contains(&r.kind.as_str())));
    // The fast paths keep the previous model's key sets, which are `jwks`:
    // the resolver replaces both together (jwks.rs `publish`).
    // A new mesh configuration may change anything: no fast path.
    let fast = prev.filter(|m| m.model.mesh == *settings).and_then(|m| {
        if let Some(refs) = all(&Model::SERVICE_KINDS) {
            return Some(m.with_services(objects, refs));
        }
        if all(&["PeerAuthentication", "AuthorizationPolicy", "RequestAuthentication"]).is_some() {
            return Some(m.with_security(objects));
        }
        if all(&["Secret"]).is_some() {
            return Some(m.with_secrets(objects));
        }
        if all(&["Sidecar"]).is_some() {
            return Some(m.with_sidecars(objects));
        }
        let refs = all(&["VirtualService", "DestinationRule"])?;
        let keys: Vec<(String, String, String)> =
            refs.iter().map(|r| (r.kind.clone(), r.namespace.clone(), r.name.clone())).collect();
        Some(m.with_routing(objects, &keys))
    });
    match (fast, prev) {
        (Some(m), _) => (Arc::new(m), true),
        (None, Some(prev)) => {
            let mut model = Model::build_in(objects, domain, settings.clone());
            model.jwks = jwks.clone();
            model.secret_access = prev.model.secret_access.clone();
            (Arc::new(MeshInput::after(prev, Arc::new(model))), false)
        }
        (None, None) => (build_with(objects, domain, settings, jwks), false),
    }
}
