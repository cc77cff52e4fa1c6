//! Where the CA's root lives and how it is kept (`security/pkg/pki/ca/ca.go`,
//! `selfsignedcarootcertrotator.go`, `pilot/pkg/bootstrap/istio_ca.go`):
//!
//! - plugged-in files (`ROOT_CA_DIR`), watched by [`super::watch_plugged`];
//! - in Kubernetes, the self-signed root in the `istio-ca-secret` Secret of
//!   istiod's namespace: read first, created only when absent (a replica
//!   that loses the create race reads the winner's), so every replica
//!   signs with the same root;
//! - without Kubernetes, a directory (`ISTIOD_RS_SELF_SIGNED_CA_DIR`), or
//!   memory.
//!
//! A self-signed root is checked every
//! `CITADEL_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL`: in the last
//! `CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE` of its life a
//! new certificate for the same key is written back (a replica whose
//! update loses to another's reads that one next round); a replica whose
//! root differs from the stored one reloads it. The replaced root stays in
//! the trust bundle until it expires. istiod's serving certificate is
//! reissued when the CA changes and before it expires ([`serve_tls`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use istiod_pki::{Ca, OffsetDateTime, Settings};
use serde_json::{Value, json};

use super::CaServer;
use istiod_kubewatch::kapi::{Api, Write};
use istiod_xds::server::tls::Reloadable;

/// The Secret istiod keeps its self-signed root in.
pub const CA_SECRET: &str = "istio-ca-secret";
/// Its type.
const CA_SECRET_TYPE: &str = "istio.io/ca-root";

/// Where the root is kept.
#[derive(Clone)]
pub enum RootStore {
    /// Plugged-in certificates (`ROOT_CA_DIR`): rotated by whoever writes
    /// them.
    Plugged(PathBuf),
    /// A self-signed root in `istio-ca-secret` of `namespace`.
    Secret {
        /// The API.
        api: Api,
        /// istiod's namespace.
        namespace: String,
    },
    /// A self-signed root in a directory.
    Dir(PathBuf),
    /// A self-signed root in memory only.
    Memory,
}

impl RootStore {
    /// The store `config` asks for: plugged-in files win, then the
    /// directory, then the Secret (with a Kubernetes client), then memory.
    pub fn of(c: &crate::CaConfig, namespace: &str, kube: Option<&kube::Client>) -> RootStore {
        if c.root_ca_dir.join("ca-key.pem").exists() {
            return RootStore::Plugged(c.root_ca_dir.clone());
        }
        match (&c.self_signed_dir, kube) {
            (Some(dir), _) => RootStore::Dir(dir.clone()),
            (None, Some(client)) => {
                RootStore::Secret { api: Api::new(client.clone()), namespace: namespace.to_owned() }
            }
            (None, None) => RootStore::Memory,
        }
    }

    /// The self-signed root (certificate, key PEM) as stored now, or
    /// `None` when there is none yet. Not for plugged-in or memory stores.
    async fn read(&self) -> Result<Option<(String, String, Option<Value>)>, String> {
        match self {
            RootStore::Secret { api, namespace } => {
                let Some(secret) = api.get(&secret_path(namespace)).await? else { return Ok(None) };
                let field = |k: &str| -> Result<String, String> {
                    let b64 = secret["data"][k].as_str().unwrap_or_default();
                    let bytes = STANDARD.decode(b64).map_err(|e| format!("{CA_SECRET} {k}: {e}"))?;
                    String::from_utf8(bytes).map_err(|e| format!("{CA_SECRET} {k}: {e}"))
                };
                Ok(Some((field("ca-cert.pem")?, field("ca-key.pem")?, Some(secret))))
            }
            RootStore::Dir(dir) => {
                let (c, k) = (dir.join("ca-cert.pem"), dir.join("ca-key.pem"));
                if !(c.exists() && k.exists()) {
                    return Ok(None);
                }
                let read =
                    |p: &std::path::Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
                Ok(Some((read(&c)?, read(&k)?, None)))
            }
            RootStore::Plugged(_) | RootStore::Memory => Ok(None),
        }
    }

