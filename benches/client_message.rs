//! What reading a client's message one way costs (`jsonrpc::parse_from_client`, Decision 22):
//! the envelope parse alone (`parse`, what the gateway did before) beside the parse and the
//! one-pass check of the whole text (`base::strict_json`), on the load benchmark's `tools/call`
//! and on one with 4 KiB of nested arguments.
//!
//! `cargo bench --bench client_message`; the figures are in BENCHMARKS.md.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use toolgate::mcp::jsonrpc;

/// The body `benches/tools_call.lua` sends.
const SMALL: &[u8] =
    br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"}}}"#;

fn large() -> Vec<u8> {
    let rows: Vec<String> = (0..64)
        .map(|i| format!(r#"{{"id":{i},"name":"row {i}","tags":["a","b"],"meta":{{"owner":"team-{i}","size":{i}}}}}"#))
        .collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"import","arguments":{{"repo":"acme/app","rows":[{}]}}}}}}"#,
        rows.join(",")
    )
    .into_bytes()
}

fn bench(c: &mut Criterion) {
    let large = large();
    for (name, body) in [("small", SMALL), ("large", large.as_slice())] {
        assert!(jsonrpc::parse_from_client(body).is_ok());
        c.bench_function(&format!("{name}/parse"), |b| b.iter(|| jsonrpc::parse(black_box(body))));
        c.bench_function(&format!("{name}/parse_from_client"), |b| {
            b.iter(|| jsonrpc::parse_from_client(black_box(body)))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
