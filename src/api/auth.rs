//! `/auth/verify`: what the presented key is.

use super::{ApiResult, Call, Reply};
use serde_json::json;

#[utoipa::path(get, path = "/v1/auth/verify", tag = "auth",
    responses((status = 200, description = "valid, key_id, user_id, scopes, expires_at", body = crate::api::openapi::Envelope),
              (status = 401, body = crate::api::openapi::ErrorEnvelope)))]
pub async fn verify(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let expires_at = call.server.state.keys.get(&who.key_id).and_then(|k| k.expires_at).map(|t| super::iso(&t));
    Ok(Reply::ok(json!({
        "valid": true,
        "key_id": who.key_id,
        "user_id": who.user_id,
        "scopes": who.scopes.names(),
        "expires_at": expires_at,
    })))
}
