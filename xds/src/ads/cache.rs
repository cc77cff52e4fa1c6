//! The per-core cache of pre-encoded resources. A key is (type, name,
//! proxy class); an entry remembers the generation of the inputs it was
//! made from, so a newer snapshot that changed those inputs misses and
//! regenerates, and one that did not hits. Debug builds regenerate on every
//! hit and compare: a cache key that misses an input is a bug that would
//! leak one proxy's configuration to another.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::names::NameMap;
use super::snapshot::{Aliases, Generator, Kind, Snapshot};
use super::wire::{self, Encoded};
use crate::hash::AddrHasher;

type Key<C> = (Kind, Arc<str>, Arc<C>);

/// Entries above which the cache is cleared (a crude bound; entries are
/// small next to the mesh itself).
const MAX_ENTRIES: usize = 200_000;

/// Which snapshot a wildcard name list was computed from: its version and
/// the address of its resource model (versions alone repeat in tests that
/// build snapshots by hand).
type SnapId = (u64, usize);

/// Wildcard names by (type, class), with the snapshot they come from.
type WildcardNames<C> = HashMap<(Kind, Arc<C>), (SnapId, Arc<[Arc<str>]>)>;

/// What a reduced class was computed from: one snapshot, or every
/// snapshot whose [`Generator::reduction_inputs`] are these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReducedIn {
    Snapshot(SnapId),
    Inputs(u64),
}

/// Reduced classes by (type, address of the proxy's class), with what
/// they were computed from and the class they were computed for.
/// Looked up once per name a proxy is sent: its key is hashed with
/// [`AddrHasher`] (SipHash of it was a third of a warm CDS response's
/// instructions, `scripts/icount`).
type Reduced<C> = HashMap<(Kind, bool, usize), (ReducedIn, Arc<C>, Arc<C>), std::hash::BuildHasherDefault<AddrHasher>>;

fn snap_id<M>(snap: &Snapshot<M>) -> SnapId {
    (snap.version, Arc::as_ptr(&snap.model) as usize)
}

/// A lookup of one snapshot, by the identity of its name and reduced
/// class: names come from the core's interned lists and reduced classes
/// are interned, so thousands of proxies of a class ask with the same
/// pointers. The key holds both `Arc`s, so an address is not reused while
/// its entry lives.
#[derive(Debug)]
struct MemoKey<C> {
    kind: Kind,
    name: Arc<str>,
    class: Arc<C>,
}

impl<C> MemoKey<C> {
    fn addrs(&self) -> (usize, usize) {
        (Arc::as_ptr(&self.name) as *const u8 as usize, Arc::as_ptr(&self.class) as usize)
    }
}

impl<C> PartialEq for MemoKey<C> {
    fn eq(&self, o: &Self) -> bool {
        self.kind == o.kind && self.addrs() == o.addrs()
    }
}
impl<C> Eq for MemoKey<C> {}

impl<C> std::hash::Hash for MemoKey<C> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let (name, class) = self.addrs();
        h.write_usize(self.kind as usize);
        h.write_usize(name);
        h.write_usize(class);
    }
}

type Memo<C> = HashMap<MemoKey<C>, Option<Encoded>, std::hash::BuildHasherDefault<AddrHasher>>;

/// The part of a first response every stream sent the same resources for
/// the same reduced class is sent: all but the nonce and the resources
/// that read the whole class (see `stream::shared_first`).
#[derive(Debug)]
pub struct FirstResponse {
    /// The encoded response without its nonce (and without the class's
    /// own resources).
    pub body: bytes::Bytes,
    /// What a stream sent it holds.
    pub sent: NameMap,
}

/// A push of one change's resources of a type, as every stream of a
/// reduced class that holds an older version of each (and subscribes to
/// each that exists) is sent it: all but the nonce. A change pushed to
/// 1,000 streams looked each changed resource up and encoded the response
/// again for each.
#[derive(Debug)]
pub struct ChangedResponse {
    /// The changed names, each with the version it has for the reduced
    /// class (`None`: it does not exist for it), in name order.
    pub versions: Vec<(Arc<str>, Option<Arc<str>>)>,
    /// The encoded response without its nonce: the resources that exist.
    /// `None` where none does (nothing is sent).
    pub body: Option<bytes::Bytes>,
}

/// A change's names and the reduced class a [`ChangedResponse`] was asked
/// for with (held, so their addresses name nothing else while this is
/// kept), and what became of it.
#[derive(Debug)]
struct ChangedSeen<C> {
    _names: Arc<BTreeSet<Arc<str>>>,
    _reduced: Arc<C>,
    response: Held<ChangedResponse>,
}

