//! kube-rs watchers against the fake API server over real HTTP: initial
//! list, watch events, bookmarks, a dropped watch, an outage with a 410
//! relist after it, and the same objects giving the same result as the
//! config directory.

use std::path::Path;
use std::time::Duration;

use istiod_config::objects::Objects;
use istiod_kubewatch::fake::{FakeApi, core_resources, istio_resources};
use istiod_kubewatch::kube_source;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;

fn plural(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Service" => "services",
        "EndpointSlice" => "endpointslices",
        "Pod" => "pods",
        "Node" => "nodes",
        "Namespace" => "namespaces",
        "VirtualService" => "virtualservices",
        "DestinationRule" => "destinationrules",
        "Gateway" => "gateways",
        "ServiceEntry" => "serviceentries",
        "WorkloadEntry" => "workloadentries",
        "Sidecar" => "sidecars",
        "PeerAuthentication" => "peerauthentications",
        "AuthorizationPolicy" => "authorizationpolicies",
        "RequestAuthentication" => "requestauthentications",
        _ => return None,
    })
}

fn example_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo")
}

/// Loads the bundled example's objects into the fake.
fn load_examples(api: &FakeApi) {
    load_examples_where(api, |_| true);
}

/// Loads the bundled example's objects of the kinds (plurals) `keep` takes.
fn load_examples_where(api: &FakeApi, keep: impl Fn(&str) -> bool) {
    for e in std::fs::read_dir(example_dir()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = Value::deserialize(doc).unwrap();
            if let Some(p) = v["kind"].as_str().and_then(plural).filter(|p| keep(p)) {
                api.apply(p, v);
            }
        }
    }
}

/// Objects in a canonical order (sources differ in order only).
fn canonical(mut o: Objects) -> Objects {
    // The API server gives objects their uid; files carry none.
    let uids = o.services.iter_mut().map(|x| &mut x.metadata);
    let uids = uids.chain(o.endpoint_slices.iter_mut().map(|x| &mut x.metadata));
    let uids = uids.chain(o.pods.iter_mut().map(|x| &mut x.metadata));
    let uids = uids.chain(o.nodes.iter_mut().map(|x| &mut x.metadata));
    let uids = uids.chain(o.namespaces.iter_mut().map(|x| &mut x.metadata));
    let uids = uids.chain(o.secrets.iter_mut().map(|x| &mut x.metadata));
    let uids = uids.chain(o.config_maps.iter_mut().map(|x| &mut x.metadata));
    let uids = uids.chain(o.ingresses.iter_mut().map(|x| &mut x.metadata));
    let uids = uids.chain(o.istio.iter_mut().map(|x| &mut x.meta));
    for m in uids {
        m.uid = None;
    }
    let k = |m: &istiod_config::meta::Meta| (m.ns().to_owned(), m.name.clone());
    o.services.sort_by_key(|x| k(&x.metadata));
    o.endpoint_slices.sort_by_key(|x| k(&x.metadata));
    o.pods.sort_by_key(|x| k(&x.metadata));
    o.nodes.sort_by_key(|x| k(&x.metadata));
    o.namespaces.sort_by_key(|x| k(&x.metadata));
    o.istio.sort_by_key(|x| (x.kind(), k(&x.meta)));
    o
}

async fn next_matching(rx: &mut watch::Receiver<Option<Objects>>, what: &str, f: impl Fn(&Objects) -> bool) -> Objects {
    let r = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some(o) = rx.borrow_and_update().clone()
                && f(&o)
            {
                return o;
            }
            rx.changed().await.expect("source alive");
        }
    })
    .await;
    r.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

async fn start() -> (FakeApi, watch::Receiver<Option<Objects>>) {
    let api = FakeApi::start().await.unwrap();
    for r in core_resources().into_iter().chain(istio_resources()) {
        api.install(r);
    }
    load_examples(&api);
    let client = kube_source::client_for(&api.url()).unwrap();
    let (tx, rx) = watch::channel(None);
    tokio::spawn(kube_source::run(client, tx));
    (api, rx)
}

fn has_service(o: &Objects, name: &str) -> bool {
    o.services.iter().any(|s| s.metadata.name == name)
}

fn service(name: &str, port: u16) -> Value {
    json!({"metadata": {"name": name, "namespace": "bookinfo"}, "spec": {"clusterIP": "10.96.20.1", "ports": [{"name": "http", "port": port}]}})
}

#[tokio::test]
async fn same_objects_as_the_config_directory() {
    let (_api, mut rx) = start().await;
    let from_kube = next_matching(&mut rx, "initial sync", |o| !o.services.is_empty()).await;
    let from_dir = istiod_kubewatch::config_dir::load(&example_dir()).unwrap().objects;
    assert_eq!(canonical(from_kube), canonical(from_dir));
}

