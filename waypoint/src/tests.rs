//! Upstream's waypoint cases (istio/istio 86c9f01,
//! `pilot/pkg/xds/waypoint_test.go`), as data: the same manifests, the
//! same waypoint proxy, the expected values as upstream states them.

use super::*;
use istiod_mesh::node::NodeType;
use istiod_proto::envoy::config::listener::v3::listener_filter_chain_match_predicate::Rule;

// The objects `setupWaypointTest` is given (waypoint_test.go's vars).
const WAYPOINT_SVC: &str = r#"apiVersion: v1
kind: Service
metadata:
  labels:
    gateway.istio.io/managed: istio.io-mesh-controller
    gateway.networking.k8s.io/gateway-name: waypoint
    istio.io/gateway-name: waypoint
  name: waypoint
  namespace: default
spec:
  clusterIP: 3.0.0.0
  ports:
  - appProtocol: hbone
    name: mesh
    port: 15008
  selector:
    gateway.networking.k8s.io/gateway-name: waypoint
"#;

const WAYPOINT_INSTANCE: &str = r#"apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: waypoint-a
  namespace: default
spec:
  address: 3.0.0.1
  labels:
    gateway.networking.k8s.io/gateway-name: waypoint
"#;

const WAYPOINT_GATEWAY: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: waypoint
  namespace: default
spec:
  gatewayClassName: waypoint
  listeners:
    - name: mesh
      port: 15008
      protocol: HBONE
status:
  addresses:
  - type: Hostname
    value: waypoint.default.svc.cluster.local
"#;

const APP_SERVICE_ENTRY: &str = r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: app
  namespace: default
  labels:
    istio.io/use-waypoint: waypoint
    istio.io/ingress-use-waypoint: "true"
spec:
  hosts: [app.com]
  addresses: [1.2.3.4]
  ports:
  - number: 80
    name: http
    protocol: HTTP
  resolution: STATIC
  workloadSelector:
    labels:
      app: app
"#;

const APP_WORKLOAD_ENTRY: &str = r#"apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: app-a
  namespace: default
  labels:
    app: app
  annotations:
    ambient.istio.io/redirection: enabled
spec:
  address: 1.1.1.1
"#;

const APP_POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: app-b
  namespace: default
  labels:
    app: app
  annotations:
    ambient.istio.io/redirection: enabled
spec: {}
status:
  conditions:
  - status: "True"
    type: Ready
  podIP: 1.1.1.2
  podIPs:
  - ip: 1.1.1.2
  - ip: 2001:20::2
"#;

const APP_POD_NO_MESH: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: app-c
  namespace: default
  labels:
    app: app
spec: {}
status:
  conditions:
  - status: "True"
    type: Ready
  podIP: 1.1.1.3
  podIPs:
  - ip: 1.1.1.3
  - ip: 2001:20::3
"#;

/// `setupWaypointTest`: the objects (for the model and the ambient index
/// alike) and the waypoint proxy (`Type: Waypoint`, namespace `default`,
/// labelled as the Gateway `waypoint`'s instance, at 3.0.0.1).
pub(crate) fn setup(docs: &[&str]) -> (MeshInput, ProxyClass) {
    let yaml = docs.join("\n---\n");
    let model = Arc::new(istiod_mesh::testing::model_in("", &yaml));
    let objects = istiod_mesh::testing::objects(&yaml);
    let mut index = istiod_ambient::Index::new();
    index.apply(&objects, None, &istiod_ambient::Settings::default());
    let mut mesh = MeshInput::new(model);
    mesh.waypoints = Arc::new(attachments(&index));
    mesh.ingress_waypoints = Arc::new(ingress_waypoints(&index));
    mesh.waypoint_workloads = Arc::new(index.waypoint_workloads());
    let mut class = istiod_mesh::testing::class(
        "default",
        &[(GATEWAY_NAME, "waypoint"), ("gateway.istio.io/managed", "istio.io-mesh-controller")],
    );
    class.node_type = NodeType::Waypoint;
    class.ips = vec![Arc::from("3.0.0.1")];
    (mesh, class)
}

fn main_internal(mesh: &MeshInput, class: &ProxyClass) -> Listener {
    View::of(mesh, class).unwrap().listener(MAIN_INTERNAL).unwrap()
}

/// `xdstest.EvaluateListenerFilterPredicates`: whether the predicate
/// (the filter's `filter_disabled`) holds on `port`.
fn disabled_on(p: Option<&listener::ListenerFilterChainMatchPredicate>, port: i32) -> bool {
    let Some(p) = p else { return false };
    match p.rule.as_ref() {
        Some(Rule::DestinationPortRange(r)) => r.start <= port && port < r.end,
        Some(Rule::OrMatch(m)) => m.rules.iter().any(|r| disabled_on(Some(r), port)),
        Some(Rule::AndMatch(m)) => m.rules.iter().all(|r| disabled_on(Some(r), port)),
        Some(Rule::NotMatch(n)) => !disabled_on(Some(n), port),
        Some(Rule::AnyMatch(any)) => *any,
        _ => false,
    }
}

fn listener_filter_of<'a>(l: &'a Listener, name: &str) -> Option<&'a ListenerFilter> {
    l.listener_filters.iter().find(|f| f.name == name)
}

/// TestWaypointNetworkFilters: sniffing where a port is declared both HTTP
/// and TCP or not at all; TLS inspection only where a port is TLS.
#[test]
fn waypoint_network_filters() {
    let app = r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: app
  namespace: default
  labels:
    istio.io/use-waypoint: waypoint
spec:
  hosts: [app.com]
  ports:
  - number: 80
    name: http
    protocol: HTTP
  - number: 81
    name: http-only
    protocol: HTTP
  - number: 90
    name: auto
    protocol: ""
  - number: 443
    name: https
    protocol: TLS
"#;
    let app2 = r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: app2
  namespace: default
  labels:
    istio.io/use-waypoint: waypoint
spec:
  hosts: [app2.com]
  ports:
  - number: 80
    name: tcp
    protocol: TCP
  - number: 91
    name: tcp-only
    protocol: HTTP
  - number: 443
    name: https
    protocol: TCP
"#;
    let (mesh, class) = setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, app, app2]);
    let l = main_internal(&mesh, &class);
    let http = listener_filter_of(&l, "envoy.filters.listener.http_inspector").expect("http_inspector");
    let sniffs = |port| !disabled_on(http.filter_disabled.as_ref(), port);
    assert!(sniffs(80), "HTTP and TCP on the same port");
    assert!(!sniffs(81), "HTTP");
    assert!(!sniffs(91), "TCP");
    assert!(sniffs(90), "unspecified");
    assert!(!sniffs(443), "TLS and TCP on the same port: no HTTP inspector needed");
    let tls = listener_filter_of(&l, "envoy.filters.listener.tls_inspector").expect("tls_inspector");
    let inspects = |port| !disabled_on(tls.filter_disabled.as_ref(), port);
    for port in [80, 81, 91, 90] {
        assert!(!inspects(port), "{port}");
    }
    assert!(inspects(443));
}

/// TestWaypointTLSInspectorWithOnlyTLSPorts: the inspector is there when
/// every port is TLS.
#[test]
fn waypoint_tls_inspector_with_only_tls_ports() {
    let tls_only = r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: tls-only
  namespace: default
  labels:
    istio.io/use-waypoint: waypoint
spec:
  hosts: ["secure.example.com"]
  addresses: ["5.5.5.5"]
  ports:
  - number: 443
    name: tls
    protocol: TLS
  resolution: STATIC"#;
    let (mesh, class) = setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, tls_only]);
    let l = main_internal(&mesh, &class);
    let tls = listener_filter_of(&l, "envoy.filters.listener.tls_inspector").expect("tls_inspector must be present");
    assert!(!disabled_on(tls.filter_disabled.as_ref(), 443));
}

