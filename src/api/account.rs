//! `/account/security` and `/account/whitelist`: the organisation's IP allowlist.

use super::{iso, ApiResult, Call, Reply};
use crate::error::ApiError;
use crate::model::{Organization, WhitelistEntry};
use crate::secrets;
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};
use toolgate_filters::ip_allowlist::{would_lock_out, IpPolicy, IpPolicyError};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSecurity {
    /// IPv4/IPv6 CIDRs (or single addresses).
    pub ip_whitelist: Option<Vec<String>>,
    pub enforce_ip_whitelist: Option<bool>,
    /// Enterprise accounts only.
    pub allowed_ips: Option<Vec<String>>,
    /// Apply a change that would refuse the caller's own address.
    #[serde(default)]
    pub allow_lockout: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddWhitelistEntry {
    pub ip: String,
    pub rate_limit_multiplier: Option<f64>,
    #[serde(default)]
    pub description: String,
}

fn view(org: &Organization) -> Value {
    json!({
        "ip_whitelist": org.ip_whitelist,
        "enforce_ip_whitelist": org.enforce_ip_whitelist,
        "allowed_ips": org.allowed_ips,
        "whitelist": org.whitelist.iter().map(|e| json!({
            "id": e.id, "ip": e.ip, "rate_limit_multiplier": e.rate_limit_multiplier,
            "description": e.description, "created_at": iso(&e.created_at),
        })).collect::<Vec<_>>(),
    })
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
    call.server
        .state
        .orgs
        .get(&who.org_id)
        .map(|o| o.value().as_ref().clone())
        .ok_or(ApiError::NotFound("organization"))
}

#[utoipa::path(patch, path = "/v1/account/security", tag = "account", request_body = UpdateSecurity,
    responses((status = 200, body = crate::api::openapi::Envelope), (status = 400, body = crate::api::openapi::ErrorEnvelope),
              (status = 401, body = crate::api::openapi::ErrorEnvelope), (status = 403, body = crate::api::openapi::ErrorEnvelope)))]
pub async fn update_security(call: &Call<'_>) -> ApiResult {
    let body: UpdateSecurity = call.json()?;
    super::mfa::require(call).await?;
    let state = &call.server.state;
    let _guard = state.write_lock.lock().await;
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
    responses((status = 201, body = crate::api::openapi::Envelope), (status = 400, body = crate::api::openapi::ErrorEnvelope),
              (status = 401, body = crate::api::openapi::ErrorEnvelope), (status = 403, body = crate::api::openapi::ErrorEnvelope)))]
pub async fn add_whitelist(call: &Call<'_>) -> ApiResult {
    let body: AddWhitelistEntry = call.json()?;
    let multiplier = body.rate_limit_multiplier.unwrap_or(1.0);
    if !(multiplier > 0.0 && multiplier <= 100.0) {
        return Err(ApiError::validation("rate_limit_multiplier", "must be a number in (0, 100]"));
    }
    if toolgate_filters::ip_allowlist::parse_net(&body.ip).is_none() {
        return Err(ApiError::validation("ip", format!("`{}` is not an IP address or CIDR network", body.ip)));
    }
    let state = &call.server.state;
    let _guard = state.write_lock.lock().await;
    let mut org = current_org(call)?;
    let entry = WhitelistEntry {
        id: secrets::new_id("wl"),
        ip: body.ip.trim().to_string(),
        rate_limit_multiplier: multiplier,
        description: body.description,
        created_at: Utc::now(),
    };
    org.whitelist.push(entry.clone());
    check(call, &org, true)?;
    state.save_org(org).await?;
    Ok(Reply::created(json!({
        "id": entry.id, "ip": entry.ip, "rate_limit_multiplier": entry.rate_limit_multiplier,
        "description": entry.description, "created_at": iso(&entry.created_at),
    })))
}
