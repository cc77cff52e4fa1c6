//! loadgen against the real binary: a scenario's mesh written by `loadgen
//! mesh`, served by pilot-discovery, synced by simulated sidecars that
//! follow Envoy's sequence (CDS/LDS wildcard, EDS and RDS by name, every
//! response ACKed), in state of the world and delta, plaintext and TLS,
//! while loadgen changes the mesh and measures convergence; and the ways a
//! run ends badly (unreachable server, a server that refuses streams).

use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use istiod_loadgen::run::{self, Options};
use istiod_loadgen::scenario::{Churn, ChurnKind, Scenario};
use istiod_loadgen::{mesh, proxy};

use crate::python;
use crate::server as support;
use support::free_port;

fn small() -> Scenario {
    Scenario { services: 40, sidecars: 60, namespaces: 4, ..Scenario::load("istio-perf").unwrap() }
}

/// pilot-discovery serving `dir` on one core; killed on drop.
struct Server {
    child: Child,
    grpc: SocketAddr,
    secure: Option<SocketAddr>,
    http: SocketAddr,
    monitoring: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &std::path::Path, tls: Option<(&std::path::Path, &std::path::Path)>) -> Server {
    serve_with(dir, tls, &[])
}

fn serve_with(dir: &std::path::Path, tls: Option<(&std::path::Path, &std::path::Path)>, flags: &[&str]) -> Server {
    serve_env(dir, tls, flags, &[])
}

fn serve_env(
    dir: &std::path::Path,
    tls: Option<(&std::path::Path, &std::path::Path)>,
    flags: &[&str],
    env: &[(&str, &str)],
) -> Server {
    // A port another test took between free_port and the bind makes the
    // server exit at once: it is started again on other ports.
    for _ in 0..5 {
        if let Some(server) = try_serve(dir, tls, flags, env) {
            return server;
        }
    }
    panic!("pilot-discovery never listened (five attempts)");
}

