//! The ADS engine end to end over loopback: both protocols, istiod's
//! ACK/NACK/nonce rules, pushes driven by published snapshots.

#[path = "support/ads_client.rs"]
mod client;

use std::collections::BTreeMap;
use std::time::Duration;

use client::{TestServer, cla, cluster, connect, names_of, runtime, sidecar};
use istiod_proto::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use istiod_proto::google::rpc::Status as RpcStatus;
use istiod_proto::type_url;
use istiod_xds::ads::{DebugQuery, Kind};
use istiod_xds::h2::Limits;

const QUIET: Duration = Duration::from_millis(200);

fn mesh(s: &mut TestServer) {
    s.apply_sync(vec![
        (Kind::Cluster, "a", Some(cluster("a", 1))),
        (Kind::Cluster, "b", Some(cluster("b", 1))),
        (
            Kind::Endpoint,
            "outbound|9080||a.default.svc.cluster.local",
            Some(cla("outbound|9080||a.default.svc.cluster.local", 1)),
        ),
        (
            Kind::Endpoint,
            "outbound|9080||b.default.svc.cluster.local",
            Some(cla("outbound|9080||b.default.svc.cluster.local", 1)),
        ),
    ]);
}

const A: &str = "outbound|9080||a.default.svc.cluster.local";
const B: &str = "outbound|9080||b.default.svc.cluster.local";

fn cds(node: bool, n: u32) -> DiscoveryRequest {
    DiscoveryRequest { node: node.then(|| sidecar(n)), type_url: type_url::CLUSTER.into(), ..Default::default() }
}

