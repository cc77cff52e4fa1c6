//! An ingress gateway end to end (issue #14): the running binary serves a
//! router, played by Python's grpcio with upstream's xds-protos types (no
//! code of ours), over TLS on `--secureGRPCAddr` with a `JWT_RULE` token
//! for the gateway's namespace. The client decodes what it is served and
//! decides, as Envoy's router would, where each request of a table goes;
//! then a Secret is rotated in the config directory and the new
//! certificate reaches the gateway over SDS, alone. References: istiod's
//! pilot/pkg/networking/core/gateway.go (listeners, routes),
//! pilot/pkg/xds/sds.go (credentials, authorization, pushes).

use crate::issuer;
use crate::python;
use crate::server;

use std::io::BufRead;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use issuer::Issuer;
use serde_json::{Value, json};
use server::{Server, free_port, http_body_server};

const INPUT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/gateway/input");
const API_INPUT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/gateway-api/input");
const LABELS: &str = r#"{"istio": "ingressgateway"}"#;
const HTTP: &str = "http.8080";
const HTTPS: &str = "https.443.https.bookinfo-gateway.istio-system";
const MTLS: &str = "https.443.https-secure.bookinfo-gateway.istio-system";
const PRODUCTPAGE: &str = "cluster:outbound|9080||productpage.bookinfo.svc.cluster.local";
const REVIEWS: &str = "cluster:outbound|9080||reviews.bookinfo.svc.cluster.local";

/// (route configuration, host, path) → where the request goes.
const TABLE: &[(&str, &str, &str, &str)] = &[
    (HTTP, "bookinfo.example.com", "/productpage", PRODUCTPAGE),
    (HTTP, "BookInfo.Example.com", "/static/style.css", PRODUCTPAGE),
    (HTTP, "bookinfo.example.com", "/api/v1/products/1", PRODUCTPAGE),
    (HTTP, "bookinfo.example.com", "/reviews/0", REVIEWS),
    (HTTP, "www.bookinfo.example.com", "/productpage", PRODUCTPAGE),
    // Only the port-80 server names www: not on 443.
    (HTTPS, "www.bookinfo.example.com", "/productpage", "404"),
    (HTTP, "bookinfo.example.com", "/", "redirect:/productpage"),
    // The mesh-only VirtualService for the same host is not on the gateway.
    (HTTP, "bookinfo.example.com", "/mesh", "404"),
    (HTTP, "secure.example.com", "/anything", "https-redirect"),
    (HTTP, "unknown.example.com", "/productpage", "404"),
    (HTTP, "egress.example.com", "/", "404"),
    (HTTPS, "bookinfo.example.com", "/productpage", PRODUCTPAGE),
    (HTTPS, "secure.example.com", "/", "404"),
    // A destination without a port: the service's only port.
    (MTLS, "secure.example.com", "/anything", REVIEWS),
];

struct Gateway {
    issuer: Issuer,
    dir: tempfile::TempDir,
    server: Server,
    secure: std::net::SocketAddr,
    root: String,
    token: String,
}

