//! The CA end to end (issue #12): Python's grpcio and `cryptography` (no
//! code of ours) obtain a workload certificate from the running binary over
//! TLS on `--secureGRPCAddr`, as istio-agent does, with a `JWT_RULE` token,
//! and verify the chain. istiod's server.go and generate_cert.go are the
//! reference: the leaf names the token's service account only; a CSR for
//! another identity, a forged or missing token, or the plaintext port get
//! no certificate.

use crate::issuer;
use crate::python;
use crate::server;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use issuer::Issuer;
use server::{BOOKINFO, Server, free_port, http_body_server};

fn ask(addr: std::net::SocketAddr, root: &str, token: &str, identity: &str, ttl: u64) -> serde_json::Value {
    ask_with(addr, root, token, identity, ttl, &[])
}

/// [`ask`] with `CA_CLIENT_KEY` / `CA_CLIENT_CHAIN` / `CA_SAVE` set.
pub(crate) fn ask_with(
    addr: std::net::SocketAddr,
    root: &str,
    token: &str,
    identity: &str,
    ttl: u64,
    env: &[(&str, &str)],
) -> serde_json::Value {
    let args = [addr.to_string(), root.to_owned(), token.to_owned(), identity.to_owned(), ttl.to_string()];
    py_json("ca_client.py", &args, env)
}

