use std::path::Path;

use istiod_proto::envoy::config::listener::v3::Listener;

use istiod_config::istio::security::MtlsMode;
use istiod_proto::envoy::config::cluster::v3::{Cluster, cluster};
use istiod_proto::envoy::config::core::v3 as core;
use istiod_proto::envoy::config::endpoint::v3::ClusterLoadAssignment;
use istiod_proto::envoy::config::listener::v3::filter;
use istiod_proto::envoy::config::route::v3 as route;

use super::*;
use crate::model::Protocol;
use crate::testing::add;
use crate::translate::authn::{mtls_mode, service_mtls_mode};
use crate::translate::inbound::InboundPort;

fn bookinfo() -> Arc<Model> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    Arc::new(Model::build(&istiod_kubewatch::config_dir::load(&dir).unwrap().objects, "cluster.local"))
}

use crate::testing::{class, istio_objects, served, snapshot};

fn with_security(model: &Model, yaml: &str) -> Model {
    let mut m = model.clone();
    for o in istio_objects(yaml) {
        Arc::make_mut(&mut m.security).insert(0, o);
    }
    m
}

#[test]
fn reviews_gets_its_port_under_the_mesh_wide_strict_policy() {
    let m = bookinfo();
    let c = class("bookinfo", &[("app", "reviews"), ("version", "v1")]);
    let ports = inbound_ports(&m, &c);
    assert_eq!(
        ports,
        vec![InboundPort {
            port: 9080,
            protocol: Protocol::Http,
            mtls: MtlsMode::Strict,
            ingress: None,
            tls: None,
            service: Some((Arc::from("reviews.bookinfo.svc.cluster.local"), 9080)),
        }]
    );
    let l = virtual_inbound(&m, &c);
    let names: Vec<&str> = l.filter_chains.iter().map(|f| f.name.as_str()).collect();
    // istiod's chains (listener_inbound.go, filterchain_options.go): the
    // blackhole for 15006 itself, the passthrough (HTTP and TCP, mTLS
    // only under STRICT), then the port's.
    assert_eq!(
        names,
        vec!["virtualInbound-blackhole", "virtualInbound-catchall-http", "virtualInbound", "0.0.0.0_9080"],
        "STRICT: TLS chains only"
    );
    assert!(l.filter_chains[1..].iter().all(|f| f.transport_socket.is_some()));
    assert_eq!(l.filter_chains[3].filter_chain_match.as_ref().unwrap().destination_port, Some(9080));
    // A workload no service selects has only the blackhole and catch-alls.
    assert_eq!(virtual_inbound(&m, &class("bookinfo", &[("app", "nothing")])).filter_chains.len(), 3);
}

#[test]
fn namespace_and_port_level_policies_override_the_mesh() {
    let m = with_security(
        &bookinfo(),
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: ns, namespace: bookinfo}\nspec: {mtls: {mode: PERMISSIVE}}\n---\n\
         apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: ratings, namespace: bookinfo}\n\
         spec: {selector: {matchLabels: {app: ratings}}, mtls: {mode: UNSET}, portLevelMtls: {9080: {mode: DISABLE}}}\n",
    );
    let reviews = class("bookinfo", &[("app", "reviews")]);
    assert_eq!(mtls_mode(&m, &reviews, 9080), MtlsMode::Permissive);
    let l = virtual_inbound(&m, &reviews);
    let port: Vec<(bool, String)> = l
        .filter_chains
        .iter()
        .filter(|f| f.name == "0.0.0.0_9080")
        .map(|f| (f.transport_socket.is_some(), f.filter_chain_match.clone().unwrap_or_default().transport_protocol))
        .collect();
    assert_eq!(
        port,
        [(true, "tls".to_owned()), (false, "raw_buffer".to_owned())],
        "PERMISSIVE: mTLS (Istio's ALPNs) and plaintext"
    );
    let ratings = class("bookinfo", &[("app", "ratings")]);
    assert_eq!(mtls_mode(&m, &ratings, 9080), MtlsMode::Disable, "port-level wins");
    assert_eq!(mtls_mode(&m, &ratings, 1234), MtlsMode::Permissive, "UNSET inherits from the namespace");
}

#[test]
fn generator_serves_per_class_resources_and_shared_ones() {
    let m = bookinfo();
    let snap = snapshot(&m);
    let g = MeshGenerator;
    let reviews = class("bookinfo", &[("app", "reviews")]);
    let listeners = g.wildcard_names(&snap, &reviews, Kind::Listener);
    assert!(listeners.iter().any(|n| &**n == VIRTUAL_INBOUND));
    assert!(listeners.iter().any(|n| &**n == "0.0.0.0_9080"), "shared listeners too");
    assert!(g.wildcard_names(&snap, &reviews, Kind::Cluster).iter().any(|n| &**n == "inbound|9080||"));
    assert!(g.input_generation(&snap, &reviews, Kind::Listener, VIRTUAL_INBOUND).is_some());
    let l = Listener::decode(g.generate(&snap, &reviews, Kind::Listener, VIRTUAL_INBOUND).unwrap()).unwrap();
    // The blackhole, the STRICT passthrough's two, the port's one.
    assert_eq!(l.filter_chains.len(), 4);
    // Proxyless gRPC gets none of it.
    let grpc = ProxyClass { generator: "grpc".into(), ..reviews.clone() };
    assert!(!g.wildcard_names(&snap, &grpc, Kind::Listener).iter().any(|n| &**n == VIRTUAL_INBOUND));
    assert_eq!(g.generate(&snap, &grpc, Kind::Listener, VIRTUAL_INBOUND), None);
    // Another class's inbound cluster does not exist for this one.
    assert_eq!(g.input_generation(&snap, &reviews, Kind::Cluster, "inbound|27017||"), None);
}

/// The dependency keys an update records (`deps.rs`), compared model to
/// model: nothing for an identical model; a namespace's PeerAuthentication
/// that namespace's proxies only (proxy_dependencies.go: a policy concerns
/// the proxies of its namespace, the root namespace's all of them).
#[test]
fn an_update_records_exactly_the_keys_it_changed() {
    let m = bookinfo();
    let old = MeshInput::new(m.clone());
    let touched = |next: &Model| MeshInput::after(&old, Arc::new(next.clone())).changes.touched();
    assert_eq!(touched(&m), vec![], "the same model changes nothing");
    let pa = |ns: &str| {
        format!(
            "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {{name: x, namespace: {ns}}}\nspec: {{mtls: {{mode: DISABLE}}}}\n"
        )
    };
    let in_bookinfo = with_security(&m, &pa("bookinfo"));
    assert_eq!(touched(&in_bookinfo), vec![(Dep::Security, Some(Arc::from("bookinfo")))]);
    assert_eq!(touched(&with_security(&m, &pa("istio-system"))), vec![(Dep::Security, None)], "root: everywhere");

    // What the cores see: the inbound generation of bookinfo's proxies
    // moves, another namespace's does not, and the bytes agree.
    let next = Arc::new(MeshInput::after(&old, Arc::new(in_bookinfo)));
    let snap = |mesh: &Arc<MeshInput>| {
        let mut s = Snapshot::new(1, std::time::Instant::now(), Arc::default());
        s.mesh = Some(mesh.clone());
        s
    };
    let (before, after) = (snap(&Arc::new(old.clone())), snap(&next));
    let generation = |s: &Snapshot<MeshInput>, c: &ProxyClass| {
        MeshGenerator.input_generation(s, c, Kind::Listener, VIRTUAL_INBOUND).unwrap()
    };
    let (reviews, other) = (class("bookinfo", &[("app", "reviews")]), class("other", &[("app", "reviews")]));
    assert_ne!(generation(&before, &reviews), generation(&after, &reviews));
    assert_eq!(generation(&before, &other), generation(&after, &other));
    assert_eq!(
        MeshGenerator.generate(&before, &other, Kind::Listener, VIRTUAL_INBOUND),
        MeshGenerator.generate(&after, &other, Kind::Listener, VIRTUAL_INBOUND),
        "what the other namespace is not regenerated for is indeed the same"
    );
    // Two meshes built apart never share a generation.
    let apart = snap(&Arc::new(MeshInput::new(m.clone())));
    assert_ne!(generation(&before, &other), generation(&apart, &other));

    // Scaling a service whose Service gives the target port by number
    // changes no proxy's inbound side (its pods' port is known without
    // their endpoints); with a named target port it may.
    let host = "reviews.bookinfo.svc.cluster.local";
    let reviews = class("bookinfo", &[("app", "reviews"), ("version", "v1")]);
    let mut scaled = (*m).clone();
    let svc = Arc::make_mut(scaled.services.get_mut(host).unwrap());
    assert!(svc.ports.iter().all(|p| p.target_port.is_some()), "{:?}", svc.ports);
    svc.endpoints.retain(|e| e.labels.get("version").map(String::as_str) != Some("v1"));
    assert_eq!(touched(&scaled), vec![]);
    assert_eq!(inbound_ports(&m, &reviews), inbound_ports(&scaled, &reviews), "the Service's port, endpoint or not");
    // A named target port that resolves to 9999 on the pods.
    let mut named = (*m).clone();
    let svc = Arc::make_mut(named.services.get_mut(host).unwrap());
    svc.ports.iter_mut().for_each(|p| p.target_port = None);
    svc.endpoints.iter_mut().for_each(|e| e.port = 9999);
    let mut named_scaled = named.clone();
    let svc = Arc::make_mut(named_scaled.services.get_mut(host).unwrap());
    svc.endpoints.retain(|e| e.labels.get("version").map(String::as_str) != Some("v1"));
    let named_input = MeshInput::after(&old, Arc::new(named.clone()));
    let step = MeshInput::after(&named_input, Arc::new(named_scaled.clone())).changes.touched();
    assert_eq!(step, vec![(Dep::Workloads, Some(Arc::from("bookinfo")))]);
    assert_eq!(inbound_ports(&named, &reviews)[0].port, 9999);
    assert_ne!(inbound_ports(&named_scaled, &reviews)[0].port, 9999, "v1's pod is not in the endpoints any more");
}

#[test]
fn authorization_policy_becomes_rbac_on_the_inbound_chain() {
    use istiod_proto::envoy::config::listener::v3::filter::ConfigType;
    use istiod_proto::envoy::config::rbac::v3::rbac::Action;
    use istiod_proto::envoy::extensions::filters::http::rbac::v3::Rbac as HttpRbac;
    use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3::{
        HttpConnectionManager, http_filter,
    };

    let m = bookinfo();
    let l = virtual_inbound(&m, &class("bookinfo", &[("app", "details"), ("version", "v1")]));
    // The HCM is the port chain's last network filter (metadata exchange first).
    let chain = l.filter_chains.iter().find(|c| c.name == "0.0.0.0_9080").expect("the port's chain");
    let Some(ConfigType::TypedConfig(a)) = &chain.filters.last().unwrap().config_type else { panic!() };
    let manager = HttpConnectionManager::decode(a.value.as_slice()).unwrap();
    let names: Vec<&str> = manager.http_filters.iter().map(|f| f.name.as_str()).collect();
    // istiod's inbound order (listener_builder.go; listener_test.go):
    // metadata exchange, authorization, gRPC stats, fault, CORS, router.
    assert_eq!(
        names,
        vec![
            "istio.metadata_exchange",
            "envoy.filters.http.rbac",
            "envoy.filters.http.grpc_stats",
            "envoy.filters.http.fault",
            "envoy.filters.http.cors",
            "envoy.filters.http.router"
        ]
    );
    let Some(http_filter::ConfigType::TypedConfig(a)) = &manager.http_filters[1].config_type else { panic!() };
    let rules = HttpRbac::decode(a.value.as_slice()).unwrap().rules.unwrap();
    assert_eq!(rules.action, Action::Allow as i32);
    let policy = &rules.policies["ns[bookinfo]-policy[details-allow-productpage-get]-rule[0]"];
    let text = format!("{policy:?}");
    assert!(text.contains("spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage"), "{text}");
    assert!(text.contains(":method") && text.contains("GET"), "{text}");
    // reviews is not selected by that policy: no RBAC filter.
    let l = virtual_inbound(&m, &class("bookinfo", &[("app", "reviews")]));
    let chain = l.filter_chains.iter().find(|c| c.name == "0.0.0.0_9080").expect("the port's chain");
    let Some(ConfigType::TypedConfig(a)) = &chain.filters.last().unwrap().config_type else { panic!() };
    let manager = HttpConnectionManager::decode(a.value.as_slice()).unwrap();
    assert!(!manager.http_filters.iter().any(|f| f.name == "envoy.filters.http.rbac"));
}

