//! The embedded store's tests, beside it so that `embedded.rs` holds the store alone.

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

#[tokio::test]
async fn many_records_of_a_kind_are_deleted_in_one_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    for id in ["a", "b", "c"] {
        store.put(Kind::Session, "org", id, format!("{{\"id\":\"{id}\"}}")).await.unwrap();
    }
    store.put(Kind::Gateway, "org", "a", "{}".into()).await.unwrap();
    let ids = vec!["a".to_string(), "b".to_string(), "missing".to_string()];
    assert_eq!(store.delete_many(Kind::Session, ids).await.unwrap(), 2, "those that were there");
    let left: Vec<String> = store.load_all(Kind::Session).await.unwrap().into_iter().map(|(id, _)| id).collect();
    assert_eq!(left, ["c"]);
    assert!(store.get(Kind::Gateway, "a").await.unwrap().is_some(), "another kind's record stays");
    assert_eq!(store.delete_many(Kind::Session, Vec::new()).await.unwrap(), 0);
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
    let (_dir, store, gateway) = log_store();
    let entry = |ts_ms: i64| record(&gateway, ts_ms, "f", 1_000, false);
    store.append_logs(Arc::new((1..=10).map(|i| entry(i * 1000)).collect()), vec![]).await.unwrap();
    let q = || LogQuery { org_id: "org_1".into(), ..Default::default() };
    // Older than 3 s: entries 1 and 2.
    assert_eq!(store.prune_logs(3_000, 100).await.unwrap(), 2);
    assert_eq!(store.log_page(q(), 0, 1).await.unwrap().0, 8);
    // A cap of 5: the three oldest of the rest go; the newest five stay.
    assert_eq!(store.prune_logs(0, 5).await.unwrap(), 3);
    let (total, rows) = store.log_page(q(), 0, 100).await.unwrap();
    assert_eq!(total, 5);
    assert_eq!(rows.iter().map(|r| r.ts_ms).collect::<Vec<_>>(), [10_000, 9_000, 8_000, 7_000, 6_000]);
    assert_eq!(store.prune_logs(0, 5).await.unwrap(), 0, "nothing more to do");
}

