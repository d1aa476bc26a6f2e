//! Credential resolution: who a presented API key, JWT or OAuth access token belongs to. The
//! filter chains' [`Authenticate`](toolgate_filters::auth::Authenticate) asks [`Credentials`];
//! it reads the records the state holds in memory (keys by hash, users, organisations, grants),
//! so a request never waits for the store, and keeps each key's resolved caller in the state's
//! cache, which the state clears whenever a key, user or organisation changes.
//!
//! Here rather than in `data/state` because resolving a token is the identity area's decision
//! (the shape of the authorization server's tokens, the gateways' OAuth audience); the state
//! only stores what it reads.

use crate::base::secrets;
use crate::data::model::{ApiKey, Gateway, OAuthGrant, Organization, User};
use crate::data::state::State;
use chrono::Utc;
use std::sync::Arc;
use toolgate_filters::auth::{AuthError, CredentialResolver};
use toolgate_filters::{CredentialKind, Principal, Role, ScopeSet};

/// The resolver the filter chains are given (one per process, shared by every chain).
pub(crate) struct Credentials {
    state: Arc<State>,
}

impl Credentials {
    pub(crate) fn new(state: Arc<State>) -> Credentials {
        Credentials { state }
    }

    fn build_principal(&self, key: &ApiKey) -> Result<Principal, AuthError> {
        let user = self.state.user(&key.user_id).ok_or(AuthError::Unknown)?;
        let org = self.state.org(&key.org_id).ok_or(AuthError::Unknown)?;
        // A service account's keys belong to its creator, so they act within that user's role.
        let mut account_multiplier = None;
        if let Some(a) = &key.service_account_id {
            let a = self.state.service_account(a).ok_or(AuthError::Revoked)?;
            account_multiplier = Some(a.rate_limit_multiplier);
        }
        let own = ScopeSet::parse(key.scopes.iter().map(String::as_str)).unwrap_or(ScopeSet::EMPTY);
        let credential = match (&key.gateway_id, &key.service_account_id) {
            (Some(g), _) => CredentialKind::GatewayKey { gateway_id: g.clone() },
            (None, Some(a)) => CredentialKind::ServiceAccount { account_id: a.clone() },
            (None, None) => CredentialKind::ApiKey,
        };
        let mut p = user_principal(&user, &org, key.id.clone(), credential, own, key.ends_at().map(|t| t.timestamp()));
        p.rate_limit_multiplier = account_multiplier.unwrap_or(1.0);
        p.bypass_ip_whitelist = key.bypass_ip_whitelist;
        Ok(p)
    }

    /// An access token of toolgate's authorization server: its grant live, the token its
    /// current one (digests compared in constant time), unexpired; the caller is the user who
    /// granted it, with the granted scopes within the user's role now.
    fn resolve_access_token(&self, token: &str, grant_id: &str) -> Result<Arc<Principal>, AuthError> {
        let grant = self.live_grant(token, grant_id)?;
        if grant.resource.is_some() {
            // A gateway's token is for that gateway's endpoint alone.
            return Err(AuthError::InvalidToken);
        }
        let user = self.state.user(&grant.user_id).ok_or(AuthError::InvalidToken)?;
        let org = self.state.org(&grant.org_id).ok_or(AuthError::InvalidToken)?;
        if user.org_id != org.id {
            return Err(AuthError::InvalidToken);
        }
        let own = ScopeSet::parse(grant.scopes.iter().map(String::as_str)).map_err(|_| AuthError::InvalidToken)?;
        // Buckets and usage are per grant: a refreshed token keeps its limits.
        let credential = CredentialKind::OAuthToken { client_id: grant.client_id.clone() };
        let key_id = format!("oauth:{}", grant.id);
        Ok(Arc::new(user_principal(&user, &org, key_id, credential, own, Some(grant.access_expires_ms / 1000))))
    }

    /// The grant of access token `token` (whose grant id is `grant_id`): live, the token its
    /// current one (digests compared in constant time) and unexpired.
    fn live_grant(&self, token: &str, grant_id: &str) -> Result<Arc<OAuthGrant>, AuthError> {
        let grant = self.state.grant(grant_id).ok_or(AuthError::InvalidToken)?;
        let presented = secrets::hash_key_bytes(token);
        if secrets::hash_from_hex(&grant.access_hash).is_none_or(|stored| !secrets::digests_equal(&stored, &presented))
        {
            return Err(AuthError::InvalidToken);
        }
        if grant.access_expires_ms <= crate::base::time::now_ms() {
            return Err(AuthError::InvalidToken);
        }
        Ok(grant)
    }

