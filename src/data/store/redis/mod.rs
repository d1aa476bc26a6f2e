//! The Redis backend (`storage.backend: redis`): the shared truth of several instances.
//!
//! Every key starts with the configured prefix (`toolgate` by default). A record's key carries
//! its organisation as hash tag, `P:{org}:r:<kind>:<id>`, beside the set of its organisation's
//! ids of that kind (`P:{org}:i:<kind>`), so that an organisation's records sit in one slot; a
//! locator `P:loc:<kind>:<id>` names the organisation of a record read by id alone, and
//! `P:k:<kind>` lists every record of a kind (`<org>\n<id>`) for the load at start. A write is one
//! `MULTI`, so a record and its index entries appear together. Expiring records carry Redis'
//! own expiry (`PXAT`); an index entry whose record has gone is skipped when read and removed by
//! `sweep_expired`.
//!
//! The request log: per organisation a sorted set of entry ids by time (`P:{org}:log`), one per
//! gateway, app and for errors, and a hash of bodies. Rollups: per organisation and tier, a
//! sorted set of bucket starts and per bucket a hash whose fields are counters added with
//! `HINCRBY` (the histogram one field per bucket), so instances add to the same rollup without
//! reading it. Per-minute rate-limit usage: a hash per caller, counters by minute.
//!
//! Uniqueness is `SET NX`, a single use `GETDEL`: no lock held in any process.
//!
//! The same layout serves a Redis Cluster ([`connection`]): an organisation's keys share its
//! hash tag, and the keys of a slot of their own (locators, kind indexes, the lists of
//! organisations and of callers with usage) are written apart from the `MULTI` of the records
//! ([`Writes`]): index entries first when writing, last when removing, so a reader may meet an
//! entry whose record is not there (skipped, as an expired one) but never a record it cannot
//! find.

use super::{
    AuditLink, Kind, LogQuery, LogRecord, LogRow, RollupQuery, Store, StoreError, Stored, LOG_COUNT_CAP, NO_PARTITION,
};
use crate::observe::rollup::{Histogram, Rollup};
use async_trait::async_trait;
use redis::{AsyncCommands, Cmd, Pipeline};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use toolgate_filters::rate_limit::UsageMinute;

mod audit;
pub(crate) mod connection;

/// Records removed per batch by `delete_many`.
const DELETE_BATCH: usize = 1000;
pub(crate) use connection::{Conn, Target};

pub(crate) struct RedisStore {
    conn: Conn,
    keys: Arc<Keys>,
}

/// The names of the keys (all under the prefix), and the reads and writes that span several.
pub(crate) struct Keys {
    prefix: String,
}

/// The runtime every Redis connection of the process lives on. Connections run a task of their
/// own on the runtime they were made on, and toolgate's are several (the start-up one, which
/// ends, and Pingora's, one per service): this one lasts as long as the process.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redis")
            .enable_all()
            .build()
            .expect("a tokio runtime for Redis")
    })
}

/// Runs `f` on the Redis runtime and waits for it, from whichever runtime the caller is on.
pub(crate) async fn on_redis_runtime<T: Send + 'static>(
    f: impl std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    runtime().spawn(f).await.map_err(|e| backend(format!("task failed: {e}")))?
}

/// Runs `f` inside the Redis runtime's context, so that what it makes (a connection manager
/// that spawns its own tasks) lives there.
pub(crate) fn on_redis_runtime_sync<T>(f: impl FnOnce() -> T) -> T {
    let _on = runtime().enter();
    f()
}

/// Spawns a task that lives as long as the process on the Redis runtime.
pub(crate) fn spawn_on_redis_runtime(f: impl std::future::Future<Output = ()> + Send + 'static) {
    runtime().spawn(f);
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("redis: {e}"))
}

/// The hash tag of a partition (`NO_PARTITION` has one of its own).
fn tag(partition: &str) -> &str {
    if partition == NO_PARTITION {
        "_"
    } else {
        partition
    }
}

/// Entries a page of the log reads per round trip when it must filter them itself.
const SCAN_CHUNK: isize = 1000;

impl RedisStore {
    /// Connects lazily: the first command connects, and the connection is made again after a
    /// failure, each attempt bounded by `connect_timeout`, each command by `command_timeout`.
    pub(crate) fn open(
        target: &Target,
        prefix: &str,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Result<RedisStore, StoreError> {
        let _on = runtime().enter();
        let conn = target.shared(connect_timeout, command_timeout, 2).map_err(backend)?;
        Ok(RedisStore { conn, keys: Arc::new(Keys { prefix: prefix.to_string() }) })
    }

    /// Runs `f` with the key names and a clone of the shared connection on the Redis runtime,
    /// timing it as `operation` in the store metrics.
    async fn with<T, F, Fut>(&self, operation: &'static str, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Keys>, Conn) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let started = Instant::now();
        let done = on_redis_runtime(f(self.keys.clone(), self.conn.clone())).await;
        crate::observe::metrics::store_operation(operation, started.elapsed());
        done
    }
}

impl Keys {
    fn record_key(&self, kind: Kind, partition: &str, id: &str) -> String {
        format!("{}:{{{}}}:r:{}:{id}", self.prefix, tag(partition), kind.as_str())
    }

