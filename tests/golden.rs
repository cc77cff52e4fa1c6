//! Golden files: everything generated for the bundled mesh, decoded with
//! the upstream `xds-protos` types and compared as canonical JSON with
//! `tests/golden/bookinfo/*.json`. After a deliberate change, regenerate
//! with `UPDATE_GOLDEN=1 scripts/test -E 'test(golden)'` and review the diff.

use crate::python;

use std::path::Path;

use istiod_mesh::generator::{MeshGenerator, MeshInput};
use istiod_mesh::model::Model;
use istiod_mesh::node::{NodeType, ProxyClass};
use istiod_mesh::translate;
use istiod_xds::ads::{Generator, Kind, SimpleModel, Snapshot};

#[test]
fn bundled_mesh_matches_the_golden_files() {
    check("examples/bookinfo", "tests/golden/bookinfo", ("bookinfo", &[("app", "details"), ("version", "v1")]));
}

/// One of each translation feature: redirect, direct response, regex and
/// query matches, rewrite, header operations, mirror, CORS, retries and
/// timeouts, consistent hash, port-level and subset policies, SIMPLE TLS,
/// headless and DNS services, TCP listeners, SNI listeners for TLS hosts
/// without addresses; the telemetry filters under the chart's mesh config
/// (`defaultProviders.metrics: [prometheus]`) and a Telemetry selecting
/// the sidecar.
#[test]
fn each_feature_matches_the_golden_files() {
    check("tests/golden/features/input", "tests/golden/features", ("shop", &[("app", "web"), ("version", "v2")]));
}

/// An ingress gateway (issue #14): the listeners, route configurations,
/// clusters and credentials a router of `istio-system` labelled
/// `istio=ingressgateway` is served, from Gateways with HTTP (and an
/// httpsRedirect host), SIMPLE and MUTUAL HTTPS, TCP and PASSTHROUGH
/// servers (istiod's pilot/pkg/networking/core/gateway.go, xds/sds.go).
#[test]
fn ingress_gateway_matches_the_golden_files() {
    let (merged, names) = check_router(
        "tests/golden/gateway/input",
        "tests/golden/gateway",
        ("istio-system", ("istio", "ingressgateway"), ""),
        &["kubernetes://bookinfo-cert", "kubernetes://secure-cert", "kubernetes://secure-cert-cacert"],
    );
    assert_eq!(names, ["0.0.0.0_8080", "0.0.0.0_8443", "0.0.0.0_31400", "0.0.0.0_15443"]);
    assert_eq!(merged.rejected.len(), 1, "the conflicting Gateway's server: {:?}", merged.rejected);
}

/// The Kubernetes Gateway API (issue #14): the router behind a Gateway of
/// class istio is served what istiod makes of its listeners, HTTPRoutes
/// (matches, header filter, weights, redirect, prefix rewrite, timeout,
/// a granted and an ungranted cross-namespace backend) and GRPCRoute
/// (pilot/pkg/config/kube/gateway/conversion.go), and its certificate as
/// `kubernetes-gateway://`; a ListenerSet's HTTPS listener with its own
/// route and certificate.
#[test]
fn gateway_api_matches_the_golden_files() {
    let (merged, names) = check_router(
        "tests/golden/gateway-api/input",
        "tests/golden/gateway-api",
        ("gateways", ("gateway.networking.k8s.io/gateway-name", "gw"), "gw-istio"),
        &["kubernetes-gateway://gateways/secure-cert", "kubernetes-gateway://apps/shop-cert"],
    );
    assert_eq!(names, ["0.0.0.0_8080", "0.0.0.0_8443"]);
    assert!(merged.rejected.is_empty(), "{:?}", merged.rejected);
}

