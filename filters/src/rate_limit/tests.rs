use super::*;
use crate::testing::{principal, FakeResolver};
use crate::{auth::Authenticate, FilterChain};
use std::time::Duration;

const T0: u64 = 1_700_000_000;

fn limiter() -> (RateLimit<LocalRateLimiter<ManualClock>>, ManualClock) {
    limiter_with(RateLimitConfig::default())
}

fn limiter_with(c: RateLimitConfig) -> (RateLimit<LocalRateLimiter<ManualClock>>, ManualClock) {
    let clock = ManualClock::new(T0);
    let policy = Arc::new(RateLimitPolicy::try_from(&c).unwrap());
    (RateLimit::new(policy, Arc::new(LocalRateLimiter::with_clock(clock.clone()))), clock)
}

struct Req {
    method: Method,
    path: &'static str,
    route: RouteClass,
    ip: IpAddr,
    headers: http::HeaderMap,
}

impl Req {
    fn new(method: Method, path: &'static str) -> Req {
        Req {
            method,
            path,
            route: RouteClass::Management,
            ip: "192.0.2.1".parse().unwrap(),
            headers: http::HeaderMap::new(),
        }
    }
    fn view(&self) -> RequestView<'_> {
        RequestView {
            method: &self.method,
            path: self.path,
            query: None,
            headers: &self.headers,
            client_ip: self.ip,
            route: self.route,
            gateway_id: None,
            client_certificate: None,
        }
    }
}

fn ctx_for(p: &Arc<Principal>) -> FilterContext {
    FilterContext { principal: Some(p.clone()), ..Default::default() }
}

fn header(ctx: &FilterContext, name: &str) -> String {
    let found = ctx.response_headers.iter().find(|(n, _)| n.as_str() == name);
    found.unwrap_or_else(|| panic!("{name} missing")).1.to_str().unwrap().to_string()
}

#[test]
fn burst_admits_exactly_capacity_then_refills() {
    let (rl, clock) = limiter();
    let p = Arc::new(principal("k1", "o1"));
    let get = Req::new(Method::GET, "/v1/gateways");
    // Free tier, global: burst 10, 20/minute (one token every 3 s).
    let mut admitted = 0;
    for i in 0..15 {
        let mut ctx = ctx_for(&p);
        match rl.filter(&get.view(), &mut ctx) {
            Ok(()) => {
                admitted += 1;
                assert_eq!(header(&ctx, "x-ratelimit-remaining"), (9 - i).to_string());
            }
            Err(r) => {
                assert_eq!((r.status, r.code, r.retry_after), (429, "RATE_LIMITED", Some(3)));
                assert_eq!(header(&ctx, "x-ratelimit-remaining"), "0");
                assert_eq!(header(&ctx, "x-ratelimit-limit"), "10");
                assert_eq!(header(&ctx, "x-ratelimit-bucket"), "global");
                assert_eq!(header(&ctx, "x-ratelimit-reset-after"), "30");
                assert_eq!(header(&ctx, "x-ratelimit-reset"), (T0 + 30).to_string());
            }
        }
    }
    assert_eq!(admitted, 10);

    clock.advance(Duration::from_millis(2_900));
    let r = rl.filter(&get.view(), &mut ctx_for(&p)).unwrap_err();
    assert_eq!(r.retry_after, Some(1), "100 ms left rounds up to 1 s");

    clock.advance(Duration::from_millis(100));
    let mut ctx = ctx_for(&p);
    rl.filter(&get.view(), &mut ctx).expect("one token refilled after 3 s");
    assert_eq!(header(&ctx, "x-ratelimit-remaining"), "0");
    assert!(rl.filter(&get.view(), &mut ctx_for(&p)).is_err(), "and only one");

    clock.advance(Duration::from_secs(30));
    for _ in 0..10 {
        rl.filter(&get.view(), &mut ctx_for(&p)).expect("full again after 30 s");
    }
    let t = rl.totals();
    assert_eq!(t.requests, 28);
    assert_eq!(t.rate_limited, 7);
    assert_eq!(t.tokens[Bucket::Global.index()], 21);
}

#[test]
fn hourly_quota_binds_too_and_is_reported() {
    let mut c = RateLimitConfig::default();
    let tiny = TierLimits { requests_per_hour: Some(5), requests_per_minute: 600, burst: 100, concurrent: 5 };
    c.tiers.insert("tiny".into(), tiny);
    let (rl, clock) = limiter_with(c);
    let mut p = principal("k1", "o1");
    p.tier = "tiny".into();
    let p = Arc::new(p);
    let get = Req::new(Method::GET, "/v1/apps");
    for i in 0..5 {
        let mut ctx = ctx_for(&p);
        rl.filter(&get.view(), &mut ctx).unwrap();
        assert_eq!(header(&ctx, "x-ratelimit-limit"), "5", "the hour is closer to refusing");
        assert_eq!(header(&ctx, "x-ratelimit-remaining"), (4 - i).to_string());
    }
    let mut ctx = ctx_for(&p);
    let r = rl.filter(&get.view(), &mut ctx).unwrap_err();
    assert_eq!(r.retry_after, Some(720), "one token per 3600/5 s");
    assert_eq!(header(&ctx, "x-ratelimit-reset-after"), "3600");
    clock.advance(Duration::from_secs(720));
    rl.filter(&get.view(), &mut ctx_for(&p)).unwrap();
}

