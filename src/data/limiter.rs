//! The one place the rate-limit backend is chosen, beside `store::open`: the filter's per-caller
//! buckets and the gateways' and apps' per-minute quotas all count in the backend this returns,
//! so a shared backend is one arm of this match.
//!
//! Several instances on Redis share their buckets one of two ways (`rate_limits.distributed`):
//! - `leased`: each instance admits from its own copy of a caller's buckets, with no round trip
//!   on the request's path, and every `rate_limits.sync_ms` adds what it spent to the shared
//!   buckets in Redis and takes their state back (one script call for every caller and quota
//!   that moved). So the instances together admit what one would, plus at most what the others
//!   admit within one sync interval before hearing of it (README, "Running several instances").
//! - `exact`: every request's tokens are taken by one script call in Redis ([`ExactRedis`], on
//!   Redis' clock), so admission is exact across instances, for a round trip per request. The
//!   in-flight cap stays per instance, and the gateways' and apps' per-minute quotas keep the
//!   leased merge (README says why).
//!
//! Both keep a window's `tat` under the same key in microseconds, so the state is the same
//! whichever mode wrote it.

use crate::base::time::now_ms;
use crate::config::StorageConfig;
use crate::data::store::redis::{spawn_on_redis_runtime, Conn, Target};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use toolgate_filters::rate_limit::{
    shared_key_name, Bucket, BucketLimits, ExactBackend, ExactFuture, LimitKey, LocalRateLimiter, RateLimitConfig,
    RateLimiter, ReadFuture, SharedDecision, SharedState, Spent,
};

/// Whether this instance's buckets are being shared: since when merging them with Redis has
/// failed, if it has (`rate_limits.outage: closed` refuses calls meanwhile). Always shared on
/// the embedded store (nothing to share).
#[derive(Debug, Clone, Default)]
pub struct Sharing(Arc<AtomicI64>);

impl Sharing {
    /// How long merging has failed, if it is failing now.
    pub(crate) fn lost_for(&self) -> Option<Duration> {
        let since = self.0.load(Ordering::Relaxed);
        (since > 0).then(|| Duration::from_millis((now_ms() - since).max(0) as u64))
    }

