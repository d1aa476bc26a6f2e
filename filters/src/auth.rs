//! Authentication: finds the credential where the route class says it must be and asks the
//! server's [`CredentialResolver`] who it belongs to.
//!
//! Management routes take `Authorization: Bearer <key>` or `?api_key=<key>`; the gateway route
//! takes `X-API-Key` (Decision 4), and a Bearer header there is a 401 unless the gateway opted
//! into OAuth (Decision 17): then the resolver verifies it as an access token for that gateway.

use crate::{FilterContext, Principal, Rejection, RequestFilter, RequestView, RouteClass};
use std::sync::Arc;

/// Why a credential was refused. Every variant is a 401 but `InsufficientScope`, a 403 (RFC 6750
/// section 3.1: the token is good, its scope is not enough); the message says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing credentials")]
    Missing,
    #[error("malformed credentials")]
    Malformed,
    #[error("invalid API key")]
    Unknown,
    #[error("API key has been revoked")]
    Revoked,
    #[error("API key has expired")]
    Expired,
    #[error("the gateway endpoint accepts only the X-API-Key header")]
    WrongHeader,
    #[error("this key is not valid for this gateway")]
    WrongGateway,
    #[error("invalid or expired access token")]
    InvalidToken,
    #[error("the access token lacks a scope this gateway requires")]
    InsufficientScope,
}

impl From<AuthError> for Rejection {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::InsufficientScope => Rejection::forbidden("INSUFFICIENT_SCOPE", e.to_string()),
            _ => Rejection::unauthorized(e.to_string()),
        }
    }
}

/// The server side of authentication: the key table lives in the server's store.
pub trait CredentialResolver: Send + Sync {
    /// Resolves an API key (`ag_...`) to its caller. Implementations look the key up by its
    /// SHA-256 hash, so no plaintext comparison happens.
    fn resolve_key(&self, key: &str) -> Result<Arc<Principal>, AuthError>;

    /// Resolves a management Bearer value that is not an API key (a signed JWT or an OAuth
    /// access token). The default refuses it, so a server without token support answers such a
    /// value with 401 exactly as before this hook existed.
    fn resolve_token(&self, token: &str) -> Result<Arc<Principal>, AuthError> {
        let _ = token;
        Err(AuthError::Malformed)
    }

    /// Resolves a Bearer access token sent to gateway `gateway_id`'s endpoint. The default,
    /// and a gateway that did not opt into OAuth, refuse it as the wrong header.
    fn resolve_gateway_token(&self, gateway_id: &str, token: &str) -> Result<Arc<Principal>, AuthError> {
        let _ = (gateway_id, token);
        Err(AuthError::WrongHeader)
    }
}

/// The authentication filter.
pub struct Authenticate {
    resolver: Arc<dyn CredentialResolver>,
}

impl Authenticate {
    pub fn new(resolver: Arc<dyn CredentialResolver>) -> Self {
        Authenticate { resolver }
    }
}

/// Extracts the credential of a management request: Bearer header first, then `?api_key=`.
pub fn management_credential<'a>(req: &RequestView<'a>) -> Result<&'a str, AuthError> {
    if let Some(value) = req.headers.get(http::header::AUTHORIZATION) {
        return bearer_value(value);
    }
    if let Some(query) = req.query {
        for pair in query.split('&') {
            if let Some(v) = pair.strip_prefix("api_key=") {
                return if v.is_empty() { Err(AuthError::Malformed) } else { Ok(v) };
            }
        }
    }
    Err(AuthError::Missing)
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer_value(value: &http::HeaderValue) -> Result<&str, AuthError> {
    let value = value.to_str().map_err(|_| AuthError::Malformed)?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::Malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Malformed);
    }
    let token = token.trim();
    if token.is_empty() {
        Err(AuthError::Malformed)
    } else {
        Ok(token)
    }
}

