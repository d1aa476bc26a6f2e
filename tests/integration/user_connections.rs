//! Per-user connections (issue 63, docs/identity.md "Per-user connections"): an app with
//! `connection_scope: user` is connected by each member for themself, and every call reaches it
//! with the caller's own credential, on the caller's own upstream session; never another
//! member's, never the organisation's. Against the real binary and an upstream that records
//! every request it gets (`mcp_upstreams::Recorder`).

use crate::common;
use crate::mcp_upstreams::{config, Recorder, Seen};

use crate::security_mcp::Listening;
use common::mcp::{create_gateway, result_text, rpc_error, Mcp};
use common::{declared_users_and_keys, ok, ok_message, wait_until, Browser, KeySpec, TestServer};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// How many calls each member makes, per era.
const CALLS: usize = 150;

/// The organisation's Owner (Dana) and three members.
const MEMBERS: &[KeySpec] = &[
    ("dana", "usr_dana", "owner", "org_pu", &["*"]),
    ("alice", "usr_alice", "developer", "org_pu", &["*"]),
    ("bob", "usr_bob", "viewer", "org_pu", &["*"]),
    ("carol", "usr_carol", "developer", "org_pu", &["*"]),
];

struct Fx {
    srv: TestServer,
    up: Recorder,
    keys: HashMap<&'static str, String>,
    gw: String,
    gw_key: String,
}

/// A server whose `crm` app (the recorder) is connected by each user, its lists read with the
/// organisation's own connection; a gateway of it made by the Owner.
fn start() -> Fx {
    start_with(8)
}

/// As [`start`], with at most `most` callers' upstream sessions of `crm`.
fn start_with(most: usize) -> Fx {
    let up = Recorder::start();
    let (members, keys) = declared_users_and_keys(MEMBERS, |u| format!("{u}@users.test"));
    let app = format!(
        "  - {{ id: crm, name: CRM, url: \"{}\", auth_types: [api_key], connection_scope: user, max_user_sessions: {most} }}\n",
        up.url("/crm/mcp")
    );
    let org = "organizations:\n  - { id: org_pu, name: Per User, tier: enterprise }\n";
    let srv = TestServer::start_with_config(&config(&app, &format!("{org}{members}")));
    let connect = |key: &str, query: &str, secret: &str| {
        let body = json!({"auth_type": "api_key", "credentials": {"api_key": secret}});
        srv.api("POST", &format!("/v1/apps/crm/connect{query}"), Some(key), Some(body))
    };
    ok(&connect(&keys["dana"], "?organization=true", "org-secret"), 200);
    let a = ok(&connect(&keys["alice"], "", "alice-secret"), 200);
    assert_eq!((a["status"].as_str(), a["user_id"].as_str()), (Some("connected"), Some("usr_alice")), "{a}");
    // A Viewer connects themself too (`apps:connect_self`, which every role holds).
    ok(&connect(&keys["bob"], "", "bob-secret"), 200);
    let (gw, gw_key) = create_gateway(&srv, &keys["dana"], json!({"name": "per-user", "servers": ["crm"]}));
    Fx { srv, up, keys, gw, gw_key }
}

/// One `tools/call` of `echo` by a client of the stateless revision (2026-07-28).
fn stateless_echo(client: &reqwest::blocking::Client, f: &Fx, key: &str, id: u64, message: &str) -> Value {
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": message}, "_meta": meta}});
    let r = client
        .post(f.srv.url(&format!("/gateway/{}/mcp", f.gw)))
        .header("X-API-Key", key)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "echo")
        .body(body.to_string())
        .send()
        .expect("a stateless call");
    let text = r.text().unwrap_or_default();
    let json = text.lines().find_map(|l| l.strip_prefix("data:")).map(str::trim).unwrap_or(text.trim());
    serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Which member's credential a recorded request carried.
fn bearer(s: &Seen) -> Option<String> {
    s.headers.iter().find(|(k, _)| k == "authorization").map(|(_, v)| v.clone())
}

fn message_of(s: &Seen) -> String {
    let body: Value = serde_json::from_str(&s.body).unwrap_or(Value::Null);
    body["params"]["arguments"]["message"].as_str().unwrap_or_default().to_string()
}

