//! One simulated sidecar: one TCP (or TLS) connection with one ADS stream,
//! state of the world or delta, following Envoy's sequence: CDS and LDS
//! wildcard, EDS for the EDS clusters received, RDS for the route names in
//! the listeners; every response ACKed (or, at the configured fraction,
//! NACKed) with its version and nonce. It decodes only what the protocol
//! needs (cluster and listener names, EDS and RDS names) and, when a change
//! it can see is pending, the one resource that must carry it. Lost
//! connections are retried with backoff; a delta stream resumes with the
//! versions it holds (`initial_resource_versions`).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use istiod_proto::envoy::config::cluster::v3::Cluster;
use istiod_proto::envoy::config::core::v3::Node;
use istiod_proto::envoy::config::endpoint::v3::ClusterLoadAssignment;
use istiod_proto::envoy::config::listener::v3::{Listener, filter};
use istiod_proto::envoy::config::route::v3::{RouteConfiguration, route, route_action};
use istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager,
};
use istiod_proto::envoy::service::discovery::v3::aggregated_discovery_service as ads;
use istiod_proto::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use istiod_proto::google::rpc::Status;
use istiod_proto::prost::{Message, Name};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::churn::{Change, Changes, Expect};
use crate::stats::Live;
use crate::wire;

/// The four types, in push order.
const CDS: usize = 0;
const EDS: usize = 1;
const LDS: usize = 2;
const RDS: usize = 3;

fn type_urls() -> [String; 4] {
    [Cluster::type_url(), ClusterLoadAssignment::type_url(), Listener::type_url(), RouteConfiguration::type_url()]
}

/// TLS towards the server.
#[derive(Clone)]
pub struct Tls {
    /// The connector (roots from `--tls`, ALPN h2).
    pub connector: tokio_rustls::TlsConnector,
    /// The name the server's certificate must carry.
    pub server_name: rustls::pki_types::ServerName<'static>,
}

/// What every proxy of a run shares.
pub struct Shared {
    /// The server's address.
    pub server: SocketAddr,
    /// Local addresses the proxies connect from, in turn (empty: the
    /// kernel's choice). One address and port pair to the server holds at
    /// most the ephemeral port range (about 28,000 here); several
    /// loopback addresses hold more.
    pub sources: Vec<std::net::IpAddr>,
    /// Plaintext runs with the `h2` crate instead of the lean client.
    pub h2_client: bool,
    /// Delta xDS (else state of the world).
    pub delta: bool,
    /// Fraction of responses NACKed once synced.
    pub nack_fraction: f64,
    /// TLS, if any.
    pub tls: Option<Tls>,
    /// The run's end: every proxy stops by then.
    pub deadline: Instant,
    /// Set when the run ends.
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// The changes made so far.
    pub changes: Changes,
    /// Ticks after every change, so that proxies take it at once.
    pub changed: tokio::sync::watch::Receiver<u32>,
    /// Counters and histograms.
    pub live: Arc<Mutex<Live>>,
}

/// Cluster and listener names decoded from resources, by a hash of the
/// resource's bytes: thousands of proxies receive the same resources, and
/// one loadgen core must keep up with what one server sends all of them.
/// One per thread ([`DECODED`]): a lock shared by the runtime's threads,
/// taken for every resource, cost more than decoding twice.
#[derive(Debug, Default)]
struct Decoded {
    clusters: HashMap<(u64, usize), ClusterNames, Fast>,
    listeners: HashMap<(u64, usize), ListenerNames, Fast>,
    /// Whether a resource carries a change, by (resource, change id).
    carries: HashMap<((u64, usize), u32), bool, Fast>,
    /// What a whole resource told a proxy (a delta `Resource` with its
    /// name and version, or a SotW `Any`), by a hash of its bytes: a
    /// connect storm sends 10,000 proxies the same resources, and taking
    /// each apart again (its fields, its name and version checked as UTF-8
    /// and numbered, its type URL compared) was a fifth of loadgen's time.
    /// Keyed by the protocol too: the two wrap resources differently.
    seen: HashMap<((u64, usize), bool), Seen, Fast>,
}

/// The keys of [`Decoded`]'s tables are hashes already: SipHash over them
/// again is wasted.
type Fast = foldhash::fast::RandomState;

/// What one resource told a proxy ([`Decoded::seen`]).
#[derive(Clone, Debug)]
struct Seen {
    /// Its name and version, as [`id`]s (delta only).
    named: Option<(u32, u32)>,
    /// Its type, if one of the four.
    t: Option<usize>,
    /// A cluster's names, if it is a cluster that decoded.
    cluster: Option<ClusterNames>,
    /// A listener's names, if it is a listener that decoded.
    listener: Option<ListenerNames>,
}

impl Seen {
    /// Whether what it told depends only on its bytes: an endpoint or
    /// route resource is also checked against the changes awaited.
    fn whole(&self, st: &State) -> bool {
        st.pending.is_empty() || !matches!(self.t, Some(EDS | RDS))
    }

    fn apply(self, r: &mut Reading) {
        r.versions.extend(self.named);
        r.clusters.extend(self.cluster);
        r.listeners.extend(self.listener);
    }
}

/// A cluster's name and EDS service name ([`NONE`]: not an EDS cluster),
/// as [`id`]s.
type ClusterNames = (u32, u32);
/// A listener's name and its RDS names.
type ListenerNames = (Arc<str>, Arc<[u32]>);

thread_local! {
    static DECODED: std::cell::RefCell<Decoded> = std::cell::RefCell::default();
}

/// Runs `f` on this thread's [`Decoded`].
fn decoded<T>(f: impl FnOnce(&mut Decoded) -> T) -> T {
    DECODED.with(|d| f(&mut d.borrow_mut()))
}

