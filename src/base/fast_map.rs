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
pub type FastMap<K, V> = dashmap::DashMap<K, V, ahash::RandomState>;

/// A `DashSet` hashed with aHash; made with `FastSet::default()`.
pub type FastSet<K> = dashmap::DashSet<K, ahash::RandomState>;
