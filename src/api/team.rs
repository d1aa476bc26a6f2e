//! `/team/members`: the organisation's users and their roles, managed with `team:manage` (only an
//! Owner's role holds it). A member is added without a password (they sign in by SSO/OIDC, or
//! set one through the operator's recovery); the organisation never loses its last Owner; one
//! cannot remove oneself.
//!
//! A member signs in with the whole of its role, so giving a role (adding a member, changing
//! one's role) is handing out rights: it passes the MFA gate, is refused to delegated OAuth
//! tokens (the route table's "makes credentials"), and making or raising an Owner or an Admin
//! needs a credential holding every scope of that role (`authority::may_grant_role`; a narrow
//! `team:manage` key cannot make an Owner). An e-mail address belongs to one organisation:
//! adding one that another organisation's user holds is a 409 that does not say which
//! organisation holds it (`State::create_user`).
//!
//! Removing a member revokes their API keys, ends their web sessions and OAuth grants, and
//! hands their service accounts (and the access keys of the gateways they made) to the Owner
//! who removed them, with the rights they had (never more).

use super::{iso, ApiResult, Call, Reply};
use crate::base::secrets;
use crate::config::same_email;
use crate::data::model::User;
use crate::edge::error::ApiError;
use crate::edge::forms::display_name;
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use toolgate_filters::{Role, ScopeSet};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewMember {
    /// Unique (in any case): within the organisation, and no other organisation's user holds it.
    #[schema(min_length = 3, max_length = 254)]
    pub email: String,
    #[schema(min_length = 1, max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub name: String,
    /// `owner`, `admin`, `developer` or `viewer`.
    pub role: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MemberRole {
    /// `owner`, `admin`, `developer` or `viewer`.
    pub role: String,
}

fn role(name: &str) -> Result<Role, ApiError> {
    // The spec's spelling, lower case; `Role::parse` also takes other cases, the API does not.
    Role::parse(name)
        .filter(|r| r.as_str() == name)
        .ok_or_else(|| ApiError::validation("role", "must be one of owner, admin, developer, viewer"))
}

/// An address with one `@` between a local part and a domain, no spaces or control characters.
fn email(text: &str) -> Result<String, ApiError> {
    let e = text.trim().to_lowercase();
    let ok = (3..=254).contains(&e.len())
        && !e.chars().any(|c| c.is_whitespace() || c.is_control())
        && e.split_once('@')
            .is_some_and(|(local, domain)| !local.is_empty() && !domain.is_empty() && !domain.contains('@'));
    if !ok {
        return Err(ApiError::validation("email", "must be an e-mail address (at most 254 characters)"));
    }
    Ok(e)
}

/// A user of the caller's organisation; another organisation's is "not found".
fn member(call: &Call<'_>) -> Result<Arc<User>, ApiError> {
    let who = call.who()?;
    call.server.state.user(call.id()).filter(|u| u.org_id == who.org_id).ok_or(ApiError::NotFound("member"))
}

async fn shown(call: &Call<'_>, u: &User) -> Result<Value, ApiError> {
    Ok(json!({
        "id": u.id, "email": u.email, "name": u.name, "role": u.role,
        "mfa_enabled": call.server.mfa.is_active(&u.id).await?,
        "created_at": iso(&u.created_at), "declared": u.declared,
    }))
}

/// The organisation's Owners but `except`.
fn other_owners(call: &Call<'_>, org_id: &str, except: &str) -> usize {
    call.server.state.users_where(|u| u.org_id == org_id && u.id != except && u.role == "owner").len()
}

#[utoipa::path(get, path = "/v1/team/members", tag = "team",
    responses((status = 200, description = "members (oldest first): id, email, name, role, mfa_enabled, created_at, declared (from the configuration, which sets it again at each start)", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let mut users = call.server.state.users_where(|u| u.org_id == who.org_id);
    users.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
    // Each member's MFA state is a store read (a round trip on Redis): read them together.
    let members = futures_util::future::try_join_all(users.iter().map(|u| shown(call, u))).await?;
    Ok(Reply::ok(json!({ "members": members })))
}

#[utoipa::path(post, path = "/v1/team/members", tag = "team", request_body = NewMember,
    responses((status = 201, description = "the member, without a password: they sign in by SSO/OIDC", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, description = "INSUFFICIENT_SCOPE: an Owner or Admin given by a credential lacking a scope of that role; MFA_REQUIRED; FORBIDDEN: a delegated OAuth token", body = crate::api::envelope::ErrorEnvelope),
              (status = 409, description = "a user has this e-mail: a member of the organisation, or a user of another organisation (one e-mail, one organisation)", body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn create(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let body: NewMember = call.json()?;
    let address = email(&body.email)?;
    let name = display_name("name", &body.name)?;
    let role = role(&body.role)?;
    super::authority::may_grant_role(who, role)?;
    super::mfa::gate(call).await?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    if !state.users_where(|u| u.org_id == who.org_id && same_email(&u.email, &address)).is_empty() {
        return Err(ApiError::Conflict(format!("a member with the e-mail `{address}` already exists")));
    }
    let user = state
        .create_user(User {
            id: secrets::new_id("usr"),
            org_id: who.org_id.clone(),
            email: address,
            name: name.to_string(),
            role: role.as_str().to_string(),
            created_at: Utc::now(),
            notification_preferences: Default::default(),
            declared: false,
        })
        .await?;
    Ok(Reply::created(shown(call, &user).await?))
}

#[utoipa::path(patch, path = "/v1/team/members/{user_id}", tag = "team", params(("user_id" = String, Path)), request_body = MemberRole,
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, description = "INSUFFICIENT_SCOPE: an Owner or Admin given by a credential lacking a scope of that role; MFA_REQUIRED; FORBIDDEN: a delegated OAuth token", body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope),
              (status = 409, description = "the organisation's last Owner would be demoted", body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn update(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    member(call)?;
    let body: MemberRole = call.json()?;
    let role = role(&body.role)?;
    super::authority::may_grant_role(who, role)?;
    super::mfa::gate(call).await?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    // Read again under the lock: another write may have changed it.
    let user = member(call)?;
    if user.role == "owner" && role != Role::Owner && other_owners(call, &who.org_id, &user.id) == 0 {
        return Err(ApiError::Conflict(
            "the organisation's last Owner cannot be demoted: make another Owner first".into(),
        ));
    }
    let changed = User { role: role.as_str().to_string(), ..user.as_ref().clone() };
    let user = state.save_user(changed).await?;
    Ok(Reply::ok(shown(call, &user).await?))
}

#[utoipa::path(delete, path = "/v1/team/members/{user_id}", tag = "team", params(("user_id" = String, Path)),
    responses((status = 200, body = crate::api::envelope::MessageEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope),
              (status = 409, description = "the caller itself, or the organisation's last Owner", body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn delete(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    if member(call)?.id == who.user_id {
        return Err(ApiError::Conflict("you cannot remove yourself: another Owner can".into()));
    }
    super::mfa::gate(call).await?;
    let server = call.server;
    let state = &server.state;
    let guard = state.lock_writes(&who.org_id).await?;
    let user = member(call)?;
    if user.role == "owner" && other_owners(call, &who.org_id, &user.id) == 0 {
        return Err(ApiError::Conflict("the organisation's last Owner cannot be removed".into()));
    }
    let keys = hand_over(call, &user, &who.user_id).await?;
    // The record, then its sessions, grants, MFA and password: the identity service's one removal.
    let removed = server.identity.remove_user(&user, guard).await?;
    crate::server::connections_ended::revoke_tokens(state, removed.connections);
    Ok(Reply::message(format!(
        "member {} removed: {keys} API key(s) revoked, web sessions ended, {} OAuth grant(s) revoked",
        user.id, removed.grants
    )))
}

/// Revokes `user`'s own keys and gives the service accounts they made to `heir`, each account
/// and its keys narrowed to what they could do under `user`'s role (so never more); returns how
/// many keys were revoked.
async fn hand_over(call: &Call<'_>, user: &User, heir: &str) -> Result<usize, ApiError> {
    let state = &call.server.state;
    let now = Utc::now();
    let bound = Role::parse(&user.role).map_or(ScopeSet::EMPTY, Role::allowed);
    let narrowed = |scopes: &[String]| -> Vec<String> {
        let own = ScopeSet::parse(scopes.iter().map(String::as_str)).unwrap_or(ScopeSet::EMPTY);
        own.intersect(bound).names().into_iter().map(str::to_string).collect()
    };
    let mut revoked = 0;
    for key in state.keys_of(&user.org_id, |k| k.user_id == user.id) {
        let mut k = key.as_ref().clone();
        // A gateway's access key belongs to the gateway, a service account's to the account:
        // both stay with the organisation.
        if k.service_account_id.is_some() || k.gateway_id.is_some() {
            k.user_id = heir.to_string();
            k.scopes = narrowed(&k.scopes);
        } else if k.revoked_at.is_none() {
            k.revoked_at = Some(now);
            revoked += 1;
        } else {
            continue;
        }
        state.save_key(k).await?;
    }
    for a in state.service_accounts_where(|a| a.org_id == user.org_id && a.created_by == user.id) {
        let mut a = a.as_ref().clone();
        a.created_by = heir.to_string();
        a.scopes = narrowed(&a.scopes);
        state.save_service_account(a).await?;
    }
    Ok(revoked)
}
