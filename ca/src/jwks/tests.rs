//! The fetcher against a loopback HTTP/1.1 server, with istiod's rules
//! (pilot/pkg/model/jwks_resolver.go): OpenID discovery when `jwksUri` is
//! empty, only JWKS content accepted, non-2xx answers are errors.

use std::collections::HashMap;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// Serves `routes` (path -> status, body) on loopback; returns the base URL.
async fn serve(routes: HashMap<&'static str, (u16, String)>) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else { return };
            let routes = routes.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                let head = String::from_utf8_lossy(&got);
                let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
                let (status, body) = routes.get(path.as_str()).cloned().unwrap_or((404, "no such path".into()));
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    base
}

const KEYS: &str = r#"{"keys":[{"kty":"RSA","kid":"k1","e":"AQAB","n":"abc"}]}"#;

#[tokio::test(flavor = "current_thread")]
async fn fetches_by_uri_and_through_openid_discovery() {
    let big = format!(r#"{{"keys":[],"pad":"{}"}}"#, "x".repeat(MAX_BODY));
    let routes = HashMap::from([
        ("/jwks", (200, KEYS.to_owned())),
        ("/not-jwks", (200, r#"{"secret":"data"}"#.to_owned())),
        ("/html", (200, "<html>".to_owned())),
        ("/down", (503, "upstream unavailable".to_owned())),
        ("/big", (200, big)),
    ]);
    let base = serve(routes.clone()).await;
    // A second server serves the discovery document, pointing at the
    // key set on the first.
    let mut routes = routes;
    routes.insert("/issuer/.well-known/openid-configuration", (200, format!(r#"{{"jwks_uri":"{base}/jwks"}}"#)));
    let base = serve(routes).await;
    let f = Fetcher::new();
    let key = |uri: &str| ("issuer".to_owned(), uri.to_owned());

    assert_eq!(f.key_set(&key(&format!("{base}/jwks"))).await.unwrap(), KEYS);
    let oidc = (format!("{base}/issuer/"), String::new());
    assert_eq!(f.key_set(&oidc).await.unwrap(), KEYS, "empty jwksUri: the issuer's discovery document");

    let e = f.key_set(&key(&format!("{base}/not-jwks"))).await.unwrap_err();
    assert!(e.contains("not a valid JWKS"), "istiod's validateJWKSFormat: {e}");
    let e = f.key_set(&key(&format!("{base}/html"))).await.unwrap_err();
    assert!(e.contains("not a valid JWKS"), "{e}");
    let e = f.key_set(&key(&format!("{base}/down"))).await.unwrap_err();
    assert!(e.contains("status 503") && e.contains("upstream unavailable"), "{e}");
    let e = f.key_set(&key(&format!("{base}/big"))).await.unwrap_err();
    assert!(e.contains("length limit exceeded"), "a body over 1 MiB is not read: {e}");
    let e = f.key_set(&key("ftp://example.com/k")).await.unwrap_err();
    assert!(e.contains("unsupported scheme"), "{e}");
    let e = f.key_set(&("http://127.0.0.1:1/none".to_owned(), String::new())).await.unwrap_err();
    assert!(e.contains("GET http://127.0.0.1:1/none/.well-known/openid-configuration"), "{e}");
}