#[tokio::test]
async fn entries_of_one_millisecond_keep_their_writing_order_across_slices_and_ranges_are_exact() {
    let (_dir, store, gateway) = log_store();
    let entry = |ts_ms: i64, function: &str| record(&gateway, ts_ms, function, 1_000, false);
    store.append_logs(Arc::new(vec![entry(5_000, "a"), entry(5_000, "b"), entry(4_999, "z")]), vec![]).await.unwrap();
    store.append_logs(Arc::new(vec![entry(5_000, "c"), entry(5_001, "d"), entry(5_000, "e")]), vec![]).await.unwrap();
    let page = |since_ms: Option<i64>, until_ms: Option<i64>| {
        let q = LogQuery { org_id: "org_1".into(), since_ms, until_ms, ..Default::default() };
        let store = &store;
        async move {
            let (total, rows) = store.log_page(q, 0, 100).await.unwrap();
            let functions = rows
                .iter()
                .map(|r| {
                    serde_json::from_str::<serde_json::Value>(&r.body).unwrap()["function"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect::<Vec<_>>();
            (total, functions.iter().map(|f| f.trim_start_matches("time.").to_string()).collect::<Vec<_>>())
        }
    };
    assert_eq!(page(None, None).await, (6, ["d", "e", "c", "b", "a", "z"].map(String::from).to_vec()));
    assert_eq!(page(Some(5_000), Some(5_000)).await.1, ["e", "c", "b", "a"], "both ends inclusive");
    assert_eq!(page(Some(5_001), None).await.1, ["d"]);
    assert_eq!(page(None, Some(4_999)).await.1, ["z"]);
    assert_eq!(page(Some(-5), Some(i64::MAX)).await.0, 6, "out-of-range bounds are clamped, not wrapped");
    assert_eq!(page(Some(i64::MAX), None).await.0, 0);
}

/// A query of `org_1`'s log with the filters the older-table tests vary.
fn org_1_query(gateway_id: Option<&str>, status: Option<&str>, since_ms: Option<i64>) -> LogQuery {
    LogQuery {
        org_id: "org_1".into(),
        gateway_id: gateway_id.map(str::to_string),
        status: status.map(str::to_string),
        since_ms,
        ..Default::default()
    }
}

/// A store whose log the previous build wrote (a row per entry in `log_entries`, keyed by
/// time) opens at once: its entries are read after the slices, with every filter, pages run
/// across both, and the table is pruned by its own keys until it is empty, then dropped.
#[tokio::test]
async fn the_previous_builds_log_rows_are_read_after_the_slices_and_age_out() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = Connection::open(dir.path().join("toolgate.sqlite3")).unwrap();
        c.execute_batch(
            "CREATE TABLE log_entries (
                 seq INTEGER PRIMARY KEY, id TEXT NOT NULL, ts_ms INTEGER NOT NULL, org_id TEXT NOT NULL,
                 gateway_id TEXT NOT NULL, app TEXT NOT NULL, status TEXT NOT NULL, body TEXT NOT NULL);
             CREATE INDEX log_entries_by_org ON log_entries (org_id);
             CREATE INDEX log_entries_by_gateway ON log_entries (org_id, gateway_id);
             CREATE INDEX log_entries_by_app ON log_entries (org_id, app);",
        )
        .unwrap();
        let mut insert = c.prepare("INSERT INTO log_entries VALUES (?1, ?2, ?3, ?4, ?5, 'time', ?6, '{}')").unwrap();
        for (id, ts_ms, org, gateway, status) in [
            ("row_1", 5_000, "org_1", "gw_1", "error"),
            ("row_2", 5_000, "org_1", "gw_2", "success"),
            ("row_3", 7_000, "org_1", "gw_1", "success"),
            ("row_x", 6_000, "org_2", "gw_9", "success"),
        ] {
            // Keys as that build made them: the millisecond shifted, plus a counter.
            let seq = seq_of(ts_ms) + i64::from(id == "row_2");
            insert.execute(params![seq, id, ts_ms, org, gateway, status]).unwrap();
        }
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(store.legacy_logs.present(), [LogTable::Entries]);
    let gateway = Arc::new(crate::data::model::Gateway::for_tests("gw_1", "org_1"));
    store
        .append_logs(
            Arc::new(vec![record(&gateway, 8_000, "f", 1, true), record(&gateway, 9_000, "f", 1, false)]),
            vec![],
        )
        .await
        .unwrap();
    let q = org_1_query;
    let page = |q: LogQuery, offset: u64, limit: u32| {
        let store = &store;
        async move {
            let (total, rows) = store.log_page(q, offset, limit).await.unwrap();
            let ids = rows.iter().map(|r| if r.id.starts_with("row_") { r.id.clone() } else { r.ts_ms.to_string() });
            (total, ids.collect::<Vec<_>>())
        }
    };
    let all = page(q(None, None, None), 0, 10).await;
    assert_eq!(all, (5, ["9000", "8000", "row_3", "row_2", "row_1"].map(String::from).to_vec()));
    assert_eq!(page(q(None, None, None), 1, 2).await.1, ["8000", "row_3"], "a page across both");
    assert_eq!(page(q(None, None, None), 3, 5).await.1, ["row_2", "row_1"]);
    assert_eq!(page(q(None, None, None), 5, 5).await, (5, vec![]));
    assert_eq!(
        page(q(Some("gw_1"), Some("error"), None), 0, 10).await,
        (2, ["8000", "row_1"].map(String::from).to_vec())
    );
    assert_eq!(page(q(Some("gw_1"), None, Some(7_000)), 0, 10).await.1, ["9000", "8000", "row_3"]);

    assert_eq!(store.prune_logs(5_500, 100).await.unwrap(), 2, "row_1 and row_2");
    assert_eq!(store.prune_logs(0, 3).await.unwrap(), 1, "the cap takes the oldest: row_x, of the older table");
    assert!(store.legacy_logs.entries.load(Ordering::Relaxed), "row_3 is still in it");
    assert_eq!(store.prune_logs(0, 2).await.unwrap(), 1, "then row_3");
    assert!(store.legacy_logs.present().is_empty(), "empty, and dropped");
    assert_eq!(page(q(None, None, None), 0, 10).await.0, 2);
    drop(store);
    let reopened = EmbeddedStore::open(dir.path()).unwrap();
    assert!(reopened.legacy_logs.present().is_empty());
}

/// A store whose log an older build wrote (keyed by the text id) opens at once: those
/// entries are read after the new ones, pages run across both tables, and the older table
/// is pruned by its own rules until it is empty, then dropped.
#[tokio::test]
async fn an_older_request_log_is_read_after_the_new_one_and_ages_out() {
    let dir = tempfile::tempdir().unwrap();
    {
        let c = Connection::open(dir.path().join("toolgate.sqlite3")).unwrap();
        c.execute_batch(
            "CREATE TABLE logs (
                 id TEXT PRIMARY KEY, ts_ms INTEGER NOT NULL, org_id TEXT NOT NULL,
                 gateway_id TEXT NOT NULL, app TEXT NOT NULL, status TEXT NOT NULL,
                 body TEXT NOT NULL);
             CREATE INDEX logs_org_ts ON logs (org_id, ts_ms);
             CREATE INDEX logs_ts ON logs (ts_ms);
             INSERT INTO logs VALUES ('log_3', 7000, 'org_1', 'gw_1', 'time', 'success', '{}');
             INSERT INTO logs VALUES ('log_1', 5000, 'org_1', 'gw_1', 'time', 'error', '{}');
             INSERT INTO logs VALUES ('log_2', 5000, 'org_1', 'gw_2', 'time', 'success', '{}');
             INSERT INTO logs VALUES ('log_x', 6000, 'org_2', 'gw_9', 'time', 'success', '{}');",
        )
        .unwrap();
    }
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let gateway = Arc::new(crate::data::model::Gateway::for_tests("gw_1", "org_1"));
    let new = |ts_ms: i64| record(&gateway, ts_ms, "f", 1, false);
    store.append_logs(Arc::new(vec![new(8_000), new(9_000)]), vec![]).await.unwrap();
    let q = org_1_query;
    let times = |(total, rows): (u64, Vec<LogRow>)| (total, rows.iter().map(|r| r.ts_ms).collect::<Vec<_>>());
    let old_ids = |rows: Vec<LogRow>| rows.into_iter().map(|r| r.id).filter(|id| id.len() == 5).collect::<Vec<_>>();
    assert_eq!(
        times(store.log_page(q(None, None, None), 0, 10).await.unwrap()),
        (5, vec![9_000, 8_000, 7_000, 5_000, 5_000])
    );
    let all = store.log_page(q(None, None, None), 0, 10).await.unwrap().1;
    assert_eq!(old_ids(all), ["log_3", "log_2", "log_1"], "the older entries keep their ids and order");
    // Pages across the two tables: one that straddles them, one within the older.
    assert_eq!(times(store.log_page(q(None, None, None), 1, 2).await.unwrap()).1, [8_000, 7_000]);
    assert_eq!(times(store.log_page(q(None, None, None), 3, 5).await.unwrap()).1, [5_000, 5_000]);
    assert_eq!(times(store.log_page(q(None, None, None), 5, 5).await.unwrap()).1, Vec::<i64>::new());
    // Filters apply to both.
    assert_eq!(old_ids(store.log_page(q(Some("gw_1"), Some("error"), None), 0, 10).await.unwrap().1), ["log_1"]);
    assert_eq!(
        times(store.log_page(q(Some("gw_1"), None, Some(7_000)), 0, 10).await.unwrap()).1,
        [9_000, 8_000, 7_000]
    );

    // Pruning: by age in both tables; the older table goes once it is empty.
    assert_eq!(store.prune_logs(5_500, 100).await.unwrap(), 2, "log_1 and log_2");
    assert!(store.legacy_logs.logs.load(Ordering::Relaxed), "log_3 and org_2's log_x are still in it");
    assert_eq!(store.prune_logs(0, 3).await.unwrap(), 1, "the cap takes the oldest: log_x, of the older table");
    assert_eq!(store.prune_logs(0, 2).await.unwrap(), 1, "then log_3");
    assert!(!store.legacy_logs.logs.load(Ordering::Relaxed), "empty, and dropped");
    assert_eq!(times(store.log_page(q(None, None, None), 0, 10).await.unwrap()), (2, vec![9_000, 8_000]));
    drop(store);
    let reopened = EmbeddedStore::open(dir.path()).unwrap();
    assert!(!reopened.legacy_logs.logs.load(Ordering::Relaxed));
    assert_eq!(reopened.log_page(q(None, None, None), 0, 10).await.unwrap().0, 2);
}