    fn works(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    fn failed(&self) {
        let _ = self.0.compare_exchange(0, now_ms(), Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// The backend for a deployment: one instance on its embedded store counts in memory; several
/// on Redis count in memory and merge through Redis, and with `exact` also take every
/// request's tokens in Redis.
pub(crate) fn open(
    storage: &StorageConfig,
    config: &RateLimitConfig,
) -> (Arc<dyn RateLimiter>, Option<Arc<dyn ExactBackend>>, Sharing) {
    let sharing = Sharing::default();
    let sync = Duration::from_millis(config.sync_ms);
    match storage {
        StorageConfig::Embedded { .. } => (Arc::new(LocalRateLimiter::new()), None, sharing),
        StorageConfig::Redis { key_prefix, connect_timeout, command_timeout, .. } => {
            let local = Arc::new(LocalRateLimiter::new());
            let mut exact: Option<Arc<dyn ExactBackend>> = None;
            match Target::of(storage) {
                Ok(target) => {
                    if config.distributed == "exact" {
                        match ExactRedis::new(&target, key_prefix, *connect_timeout, *command_timeout, &sharing) {
                            Ok(backend) => exact = Some(Arc::new(backend)),
                            Err(e) => {
                                tracing::error!(error = %e, "exact rate limits unavailable: each instance counts alone");
                                sharing.failed();
                            }
                        }
                    }
                    let shared = Shared {
                        target,
                        prefix: key_prefix.clone(),
                        timeout: *command_timeout,
                        sharing: sharing.clone(),
                    };
                    spawn_on_redis_runtime(shared.run(local.clone(), sync));
                }
                // The URL was validated with the configuration; still, never a panic.
                Err(e) => {
                    tracing::error!(error = %e, "rate limits cannot be shared: they stay per instance");
                    sharing.failed();
                }
            }
            (local, exact, sharing)
        }
    }
}

/// Takes `ARGV[1]` tokens from each window `KEYS[i]` (refill interval `ARGV[2i]` µs,
/// capacity `ARGV[2i+1]`) if every window has them, with [`LocalRateLimiter`]'s GCRA test on
/// Redis' clock: a window's backlog `max(0, tat - now)` must be at most
/// `(capacity - min(cost, capacity)) x interval`; then `tat = max(tat, now) + cost x interval`,
/// kept a second past it. Returns admitted (1/0), now, and each window's `tat` (after when
/// admitted, as found when not), all in microseconds, as strings (Lua's doubles hold them
/// exactly; Redis would truncate a number reply to an integer anyway).
const EXACT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cost = tonumber(ARGV[1])
local tats = {}
local ok = true
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i])
  local capacity = tonumber(ARGV[2 * i + 1])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  tats[i] = tat
  local backlog = tat - now
  if backlog < 0 then backlog = 0 end
  if backlog > (capacity - math.min(cost, capacity)) * interval then ok = false end
end
if ok then
  for i = 1, #KEYS do
    local interval = tonumber(ARGV[2 * i])
    local tat = tats[i]
    if tat < now then tat = now end
    tat = tat + cost * interval
    tats[i] = tat
    redis.call('SET', KEYS[i], string.format('%.0f', tat), 'PX', math.floor((tat - now) / 1000) + 1000)
  end
end
local out = { ok and '1' or '0', string.format('%.0f', now) }
for i = 1, #KEYS do out[i + 2] = string.format('%.0f', tats[i]) end
return out
"#;

/// The key of window `window` (0 the minute, 1 the hour) of a caller's bucket: the caller as
/// hash tag, so all of a caller's windows share a slot. [`EXACT`] and [`MERGE`] keep the same
/// state under it.
fn window_key(prefix: &str, caller: &str, bucket: usize, window: usize) -> String {
    format!("{prefix}:rl:{{{caller}}}:{bucket}:{window}")
}

/// How long after a failed call [`ExactRedis`] decides locally without trying Redis, so that
/// an outage costs each request nothing rather than a time-out.
const EXACT_RETRY_AFTER_MS: i64 = 1000;

/// The `exact` backend: one `EVALSHA` of [`EXACT`] per request.
struct ExactRedis {
    inner: Arc<ExactInner>,
    sharing: Sharing,
    /// Until when (Unix ms) Redis is not asked after a failure.
    resting_until: AtomicI64,
}

struct ExactInner {
    conn: Conn,
    script: redis::Script,
    prefix: String,
}

impl ExactRedis {
    fn new(
        target: &Target,
        prefix: &str,
        connect_timeout: Duration,
        command_timeout: Duration,
        sharing: &Sharing,
    ) -> redis::RedisResult<ExactRedis> {
        let conn =
            crate::data::store::redis::on_redis_runtime_sync(|| target.shared(connect_timeout, command_timeout, 1))?;
        Ok(ExactRedis {
            inner: Arc::new(ExactInner { conn, script: redis::Script::new(EXACT), prefix: prefix.to_string() }),
            sharing: sharing.clone(),
            resting_until: AtomicI64::new(0),
        })
    }
}

impl ExactBackend for ExactRedis {
    fn read<'a>(&'a self, key: LimitKey<'a>) -> ReadFuture<'a> {
        let name = shared_key_name(key);
        Box::pin(async move {
            if now_ms() < self.resting_until.load(Ordering::Relaxed) {
                return Err("Redis failed a moment ago".to_string());
            }
            // One slot (the caller's hash tag), so one MGET on a cluster too.
            let keys: Vec<String> = (0..Bucket::ALL.len())
                .flat_map(|b| [0, 1].map(|w| window_key(&self.inner.prefix, &name, b, w)))
                .collect();
            let mut conn = self.inner.conn.clone();
            let values: Vec<Option<u64>> =
                redis::cmd("MGET").arg(&keys).query_async(&mut conn).await.map_err(|e| format!("redis: {e}"))?;
            let us = |i: usize| values.get(i).copied().flatten().unwrap_or(0).saturating_mul(1000);
            let state: SharedState = std::array::from_fn(|b| [us(2 * b), us(2 * b + 1)]);
            Ok(state)
        })
    }

    fn charge<'a>(&'a self, key: LimitKey<'a>, bucket: Bucket, cost: u32, limits: BucketLimits) -> ExactFuture<'a> {
        let name = shared_key_name(key);
        Box::pin(async move {
            if now_ms() < self.resting_until.load(Ordering::Relaxed) {
                return Err("Redis failed a moment ago; deciding locally meanwhile".to_string());
            }
            let inner = self.inner.clone();
            let windows: Vec<_> = std::iter::once(limits.minute).chain(limits.hour).collect();
            // Called on the request's own runtime, not through the Redis runtime the store uses:
            // the hop there and back cost a third of the call (p50 560 µs against 350-400 µs
            // at 2 connections). A connection the manager makes again after a failure lives
            // on the runtime of the request that made it; Pingora's last as long as the process.
            let answered = (async move {
                let mut invocation = inner.script.prepare_invoke();
                invocation.arg(cost);
                for (i, w) in windows.iter().enumerate() {
                    invocation.key(window_key(&inner.prefix, &name, bucket.index(), i));
                    invocation.arg((w.interval_ns / 1000).max(1)).arg(w.capacity);
                }
                let mut conn = inner.conn.clone();
                invocation
                    .invoke_async::<Vec<String>>(&mut conn)
                    .await
                    .map_err(|e| crate::data::store::StoreError::BackendFailed { context: "redis", source: e.into() })
            })
            .await;
            let parsed = answered.map_err(|e| e.to_string()).and_then(|values| {
                let us = |i: usize| values.get(i).and_then(|v| v.parse::<u64>().ok());
                let (Some(admitted), Some(now)) = (us(0), us(1)) else {
                    return Err(format!("unexpected answer from the rate-limit script: {values:?}"));
                };
                Ok(SharedDecision {
                    admitted: admitted == 1,
                    now_unix_ns: now.saturating_mul(1000),
                    tat_unix_ns: [us(2).unwrap_or(0).saturating_mul(1000), us(3).unwrap_or(0).saturating_mul(1000)],
                })
            });
            match &parsed {
                Ok(_) => self.sharing.works(),
                Err(e) => {
                    if self.resting_until.swap(now_ms() + EXACT_RETRY_AFTER_MS, Ordering::Relaxed) == 0 {
                        tracing::warn!(error = %e, "exact rate limits: Redis did not answer; each instance counts alone meanwhile");
                    }
                    self.sharing.failed();
                }
            }
            if parsed.is_ok() && self.resting_until.swap(0, Ordering::Relaxed) != 0 {
                tracing::info!("exact rate limits: Redis answers again");
            }
            parsed
        })
    }
}

/// Adds each item's spent time (microseconds) to a shared GCRA state and returns it: for key i,
/// `tat = max(tat, now) + ARGV[2i-1]`, kept `ARGV[2i]` ms past it. Then each fixed window
/// `INCRBY` its count, kept until its end plus a minute. Microseconds, so that Lua's doubles
/// hold them exactly; `now` is Redis' own clock, the one all instances share.
const MERGE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local buckets = tonumber(ARGV[1])
local out = {}
for i = 1, buckets do
  local advance = tonumber(ARGV[2 * i])
  local keep = tonumber(ARGV[2 * i + 1])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat < now then tat = now end
  tat = tat + advance
  redis.call('SET', KEYS[i], string.format('%.0f', tat), 'PX', math.floor((tat - now) / 1000) + keep)
  out[i] = string.format('%.0f', tat)
end
for i = buckets + 1, #KEYS do
  local n = redis.call('INCRBY', KEYS[i], tonumber(ARGV[2 * buckets + 1 + (i - buckets)]))
  redis.call('PEXPIREAT', KEYS[i], tonumber(ARGV[2 * buckets + 1 + (#KEYS - buckets) + (i - buckets)]))
  out[i] = tostring(n)
end
return out
"#;

struct Shared {
    target: Target,
    prefix: String,
    timeout: Duration,
    sharing: Sharing,
}

/// What one script call merges: a caller's spent windows and fixed-window counts. On a Redis
/// Cluster a script may only touch one slot, so there is one call per caller (its keys carry it
/// as hash tag), sent together; on one server, one call for all.
#[derive(Default)]
struct MergeCall<'a> {
    spent: Vec<&'a Spent>,
    windows: Vec<&'a (String, u64, u32)>,
}

impl Shared {
    async fn run(self, local: Arc<LocalRateLimiter>, sync: Duration) {
        let script = redis::Script::new(MERGE);
        let mut conn: Option<Conn> = None;
        let mut ticker = tokio::time::interval(sync);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        let per_caller = matches!(self.target, Target::Cluster(_));
        loop {
            ticker.tick().await;
            let spent = local.take_spent();
            let windows = local.take_window_counts();
            if spent.is_empty() && windows.is_empty() {
                continue;
            }
            if conn.is_none() {
                conn = self.target.dedicated(self.timeout, self.timeout).await.ok();
            }
            let Some(c) = conn.as_ref() else {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!("cannot reach Redis to share rate limits; each instance counts alone meanwhile");
                }
                self.sharing.failed();
                continue;
            };
            let mut calls: BTreeMap<&str, MergeCall> = BTreeMap::new();
            for s in &spent {
                calls.entry(if per_caller { s.key.as_str() } else { "" }).or_default().spent.push(s);
            }
            for w in &windows {
                calls.entry(if per_caller { w.0.as_str() } else { "" }).or_default().windows.push(w);
            }
            let merged =
                futures_util::future::join_all(calls.values().map(|call| self.merge(&script, c.clone(), &local, call)))
                    .await;
            match merged.into_iter().find_map(Result::err) {
                None => {
                    if std::mem::replace(&mut failing, false) {
                        tracing::info!("rate limits are shared again");
                    }
                    self.sharing.works();
                }
                Some(e) => {
                    // What this interval spent is not shared; admission goes on per instance.
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(error = %e, "cannot share rate limits through Redis; each instance counts alone meanwhile");
                    }
                    self.sharing.failed();
                    conn = None;
                }
            }
        }
    }

    /// Runs one [`MERGE`] call and adopts the shared state it returns.
    async fn merge(
        &self,
        script: &redis::Script,
        mut conn: Conn,
        local: &LocalRateLimiter,
        call: &MergeCall<'_>,
    ) -> redis::RedisResult<()> {
        let mut invocation = script.prepare_invoke();
        invocation.arg(call.spent.len());
        for s in &call.spent {
            invocation.key(window_key(&self.prefix, &s.key, s.bucket, s.window));
            invocation.arg((s.advance_ns / 1000).max(1)).arg(s.span_ns / 1_000_000 + 1000);
        }
        for (key, reset_at, _) in &call.windows {
            invocation.key(format!("{}:rw:{{{key}}}:{reset_at}", self.prefix));
        }
        for (_, _, n) in &call.windows {
            invocation.arg(*n);
        }
        for (_, reset_at, _) in &call.windows {
            invocation.arg((reset_at + 60) * 1000);
        }
        let values: Vec<String> = invocation.invoke_async(&mut conn).await?;
        for (s, v) in call.spent.iter().zip(&values) {
            if let Ok(us) = v.parse::<u64>() {
                local.merge_tat(&s.key, s.bucket, s.window, us.saturating_mul(1000));
            }
        }
        for ((key, reset_at, _), v) in call.windows.iter().zip(values.iter().skip(call.spent.len())) {
            if let Ok(n) = v.parse::<u32>() {
                local.merge_window(key, *reset_at, n);
            }
        }
        Ok(())
    }
}

/// Counts events in `KEYS[1]`'s fixed window of `ARGV[2]` ms (from its first event) and returns
/// the count with this one and the window's time left in ms. A refused event is not counted,
/// so a client that keeps trying past the limit does not hold the window open.
const GUESS: &str = r#"
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n >= tonumber(ARGV[1]) then
  return { n + 1, redis.call('PTTL', KEYS[1]) }
end
n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return { n, redis.call('PTTL', KEYS[1]) }
"#;

/// Reads `KEYS[1]`'s fixed window (as [`GUESS`] counts it): its count and time left in ms.
const PEEK: &str = r#"
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
return { n, redis.call('PTTL', KEYS[1]) }
"#;

/// One more miss in a row for member `ARGV[1]` of the group `KEYS[1]` (a hash: the member's
/// count and last miss, on Redis' clock in ms); a streak whose last miss is `ARGV[2]` ms old or
/// more starts again. Returns the count with this one.
const MISS: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local forget = tonumber(ARGV[2])
local n = tonumber(redis.call('HGET', KEYS[1], ARGV[1] .. ':n') or '0')
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1] .. ':t') or '0')
if now - last >= forget then n = 0 end
n = n + 1
redis.call('HSET', KEYS[1], ARGV[1] .. ':n', n, ARGV[1] .. ':t', now)
redis.call('PEXPIRE', KEYS[1], forget)
return n
"#;

