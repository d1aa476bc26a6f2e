//! Seeds a toolgate data directory with a request log for `benches/analytics.sh`: N entries
//! spread evenly over D days up to now, over the given gateways, two apps and five functions,
//! with log-normal-ish durations and one error in 25, written through the store as the log
//! pipeline writes them (entries and rollups in the same transactions).
//!
//!     seed_logs DATA_DIR ORG_ID GW1,GW2,... ENTRIES DAYS

use std::sync::Arc;
use std::time::{Duration, Instant};
use toolgate::data::model::Gateway;
use toolgate::data::reqlog::{Answer, EntryWriter};
use toolgate::data::store::{EmbeddedStore, Store};
use toolgate::mcp::jsonrpc::RawJson;

const BATCH: usize = 50_000;
const FUNCTIONS: [(&str, &str); 5] = [
    ("time", "get_current_time"),
    ("time", "convert_time"),
    ("search", "web_search"),
    ("search", "fetch_page"),
    ("search", "summarize"),
];

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, org, gateways, entries, days] = args.as_slice() else {
        eprintln!("usage: seed_logs DATA_DIR ORG_ID GW1,GW2,... ENTRIES DAYS");
        std::process::exit(2);
    };
    let total: usize = entries.parse().expect("ENTRIES is a number");
    let days: i64 = days.parse().expect("DAYS is a number");
    // Only the ids matter to an entry; the gateways themselves exist in the store already.
    let gateway = |id: &str| Gateway {
        schema_version: toolgate::data::model::SCHEMA_VERSION,
        id: id.into(),
        org_id: org.clone(),
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
    };
    let gateways: Vec<Arc<Gateway>> = gateways.split(',').map(|id| Arc::new(gateway(id))).collect();
    let store = EmbeddedStore::open(std::path::Path::new(dir)).expect("open the store");
    let now = chrono::Utc::now().timestamp_millis();
    let span = days * 86_400_000;
    let start = now - span;
    let result = RawJson::from_value(&serde_json::json!({"content": [{"type": "text", "text": "ok"}]}));
    // A small linear congruential generator: the same data on every run, no dependency.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        seed >> 33
    };
    let began = Instant::now();
    let mut written = 0;
    while written < total {
        let n = BATCH.min(total - written);
        let mut batch = Vec::with_capacity(n);
        for i in written..written + n {
            let gw = &gateways[i % gateways.len()];
            let (app, function) = FUNCTIONS[(next() % 5) as usize];
            // Mostly 2-40 ms, a tail to a few seconds.
            let r = next() % 1000;
            let us = if r < 950 { 2_000 + next() % 38_000 } else { 40_000 + next() % 3_000_000 };
            let error = next() % 25 == 0;
            let entry = EntryWriter::begin(gw, app, function, r#"{"timezone":"UTC"}"#);
            let mut record = entry.finish(Duration::from_micros(us), error, 200, Answer::Result(&result));
            record.ts_ms = start + (span as i128 * i as i128 / total as i128) as i64;
            batch.push(record);
        }
        let rollups = toolgate::observe::rollup::of(&batch);
        store.append_logs(Arc::new(batch), rollups).await.expect("append");
        written += n;
        if written % 1_000_000 == 0 || written == total {
            eprintln!("seed_logs: {written} entries in {:.0?}", began.elapsed());
        }
    }
}
