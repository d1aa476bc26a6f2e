//! `/account/security` and `/account/whitelist`: the organisation's IP allowlist.
//!
//! Every change here decides who may reach the account, so every one passes the MFA gate
//! (Decision 9), not only `PATCH /account/security`: otherwise a whitelist entry would be a way
//! around it. A whitelist entry is part of the allowlist: when the list is enforced it admits
//! its address like an `ip_whitelist` network does, and its `rate_limit_multiplier` scales the
//! limits of requests from that address (enforced or not), within the tier's `max_multiplier`.

use super::{iso, ApiResult, Call, Reply};
use crate::base::secrets;
use crate::data::model::{Organization, WhitelistEntry};
use crate::edge::error::ApiError;
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};
use toolgate_filters::ip_allowlist::{would_lock_out, IpPolicy, IpPolicyError};
use utoipa::ToSchema;

/// Most networks in `ip_whitelist`, and in `allowed_ips`.
pub(crate) const MAX_NETWORKS: usize = 500;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateSecurity {
    /// IPv4/IPv6 CIDRs (or single addresses), at most 500.
    #[schema(max_items = 500)]
    pub ip_whitelist: Option<Vec<String>>,
    pub enforce_ip_whitelist: Option<bool>,
    /// Enterprise accounts only; at most 500.
    #[schema(max_items = 500)]
    pub allowed_ips: Option<Vec<String>>,
    /// Apply a change that would refuse the caller's own address.
    #[serde(default)]
    pub allow_lockout: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddWhitelistEntry {
    /// An IPv4/IPv6 address or CIDR network.
    #[schema(min_length = 1, max_length = 64)]
    pub ip: String,
    /// Scales the limits of requests from this address: at most the tier's
    /// `limits.quotas.<tier>.max_multiplier` (free 5, starter 5, professional 10, enterprise
    /// 100); default 1.
    #[schema(exclusive_minimum = 0.0)]
    pub rate_limit_multiplier: Option<f64>,
    /// At most 1000 characters; no control characters but line breaks and tabs.
    #[serde(default)]
    #[schema(max_length = 1000, pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$")]
    pub description: String,
}

fn entry_view(e: &WhitelistEntry) -> Value {
    json!({
        "id": e.id, "ip": e.ip, "rate_limit_multiplier": e.rate_limit_multiplier,
        "description": e.description, "created_at": iso(&e.created_at),
    })
}

fn view(org: &Organization) -> Value {
    json!({
        "ip_whitelist": org.ip_whitelist,
        "enforce_ip_whitelist": org.enforce_ip_whitelist,
        "allowed_ips": org.allowed_ips,
        "whitelist": org.whitelist.iter().map(entry_view).collect::<Vec<_>>(),
    })
}

fn networks(field: &str, list: Option<&Vec<String>>) -> Result<(), ApiError> {
    if list.is_some_and(|l| l.len() > MAX_NETWORKS) {
        return Err(ApiError::validation(field, format!("at most {MAX_NETWORKS} networks")));
    }
    Ok(())
}

fn policy_error(e: IpPolicyError) -> ApiError {
    let text = e.to_string();
    let field = text.split(':').next().unwrap_or("ip_whitelist").to_string();
    ApiError::validation(field, text)
}

/// Validates the organisation's new policy and refuses one that locks the caller out.
fn check(call: &Call<'_>, org: &Organization, allow_lockout: bool) -> Result<(), ApiError> {
    let policy = IpPolicy::try_from(&org.ip_policy_config()).map_err(policy_error)?;
    let who = call.who()?;
    if !allow_lockout && !who.bypass_ip_whitelist && would_lock_out(&policy, call.client_ip) {
        return Err(ApiError::validation(
            "ip_whitelist",
            format!(
                "this change would refuse your own address {}; send allow_lockout: true to apply it anyway",
                call.client_ip
            ),
        ));
    }
    Ok(())
}

fn current_org(call: &Call<'_>) -> Result<Organization, ApiError> {
    let who = call.who()?;
    call.server.state.org(&who.org_id).map(|o| o.as_ref().clone()).ok_or(ApiError::NotFound("organization"))
}

#[utoipa::path(patch, path = "/v1/account/security", tag = "account", request_body = UpdateSecurity,
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn update_security(call: &Call<'_>) -> ApiResult {
    let body: UpdateSecurity = call.json()?;
    networks("ip_whitelist", body.ip_whitelist.as_ref())?;
    networks("allowed_ips", body.allowed_ips.as_ref())?;
    super::mfa::gate(call).await?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&call.who()?.org_id).await?;
    let mut org = current_org(call)?;
    if let Some(list) = body.ip_whitelist {
        org.ip_whitelist = list.into_iter().map(|s| s.trim().to_string()).collect();
    }
    if let Some(e) = body.enforce_ip_whitelist {
        org.enforce_ip_whitelist = e;
    }
    if let Some(list) = body.allowed_ips {
        if org.tier != "enterprise" {
            return Err(ApiError::Forbidden("allowed_ips is available to enterprise accounts".into()));
        }
        org.allowed_ips = list.into_iter().map(|s| s.trim().to_string()).collect();
    }
    check(call, &org, body.allow_lockout)?;
    let org = state.save_org(org).await?;
    Ok(Reply::ok(view(&org)))
}

