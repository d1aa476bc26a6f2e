//! Defects of the MCP endpoint found in review (issue 12), against the real binary over raw
//! HTTP: a gateway's or an app's quota answers its 429 with its own `X-RateLimit-*` figures, not
//! the caller's bucket; header checks (`Accept`, `Content-Type`, `MCP-Protocol-Version`) come
//! before session checks; a resource URI that no listing shows goes to the app that can own it
//! (the only app of a single-app gateway) instead of -32002.

use crate::common::{self, unix_now, RawResponse as Raw, TestServer};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mcp_defects","version":"1"}}}"#;
const BOTH: &str = "application/json, text/event-stream";

/// The JSON-RPC error message of an answer.
fn error_message(r: &Raw) -> String {
    r.json()["error"]["message"].as_str().unwrap_or_default().to_string()
}

/// One HTTP/1.1 exchange on its own connection, with exactly the headers given (an HTTP client
/// library would add an `Accept` of its own).
fn exchange(srv: &TestServer, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Raw {
    let mut sock = TcpStream::connect(srv.main_addr()).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    sock.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    sock.read_to_end(&mut raw).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no header end: {text}"));
    let mut lines = head.split("\r\n");
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Raw { status, headers, body: body.to_string() }
}

/// A POST to the gateway's endpoint with `key`, `headers` and the session, if any.
fn post(srv: &TestServer, gw: &str, key: &str, session: Option<&str>, headers: &[(&str, &str)], body: &str) -> Raw {
    let mut h = vec![("X-API-Key", key)];
    if let Some(s) = session {
        h.push(("Mcp-Session-Id", s));
    }
    h.extend_from_slice(headers);
    exchange(srv, "POST", &format!("/gateway/{gw}/mcp"), &h, body)
}

fn json_post(srv: &TestServer, gw: &str, key: &str, session: Option<&str>, body: &str) -> Raw {
    post(srv, gw, key, session, &[("Accept", BOTH), ("Content-Type", "application/json")], body)
}

fn initialize(srv: &TestServer, gw: &str, key: &str) -> String {
    let r = json_post(srv, gw, key, None, INITIALIZE);
    assert_eq!(r.status, 200, "initialize: {}", r.body);
    r.header("mcp-session-id").expect("Mcp-Session-Id").to_string()
}

fn gateway(srv: &TestServer, body: Value) -> (String, String) {
    common::mcp::create_gateway(srv, srv.admin_key(), body)
}

/// Sends `request` until a quota refuses one (at most `tries`; a minute may turn over between
/// two requests and open a fresh window), checking the caller's own bucket on the way.
fn until_refused(tries: usize, mut request: impl FnMut() -> Raw) -> Raw {
    for _ in 0..tries {
        let r = request();
        if r.status == 429 {
            return r;
        }
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("x-ratelimit-bucket"), Some("gateway"), "an admitted call reports the caller's bucket");
        assert!(r.num("x-ratelimit-remaining") > 100, "the caller's own bucket is far from empty: {:?}", r.headers);
    }
    panic!("no 429 after {tries} requests");
}

/// The 429 of a spent per-minute quota of `limit` named `bucket`: its own figures throughout.
fn assert_quota_refusal(r: &Raw, limit: u64, bucket: &str) {
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.header("x-ratelimit-bucket"), Some(bucket), "{:?}", r.headers);
    assert_eq!(r.num("x-ratelimit-limit"), limit);
    assert_eq!(r.num("x-ratelimit-remaining"), 0, "the quota is spent, whatever the caller's bucket holds");
    for name in ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-bucket"] {
        assert_eq!(r.headers.iter().filter(|(n, _)| n == name).count(), 1, "{name} once: {:?}", r.headers);
    }
    let (reset, after, retry) = (r.num("x-ratelimit-reset"), r.num("x-ratelimit-reset-after"), r.num("retry-after"));
    assert_eq!(reset % 60, 0, "a per-minute window resets on the minute: {reset}");
    assert!((1..=60).contains(&after), "reset-after {after}");
    assert_eq!(retry, after, "Retry-After is the quota's reset-after");
    assert!(reset.abs_diff(unix_now() + after) <= 2, "reset {reset} is now + {after}");
    let e = &r.json()["error"];
    assert_eq!(e["code"], -32010, "LimitExceeded: {e}");
    assert_eq!(e["data"]["code"], "RATE_LIMITED", "{e}");
    assert_eq!(e["data"]["retry_after"], retry, "{e}");
    assert_eq!(e["data"]["bucket"], bucket, "{e}");
}

