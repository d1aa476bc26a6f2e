//! The embedded store's request log: entries kept in slices, one row per slice.
//!
//! Why slices: a row per entry, with the indexes the log's filters need, cost about 10 us of CPU
//! per entry to write (SQLite's B-tree inserts into the table and three indexes, and the pages
//! they dirty), which was most of what the request log added to a call (BENCHMARKS.md, "The
//! request log's write per entry, by layout"). A slice is up to [`SLICE_ENTRIES`] entries of one
//! organisation, oldest first, encoded one after another and compressed with zstd: one row, and
//! one summary row per gateway and app in it, whatever the number of entries. The summaries
//! carry what the filters and counts need (entries, errors, first and last time), so a count
//! reads summaries only and a page decodes only the slices it shows. Running totals per
//! gateway and app (`log_counts`, kept in the same transactions as the slices) answer the count
//! of a query without a time range at once: otherwise a filter that matches few entries of a
//! big log (one gateway's errors) would read every summary to count them.
//!
//! Order: newest first is slices by id (writing order) descending, and within a slice by
//! position descending. A slice's entries are sorted by time when it is written; entries are
//! recorded as their calls end, so writing order is time order except for calls ending within
//! the same few microseconds on two threads.
//!
//! A small write (the log of a quiet minute) tops up the organisation's newest slice when it
//! fits, so that slices stay full and their number follows the entries, not the flushes.

use super::{LogQuery, LogRecord, LogRow, StoreError};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Most entries in one slice: a page of the log decodes one or two slices of this size (about
/// 100 KB of JSON, tens of microseconds to decompress).
pub(super) const SLICE_ENTRIES: usize = 256;

/// zstd level: 1 is the fastest, and the log's JSON repeats itself enough that higher levels
/// buy little.
const ZSTD_LEVEL: i32 = 1;

pub(super) const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS log_slices (
        id INTEGER PRIMARY KEY, org_id TEXT NOT NULL,
        first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL,
        entries INTEGER NOT NULL, errors INTEGER NOT NULL, data BLOB NOT NULL);
    CREATE INDEX IF NOT EXISTS log_slices_by_org ON log_slices (org_id, id, first_ms, last_ms, entries, errors);
    CREATE INDEX IF NOT EXISTS log_slices_by_age ON log_slices (last_ms);
    CREATE INDEX IF NOT EXISTS log_slices_by_start ON log_slices (first_ms);
    CREATE TABLE IF NOT EXISTS log_slice_keys (
        org_id TEXT NOT NULL, gateway_id TEXT NOT NULL, slice INTEGER NOT NULL, app TEXT NOT NULL,
        first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL,
        entries INTEGER NOT NULL, errors INTEGER NOT NULL,
        PRIMARY KEY (org_id, gateway_id, slice, app)) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS log_slice_keys_by_app
        ON log_slice_keys (org_id, app, slice, first_ms, last_ms, entries, errors);
    CREATE INDEX IF NOT EXISTS log_slice_keys_by_slice ON log_slice_keys (slice);
    CREATE TABLE IF NOT EXISTS log_counts (
        org_id TEXT NOT NULL, gateway_id TEXT NOT NULL, app TEXT NOT NULL,
        entries INTEGER NOT NULL, errors INTEGER NOT NULL,
        PRIMARY KEY (org_id, gateway_id, app)) WITHOUT ROWID;";

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn corrupt(slice: i64) -> StoreError {
    StoreError::Backend(format!("request-log slice {slice} cannot be decoded"))
}

/// One entry as a slice holds it: borrowed from the request log's records while they are
/// written (nothing copied but the new id), owned when decoded from a slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry<'a> {
    pub ts_ms: i64,
    pub error: bool,
    pub id: String,
    pub gateway_id: Cow<'a, str>,
    pub app: Cow<'a, str>,
    pub body: Cow<'a, str>,
}

