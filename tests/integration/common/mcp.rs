//! The MCP side of the harness, one place for what every MCP test needs: a gateway made through
//! the API (`create_gateway`), one POST to its endpoint as written (`post`), a session opened
//! on it (`initialize`), and a session client for JSON answers (`Mcp`), with the two readers
//! of its answers (`result_text`, `rpc_error`).

use super::{ok, RawResponse, TestServer};
use serde_json::{json, Value};
use std::time::Duration;

/// What a client that takes either answer sends in `Accept`.
pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// A gateway made by `key` from `body` (`POST /v1/gateways`, which must answer 201): its id and
/// its access key.
pub fn create_gateway(srv: &TestServer, key: &str, body: Value) -> (String, String) {
    let g = ok(&srv.api("POST", "/v1/gateways", Some(key), Some(body)), 201);
    let id = g["id"].as_str().unwrap_or_else(|| panic!("gateway id: {g}")).to_string();
    (id, g["api_key"].as_str().unwrap_or_else(|| panic!("gateway api_key: {g}")).to_string())
}

/// The header a credential goes in at a gateway's endpoint: a token (an access token of
/// toolgate's authorization server, `tga_...`, or a JWT, `eyJ...`) as a Bearer token, anything
/// else (keys, and the wrong values tests send) in `X-API-Key`.
pub fn credential_header(credential: &str) -> (&'static str, String) {
    if credential.starts_with("tga_") || credential.starts_with("eyJ") {
        ("Authorization", format!("Bearer {credential}"))
    } else {
        ("X-API-Key", credential.to_string())
    }
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).no_proxy().build().unwrap()
}

/// POSTs `body` as it is written (no JSON re-encoding, so ids keep their spelling) to gateway
/// `gw`'s endpoint with `credential`, in `session` when given, taking JSON or SSE.
pub fn post(srv: &TestServer, gw: &str, credential: &str, session: Option<&str>, body: &str) -> RawResponse {
    let (header, value) = credential_header(credential);
    let mut req = client()
        .post(srv.url(&format!("/gateway/{gw}/mcp")))
        .header(header, value)
        .header("Accept", ACCEPT_BOTH)
        .header("Content-Type", "application/json")
        .body(body.to_string());
    if let Some(s) = session {
        req = req.header("Mcp-Session-Id", s);
    }
    let r = req.send().unwrap_or_else(|e| panic!("POST {body}: {e}"));
    let status = r.status().as_u16();
    let headers =
        r.headers().iter().map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or_default().to_string())).collect();
    RawResponse { status, headers, body: r.text().unwrap_or_default() }
}

/// `initialize` at `gw` (protocol 2025-06-18, the client named `client_name`), whatever it answers.
pub fn initialize_raw(srv: &TestServer, gw: &str, credential: &str, client_name: &str) -> RawResponse {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": client_name, "version": "1"}}});
    post(srv, gw, credential, None, &body.to_string())
}

/// A new session of `credential` on `gw` (`initialize` must answer 200 with its id).
pub fn initialize(srv: &TestServer, gw: &str, credential: &str, client_name: &str) -> String {
    let r = initialize_raw(srv, gw, credential, client_name);
    assert_eq!(r.status, 200, "initialize: {}", r.body);
    r.header("mcp-session-id").expect("Mcp-Session-Id").to_string()
}

/// An initialized MCP client session on one gateway (raw JSON-RPC over blocking reqwest).
#[derive(Clone)]
pub struct Mcp {
    client: reqwest::blocking::Client,
    url: String,
    key: String,
    session: String,
}

impl Mcp {
    pub fn open(srv: &TestServer, gateway_id: &str, key: &str) -> Mcp {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .no_proxy()
            .build()
            .expect("build MCP client");
        let url = srv.url(&format!("/gateway/{gateway_id}/mcp"));
        let mut m = Mcp { client, url, key: key.to_string(), session: String::new() };
        let r = m.post(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "mcp_upstreams", "version": "1"}}}));
        assert_eq!(r.status().as_u16(), 200, "initialize");
        m.session = r
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .expect("initialize answers an Mcp-Session-Id")
            .to_string();
        let body: Value = r.json().expect("initialize answers JSON");
        assert_eq!(body["id"], 0, "{body}");
        assert!(body["result"]["protocolVersion"].is_string(), "{body}");
        let r = m.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert!(r.status().is_success(), "notifications/initialized: HTTP {}", r.status());
        m
    }

    /// The same session on a connection of its own (a new client, so no pooled connection is
    /// shared with this one).
    pub fn on_own_connection(&self) -> Mcp {
        let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).no_proxy().build().unwrap();
        Mcp { client, ..self.clone() }
    }

    fn post(&self, body: Value) -> reqwest::blocking::Response {
        let mut req = self
            .client
            .post(&self.url)
            .header("X-API-Key", &self.key)
            .header("Accept", "application/json")
            .header("Content-Type", "application/json")
            .json(&body);
        if !self.session.is_empty() {
            req = req.header("Mcp-Session-Id", &self.session);
        }
        req.send().unwrap_or_else(|e| panic!("MCP POST {body}: {e}"))
    }

    /// A JSON-RPC request with `id`; asserts HTTP 200, a JSON body and the echoed id.
    pub fn rpc(&self, id: u64, method: &str, params: Value) -> Value {
        let r = self.post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let status = r.status().as_u16();
        let text = r.text().unwrap_or_default();
        assert_eq!(status, 200, "{method}: HTTP {status}: {text}");
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method}: not JSON ({e}): {text}"));
        assert_eq!(body["jsonrpc"], "2.0", "{body}");
        assert_eq!(body["id"], json!(id), "the answer carries the caller's id: {body}");
        body
    }

    /// A `tools/call` whose HTTP status is the caller's to judge: `(status, body text)`.
    pub fn try_call(&self, id: u64, tool: &str, arguments: Value) -> (u16, String) {
        let r = self.post(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}));
        let status = r.status().as_u16();
        (status, r.text().unwrap_or_default())
    }

    pub fn call(&self, id: u64, tool: &str, arguments: Value) -> Value {
        self.rpc(id, "tools/call", json!({"name": tool, "arguments": arguments}))
    }

    pub fn tool_names(&self, id: u64) -> Vec<String> {
        let body = self.rpc(id, "tools/list", json!({}));
        body["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("tools/list result.tools: {body}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

/// The text of a successful tool result (asserts `result`, no `isError`).
pub fn result_text(body: &Value) -> String {
    assert!(body.get("error").is_none(), "expected a result, got an error: {body}");
    assert_ne!(body["result"]["isError"], json!(true), "expected a successful tool result: {body}");
    body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("result.content[0].text: {body}"))
        .to_string()
}

/// `(code, message)` of a JSON-RPC error answer (asserts there is no result).
pub fn rpc_error(body: &Value) -> (i64, String) {
    assert!(body.get("result").is_none(), "expected a JSON-RPC error, got a result: {body}");
    let code = body["error"]["code"].as_i64().unwrap_or_else(|| panic!("error.code: {body}"));
    let msg = body["error"]["message"].as_str().unwrap_or_else(|| panic!("error.message: {body}")).to_string();
    (code, msg)
}
