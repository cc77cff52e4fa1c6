//! The ADS engine on each serving core: both discovery protocols as a
//! [`grpc::Service`], fed new snapshots by the watcher core through a
//! per-core channel, pushing to exactly the connections a [`Delta`] can
//! affect, in CDS, EDS, LDS, RDS order, from a per-core cache of
//! pre-encoded resources.
//!
//! A connection has at most one push in flight: while bytes of an earlier
//! one are still queued, a new snapshot only marks the stream dirty, and
//! the newest state goes out when the queue drains.

pub mod cache;
pub mod names;
pub mod stream;
pub mod wire;

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use istiod_proto::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DiscoveryRequest, aggregated_discovery_service as paths,
};
use istiod_proto::prost::Message;
use serde_json::{Value, json};

use crate::grpc::{Call, Code, GrpcConnection, Router, Service, Status};
use crate::h2::SendError;
use crate::hash::{IdMap, IdSet};
use crate::server::{Registry, ServiceFactory};
use cache::Cache;
// The contract with generators lives below the serving layer, in
// istiod-xds-api, so that a generator links it without the server.
pub use istiod_xds_api::snapshot::{
    Class, Delta, Generator, Kind, SimpleGenerator, SimpleModel, Snapshot, UnknownType,
};
pub use istiod_xds_api::{node, snapshot};
use stream::{AdsStream, Ctx, Protocol, StreamError};

/// What the watcher core sends a serving core.
#[derive(Debug)]
pub enum Update<M = ()> {
    /// A new snapshot and what changed since the previous one.
    Snapshot(Arc<Snapshot<M>>, Delta),
    /// A debug question; the answer goes back on the channel.
    Debug(DebugQuery, async_channel::Sender<Value>),
}

/// Debug questions the control thread asks every core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DebugQuery {
    /// `/debug/adsz` and `/debug/connections`: connections and their
    /// watches, as istiod's `AdsClient` (`pilot/pkg/xds/debug.go`).
    Adsz,
    /// `/debug/syncz`: a `SyncStatus` per stream (sent and ACKed nonces
    /// per type, as `istioctl proxy-status` reads them), each with the
    /// proxy's namespace for the `?namespace=` filter.
    Syncz,
    /// `/debug/config_dump?proxyID=`: what one proxy was sent. The id is
    /// matched as istiod's `getProxyConnection` matches it (see
    /// [`proxy_id_matches`]).
    ConfigDump(String),
    /// Convergence histogram and cache counters.
    Stats,
    /// The connected proxies' `pod.namespace` names, addresses (the node
    /// id's second field) and types, for `/debug/instancesz`, `pilot_no_ip`
    /// and `/debug/push_status`.
    Proxies,
    /// `/debug/cachez`: the encoded resources cached, as
    /// `[type URL, name, bytes]` rows.
    Cachez,
    /// `/debug/cachez?clear=true`: empties the caches (the next push of
    /// each resource generates it again).
    ClearCache,
    /// `/debug/force_disconnect?proxyID=`: ends the streams of the proxy
    /// the id names (as istiod's `Connection.Stop`, with status OK: the
    /// proxy reconnects); answers how many.
    Disconnect(String),
}

/// A request the ADS service cannot answer itself, for the application
/// ([`UnknownType::Forward`]): istiod's debug types over xDS
/// (`istio.io/debug/*`, `pilot/pkg/xds/statusgen.go` and `debuggen.go`),
/// whose answers span every core.
#[derive(Debug)]
pub struct Forwarded<C> {
    /// The requested type.
    pub type_url: String,
    /// The names requested.
    pub names: Vec<String>,
    /// The caller's class.
    pub class: Arc<C>,
    /// Where the resources of the response go; a dropped sender answers
    /// with none.
    pub reply: async_channel::Sender<Vec<ForwardedResource>>,
}

/// What the application hears of the streams of a class the generator
/// tracks (`Generator::tracks`), in the order they happen on a core.
#[derive(Debug, Clone)]
pub enum Lifecycle<C> {
    /// A stream's proxy is known (its first request).
    Connected {
        /// The stream's connection id ([`connection_id`]).
        conn: String,
        /// The proxy's class.
        class: Arc<C>,
        /// The caller's authenticated identities (SPIFFE ids).
        identities: Arc<[String]>,
        /// When the stream opened.
        at: std::time::SystemTime,
    },
    /// The stream ended.
    Disconnected {
        /// The stream's connection id.
        conn: String,
        /// The proxy's class.
        class: Arc<C>,
        /// When.
        at: std::time::SystemTime,
    },
    /// The proxy sent a request of a type the generator hands over
    /// (`UnknownType::Notify`).
    Report {
        /// The stream's connection id.
        conn: String,
        /// The proxy's class.
        class: Arc<C>,
        /// The request's type URL.
        type_url: String,
        /// Its `error_detail`'s message, when it carries one.
        error: Option<String>,
    },
}

/// One resource of a forwarded request's response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardedResource {
    /// Its name (may be empty, as istiod's unnamed config-dump parts).
    pub name: String,
    /// The type URL of its `Any`.
    pub type_url: String,
    /// The `Any`'s value.
    pub value: Bytes,
}

/// The watcher core's end of the per-core channels.
#[derive(Debug)]
pub struct Publisher<M = ()> {
    cores: Vec<async_channel::Sender<Update<M>>>,
    /// The snapshot published last (what-if predictions start from what
    /// is served). Weak: the cores' holds decide when it is freed, and
    /// where (never on the publishing thread).
    latest: Arc<Mutex<std::sync::Weak<Snapshot<M>>>>,
}

impl<M> Clone for Publisher<M> {
    fn clone(&self) -> Self {
        Publisher { cores: self.cores.clone(), latest: self.latest.clone() }
    }
}

/// Per-core receivers, handed to the cores when they start.
#[derive(Debug)]
pub struct Receivers<M = ()>(Mutex<Vec<Option<async_channel::Receiver<Update<M>>>>>);

/// A core's end of its channel.
pub type UpdateReceiver<M = ()> = async_channel::Receiver<Update<M>>;

impl<M> Receivers<M> {
    /// Takes core `core`'s receiver (once).
    pub fn take(&self, core: usize) -> Option<UpdateReceiver<M>> {
        self.0.lock().ok()?.get_mut(core)?.take()
    }
}

