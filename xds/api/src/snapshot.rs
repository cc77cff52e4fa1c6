//! What the watcher core publishes to the serving cores: an immutable
//! [`Snapshot`] of the mesh and a [`Delta`] saying what changed since the
//! previous one, and the [`Generator`] interface that turns a snapshot into
//! resources for a class of proxies.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use istiod_proto::envoy::config::core::v3::Node;

use crate::node::{Classified, Peer};

/// The xDS resource types the engine serves, in push order (§ make before
/// break: clusters before the endpoints they use, listeners before routes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// CDS.
    Cluster = 0,
    /// EDS.
    Endpoint = 1,
    /// LDS.
    Listener = 2,
    /// RDS.
    Route = 3,
    /// SDS (gateway credentials), last of istiod's ordered types.
    Secret = 4,
    /// ECDS (Wasm extensions), after the ordered types as istiod pushes it.
    ExtensionConfig = 5,
    /// WDS: ambient workloads and services (`istio.workload.Address`), to
    /// ztunnels.
    Address = 6,
    /// WADS: ambient L4 policies (`istio.security.Authorization`), to
    /// ztunnels.
    Authorization = 7,
    /// NDS: istio-agent's DNS name table
    /// (`istio.networking.nds.v1.NameTable`), to proxies that capture DNS.
    NameTable = 8,
    /// PCDS: istio-agent's proxy configuration
    /// (`istio.mesh.v1alpha1.ProxyConfig`), the workload trust bundle
    /// under `ISTIO_MULTIROOT_MESH`.
    ProxyConfig = 9,
}

impl Kind {
    /// Every kind, in push order.
    pub const ALL: [Kind; 10] = [
        Kind::Cluster,
        Kind::Endpoint,
        Kind::Listener,
        Kind::Route,
        Kind::Secret,
        Kind::ExtensionConfig,
        Kind::Address,
        Kind::Authorization,
        Kind::NameTable,
        Kind::ProxyConfig,
    ];

    /// The type URL on the wire.
    pub fn type_url(self) -> &'static str {
        use istiod_proto::type_url as t;
        match self {
            Kind::Cluster => t::CLUSTER,
            Kind::Endpoint => t::CLUSTER_LOAD_ASSIGNMENT,
            Kind::Listener => t::LISTENER,
            Kind::Route => t::ROUTE_CONFIGURATION,
            Kind::Secret => t::SECRET,
            Kind::ExtensionConfig => t::TYPED_EXTENSION_CONFIG,
            Kind::Address => t::ADDRESS,
            Kind::Authorization => t::AUTHORIZATION,
            Kind::NameTable => t::NAME_TABLE,
            Kind::ProxyConfig => t::PROXY_CONFIG,
        }
    }

    /// The kind of a type URL.
    pub fn from_type_url(url: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.type_url() == url)
    }

    /// Types a proxy receives whole (wildcard) rather than by name: a
    /// first request naming nothing subscribes to all (ztunnel's workload
    /// types too, unless it asks on demand).
    pub fn is_wildcard(self) -> bool {
        matches!(
            self,
            Kind::Cluster | Kind::Listener | Kind::Address | Kind::Authorization | Kind::NameTable | Kind::ProxyConfig
        )
    }

    /// Short name for debug output (`CDS`, ...).
    pub fn short(self) -> &'static str {
        ["CDS", "EDS", "LDS", "RDS", "SDS", "ECDS", "WDS", "WADS", "NDS", "PCDS"][self as usize]
    }
}

/// Bounds on what a class needs: the per-core cache keys on it.
pub trait Class: Clone + Eq + std::hash::Hash + std::fmt::Debug + Send + Sync + 'static {}
impl<T: Clone + Eq + std::hash::Hash + std::fmt::Debug + Send + Sync + 'static> Class for T {}

/// Reasons for a push with their event counts (istiod's `ReasonStats`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reasons(Vec<(&'static str, u32)>);

impl Reasons {
    /// One event of `reason`.
    pub fn one(reason: &'static str) -> Self {
        Reasons(vec![(reason, 1)])
    }

    /// Adds `n` events of `reason`.
    pub fn add(&mut self, reason: &'static str, n: u32) {
        match self.0.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, c)) => *c = c.saturating_add(n),
            None => self.0.push((reason, n)),
        }
    }

    /// Adds another push's reasons (istiod's `PushRequest.Merge`).
    pub fn merge(&mut self, other: &Reasons) {
        for (r, n) in &other.0 {
            self.add(r, *n);
        }
    }

    /// No reason recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The reasons and counts.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u32)> + '_ {
        self.0.iter().copied()
    }
}

