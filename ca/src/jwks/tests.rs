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

/// istiod's `jwksBlockedIP` (pilot/pkg/model/jwks_resolver.go) and
/// `security.IsLinkLocal`/`IsKnownCloudMetadataAddress`: link-local and
/// cloud metadata addresses always, and the configured ranges; private
/// and loopback ones only when configured.
#[test]
fn blocked_addresses_are_istiods() {
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let none: Vec<(std::net::IpAddr, u8)> = Vec::new();
    for (addr, why) in [
        ("169.254.169.254", "is link-local"),
        ("fe80::1", "is link-local"),
        ("::ffff:169.254.1.1", "is link-local"),
        ("224.0.0.251", "is link-local"),
        ("100.100.100.200", "is a known cloud metadata address"),
        ("fd00:ec2::254", "is a known cloud metadata address"),
    ] {
        let got = super::blocked(ip(addr), &none).unwrap_or_default();
        assert!(got.ends_with(why), "{addr}: {got}");
    }
    for addr in ["10.0.0.1", "127.0.0.1", "::1", "100.100.100.201", "192.0.2.1"] {
        assert_eq!(super::blocked(ip(addr), &none), None, "{addr}");
    }
    let cidrs = vec![super::parse_cidr("10.0.0.0/8").unwrap(), super::parse_cidr("fd00::/8").unwrap()];
    assert_eq!(
        super::blocked(ip("10.1.2.3"), &cidrs).as_deref(),
        Some("connection blocked: resolved IP 10.1.2.3 is in blocked CIDR range 10.0.0.0/8")
    );
    assert!(super::blocked(ip("fd12::1"), &cidrs).is_some());
    assert_eq!(super::blocked(ip("11.0.0.1"), &cidrs), None);
    assert_eq!(super::parse_cidr("10.0.0.0/33"), None);
}
