use super::answer::result_misfit;
use super::*;
use crate::config::GuardsConfig;
use crate::data::model::ToolOverride;

fn raw(t: &str) -> Box<RawValue> {
    RawValue::from_string(t.to_string()).unwrap()
}

#[test]
fn answers_are_read_one_way() {
    let read = |t: &str, p| Answer::parse(t.as_bytes(), p).map(|a| a.action.label());
    assert_eq!(read(r#"{"action":"allow"}"#, CalloutPhase::Request), Ok("allow"));
    assert_eq!(read(r#"{"action":"deny","reason":"no"}"#, CalloutPhase::Response), Ok("deny"));
    assert_eq!(read(r#"{"action":"replace","arguments":{"a":1}}"#, CalloutPhase::Request), Ok("replace"));
    assert_eq!(read(r#"{"action":"replace","result":{"content":[]}}"#, CalloutPhase::Response), Ok("replace"));
    for (bad, phase) in [
        ("", CalloutPhase::Request),
        ("not json", CalloutPhase::Request),
        (r#"{"action":"deny"}"#, CalloutPhase::Request),
        (r#"{"action":"deny","reason":"  "}"#, CalloutPhase::Request),
        (r#"{"action":"replace","result":{}}"#, CalloutPhase::Request),
        (r#"{"action":"replace","arguments":{}}"#, CalloutPhase::Response),
        (r#"{"action":"block"}"#, CalloutPhase::Request),
        (r#"{"action":"allow","action":"deny"}"#, CalloutPhase::Request),
        (r#"["allow"]"#, CalloutPhase::Request),
    ] {
        assert!(read(bad, phase).is_err(), "{bad}");
    }
}

#[test]
fn replaced_arguments_fit_the_schema_and_keep_what_the_gateway_fixes() {
    let schema = json!({"type": "object", "properties": {"message": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["message"], "additionalProperties": false});
    let fit = |t: &str| schema_misfit(Some(&schema), None, &raw(t));
    assert_eq!(fit(r#"{"message":"hi","n":2}"#), None);
    assert!(fit(r#"{"n":2}"#).unwrap().contains("`message`"), "required");
    assert!(fit(r#"{"message":3}"#).unwrap().contains("type string"), "type");
    assert!(fit(r#"{"message":"hi","extra":1}"#).unwrap().contains("`extra`"), "closed schema");
    assert!(fit("[1]").is_some() && fit("null").is_some(), "not an object");
    let o: ToolOverride = serde_json::from_value(json!({"tool": "echo", "fixed_arguments": {"lang": "en"}})).unwrap();
    let shape = Shape::of(&o, false);
    let fixed = |t: &str| schema_misfit(Some(&schema), Some(&shape), &raw(t));
    assert_eq!(fixed(r#"{"message":"hi","lang":"en"}"#), None, "a fixed argument is not the schema's");
    assert!(fixed(r#"{"message":"hi","lang":"fr"}"#).unwrap().contains("`lang`"));
    assert!(fixed(r#"{"message":"hi"}"#).unwrap().contains("`lang`"));
}

#[test]
fn a_replaced_result_is_a_tool_result() {
    assert_eq!(result_misfit(&raw(r#"{"content":[{"type":"text","text":"x"}]}"#)), None);
    for bad in [r#"{"content":"x"}"#, "{}", "[]", "null"] {
        assert!(result_misfit(&raw(bad)).is_some(), "{bad}");
    }
}

#[test]
fn guard_calls_are_bounded_per_gateway_and_per_organisation() {
    let slots = Slots::default();
    let limits = GuardsConfig { concurrency_per_gateway: 2, concurrency_per_organization: 3 };
    let a1 = slots.take("gw_a", "org", &limits).expect("first");
    let a2 = slots.take("gw_a", "org", &limits).expect("second");
    assert!(slots.take("gw_a", "org", &limits).is_none(), "the gateway's bound");
    let b1 = slots.take("gw_b", "org", &limits).expect("another gateway");
    assert!(slots.take("gw_b", "org", &limits).is_none(), "the organisation's bound");
    assert_eq!(slots.of_gateway("gw_b"), 1, "a refusal by the organisation gives the gateway's place back");
    assert!(slots.take("gw_c", "other_org", &limits).is_some(), "another organisation is not held");
    drop((a1, a2, b1));
    assert_eq!(slots.of_gateway("gw_a"), 0);
    assert!(slots.take("gw_b", "org", &limits).is_some());
}

#[test]
fn a_task_answer_goes_on_as_the_guards_read_it() {
    // A hostile app writes the result twice: a reader keeping the first member would see the
    // address, one keeping the last (serde, and so the guards) the clean text.
    let text = r#"{"status":"completed","result":{"content":[{"type":"text","text":"grace@example.com"}]},"result":{"content":[{"type":"text","text":"clean"}]}}"#;
    let v: Value = serde_json::from_str(text).unwrap();
    let read = RawJson::from_value(&v["result"]);
    let relayed = task::as_the_guards_read(v, &read);
    assert!(!relayed.get().contains("grace@"), "{}", relayed.get());
    assert_eq!(relayed.get().matches("\"result\"").count(), 1, "{}", relayed.get());
    assert!(relayed.get().contains("clean"));
}