/// One resource of the simple model: its encoded message and the snapshot
/// version in which it last changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleResource {
    /// Snapshot version that last changed it.
    pub generation: u64,
    /// The encoded resource message (what goes in `Any.value`).
    pub body: Bytes,
}

/// The mesh as the serving cores see it. Until the mesh model and
/// translation exist, it carries ready-made resources per type; the engine
/// only reads it through a [`Generator`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimpleModel {
    /// Resources by kind (index: `Kind as usize`) and name; persistent
    /// maps, so a snapshot that changes a few resources shares the rest
    /// with the previous one (O(changed), not O(mesh)).
    pub resources: [imbl::OrdMap<Arc<str>, SimpleResource>; Kind::ALL.len()],
}

/// An immutable view of the mesh at one version. `M` is the generator's
/// own input (the translated mesh); the engine never looks inside it.
pub struct Snapshot<M = ()> {
    /// Increases with every publish; the SotW `version_info`.
    pub version: u64,
    /// When the watcher core saw the first change this snapshot carries
    /// (convergence is measured from here to the proxy's ACK).
    pub changed_at: Instant,
    /// Resources every proxy class shares, encoded once.
    pub model: Arc<SimpleModel>,
    /// The generator's own input, for generators that build resources per
    /// proxy class (opaque to the engine).
    pub mesh: Option<Arc<M>>,
    /// Why it was published: istiod's push trigger reasons with their
    /// event counts (`model.ReasonStats`), counted in
    /// `pilot_push_triggers` once per proxy pushed, as istiod does.
    pub reasons: Reasons,
    /// Every resource is sent again, changed or not (istiod's forced push,
    /// `/debug/adsz?push=true`).
    pub forced: bool,
}

impl<M> std::fmt::Debug for Snapshot<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("version", &self.version)
            .field("mesh", &self.mesh.is_some())
            .finish_non_exhaustive()
    }
}

impl<M> Snapshot<M> {
    /// A snapshot of shared resources only.
    pub fn new(version: u64, changed_at: Instant, model: Arc<SimpleModel>) -> Self {
        Self { version, changed_at, model, mesh: None, reasons: Default::default(), forced: false }
    }

    /// The empty snapshot the cores start with (version 0).
    pub fn empty(now: Instant) -> Self {
        Self::new(0, now, Arc::default())
    }
}

/// What changed between two snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delta {
    /// Anything may have changed: every connection is re-evaluated.
    Full,
    /// Exactly these resources changed or were removed.
    Resources(Vec<(Kind, Arc<str>)>),
}

impl Delta {
    /// Merges `other` into `self` (a core that fell behind applies the
    /// union of the deltas it missed, against the newest snapshot).
    pub fn merge(&mut self, other: Delta) {
        match (&mut *self, other) {
            (Delta::Full, _) => {}
            (_, Delta::Full) => *self = Delta::Full,
            (Delta::Resources(a), Delta::Resources(b)) => {
                a.extend(b);
                a.sort();
                a.dedup();
            }
        }
    }

    /// Whether `(kind, name)` may have changed.
    pub fn touches(&self, kind: Kind, name: &str) -> bool {
        match self {
            Delta::Full => true,
            Delta::Resources(r) => r.iter().any(|(k, n)| *k == kind && &**n == name),
        }
    }

    /// Whether any resource of `kind` may have changed.
    pub fn touches_kind(&self, kind: Kind) -> bool {
        match self {
            Delta::Full => true,
            Delta::Resources(r) => r.iter().any(|(k, _)| *k == kind),
        }
    }
}

