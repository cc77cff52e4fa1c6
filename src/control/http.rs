//! The control thread's HTTP server for the debug (`--httpAddr`),
//! monitoring (`--monitoringAddr`) and ControlZ (`--ctrlz_port`) ports, on
//! hyper: HTTP/1.1 with keep-alive (Prometheus scrapes reuse their
//! connection) and h2 (prior knowledge), GET and HEAD (PUT for ControlZ,
//! POST of webhook reviews where the webhooks moved here), gzip when the
//! client accepts it, bounded connections, header size and time, bodies,
//! and large answers in flight. With `--grpcAddr=""` the debug port hands
//! cleartext HTTP/2 connections to the xDS cores. These ports serve
//! operators and Prometheus, not proxies.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use tokio::net::TcpListener;

/// A response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Content type.
    pub content_type: &'static str,
    /// Body.
    pub body: Bytes,
}

impl Response {
    /// 200 with a JSON body.
    pub fn json(v: &serde_json::Value) -> Self {
        Self {
            status: 200,
            content_type: "application/json",
            body: serde_json::to_string_pretty(v).unwrap_or_default().into(),
        }
    }

    /// A plain-text response.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self { status, content_type: "text/plain; charset=utf-8", body: Bytes::from(body.into()) }
    }

    /// A JSON body with a status other than 200.
    pub fn json_status(status: u16, v: &serde_json::Value) -> Self {
        Self { status, ..Self::json(v) }
    }
}

/// A request: path and decoded query parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Path without the query.
    pub path: String,
    /// Query parameters, in order.
    pub query: Vec<(String, String)>,
    /// The caller's address (`None` in tests).
    pub peer: Option<std::net::SocketAddr>,
    /// The `Authorization: Bearer` token, if any (debug callers not on
    /// loopback authenticate with it, as xDS callers do).
    pub bearer: Option<String>,
    /// `GET`, `HEAD`, or `PUT`/`POST` where the listener takes them.
    pub method: http::Method,
    /// The body of a `PUT` or `POST` (empty otherwise).
    pub body: Bytes,
    /// Its `Content-Type`.
    pub content_type: Option<String>,
    /// The request target as sent (path and query, not decoded).
    pub target: String,
}

