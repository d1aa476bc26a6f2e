//! The embedded backend: SQLite (bundled, so no system library) in `storage.path`.
//!
//! Why SQLite: one file, transactions, `synchronous=FULL` in WAL mode makes a committed write
//! survive `kill -9` and power loss, and the request log gets real indexes for its filters. The
//! request log's own slices are committed with `synchronous=NORMAL` (see `append_logs`).
//! Calls run on the blocking pool so a slow fsync never stalls a Pingora worker.

use super::{
    Kind, LogAnalytics, LogGroup, LogQuery, LogRecord, LogRow, LogSlice, LogSummary, Store, StoreError, Stored,
};
use async_trait::async_trait;
use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;
use std::sync::Arc;

pub struct EmbeddedStore {
    conn: Arc<Mutex<Connection>>,
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl EmbeddedStore {
    pub fn open(dir: &Path) -> Result<EmbeddedStore, StoreError> {
        let io = |p: &Path, e: std::io::Error| backend(format!("{}: {e}", p.display()));
        create_private_dir(dir).map_err(|e| io(dir, e))?;
        let file = dir.join("toolgate.sqlite3");
        create_private_file(&file).map_err(|e| io(&file, e))?;
        let conn = Connection::open(&file).map_err(backend)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=FULL;
             PRAGMA busy_timeout=5000;
             CREATE TABLE IF NOT EXISTS records (
                 kind TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL,
                 PRIMARY KEY (kind, id)) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS logs (
                 id TEXT PRIMARY KEY, ts_ms INTEGER NOT NULL, org_id TEXT NOT NULL,
                 gateway_id TEXT NOT NULL, app TEXT NOT NULL, status TEXT NOT NULL,
                 body TEXT NOT NULL);
             CREATE INDEX IF NOT EXISTS logs_org_ts ON logs (org_id, ts_ms);
             CREATE INDEX IF NOT EXISTS logs_gateway_ts ON logs (gateway_id, ts_ms);
             CREATE INDEX IF NOT EXISTS logs_ts ON logs (ts_ms);",
        )
        .map_err(backend)?;
        add_expiry_column(&conn)?;
        add_partition_column(&conn)?;
        Ok(EmbeddedStore { conn: Arc::new(Mutex::new(conn)) })
    }

    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || f(&mut conn.lock()))
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

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
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

