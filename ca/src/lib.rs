//! istiod's CA server and its authenticators: CSR signing on the serving cores, bearer tokens (JWT_RULE, TokenReview), xDS callers, the root's store and rotation, the root ConfigMaps.
//!
//! The server is istiod's `security/pkg/server/ca/server.go`:
//! `istio.v1.auth.IstioCertificateService/CreateCertificate` on the
//! serving cores, over TLS only (`--secureGRPCAddr`). The caller is
//! authenticated by a bearer token ([`jwt`], istiod's `JWT_RULE`); the
//! leaf names the caller's SPIFFE identity, `spiffe://<trust domain>/ns/<namespace>/sa/<account>`,
//! and nothing else; refusals carry istiod's status codes and messages.
//! The key set of `JWT_RULE` is fetched by the control thread
//! ([`refresh_keys`]) and read by the cores.

pub mod jwks;
pub mod jwt;
pub mod k8s_signer;
pub mod namespaces;
pub mod store;
pub mod tokenreview;
pub mod xds_auth;

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use istiod_pki::{Ca, SignError};
use istiod_proto::istio::v1::auth::{IstioCertificateRequest, IstioCertificateResponse};
use istiod_proto::prost::Message;
use istiod_xds::grpc::{Call, Code, GrpcConnection, Service, Status};
use istiod_xds::server::{Registry, ServiceFactory};

/// The method's path.
pub const CREATE_CERTIFICATE: &str = "/istio.v1.auth.IstioCertificateService/CreateCertificate";

/// The paths the CA serves (for [`istiod_xds::server::MuxFactory`]).
pub const PATHS: &[&str] = &[CREATE_CERTIFICATE];

/// `JWT_RULE` with the key set last fetched for it.
#[derive(Debug)]
pub struct JwtAuthenticator {
    /// The rule.
    pub rule: jwt::JwtRule,
    /// Its key set (empty until the first fetch).
    pub keys: RwLock<Arc<jwt::KeySet>>,
}

/// istiod's CA counters (`security/pkg/server/ca/monitoring.go`).
#[derive(Debug, Default)]
pub struct CaMetrics {
    csr: AtomicU64,
    authn_error: AtomicU64,
    success: AtomicU64,
    /// `citadel_server_csr_sign_err_count` by istiod's error types:
    /// CSR_ERROR, TTL_ERROR, CERT_GEN_ERROR.
    sign_errors: [AtomicU64; 3],
}

const SIGN_ERROR_TYPES: [&str; 3] = ["CSR_ERROR", "TTL_ERROR", "CERT_GEN_ERROR"];

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A pod, as node authorization reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEntry {
    /// Its uid.
    pub uid: String,
    /// Its service account.
    pub service_account: String,
    /// Its node.
    pub node: String,
}

/// The pods of the cluster, as the control thread last read them (istiod's
/// pod informer and its node index, `node_auth.go`).
pub trait PodDirectory: Send + Sync + std::fmt::Debug {
    /// Pod `namespace/name`.
    fn pod(&self, namespace: &str, name: &str) -> Option<PodEntry>;
    /// Whether a pod of service account `namespace/service_account` runs
    /// on `node`.
    fn runs_on(&self, node: &str, namespace: &str, service_account: &str) -> bool;
}

/// The metadata key of a request made for another identity (a node proxy
/// asking for a pod's certificate).
pub const IMPERSONATED_IDENTITY: &str = "ImpersonatedIdentity";

/// The metadata key naming the signer a request asks for (istiod's
/// `security.CertSigner`, the proxy's `ISTIO_META_CERT_SIGNER`).
pub const CERT_SIGNER: &str = "CertSigner";

/// What every core's CA service shares.
#[derive(Debug)]
pub struct CaServer {
    /// The CA: replaced whole when plugged-in certificates change
    /// ([`watch_plugged`]).
    ca: RwLock<Arc<Ca>>,
    /// Identities are `spiffe://<trust_domain>/...`.
    pub trust_domain: String,
    /// `JWT_RULE`, if set.
    pub jwt: Option<Arc<JwtAuthenticator>>,
    /// The control thread's TokenReview queue, once a Kubernetes client
    /// exists (istiod's Kubernetes JWT authenticator).
    pub reviewer: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<tokenreview::Review>>,
    /// Counters for `/metrics`.
    pub metrics: CaMetrics,
    /// `CA_TRUSTED_NODE_ACCOUNTS`: who may ask for another identity.
    pub trusted_node_accounts: Vec<(String, String)>,
    /// The pods node authorization checks callers against, once the
    /// control thread reads them (Kubernetes only).
    pub pods: std::sync::OnceLock<Arc<dyn PodDirectory>>,
    /// Whether this CA signs (`ENABLE_CA_SERVER`). With the CA disabled
    /// and `XDS_AUTH` on, a server that does not sign still holds the
    /// token authenticators for xDS (as istiod does).
    pub signing: bool,
    /// Bumped whenever the CA in force is replaced: istiod's serving
    /// certificate, the TLS client roots and the root ConfigMaps follow.
    pub changed: tokio::sync::watch::Sender<u64>,
    /// `EXTERNAL_CA=ISTIOD_RA_KUBERNETES_API`: workload certificates are
    /// signed through the Kubernetes CSR API (the CA above still checks
    /// requests and signs istiod's own certificate, as istiod's does).
    pub external: Option<External>,
    /// `PILOT_CERT_PROVIDER=k8s.io/<signer>` with the Kubernetes RA: the
    /// signer of istiod's own certificate. istiod has no CA of its own
    /// then: the root it distributes and trusts is the one the mesh
    /// configuration's `caCertificates` names for that signer.
    pub k8s_signing: Option<String>,
}

