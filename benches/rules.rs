//! The cost of a gateway's per-tool rules on one `tools/call` (`src/mcp/rules.rs`): the
//! caller's variables made once per request, then one decision, for a typical rule on the
//! caller's role and the tool's name and for one on the call's arguments; beside them the same
//! tests written by hand in Rust, the floor a rule engine cannot go below. Then the cost bound's
//! calibration: rules whose worst case the bound puts at many steps, run on calls at the sizes
//! the bound assumes, so that the time of one step (the figure under each name) can be read.
//!
//! `cargo bench --bench rules`; the figures are in BENCHMARKS.md.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use serde_json::value::RawValue;
use std::time::Duration;
use toolgate::config::RulesConfig;
use toolgate::data::model::{Rule, RuleEffect};
use toolgate::mcp::rules::{self, CallFacts, Claims, RuleSet, Subject};
use toolgate_filters::{CredentialKind, Principal, Role, ScopeSet};

fn set(when: &str) -> RuleSet {
    let rule = Rule { name: "support-reads".into(), effect: RuleEffect::Allow, when: when.into(), methods: None };
    rules::compile(&[rule], chrono::Utc::now(), &RulesConfig::default()).expect("the rule compiles")
}

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

const TOOL: CallFacts<'static> = CallFacts::tool("crm__get_ticket", "crm", "get_ticket");

fn bench(c: &mut Criterion) {
    let p = principal();
    let ip = "10.1.2.3".parse().unwrap();
    let role = set(r#"caller.role == "developer" && tool.startsWith("crm__get")"#);
    let repo = set(r#"args.repo.startsWith("acme/")"#);
    let args = RawValue::from_string(r#"{"repo":"acme/api","ticket":1234}"#.to_string()).unwrap();

    let mut g = c.benchmark_group("rules");
    g.bench_function("baseline: the role and tool test in Rust", |b| {
        b.iter(|| black_box(p.role.as_str() == "developer" && black_box(TOOL.tool).starts_with("crm__get")))
    });
    g.bench_function("baseline: the arguments test in Rust (parse + test)", |b| {
        b.iter(|| {
            let v: serde_json::Value = serde_json::from_str(black_box(args.get())).unwrap();
            black_box(v["repo"].as_str().is_some_and(|r| r.starts_with("acme/")))
        })
    });
    g.bench_function("caller variables (once per request)", |b| {
        b.iter(|| black_box(Subject::new(&role, black_box(&p), ip, Claims::None)))
    });
    let who = Subject::new(&role, &p, ip, Claims::None);
    g.bench_function("decide: role and tool", |b| b.iter(|| black_box(role.decide(&who, TOOL, None))));
    g.bench_function("decide: arguments", |b| b.iter(|| black_box(repo.decide(&who, TOOL, Some(&args)))));
    g.bench_function("per call: variables + role and tool", |b| {
        b.iter(|| {
            let who = Subject::new(&role, black_box(&p), ip, Claims::None);
            black_box(role.decide(&who, TOOL, None))
        })
    });
    let memo = set(r#"caller.role == "developer" && tool.startsWith("crm__get")"#);
    g.bench_function("per call, remembered: the role and tool rule's answer for this caller", |b| {
        b.iter(|| {
            black_box(memo.decide_call(black_box(&p), ip, TOOL, None, || Subject::new(&memo, &p, ip, Claims::None)))
        })
    });
    g.finish();
    bound(c, &who);
}

/// Rules at or near their bound, on calls as large as the bound assumes. Each name carries the
/// bound's steps: the time divided by them is what one step costs on this machine.
fn bound(c: &mut Criterion, who: &Subject) {
    let literals = |n: usize| format!("[{}]", (0..n).map(|i| format!("\"v{i}\"")).collect::<Vec<_>>().join(","));
    let (list40, list30) = (literals(40), literals(30));
    // As large as the default bounds let a call be (256 entries a list, 1 MiB in all): a
    // larger call would be denied before these rules run.
    let strings: Vec<String> = (0..256).map(|i| format!("item-{i:04}")).collect();
    let big = "a".repeat(1024 * 1000);
    // Equal but for the last entry: a comparison walks them all.
    let mut other = strings.clone();
    other[255] = "last".into();
    let args = serde_json::json!({ "list": strings, "text": big, "other": other }).to_string();
    let args = RawValue::from_string(args).unwrap();
    let cases = [
        ("baseline: the arguments read, one key looked up", r#"has(args.none)"#.to_string()),
        ("two exists over 40 literals", format!("{list40}.exists(a, {list40}.exists(b, a + b == \"x\"))")),
        (
            "three exists over 30 literals",
            format!("{list30}.exists(a, {list30}.exists(b, {list30}.exists(c, a + b + c == \"x\")))"),
        ),
        ("exists over 256 arguments", r#"args.list.exists(x, x == "none")"#.to_string()),
        ("map over 256 arguments", r#"args.list.map(x, x + "!").size() == 0"#.to_string()),
        ("filter over 256 arguments", r#"args.list.filter(x, x.startsWith("zz")).size() > 0"#.to_string()),
        ("contains over 1 MB", r#"args.text.contains("needle")"#.to_string()),
        ("matches over 1 MB", r#"args.text.matches("(a|b)*c")"#.to_string()),
        ("in over 256 arguments", r#"args.list.exists(x, x in ["a", "b", "c", "d"])"#.to_string()),
        ("equal lists of 256", r#"args.list == args.other"#.to_string()),
    ];
    let mut g = c.benchmark_group("rules at their bound");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    for (name, when) in cases {
        let rule = Rule { name: "r".into(), effect: RuleEffect::Deny, when: when.clone(), methods: None };
        let s = match rules::compile(&[rule], chrono::Utc::now(), &RulesConfig::default()) {
            Ok(s) => s,
            Err(e) => panic!("{name}: {e}"),
        };
        let label = format!("{name} ({:.0} steps)", s.steps());
        assert!(s.decide(who, TOOL, Some(&args)).is_ok(), "{name}: the call is within the bounds and the rule false");
        g.bench_function(label, |b| b.iter(|| black_box(s.decide(who, TOOL, Some(&args)))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
