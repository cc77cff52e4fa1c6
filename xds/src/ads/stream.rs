//! One ADS stream's protocol state, both variants, without I/O: requests
//! in, response bytes out. istiod's rules (pilot/pkg/xds/ads.go,
//! delta.go): the first request carries the node; a NACK is recorded and
//! never answered (no retry loop); a stale nonce is ignored; an ACK is
//! answered only when the subscription changed, or when the type must be
//! re-sent after its parent (EDS after CDS, RDS after LDS).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use super::cache::{Cache, ChangedResponse, First, FirstNames, FirstResponse, split_first_names};
use istiod_proto::envoy::config::core::v3::Node;

use super::names::{NameMap, NameSet, Sent, intern, interned, subscription};
use super::node::Peer;
use super::snapshot::{Delta, Generator, Kind, Snapshot};
use super::wire::{self, Encoded};

/// Which ADS method the stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `StreamAggregatedResources`.
    Sotw,
    /// `DeltaAggregatedResources`.
    Delta,
}

/// What must be (re)sent for a type.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Dirty {
    /// Nothing.
    #[default]
    Clean,
    /// Everything subscribed.
    All,
    /// Only these names (shared by the streams that take the same of a
    /// snapshot's changed names of the type, see [`Changes`]).
    Names(Arc<BTreeSet<Arc<str>>>),
}

impl Dirty {
    fn add(&mut self, other: Dirty) {
        match (&mut *self, other) {
            (_, Dirty::Clean) | (Dirty::All, _) => {}
            (s, Dirty::All) => *s = Dirty::All,
            (Dirty::Clean, n) => *self = n,
            (Dirty::Names(a), Dirty::Names(b)) => {
                if !Arc::ptr_eq(a, &b) {
                    Arc::make_mut(a).extend(b.iter().cloned());
                }
            }
        }
    }

    fn names(names: BTreeSet<Arc<str>>) -> Self {
        Dirty::Names(Arc::new(names))
    }
}

/// A snapshot's [`Delta`] by type, made once for all of a core's streams:
/// the streams that take every changed name of a type share its set, and
/// those that take the same part of it share that part's.
#[derive(Debug, Default)]
pub struct Changes {
    full: bool,
    by_kind: [Option<ChangedSet>; Kind::ALL.len()],
    /// The parts taken so far, by type and which of its changed names
    /// (a bit each, for a type of at most 64 changed names): a change of
    /// a route configuration every sidecar holds and one only a few do
    /// marks the sidecars' streams with one set, so that their push is
    /// built once ([`shared_change`]) rather than each with its own.
    parts: std::cell::RefCell<Vec<(Kind, u64, ChangedSet)>>,
}

/// A type's changed names, shared by the streams that take them.
type ChangedSet = Arc<BTreeSet<Arc<str>>>;

/// How many parts of a snapshot's changes are kept to be shared: a core's
/// streams fall into a few classes, and each class takes the same part.
const MAX_PARTS: usize = 64;

impl Changes {
    /// `delta` by type.
    pub fn of(delta: &Delta) -> Self {
        match delta {
            Delta::Full => Changes { full: true, ..Changes::default() },
            Delta::Resources(r) => {
                let mut sets: [BTreeSet<Arc<str>>; Kind::ALL.len()] = Default::default();
                // As the core's streams hold them (`interned`): a stream
                // finds a changed name among its own by address.
                for (kind, name) in r {
                    sets[*kind as usize].insert(interned(name));
                }
                Changes {
                    full: false,
                    by_kind: sets.map(|s| (!s.is_empty()).then(|| Arc::new(s))),
                    parts: Default::default(),
                }
            }
        }
    }

    /// What a stream takes of the changes of `kind` (`changed`), `takes`
    /// saying it of each name: `None` if none, the type's set if all, else
    /// that part of it. For a type of at most 64 changed names, the part
    /// is found by which names it holds (a bit each) and is one set for
    /// every stream that takes the same; of more, the stream's own copy.
    fn taken(&self, kind: Kind, changed: &ChangedSet, takes: impl Fn(&Arc<str>) -> bool) -> Option<ChangedSet> {
        if changed.len() <= 64 {
            let mut bits = 0u64;
            for (i, n) in changed.iter().enumerate() {
                if takes(n) {
                    bits |= 1 << i;
                }
            }
            return match bits {
                0 => None,
                b if b.count_ones() as usize == changed.len() => Some(changed.clone()),
                b => Some(self.part(kind, changed, b)),
            };
        }
        // One look at each name; the names taken are copied only once one
        // is not.
        let mut some: Option<BTreeSet<Arc<str>>> = None;
        for (i, n) in changed.iter().enumerate() {
            match (&mut some, takes(n)) {
                (Some(s), true) => {
                    s.insert(n.clone());
                }
                (None, false) => some = Some(changed.iter().take(i).cloned().collect()),
                _ => {}
            }
        }
        match some {
            None => Some(changed.clone()),
            Some(s) if s.is_empty() => None,
            Some(s) => Some(Arc::new(s)),
        }
    }

