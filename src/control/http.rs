//! A deliberately small HTTP/1.1 server for the debug (`--httpAddr`) and
//! monitoring (`--monitoringAddr`) ports: GET only, one request per
//! connection, bounded request size and time. These ports serve operators
//! and Prometheus, not proxies.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Content type.
    pub content_type: &'static str,
    /// Body.
    pub body: String,
}

impl Response {
    /// 200 with a JSON body.
    pub fn json(v: &serde_json::Value) -> Self {
        Self {
            status: 200,
            content_type: "application/json",
            body: serde_json::to_string_pretty(v).unwrap_or_default(),
        }
    }

    /// A plain-text response.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self { status, content_type: "text/plain; charset=utf-8", body: body.into() }
    }
}

/// A request: path and decoded query parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Path without the query.
    pub path: String,
    /// Query parameters, in order.
    pub query: Vec<(String, String)>,
}

impl Request {
    /// A query parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Handles a request.
pub type Handler = Rc<dyn Fn(Request) -> Pin<Box<dyn Future<Output = Response>>>>;

const MAX_REQUEST: usize = 16 * 1024;
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A response must be written within this, or the connection is dropped
/// (a client that never reads holds no body for long).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; past it new ones are closed on accept.
pub const MAX_CONNECTIONS: usize = 256;
/// Responses above [`LARGE_BODY`] being written at once; past it a large
/// answer is replaced by a 503, so slow readers cannot pin many copies of
/// a big debug document.
pub const MAX_LARGE_WRITES: usize = 8;
/// What counts as a large body.
pub const LARGE_BODY: usize = 256 * 1024;
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

/// Serves `listener` forever on the current (local) runtime.
pub async fn serve(listener: TcpListener, handler: Handler) {
    let conns = Rc::new(std::cell::Cell::new(0));
    let large = Rc::new(std::cell::Cell::new(0));
    let mut failures = 0u64;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                failures += 1;
                if failures.is_power_of_two() {
                    tracing::warn!(target: "default", error = %e, failures, "debug port: accept failed; backing off");
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Some(slot) = Slot::take(&conns, MAX_CONNECTIONS) else {
            drop(stream); // over the limit: closed at once
            continue;
        };
        let (handler, large) = (handler.clone(), large.clone());
        tokio::task::spawn_local(async move {
            let _ = handle(stream, handler, &large).await;
            drop(slot);
        });
    }
}

async fn handle(mut stream: TcpStream, handler: Handler, large: &Rc<std::cell::Cell<usize>>) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        let mut chunk = [0u8; 1024];
        let n = match tokio::time::timeout(READ_TIMEOUT, stream.read(&mut chunk)).await {
            Ok(r) => r?,
            Err(_) => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if buf.len() > MAX_REQUEST {
            return write(&mut stream, &Response::text(431, "request header too large\n")).await;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let resp = if method != "GET" && method != "HEAD" {
        Response::text(405, "only GET is supported\n")
    } else {
        handler(parse_target(target)).await
    };
    let _large_slot = if resp.body.len() > LARGE_BODY {
        match Slot::take(large, MAX_LARGE_WRITES) {
            Some(s) => Some(s),
            None => {
                drop(resp);
                let busy = Response::text(503, "too many large debug responses in flight; retry\n");
                return write(&mut stream, &busy).await;
            }
        }
    } else {
        None
    };
    write(&mut stream, &resp).await
}

async fn write(stream: &mut TcpStream, r: &Response) -> std::io::Result<()> {
    let reason = match r.status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        r.status,
        r.content_type,
        r.body.len()
    );
    let io = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(r.body.as_bytes()).await?;
        stream.shutdown().await
    };
    tokio::time::timeout(WRITE_TIMEOUT, io)
        .await
        .unwrap_or_else(|_| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "debug response not read in time")))
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
    Request { path: path.to_owned(), query }
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
