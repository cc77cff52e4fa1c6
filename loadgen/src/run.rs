//! `loadgen run`: starts the simulated proxies ([`crate::proxy`]), waits
//! until they synced, drives the scenario's churn by editing its config
//! directory ([`crate::churn`]), lets the proxies converge, samples the
//! server's CPU and memory, and reports ([`crate::stats`]).

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::prost_types::{Struct, Value, value::Kind as V};

use crate::churn::{Changes, Driver};
use crate::mesh;
use crate::proxy::{self, Shared, Tls};
use crate::scenario::{Churn, Connect, Scenario};
use crate::stats::{self, Live, Report};

pub(crate) fn s(v: &str) -> Value {
    Value { kind: Some(V::StringValue(v.to_owned())) }
}

/// The node of ingress gateway `i`: a router of `istio-system` labelled
/// `istio=ingressgateway`.
fn gateway_node(i: u32) -> Node {
    let labels = Struct { fields: [("istio".to_owned(), s("ingressgateway"))].into() };
    let ip = format!("10.127.{}.{}", (i >> 8) & 0xff, i & 0xff);
    Node {
        id: format!("router~{ip}~istio-ingressgateway-{i}.istio-system~istio-system.svc.cluster.local"),
        cluster: "istio-ingressgateway".into(),
        metadata: Some(Struct {
            fields: [
                ("NAMESPACE".to_owned(), s("istio-system")),
                ("LABELS".to_owned(), Value { kind: Some(V::StructValue(labels)) }),
                ("INSTANCE_IPS".to_owned(), s(&ip)),
                ("CLUSTER_ID".to_owned(), s("Kubernetes")),
                ("ISTIO_VERSION".to_owned(), s("1.28.0")),
            ]
            .into(),
        }),
        ..Default::default()
    }
}

/// The node proxy `i` presents (the first `gateways` are ingress
/// gateways), as a sidecar of one of the scenario's
/// Pods sends it: id `sidecar~<ip>~<pod>.<ns>~<ns>.svc.cluster.local`,
/// NAMESPACE, LABELS, INSTANCE_IPS, CLUSTER_ID, ISTIO_VERSION.
pub fn node(sc: &Scenario, i: u32) -> Node {
    if i < sc.gateways {
        return gateway_node(i);
    }
    let p = i % sc.sidecars.max(1);
    let svc = p % sc.services;
    let (n, name) = mesh::service(sc, svc);
    let ns = mesh::namespace(n);
    let version = if (p / sc.services).is_multiple_of(2) { "v1" } else { "v2" };
    let ip = mesh::pod_ip(p);
    let labels = Struct {
        fields: [
            ("app".to_owned(), s(&name)),
            ("version".to_owned(), s(version)),
            ("security.istio.io/tlsMode".to_owned(), s("istio")),
        ]
        .into(),
    };
    Node {
        id: format!("sidecar~{ip}~{name}-{p}.{ns}~{ns}.svc.cluster.local"),
        cluster: name.clone(),
        metadata: Some(Struct {
            fields: [
                ("NAMESPACE".to_owned(), s(&ns)),
                ("LABELS".to_owned(), Value { kind: Some(V::StructValue(labels)) }),
                ("INSTANCE_IPS".to_owned(), s(&ip)),
                ("CLUSTER_ID".to_owned(), s("Kubernetes")),
                ("ISTIO_VERSION".to_owned(), s("1.28.0")),
                ("WORKLOAD_NAME".to_owned(), s(&name)),
            ]
            .into(),
        }),
        ..Default::default()
    }
}

