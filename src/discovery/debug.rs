//! The debug (`--httpAddr`) and monitoring (`--monitoringAddr`) HTTP
//! endpoints: what the cores say of their proxies, and what the control
//! thread knows of the source and the model.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use istiod_xds::ads::{DebugQuery, Publisher};
use serde_json::{Value, json};

use super::debugz::Connected;
use super::sources::State;
use crate::control::http::{Request, Response};

/// What the debug handlers read: the cores, readiness, the source state,
/// and the settings some handlers follow.
pub(super) struct Debug {
    pub(super) publisher: Publisher<istiod_mesh::generator::MeshInput>,
    pub(super) ready: Arc<AtomicBool>,
    /// Set on SIGTERM: `/ready` answers 503 while the connections drain.
    pub(super) draining: Arc<AtomicBool>,
    pub(super) state: Rc<RefCell<State>>,
    /// `CLUSTER_ID` (the endpoint shards' key).
    pub(super) cluster_id: String,
    /// `UNSAFE_ENABLE_ADMIN_ENDPOINTS`: `/debug/force_disconnect` exists.
    pub(super) unsafe_admin: bool,
    /// `ENABLE_DEBUG_ON_HTTP`: the debug handlers are served over HTTP
    /// (8080 and 15014) at all.
    pub(super) on_http: bool,
    /// `ENABLE_DEBUG_ENDPOINT_AUTH`: an authenticated caller outside the
    /// root namespace is limited to its namespace.
    pub(super) endpoint_auth: bool,
    /// `DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES`: callers of these
    /// namespaces reach every path (their per-proxy lookups stay in their
    /// namespace over HTTP, as istiod's `getDebugConnection`; over xDS
    /// syncz and config_dump see every namespace, `callerNamespaceFilter`).
    pub(super) allowed_namespaces: Vec<String>,
    /// The authenticators of xDS and the CA, for debug callers not on
    /// loopback.
    pub(super) authn: Option<Arc<istiod_ca::CaServer>>,
    /// `--profile`: `/debug/pprof/` is served.
    pub(super) profile: bool,
    /// The control thread's input (`/debug/adsz?push=true` asks it to
    /// push everything).
    pub(super) updates: super::sources::Tx,
    /// `--domain`: what-if builds its model with it.
    pub(super) domain: String,
    /// `ISTIOD_RS_WHATIF_MAX_CLASSES`.
    pub(super) whatif_max_classes: usize,
}

/// An HTTP request on the debug port (8080) or the monitoring port's debug
/// paths: `/ready` for anyone; the debug handlers when
/// `ENABLE_DEBUG_ON_HTTP`, behind [`authorize`].
pub(super) async fn serve_http(req: Request, d: &Debug) -> Response {
    if req.path != "/debug" && !req.path.starts_with("/debug/") {
        return debug(req, d, None).await;
    }
    if !d.on_http {
        return Response::text(404, "404 page not found\n");
    }
    match authorize(&req, d).await {
        Ok(caller) => debug(req, d, caller.as_deref()).await,
        Err(refusal) => refusal,
    }
}

