//! The authorization server's records in the state: OAuth grants (a user's consent to a client,
//! with its tokens) and OAuth clients (registered, or fetched from their metadata documents and
//! cached), kept in memory and in the store.

use super::*;

impl State {
    /// Saves a grant (a new one, or its tokens rotated); it lives as long as its refresh token.
    pub(crate) async fn save_grant(&self, g: OAuthGrant) -> Result<Arc<OAuthGrant>, StoreError> {
        self.store.put_record_until(Kind::OAuthGrant, &g.org_id, &g.id, &g, g.refresh_expires_ms).await?;
        let g = Arc::new(g);
        let _copies = self.copies();
        self.grants.insert(g.id.clone(), g.clone());
        self.changes.publish(Change::GrantSaved { org_id: g.org_id.clone(), grant_id: g.id.clone() });
        Ok(g)
    }

    /// Revokes a grant: its access and refresh tokens stop working at once, on every instance
    /// as soon as it hears of the change.
    pub(crate) async fn delete_grant(&self, id: &str) -> Result<bool, StoreError> {
        let deleted = self.store.delete(Kind::OAuthGrant, id).await?;
        let _copies = self.copies();
        if let Some((_, g)) = self.grants.remove(id) {
            self.changes.publish(Change::GrantDeleted { org_id: g.org_id.clone(), grant_id: g.id.clone() });
        }
        Ok(deleted)
    }

    /// Registers a client of the authorization server, or saves it again; a client that
    /// registered itself (no organisation) lives until `expires_at_ms`.
    pub(crate) async fn save_oauth_client(
        &self,
        c: &OAuthClient,
        expires_at_ms: Option<i64>,
    ) -> Result<(), StoreError> {
        match expires_at_ms {
            Some(at) => self.store.put_record_until(Kind::OAuthClient, &c.org_id, &c.id, c, at).await?,
            None => self.store.put_record(Kind::OAuthClient, &c.org_id, &c.id, c).await?,
        }
        let _copies = self.copies();
        self.drop_client(&c.id);
        self.changes.publish(Change::OAuthClientSaved { org_id: c.org_id.clone(), client_id: c.id.clone() });
        Ok(())
    }

    /// Deletes a client, then revokes every grant its users made it: from here on it is refused
    /// on every instance as soon as it hears of the change.
    pub(crate) async fn delete_oauth_client(&self, c: &OAuthClient) -> Result<(), StoreError> {
        self.store.delete(Kind::OAuthClient, &c.id).await?;
        {
            let _copies = self.copies();
            self.drop_client(&c.id);
            self.changes.publish(Change::OAuthClientDeleted { org_id: c.org_id.clone(), client_id: c.id.clone() });
        }
        for grant in self.grants_of_client(&c.id) {
            self.delete_grant(&grant.id).await?;
        }
        Ok(())
    }

    /// A client of the authorization server by its `client_id`: an organisation's from this
    /// instance's copy, read from the store the first time; one that registered itself is read
    /// from the store each time (it expires there).
    pub async fn oauth_client(&self, id: &str) -> Result<Option<Arc<OAuthClient>>, StoreError> {
        use std::sync::atomic::Ordering;
        if let Some(c) = self.clients.get(id) {
            return Ok(Some(c.value().clone()));
        }
        let dropped = self.clients_dropped.load(Ordering::Acquire);
        let Some(body) = self.store.get(Kind::OAuthClient, id).await? else { return Ok(None) };
        let Ok(client) = serde_json::from_str::<OAuthClient>(&body) else { return Ok(None) };
        let client = Arc::new(client);
        if !client.org_id.is_empty() {
            // Kept only if no client changed while it was read: that change may be this one's.
            let _copies = self.copies();
            if self.clients_dropped.load(Ordering::Acquire) == dropped {
                self.clients.insert(id.to_string(), client.clone());
            }
        }
        Ok(Some(client))
    }

    /// Drops this instance's copy of a client (held `copies`).
    pub(super) fn drop_client(&self, id: &str) {
        self.clients_dropped.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.clients.remove(id);
    }

    /// Drops every client held (a reload: changes may have been missed).
    pub(super) fn drop_clients(&self) {
        let _copies = self.copies();
        self.clients_dropped.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.clients.clear();
    }

    /// A grant as this instance knows it.
    pub fn grant(&self, id: &str) -> Option<Arc<OAuthGrant>> {
        self.grants.get(id).map(|g| g.value().clone())
    }

    /// A grant as the store holds it now: what a refresh reads, so that a token rotated on
    /// another instance a moment ago counts as used here too.
    pub(crate) async fn stored_grant(&self, id: &str) -> Result<Option<OAuthGrant>, StoreError> {
        self.read(Kind::OAuthGrant, id).await
    }

    /// The grants of a client (to revoke them with it).
    pub(crate) fn grants_of_client(&self, client_id: &str) -> Vec<Arc<OAuthGrant>> {
        self.grants.iter().filter(|g| g.client_id == client_id).map(|g| g.value().clone()).collect()
    }

    /// The grants a user gave (to revoke them when its password changes).
    pub(crate) fn grants_of_user(&self, user_id: &str) -> Vec<Arc<OAuthGrant>> {
        self.grants.iter().filter(|g| g.user_id == user_id).map(|g| g.value().clone()).collect()
    }
}
