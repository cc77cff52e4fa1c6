//! Interop with Python grpcio (gRPC's C core), plaintext and TLS.

#[path = "support/echo.rs"]
mod echo;
#[path = "../../proto/tests/support/python.rs"]
mod python;

use std::ffi::OsStr;

use istiod_xds::h2::Limits;
use istiod_xds::server::tls;

fn run_client(args: &[&OsStr]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/grpcio_client.py");
    let out = std::process::Command::new(python::python()).arg(script).args(args).output().expect("run python");
    let text = python::text(&out);
    assert!(out.status.success(), "grpcio client failed:\n{text}");
    assert!(text.contains("6 passed, 0 failed"), "{text}");
}

#[test]
fn grpcio_plaintext() {
    let server = echo::start(2, Limits::default(), None);
    let addr = server.addrs()[0].to_string();
    run_client(&[OsStr::new(&addr)]);
    server.shutdown();
}

#[test]
fn grpcio_tls() {
    let (cert, key) = echo::self_signed();
    let cfg = tls::server_config(cert.as_bytes(), key.as_bytes()).unwrap();
    let server = echo::start(1, Limits::default(), Some(cfg));
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &cert).unwrap();
    let addr = server.addrs()[1].to_string();
    run_client(&[OsStr::new(&addr), OsStr::new("--tls-ca"), ca.as_os_str()]);
    server.shutdown();
}
