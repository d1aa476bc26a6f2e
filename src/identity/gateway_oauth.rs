//! OAuth for MCP clients, on the gateways that opt in (`configuration.auth: oauth`, Decision 17).
//!
//! Such a gateway is an OAuth protected resource (RFC 9728) whose identifier is its endpoint
//! URL. It takes, beside `X-API-Key`, `Authorization: Bearer` access tokens of toolgate's own
//! authorization server granted for that resource (`oauth_server`, resolved by `credentials`), and
//! those that the configured issuer (`gateway_oauth.issuer`) signed as JWTs (RFC 9068) for it:
//! `aud` names the endpoint (RFC 8707), so a token for one gateway is refused by every other. A 401 there says
//! where the gateway's metadata is (`WWW-Authenticate: Bearer resource_metadata=...`), which is
//! how an MCP client finds the issuer, registers and signs in (the MCP authorization
//! specification). A client's token stays at the gateway: apps are
//! called with their own credentials.
//!
//! The caller is the token's subject within the gateway's organisation (`oauth:<gateway>:<sub>`:
//! its own rate-limit buckets and MCP sessions), valid on that gateway alone, with the
//! organisation's tier and IP allowlist.

use crate::config::GatewayOAuthConfig;
use crate::data::model::{Gateway, Organization};
use serde_json::{json, Value};
use toolgate_filters::auth::AuthError;
use toolgate_filters::{CredentialKind, Principal, Role, ScopeSet};

/// Longest token subject taken into a caller's id.
const MAX_SUBJECT_BYTES: usize = 255;

/// The gateway's resource identifier: its MCP endpoint.
pub(crate) fn resource(public_url: &str, gateway_id: &str) -> String {
    format!("{public_url}/gateway/{gateway_id}/mcp")
}

/// Where the gateway's protected-resource metadata is served (RFC 9728 section 3.1: the
/// well-known part before the resource's path).
pub(crate) fn metadata_url(public_url: &str, gateway_id: &str) -> String {
    format!("{public_url}/.well-known/oauth-protected-resource/gateway/{gateway_id}/mcp")
}

/// The gateway's protected-resource metadata (RFC 9728 section 2). Public, so it says nothing of
/// the gateway beyond its address (not its name, which is the tenant's). The authorization
/// servers: the configured issuer first, when there is one, then toolgate's own (whose issuer
/// is `public_url`).
pub(crate) fn metadata(config: Option<&GatewayOAuthConfig>, public_url: &str, gateway: &Gateway) -> Value {
    let mut servers: Vec<&str> = config.map(|c| c.issuer.as_str()).into_iter().collect();
    servers.push(public_url);
    let mut doc = json!({
        "resource": resource(public_url, &gateway.id),
        "authorization_servers": servers,
        "bearer_methods_supported": ["header"],
    });
    if let Some(c) = config.filter(|c| !c.scopes.is_empty()) {
        doc["scopes_supported"] = json!(c.scopes);
    }
    doc
}

/// The `WWW-Authenticate` value of a 401 from the gateway (RFC 6750 section 3, RFC 9728 section
/// 5.1): where the metadata is, the scopes to ask for, and why a presented token was refused.
pub(crate) fn challenge(
    config: Option<&GatewayOAuthConfig>,
    public_url: &str,
    gateway_id: &str,
    refused: Option<AuthError>,
) -> String {
    let mut value = format!("Bearer resource_metadata=\"{}\"", metadata_url(public_url, gateway_id));
    if let Some(c) = config.filter(|c| !c.scopes.is_empty()) {
        value.push_str(&format!(", scope=\"{}\"", c.scopes.join(" ")));
    }
    let error = match refused {
        Some(AuthError::InvalidToken) => {
            Some(("invalid_token", "the access token is invalid, expired or not for this gateway"))
        }
        Some(AuthError::InsufficientScope) => {
            Some(("insufficient_scope", "the access token lacks a scope this gateway requires"))
        }
        Some(AuthError::Malformed) => Some(("invalid_request", "the Authorization header is not a Bearer token")),
        _ => None,
    };
    if let Some((code, description)) = error {
        value.push_str(&format!(", error=\"{code}\", error_description=\"{description}\""));
    }
    value
}

