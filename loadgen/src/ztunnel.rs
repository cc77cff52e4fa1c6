//! `loadgen ztunnel`: simulated ztunnels against a running
//! `pilot-discovery` with `PILOT_ENABLE_AMBIENT` (issue #35). Each one
//! opens a delta ADS stream as ztunnel does (node `ztunnel~...`, wildcard
//! `istio.workload.Address` and `istio.security.Authorization`), keeps the
//! workloads it is sent, and ACKs every response. The churn gives pods new
//! addresses in the config directory (each address used once, so a
//! workload showing it can only be showing that change); a ztunnel has
//! converged on a change when it ACKs the response whose workload holds
//! the new address. Every ztunnel must converge on every change.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use hdrhistogram::Histogram;
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};
use istiod_proto::istio::workload::{Address, address};
use istiod_proto::prost::Message;
use istiod_proto::prost_types::Struct;

use istiod_proto::envoy::service::discovery::v3::aggregated_discovery_service::DELTA_AGGREGATED_RESOURCES as DELTA;
use istiod_proto::type_url::{ADDRESS, AUTHORIZATION};

/// The mesh and the run.
#[derive(Debug, Clone)]
pub struct Options {
    /// pilot-discovery's plaintext gRPC address.
    pub server: SocketAddr,
    /// Simulated ztunnels (one per node).
    pub ztunnels: u32,
    /// Pods, spread over the nodes.
    pub pods: u32,
    /// Pods per Service (one file each).
    pub pods_per_service: u32,
    /// Services per namespace.
    pub services_per_namespace: u32,
    /// Pod changes per second.
    pub per_second: f64,
    /// How long to change pods.
    pub churn_for: Duration,
    /// How long to wait for the last changes.
    pub settle: Duration,
    /// How long to wait for every ztunnel to hold every pod.
    pub sync_timeout: Duration,
    /// The config directory the server serves.
    pub dir: PathBuf,
}

/// A pod's place: its namespace, Service, index within the Service.
fn place(o: &Options, pod: u32) -> (u32, u32, u32) {
    let svc = pod / o.pods_per_service;
    (svc / o.services_per_namespace, svc % o.services_per_namespace, pod % o.pods_per_service)
}

fn ip(n: u32) -> String {
    format!("10.{}.{}.{}", 64 + (n >> 16) % 64, (n >> 8) & 0xff, n & 0xff)
}

/// The file of Service `svc` with its pods at `ips`.
fn service_file(o: &Options, svc: u32, ips: &[String]) -> String {
    let (n, s) = (svc / o.services_per_namespace, svc % o.services_per_namespace);
    let mut y = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: svc-{s}, namespace: ns-{n}}}\n\
         spec: {{clusterIP: 10.96.{}.{}, selector: {{app: svc-{s}}}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}\n",
        (svc >> 8) & 0xff,
        svc & 0xff
    );
    for (p, addr) in ips.iter().enumerate() {
        let pod = svc * o.pods_per_service + p as u32;
        y += &format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: svc-{s}-{p}, namespace: ns-{n}, labels: {{app: svc-{s}}}, annotations: {{ambient.istio.io/redirection: enabled}}}}\n\
             spec: {{serviceAccountName: svc-{s}, nodeName: node-{}}}\n\
             status: {{phase: Running, podIP: {addr}, conditions: [{{type: Ready, status: 'True'}}]}}\n",
            pod % o.ztunnels.max(1)
        );
    }
    y
}

fn service_path(o: &Options, svc: u32) -> PathBuf {
    o.dir.join(format!("ns-{}-svc-{}.yaml", svc / o.services_per_namespace, svc % o.services_per_namespace))
}

/// The pods' first addresses, per Service.
fn first_ips(o: &Options) -> Vec<Vec<String>> {
    let services = o.pods / o.pods_per_service.max(1);
    (0..services).map(|svc| (0..o.pods_per_service).map(|p| ip(svc * o.pods_per_service + p)).collect()).collect()
}

/// Writes the mesh: one file per Service with its pods, every pod HBONE
/// (`pods` rounded down to whole Services).
pub fn write_mesh(o: &Options) -> std::io::Result<usize> {
    std::fs::create_dir_all(&o.dir)?;
    let all = first_ips(o);
    for (svc, ips) in all.iter().enumerate() {
        std::fs::write(service_path(o, svc as u32), service_file(o, svc as u32, ips))?;
    }
    Ok(all.len())
}

/// One change: pod `uid` moved to `address` at `at`.
#[derive(Debug, Clone)]
struct Change {
    at: Instant,
    uid: String,
    address: Vec<u8>,
}