#[tokio::test]
async fn watch_events_bookmarks_and_a_dropped_watch() {
    let (api, mut rx) = start().await;
    next_matching(&mut rx, "initial sync", |o| !o.services.is_empty()).await;
    api.apply("services", service("extra", 8000));
    next_matching(&mut rx, "added", |o| has_service(o, "extra")).await;
    api.apply("services", service("extra", 8001));
    next_matching(&mut rx, "modified", |o| {
        o.services.iter().any(|s| s.metadata.name == "extra" && s.spec.ports[0].port == 8001)
    })
    .await;
    // Idle watches get bookmarks and keep going: no relist.
    let before = api.requests();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(api.requests(), before, "bookmarks must not cause requests");
    // A dropped watch resumes from its last version: nothing is missed.
    api.drop_watches();
    api.delete("services", "bookinfo", "extra");
    next_matching(&mut rx, "deleted after the drop", |o| !has_service(o, "extra")).await;
}

#[tokio::test]
async fn outage_then_410_relist_loses_and_duplicates_nothing() {
    let (api, mut rx) = start().await;
    let initial = next_matching(&mut rx, "initial sync", |o| !o.services.is_empty()).await;
    api.set_down(true);
    // Changes the watchers cannot see while the API is down, then the
    // history is compacted: their resume version is now too old (410).
    api.apply("services", service("during-outage", 9000));
    api.delete("services", "bookinfo", "ratings");
    api.compact();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        rx.borrow().clone().map(canonical),
        Some(canonical(initial.clone())),
        "last state kept during the outage"
    );
    api.set_down(false);
    let after =
        next_matching(&mut rx, "relisted state", |o| has_service(o, "during-outage") && !has_service(o, "ratings"))
            .await;
    assert_eq!(after.services.len(), initial.services.len(), "one added, one removed, none duplicated");
    assert!(api.gone() > 0, "the watchers' resume version was compacted: 410, then a relist");
    let mut names: Vec<_> = after.services.iter().map(|s| s.metadata.name.clone()).collect();
    names.dedup();
    assert_eq!(names.len(), after.services.len());
}

#[tokio::test]
async fn not_ready_until_every_kind_synced() {
    let api = FakeApi::start().await.unwrap();
    // Nodes are missing: the source must not report a partial state.
    for r in core_resources().into_iter().filter(|r| r.plural != "nodes") {
        api.install(r);
    }
    load_examples_where(&api, |p| ["services", "endpointslices", "pods", "namespaces"].contains(&p));
    let (tx, mut rx) = watch::channel(None);
    tokio::spawn(kube_source::run(kube_source::client_for(&api.url()).unwrap(), tx));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rx.borrow().is_none(), "no objects before every kind has synced");
    api.install(core_resources().into_iter().find(|r| r.plural == "nodes").unwrap());
    next_matching(&mut rx, "sync after the kind appears", |o| o.services.len() >= 5).await;
}

#[tokio::test]
async fn an_absent_crd_is_skipped_and_picked_up_when_it_appears() {
    let api = FakeApi::start().await.unwrap();
    for r in core_resources() {
        api.install(r);
    }
    api.apply("services", service("web", 80));
    let (tx, mut rx) = watch::channel(None);
    tokio::spawn(kube_source::run(kube_source::client_for(&api.url()).unwrap(), tx));
    // No Istio CRDs: the source is still complete.
    next_matching(&mut rx, "sync without CRDs", |o| has_service(o, "web") && o.istio.is_empty()).await;
    // The CRD appears (istioctl install) with an object in it.
    let vs = istio_resources().into_iter().find(|r| r.plural == "virtualservices").unwrap();
    api.install(vs);
    api.apply(
        "virtualservices",
        json!({"metadata": {"name": "web", "namespace": "bookinfo"}, "spec": {"hosts": ["web"], "http": [{"route": [{"destination": {"host": "web"}}]}]}}),
    );
    next_matching(&mut rx, "the VirtualService", |o| o.istio.len() == 1).await;
}

#[tokio::test]
async fn large_lists_come_in_pages() {
    let api = FakeApi::start().await.unwrap();
    for r in core_resources() {
        api.install(r);
    }
    for i in 0..1200 {
        api.apply("services", service(&format!("s{i:04}"), 80));
    }
    let (tx, mut rx) = watch::channel(None);
    tokio::spawn(kube_source::run(kube_source::client_for(&api.url()).unwrap(), tx));
    let o = next_matching(&mut rx, "all 1200 services", |o| o.services.len() == 1200).await;
    let mut names: Vec<_> = o.services.iter().map(|s| s.metadata.name.clone()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 1200, "pages neither overlap nor skip");
    // kube-rs pages by 500: 1200 services take two follow-up pages.
    assert_eq!(api.continued(), 2);
}

async fn next_update(updates: &kube_source::Updates) -> kube_source::Update {
    tokio::time::timeout(Duration::from_secs(20), updates.next()).await.expect("an update")
}

