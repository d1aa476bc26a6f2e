//! The concurrent maps read on every call (sessions, gateways, keys, connections, catalogues,
//! upstreams): `DashMap` with aHash instead of the standard library's SipHash-1-3.
//!
//! Why: hashing the key was 0.6 % of toolgate's CPU samples at 32 connections, for maps whose keys
//! are short ids. aHash is several times faster on such keys and stays resistant to collision
//! attacks (the maps are keyed by what clients send: session ids, key hashes, addresses), because
//! each process draws its keys from the operating system's randomness (`runtime-rng`).
//! Maps read only by the management API keep `DashMap`'s default hasher, except the state's
//! records: they share one type so that `state/follow.rs` refreshes them all the same way.

/// A `DashMap` hashed with aHash; made with `FastMap::default()`.
pub(crate) type FastMap<K, V> = dashmap::DashMap<K, V, ahash::RandomState>;

/// A `DashSet` hashed with aHash; made with `FastSet::default()`.
pub(crate) type FastSet<K> = dashmap::DashSet<K, ahash::RandomState>;

use std::borrow::Borrow;
use std::hash::Hash;

/// A [`FastMap`] in parts, each a small map of its own, that can be walked one part at a time
/// with a pause between parts ([`PartedMap::parts`]).
///
/// Why: walking a `DashMap` holds each of its shards' locks while that shard is walked, and a
/// `DashMap` has a few shards (four per core), so a walk of a map of a million entries blocks
/// every call reaching one shard for the time it takes to visit a hundred thousand entries or
/// more (a session sweep paused calls up to 176 ms). Here a walk holds one lock for about
/// `len / (PARTS * 2)` entries (some 500 of a million) and can yield between parts; a look-up
/// hashes the key once more to pick its part.
pub(crate) struct PartedMap<K, V> {
    parts: Box<[FastMap<K, V>]>,
    pick: ahash::RandomState,
}

/// Parts of a [`PartedMap`] (a power of two); each has two shards.
pub(crate) const PARTS: usize = 1024;

impl<K: Eq + Hash, V> Default for PartedMap<K, V> {
    fn default() -> Self {
        let parts = (0..PARTS).map(|_| FastMap::with_hasher_and_shard_amount(ahash::RandomState::new(), 2)).collect();
        PartedMap { parts, pick: ahash::RandomState::new() }
    }
}

impl<K: Eq + Hash, V> PartedMap<K, V> {
    /// The part that holds `key`.
    pub(crate) fn part<Q: Hash + ?Sized>(&self, key: &Q) -> &FastMap<K, V>
    where
        K: Borrow<Q>,
    {
        // The low bits: the part's own map places keys by the high bits of its own hash.
        &self.parts[self.pick.hash_one(key) as usize & (PARTS - 1)]
    }

    /// Every part, to walk one at a time.
    pub(crate) fn parts(&self) -> &[FastMap<K, V>] {
        &self.parts
    }

    /// Entries across the parts (each part counted under its own locks, not at one instant).
    pub(crate) fn len(&self) -> usize {
        self.parts.iter().map(|p| p.len()).sum()
    }

    pub(crate) fn get<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<dashmap::mapref::one::Ref<'_, K, V>>
    where
        K: Borrow<Q>,
    {
        self.part(key).get(key)
    }

    pub(crate) fn get_mut<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<dashmap::mapref::one::RefMut<'_, K, V>>
    where
        K: Borrow<Q>,
    {
        self.part(key).get_mut(key)
    }

    pub(crate) fn contains_key<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.part(key).contains_key(key)
    }

    pub(crate) fn insert(&self, key: K, value: V) -> Option<V> {
        self.part(&key).insert(key, value)
    }

    pub(crate) fn entry(&self, key: K) -> dashmap::mapref::entry::Entry<'_, K, V> {
        self.part(&key).entry(key)
    }

    /// Every entry, part after part (each shard's read lock held while it is walked).
    pub(crate) fn iter(&self) -> impl Iterator<Item = dashmap::mapref::multiple::RefMulti<'_, K, V>> {
        self.parts.iter().flat_map(|p| p.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parted_map_finds_what_it_holds_and_spreads_it_over_small_parts() {
        let map: PartedMap<String, usize> = PartedMap::default();
        let n = 100 * PARTS;
        for i in 0..n {
            assert!(map.insert(format!("s{i}"), i).is_none());
        }
        assert_eq!(map.len(), n);
        assert_eq!(map.iter().count(), n);
        for i in (0..n).step_by(7) {
            let key = format!("s{i}");
            assert_eq!(*map.get(key.as_str()).unwrap(), i);
            assert!(map.part(key.as_str()).contains_key(key.as_str()), "found in the part it is placed in");
        }
        // A walk holds one part's locks for about len / PARTS entries, not for a shard of the
        // whole map.
        let largest = map.parts().iter().map(|p| p.len()).max().unwrap();
        assert!(largest < 200, "the largest part holds {largest} of {n} entries");
        assert!(map.part("s3").remove_if("s3", |_, v| *v == 4).is_none());
        assert_eq!(map.part("s3").remove_if("s3", |_, v| *v == 3), Some(("s3".to_string(), 3)));
        assert!(!map.contains_key("s3") && map.get_mut("s3").is_none());
        assert_eq!(map.len(), n - 1);
    }
}