/// `xdstest.ExtractEndpoints`: each endpoint as `<listener>;<id>` (an
/// internal address) or `ip:port`.
fn extract_endpoints(cla: &ep::ClusterLoadAssignment) -> Vec<String> {
    let mut out = Vec::new();
    for l in &cla.endpoints {
        for lb in &l.lb_endpoints {
            let Some(ep::lb_endpoint::HostIdentifier::Endpoint(e)) = &lb.host_identifier else { continue };
            match e.address.as_ref().and_then(|a| a.address.as_ref()) {
                Some(core::address::Address::EnvoyInternalAddress(i)) => {
                    let Some(core::envoy_internal_address::AddressNameSpecifier::ServerListenerName(n)) =
                        &i.address_name_specifier
                    else {
                        continue;
                    };
                    out.push(format!("{n};{}", i.endpoint_id));
                }
                _ => {
                    let (ip, port) = socket_of(e.address.as_ref()).unwrap();
                    out.push(format!("{ip}:{port}"));
                }
            }
        }
    }
    out.sort();
    out
}

/// TestWaypointEndpoints: HBONE-capable workloads (an ambient Pod, an
/// ambient WorkloadEntry) through `connect_originate`, the others direct.
/// Not expressed: upstream's plain endpoint carries its second (IPv6)
/// address too (`1.1.1.3:80,[2001:20::3]:80`); the model keeps one address
/// per endpoint.
#[test]
fn waypoint_endpoints() {
    let (mesh, class) = setup(&[
        WAYPOINT_GATEWAY,
        WAYPOINT_SVC,
        APP_POD,
        APP_POD_NO_MESH,
        WAYPOINT_INSTANCE,
        APP_WORKLOAD_ENTRY,
        APP_SERVICE_ENTRY,
    ]);
    let v = View::of(&mesh, &class).unwrap();
    let names = v.endpoint_names(&mesh);
    assert_eq!(names, vec!["inbound-vip|80|http|app.com".to_owned()]);
    let cla = v.endpoints(&mesh, &names[0]).unwrap();
    assert_eq!(
        extract_endpoints(&cla),
        vec!["1.1.1.3:80", "connect_originate;1.1.1.1:80", "connect_originate;1.1.1.2:80"]
    );
    // The tunnel's destination rides in metadata, as istiod writes it.
    let tunnelled = cla.endpoints.iter().flat_map(|l| &l.lb_endpoints).filter(|lb| {
        lb.metadata.as_ref().and_then(|m| m.filter_metadata.get(ORIGINAL_DST_KEY)).is_some_and(|s| {
            matches!(s.fields.get("local").and_then(|v| v.kind.as_ref()), Some(ValueKind::StringValue(l)) if l.starts_with("1.1.1."))
        })
    });
    assert_eq!(tunnelled.count(), 2);
}

/// TestWaypointMultipleVirtualServices: routes of every VirtualService for
/// the host are merged into the inbound virtual host.
#[test]
fn waypoint_multiple_virtual_services() {
    let vs = |name: &str, prefix: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  hosts: [app.com]\n  http:\n  - match:\n    - uri:\n        prefix: {prefix}\n    route:\n    - destination:\n        host: app.com\n        port:\n          number: 80\n"
        )
    };
    let (a, b) = (vs("vs-route-a", "/route-a"), vs("vs-route-b", "/route-b"));
    let (mesh, class) =
        setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, APP_WORKLOAD_ENTRY, &a, &b]);
    let l = main_internal(&mesh, &class);
    let chain = l.filter_chains.iter().find(|c| c.name == "inbound-vip|80|http|app.com").expect("http chain");
    let rc = route_config(chain);
    let prefixes: Vec<&str> = rc
        .virtual_hosts
        .iter()
        .flat_map(|vh| &vh.routes)
        .filter_map(|r| match r.r#match.as_ref()?.path_specifier.as_ref()? {
            route::route_match::PathSpecifier::Prefix(p) => Some(p.as_str()),
            _ => None,
        })
        .collect();
    assert!(prefixes.contains(&"/route-a"), "{prefixes:?}");
    assert!(prefixes.contains(&"/route-b"), "{prefixes:?}");
    // The destination is the waypoint's own service: its inbound-VIP cluster.
    let Some(route::route::Action::Route(a)) = rc.virtual_hosts[0].routes[0].action.as_ref() else { panic!() };
    assert_eq!(
        a.cluster_specifier,
        Some(route::route_action::ClusterSpecifier::Cluster("inbound-vip|80|http|app.com".into()))
    );
}

/// The HTTP connection manager of `chain`.
fn manager(chain: &FilterChain) -> hcm::HttpConnectionManager {
    let f = chain.filters.iter().find(|f| f.name == "envoy.filters.network.http_connection_manager").unwrap();
    let Some(listener::filter::ConfigType::TypedConfig(a)) = &f.config_type else { panic!() };
    hcm::HttpConnectionManager::decode(a.value.as_slice()).unwrap()
}

/// The HTTP filters of chain `name` of listener `l`.
fn http_filters(l: &Listener, name: &str) -> Vec<hcm::HttpFilter> {
    manager(l.filter_chains.iter().find(|c| c.name == name).unwrap()).http_filters
}

pub(crate) fn route_config(chain: &FilterChain) -> route::RouteConfiguration {
    match manager(chain).route_specifier {
        Some(hcm::http_connection_manager::RouteSpecifier::RouteConfig(rc)) => rc,
        other => panic!("{other:?}"),
    }
}

/// The shape `buildWaypointInbound` / `buildWaypointInboundClusters` give
/// a single-network waypoint: three listeners, the fixed clusters around
/// the inbound-VIP ones, the VIP in the IP matcher.
#[test]
fn waypoint_resources_shape() {
    let (mesh, class) =
        setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, APP_WORKLOAD_ENTRY]);
    let v = View::of(&mesh, &class).unwrap();
    assert_eq!(v.listener_names(), ["connect_terminate", "main_internal", "connect_originate"]);
    assert_eq!(v.cluster_names(&mesh), ["main_internal", "encap", "inbound-vip|80|http|app.com", "connect_originate"]);
    let l = v.listener(MAIN_INTERNAL).unwrap();
    let Some(Matcher { matcher_type: Some(matcher::MatcherType::MatcherTree(tree)), .. }) = &l.filter_chain_matcher
    else {
        panic!()
    };
    let Some(matcher::matcher_tree::TreeType::CustomMatch(ip)) = &tree.tree_type else { panic!() };
    let ip = IpMatcher::decode(ip.typed_config.as_ref().unwrap().value.as_slice()).unwrap();
    let prefixes: Vec<&str> =
        ip.range_matchers.iter().flat_map(|r| &r.ranges).map(|r| r.address_prefix.as_str()).collect();
    assert_eq!(prefixes, ["1.2.3.4"]);
    let terminate = v.listener(CONNECT_TERMINATE).unwrap();
    assert_eq!(socket_of(terminate.address.as_ref()), Some(("0.0.0.0".into(), 15008)));
    let originate = v.cluster(&mesh, CONNECT_ORIGINATE).unwrap();
    let Some(cluster::cluster::LbConfig::OriginalDstLbConfig(o)) = &originate.lb_config else { panic!() };
    assert_eq!(o.upstream_port_override, Some(15008));
    // PILOT_HBONE_INITIAL_*_WINDOW_SIZE: unset by default (Envoy's own).
    assert_eq!(h2_windows(&originate), (None, None));
    let vip = v.cluster(&mesh, "inbound-vip|80|http|app.com").unwrap();
    assert_eq!(vip.eds_cluster_config.as_ref().unwrap().service_name, "inbound-vip|80|http|app.com");
    assert_eq!(vip.transport_socket.as_ref().unwrap().name, "internal_upstream");
    assert!(vip.transport_socket_matches.is_empty());
}