    /// Writes a renewed certificate for the stored key: `Ok(false)` when
    /// another replica changed the Secret first.
    async fn write_renewed(&self, cert: &str, key: &str, secret: Option<Value>) -> Result<bool, String> {
        match self {
            RootStore::Secret { api, namespace } => {
                let mut secret = secret.ok_or("no Secret to update")?;
                secret["data"]["ca-cert.pem"] = json!(STANDARD.encode(cert));
                secret["data"]["ca-key.pem"] = json!(STANDARD.encode(key));
                secret["data"]["root-cert.pem"] = json!(STANDARD.encode(cert));
                Ok(matches!(api.replace(&secret_path(namespace), &secret).await?, Write::Done(_)))
            }
            RootStore::Dir(dir) => {
                let path = dir.join("ca-cert.pem");
                replace_file(&path, cert).map_err(|e| format!("{}: {e}", path.display()))?;
                Ok(true)
            }
            RootStore::Plugged(_) | RootStore::Memory => Ok(false),
        }
    }
}

/// Writes `path` whole: aside, then renamed over it, so a reader sees the
/// old contents or the new, never half.
fn replace_file(path: &std::path::Path, contents: &str) -> std::io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

fn secret_path(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/secrets/{CA_SECRET}")
}

/// How long a start waits for the API server to give the Secret.
const LOAD_DEADLINE: Duration = Duration::from_secs(30);

/// istiod's `NewSelfSignedIstioCAOptions`: the CA of `istio-ca-secret`,
/// read, or created when absent. A create that loses to another replica
/// (409) reads the winner's; an unreachable API server is retried for
/// [`LOAD_DEADLINE`].
pub async fn load_secret_ca(api: &Api, namespace: &str, settings: &Settings) -> Result<Ca, String> {
    let store = RootStore::Secret { api: api.clone(), namespace: namespace.to_owned() };
    let start = tokio::time::Instant::now();
    let mut backoff = Duration::from_millis(200);
    // Made only when the Secret is absent, once, off this thread (an RSA
    // key takes a while).
    let mut fresh: Option<(String, String)> = None;
    loop {
        let attempt = async {
            if let Some((cert, key, _)) = store.read().await? {
                tracing::info!(target: "ca", "Load signing key and cert from existing secret {namespace}/{CA_SECRET}");
                let ca = Ca::self_signed_from_pem(&cert, &key, &[], settings.clone(), CA_SECRET)
                    .map_err(|e| format!("{CA_SECRET}: {e}"))?;
                return Ok(Some(ca));
            }
            tracing::info!(target: "ca", "CASecret {CA_SECRET} not found, will create one");
            let (cert, key) = match &fresh {
                Some(made) => made.clone(),
                None => {
                    let settings = settings.clone();
                    let made = tokio::task::spawn_blocking(move || Ca::generate_root_pem(&settings))
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| e.to_string())?;
                    fresh.insert(made).clone()
                }
            };
            let secret = json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": CA_SECRET, "namespace": namespace},
                "type": CA_SECRET_TYPE,
                "data": {
                    "ca-cert.pem": STANDARD.encode(&cert),
                    "ca-key.pem": STANDARD.encode(&key),
                    "root-cert.pem": STANDARD.encode(&cert),
                    "cert-chain.pem": "",
                    "key.pem": "",
                },
            });
            match api.create(&format!("/api/v1/namespaces/{namespace}/secrets"), &secret).await? {
                Write::Done(_) => {
                    let ca = Ca::self_signed_from_pem(&cert, &key, &[], settings.clone(), CA_SECRET)
                        .map_err(|e| e.to_string())?;
                    tracing::info!(target: "ca", "created {namespace}/{CA_SECRET} with a new self-signed root");
                    Ok(Some(ca))
                }
                // Another replica created it meanwhile: read theirs.
                Write::Conflict => Ok(None),
            }
        };
        let attempt: Result<Option<Ca>, String> = attempt.await;
        match attempt {
            Ok(Some(ca)) => return Ok(ca),
            // Lost the create race: read the winner's (soon, not at once).
            Ok(None) if start.elapsed() < LOAD_DEADLINE => tokio::time::sleep(Duration::from_millis(50)).await,
            Ok(None) => return Err(format!("{namespace}/{CA_SECRET} is created and gone again")),
            Err(e) if start.elapsed() < LOAD_DEADLINE => {
                tracing::warn!(target: "ca", error = %e, "cannot load {namespace}/{CA_SECRET}; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(format!("cannot load or create {namespace}/{CA_SECRET}: {e}")),
        }
    }
}