/// Generates what a verified router of `ns` with one label is served
/// (listeners, clusters, the route configurations its servers name and
/// the credentials `secrets`) and checks it against the golden files.
/// Returns its merged Gateways and listener names.
fn check_router(
    input: &str,
    golden: &str,
    (ns, label, service_account): (&str, (&str, &str), &str),
    secrets: &[&str],
) -> (istiod_mesh::model::gateway::MergedGateway, Vec<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let loaded = istiod_kubewatch::config_dir::load(&root.join(input)).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let model = std::sync::Arc::new(Model::build(&loaded.objects, "cluster.local"));
    let router = ProxyClass {
        node_type: NodeType::Router,
        namespace: ns.into(),
        generator: "".into(),
        labels: vec![(label.0.into(), label.1.into())],
        locality: "".into(),
        verified: true,
        service_account: service_account.into(),
        ips: Vec::new(),
        mesh_id: "".into(),
        cluster_id: "".into(),
        version: "".into(),
        metadata: Vec::new(),
    };
    let mesh = MeshInput::new(model.clone());
    let changes = translate::diff(&SimpleModel::default(), &mesh.translation.resources);
    let mut snap =
        Snapshot::new(1, std::time::Instant::now(), std::sync::Arc::new(SimpleModel::default().apply(1, changes).0));
    snap.mesh = Some(std::sync::Arc::new(mesh));
    let merged = istiod_mesh::generator::router::merged(&model, &router);
    let mut names: Vec<(Kind, String)> = Vec::new();
    for kind in [Kind::Listener, Kind::Cluster] {
        names.extend(MeshGenerator.wildcard_names(&snap, &router, kind).iter().map(|n| (kind, n.to_string())));
    }
    names.extend(merged.by_route.keys().map(|n| (Kind::Route, n.clone())));
    names.extend(secrets.iter().map(|s| (Kind::Secret, s.to_string())));
    let resources: Vec<((Kind, String), bytes::Bytes)> = names
        .into_iter()
        .map(|(kind, name)| {
            let body = MeshGenerator.generate(&snap, &router, kind, &name).unwrap_or_else(|| panic!("{kind:?} {name}"));
            ((kind, name), body)
        })
        .collect();
    let listeners: Vec<String> =
        resources.iter().filter(|((k, _), _)| *k == Kind::Listener).map(|((_, n), _)| n.clone()).collect();
    let out = run_golden(&resources, &root.join(golden));
    assert!(out.contains("5 passed, 0 failed"), "Envoy's rules and four kinds (lds, cds, rds, sds): {out}");
    (merged, listeners)
}

/// Also generates the per-class resources of one sidecar (namespace,
/// labels), named `<resource>@<labels>` in the golden files.
fn check(input: &str, golden: &str, (ns, labels): (&str, &[(&str, &str)])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let loaded = istiod_kubewatch::config_dir::load(&root.join(input)).unwrap();
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let objs = loaded.objects;
    // The golden directory's mesh config, if any (the bundled mesh runs on
    // istiod's defaults).
    let mesh = std::fs::read_to_string(root.join(golden).join("mesh.yaml")).unwrap_or_default();
    let mesh = std::sync::Arc::new(istiod_mesh::meshconfig::MeshSettings::parse(&mesh).unwrap());
    let model = std::sync::Arc::new(Model::build_in(&objs, "cluster.local", mesh));
    let class = ProxyClass {
        node_type: NodeType::Sidecar,
        namespace: ns.into(),
        generator: "".into(),
        labels: labels.iter().map(|(k, v)| (std::sync::Arc::from(*k), std::sync::Arc::from(*v))).collect(),
        locality: "".into(),
        verified: false,
        service_account: "".into(),
        ips: Vec::new(),
        mesh_id: "".into(),
        cluster_id: "Kubernetes".into(),
        version: "".into(),
        metadata: Vec::new(),
    };
    let grpc = ProxyClass { generator: "grpc".into(), ..class.clone() };
    let mesh = MeshInput::new(model.clone());
    let names: Vec<(Kind, std::sync::Arc<str>)> = mesh.translation.resources.keys().cloned().collect();
    let changes = translate::diff(&SimpleModel::default(), &mesh.translation.resources);
    let mut snap =
        Snapshot::new(1, std::time::Instant::now(), std::sync::Arc::new(SimpleModel::default().apply(1, changes).0));
    let api_listeners = mesh.translation.api_listeners.clone();
    snap.mesh = Some(std::sync::Arc::new(mesh));
    // Every resource as a proxy of this namespace is served it: proxyless
    // gRPC's API listeners and route configurations as a gRPC client, the
    // rest as the sidecar.
    let mut resources: Vec<((Kind, String), bytes::Bytes)> = Vec::new();
    for (kind, name) in names {
        let proxyless = (kind == Kind::Listener && api_listeners.contains(&name))
            || (kind == Kind::Route && name.starts_with("outbound|"));
        let who = if proxyless { &grpc } else { &class };
        if let Some(body) = MeshGenerator.generate(&snap, who, kind, &name) {
            resources.push(((kind, name.to_string()), body));
        }
    }
    let tag = labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    for kind in [Kind::Listener, Kind::Cluster] {
        for name in MeshGenerator.class_wildcard_names(&snap, &class, kind) {
            let body = MeshGenerator.generate(&snap, &class, kind, &name).expect("per-class resource");
            resources.push(((kind, format!("{name}@{tag}")), body));
        }
    }
    assert!(resources.iter().any(|((k, n), _)| *k == Kind::Listener && n.starts_with("virtualInbound@")));
    let out = run_golden(&resources, &root.join(golden));
    assert!(out.contains("5 passed, 0 failed"), "{out}");
}

