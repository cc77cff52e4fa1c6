//! istiod's admission webhooks: sidecar injection (with its Go template engine), config validation, the webhook configurations' caBundle, and the HTTPS server that serves them.
//!
//! The server listens on `--httpsAddr` (:15017): an HTTPS server on the
//! control thread (hyper, HTTP/1.1 and h2, as the API server uses both),
//! with istiod's own certificate from its CA (replaced when the CA changes,
//! read at each accept), serving `/inject` (istiod's `pkg/kube/inject`,
//! see [`inject`]), `/validate` (istiod's `pkg/webhooks/validation/server`)
//! and `/ready`.
//!
//! Without an injector configuration (no `config`/`values` in the
//! injection directory) `/inject` answers 503, so the API server's
//! `failurePolicy` decides, rather than admitting pods without a sidecar.

pub mod admission;
pub mod funcs;
pub mod gotmpl;
pub mod inject;
pub mod jsonpatch;
pub mod patch;
pub mod proxy_config;
pub mod question;
pub mod smp;
pub mod validate;

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response, StatusCode};
use istiod_xds::server::tls::Reloadable;

/// istiod's `MaxRequestBodyBytes`: larger bodies are refused with 400, as
/// istiod's `HTTPConfigReader` does.
pub const MAX_BODY: usize = 6 << 20;
/// Connections served at once; past it the one idle the longest is closed
/// for the newcomer (only when all have a request in flight is the
/// newcomer closed).
const MAX_CONNECTIONS: usize = 512;
/// From accept, the TLS handshake and the first request's start must be
/// done within this; a connection is closed after [`IDLE`] between two
/// requests (the API server reconnects).
const FIRST_REQUEST: Duration = Duration::from_secs(10);
/// Counted from a request's head, whose body is not yet work in flight:
/// longer than [`BODY_TIMEOUT`], so a slow body is answered 408 first.
const IDLE: Duration = Duration::from_secs(35);
/// A connection lives at most this long (the API server reconnects); it
/// is then drained (GOAWAY, in-flight requests finish) for up to
/// [`DRAIN`].
const MAX_CONNECTION_AGE: Duration = Duration::from_secs(300);
const DRAIN: Duration = Duration::from_secs(10);
/// An HTTP/1.1 request head must arrive within this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A request body must arrive within this.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// h2 streams at once on one connection (hyper's default is 200; one
/// AdmissionReview each, the API server opens few).
const MAX_STREAMS: u32 = 32;

/// What the webhooks share on the control thread.
#[derive(Default)]
pub struct Webhooks {
    /// Validation counters.
    pub validation: RefCell<validate::Metrics>,
    /// Requests answered with an HTTP error, by status
    /// (`galley_validation_http_error`).
    pub http_errors: RefCell<std::collections::BTreeMap<u16, u64>>,
    /// The injector, once its configuration loaded (replaced on change).
    pub injector: RefCell<Option<std::sync::Arc<inject::Injector>>>,
    /// Injection counters.
    pub injection: RefCell<InjectionMetrics>,
    /// The ProxyConfig resources in force (kept by the config source).
    pub proxy_configs: RefCell<std::sync::Arc<inject::ClusterInputs>>,
    /// Injections run at once, off the control thread.
    pub inject_slots: Slots<INJECT_CONCURRENCY>,
    /// Validations run at once, off the control thread.
    pub validate_slots: Slots<VALIDATE_CONCURRENCY>,
}

/// Injections run on tokio's blocking threads, at most this many at once
/// (the others wait their turn), so a slow render holds neither the
/// control thread nor an unbounded number of threads.
pub const INJECT_CONCURRENCY: usize = 4;
/// An injection that takes longer is answered with an error (the API
/// server gives the webhook 10 s by default).
pub const INJECT_TIMEOUT: Duration = Duration::from_secs(8);

/// `N` permits for work run off the control thread (see [`off_thread`]).
pub struct Slots<const N: usize>(pub std::sync::Arc<tokio::sync::Semaphore>);

impl<const N: usize> Default for Slots<N> {
    fn default() -> Self {
        Slots(std::sync::Arc::new(tokio::sync::Semaphore::new(N)))
    }
}

/// Reviews judged at once, on tokio's blocking threads (a 6 MiB review
/// decodes to a few times its size; more wait their turn).
pub const VALIDATE_CONCURRENCY: usize = 2;
/// A review that waits or runs longer is answered with an error.
pub const VALIDATE_TIMEOUT: Duration = Duration::from_secs(8);