/// The binary on a copy of the mesh in `input`, with a `JWT_RULE` issuer
/// on loopback and a self-signed CA whose root the client trusts; the
/// token is for service account `sa` of `ns`.
fn start(input: &str, (ns, sa): (&str, &str)) -> Gateway {
    let issuer = Issuer::new();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir(&config).unwrap();
    server::copy_dir(Path::new(input), &config);
    let ca = dir.path().join("ca");
    let uri = http_body_server(Arc::new(Mutex::new(issuer.jwks.clone())));
    let iss = "https://issuer.test";
    let rule = format!(r#"{{"issuer":"{iss}","jwks_uri":"{uri}","audiences":["istio-ca"]}}"#);
    let secure = free_port();
    let server = Server::start(
        &config,
        &["--secureGRPCAddr", &secure.to_string()],
        &[("JWT_RULE", &rule), ("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca.to_str().unwrap())],
        None,
    );
    server::wait_for("the JWT_RULE key set", Duration::from_secs(20), || {
        server.log().contains("JWT_RULE key set fetched")
    });
    let token = issuer.token(iss, &format!("system:serviceaccount:{ns}:{sa}"));
    let root = ca.join("ca-cert.pem").to_str().unwrap().to_owned();
    Gateway { issuer, dir, server, secure, root, token }
}

impl Gateway {
    /// A token of the test issuer for `sub`.
    fn issuer_token(&self, sub: &str) -> String {
        self.issuer.token("https://issuer.test", sub)
    }
}

fn client(addr: std::net::SocketAddr, root: &str, token: &str, env: &[(&str, String)]) -> std::process::Child {
    client_of(addr, root, token, ("istio-system", LABELS), TABLE, env)
}

/// tests/py/gateway_client.py as a router of `ns` with `labels`, deciding
/// the requests of `table`.
fn client_of(
    addr: std::net::SocketAddr,
    root: &str,
    token: &str,
    (ns, labels): (&str, &str),
    table: &[(&str, &str, &str, &str)],
    env: &[(&str, String)],
) -> std::process::Child {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/gateway_client.py");
    let requests: Vec<Value> = table.iter().map(|(r, h, p, _)| json!([r, h, p])).collect();
    std::process::Command::new(python::python())
        .arg(script)
        .args([addr.to_string(), root.to_owned(), token.to_owned(), ns.into(), labels.into()])
        .env("REQUESTS", serde_json::to_string(&requests).unwrap())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn lines(child: &mut std::process::Child) -> std::io::Lines<std::io::BufReader<std::process::ChildStdout>> {
    std::io::BufReader::new(child.stdout.take().unwrap()).lines()
}

/// The client's first line, its report (on failure, what the client and
/// the server logged).
fn first_report(child: &mut std::process::Child, server: &Server) -> Value {
    let line = lines(child).next().and_then(Result::ok).unwrap_or_default();
    serde_json::from_str(&line).unwrap_or_else(|e| {
        let _ = child.kill();
        let mut err = String::new();
        if let Some(mut s) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut s, &mut err);
        }
        panic!("{e}: {line:?}\n{err}\n{}", server.log())
    })
}

fn stderr(mut child: std::process::Child) -> String {
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_gateway_is_served_its_listeners_routes_and_credentials_and_a_rotation() {
    let g = start(INPUT, ("istio-system", "istio-ingressgateway-service-account"));
    let extra = json!(["kubernetes://bookinfo/bookinfo-cert", "kubernetes://broken-cert", "kubernetes://missing"]);
    let mut c = client(g.secure, &g.root, &g.token, &[("FOLLOW", "20".into()), ("EXTRA_SDS", extra.to_string())]);
    let mut out = lines(&mut c);
    let first = out.next().and_then(Result::ok).unwrap_or_default();
    let report: Value = match serde_json::from_str(&first) {
        Ok(v) => v,
        Err(e) => panic!("{e}: {first:?}\n{}\n{}", stderr(c), g.server.log()),
    };
    assert!(report.get("code").is_none(), "{report}");

    // Listeners: one per resolved port (80 → 8080, 443 → 8443), chains
    // per server.
    let l = &report["listeners"];
    let names: Vec<&String> = l.as_object().unwrap().keys().collect();
    assert_eq!(names, ["0.0.0.0_15443", "0.0.0.0_31400", "0.0.0.0_8080", "0.0.0.0_8443"], "{report}");
    assert_eq!(l["0.0.0.0_8080"]["chains"], json!([{"sni": [], "rds": HTTP}]));
    assert_eq!(
        l["0.0.0.0_8443"]["chains"],
        json!([
            {"sni": ["bookinfo.example.com"], "certs": ["kubernetes://bookinfo-cert"], "require_client_certificate": false, "rds": HTTPS},
            {"sni": ["secure.example.com"], "certs": ["kubernetes://secure-cert"], "ca": "kubernetes://secure-cert-cacert",
             "require_client_certificate": true, "rds": MTLS},
        ])
    );
    assert_eq!(
        l["0.0.0.0_31400"]["chains"],
        json!([{"sni": [], "tcp": "outbound|9000||tcp-echo.bookinfo.svc.cluster.local"}]),
        "the TCP server; the conflicting Gateway's HTTP server on its port is left out"
    );
    assert_eq!(
        l["0.0.0.0_15443"]["chains"],
        json!([{"sni": ["nginx.example.com"], "tcp": "outbound|443||nginx.bookinfo.svc.cluster.local"}])
    );
    assert_eq!(report["routes"], json!([HTTP, MTLS, HTTPS]));

    // Routing decisions.
    for (i, (route, host, path, want)) in TABLE.iter().enumerate() {
        assert_eq!(report["decisions"][i], *want, "{route} {host}{path}: {report}");
    }

    // Credentials: the listeners' own, decoded and matching their keys;
    // another namespace's Secret, a Secret without keys and a missing one
    // are not served.
    let s = &report["secrets"];
    assert_eq!(s.as_object().unwrap().len(), 3, "{s}");
    assert_eq!(
        s["kubernetes://bookinfo-cert"],
        json!({"type": "certificate", "cn": "bookinfo.example.com", "key_matches": true})
    );
    assert_eq!(s["kubernetes://secure-cert"]["cn"], "secure.example.com");
    assert_eq!(s["kubernetes://secure-cert-cacert"], json!({"type": "ca", "cn": "test root"}), "ca.crt of secure-cert");

    // Clusters: the mesh's outbound ones, no passthrough.
    let clusters = report["clusters"].as_array().unwrap();
    assert!(clusters.contains(&json!("outbound|9080||productpage.bookinfo.svc.cluster.local")), "{clusters:?}");
    assert!(!clusters.iter().any(|c| c.as_str().unwrap().contains("Passthrough")), "{clusters:?}");

    // /debug/config_dump for the gateway: its listeners, routes and
    // credentials, private keys redacted as istiod's dump shows them
    // (debug.go getConfigDumpByResourceType: inline bytes "[redacted]").
    let id = "router~10.1.0.20~istio-ingressgateway-5d8f.istio-system~istio-system.svc.cluster.local";
    let (status, body) = server::get(g.server.http, &format!("/debug/config_dump?proxyID={id}")).unwrap();
    assert_eq!(status, 200, "{body}");
    let dump: Value = serde_json::from_str(&body).unwrap();
    let config = |t: &str| dump["configs"].as_array().unwrap().iter().find(|c| c["@type"] == t).cloned().unwrap();
    let listeners = config("type.googleapis.com/envoy.admin.v3.ListenersConfigDump");
    assert_eq!(listeners["dynamicListeners"].as_array().unwrap().len(), 4, "{listeners}");
    let routes = config("type.googleapis.com/envoy.admin.v3.RoutesConfigDump");
    assert_eq!(routes["dynamicRouteConfigs"].as_array().unwrap().len(), 3);
    let secrets = config("type.googleapis.com/envoy.admin.v3.SecretsConfigDump");
    let dumped = secrets["dynamicActiveSecrets"].as_array().unwrap();
    assert_eq!(dumped.len(), 3, "{secrets}");
    for s in dumped.iter().filter(|s| s["secret"].get("tlsCertificate").is_some()) {
        assert_eq!(s["secret"]["tlsCertificate"]["privateKey"], json!({"inlineBytes": "W3JlZGFjdGVkXQ=="}), "{s}");
        assert!(s["secret"]["tlsCertificate"]["certificateChain"]["inlineBytes"].is_string(), "{s}");
    }

    // /debug/configz reports what is wrong: the conflicting server, the
    // keyless credential (none of the Gateways names it, so nothing), and
    // no missing backend.
    let (_, body) = server::get(g.server.http, "/debug/config_report").unwrap();
    let configz: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        configz["gateways"]["rejectedServers"],
        json!([{"gateway": "istio-system/conflicting-gateway", "port": 31400,
                "reason": "this port's protocol cannot carry the server's (another Gateway's server holds it)"}]),
        "{configz}"
    );
    assert_eq!(configz["gateways"]["credentials"], json!([]), "{configz}");
    assert_eq!(configz["gateways"]["missingBackends"], json!([]), "{configz}");

    // Rotation: a new certificate for bookinfo-cert reaches the gateway
    // over SDS, and only that name is pushed.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["bookinfo.example.com".to_owned()]).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, "rotated.example.com");
    let cert = params.self_signed(&key).unwrap();
    let secrets = g.dir.path().join("config/secrets.yaml");
    let text = std::fs::read_to_string(&secrets).unwrap();
    let rotated = format!(
        "{text}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: bookinfo-cert, namespace: istio-system}}\n\
         type: kubernetes.io/tls\nstringData:\n  tls.crt: {:?}\n  tls.key: {:?}\n",
        cert.pem(),
        key.serialize_pem()
    );
    // The old document goes: rewrite the file without it.
    let without_old =
        remove_document(&rotated, "name: bookinfo-cert, namespace: istio-system}\ntype: kubernetes.io/tls\ndata:");
    std::fs::write(&secrets, without_old).unwrap();
    let push = out.next().and_then(Result::ok).unwrap_or_default();
    let push: Value = serde_json::from_str(&push).unwrap_or_else(|e| panic!("{e}: {push:?}\n{}", g.server.log()));
    assert_eq!(push["type"], "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret", "{push}");
    assert_eq!(push["names"], json!(["kubernetes://bookinfo-cert"]), "only the rotated name: {push}");
    assert_eq!(
        push["secrets"]["kubernetes://bookinfo-cert"],
        json!({"type": "certificate", "cn": "rotated.example.com", "key_matches": true})
    );
    let _ = c.kill();
    let _ = c.wait();

    // The plaintext port serves the same router's listeners but no
    // credentials: SDS needs a verified identity (istiod's sds.go).
    let mut plain = client(g.server.grpc, "-", "-", &[]);
    let report = first_report(&mut plain, &g.server);
    assert_eq!(report["listeners"].as_object().map(|l| l.len()), Some(4), "{report}");
    assert_eq!(report["secrets"], json!({}), "{report}");
    let _ = plain.wait();
}

/// The objects of a test mesh directory, applied to the fake API server.
fn apply_dir(api: &istiod_kubewatch::fake::FakeApi, dir: &str) {
    use istiod_kubewatch::fake::K8S_GATEWAYS;
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).unwrap();
            let api_version = v["apiVersion"].as_str().unwrap_or_default();
            let plural = match v["kind"].as_str().unwrap_or_default() {
                "Namespace" => "namespaces",
                "Service" => "services",
                "Secret" => "secrets",
                "VirtualService" => "virtualservices",
                "DestinationRule" => "destinationrules",
                "Gateway" if api_version.starts_with("gateway.networking.k8s.io") => K8S_GATEWAYS,
                "Gateway" => "gateways",
                "GatewayClass" => "gatewayclasses",
                "HTTPRoute" => "httproutes",
                "GRPCRoute" => "grpcroutes",
                "ReferenceGrant" => "referencegrants",
                "ListenerSet" => "listenersets",
                _ => continue,
            };
            api.apply(plural, v);
        }
    }
}