/// Decodes `resources` with xds-protos, checks Envoy's field rules and
/// compares them with the golden files of `golden`; its report.
fn run_golden(resources: &[((Kind, String), bytes::Bytes)], golden: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let mut manifest = Vec::new();
    for (i, ((kind, name), bytes)) in resources.iter().enumerate() {
        let file = format!("{i}.bin");
        std::fs::write(dir.path().join(&file), bytes).unwrap();
        manifest.push(serde_json::json!({"kind": kind.short().to_lowercase(), "name": name, "type": kind.type_url(), "file": file}));
    }
    std::fs::write(dir.path().join("manifest.json"), serde_json::to_vec(&manifest).unwrap()).unwrap();
    let mut cmd = std::process::Command::new(python::python());
    cmd.arg(root.join("tests/py/golden.py")).arg(dir.path()).arg(golden);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        cmd.arg("--update");
    }
    let out = cmd.output().unwrap();
    let text = python::text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(" 0 failed"), "{text}");
    text
}

/// The debug endpoints istioctl and operators read, from the bundled mesh
/// with one sidecar synced: `/debug/syncz`, `/debug/adsz` and
/// `/debug/configz` with istiod's field names (the Go structs are cited in
/// tests/py/debug_golden.py), compared with `tests/golden/debug/*.json`
/// after what changes from run to run (nonces, times, the client's
/// address) is replaced by placeholders.
#[test]
fn debug_endpoints_match_the_golden_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (grpc, http) = (free_port(), free_port());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--configDir", root.join("examples/bookinfo").to_str().unwrap()])
        .args(["--grpcAddr", &format!("127.0.0.1:{grpc}"), "--httpAddr", &format!("127.0.0.1:{http}")])
        .args(["--monitoringAddr", "", "--secureGRPCAddr", "", "--httpsAddr", "", "--cores", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", http)).is_err() || ureq_ready(http).is_none_or(|ready| !ready) {
        assert!(std::time::Instant::now() < deadline, "server never became ready");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut cmd = std::process::Command::new(python::python());
    cmd.arg(root.join("tests/py/debug_golden.py"))
        .arg(format!("127.0.0.1:{grpc}"))
        .arg(format!("127.0.0.1:{http}"))
        .arg(root.join("tests/golden/debug"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        cmd.arg("--update");
    }
    let out = cmd.output().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let text = python::text(&out);
    assert!(out.status.success() && text.contains("3 passed, 0 failed"), "{text}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Whether `/ready` says 200 (`None`: no answer yet).
fn ureq_ready(port: u16) -> Option<bool> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    Some(buf.starts_with("HTTP/1.1 200"))
}