/// One unbounded channel per core: a core that falls behind receives
/// several updates at once and merges their deltas.
pub fn channels<M>(cores: usize) -> (Publisher<M>, Receivers<M>) {
    let (tx, rx): (Vec<_>, Vec<_>) = (0..cores.max(1)).map(|_| async_channel::unbounded()).unzip();
    (
        Publisher { cores: tx, latest: Arc::new(Mutex::new(std::sync::Weak::new())) },
        Receivers(Mutex::new(rx.into_iter().map(Some).collect())),
    )
}

impl<M> Publisher<M> {
    /// Sends a snapshot to every core. Never blocks.
    pub fn publish(&self, snap: Arc<Snapshot<M>>, delta: Delta) {
        for c in &self.cores {
            let _ = c.try_send(Update::Snapshot(snap.clone(), delta.clone()));
        }
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(&snap);
    }

    /// The snapshot published last, while a core holds it.
    pub fn latest(&self) -> Option<Arc<Snapshot<M>>> {
        self.latest.lock().unwrap_or_else(|e| e.into_inner()).upgrade()
    }

    /// Asks every core and collects the answers (cores that are gone are
    /// skipped).
    pub async fn query(&self, q: DebugQuery) -> Vec<Value> {
        let mut answers = Vec::new();
        let mut pending = Vec::new();
        for c in &self.cores {
            let (tx, rx) = async_channel::bounded(1);
            if c.try_send(Update::Debug(q.clone(), tx)).is_ok() {
                pending.push(rx);
            }
        }
        for rx in pending {
            if let Ok(v) = rx.recv().await {
                answers.push(v);
            }
        }
        answers
    }

    /// Asks the cores one after another until one answers `done`: an
    /// action that must happen once across the server (istiod's
    /// `force_disconnect` ends the first matching connection, not one per
    /// core). The answers collected, the deciding one last.
    pub async fn query_until(&self, q: DebugQuery, done: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut answers = Vec::new();
        for c in &self.cores {
            let (tx, rx) = async_channel::bounded(1);
            if c.try_send(Update::Debug(q.clone(), tx)).is_err() {
                continue;
            }
            if let Ok(v) = rx.recv().await {
                let stop = done(&v);
                answers.push(v);
                if stop {
                    break;
                }
            }
        }
        answers
    }

    /// Number of cores.
    pub fn cores(&self) -> usize {
        self.cores.len()
    }
}

/// Makes the ADS service of each core.
pub struct AdsFactory<M = (), C = ()> {
    generator: Arc<dyn Generator<Mesh = M, Class = C>>,
    receivers: Receivers<M>,
    initial: Arc<Snapshot<M>>,
    control_plane: String,
    max_node_bytes: usize,
    max_names: usize,
    push_throttle: usize,
    forward: Option<(async_channel::Sender<Forwarded<C>>, String)>,
    lifecycle: Option<LifecycleTx<C>>,
}

/// Where [`Lifecycle`] events go: streams connecting and ending on one
/// channel, which the application must not bound (each stream sends two
/// at most: a lost one would leave it tracked for ever); reports on
/// another, bounded (a proxy can send them as fast as it likes: when the
/// application is behind they are dropped).
#[derive(Debug)]
pub struct LifecycleTx<C> {
    /// `Connected` and `Disconnected`.
    pub streams: async_channel::Sender<Lifecycle<C>>,
    /// `Report`.
    pub reports: async_channel::Sender<Lifecycle<C>>,
}

impl<C> Clone for LifecycleTx<C> {
    fn clone(&self) -> Self {
        LifecycleTx { streams: self.streams.clone(), reports: self.reports.clone() }
    }
}

impl<M, C> AdsFactory<M, C> {
    /// Cores start from `initial` and follow what the publisher sends.
    pub fn new(
        generator: Arc<dyn Generator<Mesh = M, Class = C>>,
        receivers: Receivers<M>,
        initial: Arc<Snapshot<M>>,
        control_plane: &str,
    ) -> Self {
        // The thread that frees what the cores let go of starts here, with
        // this thread's CPU affinity rather than a pinned core's.
        drop_elsewhere(());
        Self {
            generator,
            receivers,
            initial,
            control_plane: control_plane.to_owned(),
            max_node_bytes: node::DEFAULT_MAX_NODE_BYTES,
            max_names: DEFAULT_MAX_NAMES,
            // istiod's automatic PILOT_PUSH_THROTTLE on two cores.
            push_throttle: 25,
            forward: None,
            lifecycle: None,
        }
    }

    /// Where the streams of tracked classes are reported
    /// ([`Lifecycle`]); without it they are not.
    pub fn lifecycle_to(mut self, tx: LifecycleTx<C>) -> Self {
        self.lifecycle = Some(tx);
        self
    }

    /// Where requests the generator forwards go ([`UnknownType::Forward`]),
    /// and the control plane identifier their answers carry (istiod's
    /// `IstioControlPlaneInstance` JSON); without it they are answered with
    /// no resources.
    pub fn forward_to(mut self, tx: async_channel::Sender<Forwarded<C>>, identifier: String) -> Self {
        self.forward = Some((tx, identifier));
        self
    }

    /// Connections a core pushes a new snapshot to before it lets its
    /// connections read and write (`PILOT_PUSH_THROTTLE`): a push to
    /// thousands of proxies does not hold ACKs and new streams back.
    pub fn push_throttle(mut self, n: usize) -> Self {
        self.push_throttle = n.max(1);
        self
    }

    /// End streams that subscribe to more than `names` resource names.
    pub fn max_names(mut self, names: usize) -> Self {
        self.max_names = names;
        self
    }

    /// Refuse first requests whose node encodes to more than `bytes`.
    pub fn max_node_bytes(mut self, bytes: usize) -> Self {
        self.max_node_bytes = bytes;
        self
    }
}

impl<M: Send + Sync + 'static, C: Class> ServiceFactory for AdsFactory<M, C> {
    type Service = AdsService<M, C>;

    fn make(&self, core: usize, registry: Rc<Registry>) -> AdsService<M, C> {
        AdsService {
            core,
            generator: self.generator.clone(),
            snap: self.initial.clone(),
            cache: Cache::default(),
            classes: HashMap::new(),
            retired_classes: 0,
            max_node_bytes: self.max_node_bytes,
            max_names: self.max_names,
            streams: HashMap::new(),
            by_conn: IdMap::default(),
            deferred: IdSet::default(),
            registry,
            router: Router::new()
                .route(paths::STREAM_AGGREGATED_RESOURCES, Protocol::Sotw)
                .route(paths::DELTA_AGGREGATED_RESOURCES, Protocol::Delta),
            nonce_seq: 0,
            control_plane: self.control_plane.clone(),
            convergence: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds"),
            pushes: 0,
            nacks: 0,
            forward: self.forward.clone(),
            lifecycle: self.lifecycle.clone(),
        }
    }

    fn start(&self, core: usize, svc: Rc<std::cell::RefCell<AdsService<M, C>>>) {
        if let Some(rx) = self.receivers.take(core) {
            glommio::spawn_local(updates(svc, rx, self.push_throttle)).detach();
        }
    }
}

