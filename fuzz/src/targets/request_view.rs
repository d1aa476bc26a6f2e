//! The edge filters' view of a request (`filters/`): the route of a path (`route::Route::of`),
//! the client address from the socket peer, `X-Forwarded-For` and `trusted_proxies`
//! (`client_ip`), the organisation's allowlist built from its settings (`IpPolicy`), scope and
//! role names, the credential in `Authorization` / `?api_key=` / `X-API-Key`, and the whole
//! chain (IP allowlist -> authentication -> rate limit) over the resulting `RequestView`.
//!
//! The input is lines (`\n`), each one field; a missing line is an absent field:
//!
//! ```text
//! 0 method          5 Authorization value     10 principal's rate-limit multiplier
//! 1 path?query      6 X-API-Key value
//! 2 socket peer     7 allowlist settings (JSON, as PATCH /account/security takes them)
//! 3 X-Forwarded-For 8 scope names, comma-separated
//! 4 trusted proxies, comma-separated CIDRs   9 role name
//! ```
//!
//! Properties beyond "no panic": the client address is the peer unless the peer is trusted, and
//! otherwise one of the header's hops; the allowlist's compiled ranges agree with a plain scan of
//! its networks; a credential found is a non-empty part of the header or query it came from; a
//! scope set reads back from its names; a refusal is a 401, 403 or 429.

use super::{Features, Outcome};
use ipnet::IpNet;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use toolgate::base::route::Route;
use toolgate_filters::auth::{self, AuthError, Authenticate, CredentialResolver};
use toolgate_filters::ip_allowlist::{parse_net, IpPolicyConfig, IpPolicyError};
use toolgate_filters::rate_limit::{cost_and_bucket, strip_version_prefix, RateLimitPolicy};
use toolgate_filters::{
    client_ip::client_ip, CredentialKind, FilterChain, FilterContext, IpAllowlist, IpPolicy, IpPolicySource,
    LocalRateLimiter, Principal, RateLimit, RequestView, Role, RouteClass, ScopeSet,
};