/// One transaction of log rows.
fn insert_logs(c: &mut Connection, entries: &[LogRecord]) -> Result<(), StoreError> {
    let tx = c.transaction().map_err(backend)?;
    {
        let mut stmt = tx
            .prepare_cached(
                "INSERT OR IGNORE INTO logs (id, ts_ms, org_id, gateway_id, app, status, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .map_err(backend)?;
        let mut id = String::with_capacity(32);
        for e in entries {
            // Time-ordered, so that every index of the table appends.
            crate::secrets::write_ordered_id(&mut id, "log", e.ts_ms);
            let status = if e.error { "error" } else { "success" };
            let (org, gw) = (&e.gateway.org_id, &e.gateway.id);
            stmt.execute(params![id, e.ts_ms, org, gw, e.app, status, e.body]).map_err(backend)?;
        }
    }
    tx.commit().map_err(backend)
}

/// The `FROM ... WHERE ...` of a log query and its arguments (the page is added by the caller).
fn log_filter(q: &LogQuery) -> (String, Vec<rusqlite::types::Value>) {
    let mut sql = String::from(" FROM logs WHERE org_id = ?1");
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
    if let Some(s) = &q.status {
        push("status =", s.clone().into());
    }
    if let Some(t) = q.since_ms {
        push("ts_ms >=", t.into());
    }
    if let Some(t) = q.until_ms {
        push("ts_ms <=", t.into());
    }
    (sql, args)
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn put(&self, kind: Kind, partition: &str, id: &str, json: String) -> Result<(), StoreError> {
        let (id, partition) = (id.to_string(), partition.to_string());
        self.with(move |c| {
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
        self.with(move |c| {
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
        self.with(move |c| {
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
        self.with(move |c| {
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
        self.with(move |c| {
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
        self.with(move |c| {
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
        self.with(move |c| {
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
        self.with(move |c| {
            c.execute("DELETE FROM records WHERE kind = ?1 AND id = ?2", params![kind.as_str(), id])
                .map(|n| n > 0)
                .map_err(backend)
        })
        .await
    }

    async fn load_all(&self, kind: Kind) -> Result<Vec<(String, String)>, StoreError> {
        self.with(move |c| {
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
        self.with(move |c| {
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

    async fn append_logs(&self, entries: Arc<Vec<LogRecord>>) -> Result<(), StoreError> {
        self.with(move |c| {
            // Request-log entries already wait in memory for up to a flush period, so their
            // commits need not wait for the disk: in WAL mode `synchronous=NORMAL` still keeps a
            // commit through a crash of the process (only a power loss or an OS crash can undo
            // the last ones) and saves an fsync per slice. Every other write keeps FULL: the
            // setting is put back before the connection is released.
            c.pragma_update(None, "synchronous", "NORMAL").map_err(backend)?;
            let written = insert_logs(c, &entries);
            let restored = c.pragma_update(None, "synchronous", "FULL").map_err(backend);
            written.and(restored)
        })
        .await
    }

    async fn log_summary(&self, q: LogQuery) -> Result<LogSummary, StoreError> {
        self.with(move |c| {
            let (sql, args) = log_filter(&q);
            let select = format!(
                "SELECT COUNT(*), COALESCE(SUM(status = 'error'), 0),
                        COALESCE(SUM(MAX(json_extract(body, '$.duration'), 0)), 0){sql}"
            );
            c.query_row(&select, rusqlite::params_from_iter(args.iter()), |r| {
                Ok(LogSummary {
                    requests: r.get::<_, i64>(0)?.max(0) as u64,
                    errors: r.get::<_, i64>(1)?.max(0) as u64,
                    total_duration_ms: r.get::<_, i64>(2)?.max(0) as u64,
                })
            })
            .map_err(backend)
        })
        .await
    }

    async fn log_page(&self, q: LogQuery, offset: u64, limit: u32) -> Result<(u64, Vec<LogRow>), StoreError> {
        self.with(move |c| {
            let (sql, mut args) = log_filter(&q);
            let total: i64 = c
                .query_row(&format!("SELECT COUNT(*){sql}"), rusqlite::params_from_iter(args.iter()), |r| r.get(0))
                .map_err(backend)?;
            // Entries of the same millisecond come in writing order (the rowid), newest first: an
            // id orders by time, but its random tail does not order within a millisecond.
            let select = format!(
                "SELECT id, ts_ms, body{sql} ORDER BY ts_ms DESC, rowid DESC LIMIT ?{} OFFSET ?{}",
                args.len() + 1,
                args.len() + 2
            );
            args.push(i64::from(limit).into());
            args.push(i64::try_from(offset).unwrap_or(i64::MAX).into());
            let mut stmt = c.prepare(&select).map_err(backend)?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args.iter()), |r| {
                    Ok(LogRow { id: r.get(0)?, ts_ms: r.get(1)?, body: r.get(2)? })
                })
                .map_err(backend)?;
            let rows = rows.collect::<Result<Vec<_>, _>>().map_err(backend)?;
            Ok((total.max(0) as u64, rows))
        })
        .await
    }

    async fn log_analytics(
        &self,
        q: LogQuery,
        bucket_ms: i64,
        top: u32,
        group: Option<LogGroup>,
    ) -> Result<LogAnalytics, StoreError> {
        let summary = self.log_summary(q.clone()).await?;
        self.with(move |c| {
            let (filter, args) = log_filter(&q);
            // The same three figures for every slice: requests, errors, total duration.
            let figures = "COUNT(*), COALESCE(SUM(status = 'error'), 0), \
                           COALESCE(SUM(MAX(json_extract(body, '$.duration'), 0)), 0)";
            let slices = |key: &str, order: &str, limit: Option<u32>| -> Result<Vec<LogSlice>, StoreError> {
                let limit = limit.map(|n| format!(" LIMIT {n}")).unwrap_or_default();
                let sql = format!("SELECT {key} AS k, {figures}{filter} GROUP BY k ORDER BY {order}{limit}");
                let mut stmt = c.prepare(&sql).map_err(backend)?;
                let rows = stmt
                    .query_map(rusqlite::params_from_iter(args.iter()), |r| {
                        let key: rusqlite::types::Value = r.get(0)?;
                        let key = match key {
                            rusqlite::types::Value::Integer(n) => n.to_string(),
                            rusqlite::types::Value::Text(t) => t,
                            _ => String::new(),
                        };
                        Ok(LogSlice {
                            key,
                            requests: r.get::<_, i64>(1)?.max(0) as u64,
                            errors: r.get::<_, i64>(2)?.max(0) as u64,
                            total_duration_ms: r.get::<_, i64>(3)?.max(0) as u64,
                        })
                    })
                    .map_err(backend)?;
                rows.collect::<Result<Vec<_>, _>>().map_err(backend)
            };
            let function = "app || '.' || COALESCE(json_extract(body, '$.function'), '')";
            let bucket = format!("(ts_ms / {b}) * {b}", b = bucket_ms.max(1));
            let series = slices(&bucket, "k ASC", None)?;
            let top_functions = slices(function, "2 DESC, k ASC", Some(top))?;
            let groups = match group {
                None => Vec::new(),
                Some(LogGroup::App) => slices("app", "2 DESC, k ASC", None)?,
                Some(LogGroup::Function) => slices(function, "2 DESC, k ASC", None)?,
                Some(LogGroup::Status) => slices("status", "2 DESC, k ASC", None)?,
            };
            Ok(LogAnalytics { summary, series, top_functions, groups })
        })
        .await
    }

    async fn log_durations(&self, q: LogQuery) -> Result<Vec<(i64, u64, bool)>, StoreError> {
        self.with(move |c| {
            let (sql, args) = log_filter(&q);
            let select = format!(
                "SELECT ts_ms, MAX(COALESCE(json_extract(body, '$.duration'), 0), 0), status = 'error'{sql} ORDER BY ts_ms"
            );
            let mut stmt = c.prepare(&select).map_err(backend)?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args.iter()), |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?.max(0) as u64, r.get::<_, bool>(2)?))
                })
                .map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn prune_logs(&self, before_ms: i64, max_rows: u64) -> Result<u64, StoreError> {
        self.with(move |c| {
            let old = c.execute("DELETE FROM logs WHERE ts_ms < ?1", params![before_ms]).map_err(backend)?;
            let rows: i64 = c.query_row("SELECT COUNT(*) FROM logs", [], |r| r.get(0)).map_err(backend)?;
            let excess = (rows.max(0) as u64).saturating_sub(max_rows);
            let over = if excess == 0 {
                0
            } else {
                c.execute(
                    "DELETE FROM logs WHERE rowid IN (SELECT rowid FROM logs ORDER BY ts_ms, rowid LIMIT ?1)",
                    params![i64::try_from(excess).unwrap_or(i64::MAX)],
                )
                .map_err(backend)?
            };
            Ok((old + over) as u64)
        })
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.with(|c| c.query_row("SELECT 1", [], |_| Ok(())).map_err(backend)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synchronous(store: &EmbeddedStore) -> i64 {
        store.conn.lock().query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap()
    }

    #[tokio::test]
    async fn expiring_records_conditional_puts_and_single_use_takes() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let later = now_ms() + 60_000;
        store.put_expiring(Kind::MfaToken, "", "live", "1".into(), later).await.unwrap();
        store.put_expiring(Kind::MfaToken, "", "dead", "2".into(), now_ms() - 1).await.unwrap();
        assert_eq!(store.get(Kind::MfaToken, "live").await.unwrap().as_deref(), Some("1"));
        assert_eq!(store.get(Kind::MfaToken, "dead").await.unwrap(), None, "expired records are not read");
        let all = store.load_all(Kind::MfaToken).await.unwrap();
        assert_eq!(all, vec![("live".to_string(), "1".to_string())]);
        // Taken once, then gone; an expired record cannot be taken.
        assert_eq!(store.take(Kind::MfaToken, "live").await.unwrap().as_deref(), Some("1"));
        assert_eq!(store.take(Kind::MfaToken, "live").await.unwrap(), None);
        assert_eq!(store.take(Kind::MfaToken, "dead").await.unwrap(), None);
        // Conditional put: absent or expired wins, a live record stays.
        assert!(store.put_if_absent(Kind::Gateway, "", "g", "a".into()).await.unwrap());
        assert!(!store.put_if_absent(Kind::Gateway, "", "g", "b".into()).await.unwrap());
        assert_eq!(store.get(Kind::Gateway, "g").await.unwrap().as_deref(), Some("a"));
        store.put_expiring(Kind::MfaChallenge, "", "c", "old".into(), now_ms() - 1).await.unwrap();
        assert!(store.put_if_absent(Kind::MfaChallenge, "", "c", "new".into()).await.unwrap());
        assert_eq!(store.get(Kind::MfaChallenge, "c").await.unwrap().as_deref(), Some("new"));
        // The sweep removes only what is due (`dead` already went with its take); a plain put
        // makes an expiring record permanent.
        store.put_expiring(Kind::MfaToken, "", "x", "3".into(), now_ms() - 1).await.unwrap();
        store.put_expiring(Kind::MfaToken, "", "y", "4".into(), later).await.unwrap();
        store.put_expiring(Kind::MfaToken, "", "z", "5".into(), now_ms() - 1).await.unwrap();
        store.put(Kind::MfaToken, "", "z", "6".into()).await.unwrap();
        assert_eq!(store.sweep_expired().await.unwrap(), 1, "only `x`");
        assert_eq!(store.get(Kind::MfaToken, "y").await.unwrap().as_deref(), Some("4"));
        assert_eq!(store.get(Kind::MfaToken, "z").await.unwrap().as_deref(), Some("6"));
    }

    /// A store written before records could expire opens, gains the column, and keeps its rows.
    #[tokio::test]
    async fn an_older_store_gains_the_expiry_column() {
        let dir = tempfile::tempdir().unwrap();
        {
            let c = Connection::open(dir.path().join("toolgate.sqlite3")).unwrap();
            c.execute_batch(
                "CREATE TABLE records (kind TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL,
                 PRIMARY KEY (kind, id)) WITHOUT ROWID;
                 INSERT INTO records VALUES ('gateway', 'g1', '{}');",
            )
            .unwrap();
        }
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(store.get(Kind::Gateway, "g1").await.unwrap().as_deref(), Some("{}"));
        let reopened = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(reopened.load_all(Kind::Gateway).await.unwrap().len(), 1);
        // ... and the partition column: the old row is in no partition until written again.
        assert_eq!(reopened.load_partition(Kind::Gateway, "").await.unwrap().len(), 1);
        reopened.put(Kind::Gateway, "org_1", "g1", "{}".into()).await.unwrap();
        assert_eq!(reopened.load_partition(Kind::Gateway, "org_1").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn an_organisations_records_are_read_back_together() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.put(Kind::Gateway, "org_a", "g1", "1".into()).await.unwrap();
        store.put(Kind::Gateway, "org_b", "g2", "2".into()).await.unwrap();
        store.put(Kind::ApiKey, "org_a", "k1", "3".into()).await.unwrap();
        let batch = vec![
            Stored { partition: "org_a".into(), id: "s1".into(), json: "4".into() },
            Stored { partition: "org_b".into(), id: "s2".into(), json: "5".into() },
        ];
        store.put_many(Kind::Session, batch).await.unwrap();
        store.put_expiring(Kind::MfaToken, "org_a", "t1", "6".into(), now_ms() - 1).await.unwrap();
        let ids = |v: Vec<(String, String)>| v.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
        assert_eq!(ids(store.load_partition(Kind::Gateway, "org_a").await.unwrap()), ["g1"]);
        assert_eq!(ids(store.load_partition(Kind::Gateway, "org_b").await.unwrap()), ["g2"]);
        assert_eq!(ids(store.load_partition(Kind::ApiKey, "org_a").await.unwrap()), ["k1"], "by kind too");
        assert_eq!(ids(store.load_partition(Kind::Session, "org_b").await.unwrap()), ["s2"]);
        assert!(store.load_partition(Kind::MfaToken, "org_a").await.unwrap().is_empty(), "expired");
        // A record moved to another organisation is found only there.
        store.put(Kind::Gateway, "org_b", "g1", "1".into()).await.unwrap();
        assert!(store.load_partition(Kind::Gateway, "org_a").await.unwrap().is_empty());
        assert_eq!(store.load_partition(Kind::Gateway, "org_b").await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn pruning_drops_old_entries_then_the_oldest_beyond_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let gateway = Arc::new(crate::model::Gateway::for_tests("gw_1", "org_1"));
        let entry = |ts_ms: i64| LogRecord {
            ts_ms,
            gateway: gateway.clone(),
            app: "time".into(),
            error: false,
            body: format!(r#"{{"duration":{ts_ms}}}"#),
        };
        store.append_logs(Arc::new((1..=10).map(|i| entry(i * 1000)).collect())).await.unwrap();
        let q = || LogQuery { org_id: "org_1".into(), ..Default::default() };
        // Older than 3 s: entries 1 and 2.
        assert_eq!(store.prune_logs(3_000, 100).await.unwrap(), 2);
        assert_eq!(store.log_summary(q()).await.unwrap().requests, 8);
        // A cap of 5: the three oldest of the rest go; the newest five stay.
        assert_eq!(store.prune_logs(0, 5).await.unwrap(), 3);
        let (total, rows) = store.log_page(q(), 0, 100).await.unwrap();
        assert_eq!(total, 5);
        assert_eq!(rows.iter().map(|r| r.ts_ms).collect::<Vec<_>>(), [10_000, 9_000, 8_000, 7_000, 6_000]);
        assert_eq!(store.prune_logs(0, 5).await.unwrap(), 0, "nothing more to do");
    }

    #[tokio::test]
    async fn log_writes_skip_the_fsync_and_every_other_write_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(synchronous(&store), 2, "FULL from the start");
        let gateway = Arc::new(crate::model::Gateway::for_tests("gw_1", "org_1"));
        let entry = |i: i64| LogRecord {
            ts_ms: 1_000 + i,
            gateway: gateway.clone(),
            app: "time".into(),
            error: false,
            body: r#"{"duration":3}"#.into(),
        };
        store.append_logs(Arc::new((0..10).map(entry).collect())).await.unwrap();
        assert_eq!(synchronous(&store), 2, "FULL again once the log slice is written");
        let q = LogQuery { org_id: "org_1".into(), ..Default::default() };
        let sum = store.log_summary(q).await.unwrap();
        assert_eq!((sum.requests, sum.total_duration_ms), (10, 30));
        // A failing slice (here: the table is gone) puts FULL back too.
        store.conn.lock().execute_batch("DROP TABLE logs").unwrap();
        assert!(store.append_logs(Arc::new(vec![entry(11)])).await.is_err());
        assert_eq!(synchronous(&store), 2);
    }
}
