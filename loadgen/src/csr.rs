//! `loadgen csr`: N workloads ask the CA for their certificates at once,
//! as every istio-agent does when every pod restarts: each opens its own
//! TLS connection to `--secureGRPCAddr`, sends a CSR for its identity
//! (`spiffe://<trust domain>/ns/<ns>/sa/<sa>`) with a `JWT_RULE` token,
//! and waits for the chain. Keys, CSRs and tokens are made before the
//! clock starts, so the client's figure is the storm, not its setup.
//!
//! The tokens are signed by an ES256 issuer loadgen keeps in a file
//! (`loadgen issuer` writes it and the JWKS the server's `JWT_RULE`
//! points at).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use hdrhistogram::Histogram;
use istiod_proto::istio::v1::auth::{IstioCertificateRequest, IstioCertificateResponse};
use istiod_proto::prost::Message;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};

use crate::proxy::Tls;
use crate::stats::{proc_sample, quantiles_ms};

const PATH: &str = "/istio.v1.auth.IstioCertificateService/CreateCertificate";

/// An ES256 token issuer.
pub struct Issuer {
    key: EcdsaKeyPair,
    pkcs8: Vec<u8>,
    /// Its `iss`.
    pub issuer: String,
}

impl Issuer {
    /// A new key for `issuer`.
    pub fn generate(issuer: &str) -> Result<Issuer, String> {
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
            .map_err(|e| e.to_string())?;
        Self::from_pkcs8(pkcs8.as_ref().to_vec(), issuer)
    }

    fn from_pkcs8(pkcs8: Vec<u8>, issuer: &str) -> Result<Issuer, String> {
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &SystemRandom::new())
            .map_err(|e| format!("not an ECDSA P-256 PKCS#8 key: {e}"))?;
        Ok(Issuer { key, pkcs8, issuer: issuer.to_owned() })
    }

    /// Reads `dir/issuer.json` (what [`Issuer::save`] wrote).
    pub fn load(dir: &std::path::Path) -> Result<Issuer, String> {
        let path = dir.join("issuer.json");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let pkcs8 = URL_SAFE_NO_PAD
            .decode(v["pkcs8"].as_str().unwrap_or_default())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_pkcs8(pkcs8, v["issuer"].as_str().unwrap_or_default())
    }

    /// Writes `issuer.json` (the key: test material, 0600) and `jwks.json`.
    pub fn save(&self, dir: &std::path::Path) -> std::io::Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::create_dir_all(dir)?;
        let body = serde_json::json!({"issuer": self.issuer, "pkcs8": URL_SAFE_NO_PAD.encode(&self.pkcs8)});
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(dir.join("issuer.json"))?;
        f.write_all(body.to_string().as_bytes())?;
        std::fs::write(dir.join("jwks.json"), self.jwks())
    }

    /// The JWKS of the key.
    pub fn jwks(&self) -> String {
        let p = self.key.public_key().as_ref();
        let (x, y) = (URL_SAFE_NO_PAD.encode(&p[1..33]), URL_SAFE_NO_PAD.encode(&p[33..]));
        format!(r#"{{"keys":[{{"kty":"EC","kid":"loadgen","crv":"P-256","alg":"ES256","x":"{x}","y":"{y}"}}]}}"#)
    }

    /// A token for `system:serviceaccount:<ns>:<sa>`, audience `istio-ca`,
    /// valid an hour.
    pub fn token(&self, ns: &str, sa: &str) -> Result<String, String> {
        let exp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs() + 3600;
        let claims = serde_json::json!({
            "iss": self.issuer, "sub": format!("system:serviceaccount:{ns}:{sa}"), "aud": ["istio-ca"], "exp": exp,
        });
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"ES256","kid":"loadgen"}"#),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = self.key.sign(&SystemRandom::new(), signed.as_bytes()).map_err(|e| e.to_string())?;
        Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref())))
    }
}

/// How the storm runs.
pub struct Options {
    /// The CA's TLS address.
    pub server: std::net::SocketAddr,
    /// TLS to it.
    pub tls: Tls,
    /// Workloads.
    pub workloads: u32,
    /// Of them at once.
    pub concurrency: usize,
    /// Spread over this many namespaces (`ns-<i>`, service account `sa-<j>`).
    pub namespaces: u32,
    /// The mesh's trust domain.
    pub trust_domain: String,
    /// The token issuer.
    pub issuer: Issuer,
    /// Upper bound of one workload's request (connect, TLS and the call).
    pub duration: Duration,
    /// The server's pid, for its CPU time.
    pub server_pid: Option<u32>,
}