/// istiod's `allowAuthenticatedOrLocalhost` (`debug.go`): a caller on
/// loopback is served whole; any other must authenticate as an xDS client
/// does (a bearer token: `JWT_RULE` or a TokenReview), or gets 401. With
/// `ENABLE_DEBUG_ENDPOINT_AUTH` (`AuthorizeDebugRequest`) a caller of the
/// root namespace is served whole, one of another namespace only
/// `config_dump`, `edsz` and `ndsz` for its namespace's proxies (the
/// namespace is returned), and the rest get 403.
async fn authorize(req: &Request, d: &Debug) -> Result<Option<String>, Response> {
    if req.peer.is_some_and(|p| p.ip().is_loopback()) {
        return Ok(None);
    }
    let ids = match &d.authn {
        Some(ca) => {
            let info = istiod_xds::grpc::ConnInfo { peer: req.peer, ..Default::default() };
            match ca.authenticate(&info, req.bearer.as_deref()) {
                istiod_ca::Authn::Ids(ids) => Some(ids),
                istiod_ca::Authn::Refused(_) => None,
                istiod_ca::Authn::Review(answer) => match ca.reviewed(answer.recv().await, req.peer) {
                    istiod_ca::Reviewed::Ids(ids) => Some(ids),
                    _ => None,
                },
            }
        }
        None => None,
    };
    let Some(ids) = ids else {
        tracing::error!(target: "default", peer = ?req.peer, path = %req.path, "Failed to authenticate debug request");
        return Err(Response::text(401, ""));
    };
    if !d.endpoint_auth {
        return Ok(None);
    }
    let namespace = ids.iter().find_map(|id| istiod_ca::spiffe_ns_sa(id)).map(|(ns, _)| ns);
    let path = req.path.trim_start_matches("/debug/");
    match namespace {
        Some(ns) if ns == d.mesh().root_namespace => Ok(None),
        Some(ns)
            if d.allowed_namespaces.iter().any(|a| a == ns)
                || istiod_mesh::generator::NAMESPACE_DEBUGGERS.contains(&path) =>
        {
            Ok(Some(ns.to_owned()))
        }
        _ => {
            tracing::warn!(target: "default", identities = ?ids, path = %req.path, "Unauthorized debug request");
            Err(Response::text(403, ""))
        }
    }
}

/// istiod's debug handlers (`debug.go` AddDebugHandlers) with their help
/// texts, as `/debug` and `/debug/list` list them, and the two of
/// istiod-rs's own.
const HANDLERS: &[(&str, &str)] = &[
    ("/debug/adsz", "Status and debug interface for ADS"),
    ("/debug/ambientz", "Ambient workloads, services and policies (PILOT_ENABLE_AMBIENT)"),
    ("/debug/adsz?push=true", "Initiates push of the current state to all connected endpoints"),
    ("/debug/authorizationz", "Internal authorization policies"),
    ("/debug/cachez", "Info about the internal XDS caches"),
    ("/debug/cachez?sizes=true", "Info about the size of the internal XDS caches"),
    ("/debug/cachez?clear=true", "Clear the XDS caches"),
    ("/debug/config_dump", "ConfigDump in the form of the Envoy admin config dump API for passed in proxyID"),
    ("/debug/clusterz", "List remote clusters where istiod reads endpoints"),
    ("/debug/config_report", "What the config source read and refused (istiod-rs)"),
    ("/debug/configz", "Debug support for config"),
    ("/debug/connections", "Info about the connected XDS clients"),
    ("/debug/ecdsz", "Status and debug interface for ECDS"),
    ("/debug/edsz", "Status and debug interface for EDS"),
    ("/debug/endpointShardz", "Info about the endpoint shards"),
    ("/debug/explain", "Which objects a resource served to a proxy was built from, and why it sees it (istiod-rs)"),
    ("/debug/endpointz", "Obsolete, use endpointShardz"),
    ("/debug/inject", "Active inject template"),
    ("/debug/instancesz", "Debug support for service instances"),
    ("/debug/list", "List all supported debug commands in json"),
    ("/debug/mesh", "Active mesh config"),
    ("/debug/ndsz", "Status and debug interface for NDS"),
    ("/debug/networkz", "List cross-network gateways"),
    ("/debug/push_status", "Last PushContext Details"),
    ("/debug/pushcontext", "Debug support for current push context"),
    ("/debug/registryz", "Debug support for registry"),
    ("/debug/resourcesz", "Debug support for watched resources"),
    ("/debug/sidecarz", "Debug sidecar scope for a proxy"),
    ("/debug/stats", "Per-core push, cache and convergence counters (istiod-rs)"),
    ("/debug/syncz", "Synchronization status of all Envoys connected to this Pilot instance"),
    ("/debug/telemetryz", "Debug Telemetry configuration"),
    ("/debug/whatif", "What a config change would do before it is applied: POST the objects (istiod-rs)"),
];

