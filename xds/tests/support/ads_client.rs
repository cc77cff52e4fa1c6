//! A Rust ADS test client over real loopback sockets (the `h2` crate),
//! like istiod's `FakeDiscoveryServer.ConnectADS()`, plus a server started
//! with the ADS engine and a publisher to drive it.

#![allow(dead_code, reason = "each test binary uses part of the support code")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use istiod_proto::envoy::config::cluster::v3::Cluster;
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::envoy::config::endpoint::v3::ClusterLoadAssignment;
use istiod_proto::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use istiod_proto::google::rpc::Status as RpcStatus;
use istiod_proto::prost::Message;
use istiod_proto::type_url;
use istiod_xds::ads::{self, AdsFactory, Delta, Kind, Publisher, SimpleGenerator, SimpleModel, Snapshot};
use istiod_xds::grpc::GrpcLimits;
use istiod_xds::h2::Limits;
use istiod_xds::server::{self, ListenerConfig, ServerConfig, ServerHandle};

pub(crate) struct TestServer {
    pub(crate) handle: Option<ServerHandle>,
    pub(crate) addr: SocketAddr,
    pub(crate) publisher: Publisher,
    pub(crate) model: SimpleModel,
    pub(crate) version: u64,
}

impl TestServer {
    pub(crate) fn start(cores: usize, limits: Limits) -> Self {
        Self::start_throttled(cores, limits, 25)
    }

    /// A server whose cores push a snapshot to `throttle` connections at a
    /// time (`PILOT_PUSH_THROTTLE`).
    pub(crate) fn start_throttled(cores: usize, limits: Limits, throttle: usize) -> Self {
        Self::start_with(cores, limits, throttle, None)
    }

    /// A one-core server that also serves the connections sent on the
    /// returned channel (`ServerConfig::handoff`): a test accepts them
    /// itself, to set options on the server's side of the socket.
    pub(crate) fn start_handing_off(limits: Limits) -> (Self, async_channel::Sender<std::net::TcpStream>) {
        let (tx, rx) = async_channel::unbounded();
        (Self::start_with(1, limits, 25, Some(rx)), tx)
    }

    fn start_with(cores: usize, limits: Limits, throttle: usize, handoff: Option<server::Handoff>) -> Self {
        let (publisher, receivers) = ads::channels(cores);
        let initial = Arc::new(Snapshot::empty(Instant::now()));
        let factory =
            AdsFactory::new(Arc::new(SimpleGenerator), receivers, initial, "istiod-rs-test").push_throttle(throttle);
        let cfg = ServerConfig {
            cores,
            pin: false,
            listeners: vec![ListenerConfig { addr: "127.0.0.1:0".parse().unwrap(), tls: None }],
            limits,
            grpc: GrpcLimits::default(),
            shutdown: std::time::Duration::from_secs(10),
            handoff,
            ring_depth: istiod_xds::server::RING_DEPTH,
        };
        let handle = server::start(cfg, factory).expect("server starts");
        let addr = handle.addrs()[0];
        Self { handle: Some(handle), addr, publisher, model: SimpleModel::default(), version: 0 }
    }

    /// Publishes the current model with the given changes.
    pub(crate) fn apply(&mut self, changes: Vec<(Kind, &str, Option<Bytes>)>) -> u64 {
        self.version += 1;
        let changes = changes.into_iter().map(|(k, n, b)| (k, Arc::from(n), b)).collect();
        let (model, delta) = self.model.apply(self.version, changes);
        self.model = model.clone();
        let snap = Arc::new(Snapshot::new(self.version, Instant::now(), Arc::new(model)));
        self.publisher.publish(snap, delta);
        self.version
    }

    /// Like [`TestServer::apply`], then waits until every core has it, so
    /// that what a test does next cannot race the publish.
    pub(crate) fn apply_sync(&mut self, changes: Vec<(Kind, &str, Option<Bytes>)>) -> u64 {
        let v = self.apply(changes);
        self.sync();
        v
    }

    /// Waits until every core has applied the newest snapshot.
    pub(crate) fn sync(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stats = futures_lite::future::block_on(self.publisher.query(ads::DebugQuery::Stats));
            if stats.len() == self.publisher.cores() && stats.iter().all(|s| s["snapshot_version"] == self.version) {
                return;
            }
            assert!(Instant::now() < deadline, "cores did not reach version {}: {stats:?}", self.version);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub(crate) fn publish_full(&mut self) {
        self.version += 1;
        let snap = Arc::new(Snapshot::new(self.version, Instant::now(), Arc::new(self.model.clone())));
        self.publisher.publish(snap, Delta::Full);
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
    }
}

pub(crate) fn cluster(name: &str, marker: u32) -> Bytes {
    Cluster { name: name.into(), per_connection_buffer_limit_bytes: Some(marker), ..Default::default() }
        .encode_to_vec()
        .into()
}

pub(crate) fn cla(name: &str, weight: u32) -> Bytes {
    use istiod_proto::envoy::config::endpoint::v3::LocalityLbEndpoints;
    ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![LocalityLbEndpoints { load_balancing_weight: Some(weight), ..Default::default() }],
        ..Default::default()
    }
    .encode_to_vec()
    .into()
}

pub(crate) fn node(id: &str) -> Node {
    Node { id: id.into(), ..Default::default() }
}

pub(crate) fn sidecar(n: u32) -> Node {
    node(&format!("sidecar~10.0.{}.{}~app-{n}.default~default.svc.cluster.local", n / 250, n % 250))
}

