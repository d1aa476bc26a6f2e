//! The one place the rate-limit backend is chosen, beside `store::open`: the filter's per-caller
//! buckets and the gateways' and apps' per-minute quotas all count in the backend this returns,
//! so a shared backend is one arm of this match.

use crate::config::StorageConfig;
use std::sync::Arc;
use toolgate_filters::rate_limit::{LocalRateLimiter, RateLimiter};

/// The backend for a deployment: one instance on its embedded store counts in memory.
pub fn open(storage: &StorageConfig) -> Arc<dyn RateLimiter> {
    match storage {
        StorageConfig::Embedded { .. } => Arc::new(LocalRateLimiter::new()),
        // Not yet shared: each instance of several on Redis counts its own requests (README,
        // "Running several instances").
        StorageConfig::Redis { .. } => Arc::new(LocalRateLimiter::new()),
    }
}