#[test]
fn scoped_proxies_get_only_what_their_sidecar_lets_them_see() {
    // Bookinfo plus a service in another namespace: bookinfo's Sidecar
    // (`./*`, `istio-system/*`) hides it from bookinfo's proxies.
    let mut model = (*bookinfo()).clone();
    let mut other = (*model.services["reviews.bookinfo.svc.cluster.local"]).clone();
    other.hostname = "reviews.other.svc.cluster.local".into();
    other.namespace = "other".into();
    other.vips = vec!["10.96.99.99".into()];
    model.services.insert(other.hostname.clone(), Arc::new(other));
    let mut db = (*model.services["mongodb.bookinfo.svc.cluster.local"]).clone();
    db.hostname = "mongodb.other.svc.cluster.local".into();
    db.namespace = "other".into();
    db.vips = vec!["10.96.99.98".into()];
    model.services.insert(db.hostname.clone(), Arc::new(db));
    let model = Arc::new(model);
    let snap = snapshot(&model);

    let hidden = "outbound|9080||reviews.other.svc.cluster.local";
    let bookinfo_proxy = class("bookinfo", &[("app", "productpage")]);
    let other_proxy = class("other", &[("app", "x")]);
    let cds = |c: &ProxyClass| MeshGenerator.wildcard_names(&snap, c, Kind::Cluster);
    assert!(cds(&other_proxy).iter().any(|n| &**n == hidden));
    assert!(!cds(&bookinfo_proxy).iter().any(|n| &**n == hidden));
    assert!(cds(&bookinfo_proxy).iter().any(|n| &**n == "outbound|9080||reviews.bookinfo.svc.cluster.local"));
    assert_eq!(MeshGenerator.input_generation(&snap, &bookinfo_proxy, Kind::Endpoint, hidden), None);
    assert!(MeshGenerator.generate(&snap, &other_proxy, Kind::Endpoint, hidden).is_some());
    // The TCP/VIP listener and the virtual host follow.
    let lds = |c: &ProxyClass| MeshGenerator.wildcard_names(&snap, c, Kind::Listener);
    assert!(lds(&other_proxy).iter().any(|n| &**n == "10.96.99.98_27017"));
    assert!(!lds(&bookinfo_proxy).iter().any(|n| &**n == "10.96.99.98_27017"));
    assert!(lds(&bookinfo_proxy).iter().any(|n| n.ends_with("_27017")), "bookinfo's own mongodb stays");
    let vhosts = |c: &ProxyClass| {
        let b = MeshGenerator.generate(&snap, c, Kind::Route, "9080").unwrap();
        let rc = route::RouteConfiguration::decode(b).unwrap();
        rc.virtual_hosts.into_iter().map(|v| v.name).collect::<Vec<_>>()
    };
    assert!(vhosts(&other_proxy).contains(&"reviews.other.svc.cluster.local:9080".to_owned()));
    let mine = vhosts(&bookinfo_proxy);
    assert!(!mine.contains(&"reviews.other.svc.cluster.local:9080".to_owned()), "{mine:?}");
    assert!(mine.contains(&"reviews.bookinfo.svc.cluster.local:9080".to_owned()), "{mine:?}");
    assert_ne!(
        MeshGenerator.input_generation(&snap, &bookinfo_proxy, Kind::Route, "9080"),
        snap.shared_generation(Kind::Route, "9080"),
        "a scoped route configuration's generation covers the scope"
    );
}

#[test]
fn source_label_matches_reach_only_the_proxies_they_name() {
    let mut model = (*bookinfo()).clone();
    for o in istio_objects(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a-details, namespace: bookinfo}\n\
         spec:\n  hosts: [details]\n  http:\n  - name: from-productpage\n    match: [{sourceLabels: {app: productpage}}]\n\
         \x20   route: [{destination: {host: details, subset: v1}}]\n  - name: from-elsewhere\n\
         \x20   match: [{sourceNamespace: other}]\n    route: [{destination: {host: details}}]\n  - name: rest\n\
         \x20   route: [{destination: {host: details}}]\n",
    ) {
        model.routing.insert(0, o);
    }
    let model = Arc::new(model);
    let snap = snapshot(&model);
    assert!(mesh(&snap).unwrap().source_matching);
    let details_routes = |c: &ProxyClass| {
        let rc =
            route::RouteConfiguration::decode(MeshGenerator.generate(&snap, c, Kind::Route, "9080").unwrap()).unwrap();
        let vh = rc.virtual_hosts.into_iter().find(|v| v.name.starts_with("details.")).unwrap();
        assert!(vh.routes.iter().all(|r| r.metadata.is_none()), "the selector never reaches a proxy");
        vh.routes.into_iter().map(|r| r.name).collect::<Vec<_>>()
    };
    // A source match alone matches every request of the proxies it names:
    // istiod's BuildHTTPRoutesForVirtualService stops there
    // (IsCatchAllRoute), so those proxies get no later route.
    assert_eq!(details_routes(&class("bookinfo", &[("app", "productpage")])), ["from-productpage"]);
    assert_eq!(details_routes(&class("bookinfo", &[("app", "reviews")])), ["rest"]);
    assert_eq!(details_routes(&class("other", &[("app", "productpage")])), ["from-productpage"]);
    assert_eq!(details_routes(&class("other", &[("app", "ratings")])), ["from-elsewhere"]);
}

#[test]
fn proxyless_grpc_clients_get_certificate_provider_tls_and_no_auto_mtls() {
    use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;
    let model = bookinfo();
    let snap = snapshot(&model);
    let mut grpc = class("bookinfo", &[("app", "productpage")]);
    grpc.generator = "grpc".into();
    let envoy = class("bookinfo", &[("app", "productpage")]);
    let cluster = |c: &ProxyClass, name: &str| {
        Cluster::decode(MeshGenerator.generate(&snap, c, Kind::Cluster, name).unwrap()).unwrap()
    };

    // Auto mTLS (details: no DestinationRule TLS) is for Envoy only.
    let details = "outbound|9080||details.bookinfo.svc.cluster.local";
    assert!(!cluster(&envoy, details).transport_socket_matches.is_empty());
    let g = cluster(&grpc, details);
    assert!(g.transport_socket_matches.is_empty() && g.transport_socket.is_none());

    // ISTIO_MUTUAL by DestinationRule (reviews): certificate providers, not SDS.
    let reviews = "outbound|9080|v1|reviews.bookinfo.svc.cluster.local";
    let ts = cluster(&grpc, reviews).transport_socket.expect("ISTIO_MUTUAL");
    assert_eq!(ts.name, "envoy.transport_sockets.tls");
    let Some(core::transport_socket::ConfigType::TypedConfig(a)) = ts.config_type else { panic!() };
    let ctx = tls::UpstreamTlsContext::decode(a.value.as_slice()).unwrap().common_tls_context.unwrap();
    assert!(ctx.tls_certificate_sds_secret_configs.is_empty());
    assert_eq!(ctx.tls_certificate_provider_instance.as_ref().unwrap().instance_name, "default");
    assert_eq!(ctx.tls_certificate_certificate_provider_instance.as_ref().unwrap().certificate_name, "default");
    let Some(tls::common_tls_context::ValidationContextType::CombinedValidationContext(v)) =
        ctx.validation_context_type
    else {
        panic!("combined validation context")
    };
    assert_eq!(v.validation_context_certificate_provider_instance.unwrap().certificate_name, "ROOTCA");
    assert_eq!(
        v.default_validation_context.unwrap().ca_certificate_provider_instance.unwrap().certificate_name,
        "ROOTCA"
    );
    // Envoy still gets SDS.
    assert!(cluster(&envoy, reviews).transport_socket.is_some());
}

#[test]
fn auto_mtls_sends_plaintext_to_services_known_to_disable_mtls() {
    let details = Arc::<str>::from("outbound|9080||details.bookinfo.svc.cluster.local");
    let matches = |m: &Model| {
        let c = served(&Arc::new(m.clone()), &class("bookinfo", &[("app", "productpage")]), Kind::Cluster, &details);
        !Cluster::decode(c.unwrap()).unwrap().transport_socket_matches.is_empty()
    };
    assert!(matches(&bookinfo()), "mesh-wide STRICT: auto mTLS by endpoint label");
    let ns_disable = with_security(
        &bookinfo(),
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: ns, namespace: bookinfo}\nspec: {mtls: {mode: DISABLE}}\n",
    );
    assert_eq!(
        service_mtls_mode(&ns_disable, &ns_disable.services["details.bookinfo.svc.cluster.local"], 9080),
        Some(MtlsMode::Disable)
    );
    assert!(!matches(&ns_disable), "the namespace disables mTLS: plaintext");
    let mixed = with_security(
        &ns_disable,
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: w, namespace: bookinfo}\n\
         spec: {selector: {matchLabels: {app: details}}, mtls: {mode: STRICT}}\n",
    );
    assert!(matches(&mixed), "a workload-level policy makes the mode unknown: back to endpoint labels");
}

#[test]
fn a_sidecar_outbound_traffic_policy_overrides_the_mesh_for_its_proxies() {
    use istiod_proto::envoy::extensions::filters::network::tcp_proxy::v3::{TcpProxy, tcp_proxy};
    let mut model = (*bookinfo()).clone();
    Arc::make_mut(&mut model.sidecars).extend(istio_objects(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: locked, namespace: bookinfo}\n\
         spec: {workloadSelector: {labels: {app: ratings}}, outboundTrafficPolicy: {mode: REGISTRY_ONLY}}\n",
    ));
    let model = Arc::new(model);
    let snap = snapshot(&model);
    let catchall = |c: &ProxyClass| {
        let l = Listener::decode(MeshGenerator.generate(&snap, c, Kind::Listener, "virtualOutbound").unwrap()).unwrap();
        let chain = l.filter_chains.iter().find(|c| c.name == "virtualOutbound-catchall-tcp").unwrap();
        let Some(filter::ConfigType::TypedConfig(a)) = chain.filters.last().unwrap().config_type.clone() else {
            panic!()
        };
        match TcpProxy::decode(a.value.as_slice()).unwrap().cluster_specifier {
            Some(tcp_proxy::ClusterSpecifier::Cluster(c)) => c,
            other => panic!("{other:?}"),
        }
    };
    let fallback = |c: &ProxyClass| {
        let rc =
            route::RouteConfiguration::decode(MeshGenerator.generate(&snap, c, Kind::Route, "9080").unwrap()).unwrap();
        rc.virtual_hosts.last().unwrap().name.clone()
    };
    let ratings = class("bookinfo", &[("app", "ratings")]);
    let reviews = class("bookinfo", &[("app", "reviews")]);
    assert_eq!(catchall(&ratings), "BlackHoleCluster");
    assert_eq!(fallback(&ratings), "block_all");
    assert_eq!(catchall(&reviews), "PassthroughCluster", "the mesh default (ALLOW_ANY)");
    assert_eq!(fallback(&reviews), "allow_any");
    assert_ne!(
        MeshGenerator.input_generation(&snap, &ratings, Kind::Listener, "virtualOutbound"),
        snap.shared_generation(Kind::Listener, "virtualOutbound"),
    );
}

#[test]
fn locality_failover_orders_endpoints_by_the_proxys_locality() {
    use istiod_proto::envoy::config::endpoint::v3::ClusterLoadAssignment;
    let mut model = (*bookinfo()).clone();
    for o in istio_objects(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: a-reviews, namespace: bookinfo}\n\
         spec: {host: reviews, trafficPolicy: {outlierDetection: {consecutive5xxErrors: 5, interval: 10s}}}\n",
    ) {
        model.routing.insert(0, o);
    }
    let model = Arc::new(model);
    let snap = snapshot(&model);
    let name = "outbound|9080||reviews.bookinfo.svc.cluster.local";
    let priorities = |c: &ProxyClass| {
        let cla =
            ClusterLoadAssignment::decode(MeshGenerator.generate(&snap, c, Kind::Endpoint, name).unwrap()).unwrap();
        let mut v: Vec<(String, u32)> =
            cla.endpoints.iter().map(|e| (e.locality.clone().unwrap_or_default().zone, e.priority)).collect();
        v.sort();
        v
    };
    // (worker-b's pods have no subzone; us-east1-c's only reviews pod is
    // terminating, which is not sent.)
    let mut local = class("bookinfo", &[("app", "productpage")]);
    local.locality = "us-east1/us-east1-b".into();
    let nowhere = class("bookinfo", &[("app", "productpage")]);
    assert_eq!(priorities(&local), [("us-east1-b".to_owned(), 0), ("us-east1-d".to_owned(), 1)]);
    assert!(priorities(&nowhere).iter().all(|(_, p)| *p == 0), "no locality: the shared endpoints");
    assert_ne!(
        MeshGenerator.input_generation(&snap, &local, Kind::Endpoint, name),
        MeshGenerator.input_generation(&snap, &nowhere, Kind::Endpoint, name),
    );
    // Without outlier detection (ratings) nothing changes.
    let ratings = "outbound|9080||ratings.bookinfo.svc.cluster.local";
    assert_eq!(
        MeshGenerator.generate(&snap, &local, Kind::Endpoint, ratings),
        MeshGenerator.generate(&snap, &nowhere, Kind::Endpoint, ratings)
    );
}