/// In a cluster, istiod asks the API server whether a gateway's service
/// account may list the Secrets of its namespace before it serves one of
/// them (pilot/pkg/credentials/kube/secrets.go `Authorize`, a
/// SubjectAccessReview; pilot/pkg/xds/sds.go `filterAuthorizedResources`):
/// a gateway whose account may gets its certificates; one whose account
/// may not gets only the CA (public), and the review istiod makes is the
/// one the API server saw.
#[test]
fn in_a_cluster_a_gateway_reads_secrets_only_if_rbac_lets_its_service_account() {
    use istiod_kubewatch::fake::{core_resources, istio_resources};
    let api = server::fake_api();
    for r in core_resources().into_iter().chain(istio_resources()) {
        api.install(r);
    }
    apply_dir(&api, INPUT);
    let allowed = "system:serviceaccount:istio-system:ingress";
    let denied = "system:serviceaccount:istio-system:no-secrets";
    api.add_token("tok-allowed", allowed, &["istio-ca"]);
    api.add_token("tok-denied", denied, &["istio-ca"]);
    api.grant(allowed, "istio-system", "list", "secrets");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let ca = dir.path().join("ca");
    let secure = free_port();
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--secureGRPCAddr", &secure.to_string()],
        &[("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca.to_str().unwrap())],
        None,
    );
    let root = ca.join("ca-cert.pem").to_str().unwrap().to_owned();
    // Every credential a router was served, on its first report and the
    // pushes after it, until `done` says so or the client ends.
    let served = |token: &str, sa: &str, follow: bool, done: &dyn Fn(&serde_json::Map<String, Value>) -> bool| {
        let follow = if follow { "15" } else { "0" };
        let env = [("FOLLOW", follow.to_owned()), ("SERVICE_ACCOUNT", sa.to_owned()), ("POD", format!("{sa}-pod"))];
        let mut c = client(secure, &root, token, &env);
        let mut out = lines(&mut c);
        let first = out.next().and_then(Result::ok).unwrap_or_default();
        let report: Value = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first:?}\n{}", s.log()));
        assert!(report.get("code").is_none(), "{report}");
        let mut secrets = report["secrets"].as_object().cloned().unwrap_or_default();
        while !done(&secrets) {
            let Some(Ok(line)) = out.next() else { break };
            let push: Value = serde_json::from_str(&line).unwrap();
            secrets.extend(push["secrets"].as_object().cloned().unwrap_or_default());
        }
        let _ = c.kill();
        let _ = c.wait();
        secrets
    };
    let mine = served("tok-allowed", "ingress", true, &|s| s.contains_key("kubernetes://bookinfo-cert"));
    assert_eq!(
        mine.get("kubernetes://bookinfo-cert"),
        Some(&json!({"type": "certificate", "cn": "bookinfo.example.com", "key_matches": true})),
        "{mine:?}\n{}",
        s.log()
    );
    assert_eq!(mine["kubernetes://secure-cert"]["cn"], "secure.example.com");
    // Refused: only the CA, which needs no review.
    let theirs = served("tok-denied", "no-secrets", false, &|_| true);
    let names: Vec<&String> = theirs.keys().collect();
    assert_eq!(names, ["kubernetes://secure-cert-cacert"], "{theirs:?}");
    server::wait_for("the refusal logged", Duration::from_secs(10), || {
        s.log().contains("no-secrets/istio-system is not authorized to read secrets")
    });
    // With the refusal in force (not pending), a new stream of that
    // service account still gets only the CA; one of the allowed account
    // gets its certificate at once.
    let again = served("tok-denied", "no-secrets", false, &|_| true);
    let names: Vec<&String> = again.keys().collect();
    assert_eq!(names, ["kubernetes://secure-cert-cacert"], "{again:?}");
    let mine_again = served("tok-allowed", "ingress", false, &|_| true);
    assert!(mine_again.contains_key("kubernetes://bookinfo-cert"), "{mine_again:?}");
    let reviews = api.access_reviews();
    for user in [allowed, denied] {
        let asked: Vec<&Value> = reviews.iter().filter(|r| r["user"] == user).collect();
        assert_eq!(asked.len(), 1, "one review per service account, cached: {reviews:?}");
        assert_eq!(
            asked[0]["resourceAttributes"],
            json!({"namespace": "istio-system", "verb": "list", "resource": "secrets"})
        );
    }
}

/// `text` without the YAML document that contains `marker`.
fn remove_document(text: &str, marker: &str) -> String {
    text.split("\n---\n").filter(|d| !d.contains(marker)).collect::<Vec<_>>().join("\n---\n")
}

const API_HTTP: &str = "http.8080";
const API_HTTPS: &str = "https.443.default.gw~istio-autogenerated-k8s-gateway~https.gateways";
const API_SHOP: &str = "https.443.default.shop-listeners~istio-autogenerated-k8s-gateway~shop.apps";

/// The Gateway API's routing decisions (istiod's conversion.go and gateway
/// semantics: whole-segment prefixes, a backend without a grant is a
/// cluster that does not exist, so a 500).
const API_TABLE: &[(&str, &str, &str, &str)] = &[
    (
        API_HTTP,
        "www.example.com",
        "/api/users",
        "weighted:outbound|8080||api.apps.svc.cluster.local,outbound|8080||api-canary.apps.svc.cluster.local",
    ),
    (API_HTTP, "www.example.com", "/apiary", "cluster:outbound|80||web.apps.svc.cluster.local"),
    (API_HTTP, "www.example.com", "/old", "redirect:/new"),
    (API_HTTP, "www.example.com", "/v1/items", "cluster:outbound|8080||api.apps.svc.cluster.local"),
    (API_HTTP, "www.example.com", "/", "cluster:outbound|80||web.apps.svc.cluster.local"),
    (
        API_HTTP,
        "grpc.example.com",
        "/helloworld.Greeter/SayHello",
        "cluster:outbound|50051||greeter.apps.svc.cluster.local",
    ),
    (API_HTTP, "grpc.example.com", "/helloworld.Greeter/Other", "404"),
    (API_HTTP, "other.org", "/", "404"),
    (API_HTTPS, "secure.example.com", "/reports/1", "cluster:outbound|80||reports.other.svc.cluster.local"),
    // No object can take this name: nothing receives the refused traffic.
    (API_HTTPS, "secure.example.com", "/ungranted", "cluster:outbound|80||ref~not~permitted.gateway-api.invalid"),
    (API_HTTPS, "secure.example.com", "/", "cluster:outbound|80||web.apps.svc.cluster.local"),
    // The ListenerSet's listener, and the route attached to it.
    (API_SHOP, "shop.example.com", "/cart/1", "cluster:outbound|8080||api.apps.svc.cluster.local"),
    (API_SHOP, "shop.example.com", "/", "cluster:outbound|80||web.apps.svc.cluster.local"),
];

