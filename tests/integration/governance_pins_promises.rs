//! Promises of `docs/governance.md` about pinned tool definitions that had no test of their own
//! (issue 57, item 13), against the real binary: the process-log line of a pending change; a
//! gateway stored before `tool_policy` existed reads as `off`; a pin made under `strip` stays
//! approved under `block`; two instances that see the same change at once record the same
//! pending change.

use crate::common::mcp::{result_text, Mcp};
use crate::common::{self, ok, TestServer};
use crate::governance_pins::{
    changes, create_gateway, has, hidden_text_app, http_server, keys, stdio_app, two_instances, until_tools,
};
use crate::records_versions::rewrite;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

const AWAITS: &str = "a tool definition awaits approval";

/// The fields of each JSON line of `srv`'s process log whose message is `message`.
fn logged(srv: &TestServer, message: &str) -> Vec<Value> {
    srv.stderr()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| if v["fields"].is_object() { v["fields"].clone() } else { v })
        .filter(|f| f["message"] == message)
        .collect()
}

/// The ids of the pending changes of `gw`, as instance `srv` lists them.
fn change_ids(srv: &TestServer, key: &str, gw: &str) -> BTreeSet<String> {
    changes(srv, key, gw).iter().map(|c| c["id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_pending_change_has_one_process_log_line_naming_it() {
    let k = keys();
    let srv = TestServer::start(&format!("{}{}", stdio_app(), k.yaml));
    let (gw, gw_key) = create_gateway(&srv, &k.owner, &["chg"], json!({"tool_policy": "approve"}));
    assert!(Mcp::open(&srv, &gw, &gw_key).tool_names(1).is_empty(), "nothing approved yet");
    let list = changes(&srv, &k.owner, &gw);
    assert_eq!(list.len(), 3, "{list:?}");
    // The line is written once the change is stored (the list above read it back): wait for the
    // log file to have all three.
    common::wait_until("a log line per pending change", Duration::from_secs(10), || logged(&srv, AWAITS).len() >= 3);
    let lines = logged(&srv, AWAITS);
    assert_eq!(lines.len(), 3, "one line per pending change: {lines:?}");
    for c in &list {
        let line = lines.iter().find(|l| l["change"] == c["id"]).unwrap_or_else(|| panic!("{c} in {lines:?}"));
        assert_eq!(line["gateway"], gw.as_str(), "{line}");
        assert_eq!(line["app"], "chg", "{line}");
        assert_eq!(line["tool"], c["tool"], "{line}");
        assert_eq!(line["kind"], "added", "{line}");
    }
}

#[test]
fn a_gateway_stored_before_tool_policy_existed_reads_as_off() {
    let k = keys();
    let mut srv = TestServer::start(&format!("{}{}", stdio_app(), k.yaml));
    let (gw, gw_key) = create_gateway(&srv, &k.owner, &["chg"], json!({}));
    let detail = ok(&srv.api("GET", &format!("/v1/gateways/{gw}"), Some(&k.owner), None), 200);
    assert_eq!(detail["configuration"]["tool_policy"], "pin", "{detail}");
    // The record as a toolgate before tool pinning wrote it: no `tool_policy` at all.
    srv.sigterm();
    let body = rewrite(&srv, &gw, |b| {
        b["configuration"].as_object_mut().expect("configuration").remove("tool_policy").expect("stored tool_policy");
    });
    assert!(!body.contains("tool_policy"), "{body}");
    srv.restart();

    let detail = ok(&srv.api("GET", &format!("/v1/gateways/{gw}"), Some(&k.owner), None), 200);
    assert_eq!(detail["configuration"]["tool_policy"], "off", "{detail}");
    // And it behaves so: a rug pull and an added tool are served as the app lists them.
    let mcp = Mcp::open(&srv, &gw, &gw_key);
    assert!(has(&mcp.tool_names(1), "send_email"));
    result_text(&mcp.call(2, "rug_pull", json!({})));
    result_text(&mcp.call(3, "add_tool", json!({})));
    until_tools(&mcp, "the changed and the added tool are served", |n| has(n, "exfiltrate"));
    let listed = mcp.rpc(4, "tools/list", json!({}));
    let send = listed["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "send_email").cloned();
    assert!(send.unwrap_or_default()["description"].as_str().unwrap_or_default().contains("BCC"), "{listed}");
    assert!(changes(&srv, &k.owner, &gw).is_empty(), "nothing pending under off");
}

#[test]
fn a_pin_made_under_strip_stays_approved_under_block() {
    let k = keys();
    // The Python app's first list is given time on a busy machine (as `stdio_app` does).
    let srv = TestServer::start(&format!("{}mcp:\n  list_deadline_ms: 30000\n{}", hidden_text_app(), k.yaml));
    // `pin` and `strip` (the defaults): the first list is pinned, hidden text and all.
    let (gw, gw_key) = create_gateway(&srv, &k.owner, &["hider"], json!({}));
    let mcp = Mcp::open(&srv, &gw, &gw_key);
    assert_eq!(mcp.tool_names(1).len(), 8, "every tool pinned on first use");
    assert!(changes(&srv, &k.owner, &gw).is_empty());

    let patch = json!({"configuration": {"tool_policy": "pin", "description_policy": "block"}});
    let d = ok(&srv.api("PATCH", &format!("/v1/gateways/{gw}"), Some(&k.owner), Some(patch)), 200);
    assert_eq!(d["configuration"]["description_policy"], "block", "{d}");
    // Still approved: listed, callable, served stripped; nothing became pending.
    let listed = mcp.rpc(2, "tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(tools.len(), 8, "{listed}");
    let tag = tools.iter().find(|t| t["name"] == "hide_tag").unwrap_or_else(|| panic!("hide_tag in {listed}"));
    assert_eq!(tag["description"], "Tool for tag. Use it.", "served stripped: {tag}");
    assert_eq!(result_text(&mcp.call(3, "hide_tag", json!({"query": "q"}))), "tag: q");
    assert!(changes(&srv, &k.owner, &gw).is_empty(), "the pins made under strip hold under block");
    // The control: a gateway made under `block` holds the same tools back.
    let (fresh, fresh_key) =
        create_gateway(&srv, &k.owner, &["hider"], json!({"tool_policy": "pin", "description_policy": "block"}));
    assert_eq!(Mcp::open(&srv, &fresh, &fresh_key).tool_names(1), ["clean_tool"]);
    assert_eq!(changes(&srv, &k.owner, &fresh).len(), 7);
}

#[test]
fn two_instances_seeing_the_same_change_record_the_same_pending_change() {
    let k = keys();
    let app = http_server();
    let redis = common::spawn_redis();
    let prefix = format!("tgsame{}", common::random_alnum(6).to_lowercase());
    let (a, b) = two_instances(&k, &app, &redis, &prefix);
    let (gw, gw_key) = create_gateway(&a, &k.owner, &["chg"], json!({"tool_policy": "approve"}));
    let on_b = || b.api("GET", &format!("/v1/gateways/{gw}"), Some(&k.owner), None).status == 200;
    common::wait_until("B follows the gateway made on A", common::FEED_CATCH_UP, on_b);
    // Both build the gateway's catalogue at once: each finds the three tools unapproved.
    let (on_a, on_b) = std::thread::scope(|s| {
        let on_a = s.spawn(|| Mcp::open(&a, &gw, &gw_key).tool_names(1));
        let on_b = s.spawn(|| Mcp::open(&b, &gw, &gw_key).tool_names(1));
        (on_a.join().unwrap(), on_b.join().unwrap())
    });
    assert!(on_a.is_empty() && on_b.is_empty(), "{on_a:?} {on_b:?}");
    let ids = change_ids(&a, &k.owner, &gw);
    assert_eq!(ids.len(), 3, "one pending change per tool: {ids:?}");
    assert_eq!(change_ids(&b, &k.owner, &gw), ids, "both instances list the same changes");
    // What each instance recorded (its process-log line) is one of those: had an instance made
    // its own id, the other's line would name a change nobody can approve.
    // (Which instance records first is a race; the one that does logs its lines.)
    common::wait_until("the recording's log lines", Duration::from_secs(10), || {
        logged(&a, AWAITS).len() + logged(&b, AWAITS).len() >= 3
    });
    for srv in [&a, &b] {
        for line in logged(srv, AWAITS) {
            let id = line["change"].as_str().unwrap_or_default();
            assert!(ids.contains(id), "{line} names a change not listed: {ids:?}");
        }
    }
    // Any of them is approved from either instance.
    let first = ids.iter().next().unwrap();
    ok(&crate::governance_pins::decide(&b, &k.owner, &gw, first, "approve", None), 200);
    assert_eq!(change_ids(&a, &k.owner, &gw).len(), 2);
}
