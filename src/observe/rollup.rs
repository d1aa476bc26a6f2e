//! Rollups of the request log: per time bucket and per (gateway, app, function), the number of
//! calls, of errors, their total duration and a histogram of their durations.
//!
//! Why: analytics and metrics over a month must not read a month of entries. The log pipeline
//! folds each slice of entries it writes into rollups of three widths ([`TIERS`]) in the same
//! store transaction, and the readers pick the widest tier that fits their buckets, so a query
//! costs O(buckets x functions), whatever the traffic. Rollups are additive: the store adds a
//! slice's rollup to what it holds for the same key, so a shared backend can merge them too.
//!
//! The histogram has fixed log-scale buckets over microseconds (exact below 32 us, then 4 %
//! wide), so histograms of any minutes merge by adding counts, and a percentile read from one is
//! within 2 % of the recorded duration (the bucket's geometric middle).

use std::borrow::Cow;
use std::collections::HashMap;

pub(crate) const MINUTE: i64 = 60_000;
pub(crate) const HOUR: i64 = 60 * MINUTE;

/// The widths of the rollups the pipeline writes, narrowest first.
pub(crate) const TIERS: [i64; 3] = [MINUTE, 5 * MINUTE, HOUR];

/// The widest tier whose buckets tile `step` exactly (a query of hourly or daily buckets reads
/// hourly rollups; one of minutes reads minutes).
pub(crate) fn tier_for(step_ms: i64) -> i64 {
    TIERS.iter().rev().copied().find(|t| step_ms % t == 0).unwrap_or(MINUTE)
}

/// Durations below this many microseconds have a bucket each.
const EXACT: u64 = 32;
/// Width of a log-scale bucket: the next one starts 4 % higher.
const GROWTH: f64 = 1.04;
/// Buckets in all: the last one starts at about 78 minutes, beyond every call timeout.
pub(crate) const BUCKETS: usize = 512;

fn bucket_of(us: u64) -> usize {
    if us < EXACT {
        return us as usize;
    }
    let steps = ((us as f64 / EXACT as f64).ln() / GROWTH.ln()).floor();
    (EXACT as usize + steps as usize).min(BUCKETS - 1)
}

/// The duration a bucket stands for, in microseconds: its geometric middle.
fn value_of(bucket: usize) -> f64 {
    if bucket < EXACT as usize {
        return bucket as f64;
    }
    EXACT as f64 * GROWTH.powf((bucket - EXACT as usize) as f64 + 0.5)
}

/// Counts of durations per bucket. Dense while it is being filled or merged; stored sparse
/// ([`Histogram::encode`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
}

impl Histogram {
    pub fn record(&mut self, us: u64) {
        self.add(bucket_of(us), 1);
    }

    fn add(&mut self, bucket: usize, n: u64) {
        if self.counts.len() <= bucket {
            self.counts.resize(bucket + 1, 0);
        }
        self.counts[bucket] = self.counts[bucket].saturating_add(n);
    }

    pub(crate) fn merge(&mut self, other: &Histogram) {
        for (b, &n) in other.counts.iter().enumerate().filter(|(_, n)| **n > 0) {
            self.add(b, n);
        }
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The stored form: for each non-empty bucket, its index (u16) and count (u64), little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(10 * self.counts.iter().filter(|n| **n > 0).count());
        for (b, &n) in self.counts.iter().enumerate().filter(|(_, n)| **n > 0) {
            out.extend_from_slice(&(b as u16).to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
        out
    }

    /// Adds a stored histogram into this one (no intermediate histogram is built). Bytes that
    /// are not a whole pair, or a bucket out of range, are ignored: a damaged row skews one
    /// figure instead of failing the query.
    pub(crate) fn add_encoded(&mut self, bytes: &[u8]) {
        for pair in bytes.chunks_exact(10) {
            let bucket = u16::from_le_bytes([pair[0], pair[1]]) as usize;
            let mut n = [0u8; 8];
            n.copy_from_slice(&pair[2..]);
            if bucket < BUCKETS {
                self.add(bucket, u64::from_le_bytes(n));
            }
        }
    }

    /// The nearest-rank `p`-th percentile, in microseconds (0 when empty).
    pub fn percentile(&self, p: u32) -> f64 {
        let n = self.count();
        if n == 0 {
            return 0.0;
        }
        let rank = (u64::from(p) * n).div_ceil(100).clamp(1, n);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return value_of(b);
            }
        }
        value_of(self.counts.len().saturating_sub(1))
    }
}

