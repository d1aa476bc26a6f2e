//! The embedded backend: SQLite (bundled, so no system library) in `storage.path`.
//!
//! Why SQLite: one file, transactions, `synchronous=FULL` in WAL mode makes a committed write
//! survive `kill -9` and power loss. The request log is kept in compressed slices with a
//! summary per gateway and app ([`super::log_slices`] says how and why); its writes are
//! committed with `synchronous=NORMAL` (see `without_fsync`). `benches/analytics.sh` measures
//! its reads over 10 million entries.
//! Calls run on the blocking pool so a slow fsync never stalls a Pingora worker.

use super::log_slices;
use super::{AuditLink, Kind, LogQuery, LogRecord, LogRow, RollupQuery, Store, StoreError, Stored, LOG_COUNT_CAP};
use crate::base::time::now_ms;
use crate::observe::rollup::{Histogram, Rollup};
use async_trait::async_trait;
use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use toolgate_filters::rate_limit::UsageMinute;

pub struct EmbeddedStore {
    conn: Arc<Mutex<Connection>>,
    /// Which log tables of older builds are still there (see [`log_tables`]).
    legacy_logs: Arc<LegacyLogs>,
}

/// The log tables older builds wrote, read after the slices until they are empty (see
/// [`log_tables`]): per [`LogTable`], whether it is still there.
#[derive(Debug, Default)]
struct LegacyLogs {
    entries: AtomicBool,
    logs: AtomicBool,
}

impl LegacyLogs {
    fn flag(&self, table: LogTable) -> &AtomicBool {
        match table {
            LogTable::Entries => &self.entries,
            LogTable::Legacy => &self.logs,
        }
    }

    /// The tables still there, newest first.
    fn present(&self) -> Vec<LogTable> {
        [LogTable::Entries, LogTable::Legacy].into_iter().filter(|t| self.flag(*t).load(Ordering::Relaxed)).collect()
    }
}

/// The database's file in `storage.path`.
pub(crate) const DB_FILE: &str = "toolgate.sqlite3";

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl EmbeddedStore {
    pub fn open(dir: &Path) -> Result<EmbeddedStore, StoreError> {
        let io = |p: &Path, e: std::io::Error| backend(format!("{}: {e}", p.display()));
        create_private_dir(dir).map_err(|e| io(dir, e))?;
        let file = dir.join(DB_FILE);
        create_private_file(&file).map_err(|e| io(&file, e))?;
        let conn = Connection::open(&file).map_err(backend)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=FULL;
             PRAGMA busy_timeout=5000;
             CREATE TABLE IF NOT EXISTS records (
                 kind TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL,
                 PRIMARY KEY (kind, id)) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS rollups (
                 org_id TEXT NOT NULL, tier_ms INTEGER NOT NULL, start_ms INTEGER NOT NULL,
                 gateway_id TEXT NOT NULL, app TEXT NOT NULL, function TEXT NOT NULL,
                 requests INTEGER NOT NULL, errors INTEGER NOT NULL, total_us INTEGER NOT NULL,
                 error_us INTEGER NOT NULL, histogram BLOB NOT NULL,
                 PRIMARY KEY (org_id, tier_ms, start_ms, gateway_id, app, function)) WITHOUT ROWID;
             CREATE INDEX IF NOT EXISTS rollups_tier ON rollups (tier_ms, start_ms);
             CREATE INDEX IF NOT EXISTS rollups_counts ON rollups (
                 org_id, tier_ms, start_ms, gateway_id, app, function, requests, errors, total_us, error_us);
             CREATE TABLE IF NOT EXISTS rate_usage (
                 key_id TEXT NOT NULL, minute INTEGER NOT NULL, requests INTEGER NOT NULL,
                 rate_limited INTEGER NOT NULL, remaining_sum INTEGER NOT NULL,
                 PRIMARY KEY (key_id, minute)) WITHOUT ROWID;
             CREATE INDEX IF NOT EXISTS rate_usage_minute ON rate_usage (minute);
             CREATE TABLE IF NOT EXISTS audit_entries (
                 org_id TEXT NOT NULL, seq INTEGER NOT NULL, hash TEXT NOT NULL, body TEXT NOT NULL,
                 PRIMARY KEY (org_id, seq)) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS audit_checkpoints (
                 org_id TEXT NOT NULL, n INTEGER NOT NULL, body TEXT NOT NULL,
                 PRIMARY KEY (org_id, n)) WITHOUT ROWID;",
        )
        .map_err(backend)?;
        add_expiry_column(&conn)?;
        add_partition_column(&conn)?;
        let legacy_logs = log_tables(&conn)?;
        Ok(EmbeddedStore { conn: Arc::new(Mutex::new(conn)), legacy_logs: Arc::new(legacy_logs) })
    }

    /// Runs `f` on the blocking pool with the connection; its time (waiting for the connection
    /// included) is the `operation`'s in the store metrics.
    async fn with<T: Send + 'static>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let done = f(&mut conn.lock());
            crate::observe::metrics::store_operation(operation, started.elapsed());
            done
        })
        .await
        .map_err(|e| backend(format!("store task failed: {e}")))?
    }
}

