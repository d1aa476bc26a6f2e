//! `/auth/mfa/*`: enrolment (authenticator app, e-mail or SMS), activation, disabling, an
//! owner's reset of another user's MFA, and the challenge answer that yields an MFA token.
//!
//! Enrolling, activating and disabling change how an account is protected, so they take a
//! credential holding everything the user's role allows (`Access::WholeRole`: `admin` for an
//! Owner or an Admin, a Developer's or a Viewer's `*`; the rule of setting a password, so every
//! role can turn MFA on while a leaked narrow key cannot turn it on and keep the seed) and, once
//! MFA is active, pass the MFA gate. Recovery: a backup code works wherever a code does; an owner resets a
//! user's MFA (`POST /auth/mfa/reset`, through the owner's own MFA gate); the operator's
//! `TOOLGATE_ADMIN_KEY` resets any user's MFA without a code.

use super::{ApiResult, Call, Reply};
use crate::edge::error::ApiError;
use crate::identity::mfa::{Caller, NewMethod, MFA_TTL};
use crate::outbound::courier::is_phone_number;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

/// How codes reach the user.
#[derive(Debug, Default, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum MfaMethod {
    /// An authenticator app (TOTP); the default.
    #[default]
    Totp,
    /// A code sent to the user's e-mail address (needs `smtp:`).
    Email,
    /// A code sent by text message to `phone_number` (needs `sms:`).
    Sms,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnrollMfa {
    #[serde(default)]
    pub method: MfaMethod,
    /// E.164, e.g. `+15551234567` (the `sms` method only).
    pub phone_number: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ActivateMfa {
    /// The six-digit code of the authenticator, or the one sent by e-mail or SMS.
    pub code: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerifyMfa {
    pub challenge_id: String,
    /// A current six-digit code, or an unused backup code.
    pub code: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResetMfa {
    /// The user whose MFA is turned off (same organisation).
    pub user_id: String,
}

/// The calling user, who answers for its own MFA; service-account keys have no MFA of their own.
fn caller<'c>(call: &'c Call<'_>) -> Result<Caller<'c>, ApiError> {
    let who = call.who()?;
    if matches!(who.credential, toolgate_filters::CredentialKind::ServiceAccount { .. })
        || call.server.state.user(&who.user_id).is_none()
    {
        return Err(ApiError::Forbidden("MFA belongs to users; this credential has none".into()));
    }
    Ok(Caller { user_id: &who.user_id, key_id: &who.key_id })
}

fn user_id(call: &Call<'_>) -> Result<String, ApiError> {
    caller(call).map(|c| c.user_id.to_string())
}

#[utoipa::path(post, path = "/v1/auth/mfa/enroll", tag = "auth", request_body(content = EnrollMfa, description = "optional: the authenticator app when absent"),
    responses((status = 200, description = "method, backup_codes (shown once), and secret and otpauth_uri (totp) or sent_to (email, sms)", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 409, body = crate::api::envelope::ErrorEnvelope), (status = 429, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn enroll(call: &Call<'_>) -> ApiResult {
    let user = user_id(call)?;
    let body: EnrollMfa = call.json()?;
    let courier = &call.server.courier;
    let email = call.server.state.user(&user).map(|u| u.email.clone()).unwrap_or_default();
    let method = match body.method {
        MfaMethod::Totp if body.phone_number.is_some() => {
            return Err(ApiError::validation("phone_number", "only the sms method takes a phone number"))
        }
        MfaMethod::Totp => NewMethod::Totp { account: if email.is_empty() { user.clone() } else { email } },
        MfaMethod::Email if body.phone_number.is_some() => {
            return Err(ApiError::validation("phone_number", "only the sms method takes a phone number"))
        }
        MfaMethod::Email if !courier.can_email() => {
            return Err(ApiError::validation(
                "method",
                "e-mail codes need an SMTP server (`smtp:` in the configuration)",
            ))
        }
        MfaMethod::Email if email.parse::<lettre::message::Mailbox>().is_err() => {
            return Err(ApiError::validation("method", "this user has no e-mail address to send codes to"))
        }
        MfaMethod::Email => NewMethod::Email { address: email },
        MfaMethod::Sms => {
            let phone_number = body.phone_number.filter(|p| is_phone_number(p)).ok_or_else(|| {
                ApiError::validation("phone_number", "the sms method needs an E.164 number, e.g. +15551234567")
            })?;
            if !courier.can_text() {
                return Err(ApiError::validation(
                    "method",
                    "SMS codes need an SMS provider (`sms:` in the configuration)",
                ));
            }
            NewMethod::Sms { phone_number }
        }
    };
    // While MFA is active, enrolment is refused (409) without changing anything: disable first.
    let e = call.server.mfa.enroll(&call.server.state.sealer, &user, method).await?;
    let mut reply = json!({ "method": e.method.as_str(), "backup_codes": e.backup_codes, "active": false });
    if let Some((secret, uri)) = e.totp {
        reply["secret"] = json!(secret);
        reply["otpauth_uri"] = json!(uri);
    }
    if let Some(to) = e.sent_to {
        reply["sent_to"] = json!(to);
    }
    Ok(Reply::ok(reply))
}

#[utoipa::path(post, path = "/v1/auth/mfa/activate", tag = "auth", request_body = ActivateMfa,
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 409, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn activate(call: &Call<'_>) -> ApiResult {
    let who = caller(call)?;
    let body: ActivateMfa = call.json()?;
    call.server.mfa.activate(&call.server.state.sealer, who, body.code.trim()).await?;
    Ok(Reply::ok(json!({ "active": true })))
}

#[utoipa::path(post, path = "/v1/auth/mfa/verify", tag = "auth", request_body = VerifyMfa,
    responses((status = 200, description = "mfa_token and expires_in (seconds)", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn verify(call: &Call<'_>) -> ApiResult {
    let who = caller(call)?;
    let body: VerifyMfa = call.json()?;
    let token = call.server.mfa.verify(&call.server.state.sealer, who, &body.challenge_id, body.code.trim()).await?;
    Ok(Reply::ok(json!({ "mfa_token": token, "expires_in": MFA_TTL.as_secs() })))
}

/// The MFA gate of protected actions (Decision 9): deleting a gateway, revoking or rotating a
/// key, changing account security.
pub(crate) async fn gate(call: &Call<'_>) -> Result<(), ApiError> {
    let who = call.who()?;
    let header = call.headers.get("x-mfa-token").and_then(|v| v.to_str().ok());
    let caller = Caller { user_id: &who.user_id, key_id: &who.key_id };
    call.server.mfa.check_gate(&call.server.state.sealer, caller, header).await
}

#[utoipa::path(delete, path = "/v1/auth/mfa", tag = "auth",
    responses((status = 200, body = crate::api::envelope::MessageEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope),
              (status = 429, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn disable(call: &Call<'_>) -> ApiResult {
    let user = user_id(call)?;
    gate(call).await?;
    if !call.server.mfa.remove(&user).await? {
        return Err(ApiError::NotFound("MFA enrolment"));
    }
    Ok(Reply::message("MFA disabled"))
}

#[utoipa::path(post, path = "/v1/auth/mfa/reset", tag = "auth", request_body = ResetMfa,
    responses((status = 200, body = crate::api::envelope::MessageEnvelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope), (status = 429, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn reset(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let body: ResetMfa = call.json()?;
    let state = &call.server.state;
    let operator = state.operator_key_id.get().is_some_and(|id| *id == who.key_id);
    if !operator && who.role != toolgate_filters::Role::Owner {
        return Err(ApiError::Forbidden("only an owner resets another user's MFA".into()));
    }
    // Another organisation's user is not found, unless the operator asks.
    let target =
        state.user(&body.user_id).filter(|u| operator || u.org_id == who.org_id).ok_or(ApiError::NotFound("user"))?;
    if !operator {
        gate(call).await?;
    }
    if !call.server.mfa.remove(&target.id).await? {
        return Err(ApiError::NotFound("MFA enrolment"));
    }
    tracing::warn!(user = target.id, by = who.key_id, operator, "MFA reset");
    Ok(Reply::message(format!("MFA of user {} reset", target.id)))
}
