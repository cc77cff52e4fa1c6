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
/// `/debug/pprof/heap`, the sampled live heap in the same format, its
/// addresses in the binary's mappings; `--profile=false` serves neither.
#[test]
fn cpu_and_heap_profiles_are_read_back_by_a_pprof_parser() {
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
    // The heap profile: jemalloc's samples of the live heap, addresses in
    // the binary's mappings for pprof to symbolize.
    let (status, heap) = request(s.http, "GET", "/debug/pprof/heap", "", Duration::from_secs(20));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&heap));
    std::fs::write(file.path(), &heap).unwrap();
    let out = python::run("pprof_check.py", &["--heap".as_ref(), file.path().as_os_str(), "pilot-discovery".as_ref()]);
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
    assert_eq!(server::get(off.http, "/debug/pprof/heap").unwrap().0, 404);
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
    // HTTP/1.1 on the same port: readiness, debug, metrics; a client that
    // sends nothing (its first bytes decide HTTP/2 or not) delays nobody.
    let _silent = TcpStream::connect(s.http).unwrap();
    let started = Instant::now();
    assert_eq!(server::get(s.http, "/ready").unwrap().0, 200);
    assert!(started.elapsed() < Duration::from_secs(3), "answered while another connection is silent");
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

/// The bookinfo example's productpage sidecar.
fn productpage() -> istiod_proto::envoy::config::core::v3::Node {
    istiod_proto::envoy::config::core::v3::Node {
        id: "sidecar~10.244.1.10~productpage-v1-5f7c9d8b46-q7xkz.bookinfo~bookinfo.svc.cluster.local".into(),
        ..Default::default()
    }
}

/// The value of the series whose line starts with `prefix`.
pub(crate) fn series(metrics: &str, prefix: &str) -> Option<f64> {
    metrics.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Runs `metrics_check.py` (prometheus_client's parser, istiod's types and
/// labels) on a scrape with `names` required.
pub(crate) fn check_scrape(metrics: &str, names: &[&str]) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), metrics).unwrap();
    let mut args: Vec<&std::ffi::OsStr> = vec![file.path().as_os_str()];
    args.extend(names.iter().map(|n| std::ffi::OsStr::new(*n)));
    let out = python::run("metrics_check.py", &args);
    assert!(out.status.success(), "{}\n{metrics}", python::text(&out));
}