fn eds(names: &[&str]) -> DiscoveryRequest {
    DiscoveryRequest {
        type_url: type_url::CLUSTER_LOAD_ASSIGNMENT.into(),
        resource_names: names.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

#[test]
fn first_request_must_carry_a_node() {
    let s = TestServer::start(1, Limits::default());
    runtime().block_on(async {
        let mut c = connect(s.addr, false).await;
        c.sotw(cds(false, 0));
        let (code, msg) = c.status().await;
        assert_eq!(code, "3", "INVALID_ARGUMENT");
        assert!(msg.contains("missing node"), "{msg}");
        let mut c = connect(s.addr, true).await;
        c.delta_req(DeltaDiscoveryRequest { type_url: type_url::CLUSTER.into(), ..Default::default() });
        assert_eq!(c.status().await.0, "3");
        // What a node id means is the generator's business (istiod's rules
        // are tested in the istiod crate, src/node.rs); the engine bounds
        // the node's size for every generator.
        let mut c = connect(s.addr, false).await;
        let mut node = client::node("sidecar~1.2.3.4~a.b~c");
        node.user_agent_name = "x".repeat(istiod_xds::ads::node::DEFAULT_MAX_NODE_BYTES);
        c.sotw(DiscoveryRequest { node: Some(node), ..cds(false, 0) });
        let (code, msg) = c.status().await;
        assert_eq!(code, "3");
        assert!(msg.contains("over the limit of 65536 (ISTIOD_RS_MAX_NODE_BYTES)"), "{msg}");
    });
}

#[test]
fn requests_before_the_first_snapshot_wait_for_it() {
    // A proxy that connects while the server is still reading its sources
    // must not be told that the mesh is empty.
    let mut s = TestServer::start(1, Limits::default());
    let rt = runtime();
    let (mut sotw, mut delta) = rt.block_on(async {
        let mut sotw = connect(s.addr, false).await;
        sotw.sotw(cds(true, 1));
        let mut delta = connect(s.addr, true).await;
        delta.delta_req(DeltaDiscoveryRequest {
            node: Some(sidecar(2)),
            type_url: type_url::CLUSTER.into(),
            ..Default::default()
        });
        sotw.expect_silence(QUIET).await;
        delta.expect_silence(QUIET).await;
        (sotw, delta)
    });
    mesh(&mut s);
    rt.block_on(async {
        let r = sotw.recv().await;
        assert_eq!((r.version_info.as_str(), names_of(&r)), ("1", vec!["a".to_owned(), "b".to_owned()]));
        let d = delta.recv_delta().await;
        let mut names: Vec<&str> = d.resources.iter().map(|r| r.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, vec!["a", "b"]);
    });
}

#[test]
fn sotw_wildcard_cds_named_eds_ack_nack_stale() {
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    let rt = runtime();
    rt.block_on(async {
        let mut c = connect(s.addr, false).await;
        c.sotw(cds(true, 1));
        let r = c.recv().await;
        assert_eq!(r.type_url, type_url::CLUSTER);
        assert_eq!(r.version_info, "1");
        assert_eq!(names_of(&r), vec!["a", "b"]);
        assert!(!r.nonce.is_empty());
        c.ack(&r, &[]);
        c.sotw(eds(&[A]));
        let e = c.recv().await;
        assert_eq!(names_of(&e), vec![A]);
        assert_ne!(e.nonce, r.nonce, "nonces are unique");
        c.ack(&e, &[A]);
        c.expect_silence(QUIET).await; // an ACK with the same names gets nothing

        // A stale nonce is ignored, even with new names.
        c.sotw(DiscoveryRequest { response_nonce: "not-a-nonce".into(), ..eds(&[A, B]) });
        c.expect_silence(QUIET).await;

        // NACK: recorded, never answered.
        c.nack(&e, &[A]);
        c.expect_silence(QUIET).await;
        // syncz as istiod's SyncStatus (pilot/pkg/xds/debug.go): a NACK
        // leaves the ACKed nonce as it was (pkg/xds/server.go
        // `ShouldRespond` records only the error); CDS is ACKed; LDS was
        // never sent (omitempty).
        let syncz = s.publisher.query(DebugQuery::Syncz).await;
        let row = &syncz[0][0]["status"];
        assert_eq!(row["endpoint_sent"], e.nonce.as_str(), "{syncz:?}");
        assert!(row["resources"][type_url::CLUSTER_LOAD_ASSIGNMENT]["lastError"].is_string(), "{syncz:?}");
        assert_eq!(row["cluster_sent"], row["cluster_acked"], "{syncz:?}");
        assert!(row.get("listener_sent").is_none(), "{syncz:?}");

        // Changing the names is answered with the new ones.
        c.ack(&e, &[A, B]);
        let e2 = c.recv().await;
        assert_eq!(names_of(&e2), vec![B], "incremental: only the newly watched cluster");
    });
}

#[test]
fn endpoint_change_is_an_eds_push_of_that_cluster_alone() {
    let mut s = TestServer::start(2, Limits::default());
    mesh(&mut s);
    let rt = runtime();
    rt.block_on(async {
        let mut c = connect(s.addr, false).await;
        c.sotw(cds(true, 2));
        let r = c.recv().await;
        c.ack(&r, &[]);
        c.sotw(eds(&[A, B]));
        let e = c.recv().await;
        c.ack(&e, &[A, B]);
        c.expect_silence(QUIET).await;
        let v = s.apply(vec![(Kind::Endpoint, B, Some(cla(B, 7)))]);
        let push = c.recv().await;
        assert_eq!(push.type_url, type_url::CLUSTER_LOAD_ASSIGNMENT, "no CDS push for an endpoint change");
        assert_eq!(names_of(&push), vec![B]);
        assert_eq!(push.version_info, v.to_string());
        c.ack(&push, &[A, B]);
        c.expect_silence(QUIET).await;
        // A change to something else entirely touches nobody.
        s.apply(vec![(Kind::Endpoint, "outbound|1||unwatched", Some(cla("x", 1)))]);
        c.expect_silence(QUIET).await;
    });
}

#[test]
fn eds_is_answered_again_after_a_cds_push() {
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut c = connect(s.addr, false).await;
        c.sotw(cds(true, 3));
        let r = c.recv().await;
        c.ack(&r, &[]);
        c.sotw(eds(&[A]));
        let e = c.recv().await;
        c.ack(&e, &[A]);
        // A cluster changes: CDS is pushed; Envoy then re-requests EDS with
        // unchanged names (an ACK of the old EDS nonce), which must be
        // answered for the cluster to warm.
        s.apply(vec![(Kind::Cluster, "a", Some(cluster("a", 2)))]);
        let r2 = c.recv().await;
        assert_eq!(r2.type_url, type_url::CLUSTER);
        assert_eq!(names_of(&r2), vec!["a", "b"], "CDS carries the whole set");
        c.ack(&r2, &[]);
        c.ack(&e, &[A]);
        let e2 = c.recv().await;
        assert_eq!(e2.type_url, type_url::CLUSTER_LOAD_ASSIGNMENT);
        assert_eq!(names_of(&e2), vec![A]);
    });
}

#[test]
fn empty_names_unsubscribe_a_named_type() {
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut c = connect(s.addr, false).await;
        c.sotw(cds(true, 4));
        let r = c.recv().await;
        c.ack(&r, &[]);
        c.sotw(eds(&[A]));
        let e = c.recv().await;
        c.ack(&e, &[]);
        c.expect_silence(QUIET).await; // (the unsubscribe has landed)
        s.apply(vec![(Kind::Endpoint, A, Some(cla(A, 9)))]);
        c.expect_silence(QUIET).await;
    });
}

