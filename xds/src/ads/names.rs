//! What a stream tracks per resource name, compactly: 10,000 proxies each
//! subscribed to hundreds of names and holding hundreds of resources made
//! these sets and maps the bulk of the server's memory (about 115 bytes an
//! entry with B-trees and a string per proxy per name). Here a name is one
//! shared allocation per core ([`intern`]), a set is a sorted vector of
//! them (16 bytes an entry) and a map of versions a sorted vector of pairs
//! (32 bytes an entry), one type ([`Names`]) for both. Lookups are binary
//! searches; many names change at once by a merge.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;

thread_local! {
    /// The core's names, and the size above which the unused ones are
    /// dropped.
    static NAMES: RefCell<(HashSet<Arc<str>>, usize)> = RefCell::new((HashSet::new(), 4096));
}

/// `name`, as the one allocation this core shares for it.
pub fn intern(name: &str) -> Arc<str> {
    NAMES.with(|n| {
        let (set, limit) = &mut *n.borrow_mut();
        if let Some(a) = set.get(name) {
            return a.clone();
        }
        if set.len() >= *limit {
            // Names no stream holds any more go.
            set.retain(|a| Arc::strong_count(a) > 1);
            *limit = (set.len() * 2).max(4096);
        }
        let a: Arc<str> = Arc::from(name);
        set.insert(a.clone());
        a
    })
}

/// `name` as the core's one allocation for it where the core has one, or
/// `name` itself (a name no stream holds is not made one: a change of
/// thousands of names would fill the table for nothing).
pub fn interned(name: &Arc<str>) -> Arc<str> {
    NAMES.with(|n| n.borrow().0.get(&**name).cloned()).unwrap_or_else(|| name.clone())
}

thread_local! {
    /// The core's recent subscriptions ([`subscription`]).
    static SUBSCRIPTIONS: RefCell<Subscriptions> = RefCell::default();
}

/// Subscriptions of this many names or more are kept to be shared.
const SUBSCRIPTION_SHARED: usize = 16;
/// Subscriptions kept on a core at most.
const SUBSCRIPTIONS_KEPT: usize = 32;
/// The bytes they hold at most on a core (their names' text, and two
/// references a name): what a peer's lists can pin after it is gone. A
/// list of more is not kept.
const SUBSCRIPTIONS_BYTES: usize = 4 << 20;

#[derive(Default)]
struct Subscriptions {
    kept: Vec<Subscription>,
    /// Their bytes ([`Subscription::bytes`]).
    bytes: usize,
    /// Where the search for one to let go starts.
    hand: usize,
    /// Keyed per core: a peer cannot choose names that collide.
    hasher: std::hash::RandomState,
}

struct Subscription {
    kind: usize,
    hash: u64,
    /// The names as asked, in the request's order.
    asked: Vec<Arc<str>>,
    set: NameSet,
    /// Asked for again since the hand last passed (second chance).
    used: bool,
}

impl Subscription {
    /// What a list of `names` holds kept.
    fn bytes<S: AsRef<str>>(names: &[S]) -> usize {
        names.iter().map(|n| n.as_ref().len() + 32).sum()
    }
}

/// The kept subscription that is `asked`, in its order, for `kind`: by
/// hash, then name by name.
fn kept_index(kept: &[Subscription], kind: usize, hash: u64, asked: &[String]) -> Option<usize> {
    kept.iter().position(|k| {
        k.kind == kind
            && k.hash == hash
            && k.asked.len() == asked.len()
            && k.asked.iter().zip(asked).all(|(a, b)| **a == **b)
    })
}

