//! Ambient, through a real ztunnel (istio/ztunnel, built by
//! `../shared/peers/build-ztunnel`): the binary on the fake Kubernetes API
//! server with `PILOT_ENABLE_AMBIENT`, a ztunnel in shared mode (no
//! istio-cni: it never becomes ready, but it fetches the workload API and
//! prefetches the certificates of the HBONE pods on its node), and what its
//! admin `/config_dump` holds.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::server::{self, Server, free_port, get, wait_for};

/// The ztunnel binary: `ISTIOD_RS_ZTUNNEL` (scripts/test builds it), else
/// built now by the peers' script. `None` only where there is no script
/// (a checkout without `../shared/peers`).
fn ztunnel() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ISTIOD_RS_ZTUNNEL") {
        return Some(PathBuf::from(p));
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/peers/build-ztunnel");
    if !script.exists() {
        return None;
    }
    let out = Command::new(&script)
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .stderr(Stdio::inherit())
        .output()
        .expect("run build-ztunnel");
    assert!(out.status.success(), "build-ztunnel failed");
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// A running ztunnel, killed when dropped (it ignores SIGTERM until it
/// is ready, which it never is without istio-cni).
struct Ztunnel {
    child: Child,
    admin: std::net::SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
    /// A ztunnel binds fixed ports (15001, 15006, 15008, 15021, 15053):
    /// one runs at a time in this process (nextest runs its tests apart,
    /// `cargo test` on threads).
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

impl Drop for Ztunnel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Ztunnel {
    fn start(bin: &PathBuf, secure: std::net::SocketAddr, root: &str, token: &str, node: &str) -> Ztunnel {
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let one_at_a_time = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        // No trailing newline: ztunnel sends the file as it is.
        std::fs::write(dir.path().join("token"), token).unwrap();
        let (admin, stats) = (free_port(), free_port());
        let log = dir.path().join("ztunnel.log");
        let url = format!("https://{secure}");
        let child = Command::new(bin)
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("XDS_ADDRESS", &url)
            .env("CA_ADDRESS", &url)
            .env("XDS_ROOT_CA", root)
            .env("CA_ROOT_CA", root)
            .env("ALT_XDS_HOSTNAME", "istiod.istio-system.svc")
            .env("ALT_CA_HOSTNAME", "istiod.istio-system.svc")
            .env("AUTH_TOKEN", dir.path().join("token"))
            .env("NODE_NAME", node)
            .env("POD_NAME", "ztunnel-abc")
            .env("POD_NAMESPACE", "istio-system")
            .env("INSTANCE_IP", "127.0.0.1")
            .env("CLUSTER_ID", "Kubernetes")
            .env(
                "PROXY_CONFIG",
                json!({"proxyAdminPort": admin.port(), "statsPort": stats.port(), "proxyMetadata": {}}).to_string(),
            )
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("start ztunnel");
        Ztunnel { child, admin, log, _dir: dir, _one_at_a_time: one_at_a_time }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether ztunnel exited at start for want of the capabilities its
    /// shared mode needs (CAP_SYS_ADMIN, CAP_NET_ADMIN: it enters network
    /// namespaces), which only a runner without them lacks.
    fn lacks_capabilities(&mut self) -> bool {
        std::thread::sleep(Duration::from_millis(300));
        self.child.try_wait().ok().flatten().is_some() && self.log().contains("failed to set netns")
    }

    fn dump(&mut self) -> Value {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("ztunnel exited ({status}):\n{}", self.log());
        }
        match get(self.admin, "/config_dump") {
            Some((200, body)) => serde_json::from_str(&body).unwrap_or(Value::Null),
            _ => Value::Null,
        }
    }
}

fn pod(name: &str, ns: &str, sa: &str, node: &str, ip: &str, hbone: bool, app: &str) -> Value {
    let mut annotations = json!({});
    if hbone {
        annotations = json!({"ambient.istio.io/redirection": "enabled"});
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"), "labels": {"app": app}, "annotations": annotations},
        "spec": {"serviceAccountName": sa, "nodeName": node, "containers": [{"name": "app", "ports": [{"name": "http", "containerPort": 8080}]}]},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "conditions": [{"type": "Ready", "status": "True"}]},
    })
}

fn by<'a>(list: &'a Value, key: &str, value: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|v| v[key] == value)
}

/// The waypoint `default/waypoint` (Gateway class `istio-waypoint`), its
/// Service (10.96.0.99, HBONE on 15008) and an endpoint of it (its
/// Gateway then gets addresses).
fn apply_waypoint(api: &istiod_kubewatch::fake::FakeApi) {
    api.apply(
        "services",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "waypoint", "namespace": "default"},
               "spec": {"clusterIP": "10.96.0.99", "clusterIPs": ["10.96.0.99"],
                        "selector": {"gateway.networking.k8s.io/gateway-name": "waypoint"},
                        "ports": [{"name": "mesh", "port": 15008, "appProtocol": "hbone"}]}}),
    );
    api.apply(
        "endpointslices",
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "waypoint-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "waypoint"}},
               "addressType": "IPv4", "ports": [{"name": "mesh", "port": 15008}],
               "endpoints": [{"addresses": ["10.0.0.30"], "conditions": {"ready": true}}]}),
    );
    api.apply(
        istiod_kubewatch::fake::K8S_GATEWAYS,
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "waypoint", "namespace": "default"},
               "spec": {"gatewayClassName": "istio-waypoint",
                        "listeners": [{"name": "mesh", "port": 15008, "protocol": "HBONE"}]}}),
    );
}

/// A fake API server for a real ztunnel's tests: the resources istiod
/// reads and writes, the namespaces `istio-system` and `default`, the
/// ztunnel's pod on `node-a` and its token (`zt-token`); and where the
/// binary started on it keeps its CA and serves its secure port.
struct ZtunnelCluster {
    api: istiod_kubewatch::fake::FakeApi,
    dir: tempfile::TempDir,
    secure: std::net::SocketAddr,
}

