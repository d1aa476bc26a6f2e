//! Rate limiting (spec "Limits"; DESIGN.md Decisions 1-3).
//!
//! Three layers, so that each can be replaced alone:
//! - policy ([`RateLimitPolicy`]): the tier table, bucket shares and multipliers, turned at load
//!   time into the numbers one request is checked against ([`BucketLimits`]);
//! - cost model ([`cost_and_bucket`]): which bucket a request draws from and how many tokens;
//! - storage ([`RateLimiter`]): the bucket state. [`LocalRateLimiter`] keeps it in memory; a
//!   shared (Redis) backend implements the same trait with the same arithmetic.
//!
//! Each bucket is a GCRA token bucket (one timestamp per window, integer nanoseconds, so
//! admission is exact and needs no floating point on the hot path): a per-minute window with
//! capacity = burst, and an hourly quota; a request is admitted only if both allow it.

mod local;
mod named;

pub use local::{Clock, LocalRateLimiter, ManualClock, MonotonicClock};

use crate::{FilterContext, Principal, Rejection, RequestFilter, RequestView, RouteClass};
use arc_swap::ArcSwap;
use http::{HeaderName, HeaderValue, Method};
use serde::Deserialize;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

const MINUTE_NS: u64 = 60_000_000_000;
const HOUR_NS: u64 = 3_600_000_000_000;
const SECOND_NS: u64 = 1_000_000_000;

/// A named bucket (Decision 2). Each credential has one of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Bucket {
    /// Most reads.
    Global = 0,
    /// POST, PATCH, DELETE on gateways: 50% of global.
    Write = 1,
    /// Metrics and log analytics: 200% of global.
    Analytics = 2,
    /// Creating webhooks and listing deliveries: its own size.
    Webhook = 3,
    /// MCP traffic on `/gateway/{id}/mcp`: sized as global.
    Gateway = 4,
}

impl Bucket {
    pub const ALL: [Bucket; 5] = [Bucket::Global, Bucket::Write, Bucket::Analytics, Bucket::Webhook, Bucket::Gateway];

    /// The name used in `X-RateLimit-Bucket` and in the API's `buckets` maps.
    pub const fn as_str(self) -> &'static str {
        match self {
            Bucket::Global => "global",
            Bucket::Write => "write",
            Bucket::Analytics => "analytics",
            Bucket::Webhook => "webhook",
            Bucket::Gateway => "gateway",
        }
    }

    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Cost of an analytics query (Decision 2).
pub const ANALYTICS_COST: u32 = 5;

/// Tokens a request costs by method alone: GET 1, POST 2, PATCH 2, DELETE 3. Methods the spec
/// does not price cost what the nearest one does (PUT as PATCH, HEAD/OPTIONS as GET).
pub fn method_cost(method: &Method) -> u32 {
    match *method {
        Method::POST | Method::PATCH | Method::PUT => 2,
        Method::DELETE => 3,
        _ => 1,
    }
}

/// The extra tokens of a batch of `operations`, charged by the batch handler on top of the 1
/// the filter charged: "1 + 0.5 per operation, rounded up" (Decision 2).
pub fn batch_extra_cost(operations: usize) -> u32 {
    u32::try_from(operations.div_ceil(2)).unwrap_or(u32::MAX)
}

/// Strips the management version prefix (`/v1` or `/api/v1`), so that costs are decided on the
/// resource path alone.
pub fn strip_version_prefix(path: &str) -> &str {
    for prefix in ["/api/v1", "/v1"] {
        if let Some(rest) = path.strip_prefix(prefix) {
            if rest.is_empty() || rest.starts_with('/') {
                return rest;
            }
        }
    }
    path
}

/// Which bucket a request draws from and what it costs. `path` is the management path after
/// the version prefix (see [`strip_version_prefix`]). Public routes cost nothing; a batch's
/// per-operation part is added by its handler ([`batch_extra_cost`]).
pub fn cost_and_bucket(method: &Method, path: &str, route: RouteClass) -> (Bucket, u32) {
    match route {
        RouteClass::Public => (Bucket::Global, 0),
        RouteClass::Identity => (Bucket::Global, 1),
        RouteClass::Gateway => (Bucket::Gateway, 1),
        RouteClass::Management => {
            let mut segments = path.trim_start_matches('/').split('/').filter(|s| !s.is_empty());
            let first = segments.next().unwrap_or("");
            let second = segments.next();
            let third = segments.next();
            let read = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
            match first {
                "metrics" => (Bucket::Analytics, ANALYTICS_COST),
                "logs" if second == Some("analytics") => (Bucket::Analytics, ANALYTICS_COST),
                "gateways" if !read => (Bucket::Write, method_cost(method)),
                "webhooks" if *method == Method::POST && second.is_none() => (Bucket::Webhook, method_cost(method)),
                "webhooks" if read && third == Some("deliveries") => (Bucket::Webhook, method_cost(method)),
                "batch" => (Bucket::Global, 1),
                _ => (Bucket::Global, method_cost(method)),
            }
        }
    }
}

/// Why a rate-limit configuration was refused; names the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RateLimitConfigError {
    #[error("{field}: must be at least 1")]
    Zero { field: String },
    #[error("{field}: must be a positive number, got {value}")]
    BadShare { field: &'static str, value: f64 },
    #[error("default_tier: no tier named `{0}`")]
    UnknownDefaultTier(String),
}

/// One row of the tier table, as YAML states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierLimits {
    /// A number, or `unlimited` (the spec's "custom ... unlimited (fair use)" tier).
    #[serde(deserialize_with = "hourly")]
    pub requests_per_hour: Option<u32>,
    pub requests_per_minute: u32,
    pub burst: u32,
    pub concurrent: u32,
}

/// A bucket's size where it is not derived from a tier (unauthenticated callers, webhooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketSize {
    #[serde(deserialize_with = "hourly")]
    pub requests_per_hour: Option<u32>,
    pub requests_per_minute: u32,
    pub burst: u32,
}

