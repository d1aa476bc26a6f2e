//! A rule's cost is bounded (issue 54, item 4) and what the rules read is what the app runs
//! (item 2), against the real binary: a rule whose worst case is over `mcp.rules.max_cost` is
//! a 400 naming it when it is saved, one at the budget is kept; a call larger than the sizes
//! the bound assumed is denied (counted, logged, audited) before the rule runs; arguments the
//! rules cannot read are refused as invalid; and another organisation's API keeps its latency
//! while one organisation's calls run rules at the budget.

use crate::common::{self, err, ok, TestServer};
use crate::governance_rules::{call, gateway, initialize};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Two organisations, each with an owner key (every scope) and org A a developer who may write
/// gateways, their rates raised so that only the rules refuse anything here.
fn start(extra: &str) -> (TestServer, String, String, String) {
    let (owner_a, a_yaml) = common::declared_key("key_owner_a", "usr_a", &["*"]);
    let (dev_a, dev_yaml) = common::declared_key("key_dev_a", "usr_dev", &["gateways:read", "gateways:write"]);
    let (owner_b, b_yaml) = common::declared_key("key_owner_b", "usr_b", &["*"]);
    let srv = TestServer::start(&format!(
        "rate_limits:\n  tiers:\n    free: {{ requests_per_hour: 1000000, requests_per_minute: 100000, burst: 10000, concurrent: 64 }}\n\
         organizations:\n  - {{ id: org_a, name: A Inc, tier: free }}\n  - {{ id: org_b, name: B Inc, tier: free }}\n\
         users:\n  - {{ id: usr_a, email: a@a.test, name: A, role: owner, organization: org_a }}\n\
         \x20 - {{ id: usr_dev, email: d@a.test, name: D, role: developer, organization: org_a }}\n\
         \x20 - {{ id: usr_b, email: b@b.test, name: B, role: owner, organization: org_b }}\n\
         api_keys:\n{a_yaml}{dev_yaml}{b_yaml}{extra}"
    ));
    (srv, owner_a, dev_a, owner_b)
}

/// A list literal of `n` zeros.
fn zeros(n: usize) -> String {
    format!("[{}]", vec!["0"; n].join(","))
}

/// The issue's rule: five `exists` nested over lists of 40 (487 characters), about 2 * 10^9
/// steps: 23 s a call on the worker threads before the bound.
fn five_deep() -> String {
    let l = zeros(40);
    format!("{l}.exists(a, {l}.exists(b, {l}.exists(c, {l}.exists(d, {l}.exists(e, a + b + c + d + e == 1)))))")
}

/// A rule at the default budget: three `exists` over 40, 40 and 30 zeros, never true, so every
/// call runs all 48,000 turns (about 840,000 steps).
fn at_budget() -> String {
    let l = zeros(40);
    format!("{l}.exists(a, {l}.exists(b, {}.exists(c, a + b + c == 1)))", zeros(30))
}

#[test]
fn a_rule_over_the_budget_is_a_400_naming_it_and_one_at_the_budget_is_saved() {
    let (srv, _, dev, _) = start("");
    let rules = json!([{"name": "fine", "effect": "deny", "when": "caller.role == \"viewer\""},
                       {"name": "deep", "effect": "deny", "when": five_deep()}]);
    let body = json!({"name": "deep", "servers": ["time"], "rules": rules});
    let e = err(&srv.api("POST", "/v1/gateways", Some(&dev), Some(body)), 400, "VALIDATION_ERROR");
    assert_eq!(e["details"]["field"], "rules[1].when", "{e}");
    let issue = e["details"]["issue"].as_str().unwrap();
    assert!(issue.starts_with("rule `deep` may take up to "), "{issue}");
    assert!(issue.contains("over the budget of 1000000 (mcp.rules.max_cost)"), "{issue}");
    let list = ok(&srv.api("GET", "/v1/gateways", Some(&dev), None), 200);
    assert_eq!(list["gateways"], json!([]), "nothing was saved");

    // At the budget: kept, and shown as given.
    let near = json!([{"name": "near", "effect": "deny", "when": at_budget()}]);
    let (gw, _) = gateway(&srv, &dev, json!({"name": "near", "servers": ["time"], "rules": near}));
    let detail = ok(&srv.api("GET", &format!("/v1/gateways/{gw}"), Some(&dev), None), 200);
    assert_eq!(detail["rules"], near);
    // Two of them are over it together: a PATCH is refused naming the second, and changes nothing.
    let two = json!({"rules": [{"name": "near", "effect": "deny", "when": at_budget()},
                               {"name": "again", "effect": "deny", "when": at_budget()}]});
    let e = err(&srv.api("PATCH", &format!("/v1/gateways/{gw}"), Some(&dev), Some(two)), 400, "VALIDATION_ERROR");
    assert_eq!(e["details"]["field"], "rules[1].when", "{e}");
    assert!(e["details"]["issue"].as_str().unwrap().contains("`again`"), "{e}");
    let detail = ok(&srv.api("GET", &format!("/v1/gateways/{gw}"), Some(&dev), None), 200);
    assert_eq!(detail["rules"], near);
    // A pattern from the call cannot be bounded.
    let pattern = json!({"rules": [{"name": "pat", "effect": "deny", "when": "args.q.matches(args.p)"}]});
    let e = err(&srv.api("PATCH", &format!("/v1/gateways/{gw}"), Some(&dev), Some(pattern)), 400, "VALIDATION_ERROR");
    assert!(e["details"]["issue"].as_str().unwrap().starts_with("rule `pat` cannot be bounded"), "{e}");
}

