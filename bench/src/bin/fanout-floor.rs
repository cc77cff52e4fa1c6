//! The raw loopback fan-out floor (issue #15): what one change seen by
//! every proxy costs when nothing but the bytes move. One thread writes the
//! same `--bytes` to each of `--proxies` loopback connections; a child
//! process plays the proxies, reading each message whole and answering 64
//! bytes (an ACK). Two processes, as the server and loadgen are: each
//! holds one end of every connection (this machine allows a process
//! 20,000 descriptors, so 10,000 connections need both). A round ends when the writer has read the last ACK. No HTTP/2,
//! no protobuf, no per-proxy state: a server that fans out within a small
//! factor of this is limited by the machine, not by itself.
//!
//!   fanout-floor --proxies 1000 --bytes 23000 [--rounds 11]
//!
//! Prints the best, median and max of the rounds' last-ACK times, and the
//! CPU time of both processes, as text and (with `--json PATH`) JSON.

use std::io::Write;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ACK: usize = 64;

struct Args {
    proxies: usize,
    bytes: usize,
    rounds: usize,
    json: Option<String>,
    /// The child: play the proxies of the writer at this address.
    proxies_of: Option<std::net::SocketAddr>,
}

fn args() -> Result<Args, String> {
    let mut a = Args { proxies: 1000, bytes: 23_000, rounds: 11, json: None, proxies_of: None };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--proxies" => a.proxies = num(value()?)?,
            "--bytes" => a.bytes = num(value()?)?,
            "--rounds" => a.rounds = num(value()?)?,
            "--json" => a.json = Some(value()?),
            "--proxies-of" => a.proxies_of = Some(value()?.parse().map_err(|e| format!("--proxies-of: {e}"))?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.proxies == 0 || a.proxies > 100_000 || a.bytes == 0 || a.bytes > 64 << 20 || a.rounds == 0 {
        return Err("--proxies 1..100000, --bytes 1..64MiB, --rounds at least 1".into());
    }
    Ok(a)
}

/// CPU seconds of this process and its waited-for children (utime,
/// stime, cutime, cstime).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rfind(')').map_or("", |i| &stat[i + 2..]);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = (11..=14).filter_map(|i| f.get(i)?.parse::<f64>().ok()).sum();
    ticks / 100.0
}

/// The proxies: read each message whole, answer an ACK.
fn play_proxies(addr: std::net::SocketAddr, n: usize, size: usize, rounds: usize) {
    runtime().block_on(async move {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async move {
                let mut tasks = Vec::new();
                for _ in 0..n {
                    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
                    let _ = s.set_nodelay(true);
                    tasks.push(tokio::task::spawn_local(async move {
                        let mut buf = vec![0u8; size];
                        let ack = [0u8; ACK];
                        for _ in 0..rounds {
                            if s.read_exact(&mut buf).await.is_err() || s.write_all(&ack).await.is_err() {
                                return;
                            }
                        }
                    }));
                }
                for t in tasks {
                    let _ = t.await;
                }
            })
            .await;
    });
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

#[allow(clippy::print_stdout, clippy::print_stderr, reason = "the tool's output")]
fn main() -> std::process::ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fanout-floor: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("address");
    let (n, size, rounds) = (a.proxies, a.bytes, a.rounds);
    if let Some(addr) = a.proxies_of {
        play_proxies(addr, n, size, rounds);
        return std::process::ExitCode::SUCCESS;
    }
    let exe = std::env::current_exe().expect("own path");
    let mut reader = std::process::Command::new(exe)
        .args(["--proxies", &n.to_string(), "--bytes", &size.to_string(), "--rounds", &rounds.to_string()])
        .args(["--proxies-of", &addr.to_string()])
        .spawn()
        .expect("the proxies' process starts");
    let cpu0 = cpu_seconds();
    // The server: one thread writes the same bytes to every connection.
    let times = runtime().block_on(async move {
        listener.set_nonblocking(true).expect("nonblocking");
        let l = tokio::net::TcpListener::from_std(listener).expect("listener");
        let mut conns = Vec::with_capacity(n);
        while conns.len() < n {
            let (s, _) = l.accept().await.expect("accept");
            let _ = s.set_nodelay(true);
            conns.push(s);
        }
        let payload = Bytes::from(vec![7u8; size]);
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async move {
                let mut times = Vec::new();
                let mut conns: Vec<Option<tokio::net::TcpStream>> = conns.into_iter().map(Some).collect();
                for _ in 0..rounds {
                    let start = Instant::now();
                    let mut tasks = Vec::with_capacity(n);
                    for c in conns.iter_mut() {
                        let mut s = c.take().expect("connection");
                        let payload = payload.clone();
                        tasks.push(tokio::task::spawn_local(async move {
                            let mut ack = [0u8; ACK];
                            s.write_all(&payload).await.expect("write");
                            s.read_exact(&mut ack).await.expect("ack");
                            s
                        }));
                    }
                    for (c, t) in conns.iter_mut().zip(tasks) {
                        *c = Some(t.await.expect("round"));
                    }
                    times.push(start.elapsed());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                times
            })
            .await
    });
    let _ = reader.wait();
    let cpu = cpu_seconds() - cpu0;
    let mut ms: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let best = ms[0];
    let median = ms[ms.len() / 2];
    let max = ms[ms.len() - 1];
    println!(
        "fanout-floor: {n} connections x {size} bytes, {rounds} rounds: last ACK best {best:.1} ms, median {median:.1} ms, max {max:.1} ms; {cpu:.2} CPU s (both processes)"
    );
    if let Some(path) = a.json {
        let j = format!(
            "{{\"proxies\":{n},\"bytes\":{size},\"rounds\":{rounds},\"last_ack_ms_best\":{best:.3},\"last_ack_ms_median\":{median:.3},\"last_ack_ms_max\":{max:.3},\"cpu_s\":{cpu:.3}}}\n"
        );
        if let Err(e) = std::fs::File::create(&path).and_then(|mut f| f.write_all(j.as_bytes())) {
            eprintln!("fanout-floor: {path}: {e}");
            return std::process::ExitCode::from(1);
        }
    }
    std::process::ExitCode::SUCCESS
}