/// Adds a column that stores made by an older build lack (`ddl`: its definition).
fn add_column_if_missing(conn: &Connection, name: &str, ddl: &str) -> Result<(), StoreError> {
    let count: i64 = conn
        .query_row("SELECT COUNT(*) FROM pragma_table_info('records') WHERE name = ?1", [name], |r| r.get(0))
        .map_err(backend)?;
    if count == 0 {
        conn.execute_batch(&format!("ALTER TABLE records ADD COLUMN {name} {ddl}")).map_err(backend)?;
    }
    Ok(())
}

/// Records that expire keep their deadline in `expires_ms` (NULL: never).
fn add_expiry_column(conn: &Connection) -> Result<(), StoreError> {
    add_column_if_missing(conn, "expires_ms", "INTEGER")?;
    conn.execute_batch("CREATE INDEX IF NOT EXISTS records_expiry ON records (expires_ms) WHERE expires_ms IS NOT NULL")
        .map_err(backend)
}

/// Each record's organisation (`''` for none); rows of older stores are in no partition until
/// they are next written.
fn add_partition_column(conn: &Connection) -> Result<(), StoreError> {
    add_column_if_missing(conn, "partition", "TEXT NOT NULL DEFAULT ''")?;
    conn.execute_batch("CREATE INDEX IF NOT EXISTS records_partition ON records (kind, partition)").map_err(backend)
}

/// The request log as the previous build kept it (`log_entries`, read until it is empty): one
/// row per entry, keyed by `seq`, its time in milliseconds shifted left by [`SEQ_BITS`] plus a
/// counter, so that a time range is a key range; indexes on `(org_id)`, `(org_id, gateway_id)`,
/// `(org_id, app)` and partial ones of errors, each ordered by time.
///
/// Bits of `seq` below the millisecond: entries of one millisecond are told apart by a counter
/// (65,536 of them per millisecond; a taken key moves to the next value, past the last one into
/// the next millisecond's keys).
const SEQ_BITS: u32 = 16;

/// The first key of millisecond `ts_ms` (times before 1970 are 1970's; times past what the key
/// can hold, year 6429, are the last millisecond it can).
fn seq_of(ts_ms: i64) -> i64 {
    ts_ms.clamp(0, i64::MAX >> SEQ_BITS) << SEQ_BITS
}

/// Creates the log's slice tables, and finds the tables older builds wrote: `log_entries`
/// (keyed by time, see [`SEQ_BITS`]) and `logs` (keyed by the text id, `ts_ms` in every
/// index). They are not copied (for a big log that would hold the start, and with it
/// `--upgrade`, for minutes): they are read after the slices, since every entry written since
/// is newer, and pruned by their own indexes until they are empty, then dropped
/// (`log_retention_days` after the upgrade at the latest).
fn log_tables(conn: &Connection) -> Result<LegacyLogs, StoreError> {
    conn.execute_batch(log_slices::SCHEMA).map_err(backend)?;
    let exists = |name: &str| -> Result<bool, StoreError> {
        let n: i64 = conn
            .query_row("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1", [name], |r| r.get(0))
            .map_err(backend)?;
        Ok(n > 0)
    };
    Ok(LegacyLogs { entries: AtomicBool::new(exists("log_entries")?), logs: AtomicBool::new(exists("logs")?) })
}

/// A log table of an older build (see [`log_tables`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LogTable {
    /// `log_entries`, of the build before the slices.
    Entries,
    /// `logs`, of the build before that.
    Legacy,
}

impl LogTable {
    fn name(self) -> &'static str {
        match self {
            LogTable::Entries => "log_entries",
            LogTable::Legacy => "logs",
        }
    }
}