fn try_serve(
    dir: &std::path::Path,
    tls: Option<(&std::path::Path, &std::path::Path)>,
    flags: &[&str],
    env: &[(&str, &str)],
) -> Option<Server> {
    let (grpc, http, monitoring) = (free_port(), free_port(), free_port());
    let secure = tls.map(|_| free_port());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pilot-discovery"));
    cmd.args(["discovery", "--configDir", dir.to_str().unwrap()])
        .args(["--grpcAddr", &grpc.to_string(), "--httpAddr", &http.to_string()])
        .args(["--monitoringAddr", &monitoring.to_string(), "--httpsAddr", "", "--cores", "1"])
        .args(flags)
        .env("PILOT_DEBOUNCE_AFTER", "10ms")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    match (tls, secure) {
        (Some((cert, key)), Some(addr)) => {
            cmd.args(["--secureGRPCAddr", &addr.to_string()]).args([
                "--tlsCertFile",
                cert.to_str().unwrap(),
                "--tlsKeyFile",
                key.to_str().unwrap(),
            ]);
            // loadgen's proxies present no token: this tests the TLS
            // framing, not istiod's authentication (tests/ca.rs does).
            cmd.env("XDS_AUTH", "false");
        }
        _ => {
            cmd.args(["--secureGRPCAddr", ""]);
        }
    }
    let mut server = Server { child: cmd.spawn().unwrap(), grpc, secure, http, monitoring };
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(server.secure.unwrap_or(grpc)).is_err() {
        if server.child.try_wait().unwrap().is_some() {
            return None;
        }
        assert!(Instant::now() < deadline, "pilot-discovery never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(server)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

fn sync_and_sample(delta: bool) {
    let s = small();
    let dir = tempfile::tempdir().unwrap();
    mesh::write(&s, dir.path()).unwrap();
    let server = serve(dir.path(), None);
    let mut o = Options::new(server.grpc, 60);
    o.concurrency = 20;
    o.delta = delta;
    o.server_pid = Some(server.child.id());
    let report = block_on(run::run(&s, &o));
    let l = &report.live;
    assert_eq!(l.errors, Vec::<String>::new());
    assert_eq!((l.connected, l.synced, l.open_at_end, l.open), (60, 60, 60, 0), "all synced; closed by the end");
    assert_eq!(l.sync.len(), 60);
    assert!(l.bytes > 60 * 1000, "every proxy got its clusters, endpoints, listeners and routes");
    let j = report.json();
    assert_eq!(j["delta"], delta);
    assert_eq!(j["sync_ms"]["count"], 60);
    assert!(j["sync_ms"]["p50"].as_f64().unwrap() <= j["sync_ms"]["max"].as_f64().unwrap());
    let usage = report.server.as_ref().unwrap();
    assert!(usage.cpu_s() > 0.0, "serving 60 proxies takes some CPU: {usage:?}");
    assert!(usage.rss_max > 1 << 20, "{usage:?}");
    assert!(j["server_rss_bytes_max"].as_u64().unwrap() > 0);
}

#[test]
fn sotw_sidecars_sync_against_the_binary() {
    sync_and_sample(false);
}

#[test]
fn delta_sidecars_sync_against_the_binary() {
    sync_and_sample(true);
}

/// Churns the mesh and checks every proxy that could see a change ACKed a
/// response carrying it.
fn churn(kind: ChurnKind, delta: bool) {
    let s = small();
    let dir = tempfile::tempdir().unwrap();
    mesh::write(&s, dir.path()).unwrap();
    let server = serve(dir.path(), None);
    let mut o = Options::new(server.grpc, 60);
    o.delta = delta;
    o.config_dir = Some(dir.path().to_owned());
    o.churn = Some(Churn { kind, per_second: 10.0 });
    o.churn_for = Duration::from_secs(2);
    let report = block_on(run::run(&s, &o));
    let l = &report.live;
    assert_eq!(l.errors, Vec::<String>::new());
    assert_eq!(l.synced, 60);
    assert!(report.changes.len() >= 10, "{} changes", report.changes.len());
    let expected: u32 = report.changes.iter().map(|c| c.expected).sum();
    assert!(expected > 0, "some proxies see the changed services");
    assert_eq!(report.missed(), 0, "{:?}", report.changes);
    // Only the proxies that see a change get a push for it: every
    // namespace is isolated, so a change reaches a quarter of them.
    assert!(
        l.responses <= 4 * 60 + u64::from(expected),
        "{} responses for 240 at sync and {expected} proxy-changes",
        l.responses
    );
    assert!(!l.convergence.is_empty());
    // istiod counts a push's reasons once per proxy it pushes, each by its
    // event count (`recordPushTriggers` in pilot/pkg/xds/discovery.go):
    // one changed object per change, so at least one count per
    // proxy-change that arrived, and at most one per change per proxy
    // connected (a proxy whose subscription a change touched is counted
    // even if nothing it holds changed, as istiod counts every proxy it
    // dequeues).
    let metrics = support::get(server.monitoring, "/metrics").unwrap().1;
    let reason = if kind == ChurnKind::Eds { "endpoint" } else { "config" };
    let triggers: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("pilot_push_triggers{{type=\"{reason}\"}} "))?.parse().ok())
        .unwrap_or_else(|| panic!("no pilot_push_triggers{{type={reason:?}}} in\n{metrics}"));
    let most = 60 * report.changes.len() as u64;
    assert!(
        triggers >= u64::from(expected) && triggers <= most,
        "{triggers} {reason} triggers for {expected} proxy-changes, at most {most}"
    );
    // The proxies of a namespace take a change alike (an endpoint
    // change's cluster, a VirtualService change's route configuration):
    // its push was built once and sent to the rest of them (what they
    // decoded is checked above).
    let stats: serde_json::Value = serde_json::from_str(&support::get(server.http, "/debug/stats").unwrap().1).unwrap();
    let cores = stats.as_array().unwrap();
    let shared: u64 = cores.iter().map(|c| c["cache"]["changed_shared"].as_u64().unwrap()).sum();
    assert!(shared > 0, "no change's push was shared: {stats}");
    let j = report.json();
    assert!(j["convergence_ms"]["p99"].as_f64().unwrap() > 0.0);
    assert_eq!(j["per_change"].as_array().unwrap().len(), report.changes.len());
    let html = report.html();
    assert!(html.contains("<svg") && html.contains("Convergence per change"));
}

/// `loadgen ztunnel` (issue #35's scenario, small): simulated ztunnels
/// on delta WDS hold every pod, and every one converges on every pod
/// change, pushed as the one workload that changed.
#[test]
fn ztunnels_converge_on_pod_churn() {
    use istiod_loadgen::ztunnel;
    let dir = tempfile::tempdir().unwrap();
    let mut o = ztunnel::Options {
        server: "127.0.0.1:1".parse().unwrap(),
        ztunnels: 8,
        pods: 300,
        pods_per_service: 10,
        services_per_namespace: 10,
        per_second: 20.0,
        churn_for: Duration::from_secs(2),
        settle: Duration::from_secs(10),
        sync_timeout: Duration::from_secs(30),
        dir: dir.path().to_owned(),
    };
    assert_eq!(ztunnel::write_mesh(&o).unwrap(), 30);
    let server = serve_env(dir.path(), None, &[], &[("PILOT_ENABLE_AMBIENT", "true")]);
    o.server = server.grpc;
    let report = block_on(ztunnel::run(&o));
    assert_eq!(report.errors, Vec::<String>::new());
    assert_eq!(report.synced, 8, "{:?}", report.json());
    assert!(report.changes >= 30, "{} changes", report.changes);
    assert_eq!(report.missed, 0, "{}", report.json());
    assert_eq!(report.converged, 8 * report.changes as u64);
    // Pushed as the changed workload alone: `pilot_xds_pushes{type="wds"}`
    // counts a response per ztunnel at sync and about one per change
    // (changes the debounce merges share one).
    let metrics = support::get(server.monitoring, "/metrics").unwrap().1;
    let wds: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("pilot_xds_pushes{type=\"wds\"} ")?.parse().ok())
        .unwrap_or_else(|| panic!("no wds pushes in\n{metrics}"));
    assert!(wds <= 8 * (1 + report.changes as u64), "{wds} WDS responses for {} changes", report.changes);
}