    /// The part of `changed` (the changes of `kind`) whose bits are set
    /// in `taken`: the same set for every stream that takes that part.
    fn part(&self, kind: Kind, changed: &BTreeSet<Arc<str>>, taken: u64) -> ChangedSet {
        let mut parts = self.parts.borrow_mut();
        if let Some((_, _, set)) = parts.iter().find(|(k, t, _)| *k == kind && *t == taken) {
            return set.clone();
        }
        let set: ChangedSet = Arc::new(
            changed.iter().enumerate().filter(|(i, _)| taken & (1 << i) != 0).map(|(_, n)| n.clone()).collect(),
        );
        if parts.len() < MAX_PARTS {
            parts.push((kind, taken, set.clone()));
        }
        set
    }
}

/// A proxy's subscription to one type and what was sent and acknowledged.
#[derive(Debug, Default)]
pub struct Watch {
    /// Subscribed to every resource of the type.
    pub wildcard: bool,
    /// Explicitly subscribed names.
    pub names: NameSet,
    /// What the proxy has, by our account: name to version.
    pub sent: Sent,
    /// Nonce of the last response.
    pub sent_nonce: Option<Arc<str>>,
    /// Snapshot version of the last response.
    pub sent_version: u64,
    /// When the last response went out.
    pub sent_at: Option<Instant>,
    /// Last nonce the proxy ACKed, and the snapshot version it carried.
    pub acked: Option<(Arc<str>, u64)>,
    /// A forced push is owed: the next response carries every resource,
    /// changed or not (istiod's `/debug/adsz?push=true`).
    pub forced: bool,
    /// Last NACK: nonce and the proxy's error message.
    pub nack: Option<(Arc<str>, String)>,
    /// Responses sent.
    pub responses: u64,
    /// Answer the next ACK even if the subscription is unchanged (EDS after
    /// CDS, RDS after LDS: Envoy re-requests them to warm).
    pub always_respond: bool,
    /// Pending work.
    pub dirty: Dirty,
    /// Part of the pending work answers a request (which is answered even
    /// when nothing differs from what was sent).
    pub requested: bool,
    /// The watcher-core time of the change the in-flight response carries,
    /// with its nonce, for convergence on ACK.
    pub push_cause: Option<(Arc<str>, Instant)>,
    /// Names subscribed since the last response: for a type with aliases,
    /// one that names nothing is answered as removed (on-demand clients
    /// wait for an answer).
    pub lookups: NameSet,
    /// Subscribed by name to a type with aliases: every change of the type
    /// is looked at, for what its implicit names stand for.
    pub aliased: bool,
    /// The names it is subscribed to unasked (`Generator::implicit_names`).
    pub implicit: Vec<Arc<str>>,
    /// The server subscribed it to names since the stream's subscriptions
    /// were last held to their bound (implicit names, what an alias stands
    /// for).
    pub grew: bool,
}

/// Why a request ends the stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// Bad node or undecodable request: INVALID_ARGUMENT.
    #[error("{0}")]
    InvalidArgument(String),
}

/// A response to send, with the watcher time of its cause.
#[derive(Debug)]
pub struct Outgoing {
    /// Encoded `DiscoveryResponse` or `DeltaDiscoveryResponse`, in pieces
    /// (the resources shared with the cache).
    pub bytes: crate::grpc::Chain,
    /// Its resource type.
    pub kind: Kind,
}

/// Everything a stream needs from its core to build responses.
pub struct Ctx<'a, M: Send + Sync + 'static = (), C = ()> {
    /// The generator.
    pub generator: &'a dyn Generator<Mesh = M, Class = C>,
    /// The current snapshot.
    pub snap: &'a Snapshot<M>,
    /// The core's cache.
    pub cache: &'a mut Cache<C>,
    /// Makes a fresh nonce.
    pub nonce: &'a mut dyn FnMut() -> Arc<str>,
    /// `control_plane.identifier`.
    pub control_plane: &'a str,
    /// Now.
    pub now: Instant,
}

/// One ADS stream.
#[derive(Debug)]
pub struct AdsStream<C = ()> {
    /// Variant.
    pub protocol: Protocol,
    /// The peer's address (`/debug/adsz`).
    pub address: Option<std::net::SocketAddr>,
    /// The proxy, once the first request named it.
    pub proxy: Option<Peer>,
    /// Its interned class.
    pub class: Option<Arc<C>>,
    /// When the stream opened.
    pub connected_at: Instant,
    /// Watches by kind.
    pub watches: [Option<Watch>; Kind::ALL.len()],
    /// Whether the caller's identity was verified (see
    /// [`crate::grpc::Call::verified`]).
    pub verified: bool,
    /// The caller's authenticated identities ([`crate::grpc::Call::identities`]).
    pub identities: Arc<[String]>,
    /// Whether the application hears of this stream (`Generator::tracks`).
    pub tracked: bool,
    /// Requests of types this server does not serve (ignored).
    pub unknown_types: u64,
    /// Stale nonces ignored.
    pub stale: u64,
    /// When the oldest change this stream still owes a push for was made
    /// (convergence is measured from it, whichever flush sends it).
    pub owed_cause: Option<Instant>,
}