/// The store holds key hashes, sealed credentials and the request log: only the owner may read
/// it. A directory toolgate makes is 0700; one that exists keeps its mode (it may be shared).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Creates the database file owner-only (SQLite gives its `-wal` and `-shm` files the database
/// file's mode), and takes group and other rights away from one made by an older version.
fn create_private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(path)?;
    let mode = f.metadata()?.permissions().mode();
    if mode & 0o077 != 0 {
        f.set_permissions(std::fs::Permissions::from_mode(mode & 0o700))?;
        for suffix in ["-wal", "-shm"] {
            let side = path.with_file_name(format!("toolgate.sqlite3{suffix}"));
            if side.exists() {
                std::fs::set_permissions(&side, std::fs::Permissions::from_mode(0o600))?;
            }
        }
    }
    Ok(())
}

/// Runs `write` with `synchronous=NORMAL`, for what already waited in memory for up to a flush
/// period (request-log entries, rate-limit counts): their commits need not wait for the disk.
/// In WAL mode NORMAL still keeps a commit through a crash of the process (only a power loss or
/// an OS crash can undo the last ones) and saves an fsync per write. Every other write keeps
/// FULL: the setting is put back before the connection is released.
fn without_fsync(
    c: &mut Connection,
    write: impl FnOnce(&mut Connection) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    c.pragma_update(None, "synchronous", "NORMAL").map_err(backend)?;
    let written = write(c);
    let restored = c.pragma_update(None, "synchronous", "FULL").map_err(backend);
    written.and(restored)
}

/// A count as SQLite's integer (counts never reach `i64::MAX`; if one did, it would stay there).
fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Adds per-minute rate-limit counts to the stored ones, in one transaction.
fn insert_rate_usage(c: &mut Connection, minutes: &[UsageMinute]) -> Result<(), StoreError> {
    let tx = c.transaction().map_err(backend)?;
    {
        let mut add = tx
            .prepare_cached(
                "INSERT INTO rate_usage (key_id, minute, requests, rate_limited, remaining_sum)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (key_id, minute) DO UPDATE SET
                     requests = requests + excluded.requests,
                     rate_limited = rate_limited + excluded.rate_limited,
                     remaining_sum = remaining_sum + excluded.remaining_sum",
            )
            .map_err(backend)?;
        for m in minutes {
            let row = params![
                m.key_id,
                clamp(m.minute_unix),
                clamp(m.requests),
                clamp(m.rate_limited),
                clamp(m.remaining_sum)
            ];
            add.execute(row).map_err(backend)?;
        }
    }
    tx.commit().map_err(backend)
}

/// One transaction of log entries and the rollups they add to.
fn insert_logs(c: &mut Connection, entries: &[LogRecord], rollups: &[Rollup]) -> Result<(), StoreError> {
    let tx = c.transaction().map_err(backend)?;
    add_rollups(&tx, rollups)?;
    log_slices::append(&tx, entries)?;
    tx.commit().map_err(backend)
}

/// Adds each rollup to the stored one of its key (read, merged, written back: the histogram is
/// a blob that SQL cannot add).
fn add_rollups(tx: &rusqlite::Transaction<'_>, rollups: &[Rollup]) -> Result<(), StoreError> {
    let mut read = tx
        .prepare_cached(
            "SELECT requests, errors, total_us, error_us, histogram FROM rollups
             WHERE org_id = ?1 AND tier_ms = ?2 AND start_ms = ?3 AND gateway_id = ?4 AND app = ?5 AND function = ?6",
        )
        .map_err(backend)?;
    let mut write = tx
        .prepare_cached(
            "INSERT OR REPLACE INTO rollups
             (org_id, tier_ms, start_ms, gateway_id, app, function, requests, errors, total_us, error_us, histogram)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )
        .map_err(backend)?;
    for r in rollups {
        let key = params![r.org_id, r.tier_ms, r.start_ms, r.gateway_id, r.app, r.function];
        let stored = read
            .query_row(key, |row| {
                let n = |i: usize| row.get::<_, i64>(i).map(|v| v.max(0) as u64);
                Ok((n(0)?, n(1)?, n(2)?, n(3)?, row.get::<_, Vec<u8>>(4)?))
            })
            .optional()
            .map_err(backend)?;
        let mut sum = (r.requests, r.errors, r.total_us, r.error_us);
        let mut histogram = r.histogram.clone();
        if let Some((n, e, t, et, h)) = stored {
            sum = (sum.0 + n, sum.1 + e, sum.2.saturating_add(t), sum.3.saturating_add(et));
            histogram.add_encoded(&h);
        }
        let (requests, errors, total, error_total) = sum;
        write
            .execute(params![
                r.org_id,
                r.tier_ms,
                r.start_ms,
                r.gateway_id,
                r.app,
                r.function,
                clamp(requests),
                clamp(errors),
                clamp(total),
                clamp(error_total),
                histogram.encode()
            ])
            .map_err(backend)?;
    }
    Ok(())
}