    /// An access token of toolgate's authorization server at a gateway's endpoint: its grant is
    /// for this gateway's resource. The caller is the user who granted it, with none of the
    /// management API's scopes (the token is for this endpoint alone).
    fn resolve_gateway_access_token(
        &self,
        token: &str,
        grant_id: &str,
        gateway: &Gateway,
        org: &Organization,
    ) -> Result<Arc<Principal>, AuthError> {
        let grant = self.live_grant(token, grant_id)?;
        let resource = super::gateway_oauth::resource(&self.state.config().server.public_url, &gateway.id);
        if grant.resource.as_deref() != Some(resource.as_str()) || grant.org_id != org.id {
            return Err(AuthError::InvalidToken);
        }
        let user = self.state.user(&grant.user_id).ok_or(AuthError::InvalidToken)?;
        let credential = CredentialKind::GatewayToken { gateway_id: gateway.id.clone() };
        let key_id = format!("oauth:{}", grant.id);
        let expires = Some(grant.access_expires_ms / 1000);
        Ok(Arc::new(user_principal(&user, org, key_id, credential, ScopeSet::EMPTY, expires)))
    }
}

impl CredentialResolver for Credentials {
    fn resolve_key(&self, presented: &str) -> Result<Arc<Principal>, AuthError> {
        // Looked up by SHA-256, so no plaintext is ever compared; the final equality of the
        // digests is constant-time.
        let hash = secrets::hash_key_bytes(presented);
        let (stored, key) = self.state.key_by_hash(&hash).ok_or(AuthError::Unknown)?;
        if !secrets::digests_equal(&stored, &hash) {
            return Err(AuthError::Unknown);
        }
        if let Some(reason) = key.unusable(Utc::now()) {
            return Err(reason);
        }
        if let Some(p) = self.state.cached_principal(&key.id) {
            return Ok(p);
        }
        let p = Arc::new(self.build_principal(&key)?);
        self.state.cache_principal(&key.id, p.clone());
        Ok(p)
    }

    /// A JWT: `sub` is a user, `scopes` its scopes within the user's role, `jti` recorded.
    fn resolve_gateway_token(&self, gateway_id: &str, token: &str) -> Result<Arc<Principal>, AuthError> {
        // A gateway that does not take tokens (or does not exist) answers as the specification
        // says of every Bearer header on the gateway route.
        let gateway = self.state.oauth_gateway(gateway_id).ok_or(AuthError::WrongHeader)?;
        let org = self.state.org(&gateway.org_id).ok_or(AuthError::InvalidToken)?;
        if let Some(grant_id) = super::oauth_server::access_token_grant(token) {
            return self.resolve_gateway_access_token(token, grant_id, &gateway, &org);
        }
        let config = self.state.config();
        let oauth = config.gateway_oauth.as_ref().ok_or(AuthError::InvalidToken)?;
        super::gateway_oauth::principal(oauth, &config.server.public_url, &gateway, &org, token).map(Arc::new)
    }

    fn resolve_token(&self, token: &str) -> Result<Arc<Principal>, AuthError> {
        if let Some(token_grant) = super::oauth_server::access_token_grant(token) {
            return self.resolve_access_token(token, token_grant);
        }
        let verifier = self.state.jwt.load_full().ok_or(AuthError::Malformed)?;
        let claims = verifier.verify(token)?;
        let user = self.state.user(&claims.sub).ok_or(AuthError::Unknown)?;
        let org = self.state.org(&user.org_id).ok_or(AuthError::Unknown)?;
        let own = ScopeSet::parse(claims.scopes.iter().map(String::as_str)).map_err(|_| AuthError::Unknown)?;
        // Buckets and usage are per subject, so a fresh token does not reset the limits.
        let key_id = format!("jwt:{}", user.id);
        Ok(Arc::new(user_principal(
            &user,
            &org,
            key_id,
            CredentialKind::Jwt { jti: claims.jti },
            own,
            Some(claims.exp),
        )))
    }
}

/// The caller a web session acts as in the console: its user with every scope of the user's
/// role (a password and its second factor sign in with the whole role), the organisation's
/// tier, its buckets and audit entries under `web:<ws_ id>`. `None` when the user or the
/// organisation is gone.
pub(crate) fn web_session_principal(state: &State, session: &super::signin::WebSession) -> Option<Principal> {
    let user = state.user(&session.user_id)?;
    let org = state.org(&user.org_id)?;
    if user.org_id != session.org_id {
        return None;
    }
    let credential = CredentialKind::WebSession { session_id: session.id.clone() };
    let key_id = format!("web:{}", session.id);
    Some(user_principal(&user, &org, key_id, credential, ScopeSet::ALL, None))
}

/// The caller of a credential that speaks for `user`: its own scopes within the user's role,
/// the organisation's tier, no multiplier and no allowlist bypass (a key sets its own).
fn user_principal(
    user: &User,
    org: &Organization,
    key_id: String,
    credential: CredentialKind,
    own: ScopeSet,
    expires_at: Option<i64>,
) -> Principal {
    let role = Role::parse(&user.role).unwrap_or(Role::Viewer);
    Principal {
        key_id,
        user_id: user.id.clone(),
        org_id: org.id.clone(),
        role,
        credential,
        scopes: own.intersect(role.allowed()),
        tier: org.tier.clone(),
        rate_limit_multiplier: 1.0,
        bypass_ip_whitelist: false,
        expires_at,
    }
}