/// A proxy that names no Gateway, or one no service binds, gets the fixed
/// resources only; a service of another waypoint is not served.
#[test]
fn only_the_waypoints_own_services() {
    let (mesh, mut class) =
        setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, APP_WORKLOAD_ENTRY]);
    class.labels = vec![(Arc::from(GATEWAY_NAME), Arc::from("other"))];
    let v = View::of(&mesh, &class).unwrap();
    assert_eq!(v.cluster_names(&mesh), ["main_internal", "encap", "connect_originate"]);
    class.labels.clear();
    assert!(View::of(&mesh, &class).is_none());
}

/// TestPolicyMatcher (pilot/pkg/model/policyattachment_test.go), its
/// waypoint cases: the waypoint `sample-waypoint` of `default`, the root
/// namespace `istio-system`; a policy `policy1` in `default` unless named.
#[test]
fn policy_matcher_waypoint_cases() {
    use istiod_config::istio::PolicyTargetReference as Ref;
    let r = |group: &str, kind: &str, name: &str| Ref {
        group: group.into(),
        kind: kind.into(),
        name: name.into(),
        namespace: String::new(),
    };
    let gateway = |n: &str| r("gateway.networking.k8s.io", "Gateway", n);
    let waypoint_ref = gateway("sample-waypoint");
    let sample_ref = gateway("sample-gateway");
    let class_ref = r("gateway.networking.k8s.io", "GatewayClass", "istio-waypoint");
    let service_ref = r("", "Service", "sample-svc");
    let entry_ref = r("networking.istio.io", "ServiceEntry", "sample-svc-entry");
    let entry_named_like_service = r("networking.istio.io", "ServiceEntry", "sample-svc");
    let svc = Some(PolicyService { name: "sample-svc", namespace: "default", kubernetes: true });
    let entry = Some(PolicyService { name: "sample-svc-entry", namespace: "default", kubernetes: false });
    // (name, refs, policy namespace, waypoint namespace, service, expected)
    type Case<'a> = (&'a str, Vec<&'a Ref>, &'a str, &'a str, Option<PolicyService<'a>>, bool);
    let cases: Vec<Case<'_>> = vec![
        ("waypoint and a targetRef", vec![&waypoint_ref], "default", "default", None, true),
        ("waypoint and a selector", vec![], "default", "default", None, false),
        ("waypoint and both a targetRef and a selector", vec![&waypoint_ref], "default", "default", None, true),
        ("waypoint and no targetRef or selector", vec![], "default", "default", None, false),
        ("waypoint and non-matching targetRef", vec![&sample_ref], "default", "default", None, false),
        ("waypoint and matching targetRefs", vec![&waypoint_ref], "default", "default", None, true),
        (
            "waypoint and partial matching targetRefs",
            vec![&waypoint_ref, &sample_ref],
            "default",
            "default",
            None,
            true,
        ),
        ("waypoint and non matching targetRefs", vec![&sample_ref], "default", "default", None, false),
        ("service attached policy", vec![&service_ref], "default", "default", svc, true),
        ("service entry attached policy", vec![&entry_ref], "default", "default", entry, true),
        ("service entry policy selecting", vec![&entry_named_like_service], "default", "default", svc, false),
        ("gateway attached policy with service", vec![&waypoint_ref], "default", "default", svc, true),
        (
            "gateway attached policy with cross-namespace service",
            vec![&waypoint_ref],
            "default",
            "waypoint",
            svc,
            false,
        ),
        ("gateway class attached policy in root namespace", vec![&class_ref], "istio-system", "default", None, true),
        ("gateway class attached policy in non-root namespace", vec![&class_ref], "default", "default", None, false),
    ];
    for (name, refs, policy_ns, waypoint_ns, svc, expected) in cases {
        assert_eq!(attaches(&refs, policy_ns, "istio-system", waypoint_ns, "sample-waypoint", svc), expected, "{name}");
    }
}

/// A policy attached to the Service applies on its chains in the waypoint
/// (RBAC before the router; principals from the HBONE filter state, as
/// istiod's `UseFilterState`), and not on the direct workload chains.
#[test]
fn service_attached_policy_on_its_chains() {
    let policy = r#"apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-frontend, namespace: default}
spec:
  targetRefs: [{kind: ServiceEntry, group: networking.istio.io, name: app}]
  action: ALLOW
  rules: [{from: [{source: {principals: [cluster.local/ns/default/sa/frontend]}}], to: [{operation: {methods: [GET]}}]}]
"#;
    let (mesh, class) =
        setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, APP_WORKLOAD_ENTRY, policy]);
    let l = main_internal(&mesh, &class);
    let filters = |chain: &str| http_filters(&l, chain);
    let names: Vec<String> = filters("inbound-vip|80|http|app.com").iter().map(|f| f.name.clone()).collect();
    assert_eq!(
        names,
        [
            "envoy.filters.http.rbac",
            "envoy.filters.http.grpc_stats",
            "envoy.filters.http.fault",
            "envoy.filters.http.cors",
            "waypoint_upstream_peer_metadata",
            "envoy.filters.http.router"
        ]
    );
    let rbac = &filters("inbound-vip|80|http|app.com")[0];
    let Some(hcm::http_filter::ConfigType::TypedConfig(a)) = &rbac.config_type else { panic!() };
    let text = format!(
        "{:?}",
        istiod_proto::envoy::extensions::filters::http::rbac::v3::Rbac::decode(a.value.as_slice()).unwrap()
    );
    assert!(
        text.contains("io.istio.peer_principal") && text.contains("spiffe://cluster.local/ns/default/sa/frontend"),
        "{text}"
    );
    assert!(!text.contains("Authenticated"), "{text}");
    let direct: Vec<String> = filters("direct-http").iter().map(|f| f.name.clone()).collect();
    assert!(!direct.iter().any(|n| n.contains("rbac")), "{direct:?}");
}

