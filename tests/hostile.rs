//! Hostile and careless inputs against the `pilot-discovery` binary
//! (issue #19), loopback only: special files, link loops and oversized
//! files in `--configDir`; ADS clients with unique labels, huge node ids,
//! oversized responses and rapid cancels; file-descriptor exhaustion
//! through the debug port; and `--shutdownDuration`. Each case failed
//! before its fix (hung, spun, grew without bound or lost the status); the
//! server must keep serving everyone else, and say why in its log.

use crate::ads_client as client;
use crate::server;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use client::{connect, names_of, runtime};
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::envoy::service::discovery::v3::DiscoveryRequest;
use istiod_proto::prost_types::{Struct, Value, value::Kind as ValueKind};
use istiod_proto::type_url;
use server::{BOOKINFO, Server, copy_dir, get, wait_for};

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

fn service(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec: {{ports: [{{port: 80, name: http}}], clusterIP: 10.96.99.1}}\n"
    )
}

#[test]
fn config_dir_special_files_loops_and_oversized_files() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(Path::new(BOOKINFO), dir.path());
    let d = dir.path();
    mkfifo(&d.join("pipe.yaml")); // (3) blocked open() at start
    std::os::unix::fs::symlink("/dev/zero", d.join("zero.yaml")).unwrap(); // (3) > 3 GiB in 2 s
    std::os::unix::fs::symlink(".", d.join("a")).unwrap(); // (4) a/b/a/b/...
    std::os::unix::fs::symlink(".", d.join("b")).unwrap();
    std::fs::write(d.join("big.yaml"), "# padding\n".repeat(40_000)).unwrap(); // (5) 400 KB
    let many: String =
        (0..5_000).map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\n---\n")).collect();
    std::fs::write(d.join("many.yaml"), many).unwrap(); // (5) documents
    let started = Instant::now();
    let mut s = Server::start(
        d,
        &[],
        &[("ISTIOD_RS_CONFIG_MAX_FILE_BYTES", "300000"), ("ISTIOD_RS_CONFIG_MAX_DOCUMENTS", "1000")],
        None,
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    let log = s.log();
    for want in [
        "pipe.yaml",
        "zero.yaml",
        "not a regular file",
        "big.yaml",
        "over the limit of 300000 (ISTIOD_RS_CONFIG_MAX_FILE_BYTES)",
        "more than 1000 documents (ISTIOD_RS_CONFIG_MAX_DOCUMENTS)",
    ] {
        assert!(log.contains(want), "log lacks {want:?}: {log}");
    }
    // Read once despite the loops: through a/ and b/ every file would be
    // found again (under another path) and every object counted twice.
    let (_, configz) = get(s.http, "/debug/config_report").unwrap();
    let configz: serde_json::Value = serde_json::from_str(&configz).unwrap();
    let bookinfo: serde_json::Value = {
        let l = istiod_kubewatch::config_dir::load(Path::new(BOOKINFO)).unwrap();
        serde_json::json!({"services": l.objects.services.len(), "endpointSlices": l.objects.endpoint_slices.len()})
    };
    assert_eq!(configz["services"], bookinfo["services"], "{configz}");
    assert_eq!(configz["endpointSlices"], bookinfo["endpointSlices"], "{configz}");
    let (_, registry) = get(s.http, "/debug/registryz").unwrap();
    assert!(registry.contains("productpage.bookinfo.svc.cluster.local"), "the mesh loaded");

    // At run time: a FIFO appears, then a real change. The control thread
    // neither blocks nor misses the change; /ready and /metrics answer.
    mkfifo(&d.join("late.yaml"));
    std::fs::write(d.join("added.yaml"), service("added")).unwrap();
    wait_for("the added Service", Duration::from_secs(10), || {
        get(s.http, "/debug/registryz").is_some_and(|(_, b)| b.contains("added.default.svc.cluster.local"))
    });
    assert_eq!(get(s.http, "/ready").map(|r| r.0), Some(200));
    // Removing the loops changes nothing that was read.
    std::fs::remove_file(d.join("a")).unwrap();
    std::fs::remove_file(d.join("b")).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let rss = s.rss_kib();
    assert!(rss < 256 * 1024, "RSS {rss} KiB");
    let t = s.sigterm();
    s.wait_exit(Duration::from_secs(15));
    assert!(t.elapsed() < Duration::from_secs(15));
}

fn labelled_node(id: &str, label_bytes: usize, unique: u32) -> Node {
    let labels = Struct {
        fields: BTreeMap::from([
            ("app".to_owned(), Value { kind: Some(ValueKind::StringValue(format!("x{unique}"))) }),
            ("pad".to_owned(), Value { kind: Some(ValueKind::StringValue("p".repeat(label_bytes))) }),
        ]),
    };
    Node {
        id: id.into(),
        metadata: Some(Struct {
            fields: BTreeMap::from([("LABELS".to_owned(), Value { kind: Some(ValueKind::StructValue(labels)) })]),
        }),
        ..Default::default()
    }
}

