//! xDS authentication on the TLS port, as istiod (`pilot/pkg/xds/auth.go`,
//! `pkg/security/authentication.go`): with `XDS_AUTH` (the default) a
//! stream over TLS must be authenticated by the CA's authenticators (a
//! client certificate of this CA, a `JWT_RULE` token, or a token the API
//! server reviews), or it ends UNAUTHENTICATED "authentication failure".
//! With `PILOT_ENABLE_XDS_IDENTITY_CHECK` (the default) the node of the
//! first request must be in one of the caller's identities' namespaces
//! (and service account, when the node names one), or the stream ends
//! PERMISSION_DENIED "authorization failed: no identities (...) matched
//! ns/sa". Plaintext streams (15010) pass unless `XDS_AUTH_PLAINTEXT`.
//!
//! A wrapper around the ADS service, so the xDS crate knows nothing of
//! Istio's identities: the ADS service sees a stream only once it is
//! authenticated. A stream whose token the API server must review is held
//! here (its first messages kept, bounded) until the answer comes.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DiscoveryRequest, aggregated_discovery_service as paths,
};
use istiod_proto::prost::Message;
use istiod_xds::grpc::{Call, Code, GrpcConnection, Service, Status};
use istiod_xds::server::{Registry, ServiceFactory};

use super::{Authn, CaServer, Reviewed, bearer, tokenreview::Refusal};

/// What may be held for a stream while its token is reviewed (a proxy
/// sends one request, a few at most, before its first answer)...
const MAX_HELD_MESSAGES: usize = 4;
const MAX_HELD_BYTES: usize = 256 << 10;
/// ...and for all the waiting streams of a core: anyone can send a bearer
/// string, so what waiting costs is bounded whoever sends it.
const MAX_HELD_BYTES_PER_CORE: usize = 16 << 20;
/// How many streams between sweeps of gates whose connection is gone.
const PRUNE_EVERY: u64 = 1024;

/// How xDS streams are authenticated.
#[derive(Debug, Clone)]
pub struct XdsAuth {
    /// The authenticators (a non-signing [`CaServer`] when
    /// `ENABLE_CA_SERVER` is false); `None` only when `XDS_AUTH` is off.
    pub server: Option<Arc<CaServer>>,
    /// `XDS_AUTH`.
    pub enabled: bool,
    /// `XDS_AUTH_PLAINTEXT`.
    pub plaintext: bool,
    /// `PILOT_ENABLE_XDS_IDENTITY_CHECK`.
    pub identity_check: bool,
}

/// Makes each core's [`AuthedAds`] around `inner`'s service.
pub struct AuthFactory<F> {
    inner: F,
    auth: XdsAuth,
}

impl<F> AuthFactory<F> {
    /// Authenticates the streams of `inner` by `auth`.
    pub fn new(inner: F, auth: XdsAuth) -> Self {
        Self { inner, auth }
    }
}

/// Where an authenticated stream stands.
enum Gate {
    /// Authenticated as `ids`; the node of the first request is still to
    /// be checked against them.
    Check { ids: Vec<String>, delta: bool },
    /// Waiting for a TokenReview: the call, and what came meanwhile.
    Waiting { call: Call, held: Vec<Bytes>, held_bytes: usize, half_closed: bool },
}

type Gates = Rc<RefCell<HashMap<(u64, u32), Gate>>>;

/// One core's authenticating wrapper.
pub struct AuthedAds<S> {
    inner: Rc<RefCell<S>>,
    auth: XdsAuth,
    gates: Gates,
    registry: Rc<Registry>,
    /// Bytes held for all waiting streams of this core.
    held: Rc<std::cell::Cell<usize>>,
    opened: u64,
}

impl<F: ServiceFactory> ServiceFactory for AuthFactory<F> {
    type Service = AuthedAds<F::Service>;