/// The roots of `bundle` still worth trusting next to a new one: those
/// not expired and not `new_cert` itself.
fn older_roots(bundle: &str, new_cert: &str) -> Vec<String> {
    let now = OffsetDateTime::now_utc();
    let new = istiod_pki::not_afters(new_cert).into_iter().next().map(|(c, _)| c);
    istiod_pki::not_afters(bundle)
        .into_iter()
        .filter(|(c, until)| *until > now && Some(c) != new.as_ref())
        .map(|(c, _)| c)
        .collect()
}

/// What a check of the root came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    /// Nothing more to do this round.
    Done,
    /// Another replica wrote first: read again now.
    Again,
}

/// One check of the self-signed root: renewed when due, reloaded when
/// another replica renewed it.
pub async fn check_root(server: &CaServer, store: &RootStore, grace_percent: u32) -> Result<Checked, String> {
    let Some((cert, key, secret)) = store.read().await? else { return Ok(Checked::Done) };
    let current = server.ca();
    let settings = current.settings().clone();
    let now = OffsetDateTime::now_utc();
    if istiod_pki::root_due(&cert, grace_percent, now) {
        tracing::info!(target: "ca", "Refresh root certificate, root cert is about to expire");
        let renewed = Ca::renew_root_pem(&cert, &key, &settings).map_err(|e| e.to_string())?;
        if !store.write_renewed(&renewed, &key, secret).await? {
            tracing::info!(target: "ca", "another replica renewed the root first; reading it");
            return Ok(Checked::Again);
        }
        let older = older_roots(current.root_pem(), &renewed);
        let ca =
            Ca::self_signed_from_pem(&renewed, &key, &older, settings, "renewed root").map_err(|e| e.to_string())?;
        server.set_ca(ca);
        tracing::info!(target: "ca", kept = older.len(), "Root certificate rotation is completed successfully.");
        return Ok(Checked::Done);
    }
    if cert.trim() != current.cert_pem().trim() {
        tracing::warn!(target: "ca", "CA cert in KeyCertBundle does not match CA cert in the store. Start to reload root cert into KeyCertBundle");
        let older = older_roots(current.root_pem(), &cert);
        let ca = Ca::self_signed_from_pem(&cert, &key, &older, settings, "stored root").map_err(|e| e.to_string())?;
        server.set_ca(ca);
    }
    Ok(Checked::Done)
}

/// Checks the self-signed root every `every` (istiod's root cert rotator;
/// zero disables it, as in istiod), starting after a random part of the
/// interval so replicas started together do not check together
/// (`CITADEL_ENABLE_JITTER_FOR_ROOT_CERT_ROTATOR`).
pub async fn rotate_roots(server: Arc<CaServer>, store: RootStore, every: Duration, grace_percent: u32, jitter: bool) {
    if every.is_zero() {
        tracing::info!(target: "ca", "CITADEL_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL is 0: the root is not rotated");
        return;
    }
    if jitter {
        tokio::time::sleep(every.mul_f64((istiod_kubewatch::leader::random_u64() % 1000) as f64 / 1000.0)).await;
    }
    loop {
        tokio::time::sleep(every).await;
        for _ in 0..3 {
            match check_root(&server, &store, grace_percent).await {
                Ok(Checked::Done) => break,
                Ok(Checked::Again) => continue,
                Err(e) => {
                    tracing::warn!(target: "ca", error = %e, "root certificate check failed; the CA in force stays");
                    break;
                }
            }
        }
    }
}