/// istiod's Kubernetes RA.
#[derive(Debug)]
pub struct External {
    /// `K8S_SIGNER`: the CSRs' `signerName`.
    pub signer: String,
    /// `CERT_SIGNER_DOMAIN`: a request naming a `CertSigner` is signed by
    /// `<domain>/<CertSigner>`.
    pub domain: String,
    /// The signer's root, the last element of every answer; empty when
    /// `CERT_SIGNER_DOMAIN` is set and `./etc/external-ca-cert` holds none
    /// (istiod's RA then finds each answer's root per signer).
    pub root: String,
    /// The mesh configuration's `caCertificates` PEMs by the signers they
    /// name (istiod's `SetCACertificatesFromMeshConfig`), kept current by
    /// the control thread.
    pub mesh_roots: RwLock<Vec<(Vec<String>, String)>>,
    /// The control thread's queue, once a Kubernetes client exists.
    pub queue: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<k8s_signer::Request>>,
}

impl External {
    /// Takes the mesh configuration's `caCertificates` (those with a PEM
    /// and signers).
    pub fn set_mesh_roots(&self, certs: &[istiod_mesh::meshconfig::CertificateData]) {
        let roots = certs
            .iter()
            .filter(|c| !c.pem.is_empty() && !c.cert_signers.is_empty())
            .map(|c| (c.cert_signers.clone(), c.pem.clone()))
            .collect();
        *self.mesh_roots.write().unwrap_or_else(|e| e.into_inner()) = roots;
    }

    /// istiod's `GetRootCertFromMeshConfig(signer)`.
    fn mesh_root(&self, signer: &str) -> Option<String> {
        let roots = self.mesh_roots.read().unwrap_or_else(|e| e.into_inner());
        roots.iter().find(|(signers, _)| signers.iter().any(|s| s == signer)).map(|(_, pem)| pem.clone())
    }
}

