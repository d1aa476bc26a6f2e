//! `/api-keys`: list (never the key nor its hash), create (the key is shown once) and revoke
//! (immediately).

use super::authority::Rights;
use super::{iso, pagination_json, ApiResult, Call, Reply};
use crate::base::secrets;
use crate::data::model::{ApiKey, SCHEMA_VERSION};
use crate::edge::error::ApiError;
use crate::edge::forms::display_name;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateKey {
    #[schema(min_length = 1, max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub name: String,
    /// ISO 8601; optional.
    pub expires_at: Option<String>,
    #[serde(default)]
    #[schema(max_items = 32)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub bypass_ip_whitelist: bool,
}

/// Where a key stands at `now`: `active`, `rotating` (a rotation's grace period runs),
/// `revoked`, `expired` or `retired` (its grace period ended).
fn key_state(key: &ApiKey, now: DateTime<Utc>) -> &'static str {
    if key.revoked_at.is_some_and(|t| t <= now) {
        "revoked"
    } else if key.retires_at.is_some_and(|t| t <= now) {
        "retired"
    } else if key.expires_at.is_some_and(|t| t <= now) {
        "expired"
    } else if key.retires_at.is_some() {
        "rotating"
    } else {
        "active"
    }
}

/// A key as a list shows it: what it can do and where it stands, never the key nor its hash.
fn listed(state: &crate::data::state::State, key: &ApiKey, now: DateTime<Utc>) -> Value {
    let used = state.usage_of(&key.id).last_used;
    json!({
        "id": key.id, "name": key.name, "scopes": key.scopes,
        "user_id": key.service_account_id.is_none().then_some(&key.user_id),
        "service_account_id": key.service_account_id,
        "created_at": iso(&key.created_at), "expires_at": key.expires_at.as_ref().map(iso),
        "last_used_at": used.as_ref().map(iso), "revoked_at": key.revoked_at.as_ref().map(iso),
        "retires_at": key.retires_at.as_ref().map(iso), "state": key_state(key, now),
        "bypass_ip_whitelist": key.bypass_ip_whitelist,
    })
}

