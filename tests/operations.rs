//! Operating the binary as istiod is operated (issue #39): ControlZ's
//! logging scopes changed at run time and seen in the log, every
//! `--log_target`, CPU profiles read back by a pprof parser.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::ads_client as client;
use crate::python;
use crate::server::{self, BOOKINFO, Server, copy_dir, free_port, wait_for};
use istiod_proto::envoy::service::discovery::v3::DiscoveryRequest;
use istiod_proto::type_url;

/// One HTTP/1.1 request on a new connection: status and body bytes.
fn request(addr: SocketAddr, method: &str, path: &str, body: &str, timeout: Duration) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = out[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else { return out };
        let size = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 2 + size + 2..];
    }
}

fn json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (status, body) = request(addr, "GET", path, "", Duration::from_secs(5));
    assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

/// ControlZ (istiod's `pkg/ctrlz`, what `istioctl admin log` drives):
/// `ads` starts at info, so the control thread's per-publish debug line is
/// not written; after `PUT /scopej/ads` with debug and callers on, the next
/// config change writes it, with its source location, to both log targets.
#[test]
fn controlz_changes_a_scope_level_at_run_time() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(std::path::Path::new(BOOKINFO), dir.path());
    let file_log = dir.path().join("second-target.log");
    let ctrlz = free_port();
    let s = Server::start(
        dir.path(),
        &[
            "--ctrlz_port",
            &ctrlz.port().to_string(),
            "--log_target",
            "stderr",
            "--log_target",
            file_log.to_str().unwrap(),
        ],
        &[],
        None,
    );
    let ads = json(ctrlz, "/scopej/ads");
    assert_eq!(ads["output_level"], "info", "{ads}");
    assert_eq!(ads["log_callers"], false);
    let all = json(ctrlz, "/scopej/");
    assert!(all.as_array().unwrap().iter().any(|x| x["name"] == "model"), "{all}");
    assert!(!s.log().contains("\tdebug\tads"), "ads is at info: {}", s.log());

    let put = r#"{"output_level": "debug", "stack_trace_level": "none", "log_callers": true}"#;
    let (status, body) = request(ctrlz, "PUT", "/scopej/ads", put, Duration::from_secs(5));
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
    assert_eq!(json(ctrlz, "/scopej/ads")["output_level"], "debug");
    let (status, body) = request(ctrlz, "PUT", "/scopej/no-such-scope", put, Duration::from_secs(5));
    assert_eq!((status, String::from_utf8_lossy(&body).as_ref()), (400, "unknown scope name: no-such-scope"));

    // A change: the control thread publishes, and says so at debug.
    let se = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: ext, namespace: default}\n\
              spec: {hosts: [ext.example.com], ports: [{number: 443, name: tls, protocol: TLS}], resolution: DNS}\n";
    std::fs::write(dir.path().join("zz-ext.yaml"), se).unwrap();
    wait_for("a debug line of ads", Duration::from_secs(20), || s.log().contains("\tdebug\tads\t"));
    let line = s.log().lines().find(|l| l.contains("\tdebug\tads\t")).unwrap().to_owned();
    assert!(line.contains("\tpublish"), "{line}");
    assert!(line.contains("src/control.rs:"), "callers are on: {line}");
    let second = std::fs::read_to_string(&file_log).unwrap();
    assert!(second.contains(&line), "every --log_target gets each line: {second}");
    assert!(second.contains("ControlZ: scope changed"), "{second}");

    // The other topics istioctl's dashboard shows.
    let args = json(ctrlz, "/argsj/");
    assert!(args.as_array().unwrap().iter().any(|a| a == "--ctrlz_port"), "{args}");
    assert_eq!(json(ctrlz, "/procj/")["pid"], s.pid());
    assert!(json(ctrlz, "/versionj/")["version"].is_string());
    assert!(json(ctrlz, "/envj/").as_array().is_some());
}

/// `/debug/pprof/profile` (istiod's `--profile`, on by default): a CPU
/// profile taken while the server works, decoded by protobuf against
/// pprof's `profile.proto`, with samples in the server's own functions;
/// `--profile=false` serves none.
#[test]
fn cpu_profiles_are_read_back_by_a_pprof_parser() {
    let s = Server::start(std::path::Path::new(BOOKINFO), &[], &[], None);
    let index = server::get(s.http, "/debug/pprof/").unwrap();
    assert_eq!(index.0, 200);
    assert!(index.1.contains("profile"), "{}", index.1);
    let cmdline = server::get(s.http, "/debug/pprof/cmdline").unwrap().1;
    assert!(cmdline.split('\0').any(|a| a == "discovery"), "{cmdline:?}");
    assert_eq!(
        server::get(s.http, "/debug/pprof/profile?seconds=46").unwrap(),
        (400, "profile duration exceeds server's WriteTimeout\n".to_owned())
    );

    // A proxy stream held through the profile (SIGPROF interrupts the
    // serving cores' io_uring waits).
    let rt = client::runtime();
    let cds = || DiscoveryRequest {
        node: Some(client::sidecar(1)),
        type_url: type_url::CLUSTER.into(),
        ..Default::default()
    };
    let mut held = rt.block_on(async {
        let mut c = client::connect(s.grpc, false).await;
        c.sotw(cds());
        assert!(!c.recv().await.resources.is_empty());
        c
    });
    // Work for the profile to see: scrapes and config dumps, for 3 s.
    let (http, monitoring) = (s.http, s.monitoring);
    let load = std::thread::spawn(move || {
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            let _ = server::get(monitoring, "/metrics");
            let _ = server::get(http, "/debug/configz");
        }
    });
    let (status, body) = request(s.http, "GET", "/debug/pprof/profile?seconds=2", "", Duration::from_secs(40));
    load.join().unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &body).unwrap();
    let out = python::run("pprof_check.py", &[file.path().as_os_str(), "istiod".as_ref()]);
    assert!(out.status.success(), "{}", python::text(&out));
    // Served as before: the held stream is open, a new one is answered.
    rt.block_on(async {
        assert!(!held.ended_within(Duration::from_millis(200)).await, "the stream survived the profile");
        let mut c = client::connect(s.grpc, false).await;
        c.sotw(cds());
        assert!(!c.recv().await.resources.is_empty());
    });
    drop(s);

    let off = Server::start(std::path::Path::new(BOOKINFO), &["--profile=false"], &[], None);
    assert_eq!(server::get(off.http, "/debug/pprof/profile?seconds=1").unwrap().0, 404);
}