/// What the run measured.
#[derive(Debug)]
pub struct Report {
    /// ztunnels that held every pod before the churn.
    pub synced: u32,
    /// From the first connection to the last ztunnel holding every pod.
    pub sync_time: Duration,
    /// Pod changes made.
    pub changes: usize,
    /// (ztunnel, change) pairs converged.
    pub converged: u64,
    /// (ztunnel, change) pairs never converged.
    pub missed: u64,
    /// Change to ACK, over every (ztunnel, change).
    pub latency: Histogram<u64>,
    /// Errors the streams ended with.
    pub errors: Vec<String>,
}

impl Report {
    /// The report as JSON (milliseconds).
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "synced": self.synced,
            "sync_s": self.sync_time.as_secs_f64(),
            "changes": self.changes,
            "converged": self.converged,
            "missed": self.missed,
            "convergence_ms": crate::stats::quantiles_ms(&self.latency),
            "errors": self.errors,
        })
    }
}

/// What the ztunnels share.
struct Shared {
    changes: Mutex<Vec<Arc<Change>>>,
    latency: Mutex<Histogram<u64>>,
    /// Per ztunnel: the changes it converged on.
    done: Mutex<Vec<Vec<bool>>>,
    /// Per ztunnel: workloads held.
    held: Mutex<Vec<usize>>,
    errors: Mutex<Vec<String>>,
    stop: tokio::sync::watch::Receiver<bool>,
}

fn node(i: u32) -> Node {
    let s = crate::run::s;
    let addr = format!("10.200.{}.{}", (i >> 8) & 0xff, i & 0xff);
    Node {
        id: format!("ztunnel~{addr}~ztunnel-{i}.istio-system~istio-system.svc.cluster.local"),
        metadata: Some(Struct {
            fields: [
                ("NAME".to_owned(), s(&format!("ztunnel-{i}"))),
                ("NAMESPACE".to_owned(), s("istio-system")),
                ("INSTANCE_IPS".to_owned(), s(&addr)),
                ("NODE_NAME".to_owned(), s(&format!("node-{i}"))),
            ]
            .into(),
        }),
        ..Default::default()
    }
}

/// One ztunnel's stream, until the run stops or the stream is lost.
async fn ztunnel(i: u32, server: SocketAddr, shared: Arc<Shared>) -> Result<(), String> {
    let tcp = tokio::net::TcpStream::connect(server).await.map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (client, conn) =
        h2::client::Builder::new().initial_window_size(1 << 20).handshake(tcp).await.map_err(|e| format!("h2: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut client = client.ready().await.map_err(|e| format!("h2: {e}"))?;
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{server}{DELTA}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .map_err(|e| e.to_string())?;
    let (resp, mut send) = client.send_request(req, false).map_err(|e| format!("stream: {e}"))?;
    for t in [ADDRESS, AUTHORIZATION] {
        let first = DeltaDiscoveryRequest { type_url: t.into(), node: Some(node(i)), ..Default::default() };
        send.send_data(crate::proxy::frame(first.encode_to_vec()), false).map_err(|e| format!("send: {e}"))?;
    }
    let resp = resp.await.map_err(|e| format!("response: {e}"))?;
    // A refusal comes as headers alone (say, without PILOT_ENABLE_AMBIENT).
    let refused = |h: &http::HeaderMap| {
        h.get("grpc-status").filter(|s| *s != "0").map(|s| {
            let msg = h.get("grpc-message").and_then(|m| m.to_str().ok()).unwrap_or("");
            format!("the server refused the stream: grpc-status {s:?} {msg}")
        })
    };
    if let Some(e) = refused(resp.headers()) {
        return Err(e);
    }
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    // uid -> first address.
    let mut workloads: HashMap<String, Vec<u8>> = HashMap::new();
    let mut stop = shared.stop.clone();
    loop {
        let data = tokio::select! {
            d = body.data() => d,
            _ = stop.changed() => return Ok(()),
        };
        let data = match data {
            None => {
                let trailers = body.trailers().await.ok().flatten().unwrap_or_default();
                return Err(refused(&trailers).unwrap_or_else(|| "the server ended the stream".into()));
            }
            Some(Err(e)) => return Err(format!("read: {e}")),
            Some(Ok(d)) => d,
        };
        let _ = body.flow_control().release_capacity(data.len());
        buf.extend_from_slice(&data);
        while buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf[0] != 0 || len > crate::wire::MAX_FIELD {
                return Err(format!("a message the client does not read (flag {}, {len} bytes)", buf[0]));
            }
            if buf.len() < 5 + len {
                break;
            }
            buf.advance(5);
            let msg = buf.split_to(len).freeze();
            let r = DeltaDiscoveryResponse::decode(msg).map_err(|e| format!("decode: {e}"))?;
            if r.type_url == ADDRESS {
                for res in &r.resources {
                    let Some(any) = &res.resource else { continue };
                    let Ok(a) = Address::decode(&any.value[..]) else { continue };
                    if let Some(address::Type::Workload(w)) = a.r#type {
                        workloads.insert(w.uid, w.addresses.into_iter().next().unwrap_or_default());
                    }
                }
                for gone in &r.removed_resources {
                    workloads.remove(gone);
                }
            }
            let ack = DeltaDiscoveryRequest {
                type_url: r.type_url.clone(),
                response_nonce: r.nonce.clone(),
                ..Default::default()
            };
            send.send_data(crate::proxy::frame(ack.encode_to_vec()), false).map_err(|e| format!("send: {e}"))?;
            let now = Instant::now();
            shared.held.lock().unwrap_or_else(|e| e.into_inner())[i as usize] = workloads.len();
            // Which changes this ACK converges on.
            let changes = shared.changes.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let mut done = shared.done.lock().unwrap_or_else(|e| e.into_inner());
            let mine = &mut done[i as usize];
            mine.resize(changes.len(), false);
            for (k, c) in changes.iter().enumerate() {
                if !mine[k] && workloads.get(&c.uid) == Some(&c.address) {
                    mine[k] = true;
                    let us = now.saturating_duration_since(c.at).as_micros() as u64;
                    let _ = shared.latency.lock().unwrap_or_else(|e| e.into_inner()).record(us.max(1));
                }
            }
        }
    }
}

