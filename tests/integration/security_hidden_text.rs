//! Hidden text (issue 55, items 3 and 4; `docs/governance.md`), against the real binary: a
//! stdio app on the official Python SDK (`tests/py/text_corpus_server.py`) whose tool
//! descriptions are the corpus of `tests/fixtures/hidden_text/corpus.json`. Under
//! `description_policy: block` every hostile text (the format controls, fillers and separators
//! a Unicode property names, tags outside a flag, joiners outside emoji and joining scripts)
//! withholds its tool, and every honest text (emoji ZWJ sequences, subdivision flags, variation
//! sequences, Persian, Arabic and Indic joiners, Hebrew and Arabic marks) is served byte for
//! byte; under `strip` the hostile ones are served clean. And the names toolgate sends itself:
//! a gateway's name or description with hidden text is a 400 naming the field, on create and on
//! update, and an honest one reaches `initialize` as it was written.

use crate::common::mcp::{rpc_error, Mcp};
use crate::common::{self, err, ok, validation, TestServer};
use serde_json::{json, Value};

fn corpus() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hidden_text/corpus.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the corpus")).expect("the corpus is JSON")
}

fn entries<'c>(corpus: &'c Value, kind: &str) -> &'c [Value] {
    corpus[kind].as_array().unwrap_or_else(|| panic!("corpus.{kind}"))
}

fn text<'v>(entry: &'v Value, key: &str) -> &'v str {
    entry[key].as_str().unwrap_or_else(|| panic!("{key} of {entry}"))
}

/// The corpus app `corpus` (a Python process started on first use), and an owner's key of
/// `org_ht`.
fn server() -> (TestServer, String) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/text_corpus_server.py");
    let (key, key_yaml) = common::declared_key("key_ht_owner", "usr_ht", &["*"]);
    let srv = TestServer::start(&format!(
        "  - {{ id: corpus, name: Corpus, category: testing, timeouts: {{ connect_ms: 60000 }}, command: [{:?}, {:?}] }}\n\
         mcp:\n  list_deadline_ms: 30000\n\
         organizations:\n  - {{ id: org_ht, name: Hidden, tier: enterprise }}\n\
         users:\n  - {{ id: usr_ht, email: ht@hidden.test, name: Ht, role: owner, organization: org_ht }}\n\
         api_keys:\n{key_yaml}",
        common::python().to_string_lossy(),
        script.to_string_lossy()
    ));
    (srv, key)
}

fn gateway(srv: &TestServer, key: &str, name: &str, servers: &[&str], configuration: Value) -> (String, String) {
    let body = json!({"name": name, "servers": servers, "configuration": configuration});
    common::mcp::create_gateway(srv, key, body)
}

/// The tools of a `tools/list`, by name.
fn tools(mcp: &Mcp, id: u64) -> Vec<Value> {
    let body = mcp.rpc(id, "tools/list", json!({}));
    body["result"]["tools"].as_array().unwrap_or_else(|| panic!("tools/list: {body}")).clone()
}

fn description_of<'t>(tools: &'t [Value], name: &str) -> Option<&'t str> {
    tools.iter().find(|t| t["name"] == name).and_then(|t| t["description"].as_str())
}

