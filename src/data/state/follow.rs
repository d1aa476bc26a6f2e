//! Bringing this instance's copies of records in step with the store, which another process
//! may have written: a full reload (after the change feed was lost, every `peers::RESYNC`, and
//! while an old and a new process overlap in an upgrade), one organisation's records (under
//! [`State::lock_writes`]), and the one record another instance's change names.
//!
//! Why this is more than "read, then put in place": between the read and the putting in place,
//! this instance may write one of those records itself (a gateway created through the API).
//! Its write is durable and its copy is newer than the one read, so putting the older copy in
//! place would lose it here (a reload dropped a gateway created a moment before, and nothing
//! brought it back until the next reload). So every change this instance publishes while a
//! read is on its way is noted (a subscription to its own feed, made before the read); the
//! copies read of those records are not put in place, and those records are read again, until
//! a read meets no write of this instance. A write's copy update and its publication, and the
//! putting in place of copies read, hold the state's `copies` lock, so no write falls between
//! the note and the putting in place.

use super::{decode, decode_versioned, State};
use crate::base::fast_map::FastMap;
use crate::data::changes::Change;
use crate::data::model::*;
use crate::data::store::{Kind, StoreError};
use serde::de::DeserializeOwned;
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::broadcast::{self, error::TryRecvError};

/// A record of which this instance keeps a copy, by what names it in a [`Change`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Named {
    Organization(String),
    User(String),
    Key(String),
    Gateway(String),
    /// By organisation and app: a connection is found by these, not by its id.
    Connection(String, String),
    /// A user's (or service account's) own connection: organisation, app, user.
    UserConnection(String, String, String),
    ServiceAccount(String),
    Webhook(String),
    Grant(String),
}

impl Named {
    fn of(change: &Change) -> Option<Named> {
        Some(match change {
            Change::OrganizationSaved { org_id } => Named::Organization(org_id.clone()),
            Change::UserSaved { user_id, .. } | Change::UserDeleted { user_id, .. } => Named::User(user_id.clone()),
            Change::KeySaved { key_id, .. } | Change::KeyDeleted { key_id, .. } => Named::Key(key_id.clone()),
            Change::GatewaySaved { gateway_id, .. } | Change::GatewayDeleted { gateway_id, .. } => {
                Named::Gateway(gateway_id.clone())
            }
            Change::ConnectionSaved { org_id, app_id, user_id, .. }
            | Change::ConnectionDeleted { org_id, app_id, user_id } => match user_id {
                Some(user) => Named::UserConnection(org_id.clone(), app_id.clone(), user.clone()),
                None => Named::Connection(org_id.clone(), app_id.clone()),
            },
            Change::ServiceAccountSaved { account_id, .. } | Change::ServiceAccountDeleted { account_id, .. } => {
                Named::ServiceAccount(account_id.clone())
            }
            Change::WebhookSaved { webhook_id, .. } | Change::WebhookDeleted { webhook_id, .. } => {
                Named::Webhook(webhook_id.clone())
            }
            Change::GrantSaved { grant_id, .. } | Change::GrantDeleted { grant_id, .. } => {
                Named::Grant(grant_id.clone())
            }
            // Clients are held read-through (dropped, not read again: `apply_peer_change`);
            // web sessions and passwords are not held by the state (their listeners follow).
            Change::SessionCreated { .. }
            | Change::SessionEnded { .. }
            | Change::OAuthClientSaved { .. }
            | Change::OAuthClientDeleted { .. }
            | Change::WebSessionStarted { .. }
            | Change::WebSessionEnded { .. }
            | Change::PasswordChanged { .. }
            // Tool pins are read from the store when a catalogue needs them; the MCP runtime
            // drops its copy on these changes.
            | Change::ToolPinsSaved { .. }
            | Change::ToolChangeDetected { .. }
            // Elicitations are the MCP runtime's, held in memory by its listener.
            | Change::ElicitationIssued { .. }
            | Change::ElicitationCompleted { .. } => return None,
        })
    }
}

/// The records this instance wrote while copies were being read.
struct WrittenMeanwhile(HashSet<Named>);

impl WrittenMeanwhile {
    /// What `since` (subscribed before the read) has heard, taken with the `copies` lock held;
    /// `None` when it fell behind, so which records were written is not known.
    fn heard(since: &mut broadcast::Receiver<Change>) -> Option<WrittenMeanwhile> {
        let mut names = HashSet::new();
        loop {
            match since.try_recv() {
                Ok(change) => names.extend(Named::of(&change)),
                Err(TryRecvError::Empty | TryRecvError::Closed) => return Some(WrittenMeanwhile(names)),
                Err(TryRecvError::Lagged(_)) => return None,
            }
        }
    }

