//! `/user`: the caller's own user.

use super::{iso, ApiResult, Call, Reply};
use crate::data::model::NotificationPreferences;
use crate::edge::error::ApiError;
use crate::edge::forms::display_name;
use crate::identity::signin::passwords;
use serde::Deserialize;
use serde_json::json;
use toolgate_filters::CredentialKind;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateUser {
    pub name: Option<String>,
    pub notification_preferences: Option<PreferencesPatch>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PreferencesPatch {
    pub email: Option<bool>,
    pub slack: Option<bool>,
}

fn view(call: &Call<'_>, user_id: &str) -> ApiResult {
    let state = &call.server.state;
    let user = state.user(user_id).ok_or(ApiError::NotFound("user"))?;
    let org = state.org(&user.org_id).ok_or(ApiError::NotFound("organization"))?;
    let role = toolgate_filters::Role::parse(&user.role).map_or("Viewer", |r| match r {
        toolgate_filters::Role::Owner => "Owner",
        toolgate_filters::Role::Admin => "Admin",
        toolgate_filters::Role::Developer => "Developer",
        toolgate_filters::Role::Viewer => "Viewer",
    });
    let NotificationPreferences { email, slack } = user.notification_preferences.clone();
    Ok(Reply::ok(json!({
        "id": user.id, "email": user.email, "name": user.name, "role": role,
        "organization": { "id": org.id, "name": org.name },
        "notification_preferences": { "email": email, "slack": slack },
        "created_at": iso(&user.created_at),
    })))
}

#[utoipa::path(get, path = "/v1/user", tag = "user",
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 401, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn get(call: &Call<'_>) -> ApiResult {
    view(call, &call.who()?.user_id)
}

#[utoipa::path(patch, path = "/v1/user", tag = "user", request_body = UpdateUser,
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn update(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let patch: UpdateUser = call.json()?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    let mut user = state.user(&who.user_id).map(|u| u.as_ref().clone()).ok_or(ApiError::NotFound("user"))?;
    if let Some(name) = patch.name {
        user.name = display_name("name", &name)?.to_string();
    }
    if let Some(p) = patch.notification_preferences {
        if let Some(e) = p.email {
            user.notification_preferences.email = e;
        }
        if let Some(s) = p.slack {
            user.notification_preferences.slack = s;
        }
    }
    state.save_user(user).await?;
    drop(_guard);
    view(call, &who.user_id)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetPassword {
    /// Required when the user already has a password.
    pub current_password: Option<String>,
    /// 12 to 128 characters, at least 4 different, not the e-mail, not a most-common password.
    pub new_password: String,
}

/// The caller's own user, when the credential is the user's own (an account key, a JWT or the
/// user's web session in the console):
/// a gateway's key or token, or a service account's, speaks for no person.
fn person(call: &Call<'_>) -> Result<std::sync::Arc<crate::data::model::User>, ApiError> {
    let who = call.who()?;
    if !matches!(
        who.credential,
        CredentialKind::ApiKey | CredentialKind::Jwt { .. } | CredentialKind::WebSession { .. }
    ) {
        return Err(ApiError::Forbidden("only a user's own key or token manages its sign-in".into()));
    }
    call.server.state.user(&who.user_id).ok_or(ApiError::NotFound("user"))
}

/// Sets or changes the caller's own password. The scope table asks for a credential holding
/// every scope the user's role allows (`admin` for an Owner or an Admin): a password signs in
/// with the whole role (and through the consent page hands OAuth clients any of it), so only a
/// credential that can already do all of that may set one. Then the MFA gate when MFA is on,
/// and the current password when one is set, its wrong guesses counted as wrong sign-ins. A new
/// password ends every web session and revokes every OAuth grant of the user: whatever signed
/// in with the old one (or was handed a token by it) signs in again.
#[utoipa::path(put, path = "/v1/user/password", tag = "user", request_body = SetPassword,
    params(("X-MFA-Token" = Option<String>, Header, description = "required when MFA is active")),
    responses((status = 200, body = crate::api::envelope::MessageEnvelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 429, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn set_password(call: &Call<'_>) -> ApiResult {
    let user = person(call)?;
    let body: SetPassword = call.json()?;
    super::mfa::gate(call).await?;
    let server = call.server;
    let store = server.state.store.as_ref();
    if let Some(stored) = passwords::stored(store, &user.id).await? {
        let current = body.current_password.clone().unwrap_or_default();
        if !server.identity.signin.check_current_password(&user.email, call.client_ip, stored.hash, current).await? {
            return Err(ApiError::validation("current_password", "is missing or wrong"));
        }
    }
    passwords::check(&body.new_password, &user.email).map_err(|m| ApiError::validation("new_password", m))?;
    let hash = passwords::hash(body.new_password).await?;
    passwords::save(&server.state, &user, hash).await?;
    // A new password ends every web session (one that leaked ends with the old password) and
    // every OAuth grant the user gave (a client that was handed a token through a session of
    // the old password loses it).
    server.identity.signin.sessions.end_all(&user.id).await?;
    let revoked = crate::identity::oauth_server::revoke_user(&server.state, &user).await?;
    // And the user's own app connections: one made through a session of the old password
    // goes with it (docs/identity.md, "Per-user connections").
    let ended = server.state.delete_connections_of(&user.org_id, &user.id).await?;
    crate::server::connections_ended::revoke_tokens(&server.state, ended);
    Ok(Reply::message(format!("password set; every web session was ended and {revoked} OAuth grant(s) revoked")))
}

#[utoipa::path(get, path = "/v1/user/web-sessions", tag = "user",
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn web_sessions(call: &Call<'_>) -> ApiResult {
    let user = person(call)?;
    let sessions = call.server.identity.signin.sessions.of_user(&user.id).await?;
    let items: Vec<_> = sessions
        .iter()
        .map(|s| {
            json!({
                "id": s.id, "created_at": iso(&s.created_at), "last_seen_at": iso(&s.last_seen_at),
                "expires_at": chrono::DateTime::from_timestamp_millis(s.expires_at_ms).map(|t| iso(&t)),
                "ip": s.ip, "user_agent": s.user_agent,
            })
        })
        .collect();
    Ok(Reply::ok(json!({ "sessions": items })))
}

#[utoipa::path(delete, path = "/v1/user/web-sessions/{id}", tag = "user",
    params(("id" = String, Path)),
    responses((status = 200, body = crate::api::envelope::MessageEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn end_web_session(call: &Call<'_>) -> ApiResult {
    let user = person(call)?;
    if !call.server.identity.signin.sessions.end(&user.id, call.id()).await? {
        return Err(ApiError::NotFound("web session"));
    }
    Ok(Reply::message("web session ended"))
}
