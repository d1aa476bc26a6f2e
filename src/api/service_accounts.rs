//! `/service-accounts`: non-human key owners with their own scopes and rate-limit multiplier:
//! listed with their key counts, created, given keys.

use super::{iso, pagination_json, ApiResult, Call, Reply};
use crate::base::secrets;
use crate::data::model::{ApiKey, ServiceAccount, SCHEMA_VERSION};
use crate::edge::error::ApiError;
use crate::edge::forms::display_name;
use chrono::{Duration, Utc};
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateServiceAccount {
    /// 1-100 characters, no control characters.
    #[schema(min_length = 1, max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub name: String,
    /// At most 1000 characters; no control characters but line breaks and tabs.
    #[serde(default)]
    #[schema(max_length = 1000, pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$")]
    pub description: String,
    #[schema(min_items = 1, max_items = 32)]
    pub scopes: Vec<String>,
    /// Multiplies the tier's limits: at most the tier's `limits.quotas.<tier>.max_multiplier`
    /// (free 5, starter 5, professional 10, enterprise 100). Default
    /// `limits.service_account_multiplier` (5), lowered to the tier's maximum. Above 1 it needs
    /// MFA when the caller's MFA is active.
    #[schema(exclusive_minimum = 0.0)]
    pub rate_limit_multiplier: Option<f64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateServiceAccountKey {
    #[schema(min_length = 1, max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub name: String,
    /// Days until the key expires; absent means no expiry.
    #[schema(minimum = 1, maximum = 3650)]
    pub expires_in_days: Option<i64>,
}

#[utoipa::path(get, path = "/v1/service-accounts", tag = "service-accounts",
    params(("page" = Option<u32>, Query, minimum = 1), ("limit" = Option<u32>, Query, minimum = 1, maximum = 100)),
    responses((status = 200, description = "service_accounts (newest first, each with key_count, its keys still usable, and keys_total) and pagination", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let (page, limit) = call.pagination()?;
    let state = &call.server.state;
    let mut accounts = state.service_accounts_where(|a| a.org_id == who.org_id);
    accounts.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
    let total = accounts.len();
    let now = Utc::now();
    let items: Vec<Value> = super::page_of(accounts, page, limit)
        .iter()
        .map(|a| {
            let of_account = |k: &ApiKey| k.service_account_id.as_deref() == Some(a.id.as_str());
            let usable = state.key_count_of(&a.org_id, |k| of_account(k) && k.unusable(now).is_none());
            json!({
                "id": a.id, "name": a.name, "description": a.description, "scopes": a.scopes,
                "rate_limit_multiplier": a.rate_limit_multiplier, "created_by": a.created_by,
                "created_at": iso(&a.created_at), "key_count": usable, "keys_total": state.key_count_of(&a.org_id, of_account),
            })
        })
        .collect();
    Ok(Reply::ok(json!({ "service_accounts": items, "pagination": pagination_json(page, limit, total) })))
}

#[utoipa::path(post, path = "/v1/service-accounts", tag = "service-accounts", request_body = CreateServiceAccount,
    responses((status = 201, body = crate::api::envelope::Envelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 409, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn create(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let body: CreateServiceAccount = call.json()?;
    let name = display_name("name", &body.name)?;
    super::description("description", &body.description)?;
    super::granted_scopes(who, &body.scopes)?;
    let state = &call.server.state;
    let multiplier = match body.rate_limit_multiplier {
        Some(m) => super::quotas::multiplier(state, &who.org_id, m)?,
        None => state.config().limits.service_account_multiplier.min(super::quotas::max_multiplier(state, &who.org_id)),
    };
    // Raising an account's limits above its tier's is a security decision, as is the allowlist.
    if multiplier > 1.0 {
        super::mfa::gate(call).await?;
    }
    let _guard = state.lock_writes(&who.org_id).await?;
    if !state.service_accounts_where(|a| a.org_id == who.org_id && a.name.eq_ignore_ascii_case(name)).is_empty() {
        return Err(ApiError::Conflict(format!("a service account named `{name}` already exists")));
    }
    super::quotas::check(state, &who.org_id, super::quotas::Quota::ServiceAccounts)?;
    let a = state
        .save_service_account(ServiceAccount {
            id: secrets::new_id("sa"),
            org_id: who.org_id.clone(),
            name: name.to_string(),
            description: body.description,
            scopes: body.scopes,
            rate_limit_multiplier: multiplier,
            created_by: who.user_id.clone(),
            created_at: Utc::now(),
        })
        .await?;
    Ok(Reply::created(json!({
        "id": a.id, "name": a.name, "description": a.description, "scopes": a.scopes,
        "rate_limit_multiplier": a.rate_limit_multiplier, "created_at": iso(&a.created_at),
    })))
}

#[utoipa::path(post, path = "/v1/service-accounts/{account_id}/keys", tag = "service-accounts",
    params(("account_id" = String, Path)), request_body = CreateServiceAccountKey,
    responses((status = 201, description = "the key, shown once", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope),
              (status = 409, description = "the organisation's API-key quota is used up", body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn create_key(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let a = call
        .server
        .state
        .service_account(call.id())
        .filter(|a| a.org_id == who.org_id)
        .ok_or(ApiError::NotFound("service account"))?;
    // The key acts as the account, within its creator's role: the caller must hold those rights.
    super::authority::Rights::of_service_account(&call.server.state, &a).check(who)?;
    let body: CreateServiceAccountKey = call.json()?;
    let name = display_name("name", &body.name)?;
    let expires_at = match body.expires_in_days {
        None => None,
        Some(d) if (1..=3650).contains(&d) => Some(Utc::now() + Duration::days(d)),
        Some(_) => return Err(ApiError::validation("expires_in_days", "must be between 1 and 3650")),
    };
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    super::quotas::check(state, &who.org_id, super::quotas::Quota::ApiKeys)?;
    let plaintext = secrets::new_api_key();
    let key = state
        .save_key(ApiKey {
            schema_version: SCHEMA_VERSION,
            id: secrets::new_id("key"),
            org_id: a.org_id.clone(),
            user_id: a.created_by.clone(),
            name: name.to_string(),
            hash: secrets::hash_key(&plaintext),
            scopes: a.scopes.clone(),
            created_at: Utc::now(),
            expires_at,
            revoked_at: None,
            bypass_ip_whitelist: false,
            gateway_id: None,
            service_account_id: Some(a.id.clone()),
            declared: false,
            retires_at: None,
        })
        .await?;
    Ok(Reply::created(json!({
        "id": key.id, "key": plaintext, "name": key.name, "service_account_id": a.id,
        "scopes": key.scopes, "created_at": iso(&key.created_at), "expires_at": key.expires_at.as_ref().map(iso),
    })))
}

#[utoipa::path(delete, path = "/v1/service-accounts/{account_id}", tag = "service-accounts",
    params(("account_id" = String, Path)),
    responses((status = 200, description = "the account deleted: its keys revoked, its own app connections ended (their tokens revoked at the apps' providers) and its upstreams closed on every instance", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn delete(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let state = &call.server.state;
    let of_org = || state.service_account(call.id()).filter(|a| a.org_id == who.org_id);
    let a = of_org().ok_or(ApiError::NotFound("service account"))?;
    // Its keys act within its creator's role: whoever deletes it holds those rights.
    super::authority::Rights::of_service_account(state, &a).check(who)?;
    super::mfa::gate(call).await?;
    let guard = state.lock_writes(&who.org_id).await?;
    let a = of_org().ok_or(ApiError::NotFound("service account"))?;
    let now = Utc::now();
    let keys =
        state.keys_of(&a.org_id, |k| k.service_account_id.as_deref() == Some(a.id.as_str()) && k.revoked_at.is_none());
    for key in &keys {
        let mut revoked = key.as_ref().clone();
        revoked.revoked_at = Some(now);
        state.save_key(revoked).await?;
    }
    state.delete_service_account(&a).await?;
    drop(guard);
    // Its own app connections end as a removed member's do: each removal goes on the change
    // feed (every instance closes its upstreams) and the tokens are revoked at the providers.
    let ended = state.delete_connections_of(&a.org_id, &a.id).await?;
    let connections = ended.len();
    crate::server::connections_ended::revoke_tokens(state, ended);
    Ok(Reply::message(format!(
        "service account {} deleted: {} API key(s) revoked, {connections} app connection(s) ended",
        a.id,
        keys.len()
    )))
}