/// A resource's key: a fast hash of its bytes (SipHash over every byte a
/// proxy receives was a tenth of loadgen's time in a connect storm) and
/// their length.
fn key(bytes: &[u8]) -> (u64, usize) {
    use std::hash::BuildHasher;
    (foldhash::quality::FixedState::with_seed(0x5eed).hash_one(bytes), bytes.len())
}

impl Decoded {
    const MAX: usize = 200_000;

    /// A cluster's name and EDS service name.
    fn cluster(&mut self, bytes: &[u8]) -> Option<ClusterNames> {
        let k = key(bytes);
        if let Some(v) = self.clusters.get(&k) {
            return Some(*v);
        }
        let c = Cluster::decode(bytes).ok()?;
        let v = (id(&c.name), eds_name(&c).map_or(NONE, |e| id(&e)));
        if self.clusters.len() >= Self::MAX {
            self.clusters.clear();
        }
        self.clusters.insert(k, v);
        Some(v)
    }

    /// A listener's name and the RDS names of its connection managers.
    fn listener(&mut self, bytes: &[u8]) -> Option<ListenerNames> {
        let k = key(bytes);
        if let Some(v) = self.listeners.get(&k) {
            return Some(v.clone());
        }
        let l = Listener::decode(bytes).ok()?;
        let v = (Arc::from(l.name.as_str()), rds_names(&l).iter().map(|n| id(n)).collect());
        if self.listeners.len() >= Self::MAX {
            self.listeners.clear();
        }
        self.listeners.insert(k, v.clone());
        Some(v)
    }
}

/// "No name" among [`id`]s.
const NONE: u32 = u32::MAX;

/// The run's names and versions, numbered: every proxy holds the same
/// names and mostly the same versions, so a proxy keeps 4-byte numbers
/// (a resource it holds costs 8 bytes with its version, in a sorted
/// vector) and the strings are kept once.
#[derive(Default)]
struct Ids {
    names: Vec<Arc<str>>,
    index: HashMap<Arc<str>, u32>,
}

static IDS: std::sync::LazyLock<std::sync::RwLock<Ids>> = std::sync::LazyLock::new(Default::default);

thread_local! {
    /// This thread's copy of the numbers it has looked up: a number never
    /// changes, and the shared table's lock, taken twice for every
    /// resource a proxy received, was a fifth of loadgen's time in a
    /// connect storm.
    static LOCAL_IDS: std::cell::RefCell<HashMap<Arc<str>, u32, foldhash::fast::RandomState>> =
        std::cell::RefCell::default();
}

/// The number of `s`, given one if it has none.
fn id(s: &str) -> u32 {
    if let Some(i) = LOCAL_IDS.with(|l| l.borrow().get(s).copied()) {
        return i;
    }
    let (i, a) = shared_id(s);
    LOCAL_IDS.with(|l| l.borrow_mut().insert(a, i));
    i
}

/// The number of `s` in the shared table, and its string.
fn shared_id(s: &str) -> (u32, Arc<str>) {
    if let Some((a, i)) = IDS.read().unwrap_or_else(std::sync::PoisonError::into_inner).index.get_key_value(s) {
        return (*i, a.clone());
    }
    let mut ids = IDS.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((a, i)) = ids.index.get_key_value(s) {
        return (*i, a.clone());
    }
    let i = ids.names.len() as u32;
    let a: Arc<str> = Arc::from(s);
    ids.names.push(a.clone());
    ids.index.insert(a.clone(), i);
    (i, a)
}

/// The number of `s`, if it has one.
fn lookup(s: &str) -> Option<u32> {
    IDS.read().unwrap_or_else(std::sync::PoisonError::into_inner).index.get(s).copied()
}

/// The string numbered `i`.
fn name(i: u32) -> Arc<str> {
    IDS.read().unwrap_or_else(std::sync::PoisonError::into_inner).names[i as usize].clone()
}

/// Whether sorted `v` holds `x`.
fn has(v: &[u32], x: u32) -> bool {
    v.binary_search(&x).is_ok()
}

/// A proxy's state, kept across reconnects.
struct State {
    /// The node, encoded once (a decoded `Node` with its metadata costs a
    /// proxy more than the rest of its state); requests append it.
    node: Bytes,
    rng: u64,
    synced_once: bool,
    connected_once: bool,
    /// Clusters held and their EDS service names ([`NONE`]: not an EDS
    /// cluster), sorted by cluster.
    clusters: Vec<(u32, u32)>,
    /// Listener name -> its RDS names.
    listeners: BTreeMap<Arc<str>, Arc<[u32]>>,
    /// Delta: the names held and their versions, per type, sorted.
    versions: [Vec<(u32, u32)>; 4],
    /// SotW: the last ACKed version and the last nonce, per type.
    acked: [String; 4],
    nonce: [String; 4],
    /// Subscribed EDS and RDS names, sorted.
    eds: Vec<u32>,
    rds: Vec<u32>,
    /// Changes seen so far (an index into the shared list) and the ones
    /// this proxy must still converge on.
    cursor: usize,
    pending: Vec<Arc<Change>>,
}

/// How a session ended.
enum End {
    /// The run is over.
    Stopped,
    /// The connection or stream failed.
    Lost(String),
}

/// `msg` with field `number` (a `Node`, already encoded) appended, if
/// given: protobuf reads fields in any order.
fn with_node(mut msg: Vec<u8>, node: Option<(u32, &Bytes)>) -> Vec<u8> {
    if let Some((number, node)) = node {
        let mut varint = |mut v: u64| {
            while v >= 0x80 {
                msg.push((v as u8) | 0x80);
                v >>= 7;
            }
            msg.push(v as u8);
        };
        varint(u64::from(number << 3 | 2));
        varint(node.len() as u64);
        msg.extend_from_slice(node);
    }
    msg
}

/// A gRPC message: the 5-byte prefix (uncompressed, length) and `body`.
pub(crate) fn frame(body: Vec<u8>) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + body.len());
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out.freeze()
}

