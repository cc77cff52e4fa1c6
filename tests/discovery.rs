//! The `pilot-discovery discovery` binary on the bundled example mesh,
//! driven by grpcio + xds-protos (both ADS protocols), its debug endpoints,
//! and graceful shutdown on SIGTERM.

use crate::python;
use crate::server as support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{free_port, get};

struct Server {
    child: Child,
}

/// A server a failed assertion leaves behind is killed, not leaked.
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn terminate(mut self) -> std::process::ExitStatus {
        terminate(&mut self.child)
    }
}

/// SIGTERM, then the exit status (within 20 s).
fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The binary on the bundled example mesh with `env`.
fn bookinfo(env: &[(&str, &str)]) -> support::Server {
    support::Server::start(std::path::Path::new(support::BOOKINFO), &[], env, None)
}

#[test]
fn grpcio_drives_both_ads_protocols_against_the_binary() {
    let mut server = bookinfo(&[("UNSAFE_ENABLE_ADMIN_ENDPOINTS", "true")]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/ads_binary.py");
    let out = Command::new(python::python())
        .arg(script)
        .arg(server.grpc.to_string())
        .arg(server.http.to_string())
        .arg(server.monitoring.to_string())
        .output()
        .unwrap();
    let text = python::text(&out);
    let metrics = get(server.monitoring, "/metrics").unwrap().1;
    let version = get(server.monitoring, "/version").unwrap();
    let status = terminate(&mut server.child);
    assert!(out.status.success(), "{text}");
    // istiod's build and uptime metrics (pkg/version/stats.go,
    // pilot/pkg/bootstrap/monitoring.go) and /version on the monitoring
    // port (`BuildInfo.String()`: version-revision-status).
    assert_eq!(version.0, 200);
    assert!(version.1.starts_with(concat!(env!("CARGO_PKG_VERSION"), "-")), "{version:?}");
    assert!(metrics.contains(&format!("pilot_info{{version=\"{}\"}} 1\n", version.1)), "{metrics}");
    assert!(metrics.contains("istio_build{component=\"pilot\",tag=\""), "{metrics}");
    let uptime: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("istiod_uptime_seconds ")?.parse().ok())
        .unwrap_or_else(|| panic!("no istiod_uptime_seconds in\n{metrics}"));
    assert!(uptime > 0.0);
    assert!(text.contains("5 passed, 0 failed"), "{text}");
    // pilot_xds by the proxies' Istio version (istiod's recordXDSClients)
    // is checked by the script while its proxies are connected.
    // istiod's push metrics (pilot/pkg/xds/monitoring.go): per type, with
    // its buckets; the first publish is a full ("global") push.
    let value = |line: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {line} in\n{metrics}"))
    };
    for t in ["cds", "lds"] {
        assert!(value(&format!("pilot_xds_pushes{{type=\"{t}\"}}")) > 0.0, "{t}");
        assert!(value(&format!("pilot_xds_push_time_count{{type=\"{t}\"}}")) > 0.0, "{t}");
    }
    assert!(metrics.contains("pilot_xds_push_time_bucket{type=\"eds\",le=\"0.01\"}"), "{metrics}");
    assert!(metrics.contains("pilot_proxy_queue_time_bucket{le=\"0.1\"}"), "{metrics}");
    assert!(value("pilot_xds_send_time_count") > 0.0, "every response sent is timed");
    assert!(metrics.contains("pilot_proxy_convergence_time_bucket{le=\"30\"}"), "{metrics}");
    assert!(value("pilot_pushcontext_init_seconds_count") >= 1.0);
    assert!(value("pilot_debounce_time_count") >= 1.0);
    // The push context's gauges (pilot/pkg/model/push_context.go).
    assert!(value("pilot_services ") > 0.0);
    assert_eq!(value("pilot_endpoint_not_ready "), 1.0, "the example's terminating reviews-v2 pod");
    assert_eq!(value("pilot_conflict_outbound_listener_tcp_over_current_tcp "), 0.0);
    assert_eq!(value("pilot_conflict_inbound_listener "), 0.0);
    assert!(value("pilot_inbound_updates{type=\"svc\"}") > 0.0);
    // Go's process collector.
    assert!(value("process_resident_memory_bytes ") > 0.0);
    // pilot_push_triggers counts proxies pushed (tests/loadgen.rs); these
    // proxies connected after the only publish, so there were none.
    assert!(status.success(), "graceful exit on SIGTERM: {status:?}");
}