#[test]
fn endpoint_churn_converges_delta() {
    churn(ChurnKind::Eds, true);
}

#[test]
fn virtual_service_churn_converges_sotw() {
    churn(ChurnKind::Config, false);
}

/// Ingress gateways next to sidecars (the `gateway` scenario, small):
/// routers sync their Gateway's listener and its route configuration of
/// every bound VirtualService's host; a VirtualService churn of the mesh
/// reaches the sidecars with none missed, and a churn of the gateway's
/// routes reaches exactly the gateways.
#[test]
fn gateways_sync_and_only_they_see_their_route_changes() {
    let s = Scenario { gateway_routes: 30, gateways: 2, ..small() };
    let dir = tempfile::tempdir().unwrap();
    mesh::write(&s, dir.path()).unwrap();
    let server = serve(dir.path(), None);
    let mut o = Options::new(server.grpc, 20);
    o.config_dir = Some(dir.path().to_owned());
    o.churn = Some(Churn { kind: ChurnKind::Config, per_second: 10.0 });
    o.churn_for = Duration::from_secs(2);
    let report = block_on(run::run(&s, &o));
    let l = &report.live;
    assert_eq!(l.errors, Vec::<String>::new());
    assert_eq!(l.synced, 20);
    assert_eq!(report.missed(), 0, "{:?}", report.changes);
    // A gateway alone: its listener and route configuration.
    let mut o = Options::new(server.grpc, 1);
    o.duration = Duration::from_secs(3);
    let report = block_on(run::run(&s, &o));
    assert_eq!(report.live.synced, 1, "{:?}", report.live.errors);
    // Clusters, endpoints, its listener, and the route configuration the
    // listener names: four responses (three if it had no listener).
    assert!(report.live.responses >= 4, "{} responses", report.live.responses);
    let gateway = run::node(&s, 0);
    assert!(gateway.id.starts_with("router~"), "{}", gateway.id);
    assert!(dir.path().join(mesh::gateway_route_file(29)).exists());
    // The gateway routes churn: only the gateways see it, each change.
    let mut o = Options::new(server.grpc, 20);
    o.config_dir = Some(dir.path().to_owned());
    o.churn = Some(Churn { kind: ChurnKind::Gateway, per_second: 10.0 });
    o.churn_for = Duration::from_secs(2);
    let report = block_on(run::run(&s, &o));
    assert_eq!(report.live.errors, Vec::<String>::new());
    assert!(report.changes.len() >= 10, "{} changes", report.changes.len());
    for c in &report.changes {
        assert_eq!(c.expected, 2, "the two gateways, no sidecar: {c:?}");
    }
    assert_eq!(report.missed(), 0, "{:?}", report.changes);
}

