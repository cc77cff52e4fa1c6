//! Interop with nghttp2's command-line client (`nghttp`, Debian's
//! nghttp2-client, installed by scripts/test): an h2c request with prior
//! knowledge against the echo service.

#[path = "support/echo.rs"]
mod echo;

use std::process::Command;

use istiod_xds::h2::Limits;

fn nghttp(args: &[&str]) -> (bool, String) {
    let out = Command::new("nghttp")
        .args(args)
        .output()
        .expect("nghttp is missing: scripts/test installs it (apt-get install nghttp2-client)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn nghttp_unary_call() {
    let server = echo::start(1, Limits::default(), None);
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("req.bin");
    std::fs::write(&body, echo::grpc_frame(b"from nghttp")).unwrap();
    let url = format!("http://{}{}", server.addrs()[0], echo::UNARY);
    let (ok, text) = nghttp(&[
        "-v",
        "--no-dep",
        "-H",
        "content-type: application/grpc",
        "-H",
        "te: trailers",
        "-d",
        body.to_str().unwrap(),
        "--",
        &url,
    ]);
    // nghttp prints the frames it receives; the server's answer must carry
    // grpc-status 0 in trailers and echo the message.
    assert!(ok, "{text}");
    assert!(text.contains("recv SETTINGS frame"), "{text}");
    assert!(text.contains(":status: 200"), "{text}");
    assert!(text.contains("grpc-status: 0"), "{text}");
    // The response body (printed after the frame log) is the echoed message.
    assert!(text.contains("from nghttp"), "{text}");
    assert!(text.contains("recv DATA frame <length=16"), "5-byte prefix + 11 bytes: {text}");
    server.shutdown();
}

#[test]
fn nghttp_get_is_rejected_cleanly() {
    let server = echo::start(1, Limits::default(), None);
    let url = format!("http://{}/", server.addrs()[0]);
    let (_, text) = nghttp(&["-v", "--no-dep", &url]);
    assert!(text.contains(":status: 405"), "{text}");
    assert!(text.contains("grpc-status: 13"), "{text}");
    server.shutdown();
}