/// The reduced class and names a first response was asked for with, and
/// what became of it once a second stream asked the same ([`Held`]).
#[derive(Debug)]
struct FirstSeen<C> {
    reduced: Arc<C>,
    names: Arc<[Arc<str>]>,
    response: Held,
}

/// Where a first response (or a change's, [`ChangedResponse`]) seen once
/// stands.
#[derive(Debug)]
enum Held<R = FirstResponse> {
    /// Asked for once: the next to ask builds it.
    Seen,
    Kept(Arc<R>),
    /// Built, but over the bound (or, for a change's, not to be shared):
    /// answered as usual from then on.
    TooBig,
}

/// First responses of one snapshot by (type, SotW, reduced class's
/// address, hash of the names).
#[derive(Debug)]
struct FirstResponses<C> {
    of: SnapId,
    seen: HashMap<(Kind, bool, usize, u64), FirstSeen<C>, std::hash::BuildHasherDefault<AddrHasher>>,
    /// The names of a wildcard first response by (type, class's address),
    /// see [`Cache::wildcard_first_names`].
    wildcard: HashMap<(Kind, usize), WildcardFirst<C>, std::hash::BuildHasherDefault<AddrHasher>>,
    /// The shared wildcard names of a reduced class by (type, its
    /// address), sorted, held by the wildcard first names of each class
    /// that reduces to it; `None` where one of them reads the whole class.
    /// With the list's hash ([`names_hash`]).
    #[allow(clippy::type_complexity)]
    wildcard_rest:
        HashMap<(Kind, usize), (Arc<C>, Option<(Arc<[Arc<str>]>, u64)>), std::hash::BuildHasherDefault<AddrHasher>>,
    /// Responses to a change by (type, SotW, address of its names, reduced
    /// class's address), see [`Cache::changed_response`].
    changed: HashMap<(Kind, bool, usize, usize), ChangedSeen<C>, std::hash::BuildHasherDefault<AddrHasher>>,
    /// A class's own wildcard names by (type, address of its whole-class
    /// reduction), where the generator reads no more for them
    /// ([`Generator::own_names_read_whole`]), see [`Cache::own_wildcard_names`].
    #[allow(clippy::type_complexity)]
    own: HashMap<(Kind, usize), (Arc<C>, Arc<[Arc<str>]>), std::hash::BuildHasherDefault<AddrHasher>>,
    /// Bytes held (bodies, records of what was sent, lists of names),
    /// bounded by [`MAX_FIRST_BYTES`].
    bytes: usize,
}

impl<C> FirstResponses<C> {
    /// What is kept for `snap` (what was kept for another snapshot is let
    /// go).
    fn of_snapshot<M>(&mut self, snap: &Snapshot<M>) -> &mut Self {
        let id = snap_id(snap);
        if self.of != id {
            *self = FirstResponses { of: id, ..FirstResponses::default() };
        }
        self
    }
}

impl<C> Default for FirstResponses<C> {
    fn default() -> Self {
        FirstResponses {
            of: (0, 0),
            seen: HashMap::default(),
            wildcard: HashMap::default(),
            wildcard_rest: HashMap::default(),
            changed: HashMap::default(),
            own: HashMap::default(),
            bytes: 0,
        }
    }
}

/// A class's wildcard first names, sorted: its own (those that read the
/// whole class) and the rest. The class is held so that its address
/// names no other class while this is kept.
#[derive(Debug)]
struct WildcardFirst<C> {
    _class: Arc<C>,
    own: Arc<[Arc<str>]>,
    rest: Arc<[Arc<str>]>,
    /// [`names_hash`] of `rest`.
    hash: u64,
}

/// First responses and responses to a change remembered per snapshot
/// (and, separately, classes' wildcard first names, reduced classes'
/// shared names and whole-class reductions' own names: up to five times
/// this many entries), and the bytes held for them all (responses,
/// records of what was sent, lists of names), beyond which nothing more
/// is remembered until the next snapshot (or until classes are pruned,
/// `Cache::retain_classes`, which starts the record again): a mesh of
/// thousands of distinct classes pays a lookup per first response, and
/// what was kept stays kept.
const MAX_FIRST: usize = 4096;
const MAX_FIRST_BYTES: usize = 32 << 20;

fn changed_key<C>(
    kind: Kind,
    sotw: bool,
    names: &Arc<BTreeSet<Arc<str>>>,
    reduced: &Arc<C>,
) -> (Kind, bool, usize, usize) {
    (kind, sotw, Arc::as_ptr(names) as usize, Arc::as_ptr(reduced) as *const u8 as usize)
}

fn first_key<C>(kind: Kind, sotw: bool, reduced: &Arc<C>, names: &FirstNames<'_>) -> (Kind, bool, usize, u64) {
    (kind, sotw, Arc::as_ptr(reduced) as *const u8 as usize, names.hash)
}