/// Outcome of a request for the core: convergence samples to record.
#[derive(Debug, Default)]
pub struct Acked {
    /// Change-to-ACK durations, in microseconds.
    pub convergence_us: Vec<u64>,
    /// NACKs recorded.
    pub nacks: u64,
    /// A type this server does not serve, with whether the request was the
    /// type's first (no response nonce): the generator decides the answer
    /// ([`super::Generator::unknown_type`]).
    pub unknown: Option<Unknown>,
    /// The request may have subscribed to names the stream did not have
    /// (a first request, or one naming new ones): its subscriptions are to
    /// be held to their bound again. A plain ACK's are not, for each of
    /// 1,000 proxies a change is pushed to.
    pub subscribed: bool,
}

/// A request for a type this server does not serve.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Unknown {
    /// Its type URL.
    pub type_url: String,
    /// Whether it was the type's first request (no response nonce).
    pub first: bool,
    /// The names it asked for (SotW), or subscribed to (delta).
    pub names: Vec<String>,
    /// Its `error_detail`'s message, when it carries one.
    pub error: Option<String>,
}

/// Classifies the node of a stream's first request and interns its class
/// (the core's [`Generator::classify`] and class table).
pub type Identify<'a, C> = dyn FnMut(Option<&Node>) -> Result<(Peer, Arc<C>), String> + 'a;

impl<C: super::Class> AdsStream<C> {
    /// A stream opened at `now`.
    pub fn new(protocol: Protocol, now: Instant) -> Self {
        Self {
            protocol,
            address: None,
            proxy: None,
            class: None,
            connected_at: now,
            watches: Default::default(),
            verified: false,
            identities: Arc::from([]),
            tracked: false,
            unknown_types: 0,
            stale: 0,
            owed_cause: None,
        }
    }

    fn identify(&mut self, node: Option<&Node>, identify: &mut Identify<'_, C>) -> Result<(), StreamError> {
        if self.proxy.is_none() {
            let (peer, class) = identify(node).map_err(StreamError::InvalidArgument)?;
            crate::metrics::version_seen(peer.info("istio_version"));
            self.class = Some(class);
            self.proxy = Some(peer);
        }
        Ok(())
    }

    fn record_ack(w: &mut Watch, nonce: &Arc<str>, now: Instant, acked: &mut Acked) {
        w.acked = Some((nonce.clone(), w.sent_version));
        if let Some((n, cause)) = w.push_cause.take() {
            if &n == nonce {
                acked.convergence_us.push(now.saturating_duration_since(cause).as_micros() as u64);
            } else {
                w.push_cause = Some((n, cause));
            }
        }
    }