/// The names `asked` for a type (`kind`, its index), "*" left out, as a
/// set: the one made for an earlier request that asked for the same
/// names in the same order, shared, while the core keeps it (a connect
/// storm's thousands of proxies of a few kinds ask for the same hundreds
/// of names each: finding each name in the core's table, sorting and
/// merging them was a tenth of the serving core; a state-of-the-world
/// proxy asks again with every ACK). Checked name by name against what it
/// was made from. The core keeps 32 lists of 16 names or more, within 4
/// MiB; one not asked for again since the last look goes first.
pub fn subscription(kind: usize, asked: &[String]) -> NameSet {
    let set_of = |names: &mut dyn Iterator<Item = Arc<str>>| -> NameSet {
        names.filter(|n| &**n != "*").map(|n| (n, ())).collect()
    };
    let bytes = Subscription::bytes(asked);
    if asked.len() < SUBSCRIPTION_SHARED || bytes > SUBSCRIPTIONS_BYTES / 4 {
        return set_of(&mut asked.iter().map(|n| intern(n)));
    }
    SUBSCRIPTIONS.with(|s| {
        use std::hash::{BuildHasher, Hash, Hasher};
        let s = &mut *s.borrow_mut();
        let mut h = s.hasher.build_hasher();
        for n in asked {
            n.hash(&mut h);
        }
        let hash = h.finish();
        if let Some(i) = kept_index(&s.kept, kind, hash, asked) {
            s.kept[i].used = true;
            return s.kept[i].set.clone();
        }
        let interned: Vec<Arc<str>> = asked.iter().map(|n| intern(n)).collect();
        let set = set_of(&mut interned.iter().cloned());
        // Room: the hand goes round, and the first it finds not asked for
        // again since it last passed goes (a clock's second chance).
        while !s.kept.is_empty() && (s.kept.len() >= SUBSCRIPTIONS_KEPT || s.bytes + bytes > SUBSCRIPTIONS_BYTES) {
            s.hand %= s.kept.len();
            let k = &mut s.kept[s.hand];
            if std::mem::take(&mut k.used) {
                s.hand += 1;
                continue;
            }
            let gone = s.kept.remove(s.hand);
            s.bytes -= Subscription::bytes(&gone.asked);
        }
        // Behind the hand: looked at last.
        let at = s.hand.min(s.kept.len());
        s.kept.insert(at, Subscription { kind, hash, asked: interned, set: set.clone(), used: false });
        s.hand = at + 1;
        s.bytes += bytes;
        set
    })
}

/// Sets up to this size are looked in by address first (`Names::find`).
const SCAN_BELOW: usize = 32;

/// Names, sorted, each with a value: a set of names is `Names<()>` (16
/// bytes an entry), names to versions `Names<Arc<str>>` (32 bytes).
///
/// Shared until changed: a clone is a reference count, and the first
/// change of a clone copies its entries. Streams sent the same first
/// response (a connect storm's thousands of proxies of a few kinds) hold
/// one record of what they were sent until each is sent something else.
/// (What that saves in a storm is small: the `Vec::clone` a profile
/// showed under `shared_first` was mostly the collecting of a stream's
/// subscribed names, docs/performance.md.)
#[derive(Debug, Clone)]
pub struct Names<V>(Option<Arc<Entries<V>>>);

/// A [`Names`]' entries, sorted by name.
type Entries<V> = Vec<(Arc<str>, V)>;

/// Subscribed names.
pub type NameSet = Names<()>;
/// Names to the versions a proxy holds.
pub type NameMap = Names<Arc<str>>;

impl<V> Default for Names<V> {
    fn default() -> Self {
        Names(None)
    }
}

impl<V: PartialEq> PartialEq for Names<V> {
    fn eq(&self, other: &Self) -> bool {
        matches!((&self.0, &other.0), (Some(a), Some(b)) if Arc::ptr_eq(a, b)) || self.entries() == other.entries()
    }
}

impl<V: Eq> Eq for Names<V> {}

impl<V> Names<V> {
    /// The entries, in name order.
    fn entries(&self) -> &[(Arc<str>, V)] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }

    fn find(&self, name: &str) -> Result<usize, usize> {
        let entries = self.entries();
        // A name is one allocation per core ([`intern`]): in a set of a
        // few, its address is found in the entries' own memory, where a
        // binary search reads a name's text at each step (a cache miss
        // each, for each of the 1,000 streams a change is pushed to).
        if entries.len() <= SCAN_BELOW
            && let Some(i) =
                entries.iter().position(|(n, _)| std::ptr::eq(n.as_ptr(), name.as_ptr()) && n.len() == name.len())
        {
            return Ok(i);
        }
        entries.binary_search_by(|(n, _)| (**n).cmp(name))
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&V> {
        self.find(name).ok().map(|i| &self.entries()[i].1)
    }

    /// Whether `name` is in.
    pub fn contains(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }

    /// Empties it (and gives back its memory, or its share).
    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }

    /// (name, value), in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &V)> {
        self.entries().iter().map(|(n, v)| (n, v))
    }

    /// The names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.entries().iter().map(|(n, _)| n)
    }

    /// The names of `self` not in `other`.
    pub fn keys_not_in<'a, W>(&'a self, other: &'a Names<W>) -> impl Iterator<Item = &'a Arc<str>> {
        self.keys().filter(|n| !other.contains(n))
    }

    /// Whether `self` and `other` share their entries (one is a clone of
    /// the other, and neither changed since).
    #[cfg(test)]
    pub fn shares_with(&self, other: &Self) -> bool {
        matches!((&self.0, &other.0), (Some(a), Some(b)) if Arc::ptr_eq(a, b))
    }
}

