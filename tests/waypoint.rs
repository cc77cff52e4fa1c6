//! What a waypoint proxy is served, end to end (issue #36): the objects go
//! to the binary through `--configDir` with `PILOT_ENABLE_AMBIENT=true`;
//! grpcio, as the waypoint (node type `waypoint`, its Gateway's label),
//! fetches CDS, LDS and EDS (`tests/py/ads_fetch.py`), decoded with the
//! upstream `xds-protos` descriptors and checked with Envoy's field rules
//! (inner typed configs included). The expected shapes are istiod's
//! (`listener_waypoint.go`, `cluster_waypoint.go`, `endpoint_builder.go`).

use serde_json::{Value, json};

use crate::served::served_with;

const OBJECTS: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: shop
  labels: {istio.io/dataplane-mode: ambient, istio.io/use-waypoint: waypoint}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: waypoint, namespace: shop}
spec:
  gatewayClassName: istio-waypoint
  listeners: [{name: mesh, port: 15008, protocol: HBONE}]
status:
  addresses: [{type: Hostname, value: waypoint.shop.svc.cluster.local}]
---
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  clusterIP: 10.96.0.20
  selector: {app: reviews}
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Pod
metadata:
  name: reviews-v1
  namespace: shop
  labels: {app: reviews, version: v1}
  annotations: {ambient.istio.io/redirection: enabled}
spec: {serviceAccountName: reviews}
status:
  podIP: 10.1.0.1
  conditions: [{type: Ready, status: 'True'}]
---
apiVersion: v1
kind: Pod
metadata:
  name: reviews-v2
  namespace: shop
  labels: {app: reviews, version: v2}
spec: {serviceAccountName: reviews}
status:
  podIP: 10.1.0.2
  conditions: [{type: Ready, status: 'True'}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-1
  namespace: shop
  labels: {kubernetes.io/service-name: reviews}
addressType: IPv4
ports: [{name: http, port: 9080}]
endpoints:
- addresses: [10.1.0.1]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: reviews-v1, namespace: shop}
- addresses: [10.1.0.2]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: reviews-v2, namespace: shop}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - route:
    - {destination: {host: reviews, subset: v1}, weight: 80}
    - {destination: {host: reviews, subset: v2}, weight: 20}
---
apiVersion: v1
kind: Service
metadata: {name: other, namespace: elsewhere}
spec:
  clusterIP: 10.96.0.30
  ports: [{name: http, port: 80}]
";

const HOST: &str = "reviews.shop.svc.cluster.local";

fn waypoint_served() -> Value {
    let labels = json!({"gateway.networking.k8s.io/gateway-name": "waypoint", "gateway.istio.io/managed": "istio.io-mesh-controller"});
    served_with(
        "waypoint",
        OBJECTS,
        "",
        "shop",
        labels,
        "10.1.0.9",
        &[("PGV", "1"), ("EDS", "1"), ("PILOT_ENABLE_AMBIENT", "true")],
    )
}

fn typed<'a>(v: &'a Value, name: &str) -> &'a Value {
    v.as_array()
        .and_then(|a| a.iter().find(|f| f["name"] == name))
        .map(|f| &f["typedConfig"])
        .unwrap_or_else(|| panic!("no {name} in {v}"))
}