/// TestApplyUpstreamTLSSettingsHBONE (cluster_tls_test.go), its sidecar
/// cases, on clusters as the mesh generator makes them: auto mTLS gets
/// HBONE first, then Istio mTLS or plaintext; explicit SIMPLE TLS gets
/// HBONE around the TLS, or the TLS alone (`user`). And a cluster without
/// TLS: HBONE or plaintext.
#[test]
fn apply_upstream_tls_settings_hbone() {
    use istiod_config::istio::networking::{ClientTlsMode, ClientTlsSettings, TrafficPolicy};
    use istiod_mesh::translate::traffic_policy;
    let eds = || Cluster {
        name: "outbound|80||foo.com".into(),
        cluster_discovery_type: Some(cluster::cluster::ClusterDiscoveryType::Type(
            cluster::cluster::DiscoveryType::Eds as i32,
        )),
        ..Default::default()
    };
    // (match name, socket name, inner socket name)
    let shape = |c: &Cluster| -> Vec<(String, String, String)> {
        let c = Cluster::decode(hbone::cluster(&c.encode_to_vec()).unwrap().as_ref()).unwrap();
        c.transport_socket_matches
            .iter()
            .map(|m| {
                let ts = m.transport_socket.as_ref().unwrap();
                let inner = match (&ts.config_type, ts.name.as_str()) {
                    (
                        Some(core::transport_socket::ConfigType::TypedConfig(a)),
                        "envoy.transport_sockets.internal_upstream",
                    ) => InternalUpstreamTransport::decode(a.value.as_slice()).unwrap().transport_socket.unwrap().name,
                    _ => String::new(),
                };
                (m.name.clone(), ts.name.clone(), inner)
            })
            .collect()
    };
    let t = |a: &str, b: &str, c: &str| (a.to_owned(), b.to_owned(), c.to_owned());
    let (internal, raw, tls) = (
        "envoy.transport_sockets.internal_upstream",
        "envoy.transport_sockets.raw_buffer",
        "envoy.transport_sockets.tls",
    );

    // sidecar: auto mTLS and HBONE
    let mut auto = eds();
    traffic_policy::auto_mtls(&mut auto, "foo.com", 80, "", traffic_policy::istio_alpn(false, true));
    assert_eq!(shape(&auto), [t("hbone", internal, raw), t("tlsMode-istio", tls, ""), t("tlsMode-disabled", raw, "")]);

    // sidecar: explicit TLS and HBONE
    let mut simple = eds();
    let policy = TrafficPolicy {
        tls: Some(ClientTlsSettings {
            mode: ClientTlsMode::Simple,
            ca_certificates: "root-cert.pem".into(),
            subject_alt_names: vec!["custom.foo.com".into()],
            sni: "custom.foo.com".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    traffic_policy::apply(&mut simple, &policy, "foo.com", 80, "", traffic_policy::istio_alpn(false, true));
    assert_eq!(shape(&simple), [t("hbone", internal, tls), t("user", tls, "")]);

    // No TLS at all (`hboneOrPlaintextSocket`).
    assert_eq!(shape(&eds()), [t("hbone", internal, raw), t("tlsMode-disabled", raw, "")]);
}

/// A route from a service of the waypoint to one it does not serve goes to
/// that service's outbound cluster, which the waypoint is served (able to
/// tunnel), with its load assignment (`filterWaypointOutboundServices`).
#[test]
fn routes_to_other_services_use_their_outbound_clusters() {
    let other = r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: other, namespace: default}
spec:
  hosts: [other.com]
  addresses: [1.2.3.5]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 1.1.1.9}]
"#;
    let vs = r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: to-other, namespace: default}
spec:
  hosts: [app.com]
  http:
  - route: [{destination: {host: other.com, port: {number: 8080}}}]
"#;
    let (mesh, class) =
        setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, APP_WORKLOAD_ENTRY, other, vs]);
    let v = View::of(&mesh, &class).unwrap();
    assert!(v.cluster_names(&mesh).contains(&"outbound|8080||other.com".to_owned()), "{:?}", v.cluster_names(&mesh));
    assert!(v.endpoint_names(&mesh).contains(&"outbound|8080||other.com".to_owned()));
    let c = v.cluster(&mesh, "outbound|8080||other.com").unwrap();
    assert_eq!(c.transport_socket_matches[0].name, "hbone");
    let l = main_internal(&mesh, &class);
    let chain = l.filter_chains.iter().find(|c| c.name == "inbound-vip|80|http|app.com").unwrap();
    let rc = route_config(chain);
    let Some(route::route::Action::Route(a)) = rc.virtual_hosts[0].routes[0].action.as_ref() else { panic!() };
    assert_eq!(
        a.cluster_specifier,
        Some(route::route_action::ClusterSpecifier::Cluster("outbound|8080||other.com".into()))
    );
}

/// A snapshot serving `mesh` as the control thread publishes it.
fn snapshot_of(mesh: MeshInput) -> istiod_xds_api::snapshot::Snapshot<MeshInput> {
    use istiod_xds_api::snapshot::{SimpleModel, Snapshot};
    let changes = istiod_mesh::translate::diff(&SimpleModel::default(), &mesh.translation.resources);
    let mut snap = Snapshot::new(1, std::time::Instant::now(), Arc::new(SimpleModel::default().apply(1, changes).0));
    snap.mesh = Some(Arc::new(mesh));
    snap
}

/// EnvoyFilters on a waypoint as istiod applies them: its listeners take
/// SIDECAR_INBOUND patches (`patchListeners`: they are its inbound ones),
/// its outbound clusters SIDECAR_OUTBOUND ones, its own clusters none; a
/// SIDECAR_INBOUND ADD adds a cluster (`insertedClusters`); context
/// WAYPOINT (with its waypoint match) changes nothing, as in istiod.
#[test]
fn envoy_filters_patch_waypoints_as_istiod_does() {
    use istiod_xds_api::snapshot::{Generator, Kind};
    let filter = r#"apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata: {name: wp, namespace: istio-system}
spec:
  configPatches:
  - applyTo: LISTENER
    match: {context: SIDECAR_INBOUND, listener: {name: connect_terminate}}
    patch: {operation: MERGE, value: {per_connection_buffer_limit_bytes: 4096}}
  - applyTo: CLUSTER
    match: {context: SIDECAR_INBOUND, cluster: {name: main_internal}}
    patch: {operation: MERGE, value: {connect_timeout: 7s}}
  - applyTo: CLUSTER
    match: {context: SIDECAR_OUTBOUND, cluster: {service: other.com}}
    patch: {operation: MERGE, value: {connect_timeout: 9s}}
  - applyTo: CLUSTER
    match: {context: SIDECAR_INBOUND}
    patch: {operation: ADD, value: {name: added, type: STATIC, connect_timeout: 1s}}
  - applyTo: LISTENER
    match: {context: WAYPOINT, waypoint: {portNumber: 80}}
    patch: {operation: REMOVE}
"#;
    let other = r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: other, namespace: default}
spec:
  hosts: [other.com]
  addresses: [1.2.3.5]
  ports: [{number: 8080, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 1.1.1.9}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: to-other, namespace: default}
spec:
  hosts: [app.com]
  http:
  - route: [{destination: {host: other.com, port: {number: 8080}}}]
"#;
    let (mesh, class) = setup(&[
        WAYPOINT_GATEWAY,
        WAYPOINT_SVC,
        WAYPOINT_INSTANCE,
        APP_SERVICE_ENTRY,
        APP_WORKLOAD_ENTRY,
        other,
        filter,
    ]);
    let snap = snapshot_of(mesh);
    let g = generator::WithWaypoints;
    let cluster =
        |name: &str| Cluster::decode(g.generate(&snap, &class, Kind::Cluster, name).unwrap().as_ref()).unwrap();
    let listener =
        |name: &str| Listener::decode(g.generate(&snap, &class, Kind::Listener, name).unwrap().as_ref()).unwrap();
    assert_eq!(listener(CONNECT_TERMINATE).per_connection_buffer_limit_bytes, Some(4096));
    assert_eq!(cluster("outbound|8080||other.com").connect_timeout, Some(Duration { seconds: 9, nanos: 0 }));
    assert_ne!(cluster(MAIN_INTERNAL).connect_timeout, Some(Duration { seconds: 7, nanos: 0 }), "not patched");
    let names = g.wildcard_names(&snap, &class, Kind::Cluster);
    assert!(names.iter().any(|n| &**n == "added"), "{names:?}");
    assert_eq!(cluster("added").name, "added");
    let listeners = g.wildcard_names(&snap, &class, Kind::Listener);
    assert_eq!(listeners.len(), 3, "context WAYPOINT removes nothing: {listeners:?}");
}

