//! The in-memory backend: one entry per caller in a sharded map, a short per-caller mutex
//! around its ten window timestamps, and an atomic in-flight counter.
//!
//! GCRA: a window's state is the instant `tat` at which it is full again. With capacity `C`
//! and refill interval `I`, the backlog `max(0, tat - now)` is the debt in nanoseconds; a
//! request of cost `n` is admitted when `backlog <= (C - min(n, C)) * I`, and then
//! `tat = max(tat, now) + n * I`. A request larger than the whole bucket is admitted once the
//! bucket is full and leaves debt, so it is slowed down rather than impossible.

use super::{
    snapshot_at, Bucket, BucketLimits, ChargeRequest, ConcurrencyGuard, Counted, InFlightSlot, LimitKey, Outcome,
    RateLimiter, Snapshot, Spent, UsageMinute, Window, WindowOutcome, MINUTE_NS, SECOND_NS,
};
use dashmap::DashMap;
use parking_lot::Mutex;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The maps of callers, read on every request (aHash: `src/base/fast_map.rs` in toolgate says why).
type Map<K, V> = DashMap<K, V, ahash::RandomState>;

/// Time as the limiter sees it. Injectable so that tests move time by hand.
pub trait Clock: Send + Sync {
    /// Monotonic nanoseconds since an arbitrary start (never goes back).
    fn now_ns(&self) -> u64;
    /// The Unix time, in nanoseconds, of `now_ns() == 0`; only used for `X-RateLimit-Reset`.
    fn unix_origin_ns(&self) -> u64;
}

/// The real clock: `Instant` for admission, anchored once to the wall clock for headers, so a
/// wall-clock step never frees or freezes tokens.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    start: Instant,
    unix_origin_ns: u64,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        let unix = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        MonotonicClock { start: Instant::now(), unix_origin_ns: u64::try_from(unix.as_nanos()).unwrap_or(0) }
    }
}

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
    fn unix_origin_ns(&self) -> u64 {
        self.unix_origin_ns
    }
}

/// A clock moved by hand, for tests. Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
    unix_origin_ns: u64,
}

impl ManualClock {
    /// Starts at 0, which is `unix_origin_secs` on the wall clock.
    pub fn new(unix_origin_secs: u64) -> Self {
        ManualClock { now: Arc::default(), unix_origin_ns: unix_origin_secs * SECOND_NS }
    }

    pub fn advance(&self, by: std::time::Duration) {
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.now.fetch_add(ns, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }
    fn unix_origin_ns(&self) -> u64 {
        self.unix_origin_ns
    }
}

/// A caller's windows: `[bucket][0 = minute, 1 = hour]`.
#[derive(Debug, Default)]
struct Windows {
    tat: [[u64; 2]; 5],
    /// Requests per calendar minute not yet taken by [`RateLimiter::take_usage`] (without
    /// `key_id`). One entry most of the time, two across a minute's end.
    unsaved: Vec<UsageMinute>,
    /// Per window, the time admissions advanced `tat` by (cost x interval) since
    /// [`LocalRateLimiter::take_spent`], and the window's span (capacity x interval): what a
    /// shared backend merges across instances.
    spent: [[(u64, u64); 2]; 5],
}

#[derive(Debug, Default)]
struct CallerState {
    windows: Mutex<Windows>,
    in_flight: AtomicU32,
}

impl InFlightSlot for CallerState {
    fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::Release);
    }
}

impl CallerState {
    fn try_take_slot(&self, max: u32) -> bool {
        self.in_flight.fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| (n < max).then_some(n + 1)).is_ok()
    }
}

/// The in-memory [`RateLimiter`]. Memory per caller is fixed (about 200 bytes plus the key id),
/// and [`RateLimiter::sweep`] drops callers whose buckets have refilled.
pub struct LocalRateLimiter<C: Clock = MonotonicClock> {
    clock: C,
    keys: Map<Box<str>, Arc<CallerState>>,
    addresses: Map<IpAddr, Arc<CallerState>>,
    /// Fixed windows of shared figures: key -> (Unix seconds when the window ends, requests in
    /// it, requests not yet taken by [`LocalRateLimiter::take_window_counts`]).
    windows: Map<Box<str>, (u64, u32, u32)>,
}

impl Default for LocalRateLimiter<MonotonicClock> {
    fn default() -> Self {
        LocalRateLimiter::with_clock(MonotonicClock::default())
    }
}

