//! Whose connection of an app a `/apps/{id}/connect...` or `/apps/{id}/connection` request is
//! about: the organisation's, or for an app connected by each user (`connection_scope: user`)
//! the caller's own, or (an administrator's, `apps:write`) a service account's or another
//! member's (docs/identity.md, "Per-user connections").

use super::Call;
use crate::config::AppConfig;
use crate::data::model::Connection;
use crate::edge::error::ApiError;
use std::sync::Arc;
use toolgate_filters::{CredentialKind, Principal, Scope};

/// Whose connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Holder {
    Organization,
    /// A member's or a service account's own (its id), and whether it is the caller's.
    Own {
        user_id: String,
        callers: bool,
    },
}

impl Holder {
    /// Who a request names: `?organization=true`, `?user_id=` (a member or a service account of
    /// the organisation; `?service_account_id=` says the same) or, by default, the caller for
    /// an app connected by each user and the organisation for any other.
    pub(crate) fn of(call: &Call<'_>, a: &AppConfig) -> Result<Holder, ApiError> {
        let who = call.who()?;
        let named = call.query("user_id").or_else(|| call.query("service_account_id"));
        if a.per_user.is_none() {
            if named.is_some() {
                return Err(ApiError::validation("user_id", "only for an app with connection_scope: user"));
            }
            return Ok(Holder::Organization);
        }
        if call.query("organization") == Some("true") {
            return Ok(Holder::Organization);
        }
        if let Some(id) = named {
            let state = &call.server.state;
            let member = state.user(id).is_some_and(|u| u.org_id == who.org_id);
            let account = state.service_account(id).is_some_and(|s| s.org_id == who.org_id);
            if !member && !account {
                return Err(ApiError::NotFound("user or service account"));
            }
            return Ok(Holder::Own { user_id: id.to_string(), callers: Some(id) == caller_id(who) });
        }
        match caller_id(who) {
            Some(id) => Ok(Holder::Own { user_id: id.to_string(), callers: true }),
            None => Err(ApiError::Forbidden(format!(
                "`{}` is connected by each user; a gateway key names no user: connect it with your own API key or sign in",
                a.id
            ))),
        }
    }

    /// The member or service account whose own connection this is.
    pub(crate) fn user_id(&self) -> Option<&str> {
        match self {
            Holder::Organization => None,
            Holder::Own { user_id, .. } => Some(user_id),
        }
    }

    /// Whether `who` may make or remove this connection: its own (a member's, `apps:connect_self`,
    /// which the route checked), or with `apps:write` the organisation's, a service account's
    /// (a service account's own too: an administrator connects it) or another member's removal.
    pub(crate) fn may_change(&self, who: &Principal) -> Result<(), ApiError> {
        let own_member = matches!(self, Holder::Own { callers: true, .. })
            && !matches!(who.credential, CredentialKind::ServiceAccount { .. });
        if own_member || who.scopes.contains(Scope::AppsWrite) {
            return Ok(());
        }
        Err(ApiError::InsufficientScope(Scope::AppsWrite.as_str()))
    }

    /// Whether `who` may store a new connection for this holder: as [`Self::may_change`], and a
    /// member's own connection only by that member, never by an administrator, whose credential
    /// would then go on the member's calls.
    pub(crate) fn may_connect(&self, call: &Call<'_>, who: &Principal) -> Result<(), ApiError> {
        if let Holder::Own { user_id, callers: false } = self {
            if call.server.state.user(user_id).is_some() {
                return Err(ApiError::Forbidden(format!(
                    "a member connects an app for themself: only `{user_id}` can connect their own connection"
                )));
            }
        }
        self.may_change(who)
    }

    /// This holder's connection of `app_id`, if it has one.
    pub(crate) fn connection(&self, call: &Call<'_>, org_id: &str, app_id: &str) -> Option<Arc<Connection>> {
        match self {
            Holder::Organization => call.server.state.connection(org_id, app_id),
            Holder::Own { user_id, .. } => call.server.state.user_connection(org_id, user_id, app_id),
        }
    }

    /// Removes this holder's connection of `app_id`; whether there was one. A member's or a
    /// service account's own has its tokens revoked at the provider, in the background.
    pub(crate) async fn delete(&self, call: &Call<'_>, org_id: &str, app_id: &str) -> Result<bool, ApiError> {
        let state = &call.server.state;
        Ok(match self {
            Holder::Organization => state.delete_connection(org_id, app_id).await?,
            Holder::Own { user_id, .. } => match state.delete_user_connection(org_id, user_id, app_id).await? {
                Some(ended) => {
                    crate::server::connections_ended::revoke_tokens(state, vec![ended]);
                    true
                }
                None => false,
            },
        })
    }
}

/// The member or service account a credential names: none for a gateway key (shared by all who
/// hold it).
fn caller_id(who: &Principal) -> Option<&str> {
    match &who.credential {
        CredentialKind::GatewayKey { .. } => None,
        CredentialKind::ServiceAccount { account_id } => Some(account_id),
        _ => Some(who.user_id.as_str()).filter(|u| !u.is_empty()),
    }
}