impl Request {
    /// A query parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Handles a request.
pub type Handler = Rc<dyn Fn(Request) -> Pin<Box<dyn Future<Output = Response>>>>;

/// Request headers must arrive within this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection must start a request this soon after it is accepted, and
/// another this soon after the last one ended (Prometheus scrapes reuse
/// their connection at intervals shorter than this).
const FIRST_REQUEST: Duration = Duration::from_secs(10);
const IDLE: Duration = Duration::from_secs(30);
/// A connection is closed after this long, whatever it does (a client that
/// never reads holds no body for long; keep-alive clients reconnect).
const MAX_CONNECTION_AGE: Duration = Duration::from_secs(60);
/// Requests of one h2 connection at once.
const MAX_STREAMS: u32 = 16;
/// Request header bytes at most (HTTP/1.1; h2's header list the same).
const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Connections served at once; past it the one idle the longest is closed
/// for the newcomer (only when all have a request in flight is the
/// newcomer closed).
pub const MAX_CONNECTIONS: usize = 256;
/// Responses above [`LARGE_BODY`] being written at once; past it a large
/// answer is replaced by a 503, so slow readers cannot pin many copies of
/// a big debug document.
pub const MAX_LARGE_WRITES: usize = 8;
/// What counts as a large body.
pub const LARGE_BODY: usize = 256 * 1024;
/// Bodies above this are gzipped for clients that accept it (Prometheus
/// does: `Accept-Encoding: gzip`).
const GZIP_ABOVE: usize = 1024;
/// Bodies above this are sent as they are (see `respond`).
const GZIP_BELOW: usize = 4 << 20;
/// Pause after a failed accept (EMFILE: out of file descriptors), instead
/// of retrying at once in a loop that would starve the control thread.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Counts something in use while alive.
struct Slot(Rc<std::cell::Cell<usize>>);

impl Slot {
    fn take(c: &Rc<std::cell::Cell<usize>>, max: usize) -> Option<Slot> {
        (c.get() < max).then(|| {
            c.set(c.get() + 1);
            Slot(c.clone())
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// Answers a listener's own thread gives without the control thread
/// (kubelet's `/ready`): `None` passes the request on.
pub type Quick = Arc<dyn Fn(&Request) -> Option<Response> + Send + Sync>;

/// A request passed to the control thread, and where its answer goes.
type Forward = tokio::sync::mpsc::Sender<(Request, tokio::sync::oneshot::Sender<Response>)>;

/// How long a request waits for the control thread's answer.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests waiting for the control thread, per listener.
const FORWARD_QUEUE: usize = MAX_CONNECTIONS;

/// Serves `listener` from a thread of its own (`name`), which accepts,
/// parses, compresses and writes, and answers what `quick` answers itself;
/// the rest is handled by `handler` on the calling (control) thread's
/// local set. So a control thread busy with a large change or a hostile
/// input never makes kubelet's readiness probe fail. The thread ends when
/// the control thread's runtime does.
pub fn spawn(listener: std::net::TcpListener, name: &str, handler: Handler, quick: Quick) -> std::io::Result<()> {
    spawn_with(listener, name, handler, quick, Options::default())
}

/// What a listener takes beyond GET and HEAD.
#[derive(Clone, Default)]
pub struct Options {
    /// `PUT` requests, bodies of [`MAX_PUT_BODY`] at most (ControlZ).
    pub put: bool,
    /// `POST` requests, bodies of the webhooks' limit at most (the
    /// webhooks on the HTTP port, `--httpsAddr=""`).
    pub post: bool,
    /// Cleartext HTTP/2 connections are handed to the xDS cores (gRPC on
    /// the HTTP port, `--grpcAddr=""`); HTTP/1.1 is served here.
    pub grpc: Option<async_channel::Sender<std::net::TcpStream>>,
    /// `POST` of [`WHATIF_PATH`] (a what-if question, bodies of the
    /// webhooks' limit at most): the debug port.
    pub whatif: bool,
}

/// The what-if path (`discovery/whatif.rs`), the one debug path that takes
/// a body.
pub const WHATIF_PATH: &str = "/debug/whatif";

/// [`spawn`] with [`Options`].
pub fn spawn_with(
    listener: std::net::TcpListener,
    name: &str,
    handler: Handler,
    quick: Quick,
    options: Options,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(Request, tokio::sync::oneshot::Sender<Response>)>(FORWARD_QUEUE);
    tokio::task::spawn_local(async move {
        while let Some((req, reply)) = rx.recv().await {
            let handler = handler.clone();
            tokio::task::spawn_local(async move {
                let _ = reply.send(handler(req).await);
            });
        }
    });
    std::thread::Builder::new().name(name.to_owned()).spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => return tracing::error!(target: "default", error = %e, "debug HTTP thread: no runtime"),
        };
        tokio::task::LocalSet::new().block_on(&rt, async move {
            let listener = match TcpListener::from_std(listener) {
                Ok(l) => l,
                Err(e) => return tracing::error!(target: "default", error = %e, "debug HTTP thread: listener"),
            };
            let closed = tx.clone();
            tokio::select! {
                _ = serve(listener, tx, quick, options) => {}
                _ = closed.closed() => {}
            }
        });
    })?;
    Ok(())
}

/// Serves `listener` forever on the current (local) runtime, answering
/// with `quick` or through `forward`.
async fn serve(listener: TcpListener, forward: Forward, quick: Quick, options: Options) {
    let (put, post, whatif) = (options.put, options.post, options.whatif);
    let conns = istiod_httpd::conns::Registry::new(istiod_httpd::conns::Limits {
        max: MAX_CONNECTIONS,
        first_request: FIRST_REQUEST,
        idle: IDLE,
    });
    let large = Rc::new(std::cell::Cell::new(0));
    let posts = Rc::new(std::cell::Cell::new(0));
    let mut failures = 0u64;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                failures += 1;
                if failures.is_power_of_two() {
                    tracing::warn!(target: "default", error = %e, failures, "debug port: accept failed; backing off");
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let place = conns.admit();
        let (forward, quick, large, posts, grpc) =
            (forward.clone(), quick.clone(), large.clone(), posts.clone(), options.grpc.clone());
        tokio::task::spawn_local(async move {
            // Peeked on the connection's own task: a client slow to send
            // its first bytes delays nobody else's accept.
            let stream = match &grpc {
                Some(cores) => match hand_off_h2(stream, cores).await {
                    Some(s) => s,
                    None => return,
                },
                None => stream,
            };
            let _ = stream.set_nodelay(true);
            let requests = place.requests();
            let service = hyper::service::service_fn(move |req| {
                let (forward, quick, large, posts, busy) =
                    (forward.clone(), quick.clone(), large.clone(), posts.clone(), requests.start());
                async move {
                    // Busy until the body is written (a slow reader of a
                    // large answer is not idle).
                    let mut r = respond(req, peer, &forward, &quick, &large, &posts, (put, post, whatif)).await;
                    r.body_mut()._busy = Some(busy);
                    Ok::<_, std::convert::Infallible>(r)
                }
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(istiod_httpd::LocalExec);
            builder
                .http1()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEADER_BYTES.max(8192));
            builder
                .http2()
                .timer(hyper_util::rt::TokioTimer::new())
                .max_concurrent_streams(MAX_STREAMS)
                .max_header_list_size(MAX_HEADER_BYTES as u32);
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                // Silent, or idle when a newcomer needs the place: closed.
                _ = place.closing() => {}
                _ = tokio::time::sleep(MAX_CONNECTION_AGE) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn.as_mut()).await;
                }
            }
        });
    }
}

