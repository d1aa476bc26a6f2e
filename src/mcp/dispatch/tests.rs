use super::*;

/// The size of the future an async function returns, from a closure that is never called.
fn future_size<F>(_: impl FnOnce() -> F) -> usize {
    std::mem::size_of::<F>()
}

/// Each request's future is built on the stack and copied into its box (`Proxy::route`), so
/// every byte of `forward`'s is copied once per call. It was 9.3 KB while the app's call,
/// pinned across the early stream's writes, was kept in every state of it.
#[test]
#[allow(unreachable_code, clippy::diverging_sub_expression)]
fn the_forward_future_stays_small() {
    let size = future_size(|| {
        forward(unreachable!(), unreachable!(), unreachable!(), unreachable!(), unreachable!(), unreachable!())
    });
    assert!(size < 7 * 1024, "forward's future is {size} bytes");
}

#[test]
fn server_requests_are_relayed_only_to_clients_that_can_take_them() {
    let caps = |v: Value| declared_capabilities(Some(&v));
    assert_eq!(caps(json!({})), ClientCapabilities::default());
    assert_eq!(declared_capabilities(None), ClientCapabilities::default());
    // Only an object declares a capability (`"sampling": true` is not one).
    assert_eq!(
        caps(json!({"sampling": true, "elicitation": {}})),
        ClientCapabilities { sampling: false, elicitation: true, elicitation_url: false }
    );
    let both = caps(json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {}}));
    assert_eq!(both, ClientCapabilities { sampling: true, elicitation: true, elicitation_url: false });
    // URL mode (2025-11-25) is told apart: a per-user app's missing connection is a link then.
    let url = caps(json!({"elicitation": {"form": {}, "url": {}}}));
    assert_eq!(url, ClientCapabilities { sampling: false, elicitation: true, elicitation_url: true });

    assert!(refusal("sampling/createMessage", both, true).is_none());
    assert!(refusal("elicitation/create", both, true).is_none());
    assert!(refusal("ping", ClientCapabilities::default(), true).is_none());
    let e = refusal("sampling/createMessage", ClientCapabilities::default(), true).unwrap();
    assert_eq!(e.code, jsonrpc::METHOD_NOT_FOUND);
    assert!(e.message.contains("sampling capability"), "{}", e.message);
    let e = refusal("elicitation/create", ClientCapabilities { sampling: true, ..Default::default() }, true).unwrap();
    assert!(e.message.contains("elicitation capability"), "{}", e.message);
    // Without a stream nothing can reach the client, whatever it declared (`ping` the
    // gateway answers itself before asking).
    for method in ["sampling/createMessage", "roots/list", "elicitation/create"] {
        let e = refusal(method, both, false).unwrap();
        assert!(e.message.contains("JSON answers only") && e.message.contains(method), "{}", e.message);
    }
}

/// The entry `log_entry` makes of `outcome`: its `error` flag and its `response`.
fn logged(outcome: Result<Value, RpcErrorObject>, transport_status: u16) -> (bool, Value) {
    let gw = Arc::new(Gateway::for_tests("gw_1", "org_1"));
    let entry = EntryWriter::begin(&gw, "app", "f", "null");
    let outcome = outcome.map(|v| RawJson::from_value(&v));
    let failed = error_type("tools/call", &outcome).is_error();
    let record = log_entry(entry, &outcome, failed, transport_status, Duration::from_millis(5));
    let body: Value = serde_json::from_str(&record.body).unwrap();
    (record.error, body["response"].clone())
}