    /// Handles a state-of-the-world request.
    pub fn on_sotw(
        &mut self,
        req: istiod_proto::envoy::service::discovery::v3::DiscoveryRequest,
        identify: &mut Identify<'_, C>,
        now: Instant,
    ) -> Result<Acked, StreamError> {
        self.identify(req.node.as_ref(), identify)?;
        let mut acked = Acked::default();
        let Some(kind) = Kind::from_type_url(&req.type_url) else {
            self.unknown_types += 1;
            let first = req.response_nonce.is_empty();
            let error = req.error_detail.map(|e| e.message);
            acked.unknown = Some(Unknown { type_url: req.type_url, first, names: req.resource_names, error });
            return Ok(acked);
        };
        let w = self.watches[kind as usize].get_or_insert_with(Watch::default);
        let nonce: Arc<str> = req.response_nonce.as_str().into();
        let first = w.sent_nonce.is_none();
        if !req.response_nonce.is_empty() && !first && w.sent_nonce.as_ref() != Some(&nonce) {
            // istiod: an expired nonce is ignored; the proxy will get the
            // newer response it has not yet seen.
            self.stale += 1;
            crate::metrics::EXPIRED_NONCE[kind as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(acked);
        }
        if let Some(err) = req.error_detail {
            // NACK: record and wait for a new version (no retry loop).
            let proxy = self.proxy.as_ref().map_or("", |p| &*p.name);
            crate::metrics::count_reject(kind as usize, proxy, err.code);
            w.nack = Some((nonce, err.message));
            acked.nacks += 1;
            return Ok(acked);
        }
        // ("*" is left out of the set: it is read from the request.)
        let names: NameSet = subscription(kind as usize, &req.resource_names);
        let wildcard = kind.is_wildcard() && (names.is_empty() || req.resource_names.iter().any(|n| n == "*"));
        if req.response_nonce.is_empty() || first {
            // Initial request (or a reconnect carrying an old nonce).
            w.wildcard = wildcard;
            w.names = names;
            w.dirty = Dirty::All;
            w.requested = true;
            acked.subscribed = true;
            return Ok(acked);
        }
        Self::record_ack(w, &nonce, now, &mut acked);
        if !kind.is_wildcard() && req.resource_names.is_empty() {
            // Unsubscribe from everything of a named type.
            w.names.clear();
            w.sent.clear();
            w.dirty = Dirty::Clean;
            return Ok(acked);
        }
        let wanted = names;
        if wildcard != w.wildcard || wanted != w.names {
            let added: BTreeSet<Arc<str>> = wanted.keys_not_in(&w.names).cloned().collect();
            w.wildcard = wildcard;
            w.names = wanted;
            let names = &w.names;
            w.sent.retain(|n| names.contains(n));
            // New names must be sent; for SotW named types, the response
            // carries what changed (istiod's incremental EDS).
            acked.subscribed = !added.is_empty();
            w.dirty.add(if kind.is_wildcard() { Dirty::All } else { Dirty::names(added) });
            w.requested = true;
        } else if std::mem::take(&mut w.always_respond) {
            w.dirty.add(Dirty::All);
            w.requested = true;
        }
        Ok(acked)
    }

    /// Handles a delta request.
    pub fn on_delta(
        &mut self,
        req: istiod_proto::envoy::service::discovery::v3::DeltaDiscoveryRequest,
        identify: &mut Identify<'_, C>,
        now: Instant,
    ) -> Result<Acked, StreamError> {
        self.identify(req.node.as_ref(), identify)?;
        let mut acked = Acked::default();
        let Some(kind) = Kind::from_type_url(&req.type_url) else {
            self.unknown_types += 1;
            let first = req.response_nonce.is_empty();
            let error = req.error_detail.map(|e| e.message);
            acked.unknown = Some(Unknown { type_url: req.type_url, first, names: req.resource_names_subscribe, error });
            return Ok(acked);
        };
        let slot = &mut self.watches[kind as usize];
        let first = slot.is_none();
        let w = slot.get_or_insert_with(Watch::default);
        if first {
            // Legacy wildcard: a first request without names for CDS/LDS.
            w.wildcard = kind.is_wildcard() && req.resource_names_subscribe.is_empty();
            w.sent = req.initial_resource_versions.iter().map(|(k, v)| (intern(k), Arc::from(v.as_str()))).collect();
            w.dirty = Dirty::All;
        }
        if !req.response_nonce.is_empty() {
            let nonce: Arc<str> = req.response_nonce.as_str().into();
            if w.sent_nonce.as_ref() != Some(&nonce) {
                self.stale += 1;
                crate::metrics::EXPIRED_NONCE[kind as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            } else if let Some(err) = &req.error_detail {
                w.nack = Some((nonce, err.message.clone()));
                acked.nacks += 1;
                let proxy = self.proxy.as_ref().map_or("", |p| &*p.name);
                crate::metrics::count_reject(kind as usize, proxy, err.code);
            } else {
                Self::record_ack(w, &nonce, now, &mut acked);
            }
        }
        if req.resource_names_subscribe.iter().any(|n| n == "*") && !w.wildcard {
            w.wildcard = true;
            w.dirty.add(Dirty::All);
        }
        // Many names at once: one merge, not a shifting insert each; a
        // first subscription as another stream's of the same names, shared.
        let added: NameSet = if w.names.is_empty() {
            w.names = subscription(kind as usize, &req.resource_names_subscribe);
            w.names.clone()
        } else {
            let subscribe = req.resource_names_subscribe.iter().filter(|n| *n != "*");
            w.names.insert_many(subscribe.map(|n| (intern(n), ()))).into_iter().map(|n| (n, ())).collect()
        };
        if req.resource_names_unsubscribe.iter().any(|n| n == "*") {
            w.wildcard = false;
        }
        let gone: Vec<&str> = req.resource_names_unsubscribe.iter().filter(|n| *n != "*").map(String::as_str).collect();
        w.names.remove_many(&gone);
        // The proxy drops them; forget that it has them.
        w.sent.remove_many(&gone);
        if !added.is_empty() {
            acked.subscribed = true;
            // (Sorted: a first subscription's sets are built in bulk, and
            // none where everything is owed anyway.)
            if w.dirty != Dirty::All {
                w.dirty.add(Dirty::names(added.keys().cloned().collect()));
            }
            if w.lookups.is_empty() {
                w.lookups = added;
            } else {
                w.lookups.insert_many(added.iter().map(|(n, ())| (n.clone(), ())));
            }
        }
        Ok(acked)
    }

    /// Marks what a new snapshot's delta, for a change made at
    /// `changed_at`, may have changed for this stream; the push it owes
    /// counts its convergence from the oldest such change.
    pub fn on_delta_update(&mut self, changes: &Changes, changed_at: Instant, forced: bool) {
        // A stream with nothing owed has no older cause: its last push went
        // out whole (the core stops flushing once the stream is clean, so
        // `flush_next` never got to forget the cause).
        if !self.is_dirty() {
            self.owed_cause = None;
        }
        for kind in Kind::ALL {
            let Some(w) = self.watches[kind as usize].as_mut() else { continue };
            if !w.wildcard && w.names.is_empty() {
                continue;
            }
            w.forced |= forced;
            // SotW CDS/LDS responses carry the whole set.
            let whole_set = self.protocol == Protocol::Sotw && kind.is_wildcard();
            let dirty = match &changes.by_kind[kind as usize] {
                _ if changes.full => Dirty::All,
                None => Dirty::Clean,
                Some(changed) => {
                    let takes_all = w.wildcard || w.aliased;
                    match changes.taken(kind, changed, |n| takes_all || w.names.contains(n) || w.sent.contains(n)) {
                        None => Dirty::Clean,
                        Some(_) if whole_set => Dirty::All,
                        Some(taken) => Dirty::Names(taken),
                    }
                }
            };
            if dirty != Dirty::Clean {
                self.owed_cause.get_or_insert(changed_at);
            }
            w.dirty.add(dirty);
        }
    }

    /// Whether the server subscribed the stream to names since this was
    /// last asked ([`Watch::grew`]).
    pub fn take_grown(&mut self) -> bool {
        self.watches.iter_mut().flatten().fold(false, |grew, w| std::mem::take(&mut w.grew) | grew)
    }

    /// Names the stream subscribes to, over every type.
    pub fn subscribed(&self) -> usize {
        self.watches.iter().flatten().map(|w| w.names.len()).sum()
    }

    /// Whether anything is waiting to be sent.
    pub fn is_dirty(&self) -> bool {
        self.watches.iter().flatten().any(|w| w.dirty != Dirty::Clean)
    }

    /// Builds the pending responses, in push order (CDS, EDS, LDS, RDS);
    /// convergence counts from the oldest change they carry
    /// (`owed_cause`).
    pub fn flush<M: Send + Sync + 'static>(&mut self, ctx: &mut Ctx<'_, M, C>) -> Vec<Outgoing> {
        std::iter::from_fn(|| self.flush_next(ctx)).collect()
    }

    /// Builds the next pending response in push order, or `None` when
    /// nothing is left to send. The core builds one at a time so that it
    /// can stop while the connection's queue is full: what is not built
    /// stays pending, never lost.
    pub fn flush_next<M: Send + Sync + 'static>(&mut self, ctx: &mut Ctx<'_, M, C>) -> Option<Outgoing> {
        let class = self.class.clone()?;
        // The oldest change owed (whether the push throttle's turn or a
        // request flushes it); none for a response to a request alone.
        let cause = self.owed_cause;
        for kind in Kind::ALL {
            let Some(w) = self.watches[kind as usize].as_mut() else { continue };
            let dirty = std::mem::take(&mut w.dirty);
            let push = !std::mem::take(&mut w.requested);
            if dirty == Dirty::Clean {
                continue;
            }
            let resp = match self.protocol {
                Protocol::Sotw => sotw_response(w, kind, &dirty, &class, ctx, push),
                Protocol::Delta => delta_response(w, kind, &dirty, &class, ctx),
            };
            w.forced = false;
            let Some((bytes, nonce)) = resp else { continue };
            tracing::trace!(target: "ads", ?kind, ?dirty, %nonce, "push");
            w.sent_version = ctx.snap.version;
            w.sent_at = Some(ctx.now);
            w.responses += 1;
            w.push_cause = cause.map(|c| (nonce.clone(), c));
            w.sent_nonce = Some(nonce);
            // Envoy re-requests children after a parent update to warm them.
            let child = match kind {
                Kind::Cluster => Some(Kind::Endpoint),
                Kind::Listener => Some(Kind::Route),
                _ => None,
            };
            if let Some(c) = child.and_then(|c| self.watches[c as usize].as_mut()) {
                c.always_respond = true;
            }
            return Some(Outgoing { bytes, kind });
        }
        // Nothing more to send: nothing owed.
        self.owed_cause = None;
        None
    }
}

