//! istiod fetches a RequestAuthentication's `jwksUri` itself (the default
//! `PILOT_JWT_ENABLE_REMOTE_JWKS`), inlines the key set into the served
//! `jwt_authn` filter, and pushes a rotated key set on refresh
//! (pilot/pkg/model/jwks_resolver.go). Checked on what a proxy is sent.

use crate::ads_client as client;
use crate::server;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::{connect, runtime};
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::envoy::service::discovery::v3::DiscoveryRequest;
use istiod_proto::prost_types::{Struct, Value, value::Kind as ValueKind};
use istiod_proto::type_url;
use server::{BOOKINFO, Server, copy_dir, http_body_server};

fn keys(kid: &str) -> String {
    format!(r#"{{"keys":[{{"kty":"RSA","kid":"{kid}","e":"AQAB","n":"xyz"}}]}}"#)
}

fn productpage() -> Node {
    let labels = Struct {
        fields: BTreeMap::from([(
            "app".to_owned(),
            Value { kind: Some(ValueKind::StringValue("productpage".into())) },
        )]),
    };
    Node {
        id: "sidecar~10.244.0.20~productpage-v1-1.bookinfo~bookinfo.svc.cluster.local".into(),
        metadata: Some(Struct {
            fields: BTreeMap::from([("LABELS".to_owned(), Value { kind: Some(ValueKind::StructValue(labels)) })]),
        }),
        ..Default::default()
    }
}

/// The bundled mesh plus a RequestAuthentication on productpage whose keys
/// are at `uri`, served with `env`.
fn mesh_with_rule(issuer: &str, uri: &str, env: &[(&str, &str)]) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(Path::new(BOOKINFO), dir.path());
    std::fs::write(
        dir.path().join("jwt-remote.yaml"),
        format!(
            "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: remote, namespace: bookinfo}}\n\
             spec: {{selector: {{matchLabels: {{app: productpage}}}}, jwtRules: [{{issuer: \"{issuer}\", jwksUri: \"{uri}\"}}]}}\n"
        ),
    )
    .unwrap();
    (Server::start(dir.path(), &[], env, None), dir)
}

/// A SotW stream of productpage asking for its listeners.
async fn lds(s: &Server) -> client::AdsClient {
    let mut c = connect(s.grpc, false).await;
    c.sotw(DiscoveryRequest { node: Some(productpage()), type_url: type_url::LISTENER.into(), ..Default::default() });
    c
}

#[test]
fn istiod_fetches_inlines_and_refreshes_the_key_set() {
    let body = Arc::new(Mutex::new(keys("first-kid")));
    let uri = http_body_server(body.clone());
    let (s, _dir) = mesh_with_rule("https://remote.example", &uri, &[("PILOT_JWT_PUB_KEY_REFRESH_INTERVAL", "1s")]);
    runtime().block_on(async {
        let mut c = lds(&s).await;
        // The first answer may predate the fetch (the public-only key set,
        // as istiod before its first fetch completes); the fetched one is
        // pushed.
        let has = |r: &istiod_proto::envoy::service::discovery::v3::DiscoveryResponse, kid: &str| {
            r.resources.iter().any(|a| a.value.windows(kid.len()).any(|w| w == kid.as_bytes()))
        };
        let mut r = c.recv().await;
        for _ in 0..10 {
            if has(&r, "first-kid") {
                break;
            }
            c.ack(&r, &[]);
            r = c.recv().await;
        }
        assert!(has(&r, "first-kid"), "the fetched key set is inlined in virtualInbound's jwt_authn");
        assert!(has(&r, "sXchDaQebHnPiGvy"), "the bundled rule's inline keys are still there");
        c.ack(&r, &[]);
        // The issuer rotates its keys: the next refresh pushes them.
        *body.lock().unwrap() = keys("second-kid");
        let r = c.recv().await;
        assert!(has(&r, "second-kid") && !has(&r, "first-kid"), "the rotated key set is pushed");
    });
    assert!(!s.log().contains("cannot fetch JWKS"), "{}", s.log());
}

#[test]
fn an_unreachable_jwks_uri_serves_the_public_only_key_set_and_says_why() {
    let (s, _dir) = mesh_with_rule("https://down.example", "http://127.0.0.1:1/jwks", &[]);
    // After the fetch has failed (not merely before it is done), the
    // public-only key set is what the proxy gets.
    server::wait_for("the fetch error in the log", Duration::from_secs(10), || s.log().contains("cannot fetch JWKS"));
    assert!(s.log().contains("http://127.0.0.1:1/jwks"), "{}", s.log());
    runtime().block_on(async {
        let mut c = lds(&s).await;
        let r = c.recv().await;
        // istiod's PublicOnlyJwks modulus.
        let marker = b"0xObjM0UvS_oaazjpEYlAbwctEJ4L8pH3";
        assert!(r.resources.iter().any(|a| a.value.windows(marker.len()).any(|w| w == marker)));
    });
}

/// istiod's JWKS fetch guard (jwks_resolver.go `jwksBlockedIP`): a
/// link-local `jwksUri` (a cloud metadata endpoint) is never fetched, and
/// `BLOCKED_CIDRS_IN_JWKS_URIS` refuses its ranges, for an address literal
/// and for a name that resolves into them (`localhost`); each says why.
#[test]
fn jwks_uris_in_blocked_ranges_are_not_fetched() {
    let (s, _dir) = mesh_with_rule("https://meta.example", "http://169.254.169.254/latest/meta-data", &[]);
    server::wait_for("the refusal", Duration::from_secs(10), || s.log().contains("cannot fetch JWKS"));
    assert!(s.log().contains("connection blocked: resolved IP 169.254.169.254 is link-local"), "{}", s.log());
    drop(s);
    let body = Arc::new(Mutex::new(keys("blocked-kid")));
    let uri = http_body_server(body);
    let by_name = uri.replace("127.0.0.1", "localhost");
    for target in [uri.as_str(), by_name.as_str()] {
        let (s, _dir) = mesh_with_rule(
            "https://blocked.example",
            target,
            &[("BLOCKED_CIDRS_IN_JWKS_URIS", "127.0.0.0/8, ::1/128, bad")],
        );
        server::wait_for("the refusal", Duration::from_secs(10), || s.log().contains("cannot fetch JWKS"));
        assert!(s.log().contains("is in blocked CIDR range"), "{target}: {}", s.log());
        assert!(s.log().contains("Failed to parse CIDR range \"bad\""), "{}", s.log());
    }
    // Not blocked: fetched.
    let (s, _dir) = mesh_with_rule("https://blocked.example", &by_name, &[]);
    server::wait_for("the fetch", Duration::from_secs(10), || {
        let m = server::get(s.monitoring, "/metrics").unwrap().1;
        crate::operations::series(&m, "pilot_jwks_resolver_network_fetch_success_total ").is_some()
    });
    assert!(!s.log().contains("cannot fetch JWKS"), "{}", s.log());
}
