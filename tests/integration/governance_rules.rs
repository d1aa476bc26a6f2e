//! A gateway's per-tool rules (issue 42, item 3) against the real binary: the API refuses a rule
//! that does not compile with its line and column; calls are decided for API keys by role, key
//! and arguments, for a JWT of the gateways' issuer by its claims, and for an access token of
//! toolgate's own authorization server by its grant; a denied call is a JSON-RPC error naming
//! the rule, counted, in the access line and in the request log; a list leaves out the tools
//! the caller can never call.

use crate::common::mcp::credential_header as credential;
use crate::common::{self, err, ok, TestServer};
use crate::jwt::{fixture, serve_jwks, sign};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The built-in time app twice, so that a gateway has two apps (and two tools).
const CLOCK: &str = "  - { id: clock, name: Clock, description: Time again, category: utilities, builtin: time }\n";

/// An organisation with an owner (`key_owner`, every scope; `a@a.test`, as the OAuth helper of
/// `security_mcp` signs in) and a developer (`key_dev`), its rates raised so that only the rules
/// refuse anything here.
fn start(extra: &str) -> (TestServer, String, String) {
    let (owner, owner_yaml) = common::declared_key("key_owner", "usr_a", &["*"]);
    let (dev, dev_yaml) = common::declared_key("key_dev", "usr_dev", &["gateways:read"]);
    let srv = TestServer::start(&format!(
        "{CLOCK}rate_limits:\n  tiers:\n    free: {{ requests_per_hour: 100000, requests_per_minute: 10000, burst: 1000, concurrent: 20 }}\n\
         organizations:\n  - {{ id: org_r, name: Rules Inc, tier: free }}\n\
         users:\n  - {{ id: usr_a, email: a@a.test, name: A, role: owner, organization: org_r }}\n\
         \x20 - {{ id: usr_dev, email: d@r.test, name: D, role: developer, organization: org_r }}\n\
         api_keys:\n{owner_yaml}{dev_yaml}{extra}"
    ));
    (srv, owner, dev)
}

/// One JSON-RPC request to the gateway, in `session` when given: (HTTP status, body, request id).
fn rpc(srv: &TestServer, gw: &str, cred: &str, session: Option<&str>, body: Value) -> (u16, Value, String) {
    let (name, value) = credential(cred);
    let mut headers = vec![("Accept", "application/json, text/event-stream"), (name, value.as_str())];
    if let Some(s) = session {
        headers.push(("Mcp-Session-Id", s));
    }
    let mut req = srv.client().post(srv.url(&format!("/gateway/{gw}/mcp"))).json(&body);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let r = req.send().unwrap();
    let status = r.status().as_u16();
    let session = r.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let id = r.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let body: Value = serde_json::from_str(&r.text().unwrap()).unwrap_or_default();
    let tag = if session.is_empty() { id } else { session };
    (status, body, tag)
}

pub(crate) fn initialize(srv: &TestServer, gw: &str, cred: &str) -> String {
    let params =
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "rules", "version": "1"}});
    let (status, body, session) =
        rpc(srv, gw, cred, None, json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}));
    assert_eq!(status, 200, "initialize: {body}");
    session
}