/// Each update names what changed since the previous one, so the control
/// thread need not compare every object (its endpoint and VirtualService
/// fast paths read this); a relist says it does not know.
#[tokio::test]
async fn updates_name_the_objects_that_changed() {
    let api = FakeApi::start().await.unwrap();
    for r in core_resources().into_iter().chain(istio_resources()) {
        api.install(r);
    }
    load_examples(&api);
    let updates = std::sync::Arc::new(kube_source::Updates::default());
    tokio::spawn(kube_source::run_updates(kube_source::client_for(&api.url()).unwrap(), updates.clone()));
    let first = next_update(&updates).await;
    assert!(first.changed.is_none(), "the first list: everything is new");
    assert!(!first.objects.services.is_empty());
    api.apply("services", service("extra", 8000));
    let u = next_update(&updates).await;
    let names: Vec<String> =
        u.changed.unwrap().iter().map(|r| format!("{}/{}/{}", r.kind, r.namespace, r.name)).collect();
    assert_eq!(names, ["Service/bookinfo/extra"]);
    api.apply(
        "virtualservices",
        json!({"metadata": {"name": "extra", "namespace": "bookinfo"}, "spec": {"hosts": ["extra"], "http": [{"route": [{"destination": {"host": "extra"}}]}]}}),
    );
    let u = next_update(&updates).await;
    assert_eq!(u.changed.unwrap().iter().map(|r| r.kind.as_str()).collect::<Vec<_>>(), ["VirtualService"]);
    assert_eq!(u.objects.istio.iter().filter(|o| o.meta.name == "extra").count(), 1, "converted once, in force");
    api.delete("services", "bookinfo", "extra");
    let u = next_update(&updates).await;
    let names: Vec<String> =
        u.changed.unwrap().iter().map(|r| format!("{}/{}/{}", r.kind, r.namespace, r.name)).collect();
    assert_eq!(names, ["Service/bookinfo/extra"], "a deletion is a change");
}

/// Secrets as istiod's informer reads them (pilot/pkg/credentials/kube/
/// secrets.go): every type but Helm releases and service account tokens,
/// `data` decoded from base64; an update arrives like any object's.
#[tokio::test]
async fn secrets_of_the_types_istiod_reads() {
    let (api, mut rx) = start().await;
    next_matching(&mut rx, "initial sync", |o| !o.services.is_empty()).await;
    let secret = |name: &str, ty: &str, data: Value| json!({"metadata": {"name": name, "namespace": "istio-system"}, "type": ty, "data": data});
    // "CERT" and "KEY" in base64.
    api.apply("secrets", secret("tls", "kubernetes.io/tls", json!({"tls.crt": "Q0VSVA==", "tls.key": "S0VZ"})));
    api.apply("secrets", secret("generic", "Opaque", json!({"cert": "Q0VSVA==", "key": "S0VZ"})));
    api.apply("secrets", secret("release", "helm.sh/release.v1", json!({"release": "S0VZ"})));
    api.apply("secrets", secret("token", "kubernetes.io/service-account-token", json!({"token": "S0VZ"})));
    let o = next_matching(&mut rx, "the secrets", |o| o.secrets.len() >= 2).await;
    let mut names: Vec<&str> = o.secrets.iter().map(|s| s.metadata.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["generic", "tls"]);
    let tls = o.secrets.iter().find(|s| s.metadata.name == "tls").unwrap();
    assert_eq!(tls.decoded().get("tls.crt").map(Vec::as_slice), Some(&b"CERT"[..]));
    api.apply("secrets", secret("tls", "kubernetes.io/tls", json!({"tls.crt": "TkVX", "tls.key": "S0VZ"})));
    next_matching(&mut rx, "the rotated secret", |o| {
        o.secrets
            .iter()
            .any(|s| s.metadata.name == "tls" && s.decoded().get("tls.crt").map(Vec::as_slice) == Some(b"NEW"))
    })
    .await;
}

/// TCPRoute and TLSRoute are watched at `v1` as istiod watches them, and at
/// `v1alpha2` where a cluster's CRDs (Gateway API before 1.5) serve only
/// that.
#[tokio::test]
async fn tcp_and_tls_routes_are_read_at_v1_or_v1alpha2() {
    use istiod_kubewatch::fake::{Resource, gateway_api_resources};
    for version in ["v1", "v1alpha2"] {
        let api = FakeApi::start().await.unwrap();
        for r in core_resources() {
            api.install(r);
        }
        for r in gateway_api_resources() {
            api.install(match r.kind {
                "TCPRoute" | "TLSRoute" => Resource { version, ..r },
                _ => r,
            });
        }
        let route = |name: &str| json!({"metadata": {"name": name, "namespace": "shop"}, "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "db", "port": 5432}]}]}});
        api.apply("tcproutes", route("db"));
        api.apply("tlsroutes", route("tls"));
        let (tx, mut rx) = watch::channel(None);
        tokio::spawn(kube_source::run(kube_source::client_for(&api.url()).unwrap(), tx));
        let got = next_matching(&mut rx, &format!("the routes at {version}"), |o| o.gateway_api.len() == 2).await;
        let mut kinds: Vec<&str> = got.gateway_api.iter().map(|o| o.kind()).collect();
        kinds.sort();
        assert_eq!(kinds, ["TCPRoute", "TLSRoute"], "{version}");
    }
}