/// Runs tests/py/`script` with `args` and `env`; its one line of JSON.
fn py_json(script: &str, args: &[String], env: &[(&str, &str)]) -> serde_json::Value {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py").join(script);
    let out =
        std::process::Command::new(python::python()).arg(path).args(args).envs(env.iter().copied()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{script} failed: {}\n{}", text, String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Starts the binary with its CA: `JWT_RULE` for an issuer served on
/// loopback, the CA kept in `ca_dir` (self-signed) or plugged in from it.
fn start(issuer: &Issuer, ca_env: (&str, &str)) -> (Server, std::net::SocketAddr, String) {
    start_with(issuer, ca_env, &[])
}

/// [`start`] with more environment.
fn start_with(issuer: &Issuer, ca_env: (&str, &str), more: &[(&str, &str)]) -> (Server, std::net::SocketAddr, String) {
    let uri = http_body_server(Arc::new(Mutex::new(issuer.jwks.clone())));
    let iss = "https://issuer.test".to_owned();
    let rule = format!(r#"{{"issuer":"{iss}","jwks_uri":"{uri}","audiences":["istio-ca"]}}"#);
    let secure = free_port();
    let s = Server::start(
        std::path::Path::new(BOOKINFO),
        &["--secureGRPCAddr", &secure.to_string()],
        &[&[("JWT_RULE", rule.as_str()), ca_env][..], more].concat(),
        None,
    );
    server::wait_for("the JWT_RULE key set", Duration::from_secs(20), || s.log().contains("JWT_RULE key set fetched"));
    (s, secure, iss)
}

/// [`start`] with a self-signed CA kept in a new directory (its
/// `ca-cert.pem` is the root to trust).
fn start_self_signed(issuer: &Issuer) -> (tempfile::TempDir, Server, std::net::SocketAddr, String) {
    let dir = tempfile::tempdir().unwrap();
    let (s, secure, iss) = start(issuer, ("ISTIOD_RS_SELF_SIGNED_CA_DIR", dir.path().to_str().unwrap()));
    (dir, s, secure, iss)
}

const ID: &str = "spiffe://cluster.local/ns/bookinfo/sa/reviews";

#[test]
fn grpcio_gets_a_workload_certificate_for_its_token_and_nothing_else() {
    let issuer = Issuer::new();
    let (dir, s, secure, iss) = start_self_signed(&issuer);
    let root = dir.path().join("ca-cert.pem");
    let root = root.to_str().unwrap();
    let token = issuer.token(&iss, "system:serviceaccount:bookinfo:reviews");

    // The CSR names the caller's identity; a TTL of an hour.
    let got = ask(secure, root, &token, ID, 3600);
    assert_eq!(got["code"], "OK", "{got}");
    assert_eq!(got["sans"], serde_json::json!([ID]));
    assert_eq!(got["san_critical"], true);
    assert_eq!(got["is_ca"], false);
    assert_eq!(got["lifetime"], 3600 + 120, "the TTL asked, backdated two minutes");
    assert_eq!(got["chain"], 2, "leaf and root");
    assert_eq!(got["verified"], true, "the chain verifies to the root kept in the CA directory");
    assert_eq!(got["own_key"], true);
    // No SAN in the CSR and no TTL: the caller's identity, the default TTL.
    let got = ask(secure, root, &token, "-", 0);
    assert_eq!(
        (&got["code"], &got["sans"], &got["lifetime"]),
        (&"OK".into(), &serde_json::json!([ID]), &(86400 + 120).into())
    );

    // Another identity in the CSR: refused.
    let other = ask(secure, root, &token, "spiffe://cluster.local/ns/kube-system/sa/admin", 0);
    assert_eq!(other["code"], "PERMISSION_DENIED", "{other}");
    // Over MAX_WORKLOAD_CERT_TTL: istiod's wording.
    let long = ask(secure, root, &token, ID, 100 * 86400);
    assert_eq!(long["code"], "INVALID_ARGUMENT");
    assert!(long["details"].as_str().unwrap().contains("is greater than the max allowed TTL 2160h0m0s"), "{long}");
    // A token signed by someone else, a wrong issuer, none at all.
    let forged = Issuer::new().token(&iss, "system:serviceaccount:bookinfo:reviews");
    for (token, why) in [
        (forged.as_str(), "forged"),
        (&issuer.token("https://other", "system:serviceaccount:a:b"), "issuer"),
        ("-", "none"),
    ] {
        let got = ask(secure, root, token, "-", 0);
        assert_eq!(got["code"], "UNAUTHENTICATED", "{why}: {got}");
        assert_eq!(got["details"], "request authenticate failure");
    }
    // The plaintext port gives no certificate, even for a good token.
    let clear = ask(s.grpc, "-", &token, ID, 0);
    assert_eq!(clear["code"], "UNAVAILABLE", "{clear}");
    // istiod's counters: 7 requests (the plaintext one never reached the
    // CA), 2 issued, 3 authentication failures, the identity refusal a CSR
    // error, the long TTL a TTL error.
    let metrics = server::get(s.monitoring, "/metrics").unwrap().1;
    for line in [
        "citadel_server_csr_count 7",
        "citadel_server_success_cert_issuance_count 2",
        "citadel_server_authentication_failure_count 3",
        "citadel_server_csr_sign_err_count{error=\"CSR_ERROR\"} 1",
        "citadel_server_csr_sign_err_count{error=\"TTL_ERROR\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(metrics.contains("citadel_server_root_cert_expiry_timestamp "), "{metrics}");
    // Renewal with the current certificate (istiod's client-certificate
    // authenticator): no token, the identity of the certificate presented.
    let saved = dir.path().join("reviews");
    let saved = saved.to_str().unwrap();
    assert_eq!(ask_with(secure, root, &token, ID, 0, &[("CA_SAVE", saved)])["code"], "OK");
    let (key, chain) = (format!("{saved}.key"), format!("{saved}.chain"));
    let renewed = ask_with(secure, root, "-", "-", 0, &[("CA_CLIENT_KEY", &key), ("CA_CLIENT_CHAIN", &chain)]);
    assert_eq!((&renewed["code"], &renewed["sans"]), (&"OK".into(), &serde_json::json!([ID])), "{renewed}");
    // A certificate of another CA does not get through the handshake.
    let other = istiod_pki::Ca::generate(istiod_pki::Settings::default()).unwrap();
    let (foreign_chain, foreign_key) =
        other.issue_server(&["reviews.bookinfo".to_owned()], Duration::from_secs(3600)).unwrap();
    std::fs::write(dir.path().join("foreign.key"), foreign_key).unwrap();
    std::fs::write(dir.path().join("foreign.chain"), foreign_chain).unwrap();
    let foreign = ask_with(
        secure,
        root,
        "-",
        "-",
        0,
        &[
            ("CA_CLIENT_KEY", dir.path().join("foreign.key").to_str().unwrap()),
            ("CA_CLIENT_CHAIN", dir.path().join("foreign.chain").to_str().unwrap()),
        ],
    );
    assert_eq!(foreign["code"], "UNAVAILABLE", "the handshake fails: {foreign}");
    // A restart keeps the root: a certificate issued after it verifies
    // against the same file.
    drop(s);
    let (_s, secure, _) = start(&issuer, ("ISTIOD_RS_SELF_SIGNED_CA_DIR", dir.path().to_str().unwrap()));
    let again = ask(secure, root, &token, ID, 0);
    assert_eq!((&again["code"], &again["verified"]), (&"OK".into(), &true.into()), "{again}");
}

/// A GET with a bearer token: (status, body).
fn get_as(addr: std::net::SocketAddr, path: &str, token: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split(' ').nth(1).unwrap().parse().unwrap();
    (status, out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
}

/// istiod's `allowAuthenticatedOrLocalhost` and `AuthorizeDebugRequest`
/// (pilot/pkg/xds/debug.go) on both HTTP ports: a caller not on loopback
/// authenticates with a token as an xDS caller does (401 without one); one
/// of the root namespace sees everything, one of another namespace only
/// `config_dump`/`edsz`/`ndsz` (403 for the rest). `/ready` asks nothing.
/// Needs a non-loopback address on this host; without one there is nothing
/// to check.
#[test]
fn debug_callers_off_loopback_authenticate_with_a_token() {
    let Some(ip) = server::non_loopback_ip() else { return };
    let issuer = Issuer::new();
    let uri = http_body_server(Arc::new(Mutex::new(issuer.jwks.clone())));
    let iss = "https://issuer.test";
    let rule = format!(r#"{{"issuer":"{iss}","jwks_uri":"{uri}","audiences":["istio-ca"]}}"#);
    let (http, monitoring) = (free_port().port(), free_port().port());
    let s = Server::start(
        std::path::Path::new(BOOKINFO),
        &["--httpAddr", &format!("0.0.0.0:{http}"), "--monitoringAddr", &format!("0.0.0.0:{monitoring}")],
        &[("JWT_RULE", &rule), ("DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES", "monitoring")],
        None,
    );
    server::wait_for("the JWT_RULE key set", Duration::from_secs(20), || s.log().contains("JWT_RULE key set fetched"));
    let admin = issuer.token(iss, "system:serviceaccount:istio-system:istioctl");
    let viewer = issuer.token(iss, "system:serviceaccount:bookinfo:viewer");
    let allowed = issuer.token(iss, "system:serviceaccount:monitoring:prom");
    for port in [http, monitoring] {
        let there = std::net::SocketAddr::new(ip, port);
        assert_eq!(server::get(there, "/debug/syncz").map(|r| r.0), Some(401), "port {port}");
        assert_eq!(get_as(there, "/debug/syncz", "not-a-token").0, 401);
        let forged = Issuer::new().token(iss, "system:serviceaccount:istio-system:istioctl");
        assert_eq!(get_as(there, "/debug/syncz", &forged).0, 401);
        assert_eq!(get_as(there, "/debug/syncz", &admin), (200, "[]".into()), "port {port}");
        assert_eq!(get_as(there, "/debug/syncz", &viewer).0, 403);
        assert_eq!(get_as(there, "/debug/configz", &viewer).0, 403);
        // DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES: every path (AuthorizeDebugRequest).
        assert_eq!(get_as(there, "/debug/syncz", &allowed), (200, "[]".into()), "port {port}");
        assert_eq!(get_as(there, "/debug/configz", &allowed).0, 200);
        let (code, body) = get_as(there, "/debug/config_dump?proxyID=a.bookinfo", &viewer);
        assert_eq!(
            (code, body.as_str()),
            (404, "Proxy not connected to this Pilot instance. It may be connected to another instance.\n")
        );
    }
    assert_eq!(server::get(std::net::SocketAddr::new(ip, http), "/ready").map(|r| r.0), Some(200));
}

/// Debug over xDS as istioctl asks for it in a cluster
/// (istioctl/pkg/xds/client.go, through 15012 with a token):
/// `istio.io/debug/syncz` (pilot/pkg/xds/statusgen.go: a ClientConfig per
/// proxy), `istio.io/debug/config_dump` (its dump's parts) and
/// `istio.io/debug` (debuggen.go: a debug path's body). A caller outside
/// the root namespace sees its namespace only and none of the other paths;
/// an unauthenticated one nothing. One of `DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES`
/// sees every namespace's syncz and config_dump (`callerNamespaceFilter`)
/// but still none of `istio.io/debug`'s other paths (debuggen.go reads
/// only the root namespace).
#[test]
fn debug_over_xds_answers_istioctl() {
    let issuer = Issuer::new();
    let dir = tempfile::tempdir().unwrap();
    let ca = ("ISTIOD_RS_SELF_SIGNED_CA_DIR", dir.path().to_str().unwrap());
    let (s, secure, iss) = start_with(&issuer, ca, &[("DEBUG_ENDPOINT_AUTH_ALLOWED_NAMESPACES", "monitoring,x")]);
    let root = dir.path().join("ca-cert.pem");
    let sidecar = issuer.token(&iss, "system:serviceaccount:bookinfo:reviews");
    let run = |sa: &str, ns: &str| {
        let caller = issuer.token(&iss, &format!("system:serviceaccount:{ns}:{sa}"));
        let args = [secure, s.grpc].map(|a| a.to_string());
        let args = [&args[..], &[root.to_str().unwrap().into(), sidecar.clone(), caller, ns.into()]].concat();
        py_json("debug_xds.py", &args, &[])
    };
    let admin = run("istiod", "istio-system");
    let syncz = &admin["syncz"];
    assert_eq!(syncz["type_url"], "istio.io/debug/syncz", "{admin}\n{}", s.log());
    // istiod's IstioControlPlaneInstance (xdsgen.go), which istioctl's
    // multixds.CpInfo parses to tell replicas apart.
    let cp = &syncz["control_plane"];
    assert_eq!(cp["Component"], "istiod", "{cp}");
    assert_eq!(cp["Info"]["version"], env!("CARGO_PKG_VERSION"), "{cp}");
    assert!(cp["ID"].is_string(), "{cp}");
    let rows = syncz["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "the sidecar only, not istioctl's own streams: {rows:?}");
    let row = &rows[0];
    assert_eq!(row["id"], "app-1.bookinfo");
    assert_eq!(row["meta"]["NAMESPACE"], "bookinfo");
    assert_eq!(row["meta"]["ISTIO_VERSION"], "1.28.0");
    assert_eq!(row["types"]["type.googleapis.com/envoy.config.cluster.v3.Cluster"], "SYNCED", "{row}");
    assert_eq!(row["sent"], true, "{row}");
    let parts: Vec<&str> = admin["config_dump"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    let want = ["Bootstrap", "Clusters", "Listeners", "ScopedRoutes", "Routes", "Secrets", "Ecds"]
        .map(|t| format!("type.googleapis.com/envoy.admin.v3.{t}ConfigDump"));
    assert_eq!(parts, want, "{admin}");
    let debug = &admin["debug"];
    assert_eq!(debug["syncz"]["type_url"], "istio.io/debug", "{debug}");
    // /debug/syncz's body: istiod's SyncStatus rows.
    let rows = debug["syncz"]["body"].as_array().unwrap();
    assert!(rows.iter().any(|r| r["proxy"] == "app-1.bookinfo" && r["cluster_acked"].is_string()), "{debug}");
    assert!(debug["adsz"]["body"]["totalClients"].as_u64().unwrap() >= 2, "the sidecar and istioctl: {debug}");
    let dump = &debug["config_dump?proxyID=app-1.bookinfo"]["body"];
    assert_eq!(dump["configs"].as_array().unwrap().len(), 7, "{dump}");
    // What-if over xDS (istiod-rs): the question in the name's query.
    let whatif = &debug["whatif"]["body"];
    assert_eq!(whatif["valid"], true, "{debug}");
    assert_eq!(whatif["objects"][0]["kind"], "PeerAuthentication", "{whatif}");
    assert_eq!(whatif["objects"][0]["operation"], "created", "{whatif}");
    assert!(whatif["summary"]["classesConsidered"].as_u64().unwrap() >= 1, "the sidecar at least: {whatif}");
    assert_eq!(admin["plaintext_syncz"]["code"], "UNAUTHENTICATED", "{admin}");
    assert_eq!(admin["plaintext_syncz"]["details"], "authentication required");

    // A caller of bookinfo: its namespace's proxies, config_dump, no more.
    let own = run("viewer", "bookinfo");
    assert_eq!(own["syncz"]["rows"].as_array().unwrap().len(), 1, "{own}");
    assert_eq!(own["config_dump"].as_array().unwrap().len(), 7, "{own}");
    assert_eq!(own["debug"]["adsz"]["code"], "PERMISSION_DENIED", "{own}");
    assert_eq!(own["debug"]["syncz"]["code"], "PERMISSION_DENIED", "{own}");
    assert_eq!(own["debug"]["whatif"]["code"], "PERMISSION_DENIED", "{own}");
    assert!(own["debug"]["config_dump?proxyID=app-1.bookinfo"]["body"]["configs"].is_array(), "{own}");
    let allowed = run("prom", "monitoring");
    assert_eq!(allowed["syncz"]["rows"].as_array().unwrap().len(), 1, "every namespace's: {allowed}");
    assert_eq!(allowed["config_dump"].as_array().unwrap().len(), 7, "{allowed}");
    assert_eq!(allowed["debug"]["adsz"]["code"], "PERMISSION_DENIED", "{allowed}");
    // A proxy of another namespace through a debug path: not this caller's
    // (istiod's getDebugConnection).
    assert_eq!(
        allowed["debug"]["config_dump?proxyID=app-1.bookinfo"]["body"],
        "Proxy not connected to this Pilot instance. It may be connected to another instance.\n",
        "{allowed}"
    );
    let other = run("viewer", "default");
    assert_eq!(other["syncz"]["rows"], serde_json::json!([]), "{other}");
    assert_eq!(other["config_dump"], serde_json::json!([]), "not this caller's proxy: {other}");
    assert_eq!(
        other["debug"]["config_dump?proxyID=app-1.bookinfo"]["body"],
        "Proxy not connected to this Pilot instance. It may be connected to another instance.\n",
        "{other}"
    );
}

/// One ADS stream by tests/py/ads_auth.py: a sidecar of `namespace` asks
/// for its clusters.
fn ads(
    addr: std::net::SocketAddr,
    root: &str,
    token: &str,
    namespace: &str,
    delta: bool,
    env: &[(&str, &str)],
) -> serde_json::Value {
    let protocol = if delta { "delta" } else { "sotw" };
    let args = [addr.to_string(), root.to_owned(), token.to_owned(), namespace.to_owned(), protocol.to_owned()];
    py_json("ads_auth.py", &args, env)
}

/// xDS on the TLS port as istiod (pilot/pkg/xds/auth.go): a stream needs
/// a token or a certificate of this CA (UNAUTHENTICATED "authentication
/// failure"), and its node must be in the caller's namespace and service
/// account (PERMISSION_DENIED "authorization failed: no identities ...",
/// checkConnectionIdentity); the plaintext port asks nothing.
#[test]
fn xds_on_the_tls_port_serves_only_nodes_of_the_callers_identity() {
    let issuer = Issuer::new();
    let (dir, s, secure, iss) = start_self_signed(&issuer);
    let root = dir.path().join("ca-cert.pem");
    let root = root.to_str().unwrap();
    let token = issuer.token(&iss, "system:serviceaccount:bookinfo:reviews");
    for delta in [false, true] {
        let ok = ads(secure, root, &token, "bookinfo", delta, &[]);
        assert_eq!(ok["code"], "OK", "delta={delta}: {ok}\n{}", s.log());
        assert!(ok["clusters"].as_u64().unwrap() > 3, "{ok}");
        let other = ads(secure, root, &token, "default", delta, &[]);
        assert_eq!(other["code"], "PERMISSION_DENIED", "delta={delta}: {other}");
        assert_eq!(
            other["details"],
            format!("authorization failed: no identities ([{ID}]) matched default/"),
            "istiod's wording"
        );
        let none = ads(secure, root, "-", "bookinfo", delta, &[]);
        assert_eq!((&none["code"], &none["details"]), (&"UNAUTHENTICATED".into(), &"authentication failure".into()));
        let forged = Issuer::new().token(&iss, "system:serviceaccount:bookinfo:reviews");
        assert_eq!(ads(secure, root, &forged, "bookinfo", delta, &[])["code"], "UNAUTHENTICATED");
    }
    // The node's service account must be the identity's too.
    let sa = ads(secure, root, &token, "bookinfo", false, &[("ADS_SERVICE_ACCOUNT", "ratings")]);
    assert_eq!(sa["code"], "PERMISSION_DENIED", "{sa}");
    assert_eq!(ads(secure, root, &token, "bookinfo", false, &[("ADS_SERVICE_ACCOUNT", "reviews")])["code"], "OK");
    // A workload certificate of this CA authenticates as its identity.
    let saved = dir.path().join("reviews");
    let saved = saved.to_str().unwrap();
    assert_eq!(ask_with(secure, root, &token, ID, 0, &[("CA_SAVE", saved)])["code"], "OK");
    let (key, chain) = (format!("{saved}.key"), format!("{saved}.chain"));
    let cert = [("ADS_CLIENT_KEY", key.as_str()), ("ADS_CLIENT_CHAIN", chain.as_str())];
    assert_eq!(ads(secure, root, "-", "bookinfo", false, &cert)["code"], "OK");
    assert_eq!(ads(secure, root, "-", "default", true, &cert)["code"], "PERMISSION_DENIED");
    // 15010 stays plaintext and unauthenticated, as in istiod.
    let clear = ads(s.grpc, "-", "-", "default", false, &[]);
    assert_eq!(clear["code"], "OK", "{clear}");
}

/// A plugged-in CA's root: its parameters, key and PEM.
pub(crate) type PluggedRoot = (rcgen::CertificateParams, rcgen::KeyPair, String);

/// Writes plugged-in CA files into `dir` as Istio's "plug in CA
/// certificates" task makes them (a root, an intermediate signing);
/// returns the root's PEM.
fn plug_in(dir: &std::path::Path, name: &str) -> String {
    plug_in_under(dir, name, None, "").2
}

/// [`plug_in`] with a new intermediate under `root` (a new root when
/// none), `root-cert.pem` being `older` roots then the root; returns the
/// root.
pub(crate) fn plug_in_under(dir: &std::path::Path, name: &str, root: Option<PluggedRoot>, older: &str) -> PluggedRoot {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer as RcIssuer, KeyPair as RcKey};
    let (rp, root_key, root_pem) = root.unwrap_or_else(|| {
        let root_key = RcKey::generate().unwrap();
        let mut rp = CertificateParams::default();
        rp.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        rp.distinguished_name.push(DnType::CommonName, format!("{name} Root CA"));
        let pem = rp.self_signed(&root_key).unwrap().pem();
        (rp, root_key, pem)
    });
    let int_key = RcKey::generate().unwrap();
    let mut ip = CertificateParams::default();
    ip.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ip.distinguished_name.push(DnType::CommonName, format!("{name} Intermediate CA"));
    let int = ip.signed_by(&int_key, &RcIssuer::from_params(&rp, &root_key)).unwrap();
    // Written aside and renamed in, as a Secret update swaps files.
    let write = |file: &str, body: String| {
        let tmp = dir.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(tmp, dir.join(file)).unwrap();
    };
    write("ca-key.pem", int_key.serialize_pem());
    write("root-cert.pem", format!("{older}{root_pem}"));
    write("cert-chain.pem", format!("{}{}", int.pem(), root_pem));
    write("ca-cert.pem", int.pem());
    (rp, root_key, root_pem)
}

/// ROOT_CA_DIR with an intermediate: the answer is leaf, cert-chain.pem's
/// certificates, root; a new intermediate under the same root takes
/// effect without a restart (istiod's `handleEvent`). A new root does not
/// without `ISTIO_MULTIROOT_MESH` (istiod's "Multi root is disabled,
/// updating new ROOT-CA not supported"): the CA in force stays.
#[test]
fn plugged_in_certificates_sign_through_their_intermediate_and_rotate() {
    let dir = tempfile::tempdir().unwrap();
    let first = plug_in_under(dir.path(), "first", None, "");
    let first_root = first.2.clone();
    let issuer = Issuer::new();
    let uri = http_body_server(Arc::new(Mutex::new(issuer.jwks.clone())));
    let rule = format!(r#"{{"issuer":"https://issuer.test","jwks_uri":"{uri}","audiences":["istio-ca"]}}"#);
    let secure = free_port();
    let s = Server::start(
        std::path::Path::new(BOOKINFO),
        &["--secureGRPCAddr", &secure.to_string()],
        &[
            ("JWT_RULE", &rule),
            ("ROOT_CA_DIR", dir.path().to_str().unwrap()),
            ("ISTIOD_RS_PLUGGED_CA_CHECK_INTERVAL", "100ms"),
        ],
        None,
    );
    server::wait_for("the JWT_RULE key set", Duration::from_secs(20), || s.log().contains("JWT_RULE key set fetched"));
    let token = issuer.token("https://issuer.test", "system:serviceaccount:bookinfo:ratings");
    let bundle = dir.path().join("trusted.pem");
    std::fs::write(&bundle, &first_root).unwrap();
    let got = ask(secure, bundle.to_str().unwrap(), &token, "-", 0);
    assert_eq!(got["code"], "OK", "{got}");
    assert_eq!(got["sans"], serde_json::json!(["spiffe://cluster.local/ns/bookinfo/sa/ratings"]));
    assert_eq!(got["chain"], 4, "leaf, intermediate, root (cert-chain.pem), root-cert.pem");
    assert_eq!(got["verified"], true, "leaf -> intermediate -> plugged-in root");
    let intermediate = |r: &serde_json::Value| r["issuer"].as_str().unwrap_or_default().to_owned();
    assert!(intermediate(&got).contains("first Intermediate CA"), "{got}");

    // A new intermediate under the same root: the next certificate is
    // signed by it, and chains to the root as before.
    plug_in_under(dir.path(), "renewed", Some(first), "");
    server::wait_for("the reload", Duration::from_secs(10), || s.log().contains("plugged-in CA certificates reloaded"));
    let renewed = ask(secure, bundle.to_str().unwrap(), &token, "-", 0);
    assert_eq!((&renewed["code"], &renewed["verified"]), (&"OK".into(), &true.into()), "{renewed}");
    assert!(intermediate(&renewed).contains("renewed Intermediate CA"), "{renewed}");

    // A new root: refused in istiod's words; the CA in force stays.
    plug_in_under(dir.path(), "second", None, "");
    server::wait_for("the refusal", Duration::from_secs(10), || {
        s.log().contains("Multi root is disabled, updating new ROOT-CA not supported")
    });
    let kept = ask(secure, bundle.to_str().unwrap(), &token, "-", 0);
    assert_eq!((&kept["code"], &kept["verified"]), (&"OK".into(), &true.into()), "{kept}");
    assert!(intermediate(&kept).contains("renewed Intermediate CA"), "{kept}");
    // A half-written rotation (a key that does not parse) keeps the CA in force.
    std::fs::write(dir.path().join("ca-key.pem"), "-----BEGIN PRIVATE KEY-----\ngarbage\n").unwrap();
    server::wait_for("the refusal", Duration::from_secs(10), || s.log().contains("cannot reload the plugged-in CA"));
    let kept = ask(secure, bundle.to_str().unwrap(), &token, "-", 0);
    assert_eq!((&kept["code"], &kept["verified"]), (&"OK".into(), &true.into()), "{kept}");
}

/// Under `ISTIO_MULTIROOT_MESH` a plugged-in root may change when one
/// bundle holds the other (istiod's `pemBundleHasSubsetRelation`): the old
/// and new roots together are taken ("Updating new ROOT-CA") and PCDS
/// pushes the new trust bundle to a proxy that asked; a root unrelated
/// to the one in force is refused ("Updating new ROOT-CA not supported").
#[test]
fn a_multiroot_mesh_takes_a_root_bundle_that_keeps_the_old_root() {
    use crate::ads_client as client;
    use istiod_proto::envoy::service::discovery::v3::DiscoveryRequest;
    use istiod_proto::istio::mesh::v1alpha1::ProxyConfig;
    let dir = tempfile::tempdir().unwrap();
    let first = plug_in_under(dir.path(), "first", None, "");
    let first_root = first.2.clone();
    let s = Server::start(
        std::path::Path::new(BOOKINFO),
        &[],
        &[
            ("ROOT_CA_DIR", dir.path().to_str().unwrap()),
            ("ISTIOD_RS_PLUGGED_CA_CHECK_INTERVAL", "100ms"),
            ("ISTIO_MULTIROOT_MESH", "true"),
        ],
        None,
    );
    let bundle_of = |r: &istiod_proto::envoy::service::discovery::v3::DiscoveryResponse| -> Vec<String> {
        let pc: ProxyConfig = istiod_proto::prost::Message::decode(r.resources[0].value.as_slice()).unwrap();
        pc.ca_certificates_pem
    };
    let rt = client::runtime();
    rt.block_on(async {
        let mut c = client::connect(s.grpc, false).await;
        let pcds = DiscoveryRequest {
            node: Some(client::sidecar(1)),
            type_url: istiod_proto::type_url::PROXY_CONFIG.into(),
            ..Default::default()
        };
        c.sotw(pcds);
        let r = c.recv().await;
        assert_eq!(bundle_of(&r), vec![first_root.clone()]);
        c.ack(&r, &[]);
        // The new root beside the old one: taken, and pushed.
        let second = plug_in_under(dir.path(), "second", None, &first_root);
        let r = c.recv().await;
        assert_eq!(bundle_of(&r), vec![format!("{first_root}{}", second.2)], "{}", s.log());
        assert!(s.log().contains("Updating new ROOT-CA"), "{}", s.log());
        c.ack(&r, &[]);
        // A root that keeps neither: refused, nothing pushed.
        plug_in_under(dir.path(), "third", None, "");
        server::wait_for("the refusal", Duration::from_secs(10), || {
            s.log().contains("Updating new ROOT-CA not supported")
        });
        c.expect_silence(Duration::from_millis(500)).await;
    });
}

/// istiod's `CertSigner` with `CERT_SIGNER_DOMAIN` (k8s_ra.go
/// `kubernetesSign`, `SignWithCertChain`): a request naming `other` is
/// signed by `example.com/other`, and its answer ends with the root the
/// mesh configuration's `caCertificates` names for that signer (the chain
/// verified against it). Without `./etc/external-ca-cert` the RA has no
/// root of its own, so a request naming no signer gets the signed
/// certificate alone. Without `CERT_SIGNER_DOMAIN`, a named signer is
/// refused in istiod's words.
#[test]
fn a_request_names_its_signer_under_the_cert_signer_domain() {
    let api = csr_api();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/csr_signer.py");
    let run_signer = |name: &str, out: &std::path::Path| {
        std::process::Command::new(python::python())
            .arg(&script)
            .args([api.url().as_str(), name, out.to_str().unwrap()])
            .spawn()
            .unwrap()
    };
    let (default_dir, other_dir) = (dir.path().join("workloads"), dir.path().join("other"));
    let mut signers = [run_signer("example.com/workloads", &default_dir), run_signer("example.com/other", &other_dir)];
    let other_root = other_dir.join("root-cert.pem");
    server::wait_for("the signers' roots", Duration::from_secs(20), || {
        other_root.exists() && default_dir.join("root-cert.pem").exists()
    });
    let mesh = dir.path().join("mesh.yaml");
    let other_pem = std::fs::read_to_string(&other_root).unwrap();
    std::fs::write(
        &mesh,
        format!("caCertificates:\n- pem: {}\n  certSigners: [example.com/other]\n", serde_json::json!(other_pem)),
    )
    .unwrap();
    // No ./etc/external-ca-cert in its working directory.
    let cwd = dir.path().join("istiod");
    std::fs::create_dir_all(&cwd).unwrap();
    let ca_dir = dir.path().join("ca");
    let secure = free_port();
    let start = |domain: &str| {
        let env = [
            ("EXTERNAL_CA", "ISTIOD_RA_KUBERNETES_API"),
            ("K8S_SIGNER", "example.com/workloads"),
            ("CERT_SIGNER_DOMAIN", domain),
            ("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca_dir.to_str().unwrap()),
        ];
        Server::start_in(
            Some(&cwd),
            &["--kubeconfig", kubeconfig.to_str().unwrap()],
            &["--secureGRPCAddr", &secure.to_string(), "--meshConfig", mesh.to_str().unwrap()],
            &env,
            None,
        )
    };
    let s = start("example.com");
    let serving_root = ca_dir.join("ca-cert.pem");
    let env = [("CA_CERT_SIGNER", "other"), ("CA_VERIFY_ROOT", other_root.to_str().unwrap())];
    let got = ask_with(secure, serving_root.to_str().unwrap(), "tok-reviews", ID, 0, &env);
    assert_eq!((&got["code"], &got["verified"]), (&"OK".into(), &true.into()), "{got}\n{}", s.log());
    assert_eq!(got["chain"], 2, "the certificate, then the mesh configuration's root for the signer: {got}");
    let plain = ask(secure, serving_root.to_str().unwrap(), "tok-reviews", ID, 0);
    assert_eq!((&plain["code"], &plain["chain"]), (&"OK".into(), &1.into()), "no RA root to append: {plain}");
    drop(s);
    // Without CERT_SIGNER_DOMAIN (the RA's root then comes from the file).
    let root_dir = cwd.join("etc/external-ca-cert");
    std::fs::create_dir_all(&root_dir).unwrap();
    std::fs::copy(default_dir.join("root-cert.pem"), root_dir.join("root-cert.pem")).unwrap();
    let _s = start("");
    let named = ask_with(secure, serving_root.to_str().unwrap(), "tok-reviews", ID, 0, &[("CA_CERT_SIGNER", "other")]);
    assert_eq!(named["code"], "INTERNAL", "{named}");
    assert!(named["details"].as_str().unwrap().contains("certSignerDomain is required for signer other"), "{named}");
    for (d, signer) in [&default_dir, &other_dir].into_iter().zip(signers.iter_mut()) {
        std::fs::write(d.join("stop"), "").unwrap();
        let _ = signer.wait();
    }
}

/// `PILOT_CERT_PROVIDER=k8s.io/<signer>` with the Kubernetes RA (istiod's
/// `initDNSCertsK8SRA`, `isK8SSigning`): istiod's own certificate for
/// :15012 is signed by that signer through the CSR API (its DNS names, the
/// usages digital signature, key encipherment and server auth); the root
/// it distributes (the `istio-ca-root-cert` ConfigMaps, the webhooks'
/// caBundle) is the one the mesh configuration's `caCertificates` names
/// for the signer; it makes no CA of its own (no `istio-ca-secret`).
/// Without such a root the start stops in istiod's words; without the RA,
/// in ours (istiod dereferences none).
#[test]
fn istiods_own_certificate_can_come_from_a_kubernetes_signer() {
    let (api, dir, kubeconfig, mesh) = cluster();
    api.install(csr_resource());
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/csr_signer.py");
    let cwd = dir.path().join("istiod");
    let (workloads_dir, istiod_dir) = (cwd.join("etc/external-ca-cert"), dir.path().join("istiod-signer"));
    let mut signers: Vec<_> = [("example.com/workloads", &workloads_dir), ("example.com/istiod", &istiod_dir)]
        .into_iter()
        .map(|(name, out)| {
            std::process::Command::new(python::python())
                .arg(&script)
                .args([api.url().as_str(), name, out.to_str().unwrap()])
                .spawn()
                .unwrap()
        })
        .collect();
    let istiod_root = istiod_dir.join("root-cert.pem");
    server::wait_for("the signers' roots", Duration::from_secs(20), || {
        istiod_root.exists() && workloads_dir.join("root-cert.pem").exists()
    });
    let root_pem = std::fs::read_to_string(&istiod_root).unwrap();
    let selectors = std::fs::read_to_string(&mesh).unwrap();
    let secure = free_port();
    let env = [
        ("POD_NAME", "istiod-a"),
        ("POD_NAMESPACE", "istio-system"),
        ("EXTERNAL_CA", "ISTIOD_RA_KUBERNETES_API"),
        ("K8S_SIGNER", "example.com/workloads"),
        ("PILOT_CERT_PROVIDER", "k8s.io/example.com/istiod"),
    ];
    let start = |env: &[(&str, &str)]| {
        Server::try_start_in(
            Some(&cwd),
            &["--kubeconfig", kubeconfig.to_str().unwrap()],
            &["--secureGRPCAddr", &secure.to_string(), "--meshConfig", mesh.to_str().unwrap()],
            env,
        )
    };
    // No root for the signer in the mesh configuration: istiod's words.
    let Err(refused) = start(&env) else { panic!("started without a root for the signer") };
    assert!(refused.contains("no caCertificates defined in mesh config"), "{refused}");
    std::fs::write(
        &mesh,
        format!(
            "{selectors}caCertificates:\n- pem: {}\n  certSigners: [example.com/istiod]\n",
            serde_json::json!(root_pem)
        ),
    )
    .unwrap();
    let s = start(&env).unwrap_or_else(|log| panic!("{log}"));
    // :15012 presents the signer's certificate: a client trusting only the
    // signer's root connects, and is signed through the RA.
    let got = ask(secure, istiod_root.to_str().unwrap(), "tok-reviews", ID, 0);
    assert_eq!(got["code"], "OK", "{got}\n{}", s.log());
    // The root ConfigMaps carry the signer's root.
    server::wait_for("the root ConfigMaps", Duration::from_secs(20), || {
        named(&api, "configmaps", "istio-ca-root-cert")
            .get("bookinfo")
            .is_some_and(|c| c["data"]["root-cert.pem"] == root_pem.as_str())
    });
    assert!(named(&api, "secrets", "istio-ca-secret").is_empty(), "no CA of istiod's own");
    drop(s);
    // Without the Kubernetes RA.
    let without_ra: Vec<(&str, &str)> = env.iter().copied().filter(|(k, _)| *k != "EXTERNAL_CA").collect();
    let Err(refused) = start(&without_ra) else { panic!("started without the RA") };
    assert!(refused.contains("needs the Kubernetes RA"), "{refused}");
    for (out, signer) in [&workloads_dir, &istiod_dir].into_iter().zip(signers.iter_mut()) {
        std::fs::write(out.join("stop"), "").unwrap();
        let _ = signer.wait();
    }
}

/// The CertificateSigningRequest collection of the fake API server.
fn csr_resource() -> istiod_kubewatch::fake::Resource {
    istiod_kubewatch::fake::Resource {
        group: "certificates.k8s.io",
        version: "v1",
        plural: "certificatesigningrequests",
        kind: "CertificateSigningRequest",
    }
}

/// A fake API server with the core kinds, CSRs, and the token of
/// `bookinfo/reviews` for the CA's audience.
fn csr_api() -> istiod_kubewatch::fake::FakeApi {
    let api = server::fake_api();
    for r in istiod_kubewatch::fake::core_resources() {
        api.install(r);
    }
    api.install(csr_resource());
    api.add_token("tok-reviews", "system:serviceaccount:bookinfo:reviews", &["istio-ca"]);
    api
}

/// istiod's default authenticator in a cluster: the token is reviewed by
/// the API server (here the fake one, speaking the TokenReview API), for
/// the `istio-ca` audience, and must be a service account's. A result is
/// cached for the token's life: a second request costs no review, and the
/// API server going down does not refuse a caller already reviewed; a new
/// token meanwhile is UNAVAILABLE, not refused, and works once it is back.
#[test]
fn kubernetes_tokens_are_reviewed_by_the_api_server() {
    use istiod_kubewatch::fake::core_resources;
    let api = server::fake_api();
    for r in core_resources() {
        api.install(r);
    }
    api.add_token("tok-reviews", "system:serviceaccount:bookinfo:reviews", &["istio-ca"]);
    api.add_token("tok-other-audience", "system:serviceaccount:bookinfo:reviews", &["kubernetes"]);
    api.add_token("tok-user", "alice", &["istio-ca"]);
    api.add_token("tok-later", "system:serviceaccount:bookinfo:ratings", &["istio-ca"]);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let ca_dir = dir.path().join("ca");
    let secure = free_port();
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--secureGRPCAddr", &secure.to_string()],
        &[("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca_dir.to_str().unwrap())],
        None,
    );
    let root = ca_dir.join("ca-cert.pem");
    let root = root.to_str().unwrap();

    let got = ask(secure, root, "tok-reviews", ID, 0);
    assert_eq!((&got["code"], &got["verified"]), (&"OK".into(), &true.into()), "{got}\n{}", s.log());
    assert_eq!(got["sans"], serde_json::json!([ID]));
    let reviews = api.token_reviews();
    let again = ask(secure, root, "tok-reviews", ID, 0);
    assert_eq!(again["code"], "OK", "{again}\n{}", s.log());
    assert_eq!(api.token_reviews(), reviews, "the second request is answered from the cache");
    for token in ["tok-other-audience", "tok-user", "tok-unknown"] {
        let got = ask(secure, root, token, "-", 0);
        assert_eq!(got["code"], "UNAUTHENTICATED", "{token}: {got}");
    }
    api.set_down(true);
    assert_eq!(ask(secure, root, "tok-reviews", ID, 0)["code"], "OK", "reviewed before: cached");
    let down = ask(secure, root, "tok-later", "-", 0);
    assert_eq!(down["code"], "UNAVAILABLE", "{down}\n{}", s.log());
    api.set_down(false);
    let later = ask(secure, root, "tok-later", "-", 0);
    assert_eq!(later["code"], "OK", "nothing was cached as refused: {later}");
    assert_eq!(later["sans"], serde_json::json!(["spiffe://cluster.local/ns/bookinfo/sa/ratings"]));
    // xDS on the TLS port: the stream waits for its token's review, then
    // serves a node of the reviewed namespace only.
    api.add_token("tok-ads", "system:serviceaccount:bookinfo:details", &["istio-ca"]);
    api.add_token("tok-ads-delta", "system:serviceaccount:bookinfo:details", &["istio-ca"]);
    api.add_token("tok-ads-other", "system:serviceaccount:bookinfo:details", &["istio-ca"]);
    let ok = ads(secure, root, "tok-ads", "bookinfo", false, &[]);
    assert_eq!(ok["code"], "OK", "{ok}\n{}", s.log());
    assert_eq!(ads(secure, root, "tok-ads-delta", "bookinfo", true, &[])["code"], "OK");
    let other = ads(secure, root, "tok-ads-other", "default", false, &[]);
    assert_eq!(other["code"], "PERMISSION_DENIED", "{other}");
    assert_eq!(ads(secure, root, "tok-user", "bookinfo", false, &[])["code"], "UNAUTHENTICATED");
    // Streams half-closed before any request, one waiting for its review:
    // ended cleanly, the server serves on.
    api.add_token("tok-ads-empty", "system:serviceaccount:bookinfo:details", &["istio-ca"]);
    for token in ["tok-ads-empty", "tok-ads"] {
        let empty = py_json(
            "ads_auth.py",
            &[secure.to_string(), root.into(), token.into(), "bookinfo".into(), "sotw-empty".into()],
            &[],
        );
        assert_eq!(empty["code"], "OK", "{token}: {empty}");
    }
    assert_eq!(ads(secure, root, "tok-ads", "bookinfo", true, &[])["code"], "OK");
}

/// The objects of `plural` named `name`, by namespace.
fn named(
    api: &istiod_kubewatch::fake::FakeApi,
    plural: &str,
    name: &str,
) -> std::collections::BTreeMap<String, serde_json::Value> {
    api.objects(plural)
        .into_iter()
        .filter(|o| o["metadata"]["name"] == name)
        .map(|o| (o["metadata"]["namespace"].as_str().unwrap().to_owned(), o))
        .collect()
}

fn b64(v: &serde_json::Value) -> String {
    use base64::engine::general_purpose::STANDARD;
    String::from_utf8(STANDARD.decode(v.as_str().unwrap()).unwrap()).unwrap()
}

/// A fake API with the mesh's core kinds, namespaces (one ignored by
/// istiod, one outside the discoverySelectors) and a reviewed token.
fn cluster() -> (istiod_kubewatch::fake::FakeApi, tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    use istiod_kubewatch::fake::core_resources;
    let api = server::fake_api();
    for r in core_resources() {
        api.install(r);
    }
    for (ns, labels) in [
        ("istio-system", serde_json::json!({})),
        ("bookinfo", serde_json::json!({"istio-injection": "enabled"})),
        ("default", serde_json::json!({})),
        ("kube-public", serde_json::json!({})),
        ("outside", serde_json::json!({"mesh": "no"})),
    ] {
        api.apply(
            "namespaces",
            serde_json::json!({"metadata": {"name": ns, "labels": labels}, "status": {"phase": "Active"}}),
        );
    }
    api.add_token("tok-reviews", "system:serviceaccount:bookinfo:reviews", &["istio-ca"]);
    // The chart's webhook configurations, caBundle empty, validation
    // failing open until istiod says it serves.
    for r in istiod_kubewatch::fake::webhook_resources() {
        api.install(r);
    }
    // Istio's CRDs, so the validation controller's dry run has a Gateway
    // collection to write to.
    for r in istiod_kubewatch::fake::istio_resources() {
        api.install(r);
    }
    api.apply(
        "mutatingwebhookconfigurations",
        serde_json::json!({"metadata": {"name": "istio-sidecar-injector", "labels": {"istio.io/rev": "default"}},
            "webhooks": [{"name": "rev.namespace.sidecar-injector.istio.io", "clientConfig": {"service": {"name": "istiod"}}},
                         {"name": "other.example.com", "clientConfig": {"caBundle": "dGhlaXJz"}}]}),
    );
    api.apply(
        "validatingwebhookconfigurations",
        serde_json::json!({"metadata": {"name": "istio-validator-istio-system", "labels": {"istio.io/rev": "default"}},
            "webhooks": [{"name": "rev.validation.istio.io", "failurePolicy": "Ignore", "clientConfig": {"service": {"name": "istiod"}}}]}),
    );
    api.apply(
        "mutatingwebhookconfigurations",
        serde_json::json!({"metadata": {"name": "istio-sidecar-injector-canary", "labels": {"istio.io/rev": "canary"}},
            "webhooks": [{"name": "rev.namespace.sidecar-injector.istio.io", "clientConfig": {}}]}),
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let mesh = dir.path().join("mesh.yaml");
    std::fs::write(
        &mesh,
        "discoverySelectors:\n- matchExpressions:\n  - {key: mesh, operator: NotIn, values: [\"no\"]}\n",
    )
    .unwrap();
    (api, dir, kubeconfig, mesh)
}

/// The namespace controller election's record: the one ConfigMap lock's
/// `control-plane.alpha.kubernetes.io/leader` annotation.
fn election_record(api: &istiod_kubewatch::fake::FakeApi) -> serde_json::Value {
    let locks = named(api, "configmaps", "istio-namespace-controller-election");
    assert_eq!(locks.len(), 1, "{locks:?}");
    let text = locks["istio-system"]["metadata"]["annotations"]["control-plane.alpha.kubernetes.io/leader"].as_str();
    serde_json::from_str(text.expect("the record annotation")).unwrap()
}

/// istiod's self-signed CA in a cluster (security/pkg/pki/ca/ca.go,
/// namespacecontroller.go, pilot/pkg/leaderelection): two replicas against
/// one API server share one `istio-ca-secret` (read before created; the
/// loser of the create race reads the winner's), one holds the
/// `istio-namespace-controller-election` Lease, and the
/// `istio-ca-root-cert` ConfigMaps (every selected namespace but the
/// ignored ones) carry the root both sign under.
#[test]
fn two_replicas_share_one_root_and_one_keeps_the_root_configmaps() {
    let (api, _dir, kubeconfig, mesh) = cluster();
    let start = |pod: &str| {
        let secure = free_port();
        let s = Server::start_on(
            &["--kubeconfig", kubeconfig.to_str().unwrap()],
            &[
                "--secureGRPCAddr",
                &secure.to_string(),
                "--meshConfig",
                mesh.to_str().unwrap(),
                "--httpsAddr",
                &free_port().to_string(),
            ],
            // istiod's RSA root, as CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE asks.
            &[("POD_NAME", pod), ("POD_NAMESPACE", "istio-system"), ("CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE", "2048")],
            None,
        );
        (s, secure)
    };
    let ((a, secure_a), (b, secure_b)) = std::thread::scope(|t| {
        let a = t.spawn(|| start("istiod-a"));
        let b = t.spawn(|| start("istiod-b"));
        (a.join().unwrap(), b.join().unwrap())
    });
    let secrets = api.objects("secrets");
    assert_eq!(secrets.len(), 1, "one istio-ca-secret: {secrets:?}");
    let secret = &secrets[0];
    assert_eq!(secret["metadata"]["name"], "istio-ca-secret");
    assert_eq!(secret["metadata"]["namespace"], "istio-system");
    assert_eq!(secret["type"], "istio.io/ca-root");
    let root = b64(&secret["data"]["ca-cert.pem"]);
    // An RSA-2048 root's PEM is about 1.1 KB, an ECDSA P-256 one 0.6 KB.
    assert!(root.len() > 1000, "an RSA root: {root}");
    assert!(root.contains("BEGIN CERTIFICATE") && b64(&secret["data"]["ca-key.pem"]).contains("PRIVATE KEY"));

    let want: Vec<String> = ["bookinfo", "default", "istio-system"].iter().map(|s| (*s).to_owned()).collect();
    server::wait_for("the root ConfigMaps", Duration::from_secs(20), || {
        named(&api, "configmaps", "istio-ca-root-cert").keys().cloned().collect::<Vec<_>>() == want
    });
    let maps = named(&api, "configmaps", "istio-ca-root-cert");
    for (ns, cm) in &maps {
        assert_eq!(cm["data"]["root-cert.pem"], root.as_str(), "{ns}: the Secret's root");
        assert_eq!(cm["metadata"]["labels"]["istio.io/config"], "true");
    }
    // istiod's ConfigMap lock (NewLeaderElectionMulticluster: not a Lease),
    // its record in the annotation client-go's ConfigMapLock uses.
    let holder = election_record(&api)["holderIdentity"].as_str().unwrap().to_owned();
    assert!(holder == "istiod-a" || holder == "istiod-b", "{holder}");
    let (leader, follower) = if holder == "istiod-a" { (&a, &b) } else { (&b, &a) };
    server::wait_for("the leader's log", Duration::from_secs(5), || leader.log().contains("leader election: leading"));
    // One created the Secret; the other read it (before creating, or after
    // losing the create race).
    let created = |s: &Server| s.log().contains("created istio-system/istio-ca-secret");
    assert_eq!(u8::from(created(&a)) + u8::from(created(&b)), 1, "one replica created the Secret");

    // Both replicas sign under the ConfigMap's root, and serve :15012 with
    // a certificate it verifies.
    let published = _dir.path().join("published-root.pem");
    std::fs::write(&published, maps["bookinfo"]["data"]["root-cert.pem"].as_str().unwrap()).unwrap();
    for secure in [secure_a, secure_b] {
        let got = ask(secure, published.to_str().unwrap(), "tok-reviews", ID, 0);
        assert_eq!((&got["code"], &got["verified"]), (&"OK".into(), &true.into()), "{got}");
    }
    // A ConfigMap edited by hand is put back; one deleted is made again.
    let mut edited = maps["default"].clone();
    edited["data"]["root-cert.pem"] = "tampered".into();
    api.apply("configmaps", edited);
    api.delete("configmaps", "bookinfo", "istio-ca-root-cert");
    server::wait_for("the repair", Duration::from_secs(20), || {
        let m = named(&api, "configmaps", "istio-ca-root-cert");
        m.len() == 3 && m.values().all(|cm| cm["data"]["root-cert.pem"] == root.as_str())
    });
    // The webhook configurations of this revision carry the root; the
    // validator fails closed only once the API server is seen to reach the
    // webhook (istiod's dry run of an invalid Gateway is refused): while
    // dry runs pass (no webhook called), it stays open.
    let b64root = base64::engine::general_purpose::STANDARD.encode(&root);
    let hooks = |plural: &str, name: &str| api.get(plural, "", name).unwrap();
    server::wait_for("the caBundle", Duration::from_secs(20), || {
        hooks("validatingwebhookconfigurations", "istio-validator-istio-system")["webhooks"][0]["clientConfig"]["caBundle"]
            == b64root.as_str()
    });
    assert!(api.dry_runs() > 0, "the replicas tried their dry runs");
    assert_eq!(
        hooks("validatingwebhookconfigurations", "istio-validator-istio-system")["webhooks"][0]["failurePolicy"],
        "Ignore",
        "not seen to be reached: validation stays open"
    );
    api.deny_dry_runs(Some(
        "admission webhook \"rev.validation.istio.io\" denied the request: configuration is invalid: \"internal.istio.io/webhook-always-reject\" annotation found, rejecting",
    ));
    server::wait_for("fail-closed validation", Duration::from_secs(20), || {
        hooks("validatingwebhookconfigurations", "istio-validator-istio-system")["webhooks"][0]["failurePolicy"]
            == "Fail"
    });
    let injector = hooks("mutatingwebhookconfigurations", "istio-sidecar-injector");
    assert_eq!(injector["webhooks"][0]["clientConfig"]["caBundle"], b64root.as_str());
    assert_eq!(injector["webhooks"][1]["clientConfig"]["caBundle"], "dGhlaXJz", "not an istiod webhook");
    let validator = hooks("validatingwebhookconfigurations", "istio-validator-istio-system");
    assert_eq!(validator["webhooks"][0]["clientConfig"]["caBundle"], b64root.as_str());
    let canary = hooks("mutatingwebhookconfigurations", "istio-sidecar-injector-canary");
    assert!(canary["webhooks"][0]["clientConfig"]["caBundle"].is_null(), "another revision's");
    let versions = (injector["metadata"]["resourceVersion"].clone(), validator["metadata"]["resourceVersion"].clone());

    // Seconds later, still one leader all along: the lease never changed
    // hands and the follower never led.
    let record = election_record(&api);
    assert_eq!((&record["holderIdentity"], &record["leaderTransitions"]), (&holder.as_str().into(), &0.into()));
    assert_eq!(record["holderKey"], "default", "keyed by revision");
    assert!(!follower.log().contains("leader election: leading"), "only one leads:\n{}", follower.log());
    let again = (
        hooks("mutatingwebhookconfigurations", "istio-sidecar-injector")["metadata"]["resourceVersion"].clone(),
        hooks("validatingwebhookconfigurations", "istio-validator-istio-system")["metadata"]["resourceVersion"].clone(),
    );
    assert_eq!(again, versions, "nothing rewritten while the root stays");

    // A canary revision next to them: it patches its own webhooks at once,
    // though the default revision holds the namespace controller's lock
    // (istiod: each revision patches its own, unelected).
    let canary_replica = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--meshConfig", mesh.to_str().unwrap()],
        &[("POD_NAME", "istiod-canary-a"), ("POD_NAMESPACE", "istio-system"), ("REVISION", "canary")],
        None,
    );
    server::wait_for("the canary's caBundle", Duration::from_secs(10), || {
        hooks("mutatingwebhookconfigurations", "istio-sidecar-injector-canary")["webhooks"][0]["clientConfig"]["caBundle"]
            == b64root.as_str()
    });
    assert_eq!(election_record(&api)["holderIdentity"], holder.as_str(), "the default revision keeps its lock");
    assert!(!canary_replica.log().contains("leader election: leading"), "{}", canary_replica.log());
}

/// istiod's `PILOT_CA_CERT_CONFIGMAP` names the root ConfigMaps, and
/// `INJECTION_WEBHOOK_CONFIG_NAME=""` (a low-privilege install) leaves the
/// injector's webhook configuration alone while the validator's is still
/// patched (sidecarinjector.go and validation.go start their patchers only
/// for a non-empty name).
#[test]
fn the_root_configmap_is_named_and_an_empty_webhook_name_patches_nothing() {
    let (api, _dir, kubeconfig, mesh) = cluster();
    let _s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--meshConfig", mesh.to_str().unwrap()],
        &[
            ("POD_NAME", "istiod-a"),
            ("POD_NAMESPACE", "istio-system"),
            ("PILOT_CA_CERT_CONFIGMAP", "custom-root-cert"),
            ("PILOT_CRL_CONFIGMAP", "custom-crl"),
            ("INJECTION_WEBHOOK_CONFIG_NAME", ""),
        ],
        None,
    );
    let want: Vec<String> = ["bookinfo", "default", "istio-system"].iter().map(|s| (*s).to_owned()).collect();
    server::wait_for("the renamed root ConfigMaps", Duration::from_secs(20), || {
        named(&api, "configmaps", "custom-root-cert").keys().cloned().collect::<Vec<_>>() == want
    });
    assert!(named(&api, "configmaps", "istio-ca-root-cert").is_empty());
    // istiod's CRL ConfigMaps (PILOT_ENABLE_CA_CRL, on by default), empty
    // without a plugged-in CA's ca-crl.pem.
    server::wait_for("the CRL ConfigMaps", Duration::from_secs(20), || {
        named(&api, "configmaps", "custom-crl").keys().cloned().collect::<Vec<_>>() == want
    });
    assert!(named(&api, "configmaps", "custom-crl").values().all(|cm| cm["data"]["ca-crl.pem"] == ""));
    let hooks = |plural: &str, name: &str| api.get(plural, "", name).unwrap();
    server::wait_for("the validator's caBundle", Duration::from_secs(20), || {
        hooks("validatingwebhookconfigurations", "istio-validator-istio-system")["webhooks"][0]["clientConfig"]["caBundle"]
            .is_string()
    });
    let injector = hooks("mutatingwebhookconfigurations", "istio-sidecar-injector");
    assert!(injector["webhooks"][0]["clientConfig"]["caBundle"].is_null(), "not patched: {injector}");
}

/// istiod's webhook and informer metrics against an API server: the
/// injector's caBundle patched (`webhook_patch_attempts_total`), a
/// configuration of this revision without the injector's webhook
/// (`webhook_patch_failures_total`, `webhook_entry_not_found`), the
/// validator updated (`galley_validation_config_updates`), and watches
/// that fail to resume (`controller_sync_errors_total`), parsed as Prometheus
/// parses a scrape.
#[test]
fn webhook_and_informer_metrics_are_counted_where_istiod_counts_them() {
    let (api, _dir, kubeconfig, mesh) = cluster();
    api.apply(
        "mutatingwebhookconfigurations",
        serde_json::json!({"metadata": {"name": "no-injector", "labels": {"istio.io/rev": "default"}},
            "webhooks": [{"name": "other.example.com", "clientConfig": {}}]}),
    );
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--meshConfig", mesh.to_str().unwrap()],
        &[("POD_NAME", "istiod-a"), ("POD_NAMESPACE", "istio-system")],
        None,
    );
    let scrape = || server::get(s.monitoring, "/metrics").unwrap().1;
    use crate::operations::series;
    server::wait_for("the webhook patches", Duration::from_secs(20), || {
        let m = scrape();
        series(&m, "webhook_patch_attempts_total{name=\"sidecar-injector.istio.io\"}").is_some()
            && series(&m, "galley_validation_config_updates ").is_some()
    });
    // Watches dropped, and the requests that resume them fail (500: the
    // client retries 503s itself, as client-go's does).
    api.fail_next(4);
    api.drop_watches();
    server::wait_for("watch errors", Duration::from_secs(20), || {
        series(&scrape(), "controller_sync_errors_total{cluster=\"Kubernetes\"}").is_some()
    });
    let m = scrape();
    assert!(
        series(&m, "webhook_patch_failures_total{name=\"no-injector\",reason=\"webhook_entry_not_found\"}")
            == Some(1.0),
        "once for the one configuration, not once a round: {m}"
    );
    crate::operations::check_scrape(
        &m,
        &[
            "--only",
            "webhook_patch_attempts_total",
            "webhook_patch_failures_total",
            "galley_validation_config_updates",
            "controller_sync_errors_total",
        ],
    );
}

/// A plugged-in CA's revocation list (`ca-crl.pem` in ROOT_CA_DIR) goes to
/// every selected namespace's `istio-ca-crl` ConfigMap, and a new one
/// follows the file (istiod's `PILOT_ENABLE_CA_CRL`, on by default);
/// `PILOT_ENABLE_CA_CRL=false` writes none.
#[test]
fn a_plugged_in_crl_is_distributed_to_every_namespace() {
    let (api, dir, kubeconfig, mesh) = cluster();
    let ca = dir.path().join("cacerts");
    std::fs::create_dir_all(&ca).unwrap();
    plug_in(&ca, "crl");
    let crl = |n: u32| format!("-----BEGIN X509 CRL-----\nCRL{n}\n-----END X509 CRL-----\n");
    std::fs::write(ca.join("ca-crl.pem"), crl(1)).unwrap();
    let start = |env: &[(&str, &str)]| {
        let mut e = vec![
            ("POD_NAME", "istiod-a"),
            ("POD_NAMESPACE", "istio-system"),
            ("ROOT_CA_DIR", ca.to_str().unwrap()),
            ("ISTIOD_RS_PLUGGED_CA_CHECK_INTERVAL", "100ms"),
        ];
        e.extend_from_slice(env);
        Server::start_on(
            &["--kubeconfig", kubeconfig.to_str().unwrap()],
            &["--meshConfig", mesh.to_str().unwrap()],
            &e,
            None,
        )
    };
    let off = start(&[("PILOT_ENABLE_CA_CRL", "false")]);
    server::wait_for("the root ConfigMaps", Duration::from_secs(20), || {
        named(&api, "configmaps", "istio-ca-root-cert").len() == 3
    });
    assert!(named(&api, "configmaps", "istio-ca-crl").is_empty(), "PILOT_ENABLE_CA_CRL=false");
    drop(off);
    let _s = start(&[]);
    let all_say = |want: &str| {
        let maps = named(&api, "configmaps", "istio-ca-crl");
        maps.len() == 3 && maps.values().all(|cm| cm["data"]["ca-crl.pem"] == want)
    };
    server::wait_for("the CRL in every namespace", Duration::from_secs(20), || all_say(&crl(1)));
    std::fs::write(ca.join("ca-crl.pem"), crl(2)).unwrap();
    server::wait_for("the new CRL", Duration::from_secs(20), || all_say(&crl(2)));
}

/// `ENABLE_CLUSTER_TRUST_BUNDLE_API`: the root goes to istiod's
/// `istio.io:istiod-ca:root-cert` ClusterTrustBundle (signer
/// `istio.io/istiod-ca`) instead of the per-namespace ConfigMaps, and an
/// edited bundle is put back.
#[test]
fn the_root_can_go_to_a_cluster_trust_bundle() {
    let (api, _dir, kubeconfig, mesh) = cluster();
    api.install(istiod_kubewatch::fake::Resource {
        group: "certificates.k8s.io",
        version: "v1beta1",
        plural: "clustertrustbundles",
        kind: "ClusterTrustBundle",
    });
    let _s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--meshConfig", mesh.to_str().unwrap()],
        &[("POD_NAME", "istiod-a"), ("POD_NAMESPACE", "istio-system"), ("ENABLE_CLUSTER_TRUST_BUNDLE_API", "true")],
        None,
    );
    let bundle = || api.get("clustertrustbundles", "", "istio.io:istiod-ca:root-cert");
    server::wait_for("the ClusterTrustBundle", Duration::from_secs(20), || bundle().is_some());
    let root = b64(&api.objects("secrets")[0]["data"]["ca-cert.pem"]);
    let b = bundle().unwrap();
    assert_eq!(b["spec"]["signerName"], "istio.io/istiod-ca");
    assert_eq!(b["spec"]["trustBundle"], root.as_str());
    assert!(named(&api, "configmaps", "istio-ca-root-cert").is_empty(), "no ConfigMaps with the bundle");
    let mut edited = b.clone();
    edited["spec"]["trustBundle"] = "tampered".into();
    api.apply("clustertrustbundles", edited);
    server::wait_for("the bundle put back", Duration::from_secs(20), || {
        bundle().is_some_and(|b| b["spec"]["trustBundle"] == root.as_str())
    });
}

/// istiod's root rotation (selfsignedcarootcertrotator.go): a root in the
/// last CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE of its life is
/// renewed for the same key and written back to the Secret; the old root
/// stays in the trust bundle (the ConfigMaps carry both), certificates
/// issued before still verify, and :15012 is served with a certificate of
/// the new root.
#[test]
fn a_self_signed_root_near_its_end_is_renewed_and_the_old_one_kept() {
    use base64::engine::general_purpose::STANDARD;
    let (api, dir, kubeconfig, mesh) = cluster();
    // A root with a minute left (and two minutes behind it).
    let short = istiod_pki::Settings { self_signed_ttl: Duration::from_secs(60), ..Default::default() };
    let (old_root, key) = istiod_pki::Ca::generate_root_pem(&short).unwrap();
    api.apply(
        "secrets",
        serde_json::json!({
            "metadata": {"name": "istio-ca-secret", "namespace": "istio-system"},
            "type": "istio.io/ca-root",
            "data": {"ca-cert.pem": STANDARD.encode(&old_root), "ca-key.pem": STANDARD.encode(&key)},
        }),
    );
    let old_file = dir.path().join("old-root.pem");
    std::fs::write(&old_file, &old_root).unwrap();
    let secure = free_port();
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--secureGRPCAddr", &secure.to_string(), "--meshConfig", mesh.to_str().unwrap()],
        &[
            ("POD_NAMESPACE", "istio-system"),
            ("CITADEL_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL", "200ms"),
            ("CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE", "50"),
        ],
        None,
    );
    server::wait_for("the rotation", Duration::from_secs(20), || {
        s.log().contains("Root certificate rotation is completed successfully")
    });
    let secret = api.get("secrets", "istio-system", "istio-ca-secret").unwrap();
    let new_root = b64(&secret["data"]["ca-cert.pem"]);
    assert_ne!(new_root, old_root, "a new certificate");
    assert_eq!(b64(&secret["data"]["ca-key.pem"]), key, "for the same key");
    // The ConfigMaps carry the new root, then the old one.
    server::wait_for("the ConfigMaps", Duration::from_secs(20), || {
        let m = named(&api, "configmaps", "istio-ca-root-cert");
        m.len() == 3 && m.values().all(|cm| cm["data"]["root-cert.pem"] == format!("{new_root}{old_root}").as_str())
    });
    // The injector's caBundle follows the bundle.
    server::wait_for("the caBundle", Duration::from_secs(20), || {
        let injector = api.get("mutatingwebhookconfigurations", "", "istio-sidecar-injector").unwrap();
        injector["webhooks"][0]["clientConfig"]["caBundle"] == STANDARD.encode(format!("{new_root}{old_root}")).as_str()
    });
    let new_file = dir.path().join("new-root.pem");
    std::fs::write(&new_file, &new_root).unwrap();
    // :15012 now presents a certificate of the new root; the chain ends
    // at the new root and, same key and subject, verifies under both.
    let got = ask_with(secure, new_file.to_str().unwrap(), "tok-reviews", ID, 0, &[]);
    assert_eq!((&got["code"], &got["verified"]), (&"OK".into(), &true.into()), "{got}\n{}", s.log());
    // No second rotation: the renewed root has ten years.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(s.log().matches("Root certificate rotation is completed successfully").count(), 1);
    let _ = old_file;
}

/// `loadgen csr` against the binary: every workload of a storm gets a
/// certificate naming it, and the CA's counters agree.
#[test]
fn a_loadgen_csr_storm_gets_every_workload_its_certificate() {
    use istiod_loadgen::csr;
    let issuer = csr::Issuer::generate("https://loadgen.test").unwrap();
    let uri = http_body_server(Arc::new(Mutex::new(issuer.jwks())));
    let rule = format!(r#"{{"issuer":"https://loadgen.test","jwks_uri":"{uri}","audiences":["istio-ca"]}}"#);
    let dir = tempfile::tempdir().unwrap();
    let secure = free_port();
    let s = Server::start(
        std::path::Path::new(BOOKINFO),
        &["--secureGRPCAddr", &secure.to_string()],
        &[("JWT_RULE", &rule), ("ISTIOD_RS_SELF_SIGNED_CA_DIR", dir.path().to_str().unwrap())],
        None,
    );
    server::wait_for("the JWT_RULE key set", Duration::from_secs(20), || s.log().contains("JWT_RULE key set fetched"));
    let tls = istiod_loadgen::proxy::tls(&dir.path().join("ca-cert.pem"), "istiod.istio-system.svc").unwrap();
    let o = csr::Options {
        server: secure,
        tls,
        workloads: 200,
        concurrency: 200,
        namespaces: 4,
        trust_domain: "cluster.local".into(),
        issuer,
        duration: Duration::from_secs(30),
        server_pid: Some(s.pid()),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let report = rt.block_on(csr::run(o)).unwrap();
    assert_eq!(report.ok, 200, "{:?}\n{}", report.errors, s.log());
    let json = report.json();
    assert_eq!(json["latency_ms"]["count"], 200);
    assert!(json["certs_per_second"].as_f64().unwrap() > 0.0);
    assert!(json["server_cpu_s"].as_f64().is_some(), "{json}");
    let metrics = server::get(s.monitoring, "/metrics").unwrap().1;
    assert!(metrics.contains("citadel_server_success_cert_issuance_count 200"), "{metrics}");
}

/// A TLS handshake with `addr` as a client limited by `args`
/// (`tests/py/tls_probe.py`).
fn tls_probe(addr: std::net::SocketAddr, root: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(crate::python::python())
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/tls_probe.py"))
        .arg(addr.to_string())
        .arg(root)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", crate::python::text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// istiod's TLS policy on its TLS servers (`--tls-min-version`,
/// `--tls-cipher-suites`, `COMPLIANCE_POLICY` as `EnforceGoCompliance`),
/// seen by an OpenSSL client: what the policy leaves out fails the
/// handshake, what it allows succeeds; a suite Go does not know stops the
/// server in istiod's words.
#[test]
fn the_tls_policy_is_what_clients_can_negotiate() {
    let start = |flags: &[&str], env: &[(&str, &str)]| {
        let dir = tempfile::tempdir().unwrap();
        let secure = free_port();
        let addr = secure.to_string();
        let mut f = vec!["--secureGRPCAddr", addr.as_str()];
        f.extend_from_slice(flags);
        let ca = dir.path().to_str().unwrap().to_owned();
        let mut e: Vec<(&str, &str)> = vec![("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca.as_str())];
        e.extend_from_slice(env);
        let s = Server::start(std::path::Path::new(BOOKINFO), &f, &e, None);
        (dir, s, secure)
    };
    let ok = |v: &serde_json::Value| v["ok"] == true;

    // Defaults: TLS 1.2 and 1.3.
    let (dir, _s, secure) = start(&[], &[]);
    let root = dir.path().join("ca-cert.pem");
    assert_eq!(tls_probe(secure, &root, &[])["version"], "TLSv1.3");
    assert_eq!(tls_probe(secure, &root, &["--max", "1.2"])["version"], "TLSv1.2");

    // --tls-min-version 1.3: a TLS 1.2 client is refused.
    let (dir, _s, secure) = start(&["--tls-min-version", "1.3"], &[]);
    let root = dir.path().join("ca-cert.pem");
    assert!(!ok(&tls_probe(secure, &root, &["--max", "1.2"])), "TLS 1.2 refused");
    assert_eq!(tls_probe(secure, &root, &[])["version"], "TLSv1.3");

    // --tls-cipher-suites: only those TLS 1.2 suites.
    let (dir, _s, secure) = start(&["--tls-cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"], &[]);
    let root = dir.path().join("ca-cert.pem");
    let refused = tls_probe(secure, &root, &["--max", "1.2", "--ciphers", "ECDHE-ECDSA-AES128-GCM-SHA256"]);
    assert!(!ok(&refused), "{refused}");
    let taken = tls_probe(secure, &root, &["--max", "1.2", "--ciphers", "ECDHE-ECDSA-AES256-GCM-SHA384"]);
    assert_eq!(taken["cipher"], "ECDHE-ECDSA-AES256-GCM-SHA384", "{taken}");

    // COMPLIANCE_POLICY=fips-140-2: TLS 1.2 only, FIPS suites only.
    let (dir, _s, secure) = start(&[], &[("COMPLIANCE_POLICY", "fips-140-2")]);
    let root = dir.path().join("ca-cert.pem");
    assert!(!ok(&tls_probe(secure, &root, &["--min", "1.3"])), "TLS 1.3 refused");
    let chacha = tls_probe(secure, &root, &["--max", "1.2", "--ciphers", "ECDHE-ECDSA-CHACHA20-POLY1305"]);
    assert!(!ok(&chacha), "{chacha}");
    let fips = tls_probe(secure, &root, &["--max", "1.2"]);
    assert_eq!(fips["version"], "TLSv1.2", "{fips}");

    // A suite Go does not know: the server does not start.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--configDir", BOOKINFO, "--tls-cipher-suites", "TLS_NOT_A_SUITE"])
        .args(["--grpcAddr", "127.0.0.1:0", "--httpAddr", "127.0.0.1:0", "--monitoringAddr", "127.0.0.1:0"])
        .args(["--secureGRPCAddr", "", "--httpsAddr", ""])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cipher suite TLS_NOT_A_SUITE not supported or doesn't exist"), "{err}");
}

/// istiod's Kubernetes RA (`EXTERNAL_CA=ISTIOD_RA_KUBERNETES_API`,
/// `K8S_SIGNER`; security/pkg/pki/ra/k8s_ra.go, chiron's SignCSRK8s): a
/// grpcio agent's CSR, checked against its reviewed token, becomes a
/// CertificateSigningRequest for the signer with istiod's usages and the
/// granted lifetime, approved by istiod; an external signer (Python's
/// `cryptography`, tests/py/csr_signer.py) signs it; the agent gets the
/// certificate and the signer's root (`./etc/external-ca-cert/root-cert.pem`)
/// last, and verifies the chain; the CSR object is deleted. A CSR for
/// another identity never reaches the API server; one the signer denies is
/// refused with its reason. Start refuses what istiod refuses, in its words.
#[test]
fn the_kubernetes_signer_signs_workload_certificates_through_the_csr_api() {
    let api = csr_api();
    api.add_token("tok-deny", "system:serviceaccount:bookinfo:deny-me", &["istio-ca"]);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    // The signer runs beside the API server, its CA's root where istiod
    // reads it.
    let cwd = dir.path().join("istiod");
    let signer_dir = cwd.join("etc/external-ca-cert");
    let signer_name = "example.com/workloads";
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/csr_signer.py");
    let mut signer = std::process::Command::new(python::python())
        .arg(script)
        .args([api.url().as_str(), signer_name, signer_dir.to_str().unwrap()])
        .spawn()
        .unwrap();
    let signer_root = signer_dir.join("root-cert.pem");
    server::wait_for("the signer's root", Duration::from_secs(20), || signer_root.exists());
    let ca_dir = dir.path().join("ca");
    let secure = free_port();
    let ra_env = [
        ("EXTERNAL_CA", "ISTIOD_RA_KUBERNETES_API"),
        ("K8S_SIGNER", signer_name),
        ("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca_dir.to_str().unwrap()),
    ];
    let s = Server::start_in(
        Some(&cwd),
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--secureGRPCAddr", &secure.to_string()],
        &ra_env,
        None,
    );
    // istiod's own serving certificate is still its CA's.
    let serving_root = ca_dir.join("ca-cert.pem");
    let saved = dir.path().join("ra-leaf");
    let verify = [("CA_VERIFY_ROOT", signer_root.to_str().unwrap()), ("CA_SAVE", saved.to_str().unwrap())];
    let got = ask_with(secure, serving_root.to_str().unwrap(), "tok-reviews", ID, 3600, &verify);
    assert_eq!((&got["code"], &got["verified"]), (&"OK".into(), &true.into()), "{got}\n{}", s.log());
    assert_eq!(got["sans"], serde_json::json!([ID]));
    assert_eq!(got["chain"], 2, "the signed certificate, then the signer's root: {got}");
    let seen: Vec<serde_json::Value> = std::fs::read_to_string(signer_dir.join("seen.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["signerName"], signer_name);
    assert_eq!(
        seen[0]["usages"],
        serde_json::json!(["digital signature", "key encipherment", "server auth", "client auth"])
    );
    assert_eq!(seen[0]["expirationSeconds"], 3600);
    assert_eq!(seen[0]["uris"], serde_json::json!([ID]));
    assert!(seen[0]["name"].as_str().unwrap().starts_with("csr-workload-"), "{seen:?}");
    // Labelled for the RA's one list a tick (chiron watches each CSR).
    assert_eq!(seen[0]["labels"], serde_json::json!({"istio.io/ra": "istiod"}));
    let approved = &seen[0]["approved"][0];
    assert_eq!(approved["status"], "True");
    assert!(approved["message"].as_str().unwrap().ends_with("is approved"), "{approved}");
    server::wait_for("the CSR deleted", Duration::from_secs(10), || api.count("certificatesigningrequests") == 0);
    // Renewing with the signer's certificate and no token: its root is
    // trusted for client certificates (istiod's createPeerCertVerifier).
    let (key, chain) = (saved.with_extension("key"), saved.with_extension("chain"));
    let renew = [
        ("CA_VERIFY_ROOT", signer_root.to_str().unwrap()),
        ("CA_CLIENT_KEY", key.to_str().unwrap()),
        ("CA_CLIENT_CHAIN", chain.to_str().unwrap()),
    ];
    let renewed = ask_with(secure, serving_root.to_str().unwrap(), "-", ID, 0, &renew);
    assert_eq!((&renewed["code"], &renewed["sans"]), (&"OK".into(), &serde_json::json!([ID])), "{renewed}");
    // Another identity than the token's: refused here, never sent.
    let other =
        ask(secure, serving_root.to_str().unwrap(), "tok-reviews", "spiffe://cluster.local/ns/bookinfo/sa/ratings", 0);
    // istiod's RA: ValidateCSR fails, a CSRError (ra/common.go preSign).
    assert_eq!(other["code"], "INVALID_ARGUMENT", "{other}");
    assert!(other["details"].as_str().unwrap().contains("unable to validate SAN Identities in CSR"), "{other}");
    // The caller's identity in a CSR not as istio-agent makes it (an
    // organisation in the subject): refused before the API server too
    // (ValidateCSR's compareCSRs).
    let org = [("CA_CSR_ORG", "acme")];
    let made = ask_with(secure, serving_root.to_str().unwrap(), "tok-reviews", ID, 0, &org);
    assert_eq!(made["code"], "INVALID_ARGUMENT", "{made}");
    assert!(made["details"].as_str().unwrap().contains("unable to validate SAN Identities in CSR"), "{made}");
    // The signer denies: refused with its reason, at once.
    let deny = "spiffe://cluster.local/ns/bookinfo/sa/deny-me";
    let denied = ask(secure, serving_root.to_str().unwrap(), "tok-deny", deny, 0);
    assert_eq!(denied["code"], "INTERNAL", "{denied}");
    assert!(denied["details"].as_str().unwrap().contains("denied: not for this signer"), "{denied}");
    let lines = std::fs::read_to_string(signer_dir.join("seen.jsonl")).unwrap().lines().count();
    assert_eq!(lines, 3, "the ratings and acme CSRs never reached the API server");
    std::fs::write(signer_dir.join("stop"), "").unwrap();
    let _ = signer.wait();
    drop(s);

    // What istiod refuses at start.
    let run = |source: &[&str], env: &[(&str, &str)]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
            .arg("discovery")
            .args(source)
            .args(["--grpcAddr", "127.0.0.1:0", "--httpAddr", "127.0.0.1:0", "--monitoringAddr", "127.0.0.1:0"])
            .args(["--secureGRPCAddr", "", "--httpsAddr", "", "--ctrlz_port", "0", "--log_target", "stderr"])
            .envs(env.iter().copied())
            .current_dir(dir.path())
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, log) = run(&["--configDir", BOOKINFO], &[("EXTERNAL_CA", "ISTIOD_RA_KUBERNETES_API")]);
    assert!(!ok && log.contains("failed to create RA: kubeClient is nil"), "{log}");
    let (ok, log) = run(&["--kubeconfig", kubeconfig.to_str().unwrap()], &[("EXTERNAL_CA", "VAULT")]);
    assert!(!ok && log.contains("failed to create RA: invalid CA Name VAULT"), "{log}");
    if !std::path::Path::new(istiod_ca::k8s_signer::SERVICE_ACCOUNT_CA).exists() {
        // No root here (the working directory has no etc/external-ca-cert).
        let (ok, log) = run(&["--kubeconfig", kubeconfig.to_str().unwrap()], &ra_env);
        assert!(!ok && log.contains("error processing Certificate Bundle for Kubernetes RA"), "{log}");
    }
}

/// istiod under Knative (`K_REVISION` set, pilot/pkg/xds/ads.go
/// `firstRequest`): the process's first ADS stream is refused with
/// UNAVAILABLE "server warmup not complete; try again"; the next, of
/// either variant, is served. Without it the first is served.
#[test]
fn under_knative_the_first_xds_stream_is_refused() {
    let s = Server::start(std::path::Path::new(BOOKINFO), &[], &[("K_REVISION", "istiod-00001")], None);
    let first = ads(s.grpc, "-", "-", "bookinfo", true, &[]);
    assert_eq!(
        (first["code"].as_str(), first["details"].as_str()),
        (Some("UNAVAILABLE"), Some("server warmup not complete; try again")),
        "{first}\n{}",
        s.log()
    );
    for delta in [false, true] {
        let next = ads(s.grpc, "-", "-", "bookinfo", delta, &[]);
        assert_eq!(next["code"], "OK", "delta={delta}: {next}");
    }
    let plain = Server::start(std::path::Path::new(BOOKINFO), &[], &[], None);
    assert_eq!(ads(plain.grpc, "-", "-", "bookinfo", false, &[])["code"], "OK");
}