/// The wait between two push batches: any timer waits for the reactor;
/// a short one costs little when nothing else is runnable.
const BATCH_PAUSE: Duration = Duration::from_micros(20);

async fn updates<M: Send + Sync + 'static, C: Class>(
    svc: Rc<std::cell::RefCell<AdsService<M, C>>>,
    rx: async_channel::Receiver<Update<M>>,
    throttle: usize,
) {
    // Connections with a push owed, in the order their snapshot touched
    // them, with when they were queued.
    let mut queue: std::collections::VecDeque<(u64, Instant)> = std::collections::VecDeque::new();
    // What each queued connection's push is for (merged when a newer
    // snapshot marks it again, as istiod's push queue merges requests).
    let mut owed: IdMap<u64, istiod_xds_api::Reasons> = IdMap::default();
    loop {
        // Wait for news only when no push is owed.
        let first = if queue.is_empty() {
            match rx.recv().await {
                Ok(u) => Some(u),
                Err(_) => return,
            }
        } else {
            rx.try_recv().ok()
        };
        // Drain what else is waiting: the newest snapshot wins, deltas merge.
        let mut latest: Option<(Arc<Snapshot<M>>, Delta)> = None;
        let mut reasons = istiod_xds_api::Reasons::default();
        // A forced push among them is owed even when a newer snapshot
        // that is not forced replaces it before the streams are marked.
        let mut forced = false;
        let mut next = first;
        while let Some(u) = next.take().or_else(|| rx.try_recv().ok()) {
            match u {
                Update::Snapshot(s, d) => {
                    reasons.merge(&s.reasons);
                    forced |= s.forced;
                    match &mut latest {
                        Some((snap, delta)) => {
                            *snap = s;
                            delta.merge(d);
                        }
                        None => latest = Some((s, d)),
                    }
                }
                Update::Debug(DebugQuery::Disconnect(id), reply) => {
                    let ended = svc.borrow_mut().disconnect(&id);
                    let _ = reply.try_send(json!(u64::from(ended)));
                }
                Update::Debug(DebugQuery::ClearCache, reply) => {
                    let entries = svc.borrow_mut().cache.clear_all();
                    let _ = reply.try_send(json!(entries));
                }
                Update::Debug(q, reply) => {
                    let answer = svc.borrow().debug(&q);
                    let _ = reply.try_send(answer);
                }
            }
        }
        if let Some((snap, delta)) = latest {
            // A connection already owed a push takes the newest snapshot
            // with it (its streams are marked again).
            let now = Instant::now();
            for id in svc.borrow_mut().mark(snap, delta, forced) {
                match owed.entry(id) {
                    std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().merge(&reasons),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        e.insert(reasons.clone());
                        queue.push_back((id, now));
                    }
                }
            }
        }
        for _ in 0..throttle {
            let Some((id, at)) = queue.pop_front() else { break };
            if let Some(reasons) = owed.remove(&id) {
                // istiod counts each proxy it dequeues for a push.
                crate::metrics::record_push_triggers(&reasons);
            }
            svc.borrow_mut().push_conn(id, at);
        }
        if !queue.is_empty() {
            // Let the reactor run (sockets written, ACKs read, accepts)
            // before the next batch. A yield does not: glommio runs its
            // task queues again at once and polls I/O only when they are
            // empty or the preemption timer fires (`run_task_queues`), even
            // after `yield_task_queue_now` (a test showed a whole push of
            // 300 connections with throttle 1 answering no request). A
            // timer fires only from the reactor, so the next batch waits
            // for the core's runnable tasks to finish and I/O to be polled.
            glommio::timer::sleep(BATCH_PAUSE).await;
        }
    }
}

/// Drops `value` on a thread of its own (a snapshot the core let go of
/// may hold the last reference to a whole model; the control thread's
/// objects a change replaced); inline if that thread cannot be started.
pub fn drop_elsewhere<T: Send + 'static>(value: T) {
    type Garbage = Box<dyn Send>;
    static BIN: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Garbage>>> = std::sync::OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Garbage>();
        let started = std::thread::Builder::new().name("istiod-drop".into()).spawn(move || {
            while let Ok(g) = rx.recv() {
                drop(g);
            }
        });
        started.is_ok().then_some(tx)
    });
    if let Some(tx) = bin {
        // (Dropped here if the thread is gone.)
        let _ = tx.send(Box::new(value));
    }
}

