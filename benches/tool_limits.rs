//! The cost of a gateway's per-tool limits on one `tools/call` (`src/mcp/tool_limits.rs`): the
//! whole check as a call makes it (the compiled limits looked up, the globs matched, the
//! counter's name made, one charge on the in-memory limiter), for a gateway with one entry that
//! matches every tool, and with twenty entries of which one matches; beside them the glob match
//! alone. A gateway without limits pays one `is_empty` before any of this.
//!
//! `cargo bench --bench tool_limits`; the figures are in BENCHMARKS.md.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use toolgate::data::model::{Gateway, LimitPer, ToolLimit};
use toolgate::mcp::tool_limits::{Glob, ToolLimits};
use toolgate_filters::{
    CredentialKind, LocalRateLimiter, Principal, RateLimit, RateLimitPolicy, RateLimiter, Role, ScopeSet,
};

fn principal() -> Principal {
    Principal {
        key_id: "key_support_1".into(),
        user_id: "usr_1".into(),
        org_id: "org_1".into(),
        role: Role::Developer,
        credential: CredentialKind::ApiKey,
        scopes: ScopeSet::parse(["gateways:read"]).unwrap(),
        tier: "free".into(),
        rate_limit_multiplier: 1.0,
        bypass_ip_whitelist: false,
        expires_at: None,
    }
}

fn limit(tool: &str, per: LimitPer) -> ToolLimit {
    ToolLimit {
        tool: tool.into(),
        per,
        requests_per_minute: Some(1_000_000_000),
        requests_per_hour: None,
        requests_per_day: None,
        concurrent: None,
    }
}

fn gateway(limits: Vec<ToolLimit>) -> Gateway {
    let record = serde_json::json!({
        "id": "gw_bench", "org_id": "org_1", "name": "bench", "description": "", "servers": ["crm"],
        "allowed_tools": {}, "configuration": { "rate_limit": 1000, "cache_ttl": 300, "cache_enabled": true },
        "status": "active", "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
        "access_key_id": "key_gw",
    });
    let mut gw: Gateway = serde_json::from_value(record).expect("a gateway record");
    gw.tool_limits = limits;
    gw
}

/// Runs a future that does not wait (the in-memory limiter never does) to its end.
fn now<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the in-memory limiter does not wait"),
    }
}

fn bench(c: &mut Criterion) {
    let backend: Arc<dyn RateLimiter> = Arc::new(LocalRateLimiter::new());
    let limits = ToolLimits::new(RateLimit::new(Arc::new(RateLimitPolicy::default()), backend));
    let who = principal();
    let one = gateway(vec![limit("*", LimitPer::Caller)]);
    let mut many: Vec<ToolLimit> = (0..19).map(|i| limit(&format!("app{i}__*"), LimitPer::Caller)).collect();
    many.push(limit("crm__get_*", LimitPer::Gateway));
    let many = gateway(many);
    let glob = Glob::parse("crm__get_*").unwrap();

    let mut g = c.benchmark_group("tool_limits");
    g.bench_function("glob match (crm__get_* against crm__get_ticket)", |b| {
        b.iter(|| black_box(glob.matches(black_box("crm__get_ticket"))))
    });
    g.bench_function("check: one entry (*, per caller)", |b| {
        b.iter(|| black_box(now(limits.admit(&one, black_box("crm__get_ticket"), &who)).is_ok()))
    });
    g.bench_function("check: 20 entries, one matches (per gateway)", |b| {
        b.iter(|| black_box(now(limits.admit(&many, black_box("crm__get_ticket"), &who)).is_ok()))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