impl ZtunnelCluster {
    fn new() -> ZtunnelCluster {
        use istiod_kubewatch::fake::{core_resources, gateway_api_resources, istio_resources, write_resources};
        let api = server::fake_api();
        for r in core_resources()
            .into_iter()
            .chain(istio_resources())
            .chain(gateway_api_resources())
            .chain(write_resources())
        {
            api.install(r);
        }
        for ns in ["istio-system", "default"] {
            api.apply("namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        }
        api.apply("pods", pod("ztunnel-abc", "istio-system", "ztunnel", "node-a", "10.0.0.2", false, "ztunnel"));
        api.add_pod_token(
            "zt-token",
            "system:serviceaccount:istio-system:ztunnel",
            &["istio-ca"],
            "ztunnel-abc",
            "uid-ztunnel-abc",
        );
        ZtunnelCluster { api, dir: tempfile::tempdir().unwrap(), secure: free_port() }
    }

    /// The binary on the API server, with ambient on and the ztunnel's
    /// service account trusted to ask for its node's pods' certificates.
    fn start(&self) -> Server {
        let kubeconfig = server::kubeconfig(self.dir.path(), &self.api.url());
        let ca_dir = self.dir.path().join("ca");
        Server::start_on(
            &["--kubeconfig", kubeconfig.to_str().unwrap()],
            &["--secureGRPCAddr", &self.secure.to_string()],
            &[
                ("ISTIOD_RS_SELF_SIGNED_CA_DIR", ca_dir.to_str().unwrap()),
                ("PILOT_ENABLE_AMBIENT", "true"),
                ("CA_TRUSTED_NODE_ACCOUNTS", "istio-system/ztunnel"),
            ],
            None,
        )
    }

    /// The mesh root's PEM file (once started).
    fn root(&self) -> String {
        self.dir.path().join("ca/ca-cert.pem").to_str().unwrap().to_owned()
    }

    /// A ztunnel on `node-a`, or `None` (having said why) where this
    /// runner lacks the capabilities its shared mode needs.
    #[allow(clippy::print_stderr, reason = "a skip says why")]
    fn ztunnel(&self, bin: &PathBuf) -> Option<Ztunnel> {
        let mut zt = Ztunnel::start(bin, self.secure, &self.root(), "zt-token", "node-a");
        if zt.lacks_capabilities() {
            eprintln!(
                "SKIPPED: ztunnel's shared mode needs CAP_SYS_ADMIN and CAP_NET_ADMIN, which this runner lacks:\n{}",
                zt.log()
            );
            return None;
        }
        Some(zt)
    }
}

/// A ztunnel on node `node-a` gets the pods, the Service with its VIP,
/// ports and endpoints, and the AuthorizationPolicy as istiod describes
/// them; it holds an `Available` certificate for the HBONE pod on its
/// node, signed by the mesh root, and none for the pod elsewhere or the
/// pod without HBONE; asking directly for the identity of a pod on another
/// node is refused; a deleted pod leaves its view.
#[test]
#[allow(clippy::print_stderr, reason = "a skip says why")]
fn a_real_ztunnel_gets_its_nodes_workloads_policies_and_certificates() {
    let Some(bin) = ztunnel() else {
        eprintln!("SKIPPED: no ../shared/peers/build-ztunnel to build ztunnel with");
        return;
    };
    use istiod_kubewatch::fake::K8S_GATEWAYS;
    let cluster = ZtunnelCluster::new();
    let api = &cluster.api;
    for (n, zone) in [("node-a", "zone-a"), ("node-b", "zone-b")] {
        api.apply(
            "nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": zone}}}),
        );
    }
    api.apply("pods", pod("web-0", "default", "web", "node-a", "10.0.0.10", true, "web"));
    api.apply("pods", pod("web-1", "default", "web-b", "node-b", "10.0.0.11", true, "web"));
    api.apply("pods", pod("tcp-0", "default", "tcp", "node-a", "10.0.0.12", false, "web"));
    api.apply(
        "services",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
               "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "selector": {"app": "web"},
                        "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
    );
    api.apply(
        "authorizationpolicies",
        json!({"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
               "metadata": {"name": "allow-web", "namespace": "default"},
               "spec": {"action": "ALLOW", "rules": [{"from": [{"source": {"principals": ["cluster.local/ns/default/sa/web"]}}],
                                                       "to": [{"operation": {"ports": ["8080"]}}]}]}}),
    );
    api.apply(
        "authorizationpolicies",
        json!({"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
               "metadata": {"name": "deny-get", "namespace": "default"},
               "spec": {"action": "DENY", "rules": [{"to": [{"operation": {"methods": ["GET"], "ports": ["9090"]}}]}]}}),
    );
    let s = cluster.start();
    let (root, secure) = (cluster.root(), cluster.secure);
    let Some(mut zt) = cluster.ztunnel(&bin) else { return };

    let web_id = "spiffe://cluster.local/ns/default/sa/web";
    let mut dump = Value::Null;
    let within = Duration::from_secs(60);
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        dump = zt.dump();
        let cert_ready = by(&dump["certificates"], "identity", web_id).is_some_and(|c| c["state"] == "Available");
        if cert_ready
            && dump["workloads"].as_array().is_some_and(|w| w.len() == 4)
            && dump["policies"].as_array().is_some_and(|p| p.len() == 2)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let context = || format!("{dump:#}\nztunnel:\n{}\nserver:\n{}", zt_log_tail(&zt), s.log());
    let workloads = &dump["workloads"];
    let web0 = by(workloads, "uid", "Kubernetes//Pod/default/web-0").unwrap_or_else(|| panic!("web-0: {}", context()));
    assert_eq!(web0["workloadIps"], json!(["10.0.0.10"]));
    assert_eq!(web0["protocol"], "HBONE");
    assert_eq!(web0["node"], "node-a");
    assert_eq!(web0["serviceAccount"], "web");
    assert_eq!(web0["status"], "Healthy");
    assert_eq!(web0["services"], json!(["default/web.default.svc.cluster.local"]));
    assert_eq!(web0["locality"], json!({"region": "r1", "zone": "zone-a", "subzone": ""}), "{web0}");
    let tcp0 = by(workloads, "uid", "Kubernetes//Pod/default/tcp-0").unwrap_or_else(|| panic!("tcp-0: {}", context()));
    assert_eq!(tcp0["protocol"], "TCP");
    assert!(by(workloads, "uid", "Kubernetes//Pod/default/web-1").is_some(), "{}", context());
    let svc =
        by(&dump["services"], "hostname", "web.default.svc.cluster.local").unwrap_or_else(|| panic!("{}", context()));
    assert_eq!(svc["vips"], json!(["/10.96.0.10"]));
    assert_eq!(svc["ports"], json!({"80": 0}), "a named targetPort is 0 on the Service");
    let endpoints = svc["endpoints"].as_object().unwrap();
    assert_eq!(endpoints["Kubernetes//Pod/default/web-0"]["port"], json!({"80": 8080}), "resolved per pod");
    assert_eq!(endpoints.len(), 3, "{svc}");
    let policy = by(&dump["policies"], "name", "allow-web").unwrap_or_else(|| panic!("{}", context()));
    assert_eq!((&policy["scope"], &policy["action"]), (&json!("Namespace"), &json!("Allow")));
    assert_eq!(
        policy["rules"],
        json!([[[{"destinationPorts": [8080]}], [{"principals": [{"Exact": "cluster.local/ns/default/sa/web"}]}]]])
    );
    // Everything served decoded and was accepted (the workload API's
    // protos carry no field rules of their own: ztunnel's decoding is the
    // check).
    assert!(!nacked(&zt.log()), "{}", context());
    // Certificates: the HBONE pod on node-a only.
    let certs = dump["certificates"].as_array().unwrap();
    let ids: Vec<&str> = certs.iter().filter_map(|c| c["identity"].as_str()).collect();
    assert_eq!(ids, [web_id], "{}", context());
    let cert = &certs[0];
    assert_eq!(cert["state"], "Available", "{}", context());
    let leaf = pem_of(&cert["certChain"][0]["pem"]);
    let root_in_dump = pem_of(&cert["rootCerts"][0]["pem"]);
    let flat = |pem: &str| pem.split_whitespace().collect::<String>();
    assert_eq!(flat(&root_in_dump), flat(&std::fs::read_to_string(&root).unwrap()), "the mesh root");
    assert!(san_uris(&leaf).contains(&web_id.to_owned()), "SAN of {leaf}");

    // Asked directly: a pod on node-b is not this node's to ask for, and
    // an account that is not trusted may not impersonate at all.
    let other = crate::ca::ask_with(
        secure,
        &root,
        "zt-token",
        "spiffe://cluster.local/ns/default/sa/web-b",
        0,
        &[("CA_IMPERSONATE", "spiffe://cluster.local/ns/default/sa/web-b")],
    );
    assert_eq!(other["code"], "UNAUTHENTICATED", "{other}");
    assert_eq!(other["details"], "request impersonation authentication failure");
    assert!(s.log().contains(r#"no instances of "default/web-b" found on node "node-a""#), "{}", s.log());
    let mine = crate::ca::ask_with(secure, &root, "zt-token", web_id, 0, &[("CA_IMPERSONATE", web_id)]);
    assert_eq!((&mine["code"], &mine["sans"]), (&json!("OK"), &json!([web_id])), "{mine}");

    // A DENY with an HTTP attribute is enforced on its port alone, and
    // reported in istiod's words.
    let deny = by(&dump["policies"], "name", "deny-get").unwrap_or_else(|| panic!("{}", context()));
    assert_eq!(deny["rules"], json!([[[{"destinationPorts": [9090]}]]]), "{deny}");
    let (_, report) = get(s.http, "/debug/config_report").unwrap();
    assert!(
        report.contains(
            "AuthorizationPolicy default/deny-get at ztunnel: ztunnel does not support HTTP attributes (found: methods)"
        ),
        "{report}"
    );

    // The elected replica writes istiod's ZtunnelAccepted condition on
    // each policy ztunnel reads (AMBIENT_ENABLE_STATUS).
    let condition = |name: &str| {
        let p = api.get("authorizationpolicies", "default", name).unwrap_or_default();
        p["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "ZtunnelAccepted").cloned())
            .unwrap_or_default()
    };
    wait_for("the policies' status", within, || !condition("allow-web").is_null() && !condition("deny-get").is_null());
    let ok = condition("allow-web");
    assert_eq!(
        (&ok["status"], &ok["reason"], &ok["message"]),
        (&json!("True"), &json!("Accepted"), &json!("attached to ztunnel")),
        "{ok}"
    );
    let partial = condition("deny-get");
    assert_eq!((&partial["status"], &partial["reason"]), (&json!("True"), &json!("UnsupportedValue")), "{partial}");
    assert!(
        partial["message"].as_str().unwrap().contains("ztunnel does not support HTTP attributes (found: methods)"),
        "{partial}"
    );

    // istiod's /debug/ambientz: protojson, addresses as its handler writes
    // them (the address's text, base64).
    let (_, body) = get(s.http, "/debug/ambientz").unwrap();
    let ambientz: Value = serde_json::from_str(&body).unwrap();
    let w =
        by(&ambientz["workloads"], "uid", "Kubernetes//Pod/default/web-0").unwrap_or_else(|| panic!("{ambientz:#}"));
    assert_eq!(w["addresses"], json!(["MTAuMC4wLjEw"]), "{w}");
    assert_eq!((&w["tunnelProtocol"], &w["workloadType"]), (&json!("HBONE"), &json!("POD")), "{w}");
    assert_eq!(ambientz["services"].as_array().map(Vec::len), Some(1), "{ambientz:#}");
    assert_eq!(by(&ambientz["policies"], "name", "allow-web").unwrap()["scope"], "NAMESPACE");

    // istiod's config_dump of a ztunnel: its addresses, as Any in JSON.
    let (_, body) = get(s.http, "/debug/config_dump?proxyID=ztunnel-abc.istio-system").unwrap();
    let dump: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{body}"));
    let configs = dump["configs"].as_array().unwrap_or_else(|| panic!("{dump:#}"));
    assert!(configs.iter().all(|c| c["@type"] == "type.googleapis.com/istio.workload.Address"), "{dump:#}");
    assert!(
        configs.iter().any(|c| c["workload"]["uid"] == "Kubernetes//Pod/default/web-0"),
        "the pods, in protojson: {dump:#}"
    );
    let (_, wads) = get(s.http, "/debug/config_dump?proxyID=ztunnel-abc.istio-system&types=WADS").unwrap();
    assert!(wads.contains("istio.security.Authorization") && wads.contains("allow-web"), "{wads}");

    // The ztunnel in istiod's connection views: adsz with the workload
    // API's types it watches, syncz with its proxy type.
    let (_, adsz) = get(s.http, "/debug/adsz").unwrap();
    assert!(adsz.contains("ztunnel~127.0.0.1~ztunnel-abc.istio-system"), "{adsz}");
    assert!(adsz.contains("istio.workload.Address") && adsz.contains("istio.security.Authorization"), "{adsz}");
    let (_, syncz) = get(s.http, "/debug/syncz").unwrap();
    let syncz: Value = serde_json::from_str(&syncz).unwrap();
    let me = syncz.as_array().and_then(|a| a.iter().find(|p| p["proxy_type"] == "ztunnel"));
    assert!(me.is_some(), "{syncz:#}");

    // A ServiceEntry: its host is a service with its VIP, its endpoint a
    // workload of that service.
    api.apply(
        "serviceentries",
        json!({"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
               "metadata": {"name": "ext", "namespace": "default"},
               "spec": {"hosts": ["ext.example.com"], "addresses": ["240.240.0.5"], "resolution": "STATIC",
                        "ports": [{"number": 443, "name": "tls", "protocol": "TLS"}],
                        "endpoints": [{"address": "192.0.2.7"}]}}),
    );
    let ext_uid = "Kubernetes/networking.istio.io/ServiceEntry/default/ext/192.0.2.7";
    wait_for("the ServiceEntry in ztunnel", within, || {
        let d = zt.dump();
        by(&d["services"], "hostname", "ext.example.com").is_some() && by(&d["workloads"], "uid", ext_uid).is_some()
    });
    let dump = zt.dump();
    let ext = by(&dump["services"], "hostname", "ext.example.com").unwrap();
    assert_eq!(ext["vips"], json!(["/240.240.0.5"]), "{ext}");
    assert!(ext["endpoints"].as_object().unwrap().contains_key(ext_uid), "{ext}");

    // A waypoint and the namespace that uses it: once its Service has an
    // endpoint, istiod-rs writes the Gateway's addresses (as istiod's
    // status controller), and the Service carries the waypoint; without
    // the label, it does not.
    apply_waypoint(api);
    wait_for("the waypoint's status addresses", within, || {
        let gw = api.get(K8S_GATEWAYS, "default", "waypoint").unwrap_or_default();
        gw["status"]["addresses"]
            == json!([{"type": "IPAddress", "value": "10.96.0.99"}, {"type": "Hostname", "value": "waypoint.default.svc.cluster.local"}])
    });
    let label_default = |labels: Value| {
        api.apply(
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": labels}}),
        );
    };
    label_default(json!({"istio.io/use-waypoint": "waypoint"}));
    let web_waypoint = |zt: &mut Ztunnel| {
        let d = zt.dump();
        by(&d["services"], "hostname", "web.default.svc.cluster.local")
            .map(|s| s["waypoint"].clone())
            .unwrap_or_default()
    };
    wait_for("web's waypoint in ztunnel", within, || {
        web_waypoint(&mut zt).to_string().contains("waypoint.default.svc.cluster.local")
    });
    // istiod's istio.io/WaypointBound condition on the Service, beside the
    // API server's own status.
    let bound = || {
        let svc = api.get("services", "default", "web").unwrap_or_default();
        svc["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "istio.io/WaypointBound").cloned())
            .unwrap_or_default()
    };
    wait_for("web's WaypointBound condition", within, || bound()["status"] == "True");
    assert_eq!(bound()["message"], "Successfully attached to waypoint default/waypoint");
    label_default(json!({}));
    wait_for("web's waypoint gone from ztunnel", within, || web_waypoint(&mut zt).is_null());
    wait_for("web's WaypointBound condition removed", within, || bound().is_null());
    assert!(!nacked(&zt.log()), "{}", zt_log_tail(&zt));

    // A pod deleted leaves ztunnel's view.
    api.delete("pods", "default", "tcp-0");
    wait_for("tcp-0 gone from ztunnel", within, || {
        by(&zt.dump()["workloads"], "uid", "Kubernetes//Pod/default/tcp-0").is_none()
    });

    // istiod restarts while a pod goes: ztunnel reconnects naming what it
    // holds (`initial_resource_versions`), and is told of the one the new
    // server no longer has; the rest it keeps.
    drop(s);
    api.delete("pods", "default", "web-1");
    let s = cluster.start();
    wait_for("web-1 gone from ztunnel after the restart", within, || {
        by(&zt.dump()["workloads"], "uid", "Kubernetes//Pod/default/web-1").is_none()
    });
    let dump = zt.dump();
    assert!(by(&dump["workloads"], "uid", "Kubernetes//Pod/default/web-0").is_some(), "{dump:#}\n{}", s.log());
    assert!(s.log().contains("ztunnel-abc"), "the ztunnel reconnected to the new server: {}", s.log());
}

/// Whether ztunnel's log says it NACKed a response: its client logs
/// `"type"=?response_type` (the enum's Debug form, `Nack`) with the error.
fn nacked(log: &str) -> bool {
    log.contains("type=Nack")
}

fn zt_log_tail(zt: &Ztunnel) -> String {
    let log = zt.log();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// A `pem` field of ztunnel's dump: the PEM text, base64-encoded.
fn pem_of(v: &Value) -> String {
    use base64::Engine;
    let b = base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or_default()).unwrap_or_default();
    String::from_utf8(b).unwrap_or_default()
}

/// The URI SANs of a PEM certificate.
fn san_uris(pem: &str) -> Vec<String> {
    use base64::Engine;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    istiod_pki::uri_sans(&base64::engine::general_purpose::STANDARD.decode(body).unwrap_or_default())
}

/// On demand (ztunnel's `XDS_ON_DEMAND`): a ztunnel that subscribes by
/// name gets what each name stands for, as istiod's `generateDeltasOndemand`
/// answers: a pod's `<network>/<ip>` its workload, a service's name the
/// service and the workloads that list it, each with its own addresses as
/// its aliases, a name that stands for nothing as removed; its node's
/// workloads unasked (`AdditionalPodSubscriptions`); and it is then
/// subscribed to those workloads, so their changes reach it (a pod that
/// joins the service later is not sent: it was not asked for, as upstream's
/// `TestWorkload/ondemand` expects). Over the plain port, with the binary on
/// a configuration directory.
#[test]
fn an_on_demand_ztunnel_gets_what_its_names_stand_for() {
    use crate::ads_client::{connect, runtime};
    use istiod_proto::envoy::service::discovery::v3::DeltaDiscoveryRequest;
    use istiod_proto::istio::workload::{Address, WorkloadStatus, address};
    use istiod_proto::prost::Message;

    let dir = tempfile::tempdir().unwrap();
    let pods = |ready: &str, extra: bool| {
        let mut list =
            vec![("web-0", "web", "node-a", "10.0.0.10", ready), ("web-1", "web", "node-b", "10.0.0.11", "True")];
        list.push(("local-0", "other", "node-a", "10.0.0.20", "True"));
        list.push(("remote-0", "other", "node-b", "10.0.0.21", "True"));
        if extra {
            list.push(("web-2", "web", "node-c", "10.0.0.12", "True"));
        }
        let mut y = String::new();
        for (name, app, node, ip, r) in list {
            y += &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, labels: {{app: {app}}}}}\n\
                 spec: {{nodeName: {node}}}\nstatus: {{phase: Running, podIP: {ip}, conditions: [{{type: Ready, status: '{r}'}}]}}\n---\n"
            );
        }
        y
    };
    std::fs::write(
        dir.path().join("service.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\n\
         spec: {clusterIP: 10.96.0.10, selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}]}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("pods.yaml"), pods("True", false)).unwrap();
    let s = Server::start(dir.path(), &[], &[("PILOT_ENABLE_AMBIENT", "true")], None);
    let rt = runtime();
    rt.block_on(async {
        let mut c = connect(s.grpc, true).await;
        let node = ztunnel_node("node-a");
        let svc = "default/web.default.svc.cluster.local";
        c.delta_req(DeltaDiscoveryRequest {
            node: Some(node),
            type_url: istiod_proto::type_url::ADDRESS.into(),
            resource_names_subscribe: vec!["/10.0.0.10".into(), svc.into(), "/192.0.2.99".into()],
            ..Default::default()
        });
        let r = c.recv_delta().await;
        let got: std::collections::BTreeMap<&str, Vec<&str>> =
            r.resources.iter().map(|x| (x.name.as_str(), x.aliases.iter().map(String::as_str).collect())).collect();
        let uid = |p: &str| format!("Kubernetes//Pod/default/{p}");
        let (web0, web1, local0) = (uid("web-0"), uid("web-1"), uid("local-0"));
        assert_eq!(
            got.keys().copied().collect::<Vec<_>>(),
            [local0.as_str(), web0.as_str(), web1.as_str(), svc],
            "the pod asked for by address, the service and its pods, the node's own pod; not remote-0: {r:?}"
        );
        assert_eq!(got[web0.as_str()], ["/10.0.0.10"], "a workload's aliases are its addresses");
        assert_eq!(got[local0.as_str()], ["/10.0.0.20"]);
        assert_eq!(got[svc], ["/10.96.0.10"]);
        assert_eq!(r.removed_resources, ["/192.0.2.99"], "a name that stands for nothing");
        ack(&mut c, &r.nonce);
        // web-0 was asked for by an address, not its name, yet its change
        // reaches the ztunnel: it is subscribed now. web-2 joins the
        // service on another node: not asked for, not sent.
        std::fs::write(dir.path().join("pods.yaml"), pods("False", true)).unwrap();
        let mut seen: std::collections::BTreeMap<String, Address> = Default::default();
        let r = tokio::time::timeout(Duration::from_secs(20), c.recv_delta()).await.expect("web-0's change");
        for x in &r.resources {
            seen.insert(x.name.clone(), Address::decode(x.resource.as_ref().unwrap().value.as_slice()).unwrap());
        }
        ack(&mut c, &r.nonce);
        assert_eq!(seen.keys().map(String::as_str).collect::<Vec<_>>(), [web0.as_str()], "{r:?}");
        c.expect_silence(Duration::from_millis(600)).await;
        let Some(address::Type::Workload(w)) = &seen[&web0].r#type else { panic!("a workload") };
        assert_eq!(w.status, WorkloadStatus::Unhealthy as i32);
    });
}

/// Upstream `TestWorkload/ondemand` (istio/istio pilot/pkg/xds/
/// workload_test.go), step by step, on the fake API server: an on-demand
/// subscriber on node `node` is sent what it asks for by address, what
/// stands for nothing as removed, its node's pods unasked, changes of
/// what it holds, and nothing else (a pod joining a service it asked for
/// by VIP is not sent, as upstream expects).
#[test]
fn upstream_workload_ondemand() {
    use crate::ads_client::{connect, runtime};
    use istiod_kubewatch::fake::{core_resources, istio_resources};
    use istiod_proto::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};

    let api = server::fake_api();
    for r in core_resources().into_iter().chain(istio_resources()) {
        api.install(r);
    }
    for ns in ["istio-system", "default"] {
        api.apply("namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    // upstream's mkPod
    let create_pod = |name: &str, sa: &str, ip: &str, node: &str| {
        api.apply(
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "default", "labels": {"app": sa},
                                "annotations": {"ambient.istio.io/redirection": "enabled"}},
                   "spec": {"serviceAccountName": sa, "nodeName": node},
                   "status": {"podIP": ip, "podIPs": [{"ip": ip}], "phase": "Running",
                              "conditions": [{"type": "Ready", "status": "True"}]}}),
        );
    };
    let create_service = |selector: Value| {
        api.apply(
            "services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc1", "namespace": "default"},
                   "spec": {"clusterIP": "10.0.0.1", "type": "ClusterIP", "selector": selector,
                            "ports": [{"name": "tcp", "port": 80, "protocol": "TCP"}]}}),
        );
    };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &[],
        &[("PILOT_ENABLE_AMBIENT", "true")],
        None,
    );
    let rt = runtime();
    rt.block_on(async {
        let mut c = connect(s.grpc, true).await;
        let node = ztunnel_node("node");
        let addr = istiod_proto::type_url::ADDRESS;
        let pod = |n: &str| format!("Kubernetes//Pod/default/{n}");
        let svc1 = "default/svc1.default.svc.cluster.local";
        // A response, ACKed, as (sorted names, sorted removals).
        async fn next(c: &mut crate::ads_client::AdsClient) -> (Vec<String>, Vec<String>) {
            let r: DeltaDiscoveryResponse =
                tokio::time::timeout(Duration::from_secs(15), c.recv_delta()).await.expect("a response");
            ack(c, &r.nonce);
            let mut names: Vec<String> = r.resources.iter().map(|x| x.name.clone()).collect();
            let mut removed = r.removed_resources.clone();
            names.sort();
            removed.sort();
            (names, removed)
        }
        let subscribe = |c: &mut crate::ads_client::AdsClient, names: &[&str]| {
            c.delta_req(DeltaDiscoveryRequest {
                type_url: addr.into(),
                resource_names_subscribe: names.iter().map(|n| n.to_string()).collect(),
                ..Default::default()
            });
        };
        let silence = Duration::from_millis(600);
        let none: Vec<String> = Vec::new();

        c.delta_req(DeltaDiscoveryRequest {
            node: Some(node),
            type_url: addr.into(),
            resource_names_subscribe: vec!["*".into()],
            resource_names_unsubscribe: vec!["*".into()],
            ..Default::default()
        });
        assert_eq!(next(&mut c).await, (none.clone(), none.clone()), "an empty response");
        // A pod it is not subscribed to, on another node: nothing.
        create_pod("pod", "sa", "127.0.0.1", "not-node");
        c.expect_silence(silence).await;
        // Subscribed by address: it is sent.
        subscribe(&mut c, &["/127.0.0.1"]);
        assert_eq!(next(&mut c).await, (vec![pod("pod")], none.clone()));
        // An unknown address: "removed".
        subscribe(&mut c, &["/127.0.0.2"]);
        assert_eq!(next(&mut c).await, (none.clone(), vec!["/127.0.0.2".to_owned()]));
        // Once it exists (on its node), it is pushed.
        create_pod("pod2", "sa", "127.0.0.2", "node");
        assert_eq!(next(&mut c).await, (vec![pod("pod2")], none.clone()));
        api.delete("pods", "default", "pod");
        assert_eq!(next(&mut c).await, (none.clone(), vec![pod("pod")]));
        // A pod on its node it never asked for: pushed.
        create_pod("pod-same-node", "sa", "127.0.0.3", "node");
        assert_eq!(next(&mut c).await, (vec![pod("pod-same-node")], none.clone()));
        api.delete("pods", "default", "pod-same-node");
        assert_eq!(next(&mut c).await, (none.clone(), vec![pod("pod-same-node")]));
        // A service selecting what it holds: those are updated, the
        // service (not asked for) is not sent.
        create_service(json!({"app": "sa"}));
        assert_eq!(next(&mut c).await, (vec![pod("pod2")], none.clone()));
        create_pod("pod", "sa", "127.0.0.1", "node");
        assert_eq!(next(&mut c).await, (vec![pod("pod")], none.clone()));
        create_service(json!({"app": "not-sa"}));
        assert_eq!(next(&mut c).await, (vec![pod("pod"), pod("pod2")], none.clone()));
        // Pods of the service it does not hold: nothing.
        create_pod("pod4", "not-sa", "127.0.0.4", "not-node");
        c.expect_silence(silence).await;
        // Asked for by VIP: the service and its pods.
        subscribe(&mut c, &["/10.0.0.1"]);
        assert_eq!(next(&mut c).await, (vec![pod("pod4"), svc1.to_owned()], none.clone()));
        // A pod joining it later was not asked for: nothing.
        create_pod("pod5", "not-sa", "127.0.0.5", "not-node");
        c.expect_silence(silence).await;
        // The service stops selecting them: the pods it holds are updated.
        create_service(json!({"app": "nothing"}));
        assert_eq!(next(&mut c).await, (vec![pod("pod4")], none.clone()));
    });
}

