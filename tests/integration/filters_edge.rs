//! The edge filters (issue 4) through the real server: chain order, the IP allowlist with
//! `X-Forwarded-For` believed only from trusted proxies, and exact token-bucket admission with
//! its headers, costs, refill and status endpoints.
//!
//! The shared server trusts 127.0.0.1 as a proxy, so each test plays clients at addresses of
//! its own through `X-Forwarded-For` (also keeping per-address buckets apart). Rate limits use
//! a small tier: `tiny` = burst 5, 6/minute (one token every 10 s), so nothing refills during a
//! quick burst and admission is exact.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::Duration;

struct Fx {
    srv: TestServer,
    keys: HashMap<&'static str, String>,
}

const TINY_KEYS: [&str; 8] =
    ["t_burst", "t_cost", "t_write", "t_headers", "t_status", "t_unauth", "t_chain", "t_spare"];

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let mut keys = HashMap::new();
        let mut yaml_keys = String::new();
        let mut add = |id: &'static str, user: &str, scopes: &[&str], extra: &str| {
            let (k, y) = declared_key(id, user, scopes);
            keys.insert(id, k);
            yaml_keys += &y.replace(" }\n", &format!("{extra} }}\n"));
        };
        add("ip_admin", "usr_ip", &["*"], "");
        add("ip_bypass", "usr_ip", &["*"], ", bypass_ip_whitelist: true");
        add("wl_admin", "usr_wl", &["*"], "");
        for k in TINY_KEYS {
            add(k, "usr_tiny", &["*"], "");
        }
        let config = BASE_CONFIG.replace("trusted_proxies: []", "trusted_proxies: [127.0.0.1/32]")
            + &format!(
                "rate_limits:\n  tiers:\n    tiny: {{ requests_per_hour: 1000, requests_per_minute: 6, burst: 5, concurrent: 5 }}\n\
                 organizations:\n\
                 \x20 - {{ id: org_ip, name: IP Co, tier: professional }}\n\
                 \x20 - {{ id: org_wl, name: WL Co, tier: professional }}\n\
                 \x20 - {{ id: org_tiny, name: Tiny, tier: tiny }}\n\
                 users:\n\
                 \x20 - {{ id: usr_ip, email: ip@t.test, name: Ip, role: owner, organization: org_ip }}\n\
                 \x20 - {{ id: usr_wl, email: wl@t.test, name: Wl, role: owner, organization: org_wl }}\n\
                 \x20 - {{ id: usr_tiny, email: tiny@t.test, name: Tiny, role: owner, organization: org_tiny }}\n\
                 api_keys:\n{yaml_keys}"
            );
        let srv = TestServer::start_with_config(&config);
        reap_on_exit(&srv);
        Fx { srv, keys }
    })
}

fn key(id: &str) -> &'static str {
    fx().keys[id].as_str()
}

/// A request as if from client `ip` behind the trusted proxy at 127.0.0.1.
fn from(ip: &str, method: &str, path: &str, key: Option<&str>, body: Option<Value>) -> Resp {
    fx().srv.request(method, path, key, body, &[("x-forwarded-for", ip)])
}

// ------------------------------------------------------------------------------------------------
// IP allowlist

