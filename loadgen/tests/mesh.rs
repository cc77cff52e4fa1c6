//! `loadgen mesh` writes what its scenario says, in a form pilot-discovery's
//! own config-directory loader accepts without a single rejected document.

use istiod_config::istio::IstioSpec;
use istiod_loadgen::mesh;
use istiod_loadgen::scenario::{ChurnKind, Connect, PRESETS, Scenario, ScenarioError};

#[test]
fn every_preset_loads() {
    for p in PRESETS {
        let s = Scenario::load(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert_eq!(s.name, *p);
    }
    assert_eq!(Scenario::load("eds-churn").unwrap().churn.unwrap().kind, ChurnKind::Eds);
    assert_eq!(Scenario::load("config-churn").unwrap().churn.unwrap().kind, ChurnKind::Config);
    assert_eq!(Scenario::load("connect-storm").unwrap().connect, Connect::Storm);
    let large = Scenario::load("large").unwrap();
    assert_eq!((large.services, large.sidecars), (1000, 10_000));
}

#[test]
fn istio_perf_is_a_valid_config_dir_of_the_stated_shape() {
    let s = Scenario::load("istio-perf").unwrap();
    let dir = tempfile::tempdir().unwrap();
    mesh::write(&s, dir.path()).unwrap();
    let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", &loaded.errors[..loaded.errors.len().min(3)]);
    let o = &loaded.objects;
    assert_eq!(o.services.len(), 1000);
    assert_eq!(o.pods.len(), 2000);
    assert_eq!(o.endpoint_slices.len(), 1000);
    assert_eq!(o.nodes.len(), 3);
    assert_eq!(o.namespaces.len(), 21, "20 and istio-system");
    let count = |f: fn(&IstioSpec) -> bool| o.istio.iter().filter(|x| f(&x.spec)).count();
    assert_eq!(count(|s| matches!(s, IstioSpec::Sidecar(_))), 20, "every namespace isolated");
    assert_eq!(count(|s| matches!(s, IstioSpec::VirtualService(_))), 1000);
    assert_eq!(count(|s| matches!(s, IstioSpec::DestinationRule(_))), 1000);
    // Pod addresses are unique.
    let mut ips: Vec<&str> = o.pods.iter().filter_map(|p| p.status.pod_ip.as_deref()).collect();
    ips.sort_unstable();
    ips.dedup();
    assert_eq!(ips.len(), 2000);
}

#[test]
fn partial_isolation_and_determinism() {
    let s = Scenario::load("large").unwrap();
    assert_eq!((0..s.namespaces).filter(|n| mesh::isolated(&s, *n)).count(), 18, "90% of 20");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let small = Scenario { services: 40, sidecars: 100, ..s };
    mesh::write(&small, a.path()).unwrap();
    mesh::write(&small, b.path()).unwrap();
    for i in 0..small.services {
        let f = mesh::service_file(&small, i);
        assert_eq!(std::fs::read(a.path().join(&f)).unwrap(), std::fs::read(b.path().join(&f)).unwrap());
    }
    let loaded = istiod_kubewatch::config_dir::load(a.path()).unwrap();
    assert!(loaded.errors.is_empty());
    assert_eq!(loaded.objects.pods.len(), 100);
}

#[test]
fn bad_scenarios_say_why() {
    assert!(matches!(Scenario::load("no-such-scenario"), Err(ScenarioError::Unknown(_))));
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s.yaml");
    std::fs::write(&f, "name: x\nnamespaces: 5\nservices: 2\nsidecars: 4\n").unwrap();
    let e = Scenario::load(f.to_str().unwrap()).unwrap_err();
    assert!(e.to_string().contains("cannot fill"), "{e}");
    std::fs::write(&f, "name: x\nnamespaces: 1\nservices: 2\nsidecars: 4\nbogus: 1\n").unwrap();
    assert!(Scenario::load(f.to_str().unwrap()).unwrap_err().to_string().contains("bogus"));
}

#[test]
fn the_binary_writes_a_preset_and_rejects_an_unknown_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["mesh", "--scenario", "istio-perf", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.path().join("ns-0/00-namespace.yaml").exists());
    assert!(dir.path().join("ns-0/svc-0.yaml").exists());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["mesh", "--scenario", "nope", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown scenario"));
}

#[test]
fn a_tweaked_service_file_scales_its_endpoints_and_shifts_its_weights() {
    let s = Scenario { services: 4, sidecars: 12, namespaces: 2, ..Scenario::load("istio-perf").unwrap() };
    let dir = tempfile::tempdir().unwrap();
    mesh::write(&s, dir.path()).unwrap();
    let tweak = mesh::Tweak { dropped_endpoints: 2, v1_weight: 63 };
    std::fs::write(dir.path().join(mesh::service_file(&s, 1)), mesh::service_yaml(&s, 1, tweak)).unwrap();
    let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let o = &loaded.objects;
    let endpoints = |svc: &str| {
        let e = o.endpoint_slices.iter().find(|e| e.metadata.name == format!("{svc}-1")).unwrap();
        e.endpoints.len()
    };
    assert_eq!((endpoints("svc-0"), endpoints("svc-1")), (3, 1), "3 pods each, 2 of svc-1's left out");
    assert_eq!(o.pods.len(), 12, "the pods themselves stay");
    let text = std::fs::read_to_string(dir.path().join(mesh::service_file(&s, 1))).unwrap();
    assert!(text.contains("weight: 63") && text.contains("weight: 37"), "{text}");
    // Every endpoint dropped: an empty slice, still valid.
    let none = mesh::Tweak { dropped_endpoints: 9, ..mesh::Tweak::default() };
    std::fs::write(dir.path().join(mesh::service_file(&s, 1)), mesh::service_yaml(&s, 1, none)).unwrap();
    let loaded = istiod_kubewatch::config_dir::load(dir.path()).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
}