impl<'a> Entry<'a> {
    fn of(record: &'a LogRecord, id: String) -> Entry<'a> {
        Entry {
            ts_ms: record.ts_ms,
            error: record.error,
            id,
            gateway_id: Cow::Borrowed(&record.gateway.id),
            app: Cow::Borrowed(&record.app),
            body: Cow::Borrowed(&record.body),
        }
    }

    fn matches(&self, q: &LogQuery) -> bool {
        q.gateway_id.as_ref().is_none_or(|g| *g == self.gateway_id)
            && q.app.as_ref().is_none_or(|a| *a == self.app)
            && q.since_ms.is_none_or(|t| self.ts_ms >= t)
            && q.until_ms.is_none_or(|t| self.ts_ms <= t)
            && match q.status.as_deref() {
                Some("error") => self.error,
                Some("success") => !self.error,
                Some(_) => false,
                None => true,
            }
    }

    fn row(self) -> LogRow {
        LogRow { id: self.id, ts_ms: self.ts_ms, body: self.body.into_owned() }
    }
}

/// Encodes entries one after another: time (8 bytes, little-endian), error flag (1), then id,
/// gateway, app and body, each as a 4-byte length and its bytes; then compresses the lot.
fn encode(entries: &[&Entry<'_>]) -> Result<Vec<u8>, StoreError> {
    let size = entries.iter().map(|e| 25 + e.id.len() + e.gateway_id.len() + e.app.len() + e.body.len()).sum();
    let mut raw = Vec::with_capacity(size);
    for e in entries {
        raw.extend_from_slice(&e.ts_ms.to_le_bytes());
        raw.push(u8::from(e.error));
        for field in [e.id.as_str(), &e.gateway_id, &e.app, &e.body] {
            raw.extend_from_slice(&(field.len() as u32).to_le_bytes());
            raw.extend_from_slice(field.as_bytes());
        }
    }
    zstd::bulk::compress(&raw, ZSTD_LEVEL).map_err(backend)
}

fn decode(slice: i64, data: &[u8]) -> Result<Vec<Entry<'static>>, StoreError> {
    let raw = zstd::stream::decode_all(data).map_err(|_| corrupt(slice))?;
    let mut r = Reader { rest: &raw, slice };
    let mut entries = Vec::new();
    while !r.rest.is_empty() {
        let ts_ms = i64::from_le_bytes(r.array()?);
        let error = r.array::<1>()?[0] != 0;
        let (id, gateway_id, app, body) = (r.text()?, r.text()?, r.text()?, r.text()?);
        let (gateway_id, app, body) = (Cow::Owned(gateway_id), Cow::Owned(app), Cow::Owned(body));
        entries.push(Entry { ts_ms, error, id, gateway_id, app, body });
    }
    Ok(entries)
}

/// What is left of a slice being decoded.
struct Reader<'a> {
    rest: &'a [u8],
    slice: i64,
}

impl Reader<'_> {
    fn bytes(&mut self, n: usize) -> Result<&[u8], StoreError> {
        if self.rest.len() < n {
            return Err(corrupt(self.slice));
        }
        let (part, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(part)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], StoreError> {
        let slice = self.slice;
        self.bytes(N)?.try_into().map_err(|_| corrupt(slice))
    }

    fn text(&mut self) -> Result<String, StoreError> {
        let len = u32::from_le_bytes(self.array()?) as usize;
        let slice = self.slice;
        String::from_utf8(self.bytes(len)?.to_vec()).map_err(|_| corrupt(slice))
    }
}

/// Per gateway and app of a slice: entries, errors, first and last time.
type Keys<'a> = BTreeMap<(&'a str, &'a str), (i64, i64, i64, i64)>;