/// The client preface of cleartext HTTP/2 (RFC 9113, 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A connection that opens with HTTP/2's preface goes to the xDS cores
/// (`None`); any other is given back. Decided by peeking, within the
/// header timeout, at most the preface's 24 bytes.
async fn hand_off_h2(
    stream: tokio::net::TcpStream,
    cores: &async_channel::Sender<std::net::TcpStream>,
) -> Option<tokio::net::TcpStream> {
    let mut buf = [0u8; 24];
    let deadline = tokio::time::Instant::now() + HEADER_TIMEOUT;
    let mut seen = 0;
    let h2 = loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) => n,
            // Ended or silent: hyper's reading of it decides.
            _ => break false,
        };
        if n == 0 || buf[..n] != H2_PREFACE[..n] {
            break false;
        }
        if n == H2_PREFACE.len() {
            break true;
        }
        if n == seen {
            // Part of the preface so far: wait for more.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        seen = n;
    };
    if !h2 {
        return Some(stream);
    }
    match stream.into_std() {
        Ok(s) => {
            if let Err(e) = cores.try_send(s) {
                tracing::warn!(target: "grpc", error = %e, "gRPC on the HTTP port: no core takes the connection");
            }
        }
        Err(e) => tracing::warn!(target: "grpc", error = %e, "gRPC on the HTTP port: cannot hand the connection over"),
    }
    None
}

/// POST requests (webhook reviews) whose bodies are held at once, per
/// listener.
const MAX_POSTS: usize = 16;

/// A `PUT` body's size at most.
pub const MAX_PUT_BODY: usize = 64 * 1024;

/// The longest CPU profile a request may ask for: the debug ports close a
/// connection after a minute (Go refuses a profile longer than its
/// server's write timeout the same way).
pub const MAX_PROFILE_SECONDS: u64 = 45;

/// The seconds a profile request (`/debug/pprof/profile?seconds=`) asks
/// for: Go's 30 unless a positive number is given.
pub fn profile_seconds(req: &Request) -> u64 {
    req.param("seconds").and_then(|s| s.parse::<i64>().ok()).filter(|s| *s > 0).map_or(30, |s| s as u64)
}