    fn has(&self, name: impl FnOnce() -> Named) -> bool {
        !self.0.is_empty() && self.0.contains(&name())
    }
}

/// A record kept in a map by id, within an organisation.
trait Held {
    fn id(&self) -> &str;
    fn org_id(&self) -> &str;
}

/// A family of records kept in a map by id.
trait Record: DeserializeOwned + Held {
    const KIND: Kind;
    fn named(id: &str) -> Named;
}

macro_rules! record {
    ($t:ty, $kind:expr, $named:ident, $org:ident) => {
        impl Held for $t {
            fn id(&self) -> &str {
                &self.id
            }
            fn org_id(&self) -> &str {
                &self.$org
            }
        }
        impl Record for $t {
            const KIND: Kind = $kind;
            fn named(id: &str) -> Named {
                Named::$named(id.to_string())
            }
        }
    };
}

/// A gateway or a key written by a newer toolgate, held apart (named as the record it is).
impl Held for NewerRecord {
    fn id(&self) -> &str {
        &self.id
    }
    fn org_id(&self) -> &str {
        &self.org_id
    }
}

record!(Organization, Kind::Organization, Organization, id);
record!(User, Kind::User, User, org_id);
record!(ApiKey, Kind::ApiKey, Key, org_id);
record!(Gateway, Kind::Gateway, Gateway, org_id);
record!(ServiceAccount, Kind::ServiceAccount, ServiceAccount, org_id);
record!(Webhook, Kind::Webhook, Webhook, org_id);
record!(OAuthGrant, Kind::OAuthGrant, Grant, org_id);

/// Which records a read covers.
#[derive(Clone, Copy)]
enum Scope<'a> {
    All,
    Organization(&'a str),
}

impl Scope<'_> {
    fn covers(&self, org_id: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Organization(o) => *o == org_id,
        }
    }
}

/// One family as the store held it within a scope: the copies to put in place, and the ids of
/// those held here that the store no longer has.
struct Diff<T> {
    put: Vec<T>,
    gone: Vec<String>,
}

impl<T: Record> Diff<T> {
    /// Leaves out the records written here meanwhile, either way.
    fn of(held: &FastMap<String, Arc<T>>, rows: Vec<T>, scope: Scope<'_>, meanwhile: &WrittenMeanwhile) -> Diff<T> {
        Diff::named(held, rows, scope, meanwhile, T::named)
    }
}

impl<T: Held> Diff<T> {
    /// [`Diff::of`] for records named by `named`.
    fn named(
        held: &FastMap<String, Arc<T>>,
        rows: Vec<T>,
        scope: Scope<'_>,
        meanwhile: &WrittenMeanwhile,
        named: fn(&str) -> Named,
    ) -> Diff<T> {
        let ids: HashSet<&str> = rows.iter().map(|r| r.id()).collect();
        let gone = held
            .iter()
            .filter(|r| {
                scope.covers(r.org_id()) && !ids.contains(r.key().as_str()) && !meanwhile.has(|| named(r.key()))
            })
            .map(|r| r.key().clone())
            .collect();
        drop(ids);
        let put = rows.into_iter().filter(|r| !meanwhile.has(|| named(r.id()))).collect();
        Diff { put, gone }
    }
}

/// What a reload or an organisation's refresh read. Connections, webhooks and grants are read
/// by a reload only (`None`: not read).
#[derive(Default)]
struct Snapshot {
    orgs: Vec<Organization>,
    users: Vec<User>,
    keys: Vec<ApiKey>,
    accounts: Vec<ServiceAccount>,
    gateways: Vec<Gateway>,
    /// Keys and gateways written by a newer toolgate.
    newer_keys: Vec<NewerRecord>,
    newer_gateways: Vec<NewerRecord>,
    connections: Option<Vec<Connection>>,
    webhooks: Option<Vec<Webhook>>,
    grants: Option<Vec<OAuthGrant>>,
}