#[test]
fn unlimited_hour_and_unknown_tier() {
    let mut c = RateLimitConfig::default();
    let custom = TierLimits { requests_per_hour: None, requests_per_minute: 60, burst: 3, concurrent: 1 };
    c.tiers.insert("custom".into(), custom);
    let policy = RateLimitPolicy::try_from(&c).unwrap();
    let l = policy.limits("custom", Bucket::Global, 1.0);
    assert_eq!(l.hour, None);
    assert_eq!(l.minute, Window { capacity: 3, interval_ns: SECOND_NS });
    // An unknown tier falls back to the default (free).
    assert_eq!(policy.limits("gold", Bucket::Global, 1.0), policy.limits("free", Bucket::Global, 1.0));
}

#[test]
fn bucket_sizes_and_multipliers() {
    let policy = RateLimitPolicy::default();
    let cap = |tier, b, m| policy.limits(tier, b, m).minute.capacity;
    assert_eq!(cap("free", Bucket::Global, 1.0), 10);
    assert_eq!(cap("free", Bucket::Write, 1.0), 5);
    assert_eq!(cap("free", Bucket::Analytics, 1.0), 20);
    assert_eq!(cap("free", Bucket::Gateway, 1.0), 10);
    assert_eq!(cap("enterprise", Bucket::Global, 1.0), 1000);
    assert_eq!(cap("free", Bucket::Global, 5.0), 50);
    let hour = policy.limits("professional", Bucket::Write, 1.0).hour.unwrap();
    assert_eq!(hour, Window { capacity: 10_000, interval_ns: 360_000_000 });
    assert_eq!(policy.concurrent("starter", 1.0), 10);
    assert_eq!(policy.concurrent("free", 5.0), 25);
    assert_eq!(policy.unauthenticated().hour.unwrap().capacity, 60);
    assert_eq!(policy.unauthenticated().minute.capacity, 10);

    let mut p = principal("k", "o");
    p.rate_limit_multiplier = 2.0;
    assert_eq!(effective_multiplier(&p, Some(1.5)), 3.0);
    p.rate_limit_multiplier = f64::NAN;
    assert_eq!(effective_multiplier(&p, None), 1.0);
}

#[test]
fn multiplier_scales_admission() {
    let (rl, _clock) = limiter();
    let mut p = principal("svc", "o1");
    p.rate_limit_multiplier = 2.0;
    let p = Arc::new(p);
    let get = Req::new(Method::GET, "/v1/apps");
    let admitted = (0..30)
        .filter(|_| {
            let mut ctx = ctx_for(&p);
            ctx.ip_rate_limit_multiplier = Some(1.5);
            rl.filter(&get.view(), &mut ctx).is_ok()
        })
        .count();
    assert_eq!(admitted, 30, "10 x 2 x 1.5");
    let mut ctx = ctx_for(&p);
    ctx.ip_rate_limit_multiplier = Some(1.5);
    let r = rl.filter(&get.view(), &mut ctx).unwrap_err();
    assert_eq!(r.retry_after, Some(1), "refill 20/min x 3 = one token a second");
}

#[test]
fn costs_and_buckets() {
    use RouteClass::*;
    let c = |m: Method, path: &str, route| cost_and_bucket(&m, strip_version_prefix(path), route);
    assert_eq!(c(Method::GET, "/v1/gateways", Management), (Bucket::Global, 1));
    assert_eq!(c(Method::GET, "/api/v1/gateways/g1", Management), (Bucket::Global, 1));
    assert_eq!(c(Method::POST, "/v1/gateways", Management), (Bucket::Write, 2));
    assert_eq!(c(Method::PATCH, "/v1/gateways/g1", Management), (Bucket::Write, 2));
    assert_eq!(c(Method::DELETE, "/v1/gateways/g1", Management), (Bucket::Write, 3));
    assert_eq!(c(Method::POST, "/v1/apps/a/connect", Management), (Bucket::Global, 2));
    assert_eq!(c(Method::DELETE, "/v1/api-keys/k", Management), (Bucket::Global, 3));
    assert_eq!(c(Method::GET, "/v1/logs", Management), (Bucket::Global, 1));
    assert_eq!(c(Method::GET, "/v1/logs/analytics", Management), (Bucket::Analytics, 5));
    assert_eq!(c(Method::GET, "/v1/metrics/gateway/g1", Management), (Bucket::Analytics, 5));
    assert_eq!(c(Method::GET, "/v1/metrics/rate-limits", Management), (Bucket::Analytics, 5));
    assert_eq!(c(Method::POST, "/v1/webhooks", Management), (Bucket::Webhook, 2));
    assert_eq!(c(Method::GET, "/v1/webhooks/w/deliveries", Management), (Bucket::Webhook, 1));
    assert_eq!(c(Method::GET, "/v1/webhooks", Management), (Bucket::Global, 1));
    assert_eq!(c(Method::DELETE, "/v1/webhooks/w", Management), (Bucket::Global, 3));
    assert_eq!(c(Method::POST, "/v1/batch", Management), (Bucket::Global, 1));
    assert_eq!(c(Method::POST, "/gateway/g1/mcp", Gateway), (Bucket::Gateway, 1));
    assert_eq!(c(Method::GET, "/healthz", Public), (Bucket::Global, 0));
    assert_eq!(strip_version_prefix("/v1"), "");
    assert_eq!(strip_version_prefix("/v10/x"), "/v10/x");
    assert_eq!(batch_extra_cost(0), 0);
    assert_eq!(batch_extra_cost(3), 2);
    assert_eq!(batch_extra_cost(4), 2);
}

