//! Pins the edge chain: IP allowlist -> authentication -> rate limit (DESIGN.md, filters
//! README). A refusal by an earlier filter must happen before the later ones decide, and the
//! rate limiter must still count it and add its headers.

use std::collections::HashMap;
use std::sync::Arc;
use toolgate_filters::auth::{AuthError, Authenticate, CredentialResolver};
use toolgate_filters::ip_allowlist::{parse_net, IpPolicy, IpPolicySource};
use toolgate_filters::rate_limit::{LocalRateLimiter, ManualClock, RateLimitPolicy};
use toolgate_filters::{
    CredentialKind, FilterChain, FilterContext, IpAllowlist, Principal, RateLimit, RequestView, Role, RouteClass,
    ScopeSet,
};

struct Keys(HashMap<&'static str, Arc<Principal>>);

impl CredentialResolver for Keys {
    fn resolve_key(&self, key: &str) -> Result<Arc<Principal>, AuthError> {
        self.0.get(key).cloned().ok_or(AuthError::Unknown)
    }
}

struct Policies(Arc<IpPolicy>);

impl IpPolicySource for Policies {
    fn policy(&self, org_id: &str) -> Option<Arc<IpPolicy>> {
        (org_id == "org1").then(|| self.0.clone())
    }
}

fn principal() -> Principal {
    Principal {
        key_id: "key1".into(),
        user_id: "user1".into(),
        org_id: "org1".into(),
        role: Role::Owner,
        credential: CredentialKind::ApiKey,
        scopes: ScopeSet::ALL,
        tier: "free".into(),
        rate_limit_multiplier: 1.0,
        bypass_ip_whitelist: false,
        expires_at: None,
    }
}

fn chain() -> FilterChain {
    let resolver = Arc::new(Keys(HashMap::from([("ag_valid", Arc::new(principal()))])));
    let policy = IpPolicy::new(true, [parse_net("10.0.0.0/8").unwrap()], []).unwrap();
    let limiter = LocalRateLimiter::with_clock(ManualClock::new(1_700_000_000));
    FilterChain::new()
        .with(IpAllowlist::new(resolver.clone(), Arc::new(Policies(Arc::new(policy)))))
        .with(Authenticate::new(resolver))
        .with(RateLimit::new(Arc::new(RateLimitPolicy::default()), Arc::new(limiter)))
}

fn run(chain: &FilterChain, key: Option<&str>, ip: &str) -> (Result<(), u16>, FilterContext) {
    let mut headers = http::HeaderMap::new();
    if let Some(key) = key {
        headers.insert("authorization", format!("Bearer {key}").parse().unwrap());
    }
    let req = RequestView {
        method: &http::Method::GET,
        path: "/v1/gateways",
        query: None,
        headers: &headers,
        client_ip: ip.parse().unwrap(),
        route: RouteClass::Management,
        gateway_id: None,
        client_certificate: None,
    };
    let mut ctx = FilterContext::default();
    let result = chain.run(&req, &mut ctx).map_err(|r| r.status);
    (result, ctx)
}

fn has_rate_limit_headers(ctx: &FilterContext) -> bool {
    let names: Vec<&str> = ctx.response_headers.iter().map(|(n, _)| n.as_str()).collect();
    ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-reset-after", "x-ratelimit-bucket"]
        .iter()
        .all(|h| names.contains(h))
}

#[test]
fn order_is_ip_allowlist_then_authentication_then_rate_limit() {
    assert_eq!(chain().names(), ["ip_allowlist", "authentication", "rate_limit"]);
}

#[test]
fn each_filter_decides_in_order_and_every_answer_is_counted() {
    let chain = chain();

    // Valid key from an allowed address: admitted, principal set once, headers present.
    let (r, ctx) = run(&chain, Some("ag_valid"), "10.1.2.3");
    assert_eq!(r, Ok(()));
    assert_eq!(ctx.principal.as_ref().unwrap().key_id, "key1");
    assert!(has_rate_limit_headers(&ctx) && ctx.concurrency.is_some());

    // Valid key from a refused address: the IP filter answers 403 before the others decide;
    // the rate limiter still counts it against the key and adds its headers.
    let (r, ctx) = run(&chain, Some("ag_valid"), "192.0.2.1");
    assert_eq!(r, Err(403));
    assert!(has_rate_limit_headers(&ctx));
    assert!(ctx.concurrency.is_none(), "a refused request holds no in-flight slot");

    // Bad or missing key from a refused address: the organisation is unknown, so the IP
    // filter passes and authentication answers 401 (nothing about the allowlist leaks).
    for key in [Some("ag_nope"), None] {
        let (r, ctx) = run(&chain, key, "192.0.2.1");
        assert_eq!(r, Err(401));
        assert!(has_rate_limit_headers(&ctx));
    }

    // The key's bucket (burst 10) saw the two requests above: 8 more are admitted, then 429.
    for _ in 0..8 {
        assert_eq!(run(&chain, Some("ag_valid"), "10.1.2.3").0, Ok(()));
    }
    assert_eq!(run(&chain, Some("ag_valid"), "10.1.2.3").0, Err(429));
}
