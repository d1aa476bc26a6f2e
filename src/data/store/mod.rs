//! Persistence. The [`Store`] trait is a small document store (records of a [`Kind`] by id, as
//! JSON) plus the append-only request log, so that a Redis backend implements the same few
//! operations. Hot-path reads never reach the store: [`crate::data::state`] keeps every record in memory
//! and writes through to the store before it answers 2xx.

mod embedded;
mod log_slices;
mod records;
pub(crate) mod redis;
pub(crate) mod snapshot;

pub use embedded::EmbeddedStore;
pub(crate) use embedded::DB_FILE;
pub use records::encode;
pub(crate) use records::PutRecord;
pub(crate) use redis::RedisStore;

use crate::config::StorageConfig;
use toolgate_filters::rate_limit::UsageMinute;

/// The one place a backend is chosen: the state, the request log and MFA all get their store
/// from here, so a new backend is one arm of this match.
pub fn open(config: &StorageConfig) -> Result<Arc<dyn Store>, StoreError> {
    match config {
        StorageConfig::Embedded { path } => Ok(Arc::new(EmbeddedStore::open(path)?)),
        StorageConfig::Redis { key_prefix, connect_timeout, command_timeout, .. } => {
            let target = redis::Target::of(config)
                .map_err(|e| StoreError::BackendFailed { context: "redis", source: e.into() })?;
            Ok(Arc::new(RedisStore::open(&target, key_prefix, *connect_timeout, *command_timeout)?))
        }
    }
}

use crate::observe::rollup::Rollup;
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage backend error: {0}")]
    Backend(String),
    /// A backend failure with its cause kept (`context` says what failed), so the process log
    /// shows the chain down to the driver's own error.
    #[error("storage backend error: {context}")]
    BackendFailed {
        context: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("stored record {kind}/{id} is corrupt: {reason}")]
    Corrupt { kind: &'static str, id: String, reason: String },
    /// A record that has no JSON form ([`PutRecord`]): a bug, never bad input.
    #[error("record {kind}/{id} cannot be serialised: {reason}")]
    Encode { kind: &'static str, id: String, reason: String },
    /// A lock ([`Store::lock`]) stayed held by another process.
    #[error("the lock {0} is held elsewhere")]
    Busy(String),
    /// A write of a record written by a newer toolgate (`model::read_versioned`): refused, as
    /// it would drop what this build does not know.
    #[error("{kind} {id} was written by a newer toolgate ({reason}); this instance does not change it")]
    Newer { kind: &'static str, id: String, reason: String },
}

/// The record families the store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Organization,
    User,
    ApiKey,
    Gateway,
    Connection,
    Session,
    Mfa,
    /// An open MFA challenge (expiring).
    MfaChallenge,
    /// An unused MFA token, by the SHA-256 of its value (expiring, single use).
    MfaToken,
    ServiceAccount,
    KeyUsage,
    Meta,
    Webhook,
    /// A webhook delivery, or an alert's notification (the outbox).
    Delivery,
    /// A usage alert (`/alerts`).
    Alert,
    /// A user's password hash (web sign-in).
    Password,
    /// A web session, by the SHA-256 of its token, in its user's partition (expiring).
    WebSession,
    /// A sign-in through an OpenID provider under way, by the SHA-256 of its state (expiring).
    SignInState,
    /// A client of the OAuth authorization server, in its organisation's partition.
    OAuthClient,
    /// An authorization code, by its SHA-256 (expiring, taken once); after use, `used:<hash>`
    /// names the grant it made, so that a second use revokes it.
    OAuthCode,
    /// What a user granted a client, in its organisation's partition (expiring with its refresh
    /// token).
    OAuthGrant,
    /// A gateway's pinned definition of one app tool, and its pending change, in its
    /// organisation's partition (`data::tool_pins`).
    ToolPin,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Organization => "organization",
            Kind::User => "user",
            Kind::ApiKey => "api_key",
            Kind::Gateway => "gateway",
            Kind::Connection => "connection",
            Kind::Session => "session",
            Kind::Mfa => "mfa",
            Kind::MfaChallenge => "mfa_challenge",
            Kind::MfaToken => "mfa_token",
            Kind::ServiceAccount => "service_account",
            Kind::KeyUsage => "key_usage",
            Kind::Meta => "meta",
            Kind::Webhook => "webhook",
            Kind::Delivery => "delivery",
            Kind::Alert => "alert",
            Kind::Password => "password",
            Kind::WebSession => "web_session",
            Kind::SignInState => "sign_in_state",
            Kind::OAuthClient => "oauth_client",
            Kind::OAuthCode => "oauth_code",
            Kind::OAuthGrant => "oauth_grant",
            Kind::ToolPin => "tool_pin",
        }
    }
}