impl<V: Clone> Names<V> {
    /// The entries to change, with room for `room` more: copied first if
    /// shared.
    fn entries_mut(&mut self, room: usize) -> &mut Entries<V> {
        let arc = self.0.get_or_insert_with(Default::default);
        if Arc::get_mut(arc).is_none() {
            let mut copy = Vec::with_capacity(arc.len() + room);
            copy.extend_from_slice(arc);
            *arc = Arc::new(copy);
        }
        // Not shared now: no copy.
        Arc::make_mut(arc)
    }

    /// Whether another holder shares the entries.
    fn shared(&self) -> bool {
        self.0.as_ref().is_some_and(|a| Arc::strong_count(a) > 1)
    }

    /// Sets `name` to `value`; whether the name was new.
    pub fn insert(&mut self, name: Arc<str>, value: V) -> bool {
        match self.find(&name) {
            Ok(i) => {
                self.entries_mut(0)[i].1 = value;
                false
            }
            Err(i) => {
                self.entries_mut(1).insert(i, (name, value));
                true
            }
        }
    }

    /// Sets many names at once (a response's, a subscription's): one sort
    /// and merge, not a shifting insert each (a first push of thousands of
    /// resources, or a subscribe of 100,000 names, moved the tail that
    /// many times). The last value of a name given twice wins. Returns the
    /// names that were new, sorted.
    pub fn insert_many(&mut self, entries: impl IntoIterator<Item = (Arc<str>, V)>) -> Vec<Arc<str>> {
        let mut new: Vec<(Arc<str>, V)> = entries.into_iter().collect();
        if new.len() <= 8 && !self.shared() {
            // A few: shifting in place costs less than a new vector.
            let mut added = Vec::new();
            for (n, v) in new {
                if self.insert(n.clone(), v) && !added.contains(&n) {
                    added.push(n);
                }
            }
            added.sort_unstable();
            return added;
        }
        new.reverse();
        new.sort_by(|a, b| a.0.cmp(&b.0));
        new.dedup_by(|a, b| a.0 == b.0);
        // Moved out if this is the only holder, read in place if shared (a
        // sidecar adding its own resources to a shared first response's
        // record): one new vector of the right size either way.
        let (out, added) = match self.0.take().map(Arc::try_unwrap) {
            None => merge(std::iter::empty(), new),
            Some(Ok(old)) => merge(old.into_iter(), new),
            Some(Err(shared)) => merge(shared.iter().cloned(), new),
        };
        self.0 = Some(Arc::new(out));
        added
    }

    /// Removes `name`; whether it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        match self.find(name) {
            Ok(i) => {
                self.entries_mut(0).remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// Removes many names at once (one pass, not a shifting remove each).
    pub fn remove_many(&mut self, names: &[&str]) {
        if names.is_empty() {
            return;
        }
        let mut gone: Vec<&str> = names.to_vec();
        gone.sort_unstable();
        // Shared entries are copied only if some go.
        if !self.shared() || self.keys().any(|n| gone.binary_search(&&**n).is_ok()) {
            self.entries_mut(0).retain(|(n, _)| gone.binary_search(&&**n).is_err());
        }
    }

    /// Keeps the names `keep` says. Shared entries are copied only if
    /// some go (`keep` is then asked twice of a name).
    pub fn retain(&mut self, mut keep: impl FnMut(&Arc<str>) -> bool) {
        if self.0.is_some() && (!self.shared() || self.keys().any(|n| !keep(n))) {
            self.entries_mut(0).retain(|(n, _)| keep(n));
        }
    }
}

impl<V: Clone> FromIterator<(Arc<str>, V)> for Names<V> {
    fn from_iter<I: IntoIterator<Item = (Arc<str>, V)>>(iter: I) -> Self {
        let mut n = Names::default();
        n.insert_many(iter);
        n
    }
}

impl FromIterator<Arc<str>> for NameSet {
    fn from_iter<I: IntoIterator<Item = Arc<str>>>(iter: I) -> Self {
        iter.into_iter().map(|n| (n, ())).collect()
    }
}

/// What a stream was sent of a type, name to version: a [`NameMap`] and,
/// beside it until the record next changes, the few names that are the
/// stream's own. A connect storm's sidecars are each sent a shared first
/// response (its record shared by reference) and their own inbound
/// listener and clusters: adding those to the shared record copied all of
/// it (two reference counts a name, for each of 10,000 proxies), where
/// they now sit beside it. Any other change takes them into the record.
#[derive(Debug, Default, Clone)]
pub struct Sent {
    map: NameMap,
    /// Names not in `map`, sorted.
    own: Vec<(Arc<str>, Arc<str>)>,
}

impl Sent {
    /// `map` shared, and `own` beside it.
    pub fn with_own(map: NameMap, mut own: Vec<(Arc<str>, Arc<str>)>) -> Self {
        // The last of a name given twice wins, as in `Names::insert_many`.
        own.reverse();
        own.sort_by(|a, b| a.0.cmp(&b.0));
        own.dedup_by(|a, b| a.0 == b.0);
        if own.iter().any(|(n, _)| map.contains(n)) {
            // Not beside it: in it.
            let mut s = Sent { map, own: Vec::new() };
            s.map.insert_many(own);
            return s;
        }
        Sent { map, own }
    }