/// istiod's metrics that a mesh brings about, each counted where istiod
/// counts it and parsed as Prometheus parses a scrape: a proxy's requests
/// (`pilot_xds_recv_max`, `xds_cache_reads`) and a change it is pushed
/// (`xds_cache_evictions`); a Gateway server refused at merging
/// (`pilot_total_rejected_configs`); key sets fetched and not
/// (`pilot_jwks_resolver_network_fetch_*`); a tracing provider whose
/// service does not exist (`provider_lookup_cluster_failures`); an
/// endpoint naming a Pod that is not there (`endpoint_no_pod`,
/// `pilot_k8s_endpoints_*`); a DNS ServiceEntry's subset selecting nothing
/// (`pilot_dns_cluster_without_endpoints`); two ServiceEntries of one host
/// and port, two VirtualServices of one host (`pilot_duplicate_envoy_clusters`,
/// `pilot_vservice_dup_domain`); proxies no service selects
/// (`pilot_k8s_proxies_with_no_service_targets`, by reason); the
/// dependency keys behind the cache (`xds_cache_dependent_config_size`).
#[test]
fn istiods_metrics_are_counted_where_istiod_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(std::path::Path::new(BOOKINFO), dir.path());
    let keys = std::sync::Arc::new(std::sync::Mutex::new(r#"{"keys":[]}"#.to_owned()));
    let good_uri = server::http_body_server(keys);
    // A port nothing listens on.
    let bad_uri = format!("http://{}/jwks.json", free_port());
    std::fs::write(
        dir.path().join("zz-metrics.yaml"),
        format!(
            "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: conflict, namespace: bookinfo}}\n\
             spec:\n  selector: {{istio: ingressgateway}}\n  servers:\n\
             \x20 - {{port: {{number: 80, name: http, protocol: HTTP}}, hosts: [a.example.com]}}\n\
             \x20 - {{port: {{number: 80, name: tcp, protocol: TCP}}, hosts: [b.example.com]}}\n---\n\
             apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: remote, namespace: bookinfo}}\n\
             spec:\n  jwtRules:\n  - {{issuer: good.example, jwksUri: \"{good_uri}\"}}\n  - {{issuer: bad.example, jwksUri: \"{bad_uri}\"}}\n---\n\
             apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{name: ratings-ghost, namespace: bookinfo, labels: {{kubernetes.io/service-name: ratings}}}}\n\
             addressType: IPv4\nports: [{{name: http, port: 9080, protocol: TCP}}]\n\
             endpoints:\n- {{addresses: [10.244.9.9], conditions: {{ready: true}}, targetRef: {{kind: Pod, name: ghost, namespace: bookinfo}}}}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: dns, namespace: bookinfo}}\n\
             spec: {{hosts: [api.example.com], ports: [{{number: 443, name: tls, protocol: TLS}}], resolution: DNS}}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: dns, namespace: bookinfo}}\n\
             spec: {{host: api.example.com, subsets: [{{name: none, labels: {{version: none}}}}]}}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {{name: dns-again, namespace: default}}\n\
             spec: {{hosts: [api.example.com], ports: [{{number: 443, name: tls, protocol: TLS}}], resolution: DNS}}\n---\n\
             apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: ratings-again, namespace: bookinfo}}\n\
             spec: {{hosts: [ratings], http: [{{route: [{{destination: {{host: ratings}}}}]}}]}}\n"
        ),
    )
    .unwrap();
    let mesh = dir.path().join("mesh-config.yaml.conf");
    std::fs::write(
        &mesh,
        "extensionProviders:\n- name: zipkin\n  zipkin:\n    service: missing.istio-system.svc.cluster.local\n    port: 9411\n\
         defaultProviders:\n  tracing: [zipkin]\n",
    )
    .unwrap();
    let s = Server::start(dir.path(), &["--meshConfig", mesh.to_str().unwrap()], &[], None);
    let rt = client::runtime();
    let node = productpage();
    let mut c = rt.block_on(async {
        let mut c = client::connect(s.grpc, false).await;
        for t in [type_url::CLUSTER, type_url::LISTENER] {
            c.sotw(DiscoveryRequest { node: Some(node.clone()), type_url: t.into(), ..Default::default() });
            let r = c.recv().await;
            assert!(!r.resources.is_empty(), "{t}");
            c.ack(&r, &[]);
        }
        c
    });
    // Proxies no service selects: a pod's (its labels), one whose
    // metadata says nothing (no labels), one of another cluster (not
    // counted).
    rt.block_on(async {
        let labelled = |id: &str, meta: &[(&str, &str)], labels: &[(&str, &str)]| {
            use istiod_proto::prost_types::{Struct, Value, value::Kind};
            let text = |v: &str| Value { kind: Some(Kind::StringValue(v.into())) };
            let mut fields: std::collections::BTreeMap<String, Value> =
                meta.iter().map(|(k, v)| (k.to_string(), text(v))).collect();
            let labels = labels.iter().map(|(k, v)| (k.to_string(), text(v))).collect();
            fields.insert("LABELS".into(), Value { kind: Some(Kind::StructValue(Struct { fields: labels })) });
            istiod_proto::envoy::config::core::v3::Node {
                id: id.into(),
                metadata: Some(Struct { fields }),
                ..Default::default()
            }
        };
        for node in [
            labelled("sidecar~10.244.3.3~orphan-1.bookinfo~bookinfo.svc.cluster.local", &[], &[("app", "orphan")]),
            labelled(
                "sidecar~10.244.3.4~remote-1.bookinfo~bookinfo.svc.cluster.local",
                &[("CLUSTER_ID", "elsewhere")],
                &[("app", "reviews")],
            ),
        ] {
            let mut c = client::connect(s.grpc, false).await;
            c.sotw(DiscoveryRequest { node: Some(node), type_url: type_url::CLUSTER.into(), ..Default::default() });
            c.recv().await;
        }
    });
    // A change to what the proxy was sent: its cached CDS is replaced.
    std::fs::write(
        dir.path().join("zz-change.yaml"),
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ratings-pool, namespace: bookinfo}\n\
         spec: {host: ratings, trafficPolicy: {connectionPool: {tcp: {maxConnections: 7}}}}\n",
    )
    .unwrap();
    let scrape = || server::get(s.monitoring, "/metrics").unwrap().1;
    wait_for("the change's push and both key set fetches", Duration::from_secs(20), || {
        rt.block_on(async {
            // Take what is pushed meanwhile.
            let _ = tokio::time::timeout(Duration::from_millis(20), c.recv()).await;
        });
        let m = scrape();
        series(&m, "xds_cache_evictions{type=\"clear\"}").is_some()
            && series(&m, "pilot_jwks_resolver_network_fetch_fail_total").is_some()
            && series(&m, "pilot_jwks_resolver_network_fetch_success_total").is_some()
    });
    let m = scrape();
    assert_eq!(series(&m, "endpoint_no_pod "), Some(1.0), "{m}");
    assert_eq!(series(&m, "pilot_k8s_endpoints_pending_pod "), Some(1.0));
    assert_eq!(series(&m, "pilot_k8s_endpoints_with_no_pods "), Some(1.0));
    assert_eq!(series(&m, "pilot_dns_cluster_without_endpoints "), Some(1.0), "the subset selecting nothing");
    assert_eq!(series(&m, "pilot_duplicate_envoy_clusters "), Some(1.0), "api.example.com:443 twice");
    assert_eq!(series(&m, "pilot_vservice_dup_domain "), Some(1.0), "ratings claimed twice");
    assert_eq!(
        series(&m, "pilot_total_rejected_configs{type=\"gateway\",name=\"bookinfo/conflict\"}"),
        Some(1.0),
        "{m}"
    );
    assert!(series(&m, "provider_lookup_cluster_failures{type=\"zipkin\"}").is_some_and(|n| n >= 1.0), "{m}");
    assert!(series(&m, "xds_cache_reads{type=\"miss\"}").is_some_and(|n| n >= 2.0));
    assert!(series(&m, "pilot_xds_recv_max ").is_some_and(|n| n > 50.0), "the node's request");
    for (reason, want) in
        [("no_matching_metadata", Some(1.0)), ("no_matching_services", Some(1.0)), ("incorrect_cluster", None)]
    {
        // (istiod's aggregate registry never asks another cluster's
        // registry, so `incorrect_cluster` is not counted.)
        let name = format!("pilot_k8s_proxies_with_no_service_targets{{reason=\"{reason}\"}}");
        assert_eq!(series(&m, &name), want, "{m}");
    }
    // One key per kind of dependency (six) at least.
    assert!(series(&m, "xds_cache_dependent_config_size ").is_some_and(|n| n >= 6.0), "{m}");
    check_scrape(
        &m,
        &[
            "pilot_xds_recv_max",
            "xds_cache_reads",
            "xds_cache_evictions",
            "xds_cache_size",
            "pilot_total_rejected_configs",
            "pilot_jwks_resolver_network_fetch_success_total",
            "pilot_jwks_resolver_network_fetch_fail_total",
            "provider_lookup_cluster_failures",
            "endpoint_no_pod",
            "pilot_k8s_endpoints_pending_pod",
            "pilot_k8s_endpoints_with_no_pods",
            "pilot_dns_cluster_without_endpoints",
            "pilot_duplicate_envoy_clusters",
            "pilot_vservice_dup_domain",
            "pilot_k8s_proxies_with_no_service_targets",
            "xds_cache_dependent_config_size",
        ],
    );
}