impl State {
    /// Reads every record again and drops those the store no longer has: what an instance does
    /// when it may have missed other instances' changes (its feed connection was lost). The
    /// listeners hear of every gateway and connection, whose caches may be stale.
    pub async fn reload(&self) -> Result<(), StoreError> {
        let meanwhile = loop {
            let mut since = self.changes.subscribe();
            let (keys, newer_keys) = self.versioned_rows(Kind::ApiKey, Scope::All).await?;
            let (gateways, newer_gateways) = self.versioned_rows(Kind::Gateway, Scope::All).await?;
            let snapshot = Snapshot {
                orgs: self.rows(Kind::Organization, Scope::All).await?,
                users: self.rows(Kind::User, Scope::All).await?,
                keys,
                accounts: self.rows(Kind::ServiceAccount, Scope::All).await?,
                gateways,
                newer_keys,
                newer_gateways,
                connections: Some(self.rows(Kind::Connection, Scope::All).await?),
                webhooks: Some(self.rows(Kind::Webhook, Scope::All).await?),
                grants: Some(self.rows(Kind::OAuthGrant, Scope::All).await?),
            };
            if let Some(meanwhile) = self.put_in_place(snapshot, Scope::All, &mut since) {
                break meanwhile;
            }
        };
        self.read_again(meanwhile).await?;
        self.drop_clients();
        let gateways: Vec<(String, String)> = self.gateways.iter().map(|g| (g.org_id.clone(), g.id.clone())).collect();
        for (org_id, gateway_id) in gateways {
            self.changes.follow_peer(&Change::GatewaySaved { org_id, gateway_id, created: false });
        }
        let keys: Vec<(String, String)> = self.keys.iter().map(|k| (k.org_id.clone(), k.id.clone())).collect();
        if let Some((org_id, key_id)) = keys.into_iter().next() {
            // One is enough: the runtime then checks every session's key.
            self.changes.follow_peer(&Change::KeySaved { org_id, key_id });
        }
        Ok(())
    }

    /// Reads one organisation's records again and drops those the store no longer has (see
    /// [`State::lock_writes`]).
    pub(super) async fn refresh_org(&self, org_id: &str) -> Result<(), StoreError> {
        let scope = Scope::Organization(org_id);
        let meanwhile = loop {
            let mut since = self.changes.subscribe();
            let (keys, newer_keys) = self.versioned_rows(Kind::ApiKey, scope).await?;
            let (gateways, newer_gateways) = self.versioned_rows(Kind::Gateway, scope).await?;
            let snapshot = Snapshot {
                orgs: self.read::<Organization>(Kind::Organization, org_id).await?.into_iter().collect(),
                users: self.rows(Kind::User, scope).await?,
                keys,
                accounts: self.rows(Kind::ServiceAccount, scope).await?,
                gateways,
                newer_keys,
                newer_gateways,
                ..Snapshot::default()
            };
            if let Some(meanwhile) = self.put_in_place(snapshot, scope, &mut since) {
                break meanwhile;
            }
        };
        self.read_again(meanwhile).await
    }

    /// Follows a change another instance made (several instances on one store, `peers.rs`): the
    /// record it names is read from the store and this instance's copy replaced or removed, then
    /// the listeners (caches) are told. The store is the truth, so a change heard twice, or late,
    /// leaves the same state.
    pub(crate) async fn apply_peer_change(&self, change: &Change) -> Result<(), StoreError> {
        if let Some(name) = Named::of(change) {
            self.read_again(WrittenMeanwhile(HashSet::from([name]))).await?;
        }
        if let Change::OAuthClientSaved { client_id, .. } | Change::OAuthClientDeleted { client_id, .. } = change {
            let _copies = self.copies();
            self.drop_client(client_id);
        }
        self.changes.follow_peer(change);
        Ok(())
    }

    /// Every record of `kind` within `scope`, decoded.
    async fn rows<T: DeserializeOwned>(&self, kind: Kind, scope: Scope<'_>) -> Result<Vec<T>, StoreError> {
        let rows = self.bodies(kind, scope).await?;
        rows.iter().map(|(id, body)| decode(kind, id, body)).collect()
    }

    /// Every versioned record of `kind` within `scope`: those this build reads, and those
    /// written by a newer toolgate.
    async fn versioned_rows<T: DeserializeOwned>(
        &self,
        kind: Kind,
        scope: Scope<'_>,
    ) -> Result<(Vec<T>, Vec<NewerRecord>), StoreError> {
        let (mut known, mut newer) = (Vec::new(), Vec::new());
        for (id, body) in self.bodies(kind, scope).await? {
            match decode_versioned(kind, &id, &body)? {
                Versioned::Known(r) => known.push(r),
                Versioned::Newer(n) => newer.push(n),
            }
        }
        Ok((known, newer))
    }

    async fn bodies(&self, kind: Kind, scope: Scope<'_>) -> Result<Vec<(String, String)>, StoreError> {
        match scope {
            Scope::All => self.store.load_all(kind).await,
            Scope::Organization(org_id) => self.store.load_partition(kind, org_id).await,
        }
    }