/// Turns a snapshot into resources for a class of proxies. Implementations
/// must be pure functions of (snapshot, class, kind, name): the per-core
/// cache relies on it, and debug builds check every cache hit against a
/// fresh generation.
pub trait Generator: Send + Sync + 'static {
    /// The generator's own input, carried by every snapshot.
    type Mesh: Send + Sync + 'static;
    /// What a proxy's resources depend on besides the snapshot: proxies of
    /// equal class share cached bytes, so every input a generator reads for
    /// a proxy must be in its class.
    type Class: Class;

    /// Classifies the node of a stream's first request, or says why it is
    /// refused (the stream ends with INVALID_ARGUMENT and the message).
    /// `verified`: the stream's caller was authenticated and the node's
    /// namespace checked against its identity (`istiod_xds::grpc::Call::verified`).
    fn classify(&self, node: Option<&Node>, verified: bool) -> Result<Classified<Self::Class>, String>;

    /// Names a proxy of `class` receives when it subscribes to all of
    /// `kind` (CDS and LDS wildcard).
    fn wildcard_names(&self, snap: &Snapshot<Self::Mesh>, class: &Self::Class, kind: Kind) -> Vec<Arc<str>>;
    /// The generation of exactly the inputs `(kind, name)` reads for
    /// `class`, or `None` when the resource does not exist. It is part of
    /// the cache key and the resource's version.
    fn input_generation(&self, snap: &Snapshot<Self::Mesh>, class: &Self::Class, kind: Kind, name: &str)
    -> Option<u64>;
    /// The encoded resource message.
    fn generate(&self, snap: &Snapshot<Self::Mesh>, class: &Self::Class, kind: Kind, name: &str) -> Option<Bytes>;

    /// The part of `class` that resources of `kind` depend on, when it is
    /// less than the whole class (say the namespace, but not the labels):
    /// proxies whose classes reduce to the same value share one cache
    /// entry and one generation. Names for which [`Generator::whole_class`]
    /// holds always use the whole class. `None`: the whole class matters.
    /// Debug builds check every cache hit against a generation for the
    /// proxy's own class, so a reduction that drops an input fails there.
    fn reduce(&self, _snap: &Snapshot<Self::Mesh>, _class: &Self::Class, _kind: Kind) -> Option<Self::Class> {
        None
    }

    /// What [`Generator::reduce`] reads of `snap` besides the class, as a
    /// value that differs whenever that does, for the classes and types of
    /// which it reads nothing else
    /// ([`Generator::reduction_reads_more`]): their reductions are kept
    /// from one snapshot to the next while the value stays. `None` (the
    /// default): every class is reduced again in every snapshot.
    fn reduction_inputs(&self, _snap: &Snapshot<Self::Mesh>) -> Option<u64> {
        None
    }

    /// Whether [`Generator::reduce`] of `class` for `kind` reads more of a
    /// snapshot than [`Generator::reduction_inputs`] says (then it is
    /// reduced again in every snapshot). Default: it does.
    fn reduction_reads_more(&self, _class: &Self::Class, _kind: Kind) -> bool {
        true
    }

    /// What `/debug/adsz` shows of a class beside its connection:
    /// istiod's `AdsClient` fields `labels`, `metadata`, `locality`.
    fn describe(&self, _class: &Self::Class) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }

    /// The whole class, for the application's own debug answers (a proxy's
    /// scope): `/debug/adsz` carries it under `istiodRs.class`. Default:
    /// null.
    fn class_detail(&self, _class: &Self::Class) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// The part of `class` that its whole-class resources
    /// ([`Generator::whole_class`]) depend on in this snapshot, when less
    /// than the whole (an input the snapshot gives no weight to). `None`:
    /// the whole class.
    fn reduce_whole(&self, _snap: &Snapshot<Self::Mesh>, _class: &Self::Class) -> Option<Self::Class> {
        None
    }

    /// Whether resource `(kind, name)` depends on the whole class (it is
    /// never shared through [`Generator::reduce`]).
    fn whole_class(&self, _kind: Kind, _name: &str) -> bool {
        false
    }

    /// The wildcard names that depend only on the reduced class (the rest
    /// come from [`Generator::class_wildcard_names`]). Default: all of them.
    fn shared_wildcard_names(&self, snap: &Snapshot<Self::Mesh>, class: &Self::Class, kind: Kind) -> Vec<Arc<str>> {
        self.wildcard_names(snap, class, kind)
    }

    /// What to do when a proxy of `class` asks for `type_url` (naming
    /// `names`), a type this server does not serve. Default: nothing (the
    /// request is logged).
    fn unknown_type(
        &self,
        _snap: &Snapshot<Self::Mesh>,
        _class: &Self::Class,
        _type_url: &str,
        _names: &[String],
    ) -> UnknownType {
        UnknownType::Ignore
    }

    /// A stream's proxy became known (its first request), with the
    /// snapshot in force: for what istiod counts when it first looks at a
    /// proxy. Default: nothing.
    fn connected(&self, _snap: &Snapshot<Self::Mesh>, _class: &Self::Class) {}

    /// Whether the application hears of the streams of `class`: when they
    /// open and close, and what they report ([`UnknownType::Notify`]).
    /// Default: no.
    fn tracks(&self, _class: &Self::Class) -> bool {
        false
    }

    /// The wildcard names that depend on the whole class. Default: none.
    fn class_wildcard_names(&self, _snap: &Snapshot<Self::Mesh>, _class: &Self::Class, _kind: Kind) -> Vec<Arc<str>> {
        Vec::new()
    }

    /// Whether [`Generator::class_wildcard_names`] of `class` for `kind`
    /// reads nothing [`Generator::reduce_whole`] leaves out of it: then a
    /// class's own names are those of its whole-class reduction, and
    /// classes that reduce alike share them. Default: no.
    fn own_names_read_whole(&self, _class: &Self::Class, _kind: Kind) -> bool {
        false
    }

    /// For a type whose clients subscribe by names other than the
    /// resources' own (istiod's on-demand workload API: a `<network>/<ip>`,
    /// a service's name standing for its workloads too), what each such
    /// name stands for in `snap`: the resources it resolves to. Computed
    /// once per snapshot and type on each core, and only when a client
    /// subscribes by name. `None` (the default): names are only names, and
    /// one that names nothing is not answered.
    fn aliases(&self, _snap: &Snapshot<Self::Mesh>, _kind: Kind) -> Option<Aliases> {
        None
    }

    /// Names (aliases, see [`Generator::aliases`]) a proxy of `class` that
    /// subscribes to `kind` by name is subscribed to as well, unasked (an
    /// on-demand ztunnel: its node's workloads). Default: none.
    fn implicit_names(&self, _class: &Self::Class, _kind: Kind) -> Vec<Arc<str>> {
        Vec::new()
    }
}