/// A ztunnel's node on `node_name` (`NODE_NAME` metadata, as ztunnel sends it).
fn ztunnel_node(node_name: &str) -> istiod_proto::envoy::config::core::v3::Node {
    use istiod_proto::prost_types::{Struct, Value as PbValue, value::Kind as PbKind};
    let mut node = crate::ads_client::node("ztunnel~10.0.0.2~ztunnel-abc.istio-system~istio-system.svc.cluster.local");
    node.metadata = Some(Struct {
        fields: [("NODE_NAME".to_owned(), PbValue { kind: Some(PbKind::StringValue(node_name.into())) })].into(),
    });
    node
}

/// ACKs a workload API response.
fn ack(c: &mut crate::ads_client::AdsClient, nonce: &str) {
    c.delta_req(istiod_proto::envoy::service::discovery::v3::DeltaDiscoveryRequest {
        type_url: istiod_proto::type_url::ADDRESS.into(),
        response_nonce: nonce.to_owned(),
        ..Default::default()
    });
}

/// The ambient conditions without a ztunnel: with `AMBIENT_ENABLE_STATUS`
/// false nothing is written; by default (istiod's `true`) the elected
/// replica writes `ZtunnelAccepted` on the policy and `istio.io/WaypointBound`
/// (here: not ready) on the Service that names a missing waypoint.
#[test]
fn ambient_status_follows_ambient_enable_status() {
    use istiod_kubewatch::fake::{core_resources, istio_resources, write_resources};
    let api = server::fake_api();
    for r in core_resources().into_iter().chain(istio_resources()).chain(write_resources()) {
        api.install(r);
    }
    for ns in ["istio-system", "default"] {
        api.apply("namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    api.apply(
        "authorizationpolicies",
        json!({"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
               "metadata": {"name": "allow", "namespace": "default"}, "spec": {"action": "ALLOW", "rules": [{}]}}),
    );
    api.apply(
        "services",
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": "default", "labels": {"istio.io/use-waypoint": "missing"}},
               "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}, "status": {"loadBalancer": {}}}),
    );
    let condition = |plural: &'static str, name: &str, t: &str| {
        let o = api.get(plural, "default", name).unwrap_or_default();
        o["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == t).cloned())
            .unwrap_or_default()
    };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let start = |status: Option<&str>| {
        let mut env = vec![("PILOT_ENABLE_AMBIENT", "true")];
        env.extend(status.map(|v| ("AMBIENT_ENABLE_STATUS", v)));
        Server::start_on(&["--kubeconfig", kubeconfig.to_str().unwrap()], &[], &env, None)
    };
    let s = start(Some("false"));
    wait_for("the server's model", Duration::from_secs(30), || {
        get(s.http, "/debug/ambientz").is_some_and(|(_, b)| b.contains("default/allow") || b.contains("\"allow\""))
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(condition("authorizationpolicies", "allow", "ZtunnelAccepted").is_null(), "written though disabled");
    drop(s);
    let _s = start(None);
    wait_for("ZtunnelAccepted", Duration::from_secs(60), || {
        condition("authorizationpolicies", "allow", "ZtunnelAccepted")["reason"] == "Accepted"
    });
    wait_for("WaypointBound", Duration::from_secs(30), || {
        !condition("services", "web", "istio.io/WaypointBound").is_null()
    });
    let bound = condition("services", "web", "istio.io/WaypointBound");
    assert_eq!((&bound["status"], &bound["reason"]), (&json!("False"), &json!("WaypointIsNotReady")), "{bound}");
    assert_eq!(bound["message"], "waypoint \"default/missing\" is not ready");
    assert!(
        api.get("services", "default", "web").unwrap()["status"]["loadBalancer"].is_object(),
        "the Service's own status stays"
    );
}

/// A waypoint's Gateway gets its addresses from istiod-rs once its Service
/// has an endpoint (istiod's status controller: none before, the cluster
/// IP then the hostname after), and only then does a Service that uses it
/// bind (`istio.io/WaypointBound`), with the waypoint's address in the
/// workload API.
#[test]
fn a_waypoints_status_addresses_bind_the_services_that_use_it() {
    use istiod_kubewatch::fake::{
        K8S_GATEWAYS, core_resources, gateway_api_resources, istio_resources, write_resources,
    };
    let api = server::fake_api();
    for r in
        core_resources().into_iter().chain(istio_resources()).chain(gateway_api_resources()).chain(write_resources())
    {
        api.install(r);
    }
    for ns in ["istio-system", "default"] {
        api.apply("namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    api.apply(
        "services",
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": "default", "labels": {"istio.io/use-waypoint": "waypoint"}},
               "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}}),
    );
    api.apply(
        "services",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "waypoint", "namespace": "default"},
               "spec": {"clusterIP": "10.96.0.99", "clusterIPs": ["10.96.0.99"],
                        "ports": [{"name": "mesh", "port": 15008, "appProtocol": "hbone"}]}}),
    );
    api.apply(
        K8S_GATEWAYS,
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "waypoint", "namespace": "default"},
               "spec": {"gatewayClassName": "istio-waypoint",
                        "listeners": [{"name": "mesh", "port": 15008, "protocol": "HBONE"}]}}),
    );
    let gateway_status = || api.get(K8S_GATEWAYS, "default", "waypoint").unwrap_or_default()["status"].clone();
    let bound = || {
        let o = api.get("services", "default", "web").unwrap_or_default();
        o["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "istio.io/WaypointBound").cloned())
            .unwrap_or_default()
    };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &[],
        &[("PILOT_ENABLE_AMBIENT", "true")],
        None,
    );
    // No endpoint yet: programmed, no address, so nothing binds.
    wait_for("the waypoint's status", Duration::from_secs(60), || {
        gateway_status()["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Programmed"))
    });
    assert!(gateway_status()["addresses"].is_null(), "{}", gateway_status());
    wait_for("WaypointBound", Duration::from_secs(30), || !bound().is_null());
    assert_eq!(bound()["reason"], "WaypointIsNotReady", "{}", bound());
    // An endpoint: the addresses, then the binding.
    api.apply(
        "endpointslices",
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "waypoint-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "waypoint"}},
               "addressType": "IPv4", "ports": [{"name": "mesh", "port": 15008}],
               "endpoints": [{"addresses": ["10.0.0.30"], "conditions": {"ready": true}}]}),
    );
    wait_for("the waypoint's addresses", Duration::from_secs(30), || {
        gateway_status()["addresses"]
            == json!([{"type": "IPAddress", "value": "10.96.0.99"}, {"type": "Hostname", "value": "waypoint.default.svc.cluster.local"}])
    });
    wait_for("WaypointBound true", Duration::from_secs(30), || bound()["status"] == "True");
    assert_eq!(bound()["message"], "Successfully attached to waypoint default/waypoint");
    let listener = &gateway_status()["listeners"][0];
    assert_eq!(listener["conditions"][0]["reason"], "Accepted", "{listener}");
    // /debug/ambientz lists the waypoint (istiod-rs's addition to istiod's
    // shape) with its address and the services bound to it.
    let ambientz: Value = serde_json::from_str(&get(s.http, "/debug/ambientz").unwrap().1).unwrap();
    let wp = &ambientz["waypoints"][0];
    assert_eq!(wp["name"], "default/waypoint", "{ambientz:#}");
    assert_eq!(wp["services"], json!(["default/web.default.svc.cluster.local"]), "{ambientz:#}");
    assert!(wp["address"].to_string().contains("waypoint.default.svc.cluster.local"), "{wp}");
}