#[test]
fn a_virtual_service_exported_to_its_namespace_routes_only_there() {
    let mut model = (*bookinfo()).clone();
    for o in istio_objects(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a-details, namespace: bookinfo}\n\
         spec: {hosts: [details], exportTo: [\".\"], http: [{name: local-only, route: [{destination: {host: details, subset: v1}}]}]}\n",
    ) {
        model.routing.insert(0, o);
    }
    let model = Arc::new(model);
    let snap = snapshot(&model);
    assert!(mesh(&snap).unwrap().vs_export);
    let details_routes = |c: &ProxyClass, name: &str| {
        let rc =
            route::RouteConfiguration::decode(MeshGenerator.generate(&snap, c, Kind::Route, name).unwrap()).unwrap();
        let vh = rc.virtual_hosts.into_iter().find(|v| v.name.starts_with("details.")).unwrap();
        assert!(vh.routes.iter().all(|r| r.metadata.is_none()), "the marker never reaches a proxy");
        vh.routes.into_iter().map(|r| r.name).collect::<Vec<_>>()
    };
    let inside = class("bookinfo", &[("app", "productpage")]);
    let outside = class("other", &[("app", "x")]);
    assert_eq!(details_routes(&inside, "9080"), ["local-only"]);
    // Elsewhere the public `details` VirtualService (its route is
    // unnamed) is the one istiod's VirtualServicesForGateway finds.
    assert_eq!(details_routes(&outside, "9080"), [""]);
    // Proxyless gRPC route configurations too.
    let mut grpc = outside.clone();
    grpc.generator = "grpc".into();
    let grpc_name = "outbound|9080||details.bookinfo.svc.cluster.local";
    assert_eq!(details_routes(&grpc, grpc_name), [""]);
    let mut grpc_inside = inside.clone();
    grpc_inside.generator = "grpc".into();
    assert_eq!(details_routes(&grpc_inside, grpc_name), ["local-only"]);
}

#[test]
fn a_destination_rule_exported_to_its_namespace_shapes_clusters_only_there() {
    let mut model = (*bookinfo()).clone();
    // reviews' DestinationRule (ISTIO_MUTUAL, LEAST_REQUEST, subsets v1-v3)
    // becomes private to bookinfo.
    for o in model.routing.iter_mut() {
        if let IstioSpec::DestinationRule(dr) = &mut o.spec
            && dr.host == "reviews"
        {
            dr.export_to = vec![".".into()];
        }
    }
    model.reindex();
    let model = Arc::new(model);
    let snap = snapshot(&model);
    let inside = class("bookinfo", &[("app", "productpage")]);
    let outside = class("other", &[("app", "x")]);
    let default = "outbound|9080||reviews.bookinfo.svc.cluster.local";
    let v1 = "outbound|9080|v1|reviews.bookinfo.svc.cluster.local";
    let cds = |c: &ProxyClass| MeshGenerator.wildcard_names(&snap, c, Kind::Cluster);
    assert!(cds(&inside).iter().any(|n| &**n == v1));
    assert!(!cds(&outside).iter().any(|n| &**n == v1), "subsets of a rule not exported here");
    assert!(cds(&outside).iter().any(|n| &**n == default));
    assert!(MeshGenerator.generate(&snap, &outside, Kind::Endpoint, v1).is_none());
    assert_eq!(MeshGenerator.input_generation(&snap, &outside, Kind::Endpoint, v1), None);
    // (LEAST_REQUEST is istiod's default too: the rule's TLS tells.)
    let tls = |c: &ProxyClass| {
        Cluster::decode(MeshGenerator.generate(&snap, c, Kind::Cluster, default).unwrap()).unwrap().transport_socket
    };
    assert!(tls(&inside).is_some(), "the rule applies in bookinfo");
    assert!(tls(&outside).is_none(), "and not elsewhere");
}

/// Issue #11: which DestinationRule applies when several name a host is
/// istiod's (pilot/pkg/model/push_context.go `destinationRule`): the
/// client's namespace, then the service's, then the root namespace.
#[test]
fn the_clients_own_destination_rule_wins_over_the_services() {
    let mut model = (*bookinfo()).clone();
    model.routing.extend(istio_objects(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews-from-web, namespace: web}\n\
         spec:\n  host: reviews.bookinfo.svc.cluster.local\n  trafficPolicy: {loadBalancer: {simple: RANDOM}}\n\
         \x20 subsets: [{name: canary, labels: {version: v3}}]\n",
    ));
    model.routing.sort_by(|a, b| (a.meta.ns(), &a.meta.name).cmp(&(b.meta.ns(), &b.meta.name)));
    model.reindex();
    let model = Arc::new(model);
    let snap = snapshot(&model);
    let web = class("web", &[("app", "web")]);
    let bookinfo_client = class("bookinfo", &[("app", "productpage")]);
    let elsewhere = class("other", &[("app", "x")]);
    let default = "outbound|9080||reviews.bookinfo.svc.cluster.local";
    let lb = |c: &ProxyClass| {
        Cluster::decode(MeshGenerator.generate(&snap, c, Kind::Cluster, default).unwrap()).unwrap().lb_policy
    };
    assert_eq!(lb(&web), cluster::LbPolicy::Random as i32, "web's own rule");
    assert_eq!(lb(&bookinfo_client), cluster::LbPolicy::LeastRequest as i32, "the service namespace's rule");
    assert_eq!(lb(&elsewhere), cluster::LbPolicy::LeastRequest as i32, "exported everywhere");
    let cds = |c: &ProxyClass| MeshGenerator.wildcard_names(&snap, c, Kind::Cluster);
    let canary = "outbound|9080|canary|reviews.bookinfo.svc.cluster.local";
    let v1 = "outbound|9080|v1|reviews.bookinfo.svc.cluster.local";
    assert!(cds(&web).iter().any(|n| &**n == canary) && !cds(&web).iter().any(|n| &**n == v1));
    assert!(cds(&elsewhere).iter().any(|n| &**n == v1) && !cds(&elsewhere).iter().any(|n| &**n == canary));
    let cla =
        ClusterLoadAssignment::decode(MeshGenerator.generate(&snap, &web, Kind::Endpoint, canary).unwrap()).unwrap();
    assert_eq!(cla.endpoints.iter().map(|l| l.lb_endpoints.len()).sum::<usize>(), 1, "reviews-v3 only");
}

#[test]
fn proxies_that_differ_only_in_labels_share_outbound_resources() {
    use istiod_xds::ads::cache::Cache;
    let model = bookinfo();
    let snap = snapshot(&model);
    let (productpage, reviews) = (
        Arc::new(class("bookinfo", &[("app", "productpage"), ("version", "v1")])),
        Arc::new(class("bookinfo", &[("app", "reviews"), ("version", "v2")])),
    );
    let mut cache = Cache::default();
    let route: Arc<str> = "9080".into();
    let a = cache.get(&MeshGenerator, &snap, &productpage, Kind::Route, &route).unwrap();
    let misses = cache.misses;
    let b = cache.get(&MeshGenerator, &snap, &reviews, Kind::Route, &route).unwrap();
    assert_eq!((cache.misses, a.any), (misses, b.any), "one generation serves both");
    // Their inbound resources stay their own.
    let inbound: Arc<str> = VIRTUAL_INBOUND.into();
    let misses = cache.misses;
    cache.get(&MeshGenerator, &snap, &productpage, Kind::Listener, &inbound).unwrap();
    cache.get(&MeshGenerator, &snap, &reviews, Kind::Listener, &inbound).unwrap();
    assert_eq!(cache.misses, misses + 2, "generated for each class");
    // Wildcard names: the shared part plus each class's inbound clusters,
    // the same as the generator gives for the whole class.
    for c in [&productpage, &reviews] {
        let names = cache.wildcard_names(&MeshGenerator, &snap, c, Kind::Cluster);
        assert_eq!(&*names, &*MeshGenerator.wildcard_names(&snap, c, Kind::Cluster));
        assert!(names.iter().any(|n| n.starts_with("inbound|")));
    }

    // A Sidecar that selects reviews by label: their scopes differ now.
    let mut m = (*model).clone();
    Arc::make_mut(&mut m.sidecars).extend(istio_objects(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: reviews, namespace: bookinfo}\n\
         spec: {workloadSelector: {labels: {app: reviews}}, egress: [{hosts: [\"./ratings.bookinfo.svc.cluster.local\"]}]}\n",
    ));
    let snap = snapshot(&Arc::new(m));
    let mut cache = Cache::default();
    let a = cache.get(&MeshGenerator, &snap, &productpage, Kind::Route, &route).unwrap();
    let misses = cache.misses;
    let b = cache.get(&MeshGenerator, &snap, &reviews, Kind::Route, &route).unwrap();
    assert_eq!(cache.misses, misses + 1, "generated for reviews' own scope");
    assert_ne!(a.any, b.any);
}

/// The replicas of a Deployment (one namespace, one set of labels; their
/// own addresses, pod names, locality, service account and proxy version)
/// share one build of their inbound listener and clusters, each of them
/// byte for byte what is generated for the replica's whole class. What an
/// EnvoyFilter matches of the proxy (a metadata key, `proxyVersion`) and
/// `HTTP10` keep them apart.
#[test]
fn replicas_share_their_inbound_resources_unless_a_filter_or_http10_tells_them_apart() {
    use istiod_xds::ads::cache::Cache;
    let service = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n\
        spec: {clusterIP: 10.0.0.1, selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}]}\n";
    let filter = |matching: &str| {
        format!(
            "---\napiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {{name: f, namespace: shop}}\n\
             spec: {{configPatches: [{{applyTo: LISTENER, match: {{context: SIDECAR_INBOUND, proxy: {matching}}}, \
             patch: {{operation: MERGE, value: {{per_connection_buffer_limit_bytes: 4096}}}}}}]}}\n"
        )
    };
    let replica = |n: u8, version: &str, team: &str, http10: bool| {
        let ip: Arc<str> = format!("10.1.0.{n}").into();
        let mut metadata: Vec<(Arc<str>, Arc<str>)> = vec![
            ("INSTANCE_IPS".into(), ip.clone()),
            ("TEAM".into(), team.into()),
            ("WORKLOAD_NAME".into(), format!("web-{n}").into()),
        ];
        if http10 {
            metadata.insert(0, ("HTTP10".into(), "1".into()));
        }
        Arc::new(ProxyClass {
            ips: vec![ip],
            locality: format!("region/zone-{n}").into(),
            service_account: format!("web-{n}").into(),
            version: version.into(),
            metadata,
            ..class("shop", &[("app", "web")])
        })
    };
    let names: [Arc<str>; 2] = [VIRTUAL_INBOUND.into(), "inbound|8080||".into()];
    let a = replica(1, "1.24.0", "blue", false);
    // (name, the mesh, the second replica, whether one build serves both)
    let cases = [
        ("replicas", String::new(), replica(2, "1.25.0", "red", false), true),
        ("a metadata key matched", filter("{metadata: {TEAM: blue}}"), replica(2, "1.24.0", "red", false), false),
        ("a version matched", filter("{proxyVersion: '^1\\.24.*'}"), replica(2, "1.25.0", "blue", false), false),
        ("HTTP10", String::new(), replica(2, "1.24.0", "blue", true), false),
    ];
    for (case, extra, b, shared) in cases {
        let model = Arc::new(crate::testing::model_in("", &format!("{service}{extra}")));
        let snap = snapshot(&model);
        let mut cache = Cache::default();
        for (kind, name) in [(Kind::Listener, &names[0]), (Kind::Cluster, &names[1])] {
            let misses = cache.misses;
            let x = cache.get(&MeshGenerator, &snap, &a, kind, name).expect("served");
            let y = cache.get(&MeshGenerator, &snap, &b, kind, name).expect("served");
            let builds = if shared { 1 } else { 2 };
            assert_eq!(cache.misses, misses + builds, "{case}: {name} built {builds} time(s)");
            for (c, got) in [(&a, &x), (&b, &y)] {
                let whole = MeshGenerator.generate(&snap, c, kind, name).expect("generated");
                assert!(got.any.ends_with(&whole), "{case}: {name} as generated for the replica's whole class");
            }
            // The listener tells the cases apart (a patch, HTTP/1.0); the
            // filters patch no cluster.
            if kind == Kind::Listener {
                assert_eq!(x.any == y.any, shared, "{case}: {name}");
            }
        }
    }
}

/// `Model::services_in`, the namespaces' index of services, through the
/// service fast path: it is built, then a ServiceEntry's host moves to
/// another namespace (as many services as before), then a Service is
/// added; in each model every namespace's services are those a walk of
/// all of them finds, in the same order.
#[test]
fn the_namespaces_index_of_services_follows_the_service_fast_path() {
    use istiod_config::manifest::{Object, ObjectRef};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let mut before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let entry = |ns: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: ext, namespace: {ns}}}\n\
             spec: {{hosts: [api.example.com], ports: [{{number: 443, name: tls, protocol: TLS}}], resolution: DNS}}\n"
        )
    };
    add(&mut before, &entry("bookinfo"));
    let settings = Arc::new(crate::meshconfig::MeshSettings::default());
    let mut old = crate::update::build(&before, "cluster.local", &settings);
    let agrees = |m: &Model| {
        for ns in ["bookinfo", "other", "default"] {
            let indexed: Vec<&str> = m.services_in(ns).map(|s| &*s.hostname).collect();
            let walked: Vec<&str> = m.services.values().filter(|s| s.namespace == ns).map(|s| &*s.hostname).collect();
            assert_eq!(indexed, walked, "{ns}");
        }
    };
    agrees(&old.model);
    let mut objects = before.clone();
    type Edit = Box<dyn Fn(&mut istiod_config::objects::Objects) -> Vec<ObjectRef>>;
    let edits: [(Edit, usize); 2] = [
        (
            Box::new(move |o| {
                let i = o.istio.iter().position(|x| x.meta.name == "ext").unwrap();
                let mut refs = vec![ObjectRef::of(&Object::Istio(o.istio.remove(i)))];
                refs.extend(add(o, &entry("other")));
                refs
            }),
            0,
        ),
        (
            Box::new(|o| {
                add(
                    o,
                    "apiVersion: v1\nkind: Service\nmetadata: {name: mongo, namespace: bookinfo}\n\
                     spec: {clusterIP: 10.96.99.1, ports: [{name: tcp-mongo, port: 27017}], selector: {app: mongo}}\n",
                )
            }),
            1,
        ),
    ];
    for (edit, grown) in edits {
        let refs = edit(&mut objects);
        let (fast, incremental) =
            crate::update::update(Some(&old), &objects, Some(&refs), "cluster.local", &settings, &Arc::default());
        assert!(incremental, "only a ServiceEntry or a Service changed");
        assert_eq!(fast.model.services.len(), old.model.services.len() + grown);
        agrees(&fast.model);
        old = fast;
    }
    assert!(old.model.services_in("other").any(|s| &*s.hostname == "api.example.com"));
}