    fn locator(&self, kind: Kind, id: &str) -> String {
        format!("{}:loc:{}:{id}", self.prefix, kind.as_str())
    }

    fn partition_index(&self, kind: Kind, partition: &str) -> String {
        format!("{}:{{{}}}:i:{}", self.prefix, tag(partition), kind.as_str())
    }

    fn kind_index(&self, kind: Kind) -> String {
        format!("{}:k:{}", self.prefix, kind.as_str())
    }

    fn log_key(&self, org: &str, suffix: &str) -> String {
        format!("{}:{{{org}}}:log{suffix}", self.prefix)
    }

    fn log_orgs(&self) -> String {
        format!("{}:logorgs", self.prefix)
    }

    fn rollup_index(&self, org: &str, tier_ms: i64) -> String {
        format!("{}:{{{org}}}:ru:{tier_ms}", self.prefix)
    }

    fn rollup_bucket(&self, org: &str, tier_ms: i64, start_ms: i64) -> String {
        format!("{}:{{{org}}}:ru:{tier_ms}:{start_ms}", self.prefix)
    }

    fn usage_key(&self, key_id: &str) -> String {
        format!("{}:u:{{{key_id}}}", self.prefix)
    }

    fn usage_keys(&self) -> String {
        format!("{}:ukeys", self.prefix)
    }

    /// Adds a record's writes: the body (expiring at `expires_at_ms` if given) and its
    /// organisation's index entry in its slot, its locator and kind index entry apart.
    fn add_put(&self, w: &mut Writes, kind: Kind, partition: &str, id: &str, json: &str, expires_at_ms: Option<i64>) {
        let key = self.record_key(kind, partition, id);
        let p = w.slot(partition);
        match expires_at_ms {
            Some(at) => p.cmd("SET").arg(&key).arg(json).arg("PXAT").arg(at.max(1)).ignore(),
            None => p.set(&key, json).ignore(),
        };
        self.add_index(w, kind, partition, id);
    }

    /// Adds a record's index entries (its body is written or there).
    fn add_index(&self, w: &mut Writes, kind: Kind, partition: &str, id: &str) {
        w.slot(partition).sadd(self.partition_index(kind, partition), id).ignore();
        w.apart(redis::cmd("SET").arg(self.locator(kind, id)).arg(partition).to_owned());
        w.apart(redis::cmd("SADD").arg(self.kind_index(kind)).arg(format!("{partition}\n{id}")).to_owned());
    }

    /// The partition of a record, from its locator.
    async fn partition_of(&self, conn: &mut Conn, kind: Kind, id: &str) -> Result<Option<String>, StoreError> {
        conn.get(self.locator(kind, id)).await.map_err(backend)
    }

    /// Adds the removal of a record's index entries (its body is gone or going in `w`).
    fn add_unindex(&self, w: &mut Writes, kind: Kind, partition: &str, id: &str) {
        w.slot(partition).srem(self.partition_index(kind, partition), id).ignore();
        w.apart(redis::cmd("DEL").arg(self.locator(kind, id)).to_owned());
        w.apart(redis::cmd("SREM").arg(self.kind_index(kind)).arg(format!("{partition}\n{id}")).to_owned());
    }

    /// Reads the bodies of `(partition, id)` records; those gone (expired) are left out.
    async fn bodies(
        &self,
        conn: &mut Conn,
        kind: Kind,
        records: Vec<(String, String)>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut out = Vec::with_capacity(records.len());
        for chunk in records.chunks(500) {
            let keys: Vec<String> = chunk.iter().map(|(p, id)| self.record_key(kind, p, id)).collect();
            let values: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query_async(conn).await.map_err(backend)?;
            for ((_, id), v) in chunk.iter().zip(values) {
                if let Some(v) = v {
                    out.push((id.clone(), v));
                }
            }
        }
        Ok(out)
    }
}

/// A write that spans hash slots, in the parts a Redis Cluster runs: per hash tag a `MULTI` (a
/// record and its organisation's index change together), and the commands on keys of a slot
/// of their own, each sent alone. The parts are sent concurrently on the one multiplexed
/// connection, so a write costs two round trips whatever it spans.
#[derive(Default)]
struct Writes {
    slots: BTreeMap<String, Pipeline>,
    /// One command each (a pipeline of one, routed by its key on a cluster).
    apart: Vec<Pipeline>,
}

impl Writes {
    /// The `MULTI` of the slot of `partition`'s hash tag.
    fn slot(&mut self, partition: &str) -> &mut Pipeline {
        self.slots.entry(partition.to_string()).or_insert_with(|| {
            let mut p = redis::pipe();
            p.atomic();
            p
        })
    }