#[test]
fn debug_endpoints() {
    let mut server = bookinfo(&[]);
    let (code, body) = get(server.http, "/debug/config_report").unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("\"services\": 6"), "{body}");
    // istiod's configz (pilot/pkg/xds/debug.go `configz`): every config
    // object in its Kubernetes form (crd.ConvertConfig), here the example
    // mesh's 12 Istio objects, sorted by apiVersion, kind, namespace, name.
    let (code, body) = get(server.http, "/debug/configz").unwrap();
    assert_eq!(code, 200);
    let configz: serde_json::Value = serde_json::from_str(&body).unwrap();
    let items = configz.as_array().unwrap_or_else(|| panic!("an array: {body}"));
    let kinds: Vec<&str> = items.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "DestinationRule",
            "DestinationRule",
            "DestinationRule",
            "DestinationRule",
            "Sidecar",
            "VirtualService",
            "VirtualService",
            "VirtualService",
            "VirtualService",
            "AuthorizationPolicy",
            "PeerAuthentication",
            "RequestAuthentication"
        ],
        "{body}"
    );
    for o in items {
        assert!(o["apiVersion"].as_str().unwrap().contains(".istio.io/"), "{o}");
        assert!(o["metadata"]["name"].is_string() && o["metadata"]["namespace"].is_string(), "{o}");
        assert!(o["spec"].is_object() && o.get("status").is_none(), "{o}");
    }
    assert!(get(server.http, "/debug/adsz").unwrap().1.contains("\"totalClients\": 0"));
    // istiod serves its debug handlers on the monitoring port too
    // (ENABLE_DEBUG_ON_HTTP), to callers on loopback.
    let (code, body) = get(server.monitoring, "/debug/syncz").unwrap();
    assert_eq!((code, body.trim()), (200, "[]"));
    assert_eq!(get(server.http, "/debug/config_dump?proxyID=nobody").unwrap().0, 404);
    assert_eq!(get(server.http, "/debug/config_dump").unwrap().0, 400);
    assert_eq!(get(server.http, "/nope").unwrap().0, 404);
    // The model's views, in istiod's shapes (debug.go and the structs it
    // marshals; see src/discovery/debugz.rs).
    let json = |path: &str| -> serde_json::Value {
        let (code, body) = get(server.http, path).unwrap();
        assert_eq!(code, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
    };
    let list = json("/debug/list");
    for name in ["adsz", "syncz", "configz", "config_dump", "endpointShardz", "mesh", "push_status", "sidecarz"] {
        assert!(list.as_array().unwrap().contains(&name.into()), "{name}: {list}");
    }
    assert!(!list.as_array().unwrap().contains(&"list".into()) && !list.to_string().contains("force_disconnect"));
    let mesh = json("/debug/mesh");
    assert_eq!((&mesh["rootNamespace"], &mesh["trustDomain"]), (&"istio-system".into(), &"cluster.local".into()));
    assert_eq!(mesh["defaultConfig"]["discoveryAddress"], "istiod.istio-system.svc:15012");
    let authz = json("/debug/authorizationz");
    let policies = &authz["authorization_policies"]["namespace_to_policies"];
    assert_eq!(policies.as_object().unwrap().values().flat_map(|v| v.as_array().unwrap()).count(), 1, "{authz}");
    let shards = json("/debug/endpointShardz");
    let reviews = &shards["reviews.bookinfo.svc.cluster.local"]["bookinfo"];
    let endpoints = reviews["Shards"]["Kubernetes/Kubernetes"].as_array().unwrap_or_else(|| panic!("{shards}"));
    // model.HealthStatus: 1 healthy, 4 terminating (the example's pod
    // shutting down: istiod's endpointHealthStatus calls it draining only
    // for a persistent-session service).
    let health: Vec<u64> = endpoints.iter().map(|e| e["HealthStatus"].as_u64().unwrap()).collect();
    assert_eq!((health.iter().filter(|h| **h == 1).count(), health.iter().filter(|h| **h == 4).count()), (3, 1));
    assert!(
        endpoints.iter().all(|e| e["SendUnhealthyEndpoints"] == true),
        "istiod's PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS"
    );
    assert_eq!(reviews["ServiceAccounts"], serde_json::json!({"bookinfo-reviews": {}}));
    assert_eq!(json("/debug/endpointz"), shards, "endpointz is endpointShardz");
    // The example's terminating reviews-v2 pod (push_context.go's
    // pilot_endpoint_not_ready entry, keyed by pod.namespace).
    let status = json("/debug/push_status");
    let unready: Vec<&String> = status["pilot_endpoint_not_ready"].as_object().unwrap().keys().collect();
    assert_eq!(unready.len(), 1, "{status}");
    assert!(unready[0].starts_with("reviews-v2-") && unready[0].ends_with(".bookinfo"), "{status}");
    let telemetryz = json("/debug/telemetryz");
    assert_eq!(telemetryz["telemetries"]["root_namespace"], "istio-system", "{telemetryz}");
    assert!(telemetryz["telemetries"]["namespace_to_telemetries"].is_object());
    assert_eq!(get(server.http, "/debug/sidecarz").unwrap().0, 400);
    assert_eq!(get(server.http, "/debug/sidecarz?proxyID=nobody.nowhere").unwrap().0, 404);
    assert_eq!(
        get(server.http, "/debug/force_disconnect?proxyID=x").unwrap(),
        (404, "404 page not found\n".into()),
        "not served without UNSAFE_ENABLE_ADMIN_ENDPOINTS"
    );
    let (code, index) = get(server.http, "/debug").unwrap();
    assert!(code == 200 && index.contains("<title>Pilot Debug Console</title>") && index.contains("/debug/syncz"));
    assert!(terminate(&mut server.child).success());
}