    /// Puts `snapshot` in place, but for the records this instance wrote since `since` was
    /// subscribed, which it returns (to be read again); `None`, with nothing put in place, when
    /// which those are is not known.
    fn put_in_place(
        &self,
        snapshot: Snapshot,
        scope: Scope<'_>,
        since: &mut broadcast::Receiver<Change>,
    ) -> Option<WrittenMeanwhile> {
        let _copies = self.copies();
        let meanwhile = WrittenMeanwhile::heard(since)?;
        let orgs = Diff::of(&self.orgs, snapshot.orgs, scope, &meanwhile);
        if let Scope::All = scope {
            // An organisation's refresh only reads it again; it never finds it gone.
            for id in orgs.gone {
                self.orgs.remove(&id);
            }
        }
        for org in orgs.put {
            self.install_org(org);
        }
        let users = Diff::of(&self.users, snapshot.users, scope, &meanwhile);
        for id in users.gone {
            self.users.remove(&id);
        }
        for user in users.put {
            self.install_user(user);
        }
        let accounts = Diff::of(&self.service_accounts, snapshot.accounts, scope, &meanwhile);
        for id in accounts.gone {
            self.service_accounts.remove(&id);
        }
        for account in accounts.put {
            self.install_service_account(account);
        }
        let keys = Diff::of(&self.keys, snapshot.keys, scope, &meanwhile);
        for id in keys.gone {
            self.uninstall_key(&id);
        }
        for key in keys.put {
            self.install_key(key);
        }
        replace(&self.gateways, Diff::of(&self.gateways, snapshot.gateways, scope, &meanwhile));
        let keys = Diff::named(&self.newer_keys, snapshot.newer_keys, scope, &meanwhile, |id| Named::Key(id.into()));
        self.replace_newer(Kind::ApiKey, keys);
        let gateways = |id: &str| Named::Gateway(id.into());
        self.replace_newer(
            Kind::Gateway,
            Diff::named(&self.newer_gateways, snapshot.newer_gateways, scope, &meanwhile, gateways),
        );
        if let Some(rows) = snapshot.webhooks {
            replace(&self.webhooks, Diff::of(&self.webhooks, rows, scope, &meanwhile));
        }
        if let Some(rows) = snapshot.grants {
            replace(&self.grants, Diff::of(&self.grants, rows, scope, &meanwhile));
        }
        if let Some(rows) = snapshot.connections {
            let (users, rows): (Vec<Connection>, Vec<Connection>) = rows.into_iter().partition(|c| c.user_id.is_some());
            self.replace_user_connections(users, scope, &meanwhile);
            let held: HashSet<(String, String)> = rows.iter().map(|c| (c.org_id.clone(), c.app_id.clone())).collect();
            let written = |org: &str, app: &str| meanwhile.has(|| Named::Connection(org.into(), app.into()));
            self.connections.retain(|(org, app), _| {
                !scope.covers(org) || held.contains(&(org.clone(), app.clone())) || written(org, app)
            });
            for c in rows {
                if !written(&c.org_id, &c.app_id) {
                    self.connections.insert((c.org_id.clone(), c.app_id.clone()), Arc::new(c));
                }
            }
        }
        self.principals.clear();
        Some(meanwhile)
    }

