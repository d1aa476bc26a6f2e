//! Pinned tool definitions (issue 42, item 1; `docs/governance.md`), against the real binary and
//! a real MCP server on the official Python SDK (`tests/py/changing_tools_server.py`) that
//! changes a tool's description (a rug pull) and adds a tool when asked: a new gateway pins the
//! app's first list; the changed and the added tool are neither listed nor callable (-32011
//! naming the tool) until approved; the pending changes and their diff through the API; approve
//! and reject behind the MFA gate; another organisation's gateway and changes are 404; the
//! counter and the access line's `tool_pending`; and two instances on one Redis, where an
//! approval on one is enforced on the other once the change feed brings it (the feed's
//! deadline itself is proven in `identity_changes.rs`; here the test waits for the state).

use crate::api_mfa::{code_at, step_now, totp};
use crate::common::mcp::{result_text, rpc_error, Mcp};
use crate::common::{self, err, ok, validation, Peer, ServerOptions, TestServer};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

const PENDING: i64 = -32011;

fn server_script() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/changing_tools_server.py");
    path.to_string_lossy().into_owned()
}

/// The changing server as a stdio app `chg` (a Python process started on first use: its first
/// list is given time on a busy machine).
pub(crate) fn stdio_app() -> String {
    format!(
        "  - {{ id: chg, name: Changing, category: testing, timeouts: {{ connect_ms: 60000 }}, command: [{:?}, {:?}] }}\nmcp:\n  list_deadline_ms: 30000\n",
        common::python().to_string_lossy(),
        server_script()
    )
}

/// The changing server over Streamable HTTP (one server for every instance).
pub(crate) fn http_server() -> Peer {
    let mut cmd = Command::new(common::python());
    cmd.arg(server_script()).arg("http").current_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py"));
    Peer::spawn("changing-tools", cmd)
}

/// Organisations, users and keys: `org_gp` (owner `usr_gp`, and `usr_gp_mfa` who will enrol
/// MFA) and `org_gp_other`.
pub(crate) struct Keys {
    pub(crate) owner: String,
    mfa: String,
    other: String,
    pub(crate) yaml: String,
}

pub(crate) fn keys() -> Keys {
    let (owner, y1) = common::declared_key("key_gp_owner", "usr_gp", &["*"]);
    let (mfa, y2) = common::declared_key("key_gp_mfa", "usr_gp_mfa", &["*"]);
    let (other, y3) = common::declared_key("key_gp_other", "usr_gp_other", &["*"]);
    let yaml = format!(
        "organizations:\n  - {{ id: org_gp, name: Pins, tier: enterprise }}\n  - {{ id: org_gp_other, name: Other, tier: enterprise }}\n\
         users:\n  - {{ id: usr_gp, email: gp@pins.test, name: Gp, role: owner, organization: org_gp }}\n\
         \x20 - {{ id: usr_gp_mfa, email: mfa@pins.test, name: Mfa, role: owner, organization: org_gp }}\n\
         \x20 - {{ id: usr_gp_other, email: other@pins.test, name: Other, role: owner, organization: org_gp_other }}\n\
         api_keys:\n{y1}{y2}{y3}"
    );
    Keys { owner, mfa, other, yaml }
}

pub(crate) fn create_gateway(srv: &TestServer, key: &str, servers: &[&str], configuration: Value) -> (String, String) {
    let body = json!({"name": format!("pins-{}", common::random_alnum(8)), "servers": servers, "configuration": configuration});
    common::mcp::create_gateway(srv, key, body)
}

pub(crate) fn changes(srv: &TestServer, key: &str, gw: &str) -> Vec<Value> {
    let d = ok(&srv.api("GET", &format!("/v1/gateways/{gw}/tool-changes"), Some(key), None), 200);
    d["tool_changes"].as_array().unwrap_or_else(|| panic!("tool_changes: {d}")).clone()
}

pub(crate) fn decide(
    srv: &TestServer,
    key: &str,
    gw: &str,
    change: &str,
    what: &str,
    mfa: Option<&str>,
) -> common::Resp {
    let headers: Vec<(&str, &str)> = mfa.map(|m| vec![("x-mfa-token", m)]).unwrap_or_default();
    srv.request("POST", &format!("/v1/gateways/{gw}/tool-changes/{change}/{what}"), Some(key), None, &headers)
}