/// What a storm came to.
pub struct Report {
    /// Workloads.
    pub workloads: u32,
    /// Certificates received (each a chain of at least two, its leaf naming
    /// the workload).
    pub ok: u64,
    /// Failures by reason.
    pub errors: BTreeMap<String, u64>,
    /// From the first connect to the last answer.
    pub seconds: f64,
    /// Per workload: connect, TLS and the call (µs).
    pub latency: Histogram<u64>,
    /// Per workload: the call only, once connected (µs).
    pub call: Histogram<u64>,
    /// Seconds spent making keys, CSRs and tokens before the clock.
    pub prepare_seconds: f64,
    /// The server's CPU seconds during the storm.
    pub server_cpu_s: Option<f64>,
    /// loadgen's own CPU seconds during the storm.
    pub client_cpu_s: f64,
}

impl Report {
    /// Certificates per second.
    pub fn per_second(&self) -> f64 {
        if self.seconds > 0.0 { self.ok as f64 / self.seconds } else { 0.0 }
    }

    /// As JSON, like `loadgen run`'s.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "scenario": "csr",
            "workloads": self.workloads,
            "ok": self.ok,
            "failed": self.errors.values().sum::<u64>(),
            "errors": self.errors,
            "seconds": self.seconds,
            "certs_per_second": self.per_second(),
            "latency_ms": quantiles_ms(&self.latency),
            "call_latency_ms": quantiles_ms(&self.call),
            "prepare_seconds": self.prepare_seconds,
            "server_cpu_s": self.server_cpu_s,
            "client_cpu_s": self.client_cpu_s,
        })
    }

    /// A few lines for a terminal.
    pub fn text(&self) -> String {
        let q = |h: &Histogram<u64>, f: f64| if h.is_empty() { 0.0 } else { h.value_at_quantile(f) as f64 / 1000.0 };
        format!(
            "csr storm: {} workloads, {} certificates in {:.2}s ({:.0}/s), {} failed\n\
             latency (connect+TLS+call) p50 {:.1} ms p99 {:.1} ms max {:.1} ms; call only p50 {:.1} ms p99 {:.1} ms\n\
             cpu: server {} s, loadgen {:.2} s (setup before the clock {:.2} s)\n",
            self.workloads,
            self.ok,
            self.seconds,
            self.per_second(),
            self.errors.values().sum::<u64>(),
            q(&self.latency, 0.5),
            q(&self.latency, 0.99),
            self.latency.max() as f64 / 1000.0,
            q(&self.call, 0.5),
            q(&self.call, 0.99),
            self.server_cpu_s.map_or("?".into(), |c| format!("{c:.2}")),
            self.client_cpu_s,
            self.prepare_seconds,
        )
    }
}

/// One workload's request, made before the clock starts.
struct Workload {
    token: String,
    body: Bytes,
    identity: String,
}

fn prepare(o: &Options) -> Result<Vec<Workload>, String> {
    (0..o.workloads)
        .map(|i| {
            let (ns, sa) = (format!("ns-{}", i % o.namespaces.max(1)), format!("sa-{i}"));
            let identity = format!("spiffe://{}/ns/{ns}/sa/{sa}", o.trust_domain);
            let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
            let mut params = rcgen::CertificateParams::default();
            params.subject_alt_names =
                vec![rcgen::SanType::URI(identity.clone().try_into().map_err(|e| format!("{e}"))?)];
            let csr = params.serialize_request(&key).and_then(|c| c.pem()).map_err(|e| e.to_string())?;
            let msg = IstioCertificateRequest { csr, validity_duration: 3600, metadata: None }.encode_to_vec();
            let mut body = BytesMut::with_capacity(5 + msg.len());
            body.put_u8(0);
            body.put_u32(msg.len() as u32);
            body.put_slice(&msg);
            Ok(Workload { token: o.issuer.token(&ns, &sa)?, body: body.freeze(), identity })
        })
        .collect()
}