/// Issue #18: the cores bind with SO_REUSEPORT among themselves, which let
/// a second server on the same address take half the proxies silently. It
/// must fail at start, as istiod does, and leave the first one serving.
#[test]
fn a_second_server_on_the_same_address_exits_and_the_first_keeps_serving() {
    let mut server = bookinfo(&[("UNSAFE_ENABLE_ADMIN_ENDPOINTS", "true")]);
    let out = Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--configDir", concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo")])
        .args(["--grpcAddr", &server.grpc.to_string(), "--httpAddr", &free_port().to_string()])
        .args(["--monitoringAddr", &free_port().to_string(), "--secureGRPCAddr", "", "--httpsAddr", "", "--cores", "2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&server.grpc.to_string()) && err.contains("in use"), "{err}");
    // The first one still answers on both ports.
    assert_eq!(get(server.http, "/ready").map(|r| r.0), Some(200));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/ads_binary.py");
    let ads = Command::new(python::python())
        .arg(script)
        .arg(server.grpc.to_string())
        .arg(server.http.to_string())
        .arg(server.monitoring.to_string())
        .output()
        .unwrap();
    assert!(ads.status.success(), "{}", python::text(&ads));
    assert!(terminate(&mut server.child).success());
}

/// A restart in the same network namespace (a container restarting in
/// its pod): the connections the ended process had linger in TIME_WAIT on
/// its port for a minute, and must not keep the new one from listening
/// there (istiod's listeners take the port at once).
#[test]
fn a_restart_listens_where_its_predecessor_had_connections() {
    let mut first = bookinfo(&[]);
    let grpc = first.grpc;
    let clients: Vec<std::net::TcpStream> = (0..4).map(|_| std::net::TcpStream::connect(grpc).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    // The server's side closes first: it is its side that lingers.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    // Read to the end (the server's SETTINGS, then its FIN), so that
    // closing sends a FIN, not a reset: the server's side then lingers.
    for mut c in clients {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut c, &mut sink);
    }
    std::thread::sleep(Duration::from_millis(200));
    let http = free_port();
    let mut second = Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--configDir", concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo")])
        .args(["--grpcAddr", &grpc.to_string(), "--httpAddr", &http.to_string()])
        .args(["--monitoringAddr", &free_port().to_string(), "--secureGRPCAddr", "", "--httpsAddr", "", "--cores", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while get(http, "/ready").map(|r| r.0) != Some(200) {
        if let Some(status) = second.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(second.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the restart did not listen ({status}): {err}");
        }
        assert!(std::time::Instant::now() < deadline, "the restart never became ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::net::TcpStream::connect(grpc).expect("the restart serves the port");
    assert!(terminate(&mut second).success());
}

#[test]
fn kubernetes_without_a_kubeconfig_says_so() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--grpcAddr", &free_port().to_string(), "--httpAddr", "", "--monitoringAddr", ""])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no kubeconfig and not in a cluster"), "{err}");
}