impl LocalRateLimiter<MonotonicClock> {
    pub fn new() -> Self {
        LocalRateLimiter::default()
    }
}

impl<C: Clock> LocalRateLimiter<C> {
    pub fn with_clock(clock: C) -> Self {
        LocalRateLimiter { clock, keys: Map::default(), addresses: Map::default(), windows: Map::default() }
    }

    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Callers with live state (keys and addresses).
    pub fn len(&self) -> usize {
        self.keys.len() + self.addresses.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs `f` on the caller's state, creating it if needed. The map's shard stays read-locked
    /// meanwhile, so [`RateLimiter::sweep`] cannot evict it under us.
    fn with_state<R>(&self, key: LimitKey<'_>, f: impl FnOnce(&Arc<CallerState>) -> R) -> R {
        match key {
            LimitKey::Credential(k) => match self.keys.get(k) {
                Some(state) => f(&state),
                None => f(&self.keys.entry(k.into()).or_default().downgrade()),
            },
            LimitKey::Address(ip) => {
                let ip = address_key(ip);
                match self.addresses.get(&ip) {
                    Some(state) => f(&state),
                    None => f(&self.addresses.entry(ip).or_default().downgrade()),
                }
            }
        }
    }

    /// What admissions spent since the last call, per credential, bucket and window, for a
    /// shared backend to add to the shared buckets ([`LocalRateLimiter::merge_tat`] brings the
    /// shared state back). Callers without a credential stay per instance.
    pub fn take_spent(&self) -> Vec<Spent> {
        let mut out = Vec::new();
        for entry in self.keys.iter() {
            let mut w = entry.value().windows.lock();
            for (bucket, windows) in w.spent.iter_mut().enumerate() {
                for (window, spent) in windows.iter_mut().enumerate() {
                    if spent.0 > 0 {
                        out.push(Spent {
                            key: entry.key().to_string(),
                            bucket,
                            window,
                            advance_ns: std::mem::take(&mut spent.0),
                            span_ns: spent.1,
                        });
                    }
                }
            }
        }
        out
    }

    /// Brings a window of a caller up to the shared state: its `tat` (as Unix nanoseconds) is
    /// at least `tat_unix_ns`. Only ever later, so a merge never frees tokens.
    pub fn merge_tat(&self, key: &str, bucket: usize, window: usize, tat_unix_ns: u64) {
        let Some(state) = self.keys.get(key) else { return };
        let local = tat_unix_ns.saturating_sub(self.clock.unix_origin_ns());
        let mut w = state.windows.lock();
        if let Some(t) = w.tat.get_mut(bucket).and_then(|b| b.get_mut(window)) {
            *t = (*t).max(local);
        }
    }

    /// Requests counted in fixed windows since the last call: (key, window end in Unix seconds,
    /// count), for a shared backend to add up ([`LocalRateLimiter::merge_window`]).
    pub fn take_window_counts(&self) -> Vec<(String, u64, u32)> {
        let mut out = Vec::new();
        for mut entry in self.windows.iter_mut() {
            let (key, (reset_at, _, unsynced)) = entry.pair_mut();
            if *unsynced > 0 {
                out.push((key.to_string(), *reset_at, std::mem::take(unsynced)));
            }
        }
        out
    }

    /// Brings a fixed window up to the shared count of the same window.
    pub fn merge_window(&self, key: &str, reset_at: u64, shared: u32) {
        if let Some(mut w) = self.windows.get_mut(key) {
            if w.0 == reset_at {
                w.1 = w.1.max(shared);
            }
        }
    }

    fn existing<R>(&self, key: LimitKey<'_>, f: impl FnOnce(&CallerState) -> R) -> Option<R> {
        match key {
            LimitKey::Credential(k) => self.keys.get(k).map(|s| f(&s)),
            LimitKey::Address(ip) => self.addresses.get(&address_key(ip)).map(|s| f(&s)),
        }
    }

    fn snapshot(&self, now: u64, w: Window, tat: u64) -> Snapshot {
        let origin = self.clock.unix_origin_ns();
        snapshot_at(origin + now, w, origin.saturating_add(tat))
    }

    /// The window to report: the one with fewer tokens left (the minute window on a tie).
    fn report(&self, now: u64, limits: &BucketLimits, tat: &[u64; 2]) -> Snapshot {
        let minute = self.snapshot(now, limits.minute, tat[0]);
        match limits.hour {
            Some(h) => {
                let hour = self.snapshot(now, h, tat[1]);
                if hour.remaining < minute.remaining {
                    hour
                } else {
                    minute
                }
            }
            None => minute,
        }
    }
}

/// Callers without a credential are keyed by address; IPv6 by /64, the smallest block a
/// single host is usually given, so one host cannot mint fresh buckets (and entries) at will.
pub(super) fn address_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

/// The GCRA test for one window: the new `tat` if `cost` fits, else the wait until it does.
pub(super) fn admit(tat: u64, now: u64, w: Window, cost: u64) -> Result<u64, u64> {
    let backlog = tat.saturating_sub(now);
    let allowed = (w.capacity - cost.min(w.capacity)).saturating_mul(w.interval_ns);
    if backlog <= allowed {
        Ok(tat.max(now).saturating_add(cost.saturating_mul(w.interval_ns)))
    } else {
        Err(backlog - allowed)
    }
}

impl<C: Clock> RateLimiter for LocalRateLimiter<C> {
    fn charge_window(&self, key: &str, limit: u32, window_secs: u64, now_unix_secs: u64) -> WindowOutcome {
        let window_secs = window_secs.max(1);
        let reset_at = (now_unix_secs / window_secs + 1) * window_secs;
        let mut w = match self.windows.get_mut(key) {
            Some(w) => w,
            None => self.windows.entry(key.into()).or_insert((reset_at, 0, 0)),
        };
        if w.0 != reset_at {
            *w = (reset_at, 0, 0);
        }
        if w.1 >= limit {
            return WindowOutcome { allowed: false, count: w.1, reset_at };
        }
        w.1 += 1;
        w.2 += 1;
        WindowOutcome { allowed: true, count: w.1, reset_at }
    }