#[tokio::test]
async fn log_writes_skip_the_fsync_and_every_other_write_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(synchronous(&store), 2, "FULL from the start");
    let gateway = Arc::new(crate::data::model::Gateway::for_tests("gw_1", "org_1"));
    let entry = |i: i64| record(&gateway, 1_000 + i, "f", 3_000, false);
    store.append_logs(Arc::new((0..10).map(entry).collect()), vec![]).await.unwrap();
    assert_eq!(synchronous(&store), 2, "FULL again once the log slice is written");
    let q = LogQuery { org_id: "org_1".into(), ..Default::default() };
    assert_eq!(store.log_page(q, 0, 1).await.unwrap().0, 10);
    // A failing slice (here: the table is gone) puts FULL back too.
    store.conn.lock().execute_batch("DROP TABLE log_slices").unwrap();
    assert!(store.append_logs(Arc::new(vec![entry(11)]), vec![]).await.is_err());
    assert_eq!(synchronous(&store), 2);
}

/// An entry as the pipeline makes it, at `ts_ms`.
/// A store in a fresh directory (which lives as long as the returned guard) and the gateway
/// of `org_1` whose entries the request-log tests write.
fn log_store() -> (tempfile::TempDir, EmbeddedStore, Arc<crate::data::model::Gateway>) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    (dir, store, Arc::new(crate::data::model::Gateway::for_tests("gw_1", "org_1")))
}