/// istiod's `cachez` (names by type, `sizes`, `clear`), `resourcesz`,
/// `pushcontext` and `adsz?push=true`, with a proxy connected: the push
/// reaches it, and a cleared cache is empty.
#[test]
fn cache_resources_pushcontext_and_push_debug_paths() {
    let s = Server::start(std::path::Path::new(BOOKINFO), &[], &[], None);
    let rt = client::runtime();
    let node = productpage();
    let mut c = rt.block_on(async {
        let mut c = client::connect(s.grpc, false).await;
        c.sotw(DiscoveryRequest { node: Some(node), type_url: type_url::CLUSTER.into(), ..Default::default() });
        let r = c.recv().await;
        c.ack(&r, &[]);
        c
    });
    let get =
        |path: &str| -> serde_json::Value { serde_json::from_str(&server::get(s.http, path).unwrap().1).unwrap() };
    let cached = get("/debug/cachez");
    let clusters = cached[type_url::CLUSTER].as_array().unwrap_or_else(|| panic!("{cached}"));
    assert!(clusters.iter().any(|n| n.as_str().unwrap().starts_with("outbound|9080||reviews")), "{cached}");
    let sizes = get("/debug/cachez?sizes=true");
    let total = sizes["total"].as_str().unwrap();
    assert!(total.ends_with("kB") || total.ends_with('B'), "istiod's ByteCount: {sizes}");
    assert!(sizes[type_url::CLUSTER].is_string());
    let kinds = get("/debug/resourcesz");
    let kinds: Vec<&str> = kinds.as_array().unwrap().iter().map(|k| k["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"VirtualService") && kinds.contains(&"HTTPRoute"), "{kinds:?}");
    assert!(!kinds.contains(&"Service") && !kinds.contains(&"ConfigMap"), "config kinds only: {kinds:?}");
    let pc = get("/debug/pushcontext");
    assert_eq!(pc["AuthorizationPolicies"]["root_namespace"], "istio-system", "{pc}");
    assert!(pc["NetworkGateways"].is_array());
    // A push of everything: the proxy gets its clusters again.
    assert_eq!(server::get(s.http, "/debug/adsz?push=true").unwrap(), (200, "Pushed to 1 servers\n".to_owned()));
    rt.block_on(async {
        let r = tokio::time::timeout(Duration::from_secs(10), c.recv()).await.expect("a push");
        assert_eq!(r.type_url, type_url::CLUSTER);
        assert!(!r.resources.is_empty());
    });
    assert_eq!(server::get(s.http, "/debug/cachez?clear=true").unwrap(), (200, "Cache cleared\n".to_owned()));
    assert_eq!(get("/debug/cachez"), serde_json::json!({}));
}

/// istiod's GatewayClass controller: the built-in classes (`istio`,
/// `istio-remote`) are created where missing by two replicas at once (one
/// create wins, the other's conflict is fine), a class that exists is left
/// as its owner wrote it, and a deleted one comes back; with
/// `PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER=false` none is made,
/// and with `PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API=false` no `istio-remote`;
/// the default class's name and controller follow their variables.
#[test]
fn the_builtin_gateway_classes_are_created_and_kept() {
    let api = server::fake_api();
    for r in istiod_kubewatch::fake::core_resources().into_iter().chain(istiod_kubewatch::fake::gateway_api_resources())
    {
        api.install(r);
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let start = |pod: &str, env: &[(&str, &str)]| {
        let mut e = vec![("POD_NAME", pod), ("POD_NAMESPACE", "istio-system")];
        e.extend_from_slice(env);
        Server::start_on(&["--kubeconfig", kubeconfig.to_str().unwrap()], &[], &e, None)
    };
    let off = start("istiod-off", &[("PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER", "false")]);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(api.count("gatewayclasses"), 0, "the controller is off");
    drop(off);
    // A class of the user's, under a built-in name: kept as written.
    api.apply(
        "gatewayclasses",
        serde_json::json!({"metadata": {"name": "istio-remote"}, "spec": {"controllerName": "example.com/theirs"}}),
    );
    let (a, b) = std::thread::scope(|t| {
        let a = t.spawn(|| start("istiod-a", &[]));
        let b = t.spawn(|| start("istiod-b", &[]));
        (a.join().unwrap(), b.join().unwrap())
    });
    wait_for("the default GatewayClass", Duration::from_secs(20), || api.get("gatewayclasses", "", "istio").is_some());
    let istio = api.get("gatewayclasses", "", "istio").unwrap();
    assert_eq!(istio["spec"]["controllerName"], "istio.io/gateway-controller");
    assert_eq!(istio["spec"]["description"], "The default Istio GatewayClass");
    assert_eq!(api.count("gatewayclasses"), 2, "no waypoint class without ambient");
    assert_eq!(api.get("gatewayclasses", "", "istio-remote").unwrap()["spec"]["controllerName"], "example.com/theirs");
    api.delete("gatewayclasses", "", "istio");
    wait_for("the class made again", Duration::from_secs(20), || api.get("gatewayclasses", "", "istio").is_some());
    drop((a, b));
    // Without multi-network Gateway API discovery there is no istio-remote.
    api.delete("gatewayclasses", "", "istio");
    api.delete("gatewayclasses", "", "istio-remote");
    let _c = start("istiod-c", &[("PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API", "false")]);
    wait_for("the default class again", Duration::from_secs(20), || api.get("gatewayclasses", "", "istio").is_some());
    std::thread::sleep(Duration::from_secs(3));
    assert!(api.get("gatewayclasses", "", "istio-remote").is_none(), "PILOT_MULTI_NETWORK_DISCOVER_GATEWAY_API=false");
    drop(_c);
    // PILOT_GATEWAY_API_DEFAULT_GATEWAYCLASS_NAME and
    // PILOT_GATEWAY_API_CONTROLLER_NAME: the default class under its name
    // and controller (istiod's classinfo.go, gatewayclass.go).
    let _d = start(
        "istiod-d",
        &[
            ("PILOT_GATEWAY_API_DEFAULT_GATEWAYCLASS_NAME", "corp"),
            ("PILOT_GATEWAY_API_CONTROLLER_NAME", "example.com/corp-gateways"),
        ],
    );
    wait_for("the renamed default class", Duration::from_secs(20), || api.get("gatewayclasses", "", "corp").is_some());
    let corp = api.get("gatewayclasses", "", "corp").unwrap();
    assert_eq!(corp["spec"]["controllerName"], "example.com/corp-gateways", "{corp}");
    assert_eq!(corp["spec"]["description"], "The default Istio GatewayClass");
}

/// istiod's node untaint controller (`PILOT_ENABLE_NODE_UNTAINT_CONTROLLERS`):
/// the readiness taint is removed from the node whose istio-cni pod is
/// ready, and only that taint; a node whose istio-cni pod is not ready, or
/// has none, keeps it. Off by default, as in istiod.
#[test]
fn nodes_are_untainted_once_their_cni_pod_is_ready() {
    let api = server::fake_api();
    for r in istiod_kubewatch::fake::core_resources() {
        api.install(r);
    }
    let taint = |key: &str| serde_json::json!({"key": key, "effect": "NoSchedule"});
    for node in ["ready", "starting", "bare"] {
        api.apply(
            "nodes",
            serde_json::json!({"metadata": {"name": node},
                "spec": {"taints": [taint("cni.istio.io/not-ready"), taint("example.com/other")]}}),
        );
    }
    for (node, ready) in [("ready", "True"), ("starting", "False")] {
        api.apply(
            "pods",
            serde_json::json!({"metadata": {"name": format!("istio-cni-node-{node}"), "namespace": "istio-system",
                    "labels": {"k8s-app": "istio-cni-node"}},
                "spec": {"nodeName": node},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}}),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let keys = |node: &str| -> Vec<String> {
        let n = api.get("nodes", "", node).unwrap();
        n["spec"]["taints"].as_array().unwrap().iter().map(|t| t["key"].as_str().unwrap().to_owned()).collect()
    };
    let env = [("POD_NAME", "istiod-a"), ("POD_NAMESPACE", "istio-system")];
    let off = Server::start_on(&["--kubeconfig", kubeconfig.to_str().unwrap()], &[], &env, None);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(keys("ready").len(), 2, "off by default");
    drop(off);
    let mut env = env.to_vec();
    env.push(("PILOT_ENABLE_NODE_UNTAINT_CONTROLLERS", "true"));
    let s = Server::start_on(&["--kubeconfig", kubeconfig.to_str().unwrap()], &[], &env, None);
    wait_for("the ready node untainted", Duration::from_secs(20), || keys("ready") == ["example.com/other"]);
    assert_eq!(keys("starting"), ["cni.istio.io/not-ready", "example.com/other"]);
    assert_eq!(keys("bare"), ["cni.istio.io/not-ready", "example.com/other"]);
    // The other pod becomes ready.
    api.apply(
        "pods",
        serde_json::json!({"metadata": {"name": "istio-cni-node-starting", "namespace": "istio-system",
                "labels": {"k8s-app": "istio-cni-node"}},
            "spec": {"nodeName": "starting"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    wait_for("the second node untainted", Duration::from_secs(20), || keys("starting") == ["example.com/other"]);
    assert!(s.log().contains("removed readiness taint from node"), "{}", s.log());
}

/// istiod's in-cluster analysis (`PILOT_ENABLE_ANALYSIS`): a VirtualService
/// naming a subset no DestinationRule defines gets istiod's IST0101 in its
/// `status.validationMessages` (code, level, documentation, as istiod's
/// `AnalysisMessageBase`), written by the `istio-analyze-leader`, and the
/// log says `Configuration analysis: ...`; fixed, its messages are emptied.
#[test]
fn analysis_messages_are_written_to_the_objects_status() {
    let api = server::fake_api();
    for r in istiod_kubewatch::fake::core_resources().into_iter().chain(istiod_kubewatch::fake::istio_resources()) {
        api.install(r);
    }
    let vs = |subset: &str| {
        serde_json::json!({"apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": "reviews", "namespace": "default"},
            "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews", "subset": subset}}]}]}})
    };
    api.apply(
        "destinationrules",
        serde_json::json!({"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
            "metadata": {"name": "reviews", "namespace": "default"},
            "spec": {"host": "reviews", "subsets": [{"name": "v1", "labels": {"version": "v1"}}]}}),
    );
    api.apply("virtualservices", vs("bogus"));
    // The host exists (else istiod's DestinationHostAnalyzer reports it
    // too); no pod runs it, so the rule's subset selects nothing.
    api.apply(
        "services",
        serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "reviews", "namespace": "default"},
            "spec": {"ports": [{"port": 9080, "name": "http"}], "selector": {"app": "reviews"}}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &[],
        &[
            ("POD_NAME", "istiod-a"),
            ("POD_NAMESPACE", "istio-system"),
            ("PILOT_ENABLE_ANALYSIS", "true"),
            ("PILOT_ENABLE_IP_AUTOALLOCATE", "false"),
        ],
        None,
    );
    let messages = || api.get("virtualservices", "default", "reviews").unwrap()["status"]["validationMessages"].clone();
    wait_for("the analysis message", Duration::from_secs(20), || messages().as_array().is_some_and(|m| !m.is_empty()));
    assert_eq!(
        messages(),
        serde_json::json!([{"documentationUrl": "https://istio.io/v1.28/docs/reference/config/analysis/ist0101/",
            "level": "ERROR", "type": {"code": "IST0101"}}])
    );
    assert!(
        s.log().contains(
            "Configuration analysis: Error [IST0101] (VirtualService default/reviews) Referenced host+subset in destinationrule not found: \"reviews+bogus\""
        ),
        "{}",
        s.log()
    );
    let report: serde_json::Value =
        serde_json::from_str(&server::get(s.http, "/debug/config_report").unwrap().1).unwrap();
    assert_eq!(report["analysis"].as_array().unwrap().len(), 2, "the rule's and the VirtualService's: {report}");
    api.apply("virtualservices", vs("v1"));
    wait_for("the messages emptied", Duration::from_secs(20), || messages() == serde_json::json!([]));
    // istiod's IST0173 (SubsetSelectPodAnalyzer) on the rule.
    let dr_messages =
        || api.get("destinationrules", "default", "reviews").unwrap()["status"]["validationMessages"].clone();
    assert_eq!(
        dr_messages(),
        serde_json::json!([{"documentationUrl": "https://istio.io/v1.28/docs/reference/config/analysis/ist0173/",
            "level": "ERROR", "type": {"code": "IST0173"}}])
    );
    assert!(
        s.log().contains(
            "Configuration analysis: Error [IST0173] (DestinationRule default/reviews) The Subset v1 defined in the DestinationRule does not select any pods. Which may lead to 503 UH (NoHealthyUpstream)."
        ),
        "{}",
        s.log()
    );
    // istiod's IST0134: a ServiceEntry without addresses on a TCP port
    // (no address allocated: PILOT_ENABLE_IP_AUTOALLOCATE is off here).
    api.apply(
        "serviceentries",
        serde_json::json!({"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"hosts": ["db.example.com"], "resolution": "DNS",
                     "ports": [{"number": 5432, "name": "tcp", "protocol": "TCP"}]}}),
    );
    let se_messages = || api.get("serviceentries", "default", "db").unwrap()["status"]["validationMessages"].clone();
    wait_for("the ServiceEntry's message", Duration::from_secs(20), || {
        se_messages().as_array().is_some_and(|m| !m.is_empty())
    });
    assert_eq!(se_messages()[0]["type"]["code"], "IST0134");
    assert_eq!(se_messages()[0]["level"], "WARNING");
}