    fn make(&self, core: usize, registry: Rc<Registry>) -> Self::Service {
        AuthedAds {
            inner: Rc::new(RefCell::new(self.inner.make(core, registry.clone()))),
            auth: self.auth.clone(),
            gates: Gates::default(),
            registry,
            held: Rc::default(),
            opened: 0,
        }
    }

    fn start(&self, core: usize, svc: Rc<RefCell<Self::Service>>) {
        let inner = svc.borrow().inner.clone();
        self.inner.start(core, inner);
    }
}

/// The node of an xDS request, if it decodes and has one.
fn node_of(msg: &[u8], delta: bool) -> Option<Node> {
    if delta { DeltaDiscoveryRequest::decode(msg).ok()?.node } else { DiscoveryRequest::decode(msg).ok()?.node }
}

/// istiod's `checkConnectionIdentity`: some identity must be in the
/// node's namespace and, when the node names one, its service account.
/// A node that does not parse is left to the ADS service to refuse.
pub(crate) fn check_identity(node: Option<&Node>, ids: &[String]) -> Result<(), String> {
    let Ok(proxy) = istiod_mesh::node::Proxy::from_node(node) else { return Ok(()) };
    let Some(node) = node else { return Ok(()) };
    let ns = &*proxy.class.namespace;
    let sa = istiod_mesh::node::meta_str(node, "SERVICE_ACCOUNT").unwrap_or_default();
    let matches = |id: &String| {
        let Some((id_ns, id_sa)) = super::spiffe_ns_sa(id) else { return false };
        (ns.is_empty() || id_ns == ns) && (sa.is_empty() || id_sa == sa)
    };
    if ids.iter().any(matches) {
        return Ok(());
    }
    // Go's %v of a []string.
    Err(format!("no identities ([{}]) matched {ns}/{sa}", ids.join(" ")))
}

fn denied(peer: Option<std::net::SocketAddr>, ids: &[String], reason: String) -> Status {
    tracing::warn!(target: "ads", ?peer, identities = ?ids, %reason, "Unauthorized XDS");
    Status::new(Code::PermissionDenied, format!("authorization failed: {reason}"))
}

fn unauthenticated(peer: Option<std::net::SocketAddr>, reason: &str) -> Status {
    tracing::warn!(target: "ads", ?peer, %reason, "Failed to authenticate client");
    Status::new(Code::Unauthenticated, "authentication failure")
}

impl<S: Service + 'static> AuthedAds<S> {
    /// Whether streams of `conn` are authenticated, and by what.
    fn authenticator(&self, conn: &GrpcConnection) -> Option<Arc<CaServer>> {
        let a = &self.auth;
        if !a.enabled || !(conn.info.secure || a.plaintext) {
            return None;
        }
        a.server.clone()
    }

    /// Answers a held stream once its review is in.
    fn spawn_review(
        &self,
        server: Arc<CaServer>,
        key: (u64, u32),
        answer: async_channel::Receiver<Result<crate::tokenreview::Account, Refusal>>,
    ) {
        let (gates, registry, inner) = (self.gates.clone(), self.registry.clone(), self.inner.clone());
        let held_total = self.held.clone();
        let identity_check = self.auth.identity_check;
        // glommio runs a spawned task at once, up to its first wait, from
        // inside this call: it yields first, so what follows runs from the
        // executor, with nothing borrowed.
        glommio::spawn_local(async move {
            futures_lite::future::yield_now().await;
            let outcome = answer.recv().await;
            let Some(Gate::Waiting { call, held, held_bytes, half_closed }) = gates.borrow_mut().remove(&key) else {
                return;
            };
            held_total.set(held_total.get().saturating_sub(held_bytes));
            let Some(h) = registry.get(key.0) else { return };
            {
                let mut c = h.conn.borrow_mut();
                if !c.is_open(key.1) {
                    return;
                }
                let peer = c.info.peer;
                let delta = &call.request.path[..] == paths::DELTA_AGGREGATED_RESOURCES.as_bytes();
                let mut svc = inner.borrow_mut();
                let result = (|| {
                    let ids = match server.reviewed(outcome, peer) {
                        Reviewed::Ids(ids) => ids,
                        Reviewed::Denied(reason) => return Err(unauthenticated(peer, &reason)),
                        Reviewed::Unavailable(status) => return Err(status),
                    };
                    let identities: Arc<[String]> = ids.clone().into();
                    svc.open(&mut c, &Call { verified: identity_check, identities, ..call.clone() })?;
                    let mut unchecked = identity_check.then_some(ids);
                    for msg in held {
                        if let Some(ids) = unchecked.take() {
                            check_identity(node_of(&msg, delta).as_ref(), &ids).map_err(|r| denied(peer, &ids, r))?;
                        }
                        svc.message(&mut c, key.1, msg)?;
                    }
                    if half_closed {
                        // Over (the ADS service finishes it): nothing to check.
                        svc.half_close(&mut c, key.1);
                    } else if let Some(ids) = unchecked {
                        gates.borrow_mut().insert(key, Gate::Check { ids, delta });
                    }
                    Ok(())
                })();
                if let Err(status) = result {
                    gates.borrow_mut().remove(&key);
                    c.finish(key.1, &status);
                    svc.closed(&mut c, key.1);
                }
            }
            h.wake();
        })
        .detach();
    }
}

