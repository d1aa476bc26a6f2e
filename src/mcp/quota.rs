//! Per-minute quotas shared by all callers (DESIGN Decision 3): a gateway's
//! `configuration.rate_limit` and an app's `rate_limit`, which protects that upstream.
//!
//! Fixed one-minute windows: the figure is "requests per minute" for a whole gateway or app, so
//! the simplest exact reading of it is the right one; the per-caller buckets with burst live in
//! the rate-limit filter.

use crate::base::fast_map::FastMap;
use http::{HeaderName, HeaderValue};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use toolgate_filters::rate_limit::{RateLimiter, WindowOutcome};
use toolgate_filters::rate_limit::{
    X_RATELIMIT_BUCKET, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET, X_RATELIMIT_RESET_AFTER,
};

/// A spent quota, as its 429 reports it: the caller's own bucket may be far from empty, so the
/// answer names the quota that refused and when that one refills, not the caller's bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent {
    /// Requests per minute.
    pub limit: u32,
    /// Unix seconds when the next window opens.
    pub reset_at: u64,
    /// Seconds until then (at least 1): `Retry-After`.
    pub retry_after: u64,
}

impl Spent {
    /// Puts this quota's five `X-RateLimit-*` values in place of the caller's bucket in
    /// `headers` (the filters' response headers), with `bucket` naming the quota
    /// (`gateway:<id>`, `app:<id>`).
    pub(crate) fn write_headers(&self, bucket: &str, headers: &mut Vec<(HeaderName, HeaderValue)>) {
        headers.retain(|(n, _)| {
            ![
                &X_RATELIMIT_LIMIT,
                &X_RATELIMIT_REMAINING,
                &X_RATELIMIT_RESET,
                &X_RATELIMIT_RESET_AFTER,
                &X_RATELIMIT_BUCKET,
            ]
            .contains(&n)
        });
        // Gateway and app ids are header-safe; anything else still gets a bucket header.
        let bucket = HeaderValue::from_str(bucket).unwrap_or_else(|_| HeaderValue::from_static("quota"));
        headers.extend([
            (X_RATELIMIT_LIMIT, HeaderValue::from(self.limit)),
            (X_RATELIMIT_REMAINING, HeaderValue::from_static("0")),
            (X_RATELIMIT_RESET, HeaderValue::from(self.reset_at)),
            (X_RATELIMIT_RESET_AFTER, HeaderValue::from(self.retry_after)),
            (X_RATELIMIT_BUCKET, bucket),
        ]);
    }
}

/// The bucket an app's per-minute limit counts in (and the 429 names).
pub(crate) fn app_bucket(app_id: &str) -> String {
    format!("app:{app_id}")
}

/// A gateway whose per-minute quota reached `alerts.limit_warning_percent` in a window: what
/// `usage.limit_warning` reports of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reached {
    pub gateway_id: String,
    /// The window's start, Unix seconds.
    pub minute_unix: u64,
    pub count: u64,
    pub limit: u32,
}

/// The per-minute quotas of gateways and apps, counted by the rate-limit backend (the same one
/// the filter's buckets use), so that instances sharing a backend share the figures.
pub struct MinuteQuota {
    backend: Arc<dyn RateLimiter>,
    /// Percent of a gateway's quota whose reaching is noted in `reached` (0: none).
    warn_percent: u8,
    reached: parking_lot::Mutex<Vec<Reached>>,
    /// Per gateway, the window (its end) last noted in `reached`.
    noted: FastMap<String, u64>,
}

/// Most gateway readings kept between two takes (each is one gateway's one window).
const MAX_REACHED: usize = 10_000;

impl MinuteQuota {
    pub fn new(backend: Arc<dyn RateLimiter>, warn_percent: u8) -> MinuteQuota {
        MinuteQuota { backend, warn_percent, reached: parking_lot::Mutex::new(Vec::new()), noted: FastMap::default() }
    }

