//! What one request-log entry costs to write, by storage layout (run by hand, not in CI):
//!
//!     cargo run --release --example log_layouts [ENTRIES] [ROUNDS]    # 200000, 3
//!
//! Each layout writes the same ENTRIES entries (made by the real `EntryWriter`: three gateways,
//! two apps, one error in 25, arguments and results that vary as real ones do) in slices of 256
//! per transaction, as the request log's writer does, into a fresh data directory. Printed per
//! layout: the process's CPU time per entry (user + system, so SQLite, the kernel's writes and
//! compression all count), its ratio to the first layout's in the same round (medians over
//! ROUNDS alternating rounds), and the bytes per entry on disk.
//!
//! Layouts:
//!   store            toolgate's embedded store as built (`EmbeddedStore::append_logs`, without
//!                    rollups): compressed slices with a summary per gateway and app
//!                    (`src/data/store/log_slices.rs`)
//!   rows + indexes   the layout before the slices (until 2026-11-27): one row per entry keyed
//!                    by time, with indexes by organisation, gateway and app and partial ones of
//!                    errors
//!   rows, no index   the same rows without any secondary index: the floor of any
//!                    row-per-entry layout
//!   slices, raw      the store's slices and summaries without compression (a sketch: it writes
//!                    what such a store would write)

use rusqlite::{params, Connection};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use toolgate::data::model::Gateway;
use toolgate::data::reqlog::{Answer, EntryWriter};
use toolgate::data::store::{EmbeddedStore, LogRecord, Store};
use toolgate::mcp::jsonrpc::RawJson;

const SLICE: usize = 256;
const ORG: &str = "org_5f2c9a1d7e3b4c60";
const WORDS: [&str; 12] =
    ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"];

/// Process CPU time (user + system) in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn disk_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).map(|d| d.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum()).unwrap_or(0)
}

fn gateway(id: &str) -> Arc<Gateway> {
    Arc::new(Gateway {
        schema_version: toolgate::data::model::SCHEMA_VERSION,
        id: id.into(),
        org_id: ORG.into(),
        name: id.into(),
        description: String::new(),
        servers: Vec::new(),
        allowed_tools: Default::default(),
        configuration: Default::default(),
        rules: Vec::new(),
        tool_overrides: Vec::new(),
        guards: Vec::new(),
        tool_limits: Vec::new(),
        status: "active".into(),
        created_at: chrono::Utc::now(),
        updated_at: chrono::Utc::now(),
        access_key_id: String::new(),
    })
}

/// The same entries on every run (a linear congruential generator, no dependency).
fn entries(n: usize) -> Vec<LogRecord> {
    let gateways = [gateway("gw_0a1b2c3d4e5f6071"), gateway("gw_18293a4b5c6d7e8f"), gateway("gw_90a1b2c3d4e5f607")];
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as usize
    };
    let start = chrono::Utc::now().timestamp_millis() - n as i64;
    (0..n)
        .map(|i| {
            let (app, function) = if next() % 3 == 0 { ("search", "web_search") } else { ("time", "get_current_time") };
            let words: Vec<&str> = (0..4 + next() % 8).map(|_| WORDS[next() % WORDS.len()]).collect();
            let args = serde_json::json!({ "query": words.join(" "), "limit": next() % 50 }).to_string();
            let text = format!("{} #{}", words.join(", "), next());
            let result = RawJson::from_value(&serde_json::json!({ "content": [{ "type": "text", "text": text }] }));
            let error = next() % 25 == 0;
            let us = 2_000 + (next() % 40_000) as u64;
            let mut e = EntryWriter::begin(&gateways[i % 3], app, function, &args).finish(
                Duration::from_micros(us),
                error,
                200,
                Answer::Result(&result),
            );
            e.ts_ms = start + i as i64;
            e
        })
        .collect()
}

fn sqlite(dir: &std::path::Path, schema: &str) -> Connection {
    let c = Connection::open(dir.join("log.sqlite3")).expect("open");
    c.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;").expect("pragmas");
    c.execute_batch(schema).expect("schema");
    c
}

async fn store_layout(dir: &std::path::Path, all: &[LogRecord]) {
    let store = EmbeddedStore::open(dir).expect("open the store");
    for slice in all.chunks(SLICE) {
        store.append_logs(Arc::new(slice.to_vec()), Vec::new()).await.expect("append");
    }
}

/// The rows layout's indexes (before 2026-11-27).
const ROW_INDEXES: &str = "
    CREATE INDEX log_entries_by_org ON log_entries (org_id);
    CREATE INDEX log_entries_by_gateway ON log_entries (org_id, gateway_id);
    CREATE INDEX log_entries_by_app ON log_entries (org_id, app);
    CREATE INDEX log_errors_by_org ON log_entries (org_id) WHERE status = 'error';
    CREATE INDEX log_errors_by_gateway ON log_entries (org_id, gateway_id) WHERE status = 'error';";

