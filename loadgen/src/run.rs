//! `loadgen run` (first part): simulated sidecars, one HTTP/2 connection
//! and one state-of-the-world ADS stream each, behaving like Envoy at
//! start-up: CDS and LDS wildcard, then EDS for the EDS clusters received
//! and RDS for the route names in the listeners, ACKing every response
//! with its version and nonce. Each proxy's node is a Pod of the scenario's
//! mesh (id, NAMESPACE, LABELS). It measures connect-to-synced time per
//! proxy. Not yet: delta, churn and convergence, NACKs, reconnects, TLS,
//! server CPU/RSS sampling, HTML.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use istiod_proto::envoy::config::cluster::v3::Cluster;
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::envoy::config::listener::v3::{Listener, filter};
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager,
};
use istiod_proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use istiod_proto::prost::{Message, Name};
use istiod_proto::prost_types::{Struct, Value, value::Kind as V};

use crate::mesh;
use crate::scenario::Scenario;

const ADS: &str = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";

/// What one run measured.
#[derive(Debug, Default)]
pub struct Report {
    /// Proxies started.
    pub proxies: u32,
    /// Proxies whose connection and stream opened.
    pub connected: u32,
    /// Proxies that received CDS, EDS, LDS and RDS.
    pub synced: u32,
    /// Connect-to-synced times in microseconds.
    pub sync_us: Vec<u64>,
    /// Bytes of gRPC messages received.
    pub bytes_received: u64,
    /// Errors, one line each (at most 20 kept).
    pub errors: Vec<String>,
    /// Errors in all.
    pub error_count: u32,
}

fn s(v: &str) -> Value {
    Value { kind: Some(V::StringValue(v.to_owned())) }
}

/// The node proxy `i` presents: a Pod of the scenario's mesh.
pub fn node(sc: &Scenario, i: u32) -> Node {
    let p = i % sc.sidecars.max(1);
    let svc = p % sc.services;
    let (n, name) = mesh::service(sc, svc);
    let ns = mesh::namespace(n);
    let version = if (p / sc.services).is_multiple_of(2) { "v1" } else { "v2" };
    let labels = Struct { fields: [("app".to_owned(), s(&name)), ("version".to_owned(), s(version))].into() };
    Node {
        id: format!("sidecar~{}~{name}-{p}.{ns}~{ns}.svc.cluster.local", mesh::pod_ip(p)),
        metadata: Some(Struct {
            fields: [
                ("NAMESPACE".to_owned(), s(&ns)),
                ("LABELS".to_owned(), Value { kind: Some(V::StructValue(labels)) }),
            ]
            .into(),
        }),
        ..Default::default()
    }
}

fn frame(req: &DiscoveryRequest) -> bytes::Bytes {
    let body = req.encode_to_vec();
    let mut out = BytesMut::with_capacity(5 + body.len());
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out.freeze()
}

fn request(
    node: Option<Node>,
    type_url: String,
    names: Vec<String>,
    ack: Option<&DiscoveryResponse>,
) -> DiscoveryRequest {
    DiscoveryRequest {
        node,
        type_url,
        resource_names: names,
        version_info: ack.map(|r| r.version_info.clone()).unwrap_or_default(),
        response_nonce: ack.map(|r| r.nonce.clone()).unwrap_or_default(),
        ..Default::default()
    }
}

/// The EDS service names of the EDS clusters in a CDS response.
fn eds_names(r: &DiscoveryResponse) -> Vec<String> {
    r.resources
        .iter()
        .filter_map(|a| Cluster::decode(a.value.as_slice()).ok())
        .filter_map(|c| c.eds_cluster_config.map(|e| if e.service_name.is_empty() { c.name } else { e.service_name }))
        .collect()
}