    /// [`MinuteQuota::admit`] for a gateway's own quota; the first request of a window at or past
    /// `warn_percent` of it is noted for [`MinuteQuota::take_reached`], once per window and
    /// instance (`>=`, not `==`: with a shared backend, other instances' counts arrive in steps).
    pub(crate) fn admit_gateway(&self, gateway_id: &str, limit: u32) -> Result<(), Spent> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let w = self.charge_at(gateway_id, limit, now)?;
        if self.warn_percent > 0
            && u64::from(w.count) >= warn_count(limit, self.warn_percent)
            && self.first_in(gateway_id, w.reset_at)
        {
            let mut reached = self.reached.lock();
            if reached.len() < MAX_REACHED {
                reached.push(Reached {
                    gateway_id: gateway_id.to_string(),
                    minute_unix: w.reset_at.saturating_sub(60),
                    count: u64::from(w.count),
                    limit,
                });
            }
        }
        Ok(())
    }

    /// Whether this is the first note of `gateway_id`'s window ending at `reset_at`.
    fn first_in(&self, gateway_id: &str, reset_at: u64) -> bool {
        if self.noted.get(gateway_id).is_some_and(|r| *r == reset_at) {
            return false;
        }
        self.noted.insert(gateway_id.to_string(), reset_at);
        true
    }

    /// The gateways that reached their warning share since the last take.
    pub(crate) fn take_reached(&self) -> Vec<Reached> {
        std::mem::take(&mut *self.reached.lock())
    }

    /// Counts one request against `limit` per minute for `key`; [`Spent`] until the next window
    /// when the quota is spent.
    pub fn admit(&self, key: &str, limit: u32) -> Result<(), Spent> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        self.admit_at(key, limit, now)
    }

    fn admit_at(&self, key: &str, limit: u32, now_secs: u64) -> Result<(), Spent> {
        self.charge_at(key, limit, now_secs).map(|_| ())
    }

    /// One request in `key`'s window: the window as it stands after it, or [`Spent`].
    fn charge_at(&self, key: &str, limit: u32, now_secs: u64) -> Result<WindowOutcome, Spent> {
        let w = self.backend.charge_window(key, limit, 60, now_secs);
        if w.allowed {
            return Ok(w);
        }
        Err(Spent { limit, reset_at: w.reset_at, retry_after: w.reset_at.saturating_sub(now_secs).max(1) })
    }
}

/// The count at which a window holds `percent` of `limit` (rounded up, at least 1).
fn warn_count(limit: u32, percent: u8) -> u64 {
    (u64::from(limit) * u64::from(percent)).div_ceil(100).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_filters::rate_limit::LocalRateLimiter;

    #[test]
    fn a_gateway_reaching_its_warning_share_is_noted_once_per_window() {
        let q = MinuteQuota::new(Arc::new(LocalRateLimiter::new()), 80);
        assert_eq!(warn_count(10, 80), 8);
        assert_eq!(warn_count(3, 80), 3);
        assert_eq!(warn_count(1000, 1), 10);
        for _ in 0..7 {
            q.admit_gateway("gw_a", 10).unwrap();
        }
        assert_eq!(q.take_reached(), vec![], "7 of 10: below 80 %");
        for _ in 0..3 {
            q.admit_gateway("gw_a", 10).unwrap();
        }
        assert!(q.admit_gateway("gw_a", 10).is_err(), "spent");
        let reached = q.take_reached();
        assert_eq!(reached.len(), 1, "once, at the 8th call: {reached:?}");
        assert_eq!((reached[0].gateway_id.as_str(), reached[0].count, reached[0].limit), ("gw_a", 8, 10));
        assert_eq!(reached[0].minute_unix % 60, 0);
        assert_eq!(q.take_reached(), vec![], "taken once");
        let off = MinuteQuota::new(Arc::new(LocalRateLimiter::new()), 0);
        for _ in 0..10 {
            off.admit_gateway("gw_a", 10).unwrap();
        }
        assert_eq!(off.take_reached(), vec![], "0 turns it off");
    }

    #[test]
    fn exact_per_minute() {
        let q = MinuteQuota::new(Arc::new(LocalRateLimiter::new()), 0);
        let t = 6_000; // start of a minute
        for _ in 0..3 {
            assert_eq!(q.admit_at("g", 3, t + 10), Ok(()));
        }
        assert_eq!(q.admit_at("g", 3, t + 10), Err(Spent { limit: 3, reset_at: t + 60, retry_after: 50 }));
        assert_eq!(q.admit_at("other", 3, t + 10), Ok(()));
        assert_eq!(q.admit_at("g", 3, t + 60), Ok(()));
    }

    #[test]
    fn a_spent_quota_replaces_the_callers_bucket_in_the_headers() {
        let caller = [
            (X_RATELIMIT_LIMIT, "1000"),
            (X_RATELIMIT_REMAINING, "71"),
            (X_RATELIMIT_RESET, "6001"),
            (X_RATELIMIT_RESET_AFTER, "1"),
            (X_RATELIMIT_BUCKET, "gateway"),
        ];
        let other = HeaderName::from_static("x-other");
        let mut headers: Vec<(HeaderName, HeaderValue)> =
            caller.into_iter().map(|(n, v)| (n, HeaderValue::from_static(v))).collect();
        headers.push((other.clone(), HeaderValue::from_static("kept")));
        Spent { limit: 2, reset_at: 6060, retry_after: 50 }.write_headers("gateway:gw_1", &mut headers);
        let get = |n: &HeaderName| {
            let all: Vec<_> = headers.iter().filter(|(k, _)| k == n).map(|(_, v)| v.to_str().unwrap()).collect();
            assert_eq!(all.len(), 1, "{n} once: {headers:?}");
            all[0].to_string()
        };
        assert_eq!(get(&X_RATELIMIT_LIMIT), "2");
        assert_eq!(get(&X_RATELIMIT_REMAINING), "0");
        assert_eq!(get(&X_RATELIMIT_RESET), "6060");
        assert_eq!(get(&X_RATELIMIT_RESET_AFTER), "50");
        assert_eq!(get(&X_RATELIMIT_BUCKET), "gateway:gw_1");
        assert_eq!(get(&other), "kept");
    }
}
