//! The glommio adapter: one executor per serving core, each with its own
//! `SO_REUSEPORT` listeners on the gRPC ports (the kernel spreads
//! connections across cores), plaintext h2c with prior knowledge and TLS
//! (rustls, ALPN `h2`) in front of the same [`GrpcConnection`] logic.
//!
//! Each connection is one task running one loop: it polls the socket for
//! reads and writes, the connection's next deadline and a wake-up (for
//! pushes) in a single `poll_fn`, so nothing is cancelled mid-operation
//! (glommio's `poll_read`/`poll_write` keep their state in the stream). A
//! write is one `send` of everything the state machine produced, not one
//! per frame.

mod conn;
mod mux;
mod socket;
pub mod tls;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use glommio::net::TcpListener;
use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};

use crate::grpc::{GrpcLimits, Service};
use crate::h2::Limits;
pub use conn::{ConnHandle, Registry};
pub use mux::{Mux, MuxFactory};

/// How the server runs.
#[derive(Clone)]
pub struct ServerConfig {
    /// Serving cores (executors). istiod-rs's `--cores`.
    pub cores: usize,
    /// Pin each executor to its CPU (production); tests leave them unbound.
    pub pin: bool,
    /// Listeners: every core binds each of them.
    pub listeners: Vec<ListenerConfig>,
    /// HTTP/2 limits of each connection.
    pub limits: Limits,
    /// gRPC limits of each connection.
    pub grpc: GrpcLimits,
    /// How long a shutdown may take (istiod's `--shutdownDuration`, 10s):
    /// connections are ended spread over it.
    pub shutdown: Duration,
    /// Plaintext connections accepted elsewhere, served by whichever core
    /// takes each first (istiod multiplexes gRPC on its HTTP port when
    /// `--grpcAddr` is empty).
    pub handoff: Option<Handoff>,
    /// Submission entries of each of a core's io_uring rings, 1 to
    /// [`MAX_RING_DEPTH`] ([`RING_DEPTH`] says why the default is deep).
    pub ring_depth: usize,
}

/// See [`ServerConfig::handoff`].
pub type Handoff = async_channel::Receiver<std::net::TcpStream>;

/// One listening port.
#[derive(Clone)]
pub struct ListenerConfig {
    /// Address; port 0 picks one (the same for every core).
    pub addr: SocketAddr,
    /// TLS, or plaintext h2c when `None`.
    pub tls: Option<tls::Reloadable>,
}

/// Makes each core's service.
pub trait ServiceFactory: Send + Sync + 'static {
    /// The per-core service; it sees every connection of its core.
    type Service: Service + 'static;
    /// Called once on each core's thread.
    fn make(&self, core: usize, registry: Rc<Registry>) -> Self::Service;
    /// Called once on each core's thread after [`ServiceFactory::make`],
    /// to start the core's background tasks (e.g. receiving snapshots).
    fn start(&self, core: usize, svc: Rc<RefCell<Self::Service>>) {
        let _ = (core, svc);
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// io_uring (or the executor) could not be set up.
    #[error("serving core {core} could not start: {reason}")]
    Executor {
        /// Which core.
        core: usize,
        /// What went wrong and what to do.
        reason: String,
    },
    /// A port could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A running server.
pub struct ServerHandle {
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    threads: Vec<ExecutorJoinHandle<()>>,
}

impl ServerHandle {
    /// The bound address of each listener, in configuration order.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Stops accepting, sends GOAWAY on every connection and returns once
    /// every core has finished (connections get `max_connection_age_grace`).
    pub fn shutdown(self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// How often a core checks the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);

/// Submission entries of each of a core's io_uring rings by default (glommio's
/// default is 128). Every cancellation the reactor submits (it re-arms its
/// preemption timers on each wait) walks one chain of the kernel's table
/// of pending polls, which has `2^(log2(2 * depth) - 5)` chains, at most
/// 256: at 128, eight chains for a core's thousands of connections, and
/// that walk was 4.5% of a core pushing to 1,000 proxies.
/// The default of [`ServerConfig::ring_depth`].
pub const RING_DEPTH: usize = 4096;

/// The deepest ring io_uring sets up (`IORING_MAX_ENTRIES`).
pub const MAX_RING_DEPTH: usize = 32_768;

/// What an executor thread panicked with while starting (glommio panics
/// when io_uring cannot be set up), kept for the start error instead of
/// printed: its wording blames an old kernel where a seccomp profile is
/// the usual cause.
static START_PANIC: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
/// Executors are starting: their panics are kept in [`START_PANIC`].
static STARTING: AtomicBool = AtomicBool::new(false);
/// The panic hook that does so, installed once.
static HOOK: std::sync::Once = std::sync::Once::new();

thread_local! {
    /// This core has started (its later panics are reported as any other).
    static CORE_STARTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn catch_start_panics() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let core = std::thread::current().name().is_some_and(|n| n.starts_with("istiod-core"));
            if core && STARTING.load(Ordering::SeqCst) && !CORE_STARTED.with(std::cell::Cell::get) {
                let msg = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                *START_PANIC.lock().unwrap_or_else(|e| e.into_inner()) = Some(msg);
            } else {
                previous(info);
            }
        }));
    });
}

