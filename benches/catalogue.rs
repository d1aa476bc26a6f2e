//! What a gateway's first `tools/list` costs beyond asking its apps (issue 59, item 2): the
//! catalogue of 100 apps of 50 tools each assembled from the apps' answers
//! (`Catalogue::assemble`: names, hidden-text checks, targets), under `tool_policy: off`, under
//! `pin` with every tool already approved (a rebuild after the cache expired), and under `pin`
//! on the first list (every tool pinned now: its canonical hash and verdict, and the pins the
//! runtime then writes, encoded here as the store's records). Beside them, one tool's
//! canonical hash alone.
//!
//! `cargo bench --bench catalogue`; the figures are in BENCHMARKS.md.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use toolgate::data::model::{Gateway, GatewayConfiguration, PinnedDefinition, ToolPin, ToolPolicy};
use toolgate::data::store::{encode, Kind};
use toolgate::data::tool_pins::{self, GatewayPins};
use toolgate::mcp::catalogue::{AppLists, Catalogue};

/// The binary's allocator (`src/main.rs`), so that the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const APPS: usize = 100;
const TOOLS: usize = 50;

/// A tool as the load benchmark's apps list them (`benches/scale.py upstream`).
fn tool(app: &str, i: usize) -> Value {
    json!({
        "name": format!("{app}_t{i}"),
        "description": format!("Tool {i} of {app}"),
        "inputSchema": {"type": "object", "properties": {"message": {"type": "string", "description": "a message"}}},
    })
}

fn gateway(policy: ToolPolicy) -> Gateway {
    let now = chrono::Utc::now();
    Gateway {
        schema_version: 1,
        id: "gw_bench".into(),
        org_id: "org_bench".into(),
        name: "bench".into(),
        description: String::new(),
        servers: (0..APPS).map(|a| format!("a{a}")).collect(),
        allowed_tools: Default::default(),
        configuration: GatewayConfiguration { tool_policy: policy, ..GatewayConfiguration::default() },
        rules: Vec::new(),
        tool_overrides: Vec::new(),
        guards: Vec::new(),
        tool_limits: Vec::new(),
        status: "active".into(),
        created_at: now,
        updated_at: now,
        access_key_id: "key_bench".into(),
    }
}

fn answers(gw: &Gateway) -> Vec<Result<AppLists, String>> {
    gw.servers
        .iter()
        .map(|app| {
            let tools = (0..TOOLS).map(|i| tool(app, i)).collect();
            Ok(AppLists { tools: Arc::new(tools), ..AppLists::default() })
        })
        .collect()
}

/// Every tool of `gw` approved as listed.
fn approved(gw: &Gateway) -> GatewayPins {
    let now = chrono::Utc::now();
    let mut pins = Vec::new();
    for app in &gw.servers {
        for i in 0..TOOLS {
            let t = tool(app, i);
            let name = t["name"].as_str().unwrap().to_string();
            pins.push(ToolPin {
                id: tool_pins::pin_id(&gw.id, app, &name),
                org_id: gw.org_id.clone(),
                gateway_id: gw.id.clone(),
                app_id: app.clone(),
                tool: name,
                approved: Some(PinnedDefinition { hash: tool_pins::canonical_hash(&t), definition: t, at: now }),
                pending: None,
                rejected: None,
            });
        }
    }
    GatewayPins::new(pins)
}

fn first_list(c: &mut Criterion) {
    let mut g = c.benchmark_group("catalogue_100x50");
    g.measurement_time(Duration::from_secs(10)).sample_size(20);
    let off = gateway(ToolPolicy::Off);
    g.bench_function("off", |b| {
        b.iter_batched(
            || answers(&off),
            |a| black_box(Catalogue::assemble(&off, a, None)),
            criterion::BatchSize::LargeInput,
        )
    });
    let pin = gateway(ToolPolicy::Pin);
    let all_approved = approved(&pin);
    g.bench_function("pin_all_approved", |b| {
        b.iter_batched(
            || answers(&pin),
            |a| black_box(Catalogue::assemble(&pin, a, Some(&all_approved))),
            criterion::BatchSize::LargeInput,
        )
    });
    let none = GatewayPins::new(Vec::new());
    g.bench_function("pin_first_list_and_records", |b| {
        b.iter_batched(
            || answers(&pin),
            |a| {
                let mut cat = Catalogue::assemble(&pin, a, Some(&none));
                let now = chrono::Utc::now();
                let records: Vec<String> = std::mem::take(&mut cat.found)
                    .into_iter()
                    .map(|f| {
                        let p = ToolPin {
                            id: tool_pins::pin_id(&pin.id, &f.app_id, &f.tool),
                            org_id: pin.org_id.clone(),
                            gateway_id: pin.id.clone(),
                            app_id: f.app_id,
                            tool: f.tool,
                            approved: Some(PinnedDefinition { hash: f.hash, definition: f.definition, at: now }),
                            pending: None,
                            rejected: None,
                        };
                        encode(Kind::ToolPin, &p.id, &p).expect("a pin encodes")
                    })
                    .collect();
                black_box((cat, records))
            },
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
    let one = tool("a0", 7);
    c.bench_function("canonical_hash_one_tool", |b| b.iter(|| black_box(tool_pins::canonical_hash(black_box(&one)))));
}

criterion_group!(benches, first_list);
criterion_main!(benches);