/// How long a request may wait for its answer: a CPU profile takes the
/// seconds it asks for.
fn answer_timeout(req: &Request) -> Duration {
    let profile = if req.path == "/debug/pprof/profile" { profile_seconds(req) } else { 0 };
    FORWARD_TIMEOUT + Duration::from_secs(profile.min(MAX_PROFILE_SECONDS))
}

/// Answers one request: GET or HEAD (and PUT where `put`), gzipped when
/// asked and worth it.
async fn respond(
    req: hyper::Request<hyper::body::Incoming>,
    peer: std::net::SocketAddr,
    forward: &Forward,
    quick: &Quick,
    large: &Rc<std::cell::Cell<usize>>,
    posts: &Rc<std::cell::Cell<usize>>,
    (put, post, whatif): (bool, bool, bool),
) -> hyper::Response<Body> {
    use http_body_util::BodyExt as _;
    let method = req.method().clone();
    let whatif = whatif && req.uri().path() == WHATIF_PATH;
    let allowed = method == http::Method::GET
        || method == http::Method::HEAD
        || (put && method == http::Method::PUT)
        || ((post || whatif) && method == http::Method::POST);
    let gzip = req
        .headers()
        .get_all(http::header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|e| e.trim().split(';').next() == Some("gzip")));
    let resp = if !allowed {
        Response::text(
            405,
            if put { "only GET, HEAD and PUT are supported\n" } else { "only GET and HEAD are supported\n" },
        )
    } else {
        let target = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned();
        let bearer = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_owned);
        let content_type =
            req.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let path = req.uri().path();
        let webhook_path = istiod_webhook::is_webhook_path(path);
        // POST bodies (webhook reviews, up to 6 MiB) are read for the
        // webhooks' paths only, a few at once.
        let _posting = if method == http::Method::POST { Slot::take(posts, MAX_POSTS) } else { None };
        let body = if method == http::Method::POST && !webhook_path && !whatif {
            Err(Response::text(405, "only GET and HEAD are supported here\n"))
        } else if method == http::Method::POST && _posting.is_none() {
            Err(Response::text(503, format!("more than {MAX_POSTS} POST requests in flight; retry\n")))
        } else if method == http::Method::PUT || method == http::Method::POST {
            let max = if method == http::Method::POST { istiod_webhook::MAX_BODY } else { MAX_PUT_BODY };
            let limited = http_body_util::Limited::new(req.into_body(), max);
            match tokio::time::timeout(HEADER_TIMEOUT, limited.collect()).await {
                Ok(Ok(b)) => Ok(b.to_bytes()),
                // istiod's webhooks: apimachinery's RequestEntityTooLarge text, 400.
                Ok(Err(_)) if method == http::Method::POST => {
                    Err(Response::text(400, format!("Request entity too large: limit is {max}\n")))
                }
                Ok(Err(_)) => Err(Response::text(413, format!("a request body of at most {max} bytes\n"))),
                Err(_) => Err(Response::text(408, format!("the body did not arrive within {HEADER_TIMEOUT:?}\n"))),
            }
        } else {
            Ok(Bytes::new())
        };
        match body {
            Err(refusal) => refusal,
            Ok(body) => {
                let req = Request {
                    peer: Some(peer),
                    bearer,
                    method: method.clone(),
                    body,
                    content_type,
                    ..parse_target(&target)
                };
                answer(req, forward, quick).await
            }
        }
    };
    finish(resp, &method, gzip, large, (put, post || whatif))
}

/// The answer of `quick`, or of the control thread.
async fn answer(req: Request, forward: &Forward, quick: &Quick) -> Response {
    {
        match quick(&req) {
            Some(r) => r,
            None => {
                let (reply, answer) = tokio::sync::oneshot::channel();
                let timeout = answer_timeout(&req);
                match tokio::time::timeout(timeout, async {
                    forward.send((req, reply)).await.ok()?;
                    answer.await.ok()
                })
                .await
                {
                    Ok(Some(r)) => r,
                    Ok(None) => Response::text(503, "shutting down\n"),
                    Err(_) => Response::text(503, format!("no answer within {timeout:?}; retry\n")),
                }
            }
        }
    }
}

