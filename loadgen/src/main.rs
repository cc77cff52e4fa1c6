//! The `loadgen` command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgAction, Parser, Subcommand};
use istiod_loadgen::scenario::{Churn, ChurnKind, Scenario};
use istiod_loadgen::{mesh, proxy, run};

/// jemalloc, as the server has it (with its heap sampling, which
/// `_RJEM_MALLOC_CONF=prof_active:false` turns off): the proxies' many
/// small buffers freed on other threads than they were made on cost
/// glibc's malloc more.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(name = "loadgen", about = "Simulated Envoys and meshes for istiod-rs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Writes a scenario's mesh as a --configDir directory.
    Mesh {
        /// A preset (istio-perf, large, eds-churn, config-churn,
        /// connect-storm) or a scenario file.
        #[arg(long)]
        scenario: String,
        /// The directory to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Connects simulated sidecars to a running pilot-discovery serving the
    /// scenario's mesh, changes the mesh, and reports how fast they synced
    /// and converged.
    Run(Box<RunArgs>),
    /// Writes a token issuer (issuer.json, its key) and its JWKS
    /// (jwks.json) for `loadgen csr`; the server's JWT_RULE names the
    /// issuer and a jwks_uri serving jwks.json.
    Issuer {
        /// The directory to write.
        #[arg(long)]
        out: PathBuf,
        /// The tokens' `iss`.
        #[arg(long, default_value = "https://loadgen.test")]
        issuer: String,
    },
    /// Simulated ztunnels (delta WDS) against a server with
    /// PILOT_ENABLE_AMBIENT serving --config-dir: pods change address at
    /// a set rate; reports how fast every ztunnel converged on each.
    Ztunnel(Box<ZtunnelArgs>),
    /// N workloads ask the CA for a certificate at once (a restart of
    /// every pod): throughput and latency.
    Csr(Box<CsrArgs>),
    /// A mesh of several clusters on fake API servers: starts them and
    /// pilot-discovery (its config cluster the first, the others remote
    /// clusters by Secret), quotes the server's first sync and memory, then
    /// runs the scenario's proxies while remote endpoints change.
    Multicluster(Box<McArgs>),
    /// N virtual machines' agents register at once (WorkloadEntry
    /// auto-registration) against pilot-discovery on a fake API server:
    /// until every entry exists, until another proxy's EDS holds every VM,
    /// and until every entry is deleted once they all leave.
    Vms(Box<VmArgs>),
}

#[derive(clap::Args)]
struct VmArgs {
    /// VMs.
    #[arg(long, default_value_t = 1000)]
    vms: u32,
    /// `PILOT_WORKLOAD_ENTRY_GRACE_PERIOD` given to the server, seconds.
    #[arg(long, default_value_t = 2)]
    grace_seconds: u64,
    /// Longest wait for each phase, seconds.
    #[arg(long, default_value_t = 120)]
    limit_seconds: u64,
    /// The pilot-discovery binary [default: beside loadgen].
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Also write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The server's `--kubernetesApiQPS` (istiod's default: 80).
    #[arg(long, default_value_t = 80.0)]
    kubernetes_api_qps: f32,
    /// The server's `--kubernetesApiBurst` (istiod's default: 160).
    #[arg(long, default_value_t = 160)]
    kubernetes_api_burst: u32,
}

#[derive(clap::Args)]
struct McArgs {
    /// The config cluster's scenario (its proxies, config and pods).
    #[arg(long, default_value = "istio-perf")]
    scenario: String,
    /// Remote clusters.
    #[arg(long, default_value_t = 10)]
    remotes: u32,
    /// Services in each remote (the config cluster's names: every service
    /// spans every cluster).
    #[arg(long, default_value_t = 1000)]
    remote_services: u32,
    /// Pods in each remote.
    #[arg(long, default_value_t = 5000)]
    remote_pods: u32,
    /// Proxies to run [default: the scenario's sidecars].
    #[arg(long)]
    proxies: Option<u32>,
    /// Remote endpoint changes per second.
    #[arg(long, default_value_t = 2.0)]
    churn_rate: f64,
    /// Seconds of churn.
    #[arg(long, default_value_t = 20)]
    churn_seconds: u64,
    /// Upper bound of the run, in seconds.
    #[arg(long, default_value_t = 300)]
    duration: u64,
    /// The pilot-discovery binary [default: beside this one].
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Worker threads [default: every core].
    #[arg(long)]
    threads: Option<usize>,
    /// Write the report (with the first sync and memory) as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// No live progress line.
    #[arg(long)]
    quiet: bool,
}