/// What [`Generator::aliases`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Aliases {
    /// By name a client may subscribe to, the resources it stands for
    /// (which may include a resource of that name itself).
    pub stands_for: std::collections::HashMap<Arc<str>, Vec<Arc<str>>>,
    /// By resource, the names it goes out with as its aliases.
    pub of: std::collections::HashMap<Arc<str>, Vec<Arc<str>>>,
}

/// The answer to a request for a type the server does not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnknownType {
    /// None (logged).
    Ignore,
    /// A response without resources to the type's first request (later
    /// requests, its ACKs, get none).
    Empty,
    /// The stream ends with this status.
    Refuse(crate::Code, String),
    /// The type's first request goes to the application (see
    /// `istiod_xds::ads::Forwarded`), whose answer is sent as the response; later
    /// requests, its ACKs, get none.
    Forward,
    /// Every request goes to the application (as a
    /// `istiod_xds::ads::Lifecycle::Report`, for a class
    /// [`Generator::tracks`]) and is not answered: a report from the
    /// proxy, as istio-agent's health information.
    Notify,
}

/// Serves the [`SimpleModel`]'s resources as they are, to every class.
#[derive(Debug, Default, Clone, Copy)]
pub struct SimpleGenerator;

impl Generator for SimpleGenerator {
    type Mesh = ();
    type Class = ();
    fn classify(&self, node: Option<&Node>, _verified: bool) -> Result<Classified<()>, String> {
        match node.filter(|n| !n.id.is_empty()) {
            Some(n) => {
                let id: Arc<str> = n.id.as_str().into();
                Ok(Classified { peer: Peer { name: id.clone(), id, info: Vec::new() }, class: () })
            }
            None => Err("missing node information".into()),
        }
    }
    fn wildcard_names(&self, snap: &Snapshot, _: &(), kind: Kind) -> Vec<Arc<str>> {
        snap.shared_names(kind)
    }
    fn input_generation(&self, snap: &Snapshot, _: &(), kind: Kind, name: &str) -> Option<u64> {
        snap.shared_generation(kind, name)
    }
    fn generate(&self, snap: &Snapshot, _: &(), kind: Kind, name: &str) -> Option<Bytes> {
        snap.shared_body(kind, name)
    }
}

impl<M> Snapshot<M> {
    /// Every name of `kind` in the shared model.
    pub fn shared_names(&self, kind: Kind) -> Vec<Arc<str>> {
        self.model.resources[kind as usize].keys().cloned().collect()
    }

    /// The version in which shared `(kind, name)` last changed.
    pub fn shared_generation(&self, kind: Kind, name: &str) -> Option<u64> {
        self.model.resources[kind as usize].get(name).map(|r| r.generation)
    }

    /// The bytes of shared `(kind, name)`.
    pub fn shared_body(&self, kind: Kind, name: &str) -> Option<Bytes> {
        self.model.resources[kind as usize].get(name).map(|r| r.body.clone())
    }
}

impl SimpleModel {
    /// The model after replacing, adding (`Some`) or removing (`None`)
    /// resources at `version`, and the delta that describes it. Resources
    /// whose bytes did not change keep their generation.
    pub fn apply(&self, version: u64, changes: Vec<(Kind, Arc<str>, Option<Bytes>)>) -> (SimpleModel, Delta) {
        let mut next = self.clone();
        let mut delta = Vec::new();
        for (kind, name, body) in changes {
            let map = &mut next.resources[kind as usize];
            match body {
                Some(body) => {
                    if map.get(&name).is_some_and(|r| r.body == body) {
                        continue;
                    }
                    map.insert(name.clone(), SimpleResource { generation: version, body });
                }
                None => {
                    if map.remove(&name).is_none() {
                        continue;
                    }
                }
            }
            delta.push((kind, name));
        }
        delta.sort();
        delta.dedup();
        (next, Delta::Resources(delta))
    }
}
