//! Interop with the `h2` crate as an independent HTTP/2 client, over real
//! loopback sockets into the glommio server.

#[path = "support/echo.rs"]
mod echo;

use std::net::SocketAddr;

use bytes::{Buf, Bytes, BytesMut};
use h2::client;
use http::{HeaderMap, Request};
use istiod_xds::h2::Limits;
use tokio::net::TcpStream;

async fn connect(addr: SocketAddr) -> client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    // h2's defaults give 64 KiB windows; raise them so large messages flow.
    let (send, conn) = client::Builder::new()
        .initial_window_size(4 << 20)
        .initial_connection_window_size(16 << 20)
        .handshake(tcp)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

fn request(path: &str) -> Request<()> {
    Request::builder()
        .method("POST")
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// Reads the response body and trailers: (messages, trailers).
async fn read_all(mut body: h2::RecvStream) -> (Vec<Bytes>, HeaderMap) {
    let mut buf = BytesMut::new();
    let mut msgs = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        buf.extend_from_slice(&chunk);
        while buf.len() >= 5 {
            let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
            if buf.len() < 5 + len {
                break;
            }
            buf.advance(5);
            msgs.push(buf.split_to(len).freeze());
        }
    }
    let trailers = body.trailers().await.unwrap().unwrap_or_default();
    (msgs, trailers)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn unary_and_unknown_method() {
    let server = echo::start(1, Limits::default(), None);
    let addr = server.addrs()[0];
    runtime().block_on(async {
        let mut send = connect(addr).await;
        let (resp, mut stream) = send.send_request(request(echo::UNARY), false).unwrap();
        stream.send_data(echo::grpc_frame(b"hello"), true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/grpc");
        let (msgs, trailers) = read_all(resp.into_body()).await;
        assert_eq!(msgs, vec![Bytes::from("hello")]);
        assert_eq!(trailers["grpc-status"], "0");

        let (resp, _) = send.send_request(request("/istiod.test.Echo/Nope"), true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.headers()["grpc-status"], "12", "trailers-only UNIMPLEMENTED");
    });
    server.shutdown();
}

#[test]
fn bidi_many_messages_and_large_ones() {
    let server = echo::start(2, Limits::default(), None);
    let addr = server.addrs()[0];
    runtime().block_on(async {
        let mut send = connect(addr).await;
        let (resp, mut stream) = send.send_request(request(echo::BIDI), false).unwrap();
        let sizes: Vec<usize> = (0..500).map(|i| if i % 100 == 0 { 3 << 20 } else { 1 + i * 37 }).collect();
        let expected: usize = sizes.iter().sum();
        let writer = {
            let sizes = sizes.clone();
            tokio::spawn(async move {
                for (i, n) in sizes.iter().enumerate() {
                    let frame = echo::grpc_frame(&vec![(i % 256) as u8; *n]);
                    stream.reserve_capacity(frame.len());
                    let mut rest = frame;
                    while !rest.is_empty() {
                        let cap = std::future::poll_fn(|cx| stream.poll_capacity(cx)).await.unwrap().unwrap();
                        let chunk = rest.split_to(cap.min(rest.len()));
                        stream.send_data(chunk, false).unwrap();
                    }
                }
                stream.send_data(Bytes::new(), true).unwrap();
            })
        };
        let resp = resp.await.unwrap();
        let (msgs, trailers) = read_all(resp.into_body()).await;
        writer.await.unwrap();
        assert_eq!(trailers["grpc-status"], "0");
        assert_eq!(msgs.len(), sizes.len());
        assert_eq!(msgs.iter().map(Bytes::len).sum::<usize>(), expected);
        for (i, m) in msgs.iter().enumerate() {
            assert!(m.iter().all(|b| *b == (i % 256) as u8), "message {i} corrupted");
        }
    });
    server.shutdown();
}

#[test]
fn many_connections_across_cores() {
    let server = echo::start(2, Limits::default(), None);
    let addr = server.addrs()[0];
    runtime().block_on(async {
        let mut tasks = Vec::new();
        for c in 0..50 {
            tasks.push(tokio::spawn(async move {
                let mut send = connect(addr).await;
                for i in 0..10 {
                    let body = format!("conn {c} call {i}");
                    let (resp, mut stream) = send.send_request(request(echo::UNARY), false).unwrap();
                    stream.send_data(echo::grpc_frame(body.as_bytes()), true).unwrap();
                    let (msgs, trailers) = read_all(resp.await.unwrap().into_body()).await;
                    assert_eq!(msgs, vec![Bytes::from(body)]);
                    assert_eq!(trailers["grpc-status"], "0");
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    server.shutdown();
}

#[test]
fn server_push_respects_client_flow_control() {
    let server = echo::start(1, Limits::default(), None);
    let addr = server.addrs()[0];
    runtime().block_on(async {
        let mut send = connect(addr).await;
        let (resp, mut stream) = send.send_request(request(echo::PUSH), false).unwrap();
        let mut req = 200u32.to_be_bytes().to_vec();
        req.extend_from_slice(&(256 * 1024u32).to_be_bytes());
        stream.send_data(echo::grpc_frame(&req), true).unwrap();
        let (msgs, trailers) = read_all(resp.await.unwrap().into_body()).await;
        assert_eq!(trailers["grpc-status"], "0");
        assert_eq!(msgs.len(), 200, "50 MiB through a 16 MiB queue cap, resumed on drain");
    });
    server.shutdown();
}
