//! Proxyless gRPC, end to end: Python grpcio's xDS resolver (a client no
//! one here wrote) dials `xds:///echo.default.svc.cluster.local:7070`
//! through the running pilot-discovery and reaches local echo backends as
//! the VirtualService and DestinationRule in a config directory say.

use crate::python;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_port(ip: &str) -> SocketAddr {
    TcpListener::bind(format!("{ip}:0")).unwrap().local_addr().unwrap()
}

fn ready(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else { return false };
    let _ = write!(s, "GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.starts_with("HTTP/1.1 200")
}

/// Starts pilot-discovery on `dir` (10 ms debounce) and waits until it is
/// ready; returns the process and its gRPC address.
fn serve(dir: &std::path::Path) -> (std::process::Child, SocketAddr) {
    let (grpc, http) = (free_port("127.0.0.1"), free_port("127.0.0.1"));
    let child = Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--configDir", dir.to_str().unwrap()])
        .args(["--grpcAddr", &grpc.to_string(), "--httpAddr", &http.to_string()])
        .args(["--monitoringAddr", "", "--secureGRPCAddr", "", "--httpsAddr", "", "--cores", "1"])
        .env("PILOT_DEBOUNCE_AFTER", "10ms")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready(http) {
        assert!(Instant::now() < deadline, "pilot-discovery never became ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, grpc)
}

const MESH: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: default}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  clusterIP: 10.96.0.50
  selector: {app: echo}
  ports: [{name: grpc, port: 7070, targetPort: PORT}]
---
apiVersion: v1
kind: Pod
metadata: {name: echo-v1, namespace: default, labels: {app: echo, version: v1}}
status: {podIP: 127.0.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: echo-v2, namespace: default, labels: {app: echo, version: v2}}
status: {podIP: 127.0.0.3}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: default}
spec:
  host: echo
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo]
  http:
  - name: to-v2
    match: [{headers: {x-route: {exact: v2}}}]
    route: [{destination: {host: echo, subset: v2}}]
  - name: faulty
    match: [{headers: {x-fault: {exact: abort}}}]
    fault: {abort: {grpcStatus: UNAVAILABLE, percentage: {value: 100}}}
    route: [{destination: {host: echo, subset: v1}}]
  - name: all
    match: [{headers: {x-all: {exact: "yes"}}}]
    route: [{destination: {host: echo}}]
  - name: split
    route:
    - {destination: {host: echo, subset: v1}, weight: 80}
    - {destination: {host: echo, subset: v2}, weight: 20}
"#;

const SLICES: &str = r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-1, namespace: default, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{name: grpc, port: PORT}]
endpoints:
- addresses: [127.0.0.2]
  targetRef: {kind: Pod, name: echo-v1, namespace: default}
    # v2 endpoint
- addresses: [127.0.0.3]
  targetRef: {kind: Pod, name: echo-v2, namespace: default}
"#;

#[test]
#[allow(clippy::print_stdout, reason = "the measured split goes to the test log")]
fn grpcio_xds_routes_by_the_mesh_config() {
    let backend_port = free_port("127.0.0.2").port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("mesh.yaml"), MESH.replace("PORT", &backend_port.to_string())).unwrap();
    let slices = dir.path().join("slices.yaml");
    std::fs::write(&slices, SLICES.replace("PORT", &backend_port.to_string())).unwrap();
    let (mut child, grpc) = serve(dir.path());
    let bootstrap = dir.path().join("bootstrap.json");
    std::fs::write(
        &bootstrap,
        format!(
            r#"{{"xds_servers": [{{"server_uri": "{grpc}", "channel_creds": [{{"type": "insecure"}}], "server_features": ["xds_v3"]}}],
               "node": {{"id": "sidecar~127.0.0.1~client.default~default.svc.cluster.local",
                        "metadata": {{"GENERATOR": "grpc", "NAMESPACE": "default"}}}}}}"#
        ),
    )
    .unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/grpc_xds.py");
    let out = Command::new(python::python())
        .arg(script)
        .arg(&bootstrap)
        .arg(backend_port.to_string())
        .arg(&slices)
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let text = python::text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("5 passed, 0 failed"), "{text}");
    println!("{text}");
}

/// A Sidecar whose egress lists only istio-system hides `echo` from the
/// proxies it selects: grpcio gets no listener for it and fails, while a
/// proxy the Sidecar does not select still reaches it.
#[test]
fn grpcio_sees_only_what_its_sidecar_allows() {
    let backend_port = free_port("127.0.0.2").port();
    let dir = tempfile::tempdir().unwrap();
    let mesh = MESH.replace("PORT", &backend_port.to_string())
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: locked, namespace: default}\n\
           spec: {workloadSelector: {labels: {app: locked}}, egress: [{hosts: [\"istio-system/*\"]}]}\n";
    std::fs::write(dir.path().join("mesh.yaml"), mesh).unwrap();
    std::fs::write(dir.path().join("slices.yaml"), SLICES.replace("PORT", &backend_port.to_string())).unwrap();
    let (mut child, grpc) = serve(dir.path());
    let run = |app: &str, expect: &str| {
        let bootstrap = dir.path().join(format!("bootstrap-{app}.json"));
        std::fs::write(
            &bootstrap,
            format!(
                r#"{{"xds_servers": [{{"server_uri": "{grpc}", "channel_creds": [{{"type": "insecure"}}], "server_features": ["xds_v3"]}}],
                   "node": {{"id": "sidecar~127.0.0.1~{app}.default~default.svc.cluster.local",
                            "metadata": {{"GENERATOR": "grpc", "NAMESPACE": "default", "LABELS": {{"app": "{app}"}}}}}}}}"#
            ),
        )
        .unwrap();
        let out = Command::new(python::python())
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/grpc_scope.py"))
            .arg(&bootstrap)
            .arg(backend_port.to_string())
            .arg(expect)
            .output()
            .unwrap();
        (out.status.success(), python::text(&out))
    };
    let locked = run("locked", "hidden");
    let free = run("free", "reach");
    let _ = child.kill();
    let _ = child.wait();
    assert!(locked.0, "{}", locked.1);
    assert!(free.0, "{}", free.1);
}
