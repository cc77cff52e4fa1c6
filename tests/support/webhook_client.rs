//! Clients of the webhook port, the two ways the API server calls
//! webhooks: HTTP/2 (the `h2` crate over rustls, ALPN h2) and HTTP/1.1
//! (Python's ssl, tests/py/webhook_client.py), the server's name checked
//! against the given root. A test crate using it declares `mod python`.

#![allow(dead_code, reason = "each test binary uses part of the support code")]
use std::net::SocketAddr;
use std::path::Path;

use serde_json::Value;

/// POSTs each body over one HTTP/2 connection (the `h2` crate over rustls,
/// ALPN h2, as the API server calls webhooks): status and JSON answer.
pub(crate) fn post_all(addr: SocketAddr, root: &Path, path: &str, bodies: &[Vec<u8>]) -> Vec<(u16, Value)> {
    let tls = istiod_loadgen::proxy::tls(root, "istiod.istio-system.svc").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let io = tls.connector.connect(tls.server_name.clone(), tcp).await.unwrap();
        assert_eq!(io.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "HTTP/2 negotiated");
        let (client, conn) = h2::client::handshake(io).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut out = Vec::new();
        for body in bodies {
            let mut client = client.clone().ready().await.unwrap();
            let req = http::Request::builder()
                .method("POST")
                .uri(format!("https://istiod.istio-system.svc{path}"))
                .header("content-type", "application/json")
                .body(())
                .unwrap();
            let (resp, mut send) = client.send_request(req, false).unwrap();
            send.send_data(bytes::Bytes::from(body.clone()), true).unwrap();
            let resp = resp.await.unwrap();
            let status = resp.status().as_u16();
            let mut body = resp.into_body();
            let mut data = Vec::new();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.unwrap();
                let _ = body.flow_control().release_capacity(chunk.len());
                data.extend_from_slice(&chunk);
            }
            out.push((status, serde_json::from_slice(&data).unwrap_or(Value::Null)));
        }
        out
    })
}

/// One request through tests/py/webhook_client.py; any failure fails the
/// test.
pub(crate) fn http1(addr: SocketAddr, root: &Path, req: &Value) -> Value {
    http1_once(addr, root, req).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until the webhook port answers `GET /ready` over TLS. A
/// connection the server closes before answering (as it may while its
/// serving certificate is first loaded, in the moments after the port
/// opens) is tried again, three times at most; any other failure fails
/// the test. Only here: later requests get no second chance.
pub(crate) fn wait_ready(addr: SocketAddr, root: &Path) {
    let ready = serde_json::json!({"method": "GET", "path": "/ready", "body": ""});
    for _ in 0..3 {
        match http1_once(addr, root, &ready) {
            Err(e) if e.contains("SSLEOFError") || e.contains("ConnectionResetError") => {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            other => {
                other.unwrap_or_else(|e| panic!("{e}"));
                return;
            }
        }
    }
    http1(addr, root, &ready);
}

fn http1_once(addr: SocketAddr, root: &Path, req: &Value) -> Result<Value, String> {
    use std::io::Write;
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/webhook_client.py");
    let mut child = std::process::Command::new(crate::python::python())
        .arg(script)
        .args([addr.to_string(), root.to_str().unwrap().to_owned()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(req.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("webhook_client.py: {text}\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    serde_json::from_str(text.trim()).map_err(|e| format!("{e}: {text}"))
}