const FORCE_DISCONNECT: (&str, &str) = ("/debug/force_disconnect", "Disconnects a proxy from this Pilot");

impl Debug {
    /// The mesh configuration of the model last published (the defaults
    /// before one is).
    pub(super) fn mesh(&self) -> Arc<istiod_mesh::meshconfig::MeshSettings> {
        self.state.borrow().mesh.as_ref().map(|m| m.model.mesh.clone()).unwrap_or_default()
    }

    /// The handlers served, sorted by path.
    fn handlers(&self) -> Vec<(&'static str, &'static str)> {
        let mut h = HANDLERS.to_vec();
        if self.unsafe_admin {
            h.push(FORCE_DISCONNECT);
        }
        if self.profile {
            h.extend(PPROF);
        }
        h.sort();
        h
    }
}

/// istiod's `cachez`: the cached resources' names by type URL; with
/// `?sizes=` their bytes by type and in total (istiod's `ByteCount`); with
/// `?clear=` the caches emptied.
async fn cachez(req: &Request, publisher: &istiod_xds::ads::Publisher<istiod_mesh::generator::MeshInput>) -> Response {
    if req.param("clear").is_some_and(|v| !v.is_empty()) {
        publisher.query(DebugQuery::ClearCache).await;
        return Response::text(200, "Cache cleared\n");
    }
    let rows = publisher.query(DebugQuery::Cachez).await;
    let rows = rows.iter().flat_map(|core| core.as_array().cloned().unwrap_or_default());
    if req.param("sizes").is_some_and(|v| !v.is_empty()) {
        let mut sizes: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
        let mut total = 0;
        for r in rows {
            let n = r[2].as_u64().unwrap_or(0);
            *sizes.entry(r[0].as_str().unwrap_or_default().to_owned()).or_default() += n;
            total += n;
        }
        let mut out: serde_json::Map<String, Value> =
            sizes.into_iter().map(|(t, n)| (t, json!(byte_count(n)))).collect();
        out.insert("total".into(), json!(byte_count(total)));
        return Response::json(&Value::Object(out));
    }
    let mut names: std::collections::BTreeMap<String, Vec<Value>> = std::collections::BTreeMap::new();
    for r in rows {
        names.entry(r[0].as_str().unwrap_or_default().to_owned()).or_default().push(r[1].clone());
    }
    Response::json(&json!(names))
}

/// istiod's `ByteCount`: `999B`, `1.5kB`, `2.0MB` (powers of 1000).
fn byte_count(b: u64) -> String {
    if b < 1000 {
        return format!("{b}B");
    }
    let (mut div, mut exp) = (1000u64, 0);
    let mut n = b / 1000;
    while n >= 1000 {
        div *= 1000;
        exp += 1;
        n /= 1000;
    }
    format!("{:.1}{}B", b as f64 / div as f64, ['k', 'M', 'G', 'T', 'P', 'E'][exp])
}

/// The `--profile` handlers, with istiod's descriptions.
const PPROF: [(&str, &str); 3] = [
    ("/debug/pprof/", "Displays pprof index"),
    ("/debug/pprof/cmdline", "The command line invocation of the current program"),
    ("/debug/pprof/profile", "CPU profile"),
];

/// `/ready`: 200 once a snapshot is published, 503 before and while
/// draining. Answered by the debug port's own thread (see
/// [`crate::control::http::spawn`]), so a busy control thread does not
/// fail kubelet's probe.
pub(super) fn readiness(ready: &AtomicBool, draining: &AtomicBool) -> Response {
    if draining.load(Ordering::SeqCst) {
        Response::text(503, "not ready: shutting down\n")
    } else if ready.load(Ordering::SeqCst) && !super::remotes::initially_synced() {
        // istiod is ready once its remote clusters synced (or timed out).
        Response::text(503, "not ready: remote clusters syncing\n")
    } else if ready.load(Ordering::SeqCst) {
        Response::text(200, "ready\n")
    } else {
        Response::text(503, "not ready: no snapshot published yet\n")
    }
}