/// Starts `cfg.cores` executors serving `factory`'s service.
pub fn start<F: ServiceFactory>(cfg: ServerConfig, factory: F) -> Result<ServerHandle, ServerError> {
    catch_start_panics();
    STARTING.store(true, Ordering::SeqCst);
    let started = start_cores(cfg, factory);
    STARTING.store(false, Ordering::SeqCst);
    started
}

/// Whether something accepts connections on `addr` (a wildcard address
/// is tried on loopback).
fn someone_listens(addr: SocketAddr) -> bool {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    std::net::TcpStream::connect_timeout(&SocketAddr::new(ip, addr.port()), std::time::Duration::from_millis(500))
        .is_ok()
}

fn start_cores<F: ServiceFactory>(cfg: ServerConfig, factory: F) -> Result<ServerHandle, ServerError> {
    let factory = Arc::new(factory);
    let stop = Arc::new(AtomicBool::new(false));
    // Ports: bind core 0 first, so `:0` resolves once and every core binds
    // the same port.
    let mut addrs: Vec<SocketAddr> = cfg.listeners.iter().map(|l| l.addr).collect();
    // The cores bind with SO_REUSEPORT among themselves, which would also
    // let a second server on the same address take half the connections
    // silently. A plain bind first (no SO_REUSEPORT) fails with "address in
    // use" while anyone else listens there, as istiod's start does.
    for addr in addrs.iter().filter(|a| a.port() != 0) {
        if let Err(source) = std::net::TcpListener::bind(addr) {
            // A previous process's connections on this port linger in
            // TIME_WAIT for a minute after it ends, and refuse a plain bind
            // although nobody listens (they took the flags of its listener,
            // which had SO_REUSEPORT but not SO_REUSEADDR): a restart in
            // the same network namespace must not wait for them. Only a
            // listener that answers is another server.
            if source.kind() != std::io::ErrorKind::AddrInUse || someone_listens(*addr) {
                return Err(ServerError::Bind { addr: *addr, source });
            }
        }
    }
    let mut threads = Vec::new();
    for core in 0..cfg.cores.max(1) {
        let (tx, rx) = mpsc::channel::<Result<Vec<SocketAddr>, ServerError>>();
        let cfg = cfg.clone();
        let bind = addrs.clone();
        let factory = factory.clone();
        let stop = stop.clone();
        let placement = if cfg.pin { Placement::Fixed(core) } else { Placement::Unbound };
        let handle = LocalExecutorBuilder::new(placement)
            .name(&format!("istiod-core{core}"))
            // glommio registers this much memory with io_uring; it counts
            // against RLIMIT_MEMLOCK, which is small in containers.
            .io_memory(256 << 10)
            .ring_depth(cfg.ring_depth.clamp(1, MAX_RING_DEPTH))
            .spawn(move || async move { run_core(core, cfg, bind, factory, stop, tx).await })
            .map_err(|e| ServerError::Executor { core, reason: executor_error(&e.to_string()) })?;
        match rx.recv() {
            Ok(Ok(bound)) => addrs = bound,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                let reason = match handle.join() {
                    Err(e) => executor_error(&e.to_string()),
                    Ok(()) => "the executor exited during start-up".into(),
                };
                return Err(ServerError::Executor { core, reason });
            }
        }
        threads.push(handle);
    }
    Ok(ServerHandle { addrs, stop, threads })
}

/// Says what to do about an executor that cannot start.
fn executor_error(e: &str) -> String {
    let panicked = START_PANIC.lock().unwrap_or_else(|p| p.into_inner()).take();
    let e = match panicked {
        Some(p) => format!("{e} ({p})"),
        None => e.to_owned(),
    };
    if e.contains("memlock") || e.contains("MemLock") || e.contains("locked memory") {
        return format!("{e}; raise the memlock limit (ulimit -l, or LimitMEMLOCK= in systemd)");
    }
    // Linux 6.6+: io_uring off for everyone (2) or all but a group (1).
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").unwrap_or_default();
    match disabled.trim() {
        "2" => format!("{e}; io_uring is disabled on this host: set sysctl kernel.io_uring_disabled=0"),
        "1" => format!(
            "{e}; io_uring is limited to the group kernel.io_uring_group names: run in that group, \
             or set sysctl kernel.io_uring_disabled=0"
        ),
        _ => format!(
            "{e}; io_uring_setup was refused: container runtimes' default seccomp profiles deny it \
             (Docker 25+, recent containerd RuntimeDefault). Run with a seccomp profile that allows \
             io_uring_setup, io_uring_enter and io_uring_register (Kubernetes: the container's \
             securityContext.seccompProfile, a Localhost profile; docs/install.md says how to make one), \
             or Unconfined; io_uring needs Linux 5.8 or later"
        ),
    }
}