    fn own_index(&self, name: &str) -> Option<usize> {
        // By address first, as `Names::find`: no name's text is read.
        let at = |(n, _): &(Arc<str>, Arc<str>)| std::ptr::eq(n.as_ptr(), name.as_ptr()) && n.len() == name.len();
        self.own.iter().position(at).or_else(|| self.own.binary_search_by(|(n, _)| (**n).cmp(name)).ok())
    }

    /// The version sent of `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<str>> {
        match self.own_index(name) {
            Some(i) => Some(&self.own[i].1),
            None => self.map.get(name),
        }
    }

    /// Whether `name` was sent.
    pub fn contains(&self, name: &str) -> bool {
        self.own_index(name).is_some() || self.map.contains(name)
    }

    /// Names sent.
    pub fn len(&self) -> usize {
        self.map.len() + self.own.len()
    }

    /// Nothing sent.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty() && self.own.is_empty()
    }

    /// (name, version), in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<str>)> {
        let (mut a, mut b) = (self.map.iter().peekable(), self.own.iter().map(|(n, v)| (n, v)).peekable());
        std::iter::from_fn(move || match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.0 < y.0 => a.next(),
            (Some(_), Some(_)) | (None, _) => b.next(),
            (Some(_), None) => a.next(),
        })
    }

    /// The names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.iter().map(|(n, _)| n)
    }

    /// The record with the stream's own names in it, to change.
    fn whole(&mut self) -> &mut NameMap {
        if !self.own.is_empty() {
            let own = std::mem::take(&mut self.own);
            self.map.insert_many(own);
        }
        &mut self.map
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.map.clear();
        self.own.clear();
    }

    /// Sets many names at once ([`Names::insert_many`]); the names that
    /// were new, sorted.
    pub fn insert_many(&mut self, entries: impl IntoIterator<Item = (Arc<str>, Arc<str>)>) -> Vec<Arc<str>> {
        // The own names and the new ones in one merge (the new win); the
        // own names were not new.
        let own = std::mem::take(&mut self.own);
        let mut added = self.map.insert_many(own.iter().cloned().chain(entries));
        if !own.is_empty() {
            added.retain(|n| own.binary_search_by(|(o, _)| o.cmp(n)).is_err());
        }
        added
    }

    /// Removes many names at once.
    pub fn remove_many(&mut self, names: &[&str]) {
        if names.iter().any(|n| self.contains(n)) {
            self.whole().remove_many(names);
        }
    }

    /// Keeps the names `keep` says (`keep` may be asked twice of a name).
    pub fn retain(&mut self, mut keep: impl FnMut(&Arc<str>) -> bool) {
        if self.own.is_empty() || self.keys().any(|n| !keep(n)) {
            self.whole().retain(keep);
        }
    }
}

impl FromIterator<(Arc<str>, Arc<str>)> for Sent {
    fn from_iter<I: IntoIterator<Item = (Arc<str>, Arc<str>)>>(iter: I) -> Self {
        Sent { map: iter.into_iter().collect(), own: Vec::new() }
    }
}