fn rows_layout(dir: &std::path::Path, all: &[LogRecord], indexes: &str) {
    let table = "CREATE TABLE log_entries (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, ts_ms INTEGER NOT NULL,
         org_id TEXT NOT NULL, gateway_id TEXT NOT NULL, app TEXT NOT NULL, status TEXT NOT NULL, body TEXT NOT NULL);";
    let mut c = sqlite(dir, &format!("{table}{indexes}"));
    let mut id = String::new();
    for (s, slice) in all.chunks(SLICE).enumerate() {
        let tx = c.transaction().expect("begin");
        {
            let mut insert =
                tx.prepare_cached("INSERT INTO log_entries VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)").expect("sql");
            for (i, e) in slice.iter().enumerate() {
                toolgate::base::secrets::write_ordered_id(&mut id, "log", e.ts_ms);
                let seq = (e.ts_ms << 16) + (s * SLICE + i) as i64;
                let status = if e.error { "error" } else { "success" };
                insert.execute(params![seq, id, e.ts_ms, ORG, e.gateway.id, e.app, status, e.body]).expect("insert");
            }
        }
        tx.commit().expect("commit");
    }
}

fn slice_layout(dir: &std::path::Path, all: &[LogRecord]) {
    let mut c = sqlite(
        dir,
        "CREATE TABLE log_slices (id INTEGER PRIMARY KEY, org_id TEXT NOT NULL, first_ms INTEGER NOT NULL,
             last_ms INTEGER NOT NULL, entries INTEGER NOT NULL, errors INTEGER NOT NULL, data BLOB NOT NULL);
         CREATE INDEX log_slices_by_org ON log_slices (org_id, id);
         CREATE TABLE log_slice_keys (org_id TEXT NOT NULL, slice INTEGER NOT NULL, gateway_id TEXT NOT NULL,
             app TEXT NOT NULL, entries INTEGER NOT NULL, errors INTEGER NOT NULL,
             PRIMARY KEY (org_id, slice, gateway_id, app)) WITHOUT ROWID;
         CREATE INDEX log_slice_keys_by_gateway ON log_slice_keys (org_id, gateway_id, slice);
         CREATE INDEX log_slice_keys_by_app ON log_slice_keys (org_id, app, slice);",
    );
    let mut id = String::new();
    let mut data = Vec::with_capacity(256 * 1024);
    for slice in all.chunks(SLICE) {
        data.clear();
        let mut keys: BTreeMap<(&str, &str), (i64, i64)> = BTreeMap::new();
        for e in slice {
            toolgate::base::secrets::write_ordered_id(&mut id, "log", e.ts_ms);
            data.extend_from_slice(&e.ts_ms.to_le_bytes());
            data.push(u8::from(e.error));
            for field in [id.as_bytes(), e.gateway.id.as_bytes(), e.app.as_bytes(), e.body.as_bytes()] {
                data.extend_from_slice(&(field.len() as u32).to_le_bytes());
                data.extend_from_slice(field);
            }
            let k = keys.entry((e.gateway.id.as_str(), e.app.as_str())).or_default();
            *k = (k.0 + 1, k.1 + i64::from(e.error));
        }
        let (first, last) = (slice[0].ts_ms, slice[slice.len() - 1].ts_ms);
        let errors: i64 = keys.values().map(|k| k.1).sum();
        let tx = c.transaction().expect("begin");
        tx.prepare_cached(
            "INSERT INTO log_slices (org_id, first_ms, last_ms, entries, errors, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .expect("sql")
        .execute(params![ORG, first, last, slice.len() as i64, errors, data])
        .expect("insert");
        let slice_id = tx.last_insert_rowid();
        {
            let mut key = tx.prepare_cached("INSERT INTO log_slice_keys VALUES (?1, ?2, ?3, ?4, ?5, ?6)").expect("sql");
            for ((gw, app), (n, errors)) in keys {
                key.execute(params![ORG, slice_id, gw, app, n, errors]).expect("insert");
            }
        }
        tx.commit().expect("commit");
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let rounds: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(3);
    let all = entries(n);
    let body_bytes = all.iter().map(|e| e.body.len()).sum::<usize>() as f64 / n as f64;
    println!("{n} entries, {body_bytes:.0} bytes of JSON each on average, slices of {SLICE}, {rounds} rounds");
    const LAYOUTS: [&str; 4] = ["store", "rows + indexes", "rows, no index", "slices, raw"];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); LAYOUTS.len()];
    let mut ratio: Vec<Vec<f64>> = vec![Vec::new(); LAYOUTS.len()];
    let mut disk = vec![0.0; LAYOUTS.len()];
    for _ in 0..rounds {
        for (i, layout) in LAYOUTS.iter().enumerate() {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let before = cpu_seconds();
            match i {
                0 => store_layout(dir.path(), &all).await,
                1 => rows_layout(dir.path(), &all, ROW_INDEXES),
                2 => rows_layout(dir.path(), &all, ""),
                _ => slice_layout(dir.path(), &all),
            }
            let us = (cpu_seconds() - before) * 1e6 / n as f64;
            cpu[i].push(us);
            ratio[i].push(us / cpu[0].last().copied().unwrap_or(us));
            disk[i] = disk_bytes(dir.path()) as f64 / n as f64;
            eprintln!("  {layout:16} {us:6.2} us/entry");
        }
    }
    println!("| layout | CPU us/entry (median) | x store | disk bytes/entry |");
    println!("|---|---:|---:|---:|");
    for (i, layout) in LAYOUTS.iter().enumerate() {
        let (us, x) = (median(cpu[i].clone()), median(ratio[i].clone()));
        println!("| {layout} | {us:.2} | {x:.2} | {:.0} |", disk[i]);
    }
}