fn record(gateway: &Arc<crate::data::model::Gateway>, ts_ms: i64, function: &str, us: u64, error: bool) -> LogRecord {
    use crate::data::reqlog::{Answer, EntryWriter};
    let w = EntryWriter::begin(gateway, "time", function, "null");
    let mut e = w.finish(
        std::time::Duration::from_micros(us),
        error,
        200,
        Answer::Error { code: 1, message: "", detail: None },
    );
    e.ts_ms = ts_ms;
    e
}

#[tokio::test]
async fn rate_usage_adds_up_per_caller_and_minute_and_is_pruned_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let m = |key: &str, minute_unix, requests, rate_limited| UsageMinute {
        key_id: key.into(),
        minute_unix,
        requests,
        rate_limited,
        remaining_sum: requests * 10,
        ..UsageMinute::default()
    };
    store.add_rate_usage(Arc::new(vec![m("k1", 60, 3, 0), m("k1", 120, 1, 1), m("k2", 60, 5, 0)])).await.unwrap();
    store.add_rate_usage(Arc::new(vec![m("k1", 120, 2, 0)])).await.unwrap();
    assert_eq!(store.rate_usage("k1".into(), 0).await.unwrap(), vec![m("k1", 60, 3, 0), m("k1", 120, 3, 1)]);
    assert_eq!(store.rate_usage("k1".into(), 61).await.unwrap(), vec![m("k1", 120, 3, 1)], "from a minute on");
    assert_eq!(store.prune_rate_usage(120).await.unwrap(), 2);
    assert_eq!(store.rate_usage("k2".into(), 0).await.unwrap(), vec![]);
    assert_eq!(store.rate_usage("k1".into(), 0).await.unwrap().len(), 1);
}