#[test]
fn a_tool_error_is_found_however_its_flag_is_spelled() {
    let error_of = |text: &str| {
        let outcome = Ok(RawJson::from_value(&serde_json::from_str::<Value>(text).unwrap()));
        let escaped = Ok(RawJson::from_text(text.to_string()).unwrap());
        let (a, b) = (error_type("tools/call", &escaped).is_error(), error_type("tools/call", &outcome).is_error());
        assert_eq!(a, b, "{text}");
        a
    };
    assert!(error_of(r#"{"content":[],"isError":true}"#));
    assert!(error_of(r#"{"content":[],"is\u0045rror":true}"#), "an escaped name is the same name");
    assert!(error_of(r#"{"\u0069sError":true,"content":[{"type":"text","text":"caf\u00e9"}]}"#));
    assert!(!error_of(r#"{"content":[{"type":"text","text":"Echo: hello"}]}"#));
    assert!(!error_of(r#"{"content":[],"isError":false}"#));
    assert!(!error_of(r#"{"content":[{"type":"text","text":"isError"}]}"#), "in a value, not a name");
    assert!(!error_of(r#"{"content":[{"type":"text","text":"\u00e9"}]}"#));
    // Only a tool's result carries the flag.
    let flagged = Ok(RawJson::from_value(&json!({"isError": true})));
    assert!(!error_type("prompts/get", &flagged).is_error());
    assert!(!may_name_is_error(r#"{"content":[{"type":"text","text":"Echo: hello"}]}"#));
}

fn params_of(text: &str) -> RawJson {
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{text}}}"#);
    let Ok(Message::Request(r)) = jsonrpc::parse_message(body.as_bytes()) else { panic!("{body}") };
    r.params.expect("params")
}

#[test]
fn a_call_is_renamed_and_every_other_member_relayed_as_sent() {
    let p = params_of(r#"{"name":"gw__echo", "arguments": {"message" : "hi é"}, "_meta":{"progressToken":1}}"#);
    let call = p.read::<NamedParams>().unwrap();
    assert_eq!(call.name.as_deref(), Some("gw__echo"));
    assert!(matches!(call.name, Some(Cow::Borrowed(_))), "read in place, not copied");
    assert_eq!(call.get("arguments").map(RawValue::get), Some(r#"{"message" : "hi é"}"#));
    assert_eq!(
        call.renamed("echo", false).get(),
        r#"{"name":"echo","arguments":{"message" : "hi é"},"_meta":{"progressToken":1}}"#
    );
    // An escaped name is read (and copied); a new name with quotes is escaped.
    let p = params_of(r#"{"name":"a_b"}"#);
    let call = p.read::<NamedParams>().unwrap();
    assert_eq!(call.name.as_deref(), Some("a_b"));
    assert_eq!(call.renamed("say \"hi\"", false).to_value(), json!({ "name": "say \"hi\"" }));
    // No name, or one that is not a string, or params that are not an object: no call.
    assert_eq!(params_of(r#"{"arguments":{}}"#).read::<NamedParams>().unwrap().name, None);
    assert!(params_of(r#"{"name":5}"#).read::<NamedParams>().is_err());
    assert!(params_of(r#"["echo"]"#).read::<NamedParams>().is_err());
}

#[test]
fn a_list_is_paged_from_the_cursor_in_the_raw_params() {
    let items: Vec<Value> = (0..5).map(|i| json!(i)).collect();
    let page_of = |params: Option<&str>| {
        let raw = params.map(params_of);
        page(&items, raw.as_ref(), "tools", 2)
    };
    let first = json!({ "tools": [0, 1], "nextCursor": "2" });
    assert_eq!(page_of(None).unwrap(), first);
    assert_eq!(page_of(Some(r#"{"cursor":null}"#)).unwrap(), first, "a null cursor is no cursor");
    assert_eq!(page_of(Some("[1]")).unwrap(), first, "params that are not an object have no cursor");
    assert_eq!(page_of(Some(r#"{"cursor":"4"}"#)).unwrap(), json!({ "tools": [4] }), "the last page");
    let err = |params: &str| page_of(Some(params)).unwrap_err().message;
    assert_eq!(err(r#"{"cursor":2}"#), "cursor must be a string");
    assert_eq!(err(r#"{"cursor":"x"}"#), "invalid cursor");
    assert_eq!(err(r#"{"cursor":"6"}"#), "invalid cursor");
}

#[test]
fn a_log_entry_says_what_came_back() {
    let ok = json!({ "content": [] });
    assert_eq!(logged(Ok(ok.clone()), 200), (false, json!({ "status": 200, "data": ok })));
    let tool_error = json!({ "content": [], "isError": true });
    assert_eq!(logged(Ok(tool_error.clone()), 200), (true, json!({ "status": 200, "data": tool_error })));
    // A result that is not an object has no `isError`: a success.
    assert!(!logged(Ok(json!([1])), 200).0);
    assert!(!logged(Ok(json!([true])), 200).0);
    let status = |code: i64, transport: u16| logged(Err(RpcErrorObject::new(code, "m")), transport).1["status"].clone();
    assert_eq!(status(-32602, 200), 400, "bad arguments");
    assert_eq!(status(-32003, 200), 504, "the app timed out");
    assert_eq!(status(-32002, 503), 503, "the transport's own 5xx");
    assert_eq!(status(-32002, 200), 502, "any other failure of the app");
    let (error, response) = logged(Err(RpcErrorObject::new(-32002, "App `a` failed")), 502);
    assert!(error);
    assert_eq!(response["data"], json!({ "code": -32002, "message": "App `a` failed" }));
}
