//! Calls made as the caller: whose connection (and upstream) serves a call to an app
//! ([`UpstreamOwner`]), who the caller is for an app connected by each user (`connection_scope:
//! user`, docs/identity.md "Per-user connections"), and the per-caller upstreams themselves,
//! kept in the one per-caller pool, bounded per app (`caller_pool.rs`).
//!
//! One rule holds it together: a caller's credential is read from that caller's own connection
//! and sent only on that caller's own upstream (its own MCP session with the app), keyed by the
//! member or service account behind the call's credential. Nothing here falls back to another
//! caller's connection or to the organisation's.

use super::{AppClients, AppError};
use crate::base::pair_key::pair;
use crate::config::{AppConfig, ListAs};
use crate::data::model::Connection;
use crate::data::state::State;
use crate::mcp::upstream::Upstream;
use std::sync::Arc;
use toolgate_filters::{CredentialKind, Principal};

/// Whose connection serves a call to an app, and so whose upstream it goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpstreamOwner<'a> {
    /// An app without credentials: one upstream serves every organisation.
    Shared,
    /// The organisation's own connection.
    Organization(&'a str),
    /// A member's or a service account's own connection of a per-user app.
    Subject { org_id: &'a str, subject: &'a str },
}

impl<'a> UpstreamOwner<'a> {
    /// The organisation the call is made in (`""` for a shared upstream).
    pub(crate) fn org_id(self) -> &'a str {
        match self {
            UpstreamOwner::Shared => "",
            UpstreamOwner::Organization(org_id) | UpstreamOwner::Subject { org_id, .. } => org_id,
        }
    }

    /// The connection whose credential the call goes with, if it has one.
    pub(crate) fn connection(self, state: &State, app_id: &str) -> Option<Arc<Connection>> {
        match self {
            UpstreamOwner::Shared => None,
            UpstreamOwner::Organization(org_id) => state.connection(org_id, app_id),
            UpstreamOwner::Subject { org_id, subject } => state.user_connection(org_id, subject, app_id),
        }
    }

    /// Whose view an app's lists (the catalogue, pins, a `test`) are read with: the
    /// organisation's, or for a per-user app listed as a service account, that account's.
    pub(crate) fn for_lists(org_id: &'a str, app: &'a AppConfig) -> UpstreamOwner<'a> {
        if !app.needs_credentials() {
            return UpstreamOwner::Shared;
        }
        match app.per_user.as_ref().map(|p| &p.list_as) {
            Some(ListAs::ServiceAccount(sa)) => UpstreamOwner::Subject { org_id, subject: sa },
            _ => UpstreamOwner::Organization(org_id),
        }
    }
}

/// Where a member connects a per-user app: the console's apps page (`{auth_url}/console`, under
/// `web.path`), which signs the person in first (the URL carries no token and is not
/// pre-authenticated).
pub(crate) fn connect_url(public_url: &str, web_path: &str, app_id: &str) -> String {
    format!("{}{web_path}/console/apps?connect={app_id}", public_url.trim_end_matches('/'))
}

/// The member or service account behind a call's credential, for a per-user app: a user's API
/// key, a JWT or OAuth token naming a member, the console's web session: that member; a service
/// account's key: the account. A gateway key is shared by everyone who holds it and names no
/// user; nor does a token whose subject is no member of the organisation.
fn subject_of<'p>(state: &State, who: &'p Principal, app_id: &str) -> Result<&'p str, AppError> {
    match &who.credential {
        CredentialKind::GatewayKey { .. } => Err(AppError::NoCaller { app: app_id.into(), gateway_key: true }),
        CredentialKind::ServiceAccount { account_id } => Ok(account_id),
        _ if state.user(&who.user_id).is_some_and(|u| u.org_id == who.org_id) => Ok(&who.user_id),
        _ => Err(AppError::NoCaller { app: app_id.into(), gateway_key: false }),
    }
}

