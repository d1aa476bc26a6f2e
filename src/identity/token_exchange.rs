//! OAuth 2.0 Token Exchange (RFC 8693) toward the apps that opt in (`oauth.token_exchange`):
//! a caller's own token (a JWT of a configured issuer, or an access token of toolgate's own
//! authorization server) is exchanged at the app's authorization server for a token whose
//! audience is the app, so that the app is called as that caller without a consent step.
//!
//! This module decides which credentials can be exchanged and as what ([`subject_of`]), makes
//! the request ([`exchange`]) and names the cache key ([`cache_key`]); the cache of exchanged
//! tokens and the upstreams built with them are the MCP side's (`mcp/apps/exchanged.rs`).
//!
//! Decisions: the request is RFC 8693 section 2.1's (`grant_type`, `subject_token`,
//! `subject_token_type`, `resource` per RFC 8707, `audience` when configured,
//! `requested_token_type` an access token, `scope` the app's OAuth scopes), with client
//! authentication as the app's OAuth client (`client_secret_post` unless
//! `client_secret_basic` is configured; a public client sends its `client_id` alone). The token
//! endpoint is the configured one, else the app's OAuth endpoints (configured or discovered, as
//! `app_oauth` finds them), reached with `app_oauth`'s client (no redirects, 10 s). The subject
//! token is never logged or kept: only its SHA-256, mixed with the app's id, names a cache entry.

use super::app_oauth::{self, AppOAuthError};
use crate::config::{AppConfig, SubjectTokenType, TokenClientAuth, TokenExchangeConfig};
use base64::Engine;
use sha2::{Digest, Sha256};
use toolgate_filters::CredentialKind;

/// RFC 8693 section 2.1's grant type.
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// What toolgate asks for: an access token to send as the app's bearer credential.
const REQUESTED_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// Why a caller's credential cannot be exchanged: it names no token of an issuer the app's
/// authorization server could trust (a key of toolgate's own), or one of a kind the app does not
/// take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unexchangeable {
    #[error("{0} cannot be exchanged for a token of the app: call with an OAuth access token or a JWT of a trusted issuer (sign in with OAuth)")]
    NotAToken(&'static str),
    #[error("the app exchanges only {allowed} tokens; this caller presented {presented}")]
    TypeNotTaken { presented: &'static str, allowed: String },
}

/// What a caller's credential is exchanged as: its kind (from the credential resolver) and the
/// token itself, or why it cannot be.
pub(crate) fn subject_of(
    credential: &CredentialKind,
    token: Option<&str>,
    settings: &TokenExchangeConfig,
) -> Result<SubjectTokenType, Unexchangeable> {
    let kind = match credential {
        CredentialKind::ApiKey => return Err(Unexchangeable::NotAToken("an API key")),
        CredentialKind::GatewayKey { .. } => return Err(Unexchangeable::NotAToken("a gateway key")),
        CredentialKind::ServiceAccount { .. } => return Err(Unexchangeable::NotAToken("a service account's key")),
        CredentialKind::WebSession { .. } => return Err(Unexchangeable::NotAToken("a console session")),
        CredentialKind::Jwt { .. } => SubjectTokenType::Jwt,
        CredentialKind::OAuthToken { .. } => SubjectTokenType::AccessToken,
        // At a gateway: toolgate's own access token, or the gateway issuer's JWT.
        CredentialKind::GatewayToken { .. } => match token.and_then(super::oauth_server::access_token_grant) {
            Some(_) => SubjectTokenType::AccessToken,
            None => SubjectTokenType::Jwt,
        },
    };
    if token.is_none() {
        return Err(Unexchangeable::NotAToken("a credential outside the Authorization header"));
    }
    if !settings.subject_token_types.contains(&kind) {
        let allowed: Vec<&str> = settings.subject_token_types.iter().map(|t| t.name()).collect();
        let presented = match kind {
            SubjectTokenType::AccessToken => "an access token",
            SubjectTokenType::Jwt => "a JWT",
        };
        return Err(Unexchangeable::TypeNotTaken { presented, allowed: allowed.join(" and ") });
    }
    Ok(kind)
}

/// The bearer token of an `Authorization` header, if the request has one.
pub(crate) fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The cache key of `subject`'s exchange for `app_id`: SHA-256 over both, so that a cached
/// token is found again by the same token for the same app alone, and the token is not kept.
pub(crate) fn cache_key(subject: &str, app_id: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(app_id.as_bytes());
    h.update([0]);
    h.update(subject.as_bytes());
    h.finalize().into()
}

/// A token the app's authorization server issued in exchange. Its `Debug` hides the token.
pub(crate) struct Issued {
    pub access_token: String,
    /// Seconds, as the provider said (RFC 8693 section 2.2.1 `expires_in`), if it said.
    pub expires_in: Option<u64>,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").field("access_token", &"…").field("expires_in", &self.expires_in).finish()
    }
}