async fn run_core<F: ServiceFactory>(
    core: usize,
    cfg: ServerConfig,
    bind: Vec<SocketAddr>,
    factory: Arc<F>,
    stop: Arc<AtomicBool>,
    ready: mpsc::Sender<Result<Vec<SocketAddr>, ServerError>>,
) {
    let mut listeners = Vec::new();
    let mut bound = Vec::new();
    for addr in &bind {
        match TcpListener::bind(addr) {
            Ok(l) => {
                bound.push(l.local_addr().unwrap_or(*addr));
                listeners.push(l);
            }
            Err(e) => {
                let source = std::io::Error::other(e.to_string());
                let _ = ready.send(Err(ServerError::Bind { addr: *addr, source }));
                return;
            }
        }
    }
    let registry = Rc::new(Registry::new(cfg.limits.clone(), cfg.grpc.clone()));
    let svc = Rc::new(RefCell::new(factory.make(core, registry.clone())));
    factory.start(core, svc.clone());
    CORE_STARTED.with(|s| s.set(true));
    let _ = ready.send(Ok(bound));
    drop(ready);

    let mut accept_tasks = Vec::new();
    for (l, spec) in listeners.into_iter().zip(cfg.listeners.iter()) {
        let registry = registry.clone();
        let svc = svc.clone();
        let tls = spec.tls.clone();
        accept_tasks.push(glommio::spawn_local(accept_loop(l, tls, registry, svc)).detach());
    }
    if let Some(rx) = cfg.handoff.clone() {
        let registry = registry.clone();
        let svc = svc.clone();
        accept_tasks.push(glommio::spawn_local(serve_handed_off(rx, registry, svc)).detach());
    }
    while !stop.load(Ordering::SeqCst) {
        glommio::timer::sleep(STOP_POLL).await;
    }
    for t in accept_tasks {
        t.cancel();
    }
    registry.go_away_all(cfg.shutdown);
    let deadline = std::time::Instant::now() + cfg.shutdown + Duration::from_secs(1);
    while !registry.is_empty() && std::time::Instant::now() < deadline {
        glommio::timer::sleep(STOP_POLL).await;
    }
}