/// What-if (issue #41) with a real ztunnel connected: a pod that ztunnel
/// will capture is predicted as the workload the ztunnel gains (and taken
/// for no sidecar), a namespace's `istio.io/use-waypoint` as the change
/// of its service's waypoint; asking serves nothing, and applying each
/// change then brings the ztunnel what was predicted.
#[test]
#[allow(clippy::print_stderr, reason = "a skip says why")]
fn what_if_predicts_what_a_real_ztunnel_is_then_served() {
    let Some(bin) = ztunnel() else {
        eprintln!("SKIPPED: no ../shared/peers/build-ztunnel to build ztunnel with");
        return;
    };
    use istiod_kubewatch::fake::K8S_GATEWAYS;
    let cluster = ZtunnelCluster::new();
    let api = &cluster.api;
    api.apply("nodes", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}));
    api.apply("pods", pod("web-0", "default", "web", "node-a", "10.0.0.10", true, "web"));
    api.apply(
        "services",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
               "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "selector": {"app": "web"},
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    );
    // A waypoint no namespace uses yet.
    apply_waypoint(api);
    let s = cluster.start();
    let Some(mut zt) = cluster.ztunnel(&bin) else { return };
    let within = Duration::from_secs(60);
    let web = "default/web.default.svc.cluster.local";
    wait_for("web-0 and web's service in ztunnel", within, || {
        let d = zt.dump();
        by(&d["workloads"], "uid", "Kubernetes//Pod/default/web-0").is_some()
            && by(&d["services"], "hostname", "web.default.svc.cluster.local").is_some()
    });
    wait_for("the waypoint's status addresses", within, || {
        let gw = api.get(K8S_GATEWAYS, "default", "waypoint").unwrap_or_default();
        gw["status"]["addresses"].as_array().is_some_and(|a| !a.is_empty())
    });
    // The ztunnel's class is the only one: web-0 is captured (no sidecar)
    // and the ztunnel's own pod is connected.
    let ztunnel_class = |answer: &Value| -> Value {
        let classes = answer["classes"].as_array().unwrap();
        assert_eq!(classes.len(), 1, "{answer}");
        assert_eq!(classes[0]["class"]["nodeType"], "ztunnel", "{answer}");
        assert!(classes[0]["proxies"][0].as_str().unwrap().contains("ztunnel-abc.istio-system"), "{answer}");
        crate::whatif::reached(answer).into_values().next().unwrap()
    };

    // A pod ztunnel will capture: its workload is added.
    let web2 = pod("web-2", "default", "web", "node-a", "10.0.0.13", true, "web");
    let (code, answer) = crate::whatif::whatif(&s, &web2.to_string(), &["--no-diff"]);
    assert_eq!(code, 0, "{answer}");
    let got = ztunnel_class(&answer);
    assert_eq!(got["WDS"]["added"], json!(["Kubernetes//Pod/default/web-2"]), "{answer}");
    assert_eq!(got["WDS"]["removed"], json!([]), "{answer}");
    std::thread::sleep(Duration::from_millis(500));
    let d = zt.dump();
    assert!(by(&d["workloads"], "uid", "Kubernetes//Pod/default/web-2").is_none(), "a question serves nothing");
    api.apply("pods", web2);
    wait_for("web-2 in ztunnel once applied", within, || {
        by(&zt.dump()["workloads"], "uid", "Kubernetes//Pod/default/web-2").is_some()
    });

    // The namespace uses the waypoint: web's service changes, its diff
    // names the waypoint.
    let labelled = json!({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": "default", "labels": {"istio.io/use-waypoint": "waypoint"}}});
    let (code, answer) = crate::whatif::whatif(&s, &labelled.to_string(), &[]);
    assert_eq!(code, 0, "{answer}");
    let got = ztunnel_class(&answer);
    assert!(got["WDS"]["changed"].as_array().unwrap().contains(&json!(web)), "{answer}");
    let d = crate::whatif::diff_of(&answer, "WDS", web);
    assert!(d.lines().any(|l| l.starts_with('+') && l.contains("waypoint")), "{d}");
    let web_waypoint = |zt: &mut Ztunnel| {
        let d = zt.dump();
        by(&d["services"], "hostname", "web.default.svc.cluster.local")
            .map(|s| s["waypoint"].clone())
            .unwrap_or_default()
    };
    assert!(web_waypoint(&mut zt).is_null(), "a question serves nothing");
    api.apply("namespaces", labelled);
    wait_for("web's waypoint in ztunnel once applied", within, || {
        web_waypoint(&mut zt).to_string().contains("waypoint.default.svc.cluster.local")
    });
    assert!(!nacked(&zt.log()), "{}", zt_log_tail(&zt));
}
