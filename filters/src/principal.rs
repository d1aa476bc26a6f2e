//! The authenticated caller, as every later step sees it.

use crate::scope::{Role, ScopeSet};

/// How the caller proved who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialKind {
    /// An account API key (`ag_...`) of a user.
    ApiKey,
    /// A gateway access key, returned when the gateway was created and valid for it alone.
    GatewayKey { gateway_id: String },
    /// A key belonging to a service account.
    ServiceAccount { account_id: String },
    /// A signed RS256 JWT.
    Jwt { jti: Option<String> },
    /// An OAuth access token issued for one gateway's resource, valid for it alone.
    GatewayToken { gateway_id: String },
    /// An access token of toolgate's own authorization server, held by a third-party client
    /// acting for the user.
    OAuthToken { client_id: String },
    /// A signed-in user's web session, acting through the console (`session_id` is its public
    /// `ws_...` id, never its token).
    WebSession { session_id: String },
}

impl CredentialKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            CredentialKind::ApiKey => "api_key",
            CredentialKind::GatewayKey { .. } => "gateway_key",
            CredentialKind::ServiceAccount { .. } => "service_account",
            CredentialKind::Jwt { .. } => "jwt",
            CredentialKind::GatewayToken { .. } | CredentialKind::OAuthToken { .. } => "oauth_token",
            CredentialKind::WebSession { .. } => "web_session",
        }
    }
}

/// The caller of one request. Built by the server's credential resolver and shared (`Arc`) so
/// that authenticating a request copies nothing.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The key id (or JWT `jti`/subject for tokens); identifies the rate-limit buckets.
    pub key_id: String,
    pub user_id: String,
    pub org_id: String,
    pub role: Role,
    pub credential: CredentialKind,
    /// Effective scopes: the key's scopes within the role (Decision 8).
    pub scopes: ScopeSet,
    /// The organisation's tier name (`free`, `starter`, `professional`, `enterprise`, ...).
    pub tier: String,
    /// Multiplies the tier's limits (service accounts default to 5).
    pub rate_limit_multiplier: f64,
    /// The key skips the organisation's IP allowlist.
    pub bypass_ip_whitelist: bool,
    pub expires_at: Option<i64>,
}
