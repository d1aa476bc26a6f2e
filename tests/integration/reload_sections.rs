//! Reloading `jwt`, `smtp`, `web`, and the in-place fields of `webhooks` and `observability`
//! (`POST /v1/admin/reload`): each takes effect on the next request that reads it, and a field
//! read once at start is refused by name with nothing applied.

use crate::common::TestServer;
use crate::jwt::{claims, fixture, sign};
use serde_json::{json, Value};

const TENANT: &str = "organizations:\n  - { id: org_jwt, name: JWT Inc, tier: free }\n\
     users:\n  - { id: usr_dev, email: dev@jwt.test, name: Dev, role: developer, organization: org_jwt }\n";

/// Writes `text` as the server's configuration file and reloads it: (status, body).
fn reload_with(srv: &TestServer, text: &str) -> (u16, Value) {
    std::fs::write(srv.config_path(), text).unwrap();
    let r = srv.api("POST", "/v1/admin/reload", Some(srv.admin_key()), None);
    (r.status, r.json.clone())
}

#[test]
fn a_reload_puts_a_jwt_verifier_in_place_and_takes_it_away() {
    let srv = TestServer::start(TENANT);
    let original = std::fs::read_to_string(srv.config_path()).unwrap();
    let jwt = sign(Some("test"), claims(&["gateways:read"]), "test_rsa_private.pem");
    assert_eq!(srv.api("GET", "/v1/gateways", Some(&jwt), None).status, 401, "no jwt: configured yet");
    let with_jwt = format!(
        "{original}jwt:\n  leeway_secs: 5\n  keys:\n    - {{ kid: test, pem_file: {} }}\n",
        fixture("test_rsa_public.pem").display()
    );
    let (status, body) = reload_with(&srv, &with_jwt);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["changed"], json!(["jwt"]), "{body}");
    let r = srv.api("GET", "/v1/gateways", Some(&jwt), None);
    assert_eq!(r.status, 200, "the new verifier takes the token: {r:?}");
    let (status, body) = reload_with(&srv, &original);
    assert_eq!(status, 200, "{body}");
    assert_eq!(srv.api("GET", "/v1/gateways", Some(&jwt), None).status, 401, "the verifier is gone");
}