pub(crate) struct AdsClient {
    send: h2::SendStream<Bytes>,
    body: Option<h2::RecvStream>,
    response: Option<h2::client::ResponseFuture>,
    buf: BytesMut,
    pub(crate) delta: bool,
}

pub(crate) async fn connect(addr: SocketAddr, delta: bool) -> AdsClient {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = h2::client::Builder::new()
        .initial_window_size(4 << 20)
        .initial_connection_window_size(16 << 20)
        .handshake(tcp)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = if delta { "DeltaAggregatedResources" } else { "StreamAggregatedResources" };
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://istiod/envoy.service.discovery.v3.AggregatedDiscoveryService/{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, stream) = send.send_request(req, false).unwrap();
    AdsClient { send: stream, body: None, response: Some(response), buf: BytesMut::new(), delta }
}

impl AdsClient {
    fn write(&mut self, msg: Vec<u8>) {
        let mut f = BytesMut::with_capacity(5 + msg.len());
        f.extend_from_slice(&[0]);
        f.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        f.extend_from_slice(&msg);
        self.send.send_data(f.freeze(), false).unwrap();
    }

    /// Ends the request side (END_STREAM), keeping the connection.
    pub(crate) fn half_close(&mut self) {
        self.send.send_data(Bytes::new(), true).unwrap();
    }

    pub(crate) fn sotw(&mut self, req: DiscoveryRequest) {
        self.write(req.encode_to_vec());
    }

    pub(crate) fn delta_req(&mut self, req: DeltaDiscoveryRequest) {
        self.write(req.encode_to_vec());
    }

    /// Waits up to `wait` for the stream to end (trailers, a reset or the
    /// connection's loss), skipping messages; whether it ended in time.
    pub(crate) async fn ended_within(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if self.next(left).await.is_none() {
                return tokio::time::Instant::now() < deadline;
            }
        }
    }

    /// Next message, or `None` after `wait` (or at the end of the stream).
    async fn next(&mut self, wait: Duration) -> Option<Bytes> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
                if self.buf.len() >= 5 + len {
                    self.buf.advance(5);
                    return Some(self.buf.split_to(len).freeze());
                }
            }
            if self.body.is_none() {
                // Keep the response future across timeouts: the headers
                // may come later.
                let fut = self.response.as_mut()?;
                let resp = tokio::time::timeout_at(deadline, fut).await.ok()?.ok()?;
                self.response = None;
                self.body = Some(resp.into_body());
            }
            let body = self.body.as_mut().unwrap();
            match tokio::time::timeout_at(deadline, body.data()).await {
                Ok(Some(Ok(chunk))) => {
                    let _ = body.flow_control().release_capacity(chunk.len());
                    self.buf.extend_from_slice(&chunk);
                }
                _ => return None,
            }
        }
    }

    pub(crate) async fn recv(&mut self) -> DiscoveryResponse {
        let m = self.next(Duration::from_secs(10)).await.expect("a response within 10s");
        DiscoveryResponse::decode(m).unwrap()
    }

    pub(crate) async fn recv_delta(&mut self) -> DeltaDiscoveryResponse {
        let m = self.next(Duration::from_secs(10)).await.expect("a delta response within 10s");
        DeltaDiscoveryResponse::decode(m).unwrap()
    }

    pub(crate) async fn expect_silence(&mut self, wait: Duration) {
        if let Some(m) = self.next(wait).await {
            if self.delta {
                panic!("unexpected response: {:?}", DeltaDiscoveryResponse::decode(m).unwrap());
            } else {
                panic!("unexpected response: {:?}", DiscoveryResponse::decode(m).unwrap());
            }
        }
    }

    /// The status the server ended the stream with.
    pub(crate) async fn status(&mut self) -> (String, String) {
        if self.body.is_none() {
            let resp = self.response.take().unwrap().await.unwrap();
            let h = resp.headers();
            if let Some(s) = h.get("grpc-status") {
                let m = h.get("grpc-message").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
                return (s.to_str().unwrap().to_owned(), m);
            }
            self.body = Some(resp.into_body());
        }
        let body = self.body.as_mut().unwrap();
        while let Some(Ok(_)) = body.data().await {}
        let t = body.trailers().await.unwrap().unwrap_or_default();
        let get = |k: &str| t.get(k).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
        (get("grpc-status"), get("grpc-message"))
    }

    /// ACKs a SotW response.
    pub(crate) fn ack(&mut self, r: &DiscoveryResponse, names: &[&str]) {
        self.sotw(DiscoveryRequest {
            type_url: r.type_url.clone(),
            version_info: r.version_info.clone(),
            response_nonce: r.nonce.clone(),
            resource_names: names.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        });
    }

    pub(crate) fn nack(&mut self, r: &DiscoveryResponse, names: &[&str]) {
        self.sotw(DiscoveryRequest {
            type_url: r.type_url.clone(),
            response_nonce: r.nonce.clone(),
            resource_names: names.iter().map(|s| s.to_string()).collect(),
            error_detail: Some(RpcStatus { code: 3, message: "rejected by test".into(), details: vec![] }),
            ..Default::default()
        });
    }
}

pub(crate) fn names_of(r: &DiscoveryResponse) -> Vec<String> {
    r.resources
        .iter()
        .map(|a| {
            if a.type_url == type_url::CLUSTER {
                Cluster::decode(a.value.as_slice()).unwrap().name
            } else {
                ClusterLoadAssignment::decode(a.value.as_slice()).unwrap().cluster_name
            }
        })
        .collect()
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}