/// Whether the bundled mesh with a RequestAuthentication whose keys are at
/// `uri`, served with `roots` as the system's (`SSL_CERT_FILE`) and
/// `env`, fetched them (else the fetch failed), by the JWKS metrics.
fn jwks_fetched(uri: &str, roots: &std::path::Path, env: &[(&str, &str)]) -> bool {
    let mesh = tempfile::tempdir().unwrap();
    copy_dir(std::path::Path::new(BOOKINFO), mesh.path());
    std::fs::write(
        mesh.path().join("zz-remote-jwks.yaml"),
        format!(
            "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: remote, namespace: bookinfo}}\n\
             spec:\n  jwtRules:\n  - {{issuer: tls.example, jwksUri: \"{uri}\"}}\n"
        ),
    )
    .unwrap();
    let mut e = vec![("SSL_CERT_FILE", roots.to_str().unwrap())];
    e.extend_from_slice(env);
    let s = Server::start(mesh.path(), &[], &e, None);
    let mut result = None;
    wait_for("a JWKS fetch", Duration::from_secs(20), || {
        let m = server::get(s.monitoring, "/metrics").unwrap().1;
        let ok = series(&m, "pilot_jwks_resolver_network_fetch_success_total ").is_some();
        let failed = series(&m, "pilot_jwks_resolver_network_fetch_fail_total ").is_some();
        result = (ok || failed).then_some(ok);
        result.is_some()
    });
    result.unwrap()
}

/// `COMPLIANCE_POLICY` holds for istiod-rs's JWKS client too: against a key
/// set served over TLS 1.3 only, `fips-140-2` (TLS 1.2 only) fetches
/// nothing, while the default policy fetches it (roots from `SSL_CERT_FILE`,
/// as the system's are read).
#[test]
fn the_compliance_policy_holds_for_jwks_fetches() {
    let dir = tempfile::tempdir().unwrap();
    let (mut peer, port, _) = tls13_peer(dir.path(), None);
    let (ca_file, uri) = (dir.path().join("ca.pem"), format!("https://127.0.0.1:{port}/jwks.json"));
    assert!(jwks_fetched(&uri, &ca_file, &[]), "TLS 1.3 by default");
    assert!(!jwks_fetched(&uri, &ca_file, &[("COMPLIANCE_POLICY", "fips-140-2")]), "fips-140-2 allows TLS 1.2 only");
    let _ = peer.kill();
    let _ = peer.wait();
}