    fn charge(&self, req: &ChargeRequest<'_>) -> Outcome {
        let now = self.clock.now_ns();
        let cost = u64::from(req.cost);
        let b = req.bucket.index();
        self.with_state(req.key, |state| {
            if let Some(max) = req.max_in_flight {
                if !state.try_take_slot(max) {
                    let mut w = state.windows.lock();
                    count(&mut w, now, self.clock.unix_origin_ns(), req.new_request, req.bucket, Counted::Refused);
                    let mut snapshot = self.report(now, &req.limits, &w.tat[b]);
                    snapshot.remaining = 0;
                    return Outcome::TooManyInFlight { snapshot };
                }
            }
            let mut w = state.windows.lock();
            let tat = w.tat[b];
            let minute = admit(tat[0], now, req.limits.minute, cost);
            let hour = match req.limits.hour {
                Some(h) => admit(tat[1], now, h, cost),
                None => Ok(tat[1]),
            };
            match (minute, hour) {
                (Ok(m), Ok(h)) => {
                    w.tat[b] = [m, h];
                    let minute_w = req.limits.minute;
                    let spent = &mut w.spent[b][0];
                    spent.0 = spent.0.saturating_add(cost.saturating_mul(minute_w.interval_ns));
                    spent.1 = minute_w.capacity.saturating_mul(minute_w.interval_ns);
                    if let Some(hw) = req.limits.hour {
                        let spent = &mut w.spent[b][1];
                        spent.0 = spent.0.saturating_add(cost.saturating_mul(hw.interval_ns));
                        spent.1 = hw.capacity.saturating_mul(hw.interval_ns);
                    }
                    let snapshot = self.report(now, &req.limits, &w.tat[b]);
                    let origin = self.clock.unix_origin_ns();
                    count(&mut w, now, origin, req.new_request, req.bucket, Counted::Admitted(&snapshot));
                    drop(w);
                    let guard =
                        req.max_in_flight.map(|_| ConcurrencyGuard::new(state.clone() as Arc<dyn InFlightSlot>));
                    Outcome::Allowed { snapshot, guard }
                }
                (m, h) => {
                    if req.max_in_flight.is_some() {
                        state.release();
                    }
                    let wait_minute = m.err().unwrap_or(0);
                    let wait_hour = h.err().unwrap_or(0);
                    // Report the window that refused (the longer wait), with nothing left.
                    let mut snapshot = match req.limits.hour {
                        Some(hw) if wait_hour > wait_minute => self.snapshot(now, hw, tat[1]),
                        _ => self.snapshot(now, req.limits.minute, tat[0]),
                    };
                    snapshot.remaining = 0;
                    count(&mut w, now, self.clock.unix_origin_ns(), req.new_request, req.bucket, Counted::Refused);
                    Outcome::Limited { snapshot, retry_after_ns: wait_minute.max(wait_hour) }
                }
            }
        })
    }