/// A Gateway API HTTPRoute attached to a Service the waypoint serves
/// (GAMMA, `parentRefs` of kind Service) routes in the waypoint, as
/// istiod's conversion makes it a mesh VirtualService: its header match,
/// and its backends by the waypoint's clusters (the served Service's
/// inbound-VIP one, another's outbound one).
#[test]
fn gamma_routes_attached_to_a_service_route_in_its_waypoint() {
    let objects = r#"apiVersion: v1
kind: Service
metadata: {name: web, namespace: default, labels: {istio.io/use-waypoint: waypoint}}
spec:
  clusterIP: 10.96.0.40
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: web2, namespace: default}
spec:
  clusterIP: 10.96.0.41
  ports: [{name: http, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: split, namespace: default}
spec:
  parentRefs: [{group: "", kind: Service, name: web, port: 80}]
  rules:
  - matches: [{headers: [{name: x-canary, value: "yes"}]}]
    backendRefs: [{name: web2, port: 80}]
  - backendRefs: [{name: web, port: 80, weight: 90}, {name: web2, port: 80, weight: 10}]
"#;
    let (mesh, class) = setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, objects]);
    let l = main_internal(&mesh, &class);
    let chain = l
        .filter_chains
        .iter()
        .find(|c| c.name == "inbound-vip|80|http|web.default.svc.cluster.local")
        .unwrap_or_else(|| panic!("{:?}", l.filter_chains.iter().map(|c| &c.name).collect::<Vec<_>>()));
    let rc = route_config(chain);
    let routes = &rc.virtual_hosts[0].routes;
    assert_eq!(routes.len(), 2, "{routes:#?}");
    let header = &routes[0].r#match.as_ref().unwrap().headers[0];
    assert_eq!(header.name, "x-canary");
    let cluster = |r: &route::Route| match r.action.as_ref() {
        Some(route::route::Action::Route(a)) => a.cluster_specifier.clone(),
        _ => None,
    };
    assert_eq!(
        cluster(&routes[0]),
        Some(route::route_action::ClusterSpecifier::Cluster("outbound|80||web2.default.svc.cluster.local".into()))
    );
    let Some(route::route_action::ClusterSpecifier::WeightedClusters(w)) = cluster(&routes[1]) else { panic!() };
    let split: Vec<(&str, u32)> = w.clusters.iter().map(|c| (c.name.as_str(), c.weight.unwrap_or_default())).collect();
    assert_eq!(
        split,
        [
            ("inbound-vip|80|http|web.default.svc.cluster.local", 90),
            ("outbound|80||web2.default.svc.cluster.local", 10)
        ]
    );
    // The route's other backend is served to the waypoint.
    let v = View::of(&mesh, &class).unwrap();
    assert!(v.cluster_names(&mesh).contains(&"outbound|80||web2.default.svc.cluster.local".to_owned()));
}

/// TestIngressUseWaypoint: a gateway sends a service labelled
/// `istio.io/ingress-use-waypoint` to its waypoint: one endpoint per
/// waypoint instance, through `connect_originate`, tunnelled to the
/// service's VIP (`<listener>;<tunnel local>;<endpoint id>`, as
/// `xdstest.ExtractLoadAssignments` prints it).
#[test]
fn ingress_use_waypoint() {
    use istiod_xds_api::snapshot::{Generator, Kind};
    istiod_mesh::node::set_ambient(true);
    let (mesh, _) = setup(&[
        WAYPOINT_GATEWAY,
        WAYPOINT_SVC,
        APP_POD,
        APP_POD_NO_MESH,
        WAYPOINT_INSTANCE,
        APP_WORKLOAD_ENTRY,
        APP_SERVICE_ENTRY,
    ]);
    let snap = snapshot_of(mesh);
    let mut ingress = istiod_mesh::testing::class("default", &[]);
    ingress.node_type = NodeType::Router;
    ingress.ips = vec![Arc::from("3.0.0.3")];
    let body = generator::WithWaypoints.generate(&snap, &ingress, Kind::Endpoint, "outbound|80||app.com").unwrap();
    let cla = ep::ClusterLoadAssignment::decode(body.as_ref()).unwrap();
    let got: Vec<String> = cla
        .endpoints
        .iter()
        .flat_map(|l| &l.lb_endpoints)
        .map(|lb| {
            let Some(ep::lb_endpoint::HostIdentifier::Endpoint(e)) = &lb.host_identifier else { panic!() };
            let Some(core::address::Address::EnvoyInternalAddress(i)) =
                e.address.as_ref().and_then(|a| a.address.as_ref())
            else {
                panic!("{e:?}")
            };
            let Some(core::envoy_internal_address::AddressNameSpecifier::ServerListenerName(n)) =
                &i.address_name_specifier
            else {
                panic!()
            };
            let md = &lb.metadata.as_ref().unwrap().filter_metadata[ORIGINAL_DST_KEY];
            let Some(ValueKind::StringValue(local)) = md.fields["local"].kind.as_ref() else { panic!() };
            format!("{n};{local};{}", i.endpoint_id)
        })
        .collect();
    assert_eq!(got, ["connect_originate;1.2.3.4:80;3.0.0.1:15008"]);
    // A sidecar is not sent to the waypoint (istiod: only gateways).
    let sidecar = istiod_mesh::testing::class("default", &[]);
    let body = generator::WithWaypoints.generate(&snap, &sidecar, Kind::Endpoint, "outbound|80||app.com").unwrap();
    assert!(!format!("{:?}", ep::ClusterLoadAssignment::decode(body.as_ref()).unwrap()).contains("15008"));
}

/// A RequestAuthentication attached to the Service verifies tokens in the
/// waypoint: jwt_authn between the CUSTOM and the local authorization
/// filters (istiod's `buildWaypointHTTPFilters`), on that service's chain
/// only; one attached by selector does not reach the waypoint.
#[test]
fn request_authentication_by_target_ref() {
    let policies = r#"apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: default}
spec:
  targetRefs: [{kind: ServiceEntry, group: networking.istio.io, name: app}]
  jwtRules: [{issuer: "https://issuer.example.com", jwks: '{"keys":[]}'}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: by-selector, namespace: default}
spec:
  selector: {matchLabels: {app: app}}
  jwtRules: [{issuer: "https://other.example.com", jwks: '{"keys":[]}'}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: require-jwt, namespace: default}
spec:
  targetRefs: [{kind: ServiceEntry, group: networking.istio.io, name: app}]
  rules: [{from: [{source: {requestPrincipals: ["*"]}}]}]
"#;
    let (mesh, class) =
        setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, APP_WORKLOAD_ENTRY, policies]);
    let l = main_internal(&mesh, &class);
    let filters = |chain: &str| http_filters(&l, chain);
    let chain = filters("inbound-vip|80|http|app.com");
    let names: Vec<&str> = chain.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "envoy.filters.http.jwt_authn",
            "envoy.filters.http.rbac",
            "envoy.filters.http.grpc_stats",
            "envoy.filters.http.fault",
            "envoy.filters.http.cors",
            "waypoint_upstream_peer_metadata",
            "envoy.filters.http.router"
        ]
    );
    let Some(hcm::http_filter::ConfigType::TypedConfig(a)) = &chain[0].config_type else { panic!() };
    let jwt =
        istiod_proto::envoy::extensions::filters::http::jwt_authn::v3::JwtAuthentication::decode(a.value.as_slice())
            .unwrap();
    let issuers: Vec<&str> = jwt.providers.values().map(|p| p.issuer.as_str()).collect();
    assert_eq!(issuers, ["https://issuer.example.com"], "the selector's is not the waypoint's");
    assert!(!filters("direct-http").iter().any(|f| f.name == "envoy.filters.http.jwt_authn"));
}