#[test]
fn a_quota_429_carries_that_quotas_rate_limit_headers() {
    // The owner key (enterprise tier) has large buckets; the gateway allows 2 requests a minute
    // and the `metered` app 1 call a minute.
    let srv = TestServer::start(
        "  - { id: metered, name: Metered, description: rate-limited time, category: utilities, builtin: time, rate_limit: 1 }\n",
    );
    let name = format!("q-{}", common::random_alnum(6));
    let (gw, key) = gateway(&srv, json!({ "name": name, "servers": ["time"], "configuration": { "rate_limit": 2 } }));
    let r = until_refused(6, || json_post(&srv, &gw, srv.admin_key(), None, INITIALIZE));
    assert_quota_refusal(&r, 2, &format!("gateway:{gw}"));
    // The gateway key is refused the same way: the quota is the gateway's, not the caller's.
    let r = until_refused(3, || json_post(&srv, &gw, &key, None, INITIALIZE));
    assert_quota_refusal(&r, 2, &format!("gateway:{gw}"));

    let name = format!("a-{}", common::random_alnum(6));
    let (gw, _) = gateway(&srv, json!({ "name": name, "servers": ["metered"] }));
    let session = initialize(&srv, &gw, srv.admin_key());
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_current_time","arguments":{"format":"YYYY"}}}"#;
    let r = until_refused(4, || json_post(&srv, &gw, srv.admin_key(), Some(&session), call));
    assert_quota_refusal(&r, 1, "app:metered");
}

#[test]
fn header_checks_come_before_session_checks() {
    let srv = TestServer::start("");
    let name = format!("h-{}", common::random_alnum(6));
    let (gw, key) = gateway(&srv, json!({ "name": name, "servers": ["time"] }));
    let live = initialize(&srv, &gw, &key);
    let list = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
    let json = ("Content-Type", "application/json");
    // No session, an unknown one, a live one: the same header errors.
    for session in [None, Some("0123456789abcdef"), Some(live.as_str())] {
        let at = format!("session {session:?}");
        for accept in [None, Some("text/event-stream"), Some("text/html")] {
            let mut h = vec![json];
            h.extend(accept.map(|a| ("Accept", a)));
            let r = post(&srv, &gw, &key, session, &h, list);
            assert_eq!(r.status, 406, "{at}, Accept {accept:?}: {}", r.body);
            let m = error_message(&r);
            assert!(m.contains("application/json") && m.contains("text/event-stream"), "{at}: {m}");
        }
        let r = post(&srv, &gw, &key, session, &[("Accept", BOTH), ("Content-Type", "text/plain")], list);
        assert_eq!(r.status, 415, "{at}: {}", r.body);
        let bad_version = [("Accept", BOTH), json, ("MCP-Protocol-Version", "1999-01-01")];
        let r = post(&srv, &gw, &key, session, &bad_version, list);
        assert_eq!(r.status, 400, "{at}: {}", r.body);
        assert!(error_message(&r).contains("1999-01-01"), "{at}: {}", r.body);
        // The GET stream and DELETE check the version before the session too (GET also Accept).
        let mut h = vec![("X-API-Key", key.as_str()), ("MCP-Protocol-Version", "1999-01-01")];
        h.extend(session.map(|s| ("Mcp-Session-Id", s)));
        let path = format!("/gateway/{gw}/mcp");
        let r = exchange(&srv, "DELETE", &path, &h, "");
        assert_eq!(r.status, 400, "DELETE, {at}: {}", r.body);
        assert!(error_message(&r).contains("1999-01-01"), "DELETE, {at}: {}", r.body);
        h.push(("Accept", "application/json"));
        let r = exchange(&srv, "GET", &path, &h, "");
        assert_eq!(r.status, 406, "GET, {at}: {}", r.body);
        assert!(error_message(&r).contains("text/event-stream"), "GET, {at}: {}", r.body);
        h.pop();
        h.push(("Accept", "text/event-stream"));
        let r = exchange(&srv, "GET", &path, &h, "");
        assert_eq!(r.status, 400, "GET, {at}: {}", r.body);
        assert!(error_message(&r).contains("1999-01-01"), "GET, {at}: {}", r.body);
    }
    // With good headers the session errors are as before, and the live session still works.
    let r = json_post(&srv, &gw, &key, None, list);
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (400, json!(-32000)), "{}", r.body);
    let r = json_post(&srv, &gw, &key, Some("0123456789abcdef"), list);
    assert_eq!((r.status, r.json()["error"]["code"].clone()), (404, json!(-32001)), "{}", r.body);
    let r = json_post(&srv, &gw, &key, Some(&live), list);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["result"]["tools"].is_array(), "{}", r.body);
}