/// A Sidecar ingress listener whose `defaultEndpoint` is the workload's
/// own address (`[::]:<port>`, as `0.0.0.0:<port>`): each replica's
/// inbound cluster is sent to its own address, not to the first one's.
#[test]
fn replicas_whose_ingress_names_their_own_address_keep_their_own_clusters() {
    use istiod_proto::envoy::config::core::v3::address::Address;
    use istiod_proto::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
    use istiod_xds::ads::cache::Cache;
    for (ip, endpoint) in [("fd00::", "[::]:8080"), ("10.1.0.", "0.0.0.0:8080")] {
        let yaml = format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: shop}}\n\
             spec: {{clusterIP: 10.0.0.1, selector: {{app: web}}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: web, namespace: shop}}\n\
             spec: {{workloadSelector: {{labels: {{app: web}}}}, ingress: [{{port: {{number: 8080, protocol: HTTP, name: http}}, \
             bind: '::', defaultEndpoint: '{endpoint}'}}]}}\n"
        );
        let snap = snapshot(&Arc::new(crate::testing::model_in("", &yaml)));
        let mut cache = Cache::default();
        let name: Arc<str> = "inbound|8080||".into();
        for n in 1..=2 {
            let own: Arc<str> = format!("{ip}{n}").into();
            let replica = Arc::new(ProxyClass {
                ips: vec![own.clone()],
                metadata: vec![("INSTANCE_IPS".into(), own.clone())],
                ..class("shop", &[("app", "web")])
            });
            let e = cache.get(&MeshGenerator, &snap, &replica, Kind::Cluster, &name).expect("served");
            let any = istiod_proto::prost_types::Any::decode(e.any).unwrap();
            let c = Cluster::decode(any.value.as_slice()).unwrap();
            let cla = c.load_assignment.expect("static");
            let lb = &cla.endpoints[0].lb_endpoints[0];
            let Some(HostIdentifier::Endpoint(ep)) = &lb.host_identifier else { panic!("{lb:?}") };
            let Some(Address::SocketAddress(a)) = ep.address.as_ref().and_then(|a| a.address.as_ref()) else {
                panic!("{ep:?}")
            };
            assert_eq!(a.address, *own, "{endpoint}: replica {n} sends to its own address");
        }
    }
}

/// A wildcard's own names of a replica (its inbound clusters, what an
/// EnvoyFilter adds for the metadata it matches) are those the generator
/// gives its whole class, though replicas that reduce alike share them.
#[test]
fn replicas_own_wildcard_names_are_each_replicas() {
    use istiod_xds::ads::cache::Cache;
    let yaml = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n\
        spec: {clusterIP: 10.0.0.1, selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}, {name: http-admin, port: 81, targetPort: 9000}]}\n---\n\
        apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: f, namespace: shop}\n\
        spec: {configPatches: [{applyTo: CLUSTER, match: {context: SIDECAR_OUTBOUND, proxy: {metadata: {TEAM: blue}}}, \
        patch: {operation: ADD, value: {name: added-blue, type: STATIC, connect_timeout: 1s}}}]}\n";
    let snap = snapshot(&Arc::new(crate::testing::model_in("", yaml)));
    let replica = |n: u8, team: &str| {
        let ip: Arc<str> = format!("10.1.0.{n}").into();
        Arc::new(ProxyClass {
            ips: vec![ip.clone()],
            locality: format!("region/zone-{n}").into(),
            metadata: vec![("INSTANCE_IPS".into(), ip), ("TEAM".into(), team.into())],
            ..class("shop", &[("app", "web")])
        })
    };
    let mut cache = Cache::default();
    for (r, added) in [(replica(1, "blue"), true), (replica(2, "red"), false), (replica(3, "blue"), true)] {
        for kind in [Kind::Cluster, Kind::Listener] {
            let mut got = cache.wildcard_names(&MeshGenerator, &snap, &r, kind).to_vec();
            let mut want = MeshGenerator.wildcard_names(&snap, &r, kind);
            got.sort();
            want.sort();
            assert_eq!(got, want, "{kind:?} of {:?}", r.ips);
            if kind == Kind::Cluster {
                assert!(got.iter().any(|n| &**n == "inbound|9000||"));
                assert_eq!(got.iter().any(|n| &**n == "added-blue"), added, "{:?}", r.metadata);
            }
        }
    }
}

/// Replicas that capture DNS are served an allocated address's listener;
/// one that does not is not, and an EnvoyFilter's ADD of a listener of
/// that name is its own: each replica's LDS names are the generator's
/// for its whole class, each name once, whatever replica asked first.
#[test]
fn replicas_that_capture_dns_and_one_that_does_not_each_get_their_own_listener_names() {
    use istiod_xds::ads::cache::Cache;
    let yaml = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: api, namespace: shop}\n\
        spec: {hosts: [api.example.com], ports: [{number: 443, name: tls, protocol: TLS}], resolution: DNS}\n\
        status: {addresses: [{host: api.example.com, value: 240.240.0.7}]}\n---\n\
        apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: f, namespace: shop}\n\
        spec: {configPatches: [{applyTo: LISTENER, match: {context: SIDECAR_OUTBOUND}, \
        patch: {operation: ADD, value: {name: 240.240.0.7_443, address: {socket_address: {address: 240.240.0.7, port_value: 443}}}}}]}\n";
    let model = Arc::new(crate::testing::model_in("", yaml));
    assert!(!crate::translate::listener::auto_listeners(&model).is_empty(), "an allocated address's listener");
    let snap = snapshot(&model);
    let replica = |n: u8, capture: bool| {
        let ip: Arc<str> = format!("10.1.0.{n}").into();
        let mut metadata: Vec<(Arc<str>, Arc<str>)> = vec![("INSTANCE_IPS".into(), ip.clone())];
        if capture {
            metadata.insert(0, ("DNS_CAPTURE".into(), "true".into()));
        }
        Arc::new(ProxyClass { ips: vec![ip], metadata, ..class("shop", &[("app", "web")]) })
    };
    let mut cache = Cache::default();
    for r in [replica(1, true), replica(2, false), replica(3, true), replica(4, false)] {
        // (The listener is served to the replicas that capture DNS: what
        // the EnvoyFilter's ADD of its name is left out of.)
        let shared = MeshGenerator.shared_wildcard_names(&snap, &r, Kind::Listener);
        let capture = r.metadata.iter().any(|(k, _)| &**k == "DNS_CAPTURE");
        assert_eq!(shared.iter().any(|n| &**n == "240.240.0.7_443"), capture, "{:?}", r.metadata);
        let got = cache.wildcard_names(&MeshGenerator, &snap, &r, Kind::Listener).to_vec();
        let mut want = MeshGenerator.wildcard_names(&snap, &r, Kind::Listener);
        let mut sorted = got.clone();
        sorted.sort();
        want.sort();
        assert_eq!(sorted, want, "{:?}", r.metadata);
        let n = got.iter().filter(|n| &***n == "240.240.0.7_443").count();
        assert_eq!(n, 1, "the listener once, to {:?}: {got:?}", r.metadata);
    }
}

/// Two builds serve the same bytes to two classes for every name.
/// The mesh a full rebuild makes of `after`, following `old`.
fn rebuilt(
    old: &Arc<MeshInput>,
    after: &istiod_config::objects::Objects,
    settings: &Arc<crate::meshconfig::MeshSettings>,
) -> Arc<MeshInput> {
    let (full, incremental) = crate::update::update(Some(old), after, None, "cluster.local", settings, &Arc::default());
    assert!(!incremental, "not knowing what changed rebuilds");
    full
}

/// A snapshot serving `m` from scratch.
fn snap(m: &Arc<MeshInput>) -> Snapshot<MeshInput> {
    let changes = crate::translate::diff(&istiod_xds_api::snapshot::SimpleModel::default(), &m.translation.resources);
    let model = istiod_xds_api::snapshot::SimpleModel::default().apply(1, changes).0;
    let mut s = Snapshot::new(1, std::time::Instant::now(), Arc::new(model));
    s.mesh = Some(m.clone());
    s
}

fn serves_alike(a: &Arc<MeshInput>, b: &Arc<MeshInput>) {
    let (x, y) = (snap(a), snap(b));
    for c in [class("bookinfo", &[("app", "productpage")]), class("other", &[("app", "x")])] {
        for (kind, name) in b.translation.resources.keys() {
            assert_eq!(
                MeshGenerator.generate(&x, &c, *kind, name),
                MeshGenerator.generate(&y, &c, *kind, name),
                "{name}"
            );
        }
    }
}

/// The endpoint fast path (`MeshInput::with_endpoints`) serves exactly what
/// a full rebuild serves: every resource name, every class's bytes and the
/// inbound fingerprint.
#[test]
fn an_endpoint_change_updated_in_place_equals_a_rebuild() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let settings = Arc::new(crate::meshconfig::MeshSettings::default());
    let old = crate::update::build(&before, "cluster.local", &settings);
    use istiod_config::manifest::{Object, ObjectRef};
    type Edit = fn(&mut istiod_config::objects::Objects) -> Vec<ObjectRef>;
    let slice_ref = |s: &istiod_config::objects::EndpointSlice| ObjectRef::of(&Object::EndpointSlice(s.clone()));
    let edits: [Edit; 4] = [
        // reviews loses an endpoint; details' only slice goes away; a
        // ratings endpoint names no Pod (joined by its address) and one
        // names a Pod that does not exist (the address again).
        |o| {
            let s = o.endpoint_slices.iter_mut().find(|s| s.service_name() == Some("reviews")).unwrap();
            s.endpoints.pop();
            vec![ObjectRef::of(&Object::EndpointSlice(s.clone()))]
        },
        |o| {
            let s = o.endpoint_slices.iter_mut().find(|s| s.service_name() == Some("ratings")).unwrap();
            s.endpoints[0].target_ref = None;
            s.endpoints[0].conditions.ready = Some(false);
            vec![ObjectRef::of(&Object::EndpointSlice(s.clone()))]
        },
        |o| {
            let s = o.endpoint_slices.iter_mut().find(|s| s.service_name() == Some("ratings")).unwrap();
            s.endpoints[0].target_ref.as_mut().unwrap().name = "gone".into();
            s.endpoints[0].conditions.ready = Some(false);
            vec![ObjectRef::of(&Object::EndpointSlice(s.clone()))]
        },
        |o| {
            let i = o.endpoint_slices.iter().position(|s| s.service_name() == Some("details")).unwrap();
            vec![ObjectRef::of(&Object::EndpointSlice(o.endpoint_slices.remove(i)))]
        },
    ];
    for edit in edits {
        let mut after = before.clone();
        let refs = edit(&mut after);
        let (fast, incremental) =
            crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
        assert!(incremental, "only EndpointSlices changed");
        let full = rebuilt(&old, &after, &settings);
        assert_eq!(fast.model.services, full.model.services, "the endpoints joined with the same Pods");
        assert_eq!(fast.translation.resources, full.translation.resources);
        assert_eq!(fast.changes.touched(), full.changes.touched());
        assert_ne!(fast.translation.resources, old.translation.resources, "the edit shows");
        serves_alike(&fast, &full);
    }
    // Anything else, or not knowing what changed, rebuilds.
    let node = ObjectRef { kind: "Node".into(), namespace: String::new(), name: "worker-a".into(), service: None };
    let refs = [node, slice_ref(&before.endpoint_slices[0])];
    let other = before.clone();
    assert!(!crate::update::update(Some(&old), &other, Some(&refs), "cluster.local", &settings, &Arc::default()).1);
    assert!(!crate::update::update(Some(&old), &before, None, "cluster.local", &settings, &Arc::default()).1);
}