#[test]
fn write_bucket_and_oversized_cost() {
    let (rl, clock) = limiter();
    let p = Arc::new(principal("k1", "o1"));
    let del = Req::new(Method::DELETE, "/v1/gateways/g1");
    let mut ctx = ctx_for(&p);
    rl.filter(&del.view(), &mut ctx).unwrap();
    assert_eq!(header(&ctx, "x-ratelimit-bucket"), "write");
    assert_eq!(header(&ctx, "x-ratelimit-remaining"), "2");
    // Write refills 10/min (6 s a token); 3 tokens needed, 2 left.
    let r = rl.filter(&del.view(), &mut ctx_for(&p)).unwrap_err();
    assert_eq!(r.retry_after, Some(6));
    // The global bucket is untouched.
    rl.filter(&Req::new(Method::GET, "/v1/gateways").view(), &mut ctx_for(&p)).unwrap();

    // A batch larger than the bucket goes through once the bucket is full, leaving debt.
    clock.advance(Duration::from_secs(60));
    let batch = Req::new(Method::POST, "/v1/batch");
    let mut ctx = ctx_for(&p);
    rl.filter(&batch.view(), &mut ctx).unwrap();
    assert_eq!(ctx.rate_limit, Some(Charge { bucket: Bucket::Global, cost: 1 }));
    let r = rl.charge_extra(&batch.view(), &mut ctx, batch_extra_cost(40)).unwrap_err();
    assert_eq!(r.retry_after, Some(3), "20 is more than the bucket: it waits for a full one");
    clock.advance(Duration::from_secs(3));
    rl.charge_extra(&batch.view(), &mut ctx, batch_extra_cost(40)).unwrap();
    assert_eq!(ctx.rate_limit, Some(Charge { bucket: Bucket::Global, cost: 21 }));
    assert_eq!(ctx.response_headers.len(), 5, "the headers were replaced, not added");
    assert_eq!(header(&ctx, "x-ratelimit-remaining"), "0");
    let r = rl.filter(&Req::new(Method::GET, "/v1/apps").view(), &mut ctx_for(&p)).unwrap_err();
    assert_eq!(r.retry_after, Some(33), "20 tokens of debt: 60 s backlog, 27 s allowed");
}

#[test]
fn concurrency_cap_holds_until_the_guard_drops() {
    let (rl, _clock) = limiter();
    let p = Arc::new(principal("k1", "o1"));
    let get = Req::new(Method::GET, "/v1/apps");
    let mut held: Vec<FilterContext> = (0..5)
        .map(|_| {
            let mut ctx = ctx_for(&p);
            rl.filter(&get.view(), &mut ctx).unwrap();
            assert!(ctx.concurrency.is_some());
            ctx
        })
        .collect();
    let mut ctx = ctx_for(&p);
    let r = rl.filter(&get.view(), &mut ctx).unwrap_err();
    assert_eq!((r.status, r.retry_after), (429, Some(1)));
    assert_eq!(header(&ctx, "x-ratelimit-remaining"), "0");
    held.pop();
    let mut ctx = ctx_for(&p);
    rl.filter(&get.view(), &mut ctx).unwrap();
    let status = rl.status(&p, None);
    assert_eq!(status.buckets[0].remaining, 4, "the refused request took no token");
}

#[test]
fn a_gateway_listening_stream_holds_no_in_flight_slot() {
    let (rl, _clock) = limiter();
    let p = Arc::new(principal("k1", "o1"));
    let mut stream = Req::new(Method::GET, "/gateway/g1/mcp");
    stream.route = RouteClass::Gateway;
    // More listening streams than the free tier's 5 slots, all open at once...
    let open: Vec<FilterContext> = (0..6)
        .map(|_| {
            let mut ctx = ctx_for(&p);
            rl.filter(&stream.view(), &mut ctx).unwrap();
            assert!(ctx.concurrency.is_none(), "a GET stream took a slot");
            assert_eq!(ctx.rate_limit, Some(Charge { bucket: Bucket::Gateway, cost: 1 }), "still charged");
            ctx
        })
        .collect();
    // ...and a call of the same key still gets one.
    let mut call = Req::new(Method::POST, "/gateway/g1/mcp");
    call.route = RouteClass::Gateway;
    let mut ctx = ctx_for(&p);
    rl.filter(&call.view(), &mut ctx).unwrap();
    assert!(ctx.concurrency.is_some(), "a call is a request in flight");
    drop(open);
}