#[test]
fn an_invalid_mesh_config_stops_the_server_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = dir.path().join("mesh");
    std::fs::write(&mesh, "enableAutoMtls: [yes]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--configDir", concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo")])
        .args(["--meshConfig", mesh.to_str().unwrap()])
        .args(["--grpcAddr", &free_port().to_string(), "--httpAddr", "", "--monitoringAddr", ""])
        .args(["--secureGRPCAddr", "", "--httpsAddr", ""])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--meshConfig") && err.contains("enableAutoMtls"), "{err}");
}

/// A mode from a newer Istio, or one this version does not know, starts
/// and serves, and what is not applied is logged (issue #33).
#[test]
fn a_newer_mesh_config_value_starts_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = dir.path().join("mesh");
    // ALLOW_ANY_DYNAMIC_DNS is built; its newer `tls` is not.
    std::fs::write(&mesh, "outboundTrafficPolicy:\n  mode: ALLOW_ANY_DYNAMIC_DNS\n  tls: {mode: SIMPLE}\n").unwrap();
    let s = support::Server::start(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo")),
        &["--meshConfig", mesh.to_str().unwrap()],
        &[],
        None,
    );
    assert!(
        s.log().contains("mesh config read and not applied: outboundTrafficPolicy.tls: AllowAnyDynamicDNSCluster"),
        "{}",
        s.log()
    );
    std::fs::write(&mesh, "outboundTrafficPolicy:\n  mode: SOMETIMES\n").unwrap();
    support::wait_for("the unknown mode reported", std::time::Duration::from_secs(10), || {
        s.log().contains("outboundTrafficPolicy.mode \"SOMETIMES\" is unknown to this version")
    });
    assert_eq!(support::get(s.http, "/ready").map(|r| r.0), Some(200));
}

#[test]
fn serves_from_kubernetes_and_is_ready_only_after_every_kind_synced() {
    use istiod_kubewatch::fake::core_resources;
    let api = support::fake_api();
    for r in core_resources().into_iter().filter(|r| r.plural != "nodes") {
        api.install(r);
    }
    api.apply(
        "services",
        serde_json::json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {"clusterIP": "10.96.0.5", "ports": [{"name": "http", "port": 80}]}}),
    );
    let (_dir, server, http, monitoring) = on_fake_api(&api, &[]);
    wait_for("the debug port", || get(http, "/ready").is_some());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(get(http, "/ready").unwrap().0, 503, "nodes have not synced: not ready");
    api.install(core_resources().into_iter().find(|r| r.plural == "nodes").unwrap());
    wait_for("ready", || get(http, "/ready").map(|r| r.0) == Some(200));
    wait_for("the service", || get(http, "/debug/registryz").unwrap().1.contains("web.shop.svc.cluster.local"));
    api.delete("services", "shop", "web");
    wait_for("the service gone", || !get(http, "/debug/registryz").unwrap().1.contains("web.shop"));
    // istiod counts informer events by kind and event
    // (pilot/pkg/serviceregistry/kube/controller/controller.go
    // registerHandlers: "Services"; the list's objects are adds) and the
    // service updates it handles (pilot/pkg/xds/monitoring.go).
    let metrics = get(monitoring, "/metrics").unwrap().1;
    for line in [
        "pilot_k8s_reg_events{type=\"Services\",event=\"add\"} 1\n",
        "pilot_k8s_reg_events{type=\"Services\",event=\"delete\"} 1\n",
        "pilot_inbound_updates{type=\"svcdelete\"} 1\n",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(!metrics.contains("pilot_k8s_cfg_events{"), "no Istio config in this cluster:\n{metrics}");
    assert!(server.terminate().success());
}