/// `JWKS_RESOLVER_INSECURE_SKIP_VERIFY` (istiod's jwks_resolver.go
/// `InsecureSkipVerify`): a key set served with a certificate no trusted
/// root signed is not fetched by default, and is with the switch.
#[test]
fn the_jwks_resolver_can_skip_certificate_checks() {
    let dir = tempfile::tempdir().unwrap();
    let (mut peer, port, _) = tls13_peer(dir.path(), None);
    // Trusted instead: an unrelated CA.
    let other = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let roots = dir.path().join("other-ca.pem");
    std::fs::write(&roots, params.self_signed(&other).unwrap().pem()).unwrap();
    let uri = format!("https://127.0.0.1:{port}/jwks.json");
    assert!(!jwks_fetched(&uri, &roots, &[]), "an unknown issuer of the server's certificate");
    assert!(jwks_fetched(&uri, &roots, &[("JWKS_RESOLVER_INSECURE_SKIP_VERIFY", "true")]), "not checked");
    let _ = peer.kill();
    let _ = peer.wait();
}

/// `--httpsAddr=""` moves the webhooks to the HTTP port in plaintext, as
/// istiod's shared mux serves them: an AdmissionReview of an invalid
/// VirtualService posted to 8080 is refused with the validator's words,
/// a valid one allowed; other POSTs there are refused.
#[test]
fn an_empty_https_address_serves_the_webhooks_on_the_http_port() {
    let s = Server::start(std::path::Path::new(BOOKINFO), &["--httpsAddr", ""], &[], None);
    let review = |weight: i64| {
        serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "networking.istio.io", "version": "v1", "kind": "VirtualService"},
                "resource": {"group": "networking.istio.io", "version": "v1", "resource": "virtualservices"},
                "namespace": "bookinfo", "operation": "CREATE",
                "object": {"apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
                    "metadata": {"name": "reviews", "namespace": "bookinfo"},
                    "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}, "weight": weight}]}]}},
            },
        })
        .to_string()
    };
    let post = |body: &str, path: &str| {
        let (status, body) = request(s.http, "POST", path, body, Duration::from_secs(10));
        (status, serde_json::from_slice::<serde_json::Value>(&body).unwrap_or(serde_json::Value::Null))
    };
    let (status, ok) = post(&review(100), "/validate");
    assert_eq!((status, &ok["response"]), (200, &serde_json::json!({"uid": "u-1", "allowed": true})), "{ok}");
    let (_, bad) = post(&review(-5), "/validate");
    assert_eq!(bad["response"]["allowed"], false, "{bad}");
    let msg = bad["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.starts_with("configuration is invalid: ") && msg.contains("spec.http[0].route[0].weight"), "{msg}");
    assert_eq!(post("{}", "/debug/syncz").0, 405);
    // GET on the same port as before.
    assert_eq!(server::get(s.http, "/ready").unwrap().0, 200);
}

/// `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG` (istiod's `GatewayServices`): a
/// router is sent the clusters of the hosts its Gateways' VirtualServices
/// route to, where by default it gets every visible service's; with
/// Envoy fetching JWT keys, also the JWKS host of a RequestAuthentication
/// on it (`extraServicesForProxy`). An AUTO_PASSTHROUGH server keeps the
/// filter (istiod's `GatewayServices` makes no exception for it) and
/// still gets its SNI-DNAT clusters.
#[test]
fn a_router_can_be_sent_only_the_clusters_its_routes_need() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(std::path::Path::new(BOOKINFO), dir.path());
    std::fs::write(
        dir.path().join("zz-gateway.yaml"),
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: web, namespace: istio-system}\n\
         spec: {selector: {istio: ingressgateway}, servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ['*']}]}\n---\n\
         apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: web, namespace: bookinfo}\n\
         spec: {hosts: ['*'], gateways: [istio-system/web], http: [{route: [{destination: {host: productpage}}]}]}\n---\n\
         apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: cross-network, namespace: istio-system}\n\
         spec: {selector: {istio: ingressgateway}, servers: [{port: {number: 15443, name: tls, protocol: TLS}, tls: {mode: AUTO_PASSTHROUGH}, hosts: ['*.local']}]}\n---\n\
         apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: jwt, namespace: istio-system}\n\
         spec: {selector: {matchLabels: {istio: ingressgateway}}, jwtRules: [{issuer: https://issuer.example, jwksUri: 'http://ratings.bookinfo.svc.cluster.local:9080/jwks'}]}\n",
    )
    .unwrap();
    let router = || {
        use istiod_proto::prost_types::{Struct, Value, value::Kind};
        let s = |v: &str| Value { kind: Some(Kind::StringValue(v.into())) };
        let labels = Struct { fields: [("istio".to_owned(), s("ingressgateway"))].into() };
        let metadata = Struct {
            fields: [
                ("LABELS".to_owned(), Value { kind: Some(Kind::StructValue(labels)) }),
                ("NAMESPACE".to_owned(), s("istio-system")),
            ]
            .into(),
        };
        istiod_proto::envoy::config::core::v3::Node {
            id: "router~10.1.0.20~istio-ingressgateway-5d8f.istio-system~istio-system.svc.cluster.local".into(),
            metadata: Some(metadata),
            ..Default::default()
        }
    };
    let clusters = |env: &[(&str, &str)]| -> Vec<String> {
        let s = Server::start(dir.path(), &[], env, None);
        client::runtime().block_on(async {
            let mut c = client::connect(s.grpc, false).await;
            c.sotw(DiscoveryRequest { node: Some(router()), type_url: type_url::CLUSTER.into(), ..Default::default() });
            let r = c.recv().await;
            r.resources
                .iter()
                .map(|a| {
                    let cluster: istiod_proto::envoy::config::cluster::v3::Cluster =
                        istiod_proto::prost::Message::decode(a.value.as_slice()).unwrap();
                    cluster.name
                })
                .collect()
        })
    };
    let all = clusters(&[]);
    assert!(all.iter().any(|c| c.ends_with("reviews.bookinfo.svc.cluster.local")), "{all:?}");
    let some = clusters(&[("PILOT_FILTER_GATEWAY_CLUSTER_CONFIG", "true")]);
    let outbound: Vec<&String> = some.iter().filter(|c| c.starts_with("outbound|")).collect();
    assert!(
        !outbound.is_empty() && outbound.iter().all(|c| c.ends_with("|productpage.bookinfo.svc.cluster.local")),
        "{some:?}"
    );
    assert!(some.len() < all.len());
    assert!(some.iter().any(|c| c.starts_with("outbound_.9080_._.reviews.")), "SNI-DNAT clusters stay: {some:?}");
    // Envoy fetches the keys: the JWKS host's clusters are needed too.
    let env = [("PILOT_FILTER_GATEWAY_CLUSTER_CONFIG", "true"), ("PILOT_JWT_ENABLE_REMOTE_JWKS", "envoy")];
    let with_jwks = clusters(&env);
    let outbound: std::collections::BTreeSet<&str> =
        with_jwks.iter().filter_map(|c| c.strip_prefix("outbound|")).filter_map(|c| c.rsplit('|').next()).collect();
    assert_eq!(
        outbound.into_iter().collect::<Vec<_>>(),
        ["productpage.bookinfo.svc.cluster.local", "ratings.bookinfo.svc.cluster.local"],
        "{with_jwks:?}"
    );
    // A route to another host, added while the router is connected: its
    // clusters are pushed.
    let s = Server::start(dir.path(), &[], &[("PILOT_FILTER_GATEWAY_CLUSTER_CONFIG", "true")], None);
    client::runtime().block_on(async {
        let mut c = client::connect(s.grpc, false).await;
        c.sotw(DiscoveryRequest { node: Some(router()), type_url: type_url::CLUSTER.into(), ..Default::default() });
        let r = c.recv().await;
        assert!(!client::names_of(&r).iter().any(|n| n.starts_with("outbound|") && n.ends_with("|details.bookinfo.svc.cluster.local")));
        c.ack(&r, &[]);
        std::fs::write(
            dir.path().join("zz-details.yaml"),
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: details-web, namespace: bookinfo}\n\
             spec: {hosts: [details.example.com], gateways: [istio-system/web], http: [{route: [{destination: {host: details}}]}]}\n",
        )
        .unwrap();
        let r = c.recv().await;
        let names = client::names_of(&r);
        assert!(names.iter().any(|n| n.starts_with("outbound|") && n.ends_with("|details.bookinfo.svc.cluster.local")), "{names:?}");
    });
}