impl AppClients {
    /// Whose connection a call of `who` in `org_id` to `app` goes with: the shared upstream
    /// for an app without credentials, the organisation's for an app connected once, else the
    /// caller's own, which must be connected (the refusal says where to connect). The one
    /// place a call's owner is decided; a per-caller credential of another kind (a token
    /// exchanged for the caller's) belongs here too.
    pub(crate) fn owner_for_call<'a>(
        &self,
        org_id: &'a str,
        who: Option<&'a Principal>,
        app: &AppConfig,
    ) -> Result<UpstreamOwner<'a>, AppError> {
        if !app.needs_credentials() {
            return Ok(UpstreamOwner::Shared);
        }
        if app.per_user.is_none() {
            return Ok(UpstreamOwner::Organization(org_id));
        }
        let who = who.ok_or_else(|| AppError::NoCaller { app: app.id.clone(), gateway_key: false })?;
        let subject = subject_of(&self.state, who, &app.id)?;
        let owner = UpstreamOwner::Subject { org_id, subject };
        if owner.connection(&self.state, &app.id).is_some_and(|c| c.status == "connected") {
            return Ok(owner);
        }
        let service_account = matches!(who.credential, CredentialKind::ServiceAccount { .. });
        let config = self.state.config();
        let url = connect_url(&config.server.public_url, &config.web.path, &app.id);
        Err(AppError::NotConnectedByCaller { app: app.id.clone(), url, service_account })
    }

    /// The caller's own upstream of a per-user app, made on first use with the caller's own
    /// credential. At most the app's `max_user_sessions` are kept: the least recently used idle
    /// one is closed to make room; when every one is in use the call is refused.
    pub(super) fn user_upstream(&self, owner: UpstreamOwner<'_>, app: &AppConfig) -> Result<Arc<Upstream>, AppError> {
        let UpstreamOwner::Subject { org_id, subject } = owner else {
            return Err(AppError::NoCaller { app: app.id.clone(), gateway_key: false });
        };
        if let Some(up) = self.users.get(pair(&(subject, app.id.as_str()))) {
            return Ok(up);
        }
        let settings = self.settings_with(app, self.credential(owner, app));
        // Its notices (list changes) are the organisation's, whose catalogue shows the app.
        let up = Upstream::for_owner(org_id, &settings, &self.shared)
            .map_err(|error| AppError::Upstream { app: app.id.clone(), error: Box::new(error) })?;
        let most = app.per_user.as_ref().map_or(1, |p| p.max_user_sessions);
        let (up, evicted) = self.users.insert((subject.to_string(), app.id.clone()), &app.id, Arc::new(up), most);
        if let Some(old) = evicted {
            tokio::spawn(async move { old.shutdown().await });
        }
        up.ok_or(AppError::UserSessionsFull { app: app.id.clone(), most })
    }

    /// The upstream a caller's notification to an app (a cancellation, a change of roots) goes
    /// on: the one its calls went on, the caller's own for an app called as each caller (`who`
    /// the notification's credential; `bearer` its token, for an app that exchanges it). Never
    /// made here: a caller without one has no call there to tell of anything.
    pub(crate) fn upstream_for_notification(
        &self,
        org_id: &str,
        who: Option<&Principal>,
        bearer: Option<&str>,
        app_id: &str,
    ) -> Option<Arc<Upstream>> {
        let app = self.app(app_id).ok()?;
        if app.oauth.as_ref().is_some_and(|o| o.token_exchange.is_some()) {
            return self.exchanged_upstream(bearer?, app_id);
        }
        if app.per_user.is_some() && app.needs_credentials() {
            let subject = subject_of(&self.state, who?, app_id).ok()?;
            return self.users.get(pair(&(subject, app_id)));
        }
        self.upstream(org_id, app_id).ok()
    }

    /// Closes every upstream of `subject` (a member or a service account gone).
    pub(crate) fn forget_upstreams_of(&self, subject: &str) {
        for up in self.users.remove_where(|(s, _), _| s == subject) {
            tokio::spawn(async move { up.shutdown().await });
        }
    }

    /// Forgets a caller's upstream of an app (its connection changed or ended): the next call
    /// opens another with the connection as it is now, or is refused if it is gone.
    pub(crate) fn forget_user_upstream(&self, subject: &str, app_id: &str) {
        if let Some(up) = self.users.remove(pair(&(subject, app_id))) {
            tokio::spawn(async move { up.shutdown().await });
        }
    }
}
