//! What the control thread makes of one set of objects: the model, the
//! translation and the generators' input, rebuilt or, when only
//! EndpointSlices changed, updated in place.

use std::sync::Arc;

use istiod_kubewatch::config_dir::ObjectRef;
use istiod_kubewatch::objects::EndpointSlice;

use crate::generator::MeshInput;
use crate::model::Model;

/// What the control thread derives from one set of objects: the model,
/// the shared resources, and the inputs of the per-class generators.
pub struct Built {
    /// The mesh model.
    pub model: Arc<Model>,
    /// The shared resources, encoded.
    pub resources: crate::translate::Resources,
    /// The per-class generators' inputs.
    pub mesh: Arc<MeshInput>,
}

/// Builds the model and everything served from it.
pub fn build(
    objects: &istiod_kubewatch::objects::Objects,
    domain: &str,
    mesh: &Arc<crate::mesh::MeshSettings>,
) -> Built {
    let model = Arc::new(Model::build_in(objects, domain, mesh.clone()));
    let mesh = Arc::new(MeshInput::new(model.clone()));
    let resources = mesh.translation.resources.clone();
    Built { model, resources, mesh }
}

/// The Services whose EndpointSlices differ between `old` and `new`, as
/// (namespace, name), when nothing else differs; `None` otherwise. A
/// source that knows which objects changed (`changed`, the config
/// directory) saves the comparison of every object.
fn endpoint_only_change(
    old: Option<&istiod_kubewatch::objects::Objects>,
    new: &istiod_kubewatch::objects::Objects,
    changed: Option<&[ObjectRef]>,
) -> Option<Vec<(String, String)>> {
    if let Some(changed) = changed {
        if changed.iter().any(|r| r.kind != "EndpointSlice") {
            return None;
        }
        let services: std::collections::BTreeSet<(String, String)> =
            changed.iter().filter_map(|r| Some((r.namespace.clone(), r.service.clone()?))).collect();
        return Some(services.into_iter().collect());
    }
    let old = old?;
    if old.services != new.services
        || old.pods != new.pods
        || old.nodes != new.nodes
        || old.namespaces != new.namespaces
        || old.istio != new.istio
    {
        return None;
    }
    fn index(o: &istiod_kubewatch::objects::Objects) -> std::collections::HashMap<(&str, &str), &EndpointSlice> {
        o.endpoint_slices.iter().map(|s| ((s.metadata.ns(), s.metadata.name.as_str()), s)).collect()
    }
    let (a, b) = (index(old), index(new));
    let mut services = std::collections::BTreeSet::new();
    for (x, y) in [(&a, &b), (&b, &a)] {
        for (key, slice) in x {
            if y.get(key) != Some(slice) {
                // A slice without its service label serves nothing.
                if let Some(svc) = slice.service_name() {
                    services.insert((key.0.to_owned(), svc.to_owned()));
                }
            }
        }
    }
    Some(services.into_iter().collect())
}

/// The mesh built from `objects`, given the previous one (`prev`) and,
/// when the source knows, which objects changed (else, when given, the
/// objects it was built from, to compare): when only
/// EndpointSlices changed, only their services are rebuilt and
/// re-translated; when only VirtualServices and DestinationRules changed
/// (a source that names them), only the virtual hosts and clusters of
/// their hosts; both O(changed), the rest shared. Anything else rebuilds the model. Says which it did.
pub fn update(
    prev: Option<&Arc<MeshInput>>,
    prev_objects: Option<&istiod_kubewatch::objects::Objects>,
    objects: &istiod_kubewatch::objects::Objects,
    changed: Option<&[ObjectRef]>,
    domain: &str,
    settings: &Arc<crate::mesh::MeshSettings>,
) -> (Built, bool) {
    let routing = changed
        .filter(|c| !c.is_empty() && c.iter().all(|r| r.kind == "VirtualService" || r.kind == "DestinationRule"));
    let fast = prev.and_then(|m| match routing {
        Some(refs) => {
            let keys: Vec<(String, String, String)> =
                refs.iter().map(|r| (r.kind.clone(), r.namespace.clone(), r.name.clone())).collect();
            Some(m.with_routing(objects, &keys).0)
        }
        None => endpoint_only_change(prev_objects, objects, changed).map(|svcs| m.with_endpoints(objects, &svcs).0),
    });
    match fast {
        Some(m) => {
            (Built { model: m.model.clone(), resources: m.translation.resources.clone(), mesh: Arc::new(m) }, true)
        }
        None => (build(objects, domain, settings), false),
    }
}