#[utoipa::path(post, path = "/v1/account/whitelist", tag = "account", request_body = AddWhitelistEntry,
    responses((status = 201, body = crate::api::envelope::Envelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 409, description = "the tier's `whitelist_entries` quota is reached", body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn add_whitelist(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let body: AddWhitelistEntry = call.json()?;
    if toolgate_filters::ip_allowlist::parse_net(&body.ip).is_none() {
        return Err(ApiError::validation("ip", "is not an IP address or CIDR network"));
    }
    super::description("description", &body.description)?;
    let state = &call.server.state;
    let multiplier = super::quotas::multiplier(state, &who.org_id, body.rate_limit_multiplier.unwrap_or(1.0))?;
    super::mfa::gate(call).await?;
    let _guard = state.lock_writes(&who.org_id).await?;
    super::quotas::check(state, &who.org_id, super::quotas::Quota::WhitelistEntries)?;
    let mut org = current_org(call)?;
    let entry = WhitelistEntry {
        id: secrets::new_id("wl"),
        ip: body.ip.trim().to_string(),
        rate_limit_multiplier: multiplier,
        description: body.description,
        created_at: Utc::now(),
    };
    org.whitelist.push(entry.clone());
    // Adding an address can only admit more; this validates the resulting policy.
    check(call, &org, true)?;
    state.save_org(org).await?;
    Ok(Reply::created(entry_view(&entry)))
}

#[utoipa::path(get, path = "/v1/account/whitelist", tag = "account",
    responses((status = 200, description = "`whitelist`: the organisation's entries, oldest first", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list_whitelist(call: &Call<'_>) -> ApiResult {
    let org = current_org(call)?;
    Ok(Reply::ok(json!({ "whitelist": org.whitelist.iter().map(entry_view).collect::<Vec<_>>() })))
}

#[utoipa::path(delete, path = "/v1/account/whitelist/{entry_id}", tag = "account",
    params(("entry_id" = String, Path),
           ("allow_lockout" = Option<bool>, Query, description = "remove the entry even if it is what admits your own address")),
    responses((status = 200, body = crate::api::envelope::MessageEnvelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn delete_whitelist(call: &Call<'_>) -> ApiResult {
    let allow_lockout = match call.query("allow_lockout") {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::validation("allow_lockout", "must be true or false")),
    };
    let present = |org: &Organization| org.whitelist.iter().any(|e| e.id == call.id());
    if !present(&current_org(call)?) {
        return Err(ApiError::NotFound("whitelist entry"));
    }
    super::mfa::gate(call).await?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&call.who()?.org_id).await?;
    let mut org = current_org(call)?;
    if !present(&org) {
        return Err(ApiError::NotFound("whitelist entry"));
    }
    org.whitelist.retain(|e| e.id != call.id());
    // The entry may be what admits the caller under an enforced list.
    check(call, &org, allow_lockout)?;
    state.save_org(org).await?;
    Ok(Reply::message(format!("Whitelist entry {} deleted", call.id())))
}
