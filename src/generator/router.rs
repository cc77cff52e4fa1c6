//! What a router (an ingress gateway, node type `router`) is served, as
//! istiod's `pilot/pkg/networking/core/gateway.go` and `xds/sds.go`: its
//! listeners and route configurations from the Gateways that select it
//! (`model/gateway.rs` merges them, `translate/gateway.rs` builds them),
//! the mesh's outbound clusters without the passthrough ones, and its TLS
//! credentials over SDS (`kubernetes://<credentialName>`) from the
//! Secrets of its own namespace, to a verified caller only.
//!
//! A router's resources depend on its namespace and labels (which
//! Gateways select it, which of its Services resolve server ports), the
//! Gateways, the VirtualServices, the services' shapes and the
//! DestinationRules; its credentials on the Secrets they name.

use std::collections::BTreeMap;

use istiod_kubewatch::istio::{IstioObject, IstioSpec};
use istiod_proto::envoy::config::core::v3::{DataSource, data_source::Specifier};
use istiod_proto::envoy::config::listener::v3::Listener;
use istiod_proto::envoy::config::route::v3::RouteConfiguration;
use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;

use super::deps::Dep;
use super::{MeshInput, mix};
use crate::model::credentials::{self, Resource};
use crate::model::gateway::{MergedGateway, merge, select};
use crate::model::{Model, Service};
use crate::node::{NodeType, ProxyClass};
use crate::translate::gateway::{L4Inputs, listeners_with, route_configuration};

/// Whether `class` is a router.
pub(super) fn is_router(class: &ProxyClass) -> bool {
    class.node_type == NodeType::Router
}

/// Cluster names a router does not get (istiod gives routers no
/// passthrough clusters: a gateway forwards only what its routes name).
pub(super) fn router_skips_cluster(name: &str) -> bool {
    matches!(name, "PassthroughCluster" | "InboundPassthroughCluster")
}

fn labels(class: &ProxyClass) -> BTreeMap<String, String> {
    class.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The router's Services (istiod's `ServiceTargets`): those of its
/// namespace whose selector its labels satisfy.
fn targets<'a>(model: &'a Model, class: &ProxyClass, labels: &BTreeMap<String, String>) -> Vec<&'a Service> {
    model
        .services
        .values()
        .filter(|s| {
            s.namespace == *class.namespace
                && !s.selector.is_empty()
                && s.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        })
        .collect()
}

/// The Gateways that select a router of `class`, merged; a server's port
/// is resolved to the target port of the router's Service port of that
/// number (istiod's legacy `resolvePorts`: a Gateway's port 80 is the
/// router's 8080).
pub fn merged(model: &Model, class: &ProxyClass) -> MergedGateway {
    let labels = labels(class);
    let selected = select(model.gateways.iter(), &class.namespace, &labels, model.mesh.scope_gateway_to_namespace);
    if selected.is_empty() {
        return MergedGateway::default();
    }
    let targets = targets(model, class, &labels);
    let resolve = |n: u32| {
        targets
            .iter()
            .find_map(|s| {
                let p = s.ports.iter().find(|p| u32::from(p.port) == n)?;
                // A named target port: the endpoints say the number.
                let named = || s.endpoints.iter().find(|e| e.service_port == p.port).map(|e| e.port);
                p.target_port.or_else(named).map(u32::from)
            })
            .unwrap_or(n)
    };
    let m = merge(&selected, resolve);
    for r in &m.rejected {
        warn_once(r);
    }
    m
}

/// Logs a rejected server once (the merge runs for every router class
/// and generation; the conflict is the same each time), within a bounded
/// memory of what was said.
fn warn_once(r: &crate::model::gateway::Rejected) {
    static SAID: std::sync::Mutex<Option<std::collections::HashSet<(String, u32, String)>>> =
        std::sync::Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    let set = said.get_or_insert_with(Default::default);
    if set.len() >= 4096 {
        set.clear();
    }
    if set.insert((r.gateway.clone(), r.port, r.reason.clone())) {
        tracing::warn!(target: "model", gateway = %r.gateway, port = r.port, reason = %r.reason, "gateway server rejected");
    }
}

fn virtual_services(model: &Model) -> Vec<&IstioObject> {
    model.routing.iter().filter(|o| matches!(o.spec, IstioSpec::VirtualService(_))).collect()
}

/// A router's listeners (istiod's `buildGatewayListeners`).
pub fn listeners(model: &Model, class: &ProxyClass) -> Vec<Listener> {
    let m = merged(model, class);
    if m.ports.is_empty() {
        return Vec::new();
    }
    let resolve_host = |h: &str, ns: &str| model.resolve_host(h, ns);
    let single_port = |h: &str| match model.services.get(h).map(|s| s.ports.as_slice()) {
        Some([only]) => Some(u32::from(only.port)),
        _ => None,
    };
    let l4 = L4Inputs {
        virtual_services: virtual_services(model),
        proxy_ns: &class.namespace,
        resolve_host: &resolve_host,
        single_port: &single_port,
    };
    listeners_with(&m, Some(&l4))
}

/// A router's route configuration `name` (an unknown name is an empty
/// configuration, as istiod answers while listeners drain).
pub fn route(model: &Model, class: &ProxyClass, name: &str) -> RouteConfiguration {
    let m = merged(model, class);
    route_configuration(model, &m, name, &virtual_services(model), &class.namespace)
}

/// The input generation of a router's listeners and routes.
pub(super) fn input(m: &MeshInput, class: &ProxyClass) -> u64 {
    let c = &m.changes;
    mix((
        "router",
        c.latest(Dep::Gateway),
        c.latest(Dep::Services),
        c.latest(Dep::DestinationRule),
        c.at(Dep::Workloads, &class.namespace),
    ))
}