/// Answers a debug request. `caller` is the namespace a caller outside the
/// root namespace is limited to (debug over xDS with
/// `ENABLE_DEBUG_ENDPOINT_AUTH`, istiod's `CallerNamespaceKey`): the
/// per-proxy handlers find only that namespace's proxies.
pub(super) async fn debug(req: Request, d: &Debug, caller: Option<&str>) -> Response {
    let publisher = &d.publisher;
    let state = &d.state;
    let model = || state.borrow().mesh.as_ref().map(|m| m.model.clone());
    // istiod's getDebugConnection: a caller outside the root namespace (one
    // of DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES too) reaches its own
    // namespace's proxies only, whatever the path.
    if let (Some(ns), Some(id)) = (caller, req.param("proxyID").filter(|id| !id.is_empty()))
        && proxy_class(publisher, id).await.is_some_and(|c| *c.namespace != *ns)
    {
        return not_connected();
    }
    match req.path.as_str() {
        "/ready" => readiness(&d.ready, &d.draining),
        // istiod's `--profile` handlers (Go's net/http/pprof): CPU
        // profiles and the command line.
        path if d.profile && (path == "/debug/pprof" || path.starts_with("/debug/pprof/")) => {
            crate::control::pprof::serve(&req).await.unwrap_or_else(|| Response::text(404, "404 page not found\n"))
        }
        // istiod's AdsClients (pilot/pkg/xds/debug.go `adsz`); with
        // `?proxyID=` only that proxy's connection.
        // istiod's `handlePushRequest`: a push of everything to every proxy.
        "/debug/adsz" if req.param("push").is_some_and(|p| !p.is_empty()) => {
            let n = clients(publisher).await.len();
            let _ = d.updates.send(crate::control::Input {
                reasons: istiod_xds_api::Reasons::one("debug"),
                full: true,
                ..Default::default()
            });
            Response::text(200, format!("Pushed to {n} servers\n"))
        }
        "/debug/cachez" => cachez(&req, publisher).await,
        // Beyond istiod: what a config change would do (whatif.rs).
        crate::control::http::WHATIF_PATH => {
            let (objects, namespace_filter, ambient) = {
                let s = state.borrow();
                // (The index follows the objects; what it was given since
                // they were published changed nothing served. Its mesh
                // settings are taken from the served model.)
                let ambient = s.ambient.as_ref().map(|a| (a.index.clone(), a.settings(&d.domain, &Default::default())));
                (s.published.clone(), s.namespace_filter, ambient)
            };
            let server = super::whatif::Server {
                publisher,
                objects,
                namespace_filter,
                ambient: std::cell::Cell::new(ambient),
                domain: &d.domain,
                cluster_id: &d.cluster_id,
                max_classes: d.whatif_max_classes,
            };
            super::whatif::answer(&req, &server, caller).await
        }
        // istiod's `resourcez`: the config kinds read.
        "/debug/resourcesz" => Response::json(&Value::Array(
            istiod_config::objects::KINDS[6..]
                .iter()
                .filter(|(g, _, k, _)| *k != "ConfigMap" && istiod_config::objects::reads(g, k))
                .map(|(g, v, k, _)| json!({"group": g, "version": v, "kind": k}))
                .collect(),
        )),
        // istiod's `PushContextDebug`.
        "/debug/pushcontext" => Response::json(&model().map_or(json!({}), |m| {
            json!({
                "AuthorizationPolicies": super::debugz::authorizationz(&m)["authorization_policies"],
                "NetworkGateways": super::debugz::networkz(&m),
                "UnresolvedGateways": [],
            })
        })),
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
        // that namespace's (a caller allowed here sees every namespace's).
        "/debug/syncz" => {
            let namespace = req.param("namespace").filter(|n| !n.is_empty());
            let mut rows: Vec<Value> =
                syncz_rows(publisher, namespace).await.into_iter().map(|mut r| r["status"].take()).collect();
            rows.sort_by(|a, b| a["proxy"].as_str().cmp(&b["proxy"].as_str()));
            Response::json(&Value::Array(rows))
        }
        // istiod's `ConfigDump`, and `edsz`/`ndsz`/`ecdsz`
        // (`typedConfigDumpHandler`: the dump of one type).
        path @ ("/debug/config_dump" | "/debug/edsz" | "/debug/ndsz" | "/debug/ecdsz") => {
            let Some(id) = req.param("proxyID").filter(|id| !id.is_empty()) else { return missing_proxy_id() };
            let types = match path {
                "/debug/edsz" => "eds",
                "/debug/ndsz" => "nds",
                "/debug/ecdsz" => "ecds",
                _ => req.param("types").unwrap_or(""),
            };
            match config_dump(publisher, id, caller, req.query.iter().any(|(k, _)| k == "include_eds"), types).await {
                Some(dump) => Response::json(&super::config_dump::message_json(&dump)),
                None => not_connected(),
            }
        }
        "/debug/sidecarz" => {
            let Some(id) = req.param("proxyID").filter(|id| !id.is_empty()) else { return missing_proxy_id() };
            match (proxy_class(publisher, id).await, model()) {
                (Some(class), Some(m)) => Response::json(&super::debugz::sidecarz(&m, &class)),
                _ => not_connected(),
            }
        }
        "/debug/telemetryz" => {
            let Some(m) = model() else { return Response::json(&json!({})) };
            match req.param("proxyID").filter(|id| !id.is_empty()) {
                None => Response::json(&super::debugz::telemetryz(&m)),
                Some(id) => match proxy_class(publisher, id).await {
                    Some(class) => Response::json(&super::debugz::telemetryz_for(&m, &class)),
                    None => not_connected(),
                },
            }
        }
        // Beyond istiod: which objects a served resource was built from,
        // and why the proxy sees it (src/discovery/debugz.rs `explain`).
        "/debug/explain" => {
            let Some(id) = req.param("proxyID").filter(|id| !id.is_empty()) else { return missing_proxy_id() };
            let (Some(type_url), Some(name)) = (req.param("type"), req.param("name")) else {
                return Response::text(400, "You must provide type and name in the query string\n");
            };
            // istiod's short types (cds, eds, lds, rds, sds) or a type URL.
            let Some(&kind) = super::config_dump::kinds_of(type_url).first() else {
                return Response::text(400, format!("unknown type {type_url:?}\n"));
            };
            match (proxy_class(publisher, id).await, model()) {
                (Some(class), Some(m)) => {
                    let state = state.borrow();
                    Response::json(&super::debugz::explain(&m, &state.objects.istio, &class, kind, name))
                }
                _ => not_connected(),
            }
        }
        "/debug/ambientz" => Response::json(
            &state.borrow().ambient.as_ref().map_or(json!({"workloads": [], "services": [], "policies": []}), |a| {
                istiod_ambient::describe(&a.index)
            }),
        ),
        // istiod answers 400 without a secret controller (no API server).
        "/debug/clusterz" => match state.borrow().remotes.as_ref() {
            Some(r) => Response::json(&r.clusterz(model().is_some())),
            None => Response::text(400, ""),
        },
        "/debug/networkz" => Response::json(&model().map_or(json!([]), |m| super::debugz::networkz(&m))),
        "/debug/authorizationz" => Response::json(&model().map_or(json!({}), |m| super::debugz::authorizationz(&m))),
        "/debug/endpointz" | "/debug/endpointShardz" => {
            Response::json(&model().map_or(json!({}), |m| super::debugz::endpoint_shardz(&m, &d.cluster_id)))
        }
        "/debug/instancesz" => {
            let proxies = proxies(publisher).await;
            Response::json(&model().map_or(json!({}), |m| super::debugz::instancesz(&m, &proxies)))
        }
        "/debug/push_status" => {
            let proxies = proxies(publisher).await;
            Response::json(&model().map_or(json!({}), |m| super::debugz::push_status(&m, &proxies)))
        }
        "/debug/mesh" => Response::json(
            &model()
                .map_or_else(|| istiod_mesh::meshconfig::MeshSettings::default().debug_json(), |m| m.mesh.debug_json()),
        ),
        // istiod's `injectTemplateHandler`: the injection templates by name.
        "/debug/inject" => {
            let webhooks = state.borrow().webhooks.clone();
            let injector = webhooks.and_then(|w| w.injector.borrow().clone());
            match injector {
                Some(i) => Response::json(&json!(i.raw_templates())),
                None => Response::text(404, ""),
            }
        }
        "/debug/force_disconnect" if d.unsafe_admin => {
            let Some(id) = req.param("proxyID").filter(|id| !id.is_empty()) else { return missing_proxy_id() };
            // One proxy across the cores, as istiod's `getProxyConnection`
            // stops the first match.
            let ended: u64 = publisher
                .query_until(DebugQuery::Disconnect(id.to_owned()), |v| v.as_u64().unwrap_or(0) > 0)
                .await
                .iter()
                .filter_map(Value::as_u64)
                .sum();
            if ended == 0 { not_connected() } else { Response::text(200, "OK") }
        }
        "/debug/stats" => Response::json(&Value::Array(publisher.query(DebugQuery::Stats).await)),
        // istiod's `configz`: every config object in its Kubernetes form
        // (`kubernetesConfig`, crd.ConvertConfig), by kind then
        // namespace and name.
        "/debug/configz" => Response::json(&configz(&state.borrow().objects)),
        // What the source read and refused: counts, rejected documents
        // (file and index, or object and reason), gateway problems.
        "/debug/config_report" => Response::json(&state.borrow().configz),
        "/debug/registryz" => {
            let mesh = state.borrow().mesh.clone();
            let services: Vec<&istiod_mesh::model::Service> =
                mesh.as_ref().map(|m| m.model.services.values().map(|s| &**s).collect()).unwrap_or_default();
            Response::json(&serde_json::to_value(services).unwrap_or_default())
        }
        // istiod's `list`: the handlers' names, without `list` itself.
        "/debug/list" => {
            let names: Vec<&str> =
                d.handlers().iter().map(|(p, _)| p.trim_start_matches("/debug/")).filter(|n| *n != "list").collect();
            Response::json(&json!(names))
        }
        // istiod's index page (`Debug`, indexTmpl): a table of the handlers.
        "/debug" => {
            let rows: String = d
                .handlers()
                .iter()
                .map(|(p, help)| format!("\t<tr>\n\t<td><a href='{p}'>{p}</a></td><td>{help}</td>\n\t</tr>\n"))
                .collect();
            Response {
                status: 200,
                content_type: "text/html; charset=utf-8",
                body: format!(
                    "<html>\n<head>\n<title>Pilot Debug Console</title>\n</head>\n<body>\n<table id=\"endpoints\">\n\
                     <tr><th>Endpoint</th><th>Description</th></tr>\n{rows}</table>\n</body>\n</html>\n"
                )
                .into(),
            }
        }
        _ => Response::text(404, "404 page not found\n"),
    }
}