/// A request's metadata string under `key`, none when absent or empty.
fn metadata_string(req: &IstioCertificateRequest, key: &str) -> Option<String> {
    req.metadata.as_ref().and_then(|m| m.fields.get(key)).and_then(|v| match &v.kind {
        Some(istiod_proto::prost_types::value::Kind::StringValue(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    })
}

/// A signing's outcome: now, or once the Kubernetes signer answers.
pub enum Answer {
    /// Signed.
    Ready(IstioCertificateResponse),
    /// The Kubernetes RA's answer (the signed certificate PEM) comes on
    /// this channel, for the request's `CertSigner` (none: `K8S_SIGNER`);
    /// [`CaServer::signed_externally`] makes the response.
    Later(async_channel::Receiver<Result<String, String>>, Option<String>),
}

/// istiod's answer to a caller it could not authenticate.
fn unauthenticated(server: &CaServer) -> Status {
    bump(&server.metrics.authn_error);
    Status::new(Code::Unauthenticated, "request authenticate failure")
}

/// What authenticating a caller gave.
pub enum Authn {
    /// Its identities.
    Ids(Vec<String>),
    /// The API server reviews its token; `(namespace, service account)`
    /// or the refusal comes on this channel.
    Review(async_channel::Receiver<Result<tokenreview::Account, tokenreview::Refusal>>),
    /// Not authenticated, and why (logged, never answered: istiod answers
    /// every authentication failure alike).
    Refused(String),
}

/// What a TokenReview's answer means for the caller.
pub enum Reviewed {
    /// The reviewed service account's identity.
    Ids(Vec<String>),
    /// Refused, and why: each protocol answers it as its authentication
    /// failures (the reason is logged, never sent).
    Denied(String),
    /// The API server could not be asked: UNAVAILABLE, nothing cached,
    /// the agent retries.
    Unavailable(Status),
}

impl CaServer {
    /// The meaning of a review's `answer` (an [`Authn::Review`] channel's).
    pub fn reviewed(
        &self,
        answer: Result<Result<tokenreview::Account, tokenreview::Refusal>, async_channel::RecvError>,
        peer: Option<std::net::SocketAddr>,
    ) -> Reviewed {
        match answer {
            Ok(Ok(a)) => Reviewed::Ids(vec![self.identity(&a.namespace, &a.service_account)]),
            Ok(Err(tokenreview::Refusal::Denied(reason))) => Reviewed::Denied(reason),
            Ok(Err(tokenreview::Refusal::Unavailable(reason))) => {
                tracing::warn!(target: "ca", ?peer, %reason, "cannot review the token");
                Reviewed::Unavailable(Status::new(Code::Unavailable, "the token could not be reviewed; retry"))
            }
            Err(async_channel::RecvError) => {
                tracing::warn!(target: "ca", ?peer, "the token reviewer dropped the request");
                Reviewed::Unavailable(Status::new(Code::Unavailable, "the token reviewer is gone; retry"))
            }
        }
    }

    /// The caller's identities by `JWT_RULE`, or why not.
    fn authenticate_jwt(&self, bearer: Option<&str>) -> Result<Vec<String>, String> {
        let token = bearer.ok_or("no bearer token in the authorization header")?;
        let auth = self.jwt.as_ref().ok_or("JWT_RULE is not set")?;
        let keys = auth.keys.read().unwrap_or_else(|e| e.into_inner()).clone();
        if keys.is_empty() {
            return Err(format!("the key set of issuer {:?} has not been fetched", auth.rule.issuer));
        }
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
        let (ns, sa) = jwt::verify(token, &auth.rule, &keys, now)?;
        Ok(vec![format!("spiffe://{}/ns/{ns}/sa/{sa}", self.trust_domain)])
    }

    /// Authenticates a caller as istiod's authenticators do, in its order
    /// (shared by the CA and xDS on :15012): the client certificate the
    /// TLS layer verified (a workload renewing: issued by the CA in force
    /// and still valid; the handshake used the roots of the start), then
    /// a `JWT_RULE` token, then a TokenReview of the token by the API
    /// server (Kubernetes only).
    pub fn authenticate(&self, info: &istiod_xds::grpc::ConnInfo, bearer: Option<&str>) -> Authn {
        let by_cert = info
            .peer_certificate
            .as_deref()
            .filter(|leaf| {
                self.ca().issued(leaf)
                    || self
                        .external
                        .as_ref()
                        .is_some_and(|e| !e.root.is_empty() && istiod_pki::ca::issued_by(leaf, &e.root))
            })
            .map(istiod_pki::uri_sans)
            .filter(|ids| !ids.is_empty());
        if let Some(ids) = by_cert {
            return Authn::Ids(ids);
        }
        let reason = match self.authenticate_jwt(bearer) {
            Ok(ids) => return Authn::Ids(ids),
            Err(reason) => reason,
        };
        match (bearer, self.reviewer.get()) {
            (Some(token), Some(reviews)) => {
                let (reply, answer) = async_channel::bounded(1);
                match reviews.send(tokenreview::Review { token: token.to_owned(), reply }) {
                    Ok(()) => Authn::Review(answer),
                    Err(_) => Authn::Refused("the token reviewer is gone".into()),
                }
            }
            _ => Authn::Refused(reason),
        }
    }

    /// The root distributed to workloads (the `istio-ca-root-cert`
    /// ConfigMaps, the webhooks' caBundle): the CA's, or under
    /// [`CaServer::k8s_signing`] the mesh configuration's root for the
    /// signer (empty while it names none).
    pub fn distributed_root(&self) -> String {
        match (&self.k8s_signing, &self.external) {
            (Some(signer), Some(ext)) => ext.mesh_root(signer).unwrap_or_default(),
            _ => self.ca().root_pem().to_owned(),
        }
    }

    /// The roots client certificates on :15012 are verified with
    /// (istiod's `createPeerCertVerifier`): the Kubernetes RA's signer's,
    /// then the CA's; under [`CaServer::k8s_signing`] the mesh
    /// configuration's root for the signer alone.
    pub fn client_roots(&self) -> String {
        if self.k8s_signing.is_some() {
            return self.distributed_root();
        }
        let mut roots = self.external.as_ref().map(|e| e.root.clone()).unwrap_or_default();
        // (Empty without an RA root: the CA's alone.)
        if !roots.is_empty() && !roots.ends_with('\n') {
            roots.push('\n');
        }
        roots.push_str(self.ca().root_pem());
        roots
    }

    /// The roots this server answers with, as istiod's trust bundle takes
    /// them (`SourceIstioCA`, `SourceIstioRA`): the CA's root bundle, and
    /// a Kubernetes RA's root.
    pub fn trust_anchors(&self) -> Vec<String> {
        // (No CA of istiod's own under k8s signing.)
        let mut out: Vec<String> = match self.k8s_signing {
            Some(_) => Vec::new(),
            None => vec![self.ca().root_pem().to_owned()],
        };
        out.extend(self.external.as_ref().map(|e| e.root.clone()).filter(|r| !r.is_empty()));
        out
    }

    /// The CA in force.
    pub fn ca(&self) -> Arc<Ca> {
        self.ca.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `ca` in force and tells whoever follows it.
    pub fn set_ca(&self, ca: Ca) {
        *self.ca.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(ca);
        self.changed.send_modify(|n| *n += 1);
    }

    /// The SPIFFE identity of a service account.
    pub(crate) fn identity(&self, ns: &str, sa: &str) -> String {
        format!("spiffe://{}/ns/{ns}/sa/{sa}", self.trust_domain)
    }

    /// Signs `req` for a caller with `ids` (who the API server says it is,
    /// `account`, when a TokenReview authenticated it): for itself, or,
    /// with `ImpersonatedIdentity`, for a pod on its node when node
    /// authorization allows it (istiod's `CreateCertificate`).
    fn sign_checked(
        &self,
        ids: &[String],
        account: Option<&tokenreview::Account>,
        peer: Option<std::net::SocketAddr>,
        req: &IstioCertificateRequest,
    ) -> Result<Answer, Status> {
        let impersonated = metadata_string(req, IMPERSONATED_IDENTITY);
        let Some(target) = impersonated else { return self.sign_for(ids, peer, req) };
        if let Err(reason) = self.authorize_impersonation(account, &target) {
            bump(&self.metrics.authn_error);
            tracing::warn!(target: "ca", ?peer, identity = %target, %reason, "impersonation failed");
            return Err(Status::new(Code::Unauthenticated, "request impersonation authentication failure"));
        }
        self.sign_for(&[target], peer, req)
    }

    /// istiod's `NodeAuthorizer.authenticateImpersonation`: the caller is
    /// a trusted node account, its pod is the one the token names (uid and
    /// service account), and a pod of the wanted identity runs on that
    /// pod's node.
    fn authorize_impersonation(&self, account: Option<&tokenreview::Account>, target: &str) -> Result<(), String> {
        if self.trusted_node_accounts.is_empty() {
            return Err(
                "impersonation not allowed, as node authorizer (CA_TRUSTED_NODE_ACCOUNTS) is not configured".into()
            );
        }
        let a = account.ok_or("the caller has no Kubernetes identity (a reviewed token)")?;
        if !self.trusted_node_accounts.iter().any(|(ns, sa)| *ns == a.namespace && *sa == a.service_account) {
            return Err(format!("caller ({}/{}) is not allowed to impersonate", a.namespace, a.service_account));
        }
        let (ns, sa) =
            spiffe_ns_sa(target).ok_or_else(|| format!("failed to validate impersonated identity {target}"))?;
        let (pod, uid) = a.pod.as_ref().ok_or("the caller's token names no pod")?;
        let pods = self.pods.get().ok_or("no pods are known (Kubernetes only)")?;
        let found = pods.pod(&a.namespace, pod).ok_or_else(|| format!("pod {}/{pod} not found", a.namespace))?;
        if found.uid != *uid {
            return Err(format!("pod found, but UID does not match: {} vs {uid}", found.uid));
        }
        if found.service_account != a.service_account {
            return Err(format!(
                "pod found, but ServiceAccount does not match: {} vs {}",
                found.service_account, a.service_account
            ));
        }
        if !pods.runs_on(&found.node, ns, sa) {
            return Err(format!("no instances of \"{ns}/{sa}\" found on node \"{}\"", found.node));
        }
        Ok(())
    }

    /// Signs `req` for a caller with `ids`: here, or checked here and
    /// signed by the Kubernetes RA.
    fn sign_for(
        &self,
        ids: &[String],
        peer: Option<std::net::SocketAddr>,
        req: &IstioCertificateRequest,
    ) -> Result<Answer, Status> {
        let refused = |e: SignError| {
            tracing::warn!(target: "ca", ?peer, identity = %ids.join(","), error = %e, "CSR refused");
            let (code, kind) = match e {
                SignError::Identity { .. } => (Code::PermissionDenied, 0),
                SignError::Csr(_) => (Code::InvalidArgument, 0),
                SignError::Ttl { .. } => (Code::InvalidArgument, 1),
                SignError::Issue(_) => (Code::Internal, 2),
            };
            bump(&self.metrics.sign_errors[kind]);
            Status::new(code, format!("CSR signing error ({e})"))
        };
        if let Some(ext) = &self.external {
            // istiod's RA `preSign`: a CSR that does not parse, names
            // another identity or is not as the agent makes it is a
            // CSRError (InvalidArgument), in its words.
            self.ca().check_request(req.csr.as_bytes(), ids, req.validity_duration).map_err(|e| match e {
                SignError::Identity { .. } | SignError::Csr(_) => {
                    tracing::warn!(target: "ca", ?peer, identity = %ids.join(","), error = %e, "CSR refused");
                    bump(&self.metrics.sign_errors[0]);
                    Status::new(Code::InvalidArgument, "CSR signing error (unable to validate SAN Identities in CSR)")
                }
                e => refused(e),
            })?;
            // The request's `CertSigner` (istiod's `kubernetesSign`): its
            // signer is `<CERT_SIGNER_DOMAIN>/<CertSigner>`.
            let cert_signer = metadata_string(req, CERT_SIGNER);
            let signer = match &cert_signer {
                Some(s) if ext.domain.is_empty() => {
                    bump(&self.metrics.sign_errors[2]);
                    let e = format!("certSignerDomain is required for signer {s}");
                    tracing::warn!(target: "ca", ?peer, error = %e, "CSR refused");
                    return Err(Status::new(Code::Internal, format!("CSR signing error ({e})")));
                }
                Some(s) => Some(format!("{}/{s}", ext.domain)),
                None => None,
            };
            let Some(queue) = ext.queue.get() else {
                bump(&self.metrics.sign_errors[2]);
                return Err(Status::new(Code::Unavailable, "the Kubernetes signer is not reachable yet"));
            };
            let (signed, answer) = async_channel::bounded(1);
            // The requested lifetime, none when the request names none
            // (chiron's submitCSR: the signer chooses).
            let lifetime_secs = Some(req.validity_duration).filter(|s| *s > 0);
            let request =
                k8s_signer::Request { csr: req.csr.clone(), lifetime_secs, signer: signer.clone(), reply: signed };
            if queue.send(request).is_err() {
                bump(&self.metrics.sign_errors[2]);
                return Err(Status::new(Code::Unavailable, "the Kubernetes signer is gone"));
            }
            return Ok(Answer::Later(answer, signer));
        }
        let chain = self.ca().sign(req.csr.as_bytes(), ids, req.validity_duration).map_err(refused)?;
        tracing::debug!(target: "ca", identity = %ids.join(","), "issued a workload certificate");
        bump(&self.metrics.success);
        Ok(Answer::Ready(IstioCertificateResponse { cert_chain: chain }))
    }
}

impl CaServer {
    /// The response to a request the Kubernetes RA signed (or refused):
    /// its certificates, then the signer's root. For a request's own
    /// signer (`by`) without an RA root, istiod's `SignWithCertChain`: the
    /// root the mesh configuration names for the signer, else the chain's
    /// own, the chain verified against it and the root appended when the
    /// chain does not end with it.
    pub fn signed_externally(
        &self,
        got: Result<Result<String, String>, async_channel::RecvError>,
        by: Option<&str>,
    ) -> Result<IstioCertificateResponse, Status> {
        let ra_root = self.external.as_ref().map(|e| e.root.as_str()).unwrap_or_default();
        match got {
            Ok(Ok(pem)) => {
                let mut chain = istiod_pki::pem_blocks(&pem, "CERTIFICATE");
                if let (Some(signer), Some(ext), true) = (by, &self.external, ra_root.is_empty()) {
                    let from_chain = istiod_pki::ca::chain_root(&pem);
                    let Some(root) = ext.mesh_root(signer).or_else(|| from_chain.clone()) else {
                        bump(&self.metrics.sign_errors[0]);
                        let e = "failed to find root cert from either signed cert-chain or mesh config";
                        return Err(Status::new(Code::InvalidArgument, format!("CSR signing error ({e})")));
                    };
                    if let Err(e) = istiod_pki::ca::verify_chain(&pem, &root) {
                        bump(&self.metrics.sign_errors[0]);
                        let e = format!("root cert from signed cert-chain is invalid ({e})");
                        return Err(Status::new(Code::InvalidArgument, format!("CSR signing error ({e})")));
                    }
                    if Some(&root) != from_chain.as_ref() {
                        chain.extend(istiod_pki::pem_blocks(&root, "CERTIFICATE"));
                    }
                }
                if !ra_root.is_empty() {
                    chain.push(ra_root.to_owned());
                }
                tracing::debug!(target: "ca", "issued a workload certificate through the Kubernetes signer");
                bump(&self.metrics.success);
                Ok(IstioCertificateResponse { cert_chain: chain })
            }
            Ok(Err(e)) => {
                bump(&self.metrics.sign_errors[2]);
                Err(Status::new(Code::Internal, format!("CSR signing error ({e})")))
            }
            Err(_) => {
                bump(&self.metrics.sign_errors[2]);
                Err(Status::new(Code::Unavailable, "the Kubernetes signer is gone"))
            }
        }
    }
}

/// Answers a call that waited (for a TokenReview, for the Kubernetes
/// signer), if its connection is still there.
fn answer_later(
    registry: &Registry,
    calls: &Calls,
    key: (u64, u32),
    outcome: Result<IstioCertificateResponse, Status>,
) {
    calls.borrow_mut().remove(&key);
    let Some(h) = registry.get(key.0) else { return };
    {
        let mut c = h.conn.borrow_mut();
        let stream = key.1;
        match outcome {
            // A small answer to a call that waited: sent whatever the
            // queue holds.
            Ok(resp) => match c.send_admitted(stream, Bytes::from(resp.encode_to_vec())) {
                Ok(()) => c.finish(stream, &Status::ok()),
                Err(e) => c.finish(stream, &Status::new(Code::Internal, e.to_string())),
            },
            Err(status) => c.finish(stream, &status),
        }
    }
    h.wake();
}

/// A call in progress: the token it came with, whether it was answered
/// or waits for a TokenReview.
struct Pending {
    bearer: Option<String>,
    answered: bool,
    waiting: bool,
}

type Calls = Rc<std::cell::RefCell<HashMap<(u64, u32), Pending>>>;

/// One core's CA service.
pub struct CaService {
    server: Option<Arc<CaServer>>,
    registry: Rc<Registry>,
    calls: Calls,
}

/// The namespace and service account of an identity
/// `spiffe://<trust domain>/ns/<ns>/sa/<sa>` (istiod's
/// `spiffe.ParseIdentity`).
pub fn spiffe_ns_sa(id: &str) -> Option<(&str, &str)> {
    let parts: Vec<&str> = id.strip_prefix("spiffe://")?.split('/').collect();
    match parts[..] {
        [_, "ns", ns, "sa", sa] => Some((ns, sa)),
        _ => None,
    }
}

/// The token of an `authorization: Bearer <token>` header (istiod's
/// `ExtractBearerToken`).
pub(crate) fn bearer(call: &Call) -> Option<String> {
    let (_, v) = call.request.headers.iter().find(|(name, _)| name.eq_ignore_ascii_case(b"authorization"))?;
    let v = std::str::from_utf8(v).ok()?;
    v.strip_prefix("Bearer ").map(str::to_owned)
}

impl CaService {
    /// Answers call `key` once `outcome` is ready, from a task of this
    /// core. glommio runs a spawned task at once, up to its first wait,
    /// from inside the caller (the connection and the call table are
    /// borrowed): the task yields first, so that what follows runs from
    /// the executor, never from there.
    fn answer_when(
        &self,
        key: (u64, u32),
        outcome: impl std::future::Future<Output = Result<IstioCertificateResponse, Status>> + 'static,
    ) {
        let (registry, calls) = (self.registry.clone(), self.calls.clone());
        glommio::spawn_local(async move {
            futures_lite::future::yield_now().await;
            let outcome = outcome.await;
            answer_later(&registry, &calls, key, outcome);
        })
        .detach();
    }
}

impl Service for CaService {
    fn open(&mut self, conn: &mut GrpcConnection, call: &Call) -> Result<(), Status> {
        if &call.request.path[..] != CREATE_CERTIFICATE.as_bytes() {
            return Err(Status::new(Code::Unimplemented, "unknown method"));
        }
        if self.server.is_none() {
            return Err(Status::new(Code::Unimplemented, "the CA is not served (ENABLE_CA_SERVER=false)"));
        }
        if !conn.info.secure {
            // A token in the clear would be given away: istiod serves the
            // CA on its TLS port only.
            return Err(Status::new(Code::Unavailable, "the CA is served over TLS only (--secureGRPCAddr)"));
        }
        let pending = Pending { bearer: bearer(call), answered: false, waiting: false };
        self.calls.borrow_mut().insert((conn.info.id, call.stream), pending);
        Ok(())
    }

    fn message(&mut self, conn: &mut GrpcConnection, stream: u32, msg: Bytes) -> Result<(), Status> {
        let Some(server) = self.server.clone() else {
            return Err(Status::new(Code::Unimplemented, "the CA is not served"));
        };
        let key = (conn.info.id, stream);
        let mut calls = self.calls.borrow_mut();
        let Some(p) = calls.get_mut(&key) else { return Ok(()) };
        if p.answered || p.waiting {
            return Err(Status::new(Code::InvalidArgument, "CreateCertificate takes one request"));
        }
        bump(&server.metrics.csr);
        let req = IstioCertificateRequest::decode(msg)
            .map_err(|e| Status::new(Code::InvalidArgument, format!("invalid IstioCertificateRequest: {e}")))?;
        let peer = conn.info.peer;
        let ids = match server.authenticate(&conn.info, p.bearer.as_deref()) {
            Authn::Ids(ids) => ids,
            // Not a JWT_RULE token: the API server reviews it; the answer
            // comes back to this core.
            Authn::Review(answer) => {
                p.waiting = true;
                drop(calls);
                self.answer_when(key, async move {
                    let answer = answer.recv().await;
                    let account = answer.as_ref().ok().and_then(|a| a.as_ref().ok()).cloned();
                    match server.reviewed(answer, peer) {
                        Reviewed::Ids(ids) => match server.sign_checked(&ids, account.as_ref(), peer, &req) {
                            Ok(Answer::Ready(resp)) => Ok(resp),
                            Ok(Answer::Later(signed, by)) => {
                                server.signed_externally(signed.recv().await, by.as_deref())
                            }
                            Err(status) => Err(status),
                        },
                        Reviewed::Denied(reason) => {
                            tracing::warn!(target: "ca", ?peer, %reason, "request authenticate failure");
                            Err(unauthenticated(&server))
                        }
                        Reviewed::Unavailable(status) => Err(status),
                    }
                });
                return Ok(());
            }
            Authn::Refused(reason) => {
                tracing::warn!(target: "ca", ?peer, %reason, "request authenticate failure");
                return Err(unauthenticated(&server));
            }
        };
        let resp = match server.sign_checked(&ids, None, peer, &req)? {
            Answer::Ready(resp) => resp,
            Answer::Later(signed, by) => {
                p.waiting = true;
                drop(calls);
                self.answer_when(key, async move { server.signed_externally(signed.recv().await, by.as_deref()) });
                return Ok(());
            }
        };
        p.answered = true;
        // A small answer, bounded: sent even when ADS pushes fill the queue.
        conn.send_admitted(stream, Bytes::from(resp.encode_to_vec()))
            .map_err(|e| Status::new(Code::Internal, e.to_string()))
    }

    fn half_close(&mut self, conn: &mut GrpcConnection, stream: u32) {
        let key = (conn.info.id, stream);
        let mut calls = self.calls.borrow_mut();
        match calls.get(&key) {
            // The review's task answers.
            Some(p) if p.waiting => {}
            Some(p) => {
                let status = if p.answered {
                    Status::ok()
                } else {
                    Status::new(Code::InvalidArgument, "CreateCertificate needs a request")
                };
                calls.remove(&key);
                conn.finish(stream, &status);
            }
            None => {}
        }
    }

    fn closed(&mut self, conn: &mut GrpcConnection, stream: u32) {
        self.calls.borrow_mut().remove(&(conn.info.id, stream));
    }
}

impl CaServer {
    /// Adds the CA's series, with istiod's names.
    pub fn collect_metrics(&self, out: &mut istiod_xds::metrics::Exposition) {
        let m = &self.metrics;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64;
        let mut counter = |name: &str, help: &str, v: f64| out.counter(name, help, [(vec![], v)]);
        counter("citadel_server_csr_count", "The number of CSRs received by Citadel server.", get(&m.csr));
        counter(
            "citadel_server_authentication_failure_count",
            "The number of authentication failures.",
            get(&m.authn_error),
        );
        counter(
            "citadel_server_success_cert_issuance_count",
            "The number of certificates issuances that have succeeded.",
            get(&m.success),
        );
        counter(
            "citadel_server_csr_parsing_err_count",
            "The number of errors occurred when parsing the CSR.",
            get(&m.sign_errors[0]),
        );
        out.counter(
            "citadel_server_csr_sign_err_count",
            "The number of errors occurred when signing the CSR.",
            SIGN_ERROR_TYPES.iter().zip(&m.sign_errors).map(|(t, c)| (istiod_xds::metrics::label("error", *t), get(c))),
        );
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let mut gauge = |name: &str, help: &str, v: i64| out.gauge(name, help, [(vec![], v as f64)]);
        let ca = self.ca();
        if let Some(root) = ca.root_not_after() {
            let t = root.unix_timestamp();
            gauge(
                "citadel_server_root_cert_expiry_timestamp",
                "The unix timestamp, in seconds, when the root cert will expire.",
                t,
            );
            gauge(
                "citadel_server_root_cert_expiry_seconds",
                "The time remaining, in seconds, before the root cert will expire. A negative value indicates the cert is expired.",
                t - now,
            );
        }
        let t = ca.not_after().unix_timestamp();
        gauge(
            "citadel_server_cert_chain_expiry_timestamp",
            "The unix timestamp, in seconds, when Istio generated cert chain will expire.",
            t,
        );
        gauge(
            "citadel_server_cert_chain_expiry_seconds",
            "The time remaining, in seconds, before the Istio Generated cert chain will expire. A negative value indicates the cert is expired.",
            t - now,
        );
    }
}

/// Makes each core's [`CaService`] (`None`: the CA is disabled, calls
/// are UNIMPLEMENTED).
pub struct CaFactory(pub Option<Arc<CaServer>>);

impl ServiceFactory for CaFactory {
    type Service = CaService;

    fn make(&self, _core: usize, registry: Rc<Registry>) -> CaService {
        CaService { server: self.0.clone(), registry, calls: Calls::default() }
    }
}

/// Certificate lifetimes (pilot/pkg/bootstrap/istio_ca.go).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaConfig {
    /// `ENABLE_CA_SERVER` (true): serve `IstioCertificateService`.
    pub enabled: bool,
    /// `DEFAULT_WORKLOAD_CERT_TTL` (24h): TTL when a CSR asks for none.
    pub default_workload_cert_ttl: Duration,
    /// `MAX_WORKLOAD_CERT_TTL` (2160h = 90 days): longest TTL issued.
    pub max_workload_cert_ttl: Duration,
    /// `CITADEL_SELF_SIGNED_CA_CERT_TTL` (87600h = 10 years): the
    /// self-signed root's lifetime.
    pub self_signed_ca_cert_ttl: Duration,
    /// `CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE`: when set, a new self-signed
    /// root gets an RSA key of this size (istiod's choice); unset, ECDSA
    /// P-256.
    pub self_signed_rsa_bits: Option<usize>,
    /// `ROOT_CA_DIR` (`./etc/cacerts`): plugged-in CA certificates
    /// (`ca-cert.pem`, `ca-key.pem`, `root-cert.pem`, `cert-chain.pem`).
    pub root_ca_dir: std::path::PathBuf,
    /// `ISTIOD_RS_SELF_SIGNED_CA_DIR`: where the self-signed root is kept
    /// when nothing is plugged in (istiod keeps it in the `istio-ca-secret`
    /// Secret); unset, it lives in memory and a restart makes a new one.
    pub self_signed_dir: Option<std::path::PathBuf>,
    /// `JWT_RULE`: the issuer whose tokens authenticate CSRs, its key set
    /// and audiences (JSON, as istiod reads it).
    pub jwt_rule: Option<jwt::JwtRule>,
    /// `TOKEN_AUDIENCES` (`istio-ca`, comma-separated): the audiences a
    /// Kubernetes token is reviewed for.
    pub token_audiences: Vec<String>,
    /// `ISTIOD_RS_PLUGGED_CA_CHECK_INTERVAL` (5s): how often `ROOT_CA_DIR`
    /// is checked for rotated certificates.
    pub plugged_check_interval: Duration,
    /// `CITADEL_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL` (1h): how often the
    /// self-signed root is checked for rotation.
    pub root_check_interval: Duration,
    /// `CITADEL_ENABLE_JITTER_FOR_ROOT_CERT_ROTATOR` (true): the first
    /// check waits a random part of the interval.
    pub root_check_jitter: bool,
    /// `CITADEL_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE` (20): the
    /// root is renewed in the last this-many percent of its lifetime.
    pub root_grace_percentile: u32,
    /// `XDS_AUTH` (true): xDS over TLS (`--secureGRPCAddr`) needs a token
    /// or a client certificate of this CA (pilot/pkg/features).
    pub xds_auth: bool,
    /// `XDS_AUTH_PLAINTEXT` (false): authenticate plaintext xDS too.
    pub xds_auth_plaintext: bool,
    /// `PILOT_ENABLE_XDS_IDENTITY_CHECK` (true): an authenticated proxy
    /// may only claim a node in its identity's namespace (and service
    /// account, when the node names one).
    pub xds_identity_check: bool,
    /// `CA_TRUSTED_NODE_ACCOUNTS` (`ns/sa,...`): the service accounts
    /// (ztunnels) that may ask for the identities of pods on their node.
    pub trusted_node_accounts: Vec<(String, String)>,
    /// `EXTERNAL_CA=ISTIOD_RA_KUBERNETES_API`: `K8S_SIGNER`, who signs
    /// workload certificates through the Kubernetes CSR API.
    pub external_signer: Option<String>,
    /// `CERT_SIGNER_DOMAIN`: the domain of the signers requests name.
    pub cert_signer_domain: String,
    /// `PILOT_CERT_PROVIDER=k8s.io/<signer>` (with `external_signer`): the
    /// signer of istiod's own certificate; istiod makes no CA then.
    pub k8s_serving_signer: Option<String>,
}

/// The CA of `config`, from `store` (plugged-in certificates from
/// `ROOT_CA_DIR`, else a self-signed root in the `istio-ca-secret`
/// Secret, in `ISTIOD_RS_SELF_SIGNED_CA_DIR`, or in memory); `None` when
/// `ENABLE_CA_SERVER` and `XDS_AUTH` are both false. With the CA disabled
/// and `XDS_AUTH` on, a server that does not sign (it only authenticates).
pub async fn from_config(
    c: &CaConfig,
    trust_domain: &str,
    store: &store::RootStore,
) -> Result<Option<Arc<CaServer>>, String> {
    if !c.enabled && !c.xds_auth {
        return Ok(None);
    }
    let settings = istiod_pki::Settings {
        trust_domain: trust_domain.to_owned(),
        default_ttl: c.default_workload_cert_ttl,
        max_ttl: c.max_workload_cert_ttl,
        self_signed_ttl: c.self_signed_ca_cert_ttl,
        rsa_key_bits: c.self_signed_rsa_bits,
    };
    // istiod's maybeCreateCA: no CA of its own when Kubernetes signs
    // (`isK8SSigning`); one is held in memory for its settings alone,
    // never written, never distributed.
    let k8s_signing = c.k8s_serving_signer.clone().filter(|_| c.enabled && c.external_signer.is_some());
    let store = if c.enabled && k8s_signing.is_none() { store } else { &store::RootStore::Memory };
    let ca = match store {
        store::RootStore::Plugged(dir) => {
            let ca = Ca::plugged(dir, settings).map_err(|e| e.to_string())?;
            tracing::info!(target: "ca", dir = %dir.display(), "using the plugged-in CA certificates");
            ca.ok_or_else(|| format!("{}: ca-key.pem is gone", dir.display()))?
        }
        store::RootStore::Dir(dir) => Ca::self_signed_in(dir, settings).map_err(|e| e.to_string())?,
        store::RootStore::Secret { api, namespace } => store::load_secret_ca(api, namespace, &settings).await?,
        store::RootStore::Memory if !c.enabled || k8s_signing.is_some() => {
            // Never signs: only its token authenticators are used.
            Ca::generate(istiod_pki::Settings { rsa_key_bits: None, ..settings }).map_err(|e| e.to_string())?
        }
        store::RootStore::Memory => {
            tracing::warn!(target: "ca", "self-signed root held in memory: a restart makes a new one; set ISTIOD_RS_SELF_SIGNED_CA_DIR to keep it");
            Ca::generate(settings).map_err(|e| e.to_string())?
        }
    };
    // istiod's createIstioRA: the signer's root is read at start.
    let external = match &c.external_signer {
        Some(signer) if c.enabled => Some(External {
            signer: signer.clone(),
            domain: c.cert_signer_domain.clone(),
            root: k8s_signer::root(
                std::path::Path::new(k8s_signer::EXTERNAL_CA_ROOT),
                std::path::Path::new(k8s_signer::SERVICE_ACCOUNT_CA),
                !c.cert_signer_domain.is_empty(),
            )
            .map_err(|e| format!("failed to create RA: {e}"))?,
            mesh_roots: RwLock::default(),
            queue: Default::default(),
        }),
        _ => None,
    };
    let jwt = c.jwt_rule.clone().map(|rule| Arc::new(JwtAuthenticator { rule, keys: RwLock::default() }));
    if jwt.is_none() {
        tracing::info!(target: "ca", "JWT_RULE is not set: callers are authenticated by TokenReview (Kubernetes) only");
    }
    Ok(Some(Arc::new(CaServer {
        ca: RwLock::new(Arc::new(ca)),
        trust_domain: trust_domain.to_owned(),
        jwt,
        reviewer: Default::default(),
        metrics: CaMetrics::default(),
        signing: c.enabled,
        changed: tokio::sync::watch::Sender::new(0),
        trusted_node_accounts: c.trusted_node_accounts.clone(),
        pods: Default::default(),
        external,
        k8s_signing,
    })))
}

/// Keeps `auth`'s key set fetched: at once, then every `refresh`; failed
/// fetches are retried after a second, doubling to a minute, and the last
/// good set stays meanwhile.
pub async fn refresh_keys(auth: Arc<JwtAuthenticator>, refresh: Duration) {
    let fetcher = crate::jwks::Fetcher::new();
    let key = (auth.rule.issuer.clone(), auth.rule.jwks_uri.clone());
    let mut backoff = Duration::from_secs(1);
    loop {
        let wait = match fetcher.key_set(&key).await.and_then(|body| jwt::KeySet::parse(&body)) {
            Ok(keys) => {
                tracing::info!(target: "ca", issuer = %key.0, keys = keys.len(), "JWT_RULE key set fetched");
                *auth.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
                backoff = Duration::from_secs(1);
                refresh
            }
            Err(e) => {
                tracing::warn!(target: "ca", issuer = %key.0, error = %e, "cannot fetch the JWT_RULE key set; tokens of this issuer are refused until it is");
                let w = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(60));
                w
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// istiod's `pemBundleHasSubsetRelation`: every certificate (by its DER)
/// of one PEM bundle is in the other; never when either has none.
fn subset_either(a: &str, b: &str) -> bool {
    let (a, b) = (istiod_pki::ca::pem_ders(a), istiod_pki::ca::pem_ders(b));
    let within = |x: &[Vec<u8>], y: &[Vec<u8>]| x.iter().all(|c| y.contains(c));
    !a.is_empty() && !b.is_empty() && (within(&a, &b) || within(&b, &a))
}

/// What identifies the contents of a plugged-in CA directory: each file's
/// length and modification time (a Secret update swaps them all at once).
fn plugged_signature(dir: &std::path::Path) -> Vec<Option<(u64, SystemTime)>> {
    ["ca-cert.pem", "ca-key.pem", "root-cert.pem", "cert-chain.pem", "ca-crl.pem"]
        .iter()
        .map(|f| std::fs::metadata(dir.join(f)).ok().map(|m| (m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH))))
        .collect()
}

/// Watches `ROOT_CA_DIR` (checked every `every`): when its files change,
/// the CA is read again and replaces the one in force, so a rotation of
/// the plugged-in certificates takes effect without a restart; files that
/// do not make a CA (half-written, mismatched) keep the last good one and
/// say why. A new root is taken only as istiod takes it
/// (`handleCACertsFileWatch`): with `multiroot` (`ISTIO_MULTIROOT_MESH`),
/// when one root bundle holds the other's certificates; otherwise only
/// the signing certificates change.
pub async fn watch_plugged(server: Arc<CaServer>, dir: std::path::PathBuf, every: Duration, multiroot: bool) {
    // None until the first look: the files may have changed between the
    // CA's load and this task's start, so the first look compares what
    // they hold with the CA in force rather than taking them as seen.
    let mut seen = None;
    let every = every.max(Duration::from_millis(100));
    loop {
        let first = seen.is_none();
        if !first {
            tokio::time::sleep(every).await;
        }
        let now = plugged_signature(&dir);
        if seen.as_ref() == Some(&now) {
            continue;
        }
        seen = Some(now);
        let settings = server.ca().settings().clone();
        let same = |ca: &Ca, current: &Ca| {
            (ca.root_pem(), ca.cert_pem(), ca.crl_pem()) == (current.root_pem(), current.cert_pem(), current.crl_pem())
        };
        match Ca::plugged(&dir, settings) {
            Ok(Some(ca)) if first && same(&ca, &server.ca()) => {}
            Ok(Some(ca)) if ca.root_pem() != server.ca().root_pem() && !multiroot => {
                tracing::warn!(target: "ca", "Multi root is disabled, updating new ROOT-CA not supported");
            }
            Ok(Some(ca))
                if ca.root_pem() != server.ca().root_pem() && !subset_either(ca.root_pem(), server.ca().root_pem()) =>
            {
                tracing::warn!(target: "ca", "Updating new ROOT-CA not supported");
            }
            Ok(Some(ca)) => {
                if ca.root_pem() != server.ca().root_pem() {
                    tracing::info!(target: "ca", "Updating new ROOT-CA");
                }
                server.set_ca(ca);
                tracing::info!(target: "ca", dir = %dir.display(), "plugged-in CA certificates reloaded");
            }
            Ok(None) => tracing::warn!(target: "ca", dir = %dir.display(), "ca-key.pem is gone; the CA in force stays"),
            Err(e) => {
                tracing::warn!(target: "ca", error = %e, "cannot reload the plugged-in CA; the CA in force stays")
            }
        }
    }
}
