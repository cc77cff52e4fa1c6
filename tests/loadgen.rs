//! loadgen against the real binary: a scenario's mesh written by `loadgen
//! mesh`, served by pilot-discovery, synced by simulated sidecars that
//! follow Envoy's start-up sequence (CDS/LDS wildcard, EDS and RDS by
//! name, every response ACKed).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use istiod_loadgen::{mesh, run, scenario::Scenario};

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

#[test]
fn simulated_sidecars_sync_against_the_binary() {
    let s = Scenario { services: 40, sidecars: 60, namespaces: 4, ..Scenario::load("istio-perf").unwrap() };
    let dir = tempfile::tempdir().unwrap();
    mesh::write(&s, dir.path()).unwrap();
    let (grpc, http) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--configDir", dir.path().to_str().unwrap()])
        .args(["--grpcAddr", &grpc.to_string(), "--httpAddr", &http.to_string()])
        .args(["--monitoringAddr", "", "--secureGRPCAddr", "", "--cores", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(grpc).is_err() {
        assert!(Instant::now() < deadline, "pilot-discovery never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let report = rt.block_on(run::run(&s, grpc, 60, 20, Duration::from_secs(60)));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(report.errors, Vec::<String>::new());
    assert_eq!((report.connected, report.synced), (60, 60));
    assert_eq!(report.sync_us.len(), 60);
    assert!(report.bytes_received > 60 * 1000, "every proxy got its clusters, endpoints, listeners and routes");
    let j = report.json("small");
    assert_eq!(j["sync_ms"]["count"], 60);
    assert!(j["sync_ms"]["p50"].as_f64().unwrap() <= j["sync_ms"]["max"].as_f64().unwrap());
}

#[test]
fn an_unreachable_server_ends_the_run_with_errors_not_a_hang() {
    let s = Scenario::load("istio-perf").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let started = Instant::now();
    let report = rt.block_on(run::run(&s, free_port(), 5, 5, Duration::from_secs(10)));
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!((report.connected, report.synced, report.error_count), (0, 0, 5));
    assert!(report.errors[0].contains("connect"), "{:?}", report.errors);
}