/// The service fast path (`MeshInput::with_services`) serves what a full
/// rebuild serves when Services and ServiceEntries come, go or change
/// shape: an HTTP port added to reviews (a new port listener and route
/// table), details deleted, a TCP Service added (its `<VIP>_<port>`
/// listener), productpage's address changed, an external TLS host without
/// address (an SNI listener), and an HTTP ServiceEntry shadowed by a
/// Kubernetes Service of the same name (the Service wins, as in istiod).
#[test]
fn a_service_change_updated_in_place_equals_a_rebuild() {
    use istiod_config::manifest::{Object, ObjectRef};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let settings = Arc::new(crate::meshconfig::MeshSettings::default());
    let old = crate::update::build(&before, "cluster.local", &settings);
    fn service<'a>(o: &'a mut istiod_config::objects::Objects, name: &str) -> &'a mut istiod_config::objects::Service {
        o.services.iter_mut().find(|s| s.metadata.name == name).unwrap()
    }
    type Edit = fn(&mut istiod_config::objects::Objects) -> Vec<ObjectRef>;
    let edits: [Edit; 6] = [
        |o| {
            let s = service(o, "reviews");
            let mut p = s.spec.ports[0].clone();
            (p.port, p.name) = (9081, Some("http-admin".into()));
            s.spec.ports.push(p);
            vec![ObjectRef::of(&Object::Service(s.clone()))]
        },
        |o| {
            let i = o.services.iter().position(|s| s.metadata.name == "details").unwrap();
            vec![ObjectRef::of(&Object::Service(o.services.remove(i)))]
        },
        |o| {
            add(
                o,
                "apiVersion: v1\nkind: Service\nmetadata: {name: mongo, namespace: bookinfo}\n\
                 spec: {clusterIP: 10.96.99.1, ports: [{name: tcp-mongo, port: 27017}], selector: {app: mongo}}\n",
            )
        },
        |o| {
            let s = service(o, "productpage");
            s.spec.cluster_ip = Some("10.96.10.99".into());
            s.spec.cluster_ips = vec!["10.96.10.99".into()];
            vec![ObjectRef::of(&Object::Service(s.clone()))]
        },
        |o| {
            add(
                o,
                "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: ext, namespace: bookinfo}\n\
                 spec: {hosts: [api.example.com, api.example.org], ports: [{number: 443, name: tls, protocol: TLS}], resolution: DNS, location: MESH_EXTERNAL}\n",
            )
        },
        |o| {
            add(
                o,
                "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: shadow, namespace: bookinfo}\n\
                 spec: {hosts: [ratings.bookinfo.svc.cluster.local, web.example.com], addresses: [240.0.0.7], ports: [{number: 8000, name: http, protocol: HTTP}], resolution: STATIC, endpoints: [{address: 10.1.1.1}]}\n",
            )
        },
    ];
    let expected = [
        "0.0.0.0_9081",
        "outbound|9080||details.bookinfo.svc.cluster.local",
        "10.96.99.1_27017",
        "",
        "0.0.0.0_443",
        "0.0.0.0_8000",
    ];
    for (edit, name) in edits.into_iter().zip(expected) {
        let mut after = before.clone();
        let refs = edit(&mut after);
        let (fast, incremental) =
            crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
        assert!(incremental, "only Services and ServiceEntries changed");
        // The name each edit adds or removes (`ratings` stays the
        // Service's: the models are compared below). A new address of an
        // HTTP service shows in its virtual host's digest.
        let has = |m: &MeshInput| m.translation.resources.keys().any(|(_, n)| &**n == name);
        if name.is_empty() {
            let route = |m: &MeshInput| m.translation.resources.get(&(Kind::Route, Arc::from("9080"))).cloned();
            assert_ne!(route(&fast), route(&old));
        } else {
            assert_ne!(has(&fast), has(&old), "{name}");
        }
        let full = rebuilt(&old, &after, &settings);
        assert_eq!(fast.model.services, full.model.services);
        assert_eq!(fast.translation.resources, full.translation.resources);
        assert_eq!(fast.translation.routes, full.translation.routes);
        assert_eq!(fast.translation.api_listeners, full.translation.api_listeners);
        assert_eq!(fast.translation.by_host, full.translation.by_host);
        assert_eq!(fast.changes.touched(), full.changes.touched());
        assert_ne!(fast.translation.resources, old.translation.resources, "the edit shows");
        serves_alike(&fast, &full);
    }
}

/// The Pod fast path (`MeshInput::with_pods`) serves what a full rebuild
/// serves: a pod's labels change (its endpoints' labels and so the subsets
/// it is in), a pod's sidecar goes away (tlsMode), a pod is deleted.
#[test]
fn a_pod_change_updated_in_place_equals_a_rebuild() {
    use istiod_config::manifest::{Object, ObjectRef};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let settings = Arc::new(crate::meshconfig::MeshSettings::default());
    let old = crate::update::build(&before, "cluster.local", &settings);
    type Edit = fn(&mut istiod_config::objects::Objects) -> Vec<ObjectRef>;
    fn pod<'a>(o: &'a mut istiod_config::objects::Objects, prefix: &str) -> &'a mut istiod_config::objects::Pod {
        o.pods.iter_mut().find(|p| p.metadata.name.starts_with(prefix)).unwrap()
    }
    let edits: [Edit; 3] = [
        |o| {
            let p = pod(o, "reviews-v1");
            p.metadata.labels.insert("version".into(), "v3".into());
            vec![ObjectRef::of(&Object::Pod(p.clone()))]
        },
        |o| {
            let p = pod(o, "ratings");
            p.metadata.labels.remove("security.istio.io/tlsMode");
            vec![ObjectRef::of(&Object::Pod(p.clone()))]
        },
        |o| {
            let i = o.pods.iter().position(|p| p.metadata.name.starts_with("details")).unwrap();
            vec![ObjectRef::of(&Object::Pod(o.pods.remove(i)))]
        },
    ];
    for edit in edits {
        let mut after = before.clone();
        let refs = edit(&mut after);
        let (fast, incremental) =
            crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
        assert!(incremental, "only Pods changed");
        let full = rebuilt(&old, &after, &settings);
        assert_eq!(fast.model.services, full.model.services);
        assert_eq!(fast.translation.resources, full.translation.resources);
        assert_eq!(fast.changes.touched(), full.changes.touched());
        assert_ne!(fast.model.services, old.model.services, "the edit shows");
        serves_alike(&fast, &full);
    }
}

/// The routing fast path (`MeshInput::with_routing`) serves exactly what a
/// full rebuild serves: DestinationRules changed, added (also a wildcard
/// one) and deleted; a VirtualService's weight shifted, one deleted, one
/// added for a host that had none (inventory).
#[test]
fn a_routing_change_updated_in_place_equals_a_rebuild() {
    use istiod_config::manifest::{Object, ObjectRef};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let settings = Arc::new(crate::meshconfig::MeshSettings::default());
    let old = crate::update::build(&before, "cluster.local", &settings);
    type Edit = fn(&mut istiod_config::objects::Objects) -> Vec<ObjectRef>;
    let edits: [Edit; 7] = [
        // Only who sees a rule changes (exportTo): no form's bytes change,
        // but proxies elsewhere move to another form.
        |o| {
            let dr =
                o.istio.iter_mut().find(|x| x.meta.name == "reviews" && x.kind().name() == "DestinationRule").unwrap();
            if let IstioSpec::DestinationRule(d) = &mut dr.spec {
                d.export_to = vec![".".into()];
            }
            vec![ObjectRef::of(&Object::Istio(dr.clone()))]
        },
        // DestinationRules: a policy changed, one added in the client's
        // namespace for a host (and a wildcard one), one deleted.
        |o| {
            let dr =
                o.istio.iter_mut().find(|x| x.meta.name == "reviews" && x.kind().name() == "DestinationRule").unwrap();
            if let IstioSpec::DestinationRule(d) = &mut dr.spec {
                d.subsets.pop();
            }
            vec![ObjectRef::of(&Object::Istio(dr.clone()))]
        },
        |o| {
            let added = istio_objects(
                "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: from-other, namespace: other}\n\
                 spec: {host: reviews.bookinfo.svc.cluster.local, subsets: [{name: canary, labels: {version: v3}}]}\n---\n\
                 apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: all, namespace: other}\n\
                 spec: {host: '*.bookinfo.svc.cluster.local', trafficPolicy: {loadBalancer: {simple: RANDOM}}}\n",
            );
            o.istio.extend(added.clone());
            added.iter().map(|a| ObjectRef::of(&Object::Istio(a.clone()))).collect()
        },
        |o| {
            let i =
                o.istio.iter().position(|x| x.meta.name == "ratings" && x.kind().name() == "DestinationRule").unwrap();
            vec![ObjectRef::of(&Object::Istio(o.istio.remove(i)))]
        },
        |o| {
            let vs =
                o.istio.iter_mut().find(|x| x.meta.name == "reviews" && x.kind().name() == "VirtualService").unwrap();
            if let IstioSpec::VirtualService(v) = &mut vs.spec {
                let r = &mut v.http.last_mut().unwrap().route;
                r[0].weight -= 10;
                r[1].weight += 10;
            }
            vec![ObjectRef::of(&Object::Istio(vs.clone()))]
        },
        |o| {
            let i =
                o.istio.iter().position(|x| x.meta.name == "details" && x.kind().name() == "VirtualService").unwrap();
            vec![ObjectRef::of(&Object::Istio(o.istio.remove(i)))]
        },
        |o| {
            let added = istio_objects(
                "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: inventory, namespace: bookinfo}\n\
                 spec: {hosts: [inventory], http: [{timeout: 3s, route: [{destination: {host: inventory}}]}]}\n",
            );
            o.istio.extend(added.clone());
            vec![ObjectRef::of(&Object::Istio(added[0].clone()))]
        },
    ];
    for edit in edits {
        let mut after = before.clone();
        let refs = edit(&mut after);
        let (fast, incremental) =
            crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
        assert!(incremental, "only VirtualServices and DestinationRules changed");
        let full = rebuilt(&old, &after, &settings);
        assert_eq!(fast.translation.resources, full.translation.resources);
        assert_ne!(fast.translation.resources, old.translation.resources, "the edit shows");
        assert_eq!((fast.source_matching, fast.vs_export), (full.source_matching, full.vs_export));
        assert_eq!(
            (fast.changes.touched(), fast.selecting_sidecars),
            (full.changes.touched(), full.selecting_sidecars)
        );
        serves_alike(&fast, &full);
    }
}

/// A VirtualService read beyond its services' virtual hosts (a wildcard
/// host, a host that is no service: istiod's BuildSidecarVirtualHostWrapper
/// gives those hosts virtual hosts of their own, per proxy) is applied by a
/// full rebuild, and what is served shows it: the wildcard claims the
/// services it covers, the unknown host gets a virtual host on route 80.
#[test]
fn a_wildcard_or_unknown_host_virtual_service_is_rebuilt_whole() {
    use istiod_config::manifest::{Object, ObjectRef};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let settings = Arc::new(crate::meshconfig::MeshSettings::default());
    let old = crate::update::build(&before, "cluster.local", &settings);
    let mut after = before.clone();
    let added = istio_objects(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: wild, namespace: bookinfo}\n\
         spec: {hosts: ['*.bookinfo.svc.cluster.local', api.example.com], http: [{name: wild, route: [{destination: {host: ratings}}]}]}\n",
    );
    after.istio.extend(added.clone());
    let refs = vec![ObjectRef::of(&Object::Istio(added[0].clone()))];
    let (next, incremental) =
        crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
    assert!(!incremental, "rebuilt whole");
    let snap = snapshot(&next.model);
    let who = class("bookinfo", &[("app", "productpage")]);
    let names = |table: &str, host: &str| -> Vec<String> {
        let rc = route::RouteConfiguration::decode(MeshGenerator.generate(&snap, &who, Kind::Route, table).unwrap())
            .unwrap();
        let vh = rc.virtual_hosts.iter().find(|v| v.name == host);
        vh.map(|v| v.routes.iter().map(|r| r.name.clone()).collect()).unwrap_or_default()
    };
    // inventory has no VirtualService of its own: the wildcard's; details
    // keeps its own (an exact host wins over a wildcard).
    assert_eq!(names("7070", "inventory.bookinfo.svc.cluster.local:7070"), ["wild"]);
    assert_eq!(names("9080", "details.bookinfo.svc.cluster.local:9080"), [""]);
    // The host that is no service rides on the ports of the services the
    // VirtualService claims.
    assert_eq!(names("7070", "api.example.com:7070"), ["wild"]);
}

/// httproute.go: `*.`-prefixed domains are for headless Kubernetes
/// services only; a ServiceEntry with resolution NONE does not claim the
/// names under its host (they would bypass REGISTRY_ONLY's block_all).
#[test]
fn only_headless_kubernetes_services_get_wildcard_domains() {
    use crate::translate::route::{Flavor, domains};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let mut objs = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    objs.istio.extend(istio_objects(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: ext, namespace: bookinfo}\n\
         spec: {hosts: [example.com], location: MESH_INTERNAL, resolution: NONE, ports: [{number: 80, name: http, protocol: HTTP}]}\n",
    ));
    let svc = |yaml: &str| -> istiod_config::objects::Service { serde_yaml_ng::from_str(yaml).unwrap() };
    objs.services.push(svc(
        "metadata: {name: db, namespace: bookinfo}\nspec: {clusterIP: None, ports: [{name: http, port: 80}]}\n",
    ));
    let m = Model::build(&objs, "cluster.local");
    let of = |host: &str| domains(&m, &m.services[host], 80, "bookinfo", Flavor::Envoy);
    assert!(
        of("db.bookinfo.svc.cluster.local").contains(&"*.db".to_owned()),
        "{:?}",
        of("db.bookinfo.svc.cluster.local")
    );
    assert!(!of("example.com").iter().any(|d| d.starts_with('*')), "{:?}", of("example.com"));
}