/// Alice and Bob call the same app at once, hundreds of calls each in both eras: every call the
/// app receives carries its own caller's credential, on that caller's own upstream session, and
/// nobody's call goes with the organisation's. A member with no connection, and a gateway key,
/// never reach the app.
#[test]
fn each_member_calls_a_user_scoped_app_with_their_own_credential() {
    let f = start();
    let detail = |key: &str| ok(&f.srv.api("GET", "/v1/apps/crm", Some(key), None), 200);
    let d = detail(&f.keys["alice"]);
    assert_eq!(
        (d["connection_scope"].as_str(), d["own_connection_status"].as_str()),
        (Some("user"), Some("connected"))
    );
    // The organisation's connection (the lists' view) beside the caller's own.
    assert_eq!(d["connection_status"], "connected", "{d}");
    assert_eq!(detail(&f.keys["carol"])["own_connection_status"], "none");

    std::thread::scope(|s| {
        for who in ["alice", "bob"] {
            let key = f.keys[who].clone();
            let f = &f;
            s.spawn(move || {
                let mcp = Mcp::open(&f.srv, &f.gw, &key);
                assert_eq!(mcp.tool_names(1), vec!["echo"], "the catalogue is the organisation's view");
                for i in 0..CALLS {
                    let m = format!("{who}-handshake-{i}");
                    assert_eq!(
                        result_text(&mcp.call(10 + i as u64, "echo", json!({"message": m}))),
                        format!("Echo: {m}")
                    );
                }
            });
            let key = f.keys[who].clone();
            s.spawn(move || {
                let client = reqwest::blocking::Client::builder().no_proxy().build().unwrap();
                for i in 0..CALLS {
                    let m = format!("{who}-stateless-{i}");
                    let body = stateless_echo(&client, f, &key, 10 + i as u64, &m);
                    assert_eq!(result_text(&body), format!("Echo: {m}"), "{body}");
                }
            });
        }
    });

    let seen = f.up.seen();
    let calls: Vec<&Seen> = seen.iter().filter(|s| s.rpc_method == "tools/call").collect();
    assert_eq!(calls.len(), 4 * CALLS, "every call reached the app once");
    let mut sessions: HashMap<&str, HashSet<String>> = HashMap::new();
    for c in &calls {
        let m = message_of(c);
        let who = if m.starts_with("alice-") { "alice" } else { "bob" };
        assert_eq!(bearer(c), Some(format!("Bearer {who}-secret")), "{m} went with another credential: {c:?}");
        let sid = c.headers.iter().find(|(k, _)| k == "mcp-session-id").map(|(_, v)| v.clone());
        sessions.entry(who).or_default().insert(sid.expect("a call in an upstream session"));
    }
    assert!(sessions["alice"].is_disjoint(&sessions["bob"]), "each member has an upstream session of their own");
    // The organisation's credential served the lists only, never a call.
    for s in seen.iter().filter(|s| bearer(s).as_deref() == Some("Bearer org-secret")) {
        assert_ne!(s.rpc_method, "tools/call", "{s:?}");
    }
    assert!(!f.srv.all_logs().contains("alice-secret"), "a member's credential is never logged");

    // Carol has not connected: -32006 naming where to connect, and the app never hears of it.
    let carol = Mcp::open(&f.srv, &f.gw, &f.keys["carol"]);
    let body = carol.call(900, "echo", json!({"message": "carol-1"}));
    let (code, message) = rpc_error(&body);
    assert_eq!(code, -32006, "{body}");
    let url = body["error"]["data"]["url"].as_str().expect("data.url");
    assert!(url.ends_with("/auth/console/apps?connect=crm") && message.contains(url), "{body}");
    // The gateway's own key names no user: refused, saying what to use instead.
    let shared = Mcp::open(&f.srv, &f.gw, &f.gw_key);
    let body = shared.call(901, "echo", json!({"message": "gateway-key-1"}));
    let (code, message) = rpc_error(&body);
    assert_eq!(code, -32006, "{body}");
    assert!(message.contains("a gateway key names no user") && message.contains("your own API key"), "{message}");
    let reached = f.up.seen().iter().filter(|s| s.rpc_method == "tools/call").map(message_of).collect::<Vec<_>>();
    assert!(!reached.iter().any(|m| m.starts_with("carol-") || m.starts_with("gateway-key-")), "{reached:?}");
}