#[test]
fn public_routes_are_not_limited() {
    let (rl, _clock) = limiter();
    let mut health = Req::new(Method::GET, "/healthz");
    health.route = RouteClass::Public;
    for _ in 0..100 {
        let mut ctx = FilterContext::default();
        rl.filter(&health.view(), &mut ctx).unwrap();
        assert!(ctx.response_headers.is_empty());
    }
    assert_eq!(rl.totals().requests, 0);
}

#[test]
fn identity_routes_have_a_bucket_per_address_apart_from_the_management_one() {
    let c = RateLimitConfig {
        identity: BucketSize { requests_per_hour: Some(100), requests_per_minute: 1, burst: 3 },
        ..Default::default()
    };
    let (rl, _clock) = limiter_with(c);
    let mut signin = Req::new(Method::POST, "/auth/signin");
    signin.route = RouteClass::Identity;
    for _ in 0..3 {
        rl.filter(&signin.view(), &mut FilterContext::default()).unwrap();
    }
    let refused = rl.filter(&signin.view(), &mut FilterContext::default()).unwrap_err();
    assert_eq!((refused.status, refused.retry_after), (429, Some(60)));
    // The address's management bucket is untouched, another address has its own, and no
    // caller's usage is reported.
    rl.filter(&Req::new(Method::GET, "/v1/apps").view(), &mut FilterContext::default()).unwrap();
    signin.ip = "192.0.2.2".parse().unwrap();
    rl.filter(&signin.view(), &mut FilterContext::default()).unwrap();
    assert_eq!(rl.limiter().take_usage(), vec![]);
}

#[test]
fn refused_requests_count_and_carry_headers() {
    let (rl, _clock) = limiter();
    let resolver = Arc::new(FakeResolver::default());
    let chain = FilterChain::new().with(Authenticate::new(resolver)).with(rl.clone());
    let mut req = Req::new(Method::POST, "/gateway/g1/mcp");
    req.route = RouteClass::Gateway;
    req.ip = "2001:db8::1".parse().unwrap();
    for i in 0..10 {
        // Addresses in one /64 share the unauthenticated bucket.
        req.ip = format!("2001:db8::{i}").parse().unwrap();
        let mut ctx = FilterContext::default();
        let r = chain.run(&req.view(), &mut ctx).unwrap_err();
        assert_eq!(r.status, 401);
        assert_eq!(header(&ctx, "x-ratelimit-bucket"), "global");
        assert_eq!(header(&ctx, "x-ratelimit-limit"), "10");
    }
    let mut ctx = FilterContext::default();
    let r = chain.run(&req.view(), &mut ctx).unwrap_err();
    assert_eq!((r.status, r.retry_after), (429, Some(6)), "guessing keys is throttled");
    req.ip = "2001:db8:0:1::1".parse().unwrap();
    let r = chain.run(&req.view(), &mut FilterContext::default()).unwrap_err();
    assert_eq!(r.status, 401, "another /64 has its own bucket");
}

#[test]
fn sweep_evicts_only_refilled_idle_callers() {
    let (rl, clock) = limiter();
    let p = Arc::new(principal("k1", "o1"));
    let q = Arc::new(principal("k2", "o1"));
    let get = Req::new(Method::GET, "/v1/apps");
    rl.filter(&get.view(), &mut ctx_for(&p)).unwrap();
    let mut held = ctx_for(&q);
    rl.filter(&get.view(), &mut held).unwrap();
    assert_eq!(rl.limiter().len(), 2);
    assert_eq!(rl.sweep(), 0, "buckets not yet full");
    assert_eq!(rl.limiter().take_usage().len(), 2, "a caller is kept until its usage is taken");
    clock.advance(Duration::from_secs(3));
    assert_eq!(rl.sweep(), 0, "the hourly window needs 3.6 s per token");
    clock.advance(Duration::from_millis(600));
    assert_eq!(rl.sweep(), 1, "k1 is full again; k2 is still in flight");
    drop(held);
    assert_eq!(rl.sweep(), 1);
    assert!(rl.limiter().is_empty());
}

#[test]
fn status_and_report() {
    let (rl, _clock) = limiter();
    let p = Arc::new(principal("k1", "o1"));
    for path in ["/v1/apps", "/v1/apps", "/v1/logs/analytics"] {
        rl.filter(&Req::new(Method::GET, path).view(), &mut ctx_for(&p)).unwrap();
    }
    let s = rl.status(&p, None);
    assert_eq!(s.tier, "free");
    let global = s.buckets[Bucket::Global.index()];
    assert_eq!((global.limit, global.remaining, global.reset), (10, 8, T0 + 6));
    let analytics = s.buckets[Bucket::Analytics.index()];
    assert_eq!((analytics.limit, analytics.remaining), (20, 15));
}