/// One upstream call as the request log keeps it (spec "Log entry"). The store gives it its `id`
/// (time-ordered, when written) and keeps `timestamp` (`ts_ms`), `gateway_id` and `app` in
/// columns of their own for the log's filters.
#[derive(Debug, Clone)]
pub struct LogRecord {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// Whose call it was (organisation and gateway), shared with the gateway, not copied.
    pub gateway: Arc<crate::data::model::Gateway>,
    pub app: String,
    /// The entry's `status` is `error`.
    pub error: bool,
    /// The call's duration in microseconds (the body's `duration` is whole milliseconds), for
    /// the rollups' histograms.
    pub duration_us: u64,
    /// Where the function's name is in `body`: its JSON string, quotes included. Kept as a
    /// range so that the call's path copies no name; read by [`LogRecord::function`].
    pub function_at: std::ops::Range<usize>,
    /// The entry as JSON: `gateway_id`, `app`, `function`, `duration`, `status`, `request`,
    /// `response` (written by [`crate::data::reqlog::EntryWriter`]).
    pub body: String,
}

impl crate::observe::rollup::Counted for LogRecord {
    fn ts_ms(&self) -> i64 {
        self.ts_ms
    }
    fn org_id(&self) -> &str {
        &self.gateway.org_id
    }
    fn gateway_id(&self) -> &str {
        &self.gateway.id
    }
    fn app(&self) -> &str {
        &self.app
    }
    fn function(&self) -> std::borrow::Cow<'_, str> {
        LogRecord::function(self)
    }
    fn error(&self) -> bool {
        self.error
    }
    fn duration_us(&self) -> u64 {
        self.duration_us
    }
}

impl LogRecord {
    /// The called function's name.
    pub fn function(&self) -> std::borrow::Cow<'_, str> {
        let quoted = self.body.get(self.function_at.clone()).unwrap_or_default();
        let inner = quoted.get(1..quoted.len().saturating_sub(1)).unwrap_or_default();
        if inner.contains('\\') {
            serde_json::from_str::<String>(quoted).unwrap_or_default().into()
        } else {
            inner.into()
        }
    }
}

/// A request-log query; every filter is optional.
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    pub org_id: String,
    pub gateway_id: Option<String>,
    pub app: Option<String>,
    pub status: Option<String>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
}

/// One stored request-log entry: its id and time (kept in columns) and its body (the rest of the
/// entry as JSON, written by [`crate::data::reqlog::EntryWriter`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRow {
    pub id: String,
    pub ts_ms: i64,
    pub body: String,
}

/// A read of rollups ([`crate::observe::rollup`]): one tier of one organisation's, from `since_ms` (a
/// bucket start) on, optionally of one gateway or one app.
#[derive(Debug, Clone, Default)]
pub struct RollupQuery {
    pub org_id: String,
    pub gateway_id: Option<String>,
    pub app: Option<String>,
    pub tier_ms: i64,
    pub since_ms: i64,
    /// Read the duration histograms too (percentiles); without, `histogram` is left empty.
    pub histograms: bool,
}

/// Most entries a log page counts in its `total`: counting every match of a filter over
/// millions of entries would cost more than the page itself.
pub(crate) const LOG_COUNT_CAP: u64 = 100_000;

/// One record of a batch write: its partition, id and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub partition: String,
    pub id: String,
    pub json: String,
}

/// One audit entry to append ([`Store::audit_append`]): its place in its organisation's chain
/// and its JSON (see [`crate::data::audit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditLink {
    pub org_id: String,
    pub seq: u64,
    /// The head it must follow: the hash of entry `seq - 1` (of none when `seq` is 1).
    pub prev_hash: String,
    pub hash: String,
    pub json: String,
}

/// The partition of records that belong to no organisation, or are only ever read by id
/// (MFA challenges and tokens, by their id or hash).
pub(crate) const NO_PARTITION: &str = "";