/// How istiod's serving certificate is made.
pub struct ServingCert {
    /// Its DNS names.
    pub names: Vec<String>,
    /// Its lifetime.
    pub ttl: Duration,
    /// Certificate files given instead (`--tlsCertFile`, `--tlsKeyFile`):
    /// only the client roots follow the CA then.
    pub files: Option<(Vec<u8>, Vec<u8>)>,
    /// `PILOT_CERT_PROVIDER=k8s.io/<signer>`: signed by that Kubernetes
    /// signer through the API (the API, the signer, the lifetime asked:
    /// istiod's `SelfSignedCACertTTL`).
    pub kubernetes: Option<(Api, String, Duration)>,
}

impl ServingCert {
    /// A certificate and key (PEM) for the listener, from the files or
    /// issued by `ca`.
    pub fn issue(&self, ca: &Ca) -> Result<(Vec<u8>, Vec<u8>), String> {
        if let Some((c, k)) = &self.files {
            return Ok((c.clone(), k.clone()));
        }
        let (chain, key) = ca.issue_server(&self.names, self.ttl).map_err(|e| e.to_string())?;
        Ok((chain.into_bytes(), key.into_bytes()))
    }

    /// The TLS configurations for `server`'s CA, of one new certificate:
    /// :15012's (ALPN h2, client certificates verified against the CA's
    /// trust bundle and a Kubernetes RA's root) and the webhooks' (ALPN h2
    /// and http/1.1).
    pub fn tls_configs(&self, server: &CaServer) -> Result<(Arc<ServerConfig>, Arc<ServerConfig>), String> {
        let (cert, key) = self.issue(&server.ca())?;
        Self::configs(&cert, &key, Some(server.client_roots().as_bytes()))
    }

    /// [`ServingCert::tls_configs`], or under `PILOT_CERT_PROVIDER=k8s.io/<signer>`
    /// a certificate of the Kubernetes signer (istiod's
    /// `initDNSCertsK8SRA`), its root the mesh configuration's for the
    /// signer (required, in istiod's words); also says when the
    /// certificate should be renewed.
    pub async fn issue_configs(
        &self,
        server: &CaServer,
    ) -> Result<(Arc<ServerConfig>, Arc<ServerConfig>, Duration), String> {
        let renew_after = |ttl: Duration| ttl.mul_f64(0.8).max(Duration::from_secs(1));
        let Some((api, signer, lifetime)) = self.kubernetes.as_ref().filter(|_| self.files.is_none()) else {
            let (grpc, webhook) = self.tls_configs(server)?;
            return Ok((grpc, webhook, renew_after(self.ttl)));
        };
        let ext = server.external.as_ref().ok_or("no Kubernetes RA")?;
        let has_any = !ext.mesh_roots.read().unwrap_or_else(|e| e.into_inner()).is_empty();
        let Some(root) = ext.mesh_root(signer) else {
            return Err(match has_any {
                false => "no caCertificates defined in mesh config".to_owned(),
                true => format!("failed to find root cert for signer: {signer} in mesh config"),
            });
        };
        let (chain, key) = super::k8s_signer::sign_serving(
            api,
            signer,
            &self.names,
            lifetime.as_secs() as i64,
            super::k8s_signer::CERT_WAIT,
        )
        .await
        .map_err(|e| format!("failed generating key and cert by kubernetes: {e}"))?;
        let (grpc, webhook) = Self::configs(chain.as_bytes(), key.as_bytes(), Some(root.as_bytes()))?;
        // istiod's RotateDNSCertForK8sCA: at half the certificate's life.
        let left = istiod_pki::not_afters(&chain)
            .first()
            .map(|(_, t)| (*t - OffsetDateTime::now_utc()).unsigned_abs())
            .unwrap_or(*lifetime);
        Ok((grpc, webhook, left.mul_f64(0.5).max(Duration::from_secs(1))))
    }

