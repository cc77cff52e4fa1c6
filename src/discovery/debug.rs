//! The debug (`--httpAddr`) and monitoring (`--monitoringAddr`) HTTP
//! endpoints: what the cores say of their proxies, and what the control
//! thread knows of the source and the model.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

use istiod_xds::ads::{DebugQuery, Publisher};
use serde_json::{Value, json};

use super::sources::State;
use crate::control::http::{Request, Response};

pub(super) async fn debug(
    req: Request,
    publisher: &Publisher<crate::generator::MeshInput>,
    ready: &AtomicBool,
    state: &Rc<RefCell<State>>,
) -> Response {
    match req.path.as_str() {
        "/ready" => {
            if ready.load(Ordering::SeqCst) {
                Response::text(200, "ready\n")
            } else {
                Response::text(503, "not ready: no snapshot published yet\n")
            }
        }
        // istiod's AdsClients (pilot/pkg/xds/debug.go `adsz`); with
        // `?proxyID=` only that proxy's connection.
        "/debug/adsz" => {
            let mut clients = clients(publisher).await;
            if let Some(id) = req.param("proxyID").filter(|id| !id.is_empty()) {
                clients.retain(|c| matches(id, c));
                if clients.is_empty() {
                    return not_connected();
                }
            }
            Response::json(&ads_clients(clients))
        }
        // istiod's `connectionsHandler`: AdsClients with only the
        // connection id, the time connected and the peer's address.
        "/debug/connections" => {
            let clients: Vec<Value> = clients(publisher)
                .await
                .into_iter()
                .map(|c| json!({ "connectionId": c["connectionId"], "connectedAt": c["connectedAt"], "address": c["address"] }))
                .collect();
            Response::json(&ads_clients(clients))
        }
        // istiod's `Syncz`: a SyncStatus per proxy, `?namespace=` keeps
        // that namespace's.
        "/debug/syncz" => {
            let namespace = req.param("namespace").unwrap_or("");
            let mut rows: Vec<Value> = publisher
                .query(DebugQuery::Syncz)
                .await
                .into_iter()
                .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                .filter(|r| namespace.is_empty() || r["namespace"] == namespace)
                .map(|mut r| r["status"].take())
                .collect();
            rows.sort_by(|a, b| a["proxy"].as_str().cmp(&b["proxy"].as_str()));
            Response::json(&Value::Array(rows))
        }
        "/debug/config_dump" => match req.param("proxyID").filter(|id| !id.is_empty()) {
            None => missing_proxy_id(),
            Some(id) => {
                match publisher.query(DebugQuery::ConfigDump(id.to_owned())).await.into_iter().find(|v| !v.is_null()) {
                    Some(v) => Response::json(&crate::config_dump::render(&v)),
                    None => not_connected(),
                }
            }
        },
        "/debug/stats" => Response::json(&Value::Array(publisher.query(DebugQuery::Stats).await)),
        // istiod's `configz`: every config object in its Kubernetes form
        // (`kubernetesConfig`, crd.ConvertConfig), by kind then
        // namespace and name.
        "/debug/configz" => Response::json(&configz(&state.borrow().config)),
        // What the source read and refused: counts, rejected documents
        // (file and index, or object and reason), gateway problems.
        "/debug/config_report" => Response::json(&state.borrow().configz),
        "/debug/registryz" => {
            let mesh = state.borrow().mesh.clone();
            let services: Vec<&crate::model::Service> =
                mesh.as_ref().map(|m| m.model.services.values().collect()).unwrap_or_default();
            Response::json(&serde_json::to_value(services).unwrap_or_default())
        }
        "/debug" => Response::text(
            200,
            "/ready\n/debug/adsz\n/debug/connections\n/debug/syncz\n/debug/config_dump?proxyID=\n/debug/configz\n/debug/config_report\n/debug/registryz\n/debug/stats\n",
        ),
        _ => Response::text(404, "not found\n"),
    }
}

/// istiod's `/debug/configz` array.
fn configz(
    (istio, gateway_api): &(
        Vec<istiod_kubewatch::istio::IstioObject>,
        Vec<istiod_kubewatch::gateway_api::GatewayApiObject>,
    ),
) -> Value {
    let mut items: Vec<Value> =
        istio.iter().map(|o| &o.raw).chain(gateway_api.iter().map(|o| &o.raw)).filter_map(|r| r.value()).collect();
    let key = |v: &Value| {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("").to_owned();
        (s("/apiVersion"), s("/kind"), s("/metadata/namespace"), s("/metadata/name"))
    };
    items.sort_by_cached_key(key);
    Value::Array(items)
}

