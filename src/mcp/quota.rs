//! Per-minute quotas shared by all callers (DESIGN Decision 3): a gateway's
//! `configuration.rate_limit` and an app's `rate_limit`, which protects that upstream.
//!
//! Fixed one-minute windows: the figure is "requests per minute" for a whole gateway or app, so
//! the simplest exact reading of it is the right one; the per-caller buckets with burst live in
//! the rate-limit filter.

use http::{HeaderName, HeaderValue};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use toolgate_filters::rate_limit::RateLimiter;
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
    pub fn write_headers(&self, bucket: &str, headers: &mut Vec<(HeaderName, HeaderValue)>) {
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
pub fn app_bucket(app_id: &str) -> String {
    format!("app:{app_id}")
}

/// The per-minute quotas of gateways and apps, counted by the rate-limit backend (the same one
/// the filter's buckets use), so that instances sharing a backend share the figures.
pub struct MinuteQuota {
    backend: Arc<dyn RateLimiter>,
}

impl MinuteQuota {
    pub fn new(backend: Arc<dyn RateLimiter>) -> MinuteQuota {
        MinuteQuota { backend }
    }

    /// Counts one request against `limit` per minute for `key`; [`Spent`] until the next window
    /// when the quota is spent.
    pub fn admit(&self, key: &str, limit: u32) -> Result<(), Spent> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        self.admit_at(key, limit, now)
    }

    fn admit_at(&self, key: &str, limit: u32, now_secs: u64) -> Result<(), Spent> {
        let w = self.backend.charge_window(key, limit, 60, now_secs);
        if w.allowed {
            return Ok(());
        }
        Err(Spent { limit, reset_at: w.reset_at, retry_after: w.reset_at.saturating_sub(now_secs).max(1) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_filters::rate_limit::LocalRateLimiter;

    #[test]
    fn exact_per_minute() {
        let q = MinuteQuota::new(Arc::new(LocalRateLimiter::new()));
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