fn hourly<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u32),
        Word(String),
    }
    match Raw::deserialize(d)? {
        Raw::Number(n) => Ok(Some(n)),
        Raw::Word(w) if w == "unlimited" => Ok(None),
        Raw::Word(w) => Err(serde::de::Error::custom(format!("expected a number or `unlimited`, got `{w}`"))),
    }
}

/// The `rate_limits:` section of the configuration. Every field has the spec's default; tiers
/// given in YAML replace or add to the default table by name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitConfig {
    /// The tier of an organisation whose tier is not in the table.
    pub default_tier: String,
    pub tiers: BTreeMap<String, TierLimits>,
    /// Requests without a valid credential, keyed by client address.
    pub unauthenticated: BucketSize,
    /// Requests to the identity service (sign-in pages, OAuth endpoints), keyed by client
    /// address (IPv6 by /64), in a bucket of their own.
    pub identity: BucketSize,
    /// `write` as a share of `global`.
    pub write_share: f64,
    /// `analytics` as a share of `global`.
    pub analytics_share: f64,
    /// `gateway` (MCP traffic) as a share of `global`.
    pub gateway_share: f64,
    /// `webhook` has its own size, the same for every tier (scaled by multipliers).
    pub webhook: BucketSize,
    /// How several instances on one shared store share the buckets: `leased` (each admits from
    /// its own copy and merges it with the shared state every `sync_ms`).
    pub distributed: String,
    /// With `leased`: how often an instance merges its buckets with the shared ones.
    pub sync_ms: u64,
    /// While the shared buckets cannot be reached: `open` (each instance admits alone, the
    /// default) or `closed` (authenticated requests are answered 503 until they can).
    pub outage: String,
}

impl RateLimitConfig {
    /// The spec's tier table (Decision 1).
    pub fn default_tiers() -> BTreeMap<String, TierLimits> {
        let t = |h, m, b, c| TierLimits { requests_per_hour: Some(h), requests_per_minute: m, burst: b, concurrent: c };
        BTreeMap::from([
            ("free".to_string(), t(1000, 20, 10, 5)),
            ("starter".to_string(), t(5000, 100, 50, 10)),
            ("professional".to_string(), t(20000, 500, 200, 25)),
            ("enterprise".to_string(), t(100_000, 2000, 1000, 100)),
        ])
    }
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            default_tier: "free".into(),
            tiers: RateLimitConfig::default_tiers(),
            // 60/hour, burst 10 (Decision 1); the minute rate lets a burst refill in a minute
            // while the hourly quota stays the binding limit.
            unauthenticated: BucketSize { requests_per_hour: Some(60), requests_per_minute: 10, burst: 10 },
            // A sign-in is a handful of requests (form, password, code, consent, token): room
            // for an office behind one address; guessing is bounded further by the identity
            // service's own counts (password checks, registrations, documents fetched).
            identity: BucketSize { requests_per_hour: Some(3000), requests_per_minute: 120, burst: 100 },
            write_share: 0.5,
            analytics_share: 2.0,
            gateway_share: 1.0,
            webhook: BucketSize { requests_per_hour: Some(600), requests_per_minute: 30, burst: 10 },
            distributed: "leased".into(),
            sync_ms: 100,
            outage: "open".into(),
        }
    }
}

/// One GCRA window: `capacity` tokens, one token back every `interval_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub capacity: u64,
    pub interval_ns: u64,
}

impl Window {
    fn new(capacity: f64, per_period: f64, period_ns: u64) -> Window {
        Window {
            capacity: (capacity.round() as u64).max(1),
            interval_ns: ((period_ns as f64 / per_period.max(f64::MIN_POSITIVE)).round() as u64).max(1),
        }
    }
}

/// The numbers one request is checked against: the minute window and the hourly quota
/// (`None` when the tier has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketLimits {
    pub minute: Window,
    pub hour: Option<Window>,
}

/// Unscaled sizes of one bucket of one tier, kept as floats so that shares and multipliers
/// round once.
#[derive(Debug, Clone, Copy)]
struct BaseSize {
    burst: f64,
    per_minute: f64,
    per_hour: Option<f64>,
    /// The limits at multiplier 1, precomputed for the common case.
    unit: BucketLimits,
}

impl BaseSize {
    fn new(burst: f64, per_minute: f64, per_hour: Option<f64>) -> BaseSize {
        let mut s = BaseSize { burst, per_minute, per_hour, unit: BucketLimits::UNSET };
        s.unit = s.compute(1.0);
        s
    }

    fn compute(&self, m: f64) -> BucketLimits {
        BucketLimits {
            minute: Window::new(self.burst * m, self.per_minute * m, MINUTE_NS),
            hour: self.per_hour.map(|h| Window::new(h * m, h * m, HOUR_NS)),
        }
    }

    fn scaled(&self, m: f64) -> BucketLimits {
        if m == 1.0 {
            self.unit
        } else {
            self.compute(m)
        }
    }
}

impl BucketLimits {
    const UNSET: BucketLimits = BucketLimits { minute: Window { capacity: 1, interval_ns: 1 }, hour: None };
}

#[derive(Debug, Clone)]
struct Tier {
    buckets: [BaseSize; 5],
    concurrent: u32,
    /// Ceiling of the effective multiplier (see [`RateLimitPolicy::multiplier`]).
    max_multiplier: f64,
}

/// The validated rate-limit configuration, ready for per-request lookups.
#[derive(Debug, Clone)]
pub struct RateLimitPolicy {
    /// A handful of tiers: a linear scan beats hashing the name.
    tiers: Vec<(Box<str>, Tier)>,
    default_tier: usize,
    anonymous: BaseSize,
    identity: BaseSize,
}