#[test]
fn removed_cluster_leaves_the_cds_set() {
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut c = connect(s.addr, false).await;
        c.sotw(cds(true, 5));
        let r = c.recv().await;
        c.ack(&r, &[]);
        s.apply(vec![(Kind::Cluster, "b", None)]);
        let r2 = c.recv().await;
        assert_eq!(names_of(&r2), vec!["a"]);
    });
}

#[test]
fn a_burst_of_changes_is_coalesced_and_ends_at_the_newest() {
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut c = connect(s.addr, false).await;
        c.sotw(cds(true, 6));
        let r = c.recv().await;
        c.ack(&r, &[]);
        c.sotw(eds(&[A]));
        let e = c.recv().await;
        c.ack(&e, &[A]);
        let mut last = 0;
        for i in 0..1000u32 {
            last = s.apply(vec![(Kind::Endpoint, A, Some(cla(A, i + 10)))]);
        }
        let mut pushes = 0;
        loop {
            let p = c.recv().await;
            pushes += 1;
            c.ack(&p, &[A]);
            if p.version_info == last.to_string() {
                break;
            }
        }
        assert!(pushes < 1000, "1000 changes, {pushes} pushes");
        c.expect_silence(QUIET).await; // nothing after the newest
    });
}

#[test]
fn delta_protocol_rules() {
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut c = connect(s.addr, true).await;
        c.delta_req(DeltaDiscoveryRequest {
            node: Some(sidecar(7)),
            type_url: type_url::CLUSTER.into(),
            ..Default::default()
        });
        let r = c.recv_delta().await;
        let mut names: Vec<_> = r.resources.iter().map(|r| r.name.clone()).collect();
        names.sort();
        assert_eq!(names, vec!["a", "b"], "wildcard by default");
        // Versions are hashes of the resource's bytes: different clusters,
        // different versions.
        assert!(r.resources.iter().all(|x| x.version.len() == 16), "{:?}", r.resources);
        assert_ne!(r.resources[0].version, r.resources[1].version);
        c.delta_req(DeltaDiscoveryRequest {
            type_url: type_url::CLUSTER.into(),
            response_nonce: r.nonce.clone(),
            ..Default::default()
        });
        // Subscribe EDS by name.
        c.delta_req(DeltaDiscoveryRequest {
            type_url: type_url::CLUSTER_LOAD_ASSIGNMENT.into(),
            resource_names_subscribe: vec![A.into()],
            ..Default::default()
        });
        let e = c.recv_delta().await;
        assert_eq!(e.resources.len(), 1);
        assert_eq!(e.resources[0].name, A);
        let ack = |nonce: &str| DeltaDiscoveryRequest {
            type_url: type_url::CLUSTER_LOAD_ASSIGNMENT.into(),
            response_nonce: nonce.into(),
            ..Default::default()
        };
        c.delta_req(ack(&e.nonce));
        c.expect_silence(QUIET).await;
        // A change: only that resource, with its new version.
        s.apply(vec![(Kind::Endpoint, A, Some(cla(A, 5))), (Kind::Endpoint, B, Some(cla(B, 5)))]);
        let p = c.recv_delta().await;
        assert_eq!(p.resources.len(), 1, "B is not subscribed");
        assert_ne!(p.resources[0].version, e.resources[0].version);
        // NACK recorded, not answered; stale nonce ignored.
        c.delta_req(DeltaDiscoveryRequest {
            error_detail: Some(RpcStatus { code: 3, message: "bad".into(), details: vec![] }),
            ..ack(&p.nonce)
        });
        c.delta_req(ack("stale"));
        c.expect_silence(QUIET).await;
        // Cluster removal shows up in removed_resources.
        s.apply(vec![(Kind::Cluster, "b", None)]);
        let rm = c.recv_delta().await;
        assert_eq!(rm.type_url, type_url::CLUSTER);
        assert_eq!(rm.removed_resources, vec!["b"]);
        assert!(rm.resources.is_empty());
        // Unsubscribe: later changes are not sent.
        c.delta_req(DeltaDiscoveryRequest {
            type_url: type_url::CLUSTER_LOAD_ASSIGNMENT.into(),
            resource_names_unsubscribe: vec![A.into()],
            ..Default::default()
        });
        tokio::time::sleep(QUIET).await; // let the request land before the change
        s.apply(vec![(Kind::Endpoint, A, Some(cla(A, 6)))]);
        c.expect_silence(QUIET).await;
    });
}