/// On a service's TCP chain, its policies are network RBAC filters before
/// the tcp_proxy (istiod's `buildCompleteNetworkFilters` with the policy
/// service), peers from the HBONE filter state too.
#[test]
fn service_attached_policy_on_its_tcp_chain() {
    let objects = r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: default, labels: {istio.io/use-waypoint: waypoint}}
spec:
  hosts: [db.example.com]
  addresses: [1.2.3.9]
  ports: [{number: 5432, name: tcp, protocol: TCP}]
  resolution: STATIC
  endpoints: [{address: 1.1.1.8}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: db-clients, namespace: default}
spec:
  targetRefs: [{kind: ServiceEntry, group: networking.istio.io, name: db}]
  rules: [{from: [{source: {principals: [cluster.local/ns/default/sa/api]}}]}]
"#;
    let (mesh, class) = setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, objects]);
    let l = main_internal(&mesh, &class);
    let chain = l.filter_chains.iter().find(|c| c.name == "inbound-vip|5432|tcp|db.example.com").unwrap();
    let names: Vec<&str> = chain.filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["istio.metadata_exchange", "envoy.filters.network.rbac", "envoy.filters.network.tcp_proxy"]);
    let Some(listener::filter::ConfigType::TypedConfig(a)) = &chain.filters[1].config_type else { panic!() };
    let rbac = istiod_proto::envoy::extensions::filters::network::rbac::v3::Rbac::decode(a.value.as_slice()).unwrap();
    let text = format!("{rbac:?}");
    assert!(
        text.contains("io.istio.peer_principal") && text.contains("spiffe://cluster.local/ns/default/sa/api"),
        "{text}"
    );
}

/// With Prometheus metrics (the chart's default providers), a waypoint's
/// HTTP chains count requests (istio.stats after the upstream peer
/// metadata, istiod's telemetry filters) and its TCP chains connections.
#[test]
fn waypoints_report_metrics() {
    let yaml =
        [WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, APP_WORKLOAD_ENTRY].join("\n---\n");
    let model = Arc::new(istiod_mesh::testing::model_in("defaultProviders:\n  metrics: [prometheus]\n", &yaml));
    let objects = istiod_mesh::testing::objects(&yaml);
    let mut index = istiod_ambient::Index::new();
    index.apply(&objects, None, &istiod_ambient::Settings::default());
    let mut mesh = MeshInput::new(model);
    mesh.waypoints = Arc::new(attachments(&index));
    let (_, class) = setup(&[WAYPOINT_GATEWAY]);
    let l = main_internal(&mesh, &class);
    let chain = l.filter_chains.iter().find(|c| c.name == "inbound-vip|80|http|app.com").unwrap();
    let names: Vec<String> = manager(chain).http_filters.into_iter().map(|f| f.name).collect();
    assert_eq!(
        names,
        [
            "envoy.filters.http.grpc_stats",
            "envoy.filters.http.fault",
            "envoy.filters.http.cors",
            "waypoint_upstream_peer_metadata",
            "istio.stats",
            "envoy.filters.http.router"
        ]
    );
}

/// TestWaypointInboundRouteHashPolicy: the default route of a service
/// whose DestinationRule hashes consistently carries the hash policy (a
/// cookie, a header); without a rule, or with a simple one, none.
#[test]
fn waypoint_inbound_route_hash_policy() {
    let rule = |lb: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: app-dr, namespace: default}}\n\
             spec:\n  host: app.com\n  trafficPolicy:\n    loadBalancer: {lb}\n"
        )
    };
    let cases: [(&str, Option<String>, Option<&str>); 4] = [
        ("no destination rule", None, None),
        (
            "consistentHash cookie",
            Some(rule("{consistentHash: {httpCookie: {name: user-session, ttl: 0s}}}")),
            Some("cookie"),
        ),
        ("consistentHash header", Some(rule("{consistentHash: {httpHeaderName: x-session-id}}")), Some("header")),
        ("without consistentHash", Some(rule("{simple: ROUND_ROBIN}")), None),
    ];
    for (name, dr, want) in cases {
        let mut docs = vec![WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, APP_WORKLOAD_ENTRY];
        if let Some(d) = &dr {
            docs.push(d);
        }
        let (mesh, class) = setup(&docs);
        let l = main_internal(&mesh, &class);
        let rc = route_config(l.filter_chains.iter().find(|c| c.name == "inbound-vip|80|http|app.com").unwrap());
        let Some(route::route::Action::Route(a)) = rc.virtual_hosts[0].routes[0].action.as_ref() else { panic!() };
        use route::route_action::hash_policy::PolicySpecifier;
        let got = a.hash_policy.first().and_then(|h| h.policy_specifier.as_ref()).map(|p| match p {
            PolicySpecifier::Cookie(c) => {
                assert_eq!(c.name, "user-session", "{name}");
                "cookie"
            }
            PolicySpecifier::Header(h) => {
                assert_eq!(h.header_name, "x-session-id", "{name}");
                "header"
            }
            _ => "other",
        });
        assert_eq!(got, want, "{name}");
    }
}

/// A waypoint for workloads: a pod that uses it is reached by its address
/// on any port (istiod's direct chains, `buildWaypointInternal`): an IP
/// range to the direct HTTP or TCP chain by the sniffed protocol, and the
/// HTTP inspector on every port.
#[test]
fn workloads_bound_to_a_waypoint_reach_its_direct_chains() {
    let gateway = WAYPOINT_GATEWAY.replace(
        "  name: waypoint\n  namespace: default\n",
        "  name: waypoint\n  namespace: default\n  labels: {istio.io/waypoint-for: all}\n",
    );
    assert!(gateway.contains("waypoint-for"), "{gateway}");
    let pod = r#"apiVersion: v1
kind: Pod
metadata:
  name: worker
  namespace: default
  labels: {app: worker, istio.io/use-waypoint: waypoint}
  annotations: {ambient.istio.io/redirection: enabled}
spec: {}
status:
  conditions: [{status: "True", type: Ready}]
  podIP: 1.1.1.7
"#;
    let (mesh, class) = setup(&[&gateway, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, APP_WORKLOAD_ENTRY, pod]);
    assert_eq!(mesh.waypoint_workloads.get("default/waypoint"), Some(&vec!["1.1.1.7".to_owned()]));
    let l = main_internal(&mesh, &class);
    let Some(Matcher { matcher_type: Some(matcher::MatcherType::MatcherTree(tree)), .. }) = &l.filter_chain_matcher
    else {
        panic!()
    };
    let Some(matcher::matcher_tree::TreeType::CustomMatch(ip)) = &tree.tree_type else { panic!() };
    let ip = IpMatcher::decode(ip.typed_config.as_ref().unwrap().value.as_slice()).unwrap();
    let direct =
        ip.range_matchers.iter().find(|r| r.ranges.iter().any(|c| c.address_prefix == "1.1.1.7")).expect("the pod");
    assert!(format!("{direct:?}").contains("direct-http") && format!("{direct:?}").contains("direct-tcp"));
    let http = l.listener_filters.iter().find(|f| f.name == "envoy.filters.listener.http_inspector").unwrap();
    assert!(http.filter_disabled.is_none(), "any port of a workload may be HTTP");
}

const JWKS: &str = r#"{"keys":[{"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM","use":"enc","kid":"1"}]}"#;

/// Whether chain `name` of `l` has a jwt_authn filter.
fn has_jwt(l: &Listener, name: &str) -> bool {
    http_filters(l, name).iter().any(|f| f.name == "envoy.filters.http.jwt_authn")
}