impl Default for RateLimitPolicy {
    fn default() -> Self {
        RateLimitPolicy::try_from(&RateLimitConfig::default()).expect("the defaults are valid")
    }
}

impl TryFrom<&RateLimitConfig> for RateLimitPolicy {
    type Error = RateLimitConfigError;

    fn try_from(c: &RateLimitConfig) -> Result<Self, Self::Error> {
        for (field, value) in
            [("write_share", c.write_share), ("analytics_share", c.analytics_share), ("gateway_share", c.gateway_share)]
        {
            if !(value.is_finite() && value > 0.0) {
                return Err(RateLimitConfigError::BadShare { field, value });
            }
        }
        let nonzero = |field: String, v: Option<u32>| match v {
            Some(0) => Err(RateLimitConfigError::Zero { field }),
            _ => Ok(()),
        };
        let check_size = |name: &str, s: &BucketSize| {
            nonzero(format!("{name}.requests_per_hour"), s.requests_per_hour)?;
            nonzero(format!("{name}.requests_per_minute"), Some(s.requests_per_minute))?;
            nonzero(format!("{name}.burst"), Some(s.burst))
        };
        check_size("unauthenticated", &c.unauthenticated)?;
        check_size("identity", &c.identity)?;
        check_size("webhook", &c.webhook)?;
        let size = |s: &BucketSize| {
            BaseSize::new(s.burst.into(), s.requests_per_minute.into(), s.requests_per_hour.map(f64::from))
        };
        let webhook = size(&c.webhook);

        let mut table = RateLimitConfig::default_tiers();
        table.extend(c.tiers.iter().map(|(k, v)| (k.clone(), *v)));
        let mut tiers: Vec<(Box<str>, Tier)> = Vec::with_capacity(table.len());
        for (name, t) in &table {
            let field = |f: &str| format!("tiers.{name}.{f}");
            nonzero(field("requests_per_hour"), t.requests_per_hour)?;
            nonzero(field("requests_per_minute"), Some(t.requests_per_minute))?;
            nonzero(field("burst"), Some(t.burst))?;
            nonzero(field("concurrent"), Some(t.concurrent))?;
            let share = |k: f64| {
                BaseSize::new(
                    f64::from(t.burst) * k,
                    f64::from(t.requests_per_minute) * k,
                    t.requests_per_hour.map(|h| f64::from(h) * k),
                )
            };
            let buckets = [share(1.0), share(c.write_share), share(c.analytics_share), webhook, share(c.gateway_share)];
            tiers.push((
                name.as_str().into(),
                Tier { buckets, concurrent: t.concurrent, max_multiplier: f64::INFINITY },
            ));
        }
        let default_tier = tiers
            .iter()
            .position(|(n, _)| **n == *c.default_tier)
            .ok_or_else(|| RateLimitConfigError::UnknownDefaultTier(c.default_tier.clone()))?;
        Ok(RateLimitPolicy { tiers, default_tier, anonymous: size(&c.unauthenticated), identity: size(&c.identity) })
    }
}

impl RateLimitPolicy {
    fn tier(&self, name: &str) -> &Tier {
        let i = self.tiers.iter().position(|(n, _)| **n == *name).unwrap_or(self.default_tier);
        &self.tiers[i].1
    }

    /// The limits of `bucket` for `tier` scaled by `multiplier`.
    pub fn limits(&self, tier: &str, bucket: Bucket, multiplier: f64) -> BucketLimits {
        self.tier(tier).buckets[bucket.index()].scaled(multiplier)
    }

    /// The in-flight cap for `tier` scaled by `multiplier` (at least 1).
    pub fn concurrent(&self, tier: &str, multiplier: f64) -> u32 {
        let c = f64::from(self.tier(tier).concurrent) * multiplier;
        (c.round() as u32).max(1)
    }

    /// The limits of a caller without a valid credential.
    pub fn unauthenticated(&self) -> BucketLimits {
        self.anonymous.unit
    }

    /// The limits of an address on the identity service's routes.
    pub fn identity(&self) -> BucketLimits {
        self.identity.unit
    }

    /// Caps the multiplier of `tier`'s callers at `ceiling` (the server's
    /// `limits.quotas.<tier>.max_multiplier`); without one a tier's is unbounded. Unknown tier
    /// names and ceilings below 1 are ignored: the configuration refuses both.
    pub fn set_max_multiplier(&mut self, tier: &str, ceiling: f64) {
        if ceiling >= 1.0 {
            if let Some((_, t)) = self.tiers.iter_mut().find(|(n, _)| **n == *tier) {
                t.max_multiplier = ceiling;
            }
        }
    }

    /// The multiplier a caller's limits are scaled by: its own (service accounts) times that of
    /// the allowlist entry its address matched, capped at its tier's ceiling. Capping the
    /// product, not each factor, is what keeps a tenant from compounding two multipliers it
    /// sets itself into a larger tier.
    pub fn multiplier(&self, principal: &Principal, ip_multiplier: Option<f64>) -> f64 {
        effective_multiplier(principal, ip_multiplier).min(self.tier(&principal.tier).max_multiplier)
    }
}

/// The product of a caller's own multiplier (service accounts) and that of the allowlist entry
/// its address matched, before its tier's ceiling ([`RateLimitPolicy::multiplier`] applies
/// it). A nonsensical stored value counts as 1 rather than shutting the caller out.
pub fn effective_multiplier(principal: &Principal, ip_multiplier: Option<f64>) -> f64 {
    let sane = |m: f64| if m.is_finite() && m > 0.0 { m } else { 1.0 };
    sane(principal.rate_limit_multiplier) * ip_multiplier.map_or(1.0, sane)
}

/// Whose buckets a request draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKey<'a> {
    /// An authenticated caller's key id.
    Credential(&'a str),
    /// A caller without a valid credential, by address (IPv6 by /64, see the backend).
    Address(IpAddr),
}