/// A response of either protocol, as far as the proxy reads it: what it
/// acts on, gathered field by field while the response arrives (its
/// resources are decoded as they come and dropped).
struct Resp {
    t: usize,
    /// State of the world: the response holds every resource of its type
    /// (else a delta: these changed, `removed` went away).
    full: bool,
    version: String,
    nonce: String,
    /// Delta: each resource's name and version.
    versions: Vec<(u32, u32)>,
    /// CDS: each cluster's names; LDS: each listener's.
    clusters: Vec<ClusterNames>,
    listeners: Vec<ListenerNames>,
    /// The pending changes (ids) a resource of the response carries.
    carried: Vec<u32>,
    removed: Vec<String>,
}

/// A response being read.
#[derive(Default)]
struct Reading {
    type_url: String,
    version: String,
    nonce: String,
    versions: Vec<(u32, u32)>,
    clusters: Vec<ClusterNames>,
    listeners: Vec<ListenerNames>,
    carried: Vec<u32>,
    removed: Vec<String>,
}

fn xorshift(x: &mut u64) -> f64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    (*x >> 11) as f64 / (1u64 << 53) as f64
}

/// The EDS service name of a cluster, if it is an EDS cluster.
fn eds_name(c: &Cluster) -> Option<String> {
    c.eds_cluster_config
        .as_ref()
        .map(|e| if e.service_name.is_empty() { c.name.clone() } else { e.service_name.clone() })
}

/// The RDS names of a listener's HTTP connection managers.
fn rds_names(l: &Listener) -> Vec<String> {
    l.filter_chains
        .iter()
        .flat_map(|fc| &fc.filters)
        .filter_map(|f| match &f.config_type {
            Some(filter::ConfigType::TypedConfig(a)) if a.type_url == HttpConnectionManager::type_url() => {
                HttpConnectionManager::decode(a.value.as_slice()).ok()
            }
            _ => None,
        })
        .filter_map(|h| match h.route_specifier {
            Some(http_connection_manager::RouteSpecifier::Rds(r)) => Some(r.route_config_name),
            _ => None,
        })
        .collect()
}

/// Whether `bytes` (a resource of `change`'s type) is `change.resource`
/// and carries what the change expects; decoded once per distinct
/// resource and change (every proxy receives the same bytes).
fn carries(change: &Change, name: Option<&str>, bytes: &[u8]) -> bool {
    if name.is_some_and(|n| n != change.resource) {
        return false;
    }
    let k = (key(bytes), change.id);
    if let Some(known) = decoded(|d| d.carries.get(&k).copied()) {
        return known;
    }
    let answer = carries_decoded(change, bytes);
    decoded(|d| {
        if d.carries.len() >= Decoded::MAX {
            d.carries.clear();
        }
        d.carries.insert(k, answer);
    });
    answer
}

fn carries_decoded(change: &Change, bytes: &[u8]) -> bool {
    match &change.expect {
        Expect::Endpoints(n) => ClusterLoadAssignment::decode(bytes).is_ok_and(|c| {
            c.cluster_name == change.resource && c.endpoints.iter().map(|l| l.lb_endpoints.len()).sum::<usize>() == *n
        }),
        Expect::Weight { cluster, weight } => RouteConfiguration::decode(bytes).is_ok_and(|r| {
            r.name == change.resource
                && r.virtual_hosts.iter().flat_map(|v| &v.routes).any(|rt| match &rt.action {
                    Some(route::Action::Route(a)) => match &a.cluster_specifier {
                        Some(route_action::ClusterSpecifier::WeightedClusters(w)) => {
                            w.clusters.iter().any(|c| c.name == *cluster && c.weight == Some(*weight))
                        }
                        _ => false,
                    },
                    _ => false,
                })
        }),
    }
}

impl State {
    fn new(node: &Node, seed: u64) -> State {
        State {
            node: node.encode_to_vec().into(),
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            synced_once: false,
            connected_once: false,
            clusters: Vec::new(),
            listeners: BTreeMap::new(),
            versions: Default::default(),
            acked: Default::default(),
            nonce: Default::default(),
            eds: Vec::new(),
            rds: Vec::new(),
            cursor: 0,
            pending: Vec::new(),
        }
    }

    /// Takes the changes made since the last look; keeps the ones this
    /// proxy can see, a newer change to a resource replacing an older one.
    fn pull_changes(&mut self, changes: &Changes, live: &Mutex<Live>) {
        let new: Vec<Arc<Change>> = match changes.lock() {
            Ok(c) if c.len() > self.cursor => c[self.cursor..].to_vec(),
            _ => return,
        };
        self.cursor += new.len();
        if let Ok(mut l) = live.lock() {
            for c in &new {
                l.looked(c.id);
            }
        }
        for c in new {
            let held = lookup(&c.cluster).and_then(|i| self.clusters.binary_search_by_key(&i, |(n, _)| *n).ok());
            if held.is_none() {
                continue;
            }
            // A route change reaches the proxies that hold that route
            // configuration (a gateway's routes are its own).
            let routed = lookup(&c.resource).is_some_and(|i| has(&self.rds, i));
            if matches!(c.expect, Expect::Weight { .. }) && !routed {
                continue;
            }
            let before = self.pending.len();
            self.pending.retain(|p| !(p.resource == c.resource && p.cluster == c.cluster));
            if let Ok(mut l) = live.lock() {
                l.superseded += (before - self.pending.len()) as u64;
                l.expected(c.id);
            }
            self.pending.push(c);
        }
    }