/// TestWaypointRequestAuth: a RequestAuthentication targeting the
/// ServiceEntry `app` reaches its chain in the waypoint, not `not-app`'s.
#[test]
fn waypoint_request_auth() {
    let ra = format!(
        "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: jwt-on-waypoint, namespace: default}}\n\
         spec:\n  targetRefs: [{{group: networking.istio.io, kind: ServiceEntry, name: app}}]\n  jwtRules: [{{issuer: example.ietf.org, jwks: '{JWKS}'}}]\n"
    );
    let not_app = r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: not-app
  namespace: default
  labels: {istio.io/use-waypoint: waypoint}
spec:
  hosts: [not-app.com]
  addresses: [2.3.4.5]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: app}}
"#;
    let (mesh, class) = setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, not_app, &ra]);
    let l = main_internal(&mesh, &class);
    assert!(has_jwt(&l, "inbound-vip|80|http|app.com"));
    assert!(!has_jwt(&l, "inbound-vip|80|http|not-app.com"));
}

/// TestCrossNamespaceWaypointRequestAuth: services of namespace `app`
/// use the waypoint of `default` (`istio.io/use-waypoint-namespace`, its
/// listener allowing every namespace); the RequestAuthentication of `app`
/// targeting `app` reaches its chain there, not `not-app`'s.
#[test]
fn cross_namespace_waypoint_request_auth() {
    let ra = format!(
        "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: jwt-on-waypoint, namespace: app}}\n\
         spec:\n  targetRefs: [{{group: networking.istio.io, kind: ServiceEntry, name: app}}]\n  jwtRules: [{{issuer: example.ietf.org, jwks: '{JWKS}'}}]\n"
    );
    let gateway = WAYPOINT_GATEWAY.replace(
        "      protocol: HBONE\n",
        "      protocol: HBONE\n      allowedRoutes:\n        namespaces:\n          from: All\n",
    );
    let entry = |name: &str, host: &str, ip: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {name}\n  namespace: app\n  labels:\n    \
             istio.io/use-waypoint: waypoint\n    istio.io/use-waypoint-namespace: default\nspec:\n  hosts: [{host}]\n  addresses: [{ip}]\n  \
             ports: [{{number: 80, name: http, protocol: HTTP}}]\n  resolution: STATIC\n  workloadSelector: {{labels: {{app: app}}}}\n"
        )
    };
    let (app, not_app) = (entry("app", "app.com", "1.2.3.4"), entry("not-app", "not-app.com", "2.3.4.5"));
    let (mesh, class) = setup(&[&gateway, WAYPOINT_SVC, WAYPOINT_INSTANCE, &app, &not_app, &ra]);
    let l = main_internal(&mesh, &class);
    assert!(has_jwt(&l, "inbound-vip|80|http|app.com"));
    assert!(!has_jwt(&l, "inbound-vip|80|http|not-app.com"));
}

/// TestWaypointTelemetry: a Telemetry targeting the ServiceEntry `app`
/// gives its chain an access log, the stats filter and a tracer; `not-app`
/// gets none of them (the mesh config of `setupWaypointTest`: istiod's
/// defaults and an `otel` tracer).
#[test]
fn waypoint_telemetry() {
    let telemetry = r#"apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {name: logs, namespace: default}
spec:
  targetRefs: [{kind: ServiceEntry, name: app, group: networking.istio.io}]
  accessLogging: [{providers: [{name: envoy}]}]
  metrics: [{providers: [{name: prometheus}]}]
  tracing: [{providers: [{name: otel}]}]
"#;
    let not_app = r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: not-app
  namespace: default
  labels: {istio.io/use-waypoint: waypoint}
spec:
  hosts: [not-app.com]
  addresses: [2.3.4.5]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  workloadSelector: {labels: {app: app}}
"#;
    let docs = [WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, not_app, telemetry];
    let yaml = docs.join("\n---\n");
    let mesh_config = "extensionProviders:\n- name: otel\n  opentelemetry: {service: waypoint.default.svc.cluster.local, port: 15008}\n";
    let model = Arc::new(istiod_mesh::testing::model_in(mesh_config, &yaml));
    let objects = istiod_mesh::testing::objects(&yaml);
    let mut index = istiod_ambient::Index::new();
    index.apply(&objects, None, &istiod_ambient::Settings::default());
    let mut mesh = MeshInput::new(model);
    mesh.waypoints = Arc::new(attachments(&index));
    let (_, class) = setup(&[WAYPOINT_GATEWAY]);
    let l = main_internal(&mesh, &class);
    let chain = |name: &str| manager(l.filter_chains.iter().find(|c| c.name == name).unwrap());
    let (app, not_app) = (chain("inbound-vip|80|http|app.com"), chain("inbound-vip|80|http|not-app.com"));
    assert!(!app.access_log.is_empty(), "{app:?}");
    assert!(app.http_filters.iter().any(|f| f.name == "istio.stats"));
    assert!(app.tracing.as_ref().is_some_and(|t| t.provider.is_some()), "{:?}", app.tracing);
    assert!(not_app.access_log.is_empty());
    assert!(!not_app.http_filters.iter().any(|f| f.name == "istio.stats"));
    assert!(not_app.tracing.as_ref().is_none_or(|t| t.provider.is_none()), "{:?}", not_app.tracing);
    // The tracer's collector is a cluster the waypoint is served
    // (`ExtraWaypointServices`), or Envoy would refuse the listener.
    let v = View::of(&mesh, &class).unwrap();
    let names = v.cluster_names(&mesh);
    assert!(names.contains(&"outbound|15008||waypoint.default.svc.cluster.local".to_owned()), "{names:?}");
}

/// A WasmPlugin attached to the waypoint's Gateway goes into its service
/// chains (an ECDS filter of istiod's name), and its config is served to
/// the waypoint over ECDS; one selecting other workloads does not.
#[test]
fn extensions_attached_to_the_waypoint() {
    use istiod_xds_api::snapshot::{Generator, Kind};
    let plugins = r#"apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: auth, namespace: default}
spec:
  targetRefs: [{kind: Gateway, group: gateway.networking.k8s.io, name: waypoint}]
  url: oci://example.com/auth:1
  phase: AUTHN
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: other, namespace: default}
spec:
  selector: {matchLabels: {app: other}}
  url: oci://example.com/other:1
"#;
    let (mesh, class) =
        setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, APP_WORKLOAD_ENTRY, plugins]);
    let snap = snapshot_of(mesh);
    let g = generator::WithWaypoints;
    let l = Listener::decode(g.generate(&snap, &class, Kind::Listener, MAIN_INTERNAL).unwrap().as_ref()).unwrap();
    let names: Vec<String> = http_filters(&l, "inbound-vip|80|http|app.com").into_iter().map(|f| f.name).collect();
    let auth = "extensions.istio.io/trafficextension/default.auth~istio-translated-wasmplugin";
    assert!(names.iter().any(|n| n == auth), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("default.other")), "{names:?}");
    assert!(g.generate(&snap, &class, Kind::ExtensionConfig, auth).is_some(), "served over ECDS");
}

