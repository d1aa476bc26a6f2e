//! `/auth/mfa/*`: TOTP enrolment, activation, and the challenge answer that yields an MFA token.

use super::{ApiResult, Call, Reply};
use crate::error::ApiError;
use crate::mfa::MFA_TTL;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivateMfa {
    /// A current six-digit code from the authenticator.
    pub code: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyMfa {
    pub challenge_id: String,
    /// A current six-digit code, or an unused backup code.
    pub code: String,
}

fn user_id(call: &Call<'_>) -> Result<String, ApiError> {
    let who = call.who()?;
    if !call.server.state.users.contains_key(&who.user_id) {
        return Err(ApiError::Forbidden("MFA belongs to users; this credential has none".into()));
    }
    Ok(who.user_id.clone())
}

#[utoipa::path(post, path = "/v1/auth/mfa/enroll", tag = "auth",
    responses((status = 200, description = "secret, otpauth_uri, backup_codes (shown once)", body = crate::api::openapi::Envelope),
              (status = 401, body = crate::api::openapi::ErrorEnvelope), (status = 403, body = crate::api::openapi::ErrorEnvelope),
              (status = 409, body = crate::api::openapi::ErrorEnvelope)))]
pub async fn enroll(call: &Call<'_>) -> ApiResult {
    let user = user_id(call)?;
    let account = call.server.state.users.get(&user).map(|u| u.email.clone()).unwrap_or_else(|| user.clone());
    let e = call.server.mfa.enroll(&call.server.state.sealer, &user, &account).await?;
    Ok(Reply::ok(
        json!({ "secret": e.secret, "otpauth_uri": e.otpauth_uri, "backup_codes": e.backup_codes, "active": false }),
    ))
}

#[utoipa::path(post, path = "/v1/auth/mfa/activate", tag = "auth", request_body = ActivateMfa,
    responses((status = 200, body = crate::api::openapi::Envelope), (status = 400, body = crate::api::openapi::ErrorEnvelope),
              (status = 401, body = crate::api::openapi::ErrorEnvelope), (status = 403, body = crate::api::openapi::ErrorEnvelope),
              (status = 409, body = crate::api::openapi::ErrorEnvelope)))]
pub async fn activate(call: &Call<'_>) -> ApiResult {
    let user = user_id(call)?;
    let body: ActivateMfa = call.json()?;
    call.server.mfa.activate(&call.server.state.sealer, &user, body.code.trim()).await?;
    Ok(Reply::ok(json!({ "active": true })))
}

#[utoipa::path(post, path = "/v1/auth/mfa/verify", tag = "auth", request_body = VerifyMfa,
    responses((status = 200, description = "mfa_token and expires_in (seconds)", body = crate::api::openapi::Envelope),
              (status = 400, body = crate::api::openapi::ErrorEnvelope), (status = 401, body = crate::api::openapi::ErrorEnvelope),
              (status = 403, body = crate::api::openapi::ErrorEnvelope)))]
pub async fn verify(call: &Call<'_>) -> ApiResult {
    let user = user_id(call)?;
    let body: VerifyMfa = call.json()?;
    let token = call.server.mfa.verify(&call.server.state.sealer, &user, &body.challenge_id, body.code.trim()).await?;
    Ok(Reply::ok(json!({ "mfa_token": token, "expires_in": MFA_TTL.as_secs() })))
}

/// The MFA gate of protected actions (Decision 9): deleting a gateway, revoking or rotating a
/// key, changing account security.
pub async fn require(call: &Call<'_>) -> Result<(), ApiError> {
    let who = call.who()?;
    let header = call.headers.get("x-mfa-token").and_then(|v| v.to_str().ok());
    call.server.mfa.require(&call.server.state.sealer, &who.user_id, header).await
}