/// istiod's `sidecar_injection_*` counters.
#[derive(Debug, Default, Clone)]
pub struct InjectionMetrics {
    /// `sidecar_injection_requests_total`.
    pub requests: u64,
    /// `sidecar_injection_success_total`.
    pub success: u64,
    /// `sidecar_injection_skip_total`.
    pub skip: u64,
    /// `sidecar_injection_failure_total`: requests answered with an HTTP
    /// error, refused pods and reviews that do not decode (istiod's
    /// `handleError`; an answered review counts as a success too, as in
    /// istiod).
    pub failure: u64,
    /// `sidecar_injection_time_seconds`: count per bucket, sum, count.
    pub time: ([u64; 8], f64, u64),
}

/// istiod's buckets for `sidecar_injection_time_seconds`.
const INJECTION_TIME_BUCKETS: [f64; 8] = [0.1, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0];

impl InjectionMetrics {
    fn observe(&mut self, seconds: f64) {
        for (i, b) in INJECTION_TIME_BUCKETS.iter().enumerate() {
            if seconds <= *b {
                self.time.0[i] += 1;
            }
        }
        self.time.1 += seconds;
        self.time.2 += 1;
    }
}

impl Webhooks {
    /// Adds the webhooks' series, with istiod's names.
    pub fn collect_metrics(&self, out: &mut istiod_xds::metrics::Exposition) {
        self.validation.borrow().collect(out);
        let m = self.injection.borrow();
        for (name, help, v) in [
            ("sidecar_injection_requests_total", "Total number of sidecar injection requests.", m.requests),
            ("sidecar_injection_success_total", "Total number of successful sidecar injection requests.", m.success),
            ("sidecar_injection_skip_total", "Total number of skipped sidecar injection requests.", m.skip),
            ("sidecar_injection_failure_total", "Total number of failed sidecar injection requests.", m.failure),
        ] {
            out.counter(name, help, [(vec![], v as f64)]);
        }
        let buckets: Vec<(f64, u64)> = INJECTION_TIME_BUCKETS.iter().copied().zip(m.time.0).collect();
        out.histogram_of(
            "sidecar_injection_time_seconds",
            "Total time taken for injection in seconds.",
            vec![],
            &buckets,
            m.time.1,
            m.time.2,
        );
        let errors = self.http_errors.borrow();
        out.counter(
            "galley_validation_http_error",
            "Resource validation http serve errors",
            errors.iter().map(|(status, n)| (istiod_xds::metrics::label("status", status.to_string()), *n as f64)),
        );
    }
}

type Body = Full<Bytes>;

fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.into())));
    *r.status_mut() = status;
    r.headers_mut().insert("content-type", http::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// Whether `path` is a webhook's, as istiod's mux patterns route
/// (`/validate`, `/validate/`, `/inject`, `/inject/`: a pattern ending in
/// `/` takes what lies under it, the injector's path parameters
/// included). One rule for the webhook port and the HTTP port.
pub fn is_webhook_path(path: &str) -> bool {
    matches!(path, "/validate" | "/inject") || path.starts_with("/validate/") || path.starts_with("/inject/")
}

/// Answers one request of the HTTP port (`--httpsAddr=""`: istiod serves
/// the webhooks on its plaintext mux then): `/inject...` and `/validate`,
/// the body already read.
pub async fn handle_plain(hooks: Rc<Webhooks>, req: Request<Full<Bytes>>) -> Response<Full<Bytes>> {
    match handle(hooks, req, None).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// Answers one request.
async fn handle<B>(
    hooks: Rc<Webhooks>,
    req: Request<B>,
    requests: Option<istiod_httpd::conns::Requests>,
) -> Result<Response<Body>, Infallible>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let path = req.uri().path().to_owned();
    if path == "/ready" {
        return Ok(text(StatusCode::OK, ""));
    }
    if !is_webhook_path(&path) {
        return Ok(text(StatusCode::NOT_FOUND, "404 page not found\n"));
    }
    let injecting = path.starts_with("/inject");
    let started = std::time::Instant::now();
    if injecting {
        hooks.injection.borrow_mut().requests += 1;
    }
    let fail = |status: StatusCode, msg: String| {
        if injecting {
            let mut m = hooks.injection.borrow_mut();
            m.failure += 1;
            m.observe(started.elapsed().as_secs_f64());
        } else {
            *hooks.http_errors.borrow_mut().entry(status.as_u16()).or_default() += 1;
        }
        Ok(text(status, format!("{msg}\n")))
    };
    if req.method() != http::Method::POST {
        return fail(StatusCode::METHOD_NOT_ALLOWED, format!("{} is not POST", req.method()));
    }
    let content_type = req.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let body = match tokio::time::timeout(BODY_TIMEOUT, Limited::new(req.into_body(), MAX_BODY).collect()).await {
        Err(_) => return fail(StatusCode::REQUEST_TIMEOUT, format!("the body did not arrive within {BODY_TIMEOUT:?}")),
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            // istiod: 400 with apimachinery's RequestEntityTooLarge text.
            return fail(StatusCode::BAD_REQUEST, format!("Request entity too large: limit is {MAX_BODY}"));
        }
        Ok(Err(e)) => return fail(StatusCode::BAD_REQUEST, format!("cannot read the body: {e}")),
    };
    if body.is_empty() {
        return fail(StatusCode::BAD_REQUEST, "no body found".into());
    }
    // In flight from here: a body still arriving costs nothing, and its
    // connection may make room for a newcomer.
    let _busy = requests.as_ref().map(istiod_httpd::conns::Requests::start);
    if content_type != "application/json" {
        return fail(StatusCode::UNSUPPORTED_MEDIA_TYPE, "invalid Content-Type, want `application/json`".into());
    }
    let answer = if injecting {
        let injector = hooks.injector.borrow().clone();
        let Some(injector) = injector else {
            return fail(StatusCode::SERVICE_UNAVAILABLE, "the injector has no configuration".into());
        };
        let crs = hooks.proxy_configs.borrow().clone();
        let job = off_thread(&hooks.inject_slots.0, "injections", INJECT_TIMEOUT, move |deadline| {
            // (skipped by policy, refused): istiod counts a refused pod, or
            // a review it cannot decode, as a failure too.
            let mut outcome = (false, true);
            let answer = admission::serve(&body, |request| {
                let (r, skip) = admit_pod(&injector, &crs, request, &path, deadline);
                outcome = (skip, !r.allowed);
                r
            });
            (answer, outcome)
        });
        let (answer, (skipped, refused)) = match job.await {
            Ok(done) => done,
            Err((status, msg)) => return fail(status, msg),
        };
        let mut m = hooks.injection.borrow_mut();
        m.success += 1;
        m.skip += u64::from(skipped);
        m.failure += u64::from(refused);
        m.observe(started.elapsed().as_secs_f64());
        answer
    } else {
        // Decoding and judging a review (up to MAX_BODY of JSON) runs off
        // the control thread, a few at once: readiness, debug and
        // publishing never wait for it, and memory is bounded by the slots.
        let job = off_thread(&hooks.validate_slots.0, "validations", VALIDATE_TIMEOUT, move |_| {
            let mut counted = validate::Metrics::default();
            let answer = admission::serve(&body, |request| validate::validate(request, &mut counted));
            (answer, counted)
        });
        match job.await {
            Ok((answer, counted)) => {
                hooks.validation.borrow_mut().merge(counted);
                answer
            }
            Err((status, msg)) => return fail(status, msg),
        }
    };
    let mut r = Response::new(Full::new(Bytes::from(answer)));
    r.headers_mut().insert("content-type", http::HeaderValue::from_static("application/json"));
    Ok(r)
}

/// Runs `work` on one of tokio's blocking threads once one of `slots` is
/// free; waiting and working share one deadline, `timeout` from now, which
/// `work` is given so that it can stop when nobody waits for it any more
/// (its slot is held until it returns). The error is the HTTP answer.
async fn off_thread<T: Send + 'static>(
    slots: &std::sync::Arc<tokio::sync::Semaphore>,
    what: &str,
    timeout: Duration,
    work: impl FnOnce(std::time::Instant) -> T + Send + 'static,
) -> Result<T, (StatusCode, String)> {
    let deadline = std::time::Instant::now() + timeout;
    let until = tokio::time::Instant::from_std(deadline);
    let permit = match tokio::time::timeout_at(until, slots.clone().acquire_owned()).await {
        Ok(Ok(permit)) => permit,
        Ok(Err(_)) => return Err((StatusCode::SERVICE_UNAVAILABLE, "the webhook is shutting down".into())),
        Err(_) => return Err((StatusCode::SERVICE_UNAVAILABLE, format!("too many {what} in flight for {timeout:?}"))),
    };
    let job = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work(deadline)
    });
    match tokio::time::timeout_at(until, job).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(e)) => Err((StatusCode::INTERNAL_SERVER_ERROR, format!("{what} failed: {e}"))),
        Err(_) => Err((StatusCode::INTERNAL_SERVER_ERROR, format!("the request took longer than {timeout:?}"))),
    }
}