/// HBONE termination as istiod's `buildConnectTerminateListener`: the
/// peer's certificate must be of the mesh's trust domain, and the CONNECT
/// request's peer identity and addresses go to the filter state the
/// waypoint's policies read (`ConnectAuthorityFilter`).
#[test]
fn connect_terminate_checks_the_trust_domain_and_keeps_the_peer() {
    let (mesh, class) =
        setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, APP_WORKLOAD_ENTRY]);
    let v = View::of(&mesh, &class).unwrap();
    let l = v.listener(CONNECT_TERMINATE).unwrap();
    let chain = &l.filter_chains[0];
    let Some(core::transport_socket::ConfigType::TypedConfig(a)) =
        chain.transport_socket.as_ref().and_then(|t| t.config_type.as_ref())
    else {
        panic!()
    };
    let text = format!("{:?}", tls::DownstreamTlsContext::decode(a.value.as_slice()).unwrap());
    assert!(text.contains("Prefix(\"spiffe://cluster.local/\")"), "{text}");
    let m = manager(chain);
    let authority = m.http_filters.iter().find(|f| f.name == "connect_authority").unwrap();
    let Some(hcm::http_filter::ConfigType::TypedConfig(a)) = &authority.config_type else { panic!() };
    let keys: Vec<String> = HttpSetFilterState::decode(a.value.as_slice())
        .unwrap()
        .on_request_headers
        .into_iter()
        .filter_map(|v| v.key.map(|filter_state_value::Key::ObjectKey(k)| k))
        .collect();
    assert_eq!(
        keys,
        [
            "envoy.filters.listener.original_dst.local_ip",
            "io.istio.connect_authority",
            "envoy.filters.listener.original_dst.remote_ip",
            "io.istio.peer_principal",
            "io.istio.local_principal"
        ]
    );
}

/// A TCP route whose match names source labels never matches in a
/// waypoint (istiod's `matchTCP` with no labels): the chain keeps its own
/// cluster; one without goes to the route's destination.
#[test]
fn tcp_routes_with_source_labels_do_not_match() {
    let objects = |match_: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: db, namespace: default, labels: {{istio.io/use-waypoint: waypoint}}}}\n\
             spec: {{hosts: [db.example.com], addresses: [1.2.3.9], ports: [{{number: 5432, name: tcp, protocol: TCP}}], resolution: STATIC, endpoints: [{{address: 1.1.1.8}}]}}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: db, namespace: default}}\n\
             spec: {{hosts: [db.example.com], tcp: [{{match: [{match_}], route: [{{destination: {{host: other.example.com, port: {{number: 5432}}}}}}]}}]}}\n"
        )
    };
    let cluster_of = |yaml: &str| {
        let (mesh, class) = setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, yaml]);
        let l = main_internal(&mesh, &class);
        let chain = l.filter_chains.iter().find(|c| c.name == "inbound-vip|5432|tcp|db.example.com").unwrap();
        let f = chain.filters.iter().find(|f| f.name == "envoy.filters.network.tcp_proxy").unwrap();
        let Some(listener::filter::ConfigType::TypedConfig(a)) = &f.config_type else { panic!() };
        match tcp::TcpProxy::decode(a.value.as_slice()).unwrap().cluster_specifier {
            Some(tcp::tcp_proxy::ClusterSpecifier::Cluster(c)) => c,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(cluster_of(&objects("{sourceLabels: {app: x}}")), "inbound-vip|5432|tcp|db.example.com");
    assert_eq!(cluster_of(&objects("{port: 5432}")), "outbound|5432||other.example.com");
}

/// A VirtualService route to one destination carries that destination's
/// consistent-hash policy (istiod's `LookupHash` in `translateWaypointRoute`).
#[test]
fn virtual_service_routes_carry_the_destinations_hash_policy() {
    let objects = r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: app, namespace: default}
spec:
  hosts: [app.com]
  http:
  - match: [{uri: {prefix: /api}}]
    route: [{destination: {host: app.com, port: {number: 80}}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: app, namespace: default}
spec:
  host: app.com
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
"#;
    let (mesh, class) =
        setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, APP_SERVICE_ENTRY, APP_WORKLOAD_ENTRY, objects]);
    let l = main_internal(&mesh, &class);
    let rc = route_config(l.filter_chains.iter().find(|c| c.name == "inbound-vip|80|http|app.com").unwrap());
    let Some(route::route::Action::Route(a)) = rc.virtual_hosts[0].routes[0].action.as_ref() else { panic!() };
    use route::route_action::hash_policy::PolicySpecifier;
    match a.hash_policy.first().and_then(|h| h.policy_specifier.as_ref()) {
        Some(PolicySpecifier::Header(h)) => assert_eq!(h.header_name, "x-user"),
        other => panic!("{other:?}"),
    }
}

/// A TCP chain's proxy takes the destination's DestinationRule connection
/// pool: its idle timeout and maximum connection duration.
#[test]
fn tcp_chains_take_the_rules_connection_pool() {
    let objects = r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: default, labels: {istio.io/use-waypoint: waypoint}}
spec: {hosts: [db.example.com], addresses: [1.2.3.9], ports: [{number: 5432, name: tcp, protocol: TCP}], resolution: STATIC, endpoints: [{address: 1.1.1.8}]}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: default}
spec:
  host: db.example.com
  trafficPolicy: {connectionPool: {tcp: {idleTimeout: 30s, maxConnectionDuration: 1h}}}
"#;
    let (mesh, class) = setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE, objects]);
    let l = main_internal(&mesh, &class);
    let chain = l.filter_chains.iter().find(|c| c.name == "inbound-vip|5432|tcp|db.example.com").unwrap();
    let f = chain.filters.iter().find(|f| f.name == "envoy.filters.network.tcp_proxy").unwrap();
    let Some(listener::filter::ConfigType::TypedConfig(a)) = &f.config_type else { panic!() };
    let t = tcp::TcpProxy::decode(a.value.as_slice()).unwrap();
    assert_eq!(t.idle_timeout, Some(Duration { seconds: 30, nanos: 0 }));
    assert_eq!(t.max_downstream_connection_duration, Some(Duration { seconds: 3600, nanos: 0 }));
}

/// The HTTP/2 window sizes of an HBONE CONNECT cluster's protocol options.
fn h2_windows(c: &istiod_proto::envoy::config::cluster::v3::Cluster) -> (Option<u32>, Option<u32>) {
    use istiod_proto::envoy::extensions::upstreams::http::v3 as upstream_http;
    let any = &c.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
    let o = upstream_http::HttpProtocolOptions::decode(any.value.as_slice()).unwrap();
    let Some(upstream_http::http_protocol_options::UpstreamProtocolOptions::ExplicitHttpConfig(e)) =
        o.upstream_protocol_options
    else {
        panic!("{o:?}")
    };
    let Some(upstream_http::http_protocol_options::explicit_http_config::ProtocolConfig::Http2ProtocolOptions(h2)) =
        e.protocol_config
    else {
        panic!()
    };
    (h2.initial_stream_window_size, h2.initial_connection_window_size)
}

/// Ours, on istiod's `h2connectUpgrade` (cluster_waypoint.go):
/// `PILOT_HBONE_INITIAL_STREAM_WINDOW_SIZE` and
/// `PILOT_HBONE_INITIAL_CONNECTION_WINDOW_SIZE` set the CONNECT cluster's
/// HTTP/2 windows when not 0.
#[test]
fn hbone_window_sizes_are_set_when_given() {
    let (mut mesh, class) = setup(&[WAYPOINT_GATEWAY, WAYPOINT_SVC, WAYPOINT_INSTANCE]);
    let mut m = (*mesh.model).clone();
    let mut settings = (*m.mesh).clone();
    settings.hbone_window_sizes = [1 << 20, 1 << 24];
    m.mesh = Arc::new(settings);
    mesh.model = Arc::new(m);
    let v = View::of(&mesh, &class).unwrap();
    let originate = v.cluster(&mesh, CONNECT_ORIGINATE).unwrap();
    assert_eq!(h2_windows(&originate), (Some(1 << 20), Some(1 << 24)));
}