/// The status a stream ends with; a stream that does not end fails the
/// test instead of hanging it.
async fn status(c: &mut client::AdsClient) -> (String, String) {
    tokio::time::timeout(Duration::from_secs(15), c.status()).await.expect("the stream ends with a status")
}

fn cds(node: Node) -> DiscoveryRequest {
    DiscoveryRequest { node: Some(node), type_url: type_url::CLUSTER.into(), ..Default::default() }
}

const SIDECAR: &str = "sidecar~10.244.0.9~x.bookinfo~bookinfo.svc.cluster.local";

#[test]
fn unique_labels_leave_nothing_behind() {
    let s = Server::start(Path::new(BOOKINFO), &[], &[], None);
    let rt = runtime();
    rt.block_on(async {
        // Warm up, so the baseline includes the cores' caches.
        let mut c = connect(s.grpc, false).await;
        c.sotw(cds(labelled_node(SIDECAR, 10, 0)));
        assert!(!names_of(&c.recv().await).is_empty());
    });
    let before = s.rss_kib();
    // (1) 300 streams, each with labels no other had (32 KiB), each closed
    // after its CDS. Every class left behind before: RSS grew per stream.
    rt.block_on(async {
        for i in 1..=300 {
            let mut c = connect(s.grpc, i % 2 == 0).await;
            if c.delta {
                c.delta_req(istiod_proto::envoy::service::discovery::v3::DeltaDiscoveryRequest {
                    node: Some(labelled_node(SIDECAR, 32 * 1024, i)),
                    type_url: type_url::CLUSTER.into(),
                    ..Default::default()
                });
                assert!(!c.recv_delta().await.resources.is_empty());
            } else {
                c.sotw(cds(labelled_node(SIDECAR, 32 * 1024, i)));
                assert!(!names_of(&c.recv().await).is_empty());
            }
        }
        // Let the clients' connection tasks send their resets and close.
        tokio::time::sleep(Duration::from_millis(500)).await;
    });
    wait_for("every class released", Duration::from_secs(10), || s.stat("classes") == 0);
    let grown = s.rss_kib().saturating_sub(before);
    assert!(grown < 48 * 1024, "RSS grew {grown} KiB over 300 closed streams");
}

#[test]
fn oversized_nodes_and_ids_get_a_short_invalid_argument() {
    let s = Server::start(Path::new(BOOKINFO), &[], &[], None);
    let rt = runtime();
    rt.block_on(async {
        // A node over the cap: INVALID_ARGUMENT naming the limit.
        let mut c = connect(s.grpc, false).await;
        c.sotw(cds(labelled_node(SIDECAR, 1 << 20, 9999)));
        let (code, msg) = status(&mut c).await;
        assert_eq!(code, "3", "{msg}");
        assert!(msg.contains("ISTIOD_RS_MAX_NODE_BYTES"), "{msg}");
        // (9) A malformed id is not echoed whole: the status survives.
        for id in ["x".repeat(3 << 20), format!("{}~1", "y".repeat(60_000))] {
            let mut c = connect(s.grpc, false).await;
            c.sotw(cds(Node { id, ..Default::default() }));
            let (code, msg) = status(&mut c).await;
            assert_eq!(code, "3", "{msg}");
            assert!(msg.len() < 1024, "grpc-message of {} bytes", msg.len());
        }
    });
}

#[test]
fn cancelling_answered_streams_is_not_a_rapid_reset() {
    let s = Server::start(Path::new(BOOKINFO), &[], &[], None);
    let rt = runtime();
    // (10) A client cancelling hundreds of answered streams on one
    // connection is not a rapid-reset attack: its connection goes on.
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(s.grpc).await.unwrap();
        let (send, conn) = h2::client::handshake(tcp).await.unwrap();
        let driver = tokio::spawn(conn);
        let mut send = send.ready().await.unwrap();
        for i in 0..400u32 {
            let req = http::Request::builder()
                .method("POST")
                .uri("http://istiod/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources")
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .unwrap();
            let (resp, mut body_tx) = send.send_request(req, false).unwrap();
            let msg = istiod_proto::prost::Message::encode_to_vec(&cds(labelled_node(SIDECAR, 10, 0)));
            let mut frame = vec![0u8];
            frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
            frame.extend_from_slice(&msg);
            body_tx.send_data(frame.into(), false).unwrap();
            let resp = resp.await.unwrap_or_else(|e| panic!("stream {i}: {e}"));
            let mut body = resp.into_body();
            assert!(body.data().await.is_some(), "stream {i} answered");
            drop(body); // cancel: RST_STREAM(CANCEL) of an answered stream
            drop(body_tx);
            send = send.ready().await.unwrap_or_else(|e| panic!("connection closed after {i} cancels: {e}"));
        }
        assert!(!driver.is_finished(), "the connection is still up");
    });
}