#[test]
fn usage_is_counted_per_caller_and_minute_until_taken() {
    let (rl, clock) = limiter();
    let p = Arc::new(principal("k1", "o1"));
    for path in ["/v1/apps", "/v1/apps", "/v1/logs/analytics"] {
        rl.filter(&Req::new(Method::GET, path).view(), &mut ctx_for(&p)).unwrap();
    }
    // An unauthenticated caller is limited by address and not reported.
    let _ = rl.filter(&Req::new(Method::GET, "/v1/apps").view(), &mut FilterContext::default());
    let minute = T0 / 60 * 60;
    let usage = |requests, rate_limited, remaining_sum, minute_unix| UsageMinute {
        key_id: "k1".into(),
        minute_unix,
        requests,
        rate_limited,
        remaining_sum,
        // The analytics bucket's 5 of 20 is the largest share used (global: 2 of 10).
        peak_percent: 25,
        peak_bucket: Some(Bucket::Analytics),
    };
    assert_eq!(rl.limiter().take_usage(), vec![usage(3, 0, 9 + 8 + 15, minute)]);
    assert_eq!(rl.limiter().take_usage(), vec![], "taken once");
    // Across a minute's end: one entry per minute; a refusal counts as rate limited.
    for _ in 0..9 {
        let _ = rl.filter(&Req::new(Method::GET, "/v1/apps").view(), &mut ctx_for(&p));
    }
    clock.advance(Duration::from_secs(60));
    rl.filter(&Req::new(Method::GET, "/v1/apps").view(), &mut ctx_for(&p)).unwrap();
    let taken = rl.limiter().take_usage();
    assert_eq!(taken.len(), 2, "{taken:?}");
    assert_eq!(
        (taken[0].minute_unix, taken[0].requests, taken[0].rate_limited),
        (minute, 9, 1),
        "a free tier's minute holds 10"
    );
    assert_eq!((taken[0].peak_percent, taken[0].peak_bucket), (100, Some(Bucket::Global)), "a refusal is all of it");
    assert_eq!((taken[1].minute_unix, taken[1].requests), (minute + 60, 1));
}