/// The Kubernetes Gateway API end to end: the router behind Gateway `gw`'s
/// Service (`gw-istio`) is served its listeners, what istiod makes of the
/// HTTPRoutes and the GRPCRoute, and its `kubernetes-gateway://`
/// certificate; /debug/configz names the route its listener refused.
#[test]
fn a_gateway_api_gateway_routes_as_its_http_and_grpc_routes_say() {
    let g = start(API_INPUT, ("gateways", "gw-istio"));
    let labels = r#"{"gateway.networking.k8s.io/gateway-name": "gw"}"#;
    let mut c = client_of(
        g.secure,
        &g.root,
        &g.token,
        ("gateways", labels),
        API_TABLE,
        &[("SERVICE_ACCOUNT", "gw-istio".into())],
    );
    let report = first_report(&mut c, &g.server);
    let listeners: Vec<&String> = report["listeners"].as_object().unwrap().keys().collect();
    assert_eq!(listeners, ["0.0.0.0_8080", "0.0.0.0_8443"], "{report}");
    assert_eq!(
        report["listeners"]["0.0.0.0_8443"]["chains"],
        json!([{"sni": ["secure.example.com"], "certs": ["kubernetes-gateway://gateways/secure-cert"],
                "require_client_certificate": false, "rds": API_HTTPS},
               {"sni": ["shop.example.com"], "certs": ["kubernetes-gateway://apps/shop-cert"],
                "require_client_certificate": false, "rds": API_SHOP}])
    );
    for (i, (route, host, path, want)) in API_TABLE.iter().enumerate() {
        assert_eq!(report["decisions"][i], *want, "{route} {host}{path}: {report}");
    }
    let clusters = report["clusters"].as_array().unwrap();
    assert!(!clusters.iter().any(|c| c.as_str().unwrap().contains("ref-not-permitted")), "{clusters:?}");
    assert_eq!(
        report["secrets"]["kubernetes-gateway://gateways/secure-cert"],
        json!({"type": "certificate", "cn": "secure.example.com", "key_matches": true})
    );
    // The ListenerSet's Secret, in its own namespace (the Gateway's
    // allowedListeners being the handshake; istiod's mergeGateways).
    assert_eq!(report["secrets"]["kubernetes-gateway://apps/shop-cert"]["key_matches"], true, "{report}");
    let _ = c.wait();
    // Another service account of the namespace, even verified, does not get
    // the Gateway's key (istiod's mergeGateways: the Gateway's service
    // account only).
    let other = g.issuer_token("system:serviceaccount:gateways:other");
    let mut c = client_of(g.secure, &g.root, &other, ("gateways", labels), &[], &[("SERVICE_ACCOUNT", "other".into())]);
    let report = first_report(&mut c, &g.server);
    assert_eq!(report["listeners"].as_object().map(|l| l.len()), Some(2), "{report}");
    assert_eq!(report["secrets"], json!({}), "{report}");
    let (_, body) = server::get(g.server.http, "/debug/config_report").unwrap();
    let configz: Value = serde_json::from_str(&body).unwrap();
    let problems = configz["gateways"]["gatewayApi"].as_array().unwrap();
    assert!(
        problems.iter().any(|p| p["route"] == "HTTPRoute/other/intruder" && p["reason"] == "NotAllowedByListeners"),
        "{problems:?}"
    );
    assert!(problems.iter().any(|p| p["reason"] == "RefNotPermitted"), "{problems:?}");
    assert!(problems.iter().any(|p| p["listenerSet"] == "other/stray" && p["reason"] == "NotAllowed"), "{problems:?}");

    // PILOT_ENABLE_STRICT_GATEWAY_MERGING (istiod's default,
    // filterStrictGatewayMerging): an Istio Gateway of another namespace
    // that selects the managed Gateway API gateway's pods is left out (no
    // other namespace's servers or credentials on its listeners), counted
    // in pilot_total_rejected_configs; one of the Gateway's own namespace
    // joins.
    let classic = |name: &str, ns: &str, port: u16| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: {ns}}}\n\
             spec:\n  selector: {{gateway.networking.k8s.io/gateway-name: gw}}\n\
             \x20 servers: [{{port: {{number: {port}, name: http, protocol: HTTP}}, hosts: ['*']}}]\n"
        )
    };
    let gateways = || {
        let (_, body) = server::get(g.server.http, "/debug/config_report").unwrap();
        serde_json::from_str::<Value>(&body).unwrap()["istioConfig"]["Gateway"].as_u64().unwrap_or(0)
    };
    let before = gateways();
    let extra = [classic("intruder", "other", 9090), classic("neighbour", "gateways", 9091)].join("---\n");
    std::fs::write(g.dir.path().join("config/strict.yaml"), extra).unwrap();
    server::wait_for("the Istio Gateways read", Duration::from_secs(20), || gateways() == before + 2);
    let mut c =
        client_of(g.secure, &g.root, &g.token, ("gateways", labels), &[], &[("SERVICE_ACCOUNT", "gw-istio".into())]);
    let report = first_report(&mut c, &g.server);
    let listeners: Vec<&String> = report["listeners"].as_object().unwrap().keys().collect();
    assert_eq!(listeners, ["0.0.0.0_8080", "0.0.0.0_8443", "0.0.0.0_9091"], "{report}");
    let _ = c.wait();
    let (_, metrics) = server::get(g.server.monitoring, "/metrics").unwrap();
    assert!(
        metrics.contains("pilot_total_rejected_configs{type=\"gateway\",name=\"other/intruder\"} 1"),
        "{}",
        metrics.lines().filter(|l| l.contains("rejected")).collect::<Vec<_>>().join("\n")
    );
}

