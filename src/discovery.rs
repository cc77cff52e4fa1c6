//! `pilot-discovery discovery`: wires the serving cores (glommio, xDS on
//! `--grpcAddr`) to the control thread (tokio, on the calling thread: the
//! config store, debounce, publishing, debug and monitoring HTTP).

use std::cell::RefCell;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use istiod_xds::ads::{self, AdsFactory, DebugQuery, Publisher, Snapshot};
use istiod_xds::grpc::GrpcLimits;
use istiod_xds::h2::Limits;
use istiod_xds::server::{self, ListenerConfig, ServerConfig, tls};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::config::{Config, ListenAddr, Source};
use crate::control::http::{self, Request, Response};
use crate::control::{self, Control, debounce::Debouncer};
use crate::generator::{MeshGenerator, MeshInput};
use crate::model::Model;
use crate::translate;
use istiod_kubewatch::config_dir::{ConfigDir, Loaded};
use istiod_kubewatch::objects::EndpointSlice;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A source that is not implemented yet.
    #[error("{0}")]
    Unsupported(String),
    /// An address that does not resolve.
    #[error("--{flag} {addr}: {reason}")]
    Address {
        /// Flag.
        flag: &'static str,
        /// Value.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The config directory could not be read.
    #[error(transparent)]
    ConfigDir(#[from] istiod_kubewatch::config_dir::LoadError),
    /// The mesh configuration file.
    #[error(transparent)]
    MeshConfig(#[from] crate::mesh::MeshConfigError),
    /// The serving cores did not start.
    #[error(transparent)]
    Server(#[from] server::ServerError),
    /// TLS files.
    #[error("TLS certificate files: {0}")]
    Tls(String),
    /// A debug or monitoring port.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: SocketAddr,
        /// Error.
        source: std::io::Error,
    },
}

fn resolve(flag: &'static str, a: &ListenAddr) -> Result<SocketAddr, StartError> {
    // An empty host listens on every IPv4 address.
    let host = if a.host.is_empty() { "0.0.0.0" } else { &a.host };
    (host, a.port)
        .to_socket_addrs()
        .map_err(|e| StartError::Address { flag, addr: a.to_string(), reason: e.to_string() })?
        .next()
        .ok_or_else(|| StartError::Address { flag, addr: a.to_string(), reason: "resolves to nothing".into() })
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(config: Config) -> Result<(), StartError> {
    let mesh = Arc::new(crate::mesh::MeshSettings::load(&config.mesh_config)?);
    // The config directory is read before the cores start, so a bad
    // directory fails fast; Kubernetes is watched on the control thread.
    let mut dir_source = match &config.source {
        Source::ConfigDir(dir) => {
            let mut source = ConfigDir::new(dir.clone());
            let loaded = source.reload()?;
            Some((source, loaded))
        }
        Source::Kubernetes { .. } => None,
    };

    let cores = config.cores.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let (publisher, receivers) = ads::channels(cores);
    let control_plane =
        format!("istiod-rs-{}", if config.identity.pod_name.is_empty() { "local" } else { &config.identity.pod_name });
    let factory =
        AdsFactory::new(Arc::new(MeshGenerator), receivers, Arc::new(Snapshot::empty(Instant::now())), &control_plane);

    let k = &config.keepalive;
    let limits = Limits {
        max_concurrent_streams: k.max_concurrent_streams,
        keepalive_interval: k.interval,
        keepalive_timeout: k.timeout,
        max_connection_age: k.max_connection_age,
        max_connection_age_grace: k.max_connection_age_grace,
        ..Limits::default()
    };
    let mut listeners = Vec::new();
    if let Some(a) = &config.listen.grpc {
        listeners.push(ListenerConfig { addr: resolve("grpcAddr", a)?, tls: None });
    }
    if let Some(a) = &config.listen.secure_grpc {
        match (&config.tls.cert, &config.tls.key) {
            (Some(cert), Some(key)) => {
                let read = |p: &std::path::Path| {
                    std::fs::read(p).map_err(|e| StartError::Tls(format!("{}: {e}", p.display())))
                };
                let cfg = tls::server_config(&read(cert)?, &read(key)?).map_err(|e| StartError::Tls(e.to_string()))?;
                listeners.push(ListenerConfig { addr: resolve("secureGRPCAddr", a)?, tls: Some(cfg) });
            }
            _ => tracing::warn!(
                target: "default",
                "--secureGRPCAddr is not served: istiod-rs's CA does not issue its own certificate yet; pass --tlsCertFile and --tlsKeyFile"
            ),
        }
    }
    // Every port is bound before anything is served or published: a port in
    // use stops the start with the address named, and nothing half-runs.
    let bind_http = |flag: &'static str, a: &Option<ListenAddr>| -> Result<Option<std::net::TcpListener>, StartError> {
        let Some(a) = a else { return Ok(None) };
        let addr = resolve(flag, a)?;
        let l = std::net::TcpListener::bind(addr).map_err(|source| StartError::Listen { addr, source })?;
        l.set_nonblocking(true).map_err(|source| StartError::Listen { addr, source })?;
        Ok(Some(l))
    };
    let http_listener = bind_http("httpAddr", &config.listen.http)?;
    let monitoring_listener = bind_http("monitoringAddr", &config.listen.monitoring)?;
    let handle = server::start(
        ServerConfig {
            cores,
            pin: false,
            listeners,
            limits,
            grpc: GrpcLimits { max_recv_message: k.max_recv_msg_size as usize, ..GrpcLimits::default() },
        },
        factory,
    )?;
    for a in handle.addrs() {
        tracing::info!(target: "default", addr = %a, cores, "serving xDS");
    }

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let local = tokio::task::LocalSet::new();
    let result = local.block_on(&rt, async {
        let ready = Arc::new(AtomicBool::new(false));
        let p = &config.push;
        let control = Control::new(
            publisher.clone(),
            Debouncer::new(p.debounce_after, p.debounce_max, p.eds_debounce),
            ready.clone(),
        );
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::task::spawn_local(control::run(control, rx));
        let state = Rc::new(RefCell::new(State::default()));
        let tokio_listener = |l: std::net::TcpListener| {
            let addr =
                l.local_addr().map_err(|source| StartError::Listen { addr: ([0, 0, 0, 0], 0).into(), source })?;
            tokio::net::TcpListener::from_std(l).map_err(|source| StartError::Listen { addr, source })
        };
        if let Some(l) = http_listener {
            let l = tokio_listener(l)?;
            if let Ok(addr) = l.local_addr() {
                tracing::info!(target: "default", %addr, "serving debug HTTP");
            }
            let (publisher, ready, state) = (publisher.clone(), ready.clone(), state.clone());
            let handler: http::Handler = Rc::new(move |req| {
                let (publisher, ready) = (publisher.clone(), ready.clone());
                let state = state.clone();
                Box::pin(async move { debug(req, &publisher, &ready, &state).await })
            });
            tokio::task::spawn_local(http::serve(l, handler));
        }
        if let Some(l) = monitoring_listener {
            let l = tokio_listener(l)?;
            let publisher = publisher.clone();
            let handler: http::Handler = Rc::new(move |req| {
                let publisher = publisher.clone();
                Box::pin(async move { monitoring(req, &publisher).await })
            });
            tokio::task::spawn_local(http::serve(l, handler));
        }
        match (&config.source, dir_source.take()) {
            (Source::ConfigDir(dir), Some((source, loaded))) => {
                let configz = configz(dir, &loaded);
                apply(&state, loaded.objects, configz, &config.domain, &mesh, &tx);
                // Watch the directory: every change reloads it and sends what changed.
                let (watcher, events) = source.watch()?;
                let (wake_tx, wake_rx) = mpsc::unbounded_channel();
                std::thread::spawn(move || {
                    let _watcher = watcher;
                    while events.recv().is_ok() {
                        if wake_tx.send(()).is_err() {
                            return;
                        }
                    }
                });
                tokio::task::spawn_local(watch_dir(
                    source,
                    dir.clone(),
                    wake_rx,
                    tx.clone(),
                    state.clone(),
                    config.domain.clone(),
                    mesh.clone(),
                ));
            }
            (Source::Kubernetes { kubeconfig }, _) => {
                let client = kube_client(kubeconfig.as_deref()).await?;
                let (otx, orx) = tokio::sync::watch::channel(None);
                tokio::spawn(istiod_kubewatch::kube_source::run(client, otx));
                tokio::task::spawn_local(watch_kube(
                    orx,
                    tx.clone(),
                    state.clone(),
                    config.domain.clone(),
                    mesh.clone(),
                    config.cluster_id.clone(),
                ));
            }
            _ => unreachable!("the config directory was read above"),
        }

        shutdown_signal().await;
        tracing::info!(target: "default", "shutting down");
        drop(tx);
        Ok::<(), StartError>(())
    });
    handle.shutdown();
    result
}

/// What the debug endpoints show of the source and the model.
#[derive(Default)]
struct State {
    model: Arc<Model>,
    configz: Value,
    resources: crate::translate::Resources,
    inbound_generation: Option<u64>,
    scope_generation: Option<u64>,
    routing_generation: Option<u64>,
    /// The source's objects the model was last built from.
    objects: Option<istiod_kubewatch::objects::Objects>,
    /// The generators' input last published.
    mesh: Option<Arc<MeshInput>>,
}

fn configz(dir: &std::path::Path, loaded: &Loaded) -> Value {
    for e in &loaded.errors {
        tracing::warn!(target: "model", error = %e, "rejected document; its last good version stays in force");
    }
    json!({
        "configDir": dir.display().to_string(),
        "services": loaded.objects.services.len(),
        "endpointSlices": loaded.objects.endpoint_slices.len(),
        "pods": loaded.objects.pods.len(),
        "nodes": loaded.objects.nodes.len(),
        "namespaces": loaded.objects.namespaces.len(),
        "istioConfig": istio_counts(&loaded.objects),
        "skippedDocuments": loaded.skipped,
        "errors": loaded.errors.iter().map(|e| json!({
            "file": e.file.display().to_string(),
            "document": e.index,
            "message": e.message,
        })).collect::<Vec<_>>(),
    })
}

/// Istio objects in force, by kind.
fn istio_counts(objects: &istiod_kubewatch::objects::Objects) -> Value {
    let mut counts = std::collections::BTreeMap::new();
    for o in &objects.istio {
        *counts.entry(format!("{:?}", o.kind())).or_insert(0u32) += 1;
    }
    json!(counts)
}

/// Rebuilds the model from `objects` and sends the resource changes.
/// What the control thread derives from one set of objects: the model,
/// the shared resources, and the inputs of the per-class generators.
pub struct Built {
    /// The mesh model.
    pub model: Arc<Model>,
    /// The shared resources, encoded.
    pub resources: crate::translate::Resources,
    /// The per-class generators' inputs.
    pub mesh: Arc<MeshInput>,
}

/// Builds the model and everything served from it.
pub fn build(
    objects: &istiod_kubewatch::objects::Objects,
    domain: &str,
    mesh: &Arc<crate::mesh::MeshSettings>,
) -> Built {
    let model = Arc::new(Model::build_in(objects, domain, mesh.clone()));
    let mesh = Arc::new(MeshInput::new(model.clone()));
    let resources = mesh.translation.resources.clone();
    Built { model, resources, mesh }
}

/// The Services whose EndpointSlices differ between `old` and `new`, as
/// (namespace, name), when nothing else differs; `None` otherwise.
fn endpoint_only_change(
    old: &istiod_kubewatch::objects::Objects,
    new: &istiod_kubewatch::objects::Objects,
) -> Option<Vec<(String, String)>> {
    if old.services != new.services
        || old.pods != new.pods
        || old.nodes != new.nodes
        || old.namespaces != new.namespaces
        || old.istio != new.istio
    {
        return None;
    }
    fn index(o: &istiod_kubewatch::objects::Objects) -> std::collections::HashMap<(&str, &str), &EndpointSlice> {
        o.endpoint_slices.iter().map(|s| ((s.metadata.ns(), s.metadata.name.as_str()), s)).collect()
    }
    let (a, b) = (index(old), index(new));
    let mut services = std::collections::BTreeSet::new();
    for (x, y) in [(&a, &b), (&b, &a)] {
        for (key, slice) in x {
            if y.get(key) != Some(slice) {
                // A slice without its service label serves nothing.
                if let Some(svc) = slice.service_name() {
                    services.insert((key.0.to_owned(), svc.to_owned()));
                }
            }
        }
    }
    Some(services.into_iter().collect())
}

/// The mesh built from `objects`, given what it was built from before
/// (`prev`): when only EndpointSlices changed, only their services are
/// rebuilt and re-translated (O(changed), the rest shared); anything else
/// rebuilds the model. Says which it did.
pub fn update(
    prev: Option<(&istiod_kubewatch::objects::Objects, &Arc<MeshInput>)>,
    objects: &istiod_kubewatch::objects::Objects,
    domain: &str,
    settings: &Arc<crate::mesh::MeshSettings>,
) -> (Built, bool) {
    let fast =
        prev.and_then(|(old, m)| endpoint_only_change(old, objects).map(|svcs| m.with_endpoints(objects, &svcs).0));
    match fast {
        Some(m) => {
            (Built { model: m.model.clone(), resources: m.translation.resources.clone(), mesh: Arc::new(m) }, true)
        }
        None => (build(objects, domain, settings), false),
    }
}

fn apply(
    state: &RefCell<State>,
    objects: istiod_kubewatch::objects::Objects,
    configz: Value,
    domain: &str,
    mesh: &Arc<crate::mesh::MeshSettings>,
    tx: &Tx,
) {
    let started = std::time::Instant::now();
    let (Built { model, resources, mesh }, incremental) = {
        let s = state.borrow();
        let prev = s.objects.as_ref().zip(s.mesh.as_ref());
        update(prev, &objects, domain, mesh)
    };
    let mut s = state.borrow_mut();
    let changes = translate::diff_maps(&s.resources, &resources);
    // Per-class resources are generated on the cores: if their inputs
    // changed, mark every name they may have, before and after.
    let mut touched = Vec::new();
    if s.inbound_generation != Some(mesh.inbound_generation) {
        touched.extend(crate::generator::all_names(&s.model));
        touched.extend(crate::generator::all_names(&model));
    }
    // DestinationRules changed: endpoints balanced by locality may differ.
    if s.routing_generation.is_some_and(|g| g != mesh.routing_generation) {
        touched.extend(s.resources.keys().filter(|k| k.0 == ads::Kind::Endpoint).cloned());
        touched.extend(resources.keys().filter(|k| k.0 == ads::Kind::Endpoint).cloned());
    }
    // What each proxy may see changed: every outbound name may have
    // appeared or gone for some of them.
    if s.scope_generation.is_some_and(|g| g != mesh.scope_generation) {
        let outbound = |k: &(ads::Kind, Arc<str>)| {
            matches!(k.0, ads::Kind::Cluster | ads::Kind::Endpoint | ads::Kind::Listener | ads::Kind::Route)
        };
        touched.extend(s.resources.keys().filter(|k| outbound(k)).cloned());
        touched.extend(resources.keys().filter(|k| outbound(k)).cloned());
    }
    let first = s.configz.is_null();
    s.configz = configz;
    s.model = model;
    s.resources = resources;
    s.objects = Some(objects);
    s.mesh = Some(mesh.clone());
    s.inbound_generation = Some(mesh.inbound_generation);
    s.scope_generation = Some(mesh.scope_generation);
    s.routing_generation = Some(mesh.routing_generation);
    if first || !changes.is_empty() || !touched.is_empty() {
        tracing::info!(
            target: "model",
            changes = changes.len(),
            touched = touched.len(),
            incremental,
            build_ms = started.elapsed().as_secs_f64() * 1000.0,
            "mesh changed"
        );
        let mesh: Arc<dyn std::any::Any + Send + Sync> = mesh;
        let _ = tx.send(crate::control::Input { changes, mesh: Some(mesh), touched });
    }
}

type Tx = mpsc::UnboundedSender<crate::control::Input>;

/// Reloads the directory on every burst of file events.
async fn watch_dir(
    mut source: ConfigDir,
    dir: std::path::PathBuf,
    mut wake: mpsc::UnboundedReceiver<()>,
    tx: Tx,
    state: Rc<RefCell<State>>,
    domain: String,
    mesh: Arc<crate::mesh::MeshSettings>,
) {
    while wake.recv().await.is_some() {
        // Editors write in several steps: let the burst settle.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        while wake.try_recv().is_ok() {}
        match source.reload() {
            Ok(loaded) => {
                let configz = configz(&dir, &loaded);
                apply(&state, loaded.objects, configz, &domain, &mesh, &tx)
            }
            Err(e) => {
                tracing::warn!(target: "model", error = %e, "cannot reload --configDir; keeping the current state")
            }
        }
    }
}

/// Follows the Kubernetes source: every complete object set rebuilds the model.
async fn watch_kube(
    mut rx: tokio::sync::watch::Receiver<Option<istiod_kubewatch::objects::Objects>>,
    tx: Tx,
    state: Rc<RefCell<State>>,
    domain: String,
    mesh: Arc<crate::mesh::MeshSettings>,
    cluster_id: String,
) {
    while rx.changed().await.is_ok() {
        let Some(objects) = rx.borrow_and_update().clone() else { continue };
        let configz = json!({
            "source": "kubernetes",
            "clusterID": cluster_id,
            "services": objects.services.len(),
            "endpointSlices": objects.endpoint_slices.len(),
            "pods": objects.pods.len(),
            "nodes": objects.nodes.len(),
            "namespaces": objects.namespaces.len(),
            "istioConfig": istio_counts(&objects),
        });
        apply(&state, objects, configz, &domain, &mesh, &tx);
    }
}

async fn kube_client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, StartError> {
    let err = |e: String| StartError::Unsupported(format!("Kubernetes client: {e}"));
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| err(e.to_string()))?
        }
        None => kube::Config::infer().await.map_err(|e| err(format!("no kubeconfig and not in a cluster: {e}")))?,
    };
    kube::Client::try_from(config).map_err(|e| err(e.to_string()))
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