fn keys_of<'a>(entries: &[&'a Entry<'_>]) -> Keys<'a> {
    let mut keys: Keys<'a> = BTreeMap::new();
    for e in entries {
        let k = keys.entry((&*e.gateway_id, &*e.app)).or_insert((0, 0, e.ts_ms, e.ts_ms));
        k.0 += 1;
        k.1 += i64::from(e.error);
        k.2 = k.2.min(e.ts_ms);
        k.3 = k.3.max(e.ts_ms);
    }
    keys
}

/// Adds the summaries of slice `slice` to the running totals (`sign` 1), or takes them away
/// (`sign` -1).
fn count_in(tx: &Transaction<'_>, slice: i64, sign: i64) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO log_counts (org_id, gateway_id, app, entries, errors)
         SELECT org_id, gateway_id, app, ?2 * entries, ?2 * errors FROM log_slice_keys WHERE slice = ?1
         ON CONFLICT (org_id, gateway_id, app) DO UPDATE SET
             entries = entries + excluded.entries, errors = errors + excluded.errors",
    )
    .map_err(backend)?
    .execute(params![slice, sign])
    .map_err(backend)?;
    Ok(())
}

/// Writes slice `id` (a new one when `None`) of `org` with `entries`, and its summaries.
fn put_slice(tx: &Transaction<'_>, id: Option<i64>, org: &str, entries: &[&Entry<'_>]) -> Result<(), StoreError> {
    let data = encode(entries)?;
    let first = entries.iter().map(|e| e.ts_ms).min().unwrap_or(0);
    let last = entries.iter().map(|e| e.ts_ms).max().unwrap_or(0);
    let errors = entries.iter().filter(|e| e.error).count() as i64;
    let n = entries.len() as i64;
    let id = match id {
        Some(id) => {
            tx.prepare_cached(
                "UPDATE log_slices SET first_ms = ?2, last_ms = ?3, entries = ?4, errors = ?5, data = ?6 WHERE id = ?1",
            )
            .map_err(backend)?
            .execute(params![id, first, last, n, errors, data])
            .map_err(backend)?;
            count_in(tx, id, -1)?;
            tx.prepare_cached("DELETE FROM log_slice_keys WHERE slice = ?1")
                .map_err(backend)?
                .execute([id])
                .map_err(backend)?;
            id
        }
        None => {
            tx.prepare_cached(
                "INSERT INTO log_slices (org_id, first_ms, last_ms, entries, errors, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .map_err(backend)?
            .execute(params![org, first, last, n, errors, data])
            .map_err(backend)?;
            tx.last_insert_rowid()
        }
    };
    let mut key = tx
        .prepare_cached(
            "INSERT INTO log_slice_keys (org_id, gateway_id, slice, app, first_ms, last_ms, entries, errors)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .map_err(backend)?;
    for ((gateway, app), (n, errors, first, last)) in keys_of(entries) {
        key.execute(params![org, gateway, id, app, first, last, n, errors]).map_err(backend)?;
    }
    count_in(tx, id, 1)
}

/// Appends `records` (any number, any organisations) in the transaction `tx`: by organisation,
/// sorted by time (writing order within a millisecond), topping up the organisation's newest
/// slice when all of them fit in it, else in new slices.
pub(super) fn append(tx: &Transaction<'_>, records: &[LogRecord]) -> Result<(), StoreError> {
    let mut by_org: BTreeMap<&str, Vec<&LogRecord>> = BTreeMap::new();
    for r in records {
        by_org.entry(r.gateway.org_id.as_str()).or_default().push(r);
    }
    let mut id = String::with_capacity(32);
    for (org, mut records) in by_org {
        records.sort_by_key(|r| r.ts_ms);
        let entries: Vec<Entry> = records
            .iter()
            .map(|r| {
                crate::base::secrets::write_ordered_id(&mut id, "log", r.ts_ms);
                Entry::of(r, id.clone())
            })
            .collect();
        let newest: Option<(i64, i64)> = tx
            .prepare_cached("SELECT id, entries FROM log_slices WHERE org_id = ?1 ORDER BY id DESC LIMIT 1")
            .map_err(backend)?
            .query_row([org], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(backend)?;
        if let Some((slice, n)) = newest {
            if n.max(0) as usize + entries.len() <= SLICE_ENTRIES {
                let mut all = decode(slice, &slice_data(tx, slice)?)?;
                all.extend(entries);
                // Stable: entries of one millisecond keep their writing order.
                all.sort_by_key(|e| e.ts_ms);
                put_slice(tx, Some(slice), org, &all.iter().collect::<Vec<_>>())?;
                continue;
            }
        }
        for part in entries.chunks(SLICE_ENTRIES) {
            put_slice(tx, None, org, &part.iter().collect::<Vec<_>>())?;
        }
    }
    Ok(())
}

/// The slices that may hold entries `q` selects, newest first, read as they are needed: from
/// the summaries of `q`'s gateway or app, or from the slices of the organisation.
fn candidates<'c>(
    c: &'c Connection,
    q: &LogQuery,
) -> Result<(rusqlite::CachedStatement<'c>, Vec<rusqlite::types::Value>), StoreError> {
    let mut args: Vec<rusqlite::types::Value> = vec![q.org_id.clone().into()];
    let mut push = |v: rusqlite::types::Value| {
        args.push(v);
        args.len()
    };
    let mut sql = match (&q.gateway_id, &q.app) {
        (None, None) => String::from("SELECT id, first_ms, last_ms, entries, errors FROM log_slices WHERE org_id = ?1"),
        (Some(g), app) => {
            let mut s = format!(
                "SELECT slice, MIN(first_ms), MAX(last_ms), SUM(entries), SUM(errors) FROM log_slice_keys
                 WHERE org_id = ?1 AND gateway_id = ?{}",
                push(g.clone().into())
            );
            if let Some(a) = app {
                s.push_str(&format!(" AND app = ?{}", push(a.clone().into())));
            }
            s
        }
        (None, Some(a)) => format!(
            "SELECT slice, MIN(first_ms), MAX(last_ms), SUM(entries), SUM(errors) FROM log_slice_keys
             INDEXED BY log_slice_keys_by_app WHERE org_id = ?1 AND app = ?{}",
            push(a.clone().into())
        ),
    };
    if let Some(t) = q.since_ms {
        sql.push_str(&format!(" AND last_ms >= ?{}", push(t.into())));
    }
    if let Some(t) = q.until_ms {
        sql.push_str(&format!(" AND first_ms <= ?{}", push(t.into())));
    }
    if q.status.as_deref() == Some("error") {
        sql.push_str(" AND errors > 0");
    }
    sql.push_str(if q.gateway_id.is_none() && q.app.is_none() {
        " ORDER BY id DESC"
    } else {
        // A slice has a summary per gateway and app: one row per slice.
        " GROUP BY slice ORDER BY slice DESC"
    });
    let stmt = c.prepare_cached(&sql).map_err(backend)?;
    Ok((stmt, args))
}

/// The stored (compressed) entries of slice `slice`.
fn slice_data(c: &Connection, slice: i64) -> Result<Vec<u8>, StoreError> {
    c.prepare_cached("SELECT data FROM log_slices WHERE id = ?1")
        .map_err(backend)?
        .query_row([slice], |r| r.get(0))
        .map_err(backend)
}

/// The entries of `q` in slice `slice`, newest first.
fn matching_entries(c: &Connection, slice: i64, q: &LogQuery) -> Result<Vec<Entry<'static>>, StoreError> {
    let mut entries = decode(slice, &slice_data(c, slice)?)?;
    entries.retain(|e| e.matches(q));
    entries.reverse();
    Ok(entries)
}

/// A page of the entries `q` selects (`limit` after skipping `offset`, newest first) and how
/// many match: exactly without a time range (the running totals) or when the page comes up
/// short (every slice was read), else at least `cap` or exactly.
pub(super) fn page(
    c: &Connection,
    q: &LogQuery,
    offset: u64,
    limit: u64,
    cap: u64,
) -> Result<(u64, Vec<LogRow>), StoreError> {
    // Without a time range the running totals count; the slices are read for the page only.
    let counted = match (q.since_ms, q.until_ms) {
        (None, None) => Some(totals(c, q)?),
        _ => None,
    };
    let (mut stmt, args) = candidates(c, q)?;
    let mut found = stmt.query(rusqlite::params_from_iter(args.iter())).map_err(backend)?;
    let mut total = 0u64;
    let mut rows = Vec::new();
    while let Some(r) = found.next().map_err(backend)? {
        let (slice, first, last): (i64, i64, i64) =
            (r.get(0).map_err(backend)?, r.get(1).map_err(backend)?, r.get(2).map_err(backend)?);
        let (n, errors): (i64, i64) = (r.get(3).map_err(backend)?, r.get(4).map_err(backend)?);
        let inside = q.since_ms.is_none_or(|t| first >= t) && q.until_ms.is_none_or(|t| last <= t);
        let matching = of_status(q, n, errors);
        // A slice wholly within the time range counts from its summary; it is decoded only
        // when the page shows some of its entries, or to count one that straddles the range.
        let shown = (rows.len() as u64) < limit && total + matching > offset;
        if inside && !shown {
            total += matching;
        } else {
            let entries = matching_entries(c, slice, q)?;
            let skip = offset.saturating_sub(total) as usize;
            let room = limit as usize - rows.len();
            rows.extend(entries.iter().skip(skip).take(room).cloned().map(Entry::row));
            total += entries.len() as u64;
        }
        if rows.len() as u64 >= limit && (counted.is_some() || total >= cap) {
            break;
        }
    }
    Ok((counted.unwrap_or(total), rows))
}

/// How many of `entries` entries, `errors` of them errors, have the status `q` asks for.
fn of_status(q: &LogQuery, entries: i64, errors: i64) -> u64 {
    let n = match q.status.as_deref() {
        Some("error") => errors,
        Some("success") => entries - errors,
        Some(_) => 0,
        None => entries,
    };
    n.max(0) as u64
}

/// How many entries `q` (without a time range) selects, from the running totals.
fn totals(c: &Connection, q: &LogQuery) -> Result<u64, StoreError> {
    let mut sql =
        String::from("SELECT COALESCE(SUM(entries), 0), COALESCE(SUM(errors), 0) FROM log_counts WHERE org_id = ?1");
    let mut args: Vec<rusqlite::types::Value> = vec![q.org_id.clone().into()];
    for (column, value) in [("gateway_id", &q.gateway_id), ("app", &q.app)] {
        if let Some(v) = value {
            args.push(v.clone().into());
            sql.push_str(&format!(" AND {column} = ?{}", args.len()));
        }
    }
    let (entries, errors) = c
        .prepare_cached(&sql)
        .map_err(backend)?
        .query_row(rusqlite::params_from_iter(args.iter()), |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(backend)?;
    Ok(of_status(q, entries, errors))
}

/// How many entries the slices hold in all.
pub(super) fn count(c: &Connection) -> Result<u64, StoreError> {
    let n: i64 = c.query_row("SELECT COALESCE(SUM(entries), 0) FROM log_slices", [], |r| r.get(0)).map_err(backend)?;
    Ok(n.max(0) as u64)
}

/// Keeps only the entries of slice `slice` that `keep` accepts (the slice goes when none is
/// left); returns how many went.
fn trim(tx: &Transaction<'_>, slice: i64, keep: impl Fn(usize, &Entry<'_>) -> bool) -> Result<u64, StoreError> {
    let (org, data): (String, Vec<u8>) = tx
        .query_row("SELECT org_id, data FROM log_slices WHERE id = ?1", [slice], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(backend)?;
    let entries = decode(slice, &data)?;
    let kept: Vec<&Entry<'_>> = entries.iter().enumerate().filter(|(i, e)| keep(*i, e)).map(|(_, e)| e).collect();
    let gone = (entries.len() - kept.len()) as u64;
    if kept.is_empty() {
        delete(tx, slice)?;
    } else if gone > 0 {
        put_slice(tx, Some(slice), &org, &kept)?;
    }
    Ok(gone)
}

fn delete(tx: &Transaction<'_>, slice: i64) -> Result<(), StoreError> {
    count_in(tx, slice, -1)?;
    tx.execute("DELETE FROM log_slice_keys WHERE slice = ?1", [slice]).map_err(backend)?;
    tx.execute("DELETE FROM log_slices WHERE id = ?1", [slice]).map_err(backend)?;
    Ok(())
}

/// Removes the entries older than `before_ms` (whole slices, and the older entries of a slice
/// that also holds newer ones); returns how many went.
pub(super) fn prune_older(tx: &Transaction<'_>, before_ms: i64) -> Result<u64, StoreError> {
    let mut gone: u64 = tx
        .query_row("SELECT COALESCE(SUM(entries), 0) FROM log_slices WHERE last_ms < ?1", [before_ms], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(backend)?
        .max(0) as u64;
    let old = "SELECT id FROM log_slices WHERE last_ms < ?1";
    tx.execute(
        &format!(
            "INSERT INTO log_counts (org_id, gateway_id, app, entries, errors)
             SELECT org_id, gateway_id, app, -SUM(entries), -SUM(errors) FROM log_slice_keys
             WHERE slice IN ({old}) GROUP BY org_id, gateway_id, app
             ON CONFLICT (org_id, gateway_id, app) DO UPDATE SET
                 entries = entries + excluded.entries, errors = errors + excluded.errors"
        ),
        [before_ms],
    )
    .map_err(backend)?;
    tx.execute(&format!("DELETE FROM log_slice_keys WHERE slice IN ({old})"), [before_ms]).map_err(backend)?;
    tx.execute("DELETE FROM log_slices WHERE last_ms < ?1", [before_ms]).map_err(backend)?;
    let straddling: Vec<i64> = tx
        .prepare("SELECT id FROM log_slices WHERE first_ms < ?1")
        .map_err(backend)?
        .query_map([before_ms], |r| r.get(0))
        .map_err(backend)?
        .collect::<Result<_, _>>()
        .map_err(backend)?;
    for slice in straddling {
        gone += trim(tx, slice, |_, e| e.ts_ms >= before_ms)?;
    }
    Ok(gone)
}

/// Removes the `excess` oldest entries (by writing order); returns how many went.
pub(super) fn prune_oldest(tx: &Transaction<'_>, mut excess: u64) -> Result<u64, StoreError> {
    let mut gone = 0;
    while excess > 0 {
        let oldest: Option<(i64, i64)> = tx
            .query_row("SELECT id, entries FROM log_slices ORDER BY id LIMIT 1", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(backend)?;
        let Some((slice, n)) = oldest else { break };
        let n = n.max(0) as u64;
        let went = if n <= excess {
            delete(tx, slice)?;
            n
        } else {
            let cut = excess as usize;
            trim(tx, slice, |i, _| i >= cut)?
        };
        gone += went;
        excess = excess.saturating_sub(went.max(1));
    }
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::Gateway;
    use crate::data::reqlog::{Answer, EntryWriter};
    use std::sync::Arc;

    fn db() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(SCHEMA).unwrap();
        c
    }

    /// An entry of `gateway` (of `org_1` unless it says otherwise) at `ts_ms`; `app` and the
    /// error flag vary with the time, so that filters have something to tell apart.
    fn record(gateway: &Arc<Gateway>, ts_ms: i64) -> LogRecord {
        let app = if ts_ms % 2 == 0 { "even" } else { "odd" };
        let mut e = EntryWriter::begin(gateway, app, "f", &format!("{{\"at\":{ts_ms}}}")).finish(
            std::time::Duration::from_millis(1),
            ts_ms % 5 == 0,
            200,
            Answer::Result(&crate::mcp::jsonrpc::RawJson::from_value(&serde_json::json!({ "at": ts_ms }))),
        );
        e.ts_ms = ts_ms;
        e
    }

    fn write(c: &mut Connection, records: Vec<LogRecord>) {
        let tx = c.transaction().unwrap();
        append(&tx, &records).unwrap();
        tx.commit().unwrap();
    }

    fn slices(c: &Connection) -> Vec<(String, i64)> {
        let mut stmt = c.prepare("SELECT org_id, entries FROM log_slices ORDER BY id").unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<Result<_, _>>().unwrap()
    }

    fn query(org: &str) -> LogQuery {
        LogQuery { org_id: org.into(), ..Default::default() }
    }

    fn times(rows: &[LogRow]) -> Vec<i64> {
        rows.iter().map(|r| r.ts_ms).collect()
    }

    #[test]
    fn slices_fill_up_and_small_writes_top_up_the_newest() {
        let mut c = db();
        let gw = Arc::new(Gateway::for_tests("gw_1", "org_1"));
        let other = Arc::new(Gateway::for_tests("gw_9", "org_2"));
        write(&mut c, (0..600).map(|t| record(&gw, t)).collect());
        assert_eq!(slices(&c), [("org_1".into(), 256), ("org_1".into(), 256), ("org_1".into(), 88)]);
        // Fits in the newest slice of its organisation: topped up; another organisation's
        // entries never share a slice.
        write(&mut c, vec![record(&gw, 600), record(&other, 600)]);
        assert_eq!(slices(&c)[2..], [("org_1".into(), 89), ("org_2".into(), 1)]);
        // Does not fit (89 + 200 > 256): a slice of its own.
        write(&mut c, (601..801).map(|t| record(&gw, t)).collect());
        assert_eq!(slices(&c)[4..], [("org_1".into(), 200)]);
        let (total, rows) = page(&c, &query("org_1"), 0, 1000, 100_000).unwrap();
        assert_eq!(total, 801);
        assert_eq!(times(&rows), (0..801).rev().collect::<Vec<_>>(), "newest first, across slices");
        assert_eq!(page(&c, &query("org_2"), 0, 10, 100_000).unwrap().0, 1, "organisations are apart");
        assert_eq!(count(&c).unwrap(), 802);
    }

    #[test]
    fn pages_and_counts_follow_every_filter_across_slices() {
        let mut c = db();
        let gw1 = Arc::new(Gateway::for_tests("gw_1", "org_1"));
        let gw2 = Arc::new(Gateway::for_tests("gw_2", "org_1"));
        // 1,000 entries, alternating gateways, in writes of 300 (slices of 256 and 44).
        let all: Vec<LogRecord> = (0..1000).map(|t| record(if t % 3 == 0 { &gw2 } else { &gw1 }, t)).collect();
        for part in all.chunks(300) {
            write(&mut c, part.to_vec());
        }
        let expect = |q: &LogQuery| -> Vec<i64> {
            let mut t: Vec<i64> = all
                .iter()
                .filter(|r| {
                    let e = Entry::of(r, String::new());
                    e.matches(q)
                })
                .map(|r| r.ts_ms)
                .collect();
            t.reverse();
            t
        };
        let cases = [
            LogQuery { gateway_id: Some("gw_2".into()), ..query("org_1") },
            LogQuery { app: Some("odd".into()), ..query("org_1") },
            LogQuery { gateway_id: Some("gw_1".into()), app: Some("even".into()), ..query("org_1") },
            LogQuery { status: Some("error".into()), ..query("org_1") },
            LogQuery { status: Some("success".into()), gateway_id: Some("gw_1".into()), ..query("org_1") },
            LogQuery { since_ms: Some(250), until_ms: Some(610), ..query("org_1") },
            LogQuery { since_ms: Some(990), status: Some("error".into()), app: Some("even".into()), ..query("org_1") },
            LogQuery { until_ms: Some(-1), ..query("org_1") },
            query("org_1"),
        ];
        for q in cases {
            let want = expect(&q);
            for (offset, limit) in [(0, 20), (250, 20), (240, 100), (want.len() as u64, 5)] {
                let (total, rows) = page(&c, &q, offset, limit, 100_000).unwrap();
                assert_eq!(total, want.len() as u64, "count of {q:?}");
                let shown: Vec<i64> = want.iter().skip(offset as usize).take(limit as usize).copied().collect();
                assert_eq!(times(&rows), shown, "page {offset}+{limit} of {q:?}");
            }
        }
        // With a time range the slices are counted, and the count stops once it has reached
        // the cap (whole slices: at least the cap); without one the running totals count.
        let since = LogQuery { since_ms: Some(0), ..query("org_1") };
        let (total, rows) = page(&c, &since, 0, 5, 300).unwrap();
        assert!((300..1000).contains(&total), "{total}");
        assert_eq!(times(&rows), [999, 998, 997, 996, 995]);
        assert_eq!(page(&c, &query("org_1"), 0, 5, 300).unwrap().0, 1000);
    }

    #[test]
    fn pruning_by_age_and_by_number_trims_the_slice_at_the_edge() {
        let mut c = db();
        let gw = Arc::new(Gateway::for_tests("gw_1", "org_1"));
        write(&mut c, (0..600).map(|t| record(&gw, t)).collect());
        let tx = c.transaction().unwrap();
        // Older than 300: the first slice (0-255) whole, 44 entries of the second.
        assert_eq!(prune_older(&tx, 300).unwrap(), 300);
        // Beyond 250 entries: the oldest 50 go (the rest of what is now the first slice).
        assert_eq!(prune_oldest(&tx, 50).unwrap(), 50);
        tx.commit().unwrap();
        let (total, rows) = page(&c, &query("org_1"), 0, 1000, 100_000).unwrap();
        assert_eq!(total, 250);
        assert_eq!(times(&rows), (350..600).rev().collect::<Vec<_>>());
        // The summaries were trimmed with their slices: counts by filter still agree.
        let errors = LogQuery { status: Some("error".into()), app: Some("even".into()), ..query("org_1") };
        assert_eq!(page(&c, &errors, 0, 1000, 100_000).unwrap().0, (350..600).filter(|t| t % 10 == 0).count() as u64);
        let tx = c.transaction().unwrap();
        assert_eq!(prune_oldest(&tx, 10_000).unwrap(), 250, "no more than there is");
        tx.commit().unwrap();
        assert!(slices(&c).is_empty());
        let keys: i64 = c.query_row("SELECT COUNT(*) FROM log_slice_keys", [], |r| r.get(0)).unwrap();
        assert_eq!(keys, 0);
        let left: i64 = c.query_row("SELECT SUM(entries) + SUM(errors) FROM log_counts", [], |r| r.get(0)).unwrap();
        assert_eq!(left, 0, "the running totals went down with the entries");
    }

    #[test]
    fn a_slice_that_cannot_be_decoded_is_an_error_not_a_panic() {
        let mut c = db();
        let gw = Arc::new(Gateway::for_tests("gw_1", "org_1"));
        write(&mut c, vec![record(&gw, 1)]);
        let garbled = zstd::bulk::compress(&[1, 2, 3], 1).unwrap();
        for data in [vec![0xde, 0xad], garbled] {
            c.execute("UPDATE log_slices SET data = ?1", [data]).unwrap();
            assert!(matches!(page(&c, &query("org_1"), 0, 10, 100), Err(StoreError::Backend(_))));
        }
    }
}