#[test]
fn a_call_larger_than_the_rule_bound_is_denied_counted_logged_and_audited() {
    // The default bound: lists of at most 256 entries.
    let (srv, owner, _, _) = start("");
    let rules = json!([{"name": "no-secret-tag", "effect": "deny", "when": "args.tags.exists(t, t == \"secret\")"}]);
    let (gw, _) = gateway(&srv, &owner, json!({"name": "tags", "servers": ["time"], "rules": rules}));
    let session = initialize(&srv, &gw, &owner);
    let tags = |n: usize| json!({"timezone": "UTC", "tags": vec!["ok"; n]});
    let (r, _) = call(&srv, &gw, &owner, &session, "get_current_time", tags(256));
    assert!(r.get("result").is_some(), "256 tags are within the bound: {r}");
    let (r, _) = call(&srv, &gw, &owner, &session, "get_current_time", json!({"tags": ["secret"]}));
    assert_eq!(r["error"]["data"]["rule"], "no-secret-tag", "{r}");

    let (r, _) = call(&srv, &gw, &owner, &session, "get_current_time", tags(257));
    assert_eq!(r["error"]["code"], -32012, "{r}");
    assert_eq!(
        r["error"]["data"],
        json!({"rule": "no-secret-tag", "tool": "get_current_time", "reason": "input_too_large"})
    );
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("Tool call denied by rule `no-secret-tag`: the call is larger than"), "{message}");
    assert!(message.contains("257 entries") && message.contains("mcp.rules.max_input_items"), "{message}");

    // Counted, logged and audited.
    let metrics = srv.metrics();
    for series in [
        "toolgate_rule_refusals_total{reason=\"input_too_large\"} 1".to_string(),
        format!("toolgate_tool_denied_total{{gateway=\"{gw}\",rule=\"no-secret-tag\"}} 2"),
    ] {
        assert!(
            metrics.contains(&series),
            "{series} not in:\n{}",
            metrics.lines().filter(|l| l.contains("rule")).collect::<Vec<_>>().join("\n")
        );
    }
    common::wait_until("the denial in the log", Duration::from_secs(5), || {
        srv.stderr().lines().any(|l| l.contains("call denied by rule") && l.contains("input_too_large"))
    });
    let mut trail = Vec::new();
    common::wait_until("the denials in the audit trail", Duration::from_secs(10), || {
        let r = srv.api("GET", "/v1/audit?action=tool_call.denied", Some(&owner), None);
        trail = r.data()["entries"].as_array().cloned().unwrap_or_default();
        trail.len() == 2
    });
    let reasons: Vec<&Value> = trail.iter().map(|e| &e["detail"]["reason"]).collect();
    assert!(reasons.contains(&&json!("input_too_large")) && reasons.contains(&&json!("matched")), "{trail:?}");
}

/// The JSON-RPC message of an answer, plain or the first event of a stream.
fn message_of(text: &str) -> Value {
    let json = text.lines().find_map(|l| l.strip_prefix("data:")).unwrap_or(text).trim();
    serde_json::from_str(json).unwrap_or_else(|_| panic!("not a JSON-RPC answer: {text}"))
}