/// One rollup: the calls of one (gateway, app, function) in the bucket of width `tier_ms` that
/// starts at `start_ms`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rollup {
    pub tier_ms: i64,
    pub start_ms: i64,
    pub org_id: String,
    pub gateway_id: String,
    pub app: String,
    pub function: String,
    pub requests: u64,
    pub errors: u64,
    /// Sum of the durations, in microseconds.
    pub total_us: u64,
    /// Sum of the durations of the calls that failed (so that a breakdown by status has
    /// averages too).
    pub error_us: u64,
    pub histogram: Histogram,
}

/// What a rollup counts of one request-log entry (the store's `LogRecord` is one). A trait, so
/// that the rollups need not know the store that keeps them.
pub trait Counted {
    fn ts_ms(&self) -> i64;
    fn org_id(&self) -> &str;
    fn gateway_id(&self) -> &str;
    fn app(&self) -> &str;
    fn function(&self) -> Cow<'_, str>;
    fn error(&self) -> bool;
    fn duration_us(&self) -> u64;
}

/// The rollups of a slice of entries, in every tier: what the store adds to what it holds.
pub fn of<E: Counted>(entries: &[E]) -> Vec<Rollup> {
    type Key<'a> = (i64, i64, &'a str, &'a str, Cow<'a, str>);
    // ahash, not the standard SipHash: the keys are the store's own, and every entry of the
    // request log is hashed once per tier.
    let mut by_key: HashMap<Key<'_>, Rollup, ahash::RandomState> = HashMap::default();
    for e in entries {
        let function = e.function();
        for tier in TIERS {
            let start = e.ts_ms().div_euclid(tier) * tier;
            let key = (tier, start, e.gateway_id(), e.app(), function.clone());
            let r = by_key.entry(key).or_insert_with_key(|k| Rollup {
                tier_ms: tier,
                start_ms: start,
                org_id: e.org_id().to_string(),
                gateway_id: k.2.to_string(),
                app: k.3.to_string(),
                function: k.4.to_string(),
                ..Default::default()
            });
            let (error, duration_us) = (e.error(), e.duration_us());
            r.requests += 1;
            r.errors += u64::from(error);
            r.total_us = r.total_us.saturating_add(duration_us);
            if error {
                r.error_us = r.error_us.saturating_add(duration_us);
            }
            r.histogram.record(duration_us);
        }
    }
    by_key.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percentile_is_within_two_percent_of_the_recorded_duration() {
        let mut us = 1u64;
        while us < 4_000_000_000 {
            let mut h = Histogram::default();
            h.record(us);
            let got = h.percentile(50);
            let error = (got - us as f64).abs() / us as f64;
            assert!(error <= 0.02, "{us} us reads as {got} ({:.2} %)", error * 100.0);
            us = us * 17 / 16 + 1;
        }
        // Beyond the last bucket: counted, read as the last bucket.
        let mut h = Histogram::default();
        h.record(u64::MAX);
        assert_eq!(h.count(), 1);
        assert!(h.percentile(99) > 4.0e9);
    }

    #[test]
    fn percentiles_are_nearest_rank_and_histograms_merge_by_adding() {
        let (mut low, mut high) = (Histogram::default(), Histogram::default());
        for ms in 1..=50u64 {
            low.record(ms * 1000);
        }
        for ms in 51..=100u64 {
            high.record(ms * 1000);
        }
        let mut all = low.clone();
        all.merge(&high);
        assert_eq!(all.count(), 100);
        let near = |got: f64, want_ms: f64| (got / 1000.0 - want_ms).abs() / want_ms <= 0.02;
        assert!(near(all.percentile(50), 50.0), "{}", all.percentile(50));
        assert!(near(all.percentile(95), 95.0), "{}", all.percentile(95));
        assert!(near(all.percentile(99), 99.0), "{}", all.percentile(99));
        assert!(near(all.percentile(100), 100.0));
        assert_eq!(Histogram::default().percentile(99), 0.0);
        // Stored and read back, into a histogram that already holds counts.
        let mut again = low.clone();
        again.add_encoded(&high.encode());
        assert_eq!(again, all);
        let mut damaged = Histogram::default();
        damaged.add_encoded(&[1, 2, 3]);
        assert_eq!(damaged.count(), 0, "a partial pair is ignored");
    }

    #[test]
    fn a_tier_tiles_the_step_it_serves() {
        assert_eq!(tier_for(MINUTE), MINUTE);
        assert_eq!(tier_for(5 * MINUTE), 5 * MINUTE);
        assert_eq!(tier_for(HOUR), HOUR);
        assert_eq!(tier_for(6 * HOUR), HOUR);
        assert_eq!(tier_for(24 * HOUR), HOUR);
        assert_eq!(tier_for(10 * MINUTE), 5 * MINUTE);
    }
}