#[test]
fn delta_reconnect_sends_only_what_differs() {
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    s.apply_sync(vec![(Kind::Cluster, "c", Some(cluster("c", 1)))]); // version 2
    runtime().block_on(async {
        // The version `a` has now, as a first connection learns it.
        let mut first = connect(s.addr, true).await;
        first.delta_req(DeltaDiscoveryRequest {
            node: Some(sidecar(9)),
            type_url: type_url::CLUSTER.into(),
            ..Default::default()
        });
        let all = first.recv_delta().await;
        let a_version = all.resources.iter().find(|r| r.name == "a").unwrap().version.clone();
        let mut c = connect(s.addr, true).await;
        // The proxy had a@1 (current), b@0 (stale) and gone@1 (deleted).
        c.delta_req(DeltaDiscoveryRequest {
            node: Some(sidecar(8)),
            type_url: type_url::CLUSTER.into(),
            initial_resource_versions: BTreeMap::from([
                ("a".into(), a_version),
                ("b".into(), "0".into()),
                ("gone".into(), "1".into()),
            ]),
            ..Default::default()
        });
        let r = c.recv_delta().await;
        let mut names: Vec<_> = r.resources.iter().map(|r| r.name.clone()).collect();
        names.sort();
        assert_eq!(names, vec!["b", "c"]);
        assert_eq!(r.removed_resources, vec!["gone"]);
    });
}

#[test]
fn full_push_reaches_every_watcher_across_cores() {
    let mut s = TestServer::start(2, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut clients = Vec::new();
        for n in 0..20 {
            let mut c = connect(s.addr, n % 2 == 0).await;
            if c.delta {
                c.delta_req(DeltaDiscoveryRequest {
                    node: Some(sidecar(100 + n)),
                    type_url: type_url::CLUSTER.into(),
                    ..Default::default()
                });
                let r = c.recv_delta().await;
                c.delta_req(DeltaDiscoveryRequest {
                    type_url: type_url::CLUSTER.into(),
                    response_nonce: r.nonce,
                    ..Default::default()
                });
            } else {
                c.sotw(cds(true, 100 + n));
                let r = c.recv().await;
                c.ack(&r, &[]);
            }
            clients.push(c);
        }
        s.model.resources[Kind::Cluster as usize].get_mut("a").unwrap().generation = 99;
        s.model.resources[Kind::Cluster as usize].get_mut("a").unwrap().body = cluster("a", 3);
        s.publish_full();
        for c in &mut clients {
            if c.delta {
                let r = c.recv_delta().await;
                assert_eq!(r.resources.len(), 1, "only a changed version");
                assert_eq!(r.resources[0].name, "a");
            } else {
                let r = c.recv().await;
                assert_eq!(names_of(&r), vec!["a", "b"]);
            }
        }
        let stats = s.publisher.query(DebugQuery::Stats).await;
        let streams: u64 = stats.iter().map(|v| v["streams"].as_u64().unwrap()).sum();
        assert_eq!(streams, 20);
        let adsz = s.publisher.query(DebugQuery::Adsz).await;
        let clients_seen: usize = adsz.iter().map(|v| v["clients"].as_array().unwrap().len()).sum();
        assert_eq!(clients_seen, 20);
    });
}

/// A stream the client half-closes is finished by the server and leaves
/// nothing in the core's tables (finishing a call does not call `closed`;
/// the streams used to stay, with their classes, until the process ended).
#[test]
fn half_closed_streams_leave_nothing_behind() {
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut clients = Vec::new();
        for n in 0..10 {
            let mut c = connect(s.addr, false).await;
            c.sotw(cds(true, 200 + n));
            let _ = c.recv().await;
            c.half_close();
            clients.push(c);
        }
        for c in &mut clients {
            assert!(c.ended_within(Duration::from_secs(5)).await, "the server finishes the call");
        }
        let stats = s.publisher.query(DebugQuery::Stats).await;
        assert_eq!(stats[0]["streams"], 0, "every half-closed stream is forgotten: {stats:?}");
        assert_eq!(stats[0]["classes"], 0, "and its class: {stats:?}");
    });
}

#[test]
fn unknown_types_are_ignored() {
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut c = connect(s.addr, false).await;
        c.sotw(DiscoveryRequest {
            node: Some(sidecar(9)),
            type_url: "type.googleapis.com/foo.Bar".into(),
            ..Default::default()
        });
        c.expect_silence(QUIET).await;
        c.sotw(cds(false, 9));
        assert_eq!(names_of(&c.recv().await), vec!["a", "b"]);
    });
}

