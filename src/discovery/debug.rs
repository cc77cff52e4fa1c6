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
        "/debug/adsz" => {
            let cores = publisher.query(DebugQuery::Adsz).await;
            let clients: Vec<Value> =
                cores.iter().flat_map(|c| c["clients"].as_array().cloned().unwrap_or_default()).collect();
            Response::json(&json!({ "totalClients": clients.len(), "clients": clients }))
        }
        "/debug/syncz" => {
            let rows: Vec<Value> = publisher
                .query(DebugQuery::Syncz)
                .await
                .into_iter()
                .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                .collect();
            Response::json(&Value::Array(rows))
        }
        "/debug/config_dump" => match req.param("proxyID") {
            None => Response::text(400, "proxyID is required\n"),
            Some(id) => {
                match publisher.query(DebugQuery::ConfigDump(id.to_owned())).await.into_iter().find(|v| !v.is_null()) {
                    Some(v) => Response::json(&crate::config_dump::render(&v)),
                    None => Response::text(404, format!("proxy {id} is not connected\n")),
                }
            }
        },
        "/debug/stats" => Response::json(&Value::Array(publisher.query(DebugQuery::Stats).await)),
        "/debug/configz" => Response::json(&state.borrow().configz),
        "/debug/registryz" => {
            let mesh = state.borrow().mesh.clone();
            let services: Vec<&crate::model::Service> =
                mesh.as_ref().map(|m| m.model.services.values().collect()).unwrap_or_default();
            Response::json(&serde_json::to_value(services).unwrap_or_default())
        }
        "/debug" => Response::text(
            200,
            "/ready\n/debug/adsz\n/debug/syncz\n/debug/config_dump?proxyID=\n/debug/configz\n/debug/registryz\n/debug/stats\n",
        ),
        _ => Response::text(404, "not found\n"),
    }
}

pub(super) async fn monitoring(
    req: Request,
    publisher: &Publisher<crate::generator::MeshInput>,
    ca: Option<&crate::ca::CaServer>,
    webhooks: &crate::webhook::Webhooks,
) -> Response {
    if req.path != "/metrics" {
        return Response::text(404, "not found\n");
    }
    let stats = publisher.query(DebugQuery::Stats).await;
    let sum = |k: &str| stats.iter().map(|s| s[k].as_u64().unwrap_or(0)).sum::<u64>();
    let mut out = istiod_xds::metrics::render();
    out.push_str(&crate::control::metrics::render());
    out.push_str("# HELP pilot_xds Number of endpoints connected to this pilot using XDS.\n# TYPE pilot_xds gauge\n");
    out.push_str(&format!("pilot_xds {}\n", sum("streams")));
    out.push_str("# HELP pilot_total_xds_rejects Total number of XDS responses from pilot rejected by proxy.\n# TYPE pilot_total_xds_rejects counter\n");
    out.push_str(&format!("pilot_total_xds_rejects {}\n", sum("nacks")));
    if let Some(ca) = ca {
        out.push_str(&ca.render_metrics());
    }
    out.push_str(&webhooks.render_metrics());
    Response { status: 200, content_type: "text/plain; version=0.0.4", body: out }
}
