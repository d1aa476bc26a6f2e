//! The one place the rate-limit backend is chosen, beside `store::open`: the filter's per-caller
//! buckets and the gateways' and apps' per-minute quotas all count in the backend this returns,
//! so a shared backend is one arm of this match.
//!
//! Several instances on Redis share their buckets the `leased` way (`rate_limits.distributed`):
//! each instance admits from its own copy of a caller's buckets, with no round trip on the
//! request's path, and every `rate_limits.sync_ms` adds what it spent to the shared buckets in
//! Redis and takes their state back (one script call for every caller and quota that moved). So
//! the instances together admit what one would, plus at most what the others admit within one
//! sync interval before hearing of it (README, "Running several instances").

use crate::config::StorageConfig;
use crate::store::redis::spawn_on_redis_runtime;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use toolgate_filters::rate_limit::{LocalRateLimiter, RateLimiter};

/// Whether this instance's buckets are being shared: since when merging them with Redis has
/// failed, if it has (`rate_limits.outage: closed` refuses calls meanwhile). Always shared on
/// the embedded store (nothing to share).
#[derive(Debug, Clone, Default)]
pub struct Sharing(Arc<AtomicI64>);

impl Sharing {
    /// How long merging has failed, if it is failing now.
    pub fn lost_for(&self) -> Option<Duration> {
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

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The backend for a deployment: one instance on its embedded store counts in memory; several
/// on Redis count in memory and merge through Redis.
pub fn open(storage: &StorageConfig, sync: Duration) -> (Arc<dyn RateLimiter>, Sharing) {
    let sharing = Sharing::default();
    match storage {
        StorageConfig::Embedded { .. } => (Arc::new(LocalRateLimiter::new()), sharing),
        StorageConfig::Redis { url, key_prefix, command_timeout, tls, .. } => {
            let local = Arc::new(LocalRateLimiter::new());
            match crate::store::redis::client(url, tls) {
                Ok(client) => {
                    let shared = Shared {
                        client,
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
            (local, sharing)
        }
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
    client: redis::Client,
    prefix: String,
    timeout: Duration,
    sharing: Sharing,
}

impl Shared {
    async fn run(self, local: Arc<LocalRateLimiter>, sync: Duration) {
        let script = redis::Script::new(MERGE);
        let mut conn = None;
        let mut ticker = tokio::time::interval(sync);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            ticker.tick().await;
            let spent = local.take_spent();
            let windows = local.take_window_counts();
            if spent.is_empty() && windows.is_empty() {
                continue;
            }
            if conn.is_none() {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout));
                conn = self.client.get_multiplexed_async_connection_with_config(&config).await.ok();
            }
            let Some(c) = conn.as_mut() else {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!("cannot reach Redis to share rate limits; each instance counts alone meanwhile");
                }
                self.sharing.failed();
                continue;
            };
            let mut invocation = script.prepare_invoke();
            invocation.arg(spent.len());
            for s in &spent {
                invocation.key(format!("{}:rl:{{{}}}:{}:{}", self.prefix, s.key, s.bucket, s.window));
                invocation.arg((s.advance_ns / 1000).max(1)).arg(s.span_ns / 1_000_000 + 1000);
            }
            for (key, reset_at, _) in &windows {
                invocation.key(format!("{}:rw:{{{key}}}:{reset_at}", self.prefix));
            }
            for (_, _, n) in &windows {
                invocation.arg(*n);
            }
            for (_, reset_at, _) in &windows {
                invocation.arg((reset_at + 60) * 1000);
            }
            let merged: redis::RedisResult<Vec<String>> = invocation.invoke_async(c).await;
            match merged {
                Ok(values) => {
                    if std::mem::replace(&mut failing, false) {
                        tracing::info!("rate limits are shared again");
                    }
                    self.sharing.works();
                    for (s, v) in spent.iter().zip(&values) {
                        if let Ok(us) = v.parse::<u64>() {
                            local.merge_tat(&s.key, s.bucket, s.window, us.saturating_mul(1000));
                        }
                    }
                    for ((key, reset_at, _), v) in windows.iter().zip(values.iter().skip(spent.len())) {
                        if let Ok(n) = v.parse::<u32>() {
                            local.merge_window(key, *reset_at, n);
                        }
                    }
                }
                Err(e) => {
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
}
