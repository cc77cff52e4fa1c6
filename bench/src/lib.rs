//! Criterion benchmarks of the hot paths, the servers and clients they share, and the scenario files `loadgen` plays.
//!
//! The scenarios are in `bench/testdata/`. Benchmarks are explicit
//! `[[bench]]` targets (`autobenches = false`); figures and how they were
//! measured are in `bench/README.md`.
//!
//! This library holds what the benchmarks share: an echo service for the
//! glommio server, the `h2`-crate baseline server and client that the
//! loopback benchmark compares it with, and a connection without I/O with
//! one call open ([`sansio`]).
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::rc::Rc;

use bytes::{Buf, Bytes, BytesMut};
use istiod_xds::grpc::{Call, Code, GrpcConnection, GrpcLimits, Service, Status};
use istiod_xds::h2::Limits;
use istiod_xds::server::{self, ListenerConfig, Registry, ServerConfig, ServerHandle, ServiceFactory};

/// Path of the echo method.
pub const ECHO: &str = "/istiod.bench.Echo/Bidi";

/// Echoes every message; finishes on half-close.
pub struct Echo;

impl Service for Echo {
    fn open(&mut self, _: &mut GrpcConnection, call: &Call) -> Result<(), Status> {
        if &call.request.path[..] == ECHO.as_bytes() {
            Ok(())
        } else {
            Err(Status::new(Code::Unimplemented, "echo only"))
        }
    }
    fn message(&mut self, conn: &mut GrpcConnection, stream: u32, msg: Bytes) -> Result<(), Status> {
        conn.send(stream, msg).map_err(|e| Status::new(Code::Unavailable, e.to_string()))
    }
    fn half_close(&mut self, conn: &mut GrpcConnection, stream: u32) {
        conn.finish(stream, &Status::ok());
    }
    fn closed(&mut self, _: &mut GrpcConnection, _: u32) {}
}

struct EchoFactory;

impl ServiceFactory for EchoFactory {
    type Service = Echo;
    fn make(&self, _: usize, _: Rc<Registry>) -> Echo {
        Echo
    }
}

/// Starts the glommio server with the echo service on one core.
pub fn start_glommio() -> ServerHandle {
    let cfg = ServerConfig {
        cores: 1,
        pin: false,
        listeners: vec![ListenerConfig { addr: "127.0.0.1:0".parse().expect("addr"), tls: None }],
        limits: Limits::default(),
        grpc: GrpcLimits::default(),
        shutdown: std::time::Duration::from_secs(10),
        handoff: None,
        ring_depth: istiod_xds::server::RING_DEPTH,
    };
    server::start(cfg, EchoFactory).expect("glommio server starts")
}

/// Starts the baseline: the same echo over the `h2` crate's server on a
/// tokio current-thread runtime in its own thread.
pub fn start_h2_baseline() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            tx.send(listener.local_addr().expect("addr")).expect("send addr");
            loop {
                let (tcp, _) = listener.accept().await.expect("accept");
                tokio::spawn(async move {
                    let _ = tcp.set_nodelay(true);
                    let mut conn = h2::server::Builder::new()
                        .initial_window_size(1 << 20)
                        .initial_connection_window_size(4 << 20)
                        .handshake::<_, Bytes>(tcp)
                        .await
                        .expect("h2 handshake");
                    while let Some(Ok((req, respond))) = conn.accept().await {
                        tokio::spawn(baseline_echo(req, respond));
                    }
                });
            }
        });
    });
    rx.recv().expect("baseline address")
}

async fn baseline_echo(req: http::Request<h2::RecvStream>, mut respond: h2::server::SendResponse<Bytes>) {
    let resp = http::Response::builder().status(200).header("content-type", "application/grpc").body(()).expect("resp");
    let mut send = respond.send_response(resp, false).expect("send response");
    let mut body = req.into_body();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        // Echo bytes as they come: framing is preserved end to end.
        send.reserve_capacity(chunk.len());
        let _ = send.send_data(chunk, false);
    }
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let _ = send.send_trailers(trailers);
}