    fn apart(&mut self, cmd: Cmd) {
        let mut p = redis::pipe();
        p.add_command(cmd).ignore();
        self.apart.push(p);
    }

    /// Writing: the index entries first, then the records.
    async fn indexes_first(self, c: &Conn) -> Result<(), StoreError> {
        send_all(c, self.apart).await?;
        send_all(c, self.slots.into_values()).await
    }

    /// Removing: the records first, then the index entries.
    async fn records_first(self, c: &Conn) -> Result<(), StoreError> {
        send_all(c, self.slots.into_values()).await?;
        send_all(c, self.apart).await
    }
}

/// Sends every pipeline, concurrently, and waits for all.
async fn send_all(c: &Conn, pipes: impl IntoIterator<Item = Pipeline>) -> Result<(), StoreError> {
    let sends = pipes.into_iter().map(|p| {
        let mut c = c.clone();
        async move { p.query_async::<()>(&mut c).await }
    });
    futures_util::future::try_join_all(sends).await.map(|_| ()).map_err(backend)
}

/// A log entry's stored form: `<gateway>\n<app>\n<status>\n<body>`.
fn log_value(e: &LogRecord) -> String {
    let status = if e.error { "error" } else { "success" };
    format!("{}\n{}\n{status}\n{}", e.gateway.id, e.app, e.body)
}

struct StoredLog<'a> {
    gateway: &'a str,
    app: &'a str,
    status: &'a str,
    body: &'a str,
}

fn read_log(v: &str) -> Option<StoredLog<'_>> {
    let mut parts = v.splitn(4, '\n');
    Some(StoredLog { gateway: parts.next()?, app: parts.next()?, status: parts.next()?, body: parts.next()? })
}

/// The time of an entry id (`log_<ms in hex>...`, see `secrets::write_ordered_id`) is its score;
/// the id itself is kept as the member.
fn matches(q: &LogQuery, e: &StoredLog<'_>) -> bool {
    q.gateway_id.as_deref().is_none_or(|g| g == e.gateway)
        && q.app.as_deref().is_none_or(|a| a == e.app)
        && q.status.as_deref().is_none_or(|s| s == e.status)
}

/// A rollup's field prefix in its bucket's hash: `<gateway>\n<app>\n<function>\n`.
fn rollup_field(r: &Rollup, metric: &str) -> String {
    format!("{}\n{}\n{}\n{metric}", r.gateway_id, r.app, r.function)
}

#[async_trait]
impl Store for RedisStore {
    async fn audit_append(&self, link: AuditLink) -> Result<bool, StoreError> {
        self.audit_append_link(link).await
    }

    async fn audit_head(&self, org_id: &str) -> Result<Option<(u64, String)>, StoreError> {
        self.audit_head_of(org_id).await
    }

    async fn audit_entries(&self, org_id: &str, after_seq: u64, limit: u32) -> Result<Vec<String>, StoreError> {
        self.audit_entries_of(org_id, after_seq, limit).await
    }

    async fn audit_add_checkpoint(
        &self,
        org_id: &str,
        after: Option<String>,
        json: String,
    ) -> Result<bool, StoreError> {
        self.audit_add_checkpoint_of(org_id, after, json).await
    }

    async fn audit_last_checkpoint(&self, org_id: &str) -> Result<Option<String>, StoreError> {
        self.audit_last_checkpoint_of(org_id).await
    }

    async fn audit_checkpoints(&self, org_id: &str) -> Result<Vec<String>, StoreError> {
        self.audit_checkpoints_of(org_id).await
    }

    async fn put(&self, kind: Kind, partition: &str, id: &str, json: String) -> Result<(), StoreError> {
        let (partition, id) = (partition.to_string(), id.to_string());
        self.with("put", move |k, c| async move {
            let mut w = Writes::default();
            k.add_put(&mut w, kind, &partition, &id, &json, None);
            w.indexes_first(&c).await
        })
        .await
    }