#[test]
fn ip_allowlist_validation_lockout_enforcement_and_chain_order() {
    let admin = key("ip_admin");
    let me = "198.51.100.7";
    let patch = |ip: &str, body: Value| from(ip, "PATCH", "/v1/account/security", Some(admin), Some(body));

    // CIDRs are validated, naming the entry.
    validation(&patch(me, json!({ "ip_whitelist": ["198.51.100.0/24", "nonsense"] })), "ip_whitelist[1]");
    validation(&patch(me, json!({ "ip_whitelist": ["10.0.0.0/33"] })), "ip_whitelist[0]");
    validation(&patch(me, json!({ "ip_whitelist": ["2001:db8::/129"] })), "ip_whitelist[0]");
    validation(&patch(me, json!({ "ip_whitelist": "10.0.0.0/8" })), "ip_whitelist");
    validation(&patch(me, json!({ "enforce_ip_whitelist": "yes" })), "enforce_ip_whitelist");
    // Enterprise only.
    err(&patch(me, json!({ "allowed_ips": ["10.0.0.0/8"] })), 403, "FORBIDDEN");

    // A change that refuses the caller's own address is refused...
    let lock = json!({ "ip_whitelist": ["203.0.113.0/24", "2001:db8::/32"], "enforce_ip_whitelist": true });
    let e = validation(&patch(me, lock.clone()), "ip_whitelist");
    assert!(e["details"]["issue"].as_str().unwrap().contains(me), "the issue names the address: {e}");
    ok(&from(me, "GET", "/v1/user", Some(admin), None), 200); // ...and nothing changed.

    // ...unless asked for explicitly.
    let mut forced = lock.clone();
    forced["allow_lockout"] = json!(true);
    let d = ok(&patch(me, forced), 200);
    assert_eq!(d["enforce_ip_whitelist"], true, "{d}");
    assert_eq!(d["ip_whitelist"], json!(["203.0.113.0/24", "2001:db8::/32"]), "{d}");

    // Enforcement.
    let r = from(me, "GET", "/v1/user", Some(admin), None);
    err(&r, 403, "IP_NOT_ALLOWED");
    rate_limit_headers(&r);
    ok(&from("203.0.113.9", "GET", "/v1/user", Some(admin), None), 200);
    ok(&from("2001:db8::5", "GET", "/v1/user", Some(admin), None), 200);
    err(&from("2001:db9::5", "GET", "/v1/user", Some(admin), None), 403, "IP_NOT_ALLOWED");
    // Right-most untrusted hop: a client cannot prepend its way in...
    err(&from("203.0.113.9, 198.51.100.7", "GET", "/v1/user", Some(admin), None), 403, "IP_NOT_ALLOWED");
    // ...and the proxy chain's own hops are skipped.
    ok(&from("198.51.100.7, 203.0.113.9, 127.0.0.1", "GET", "/v1/user", Some(admin), None), 200);
    let d = ok(&from("1.2.3.4, 203.0.113.9", "GET", "/v1/auth/debug", Some(admin), None), 200);
    assert_eq!(d["client_ip"], "203.0.113.9", "{d}");

    // Chain order: the allowlist runs first, so a valid key from a refused address is a 403,
    // while no key or a bad key is a 401 (a stranger learns nothing about the list).
    err(&from(me, "GET", "/v1/gateways", Some(admin), None), 403, "IP_NOT_ALLOWED");
    err(&from(me, "POST", "/v1/gateways", Some(admin), Some(json!({ "name": "" }))), 403, "IP_NOT_ALLOWED");
    err(&from(me, "GET", "/v1/gateways", Some(&random_key()), None), 401, "UNAUTHORIZED");
    err(&from(me, "GET", "/v1/gateways", None, None), 401, "UNAUTHORIZED");
    // Every management call from there is refused, including the settings themselves.
    err(&patch(me, json!({ "enforce_ip_whitelist": false })), 403, "IP_NOT_ALLOWED");

    // A key with bypass_ip_whitelist passes.
    let d = ok(&from(me, "GET", "/v1/auth/debug", Some(key("ip_bypass")), None), 200);
    assert_eq!(d["bypass_ip_whitelist"], true);
    assert_eq!(d["client_ip"], me);
    // A key created with bypass_ip_whitelist passes too; one without does not.
    let mk = |bypass: bool| {
        let r = from(
            "203.0.113.9",
            "POST",
            "/v1/api-keys",
            Some(admin),
            Some(json!({
                "name": format!("bypass-{bypass}"), "scopes": ["gateways:read"], "bypass_ip_whitelist": bypass
            })),
        );
        ok(&r, 201)["key"].as_str().unwrap().to_string()
    };
    let (yes, no) = (mk(true), mk(false));
    ok(&from(me, "GET", "/v1/gateways", Some(&yes), None), 200);
    err(&from(me, "GET", "/v1/gateways", Some(&no), None), 403, "IP_NOT_ALLOWED");

    // The allowlist applies to the gateway endpoint as well.
    let g = ok(
        &from(
            "203.0.113.9",
            "POST",
            "/v1/gateways",
            Some(admin),
            Some(json!({ "name": "ip-gw", "servers": ["time"] })),
        ),
        201,
    );
    let init = json!({"jsonrpc": "2.0", "id": "1", "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let mcp = |ip: &str| {
        fx().srv.request(
            "POST",
            &format!("/gateway/{}/mcp", g["id"].as_str().unwrap()),
            None,
            Some(init.clone()),
            &[
                ("x-forwarded-for", ip),
                ("x-api-key", g["api_key"].as_str().unwrap()),
                ("accept", "application/json, text/event-stream"),
            ],
        )
    };
    assert_eq!(mcp(me).status, 403, "gateway endpoint from a refused address");
    assert_eq!(mcp("203.0.113.9").status, 200, "gateway endpoint from an allowed address");

    // A change that keeps the caller in needs no flag; turning enforcement off opens up again.
    ok(&patch("203.0.113.9", json!({ "ip_whitelist": ["203.0.113.0/24"] })), 200);
    ok(&patch("203.0.113.9", json!({ "enforce_ip_whitelist": false })), 200);
    ok(&from(me, "GET", "/v1/user", Some(admin), None), 200);
}

#[test]
fn whitelist_entries_allow_and_scale_limits() {
    let admin = key("wl_admin");
    let post = |body: Value| from("192.0.2.1", "POST", "/v1/account/whitelist", Some(admin), Some(body));
    validation(&post(json!({ "ip": "not-an-ip" })), "ip");
    validation(&post(json!({ "ip": "192.0.2.0/40" })), "ip");
    validation(&post(json!({ "ip": "192.0.2.10", "rate_limit_multiplier": 0 })), "rate_limit_multiplier");
    validation(&post(json!({ "ip": "192.0.2.10", "rate_limit_multiplier": -1 })), "rate_limit_multiplier");

    let base = rate_limit_headers(&from("192.0.2.10", "GET", "/v1/user", Some(admin), None)).0;
    let e = ok(&post(json!({ "ip": "192.0.2.10", "rate_limit_multiplier": 2, "description": "office" })), 201);
    assert_eq!(e["ip"], "192.0.2.10");
    assert_eq!(e["rate_limit_multiplier"], 2.0);
    assert_eq!(e["description"], "office");
    assert!(e["id"].is_string(), "{e}");

    // The entry's multiplier applies to requests from it (enforced or not).
    let r = from("192.0.2.10", "GET", "/v1/user", Some(admin), None);
    ok(&r, 200);
    assert_eq!(rate_limit_headers(&r).0, base * 2, "X-RateLimit-Limit from a x2 entry: {r:?}");
    let d = ok(&from("192.0.2.10", "GET", "/v1/auth/debug", Some(admin), None), 200);
    assert_eq!(d["ip_rate_limit_multiplier"], 2.0, "{d}");
    assert_eq!(rate_limit_headers(&from("192.0.2.11", "GET", "/v1/user", Some(admin), None)).0, base);

    // An entry is an allowed address: enforcing a list without it still lets it in.
    let r = from(
        "192.0.2.10",
        "PATCH",
        "/v1/account/security",
        Some(admin),
        Some(json!({ "ip_whitelist": ["198.18.0.0/15"], "enforce_ip_whitelist": true })),
    );
    let d = ok(&r, 200);
    assert_eq!(d["whitelist"].as_array().map(Vec::len), Some(1), "{d}");
    ok(&from("192.0.2.10", "GET", "/v1/user", Some(admin), None), 200);
    ok(&from("198.18.3.4", "GET", "/v1/user", Some(admin), None), 200);
    err(&from("192.0.2.11", "GET", "/v1/user", Some(admin), None), 403, "IP_NOT_ALLOWED");
    ok(
        &from(
            "192.0.2.10",
            "PATCH",
            "/v1/account/security",
            Some(admin),
            Some(json!({ "enforce_ip_whitelist": false })),
        ),
        200,
    );
}

#[test]
fn spoofed_forwarded_for_is_ignored_without_trusted_proxies() {
    // A second server that trusts no proxy: the header is the client's word, so it is ignored.
    let (admin, y) = declared_key("key_sp", "usr_sp", &["*"]);
    let (bypass, yb) = declared_key("key_sp_bypass", "usr_sp", &["*"]);
    let yb = yb.replace(" }\n", ", bypass_ip_whitelist: true }\n");
    let srv = TestServer::start(&format!(
        "organizations:\n  - {{ id: org_sp, name: Sp, tier: professional }}\n\
         users:\n  - {{ id: usr_sp, email: s@p.test, name: S, role: owner, organization: org_sp }}\n\
         api_keys:\n{y}{yb}"
    ));
    let xff = [("x-forwarded-for", "203.0.113.5")];
    let d = ok(&srv.request("GET", "/v1/auth/debug", Some(&admin), None, &xff), 200);
    assert_eq!(d["client_ip"], "127.0.0.1", "an untrusted peer's X-Forwarded-For must be ignored: {d}");

    // Allow only 203.0.113.0/24: the caller (127.0.0.1) would be locked out, so it must insist.
    let body = json!({ "ip_whitelist": ["203.0.113.0/24"], "enforce_ip_whitelist": true });
    validation(&srv.request("PATCH", "/v1/account/security", Some(&admin), Some(body.clone()), &xff), "ip_whitelist");
    let mut forced = body;
    forced["allow_lockout"] = json!(true);
    ok(&srv.api("PATCH", "/v1/account/security", Some(&admin), Some(forced)), 200);
    // Claiming an allowed address does not help.
    err(&srv.request("GET", "/v1/user", Some(&admin), None, &xff), 403, "IP_NOT_ALLOWED");
    err(
        &srv.request("GET", "/v1/user", Some(&admin), None, &[("x-forwarded-for", "203.0.113.5, 203.0.113.6")]),
        403,
        "IP_NOT_ALLOWED",
    );
    err(&srv.api("GET", "/v1/user", Some(&admin), None), 403, "IP_NOT_ALLOWED");
    // The bypass key still gets in and can undo it.
    ok(&srv.api("PATCH", "/v1/account/security", Some(&bypass), Some(json!({ "enforce_ip_whitelist": false }))), 200);
    ok(&srv.api("GET", "/v1/user", Some(&admin), None), 200);
}

// ------------------------------------------------------------------------------------------------
// Rate limits

fn retry_after(r: &Resp) -> u64 {
    let e = err(r, 429, "RATE_LIMITED");
    let header: u64 = r.header("retry-after").expect("Retry-After").parse().expect("Retry-After seconds");
    assert_eq!(e["retry_after"].as_u64(), Some(header), "error.retry_after and Retry-After differ: {r:?}");
    let (_, remaining, ..) = rate_limit_headers(r);
    assert_eq!(remaining, 0, "X-RateLimit-Remaining on a 429: {r:?}");
    header
}

#[test]
fn a_burst_admits_exactly_the_bucket_then_refills() {
    let k = key("t_burst");
    let ip = "100.64.0.1";
    for i in 0..5u64 {
        let r = from(ip, "GET", "/v1/user", Some(k), None);
        ok(&r, 200);
        let (limit, remaining, reset, reset_after, bucket) = rate_limit_headers(&r);
        assert_eq!((limit, remaining, bucket.as_str()), (5, 4 - i, "global"), "request {i}: {r:?}");
        let now = unix_now();
        assert!((1..=60).contains(&reset_after), "{r:?}");
        assert!(reset >= now && reset <= now + reset_after + 2, "X-RateLimit-Reset is a Unix time: {r:?}");
    }
    let r = from(ip, "GET", "/v1/user", Some(k), None);
    let wait = retry_after(&r);
    assert!((9..=10).contains(&wait), "one token comes back every 10 s: Retry-After {wait}");
    // Other 429s agree while waiting, and nothing is admitted early.
    sleep(Duration::from_secs(wait - 1));
    let r = from(ip, "GET", "/v1/user", Some(k), None);
    let left = retry_after(&r);
    assert_eq!(left, 1, "after {} s of {wait} s: {r:?}", wait - 1);
    sleep(Duration::from_secs(left));
    let r = from(ip, "GET", "/v1/user", Some(k), None);
    ok(&r, 200);
    assert_eq!(rate_limit_headers(&r).1, 0, "{r:?}");
    retry_after(&from(ip, "GET", "/v1/user", Some(k), None));
}

#[test]
fn costs_by_method_and_buckets() {
    let k = key("t_cost");
    let ip = "100.64.0.2";
    // POST costs 2 (global bucket for api-keys).
    let r = from(ip, "POST", "/v1/api-keys", Some(k), Some(json!({ "name": "cost", "scopes": ["gateways:read"] })));
    let id = ok(&r, 201)["id"].as_str().unwrap().to_string();
    assert_eq!(rate_limit_headers(&r).1, 3, "5 - POST(2): {r:?}");
    // DELETE costs 3.
    let r = from(ip, "DELETE", &format!("/v1/api-keys/{id}"), Some(k), None);
    ok_message(&r);
    assert_eq!(rate_limit_headers(&r).1, 0, "3 - DELETE(3): {r:?}");
    retry_after(&from(ip, "GET", "/v1/user", Some(k), None));

    // Gateway writes draw from `write` (50% of global); reads are not charged there.
    let k = key("t_write");
    let r = from(ip, "POST", "/v1/gateways", Some(k), Some(json!({ "name": "costly" })));
    let g = ok(&r, 201);
    let (limit, remaining, _, _, bucket) = rate_limit_headers(&r);
    assert_eq!(bucket, "write", "{r:?}");
    assert_eq!(limit, 3, "write is half of a burst of 5, rounded (2.5 -> 3): {r:?}");
    assert_eq!(remaining, limit - 2, "POST costs 2: {r:?}");
    let r = from(ip, "GET", "/v1/gateways", Some(k), None);
    let (limit, remaining, reset, reset_after, bucket) = rate_limit_headers(&r);
    assert_eq!((limit, remaining, bucket.as_str()), (5, 4, "global"), "{r:?}");
    // One token of `global` used, and one comes back every 10 s (6 a minute): full again in 10 s.
    assert_eq!(reset_after, 10, "{r:?}");
    let now = unix_now();
    assert!(reset >= now + 9 && reset <= now + 11, "X-RateLimit-Reset is 10 s from now: {r:?}");
    // PATCH costs 2: more than is left.
    let r = from(
        ip,
        "PATCH",
        &format!("/v1/gateways/{}", g["id"].as_str().unwrap()),
        Some(k),
        Some(json!({ "description": "x" })),
    );
    retry_after(&r);
    assert_eq!(rate_limit_headers(&r).4, "write");
    // Analytics costs 5 in a bucket twice the size of global.
    let r = from(ip, "GET", "/v1/metrics/rate-limits", Some(k), None);
    ok(&r, 200);
    let (limit, remaining, _, _, bucket) = rate_limit_headers(&r);
    assert_eq!((limit, remaining, bucket.as_str()), (10, 5, "analytics"), "{r:?}");
}

#[test]
fn every_response_carries_the_rate_limit_headers() {
    let k = key("t_headers");
    let ip = "100.64.0.3";
    let cases = [
        (200, from(ip, "GET", "/v1/user", Some(k), None)),
        (404, from(ip, "GET", "/v1/gateways/gw_nope", Some(k), None)),
        (404, from(ip, "GET", "/v1/no/such/path", Some(k), None)),
        (400, from(ip, "GET", "/v1/gateways?limit=0", Some(k), None)),
        (401, from(ip, "GET", "/v1/user", None, None)),
        (401, from(ip, "GET", "/v1/user", Some(&random_key()), None)),
    ];
    for (status, r) in &cases {
        assert_eq!(r.status, *status, "{r:?}");
        check_meta(r);
        rate_limit_headers(r);
    }
    // 4xx count: the key's bucket went down by one per request (4 so far).
    let r = from(ip, "GET", "/v1/user", Some(k), None);
    assert_eq!(rate_limit_headers(&r).1, 0, "five requests, the 4xx included, used the burst of 5: {r:?}");
    let r = from(ip, "GET", "/v1/user", Some(k), None);
    retry_after(&r);
    assert!(r.header("x-ratelimit-reset").is_some() && r.header("x-ratelimit-reset-after").is_some());
}

/// Issue 12: `/openapi.json` is public, so the chain was skipped and its answers carried none of
/// the rate-limit headers.
#[test]
fn the_public_document_carries_the_rate_limit_headers() {
    let k = key("t_spare");
    let ip = "100.64.0.8";
    // Charged to the key like any other answer: its `global` bucket goes down by one each time.
    for expected in [4, 3] {
        let r = from(ip, "GET", "/v1/openapi.json", Some(k), None);
        assert_eq!(r.status, 200, "{r:?}");
        assert!(r.json["openapi"].is_string(), "{r:?}");
        let (limit, remaining, _, _, bucket) = rate_limit_headers(&r);
        assert_eq!((limit, remaining, bucket.as_str()), (5, expected, "global"), "{r:?}");
    }
    // Without a credential (charged to the address), or with a wrong one, the document is
    // still served, with the headers.
    for key in [None, Some(random_key())] {
        let r = from("100.64.0.9", "GET", "/v1/openapi.json", key.as_deref(), None);
        assert_eq!(r.status, 200, "{r:?}");
        rate_limit_headers(&r);
    }
}

/// Issue 12: the MCP endpoint's Origin refusal was answered before the chain ran, so it carried
/// none of the rate-limit headers.
#[test]
fn origin_refusals_carry_the_rate_limit_headers() {
    let k = key("t_spare");
    let ip = "100.64.0.8";
    // A browser Origin not in mcp.allowed_origins: 403, charged to the key's `gateway` bucket
    // (the document test above charges the same key's `global` bucket).
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = fx().srv.request(
        "POST",
        "/gateway/gw_anything/mcp",
        None,
        Some(init),
        &[
            ("x-forwarded-for", ip),
            ("x-api-key", k),
            ("origin", "http://evil.example"),
            ("accept", "application/json, text/event-stream"),
        ],
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.text.contains("evil.example"), "the refusal names the Origin: {r:?}");
    let (limit, remaining, _, _, bucket) = rate_limit_headers(&r);
    assert_eq!((limit, remaining, bucket.as_str()), (5, 4, "gateway"), "{r:?}");
}

#[test]
fn unauthenticated_callers_are_limited_per_address() {
    let ip = "100.64.9.9";
    // Decision 1: 60/hour, burst 10.
    for i in 0..10u64 {
        let r = from(ip, "GET", "/v1/gateways", None, None);
        err(&r, 401, "UNAUTHORIZED");
        let (limit, remaining, ..) = rate_limit_headers(&r);
        assert_eq!((limit, remaining), (10, 9 - i), "unauthenticated request {i}: {r:?}");
    }
    // Over the limit: a 429 instead of the 401, with or without a (bad) key.
    let wait = retry_after(&from(ip, "GET", "/v1/gateways", None, None));
    assert!(wait >= 1, "{wait}");
    retry_after(&from(ip, "GET", "/v1/gateways", Some(&random_key()), None));
    // Another address has its own bucket; a valid key is limited by key, not by address.
    err(&from("100.64.9.10", "GET", "/v1/gateways", None, None), 401, "UNAUTHORIZED");
    ok(&from(ip, "GET", "/v1/user", Some(key("t_unauth")), None), 200);
    // Health is never limited.
    let r = from(ip, "GET", "/healthz", None, None);
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn rate_limit_status_and_report() {
    let k = key("t_status");
    let ip = "100.64.0.5";
    let r = from(ip, "GET", "/v1/rate-limit", Some(k), None);
    let d = ok(&r, 200);
    assert_eq!(d["tier"], "tiny");
    for b in ["global", "write", "analytics", "webhook", "gateway"] {
        for f in ["limit", "remaining", "reset"] {
            assert!(d["buckets"][b][f].is_u64(), "buckets.{b}.{f}: {d}");
        }
    }
    assert_eq!(d["buckets"]["global"]["limit"], 5);
    assert_eq!(d["buckets"]["global"]["remaining"], 4, "the status call itself was charged: {d}");
    assert_eq!(d["buckets"]["analytics"]["limit"], 10);
    // Use up global, with one refusal.
    let mut n = 1;
    loop {
        let r = from(ip, "GET", "/v1/user", Some(k), None);
        n += 1;
        if r.status == 429 {
            break;
        }
        assert!(n < 10, "never limited");
    }
    assert_eq!(n, 6, "4 more admitted, the 5th refused");
    let r = from(ip, "GET", "/v1/metrics/rate-limits", Some(k), None);
    let m = ok(&r, 200);
    n += 1;
    assert!(m["period"].is_string(), "{m}");
    let u = &m["usage"];
    assert_eq!(u["total_requests"], n, "every request counted, the refused one too: {m}");
    assert_eq!(u["rate_limited_requests"], 1, "{m}");
    assert!(u["average_remaining"].is_number(), "{m}");
    assert!(u["peak_usage"]["requests"].as_u64().is_some_and(|p| p >= 1), "{m}");
    assert!(u["peak_usage"]["timestamp"].is_string(), "{m}");
    for b in ["global", "write", "analytics"] {
        assert!(m["by_bucket"][b]["used"].is_u64() && m["by_bucket"][b]["limit"].is_u64(), "by_bucket.{b}: {m}");
    }
    assert_eq!(m["by_bucket"]["global"]["used"], 5, "{m}");
    assert_eq!(m["by_bucket"]["analytics"]["used"], 5, "{m}");
}