/// A member's streak as [`MISS`] keeps it: its count and how many ms ago its last miss was
/// (`{0, 0}` when there is none, or it is `ARGV[2]` ms old or more).
const STREAK: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(redis.call('HGET', KEYS[1], ARGV[1] .. ':n') or '0')
local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1] .. ':t') or '0')
if n == 0 or now - last >= tonumber(ARGV[2]) then return { 0, 0 } end
return { n, now - last }
"#;

/// The identity service's guessing bounds (wrong passwords per address, sign-ins started,
/// registrations per address block, metadata documents fetched): events per key in a fixed
/// window that opens with its first event, up to a limit. On Redis every count is one script
/// call, so the instances share each bound exactly (what one instance allows, all together
/// allow); on the embedded store, or while Redis does not answer, this instance counts alone.
///
/// It also keeps misses in a row ([`Guesses::miss`]): per member of a group (a credential of a
/// user, an e-mail), a count and when the last came, forgotten a while after the last or when
/// cleared by a success; on Redis one hash per group, so a group is forgotten at once.
pub struct Guesses {
    local: dashmap::DashMap<String, (u32, std::time::Instant)>,
    /// (group, member) -> misses in a row, the last, and how long after it they are kept.
    streaks: dashmap::DashMap<(String, String), (u32, std::time::Instant, Duration)>,
    redis: Option<GuessRedis>,
}