/// One workload's certificate: (whole latency, call latency).
async fn one(o: &Options, w: &Workload) -> Result<(Duration, Duration), String> {
    let start = Instant::now();
    let tcp = tokio::net::TcpStream::connect(o.server).await.map_err(|e| format!("connect: {}", e.kind()))?;
    let _ = tcp.set_nodelay(true);
    let io = o.tls.connector.connect(o.tls.server_name.clone(), tcp).await.map_err(|e| format!("TLS: {e}"))?;
    let (client, conn) = h2::client::handshake(io).await.map_err(|e| format!("HTTP/2: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut client = client.ready().await.map_err(|e| format!("HTTP/2: {e}"))?;
    let call_start = Instant::now();
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("https://{}{PATH}", o.server))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", format!("Bearer {}", w.token))
        .body(())
        .map_err(|e| e.to_string())?;
    let (resp, mut send) = client.send_request(req, false).map_err(|e| format!("stream: {e}"))?;
    send.send_data(w.body.clone(), true).map_err(|e| format!("send: {e}"))?;
    let resp = resp.await.map_err(|e| format!("response: {e}"))?;
    let status = |h: &http::HeaderMap| h.get("grpc-status").and_then(|s| s.to_str().ok()).map(str::to_owned);
    if let Some(s) = status(resp.headers()).filter(|s| s != "0") {
        return Err(format!("grpc-status {s}"));
    }
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| format!("body: {e}"))?;
        let _ = body.flow_control().release_capacity(chunk.len());
        buf.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.map_err(|e| format!("trailers: {e}"))?;
    match trailers.as_ref().and_then(status) {
        Some(s) if s == "0" => {}
        Some(s) => return Err(format!("grpc-status {s}")),
        None => return Err("no grpc-status".into()),
    }
    let took = (start.elapsed(), call_start.elapsed());
    if buf.len() < 5 {
        return Err("no message".into());
    }
    buf.advance(5);
    let chain = IstioCertificateResponse::decode(buf.freeze()).map_err(|e| format!("response: {e}"))?.cert_chain;
    if chain.len() < 2 || !leaf_names(&chain[0], &w.identity) {
        return Err("a chain that does not name the workload".into());
    }
    Ok(took)
}

/// Whether the leaf carries exactly `identity` as a URI SAN: the DER
/// GeneralName `[6] IA5String` with its length, so `.../sa-1` does not
/// match a leaf for `.../sa-10`.
fn leaf_names(pem: &str, identity: &str) -> bool {
    let Ok(len) = u8::try_from(identity.len()) else { return false };
    if len >= 0x80 {
        return false;
    }
    let mut want = vec![0x86, len];
    want.extend_from_slice(identity.as_bytes());
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).is_ok_and(|der| der.windows(want.len()).any(|w| w == want))
}

/// Runs the storm.
pub async fn run(o: Options) -> Result<Report, String> {
    let t = Instant::now();
    let workloads = prepare(&o)?;
    let prepare_seconds = t.elapsed().as_secs_f64();
    let (o, workloads) = (Arc::new(o), Arc::new(workloads));
    let server_cpu_at_start = o.server_pid.and_then(proc_sample).map(|s| s.0);
    let own_cpu_at_start = proc_sample(std::process::id()).map_or(0.0, |s| s.0);
    let permits = Arc::new(tokio::sync::Semaphore::new(o.concurrency.max(1)));
    let results = Arc::new(Mutex::new(Vec::with_capacity(workloads.len())));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(workloads.len());
    for i in 0..workloads.len() {
        let (o, workloads, permits, results) = (o.clone(), workloads.clone(), permits.clone(), results.clone());
        tasks.push(tokio::spawn(async move {
            let Ok(_permit) = permits.acquire_owned().await else { return };
            let r = match tokio::time::timeout(o.duration, one(&o, &workloads[i])).await {
                Ok(r) => r,
                Err(_) => Err("timed out".into()),
            };
            if let Ok(mut v) = results.lock() {
                v.push(r);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let new_hist = || Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("constant bounds are valid");
    let mut report = Report {
        workloads: o.workloads,
        ok: 0,
        errors: BTreeMap::new(),
        seconds,
        latency: new_hist(),
        call: new_hist(),
        prepare_seconds,
        server_cpu_s: o.server_pid.and_then(proc_sample).zip(server_cpu_at_start).map(|(now, then)| now.0 - then),
        client_cpu_s: proc_sample(std::process::id()).map_or(0.0, |s| s.0) - own_cpu_at_start,
    };
    let results = std::mem::take(&mut *results.lock().map_err(|_| "results poisoned")?);
    for r in results {
        match r {
            Ok((whole, call)) => {
                report.ok += 1;
                let _ = report.latency.record((whole.as_micros() as u64).max(1));
                let _ = report.call.record((call.as_micros() as u64).max(1));
            }
            Err(e) => *report.errors.entry(e).or_default() += 1,
        }
    }
    Ok(report)
}