/// One pod through the injector (istiod's `Webhook.inject`): the answer,
/// and whether policy skipped the pod.
fn admit_pod(
    injector: &inject::Injector,
    crs: &inject::ClusterInputs,
    request: &admission::AdmissionRequest,
    path: &str,
    deadline: std::time::Instant,
) -> (admission::AdmissionResponse, bool) {
    // A bug must not take the webhook down: a panic refuses the pod.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        inject::inject_until(injector, crs, &request.object, &request.namespace, path, Some(deadline))
    }))
    .unwrap_or_else(|_| Err("internal error: the injector panicked".into()));
    match result {
        Ok(inject::Outcome::Skipped) => (admission::AdmissionResponse::allow(), true),
        Ok(inject::Outcome::Patched(ops)) => (
            admission::AdmissionResponse {
                patch: Some(serde_json::to_vec(&ops).unwrap_or_default()),
                ..admission::AdmissionResponse::allow()
            },
            false,
        ),
        Err(e) => {
            tracing::warn!(target: "injection", namespace = %request.namespace, name = %request.name, error = %e, "injection failed");
            (admission::AdmissionResponse::deny(e), false)
        }
    }
}

/// Serves the webhooks on `listener` until the thread's tasks end.
pub async fn serve(listener: tokio::net::TcpListener, tls: Reloadable, hooks: Rc<Webhooks>) {
    use istiod_httpd::conns;
    let registry =
        conns::Registry::new(conns::Limits { max: MAX_CONNECTIONS, first_request: FIRST_REQUEST, idle: IDLE });
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(target: "webhook", error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let place = registry.admit();
        let _ = tcp.set_nodelay(true);
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.get());
        let hooks = hooks.clone();
        tokio::task::spawn_local(async move {
            // The handshake counts against the first request's time.
            let stream = tokio::select! {
                r = acceptor.accept(tcp) => match r {
                    Ok(stream) => stream,
                    Err(e) => return tracing::debug!(target: "webhook", %peer, error = %e, "TLS handshake failed"),
                },
                why = place.closing() => {
                    return tracing::debug!(target: "webhook", %peer, ?why, "closed during the TLS handshake");
                }
            };
            let requests = place.requests();
            let service = hyper::service::service_fn(move |req| {
                requests.seen();
                handle(hooks.clone(), req, Some(requests.clone()))
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(istiod_httpd::LocalExec);
            builder.http1().timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
            builder.http2().timer(hyper_util::rt::TokioTimer::new()).max_concurrent_streams(MAX_STREAMS);
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(conn);
            let ended = tokio::select! {
                r = conn.as_mut() => Some(r),
                why = place.closing() => {
                    tracing::debug!(target: "webhook", %peer, ?why, "closing a connection without a request in flight");
                    return;
                }
                _ = tokio::time::sleep(MAX_CONNECTION_AGE) => None,
            };
            let ended = match ended {
                Some(r) => r,
                None => {
                    // Old enough: drain it (GOAWAY; requests in flight finish).
                    conn.as_mut().graceful_shutdown();
                    tokio::time::timeout(DRAIN, conn.as_mut()).await.unwrap_or(Ok(()))
                }
            };
            if let Err(e) = ended {
                tracing::debug!(target: "webhook", %peer, error = %e, "connection ended");
            }
        });
    }
}

/// Where the injector's configuration comes from.
pub struct InjectorSource {
    /// The mounted ConfigMap's directory (`config`, `values`).
    pub dir: std::path::PathBuf,
    /// The mesh configuration in force (followed by the discovery server).
    pub mesh: tokio::sync::watch::Receiver<std::sync::Arc<istiod_mesh::meshconfig::MeshSettings>>,
    /// Without the mounted files: the ConfigMap read from the API server
    /// (namespace, name), as istiod's `NewConfigMapWatcher`.
    pub api: Option<(istiod_kubewatch::kapi::Api, String, String)>,
    /// istiod's environment.
    pub env: inject::Env,
}

/// istiod's `getInjectorConfigMapName`.
pub fn injector_configmap_name(revision: &str) -> String {
    if istiod_kubewatch::kapi::revision_label(revision) == "default" {
        "istio-sidecar-injector".into()
    } else {
        format!("istio-sidecar-injector-{revision}")
    }
}

/// The injector's `config` and `values`: the files, else the ConfigMap.
async fn injector_texts(src: &InjectorSource) -> Result<[Vec<u8>; 2], String> {
    let files = (std::fs::read(src.dir.join("config")), std::fs::read(src.dir.join("values")));
    let file_error = match files {
        (Ok(c), Ok(v)) => return Ok([c, v]),
        (Err(e), _) | (_, Err(e)) => format!("{}: {e}", src.dir.display()),
    };
    let Some((api, ns, name)) = &src.api else { return Err(file_error) };
    let cm = api
        .get(&format!("/api/v1/namespaces/{ns}/configmaps/{name}"))
        .await?
        .ok_or_else(|| format!("{file_error}; no ConfigMap {ns}/{name}"))?;
    let key = |k: &str| -> Result<Vec<u8>, String> {
        cm.pointer(&format!("/data/{k}"))
            .and_then(serde_json::Value::as_str)
            .map(|s| s.as_bytes().to_vec())
            .ok_or_else(|| format!("ConfigMap {ns}/{name} has no {k}"))
    };
    Ok([key("config")?, key("values")?])
}

/// Keeps `hooks.injector` current with the injector's configuration (the
/// mounted ConfigMap's files, else the ConfigMap from the API server) and
/// the mesh configuration in force: read every second (a ConfigMap update arrives
/// as a symlink swap; the API is asked every 5 seconds), reloaded when
/// their bytes change; a configuration that does not load keeps the last
/// good one and the log says why.
pub async fn watch_injector(hooks: Rc<Webhooks>, src: InjectorSource) {
    let mut last: Option<[Vec<u8>; 3]> = None;
    let mut logged_missing = false;
    loop {
        let mesh = match &src.mesh.borrow().raw {
            serde_json::Value::Null => Vec::new(),
            raw => raw.to_string().into_bytes(),
        };
        match injector_texts(&src).await {
            Ok([c, v]) => {
                let now = [c, v, mesh];
                if last.as_ref() != Some(&now) {
                    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                    let loaded = inject::MeshInputs::parse(&text(&now[2]))
                        .map_err(inject::LoadError)
                        .and_then(|mesh| inject::Injector::new(&text(&now[0]), &text(&now[1]), mesh, src.env.clone()));
                    match loaded {
                        Ok(i) => {
                            tracing::info!(target: "injection", dir = %src.dir.display(), templates = ?i.template_names(), "injector configuration loaded");
                            *hooks.injector.borrow_mut() = Some(std::sync::Arc::new(i));
                        }
                        Err(e) => {
                            tracing::error!(target: "injection", dir = %src.dir.display(), error = %e, "injector configuration not loaded; keeping the last good one");
                        }
                    }
                    last = Some(now);
                }
            }
            Err(e) if !logged_missing && last.is_none() => {
                tracing::info!(target: "injection", error = %e, "no injector configuration yet; /inject answers 503");
                logged_missing = true;
            }
            Err(_) => {}
        }
        let every = if src.api.is_some() && !src.dir.join("config").exists() { 5 } else { 1 };
        tokio::time::sleep(Duration::from_secs(every)).await;
    }
}

#[cfg(test)]
mod tests {
    /// The paths both ports route to the webhooks: istiod's mux patterns
    /// (`/validate`, `/validate/`, `/inject`, `/inject/` and below), and
    /// nothing that merely begins alike.
    #[test]
    fn webhook_paths_are_istiods_mux_patterns() {
        for p in ["/validate", "/validate/", "/validate/x", "/inject", "/inject/", "/inject/cluster/c1/net/n1"] {
            assert!(super::is_webhook_path(p), "{p}");
        }
        for p in ["/injector", "/inject-x", "/validates", "/", "/ready"] {
            assert!(!super::is_webhook_path(p), "{p}");
        }
    }
}