/// One client stream: sends `n` messages of `size` bytes and reads all
/// echoes back. Returns the bytes echoed.
pub async fn client_round(addr: SocketAddr, n: usize, size: usize) -> usize {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let _ = tcp.set_nodelay(true);
    let (mut send, conn) = h2::client::Builder::new()
        .initial_window_size(4 << 20)
        .initial_connection_window_size(16 << 20)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{ECHO}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
    let (resp, mut stream) = send.send_request(req, false).expect("send request");
    let mut frame = BytesMut::with_capacity(5 + size);
    frame.extend_from_slice(&[0]);
    frame.extend_from_slice(&(size as u32).to_be_bytes());
    frame.extend_from_slice(&vec![7u8; size]);
    let frame = frame.freeze();
    let writer = tokio::spawn(async move {
        for _ in 0..n {
            stream.reserve_capacity(frame.len());
            let mut rest = frame.clone();
            while !rest.is_empty() {
                let cap = std::future::poll_fn(|cx| stream.poll_capacity(cx)).await.expect("capacity").expect("ok");
                stream.send_data(rest.split_to(cap.min(rest.len())), false).expect("data");
            }
        }
        stream.send_data(Bytes::new(), true).expect("end");
    });
    let mut body = resp.await.expect("response").into_body();
    let mut got = 0;
    let mut buf = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("chunk");
        let _ = body.flow_control().release_capacity(chunk.len());
        buf.extend_from_slice(&chunk);
        while buf.len() >= 5 {
            let len = u32::from_be_bytes(buf[1..5].try_into().expect("4 bytes")) as usize;
            if buf.len() < 5 + len {
                break;
            }
            buf.advance(5 + len);
            got += len;
        }
    }
    writer.await.expect("writer");
    got
}

/// Fan-out clients for the ADS benchmark: `n` SotW proxies, one connection
/// each, watching CDS (wildcard) and EDS for `eds_name`; every response is
/// ACKed at once and the last version seen is stored per client.
pub mod fanout {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use bytes::{Buf, Bytes, BytesMut};
    use istiod_proto::envoy::config::core::v3::Node;
    use istiod_proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
    use istiod_proto::prost::Message;
    use istiod_proto::type_url;

    /// What the client thread reports.
    pub struct Clients {
        /// Last EDS version each client ACKed.
        pub acked: Arc<Vec<AtomicU64>>,
        /// Clients that finished their initial sync.
        pub synced: Arc<AtomicUsize>,
    }