#[test]
fn convergence_is_recorded_on_ack() {
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut c = connect(s.addr, false).await;
        c.sotw(cds(true, 10));
        let r = c.recv().await;
        c.ack(&r, &[]);
        s.apply(vec![(Kind::Cluster, "a", Some(cluster("a", 5)))]);
        let p = c.recv().await;
        c.ack(&p, &[]);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let stats = s.publisher.query(DebugQuery::Stats).await;
        assert_eq!(stats[0]["convergence_us"]["count"], 1, "{stats:?}");
        let dump = s
            .publisher
            .query(DebugQuery::ConfigDump("sidecar~10.0.0.10~app-10.default~default.svc.cluster.local".into()))
            .await;
        assert_eq!(dump[0]["configs"][0]["resources"].as_array().unwrap().len(), 2, "{dump:?}");
    });
}

/// Each change's convergence counts from that change, not from an
/// earlier one the stream already took: after two changes 300 ms apart,
/// no ACK is counted as 300 ms late (`pilot_proxy_convergence_time`
/// once counted every push from the stream's first change).
#[test]
fn convergence_counts_from_each_change() {
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut c = connect(s.addr, false).await;
        c.sotw(cds(true, 11));
        let r = c.recv().await;
        c.ack(&r, &[]);
        for (i, version) in [5, 6, 7].into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            s.apply(vec![(Kind::Cluster, "a", Some(cluster("a", version)))]);
            let p = c.recv().await;
            c.ack(&p, &[]);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let stats = s.publisher.query(DebugQuery::Stats).await;
        let conv = &stats[0]["convergence_us"];
        assert_eq!(conv["count"], 3, "{stats:?}");
        assert!(conv["max"].as_f64().unwrap() < 250_000.0, "{conv}");
    });
}

/// A raw client's opening of an ADS stream (stream 1) that opens its
/// HTTP/2 windows wide: only the socket holds the server's writes back.
fn raw_ads_opening(out: &mut Vec<u8>) {
    use istiod_xds::h2::frame::{self, encode};
    out.extend_from_slice(frame::PREFACE);
    encode::settings(out, &[(frame::setting::INITIAL_WINDOW_SIZE, frame::MAX_WINDOW)]);
    encode::settings_ack(out);
    encode::window_update(out, 0, frame::MAX_WINDOW - 65_535);
    let block = istiod_xds::h2::hpack::Encoder::new()
        .field(b":method", b"POST")
        .field(b":scheme", b"http")
        .field(b":path", b"/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources")
        .field(b"content-type", b"application/grpc")
        .finish();
    encode::headers(out, 1, &block, false, 16384);
}

/// A request as a gRPC message in a DATA frame on stream 1.
fn raw_request(req: &DiscoveryRequest, out: &mut Vec<u8>) {
    use istiod_proto::prost::Message;
    let body = req.encode_to_vec();
    let mut msg = vec![0];
    msg.extend_from_slice(&(body.len() as u32).to_be_bytes());
    msg.extend_from_slice(&body);
    istiod_xds::h2::frame::encode::data_head(out, 1, msg.len(), false);
    out.extend_from_slice(&msg);
}

/// One proxy stops reading; a hundred others keep converging on every
/// change, and the stuck one holds at most one push's worth of queued
/// bytes however many snapshots go by.
#[test]
fn a_stuck_reader_holds_bounded_memory_while_others_converge() {
    use std::io::Write;

    use istiod_proto::prost::Message;

    let limits = Limits { max_queued_bytes: 4 << 20, send_timeout: Duration::from_secs(120), ..Limits::default() };
    let mut s = TestServer::start(1, limits);
    // 40 clusters of ~25 KB: a CDS push is about 1 MB.
    let big = |i: u32, v: u32| {
        use istiod_proto::envoy::config::cluster::v3::Cluster;
        let c = Cluster {
            name: format!("c{i}"),
            alt_stat_name: "x".repeat(25_000),
            per_connection_buffer_limit_bytes: Some(v),
            ..Default::default()
        };
        bytes::Bytes::from(c.encode_to_vec())
    };
    let names: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
    s.apply_sync(names.iter().enumerate().map(|(i, n)| (Kind::Cluster, n.as_str(), Some(big(i as u32, 0)))).collect());

    // The stuck proxy: asks for CDS with wide-open windows, never reads.
    let mut stuck = std::net::TcpStream::connect(s.addr).unwrap();
    let mut out = Vec::new();
    raw_ads_opening(&mut out);
    raw_request(&cds(true, 999), &mut out);
    stuck.write_all(&out).unwrap();

    runtime().block_on(async {
        let mut clients = Vec::new();
        for n in 0..100 {
            let mut c = connect(s.addr, false).await;
            c.sotw(cds(true, n));
            let r = c.recv().await;
            c.ack(&r, &[]);
            clients.push(c);
        }
        let mut last = 0;
        for v in 1..=10u32 {
            last = s.apply(vec![(Kind::Cluster, "c0", Some(big(0, v)))]);
            // Every healthy proxy gets it and ACKs.
            for c in &mut clients {
                loop {
                    let r = c.recv().await;
                    c.ack(&r, &[]);
                    if r.version_info == last.to_string() {
                        break;
                    }
                }
            }
        }
        let stats = s.publisher.query(DebugQuery::Stats).await;
        let queued = stats[0]["queued_bytes"].as_u64().unwrap();
        assert!(queued <= 2 << 20, "at most one ~1 MB push queued for the stuck proxy, got {queued} bytes");
        assert_eq!(stats[0]["streams"], 101, "the stuck proxy is still connected: {stats:?}");
        assert_eq!(stats[0]["deferred_connections"], 1, "its newest state waits for it to drain: {stats:?}");
        assert!(last >= 11);
    });
    drop(stuck);
}