/// Compression and the bound on large answers in flight.
fn finish(
    resp: Response,
    method: &http::Method,
    gzip: bool,
    large: &Rc<std::cell::Cell<usize>>,
    (put, post): (bool, bool),
) -> hyper::Response<Body> {
    // Large answers held at once are bounded (slow readers).
    let slot = if resp.body.len() > LARGE_BODY {
        match Slot::take(large, MAX_LARGE_WRITES) {
            Some(s) => Some(s),
            None => {
                drop(resp);
                return build(Response::text(503, "too many large debug responses in flight; retry\n"), false, None);
            }
        }
    } else {
        None
    };
    // Compressed on this thread, so not the multi-megabyte debug dumps
    // (they would stall the control thread); /metrics and the rest are.
    // A profile is gzipped already.
    let gzip = gzip
        && resp.body.len() > GZIP_ABOVE
        && resp.body.len() <= GZIP_BELOW
        && resp.content_type != "application/octet-stream";
    let mut out = build(resp, gzip, slot);
    let taken = *method == http::Method::GET
        || *method == http::Method::HEAD
        || (put && *method == http::Method::PUT)
        || (post && *method == http::Method::POST);
    if !taken {
        let allow = match (put, post) {
            (true, _) => "GET, HEAD, PUT",
            (false, true) => "GET, HEAD, POST",
            _ => "GET, HEAD",
        };
        out.headers_mut().insert(http::header::ALLOW, http::HeaderValue::from_static(allow));
    }
    out
}