/// What a change of inbound inputs marks touched covers a Service's
/// numeric target port before any endpoint carries it (a workload takes it
/// as its inbound port), so delta clients learn of `inbound|<port>||`.
#[test]
fn touched_inbound_names_include_numeric_target_ports() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let mut objs = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let svc: istiod_config::objects::Service = serde_yaml_ng::from_str(
        "metadata: {name: fresh, namespace: bookinfo}\nspec: {clusterIP: 10.96.30.1, selector: {app: fresh}, ports: [{name: http, port: 80, targetPort: 8123}]}\n",
    )
    .unwrap();
    objs.services.push(svc);
    let names = all_names(&Model::build(&objs, "cluster.local"));
    assert!(names.iter().any(|(k, n)| *k == Kind::Cluster && &**n == "inbound|8123||"), "{names:?}");
}

/// The security fast path (`MeshInput::with_security`) serves what a full
/// rebuild serves, inbound listeners included: an AuthorizationPolicy
/// added, a namespace PeerAuthentication relaxing the mesh's STRICT, the
/// RequestAuthentication
/// deleted.
#[test]
fn a_security_change_updated_in_place_equals_a_rebuild() {
    use istiod_config::manifest::{Object, ObjectRef};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let settings = Arc::new(crate::meshconfig::MeshSettings::default());
    let old = crate::update::build(&before, "cluster.local", &settings);
    type Edit = fn(&mut istiod_config::objects::Objects) -> Vec<ObjectRef>;
    let edits: [Edit; 5] = [
        |o| {
            let added = istio_objects(
                "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: off, namespace: bookinfo}\n\
                 spec: {mtls: {mode: DISABLE}}\n",
            );
            o.istio.extend(added.clone());
            vec![ObjectRef::of(&Object::Istio(added[0].clone()))]
        },
        |o| {
            // The mesh-wide policy (the root namespace's) turns DISABLE.
            let off = istio_objects(
                "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: istio-system}\n\
                 spec: {mtls: {mode: DISABLE}}\n",
            );
            let i = o.istio.iter().position(|x| x.meta.name == "default" && x.kind().name() == "PeerAuthentication");
            o.istio[i.unwrap()] = off[0].clone();
            vec![ObjectRef::of(&Object::Istio(off[0].clone()))]
        },
        |o| {
            let added = istio_objects(
                "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: deny-admin, namespace: bookinfo}\n\
                 spec: {selector: {matchLabels: {app: productpage}}, action: DENY, rules: [{to: [{operation: {paths: [/admin]}}]}]}\n",
            );
            o.istio.extend(added.clone());
            vec![ObjectRef::of(&Object::Istio(added[0].clone()))]
        },
        |o| {
            let added = istio_objects(
                "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: permissive, namespace: bookinfo}\n\
                 spec: {mtls: {mode: PERMISSIVE}}\n",
            );
            o.istio.extend(added.clone());
            vec![ObjectRef::of(&Object::Istio(added[0].clone()))]
        },
        |o| {
            let i = o.istio.iter().position(|x| x.kind().name() == "RequestAuthentication").unwrap();
            vec![ObjectRef::of(&Object::Istio(o.istio.remove(i)))]
        },
    ];
    let inbound = |m: &Arc<MeshInput>, c: &ProxyClass| {
        let mut s = Snapshot::new(1, std::time::Instant::now(), Arc::default());
        s.mesh = Some(m.clone());
        MeshGenerator.generate(&s, c, Kind::Listener, VIRTUAL_INBOUND)
    };
    let productpage = class("bookinfo", &[("app", "productpage"), ("version", "v1")]);
    for edit in edits {
        let mut after = before.clone();
        let refs = edit(&mut after);
        let (fast, incremental) =
            crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
        assert!(incremental, "only security policies changed");
        let full = rebuilt(&old, &after, &settings);
        assert_eq!(fast.translation.resources, full.translation.resources);
        assert_eq!(fast.changes.touched(), full.changes.touched());
        assert!(fast.changes.touched().iter().all(|(d, _)| *d == Dep::Security), "{:?}", fast.changes.touched());
        assert_ne!(fast.inbound_generation(), old.inbound_generation(), "the inbound generation moves");
        // (A PeerAuthentication DISABLE shows in the clients' clusters: no
        // auto mTLS to those workloads.)
        let shows = |m: &Arc<MeshInput>| {
            inbound(m, &productpage) != inbound(&old, &productpage)
                || m.translation.resources != old.translation.resources
        };
        assert!(shows(&full), "the edit shows in a rebuild");
        assert!(shows(&fast), "the edit shows");
        for c in [productpage.clone(), class("bookinfo", &[("app", "reviews")]), class("other", &[("app", "x")])] {
            assert_eq!(inbound(&fast, &c), inbound(&full, &c));
        }
        serves_alike(&fast, &full);
    }
}

/// The Sidecar fast path (`MeshInput::with_sidecars`) serves what a full
/// rebuild serves: the namespace's Sidecar deleted (every service visible
/// again), one selecting reviews with REGISTRY_ONLY and a narrower egress
/// added, and one in another namespace added.
#[test]
fn a_sidecar_change_updated_in_place_equals_a_rebuild() {
    use istiod_config::manifest::{Object, ObjectRef};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let settings = Arc::new(crate::meshconfig::MeshSettings::default());
    let old = crate::update::build(&before, "cluster.local", &settings);
    type Edit = fn(&mut istiod_config::objects::Objects) -> Vec<ObjectRef>;
    let edits: [Edit; 3] = [
        |o| {
            let i = o.istio.iter().position(|x| x.kind().name() == "Sidecar").unwrap();
            vec![ObjectRef::of(&Object::Istio(o.istio.remove(i)))]
        },
        |o| {
            let added = istio_objects(
                "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: reviews, namespace: bookinfo}\n\
                 spec: {workloadSelector: {labels: {app: reviews}}, egress: [{hosts: [\"./ratings.bookinfo.svc.cluster.local\"]}], outboundTrafficPolicy: {mode: REGISTRY_ONLY}}\n",
            );
            o.istio.extend(added.clone());
            vec![ObjectRef::of(&Object::Istio(added[0].clone()))]
        },
        |o| {
            let added = istio_objects(
                "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: other}\n\
                 spec: {egress: [{hosts: [\"bookinfo/details.bookinfo.svc.cluster.local\"]}]}\n",
            );
            o.istio.extend(added.clone());
            vec![ObjectRef::of(&Object::Istio(added[0].clone()))]
        },
    ];
    let classes = [
        class("bookinfo", &[("app", "productpage"), ("version", "v1")]),
        class("bookinfo", &[("app", "reviews"), ("version", "v2")]),
        class("other", &[("app", "x")]),
    ];
    let snap = |m: &Arc<MeshInput>| {
        let changes =
            crate::translate::diff(&istiod_xds_api::snapshot::SimpleModel::default(), &m.translation.resources);
        let model = istiod_xds_api::snapshot::SimpleModel::default().apply(1, changes).0;
        let mut s = Snapshot::new(1, std::time::Instant::now(), Arc::new(model));
        s.mesh = Some(m.clone());
        s
    };
    for (i, edit) in edits.into_iter().enumerate() {
        let mut after = before.clone();
        let refs = edit(&mut after);
        let (fast, incremental) =
            crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
        assert!(incremental, "only Sidecars changed");
        let full = rebuilt(&old, &after, &settings);
        assert_eq!(fast.translation.resources, full.translation.resources);
        assert_eq!(
            (fast.changes.touched(), fast.outbound_overrides, fast.selecting_sidecars),
            (full.changes.touched(), full.outbound_overrides, full.selecting_sidecars)
        );
        assert_ne!(fast.scope_generation(), old.scope_generation(), "the edit shows");
        assert!(fast.changes.touched().iter().all(|(d, _)| *d == Dep::Sidecar), "{:?}", fast.changes.touched());
        let (f, r, o) = (snap(&fast), snap(&full), snap(&old));
        let mut differs = false;
        for c in &classes {
            for kind in [Kind::Cluster, Kind::Listener] {
                let names = MeshGenerator.wildcard_names(&f, c, kind);
                assert_eq!(names, MeshGenerator.wildcard_names(&r, c, kind), "{kind:?} names of {c:?}");
                differs |= names != MeshGenerator.wildcard_names(&o, c, kind);
                for n in &names {
                    assert_eq!(MeshGenerator.generate(&f, c, kind, n), MeshGenerator.generate(&r, c, kind, n), "{n}");
                }
            }
            for (kind, name) in full.translation.resources.keys() {
                assert_eq!(MeshGenerator.generate(&f, c, *kind, name), MeshGenerator.generate(&r, c, *kind, name));
            }
        }
        // (Deleting bookinfo's Sidecar shows no new name: every service of
        // the example is in bookinfo already.)
        assert!(differs || i == 0, "some proxy sees another set of names");
    }
}

/// A mixed change (a Helm install brings Services, Pods, EndpointSlices,
/// DestinationRules and VirtualServices together; issue #40) is applied in
/// place group by group and serves what a full rebuild serves: an app
/// installed whole (its VirtualService names a host only the same change
/// brings); an app's routes, endpoints, namespace policy and the Sidecar
/// edited at once; an app uninstalled whole; a Service replaced by another
/// that takes over its VirtualService. A mix with a kind no group covers (a
/// Node) rebuilds.
#[test]
fn a_mixed_change_updated_in_place_equals_a_rebuild() {
    use istiod_config::manifest::{Object, ObjectRef};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let settings = Arc::new(crate::meshconfig::MeshSettings::default());
    let old = crate::update::build(&before, "cluster.local", &settings);
    fn istio(o: &istiod_config::objects::Objects, kind: &str, name: &str) -> usize {
        o.istio.iter().position(|x| x.meta.name == name && x.kind().name() == kind).unwrap()
    }
    type Edit = fn(&mut istiod_config::objects::Objects) -> Vec<ObjectRef>;
    let edits: [Edit; 4] = [
        |o| {
            add(
                o,
                "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: bookinfo}\n\
                 spec: {clusterIP: 10.96.99.2, ports: [{name: http, port: 8080}], selector: {app: web}}\n\
                 ---\napiVersion: v1\nkind: Pod\nmetadata: {name: web-v1-0, namespace: bookinfo, \
                 labels: {app: web, version: v1, security.istio.io/tlsMode: istio}}\n\
                 spec: {nodeName: worker-b, serviceAccountName: web}\nstatus: {podIP: 10.244.9.1}\n\
                 ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: bookinfo, \
                 labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nports: [{name: http, port: 8080}]\n\
                 endpoints: [{addresses: [10.244.9.1], conditions: {ready: true}, \
                 targetRef: {kind: Pod, name: web-v1-0, namespace: bookinfo}}]\n\
                 ---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: web, namespace: bookinfo}\n\
                 spec: {host: web, subsets: [{name: v1, labels: {version: v1}}]}\n\
                 ---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: web, namespace: bookinfo}\n\
                 spec: {hosts: [web], http: [{route: [{destination: {host: web, subset: v1}}]}]}\n",
            )
        },
        |o| {
            let mut refs = Vec::new();
            let vs = o.istio.remove(istio(o, "VirtualService", "reviews"));
            refs.push(ObjectRef::of(&Object::Istio(vs)));
            refs.extend(add(
                o,
                "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews, namespace: bookinfo}\n\
                 spec: {hosts: [reviews], http: [{route: [{destination: {host: reviews, subset: v3}}]}]}\n\
                 ---\napiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: off, namespace: bookinfo}\n\
                 spec: {mtls: {mode: DISABLE}}\n",
            ));
            let s = o.endpoint_slices.iter_mut().find(|s| s.service_name() == Some("reviews")).unwrap();
            s.endpoints.pop();
            refs.push(ObjectRef::of(&Object::EndpointSlice(s.clone())));
            let sidecar = o.istio.remove(istio(o, "Sidecar", "default"));
            refs.push(ObjectRef::of(&Object::Istio(sidecar)));
            refs
        },
        |o| {
            let mut refs = Vec::new();
            let i = o.services.iter().position(|s| s.metadata.name == "ratings").unwrap();
            refs.push(ObjectRef::of(&Object::Service(o.services.remove(i))));
            while let Some(i) = o.endpoint_slices.iter().position(|s| s.service_name() == Some("ratings")) {
                refs.push(ObjectRef::of(&Object::EndpointSlice(o.endpoint_slices.remove(i))));
            }
            while let Some(i) = o.pods.iter().position(|p| p.metadata.name.starts_with("ratings-")) {
                refs.push(ObjectRef::of(&Object::Pod(o.pods.remove(i))));
            }
            for kind in ["DestinationRule", "VirtualService"] {
                refs.push(ObjectRef::of(&Object::Istio(o.istio.remove(istio(o, kind, "ratings")))));
            }
            refs
        },
        // details is replaced by web2, its VirtualService moved over: on
        // the way (services first), the VirtualService names a host that
        // is no service, which every route table reads.
        |o| {
            let i = o.services.iter().position(|s| s.metadata.name == "details").unwrap();
            let mut refs = vec![ObjectRef::of(&Object::Service(o.services.remove(i)))];
            o.istio.remove(istio(o, "VirtualService", "details"));
            refs.extend(add(
                o,
                "apiVersion: v1\nkind: Service\nmetadata: {name: web2, namespace: bookinfo}\n\
                 spec: {clusterIP: 10.96.99.3, ports: [{name: http, port: 9080}], selector: {app: details}}\n\
                 ---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: details, namespace: bookinfo}\n\
                 spec: {hosts: [web2], http: [{route: [{destination: {host: web2}}]}]}\n",
            ));
            refs
        },
    ];
    for (k, edit) in edits.into_iter().enumerate() {
        let mut after = before.clone();
        let refs = edit(&mut after);
        let (fast, incremental) =
            crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
        assert!(incremental, "edit {k}: every kind has its group");
        let full = rebuilt(&old, &after, &settings);
        assert_eq!(fast.model.services, full.model.services, "edit {k}");
        assert_eq!(fast.model.routing, full.model.routing, "edit {k}");
        assert_eq!(fast.model.security, full.model.security, "edit {k}");
        assert_eq!(fast.model.sidecars, full.model.sidecars, "edit {k}");
        let (a, b) = (&fast.translation.resources, &full.translation.resources);
        let differ: Vec<_> = a.keys().chain(b.keys()).filter(|n| a.get(*n) != b.get(*n)).collect();
        assert!(differ.is_empty(), "edit {k}: {differ:?}");
        assert_eq!(fast.translation.routes, full.translation.routes, "edit {k}");
        assert_eq!(fast.translation.api_listeners, full.translation.api_listeners, "edit {k}");
        assert_eq!(fast.translation.by_host, full.translation.by_host, "edit {k}");
        assert_eq!(fast.changes.touched(), full.changes.touched(), "edit {k}");
        assert_ne!(fast.translation.resources, old.translation.resources, "edit {k} shows");
        serves_alike(&fast, &full);
    }
    // A Node with the rest: rebuilt.
    let mut after = before.clone();
    let vs = after.istio.remove(istio(&after, "VirtualService", "reviews"));
    let node = ObjectRef { kind: "Node".into(), namespace: String::new(), name: "worker-b".into(), service: None };
    let refs = [ObjectRef::of(&Object::Istio(vs)), node];
    let (_, incremental) =
        crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
    assert!(!incremental, "a Node is in no group");
}

