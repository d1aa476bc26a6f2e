//! The one pool of per-caller values (upstreams, or the entries they are kept in), each kept for
//! a caller and an app: the per-user connections' upstreams (`user_upstreams.rs`, by member or
//! service account and app) and the token-exchanging apps' (`exchanged.rs`, by a hash of the
//! caller's token and the app) are both kept here, with the same bound and the same sweep.
//!
//! - **The bound** is per app (`most`, given at each insertion: `max_user_sessions`, or the
//!   exchanging apps' fixed bound): when an app has its `most`, the least recently used idle
//!   value is taken out to make room; when every one is in use (a call holds it) the insertion
//!   is refused rather than a session closed under a call.
//! - **The sweep** takes out a value unused for the idle time, or one its owner says is past
//!   its time (an exchanged token due), once no call holds it.
//! - **Lock-light**: a look-up (every call) takes a shard's read lock for the look-up alone,
//!   stamps the use in an atomic and allocates nothing; making room (a caller's first call) is
//!   one step under a mutex so the bound holds under concurrency. No lock is held across an
//!   await: the pool has no async method. A value is idle when nothing but the pool holds it.

use crate::base::fast_map::FastMap;
use crate::mcp::upstream::Upstream;
use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A caller's value not used for this long (and held by no call) is taken out by the sweep; its
/// next call opens (and initializes) another upstream.
pub(crate) const CALLER_IDLE: Duration = Duration::from_secs(600);

/// What the pool keeps: whether a call is using it beyond the pool's own hold (a value held
/// only by the pool can still be in use through something it holds, as an exchanged entry's
/// upstream is).
pub(crate) trait Pooled {
    fn busy(&self) -> bool {
        false
    }
}

impl Pooled for Upstream {}

/// Values per (caller, app) key `K`, each stamped with its app and its last use.
pub(crate) struct CallerPool<K, V> {
    map: FastMap<K, Kept<V>>,
    /// One insertion at a time: counting an app's entries and making room is one step.
    making_room: parking_lot::Mutex<()>,
    epoch: Instant,
}

struct Kept<V> {
    app_id: Box<str>,
    value: Arc<V>,
    /// Milliseconds since the pool's epoch at its last use.
    used: AtomicU64,
}

impl<V: Pooled> Kept<V> {
    /// Nothing but the pool holds it: no call is using it.
    fn idle(&self) -> bool {
        Arc::strong_count(&self.value) == 1 && !self.value.busy()
    }
}

impl<K: Eq + Hash, V> Default for CallerPool<K, V> {
    fn default() -> Self {
        CallerPool { map: FastMap::default(), making_room: parking_lot::Mutex::new(()), epoch: Instant::now() }
    }
}