pub fn run(data: &[u8]) -> Features {
    let mut out = Outcome::new();
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let mut line = || lines.next();
    let method = line().and_then(|m| http::Method::from_bytes(m.as_bytes()).ok()).unwrap_or(http::Method::GET);
    let target = line().unwrap_or("/v1/gateways");
    let peer = line().and_then(|p| p.trim().parse::<IpAddr>().ok()).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let forwarded = line();
    let trusted: Vec<IpNet> = line().map(|t| t.split(',').filter_map(parse_net).collect()).unwrap_or_default();
    let authorization = line();
    let api_key = line();
    let policy_json = line();
    let scopes = line();
    let role = line();
    let multiplier = line().and_then(|m| m.trim().parse::<f64>().ok()).filter(|m| m.is_finite() && *m > 0.0);

    // The route, as the proxy's first phase decides it.
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let route = Route::of(path, "/auth");
    let (class, gateway_id) = match &route {
        Route::Management(_) => (RouteClass::Management, None),
        Route::Gateway(id) => {
            assert!(!id.is_empty() && !id.contains('/'), "gateway id `{id}` from path `{path}`");
            (RouteClass::Gateway, Some(id.as_str()))
        }
        _ => (RouteClass::Public, None),
    };
    out.add_count(class as usize);

    // The client address.
    let ip = client_ip(peer, forwarded, &trusted);
    if trusted.is_empty() || !trusted.iter().any(|n| n.contains(&peer)) {
        assert_eq!(ip, peer, "an untrusted peer's X-Forwarded-For was believed");
        out.add("peer-untrusted");
    } else if ip != peer {
        let hops: Vec<IpAddr> = forwarded.unwrap_or("").split(',').filter_map(|h| h.trim().parse().ok()).collect();
        assert!(hops.contains(&ip), "client address {ip} is neither the peer nor a hop of {forwarded:?}");
        out.add(if trusted.iter().any(|n| n.contains(&ip)) { "trusted-hop" } else { "hop" });
    }

    // The organisation's allowlist, and a plain scan to check its compiled ranges against.
    let policy =
        policy_json.and_then(|j| serde_json::from_str::<IpPolicyConfig>(j).ok()).map(|c| IpPolicy::try_from(&c));
    let policy = match policy {
        Some(Ok(p)) => {
            out.add("policy");
            for probe in [ip, peer, IpAddr::V4(Ipv4Addr::UNSPECIFIED), IpAddr::V4(Ipv4Addr::BROADCAST)] {
                let canonical = probe.to_canonical();
                let scanned =
                    p.networks().iter().chain(p.entries().iter().map(|e| &e.network)).any(|n| n.contains(&canonical));
                assert_eq!(p.allows(probe), scanned, "allowlist ranges disagree with its networks for {probe}: {p:?}");
                if p.multiplier_for(probe).is_some() {
                    assert!(p.allows(probe), "{probe} has a multiplier entry but is not allowed");
                }
                out.add(if p.refuses(probe) { "refused" } else { "allowed" });
            }
            Some(Arc::new(p))
        }
        Some(Err(e)) => {
            out.add(match e {
                IpPolicyError::InvalidNetwork { field, .. } => field,
                _ => "bad-multiplier",
            });
            None
        }
        None => None,
    };

    // Scope and role names.
    let key_scopes = match scopes.map(|s| ScopeSet::parse(s.split(',').map(str::trim))) {
        Some(Ok(set)) => {
            assert_eq!(ScopeSet::parse(set.names()), Ok(set), "scope set does not read back from its names");
            out.add_count(set.bits() as usize);
            set
        }
        Some(Err(_)) => {
            out.add("bad-scope");
            ScopeSet::ALL
        }
        None => ScopeSet::ALL,
    };
    let role = role.and_then(Role::parse).unwrap_or(Role::Owner);
    out.add(role.as_str());

    // The request as the filters see it.
    let mut headers = http::HeaderMap::new();
    for (name, value) in
        [(http::header::AUTHORIZATION, authorization), (http::HeaderName::from_static("x-api-key"), api_key)]
    {
        if let Some(v) = value.and_then(|v| http::HeaderValue::from_bytes(v.as_bytes()).ok()) {
            headers.insert(name, v);
        }
    }
    let view = RequestView {
        method: &method,
        path,
        query,
        headers: &headers,
        client_ip: ip,
        route: class,
        gateway_id,
        client_certificate: None,
    };
    match auth::management_credential(&view) {
        Ok(c) => {
            assert!(!c.is_empty(), "empty management credential");
            let from = [authorization, query].iter().flatten().any(|s| s.contains(c));
            assert!(from, "credential `{c}` is in neither Authorization nor the query");
            out.add("mgmt-credential");
        }
        Err(e) => out.add(&format!("{e:?}")),
    }
    if let Ok(c) = auth::gateway_credential(&view) {
        assert!(api_key.is_some_and(|k| k.contains(c)), "gateway credential `{c}` is not from X-API-Key");
        out.add("gw-credential");
    }
    let (_, cost) = cost_and_bucket(&method, strip_version_prefix(path), class);
    assert!(cost <= 5, "cost {cost}");
    out.add_count(cost as usize);

    let resolver = Arc::new(Keys::new(key_scopes, role, multiplier.unwrap_or(1.0)));
    let chain = FilterChain::new()
        .with(IpAllowlist::new(resolver.clone(), Arc::new(Policies(policy))))
        .with(Authenticate::new(resolver))
        .with(RateLimit::new(Arc::new(RateLimitPolicy::default()), Arc::new(LocalRateLimiter::new())));
    let mut ctx = FilterContext::default();
    match chain.run(&view, &mut ctx) {
        Ok(()) => out.add("admitted"),
        Err(r) => {
            assert!(matches!(r.status, 401 | 403 | 429), "rejection {r:?}");
            out.add(r.code);
            out.add_count(r.status as usize);
        }
    }
    out.finish()
}

/// Three keys of organisation `org1` (an account key, gateway `g1`'s access key, a service
/// account's key that bypasses the allowlist); anything else is unknown.
struct Keys(HashMap<&'static str, Arc<Principal>>);

impl Keys {
    fn new(scopes: ScopeSet, role: Role, rate_limit_multiplier: f64) -> Keys {
        let p = |key_id: &str, credential: CredentialKind, bypass_ip_whitelist: bool| Principal {
            key_id: key_id.into(),
            user_id: "usr_1".into(),
            org_id: "org1".into(),
            role,
            credential,
            scopes: scopes.intersect(role.allowed()),
            tier: "free".into(),
            rate_limit_multiplier,
            bypass_ip_whitelist,
            expires_at: None,
        };
        Keys(HashMap::from([
            ("ag_owner", Arc::new(p("key_owner", CredentialKind::ApiKey, false))),
            ("ag_gw", Arc::new(p("key_gw", CredentialKind::GatewayKey { gateway_id: "g1".into() }, false))),
            ("ag_sa", Arc::new(p("key_sa", CredentialKind::ServiceAccount { account_id: "sa_1".into() }, true))),
        ]))
    }
}

impl CredentialResolver for Keys {
    fn resolve_key(&self, key: &str) -> Result<Arc<Principal>, AuthError> {
        self.0.get(key).cloned().ok_or(AuthError::Unknown)
    }
}

struct Policies(Option<Arc<IpPolicy>>);

impl IpPolicySource for Policies {
    fn policy(&self, org_id: &str) -> Option<Arc<IpPolicy>> {
        (org_id == "org1").then(|| self.0.clone()).flatten()
    }
}