/// A response's nonce, `<core>-<connection>-<sequence>`, unique on the
/// core (written without `format!`: one is made per response).
fn nonce_text(core: usize, conn: u64, seq: u64) -> Arc<str> {
    let mut buf = [0u8; 64];
    let mut at = buf.len();
    for (i, n) in [seq, conn, core as u64].into_iter().enumerate() {
        if i > 0 {
            at -= 1;
            buf[at] = b'-';
        }
        let mut n = n;
        loop {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
    }
    Arc::from(std::str::from_utf8(&buf[at..]).expect("ASCII digits"))
}

/// The ADS service of one core.
pub struct AdsService<M = (), C = ()> {
    core: usize,
    generator: Arc<dyn Generator<Mesh = M, Class = C>>,
    snap: Arc<Snapshot<M>>,
    cache: Cache<C>,
    /// Interned classes and the number of open streams of each: a class
    /// leaves the table (and, in batches, the cache) with its last stream,
    /// so clients cannot grow a core's memory by connecting with ever new
    /// labels.
    classes: HashMap<C, (Arc<C>, usize)>,
    /// Classes retired since the cache was last pruned.
    retired_classes: usize,
    max_node_bytes: usize,
    max_names: usize,
    /// By connection and stream id (SipHash: the peer picks stream ids).
    streams: HashMap<(u64, u32), AdsStream<C>>,
    by_conn: IdMap<u64, Vec<u32>>,
    /// Connections with a push waiting for their queue to drain.
    deferred: IdSet<u64>,
    registry: Rc<Registry>,
    router: Router<Protocol>,
    nonce_seq: u64,
    control_plane: String,
    /// Change seen by the watcher core to ACK, microseconds.
    convergence: Histogram<u64>,
    pushes: u64,
    nacks: u64,
    forward: Option<(async_channel::Sender<Forwarded<C>>, String)>,
    lifecycle: Option<LifecycleTx<C>>,
}

/// Names one stream may subscribe to, unless configured otherwise
/// (`ISTIOD_RS_MAX_NAMES_PER_STREAM`): a sidecar of a mesh with 100,000
/// clusters stays under it; four million names cost ~480 MiB.
pub const DEFAULT_MAX_NAMES: usize = 200_000;

/// Names `/debug/adsz` lists per watch (the rest are counted).
pub const ADSZ_NAMES: usize = 100;

/// A stream's connection id as istiod forms it (`ads.go`
/// `connectionID`: the proxy's `pod.namespace`, a dash, a number unique on
/// this server; istiod has one stream per connection): here the number is
/// the connection's on its core times 4096 plus the core, and a second
/// ADS stream on one HTTP/2 connection adds its stream id.
pub fn connection_id(name: &str, conn: u64, sid: u32, core: usize) -> String {
    let n = conn * 4096 + core as u64;
    if sid <= 1 { format!("{name}-{n}") } else { format!("{name}-{n}.{sid}") }
}

/// A stream's row of `/debug/syncz`: istiod's `SyncStatus`
/// (`pilot/pkg/xds/debug.go`), empty fields left out as its `omitempty`
/// tags leave them out.
fn sync_row<C>(s: &AdsStream<C>, p: &node::Peer) -> Value {
    let mut row = serde_json::Map::new();
    let mut put = |k: &str, v: &str| {
        if !v.is_empty() {
            row.insert(k.to_owned(), json!(v));
        }
    };
    put("cluster_id", p.info("cluster_id"));
    put("proxy", &p.name);
    put("proxy_type", p.info("proxy_type"));
    put("istio_version", p.info("istio_version"));
    let nonces = |k: Kind| {
        let w = s.watches[k as usize].as_ref();
        let sent = w.and_then(|w| w.sent_nonce.as_deref()).unwrap_or("");
        let acked = w.and_then(|w| w.acked.as_ref()).map_or("", |a| &*a.0);
        (sent, acked)
    };
    for (k, field) in
        [(Kind::Cluster, "cluster"), (Kind::Listener, "listener"), (Kind::Route, "route"), (Kind::Endpoint, "endpoint")]
    {
        let (sent, acked) = nonces(k);
        put(&format!("{field}_sent"), sent);
        put(&format!("{field}_acked"), acked);
    }
    let resources: serde_json::Map<String, Value> = Kind::ALL
        .iter()
        .filter_map(|k| {
            let w = s.watches[*k as usize].as_ref()?;
            let mut r = serde_json::Map::new();
            if let Some(n) = &w.sent_nonce {
                r.insert("sent".into(), json!(&**n));
            }
            if let Some((n, _)) = &w.acked {
                r.insert("acked".into(), json!(&**n));
            }
            // Go's time.Time is a struct: omitempty keeps its zero value.
            let sent_time = w
                .sent_at
                .map_or_else(|| GO_ZERO_TIME.to_owned(), |t| istiod_proto::time::rfc3339(istiod_proto::time::wall(t)));
            r.insert("sentTime".into(), json!(sent_time));
            if let Some((_, e)) = &w.nack {
                r.insert("lastError".into(), json!(e));
            }
            Some((k.type_url().to_owned(), Value::Object(r)))
        })
        .collect();
    if !resources.is_empty() {
        row.insert("resources".into(), Value::Object(resources));
    }
    Value::Object(row)
}

/// Where and how to answer a request for a type not served.
struct Reply {
    conn: u64,
    stream: u32,
    protocol: Protocol,
    type_url: String,
    nonce: String,
    version: String,
    control_plane: String,
}

impl Reply {
    /// The response (a rare, small message: encoded by prost).
    fn body(&self, resources: &[ForwardedResource]) -> Bytes {
        use istiod_proto::envoy::config::core::v3::ControlPlane;
        use istiod_proto::envoy::service::discovery::v3::{DeltaDiscoveryResponse, DiscoveryResponse, Resource};
        let any = |r: &ForwardedResource| istiod_proto::prost_types::Any {
            type_url: r.type_url.clone(),
            value: r.value.to_vec(),
        };
        let control_plane = Some(ControlPlane { identifier: self.control_plane.clone() });
        let (version, type_url, nonce) = (self.version.clone(), self.type_url.clone(), self.nonce.clone());
        let bytes = match self.protocol {
            Protocol::Sotw => DiscoveryResponse {
                version_info: version,
                resources: resources.iter().map(any).collect(),
                type_url,
                nonce,
                control_plane,
                ..Default::default()
            }
            .encode_to_vec(),
            Protocol::Delta => DeltaDiscoveryResponse {
                system_version_info: version,
                resources: resources
                    .iter()
                    .map(|r| Resource { name: r.name.clone(), resource: Some(any(r)), ..Default::default() })
                    .collect(),
                type_url,
                nonce,
                control_plane,
                ..Default::default()
            }
            .encode_to_vec(),
        };
        Bytes::from(bytes)
    }
}

/// Go's zero `time.Time` in JSON.
const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Whether debug query `proxy_id` names the stream with connection id
/// `conn_id` and node id `node_id`. istiod's `getProxyConnection`
/// (`debug.go`) takes any substring of the connection id, so `pod.ns`
/// finds the proxy; istioctl may also send the full node id
/// (`sidecar~ip~pod.ns~ns.svc.cluster.local`), matched whole.
pub fn proxy_id_matches(proxy_id: &str, conn_id: &str, node_id: &str) -> bool {
    !proxy_id.is_empty() && (proxy_id == node_id || conn_id.contains(proxy_id))
}

/// Classes retired between two prunings of the cache, at least (a pruning
/// walks the whole cache).
const PRUNE_AFTER_RETIRED: usize = 16;

/// Whether the cache is pruned now, `retired` classes gone since the last
/// pruning and `live` still open. A pruning walks the whole cache and every
/// live class, so it waits for the retired to number a quarter of the live
/// too: N proxies of classes of their own leaving at once (a lost network,
/// a client's restart) prune about log N times, not N / 16 times, each
/// walk the size of what is left (1.1 of the serving core's 6.8 CPU
/// seconds in a connect storm of `large`'s 10,000 sidecars and their
/// disconnection, before).
fn prune_due(retired: usize, live: usize) -> bool {
    retired >= PRUNE_AFTER_RETIRED.max(live / 4)
}

impl<M: Send + Sync + 'static, C: Class> AdsService<M, C> {
    /// Answers a request for a type this server does not serve, as the
    /// generator says: nothing, an empty response to the type's first
    /// request, the application's answer, or the end of the stream with a
    /// status.
    fn unknown_type(&mut self, conn: &mut GrpcConnection, stream: u32, req: stream::Unknown) -> Result<(), Status> {
        let Some(s) = self.streams.get(&(conn.info.id, stream)) else { return Ok(()) };
        let Some(class) = s.class.clone() else { return Ok(()) };
        let proxy = s.proxy.as_ref().map_or("?", |p| &*p.id).to_owned();
        let protocol = s.protocol;
        let type_url = req.type_url.as_str();
        let answer = self.generator.unknown_type(&self.snap, &class, type_url, &req.names);
        match answer {
            UnknownType::Ignore => {
                if req.first {
                    tracing::warn!(target: "ads", proxy, type_url, "request for a type not served; ignored");
                }
                return Ok(());
            }
            UnknownType::Refuse(code, message) => {
                tracing::warn!(target: "ads", proxy, type_url, "{message}");
                return Err(Status::new(code, message));
            }
            UnknownType::Notify => {
                let s = self.streams.get(&(conn.info.id, stream)).filter(|s| s.tracked);
                let name = s.and_then(|s| s.proxy.as_ref()).map(|p| p.name.clone());
                if let (Some(tx), Some(name)) = (&self.lifecycle, name) {
                    let id = connection_id(&name, conn.info.id, stream, self.core);
                    let type_url = req.type_url.clone();
                    let _ = tx.reports.try_send(Lifecycle::Report { conn: id, class, type_url, error: req.error });
                }
                return Ok(());
            }
            UnknownType::Empty | UnknownType::Forward if !req.first => return Ok(()),
            UnknownType::Empty | UnknownType::Forward => {}
        }
        self.nonce_seq += 1;
        let mut reply = Reply {
            conn: conn.info.id,
            stream,
            protocol,
            type_url: req.type_url.clone(),
            nonce: format!("{}-{}-{}", self.core, conn.info.id, self.nonce_seq),
            version: self.snap.version.to_string(),
            control_plane: self.control_plane.clone(),
        };
        match (answer, &self.forward) {
            (UnknownType::Forward, Some((tx, identifier))) => {
                reply.control_plane.clone_from(identifier);
                tracing::debug!(target: "ads", proxy, type_url, names = ?req.names, "forwarded");
                let (reply_tx, reply_rx) = async_channel::bounded(1);
                let ask = Forwarded { type_url: req.type_url, names: req.names, class, reply: reply_tx };
                if tx.try_send(ask).is_err() {
                    // The application is gone: an empty answer.
                    let _ = conn.send_admitted(stream, reply.body(&[]));
                    return Ok(());
                }
                let registry = self.registry.clone();
                // The answer is sent when it comes; a stream gone meanwhile
                // gets nothing. glommio polls a spawned task at once, from
                // inside this call, with the connection borrowed: it yields
                // first, so what follows runs from the executor.
                glommio::spawn_local(async move {
                    futures_lite::future::yield_now().await;
                    let resources = reply_rx.recv().await.unwrap_or_default();
                    let Some(h) = registry.get(reply.conn) else { return };
                    {
                        let mut c = h.conn.borrow_mut();
                        if !c.is_open(reply.stream) {
                            return;
                        }
                        let _ = c.send_admitted(reply.stream, reply.body(&resources));
                    }
                    h.wake();
                })
                .detach();
            }
            _ => {
                tracing::warn!(target: "ads", proxy, type_url, "request for a type not served; answered with no resources");
                // A full queue drops it: the client asks again on reconnect.
                let _ = conn.send_admitted(stream, reply.body(&[]));
            }
        }
        Ok(())
    }

    fn intern(classes: &mut HashMap<C, (Arc<C>, usize)>, c: C) -> Arc<C> {
        let e = classes.entry(c.clone()).or_insert_with(|| (Arc::new(c), 0));
        e.1 += 1;
        e.0.clone()
    }

    /// Forgets stream `sid` of connection `id`: its class goes when its
    /// last stream does, and every few such classes (`prune_due`) the cache
    /// forgets what it held for them.
    fn remove_stream(&mut self, id: u64, sid: u32) {
        let removed = self.streams.remove(&(id, sid));
        if let Some(p) = removed.as_ref().and_then(|s| s.proxy.as_ref()) {
            // istiod's line when a stream ends (ads.go: "ADS: %q %s terminated").
            let conn = connection_id(&p.name, id, sid, self.core);
            let address = removed.as_ref().and_then(|s| s.address).map(|a| a.to_string()).unwrap_or_default();
            tracing::info!(target: "ads", "ADS: \"{address}\" {conn} terminated");
            if let (Some(tx), Some(class)) =
                (&self.lifecycle, removed.as_ref().filter(|s| s.tracked).and_then(|s| s.class.clone()))
            {
                let _ = tx.streams.try_send(Lifecycle::Disconnected { conn, class, at: std::time::SystemTime::now() });
            }
        }
        if let Some(class) = removed.and_then(|s| s.class) {
            let gone = self.classes.get_mut(&*class).is_some_and(|e| {
                e.1 -= 1;
                e.1 == 0
            });
            if gone {
                self.classes.remove(&*class);
                self.retired_classes += 1;
                if prune_due(self.retired_classes, self.classes.len()) {
                    self.retired_classes = 0;
                    self.cache.retain_classes(self.classes.values().map(|(c, _)| Arc::as_ptr(c) as usize).collect());
                }
            }
        }
        if let Some(v) = self.by_conn.get_mut(&id) {
            v.retain(|s| *s != sid);
            if v.is_empty() {
                self.by_conn.remove(&id);
                self.deferred.remove(&id);
            }
        }
    }

    /// Builds and queues what is pending for the streams of one connection,
    /// unless an earlier push is still queued there. `now`: the clock as
    /// the caller read it, the streams' time and the start of the first
    /// response's build; each response built reads it once more (its
    /// build's end, its send time and the next one's start).
    fn flush_conn(&mut self, conn: &mut GrpcConnection, now: Instant) {
        let id = conn.info.id;
        if self.snap.version == 0 {
            // Nothing published yet (the server is still reading its
            // sources): answering now would tell the proxy the mesh is
            // empty. Its requests wait; the first snapshot flushes them.
            return;
        }
        if conn.h2().queued() > 0 {
            self.deferred.insert(id);
            conn.notify_when_drained();
            return;
        }
        self.deferred.remove(&id);
        let Some(stream_ids) = self.by_conn.get(&id) else { return };
        let core = self.core;
        // When the response being built was started: when the one before
        // was built (one clock read ends a build, starts the next and is
        // the built response's send time).
        let mut started = now;
        let seq = &mut self.nonce_seq;
        let mut nonce = move || -> Arc<str> {
            *seq += 1;
            nonce_text(core, id, *seq)
        };
        let mut ended = Vec::new();
        'streams: for &sid in stream_ids {
            let Some(stream) = self.streams.get_mut(&(id, sid)) else { continue };
            while stream.is_dirty() {
                if !conn.has_room() {
                    // Full: the rest stays pending (not built, so never
                    // lost) and goes out when the queue drains.
                    self.deferred.insert(id);
                    conn.notify_when_drained();
                    break 'streams;
                }
                let mut ctx = Ctx {
                    generator: &*self.generator,
                    snap: &self.snap,
                    cache: &mut self.cache,
                    nonce: &mut nonce,
                    control_plane: &self.control_plane,
                    now,
                };
                let Some(out) = stream.flush_next(&mut ctx) else { break };
                let kind = out.kind;
                let size = out.bytes.len();
                let built = Instant::now();
                let took = built.saturating_duration_since(std::mem::replace(&mut started, built));
                match conn.send_admitted_at(sid, out.bytes, built) {
                    Ok(()) => {
                        self.pushes += 1;
                        crate::metrics::PUSHES[kind as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        crate::metrics::PUSH_TIME[kind as usize].record(took);
                        crate::metrics::CONFIG_SIZE[kind as usize].observe(size as f64);
                    }
                    Err(SendError::TooLarge { len, limit }) => {
                        // A real limit: the proxy is told, and the log
                        // names it; its other streams and every other
                        // proxy go on.
                        let msg = format!(
                            "{} response of {len} bytes is over the server's limit of {limit} bytes",
                            kind.short()
                        );
                        let proxy = stream.proxy.as_ref().map_or("?", |p| &*p.id);
                        // A generated response that cannot be delivered:
                        // istiod counts a failed push as an internal error.
                        crate::metrics::INTERNAL_ERRORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tracing::warn!(target: "ads", proxy, "{msg} (ISTIOD_RS_MAX_RESPONSE_BYTES): stream ended");
                        conn.finish(sid, &Status::new(Code::ResourceExhausted, msg));
                        ended.push(sid);
                        break;
                    }
                    Err(_) => break, // stream gone
                }
            }
        }
        for sid in ended {
            self.remove_stream(id, sid);
        }
    }

    /// Applies a new snapshot and pushes to every affected connection at
    /// once (tests; the core's task pushes in batches, see [`Self::mark`]).
    pub fn on_snapshot(&mut self, snap: Arc<Snapshot<M>>, delta: Delta) {
        let now = Instant::now();
        let forced = snap.forced;
        for id in self.mark(snap, delta, forced) {
            self.push_conn(id, now);
        }
    }

    /// Takes a new snapshot and marks the affected streams; returns the
    /// connections that owe a push ([`Self::push_conn`]). `forced`: this
    /// snapshot or one it replaces was a forced push; the streams keep
    /// owing it until their next response, whatever snapshot follows.
    pub fn mark(&mut self, snap: Arc<Snapshot<M>>, delta: Delta, forced: bool) -> Vec<u64> {
        let changed_at = snap.changed_at;
        // The snapshot replaced may be the last reference to a whole
        // model: freed off the serving core (it was 1.3% of a core pushing
        // one change to 1,000 proxies, before the first push).
        drop_elsewhere(std::mem::replace(&mut self.snap, snap));
        // So are the first responses kept for it (up to 32 MiB).
        drop_elsewhere(self.cache.take_first_responses());
        let changes = stream::Changes::of(&delta);
        let mut touched: Vec<u64> = Vec::new();
        for ((conn, _), s) in self.streams.iter_mut() {
            s.on_delta_update(&changes, changed_at, forced);
            if s.is_dirty() {
                touched.push(*conn);
            }
        }
        touched.sort_unstable();
        touched.dedup();
        touched
    }

    /// Pushes what connection `id`'s streams owe (queued for it at
    /// `queued_at`).
    pub fn push_conn(&mut self, id: u64, queued_at: Instant) {
        let Some(shared) = self.registry.get(id) else { return };
        let Ok(mut conn) = shared.conn.try_borrow_mut() else {
            self.deferred.insert(id);
            return;
        };
        let now = Instant::now();
        crate::metrics::QUEUE_TIME.record(now.saturating_duration_since(queued_at));
        self.flush_conn(&mut conn, now);
        drop(conn);
        shared.wake();
    }

    /// Ends the stream of the proxy `proxy_id` names (the first this core
    /// finds, as istiod stops the first matching connection), with status
    /// OK: the proxy reconnects, to this server or another. Whether one
    /// was ended (a connection busy this instant is left as it is).
    fn disconnect(&mut self, proxy_id: &str) -> bool {
        let core = self.core;
        let Some((conn, sid)) = self
            .streams
            .iter()
            .filter(|((conn, sid), s)| {
                s.proxy
                    .as_ref()
                    .is_some_and(|p| proxy_id_matches(proxy_id, &connection_id(&p.name, *conn, *sid, core), &p.id))
            })
            .map(|(k, _)| *k)
            .min()
        else {
            return false;
        };
        let Some(h) = self.registry.get(conn) else { return false };
        let Ok(mut c) = h.conn.try_borrow_mut() else { return false };
        c.finish(sid, &Status::new(Code::Ok, "disconnected by /debug/force_disconnect"));
        drop(c);
        h.wake();
        tracing::info!(target: "ads", proxy_id, "disconnected by /debug/force_disconnect");
        self.remove_stream(conn, sid);
        true
    }

    fn debug(&self, q: &DebugQuery) -> Value {
        match q {
            DebugQuery::Adsz => {
                let conns: Vec<Value> = self
                    .streams
                    .iter()
                    .filter_map(|((conn, sid), s)| {
                        let p = s.proxy.as_ref()?;
                        // istiod's AdsClient (debug.go): watches as names
                        // per type. A stream may hold 200,000 names: the
                        // first few are listed and `istiodRs` counts them.
                        let watches: serde_json::Map<String, Value> = Kind::ALL
                            .iter()
                            .filter_map(|k| {
                                let w = s.watches[*k as usize].as_ref()?;
                                let names: Vec<&str> = w.names.keys().take(ADSZ_NAMES).map(|n| &**n).collect();
                                Some((k.type_url().to_owned(), json!(names)))
                            })
                            .collect();
                        let detail: serde_json::Map<String, Value> = Kind::ALL
                            .iter()
                            .filter_map(|k| {
                                let w = s.watches[*k as usize].as_ref()?;
                                Some((
                                    k.type_url().to_owned(),
                                    json!({
                                        "wildcard": w.wildcard,
                                        "namesTotal": w.names.len(),
                                        "sent": w.sent.len(),
                                        "nonceSent": w.sent_nonce.as_deref(),
                                        "nonceAcked": w.acked.as_ref().map(|a| &*a.0),
                                        "versionSent": w.sent_version.to_string(),
                                        "versionAcked": w.acked.as_ref().map(|a| a.1.to_string()),
                                        "lastNack": w.nack.as_ref().map(|n| &n.1),
                                        "responses": w.responses,
                                    }),
                                ))
                            })
                            .collect();
                        let mut row = json!({
                            "connectionId": connection_id(&p.name, *conn, *sid, self.core),
                            "connectedAt": istiod_proto::time::rfc3339(istiod_proto::time::wall(s.connected_at)),
                            "address": s.address.map(|a| a.to_string()).unwrap_or_default(),
                        });
                        if let (Some(class), Value::Object(o)) = (s.class.as_ref(), &mut row) {
                            o.extend(self.generator.describe(class));
                        }
                        if !watches.is_empty() {
                            row["watches"] = Value::Object(watches);
                        }
                        // Beyond istiod: the node id, the protocol and each
                        // watch's nonces and counts.
                        row["istiodRs"] = json!({
                            "node": &*p.id,
                            "core": self.core,
                            "protocol": if s.protocol == Protocol::Delta { "delta" } else { "sotw" },
                            "watches": detail,
                            "class": s.class.as_ref().map(|c| self.generator.class_detail(c)),
                        });
                        Some(row)
                    })
                    .collect();
                json!({ "core": self.core, "clients": conns })
            }
            DebugQuery::Syncz => {
                let rows: Vec<Value> = self
                    .streams
                    .values()
                    .filter_map(|s| {
                        let p = s.proxy.as_ref()?;
                        // When each type was last sent, for the status
                        // over xDS (a Timestamp, not Go's JSON time).
                        let sent_us: serde_json::Map<String, Value> = Kind::ALL
                            .iter()
                            .filter_map(|k| {
                                let at = s.watches[*k as usize].as_ref()?.sent_at?;
                                let d = istiod_proto::time::wall(at).duration_since(std::time::UNIX_EPOCH).ok()?;
                                Some((k.type_url().to_owned(), json!(d.as_micros() as u64)))
                            })
                            .collect();
                        Some(json!({ "namespace": p.info("namespace"), "status": sync_row(s, p), "sent_unix_us": sent_us }))
                    })
                    .collect();
                Value::Array(rows)
            }
            DebugQuery::ConfigDump(id) => {
                let Some(s) = self.streams.iter().find_map(|((conn, sid), s)| {
                    let p = s.proxy.as_ref()?;
                    proxy_id_matches(id, &connection_id(&p.name, *conn, *sid, self.core), &p.id).then_some(s)
                }) else {
                    return Value::Null;
                };
                let dumps: Vec<Value> = Kind::ALL
                    .iter()
                    .filter_map(|k| {
                        let w = s.watches[*k as usize].as_ref()?;
                        // The bodies as this proxy's class is served them
                        // now (hex), for the control thread to render.
                        let body = |n: &str| {
                            let b = s.class.as_ref().and_then(|c| self.generator.generate(&self.snap, c, *k, n));
                            b.map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>())
                        };
                        Some(json!({
                            "type_url": k.type_url(),
                            "version_info": w.sent_version.to_string(),
                            "resources": w.sent.iter().map(|(n, v)| json!({"name": &**n, "version": &**v, "body": body(n)})).collect::<Vec<_>>(),
                        }))
                    })
                    .collect();
                let proxy = s.proxy.as_ref().map(|p| &*p.id);
                let namespace = s.proxy.as_ref().map(|p| p.info("namespace"));
                json!({ "proxyId": proxy, "namespace": namespace, "configs": dumps })
            }
            // Answered by `disconnect`, which needs the streams mutably.
            DebugQuery::Disconnect(_) | DebugQuery::ClearCache => Value::Null,
            DebugQuery::Cachez => Value::Array(
                self.cache.entries().map(|(kind, name, bytes)| json!([kind.type_url(), name, bytes])).collect(),
            ),
            DebugQuery::Proxies => Value::Array(
                self.streams
                    .values()
                    .filter_map(|s| s.proxy.as_ref())
                    .map(|p| json!([&*p.name, p.id.split('~').nth(1).unwrap_or(""), p.info("proxy_type")]))
                    .collect(),
            ),
            DebugQuery::Stats => {
                let h = &self.convergence;
                let queued: usize = self
                    .by_conn
                    .keys()
                    .filter_map(|id| self.registry.get(*id))
                    .filter_map(|c| c.conn.try_borrow().ok().map(|c| c.queued()))
                    .sum();
                // What the streams track per resource name (memory per
                // proxy grows with it; records of what was sent that
                // streams share with a first response are counted for
                // each of them, their memory once).
                let (mut sent, mut names) = (0usize, 0usize);
                for st in self.streams.values() {
                    for w in st.watches.iter().flatten() {
                        sent += w.sent.len();
                        names += w.names.len();
                    }
                }
                let mut versions: BTreeMap<&str, u64> = BTreeMap::new();
                for p in self.streams.values().filter_map(|s| s.proxy.as_ref()) {
                    *versions.entry(p.info("istio_version")).or_default() += 1;
                }
                json!({
                    "tracked_sent": sent,
                    "tracked_names": names,
                    "queued_bytes": queued,
                    "deferred_connections": self.deferred.len(),
                    "core": self.core,
                    "snapshot_version": self.snap.version,
                    "streams": self.streams.len(),
                    // Streams by their proxy's Istio version (`pilot_xds{version}`).
                    "versions": versions,
                    "classes": self.classes.len(),
                    "pushes": self.pushes,
                    "nacks": self.nacks,
                    "cache": {
                        "entries": self.cache.len(),
                        "hits": self.cache.hits,
                        "misses": self.cache.misses,
                        "evicted_clear": self.cache.evicted_clear,
                        "evicted_size": self.cache.evicted_size,
                        // First responses sent from a shared part.
                        "first_shared": self.cache.first_shared,
                        // Pushes of a change sent from one built for the
                        // streams of their reduced class.
                        "changed_shared": self.cache.changed_shared,
                    },
                    "convergence_us": {
                        "count": h.len(),
                        "p50": h.value_at_quantile(0.5),
                        "p90": h.value_at_quantile(0.9),
                        "p99": h.value_at_quantile(0.99),
                        "max": h.max(),
                    },
                })
            }
        }
    }
}