struct GuessRedis {
    conn: Conn,
    script: redis::Script,
    peek: redis::Script,
    miss: redis::Script,
    streak: redis::Script,
    prefix: String,
    /// Until when (Unix ms) Redis is not asked after a failure.
    resting_until: AtomicI64,
}

impl GuessRedis {
    /// Where `key`'s window is counted.
    fn window(&self, key: &str) -> String {
        format!("{}:guess:{{{key}}}", self.prefix)
    }

    /// Where the streaks of `group` are kept (one hash).
    fn streaks(&self, group: &str) -> String {
        format!("{}:streak:{{{group}}}", self.prefix)
    }
}

/// Keys counted locally at most; past it the oldest windows are dropped first.
const MAX_LOCAL_GUESS_KEYS: usize = 100_000;

impl Guesses {
    /// Counting in this process only.
    pub fn local() -> Guesses {
        Guesses { local: Default::default(), streaks: Default::default(), redis: None }
    }

    /// Shared through Redis when the store is Redis.
    pub fn open(storage: &StorageConfig) -> Guesses {
        let StorageConfig::Redis { key_prefix, connect_timeout, command_timeout, .. } = storage else {
            return Guesses::local();
        };
        let conn = Target::of(storage).and_then(|target| {
            crate::data::store::redis::on_redis_runtime_sync(|| target.shared(*connect_timeout, *command_timeout, 1))
        });
        match conn {
            Ok(conn) => Guesses {
                local: Default::default(),
                streaks: Default::default(),
                redis: Some(GuessRedis {
                    conn,
                    script: redis::Script::new(GUESS),
                    peek: redis::Script::new(PEEK),
                    miss: redis::Script::new(MISS),
                    streak: redis::Script::new(STREAK),
                    prefix: key_prefix.clone(),
                    resting_until: AtomicI64::new(0),
                }),
            },
            Err(e) => {
                tracing::error!(error = %e, "guessing bounds cannot be shared: each instance counts alone");
                Guesses::local()
            }
        }
    }

