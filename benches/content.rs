//! What the content checks cost on a call's result (`mcp/content/`, issue 58): a `tools/call`
//! result of 1 KiB, 64 KiB and 1 MiB of printable ASCII text (the fast path: one pass over the
//! bytes, the result passed on without a copy or a parse), the same with the secrets detectors
//! on (one `RegexSet` pass more), and of multilingual text (parsed, walked, nothing removed, the
//! result kept as it came) beside `content_policy: off`.
//!
//! `cargo bench --bench content`; the figures are in BENCHMARKS.md.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::json;
use toolgate::data::model::{ContentPolicy, Gateway, Redact};
use toolgate::mcp::content::ContentCheck;
use toolgate::mcp::jsonrpc::{Id, Response};

fn gateway(policy: ContentPolicy, secrets: bool) -> Gateway {
    let mut gw: Gateway = serde_json::from_value(json!({
        "id": "gw_bench", "org_id": "org_1", "name": "g", "description": "", "servers": [],
        "allowed_tools": {}, "configuration": { "rate_limit": 10, "cache_ttl": 1, "cache_enabled": true },
        "status": "active", "access_key_id": "key_1",
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"
    }))
    .expect("a gateway");
    gw.configuration.content_policy = policy;
    if secrets {
        gw.configuration.redact = Redact { detectors: vec!["secrets".into()], ..Redact::default() };
    }
    gw
}

fn result(text: &str) -> Response {
    Response::success(Id::from(1u64), json!({ "content": [{ "type": "text", "text": text }] }))
}

/// `line` repeated to `size` bytes (cut at a character's boundary).
fn text(size: usize, line: &str) -> String {
    let mut s = line.repeat(size / line.len() + 1);
    let mut end = size;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s
}

fn bench(c: &mut Criterion) {
    let ascii_line = "The quick brown fox jumps over the lazy dog; 0123456789 {\"k\": [1, 2]}\n";
    let world_line = "Grüße 👩‍👩‍👧 नमस्ते مرحبا 你好 ";
    let cases = [
        ("strip", ContentPolicy::Strip, false),
        ("strip+secrets", ContentPolicy::Strip, true),
        ("off", ContentPolicy::Off, true),
    ];
    let mut g = c.benchmark_group("content");
    for size in [1024usize, 64 * 1024, 1024 * 1024] {
        g.throughput(Throughput::Bytes(size as u64));
        for (kind, line) in [("ascii", ascii_line), ("multilingual", world_line)] {
            let r = result(&text(size, line));
            for (name, policy, secrets) in cases {
                let gw = std::sync::Arc::new(gateway(policy, secrets));
                let Some(check) = ContentCheck::for_call(&gw, "tools/call", Some("t")) else { continue };
                g.bench_with_input(BenchmarkId::new(format!("{kind}/{name}"), size), &r, |b, r| {
                    b.iter_batched(|| r.clone(), |r| black_box(check.response(r)), criterion::BatchSize::LargeInput)
                });
            }
            g.bench_with_input(BenchmarkId::new(format!("{kind}/clone_only"), size), &r, |b, r| {
                b.iter_batched(|| r.clone(), black_box, criterion::BatchSize::LargeInput)
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