/// The Gateway API's status in Kubernetes (istiod's conditions.go, written
/// by the holder of the `istio-gateway-status-leader-default` Lease): the
/// GatewayClass accepted; the Gateway accepted and programmed with its
/// Service as address, each listener with its attached routes; a route
/// accepted by its listener with its references resolved, one refused
/// (NotAllowedByListeners), one with a backend it may not reference
/// (RefNotPermitted). Against the fake API server, which speaks list/watch
/// and the status subresource.
#[test]
fn gateway_api_status_is_written_as_istiod_writes_it() {
    use istiod_kubewatch::fake::{K8S_GATEWAYS, core_resources, gateway_api_resources};
    let api = server::fake_api();
    for r in core_resources().into_iter().chain(gateway_api_resources()) {
        api.install(r);
    }
    for entry in std::fs::read_dir(API_INPUT).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).unwrap();
            let plural = match v["kind"].as_str().unwrap_or_default() {
                "Namespace" => "namespaces",
                "Service" => "services",
                "Secret" => "secrets",
                "GatewayClass" => "gatewayclasses",
                "Gateway" => K8S_GATEWAYS,
                "HTTPRoute" => "httproutes",
                "GRPCRoute" => "grpcroutes",
                "ReferenceGrant" => "referencegrants",
                "ListenerSet" => "listenersets",
                _ => continue,
            };
            api.apply(plural, v);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--secureGRPCAddr", ""],
        &[("POD_NAME", "istiod-a"), ("POD_NAMESPACE", "istio-system")],
        None,
    );
    let condition = |status: &Value, t: &str| {
        status["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == t).cloned().unwrap_or(Value::Null)
    };
    let programmed = || {
        api.get(K8S_GATEWAYS, "gateways", "gw")
            .is_some_and(|g| condition(&g["status"], "Programmed")["status"] == "True")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !programmed() {
        assert!(std::time::Instant::now() < deadline, "no Gateway status:\n{}", s.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let gw = api.get(K8S_GATEWAYS, "gateways", "gw").unwrap();
    let status = &gw["status"];
    assert_eq!(condition(status, "Accepted")["reason"], "Accepted", "{status}\n{}", s.log());
    assert_eq!(status["addresses"], json!([{"type": "Hostname", "value": "gw-istio.gateways.svc.cluster.local"}]));
    let listeners = status["listeners"].as_array().unwrap();
    let attached: Vec<(&str, u64)> =
        listeners.iter().map(|l| (l["name"].as_str().unwrap(), l["attachedRoutes"].as_u64().unwrap())).collect();
    assert_eq!(attached, [("http", 2), ("https", 1)], "web and greeter; secure (not the intruder)");
    assert!(condition(status, "Accepted")["lastTransitionTime"].is_string());
    let route = |name: &str, ns: &str| {
        server::wait_for(name, Duration::from_secs(10), || {
            api.get("httproutes", ns, name).is_some_and(|r| r["status"]["parents"].is_array())
        });
        api.get("httproutes", ns, name).unwrap()["status"]["parents"][0].clone()
    };
    let web = route("web", "apps");
    assert_eq!(web["controllerName"], "istio.io/gateway-controller");
    assert_eq!(web["parentRef"]["sectionName"], "http");
    assert_eq!(condition(&web, "Accepted")["status"], "True");
    assert_eq!(condition(&web, "ResolvedRefs")["status"], "True");
    let intruder = route("intruder", "other");
    assert_eq!(condition(&intruder, "Accepted")["reason"], "NotAllowedByListeners", "{intruder}");
    let secure = route("secure", "apps");
    assert_eq!(condition(&secure, "ResolvedRefs")["reason"], "RefNotPermitted", "{secure}");
    // The ListenerSet the Gateway takes, its listener with the route
    // attached by `kind: ListenerSet`; the one it does not take.
    assert_eq!(status["attachedListenerSets"], 1, "{status}");
    let set = |ns: &str, name: &str| {
        server::wait_for(name, Duration::from_secs(10), || {
            api.get("listenersets", ns, name).is_some_and(|r| r["status"]["conditions"].is_array())
        });
        api.get("listenersets", ns, name).unwrap()["status"].clone()
    };
    let shop = set("apps", "shop-listeners");
    assert_eq!(condition(&shop, "Accepted")["status"], "True", "{shop}");
    assert_eq!(shop["listeners"][0]["attachedRoutes"], 1, "{shop}");
    let stray = set("other", "stray");
    assert_eq!(condition(&stray, "Accepted")["reason"], "NotAllowed", "{stray}");
    let shop_route = route("shop", "apps");
    assert_eq!(shop_route["parentRef"]["kind"], "ListenerSet", "{shop_route}");
    assert_eq!(condition(&shop_route, "Accepted")["status"], "True", "{shop_route}");
    // A TCPRoute's status, where the cluster serves TCPRoutes only at
    // v1alpha2 (the fake API server's): the listener takes no TCPRoute.
    api.apply(
        "tcproutes",
        json!({"apiVersion": "gateway.networking.k8s.io/v1alpha2", "kind": "TCPRoute",
               "metadata": {"name": "db", "namespace": "apps"},
               "spec": {"parentRefs": [{"name": "gw", "namespace": "gateways", "sectionName": "http"}],
                        "rules": [{"backendRefs": [{"name": "api", "port": 8080}]}]}}),
    );
    server::wait_for("TCPRoute status", Duration::from_secs(10), || {
        api.get("tcproutes", "apps", "db").is_some_and(|r| r["status"]["parents"].is_array())
    });
    let db = api.get("tcproutes", "apps", "db").unwrap()["status"]["parents"][0].clone();
    assert_eq!(condition(&db, "Accepted")["reason"], "NotAllowedByListeners", "{db}");
    // A BackendTLSPolicy on the routes' backend: accepted for the mesh
    // (the Service) and for the Gateway whose route sends to it; its
    // ConfigMap CA removed, no valid CA (a ConfigMap change rebuilds).
    api.apply(
        "configmaps",
        json!({"metadata": {"name": "api-ca", "namespace": "apps"}, "data": {"ca.crt": ca_pem("api root")}}),
    );
    api.apply(
        "backendtlspolicies",
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
               "metadata": {"name": "api-tls", "namespace": "apps", "generation": 1},
               "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": "api"}],
                        "validation": {"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "api-ca"}],
                                       "hostname": "api.example.com"}}}),
    );
    let ancestors = |want: &str| {
        server::wait_for(want, Duration::from_secs(10), || {
            api.get("backendtlspolicies", "apps", "api-tls").is_some_and(|p| {
                p["status"]["ancestors"].as_array().is_some_and(|a| a.iter().any(|a| a.to_string().contains(want)))
            })
        });
        api.get("backendtlspolicies", "apps", "api-tls").unwrap()["status"]["ancestors"].clone()
    };
    let a = ancestors("Configuration is valid");
    assert_eq!(a[0]["ancestorRef"], json!({"group": "", "kind": "Service", "name": "api"}), "{a}");
    assert_eq!(a[0]["controllerName"], "istio.io/mesh-controller");
    assert_eq!(condition(&a[0], "Accepted")["status"], "True", "{a}");
    assert_eq!(condition(&a[0], "ResolvedRefs")["status"], "True", "{a}");
    assert_eq!(condition(&a[0], "Accepted")["observedGeneration"], 1, "{a}");
    assert_eq!(a[1]["ancestorRef"], json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}));
    assert_eq!(a[1]["controllerName"], "istio.io/gateway-controller");
    api.delete("configmaps", "apps", "api-ca");
    let a = ancestors("NoValidCACertificate");
    assert_eq!(
        condition(&a[0], "Accepted")["message"],
        "Certificate reference invalid: reference apps/api-ca (of kind ConfigMap) not found",
        "{a}"
    );
    assert_eq!(condition(&a[0], "ResolvedRefs")["reason"], "InvalidCACertificateRef", "{a}");
    let class = api.get("gatewayclasses", "", "istio").unwrap();
    assert_eq!(condition(&class["status"], "Accepted")["message"], "Handled by Istio controller");
    let lease = api.get("leases", "istio-system", "istio-gateway-status-leader-default").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "istiod-a");
    // A change that alters no status writes nothing.
    let version = api.get(K8S_GATEWAYS, "gateways", "gw").unwrap()["metadata"]["resourceVersion"].clone();
    api.apply(
        "services",
        json!({"metadata": {"name": "extra", "namespace": "apps"}, "spec": {"clusterIP": "10.96.9.9", "ports": [{"name": "http", "port": 80}]}}),
    );
    server::wait_for("the change applied", Duration::from_secs(10), || s.log().matches("mesh changed").count() >= 2);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(api.get(K8S_GATEWAYS, "gateways", "gw").unwrap()["metadata"]["resourceVersion"], version);
}