/// `PILOT_CERT_PROVIDER` as istiod reads it: `kubernetes` stops the start
/// with istiod's words; another provider than `istiod` (here `none`)
/// issues istiod no serving certificate, with istiod's warning, so the TLS
/// port is not served; the default serves it.
#[test]
fn the_cert_provider_decides_istiods_own_certificate() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--configDir", BOOKINFO, "--ctrlz_port", "0"])
        .env("PILOT_CERT_PROVIDER", "kubernetes")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PILOT_CERT_PROVIDER=kubernetes is no longer supported by upstream K8S"), "{err}");
    let ca = tempfile::tempdir().unwrap();
    let secure = free_port();
    let flags = ["--secureGRPCAddr", &secure.to_string()];
    let env = |provider: &'static str| {
        vec![("PILOT_CERT_PROVIDER", provider), ("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca.path().to_str().unwrap())]
    };
    let s = Server::start(std::path::Path::new(BOOKINFO), &flags, &env("none"), None);
    assert!(s.log().contains("PILOT_CERT_PROVIDER=none is not implemented"), "{}", s.log());
    assert!(TcpStream::connect(secure).is_err(), "no serving certificate: :15012 not served");
    drop(s);
    let s = Server::start(std::path::Path::new(BOOKINFO), &flags, &env("istiod"), None);
    wait_for(":15012", Duration::from_secs(10), || TcpStream::connect(secure).is_ok());
    drop(s);
}

/// `PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS` and `PILOT_SEND_UNHEALTHY_ENDPOINTS`
/// as istiod applies them (features/experimental.go, endpoint_builder.go,
/// cluster_traffic_policy.go), seen in a client's CDS and EDS: by default
/// the not-ready endpoint is sent as unhealthy and the panic threshold is
/// 0; with the default off, it is not sent and Envoy keeps its own
/// threshold; forced on, it is sent again, whatever the rule's
/// `minHealthPercent` says. A terminating endpoint is never sent.
#[test]
fn unhealthy_endpoints_follow_the_send_switches() {
    use istiod_proto::envoy::config::endpoint::v3::{ClusterLoadAssignment, lb_endpoint};
    let dir = tempfile::tempdir().unwrap();
    copy_dir(std::path::Path::new(BOOKINFO), dir.path());
    std::fs::write(
        dir.path().join("zz-unready.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: unready, namespace: bookinfo}\n\
         spec: {clusterIP: 10.96.99.1, ports: [{name: http, port: 80, targetPort: 8080}]}\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {name: unready-1, namespace: bookinfo, labels: {kubernetes.io/service-name: unready}}\n\
         addressType: IPv4\nports: [{name: http, port: 8080}]\nendpoints:\n\
         - {addresses: [10.244.9.1], conditions: {ready: true, serving: true, terminating: false}}\n\
         - {addresses: [10.244.9.2], conditions: {ready: false, serving: false, terminating: false}}\n\
         - {addresses: [10.244.9.3], conditions: {ready: false, serving: false, terminating: true}}\n",
    )
    .unwrap();
    let name = "outbound|80||unready.bookinfo.svc.cluster.local";
    // (panic threshold, [(address, health)]) as served.
    let served = |env: &[(&str, &str)]| -> (Option<f64>, Vec<(String, i32)>) {
        let s = Server::start(dir.path(), &[], env, None);
        client::runtime().block_on(async {
            let mut c = client::connect(s.grpc, false).await;
            let cluster = sotw_clusters(&mut c, productpage())
                .await
                .into_iter()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("no {name}"));
            let panic = cluster.common_lb_config.and_then(|l| l.healthy_panic_threshold).map(|p| p.value);
            c.sotw(DiscoveryRequest {
                type_url: type_url::CLUSTER_LOAD_ASSIGNMENT.into(),
                resource_names: vec![name.into()],
                ..Default::default()
            });
            let r = c.recv().await;
            assert_eq!(r.type_url, type_url::CLUSTER_LOAD_ASSIGNMENT);
            let cla: ClusterLoadAssignment =
                istiod_proto::prost::Message::decode(r.resources[0].value.as_slice()).unwrap();
            let mut eps: Vec<(String, i32)> = cla
                .endpoints
                .iter()
                .flat_map(|l| &l.lb_endpoints)
                .map(|e| {
                    let Some(lb_endpoint::HostIdentifier::Endpoint(ep)) = &e.host_identifier else { panic!() };
                    let a = format!("{:?}", ep.address);
                    (a.split("address: \"").nth(1).unwrap().split('"').next().unwrap().to_owned(), e.health_status)
                })
                .collect();
            eps.sort();
            (panic, eps)
        })
    };
    use istiod_proto::envoy::config::core::v3::HealthStatus::{Healthy, Unhealthy};
    let both = vec![("10.244.9.1".to_owned(), Healthy as i32), ("10.244.9.2".to_owned(), Unhealthy as i32)];
    assert_eq!(served(&[]), (Some(0.0), both.clone()));
    let off = [("PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS", "false")];
    assert_eq!(served(&off), (None, vec![("10.244.9.1".to_owned(), Healthy as i32)]));
    std::fs::write(
        dir.path().join("zz-unready-dr.yaml"),
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: unready, namespace: bookinfo}\n\
         spec: {host: unready, trafficPolicy: {outlierDetection: {minHealthPercent: 60, consecutive5xxErrors: 2}}}\n",
    )
    .unwrap();
    assert_eq!(served(&[]), (Some(60.0), vec![("10.244.9.1".to_owned(), Healthy as i32)]), "minHealthPercent");
    let forced = [("PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS", "false"), ("PILOT_SEND_UNHEALTHY_ENDPOINTS", "true")];
    assert_eq!(served(&forced), (Some(0.0), both));
}

