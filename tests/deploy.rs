//! istiod-rs deployed as istiod (issue #17): the mesh configuration
//! followed from a kubelet-mounted file (symlink swaps) and from the
//! `istio` ConfigMaps (pilot/pkg/bootstrap/mesh.go), `discoverySelectors`,
//! the Helm chart's arguments and environment, leadership handed over among
//! three replicas (on SIGTERM and on a crash), and io_uring refused by a
//! seccomp profile. The drain of connected proxies on SIGTERM is in
//! tests/loadgen.rs.

use crate::ads_client as client;
use crate::server;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use client::{connect, runtime};
use istiod_proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use istiod_proto::type_url;
use server::{BOOKINFO, Server, get, wait_for};

/// A bookinfo sidecar.
fn sidecar() -> istiod_proto::envoy::config::core::v3::Node {
    client::node("sidecar~10.244.0.20~productpage-v1-1.bookinfo~bookinfo.svc.cluster.local")
}

/// How often `what` appears in the response's resources.
fn mentions(r: &DiscoveryResponse, what: &str) -> usize {
    r.resources.iter().map(|a| a.value.windows(what.len()).filter(|w| *w == what.as_bytes()).count()).sum()
}

/// A directory laid out as the kubelet mounts a ConfigMap: `mesh` links to
/// `..data/mesh`, `..data` to a timestamped directory; an update writes a
/// new directory and swaps `..data` with one rename.
struct KubeletVolume {
    dir: tempfile::TempDir,
    generation: u32,
}

impl KubeletVolume {
    fn new(mesh: &str) -> Self {
        let mut v = KubeletVolume { dir: tempfile::tempdir().unwrap(), generation: 0 };
        v.update(mesh);
        std::os::unix::fs::symlink("..data/mesh", v.dir.path().join("mesh")).unwrap();
        v
    }

    fn file(&self) -> std::path::PathBuf {
        self.dir.path().join("mesh")
    }

    fn update(&mut self, mesh: &str) {
        self.generation += 1;
        let data = format!("..2026_12_02_00_00_{:02}.{}", self.generation, 1000 + self.generation);
        std::fs::create_dir(self.dir.path().join(&data)).unwrap();
        std::fs::write(self.dir.path().join(&data).join("mesh"), mesh).unwrap();
        let tmp = self.dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&data, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.path().join("..data")).unwrap();
    }
}

fn mesh_debug(s: &Server) -> serde_json::Value {
    serde_json::from_str(&get(s.http, "/debug/mesh").unwrap().1).unwrap()
}