/// The caller a token presents at `gateway`, if the token is the issuer's, for this gateway,
/// live, and carries every required scope.
pub(crate) fn principal(
    config: &GatewayOAuthConfig,
    public_url: &str,
    gateway: &Gateway,
    org: &Organization,
    token: &str,
) -> Result<Principal, AuthError> {
    let claims = config
        .verifier
        .verify_for_audience(token, &resource(public_url, &gateway.id))
        .map_err(|_| AuthError::InvalidToken)?;
    if claims.sub.is_empty() || claims.sub.len() > MAX_SUBJECT_BYTES || claims.sub.chars().any(char::is_control) {
        return Err(AuthError::InvalidToken);
    }
    let granted = claims.scope.as_deref().unwrap_or("");
    if !config.scopes.iter().all(|s| granted.split(' ').any(|g| g == s)) {
        return Err(AuthError::InsufficientScope);
    }
    Ok(Principal {
        key_id: format!("oauth:{}:{}", gateway.id, claims.sub),
        user_id: format!("oauth:{}", claims.sub),
        org_id: org.id.clone(),
        role: Role::Viewer,
        credential: CredentialKind::GatewayToken { gateway_id: gateway.id.clone() },
        // None of the management API's: the token is for this gateway's endpoint alone.
        scopes: ScopeSet::EMPTY,
        tier: org.tier.clone(),
        rate_limit_multiplier: 1.0,
        bypass_ip_whitelist: false,
        expires_at: Some(claims.exp),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(scopes: &[&str]) -> GatewayOAuthConfig {
        let yaml = format!(
            "environment: development\ngateway_oauth:\n  issuer: http://127.0.0.1:9/\n  jwks_url: http://127.0.0.1:9/jwks\n  scopes: {scopes:?}\n"
        );
        crate::config::Config::parse(&yaml).unwrap().gateway_oauth.unwrap()
    }

    #[test]
    fn the_challenge_names_the_metadata_the_scopes_and_why_a_token_was_refused() {
        let c = config(&["mcp", "tools"]);
        assert_eq!(
            challenge(Some(&c), "https://gw.example", "gw_1", None),
            "Bearer resource_metadata=\"https://gw.example/.well-known/oauth-protected-resource/gateway/gw_1/mcp\", scope=\"mcp tools\""
        );
        let refused = challenge(Some(&config(&[])), "https://gw.example", "gw_1", Some(AuthError::InvalidToken));
        assert!(refused.ends_with(", error=\"invalid_token\", error_description=\"the access token is invalid, expired or not for this gateway\""), "{refused}");
        assert!(!refused.contains("scope="), "{refused}");
    }

    #[test]
    fn the_metadata_is_about_the_gateways_endpoint() {
        let doc = metadata(Some(&config(&["mcp"])), "https://gw.example", &Gateway::for_tests("gw_1", "org_1"));
        assert_eq!(
            doc,
            json!({
                "resource": "https://gw.example/gateway/gw_1/mcp",
                "authorization_servers": ["http://127.0.0.1:9/", "https://gw.example"],
                "bearer_methods_supported": ["header"],
                "scopes_supported": ["mcp"],
            })
        );
    }

    #[test]
    fn a_token_that_is_not_a_signed_jwt_of_the_issuer_is_refused() {
        let gw = Gateway::for_tests("gw_1", "org_1");
        let org: Organization = serde_json::from_value(json!({
            "id": "org_1", "name": "Org", "tier": "free", "created_at": "2026-11-26T00:00:00Z"
        }))
        .unwrap();
        for token in ["", "opaque-token", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0."] {
            assert_eq!(
                principal(&config(&[]), "https://gw.example", &gw, &org, token).unwrap_err(),
                AuthError::InvalidToken
            );
        }
    }
}
