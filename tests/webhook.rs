//! The validation webhook end to end (issue #13): AdmissionReviews over
//! HTTPS on `--httpsAddr`, with istiod's certificate from its CA, through
//! Python's ssl over HTTP/1.1 and the `h2` crate over HTTP/2, the two ways
//! the API server calls a webhook. istiod's
//! pkg/webhooks/validation/server/server.go is the reference: the answer
//! has the request's version and uid, an invalid object is refused naming
//! the field, bad requests get HTTP errors, and the server serves on.

use crate::server;
use crate::webhook_client as client;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use server::{BOOKINFO, Server, free_port};

use client::http1;

/// One POST over HTTP/2.
fn http2(addr: SocketAddr, root: &std::path::Path, path: &str, body: &Value) -> (u16, Value) {
    client::post_all(addr, root, path, &[body.to_string().into_bytes()]).remove(0)
}

fn review(version: &str, uid: &str, op: &str, object: Value) -> Value {
    json!({
        "apiVersion": format!("admission.k8s.io/{version}"),
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "networking.istio.io", "version": "v1", "kind": object["kind"]},
            "resource": {"group": "networking.istio.io", "version": "v1", "resource": "virtualservices"},
            "namespace": "bookinfo",
            "operation": op,
            "object": object,
        },
    })
}

fn vs(weight: i64) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": "reviews", "namespace": "bookinfo"},
        "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}, "weight": weight}]}]},
    })
}

#[test]
fn the_validation_webhook_judges_istio_objects_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let https = free_port();
    let s = Server::start(
        std::path::Path::new(BOOKINFO),
        &["--httpsAddr", &https.to_string()],
        &[("ISTIOD_RS_SELF_SIGNED_CA_DIR", dir.path().to_str().unwrap())],
        None,
    );
    let root = dir.path().join("ca-cert.pem");
    server::wait_for("the webhook port", Duration::from_secs(10), || std::net::TcpStream::connect(https).is_ok());
    client::wait_ready(https, &root);

    // HTTP/1.1: a valid object, v1; the uid echoed.
    let post = |body: &Value| json!({"method": "POST", "path": "/validate", "body": body.to_string()});
    let ok = http1(https, &root, &post(&review("v1", "u-1", "CREATE", vs(100))));
    assert_eq!((ok["status"].as_u64(), ok["alpn"].as_str()), (Some(200), Some("http/1.1")), "{ok}");
    let answer: Value = serde_json::from_str(ok["body"].as_str().unwrap()).unwrap();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["response"], json!({"uid": "u-1", "allowed": true}));
    // An invalid one, v1beta1: refused, the field named.
    let bad = http1(https, &root, &post(&review("v1beta1", "u-2", "UPDATE", vs(-5))));
    let answer: Value = serde_json::from_str(bad["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        (&answer["apiVersion"], &answer["response"]["uid"]),
        (&json!("admission.k8s.io/v1beta1"), &json!("u-2"))
    );
    assert_eq!(answer["response"]["allowed"], false);
    let msg = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.starts_with("configuration is invalid: ") && msg.contains("spec.http[0].route[0].weight"), "{msg}");

    // HTTP/2, the same answers.
    let (status, answer) = http2(https, &root, "/validate", &review("v1", "u-3", "CREATE", vs(100)));
    assert_eq!((status, &answer["response"]), (200, &json!({"uid": "u-3", "allowed": true})));
    let (_, answer) = http2(https, &root, "/validate/", &review("v1", "u-4", "CREATE", vs(-5)));
    assert_eq!(answer["response"]["allowed"], false, "{answer}");

    // Bad requests: HTTP errors, istiod's wording where it has one.
    for (req, want) in [
        (json!({"method": "POST", "path": "/validate", "content_type": "text/yaml", "body": "{}"}), 415),
        (json!({"method": "POST", "path": "/validate", "body": ""}), 400),
        (json!({"method": "POST", "path": "/validate", "body_size": 7 << 20}), 400),
        (json!({"method": "GET", "path": "/validate", "body": ""}), 405),
        (json!({"method": "POST", "path": "/inject", "body": "{}"}), 503),
        (json!({"method": "POST", "path": "/other", "body": "{}"}), 404),
    ] {
        let got = http1(https, &root, &req);
        assert_eq!(got["status"].as_u64(), Some(want), "{req}: {got}");
    }
    // Not an AdmissionReview: a refusal saying why.
    let got = http1(https, &root, &json!({"method": "POST", "path": "/validate", "body": "{\"kind\":\"Pod\"}"}));
    let answer: Value = serde_json::from_str(got["body"].as_str().unwrap()).unwrap();
    assert!(answer["response"]["status"]["message"].as_str().unwrap().starts_with("could not decode body"), "{answer}");
    // A client that never finishes its handshake holds nothing up.
    let _idle = std::net::TcpStream::connect(https).unwrap();
    let again = http1(https, &root, &post(&review("v1", "u-5", "CREATE", vs(100))));
    assert_eq!(again["status"].as_u64(), Some(200));

    // istiod's counters.
    let metrics = server::get(s.monitoring, "/metrics").unwrap().1;
    for line in [
        "galley_validation_passed{group=\"networking.istio.io\",resource=\"virtualservices\",version=\"v1\"} 3",
        "galley_validation_failed{group=\"networking.istio.io\",reason=\"invalid_resource\",resource=\"virtualservices\",version=\"v1\"} 2",
        "galley_validation_http_error{status=\"415\"} 1",
        "galley_validation_http_error{status=\"400\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
}