/// The served waypoint config: valid by Envoy's rules, istiod's three
/// listeners and fixed clusters, the VirtualService's 80/20 split over the
/// waypoint's own subset clusters, the ambient endpoint tunnelled.
#[test]
fn waypoint_is_served_its_own_config() {
    let got = waypoint_served();
    assert_eq!(got["pgv_errors"], json!([]), "Envoy's field rules");
    let listeners: Vec<&String> = got["listeners"].as_object().unwrap().keys().collect();
    assert_eq!(listeners, ["connect_originate", "connect_terminate", "main_internal"]);

    // connect_terminate: 0.0.0.0:15008, mutual TLS 1.3, CONNECT to main_internal.
    let ct = &got["listeners"]["connect_terminate"];
    assert_eq!(ct["address"]["socketAddress"], json!({"address": "0.0.0.0", "portValue": 15008}));
    let chain = &ct["filterChains"][0];
    let tls = &chain["transportSocket"]["typedConfig"];
    assert_eq!(tls["requireClientCertificate"], json!(true));
    assert_eq!(tls["commonTlsContext"]["tlsParams"]["tlsMinimumProtocolVersion"], "TLSv1_3");
    let hcm = typed(&chain["filters"], "envoy.filters.network.http_connection_manager");
    let route = &hcm["routeConfig"]["virtualHosts"][0]["routes"][0];
    assert!(route["match"]["connectMatcher"].is_object(), "{route}");
    assert_eq!(route["route"]["cluster"], "main_internal");
    assert_eq!(hcm["http2ProtocolOptions"]["allowConnect"], json!(true));

    // main_internal: the Service's VIP, its HTTP chain with the split.
    let mi = &got["listeners"]["main_internal"];
    assert!(mi["internalListener"].is_object());
    let ranges = &mi["filterChainMatcher"]["matcherTree"]["customMatch"]["typedConfig"]["rangeMatchers"];
    assert_eq!(ranges[0]["ranges"], json!([{"addressPrefix": "10.96.0.20", "prefixLen": 32}]), "{mi}");
    let http_chain = format!("inbound-vip|9080|http|{HOST}");
    let chain = mi["filterChains"].as_array().unwrap().iter().find(|c| c["name"] == http_chain.as_str()).unwrap();
    let hcm = typed(&chain["filters"], "envoy.filters.network.http_connection_manager");
    let weighted = &hcm["routeConfig"]["virtualHosts"][0]["routes"][0]["route"]["weightedClusters"]["clusters"];
    assert_eq!(
        weighted
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap(), c["weight"].as_u64().unwrap()))
            .collect::<Vec<_>>(),
        [
            (format!("inbound-vip|9080|http/v1|{HOST}").as_str(), 80),
            (format!("inbound-vip|9080|http/v2|{HOST}").as_str(), 20)
        ]
    );

    // Clusters: the fixed ones and the service's, per subset; nothing of
    // the service the waypoint does not serve.
    let clusters = got["clusters"].as_object().unwrap();
    for name in ["main_internal", "encap", "connect_originate"] {
        assert!(clusters.contains_key(name), "{name}: {:?}", clusters.keys());
    }
    for sub in ["http", "http/v1", "http/v2"] {
        let c = &clusters[&format!("inbound-vip|9080|{sub}|{HOST}")];
        assert_eq!(c["transportSocket"]["name"], "internal_upstream", "{c}");
    }
    assert!(!clusters.keys().any(|k| k.contains("other.elsewhere")), "{:?}", clusters.keys());
    let co = &clusters["connect_originate"];
    assert_eq!(co["type"], "ORIGINAL_DST");
    assert_eq!(co["originalDstLbConfig"]["upstreamPortOverride"], json!(15008));

    // EDS: the ambient pod through connect_originate, the other direct.
    let cla = &got["endpoints"][&format!("inbound-vip|9080|http|{HOST}")];
    let addresses: Vec<&Value> = cla["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l["lbEndpoints"].as_array().unwrap())
        .map(|e| &e["endpoint"]["address"])
        .collect();
    assert!(addresses.contains(&&json!({"envoyInternalAddress": {"serverListenerName": "connect_originate", "endpointId": "10.1.0.1:9080"}})), "{cla}");
    assert!(addresses.contains(&&json!({"socketAddress": {"address": "10.1.0.2", "portValue": 9080}})), "{cla}");
    let v1 = &got["endpoints"][&format!("inbound-vip|9080|http/v1|{HOST}")];
    assert_eq!(v1["endpoints"][0]["lbEndpoints"].as_array().map(Vec::len), Some(1), "{v1}");
}