/// Extracts the credential of a gateway request: `X-API-Key` (a Bearer header is the resolver's
/// to accept or refuse, see [`resolve_credential`]).
pub fn gateway_credential<'a>(req: &RequestView<'a>) -> Result<&'a str, AuthError> {
    match req.headers.get("x-api-key") {
        Some(v) => v.to_str().map_err(|_| AuthError::Malformed).map(str::trim),
        None if req.headers.contains_key(http::header::AUTHORIZATION) => Err(AuthError::WrongHeader),
        None => Err(AuthError::Missing),
    }
}

/// Finds the request's credential and resolves it: what both the IP allowlist (which needs the
/// organisation) and authentication do, in one place so that they cannot disagree.
///
/// `Ok(None)` means the route takes no credential. Gateway routes accept `ag_` keys only; a
/// gateway access key is valid on its own gateway's endpoint alone.
pub fn resolve_credential(
    resolver: &dyn CredentialResolver,
    req: &RequestView<'_>,
) -> Result<Option<Arc<Principal>>, AuthError> {
    let principal = match req.route {
        RouteClass::Public | RouteClass::Identity => return Ok(None),
        RouteClass::Management => {
            let credential = management_credential(req)?;
            if credential.starts_with("ag_") {
                resolver.resolve_key(credential)?
            } else {
                resolver.resolve_token(credential)?
            }
        }
        RouteClass::Gateway => match gateway_credential(req) {
            Ok(key) if key.starts_with("ag_") => resolver.resolve_key(key)?,
            Ok(_) => return Err(AuthError::Malformed),
            // No X-API-Key but an Authorization header: an access token, if this gateway takes them.
            Err(AuthError::WrongHeader) => {
                let token = req.headers.get(http::header::AUTHORIZATION).ok_or(AuthError::WrongHeader)?;
                resolver.resolve_gateway_token(req.gateway_id.unwrap_or_default(), bearer_value(token)?)?
            }
            Err(e) => return Err(e),
        },
    };
    // Credentials made for one gateway are valid on that gateway's endpoint alone.
    if let crate::CredentialKind::GatewayKey { gateway_id } | crate::CredentialKind::GatewayToken { gateway_id } =
        &principal.credential
    {
        if req.route != RouteClass::Gateway || req.gateway_id != Some(gateway_id.as_str()) {
            return Err(AuthError::WrongGateway);
        }
    }
    Ok(Some(principal))
}