/// Every core's syncz rows (`namespace`, `status`, `sent_unix_us`), only
/// those of `namespace` when one is given.
pub(super) async fn syncz_rows(
    publisher: &Publisher<istiod_mesh::generator::MeshInput>,
    namespace: Option<&str>,
) -> Vec<Value> {
    publisher
        .query(DebugQuery::Syncz)
        .await
        .into_iter()
        .flat_map(|v| v.as_array().cloned().unwrap_or_default())
        .filter(|r| namespace.is_none_or(|ns| r["namespace"] == ns))
        .collect()
}

/// The dump of the proxy `id` names (istiod's `connectionConfigDump`, or
/// the resources of `types`), unless no proxy of the caller's namespace
/// matches.
pub(super) async fn config_dump(
    publisher: &Publisher<istiod_mesh::generator::MeshInput>,
    id: &str,
    caller: Option<&str>,
    include_eds: bool,
    types: &str,
) -> Option<istiod_proto::envoy::admin::v3::ConfigDump> {
    let answer = publisher.query(DebugQuery::ConfigDump(id.to_owned())).await.into_iter().find(|v| !v.is_null())?;
    if caller.is_some_and(|ns| answer["namespace"] != ns) {
        return None;
    }
    let kinds = super::config_dump::kinds_of(types);
    if !types.is_empty() && kinds.is_empty() {
        // Types istiod-rs does not serve (NDS): an empty dump.
        return Some(Default::default());
    }
    Some(super::config_dump::build(&answer, include_eds, &kinds))
}