/// istiod's Ingress status (pilot/pkg/config/kube/ingress/ingress.go,
/// `runningAddresses`), written by the holder of the `istio-leader`
/// ConfigMap lock: each Ingress of the `istio` class says the ingress
/// gateway Service's load balancer addresses and external IPs, sorted
/// (IPs before hostnames); another class's Ingress is left alone; a new
/// load balancer address is written again.
#[test]
fn ingress_status_says_the_ingress_gateways_addresses() {
    use istiod_kubewatch::fake::{Resource, core_resources, write_resources};
    let api = server::fake_api();
    for r in core_resources().into_iter().chain(write_resources()) {
        api.install(r);
    }
    api.install(Resource { group: "networking.k8s.io", version: "v1", plural: "ingresses", kind: "Ingress" });
    api.install(Resource { group: "networking.k8s.io", version: "v1", plural: "ingressclasses", kind: "IngressClass" });
    let gateway = |lb: Value| {
        json!({"metadata": {"name": "istio-ingressgateway", "namespace": "istio-system"},
               "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.50", "externalIPs": ["198.51.100.1"],
                        "selector": {"istio": "ingressgateway"}, "ports": [{"name": "http2", "port": 80}]},
               "status": {"loadBalancer": {"ingress": lb}}})
    };
    api.apply("services", gateway(json!([{"ip": "203.0.113.7"}, {"hostname": "lb.example.com"}])));
    api.apply(
        "services",
        json!({"metadata": {"name": "web", "namespace": "shop"},
        "spec": {"clusterIP": "10.96.0.60", "ports": [{"name": "http", "port": 80}]}}),
    );
    let ingress = |name: &str, class: &str| {
        json!({"metadata": {"name": name, "namespace": "shop", "annotations": {"kubernetes.io/ingress.class": class}},
               "spec": {"rules": [{"host": "shop.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                        "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
    };
    api.apply("ingresses", ingress("shop", "istio"));
    api.apply("ingresses", ingress("theirs", "nginx"));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--secureGRPCAddr", ""],
        &[("POD_NAME", "istiod-a"), ("POD_NAMESPACE", "istio-system")],
        None,
    );
    let lb = || api.get("ingresses", "shop", "shop").map(|i| i["status"]["loadBalancer"]["ingress"].clone());
    server::wait_for("the Ingress status", Duration::from_secs(30), || lb().is_some_and(|v| v.is_array()));
    assert_eq!(
        lb().unwrap(),
        json!([{"ip": "198.51.100.1"}, {"ip": "203.0.113.7"}, {"hostname": "lb.example.com"}]),
        "{}",
        s.log()
    );
    let lock = api.get("configmaps", "istio-system", "istio-leader").expect("the istio-leader lock");
    assert!(lock["metadata"]["annotations"]["control-plane.alpha.kubernetes.io/leader"].is_string(), "{lock}");
    assert!(api.get("ingresses", "shop", "theirs").unwrap()["status"]["loadBalancer"].is_null(), "another class's");
    // The load balancer gets another address: written again.
    api.apply("services", gateway(json!([{"ip": "203.0.113.8"}])));
    server::wait_for("the new address", Duration::from_secs(30), || {
        lb().is_some_and(|v| v == json!([{"ip": "198.51.100.1"}, {"ip": "203.0.113.8"}]))
    });
}

/// istiod's Gateway API deployment controller against the fake API server
/// (pilot/pkg/config/kube/gatewaycommon/deploymentcontroller.go): the
/// elected replica applies the chart's kube-gateway template (read from
/// the injector's configuration, with the chart's default values) for each
/// Gateway of class `istio` that names no existing deployment, as server
/// side applies by `istio.io/gateway-controller`, after writing its
/// controller version on the Gateway; an object someone else made is left
/// alone; a changed Gateway is applied again.
#[test]
fn gateway_api_gateways_are_deployed_as_istiod_deploys_them() {
    use istiod_kubewatch::fake::{K8S_GATEWAYS, core_resources, deployment_resources, gateway_api_resources};
    let api = server::fake_api();
    for r in core_resources().into_iter().chain(gateway_api_resources()).chain(deployment_resources()) {
        api.install(r);
    }
    let gw = |name: &str, class: &str, uid: &str, spec: Value| {
        let mut g = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": "apps", "uid": uid},
            "spec": {"gatewayClassName": class, "listeners": [
                {"name": "http", "port": 80, "protocol": "HTTP"},
                {"name": "https.main", "port": 443, "protocol": "HTTPS", "tls": {"certificateRefs": [{"name": "cert"}]}}]}});
        for (k, v) in spec.as_object().cloned().unwrap_or_default() {
            g["spec"][k] = v;
        }
        g
    };
    api.apply("namespaces", json!({"metadata": {"name": "apps"}}));
    api.apply(K8S_GATEWAYS, gw("web", "istio", "uid-web", json!({})));
    api.apply(
        K8S_GATEWAYS,
        gw("manual", "istio", "uid-manual", json!({"addresses": [{"type": "Hostname", "value": "lb.example.com"}]})),
    );
    api.apply(K8S_GATEWAYS, gw("elsewhere", "nginx", "uid-nginx", json!({})));
    api.apply(K8S_GATEWAYS, gw("taken", "istio", "uid-taken", json!({})));
    // A Service of that name made by someone else.
    api.apply(
        "services",
        json!({"metadata": {"name": "taken-istio", "namespace": "apps", "labels": {"owner": "me"}},
        "spec": {"clusterIP": "10.96.0.50", "ports": [{"name": "http", "port": 80}]}}),
    );

    let dir = tempfile::tempdir().unwrap();
    let inject = kube_gateway_injection(dir.path());
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--injectionDir", inject.to_str().unwrap()],
        &[("POD_NAME", "istiod-a"), ("POD_NAMESPACE", "istio-system")],
        None,
    );
    server::wait_for("the gateway's Deployment", Duration::from_secs(30), || {
        api.get("deployments", "apps", "web-istio").is_some() && api.get("services", "apps", "web-istio").is_some()
    });
    let d = api.get("deployments", "apps", "web-istio").unwrap();
    assert_eq!(d["metadata"]["labels"]["gateway.istio.io/managed"], "istio.io-gateway-controller", "{d}");
    assert!(d["metadata"]["labels"].get("istio.io/dataplane-mode").is_none(), "ambient is off: {d}");
    assert_eq!(d["metadata"]["ownerReferences"][0]["uid"], "uid-web");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "web-istio");
    assert_eq!(pod["containers"][0]["image"], "registry.istio.io/testing/proxyv2:latest");
    assert_eq!(pod["containers"][0]["args"][1], "router");
    assert_eq!(d["spec"]["selector"]["matchLabels"], json!({"gateway.networking.k8s.io/gateway-name": "web"}));
    let svc = api.get("services", "apps", "web-istio").unwrap();
    assert_eq!(svc["spec"]["type"], "LoadBalancer");
    let ports: Vec<(&str, u64, &str)> = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["port"].as_u64().unwrap(), p["appProtocol"].as_str().unwrap()))
        .collect();
    assert_eq!(ports, [("status-port", 15021, "tcp"), ("http", 80, "http"), ("https-main", 443, "https")]);
    let sa = api.get("serviceaccounts", "apps", "web-istio").expect("the ServiceAccount");
    assert_eq!(sa["metadata"]["ownerReferences"][0]["name"], "web", "the API server is 1.30: {sa}");
    let g = api.get(K8S_GATEWAYS, "apps", "web").unwrap();
    assert_eq!(g["metadata"]["annotations"]["gateway.istio.io/controller-version"], "5");
    let applies = api.applies();
    assert!(
        applies.iter().all(|(_, _, _, _, manager, force)| manager == "istio.io/gateway-controller" && *force),
        "{applies:?}"
    );
    assert!(applies.iter().any(|(p, _, n, sub, _, _)| p == K8S_GATEWAYS && n == "web" && sub == "status"));
    let lease = api.get("leases", "istio-system", "istio-gateway-deployment-default").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "istiod-a");
    // Not ours: an existing deployment named by address, another class.
    server::wait_for("the taken gateway's Deployment", Duration::from_secs(10), || {
        api.get("deployments", "apps", "taken-istio").is_some()
    });
    assert!(api.get("deployments", "apps", "manual-istio").is_none());
    assert!(api.get("deployments", "apps", "elsewhere-nginx").is_none());
    let taken = api.get("services", "apps", "taken-istio").unwrap();
    assert_eq!(taken["metadata"]["labels"], json!({"owner": "me"}), "someone else's Service: {taken}");
    assert!(!api.applies().iter().any(|(p, _, n, _, _, _)| p == "services" && n == "taken-istio"));

    // A new listener: the Service is applied again with its port.
    let mut web = api.get(K8S_GATEWAYS, "apps", "web").unwrap();
    web["spec"]["listeners"].as_array_mut().unwrap().push(json!({"name": "admin", "port": 8080, "protocol": "HTTP"}));
    api.apply(K8S_GATEWAYS, web);
    server::wait_for("the new port", Duration::from_secs(15), || {
        api.get("services", "apps", "web-istio")
            .is_some_and(|s| s["spec"]["ports"].as_array().is_some_and(|p| p.iter().any(|p| p["port"] == 8080)))
    });
    assert!(s.log().contains("gateway deployment updated"), "{}", s.log());
}