/// The RDS route configuration names of the HTTP connection managers in
/// an LDS response, sorted and unique.
fn rds_names(r: &DiscoveryResponse) -> Vec<String> {
    let mut names: Vec<String> = r
        .resources
        .iter()
        .filter_map(|a| Listener::decode(a.value.as_slice()).ok())
        .flat_map(|l| l.filter_chains)
        .flat_map(|fc| fc.filters)
        .filter_map(|f| match f.config_type {
            Some(filter::ConfigType::TypedConfig(a)) if a.type_url == HttpConnectionManager::type_url() => {
                HttpConnectionManager::decode(a.value.as_slice()).ok()
            }
            _ => None,
        })
        .filter_map(|h| match h.route_specifier {
            Some(http_connection_manager::RouteSpecifier::Rds(r)) => Some(r.route_config_name),
            _ => None,
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// One proxy's result.
struct Outcome {
    connected: bool,
    sync: Option<Duration>,
    bytes: u64,
}

async fn proxy(server: SocketAddr, node: Node, deadline: Instant) -> (Outcome, Option<String>) {
    let mut o = Outcome { connected: false, sync: None, bytes: 0 };
    let started = Instant::now();
    let r = tokio::time::timeout_at(deadline.into(), async {
        let tcp = tokio::net::TcpStream::connect(server).await.map_err(|e| format!("connect: {e}"))?;
        let (client, conn) = h2::client::handshake(tcp).await.map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut client = client.ready().await.map_err(|e| format!("h2: {e}"))?;
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("http://{server}{ADS}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .map_err(|e| e.to_string())?;
        let (resp, mut send) = client.send_request(req, false).map_err(|e| format!("stream: {e}"))?;
        let cds = Cluster::type_url();
        let lds = Listener::type_url();
        let eds = istiod_proto::envoy::config::endpoint::v3::ClusterLoadAssignment::type_url();
        let rds = istiod_proto::envoy::config::route::v3::RouteConfiguration::type_url();
        send.send_data(frame(&request(Some(node), cds.clone(), vec![], None)), false).map_err(|e| e.to_string())?;
        send.send_data(frame(&request(None, lds.clone(), vec![], None)), false).map_err(|e| e.to_string())?;
        let mut body = resp.await.map_err(|e| format!("response: {e}"))?.into_body();
        o.connected = true;
        let mut buf = BytesMut::new();
        // Seen: CDS, LDS; EDS and RDS when their names were asked for.
        let (mut got_cds, mut got_lds, mut want_eds, mut want_rds) = (false, false, None::<bool>, None::<bool>);
        // SotW ACKs of named types repeat the names.
        let (mut eds_asked, mut rds_asked) = (Vec::new(), Vec::new());
        while let Some(data) = body.data().await {
            let data = data.map_err(|e| format!("read: {e}"))?;
            let _ = body.flow_control().release_capacity(data.len());
            buf.extend_from_slice(&data);
            while buf.len() >= 5 {
                let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                if buf.len() < 5 + len {
                    break;
                }
                buf.advance(5);
                let msg = buf.split_to(len);
                o.bytes += len as u64;
                let r = DiscoveryResponse::decode(msg.freeze()).map_err(|e| format!("decode: {e}"))?;
                let ack = |names: Vec<String>| frame(&request(None, r.type_url.clone(), names, Some(&r)));
                if r.type_url == cds {
                    got_cds = true;
                    let names = eds_names(&r);
                    send.send_data(ack(vec![]), false).map_err(|e| e.to_string())?;
                    if want_eds.is_none() {
                        want_eds = Some(names.is_empty());
                        if !names.is_empty() {
                            send.send_data(frame(&request(None, eds.clone(), names.clone(), None)), false)
                                .map_err(|e| e.to_string())?;
                        }
                        eds_asked = names;
                    }
                } else if r.type_url == lds {
                    got_lds = true;
                    let names = rds_names(&r);
                    send.send_data(ack(vec![]), false).map_err(|e| e.to_string())?;
                    if want_rds.is_none() {
                        want_rds = Some(names.is_empty());
                        if !names.is_empty() {
                            send.send_data(frame(&request(None, rds.clone(), names.clone(), None)), false)
                                .map_err(|e| e.to_string())?;
                        }
                        rds_asked = names;
                    }
                } else if r.type_url == eds {
                    want_eds = Some(true);
                    send.send_data(ack(eds_asked.clone()), false).map_err(|e| e.to_string())?;
                } else if r.type_url == rds {
                    want_rds = Some(true);
                    send.send_data(ack(rds_asked.clone()), false).map_err(|e| e.to_string())?;
                }
                if got_cds && got_lds && want_eds == Some(true) && want_rds == Some(true) {
                    o.sync = Some(started.elapsed());
                    return Ok(());
                }
            }
        }
        Err("the server closed the stream before the proxy synced".to_owned())
    })
    .await;
    let err = match r {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(_) => Some("not synced before --duration ran out".to_owned()),
    };
    (o, err)
}

/// Runs `proxies` simulated sidecars against `server` for at most
/// `duration`, `concurrency` connecting at a time.
pub async fn run(sc: &Scenario, server: SocketAddr, proxies: u32, concurrency: usize, duration: Duration) -> Report {
    let deadline = Instant::now() + duration;
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..proxies {
        let node = node(sc, i);
        let gate = gate.clone();
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await;
            proxy(server, node, deadline).await
        });
    }
    let mut report = Report { proxies, ..Report::default() };
    while let Some(r) = tasks.join_next().await {
        let Ok((o, err)) = r else { continue };
        report.connected += u32::from(o.connected);
        report.bytes_received += o.bytes;
        if let Some(d) = o.sync {
            report.synced += 1;
            report.sync_us.push(d.as_micros() as u64);
        }
        if let Some(e) = err {
            report.error_count += 1;
            if report.errors.len() < 20 {
                report.errors.push(e);
            }
        }
    }
    report.sync_us.sort_unstable();
    report
}

impl Report {
    /// `{p50, p90, p99, max, count}` of the sync times in milliseconds.
    pub fn sync_ms(&self) -> serde_json::Value {
        let v = &self.sync_us;
        let q = |f: f64| -> f64 {
            if v.is_empty() {
                return 0.0;
            }
            let i = ((v.len() as f64 * f).ceil() as usize).clamp(1, v.len()) - 1;
            v[i] as f64 / 1000.0
        };
        serde_json::json!({"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": q(1.0), "count": v.len()})
    }

    /// The JSON report.
    pub fn json(&self, scenario: &str) -> serde_json::Value {
        serde_json::json!({
            "scenario": scenario,
            "proxies": self.proxies,
            "delta": false,
            "connected": self.connected,
            "synced": self.synced,
            "sync_ms": self.sync_ms(),
            "bytes_received": self.bytes_received,
            "nacks": 0,
            "errors": self.error_count,
            "error_samples": self.errors,
        })
    }
}