/// istiod's file source (pkg/config/mesh/meshwatcher/collection.go,
/// krt/files): a ConfigMap update the kubelet makes by swapping `..data`
/// is read, a change pushes what it affects to connected proxies, an
/// invalid file keeps the last good configuration ("invalid mesh config,
/// using last known state"), a rewrite that changes nothing pushes nothing,
/// and fields istiod-rs does not read are kept (`/debug/mesh`).
#[test]
fn the_mesh_config_file_is_followed_through_symlink_swaps() {
    let mut volume = KubeletVolume::new("outboundTrafficPolicy:\n  mode: ALLOW_ANY\nfutureField: {kept: true}\n");
    let s = Server::start(Path::new(BOOKINFO), &["--meshConfig", volume.file().to_str().unwrap()], &[], None);
    assert_eq!(mesh_debug(&s)["futureField"]["kept"], true, "unknown fields kept");
    runtime().block_on(async {
        let mut c = connect(s.grpc, false).await;
        c.sotw(DiscoveryRequest { node: Some(sidecar()), type_url: type_url::LISTENER.into(), ..Default::default() });
        let first = c.recv().await;
        let names: Vec<&str> = vec![];
        c.ack(&first, &names);
        let blackholes = mentions(&first, "BlackHoleCluster");

        // REGISTRY_ONLY: virtualOutbound's fallback goes to the black hole.
        volume.update("outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\nfutureField: {kept: true}\n");
        let pushed = tokio::time::timeout(Duration::from_secs(10), c.recv()).await.expect("a push after the swap");
        assert_ne!(pushed.version_info, first.version_info);
        assert!(
            mentions(&pushed, "BlackHoleCluster") > blackholes,
            "REGISTRY_ONLY sends unknown destinations to BlackHoleCluster ({} before, {} after)",
            blackholes,
            mentions(&pushed, "BlackHoleCluster")
        );
        c.ack(&pushed, &names);
        assert_eq!(mesh_debug(&s)["outboundTrafficPolicy"]["mode"], "REGISTRY_ONLY");

        // Invalid: logged, the last good configuration stays, no push.
        // (A wrong type: an unknown enum value is accepted and reported.)
        volume.update("outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\nenableAutoMtls: [1]\n");
        wait_for("the invalid file logged", Duration::from_secs(10), || {
            s.log().contains("invalid mesh config, using last known state")
        });
        c.expect_silence(Duration::from_millis(1500)).await;
        assert_eq!(mesh_debug(&s)["outboundTrafficPolicy"]["mode"], "REGISTRY_ONLY");

        // The same settings written again (a comment, key order): no push.
        volume.update("# rewritten\nfutureField: {kept: true}\noutboundTrafficPolicy: {mode: REGISTRY_ONLY}\n");
        wait_for("the rewrite read", Duration::from_secs(10), || {
            s.log().contains("mesh configuration rewritten; nothing istiod-rs reads changed")
        });
        c.expect_silence(Duration::from_millis(1000)).await;

        // Back to ALLOW_ANY, with a connect timeout: pushed again, and the
        // clusters a proxy fetches over the wire carry the mesh's timeout.
        volume.update("outboundTrafficPolicy:\n  mode: ALLOW_ANY\nconnectTimeout: 3s\n");
        let back = tokio::time::timeout(Duration::from_secs(10), c.recv()).await.expect("a push after the fix");
        assert_eq!(mentions(&back, "BlackHoleCluster"), blackholes);
        let mut cds = connect(s.grpc, false).await;
        cds.sotw(DiscoveryRequest { node: Some(sidecar()), type_url: type_url::CLUSTER.into(), ..Default::default() });
        let clusters = cds.recv().await;
        use istiod_proto::prost::Message;
        let timeouts: Vec<i64> = clusters
            .resources
            .iter()
            .map(|a| istiod_proto::envoy::config::cluster::v3::Cluster::decode(&a.value[..]).unwrap())
            .filter(|c| c.name.starts_with("outbound|") || c.name == "BlackHoleCluster")
            .map(|c| c.connect_timeout.map_or(0, |d| d.seconds))
            .collect();
        assert!(!timeouts.is_empty() && timeouts.iter().all(|t| *t == 3), "{timeouts:?}");
    });
    assert!(mesh_debug(&s).get("futureField").is_none(), "the last file has no futureField");
}

/// Without a mounted file, in Kubernetes: the revision's `istio-<rev>`
/// ConfigMap's `mesh` over the `SHARED_MESH_CONFIG` ConfigMap's
/// (pilot/pkg/bootstrap/mesh.go `getConfigurationSources`), followed as
/// they change; an invalid one of the two is left out.
#[test]
fn without_a_file_the_revision_configmap_applies_over_the_shared_one() {
    let api = server::fake_api();
    for r in istiod_kubewatch::fake::core_resources() {
        api.install(r);
    }
    let cm = |name: &str, mesh: &str| serde_json::json!({"metadata": {"name": name, "namespace": "istio-system"}, "data": {"mesh": mesh}});
    api.apply(
        "configmaps",
        cm("shared-mesh", "rootNamespace: mesh-root\ntrustDomain: shared.example\nenableAutoMtls: false\n"),
    );
    api.apply("configmaps", cm("istio-canary", "trustDomain: canary.example\n"));
    // The default revision's: not this instance's.
    api.apply("configmaps", cm("istio", "trustDomain: default.example\n"));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--meshConfig", dir.path().join("absent").to_str().unwrap()],
        &[("REVISION", "canary"), ("SHARED_MESH_CONFIG", "shared-mesh"), ("POD_NAMESPACE", "istio-system")],
        None,
    );
    let m = mesh_debug(&s);
    assert_eq!(m["trustDomain"], "canary.example", "the revision's ConfigMap wins");
    assert_eq!(m["rootNamespace"], "mesh-root", "the shared one's other fields stay");
    assert_eq!(m["enableAutoMtls"], false);
    // An edit of either is followed.
    api.apply("configmaps", cm("istio-canary", "trustDomain: canary.example\nrootNamespace: canary-root\n"));
    wait_for("the edit", Duration::from_secs(10), || mesh_debug(&s)["rootNamespace"] == "canary-root");
    // With two sources, an invalid one is left out and the other applies
    // alone (meshwatcher's NewCollection: "invalid mesh config, ignoring").
    api.apply("configmaps", cm("istio-canary", "trustDomain: [not, a, string]\n"));
    wait_for("the invalid edit left out", Duration::from_secs(10), || {
        s.log().contains("invalid mesh config, ignoring") && mesh_debug(&s)["trustDomain"] == "shared.example"
    });
    assert_eq!(mesh_debug(&s)["rootNamespace"], "mesh-root");
}