/// server-everything lists neither `test://watched-resource` (the conformance suite's
/// subscription target) nor `demo://resource/session/...` resources, yet serves subscriptions
/// to any URI: a single-app gateway relays them to it.
#[test]
fn a_single_app_gateway_relays_subscriptions_to_uris_no_listing_shows() {
    let everything = common::spawn_everything();
    let srv = TestServer::start(&format!(
        "  - {{ id: everything, name: Everything, category: testing, url: {} }}\n",
        common::everything_url(&everything)
    ));
    let name = format!("r-{}", common::random_alnum(6));
    let (gw, key) = gateway(&srv, json!({ "name": name, "servers": ["everything"] }));
    let session = initialize(&srv, &gw, &key);
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(json_post(&srv, &gw, &key, Some(&session), note).status, 202);
    let list = json_post(&srv, &gw, &key, Some(&session), r#"{"jsonrpc":"2.0","id":2,"method":"resources/list"}"#);
    assert!(!list.body.contains("test://watched-resource"), "the URI must be unlisted: {}", list.body);
    for (id, method) in [(3, "resources/subscribe"), (4, "resources/unsubscribe")] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"uri": "test://watched-resource"}});
        let r = json_post(&srv, &gw, &key, Some(&session), &body.to_string());
        assert_eq!(r.status, 200, "{method}: {}", r.body);
        let msg = response_of(&r);
        assert_eq!(msg["id"], id, "{method}: {msg}");
        assert_eq!(msg["result"], json!({}), "{method} answered by the app: {msg}");
    }
}

/// The JSON-RPC response of a POST answered as JSON or as an SSE stream.
fn response_of(r: &Raw) -> Value {
    if r.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")) {
        let body = decode_chunked(&r.body);
        return body
            .split("\n\n")
            .filter_map(|ev| ev.lines().find_map(|l| l.strip_prefix("data:")))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("result").is_some() || m.get("error").is_some())
            .unwrap_or_else(|| panic!("no response in the stream: {body}"));
    }
    r.json()
}

/// The body of a chunked answer (an SSE stream has no length), or the body as it is.
fn decode_chunked(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { return body.to_string() };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// Issue 12: the endpoint's JSON-RPC codes had colliding meanings (-32001 was both "session not
/// found" and 401/403, -32000 both "not initialized" and 406/415), so a client could not tell
/// "initialize again" from "bad key". Each refusal now has its own code (`protocol::RpcCode`).
#[test]
fn every_refusal_of_the_endpoint_has_a_code_of_its_own() {
    let srv = TestServer::start("");
    let name = format!("c-{}", common::random_alnum(6));
    let (gw, key) = gateway(&srv, json!({ "name": name, "servers": ["time"] }));
    let list = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
    let json = ("Content-Type", "application/json");
    let code = |r: &Raw| (r.status, r.json()["error"]["code"].as_i64().unwrap_or_else(|| panic!("code: {}", r.body)));
    let mut seen = vec![
        ("no session", code(&json_post(&srv, &gw, &key, None, list))),
        ("unknown session", code(&json_post(&srv, &gw, &key, Some("0123456789abcdef"), list))),
        ("bad key", code(&json_post(&srv, &gw, "tg_not_a_key", None, list))),
        ("unknown gateway", code(&json_post(&srv, "gw_nope", srv.admin_key(), None, list))),
        ("no Accept", code(&post(&srv, &gw, &key, None, &[json], list))),
        (
            "wrong Content-Type",
            code(&post(&srv, &gw, &key, None, &[("Accept", BOTH), ("Content-Type", "text/plain")], list)),
        ),
    ];
    let expected = [
        ("no session", (400, -32000)),
        ("unknown session", (404, -32001)),
        ("bad key", (401, -32005)),
        ("unknown gateway", (404, -32007)),
        ("no Accept", (406, -32008)),
        ("wrong Content-Type", (415, -32009)),
    ];
    assert_eq!(seen, expected);
    seen.sort_by_key(|(_, (_, c))| *c);
    seen.dedup_by_key(|(_, (_, c))| *c);
    assert_eq!(seen.len(), expected.len(), "every refusal has its own code");
}
