//! What a run measures: live counters and histograms the proxies update,
//! the server's CPU time and RSS sampled from `/proc`, and the report as
//! text, JSON and HTML.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::churn::Change;
use crate::scenario::ChurnKind;

/// Latencies are kept in microseconds, up to an hour, 3 significant digits.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant bounds are valid")
}

/// One change's convergence: how many proxies could see it and when each
/// one ACKed it.
#[derive(Debug, Clone, Default)]
pub struct ChangeStat {
    /// Proxies that held the changed service's cluster when it changed.
    pub expected: u32,
    /// Proxies that took the change into account (whether or not it
    /// concerns them): a run settles only once every open stream has.
    pub looked: u32,
    /// Change-to-ACK times in microseconds.
    pub samples: Vec<u64>,
}

/// Counters and histograms, updated by the proxies as things happen.
#[derive(Debug)]
pub struct Live {
    /// Streams open now.
    pub open: u32,
    /// Streams open when the run ended (before the proxies were stopped).
    pub open_at_end: u32,
    /// Proxies whose stream opened at least once.
    pub connected: u32,
    /// Proxies that synced (the first time).
    pub synced: u32,
    /// Syncs after a reconnect.
    pub resynced: u32,
    /// Responses received.
    pub responses: u64,
    /// Bytes of gRPC messages received.
    pub bytes: u64,
    /// Responses that carried a change, and their bytes (what one change
    /// costs to send one proxy: the raw floor is measured with that size).
    pub change_responses: u64,
    /// Their bytes.
    pub change_bytes: u64,
    /// Responses NACKed.
    pub nacks: u64,
    /// Streams lost after a proxy had synced.
    pub disconnects: u64,
    /// Pending changes replaced by a newer change to the same resource
    /// before the proxy saw them.
    pub superseded: u64,
    /// Connect-to-synced times (first sync of each proxy), microseconds.
    pub sync: Histogram<u64>,
    /// Change-to-ACK times over every change and proxy, microseconds.
    pub convergence: Histogram<u64>,
    /// Per change, by id.
    pub changes: Vec<ChangeStat>,
    /// Errors in all, and the first few.
    pub error_count: u64,
    /// Connection attempts that failed before a proxy's first connection
    /// (the server not listening yet); errors only for proxies that never
    /// connected.
    pub connect_retries: u64,
    /// The first 20 errors.
    pub errors: Vec<String>,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            open: 0,
            open_at_end: 0,
            connected: 0,
            synced: 0,
            resynced: 0,
            responses: 0,
            bytes: 0,
            change_responses: 0,
            change_bytes: 0,
            nacks: 0,
            disconnects: 0,
            superseded: 0,
            sync: histogram(),
            convergence: histogram(),
            changes: Vec::new(),
            error_count: 0,
            connect_retries: 0,
            errors: Vec::new(),
        }
    }
}

impl Live {
    /// A stream opened (`first`: the proxy's first) or closed.
    pub fn stream(&mut self, open: bool, first: bool) {
        if open {
            self.open += 1;
            self.connected += u32::from(first);
        } else {
            self.open = self.open.saturating_sub(1);
        }
    }

    /// A response of `len` bytes, NACKed or not.
    pub fn response(&mut self, len: u64, nack: bool) {
        self.responses += 1;
        self.bytes += len;
        self.nacks += u64::from(nack);
    }

    /// A proxy synced `d` after it connected.
    pub fn synced(&mut self, d: Duration, first: bool) {
        if first {
            self.synced += 1;
            let _ = self.sync.record((d.as_micros() as u64).max(1));
        } else {
            self.resynced += 1;
        }
    }

    fn change(&mut self, id: u32) -> &mut ChangeStat {
        let i = id as usize;
        if self.changes.len() <= i {
            self.changes.resize(i + 1, ChangeStat::default());
        }
        &mut self.changes[i]
    }

    /// A proxy took change `id` into account.
    pub fn looked(&mut self, id: u32) {
        self.change(id).looked += 1;
    }

    /// Whether every open stream took each of the `made` changes into
    /// account (else a change just made may not be expected by anyone yet).
    pub fn all_looked(&self, made: usize) -> bool {
        self.changes.len() >= made && self.changes.iter().all(|c| c.looked >= self.open)
    }