/// `--grpcAddr=""` and `--monitoringAddr=""` move their services to the
/// HTTP port, as istiod's shared mux does: an h2 gRPC client is served
/// xDS on 8080, HTTP/1.1 there still answers `/ready` and the debug
/// handlers, and `/metrics` is there too.
#[test]
fn empty_addresses_move_their_services_to_the_http_port() {
    let s = Server::start(std::path::Path::new(BOOKINFO), &["--grpcAddr", "", "--monitoringAddr", ""], &[], None);
    assert!(s.log().contains("multiplexing gRPC on http addr"), "{}", s.log());
    assert!(TcpStream::connect(s.grpc).is_err(), "no plaintext gRPC port of its own");
    let rt = client::runtime();
    let cds =
        DiscoveryRequest { node: Some(client::sidecar(7)), type_url: type_url::CLUSTER.into(), ..Default::default() };
    let mut c = rt.block_on(async {
        let mut c = client::connect(s.http, false).await;
        c.sotw(cds);
        let r = c.recv().await;
        assert!(!r.resources.is_empty(), "CDS over the HTTP port");
        c
    });
    // HTTP/1.1 on the same port: readiness, debug, metrics.
    assert_eq!(server::get(s.http, "/ready").unwrap().0, 200);
    let syncz = server::get(s.http, "/debug/syncz").unwrap().1;
    assert!(syncz.contains("app-7.default"), "the proxy on 8080 is listed: {syncz}");
    let (status, metrics) = server::get(s.http, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(metrics.contains("pilot_xds{"), "{metrics}");
    rt.block_on(async { assert!(!c.ended_within(Duration::from_millis(100)).await) });
}

/// The kinds read, as istiod's switches choose them:
/// `PILOT_ENABLE_GATEWAY_API=false` drops the Gateway API, and
/// `PILOT_IGNORE_RESOURCES` / `PILOT_INCLUDE_RESOURCES` drop CRD kinds by
/// `<plural>.<group>` (upstream `TestCRDWatcherWithUnionFilter`'s lists,
/// less Ingress), with every default server reading them all.
#[test]
fn kinds_are_read_as_the_resource_switches_say() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(std::path::Path::new(BOOKINFO), dir.path());
    std::fs::write(
        dir.path().join("gateway-api.yaml"),
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: bookinfo}\n\
         spec: {gatewayClassName: istio, listeners: [{name: http, port: 80, protocol: HTTP}]}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: route, namespace: bookinfo}\n\
         spec: {parentRefs: [{name: gw}], rules: [{backendRefs: [{name: productpage, port: 9080}]}]}\n",
    )
    .unwrap();
    let read = |env: &[(&str, &str)]| {
        let s = Server::start(dir.path(), &[], env, None);
        let report: serde_json::Value =
            serde_json::from_str(&server::get(s.http, "/debug/config_report").unwrap().1).unwrap();
        let configz = server::get(s.http, "/debug/configz").unwrap().1;
        (report["istioConfig"].clone(), configz.contains("\"HTTPRoute\""))
    };
    let (all, gateway_api) = read(&[]);
    assert!(gateway_api, "read by default");
    assert_eq!(all["VirtualService"], 4, "{all}");
    let (some, gateway_api) = read(&[
        ("PILOT_ENABLE_GATEWAY_API", "false"),
        ("PILOT_IGNORE_RESOURCES", "*.istio.io, ingresses.networking.k8s.io"),
        ("PILOT_INCLUDE_RESOURCES", "*.security.istio.io, destinationrules.networking.istio.io"),
    ]);
    assert!(!gateway_api, "PILOT_ENABLE_GATEWAY_API=false");
    let kinds: Vec<&String> = some.as_object().unwrap().keys().collect();
    assert_eq!(
        kinds,
        ["AuthorizationPolicy", "DestinationRule", "PeerAuthentication", "RequestAuthentication"],
        "networking.istio.io is ignored but for DestinationRules; security.istio.io is included: {some}"
    );
}