/// The binary on the fake API server `api` (one core, no TLS ports), with
/// `env`: the kubeconfig's directory, the server, its debug and
/// monitoring addresses.
fn on_fake_api(
    api: &istiod_kubewatch::fake::FakeApi,
    env: &[(&str, &str)],
) -> (tempfile::TempDir, Server, std::net::SocketAddr, std::net::SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: fake, cluster: {{server: \"{}\"}}}}]\n\
             users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: c, context: {{cluster: fake, user: u}}}}]\ncurrent-context: c\n",
            api.url()
        ),
    )
    .unwrap();
    let (grpc, http, monitoring) = (free_port(), free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--kubeconfig", kubeconfig.to_str().unwrap()])
        .args(["--grpcAddr", &grpc.to_string(), "--httpAddr", &http.to_string()])
        .args(["--monitoringAddr", &monitoring.to_string(), "--secureGRPCAddr", "", "--httpsAddr", "", "--cores", "1"])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (dir, Server { child }, http, monitoring)
}

use support::copy_dir;

fn wait_for(what: &str, f: impl FnMut() -> bool) {
    support::wait_for(what, Duration::from_secs(10), f)
}

#[test]
fn config_dir_edits_are_served_and_bad_files_reported() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo")), dir.path());
    let (grpc, http, monitoring) = (free_port(), free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--configDir", dir.path().to_str().unwrap()])
        .args(["--grpcAddr", &grpc.to_string(), "--httpAddr", &http.to_string()])
        .args(["--monitoringAddr", &monitoring.to_string(), "--secureGRPCAddr", "", "--httpsAddr", "", "--cores", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server { child };
    wait_for("ready", || get(http, "/ready").map(|r| r.0) == Some(200));
    let version = || {
        let body = get(http, "/debug/stats").unwrap().1;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v[0]["snapshot_version"].as_u64().unwrap()
    };
    wait_for("first snapshot", || version() == 1);

    // Add a service: it appears in the model and a new snapshot goes out.
    std::fs::write(
        dir.path().join("extra.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: extra, namespace: bookinfo}\nspec:\n  clusterIP: 10.96.10.99\n  ports: [{name: http, port: 8000}]\n",
    )
    .unwrap();
    wait_for("the new service", || {
        get(http, "/debug/registryz").unwrap().1.contains("extra.bookinfo.svc.cluster.local")
    });
    wait_for("second snapshot", || version() == 2);
    // istiod counts a push's reasons for each proxy it pushes
    // (`recordPushTriggers` in `doSendPushes`): with none connected, this
    // service update counts nothing (tests/loadgen.rs counts with proxies).
    let metrics = get(monitoring, "/metrics").unwrap().1;
    assert!(!metrics.contains("pilot_push_triggers{type=\"service\"}"), "{metrics}");

    // A broken document is reported with file and index; nothing changes.
    std::fs::write(dir.path().join("broken.yaml"), "kind: Service\nmetadata: {name: b}\nspec: {ports: [{port: x}]}\n")
        .unwrap();
    wait_for("the error in the report", || get(http, "/debug/config_report").unwrap().1.contains("broken.yaml"));
    let configz = get(http, "/debug/config_report").unwrap().1;
    assert!(configz.contains("\"document\": 0"), "{configz}");
    assert_eq!(version(), 2, "a bad document publishes nothing");

    // Delete: the service leaves the model.
    std::fs::remove_file(dir.path().join("extra.yaml")).unwrap();
    wait_for("the service gone", || !get(http, "/debug/registryz").unwrap().1.contains("extra.bookinfo"));
    wait_for("third snapshot", || version() == 3);
    assert!(server.terminate().success());
}

/// istiod's api generator with ENABLE_XDS_API_GENERATOR_AUTH off: a type
/// the server does not serve gets one empty answer, its ACK none, and the
/// stream goes on (with the default, tests/py/ads_binary.py checks the
/// refusal).
#[test]
fn an_unknown_type_is_answered_empty_when_api_auth_is_off() {
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo"));
    let server = support::Server::start(dir, &[], &[("ENABLE_XDS_API_GENERATOR_AUTH", "false")], None);
    let out = python::run("unknown_type.py", &[server.grpc.to_string().as_ref()]);
    assert!(out.status.success(), "{}", python::text(&out));
}

/// allowAuthenticatedOrLocalhost (pilot/pkg/xds/debug.go): the monitoring
/// port's debug handlers refuse a caller that is not on loopback with 401
/// (istiod-rs does not authenticate such callers yet); /metrics is for
/// everyone. Needs a non-loopback address on this host; without one there
/// is nothing to check.
#[test]
fn monitoring_debug_refuses_callers_not_on_loopback() {
    let Some(ip) = support::non_loopback_ip() else { return };
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo"));
    let port = free_port().port();
    let server = support::Server::start(dir, &["--monitoringAddr", &format!("0.0.0.0:{port}")], &[], None);
    let there = std::net::SocketAddr::new(ip, port);
    assert_eq!(get(there, "/debug/syncz").map(|r| r.0), Some(401));
    assert_eq!(get(there, "/metrics").map(|r| r.0), Some(200));
    let here = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(get(here, "/debug/syncz").map(|r| r.0), Some(200));
    drop(server);
}

/// istiod's `env` package: a value that does not parse is logged and its
/// default used; the server starts and serves. `--cores` above the CPUs
/// is served but warned about.
#[test]
fn a_malformed_environment_value_is_logged_and_defaulted() {
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo"));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) + 1;
    let server = support::Server::start(
        dir,
        &["--cores", &cores.to_string()],
        &[("PILOT_ENABLE_EDS_DEBOUNCE", "sure"), ("PILOT_TRACE_SAMPLING", "lots")],
        None,
    );
    let log = server.log();
    assert!(log.contains("PILOT_ENABLE_EDS_DEBOUNCE=\"sure\"") && log.contains("using the default true"), "{log}");
    assert!(log.contains("PILOT_TRACE_SAMPLING=\"lots\""), "{log}");
    assert!(log.contains("--cores is above the CPUs"), "{log}");
    assert_eq!(get(server.http, "/ready").map(|r| r.0), Some(200));
}

/// `ISTIO_WATCH_NAMESPACE` (istiod's `kclient` informers, `ToOpts`): the
/// namespaced kinds are listed and watched in that namespace only, so
/// another namespace's Service is never read, before or after a change;
/// cluster-scoped kinds (Nodes, which readiness waits for) are read whole.
#[test]
fn istio_watch_namespace_reads_one_namespace() {
    use istiod_kubewatch::fake::core_resources;
    let api = support::fake_api();
    for r in core_resources() {
        api.install(r);
    }
    let service = |name: &str, ns: &str, ip: &str| {
        serde_json::json!({"metadata": {"name": name, "namespace": ns},
            "spec": {"clusterIP": ip, "ports": [{"name": "http", "port": 80}]}})
    };
    api.apply("services", service("web", "shop", "10.96.0.5"));
    api.apply("services", service("api", "other", "10.96.0.6"));
    let (_dir, server, http, _) = on_fake_api(&api, &[("ISTIO_WATCH_NAMESPACE", "shop")]);
    wait_for("ready", || get(http, "/ready").map(|r| r.0) == Some(200));
    wait_for("the service", || get(http, "/debug/registryz").unwrap().1.contains("web.shop.svc.cluster.local"));
    api.apply("services", service("web2", "shop", "10.96.0.7"));
    api.apply("services", service("api2", "other", "10.96.0.8"));
    wait_for("the new service", || get(http, "/debug/registryz").unwrap().1.contains("web2.shop.svc.cluster.local"));
    let registry = get(http, "/debug/registryz").unwrap().1;
    assert!(!registry.contains(".other.svc"), "{registry}");
    assert!(server.terminate().success());
}