/// A client that declared URL-mode elicitation (2025-11-25) is given the connect page as an
/// elicitation (-32042); removing one's connection ends one's calls; removing a member ends
/// theirs, and an administrator removes another's connection with `?user_id=`.
#[test]
fn a_missing_connection_is_a_link_and_removing_it_or_the_member_ends_the_calls() {
    let f = start();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"form": {}, "url": {}}}, "clientInfo": {"name": "url-client", "version": "1"}}});
    let r = common::mcp::post(&f.srv, &f.gw, &f.keys["carol"], None, &init.to_string());
    let sid = r.header("mcp-session-id").expect("a session").to_string();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "carol"}}});
    let body = common::mcp::post(&f.srv, &f.gw, &f.keys["carol"], Some(&sid), &call.to_string()).json();
    assert_eq!(body["error"]["code"], -32042, "{body}");
    let e = &body["error"]["data"]["elicitations"][0];
    assert_eq!(e["mode"], "url", "{body}");
    let url = format!("/auth/console/apps?connect=crm&elicitation={}", e["elicitationId"].as_str().unwrap_or("-"));
    assert!(e["url"].as_str().is_some_and(|u| u.ends_with(&url)), "{body}");
    assert!(e["elicitationId"].as_str().is_some_and(|i| !i.is_empty()) && e["message"].is_string(), "{body}");

    // Alice disconnects herself: her next call is refused as not connected.
    let alice = Mcp::open(&f.srv, &f.gw, &f.keys["alice"]);
    result_text(&alice.call(3, "echo", json!({"message": "alice-before"})));
    ok(&f.srv.api("DELETE", "/v1/apps/crm/connection", Some(&f.keys["alice"]), None), 200);
    let after = f.srv.api("DELETE", "/v1/apps/crm/connection", Some(&f.keys["alice"]), None);
    assert_eq!(after.status, 404, "{after:?}");
    assert_eq!(rpc_error(&alice.call(4, "echo", json!({"message": "alice-after"}))).0, -32006);
    // Bob (a Viewer) may not remove another member's; an administrator may.
    let bobs = f.srv.api("DELETE", "/v1/apps/crm/connection?user_id=usr_carol", Some(&f.keys["bob"]), None);
    assert_eq!(bobs.status, 404, "carol has none: {bobs:?}");
    ok(
        &f.srv.api(
            "POST",
            "/v1/apps/crm/connect",
            Some(&f.keys["alice"]),
            Some(json!({"auth_type": "api_key", "credentials": {"api_key": "alice-secret-2"}})),
        ),
        200,
    );
    // Nobody connects a member but the member: an Owner's credential would go on her calls.
    let planted = f.srv.api(
        "POST",
        "/v1/apps/crm/connect?user_id=usr_alice",
        Some(&f.keys["dana"]),
        Some(json!({"auth_type": "api_key", "credentials": {"api_key": "dana-secret"}})),
    );
    assert_eq!((planted.status, planted.error_code()), (403, "FORBIDDEN"), "{planted:?}");
    let refused = f.srv.api("DELETE", "/v1/apps/crm/connection?user_id=usr_alice", Some(&f.keys["bob"]), None);
    assert_eq!((refused.status, refused.error_code()), (403, "INSUFFICIENT_SCOPE"), "{refused:?}");
    result_text(&alice.call(5, "echo", json!({"message": "alice-again"})));
    ok(&f.srv.api("DELETE", "/v1/apps/crm/connection?user_id=usr_alice", Some(&f.keys["dana"]), None), 200);
    assert_eq!(rpc_error(&alice.call(6, "echo", json!({"message": "alice-removed"}))).0, -32006);

    // Bob is removed from the team: his connection ends with him.
    let bob = Mcp::open(&f.srv, &f.gw, &f.keys["bob"]);
    result_text(&bob.call(7, "echo", json!({"message": "bob-before"})));
    ok(&f.srv.api("DELETE", "/v1/team/members/usr_bob", Some(&f.keys["dana"]), None), 200);
    let owners = f.srv.api("DELETE", "/v1/apps/crm/connection?user_id=usr_bob", Some(&f.keys["dana"]), None);
    assert_eq!(owners.status, 404, "bob's connection went with him: {owners:?}");
    let seen = |m: &str| f.up.seen().iter().any(|s| message_of(s) == m);
    assert!(seen("alice-again") && seen("bob-before"));
    for m in ["alice-after", "alice-removed"] {
        assert!(!seen(m), "{m} reached the app");
    }
    wait_until("no upstream request carries a removed credential", Duration::from_secs(5), || {
        f.up.seen().iter().filter(|s| s.rpc_method == "tools/call").all(|s| {
            let m = message_of(s);
            m == "bob-before" || m.starts_with("alice-") && bearer(s).is_some_and(|b| b.contains("alice-secret"))
        })
    });
}