/// Runs the ztunnels against `o.server`, which serves `o.dir` (written by
/// [`write_mesh`] with the same options), changes pods, and reports.
pub async fn run(o: &Options) -> Report {
    let mut ips = first_ips(o);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let n = o.ztunnels as usize;
    let shared = Arc::new(Shared {
        changes: Mutex::new(Vec::new()),
        latency: Mutex::new(crate::stats::histogram()),
        done: Mutex::new(vec![Vec::new(); n]),
        held: Mutex::new(vec![0; n]),
        errors: Mutex::new(Vec::new()),
        stop,
    });
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..o.ztunnels {
        let shared = shared.clone();
        let server = o.server;
        tasks.push(tokio::spawn(async move {
            if let Err(e) = ztunnel(i, server, shared.clone()).await {
                shared.errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!("ztunnel {i}: {e}"));
            }
        }));
    }
    // Synced: every ztunnel holds every pod.
    let deadline = started + o.sync_timeout;
    let pods = (o.pods / o.pods_per_service.max(1) * o.pods_per_service) as usize;
    let synced = loop {
        let held = shared.held.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let synced = held.iter().filter(|h| **h >= pods).count();
        if synced == n || Instant::now() > deadline {
            break synced;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let sync_time = started.elapsed();
    // Churn: a pod, in turn, gets a new address.
    let period = Duration::from_secs_f64(1.0 / o.per_second.max(0.001));
    let churn_end = Instant::now() + o.churn_for;
    let mut next_ip = o.pods + 1_000_000;
    let mut k = 0u32;
    let mut tick = Instant::now();
    while Instant::now() < churn_end {
        let pod = (k.wrapping_mul(7919)) % o.pods;
        k += 1;
        let (nsi, s, p) = place(o, pod);
        let svc = pod / o.pods_per_service;
        let addr = ip(next_ip);
        next_ip += 1;
        ips[svc as usize][p as usize] = addr.clone();
        let path = service_path(o, svc);
        let tmp = path.with_extension("tmp");
        let bytes: Vec<u8> = addr.split('.').map(|x| x.parse::<u8>().unwrap_or(0)).collect();
        let change = Arc::new(Change {
            at: Instant::now(),
            uid: format!("Kubernetes//Pod/ns-{nsi}/svc-{s}-{p}"),
            address: bytes,
        });
        shared.changes.lock().unwrap_or_else(|e| e.into_inner()).push(change);
        if std::fs::write(&tmp, service_file(o, svc, &ips[svc as usize]))
            .and_then(|()| std::fs::rename(&tmp, &path))
            .is_err()
        {
            shared.errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!("cannot write {}", path.display()));
        }
        tick += period;
        tokio::time::sleep_until(tick.into()).await;
    }
    // Settle: until every ztunnel converged on every change, or the time.
    let made = shared.changes.lock().unwrap_or_else(|e| e.into_inner()).len();
    let settle_end = Instant::now() + o.settle;
    let all = |shared: &Shared| {
        let done = shared.done.lock().unwrap_or_else(|e| e.into_inner());
        done.iter().map(|d| d.iter().filter(|x| **x).count()).sum::<usize>()
    };
    while all(&shared) < made * n && Instant::now() < settle_end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    let converged = all(&shared) as u64;
    let latency = shared.latency.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let errors = shared.errors.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Report {
        synced: synced as u32,
        sync_time,
        changes: made,
        converged,
        missed: (made * n) as u64 - converged,
        latency,
        errors,
    }
}