#[test]
fn config_is_validated_and_strict() {
    let c: RateLimitConfig = serde_json::from_str(
        r#"{"default_tier": "starter",
            "tiers": {"custom": {"requests_per_hour": "unlimited", "requests_per_minute": 10,
                                 "burst": 5, "concurrent": 2}}}"#,
    )
    .unwrap();
    assert_eq!(c.tiers["custom"].requests_per_hour, None);
    RateLimitPolicy::try_from(&c).unwrap();

    let e = serde_json::from_str::<RateLimitConfig>(r#"{"tiers": {"x": {"burst": 5}}}"#);
    assert!(e.is_err(), "missing fields are an error");
    let e = serde_json::from_str::<RateLimitConfig>(r#"{"write_shares": 1}"#).unwrap_err();
    assert!(e.to_string().contains("write_shares"), "{e}");

    let mut c = RateLimitConfig::default();
    c.tiers.get_mut("free").unwrap().burst = 0;
    assert_eq!(RateLimitPolicy::try_from(&c).unwrap_err().to_string(), "tiers.free.burst: must be at least 1");
    let c = RateLimitConfig { default_tier: "gold".into(), ..Default::default() };
    assert!(matches!(RateLimitPolicy::try_from(&c), Err(RateLimitConfigError::UnknownDefaultTier(_))));
}

#[test]
fn the_product_of_multipliers_is_capped_at_the_tiers_ceiling() {
    let mut policy = RateLimitPolicy::default();
    let mut p = principal("svc", "o1");
    p.rate_limit_multiplier = 100.0;
    assert_eq!(policy.multiplier(&p, Some(100.0)), 10_000.0, "no ceiling until one is set");
    policy.set_max_multiplier("free", 2.0);
    policy.set_max_multiplier("free", 0.5);
    policy.set_max_multiplier("gold", 3.0);
    assert_eq!(policy.multiplier(&p, Some(100.0)), 2.0, "a ceiling below 1 and unknown tiers are ignored");
    p.rate_limit_multiplier = 1.5;
    assert_eq!(policy.multiplier(&p, None), 1.5, "a product below the ceiling applies as it is");
    p.rate_limit_multiplier = 0.5;
    assert_eq!(policy.multiplier(&p, Some(2.0)), 1.0);

    // Where limits are applied: a free key at x100 from a x100 address gets burst 10 x 2.
    let rl = RateLimit::new(Arc::new(policy), Arc::new(LocalRateLimiter::with_clock(ManualClock::new(T0))));
    p.rate_limit_multiplier = 100.0;
    let p = Arc::new(p);
    let mut ctx = ctx_for(&p);
    ctx.ip_rate_limit_multiplier = Some(100.0);
    rl.filter(&Req::new(Method::GET, "/v1/apps").view(), &mut ctx).unwrap();
    assert_eq!(header(&ctx, "x-ratelimit-limit"), "20");
    assert_eq!(rl.status(&p, Some(100.0)).buckets[Bucket::Global.index()].limit, 20);
}

#[test]
fn a_shared_window_counts_to_its_limit_and_opens_again_with_the_next_window() {
    let l = LocalRateLimiter::new();
    let t = 6_000; // the start of a minute
    for n in 1..=3 {
        assert_eq!(l.charge_window("gw_1", 3, 60, t + 10), WindowOutcome { allowed: true, count: n, reset_at: t + 60 });
    }
    assert_eq!(l.charge_window("gw_1", 3, 60, t + 59), WindowOutcome { allowed: false, count: 3, reset_at: t + 60 });
    assert!(l.charge_window("app:other", 3, 60, t + 10).allowed, "windows are per key");
    assert_eq!(l.charge_window("gw_1", 3, 60, t + 60), WindowOutcome { allowed: true, count: 1, reset_at: t + 120 });
    // A zero limit admits nothing; a zero-length window is read as one second.
    assert!(!l.charge_window("zero", 0, 60, t).allowed);
    assert_eq!(l.charge_window("tiny", 5, 0, t).reset_at, t + 1);
}

#[test]
fn sweeping_drops_the_windows_that_have_ended_only() {
    let l = LocalRateLimiter::new();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    l.charge_window("past", 5, 60, now - 3_600);
    l.charge_window("current", 5, 3_600, now);
    assert_eq!(l.sweep(), 1);
    // The current window kept its count.
    assert_eq!(l.charge_window("current", 5, 3_600, now).count, 2);
}

#[test]
fn spent_time_is_taken_once_and_a_merged_state_only_ever_takes_tokens_away() {
    let (rl, clock) = limiter();
    let p = Arc::new(principal("k1", "o1"));
    let get = Req::new(Method::GET, "/v1/gateways");
    for _ in 0..3 {
        rl.filter(&get.view(), &mut ctx_for(&p)).unwrap();
    }
    // Free tier, global: 20/minute, one token every 3 s; 1000/hour, one every 3.6 s.
    let spent = rl.limiter().take_spent();
    let global = |w: usize| spent.iter().find(|s| s.key == "k1" && s.bucket == Bucket::Global.index() && s.window == w);
    let minute = global(0).expect("the minute window moved");
    assert_eq!((minute.advance_ns, minute.span_ns), (3 * 3 * SECOND_NS, 10 * 3 * SECOND_NS));
    assert_eq!(global(1).expect("the hour window moved").advance_ns, 3 * 3_600_000_000);
    assert!(rl.limiter().take_spent().is_empty(), "taken once");
    // Another instance spent 6 more tokens: the shared tat is 9 tokens ahead of now.
    let now_unix_ns = T0 * SECOND_NS + clock.now_ns();
    rl.limiter().merge_tat("k1", Bucket::Global.index(), 0, now_unix_ns + 9 * 3 * SECOND_NS);
    let mut ctx = ctx_for(&p);
    rl.filter(&get.view(), &mut ctx).unwrap();
    assert_eq!(header(&ctx, "x-ratelimit-remaining"), "0", "10 - 9 shared - this one");
    // An older shared state frees nothing.
    rl.limiter().merge_tat("k1", Bucket::Global.index(), 0, now_unix_ns);
    assert!(rl.filter(&get.view(), &mut ctx_for(&p)).is_err());
    // Fixed windows: counted, taken once, raised to the shared count of the same window only.
    let l = rl.limiter();
    let end = ((T0 + 1) / 60 + 1) * 60;
    assert!(l.charge_window("gw_1", 5, 60, T0 + 1).allowed);
    assert_eq!(l.take_window_counts(), vec![("gw_1".to_string(), end, 1)]);
    assert!(l.take_window_counts().is_empty());
    l.merge_window("gw_1", end + 60, 5);
    assert!(l.charge_window("gw_1", 5, 60, T0 + 2).allowed, "another window's count is not this one's");
    l.merge_window("gw_1", end, 5);
    assert!(!l.charge_window("gw_1", 5, 60, T0 + 2).allowed, "the others used the window up");
}

/// A shared backend in memory, with the same arithmetic as the Redis script: one `tat` per
/// caller, bucket and window, on a clock of its own; it can be made to fail.
#[derive(Default)]
struct FakeShared {
    tats: parking_lot::Mutex<std::collections::HashMap<(String, usize, usize), u64>>,
    now_unix_ns: AtomicU64,
    failing: std::sync::atomic::AtomicBool,
}

impl ExactBackend for FakeShared {
    fn charge<'a>(&'a self, key: LimitKey<'a>, bucket: Bucket, cost: u32, limits: BucketLimits) -> ExactFuture<'a> {
        Box::pin(async move {
            if self.failing.load(Ordering::Relaxed) {
                return Err("down".to_string());
            }
            let now = self.now_unix_ns.load(Ordering::Relaxed);
            let name = shared_key_name(key);
            let mut tats = self.tats.lock();
            let windows: Vec<Window> = std::iter::once(limits.minute).chain(limits.hour).collect();
            let before: Vec<u64> =
                (0..windows.len()).map(|i| *tats.get(&(name.clone(), bucket.index(), i)).unwrap_or(&0)).collect();
            let after: Vec<_> =
                windows.iter().zip(&before).map(|(w, &t)| local::admit(t, now, *w, u64::from(cost))).collect();
            let admitted = after.iter().all(Result::is_ok);
            let mut out = [0u64; 2];
            for (i, (t, a)) in before.iter().zip(&after).enumerate() {
                out[i] = *t;
                if let (true, Ok(new)) = (admitted, a) {
                    tats.insert((name.clone(), bucket.index(), i), *new);
                    out[i] = *new;
                }
            }
            Ok(SharedDecision { admitted, now_unix_ns: now, tat_unix_ns: out })
        })
    }

    fn read<'a>(&'a self, key: LimitKey<'a>) -> ReadFuture<'a> {
        Box::pin(async move {
            let name = shared_key_name(key);
            let tats = self.tats.lock();
            Ok(std::array::from_fn(|b| std::array::from_fn(|i| *tats.get(&(name.clone(), b, i)).unwrap_or(&0))))
        })
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
}

/// With an exact backend the filter only leaves the charge; `settle` takes the tokens there
/// (two instances share one count), keeps the in-flight slot local, counts usage, and decides
/// locally from the last shared state while the backend is down.
#[test]
fn exact_charges_are_settled_in_the_shared_backend() {
    let shared = Arc::new(FakeShared::default());
    shared.now_unix_ns.store(T0 * SECOND_NS, Ordering::Relaxed);
    let c = RateLimitConfig {
        tiers: BTreeMap::from([(
            "free".to_string(),
            TierLimits { requests_per_hour: None, requests_per_minute: 1, burst: 3, concurrent: 1 },
        )]),
        ..RateLimitConfig::default()
    };
    let (a, _) = limiter_with(c.clone());
    let (b, _) = limiter_with(c);
    let (a, b) = (a.with_exact(Some(shared.clone())), b.with_exact(Some(shared.clone())));
    let p = Arc::new(principal("k1", "o1"));
    let req = Req::new(Method::GET, "/v1/gateways");

    let mut ctx = ctx_for(&p);
    assert!(a.filter(&req.view(), &mut ctx).is_ok());
    assert!(ctx.pending_charge.is_some() && ctx.response_headers.is_empty(), "left for settle");
    assert_eq!(block_on(a.settle(&mut ctx)), Some(Ok(())));
    assert_eq!(header(&ctx, "x-ratelimit-remaining"), "2");
    assert!(ctx.concurrency.is_some(), "the in-flight slot is taken here");
    // The slot is per instance: a second request on `a` while the first is in flight is refused
    // without asking the backend; on `b` it is admitted and sees the shared count.
    let mut second = ctx_for(&p);
    a.filter(&req.view(), &mut second).unwrap();
    let refused = block_on(a.settle(&mut second)).unwrap().unwrap_err();
    assert_eq!((refused.status, &*refused.message), (429, "Too many concurrent requests"));
    drop(ctx);
    let mut on_b = ctx_for(&p);
    b.filter(&req.view(), &mut on_b).unwrap();
    assert_eq!(block_on(b.settle(&mut on_b)), Some(Ok(())));
    assert_eq!(header(&on_b, "x-ratelimit-remaining"), "1");
    drop(on_b);
    // A handler's extra charge is settled there too: nothing is left for it.
    let mut batch = ctx_for(&p);
    a.filter(&req.view(), &mut batch).unwrap();
    block_on(a.settle(&mut batch)).unwrap().unwrap();
    assert_eq!(header(&batch, "x-ratelimit-remaining"), "0");
    a.charge_extra(&req.view(), &mut batch, 2).unwrap();
    assert!(batch.pending_charge.is_some());
    assert_eq!(block_on(a.settle(&mut batch)).unwrap().unwrap_err().status, 429);
    drop(batch);
    let mut over = ctx_for(&p);
    a.filter(&req.view(), &mut over).unwrap();
    let limited = block_on(a.settle(&mut over)).unwrap().unwrap_err();
    assert_eq!(limited.status, 429);
    assert_eq!(header(&over, "x-ratelimit-remaining"), "0");
    assert!(limited.retry_after.is_some_and(|s| (1..=60).contains(&s)), "{limited:?}");
    // Usage counted on the instance that took each request: a saw 4 (one refused by its slot,
    // one by the shared count), b saw 1.
    let usage_a: u64 = a.limiter().take_usage().iter().map(|m| m.requests).sum();
    let usage_b: u64 = b.limiter().take_usage().iter().map(|m| m.requests).sum();
    assert_eq!((usage_a, usage_b), (4, 1));
    // Backend down: `b` decides alone from the state it last saw (its own last answer said 1
    // left), so it admits one and refuses the next.
    shared.failing.store(true, Ordering::Relaxed);
    let outcomes: Vec<u16> = (0..2)
        .map(|_| {
            let mut ctx = ctx_for(&p);
            b.filter(&req.view(), &mut ctx).unwrap();
            match block_on(b.settle(&mut ctx)).unwrap() {
                Ok(()) => 200,
                Err(r) => r.status,
            }
        })
        .collect();
    assert_eq!(outcomes, vec![200, 429]);
    // Without an exact backend nothing is left pending.
    let (plain, _) = limiter();
    let mut ctx = ctx_for(&p);
    plain.filter(&req.view(), &mut ctx).unwrap();
    assert!(ctx.pending_charge.is_none());
    assert_eq!(block_on(plain.settle(&mut ctx)), None);
}

#[test]
fn exact_status_shows_what_another_instance_spent() {
    let shared = Arc::new(FakeShared::default());
    shared.now_unix_ns.store(T0 * SECOND_NS, Ordering::Relaxed);
    let c = RateLimitConfig {
        tiers: BTreeMap::from([(
            "free".to_string(),
            TierLimits { requests_per_hour: None, requests_per_minute: 1, burst: 3, concurrent: 5 },
        )]),
        ..RateLimitConfig::default()
    };
    let (a, _) = limiter_with(c.clone());
    let (b, _) = limiter_with(c);
    let (a, b) = (a.with_exact(Some(shared.clone())), b.with_exact(Some(shared)));
    let p = Arc::new(principal("k1", "o1"));
    let req = Req::new(Method::GET, "/v1/gateways");
    for _ in 0..2 {
        let mut ctx = ctx_for(&p);
        a.filter(&req.view(), &mut ctx).unwrap();
        block_on(a.settle(&mut ctx)).unwrap().unwrap();
    }
    let global = |s: &RateLimitStatus| s.buckets[Bucket::Global.index()].remaining;
    assert_eq!(global(&b.status(&p, None)), 3, "b's own view: it charged nothing");
    assert_eq!(global(&block_on(b.current_status(&p, None))), 1, "the shared state: a spent two");
    assert_eq!(global(&b.status(&p, None)), 1, "and b keeps it");
}

#[test]
fn header_numbers_are_right_whether_prebuilt_remembered_or_built() {
    let mut recent = None;
    for n in [0u64, 7, 1023, 1024, T0, T0, T0 + 1, 5, T0 + 1, T0, u64::MAX] {
        assert_eq!(number_value(n, &mut recent).to_str().unwrap(), n.to_string());
    }
    assert_eq!(recent.map(|(n, _)| n), Some(u64::MAX), "the last large number built is remembered");
}

#[test]
fn the_headers_follow_each_snapshot_when_large_numbers_repeat_and_change() {
    let mut headers = Vec::new();
    for (limit, remaining, reset) in [(5000, 4999, T0 + 60), (5000, 4998, T0 + 60), (7000, 4998, T0 + 61)] {
        let snapshot = Snapshot { limit, remaining, reset_at_unix: reset, reset_after_ns: 60 * SECOND_NS };
        set_rate_limit_headers(&mut headers, Bucket::Gateway, &snapshot);
        let value = |name: &HeaderName| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.to_str().unwrap());
        assert_eq!(value(&X_RATELIMIT_LIMIT), Some(limit.to_string().as_str()));
        assert_eq!(value(&X_RATELIMIT_REMAINING), Some(remaining.to_string().as_str()));
        assert_eq!(value(&X_RATELIMIT_RESET), Some(reset.to_string().as_str()));
        assert_eq!(value(&X_RATELIMIT_RESET_AFTER), Some("60"));
        assert_eq!(headers.len(), 5);
    }
}

/// A batch's operation is charged as if sent alone: to its own bucket at its own cost (an
/// analytics query 5 of `analytics`, a gateway POST 2 of `write`), with or without the version
/// prefix, refused when that bucket cannot pay while the others are untouched.
#[test]
fn a_batch_operation_is_charged_to_its_own_bucket() {
    let (rl, _clock) = limiter();
    let p = Arc::new(principal("k1", "o1"));
    let status = |b: Bucket| rl.status(&p, None).buckets[b.index()].remaining;
    let analytics = status(Bucket::Analytics);
    let query = Req::new(Method::GET, "/logs/analytics");
    let mut paid = 0;
    while block_on(rl.charge_operation(&query.view(), p.clone(), None)).is_ok() {
        paid += 1;
        assert!(paid <= 100, "never refused");
    }
    assert_eq!(paid, analytics / 5, "5 tokens a query from {analytics}");
    let r = block_on(rl.charge_operation(&Req::new(Method::GET, "/v1/metrics/gateway/g").view(), p.clone(), None));
    assert_eq!(r.unwrap_err().status, 429, "the versioned form draws from the same bucket");
    let (global, write) = (status(Bucket::Global), status(Bucket::Write));
    block_on(rl.charge_operation(&Req::new(Method::POST, "/gateways").view(), p.clone(), None)).unwrap();
    assert_eq!((status(Bucket::Global), status(Bucket::Write)), (global, write - 2));
}