/// Exchanges `subject` (of kind `kind`) at `app`'s authorization server for a token of the app.
pub(crate) async fn exchange(
    app: &AppConfig,
    allow_http: bool,
    subject: &str,
    kind: SubjectTokenType,
) -> Result<Issued, AppOAuthError> {
    let oauth = app.oauth.as_ref().ok_or_else(|| AppOAuthError::Discovery("the app has no oauth settings".into()))?;
    let settings = oauth
        .token_exchange
        .as_ref()
        .ok_or_else(|| AppOAuthError::Discovery("the app has no oauth.token_exchange".into()))?;
    let token_url = match &settings.token_endpoint {
        Some(url) => url.clone(),
        None => app_oauth::endpoints(app, allow_http).await?.token_url.clone(),
    };
    let scope = oauth.scopes.join(" ");
    let mut form: Vec<(&str, &str)> = vec![
        ("grant_type", GRANT_TYPE),
        ("subject_token", subject),
        ("subject_token_type", kind.urn()),
        ("requested_token_type", REQUESTED_TOKEN_TYPE),
        ("resource", &settings.resource),
    ];
    if let Some(audience) = &settings.audience {
        form.push(("audience", audience));
    }
    if !scope.is_empty() {
        form.push(("scope", &scope));
    }
    let mut request = app_oauth::http().post(&token_url);
    match (&oauth.client_secret, settings.client_auth) {
        (Some(secret), TokenClientAuth::ClientSecretBasic) => {
            request = request.header("Authorization", basic(&oauth.client_id, secret));
        }
        (secret, _) => {
            form.push(("client_id", &oauth.client_id));
            if let Some(secret) = secret {
                form.push(("client_secret", secret));
            }
        }
    }
    let (status, body) = app_oauth::send_form(request, &form).await?;
    issued(status, &body)
}

/// The token in a token endpoint's answer, or the provider's refusal as it named it.
fn issued(status: reqwest::StatusCode, body: &[u8]) -> Result<Issued, AppOAuthError> {
    let answer = app_oauth::token_answer(status, body)?;
    let access_token = answer.access_token;
    // RFC 8693 section 2.2.1: `N_A` when the token is not an access token; toolgate sends it as
    // a bearer credential, so it must be one.
    if !answer.token_type.as_deref().is_some_and(|t| t.eq_ignore_ascii_case("bearer")) {
        return Err(AppOAuthError::Malformed(format!("token_type {:?}, expected Bearer", answer.token_type)));
    }
    Ok(Issued { access_token, expires_in: answer.expires_in.and_then(|s| u64::try_from(s).ok()) })
}

/// RFC 6749 section 2.3.1: HTTP Basic of the form-encoded client id and secret.
fn basic(id: &str, secret: &str) -> String {
    let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = format!("{}:{}", enc(id), enc(secret));
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(types: &[SubjectTokenType]) -> TokenExchangeConfig {
        TokenExchangeConfig {
            audience: None,
            resource: "https://crm.example/mcp".into(),
            subject_token_types: types.to_vec(),
            token_endpoint: None,
            client_auth: TokenClientAuth::ClientSecretPost,
        }
    }

    #[test]
    fn keys_are_refused_and_tokens_are_exchanged_as_their_kind() {
        let both = settings(&[SubjectTokenType::AccessToken, SubjectTokenType::Jwt]);
        let gw = || CredentialKind::GatewayKey { gateway_id: "gw".into() };
        let e = subject_of(&gw(), None, &both).unwrap_err();
        assert!(e.to_string().starts_with("a gateway key cannot be exchanged"), "{e}");
        assert_eq!(
            subject_of(&CredentialKind::ApiKey, Some("ag_x"), &both),
            Err(Unexchangeable::NotAToken("an API key"))
        );
        let token = CredentialKind::GatewayToken { gateway_id: "gw".into() };
        assert_eq!(subject_of(&token, Some("eyJ.a.b"), &both), Ok(SubjectTokenType::Jwt));
        assert_eq!(subject_of(&token, Some("tga_grant1.secret"), &both), Ok(SubjectTokenType::AccessToken));
        let jwt_only = settings(&[SubjectTokenType::Jwt]);
        let oauth = CredentialKind::OAuthToken { client_id: "c".into() };
        let e = subject_of(&oauth, Some("t"), &jwt_only).unwrap_err().to_string();
        assert_eq!(e, "the app exchanges only jwt tokens; this caller presented an access token");
    }

    #[test]
    fn the_cache_key_differs_per_token_and_per_app() {
        assert_eq!(cache_key("t1", "crm"), cache_key("t1", "crm"));
        assert_ne!(cache_key("t1", "crm"), cache_key("t2", "crm"));
        assert_ne!(cache_key("t1", "crm"), cache_key("t1", "crm2"));
        assert_ne!(cache_key("a", "bc"), cache_key("ab", "c"), "the app id and the token are kept apart");
    }

    #[test]
    fn the_bearer_is_read_from_the_authorization_header() {
        let mut h = http::HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert("authorization", "bearer abc".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), None);
    }

    #[test]
    fn the_providers_answer_is_read_as_rfc_8693_says() {
        let ok = issued(reqwest::StatusCode::OK, br#"{"access_token":"x","token_type":"Bearer","expires_in":60,"issued_token_type":"urn:ietf:params:oauth:token-type:access_token"}"#).unwrap();
        assert_eq!((ok.access_token.as_str(), ok.expires_in), ("x", Some(60)));
        assert!(!format!("{ok:?}").contains("\"x\""), "the token is not in its Debug");
        let refused =
            issued(reqwest::StatusCode::BAD_REQUEST, br#"{"error":"invalid_target","error_description":"no"}"#);
        assert!(matches!(refused, Err(AppOAuthError::Refused { ref error, .. }) if error == "invalid_target"));
        let na = issued(reqwest::StatusCode::OK, br#"{"access_token":"x","token_type":"N_A"}"#).unwrap_err();
        assert!(na.to_string().contains("expected Bearer"), "{na}");
        assert!(issued(reqwest::StatusCode::BAD_GATEWAY, b"<html>").is_err());
        assert_eq!(
            basic("a b", "s:é"),
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("a+b:s%3A%C3%A9"))
        );
    }
}
