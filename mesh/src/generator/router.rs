//! What a router (an ingress gateway, node type `router`) is served, as
//! istiod's `pilot/pkg/networking/core/gateway.go` and `xds/sds.go`: its
//! listeners and route configurations from the Gateways that select it
//! (`istiod_config::gateway_merge`, as `model::gateway`, merges them, `translate/gateway.rs` builds them),
//! the mesh's outbound clusters without the passthrough ones, and its TLS
//! credentials over SDS (`kubernetes://<credentialName>`) from the
//! Secrets of its own namespace, to a verified caller only.
//!
//! A router's resources depend on its namespace and labels (which
//! Gateways select it, which of its Services resolve server ports), the
//! Gateways, the VirtualServices, the services' shapes and the
//! DestinationRules; its credentials on the Secrets they name.

use std::collections::BTreeMap;
use std::sync::Arc;

use istiod_config::istio::{IstioObject, IstioSpec};
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
    matches!(name, "PassthroughCluster" | "InboundPassthroughCluster" | crate::translate::dfp::CLUSTER)
}

fn labels(class: &ProxyClass) -> BTreeMap<String, String> {
    class.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The router's Services (istiod's `ServiceTargets`): those of its
/// namespace whose selector its labels satisfy.
fn targets<'a>(model: &'a Model, class: &ProxyClass) -> Vec<&'a Service> {
    model
        .services
        .values()
        .map(Arc::as_ref)
        .filter(|s| {
            (s.namespace == *class.namespace
                && !s.selector.is_empty()
                && crate::model::has_labels(&class.labels, &s.selector))
                || crate::translate::inbound::claims(s, class)
        })
        .collect()
}

/// `DisableGatewayPortTranslationLabel`.
const DISABLE_PORT_TRANSLATION: &str = "experimental.istio.io/disable-gateway-port-translation";

/// The Gateways that select a router of `class`, merged; a server's port
/// is resolved to the target port of the router's Service port of that
/// number (istiod's legacy `resolvePorts`: a Gateway's port 80 is the
/// router's 8080).
pub fn merged(model: &Model, class: &ProxyClass) -> MergedGateway {
    let labels = labels(class);
    let targets = targets(model, class);
    let hosts: Vec<&str> = targets.iter().map(|s| &*s.hostname).collect();
    let mut selected =
        select(model.gateways.iter(), &class.namespace, &labels, model.mesh.scope_gateway_to_namespace, &hosts);
    if model.mesh.features.strict_gateway_merging {
        let dropped;
        (selected, dropped) = crate::model::gateway::strict(selected);
        for name in dropped {
            // istiod's filterStrictGatewayMerging: logged, and counted in
            // pilot_total_rejected_configs (here once per gateway).
            if first_time(format!("strict {name}")) {
                tracing::info!(target: "model", "strict gateway merging: skipping gateway {name} not in managed GatewayAPI namespace");
                crate::counters::rejected_gateway(&name);
            }
        }
    }
    if selected.is_empty() {
        return MergedGateway::default();
    }
    let resolve = |o: &IstioObject, n: u32| {
        // A Gateway API Gateway's ports are its Services' ports.
        let services = crate::model::gateway::gateway_services(o);
        // A Service labelled experimental.istio.io/disable-gateway-port-
        // translation opted out of the legacy port translation (istiod's
        // resolvePorts; a Knative workaround).
        let target = targets
            .iter()
            .filter(|s| services.as_ref().is_none_or(|names| names.contains(&&*s.hostname)))
            .filter(|s| services.is_some() || !s.labels.contains_key(DISABLE_PORT_TRANSLATION))
            .find_map(|s| {
                let p = s.ports.iter().find(|p| u32::from(p.port) == n)?;
                // A named target port: the endpoints say the number.
                let named = || s.endpoints.iter().find(|e| e.service_port == p.port).map(|e| e.port);
                p.target_port.or_else(named).map(u32::from)
            });
        if services.is_some() { target } else { Some(target.unwrap_or(n)) }
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
    if first_time(format!("rejected {} {} {}", r.gateway, r.port, r.reason)) {
        tracing::warn!(target: "model", gateway = %r.gateway, port = r.port, reason = %r.reason, "gateway server rejected");
    }
}

thread_local! {
    /// Set while a what-if prediction generates on this thread.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with credential problems neither counted nor logged on this
/// thread: a what-if prediction, whose resources are not served.
pub fn quietly<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            QUIET.set(self.0);
        }
    }
    let _reset = Reset(QUIET.replace(true));
    f()
}

/// Whether `what` is said for the first time (in this process, among the
/// last 4096 things said): a problem found on every push of every proxy
/// is logged once, not per push and per resource built.
fn first_time(what: String) -> bool {
    if QUIET.get() {
        return false;
    }
    static SAID: std::sync::Mutex<Option<std::collections::HashSet<String>>> = std::sync::Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    let set = said.get_or_insert_with(Default::default);
    if set.len() >= 4096 {
        set.clear();
    }
    set.insert(what)
}