    /// Applies a CDS or LDS response; returns whether the EDS or RDS
    /// subscription changed.
    fn apply(&mut self, r: &Resp) -> bool {
        match r.t {
            CDS => {
                merge_sorted(&mut self.clusters, r, r.clusters.iter().copied());
                let mut eds: Vec<u32> = self.clusters.iter().map(|(_, e)| *e).filter(|e| *e != NONE).collect();
                eds.sort_unstable();
                eds.dedup();
                std::mem::replace(&mut self.eds, eds) != self.eds
            }
            LDS => {
                merge(&mut self.listeners, r, r.listeners.iter().cloned());
                let mut rds: Vec<u32> = self.listeners.values().flat_map(|v| v.iter().copied()).collect();
                rds.sort_unstable();
                rds.dedup();
                std::mem::replace(&mut self.rds, rds) != self.rds
            }
            _ => false,
        }
    }

    /// The names this proxy subscribes to by name (EDS, RDS), as a request
    /// carries them.
    fn subscribed(&self, t: usize) -> Vec<String> {
        let names = match t {
            EDS => &self.eds,
            RDS => &self.rds,
            _ => return Vec::new(),
        };
        names.iter().map(|n| name(*n).to_string()).collect()
    }
}

/// Applies a response to what a proxy holds of its type: a state-of-the-
/// world response replaces it all, a delta adds and removes.
fn merge<V>(held: &mut BTreeMap<Arc<str>, V>, r: &Resp, items: impl Iterator<Item = (Arc<str>, V)>) {
    if r.full {
        held.clear();
    }
    for n in &r.removed {
        held.remove(n.as_str());
    }
    held.extend(items);
}

/// [`merge`] for a sorted vector of (name, value) numbers.
fn merge_sorted(held: &mut Vec<(u32, u32)>, r: &Resp, items: impl Iterator<Item = (u32, u32)>) {
    if r.full {
        held.clear();
    }
    if !r.removed.is_empty() {
        let mut removed: Vec<u32> = r.removed.iter().filter_map(|n| lookup(n)).collect();
        removed.sort_unstable();
        held.retain(|(n, _)| removed.binary_search(n).is_err());
    }
    let mut added: Vec<(u32, u32)> = items.collect();
    added.sort_unstable_by_key(|(n, _)| *n);
    added.dedup_by_key(|(n, _)| *n);
    if added.is_empty() {
        return;
    }
    // One merge: the new value wins for a name in both.
    let old = std::mem::take(held);
    held.reserve_exact(old.len() + added.len());
    let (mut a, mut b) = (old.into_iter().peekable(), added.into_iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.0 < y.0 => held.push(a.next().expect("peeked")),
            (Some(x), Some(y)) if x.0 == y.0 => {
                a.next();
                held.push(b.next().expect("peeked"));
            }
            (_, Some(_)) => held.push(b.next().expect("peeked")),
            (Some(_), None) => held.push(a.next().expect("peeked")),
            (None, None) => break,
        }
    }
    held.shrink_to_fit();
}

/// The error a NACK carries.
fn nack_status() -> Status {
    Status { code: 3, message: "loadgen: NACK by design".into(), details: vec![] }
}

/// A request frame of the stream's protocol.
struct Requests {
    delta: bool,
    urls: [String; 4],
}

impl Requests {
    fn sotw(&self, st: &State, t: usize, node: bool, nack: bool) -> Bytes {
        frame(with_node(
            DiscoveryRequest {
                type_url: self.urls[t].clone(),
                version_info: st.acked[t].clone(),
                resource_names: st.subscribed(t),
                response_nonce: st.nonce[t].clone(),
                error_detail: nack.then(nack_status),
                ..Default::default()
            }
            .encode_to_vec(),
            node.then_some((2, &st.node)),
        ))
    }

    fn delta_subscribe(&self, st: &State, t: usize, node: bool, add: Vec<String>, remove: Vec<String>) -> Bytes {
        frame(with_node(
            DeltaDiscoveryRequest {
                type_url: self.urls[t].clone(),
                resource_names_subscribe: add,
                resource_names_unsubscribe: remove,
                initial_resource_versions: if node || t == EDS || t == RDS {
                    st.versions[t].iter().map(|(n, v)| (name(*n).to_string(), name(*v).to_string())).collect()
                } else {
                    BTreeMap::new()
                },
                ..Default::default()
            }
            .encode_to_vec(),
            node.then_some((1, &st.node)),
        ))
    }

    fn delta_ack(&self, t: usize, nonce: &str, nack: bool) -> Bytes {
        frame(
            DeltaDiscoveryRequest {
                type_url: self.urls[t].clone(),
                response_nonce: nonce.to_owned(),
                error_detail: nack.then(nack_status),
                ..Default::default()
            }
            .encode_to_vec(),
        )
    }

    /// Reads one top-level field of a response (SotW: version 1, resource
    /// 2, type 4, nonce 5; delta: resource 2, type 4, nonce 5, removed 6)
    /// into `r`. A resource is decoded here, as far as the proxy needs it,
    /// and dropped: its bytes are slices of what arrived, never a copy.
    fn field(&self, r: &mut Reading, number: u32, value: Bytes, st: &State) -> Result<(), String> {
        let bad = |e: wire::Error| format!("decode: {e}");
        match (self.delta, number) {
            (false, 1) => r.version = text(&value)?,
            (_, 4) => r.type_url = text(&value)?,
            (_, 5) => r.nonce = text(&value)?,
            (_, 2) => {
                let k = (key(&value), self.delta);
                if let Some(seen) = decoded(|d| d.seen.get(&k).cloned())
                    && seen.whole(st)
                {
                    seen.apply(r);
                    return Ok(());
                }
                let seen = if self.delta {
                    // Resource: version (1), resource Any (2), name (3).
                    let (mut name, mut v, mut any) = (Bytes::new(), Bytes::new(), Bytes::new());
                    for f in wire::fields(&value) {
                        match f.map_err(bad)? {
                            (1, b) => v = b,
                            (2, b) => any = b,
                            (3, b) => name = b,
                            _ => {}
                        }
                    }
                    self.resource(r, &any, Some((utf8(&name)?, utf8(&v)?)), st).map_err(bad)?
                } else {
                    self.resource(r, &value, None, st).map_err(bad)?
                };
                decoded(|d| {
                    if d.seen.len() >= Decoded::MAX {
                        d.seen.clear();
                    }
                    d.seen.insert(k, seen);
                });
            }
            (true, 6) => r.removed.push(text(&value)?),
            _ => {}
        }
        Ok(())
    }