    /// Counts one event for `key`, unless its window already holds `limit`: then how long
    /// until the window closes.
    pub async fn count(&self, key: &str, limit: u32, window: Duration) -> Result<(), Duration> {
        if let Some(r) = self.shared() {
            let mut invocation = r.script.prepare_invoke();
            invocation.key(r.window(key)).arg(limit).arg(window.as_millis() as u64);
            let mut conn = r.conn.clone();
            match invocation.invoke_async::<(i64, i64)>(&mut conn).await {
                Ok((n, ttl)) if n > i64::from(limit) => {
                    return Err(Duration::from_millis(ttl.max(1000) as u64));
                }
                Ok(_) => return Ok(()),
                Err(e) => Guesses::rest(r, &e),
            }
        }
        self.count_locally(key, limit, window)
    }

    fn count_locally(&self, key: &str, limit: u32, window: Duration) -> Result<(), Duration> {
        if self.local.len() >= MAX_LOCAL_GUESS_KEYS {
            self.local.retain(|_, (_, since)| since.elapsed() < window);
        }
        let mut a = self.local.entry(key.to_string()).or_insert((0, std::time::Instant::now()));
        if a.1.elapsed() >= window {
            *a = (0, std::time::Instant::now());
        }
        if a.0 >= limit {
            return Err((a.1 + window)
                .saturating_duration_since(std::time::Instant::now())
                .max(Duration::from_secs(1)));
        }
        a.0 += 1;
        Ok(())
    }

