use super::*;
use crate::data::model::{Redact, RedactMode};
use crate::mcp::jsonrpc::Id;

/// The check of a call on a gateway of these settings.
fn check_of(gw: &Gateway, method: &str, tool: Option<&str>) -> Option<Arc<ContentCheck>> {
    ContentCheck::for_call(&Arc::new(gw.clone()), method, tool)
}

fn gateway(policy: ContentPolicy) -> Gateway {
    let mut gw: Gateway = serde_json::from_value(json!({
        "id": "gw_1", "org_id": "org_1", "name": "g", "description": "", "servers": [],
        "allowed_tools": {}, "configuration": { "rate_limit": 10, "cache_ttl": 1, "cache_enabled": true },
        "status": "active", "access_key_id": "key_1",
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"
    }))
    .expect("a gateway");
    gw.configuration.content_policy = policy;
    gw
}

fn result(v: Value) -> Response {
    Response::success(Id::from(1u64), v)
}

fn checked(gw: &Gateway, method: &str, r: Response) -> Response {
    check_of(gw, method, Some("t")).expect("a check").response(r)
}

#[test]
fn plain_json_is_what_needs_no_look() {
    assert!(plain_json(r#"{"content":[{"type":"text","text":"a \"quoted\" line\nand a tab\t"}]}"#));
    assert!(!plain_json(r#"{"text":"zero\u200bwidth"}"#), "an escape can spell a hidden character");
    assert!(!plain_json(r#"{"text":"bell\b"}"#));
    assert!(!plain_json("{\"text\":\"café\"}"), "anything not ASCII is looked at");
}

#[test]
fn printable_ascii_passes_untouched_without_a_parse() {
    let gw = gateway(ContentPolicy::Strip);
    let r = result(json!({"content": [{"type": "text", "text": "hello"}]}));
    let before = r.outcome.as_ref().unwrap().get().as_ptr();
    let after = checked(&gw, "tools/call", r);
    assert_eq!(after.outcome.as_ref().unwrap().get().as_ptr(), before, "the same text, not a copy");
}

#[test]
fn hidden_text_is_stripped_everywhere_a_model_reads_and_honest_text_is_kept() {
    let gw = gateway(ContentPolicy::Strip);
    let r = result(json!({
        "content": [
            {"type": "text", "text": "pay\u{E0041}\u{E0042} now"},
            {"type": "resource_link", "uri": "file:///a", "name": "a\u{200B}b", "description": "d\u{202E}x"},
            {"type": "resource", "resource": {"uri": "file:///b", "text": "t\u{1B}[31mred"}},
            {"type": "text", "text": "honest: 👩‍👩‍👧 🇫🇷 ❤️ नमस्ते مرحبا"}
        ],
        "structuredContent": {"deep": [{"note": "x\u{2060}y"}]}
    }));
    let out = checked(&gw, "tools/call", r).outcome.unwrap().to_value();
    assert_eq!(out["content"][0]["text"], "pay now");
    assert_eq!(out["content"][1]["name"], "ab");
    assert_eq!(out["content"][1]["description"], "dx");
    assert_eq!(out["content"][2]["resource"]["text"], "tred");
    assert_eq!(out["content"][3]["text"], "honest: 👩‍👩‍👧 🇫🇷 ❤️ नमस्ते مرحبا");
    assert_eq!(out["structuredContent"]["deep"][0]["note"], "xy");
}

#[test]
fn honest_text_alone_passes_byte_for_byte() {
    let gw = gateway(ContentPolicy::Block);
    let r = result(json!({"content": [{"type": "text", "text": "Grüße, 你好, שלום 👍🏽"}]}));
    let text = r.outcome.as_ref().unwrap().get().to_string();
    let out = checked(&gw, "tools/call", r);
    assert_eq!(out.outcome.unwrap().get(), text);
}

#[test]
fn an_identifier_with_hidden_text_blocks_even_under_strip() {
    let gw = gateway(ContentPolicy::Strip);
    let r = result(json!({"content": [], "_meta": {"taskId": "t\u{200B}1"}}));
    let e = checked(&gw, "tools/call", r).outcome.unwrap_err();
    assert_eq!(e.code, RpcCode::ContentRefused.code());
    assert_eq!(e.data.as_ref().unwrap()["class"], "zero_width");
    assert_eq!(e.data.as_ref().unwrap()["tool_ran"], true);
    assert!(e.message.contains("the tool ran"), "{}", e.message);
}

#[test]
fn block_replaces_the_answer_and_says_where() {
    let gw = gateway(ContentPolicy::Block);
    let r = result(json!({"messages": [{"role": "user", "content": {"type": "text", "text": "a\u{E0001}"}}]}));
    let e = checked(&gw, "prompts/get", r).outcome.unwrap_err();
    assert_eq!(e.data.as_ref().unwrap()["where"], "prompt");
    assert_eq!(e.data.as_ref().unwrap()["tool_ran"], false);
    assert!(e.message.contains("messages[0].content.text"), "{}", e.message);
}

#[test]
fn log_reports_and_passes_unchanged() {
    let gw = gateway(ContentPolicy::Log);
    let check = check_of(&gw, "resources/read", None).unwrap();
    let r = result(json!({"contents": [{"uri": "u", "text": "a\u{200B}b"}]}));
    let text = r.outcome.as_ref().unwrap().get().to_string();
    assert_eq!(check.response(r).outcome.unwrap().get(), text);
    let marks = check.marks().unwrap();
    assert_eq!(marks[0]["where"], "resource");
    assert_eq!(marks[0]["hidden_text"][0]["action"], "logged");
}

#[test]
fn errors_are_checked_too() {
    let gw = gateway(ContentPolicy::Strip);
    let check = check_of(&gw, "tools/call", None).unwrap();
    let r = Response::error(Id::from(1u64), RpcErrorObject::new(-32000, "failed\u{E0049}"));
    assert_eq!(check.response(r).outcome.unwrap_err().message, "failed");
    let r = result(json!({"isError": true, "content": [{"type": "text", "text": "bad\u{200B}"}]}));
    check.response(r);
    assert_eq!(check.marks().unwrap()[1]["where"], "error");
}

#[test]
fn a_result_over_its_bound_is_refused_saying_the_tool_ran() {
    let mut gw = gateway(ContentPolicy::Off);
    gw.configuration.max_result_bytes = Some(1000);
    gw.configuration.max_result_bytes_by_tool.insert("big".into(), 10_000);
    let long = result(json!({"content": [{"type": "text", "text": "x".repeat(2000)}]}));
    let e = check_of(&gw, "tools/call", Some("t")).unwrap().response(long.clone()).outcome.unwrap_err();
    assert_eq!(e.data.as_ref().unwrap()["reason"], "too_large");
    assert!(e.message.contains("the tool ran") && e.message.contains("1000 bytes"), "{}", e.message);
    let fine = check_of(&gw, "tools/call", Some("big")).unwrap().response(long);
    assert!(fine.outcome.is_ok(), "the tool's own bound");
    assert!(check_of(&gateway(ContentPolicy::Off), "tools/call", None).is_none(), "nothing to check");
}

#[test]
fn secrets_are_redacted_unless_the_tool_is_exempt_or_only_logged() {
    let mut gw = gateway(ContentPolicy::Strip);
    gw.configuration.redact =
        Redact { detectors: vec!["secrets".into()], mode: RedactMode::Redact, exempt_tools: vec!["vault".into()] };
    let answer = || result(json!({"content": [{"type": "text", "text": "key AKIAIOSFODNN7EXAMPLE"}]}));
    let out = check_of(&gw, "tools/call", Some("t")).unwrap().response(answer());
    assert_eq!(out.outcome.unwrap().to_value()["content"][0]["text"], "key [redacted:aws_access_key_id]");
    let out = check_of(&gw, "tools/call", Some("vault")).unwrap().response(answer());
    assert_eq!(out.outcome.unwrap().to_value()["content"][0]["text"], "key AKIAIOSFODNN7EXAMPLE");
    gw.configuration.redact.mode = RedactMode::Log;
    let check = check_of(&gw, "tools/call", Some("t")).unwrap();
    let out = check.response(answer());
    assert_eq!(out.outcome.unwrap().to_value()["content"][0]["text"], "key AKIAIOSFODNN7EXAMPLE");
    assert_eq!(check.marks().unwrap()[0]["secrets"]["kinds"]["aws_access_key_id"], 1);
}

#[test]
fn a_task_s_answer_is_checked_as_its_tool_s_result() {
    let mut gw = gateway(ContentPolicy::Block);
    gw.configuration.max_result_bytes_by_tool.insert("report".into(), 100);
    let detail = json!({"taskId": "tgt1.x", "status": "completed", "statusMessage": "half\u{E0050}way",
        "result": {"isError": true, "content": [{"type": "text", "text": "done"}]}});
    let e = check_of(&gw, "tasks/get", Some("t")).unwrap().response(result(detail.clone()));
    let e = e.outcome.unwrap_err();
    let data = e.data.as_ref().unwrap();
    assert_eq!(
        (&data["where"], &data["at"], &data["tool_ran"]),
        (&json!("task"), &json!("statusMessage"), &json!(true))
    );
    assert!(e.message.contains("the tool ran"), "{}", e.message);
    // The tool's own size bound holds for its task's answers.
    let long = json!({"taskId": "tgt1.x", "status": "completed", "result": {"content": [{"text": "x".repeat(200)}]}});
    let e = check_of(&gw, "tasks/get", Some("report")).unwrap().response(result(long));
    let e = e.outcome.unwrap_err();
    assert_eq!(e.data.as_ref().unwrap()["reason"], "too_large");
    assert!(e.message.contains("its task's answer of"), "{}", e.message);
    gw.configuration.content_policy = ContentPolicy::Strip;
    let out = check_of(&gw, "tasks/get", None).unwrap().response(result(detail)).outcome.unwrap();
    assert_eq!(out.to_value()["statusMessage"], "halfway");
}

#[test]
fn an_identifier_outside_a_call_passes_only_without_hidden_text_or_under_log() {
    let uri = "res://doc\u{E0050}";
    assert!(identifier_passes(&gateway(ContentPolicy::Strip), "uri", "res://doc/1"));
    assert!(identifier_passes(&gateway(ContentPolicy::Strip), "uri", "res://Grüße"), "honest text passes");
    assert!(!identifier_passes(&gateway(ContentPolicy::Strip), "uri", uri), "never rewritten: dropped");
    assert!(!identifier_passes(&gateway(ContentPolicy::Block), "uri", uri));
    assert!(identifier_passes(&gateway(ContentPolicy::Log), "uri", uri));
    assert!(identifier_passes(&gateway(ContentPolicy::Off), "uri", uri));
}
