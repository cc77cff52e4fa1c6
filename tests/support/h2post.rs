//! POSTs to the webhook port over HTTP/2, as the API server calls
//! webhooks: the `h2` crate over rustls (ALPN h2), the server's name
//! checked against the given root.

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
