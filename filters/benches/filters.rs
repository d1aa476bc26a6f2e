//! Cost per request of each edge filter and of the whole chain, against an empty chain measured
//! in the same run (the baseline: building and dropping a `FilterContext` and running nothing).
//!
//! The happy path is measured: a valid key, an allowed address, limits never reached (a tier
//! sized so that the bucket never empties). The credential resolver is an in-memory map, so the
//! figures exclude the server's key hashing (SHA-256 of the presented key).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use toolgate_filters::auth::{AuthError, Authenticate, CredentialResolver};
use toolgate_filters::ip_allowlist::{parse_net, IpEntry, IpPolicy, IpPolicySource};
use toolgate_filters::rate_limit::{ManualClock, RateLimitConfig, TierLimits};
use toolgate_filters::{
    CredentialKind, FilterChain, FilterContext, IpAllowlist, LocalRateLimiter, Principal, RateLimit, RateLimitPolicy,
    RequestFilter, RequestView, Role, RouteClass, ScopeSet,
};

struct Keys(HashMap<String, Arc<Principal>>);

impl CredentialResolver for Keys {
    fn resolve_key(&self, key: &str) -> Result<Arc<Principal>, AuthError> {
        self.0.get(key).cloned().ok_or(AuthError::Unknown)
    }
}

struct Policies(HashMap<String, Arc<IpPolicy>>);

impl IpPolicySource for Policies {
    fn policy(&self, org_id: &str) -> Option<Arc<IpPolicy>> {
        self.0.get(org_id).cloned()
    }
}

const KEY: &str = "ag_0123456789abcdef0123456789abcdef";

fn principal() -> Arc<Principal> {
    Arc::new(Principal {
        key_id: "key_01HZX3Q8Y".into(),
        user_id: "user_1".into(),
        org_id: "org_1".into(),
        role: Role::Owner,
        credential: CredentialKind::ApiKey,
        scopes: ScopeSet::ALL,
        tier: "bench".into(),
        rate_limit_multiplier: 1.0,
        bypass_ip_whitelist: false,
        expires_at: None,
    })
}

fn filters() -> (IpAllowlist, Authenticate, RateLimit) {
    let resolver: Arc<dyn CredentialResolver> = Arc::new(Keys(HashMap::from([(KEY.to_string(), principal())])));
    // A realistic allowlist: a dozen networks and two multiplier entries.
    let networks = (0..12).map(|i| parse_net(&format!("10.{i}.0.0/16")).unwrap());
    let entries = [
        IpEntry { network: parse_net("10.3.0.0/24").unwrap(), rate_limit_multiplier: 2.0 },
        IpEntry { network: parse_net("10.3.0.7").unwrap(), rate_limit_multiplier: 4.0 },
    ];
    let policy = Arc::new(IpPolicy::new(true, networks, entries).unwrap());
    let policies = Arc::new(Policies(HashMap::from([("org_1".to_string(), policy)])));

    let mut config = RateLimitConfig::default();
    let huge = TierLimits {
        requests_per_hour: Some(u32::MAX),
        requests_per_minute: u32::MAX,
        burst: u32::MAX,
        concurrent: u32::MAX,
    };
    config.tiers = BTreeMap::from([("bench".to_string(), huge)]);
    let policy = Arc::new(RateLimitPolicy::try_from(&config).unwrap());
    let rate_limit = RateLimit::new(policy, Arc::new(LocalRateLimiter::new()));
    (IpAllowlist::new(resolver.clone(), policies), Authenticate::new(resolver), rate_limit)
}

fn bench(c: &mut Criterion) {
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::AUTHORIZATION, format!("Bearer {KEY}").parse().unwrap());
    headers.insert(http::header::ACCEPT, "application/json".parse().unwrap());
    let method = http::Method::GET;
    let req = RequestView {
        method: &method,
        path: "/v1/gateways",
        query: None,
        headers: &headers,
        client_ip: "10.3.0.9".parse().unwrap(),
        route: RouteClass::Management,
        gateway_id: None,
        client_certificate: None,
    };
    let p = principal();

    let mut g = c.benchmark_group("filters");
    let empty = FilterChain::new();
    g.bench_function("empty_chain", |b| {
        b.iter(|| {
            let mut ctx = FilterContext::default();
            empty.run(black_box(&req), &mut ctx).unwrap();
            black_box(ctx)
        })
    });

    let (ip, auth, rl) = filters();
    g.bench_function("ip_allowlist", |b| {
        b.iter(|| {
            let mut ctx = FilterContext::default();
            ip.filter(black_box(&req), &mut ctx).unwrap();
            black_box(ctx)
        })
    });
    g.bench_function("authentication", |b| {
        b.iter(|| {
            let mut ctx = FilterContext::default();
            auth.filter(black_box(&req), &mut ctx).unwrap();
            black_box(ctx)
        })
    });
    g.bench_function("rate_limit", |b| {
        b.iter(|| {
            // The principal as authentication leaves it.
            let mut ctx = FilterContext { principal: Some(p.clone()), ..Default::default() };
            rl.filter(black_box(&req), &mut ctx).unwrap();
            black_box(ctx)
        })
    });

    // Realistic header values: the enterprise tier (burst 1000, 100000/hour), with time moved
    // on by one hourly refill interval (36 ms) per request so both windows stay nearly full. The
    // numbers then come from the prebuilt small-number header values, as they mostly do in
    // production; the manual clock skips the ~20 ns of reading the monotonic clock.
    let clock = ManualClock::new(1_700_000_000);
    let enterprise =
        RateLimit::new(Arc::new(RateLimitPolicy::default()), Arc::new(LocalRateLimiter::with_clock(clock.clone())));
    let mut ent = (*p).clone();
    ent.tier = "enterprise".into();
    let ent = Arc::new(ent);
    g.bench_function("rate_limit_enterprise_tier", |b| {
        b.iter(|| {
            clock.advance(std::time::Duration::from_millis(36));
            let mut ctx = FilterContext { principal: Some(ent.clone()), ..Default::default() };
            enterprise.filter(black_box(&req), &mut ctx).unwrap();
            black_box(ctx)
        })
    });

    let (ip, auth, rl) = filters();
    let chain = FilterChain::new().with(ip).with(auth).with(rl);
    g.bench_function("whole_chain", |b| {
        b.iter(|| {
            let mut ctx = FilterContext::default();
            chain.run(black_box(&req), &mut ctx).unwrap();
            black_box(ctx)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