/// The holder of istiod's namespace controller lock (a ConfigMap lock) and
/// of the Gateway API status Lease.
fn holders(api: &istiod_kubewatch::fake::FakeApi) -> (String, String) {
    let cm = api.get("configmaps", "istio-system", "istio-namespace-controller-election");
    let record: serde_json::Value = cm
        .and_then(|cm| {
            cm["metadata"]["annotations"]["control-plane.alpha.kubernetes.io/leader"].as_str().map(str::to_owned)
        })
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or_default();
    let lease = api.get("leases", "istio-system", "istio-gateway-status-leader-default").unwrap_or_default();
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    (s(&record["holderIdentity"]), s(&lease["spec"]["holderIdentity"]))
}

/// pilot/pkg/leaderelection: three replicas against one API server. One
/// holds every election; stopped with SIGTERM it releases them
/// (`ReleaseOnCancel`) and another takes over at its next try (7.5 s);
/// killed outright, the lease runs out first (30 s) and the last replica
/// takes over. The new leader does the singleton work: a root ConfigMap
/// deleted is made again.
#[test]
fn replicas_take_over_every_election_when_the_leader_stops_or_dies() {
    let api = server::fake_api();
    for r in istiod_kubewatch::fake::core_resources() {
        api.install(r);
    }
    api.apply("namespaces", serde_json::json!({"metadata": {"name": "shop"}}));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let start = |pod: &str| {
        Server::start_on(
            &["--kubeconfig", kubeconfig.to_str().unwrap()],
            &[],
            &[("POD_NAME", pod), ("POD_NAMESPACE", "istio-system")],
            None,
        )
    };
    let mut replicas: Vec<(String, Server)> = std::thread::scope(|t| {
        let hs: Vec<_> = ["istiod-a", "istiod-b", "istiod-c"]
            .into_iter()
            .map(|p| {
                let start = &start;
                t.spawn(move || (p.to_owned(), start(p)))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut leader = String::new();
    // Usually one replica wins both; either way the one holding the
    // namespace controller's election is the one stopped below.
    wait_for("both elections held", Duration::from_secs(20), || {
        let (ns, status) = holders(&api);
        leader = ns.clone();
        !ns.is_empty() && !status.is_empty()
    });
    wait_for("the root ConfigMap", Duration::from_secs(20), || {
        api.get("configmaps", "shop", "istio-ca-root-cert").is_some()
    });

    // SIGTERM: released on the way out; another replica leads within a
    // retry period, not a lease. A connected proxy keeps the stopping
    // replica draining for --shutdownDuration (10 s): meanwhile it must not
    // take any lock back.
    let i = replicas.iter().position(|(p, _)| *p == leader).unwrap();
    let (_, mut stopped) = replicas.remove(i);
    let rt = runtime();
    let _proxy = rt.block_on(async {
        let mut c = connect(stopped.grpc, false).await;
        let node = client::node("sidecar~10.244.1.7~web-0.shop~shop.svc.cluster.local");
        c.sotw(DiscoveryRequest { node: Some(node), type_url: type_url::CLUSTER.into(), ..Default::default() });
        c.recv().await;
        c
    });
    let t = stopped.sigterm();
    // The elections are independent (as istiod's): the two replicas left
    // may each win one.
    let mut next = (String::new(), String::new());
    wait_for("new leaders after SIGTERM", Duration::from_secs(20), || {
        next = holders(&api);
        let taken = |h: &str| !h.is_empty() && h != leader;
        taken(&next.0) && taken(&next.1)
    });
    let handover = t.elapsed();
    assert!(handover < Duration::from_secs(12), "handover after a release took {handover:?}");
    // Still draining; the locks stay with the new leader until it exits.
    while stopped.child.try_wait().unwrap().is_none() {
        assert_eq!(holders(&api), next, "a draining replica took a lock back");
        assert!(t.elapsed() < Duration::from_secs(20), "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(t.elapsed() > Duration::from_secs(5), "the proxy kept it draining: {:?}", t.elapsed());
    stopped.wait_exit(Duration::from_secs(1));
    let log = stopped.log();
    let released = log.find("leader election: released").unwrap_or_else(|| panic!("{log}"));
    assert!(!log[released..].contains("leading=true"), "led again after releasing: {log}");

    // Killed: nothing released; the lease runs out (30 s) and the last
    // replica takes over (both elections, whichever it held already).
    let i = replicas.iter().position(|(p, _)| *p == next.0).unwrap();
    let (_, mut killed) = replicas.remove(i);
    let t = std::time::Instant::now();
    killed.child.kill().unwrap();
    let _ = killed.child.wait();
    let last = replicas[0].0.clone();
    wait_for("the last replica leading", Duration::from_secs(50), || holders(&api) == (last.clone(), last.clone()));
    let takeover = t.elapsed();
    assert!(
        takeover >= Duration::from_secs(20) && takeover < Duration::from_secs(45),
        "a dead leader's lease is taken over once it ran out: {takeover:?}"
    );
    api.delete("configmaps", "shop", "istio-ca-root-cert");
    wait_for("the new leader's repair", Duration::from_secs(20), || {
        api.get("configmaps", "shop", "istio-ca-root-cert").is_some()
    });
    assert!(replicas[0].1.log().contains("leader election: leading"), "{}", replicas[0].1.log());
}

/// The chart's istiod as rendered with its default values
/// (tests/data/istio-chart/istiod-defaults.yaml).
fn chart() -> (serde_json::Value, serde_json::Value) {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/istio-chart/istiod-defaults.yaml"))
            .unwrap();
    let mut docs = text.split("\n---\n").map(|d| serde_yaml_ng::from_str::<serde_json::Value>(d).unwrap());
    let deployment = docs.next().unwrap();
    let configmap = docs.next().unwrap();
    (deployment["spec"]["template"]["spec"]["containers"][0].clone(), configmap)
}

/// The container's environment as the kubelet sets it for pod `pod`
/// (`fieldRef`s resolved), with `KUBECONFIG` at `kubeconfig`: the chart
/// points it at the optional `istio-kubeconfig` Secret's mount; here that
/// file is the fake API server's kubeconfig.
fn chart_env(container: &serde_json::Value, pod: &str, kubeconfig: &Path) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_owned();
            let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => pod.to_owned(),
                Some("metadata.namespace") => "istio-system".to_owned(),
                Some("spec.serviceAccountName") => "istiod".to_owned(),
                Some(other) => panic!("unknown fieldRef {other}"),
                None if name == "KUBECONFIG" => kubeconfig.to_str().unwrap().to_owned(),
                None => e["value"].as_str().unwrap().to_owned(),
            };
            (name, value)
        })
        .collect()
}

/// Istio's Helm chart (istio-discovery, default values) as the pod spec
/// says: pilot-discovery with the chart's args and environment, the
/// chart's `istio` ConfigMap as its mesh configuration (the chart mounts
/// no mesh file), and the chart's ports as its defaults. Against the fake
/// API server it becomes ready on the readiness probe's path, serves xDS
/// to a sidecar, serves 15012 with a certificate for
/// istiod.istio-system.svc under the root it publishes in
/// `istio-ca-root-cert`, and reports metrics; nothing in the chart's flags
/// or env is refused or ignored.
#[test]
fn the_charts_istiod_starts_ready_and_serves() {
    let (container, configmap) = chart();
    let args: Vec<String> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().into()).collect();
    assert_eq!(args[0], "discovery");

    // The chart's ports are the binary's defaults (the binary with the
    // chart's args alone prints them before it stops on a missing
    // --configDir).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(&args)
        .args(["--configDir", "/nonexistent/istiod-rs", "--log_target", "stderr"])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    let ports: BTreeMap<&str, u64> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["containerPort"].as_u64().unwrap()))
        .collect();
    for (name, setting) in [
        ("grpc-xds", "grpc"),
        ("tls-xds", "secureGRPC"),
        ("http-debug", "http"),
        ("https-webhooks", "https"),
        ("http-monitoring", "monitoring"),
    ] {
        let want = format!(" {setting}=:{} ", ports[name]);
        assert!(log.contains(&want), "{name}: {want:?} in {log}");
    }
    let probe = &container["readinessProbe"]["httpGet"];
    assert_eq!((probe["path"].as_str(), probe["port"].as_u64()), (Some("/ready"), Some(ports["http-debug"])));

    let api = server::fake_api();
    for r in istiod_kubewatch::fake::core_resources().into_iter().chain(istiod_kubewatch::fake::webhook_resources()) {
        api.install(r);
    }
    api.apply("configmaps", configmap);
    for ns in ["istio-system", "shop"] {
        api.apply("namespaces", serde_json::json!({"metadata": {"name": ns}}));
    }
    api.apply(
        "services",
        serde_json::json!({"metadata": {"name": "web", "namespace": "shop"},
            "spec": {"clusterIP": "10.96.0.5", "ports": [{"name": "http", "port": 80}]}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let env = chart_env(&container, "istiod-5d8f9c7b6-x2x4q", &kubeconfig);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // The chart's args, then only the ports moved (tests run side by
    // side; a later flag wins, as with Go's flags).
    let (secure, https) = (server::free_port(), server::free_port());
    let s = Server::start_on(
        &args[1..].iter().map(String::as_str).collect::<Vec<_>>(),
        &["--secureGRPCAddr", &secure.to_string(), "--httpsAddr", &https.to_string()],
        &env,
        None,
    );
    let log = s.log();
    for refused in ["invalid environment variable", "unknown flags ignored"] {
        assert!(!log.contains(refused), "{refused}: {log}");
    }
    // Only istiod's own default --profile=true (pprof) is not served.
    let unsupported: Vec<&str> = log.lines().filter(|l| l.contains("accepted but not yet supported")).collect();
    assert!(unsupported.iter().all(|l| l.contains("--profile=true")), "{unsupported:?}");
    // The chart's mesh configuration, from the ConfigMap.
    let mesh = mesh_debug(&s);
    assert_eq!(mesh["enablePrometheusMerge"], true);
    assert_eq!(mesh["defaultConfig"]["discoveryAddress"], "istiod.istio-system.svc:15012");
    assert_eq!(mesh["defaultProviders"]["metrics"][0], "prometheus");
    // xDS to a sidecar.
    runtime().block_on(async {
        let mut c = connect(s.grpc, false).await;
        let node = client::node("sidecar~10.244.1.7~web-0.shop~shop.svc.cluster.local");
        c.sotw(DiscoveryRequest { node: Some(node), type_url: type_url::CLUSTER.into(), ..Default::default() });
        let names = client::names_of(&c.recv().await);
        assert!(names.contains(&"outbound|80||web.shop.svc.cluster.local".to_owned()), "{names:?}");
    });
    // 15012: a certificate for istiod's Service name under the published root.
    server::wait_for("the root ConfigMap", Duration::from_secs(20), || {
        api.get("configmaps", "shop", "istio-ca-root-cert").is_some()
    });
    let root = api.get("configmaps", "shop", "istio-ca-root-cert").unwrap();
    let root_file = dir.path().join("root-cert.pem");
    std::fs::write(&root_file, root["data"]["root-cert.pem"].as_str().unwrap()).unwrap();
    let check = std::process::Command::new("python3")
        .args([
            "-c",
            "import socket, ssl, sys\n\
             ctx = ssl.create_default_context(cafile=sys.argv[1])\n\
             ctx.set_alpn_protocols(['h2'])\n\
             with socket.create_connection(('127.0.0.1', int(sys.argv[2])), timeout=5) as raw:\n\
             \x20   with ctx.wrap_socket(raw, server_hostname='istiod.istio-system.svc') as tls:\n\
             \x20       print(tls.selected_alpn_protocol())\n",
            root_file.to_str().unwrap(),
            &secure.port().to_string(),
        ])
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), "h2");
    let metrics = get(s.monitoring, "/metrics").unwrap();
    assert_eq!(metrics.0, 200);
    assert!(metrics.1.contains("pilot_xds_pushes"), "{}", metrics.1);
}

