//! istiod's webhooks on `--httpsAddr` (:15017): an HTTPS server on the
//! control thread (hyper, HTTP/1.1 and h2, as the API server uses both),
//! with istiod's own certificate from its CA (replaced when the CA changes,
//! read at each accept), serving `/validate` (istiod's
//! `pkg/webhooks/validation/server`) and `/ready`.
//!
//! Sidecar injection (`/inject`) is not served yet: a webhook that
//! answered without injecting would let pods run without their sidecar.

pub mod admission;
pub mod funcs;
pub mod gotmpl;
pub mod patch;
pub mod validate;

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use istiod_xds::server::tls::Reloadable;

/// istiod's `MaxRequestBodyBytes`: larger bodies are 413.
pub const MAX_BODY: usize = 6 << 20;
/// Connections served at once; past it new ones are closed on accept.
const MAX_CONNECTIONS: usize = 512;
/// A TLS handshake must finish within this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection lives at most this long (the API server reconnects).
const MAX_CONNECTION_AGE: Duration = Duration::from_secs(300);

/// What the webhooks share on the control thread.
#[derive(Default)]
pub struct Webhooks {
    /// Validation counters.
    pub validation: RefCell<validate::Metrics>,
    /// Requests answered with an HTTP error, by status
    /// (`galley_validation_http_error`).
    pub http_errors: RefCell<std::collections::BTreeMap<u16, u64>>,
}

impl Webhooks {
    /// The webhooks' series in Prometheus text, with istiod's names.
    pub fn render_metrics(&self) -> String {
        let mut out = self.validation.borrow().render();
        use std::fmt::Write;
        let errors = self.http_errors.borrow();
        if !errors.is_empty() {
            out.push_str("# HELP galley_validation_http_error Resource validation http serve errors\n");
            out.push_str("# TYPE galley_validation_http_error counter\n");
            for (status, n) in errors.iter() {
                let _ = writeln!(out, "galley_validation_http_error{{status=\"{status}\"}} {n}");
            }
        }
        out
    }
}

type Body = Full<Bytes>;

fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.into())));
    *r.status_mut() = status;
    r.headers_mut().insert("content-type", http::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// Answers one request.
async fn handle(hooks: Rc<Webhooks>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_owned();
    match path.as_str() {
        "/ready" => return Ok(text(StatusCode::OK, "")),
        "/validate" | "/validate/" => {}
        _ => return Ok(text(StatusCode::NOT_FOUND, "404 page not found\n")),
    }
    let fail = |status: StatusCode, msg: String| {
        *hooks.http_errors.borrow_mut().entry(status.as_u16()).or_default() += 1;
        Ok(text(status, format!("{msg}\n")))
    };
    if req.method() != http::Method::POST {
        return fail(StatusCode::METHOD_NOT_ALLOWED, format!("{} is not POST", req.method()));
    }
    let content_type = req.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return fail(StatusCode::PAYLOAD_TOO_LARGE, format!("the body is over the limit of {MAX_BODY} bytes"));
        }
        Err(e) => return fail(StatusCode::BAD_REQUEST, format!("cannot read the body: {e}")),
    };
    if body.is_empty() {
        return fail(StatusCode::BAD_REQUEST, "no body found".into());
    }
    if content_type != "application/json" {
        return fail(StatusCode::UNSUPPORTED_MEDIA_TYPE, "invalid Content-Type, want `application/json`".into());
    }
    let answer = admission::serve(&body, |request| validate::validate(request, &mut hooks.validation.borrow_mut()));
    let mut r = Response::new(Full::new(Bytes::from(answer)));
    r.headers_mut().insert("content-type", http::HeaderValue::from_static("application/json"));
    Ok(r)
}

/// hyper's executor for the h2 streams of a connection: tasks on this
/// thread (the handlers hold `Rc`s).
#[derive(Clone, Copy)]
struct LocalExec;

impl<F: std::future::Future + 'static> hyper::rt::Executor<F> for LocalExec {
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(fut);
    }
}

/// Serves the webhooks on `listener` until the thread's tasks end.
pub async fn serve(listener: tokio::net::TcpListener, tls: Reloadable, hooks: Rc<Webhooks>) {
    let open = Rc::new(std::cell::Cell::new(0usize));
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(target: "webhook", error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if open.get() >= MAX_CONNECTIONS {
            tracing::warn!(target: "webhook", %peer, "too many webhook connections; closing a new one");
            continue;
        }
        let _ = tcp.set_nodelay(true);
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.get());
        let (hooks, open) = (hooks.clone(), open.clone());
        open.set(open.get() + 1);
        tokio::task::spawn_local(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let service = hyper::service::service_fn(move |req| handle(hooks.clone(), req));
                    let builder = hyper_util::server::conn::auto::Builder::new(LocalExec);
                    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    if let Ok(Err(e)) = tokio::time::timeout(MAX_CONNECTION_AGE, conn).await {
                        tracing::debug!(target: "webhook", %peer, error = %e, "connection ended");
                    }
                }
                Ok(Err(e)) => tracing::debug!(target: "webhook", %peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(target: "webhook", %peer, "TLS handshake timed out"),
            }
            open.set(open.get() - 1);
        });
    }
}