/// How to run.
#[derive(Clone)]
pub struct Options {
    /// pilot-discovery's gRPC address.
    pub server: SocketAddr,
    /// Proxies to run.
    pub proxies: u32,
    /// Proxies connecting at the same time (a ramp); a `connect: storm`
    /// scenario connects them all at once.
    pub concurrency: usize,
    /// Upper bound of the whole run.
    pub duration: Duration,
    /// Delta xDS (else state of the world).
    pub delta: bool,
    /// Fraction of pushes NACKed once a proxy synced.
    pub nack_fraction: f64,
    /// TLS, if any.
    pub tls: Option<Tls>,
    /// The config directory the server serves, which the churn edits.
    pub config_dir: Option<PathBuf>,
    /// The churn (default: the scenario's).
    pub churn: Option<Churn>,
    /// How long to churn.
    pub churn_for: Duration,
    /// How long to wait for the last changes to converge.
    pub settle: Duration,
    /// How long to stay connected after the proxies synced and the churn
    /// settled (to see the server idle with every proxy connected).
    pub hold: Duration,
    /// The server's pid, to sample its CPU time and RSS from `/proc`.
    pub server_pid: Option<u32>,
    /// Print a live progress line on standard error.
    pub progress: bool,
    /// Worker threads the run's runtime has (reported, to judge whether
    /// loadgen was the limit).
    pub threads: usize,
    /// Plaintext proxies use the `h2` crate (else the lean client).
    pub h2_client: bool,
    /// Local addresses the proxies connect from, in turn (empty: the
    /// kernel's choice).
    pub sources: Vec<std::net::IpAddr>,
}

/// The loopback addresses `proxies` connect from: `count` of them from
/// 127.0.0.1 on; none (the kernel's choice) when one is enough. `count`
/// 0 is one per 20,000 proxies against a server on 127.0.0.0/8, and the
/// kernel's choice against any other (only loopback addresses reach a
/// loopback server, and none other can be assumed).
pub fn loopback_sources(server: SocketAddr, proxies: u32, count: u32) -> Result<Vec<std::net::IpAddr>, String> {
    let loopback = matches!(server.ip(), std::net::IpAddr::V4(ip) if ip.is_loopback());
    let count = match count {
        0 if loopback => proxies.div_ceil(20_000),
        0 => 1,
        n => n,
    };
    if count <= 1 {
        return Ok(Vec::new());
    }
    if !loopback {
        return Err(format!("{count} source addresses need a server on 127.0.0.0/8, not {server}"));
    }
    if count > 65_535 {
        return Err(format!("{count} is more than 127.0.0.0/8 has room for here"));
    }
    let first = u32::from(std::net::Ipv4Addr::new(127, 0, 0, 1));
    Ok((0..count).map(|k| std::net::IpAddr::V4((first + k).into())).collect())
}

impl Options {
    /// `proxies` delta proxies against `server`, at most 60 s, no churn.
    pub fn new(server: SocketAddr, proxies: u32) -> Options {
        Options {
            server,
            proxies,
            concurrency: 200,
            duration: Duration::from_secs(60),
            delta: true,
            nack_fraction: 0.0,
            tls: None,
            h2_client: false,
            sources: Vec::new(),
            config_dir: None,
            churn: None,
            churn_for: Duration::from_secs(10),
            settle: Duration::from_secs(5),
            hold: Duration::ZERO,
            server_pid: None,
            progress: false,
            threads: 1,
        }
    }
}

/// A line saying where the run is.
fn progress_line(start: Instant, proxies: u32, l: &Live) -> String {
    let p99 = |h: &hdrhistogram::Histogram<u64>| {
        if h.is_empty() { "-".to_owned() } else { format!("{:.1} ms", h.value_at_quantile(0.99) as f64 / 1000.0) }
    };
    format!(
        "[{:6.1}s] open {}/{proxies} synced {} pushes {} nacks {} errors {} | sync p99 {} | convergence p99 {}",
        start.elapsed().as_secs_f64(),
        l.open,
        l.synced,
        l.responses,
        l.nacks,
        l.error_count,
        p99(&l.sync),
        p99(&l.convergence)
    )
}

/// Runs the scenario's proxies against the server and reports.
pub async fn run(sc: &Scenario, o: &Options) -> Report {
    run_with(sc, o, None).await
}