/// The checks before a debug request over xDS is forwarded (statusgen.go,
/// debuggen.go): authentication, one name, the root namespace for all but
/// config_dump/edsz/ndsz, and a caller whose node names no namespace sees
/// nothing.
#[test]
fn debug_over_xds_checks_the_caller() {
    use istiod_xds_api::Code;
    let refused = |u: UnknownType| match u {
        UnknownType::Refuse(code, _) => Some(code),
        _ => None,
    };
    let mut nameless = crate::testing::class("", &[]);
    nameless.verified = true;
    assert_eq!(refused(debug_access(None, &nameless, "istio.io/debug/syncz", &[])), Some(Code::PermissionDenied));
    let mut c = crate::testing::class("bookinfo", &[]);
    assert_eq!(refused(debug_access(None, &c, "istio.io/debug/syncz", &[])), Some(Code::Unauthenticated));
    c.verified = true;
    assert_eq!(debug_access(None, &c, "istio.io/debug/syncz", &[]), UnknownType::Forward);
    assert_eq!(debug_access(None, &c, "istio.io/debug/cachez", &[]), UnknownType::Empty);
    let one = |n: &str| vec![n.to_owned()];
    assert_eq!(refused(debug_access(None, &c, "istio.io/debug", &one("adsz"))), Some(Code::PermissionDenied));
    assert_eq!(debug_access(None, &c, "istio.io/debug", &one("config_dump?proxyID=a.bookinfo")), UnknownType::Forward);
    assert_eq!(refused(debug_access(None, &c, "istio.io/debug", &[])), Some(Code::InvalidArgument));
    let root = crate::testing::class("istio-system", &[]);
    let root = ProxyClass { verified: true, ..root };
    assert_eq!(debug_access(None, &root, "istio.io/debug", &one("adsz")), UnknownType::Forward);
}

/// A tracing provider's collector Service that appears later: the fast
/// path re-translates every outbound listener (their tracer points at the
/// collector), as a rebuild does, not only the collector's own.
#[test]
fn a_collector_service_added_in_place_equals_a_rebuild() {
    use istiod_config::manifest::{Object, ObjectRef, parse_file};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let settings = Arc::new(
        crate::meshconfig::MeshSettings::parse(
            "extensionProviders:\n- name: zipkin\n  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}\n\
             defaultProviders:\n  tracing: [zipkin]\n",
        )
        .unwrap(),
    );
    let old = crate::update::build(&before, "cluster.local", &settings);
    let mut after = before.clone();
    let doc = parse_file(
        "apiVersion: v1\nkind: Service\nmetadata: {name: zipkin, namespace: istio-system}\n\
         spec: {clusterIP: 10.96.0.9, ports: [{name: http-query, port: 9411}]}\n",
    )
    .docs
    .remove(0)
    .unwrap()
    .unwrap();
    let refs = vec![ObjectRef::of(&doc)];
    let Object::Service(s) = doc else { panic!() };
    after.services.push(s);
    let (fast, incremental) =
        crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
    assert!(incremental);
    let listener = |m: &MeshInput| m.translation.resources.get(&(Kind::Listener, Arc::from("0.0.0.0_9080"))).cloned();
    assert_ne!(listener(&fast), listener(&old), "the bookinfo port's listener now traces to zipkin");
    let full = rebuilt(&old, &after, &settings);
    assert_eq!(fast.translation.resources, full.translation.resources);
    assert_eq!(fast.translation.routes, full.translation.routes);
}

/// An ExternalName Service naming a service of the mesh is its alias
/// (istiod's `Attributes.Aliases`, `generateVirtualHostDomains`): the
/// concrete service's virtual host answers to the alias's names too; one
/// naming a host outside the mesh aliases nothing.
#[test]
fn an_external_name_service_of_the_mesh_is_an_alias() {
    use crate::translate::route::{Flavor, domains};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let mut objs = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let svc = |yaml: &str| -> istiod_config::objects::Service { serde_yaml_ng::from_str(yaml).unwrap() };
    objs.services.push(svc(
        "metadata: {name: info, namespace: bookinfo}\n\
         spec: {type: ExternalName, externalName: details.bookinfo.svc.cluster.local, ports: [{name: http, port: 8000}]}\n",
    ));
    objs.services.push(svc(
        "metadata: {name: web, namespace: bookinfo}\nspec: {type: ExternalName, externalName: example.com, ports: [{name: http, port: 8000}]}\n",
    ));
    let m = Model::build(&objs, "cluster.local");
    let d = domains(&m, &m.services["details.bookinfo.svc.cluster.local"], 9080, "bookinfo", Flavor::Envoy);
    for name in ["info.bookinfo.svc.cluster.local", "info", "info.bookinfo"] {
        assert!(d.contains(&name.to_owned()), "{name} in {d:?}");
    }
    assert_eq!(m.aliases.len(), 1, "example.com is no service of the mesh");
    // The alias itself gets no cluster, listener or virtual host.
    let t = crate::translate::translate(&m);
    let names: Vec<&str> = t.resources.keys().map(|(_, n)| &**n).collect();
    assert!(!names.iter().any(|n| n.contains("info.bookinfo")), "{names:?}");
    assert!(names.contains(&"outbound|8000||web.bookinfo.svc.cluster.local"), "not an alias: {names:?}");
}

/// The EnvoyFilter fast path (`MeshInput::with_filters_and_extensions`) serves what
/// a full rebuild serves: a filter added, changed and removed, each an
/// incremental update, every class's bytes the same as after a rebuild.
#[test]
fn an_envoy_filter_change_updated_in_place_equals_a_rebuild() {
    use istiod_config::manifest::{Object, ObjectRef, parse_file};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let settings = Arc::new(crate::meshconfig::MeshSettings::default());
    let filter = |timeout: &str| {
        let yaml = format!(
            "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {{name: t, namespace: bookinfo}}\n\
             spec: {{configPatches: [{{applyTo: CLUSTER, match: {{context: SIDECAR_OUTBOUND}}, \
             patch: {{operation: MERGE, value: {{connect_timeout: {timeout}}}}}}}]}}\n"
        );
        parse_file(&yaml).docs.into_iter().next().unwrap().unwrap().unwrap()
    };
    let with = |o: &istiod_config::objects::Objects, f: Option<Object>| {
        let mut o = o.clone();
        o.istio.retain(|x| x.meta.name != "t");
        if let Some(Object::Istio(x)) = f {
            o.istio.push(x);
        }
        o
    };
    let mut old = crate::update::build(&before, "cluster.local", &settings);
    for step in [Some(filter("2s")), Some(filter("3s")), None] {
        let refs = vec![ObjectRef::of(&filter("1s"))];
        let after = with(&before, step);
        let (fast, incremental) =
            crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
        assert!(incremental, "only an EnvoyFilter changed");
        assert_eq!(fast.translation.resources, old.translation.resources, "the shared translation is kept");
        let full = rebuilt(&old, &after, &settings);
        serves_alike(&fast, &full);
        // The patch shows in what productpage is served (and goes again).
        let changes =
            crate::translate::diff(&istiod_xds_api::snapshot::SimpleModel::default(), &fast.translation.resources);
        let model = istiod_xds_api::snapshot::SimpleModel::default().apply(1, changes).0;
        let mut snap = Snapshot::new(1, std::time::Instant::now(), Arc::new(model));
        snap.mesh = Some(fast.clone());
        let name = "outbound|9080||reviews.bookinfo.svc.cluster.local";
        let bytes = MeshGenerator.generate(&snap, &class("bookinfo", &[("app", "productpage")]), Kind::Cluster, name);
        let c = istiod_proto::envoy::config::cluster::v3::Cluster::decode(bytes.unwrap()).unwrap();
        let seconds = c.connect_timeout.map(|d| d.seconds);
        let want = match (fast.model.envoy_filters.is_empty(), seconds) {
            (true, Some(s)) => s != 2 && s != 3,
            (false, Some(s)) => s == 2 || s == 3,
            _ => false,
        };
        assert!(want, "{seconds:?}");
        old = fast;
    }
}

/// Networks through the update paths: a pod moving to another network goes
/// through the pod fast path and equals a rebuild, and changes the load
/// assignment's digest (so connected proxies are pushed); the east-west
/// gateway's Service going away rebuilds and changes it again; a proxy in
/// network1 reaches network2's endpoints through the gateway, one in
/// network2 directly; without gateways the shared bytes are served.
#[test]
fn network_changes_mark_the_load_assignments_they_change() {
    use istiod_config::manifest::{Object, ObjectRef, parse_file};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let mut before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    // reviews-v2's terminating pod ready again (terminating ones are not
    // sent), so that its two pods sit in two zones.
    for ep in before.endpoint_slices.iter_mut().flat_map(|s| s.endpoints.iter_mut()) {
        if ep.addresses.iter().any(|a| a == "10.244.2.11") {
            ep.conditions =
                istiod_config::objects::Conditions { ready: Some(true), serving: Some(true), terminating: Some(false) };
        }
    }
    let gateway = "apiVersion: v1\nkind: Service\nmetadata: {name: ew, namespace: istio-system, labels: {topology.istio.io/network: network2}}\n\
                   spec: {type: LoadBalancer, ports: [{port: 15443}]}\nstatus: {loadBalancer: {ingress: [{ip: 203.0.113.2}]}}\n";
    let Some(Ok(Some(Object::Service(gw)))) = parse_file(gateway).docs.into_iter().next() else { panic!() };
    before.services.push(gw.clone());
    let settings = Arc::new(crate::meshconfig::MeshSettings::default());
    let old = crate::update::build(&before, "cluster.local", &settings);
    assert_eq!(old.model.network_gateways.all.len(), 1);
    let name = "outbound|9080||reviews.bookinfo.svc.cluster.local";
    let key = (Kind::Endpoint, Arc::<str>::from(name));
    let with_network = |n: &str| ProxyClass {
        metadata: vec![(Arc::from("NETWORK"), Arc::from(n))],
        ..class("bookinfo", &[("app", "productpage")])
    };
    let addresses = |m: &Arc<MeshInput>, c: &ProxyClass| -> Vec<String> {
        let b = MeshGenerator.generate(&snap(m), c, Kind::Endpoint, name).unwrap();
        let cla = istiod_proto::envoy::config::endpoint::v3::ClusterLoadAssignment::decode(b).unwrap();
        let mut out: Vec<String> = cla
            .endpoints
            .iter()
            .flat_map(|g| &g.lb_endpoints)
            .map(|e| format!("{e:?}").split("address: \"").nth(1).unwrap().split('"').next().unwrap().to_owned())
            .collect();
        out.sort();
        out
    };
    let direct = addresses(&old, &with_network("network1"));
    assert!(!direct.is_empty() && direct.iter().all(|a| a.starts_with("10.")), "{direct:?}");

    // reviews-v2's pods move to network2.
    let mut after = before.clone();
    let mut refs = Vec::new();
    for p in after.pods.iter_mut().filter(|p| p.metadata.name.starts_with("reviews-v2")) {
        p.metadata.labels.insert("topology.istio.io/network".into(), "network2".into());
        refs.push(ObjectRef::of(&Object::Pod(p.clone())));
    }
    let (fast, incremental) =
        crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
    assert!(incremental, "only Pods changed");
    let full = rebuilt(&old, &after, &settings);
    assert_eq!(fast.model.services, full.model.services);
    assert_eq!(fast.translation.resources, full.translation.resources);
    assert_ne!(fast.translation.resources.get(&key), old.translation.resources.get(&key), "the move is marked");
    serves_alike(&fast, &full);
    let from1 = addresses(&fast, &with_network("network1"));
    // reviews-v2's two pods (in two zones) through
    // the gateway, once in each locality, as istiod adds a gateway per
    // locality group.
    assert_eq!(from1.iter().filter(|a| a.starts_with("10.")).count(), direct.len() - 2, "{from1:?}");
    assert_eq!(from1.iter().filter(|a| *a == "203.0.113.2").count(), 2, "{from1:?}");
    assert_eq!(addresses(&fast, &with_network("network2")), direct, "network1 has no gateway: all direct");

    // The gateway's Service goes: a rebuild, and everything direct again.
    let mut gone = after.clone();
    gone.services.retain(|s| s.metadata.name != "ew");
    let refs = [ObjectRef::of(&Object::Service(gw))];
    let (next, incremental) =
        crate::update::update(Some(&fast), &gone, Some(&refs), "cluster.local", &settings, &Arc::default());
    assert!(!incremental, "a gateway's Service rebuilds");
    assert!(!next.model.network_gateways.enabled());
    assert_ne!(next.translation.resources.get(&key), fast.translation.resources.get(&key));
    assert_eq!(addresses(&next, &with_network("network1")), direct);
}