/// The names of a first response's shared part, sorted, with their hash,
/// and the list itself where one is kept (by
/// [`Cache::wildcard_first_names`]): a kept list is remembered as it is
/// and compared by its address, where other lists are copied and compared
/// name by name.
#[derive(Debug, Clone, Copy)]
pub struct FirstNames<'a> {
    /// The names.
    pub names: &'a [Arc<str>],
    hash: u64,
    kept: Option<&'a Arc<[Arc<str>]>>,
}

impl<'a> FirstNames<'a> {
    /// Names collected for one stream.
    pub fn new(names: &'a [Arc<str>]) -> Self {
        FirstNames { names, hash: names_hash(names), kept: None }
    }

    /// Names kept by [`Cache::wildcard_first_names`], with their hash.
    pub(super) fn kept(names: &'a Arc<[Arc<str>]>, hash: u64) -> Self {
        FirstNames { names, hash, kept: Some(names) }
    }

    /// Whether `kept` holds these names.
    fn are(&self, kept: &Arc<[Arc<str>]>) -> bool {
        self.kept.is_some_and(|k| Arc::ptr_eq(k, kept)) || **kept == *self.names
    }
}

/// `names` (sorted and without repeats unless `sort`) split into those
/// that read the whole class and the rest, both sorted: the two parts of
/// a first response.
pub fn split_first_names<M: Send + Sync + 'static, C: super::Class>(
    generator: &dyn Generator<Mesh = M, Class = C>,
    kind: Kind,
    mut names: Vec<Arc<str>>,
    sort: bool,
) -> (Vec<Arc<str>>, Vec<Arc<str>>) {
    if sort {
        // Mostly sorted already: a stable sort finds the runs.
        names.sort();
        names.dedup();
    }
    names.into_iter().partition(|n| generator.whole_class(kind, n))
}

/// A class's wildcard first names ([`Cache::wildcard_first_names`]): its
/// own, and the rest with their hash.
pub type WildcardFirstNames = (Arc<[Arc<str>]>, Arc<[Arc<str>]>, u64);

/// What [`Cache::first_response`] (or [`Cache::changed_response`]) found.
pub enum First<R = FirstResponse> {
    /// The response, kept.
    Kept(Arc<R>),
    /// The second stream to ask: build the response and keep it
    /// ([`Cache::keep_first_response`], [`Cache::keep_changed_response`]).
    Build,
    /// Answer as usual: the first to ask (remembered, if within the
    /// bound), or a response too big to keep, or a hash collision.
    Unseen,
}

/// A hash of names by their addresses (the core's interned names: equal
/// names share them).
fn names_hash(names: &[Arc<str>]) -> u64 {
    use std::hash::Hasher;
    let mut h = AddrHasher::default();
    h.write_usize(names.len());
    for n in names {
        h.write_usize(Arc::as_ptr(n) as *const u8 as usize);
    }
    h.finish()
}

/// One core's cache, for proxy classes `C`.
#[derive(Debug)]
pub struct Cache<C = ()> {
    map: HashMap<Key<C>, (u64, Encoded)>,
    /// Wildcard (CDS/LDS) names per class, for the snapshot they were
    /// computed from: every SotW push of a wildcard type needs them, and
    /// with per-class scoping they cost a visibility check per name.
    wildcard: WildcardNames<C>,
    /// The shared part of the wildcard names, per reduced class.
    shared_wildcard: WildcardNames<C>,
    /// The reduced class of each proxy class, per type (see
    /// `Generator::reduce`), and one `Arc` per distinct reduced class.
    reduced: Reduced<C>,
    /// The snapshot's [`Generator::reduction_inputs`], for the snapshot
    /// they were asked for.
    reduction_inputs: (SnapId, Option<u64>),
    interned: HashMap<C, Arc<C>>,
    /// The answers [`Cache::get`] gave for the snapshot `memo_of`: a
    /// connect storm asks the same (kind, name, reduced class) once per
    /// proxy, and deciding whether a proxy is served a name and from which
    /// inputs costs more than the answer.
    memo: Memo<C>,
    memo_of: SnapId,
    /// Aliases per type, for the snapshot they were computed from (see
    /// `Generator::aliases`).
    aliases: HashMap<Kind, (SnapId, Option<Arc<Aliases>>)>,
    /// First responses shared by the streams of a class.
    first: FirstResponses<C>,
    /// First responses sent from `first` (the cores' stats).
    pub first_shared: u64,
    /// Shared parts built (tests: one per key and snapshot at most).
    pub first_built: u64,
    /// Pushes of a change sent from a kept [`ChangedResponse`] (not
    /// counting the one it was built for).
    pub changed_shared: u64,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that generated.
    pub misses: u64,
    /// Entries dropped because their inputs changed or their class went
    /// (`xds_cache_evictions{type="clear"}`).
    pub evicted_clear: u64,
    /// Entries dropped by the size bound (`{type="size"}`).
    pub evicted_size: u64,
}