fn names_for<M: Send + Sync + 'static, C: super::Class>(
    w: &Watch,
    kind: Kind,
    dirty: &Dirty,
    class: &Arc<C>,
    ctx: &mut Ctx<'_, M, C>,
) -> BTreeSet<Arc<str>> {
    match dirty {
        Dirty::Clean => BTreeSet::new(),
        Dirty::All => {
            let mut all: BTreeSet<Arc<str>> = w.names.keys().cloned().collect();
            if w.wildcard {
                all.extend(ctx.cache.wildcard_names(ctx.generator, ctx.snap, class, kind).iter().cloned());
            }
            all
        }
        Dirty::Names(n) => {
            n.iter().filter(|n| w.wildcard || w.names.contains(n) || w.sent.contains(n)).cloned().collect()
        }
    }
}

fn sotw_response<M: Send + Sync + 'static, C: super::Class>(
    w: &mut Watch,
    kind: Kind,
    dirty: &Dirty,
    class: &Arc<C>,
    ctx: &mut Ctx<'_, M, C>,
    push: bool,
) -> Option<(crate::grpc::Chain, Arc<str>)> {
    // CDS/LDS: the response is the whole set. EDS/RDS: the named ones that
    // changed (or all subscribed on a full push).
    if let Some(shared) = shared_first(Protocol::Sotw, w, kind, dirty, class, ctx) {
        return Some(shared);
    }
    if !kind.is_wildcard()
        && let Some(pushed) = shared_change(Protocol::Sotw, w, kind, dirty, class, ctx)
    {
        return pushed;
    }
    let names = if kind.is_wildcard() {
        names_for(w, kind, &Dirty::All, class, ctx)
    } else {
        names_for(w, kind, dirty, class, ctx)
    };
    let mut resources: Vec<(Arc<str>, Encoded)> = Vec::with_capacity(names.len());
    for n in &names {
        if let Some(e) = ctx.cache.get(ctx.generator, ctx.snap, class, kind, n) {
            resources.push((n.clone(), e));
        }
    }
    if !kind.is_wildcard() && resources.is_empty() && w.sent_nonce.is_some() && !matches!(dirty, Dirty::All) {
        return None; // nothing of what changed exists for this proxy
    }
    if push && w.sent_nonce.is_some() && !w.forced {
        // A change elsewhere that leaves this proxy's resources as they
        // were (versions are content hashes) is not pushed: a shared
        // resource changed, but not this class's variant of it.
        let unchanged = |(n, e): &(Arc<str>, Encoded)| w.sent.get(n) == Some(&e.version);
        if kind.is_wildcard() {
            if resources.len() == w.sent.len() && resources.iter().all(unchanged) {
                return None;
            }
        } else {
            resources.retain(|r| !unchanged(r));
            if resources.is_empty() {
                return None;
            }
        }
    }
    if kind.is_wildcard() {
        w.sent.clear();
    }
    w.sent.insert_many(resources.iter().map(|(n, e)| (n.clone(), e.version.clone())));
    let nonce = (ctx.nonce)();
    let refs: Vec<&Encoded> = resources.iter().map(|(_, e)| e).collect();
    let version = ctx.snap.version.to_string();
    Some((wire::sotw_response(&version, kind.type_url(), &nonce, &refs, ctx.control_plane), nonce))
}