    /// A proxy that can see change `id` is waiting for it.
    pub fn expected(&mut self, id: u32) {
        self.change(id).expected += 1;
    }

    /// A proxy ACKed change `id`, `d` after it was made.
    pub fn converged(&mut self, id: u32, d: Duration) {
        let us = (d.as_micros() as u64).max(1);
        let _ = self.convergence.record(us);
        self.change(id).samples.push(us);
    }

    /// Proxy-changes still owed: seen as applicable, neither ACKed nor
    /// replaced by a newer change to the same resource.
    pub fn outstanding(&self) -> u64 {
        let expected: u64 = self.changes.iter().map(|c| u64::from(c.expected)).sum();
        let converged: u64 = self.changes.iter().map(|c| c.samples.len() as u64).sum();
        expected.saturating_sub(converged + self.superseded)
    }

    /// Something went wrong.
    pub fn error(&mut self, e: String) {
        self.error_count += 1;
        if self.errors.len() < 20 {
            self.errors.push(e);
        }
    }
}

/// `{p50, p90, p99, max, count}` in milliseconds.
pub fn quantiles_ms(h: &Histogram<u64>) -> serde_json::Value {
    let q = |f: f64| if h.is_empty() { 0.0 } else { h.value_at_quantile(f) as f64 / 1000.0 };
    serde_json::json!({"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": h.max() as f64 / 1000.0, "count": h.len()})
}

/// The server process's CPU time and memory over a run.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    /// (seconds into the run, CPU seconds used since the start, RSS bytes).
    pub samples: Vec<(f64, f64, u64)>,
    /// Peak RSS (the kernel's high-water mark, VmHWM).
    pub rss_max: u64,
}

impl Usage {
    /// CPU seconds the server used during the run.
    pub fn cpu_s(&self) -> f64 {
        self.samples.last().map_or(0.0, |s| s.1)
    }

    /// The busiest second or so of the run: CPU seconds per wall second
    /// over the busiest window of at least `window` seconds.
    pub fn peak_cpus(&self, window: f64) -> f64 {
        let mut best = 0.0f64;
        let mut j = 0;
        for i in 0..self.samples.len() {
            while j < i && self.samples[i].0 - self.samples[j + 1].0 >= window {
                j += 1;
            }
            let (a, b) = (self.samples[j], self.samples[i]);
            if b.0 - a.0 >= window {
                best = best.max((b.1 - a.1) / (b.0 - a.0));
            }
        }
        best
    }
}

/// Reads (CPU seconds, RSS bytes, peak RSS bytes) of process `pid`.
pub fn proc_sample(pid: u32) -> Option<(f64, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state is
    // field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    // /proc reports CPU time in USER_HZ, 100 per second on Linux.
    Some((ticks as f64 / 100.0, kb("VmRSS:") * 1024, kb("VmHWM:") * 1024))
}

/// Samples process `pid` every `every` until `stop` is set.
pub async fn sample(pid: u32, every: Duration, mut stop: tokio::sync::watch::Receiver<bool>) -> Usage {
    let start = Instant::now();
    let base = proc_sample(pid).map_or(0.0, |s| s.0);
    let mut u = Usage::default();
    loop {
        if let Some((cpu, rss, hwm)) = proc_sample(pid) {
            u.samples.push((start.elapsed().as_secs_f64(), cpu - base, rss));
            u.rss_max = u.rss_max.max(hwm).max(rss);
        }
        if *stop.borrow() {
            return u;
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => {}
        }
    }
}

/// One change in the report.
#[derive(Debug, Clone)]
pub struct ChangeRow {
    /// Its id.
    pub id: u32,
    /// Seconds into the run.
    pub at_s: f64,
    /// Endpoints or config.
    pub kind: ChurnKind,
    /// The resource that carried it.
    pub resource: String,
    /// Proxies that could see it / that ACKed it.
    pub expected: u32,
    /// Proxies that ACKed it.
    pub converged: u32,
    /// p50, p99, max in milliseconds.
    pub ms: [f64; 3],
    /// The first proxy's ACK, milliseconds after the change.
    pub first_ms: f64,
}