/// io_uring refused by a seccomp profile (what Docker's and containerd's
/// default profiles do): the start fails with one message that says what
/// to change, not a panic from the executor blaming the kernel's age.
#[test]
fn io_uring_blocked_by_seccomp_says_what_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("deny_io_uring");
    let cc = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O1", "-o", wrapper.to_str().unwrap()])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/seccomp/deny_io_uring.c"))
        .output()
        .expect("a C compiler (cc) builds the seccomp wrapper");
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let out = std::process::Command::new(&wrapper)
        .arg(env!("CARGO_BIN_EXE_pilot-discovery"))
        .args(["discovery", "--configDir", BOOKINFO, "--grpcAddr", "127.0.0.1:0", "--httpAddr", ""])
        .args(["--monitoringAddr", "", "--secureGRPCAddr", "", "--httpsAddr", "", "--log_target", "stderr"])
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("io_uring_setup was refused") && err.contains("securityContext.seccompProfile"), "{err}");
    assert!(!err.contains("panicked at"), "no panic report: {err}");
}

/// istiod's discovery namespace filter (pkg/kube/namespace/filter.go,
/// enhanced resource scoping): with `discoverySelectors`, the Services and
/// Istio config of unselected namespaces are not read; labelling a
/// namespace brings its objects in, and a mesh config without selectors
/// reads every namespace.
#[test]
fn discovery_selectors_limit_what_is_read() {
    let api = server::fake_api();
    for r in istiod_kubewatch::fake::core_resources().into_iter().chain(istiod_kubewatch::fake::istio_resources()) {
        api.install(r);
    }
    api.apply("namespaces", serde_json::json!({"metadata": {"name": "in", "labels": {"mesh": "yes"}}}));
    api.apply("namespaces", serde_json::json!({"metadata": {"name": "out"}}));
    for ns in ["in", "out"] {
        api.apply(
            "services",
            serde_json::json!({"metadata": {"name": "web", "namespace": ns},
                "spec": {"clusterIP": if ns == "in" { "10.96.1.1" } else { "10.96.1.2" }, "ports": [{"name": "http", "port": 80}]}}),
        );
        api.apply(
            "serviceentries",
            serde_json::json!({"apiVersion": "networking.istio.io/v1", "kind": "ServiceEntry",
                "metadata": {"name": "ext", "namespace": ns},
                "spec": {"hosts": [format!("{ns}.example.com")], "ports": [{"number": 443, "name": "tls", "protocol": "TLS"}], "resolution": "DNS"}}),
        );
    }
    let selecting = "discoverySelectors:\n- matchLabels: {mesh: \"yes\"}\n";
    let cm = |mesh: &str| serde_json::json!({"metadata": {"name": "istio", "namespace": "istio-system"}, "data": {"mesh": mesh}});
    api.apply("configmaps", cm(selecting));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = server::kubeconfig(dir.path(), &api.url());
    let s = Server::start_on(
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &["--meshConfig", dir.path().join("absent").to_str().unwrap()],
        &[("POD_NAMESPACE", "istio-system")],
        None,
    );
    let registry = || get(s.http, "/debug/registryz").unwrap().1;
    let r = registry();
    assert!(r.contains("web.in.svc.cluster.local") && r.contains("in.example.com"), "{r}");
    assert!(!r.contains("web.out.svc.cluster.local") && !r.contains("out.example.com"), "{r}");
    api.apply("namespaces", serde_json::json!({"metadata": {"name": "out", "labels": {"mesh": "yes"}}}));
    wait_for("the labelled namespace's objects", Duration::from_secs(10), || {
        let r = registry();
        r.contains("web.out.svc.cluster.local") && r.contains("out.example.com")
    });
    api.apply("namespaces", serde_json::json!({"metadata": {"name": "out"}}));
    wait_for("unlabelled again", Duration::from_secs(10), || !registry().contains("web.out.svc.cluster.local"));
    api.apply("configmaps", cm("rootNamespace: istio-system\n"));
    wait_for("no selectors: every namespace", Duration::from_secs(15), || {
        registry().contains("web.out.svc.cluster.local")
    });
}
