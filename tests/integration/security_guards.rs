//! A gateway's guards are protected actions (issue 54, item 8): with MFA on, a change that
//! loosens one (`tool_policy` lowered, `description_policy` from `block` to `strip`, rules
//! removed, `allowed_tools` widened) is refused without a code, exactly as approving a tool
//! change is, so a stolen key cannot serve the rug-pulled tool by switching pins off; with the
//! code it is made, and its audit entry shows the guards before and after. Tightening needs no
//! code. Against the real binary and the changing MCP server of `governance_pins.rs`.

use crate::api_mfa::mfa_on;
use crate::common::mcp::{result_text, Mcp};
use crate::common::*;
use crate::governance_pins::{assert_pending, create_gateway, has, stdio_app, until_tools};
use serde_json::{json, Value};
use std::sync::OnceLock;

struct Fx {
    srv: TestServer,
    /// A `*` key of each Owner of `org_ng` (one per test: MFA is per user).
    table: String,
    rug: String,
}

fn fx() -> &'static Fx {
    static FX: OnceLock<Fx> = OnceLock::new();
    FX.get_or_init(|| {
        let (table, y1) = declared_key("key_ng_table", "usr_ng_table", &["*"]);
        let (rug, y2) = declared_key("key_ng_rug", "usr_ng_rug", &["*"]);
        let srv = TestServer::start(&format!(
            "{}organizations:\n  - {{ id: org_ng, name: Guards, tier: enterprise }}\n\
             users:\n  - {{ id: usr_ng_table, email: table@ng.test, name: Table, role: owner, organization: org_ng }}\n\
             \x20 - {{ id: usr_ng_rug, email: rug@ng.test, name: Rug, role: owner, organization: org_ng }}\n\
             api_keys:\n{y1}{y2}",
            stdio_app()
        ));
        reap_on_exit(&srv);
        Fx { srv, table, rug }
    })
}

fn patch(k: &str, gw: &str, body: Value, mfa: Option<&str>) -> Resp {
    let headers: Vec<(&str, &str)> = mfa.map(|m| vec![("x-mfa-token", m)]).unwrap_or_default();
    fx().srv.request("PATCH", &format!("/v1/gateways/{gw}"), Some(k), Some(body), &headers)
}

fn detail(k: &str, gw: &str) -> Value {
    ok(&fx().srv.api("GET", &format!("/v1/gateways/{gw}"), Some(k), None), 200)
}

/// The `detail` of the `action` entries of gateway `gw`, in chain order.
fn entries(k: &str, action: &str, gw: &str) -> Vec<Value> {
    let page = ok(&fx().srv.api("GET", &format!("/v1/audit?action={action}&limit=100"), Some(k), None), 200);
    let of_gw = page["entries"].as_array().unwrap().iter().filter(|e| e["target"]["id"] == gw);
    of_gw.map(|e| e["detail"].clone()).collect()
}

fn deny(name: &str, when: &str) -> Value {
    json!({ "name": name, "effect": "deny", "when": when })
}