#[test]
fn arguments_the_rules_cannot_read_are_refused_as_invalid_params() {
    // The reference server's `echo` (Node's JSON.parse takes a lone surrogate).
    let everything = common::spawn_everything();
    let app = format!("  - {{ id: everything, name: Everything, url: {} }}\n", common::everything_url(&everything));
    let (owner, owner_yaml) = common::declared_key("key_owner", "usr_a", &["*"]);
    let srv = TestServer::start(&format!(
        "{app}organizations:\n  - {{ id: org_a, name: A Inc }}\n\
         users:\n  - {{ id: usr_a, email: a@a.test, name: A, role: owner, organization: org_a }}\n\
         api_keys:\n{owner_yaml}"
    ));
    let rules = json!([{"name": "not-prod", "effect": "deny", "when": "has(args.repo) && args.repo == \"prod\""}]);
    let (gw, _) = gateway(&srv, &owner, json!({"name": "repos", "servers": ["everything"], "rules": rules}));
    let session = initialize(&srv, &gw, &owner);
    let post = |body: String| {
        let r = srv
            .client()
            .post(srv.url(&format!("/gateway/{gw}/mcp")))
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .header("X-API-Key", &owner)
            .header("Mcp-Session-Id", &session)
            .body(body)
            .send()
            .unwrap();
        message_of(&r.text().unwrap())
    };
    let call = |repo: &str, x: &str| {
        post(format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"hi","repo":"{repo}","x":"{x}"}}}}}}"#
        ))
    };
    assert_eq!(call("prod", "ok")["error"]["data"]["rule"], "not-prod");
    // The same call with a lone surrogate beside `repo`: the rules cannot read it, the app's
    // parser can (and would run `repo: prod`). Refused, never decided as empty arguments.
    let answer = call("prod", r"\ud800");
    assert!(answer.get("result").is_none(), "the call must not reach the app: {answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(answer["id"], 3, "{answer}");
    // A surrogate pair is read as the character it is: the call reaches the app.
    let fine = call("dev", r"\ud83d\ude00");
    assert!(fine.get("result").is_some(), "{fine}");
}

/// The 99th percentile of `samples`.
fn p99(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[(samples.len() * 99).div_ceil(100) - 1]
}

/// Org B's API latency: `n` reads of its gateways, one every 5 ms (about 1.5 s for 300).
fn org_b_latencies(srv: &TestServer, key: &str, n: usize) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(5));
            let t = Instant::now();
            let r = srv.api("GET", "/v1/gateways", Some(key), None);
            assert_eq!(r.status, 200, "{}", r.text);
            t.elapsed()
        })
        .collect()
}

#[test]
fn another_organisations_api_keeps_its_latency_while_one_runs_rules_at_the_budget() {
    let (srv, owner_a, _, owner_b) = start("");
    // The issue's rule is refused; org A saves the dearest it may.
    let deep = json!([{"name": "deep", "effect": "deny", "when": five_deep()}]);
    let body = json!({"name": "deep", "servers": ["time"], "rules": deep});
    err(&srv.api("POST", "/v1/gateways", Some(&owner_a), Some(body)), 400, "VALIDATION_ERROR");
    // It reads the arguments, so no decision is remembered: every call runs it to its end.
    let when = format!("args.timezone == \"UTC\" && {}", at_budget());
    let near = json!([{"name": "near", "effect": "deny", "when": when}]);
    let (gw, _) = gateway(&srv, &owner_a, json!({"name": "near", "servers": ["time"], "rules": near}));
    gateway(&srv, &owner_b, json!({"name": "b", "servers": ["time"]}));
    let session = initialize(&srv, &gw, &owner_a);
    let (r, _) = call(&srv, &gw, &owner_a, &session, "get_current_time", json!({"timezone": "UTC"}));
    assert!(r.get("result").is_some(), "the rule runs to its end and allows: {r}");

    org_b_latencies(&srv, &owner_b, 20);
    let alone = p99(org_b_latencies(&srv, &owner_b, 300));

    // Org A calls as fast as eight clients can, each call running the rule to its end.
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let url = srv.url(&format!("/gateway/{gw}/mcp"));
    let hammers: Vec<_> = (0..8)
        .map(|i| {
            let (stop, calls, url, key, session) =
                (stop.clone(), calls.clone(), url.clone(), owner_a.clone(), session.clone());
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                        "params": {"name": "get_current_time", "arguments": {"timezone": "UTC"}}});
                    let r = client
                        .post(&url)
                        .header("Accept", "application/json, text/event-stream")
                        .header("X-API-Key", &key)
                        .header("Mcp-Session-Id", &session)
                        .json(&body)
                        .send();
                    if r.is_ok_and(|r| r.text().is_ok_and(|t| t.contains("\"result\""))) {
                        calls.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let loaded = p99(org_b_latencies(&srv, &owner_b, 300));
    let during = started.elapsed();
    let done = calls.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for h in hammers {
        h.join().unwrap();
    }
    eprintln!(
        "org B p99 alone {alone:?}, with org A's rules at the budget {loaded:?}; org A's calls: {done} in {during:?}"
    );
    assert!(done >= 8, "org A's calls ran meanwhile ({done})");
    assert!(
        loaded < alone * 5 + Duration::from_millis(50),
        "org B's p99 went from {alone:?} to {loaded:?} while org A's rules ran at the budget"
    );
}
