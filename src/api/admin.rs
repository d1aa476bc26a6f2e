//! `POST /admin/reload`: the operator reloads the configuration file (as SIGHUP does; see
//! `src/server/reload.rs` for what applies in place).

use super::{ApiResult, Call, Reply};
use crate::edge::error::ApiError;
use crate::server::reload::ReloadError;
use serde_json::json;

#[utoipa::path(post, path = "/v1/admin/reload", tag = "admin",
    description = "Reloads the configuration file, all or nothing: apps, organizations, users, api_keys, rate_limits, limits and alerts apply in place (connections and sessions carry over); a change elsewhere is refused (409) naming the sections, to be applied with `toolgate --upgrade`. Only for the owner of the operator's organisation, with scope `admin`; anyone else gets 404.",
    responses((status = 200, description = "changed: the sections applied (empty when the file is unchanged)", body = crate::api::envelope::Envelope),
              (status = 400, description = "the file does not validate; error.details.field names where", body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope), (status = 409, body = crate::api::envelope::ErrorEnvelope),
              (status = 503, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn reload(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    // The server's configuration belongs to its operator: to every other organisation, to
    // anyone in it but its owner, and to the owner's keys without `admin`, there is nothing
    // here (a 404, not a 403 that would say the endpoint is there to be had).
    let operator = who.org_id == crate::data::state::BOOTSTRAP_ORG && who.role == toolgate_filters::Role::Owner;
    if !operator || !who.scopes.contains(toolgate_filters::Scope::Admin) {
        return Err(ApiError::NotFound("configuration"));
    }
    let server = call.server;
    match server.config_source.reload(&crate::server::reload::Reloadable::of(server)).await {
        Ok(r) => Ok(Reply::ok(json!({ "changed": r.changed }))),
        Err(ReloadError::Invalid(crate::config::ConfigError::Invalid { field, message })) => {
            Err(ApiError::validation(field, message))
        }
        Err(ReloadError::Invalid(e)) => Err(ApiError::Unavailable(e.to_string())),
        Err(e @ ReloadError::NeedsUpgrade(_)) => Err(ApiError::Conflict(e.to_string())),
        Err(e @ ReloadError::Store(_)) => Err(ApiError::Unavailable(e.to_string())),
    }
}
