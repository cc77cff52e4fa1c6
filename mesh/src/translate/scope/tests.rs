use std::path::Path;

use super::*;

use crate::testing::class;

/// Bookinfo without its namespace Sidecar, plus `yaml` (more documents).
fn bookinfo_with(yaml: &str) -> Model {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    std::fs::write(dir.path().join("zz-extra.yaml"), yaml).unwrap();
    let mut loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    loaded.objects.istio.retain(|o| !(matches!(o.spec, IstioSpec::Sidecar(_)) && o.meta.name == "default"));
    Model::build(&loaded.objects, "cluster.local")
}

const REVIEWS: &str = "reviews.bookinfo.svc.cluster.local";
const RATINGS: &str = "ratings.bookinfo.svc.cluster.local";

#[test]
fn without_sidecars_or_export_to_everything_is_visible() {
    let m = bookinfo_with("");
    let s = Scoping::new(&m);
    assert!(!s.active);
    assert!(s.allows(&m, &class("elsewhere", &[]), Kind::Cluster, "outbound|9080||reviews.bookinfo.svc.cluster.local"));
}

#[test]
fn a_sidecar_limits_egress_to_its_hosts_and_the_most_specific_one_wins() {
    let m = bookinfo_with(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: narrow, namespace: bookinfo}\n\
         spec: {egress: [{hosts: [\"./ratings.bookinfo.svc.cluster.local\"]}]}\n---\n\
         apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: pp, namespace: bookinfo}\n\
         spec: {workloadSelector: {labels: {app: productpage}}, egress: [{hosts: [\"bookinfo/*\"]}]}\n",
    );
    let s = Scoping::new(&m);
    assert!(s.active);
    let reviews = class("bookinfo", &[("app", "reviews")]);
    let pp = class("bookinfo", &[("app", "productpage")]);
    let cluster = |h: &str| format!("outbound|9080||{h}");
    assert!(s.allows(&m, &reviews, Kind::Cluster, &cluster(RATINGS)));
    assert!(!s.allows(&m, &reviews, Kind::Cluster, &cluster(REVIEWS)));
    assert!(!s.allows(&m, &reviews, Kind::Endpoint, &cluster(REVIEWS)));
    assert!(s.allows(&m, &pp, Kind::Cluster, &cluster(REVIEWS)), "the workload's own Sidecar");
    // Fixed and inbound resources stay.
    assert!(s.allows(&m, &reviews, Kind::Cluster, "BlackHoleCluster"));
    assert!(s.allows(&m, &reviews, Kind::Cluster, "inbound|9080||"));
    // Virtual hosts of the shared route configuration.
    assert!(s.keeps_virtual_host(&m, &reviews, &format!("{RATINGS}:9080")));
    assert!(!s.keeps_virtual_host(&m, &reviews, &format!("{REVIEWS}:9080")));
    assert!(s.keeps_virtual_host(&m, &reviews, "allow_any"));
    // Other namespaces have no Sidecar and see all.
    assert!(s.allows(&m, &class("default", &[]), Kind::Cluster, &cluster(REVIEWS)));
}

#[test]
fn export_to_hides_services_from_other_namespaces() {
    let m = bookinfo_with(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: ext, namespace: shop}\n\
         spec: {hosts: [api.example.com], exportTo: [\".\"], location: MESH_EXTERNAL, resolution: DNS,\n\
         ports: [{number: 443, name: tls, protocol: TLS}]}\n",
    );
    let s = Scoping::new(&m);
    assert!(s.active);
    let name = "outbound|443||api.example.com";
    assert!(s.allows(&m, &class("shop", &[]), Kind::Cluster, name));
    assert!(!s.allows(&m, &class("bookinfo", &[]), Kind::Cluster, name));
    let svc = &m.services["api.example.com"];
    assert!(exported(svc, "shop") && !exported(svc, "bookinfo"));
}

#[test]
fn egress_host_syntax() {
    let m = bookinfo_with("");
    let svc = &m.services[REVIEWS];
    for (entry, ns, want) in [
        ("*/*", "x", true),
        ("./*", "bookinfo", true),
        ("./*", "x", false),
        ("~/*", "bookinfo", false),
        ("bookinfo/*.svc.cluster.local", "x", true),
        ("bookinfo/*.example.com", "x", false),
        ("*/reviews.bookinfo.svc.cluster.local", "x", true),
        ("*/reviews", "x", false),
        ("no-slash", "x", false),
    ] {
        assert_eq!(egress_host_matches(entry, ns, svc), want, "{entry} from {ns}");
    }
}

#[test]
fn the_bundled_sidecar_keeps_bookinfo_to_its_namespace_and_the_root() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let mut m = Model::build(&istiod_kubewatch::config_dir::load(&dir).unwrap().objects, "cluster.local");
    let mut ext = (*m.services[REVIEWS]).clone();
    ext.hostname = "api.other.svc.cluster.local".into();
    ext.namespace = "other".into();
    m.services.insert(ext.hostname.clone(), Arc::new(ext));
    let s = Scoping::new(&m);
    let reviews = class("bookinfo", &[("app", "reviews")]);
    assert!(s.allows(&m, &reviews, Kind::Cluster, &format!("outbound|9080||{RATINGS}")));
    assert!(!s.allows(&m, &reviews, Kind::Cluster, "outbound|9080||api.other.svc.cluster.local"));
    assert!(s.allows(&m, &class("other", &[]), Kind::Cluster, "outbound|9080||api.other.svc.cluster.local"));
}

#[test]
fn an_egress_port_limits_its_hosts_to_that_port() {
    let mut m = bookinfo_with(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: narrow, namespace: bookinfo}\n\
         spec: {egress: [{port: {number: 9080, protocol: HTTP, name: http}, hosts: [\"./reviews.bookinfo.svc.cluster.local\"]},\n\
         {hosts: [\"./ratings.bookinfo.svc.cluster.local\"]}]}\n",
    );
    // reviews also listens on 9090 for this test.
    let reviews = Arc::make_mut(m.services.get_mut(REVIEWS).unwrap());
    let mut extra = reviews.ports[0].clone();
    extra.port = 9090;
    reviews.ports.push(extra);
    let s = Scoping::new(&m);
    let c = class("bookinfo", &[("app", "productpage")]);
    assert!(s.allows(&m, &c, Kind::Cluster, &format!("outbound|9080||{REVIEWS}")));
    assert!(!s.allows(&m, &c, Kind::Cluster, &format!("outbound|9090||{REVIEWS}")), "not listed for 9090");
    assert!(s.allows(&m, &c, Kind::Cluster, &format!("outbound|9080||{RATINGS}")), "the catch-all listener");
    assert!(s.keeps_virtual_host(&m, &c, &format!("{REVIEWS}:9080")));
    assert!(!s.keeps_virtual_host(&m, &c, &format!("{REVIEWS}:9090")));
    assert!(s.allows(&m, &c, Kind::Listener, "0.0.0.0_9080"));
}