/// A response body that holds its large-answer slot until hyper has
/// written it (or the connection ended).
pub struct Body {
    inner: Full<Bytes>,
    _slot: Option<Slot>,
    _busy: Option<istiod_httpd::conns::Busy>,
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

fn build(r: Response, gzip: bool, slot: Option<Slot>) -> hyper::Response<Body> {
    let body = if gzip {
        use std::io::Write as _;
        let mut e = flate2::write::GzEncoder::new(Vec::with_capacity(r.body.len() / 4), flate2::Compression::fast());
        let _ = e.write_all(&r.body);
        Bytes::from(e.finish().unwrap_or_default())
    } else {
        r.body
    };
    let mut out = hyper::Response::new(Body { inner: Full::new(body), _slot: slot, _busy: None });
    *out.status_mut() = http::StatusCode::from_u16(r.status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    out.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(r.content_type));
    if gzip {
        out.headers_mut().insert(http::header::CONTENT_ENCODING, http::HeaderValue::from_static("gzip"));
    }
    out.headers_mut().insert(http::header::VARY, http::HeaderValue::from_static("Accept-Encoding"));
    out
}

/// Splits `/path?a=b&c=d`, percent-decoding the parameters.
pub fn parse_target(target: &str) -> Request {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    Request {
        path: path.to_owned(),
        query,
        peer: None,
        bearer: None,
        method: http::Method::GET,
        body: Bytes::new(),
        content_type: None,
        target: target.to_owned(),
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Some(v) = std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One HTTP/1.1 response off `s`: status, headers (lower-case names),
    /// body (none for HEAD).
    async fn read_response(s: &mut tokio::net::TcpStream, head: bool) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let mut buf = Vec::new();
        let end = loop {
            let mut b = [0u8; 1];
            assert_eq!(s.read(&mut b).await.unwrap(), 1, "connection closed: {}", String::from_utf8_lossy(&buf));
            buf.push(b[0]);
            if buf.ends_with(b"\r\n\r\n") {
                break buf.len();
            }
        };
        let text = String::from_utf8_lossy(&buf[..end]).into_owned();
        let mut lines = text.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers: Vec<(String, String)> =
            lines.filter_map(|l| l.split_once(": ")).map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned())).collect();
        let len: usize = headers.iter().find(|(k, _)| k == "content-length").map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0; if head { 0 } else { len }];
        s.read_exact(&mut body).await.unwrap();
        (status, headers, body)
    }

    fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
        h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Several requests on one
    /// connection, HEAD, gzip for clients that accept it, a clear 405.
    #[test]
    fn keep_alive_head_gzip_and_other_methods() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let handler: Handler = Rc::new(|r: Request| {
                Box::pin(async move {
                    Response::text(200, if r.path == "/big" { "metric 1\n".repeat(1000) } else { "small\n".into() })
                })
            });
            spawn(l, "test-http", handler, Arc::new(|_: &Request| None)).unwrap();
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
            let (status, _, body) = read_response(&mut s, false).await;
            assert_eq!((status, body.as_slice()), (200, &b"small\n"[..]));
            // The same connection again: HEAD says the length, sends no body.
            s.write_all(b"HEAD /big HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
            let (status, h, _) = read_response(&mut s, true).await;
            assert_eq!((status, header(&h, "content-length")), (200, Some("9000")));
            // gzip when accepted, and it decodes to the answer.
            s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\nAccept-Encoding: deflate, gzip;q=1.0\r\n\r\n").await.unwrap();
            let (status, h, body) = read_response(&mut s, false).await;
            assert_eq!((status, header(&h, "content-encoding")), (200, Some("gzip")));
            assert!(body.len() < 1000, "{} bytes", body.len());
            let mut text = String::new();
            std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(body.as_slice()), &mut text).unwrap();
            assert_eq!(text, "metric 1\n".repeat(1000));
            // Other methods: 405 naming the allowed ones.
            s.write_all(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").await.unwrap();
            let (status, h, _) = read_response(&mut s, false).await;
            assert_eq!((status, header(&h, "allow")), (405, Some("GET, HEAD")));
        });
    }

    /// What `quick` answers is answered while the control thread is held
    /// (issue #31: a bulk change or a hostile input failed kubelet's
    /// probe); the rest waits for it and is then answered.
    #[test]
    fn quick_answers_do_not_wait_for_a_busy_control_thread() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let handler: Handler = Rc::new(|_: Request| Box::pin(async { Response::text(200, "slow\n") }));
            let quick: Quick = Arc::new(|r: &Request| (r.path == "/ready").then(|| Response::text(200, "ready\n")));
            spawn(l, "test-http", handler, quick).unwrap();
            let get = move |path: &'static str| {
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let t = std::time::Instant::now();
                    let mut s = std::net::TcpStream::connect(addr).unwrap();
                    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
                    let mut out = String::new();
                    s.read_to_string(&mut out).unwrap();
                    (t.elapsed(), std::time::Instant::now(), out)
                })
            };
            tokio::task::yield_now().await;
            let (ready, other) = (get("/ready"), get("/debug/x"));
            // The control thread is held for 1.5 s.
            std::thread::sleep(Duration::from_millis(1500));
            let released = std::time::Instant::now();
            let (took, _, out) = ready.join().unwrap();
            assert!(out.ends_with("ready\n") && took < Duration::from_millis(1000), "{took:?} {out}");
            // The forwarded one is answered once the control thread runs.
            let (_, done, out) = tokio::task::spawn_blocking(move || other.join().unwrap()).await.unwrap();
            assert!(out.ends_with("slow\n") && done >= released, "{out}");
        });
    }

    #[test]
    fn targets_and_percent_decoding() {
        let r = parse_target("/debug/config_dump?proxyID=sidecar%7E10.0.0.1%7Ea.b%7Eb.svc.cluster.local&x");
        assert_eq!(r.path, "/debug/config_dump");
        assert_eq!(r.param("proxyID"), Some("sidecar~10.0.0.1~a.b~b.svc.cluster.local"));
        assert_eq!(r.param("x"), Some(""));
        assert_eq!(parse_target("/a?b=%zz%2").param("b"), Some("%zz%2"));
        assert_eq!(parse_target("/ready").query, vec![]);
    }
}