/// [`run`], the churn made by `stepper` (else by editing the config
/// directory) at the churn's rate.
#[allow(clippy::print_stderr, reason = "the live progress line is for the person watching")]
pub async fn run_with(sc: &Scenario, o: &Options, stepper: Option<crate::churn::MakeStepper>) -> Report {
    let start = Instant::now();
    let deadline = start + o.duration;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let live = Arc::new(Mutex::new(Live::default()));
    let changes: Changes = Arc::new(Mutex::new(Vec::new()));
    let (changed_tx, changed_rx) = tokio::sync::watch::channel(0u32);
    let shared = Arc::new(Shared {
        server: o.server,
        sources: o.sources.clone(),
        h2_client: o.h2_client,
        delta: o.delta,
        nack_fraction: o.nack_fraction,
        tls: o.tls.clone(),
        deadline,
        stop: stop_rx.clone(),
        changes: changes.clone(),
        changed: changed_rx,
        live: live.clone(),
    });
    let sampler = o.server_pid.map(|pid| tokio::spawn(stats::sample(pid, Duration::from_millis(250), stop_rx.clone())));
    // loadgen's own CPU and memory, reported next to the server's: a
    // client that saturates measures itself, not the server.
    let own = tokio::spawn(stats::sample(std::process::id(), Duration::from_millis(250), stop_rx.clone()));
    let concurrency = if sc.connect == Connect::Storm { o.proxies as usize } else { o.concurrency };
    let gate = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..o.proxies {
        tasks.spawn(proxy::run(i, node(sc, i), shared.clone(), gate.clone()));
    }
    let tty = std::io::stderr().is_terminal();
    let mut last_line = Instant::now();
    let mut show = |force: bool| {
        if !o.progress {
            return;
        }
        let every = if tty { Duration::from_millis(500) } else { Duration::from_secs(5) };
        if force || last_line.elapsed() >= every {
            last_line = Instant::now();
            if let Ok(l) = live.lock() {
                let line = progress_line(start, o.proxies, &l);
                if tty {
                    eprint!("\r{line}\x1b[K");
                } else {
                    eprintln!("{line}");
                }
            }
        }
    };
    let read = |f: &dyn Fn(&Live) -> bool| live.lock().map(|l| f(&l)).unwrap_or(false);
    // Connect and sync; give up early if no proxy can connect at all.
    let give_up = start + o.duration.min(Duration::from_secs(10));
    while Instant::now() < deadline && !read(&|l| l.synced >= o.proxies) {
        if Instant::now() >= give_up && read(&|l| l.connected == 0) {
            break;
        }
        show(false);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Churn.
    let churn = o.churn.clone().or_else(|| sc.churn.clone());
    let stepper: Option<Box<dyn crate::churn::Stepper>> = match (stepper, &churn, &o.config_dir) {
        (Some(make), _, _) => Some(make(changes.clone())),
        (None, Some(c), Some(dir)) => Some(Box::new(Driver::new(sc, dir.clone(), c.kind, changes.clone()))),
        _ => None,
    };
    if let (Some(churn), Some(mut driver)) = (churn, stepper)
        && churn.per_second > 0.0
        && read(&|l| l.synced > 0)
    {
        let until = (Instant::now() + o.churn_for).min(deadline.checked_sub(o.settle).unwrap_or(deadline));
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / churn.per_second));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while Instant::now() < until {
            tick.tick().await;
            match driver.step() {
                Ok(c) => {
                    changed_tx.send_replace(c.id);
                }
                Err(e) => {
                    if let Ok(mut l) = live.lock() {
                        l.error(format!("churn: {e}"));
                    }
                }
            }
            show(false);
        }
        // Settle: until every proxy that could see a change ACKed it.
        tokio::task::yield_now().await;
        let settle_end = (Instant::now() + o.settle).min(deadline);
        while Instant::now() < settle_end {
            let made = changes.lock().map(|c| c.len()).unwrap_or(0);
            // Every open stream must have taken every change into account
            // first: the last change may not be expected by anyone yet.
            let done =
                read(&|l| l.all_looked(made) && l.changes.iter().any(|c| c.expected > 0) && l.outstanding() == 0);
            if done {
                break;
            }
            show(false);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let hold_end = (Instant::now() + o.hold).min(deadline);
    while Instant::now() < hold_end {
        show(false);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    show(true);
    if o.progress && tty {
        eprintln!();
    }
    if let Ok(mut l) = live.lock() {
        l.open_at_end = l.open;
    }
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    let server = match sampler {
        Some(h) => h.await.ok(),
        None => None,
    };
    let live = std::mem::take(&mut *live.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    let changes = changes.lock().map(|c| c.clone()).unwrap_or_default();
    let mut report = Report::new(&sc.name, o.proxies, o.delta, start.elapsed(), start, live, &changes, server);
    report.client = own.await.ok();
    report.client_threads = o.threads;
    report
}