/// Records are JSON bodies filed by kind and id. Each also has a partition, the organisation it
/// belongs to, so that a shared backend can keep an organisation's records together and read
/// them back in one query ([`Store::load_partition`]).
#[async_trait]
pub trait Store: Send + Sync {
    /// Inserts or replaces a record durably: once this returns `Ok`, the record survives a crash.
    /// `partition` is the organisation the record belongs to (see [`Store::load_partition`]).
    async fn put(&self, kind: Kind, partition: &str, id: &str, json: String) -> Result<(), StoreError>;
    /// Inserts or replaces several records of a kind in one durable write (background flushes).
    async fn put_many(&self, kind: Kind, items: Vec<Stored>) -> Result<(), StoreError>;
    /// Inserts or replaces a record that lives until `expires_at_ms` (milliseconds since the
    /// epoch): after that no read returns it and [`Store::sweep_expired`] removes it. For
    /// short-lived records (MFA challenges and tokens) that every instance must see.
    async fn put_expiring(
        &self,
        kind: Kind,
        partition: &str,
        id: &str,
        json: String,
        expires_at_ms: i64,
    ) -> Result<(), StoreError>;
    /// Inserts a record only if none lives under that id: `Ok(false)` when one does. Uniqueness
    /// without a per-process lock, so that instances sharing a backend cannot both win.
    async fn put_if_absent(&self, kind: Kind, partition: &str, id: &str, json: String) -> Result<bool, StoreError>;
    /// One live record.
    async fn get(&self, kind: Kind, id: &str) -> Result<Option<String>, StoreError>;
    /// Reads and removes one live record in one step: what a single-use token needs, so that two
    /// concurrent uses cannot both succeed.
    async fn take(&self, kind: Kind, id: &str) -> Result<Option<String>, StoreError>;
    /// Removes a record; `Ok(false)` when there was none.
    async fn delete(&self, kind: Kind, id: &str) -> Result<bool, StoreError>;
    /// Removes several records of a kind (those that exist); how many were there. A backend whose
    /// writes each wait for the disk removes them in one durable write (the session sweep removes
    /// thousands at once); the others may remove them one by one, as here.
    async fn delete_many(&self, kind: Kind, ids: Vec<String>) -> Result<u64, StoreError> {
        let mut n = 0;
        for id in &ids {
            n += u64::from(self.delete(kind, id).await?);
        }
        Ok(n)
    }
    /// Every live record of a kind, for loading the in-memory state at start.
    async fn load_all(&self, kind: Kind) -> Result<Vec<(String, String)>, StoreError>;
    /// Every live record of a kind in one partition (one organisation's gateways, keys, ...):
    /// what an instance reads when another tells it that organisation changed.
    async fn load_partition(&self, kind: Kind, partition: &str) -> Result<Vec<(String, String)>, StoreError>;
    /// Removes every record whose time is up; returns how many.
    async fn sweep_expired(&self) -> Result<u64, StoreError>;
    /// Appends request-log entries (batched by the caller) and adds their `rollups` to the
    /// stored ones of the same keys, in one durable write: a rollup never counts an entry
    /// that was not written, nor misses one that was.
    async fn append_logs(&self, entries: Arc<Vec<LogRecord>>, rollups: Vec<Rollup>) -> Result<(), StoreError>;
    /// The entries matching `q`, newest first, `limit` of them after skipping `offset`, and how
    /// many match in all, counted up to [`LOG_COUNT_CAP`].
    async fn log_page(&self, q: LogQuery, offset: u64, limit: u32) -> Result<(u64, Vec<LogRow>), StoreError>;
    /// The stored rollups that `q` selects, oldest first.
    async fn rollups(&self, q: RollupQuery) -> Result<Vec<Rollup>, StoreError>;
    /// Removes log entries older than `before_ms`, then the oldest beyond `max_rows`; returns how
    /// many went.
    async fn prune_logs(&self, before_ms: i64, max_rows: u64) -> Result<u64, StoreError>;
    /// Removes the rollups of one tier that start before `before_ms`; returns how many went.
    async fn prune_rollups(&self, tier_ms: i64, before_ms: i64) -> Result<u64, StoreError>;
    /// Adds callers' per-minute rate-limit usage to the stored counts of the same caller and
    /// minute (the limiter counts, the server hands the counts over at each flush).
    async fn add_rate_usage(&self, minutes: Arc<Vec<UsageMinute>>) -> Result<(), StoreError>;
    /// One caller's stored per-minute usage from `since_unix` on, oldest first.
    async fn rate_usage(&self, key_id: String, since_unix: i64) -> Result<Vec<UsageMinute>, StoreError>;
    /// Removes per-minute usage older than `before_unix`; returns how many minutes went.
    async fn prune_rate_usage(&self, before_unix: i64) -> Result<u64, StoreError>;
    /// Appends an entry to its organisation's audit chain if the chain's head is still the one
    /// it follows (seq `seq - 1` with hash `prev_hash`, or no entry when `seq` is 1), in one
    /// atomic step; `Ok(false)` when the head moved (another writer appended first). Entries are
    /// never changed or removed through the store.
    async fn audit_append(&self, link: AuditLink) -> Result<bool, StoreError> {
        let _ = link;
        Err(no_audit())
    }
    /// The organisation's chain head: its last seq and hash.
    async fn audit_head(&self, org_id: &str) -> Result<Option<(u64, String)>, StoreError> {
        let _ = org_id;
        Err(no_audit())
    }
    /// Up to `limit` entries (JSON) after `after_seq`, in chain order.
    async fn audit_entries(&self, org_id: &str, after_seq: u64, limit: u32) -> Result<Vec<String>, StoreError> {
        let _ = (org_id, after_seq, limit);
        Err(no_audit())
    }
    /// Appends a signed checkpoint (JSON) of the organisation's chain if the last checkpoint is
    /// still `after` (byte for byte; `None`: there is none), in one atomic step; `Ok(false)`
    /// when another writer added one first. Each checkpoint names the one before it, so two
    /// instances must never both follow the same one.
    async fn audit_add_checkpoint(
        &self,
        org_id: &str,
        after: Option<String>,
        json: String,
    ) -> Result<bool, StoreError> {
        let _ = (org_id, after, json);
        Err(no_audit())
    }
    /// The organisation's last checkpoint (JSON), if any.
    async fn audit_last_checkpoint(&self, org_id: &str) -> Result<Option<String>, StoreError> {
        let _ = org_id;
        Err(no_audit())
    }
    /// The organisation's checkpoints, oldest first.
    async fn audit_checkpoints(&self, org_id: &str) -> Result<Vec<String>, StoreError> {
        let _ = org_id;
        Err(no_audit())
    }
    /// Readiness: the backend answers.
    async fn ping(&self) -> Result<(), StoreError>;
    /// Takes the lock `name` for at most `ttl` among every process sharing this store, waiting
    /// up to `wait`; `Ok(None)` when the store has one process only (the caller's own mutex is
    /// enough), `Err` when it could not be taken in time. Released with [`Store::unlock`].
    async fn lock(&self, name: &str, ttl: Duration, wait: Duration) -> Result<Option<String>, StoreError> {
        let _ = (name, ttl, wait);
        Ok(None)
    }
    /// Releases a lock taken with [`Store::lock`], if `token` still holds it.
    async fn unlock(&self, name: &str, token: &str) -> Result<(), StoreError> {
        let _ = (name, token);
        Ok(())
    }
}

/// What a store without an audit trail (a test's stand-in) answers to the audit calls.
fn no_audit() -> StoreError {
    StoreError::Backend("this store keeps no audit trail".into())
}

/// Writes the records named in `dirty` (ids marked by the request path since the last flush) in
/// one transaction, each as `record_of(id)`, its partition and body (`None`: the record is gone,
/// skip it). On failure the
/// ids are marked again for the next flush. The background flushes of session activity and key
/// usage both work this way.
pub(crate) async fn write_dirty(
    store: &dyn Store,
    kind: Kind,
    dirty: &crate::base::fast_map::FastSet<String>,
    record_of: impl Fn(&str) -> Option<(String, String)>,
) {
    let ids: Vec<String> = dirty.iter().map(|k| k.clone()).collect();
    let mut batch = Vec::with_capacity(ids.len());
    for id in &ids {
        dirty.remove(id);
        if let Some((partition, json)) = record_of(id) {
            batch.push(Stored { partition, id: id.clone(), json });
        }
    }
    if let Err(e) = store.put_many(kind, batch).await {
        tracing::warn!(error = %e, ?kind, "cannot persist buffered activity; will retry");
        for id in ids {
            dirty.insert(id);
        }
    }
}