    /// One resource (an `Any`, with its delta name and version), read
    /// into `r`; returns what it told, but for the changes it carries.
    fn resource(
        &self,
        r: &mut Reading,
        any: &Bytes,
        named: Option<(&str, &str)>,
        st: &State,
    ) -> Result<Seen, wire::Error> {
        let (mut url, mut body) = (Bytes::new(), Bytes::new());
        for f in wire::fields(any) {
            match f? {
                (1, b) => url = b,
                (2, b) => body = b,
                _ => {}
            }
        }
        let name = named.map(|(n, _)| n);
        let mut seen = Seen { named: named.map(|(n, v)| (id(n), id(v))), t: None, cluster: None, listener: None };
        r.versions.extend(seen.named);
        let Some(t) = self.urls.iter().position(|u| u.as_bytes() == &url[..]) else { return Ok(seen) };
        seen.t = Some(t);
        match t {
            CDS => {
                seen.cluster = decoded(|d| d.cluster(&body));
                r.clusters.extend(seen.cluster);
            }
            LDS => {
                seen.listener = decoded(|d| d.listener(&body));
                r.listeners.extend(seen.listener.clone());
            }
            _ => {
                for c in &st.pending {
                    let ct = if matches!(c.expect, Expect::Endpoints(_)) { EDS } else { RDS };
                    if ct == t && carries(c, name, &body) {
                        r.carried.push(c.id);
                    }
                }
            }
        }
        Ok(seen)
    }

    /// The response read.
    fn finish(&self, r: Reading) -> Result<Resp, String> {
        let t =
            self.urls.iter().position(|u| *u == r.type_url).ok_or_else(|| format!("unexpected type {}", r.type_url))?;
        Ok(Resp {
            t,
            full: !self.delta,
            version: r.version,
            nonce: r.nonce,
            versions: r.versions,
            clusters: r.clusters,
            listeners: r.listeners,
            carried: r.carried,
            removed: r.removed,
        })
    }
}

fn text(b: &Bytes) -> Result<String, String> {
    utf8(b).map(str::to_owned)
}

fn utf8(b: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(b).map_err(|_| "decode: a string is not UTF-8".to_owned())
}

/// Runs proxy `i` until the run stops: connects, syncs (holding a
/// `gate` permit until then), follows every push, reconnects with backoff.
pub async fn run(i: u32, node: Node, shared: Arc<Shared>, gate: Arc<tokio::sync::Semaphore>) {
    let mut st = State::new(&node, u64::from(i) + 1);
    drop(node);
    let mut permit = gate.acquire_owned().await.ok();
    let mut backoff = Duration::from_millis(100);
    let mut never_connected: Option<String> = None;
    let mut stop = shared.stop.clone();
    loop {
        if *stop.borrow() || Instant::now() >= shared.deadline {
            break;
        }
        let source = (!shared.sources.is_empty()).then(|| shared.sources[i as usize % shared.sources.len()]);
        let end = session(&mut st, &shared, source, &mut permit).await;
        let End::Lost(why) = end else { break };
        if let Ok(mut l) = shared.live.lock() {
            if st.connected_once {
                l.error(why);
                if st.synced_once {
                    l.disconnects += 1;
                }
            } else {
                // The server is not there yet (started after loadgen):
                // waiting for it is not an error, never reaching it is.
                l.connect_retries += 1;
                never_connected = Some(why);
            }
        }
        permit = None;
        // Back off (with jitter), unless the run ends first.
        let wait = backoff.mul_f64(0.5 + xorshift(&mut st.rng));
        // A server not yet up is tried every second or so (the run gives up
        // after 10 s if no proxy reaches it); a lost one backs off to 5 s.
        let cap = if st.connected_once { Duration::from_secs(5) } else { Duration::from_secs(1) };
        backoff = (backoff * 2).min(cap);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stop.changed() => break,
        }
    }
    if let (false, Some(why), Ok(mut l)) = (st.connected_once, never_connected, shared.live.lock()) {
        l.error(why);
    }
    // Changes this proxy could see and never got count as missed.
    st.pull_changes(&shared.changes, &shared.live);
}

/// Connects to `server`, from `source` when given.
async fn connect(server: SocketAddr, source: Option<std::net::IpAddr>) -> std::io::Result<tokio::net::TcpStream> {
    let Some(ip) = source else { return tokio::net::TcpStream::connect(server).await };
    let socket = if ip.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.bind(SocketAddr::new(ip, 0))?;
    socket.connect(server).await
}

async fn session(
    st: &mut State,
    shared: &Shared,
    source: Option<std::net::IpAddr>,
    permit: &mut Option<tokio::sync::OwnedSemaphorePermit>,
) -> End {
    let started = Instant::now();
    let tcp = match tokio::time::timeout_at(shared.deadline.into(), connect(shared.server, source)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return End::Lost(format!("connect {}: {e}", shared.server)),
        Err(_) => return End::Stopped,
    };
    let _ = tcp.set_nodelay(true);
    match &shared.tls {
        None if !shared.h2_client => lean_stream(tcp, st, shared, permit, started).await,
        // The h2 crate's futures are large: boxed, they cost a lean proxy's
        // task nothing.
        None => Box::pin(stream(tcp, st, shared, permit, started)).await,
        Some(tls) => {
            Box::pin(async move {
                match tls.connector.connect(tls.server_name.clone(), tcp).await {
                    Ok(io) => stream(io, st, shared, permit, started).await,
                    Err(e) => End::Lost(format!("TLS handshake: {e}")),
                }
            })
            .await
        }
    }
}

