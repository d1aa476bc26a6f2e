//! The specification read literally (issue 39, B and part of C17), against the real binary: the
//! request log names a function by its own name on a gateway of several apps, and calls refused
//! before they reach an app are logged and counted; `serverInfo` names the environment; a
//! webhook secret may be the client's own string; batch paths may be relative to `{base_url}`;
//! each batch operation is charged to its own bucket; `/v1/admin/reload` is a 404 to a narrow
//! key; a plain listener beside required client certificates and plain SMTP in production are
//! refused at start and on reload; webhook URLs may not hide an internal address in IPv6.

use crate::common::{declared_key, err, ok, validation, TestServer, BASE_CONFIG};
use serde_json::{json, Value};
use std::process::{Command, Output};

/// `initialize` on `gw` (`common::mcp`): the session id and the result.
fn initialize(srv: &TestServer, gw: &str, key: &str) -> (String, Value) {
    let r = crate::common::mcp::initialize_raw(srv, gw, key, "spec-literal");
    assert_eq!(r.status, 200, "initialize: {}", r.body);
    let session = r.header("mcp-session-id").expect("Mcp-Session-Id").to_string();
    let body: Value =
        serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("initialize: not JSON ({e}): {}", r.body));
    (session, body["result"].clone())
}

/// A `tools/call` in `session`: the JSON-RPC answer.
fn call(srv: &TestServer, gw: &str, key: &str, session: &str, id: u64, tool: &str, arguments: Value) -> Value {
    let r = srv.request(
        "POST",
        &format!("/gateway/{gw}/mcp"),
        None,
        Some(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}})),
        &[("x-api-key", key), ("accept", "application/json"), ("mcp-session-id", session)],
    );
    assert_eq!(r.status, 200, "tools/call {tool}: {r:?}");
    r.json
}

fn gateway(srv: &TestServer, servers: &[&str]) -> (String, String) {
    let body = json!({"name": format!("spec-{}", servers.join("-")), "servers": servers});
    crate::common::mcp::create_gateway(srv, srv.admin_key(), body)
}

/// B4, B7: on a gateway of two apps (the built-in `time` and one that is down), a call to
/// `time__get_current_time` is logged as `get_current_time` of `time` and ranked in analytics as
/// `time.get_current_time`; a call to the down app's tool and one to no app's tool, refused
/// before reaching an app, are logged as errors and counted in analytics and metrics.
#[test]
fn a_two_app_gateway_logs_each_function_by_its_own_name_and_refused_calls_count() {
    let srv = TestServer::start_with_config(&format!(
        "{BASE_CONFIG}  - {{ id: dead, name: Dead, url: \"http://127.0.0.1:1/mcp\", timeouts: {{ connect_ms: 500 }} }}\n"
    ));
    let admin = srv.admin_key().to_string();
    let (gw, key) = gateway(&srv, &["time", "dead"]);
    let (session, result) = initialize(&srv, &gw, &key);

    let ok_call = call(&srv, &gw, &key, &session, 1, "time__get_current_time", json!({"format": "YYYY"}));
    assert!(ok_call["result"]["content"].is_array(), "{ok_call}");
    let down = call(&srv, &gw, &key, &session, 2, "dead__echo", json!({"message": "x"}));
    assert_eq!(down["error"]["code"], -32004, "the down app's failure: {down}");
    let unknown = call(&srv, &gw, &key, &session, 3, "nosuch__tool", json!({}));
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    let r = srv.api("GET", &format!("/v1/logs?gateway_id={gw}"), Some(&admin), None);
    let logs = ok(&r, 200)["logs"].as_array().cloned().unwrap_or_default();
    assert_eq!(logs.len(), 3, "every call is logged, refused ones too: {logs:?}");
    let entry = |app: &str| {
        logs.iter().find(|e| e["app"] == app).unwrap_or_else(|| panic!("an entry of app `{app}`: {logs:?}")).clone()
    };
    let time = entry("time");
    assert_eq!((&time["function"], &time["status"]), (&json!("get_current_time"), &json!("success")), "{time}");
    assert_eq!(time["request"]["params"], json!({"format": "YYYY"}), "{time}");
    let dead = entry("dead");
    assert_eq!((&dead["function"], &dead["status"]), (&json!("echo"), &json!("error")), "{dead}");
    assert_eq!(dead["response"]["status"], 502, "{dead}");
    assert_eq!(dead["response"]["data"]["code"], -32004, "{dead}");
    assert_eq!(dead["request"]["params"], json!({"message": "x"}), "{dead}");
    // A name that carries no app's prefix belongs to no app: logged under its own name.
    let none = entry("");
    assert_eq!((&none["function"], &none["status"]), (&json!("nosuch__tool"), &json!("error")), "{none}");
    assert_eq!(none["response"]["status"], 400, "{none}");

    let r = srv.api("GET", &format!("/v1/logs/analytics?gateway_id={gw}&period=1h"), Some(&admin), None);
    let a = ok(&r, 200);
    assert_eq!(a["summary"]["total_requests"], 3, "{a}");
    assert_eq!(a["summary"]["error_count"], 2, "{a}");
    let top: Vec<&str> = a["top_functions"].as_array().unwrap().iter().filter_map(|t| t["function"].as_str()).collect();
    assert!(top.contains(&"time.get_current_time"), "`<app_id>.<function>`: {top:?}");
    assert!(top.contains(&"dead.echo"), "{top:?}");
    assert!(!top.iter().any(|f| f.contains("time__")), "the gateway's prefixed name is not the function's: {top:?}");

    let r = srv.api("GET", &format!("/v1/metrics/gateway/{gw}?period=1h"), Some(&admin), None);
    let m = ok(&r, 200);
    assert_eq!((&m["metrics"]["requests"], &m["metrics"]["errors"]), (&json!(3), &json!(2)), "{m}");

    // Decision 12: the environment is stated in the server info, in production too.
    assert_eq!(result["serverInfo"]["environment"], "development", "{result}");
    assert_eq!(result["serverInfo"]["name"], "toolgate", "{result}");
    let prod =
        TestServer::start_with_config(&BASE_CONFIG.replace("environment: development", "environment: production"));
    let (gw, key) = gateway(&prod, &["time"]);
    let (_, result) = initialize(&prod, &gw, &key);
    assert_eq!(result["serverInfo"]["environment"], "production", "{result}");
    // A 2026-07-28 client learns it from `server/discover`'s server info.
    let r = prod.request(
        "POST",
        &format!("/gateway/{gw}/mcp"),
        None,
        Some(json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "spec-literal", "version": "1"}}}})),
        &[
            ("x-api-key", key.as_str()),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "server/discover"),
        ],
    );
    assert_eq!(r.status, 200, "server/discover: {r:?}");
    let info = &r.json["result"]["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_eq!((&info["name"], &info["environment"]), (&json!("toolgate"), &json!("production")), "{}", r.json);
}

