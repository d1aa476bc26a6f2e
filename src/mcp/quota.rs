//! Per-minute quotas shared by all callers (DESIGN Decision 3): a gateway's
//! `configuration.rate_limit` and an app's `rate_limit`, which protects that upstream.
//!
//! Fixed one-minute windows: the figure is "requests per minute" for a whole gateway or app, so
//! the simplest exact reading of it is the right one; the per-caller buckets with burst live in
//! the rate-limit filter.

use dashmap::DashMap;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Default)]
pub struct MinuteQuota {
    /// key -> (minute since the epoch, requests in it).
    windows: DashMap<String, (u64, u32)>,
}

impl MinuteQuota {
    /// Counts one request against `limit` per minute for `key`; `Err(seconds)` until the next
    /// window when the quota is spent.
    pub fn admit(&self, key: &str, limit: u32) -> Result<(), u64> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        self.admit_at(key, limit, now)
    }

    fn admit_at(&self, key: &str, limit: u32, now_secs: u64) -> Result<(), u64> {
        let minute = now_secs / 60;
        let mut w = match self.windows.get_mut(key) {
            Some(w) => w,
            None => self.windows.entry(key.to_string()).or_insert((minute, 0)),
        };
        if w.0 != minute {
            *w = (minute, 0);
        }
        if w.1 >= limit {
            return Err((minute + 1) * 60 - now_secs);
        }
        w.1 += 1;
        Ok(())
    }

    /// Drops windows of past minutes.
    pub fn sweep(&self) {
        let minute = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() / 60).unwrap_or(0);
        self.windows.retain(|_, w| w.0 >= minute);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_per_minute() {
        let q = MinuteQuota::default();
        let t = 6_000; // start of a minute
        for _ in 0..3 {
            assert_eq!(q.admit_at("g", 3, t + 10), Ok(()));
        }
        assert_eq!(q.admit_at("g", 3, t + 10), Err(50));
        assert_eq!(q.admit_at("other", 3, t + 10), Ok(()));
        assert_eq!(q.admit_at("g", 3, t + 60), Ok(()));
    }
}
