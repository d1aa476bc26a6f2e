//! Pins cover a tool's `_meta` and `icons` (issue 55, item 6; `docs/governance.md`), against the
//! real binary and an MCP Apps tool on the official Python SDK (`tests/py/app_meta_server.py`)
//! whose `_meta.ui.resourceUri` (the page a client renders for it) and then its icon change
//! while its name, description and schema stay: each change makes the tool pending, with the
//! field in the change's diff, until it is approved.

use crate::common::mcp::{result_text, Mcp};
use crate::common::{self, ok, TestServer};
use crate::governance_pins::{assert_pending, create_gateway, has, until_tools};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn server() -> (TestServer, String) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/app_meta_server.py");
    let (key, key_yaml) = common::declared_key("key_pm_owner", "usr_pm", &["*"]);
    let srv = TestServer::start(&format!(
        "  - {{ id: meta, name: Meta, category: testing, timeouts: {{ connect_ms: 60000 }}, command: [{:?}, {:?}] }}\n\
         mcp:\n  list_deadline_ms: 30000\n\
         organizations:\n  - {{ id: org_pm, name: Meta, tier: enterprise }}\n\
         users:\n  - {{ id: usr_pm, email: pm@meta.test, name: Pm, role: owner, organization: org_pm }}\n\
         api_keys:\n{key_yaml}",
        common::python().to_string_lossy(),
        script.to_string_lossy()
    ));
    (srv, key)
}

fn show_invoice(mcp: &Mcp, id: u64) -> Value {
    let body = mcp.rpc(id, "tools/list", json!({}));
    let tools = body["result"]["tools"].as_array().unwrap_or_else(|| panic!("{body}"));
    tools.iter().find(|t| t["name"] == "show_invoice").cloned().unwrap_or_else(|| panic!("show_invoice: {body}"))
}

/// The one pending change of `show_invoice`, once it is recorded (waits up to 10 s).
fn the_change(srv: &TestServer, key: &str, gw: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    let (d, list) = loop {
        let d = ok(&srv.api("GET", &format!("/v1/gateways/{gw}/tool-changes"), Some(key), None), 200);
        let list = d["tool_changes"].as_array().unwrap_or_else(|| panic!("{d}")).clone();
        if !list.is_empty() || Instant::now() > deadline {
            break (d, list);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(list.len(), 1, "{d}");
    assert_eq!((&list[0]["tool"], &list[0]["kind"]), (&json!("show_invoice"), &json!("changed")), "{d}");
    list[0].clone()
}

fn approve(srv: &TestServer, key: &str, gw: &str, change: &Value) {
    let id = change["id"].as_str().unwrap();
    ok(&srv.api("POST", &format!("/v1/gateways/{gw}/tool-changes/{id}/approve"), Some(key), None), 200);
}

#[test]
fn a_changed_meta_ui_resource_uri_or_icon_makes_the_tool_pending() {
    let (srv, key) = server();
    let (gw, gw_key) = create_gateway(&srv, &key, &["meta"], json!({}));
    let mcp = Mcp::open(&srv, &gw, &gw_key);
    let tool = show_invoice(&mcp, 1);
    assert_eq!(tool["_meta"]["ui"]["resourceUri"], "ui://invoice/v1", "{tool}");
    assert_eq!(result_text(&mcp.call(2, "show_invoice", json!({"number": "7"}))), "invoice 7");

    // The page behind the tool moves: the tool is held back, the diff shows `_meta`.
    result_text(&mcp.call(3, "repoint", json!({})));
    until_tools(&mcp, "show_invoice is held back", |n| !has(n, "show_invoice") && has(n, "repoint"));
    assert_pending(&mcp.call(4, "show_invoice", json!({"number": "7"})), "show_invoice");
    let change = the_change(&srv, &key, &gw);
    assert_eq!(change["diff"]["_meta"]["old"]["ui"]["resourceUri"], "ui://invoice/v1", "{change}");
    assert_eq!(change["diff"]["_meta"]["new"]["ui"]["resourceUri"], "ui://invoice/phish", "{change}");
    assert!(change["diff"].get("description").is_none(), "only `_meta` changed: {change}");
    approve(&srv, &key, &gw, &change);
    until_tools(&mcp, "show_invoice is served once approved", |n| has(n, "show_invoice"));
    assert_eq!(show_invoice(&mcp, 5)["_meta"]["ui"]["resourceUri"], "ui://invoice/phish");

    // Its icon changes: held back again, the diff shows `icons`.
    result_text(&mcp.call(6, "reicon", json!({})));
    until_tools(&mcp, "show_invoice is held back again", |n| !has(n, "show_invoice"));
    let change = the_change(&srv, &key, &gw);
    assert_eq!(change["diff"]["icons"]["new"][0]["src"], "https://icons.example/other.png", "{change}");
    assert!(change["diff"].get("_meta").is_none(), "only `icons` changed: {change}");
}