/// The `FROM ... WHERE ...` of a log query on `table` and its arguments (the page is added by
/// the caller).
fn log_filter(q: &LogQuery, table: LogTable) -> (String, Vec<rusqlite::types::Value>) {
    let mut sql = String::from(match table {
        LogTable::Entries => " FROM log_entries WHERE org_id = ?1",
        LogTable::Legacy => " FROM logs WHERE org_id = ?1",
    });
    let mut args: Vec<rusqlite::types::Value> = vec![q.org_id.clone().into()];
    let mut push = |clause: &str, v: rusqlite::types::Value| {
        args.push(v);
        sql.push_str(&format!(" AND {clause} ?{}", args.len()));
    };
    if let Some(g) = &q.gateway_id {
        push("gateway_id =", g.clone().into());
    }
    if let Some(a) = &q.app {
        push("app =", a.clone().into());
    }
    // Time ranges are key ranges in `log_entries` (see SEQ_BITS); `logs` has `ts_ms` in its indexes.
    match table {
        LogTable::Entries => {
            if let Some(t) = q.since_ms {
                push("seq >=", seq_of(t).into());
            }
            if let Some(t) = q.until_ms {
                push("seq <", seq_of(t.saturating_add(1)).into());
            }
        }
        LogTable::Legacy => {
            if let Some(t) = q.since_ms {
                push("ts_ms >=", t.into());
            }
            if let Some(t) = q.until_ms {
                push("ts_ms <=", t.into());
            }
        }
    }
    match q.status.as_deref() {
        // Inline, so that SQLite sees the partial indexes of errors apply: errors are the few
        // entries people look for, and without them a gateway's first page of errors scans
        // every entry of the gateway.
        Some("error") => sql.push_str(" AND status = 'error'"),
        Some(s) => {
            args.push(s.to_string().into());
            sql.push_str(&format!(" AND status = ?{}", args.len()));
        }
        None => {}
    }
    (sql, args)
}

/// How many entries of `table` match `q`, counting up to `cap` when given.
fn count_logs(c: &Connection, q: &LogQuery, table: LogTable, cap: Option<u64>) -> Result<u64, StoreError> {
    let (sql, args) = log_filter(q, table);
    let count = match cap {
        Some(cap) => format!("SELECT COUNT(*) FROM (SELECT 1{sql} LIMIT {cap})"),
        None => format!("SELECT COUNT(*){sql}"),
    };
    let n: i64 = c.query_row(&count, rusqlite::params_from_iter(args.iter()), |r| r.get(0)).map_err(backend)?;
    Ok(n.max(0) as u64)
}

/// A page of the entries of `table` that match `q`: newest first, entries of the same
/// millisecond in writing order, newest first.
fn log_rows(c: &Connection, q: &LogQuery, table: LogTable, offset: u64, limit: u64) -> Result<Vec<LogRow>, StoreError> {
    let (sql, mut args) = log_filter(q, table);
    let order = if table == LogTable::Entries { "seq DESC" } else { "ts_ms DESC, rowid DESC" };
    let select =
        format!("SELECT id, ts_ms, body{sql} ORDER BY {order} LIMIT ?{} OFFSET ?{}", args.len() + 1, args.len() + 2);
    args.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
    args.push(i64::try_from(offset).unwrap_or(i64::MAX).into());
    let mut stmt = c.prepare(&select).map_err(backend)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(args.iter()), |r| {
            Ok(LogRow { id: r.get(0)?, ts_ms: r.get(1)?, body: r.get(2)? })
        })
        .map_err(backend)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(backend)
}