/// A sidecar in an ambient mesh sends HBONE (`PILOT_ENABLE_SENDING_HBONE`,
/// on with ambient): the `connect_originate` cluster and listener, its
/// outbound clusters able to tunnel (`applyHBONETransportSocketMatches`),
/// the ambient pod's endpoint through `connect_originate` with the
/// `tunnel: http` mark, the other pod direct.
#[test]
fn sidecar_sends_hbone_to_ambient_workloads() {
    let got = served_with(
        "sidecar",
        OBJECTS,
        "",
        "shop",
        json!({"app": "client"}),
        "10.1.0.50",
        &[("PGV", "1"), ("EDS", "1"), ("PILOT_ENABLE_AMBIENT", "true")],
    );
    assert_eq!(got["pgv_errors"], json!([]), "Envoy's field rules");
    assert!(
        got["listeners"]["connect_originate"]["internalListener"].is_object(),
        "{:?}",
        got["listeners"].as_object().unwrap().keys()
    );
    let co = &got["clusters"]["connect_originate"];
    assert_eq!(co["type"], "ORIGINAL_DST", "{co}");
    let c = &got["clusters"][&format!("outbound|9080||{HOST}")];
    let matches: Vec<&str> =
        c["transportSocketMatches"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(matches[0], "hbone", "{c}");
    assert_eq!(c["transportSocketMatches"][0]["match"], json!({"tunnel": "http"}));
    let cla = &got["endpoints"][&format!("outbound|9080||{HOST}")];
    let eps: Vec<&Value> =
        cla["endpoints"].as_array().unwrap().iter().flat_map(|l| l["lbEndpoints"].as_array().unwrap()).collect();
    let tunnelled = eps
        .iter()
        .find(|e| e["endpoint"]["address"]["envoyInternalAddress"].is_object())
        .expect("a tunnelled endpoint");
    assert_eq!(
        tunnelled["endpoint"]["address"]["envoyInternalAddress"],
        json!({"serverListenerName": "connect_originate", "endpointId": "10.1.0.1:9080"})
    );
    assert_eq!(tunnelled["metadata"]["filterMetadata"]["envoy.transport_socket_match"], json!({"tunnel": "http"}));
    assert_eq!(
        tunnelled["metadata"]["filterMetadata"]["envoy.filters.listener.original_dst"],
        json!({"local": "10.1.0.1:9080"})
    );
    assert!(eps.iter().any(|e| e["endpoint"]["address"]["socketAddress"]["address"] == "10.1.0.2"), "{cla}");
}

/// Without ambient, a sidecar's config has none of it.
#[test]
fn sidecar_without_ambient_sends_no_hbone() {
    let got = served_with("sidecar", OBJECTS, "", "shop", json!({"app": "client"}), "10.1.0.50", &[("EDS", "1")]);
    assert!(got["listeners"].get("connect_originate").is_none());
    assert!(got["clusters"].get("connect_originate").is_none());
    let c = &got["clusters"][&format!("outbound|9080||{HOST}")];
    assert!(!c.to_string().contains("hbone"), "{c}");
}

/// A connected waypoint: in `/debug/syncz` with its type, its resources in
/// `/debug/config_dump` (Envoy's shape), a VirtualService change on its
/// Service pushed to it, an unrelated workload not (upstream's
/// `TestWaypointScopedAddressPush`), a service that attaches to it again.
#[test]
fn a_connected_waypoint_is_debuggable_and_pushed_to() {
    use crate::ads_client::{connect, runtime};
    use istiod_proto::envoy::config::listener::v3::Listener;
    use istiod_proto::prost::Message;
    let names_of = |r: &istiod_proto::envoy::service::discovery::v3::DiscoveryResponse| -> Vec<String> {
        r.resources.iter().map(|a| Listener::decode(a.value.as_slice()).unwrap().name).collect()
    };
    use crate::server::{Server, get, wait_for};
    use istiod_proto::envoy::config::core::v3::Node;
    use istiod_proto::envoy::service::discovery::v3::DiscoveryRequest;
    use istiod_proto::prost_types::{Struct, Value as PbValue, value::Kind as PbKind};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("objects.yaml"), OBJECTS).unwrap();
    let s = Server::start(dir.path(), &[], &[("PILOT_ENABLE_AMBIENT", "true")], None);
    let string = |v: &str| PbValue { kind: Some(PbKind::StringValue(v.into())) };
    let labels = Struct { fields: [("gateway.networking.k8s.io/gateway-name".to_owned(), string("waypoint"))].into() };
    let node = Node {
        id: "waypoint~10.1.0.9~waypoint-abc.shop~shop.svc.cluster.local".into(),
        metadata: Some(Struct {
            fields: [
                ("NAMESPACE".to_owned(), string("shop")),
                ("LABELS".to_owned(), PbValue { kind: Some(PbKind::StructValue(labels)) }),
            ]
            .into(),
        }),
        ..Default::default()
    };
    let listeners = istiod_proto::type_url::LISTENER;
    let rt = runtime();
    rt.block_on(async {
        let mut c = connect(s.grpc, false).await;
        c.sotw(DiscoveryRequest { node: Some(node), type_url: listeners.into(), ..Default::default() });
        let r = c.recv().await;
        let mut names = names_of(&r);
        names.sort();
        assert_eq!(names, ["connect_originate", "connect_terminate", "main_internal"]);
        c.ack(&r, &[]);
        let (_, syncz) = get(s.http, "/debug/syncz").unwrap();
        let syncz: Value = serde_json::from_str(&syncz).unwrap();
        let me = syncz.as_array().and_then(|a| a.iter().find(|p| p["proxy_type"] == "waypoint"));
        assert!(me.is_some(), "{syncz:#}");
        let id = me.unwrap()["proxy"].as_str().unwrap().to_owned();
        let (code, dump) = get(s.http, &format!("/debug/config_dump?proxyID={id}")).unwrap();
        assert_eq!(code, 200, "{dump}");
        assert!(dump.contains("main_internal") && dump.contains("connect_terminate"), "{dump}");
        // The VirtualService's split changes: main_internal is pushed again.
        std::fs::write(
            dir.path().join("objects.yaml"),
            OBJECTS.replace("weight: 80", "weight: 70").replace("weight: 20", "weight: 30"),
        )
        .unwrap();
        let r = tokio::time::timeout(Duration::from_secs(20), c.recv()).await.expect("a push");
        assert!(names_of(&r).contains(&"main_internal".to_owned()), "{:?}", names_of(&r));
        c.ack(&r, &[]);
        // TestWaypointScopedAddressPush: a workload unrelated to the
        // waypoint changes nothing of its listeners: nothing is pushed...
        std::fs::write(
            dir.path().join("unrelated.yaml"),
            "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: unrelated, namespace: elsewhere}\nspec: {address: 9.9.9.9}\n",
        )
        .unwrap();
        c.expect_silence(Duration::from_secs(2)).await;
        // ...while a service that attaches to it is.
        std::fs::write(
            dir.path().join("app2.yaml"),
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: app2, namespace: shop}\n\
             spec: {hosts: [app2.com], addresses: [1.2.3.5], ports: [{number: 80, name: http, protocol: HTTP}], resolution: STATIC}\n",
        )
        .unwrap();
        let r = tokio::time::timeout(Duration::from_secs(20), c.recv()).await.expect("a push for the new service");
        assert!(names_of(&r).contains(&"main_internal".to_owned()));
        c.ack(&r, &[]);
    });
    wait_for("the server still serves", Duration::from_secs(5), || {
        get(s.http, "/ready").is_some_and(|(c, _)| c == 200)
    });
}