/// `servers[0].functions` of `GET /v1/gateways/{gw}`.
fn served_functions(srv: &TestServer, key: &str, gw: &str) -> Vec<String> {
    let d = ok(&srv.api("GET", &format!("/v1/gateways/{gw}"), Some(key), None), 200);
    let functions = d["servers"][0]["functions"].as_array().unwrap_or_else(|| panic!("servers[0].functions: {d}"));
    functions.iter().map(|f| f.as_str().unwrap().to_string()).collect()
}

/// The gateway's `functions_count` in `GET /v1/gateways`.
fn functions_count(srv: &TestServer, key: &str, gw: &str) -> usize {
    let d = ok(&srv.api("GET", "/v1/gateways?limit=100", Some(key), None), 200);
    let item = d["gateways"].as_array().unwrap().iter().find(|g| g["id"] == gw).cloned();
    item.unwrap_or_else(|| panic!("{gw} in {d}"))["functions_count"].as_u64().unwrap() as usize
}

/// Waits (up to 10 s) until `check` holds for the gateway's tool names.
pub(crate) fn until_tools(mcp: &Mcp, what: &str, check: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let names = mcp.tool_names(9);
        if check(&names) {
            return names;
        }
        assert!(Instant::now() < deadline, "{what}: tools are {names:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn has(names: &[String], n: &str) -> bool {
    names.iter().any(|x| x == n)
}

pub(crate) fn assert_pending(body: &Value, tool: &str) {
    let (code, message) = rpc_error(body);
    assert_eq!(code, PENDING, "{body}");
    assert!(message.contains(tool) && message.contains("awaits approval"), "{body}");
    assert_eq!(body["error"]["data"]["tool"], tool, "{body}");
}

#[test]
fn a_changed_or_added_tool_is_held_back_until_approved() {
    let k = keys();
    let srv = TestServer::start(&format!("{}{}", stdio_app(), k.yaml));
    let (gw, gw_key) = create_gateway(&srv, &k.owner, &["chg"], json!({}));
    let detail = ok(&srv.api("GET", &format!("/v1/gateways/{gw}"), Some(&k.owner), None), 200);
    assert_eq!(detail["configuration"]["tool_policy"], "pin", "a new gateway pins: {detail}");
    validation(
        &srv.api(
            "PATCH",
            &format!("/v1/gateways/{gw}"),
            Some(&k.owner),
            Some(json!({"configuration": {"tool_policy": "trust"}})),
        ),
        "configuration.tool_policy",
    );

    // The app's first list is pinned as it is.
    let mcp = Mcp::open(&srv, &gw, &gw_key);
    let names = mcp.tool_names(1);
    assert!(has(&names, "send_email") && has(&names, "rug_pull") && has(&names, "add_tool"), "{names:?}");
    assert_eq!(result_text(&mcp.call(2, "send_email", json!({"to": "a@b.test"}))), "sent to a@b.test");
    assert!(changes(&srv, &k.owner, &gw).is_empty(), "nothing pending after the first list");

    // The rug pull: the changed tool disappears and cannot be called.
    result_text(&mcp.call(3, "rug_pull", json!({})));
    until_tools(&mcp, "send_email is held back", |n| !has(n, "send_email") && has(n, "rug_pull"));
    assert_pending(&mcp.call(4, "send_email", json!({"to": "a@b.test"})), "send_email");
    // The attempt is in the audit trail, naming the tool and why it was refused.
    crate::common::wait_until("a tool_call.refused entry", Duration::from_secs(20), || {
        let r = srv.api("GET", "/v1/audit?action=tool_call.refused", Some(&k.owner), None);
        r.data()["entries"].as_array().is_some_and(|e| {
            e.iter().any(|x| x["detail"]["reason"] == "pending" && x["detail"]["data"]["tool"] == "send_email")
        })
    });
    // Nor is it among the gateway's functions: it cannot be called.
    let functions = served_functions(&srv, &k.owner, &gw);
    assert!(!has(&functions, "send_email") && has(&functions, "rug_pull"), "{functions:?}");
    assert_eq!(functions_count(&srv, &k.owner, &gw), functions.len());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !srv.all_logs().contains("\"tool_pending\":true") {
        assert!(Instant::now() < deadline, "no access line with tool_pending:\n{}", srv.all_logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    // And an added tool too.
    result_text(&mcp.call(5, "add_tool", json!({})));
    std::thread::sleep(Duration::from_millis(300));
    let names = until_tools(&mcp, "exfiltrate is held back", |n| !has(n, "exfiltrate") && has(n, "add_tool"));
    assert!(!has(&names, "send_email"), "{names:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let list = loop {
        let list = changes(&srv, &k.owner, &gw);
        if list.len() == 2 || Instant::now() > deadline {
            break list;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(list.len(), 2, "{list:?}");
    let changed = list.iter().find(|c| c["tool"] == "send_email").expect("send_email's change");
    assert_eq!((changed["kind"].as_str(), changed["app"].as_str()), (Some("changed"), Some("chg")), "{changed}");
    assert_eq!(changed["diff"]["description"]["old"], "Sends an e-mail.", "{changed}");
    assert!(changed["diff"]["description"]["new"].as_str().unwrap().contains("BCC"), "{changed}");
    assert!(changed["diff"].get("inputSchema").is_none(), "only what changed: {changed}");
    assert!(changed["id"].as_str().unwrap().starts_with("tch_") && changed["detected_at"].is_string(), "{changed}");
    let added = list.iter().find(|c| c["tool"] == "exfiltrate").expect("exfiltrate's change");
    assert_eq!(added["kind"], "added", "{added}");
    assert_eq!(added["diff"]["description"]["old"], Value::Null, "{added}");
    let (changed_id, added_id) = (changed["id"].as_str().unwrap(), added["id"].as_str().unwrap());
    let metrics = srv.metrics();
    for kind in ["changed", "added"] {
        let line = format!("toolgate_tool_changes_total{{kind=\"{kind}\"}} 1");
        assert!(
            metrics.contains(&line),
            "{line} in\n{}",
            metrics.lines().filter(|l| l.contains("tool_changes")).collect::<Vec<_>>().join("\n")
        );
    }

    // Another organisation sees none of it; an unknown change is 404.
    err(&srv.api("GET", &format!("/v1/gateways/{gw}/tool-changes"), Some(&k.other), None), 404, "NOT_FOUND");
    err(&decide(&srv, &k.other, &gw, changed_id, "approve", None), 404, "NOT_FOUND");
    let (other_gw, _) = create_gateway(&srv, &k.other, &["chg"], json!({}));
    err(&decide(&srv, &k.other, &other_gw, changed_id, "approve", None), 404, "NOT_FOUND");
    err(&decide(&srv, &k.owner, &gw, "tch_nope", "approve", None), 404, "NOT_FOUND");
    assert_eq!(changes(&srv, &k.owner, &gw).len(), 2, "nothing decided");

    // Rejected: the added tool stays hidden, and is no longer pending.
    let r = ok(&decide(&srv, &k.owner, &gw, added_id, "reject", None), 200);
    assert_eq!(r["decision"], "rejected", "{r}");
    assert_pending(&mcp.call(6, "exfiltrate", json!({})), "exfiltrate");
    let left = changes(&srv, &k.owner, &gw);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(!has(&mcp.tool_names(7), "exfiltrate"));

    // Approved: the new definition is pinned, listed and callable.
    let r = ok(&decide(&srv, &k.owner, &gw, changed_id, "approve", None), 200);
    assert_eq!(r["decision"], "approved", "{r}");
    let names = mcp.tool_names(8);
    assert!(has(&names, "send_email"), "approved at once: {names:?}");
    let listed = mcp.rpc(10, "tools/list", json!({}));
    let send =
        listed["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "send_email").unwrap().clone();
    assert!(send["description"].as_str().unwrap().contains("BCC"), "the approved definition: {send}");
    assert_eq!(result_text(&mcp.call(11, "send_email", json!({"to": "c@d.test"}))), "sent to c@d.test");
    assert!(changes(&srv, &k.owner, &gw).is_empty());
    let functions = served_functions(&srv, &k.owner, &gw);
    assert!(has(&functions, "send_email") && !has(&functions, "exfiltrate"), "approved, rejected: {functions:?}");
    err(&decide(&srv, &k.owner, &gw, changed_id, "approve", None), 404, "NOT_FOUND");

    // `off` keeps today's behaviour; `approve` starts with nothing approved.
    let (off_gw, off_key) = create_gateway(&srv, &k.owner, &["chg"], json!({"tool_policy": "off"}));
    let names = Mcp::open(&srv, &off_gw, &off_key).tool_names(1);
    assert!(has(&names, "exfiltrate") && has(&names, "send_email"), "{names:?}");
    let (strict_gw, strict_key) = create_gateway(&srv, &k.owner, &["chg"], json!({"tool_policy": "approve"}));
    let strict = Mcp::open(&srv, &strict_gw, &strict_key);
    assert!(strict.tool_names(1).is_empty(), "nothing approved yet");
    let pending = changes(&srv, &k.owner, &strict_gw);
    assert_eq!(pending.len(), 4, "{pending:?}");
    assert!(pending.iter().all(|c| c["kind"] == "added"), "{pending:?}");
    let rug = pending.iter().find(|c| c["tool"] == "rug_pull").unwrap()["id"].as_str().unwrap().to_string();
    ok(&decide(&srv, &k.owner, &strict_gw, &rug, "approve", None), 200);
    assert_eq!(strict.tool_names(2), ["rug_pull"]);
}

#[test]
fn approve_and_reject_are_behind_the_mfa_gate() {
    let k = keys();
    let srv = TestServer::start(&format!("{}{}", stdio_app(), k.yaml));
    let (gw, gw_key) = create_gateway(&srv, &k.mfa, &["chg"], json!({"tool_policy": "approve"}));
    assert!(Mcp::open(&srv, &gw, &gw_key).tool_names(1).is_empty(), "nothing approved yet");
    let id = changes(&srv, &k.mfa, &gw)[0]["id"].as_str().unwrap().to_string();
    let e = ok(&srv.api("POST", "/v1/auth/mfa/enroll", Some(&k.mfa), None), 200);
    let t = totp(e["secret"].as_str().unwrap());
    let step = step_now();
    ok(&srv.api("POST", "/v1/auth/mfa/activate", Some(&k.mfa), Some(json!({"code": code_at(&t, step - 1)}))), 200);
    for what in ["approve", "reject"] {
        let e = err(&decide(&srv, &k.mfa, &gw, &id, what, None), 403, "MFA_REQUIRED");
        assert!(e["challenge_id"].is_string(), "{e}");
    }
    let wrong = "mfa_tok_not-a-real-token-0123456789";
    err(&decide(&srv, &k.mfa, &gw, &id, "approve", Some(wrong)), 403, "MFA_REQUIRED");
    assert!(changes(&srv, &k.mfa, &gw).iter().any(|c| c["id"] == id.as_str()), "nothing decided without MFA");

    // Each refusal is audited: who, what, the route, whether a token came (never its value).
    let audit = ok(&srv.api("GET", "/v1/audit?action=mfa.refused", Some(&k.mfa), None), 200);
    let refused = audit["entries"].as_array().unwrap();
    assert_eq!(refused.len(), 3, "{audit}");
    let tokens: Vec<(&str, bool)> = refused
        .iter()
        .map(|e| (e["detail"]["action"].as_str().unwrap(), e["detail"]["mfa_token"].as_bool().unwrap()))
        .collect();
    assert_eq!(tokens, [("tool_change.approve", false), ("tool_change.reject", false), ("tool_change.approve", true)]);
    for e in refused {
        assert_eq!(e["detail"]["outcome"], "mfa_refused", "{e}");
        assert_eq!(e["detail"]["status"], 403, "{e}");
        assert_eq!(e["actor"], json!({"kind": "api_key", "id": "key_gp_mfa"}), "{e}");
        // The target an approval's own entry names: the gateway, under the route's resource.
        assert_eq!(e["target"], json!({"kind": "tool_changes", "id": gw}), "{e}");
        let route = e["detail"]["route"].as_str().unwrap();
        assert!(route.starts_with("POST /v1/gateways/{id}/tool-changes/"), "{e}");
    }
    let r = srv.api("GET", "/v1/audit/export", Some(&k.mfa), None);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(!r.text.contains(wrong), "the token's value is not recorded");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("audit.jsonl");
    std::fs::write(&file, &r.text).unwrap();
    let key = srv.api("GET", "/v1/audit/key", Some(&k.mfa), None);
    let key = key.data()["public_key"].as_str().expect("the checkpoints' public key").to_string();
    let out = crate::audit::verify(&file, &["--public-key", &key], &[]);
    assert!(out.status.success(), "the chain verifies: {}", common::describe_output(&out));
    let r = ok(&decide(&srv, &k.mfa, &gw, &id, "approve", Some(&code_at(&t, step))), 200);
    assert_eq!(r["decision"], "approved");
    assert!(!changes(&srv, &k.mfa, &gw).iter().any(|c| c["id"] == id.as_str()));
}

/// Two instances on the Redis of `redis` (keys under `prefix`), serving the changing server
/// `app` over Streamable HTTP as app `chg`.
pub(crate) fn two_instances(k: &Keys, app: &Peer, redis: &Peer, prefix: &str) -> (TestServer, TestServer) {
    let yaml = format!(
        "environment: development\nserver:\n  listen: 127.0.0.1:0\n  metrics_listen: 127.0.0.2:0\n  public_url: http://localhost:8080\n\
         storage:\n  backend: redis\n  url: {}\n  key_prefix: {prefix}\nmcp:\n  list_deadline_ms: 30000\n\
         apps:\n  - {{ id: chg, name: Changing, category: testing, url: \"http://127.0.0.1:{}/mcp\" }}\n{}",
        common::redis_url(redis),
        app.port,
        k.yaml
    );
    let start = || {
        TestServer::start_opts(ServerOptions {
            full_config: Some(yaml.clone()),
            env: vec![("TOOLGATE_SECRET_KEY".into(), "ef".repeat(32))],
            ..Default::default()
        })
    };
    (start(), start())
}

#[test]
fn an_approval_on_one_instance_is_enforced_on_the_other() {
    let k = keys();
    let app = http_server();
    let redis = common::spawn_redis();
    let prefix = format!("tgpins{}", common::random_alnum(6).to_lowercase());
    let (a, b) = two_instances(&k, &app, &redis, &prefix);
    let (gw, gw_key) = create_gateway(&a, &k.owner, &["chg"], json!({}));
    let on_a = Mcp::open(&a, &gw, &gw_key);
    assert!(has(&on_a.tool_names(1), "send_email"), "pinned on first use");
    result_text(&on_a.call(2, "rug_pull", json!({})));
    until_tools(&on_a, "held back on A", |n| !has(n, "send_email") && has(n, "rug_pull"));

    // B lists the app for the first time now, and enforces the pins A made.
    let on_b = Mcp::open(&b, &gw, &gw_key);
    let names = on_b.tool_names(1);
    assert!(!has(&names, "send_email") && has(&names, "rug_pull"), "{names:?}");
    assert_pending(&on_b.call(2, "send_email", json!({"to": "x@y.test"})), "send_email");
    let list = changes(&b, &k.owner, &gw);
    assert_eq!(list.len(), 1, "one change, seen from B: {list:?}");

    // Approved on A: B serves it once the change reaches it (`FEED_CATCH_UP` bounds the wait,
    // not the promise).
    let id = list[0]["id"].as_str().unwrap();
    ok(&decide(&a, &k.owner, &gw, id, "approve", None), 200);
    common::wait_until("B follows A's approval", common::FEED_CATCH_UP, || has(&on_b.tool_names(3), "send_email"));
    assert_eq!(result_text(&on_b.call(4, "send_email", json!({"to": "x@y.test"}))), "sent to x@y.test");

    // Deleted on B: its pins are gone from Redis.
    let client = redis::Client::open(common::redis_url(&redis)).unwrap();
    let mut conn = client.get_connection().unwrap();
    let mut pin_keys =
        || -> Vec<String> { redis::cmd("KEYS").arg(format!("{prefix}:*:r:tool_pin:*")).query(&mut conn).unwrap() };
    assert!(pin_keys().len() >= 3, "the gateway's pins are in Redis: {:?}", pin_keys());
    ok(&b.api("DELETE", &format!("/v1/gateways/{gw}"), Some(&k.owner), None), 200);
    assert_eq!(pin_keys(), Vec::<String>::new(), "the pins went with their gateway");
    // A learns of the deletion from the feed, like the approval.
    let changes_on_a = || a.api("GET", &format!("/v1/gateways/{gw}/tool-changes"), Some(&k.owner), None);
    common::wait_until("A follows B's deletion", common::FEED_CATCH_UP, || changes_on_a().status == 404);
    err(&changes_on_a(), 404, "NOT_FOUND");
    drop((a, b));
}

/// The tool pins stored for `gateway` (the embedded store's records).
fn stored_pins(srv: &TestServer, gateway: &str) -> usize {
    let db = rusqlite::Connection::open_with_flags(
        srv.data_dir().join("toolgate.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the store");
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    let pattern = format!("%\"gateway_id\":\"{gateway}\"%");
    db.query_row("SELECT count(*) FROM records WHERE kind = 'tool_pin' AND body LIKE ?1", [&pattern], |r| r.get(0))
        .expect("count the pins")
}

/// How many store operations named `operation` the instance has made (its duration
/// histogram's count).
fn store_operations(srv: &TestServer, operation: &str) -> u64 {
    let series = format!("toolgate_store_operation_duration_seconds_count{{operation=\"{operation}\"}} ");
    srv.metrics().lines().find_map(|l| l.strip_prefix(&series)?.parse().ok()).unwrap_or(0)
}

#[test]
fn deleting_a_gateway_deletes_its_pins() {
    let k = keys();
    let srv = TestServer::start(&format!("{}{}", stdio_app(), k.yaml));
    let (gw, gw_key) = create_gateway(&srv, &k.owner, &["chg"], json!({"tool_policy": "approve"}));
    assert!(Mcp::open(&srv, &gw, &gw_key).tool_names(1).is_empty(), "nothing approved yet");
    let list = changes(&srv, &k.owner, &gw);
    let rug = list.iter().find(|c| c["tool"] == "rug_pull").unwrap()["id"].as_str().unwrap().to_string();
    ok(&decide(&srv, &k.owner, &gw, &rug, "approve", None), 200);
    assert_eq!(stored_pins(&srv, &gw), 3, "one pin per tool");

    // In one durable write, whatever the number of pins (one write each once took seconds for
    // a gateway of thousands of tools).
    let batched = store_operations(&srv, "delete_many");
    ok(&srv.api("DELETE", &format!("/v1/gateways/{gw}"), Some(&k.owner), None), 200);
    assert_eq!(stored_pins(&srv, &gw), 0, "the pins went with their gateway");
    assert_eq!(store_operations(&srv, "delete_many"), batched + 1, "the pins are deleted in one write");

    // A new gateway of the same app starts with nothing approved.
    let (fresh, fresh_key) = create_gateway(&srv, &k.owner, &["chg"], json!({"tool_policy": "approve"}));
    assert!(Mcp::open(&srv, &fresh, &fresh_key).tool_names(1).is_empty(), "no approval carried over");
    let pending = changes(&srv, &k.owner, &fresh);
    assert_eq!(pending.len(), 3, "{pending:?}");
    assert!(pending.iter().all(|c| c["kind"] == "added"), "{pending:?}");
}

/// The stdio app of `tests/py/hidden_text_server.py`: per class of hidden text a tool
/// `hide_<class>` whose description and `query` description carry it, and `clean_tool`.
pub(crate) fn hidden_text_app() -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/hidden_text_server.py");
    format!(
        "  - {{ id: hider, name: Hider, category: testing, timeouts: {{ connect_ms: 60000 }}, command: [{:?}, {:?}] }}\n",
        common::python().to_string_lossy(),
        script.to_string_lossy()
    )
}

#[test]
fn hidden_text_under_block_is_a_pending_change_served_stripped_once_approved() {
    let k = keys();
    let srv = TestServer::start(&format!("{}{}{}", hidden_text_app(), stdio_app(), k.yaml));
    let (gw, gw_key) = create_gateway(&srv, &k.owner, &["hider"], json!({"description_policy": "block"}));
    let mcp = Mcp::open(&srv, &gw, &gw_key);
    assert_eq!(mcp.tool_names(1), ["clean_tool"], "the tools with hidden text are pending");

    // A call is the pending error, naming the tool, that it awaits approval, and the finding.
    let body = mcp.call(2, "hide_tag", json!({"query": "q"}));
    assert_pending(&body, "hide_tag");
    let (_, message) = rpc_error(&body);
    assert!(message.contains("its description contains a Unicode tag character (U+E0049)"), "{body}");
    assert!(message.chars().all(|c| !c.is_control() && !('\u{E0000}'..='\u{E007F}').contains(&c)), "{body}");
    let data = &body["error"]["data"];
    assert_eq!(data["reason"], "hidden_text", "{body}");
    let classes: Vec<&str> =
        data["findings"].as_array().unwrap().iter().map(|f| f["class"].as_str().unwrap()).collect();
    assert_eq!(classes, ["tag", "tag"], "the description and the property's: {body}");
    // A prompt under `block` stays withheld as before (pins cover tools).
    let (code, message) = rpc_error(&mcp.rpc(3, "prompts/get", json!({"name": "hide_tag"})));
    assert_eq!(code, -32602, "{message}");
    assert!(message.starts_with("prompt `hide_tag` is withheld"), "{message}");

    // Each is listed as a `hidden_text` change, with its classes and findings.
    let list = changes(&srv, &k.owner, &gw);
    assert_eq!(list.len(), 7, "one per class: {list:?}");
    for c in &list {
        assert_eq!(c["kind"], "hidden_text", "{c}");
        let class = c["tool"].as_str().unwrap().strip_prefix("hide_").unwrap();
        assert_eq!(c["classes"], json!([class]), "{c}");
        let findings = c["findings"].as_array().unwrap();
        assert!(findings.len() == 2 && findings[0].as_str().unwrap().starts_with("its description contains"), "{c}");
        assert!(findings[1].as_str().unwrap().starts_with("its inputSchema.properties.query.description contains"));
        assert!(c["diff"]["description"]["new"].is_string() && c["diff"]["description"]["old"].is_null(), "{c}");
    }
    let line = "toolgate_tool_changes_total{kind=\"hidden_text\"} 7";
    assert!(srv.metrics().contains(line), "{line}");
    let id = |tool: &str| list.iter().find(|c| c["tool"] == tool).unwrap()["id"].as_str().unwrap().to_string();

    // Approved: listed and callable, stripped of its hidden text; the decision is audited.
    ok(&decide(&srv, &k.owner, &gw, &id("hide_tag"), "approve", None), 200);
    let listed = mcp.rpc(4, "tools/list", json!({}));
    let tool = listed["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "hide_tag").cloned();
    let tool = tool.unwrap_or_else(|| panic!("hide_tag is served once approved: {listed}"));
    assert_eq!(tool["description"], "Tool for tag. Use it.", "{tool}");
    assert_eq!(tool["inputSchema"]["properties"]["query"]["description"], "The query. Plain.", "{tool}");
    assert_eq!(result_text(&mcp.call(5, "hide_tag", json!({"query": "q"}))), "tag: q");
    let audit = ok(&srv.api("GET", "/v1/audit?action=tool_change.approve", Some(&k.owner), None), 200);
    assert_eq!(audit["entries"].as_array().map(Vec::len), Some(1), "{audit}");

    // Rejected: stays hidden; the refusal still names the finding.
    ok(&decide(&srv, &k.owner, &gw, &id("hide_bidi"), "reject", None), 200);
    let body = mcp.call(6, "hide_bidi", json!({"query": "q"}));
    assert_pending(&body, "hide_bidi");
    assert_eq!(body["error"]["data"]["reason"], "rejected", "{body}");
    assert!(rpc_error(&body).1.contains("a bidirectional control (U+202E)"), "{body}");
    let names = mcp.tool_names(7);
    assert!(has(&names, "hide_tag") && !has(&names, "hide_bidi"), "{names:?}");
    assert_eq!(changes(&srv, &k.owner, &gw).len(), 5);

    // Without pins, `block` withholds as before.
    let (off_gw, off_key) =
        create_gateway(&srv, &k.owner, &["hider"], json!({"description_policy": "block", "tool_policy": "off"}));
    let off = Mcp::open(&srv, &off_gw, &off_key);
    assert_eq!(off.tool_names(1), ["clean_tool"]);
    let (code, message) = rpc_error(&off.call(2, "hide_tag", json!({"query": "q"})));
    assert_eq!(code, -32602, "{message}");
    assert!(message.starts_with("tool `hide_tag` is withheld: its description contains"), "{message}");
    assert!(changes(&srv, &k.owner, &off_gw).is_empty());
    // And under `strip` a pinned gateway serves them stripped, pinned on first use.
    let (strip_gw, strip_key) = create_gateway(&srv, &k.owner, &["hider"], json!({}));
    assert_eq!(Mcp::open(&srv, &strip_gw, &strip_key).tool_names(1).len(), 8);
    assert!(changes(&srv, &k.owner, &strip_gw).is_empty());
}