    /// Drops the windows that have closed and the streaks forgotten (the server's sweep).
    pub fn sweep(&self, longest: Duration) {
        self.local.retain(|_, (_, since)| since.elapsed() < longest);
        self.streaks.retain(|_, (_, last, keep)| last.elapsed() < *keep);
    }

    /// Redis, unless it failed a moment ago.
    fn shared(&self) -> Option<&GuessRedis> {
        self.redis.as_ref().filter(|r| now_ms() >= r.resting_until.load(Ordering::Relaxed))
    }

    /// Notes that Redis did not answer: this instance counts alone for a moment.
    fn rest(r: &GuessRedis, e: &redis::RedisError) {
        if r.resting_until.swap(now_ms() + EXACT_RETRY_AFTER_MS, Ordering::Relaxed) == 0 {
            tracing::warn!(error = %e, "guessing bounds: Redis did not answer; this instance counts alone meanwhile");
        }
    }

    /// Without counting: whether `key`'s window (of `window`, as [`Guesses::count`] keeps it)
    /// already holds `limit`, and then how long until it closes.
    pub async fn full(&self, key: &str, limit: u32, window: Duration) -> Option<Duration> {
        if let Some(r) = self.shared() {
            let mut invocation = r.peek.prepare_invoke();
            invocation.key(r.window(key));
            let mut conn = r.conn.clone();
            match invocation.invoke_async::<(i64, i64)>(&mut conn).await {
                Ok((n, ttl)) => {
                    return (n >= i64::from(limit)).then(|| Duration::from_millis(ttl.max(1000) as u64));
                }
                Err(e) => Guesses::rest(r, &e),
            }
        }
        let a = self.local.get(key)?;
        let left = window.checked_sub(a.1.elapsed())?;
        (a.0 >= limit).then(|| left.max(Duration::from_secs(1)))
    }