/// Every listener and route name some router may be served, before and
/// whatever the port resolution (a server's own port and every target
/// port of a Service port of that number): what the control thread marks
/// when what routers read changed.
pub fn all_names(model: &Model) -> Vec<(istiod_xds::ads::Kind, std::sync::Arc<str>)> {
    use istiod_xds::ads::Kind;
    let mut out = std::collections::BTreeSet::new();
    for o in model.gateways.iter() {
        let IstioSpec::Gateway(g) = &o.spec else { continue };
        for s in &g.servers {
            let Some(port) = &s.port else { continue };
            let mut resolved = vec![port.number];
            for svc in model.services.values() {
                for p in svc.ports.iter().filter(|p| u32::from(p.port) == port.number) {
                    resolved.extend(p.target_port.map(u32::from));
                    resolved
                        .extend(svc.endpoints.iter().filter(|e| e.service_port == p.port).map(|e| u32::from(e.port)));
                }
            }
            resolved.sort_unstable();
            resolved.dedup();
            let bind = if s.bind.is_empty() { "0.0.0.0" } else { s.bind.as_str() };
            for r in resolved {
                out.insert((Kind::Listener, format!("{bind}_{r}")));
                let route = crate::model::gateway::route_name(s, r, &o.meta.name, o.meta.ns());
                if !route.is_empty() {
                    out.insert((Kind::Route, route));
                }
            }
        }
    }
    out.into_iter().map(|(k, n)| (k, std::sync::Arc::from(n))).collect()
}

/// The SDS names a change of Secret `ns/name` may change: the plain and
/// `-cacert` names, with and without the namespace (a `-cacert` name
/// falls back to the Secret without the suffix).
pub fn secret_names(ns: &str, name: &str) -> Vec<std::sync::Arc<str>> {
    [
        format!("kubernetes://{name}"),
        format!("kubernetes://{name}{}", credentials::CA_SUFFIX),
        format!("kubernetes://{ns}/{name}"),
        format!("kubernetes://{ns}/{name}{}", credentials::CA_SUFFIX),
    ]
    .into_iter()
    .map(std::sync::Arc::from)
    .collect()
}

/// The SDS names whose Secrets differ between `old` and `new`.
pub fn changed_secret_names(
    old: &crate::model::Secrets,
    new: &crate::model::Secrets,
) -> Vec<(istiod_xds::ads::Kind, std::sync::Arc<str>)> {
    let mut keys: Vec<&(String, String)> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| old.get(*k).map(|s| s.hash) != new.get(*k).map(|s| s.hash))
        .flat_map(|(ns, name)| secret_names(ns, name))
        .map(|n| (istiod_xds::ads::Kind::Secret, n))
        .collect()
}

fn inline(bytes: &[u8]) -> Option<DataSource> {
    Some(DataSource { specifier: Some(Specifier::InlineBytes(bytes.to_vec())), ..Default::default() })
}

/// SDS resource `name` for a proxy of `class`, with the hash of what it
/// was made from; `None` when the proxy may not read it or there is
/// nothing to serve (istiod: no resource, not an error; the listener
/// waits for it). Only a verified caller reads credentials, and only
/// `kubernetes://` names of its own namespace (istiod's
/// `filterAuthorizedResources`).
pub fn secret(model: &Model, class: &ProxyClass, name: &str) -> Option<(u64, tls::Secret)> {
    if !class.verified {
        tracing::debug!(target: "ads", name, "SDS asked on an unauthenticated stream: nothing served");
        return None;
    }
    let resource = credentials::parse(name, &class.namespace)?;
    if !credentials::authorized(&resource, &class.namespace, || true) {
        tracing::warn!(target: "ads", name, namespace = %class.namespace, "proxy is not authorized to read this credential");
        return None;
    }
    let Resource::Kubernetes { namespace, name: secret_name, ca_only } = resource else {
        // ConfigMap CAs and Gateway API references are not served yet.
        return None;
    };
    let get = |n: &str| model.secrets.get(&(namespace.clone(), n.to_owned()));
    if ca_only {
        for candidate in credentials::ca_secret_names(&secret_name) {
            let Some(s) = get(&candidate) else { continue };
            match credentials::ca_info(&s.data) {
                Ok((ca, crl)) => {
                    let v = tls::CertificateValidationContext {
                        trusted_ca: inline(&ca),
                        crl: crl.as_deref().and_then(inline),
                        ..Default::default()
                    };
                    let secret =
                        tls::Secret { name: name.to_owned(), r#type: Some(tls::secret::Type::ValidationContext(v)) };
                    return Some((mix((name, &candidate, s.hash)), secret));
                }
                Err(e) => {
                    tracing::warn!(target: "ads", name, secret = %format!("{namespace}/{candidate}"), "{e}");
                    return None;
                }
            }
        }
        tracing::debug!(target: "ads", name, "no Secret holds this CA");
        return None;
    }
    let Some(s) = get(&secret_name) else {
        tracing::debug!(target: "ads", name, "no such Secret");
        return None;
    };
    match credentials::cert_info(&s.data) {
        Ok(c) => {
            let cert = tls::TlsCertificate {
                certificate_chain: inline(&c.cert),
                private_key: inline(&c.key),
                ocsp_staple: c.staple.as_deref().and_then(inline),
                ..Default::default()
            };
            let secret = tls::Secret { name: name.to_owned(), r#type: Some(tls::secret::Type::TlsCertificate(cert)) };
            Some((mix((name, s.hash)), secret))
        }
        Err(e) => {
            tracing::warn!(target: "ads", name, secret = %format!("{namespace}/{secret_name}"), "{e}");
            None
        }
    }
}