/// `old` (sorted) with `new` (sorted, no name twice) merged in, a name in
/// both taking `new`'s value; and the names that were not in `old`.
fn merge<V>(old: impl Iterator<Item = (Arc<str>, V)>, new: Vec<(Arc<str>, V)>) -> (Entries<V>, Vec<Arc<str>>) {
    let mut added = Vec::new();
    let mut out = Vec::with_capacity(old.size_hint().0 + new.len());
    let (mut a, mut b) = (old.peekable(), new.into_iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => match x.0.cmp(&y.0) {
                std::cmp::Ordering::Less => out.extend(a.next()),
                std::cmp::Ordering::Greater => {
                    added.extend(b.peek().map(|y| y.0.clone()));
                    out.extend(b.next());
                }
                std::cmp::Ordering::Equal => {
                    a.next();
                    out.extend(b.next());
                }
            },
            (Some(_), None) => out.extend(a.next()),
            (None, Some(y)) => {
                added.push(y.0.clone());
                out.extend(b.next());
            }
            (None, None) => break,
        }
    }
    out.shrink_to_fit();
    (out, added)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_made_the_cores_only_where_the_core_has_it() {
        let held = intern("outbound|80||held.svc");
        let same: Arc<str> = Arc::from("outbound|80||held.svc");
        assert!(Arc::ptr_eq(&interned(&same), &held), "the core's allocation");
        let other: Arc<str> = Arc::from("outbound|80||nobody-holds-this.svc");
        assert!(Arc::ptr_eq(&interned(&other), &other), "the name itself");
        let in_table = NAMES.with(|n| n.borrow().0.contains(&*other));
        assert!(!in_table, "and not put in the table");
    }

    #[test]
    fn a_name_is_found_by_its_address_or_by_its_text() {
        for n in [3, SCAN_BELOW, SCAN_BELOW + 1, 100] {
            let held: Vec<Arc<str>> = (0..n).map(|i| intern(&format!("outbound|80||s{i:03}.svc"))).collect();
            let map: NameMap = held.iter().map(|h| (h.clone(), Arc::from("v"))).collect();
            for (i, h) in held.iter().enumerate() {
                // The interned name, and the same text elsewhere in memory.
                let copy = String::from(&**h);
                assert_eq!(map.find(h), Ok(i), "{n} names: {h} by address");
                assert_eq!(map.find(&copy), Ok(i), "{n} names: {h} by text");
            }
            // Absent names, between and past the held ones.
            assert_eq!(map.find("outbound|80||s000.svc0"), Err(1));
            assert_eq!(map.find("a"), Err(0));
            assert_eq!(map.find("z"), Err(n));
            // A name that begins like a held one (same address, shorter).
            assert_eq!(map.find(&held[0][..10]), Err(0));
        }
    }

    #[test]
    fn a_clone_is_shared_until_one_of_them_changes() {
        let sent: NameMap = ["a", "b", "c"].into_iter().map(|n| (intern(n), Arc::from("1"))).collect();
        let mut mine = sent.clone();
        assert!(mine.shares_with(&sent));
        // Nothing removed, nothing copied.
        mine.retain(|_| true);
        mine.remove_many(&["z"]);
        assert!(!mine.remove("z") && mine.shares_with(&sent));
        // A change copies: the other keeps what it had.
        mine.insert(intern("b"), Arc::from("2"));
        assert!(!mine.shares_with(&sent));
        assert_eq!(sent.get("b").map(|v| &**v), Some("1"));
        assert_eq!(mine.get("b").map(|v| &**v), Some("2"));
        let mut other = sent.clone();
        other.insert_many((0..20).map(|i| (intern(&format!("m{i:02}")), Arc::from("3"))));
        other.retain(|n| &**n != "a");
        assert_eq!((sent.len(), other.len()), (3, 22));
        assert!(sent.contains("a") && !other.contains("a"));
        // A few names added to a shared record: one copy of the right size.
        let mut few = sent.clone();
        let added = few.insert_many([(intern("d"), Arc::from("4")), (intern("a"), Arc::from("5"))]);
        assert_eq!(added.iter().map(|n| &**n).collect::<Vec<_>>(), ["d"]);
        assert_eq!(
            few.iter().map(|(n, v)| (&**n, &**v)).collect::<Vec<_>>(),
            [("a", "5"), ("b", "1"), ("c", "1"), ("d", "4")]
        );
        assert_eq!(few.0.as_ref().map(|v| v.capacity()), Some(4));
        assert_eq!(sent.get("a").map(|v| &**v), Some("1"));
        // Emptied either way, equal.
        let mut emptied = sent.clone();
        emptied.remove_many(&["a", "b", "c"]);
        assert_eq!(emptied, NameMap::default());
        assert_eq!(sent.len(), 3);
    }

    #[test]
    fn a_subscription_asked_again_is_the_set_made_before() {
        let names =
            |n: usize, tag: &str| -> Vec<String> { (0..n).map(|i| format!("outbound|80||{tag}{i}.svc")).collect() };
        let asked = names(40, "s");
        let first = subscription(2, &asked);
        assert_eq!(first.len(), 40);
        assert!(first.keys().zip(first.keys().skip(1)).all(|(a, b)| a < b), "sorted");
        assert!(subscription(2, &asked.clone()).shares_with(&first), "the same names asked again: shared");
        // Another type, another order, a name more or "*" among them: a set
        // of its own, each with what was asked.
        assert!(!subscription(3, &asked).shares_with(&first));
        let mut reversed = asked.clone();
        reversed.reverse();
        let other = subscription(2, &reversed);
        assert!(!other.shares_with(&first) && other == first);
        let mut more = asked.clone();
        more.push("outbound|80||extra.svc".into());
        assert_eq!(subscription(2, &more).len(), 41);
        let mut star = asked.clone();
        star.insert(3, "*".into());
        let starred = subscription(2, &star);
        assert!(!starred.contains("*") && starred == first);
        // One name differs at the end: not the set made before.
        let mut last = asked.clone();
        *last.last_mut().unwrap() = "outbound|80||other.svc".into();
        let differs = subscription(2, &last);
        assert!(differs.contains("outbound|80||other.svc") && !differs.contains(&asked[39]));
        // A few names are not kept; a set of its own each time.
        let few = names(3, "f");
        assert!(!subscription(2, &few).shares_with(&subscription(2, &few)));
        // Kept up to a bound: after enough others, made anew, still right.
        for i in 0..3 * SUBSCRIPTIONS_KEPT {
            subscription(2, &names(20, &format!("k{i}-")));
        }
        let again = subscription(2, &asked);
        assert!(!again.shares_with(&first) && again == first);
        // One asked for again while others come is kept (second chance).
        for i in 0..3 * SUBSCRIPTIONS_KEPT {
            subscription(2, &names(20, &format!("h{i}-")));
            assert!(subscription(2, &asked).shares_with(&again), "after {i} others");
        }
        // Within the bytes bound: a list of more than a quarter of it is
        // not kept, and lists just under it fill it no further.
        let long = |tag: &str, size: usize| -> Vec<String> {
            (0..20).map(|i| format!("{tag}{i}-{}", "x".repeat(size))).collect()
        };
        let huge = long("huge", 60_000);
        assert!(!subscription(2, &huge).shares_with(&subscription(2, &huge)));
        for i in 0..10 {
            let b = long(&format!("b{i}-"), 50_000);
            assert!(subscription(2, &b).shares_with(&subscription(2, &b)), "kept");
            let held = SUBSCRIPTIONS.with(|s| s.borrow().bytes);
            assert!(held <= SUBSCRIPTIONS_BYTES, "{held} bytes held");
        }
        // A set shared by two holders: a change to one leaves the other.
        let mut mine = subscription(2, &asked);
        let theirs = subscription(2, &asked);
        mine.remove_many(&[&asked[0]]);
        assert_eq!((mine.len(), theirs.len()), (39, 40));
    }

    #[test]
    fn a_kept_subscription_is_the_one_asked_name_by_name_not_by_hash_alone() {
        let asked: Vec<String> = (0..20).map(|i| format!("n{i}")).collect();
        let kept = |names: &[String]| Subscription {
            kind: 2,
            hash: 7,
            asked: names.iter().map(|n| intern(n)).collect(),
            set: NameSet::default(),
            used: false,
        };
        let mut other = asked.clone();
        other[19] = "m19".into();
        // The same hash, another list (a collision): not it.
        assert_eq!(kept_index(&[kept(&other)], 2, 7, &asked), None);
        assert_eq!(kept_index(&[kept(&other), kept(&asked)], 2, 7, &asked), Some(1));
        assert_eq!(kept_index(&[kept(&asked)], 3, 7, &asked), None, "another type");
        assert_eq!(kept_index(&[kept(&asked)], 2, 8, &asked), None, "another hash");
        assert_eq!(kept_index(&[kept(&asked[..19])], 2, 7, &asked), None, "a name fewer");
    }

    #[test]
    fn a_streams_own_names_sit_beside_a_shared_record_until_it_changes() {
        use std::collections::BTreeMap;
        let v = |s: &str| -> Arc<str> { Arc::from(s) };
        let shared: NameMap = ["b", "d", "f"].into_iter().map(|n| (intern(n), v("1"))).collect();
        let own = vec![(intern("e"), v("own-e")), (intern("a"), v("own-a"))];
        let mut sent = Sent::with_own(shared.clone(), own);
        assert!(sent.map.shares_with(&shared), "the record is not copied");
        let listed = |s: &Sent| s.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>();
        assert_eq!(listed(&sent), ["a=own-a", "b=1", "d=1", "e=own-e", "f=1"]);
        assert_eq!(sent.keys().map(|n| &**n).collect::<Vec<_>>(), ["a", "b", "d", "e", "f"]);
        assert_eq!(sent.len(), 5);
        assert_eq!(sent.get("e").map(|v| &**v), Some("own-e"));
        assert_eq!(sent.get(&String::from("a")).map(|v| &**v), Some("own-a"), "by text too");
        assert_eq!(sent.get("b").map(|v| &**v), Some("1"));
        assert!(sent.contains("f") && !sent.contains("c"));
        // Asked to drop nothing it holds: still shared.
        sent.remove_many(&["c", "z"]);
        sent.retain(|_| true);
        assert!(sent.map.shares_with(&shared) && sent.own.len() == 2);
        // A change takes the own names in; the shared record is untouched.
        let mut changed = sent.clone();
        changed.insert_many([(intern("b"), v("2"))]);
        assert!(!changed.map.shares_with(&shared) && changed.own.is_empty());
        assert_eq!(listed(&changed), ["a=own-a", "b=2", "d=1", "e=own-e", "f=1"]);
        assert_eq!(shared.len(), 3);
        assert_eq!(shared.get("b").map(|v| &**v), Some("1"));
        // An own name already in the record goes into it.
        let into = Sent::with_own(shared.clone(), vec![(intern("d"), v("own-d"))]);
        assert!(into.own.is_empty());
        assert_eq!(listed(&into), ["b=1", "d=own-d", "f=1"]);
        // Random changes match a B-tree map, each from a fresh record.
        let mut x: u64 = 0x2545f4914f6cdd1d;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..500 {
            let name = |i: u64| format!("n{i}");
            let base: NameMap = (0..next(12)).map(|_| (intern(&name(next(40))), v("b"))).collect();
            let own: Vec<(Arc<str>, Arc<str>)> =
                (0..next(4)).map(|i| (intern(&name(next(40))), Arc::from(format!("o{i}")))).collect();
            let mut want: BTreeMap<String, String> = base.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
            want.extend(own.iter().map(|(n, v)| (n.to_string(), v.to_string())));
            let mut got = Sent::with_own(base.clone(), own);
            let batch: Vec<String> = (0..next(5)).map(|_| name(next(40))).collect();
            match next(4) {
                0 => {
                    let added = got.insert_many(batch.iter().map(|n| (intern(n), v("i"))));
                    let mut new: Vec<String> = batch.iter().filter(|n| !want.contains_key(*n)).cloned().collect();
                    new.sort();
                    new.dedup();
                    assert_eq!(added.iter().map(|n| n.to_string()).collect::<Vec<_>>(), new, "round {round}");
                    want.extend(batch.iter().map(|n| (n.clone(), "i".to_owned())));
                }
                1 => {
                    got.remove_many(&batch.iter().map(String::as_str).collect::<Vec<_>>());
                    want.retain(|n, _| !batch.contains(n));
                }
                2 => {
                    got.retain(|n| !batch.iter().any(|b| **b == **n));
                    want.retain(|n, _| !batch.contains(n));
                }
                _ => {}
            }
            let listed: Vec<(String, String)> = got.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
            assert_eq!(listed, want.clone().into_iter().collect::<Vec<_>>(), "round {round}");
            assert_eq!(got.len(), want.len());
            for i in 0..40 {
                assert_eq!(got.get(&name(i)).map(|v| v.to_string()), want.get(&name(i)).cloned(), "round {round}");
            }
        }
    }

    #[test]
    fn sets_and_maps_behave_as_the_btree_ones_they_replace() {
        let mut s: NameSet = ["b", "a", "c", "a"].into_iter().map(intern).collect();
        assert_eq!(s.keys().map(|n| &**n).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert!(!s.insert(intern("b"), ()) && s.insert(intern("d"), ()) && s.contains("d"));
        assert!(s.remove("a") && !s.remove("a"));
        let other: NameSet = ["c"].into_iter().map(intern).collect();
        assert_eq!(s.keys_not_in(&other).map(|n| &**n).collect::<Vec<_>>(), ["b", "d"]);
        let mut m: NameMap =
            [("x", "1"), ("y", "2"), ("x", "3")].into_iter().map(|(n, v)| (intern(n), Arc::from(v))).collect();
        assert_eq!(m.get("x").map(|v| &**v), Some("3"), "the last wins");
        m.insert(intern("a"), "0".into());
        m.insert(intern("y"), "9".into());
        assert_eq!(m.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>(), ["a=0", "x=3", "y=9"]);
        let many: Vec<(Arc<str>, Arc<str>)> = (0..20).map(|i| (intern(&format!("m{i:02}")), Arc::from("v"))).collect();
        let added = m.insert_many(many.clone().into_iter().chain([(intern("y"), Arc::from("10"))]));
        assert_eq!(added.len(), 20, "y was there: only the 20 new names are new");
        assert_eq!(m.len(), 23);
        assert_eq!(m.get("y").map(|v| &**v), Some("10"), "a new version replaces the old");
        assert!(m.keys().zip(m.keys().skip(1)).all(|(a, b)| a < b), "sorted, no duplicates");
        for (n, _) in &many {
            m.remove(n);
        }
        m.retain(|n| &**n != "x");
        m.remove("a");
        assert_eq!(m.keys().map(|n| &**n).collect::<Vec<_>>(), ["y"]);
        assert!(m.contains("y") && !m.contains("x"));
    }

    /// Random operations against the B-tree set and map they replaced.
    #[test]
    fn random_operations_match_the_btree_ones() {
        use std::collections::{BTreeMap, BTreeSet};
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut set, mut bset) = (NameSet::default(), BTreeSet::<String>::new());
        let (mut map, mut bmap) = (NameMap::default(), BTreeMap::<String, String>::new());
        for round in 0..2_000 {
            let name = |i: u64| format!("n{i}");
            let batch: Vec<String> = (0..next(20)).map(|_| name(next(200))).collect();
            // Every other round a clone shares the entries being changed:
            // it must keep what it had.
            let kept = (round % 2 == 0).then(|| (set.clone(), map.clone(), bset.clone(), bmap.clone()));
            match next(6) {
                0 => {
                    let added = set.insert_many(batch.iter().map(|n| (intern(n), ())));
                    let mut want: Vec<String> = batch.iter().filter(|n| !bset.contains(*n)).cloned().collect();
                    want.sort();
                    want.dedup();
                    assert_eq!(added.iter().map(|n| n.to_string()).collect::<Vec<_>>(), want);
                    bset.extend(batch);
                }
                1 => {
                    let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
                    set.remove_many(&refs);
                    for n in &batch {
                        bset.remove(n);
                    }
                }
                2 => {
                    map.insert_many(batch.iter().map(|n| (intern(n), Arc::from(format!("{round}")))));
                    for n in &batch {
                        bmap.insert(n.clone(), format!("{round}"));
                    }
                }
                3 => {
                    let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
                    map.remove_many(&refs);
                    for n in &batch {
                        bmap.remove(n);
                    }
                }
                4 => {
                    if let Some(n) = batch.first() {
                        map.insert(intern(n), "single".into());
                        bmap.insert(n.clone(), "single".into());
                        set.insert(intern(n), ());
                        bset.insert(n.clone());
                    }
                }
                _ => {
                    if let Some(n) = batch.first() {
                        map.remove(n);
                        bmap.remove(n);
                        set.remove(n);
                        bset.remove(n);
                    }
                }
            }
            assert_eq!(set.keys().map(|n| n.to_string()).collect::<Vec<_>>(), bset.iter().cloned().collect::<Vec<_>>());
            assert_eq!(
                map.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect::<Vec<_>>(),
                bmap.iter().map(|(n, v)| (n.clone(), v.clone())).collect::<Vec<_>>()
            );
            if let Some((set, map, bset, bmap)) = kept {
                assert_eq!(set.keys().map(|n| n.to_string()).collect::<Vec<_>>(), bset.into_iter().collect::<Vec<_>>());
                assert_eq!(
                    map.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect::<Vec<_>>(),
                    bmap.into_iter().collect::<Vec<_>>()
                );
            }
        }
    }

    #[test]
    fn a_name_is_one_allocation_per_core_and_unused_ones_go() {
        let a = intern("outbound|80||a.svc");
        let b = intern(&String::from("outbound|80||a.svc"));
        assert!(Arc::ptr_eq(&a, &b));
        for i in 0..10_000 {
            drop(intern(&format!("n{i}")));
        }
        let held = NAMES.with(|n| n.borrow().0.len());
        assert!(held < 10_000, "dropped names were pruned: {held}");
        assert!(Arc::ptr_eq(&a, &intern("outbound|80||a.svc")), "a held name stays");
    }
}