/// The names `tools/list` gives this caller.
fn listed(srv: &TestServer, gw: &str, cred: &str, session: &str) -> Vec<String> {
    let (status, body, _) =
        rpc(srv, gw, cred, Some(session), json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert_eq!(status, 200, "{body}");
    let tools = body["result"]["tools"].as_array().unwrap_or_else(|| panic!("{body}"));
    tools.iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// A `tools/call`: (its JSON-RPC body, the request id).
pub(crate) fn call(srv: &TestServer, gw: &str, cred: &str, session: &str, tool: &str, args: Value) -> (Value, String) {
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": args}});
    let (name, value) = credential(cred);
    let r = srv
        .client()
        .post(srv.url(&format!("/gateway/{gw}/mcp")))
        .header("Accept", "application/json, text/event-stream")
        .header(name, value)
        .header("Mcp-Session-Id", session)
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "a call is answered under 200");
    let id = r.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    (serde_json::from_str(&r.text().unwrap()).unwrap(), id)
}

/// The rule a call's answer names as having denied it (`None`: the call went through).
fn denied_by(answer: &Value) -> Option<String> {
    if answer.get("result").is_some() {
        return None;
    }
    assert_eq!(answer["error"]["code"], -32012, "{answer}");
    let rule = answer["error"]["data"]["rule"].as_str().unwrap_or_else(|| panic!("{answer}")).to_string();
    assert_eq!(answer["error"]["message"], format!("Tool call denied by rule `{rule}`"), "{answer}");
    Some(rule)
}

pub(crate) fn gateway(srv: &TestServer, owner: &str, body: Value) -> (String, String) {
    common::mcp::create_gateway(srv, owner, body)
}

fn set_rules(srv: &TestServer, owner: &str, gw: &str, rules: Value) -> Value {
    ok(&srv.api("PATCH", &format!("/v1/gateways/{gw}"), Some(owner), Some(json!({ "rules": rules }))), 200)
}

#[test]
fn a_rule_that_does_not_compile_is_a_400_naming_it_and_its_position() {
    let (srv, owner, _) = start("");
    let post = |rules: Value| {
        srv.api(
            "POST",
            "/v1/gateways",
            Some(&owner),
            Some(json!({"name": "ruled", "servers": ["time"], "rules": rules})),
        )
    };
    let e = err(
        &post(json!([{"name": "fine", "effect": "allow", "when": "true"},
                     {"name": "broken", "effect": "deny", "when": "tool ==\n  && true"}])),
        400,
        "VALIDATION_ERROR",
    );
    assert_eq!(e["details"]["field"], "rules[1].when", "{e}");
    let issue = e["details"]["issue"].as_str().unwrap();
    assert!(issue.starts_with("rule `broken` does not compile at line 2, column "), "{issue}");
    let dup =
        json!([{"name": "a", "effect": "deny", "when": "true"}, {"name": "a", "effect": "allow", "when": "true"}]);
    assert_eq!(err(&post(dup), 400, "VALIDATION_ERROR")["details"]["field"], "rules[1].name");
    err(&post(json!([{"name": "a", "effect": "maybe", "when": "true"}])), 400, "VALIDATION_ERROR");
    let long = "true && ".repeat(300) + "true";
    let e = err(&post(json!([{"name": "a", "effect": "deny", "when": long}])), 400, "VALIDATION_ERROR");
    assert_eq!(e["details"]["field"], "rules[0].when");
    let many: Vec<Value> =
        (0..65).map(|i| json!({"name": format!("r{i}"), "effect": "deny", "when": "true"})).collect();
    assert_eq!(err(&post(json!(many)), 400, "VALIDATION_ERROR")["details"]["field"], "rules");

    // A good set is kept and shown; a bad PATCH changes nothing.
    let rules = json!([{"name": "no-dev", "effect": "deny", "when": "caller.role == \"developer\""}]);
    let (gw, _) = gateway(&srv, &owner, json!({"name": "kept", "servers": ["time"], "rules": rules}));
    let bad = json!({"rules": [{"name": "x", "effect": "deny", "when": "args.("}]});
    let e = err(&srv.api("PATCH", &format!("/v1/gateways/{gw}"), Some(&owner), Some(bad)), 400, "VALIDATION_ERROR");
    assert!(e["details"]["issue"].as_str().unwrap().contains("line 1, column"), "{e}");
    let detail = ok(&srv.api("GET", &format!("/v1/gateways/{gw}"), Some(&owner), None), 200);
    assert_eq!(detail["rules"], rules, "{detail}");
    let list = ok(&srv.api("GET", "/v1/gateways", Some(&owner), None), 200);
    assert_eq!(list["gateways"][0]["rules"], rules, "{list}");
}

#[test]
fn rules_decide_api_key_calls_by_role_key_and_arguments_and_lists_hide_the_never_callable() {
    let (srv, owner, dev) = start("");
    let (gw, _) = gateway(&srv, &owner, json!({"name": "two-apps", "servers": ["time", "clock"]}));
    set_rules(
        &srv,
        &owner,
        &gw,
        json!([
            {"name": "dev-no-clock", "effect": "deny", "when": "caller.role == \"developer\" && app == \"clock\""},
            {"name": "owner-utc-only", "effect": "deny",
             "when": "caller.key_id == \"key_owner\" && has(args.timezone) && args.timezone != \"UTC\""},
        ]),
    );
    let dev_session = initialize(&srv, &gw, &dev);
    let owner_session = initialize(&srv, &gw, &owner);
    assert_eq!(listed(&srv, &gw, &dev, &dev_session), ["time__get_current_time"], "the clock is never the developer's");
    let mut all = listed(&srv, &gw, &owner, &owner_session);
    all.sort();
    assert_eq!(all, ["clock__get_current_time", "time__get_current_time"], "a rule on args hides nothing");

    let (denied, request_id) =
        call(&srv, &gw, &dev, &dev_session, "clock__get_current_time", json!({"format": "YYYY"}));
    assert_eq!(denied_by(&denied).as_deref(), Some("dev-no-clock"));
    assert_eq!(denied["error"]["data"]["tool"], "clock__get_current_time");
    let (allowed, _) = call(&srv, &gw, &dev, &dev_session, "time__get_current_time", json!({"format": "YYYY"}));
    assert_eq!(denied_by(&allowed), None, "{allowed}");
    let paris = json!({"format": "YYYY", "timezone": "Europe/Paris"});
    let (r, _) = call(&srv, &gw, &owner, &owner_session, "time__get_current_time", paris.clone());
    assert_eq!(denied_by(&r).as_deref(), Some("owner-utc-only"));
    let (r, _) = call(&srv, &gw, &dev, &dev_session, "time__get_current_time", paris);
    assert_eq!(denied_by(&r), None, "another key: {r}");
    let utc = json!({"format": "YYYY", "timezone": "UTC"});
    assert_eq!(denied_by(&call(&srv, &gw, &owner, &owner_session, "clock__get_current_time", utc).0), None);

    // Counted, in the access line, and in the request log (403, the rule named).
    let metrics = srv.metrics();
    let series = format!("toolgate_tool_denied_total{{gateway=\"{gw}\",rule=\"dev-no-clock\"}} 1");
    assert!(
        metrics.contains(&series),
        "{series} not in:\n{}",
        metrics.lines().filter(|l| l.contains("denied")).collect::<Vec<_>>().join("\n")
    );
    assert_eq!(access_rule(&srv, &request_id), "dev-no-clock");
    let logs = ok(&srv.api("GET", "/v1/logs?status=error", Some(&owner), None), 200);
    let entries = logs["logs"].as_array().unwrap();
    let entry = entries.iter().find(|e| e["app"] == "clock").unwrap_or_else(|| panic!("{logs}"));
    assert_eq!(entry["response"]["status"], 403, "{entry}");
    assert!(entry.to_string().contains("denied by rule `dev-no-clock`"), "{entry}");
    // And in the audit trail, appended off the call's path: the developer's key, the gateway, the rule.
    let mut trail = Vec::new();
    common::wait_until("the denied calls in the audit trail", Duration::from_secs(10), || {
        let r = srv.api("GET", "/v1/audit?action=tool_call.denied", Some(&owner), None);
        assert_eq!(r.status, 200, "{}", r.text);
        trail = r.data()["entries"].as_array().cloned().unwrap_or_default();
        trail.len() == 2
    });
    let dev_entry = trail.iter().find(|e| e["detail"]["rule"] == "dev-no-clock").unwrap_or_else(|| panic!("{trail:?}"));
    assert_eq!(dev_entry["actor"], json!({"kind": "api_key", "id": "key_dev"}), "{dev_entry}");
    assert_eq!(dev_entry["target"], json!({"kind": "gateway", "id": gw}), "{dev_entry}");
    assert_eq!(dev_entry["detail"]["tool"], "clock__get_current_time", "{dev_entry}");

    // Rules removed: everything is the developer's again.
    set_rules(&srv, &owner, &gw, json!([]));
    assert_eq!(listed(&srv, &gw, &dev, &dev_session).len(), 2);
    let (r, _) = call(&srv, &gw, &dev, &dev_session, "clock__get_current_time", json!({"format": "YYYY"}));
    assert_eq!(denied_by(&r), None, "{r}");
}

/// The `rule` of the access line of request `id` (the JSON log on standard error).
fn access_rule(srv: &TestServer, id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let line = srv
            .stderr()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["target"] == "toolgate::access" && v["request_id"] == id);
        if let Some(l) = line {
            return l["rule"].as_str().unwrap_or_else(|| panic!("no rule in {l}")).to_string();
        }
        assert!(Instant::now() < deadline, "no access line for {id}:\n{}", srv.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_jwt_of_the_gateways_issuer_is_decided_by_its_claims() {
    let jwks = std::fs::read_to_string(fixture("jwks.json")).unwrap();
    let url = serve_jwks(jwks);
    let issuer = "http://issuer.test/";
    let (srv, owner, _) = start(&format!("gateway_oauth:\n  issuer: {issuer}\n  jwks_url: {url}\n  leeway_secs: 0\n"));
    let body = json!({"name": "jwt-gw", "servers": ["time"], "configuration": {"auth": "oauth"},
        "rules": [{"name": "support-only", "effect": "deny",
                   "when": "caller.kind != \"oauth_token\" || caller.claims.team != \"support\" || !(\"tools\" in caller.scopes)"}]});
    let (gw, _) = gateway(&srv, &owner, body);
    let now = chrono::Utc::now().timestamp();
    let token = |team: &str| {
        let claims = json!({"iss": issuer, "sub": "alice", "aud": format!("http://localhost:8080/gateway/{gw}/mcp"),
            "iat": now, "exp": now + 300, "scope": "tools read", "team": team});
        sign(Some("jwks-test"), claims, "test_rsa_private.pem")
    };
    let support = token("support");
    // The issuer's keys are fetched shortly after the start.
    let deadline = Instant::now() + Duration::from_secs(10);
    let params =
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "rules", "version": "1"}});
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params});
    let session = loop {
        let (status, body, session) = rpc(&srv, &gw, &support, None, init.clone());
        if status == 200 {
            break session;
        }
        assert!(Instant::now() < deadline, "the issuer's token was never taken: {status} {body}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(listed(&srv, &gw, &support, &session), ["get_current_time"]);
    let (r, _) = call(&srv, &gw, &support, &session, "get_current_time", json!({"format": "YYYY"}));
    assert_eq!(denied_by(&r), None, "{r}");

    let sales = token("sales");
    let session = initialize(&srv, &gw, &sales);
    assert!(listed(&srv, &gw, &sales, &session).is_empty(), "a rule on claims decides the list too");
    let (r, _) = call(&srv, &gw, &sales, &session, "get_current_time", json!({"format": "YYYY"}));
    assert_eq!(denied_by(&r).as_deref(), Some("support-only"));
}

#[test]
fn an_access_token_of_toolgates_authorization_server_is_decided_by_its_grant() {
    let (srv, owner, _) = start("");
    let (gw, client, _, access) = crate::security_mcp::oauth_gateway_token(&srv, &owner);
    let resource = format!("http://localhost:8080/gateway/{gw}/mcp");
    set_rules(
        &srv,
        &owner,
        &gw,
        json!([{"name": "this-client-only", "effect": "deny",
                "when": format!("caller.claims.client_id != \"{client}\" || caller.claims.aud != \"{resource}\" \
                                 || caller.claims.sub != \"usr_a\" || caller.kind != \"oauth_token\"")}]),
    );
    let session = initialize(&srv, &gw, &access);
    let (r, _) = call(&srv, &gw, &access, &session, "get_current_time", json!({"format": "YYYY"}));
    assert_eq!(denied_by(&r), None, "{r}");

    set_rules(
        &srv,
        &owner,
        &gw,
        json!([{"name": "not-this-client", "effect": "deny", "when": format!("caller.claims.client_id == \"{client}\"")}]),
    );
    assert!(listed(&srv, &gw, &access, &session).is_empty());
    let (r, _) = call(&srv, &gw, &access, &session, "get_current_time", json!({"format": "YYYY"}));
    assert_eq!(denied_by(&r).as_deref(), Some("not-this-client"));
}