async fn stream<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: T,
    st: &mut State,
    shared: &Shared,
    permit: &mut Option<tokio::sync::OwnedSemaphorePermit>,
    started: Instant,
) -> End {
    let (client, conn) = match h2::client::Builder::new().initial_window_size(1 << 20).handshake(io).await {
        Ok(x) => x,
        Err(e) => return End::Lost(format!("HTTP/2 handshake: {e}")),
    };
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut client = match client.ready().await {
        Ok(c) => c,
        Err(e) => return End::Lost(format!("HTTP/2: {e}")),
    };
    let path = if shared.delta { ads::DELTA_AGGREGATED_RESOURCES } else { ads::STREAM_AGGREGATED_RESOURCES };
    let scheme = if shared.tls.is_some() { "https" } else { "http" };
    let Ok(req) = http::Request::builder()
        .method("POST")
        .uri(format!("{scheme}://{}{path}", shared.server))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
    else {
        return End::Lost("request".into());
    };
    let (resp, mut send) = match client.send_request(req, false) {
        Ok(x) => x,
        Err(e) => return End::Lost(format!("stream: {e}")),
    };
    let rq = Requests { delta: shared.delta, urls: type_urls() };
    for f in first_requests(st, &rq) {
        if let Err(e) = send.send_data(f, false) {
            return End::Lost(format!("send: {e}"));
        }
    }
    let mut stop = shared.stop.clone();
    let resp = tokio::select! {
        r = resp => r,
        _ = stop.changed() => return End::Stopped,
        () = tokio::time::sleep_until(shared.deadline.into()) => return End::Stopped,
    };
    let body = match resp {
        Ok(r) => {
            if let Some(s) = r.headers().get("grpc-status") {
                let msg = r.headers().get("grpc-message").and_then(|m| m.to_str().ok()).unwrap_or_default();
                return End::Lost(format!("the server refused the stream: grpc-status {s:?} {msg}"));
            }
            r.into_body()
        }
        Err(e) => return End::Lost(format!("response: {e}")),
    };
    let mut conn = Conn::H2 { body, send };
    follow_stream(&mut conn, st, shared, &rq, permit, started, &mut stop).await
}

/// [`stream`] with the lean client ([`crate::lean`]).
async fn lean_stream(
    tcp: tokio::net::TcpStream,
    st: &mut State,
    shared: &Shared,
    permit: &mut Option<tokio::sync::OwnedSemaphorePermit>,
    started: Instant,
) -> End {
    let path = if shared.delta { ads::DELTA_AGGREGATED_RESOURCES } else { ads::STREAM_AGGREGATED_RESOURCES };
    let client = match crate::lean::Client::open(tcp, &shared.server.to_string(), path).await {
        Ok(c) => c,
        Err(e) => return End::Lost(format!("HTTP/2 handshake: {e}")),
    };
    let mut conn = Conn::Lean(Box::new(client));
    let rq = Requests { delta: shared.delta, urls: type_urls() };
    for f in first_requests(st, &rq) {
        if let Err(e) = conn.send(f).await {
            return End::Lost(e);
        }
    }
    let mut stop = shared.stop.clone();
    follow_stream(&mut conn, st, shared, &rq, permit, started, &mut stop).await
}

/// The first requests of a stream: wildcard CDS and LDS; on a reconnect
/// also the EDS and RDS names held.
fn first_requests(st: &State, rq: &Requests) -> Vec<Bytes> {
    let mut first = Vec::new();
    for t in [CDS, EDS, LDS, RDS] {
        let names = st.subscribed(t);
        if (t == EDS || t == RDS) && names.is_empty() {
            continue;
        }
        first.push(if rq.delta {
            rq.delta_subscribe(st, t, t == CDS, names, vec![])
        } else {
            rq.sotw(st, t, t == CDS, false)
        });
    }
    first
}

/// One stream's transport: the `h2` crate (TLS, `--client h2`) or the
/// lean client.
enum Conn {
    H2 { body: h2::RecvStream, send: h2::SendStream<Bytes> },
    Lean(Box<crate::lean::Client>),
}

impl Conn {
    /// Waits for what arrives next and hands it to `messages`; `Err("")`
    /// when the server ended the stream, else why it was lost.
    async fn read(&mut self, messages: &mut wire::MessageStream) -> Result<(), String> {
        match self {
            Conn::H2 { body, .. } => match body.data().await {
                None => Err(String::new()),
                Some(Err(e)) => Err(format!("read: {e}")),
                Some(Ok(d)) => {
                    let _ = body.flow_control().release_capacity(d.len());
                    messages.push(d);
                    Ok(())
                }
            },
            Conn::Lean(c) => {
                if c.read(messages).await {
                    Ok(())
                } else {
                    Err(String::new())
                }
            }
        }
    }

    async fn send(&mut self, f: Bytes) -> Result<(), String> {
        match self {
            Conn::H2 { send, .. } => send.send_data(f, false).map_err(|e| format!("send: {e}")),
            Conn::Lean(c) => c.send(f).await.map_err(|e| format!("send: {e}")),
        }
    }

    /// Why an ended stream ended: its gRPC status.
    async fn status(&mut self) -> String {
        match self {
            Conn::H2 { body, .. } => match tokio::time::timeout(Duration::from_secs(1), body.trailers()).await {
                Ok(Ok(Some(t))) => format!(
                    "grpc-status {} {}",
                    t.get("grpc-status").and_then(|v| v.to_str().ok()).unwrap_or("?"),
                    t.get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or_default()
                ),
                _ => "no status".into(),
            },
            Conn::Lean(c) => c.ended().unwrap_or("no status").to_owned(),
        }
    }
}