#[tokio::test]
async fn rollups_add_up_across_writes_and_fail_with_their_entries() {
    use crate::observe::rollup::{self, MINUTE};
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let (g1, g2) = (
        Arc::new(crate::data::model::Gateway::for_tests("gw_1", "org_1")),
        Arc::new(crate::data::model::Gateway::for_tests("gw_2", "org_1")),
    );
    let write = |entries: Vec<LogRecord>| {
        let rollups = rollup::of(&entries);
        store.append_logs(Arc::new(entries), rollups)
    };
    // Two slices that share a minute, a function named with an escape, two gateways.
    write(vec![record(&g1, 60_500, "a", 1_000, false), record(&g1, 61_000, "b\"q", 2_000, true)]).await.unwrap();
    write(vec![record(&g1, 119_999, "a", 3_000, true), record(&g2, 125_000, "a", 5_000, false)]).await.unwrap();
    let read = |tier_ms: i64, gateway: Option<&str>| {
        store.rollups(RollupQuery {
            org_id: "org_1".into(),
            gateway_id: gateway.map(str::to_string),
            tier_ms,
            since_ms: 0,
            histograms: true,
            ..Default::default()
        })
    };
    let minutes = read(MINUTE, Some("gw_1")).await.unwrap();
    let a = minutes.iter().find(|r| r.function == "a").expect("a's minute");
    assert_eq!((a.start_ms, a.requests, a.errors, a.total_us), (60_000, 2, 1, 4_000), "{minutes:?}");
    assert_eq!(a.histogram.count(), 2, "the histograms were merged");
    assert!((a.histogram.percentile(100) - 3_000.0).abs() <= 60.0);
    let b = minutes.iter().find(|r| r.function == "b\"q").expect("an escaped name reads back");
    assert_eq!((b.requests, b.errors), (1, 1));
    assert_eq!(minutes.len(), 2, "gw_2 is filtered out");
    // Counts alone (from the covering index): the same figures, no histogram.
    let counts = store
        .rollups(RollupQuery {
            org_id: "org_1".into(),
            gateway_id: Some("gw_1".into()),
            tier_ms: MINUTE,
            since_ms: 0,
            histograms: false,
            ..Default::default()
        })
        .await
        .unwrap();
    let figures =
        |v: &[Rollup]| v.iter().map(|r| (r.start_ms, r.requests, r.errors, r.total_us, r.error_us)).collect::<Vec<_>>();
    assert_eq!(figures(&counts), figures(&minutes));
    assert!(counts.iter().all(|r| r.histogram.count() == 0));
    let hours = read(rollup::HOUR, None).await.unwrap();
    assert_eq!(hours.iter().map(|r| r.requests).sum::<u64>(), 4);
    assert_eq!(hours.len(), 3, "(gw_1, a), (gw_1, b\"q), (gw_2, a)");
    let other = RollupQuery { org_id: "org_2".into(), tier_ms: MINUTE, ..Default::default() };
    assert!(store.rollups(other).await.unwrap().is_empty(), "organisations are apart");
    // A slice that fails to write adds nothing to the rollups either.
    store.conn.lock().execute_batch("DROP TABLE log_slices").unwrap();
    assert!(write(vec![record(&g1, 61_000, "a", 1_000, false)]).await.is_err());
    let again = read(MINUTE, Some("gw_1")).await.unwrap();
    assert_eq!(again, minutes);
    // Pruning is per tier.
    assert_eq!(store.prune_rollups(MINUTE, 180_000).await.unwrap(), 3);
    assert!(read(MINUTE, None).await.unwrap().is_empty());
    assert_eq!(read(rollup::HOUR, None).await.unwrap().len(), 3);
}