#[test]
fn a_response_over_the_send_limit_ends_that_stream_only() {
    // (2) A real limit is an error the proxy sees and the log names.
    let s = Server::start(Path::new(BOOKINFO), &[], &[("ISTIOD_RS_MAX_RESPONSE_BYTES", "4096")], None);
    runtime().block_on(async {
        let mut big = connect(s.grpc, false).await;
        big.sotw(cds(labelled_node(SIDECAR, 10, 1)));
        let (code, msg) = status(&mut big).await;
        assert_eq!(code, "8", "RESOURCE_EXHAUSTED: {msg}");
        assert!(msg.contains("CDS response of") && msg.contains("over the server's limit of 4096 bytes"), "{msg}");
        // Another proxy's small EDS request is answered.
        let mut small = connect(s.grpc, false).await;
        small.sotw(DiscoveryRequest {
            node: Some(labelled_node(SIDECAR, 10, 2)),
            type_url: type_url::CLUSTER_LOAD_ASSIGNMENT.into(),
            resource_names: vec!["outbound|9080||ratings.bookinfo.svc.cluster.local".into()],
            ..Default::default()
        });
        assert_eq!(small.recv().await.resources.len(), 1);
        assert_eq!(s.stat("streams"), 1, "the ended stream is forgotten, the other kept");
    });
    assert!(s.log().contains("ISTIOD_RS_MAX_RESPONSE_BYTES"), "{}", s.log());
}

#[test]
fn debug_port_survives_descriptor_exhaustion() {
    // (7) With nofile reached, the accept loop spun at 100% CPU and /ready
    // timed out.
    let s = Server::start(Path::new(BOOKINFO), &[], &[], Some(128));
    let mut held = Vec::new();
    for _ in 0..300 {
        match TcpStream::connect_timeout(&s.http, Duration::from_millis(500)) {
            Ok(c) => held.push(c),
            Err(_) => break,
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let ticks = s.cpu_ticks();
    std::thread::sleep(Duration::from_secs(2));
    let used = s.cpu_ticks() - ticks;
    assert!(used < 50, "{used} ticks of CPU in 2 s with descriptors exhausted");
    drop(held);
    wait_for("/ready after the clients left", Duration::from_secs(15), || {
        get(s.http, "/ready").map(|r| r.0) == Some(200)
    });
    assert!(s.log().contains("accept failed"), "the exhaustion is logged: {}", s.log());
}

#[test]
fn shutdown_duration_is_honoured_and_departures_spread() {
    // (8) Exit was always at ~10 s and every stream cut at the same instant.
    let mut s = Server::start(Path::new(BOOKINFO), &["--shutdownDuration", "3s"], &[], None);
    let rt = runtime();
    let ends = rt.block_on(async {
        let mut clients = Vec::new();
        for i in 0..20 {
            let mut c = connect(s.grpc, false).await;
            c.sotw(cds(labelled_node(SIDECAR, 10, i)));
            assert!(!names_of(&c.recv().await).is_empty());
            clients.push(c);
        }
        let t = s.sigterm();
        // The debug port answers while the connections drain: not ready.
        wait_for("/ready 503 while draining", Duration::from_secs(2), || {
            get(s.http, "/ready").is_some_and(|(code, body)| code == 503 && body.contains("shutting down"))
        });
        let waits = clients.into_iter().map(|mut c| async move {
            assert!(c.ended_within(Duration::from_secs(8)).await, "stream never ended");
            t.elapsed()
        });
        futures_join(waits.collect()).await
    });
    let exit = s.wait_exit(Duration::from_secs(10));
    let (first, last) = (ends.iter().min().unwrap(), ends.iter().max().unwrap());
    assert!(*last >= Duration::from_millis(2000) && *last < Duration::from_millis(4500), "last departure {last:?}");
    assert!(*first < Duration::from_millis(1800), "first departure {first:?}: spread over the period");
    assert!(exit < Duration::from_secs(6), "exit {exit:?} after the streams ended");
}

/// Awaits every future (no `futures` dependency in the root crate's tests).
async fn futures_join<F: std::future::Future<Output = Duration> + 'static>(fs: Vec<F>) -> Vec<Duration> {
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let handles: Vec<_> = fs.into_iter().map(tokio::task::spawn_local).collect();
            let mut out = Vec::new();
            for h in handles {
                out.push(h.await.unwrap());
            }
            out
        })
        .await
}

#[test]
fn zero_settings_do_not_break_connections() {
    // (6) Zero keepalive / age / stream settings: PING storms, every
    // connection killed, or no stream at all.
    let s = Server::start(
        Path::new(BOOKINFO),
        &["--keepaliveInterval", "0s", "--keepaliveTimeout", "0s", "--keepaliveMaxServerConnectionAge", "0s"],
        &[("ISTIO_GPRC_MAXSTREAMS", "0")],
        None,
    );
    runtime().block_on(async {
        let mut c = connect(s.grpc, false).await;
        c.sotw(cds(labelled_node(SIDECAR, 10, 1)));
        assert!(!names_of(&c.recv().await).is_empty());
        let ticks = s.cpu_ticks();
        // Still connected and quiet two seconds later.
        assert!(!c.ended_within(Duration::from_secs(2)).await, "the connection was cut");
        assert!(s.cpu_ticks() - ticks < 50, "a PING storm burns CPU");
    });
}