impl<C> Default for Cache<C> {
    fn default() -> Self {
        Self {
            map: HashMap::new(),
            wildcard: HashMap::new(),
            shared_wildcard: HashMap::new(),
            reduced: Reduced::default(),
            reduction_inputs: ((0, 0), None),
            interned: HashMap::new(),
            memo: Memo::default(),
            memo_of: (0, 0),
            aliases: HashMap::new(),
            first: FirstResponses::default(),
            first_shared: 0,
            first_built: 0,
            changed_shared: 0,
            hits: 0,
            misses: 0,
            evicted_clear: 0,
            evicted_size: 0,
        }
    }
}

impl<C> Cache<C> {
    /// Forgets every entry, and tells the cache gauges.
    fn clear_map(&mut self) {
        let bytes: i64 = self.map.values().map(|(_, e)| e.any.len() as i64).sum();
        crate::metrics::cache_delta(-(self.map.len() as i64), -bytes);
        self.map.clear();
    }
}

impl<C> Drop for Cache<C> {
    fn drop(&mut self) {
        self.clear_map();
    }
}

impl<C: super::Class> Cache<C> {
    /// The encoded resource, from the cache or freshly generated; `None`
    /// when it does not exist in `snap`.
    ///
    /// The answer is remembered for the snapshot by (kind, name, reduced
    /// class): the generator's reduction keeps everything a resource and
    /// its inputs depend on (debug builds check each remembered answer
    /// against a fresh lookup for the asking class).
    pub fn get<M: Send + Sync + 'static>(
        &mut self,
        generator: &dyn Generator<Mesh = M, Class = C>,
        snap: &Snapshot<M>,
        class: &Arc<C>,
        kind: Kind,
        name: &Arc<str>,
    ) -> Option<Encoded> {
        let id = snap_id(snap);
        if self.memo_of != id {
            // A connect storm's memo can hold 200,000 answers: its table
            // goes with the snapshot, not just its entries.
            if self.memo.capacity() > 4096 {
                self.memo = Memo::default();
            } else {
                self.memo.clear();
            }
            self.memo_of = id;
        }
        let reduced = self.class_for(generator, snap, class, kind, name);
        let key = MemoKey { kind, name: name.clone(), class: reduced };
        if let Some(answer) = self.memo.get(&key) {
            self.hits += 1;
            let answer = answer.clone();
            #[cfg(debug_assertions)]
            {
                let counts = (self.hits, self.misses);
                let fresh = self.lookup(generator, snap, class, kind, name, key.class.clone());
                (self.hits, self.misses) = counts;
                assert_eq!(
                    fresh.as_ref().map(|e| &e.any),
                    answer.as_ref().map(|e| &e.any),
                    "remembered {kind:?} {name} differs from a fresh lookup for the class"
                );
            }
            return answer;
        }
        let answer = self.lookup(generator, snap, class, kind, name, key.class.clone());
        if self.memo.len() >= MAX_ENTRIES {
            self.memo.clear();
        }
        self.memo.insert(key, answer.clone());
        answer
    }

    /// [`Cache::get`] without the snapshot's memo.
    fn lookup<M: Send + Sync + 'static>(
        &mut self,
        generator: &dyn Generator<Mesh = M, Class = C>,
        snap: &Snapshot<M>,
        class: &Arc<C>,
        kind: Kind,
        name: &Arc<str>,
        reduced: Arc<C>,
    ) -> Option<Encoded> {
        let input = generator.input_generation(snap, class, kind, name)?;
        let key = (kind, name.clone(), reduced);
        if let Some((generation, e)) = self.map.get(&key)
            && *generation == input
        {
            self.hits += 1;
            #[cfg(debug_assertions)]
            {
                let fresh = generator.generate(snap, class, kind, name).map(|b| wire::any(kind.type_url(), &b));
                assert_eq!(
                    fresh.as_ref(),
                    Some(&e.any),
                    "cache entry for {kind:?} {name} differs from a fresh generation"
                );
            }
            return Some(e.clone());
        }
        self.misses += 1;
        let body = generator.generate(snap, class, kind, name)?;
        // The version is a hash of the bytes: two inputs that make the same
        // resource make the same version, so a proxy is not sent again
        // what it has.
        let version = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            body.hash(&mut h);
            format!("{:016x}", h.finish())
        };
        let e = Encoded { any: wire::any(kind.type_url(), &body), version: version.into() };
        if self.map.len() >= MAX_ENTRIES {
            self.evicted_size += self.map.len() as u64;
            self.clear_map();
        }
        let len = e.any.len() as i64;
        match self.map.insert(key, (input, e.clone())) {
            Some((_, old)) => {
                // Its inputs changed: istiod's cache clears such keys.
                self.evicted_clear += 1;
                crate::metrics::cache_delta(0, len - old.any.len() as i64)
            }
            None => crate::metrics::cache_delta(1, len),
        }
        Some(e)
    }

    /// The class `(kind, name)` is generated and cached for: the
    /// generator's reduction of `class`, one `Arc` per distinct value.
    fn class_for<M: Send + Sync + 'static>(
        &mut self,
        generator: &dyn Generator<Mesh = M, Class = C>,
        snap: &Snapshot<M>,
        class: &Arc<C>,
        kind: Kind,
        name: &str,
    ) -> Arc<C> {
        let whole = generator.whole_class(kind, name);
        self.reduced_class(generator, snap, class, kind, whole)
    }

    /// The reduction of `class` for `kind`, or for its whole-class names.
    fn reduced_class<M: Send + Sync + 'static>(
        &mut self,
        generator: &dyn Generator<Mesh = M, Class = C>,
        snap: &Snapshot<M>,
        class: &Arc<C>,
        kind: Kind,
        whole: bool,
    ) -> Arc<C> {
        let id = snap_id(snap);
        if self.reduction_inputs.0 != id {
            self.reduction_inputs = (id, generator.reduction_inputs(snap));
        }
        // A reduction kept from an earlier snapshot whose reduction inputs
        // were these (never for whole-class names: see below).
        let inputs = self.reduction_inputs.1.filter(|_| !whole);
        let key = (kind, whole, Arc::as_ptr(class) as usize);
        if let Some((at, of, reduced)) = self.reduced.get(&key)
            && (*at == ReducedIn::Snapshot(id) || inputs.is_some_and(|i| *at == ReducedIn::Inputs(i)))
            && Arc::ptr_eq(of, class)
        {
            #[cfg(debug_assertions)]
            if *at != ReducedIn::Snapshot(id) {
                let fresh = generator.reduce(snap, class, kind);
                assert!(
                    fresh.as_ref().unwrap_or(class) == &**reduced,
                    "the reduction of a class for {kind:?} kept from an earlier snapshot differs from a fresh one"
                );
            }
            return reduced.clone();
        }
        let reduced =
            match if whole { generator.reduce_whole(snap, class) } else { generator.reduce(snap, class, kind) } {
                None => class.clone(),
                Some(r) => {
                    if self.interned.len() >= MAX_ENTRIES / 10 {
                        self.interned.clear();
                    }
                    self.interned.entry(r.clone()).or_insert_with(|| Arc::new(r)).clone()
                }
            };
        if self.reduced.len() >= MAX_ENTRIES / 10 {
            self.reduced.clear();
        }
        // Whole-class names read the snapshot's claimed addresses and the
        // proxy's Sidecar: reduced again in every snapshot.
        let at = match inputs {
            Some(i) if !generator.reduction_reads_more(class, kind) => ReducedIn::Inputs(i),
            _ => ReducedIn::Snapshot(id),
        };
        self.reduced.insert(key, (at, class.clone(), reduced.clone()));
        reduced
    }

    /// The names a proxy of `class` receives on a wildcard subscription to
    /// `kind`: the shared part computed once per reduced class and
    /// snapshot, the class's own names once per class and snapshot.
    pub fn wildcard_names<M: Send + Sync + 'static>(
        &mut self,
        generator: &dyn Generator<Mesh = M, Class = C>,
        snap: &Snapshot<M>,
        class: &Arc<C>,
        kind: Kind,
    ) -> Arc<[Arc<str>]> {
        let id = snap_id(snap);
        let key = (kind, class.clone());
        if let Some((at, names)) = self.wildcard.get(&key)
            && *at == id
        {
            return names.clone();
        }
        let reduced = self.class_for(generator, snap, class, kind, "");
        let names: Arc<[Arc<str>]> = if Arc::ptr_eq(&reduced, class) {
            // Not reduced: the generator's names for the whole class.
            generator.wildcard_names(snap, class, kind).into()
        } else {
            let shared = self.shared_wildcard_names(generator, snap, reduced, kind);
            let own = self.own_wildcard_names(generator, snap, class, kind);
            if own.is_empty() { shared } else { shared.iter().cloned().chain(own).collect() }
        };
        if self.wildcard.len() >= MAX_ENTRIES / 10 {
            self.wildcard.clear();
        }
        self.wildcard.insert(key, (id, names.clone()));
        names
    }

    /// The generator's own wildcard names of `class`
    /// ([`Generator::class_wildcard_names`]): where they read nothing its
    /// whole-class reduction leaves out, those of the reduction, once per
    /// snapshot (within the bound on what is kept for first responses):
    /// the replicas of a Deployment, each of its own class, ask once.
    fn own_wildcard_names<M: Send + Sync + 'static>(
        &mut self,
        generator: &dyn Generator<Mesh = M, Class = C>,
        snap: &Snapshot<M>,
        class: &Arc<C>,
        kind: Kind,
    ) -> Vec<Arc<str>> {
        if !generator.own_names_read_whole(class, kind) {
            return generator.class_wildcard_names(snap, class, kind);
        }
        let whole = self.reduced_class(generator, snap, class, kind, true);
        self.first.of_snapshot(snap);
        let key = (kind, Arc::as_ptr(&whole) as *const u8 as usize);
        if let Some((_, names)) = self.first.own.get(&key) {
            #[cfg(debug_assertions)]
            assert_eq!(
                **names,
                *generator.class_wildcard_names(snap, class, kind),
                "the own names of a class's whole-class reduction differ from the class's"
            );
            return names.to_vec();
        }
        let names = generator.class_wildcard_names(snap, &whole, kind);
        let size = std::mem::size_of_val(&*names);
        let f = &mut self.first;
        if f.own.len() < MAX_FIRST && f.bytes + size <= MAX_FIRST_BYTES {
            f.bytes += size;
            f.own.insert(key, (whole, names.clone().into()));
        }
        names
    }

    /// The wildcard names of `kind` that depend only on `reduced`, a
    /// reduced class, once per snapshot.
    fn shared_wildcard_names<M: Send + Sync + 'static>(
        &mut self,
        generator: &dyn Generator<Mesh = M, Class = C>,
        snap: &Snapshot<M>,
        reduced: Arc<C>,
        kind: Kind,
    ) -> Arc<[Arc<str>]> {
        let id = snap_id(snap);
        match self.shared_wildcard.get(&(kind, reduced.clone())) {
            Some((at, names)) if *at == id => names.clone(),
            _ => {
                let names: Arc<[Arc<str>]> = generator.shared_wildcard_names(snap, &reduced, kind).into();
                if self.shared_wildcard.len() >= MAX_ENTRIES / 10 {
                    self.shared_wildcard.clear();
                }
                self.shared_wildcard.insert((kind, reduced), (id, names.clone()));
                names
            }
        }
    }

    /// The names of `kind` that stand for other resources in `snap`, or
    /// `None` where the type has no aliases (see `Generator::aliases`).
    pub fn aliases<M: Send + Sync + 'static>(
        &mut self,
        generator: &dyn Generator<Mesh = M, Class = C>,
        snap: &Snapshot<M>,
        kind: Kind,
    ) -> Option<Arc<Aliases>> {
        let id = snap_id(snap);
        if let Some((at, a)) = self.aliases.get(&kind)
            && *at == id
        {
            return a.clone();
        }
        let a = generator.aliases(snap, kind).map(Arc::new);
        self.aliases.insert(kind, (id, a.clone()));
        a
    }

    /// The class the resources of `kind` that do not read the whole class
    /// are generated for, for a proxy of `class` (`Generator::reduce`).
    pub fn reduced_for<M: Send + Sync + 'static>(
        &mut self,
        generator: &dyn Generator<Mesh = M, Class = C>,
        snap: &Snapshot<M>,
        class: &Arc<C>,
        kind: Kind,
    ) -> Arc<C> {
        self.reduced_class(generator, snap, class, kind, false)
    }

    /// The shared part of the first response (SotW or delta) of `kind`
    /// with resources `names` (none of them whole-class), generated for
    /// `reduced` (from [`Cache::reduced_for`]) in `snap`, if one was kept;
    /// or whether to build and keep it (a second stream asked the same).
    pub fn first_response<M>(
        &mut self,
        snap: &Snapshot<M>,
        kind: Kind,
        sotw: bool,
        reduced: &Arc<C>,
        names: FirstNames<'_>,
    ) -> First {
        let f = self.first.of_snapshot(snap);
        let key = first_key(kind, sotw, reduced, &names);
        match f.seen.get(&key) {
            Some(s) if Arc::ptr_eq(&s.reduced, reduced) && names.are(&s.names) => match &s.response {
                Held::Kept(r) => {
                    self.first_shared += 1;
                    First::Kept(r.clone())
                }
                Held::Seen => First::Build,
                Held::TooBig => First::Unseen,
            },
            Some(_) => First::Unseen, // a hash collision: left to the first
            None => {
                // Counted here whether or not `Cache::wildcard_first_names`
                // counted it too (a list it keeps is then counted twice).
                let size = std::mem::size_of_val(names.names);
                if f.seen.len() < MAX_FIRST && f.bytes + size <= MAX_FIRST_BYTES {
                    f.bytes += size;
                    let list = names.kept.cloned().unwrap_or_else(|| names.names.into());
                    f.seen.insert(key, FirstSeen { reduced: reduced.clone(), names: list, response: Held::Seen });
                }
                First::Unseen
            }
        }
    }

    /// The shared push (SotW or delta) of a change's names `names` of
    /// `kind` to the streams of `reduced` (from [`Cache::reduced_for`]) in
    /// `snap`, if one was kept; or whether to build and keep it (a second
    /// stream asked the same). Within the bounds of the first responses,
    /// and let go with them.
    pub fn changed_response<M>(
        &mut self,
        snap: &Snapshot<M>,
        kind: Kind,
        sotw: bool,
        names: &Arc<BTreeSet<Arc<str>>>,
        reduced: &Arc<C>,
    ) -> First<ChangedResponse> {
        let f = self.first.of_snapshot(snap);
        let key = changed_key(kind, sotw, names, reduced);
        match f.changed.get(&key).map(|s| &s.response) {
            Some(Held::Kept(r)) => First::Kept(r.clone()),
            Some(Held::Seen) => First::Build,
            Some(Held::TooBig) => First::Unseen,
            None => {
                if f.changed.len() < MAX_FIRST {
                    let seen = ChangedSeen { _names: names.clone(), _reduced: reduced.clone(), response: Held::Seen };
                    f.changed.insert(key, seen);
                }
                First::Unseen
            }
        }
    }

    /// Keeps a change's response built after [`First::Build`], or marks
    /// it not kept: too big to keep, or `None` (not to be shared: a name
    /// reads the whole class). Either way the streams that ask next are
    /// answered as usual.
    pub fn keep_changed_response(
        &mut self,
        kind: Kind,
        sotw: bool,
        names: &Arc<BTreeSet<Arc<str>>>,
        reduced: &Arc<C>,
        r: Option<Arc<ChangedResponse>>,
    ) {
        let f = &mut self.first;
        let key = changed_key(kind, sotw, names, reduced);
        if let Some(s) = f.changed.get_mut(&key)
            && matches!(s.response, Held::Seen)
        {
            let size = |r: &ChangedResponse| {
                r.body.as_ref().map_or(0, bytes::Bytes::len)
                    + r.versions.len() * std::mem::size_of::<(Arc<str>, Option<Arc<str>>)>()
            };
            s.response = match r {
                Some(r) if f.bytes + size(&r) <= MAX_FIRST_BYTES => {
                    f.bytes += size(&r);
                    Held::Kept(r)
                }
                _ => Held::TooBig,
            };
        }
    }

    /// The names of the first response to a wildcard subscription to
    /// `kind` that names nothing else, for `class` in `snap`: sorted, and
    /// split into those that read the whole class (the class's own) and
    /// the rest. Computed once per class and snapshot (within the bound
    /// on what is kept for first responses): a connect storm asks this
    /// for every stream, and collecting, sorting and splitting a few
    /// hundred names each time was a twentieth of the serving core.
    pub fn wildcard_first_names<M: Send + Sync + 'static>(
        &mut self,
        generator: &dyn Generator<Mesh = M, Class = C>,
        snap: &Snapshot<M>,
        class: &Arc<C>,
        kind: Kind,
    ) -> WildcardFirstNames {
        self.first.of_snapshot(snap);
        let key = (kind, Arc::as_ptr(class) as *const u8 as usize);
        if let Some(w) = self.first.wildcard.get(&key) {
            return (w.own.clone(), w.rest.clone(), w.hash);
        }
        let whole = |n: &Arc<str>| generator.whole_class(kind, n);
        // The class the shared wildcard names are read for (as
        // `wildcard_names` reads them).
        let reduced = self.class_for(generator, snap, class, kind, "");
        let mut split = None;
        if !Arc::ptr_eq(&reduced, class) {
            // The shared names, sorted once per reduced class, are the
            // rest, and the class's own are its own, when none of the
            // shared names reads the whole class and every own name does
            // (what a generator's split means; anything else is split
            // name by name below).
            let rest_key = (kind, Arc::as_ptr(&reduced) as *const u8 as usize);
            // The list, its hash, and whether `wildcard_rest` keeps (and
            // counted) it.
            let rest = match self.first.wildcard_rest.get(&rest_key) {
                Some((_, rest)) => rest.clone().map(|(r, h)| (r, h, true)),
                None => {
                    let mut shared = self.shared_wildcard_names(generator, snap, reduced.clone(), kind).to_vec();
                    shared.sort();
                    shared.dedup();
                    let rest: Option<(Arc<[Arc<str>]>, u64)> = if shared.iter().any(whole) {
                        None
                    } else {
                        let hash = names_hash(&shared);
                        Some((shared.into(), hash))
                    };
                    let size = rest.as_ref().map_or(0, |(r, _)| std::mem::size_of_val(&**r));
                    let f = &mut self.first;
                    let kept = f.wildcard_rest.len() < MAX_FIRST && f.bytes + size <= MAX_FIRST_BYTES;
                    if kept {
                        f.bytes += size;
                        f.wildcard_rest.insert(rest_key, (reduced, rest.clone()));
                    }
                    rest.map(|(r, h)| (r, h, kept))
                }
            };
            if let Some(rest) = rest {
                let mut own = self.own_wildcard_names(generator, snap, class, kind);
                if own.iter().all(whole) {
                    own.sort();
                    own.dedup();
                    split = Some((Arc::<[Arc<str>]>::from(own), rest));
                }
            }
        }
        let (own, (rest, hash, counted)) = match split {
            Some(split) => split,
            None => {
                let names = self.wildcard_names(generator, snap, class, kind).to_vec();
                let (own, rest) = split_first_names(generator, kind, names, true);
                let hash = names_hash(&rest);
                (own.into(), (rest.into(), hash, false))
            }
        };
        let f = &mut self.first;
        // A list of the rest not kept for its reduced class is this
        // class's alone, and counted with it.
        let rest_size = if counted { 0 } else { std::mem::size_of_val(&*rest) };
        let size = std::mem::size_of_val(&*own) + rest_size + std::mem::size_of::<WildcardFirst<C>>();
        if f.wildcard.len() < MAX_FIRST && f.bytes + size <= MAX_FIRST_BYTES {
            f.bytes += size;
            let w = WildcardFirst { _class: class.clone(), own: own.clone(), rest: rest.clone(), hash };
            f.wildcard.insert(key, w);
        }
        (own, rest, hash)
    }

    /// Lets go of the first responses kept (a new snapshot replaces the
    /// one they were built from), to be dropped off the serving core.
    pub fn take_first_responses(&mut self) -> impl Send + 'static {
        std::mem::take(&mut self.first)
    }

    /// Keeps a first response built after [`First::Build`], or marks it
    /// too big to keep ([`Held::TooBig`]) where it would pass the bound.
    pub fn keep_first_response(
        &mut self,
        kind: Kind,
        sotw: bool,
        reduced: &Arc<C>,
        names: FirstNames<'_>,
        r: Arc<FirstResponse>,
    ) {
        self.first_built += 1;
        let f = &mut self.first;
        if let Some(s) = f.seen.get_mut(&first_key(kind, sotw, reduced, &names))
            && Arc::ptr_eq(&s.reduced, reduced)
            && names.are(&s.names)
            && matches!(s.response, Held::Seen)
        {
            let size = r.body.len() + r.sent.len() * std::mem::size_of::<(Arc<str>, Arc<str>)>();
            if f.bytes + size <= MAX_FIRST_BYTES {
                f.bytes += size;
                s.response = Held::Kept(r);
            } else {
                s.response = Held::TooBig;
            }
        }
    }

    /// Forgets everything generated for classes that are neither in
    /// `live` (addresses of the classes of open streams) nor the reduction
    /// of one that is: a class whose last stream closed leaves nothing
    /// behind.
    pub fn retain_classes(&mut self, live: std::collections::HashSet<usize>) {
        let ptr = |c: &Arc<C>| Arc::as_ptr(c) as usize;
        self.memo = Memo::default();
        self.first = FirstResponses::default();
        self.reduced.retain(|(_, _, of), _| live.contains(of));
        self.wildcard.retain(|(_, c), _| live.contains(&ptr(c)));
        // What live classes reduce to stays too.
        let mut kept = live;
        kept.extend(self.reduced.values().map(|(_, _, r)| ptr(r)));
        self.interned.retain(|_, c| kept.contains(&ptr(c)));
        let (mut entries, mut bytes) = (0i64, 0i64);
        self.map.retain(|(_, _, c), (_, e)| {
            let keep = kept.contains(&ptr(c));
            if !keep {
                entries += 1;
                bytes += e.any.len() as i64;
            }
            keep
        });
        crate::metrics::cache_delta(-entries, -bytes);
        self.evicted_clear += entries as u64;
        self.shared_wildcard.retain(|(_, c), _| kept.contains(&ptr(c)));
    }

    /// Every entry: its type, name and encoded size (`/debug/cachez`).
    pub fn entries(&self) -> impl Iterator<Item = (Kind, &str, usize)> {
        self.map.iter().map(|((kind, name, _), (_, e))| (*kind, &**name, e.any.len()))
    }

    /// Forgets every entry and remembered answer (`/debug/cachez?clear=true`,
    /// istiod's `ClearAll`); returns how many entries there were.
    pub fn clear_all(&mut self) -> usize {
        let n = self.map.len();
        self.evicted_clear += n as u64;
        self.clear_map();
        self.memo = Memo::default();
        n
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