fn delta_response<M: Send + Sync + 'static, C: super::Class>(
    w: &mut Watch,
    kind: Kind,
    dirty: &Dirty,
    class: &Arc<C>,
    ctx: &mut Ctx<'_, M, C>,
) -> Option<(crate::grpc::Chain, Arc<str>)> {
    if let Some(shared) = shared_first(Protocol::Delta, w, kind, dirty, class, ctx) {
        return Some(shared);
    }
    if let Some(pushed) = shared_change(Protocol::Delta, w, kind, dirty, class, ctx) {
        return pushed;
    }
    let mut candidates = names_for(w, kind, dirty, class, ctx);
    if *dirty == Dirty::All {
        // Anything the proxy has may have gone away.
        candidates.extend(w.sent.keys().cloned());
    }
    // A name subscribed to that stands for other resources (on-demand):
    // the proxy is subscribed to those too, and each goes out with its own
    // aliases (`Aliases::of`); a name asked for that stands for nothing is
    // answered as removed (istiod's `generateDeltasOndemand`).
    let lookups = std::mem::take(&mut w.lookups);
    let aliases = if w.wildcard { None } else { ctx.cache.aliases(ctx.generator, ctx.snap, kind) };
    // Resources just asked for by an alias: answered even where the proxy
    // has them (it is waiting for an answer to the alias).
    let mut asked_now: BTreeSet<Arc<str>> = BTreeSet::new();
    let mut unresolved: Vec<Arc<str>> = Vec::new();
    if let Some(table) = &aliases {
        if !w.aliased {
            // The first response: what the proxy is subscribed to unasked.
            w.aliased = true;
            w.implicit = ctx.generator.implicit_names(class, kind).iter().map(|n| intern(n)).collect();
            for n in &w.implicit {
                w.grew |= w.names.insert(n.clone(), ());
            }
        }
        // The aliases to resolve: those just asked for (istiod resolves a
        // name when it is requested, and a pod that later joins a service
        // asked for by its VIP is not sent), every one on a full push, and
        // the implicit ones on every change (a new pod on the node is).
        let resolve: Vec<Arc<str>> = if *dirty == Dirty::All {
            w.names.keys().filter(|n| table.stands_for.contains_key(*n)).cloned().collect()
        } else {
            lookups.keys().chain(&w.implicit).filter(|n| table.stands_for.contains_key(*n)).cloned().collect()
        };
        for n in resolve {
            for t in &table.stands_for[&n] {
                if *t != n && lookups.contains(&n) {
                    asked_now.insert(t.clone());
                }
                if !w.names.contains(t) {
                    w.grew |= w.names.insert(intern(t), ());
                }
                candidates.insert(t.clone());
            }
        }
        for n in lookups.keys() {
            if !table.stands_for.contains_key(n) && ctx.cache.get(ctx.generator, ctx.snap, class, kind, n).is_none() {
                unresolved.push(n.clone());
            }
        }
    }
    let mut resources: Vec<(Arc<str>, Encoded)> = Vec::new();
    let mut removed: Vec<Arc<str>> = Vec::new();
    for n in candidates {
        let subscribed = w.wildcard || w.names.contains(&n);
        match ctx.cache.get(ctx.generator, ctx.snap, class, kind, &n).filter(|_| subscribed) {
            Some(e) => {
                if w.sent.get(&n) != Some(&e.version) || asked_now.contains(&n) || w.forced {
                    resources.push((n, e));
                }
            }
            None => {
                if w.sent.contains(&n) {
                    removed.push(n);
                }
            }
        }
    }
    for n in unresolved {
        if !removed.contains(&n) {
            removed.push(n);
        }
    }
    if resources.is_empty() && removed.is_empty() && w.sent_nonce.is_some() {
        return None;
    }
    w.sent.insert_many(resources.iter().map(|(n, e)| (n.clone(), e.version.clone())));
    w.sent.remove_many(&removed.iter().map(|n| &**n).collect::<Vec<_>>());
    let nonce = (ctx.nonce)();
    let alias_refs: Vec<Vec<&str>> = resources
        .iter()
        .map(|(n, _)| {
            let of = aliases.as_ref().and_then(|t| t.of.get(n));
            of.map(|a| a.iter().map(|x| &**x).collect()).unwrap_or_default()
        })
        .collect();
    let refs: Vec<(&str, &Encoded, &[&str])> =
        resources.iter().zip(&alias_refs).map(|((n, e), a)| (&**n, e, a.as_slice())).collect();
    let removed_refs: Vec<&str> = removed.iter().map(|n| &**n).collect();
    let version = ctx.snap.version.to_string();
    Some((wire::delta_response(&version, kind.type_url(), &nonce, &refs, &removed_refs, ctx.control_plane), nonce))
}