impl<K: Eq + Hash, V: Pooled> CallerPool<K, V> {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The value of `key`, marked as used now.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let kept = self.map.get(key)?;
        kept.used.store(self.now(), Ordering::Relaxed);
        Some(kept.value.clone())
    }

    /// Keeps `value` for `key` (of `app_id`), or the one another call kept meanwhile: the first
    /// of the answer. When the app has `most` already, the least recently used idle one is
    /// taken out (the second, for the caller to close) to make room; the first is `None` when
    /// every one is in use.
    pub(crate) fn insert(&self, key: K, app_id: &str, value: Arc<V>, most: usize) -> (Option<Arc<V>>, Option<Arc<V>>)
    where
        K: Clone,
    {
        let _one = self.making_room.lock();
        if let Some(kept) = self.get(&key) {
            return (Some(kept), None);
        }
        let mut evicted = None;
        let (mut count, mut lru): (usize, Option<(K, u64)>) = (0, None);
        for e in self.map.iter().filter(|e| &*e.app_id == app_id) {
            count += 1;
            let used = e.used.load(Ordering::Relaxed);
            if e.idle() && lru.as_ref().is_none_or(|(_, u)| used < *u) {
                lru = Some((e.key().clone(), used));
            }
        }
        if count >= most {
            let Some((old, _)) = lru else { return (None, None) };
            evicted = self.map.remove(&old).map(|(_, k)| k.value);
        }
        let used = AtomicU64::new(self.now());
        self.map.insert(key, Kept { app_id: app_id.into(), value: value.clone(), used });
        (Some(value), evicted)
    }

    pub(crate) fn remove<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.remove(key).map(|(_, k)| k.value)
    }

    /// Takes out the values whose key and app `gone` names.
    pub(crate) fn remove_where(&self, gone: impl Fn(&K, &str) -> bool) -> Vec<Arc<V>> {
        let mut out = Vec::new();
        self.map.retain(|k, kept| {
            let keep = !gone(k, &kept.app_id);
            if !keep {
                out.push(kept.value.clone());
            }
            keep
        });
        out
    }

    /// Takes out every value of an app (its settings changed).
    pub(crate) fn remove_app(&self, app_id: &str) -> Vec<Arc<V>> {
        self.remove_where(|_, app| app == app_id)
    }

    /// Takes out the values no call holds that are unused for `idle` or longer, or that
    /// `expired` says are past their time; `each` sees every one kept.
    pub(crate) fn sweep(&self, idle: Duration, expired: impl Fn(&V) -> bool, each: impl Fn(&V)) -> Vec<Arc<V>> {
        // None while the pool is younger than `idle`: nothing has been unused that long yet.
        let before = self.now().checked_sub(idle.as_millis() as u64);
        let mut out = Vec::new();
        self.map.retain(|_, kept| {
            let unused = before.is_some_and(|b| kept.used.load(Ordering::Relaxed) <= b);
            let stale = kept.idle() && (unused || expired(&kept.value));
            if stale {
                out.push(kept.value.clone());
            } else {
                each(&kept.value);
            }
            !stale
        });
        out
    }

    /// Takes out every value.
    pub(crate) fn drain(&self) -> Vec<Arc<V>> {
        let out = self.map.iter().map(|k| k.value.clone()).collect();
        self.map.clear();
        out
    }

    #[cfg(test)]
    pub(crate) fn len_of(&self, app_id: &str) -> usize {
        self.map.iter().filter(|e| &*e.app_id == app_id).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::pair_key::pair;

    type Pool = CallerPool<(String, String), String>;

    impl Pooled for String {}

    fn insert(
        pool: &Pool,
        subject: &str,
        app: &str,
        value: &str,
        most: usize,
    ) -> (Option<Arc<String>>, Option<Arc<String>>) {
        pool.insert((subject.into(), app.into()), app, Arc::new(value.into()), most)
    }

    fn get(pool: &Pool, subject: &str, app: &str) -> Option<Arc<String>> {
        pool.get(pair(&(subject, app)))
    }

    #[test]
    fn each_caller_has_its_own_and_the_bound_closes_the_least_recently_used_idle_one() {
        let pool = Pool::default();
        let (a, _) = insert(&pool, "usr_a", "crm", "a", 2);
        let (b, _) = insert(&pool, "usr_b", "crm", "b", 2);
        assert_eq!((a.as_deref().map(String::as_str), b.as_deref().map(String::as_str)), (Some("a"), Some("b")));
        drop((a, b));
        // Another app's count is its own.
        assert!(insert(&pool, "usr_a", "mail", "a-mail", 1).0.is_some());
        assert_eq!(get(&pool, "usr_a", "crm").as_deref().map(String::as_str), Some("a"));
        assert_eq!(get(&pool, "usr_b", "crm").as_deref().map(String::as_str), Some("b"));
        // A second insert for the same caller keeps the first.
        let (kept, none) = insert(&pool, "usr_a", "crm", "other", 2);
        assert_eq!((kept.as_deref().map(String::as_str), none), (Some("a"), None));
        drop(kept);
        // Make `usr_a` the most recently used, clearly after `usr_b`.
        std::thread::sleep(Duration::from_millis(5));
        drop(get(&pool, "usr_a", "crm"));
        let (c, evicted) = insert(&pool, "usr_c", "crm", "c", 2);
        assert_eq!(evicted.as_deref().map(String::as_str), Some("b"), "the least recently used idle one goes");
        assert_eq!(pool.len_of("crm"), 2);
        assert!(get(&pool, "usr_b", "crm").is_none());
        // Every one in use (held by a call): a new caller is refused, none is taken out.
        let held_a = get(&pool, "usr_a", "crm");
        let (none, nothing) = insert(&pool, "usr_d", "crm", "d", 2);
        assert!(none.is_none() && nothing.is_none());
        assert_eq!(pool.len_of("crm"), 2);
        drop((held_a, c));
        // The sweep takes out the idle ones past their time, keeps those in use.
        let in_use = get(&pool, "usr_a", "crm");
        let swept = pool.sweep(Duration::ZERO, |_| false, |_| {});
        let mut swept: Vec<String> = swept.iter().map(|s| s.to_string()).collect();
        swept.sort();
        assert_eq!(swept, vec!["a-mail".to_string(), "c".to_string()]);
        assert!(in_use.is_some() && get(&pool, "usr_a", "crm").is_some());
        assert_eq!(pool.remove_app("crm").len(), 1);
        assert!(pool.drain().is_empty());
    }

    #[test]
    fn the_sweep_takes_out_what_its_owner_says_is_past_its_time_once_no_call_holds_it() {
        let pool = Pool::default();
        insert(&pool, "usr_a", "crm", "due", 8);
        insert(&pool, "usr_b", "crm", "fresh", 8);
        let held = get(&pool, "usr_a", "crm");
        let expired = |v: &String| v == "due";
        assert!(pool.sweep(Duration::from_secs(600), expired, |_| {}).is_empty(), "a call holds it");
        drop(held);
        let swept = pool.sweep(Duration::from_secs(600), expired, |_| {});
        assert_eq!(swept.iter().map(|s| s.as_str()).collect::<Vec<_>>(), vec!["due"]);
        assert_eq!(pool.remove_where(|k, _| k.0 == "usr_b").len(), 1);
        assert_eq!(pool.len_of("crm"), 0);
    }
}
