//! toolgate's plugin layer: the edge filters that run in Pingora's request phases before any
//! handler.
//!
//! Filters never see Pingora's `Session`. They see a [`RequestView`] (method, path, headers,
//! client IP) and a [`FilterContext`] that carries what earlier filters learned (the caller's
//! [`Principal`], the rate-limit headers to add to the response). A filter that refuses a request
//! returns a [`Rejection`] value; the server turns it into the response envelope or a JSON-RPC
//! error in one place.
//!
//! Filters are synchronous on purpose: everything they need (key table, buckets, allowlists) is in
//! memory, so no lock is ever held across an `.await` and no future is boxed per request.
#![forbid(unsafe_code)]

pub mod auth;
pub mod chain;
pub mod client_ip;
pub mod ip_allowlist;
pub mod origin;
pub mod principal;
pub mod rate_limit;
pub mod rejection;
pub mod scope;

pub use chain::{FilterChain, RequestFilter};
pub use ip_allowlist::{IpAllowlist, IpPolicy, IpPolicySource};
pub use principal::{CredentialKind, Principal};
pub use rate_limit::{Bucket, ConcurrencyGuard, LocalRateLimiter, RateLimit, RateLimitPolicy, RateLimiter};
pub use rejection::Rejection;
pub use scope::{Role, Scope, ScopeSet};

use std::net::IpAddr;
use std::sync::Arc;

/// Which family of routes a request belongs to; each has its own chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteClass {
    /// `/v1/...` and `/api/v1/...`: Bearer or `?api_key=` credentials.
    Management,
    /// `/gateway/{id}/mcp`: `X-API-Key` only.
    Gateway,
    /// Health and readiness: no credentials, no limits.
    Public,
    /// The identity service (`web.path`: sign-in pages, OAuth endpoints): no credential at the
    /// edge; each address has a bucket of its own (`rate_limits.identity`).
    Identity,
}

/// The small, borrowed view of a request that filters inspect.
#[derive(Debug)]
pub struct RequestView<'a> {
    pub method: &'a http::Method,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a http::HeaderMap,
    /// The client address after `trusted_proxies` handling (see [`client_ip`]).
    pub client_ip: IpAddr,
    pub route: RouteClass,
    /// For gateway routes, the `{gateway_id}` segment.
    pub gateway_id: Option<&'a str>,
    /// The subject (`CN=..., O=...`) of the client certificate verified in the TLS handshake
    /// (`server.tls.client_ca_file`), when the connection presented one.
    pub client_certificate: Option<&'a str>,
}

/// What the filters learned about a request, handed to the handler afterwards.
///
/// The server keeps it until the response is finished: dropping it releases the caller's
/// in-flight slot ([`FilterContext::concurrency`]).
#[derive(Debug, Default)]
pub struct FilterContext {
    /// The authenticated caller, set by the authentication filter (or already by the IP
    /// allowlist, which must resolve the credential to learn the organisation).
    pub principal: Option<Arc<Principal>>,
    /// Why the credential was refused, when a filter before authentication already tried it;
    /// authentication reports this instead of asking the resolver a second time.
    pub credential_error: Option<auth::AuthError>,
    /// Headers every response to this request must carry (e.g. `X-RateLimit-*`), set by the
    /// rate-limit filter even when a later step rejects the request.
    pub response_headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// The `rate_limit_multiplier` of the organisation's allowlist entry that matched the client
    /// address, if any; the rate limiter scales the caller's limits by it.
    pub ip_rate_limit_multiplier: Option<f64>,
    /// The bucket and cost this request was charged, so a handler can charge more to the same
    /// bucket (a batch's per-operation cost) with [`RateLimit::charge_extra`].
    pub rate_limit: Option<rate_limit::Charge>,
    /// The caller's in-flight slot; the `concurrent` cap counts it until this is dropped. A
    /// gateway's GET (listening) stream takes none: it is not a request in flight.
    pub concurrency: Option<ConcurrencyGuard>,
    /// The filter whose refusal the request is answered with (for the rejection metrics).
    pub rejected_by: Option<&'static str>,
    /// A charge the rate limit left for a shared backend to decide (`rate_limits.distributed:
    /// exact`): one round trip, made by [`RateLimit::settle`] once the chain has run, since
    /// filters do not wait.
    pub pending_charge: Option<rate_limit::PendingCharge>,
}

/// Fakes shared by the unit tests of several filters.
#[cfg(test)]
pub(crate) mod testing {
    use crate::auth::{AuthError, CredentialResolver};
    use crate::ip_allowlist::{IpPolicy, IpPolicySource};
    use crate::{CredentialKind, Principal, RequestView, RouteClass, ScopeSet};
    use std::collections::HashMap;
    use std::sync::Arc;

    pub static GET: http::Method = http::Method::GET;

    pub fn principal(key_id: &str, org_id: &str) -> Principal {
        Principal {
            key_id: key_id.into(),
            user_id: "u1".into(),
            org_id: org_id.into(),
            role: crate::Role::Owner,
            credential: CredentialKind::ApiKey,
            scopes: ScopeSet::ALL,
            tier: "free".into(),
            rate_limit_multiplier: 1.0,
            bypass_ip_whitelist: false,
            expires_at: None,
        }
    }

    #[derive(Default)]
    pub struct FakeResolver(pub HashMap<String, Arc<Principal>>);

    impl FakeResolver {
        pub fn with<const N: usize>(keys: [(&str, Principal); N]) -> Self {
            FakeResolver(keys.into_iter().map(|(k, p)| (k.to_string(), Arc::new(p))).collect())
        }
    }

    impl CredentialResolver for FakeResolver {
        fn resolve_key(&self, key: &str) -> Result<Arc<Principal>, AuthError> {
            self.0.get(key).cloned().ok_or(AuthError::Unknown)
        }
    }

    pub struct FakePolicies(pub HashMap<String, Arc<IpPolicy>>);

    impl FakePolicies {
        pub fn with(org: &str, policy: IpPolicy) -> Self {
            FakePolicies(HashMap::from([(org.to_string(), Arc::new(policy))]))
        }
    }

    impl IpPolicySource for FakePolicies {
        fn policy(&self, org_id: &str) -> Option<Arc<IpPolicy>> {
            self.0.get(org_id).cloned()
        }
    }

    pub fn bearer(key: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, format!("Bearer {key}").parse().unwrap());
        h
    }

    pub fn request<'a>(headers: &'a http::HeaderMap, ip: &str, route: RouteClass) -> RequestView<'a> {
        let path = match route {
            RouteClass::Management => "/v1/gateways",
            RouteClass::Gateway => "/gateway/g1/mcp",
            RouteClass::Public => "/healthz",
            RouteClass::Identity => "/auth/signin",
        };
        RequestView {
            method: &GET,
            path,
            query: None,
            headers,
            client_ip: ip.parse().unwrap(),
            route,
            gateway_id: (route == RouteClass::Gateway).then_some("g1"),
            client_certificate: None,
        }
    }
}