    /// Reads the records named again, one by one, and puts each in place, until a read meets no
    /// write of this instance to the record it read.
    async fn read_again(&self, mut names: WrittenMeanwhile) -> Result<(), StoreError> {
        while !names.0.is_empty() {
            let mut since = self.changes.subscribe();
            let mut read = Vec::with_capacity(names.0.len());
            for name in names.0.drain() {
                let stored = self.read_named(&name).await?;
                read.push((name, stored));
            }
            let _copies = self.copies();
            match WrittenMeanwhile::heard(&mut since) {
                None => names.0.extend(read.into_iter().map(|(name, _)| name)),
                Some(meanwhile) => {
                    for (name, stored) in read {
                        if meanwhile.0.contains(&name) {
                            names.0.insert(name);
                        } else {
                            self.put_named(&name, stored)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The store's copy of the record `name`; `None`: the store does not have it.
    async fn read_named(&self, name: &Named) -> Result<Option<Stored>, StoreError> {
        let (kind, id) = match name {
            Named::Organization(id) => (Kind::Organization, id),
            Named::User(id) => (Kind::User, id),
            Named::Key(id) => (Kind::ApiKey, id),
            Named::Gateway(id) => (Kind::Gateway, id),
            Named::ServiceAccount(id) => (Kind::ServiceAccount, id),
            Named::Webhook(id) => (Kind::Webhook, id),
            Named::Grant(id) => (Kind::OAuthGrant, id),
            Named::Connection(org_id, app_id) => return self.read_connection(org_id, app_id, None).await,
            Named::UserConnection(org_id, app_id, user) => {
                return self.read_connection(org_id, app_id, Some(user)).await;
            }
        };
        Ok(self.store.get(kind, id).await?.map(|body| Stored { id: id.clone(), body }))
    }

    /// Puts the store's copy of `name` in place (`None`: drops this instance's).
    fn put_named(&self, name: &Named, stored: Option<Stored>) -> Result<(), StoreError> {
        fn parse<T: Record>(stored: Option<Stored>) -> Result<Option<T>, StoreError> {
            stored.map(|s| decode(T::KIND, &s.id, &s.body)).transpose()
        }
        fn versioned<T: DeserializeOwned>(
            kind: Kind,
            stored: Option<Stored>,
        ) -> Result<Option<Versioned<T>>, StoreError> {
            stored.map(|s| decode_versioned(kind, &s.id, &s.body)).transpose()
        }
        fn follow<T: Record>(
            map: &FastMap<String, Arc<T>>,
            id: &str,
            stored: Option<Stored>,
        ) -> Result<(), StoreError> {
            match parse::<T>(stored)? {
                Some(record) => map.insert(id.to_string(), Arc::new(record)),
                None => map.remove(id).map(|(_, r)| r),
            };
            Ok(())
        }
        match name {
            Named::Organization(_) => {
                // Organisations are never deleted; one the store lacks is left as it is.
                if let Some(org) = parse::<Organization>(stored)? {
                    self.install_org(org);
                }
            }
            Named::User(id) => match parse::<User>(stored)? {
                Some(user) => {
                    self.install_user(user);
                }
                None => {
                    self.users.remove(id);
                    self.principals.clear();
                }
            },
            Named::Key(id) => match versioned::<ApiKey>(Kind::ApiKey, stored)? {
                Some(Versioned::Known(key)) => {
                    self.newer_keys.remove(id);
                    self.install_key(key);
                }
                Some(Versioned::Newer(n)) => {
                    self.uninstall_key(id);
                    self.hold_newer(Kind::ApiKey, n);
                }
                None => {
                    self.newer_keys.remove(id);
                    self.uninstall_key(id);
                }
            },
            Named::ServiceAccount(id) => match parse::<ServiceAccount>(stored)? {
                Some(account) => {
                    self.install_service_account(account);
                }
                None => {
                    self.service_accounts.remove(id);
                    self.principals.clear();
                }
            },
            Named::Gateway(id) => match versioned::<Gateway>(Kind::Gateway, stored)? {
                Some(Versioned::Known(gw)) => {
                    self.newer_gateways.remove(id);
                    self.gateways.insert(id.clone(), Arc::new(gw));
                }
                Some(Versioned::Newer(n)) => {
                    self.gateways.remove(id);
                    self.hold_newer(Kind::Gateway, n);
                }
                None => {
                    self.newer_gateways.remove(id);
                    self.gateways.remove(id);
                }
            },
            Named::Webhook(id) => follow(&self.webhooks, id, stored)?,
            Named::Grant(id) => follow(&self.grants, id, stored)?,
            Named::Connection(org_id, app_id) => {
                let key = (org_id.clone(), app_id.clone());
                match stored.map(|s| decode::<Connection>(Kind::Connection, &s.id, &s.body)).transpose()? {
                    Some(c) => self.connections.insert(key, Arc::new(c)),
                    None => self.connections.remove(&key).map(|(_, c)| c),
                };
            }
            Named::UserConnection(_, app_id, user) => {
                let key = (user.clone(), app_id.clone());
                match stored.map(|s| decode::<Connection>(Kind::Connection, &s.id, &s.body)).transpose()? {
                    Some(c) => self.user_connections.insert(key, Arc::new(c)),
                    None => self.user_connections.remove(&key).map(|(_, c)| c),
                };
            }
        }
        Ok(())
    }
}

impl State {
    /// The store's copy of the organisation's connection of `app_id` (`user` none), or of that
    /// user's own: stored by their own id, named by their app and user, so the organisation's
    /// are searched, and one user's is never taken for the organisation's or another's.
    async fn read_connection(
        &self,
        org_id: &str,
        app_id: &str,
        user: Option<&String>,
    ) -> Result<Option<Stored>, StoreError> {
        for (id, body) in self.store.load_partition(Kind::Connection, org_id).await? {
            let c: Connection = decode(Kind::Connection, &id, &body)?;
            if c.app_id == app_id && c.user_id.as_ref() == user {
                return Ok(Some(Stored { id, body }));
            }
        }
        Ok(None)
    }

    /// Puts the users' own connections of a reload in place, as the organisations' are.
    fn replace_user_connections(&self, rows: Vec<Connection>, scope: Scope<'_>, meanwhile: &WrittenMeanwhile) {
        let key = |c: &Connection| (c.user_id.clone().unwrap_or_default(), c.app_id.clone());
        let held: HashSet<(String, String)> = rows.iter().map(key).collect();
        let written =
            |c: &Connection| meanwhile.has(|| Named::UserConnection(c.org_id.clone(), c.app_id.clone(), key(c).0));
        self.user_connections.retain(|k, c| !scope.covers(&c.org_id) || held.contains(k) || written(c));
        for c in rows {
            if !written(&c) {
                self.user_connections.insert(key(&c), Arc::new(c));
            }
        }
    }

    /// Puts a diff of records written by a newer toolgate in place, telling of those newly met.
    fn replace_newer(&self, kind: Kind, diff: Diff<NewerRecord>) {
        let map = self.newer_of(kind);
        for id in diff.gone {
            map.remove(&id);
        }
        for n in diff.put {
            if map.contains_key(&n.id) {
                map.insert(n.id.clone(), Arc::new(n));
            } else {
                self.hold_newer(kind, n);
            }
        }
    }
}

/// A record's body as the store holds it, with its id in the store (for a connection, not the
/// app id it is named by).
struct Stored {
    id: String,
    body: String,
}

/// Puts a family's diff in place in a map that has nothing beside it to keep in step.
fn replace<T: Held>(map: &FastMap<String, Arc<T>>, diff: Diff<T>) {
    for id in diff.gone {
        map.remove(&id);
    }
    for record in diff.put {
        map.insert(record.id().to_string(), Arc::new(record));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::secrets::Sealer;
    use crate::data::store::EmbeddedStore;
    use crate::data::store::{LogQuery, LogRecord, LogRow, RollupQuery, Store, Stored};
    use crate::observe::rollup::Rollup;
    use async_trait::async_trait;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::sync::Notify;
    use toolgate_filters::rate_limit::UsageMinute;

    /// The embedded store, but once armed its next read of `held` records stops after reading
    /// until released: the moment between a read and the putting in place, held open.
    struct HeldRead {
        inner: EmbeddedStore,
        held: Kind,
        armed: AtomicBool,
        reached: Notify,
        release: Notify,
    }

    impl HeldRead {
        async fn hold(&self, kind: Kind) {
            if kind == self.held && self.armed.swap(false, Ordering::SeqCst) {
                self.reached.notify_one();
                self.release.notified().await;
            }
        }
    }

    #[async_trait]
    impl Store for HeldRead {
        async fn put(&self, kind: Kind, partition: &str, id: &str, json: String) -> Result<(), StoreError> {
            self.inner.put(kind, partition, id, json).await
        }
        async fn put_many(&self, kind: Kind, items: Vec<Stored>) -> Result<(), StoreError> {
            self.inner.put_many(kind, items).await
        }
        async fn put_expiring(&self, kind: Kind, p: &str, id: &str, json: String, at: i64) -> Result<(), StoreError> {
            self.inner.put_expiring(kind, p, id, json, at).await
        }
        async fn put_if_absent(&self, kind: Kind, p: &str, id: &str, json: String) -> Result<bool, StoreError> {
            self.inner.put_if_absent(kind, p, id, json).await
        }
        async fn get(&self, kind: Kind, id: &str) -> Result<Option<String>, StoreError> {
            let read = self.inner.get(kind, id).await;
            self.hold(kind).await;
            read
        }
        async fn take(&self, kind: Kind, id: &str) -> Result<Option<String>, StoreError> {
            self.inner.take(kind, id).await
        }
        async fn delete(&self, kind: Kind, id: &str) -> Result<bool, StoreError> {
            self.inner.delete(kind, id).await
        }
        async fn load_all(&self, kind: Kind) -> Result<Vec<(String, String)>, StoreError> {
            let read = self.inner.load_all(kind).await;
            self.hold(kind).await;
            read
        }
        async fn load_partition(&self, kind: Kind, p: &str) -> Result<Vec<(String, String)>, StoreError> {
            let read = self.inner.load_partition(kind, p).await;
            self.hold(kind).await;
            read
        }
        async fn sweep_expired(&self) -> Result<u64, StoreError> {
            self.inner.sweep_expired().await
        }
        async fn append_logs(&self, entries: Arc<Vec<LogRecord>>, rollups: Vec<Rollup>) -> Result<(), StoreError> {
            self.inner.append_logs(entries, rollups).await
        }
        async fn log_page(&self, q: LogQuery, offset: u64, limit: u32) -> Result<(u64, Vec<LogRow>), StoreError> {
            self.inner.log_page(q, offset, limit).await
        }
        async fn rollups(&self, q: RollupQuery) -> Result<Vec<Rollup>, StoreError> {
            self.inner.rollups(q).await
        }
        async fn prune_logs(&self, before_ms: i64, max_rows: u64) -> Result<u64, StoreError> {
            self.inner.prune_logs(before_ms, max_rows).await
        }
        async fn prune_rollups(&self, tier_ms: i64, before_ms: i64) -> Result<u64, StoreError> {
            self.inner.prune_rollups(tier_ms, before_ms).await
        }
        async fn add_rate_usage(&self, minutes: Arc<Vec<UsageMinute>>) -> Result<(), StoreError> {
            self.inner.add_rate_usage(minutes).await
        }
        async fn rate_usage(&self, key_id: String, since_unix: i64) -> Result<Vec<UsageMinute>, StoreError> {
            self.inner.rate_usage(key_id, since_unix).await
        }
        async fn prune_rate_usage(&self, before_unix: i64) -> Result<u64, StoreError> {
            self.inner.prune_rate_usage(before_unix).await
        }
        async fn ping(&self) -> Result<(), StoreError> {
            self.inner.ping().await
        }
    }

    async fn state_on_held_reads(dir: &std::path::Path) -> (Arc<State>, Arc<HeldRead>) {
        let store = Arc::new(HeldRead {
            inner: EmbeddedStore::open(dir).unwrap(),
            held: Kind::Gateway,
            armed: AtomicBool::new(false),
            reached: Notify::new(),
            release: Notify::new(),
        });
        let config = Arc::new(crate::config::Config::parse("server:\n  listen: 127.0.0.1:0\n").unwrap());
        let (state, _) =
            State::open_on(config, store.clone(), Sealer::from_key([7; 32]), Some("tg_test_key".into())).await.unwrap();
        (state, store)
    }

    fn gateway(id: &str, name: &str) -> Gateway {
        Gateway { name: name.into(), ..Gateway::for_tests(id, "org_1") }
    }

    fn name_held(state: &State, id: &str) -> Option<String> {
        state.gateway(id).map(|g| g.name.clone())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reload_keeps_what_this_instance_wrote_while_it_read() {
        let dir = tempfile::tempdir().unwrap();
        let (state, store) = state_on_held_reads(dir.path()).await;
        state.save_gateway(gateway("gw_kept", "first")).await.unwrap();
        state.save_gateway(gateway("gw_doomed", "doomed")).await.unwrap();

        store.armed.store(true, Ordering::SeqCst);
        let reload = tokio::spawn({
            let state = state.clone();
            async move { state.reload().await }
        });
        store.reached.notified().await;
        // The reload has read the gateways; now this instance writes three of them.
        state.save_gateway(gateway("gw_new", "new")).await.unwrap();
        state.save_gateway(gateway("gw_kept", "second")).await.unwrap();
        state.delete_gateway("gw_doomed").await.unwrap();
        store.release.notify_one();
        reload.await.unwrap().unwrap();

        assert_eq!(name_held(&state, "gw_new").as_deref(), Some("new"), "a gateway created meanwhile is kept");
        assert_eq!(name_held(&state, "gw_kept").as_deref(), Some("second"), "an update made meanwhile is kept");
        assert_eq!(name_held(&state, "gw_doomed"), None, "a gateway deleted meanwhile stays deleted");
        // And what is held is what the store holds.
        assert!(store.inner.get(Kind::Gateway, "gw_new").await.unwrap().is_some());
        assert!(store.inner.get(Kind::Gateway, "gw_doomed").await.unwrap().is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_change_read_before_a_write_here_does_not_undo_it() {
        let dir = tempfile::tempdir().unwrap();
        let (state, store) = state_on_held_reads(dir.path()).await;
        state.save_gateway(gateway("gw_1", "first")).await.unwrap();

        store.armed.store(true, Ordering::SeqCst);
        let follow = tokio::spawn({
            let state = state.clone();
            async move {
                let change = Change::GatewaySaved { org_id: "org_1".into(), gateway_id: "gw_1".into(), created: false };
                state.apply_peer_change(&change).await
            }
        });
        store.reached.notified().await;
        // The change's record has been read ("first"); now this instance renames it.
        state.save_gateway(gateway("gw_1", "second")).await.unwrap();
        store.release.notify_one();
        follow.await.unwrap().unwrap();
        assert_eq!(name_held(&state, "gw_1").as_deref(), Some("second"));
    }

    fn client(id: &str, org_id: &str) -> OAuthClient {
        OAuthClient {
            id: id.into(),
            org_id: org_id.into(),
            name: "App".into(),
            redirect_uris: vec!["https://app.example/cb".into()],
            scopes: vec!["gateways:read".into()],
            public: true,
            secret_hash: None,
            created_by: "usr_1".into(),
            created_at: chrono::Utc::now(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_is_held_once_read_and_dropped_by_its_change_from_another_instance() {
        let dir = tempfile::tempdir().unwrap();
        let (state, store) = state_on_held_reads(dir.path()).await;
        let mut heard = state.changes.subscribe();
        state.save_oauth_client(&client("tgc_1", "org_1"), None).await.unwrap();
        assert_eq!(
            heard.try_recv().unwrap(),
            Change::OAuthClientSaved { org_id: "org_1".into(), client_id: "tgc_1".into() },
            "a saved client is a change"
        );
        assert!(state.oauth_client("tgc_1").await.unwrap().is_some());
        // Another instance deletes it: the store no longer has it, this instance's copy stays
        // until the change arrives.
        store.inner.delete(Kind::OAuthClient, "tgc_1").await.unwrap();
        assert!(state.oauth_client("tgc_1").await.unwrap().is_some(), "held, not read again");
        let deleted = Change::OAuthClientDeleted { org_id: "org_1".into(), client_id: "tgc_1".into() };
        state.apply_peer_change(&deleted).await.unwrap();
        assert!(state.oauth_client("tgc_1").await.unwrap().is_none(), "dropped by the change");
        // Deleting here publishes too, and drops this instance's copy at once.
        state.save_oauth_client(&client("tgc_2", "org_1"), None).await.unwrap();
        assert!(state.oauth_client("tgc_2").await.unwrap().is_some());
        state.delete_oauth_client(&client("tgc_2", "org_1")).await.unwrap();
        assert!(state.oauth_client("tgc_2").await.unwrap().is_none());
        let changes: Vec<Change> = std::iter::from_fn(|| heard.try_recv().ok()).collect();
        assert!(changes.contains(&Change::OAuthClientDeleted { org_id: "org_1".into(), client_id: "tgc_2".into() }));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reload_drops_what_the_store_no_longer_has_and_takes_what_it_gained() {
        let dir = tempfile::tempdir().unwrap();
        let (state, store) = state_on_held_reads(dir.path()).await;
        state.save_gateway(gateway("gw_gone", "gone")).await.unwrap();
        // Another process's writes, straight to the store.
        store.inner.delete(Kind::Gateway, "gw_gone").await.unwrap();
        let other = serde_json::to_string(&gateway("gw_other", "theirs")).unwrap();
        store.inner.put(Kind::Gateway, "org_1", "gw_other", other).await.unwrap();
        state.reload().await.unwrap();
        assert_eq!(name_held(&state, "gw_gone"), None);
        assert_eq!(name_held(&state, "gw_other").as_deref(), Some("theirs"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_gateway_another_instance_wrote_newer_is_held_apart_and_never_written_back() {
        use std::collections::HashMap;
        let dir = tempfile::tempdir().unwrap();
        let (state, store) = state_on_held_reads(dir.path()).await;
        state.save_gateway(gateway("gw_1", "mine")).await.unwrap();
        state.save_gateway(gateway("gw_2", "two")).await.unwrap();
        // A newer instance rewrites gw_1 (its change heard) and gw_2 (found by a reload).
        let newer = |id: &str| {
            let mut v = serde_json::to_value(gateway(id, "theirs")).unwrap();
            v["schema_version"] = 2.into();
            v.to_string()
        };
        let bodies: HashMap<&str, String> = [("gw_1", newer("gw_1")), ("gw_2", newer("gw_2"))].into();
        store.inner.put(Kind::Gateway, "org_1", "gw_1", bodies["gw_1"].clone()).await.unwrap();
        let change = Change::GatewaySaved { org_id: "org_1".into(), gateway_id: "gw_1".into(), created: false };
        state.apply_peer_change(&change).await.unwrap();
        store.inner.put(Kind::Gateway, "org_1", "gw_2", bodies["gw_2"].clone()).await.unwrap();
        state.reload().await.unwrap();
        for id in ["gw_1", "gw_2"] {
            assert_eq!(name_held(&state, id), None, "not served");
            assert!(state.gateway_exists(id), "it exists: its sessions stay");
            let held = state.newer_gateway_of("org_1", id).expect("held apart");
            assert_eq!((held.schema_version, held.reason.as_str()), (2, "schema version 2"));
            assert!(state.newer_gateway_of("org_2", id).is_none(), "another organisation's is not found");
            // Neither written nor deleted from here.
            let e = state.save_gateway(gateway(id, "mine again")).await.unwrap_err();
            assert!(matches!(&e, StoreError::Newer { kind: "gateway", .. }), "{e}");
            assert!(matches!(state.delete_gateway(id).await, Err(StoreError::Newer { .. })));
            assert_eq!(store.inner.get(Kind::Gateway, id).await.unwrap().as_ref(), Some(&bodies[id]));
        }
        assert_eq!(state.newer_records()[0], ("gateway", 2));
        // Written again at this version (a downgrade of the record, or this instance upgraded):
        // served again.
        let current = serde_json::to_string(&gateway("gw_1", "back")).unwrap();
        store.inner.put(Kind::Gateway, "org_1", "gw_1", current).await.unwrap();
        state.apply_peer_change(&change).await.unwrap();
        assert_eq!(name_held(&state, "gw_1").as_deref(), Some("back"));
        assert!(state.newer_gateway_of("org_1", "gw_1").is_none());
        assert_eq!(state.newer_records()[0], ("gateway", 1));
    }
}