/// B5: the secret a client chose is taken as it is (the delivery's HMAC, checked by the Python
/// receiver test `test_webhooks.py`, is keyed with its bytes); a short or unprintable one is a
/// 400 naming `secret`.
#[test]
fn a_webhook_secret_may_be_the_clients_own_string() {
    let srv = TestServer::start("");
    let admin = srv.admin_key();
    let secret = "spec-literal-secret-0123456789abcdef";
    let body = json!({"url": "https://93.184.216.34/hook", "events": ["gateway.created"], "secret": secret});
    let r = srv.api("POST", "/v1/webhooks", Some(admin), Some(body));
    assert_eq!(ok(&r, 201)["secret"], secret, "{r:?}");
    for bad in ["too-short-0123456789", "a secret with spaces in it 0123456789", "whsec_not-base64!"] {
        let body = json!({"url": "https://93.184.216.34/hook", "events": ["*"], "secret": bad});
        validation(&srv.api("POST", "/v1/webhooks", Some(admin), Some(body)), "secret");
    }
}

/// B6: a batch operation's path may be relative to `{base_url}` (which includes `/v1`), as the
/// specification writes every path, or carry the version prefix.
#[test]
fn batch_paths_may_be_relative_to_the_base_url() {
    let srv = TestServer::start("");
    let ops = json!({"operations": [
        {"method": "GET", "path": "/gateways"},
        {"method": "GET", "path": "/gateways?limit=5"},
        {"method": "GET", "path": "/v1/gateways"},
        {"method": "GET", "path": "/api/v1/rate-limit"},
        {"method": "GET", "path": "gateways"},
        {"method": "GET", "path": "/nosuch"},
    ]});
    let r = srv.api("POST", "/v1/batch", Some(srv.admin_key()), Some(ops));
    let results = ok(&r, 200)["results"].as_array().cloned().unwrap();
    let statuses: Vec<u64> = results.iter().map(|x| x["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, vec![200, 200, 200, 200, 400, 404], "{results:?}");
    assert!(results[0]["data"]["gateways"].is_array(), "{results:?}");
    assert_eq!(results[1]["data"]["pagination"]["limit"], 5, "{results:?}");
    assert_eq!(results[4]["error"]["details"]["field"], "path", "{results:?}");
}

/// B8: each operation of a batch is charged to its own bucket at its own cost, as if sent alone:
/// a key whose `analytics` bucket pays for N queries gets N answers and 429 for the rest, and
/// the bucket is drained for the next query sent alone.
#[test]
fn each_batch_operation_is_charged_to_its_own_bucket() {
    let (key, item) = declared_key("key_slow", "usr_slow", &["*"]);
    let srv = TestServer::start(&format!(
        "rate_limits:\n  tiers:\n    slow: {{ requests_per_hour: 600, requests_per_minute: 10, burst: 10, concurrent: 10 }}\n\
         organizations:\n  - {{ id: org_slow, name: Slow, tier: slow }}\n\
         users:\n  - {{ id: usr_slow, email: s@slow.test, name: S, role: owner, organization: org_slow }}\n\
         api_keys:\n{item}"
    ));
    let r = srv.api("GET", "/v1/rate-limit", Some(&key), None);
    let analytics = ok(&r, 200)["buckets"]["analytics"].clone();
    let n = analytics["remaining"].as_u64().unwrap() / 5;
    assert!(n >= 1 && n + 3 <= 20, "test setup: the analytics bucket pays for {n} queries: {analytics}");
    let n = usize::try_from(n).unwrap();
    let ops: Vec<Value> =
        (0..n + 3).map(|_| json!({"method": "GET", "path": "/v1/logs/analytics?period=1h"})).collect();
    let r = srv.api("POST", "/v1/batch", Some(&key), Some(json!({ "operations": ops })));
    let results = ok(&r, 200)["results"].as_array().cloned().unwrap();
    assert_eq!(results.len(), n + 3);
    for (i, x) in results.iter().enumerate() {
        if i < n {
            assert_eq!(x["status"], 200, "operation {i} of {n} paid: {results:?}");
        } else {
            assert_eq!(
                (&x["status"], &x["error"]["code"]),
                (&json!(429), &json!("RATE_LIMITED")),
                "operation {i}: {x}"
            );
            assert!(x["error"]["retry_after"].as_u64().is_some_and(|s| s >= 1), "{x}");
        }
    }
    // The queries the batch ran were paid for: the next one alone finds the bucket empty.
    err(&srv.api("GET", "/v1/logs/analytics?period=1h", Some(&key), None), 429, "RATE_LIMITED");
    let r = srv.api("GET", "/v1/rate-limit", Some(&key), None);
    let left = ok(&r, 200)["buckets"]["analytics"]["remaining"].as_u64().unwrap();
    assert!(left < 5, "the analytics bucket is drained: {left} left");
}

/// C17: `/v1/admin/reload` is there only for the operator's owner with `admin`: a narrower key of
/// the same owner gets the 404 everyone else gets, not a 403 that says it exists.
#[test]
fn admin_reload_is_a_404_to_a_key_without_admin() {
    let srv = TestServer::start("");
    let body = json!({"name": "narrow", "scopes": ["gateways:read", "logs:read"]});
    let r = srv.api("POST", "/v1/api-keys", Some(srv.admin_key()), Some(body));
    let narrow = ok(&r, 201)["key"].as_str().unwrap().to_string();
    let e = err(&srv.api("POST", "/v1/admin/reload", Some(&narrow), None), 404, "NOT_FOUND");
    assert!(!e.to_string().contains("scope"), "nothing says a scope would open it: {e}");
    ok(&srv.api("POST", "/v1/admin/reload", Some(srv.admin_key()), None), 200);
}

/// Runs the binary on `yaml` (written to a file in a fresh directory) until it exits; one still
/// running after 20 s started, which fails the test.
fn start_refused(yaml: &str) -> Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("toolgate.yaml");
    std::fs::write(&file, yaml.replace("{data_dir}", &dir.path().join("data").to_string_lossy())).expect("write");
    crate::common::run_until_exit(&file)
}

/// A `server:` head with TLS requiring client certificates and a plain listener beside it (the
/// files do not exist: the combination is refused before any is read).
fn mtls_beside_plain(extra_server: &str) -> String {
    format!(
        "server:\n  plain_listen: 127.0.0.3:0\n{extra_server}  tls:\n    certificates:\n\
         \x20     - {{ cert_file: /nonexistent/cert.pem, key_file: /nonexistent/key.pem }}\n\
         \x20   client_ca_file: /nonexistent/clients.pem\n"
    )
}

/// C17: `server.tls.client_auth: required` does not bind `server.plain_listen`: the pair is
/// refused at start (naming both keys) and on reload, unless the plain listener is declared
/// trusted.
#[test]
fn required_client_certificates_beside_a_plain_listener_are_refused() {
    let out = start_refused(&BASE_CONFIG.replace("server:\n", &mtls_beside_plain("")));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("server.plain_listen")
            && stderr.contains("server.tls.client_auth")
            && stderr.contains("plain_listen_trusted"),
        "the refusal names both keys and the way out: {stderr}"
    );
    // Declared trusted: past that check (the start then fails on the missing certificate).
    let out = start_refused(&BASE_CONFIG.replace("server:\n", &mtls_beside_plain("  plain_listen_trusted: true\n")));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("/nonexistent/") && !stderr.contains("plain_listen_trusted"), "{stderr}");
    // A reload to that configuration is refused the same way, naming the field.
    let srv = TestServer::start("");
    let original = std::fs::read_to_string(srv.config_path()).expect("config");
    assert!(original.contains("server:\n"), "test setup: {original}");
    std::fs::write(srv.config_path(), original.replacen("server:\n", &mtls_beside_plain(""), 1)).expect("write");
    let r = srv.api("POST", "/v1/admin/reload", Some(srv.admin_key()), None);
    validation(&r, "server.plain_listen");
    assert!(r.text.contains("server.tls.client_auth"), "{r:?}");
}