    /// A group of records in a few commands, whatever its size (a group of new MCP sessions is
    /// hundreds): the indexes first, as [`Writes::indexes_first`] (every locator in one `MSET`,
    /// which a cluster client splits by slot, and one `SADD` to the kind's index), then one
    /// `MULTI` per partition with its bodies and one `SADD` to its index. Two commands apart per
    /// record, as [`Keys::add_put`] makes them, were 2n pipelines of one.
    async fn put_many(&self, kind: Kind, items: Vec<Stored>) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        self.with("put_many", move |k, c| async move {
            let mut locate = redis::cmd("MSET");
            let mut kind_index = redis::cmd("SADD");
            kind_index.arg(k.kind_index(kind));
            let mut by_partition: BTreeMap<&str, Vec<&Stored>> = BTreeMap::new();
            for s in &items {
                locate.arg(k.locator(kind, &s.id)).arg(&s.partition);
                kind_index.arg(format!("{}\n{}", s.partition, s.id));
                by_partition.entry(s.partition.as_str()).or_default().push(s);
            }
            let (mut a, mut b) = (c.clone(), c.clone());
            futures_util::try_join!(locate.query_async::<()>(&mut a), kind_index.query_async::<()>(&mut b))
                .map_err(backend)?;
            let mut w = Writes::default();
            for (partition, records) in by_partition {
                let p = w.slot(partition);
                for s in &records {
                    p.set(k.record_key(kind, partition, &s.id), &s.json).ignore();
                }
                p.sadd(k.partition_index(kind, partition), records.iter().map(|s| s.id.as_str()).collect::<Vec<_>>())
                    .ignore();
            }
            send_all(&c, w.slots.into_values()).await
        })
        .await
    }

    async fn put_expiring(
        &self,
        kind: Kind,
        partition: &str,
        id: &str,
        json: String,
        expires_at_ms: i64,
    ) -> Result<(), StoreError> {
        let (partition, id) = (partition.to_string(), id.to_string());
        self.with("put_expiring", move |k, c| async move {
            let mut w = Writes::default();
            k.add_put(&mut w, kind, &partition, &id, &json, Some(expires_at_ms));
            w.indexes_first(&c).await
        })
        .await
    }

    async fn put_if_absent(&self, kind: Kind, partition: &str, id: &str, json: String) -> Result<bool, StoreError> {
        let (partition, id) = (partition.to_string(), id.to_string());
        self.with("put_if_absent", move |k, mut c| async move {
            let key = k.record_key(kind, &partition, &id);
            let won: Option<String> =
                redis::cmd("SET").arg(&key).arg(&json).arg("NX").query_async(&mut c).await.map_err(backend)?;
            if won.is_none() {
                return Ok(false);
            }
            let mut w = Writes::default();
            k.add_index(&mut w, kind, &partition, &id);
            w.indexes_first(&c).await?;
            Ok(true)
        })
        .await
    }

    async fn get(&self, kind: Kind, id: &str) -> Result<Option<String>, StoreError> {
        let id = id.to_string();
        self.with("get", move |k, mut c| async move {
            let Some(partition) = k.partition_of(&mut c, kind, &id).await? else { return Ok(None) };
            c.get(k.record_key(kind, &partition, &id)).await.map_err(backend)
        })
        .await
    }

    async fn take(&self, kind: Kind, id: &str) -> Result<Option<String>, StoreError> {
        let id = id.to_string();
        self.with("take", move |k, mut c| async move {
            let Some(partition) = k.partition_of(&mut c, kind, &id).await? else { return Ok(None) };
            let taken: Option<String> = redis::cmd("GETDEL")
                .arg(k.record_key(kind, &partition, &id))
                .query_async(&mut c)
                .await
                .map_err(backend)?;
            let mut w = Writes::default();
            k.add_unindex(&mut w, kind, &partition, &id);
            w.records_first(&c).await?;
            Ok(taken)
        })
        .await
    }

    async fn delete(&self, kind: Kind, id: &str) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.with("delete", move |k, mut c| async move {
            let Some(partition) = k.partition_of(&mut c, kind, &id).await? else { return Ok(false) };
            let removed: u64 = c.del(k.record_key(kind, &partition, &id)).await.map_err(backend)?;
            let mut w = Writes::default();
            k.add_unindex(&mut w, kind, &partition, &id);
            w.records_first(&c).await?;
            Ok(removed > 0)
        })
        .await
    }

    /// In batches of [`DELETE_BATCH`]: per batch one `MGET` of the locators, one `DEL` of the
    /// records, then the index entries (per organisation one `SREM` in its `MULTI`, one `SREM`
    /// from the kind's list, one `DEL` of the locators): a few round trips per batch, where one
    /// by one took three per record.
    async fn delete_many(&self, kind: Kind, ids: Vec<String>) -> Result<u64, StoreError> {
        self.with("delete_many", move |k, mut c| async move {
            let mut n = 0;
            for batch in ids.chunks(DELETE_BATCH) {
                let locators: Vec<String> = batch.iter().map(|id| k.locator(kind, id)).collect();
                let partitions: Vec<Option<String>> =
                    redis::cmd("MGET").arg(&locators).query_async(&mut c).await.map_err(backend)?;
                let found: Vec<(String, &String)> =
                    partitions.into_iter().zip(batch).filter_map(|(p, id)| p.map(|p| (p, id))).collect();
                if found.is_empty() {
                    continue;
                }
                let records: Vec<String> = found.iter().map(|(p, id)| k.record_key(kind, p, id)).collect();
                let removed: u64 = redis::cmd("DEL").arg(&records).query_async(&mut c).await.map_err(backend)?;
                n += removed;
                let mut by_partition: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
                for (p, id) in &found {
                    by_partition.entry(p.as_str()).or_default().push(id);
                }
                let mut w = Writes::default();
                for (p, ids) in by_partition {
                    w.slot(p).srem(k.partition_index(kind, p), ids).ignore();
                }
                let members: Vec<String> = found.iter().map(|(p, id)| format!("{p}\n{id}")).collect();
                w.apart(redis::cmd("SREM").arg(k.kind_index(kind)).arg(members).to_owned());
                w.records_first(&c).await?;
                // Keys of many slots: a command of its own, which a cluster client splits by slot.
                let locators: Vec<String> = found.iter().map(|(_, id)| k.locator(kind, id)).collect();
                redis::cmd("DEL").arg(locators).query_async::<()>(&mut c).await.map_err(backend)?;
            }
            Ok(n)
        })
        .await
    }

    async fn load_all(&self, kind: Kind) -> Result<Vec<(String, String)>, StoreError> {
        self.with("load_all", move |k, mut c| async move {
            let members: Vec<String> = c.smembers(k.kind_index(kind)).await.map_err(backend)?;
            let records = members
                .into_iter()
                .filter_map(|m| m.split_once('\n').map(|(p, id)| (p.to_string(), id.to_string())))
                .collect();
            k.bodies(&mut c, kind, records).await
        })
        .await
    }

    async fn load_partition(&self, kind: Kind, partition: &str) -> Result<Vec<(String, String)>, StoreError> {
        let partition = partition.to_string();
        self.with("load_partition", move |k, mut c| async move {
            let ids: Vec<String> = c.smembers(k.partition_index(kind, &partition)).await.map_err(backend)?;
            let records = ids.into_iter().map(|id| (partition.clone(), id)).collect();
            k.bodies(&mut c, kind, records).await
        })
        .await
    }

    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        self.with("sweep_expired", move |k, mut c| async move {
            let mut swept = 0;
            for kind in [Kind::MfaChallenge, Kind::MfaToken] {
                let members: Vec<String> = c.smembers(k.kind_index(kind)).await.map_err(backend)?;
                for m in members {
                    let Some((partition, id)) = m.split_once('\n') else { continue };
                    let live: bool = c.exists(k.record_key(kind, partition, id)).await.map_err(backend)?;
                    if !live {
                        let mut w = Writes::default();
                        k.add_unindex(&mut w, kind, partition, id);
                        w.records_first(&c).await?;
                        swept += 1;
                    }
                }
            }
            Ok(swept)
        })
        .await
    }

    async fn append_logs(&self, entries: Arc<Vec<LogRecord>>, rollups: Vec<Rollup>) -> Result<(), StoreError> {
        self.with("append_logs", move |k, c| async move {
            // Per organisation one MULTI (its log and rollups share its hash tag); the list of
            // organisations with logs apart.
            let mut w = Writes::default();
            let mut orgs = BTreeSet::new();
            let mut id = String::with_capacity(32);
            for e in entries.iter() {
                crate::base::secrets::write_ordered_id(&mut id, "log", e.ts_ms);
                let org = &e.gateway.org_id;
                orgs.insert(org.as_str());
                let p = w.slot(org);
                p.hset(k.log_key(org, ":b"), &id, log_value(e)).ignore();
                p.zadd(k.log_key(org, ""), &id, e.ts_ms).ignore();
                p.zadd(k.log_key(org, &format!(":g:{}", e.gateway.id)), &id, e.ts_ms).ignore();
                p.zadd(k.log_key(org, &format!(":a:{}", e.app)), &id, e.ts_ms).ignore();
                if e.error {
                    p.zadd(k.log_key(org, ":e"), &id, e.ts_ms).ignore();
                }
            }
            for r in &rollups {
                orgs.insert(r.org_id.as_str());
                let bucket = k.rollup_bucket(&r.org_id, r.tier_ms, r.start_ms);
                let p = w.slot(&r.org_id);
                p.zadd(k.rollup_index(&r.org_id, r.tier_ms), r.start_ms, r.start_ms).ignore();
                for (metric, n) in [("r", r.requests), ("e", r.errors), ("t", r.total_us), ("et", r.error_us)] {
                    if n > 0 {
                        p.hincr(&bucket, rollup_field(r, metric), n).ignore();
                    }
                }
                for pair in r.histogram.encode().chunks_exact(10) {
                    let b = u16::from_le_bytes([pair[0], pair[1]]);
                    let mut n = [0u8; 8];
                    n.copy_from_slice(&pair[2..]);
                    p.hincr(&bucket, rollup_field(r, &format!("h{b}")), u64::from_le_bytes(n)).ignore();
                }
            }
            if !orgs.is_empty() {
                w.apart(redis::cmd("SADD").arg(k.log_orgs()).arg(orgs.into_iter().collect::<Vec<_>>()).to_owned());
            }
            w.indexes_first(&c).await
        })
        .await
    }

    async fn log_page(&self, q: LogQuery, offset: u64, limit: u32) -> Result<(u64, Vec<LogRow>), StoreError> {
        self.with("log_page", move |k, mut c| async move {
            let org = q.org_id.as_str();
            // The most selective index the query names; what it does not select is checked on
            // each entry.
            let (index, rest) = match (&q.gateway_id, &q.app, q.status.as_deref()) {
                (Some(g), _, _) => (k.log_key(org, &format!(":g:{g}")), q.app.is_some() || q.status.is_some()),
                (None, Some(a), _) => (k.log_key(org, &format!(":a:{a}")), q.status.is_some()),
                (None, None, Some("error")) => (k.log_key(org, ":e"), false),
                (None, None, Some(_)) => (k.log_key(org, ""), true),
                (None, None, None) => (k.log_key(org, ""), false),
            };
            let max = q.until_ms.map_or_else(|| "+inf".to_string(), |t| t.to_string());
            let min = q.since_ms.map_or_else(|| "-inf".to_string(), |t| t.to_string());
            let range = (max.as_str(), min.as_str());
            let mut rows = Vec::new();
            if !rest {
                let total: u64 = c.zcount(&index, &min, &max).await.map_err(backend)?;
                for (id, ts, v) in k.newest_logs(&mut c, org, &index, range, offset, limit as usize).await? {
                    if let Some(e) = v.as_deref().and_then(read_log) {
                        rows.push(LogRow { id, ts_ms: ts, body: e.body.to_string() });
                    }
                }
                return Ok((total.min(LOG_COUNT_CAP), rows));
            }
            let mut total = 0u64;
            let mut skip = 0u64;
            loop {
                let entries = k.newest_logs(&mut c, org, &index, range, skip, SCAN_CHUNK as usize).await?;
                let read = entries.len();
                skip += read as u64;
                for (id, ts, v) in entries {
                    let Some(e) = v.as_deref().and_then(read_log) else { continue };
                    if !matches(&q, &e) {
                        continue;
                    }
                    if total >= offset && rows.len() < limit as usize {
                        rows.push(LogRow { id, ts_ms: ts, body: e.body.to_string() });
                    }
                    total += 1;
                }
                if total >= LOG_COUNT_CAP || read < SCAN_CHUNK as usize {
                    break;
                }
            }
            Ok((total.min(LOG_COUNT_CAP), rows))
        })
        .await
    }

    async fn rollups(&self, q: RollupQuery) -> Result<Vec<Rollup>, StoreError> {
        self.with("rollups", move |k, mut c| async move {
            let starts: Vec<i64> =
                c.zrangebyscore(k.rollup_index(&q.org_id, q.tier_ms), q.since_ms, "+inf").await.map_err(backend)?;
            let mut out = Vec::new();
            for start in starts {
                let fields: Vec<(String, u64)> =
                    c.hgetall(k.rollup_bucket(&q.org_id, q.tier_ms, start)).await.map_err(backend)?;
                // (gateway, app, function) -> the rollup being read, and its histogram's pairs.
                let mut by_key: BTreeMap<(String, String, String), (Rollup, Vec<u8>)> = BTreeMap::new();
                for (field, n) in fields {
                    let mut parts = field.splitn(4, '\n');
                    let (Some(g), Some(a), Some(f), Some(metric)) =
                        (parts.next(), parts.next(), parts.next(), parts.next())
                    else {
                        continue;
                    };
                    if q.gateway_id.as_deref().is_some_and(|x| x != g) || q.app.as_deref().is_some_and(|x| x != a) {
                        continue;
                    }
                    let entry = by_key.entry((g.to_string(), a.to_string(), f.to_string())).or_insert_with(|| {
                        let r = Rollup {
                            tier_ms: q.tier_ms,
                            start_ms: start,
                            org_id: q.org_id.clone(),
                            gateway_id: g.to_string(),
                            app: a.to_string(),
                            function: f.to_string(),
                            ..Rollup::default()
                        };
                        (r, Vec::new())
                    });
                    match metric {
                        "r" => entry.0.requests = n,
                        "e" => entry.0.errors = n,
                        "t" => entry.0.total_us = n,
                        "et" => entry.0.error_us = n,
                        h if q.histograms => {
                            if let Some(b) = h.strip_prefix('h').and_then(|b| b.parse::<u16>().ok()) {
                                entry.1.extend_from_slice(&b.to_le_bytes());
                                entry.1.extend_from_slice(&n.to_le_bytes());
                            }
                        }
                        _ => {}
                    }
                }
                for (_, (mut r, pairs)) in by_key {
                    let mut h = Histogram::default();
                    h.add_encoded(&pairs);
                    r.histogram = h;
                    out.push(r);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn prune_logs(&self, before_ms: i64, max_rows: u64) -> Result<u64, StoreError> {
        self.with("prune_logs", move |k, mut c| async move {
            let orgs: Vec<String> = c.smembers(k.log_orgs()).await.map_err(backend)?;
            let mut removed = 0u64;
            for org in &orgs {
                let old: Vec<String> =
                    c.zrangebyscore(k.log_key(org, ""), "-inf", format!("({before_ms}")).await.map_err(backend)?;
                removed += k.remove_logs(&mut c, org, old).await?;
            }
            // Then the oldest beyond `max_rows`, all organisations together.
            loop {
                let mut total = 0u64;
                let mut oldest: Option<(String, f64)> = None;
                for org in &orgs {
                    total += c.zcard::<_, u64>(k.log_key(org, "")).await.map_err(backend)?;
                    let first: Vec<(String, f64)> =
                        c.zrange_withscores(k.log_key(org, ""), 0, 0).await.map_err(backend)?;
                    if let Some((_, ts)) = first.first() {
                        if oldest.as_ref().is_none_or(|(_, t)| ts < t) {
                            oldest = Some((org.clone(), *ts));
                        }
                    }
                }
                let excess = total.saturating_sub(max_rows);
                let Some((org, _)) = oldest.filter(|_| excess > 0) else { break };
                let n = excess.min(SCAN_CHUNK as u64) as isize;
                let ids: Vec<String> = c.zrange(k.log_key(&org, ""), 0, n - 1).await.map_err(backend)?;
                removed += k.remove_logs(&mut c, &org, ids).await?;
            }
            Ok(removed)
        })
        .await
    }

    async fn prune_rollups(&self, tier_ms: i64, before_ms: i64) -> Result<u64, StoreError> {
        self.with("prune_rollups", move |k, mut c| async move {
            let orgs: Vec<String> = c.smembers(k.log_orgs()).await.map_err(backend)?;
            let mut removed = 0u64;
            for org in &orgs {
                let index = k.rollup_index(org, tier_ms);
                let starts: Vec<i64> =
                    c.zrangebyscore(&index, "-inf", format!("({before_ms}")).await.map_err(backend)?;
                if starts.is_empty() {
                    continue;
                }
                let mut p = redis::pipe();
                for s in &starts {
                    p.hkeys(k.rollup_bucket(org, tier_ms, *s));
                }
                let fields: Vec<Vec<String>> = p.query_async(&mut c).await.map_err(backend)?;
                // One rollup per (gateway, app, function) of a bucket: its request counter.
                removed += fields.iter().flatten().filter(|f| f.ends_with("\nr")).count() as u64;
                let mut p = redis::pipe();
                p.atomic();
                for s in &starts {
                    p.del(k.rollup_bucket(org, tier_ms, *s)).ignore();
                }
                p.zrembyscore(&index, "-inf", format!("({before_ms}")).ignore();
                p.query_async::<()>(&mut c).await.map_err(backend)?;
            }
            Ok(removed)
        })
        .await
    }

    async fn add_rate_usage(&self, minutes: Arc<Vec<UsageMinute>>) -> Result<(), StoreError> {
        self.with("add_rate_usage", move |k, c| async move {
            // Per caller one MULTI (its usage hash has the caller as hash tag), the list of
            // callers apart.
            let mut w = Writes::default();
            let mut callers = BTreeSet::new();
            for m in minutes.iter() {
                let key = k.usage_key(&m.key_id);
                let p = w.slot(&m.key_id);
                for (metric, n) in [("r", m.requests), ("l", m.rate_limited), ("s", m.remaining_sum)] {
                    p.hincr(&key, format!("{}:{metric}", m.minute_unix), n).ignore();
                }
                callers.insert(m.key_id.as_str());
            }
            if !callers.is_empty() {
                w.apart(redis::cmd("SADD").arg(k.usage_keys()).arg(callers.into_iter().collect::<Vec<_>>()).to_owned());
            }
            w.indexes_first(&c).await
        })
        .await
    }

    async fn rate_usage(&self, key_id: String, since_unix: i64) -> Result<Vec<UsageMinute>, StoreError> {
        self.with("rate_usage", move |k, mut c| async move {
            let fields: Vec<(String, u64)> = c.hgetall(k.usage_key(&key_id)).await.map_err(backend)?;
            let mut by_minute: BTreeMap<u64, UsageMinute> = BTreeMap::new();
            for (field, n) in fields {
                let Some((minute, metric)) = field.split_once(':') else { continue };
                let Ok(minute) = minute.parse::<u64>() else { continue };
                if (minute as i64) < since_unix {
                    continue;
                }
                let m = by_minute.entry(minute).or_insert_with(|| UsageMinute {
                    key_id: key_id.clone(),
                    minute_unix: minute,
                    ..UsageMinute::default()
                });
                match metric {
                    "r" => m.requests = n,
                    "l" => m.rate_limited = n,
                    "s" => m.remaining_sum = n,
                    _ => {}
                }
            }
            Ok(by_minute.into_values().collect())
        })
        .await
    }

    async fn prune_rate_usage(&self, before_unix: i64) -> Result<u64, StoreError> {
        self.with("prune_rate_usage", move |k, mut c| async move {
            let keys: Vec<String> = c.smembers(k.usage_keys()).await.map_err(backend)?;
            let mut removed = 0u64;
            for key_id in keys {
                let key = k.usage_key(&key_id);
                let fields: Vec<String> = c.hkeys(&key).await.map_err(backend)?;
                let old: Vec<&String> = fields
                    .iter()
                    .filter(|f| {
                        f.split_once(':').and_then(|(m, _)| m.parse::<i64>().ok()).is_some_and(|m| m < before_unix)
                    })
                    .collect();
                if old.is_empty() {
                    continue;
                }
                removed += old.iter().filter(|f| f.ends_with(":r")).count() as u64;
                let _: () = c.hdel(&key, &old).await.map_err(backend)?;
            }
            Ok(removed)
        })
        .await
    }

    async fn lock(&self, name: &str, ttl: Duration, wait: Duration) -> Result<Option<String>, StoreError> {
        let name = name.to_string();
        self.with("lock", move |k, mut c| async move {
            let key = format!("{}:lock:{{{name}}}", k.prefix);
            let token = crate::base::secrets::new_id("lock");
            let until = Instant::now() + wait;
            let mut pause = Duration::from_millis(2);
            loop {
                let taken: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl.as_millis() as u64)
                    .query_async(&mut c)
                    .await
                    .map_err(backend)?;
                if taken.is_some() {
                    return Ok(Some(token));
                }
                if Instant::now() + pause > until {
                    return Err(StoreError::Busy(name));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
        })
        .await
    }

    async fn unlock(&self, name: &str, token: &str) -> Result<(), StoreError> {
        let (name, token) = (name.to_string(), token.to_string());
        self.with("unlock", move |k, mut c| async move {
            let key = format!("{}:lock:{{{name}}}", k.prefix);
            // Only the holder's token releases it: a lock that expired and was taken again stays.
            let release = redis::Script::new(
                "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end",
            );
            release.key(&key).arg(&token).invoke_async::<i64>(&mut c).await.map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.with(
            "ping",
            move |_, mut c| async move { redis::cmd("PING").query_async::<()>(&mut c).await.map_err(backend) },
        )
        .await
    }
}

impl Keys {
    /// `count` of `org`'s log entries in `index`, newest first from the `skip`-th, within the
    /// score `range` (max, min): id, time and stored value (`None` if gone meanwhile).
    async fn newest_logs(
        &self,
        c: &mut Conn,
        org: &str,
        index: &str,
        range: (&str, &str),
        skip: u64,
        count: usize,
    ) -> Result<Vec<(String, i64, Option<String>)>, StoreError> {
        let ids: Vec<(String, f64)> = redis::cmd("ZREVRANGEBYSCORE")
            .arg(index)
            .arg(range.0)
            .arg(range.1)
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(skip)
            .arg(count)
            .query_async(c)
            .await
            .map_err(backend)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<&str> = ids.iter().map(|(id, _)| id.as_str()).collect();
        let values: Vec<Option<String>> =
            redis::cmd("HMGET").arg(self.log_key(org, ":b")).arg(&names).query_async(c).await.map_err(backend)?;
        Ok(ids.into_iter().zip(values).map(|((id, ts), v)| (id, ts as i64, v)).collect())
    }

    /// Removes log entries of `org` by id from the bodies and every index they are in.
    async fn remove_logs(&self, c: &mut Conn, org: &str, ids: Vec<String>) -> Result<u64, StoreError> {
        let mut removed = 0;
        for chunk in ids.chunks(SCAN_CHUNK as usize) {
            let bodies = self.log_key(org, ":b");
            let values: Vec<Option<String>> =
                redis::cmd("HMGET").arg(&bodies).arg(chunk).query_async(c).await.map_err(backend)?;
            let mut p = redis::pipe();
            p.atomic();
            for (id, v) in chunk.iter().zip(values) {
                if let Some(e) = v.as_deref().and_then(read_log) {
                    p.zrem(self.log_key(org, &format!(":g:{}", e.gateway)), id).ignore();
                    p.zrem(self.log_key(org, &format!(":a:{}", e.app)), id).ignore();
                }
                p.zrem(self.log_key(org, ":e"), id).ignore();
                p.zrem(self.log_key(org, ""), id).ignore();
                p.hdel(&bodies, id).ignore();
            }
            p.query_async::<()>(c).await.map_err(backend)?;
            removed += chunk.len() as u64;
        }
        Ok(removed)
    }
}