static FILTER_CLUSTERS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG`: routers are sent the clusters of
/// the hosts their Gateways' VirtualServices route to (istiod's
/// `GatewayServices`), not every visible service's.
pub fn set_filter_clusters(on: bool) {
    FILTER_CLUSTERS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether [`set_filter_clusters`] is on.
pub fn filtering_clusters() -> bool {
    FILTER_CLUSTERS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The hosts whose clusters a router of `class` needs under
/// [`set_filter_clusters`]: the destinations (routes, mirrors) of the
/// VirtualServices bound to the Gateways it merges, and the mesh's
/// extension providers' services and, where Envoy fetches JWT keys, the
/// JWKS hosts of the RequestAuthentications that apply to the router
/// (istiod's `GatewayServices` and `extraServicesForProxy`); `None` when
/// every cluster stays (the switch off). An AUTO_PASSTHROUGH server's
/// SNI-DNAT clusters are the router's own names, not filtered here.
pub(crate) fn needed_hosts(model: &Model, class: &ProxyClass) -> Option<std::collections::HashSet<String>> {
    if !FILTER_CLUSTERS.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    let m = merged(model, class);
    let gateways: std::collections::BTreeSet<&str> = m.servers.values().flatten().map(|s| s.gateway.as_str()).collect();
    let mut hosts = std::collections::HashSet::new();
    for o in virtual_services(model) {
        let IstioSpec::VirtualService(vs) = &o.spec else { continue };
        let ns = o.meta.ns();
        if !crate::model::gateway::bound_gateways(&vs.gateways, ns).iter().any(|g| gateways.contains(g.as_str())) {
            continue;
        }
        let dests = vs
            .http
            .iter()
            .flat_map(|r| r.route.iter().filter_map(|d| d.destination.as_ref()).chain(r.mirror.iter()))
            .chain(vs.http.iter().flat_map(|r| r.mirrors.iter().filter_map(|m| m.destination.as_ref())))
            .chain(vs.tcp.iter().flat_map(|r| r.route.iter().filter_map(|d| d.destination.as_ref())))
            .chain(vs.tls.iter().flat_map(|r| r.route.iter().filter_map(|d| d.destination.as_ref())));
        hosts.extend(dests.map(|d| model.resolve_host(&d.host, ns)));
    }
    for (_, p) in model.mesh.extension_providers.values() {
        if let Some(service) = p["service"].as_str() {
            let host = service.split_once('/').map_or(service, |(_, h)| h);
            hosts.insert(host.to_owned());
        }
    }
    if model.mesh.jwks_fetch != crate::meshconfig::JwksFetch::Istiod {
        let rules = crate::translate::authn::jwt_rules(model, class);
        hosts.extend(rules.iter().filter_map(|r| crate::translate::authn::jwks_host(&r.jwks_uri)).map(|(h, _)| h));
    }
    Some(hosts)
}

/// Whether a cluster (`outbound|port|subset|host`) is one a router needs,
/// given [`needed_hosts`]; other clusters (BlackHole, ...) stay.
pub(crate) fn needs_cluster(hosts: &std::collections::HashSet<String>, name: &str) -> bool {
    match name.strip_prefix("outbound|").and_then(|r| r.splitn(3, '|').nth(2)) {
        Some(host) => hosts.contains(host),
        None => true,
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
    let auto = |hosts: &[String]| sni_dnat(model, class, Some(hosts)).into_iter().map(|(name, _)| name).collect();
    let policies = crate::translate::gateway::GatewayPolicies {
        jwt: crate::translate::authn::jwt_filter(model, class),
        http: crate::translate::authz::rbacs(model, class, true),
        tcp: crate::translate::authz::rbacs(model, class, false),
        tls_defaults: model.mesh.tls_defaults.clone(),
        disable_mx_alpn: model.mesh.disable_mx_alpn,
        no_100_continue: !model.mesh.proxy_100_continue,
        accept_per_event: crate::translate::listener::accept_per_event(&model.mesh),
        http10: model.mesh.http10,
        mx: model.mesh.metadata_exchange.then(|| model.mesh.mx_additional_labels.clone()),
        alpn_filter: model.mesh.alpn_filter,
        protocol_filters: model.mesh.protocol_filters,
        internal_addresses: crate::translate::envoy::internal_address_config(&model.mesh.networks.mesh),
        telemetry: crate::translate::telemetry::gateway(model, class),
    };
    let l4 = L4Inputs {
        virtual_services: virtual_services(model),
        proxy_ns: &class.namespace,
        resolve_host: &resolve_host,
        single_port: &single_port,
        auto_passthrough: &auto,
        policies: Some(&policies),
    };
    let mut listeners = listeners_with(&m, Some(&l4));
    // PILOT_GATEWAY_TRANSPORT_SOCKET_CONNECT_TIMEOUT (15s; 0: none), on
    // every chain (istiod's gatewayTransportSocketConnectTimeout).
    let timeout = model
        .mesh
        .gateway_handshake_timeout
        .map(|t| istiod_proto::prost_types::Duration { seconds: t.as_secs() as i64, nanos: t.subsec_nanos() as i32 });
    for c in listeners.iter_mut().flat_map(|l| l.filter_chains.iter_mut()) {
        c.transport_socket_connect_timeout = timeout;
    }
    listeners
}

/// The SNI-DNAT clusters of an AUTO_PASSTHROUGH router
/// (`buildOutboundSniDnatClusters`, `BuildDNSSrvSubsetKey`): for each
/// service it sees that is not mesh-external (under one of `hosts`, when
/// given) and each port but UDP, `outbound_.<port>_._.<host>` and one per
/// subset of its DestinationRule, each with the outbound cluster it
/// copies (`outbound|<port>|<subset>|<host>`).
pub fn sni_dnat(model: &Model, class: &ProxyClass, hosts: Option<&[String]>) -> Vec<(String, String)> {
    let rules = model.destination_rules();
    let mut out = Vec::new();
    for svc in model.services.values() {
        if svc.mesh_external || !crate::translate::scope::visible_on(model, class, svc, None) {
            continue;
        }
        if hosts.is_some_and(|hs| !hs.iter().any(|h| crate::model::destination_rules::host_matches(h, &svc.hostname))) {
            continue;
        }
        let subsets: Vec<String> = model
            .rule_index_for(&class.namespace, &class.labels, &svc.hostname)
            .map(|i| rules.get(i).rule.subsets.iter().map(|s| s.name.clone()).collect())
            .unwrap_or_default();
        for p in svc.ports.iter().filter(|p| p.protocol != crate::model::Protocol::Udp) {
            for subset in std::iter::once("").chain(subsets.iter().map(String::as_str)) {
                out.push((
                    format!("outbound_.{}_.{subset}_.{}", p.port, svc.hostname),
                    format!("outbound|{}|{subset}|{}", p.port, svc.hostname),
                ));
            }
        }
    }
    out
}

/// Whether some Gateway of a router of `class` is AUTO_PASSTHROUGH.
pub fn auto_passthrough(model: &Model, class: &ProxyClass) -> bool {
    !merged(model, class).auto_passthrough_hosts.is_empty()
}

/// SNI-DNAT cluster `name` (`outbound_.<port>_.<subset>_.<host>`) for a
/// router of `class`: the outbound cluster it copies, renamed, without TLS
/// (the client's mTLS passes through), its endpoints those of the
/// outbound cluster.
pub fn sni_dnat_cluster(
    m: &MeshInput,
    class: &ProxyClass,
    name: &str,
) -> Option<istiod_proto::envoy::config::cluster::v3::Cluster> {
    // `outbound_.<port>_.<subset>_.<host>`, checked against the service
    // (one lookup, not a pass over every service).
    let rest = name.strip_prefix("outbound_.")?;
    let (port, rest) = rest.split_once("_.")?;
    let (subset, host) = rest.split_once("_.")?;
    let port: u16 = port.parse().ok()?;
    let svc = m.model.services.get(host)?;
    if svc.mesh_external
        || !crate::translate::scope::visible_on(&m.model, class, svc, None)
        || !svc.ports.iter().any(|p| p.port == port && p.protocol != crate::model::Protocol::Udp)
    {
        return None;
    }
    if !subset.is_empty() {
        let rules = m.model.destination_rules();
        let i = m.model.rule_index_for(&class.namespace, &class.labels, host)?;
        if !rules.get(i).rule.subsets.iter().any(|s| s.name == subset) {
            return None;
        }
    }
    let outbound = format!("outbound|{port}|{subset}|{host}");
    let form = m.cluster_form(class, &outbound)?;
    let mut c = match &form.for_router {
        Some(b) => istiod_proto::prost::Message::decode(b.clone()).ok()?,
        None => (*form.cluster).clone(),
    };
    c.name = name.to_owned();
    c.transport_socket = None;
    c.transport_socket_matches.clear();
    if let Some(eds) = c.eds_cluster_config.as_mut() {
        eds.service_name = outbound;
    }
    Some(c)
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
        // RequestAuthentication and AuthorizationPolicy of its namespace
        // (and the root's), and the JWT key sets.
        c.at(Dep::Security, &class.namespace),
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
pub fn all_names(model: &Model) -> Vec<(istiod_xds_api::snapshot::Kind, std::sync::Arc<str>)> {
    use istiod_xds_api::snapshot::Kind;
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
            for r in resolved {
                let key =
                    crate::model::gateway::ServerPort { number: r, protocol: String::new(), bind: s.bind.clone() };
                out.insert((Kind::Listener, crate::translate::gateway::listener_name(&key)));
                let route = crate::model::gateway::route_name(s, r, &o.meta.name, o.meta.ns());
                if !route.is_empty() {
                    out.insert((Kind::Route, route));
                }
            }
        }
    }
    out.into_iter().map(|(k, n)| (k, std::sync::Arc::from(n))).collect()
}

/// Every SNI-DNAT cluster name some AUTO_PASSTHROUGH router may have
/// (every service and port, every subset of a rule naming the service):
/// none when no Gateway is AUTO_PASSTHROUGH.
pub fn all_sni_dnat_names(model: &Model) -> Vec<(istiod_xds_api::snapshot::Kind, std::sync::Arc<str>)> {
    use istiod_config::istio::networking::ServerTlsMode;
    let auto = model.gateways.iter().any(|o| match &o.spec {
        IstioSpec::Gateway(g) => {
            g.servers.iter().any(|s| s.tls.as_ref().is_some_and(|t| t.mode == ServerTlsMode::AutoPassthrough))
        }
        _ => false,
    });
    if !auto {
        return Vec::new();
    }
    let rules = model.destination_rules();
    let mut out = Vec::new();
    for svc in model.services.values().filter(|s| !s.mesh_external) {
        // Every rule that may apply to the service, wildcard hosts too.
        let mut names: Vec<&str> = rules
            .candidates(&svc.hostname)
            .into_iter()
            .flat_map(|i| rules.get(i).rule.subsets.iter().map(|s| s.name.as_str()))
            .collect();
        names.sort_unstable();
        names.dedup();
        for p in svc.ports.iter().filter(|p| p.protocol != crate::model::Protocol::Udp) {
            for subset in std::iter::once("").chain(names.iter().copied()) {
                let name = format!("outbound_.{}_.{subset}_.{}", p.port, svc.hostname);
                out.push((istiod_xds_api::snapshot::Kind::Cluster, std::sync::Arc::from(name)));
            }
        }
    }
    out
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
        format!("kubernetes-gateway://{ns}/{name}"),
        format!("kubernetes-gateway://{ns}/{name}{}", credentials::CA_SUFFIX),
    ]
    .into_iter()
    .map(std::sync::Arc::from)
    .collect()
}

/// The keys whose stored data differs between `old` and `new`.
fn changed_keys<'a>(old: &'a crate::model::Secrets, new: &'a crate::model::Secrets) -> Vec<&'a (String, String)> {
    let mut keys: Vec<&(String, String)> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.retain(|k| old.get(*k).map(|s| s.hash) != new.get(*k).map(|s| s.hash));
    keys
}

/// The SDS names whose Secrets differ between `old` and `new`.
pub fn changed_secret_names(
    old: &crate::model::Secrets,
    new: &crate::model::Secrets,
) -> Vec<(istiod_xds_api::snapshot::Kind, std::sync::Arc<str>)> {
    changed_keys(old, new)
        .into_iter()
        .flat_map(|(ns, name)| secret_names(ns, name))
        .map(|n| (istiod_xds_api::snapshot::Kind::Secret, n))
        .collect()
}

/// The SDS names whose ConfigMaps differ between `old` and `new`
/// (`configmap://<ns>/<name>`, and with `-cacert`, as cluster TLS asks).
pub fn changed_config_map_names(
    old: &crate::model::Secrets,
    new: &crate::model::Secrets,
) -> Vec<(istiod_xds_api::snapshot::Kind, std::sync::Arc<str>)> {
    changed_keys(old, new)
        .into_iter()
        .flat_map(|(ns, name)| {
            [format!("configmap://{ns}/{name}"), format!("configmap://{ns}/{name}{}", credentials::CA_SUFFIX)]
        })
        .map(|n| (istiod_xds_api::snapshot::Kind::Secret, std::sync::Arc::from(n)))
        .collect()
}

