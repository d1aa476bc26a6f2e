//! `GET /v1/logs`: the request log of the caller's organisation, newest first, as the spec's Log
//! entry, with its filters validated (a bad value is a 400 naming the field) and organisations
//! kept apart. Entries are made by real `tools/call`s through a gateway to the built-in `time` app.

use crate::common::{declared_key, TestServer};
use serde_json::{json, Value};
use std::time::Duration;

/// Initializes an MCP session on `gw` with `key` and makes one `tools/call` per `timezone`.
fn call_time(srv: &TestServer, gw: &str, key: &str, timezones: &[&str]) {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).no_proxy().build().unwrap();
    let url = srv.url(&format!("/gateway/{gw}/mcp"));
    let post = |session: Option<&str>, body: Value| {
        let mut req = client
            .post(&url)
            .header("X-API-Key", key)
            .header("Accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(s) = session {
            req = req.header("Mcp-Session-Id", s);
        }
        req.send().unwrap()
    };
    let init = post(
        None,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
            "capabilities": {}, "clientInfo": {"name": "api_logs", "version": "1"}}}),
    );
    assert_eq!(init.status(), 200);
    let session = init.headers()["mcp-session-id"].to_str().unwrap().to_string();
    for (i, tz) in timezones.iter().enumerate() {
        let r = post(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                "params": {"name": "get_current_time", "arguments": {"timezone": tz, "format": "YYYY"}}}),
        );
        assert_eq!(r.status(), 200);
        let body: Value = r.json().unwrap();
        assert!(body["result"].is_object(), "a tool result (isError or not): {body}");
    }
}

fn logs(srv: &TestServer, key: &str, query: &str) -> Value {
    let r = srv.api("GET", &format!("/v1/logs{query}"), Some(key), None);
    assert_eq!(r.status, 200, "{query}: {r:?}");
    r.data().clone()
}

fn refused_field(srv: &TestServer, key: &str, query: &str) -> String {
    let r = srv.api("GET", &format!("/v1/logs{query}"), Some(key), None);
    assert_eq!((r.status, r.error_code()), (400, "VALIDATION_ERROR"), "{query}: {r:?}");
    r.json["error"]["details"]["field"].as_str().unwrap_or_default().to_string()
}

#[test]
fn the_log_lists_calls_newest_first_filters_them_and_keeps_organisations_apart() {
    let (other_key, other_yaml) = declared_key("key_other", "usr_other", &["*"]);
    let srv = TestServer::start(&format!(
        "organizations:\n  - {{ id: org_other, name: Other, tier: free }}\n\
         users:\n  - {{ id: usr_other, email: o@other.test, name: O, role: owner, organization: org_other }}\n\
         api_keys:\n{other_yaml}"
    ));
    let admin = srv.admin_key().to_string();
    let g = srv.api("POST", "/v1/gateways", Some(&admin), Some(json!({"name": "logged", "servers": ["time"]})));
    assert_eq!(g.status, 201, "{g:?}");
    let (gw, gw_key) =
        (g.data()["id"].as_str().unwrap().to_string(), g.data()["api_key"].as_str().unwrap().to_string());
    assert_eq!(logs(&srv, &admin, "")["logs"], json!([]), "nothing called yet");

    // A success, then a tool error (an unknown zone is an `isError` result).
    call_time(&srv, &gw, &gw_key, &["UTC", "Not/AZone"]);
    let all = logs(&srv, &admin, "");
    let entries = all["logs"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{all}");
    assert_eq!(all["pagination"]["total"], 2, "{all}");
    let (newest, oldest) = (&entries[0], &entries[1]);
    assert_eq!(newest["status"], "error", "newest first: {all}");
    assert_eq!(oldest["status"], "success", "{all}");
    for e in entries {
        assert!(e["id"].as_str().is_some_and(|id| !id.is_empty()), "{e}");
        let ts = e["timestamp"].as_str().unwrap();
        assert!(chrono::DateTime::parse_from_rfc3339(ts).is_ok() && ts.contains('.'), "ISO 8601 with ms: {e}");
        assert_eq!(
            (&e["gateway_id"], &e["app"], &e["function"]),
            (&json!(gw), &json!("time"), &json!("get_current_time"))
        );
        assert!(e["duration"].is_u64(), "{e}");
        assert_eq!(e["response"]["status"], 200, "{e}");
    }
    assert_eq!(oldest["request"]["params"], json!({"timezone": "UTC", "format": "YYYY"}), "{oldest}");
    assert_eq!(newest["request"]["params"], json!({"timezone": "Not/AZone", "format": "YYYY"}), "{newest}");
    assert!(oldest["timestamp"].as_str() <= newest["timestamp"].as_str());

    // Filters.
    let only = |q: &str| logs(&srv, &admin, q)["logs"].as_array().unwrap().len();
    assert_eq!(only("?status=error"), 1);
    assert_eq!(only("?status=success"), 1);
    assert_eq!(only("?app_id=time"), 2);
    assert_eq!(only("?app_id=other"), 0);
    assert_eq!(only(&format!("?gateway_id={gw}")), 2);
    assert_eq!(only("?gateway_id=gw_elsewhere"), 0);
    assert_eq!(only("?start_date=2999-01-01"), 0, "a range in the future");
    assert_eq!(only("?start_date=2000-01-01T00:00:00Z&end_date=2999-12-31"), 2);
    // Pages of one, newest first.
    let page2 = logs(&srv, &admin, "?limit=1&page=2");
    assert_eq!(page2["logs"][0]["id"], oldest["id"], "{page2}");
    assert_eq!(
        (page2["pagination"]["pages"].clone(), page2["pagination"]["has_next"].clone()),
        (json!(2), json!(false))
    );

    // Bad filters name their field.
    assert_eq!(refused_field(&srv, &admin, "?status=failed"), "status");
    assert_eq!(refused_field(&srv, &admin, "?start_date=yesterday"), "start_date");
    assert_eq!(refused_field(&srv, &admin, "?end_date=2026-13-40"), "end_date");
    assert_eq!(refused_field(&srv, &admin, "?start_date=2026-02-01&end_date=2026-01-01"), "end_date");
    assert_eq!(refused_field(&srv, &admin, "?limit=101"), "limit");
    assert_eq!(refused_field(&srv, &admin, "?page=0"), "page");

    // Another organisation sees none of it, even naming the gateway.
    assert_eq!(logs(&srv, &other_key, "")["logs"], json!([]));
    assert_eq!(logs(&srv, &other_key, &format!("?gateway_id={gw}"))["logs"], json!([]));
    // The gateway's own key is no management credential for the log.
    let r = srv.api("GET", "/v1/logs", Some(&gw_key), None);
    assert!(matches!(r.status, 401 | 403), "{r:?}");
}