/// A stream's first response of a type, where it holds nothing and (delta)
/// its type has no names that stand for others. Every stream sent the same
/// resources for the same reduced class is sent the same response but for
/// the resources that read the whole class (a sidecar's inbound side) and
/// the nonce: that shared part is built once per snapshot when a second
/// such stream asks, and sent by reference to the rest, followed by the
/// stream's own resources and nonce. A connect storm sends thousands of
/// proxies of a few kinds the same first responses; looking up each
/// resource again for each of them was most of the serving core's work.
/// `None`: answer as usual.
fn shared_first<M: Send + Sync + 'static, C: super::Class>(
    protocol: Protocol,
    w: &mut Watch,
    kind: Kind,
    dirty: &Dirty,
    class: &Arc<C>,
    ctx: &mut Ctx<'_, M, C>,
) -> Option<(crate::grpc::Chain, Arc<str>)> {
    if *dirty != Dirty::All || w.sent_nonce.is_some() || !w.sent.is_empty() || w.forced || w.aliased {
        return None;
    }
    if protocol == Protocol::Delta && !w.wildcard && ctx.cache.aliases(ctx.generator, ctx.snap, kind).is_some() {
        return None;
    }
    let wildcard_only = (w.wildcard && w.names.is_empty())
        .then(|| ctx.cache.wildcard_first_names(ctx.generator, ctx.snap, class, kind));
    let collected: (Vec<Arc<str>>, Vec<Arc<str>>);
    let (own, first_names): (&[Arc<str>], FirstNames<'_>) = match &wildcard_only {
        Some((own, rest, hash)) => (own, FirstNames::kept(rest, *hash)),
        None => {
            let mut names: Vec<Arc<str>> = w.names.keys().cloned().collect();
            if w.wildcard {
                names.extend(ctx.cache.wildcard_names(ctx.generator, ctx.snap, class, kind).iter().cloned());
            }
            // A stream's own names are sorted and unique already.
            collected = split_first_names(ctx.generator, kind, names, w.wildcard);
            (&collected.0, FirstNames::new(&collected.1))
        }
    };
    let names = first_names.names;
    let reduced = ctx.cache.reduced_for(ctx.generator, ctx.snap, class, kind);
    let sotw = protocol == Protocol::Sotw;
    let shared = match ctx.cache.first_response(ctx.snap, kind, sotw, &reduced, first_names) {
        First::Unseen => return None,
        First::Kept(r) => {
            #[cfg(debug_assertions)]
            {
                let counts = (ctx.cache.hits, ctx.cache.misses);
                let fresh = first_response(protocol, names, kind, class, ctx);
                (ctx.cache.hits, ctx.cache.misses) = counts;
                assert!(
                    fresh.body == r.body && fresh.sent == r.sent,
                    "a shared first {kind:?} response differs from the stream's own"
                );
            }
            r
        }
        First::Build => {
            let r = Arc::new(first_response(protocol, names, kind, class, ctx));
            ctx.cache.keep_first_response(kind, sotw, &reduced, first_names, r.clone());
            r
        }
    };
    let mut resources: Vec<(Arc<str>, Encoded)> = Vec::with_capacity(own.len());
    for n in own {
        if let Some(e) = ctx.cache.get(ctx.generator, ctx.snap, class, kind, n) {
            resources.push((n.clone(), e));
        }
    }
    // Names asked for are answered here as on the usual path (no aliases).
    w.lookups.clear();
    // The shared record, and the stream's own beside it (not copied in).
    w.sent =
        Sent::with_own(shared.sent.clone(), resources.iter().map(|(n, e)| (n.clone(), e.version.clone())).collect());
    let mut chain = vec![shared.body.clone()];
    if !resources.is_empty() {
        chain.extend(match protocol {
            Protocol::Sotw => wire::sotw_resources(&resources.iter().map(|(_, e)| e).collect::<Vec<_>>()).0,
            Protocol::Delta => {
                wire::delta_resources(&resources.iter().map(|(n, e)| (&**n, e, &[][..])).collect::<Vec<_>>()).0
            }
        });
    }
    let nonce = (ctx.nonce)();
    chain.push(wire::nonce_field(&nonce));
    Some((crate::grpc::Chain(chain), nonce))
}