/// One charge against a bucket.
#[derive(Debug, Clone, Copy)]
pub struct ChargeRequest<'a> {
    pub key: LimitKey<'a>,
    pub bucket: Bucket,
    pub cost: u32,
    pub limits: BucketLimits,
    /// The in-flight cap to take a slot under; `None` takes no slot.
    pub max_in_flight: Option<u32>,
    /// Counts a new request in the usage figures (false for a handler's extra charge).
    pub new_request: bool,
}

/// What the response headers report: the window closest to refusing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub limit: u64,
    pub remaining: u64,
    /// Until the window is full again.
    pub reset_after_ns: u64,
    /// The same instant as a Unix timestamp (seconds, rounded up).
    pub reset_at_unix: u64,
}

impl Snapshot {
    pub fn reset_after_secs(&self) -> u64 {
        self.reset_after_ns.div_ceil(SECOND_NS)
    }
}

/// The backend's answer to a charge.
#[derive(Debug)]
pub enum Outcome {
    Allowed {
        snapshot: Snapshot,
        guard: Option<ConcurrencyGuard>,
    },
    /// Not enough tokens; nothing was taken. `retry_after_ns` is the time until there are.
    Limited {
        snapshot: Snapshot,
        retry_after_ns: u64,
    },
    /// The in-flight cap is reached; nothing was taken.
    TooManyInFlight {
        snapshot: Snapshot,
    },
}

/// One caller's requests in one calendar minute, counted by the limiter until the server takes
/// them ([`RateLimiter::take_usage`]) and adds them to the store, where `GET
/// /metrics/rate-limits` reads them: figures over a period that survive a restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageMinute {
    pub key_id: String,
    /// The minute's start, Unix seconds.
    pub minute_unix: u64,
    pub requests: u64,
    pub rate_limited: u64,
    /// Sum of the `X-RateLimit-Remaining` values reported, for an average.
    pub remaining_sum: u64,
    /// The largest share of a window's limit in use after a request of the minute, in percent
    /// (100 for a refusal), and the bucket it was in: what alerts compare with their
    /// thresholds. Not kept by the store.
    pub peak_percent: u8,
    pub peak_bucket: Option<Bucket>,
}

/// Time one caller's admissions took from one window of one bucket on this instance since the
/// last sync ([`LocalRateLimiter::take_spent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spent {
    pub key: String,
    /// [`Bucket::index`].
    pub bucket: usize,
    /// 0: the minute window, 1: the hour.
    pub window: usize,
    /// How far admissions moved the window's `tat` (cost x refill interval), in nanoseconds.
    pub advance_ns: u64,
    /// The window's whole span (capacity x interval): past it, its state is back to full.
    pub span_ns: u64,
}

/// What [`RateLimiter::charge_window`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowOutcome {
    /// The request fits in the window's limit (and was counted).
    pub allowed: bool,
    /// Requests counted in the window, this one included when allowed.
    pub count: u32,
    /// Unix seconds when the next window opens.
    pub reset_at: u64,
}

/// One request's outcome for its calendar minute's usage: refused, or admitted with what its
/// window reported.
#[derive(Debug, Clone, Copy)]
pub enum Counted<'a> {
    Refused,
    Admitted(&'a Snapshot),
}

/// What a window reports at an instant, all in Unix nanoseconds: its limit, the tokens left and
/// when it is full again. The arithmetic every backend reports with.
pub(crate) fn snapshot_at(now_unix_ns: u64, w: Window, tat_unix_ns: u64) -> Snapshot {
    let backlog = tat_unix_ns.saturating_sub(now_unix_ns);
    let full = w.capacity.saturating_mul(w.interval_ns);
    Snapshot {
        limit: w.capacity,
        remaining: full.saturating_sub(backlog) / w.interval_ns,
        reset_after_ns: backlog,
        reset_at_unix: now_unix_ns.saturating_add(backlog).div_ceil(SECOND_NS),
    }
}

/// An [`ExactBackend`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedDecision {
    /// Both windows had the tokens, and they were taken.
    pub admitted: bool,
    /// The backend's clock (the one every instance shares), Unix nanoseconds.
    pub now_unix_ns: u64,
    /// The windows' `tat` (minute, hour) in Unix nanoseconds: after the charge when admitted,
    /// as they were when not. An hour window the limits do not have reads 0.
    pub tat_unix_ns: [u64; 2],
}

impl SharedDecision {
    /// The outcome this decision means for the response (without the in-flight slot).
    fn outcome(&self, limits: &BucketLimits, cost: u32) -> Outcome {
        let now = self.now_unix_ns;
        let minute = snapshot_at(now, limits.minute, self.tat_unix_ns[0]);
        let hour = limits.hour.map(|h| snapshot_at(now, h, self.tat_unix_ns[1]));
        if self.admitted {
            let snapshot = match hour {
                Some(h) if h.remaining < minute.remaining => h,
                _ => minute,
            };
            return Outcome::Allowed { snapshot, guard: None };
        }
        let cost = u64::from(cost);
        let wait = |tat: u64, w: Window| local::admit(tat, now, w, cost).err().unwrap_or(0);
        let wait_minute = wait(self.tat_unix_ns[0], limits.minute);
        let wait_hour = limits.hour.map_or(0, |h| wait(self.tat_unix_ns[1], h));
        let mut snapshot = match hour {
            Some(h) if wait_hour > wait_minute => h,
            _ => minute,
        };
        snapshot.remaining = 0;
        Outcome::Limited { snapshot, retry_after_ns: wait_minute.max(wait_hour) }
    }
}

/// The future an [`ExactBackend`] answers with; `Err` says why the backend could not decide.
pub type ExactFuture<'a> = Pin<Box<dyn Future<Output = Result<SharedDecision, String>> + Send + 'a>>;