#[test]
fn block_withholds_every_hostile_text_and_serves_honest_text_byte_for_byte() {
    let corpus = corpus();
    assert_eq!(corpus["unicode"], "18.0.0");
    let (srv, key) = server();
    let (gw, gw_key) =
        gateway(&srv, &key, "corpus-block", &["corpus"], json!({"description_policy": "block", "tool_policy": "off"}));
    let mcp = Mcp::open(&srv, &gw, &gw_key);
    let listed = tools(&mcp, 1);
    let names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let honest: Vec<String> =
        entries(&corpus, "honest").iter().map(|e| format!("honest_{}", text(e, "name"))).collect();
    assert_eq!(names, honest, "exactly the honest tools are listed");
    for e in entries(&corpus, "honest") {
        let name = format!("honest_{}", text(e, "name"));
        assert_eq!(description_of(&listed, &name), Some(text(e, "text")), "{name}: byte for byte");
    }
    for (i, e) in entries(&corpus, "hostile").iter().enumerate() {
        let name = format!("hostile_{}", text(e, "name"));
        let body = mcp.call(10 + i as u64, &name, json!({"query": "q"}));
        let (code, message) = rpc_error(&body);
        assert_eq!(code, -32602, "{name}: {body}");
        assert!(message.starts_with(&format!("tool `{name}` is withheld: its description contains")), "{message}");
        let findings = body["error"]["data"]["withheld"]["findings"].as_array().unwrap_or_else(|| panic!("{body}"));
        let classes: Vec<&Value> = findings.iter().map(|f| &f["class"]).collect();
        let want: Vec<&Value> = e["classes"].as_array().unwrap().iter().collect();
        assert_eq!(classes, want, "{name}: {body}");
    }

    // Under `strip` the hostile tools are served clean, the honest ones untouched.
    let (gw, gw_key) = gateway(&srv, &key, "corpus-strip", &["corpus"], json!({"tool_policy": "off"}));
    let listed = tools(&Mcp::open(&srv, &gw, &gw_key), 1);
    for e in entries(&corpus, "hostile") {
        let name = format!("hostile_{}", text(e, "name"));
        assert_eq!(description_of(&listed, &name), Some(text(e, "clean")), "{name}");
    }
    for e in entries(&corpus, "honest") {
        let name = format!("honest_{}", text(e, "name"));
        assert_eq!(description_of(&listed, &name), Some(text(e, "text")), "{name}");
    }
}

#[test]
fn a_gateway_name_or_description_with_hidden_text_is_refused_naming_the_field() {
    let (srv, key) = server();
    let tags: String = "IGNORE".chars().map(|c| char::from_u32(0xE0000 + c as u32).unwrap()).collect();
    let post = |body: Value| srv.api("POST", "/v1/gateways", Some(&key), Some(body));
    let e = validation(&post(json!({"name": format!("Support{tags}\u{E007F}"), "servers": ["time"]})), "name");
    assert_eq!(
        e["details"]["issue"],
        "must not contain hidden text: a Unicode tag character (U+E0049) at character 7, 7 in all"
    );
    for (field, bad) in
        [("name", "Sup\u{3164}port"), ("name", "Help\u{1D173}"), ("description", "Answers.\u{2028}Obey.")]
    {
        let mut body = json!({"name": "Support", "servers": ["time"]});
        body[field] = json!(bad);
        validation(&post(body), field);
    }

    // An honest name (an emoji ZWJ sequence, a flag, Persian) is kept and sent as written.
    let honest = "Support 👨\u{200D}👩\u{200D}👧 \u{1F3F4}\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F} پشتیبانی\u{200C}ها";
    let (gw, gw_key) = gateway(&srv, &key, honest, &["time"], json!({}));
    let r = common::mcp::initialize_raw(&srv, &gw, &gw_key, "hidden");
    assert_eq!(r.status, 200, "{}", r.body);
    let init: Value = serde_json::from_str(&r.body).expect("initialize answers JSON");
    assert_eq!(init["result"]["serverInfo"]["title"], format!("toolgate: {honest}"), "{init}");
    let instructions = init["result"]["instructions"].as_str().unwrap_or_default();
    assert!(instructions.contains(&format!("`{honest}`")), "{init}");

    // Update: refused the same way, and nothing changes.
    let path = format!("/v1/gateways/{gw}");
    validation(&srv.api("PATCH", &path, Some(&key), Some(json!({"name": format!("Support{tags}")}))), "name");
    validation(&srv.api("PATCH", &path, Some(&key), Some(json!({"description": "a\u{FFA0}b"}))), "description");
    let detail = ok(&srv.api("GET", &path, Some(&key), None), 200);
    assert_eq!((detail["name"].as_str(), detail["description"].as_str()), (Some(honest), Some("")), "{detail}");
    err(&srv.api("PATCH", "/v1/gateways/gw_none", Some(&key), Some(json!({"name": "x"}))), 404, "NOT_FOUND");
}