#[test]
fn nacked_pushes_are_counted_and_the_server_keeps_serving() {
    // Both protocols: a NACK names the response it refuses, and the server
    // counts it by type as istiod does (pilot_total_xds_rejects{type} and
    // the per-type pilot_xds_<type>_reject{node,err} gauges,
    // pkg/xds/monitoring.go); a NACK naming an older response would be
    // counted as an expired nonce instead. Delta churns endpoints (EDS
    // pushes), state of the world VirtualServices (RDS pushes).
    for (delta, kind, reject) in [(true, ChurnKind::Eds, "eds"), (false, ChurnKind::Config, "rds")] {
        let s = small();
        let dir = tempfile::tempdir().unwrap();
        mesh::write(&s, dir.path()).unwrap();
        let server = serve(dir.path(), None);
        let mut o = Options::new(server.grpc, 60);
        o.delta = delta;
        o.nack_fraction = 0.5;
        o.config_dir = Some(dir.path().to_owned());
        o.churn = Some(Churn { kind, per_second: 20.0 });
        o.churn_for = Duration::from_secs(2);
        o.settle = Duration::from_secs(1);
        let report = block_on(run::run(&s, &o));
        let l = &report.live;
        assert_eq!((l.synced, l.disconnects), (60, 0), "{:?}", l.errors);
        assert!(l.nacks > 0, "half the pushes after sync are NACKed");
        assert!(!l.convergence.is_empty(), "the ACKed half still converges");
        // Scraped while the proxies are still connected.
        let metrics = support::get(server.monitoring, "/metrics").unwrap().1;
        let rejects: u64 = metrics
            .lines()
            .filter_map(|l| l.strip_prefix("pilot_total_xds_rejects{type=")?.split_once("} ")?.1.parse::<u64>().ok())
            .sum();
        assert!(
            metrics.contains(&format!("pilot_total_xds_rejects{{type=\"{reject}\"}}"))
                && rejects <= l.nacks
                && rejects * 2 >= l.nacks,
            "delta {delta}: {rejects} rejects counted for {} NACKs sent\n{metrics}",
            l.nacks
        );
        // The gauge names the proxy as istiod's proxy ID (pod.namespace)
        // and loadgen's code 3 as Go's codes.Code.String().
        let gauge = format!("pilot_xds_{reject}_reject{{node=\"");
        let line =
            metrics.lines().find(|l| l.starts_with(&gauge)).unwrap_or_else(|| panic!("no {gauge} in\n{metrics}"));
        assert!(line.contains(",err=\"InvalidArgument\"}") && !line.contains('~'), "{line}");
        // Every name of istiod's that the scrape must have, with its type
        // and labels, parsed by prometheus_client as a scraper would.
        let file = dir.path().join("metrics.txt");
        std::fs::write(&file, &metrics).unwrap();
        let name = format!("pilot_xds_{reject}_reject");
        let extra: Vec<&std::ffi::OsStr> =
            [file.as_os_str(), "pilot_total_xds_rejects".as_ref(), name.as_ref(), "pilot_virt_services".as_ref()]
                .to_vec();
        let out = python::run("metrics_check.py", &extra);
        assert!(out.status.success(), "delta {delta}:\n{}", python::text(&out));
    }
}