#[test]
fn each_loosening_change_asks_for_the_code_and_is_audited_before_and_after() {
    let k = fx().table.as_str();
    let rules = json!([deny("no-mail-to-prod", "has(args.to) && args.to.endsWith(\"@prod.test\")")]);
    let body = json!({
        "name": format!("guards-{}", random_alnum(8)), "servers": ["chg"],
        "allowed_tools": { "chg": ["send_email", "rug_pull"] },
        "configuration": { "tool_policy": "approve", "description_policy": "block" },
        "rules": rules,
    });
    let gw = ok(&fx().srv.api("POST", "/v1/gateways", Some(k), Some(body)), 201)["id"].as_str().unwrap().to_string();
    let (_, backup) = mfa_on(&fx().srv, k);

    // (change, where it shows in the gateway, its value before, after)
    let loosening = [
        (
            json!({ "configuration": { "tool_policy": "pin" } }),
            "/configuration/tool_policy",
            json!("approve"),
            json!("pin"),
        ),
        (
            json!({ "configuration": { "tool_policy": "off" } }),
            "/configuration/tool_policy",
            json!("pin"),
            json!("off"),
        ),
        (
            json!({ "configuration": { "description_policy": "strip" } }),
            "/configuration/description_policy",
            json!("block"),
            json!("strip"),
        ),
        (json!({ "rules": [] }), "/rules", rules.clone(), json!([])),
        (
            json!({ "allowed_tools": { "chg": ["send_email", "rug_pull", "add_tool"] } }),
            "/allowed_tools/chg",
            json!(["send_email", "rug_pull"]),
            json!(["send_email", "rug_pull", "add_tool"]),
        ),
        (
            json!({ "allowed_tools": {} }),
            "/allowed_tools/chg",
            json!(["send_email", "rug_pull", "add_tool"]),
            Value::Null,
        ),
    ];
    for (i, (change, at, was, is)) in loosening.iter().enumerate() {
        let e = err(&patch(k, &gw, change.clone(), None), 403, "MFA_REQUIRED");
        assert!(e["challenge_id"].as_str().is_some_and(|c| !c.is_empty()), "{change}: {e}");
        assert_eq!(
            detail(k, &gw).pointer(at).cloned().unwrap_or(Value::Null),
            *was,
            "{change} was made without the code"
        );
        let made = ok(&patch(k, &gw, change.clone(), Some(&backup[i])), 200);
        assert_eq!(made.pointer(at).cloned().unwrap_or(Value::Null), *is, "{change}: {made}");
    }
    let refused = entries(k, "mfa.refused", &gw);
    assert_eq!(refused.len(), loosening.len(), "each refusal is audited: {refused:?}");
    assert!(refused.iter().all(|d| d["action"] == "gateway.update"), "{refused:?}");

    // Each made change's entry: the guard before and after, loosened, with the code.
    let made = entries(k, "gateway.update", &gw);
    assert_eq!(made.len(), loosening.len(), "{made:?}");
    let tool_policy = &made[1]["guards"];
    assert_eq!(tool_policy["before"], json!({ "configuration.tool_policy": "pin" }), "{tool_policy}");
    assert_eq!(tool_policy["after"], json!({ "configuration.tool_policy": "off" }), "{tool_policy}");
    assert_eq!(tool_policy["loosened"], json!(["configuration.tool_policy"]), "{tool_policy}");
    assert_eq!((made[1]["mfa"].as_str(), made[1]["mfa_token"].as_bool()), (Some("when"), Some(true)), "{}", made[1]);
    assert_eq!(made[3]["guards"]["before"]["rules"], rules, "{}", made[3]);
    assert_eq!(made[3]["guards"]["after"]["rules"], json!([]), "{}", made[3]);
    assert_eq!(made[5]["guards"]["after"]["allowed_tools"], json!({ "chg": "*" }), "{}", made[5]);

    // Tightening every guard at once, and changing what guards nothing, need no code.
    let tighter = json!({
        "allowed_tools": { "chg": ["send_email"] }, "rules": rules,
        "configuration": { "tool_policy": "approve", "description_policy": "block" },
    });
    let d = ok(&patch(k, &gw, tighter, None), 200);
    assert_eq!((&d["configuration"]["tool_policy"], &d["rules"]), (&json!("approve"), &rules), "{d}");
    ok(
        &patch(
            k,
            &gw,
            json!({ "name": format!("renamed-{}", random_alnum(6)), "configuration": { "cache_ttl": 60 } }),
            None,
        ),
        200,
    );
    let all = entries(k, "gateway.update", &gw);
    let (tightened, renamed) = (&all[all.len() - 2]["guards"], &all[all.len() - 1]);
    assert_eq!(tightened["loosened"], json!([]), "{tightened}");
    assert_eq!(tightened["before"]["configuration.tool_policy"], "off", "{tightened}");
    assert_eq!(tightened["after"]["allowed_tools"], json!({ "chg": ["send_email"] }), "{tightened}");
    assert!(renamed.get("guards").is_none(), "no guard changed: {renamed}");
}

#[test]
fn switching_pins_off_without_the_code_does_not_serve_the_rug_pulled_tool() {
    let srv = &fx().srv;
    let k = fx().rug.as_str();
    let (gw, gw_key) = create_gateway(srv, k, &["chg"], json!({}));
    let mcp = Mcp::open(srv, &gw, &gw_key);
    assert!(has(&mcp.tool_names(1), "send_email"), "pinned on first use");
    result_text(&mcp.call(2, "rug_pull", json!({})));
    until_tools(&mcp, "send_email is held back", |n| !has(n, "send_email") && has(n, "rug_pull"));
    let (_, backup) = mfa_on(srv, k);

    err(&patch(k, &gw, json!({ "configuration": { "tool_policy": "off" } }), None), 403, "MFA_REQUIRED");
    assert_pending(&mcp.call(3, "send_email", json!({ "to": "a@b.test" })), "send_email");
    assert!(!has(&mcp.tool_names(4), "send_email"), "the poisoned definition is listed");

    // With the code, it is the admin's decision.
    ok(&patch(k, &gw, json!({ "configuration": { "tool_policy": "off" } }), Some(&backup[0])), 200);
    until_tools(&mcp, "served once pins are off", |n| has(n, "send_email"));
    assert_eq!(result_text(&mcp.call(5, "send_email", json!({ "to": "a@b.test" }))), "sent to a@b.test");
}