/// The `kubernetes://` SDS names of the Secrets of `namespace` (what an
/// answer on a service account of that namespace may change).
pub fn secret_names_in(model: &Model, namespace: &str) -> Vec<(istiod_xds_api::snapshot::Kind, std::sync::Arc<str>)> {
    model
        .secrets
        .keys()
        .filter(|(ns, _)| ns == namespace)
        .flat_map(|(ns, name)| secret_names(ns, name))
        .map(|n| (istiod_xds_api::snapshot::Kind::Secret, n))
        .collect()
}

/// The `kubernetes-gateway://` credentials a router of `class` may read
/// (`mergeGateways`' VerifiedCertificateReferences): those its Gateways of
/// its own namespace name, with their `-cacert` for MUTUAL servers, when
/// the Secret is in that namespace or a ReferenceGrant lets the Gateway
/// refer to it. A ListenerSet's listeners (on a Gateway of the router's
/// namespace, the handshake being the Gateway's `allowedListeners`) read
/// Secrets of the ListenerSet's namespace, or granted to ListenerSets of it.
fn verified_references(model: &Model, class: &ProxyClass) -> Vec<String> {
    use istiod_config::istio::networking::ServerTlsMode;
    let mut out = Vec::new();
    for servers in merged(model, class).servers.values() {
        for s in servers {
            let (gw_ns, gw_name) = s.gateway.split_once('/').unwrap_or(("", ""));
            let object = model.gateways.iter().find(|o| o.meta.ns() == gw_ns && o.meta.name == gw_name);
            let expected_ns = object.map_or(gw_ns, crate::model::gateway::parent_namespace);
            let Some(t) = s.server.tls.as_ref().filter(|_| expected_ns == &*class.namespace) else { continue };
            let set = object.is_some_and(istiod_config::gateway_convert::from_listener_set);
            let (kind, lookup) = if set { ("ListenerSet", gw_ns) } else { ("Gateway", &*class.namespace) };
            // A Gateway API gateway's credentials go to its service
            // account (`internal.istio.io/service-account-name`), when set.
            let sa = object
                .and_then(|o| o.meta.annotations.get("internal.istio.io/service-account-name"))
                .filter(|sa| !sa.is_empty());
            if sa.is_some_and(|sa| **sa != *class.service_account) {
                continue;
            }
            let names = if t.credential_names.is_empty() {
                vec![&t.credential_name]
            } else {
                t.credential_names.iter().collect()
            };
            for n in names {
                let Some(Resource::KubernetesGateway { namespace, name, .. }) = credentials::parse(n, &class.namespace)
                else {
                    continue;
                };
                let grants = &model.gateway_api.grants;
                if namespace != lookup
                    && !istiod_config::gateway_convert::granted(grants, kind, lookup, "Secret", &namespace, &name)
                {
                    continue;
                }
                out.push(n.clone());
                if matches!(t.mode, ServerTlsMode::Mutual | ServerTlsMode::OptionalMutual) {
                    out.push(format!("{n}{}", credentials::CA_SUFFIX));
                }
            }
            // A Gateway API client certificate validation's CA in a Secret
            // (a ConfigMap's any proxy may read).
            if let Some(Resource::KubernetesGateway { namespace, name, .. }) =
                credentials::parse(&t.ca_cert_credential_name, &class.namespace)
            {
                let grants = &model.gateway_api.grants;
                if namespace == lookup
                    || istiod_config::gateway_convert::granted(grants, kind, lookup, "Secret", &namespace, &name)
                {
                    out.push(t.ca_cert_credential_name.clone());
                }
            }
        }
    }
    out
}

