//! The server's state: every record in memory (sharded maps, lock-free reads), written through to
//! the [`Store`] before a change is acknowledged. Hot-path reads (key by hash, gateway by id)
//! never touch the store.

use crate::base::fast_map::{FastMap, FastSet};
use crate::base::pair_key::pair;
use crate::base::secrets::{self, Sealer};
use crate::config::{Config, StorageConfig};
use crate::data::changes::{Change, Feed};
use crate::data::model::*;
use crate::data::store::{Kind, PutRecord, Store, StoreError};
use chrono::Utc;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::sync::Arc;
use toolgate_filters::ip_allowlist::{IpPolicy, IpPolicySource};
use toolgate_filters::Principal;

mod follow;
mod oauth;
mod pins;
mod user_connections;
mod users;

pub(crate) use users::NewUserError;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Seal(#[from] secrets::SealError),
    /// The declared records contradict the stored ones (`users[i].email`).
    #[error(transparent)]
    Declared(#[from] crate::config::ConfigError),
}

/// Id of the organisation, user and key made for `TOOLGATE_ADMIN_KEY` / the first start.
pub(crate) const BOOTSTRAP_ORG: &str = "org_default";
pub(crate) const BOOTSTRAP_USER: &str = "usr_owner";

pub struct State {
    /// The running configuration; [`State::reload`] replaces it (SIGHUP, `POST /v1/admin/reload`).
    /// Read through [`State::config`].
    config: arc_swap::ArcSwap<Config>,
    pub store: Arc<dyn Store>,
    pub sealer: Sealer,
    orgs: FastMap<String, Arc<Organization>>,
    users: FastMap<String, Arc<User>>,
    keys: FastMap<String, Arc<ApiKey>>,
    /// Each organisation's keys by id: the management lists and counts (`GET /v1/api-keys`, the
    /// service accounts' key counts, the key quota) read one organisation's keys, not every key
    /// of the instance (BENCHMARKS.md, "Scale on one instance", records).
    keys_by_org: FastMap<String, HashMap<String, Arc<ApiKey>>>,
    /// SHA-256 hex of a key -> key id.
    key_by_hash: FastMap<[u8; 32], Arc<ApiKey>>,
    gateways: FastMap<String, Arc<Gateway>>,
    /// Gateways and keys written by a newer toolgate (`model::read_versioned`), by id: never
    /// served, used nor written back by this instance; a request that names one is refused
    /// saying so, and a write is refused here ([`StoreError::Newer`]).
    newer_gateways: FastMap<String, Arc<NewerRecord>>,
    newer_keys: FastMap<String, Arc<NewerRecord>>,
    /// (org id, app id) -> the organisation's connection.
    connections: FastMap<(String, String), Arc<Connection>>,
    /// (user or service account id, app id) -> that caller's own connection of a per-user app
    /// (`user_connections.rs`).
    user_connections: FastMap<(String, String), Arc<Connection>>,
    /// Resolved callers by key id; cleared whenever a key, user or organisation changes.
    principals: FastMap<String, Arc<Principal>>,
    /// Each organisation's IP policy, rebuilt when the organisation is saved.
    ip_policies: FastMap<String, Arc<IpPolicy>>,
    service_accounts: FastMap<String, Arc<ServiceAccount>>,
    webhooks: FastMap<String, Arc<Webhook>>,
    /// What users granted OAuth clients (toolgate's authorization server), by grant id: an access
    /// token is checked here, in memory, as a key is.
    grants: FastMap<String, Arc<OAuthGrant>>,
    /// Clients of the authorization server that organisations registered, read from the store
    /// once and then held ([`State::oauth_client`]): the token endpoint and the consent page
    /// look one up at every request. A client's change drops its copy, here and, through the
    /// change feed, on every instance; a reload drops them all.
    clients: FastMap<String, Arc<OAuthClient>>,
    /// Bumped (under `copies`) whenever held clients are dropped: a copy read from the store
    /// before is not kept ([`State::oauth_client`]).
    clients_dropped: std::sync::atomic::AtomicU64,
    usage: FastMap<String, KeyUsage>,
    usage_dirty: FastSet<String>,
    /// Verifies JWT bearer tokens, when `jwt:` is configured (replaced by a reload).
    pub jwt: arc_swap::ArcSwapOption<crate::base::jwt::JwtVerifier>,
    /// Serialises management writes so uniqueness checks and their write are atomic
    /// ([`State::lock_writes`]).
    write_lock: tokio::sync::Mutex<()>,
    /// Serialises the making of users, whose e-mail addresses are unique across organisations
    /// ([`State::create_user`]).
    new_users_lock: tokio::sync::Mutex<()>,
    /// Held while this instance's copies of records change: by a write, from its copy's update
    /// to its publication, and by a reload or another instance's change, while it puts in
    /// place the copies it read from the store. So a copy read before a write of this
    /// instance cannot overwrite what the write put in place (`follow.rs`).
    copies: parking_lot::Mutex<()>,
    /// Every change of a record, published by the write methods below once it is durable.
    pub changes: Feed,
    /// With a shared store: when this instance last heard from it (Unix ms, `peers.rs`).
    shared_contact: std::sync::atomic::AtomicI64,
    /// The id of the key given as `TOOLGATE_ADMIN_KEY`: whoever sets the server's environment is
    /// the operator, who may reset any user's MFA without MFA (the documented recovery path).
    pub operator_key_id: std::sync::OnceLock<String>,
}

fn decode<T: DeserializeOwned>(kind: Kind, id: &str, body: &str) -> Result<T, StoreError> {
    serde_json::from_str(body).map_err(|e| StoreError::Corrupt {
        kind: kind.as_str(),
        id: id.to_string(),
        reason: e.to_string(),
    })
}

/// A versioned record (a gateway, a key) as this build reads it, or found newer; named by its
/// id in the store.
fn decode_versioned<T: DeserializeOwned>(kind: Kind, id: &str, body: &str) -> Result<Versioned<T>, StoreError> {
    let read = read_versioned(body).map_err(|e| StoreError::Corrupt {
        kind: kind.as_str(),
        id: id.to_string(),
        reason: e.to_string(),
    })?;
    Ok(match read {
        Versioned::Newer(n) => Versioned::Newer(NewerRecord { id: id.to_string(), ..n }),
        known => known,
    })
}

impl State {
    /// The running configuration. A cheap read (no reference count is touched); hold it for a
    /// statement or a short block, not across a wait, so a reload is seen by the next request.
    pub fn config(&self) -> arc_swap::Guard<Arc<Config>> {
        self.config.load()
    }

    /// Puts a reloaded configuration in place (`reload`): every read from now on sees it.
    pub(crate) fn replace_config(&self, config: Arc<Config>) {
        self.jwt.store(config.jwt.clone());
        self.config.store(config);
    }

    /// A configured app's settings, kept by the caller across a reload.
    pub fn app(&self, id: &str) -> Option<Arc<crate::config::AppConfig>> {
        self.config.load().app(id).cloned()
    }

    /// Opens the store, loads every record and applies the YAML declarations and the bootstrap
    /// key. Returns the state and, on a first start without `TOOLGATE_ADMIN_KEY`, the new owner
    /// key to print once.
    pub async fn open(
        config: Arc<Config>,
        admin_key: Option<String>,
    ) -> Result<(Arc<State>, Option<String>), StartError> {
        let store = crate::data::store::open(&config.storage)?;
        // The sealing key: TOOLGATE_SECRET_KEY, or a key file beside the embedded store; on
        // Redis every instance must seal with the same key, so only the environment will do.
        let sealer = match &config.storage {
            StorageConfig::Embedded { path: dir } => Sealer::load(dir)?,
            StorageConfig::Redis { .. } => Sealer::shared()?,
        };
        Self::open_on(config, store, sealer, admin_key).await
    }

    /// [`State::open`] on a store already opened.
    async fn open_on(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        sealer: Sealer,
        admin_key: Option<String>,
    ) -> Result<(Arc<State>, Option<String>), StartError> {
        let state = State {
            config: arc_swap::ArcSwap::new(config.clone()),
            store,
            sealer,
            orgs: FastMap::default(),
            users: FastMap::default(),
            keys: FastMap::default(),
            keys_by_org: FastMap::default(),
            key_by_hash: FastMap::default(),
            gateways: FastMap::default(),
            newer_gateways: FastMap::default(),
            newer_keys: FastMap::default(),
            connections: FastMap::default(),
            user_connections: FastMap::default(),
            principals: FastMap::default(),
            ip_policies: FastMap::default(),
            service_accounts: FastMap::default(),
            webhooks: FastMap::default(),
            grants: FastMap::default(),
            clients: FastMap::default(),
            clients_dropped: std::sync::atomic::AtomicU64::new(0),
            usage: FastMap::default(),
            usage_dirty: FastSet::default(),
            write_lock: tokio::sync::Mutex::new(()),
            new_users_lock: tokio::sync::Mutex::new(()),
            copies: parking_lot::Mutex::new(()),
            changes: Feed::new(),
            shared_contact: std::sync::atomic::AtomicI64::new(crate::base::time::now_ms()),
            operator_key_id: std::sync::OnceLock::new(),
            jwt: arc_swap::ArcSwapOption::from(config.jwt.clone()),
        };
        state.load().await?;
        state.check_declarations(&config)?;
        state.apply_declarations().await?;
        let printed = state.bootstrap(admin_key).await?;
        Ok((Arc::new(state), printed))
    }

    async fn load(&self) -> Result<(), StoreError> {
        for (id, body) in self.store.load_all(Kind::Organization).await? {
            let org: Organization = decode(Kind::Organization, &id, &body)?;
            self.set_ip_policy(&org);
            self.orgs.insert(id, Arc::new(org));
        }
        for (id, body) in self.store.load_all(Kind::ServiceAccount).await? {
            self.service_accounts.insert(id.clone(), Arc::new(decode(Kind::ServiceAccount, &id, &body)?));
        }
        for (id, body) in self.store.load_all(Kind::KeyUsage).await? {
            self.usage.insert(id.clone(), decode(Kind::KeyUsage, &id, &body)?);
        }
        for (id, body) in self.store.load_all(Kind::User).await? {
            self.users.insert(id.clone(), Arc::new(decode(Kind::User, &id, &body)?));
        }
        for (id, body) in self.store.load_all(Kind::ApiKey).await? {
            match decode_versioned::<ApiKey>(Kind::ApiKey, &id, &body)? {
                Versioned::Known(key) => {
                    let key = Arc::new(key);
                    self.index_key(&key);
                    self.keys.insert(id, key);
                }
                Versioned::Newer(n) => self.hold_newer(Kind::ApiKey, n),
            }
        }
        for (id, body) in self.store.load_all(Kind::Gateway).await? {
            match decode_versioned::<Gateway>(Kind::Gateway, &id, &body)? {
                Versioned::Known(gw) => drop(self.gateways.insert(id, Arc::new(gw))),
                Versioned::Newer(n) => self.hold_newer(Kind::Gateway, n),
            }
        }
        for (id, body) in self.store.load_all(Kind::Connection).await? {
            let c: Connection = decode(Kind::Connection, &id, &body)?;
            self.install_connection(Arc::new(c));
        }
        for (id, body) in self.store.load_all(Kind::Webhook).await? {
            self.webhooks.insert(id.clone(), Arc::new(decode(Kind::Webhook, &id, &body)?));
        }
        for (id, body) in self.store.load_all(Kind::OAuthGrant).await? {
            self.grants.insert(id.clone(), Arc::new(decode(Kind::OAuthGrant, &id, &body)?));
        }
        Ok(())
    }

    /// Writes the organisations, users and keys the configuration declares (at start, and again
    /// after a reload).
    pub(crate) async fn apply_declarations(&self) -> Result<(), StoreError> {
        let now = Utc::now();
        let config = self.config.load_full();
        for o in &config.organizations {
            let prev = self.orgs.get(&o.id).map(|r| r.value().clone());
            let mut org = prev.as_deref().cloned().unwrap_or(Organization {
                id: o.id.clone(),
                name: o.name.clone(),
                tier: o.tier.clone(),
                created_at: now,
                ip_whitelist: vec![],
                enforce_ip_whitelist: false,
                allowed_ips: vec![],
                whitelist: vec![],
                declared: true,
            });
            org.name = o.name.clone();
            org.tier = o.tier.clone();
            org.declared = true;
            self.save_org(org).await?;
        }
        for u in &config.users {
            let prev = self.users.get(&u.id).map(|r| r.value().clone());
            let mut user = prev.as_deref().cloned().unwrap_or(User {
                id: u.id.clone(),
                org_id: u.organization.clone(),
                email: u.email.clone(),
                name: u.name.clone(),
                role: u.role.as_str().to_string(),
                created_at: now,
                notification_preferences: Default::default(),
                declared: true,
            });
            user.org_id = u.organization.clone();
            user.email = u.email.clone();
            user.role = u.role.as_str().to_string();
            user.declared = true;
            self.save_user(user).await?;
        }
        for k in &config.api_keys {
            if self.newer_keys.contains_key(&k.id) {
                // Its declaration is applied by the instances that read it (and by this one once
                // upgraded): writing this build's copy would drop what it does not know.
                tracing::warn!(
                    key = k.id,
                    "a declared key was written by a newer toolgate: its declaration is left to it"
                );
                continue;
            }
            let org_id =
                config.users.iter().find(|u| u.id == k.user).map(|u| u.organization.clone()).unwrap_or_default();
            let prev = self.keys.get(&k.id).map(|r| r.value().clone());
            let key = ApiKey {
                schema_version: SCHEMA_VERSION,
                id: k.id.clone(),
                org_id,
                user_id: k.user.clone(),
                name: k.name.clone(),
                hash: k.sha256.clone(),
                scopes: k.scopes.clone(),
                created_at: prev.as_ref().map_or(now, |p| p.created_at),
                expires_at: k.expires_at,
                revoked_at: prev.as_ref().and_then(|p| p.revoked_at),
                bypass_ip_whitelist: k.bypass_ip_whitelist,
                gateway_id: None,
                service_account_id: None,
                declared: true,
                // Revocation and rotation happened through the API; the declaration does not undo them.
                retires_at: prev.as_ref().and_then(|p| p.retires_at),
            };
            self.save_key(key).await?;
        }
        Ok(())
    }

    async fn bootstrap(&self, admin_key: Option<String>) -> Result<Option<String>, StoreError> {
        let first_start = !self.orgs.contains_key(BOOTSTRAP_ORG);
        if first_start {
            let now = Utc::now();
            self.save_org(Organization {
                id: BOOTSTRAP_ORG.into(),
                name: "Default".into(),
                tier: self.config().limits.bootstrap_tier.clone(),
                created_at: now,
                ip_whitelist: vec![],
                enforce_ip_whitelist: false,
                allowed_ips: vec![],
                whitelist: vec![],
                declared: false,
            })
            .await?;
            self.save_user(User {
                id: BOOTSTRAP_USER.into(),
                org_id: BOOTSTRAP_ORG.into(),
                email: "owner@localhost".into(),
                name: "Owner".into(),
                role: "owner".into(),
                created_at: now,
                notification_preferences: Default::default(),
                declared: false,
            })
            .await?;
        }
        let (plaintext, print) = match admin_key {
            Some(k) => (k, false),
            None if first_start => (secrets::new_api_key(), true),
            None => return Ok(None),
        };
        let hash = secrets::hash_key(&plaintext);
        if let Some(existing) = self.key_by_hash.get(&secrets::hash_key_bytes(&plaintext)) {
            if !print {
                let _ = self.operator_key_id.set(existing.id.clone());
            }
            return Ok(None);
        }
        let saved = self
            .save_key(ApiKey {
                schema_version: SCHEMA_VERSION,
                id: secrets::new_id("key"),
                org_id: BOOTSTRAP_ORG.into(),
                user_id: BOOTSTRAP_USER.into(),
                name: "owner (bootstrap)".into(),
                hash,
                scopes: vec!["*".into()],
                created_at: Utc::now(),
                expires_at: None,
                revoked_at: None,
                bypass_ip_whitelist: false,
                gateway_id: None,
                service_account_id: None,
                declared: false,
                retires_at: None,
            })
            .await?;
        if !print {
            let _ = self.operator_key_id.set(saved.id.clone());
        }
        Ok(print.then_some(plaintext))
    }

    /// See the field `copies`. Never held across a wait.
    fn copies(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.copies.lock()
    }

    fn set_ip_policy(&self, org: &Organization) {
        match IpPolicy::try_from(&org.ip_policy_config()) {
            Ok(p) => {
                self.ip_policies.insert(org.id.clone(), Arc::new(p));
            }
            // Validated before saving; a stored policy that no longer parses fails closed.
            Err(e) => {
                tracing::error!(org = org.id, error = %e, "stored IP policy is invalid; refusing all addresses");
                let closed = IpPolicy::new(true, [], []).expect("an empty policy is valid");
                self.ip_policies.insert(org.id.clone(), Arc::new(closed));
            }
        }
    }

    pub(crate) async fn save_org(&self, org: Organization) -> Result<Arc<Organization>, StoreError> {
        self.store.put_record(Kind::Organization, &org.id, &org.id, &org).await?;
        let _copies = self.copies();
        let org = self.install_org(org);
        self.changes.publish(Change::OrganizationSaved { org_id: org.id.clone() });
        Ok(org)
    }

    pub(crate) async fn save_user(&self, user: User) -> Result<Arc<User>, StoreError> {
        self.store.put_record(Kind::User, &user.org_id, &user.id, &user).await?;
        let _copies = self.copies();
        let user = self.install_user(user);
        self.changes.publish(Change::UserSaved { org_id: user.org_id.clone(), user_id: user.id.clone() });
        Ok(user)
    }

    /// Removes a user record: every instance drops its copy (and the callers resolved through
    /// it) as soon as it hears of the change. Its keys, sessions and grants are the caller's to
    /// end first.
    pub(crate) async fn delete_user(&self, user: &User) -> Result<(), StoreError> {
        self.store.delete(Kind::User, &user.id).await?;
        let _copies = self.copies();
        self.users.remove(&user.id);
        self.principals.clear();
        self.changes.publish(Change::UserDeleted { org_id: user.org_id.clone(), user_id: user.id.clone() });
        Ok(())
    }

    pub(crate) async fn save_key(&self, mut key: ApiKey) -> Result<Arc<ApiKey>, StoreError> {
        self.refuse_newer(Kind::ApiKey, &key.id)?;
        key.schema_version = SCHEMA_VERSION;
        self.store.put_record(Kind::ApiKey, &key.org_id, &key.id, &key).await?;
        let _copies = self.copies();
        let key = self.install_key(key);
        self.changes.publish(Change::KeySaved { org_id: key.org_id.clone(), key_id: key.id.clone() });
        Ok(key)
    }

    /// Removes a service account's record: its keys no longer resolve on any instance as soon
    /// as it hears of the change. Its own app connections are the caller's to end.
    pub(crate) async fn delete_service_account(&self, a: &ServiceAccount) -> Result<(), StoreError> {
        self.store.delete(Kind::ServiceAccount, &a.id).await?;
        let _copies = self.copies();
        self.service_accounts.remove(&a.id);
        self.principals.clear();
        self.changes.publish(Change::ServiceAccountDeleted { org_id: a.org_id.clone(), account_id: a.id.clone() });
        Ok(())
    }

    pub(crate) async fn save_service_account(&self, a: ServiceAccount) -> Result<Arc<ServiceAccount>, StoreError> {
        self.store.put_record(Kind::ServiceAccount, &a.org_id, &a.id, &a).await?;
        let _copies = self.copies();
        let a = self.install_service_account(a);
        self.changes.publish(Change::ServiceAccountSaved { org_id: a.org_id.clone(), account_id: a.id.clone() });
        Ok(a)
    }

    /// Counts one authenticated request of a key (no store write; see [`State::flush_usage`]).
    /// On the hot path: no allocation once the key has been seen, no date formatting.
    pub(crate) fn record_usage(&self, key_id: &str, ip: std::net::IpAddr) {
        let now = Utc::now();
        let (day, month) = day_and_month(now);
        let mut u = match self.usage.get_mut(key_id) {
            Some(u) => u,
            None => self.usage.entry(key_id.to_string()).or_default(),
        };
        if u.day != day {
            u.day = day;
            u.requests_today = 0;
        }
        if u.month != month {
            u.month = month;
            u.requests_this_month = 0;
        }
        u.requests_today += 1;
        u.requests_this_month += 1;
        u.last_used = Some(now);
        if u.last_ip.as_deref().is_none_or(|last| last.parse::<std::net::IpAddr>().ok() != Some(ip)) {
            u.last_ip = Some(ip.to_string());
        }
        drop(u);
        if !self.usage_dirty.contains(key_id) {
            self.usage_dirty.insert(key_id.to_string());
        }
    }

    pub(crate) fn usage_of(&self, key_id: &str) -> KeyUsage {
        let mut u = self.usage.get(key_id).map(|u| u.clone()).unwrap_or_default();
        let (day, month) = day_and_month(Utc::now());
        if u.day != day {
            u.requests_today = 0;
        }
        if u.month != month {
            u.requests_this_month = 0;
        }
        u
    }

    /// Writes usage counters changed since the last flush, in one transaction.
    pub(crate) async fn flush_usage(&self) {
        crate::data::store::write_dirty(&*self.store, Kind::KeyUsage, &self.usage_dirty, |id| {
            let org = self.keys.get(id).map(|k| k.org_id.clone()).unwrap_or_default();
            self.usage.get(id).and_then(|u| serde_json::to_string(u.value()).ok()).map(|json| (org, json))
        })
        .await;
    }

    /// Files a key under its hash and its organisation.
    fn index_key(&self, key: &Arc<ApiKey>) {
        self.keys_by_org.entry(key.org_id.clone()).or_default().insert(key.id.clone(), key.clone());
        match secrets::hash_from_hex(&key.hash) {
            Some(h) => {
                self.key_by_hash.insert(h, key.clone());
            }
            None => tracing::error!(key = key.id, "stored key hash is not 64 hex characters; the key cannot be used"),
        }
    }

    pub(crate) async fn delete_key(&self, id: &str) -> Result<(), StoreError> {
        self.refuse_newer(Kind::ApiKey, id)?;
        self.store.delete(Kind::ApiKey, id).await?;
        let _copies = self.copies();
        if let Some(k) = self.uninstall_key(id) {
            self.changes.publish(Change::KeyDeleted { org_id: k.org_id.clone(), key_id: k.id.clone() });
        }
        Ok(())
    }

    pub(crate) async fn save_gateway(&self, mut gw: Gateway) -> Result<Arc<Gateway>, StoreError> {
        self.refuse_newer(Kind::Gateway, &gw.id)?;
        gw.schema_version = SCHEMA_VERSION;
        self.store.put_record(Kind::Gateway, &gw.org_id, &gw.id, &gw).await?;
        let gw = Arc::new(gw);
        let _copies = self.copies();
        let created = self.gateways.insert(gw.id.clone(), gw.clone()).is_none();
        self.changes.publish(Change::GatewaySaved { org_id: gw.org_id.clone(), gateway_id: gw.id.clone(), created });
        Ok(gw)
    }

    /// Deletes a gateway, then its tool pins: the change names the gateway, so every instance
    /// drops its copy of them (a gateway made later starts with none).
    pub async fn delete_gateway(&self, id: &str) -> Result<(), StoreError> {
        self.refuse_newer(Kind::Gateway, id)?;
        self.store.delete(Kind::Gateway, id).await?;
        let removed = {
            let _copies = self.copies();
            let removed = self.gateways.remove(id).map(|(_, gw)| gw);
            if let Some(gw) = &removed {
                self.changes.publish(Change::GatewayDeleted { org_id: gw.org_id.clone(), gateway_id: gw.id.clone() });
            }
            removed
        };
        if let Some(gw) = removed {
            // The gateway is gone already: pins left behind by a failing store are never read
            // again (their ids name the gateway), so the deletion stands and the failure is logged.
            if let Err(e) = self.delete_tool_pins(&gw.org_id, &gw.id).await {
                tracing::warn!(gateway = gw.id, error = %e, "cannot delete the deleted gateway's tool pins");
            }
        }
        Ok(())
    }

    pub(crate) async fn save_connection(&self, c: Connection) -> Result<Arc<Connection>, StoreError> {
        self.store_connection(c, false).await
    }

    /// Saves a connection whose OAuth tokens were renewed, and nothing else changed.
    pub(crate) async fn renew_connection(&self, c: Connection) -> Result<Arc<Connection>, StoreError> {
        self.store_connection(c, true).await
    }

    async fn store_connection(&self, c: Connection, renewed: bool) -> Result<Arc<Connection>, StoreError> {
        self.store.put_record(Kind::Connection, &c.org_id, &c.id, &c).await?;
        let c = Arc::new(c);
        let _copies = self.copies();
        self.install_connection(c.clone());
        let (org_id, app_id, user_id) = (c.org_id.clone(), c.app_id.clone(), c.user_id.clone());
        self.changes.publish(Change::ConnectionSaved { org_id, app_id, renewed, user_id });
        Ok(c)
    }

    pub(crate) async fn delete_connection(&self, org_id: &str, app_id: &str) -> Result<bool, StoreError> {
        let key = (org_id.to_string(), app_id.to_string());
        let Some(c) = self.connections.get(&key).map(|c| c.value().clone()) else { return Ok(false) };
        self.store.delete(Kind::Connection, &c.id).await?;
        let _copies = self.copies();
        self.connections.remove(&key);
        self.changes.publish(Change::ConnectionDeleted { org_id: key.0, app_id: key.1, user_id: None });
        Ok(true)
    }

    fn install_org(&self, org: Organization) -> Arc<Organization> {
        self.set_ip_policy(&org);
        let org = Arc::new(org);
        self.orgs.insert(org.id.clone(), org.clone());
        self.principals.clear();
        org
    }

    fn install_user(&self, user: User) -> Arc<User> {
        let user = Arc::new(user);
        self.users.insert(user.id.clone(), user.clone());
        self.principals.clear();
        user
    }

    fn install_key(&self, key: ApiKey) -> Arc<ApiKey> {
        let key = Arc::new(key);
        self.index_key(&key);
        if let Some(previous) = self.keys.insert(key.id.clone(), key.clone()) {
            if previous.org_id != key.org_id {
                self.unindex_org_key(&previous);
            }
            // A declared key whose hash changed in YAML: the old value must stop working now.
            if previous.hash != key.hash {
                if let Some(h) = secrets::hash_from_hex(&previous.hash) {
                    self.key_by_hash.remove(&h);
                }
            }
        }
        self.principals.remove(&key.id);
        key
    }

    fn uninstall_key(&self, id: &str) -> Option<Arc<ApiKey>> {
        let removed = self.keys.remove(id).map(|(_, k)| k);
        if let Some(k) = &removed {
            self.unindex_org_key(k);
            if let Some(h) = secrets::hash_from_hex(&k.hash) {
                self.key_by_hash.remove(&h);
            }
        }
        self.principals.remove(id);
        removed
    }

    /// Takes a key out of its organisation's keys (and the organisation out of the index with
    /// its last key).
    fn unindex_org_key(&self, key: &ApiKey) {
        self.keys_by_org.remove_if_mut(&key.org_id, |_, keys| {
            keys.remove(&key.id);
            keys.is_empty()
        });
    }

    fn install_service_account(&self, a: ServiceAccount) -> Arc<ServiceAccount> {
        let a = Arc::new(a);
        self.service_accounts.insert(a.id.clone(), a.clone());
        self.principals.clear();
        a
    }

    /// A record as the store holds it now (`None`: gone).
    async fn read<T: DeserializeOwned>(&self, kind: Kind, id: &str) -> Result<Option<T>, StoreError> {
        match self.store.get(kind, id).await? {
            Some(body) => decode(kind, id, &body).map(Some),
            None => Ok(None),
        }
    }

    pub(crate) async fn save_webhook(&self, w: Webhook) -> Result<Arc<Webhook>, StoreError> {
        self.store.put_record(Kind::Webhook, &w.org_id, &w.id, &w).await?;
        let w = Arc::new(w);
        let _copies = self.copies();
        self.webhooks.insert(w.id.clone(), w.clone());
        self.changes.publish(Change::WebhookSaved { org_id: w.org_id.clone(), webhook_id: w.id.clone() });
        Ok(w)
    }

    pub(crate) async fn delete_webhook(&self, id: &str) -> Result<(), StoreError> {
        self.store.delete(Kind::Webhook, id).await?;
        let _copies = self.copies();
        if let Some((_, w)) = self.webhooks.remove(id) {
            self.changes.publish(Change::WebhookDeleted { org_id: w.org_id.clone(), webhook_id: w.id.clone() });
        }
        Ok(())
    }

    /// A webhook visible to `org_id`; another organisation's is "not found".
    pub(crate) fn webhook_of(&self, org_id: &str, id: &str) -> Option<Arc<Webhook>> {
        self.webhooks.get(id).map(|w| w.value().clone()).filter(|w| w.org_id == org_id)
    }

    /// The organisation's webhooks, oldest first.
    pub(crate) fn webhooks_of(&self, org_id: &str) -> Vec<Arc<Webhook>> {
        let mut all: Vec<Arc<Webhook>> =
            self.webhooks.iter().filter(|w| w.org_id == org_id).map(|w| w.value().clone()).collect();
        all.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        all
    }

    /// Notes that the shared store answered (`peers.rs`, at each read of the change feed).
    pub(crate) fn note_shared_contact(&self) {
        self.shared_contact.store(crate::base::time::now_ms(), std::sync::atomic::Ordering::Relaxed);
    }

    /// With a shared store that has not answered for longer than `storage.outage_grace_secs`:
    /// for how many seconds. This instance's records may be out of date by then (a key revoked
    /// elsewhere), so authenticated requests are refused rather than served from them.
    pub(crate) fn shared_store_lost_for(&self) -> Option<u64> {
        let StorageConfig::Redis { outage_grace, .. } = &self.config().storage else { return None };
        let last = self.shared_contact.load(std::sync::atomic::Ordering::Relaxed);
        let silent = (crate::base::time::now_ms() - last).max(0) as u64;
        (silent > outage_grace.as_millis() as u64).then_some(silent / 1000)
    }

    /// A gateway visible to `org_id`; another organisation's gateway is "not found".
    pub(crate) fn gateway_of(&self, org_id: &str, id: &str) -> Option<Arc<Gateway>> {
        self.gateways.get(id).map(|g| g.value().clone()).filter(|g| g.org_id == org_id)
    }

    /// Takes the lock that serialises an organisation's management writes, for a handler whose
    /// check and write must be atomic (a uniqueness or quota check, then the save). With several
    /// instances on one store the lock is the store's (Redis), and once it is held the
    /// organisation's records are read again, so the check sees every write made under the lock
    /// before, whether or not this instance has heard of it yet.
    pub(crate) async fn lock_writes(&self, org_id: &str) -> Result<WriteGuard<'_>, StoreError> {
        let local = self.write_lock.lock().await;
        let name = format!("writes:{org_id}");
        let token = self.store.lock(&name, WRITE_LOCK_TTL, WRITE_LOCK_WAIT).await?;
        let guard = WriteGuard { _local: local, shared: token.map(|t| (self.store.clone(), name, t)) };
        if guard.shared.is_some() {
            self.refresh_org(org_id).await?;
        }
        Ok(guard)
    }

    pub fn org(&self, id: &str) -> Option<Arc<Organization>> {
        self.orgs.get(id).map(|o| o.value().clone())
    }

    pub fn user(&self, id: &str) -> Option<Arc<User>> {
        self.users.get(id).map(|u| u.value().clone())
    }

    /// The users that `keep` keeps (a scan: for rare look-ups such as a sign-in's e-mail).
    pub(crate) fn users_where(&self, keep: impl Fn(&User) -> bool) -> Vec<Arc<User>> {
        self.users.iter().filter(|u| keep(u.value())).map(|u| u.value().clone()).collect()
    }

    pub fn key(&self, id: &str) -> Option<Arc<ApiKey>> {
        self.keys.get(id).map(|k| k.value().clone())
    }

    /// A gateway of any organisation: for internal use (sessions, change listeners); handlers
    /// use [`State::gateway_of`].
    pub fn gateway(&self, id: &str) -> Option<Arc<Gateway>> {
        self.gateways.get(id).map(|g| g.value().clone())
    }

    /// Whether the gateway exists, served here or not (written by a newer toolgate): its
    /// sessions are not this instance's to end.
    pub(crate) fn gateway_exists(&self, id: &str) -> bool {
        self.gateways.contains_key(id) || self.newer_gateways.contains_key(id)
    }

    /// The gateway `id` of `org_id` when it was written by a newer toolgate (so it is neither
    /// served nor changed here).
    pub(crate) fn newer_gateway_of(&self, org_id: &str, id: &str) -> Option<Arc<NewerRecord>> {
        self.newer_gateways.get(id).map(|g| g.value().clone()).filter(|g| g.org_id == org_id)
    }

    /// How many gateways and keys written by a newer toolgate this instance holds apart.
    pub(crate) fn newer_records(&self) -> [(&'static str, usize); 2] {
        [("gateway", self.newer_gateways.len()), ("api_key", self.newer_keys.len())]
    }

    /// Holds a record written by a newer toolgate apart (never served, never written back).
    pub(super) fn hold_newer(&self, kind: Kind, n: NewerRecord) {
        tracing::warn!(
            kind = kind.as_str(),
            id = n.id,
            reason = n.reason,
            "a record was written by a newer toolgate: this instance neither serves nor writes it"
        );
        self.newer_of(kind).insert(n.id.clone(), Arc::new(n));
    }

    /// The records of `kind` (a gateway or a key) held apart as newer.
    pub(super) fn newer_of(&self, kind: Kind) -> &FastMap<String, Arc<NewerRecord>> {
        if kind == Kind::Gateway {
            &self.newer_gateways
        } else {
            &self.newer_keys
        }
    }

    /// A write of a record written by a newer toolgate is refused: it would drop what this build
    /// does not know.
    fn refuse_newer(&self, kind: Kind, id: &str) -> Result<(), StoreError> {
        match self.newer_of(kind).get(id) {
            None => Ok(()),
            Some(n) => Err(StoreError::Newer { kind: kind.as_str(), id: id.to_string(), reason: n.reason.clone() }),
        }
    }

    /// The gateways for which `keep` holds.
    pub(crate) fn gateways_where(&self, keep: impl Fn(&Gateway) -> bool) -> Vec<Arc<Gateway>> {
        self.gateways.iter().filter(|g| keep(g)).map(|g| g.value().clone()).collect()
    }

    pub(crate) fn gateway_count(&self, org_id: &str) -> usize {
        self.gateways.iter().filter(|g| g.org_id == org_id).count()
    }

    pub fn connection(&self, org_id: &str, app_id: &str) -> Option<Arc<Connection>> {
        self.connections.get(pair(&(org_id, app_id))).map(|c| c.value().clone())
    }

    pub fn service_account(&self, id: &str) -> Option<Arc<ServiceAccount>> {
        self.service_accounts.get(id).map(|a| a.value().clone())
    }

    /// The organisation's keys for which `keep` holds (a scan of its keys: for a management
    /// list, never the hot path).
    pub(crate) fn keys_of(&self, org_id: &str, keep: impl Fn(&ApiKey) -> bool) -> Vec<Arc<ApiKey>> {
        let Some(keys) = self.keys_by_org.get(org_id) else { return Vec::new() };
        keys.values().filter(|k| keep(k)).cloned().collect()
    }

    /// How many of the organisation's keys `keep` holds for.
    pub(crate) fn key_count_of(&self, org_id: &str, keep: impl Fn(&ApiKey) -> bool) -> usize {
        self.keys_by_org.get(org_id).map_or(0, |keys| keys.values().filter(|k| keep(k)).count())
    }

    /// The service accounts for which `keep` holds.
    pub(crate) fn service_accounts_where(&self, keep: impl Fn(&ServiceAccount) -> bool) -> Vec<Arc<ServiceAccount>> {
        self.service_accounts.iter().filter(|a| keep(a)).map(|a| a.value().clone()).collect()
    }

    /// The app status an organisation sees: `connected` when it has a live connection or the app
    /// needs no credentials, else the declared status.
    pub(crate) fn app_status(&self, org_id: &str, app: &crate::config::AppConfig) -> String {
        if self.is_connected(org_id, &app.id) {
            "connected".into()
        } else {
            app.status.clone()
        }
    }

    pub(crate) fn is_connected(&self, org_id: &str, app_id: &str) -> bool {
        let Some(app) = self.app(app_id) else { return false };
        if !app.needs_credentials() {
            return true;
        }
        self.list_view_connected(org_id, &app)
    }

    /// The key whose SHA-256 is `hash` (the credential resolver's look-up, `identity::credentials`).
    /// The key filed under `hash`, with the digest it is filed under (the stored hash, decoded
    /// once when the key was filed), for the caller's constant-time comparison.
    pub(crate) fn key_by_hash(&self, hash: &[u8; 32]) -> Option<([u8; 32], Arc<ApiKey>)> {
        self.key_by_hash.get(hash).map(|k| (*k.key(), k.value().clone()))
    }

    /// The caller resolved for key `key_id`, while no key, user or organisation changed since.
    pub(crate) fn cached_principal(&self, key_id: &str) -> Option<Arc<Principal>> {
        self.principals.get(key_id).map(|p| p.value().clone())
    }

    /// Keeps the caller resolved for key `key_id` until a key, user or organisation changes.
    pub(crate) fn cache_principal(&self, key_id: &str, principal: Arc<Principal>) {
        self.principals.insert(key_id.to_string(), principal);
    }

    /// The gateway `id` when it takes OAuth access tokens (`configuration.auth: oauth`): the one
    /// place that decides it, for the credential, the 401's challenge and the metadata.
    pub(crate) fn oauth_gateway(&self, id: &str) -> Option<Arc<Gateway>> {
        self.gateway(id).filter(|g| g.configuration.auth == GatewayAuth::Oauth)
    }
}

/// How long an organisation's write lock lives if its holder dies holding it.
const WRITE_LOCK_TTL: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a management write waits for the lock before it answers 503.
const WRITE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Held while an organisation's management write checks and saves ([`State::lock_writes`]).
pub(crate) struct WriteGuard<'a> {
    _local: tokio::sync::MutexGuard<'a, ()>,
    /// The store's lock, when the store is shared: released when the guard goes.
    shared: Option<(Arc<dyn Store>, String, String)>,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        if let Some((store, name, token)) = self.shared.take() {
            // Released in the background: a drop cannot wait. Until then the next writer waits
            // (or the lock's time runs out).
            tokio::spawn(async move {
                if let Err(e) = store.unlock(&name, &token).await {
                    tracing::warn!(error = %e, lock = name, "could not release a write lock; it expires by itself");
                }
            });
        }
    }
}