/// Every core's connections, sorted by connection id.
async fn clients(publisher: &Publisher<crate::generator::MeshInput>) -> Vec<Value> {
    let cores = publisher.query(DebugQuery::Adsz).await;
    let mut clients: Vec<Value> =
        cores.iter().flat_map(|c| c["clients"].as_array().cloned().unwrap_or_default()).collect();
    clients.sort_by(|a, b| a["connectionId"].as_str().cmp(&b["connectionId"].as_str()));
    clients
}

/// istiod's `AdsClients`: `totalClients`, and `clients` unless empty.
fn ads_clients(clients: Vec<Value>) -> Value {
    let mut out = json!({ "totalClients": clients.len() });
    if !clients.is_empty() {
        out["clients"] = Value::Array(clients);
    }
    out
}

/// Whether `proxyID` names client row `c` (istiod's `getProxyConnection`).
fn matches(id: &str, c: &Value) -> bool {
    istiod_xds::ads::proxy_id_matches(
        id,
        c["connectionId"].as_str().unwrap_or(""),
        c["istiodRs"]["node"].as_str().unwrap_or(""),
    )
}

/// istiod's answers (`debug.go` `errorHandler`) when a per-proxy path has
/// no `proxyID`, and when no connection matches it.
fn missing_proxy_id() -> Response {
    Response::text(400, "You must provide a proxyID in the query string\n")
}

fn not_connected() -> Response {
    Response::text(404, "Proxy not connected to this Pilot instance. It may be connected to another instance.\n")
}

/// What the debug handlers read: the cores, readiness, the source state.
pub(super) type DebugContext<'a> = (&'a Publisher<crate::generator::MeshInput>, &'a AtomicBool, &'a Rc<RefCell<State>>);

pub(super) async fn monitoring(
    req: Request,
    (publisher, ready, state): DebugContext<'_>,
    ca: Option<&crate::ca::CaServer>,
    webhooks: &crate::webhook::Webhooks,
    debug_on_monitoring: bool,
) -> Response {
    // istiod's monitoring mux: /metrics, and /version with its
    // `BuildInfo.String()`.
    if req.path == "/version" {
        return Response::text(200, crate::version::BUILD.short());
    }
    // The debug handlers (pilot/pkg/xds/debug.go AddDebugHandlers, with
    // ENABLE_DEBUG_ON_HTTP), behind allowAuthenticatedOrLocalhost: a
    // caller on loopback is served; any other gets istiod's 401 (istiod
    // would authenticate it as an xDS client; istiod-rs does not yet).
    if req.path == "/debug" || req.path.starts_with("/debug/") {
        if !debug_on_monitoring {
            return Response::text(404, "not found\n");
        }
        if !req.peer.is_some_and(|p| p.ip().is_loopback()) {
            tracing::warn!(target: "default", peer = ?req.peer, path = %req.path, "debug endpoint: caller not on loopback; refused");
            return Response::text(401, "");
        }
        return debug(req, publisher, ready, state).await;
    }
    if req.path != "/metrics" {
        return Response::text(404, "not found\n");
    }
    let stats = publisher.query(DebugQuery::Stats).await;
    let mut out = istiod_xds::metrics::Exposition::new();
    istiod_xds::metrics::collect(&mut out);
    crate::version::collect_metrics(&crate::version::BUILD, &mut out);
    crate::control::metrics::collect(&mut out);
    // The push context's gauges, from the model last published (counted
    // when scraped, not at every change).
    let mesh_stats = state.borrow().mesh.as_ref().map(|m| m.model.stats()).unwrap_or_default();
    crate::control::metrics::collect_mesh(&mesh_stats, &mut out);
    // istiod's `recordXDSClients`: connected proxies by their Istio version;
    // a version seen once keeps its series, at 0 when none is connected.
    let mut versions: std::collections::BTreeMap<String, u64> =
        istiod_xds::metrics::versions_seen().into_iter().map(|v| (v, 0)).collect();
    for s in &stats {
        for (v, n) in s["versions"].as_object().into_iter().flatten() {
            *versions.entry(v.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
    }
    out.gauge(
        "pilot_xds",
        "Number of endpoints connected to this pilot using XDS.",
        versions.into_iter().map(|(v, n)| (istiod_xds::metrics::label("version", v), n as f64)),
    );
    if let Some(ca) = ca {
        ca.collect_metrics(&mut out);
    }
    webhooks.collect_metrics(&mut out);
    // Go's process collector: CPU, memory, file descriptors, start time.
    static PROCESS: std::sync::LazyLock<prometheus::process_collector::ProcessCollector> =
        std::sync::LazyLock::new(prometheus::process_collector::ProcessCollector::for_self);
    out.extend(prometheus::core::Collector::collect(&*PROCESS));
    Response { status: 200, content_type: "text/plain; version=0.0.4; charset=utf-8", body: out.encode() }
}