#[derive(clap::Args)]
struct ZtunnelArgs {
    /// pilot-discovery's plaintext gRPC address.
    #[arg(long, default_value = "127.0.0.1:15010")]
    server: std::net::SocketAddr,
    /// The directory the server serves (`--write-mesh` writes it).
    #[arg(long)]
    config_dir: PathBuf,
    /// Write the mesh to --config-dir and exit.
    #[arg(long)]
    write_mesh: bool,
    /// ztunnels (nodes).
    #[arg(long, default_value_t = 100)]
    ztunnels: u32,
    /// Pods, 10 per Service (rounded down to a multiple of 10; at least
    /// 10).
    #[arg(long, default_value_t = 10_000)]
    pods: u32,
    /// Pod changes per second.
    #[arg(long, default_value_t = 10.0)]
    churn_rate: f64,
    /// Seconds of churn.
    #[arg(long, default_value_t = 30)]
    churn_seconds: u64,
    /// Seconds to wait for the last changes.
    #[arg(long, default_value_t = 10)]
    settle_seconds: u64,
    /// The report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[allow(clippy::print_stdout, clippy::print_stderr, reason = "the command's output")]
fn ztunnel_cmd(a: ZtunnelArgs) -> ExitCode {
    use istiod_loadgen::ztunnel;
    let o = ztunnel::Options {
        server: a.server,
        ztunnels: a.ztunnels.max(1),
        pods: (a.pods / 10).max(1) * 10,
        pods_per_service: 10,
        services_per_namespace: 10,
        per_second: a.churn_rate,
        churn_for: Duration::from_secs(a.churn_seconds),
        settle: Duration::from_secs(a.settle_seconds),
        sync_timeout: Duration::from_secs(120),
        dir: a.config_dir,
    };
    if a.write_mesh {
        return match ztunnel::write_mesh(&o) {
            Ok(n) => {
                println!("loadgen: wrote {n} services with {} pods to {}", n * 10, o.dir.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("loadgen: cannot write {}: {e}", o.dir.display());
                ExitCode::from(1)
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("loadgen: runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let report = rt.block_on(ztunnel::run(&o));
    let json = report.json();
    println!("{}", serde_json::to_string_pretty(&json).unwrap_or_default());
    if let Some(path) = &a.json
        && let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&json).unwrap_or_default())
    {
        eprintln!("loadgen: cannot write {}: {e}", path.display());
        return ExitCode::from(1);
    }
    if report.synced < o.ztunnels || report.missed > 0 || !report.errors.is_empty() {
        eprintln!(
            "loadgen: {} of {} synced, {} missed, {} errors",
            report.synced,
            o.ztunnels,
            report.missed,
            report.errors.len()
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

#[derive(clap::Args)]
struct CsrArgs {
    /// pilot-discovery's TLS gRPC address (--secureGRPCAddr).
    #[arg(long, default_value = "127.0.0.1:15012")]
    server: std::net::SocketAddr,
    /// The CA's root (PEM): the server's certificate must chain to it.
    #[arg(long)]
    tls: PathBuf,
    /// The name the server's certificate must carry.
    #[arg(long, default_value = "istiod.istio-system.svc")]
    tls_server_name: String,
    /// The directory `loadgen issuer` wrote.
    #[arg(long)]
    issuer: PathBuf,
    /// Workloads.
    #[arg(long, default_value_t = 1000)]
    workloads: u32,
    /// Of them at once [default: all].
    #[arg(long)]
    concurrency: Option<usize>,
    /// Namespaces they are spread over.
    #[arg(long, default_value_t = 10)]
    namespaces: u32,
    /// The mesh's trust domain.
    #[arg(long, default_value = "cluster.local")]
    trust_domain: String,
    /// Upper bound of one workload's request, in seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// The server's pid: its CPU time during the storm.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[allow(clippy::print_stdout, clippy::print_stderr, reason = "the command's output")]
fn csr_cmd(a: CsrArgs) -> ExitCode {
    let fail = |code: u8, msg: String| {
        eprintln!("loadgen: {msg}");
        ExitCode::from(code)
    };
    let tls = match proxy::tls(&a.tls, &a.tls_server_name) {
        Ok(t) => t,
        Err(e) => return fail(2, format!("--tls: {e}")),
    };
    let issuer = match istiod_loadgen::csr::Issuer::load(&a.issuer) {
        Ok(i) => i,
        Err(e) => return fail(2, format!("--issuer: {e}")),
    };
    let o = istiod_loadgen::csr::Options {
        server: a.server,
        tls,
        workloads: a.workloads,
        concurrency: a.concurrency.unwrap_or(a.workloads as usize),
        namespaces: a.namespaces,
        trust_domain: a.trust_domain,
        issuer,
        duration: Duration::from_secs(a.timeout.max(1)),
        server_pid: a.server_pid,
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(1, format!("runtime: {e}")),
    };
    let report = match rt.block_on(istiod_loadgen::csr::run(o)) {
        Ok(r) => r,
        Err(e) => return fail(1, e),
    };
    print!("{}", report.text());
    for (e, n) in &report.errors {
        eprintln!("loadgen: {n} x {e}");
    }
    if let Some(path) = &a.json
        && let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&report.json()).unwrap_or_default())
    {
        return fail(1, format!("cannot write {}: {e}", path.display()));
    }
    if report.ok < u64::from(report.workloads) {
        return fail(
            1,
            format!("{} of {} workloads got no certificate", u64::from(report.workloads) - report.ok, report.workloads),
        );
    }
    ExitCode::SUCCESS
}

#[derive(clap::Args)]
struct RunArgs {
    /// A preset or a scenario file (the proxies are its pods).
    #[arg(long)]
    scenario: String,
    /// pilot-discovery's gRPC address.
    #[arg(long, default_value = "127.0.0.1:15010")]
    server: std::net::SocketAddr,
    /// Proxies to run [default: the scenario's sidecars].
    #[arg(long)]
    proxies: Option<u32>,
    /// Proxies connecting at the same time (a `connect: storm` scenario
    /// connects all at once).
    #[arg(long, default_value_t = 200)]
    concurrency: usize,
    /// Loopback addresses the proxies connect from, in turn (127.0.0.1,
    /// 127.0.0.2, ...): one address holds at most the ephemeral port range
    /// of connections to one server (about 28,000). 0: one per 20,000
    /// proxies against a server on 127.0.0.0/8 (the kernel's choice below
    /// that, and against any other server); more than 1 needs a server on
    /// 127.0.0.0/8.
    #[arg(long, default_value_t = 0)]
    source_addresses: u32,
    /// Upper bound of the whole run, in seconds.
    #[arg(long, default_value_t = 120)]
    duration: u64,
    /// Delta xDS (`--delta false`: state of the world).
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    delta: bool,
    /// Fraction of pushes NACKed once a proxy synced (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    nack_fraction: f64,
    /// Connect with TLS, trusting the CA certificates in this PEM file.
    #[arg(long)]
    tls: Option<PathBuf>,
    /// The name the server's certificate must carry.
    #[arg(long, default_value = "istiod.istio-system.svc")]
    tls_server_name: String,
    /// The config directory the server serves (written by `loadgen
    /// mesh`); the churn edits it.
    #[arg(long)]
    config_dir: Option<PathBuf>,
    /// The churn: eds, config or gateway [default: the scenario's].
    #[arg(long)]
    churn: Option<String>,
    /// Changes per second [default: the scenario's].
    #[arg(long)]
    churn_rate: Option<f64>,
    /// Seconds of churn.
    #[arg(long, default_value_t = 10)]
    churn_seconds: u64,
    /// Seconds to stay connected after syncing and churning.
    #[arg(long, default_value_t = 0)]
    hold: u64,
    /// The server's pid: samples its CPU time and RSS from /proc.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the report as an HTML page (histograms, timelines) here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// No live progress line.
    #[arg(long)]
    quiet: bool,
    /// Worker threads [default: every core]: one thread cannot absorb
    /// what a server sends thousands of proxies.
    #[arg(long)]
    threads: Option<usize>,
    /// HTTP/2 client of plaintext runs: `lean` (loadgen's own, kilobytes
    /// per proxy) or `h2` (the h2 crate, as TLS runs use).
    #[arg(long, default_value = "lean", value_parser = ["lean", "h2"])]
    client: String,
}

/// pilot-discovery started against a (fake) API server.
struct KubeServer {
    child: std::process::Child,
    grpc: std::net::SocketAddr,
    http: std::net::SocketAddr,
    log: PathBuf,
}

/// Starts `bin` against the API server at `url` (plaintext ports only),
/// its log and files in a directory of its own named after `tag`.
fn spawn_on_kube(
    bin: &std::path::Path,
    url: &str,
    tag: &str,
    env: &[(&str, String)],
    flags: &[String],
) -> Result<KubeServer, String> {
    let dir = std::env::temp_dir().join(format!("loadgen-{tag}-server-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let kc = dir.join("kubeconfig");
    std::fs::write(&kc, istiod_loadgen::multicluster::kubeconfig(url)).map_err(|e| format!("kubeconfig: {e}"))?;
    let port = || std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr());
    let (Ok(grpc), Ok(http), Ok(mon)) = (port(), port(), port()) else { return Err("no free port".into()) };
    let log = dir.join("server.log");
    let child = std::process::Command::new(bin)
        .arg("discovery")
        .args(["--kubeconfig", &kc.display().to_string()])
        .args(["--grpcAddr", &grpc.to_string(), "--httpAddr", &http.to_string(), "--monitoringAddr", &mon.to_string()])
        .args(["--secureGRPCAddr", "", "--httpsAddr", "", "--log_target", "stderr"])
        .args(flags)
        .env("ISTIOD_RS_SELF_SIGNED_CA_DIR", dir.join("ca"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::null())
        .stderr(
            std::fs::File::create(&log).map(std::process::Stdio::from).unwrap_or_else(|_| std::process::Stdio::null()),
        )
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    Ok(KubeServer { child, grpc, http, log })
}

/// A process's resident memory, KiB (0 when unknown).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

#[allow(clippy::print_stdout, clippy::print_stderr, reason = "the command's output")]
fn multicluster_cmd(a: McArgs) -> ExitCode {
    use istiod_loadgen::multicluster::{Clusters, RemoteEds};
    let fail = |code: u8, msg: String| {
        eprintln!("loadgen: {msg}");
        ExitCode::from(code)
    };
    let s = match Scenario::load(&a.scenario) {
        Ok(s) => s,
        Err(e) => return fail(2, e.to_string()),
    };
    let r = Scenario { services: a.remote_services, sidecars: a.remote_pods, ..s.clone() };
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(1, format!("runtime: {e}")),
    };
    let bin =
        a.server_bin.clone().or_else(|| std::env::current_exe().ok().map(|e| e.with_file_name("pilot-discovery")));
    let Some(bin) = bin.filter(|b| b.exists()) else {
        return fail(2, "no pilot-discovery binary: build it or pass --server-bin".into());
    };
    let started = std::time::Instant::now();
    let clusters = match rt.block_on(Clusters::start(&s, &r, a.remotes)) {
        Ok(c) => c,
        Err(e) => return fail(1, format!("fake API servers: {e}")),
    };
    clusters.register();
    eprintln!(
        "loadgen: {} clusters populated in {:.1} s ({} services, {} pods each remote)",
        a.remotes + 1,
        started.elapsed().as_secs_f64(),
        r.services,
        r.sidecars
    );
    let server = match spawn_on_kube(&bin, &clusters.primary.url(), "mc", &[("CLUSTER_ID", "config".into())], &[]) {
        Ok(s) => s,
        Err(e) => return fail(1, e),
    };
    let KubeServer { mut child, grpc, http, log } = server;
    let spawn_at = std::time::Instant::now();
    // First sync: ready, and every remote synced (istiod's clusterz).
    let get = |path: &str| -> Option<String> {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect_timeout(&http, Duration::from_secs(2)).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(c, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut out = String::new();
        c.read_to_string(&mut out).ok()?;
        let ok = out.lines().next().is_some_and(|l| l.split(' ').nth(1) == Some("200"));
        ok.then(|| out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()))?
    };
    // Every cluster listed and synced.
    let synced = |body: &str| {
        serde_json::from_str::<serde_json::Value>(body).ok().and_then(|v| {
            let a = v.as_array()?.clone();
            Some((a.len(), a.iter().all(|c| c["syncStatus"] == "synced")))
        })
    };
    let want = a.remotes as usize + 1;
    let first_sync = loop {
        if spawn_at.elapsed() > Duration::from_secs(a.duration) {
            let _ = child.kill();
            return fail(1, format!("not synced within {} s; see {}", a.duration, log.display()));
        }
        if let Ok(Some(status)) = child.try_wait() {
            return fail(1, format!("pilot-discovery exited ({status}); see {}", log.display()));
        }
        let ready = get("/ready").is_some();
        let clusters_ok = get("/debug/clusterz").is_some_and(|b| synced(&b) == Some((want, true)));
        let eps = get("/debug/endpointShardz")
            .is_some_and(|b| b.matches("\"Kubernetes/remote-").count() >= a.remotes as usize);
        if ready && clusters_ok && eps {
            break spawn_at.elapsed();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let rss = rss_kib(child.id());
    println!(
        "multicluster: {} remotes x {} services / {} pods; first sync {:.2} s; server RSS after sync {:.1} MiB",
        a.remotes,
        r.services,
        r.sidecars,
        first_sync.as_secs_f64(),
        rss as f64 / 1024.0
    );
    let mut o = run::Options::new(grpc, a.proxies.unwrap_or(s.sidecars));
    o.duration = Duration::from_secs(a.duration.max(1));
    o.churn_for = Duration::from_secs(a.churn_seconds);
    o.server_pid = Some(child.id());
    o.progress = !a.quiet;
    o.threads = threads;
    o.churn = Some(Churn { kind: ChurnKind::Eds, per_second: a.churn_rate });
    let (sc, rc) = (s.clone(), r.clone());
    let make: istiod_loadgen::churn::MakeStepper =
        Box::new(move |changes| Box::new(RemoteEds::new(&sc, &rc, &clusters, changes)));
    let report = rt.block_on(run::run_with(&s, &o, Some(make)));
    let _ = child.kill();
    let _ = child.wait();
    print!("{}", report.text());
    for e in &report.live.errors {
        eprintln!("loadgen: error: {e}");
    }
    if let Some(path) = &a.json {
        let mut j = report.json();
        j["multicluster"] = serde_json::json!({
            "remotes": a.remotes, "remoteServices": r.services, "remotePods": r.sidecars,
            "firstSyncSeconds": first_sync.as_secs_f64(), "serverRssKiBAfterSync": rss,
        });
        if let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&j).unwrap_or_default()) {
            return fail(1, format!("cannot write {}: {e}", path.display()));
        }
    }
    if report.live.synced < report.proxies {
        return fail(1, format!("{} of {} proxies never synced", report.proxies - report.live.synced, report.proxies));
    }
    if report.missed() > 0 {
        return fail(1, format!("{} proxy-changes never converged", report.missed()));
    }
    ExitCode::SUCCESS
}

#[allow(clippy::print_stdout, clippy::print_stderr, reason = "the command's output")]
fn vms_cmd(a: VmArgs) -> ExitCode {
    use istiod_loadgen::vms;
    let fail = |code: u8, msg: String| {
        eprintln!("loadgen: {msg}");
        ExitCode::from(code)
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).max(1);
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(1, format!("runtime: {e}")),
    };
    let bin =
        a.server_bin.clone().or_else(|| std::env::current_exe().ok().map(|e| e.with_file_name("pilot-discovery")));
    let Some(bin) = bin.filter(|b| b.exists()) else {
        return fail(2, "no pilot-discovery binary: build it or pass --server-bin".into());
    };
    let api = match rt.block_on(vms::api()) {
        Ok(api) => api,
        Err(e) => return fail(1, format!("fake API server: {e}")),
    };
    let grace = Duration::from_secs(a.grace_seconds.max(1));
    // Plaintext streams carry no identity: the entries' identity check is
    // off (what is measured is registration, not authentication).
    let env = [
        ("ISTIO_WORKLOAD_ENTRY_VALIDATE_IDENTITY", "false".to_owned()),
        ("PILOT_WORKLOAD_ENTRY_GRACE_PERIOD", format!("{}s", grace.as_secs())),
    ];
    let flags = [
        format!("--kubernetesApiQPS={}", a.kubernetes_api_qps),
        format!("--kubernetesApiBurst={}", a.kubernetes_api_burst),
    ];
    let KubeServer { mut child, grpc, http, log } = match spawn_on_kube(&bin, &api.url(), "vms", &env, &flags) {
        Ok(s) => s,
        Err(e) => return fail(1, e),
    };
    let ready = || {
        use std::io::{Read, Write};
        let Ok(mut c) = std::net::TcpStream::connect_timeout(&http, Duration::from_secs(2)) else { return false };
        let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = write!(c, "GET /ready HTTP/1.0\r\nHost: localhost\r\n\r\n");
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out.lines().next().is_some_and(|l| l.split(' ').nth(1) == Some("200"))
    };
    let spawn_at = std::time::Instant::now();
    while !ready() {
        if spawn_at.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            return fail(1, format!("not ready within 60 s; see {}", log.display()));
        }
        if let Ok(Some(status)) = child.try_wait() {
            return fail(1, format!("pilot-discovery exited ({status}); see {}", log.display()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let cpu = |pid: u32| -> f64 {
        // utime + stime, in clock ticks (100 per second on Linux).
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|t| {
                let f: Vec<&str> = t.rsplit_once(')')?.1.split_whitespace().collect();
                Some((f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?) as f64 / 100.0)
            })
            .unwrap_or(0.0)
    };
    let (server_cpu0, own_cpu0) = (cpu(child.id()), cpu(std::process::id()));
    let f = rt.block_on(vms::run(&api, grpc, a.vms, grace, Duration::from_secs(a.limit_seconds)));
    let (server_cpu, own_cpu) = (cpu(child.id()) - server_cpu0, cpu(std::process::id()) - own_cpu0);
    let rss = rss_kib(child.id());
    let _ = child.kill();
    let _ = child.wait();
    let secs = |d: Option<Duration>| d.map_or_else(|| "never".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()));
    println!(
        "vms: {} VMs ({} streams answered): all registered in {}, all in another proxy's EDS in {}; all gone, every entry deleted {} after (grace {} s); server RSS {:.1} MiB; CPU seconds: server {:.1}, loadgen with the fake API server {:.1}",
        f.vms,
        f.connected,
        secs(f.registered),
        secs(f.in_eds),
        secs(f.deleted),
        f.grace.as_secs(),
        rss as f64 / 1024.0,
        server_cpu,
        own_cpu
    );
    if let Some(path) = &a.json {
        let j = serde_json::json!({
            "vms": f.vms, "connected": f.connected,
            "registeredSeconds": f.registered.map(|d| d.as_secs_f64()),
            "inEdsSeconds": f.in_eds.map(|d| d.as_secs_f64()),
            "deletedSecondsAfterLeaving": f.deleted.map(|d| d.as_secs_f64()),
            "graceSeconds": f.grace.as_secs(), "serverRssKiB": rss,
            "serverCpuSeconds": server_cpu, "loadgenCpuSeconds": own_cpu,
        });
        if let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&j).unwrap_or_default()) {
            return fail(1, format!("cannot write {}: {e}", path.display()));
        }
    }
    if f.registered.is_none() || f.in_eds.is_none() || f.deleted.is_none() {
        return fail(1, format!("not every VM went through; see {}", log.display()));
    }
    ExitCode::SUCCESS
}

#[allow(clippy::print_stdout, clippy::print_stderr, reason = "the command's output")]
fn run_cmd(a: RunArgs) -> ExitCode {
    let fail = |code: u8, msg: String| {
        eprintln!("loadgen: {msg}");
        ExitCode::from(code)
    };
    let s = match Scenario::load(&a.scenario) {
        Ok(s) => s,
        Err(e) => return fail(2, e.to_string()),
    };
    if !(0.0..=1.0).contains(&a.nack_fraction) {
        return fail(2, format!("--nack-fraction {} is not within 0..1", a.nack_fraction));
    }
    let mut o = run::Options::new(a.server, a.proxies.unwrap_or(s.sidecars));
    o.concurrency = a.concurrency;
    match run::loopback_sources(a.server, o.proxies, a.source_addresses) {
        Ok(sources) => o.sources = sources,
        Err(e) => return fail(2, format!("--source-addresses: {e}")),
    }
    o.duration = Duration::from_secs(a.duration.max(1));
    o.delta = a.delta;
    o.nack_fraction = a.nack_fraction;
    o.churn_for = Duration::from_secs(a.churn_seconds);
    o.server_pid = a.server_pid;
    o.hold = Duration::from_secs(a.hold);
    o.progress = !a.quiet;
    o.config_dir = a.config_dir;
    o.h2_client = a.client == "h2";
    if let Some(path) = &a.tls {
        match proxy::tls(path, &a.tls_server_name) {
            Ok(t) => o.tls = Some(t),
            Err(e) => return fail(2, format!("--tls: {e}")),
        }
    }
    let kind = match a.churn.as_deref() {
        None => s.churn.as_ref().map(|c| c.kind),
        Some("eds") => Some(ChurnKind::Eds),
        Some("config") => Some(ChurnKind::Config),
        Some("gateway") if s.gateway_routes > 0 => Some(ChurnKind::Gateway),
        Some(k) => return fail(2, format!("--churn {k:?}: eds, config, or gateway (a scenario with gateway_routes)")),
    };
    if let Some(kind) = kind {
        let per_second = a.churn_rate.or(s.churn.as_ref().map(|c| c.per_second)).unwrap_or(1.0);
        if !(per_second > 0.0 && per_second <= 10_000.0) {
            return fail(2, format!("--churn-rate {per_second}: between 0 and 10000 per second"));
        }
        if o.config_dir.is_none() {
            return fail(2, "a churn needs --config-dir (the directory the server serves)".into());
        }
        o.churn = Some(Churn { kind, per_second });
    }
    o.threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(o.threads).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(1, format!("runtime: {e}")),
    };
    let report = rt.block_on(run::run(&s, &o));
    print!("{}", report.text());
    for e in &report.live.errors {
        eprintln!("loadgen: error: {e}");
    }
    if let Some(path) = &a.json
        && let Err(e) = std::fs::write(path, serde_json::to_vec_pretty(&report.json()).unwrap_or_default())
    {
        return fail(1, format!("cannot write {}: {e}", path.display()));
    }
    if let Some(path) = &a.html
        && let Err(e) = std::fs::write(path, report.html())
    {
        return fail(1, format!("cannot write {}: {e}", path.display()));
    }
    let l = &report.live;
    if l.connected == 0 {
        return fail(1, format!("no proxy could connect to {}", a.server));
    }
    if l.synced < report.proxies {
        return fail(1, format!("{} of {} proxies never synced", report.proxies - l.synced, report.proxies));
    }
    if l.open_at_end < report.proxies {
        return fail(1, format!("{} proxies were not connected at the end", report.proxies - l.open_at_end));
    }
    if report.missed() > 0 {
        return fail(1, format!("{} proxy-changes never converged", report.missed()));
    }
    if l.error_count > 0 {
        // Figures measured while proxies lost their connections are not
        // figures of a healthy run.
        let first = l.errors.first().map(String::as_str).unwrap_or("");
        return fail(1, format!("{} connection errors during the run (first: {first})", l.error_count));
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(a) => run_cmd(*a),
        Command::Csr(a) => csr_cmd(*a),
        Command::Multicluster(a) => multicluster_cmd(*a),
        Command::Vms(a) => vms_cmd(*a),
        Command::Ztunnel(a) => ztunnel_cmd(*a),
        Command::Issuer { out, issuer } => {
            #[allow(clippy::print_stdout, clippy::print_stderr, reason = "the command's output")]
            match istiod_loadgen::csr::Issuer::generate(&issuer).and_then(|i| i.save(&out).map_err(|e| e.to_string())) {
                Ok(()) => {
                    println!("loadgen: wrote issuer {issuer} to {}", out.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("loadgen: cannot write {}: {e}", out.display());
                    ExitCode::from(1)
                }
            }
        }
        Command::Mesh { scenario, out } => {
            let s = match Scenario::load(&scenario) {
                Ok(s) => s,
                Err(e) => {
                    #[allow(clippy::print_stderr, reason = "the command's error output")]
                    {
                        eprintln!("loadgen: {e}");
                    }
                    return ExitCode::from(2);
                }
            };
            match mesh::write(&s, &out) {
                Ok(files) => {
                    #[allow(clippy::print_stdout, reason = "the command's output")]
                    {
                        println!(
                            "loadgen: wrote {} ({} services, {} sidecars, {} namespaces) to {} in {files} files",
                            s.name,
                            s.services,
                            s.sidecars,
                            s.namespaces,
                            out.display()
                        );
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    #[allow(clippy::print_stderr, reason = "the command's error output")]
                    {
                        eprintln!("loadgen: cannot write {}: {e}", out.display());
                    }
                    ExitCode::from(1)
                }
            }
        }
    }
}
