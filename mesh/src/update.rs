//! What a change does to the served mesh, one place per kind group: the
//! generators' input (model and translation) is updated in place, group by
//! group, or rebuilt, and the dependency keys the
//! change touched are recorded (`generator/deps.rs`). Each group is
//! described once, model, translation and keys side by side:
//! - services (Services, ServiceEntries, EndpointSlices, Pods,
//!   WorkloadEntries):
//!   `update/services.rs`;
//! - routing (VirtualServices, DestinationRules): `update/routing.rs`;
//! - security policies, Secrets, Sidecars, fetched JWT key sets and the
//!   API server's Secret access answers: below.
//!
//! [`update`] applies each group a change touches, one after another;
//! anything else (Namespaces, Nodes, Gateways, a new mesh configuration)
//! rebuilds.

pub(crate) mod routing;
mod services;

use std::sync::Arc;

use istiod_config::manifest::ObjectRef;
use istiod_config::objects::Objects;

use crate::generator::deps::{self, Dep};
use crate::generator::{MeshInput, outbound_overrides, selecting};
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
/// first list or a relist). A change is taken group by group ([`Group`]),
/// each applied in place to what the previous group left: Services,
/// ServiceEntries, EndpointSlices and Pods -> only the services they
/// concern are rebuilt and re-translated (their listeners and virtual hosts
/// too where their addresses or ports changed); VirtualServices and
/// DestinationRules -> only the virtual hosts and clusters of their hosts;
/// security policies -> the policy list (and the clusters of services
/// whose inferred mTLS mode moved); Sidecars -> the scoping; EnvoyFilters,
/// WasmPlugins and TrafficExtensions -> only those (applied per proxy);
/// Secrets and ConfigMaps -> only those. (WorkloadEntries go with the
/// services.) So a mix of these (a Helm install: Services, Pods,
/// EndpointSlices, DestinationRules and VirtualServices together) rebuilds
/// neither the model nor the translation. Anything else (Namespaces,
/// Nodes, Gateways, an unknown change), a group whose
/// in-place update does not cover the change (see [`step`]) or a new mesh
/// configuration rebuilds everything. Says which it did.
pub fn update(
    prev: Option<&Arc<MeshInput>>,
    objects: &Objects,
    changed: Option<&[ObjectRef]>,
    domain: &str,
    settings: &Arc<crate::meshconfig::MeshSettings>,
    jwks: &Arc<crate::model::FetchedJwks>,
) -> (Arc<MeshInput>, bool) {
    // The fast paths keep the previous model's key sets, which are `jwks`:
    // the resolver replaces both together (jwks.rs `publish`).
    // A new mesh configuration may change anything: no fast path.
    let fast = prev.filter(|m| m.model.mesh == *settings).and_then(|m| {
        let changed = changed?;
        let mut groups: std::collections::BTreeMap<Group, Vec<ObjectRef>> = std::collections::BTreeMap::new();
        for r in changed {
            groups.entry(Group::of(&r.kind)?).or_default().push(r.clone());
        }
        // An uninstall removes a VirtualService with its Service: removed
        // first, it never names a host that is no service (which would
        // re-translate every listener).
        let removes_routes = groups.get(&Group::Routing).is_some_and(|refs| {
            let mut named = refs.iter().filter(|r| r.kind == "VirtualService").peekable();
            named.peek().is_some() && {
                let present: std::collections::HashSet<(&str, &str)> = objects
                    .istio
                    .iter()
                    .filter(|o| o.kind().name() == "VirtualService")
                    .map(|o| (o.meta.ns(), o.meta.name.as_str()))
                    .collect();
                named.any(|r| !present.contains(&(r.namespace.as_str(), r.name.as_str())))
            }
        });
        let mut order: Vec<Group> = groups.keys().copied().collect();
        if removes_routes {
            order.sort_by_key(|g| (*g != Group::Security, *g != Group::Routing, *g));
        }
        let mut at: Option<MeshInput> = None;
        for group in order {
            let refs = &groups[&group];
            let mut next = step(group, at.as_ref().unwrap_or(m), &m.model, objects, refs, domain, settings)?;
            if let Some(earlier) = &at {
                next.changes = next.changes.within(&earlier.changes);
            }
            at = Some(next);
        }
        // (Nothing changed: a new update that touched nothing.)
        let next = at.unwrap_or_else(|| MeshInput { changes: m.changes.next(), ..(**m).clone() });
        // A VirtualService read beyond its services' virtual hosts after
        // the change: rebuilt whole (see `step`).
        let keys = groups.get(&Group::Routing).map(|refs| routing_keys(refs)).unwrap_or_default();
        (!special(&next.model, &keys)).then_some(next)
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

/// A group of kinds whose change is applied in place, in the order a mixed
/// change applies them: security first (the services then translate
/// under the new policies), services before routing (a new VirtualService
/// never names a host its Service, in the same change, has not brought
/// yet; where the change removes a VirtualService, routing goes first) and
/// Sidecars after both (their scoping reads the services).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Group {
    Security,
    Services,
    Routing,
    Sidecars,
    Filters,
    Secrets,
    ConfigMaps,
}

impl Group {
    /// The group of kind `kind`, if its change may be applied in place.
    fn of(kind: &str) -> Option<Group> {
        Some(match kind {
            k if Model::SERVICE_KINDS.contains(&k) => Group::Services,
            "PeerAuthentication" | "AuthorizationPolicy" | "RequestAuthentication" => Group::Security,
            "VirtualService" | "DestinationRule" => Group::Routing,
            "Sidecar" => Group::Sidecars,
            "EnvoyFilter" | "WasmPlugin" | "TrafficExtension" => Group::Filters,
            "Secret" => Group::Secrets,
            "ConfigMap" => Group::ConfigMaps,
            _ => return None,
        })
    }
}

/// `m` after the objects `refs` of `group` changed in `objects`, or `None`
/// where the change reaches beyond what the group's in-place update covers.
/// In `m`, the groups applied before this one are as `objects` has them;
/// those applied after are as before the change, and their own steps
/// re-translate what they touch.
/// `origin`: the model before the whole change (of which `m` may be a
/// step).
fn step(
    group: Group,
    m: &MeshInput,
    origin: &Model,
    objects: &Objects,
    refs: &[ObjectRef],
    domain: &str,
    settings: &Arc<crate::meshconfig::MeshSettings>,
) -> Option<MeshInput> {
    match group {
        Group::Services => {
            // (A ref names no cluster: a remote cluster's objects change
            // through here too, their hosts rebuilt from every cluster.)
            // An Ingress's named backend port is read from its Service; an
            // ExternalName Service aliases another's virtual host.
            let external_name = |s: &istiod_config::objects::Service| s.spec.kind.as_deref() == Some("ExternalName");
            // A BackendTLSPolicy names its backends (and their ports by
            // name): a Service or ServiceEntry change may change its rules.
            let backend_tls = |o: &istiod_config::gateway_api::GatewayApiObject| {
                matches!(o.spec, istiod_config::gateway_api::GatewayApiSpec::BackendTlsPolicy(_))
            };
            if refs.iter().any(|r| r.kind == "Service" || r.kind == "ServiceEntry")
                && objects.gateway_api.iter().any(backend_tls)
            {
                return None;
            }
            // A route whose mesh parent is a Service or ServiceEntry takes
            // it only while it exists, with a ServiceEntry's hosts.
            let parent = |r: &&ObjectRef| {
                istiod_config::gateway_convert::names_mesh_parent(&objects.gateway_api, &r.kind, &r.namespace, &r.name)
            };
            if refs.iter().any(|r| parent(&r)) {
                return None;
            }
            // A waypoint's status reads its Service and endpoints.
            let waypoint = |r: &&ObjectRef| {
                let svc = if r.kind == "EndpointSlice" { r.service.as_deref().unwrap_or_default() } else { &r.name };
                istiod_config::gateway_convert::names_waypoint_service(&objects.gateway_api, &r.namespace, svc)
            };
            if refs.iter().any(|r| matches!(r.kind.as_str(), "Service" | "EndpointSlice") && waypoint(&r)) {
                return None;
            }
            // An east-west gateway's Service changes every cross-network
            // endpoint's weight.
            let gateway = |r: &&ObjectRef| {
                let remotes = objects.remotes.iter().map(|(_, o)| &**o);
                std::iter::once(objects).chain(remotes).any(|o| {
                    let svc = o.services.iter().find(|s| s.metadata.ns() == r.namespace && s.metadata.name == r.name);
                    svc.is_some_and(|s| crate::model::network::may_be_gateway(s, settings, domain))
                }) || m.model.network_gateways.services.contains(&(r.namespace.clone(), r.name.clone()))
            };
            if refs.iter().any(|r| r.kind == "Service" && gateway(&r)) {
                return None;
            }
            if refs.iter().any(|r| r.kind == "Service")
                && (!objects.ingresses.is_empty()
                    || !m.model.aliases.is_empty()
                    || objects.services.iter().any(external_name))
            {
                return None;
            }
            Some(m.with_services(objects, refs))
        }
        Group::Security => Some(m.with_security(objects)),
        Group::Secrets => {
            // Whether a Gateway API listener is served depends on its
            // Secret (istiod's buildSecretReference): rebuilt whole.
            let named = |r: &&ObjectRef| {
                istiod_config::gateway_convert::names_secret(&objects.gateway_api, &r.namespace, &r.name)
            };
            if refs.iter().any(|r| named(&r)) {
                return None;
            }
            Some(m.with_secrets(objects))
        }
        Group::ConfigMaps => {
            // A BackendTLSPolicy's CA decides its rules' credential (a
            // missing or empty one blocks traffic) and its status: rebuilt
            // whole when one names a changed ConfigMap.
            let named = |r: &&ObjectRef| istiod_config::backend_tls::names_config_map(objects, &r.namespace, &r.name);
            if refs.iter().any(|r| named(&r)) {
                return None;
            }
            Some(m.with_config_maps(objects))
        }
        Group::Filters => Some(m.with_filters_and_extensions(objects)),
        Group::Sidecars => Some(m.with_sidecars(objects)),
        Group::Routing => {
            // A delegate's change reaches the VirtualServices that delegate
            // to it: merged whole, by the full rebuild.
            if crate::model::delegate::any_delegating(&objects.istio) {
                return None;
            }
            // tcp/tls routes shape the shared outbound listeners: rebuilt
            // whole while any VirtualService had or has them.
            let l4 = |o: &istiod_config::istio::IstioObject| matches!(&o.spec, istiod_config::istio::IstioSpec::VirtualService(vs) if !vs.tcp.is_empty() || !vs.tls.is_empty());
            if objects.istio.iter().any(l4) || m.model.routing.iter().any(l4) {
                return None;
            }
            let keys = routing_keys(refs);
            // A VirtualService read beyond its services' virtual hosts (a
            // wildcard or unknown host, a host another one names): rebuilt
            // whole, before or after the change. Before: as the mesh was
            // served, not as an earlier group of the same change left it;
            // after: once every group is applied ([`update`]).
            if special(origin, &keys) {
                return None;
            }
            Some(m.with_routing(objects, &keys))
        }
    }
}

/// (kind, namespace, name) of the routing objects `refs`.
fn routing_keys(refs: &[ObjectRef]) -> Vec<(String, String, String)> {
    refs.iter().map(|r| (r.kind.clone(), r.namespace.clone(), r.name.clone())).collect()
}

/// Whether one of the routing objects `keys` is a VirtualService `model`
/// reads beyond its services' virtual hosts
/// (`route::is_special_virtual_service`).
fn special(model: &Model, keys: &[(String, String, String)]) -> bool {
    !keys.is_empty() && model.routing_named(keys).any(|o| crate::translate::route::is_special_virtual_service(model, o))
}

// Security policies (PeerAuthentication, AuthorizationPolicy, RequestAuthentication).

impl MeshInput {
    /// The mesh after security policies (PeerAuthentication,
    /// AuthorizationPolicy, RequestAuthentication) changed in `objs`: the
    /// inbound resources read them (the namespaces whose policies changed
    /// are recorded), and auto mTLS reads PeerAuthentications (the
    /// clusters of the services whose inferred mode moved are
    /// re-translated); the rest of the shared translation is kept. A pass
    /// over the Istio objects, not a rebuild.
    pub fn with_security(&self, objs: &istiod_config::objects::Objects) -> MeshInput {
        let model = Arc::new(self.model.with_security_of(objs));
        let mut changes = self.changes.next();
        let root = model.mesh.root_namespace.as_str();
        deps::touch_lists(&mut changes, Dep::Security, &self.model.security, &model.security, root);
        let mut next = MeshInput { model: model.clone(), changes, ..self.clone() };
        // Auto mTLS reads PeerAuthentications too: a service whose
        // workloads are now known to refuse mTLS (or no longer are) gets its
        // clusters and load assignments anew.
        for host in mtls_moved(&self.model, &model) {
            next.translation.update_service(&model, &host);
        }
        next
    }
}

/// The services whose mTLS mode as clients infer it
/// (`authn::service_mtls_mode`, on some port) differs between `old` and
/// `new`: only in the namespaces whose PeerAuthentications changed, or
/// everywhere when the root namespace's did.
fn mtls_moved(old: &Model, new: &Model) -> Vec<Arc<str>> {
    let peer = |o: &&istiod_config::istio::IstioObject| o.kind().name() == "PeerAuthentication";
    let moved = deps::changed_namespaces(old.security.iter().filter(peer), new.security.iter().filter(peer));
    let everywhere = moved.contains(new.mesh.root_namespace.as_str());
    let mode = |m: &Model, s: &crate::model::Service| {
        s.ports.iter().map(|p| crate::translate::authn::service_mtls_mode(m, s, p.port)).collect::<Vec<_>>()
    };
    new.services
        .iter()
        .filter(|(_, s)| everywhere || moved.contains(s.namespace.as_str()))
        .filter(|(h, s)| old.services.get(*h).is_none_or(|o| mode(old, o) != mode(new, s)))
        .map(|(h, _)| h.clone())
        .collect()
}

// Secrets.

impl MeshInput {
    /// The mesh after Secrets changed in `objs`, and nothing else: only
    /// SDS reads them (by content hash), so nothing else is recorded.
    pub fn with_secrets(&self, objs: &istiod_config::objects::Objects) -> MeshInput {
        let model = Arc::new(self.model.with_secrets_of(objs));
        MeshInput { model, changes: self.changes.next(), ..self.clone() }
    }
}

// EnvoyFilters and extensions.

impl MeshInput {
    /// The mesh after EnvoyFilters, WasmPlugins or TrafficExtensions
    /// changed, and nothing else: they are
    /// applied per proxy as resources are generated (the generator mixes
    /// the applying filters' digest into each patched resource's
    /// generation), so the shared translation is kept and only the proxies
    /// a changed filter selects see new resources. WasmPlugins and
    /// TrafficExtensions are read again with them: they are inserted per
    /// proxy in the same way. A pass over the Istio objects, not a rebuild.
    pub fn with_filters_and_extensions(&self, objs: &istiod_config::objects::Objects) -> MeshInput {
        let filters = crate::model::envoy_filters_of(objs, &self.model.mesh);
        let extensions = crate::model::extensions_of(objs, &self.model.mesh);
        let model = Arc::new(Model {
            envoy_filters: Arc::new(filters),
            extensions: Arc::new(extensions),
            ..(*self.model).clone()
        });
        MeshInput { model, changes: self.changes.next(), ..self.clone() }
    }
}

// ConfigMaps.

impl MeshInput {
    /// The mesh after ConfigMaps no BackendTLSPolicy names changed: only
    /// SDS reads them (`configmap://` names, by content hash).
    pub fn with_config_maps(&self, objs: &istiod_config::objects::Objects) -> MeshInput {
        let model =
            Arc::new(Model { config_maps: Arc::new(crate::model::config_maps_of(objs)), ..(*self.model).clone() });
        MeshInput { model, changes: self.changes.next(), ..self.clone() }
    }
}

// Sidecars.

impl MeshInput {
    /// The mesh after Sidecars changed in `objs`, and nothing else: they
    /// shape what each proxy sees (scoping) and its outbound fallback, both
    /// applied per class on the cores; the shared translation does not
    /// read them and is kept. A pass over the Istio objects and a new
    /// scoping, not a rebuild. The namespaces whose Sidecars changed are
    /// recorded.
    pub fn with_sidecars(&self, objs: &istiod_config::objects::Objects) -> MeshInput {
        let model = Arc::new(self.model.with_sidecars_of(objs));
        let mut changes = self.changes.next();
        let root = model.mesh.root_namespace.as_str();
        deps::touch_lists(&mut changes, Dep::Sidecar, &self.model.sidecars, &model.sidecars, root);
        MeshInput {
            changes,
            scoping: Arc::new(crate::translate::scope::Scoping::new(&model)),
            outbound_overrides: outbound_overrides(&model),
            selecting_sidecars: selecting(&model),
            model,
            ..self.clone()
        }
    }
}

// What the control thread learns besides objects: the JWT key sets it
// fetched and the API server's answers on Secret access.

impl MeshInput {
    /// The mesh with the JWT key sets istiod fetched replaced: only the
    /// inbound listeners read them (jwt_authn); everything else is shared
    /// with `self`.
    pub fn with_jwks(&self, jwks: Arc<crate::model::FetchedJwks>) -> MeshInput {
        let mut model = (*self.model).clone();
        model.jwks = jwks;
        let mut changes = self.changes.next();
        changes.touch_everywhere(Dep::Security);
        MeshInput { model: Arc::new(model), changes, ..self.clone() }
    }

    /// The mesh with the API server's answers on who may read Secrets
    /// (`access`); only SDS reads them, so nothing else is recorded.
    pub fn with_secret_access(&self, access: Arc<crate::model::credentials::SecretAccess>) -> MeshInput {
        let mut model = (*self.model).clone();
        model.secret_access = access;
        MeshInput { model: Arc::new(model), ..self.clone() }
    }
}