/// `COMPLIANCE_POLICY` on what Envoy is sent (istiod's
/// `EnforceCompliance`): with `fips-140-2`, a client's mesh mTLS upstream
/// (to reviews) and its inbound mTLS chains are pinned to TLS
/// 1.2; without a policy the upstream carries no such parameters.
#[test]
fn the_compliance_policy_holds_for_envoys_tls_contexts() {
    use istiod_proto::envoy::config::listener::v3::Listener;
    use istiod_proto::envoy::extensions::transport_sockets::tls::v3 as tls;
    use istiod_proto::prost::Message;
    let decode_socket = |s: &istiod_proto::envoy::config::core::v3::TransportSocket| -> Option<tls::TlsParameters> {
        let Some(istiod_proto::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(any)) =
            &s.config_type
        else {
            return None;
        };
        if any.type_url.ends_with("UpstreamTlsContext") {
            tls::UpstreamTlsContext::decode(any.value.as_slice()).unwrap().common_tls_context?.tls_params
        } else {
            tls::DownstreamTlsContext::decode(any.value.as_slice()).unwrap().common_tls_context?.tls_params
        }
    };
    // (the reviews cluster's mTLS parameters, the inbound mTLS chains')
    let served = |env: &[(&str, &str)]| -> (Option<tls::TlsParameters>, Vec<Option<tls::TlsParameters>>) {
        let s = Server::start(std::path::Path::new(BOOKINFO), &[], env, None);
        client::runtime().block_on(async {
            let mut c = client::connect(s.grpc, false).await;
            let reviews = sotw_clusters(&mut c, productpage())
                .await
                .into_iter()
                .find(|c| c.name == "outbound|9080||reviews.bookinfo.svc.cluster.local")
                .unwrap();
            // Auto mTLS's match, or the rule's ISTIO_MUTUAL socket.
            let socket = reviews
                .transport_socket_matches
                .iter()
                .find(|m| m.name == "tlsMode-istio")
                .and_then(|m| m.transport_socket.as_ref())
                .or(reviews.transport_socket.as_ref())
                .unwrap_or_else(|| panic!("no TLS: {reviews:?}"));
            let upstream = decode_socket(socket);
            c.sotw(DiscoveryRequest { type_url: type_url::LISTENER.into(), ..Default::default() });
            let r = c.recv().await;
            let inbound = r
                .resources
                .iter()
                .map(|a| Listener::decode(a.value.as_slice()).unwrap())
                .find(|l| l.name == "virtualInbound")
                .unwrap();
            let downstream: Vec<_> = inbound
                .filter_chains
                .iter()
                .filter_map(|fc| fc.transport_socket.as_ref())
                .filter(|s| s.name == "envoy.transport_sockets.tls")
                .map(decode_socket)
                .collect();
            (upstream, downstream)
        })
    };
    // Without a policy: inbound mTLS as istiod's BuildInboundTLS (TLS 1.2
    // to 1.3, SupportedCiphers), the upstream none.
    let (upstream, downstream) = served(&[]);
    assert_eq!(upstream, None);
    let (v12, v13) = (tls::tls_parameters::TlsProtocol::TlSv12 as i32, tls::tls_parameters::TlsProtocol::TlSv13 as i32);
    let supported = [
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "AES256-GCM-SHA384",
        "AES128-GCM-SHA256",
    ];
    let mesh_default = |p: &Option<tls::TlsParameters>| {
        p.as_ref().is_some_and(|p| {
            (p.tls_minimum_protocol_version, p.tls_maximum_protocol_version) == (v12, v13)
                && p.cipher_suites == supported
        })
    };
    assert!(!downstream.is_empty() && downstream.iter().all(mesh_default), "{downstream:?}");
    let pinned = |p: &Option<tls::TlsParameters>| {
        p.as_ref().is_some_and(|p| p.tls_minimum_protocol_version == v12 && p.tls_maximum_protocol_version == v12)
    };
    let (upstream, downstream) = served(&[("COMPLIANCE_POLICY", "fips-140-2")]);
    assert!(pinned(&upstream), "{upstream:?}");
    assert!(!downstream.is_empty() && downstream.iter().all(pinned), "{downstream:?}");
    // fips.go keeps the FIPS suites of the list, in its order.
    let fips = &supported[..4];
    assert!(downstream.iter().all(|p| p.as_ref().is_some_and(|p| p.cipher_suites == fips)), "{downstream:?}");
}

/// `COMPLIANCE_POLICY` on the Kubernetes API client too (the process's
/// TLS provider): an API server that speaks only TLS 1.3 is asked for
/// its objects by default, and never reached under `fips-140-2` (TLS 1.2
/// only): the log says the client could not connect.
#[test]
fn the_compliance_policy_holds_for_the_api_server_client() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let requests = dir.path().join("requests.log");
    let (mut peer, port, ca_pem) = tls13_peer(dir.path(), Some(&requests));
    let kubeconfig = dir.path().join("kubeconfig");
    let ca_data = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster: {{server: \"https://127.0.0.1:{port}\", certificate-authority-data: {ca_data}}}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\nusers:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .unwrap();
    // Runs the server against it for a while: (requests the API server
    // got, the log).
    let run = |env: &[(&str, &str)]| {
        let _ = std::fs::remove_file(&requests);
        let log = dir.path().join("stderr.log");
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
            .args(["discovery", "--kubeconfig", kubeconfig.to_str().unwrap()])
            .args(["--grpcAddr", &free_port().to_string(), "--httpAddr", &free_port().to_string()])
            .args(["--monitoringAddr", &free_port().to_string(), "--secureGRPCAddr", "", "--httpsAddr", ""])
            .args(["--ctrlz_port", "0", "--log_target", "stderr"])
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let asked = std::fs::read_to_string(&requests).unwrap_or_default();
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if !asked.is_empty() || text.contains("client error (Connect)") {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        (std::fs::read_to_string(&requests).unwrap_or_default(), std::fs::read_to_string(&log).unwrap_or_default())
    };
    let (asked, log) = run(&[]);
    let (asked_fips, log_fips) = run(&[("COMPLIANCE_POLICY", "fips-140-2")]);
    let _ = peer.kill();
    let _ = peer.wait();
    assert!(asked.lines().any(|p| p.starts_with("/api")), "the API server is asked by default: {asked:?}\n{log}");
    assert!(!log.contains("client error (Connect)"), "{log}");
    assert!(asked_fips.is_empty(), "fips-140-2 reached a TLS 1.3-only API server: {asked_fips:?}");
    // (rustls refuses the server's TLS 1.3-only answer: no connection.)
    assert!(log_fips.contains("client error (Connect)"), "{log_fips}");
}

/// A TLS 1.3-only HTTPS peer (tests/py/tls_jwks_server.py) on loopback,
/// with a certificate for 127.0.0.1 from a CA of its own, the request
/// paths it gets appended to `requests` when given: the process, its
/// port, and the CA's PEM (also written to `dir`/ca.pem).
fn tls13_peer(dir: &std::path::Path, requests: Option<&std::path::Path>) -> (std::process::Child, u16, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap().signed_by(&key, &issuer).unwrap();
    let (ca_file, cert_file, key_file) = (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&ca_file, ca.pem()).unwrap();
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let mut peer = std::process::Command::new(python::python())
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/tls_jwks_server.py"))
        .args([&cert_file, &key_file])
        .args(requests)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(peer.stdout.take().unwrap()), &mut port).unwrap();
    (peer, port.trim().parse().unwrap(), ca.pem())
}

/// The clusters a SotW CDS request for `node` on `c` is answered.
async fn sotw_clusters(
    c: &mut client::AdsClient,
    node: istiod_proto::envoy::config::core::v3::Node,
) -> Vec<istiod_proto::envoy::config::cluster::v3::Cluster> {
    c.sotw(DiscoveryRequest { node: Some(node), type_url: type_url::CLUSTER.into(), ..Default::default() });
    let r = c.recv().await;
    r.resources.iter().map(|a| istiod_proto::prost::Message::decode(a.value.as_slice()).unwrap()).collect()
}

/// A self-signed CA certificate (PEM) named `cn`, or a leaf when not `ca`.
fn root_pem(cn: &str, ca: bool) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(vec![]).unwrap();
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    if ca {
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    }
    p.self_signed(&key).unwrap().pem()
}