async fn debug(req: Request, publisher: &Publisher, ready: &AtomicBool, state: &Rc<RefCell<State>>) -> Response {
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
            let model = state.borrow().model.clone();
            Response::json(&serde_json::to_value(model.services.values().collect::<Vec<_>>()).unwrap_or_default())
        }
        "/debug" => Response::text(
            200,
            "/ready\n/debug/adsz\n/debug/syncz\n/debug/config_dump?proxyID=\n/debug/configz\n/debug/registryz\n/debug/stats\n",
        ),
        _ => Response::text(404, "not found\n"),
    }
}

async fn monitoring(req: Request, publisher: &Publisher) -> Response {
    if req.path != "/metrics" {
        return Response::text(404, "not found\n");
    }
    let stats = publisher.query(DebugQuery::Stats).await;
    let sum = |k: &str| stats.iter().map(|s| s[k].as_u64().unwrap_or(0)).sum::<u64>();
    let mut out = istiod_xds::metrics::render();
    out.push_str("# HELP pilot_xds Number of endpoints connected to this pilot using XDS.\n# TYPE pilot_xds gauge\n");
    out.push_str(&format!("pilot_xds {}\n", sum("streams")));
    out.push_str("# HELP pilot_xds_pushes Pilot build and send errors for lds, rds, cds and eds.\n# TYPE pilot_xds_pushes counter\n");
    out.push_str(&format!("pilot_xds_pushes {}\n", sum("pushes")));
    out.push_str("# HELP pilot_total_xds_rejects Total number of XDS responses from pilot rejected by proxy.\n# TYPE pilot_total_xds_rejects counter\n");
    out.push_str(&format!("pilot_total_xds_rejects {}\n", sum("nacks")));
    Response { status: 200, content_type: "text/plain; version=0.0.4", body: out }
}