    /// Counts one more miss in a row for `member` of `group` (kept `keep` after it) and returns
    /// how many there are now.
    pub(crate) async fn miss(&self, group: &str, member: &str, keep: Duration) -> u32 {
        if let Some(r) = self.shared() {
            let mut invocation = r.miss.prepare_invoke();
            invocation.key(r.streaks(group)).arg(member).arg(keep.as_millis() as u64);
            let mut conn = r.conn.clone();
            match invocation.invoke_async::<i64>(&mut conn).await {
                Ok(n) => return n.clamp(0, i64::from(u32::MAX)) as u32,
                Err(e) => Guesses::rest(r, &e),
            }
        }
        if self.streaks.len() >= MAX_LOCAL_GUESS_KEYS {
            self.streaks.retain(|_, (_, last, keep)| last.elapsed() < *keep);
        }
        let now = std::time::Instant::now();
        let mut s = self.streaks.entry((group.to_string(), member.to_string())).or_insert((0, now, keep));
        if now.saturating_duration_since(s.1) >= s.2 {
            s.0 = 0;
        }
        *s = (s.0.saturating_add(1), now, keep);
        s.0
    }

    /// `member`'s misses in a row (kept `keep` after the last) and how long ago the last was;
    /// `None` when there are none.
    pub(crate) async fn streak(&self, group: &str, member: &str, keep: Duration) -> Option<(u32, Duration)> {
        if let Some(r) = self.shared() {
            let mut invocation = r.streak.prepare_invoke();
            invocation.key(r.streaks(group)).arg(member).arg(keep.as_millis() as u64);
            let mut conn = r.conn.clone();
            match invocation.invoke_async::<(i64, i64)>(&mut conn).await {
                Ok((n, ago)) => {
                    return (n > 0)
                        .then(|| (n.min(i64::from(u32::MAX)) as u32, Duration::from_millis(ago.max(0) as u64)))
                }
                Err(e) => Guesses::rest(r, &e),
            }
        }
        let s = self.streaks.get(&(group.to_string(), member.to_string()))?;
        let ago = s.1.elapsed();
        (s.0 > 0 && ago < s.2).then_some((s.0, ago))
    }

    /// Ends `member`'s streak (a success), or with `None` every streak of `group`.
    pub async fn clear(&self, group: &str, member: Option<&str>) {
        if let Some(r) = self.shared() {
            let key = r.streaks(group);
            let mut conn = r.conn.clone();
            let done = match member {
                Some(m) => redis::cmd("HDEL")
                    .arg(&key)
                    .arg(format!("{m}:n"))
                    .arg(format!("{m}:t"))
                    .query_async::<i64>(&mut conn)
                    .await
                    .map(drop),
                None => redis::cmd("DEL").arg(&key).query_async::<i64>(&mut conn).await.map(drop),
            };
            if let Err(e) = done {
                Guesses::rest(r, &e);
            }
        }
        match member {
            Some(m) => drop(self.streaks.remove(&(group.to_string(), m.to_string()))),
            None => self.streaks.retain(|(g, _), _| g != group),
        }
    }

    /// Forgets `key`'s window (the user it counts for is gone or reset).
    pub async fn forget(&self, key: &str) {
        if let Some(r) = self.shared() {
            let mut conn = r.conn.clone();
            if let Err(e) = redis::cmd("DEL").arg(r.window(key)).query_async::<i64>(&mut conn).await {
                Guesses::rest(r, &e);
            }
        }
        self.local.remove(key);
    }
}