/// Counts the stream, follows it, and says how it ended.
async fn follow_stream(
    conn: &mut Conn,
    st: &mut State,
    shared: &Shared,
    rq: &Requests,
    permit: &mut Option<tokio::sync::OwnedSemaphorePermit>,
    started: Instant,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> End {
    if let Ok(mut l) = shared.live.lock() {
        l.stream(true, !st.connected_once);
    }
    st.connected_once = true;
    let end = follow(conn, st, shared, rq, permit, started, stop).await;
    if let Ok(mut l) = shared.live.lock() {
        l.stream(false, false);
    }
    match end {
        End::Lost(why) if why.is_empty() => {
            // The server ended the stream: say with which status.
            let status = conn.status().await;
            if status.starts_with("the server refused") {
                return End::Lost(status);
            }
            End::Lost(format!("the server closed the stream ({status})"))
        }
        e => e,
    }
}

#[allow(clippy::too_many_arguments, reason = "one session's parts, borrowed from its caller")]
async fn follow(
    conn: &mut Conn,
    st: &mut State,
    shared: &Shared,
    rq: &Requests,
    permit: &mut Option<tokio::sync::OwnedSemaphorePermit>,
    started: Instant,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> End {
    let mut stream = wire::MessageStream::default();
    let mut reading: Option<Reading> = None;
    let mut got = [false; 4];
    let mut synced = false;
    let mut changed = shared.changed.clone();
    loop {
        let read = tokio::select! {
            r = conn.read(&mut stream) => r,
            _ = changed.changed() => {
                st.pull_changes(&shared.changes, &shared.live);
                continue;
            }
            _ = stop.changed() => return End::Stopped,
            () = tokio::time::sleep_until(shared.deadline.into()) => return End::Stopped,
        };
        if let Err(why) = read {
            return End::Lost(why);
        }
        loop {
            let len = match stream.read() {
                Ok(None) => break,
                Err(e) => return End::Lost(format!("decode: {e}")),
                Ok(Some(wire::Event::Field(number, value))) => {
                    // A response starts: the changes it may carry are
                    // known before its resources are read.
                    let r = reading.get_or_insert_with(|| {
                        st.pull_changes(&shared.changes, &shared.live);
                        Reading::default()
                    });
                    if let Err(e) = rq.field(r, number, value, st) {
                        return End::Lost(e);
                    }
                    continue;
                }
                Ok(Some(wire::Event::End(len))) => len,
            };
            let done = reading.take().unwrap_or_else(|| {
                st.pull_changes(&shared.changes, &shared.live);
                Reading::default()
            });
            let r = match rq.finish(done) {
                Ok(r) => r,
                Err(e) => return End::Lost(e),
            };
            let nack = synced && shared.nack_fraction > 0.0 && xorshift(&mut st.rng) < shared.nack_fraction;
            let mut out = Vec::new();
            let mut converged = Vec::new();
            if nack {
                // The NACK names the response it refuses (its nonce) and
                // the version still held.
                st.nonce[r.t].clone_from(&r.nonce);
                out.push(if rq.delta { rq.delta_ack(r.t, &r.nonce, true) } else { rq.sotw(st, r.t, false, true) });
            } else {
                let before = (st.eds.clone(), st.rds.clone());
                let resubscribe = st.apply(&r);
                if rq.delta {
                    merge_sorted(&mut st.versions[r.t], &r, r.versions.iter().copied());
                }
                // Pending changes this response carries.
                st.pending.retain(|c| {
                    if r.carried.contains(&c.id) {
                        converged.push(c.clone());
                        false
                    } else {
                        true
                    }
                });
                st.acked[r.t].clone_from(&r.version);
                st.nonce[r.t].clone_from(&r.nonce);
                out.push(if rq.delta { rq.delta_ack(r.t, &r.nonce, false) } else { rq.sotw(st, r.t, false, false) });
                if resubscribe {
                    let (t, old, new) = if r.t == CDS { (EDS, &before.0, &st.eds) } else { (RDS, &before.1, &st.rds) };
                    out.push(if rq.delta {
                        let add = new.iter().filter(|n| !has(old, **n)).map(|n| name(*n).to_string()).collect();
                        let remove = old.iter().filter(|n| !has(new, **n)).map(|n| name(*n).to_string()).collect();
                        rq.delta_subscribe(st, t, false, add, remove)
                    } else {
                        rq.sotw(st, t, false, false)
                    });
                }
                got[r.t] = true;
            }
            for f in out {
                if let Err(e) = conn.send(f).await {
                    return End::Lost(e);
                }
            }
            let now = Instant::now();
            let just_synced =
                !synced && got[CDS] && got[LDS] && (st.eds.is_empty() || got[EDS]) && (st.rds.is_empty() || got[RDS]);
            if let Ok(mut l) = shared.live.lock() {
                l.response(len as u64, nack);
                if !converged.is_empty() {
                    l.change_responses += 1;
                    l.change_bytes += len as u64;
                }
                for c in &converged {
                    l.converged(c.id, now.saturating_duration_since(c.at));
                }
                if just_synced {
                    l.synced(now - started, !st.synced_once);
                }
            }
            if just_synced {
                synced = true;
                st.synced_once = true;
                // The next proxy may start connecting.
                *permit = None;
            }
        }
    }
}

/// TLS towards a server whose certificate chains to the CA in `ca_file`
/// and names `server_name`.
pub fn tls(ca_file: &std::path::Path, server_name: &str) -> Result<Tls, String> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    let certs =
        rustls::pki_types::CertificateDer::pem_file_iter(ca_file).map_err(|e| format!("{}: {e}", ca_file.display()))?;
    for c in certs {
        let c = c.map_err(|e| format!("{}: {e}", ca_file.display()))?;
        roots.add(c).map_err(|e| format!("{}: {e}", ca_file.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: no certificate", ca_file.display()));
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let server_name = rustls::pki_types::ServerName::try_from(server_name.to_owned())
        .map_err(|e| format!("server name {server_name:?}: {e}"))?;
    Ok(Tls { connector: tokio_rustls::TlsConnector::from(Arc::new(config)), server_name })
}

#[cfg(test)]
mod tests {
    use istiod_proto::envoy::config::cluster::v3::cluster::EdsClusterConfig;
    use istiod_proto::envoy::config::endpoint::v3::{LbEndpoint, LocalityLbEndpoints};
    use istiod_proto::envoy::config::listener::v3::{Filter, FilterChain};
    use istiod_proto::envoy::service::discovery::v3::Resource;
    use istiod_proto::prost_types::Any;

    use super::*;

    fn state(pending: Vec<Arc<Change>>) -> State {
        State { pending, ..State::new(&Node::default(), 1) }
    }

    /// A delta `Resource` (or, with no name, a SotW `Any`) of `msg`.
    fn wrapped<T: Message + Name>(name: Option<&str>, version: &str, msg: &T) -> Bytes {
        let any = Any { type_url: T::type_url(), value: msg.encode_to_vec() };
        match name {
            Some(n) => Bytes::from(
                Resource { name: n.into(), version: version.into(), resource: Some(any), ..Default::default() }
                    .encode_to_vec(),
            ),
            None => Bytes::from(any.encode_to_vec()),
        }
    }

    fn read(rq: &Requests, resource: &Bytes, st: &State) -> Reading {
        let mut r = Reading::default();
        rq.field(&mut r, 2, resource.clone(), st).unwrap();
        r
    }

    /// A resource read a second time (another proxy sent the same bytes)
    /// tells the same as the first time, whichever protocol; an endpoint
    /// resource is still checked against each proxy's awaited changes.
    #[test]
    fn a_resource_read_again_tells_the_same_and_changes_are_still_checked() {
        let cluster = Cluster {
            name: "outbound|80||seen-a.test.svc.cluster.local".into(),
            eds_cluster_config: Some(EdsClusterConfig { service_name: "seen-a-eds".into(), ..Default::default() }),
            ..Default::default()
        };
        let endpoints = |n: usize| ClusterLoadAssignment {
            cluster_name: "seen-b-eds".into(),
            endpoints: vec![LocalityLbEndpoints { lb_endpoints: vec![LbEndpoint::default(); n], ..Default::default() }],
            ..Default::default()
        };
        let change = |id: u32, n: usize| {
            Arc::new(Change {
                id,
                at: Instant::now(),
                kind: crate::scenario::ChurnKind::Eds,
                cluster: "outbound|80||seen-b.test.svc.cluster.local".into(),
                resource: "seen-b-eds".into(),
                expect: Expect::Endpoints(n),
            })
        };
        for delta in [true, false] {
            let rq = Requests { delta, urls: type_urls() };
            let name = |n: &'static str| delta.then_some(n);
            let c = wrapped(name("outbound|80||seen-a.test.svc.cluster.local"), "c1", &cluster);
            let quiet = state(Vec::new());
            let (first, again) = (read(&rq, &c, &quiet), read(&rq, &c, &quiet));
            let want = vec![(id("outbound|80||seen-a.test.svc.cluster.local"), id("seen-a-eds"))];
            assert_eq!(first.clusters, want);
            assert_eq!(again.clusters, want);
            let versions =
                if delta { vec![(id("outbound|80||seen-a.test.svc.cluster.local"), id("c1"))] } else { vec![] };
            assert_eq!(first.versions, versions);
            assert_eq!(again.versions, versions, "the version of a resource read again");

            // Two endpoints: seen first by a proxy awaiting nothing, then
            // by one awaiting two endpoints (carried) and one awaiting
            // three (not carried).
            let e = wrapped(name("seen-b-eds"), "e1", &endpoints(2));
            assert!(read(&rq, &e, &quiet).carried.is_empty());
            let (two, three) = (change(if delta { 7 } else { 8 }, 2), change(9, 3));
            assert_eq!(read(&rq, &e, &state(vec![two.clone()])).carried, [two.id]);
            assert_eq!(read(&rq, &e, &state(vec![two.clone()])).carried, [two.id], "read again");
            assert!(read(&rq, &e, &state(vec![three])).carried.is_empty());
            // And the quiet proxy still gets the version.
            let again = read(&rq, &e, &quiet);
            let versions = if delta { vec![(id("seen-b-eds"), id("e1"))] } else { vec![] };
            assert_eq!(again.versions, versions);

            // A listener and its RDS names, read twice.
            let hcm = HttpConnectionManager {
                route_specifier: Some(http_connection_manager::RouteSpecifier::Rds(
                    istiod_proto::envoy::extensions::filters::network::http_connection_manager::v3::Rds {
                        route_config_name: "seen-route".into(),
                        ..Default::default()
                    },
                )),
                ..Default::default()
            };
            let listener = Listener {
                name: "seen-listener".into(),
                filter_chains: vec![FilterChain {
                    filters: vec![Filter {
                        name: "hcm".into(),
                        config_type: Some(filter::ConfigType::TypedConfig(Any {
                            type_url: HttpConnectionManager::type_url(),
                            value: hcm.encode_to_vec(),
                        })),
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            };
            let l = wrapped(name("seen-listener"), "l1", &listener);
            for r in [read(&rq, &l, &quiet), read(&rq, &l, &quiet)] {
                let names: Vec<(String, Vec<u32>)> =
                    r.listeners.iter().map(|(n, rds)| (n.to_string(), rds.to_vec())).collect();
                assert_eq!(names, [("seen-listener".to_owned(), vec![id("seen-route")])]);
            }

            // The second read is the kept one: what is kept is what it
            // tells.
            let k = (key(&c), delta);
            decoded(|d| d.seen.get_mut(&k).expect("the cluster is kept").cluster = Some((NONE, NONE)));
            assert_eq!(read(&rq, &c, &quiet).clusters, [(NONE, NONE)]);
            decoded(|d| d.seen.remove(&k));
            assert_eq!(read(&rq, &c, &quiet).clusters, want, "read anew once forgotten");
        }
    }
}
