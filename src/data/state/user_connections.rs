//! Each member's (or service account's) own connection of an app connected per user
//! (`connection_scope: user`, docs/identity.md): stored as the organisation's connections are,
//! one record per (organisation, app, user), and held in a map of their own so that one user's
//! connection can never be read as the organisation's or another user's.

use super::State;
use crate::base::pair_key::pair;
use crate::data::changes::Change;
use crate::data::model::Connection;
use crate::data::store::{Kind, StoreError};
use std::sync::Arc;

impl State {
    /// Puts a connection read or written in its map: the organisation's, or its user's.
    pub(super) fn install_connection(&self, c: Arc<Connection>) {
        match &c.user_id {
            Some(user) => drop(self.user_connections.insert((user.clone(), c.app_id.clone()), c)),
            None => drop(self.connections.insert((c.org_id.clone(), c.app_id.clone()), c)),
        }
    }

    /// `user_id`'s own connection of `app_id` in `org_id` (a member or a service account), if
    /// it has one. A connection of another organisation is never returned.
    pub fn user_connection(&self, org_id: &str, user_id: &str, app_id: &str) -> Option<Arc<Connection>> {
        self.user_connections.get(pair(&(user_id, app_id))).map(|c| c.value().clone()).filter(|c| c.org_id == org_id)
    }

    /// Removes `user_id`'s own connection of `app_id`: the removed one, if there was one (its
    /// tokens are the caller's to revoke, `server::connections_ended`).
    pub(crate) async fn delete_user_connection(
        &self,
        org_id: &str,
        user_id: &str,
        app_id: &str,
    ) -> Result<Option<Arc<Connection>>, StoreError> {
        let Some(c) = self.user_connection(org_id, user_id, app_id) else { return Ok(None) };
        self.store.delete(Kind::Connection, &c.id).await?;
        let _copies = self.copies();
        self.user_connections.remove(pair(&(user_id, app_id)));
        let change =
            Change::ConnectionDeleted { org_id: org_id.into(), app_id: app_id.into(), user_id: Some(user_id.into()) };
        self.changes.publish(change);
        Ok(Some(c))
    }

    /// Ends every own connection of `user_id` (a member removed, a user deleted, a password
    /// changed, a service account deleted): each is deleted and its removal goes on the change
    /// feed, so every instance drops the user's upstreams. The removed ones (their tokens are
    /// the caller's to revoke).
    pub(crate) async fn delete_connections_of(
        &self,
        org_id: &str,
        user_id: &str,
    ) -> Result<Vec<Arc<Connection>>, StoreError> {
        let apps: Vec<String> = self
            .user_connections
            .iter()
            .filter(|c| c.key().0 == user_id && c.value().org_id == org_id)
            .map(|c| c.key().1.clone())
            .collect();
        let mut ended = Vec::with_capacity(apps.len());
        for app_id in apps {
            ended.extend(self.delete_user_connection(org_id, user_id, &app_id).await?);
        }
        Ok(ended)
    }

    /// Whether the view an app's lists are read with is connected: the organisation's own
    /// connection, or for a per-user app listed as a service account, that account's.
    pub(crate) fn list_view_connected(&self, org_id: &str, app: &crate::config::AppConfig) -> bool {
        match app.per_user.as_ref().map(|p| &p.list_as) {
            Some(crate::config::ListAs::ServiceAccount(sa)) => {
                self.user_connection(org_id, sa, &app.id).is_some_and(|c| c.status == "connected")
            }
            _ => self.connections.get(pair(&(org_id, app.id.as_str()))).is_some_and(|c| c.status == "connected"),
        }
    }
}