/// The address block a bound counts an address in: the address itself (IPv4), its /64 (IPv6,
/// one host's usual allocation), or with `wide` its /24 or /56 (a small network's).
pub(crate) fn address_block(ip: std::net::IpAddr, wide: bool) -> String {
    use std::net::IpAddr;
    match ip.to_canonical() {
        IpAddr::V4(v4) if wide => format!("{}/24", std::net::Ipv4Addr::from(u32::from(v4) & 0xffff_ff00)),
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let bits = if wide { 56 } else { 64 };
            let masked = u128::from(v6) & (u128::MAX << (128 - bits));
            format!("{}/{bits}", std::net::Ipv6Addr::from(masked))
        }
    }
}

#[cfg(test)]
mod guess_tests {
    use super::*;

    #[tokio::test]
    async fn a_window_refuses_past_its_limit_and_says_how_long() {
        let g = Guesses::local();
        for _ in 0..3 {
            g.count("k", 3, Duration::from_secs(60)).await.unwrap();
        }
        let wait = g.count("k", 3, Duration::from_secs(60)).await.unwrap_err();
        assert!(wait > Duration::from_secs(50) && wait <= Duration::from_secs(60), "{wait:?}");
        g.count("other", 3, Duration::from_secs(60)).await.unwrap();
    }

    #[tokio::test]
    async fn a_full_window_is_seen_without_counting() {
        let g = Guesses::local();
        let w = Duration::from_secs(60);
        assert_eq!(g.full("k", 2, w).await, None);
        g.count("k", 2, w).await.unwrap();
        assert_eq!(g.full("k", 2, w).await, None);
        g.count("k", 2, w).await.unwrap();
        let wait = g.full("k", 2, w).await.unwrap();
        assert!(wait > Duration::from_secs(50) && wait <= w, "{wait:?}");
        assert!(g.full("k", 3, w).await.is_none(), "peeking counted nothing");
        g.forget("k").await;
        assert_eq!(g.full("k", 2, w).await, None);
    }

    #[tokio::test]
    async fn misses_in_a_row_count_until_cleared_or_forgotten() {
        let g = Guesses::local();
        let hour = Duration::from_secs(3600);
        assert_eq!(g.streak("usr", "a", hour).await, None);
        assert_eq!(g.miss("usr", "a", hour).await, 1);
        assert_eq!(g.miss("usr", "a", hour).await, 2);
        assert_eq!(g.miss("usr", "b", hour).await, 1);
        assert_eq!(g.streak("usr", "a", hour).await.map(|s| s.0), Some(2));
        g.clear("usr", Some("a")).await;
        assert_eq!(g.streak("usr", "a", hour).await, None);
        assert_eq!(g.streak("usr", "b", hour).await.map(|s| s.0), Some(1));
        g.clear("usr", None).await;
        assert_eq!(g.streak("usr", "b", hour).await, None);
        // Kept `keep` after the last miss: then forgotten, and swept out.
        let now = std::time::Instant::now();
        let (short, past) = (Duration::from_millis(50), now - Duration::from_millis(60));
        g.streaks.insert(("old".into(), "x".into()), (9, past, short));
        g.streaks.insert(("new".into(), "x".into()), (3, now, hour));
        assert_eq!(g.streak("old", "x", short).await, None);
        assert_eq!(g.miss("old", "x", short).await, 1, "a forgotten streak starts again");
        g.streaks.insert(("old".into(), "x".into()), (9, past, short));
        g.sweep(hour);
        assert_eq!(g.streaks.len(), 1, "the stale streak went, the live one stayed");
    }

    #[test]
    fn blocks_are_slash_24_and_56_when_wide() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert_eq!(address_block(ip("192.0.2.77"), true), "192.0.2.0/24");
        assert_eq!(address_block(ip("192.0.2.77"), false), "192.0.2.77");
        assert_eq!(address_block(ip("::ffff:192.0.2.77"), true), "192.0.2.0/24");
        assert_eq!(address_block(ip("2001:db8:1:2ff:1::9"), true), "2001:db8:1:200::/56");
        assert_eq!(address_block(ip("2001:db8:1:2ff:1::9"), false), "2001:db8:1:2ff::/64");
    }
}