/// The connected proxies (every core's).
pub(super) async fn proxies(publisher: &Publisher<istiod_mesh::generator::MeshInput>) -> Vec<Connected> {
    publisher
        .query(DebugQuery::Proxies)
        .await
        .iter()
        .flat_map(|core| core.as_array().cloned().unwrap_or_default())
        .filter_map(|p| {
            Some(Connected {
                name: p[0].as_str()?.to_owned(),
                addresses: p[1].as_str()?.split(',').map(str::to_owned).collect(),
                sidecar: p[2] == "sidecar",
            })
        })
        .collect()
}

/// The class of the proxy `id` names, from its `/debug/adsz` row.
async fn proxy_class(
    publisher: &Publisher<istiod_mesh::generator::MeshInput>,
    id: &str,
) -> Option<istiod_mesh::node::ProxyClass> {
    let clients = clients(publisher).await;
    let c = clients.iter().find(|c| matches(id, c))?;
    istiod_mesh::node::ProxyClass::from_detail(&c["istiodRs"]["class"])
}

/// istiod's `/debug/configz` array.
fn configz(objects: &istiod_config::objects::Objects) -> Value {
    let (istio, gateway_api) = (&objects.istio, &objects.gateway_api);
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
async fn clients(publisher: &Publisher<istiod_mesh::generator::MeshInput>) -> Vec<Value> {
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

pub(super) async fn monitoring(
    req: Request,
    d: &Debug,
    ca: Option<&istiod_ca::CaServer>,
    webhooks: &istiod_webhook::Webhooks,
) -> Response {
    // istiod's monitoring mux: /metrics, and /version with its
    // `BuildInfo.String()`.
    if req.path == "/version" {
        return Response::text(200, crate::version::BUILD.short());
    }
    // The debug handlers (pilot/pkg/xds/debug.go AddDebugHandlers, with
    // ENABLE_DEBUG_ON_HTTP), behind allowAuthenticatedOrLocalhost.
    if req.path == "/debug" || req.path.starts_with("/debug/") {
        return serve_http(req, d).await;
    }
    let (publisher, state) = (&d.publisher, &d.state);
    if req.path != "/metrics" {
        return Response::text(404, "not found\n");
    }
    // METRICS_LOCALHOST_ACCESS_ONLY (istiod's metricsMiddleware).
    let local = req.peer.is_none_or(|p| p.ip().to_canonical().is_loopback());
    if METRICS_LOCALHOST_ONLY.load(std::sync::atomic::Ordering::Relaxed) && !local {
        return Response::text(403, "Only requests from localhost are allowed\n");
    }
    let stats = publisher.query(DebugQuery::Stats).await;
    let mut out = istiod_xds::metrics::Exposition::new();
    crate::control::metrics::count_noted();
    istiod_xds::metrics::collect(&mut out);
    crate::version::collect_metrics(&crate::version::BUILD, &mut out);
    crate::control::metrics::collect(&mut out);
    super::remotes::collect(&mut out);
    super::autoregister::collect(&mut out);
    // The push context's gauges, from the model last published (counted
    // when scraped, not at every change).
    let model = state.borrow().mesh.as_ref().map(|m| m.model.clone());
    let mesh_stats = model.as_ref().map(|m| m.stats()).unwrap_or_default();
    crate::control::metrics::collect_mesh(&mesh_stats, &mut out);
    // The push context's status gauges (`UpdateMetrics`: each metric's
    // number of entries in `/debug/push_status`).
    let status = match &model {
        Some(m) => super::debugz::proxy_status(m, &proxies(publisher).await),
        None => Default::default(),
    };
    for (name, help) in super::debugz::PROXY_STATUS {
        out.gauge(name, help, [(vec![], status.get(name).map_or(0, |e| e.len()) as f64)]);
    }
    // istiod's `recordXDSClients`: connected proxies by their Istio version;
    // a version seen once keeps its series, at 0 when none is connected.
    let mut versions: std::collections::BTreeMap<String, u64> =
        istiod_xds::metrics::versions_seen().into_iter().map(|v| (v, 0)).collect();
    for s in &stats {
        for (v, n) in s["versions"].as_object().into_iter().flatten() {
            *versions.entry(v.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
    }
    // Duplicate clusters and domains, from the configuration in force.
    {
        let domain = model.as_ref().map_or_else(|| "cluster.local".to_owned(), |m| m.domain.clone());
        let (clusters, domains) = super::debugz::duplicates(&state.borrow().objects.istio, &domain);
        out.gauge(
            "pilot_duplicate_envoy_clusters",
            "Duplicate envoy clusters caused by service entries with same hostname",
            [(vec![], clusters as f64)],
        );
        out.gauge("pilot_vservice_dup_domain", "Virtual services with dup domains.", [(vec![], domains as f64)]);
    }
    // istiod's endpoint resync metrics: endpoints naming a Pod not known.
    {
        let s = state.borrow();
        let pending: usize = s.pending_pods.values().map(std::collections::BTreeSet::len).sum();
        out.gauge("endpoint_no_pod", "Endpoints without an associated pod.", [(vec![], s.pending_pods.len() as f64)]);
        out.gauge(
            "pilot_k8s_endpoints_pending_pod",
            "Number of endpoints that do not currently have any corresponding pods.",
            [(vec![], pending as f64)],
        );
    }
    let seen = istiod_kubewatch::events::endpoints_without_pods_seen();
    if seen > 0 {
        out.counter(
            "pilot_k8s_endpoints_with_no_pods",
            "Endpoints that does not have any corresponding pods.",
            [(vec![], seen as f64)],
        );
    }
    // istiod's `xds_cache_reads{type}`: the cores' cache hits and misses.
    let (hits, misses) = stats.iter().fold((0u64, 0u64), |(h, m), s| {
        (h + s["cache"]["hits"].as_u64().unwrap_or(0), m + s["cache"]["misses"].as_u64().unwrap_or(0))
    });
    out.counter(
        "xds_cache_reads",
        "Total number of xds cache xdsCacheReads.",
        [("hit", hits), ("miss", misses)].map(|(t, n)| (istiod_xds::metrics::label("type", t), n as f64)),
    );
    let evicted = |k: &str| stats.iter().map(|s| s["cache"][k].as_u64().unwrap_or(0)).sum::<u64>();
    let evictions: Vec<(&str, u64)> = [("clear", evicted("evicted_clear")), ("size", evicted("evicted_size"))]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect();
    out.counter(
        "xds_cache_evictions",
        "Total number of xds cache evictions.",
        evictions.into_iter().map(|(t, n)| (istiod_xds::metrics::label("type", t), n as f64)),
    );
    // istiod's size of its cache's config -> keys index; here the
    // dependency keys the cores' entries are checked against.
    let keys = state.borrow().mesh.as_ref().map_or(0, |m| m.changes.keys());
    out.gauge("xds_cache_dependent_config_size", "Current size of dependent configs", [(vec![], keys as f64)]);
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
    Response { status: 200, content_type: "text/plain; version=0.0.4; charset=utf-8", body: out.encode().into() }
}

/// `METRICS_LOCALHOST_ACCESS_ONLY`: `/metrics` answers loopback callers
/// only.
static METRICS_LOCALHOST_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets [`METRICS_LOCALHOST_ONLY`] (at start).
pub(crate) fn set_metrics_localhost_only(on: bool) {
    METRICS_LOCALHOST_ONLY.store(on, std::sync::atomic::Ordering::Relaxed);
}
