//! `/auth/verify`: what the presented key is.

use super::{ApiResult, Call, Reply};
use serde_json::json;

#[utoipa::path(get, path = "/v1/auth/verify", tag = "auth",
    responses((status = 200, description = "valid, key_id, user_id, scopes, expires_at", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn verify(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let expires_at = call.server.state.key(&who.key_id).and_then(|k| k.ends_at()).map(|t| super::iso(&t));
    Ok(Reply::ok(json!({
        "valid": true,
        "key_id": who.key_id,
        "user_id": who.user_id,
        "scopes": who.scopes.names(),
        "expires_at": expires_at,
    })))
}

#[utoipa::path(get, path = "/v1/auth/debug", tag = "auth",
    responses((status = 200, description = "what the server sees of the caller; never a secret", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn debug(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let s = call.server.limiter.status(who, call.ip_multiplier);
    let buckets: serde_json::Map<String, serde_json::Value> = s
        .buckets
        .iter()
        .map(|b| {
            (b.bucket.as_str().to_string(), json!({ "limit": b.limit, "remaining": b.remaining, "reset": b.reset }))
        })
        .collect();
    let (gateway_id, service_account_id, jti) = match &who.credential {
        toolgate_filters::CredentialKind::OAuthToken { .. } => (None, None, None),
        toolgate_filters::CredentialKind::GatewayKey { gateway_id }
        | toolgate_filters::CredentialKind::GatewayToken { gateway_id } => (Some(gateway_id.clone()), None, None),
        toolgate_filters::CredentialKind::ServiceAccount { account_id } => (None, Some(account_id.clone()), None),
        toolgate_filters::CredentialKind::Jwt { jti } => (None, None, jti.clone()),
        toolgate_filters::CredentialKind::ApiKey | toolgate_filters::CredentialKind::WebSession { .. } => {
            (None, None, None)
        }
    };
    Ok(Reply::ok(json!({
        "credential_type": who.credential.as_str(),
        "key_id": who.key_id,
        "gateway_id": gateway_id,
        "service_account_id": service_account_id,
        "jti": jti,
        "oauth_client_id": match &who.credential {
            toolgate_filters::CredentialKind::OAuthToken { client_id } => Some(client_id.as_str()),
            _ => None,
        },
        "user_id": who.user_id,
        "organization_id": who.org_id,
        "role": who.role.as_str(),
        "scopes": who.scopes.names(),
        "client_ip": call.client_ip.to_string(),
        "bypass_ip_whitelist": who.bypass_ip_whitelist,
        "tier": s.tier,
        "rate_limit_multiplier": who.rate_limit_multiplier,
        "ip_rate_limit_multiplier": call.ip_multiplier,
        "buckets": buckets,
        "mfa_enabled": call.server.mfa.is_active(&who.user_id).await?,
        "environment": call.server.state.config().environment.as_str(),
    })))
}