/// A backend that decides every charge in one place shared by all instances, one round trip
/// per request (`rate_limits.distributed: exact`), with the same GCRA arithmetic as
/// [`LocalRateLimiter`] on the backend's clock.
pub trait ExactBackend: Send + Sync {
    /// Atomically takes `cost` from both windows of the caller's `bucket` if both have it;
    /// takes nothing otherwise.
    fn charge<'a>(&'a self, key: LimitKey<'a>, bucket: Bucket, cost: u32, limits: BucketLimits) -> ExactFuture<'a>;
    /// Every bucket's shared state for `key`, taking nothing: what `GET /rate-limit` shows.
    fn read<'a>(&'a self, key: LimitKey<'a>) -> ReadFuture<'a>;
}

/// Each bucket's windows' `tat` (minute, hour) in Unix nanoseconds, by [`Bucket::index`]; 0 is
/// a window never charged (full).
pub type SharedState = [[u64; 2]; Bucket::ALL.len()];

pub type ReadFuture<'a> = Pin<Box<dyn Future<Output = Result<SharedState, String>> + Send + 'a>>;

/// The name of a caller's buckets in a shared backend: the key id, or `ip:` and the address
/// (IPv6 by /64, as the local backend keys it).
pub fn shared_key_name(key: LimitKey<'_>) -> String {
    match key {
        LimitKey::Credential(k) => k.to_string(),
        LimitKey::Address(ip) => format!("ip:{}", local::address_key(ip)),
    }
}

/// The bucket name of an address on the identity service's routes (IPv6 by /64), apart from
/// the key ids' names.
pub fn identity_key(ip: IpAddr) -> String {
    format!("identity:{}", local::address_key(ip))
}

/// A charge left in [`FilterContext::pending_charge`] for an [`ExactBackend`] to decide.
#[derive(Debug, Clone)]
pub struct PendingCharge {
    /// The caller's key id; `None` for a caller without a credential, charged by `address`.
    credential: Option<Box<str>>,
    address: IpAddr,
    bucket: Bucket,
    cost: u32,
    limits: BucketLimits,
    max_in_flight: Option<u32>,
    new_request: bool,
}

impl PendingCharge {
    fn of(charge: &ChargeRequest<'_>, address: IpAddr) -> PendingCharge {
        PendingCharge {
            credential: match charge.key {
                LimitKey::Credential(k) => Some(k.into()),
                LimitKey::Address(_) => None,
            },
            address,
            bucket: charge.bucket,
            cost: charge.cost,
            limits: charge.limits,
            max_in_flight: charge.max_in_flight,
            new_request: charge.new_request,
        }
    }

    fn key(&self) -> LimitKey<'_> {
        match &self.credential {
            Some(k) => LimitKey::Credential(k),
            None => LimitKey::Address(self.address),
        }
    }
}

/// Where bucket state lives. Implementations must apply the GCRA arithmetic of
/// [`LocalRateLimiter`] so that backends agree on admission.
///
/// One backend serves both kinds of limit: the per-caller buckets of the rate-limit filter and
/// the fixed windows of figures shared by all callers (a gateway's or an app's requests per
/// minute), so a shared backend (Redis) shares both across instances.
pub trait RateLimiter: Send + Sync {
    /// Counts one request in the fixed window of `window_secs` seconds that `now_unix_secs`
    /// falls in, for `key`, unless the window already holds `limit`. No allocation when the
    /// key's window exists.
    fn charge_window(&self, key: &str, limit: u32, window_secs: u64, now_unix_secs: u64) -> WindowOutcome;
    /// Takes `req.cost` tokens if both windows have them (and an in-flight slot if asked).
    fn charge(&self, req: &ChargeRequest<'_>) -> Outcome;
    /// Takes an in-flight slot under `max` without charging tokens (an [`ExactBackend`] decides
    /// those); `None` when the cap is reached. The cap is per instance in every mode.
    fn take_slot(&self, key: LimitKey<'_>, max: u32) -> Option<ConcurrencyGuard>;
    /// Takes in the window state an [`ExactBackend`] decided (its `tat`s as Unix nanoseconds;
    /// a window only ever moves later) and counts the request in the usage figures as
    /// [`RateLimiter::charge`] would have, so `GET /rate-limit` and the usage metrics follow.
    fn adopt(
        &self,
        key: LimitKey<'_>,
        bucket: Bucket,
        tat_unix_ns: Option<[u64; 2]>,
        new_request: bool,
        outcome: Counted<'_>,
    );
    /// The bucket's state without charging, for `GET /rate-limit`.
    fn peek(&self, key: LimitKey<'_>, bucket: Bucket, limits: &BucketLimits) -> Snapshot;
    /// The usage counted since the last call, per authenticated caller and minute (callers
    /// without a credential are not reported); the counts restart from zero.
    fn take_usage(&self) -> Vec<UsageMinute>;
    /// Drops the state of idle callers whose buckets are full again (indistinguishable from
    /// fresh state) and whose usage was taken, bounding memory. Returns how many were dropped.
    fn sweep(&self) -> usize;
}

/// Releases an in-flight slot; implemented by a backend's per-caller state.
pub trait InFlightSlot: Send + Sync {
    fn release(&self);
}

/// A caller's in-flight slot, held in [`FilterContext::concurrency`] until the request ends.
pub struct ConcurrencyGuard {
    slot: Arc<dyn InFlightSlot>,
}

impl ConcurrencyGuard {
    /// Wraps a slot already taken; dropping the guard gives it back.
    pub fn new(slot: Arc<dyn InFlightSlot>) -> Self {
        ConcurrencyGuard { slot }
    }
}

impl Drop for ConcurrencyGuard {
    fn drop(&mut self) {
        self.slot.release();
    }
}

impl std::fmt::Debug for ConcurrencyGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConcurrencyGuard")
    }
}

/// What a request was charged, kept in [`FilterContext::rate_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    pub bucket: Bucket,
    pub cost: u32,
}

/// Process-wide counters for the Prometheus exporter.
#[derive(Debug, Default)]
struct Totals {
    requests: AtomicU64,
    limited: AtomicU64,
    tokens: [AtomicU64; 5],
}

