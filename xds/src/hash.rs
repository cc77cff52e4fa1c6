//! A hasher for keys this server makes: addresses and the ids it hands out.

/// FxHash's step, for keys that are addresses (SipHash costs more than
/// the lookup it guards, and addresses are not chosen by a peer), or ids
/// this server hands out (connection ids). Never for what a peer chooses
/// (stream ids): the low bits of its hash follow the key's low bits, so a
/// peer could pile its keys into one bucket.
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

/// A map by addresses or ids this server hands out ([`AddrHasher`]).
pub(crate) type IdMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<AddrHasher>>;

/// A set of ids this server hands out ([`AddrHasher`]).
pub(crate) type IdSet<K> = std::collections::HashSet<K, std::hash::BuildHasherDefault<AddrHasher>>;

impl std::hash::Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_usize(usize::from(b));
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (self.0.rotate_left(5) ^ n as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_usize(n as usize);
    }
    fn write_u64(&mut self, n: u64) {
        self.write_usize(n as usize);
    }
    fn finish(&self) -> u64 {
        // The product's low bits follow the key's: addresses aligned to 16
        // would leave hashbrown's low bucket bits unused. The rotate brings
        // the well-mixed high bits down (as rustc-hash 2 does).
        self.0.rotate_left(26)
    }
}