/// A push the socket does not take whole (a proxy that reads slowly, a
/// small socket buffer) is written as room appears, whole and in order,
/// and the connection goes on after it.
#[test]
fn a_push_the_socket_cannot_take_at_once_arrives_whole() {
    use std::io::{Read, Write};

    use istiod_proto::envoy::config::cluster::v3::Cluster;
    use istiod_proto::envoy::service::discovery::v3::DiscoveryResponse;
    use istiod_proto::prost::Message;
    use istiod_xds::h2::frame::{Frame, Head};

    let (mut s, handoff) = TestServer::start_handing_off(Limits { max_queued_bytes: 4 << 20, ..Limits::default() });
    let cluster = |i: usize, v: u32, pad: usize| {
        let c = Cluster {
            name: format!("c{i}"),
            alt_stat_name: "x".repeat(pad),
            per_connection_buffer_limit_bytes: Some(v),
            ..Default::default()
        };
        bytes::Bytes::from(c.encode_to_vec())
    };
    let names: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
    let all = |v: u32, pad: usize| -> Vec<(Kind, &str, Option<bytes::Bytes>)> {
        names.iter().enumerate().map(|(i, n)| (Kind::Cluster, n.as_str(), Some(cluster(i, v, pad)))).collect()
    };
    s.apply_sync(all(0, 10));

    // Both ends of the socket buffer little (the server's side is accepted
    // here and handed to the server), and the proxy opens its HTTP/2
    // windows wide: only the socket holds a push back.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&listener.local_addr().unwrap().into()).unwrap();
    let mut tcp: std::net::TcpStream = sock.into();
    let server_side = socket2::Socket::from(listener.accept().unwrap().0);
    server_side.set_send_buffer_size(16 * 1024).unwrap();
    handoff.try_send(server_side.into()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    raw_ads_opening(&mut out);
    raw_request(&cds(true, 1), &mut out);
    tcp.write_all(&out).unwrap();

    // Frames in, stream 1's bytes gathered, one gRPC message out.
    let mut wire = Vec::new();
    let mut stream = Vec::new();
    let mut response = |tcp: &mut std::net::TcpStream| -> DiscoveryResponse {
        let mut chunk = vec![0u8; 65536];
        loop {
            if stream.len() >= 5 {
                let len = u32::from_be_bytes(stream[1..5].try_into().unwrap()) as usize;
                if stream.len() >= 5 + len {
                    let r = DiscoveryResponse::decode(&stream[5..5 + len]).expect("a whole response, in order");
                    stream.drain(..5 + len);
                    return r;
                }
            }
            if wire.len() >= 9 {
                let head = Head::parse(wire[..9].try_into().unwrap());
                let end = 9 + head.len as usize;
                if wire.len() >= end {
                    let f = Frame::decode(head, bytes::Bytes::copy_from_slice(&wire[9..end])).unwrap();
                    wire.drain(..end);
                    if let Frame::Data { stream: 1, data, .. } = f {
                        stream.extend_from_slice(&data);
                    }
                    continue;
                }
            }
            let n = tcp.read(&mut chunk).expect("the server keeps writing");
            assert!(n > 0, "the server closed the connection");
            wire.extend_from_slice(&chunk[..n]);
        }
    };
    let ack = |r: &DiscoveryResponse, tcp: &mut std::net::TcpStream| {
        let mut out = Vec::new();
        let req = DiscoveryRequest {
            type_url: type_url::CLUSTER.into(),
            version_info: r.version_info.clone(),
            response_nonce: r.nonce.clone(),
            ..Default::default()
        };
        raw_request(&req, &mut out);
        tcp.write_all(&out).unwrap();
    };
    let first = response(&mut tcp);
    assert_eq!(first.resources.len(), 40);
    ack(&first, &mut tcp);
    std::thread::sleep(QUIET);

    // About 1 MB of clusters while the proxy does not read: the server's
    // 32 KiB socket buffer (16 KiB doubled) takes a few percent of it.
    let v = s.apply_sync(all(1, 25_000));
    std::thread::sleep(QUIET);
    let r = response(&mut tcp);
    assert_eq!(r.version_info, v.to_string());
    assert_eq!(r.resources.len(), 40);
    for res in &r.resources {
        let c = Cluster::decode(&res.value[..]).unwrap();
        assert_eq!((c.alt_stat_name.len(), c.per_connection_buffer_limit_bytes), (25_000, Some(1)), "{}", c.name);
    }
    ack(&r, &mut tcp);
    // The connection goes on: the next push arrives after it.
    let v = s.apply(vec![(Kind::Cluster, "c0", Some(cluster(0, 2, 10)))]);
    let r = response(&mut tcp);
    assert_eq!(r.version_info, v.to_string());
    let c0 = r.resources.iter().map(|res| Cluster::decode(&res.value[..]).unwrap()).find(|c| c.name == "c0");
    assert_eq!(c0.and_then(|c| c.per_connection_buffer_limit_bytes), Some(2));
}

#[test]
fn a_response_larger_than_the_queue_cap_is_sent_and_pushes_go_on() {
    // Issue #19, item 2: a CDS over the per-connection queue cap was never
    // sent (no log, the proxy waited, syncz said STALE).
    let cap = 256 * 1024;
    let mut s = TestServer::start(1, Limits { max_queued_bytes: cap, ..Limits::default() });
    mesh(&mut s);
    let big = istiod_proto::envoy::config::cluster::v3::Cluster {
        name: "big".into(),
        alt_stat_name: "x".repeat(2 << 20),
        ..Default::default()
    };
    s.apply_sync(vec![(Kind::Cluster, "big", Some(istiod_proto::prost::Message::encode_to_vec(&big).into()))]);
    runtime().block_on(async {
        let (mut c1, mut c2) = (connect(s.addr, false).await, connect(s.addr, true).await);
        c1.sotw(cds(true, 1));
        c2.delta_req(DeltaDiscoveryRequest {
            node: Some(sidecar(2)),
            type_url: type_url::CLUSTER.into(),
            ..Default::default()
        });
        let r = c1.recv().await;
        assert_eq!(names_of(&r), vec!["a", "b", "big"]);
        assert!(istiod_proto::prost::Message::encoded_len(&r) > 8 * cap);
        c1.ack(&r, &[]);
        let d = c2.recv_delta().await;
        assert_eq!(d.resources.len(), 3);
        c2.delta_req(DeltaDiscoveryRequest {
            type_url: type_url::CLUSTER.into(),
            response_nonce: d.nonce.clone(),
            ..Default::default()
        });
        // The next change reaches both.
        s.apply(vec![(Kind::Cluster, "a", Some(cluster("a", 2)))]);
        let r = c1.recv().await;
        assert_eq!(names_of(&r), vec!["a", "b", "big"]);
        let d = c2.recv_delta().await;
        assert_eq!(d.resources.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), vec!["a"]);
    });
}

