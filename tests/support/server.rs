//! The `pilot-discovery` binary as the integration tests start it: on a
//! config directory, with extra flags and environment, its log in a file,
//! and what /proc says of it.

#![allow(dead_code, reason = "each test binary uses part of the support code")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The bundled example mesh.
pub(crate) const BOOKINFO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo");

/// A loopback port free now, below the kernel's ephemeral range (32768
/// and up), so an outgoing connection of some other test cannot take it
/// between this check and the server's bind; picked at random, so tests
/// running at once rarely pick the same.
pub(crate) fn free_port() -> SocketAddr {
    use std::hash::{BuildHasher, Hasher};
    for _ in 0..1000 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
        let port = 20_000 + (h.finish() % 12_000) as u16;
        if !reserve(port) {
            continue;
        }
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            return l.local_addr().unwrap();
        }
    }
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// Claims `port` for this test process: tests run as parallel processes,
/// and a port one of them probed free may be taken by another before its
/// server binds it. A claim is a file created exclusively; claims older
/// than ten minutes (a run's lifetime) are taken over.
fn reserve(port: u16) -> bool {
    let dir = std::env::temp_dir().join("istiod-rs-test-ports");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(port.to_string());
    let stale = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(600));
    if stale {
        let _ = std::fs::remove_file(&path);
    }
    std::fs::OpenOptions::new().write(true).create_new(true).open(&path).is_ok()
}

/// This host's address on its default route, unless it has only loopback
/// (tests of what callers off loopback get need one).
pub(crate) fn non_loopback_ip() -> Option<std::net::IpAddr> {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|_| s))
        .and_then(|s| s.local_addr())
        .ok()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}

pub(crate) fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split(' ').nth(1)?.parse().ok()?;
    Some((status, out.split_once("\r\n\r\n")?.1.to_owned()))
}

pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) grpc: SocketAddr,
    pub(crate) http: SocketAddr,
    pub(crate) monitoring: SocketAddr,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts the binary on `config_dir` with extra flags and environment,
    /// under `nofile` open files when given, and waits for `/ready`.
    pub(crate) fn start(config_dir: &Path, flags: &[&str], env: &[(&str, &str)], nofile: Option<u32>) -> Self {
        Self::start_on(&["--configDir", config_dir.to_str().unwrap()], flags, env, nofile)
    }

    /// [`Server::start`] on another source (`--kubeconfig <file>`). A port
    /// taken between [`free_port`] and the server's bind (tests run in
    /// parallel) is a retry with other ports, not a failure.
    pub(crate) fn start_on(source: &[&str], flags: &[&str], env: &[(&str, &str)], nofile: Option<u32>) -> Self {
        Self::start_in(None, source, flags, env, nofile)
    }

    /// [`Server::start_on`] with `cwd` as the working directory (where
    /// istiod looks for `./etc/...`).
    pub(crate) fn start_in(
        cwd: Option<&Path>,
        source: &[&str],
        flags: &[&str],
        env: &[(&str, &str)],
        nofile: Option<u32>,
    ) -> Self {
        for attempt in 1.. {
            match Self::try_start(cwd, source, flags, env, nofile) {
                Ok(s) => return s,
                Err(log) if attempt < 5 && log.contains("Address already in use") => continue,
                Err(log) => panic!("server exited: {log}"),
            }
        }
        unreachable!()
    }

    /// [`Server::start_in`] that returns the log of a server that exited
    /// (a start refused) instead of failing the test.
    pub(crate) fn try_start_in(
        cwd: Option<&Path>,
        source: &[&str],
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self, String> {
        Self::try_start(cwd, source, flags, env, None)
    }

    fn try_start(
        cwd: Option<&Path>,
        source: &[&str],
        flags: &[&str],
        env: &[(&str, &str)],
        nofile: Option<u32>,
    ) -> Result<Self, String> {
        let (grpc, mut http, monitoring) = (free_port(), free_port(), free_port());
        // A `--httpAddr` of the caller's (e.g. 0.0.0.0:P) is polled on loopback.
        if let Some(port) = flags
            .windows(2)
            .find(|w| w[0] == "--httpAddr")
            .and_then(|w| w[1].rsplit_once(':'))
            .and_then(|(_, p)| p.parse::<u16>().ok())
        {
            http = SocketAddr::from(([127, 0, 0, 1], port));
        }
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("stderr.log");
        let mut cmd = match nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}")).arg("--").arg(env!("CARGO_BIN_EXE_pilot-discovery"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_pilot-discovery")),
        };
        cmd.arg("discovery")
            .args(source)
            .args(["--grpcAddr", &grpc.to_string(), "--httpAddr", &http.to_string()])
            .args([
                "--monitoringAddr",
                &monitoring.to_string(),
                "--secureGRPCAddr",
                "",
                "--httpsAddr",
                "",
                "--cores",
                "2",
            ])
            .args(["--log_target", "stderr"])
            // ControlZ on a port of its own (9876 is one for all tests).
            .args(["--ctrlz_port", "0"])
            .args(flags)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let child = cmd.spawn().unwrap();
        let mut s = Self { child, grpc, http, monitoring, log, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while get(http, "/ready").map(|r| r.0) != Some(200) {
            if let Some(status) = s.child.try_wait().unwrap() {
                return Err(format!("{status}: {}", s.log()));
            }
            assert!(Instant::now() < deadline, "server never became ready: {}", s.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(s)
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory, from /proc.
    pub(crate) fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// User + system CPU time, in clock ticks.
    pub(crate) fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }

    pub(crate) fn sigterm(&self) -> Instant {
        let _ = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status();
        Instant::now()
    }

    pub(crate) fn wait_exit(&mut self, within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "exit status {status}: {}", self.log());
                return start.elapsed();
            }
            assert!(start.elapsed() < within, "no exit after SIGTERM: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sum of a counter over the cores' `/debug/stats`.
    pub(crate) fn stat(&self, key: &str) -> u64 {
        let (_, body) = get(self.http, "/debug/stats").unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v.as_array().unwrap().iter().map(|c| c[key].as_u64().unwrap_or_else(|| panic!("no {key} in {c}"))).sum()
    }
}

pub(crate) fn wait_for(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir(to.join(e.file_name())).unwrap();
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A server on loopback answering every GET with the current `body` (a
/// JWKS, a discovery document); returns `http://<addr>/jwks.json`.
pub(crate) fn http_body_server(body: std::sync::Arc<std::sync::Mutex<String>>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let b = body.lock().unwrap().clone();
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
                b.len()
            );
        }
    });
    format!("http://{addr}/jwks.json")
}

/// The fake Kubernetes API server on a runtime of its own, serving what
/// every API server has for istiod's writes (Secrets, ConfigMaps, Leases).
pub(crate) fn fake_api() -> istiod_kubewatch::fake::FakeApi {
    let api = bare_fake_api();
    for r in istiod_kubewatch::fake::write_resources() {
        api.install(r);
    }
    api
}

/// The fake Kubernetes API server with nothing installed.
pub(crate) fn bare_fake_api() -> istiod_kubewatch::fake::FakeApi {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            tx.send(istiod_kubewatch::fake::FakeApi::start().await.unwrap()).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}

/// A kubeconfig in `dir` pointing at `url` (no credentials).
pub(crate) fn kubeconfig(dir: &Path, url: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: fake, cluster: {{server: \"{url}\"}}}}]\n\
             users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: c, context: {{cluster: fake, user: u}}}}]\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    path
}