/// What a run measured.
#[derive(Debug)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// Proxies started.
    pub proxies: u32,
    /// Delta xDS.
    pub delta: bool,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Counters and histograms.
    pub live: Live,
    /// The changes made.
    pub changes: Vec<ChangeRow>,
    /// The server's usage, when its pid was given.
    pub server: Option<Usage>,
    /// loadgen's own CPU and memory over the run, and its threads: a run
    /// whose client was saturated measured the client.
    pub client: Option<Usage>,
    /// Worker threads loadgen ran on.
    pub client_threads: usize,
}

/// A client busier than this share of its threads over its busiest second
/// may have held the server back.
pub const SATURATED: f64 = 0.85;

impl Report {
    /// Builds the report from the changes made and what the proxies saw.
    #[allow(clippy::too_many_arguments, reason = "the parts of one run, each named")]
    pub fn new(
        scenario: &str,
        proxies: u32,
        delta: bool,
        elapsed: Duration,
        run_start: Instant,
        live: Live,
        changes: &[std::sync::Arc<Change>],
        server: Option<Usage>,
    ) -> Report {
        let rows = changes
            .iter()
            .map(|c| {
                let stat = live.changes.get(c.id as usize).cloned().unwrap_or_default();
                let mut v = stat.samples.clone();
                v.sort_unstable();
                let q = |f: f64| {
                    if v.is_empty() {
                        return 0.0;
                    }
                    v[((v.len() as f64 * f).ceil() as usize).clamp(1, v.len()) - 1] as f64 / 1000.0
                };
                ChangeRow {
                    id: c.id,
                    at_s: c.at.saturating_duration_since(run_start).as_secs_f64(),
                    kind: c.kind,
                    resource: c.resource.clone(),
                    expected: stat.expected,
                    converged: v.len() as u32,
                    ms: [q(0.5), q(0.99), q(1.0)],
                    first_ms: v.first().map_or(0.0, |f| *f as f64 / 1000.0),
                }
            })
            .collect();
        Report {
            scenario: scenario.to_owned(),
            proxies,
            delta,
            elapsed,
            live,
            changes: rows,
            server,
            client: None,
            client_threads: 1,
        }
    }

    /// Changes a proxy could see but never ACKed (neither converged nor
    /// replaced by a newer change before the run ended).
    pub fn missed(&self) -> u64 {
        self.live.outstanding()
    }

    /// Per change every proxy that could see it took, its fan-out: from
    /// the first ACK to the last (the server's push to all of them, without
    /// the time it took to notice the change and publish it); the median
    /// and the largest, in ms.
    pub fn fanout_ms(&self) -> Option<(f64, f64)> {
        let mut v: Vec<f64> = self
            .changes
            .iter()
            .filter(|c| c.expected > 0 && c.converged == c.expected)
            .map(|c| c.ms[2] - c.first_ms)
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some((v[v.len() / 2], v[v.len() - 1]))
    }