/// A snapshot of the process-wide counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimitTotals {
    pub requests: u64,
    pub rate_limited: u64,
    /// Tokens charged per bucket, indexed by [`Bucket::index`].
    pub tokens: [u64; 5],
}

/// One bucket in `GET /rate-limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketStatus {
    pub bucket: Bucket,
    pub limit: u64,
    pub remaining: u64,
    /// Unix seconds when the bucket is full again.
    pub reset: u64,
}

/// The answer of `GET /rate-limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitStatus {
    pub tier: String,
    pub buckets: [BucketStatus; 5],
}

pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
pub const X_RATELIMIT_RESET_AFTER: HeaderName = HeaderName::from_static("x-ratelimit-reset-after");
pub const X_RATELIMIT_BUCKET: HeaderName = HeaderName::from_static("x-ratelimit-bucket");

/// Header values for small numbers, built once: most `Remaining`, `Reset-After` and `Limit`
/// values are small, and cloning a prebuilt value does not allocate. A larger number is looked
/// up in `recent`, the last value this thread built for the same header (a bucket's `Limit`
/// rarely changes, `Reset` changes once a second), and built only when it differs.
fn number_value(n: u64, recent: &mut Option<(u64, HeaderValue)>) -> HeaderValue {
    const CACHED: usize = 1024;
    static SMALL: OnceLock<Box<[HeaderValue]>> = OnceLock::new();
    match usize::try_from(n) {
        Ok(i) if i < CACHED => SMALL.get_or_init(|| (0..CACHED as u64).map(HeaderValue::from).collect())[i].clone(),
        _ => match recent {
            Some((last, value)) if *last == n => value.clone(),
            _ => recent.insert((n, HeaderValue::from(n))).1.clone(),
        },
    }
}

thread_local! {
    /// Per thread, the last large `Limit`, `Remaining`, `Reset` and `Reset-After` values built
    /// (see [`number_value`]).
    static RECENT_NUMBERS: RefCell<[Option<(u64, HeaderValue)>; 4]> = const { RefCell::new([None, None, None, None]) };
}

/// Writes the five `X-RateLimit-*` headers into `headers`, replacing earlier ones (a handler's
/// extra charge reports the bucket's new state).
pub fn set_rate_limit_headers(headers: &mut Vec<(HeaderName, HeaderValue)>, bucket: Bucket, snapshot: &Snapshot) {
    let values = RECENT_NUMBERS.with_borrow_mut(|[limit, remaining, reset, reset_after]| {
        [
            (X_RATELIMIT_LIMIT, number_value(snapshot.limit, limit)),
            (X_RATELIMIT_REMAINING, number_value(snapshot.remaining, remaining)),
            (X_RATELIMIT_RESET, number_value(snapshot.reset_at_unix, reset)),
            (X_RATELIMIT_RESET_AFTER, number_value(snapshot.reset_after_secs(), reset_after)),
            (X_RATELIMIT_BUCKET, HeaderValue::from_static(bucket.as_str())),
        ]
    });
    match headers.iter().position(|(n, _)| *n == X_RATELIMIT_LIMIT) {
        Some(at) if headers.len() >= at + values.len() => {
            for (slot, v) in headers[at..at + values.len()].iter_mut().zip(values) {
                *slot = v;
            }
        }
        _ => {
            headers.reserve_exact(values.len());
            headers.extend(values);
        }
    }
}

/// Whether a request counts toward `concurrent`, the cap on requests in flight. A GET on a
/// gateway's endpoint is the MCP listening stream: it stays open for as long as the client
/// listens, so a slot held by it would let a few listening clients refuse every call of their
/// key. Its cost is still charged to the `gateway` bucket.
fn takes_slot(req: &RequestView<'_>) -> bool {
    !(req.route == RouteClass::Gateway && *req.method == http::Method::GET)
}

/// The rate-limit filter. Cheap to clone (shared state), so the server can keep a handle for
/// [`RateLimit::charge_extra`], [`RateLimit::status`] and [`RateLimit::sweep`] while the chain
/// owns another.
pub struct RateLimit<L: RateLimiter + ?Sized = LocalRateLimiter> {
    /// Replaced whole by [`RateLimit::set_policy`] (a configuration reload); each request reads
    /// the one in place when it starts.
    policy: Arc<ArcSwap<RateLimitPolicy>>,
    limiter: Arc<L>,
    totals: Arc<Totals>,
    /// With `rate_limits.distributed: exact`, the backend that decides the tokens; `limiter`
    /// then keeps the in-flight slots, the usage figures and the last state seen.
    exact: Option<Arc<dyn ExactBackend>>,
}

impl<L: RateLimiter + ?Sized> Clone for RateLimit<L> {
    fn clone(&self) -> Self {
        RateLimit {
            policy: self.policy.clone(),
            limiter: self.limiter.clone(),
            totals: self.totals.clone(),
            exact: self.exact.clone(),
        }
    }
}

impl<L: RateLimiter + ?Sized> RateLimit<L> {
    /// The backend, shared with whoever else counts against it (the gateway and app quotas).
    pub fn backend(&self) -> &Arc<L> {
        &self.limiter
    }

    pub fn new(policy: Arc<RateLimitPolicy>, limiter: Arc<L>) -> Self {
        RateLimit { policy: Arc::new(ArcSwap::new(policy)), limiter, totals: Arc::default(), exact: None }
    }

    /// Tokens decided by `backend`, one round trip per request: the filter leaves the charge in
    /// [`FilterContext::pending_charge`] and [`RateLimit::settle`] makes it.
    pub fn with_exact(mut self, backend: Option<Arc<dyn ExactBackend>>) -> Self {
        self.exact = backend;
        self
    }

    pub fn policy(&self) -> arc_swap::Guard<Arc<RateLimitPolicy>> {
        self.policy.load()
    }