/// A change's push to a stream that takes it as the other streams of its
/// reduced class do: subscribed to each changed resource that exists and
/// holding an older version of it, holding none of those that do not
/// exist, asking nothing of its own (no aliases, lookups or forced push;
/// SotW: of a type whose responses carry the changed resources only).
/// Then its push is the one built for the first such stream but for the
/// nonce ([`ChangedResponse`]), where looking each resource up and
/// encoding the response again for each of 1,000 streams was a tenth of
/// the serving core. Only for a change's names shared by streams (those
/// that take the same of the type's changed names, see [`Changes`]).
/// `None`: answer as usual; `Some(None)`: nothing to send.
fn shared_change<M: Send + Sync + 'static, C: super::Class>(
    protocol: Protocol,
    w: &mut Watch,
    kind: Kind,
    dirty: &Dirty,
    class: &Arc<C>,
    ctx: &mut Ctx<'_, M, C>,
) -> Option<Option<(crate::grpc::Chain, Arc<str>)>> {
    let Dirty::Names(names) = dirty else { return None };
    if Arc::strong_count(names) < 2 || w.forced || w.sent_nonce.is_none() || !w.lookups.is_empty() {
        return None;
    }
    if protocol == Protocol::Delta && !w.wildcard && ctx.cache.aliases(ctx.generator, ctx.snap, kind).is_some() {
        return None;
    }
    let reduced = ctx.cache.reduced_for(ctx.generator, ctx.snap, class, kind);
    let sotw = protocol == Protocol::Sotw;
    let (r, first) = match ctx.cache.changed_response(ctx.snap, kind, sotw, names, &reduced) {
        First::Unseen => return None,
        First::Kept(r) => {
            #[cfg(debug_assertions)]
            {
                let counts = (ctx.cache.hits, ctx.cache.misses);
                for (n, version) in &r.versions {
                    let fresh = ctx.cache.get(ctx.generator, ctx.snap, class, kind, n);
                    assert_eq!(
                        fresh.map(|e| e.version).as_ref(),
                        version.as_ref(),
                        "a shared change's {kind:?} {n} differs from the stream's own"
                    );
                }
                (ctx.cache.hits, ctx.cache.misses) = counts;
            }
            (r, false)
        }
        First::Build if names.iter().any(|n| ctx.generator.whole_class(kind, n)) => {
            // Generated for each stream's whole class: not shared (decided
            // once for the change and reduced class).
            ctx.cache.keep_changed_response(kind, sotw, names, &reduced, None);
            return None;
        }
        First::Build => {
            let resources: Vec<(Arc<str>, Option<Encoded>)> =
                names.iter().map(|n| (n.clone(), ctx.cache.get(ctx.generator, ctx.snap, class, kind, n))).collect();
            let existing: Vec<(&str, &Encoded, &[&str])> =
                resources.iter().filter_map(|(n, e)| Some((&**n, e.as_ref()?, &[][..]))).collect();
            let version = ctx.snap.version.to_string();
            let body = (!existing.is_empty()).then(|| {
                let body = match protocol {
                    Protocol::Sotw => {
                        let refs: Vec<&Encoded> = existing.iter().map(|(_, e, _)| *e).collect();
                        wire::sotw_response_body(&version, kind.type_url(), &refs, ctx.control_plane)
                    }
                    Protocol::Delta => {
                        wire::delta_response_body(&version, kind.type_url(), &existing, &[], ctx.control_plane)
                    }
                };
                body.to_bytes()
            });
            let versions = resources.iter().map(|(n, e)| (n.clone(), e.as_ref().map(|e| e.version.clone()))).collect();
            let r = Arc::new(ChangedResponse { versions, body });
            ctx.cache.keep_changed_response(kind, sotw, names, &reduced, Some(r.clone()));
            (r, true)
        }
    };
    let takes = r.versions.iter().all(|(n, version)| match version {
        Some(v) => (w.wildcard || w.names.contains(n)) && w.sent.get(n) != Some(v),
        None => !w.sent.contains(n),
    });
    if !takes {
        return None;
    }
    let Some(body) = &r.body else { return Some(None) };
    if !first {
        ctx.cache.changed_shared += 1;
    }
    w.sent.insert_many(r.versions.iter().filter_map(|(n, v)| Some((n.clone(), v.clone()?))));
    let nonce = (ctx.nonce)();
    Some(Some((crate::grpc::Chain(vec![body.clone(), wire::nonce_field(&nonce)]), nonce)))
}

/// What a stream that holds nothing is sent on a full push: every
/// subscribed resource (`names`, sorted) that exists, with no nonce.
fn first_response<M: Send + Sync + 'static, C: super::Class>(
    protocol: Protocol,
    names: &[Arc<str>],
    kind: Kind,
    class: &Arc<C>,
    ctx: &mut Ctx<'_, M, C>,
) -> FirstResponse {
    let mut resources: Vec<(&Arc<str>, Encoded)> = Vec::with_capacity(names.len());
    for n in names {
        if let Some(e) = ctx.cache.get(ctx.generator, ctx.snap, class, kind, n) {
            resources.push((n, e));
        }
    }
    let sent: NameMap = resources.iter().map(|(n, e)| ((*n).clone(), e.version.clone())).collect();
    let version = ctx.snap.version.to_string();
    let body = match protocol {
        Protocol::Sotw => {
            let refs: Vec<&Encoded> = resources.iter().map(|(_, e)| e).collect();
            wire::sotw_response_body(&version, kind.type_url(), &refs, ctx.control_plane)
        }
        Protocol::Delta => {
            let refs: Vec<(&str, &Encoded, &[&str])> = resources.iter().map(|(n, e)| (&***n, e, &[][..])).collect();
            wire::delta_response_body(&version, kind.type_url(), &refs, &[], ctx.control_plane)
        }
    };
    FirstResponse { body: body.to_bytes(), sent }
}
