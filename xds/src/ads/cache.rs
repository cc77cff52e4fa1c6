//! The per-core cache of pre-encoded resources. A key is (type, name,
//! proxy class); an entry remembers the generation of the inputs it was
//! made from, so a newer snapshot that changed those inputs misses and
//! regenerates, and one that did not hits. Debug builds regenerate on every
//! hit and compare: a cache key that misses an input is a bug that would
//! leak one proxy's configuration to another.

use std::collections::HashMap;
use std::sync::Arc;

use super::node::ProxyClass;
use super::snapshot::{Generator, Kind, Snapshot};
use super::wire::{self, Encoded};

type Key = (Kind, Arc<str>, Arc<ProxyClass>);

/// Entries above which the cache is cleared (a crude bound; entries are
/// small next to the mesh itself).
const MAX_ENTRIES: usize = 200_000;

/// Which snapshot a wildcard name list was computed from: its version and
/// the address of its resource model (versions alone repeat in tests that
/// build snapshots by hand).
type SnapId = (u64, usize);

/// Wildcard names by (type, class), with the snapshot they come from.
type WildcardNames = HashMap<(Kind, Arc<ProxyClass>), (SnapId, Arc<[Arc<str>]>)>;

/// One core's cache.
#[derive(Debug, Default)]
pub struct Cache {
    map: HashMap<Key, (u64, Encoded)>,
    /// Wildcard (CDS/LDS) names per class, for the snapshot they were
    /// computed from: every SotW push of a wildcard type needs them, and
    /// with per-class scoping they cost a visibility check per name.
    wildcard: WildcardNames,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that generated.
    pub misses: u64,
}

impl Cache {
    /// The encoded resource, from the cache or freshly generated; `None`
    /// when it does not exist in `snap`.
    pub fn get(
        &mut self,
        generator: &dyn Generator,
        snap: &Snapshot,
        class: &Arc<ProxyClass>,
        kind: Kind,
        name: &Arc<str>,
    ) -> Option<Encoded> {
        let input = generator.input_generation(snap, class, kind, name)?;
        let key = (kind, name.clone(), class.clone());
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
        let e = Encoded { any: wire::any(kind.type_url(), &body), version: input.to_string().into() };
        if self.map.len() >= MAX_ENTRIES {
            self.map.clear();
        }
        self.map.insert(key, (input, e.clone()));
        Some(e)
    }

    /// The names a proxy of `class` receives on a wildcard subscription to
    /// `kind`, computed once per class and snapshot.
    pub fn wildcard_names(
        &mut self,
        generator: &dyn Generator,
        snap: &Snapshot,
        class: &Arc<ProxyClass>,
        kind: Kind,
    ) -> Arc<[Arc<str>]> {
        let id: SnapId = (snap.version, Arc::as_ptr(&snap.model) as usize);
        let key = (kind, class.clone());
        if let Some((at, names)) = self.wildcard.get(&key)
            && *at == id
        {
            return names.clone();
        }
        let names: Arc<[Arc<str>]> = generator.wildcard_names(snap, class, kind).into();
        if self.wildcard.len() >= MAX_ENTRIES / 10 {
            self.wildcard.clear();
        }
        self.wildcard.insert(key, (id, names.clone()));
        names
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
