//! `loadgen vms`: N virtual machines' agents connect at once as proxies of
//! one WorkloadGroup (`AUTO_REGISTER_GROUP`), against pilot-discovery on a
//! fake Kubernetes API server (real list/watch over HTTP). Measured: until
//! every VM's WorkloadEntry is in the API server, and until another
//! proxy's load assignment of the Service selecting them holds every VM
//! (change -> what a client is served); then, all gone at once, until
//! every entry is deleted after the grace period.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use istiod_kubewatch::fake::{self, FakeApi};
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::envoy::config::endpoint::v3::ClusterLoadAssignment;
use istiod_proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use istiod_proto::prost::Message;
use istiod_proto::prost_types::{Struct, Value as PValue, value::Kind as PKind};
use serde_json::json;

use crate::wire::{Event, MessageStream};

/// The namespace, group and Service of the run.
pub const NAMESPACE: &str = "vms";
/// The WorkloadGroup.
pub const GROUP: &str = "legacy";
/// The cluster the observer watches.
pub const CLUSTER: &str = "outbound|80||legacy.vms.svc.cluster.local";

const ADS: &str = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

/// The API server of the run: the group, the Service selecting its
/// entries, the Leases and Istio's kinds.
pub async fn api() -> std::io::Result<FakeApi> {
    let api = FakeApi::start().await?;
    for r in fake::write_resources().into_iter().chain(fake::core_resources()).chain(fake::istio_resources()) {
        api.install(r);
    }
    api.apply("namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}));
    api.apply(
        "workloadgroups",
        json!({"apiVersion": "networking.istio.io/v1", "kind": "WorkloadGroup",
               "metadata": {"name": GROUP, "namespace": NAMESPACE, "uid": "loadgen-wg"},
               "spec": {"metadata": {"labels": {"app": GROUP}},
                        "template": {"serviceAccount": GROUP, "ports": {"http": 8080}}}}),
    );
    api.apply(
        "services",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": GROUP, "namespace": NAMESPACE},
               "spec": {"clusterIP": "10.96.200.1", "selector": {"app": GROUP},
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    );
    Ok(api)
}

/// Most VMs a run has (their addresses are 10.200.0.0/16).
pub const MAX_VMS: u32 = 64_000;

/// VM `i`'s address: 10.200.0.0/16 (`i` < [`MAX_VMS`]).
pub fn vm_ip(i: u32) -> String {
    format!("10.200.{}.{}", i / 250, i % 250 + 1)
}

fn text(s: &str) -> PValue {
    PValue { kind: Some(PKind::StringValue(s.into())) }
}

fn node(id: String, meta: &[(&str, &str)]) -> Node {
    let fields = meta.iter().map(|(k, v)| (k.to_string(), text(v))).collect();
    Node { id, metadata: Some(Struct { fields }), ..Default::default() }
}

fn request(type_url: &str, names: &[&str], node: Option<Node>, ack: Option<&DiscoveryResponse>) -> Bytes {
    let req = DiscoveryRequest {
        type_url: type_url.into(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        node,
        version_info: ack.map(|r| r.version_info.clone()).unwrap_or_default(),
        response_nonce: ack.map(|r| r.nonce.clone()).unwrap_or_default(),
        ..Default::default()
    };
    crate::proxy::frame(req.encode_to_vec())
}

/// Reads the next whole response of `client` (`None`: the stream ended).
async fn next_response(client: &mut crate::lean::Client, messages: &mut MessageStream) -> Option<DiscoveryResponse> {
    let mut fields: Vec<(u32, Bytes)> = Vec::new();
    loop {
        loop {
            match messages.read() {
                Ok(Some(Event::Field(n, b))) => fields.push((n, b)),
                Ok(Some(Event::End(_))) => {
                    // Rebuilt from its top-level fields.
                    let mut buf = Vec::new();
                    for (n, b) in fields.drain(..) {
                        istiod_proto::prost::encoding::encode_key(
                            n,
                            istiod_proto::prost::encoding::WireType::LengthDelimited,
                            &mut buf,
                        );
                        istiod_proto::prost::encoding::encode_varint(b.len() as u64, &mut buf);
                        buf.extend_from_slice(&b);
                    }
                    return DiscoveryResponse::decode(&buf[..]).ok();
                }
                Ok(None) => break,
                Err(_) => return None,
            }
        }
        if !client.read(messages).await {
            return None;
        }
    }
}

/// One VM's agent: its stream open (CDS asked, responses ACKed) until
/// `stop` says so. Counts itself in `connected` once answered.
pub async fn vm(server: SocketAddr, i: u32, connected: Arc<AtomicU32>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let ip = vm_ip(i);
    let Ok(tcp) = tokio::net::TcpStream::connect(server).await else { return };
    let _ = tcp.set_nodelay(true);
    let Ok(mut client) = crate::lean::Client::open(tcp, &server.to_string(), ADS).await else { return };
    let id = format!("sidecar~{ip}~vm-{i}.{NAMESPACE}~{NAMESPACE}.svc.cluster.local");
    let n = node(id, &[("NAMESPACE", NAMESPACE), ("AUTO_REGISTER_GROUP", GROUP), ("ISTIO_VERSION", "1.28.0")]);
    if client.send(request(CDS, &[], Some(n), None)).await.is_err() {
        return;
    }
    let mut messages = MessageStream::default();
    let mut counted = false;
    loop {
        tokio::select! {
            r = next_response(&mut client, &mut messages) => match r {
                Some(r) => {
                    if !counted {
                        counted = true;
                        connected.fetch_add(1, Ordering::Relaxed);
                    }
                    if client.send(request(&r.type_url, &[], None, Some(&r))).await.is_err() {
                        return;
                    }
                }
                None => return,
            },
            _ = stop.changed() => return,
        }
    }
}

/// Another proxy, of the `web` namespace, watching [`CLUSTER`]: sends the
/// number of endpoints of each load assignment it is sent.
pub async fn observer(server: SocketAddr, counts: tokio::sync::watch::Sender<usize>) {
    let Ok(tcp) = tokio::net::TcpStream::connect(server).await else { return };
    let Ok(mut client) = crate::lean::Client::open(tcp, &server.to_string(), ADS).await else { return };
    let n = node(
        "sidecar~10.1.0.9~web-0.web~web.svc.cluster.local".into(),
        &[("NAMESPACE", "web"), ("ISTIO_VERSION", "1.28.0"), ("CLUSTER_ID", "Kubernetes")],
    );
    if client.send(request(EDS, &[CLUSTER], Some(n), None)).await.is_err() {
        return;
    }
    let mut messages = MessageStream::default();
    while let Some(r) = next_response(&mut client, &mut messages).await {
        for a in &r.resources {
            if let Ok(cla) = ClusterLoadAssignment::decode(&a.value[..]) {
                let eps: usize = cla.endpoints.iter().map(|l| l.lb_endpoints.len()).sum();
                let _ = counts.send(eps);
            }
        }
        if client.send(request(EDS, &[CLUSTER], None, Some(&r))).await.is_err() {
            return;
        }
    }
}

/// The entries of the run's group in `api`.
pub fn registered(api: &FakeApi) -> usize {
    api.count("workloadentries")
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Figures {
    /// VMs.
    pub vms: u32,
    /// Streams answered.
    pub connected: u32,
    /// Until every entry was in the API server.
    pub registered: Option<Duration>,
    /// Until the observer's load assignment held every VM.
    pub in_eds: Option<Duration>,
    /// From all leaving until every entry was deleted.
    pub deleted: Option<Duration>,
    /// The grace period the server was given.
    pub grace: Duration,
}

/// Connects `vms` VMs at once to `server` and measures (bounded by
/// `limit` per phase).
pub async fn run(api: &FakeApi, server: SocketAddr, vms: u32, grace: Duration, limit: Duration) -> Figures {
    let (eds_tx, mut eds_rx) = tokio::sync::watch::channel(0usize);
    let watcher = tokio::spawn(observer(server, eds_tx));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let connected = Arc::new(AtomicU32::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..vms).map(|i| tokio::spawn(vm(server, i, connected.clone(), stop_rx.clone()))).collect();
    let want = vms as usize;
    let mut registered = None;
    let mut in_eds = None;
    while start.elapsed() < limit && (registered.is_none() || in_eds.is_none()) {
        if registered.is_none() && crate::vms::registered(api) >= want {
            registered = Some(start.elapsed());
        }
        if in_eds.is_none() && *eds_rx.borrow_and_update() >= want {
            in_eds = Some(start.elapsed());
        }
        tokio::select! {
            _ = eds_rx.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
    let connected_n = connected.load(Ordering::Relaxed);
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    let gone = Instant::now();
    let mut deleted = None;
    while gone.elapsed() < limit + grace {
        if crate::vms::registered(api) == 0 {
            deleted = Some(gone.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    watcher.abort();
    Figures { vms, connected: connected_n, registered, in_eds, deleted, grace }
}