/// A remote cluster's registry change goes through the services fast path
/// (its refs name no cluster: their hosts are rebuilt from every cluster)
/// and serves what a rebuild serves: an endpoint moved in a remote's
/// slice, a remote pod relabelled, a remote-only Service added.
#[test]
fn a_remote_change_updated_in_place_equals_a_rebuild() {
    use istiod_config::manifest::{Object, ObjectRef, parse_file};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let mut before = istiod_kubewatch::config_dir::load(&dir).unwrap().objects;
    let mut remote = before.clone();
    remote.istio.clear();
    for s in &mut remote.endpoint_slices {
        for e in &mut s.endpoints {
            for a in &mut e.addresses {
                *a = a.replace("10.", "11.");
            }
        }
    }
    for p in &mut remote.pods {
        p.status.pod_ip = p.status.pod_ip.as_ref().map(|a| a.replace("10.", "11."));
    }
    before.remotes = vec![("west".into(), Arc::new(remote.clone()))];
    let settings = Arc::new(crate::meshconfig::MeshSettings::default());
    let old = crate::update::build(&before, "cluster.local", &settings);
    let reviews = &old.model.services["reviews.bookinfo.svc.cluster.local"];
    assert!(reviews.endpoints.iter().any(|e| e.address.starts_with("11.")), "the remote's endpoints merged");
    type Edit = fn(&mut istiod_config::objects::Objects) -> Vec<ObjectRef>;
    let edits: [Edit; 3] = [
        |o| {
            let s = o.endpoint_slices.iter_mut().find(|s| s.service_name() == Some("reviews")).unwrap();
            s.endpoints.pop();
            vec![ObjectRef::of(&Object::EndpointSlice(s.clone()))]
        },
        |o| {
            let p = o.pods.iter_mut().find(|p| p.metadata.name.starts_with("ratings")).unwrap();
            p.metadata.labels.insert("version".into(), "v9".into());
            vec![ObjectRef::of(&Object::Pod(p.clone()))]
        },
        |o| {
            let yaml = "apiVersion: v1\nkind: Service\nmetadata: {name: only-west, namespace: bookinfo}\nspec: {clusterIP: 10.97.0.9, ports: [{name: http, port: 80}]}\n";
            let Some(Ok(Some(Object::Service(s)))) = parse_file(yaml).docs.into_iter().next() else { panic!() };
            o.services.push(s.clone());
            vec![ObjectRef::of(&Object::Service(s))]
        },
    ];
    for edit in edits {
        let mut r = remote.clone();
        let refs = edit(&mut r);
        let mut after = before.clone();
        after.remotes = vec![("west".into(), Arc::new(r))];
        let (fast, incremental) =
            crate::update::update(Some(&old), &after, Some(&refs), "cluster.local", &settings, &Arc::default());
        assert!(incremental, "only a remote's registry changed");
        let full = rebuilt(&old, &after, &settings);
        assert_eq!(fast.model.services, full.model.services);
        assert_eq!(fast.translation.resources, full.translation.resources);
        assert_ne!(fast.model.services, old.model.services, "the edit shows");
        serves_alike(&fast, &full);
    }
}

/// `TestSplitHorizonEds` (pilot/pkg/xds/eds_sh_test.go): four clusters on
/// four networks (cluster N's system namespace on networkN), service5 with
/// N endpoints in cluster N; meshNetworks gateways: one for network1 and
/// network2, two for network3, none for network4. A sidecar in each
/// network gets its own endpoints and network4's directly and the others
/// through their gateways, with upstream's weights (the scale is 2).
#[test]
fn upstream_split_horizon_eds() {
    use istiod_proto::envoy::config::core::v3::address::Address;
    use istiod_proto::envoy::config::endpoint::v3::{ClusterLoadAssignment, lb_endpoint};
    let cluster = |n: u32| {
        let dir = tempfile::tempdir().unwrap();
        let mut yaml = format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: istio-system, labels: {{topology.istio.io/network: network{n}}}}}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {{name: service5, namespace: default}}\n\
             spec: {{clusterIP: 10.10.0.1, ports: [{{name: http-main, port: 1080, targetPort: 2080}}]}}\n---\n\
             apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{name: service5-1, namespace: default, labels: {{kubernetes.io/service-name: service5}}}}\n\
             addressType: IPv4\nports: [{{name: http-main, port: 2080}}]\nendpoints:\n"
        );
        for i in 1..=n {
            yaml.push_str(&format!(
                "- {{addresses: [10.{n}.0.{i}], targetRef: {{kind: Pod, name: p{i}, namespace: default}}}}\n"
            ));
        }
        for i in 1..=n {
            yaml.push_str(&format!(
                "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: default, labels: {{version: v1.1, security.istio.io/tlsMode: istio}}}}\nstatus: {{podIP: 10.{n}.0.{i}}}\n"
            ));
        }
        std::fs::write(dir.path().join("c.yaml"), yaml).unwrap();
        let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
        assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
        loaded.objects
    };
    let mut objs = cluster(1);
    objs.remotes = (2..=4).map(|n| (format!("cluster{n}"), Arc::new(cluster(n)))).collect();
    let mut settings = crate::meshconfig::MeshSettings::default();
    settings.networks.cluster_id = "cluster1".into();
    settings.networks.mesh = istiod_config::networks::MeshNetworks::parse(
        "networks:\n  network1: {gateways: [{address: 159.122.219.1, port: 80}]}\n  network2: {gateways: [{address: 159.122.219.2, port: 80}]}\n\
         \x20 network3: {gateways: [{address: 159.122.219.3, port: 80}, {address: 179.114.119.3, port: 80}]}\n",
    )
    .unwrap();
    let m = crate::update::build(&objs, "cluster.local", &Arc::new(settings));
    let weights = |network: &str| {
        let c = ProxyClass {
            metadata: vec![(Arc::from("NETWORK"), Arc::from(network))],
            ..class("default", &[("app", "app3")])
        };
        let b = MeshGenerator
            .generate(&snap(&m), &c, Kind::Endpoint, "outbound|1080||service5.default.svc.cluster.local")
            .unwrap();
        let cla = ClusterLoadAssignment::decode(b).unwrap();
        assert_eq!(cla.endpoints.len(), 1, "one locality");
        let mut out: Vec<(String, u32)> = cla.endpoints[0]
            .lb_endpoints
            .iter()
            .map(|e| {
                let Some(lb_endpoint::HostIdentifier::Endpoint(ep)) = &e.host_identifier else { panic!() };
                let Some(Address::SocketAddress(sa)) = ep.address.as_ref().and_then(|a| a.address.as_ref()) else {
                    panic!()
                };
                (sa.address.clone(), e.load_balancing_weight.unwrap())
            })
            .collect();
        out.sort();
        out
    };
    let want = |v: &[(&str, u32)]| {
        let mut v: Vec<(String, u32)> = v.iter().map(|(a, w)| ((*a).to_owned(), *w)).collect();
        v.sort();
        v
    };
    let net4 = [("10.4.0.1", 2), ("10.4.0.2", 2), ("10.4.0.3", 2), ("10.4.0.4", 2)];
    let mut w1 = vec![("10.1.0.1", 2), ("159.122.219.2", 4), ("159.122.219.3", 3), ("179.114.119.3", 3)];
    w1.extend(net4);
    assert_eq!(weights("network1"), want(&w1));
    let mut w2 =
        vec![("10.2.0.1", 2), ("10.2.0.2", 2), ("159.122.219.1", 2), ("159.122.219.3", 3), ("179.114.119.3", 3)];
    w2.extend(net4);
    assert_eq!(weights("network2"), want(&w2));
    let mut w3 = vec![("10.3.0.1", 2), ("10.3.0.2", 2), ("10.3.0.3", 2), ("159.122.219.1", 2), ("159.122.219.2", 4)];
    w3.extend(net4);
    assert_eq!(weights("network3"), want(&w3));
    let mut w4 = net4.to_vec();
    w4.extend([("159.122.219.1", 2), ("159.122.219.2", 4), ("159.122.219.3", 3), ("179.114.119.3", 3)]);
    assert_eq!(weights("network4"), want(&w4));
}

#[test]
fn a_sidecar_is_served_one_unnamed_name_table() {
    let m = bookinfo();
    let snap = snapshot(&m);
    let g = MeshGenerator;
    let reviews = class("bookinfo", &[("app", "reviews")]);
    assert_eq!(g.wildcard_names(&snap, &reviews, Kind::NameTable), vec![Arc::from(NAME_TABLE)]);
    assert!(g.input_generation(&snap, &reviews, Kind::NameTable, NAME_TABLE).is_some());
    let t = istiod_proto::istio::networking::nds::v1::NameTable::decode(
        g.generate(&snap, &reviews, Kind::NameTable, NAME_TABLE).unwrap(),
    )
    .unwrap();
    assert!(t.table.contains_key("reviews.bookinfo.svc.cluster.local"), "{t:?}");
}

/// The per-core cache of `pilot_k8s_proxies_with_no_service_targets`
/// answers (`missing_service_targets_cached`) agrees with the full walk:
/// for a second pod of the same labels, for a proxy a selector-less
/// service claims by address, and after a new snapshot adds a service.
#[test]
fn cached_service_target_answers_agree_with_the_full_walk() {
    use crate::translate::inbound::missing_service_targets;
    let m = bookinfo();
    let input = MeshInput::new(m.clone());
    let pod = |ns: &str, labels: &[(&str, &str)], ip: &str| {
        let mut c = class(ns, labels);
        c.ips = vec![Arc::from(ip)];
        c
    };
    let reviews = pod("bookinfo", &[("app", "reviews")], "10.0.0.1");
    let stray = pod("bookinfo", &[("app", "nothing-selects-me")], "10.0.0.2");
    let stray2 = pod("bookinfo", &[("app", "nothing-selects-me")], "10.0.0.3");
    for c in [&reviews, &stray, &stray2, &stray] {
        assert_eq!(missing_service_targets_cached(7, &input, c), missing_service_targets(&m, c));
    }
    assert_eq!(missing_service_targets_cached(7, &input, &stray2), Some("no_matching_services"));
    assert_eq!(missing_service_targets_cached(7, &input, &reviews), None);
    // A later snapshot with a service selecting the stray pods, and a
    // selector-less one claiming a VM's address.
    let mut m2 = (*m).clone();
    let more = crate::testing::model_in(
        "",
        r#"
apiVersion: v1
kind: Service
metadata: {name: stray, namespace: bookinfo}
spec:
  selector: {app: nothing-selects-me}
  ports: [{port: 80, name: http}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vm, namespace: bookinfo}
spec:
  hosts: [vm.example]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.9}]
"#,
    );
    for (h, s) in more.services.iter() {
        m2.services.insert(h.clone(), s.clone());
    }
    let m2 = Arc::new(m2);
    let input2 = MeshInput::new(m2.clone());
    let vm = pod("bookinfo", &[], "10.0.0.9");
    for c in [&stray, &stray2, &vm, &reviews] {
        assert_eq!(missing_service_targets_cached(8, &input2, c), missing_service_targets(&m2, c), "{c:?}");
    }
    assert_eq!(missing_service_targets_cached(8, &input2, &stray2), None);
    // The ServiceEntry is not a Kubernetes Service: istiod's Kubernetes
    // registry does not answer for it.
    assert_eq!(missing_service_targets_cached(8, &input2, &vm), Some("no_matching_metadata"));
}