    /// Puts a new policy in place (tiers, shares, multipliers' ceilings): requests that start
    /// from now on are checked against it; bucket state carries over.
    pub fn set_policy(&self, policy: Arc<RateLimitPolicy>) {
        self.policy.store(policy);
    }

    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    /// Charges `cost` to `bucket` for the request's caller and records the outcome in `ctx`
    /// (the charge itself only for a new request, so an extra charge keeps the original).
    /// A caller without a principal is charged by address to `global`, cost 1, whatever it
    /// asked for: its request is refused with a 401 anyway, and costs measure work done.
    fn apply(
        &self,
        req: &RequestView<'_>,
        ctx: &mut FilterContext,
        bucket: Bucket,
        cost: u32,
        take_slot: bool,
        new_request: bool,
    ) -> Result<(), Rejection> {
        let decide = |charge: &ChargeRequest<'_>| match self.exact {
            Some(_) => Err(PendingCharge::of(charge, req.client_ip)),
            None => Ok(self.limiter.charge(charge)),
        };
        let policy = self.policy.load();
        if req.route == RouteClass::Identity {
            // A bucket of the address's own, apart from its management one; not a caller's usage
            // (`new_request: false` keeps it out of the per-key figures).
            let name = identity_key(req.client_ip);
            let charge = ChargeRequest {
                key: LimitKey::Credential(&name),
                bucket: Bucket::Global,
                cost: 1,
                limits: policy.identity(),
                max_in_flight: None,
                new_request: false,
            };
            return match decide(&charge) {
                Ok(outcome) => self.record(ctx, Bucket::Global, 1, false, outcome),
                Err(pending) => {
                    ctx.pending_charge = Some(pending);
                    Ok(())
                }
            };
        }
        let (bucket, cost, decided) = match ctx.principal.as_deref() {
            Some(p) => {
                let m = policy.multiplier(p, ctx.ip_rate_limit_multiplier);
                let charge = ChargeRequest {
                    key: LimitKey::Credential(&p.key_id),
                    bucket,
                    cost,
                    limits: policy.limits(&p.tier, bucket, m),
                    max_in_flight: take_slot.then(|| policy.concurrent(&p.tier, m)),
                    new_request,
                };
                (bucket, cost, decide(&charge))
            }
            None => {
                let charge = ChargeRequest {
                    key: LimitKey::Address(req.client_ip),
                    bucket: Bucket::Global,
                    cost: 1,
                    limits: policy.unauthenticated(),
                    max_in_flight: None,
                    new_request,
                };
                (Bucket::Global, 1, decide(&charge))
            }
        };
        match decided {
            Ok(outcome) => self.record(ctx, bucket, cost, new_request, outcome),
            Err(pending) => {
                // Decided by the shared backend once the chain has run (`settle`).
                if new_request {
                    ctx.rate_limit = Some(Charge { bucket, cost });
                }
                ctx.pending_charge = Some(pending);
                Ok(())
            }
        }
    }

    /// Writes a charge's outcome into `ctx` (headers, in-flight slot) and the counters; the
    /// refusal to answer with, if it was refused.
    fn record(
        &self,
        ctx: &mut FilterContext,
        bucket: Bucket,
        cost: u32,
        new_request: bool,
        outcome: Outcome,
    ) -> Result<(), Rejection> {
        if new_request {
            ctx.rate_limit = Some(Charge { bucket, cost });
            self.totals.requests.fetch_add(1, Ordering::Relaxed);
        }
        let result = match outcome {
            Outcome::Allowed { snapshot, guard } => {
                set_rate_limit_headers(&mut ctx.response_headers, bucket, &snapshot);
                if guard.is_some() {
                    ctx.concurrency = guard;
                }
                self.totals.tokens[bucket.index()].fetch_add(u64::from(cost), Ordering::Relaxed);
                Ok(())
            }
            Outcome::Limited { snapshot, retry_after_ns } => {
                set_rate_limit_headers(&mut ctx.response_headers, bucket, &snapshot);
                let secs = retry_after_ns.div_ceil(SECOND_NS).max(1);
                Err(Rejection::rate_limited(secs))
            }
            Outcome::TooManyInFlight { snapshot } => {
                set_rate_limit_headers(&mut ctx.response_headers, bucket, &snapshot);
                let mut r = Rejection::rate_limited(1);
                r.message = "Too many concurrent requests".into();
                Err(r)
            }
        };
        if result.is_err() {
            self.totals.limited.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Makes the charge the chain left for the [`ExactBackend`] (`None` when it left none):
    /// the in-flight slot here, the tokens in one round trip, the outcome recorded as the
    /// filter would have. When the backend cannot answer, this instance decides alone from the
    /// last shared state it saw (`rate_limits.outage` says whether such requests are served).
    pub async fn settle(&self, ctx: &mut FilterContext) -> Option<Result<(), Rejection>> {
        let pending = ctx.pending_charge.take()?;
        let exact = self.exact.as_ref()?;
        let key = pending.key();
        let (bucket, cost, new_request) = (pending.bucket, pending.cost, pending.new_request);
        let mut guard = None;
        if let Some(max) = pending.max_in_flight {
            match self.limiter.take_slot(key, max) {
                Some(g) => guard = Some(g),
                None => {
                    let mut snapshot = self.limiter.peek(key, bucket, &pending.limits);
                    snapshot.remaining = 0;
                    self.limiter.adopt(key, bucket, None, new_request, Counted::Refused);
                    return Some(self.record(ctx, bucket, cost, new_request, Outcome::TooManyInFlight { snapshot }));
                }
            }
        }
        let outcome = match exact.charge(key, bucket, cost, pending.limits).await {
            Ok(decision) => {
                let outcome = decision.outcome(&pending.limits, cost);
                let counted = match &outcome {
                    Outcome::Allowed { snapshot, .. } => Counted::Admitted(snapshot),
                    _ => Counted::Refused,
                };
                self.limiter.adopt(key, bucket, Some(decision.tat_unix_ns), new_request, counted);
                outcome
            }
            Err(_) => self.limiter.charge(&ChargeRequest {
                key,
                bucket,
                cost,
                limits: pending.limits,
                max_in_flight: None,
                new_request,
            }),
        };
        let outcome = match outcome {
            Outcome::Allowed { snapshot, guard: None } => Outcome::Allowed { snapshot, guard },
            other => other,
        };
        Some(self.record(ctx, bucket, cost, new_request, outcome))
    }

    /// Charges `extra` more tokens to the bucket this request was charged to, e.g. a batch's
    /// [`batch_extra_cost`] once the handler knows the number of operations. Refused (429)
    /// when the bucket does not have them; the headers in `ctx` are updated either way.
    pub fn charge_extra(&self, req: &RequestView<'_>, ctx: &mut FilterContext, extra: u32) -> Result<(), Rejection> {
        let Some(Charge { bucket, cost }) = ctx.rate_limit else {
            return Ok(());
        };
        if extra == 0 {
            return Ok(());
        }
        self.apply(req, ctx, bucket, extra, false, false)?;
        ctx.rate_limit = Some(Charge { bucket, cost: cost.saturating_add(extra) });
        Ok(())
    }

    /// Charges one operation of a batch as if it were sent alone: to the bucket its method and
    /// path (`req.path`, with or without the version prefix) draw from, at their cost, as a
    /// request of its own (counted like one). Refused (429) when the bucket does not have the
    /// tokens; `exact` takes them in the shared backend. The batch's own cost is the filter's
    /// charge plus [`batch_extra_cost`], separately.
    pub async fn charge_operation(
        &self,
        req: &RequestView<'_>,
        principal: Arc<Principal>,
        ip_multiplier: Option<f64>,
    ) -> Result<(), Rejection> {
        let mut ctx =
            FilterContext { principal: Some(principal), ip_rate_limit_multiplier: ip_multiplier, ..Default::default() };
        let (bucket, cost) = cost_and_bucket(req.method, strip_version_prefix(req.path), RouteClass::Management);
        self.apply(req, &mut ctx, bucket, cost, false, true)?;
        match self.settle(&mut ctx).await {
            Some(Err(limited)) => Err(limited),
            _ => Ok(()),
        }
    }

    /// [`RateLimit::status`], after taking in the shared state when an [`ExactBackend`]
    /// decides: a bucket charged on another instance shows what was spent there. Without the
    /// backend (or while it fails), this instance's view.
    pub async fn current_status(&self, principal: &Principal, ip_multiplier: Option<f64>) -> RateLimitStatus {
        if let Some(exact) = &self.exact {
            let key = LimitKey::Credential(&principal.key_id);
            if let Ok(shared) = exact.read(key).await {
                for bucket in Bucket::ALL {
                    self.limiter.adopt(key, bucket, Some(shared[bucket.index()]), false, Counted::Refused);
                }
            }
        }
        self.status(principal, ip_multiplier)
    }

    /// The caller's buckets as this instance sees them, for `GET /rate-limit`.
    pub fn status(&self, principal: &Principal, ip_multiplier: Option<f64>) -> RateLimitStatus {
        let policy = self.policy.load();
        let m = policy.multiplier(principal, ip_multiplier);
        let key = LimitKey::Credential(&principal.key_id);
        let buckets = Bucket::ALL.map(|bucket| {
            let limits = policy.limits(&principal.tier, bucket, m);
            let s = self.limiter.peek(key, bucket, &limits);
            BucketStatus { bucket, limit: s.limit, remaining: s.remaining, reset: s.reset_at_unix }
        });
        RateLimitStatus { tier: principal.tier.clone(), buckets }
    }

    /// Process-wide counters, for the Prometheus exporter.
    pub fn totals(&self) -> RateLimitTotals {
        RateLimitTotals {
            requests: self.totals.requests.load(Ordering::Relaxed),
            rate_limited: self.totals.limited.load(Ordering::Relaxed),
            tokens: std::array::from_fn(|i| self.totals.tokens[i].load(Ordering::Relaxed)),
        }
    }

    /// Evicts idle callers' state; the server calls this periodically (every minute is plenty).
    pub fn sweep(&self) -> usize {
        self.limiter.sweep()
    }
}

impl<L: RateLimiter + ?Sized> RequestFilter for RateLimit<L> {
    fn name(&self) -> &'static str {
        "rate_limit"
    }

    /// Charges the request's bucket and takes an in-flight slot; 429 `RATE_LIMITED` when
    /// either is exhausted. Public routes (health) are never limited and get no headers.
    fn filter(&self, req: &RequestView<'_>, ctx: &mut FilterContext) -> Result<(), Rejection> {
        if req.route == RouteClass::Public {
            return Ok(());
        }
        let path = match req.route {
            RouteClass::Management => strip_version_prefix(req.path),
            _ => req.path,
        };
        let (bucket, cost) = cost_and_bucket(req.method, path, req.route);
        self.apply(req, ctx, bucket, cost, takes_slot(req), true)
    }

    /// Refused requests count too ("all requests count") and carry the headers; a caller over
    /// its limit gets the 429 instead of the earlier refusal.
    fn on_rejected(&self, req: &RequestView<'_>, ctx: &mut FilterContext, rejection: Rejection) -> Rejection {
        if req.route == RouteClass::Public {
            return rejection;
        }
        let path = match req.route {
            RouteClass::Management => strip_version_prefix(req.path),
            _ => req.path,
        };
        let (bucket, cost) = cost_and_bucket(req.method, path, req.route);
        match self.apply(req, ctx, bucket, cost, false, true) {
            Ok(()) => rejection,
            Err(limited) => limited,
        }
    }
}

#[cfg(test)]
mod tests;