/// Listens on `addr` with the kernel's largest backlog (`somaxconn`, as
/// Go's listeners and so istiod's) and accepts on a thread of its own,
/// handing each connection to whichever serving core takes it first (pass
/// the receiver as [`ServerConfig::handoff`]). A core's own listener has
/// glommio's fixed backlog of 1,024 and accepts only between its other
/// tasks: a connect storm of 10,000 proxies overflowed it (the kernel
/// counted 20,961 listen overflows, and 424 proxies were reset and
/// retried). [`AcceptThread::stop`] (or dropping it) closes the port, as
/// a core's listener closes when the server stops.
pub fn accept_on_thread(addr: SocketAddr) -> Result<(SocketAddr, Handoff, AcceptThread), ServerError> {
    use socket2::{Domain, Socket, Type};
    let bind_err = |source: std::io::Error| ServerError::Bind { addr, source };
    let listen_on = |reuse_port: bool| -> std::io::Result<Socket> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        // As std's listeners: a restart is not refused for its
        // predecessor's connections in TIME_WAIT, and another listener
        // still is.
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(reuse_port)?;
        socket.bind(&addr.into())?;
        Ok(socket)
    };
    // The connections a build whose cores listened here left in TIME_WAIT
    // took that listener's SO_REUSEPORT and refuse a bind without it for a
    // minute (see `start_cores`): with nobody listening, bind as they did.
    let socket = match listen_on(false) {
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && addr.port() != 0 && !someone_listens(addr) => {
            listen_on(true).map_err(bind_err)?
        }
        other => other.map_err(bind_err)?,
    };
    // The kernel caps the backlog at somaxconn.
    socket.listen(65_535).map_err(bind_err)?;
    let stopper = socket.try_clone().map_err(bind_err)?;
    let listener: std::net::TcpListener = socket.into();
    let bound = listener.local_addr().map_err(bind_err)?;
    let (tx, rx) = async_channel::bounded::<std::net::TcpStream>(4096);
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    std::thread::Builder::new()
        .name("istiod-accept".into())
        .spawn(move || {
            loop {
                let accepted = listener.accept();
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                match accepted {
                    Ok((stream, _)) => {
                        if tx.send_blocking(stream).is_err() {
                            // No core takes connections any more: the port
                            // closes (the stopper's descriptor would keep it
                            // listening, with nobody accepting).
                            let _ = socket2::SockRef::from(&listener).shutdown(std::net::Shutdown::Both);
                            return;
                        }
                    }
                    Err(e) => {
                        if tx.is_closed() {
                            let _ = socket2::SockRef::from(&listener).shutdown(std::net::Shutdown::Both);
                            return;
                        }
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(target: "grpc", error = %e, "accept failed");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })
        .map_err(|e| ServerError::Bind { addr, source: e })?;
    Ok((bound, rx, AcceptThread { stop, socket: Some(stopper) }))
}

/// The thread [`accept_on_thread`] started.
#[derive(Debug)]
pub struct AcceptThread {
    stop: Arc<AtomicBool>,
    /// The listening socket (a second descriptor of it).
    socket: Option<socket2::Socket>,
}

impl AcceptThread {
    /// Closes the port: the thread's `accept` returns at once (a listening
    /// socket shut down wakes it) and it ends with its descriptor.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(s) = self.socket.take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for AcceptThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serves connections another thread accepted (see [`ServerConfig::handoff`]).
async fn serve_handed_off<S: Service + 'static>(rx: Handoff, registry: Rc<Registry>, svc: Rc<RefCell<S>>) {
    while let Ok(std_stream) = rx.recv().await {
        let peer = std_stream.peer_addr().ok();
        let _ = std_stream.set_nodelay(true);
        let stream = glommio::net::TcpStream::from(socket2::Socket::from(std_stream));
        let registry = registry.clone();
        let svc = svc.clone();
        glommio::spawn_local(async move {
            conn::serve(socket::Plain(stream), peer, false, None, &registry, &svc).await;
        })
        .detach();
    }
}

async fn accept_loop<S: Service + 'static>(
    listener: TcpListener,
    tls: Option<tls::Reloadable>,
    registry: Rc<Registry>,
    svc: Rc<RefCell<S>>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(target: "grpc", error = %e, "accept failed");
                glommio::timer::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let peer = stream.peer_addr().ok();
        let registry = registry.clone();
        let svc = svc.clone();
        // The configuration in force at the accept.
        let tls = tls.as_ref().map(|t| futures_rustls::TlsAcceptor::from(t.get()));
        glommio::spawn_local(async move {
            match tls {
                None => conn::serve(socket::Plain(stream), peer, false, None, &registry, &svc).await,
                Some(acceptor) => {
                    let handshake = registry.limits().handshake_timeout;
                    match glommio::timer::timeout(handshake, async {
                        acceptor.accept(socket::Plain(stream)).await.map_err(glommio::GlommioError::IoError)
                    })
                    .await
                    {
                        Ok(tls_stream) => {
                            // A client certificate is here only if the
                            // listener's client roots verified it.
                            let leaf = tls_stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .map(|c| bytes::Bytes::copy_from_slice(c.as_ref()));
                            conn::serve(tls_stream, peer, true, leaf, &registry, &svc).await
                        }
                        Err(e) => tracing::debug!(target: "grpc", ?peer, error = %e, "TLS handshake failed"),
                    }
                }
            }
        })
        .detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The accept thread hands every connection on, takes the kernel's
    /// largest backlog, and closes the port when stopped.
    #[test]
    fn the_accept_thread_hands_connections_on_and_closes_the_port_when_stopped() {
        let (addr, rx, mut thread) = accept_on_thread("127.0.0.1:0".parse().unwrap()).unwrap();
        assert_ne!(addr.port(), 0);
        // More than glommio's backlog of 1,024, and no core taking any:
        // the thread accepted them all.
        let clients: Vec<_> = (0..1500).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
        let mut taken = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while taken.len() < clients.len() {
            assert!(std::time::Instant::now() < deadline, "{} of {} handed on", taken.len(), clients.len());
            match rx.try_recv() {
                Ok(s) => taken.push(s),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        let mut peers: Vec<SocketAddr> = taken.iter().map(|s| s.peer_addr().unwrap()).collect();
        let mut locals: Vec<SocketAddr> = clients.iter().map(|c| c.local_addr().unwrap()).collect();
        peers.sort();
        locals.sort();
        assert_eq!(peers, locals, "each connection handed on once");
        thread.stop();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(addr).is_ok() {
            assert!(std::time::Instant::now() < deadline, "the port still accepts after stop");
            std::thread::sleep(Duration::from_millis(10));
        }
        // No core taking connections any more (every receiver gone): the
        // next connection is the last the port takes, though the handle
        // still holds a descriptor of the socket.
        let (addr, rx, _thread) = accept_on_thread("127.0.0.1:0".parse().unwrap()).unwrap();
        drop(rx);
        let _last = std::net::TcpStream::connect(addr);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(addr).is_ok() {
            assert!(std::time::Instant::now() < deadline, "the port still listens with no core to take connections");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