    /// The JSON report.
    pub fn json(&self) -> serde_json::Value {
        let l = &self.live;
        let mut j = serde_json::json!({
            "scenario": self.scenario,
            "proxies": self.proxies,
            "delta": self.delta,
            "duration_s": self.elapsed.as_secs_f64(),
            "connected": l.connected,
            "synced": l.synced,
            "resynced": l.resynced,
            "connected_at_end": l.open_at_end,
            "sync_ms": quantiles_ms(&l.sync),
            "convergence_ms": quantiles_ms(&l.convergence),
            "changes": self.changes.len(),
            "missed": self.missed(),
            "superseded": l.superseded,
            "server_cpu_s": self.server.as_ref().map(Usage::cpu_s),
            "client_cpu_s": self.client_cpu_s(),
            "server_rss_bytes_max": self.server.as_ref().map(|u| u.rss_max),
            "server_rss_bytes_start": self.server.as_ref().and_then(|u| u.samples.first()).map(|s| s.2),
            "server_rss_bytes_end": self.server.as_ref().and_then(|u| u.samples.last()).map(|s| s.2),
            "bytes_received": l.bytes,
            "bytes_per_proxy": if self.proxies == 0 { 0 } else { l.bytes / u64::from(self.proxies) },
            "responses": l.responses,
            "nacks": l.nacks,
            "disconnects": l.disconnects,
            "errors": l.error_count,
            "connect_retries": l.connect_retries,
            "error_samples": l.errors,
            "per_change": self.changes.iter().map(|c| serde_json::json!({
                "id": c.id, "at_s": c.at_s, "kind": format!("{:?}", c.kind).to_lowercase(), "resource": c.resource,
                "expected": c.expected, "converged": c.converged, "first_ack_ms": c.first_ms, "last_ack_ms": c.ms[2],
                "p50_ms": c.ms[0], "p99_ms": c.ms[1], "max_ms": c.ms[2],
            })).collect::<Vec<_>>(),
        });
        j["bytes_per_change_response"] = serde_json::json!(l.change_bytes.checked_div(l.change_responses));
        j["fanout_ms"] = match self.fanout_ms() {
            Some((p50, max)) => serde_json::json!({"p50": p50, "max": max}),
            None => serde_json::Value::Null,
        };
        // The client's own load, kept apart (json! has a recursion limit).
        j["client_threads"] = serde_json::json!(self.client_threads);
        j["client_peak_busy"] = serde_json::json!(self.client_peak_busy());
        j["client_saturated"] = serde_json::json!(self.client_peak_busy() >= SATURATED);
        j["client_rss_bytes_max"] = serde_json::json!(self.client.as_ref().map(|u| u.rss_max));
        j["client_rss_bytes_per_proxy"] =
            serde_json::json!(self.client.as_ref().map(|u| u.rss_max / u64::from(self.proxies.max(1))));
        j["bytes_per_second_received"] = serde_json::json!(l.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9));
        j
    }

    /// CPU seconds loadgen itself used during the run.
    pub fn client_cpu_s(&self) -> f64 {
        self.client.as_ref().map_or(0.0, Usage::cpu_s)
    }

    /// The share of its threads loadgen kept busy over its busiest second.
    pub fn client_peak_busy(&self) -> f64 {
        self.client.as_ref().map_or(0.0, |u| u.peak_cpus(1.0) / self.client_threads.max(1) as f64)
    }

    /// The text summary.
    pub fn text(&self) -> String {
        let l = &self.live;
        let j = self.json();
        let q = |v: &serde_json::Value| {
            format!("p50 {} p90 {} p99 {} max {} ms (n={})", v["p50"], v["p90"], v["p99"], v["max"], v["count"])
        };
        let mut out = format!(
            "loadgen: {} {} ({}) in {:.1} s\n  proxies {}: connected {}, synced {} (resynced {}), disconnects {}\n  \
             sync {}\n",
            self.scenario,
            if self.delta { "delta" } else { "state of the world" },
            self.proxies,
            self.elapsed.as_secs_f64(),
            self.proxies,
            l.connected,
            l.synced,
            l.resynced,
            l.disconnects,
            q(&j["sync_ms"]),
        );
        if !self.changes.is_empty() {
            let _ = writeln!(
                out,
                "  convergence {}\n  changes {}, missed {}, superseded {}",
                q(&j["convergence_ms"]),
                self.changes.len(),
                self.missed(),
                l.superseded
            );
            if let Some((p50, max)) = self.fanout_ms() {
                let _ = writeln!(out, "  fan-out (first to last ACK of a change) median {p50:.1} ms, max {max:.1} ms");
            }
        }
        if !self.changes.is_empty() {
            // Per change: a stall (a change everyone got late, or nobody
            // got) shows at a glance.
            const ROWS: usize = 200;
            let _ = writeln!(
                out,
                "  {:>5} {:>8} {:>9} {:>10} {:>10}  resource",
                "id", "at s", "reached", "first ms", "last ms"
            );
            for c in self.changes.iter().take(ROWS) {
                let _ = writeln!(
                    out,
                    "  {:>5} {:>8.2} {:>9} {:>10.1} {:>10.1}  {}",
                    c.id,
                    c.at_s,
                    format!("{}/{}", c.converged, c.expected),
                    c.first_ms,
                    c.ms[2],
                    c.resource
                );
            }
            if self.changes.len() > ROWS {
                let _ = writeln!(out, "  ... {} more changes (--json has them all)", self.changes.len() - ROWS);
            }
        }
        let _ = writeln!(
            out,
            "  received {} responses, {} bytes ({} per proxy); {} NACKs; {} errors",
            l.responses, l.bytes, j["bytes_per_proxy"], l.nacks, l.error_count
        );
        if let Some(c) = &self.client {
            let busy = self.client_peak_busy();
            let _ = writeln!(
                out,
                "  loadgen: {:.2} CPU s on {} threads, busiest second {:.0}% of them{}; RSS peak {:.1} MiB ({:.1} KiB per proxy); absorbed {:.1} MB/s",
                self.client_cpu_s(),
                self.client_threads,
                busy * 100.0,
                if busy >= SATURATED {
                    " (SATURATED: these figures measure loadgen as much as the server)"
                } else {
                    ""
                },
                c.rss_max as f64 / 1048576.0,
                c.rss_max as f64 / 1024.0 / f64::from(self.proxies.max(1)),
                j["bytes_per_second_received"].as_f64().unwrap_or_default() / 1e6,
            );
        }
        if let Some(u) = &self.server {
            let mib = |b: u64| b as f64 / 1048576.0;
            let (first, last) = (u.samples.first().map_or(0, |s| s.2), u.samples.last().map_or(0, |s| s.2));
            let _ = writeln!(
                out,
                "  server: {:.2} CPU s (loadgen: {:.2} CPU s); RSS {:.1} MiB at the start, {:.1} MiB at the end, peak {:.1} MiB",
                u.cpu_s(),
                self.client_cpu_s(),
                mib(first),
                mib(last),
                mib(u.rss_max)
            );
        }
        out
    }

    /// A page with the histograms and timelines, for people who would
    /// rather look than read.
    pub fn html(&self) -> String {
        let mut out = String::from(
            "<!doctype html><meta charset=utf-8><title>loadgen</title>\
             <style>body{font:14px sans-serif;margin:2em;max-width:60em}svg{background:#fafafa;border:1px solid #ddd}\
             td,th{padding:2px 10px;text-align:right}pre{background:#f4f4f4;padding:1em}</style>",
        );
        let _ = write!(out, "<h1>loadgen: {}</h1><pre>{}</pre>", esc(&self.scenario), esc(&self.text()));
        out.push_str("<h2>Connect to synced</h2>");
        out.push_str(&histogram_svg(&self.live.sync));
        if !self.changes.is_empty() {
            out.push_str("<h2>Change to ACK (every proxy, every change)</h2>");
            out.push_str(&histogram_svg(&self.live.convergence));
            out.push_str("<h2>Convergence per change</h2><p>p50 (blue), p99 (orange), max (red), by when the change was made</p>");
            let pts: Vec<(f64, [f64; 3])> =
                self.changes.iter().filter(|c| c.converged > 0).map(|c| (c.at_s, c.ms)).collect();
            out.push_str(&timeline_svg(&pts));
        }
        if let Some(u) = &self.server {
            out.push_str("<h2>Server</h2><p>RSS (MiB, green) and CPU (cores busy, purple) over the run</p>");
            out.push_str(&usage_svg(u));
        }
        out
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

const EDGES_MS: [f64; 18] =
    [0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 1e4, 2e4, 6e4];

/// Bars of a latency histogram over logarithmic buckets.
fn histogram_svg(h: &Histogram<u64>) -> String {
    let (w, ht, pad) = (720.0, 220.0, 30.0);
    let mut counts = Vec::new();
    let mut lo = 0u64;
    for e in EDGES_MS {
        let hi = (e * 1000.0) as u64;
        counts.push(if hi > lo { h.count_between(lo, hi - 1) } else { 0 });
        lo = hi;
    }
    counts.push(h.count_between(lo, u64::MAX / 2));
    let max = counts.iter().copied().max().unwrap_or(0).max(1) as f64;
    let bw = (w - 2.0 * pad) / counts.len() as f64;
    let mut s = format!("<svg width={w} height={ht} xmlns='http://www.w3.org/2000/svg'>");
    for (i, c) in counts.iter().enumerate() {
        let bh = (*c as f64 / max) * (ht - 2.0 * pad);
        let x = pad + i as f64 * bw;
        let _ = write!(
            s,
            "<rect x={x:.1} y={:.1} width={:.1} height={bh:.1} fill='#4a7bd0'><title>{c}</title></rect>",
            ht - pad - bh,
            bw - 2.0
        );
        let label = if i < EDGES_MS.len() { format!("<{}", EDGES_MS[i]) } else { "more".into() };
        let _ =
            write!(s, "<text x={:.1} y={:.1} font-size=9 text-anchor=middle>{label}</text>", x + bw / 2.0, ht - 10.0);
        if *c > 0 {
            let _ = write!(
                s,
                "<text x={:.1} y={:.1} font-size=9 text-anchor=middle>{c}</text>",
                x + bw / 2.0,
                ht - pad - bh - 3.0
            );
        }
    }
    s.push_str("<text x=5 y=12 font-size=10>proxies per bucket (ms)</text></svg>");
    s
}

/// Points (time s, [p50, p99, max] ms) on a log-scale y axis.
fn timeline_svg(pts: &[(f64, [f64; 3])]) -> String {
    let (w, ht, pad) = (720.0, 260.0, 40.0);
    let tmax = pts.iter().map(|p| p.0).fold(1.0f64, f64::max);
    let ymax = pts.iter().map(|p| p.1[2]).fold(1.0f64, f64::max).log10().ceil();
    let ymin = pts.iter().map(|p| p.1[0]).fold(ymax, |a, b| a.min(b.max(0.01).log10())).floor();
    let span = (ymax - ymin).max(1.0);
    let y = |ms: f64| ht - pad - ((ms.max(0.01).log10() - ymin) / span) * (ht - 2.0 * pad);
    let x = |t: f64| pad + t / tmax * (w - 2.0 * pad);
    let mut s = format!("<svg width={w} height={ht} xmlns='http://www.w3.org/2000/svg'>");
    let mut d = ymin;
    while d <= ymax {
        let ms = 10f64.powf(d);
        let _ = write!(
            s,
            "<line x1={pad} x2={:.1} y1={yy:.1} y2={yy:.1} stroke='#ddd'/><text x=2 y={yy:.1} font-size=9>{ms} ms</text>",
            w - pad,
            yy = y(ms)
        );
        d += 1.0;
    }
    for (t, ms) in pts {
        for (v, color) in ms.iter().zip(["#4a7bd0", "#e08a1e", "#c0392b"]) {
            let _ = write!(s, "<circle cx={:.1} cy={:.1} r=2.5 fill='{color}'/>", x(*t), y(*v));
        }
    }
    let _ = write!(s, "<text x={:.1} y={:.1} font-size=10>{tmax:.0} s</text></svg>", w - pad, ht - 5.0);
    s
}

fn usage_svg(u: &Usage) -> String {
    let (w, ht, pad) = (720.0, 200.0, 30.0);
    let tmax = u.samples.last().map_or(1.0, |s| s.0).max(1.0);
    let rmax = u.samples.iter().map(|s| s.2).max().unwrap_or(1).max(1) as f64;
    let x = |t: f64| pad + t / tmax * (w - 2.0 * pad);
    let mut rss = String::new();
    let mut cpu = String::new();
    let mut prev: Option<(f64, f64)> = None;
    for (t, c, r) in &u.samples {
        let _ = write!(rss, "{:.1},{:.1} ", x(*t), ht - pad - (*r as f64 / rmax) * (ht - 2.0 * pad));
        if let Some((pt, pc)) = prev
            && t > &pt
        {
            let cores = ((c - pc) / (t - pt)).clamp(0.0, 2.0);
            let _ = write!(cpu, "{:.1},{:.1} ", x(*t), ht - pad - cores / 2.0 * (ht - 2.0 * pad));
        }
        prev = Some((*t, *c));
    }
    format!(
        "<svg width={w} height={ht} xmlns='http://www.w3.org/2000/svg'>\
         <polyline points='{rss}' fill=none stroke='#27ae60'/><polyline points='{cpu}' fill=none stroke='#8e44ad'/>\
         <text x=2 y=12 font-size=9>{:.0} MiB / 2 cores</text><text x={:.1} y={:.1} font-size=10>{tmax:.0} s</text></svg>",
        rmax / 1048576.0,
        w - pad,
        ht - 5.0
    )
}