#[test]
fn tls_sidecars_sync_against_the_binary() {
    let s = small();
    let dir = tempfile::tempdir().unwrap();
    mesh::write(&s, dir.path()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert =
        rcgen::CertificateParams::new(vec!["istiod.istio-system.svc".to_owned()]).unwrap().self_signed(&key).unwrap();
    let certs = tempfile::tempdir().unwrap();
    let (cert_file, key_file) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let server = serve(dir.path(), Some((&cert_file, &key_file)));
    let mut o = Options::new(server.secure.unwrap(), 20);
    o.tls = Some(proxy::tls(&cert_file, "istiod.istio-system.svc").unwrap());
    let report = block_on(run::run(&s, &o));
    assert_eq!(report.live.errors, Vec::<String>::new());
    assert_eq!(report.live.synced, 20);
    // The wrong name fails the handshake, with a message that says so.
    o.tls = Some(proxy::tls(&cert_file, "someone-else.example").unwrap());
    o.proxies = 2;
    o.duration = Duration::from_secs(3);
    let report = block_on(run::run(&s, &o));
    assert_eq!(report.live.synced, 0);
    assert!(report.live.errors[0].contains("TLS"), "{:?}", report.live.errors);
    assert!(proxy::tls(&dir.path().join("ns-0/00-namespace.yaml"), "x").is_err(), "not a certificate");
}

#[test]
fn an_unreachable_server_ends_the_run_with_errors_not_a_hang() {
    let s = Scenario::load("istio-perf").unwrap();
    let started = Instant::now();
    let mut o = Options::new(free_port(), 5);
    o.duration = Duration::from_secs(30);
    let report = block_on(run::run(&s, &o));
    assert!(started.elapsed() < Duration::from_secs(15), "gives up when nothing connects");
    assert_eq!((report.live.connected, report.live.synced), (0, 0));
    assert!(report.live.error_count >= 5);
    assert!(report.live.errors.iter().all(|e| e.contains("connect")), "{:?}", report.live.errors);
}

/// Issue #18: loadgen started before the server listens waits for it:
/// connection attempts refused before a proxy's first connection are
/// retries, not errors, and the run that follows is clean. A run whose
/// proxies lose connections reports errors (and the command exits 1).
#[test]
fn a_server_that_starts_after_loadgen_is_waited_for() {
    let s = small();
    let dir = tempfile::tempdir().unwrap();
    mesh::write(&s, dir.path()).unwrap();
    let grpc = free_port();
    let mut o = Options::new(grpc, 20);
    o.duration = Duration::from_secs(30);
    let run = std::thread::spawn(move || block_on(run::run(&s, &o)));
    std::thread::sleep(Duration::from_millis(1500));
    let http = free_port();
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--configDir", dir.path().to_str().unwrap()])
        .args(["--grpcAddr", &grpc.to_string(), "--httpAddr", &http.to_string()])
        .args(["--monitoringAddr", "", "--secureGRPCAddr", "", "--httpsAddr", "", "--cores", "1"])
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let report = run.join().unwrap();
    // Said when the run failed: whether the server was still up, and what
    // it logged (a CI run once saw no proxy ever connect).
    let exited = server.try_wait().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let l = &report.live;
    let why =
        || format!("server exit: {exited:?}; its log:\n{}", std::fs::read_to_string(log.path()).unwrap_or_default());
    assert!(l.connect_retries > 0, "the first attempts were refused");
    assert_eq!(l.error_count, 0, "{:?}\n{}", l.errors, why());
    assert_eq!((l.connected, l.synced), (20, 20));
}

#[test]
fn a_server_that_refuses_streams_is_reported_with_its_status() {
    // An HTTP/2 server that answers every stream with grpc-status 14.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let report = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(tcp).await else { return };
                    while let Some(Ok((_, mut respond))) = conn.accept().await {
                        let resp = http::Response::builder()
                            .header("content-type", "application/grpc")
                            .header("grpc-status", "14")
                            .header("grpc-message", "going away")
                            .body(())
                            .unwrap();
                        let _ = respond.send_response(resp, true);
                    }
                });
            }
        });
        let mut o = Options::new(addr, 3);
        o.duration = Duration::from_secs(3);
        run::run(&Scenario::load("istio-perf").unwrap(), &o).await
    });
    assert_eq!(report.live.synced, 0);
    assert!(
        report.live.errors.iter().any(|e| e.contains("grpc-status") && e.contains("going away")),
        "{:?}",
        report.live.errors
    );
}