    /// [`ServingCert::tls_configs`] of the files given (no CA: no client
    /// certificates).
    pub fn tls_configs_from_files(&self) -> Result<(Arc<ServerConfig>, Arc<ServerConfig>), String> {
        let (cert, key) = self.files.as_ref().ok_or("no --tlsCertFile/--tlsKeyFile")?;
        Self::configs(cert, key, None)
    }

    fn configs(
        cert: &[u8],
        key: &[u8],
        roots: Option<&[u8]>,
    ) -> Result<(Arc<ServerConfig>, Arc<ServerConfig>), String> {
        use istiod_xds::server::tls::server_config_alpn;
        let grpc = server_config_alpn(cert, key, roots, &[b"h2"]).map_err(|e| e.to_string())?;
        let webhook = server_config_alpn(cert, key, None, &[b"h2", b"http/1.1"]).map_err(|e| e.to_string())?;
        Ok((grpc, webhook))
    }
}

type ServerConfig = istiod_xds::server::tls::ServerConfig;

/// Keeps the TLS configurations of :15012 and the webhooks current: a
/// new certificate (and client roots) when the CA changes, and a new certificate when 80% of
/// the last one's life has passed.
pub async fn serve_tls(
    server: Arc<CaServer>,
    cert: ServingCert,
    grpc: Option<Reloadable>,
    webhook: Option<Reloadable>,
    first_renewal: Option<Duration>,
) {
    let mut changed = server.changed.subscribe();
    // When the certificate issued at start is due (else 80% of its life).
    let mut wait = first_renewal.unwrap_or_else(|| cert.ttl.mul_f64(0.8)).max(Duration::from_secs(1));
    loop {
        let ca_changed = tokio::select! {
            r = changed.changed() => {
                if r.is_err() {
                    return;
                }
                true
            }
            _ = tokio::time::sleep(wait) => false,
        };
        if !ca_changed && cert.files.is_some() {
            wait = Duration::from_secs(3600);
            continue;
        }
        match cert.issue_configs(&server).await {
            Ok((grpc_cfg, webhook_cfg, renew)) => {
                if let Some(t) = &grpc {
                    t.set(grpc_cfg);
                }
                if let Some(t) = &webhook {
                    t.set(webhook_cfg);
                }
                wait = renew;
                let why = if ca_changed { "the CA changed" } else { "renewal" };
                tracing::info!(target: "ca", names = ?cert.names, why, "istiod's serving certificate reissued");
            }
            Err(e) => {
                tracing::warn!(target: "ca", error = %e, "cannot reissue istiod's serving certificate; retrying in 10s");
                wait = Duration::from_secs(10);
            }
        }
    }
}

/// Without Kubernetes: the trust bundle is written to `root-cert.pem`
/// in `dir` (next to the self-signed CA), and again when it changes.
pub async fn write_root_file(server: Arc<CaServer>, dir: PathBuf) {
    let mut changed = server.changed.subscribe();
    loop {
        let path = dir.join("root-cert.pem");
        let root = server.ca().root_pem().to_owned();
        let same = std::fs::read_to_string(&path).is_ok_and(|r| r == root);
        if !same {
            match replace_file(&path, &root) {
                Ok(()) => tracing::info!(target: "ca", path = %path.display(), "root certificate written"),
                Err(e) => {
                    tracing::warn!(target: "ca", path = %path.display(), error = %e, "cannot write the root certificate")
                }
            }
        }
        if changed.changed().await.is_err() {
            return;
        }
    }
}