/// Deletes the entries older than `before_ms`, then the oldest beyond `max_rows` (of the
/// older builds' tables first, the oldest first: their entries are older than every slice),
/// and drops an older table once it is empty. All in one transaction, so that a slice and its
/// summaries never disagree.
fn prune_log_tables(c: &mut Connection, before_ms: i64, max_rows: u64, legacy: &LegacyLogs) -> Result<u64, StoreError> {
    let tx = c.transaction().map_err(backend)?;
    let count = |table: LogTable| -> Result<u64, StoreError> {
        let sql = format!("SELECT COUNT(*) FROM {}", table.name());
        let n: i64 = tx.query_row(&sql, [], |r| r.get(0)).map_err(backend)?;
        Ok(n.max(0) as u64)
    };
    let as_sql = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut deleted = log_slices::prune_older(&tx, before_ms)?;
    // Oldest first: `logs`, then `log_entries`.
    let mut tables: Vec<(LogTable, u64)> = Vec::new();
    for table in legacy.present().into_iter().rev() {
        let older = match table {
            LogTable::Entries => tx.execute("DELETE FROM log_entries WHERE seq < ?1", params![seq_of(before_ms)]),
            LogTable::Legacy => tx.execute("DELETE FROM logs WHERE ts_ms < ?1", params![before_ms]),
        };
        deleted += older.map_err(backend)? as u64;
        tables.push((table, count(table)?));
    }
    let rows: u64 = tables.iter().map(|(_, n)| n).sum::<u64>() + log_slices::count(&tx)?;
    let mut excess = rows.saturating_sub(max_rows);
    for (table, left) in &mut tables {
        if excess == 0 {
            break;
        }
        let oldest = match table {
            LogTable::Entries => {
                "DELETE FROM log_entries WHERE seq IN (SELECT seq FROM log_entries ORDER BY seq LIMIT ?1)"
            }
            LogTable::Legacy => {
                "DELETE FROM logs WHERE rowid IN (SELECT rowid FROM logs ORDER BY ts_ms, rowid LIMIT ?1)"
            }
        };
        // At most `excess` and at most the table's rows.
        let n = tx.execute(oldest, params![as_sql(excess)]).map_err(backend)? as u64;
        deleted += n;
        excess -= n;
        *left -= n;
    }
    if excess > 0 {
        deleted += log_slices::prune_oldest(&tx, excess)?;
    }
    let emptied: Vec<LogTable> = tables.iter().filter(|(_, left)| *left == 0).map(|(t, _)| *t).collect();
    for table in &emptied {
        tx.execute_batch(&format!("DROP TABLE {}", table.name())).map_err(backend)?;
    }
    tx.commit().map_err(backend)?;
    for table in emptied {
        legacy.flag(table).store(false, Ordering::Relaxed);
        tracing::info!(table = table.name(), "a request log table of an older build is empty and dropped");
    }
    Ok(deleted)
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn put(&self, kind: Kind, partition: &str, id: &str, json: String) -> Result<(), StoreError> {
        let (id, partition) = (id.to_string(), partition.to_string());
        self.with("put", move |c| {
            c.execute(
                "INSERT INTO records (kind, id, body, expires_ms, partition) VALUES (?1, ?2, ?3, NULL, ?4)
                 ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body, expires_ms = NULL,
                     partition = excluded.partition",
                params![kind.as_str(), id, json, partition],
            )
            .map(|_| ())
            .map_err(backend)
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
        let (id, partition) = (id.to_string(), partition.to_string());
        self.with("put_expiring", move |c| {
            c.execute(
                "INSERT INTO records (kind, id, body, expires_ms, partition) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body, expires_ms = excluded.expires_ms,
                     partition = excluded.partition",
                params![kind.as_str(), id, json, expires_at_ms, partition],
            )
            .map(|_| ())
            .map_err(backend)
        })
        .await
    }

    async fn put_if_absent(&self, kind: Kind, partition: &str, id: &str, json: String) -> Result<bool, StoreError> {
        let (id, partition) = (id.to_string(), partition.to_string());
        self.with("put_if_absent", move |c| {
            // An expired record counts as absent: it is replaced.
            c.execute(
                "INSERT INTO records (kind, id, body, expires_ms, partition) VALUES (?1, ?2, ?3, NULL, ?5)
                 ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body, expires_ms = NULL,
                     partition = excluded.partition
                 WHERE records.expires_ms IS NOT NULL AND records.expires_ms <= ?4",
                params![kind.as_str(), id, json, now_ms(), partition],
            )
            .map(|n| n > 0)
            .map_err(backend)
        })
        .await
    }

    async fn get(&self, kind: Kind, id: &str) -> Result<Option<String>, StoreError> {
        let id = id.to_string();
        self.with("get", move |c| {
            c.query_row(
                "SELECT body FROM records WHERE kind = ?1 AND id = ?2 AND (expires_ms IS NULL OR expires_ms > ?3)",
                params![kind.as_str(), id, now_ms()],
                |r| r.get(0),
            )
            .optional()
            .map_err(backend)
        })
        .await
    }

    async fn take(&self, kind: Kind, id: &str) -> Result<Option<String>, StoreError> {
        let id = id.to_string();
        self.with("take", move |c| {
            // One statement: of two concurrent takes, one deletes the row and the other sees none.
            let body: Option<(String, Option<i64>)> = c
                .query_row(
                    "DELETE FROM records WHERE kind = ?1 AND id = ?2 RETURNING body, expires_ms",
                    params![kind.as_str(), id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(backend)?;
            Ok(body.filter(|(_, exp)| exp.is_none_or(|e| e > now_ms())).map(|(b, _)| b))
        })
        .await
    }

    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        self.with("sweep_expired", move |c| {
            c.execute("DELETE FROM records WHERE expires_ms IS NOT NULL AND expires_ms <= ?1", params![now_ms()])
                .map(|n| n as u64)
                .map_err(backend)
        })
        .await
    }

    async fn put_many(&self, kind: Kind, items: Vec<Stored>) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        self.with("put_many", move |c| {
            let tx = c.transaction().map_err(backend)?;
            {
                let mut stmt = tx
                    .prepare_cached(
                        "INSERT INTO records (kind, id, body, expires_ms, partition) VALUES (?1, ?2, ?3, NULL, ?4)
                         ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body, expires_ms = NULL,
                             partition = excluded.partition",
                    )
                    .map_err(backend)?;
                for r in &items {
                    stmt.execute(params![kind.as_str(), r.id, r.json, r.partition]).map_err(backend)?;
                }
            }
            tx.commit().map_err(backend)
        })
        .await
    }

    async fn delete(&self, kind: Kind, id: &str) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.with("delete", move |c| {
            c.execute("DELETE FROM records WHERE kind = ?1 AND id = ?2", params![kind.as_str(), id])
                .map(|n| n > 0)
                .map_err(backend)
        })
        .await
    }

    async fn delete_many(&self, kind: Kind, ids: Vec<String>) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        self.with("delete_many", move |c| {
            let tx = c.transaction().map_err(backend)?;
            let mut n = 0;
            {
                let mut stmt = tx.prepare_cached("DELETE FROM records WHERE kind = ?1 AND id = ?2").map_err(backend)?;
                for id in &ids {
                    n += stmt.execute(params![kind.as_str(), id]).map_err(backend)? as u64;
                }
            }
            tx.commit().map_err(backend)?;
            Ok(n)
        })
        .await
    }

    async fn load_all(&self, kind: Kind) -> Result<Vec<(String, String)>, StoreError> {
        self.with("load_all", move |c| {
            let mut stmt = c
                .prepare("SELECT id, body FROM records WHERE kind = ?1 AND (expires_ms IS NULL OR expires_ms > ?2)")
                .map_err(backend)?;
            let rows =
                stmt.query_map(params![kind.as_str(), now_ms()], |r| Ok((r.get(0)?, r.get(1)?))).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn load_partition(&self, kind: Kind, partition: &str) -> Result<Vec<(String, String)>, StoreError> {
        let partition = partition.to_string();
        self.with("load_partition", move |c| {
            let mut stmt = c
                .prepare(
                    "SELECT id, body FROM records WHERE kind = ?1 AND partition = ?2
                     AND (expires_ms IS NULL OR expires_ms > ?3)",
                )
                .map_err(backend)?;
            let rows = stmt
                .query_map(params![kind.as_str(), partition, now_ms()], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn append_logs(&self, entries: Arc<Vec<LogRecord>>, rollups: Vec<Rollup>) -> Result<(), StoreError> {
        self.with("append_logs", move |c| without_fsync(c, |c| insert_logs(c, &entries, &rollups))).await
    }

    async fn log_page(&self, q: LogQuery, offset: u64, limit: u32) -> Result<(u64, Vec<LogRow>), StoreError> {
        let older = self.legacy_logs.present();
        self.with("log_page", move |c| {
            let limit = u64::from(limit);
            let (mut total, mut rows) = log_slices::page(c, &q, offset, limit, LOG_COUNT_CAP)?;
            // The older builds' tables come after the slices, newest first (see `log_tables`).
            // While the page is short, every entry before the table was counted exactly.
            for table in older {
                let short = limit - rows.len() as u64;
                if short > 0 {
                    rows.extend(log_rows(c, &q, table, offset.saturating_sub(total), short)?);
                    total += count_logs(c, &q, table, None)?;
                } else {
                    total += count_logs(c, &q, table, Some(LOG_COUNT_CAP))?;
                }
            }
            Ok((total.min(LOG_COUNT_CAP), rows))
        })
        .await
    }

    async fn rollups(&self, q: RollupQuery) -> Result<Vec<Rollup>, StoreError> {
        self.with("rollups", move |c| {
            // Without percentiles the counts come from `rollups_counts`: a row's histogram (a
            // kilobyte or more for a busy hour) shares the table's pages with its counts, so
            // reading the table for counts alone reads every histogram's pages too.
            let mut sql = String::from(if q.histograms {
                "SELECT start_ms, gateway_id, app, function, requests, errors, total_us, error_us, histogram
                 FROM rollups WHERE org_id = ?1 AND tier_ms = ?2 AND start_ms >= ?3"
            } else {
                "SELECT start_ms, gateway_id, app, function, requests, errors, total_us, error_us, NULL
                 FROM rollups INDEXED BY rollups_counts WHERE org_id = ?1 AND tier_ms = ?2 AND start_ms >= ?3"
            });
            let mut args: Vec<rusqlite::types::Value> =
                vec![q.org_id.clone().into(), q.tier_ms.into(), q.since_ms.into()];
            if let Some(g) = &q.gateway_id {
                args.push(g.clone().into());
                sql.push_str(&format!(" AND gateway_id = ?{}", args.len()));
            }
            if let Some(a) = &q.app {
                args.push(a.clone().into());
                sql.push_str(&format!(" AND app = ?{}", args.len()));
            }
            sql.push_str(" ORDER BY start_ms");
            let mut stmt = c.prepare_cached(&sql).map_err(backend)?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args.iter()), |r| {
                    let mut histogram = Histogram::default();
                    if q.histograms {
                        histogram.add_encoded(r.get_ref(8)?.as_blob().unwrap_or_default());
                    }
                    Ok(Rollup {
                        tier_ms: q.tier_ms,
                        start_ms: r.get(0)?,
                        org_id: q.org_id.clone(),
                        gateway_id: r.get(1)?,
                        app: r.get(2)?,
                        function: r.get(3)?,
                        requests: r.get::<_, i64>(4)?.max(0) as u64,
                        errors: r.get::<_, i64>(5)?.max(0) as u64,
                        total_us: r.get::<_, i64>(6)?.max(0) as u64,
                        error_us: r.get::<_, i64>(7)?.max(0) as u64,
                        histogram,
                    })
                })
                .map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn prune_logs(&self, before_ms: i64, max_rows: u64) -> Result<u64, StoreError> {
        let legacy = self.legacy_logs.clone();
        self.with("prune_logs", move |c| prune_log_tables(c, before_ms, max_rows, &legacy)).await
    }

    async fn prune_rollups(&self, tier_ms: i64, before_ms: i64) -> Result<u64, StoreError> {
        self.with("prune_rollups", move |c| {
            let n = c
                .execute("DELETE FROM rollups WHERE tier_ms = ?1 AND start_ms < ?2", params![tier_ms, before_ms])
                .map_err(backend)?;
            Ok(n as u64)
        })
        .await
    }

    async fn add_rate_usage(&self, minutes: Arc<Vec<UsageMinute>>) -> Result<(), StoreError> {
        // Counts of the last flush period, as the request log's entries are.
        self.with("add_rate_usage", move |c| without_fsync(c, |c| insert_rate_usage(c, &minutes))).await
    }

    async fn rate_usage(&self, key_id: String, since_unix: i64) -> Result<Vec<UsageMinute>, StoreError> {
        self.with("rate_usage", move |c| {
            let mut q = c
                .prepare_cached(
                    "SELECT minute, requests, rate_limited, remaining_sum FROM rate_usage
                     WHERE key_id = ?1 AND minute >= ?2 ORDER BY minute",
                )
                .map_err(backend)?;
            let rows = q
                .query_map(params![key_id, since_unix], |row| {
                    let n = |i: usize| row.get::<_, i64>(i).map(|v| v.max(0) as u64);
                    Ok(UsageMinute {
                        key_id: key_id.clone(),
                        minute_unix: n(0)?,
                        requests: n(1)?,
                        rate_limited: n(2)?,
                        remaining_sum: n(3)?,
                        ..UsageMinute::default()
                    })
                })
                .map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn prune_rate_usage(&self, before_unix: i64) -> Result<u64, StoreError> {
        self.with("prune_rate_usage", move |c| {
            let n = c.execute("DELETE FROM rate_usage WHERE minute < ?1", params![before_unix]).map_err(backend)?;
            Ok(n as u64)
        })
        .await
    }

    async fn audit_append(&self, link: AuditLink) -> Result<bool, StoreError> {
        self.with("audit_append", move |c| {
            // The audit tables are only ever inserted into: no statement of toolgate's updates
            // or deletes their rows.
            let tx = c.transaction().map_err(backend)?;
            let head: Option<(i64, String)> = tx
                .query_row(
                    "SELECT seq, hash FROM audit_entries WHERE org_id = ?1 ORDER BY seq DESC LIMIT 1",
                    params![link.org_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(backend)?;
            let follows = match head {
                None => link.seq == 1,
                Some((seq, hash)) => seq.checked_add(1) == i64::try_from(link.seq).ok() && hash == link.prev_hash,
            };
            if !follows {
                return Ok(false);
            }
            let seq = i64::try_from(link.seq).map_err(backend)?;
            tx.execute(
                "INSERT INTO audit_entries (org_id, seq, hash, body) VALUES (?1, ?2, ?3, ?4)",
                params![link.org_id, seq, link.hash, link.json],
            )
            .map_err(backend)?;
            tx.commit().map_err(backend)?;
            Ok(true)
        })
        .await
    }

    async fn audit_head(&self, org_id: &str) -> Result<Option<(u64, String)>, StoreError> {
        let org_id = org_id.to_string();
        self.with("audit_head", move |c| {
            let head: Option<(i64, String)> = c
                .query_row(
                    "SELECT seq, hash FROM audit_entries WHERE org_id = ?1 ORDER BY seq DESC LIMIT 1",
                    params![org_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(backend)?;
            Ok(head.map(|(seq, hash)| (u64::try_from(seq).unwrap_or_default(), hash)))
        })
        .await
    }

    async fn audit_entries(&self, org_id: &str, after_seq: u64, limit: u32) -> Result<Vec<String>, StoreError> {
        let org_id = org_id.to_string();
        let after = i64::try_from(after_seq).unwrap_or(i64::MAX);
        self.with("audit_entries", move |c| {
            let mut stmt = c
                .prepare_cached("SELECT body FROM audit_entries WHERE org_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3")
                .map_err(backend)?;
            let rows = stmt.query_map(params![org_id, after, limit], |r| r.get(0)).map_err(backend)?;
            rows.collect::<Result<Vec<String>, _>>().map_err(backend)
        })
        .await
    }

    async fn audit_add_checkpoint(
        &self,
        org_id: &str,
        after: Option<String>,
        json: String,
    ) -> Result<bool, StoreError> {
        let org_id = org_id.to_string();
        self.with("audit_add_checkpoint", move |c| {
            let tx = c.transaction().map_err(backend)?;
            let last: Option<(i64, String)> = tx
                .query_row(
                    "SELECT n, body FROM audit_checkpoints WHERE org_id = ?1 ORDER BY n DESC LIMIT 1",
                    params![org_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(backend)?;
            if last.as_ref().map(|(_, body)| body) != after.as_ref() {
                return Ok(false);
            }
            let n = last.map_or(1, |(n, _)| n + 1);
            tx.execute("INSERT INTO audit_checkpoints (org_id, n, body) VALUES (?1, ?2, ?3)", params![org_id, n, json])
                .map_err(backend)?;
            tx.commit().map_err(backend)?;
            Ok(true)
        })
        .await
    }

    async fn audit_last_checkpoint(&self, org_id: &str) -> Result<Option<String>, StoreError> {
        let org_id = org_id.to_string();
        self.with("audit_last_checkpoint", move |c| {
            c.query_row(
                "SELECT body FROM audit_checkpoints WHERE org_id = ?1 ORDER BY n DESC LIMIT 1",
                params![org_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(backend)
        })
        .await
    }

    async fn audit_checkpoints(&self, org_id: &str) -> Result<Vec<String>, StoreError> {
        let org_id = org_id.to_string();
        self.with("audit_checkpoints", move |c| {
            let mut stmt =
                c.prepare_cached("SELECT body FROM audit_checkpoints WHERE org_id = ?1 ORDER BY n").map_err(backend)?;
            let rows = stmt.query_map(params![org_id], |r| r.get(0)).map_err(backend)?;
            rows.collect::<Result<Vec<String>, _>>().map_err(backend)
        })
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.with("ping", |c| c.query_row("SELECT 1", [], |_| Ok(())).map_err(backend)).await
    }
}

#[cfg(test)]
#[path = "embedded_tests.rs"]
mod tests;
