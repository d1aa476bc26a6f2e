//! Shaped tools under pins and the MFA gate (issue 61, part A): a gateway's `tool_overrides`
//! rename and redescribe a pinned tool; setting or changing them is a protected action, audited
//! before and after; a rug pull of the app's tool behind an alias is still held back, the call of
//! the alias told so, and the review shows the app's old and new text beside the override.
//! Against the real binary and the changing MCP server of `governance_pins.rs`.

use crate::api_mfa::mfa_on;
use crate::common::mcp::{result_text, Mcp};
use crate::common::*;
use crate::governance_pins::{assert_pending, changes, has, keys, stdio_app, until_tools};
use serde_json::{json, Value};
use std::time::Duration;

fn patch(srv: &TestServer, k: &str, gw: &str, body: Value, mfa: Option<&str>) -> Resp {
    let headers: Vec<(&str, &str)> = mfa.map(|m| vec![("x-mfa-token", m)]).unwrap_or_default();
    srv.request("PATCH", &format!("/v1/gateways/{gw}"), Some(k), Some(body), &headers)
}

#[test]
fn a_shaped_tool_is_pinned_gated_and_reviewed_beside_its_override() {
    let k = keys();
    let srv = TestServer::start(&format!("{}{}", stdio_app(), k.yaml));
    let shaped = json!([{ "tool": "send_email", "name": "mail", "description": "Sends mail for the team." }]);
    let body = json!({ "name": format!("shaped-{}", random_alnum(8)), "servers": ["chg"], "tool_overrides": shaped });
    let (gw, gw_key) = crate::common::mcp::create_gateway(&srv, &k.owner, body);
    let mcp = Mcp::open(&srv, &gw, &gw_key);
    let names = mcp.tool_names(1);
    assert!(has(&names, "mail") && !has(&names, "send_email"), "{names:?}");
    assert_eq!(result_text(&mcp.call(2, "mail", json!({ "to": "a@b.test" }))), "sent to a@b.test");

    // Changing the override is a protected action: refused without the code, made with it.
    let (_, backup) = mfa_on(&srv, &k.owner);
    let changed = json!([{ "tool": "send_email", "name": "mail", "description": "Mails someone." }]);
    err(&patch(&srv, &k.owner, &gw, json!({ "tool_overrides": changed }), None), 403, "MFA_REQUIRED");
    let detail = ok(&srv.api("GET", &format!("/v1/gateways/{gw}"), Some(&k.owner), None), 200);
    assert_eq!(detail["tool_overrides"], shaped, "changed without the code: {detail}");
    let made = ok(&patch(&srv, &k.owner, &gw, json!({ "tool_overrides": changed }), Some(&backup[0])), 200);
    assert_eq!(made["tool_overrides"], changed, "{made}");
    let page = ok(&srv.api("GET", "/v1/audit?action=gateway.update&limit=100", Some(&k.owner), None), 200);
    let entry = page["entries"].as_array().unwrap().iter().find(|e| e["target"]["id"] == gw).cloned();
    let guards = entry.unwrap_or_else(|| panic!("no gateway.update entry: {page}"))["detail"]["guards"].clone();
    assert_eq!(guards["before"]["tool_overrides"], shaped, "{guards}");
    assert_eq!(guards["after"]["tool_overrides"], changed, "{guards}");
    assert_eq!(guards["loosened"], json!(["tool_overrides"]), "{guards}");

    // The app's definition is still pinned: a rug pull holds the alias back, and the review
    // shows the app's text beside the override.
    result_text(&mcp.call(3, "rug_pull", json!({})));
    until_tools(&mcp, "mail is held back", |n| !has(n, "mail") && has(n, "rug_pull"));
    assert_pending(&mcp.call(4, "mail", json!({ "to": "a@b.test" })), "mail");
    let mut list = Vec::new();
    wait_until("the pending change", Duration::from_secs(10), || {
        list = changes(&srv, &k.owner, &gw);
        !list.is_empty()
    });
    let change = &list[0];
    assert_eq!((change["tool"].as_str(), change["kind"].as_str()), (Some("send_email"), Some("changed")), "{change}");
    assert_eq!(change["diff"]["description"]["old"], "Sends an e-mail.", "{change}");
    assert!(change["diff"]["description"]["new"].as_str().unwrap().contains("BCC"), "{change}");
    assert_eq!(change["override"], changed[0], "{change}");
}