/// The UTC day (days since the epoch) and month (year * 12 + month index) of `t`.
fn day_and_month(t: chrono::DateTime<Utc>) -> (i64, i32) {
    use chrono::Datelike;
    (t.timestamp().div_euclid(86_400), t.year() * 12 + t.month0() as i32)
}

impl IpPolicySource for State {
    fn policy(&self, org_id: &str) -> Option<Arc<IpPolicy>> {
        self.ip_policies.get(org_id).map(|p| p.value().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids_of(state: &State, org: &str) -> Vec<String> {
        let mut ids: Vec<String> = state.keys_of(org, |_| true).iter().map(|k| k.id.clone()).collect();
        ids.sort();
        ids
    }

    #[tokio::test]
    async fn an_organisations_keys_are_read_from_its_own_index() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!("storage:\n  backend: embedded\n  path: {}\n", dir.path().display());
        let config = Arc::new(Config::parse(&yaml).unwrap());
        let admin = || Some(format!("ag_{}", "a".repeat(37)));
        let (state, _) = State::open(config.clone(), admin()).await.unwrap();
        let bootstrap = ids_of(&state, BOOTSTRAP_ORG);
        assert_eq!(bootstrap.len(), 1, "the admin key");
        let admin_key = state.key(&bootstrap[0]).unwrap();
        for (id, org) in [("key_a1", "org_a"), ("key_a2", "org_a"), ("key_b1", "org_b")] {
            let hash = secrets::hash_key(&format!("ag_{id}"));
            let key = ApiKey { id: id.into(), org_id: org.into(), hash, ..(*admin_key).clone() };
            state.save_key(key).await.unwrap();
        }
        assert_eq!(ids_of(&state, "org_a"), ["key_a1", "key_a2"]);
        assert_eq!(ids_of(&state, "org_b"), ["key_b1"]);
        assert_eq!(state.key_count_of("org_a", |k| k.id.ends_with('2')), 1);
        assert!(ids_of(&state, "org_none").is_empty());
        state.delete_key("key_a1").await.unwrap();
        state.delete_key("key_b1").await.unwrap();
        assert_eq!(ids_of(&state, "org_a"), ["key_a2"]);
        assert!(state.keys_by_org.get("org_b").is_none(), "an organisation leaves the index with its last key");
        // Read back from the store at the next start: the same index.
        drop(state);
        let (state, _) = State::open(config, admin()).await.unwrap();
        assert_eq!(ids_of(&state, "org_a"), ["key_a2"]);
        assert_eq!(ids_of(&state, BOOTSTRAP_ORG), bootstrap);
    }
}