/// C17: plain SMTP (`tls: none`) to a remote relay is refused in production unless allowed
/// explicitly; a relay on the loopback and development are as before.
#[test]
fn plain_smtp_to_a_remote_relay_is_refused_in_production() {
    let production = BASE_CONFIG.replace("environment: development", "environment: production");
    let smtp = |host: &str, extra: &str| format!("smtp:\n  host: {host}\n  tls: none\n  from: a@example.com\n{extra}");
    let check = |yaml: String| {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, yaml.replace("{data_dir}", &dir.path().join("data").to_string_lossy())).unwrap();
        Command::new(TestServer::binary()).arg("check-config").arg(&file).output().expect("check-config")
    };
    let out = check(format!("{production}{}", smtp("mail.example.com", "")));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("smtp.tls") && stderr.contains("allow_plaintext"), "{stderr}");
    let out = start_refused(&format!("{production}{}", smtp("mail.example.com", "")));
    assert!(String::from_utf8_lossy(&out.stderr).contains("smtp.tls"), "{out:?}");
    for yaml in [
        format!("{production}{}", smtp("mail.example.com", "  allow_plaintext: true\n")),
        format!("{production}{}", smtp("127.0.0.1", "")),
        format!("{BASE_CONFIG}{}", smtp("mail.example.com", "")),
    ] {
        let out = check(yaml.clone());
        assert!(out.status.success(), "{yaml}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// C17: a webhook URL naming an IPv6 address that carries an internal IPv4 address (IPv4-
/// compatible, 6to4, Teredo with its client address inverted) or a site-local one is refused
/// like the IPv4 address itself; the same forms of a public address are accepted.
#[test]
fn webhook_urls_hiding_an_internal_address_in_ipv6_are_refused() {
    // More creations than the `webhook` bucket's default burst of 10.
    let srv = TestServer::start(
        "rate_limits:\n  webhook: { requests_per_hour: unlimited, requests_per_minute: 600, burst: 100 }\n",
    );
    let admin = srv.admin_key();
    let create = |host: &str| {
        let body = json!({"url": format!("https://[{host}]/hook"), "events": ["error.critical"]});
        srv.api("POST", "/v1/webhooks", Some(admin), Some(body))
    };
    for host in [
        "::7f00:1",                       // IPv4-compatible 127.0.0.1
        "::a9fe:a9fe",                    // IPv4-compatible 169.254.169.254
        "fec0::1",                        // site-local
        "2002:7f00:1::1",                 // 6to4 of 127.0.0.1
        "2002:a9fe:a9fe::1",              // 6to4 of 169.254.169.254
        "2002:c0a8:101::1",               // 6to4 of 192.168.1.1
        "2001:0:5db8:d822:0:0:80ff:fffe", // Teredo, client 127.0.0.1 (inverted)
        "2001:0:5db8:d822::5601:5601",    // Teredo, client 169.254.169.254
        "2001:0:a00:1::a247:27dd",        // Teredo, server 10.0.0.1
    ] {
        let e = validation(&create(host), "url");
        assert!(e["details"]["issue"].as_str().unwrap().contains("inside the network"), "{host}: {e}");
    }
    for host in ["2002:5db8:d822::1", "2001:0:5db8:d822::a247:27dd"] {
        ok(&create(host), 201);
    }
}
