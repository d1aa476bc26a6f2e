//! `/user`: the caller's own user.

use super::{iso, ApiResult, Call, Reply};
use crate::error::ApiError;
use crate::model::NotificationPreferences;
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateUser {
    pub name: Option<String>,
    pub notification_preferences: Option<PreferencesPatch>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PreferencesPatch {
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
pub async fn get(call: &Call<'_>) -> ApiResult {
    view(call, &call.who()?.user_id)
}

#[utoipa::path(patch, path = "/v1/user", tag = "user", request_body = UpdateUser,
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope)))]
pub async fn update(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let patch: UpdateUser = call.json()?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    let mut user = state.user(&who.user_id).map(|u| u.as_ref().clone()).ok_or(ApiError::NotFound("user"))?;
    if let Some(name) = patch.name {
        user.name = super::display_name("name", &name)?.to_string();
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