/// Waypoints (issue #36): with ambient, a Gateway of class
/// `istio-waypoint` is deployed from the chart's `waypoint` template as
/// istiod's deployment controller does for the mesh controller's class
/// (`classinfo.go`): objects named as the Gateway, a ClusterIP Service on
/// 15008, node type `waypoint`, out of ambient redirection, labelled and
/// applied by `istio.io/mesh-controller`. Without ambient it is not.
#[test]
fn waypoints_are_deployed_as_istiod_deploys_them() {
    use istiod_kubewatch::fake::{K8S_GATEWAYS, core_resources, deployment_resources, gateway_api_resources};
    let api = server::fake_api();
    for r in core_resources().into_iter().chain(gateway_api_resources()).chain(deployment_resources()) {
        api.install(r);
    }
    api.apply("namespaces", json!({"metadata": {"name": "apps"}}));
    api.apply(
        K8S_GATEWAYS,
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "waypoint", "namespace": "apps", "uid": "uid-wp"},
            "spec": {"gatewayClassName": "istio-waypoint", "listeners": [{"name": "mesh", "port": 15008, "protocol": "HBONE"}]}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let inject = kube_gateway_injection(dir.path());
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let start = |ambient: &'static str| {
        Server::start_on(
            &["--kubeconfig", kubeconfig.to_str().unwrap()],
            &["--injectionDir", inject.to_str().unwrap()],
            &[("POD_NAME", "istiod-a"), ("POD_NAMESPACE", "istio-system"), ("PILOT_ENABLE_AMBIENT", ambient)],
            None,
        )
    };
    let s = start("false");
    server::wait_for("the server's model", Duration::from_secs(30), || {
        server::get(s.http, "/debug/configz").is_some_and(|(_, b)| b.contains("waypoint"))
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(api.get("deployments", "apps", "waypoint").is_none(), "deployed without ambient");
    drop(s);
    let s = start("true");
    server::wait_for("the waypoint's Deployment", Duration::from_secs(30), || {
        api.get("deployments", "apps", "waypoint").is_some() && api.get("services", "apps", "waypoint").is_some()
    });
    let d = api.get("deployments", "apps", "waypoint").unwrap();
    assert_eq!(d["metadata"]["labels"]["gateway.istio.io/managed"], "istio.io-mesh-controller", "{d}");
    let template = &d["spec"]["template"];
    assert_eq!(template["metadata"]["labels"]["istio.io/dataplane-mode"], "none", "{d}");
    assert_eq!(template["spec"]["containers"][0]["args"][1], "waypoint", "{d}");
    assert_eq!(template["spec"]["serviceAccountName"], "waypoint");
    let svc = api.get("services", "apps", "waypoint").unwrap();
    assert_eq!(svc["spec"]["type"], "ClusterIP", "{svc}");
    assert!(svc["spec"]["ports"].as_array().unwrap().iter().any(|p| p["port"] == 15008), "{svc}");
    let applies = api.applies();
    let ours: Vec<_> = applies.iter().filter(|(_, ns, _, _, _, _)| ns == "apps").collect();
    assert!(!ours.is_empty());
    assert!(ours.iter().all(|(_, _, _, _, manager, _)| manager == "istio.io/mesh-controller"), "{ours:?}");
    assert!(api.get("serviceaccounts", "apps", "waypoint").is_some(), "the ServiceAccount");
    let g = api.get(K8S_GATEWAYS, "apps", "waypoint").unwrap();
    assert_eq!(g["metadata"]["annotations"]["gateway.istio.io/controller-version"], "5");
    drop(s);
}

/// Revisions and tags (pkg/revisions/tag_watcher.go `IsMine`): a `canary`
/// istiod deploys the Gateways that select `canary` or a tag pointing to it
/// (`istio-revision-tag-prod`, labelled `istio.io/tag: prod` and
/// `istio.io/rev: canary`), by their own label or their namespace's; an
/// unlabelled Gateway only once the `default` tag points to canary; never
/// another revision's.
#[test]
fn a_revision_deploys_the_gateways_of_its_tags() {
    use istiod_kubewatch::fake::{
        K8S_GATEWAYS, core_resources, deployment_resources, gateway_api_resources, webhook_resources,
    };
    let api = server::fake_api();
    for r in core_resources()
        .into_iter()
        .chain(gateway_api_resources())
        .chain(deployment_resources())
        .chain(webhook_resources())
    {
        api.install(r);
    }
    let tag = |tag: &str, rev: &str| {
        json!({"metadata": {"name": format!("istio-revision-tag-{tag}"),
            "labels": {"istio.io/tag": tag, "istio.io/rev": rev}}, "webhooks": []})
    };
    api.apply("mutatingwebhookconfigurations", tag("prod", "canary"));
    api.apply("mutatingwebhookconfigurations", tag("old", "stable"));
    api.apply("namespaces", json!({"metadata": {"name": "apps"}}));
    api.apply("namespaces", json!({"metadata": {"name": "prod-ns", "labels": {"istio.io/rev": "prod"}}}));
    let gw = |ns: &str, name: &str, rev: Option<&str>| {
        let mut g = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
            "spec": {"gatewayClassName": "istio", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}});
        if let Some(r) = rev {
            g["metadata"]["labels"] = json!({"istio.io/rev": r});
        }
        g
    };
    api.apply(K8S_GATEWAYS, gw("apps", "by-revision", Some("canary")));
    api.apply(K8S_GATEWAYS, gw("apps", "by-tag", Some("prod")));
    api.apply(K8S_GATEWAYS, gw("prod-ns", "by-namespace", None));
    api.apply(K8S_GATEWAYS, gw("apps", "unlabelled", None));
    api.apply(K8S_GATEWAYS, gw("apps", "other-tag", Some("old")));
    api.apply(K8S_GATEWAYS, gw("apps", "other-revision", Some("stable")));

    let dir = tempfile::tempdir().unwrap();
    let inject = kube_gateway_injection(dir.path());
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let _s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--injectionDir", inject.to_str().unwrap()],
        &[("POD_NAME", "istiod-canary-a"), ("POD_NAMESPACE", "istio-system"), ("REVISION", "canary")],
        None,
    );
    let deployed = |ns: &str, name: &str| api.get("deployments", ns, &format!("{name}-istio")).is_some();
    server::wait_for("canary's and its tag's Gateways", Duration::from_secs(30), || {
        deployed("apps", "by-revision") && deployed("apps", "by-tag") && deployed("prod-ns", "by-namespace")
    });
    assert!(api.get("leases", "istio-system", "istio-gateway-deployment-canary").is_some(), "canary's own election");
    // Another tag read (every 5 s) and apply round later, still not.
    std::thread::sleep(Duration::from_secs(6));
    for name in ["unlabelled", "other-tag", "other-revision"] {
        assert!(!deployed("apps", name), "{name} is not canary's");
    }
    // The default tag moves to canary: unlabelled Gateways are its now.
    api.apply("mutatingwebhookconfigurations", tag("default", "canary"));
    server::wait_for("the unlabelled Gateway", Duration::from_secs(20), || deployed("apps", "unlabelled"));
    assert!(!deployed("apps", "other-tag") && !deployed("apps", "other-revision"));
}