#[test]
fn a_reload_applies_webhook_hosts_smtp_and_log_retention_and_refuses_what_is_read_once() {
    let srv = TestServer::start("");
    let original = std::fs::read_to_string(srv.config_path()).unwrap();
    let admin = srv.admin_key().to_string();
    let hook = json!({ "url": "http://127.0.0.1:9/hook", "events": ["gateway.created"] });
    let alert = json!({ "type": "rate_limit", "threshold": 80, "notification": { "email": "ops@example.com" } });
    let r = srv.api("POST", "/v1/webhooks", Some(&admin), Some(hook.clone()));
    assert_eq!((r.status, r.error_code()), (400, "VALIDATION_ERROR"), "loopback refused: {r:?}");
    let r = srv.api("POST", "/v1/alerts", Some(&admin), Some(alert.clone()));
    assert_eq!((r.status, r.error_code()), (400, "VALIDATION_ERROR"), "no smtp: yet: {r:?}");

    let changed = format!(
        "{original}webhooks:\n  allowed_hosts: [127.0.0.1]\n  retry_schedule_secs: [1, 2]\n\
         smtp:\n  host: 127.0.0.1\n  port: 2525\n  tls: none\n  from: toolgate@example.com\n\
         observability:\n  max_log_rows: 5000\n  log_retention_days: 3\n"
    );
    let (status, body) = reload_with(&srv, &changed);
    assert_eq!(status, 200, "{body}");
    let mut sections: Vec<String> =
        body["data"]["changed"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    sections.sort();
    assert_eq!(sections, ["observability", "smtp", "webhooks"], "{body}");
    let r = srv.api("POST", "/v1/webhooks", Some(&admin), Some(hook));
    assert_eq!(r.status, 201, "an allowed host now: {r:?}");
    let r = srv.api("POST", "/v1/alerts", Some(&admin), Some(alert));
    assert_eq!(r.status, 201, "e-mail alerts now: {r:?}");

    // Read once at start: refused by name, and nothing of the file applied.
    for (field, text) in [
        ("webhooks.concurrency", changed.replace("  allowed_hosts: [127.0.0.1]\n", "  concurrency: 4\n")),
        ("observability.log_format", changed.replace("  max_log_rows: 5000\n", "  log_format: text\n")),
    ] {
        let (status, body) = reload_with(&srv, &text);
        assert_eq!(status, 409, "{field}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(field) && message.contains("--upgrade"), "{field}: {body}");
    }
    let r = srv.api(
        "POST",
        "/v1/webhooks",
        Some(&admin),
        Some(json!({ "url": "http://127.0.0.1:9/again", "events": ["*"] })),
    );
    assert_eq!(r.status, 201, "the refused files changed nothing: {r:?}");
}

#[test]
fn a_reload_changes_the_session_caps_for_new_sessions_and_keeps_the_live_ones() {
    use crate::security_mcp::{call_time, gateway, initialize, initialize_raw};
    let srv = TestServer::start("mcp:\n  max_sessions_per_key: 1\n");
    let original = std::fs::read_to_string(srv.config_path()).unwrap();
    let admin = srv.admin_key().to_string();
    let (gw, key) = gateway(&srv, &admin);
    let first = initialize(&srv, &gw, &key);
    assert_eq!(initialize_raw(&srv, &gw, &key).status, 429, "the cap of 1");

    let (status, body) = reload_with(&srv, &original.replace("max_sessions_per_key: 1", "max_sessions_per_key: 3"));
    assert_eq!((status, &body["data"]["changed"]), (200, &json!(["mcp"])), "{body}");
    let second = initialize(&srv, &gw, &key);
    let third = initialize(&srv, &gw, &key);

    // Lowered below the live count: new sessions are refused, the live ones go on.
    let (status, body) = reload_with(&srv, &original);
    assert_eq!(status, 200, "{body}");
    let r = initialize_raw(&srv, &gw, &key);
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.json()["error"]["data"]["limit"], 1, "{}", r.body);
    for session in [&first, &second, &third] {
        assert_eq!(call_time(&srv, &gw, &key, session).status, 200);
    }
}

#[test]
fn a_reload_shortens_the_session_idle_timeout_for_the_live_sessions() {
    use crate::security_mcp::{call_time, gateway, initialize};
    let srv = TestServer::start("mcp:\n  session_idle_timeout_secs: 3600\n");
    let original = std::fs::read_to_string(srv.config_path()).unwrap();
    let admin = srv.admin_key().to_string();
    let (gw, key) = gateway(&srv, &admin);
    let session = initialize(&srv, &gw, &key);
    // Idle time passing is the behaviour under test: 1.5 s idle, within an hour's time-out...
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(call_time(&srv, &gw, &key, &session).status, 200, "an hour's idle time-out");

    let shorter = original.replace("session_idle_timeout_secs: 3600", "session_idle_timeout_secs: 1");
    let (status, body) = reload_with(&srv, &shorter);
    assert_eq!((status, &body["data"]["changed"]), (200, &json!(["mcp"])), "{body}");
    // ...and 1.5 s idle again, past the new 1 s time-out.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let r = call_time(&srv, &gw, &key, &session);
    assert_eq!(r.status, 404, "idle past the new time-out: the session has ended: {}", r.body);
    let fresh = initialize(&srv, &gw, &key);
    assert_eq!(call_time(&srv, &gw, &key, &fresh).status, 200, "a new session works");
}

#[test]
fn a_reload_applies_web_in_place_and_refuses_a_new_path() {
    let srv = TestServer::start("");
    let original = std::fs::read_to_string(srv.config_path()).unwrap();
    let metadata = || srv.api("GET", "/.well-known/oauth-authorization-server", None, None).json.clone();
    let register = || {
        let client = json!({ "client_name": "Reloaded", "redirect_uris": ["http://127.0.0.1:9/cb"] });
        srv.api("POST", "/auth/oauth/register", None, Some(client))
    };
    assert!(metadata()["registration_endpoint"].is_null(), "off by default: {}", metadata());
    let refused = |r: &crate::common::Resp| r.status == 400 && r.json["error"] == "access_denied";
    let r = register();
    assert!(refused(&r), "registration is off: {r:?}");

    let (status, body) = reload_with(&srv, &format!("{original}web:\n  dynamic_registration: true\n"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["changed"], json!(["web"]), "{body}");
    let doc = metadata();
    assert!(doc["registration_endpoint"].as_str().unwrap_or_default().ends_with("/auth/oauth/register"), "{doc}");
    let r = register();
    assert_eq!(r.status, 201, "registration is on after the reload: {r:?}");

    let moved = format!("{original}web:\n  dynamic_registration: false\n  path: /signin\n");
    let (status, body) = reload_with(&srv, &moved);
    assert_eq!(status, 409, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("web.path") && message.contains("--upgrade"), "{body}");
    assert!(metadata()["registration_endpoint"].is_string(), "the refused file changed nothing");

    let (status, body) = reload_with(&srv, &original);
    assert_eq!(status, 200, "{body}");
    assert!(metadata()["registration_endpoint"].is_null(), "off again: {}", metadata());
    let r = register();
    assert!(refused(&r), "registration is off again: {r:?}");
}