/// The `loadgen` binary, beside pilot-discovery. Cargo only builds the
/// binaries of the package under test, so make sure it is there and fresh
/// (a no-op after a workspace build).
fn loadgen_bin() -> std::path::PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "istiod-loadgen", "--bin", "loadgen"])
            .status()
            .unwrap();
        assert!(status.success());
    });
    std::path::Path::new(env!("CARGO_BIN_EXE_pilot-discovery")).with_file_name("loadgen")
}

#[test]
fn the_command_exits_non_zero_on_bad_input() {
    let loadgen = loadgen_bin();
    let out = Command::new(&loadgen).args(["run", "--scenario", "no-such"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown scenario"));
    let out = Command::new(&loadgen)
        .args(["run", "--scenario", "istio-perf", "--proxies", "2", "--duration", "5", "--quiet"])
        .args(["--server", &free_port().to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no proxy could connect"));
    let out = Command::new(&loadgen).args(["run", "--scenario", "eds-churn", "--quiet"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "a churn without the directory to edit");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config-dir"));
}

#[test]
fn the_command_writes_json_and_html() {
    let s = small();
    let dir = tempfile::tempdir().unwrap();
    mesh::write(&s, dir.path()).unwrap();
    let file = dir.path().join("scenario.yaml.txt");
    std::fs::write(&file, "name: small\nnamespaces: 4\nservices: 40\nsidecars: 60\nisolated_fraction: 1.0\nzones: 3\n")
        .unwrap();
    let server = serve(dir.path(), None);
    let out_dir = tempfile::tempdir().unwrap();
    let (json, html) = (out_dir.path().join("r.json"), out_dir.path().join("r.html"));
    let out = Command::new(loadgen_bin())
        .args(["run", "--scenario", file.to_str().unwrap(), "--server", &server.grpc.to_string()])
        .args(["--config-dir", dir.path().to_str().unwrap(), "--churn", "eds", "--churn-rate", "10"])
        .args(["--churn-seconds", "1", "--duration", "30", "--delta", "false"])
        .args(["--server-pid", &server.child.id().to_string()])
        .args(["--json", json.to_str().unwrap(), "--html", html.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("convergence p50"));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for key in [
        "scenario",
        "proxies",
        "delta",
        "connected",
        "synced",
        "sync_ms",
        "convergence_ms",
        "server_cpu_s",
        "server_rss_bytes_max",
        "bytes_received",
        "nacks",
        "errors",
    ] {
        assert!(!j[key].is_null(), "{key} missing: {j}");
    }
    assert_eq!(
        (j["scenario"].as_str(), j["synced"].as_u64(), j["delta"].as_bool()),
        (Some("small"), Some(60), Some(false))
    );
    assert!(j["convergence_ms"]["count"].as_u64().unwrap() > 0);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.matches("<svg").count() >= 4, "sync, convergence, timeline, server");
}

/// istiod's graceful stop on SIGTERM, as a rolling update sees it: loadgen
/// proxies reach two replicas through a forwarder playing the Service
/// (a new connection goes to the first replica while it listens, else to
/// the second). The first, sent SIGTERM with `--shutdownDuration 4s`,
/// stops accepting, sends GOAWAY and ends its streams spread over the
/// period (pilot/pkg/xds: connections closed over the drain); every proxy
/// resyncs on the other replica, none is left hanging on the first, and
/// it exits within the period.
#[test]
fn sigterm_drains_every_proxy_to_the_other_replica_over_the_shutdown_duration() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    const PROXIES: u32 = 60;
    let s = small();
    let dir = tempfile::tempdir().unwrap();
    mesh::write(&s, dir.path()).unwrap();
    let mut first = serve_with(dir.path(), None, &["--shutdownDuration", "4s"]);
    let second = serve(dir.path(), None);
    let (a, b) = (first.grpc, second.grpc);
    let on_first = Arc::new(AtomicUsize::new(0));
    let first_ends: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let sigterm_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let pid = first.child.id();
    let report = block_on(async {
        let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front_addr = front.local_addr().unwrap();
        let (on, ends) = (on_first.clone(), first_ends.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = front.accept().await else { return };
                let (on, ends) = (on.clone(), ends.clone());
                tokio::spawn(async move {
                    let (mut upstream, to_first) = match tokio::net::TcpStream::connect(a).await {
                        Ok(u) => (u, true),
                        Err(_) => match tokio::net::TcpStream::connect(b).await {
                            Ok(u) => (u, false),
                            Err(_) => return,
                        },
                    };
                    if to_first {
                        on.fetch_add(1, Ordering::SeqCst);
                    }
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    if to_first {
                        on.fetch_sub(1, Ordering::SeqCst);
                        ends.lock().unwrap().push(Instant::now());
                    }
                });
            }
        });
        // SIGTERM once every proxy is on the first replica and synced.
        let (on, at) = (on_first.clone(), sigterm_at.clone());
        tokio::spawn(async move {
            while on.load(Ordering::SeqCst) < PROXIES as usize {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            *at.lock().unwrap() = Some(Instant::now());
            let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        });
        let mut o = Options::new(front_addr, PROXIES);
        o.concurrency = 30;
        o.hold = Duration::from_secs(10);
        run::run(&s, &o).await
    });
    let t = sigterm_at.lock().unwrap().expect("SIGTERM was sent");
    let status = first.child.wait().unwrap();
    assert!(status.success(), "graceful exit: {status}");
    let l = &report.live;
    assert_eq!(l.synced, PROXIES, "{:?}", l.errors);
    assert_eq!(u64::from(l.resynced), u64::from(PROXIES), "every proxy resynced on the other replica: {:?}", l.errors);
    assert_eq!(l.disconnects, u64::from(PROXIES), "each lost its stream once: {:?}", l.errors);
    assert_eq!(l.open_at_end, PROXIES, "all connected at the end (to the second replica)");
    assert_eq!(on_first.load(Ordering::SeqCst), 0, "none left on the first replica");
    let mut ends = first_ends.lock().unwrap().clone();
    ends.sort();
    assert_eq!(ends.len(), PROXIES as usize);
    let (first_end, last_end) = (ends[0].duration_since(t), ends[ends.len() - 1].duration_since(t));
    assert!(last_end <= Duration::from_millis(5500), "the last left {last_end:?} after SIGTERM (4 s period)");
    assert!(
        last_end.saturating_sub(first_end) >= Duration::from_secs(2),
        "departures spread over the period: {first_end:?} to {last_end:?}"
    );
}

/// `loadgen multicluster` (issue #37's scale run, here small): a config
/// cluster and two remotes on fake API servers, registered by Secret;
/// the binary syncs every cluster, every proxy gets every cluster's
/// endpoints, and each remote endpoint change (through a remote's API
/// server) reaches every proxy that has the service.
#[test]
fn multicluster_remote_endpoint_churn_converges() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("mc.yaml");
    std::fs::write(
        &scenario,
        "name: mc\nnamespaces: 2\nservices: 10\nsidecars: 20\nisolated_fraction: 1.0\nzones: 2\n",
    )
    .unwrap();
    let json = dir.path().join("report.json");
    let out = Command::new(loadgen_bin())
        .args(["multicluster", "--scenario", scenario.to_str().unwrap(), "--remotes", "2"])
        .args(["--remote-services", "10", "--remote-pods", "30", "--churn-rate", "4", "--churn-seconds", "3"])
        .args(["--duration", "90", "--quiet", "--json", json.to_str().unwrap()])
        .args(["--server-bin", env!("CARGO_BIN_EXE_pilot-discovery")])
        .output()
        .unwrap();
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("first sync"), "{text}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["multicluster"]["remotes"], 2);
    assert!(report["multicluster"]["firstSyncSeconds"].as_f64().unwrap() > 0.0);
    assert_eq!(report["missed"], 0, "{report:#}");
    assert_eq!(report["synced"], 20, "{report:#}");
    let changes = report["per_change"].as_array().unwrap_or_else(|| panic!("no changes: {report:#}"));
    assert!(changes.len() >= 5, "{report:#}");
    for c in changes {
        assert!(c["expected"].as_u64().unwrap() > 0, "some proxy has the service: {c}");
        assert_eq!(c["converged"], c["expected"], "every proxy that has the service converged: {c}");
    }
}

/// `loadgen vms`: VMs' agents registering at once against the binary on a
/// fake API server: every entry is made, every VM reaches another proxy's
/// EDS, every entry is deleted after they leave.
#[test]
fn vms_register_at_once_and_are_cleaned_up() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("vms.json");
    let out = Command::new(loadgen_bin())
        .args(["vms", "--vms", "60", "--grace-seconds", "1", "--limit-seconds", "60", "--json", json.to_str().unwrap()])
        .args(["--server-bin", env!("CARGO_BIN_EXE_pilot-discovery")])
        .output()
        .unwrap();
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    let f: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(f["vms"], 60);
    assert_eq!(f["connected"], 60, "{f}");
    for k in ["registeredSeconds", "inEdsSeconds", "deletedSecondsAfterLeaving"] {
        assert!(f[k].as_f64().is_some_and(|s| s > 0.0), "{k}: {f}");
    }
    assert!(f["deletedSecondsAfterLeaving"].as_f64().unwrap() >= 1.0, "not before the grace period: {f}");
}

/// loadgen spreads its proxies over loopback source addresses (so one
/// machine can hold more connections than one address's ephemeral ports):
/// the server sees each proxy from its address in turn, and all sync.
#[test]
fn proxies_connect_from_several_loopback_addresses() {
    assert!(run::loopback_sources("127.0.0.1:1".parse().unwrap(), 20_000, 0).unwrap().is_empty());
    assert_eq!(run::loopback_sources("127.0.0.1:1".parse().unwrap(), 50_000, 0).unwrap().len(), 3);
    let err = run::loopback_sources("[::1]:1".parse().unwrap(), 10, 2).unwrap_err();
    assert!(err.contains("127.0.0.0/8"), "{err}");
    // Automatic against another server: the kernel's choice, as before.
    assert!(run::loopback_sources("[::1]:1".parse().unwrap(), 50_000, 0).unwrap().is_empty());
    let s = small();
    let dir = tempfile::tempdir().unwrap();
    mesh::write(&s, dir.path()).unwrap();
    let server = support::Server::start(dir.path(), &[], &[], None);
    let mut o = Options::new(server.grpc, 12);
    o.sources = run::loopback_sources(server.grpc, 12, 3).unwrap();
    assert_eq!(o.sources.len(), 3);
    o.hold = Duration::from_secs(5);
    o.duration = Duration::from_secs(30);
    let http = server.http;
    let runner = std::thread::spawn(move || block_on(run::run(&s, &o)));
    // While the proxies hold their streams: the addresses the server saw
    // them connect from.
    let mut peers = Vec::new();
    support::wait_for("the server to list the 12 proxies' connections", Duration::from_secs(20), || {
        let Some((200, body)) = support::get(http, "/debug/connections") else { return false };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        peers = v["clients"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["address"].as_str().map(str::to_owned))
            .collect();
        peers.len() == 12
    });
    let mut ips: Vec<String> = peers.iter().map(|p| p.rsplit_once(':').unwrap().0.to_owned()).collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips, vec!["127.0.0.1", "127.0.0.2", "127.0.0.3"], "{peers:?}");
    let report = runner.join().unwrap();
    assert_eq!(report.live.synced, 12, "{:?}", report.live.errors);
}
