//! Counters that are not a caller's own buckets but are kept beside them: a gateway's per-tool
//! quotas (toolgate's `tool_limits`). Each is named by its user (the name is a caller key in
//! the backend, apart from key ids by its prefix) and counted in the same backend and mode as
//! the callers' buckets: decided by the [`ExactBackend`] when there is one (this instance's
//! state while it does not answer), else by the local backend, which a shared backend merges
//! across instances every sync interval. In-flight slots stay per instance, as a key's do.

use super::{
    Bucket, BucketLimits, ChargeRequest, ConcurrencyGuard, Counted, LimitKey, Outcome, RateLimit, RateLimiter, Snapshot,
};

impl<L: RateLimiter + ?Sized> RateLimit<L> {
    /// Takes one token from `bucket` of the counter `name` if its windows have it. Not counted
    /// as a request in the usage figures (the request was, by the filter).
    pub async fn charge_named(&self, name: &str, bucket: Bucket, limits: BucketLimits) -> Outcome {
        let key = LimitKey::Credential(name);
        if let Some(exact) = &self.exact {
            if let Ok(decision) = exact.charge(key, bucket, 1, limits).await {
                let outcome = decision.outcome(&limits, 1);
                self.limiter.adopt(key, bucket, Some(decision.tat_unix_ns), false, Counted::Refused);
                return outcome;
            }
        }
        let charge = ChargeRequest { key, bucket, cost: 1, limits, max_in_flight: None, new_request: false };
        self.limiter.charge(&charge)
    }

    /// An in-flight slot of the counter `name` under `max` (per instance); `None` at the cap.
    pub fn take_named_slot(&self, name: &str, max: u32) -> Option<ConcurrencyGuard> {
        self.limiter.take_slot(LimitKey::Credential(name), max)
    }

    /// The state of `bucket` of the counter `name` without charging: the shared state when an
    /// [`ExactBackend`] decides (read from it), else this instance's.
    pub async fn peek_named(&self, name: &str, bucket: Bucket, limits: &BucketLimits) -> Snapshot {
        let key = LimitKey::Credential(name);
        if let Some(exact) = &self.exact {
            if let Ok(shared) = exact.read(key).await {
                self.limiter.adopt(key, bucket, Some(shared[bucket.index()]), false, Counted::Refused);
            }
        }
        self.limiter.peek(key, bucket, limits)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{LocalRateLimiter, ManualClock, RateLimitPolicy, Window};
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_named_counter_refuses_past_its_window_and_refills() {
        let clock = ManualClock::new(1_000_000);
        let rl =
            RateLimit::new(Arc::new(RateLimitPolicy::default()), Arc::new(LocalRateLimiter::with_clock(clock.clone())));
        let limits = BucketLimits { minute: Window { capacity: 2, interval_ns: 30_000_000_000 }, hour: None };
        for _ in 0..2 {
            assert!(matches!(rl.charge_named("t:a", Bucket::Gateway, limits).await, Outcome::Allowed { .. }));
        }
        match rl.charge_named("t:a", Bucket::Gateway, limits).await {
            Outcome::Limited { retry_after_ns, .. } => assert_eq!(retry_after_ns, 30_000_000_000),
            other => panic!("{other:?}"),
        }
        assert!(matches!(rl.charge_named("t:b", Bucket::Gateway, limits).await, Outcome::Allowed { .. }), "apart");
        assert_eq!(rl.peek_named("t:a", Bucket::Gateway, &limits).await.remaining, 0);
        clock.advance(Duration::from_secs(30));
        assert!(matches!(rl.charge_named("t:a", Bucket::Gateway, limits).await, Outcome::Allowed { .. }));
        let slot = rl.take_named_slot("t:a", 1).expect("a slot");
        assert!(rl.take_named_slot("t:a", 1).is_none(), "one in flight");
        drop(slot);
        assert!(rl.take_named_slot("t:a", 1).is_some());
    }
}