/// An `--injectionDir` under `dir` with the chart's `kube-gateway` template
/// and default values, as the Gateway API deployment controller reads them.
fn kube_gateway_injection(dir: &Path) -> std::path::PathBuf {
    let inject = dir.join("inject");
    std::fs::create_dir(&inject).unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let template = std::fs::read_to_string(data.join("istio-chart/kube-gateway.yaml")).unwrap();
    let waypoint = std::fs::read_to_string(data.join("istio-chart/waypoint.yaml")).unwrap();
    std::fs::write(
        inject.join("config"),
        serde_json::to_string(&json!({"templates": {"kube-gateway": template, "waypoint": waypoint}})).unwrap(),
    )
    .unwrap();
    std::fs::copy(data.join("inject/values.json"), inject.join("values")).unwrap();
    inject
}

/// A self-signed CA certificate (PEM) with common name `cn`.
fn ca_pem(cn: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.self_signed(&key).unwrap().pem()
}

/// A BackendTLSPolicy whose CA is a ConfigMap (Gateway API core): a
/// sidecar's cluster for the named port verifies the backend against
/// `configmap://<ns>/<name>-cacert`, read over ADS, and istiod-rs serves
/// that CA to the sidecar over SDS (any verified proxy may read a
/// ConfigMap CA, as in istiod's filterAuthorizedResources); a new CA in
/// the ConfigMap is pushed, under that name only.
#[test]
fn a_backend_tls_policys_configmap_ca_is_served_to_sidecars() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = |cn: &str| {
        format!(
            "apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: shop}}
spec:
  clusterIP: 10.96.0.20
  selector: {{app: echo}}
  ports: [{{name: http, port: 80}}, {{name: https, port: 443}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: echo-tls, namespace: shop}}
spec:
  targetRefs: [{{group: '', kind: Service, name: echo, sectionName: https}}]
  validation:
    caCertificateRefs: [{{group: '', kind: ConfigMap, name: echo-ca}}]
    hostname: echo.example.com
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: echo-ca, namespace: shop}}
data:
  ca.crt: {:?}
  unrelated: big
",
            ca_pem(cn)
        )
    };
    std::fs::write(dir.path().join("mesh.yaml"), mesh("echo root")).unwrap();
    let g = start(dir.path().to_str().unwrap(), ("shop", "client"));
    let extra = json!(["configmap://shop/missing-cacert"]);
    let env = [("FOLLOW", "20".to_owned()), ("EXTRA_SDS", extra.to_string()), ("NODE_TYPE", "sidecar".to_owned())];
    let mut c = client_of(g.secure, &g.root, &g.token, ("shop", r#"{"app": "client"}"#), &[], &env);
    let mut out = lines(&mut c);
    let first = out.next().and_then(Result::ok).unwrap_or_default();
    let report: Value = match serde_json::from_str(&first) {
        Ok(v) => v,
        Err(e) => panic!("{e}: {first:?}\n{}\n{}", stderr(c), g.server.log()),
    };
    assert!(report.get("code").is_none(), "{report}");
    assert_eq!(report["cluster_sds"], json!(["configmap://shop/echo-ca-cacert"]), "{report}");
    assert_eq!(
        report["secrets"],
        json!({"configmap://shop/echo-ca-cacert": {"type": "ca", "cn": "echo root"}}),
        "the ConfigMap's CA; a missing ConfigMap is not served"
    );
    // A new CA in the ConfigMap reaches the sidecar, and only that name.
    let config = g.dir.path().join("config/mesh.yaml");
    std::fs::write(&config, mesh("rotated root")).unwrap();
    let push = out.next().and_then(Result::ok).unwrap_or_default();
    let push: Value = serde_json::from_str(&push).unwrap_or_else(|e| panic!("{e}: {push:?}\n{}", g.server.log()));
    assert_eq!(push["type"], "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret", "{push}");
    assert_eq!(push["secrets"], json!({"configmap://shop/echo-ca-cacert": {"type": "ca", "cn": "rotated root"}}));
    let _ = c.kill();
    let _ = c.wait();
}

/// Client certificate validation on a Gateway API Gateway
/// (`spec.tls.frontend`, istiod's `buildTLS`): the HTTPS listeners
/// require a client certificate verified against the ConfigMap's CA, which
/// the router reads over SDS as `configmap://<ns>/<name>-cacert`; in
/// `AllowInsecureFallback` mode the certificate is asked, not required,
/// and the Gateway's status says so.
#[test]
fn a_gateway_api_gateway_verifies_client_certificates_with_a_configmap_ca() {
    let dir = tempfile::tempdir().unwrap();
    server::copy_dir(Path::new(API_INPUT), dir.path());
    let mesh = std::fs::read_to_string(dir.path().join("mesh.yaml")).unwrap();
    let with_frontend = |mode: &str| {
        let frontend = format!(
            "  tls: {{frontend: {{default: {{validation: {{mode: {mode}, caCertificateRefs: [{{group: '', kind: ConfigMap, name: client-ca}}]}}}}}}}}\n  listeners:\n"
        );
        let mesh = mesh.replacen("  allowedListeners: {namespaces: {from: Selector, selector: {matchLabels: {team: apps}}}}\n  listeners:\n", &format!("  allowedListeners: {{namespaces: {{from: Selector, selector: {{matchLabels: {{team: apps}}}}}}}}\n{frontend}"), 1);
        assert!(mesh.contains("client-ca"), "the Gateway is patched");
        format!(
            "{mesh}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: client-ca, namespace: gateways}}\ndata:\n  ca.crt: {:?}\n",
            ca_pem("client root")
        )
    };
    std::fs::write(dir.path().join("mesh.yaml"), with_frontend("AllowValidOnly")).unwrap();
    let g = start(dir.path().to_str().unwrap(), ("gateways", "gw-istio"));
    let labels = r#"{"gateway.networking.k8s.io/gateway-name": "gw"}"#;
    let env = [("SERVICE_ACCOUNT", "gw-istio".to_owned())];
    let mut c = client_of(g.secure, &g.root, &g.token, ("gateways", labels), &[], &env);
    let report = first_report(&mut c, &g.server);
    let chains = &report["listeners"]["0.0.0.0_8443"]["chains"];
    assert_eq!(
        chains[0],
        json!({"sni": ["secure.example.com"], "certs": ["kubernetes-gateway://gateways/secure-cert"],
               "ca": "configmap://gateways/client-ca-cacert", "require_client_certificate": true, "rds": API_HTTPS}),
        "{report}"
    );
    assert_eq!(report["secrets"]["configmap://gateways/client-ca-cacert"], json!({"type": "ca", "cn": "client root"}));
    assert_eq!(report["secrets"]["kubernetes-gateway://gateways/secure-cert"]["key_matches"], true, "{report}");
    let _ = c.wait();
    // AllowInsecureFallback: asked, not required.
    std::fs::write(g.dir.path().join("config/mesh.yaml"), with_frontend("AllowInsecureFallback")).unwrap();
    server::wait_for("the new mode", Duration::from_secs(10), || {
        let mut c = client_of(g.secure, &g.root, &g.token, ("gateways", labels), &[], &env);
        let report = first_report(&mut c, &g.server);
        let _ = c.wait();
        report["listeners"]["0.0.0.0_8443"]["chains"][0]["require_client_certificate"] == false
    });
}