#[test]
fn a_stream_subscribing_to_too_many_names_is_ended_others_go_on() {
    // Issue #19: one delta stream subscribed to four million names (478 MiB).
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut bad = connect(s.addr, true).await;
        let names: Vec<String> = (0..=istiod_xds::ads::DEFAULT_MAX_NAMES).map(|i| format!("n{i}")).collect();
        bad.delta_req(DeltaDiscoveryRequest {
            node: Some(sidecar(1)),
            type_url: type_url::CLUSTER_LOAD_ASSIGNMENT.into(),
            resource_names_subscribe: names,
            ..Default::default()
        });
        let (code, msg) = bad.status().await;
        assert_eq!(code, "8", "RESOURCE_EXHAUSTED: {msg}");
        assert!(msg.contains("200001 resource names") && msg.contains("ISTIOD_RS_MAX_NAMES_PER_STREAM"), "{msg}");
        let mut good = connect(s.addr, false).await;
        good.sotw(cds(true, 2));
        assert_eq!(names_of(&good.recv().await), vec!["a", "b"]);
    });
}

#[test]
fn a_sotw_stream_asking_for_too_many_names_with_an_ack_is_ended() {
    // The bound is held where a request adds names: a state-of-the-world
    // ACK that asks for more is held to it as a first request is.
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut bad = connect(s.addr, false).await;
        bad.sotw(cds(true, 1));
        let r = bad.recv().await;
        bad.ack(&r, &[]);
        bad.sotw(eds(&[A]));
        let e = bad.recv().await;
        // The same names again: an ACK, answered by nothing.
        bad.ack(&e, &[A]);
        bad.expect_silence(QUIET).await;
        let names: Vec<String> = (0..=istiod_xds::ads::DEFAULT_MAX_NAMES).map(|i| format!("n{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        bad.ack(&e, &refs);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(20), bad.status()).await;
        let (code, msg) = ended.expect("the stream is ended");
        assert_eq!(code, "8", "RESOURCE_EXHAUSTED: {msg}");
        assert!(msg.contains("200001 resource names"), "{msg}");
        let mut good = connect(s.addr, false).await;
        good.sotw(cds(true, 2));
        assert_eq!(names_of(&good.recv().await), vec!["a", "b"]);
    });
}