impl RequestFilter for Authenticate {
    fn name(&self) -> &'static str {
        "authentication"
    }

    /// Refuses with 401 unless the credential resolves. When an earlier filter (the IP
    /// allowlist) already resolved it, its result is reused rather than resolved twice.
    fn filter(&self, req: &RequestView<'_>, ctx: &mut FilterContext) -> Result<(), Rejection> {
        if ctx.principal.is_some() || req.route == RouteClass::Public {
            return Ok(());
        }
        if let Some(e) = ctx.credential_error {
            return Err(e.into());
        }
        match resolve_credential(self.resolver.as_ref(), req) {
            Ok(principal) => {
                ctx.principal = principal;
                Ok(())
            }
            Err(e) => {
                ctx.credential_error = Some(e);
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{bearer, principal, request, FakeResolver};

    fn resolver() -> Arc<FakeResolver> {
        let mut gw = principal("gk", "o1");
        gw.credential = crate::CredentialKind::GatewayKey { gateway_id: "g1".into() };
        Arc::new(FakeResolver::with([("ag_acct", principal("k1", "o1")), ("ag_gw", gw)]))
    }

    fn run(headers: &http::HeaderMap, route: RouteClass) -> Result<FilterContext, Rejection> {
        let mut ctx = FilterContext::default();
        Authenticate::new(resolver()).filter(&request(headers, "10.0.0.1", route), &mut ctx)?;
        Ok(ctx)
    }

    #[test]
    fn management_takes_bearer_or_query_and_refuses_the_rest() {
        assert!(run(&bearer("ag_acct"), RouteClass::Management).is_ok());
        assert_eq!(run(&bearer("ag_bad"), RouteClass::Management).unwrap_err().status, 401);
        assert_eq!(
            run(&bearer("eyJ.jwt"), RouteClass::Management).unwrap_err().message,
            "malformed credentials",
            "tokens are refused unless the resolver supports them"
        );
        let none = http::HeaderMap::new();
        assert_eq!(run(&none, RouteClass::Management).unwrap_err().message, "missing credentials");
        let mut req = request(&none, "10.0.0.1", RouteClass::Management);
        req.query = Some("page=2&api_key=ag_acct");
        let mut ctx = FilterContext::default();
        Authenticate::new(resolver()).filter(&req, &mut ctx).unwrap();
        assert_eq!(ctx.principal.unwrap().key_id, "k1");
    }

    #[test]
    fn gateway_takes_x_api_key_only_and_gateway_keys_only_on_their_gateway() {
        let r = run(&bearer("ag_acct"), RouteClass::Gateway).unwrap_err();
        assert_eq!(r.message, AuthError::WrongHeader.to_string());
        let mut h = http::HeaderMap::new();
        h.insert("x-api-key", "ag_gw".parse().unwrap());
        assert!(run(&h, RouteClass::Gateway).is_ok(), "request() targets gateway g1");
        let r = run(&bearer("ag_gw"), RouteClass::Management).unwrap_err();
        assert_eq!(r.message, AuthError::WrongGateway.to_string());
    }

    #[test]
    fn a_token_short_of_scope_is_forbidden_not_unauthenticated() {
        let r: Rejection = AuthError::InsufficientScope.into();
        assert_eq!((r.status, r.code), (403, "INSUFFICIENT_SCOPE"));
        let r: Rejection = AuthError::InvalidToken.into();
        assert_eq!((r.status, r.code), (401, "UNAUTHORIZED"));
    }

    /// Takes the access token `good` for gateway g1, as a gateway with OAuth would.
    struct TokenResolver;

    impl CredentialResolver for TokenResolver {
        fn resolve_key(&self, _: &str) -> Result<Arc<Principal>, AuthError> {
            Err(AuthError::Unknown)
        }

        fn resolve_gateway_token(&self, gateway_id: &str, token: &str) -> Result<Arc<Principal>, AuthError> {
            if token != "good" {
                return Err(AuthError::InvalidToken);
            }
            let mut p = principal("oauth:alice", "o1");
            p.credential = crate::CredentialKind::GatewayToken { gateway_id: gateway_id.into() };
            Ok(Arc::new(p))
        }
    }

    #[test]
    fn a_bearer_token_on_a_gateway_is_the_resolvers_to_accept_for_that_gateway_alone() {
        let resolve =
            |headers: &http::HeaderMap, route| resolve_credential(&TokenResolver, &request(headers, "10.0.0.1", route));
        let p = resolve(&bearer("good"), RouteClass::Gateway).unwrap().unwrap();
        assert_eq!(p.credential, crate::CredentialKind::GatewayToken { gateway_id: "g1".into() });
        assert_eq!(resolve(&bearer("bad"), RouteClass::Gateway).unwrap_err(), AuthError::InvalidToken);
        let mut basic = http::HeaderMap::new();
        basic.insert(http::header::AUTHORIZATION, "Basic Zm9vOmJhcg==".parse().unwrap());
        assert_eq!(resolve(&basic, RouteClass::Gateway).unwrap_err(), AuthError::Malformed);
        // A resolver without OAuth keeps the specification's answer.
        let plain = resolve_credential(resolver().as_ref(), &request(&bearer("good"), "10.0.0.1", RouteClass::Gateway));
        assert_eq!(plain.unwrap_err(), AuthError::WrongHeader);
    }

    #[test]
    fn an_earlier_resolution_is_reused() {
        let none = http::HeaderMap::new();
        let mut ctx = FilterContext { credential_error: Some(AuthError::Revoked), ..Default::default() };
        let f = Authenticate::new(resolver());
        let r = f.filter(&request(&none, "10.0.0.1", RouteClass::Management), &mut ctx);
        assert_eq!(r.unwrap_err().message, "API key has been revoked");
        let mut ctx = FilterContext::default();
        f.filter(&request(&none, "10.0.0.1", RouteClass::Public), &mut ctx).unwrap();
    }
}