/// The SDS secret `name` holding a CA (and its revocation list).
fn ca_secret(name: &str, ca: &[u8], crl: Option<&[u8]>) -> tls::Secret {
    let v =
        tls::CertificateValidationContext { trusted_ca: inline(ca), crl: crl.and_then(inline), ..Default::default() };
    tls::Secret { name: name.to_owned(), r#type: Some(tls::secret::Type::ValidationContext(v)) }
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
/// `pilot_sds_certificate_errors_total`: a credential asked for that
/// cannot be served (missing, invalid, not authorized), counted when its
/// resource is generated (istiod counts each SDS generation).
fn sds_error() {
    if !QUIET.get() {
        crate::counters::sds_error();
    }
}

pub fn secret(model: &Model, class: &ProxyClass, name: &str) -> Option<(u64, tls::Secret)> {
    // A CA in a ConfigMap (a BackendTLSPolicy's): any verified proxy, as
    // istiod's filterAuthorizedResources (the client reads its server's
    // CA, so across namespaces).
    if let (true, Some(Resource::ConfigMap { namespace, name: cm })) =
        (class.verified, credentials::parse(name, &class.namespace))
    {
        let Some(c) = model.config_maps.get(&(namespace.clone(), cm.clone())) else {
            if first_time(format!("no configmap {namespace}/{cm}")) {
                tracing::warn!(target: "ads", name, "failed to fetch ca certificate: configmap {namespace}/{cm} not found");
            }
            sds_error();
            return None;
        };
        return match credentials::ca_info(&c.data) {
            Ok((ca, crl)) => Some((mix((name, "configmap", c.hash)), ca_secret(name, &ca, crl.as_deref()))),
            Err(e) => {
                if first_time(format!("invalid configmap {namespace}/{cm} {} {e}", c.hash)) {
                    tracing::warn!(target: "ads", name, "failed to fetch ca certificate: {e}");
                }
                sds_error();
                None
            }
        };
    }
    if !class.verified || !is_router(class) {
        // istiod serves any verified proxy whose service account may list
        // Secrets; istiod-rs serves gateways only.
        tracing::debug!(target: "ads", name, "SDS asked by a proxy that is not a verified gateway: nothing served");
        return None;
    }
    let resource = credentials::parse(name, &class.namespace)?;
    let mut pending = false;
    let allowed = match &resource {
        // istiod's VerifiedCertificateReferences: named by a Gateway of the
        // proxy's namespace, in that namespace or through a ReferenceGrant.
        Resource::KubernetesGateway { .. } => verified_references(model, class).iter().any(|r| r == name),
        // Its own namespace, and a CA, or a service account the API server
        // lets list Secrets there (istiod's SubjectAccessReview).
        r => credentials::authorized(r, &class.namespace, || {
            let answer = model.secret_access.allows(&class.namespace, &class.service_account);
            pending = answer.is_none();
            answer == Some(true)
        }),
    };
    if pending {
        tracing::debug!(target: "ads", name, "waiting for the API server to say whether the gateway may read Secrets");
        return None;
    }
    if !allowed {
        if first_time(format!("unauthorized {name} {} {}", class.namespace, class.service_account)) {
            tracing::warn!(target: "ads", name, namespace = %class.namespace, "proxy is not authorized to read this credential");
        }
        sds_error();
        return None;
    }
    let (namespace, secret_name, ca_only) = match resource {
        Resource::Kubernetes { namespace, name, ca_only }
        | Resource::KubernetesGateway { namespace, name, ca_only } => (namespace, name, ca_only),
        // Served above.
        Resource::ConfigMap { .. } => return None,
    };
    let get = |n: &str| model.secrets.get(&(namespace.clone(), n.to_owned()));
    if ca_only {
        for candidate in credentials::ca_secret_names(&secret_name) {
            let Some(s) = get(&candidate) else { continue };
            match credentials::ca_info(&s.data) {
                Ok((ca, crl)) => return Some((mix((name, &candidate, s.hash)), ca_secret(name, &ca, crl.as_deref()))),
                Err(e) => {
                    if first_time(format!("invalid {namespace}/{candidate} {} {e}", s.hash)) {
                        tracing::warn!(target: "ads", name, secret = %format!("{namespace}/{candidate}"), "{e}");
                    }
                    sds_error();
                    return None;
                }
            }
        }
        tracing::debug!(target: "ads", name, "no Secret holds this CA");
        sds_error();
        return None;
    }
    let Some(s) = get(&secret_name) else {
        tracing::debug!(target: "ads", name, "no such Secret");
        sds_error();
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
            if first_time(format!("invalid {namespace}/{secret_name} {} {e}", s.hash)) {
                tracing::warn!(target: "ads", name, secret = %format!("{namespace}/{secret_name}"), "{e}");
            }
            sds_error();
            None
        }
    }
}

/// What is wrong with the Gateways, for `/debug/configz` and the log, as
/// a router in each Gateway's namespace labelled with exactly its
/// selector would see them (the usual deployment: one gateway Deployment
/// per selector): servers left out by istiod's merge rules, credentials
/// that name no Secret there or a Secret without a certificate and key,
/// and VirtualServices bound to a Gateway that route to no known service.
pub fn report(model: &Model) -> serde_json::Value {
    use serde_json::json;
    let mut rejected = Vec::new();
    let mut credentials = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for o in model.gateways.iter() {
        let IstioSpec::Gateway(g) = &o.spec else { continue };
        let ns = o.meta.ns();
        if seen.insert((ns.to_owned(), g.selector.clone())) {
            let class = ProxyClass {
                node_type: NodeType::Router,
                namespace: ns.into(),
                generator: "".into(),
                labels: g.selector.iter().map(|(k, v)| (k.as_str().into(), v.as_str().into())).collect(),
                locality: "".into(),
                verified: true,
                service_account: "".into(),
                ips: Vec::new(),
                mesh_id: "".into(),
                cluster_id: "".into(),
                version: "".into(),
                metadata: Vec::new(),
            };
            for r in merged(model, &class).rejected {
                rejected.push(json!({"gateway": r.gateway, "port": r.port, "reason": r.reason}));
            }
        }
        for s in &g.servers {
            let Some(t) = &s.tls else { continue };
            let names = if t.credential_names.is_empty() {
                vec![&t.credential_name]
            } else {
                t.credential_names.iter().collect()
            };
            for name in names.into_iter().filter(|n| !n.is_empty() && !n.contains("://")) {
                let problem = match model.secrets.get(&(ns.to_owned(), name.clone())) {
                    None => "no such Secret in the Gateway's namespace: the server's listener waits for it".to_owned(),
                    Some(secret) => match credentials::cert_info(&secret.data) {
                        Ok(_) => continue,
                        Err(e) => e,
                    },
                };
                credentials.push(json!({
                    "gateway": format!("{ns}/{}", o.meta.name),
                    "credentialName": name,
                    "problem": problem,
                }));
            }
        }
    }
    let mut backends = Vec::new();
    for o in virtual_services(model).into_iter().filter(|o| super::deps::is_gateway_bound(o)) {
        let IstioSpec::VirtualService(vs) = &o.spec else { continue };
        let dests = vs.http.iter().flat_map(|r| r.route.iter().filter_map(|d| d.destination.as_ref()));
        let dests = dests
            .chain(vs.tcp.iter().flat_map(|r| r.route.iter().filter_map(|d| d.destination.as_ref())))
            .chain(vs.tls.iter().flat_map(|r| r.route.iter().filter_map(|d| d.destination.as_ref())));
        for d in dests {
            let host = model.resolve_host(&d.host, o.meta.ns());
            if !model.services.contains_key(host.as_str()) {
                backends.push(json!({"virtualService": format!("{}/{}", o.meta.ns(), o.meta.name), "host": host}));
            }
        }
    }
    backends.dedup();
    json!({
        "rejectedServers": rejected,
        "credentials": credentials,
        "missingBackends": backends,
        "gatewayApi": model.gateway_api.problems,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::testing::{objects, snapshot};
    use istiod_xds_api::snapshot::{Generator, Kind};

    fn router(ns: &str, verified: bool) -> ProxyClass {
        ProxyClass {
            node_type: NodeType::Router,
            namespace: ns.into(),
            generator: "".into(),
            labels: vec![("app".into(), "gw".into())],
            locality: "".into(),
            verified,
            service_account: "".into(),
            ips: Vec::new(),
            mesh_id: "".into(),
            cluster_id: "".into(),
            version: "".into(),
            metadata: Vec::new(),
        }
    }

    const MESH: &str = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: edge}\n\
        spec: {selector: {app: gw}, servers: [\
          {port: {number: 443, name: a, protocol: HTTPS}, hosts: [a.example.com], tls: {mode: SIMPLE, credentialName: missing}},\
          {port: {number: 443, name: b, protocol: HTTPS}, hosts: [b.example.com], tls: {mode: SIMPLE, credentialName: keyless}},\
          {port: {number: 443, name: c, protocol: HTTPS}, hosts: [c.example.com], tls: {mode: MUTUAL, credentialName: good}}]}\n\
        ---\napiVersion: v1\nkind: Secret\nmetadata: {name: keyless, namespace: edge}\nstringData: {tls.crt: CERT}\n\
        ---\napiVersion: v1\nkind: Secret\nmetadata: {name: good, namespace: edge}\nstringData: {cert: CERT, key: KEY, cacert: CA}\n\
        ---\napiVersion: v1\nkind: Secret\nmetadata: {name: good, namespace: other}\nstringData: {cert: OTHER, key: KEY}\n\
        ---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a, namespace: edge}\n\
        spec: {hosts: [a.example.com], gateways: [gw], http: [{route: [{destination: {host: nowhere}}]}]}\n";

    /// istiod's sds.go: a verified router reads the Secrets of its own
    /// namespace only; generic keys (cert/key/cacert) as well as TLS ones.
    #[test]
    fn credentials_are_served_to_a_verified_router_of_their_namespace_only() {
        let model = Arc::new(Model::build(&objects(MESH), "cluster.local"));
        let snap = snapshot(&model);
        let g = crate::generator::MeshGenerator;
        let cert = |class: &ProxyClass, name: &str| {
            g.generate(&snap, class, Kind::Secret, name).map(|b| {
                use istiod_proto::prost::Message;
                tls::Secret::decode(b).unwrap()
            })
        };
        let edge = router("edge", true);
        let s = cert(&edge, "kubernetes://good").expect("its own namespace's Secret");
        let Some(tls::secret::Type::TlsCertificate(c)) = s.r#type else { panic!("{s:?}") };
        assert_eq!(c.certificate_chain.unwrap().specifier, Some(Specifier::InlineBytes(b"CERT".to_vec())));
        let ca = cert(&edge, "kubernetes://good-cacert").expect("the CA, from the same Secret's cacert");
        assert!(matches!(ca.r#type, Some(tls::secret::Type::ValidationContext(_))));
        assert!(cert(&edge, "kubernetes://other/good").is_none(), "another namespace's");
        // istiod's `pilot_sds_certificate_errors_total`: a credential that
        // cannot be served counts (other tests may count too, so at least).
        let errors = crate::counters::sds_errors();
        assert!(cert(&edge, "kubernetes://keyless").is_none(), "no key");
        assert!(cert(&edge, "kubernetes://missing").is_none());
        assert!(crate::counters::sds_errors() >= errors + 2, "both counted");
        assert!(cert(&router("edge", false), "kubernetes://good").is_none(), "not verified");
        assert!(cert(&router("other", true), "kubernetes://good").is_some(), "its own namespace's Secret of that name");
        // Input generations follow the Secret's content.
        let before = g.input_generation(&snap, &edge, Kind::Secret, "kubernetes://good");
        let mut o = objects(MESH);
        o.secrets
            .iter_mut()
            .find(|s| s.metadata.ns() == "edge" && s.metadata.name == "good")
            .unwrap()
            .string_data
            .insert("cert".into(), "NEW".into());
        let after = snapshot(&Arc::new(Model::build(&o, "cluster.local")));
        assert_ne!(before, g.input_generation(&after, &edge, Kind::Secret, "kubernetes://good"));
    }

    #[test]
    fn the_report_names_missing_credentials_and_backends() {
        let model = Model::build(&objects(MESH), "cluster.local");
        let r = report(&model);
        assert_eq!(r["rejectedServers"], json!([]));
        let creds: Vec<(&str, &str)> = r["credentials"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["credentialName"].as_str().unwrap(), c["problem"].as_str().unwrap()))
            .collect();
        assert_eq!(creds.len(), 2, "{r}");
        assert_eq!(creds[0].0, "missing");
        assert!(creds[0].1.starts_with("no such Secret"), "{r}");
        assert_eq!(creds[1].0, "keyless");
        assert!(creds[1].1.contains("didn't have expected keys"), "{r}");
        assert_eq!(
            r["missingBackends"],
            json!([{"virtualService": "edge/a", "host": "nowhere.edge.svc.cluster.local"}])
        );
    }

    /// An east-west gateway (istiod's gateway.go
    /// builtAutoPassthroughFilterChains, cluster_builder.go
    /// buildOutboundSniDnatClusters): per service under the server's hosts
    /// and port but UDP, and per subset, a chain matching the SNI-DNAT name
    /// and Istio's mTLS ALPNs, proxying to the cluster of that name: the
    /// outbound cluster without TLS, its endpoints the outbound cluster's.
    #[test]
    fn auto_passthrough_routes_sni_dnat_names_to_copies_of_the_outbound_clusters() {
        let yaml = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: ew, namespace: edge}\n\
            spec: {selector: {app: gw}, servers: [{port: {number: 15443, name: tls, protocol: TLS}, hosts: [\"*.local\"], tls: {mode: AUTO_PASSTHROUGH}}]}\n\
            ---\napiVersion: v1\nkind: Service\nmetadata: {name: reviews, namespace: shop}\n\
            spec: {clusterIP: 10.0.0.1, selector: {app: reviews}, ports: [{name: http, port: 9080}, {name: udp-x, port: 53, protocol: UDP}]}\n\
            ---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: shop}\n\
            spec: {host: reviews, subsets: [{name: v1, labels: {version: v1}}]}\n\
            ---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: ext, namespace: shop}\n\
            spec: {hosts: [api.example.com], ports: [{number: 443, name: tls, protocol: TLS}], resolution: DNS, location: MESH_EXTERNAL}\n";
        let model = Arc::new(Model::build(&objects(yaml), "cluster.local"));
        let class = router("edge", false);
        let ls = listeners(&model, &class);
        assert_eq!(ls.len(), 1);
        let sni: Vec<(&str, &[String])> = ls[0]
            .filter_chains
            .iter()
            .map(|c| {
                let m = c.filter_chain_match.as_ref().unwrap();
                (m.server_names[0].as_str(), m.application_protocols.as_slice())
            })
            .collect();
        let names: Vec<&str> = sni.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            ["outbound_.9080_._.reviews.shop.svc.cluster.local", "outbound_.9080_.v1_.reviews.shop.svc.cluster.local"],
            "no UDP port, no mesh-external service"
        );
        assert_eq!(sni[0].1, ["istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"]);
        assert!(ls[0].filter_chains.iter().all(|c| c.transport_socket.is_none()), "the TLS passes through");
        let snap = snapshot(&model);
        let g = crate::generator::MeshGenerator;
        let clusters = g.wildcard_names(&snap, &class, Kind::Cluster);
        assert!(clusters.iter().any(|n| &**n == "outbound_.9080_.v1_.reviews.shop.svc.cluster.local"), "{clusters:?}");
        let body =
            g.generate(&snap, &class, Kind::Cluster, "outbound_.9080_.v1_.reviews.shop.svc.cluster.local").unwrap();
        use istiod_proto::prost::Message;
        let c = istiod_proto::envoy::config::cluster::v3::Cluster::decode(body).unwrap();
        assert_eq!(c.name, "outbound_.9080_.v1_.reviews.shop.svc.cluster.local");
        assert!(c.transport_socket.is_none() && c.transport_socket_matches.is_empty());
        assert_eq!(c.eds_cluster_config.unwrap().service_name, "outbound|9080|v1|reviews.shop.svc.cluster.local");
        // A router the Gateway does not select gets none.
        let other = ProxyClass { labels: vec![("app".into(), "other".into())], ..router("edge", false) };
        assert!(!g.wildcard_names(&snap, &other, Kind::Cluster).iter().any(|n| n.starts_with("outbound_.")));
        let touched = all_sni_dnat_names(&model);
        assert_eq!(touched.len(), 2, "{touched:?}");
    }

    /// Gateways enforce the AuthorizationPolicies that select them (a
    /// DENY on the gateway's labels is an RBAC filter before the router),
    /// take no Sidecar (istiod's doGetSidecarScope: "Gateways always use
    /// default sidecar scope"), and a sidecar of the same namespace gets no
    /// credentials.
    #[test]
    fn gateways_enforce_policies_ignore_sidecars_and_keep_credentials_to_themselves() {
        let yaml = format!(
            "{MESH}---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: deny-admin, namespace: edge}}\n\
             spec: {{selector: {{matchLabels: {{app: gw}}}}, action: DENY, rules: [{{to: [{{operation: {{paths: [/admin]}}}}]}}]}}\n\
             ---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: default, namespace: istio-system}}\n\
             spec: {{egress: [{{hosts: [./*]}}]}}\n\
             ---\napiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: shop}}\n\
             spec: {{clusterIP: 10.0.0.9, selector: {{app: web}}, ports: [{{name: http, port: 80}}]}}\n"
        );
        let model = Arc::new(Model::build(&objects(&yaml), "cluster.local"));
        let edge = router("edge", true);
        let ls = listeners(&model, &edge);
        let hcm = ls[0].filter_chains.iter().find_map(|c| {
            c.filters.iter().find_map(|f| match &f.config_type {
                Some(istiod_proto::envoy::config::listener::v3::filter::ConfigType::TypedConfig(a)) => {
                    use istiod_proto::prost::Message;
                    istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager::decode(&a.value[..]).ok()
                }
                _ => None,
            })
        });
        let names: Vec<String> = hcm.unwrap().http_filters.iter().map(|f| f.name.clone()).collect();
        // (istiod's order: metadata exchange, then the policies.)
        assert_eq!(names[..2], ["istio.metadata_exchange", "envoy.filters.http.rbac"], "{names:?}");
        assert_eq!(names.last().map(String::as_str), Some("envoy.filters.http.router"));
        let snap = snapshot(&model);
        let g = crate::generator::MeshGenerator;
        let clusters = g.wildcard_names(&snap, &edge, Kind::Cluster);
        assert!(clusters.iter().any(|n| n.ends_with("web.shop.svc.cluster.local")), "{clusters:?}");
        let sidecar = ProxyClass { node_type: NodeType::Sidecar, ..edge.clone() };
        assert!(g.generate(&snap, &edge, Kind::Secret, "kubernetes://good").is_some());
        assert!(g.generate(&snap, &sidecar, Kind::Secret, "kubernetes://good").is_none());
    }

    /// TCPRoute and TLSRoute (istiod's convertTCPRoute, convertTLSRoute):
    /// a TCP listener proxies to the TCPRoute's backend; a Passthrough TLS
    /// listener routes the TLSRoute's SNI host to its backend.
    #[test]
    fn tcp_and_tls_routes_reach_the_router() {
        let yaml = "apiVersion: v1\nkind: Service\nmetadata: {name: gw-istio, namespace: edge}\n\
            spec: {clusterIP: 10.0.0.1, selector: {app: gw}, ports: [{name: tcp, port: 9000}, {name: tls, port: 443, targetPort: 8443}]}\n\
            ---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: edge}\n\
            spec:\n  gatewayClassName: istio\n  listeners:\n  - {name: db, port: 9000, protocol: TCP}\n  \
            - {name: tls, port: 443, protocol: TLS, hostname: '*.tls.example.com', tls: {mode: Passthrough}}\n\
            ---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {name: db, namespace: edge}\n\
            spec: {parentRefs: [{name: gw, sectionName: db}], rules: [{backendRefs: [{name: postgres, port: 5432}]}]}\n\
            ---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute\nmetadata: {name: app, namespace: edge}\n\
            spec: {parentRefs: [{name: gw, sectionName: tls}], hostnames: [a.tls.example.com], rules: [{backendRefs: [{name: app, port: 443}]}]}\n\
            ---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute\nmetadata: {name: wrong-kind, namespace: edge}\n\
            spec: {parentRefs: [{name: gw, sectionName: db}], hostnames: [b.tls.example.com], rules: [{backendRefs: [{name: app, port: 443}]}]}\n";
        let model = Model::build(&objects(yaml), "cluster.local");
        let class = ProxyClass {
            labels: vec![("app".into(), "gw".into())],
            service_account: "gw-istio".into(),
            ..router("edge", true)
        };
        let ls = listeners(&model, &class);
        let names: Vec<&str> = ls.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["0.0.0.0_9000", "0.0.0.0_8443"], "{names:?}");
        let proxied = |l: &istiod_proto::envoy::config::listener::v3::Listener| -> Vec<(Vec<String>, String)> {
            use istiod_proto::prost::Message;
            l.filter_chains
                .iter()
                .map(|c| {
                    let sni = c.filter_chain_match.as_ref().map(|m| m.server_names.clone()).unwrap_or_default();
                    let f = c.filters.last().unwrap();
                    let Some(istiod_proto::envoy::config::listener::v3::filter::ConfigType::TypedConfig(a)) = &f.config_type
                    else {
                        panic!()
                    };
                    let t = istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3::TcpProxy::decode(&a.value[..]).unwrap();
                    let Some(istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3::tcp_proxy::ClusterSpecifier::Cluster(c)) =
                        t.cluster_specifier
                    else {
                        panic!()
                    };
                    (sni, c)
                })
                .collect()
        };
        assert_eq!(
            proxied(&ls[1]),
            [(vec!["a.tls.example.com".to_owned()], "outbound|443||app.edge.svc.cluster.local".to_owned())]
        );
        assert_eq!(proxied(&ls[0]), [(vec![], "outbound|5432||postgres.edge.svc.cluster.local".to_owned())]);
        let refused: Vec<&str> = model.gateway_api.problems.iter().filter_map(|p| p["reason"].as_str()).collect();
        assert_eq!(refused, ["NotAllowedByListeners"], "a TLSRoute on a TCP listener");
        let status = model.gateway_api.statuses.iter().find(|s| s.path.ends_with("/tcproutes/db")).unwrap();
        assert!(status.path.starts_with("/apis/gateway.networking.k8s.io/v1/"), "{}", status.path);
    }

    /// Upstream `TestListenerTransportSocketConnectTimeoutForGateway`
    /// (pilot/pkg/networking/core/gateway_test.go): the default 15s, a
    /// custom 30s, and none when `PILOT_GATEWAY_TRANSPORT_SOCKET_CONNECT_TIMEOUT`
    /// is 0; on every chain of the router's listeners.
    #[test]
    fn upstream_listener_transport_socket_connect_timeout_for_gateway() {
        let gateway = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: http-server, namespace: testns}\n\
            spec: {selector: {app: gw}, servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]}\n";
        let cases = [
            ("should set default timeout", Some(std::time::Duration::from_secs(15)), Some(15)),
            ("should set custom timeout", Some(std::time::Duration::from_secs(30)), Some(30)),
            ("should disable timeout when set to 0", None, None),
        ];
        for (name, setting, want) in cases {
            let mut model = Model::build(&objects(gateway), "cluster.local");
            let mut mesh = (*model.mesh).clone();
            mesh.gateway_handshake_timeout = setting;
            model.mesh = Arc::new(mesh);
            let ls = listeners(&model, &router("testns", false));
            let chains: Vec<_> = ls.iter().flat_map(|l| &l.filter_chains).collect();
            assert!(!chains.is_empty(), "{name}");
            for c in chains {
                assert_eq!(c.transport_socket_connect_timeout.map(|d| d.seconds), want, "{name}");
            }
        }
    }
}