#[test]
fn adsz_lists_a_few_names_per_watch_and_counts_the_rest() {
    // Issue #19: /debug/adsz of one stream with millions of names was 43.7 MB,
    // built on a serving core.
    let mut s = TestServer::start(1, Limits::default());
    mesh(&mut s);
    runtime().block_on(async {
        let mut c = connect(s.addr, true).await;
        let names: Vec<String> = (0..150_000).map(|i| format!("n{i}")).collect();
        c.delta_req(DeltaDiscoveryRequest {
            node: Some(sidecar(1)),
            type_url: type_url::CLUSTER_LOAD_ASSIGNMENT.into(),
            resource_names_subscribe: names,
            ..Default::default()
        });
        let _ = c.recv_delta().await;
        let adsz = s.publisher.query(DebugQuery::Adsz).await;
        let client = &adsz[0]["clients"][0];
        assert_eq!(client["istiodRs"]["watches"][type_url::CLUSTER_LOAD_ASSIGNMENT]["namesTotal"], 150_000);
        let names = client["watches"][type_url::CLUSTER_LOAD_ASSIGNMENT].as_array().unwrap();
        assert_eq!(names.len(), istiod_xds::ads::ADSZ_NAMES);
        assert!(adsz[0].to_string().len() < 64 * 1024, "{} bytes", adsz[0].to_string().len());
    });
}

/// istiod's `PILOT_PUSH_THROTTLE` (issue #15): a core pushes a snapshot to
/// `throttle` connections at a time and reads its connections between
/// batches, so a full push cannot starve requests and ACKs
/// (`xds/src/ads.rs`, `updates`). One more client asks for EDS again and
/// again while the push runs; nonces count up per core, so an answer whose
/// nonce falls between the first and the last push's was read and answered
/// in between. With a throttle above the number of connections the push is
/// one batch and no answer falls inside it: the assertion can fail.
#[test]
fn requests_are_read_between_push_batches() {
    const CLIENTS: u32 = 300;
    // (throttle, whether a request is answered while the push runs)
    for (throttle, interleaved) in [(1, true), (100_000, false)] {
        let mut s = TestServer::start_throttled(1, Limits::default(), throttle);
        mesh(&mut s);
        runtime().block_on(async {
            let seq = |nonce: &str| nonce.rsplit('-').next().unwrap().parse::<u64>().unwrap();
            let mut tasks = tokio::task::JoinSet::new();
            for n in 0..CLIENTS {
                let mut c = connect(s.addr, false).await;
                c.sotw(cds(true, 100 + n));
                let r = c.recv().await;
                c.ack(&r, &[]);
                tasks.spawn(async move {
                    let push = c.recv().await;
                    assert_eq!(push.type_url, type_url::CLUSTER);
                    seq(&push.nonce)
                });
            }
            let mut asker = connect(s.addr, false).await;
            asker.sotw(DiscoveryRequest { node: Some(sidecar(1)), ..eds(&[A]) });
            asker.recv().await;
            let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let stop = done.clone();
            let answers = tokio::spawn(async move {
                let mut nonces = Vec::new();
                let mut names = [A, B].into_iter().cycle();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    asker.sotw(eds(&[names.next().unwrap()]));
                    let r = asker.recv().await;
                    nonces.push(seq(&r.nonce));
                }
                nonces
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
            s.model.resources[Kind::Cluster as usize].get_mut("a").unwrap().generation = 99;
            s.model.resources[Kind::Cluster as usize].get_mut("a").unwrap().body = cluster("a", 3);
            s.publish_full();
            let (mut first, mut last, mut pushed) = (u64::MAX, 0, 0);
            while let Some(r) = tasks.join_next().await {
                pushed += 1;
                let n = r.unwrap();
                first = first.min(n);
                last = last.max(n);
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            let answers = answers.await.unwrap();
            assert_eq!(pushed, CLIENTS);
            let inside = answers.iter().filter(|n| (first..last).contains(n)).count();
            assert_eq!(
                inside > 0,
                interleaved,
                "throttle {throttle}: {inside} of {} answers between push nonces {first} and {last}",
                answers.len()
            );
        });
    }
}