    fn take_slot(&self, key: LimitKey<'_>, max: u32) -> Option<ConcurrencyGuard> {
        self.with_state(key, |state| {
            state.try_take_slot(max).then(|| ConcurrencyGuard::new(state.clone() as Arc<dyn InFlightSlot>))
        })
    }

    fn adopt(
        &self,
        key: LimitKey<'_>,
        bucket: Bucket,
        tat_unix_ns: Option<[u64; 2]>,
        new_request: bool,
        outcome: Counted<'_>,
    ) {
        let now = self.clock.now_ns();
        let origin = self.clock.unix_origin_ns();
        self.with_state(key, |state| {
            let mut w = state.windows.lock();
            if let Some(shared) = tat_unix_ns {
                for (t, s) in w.tat[bucket.index()].iter_mut().zip(shared) {
                    *t = (*t).max(s.saturating_sub(origin));
                }
            }
            count(&mut w, now, origin, new_request, bucket, outcome);
        });
    }

    fn peek(&self, key: LimitKey<'_>, bucket: Bucket, limits: &BucketLimits) -> Snapshot {
        let now = self.clock.now_ns();
        let tat = self.existing(key, |s| s.windows.lock().tat[bucket.index()]).unwrap_or([0, 0]);
        self.report(now, limits, &tat)
    }

    fn take_usage(&self) -> Vec<UsageMinute> {
        let mut taken = Vec::new();
        for entry in self.keys.iter() {
            let unsaved = std::mem::take(&mut entry.value().windows.lock().unsaved);
            taken.extend(unsaved.into_iter().map(|m| UsageMinute { key_id: entry.key().to_string(), ..m }));
        }
        // Callers without a credential are not reported, only kept from piling up.
        for entry in self.addresses.iter() {
            entry.value().windows.lock().unsaved.clear();
        }
        taken
    }

    fn sweep(&self) -> usize {
        let now = self.clock.now_ns();
        // Only the map holds the state (no request is using it), nothing is in flight, and
        // every window has refilled: dropping it changes no future decision.
        let idle = |state: &Arc<CallerState>| {
            Arc::strong_count(state) == 1
                && state.in_flight.load(Ordering::Acquire) == 0
                // Time spent and not yet shared may go with it: it has refilled here, so it has
                // in the shared state too.
                && state.windows.try_lock().is_some_and(|w| w.unsaved.is_empty() && w.tat.iter().flatten().all(|&t| t <= now))
        };
        let before = self.len();
        self.keys.retain(|_, s| !idle(s));
        self.addresses.retain(|_, s| !idle(s));
        // Windows that have ended hold nothing a request will read.
        let now_secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let windows = self.windows.len();
        self.windows.retain(|_, w| w.0 > now_secs);
        before - self.len() + (windows - self.windows.len())
    }
}

/// Counts one request in its calendar minute's usage.
fn count(w: &mut Windows, now: u64, unix_origin: u64, new_request: bool, bucket: Bucket, outcome: Counted<'_>) {
    if !new_request {
        return;
    }
    let minute_unix = (unix_origin + now) / MINUTE_NS * 60;
    let current = match w.unsaved.last_mut() {
        Some(m) if m.minute_unix == minute_unix => m,
        _ => {
            w.unsaved.push(UsageMinute { minute_unix, ..UsageMinute::default() });
            w.unsaved.last_mut().expect("just pushed")
        }
    };
    current.requests += 1;
    let (remaining, used_percent) = match outcome {
        Counted::Refused => {
            current.rate_limited += 1;
            (0, 100)
        }
        Counted::Admitted(s) => {
            let used = s.limit.saturating_sub(s.remaining.min(s.limit));
            (s.remaining, (used * 100).checked_div(s.limit).unwrap_or(0).min(100) as u8)
        }
    };
    current.remaining_sum += remaining;
    if current.peak_bucket.is_none() || used_percent > current.peak_percent {
        current.peak_percent = used_percent;
        current.peak_bucket = Some(bucket);
    }
}