const PASSWORD: &str = "connect page passphrase";

/// A browser of the console signed in as `user` (its password set first).
fn signed_in(f: &Fx, user: &str) -> Browser {
    let r =
        f.srv.request("PUT", "/v1/user/password", Some(&f.keys[user]), Some(json!({ "new_password": PASSWORD })), &[]);
    ok_message(&r);
    let b = Browser::new(&f.srv, "users.test");
    let r = b.sign_in(&format!("usr_{user}"), PASSWORD, "");
    assert_eq!(r.status, 303, "{r:?}");
    b
}

/// Posts the connect page's API-key form of `crm` with `elicitation`.
fn connect_in_console(b: &Browser, elicitation: &str, secret: &str) -> common::Resp {
    let csrf = b.cookie("toolgate_csrf").expect("a CSRF cookie");
    let form = [("csrf", csrf.as_str()), ("whose", "own"), ("elicitation", elicitation), ("api_key", secret)];
    b.send("POST", "/auth/console/apps/crm/connect", Some(&form))
}

/// A missing connection is a link (docs/identity.md): the -32042's URL is the console's connect
/// page with the elicitation's id (no token, not signed in: the page sends the browser to sign
/// in first). Another member opening it is refused, and their connect with it completes
/// nothing; the caller connecting there completes it: `notifications/elicitation/complete`
/// reaches the caller's session on its GET stream, and the retried call reaches the app with
/// the caller's own credential. A link completed once completes nothing again.
#[test]
fn the_link_of_a_missing_connection_is_completed_by_its_caller_only() {
    let f = start();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"url": {}}}, "clientInfo": {"name": "url-client", "version": "1"}}});
    let r = common::mcp::post(&f.srv, &f.gw, &f.keys["carol"], None, &init.to_string());
    let sid = r.header("mcp-session-id").expect("a session").to_string();
    let mut stream = Listening::open(&f.srv, &f.gw, &f.keys["carol"], &sid);
    let call = |id: u64, m: &str| {
        let c = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": m}}});
        common::mcp::post(&f.srv, &f.gw, &f.keys["carol"], Some(&sid), &c.to_string()).json()
    };
    let body = call(2, "carol-first");
    assert_eq!(body["error"]["code"], -32042, "{body}");
    let e = &body["error"]["data"]["elicitations"][0];
    let eid = e["elicitationId"].as_str().expect("an elicitation id").to_string();
    let url = e["url"].as_str().expect("a URL");
    let path = &url[url.find("/auth/console/apps").expect("the console's apps page")..];
    assert_eq!(path, format!("/auth/console/apps?connect=crm&elicitation={eid}"), "the id only, no token: {url}");

    // Not signed in: the page sends the browser to sign in, and back here after.
    let anonymous = Browser::new(&f.srv, "users.test");
    let r = anonymous.send("GET", path, None);
    let to = r.header("location").unwrap_or_default().to_string();
    assert_eq!(r.status, 303, "{r:?}");
    assert!(to.contains("/auth/signin?next=") && to.contains(&eid), "{to}");

    // Bob, another member, opens Carol's link: refused; his connect with it completes nothing.
    let bob = signed_in(&f, "bob");
    let page = bob.send("GET", path, None);
    assert_eq!(page.status, 403, "{page:?}");
    assert!(page.text.contains("another person") && !page.text.contains("name=\"elicitation\""), "{}", page.text);
    let r = connect_in_console(&bob, &eid, "bob-planted");
    assert_eq!(r.status, 403, "{r:?}");
    let own = ok(&f.srv.api("GET", "/v1/apps/crm", Some(&f.keys["bob"]), None), 200);
    // (Setting his password ended his earlier connection: a refused connect made none.)
    assert_eq!(own["own_connection_status"], "none", "bob's refused connect made no connection");

    // Carol opens it: her call's app is put first, its form carrying the elicitation.
    let carol = signed_in(&f, "carol");
    let page = carol.send("GET", path, None);
    assert_eq!(page.status, 200, "{page:?}");
    let section = page.text.find("id=\"connect\"").expect("the connect section");
    assert!(section < page.text.find("<table").unwrap_or(usize::MAX), "the asked app comes first");
    assert!(page.text.contains("Your MCP client asked you to connect"), "{}", page.text);
    assert!(page.text.contains(&format!("name=\"elicitation\" value=\"{eid}\"")), "{}", page.text);
    let r = connect_in_console(&carol, &eid, "carol-secret");
    assert_eq!(r.status, 303, "{r:?}");
    let done = carol.send("GET", "/auth/console/apps", None);
    assert!(done.text.contains("Your MCP client was told"), "{}", done.text);
    assert!(
        stream.arrives("notifications/elicitation/complete", Duration::from_secs(10)),
        "the session's GET stream: {}",
        stream.text()
    );
    assert!(stream.text().contains(&format!("\"elicitationId\":\"{eid}\"")), "{}", stream.text());

    // The client retries: the call reaches the app with Carol's own credential.
    assert_eq!(result_text(&call(3, "carol-retry")), "Echo: carol-retry");
    let seen = f.up.seen();
    let retry = seen.iter().find(|s| message_of(s) == "carol-retry").expect("the retry reached the app");
    assert_eq!(bearer(retry).as_deref(), Some("Bearer carol-secret"));
    assert!(
        !seen.iter().any(|s| bearer(s).as_deref() == Some("Bearer bob-planted")),
        "bob's attempt connected nothing"
    );

    // Completed once: the link still opens, says so, and its form connects without completing.
    let again = carol.send("GET", path, None);
    assert_eq!(again.status, 200, "{again:?}");
    assert!(again.text.contains("expired or is not known"), "{}", again.text);
}