impl<S: Service + 'static> Service for AuthedAds<S> {
    fn open(&mut self, conn: &mut GrpcConnection, call: &Call) -> Result<(), Status> {
        let path = &call.request.path[..];
        let delta = path == paths::DELTA_AGGREGATED_RESOURCES.as_bytes();
        let ads = delta || path == paths::STREAM_AGGREGATED_RESOURCES.as_bytes();
        // Unknown paths are the ADS service's to refuse (UNIMPLEMENTED),
        // without a review.
        let Some(server) = self.authenticator(conn).filter(|_| ads) else {
            return self.inner.borrow_mut().open(conn, call);
        };
        self.opened += 1;
        if self.opened.is_multiple_of(PRUNE_EVERY) {
            let registry = &self.registry;
            let held = &self.held;
            self.gates.borrow_mut().retain(|(id, _), g| {
                let keep = registry.get(*id).is_some();
                if let (false, Gate::Waiting { held_bytes, .. }) = (keep, g) {
                    held.set(held.get().saturating_sub(*held_bytes));
                }
                keep
            });
        }
        let key = (conn.info.id, call.stream);
        match server.authenticate(&conn.info, bearer(call).as_deref()) {
            Authn::Ids(ids) => {
                tracing::debug!(target: "ads", peer = ?conn.info.peer, identities = ?ids, "Authenticated XDS");
                // The node's namespace is checked against `ids` at the
                // first message, before the service sees it.
                let identities: Arc<[String]> = ids.clone().into();
                self.inner
                    .borrow_mut()
                    .open(conn, &Call { verified: self.auth.identity_check, identities, ..call.clone() })?;
                if self.auth.identity_check {
                    self.gates.borrow_mut().insert(key, Gate::Check { ids, delta });
                }
                Ok(())
            }
            Authn::Refused(reason) => Err(unauthenticated(conn.info.peer, &reason)),
            Authn::Review(answer) => {
                let gate = Gate::Waiting { call: call.clone(), held: Vec::new(), held_bytes: 0, half_closed: false };
                self.gates.borrow_mut().insert(key, gate);
                self.spawn_review(server, key, answer);
                Ok(())
            }
        }
    }

    fn message(&mut self, conn: &mut GrpcConnection, stream: u32, msg: Bytes) -> Result<(), Status> {
        let key = (conn.info.id, stream);
        let mut gates = self.gates.borrow_mut();
        match gates.get_mut(&key) {
            None => {
                drop(gates);
                self.inner.borrow_mut().message(conn, stream, msg)
            }
            Some(Gate::Waiting { held, held_bytes, .. }) => {
                let total = self.held.get();
                if held.len() >= MAX_HELD_MESSAGES
                    || *held_bytes + msg.len() > MAX_HELD_BYTES
                    || total + msg.len() > MAX_HELD_BYTES_PER_CORE
                {
                    let freed = *held_bytes;
                    gates.remove(&key);
                    self.held.set(total.saturating_sub(freed));
                    return Err(Status::new(
                        Code::ResourceExhausted,
                        "too many requests before the stream was authenticated",
                    ));
                }
                *held_bytes += msg.len();
                self.held.set(total + msg.len());
                held.push(msg);
                Ok(())
            }
            Some(Gate::Check { .. }) => {
                let Some(Gate::Check { ids, delta }) = gates.remove(&key) else { unreachable!() };
                drop(gates);
                check_identity(node_of(&msg, delta).as_ref(), &ids).map_err(|r| denied(conn.info.peer, &ids, r))?;
                self.inner.borrow_mut().message(conn, stream, msg)
            }
        }
    }

    fn half_close(&mut self, conn: &mut GrpcConnection, stream: u32) {
        let key = (conn.info.id, stream);
        let mut gates = self.gates.borrow_mut();
        if let Some(Gate::Waiting { half_closed, .. }) = gates.get_mut(&key) {
            *half_closed = true;
            return;
        }
        // The ADS service finishes the call (then `closed` never comes):
        // nothing of it may stay here.
        gates.remove(&key);
        drop(gates);
        self.inner.borrow_mut().half_close(conn, stream);
    }

    fn closed(&mut self, conn: &mut GrpcConnection, stream: u32) {
        if let Some(Gate::Waiting { held_bytes, .. }) = self.gates.borrow_mut().remove(&(conn.info.id, stream)) {
            self.held.set(self.held.get().saturating_sub(held_bytes));
        }
        self.inner.borrow_mut().closed(conn, stream);
    }

    fn drained(&mut self, conn: &mut GrpcConnection) {
        self.inner.borrow_mut().drained(conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use istiod_proto::prost_types::{Struct, Value, value::Kind};

    fn node(id: &str, sa: Option<&str>) -> Node {
        let mut fields = std::collections::BTreeMap::new();
        if let Some(sa) = sa {
            fields.insert("SERVICE_ACCOUNT".to_owned(), Value { kind: Some(Kind::StringValue(sa.into())) });
        }
        Node { id: id.into(), metadata: Some(Struct { fields: fields.into_iter().collect() }), ..Default::default() }
    }

    /// pilot/pkg/xds/proxy_dependencies_test.go TestCheckConnectionIdentity.
    #[test]
    fn identity_check_follows_istiod() {
        let id = |ns: &str, sa: &str| vec![format!("spiffe://cluster.local/ns/{ns}/sa/{sa}")];
        let n = node("sidecar~10.0.0.1~pod.a~a.svc.cluster.local", None);
        assert!(check_identity(Some(&n), &id("a", "x")).is_ok(), "same namespace, no service account named");
        let err = check_identity(Some(&n), &id("b", "x")).unwrap_err();
        assert_eq!(err, "no identities ([spiffe://cluster.local/ns/b/sa/x]) matched a/");
        let n = node("sidecar~10.0.0.1~pod.a~a.svc.cluster.local", Some("x"));
        assert!(check_identity(Some(&n), &id("a", "x")).is_ok());
        assert!(check_identity(Some(&n), &id("a", "y")).is_err(), "another service account");
        let both = [id("b", "x"), id("a", "x")].concat();
        assert!(check_identity(Some(&n), &both).is_ok(), "any identity may match");
        assert!(check_identity(Some(&n), &["not-spiffe".into()]).is_err());
        // A node that does not parse is the ADS service's to refuse.
        assert!(check_identity(Some(&node("bad", None)), &id("b", "x")).is_ok());
    }
}