/// Clients that stall are cut off, and others are served meanwhile: a
/// request head that does not arrive within 10 s closes the connection,
/// a body that does not arrive within 30 s is answered 408.
#[test]
fn stalled_clients_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let https = free_port();
    let _s = Server::start(
        std::path::Path::new(BOOKINFO),
        &["--httpsAddr", &https.to_string()],
        &[("ISTIOD_RS_SELF_SIGNED_CA_DIR", dir.path().to_str().unwrap())],
        None,
    );
    let root = dir.path().join("ca-cert.pem");
    server::wait_for("the webhook port", Duration::from_secs(10), || std::net::TcpStream::connect(https).is_ok());
    client::wait_ready(https, &root);
    let body = review("v1", "u-s", "CREATE", vs(100)).to_string();
    let (r1, r2) = (root.clone(), root.clone());
    // Half a request line and head: "POST /validate HTTP/1.1\r\nHost".
    let head = std::thread::spawn(move || {
        http1(https, &r1, &json!({"method": "POST", "path": "/validate", "body": "{}", "send_only": 30, "timeout": 40}))
    });
    // The whole head and 10 bytes of the body.
    let body_len = body.len();
    let slow_body = std::thread::spawn(move || {
        let head_len = format!(
            "POST /validate HTTP/1.1\r\nHost: istiod.istio-system.svc\r\nContent-Type: application/json\r\n\
             Content-Length: {body_len}\r\nConnection: close\r\n\r\n"
        )
        .len();
        http1(
            https,
            &r2,
            &json!({"method": "POST", "path": "/validate", "body": body, "send_only": head_len + 10, "timeout": 60}),
        )
    });
    // Meanwhile the webhook answers others.
    std::thread::sleep(Duration::from_secs(1));
    let ok = http1(
        https,
        &root,
        &json!({"method": "POST", "path": "/validate", "body": review("v1", "u-ok", "CREATE", vs(100)).to_string()}),
    );
    assert_eq!(ok["status"].as_u64(), Some(200), "{ok}");
    let head = head.join().unwrap();
    let elapsed = head["elapsed"].as_f64().unwrap();
    assert!((9.0..20.0).contains(&elapsed), "the stalled head is closed after 10 s: {head}");
    let slow_body = slow_body.join().unwrap();
    assert_eq!(slow_body["status"].as_u64(), Some(408), "{slow_body}");
    let elapsed = slow_body["elapsed"].as_f64().unwrap();
    assert!((29.0..45.0).contains(&elapsed), "the stalled body is answered after 30 s: {slow_body}");
}