/// With `max_user_sessions: 1`, a second caller whose call comes while the first caller's is in
/// flight is refused with -32010 (the app is busy), and served once the first one's session is
/// idle (the least recently used idle one is closed to make room).
#[test]
fn a_second_caller_while_every_session_is_in_use_gets_32010_then_is_served() {
    let f = start_with(1);
    std::thread::scope(|s| {
        let alice = Mcp::open(&f.srv, &f.gw, &f.keys["alice"]);
        let held = s.spawn(move || result_text(&alice.call(2, "echo", json!({"message": "hold"}))));
        wait_until("alice's call is in flight at the app", Duration::from_secs(10), || {
            f.up.seen().iter().any(|c| c.rpc_method == "tools/call" && message_of(c) == "hold")
        });
        let bob = Mcp::open(&f.srv, &f.gw, &f.keys["bob"]);
        let body = bob.call(3, "echo", json!({"message": "bob-1"}));
        let (code, message) = rpc_error(&body);
        assert_eq!(code, -32010, "{body}");
        assert!(message.contains("`crm` is busy") || message.contains("app `crm` is busy"), "{message}");
        assert_eq!(body["error"]["data"]["app"], "crm", "{body}");
        f.up.release();
        assert_eq!(held.join().unwrap(), "Echo: hold");
        assert_eq!(result_text(&bob.call(4, "echo", json!({"message": "bob-2"}))), "Echo: bob-2");
    });
    assert!(!f.up.seen().iter().any(|c| message_of(c) == "bob-1"), "the refused call never reached the app");
}

/// A service account without its own connection is told that an administrator must connect it
/// (it cannot connect itself), with no link to follow.
#[test]
fn a_service_account_without_a_connection_is_told_an_administrator_must_connect_it() {
    let f = start();
    let dana = f.keys["dana"].as_str();
    let body = json!({"name": "robot", "scopes": ["gateways:read", "gateways:write"]});
    let sa =
        ok(&f.srv.api("POST", "/v1/service-accounts", Some(dana), Some(body)), 201)["id"].as_str().unwrap().to_string();
    let made = f.srv.api("POST", &format!("/v1/service-accounts/{sa}/keys"), Some(dana), Some(json!({"name": "k"})));
    let key = ok(&made, 201)["key"].as_str().unwrap().to_string();
    let robot = Mcp::open(&f.srv, &f.gw, &key);
    let body = robot.call(2, "echo", json!({"message": "robot-1"}));
    let (code, message) = rpc_error(&body);
    assert_eq!(code, -32006, "{body}");
    assert!(message.contains("an administrator must connect it for the service account"), "{message}");
    assert!(body["error"]["data"].get("url").is_none(), "no link for a service account: {body}");
    assert!(!f.up.seen().iter().any(|c| message_of(c) == "robot-1"), "the app never heard of it");
}