/// `ISTIO_MULTIROOT_MESH` (istiod's `PcdsGenerator` and `trustbundle`):
/// a proxy asking for PCDS gets a ProxyConfig holding the trust bundle, the
/// CA's root and the mesh configuration's `caCertificates` PEMs, sorted; a
/// new root in the mesh configuration is pushed to it. A set with a leaf
/// among them is refused whole (`verifyTrustAnchor`): the last good set
/// stays, and at start the server stops. Without the switch there is none.
#[test]
fn pcds_sends_the_trust_bundle_under_multiroot_mesh() {
    use istiod_proto::istio::mesh::v1alpha1::ProxyConfig;
    let dir = tempfile::tempdir().unwrap();
    copy_dir(std::path::Path::new(BOOKINFO), dir.path());
    let (a, b, leaf) = (root_pem("extra-a", true), root_pem("extra-b", true), root_pem("a-leaf", false));
    let outside = tempfile::tempdir().unwrap();
    let mesh = outside.path().join("mesh.yaml");
    let certs = |pems: &[&str]| {
        let items: Vec<String> = pems.iter().map(|p| format!("- pem: {}\n", serde_json::json!(p))).collect();
        format!("caCertificates:\n{}", items.concat())
    };
    std::fs::write(&mesh, certs(&[&a])).unwrap();
    let ca_dir = outside.path().join("ca");
    let env = [("ISTIO_MULTIROOT_MESH", "true"), ("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca_dir.to_str().unwrap())];
    let s = Server::start(dir.path(), &["--meshConfig", mesh.to_str().unwrap()], &env, None);
    let ca_root = std::fs::read_to_string(ca_dir.join("ca-cert.pem")).unwrap();
    let rt = client::runtime();
    let pcds = DiscoveryRequest {
        node: Some(client::sidecar(1)),
        type_url: type_url::PROXY_CONFIG.into(),
        ..Default::default()
    };
    let decode = |r: &istiod_proto::envoy::service::discovery::v3::DiscoveryResponse| -> Vec<String> {
        assert_eq!(r.resources.len(), 1, "{r:?}");
        assert_eq!(r.resources[0].type_url, type_url::PROXY_CONFIG);
        let pc: ProxyConfig = istiod_proto::prost::Message::decode(r.resources[0].value.as_slice()).unwrap();
        pc.ca_certificates_pem
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    rt.block_on(async {
        let mut c = client::connect(s.grpc, false).await;
        c.sotw(pcds.clone());
        let r = c.recv().await;
        assert_eq!(decode(&r), sorted(vec![ca_root.clone(), a.clone()]), "the CA's root and the extra one");
        c.ack(&r, &[]);
        // Another root in the mesh configuration: pushed.
        std::fs::write(&mesh, certs(&[&a, &b])).unwrap();
        let r = c.recv().await;
        assert_eq!(decode(&r), sorted(vec![ca_root.clone(), a.clone(), b.clone()]));
        c.ack(&r, &[]);
        // A leaf among them: the whole set is refused, the last good stays.
        std::fs::write(&mesh, certs(&[&a, &leaf])).unwrap();
        wait_for("the refusal", Duration::from_secs(10), || s.log().contains("certificate is not a CA certificate"));
        c.expect_silence(Duration::from_millis(500)).await;
    });
    drop(s);
    // At start, the server stops with the reason.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--configDir", dir.path().to_str().unwrap(), "--meshConfig", mesh.to_str().unwrap()])
        .args(["--grpcAddr", &free_port().to_string(), "--httpAddr", "", "--monitoringAddr", ""])
        .args(["--secureGRPCAddr", "", "--httpsAddr", ""])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("failed to update meshConfig PEM trustAnchors"), "{err}");
    std::fs::write(&mesh, certs(&[&a, &b])).unwrap();
    // Off: nothing to send.
    let s = Server::start(dir.path(), &["--meshConfig", mesh.to_str().unwrap()], &env[1..], None);
    rt.block_on(async {
        let mut c = client::connect(s.grpc, false).await;
        c.sotw(pcds);
        let r = c.recv().await;
        assert!(r.resources.is_empty(), "{r:?}");
    });
}

/// `METRICS_LOCALHOST_ACCESS_ONLY` (istiod's `metricsMiddleware`):
/// `/metrics` answers a loopback caller and refuses another with 403 and
/// istiod's words (the other caller is this machine at its own
/// non-loopback address, where it has one).
#[test]
fn metrics_can_be_kept_to_localhost() {
    let port = free_port();
    let addr = format!("0.0.0.0:{}", port.port());
    let s = Server::start(
        std::path::Path::new(BOOKINFO),
        &["--httpAddr", &addr, "--monitoringAddr", ""],
        &[("METRICS_LOCALHOST_ACCESS_ONLY", "true")],
        None,
    );
    assert_eq!(server::get(s.http, "/metrics").unwrap().0, 200, "loopback");
    // This machine's address towards the outside (no packet is sent).
    let own = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|u| u.connect("192.0.2.1:9").map(|()| u))
        .and_then(|u| u.local_addr())
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified());
    if let Some(ip) = own {
        let (status, body) = request(SocketAddr::new(ip, port.port()), "GET", "/metrics", "", Duration::from_secs(5));
        assert_eq!(
            (status, String::from_utf8_lossy(&body).as_ref()),
            (403, "Only requests from localhost are allowed\n")
        );
    }
    drop(s);
    let s = Server::start(std::path::Path::new(BOOKINFO), &["--httpAddr", &addr, "--monitoringAddr", ""], &[], None);
    if let Some(ip) = own {
        assert_eq!(
            request(SocketAddr::new(ip, port.port()), "GET", "/metrics", "", Duration::from_secs(5)).0,
            200,
            "off by default"
        );
    }
    drop(s);
}