#[utoipa::path(get, path = "/v1/api-keys", tag = "api-keys",
    params(("user_id" = Option<String>, Query, description = "only the keys of this user (not its service accounts')"),
           ("service_account_id" = Option<String>, Query, description = "only the keys of this service account"),
           ("page" = Option<u32>, Query, minimum = 1), ("limit" = Option<u32>, Query, minimum = 1, maximum = 100)),
    responses((status = 200, description = "api_keys (newest first: id, name, scopes, user_id or service_account_id, created_at, expires_at, last_used_at, revoked_at, retires_at, state; never the key nor its hash) and pagination", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let (page, limit) = call.pagination()?;
    let user = call.query("user_id");
    let account = call.query("service_account_id");
    let state = &call.server.state;
    // A gateway's access key belongs to its gateway (shown once when the gateway is made).
    let mut keys = state.keys_of(&who.org_id, |k| {
        k.gateway_id.is_none()
            && user.is_none_or(|u| k.service_account_id.is_none() && k.user_id == u)
            && account.is_none_or(|a| k.service_account_id.as_deref() == Some(a))
    });
    keys.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
    let total = keys.len();
    let now = Utc::now();
    let items: Vec<Value> = super::page_of(keys, page, limit).iter().map(|k| listed(state, k, now)).collect();
    Ok(Reply::ok(json!({ "api_keys": items, "pagination": pagination_json(page, limit, total) })))
}

#[utoipa::path(post, path = "/v1/api-keys", tag = "api-keys", request_body = CreateKey,
    responses((status = 201, description = "id, key (shown once), name, created_at, expires_at, scopes", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 409, description = "the organisation's API-key quota is used up", body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn create(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let body: CreateKey = call.json()?;
    let name = display_name("name", &body.name)?;
    super::granted_scopes(who, &body.scopes)?;
    let expires_at = match body.expires_at {
        None => None,
        Some(s) => {
            let t = DateTime::parse_from_rfc3339(&s)
                .map_err(|e| ApiError::validation("expires_at", format!("not an ISO 8601 timestamp: {e}")))?
                .with_timezone(&Utc);
            if t <= Utc::now() {
                return Err(ApiError::validation("expires_at", "must be in the future"));
            }
            Some(t)
        }
    };
    // A key that skips the allowlist is as much a security change as editing the list. Asked
    // after validation, so that a bad body does not use up an MFA token.
    if body.bypass_ip_whitelist {
        super::mfa::gate(call).await?;
    }
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    super::quotas::check(state, &who.org_id, super::quotas::Quota::ApiKeys)?;
    let plaintext = secrets::new_api_key();
    let key = ApiKey {
        schema_version: SCHEMA_VERSION,
        id: secrets::new_id("key"),
        org_id: who.org_id.clone(),
        user_id: who.user_id.clone(),
        name: name.to_string(),
        hash: secrets::hash_key(&plaintext),
        scopes: body.scopes,
        created_at: Utc::now(),
        expires_at,
        revoked_at: None,
        bypass_ip_whitelist: body.bypass_ip_whitelist,
        gateway_id: None,
        service_account_id: None,
        declared: false,
        retires_at: None,
    };
    let key = state.save_key(key).await?;
    Ok(Reply::created(json!({
        "id": key.id, "key": plaintext, "name": key.name, "created_at": iso(&key.created_at),
        "expires_at": key.expires_at.as_ref().map(iso), "scopes": key.scopes,
        "bypass_ip_whitelist": key.bypass_ip_whitelist,
    })))
}

#[utoipa::path(delete, path = "/v1/api-keys/{key_id}", tag = "api-keys", params(("key_id" = String, Path)),
    responses((status = 200, body = crate::api::envelope::MessageEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn revoke(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    let key = state
        .key(call.id())
        .filter(|k| k.org_id == who.org_id && k.revoked_at.is_none())
        .ok_or(ApiError::NotFound("api key"))?;
    let rights = Rights::of_key(state, &key);
    rights.check(who)?;
    // Taking a leaked narrower key of one's own out of use is never held up by MFA: the MFA gate
    // protects the stronger credential, which is the one acting here.
    if !rights.strictly_weaker_own(who) {
        super::mfa::gate(call).await?;
    }
    let mut revoked = key.as_ref().clone();
    revoked.revoked_at = Some(Utc::now());
    state.save_key(revoked).await?;
    Ok(Reply::message(format!("API key {} revoked", key.id)))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RotateKey {
    /// Hours the old key stays valid beside the new one (0: refused at once).
    #[schema(minimum = 0, maximum = 720)]
    pub grace_period_hours: i64,
}

fn key_of_org(call: &Call<'_>) -> Result<std::sync::Arc<ApiKey>, ApiError> {
    let who = call.who()?;
    call.server
        .state
        .key(call.id())
        .filter(|k| k.org_id == who.org_id && k.gateway_id.is_none())
        .ok_or(ApiError::NotFound("api key"))
}

#[utoipa::path(post, path = "/v1/api-keys/{key_id}/rotate", tag = "api-keys", params(("key_id" = String, Path)), request_body = RotateKey,
    responses((status = 201, description = "the new key (shown once) and when the old one stops working", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn rotate(call: &Call<'_>) -> ApiResult {
    let old = key_of_org(call)?;
    // The new key copies the old key's holder and scopes: only a caller entitled to those may
    // mint it.
    Rights::of_key(&call.server.state, &old).check(call.who()?)?;
    let body: RotateKey = call.json()?;
    if !(0..=720).contains(&body.grace_period_hours) {
        return Err(ApiError::validation("grace_period_hours", "must be between 0 and 720"));
    }
    let now = Utc::now();
    if old.unusable(now).is_some() {
        return Err(ApiError::validation("key_id", "the key is revoked or expired"));
    }
    super::mfa::gate(call).await?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&old.org_id).await?;
    let plaintext = secrets::new_api_key();
    let new = ApiKey {
        schema_version: SCHEMA_VERSION,
        id: secrets::new_id("key"),
        hash: secrets::hash_key(&plaintext),
        created_at: now,
        revoked_at: None,
        declared: false,
        retires_at: None,
        ..old.as_ref().clone()
    };
    let grace_end = now + chrono::Duration::hours(body.grace_period_hours);
    let mut retiring = old.as_ref().clone();
    // The old key stops at the end of the grace period (or its own expiry, if sooner).
    retiring.retires_at = Some(retiring.retires_at.map_or(grace_end, |e| e.min(grace_end)));
    let new = state.save_key(new).await?;
    state.save_key(retiring).await?;
    Ok(Reply::created(json!({
        "id": new.id, "key": plaintext, "name": new.name, "created_at": iso(&new.created_at),
        "expires_at": new.expires_at.as_ref().map(iso), "scopes": new.scopes,
        "rotated_from": old.id, "old_key_expires_at": iso(&grace_end.min(old.expires_at.unwrap_or(grace_end))),
    })))
}

#[utoipa::path(get, path = "/v1/api-keys/{key_id}/usage", tag = "api-keys", params(("key_id" = String, Path)),
    responses((status = 200, description = "last_used, last_ip, requests_today, requests_this_month", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn usage(call: &Call<'_>) -> ApiResult {
    let key = key_of_org(call)?;
    let u = call.server.state.usage_of(&key.id);
    Ok(Reply::ok(json!({
        "key_id": key.id,
        "last_used": u.last_used.as_ref().map(iso),
        "last_ip": u.last_ip,
        "requests_today": u.requests_today,
        "requests_this_month": u.requests_this_month,
    })))
}