/// istiod's Knative warm-up (`K_REVISION` set, ads.go `firstRequest`):
/// the process's first ADS stream, of either variant, on any core, is
/// refused with `Unavailable`; the client retries, and Knative's loading
/// request (concurrency 1) does not stay open for the stream's life.
static REFUSE_FIRST_STREAM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Refuses the next ADS stream (once), as istiod does under `K_REVISION`.
pub fn refuse_first_stream() {
    REFUSE_FIRST_STREAM.store(true, std::sync::atomic::Ordering::SeqCst);
}

impl<M: Send + Sync + 'static, C: Class> Service for AdsService<M, C> {
    fn open(&mut self, conn: &mut GrpcConnection, call: &Call) -> Result<(), Status> {
        let protocol = self.router.lookup(&call.request.path)?;
        if REFUSE_FIRST_STREAM.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(Status::new(Code::Unavailable, "server warmup not complete; try again"));
        }
        let id = conn.info.id;
        let mut stream = AdsStream::new(protocol, Instant::now());
        stream.verified = call.verified;
        stream.identities = call.identities.clone();
        stream.address = conn.info.peer;
        self.streams.insert((id, call.stream), stream);
        self.by_conn.entry(id).or_default().push(call.stream);
        Ok(())
    }

    fn message(&mut self, conn: &mut GrpcConnection, stream: u32, msg: Bytes) -> Result<(), Status> {
        let key = (conn.info.id, stream);
        let now = Instant::now();
        let Some(s) = self.streams.get_mut(&key) else { return Ok(()) };
        let known = s.proxy.is_some();
        let classes = &mut self.classes;
        let generator = &*self.generator;
        let limit = self.max_node_bytes;
        let verified = s.verified;
        let mut intern = |node: Option<&istiod_proto::envoy::config::core::v3::Node>| {
            node::check_size(node, limit)?;
            let c = generator.classify(node, verified)?;
            Ok((c.peer, Self::intern(classes, c.class)))
        };
        let result = match s.protocol {
            Protocol::Sotw => DiscoveryRequest::decode(msg)
                .map_err(|e| StreamError::InvalidArgument(format!("invalid DiscoveryRequest: {e}")))
                .and_then(|r| s.on_sotw(r, &mut intern, now)),
            Protocol::Delta => DeltaDiscoveryRequest::decode(msg)
                .map_err(|e| StreamError::InvalidArgument(format!("invalid DeltaDiscoveryRequest: {e}")))
                .and_then(|r| s.on_delta(r, &mut intern, now)),
        };
        let acked = result.map_err(|StreamError::InvalidArgument(m)| Status::new(Code::InvalidArgument, m))?;
        if let Some(p) = s.proxy.as_ref().filter(|_| !known) {
            // istiod's line when a stream's proxy is known (ads.go
            // initConnection: "new connection for node:<connection id>").
            let conn = connection_id(&p.name, key.0, key.1, self.core);
            tracing::info!(target: "ads", "ADS: new connection for node:{conn}");
            if let Some(class) = s.class.as_ref().filter(|_| self.snap.version != 0) {
                self.generator.connected(&self.snap, class);
            }
            if let (Some(tx), Some(class)) = (&self.lifecycle, s.class.clone())
                && self.generator.tracks(&class)
            {
                s.tracked = true;
                let at = std::time::SystemTime::now() - now.saturating_duration_since(s.connected_at);
                let identities = s.identities.clone();
                // (Fails only once the application is gone.)
                let _ = tx.streams.try_send(Lifecycle::Connected { conn, class, identities, at });
            }
        }
        // Held to the bound where names came: this request's, or the
        // server's own since the last (what an alias stands for).
        let names = if s.take_grown() | acked.subscribed { s.subscribed() } else { 0 };
        if names > self.max_names {
            return Err(Status::new(
                Code::ResourceExhausted,
                format!(
                    "stream subscribes to {names} resource names, over the limit of {} (ISTIOD_RS_MAX_NAMES_PER_STREAM)",
                    self.max_names
                ),
            ));
        }
        for us in acked.convergence_us {
            crate::metrics::CONVERGENCE_TIME.record(std::time::Duration::from_micros(us));
            let _ = self.convergence.record(us.max(1));
        }
        self.nacks += acked.nacks;
        if let Some(unknown) = acked.unknown {
            self.unknown_type(conn, stream, unknown)?;
        }
        if self.streams.get(&key).is_some_and(AdsStream::is_dirty) {
            self.flush_conn(conn, Instant::now());
        }
        Ok(())
    }

    fn half_close(&mut self, conn: &mut GrpcConnection, stream: u32) {
        // Finishing a call does not call `closed`: forget the stream here,
        // or a client that half-closes leaves it (and its class) behind.
        conn.finish(stream, &Status::ok());
        self.remove_stream(conn.info.id, stream);
    }

    fn closed(&mut self, conn: &mut GrpcConnection, stream: u32) {
        self.remove_stream(conn.info.id, stream);
    }

    fn drained(&mut self, conn: &mut GrpcConnection) {
        if self.deferred.contains(&conn.info.id) {
            self.flush_conn(conn, Instant::now());
        }
    }
}

#[cfg(test)]
mod tests;