    /// Starts `n` clients on a tokio thread of their own.
    pub fn start(addr: SocketAddr, n: usize, eds_name: &str) -> Clients {
        let acked: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
        let synced = Arc::new(AtomicUsize::new(0));
        let (a, s, name) = (acked.clone(), synced.clone(), eds_name.to_owned());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let mut tasks = Vec::new();
                for i in 0..n {
                    let (a, s, name) = (a.clone(), s.clone(), name.clone());
                    tasks.push(tokio::spawn(async move { client(addr, i, &name, &a, &s).await }));
                }
                for t in tasks {
                    let _ = t.await;
                }
            });
        });
        Clients { acked, synced }
    }

    fn frame(req: &DiscoveryRequest) -> Bytes {
        let body = req.encode_to_vec();
        let mut f = BytesMut::with_capacity(5 + body.len());
        f.extend_from_slice(&[0]);
        f.extend_from_slice(&(body.len() as u32).to_be_bytes());
        f.extend_from_slice(&body);
        f.freeze()
    }

    async fn client(addr: SocketAddr, i: usize, eds_name: &str, acked: &[AtomicU64], synced: &AtomicUsize) {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (mut send, conn) = h2::client::handshake(tcp).await.expect("handshake");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = http::Request::builder()
            .method("POST")
            .uri("http://istiod/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources")
            .header("content-type", "application/grpc")
            .body(())
            .expect("request");
        let (resp, mut stream) = send.send_request(req, false).expect("send");
        let node = Node {
            id: format!("sidecar~10.1.{}.{}~p{i}.ns~ns.svc.cluster.local", i / 250, i % 250),
            ..Default::default()
        };
        stream
            .send_data(
                frame(&DiscoveryRequest { node: Some(node), type_url: type_url::CLUSTER.into(), ..Default::default() }),
                false,
            )
            .expect("cds");
        let mut body = resp.await.expect("response").into_body();
        let mut buf = BytesMut::new();
        let mut eds_requested = false;
        while let Some(Ok(chunk)) = body.data().await {
            let _ = body.flow_control().release_capacity(chunk.len());
            buf.extend_from_slice(&chunk);
            while buf.len() >= 5 {
                let len = u32::from_be_bytes(buf[1..5].try_into().expect("4")) as usize;
                if buf.len() < 5 + len {
                    break;
                }
                buf.advance(5);
                let r = DiscoveryResponse::decode(buf.split_to(len)).expect("response decodes");
                let names =
                    if r.type_url == type_url::CLUSTER_LOAD_ASSIGNMENT { vec![eds_name.to_owned()] } else { vec![] };
                let ack = DiscoveryRequest {
                    type_url: r.type_url.clone(),
                    version_info: r.version_info.clone(),
                    response_nonce: r.nonce.clone(),
                    resource_names: names,
                    ..Default::default()
                };
                let _ = stream.send_data(frame(&ack), false);
                if r.type_url == type_url::CLUSTER && !eds_requested {
                    eds_requested = true;
                    let eds = DiscoveryRequest {
                        type_url: type_url::CLUSTER_LOAD_ASSIGNMENT.into(),
                        resource_names: vec![eds_name.to_owned()],
                        ..Default::default()
                    };
                    let _ = stream.send_data(frame(&eds), false);
                } else if r.type_url == type_url::CLUSTER_LOAD_ASSIGNMENT {
                    let v: u64 = r.version_info.parse().unwrap_or(0);
                    if acked[i].swap(v, Ordering::SeqCst) == 0 {
                        synced.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }
    }
}

/// A gRPC connection driven without I/O, for benchmarks of the send path.
pub mod sansio {
    use std::time::Instant;

    use bytes::Bytes;
    use istiod_xds::grpc::{Call, GrpcConnection, GrpcLimits, Service, Status};
    use istiod_xds::h2::frame::{self, encode};
    use istiod_xds::h2::{Limits, hpack};

    /// Accepts every call and ignores what arrives.
    pub struct Sink;

    impl Service for Sink {
        fn open(&mut self, _: &mut GrpcConnection, _: &Call) -> Result<(), Status> {
            Ok(())
        }
        fn message(&mut self, _: &mut GrpcConnection, _: u32, _: Bytes) -> Result<(), Status> {
            Ok(())
        }
        fn half_close(&mut self, _: &mut GrpcConnection, _: u32) {}
        fn closed(&mut self, _: &mut GrpcConnection, _: u32) {}
    }

    /// Envoy's request header block for an ADS method.
    pub fn request_block(method: &str) -> Bytes {
        hpack::Encoder::new()
            .field(b":method", b"POST")
            .field(b":scheme", b"http")
            .field(b":path", format!("/envoy.service.discovery.v3.AggregatedDiscoveryService/{method}").as_bytes())
            .field(b":authority", b"istiod.istio-system.svc:15012")
            .field(b"content-type", b"application/grpc")
            .field(b"te", b"trailers")
            .field(b"user-agent", b"grpc-c++/1.66.0")
            .finish()
    }

    /// A connection with one ADS call open on stream 1, whose client
    /// allows `window` bytes per stream and frames of `max_frame`.
    pub fn open_connection(limits: Limits, window: u32, max_frame: u32) -> GrpcConnection {
        let now = Instant::now();
        let mut c = GrpcConnection::new(limits, GrpcLimits::default(), now);
        let mut hello = frame::PREFACE.to_vec();
        encode::settings(
            &mut hello,
            &[(frame::setting::INITIAL_WINDOW_SIZE, window), (frame::setting::MAX_FRAME_SIZE, max_frame)],
        );
        encode::window_update(&mut hello, 0, window - 65_535);
        encode::headers(&mut hello, 1, &request_block("StreamAggregatedResources"), false, 16384);
        c.recv(&hello, now, &mut Sink);
        let mut out = Vec::new();
        c.poll_transmit(&mut out, usize::MAX, &mut Sink);
        c
    }
}

/// The instruction-count gate's arithmetic (`benches/icount.rs` measures,
/// under valgrind's callgrind; `scripts/icount` runs it in CI): checked-in
/// baselines, and which cases regressed past the threshold.
pub mod icount {
    use std::collections::BTreeMap;

    /// How much more than its baseline a case may count before the gate
    /// fails, in percent.
    pub const THRESHOLD_PERCENT: u64 = 10;

    /// The baselines file: one `case instructions` a line; `#` starts a
    /// comment.
    pub fn parse(text: &str) -> Result<BTreeMap<String, u64>, String> {
        let mut out = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(name), Some(count), None) = (words.next(), words.next(), words.next()) else {
                return Err(format!("line {}: expected `case instructions`, got {line:?}", i + 1));
            };
            let count = count.parse().map_err(|e| format!("line {}: {count:?}: {e}", i + 1))?;
            if out.insert(name.to_owned(), count).is_some() {
                return Err(format!("line {}: {name} twice", i + 1));
            }
        }
        Ok(out)
    }

    /// The baselines file for `counts`, with `header` as its comment.
    pub fn render(header: &str, counts: &BTreeMap<String, u64>) -> String {
        let mut out: String = header.lines().map(|l| format!("# {l}\n")).collect();
        for (name, n) in counts {
            out.push_str(&format!("{name} {n}\n"));
        }
        out
    }

    /// One case's verdict.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Verdict {
        /// Within the threshold (the change as a fraction, + is more).
        Within(f64),
        /// More than the threshold over its baseline.
        Regressed(f64),
        /// Less than the threshold under: the baseline should be updated
        /// (not a failure).
        Improved(f64),
        /// No baseline for this case.
        New,
    }

    /// `now` against `baseline`: more than `percent` over it regressed,
    /// more than `percent` under it improved (in whole instructions, so
    /// that exactly the threshold is within it).
    pub fn judge(baseline: Option<u64>, now: u64, percent: u64) -> Verdict {
        let Some(base) = baseline else { return Verdict::New };
        let change = if base == 0 { f64::INFINITY } else { now as f64 / base as f64 - 1.0 };
        let (now100, base100) = (u128::from(now) * 100, u128::from(base));
        if now100 > base100 * u128::from(100 + percent) {
            Verdict::Regressed(change)
        } else if now100 < base100 * u128::from(100u64.saturating_sub(percent)) {
            Verdict::Improved(change)
        } else {
            Verdict::Within(if base == 0 { 0.0 } else { change })
        }
    }

    /// The instructions a callgrind output file counted (its `summary:`
    /// or, failing that, `totals:` line).
    pub fn callgrind_total(text: &str) -> Option<u64> {
        let find = |key: &str| {
            text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()?.parse().ok())
        };
        find("summary:").or_else(|| find("totals:"))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_gate_fails_past_ten_percent_only() {
            let t = THRESHOLD_PERCENT;
            assert_eq!(t, 10, "the issue's threshold");
            assert!(matches!(judge(Some(1000), 1100, t), Verdict::Within(_)), "exactly 10% is within");
            assert!(matches!(judge(Some(1000), 1101, t), Verdict::Regressed(_)));
            assert!(matches!(judge(Some(1_000_000_000), 1_100_000_001, t), Verdict::Regressed(_)));
            assert!(matches!(judge(Some(1000), 1000, t), Verdict::Within(_)));
            assert!(matches!(judge(Some(1000), 900, t), Verdict::Within(_)));
            assert!(matches!(judge(Some(1000), 899, t), Verdict::Improved(_)));
            assert_eq!(judge(None, 5, t), Verdict::New);
            assert!(matches!(judge(Some(0), 1, t), Verdict::Regressed(_)));
            assert!(matches!(judge(Some(0), 0, t), Verdict::Within(_)));
        }

        #[test]
        fn baselines_round_trip_and_refuse_garbage() {
            let counts: BTreeMap<String, u64> = [("a/b".to_owned(), 12), ("c".to_owned(), 3)].into();
            let text = render("made by\nscripts/icount --update", &counts);
            assert!(text.starts_with("# made by\n# scripts/icount --update\n"));
            assert_eq!(parse(&text).unwrap(), counts);
            assert!(parse("a 1 2").unwrap_err().contains("line 1"));
            assert!(parse("a x").is_err());
            assert!(parse("a 1\na 2").unwrap_err().contains("twice"));
        }

        #[test]
        fn reads_callgrinds_totals() {
            let out =
                "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nfn=(1) x\n3 5\nsummary: 123456\ntotals: 123456\n";
            assert_eq!(callgrind_total(out), Some(123456));
            assert_eq!(callgrind_total("totals: 77\n"), Some(77));
            assert_eq!(callgrind_total("events: Ir\n"), None);
        }
    }
}
